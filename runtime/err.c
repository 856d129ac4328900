/* err.c - struct ddpc_err: recording the first failure of a runtime call.
 *
 * Owns ddpc_err_set / ddpc_err_clear (err.h). Never prints, never exits:
 * the worker's or launcher's top level decides what a failure means.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "err.h"

int ddpc_err_set(struct ddpc_err *e, int code, const char *file, int line,
                 const char *fmt, ...)
{
    /* The first error is the cause; later ones are usually its echoes
     * (a timeout, then the abort it triggers), so they are dropped. */
    if (!e || e->code != DDPC_OK)
        return code;
    e->code = code;
    e->file = file;
    e->line = line;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    if (n >= (int)sizeof e->msg) {
        /* too long (a long path in it): the cut says so, at a character's
         * start, instead of ending mid-word as if that were all */
        static const char more[] = " [...]";
        size_t at = sizeof e->msg - sizeof more;
        while (at > 0 && ((unsigned char)e->msg[at] & 0xC0) == 0x80)
            at--;
        memcpy(e->msg + at, more, sizeof more);
    }
    return code;
}

void ddpc_err_clear(struct ddpc_err *e)
{
    if (!e)
        return;
    e->code = DDPC_OK;
    e->file = NULL;
    e->line = 0;
    e->msg[0] = '\0';
}
