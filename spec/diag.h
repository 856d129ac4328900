/* diag.h - struct ddpc_diag: positioned diagnostics for specs.
 *
 * Every problem found in a spec is one entry: file:line:col, severity, the
 * dotted key path and a message. Entries are collected, never fatal, so one
 * run reports every error in a file. Printing formats: text
 * (`file:line:col: error: key.path: message`), json, github (Actions
 * annotations). Lines and columns are 1-based (libyaml's marks + 1).
 * Each entry has a rule (spec/rules.def): a stable code such as
 * "E-unknown-key" that the JSON output carries for CI to filter on.
 */
#ifndef DDPC_DIAG_H
#define DDPC_DIAG_H

#include <stdio.h>

enum ddpc_severity { DDPC_SEV_ERROR, DDPC_SEV_WARNING, DDPC_SEV_NOTE };
enum ddpc_diag_format { DDPC_FMT_TEXT, DDPC_FMT_JSON, DDPC_FMT_GITHUB };

/* DDPC_R_ERROR, DDPC_R_UNKNOWN_KEY, ...: one per row of rules.def. The
 * first three (ERROR, WARNING, NOTE) have the DDPC_SEV_ values' order. */
enum ddpc_rule {
#define DDPC_RULE(id, sev, code, doc) DDPC_R_##id,
#include "rules.def"
#undef DDPC_RULE
    DDPC_R_COUNT
};

struct ddpc_rule_info {
    enum ddpc_severity severity;
    const char *code;   /* "E-unknown-key" */
    const char *doc;    /* what it finds */
};
/* The row of rule r (rules.def); NULL past the end. */
const struct ddpc_rule_info *diag_rule_info(int r);

struct ddpc_diag_entry {
    enum ddpc_severity severity;
    char *file;        /* owned; "--set KEY=VALUE" for a command-line override (line 0) */
    int   line, col;   /* 1-based; 0 when the problem has no position (I/O) */
    char *path;        /* dotted key path, "" for the document; owned */
    char *message;     /* owned */
    enum ddpc_rule rule;
};

struct ddpc_diag {
    struct ddpc_diag_entry *v;
    int n, cap;
    int n_errors, n_warnings;
    int io_error;      /* 1 when a file could not be read at all (exit 2) */
};

void diag_init(struct ddpc_diag *d);
void diag_free(struct ddpc_diag *d);   /* safe on a zeroed or freed diag */
/* Appends one entry; copies file, path and the formatted message. Its rule
 * is the unclassified one of its severity (E-other, ...): a spec's findings
 * use diag_rule. */
void diag_add(struct ddpc_diag *d, enum ddpc_severity sev, const char *file, int line,
              int col, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));
/* The same for a finding of rule r, with r's severity. */
void diag_rule(struct ddpc_diag *d, enum ddpc_rule r, const char *file, int line, int col,
               const char *path, const char *fmt, ...) __attribute__((format(printf, 7, 8)));
/* Sorts entries by file, line, col (stable), for output in source order. */
void diag_sort(struct ddpc_diag *d);
/* The same for entries [from, d->n) only (one file's findings). */
void diag_sort_from(struct ddpc_diag *d, int from);
/* Prints entries [from, d->n) in the given format. JSON prints one array
 * (`[` ... `]`) of objects {file, line, col, severity, rule, path,
 * message}; to print several files as one array, collect them in one diag
 * first. */
void diag_print(const struct ddpc_diag *d, int from, enum ddpc_diag_format fmt, FILE *out);
/* s as a JSON string, quotes included. */
void diag_json_string(FILE *out, const char *s);
/* Prints one entry: a text or github line (with newline), or a JSON object
 * (no newline, no comma). */
void diag_print_entry(const struct ddpc_diag_entry *e, enum ddpc_diag_format fmt, FILE *out);

#endif /* DDPC_DIAG_H */
