/* diag.c - struct ddpc_diag: collecting, ordering and printing diagnostics.
 *
 * Owns the three output formats (text, json, github). Never decides what is
 * an error; the loader and validator do. Out of memory while recording a
 * diagnostic still counts it (n_errors), so a failing spec never passes.
 */
#include "diag.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

void diag_init(struct ddpc_diag *d)
{
    memset(d, 0, sizeof *d);
}

void diag_free(struct ddpc_diag *d)
{
    for (int i = 0; i < d->n; i++) {
        free(d->v[i].file);
        free(d->v[i].path);
        free(d->v[i].message);
    }
    free(d->v);
    memset(d, 0, sizeof *d);
}

static const struct ddpc_rule_info rules[DDPC_R_COUNT] = {
#define DDPC_RULE(id, sev, code, doc) [DDPC_R_##id] = { DDPC_SEV_##sev, code, doc },
#include "rules.def"
#undef DDPC_RULE
};

const struct ddpc_rule_info *diag_rule_info(int r)
{
    return r >= 0 && r < DDPC_R_COUNT ? &rules[r] : NULL;
}

static void diag_addv(struct ddpc_diag *d, enum ddpc_rule rule, const char *file, int line,
                      int col, const char *path, const char *fmt, va_list args)
{
    enum ddpc_severity sev = rules[rule].severity;
    if (sev == DDPC_SEV_ERROR)
        d->n_errors++;
    else if (sev == DDPC_SEV_WARNING)
        d->n_warnings++;
    if (d->n == d->cap) {
        int cap = d->cap ? d->cap * 2 : 16;
        struct ddpc_diag_entry *v = realloc(d->v, (size_t)cap * sizeof *v);
        if (!v)
            return;
        d->v = v;
        d->cap = cap;
    }
    va_list ap;
    va_copy(ap, args);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *msg = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (msg) {
        va_copy(ap, args);
        vsnprintf(msg, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    char *f = strdup(file ? file : "");
    char *p = strdup(path ? path : "");
    if (!msg || !f || !p) {
        free(msg);
        free(f);
        free(p);
        return;
    }
    /* one finding is one line: key paths and messages quote spec text, which
     * may hold control characters ("a\nb" as a key) */
    for (char *q = msg; *q; q++)
        if ((unsigned char)*q < 0x20 || *q == 0x7f)
            *q = '?';
    for (char *q = p; *q; q++)
        if ((unsigned char)*q < 0x20 || *q == 0x7f)
            *q = '?';
    struct ddpc_diag_entry *e = &d->v[d->n++];
    e->severity = sev;
    e->file = f;
    e->line = line;
    e->col = col;
    e->path = p;
    e->message = msg;
    e->rule = rule;
}

void diag_add(struct ddpc_diag *d, enum ddpc_severity sev, const char *file, int line, int col,
              const char *path, const char *fmt, ...)
{
    /* the unclassified rules are in the severities' order */
    enum ddpc_rule r = sev == DDPC_SEV_ERROR ? DDPC_R_ERROR
                       : sev == DDPC_SEV_WARNING ? DDPC_R_WARNING : DDPC_R_NOTE;
    va_list ap;
    va_start(ap, fmt);
    diag_addv(d, r, file, line, col, path, fmt, ap);
    va_end(ap);
}

void diag_rule(struct ddpc_diag *d, enum ddpc_rule r, const char *file, int line, int col,
               const char *path, const char *fmt, ...)
{
    if ((int)r < 0 || r >= DDPC_R_COUNT)
        r = DDPC_R_ERROR;
    va_list ap;
    va_start(ap, fmt);
    diag_addv(d, r, file, line, col, path, fmt, ap);
    va_end(ap);
}

static int entry_cmp(const struct ddpc_diag_entry *a, const struct ddpc_diag_entry *b)
{
    int r = strcmp(a->file, b->file);
    if (r)
        return r;
    if (a->line != b->line)
        return a->line < b->line ? -1 : 1;
    if (a->col != b->col)
        return a->col < b->col ? -1 : 1;
    return 0;
}

/* Stable merge sort of v[0..n) using tmp; qsort is not stable and the order
 * of two findings at one node (the order the validator found them) matters. */
static void merge_sort(struct ddpc_diag_entry *v, struct ddpc_diag_entry *tmp, int n)
{
    if (n < 2)
        return;
    int h = n / 2;
    merge_sort(v, tmp, h);
    merge_sort(v + h, tmp, n - h);
    int i = 0, j = h, k = 0;
    while (i < h && j < n)
        tmp[k++] = entry_cmp(&v[j], &v[i]) < 0 ? v[j++] : v[i++];
    while (i < h)
        tmp[k++] = v[i++];
    while (j < n)
        tmp[k++] = v[j++];
    memcpy(v, tmp, (size_t)n * sizeof *v);
}

void diag_sort_from(struct ddpc_diag *d, int from)
{
    int n = d->n - from;
    if (n < 2)
        return;
    struct ddpc_diag_entry *tmp = malloc((size_t)n * sizeof *tmp);
    if (!tmp)
        return;   /* unsorted output beats none */
    merge_sort(d->v + from, tmp, n);
    free(tmp);
}

void diag_sort(struct ddpc_diag *d)
{
    diag_sort_from(d, 0);
}

static const char *sev_name(enum ddpc_severity s)
{
    return s == DDPC_SEV_ERROR ? "error" : s == DDPC_SEV_WARNING ? "warning" : "note";
}

void diag_json_string(FILE *out, const char *s)
{
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", out); break;
        case '\\': fputs("\\\\", out); break;
        case '\n': fputs("\\n", out); break;
        case '\r': fputs("\\r", out); break;
        case '\t': fputs("\\t", out); break;
        default:
            if (*p < 0x20)
                fprintf(out, "\\u%04x", *p);
            else
                fputc(*p, out);
        }
    }
    fputc('"', out);
}

/* GitHub workflow-command escaping: data escapes %, CR, LF; property values
 * also escape ':' and ','. */
static void gh_escape(FILE *out, const char *s, int property)
{
    for (const char *p = s; *p; p++) {
        if (*p == '%')
            fputs("%25", out);
        else if (*p == '\r')
            fputs("%0D", out);
        else if (*p == '\n')
            fputs("%0A", out);
        else if (property && *p == ':')
            fputs("%3A", out);
        else if (property && *p == ',')
            fputs("%2C", out);
        else
            fputc(*p, out);
    }
}

void diag_print_entry(const struct ddpc_diag_entry *e, enum ddpc_diag_format fmt, FILE *out)
{
    switch (fmt) {
    case DDPC_FMT_TEXT:
        if (e->line > 0)
            fprintf(out, "%s:%d:%d: %s: ", e->file, e->line, e->col, sev_name(e->severity));
        else
            fprintf(out, "%s: %s: ", e->file, sev_name(e->severity));
        if (e->path[0])
            fprintf(out, "%s: ", e->path);
        fprintf(out, "%s\n", e->message);
        break;
    case DDPC_FMT_GITHUB:
        /* GitHub has error, warning and notice */
        fprintf(out, "::%s", e->severity == DDPC_SEV_NOTE ? "notice" : sev_name(e->severity));
        if (strncmp(e->file, "--set ", 6) == 0) {
            /* a command-line override is no file: the annotation names it */
            fputs("::", out);
            gh_escape(out, e->file, 0);
            fputs(": ", out);
        } else {
            fputs(" file=", out);
            gh_escape(out, e->file, 1);
            if (e->line > 0)
                fprintf(out, ",line=%d,col=%d", e->line, e->col);
            fputs("::", out);
        }
        if (e->path[0]) {
            gh_escape(out, e->path, 0);
            fputs(": ", out);
        }
        gh_escape(out, e->message, 0);
        fputc('\n', out);
        break;
    case DDPC_FMT_JSON:
        fputs("{\"file\":", out);
        diag_json_string(out, e->file);
        fprintf(out, ",\"line\":%d,\"col\":%d,\"severity\":\"%s\",\"rule\":\"%s\",\"path\":",
                e->line, e->col, sev_name(e->severity), rules[e->rule].code);
        diag_json_string(out, e->path);
        fputs(",\"message\":", out);
        diag_json_string(out, e->message);
        fputc('}', out);
        break;
    }
}

void diag_print(const struct ddpc_diag *d, int from, enum ddpc_diag_format fmt, FILE *out)
{
    if (fmt == DDPC_FMT_JSON)
        fputc('[', out);
    for (int i = from; i < d->n; i++) {
        if (fmt == DDPC_FMT_JSON)
            fputs(i > from ? ",\n " : "\n ", out);
        diag_print_entry(&d->v[i], fmt, out);
    }
    if (fmt == DDPC_FMT_JSON)
        fputs(d->n > from ? "\n]\n" : "]\n", out);
}
