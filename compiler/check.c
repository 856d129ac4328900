/* check.c - the `ddpc check` and `ddpc schema` subcommands.
 *
 * Owns option parsing, output formats and exit statuses of the two
 * subcommands; all spec knowledge is behind spec.h. Diagnostics go to
 * stdout (so CI can capture or pipe them), the summary line and usage
 * errors to stderr.
 */
#include "check.h"

#include <stdio.h>
#include <string.h>

#include "spec.h"

static void check_usage(FILE *out)
{
    fputs("usage: ddpc check [--format text|json|github] [--strict] [--quiet] [--no-data] FILE...\n"
          "  --format F  text (file:line:col: error: key: message), json, or github annotations\n"
          "  --strict    warnings fail the check (exit 1)\n"
          "  --quiet     print only what fails the check; nothing on success\n"
          "  --no-data   do not read data headers or check the resume path\n"
          "exit: 0 valid (warnings allowed), 1 invalid, 2 usage or I/O error\n", out);
}

static int parse_format(const char *s, enum ddpc_diag_format *f)
{
    if (strcmp(s, "text") == 0)
        *f = DDPC_FMT_TEXT;
    else if (strcmp(s, "json") == 0)
        *f = DDPC_FMT_JSON;
    else if (strcmp(s, "github") == 0)
        *f = DDPC_FMT_GITHUB;
    else
        return -1;
    return 0;
}

/* "--format X" or "--format=X": returns the value, advancing *i; NULL when
 * arg is not this option. *missing is set when the value is absent. */
static const char *opt_value(int argc, char **argv, int *i, const char *name, int *missing)
{
    size_t l = strlen(name);
    const char *a = argv[*i];
    *missing = 0;
    if (strncmp(a, name, l) != 0)
        return NULL;
    if (a[l] == '=')
        return a + l + 1;
    if (a[l] != '\0')
        return NULL;
    if (*i + 1 >= argc) {
        *missing = 1;
        return NULL;
    }
    return argv[++*i];
}

int cmd_check(int argc, char **argv)
{
    enum ddpc_diag_format fmt = DDPC_FMT_TEXT;
    struct spec_options opt = { .read_data_headers = 1 };
    int strict = 0, quiet = 0, nfiles = 0, opts_done = 0;
    int rc = 0;

    /* options anywhere before "--", files anywhere */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int missing;
        const char *v;
        if (opts_done || a[0] != '-' || strcmp(a, "-") == 0) {
            nfiles++;
            continue;
        }
        if (strcmp(a, "--") == 0) {
            opts_done = 1;
        } else if ((v = opt_value(argc, argv, &i, "--format", &missing)) || missing) {
            if (missing || parse_format(v, &fmt) < 0) {
                fprintf(stderr, "ddpc check: --format takes text, json or github\n");
                return 2;
            }
        } else if (strcmp(a, "--strict") == 0) {
            strict = 1;
        } else if (strcmp(a, "--quiet") == 0 || strcmp(a, "-q") == 0) {
            quiet = 1;
        } else if (strcmp(a, "--no-data") == 0) {
            opt.read_data_headers = 0;
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            check_usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "ddpc check: unknown option '%s'\n", a);
            check_usage(stderr);
            return 2;
        }
    }
    if (nfiles == 0) {
        fprintf(stderr, "ddpc check: no spec files given\n");
        check_usage(stderr);
        return 2;
    }

    struct ddpc_diag d;
    diag_init(&d);
    /* many specs usually share a few data files: read each once */
    opt.cache = spec_cache_new();
    int errors = 0, warnings = 0, io = 0, invalid = 0;
    opts_done = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!opts_done && a[0] == '-' && strcmp(a, "-") != 0) {
            if (strcmp(a, "--") == 0)
                opts_done = 1;
            else if (strcmp(a, "--format") == 0)
                i++;
            continue;
        }
        struct ddpc_job job;
        struct spec_doc *doc = NULL;
        int from = d.n, e0 = d.n_errors, w0 = d.n_warnings;
        int r = spec_load_job(a, &opt, &job, &doc, &d);
        spec_doc_free(doc);
        errors += d.n_errors - e0;
        warnings += d.n_warnings - w0;
        if (r == 2)
            io++;
        else if (r == 1 || (strict && d.n_warnings > w0))
            invalid++;
        if (fmt == DDPC_FMT_JSON)
            continue;   /* one array at the end */
        /* --quiet keeps what fails the check: errors, and warnings under --strict */
        for (int k = from; k < d.n; k++)
            if (!quiet || d.v[k].severity == DDPC_SEV_ERROR ||
                (strict && d.v[k].severity == DDPC_SEV_WARNING))
                diag_print_entry(&d.v[k], fmt, stdout);
        /* text/github: print as we go and forget, so memory stays flat
         * over thousands of files */
        diag_free(&d);
    }
    if (fmt == DDPC_FMT_JSON) {
        int first = 1;
        fputc('[', stdout);
        for (int k = 0; k < d.n; k++) {
            if (quiet && d.v[k].severity != DDPC_SEV_ERROR &&
                !(strict && d.v[k].severity == DDPC_SEV_WARNING))
                continue;
            fputs(first ? "\n " : ",\n ", stdout);
            diag_print_entry(&d.v[k], fmt, stdout);
            first = 0;
        }
        fputs(first ? "]\n" : "\n]\n", stdout);
    }
    diag_free(&d);
    spec_cache_free(opt.cache);
    if (!quiet && fmt == DDPC_FMT_TEXT)
        fprintf(stderr, "%d file%s checked, %d error%s, %d warning%s\n", nfiles,
                nfiles == 1 ? "" : "s", errors, errors == 1 ? "" : "s", warnings,
                warnings == 1 ? "" : "s");
    if (fflush(stdout) != 0) {
        perror("ddpc check: stdout");
        return 2;
    }
    rc = io ? 2 : invalid ? 1 : 0;
    return rc;
}

int cmd_schema(int argc, char **argv)
{
    int md = 0;
    for (int i = 1; i < argc; i++) {
        int missing;
        const char *v = opt_value(argc, argv, &i, "--format", &missing);
        if (v && strcmp(v, "json") == 0) {
            md = 0;
        } else if (v && (strcmp(v, "markdown") == 0 || strcmp(v, "md") == 0)) {
            md = 1;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            puts("usage: ddpc schema [--format json|markdown]\n"
                 "  json: JSON Schema 2020-12 of the spec language (for editors and CI)\n"
                 "  markdown: the reference document (spec/README.md)");
            return 0;
        } else {
            fprintf(stderr, "ddpc schema: usage: ddpc schema [--format json|markdown]\n");
            return 2;
        }
    }
    if (md)
        spec_write_reference(stdout);
    else
        spec_write_schema(stdout);
    if (fflush(stdout) != 0) {
        perror("ddpc schema: stdout");
        return 2;
    }
    return 0;
}
