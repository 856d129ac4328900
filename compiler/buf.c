/* buf.c - growable byte buffer and the C, JSON and shell escapers.
 *
 * Owns: how untrusted spec strings are spelled in generated files.
 * Never: prints, exits, or lets an input byte through unescaped when it
 * could end a literal, start an m4 construct or close a C comment.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "buf.h"

void buf_init(struct ddpc_buf *b)
{
    memset(b, 0, sizeof *b);
}

void buf_free(struct ddpc_buf *b)
{
    free(b->s);
    memset(b, 0, sizeof *b);
}

/* Makes room for n more bytes plus the NUL; 0 ok, -1 (and oom set) if not. */
static int buf_reserve(struct ddpc_buf *b, size_t n)
{
    if (b->oom)
        return -1;
    if (b->len + n + 1 <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n + 1) {
        if (cap > (size_t)-1 / 2) {
            b->oom = 1;
            return -1;
        }
        cap *= 2;
    }
    char *s = realloc(b->s, cap);
    if (!s) {
        b->oom = 1;
        return -1;
    }
    b->s = s;
    b->cap = cap;
    return 0;
}

void buf_add(struct ddpc_buf *b, const void *p, size_t n)
{
    if (buf_reserve(b, n) != 0)
        return;
    if (n)
        memcpy(b->s + b->len, p, n);
    b->len += n;
    b->s[b->len] = '\0';
}

void buf_puts(struct ddpc_buf *b, const char *s)
{
    buf_add(b, s, strlen(s));
}

void buf_printf(struct ddpc_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->oom = 1;    /* an encoding error: treat like a failed write */
        return;
    }
    if (buf_reserve(b, (size_t)n) != 0)
        return;
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

char *buf_take(struct ddpc_buf *b)
{
    if (b->oom) {
        buf_free(b);
        return NULL;
    }
    if (!b->s)
        buf_add(b, "", 0);
    char *s = b->s;
    if (b->oom)
        s = NULL;
    memset(b, 0, sizeof *b);
    return s;
}

/* ---- C ---- */

/* Bytes a C literal may hold as themselves: printable ASCII minus the ones
 * that end a literal (" \), form trigraphs (?), close a comment (*), or mean
 * something to m4 or a shell ($ ` ' #). */
static int c_plain(unsigned char c)
{
    return c >= 0x20 && c < 0x7f && !strchr("\\\"?*$`'#", c);
}

void buf_c_str(struct ddpc_buf *b, const char *s, size_t n)
{
    buf_add(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c_plain(c)) {
            buf_add(b, &c, 1);
        } else {
            char esc[5];
            snprintf(esc, sizeof esc, "\\%03o", c);
            buf_add(b, esc, 4);
        }
    }
    buf_add(b, "\"", 1);
}

void buf_c_str_or_null(struct ddpc_buf *b, const char *s)
{
    if (!s)
        buf_puts(b, "NULL");
    else
        buf_c_str(b, s, strlen(s));
}

/* ---- JSON ---- */

/* Decodes one UTF-8 sequence at s (NUL-terminated); returns its length and
 * sets *cp, or 0 when the bytes are not valid UTF-8 (overlong, surrogate,
 * above U+10FFFF, truncated). */
static int utf8_decode(const unsigned char *s, unsigned *cp)
{
    unsigned c = s[0];
    int n;
    unsigned min;
    if (c < 0x80) {
        *cp = c;
        return 1;
    } else if ((c & 0xe0) == 0xc0) {
        n = 2; min = 0x80; c &= 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
        n = 3; min = 0x800; c &= 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
        n = 4; min = 0x10000; c &= 0x07;
    } else {
        return 0;
    }
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        c = (c << 6) | (s[i] & 0x3f);
    }
    if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
        return 0;
    *cp = c;
    return n;
}

void buf_json_str(struct ddpc_buf *b, const char *s)
{
    if (!s) {
        buf_puts(b, "null");
        return;
    }
    const unsigned char *p = (const unsigned char *)s;
    buf_add(b, "\"", 1);
    while (*p) {
        unsigned cp;
        int n = utf8_decode(p, &cp);
        if (n == 0) {
            cp = 0xfffd;
            n = 1;
        }
        p += n;
        if (cp == '"') {
            buf_puts(b, "\\\"");
        } else if (cp == '\\') {
            buf_puts(b, "\\\\");
        } else if (cp >= 0x20 && cp < 0x7f && !strchr("$`'#*?", (int)cp)) {
            char c = (char)cp;
            buf_add(b, &c, 1);
        } else if (cp < 0x10000) {
            buf_printf(b, "\\u%04x", cp);
        } else {
            cp -= 0x10000;
            buf_printf(b, "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
        }
    }
    buf_add(b, "\"", 1);
}

void buf_json_num(struct ddpc_buf *b, double v)
{
    if (!isfinite(v))
        buf_puts(b, "null");
    else
        buf_printf(b, "%.17g", v);
}

/* ---- shell ---- */

static int sh_plain(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("._-/:=@%+,", c));
}

void buf_sh_word(struct ddpc_buf *b, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    if (!*p) {
        buf_puts(b, "''");
        return;
    }
    for (; *p; p++) {
        unsigned char c = *p;
        if (sh_plain(c)) {
            buf_add(b, &c, 1);
        } else if (c >= 0x20 && c < 0x7f && c != '\'' && c != '$') {
            /* one byte per quote run: longer runs would read better but
             * this is trivially right */
            char q[3] = { '\'', (char)c, '\'' };
            buf_add(b, q, 3);
        } else {
            /* ' $ and non-printable bytes: ANSI-C quoting, so no '$' is ever
             * followed by anything m4 would substitute */
            buf_printf(b, "$'\\%03o'", c);
        }
    }
}
