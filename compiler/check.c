/* check.c - the `ddpc check` and `ddpc schema` subcommands.
 *
 * Owns option parsing, output formats and exit statuses of the two
 * subcommands; all spec knowledge is behind spec.h. Diagnostics go to
 * stdout (so CI can capture or pipe them), the summary line and usage
 * errors to stderr.
 */
#include "check.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "spec.h"
#include "specwalk.h"

static void check_usage(FILE *out)
{
    fputs("usage: ddpc check [--format text|json|github] [--strict] [--quiet] [--no-data]\n"
          "                  [--set KEY.PATH=VALUE]... FILE|DIR|-...\n"
          "  DIR         every *.yaml and *.yml file below it, in sorted order; each\n"
          "              directory once, at most 64 deep and 100000 in all, not /proc,\n"
          "              /sys or /dev\n"
          "  -           the spec on standard input (\"<stdin>\" in messages; its\n"
          "              relative paths resolve against the current directory); a FILE\n"
          "              that is a pipe (/dev/stdin, <(...)) is read the same way\n"
          "  --format F  text (file:line:col: error: key: message), github annotations, or\n"
          "              json (every file checked and every finding, with a stable rule code)\n"
          "  --strict    warnings fail the check (exit 1)\n"
          "  --quiet     print only what fails the check; nothing on success\n"
          "  --no-data   do not read data headers or check the resume path (a sequential\n"
          "              model's layers are checked against model.input only)\n"
          "  --set K=V   override key K (dotted: data.train.path) with V (YAML) in every\n"
          "              spec; repeatable; a finding about V names the --set\n"
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

int cli_take_set(int argc, char **argv, int *i, const char *cmd, struct cli_sets *sets)
{
    int missing;
    const char *v = opt_value(argc, argv, i, "--set", &missing);
    if (!v && !missing)
        return 0;
    const char *eq = v ? strchr(v, '=') : NULL;
    if (!v || !eq || eq == v) {
        fprintf(stderr, "ddpc %s: --set takes KEY.PATH=VALUE (a YAML value), e.g. "
                "--set epochs=3%s%s\n", cmd, v ? "; got " : "", v ? v : "");
        return -1;
    }
    if (sets->n == CLI_MAX_SETS) {
        fprintf(stderr, "ddpc %s: more than %d --set options\n", cmd, CLI_MAX_SETS);
        return -1;
    }
    sets->v[sets->n++] = v;
    return 1;
}

/* What JSON says of one file checked. */
struct file_result {
    const char *status;   /* "valid", "invalid" (--strict: a warning too), "unreadable" */
    int errors, warnings, notes;
};

/* The JSON document: {"version": 2, "files": [...], "diagnostics": [...],
 * "errors": N, "warnings": N}. Version 1 was the bare array of
 * diagnostics; each now has its rule's code (spec/rules.def). --quiet
 * keeps the diagnostics that fail the check; files are always all listed. */
static void print_json(const struct specwalk_list *in, const struct file_result *res,
                       const struct ddpc_diag *d, int quiet, int strict, int errors, int warnings)
{
    fputs("{\"version\":2,\"files\":[", stdout);
    for (int i = 0; i < in->n; i++) {
        fputs(i ? ",\n " : "\n ", stdout);
        fputs("{\"file\":", stdout);
        diag_json_string(stdout, strcmp(in->v[i], "-") == 0 ? "<stdin>" : in->v[i]);
        printf(",\"status\":\"%s\",\"errors\":%d,\"warnings\":%d,\"notes\":%d}",
               res[i].status ? res[i].status : "unreadable", res[i].errors, res[i].warnings,
               res[i].notes);
    }
    fputs(in->n ? "\n],\n\"diagnostics\":[" : "],\n\"diagnostics\":[", stdout);
    int first = 1;
    for (int k = 0; k < d->n; k++) {
        if (quiet && d->v[k].severity != DDPC_SEV_ERROR &&
            !(strict && d->v[k].severity == DDPC_SEV_WARNING))
            continue;
        fputs(first ? "\n " : ",\n ", stdout);
        diag_print_entry(&d->v[k], DDPC_FMT_JSON, stdout);
        first = 0;
    }
    printf("%s],\n\"errors\":%d,\"warnings\":%d}\n", first ? "" : "\n", errors, warnings);
}

/* Long on purpose (~150 lines): argument parsing, directory expansion and
 * the per-spec loop share the input list and the data-file cache, released
 * at the one out label. */
int cmd_check(int argc, char **argv)
{
    enum ddpc_diag_format fmt = DDPC_FMT_TEXT;
    struct spec_options opt = { .read_data_headers = 1 };
    struct cli_sets sets = { .n = 0 };
    struct specwalk_list in = { 0 };
    struct ddpc_diag d;
    int strict = 0, quiet = 0, opts_done = 0, nargs = 0;
    int rc = 2;
    diag_init(&d);

    /* options anywhere before "--", files and directories anywhere */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int missing, r;
        const char *v;
        if (opts_done || a[0] != '-' || strcmp(a, "-") == 0) {
            nargs++;
            continue;
        }
        if (strcmp(a, "--") == 0) {
            opts_done = 1;
        } else if ((v = opt_value(argc, argv, &i, "--format", &missing)) || missing) {
            if (missing || parse_format(v, &fmt) < 0) {
                fprintf(stderr, "ddpc check: --format takes text, json or github\n");
                goto out;
            }
        } else if ((r = cli_take_set(argc, argv, &i, "check", &sets)) != 0) {
            if (r < 0)
                goto out;
        } else if (strcmp(a, "--strict") == 0) {
            strict = 1;
        } else if (strcmp(a, "--quiet") == 0 || strcmp(a, "-q") == 0) {
            quiet = 1;
        } else if (strcmp(a, "--no-data") == 0) {
            opt.read_data_headers = 0;
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            check_usage(stdout);
            rc = 0;
            goto out;
        } else {
            fprintf(stderr, "ddpc check: unknown option '%s'\n", a);
            check_usage(stderr);
            goto out;
        }
    }
    if (nargs == 0) {
        fprintf(stderr, "ddpc check: no spec files given\n");
        check_usage(stderr);
        goto out;
    }
    opt.overrides = sets.v;
    opt.n_overrides = sets.n;

    /* the files, directories expanded in place; a directory without specs
     * is an error (a CI job pointed at the wrong place must not pass) */
    opts_done = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!opts_done && a[0] == '-' && strcmp(a, "-") != 0) {
            if (strcmp(a, "--") == 0)
                opts_done = 1;
            else if (strcmp(a, "--format") == 0 || strcmp(a, "--set") == 0)
                i++;
            continue;
        }
        struct stat st;
        if (strcmp(a, "-") == 0) {
            /* standard input: read once */
            for (int k = 0; k < in.n; k++)
                if (strcmp(in.v[k], "-") == 0) {
                    fprintf(stderr, "ddpc check: - (standard input) given twice\n");
                    goto out;
                }
            if (specwalk_add(&in, a) < 0)
                goto oom;
        } else if (stat(a, &st) == 0 && S_ISDIR(st.st_mode)) {
            int before = in.n, io0 = d.io_error;
            d.io_error = 0;
            if (specwalk_dir(a, NULL, &in, &d) < 0)
                goto oom;
            if (in.n == before && !d.io_error) {
                diag_rule(&d, DDPC_R_IO, a, 0, 0, "", "no *.yaml or *.yml file in this "
                          "directory or below");
                d.io_error = 1;
            }
            d.io_error |= io0;
        } else if (specwalk_add(&in, a) < 0) {
            goto oom;
        }
    }

    /* many specs usually share a few data files: read each once */
    opt.cache = spec_cache_new();
    int errors = d.n_errors, warnings = 0, io = d.io_error, invalid = 0;
    /* JSON lists every file checked, a clean one too */
    struct file_result *res = NULL;
    if (fmt == DDPC_FMT_JSON && in.n && !(res = calloc((size_t)in.n, sizeof *res)))
        goto oom;
    if (fmt != DDPC_FMT_JSON) {
        for (int k = 0; k < d.n; k++)
            diag_print_entry(&d.v[k], fmt, stdout);
        diag_free(&d);
    }
    for (int i = 0; i < in.n; i++) {
        struct ddpc_job job;
        struct spec_doc *doc = NULL;
        int from = d.n, e0 = d.n_errors, w0 = d.n_warnings;
        int r = spec_load_job(in.v[i], &opt, &job, &doc, &d);
        spec_doc_free(doc);
        errors += d.n_errors - e0;
        warnings += d.n_warnings - w0;
        if (r == 2)
            io++;
        else if (r == 1 || (strict && d.n_warnings > w0))
            invalid++;
        if (fmt == DDPC_FMT_JSON) {
            /* one document at the end */
            res[i].status = r == 2 ? "unreadable"
                            : r == 1 || (strict && d.n_warnings > w0) ? "invalid" : "valid";
            res[i].errors = d.n_errors - e0;
            res[i].warnings = d.n_warnings - w0;
            for (int k = from; k < d.n; k++)
                res[i].notes += d.v[k].severity == DDPC_SEV_NOTE;
            continue;
        }
        /* --quiet keeps what fails the check: errors, and warnings under --strict */
        for (int k = from; k < d.n; k++)
            if (!quiet || d.v[k].severity == DDPC_SEV_ERROR ||
                (strict && d.v[k].severity == DDPC_SEV_WARNING))
                diag_print_entry(&d.v[k], fmt, stdout);
        /* text/github: print as we go and forget, so memory stays flat
         * over thousands of files */
        diag_free(&d);
    }
    if (fmt == DDPC_FMT_JSON)
        print_json(&in, res, &d, quiet, strict, errors, warnings);
    free(res);
    spec_cache_free(opt.cache);
    if (!quiet && fmt == DDPC_FMT_TEXT)
        fprintf(stderr, "%d file%s checked, %d error%s, %d warning%s\n", in.n,
                in.n == 1 ? "" : "s", errors, errors == 1 ? "" : "s", warnings,
                warnings == 1 ? "" : "s");
    if (fflush(stdout) != 0) {
        perror("ddpc check: stdout");
        rc = 2;
        goto out;
    }
    rc = io ? 2 : invalid ? 1 : 0;
    goto out;
oom:
    fprintf(stderr, "ddpc check: out of memory\n");
    rc = 2;
out:
    diag_free(&d);
    specwalk_list_free(&in);
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
        } else if (v && strcmp(v, "coming-from") == 0) {
            md = 2;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            puts("usage: ddpc schema [--format json|markdown|coming-from]\n"
                 "  json: JSON Schema 2020-12 of the spec language (for editors and CI)\n"
                 "  markdown: the reference document (spec/README.md)\n"
                 "  coming-from: Lightning, torchrun, PyTorch and TrainingParams names and\n"
                 "    ddpc's (docs/coming-from.md)");
            return 0;
        } else {
            fprintf(stderr, "ddpc schema: usage: ddpc schema [--format json|markdown|coming-from]\n");
            return 2;
        }
    }
    if (md == 2)
        spec_write_coming_from(stdout);
    else if (md)
        spec_write_reference(stdout);
    else
        spec_write_schema(stdout);
    if (fflush(stdout) != 0) {
        perror("ddpc schema: stdout");
        return 2;
    }
    return 0;
}
