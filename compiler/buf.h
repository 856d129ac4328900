/* buf.h - a growable byte buffer and the escapers the compiler writes with.
 *
 * defines: buf_init, buf_free, buf_add, buf_printf, buf_c_str, buf_json_str,
 *          buf_sh_word, buf_take
 *
 * Rules this file keeps:
 *   - every escaper turns untrusted bytes into printable ASCII only, so the
 *     result can be handed to m4 inside quotes made of non-ASCII bytes; the
 *     C and JSON escapers never produce '$', '`', '\'', '#', '*' or '?', so
 *     their output can also sit in a C comment (no star-slash) unchanged;
 *   - on allocation failure the buffer remembers it (oom) and further calls
 *     do nothing: callers check buf.oom once, at the end.
 *   - never prints, never exits.
 */
#ifndef DDPC_BUF_H
#define DDPC_BUF_H

#include <stddef.h>

struct ddpc_buf {
    char  *s;      /* NUL-terminated while len > 0 or after any add; owned */
    size_t len;
    size_t cap;
    int    oom;    /* 1 after a failed allocation */
};

void buf_init(struct ddpc_buf *b);
void buf_free(struct ddpc_buf *b);                 /* safe on a zeroed buffer */
void buf_add(struct ddpc_buf *b, const void *p, size_t n);
void buf_puts(struct ddpc_buf *b, const char *s);
void buf_printf(struct ddpc_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Returns the string (the caller frees it) and resets b; NULL after oom. */
char *buf_take(struct ddpc_buf *b);

/* A C string literal, quotes included, of n bytes: printable ASCII stays,
 * except \ " ? * $ ` ' # which, like every other byte, become three-digit
 * octal escapes (three digits, so a following digit is never absorbed). */
void buf_c_str(struct ddpc_buf *b, const char *s, size_t n);
/* buf_c_str for a NUL-terminated string, or NULL for a null pointer. */
void buf_c_str_or_null(struct ddpc_buf *b, const char *s);
/* A JSON string, quotes included; pure ASCII out: valid UTF-8 sequences
 * become \uXXXX (surrogate pairs above U+FFFF), invalid bytes U+FFFD, and
 * control characters and $ ` ' # * are \u-escaped as well. NULL gives null. */
void buf_json_str(struct ddpc_buf *b, const char *s);
/* A double as JSON: %.17g (round-trips), null when not finite. */
void buf_json_num(struct ddpc_buf *b, double v);
/* One shell word that bash reads back as exactly s: safe characters as they
 * are, the rest single-quoted, and '$' and bytes outside printable ASCII as
 * $'\ooo' (ANSI-C quoting). The word never holds a '$' followed by a digit,
 * '#', '*', '@' or '{' (m4 argument syntax). */
void buf_sh_word(struct ddpc_buf *b, const char *s);

#endif /* DDPC_BUF_H */
