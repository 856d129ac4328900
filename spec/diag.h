/* diag.h - struct ddpc_diag: positioned diagnostics for specs.
 *
 * Every problem found in a spec is one entry: file:line:col, severity, the
 * dotted key path and a message. Entries are collected, never fatal, so one
 * run reports every error in a file. Printing formats: text
 * (`file:line:col: error: key.path: message`), json, github (Actions
 * annotations). Lines and columns are 1-based (libyaml's marks + 1).
 */
#ifndef DDPC_DIAG_H
#define DDPC_DIAG_H

#include <stdio.h>

enum ddpc_severity { DDPC_SEV_ERROR, DDPC_SEV_WARNING, DDPC_SEV_NOTE };
enum ddpc_diag_format { DDPC_FMT_TEXT, DDPC_FMT_JSON, DDPC_FMT_GITHUB };

struct ddpc_diag_entry {
    enum ddpc_severity severity;
    char *file;        /* owned; "--set KEY=VALUE" for a command-line override (line 0) */
    int   line, col;   /* 1-based; 0 when the problem has no position (I/O) */
    char *path;        /* dotted key path, "" for the document; owned */
    char *message;     /* owned */
};

struct ddpc_diag {
    struct ddpc_diag_entry *v;
    int n, cap;
    int n_errors, n_warnings;
    int io_error;      /* 1 when a file could not be read at all (exit 2) */
};

void diag_init(struct ddpc_diag *d);
void diag_free(struct ddpc_diag *d);   /* safe on a zeroed or freed diag */
/* Appends one entry; copies file, path and the formatted message. */
void diag_add(struct ddpc_diag *d, enum ddpc_severity sev, const char *file, int line,
              int col, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));
/* Sorts entries by file, line, col (stable), for output in source order. */
void diag_sort(struct ddpc_diag *d);
/* The same for entries [from, d->n) only (one file's findings). */
void diag_sort_from(struct ddpc_diag *d, int from);
/* Prints entries [from, d->n) in the given format. JSON prints one array
 * (`[` ... `]`) of objects {file, line, col, severity, path, message}; to
 * print several files as one array, collect them in one diag first. */
void diag_print(const struct ddpc_diag *d, int from, enum ddpc_diag_format fmt, FILE *out);
/* Prints one entry: a text or github line (with newline), or a JSON object
 * (no newline, no comma). */
void diag_print_entry(const struct ddpc_diag_entry *e, enum ddpc_diag_format fmt, FILE *out);

#endif /* DDPC_DIAG_H */
