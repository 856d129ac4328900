/* main.c - the ddpc command: check, plan, build, schema.
 *
 *   ddpc check FILE|DIR|-...           validate specs (compiler/check.c)
 *   ddpc plan FILE|- [--json] [--no-data]   the static launch plan
 *   ddpc build FILE|- [-o OUT] [--emit-dir DIR] [--verbose] [--cpu-only] [--no-data] [--force]
 *   ddpc schema                        JSON Schema of the language (compiler/check.c)
 *   ddpc --version | --help | help [COMMAND]
 * check, plan and build take --set KEY.PATH=VALUE (repeatable), and "-" for
 * the spec on standard input; every command answers --help on stdout with
 * exit 0.
 *
 * Exit status: 0 ok; 1 the spec is invalid; 2 usage or I/O error (bad
 * arguments, a spec that cannot be read, an emit dir that cannot be made);
 * 3 the program could not be produced from a valid spec: m4, the templates,
 * the C compiler, the linker or the installed runtime missing or failing.
 *
 * Owns: argument parsing, the order of the build steps, and turning their
 * results into messages and exit statuses. Never: validates a spec itself
 * (spec/ does), computes plan numbers (plan.c), or runs a shell.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "buf.h"
#include "cc.h"
#include "check.h"    /* cmd_check, cmd_schema: the spec front end's commands */
#include "emit.h"
#include "interrupt.h"
#include "paths.h"
#include "plan.h"
#include "spec.h"
#include "std_fds.h"
#include "toolchain.h"

enum { EXIT_OK = 0, EXIT_INVALID = 1, EXIT_USAGE = 2, EXIT_COMPILE = 3 };

static const char usage_text[] =
    "usage: ddpc check FILE|DIR|-... [--format text|json|github] [--set KEY=VALUE]...\n"
    "       ddpc plan FILE|- [--json] [--no-data] [--set KEY=VALUE]...\n"
    "       ddpc build FILE|- [-o OUT] [--emit-dir DIR] [--verbose] [--cpu-only] [--no-data]\n"
    "                  [--force] [--set KEY=VALUE]...\n"
    "       ddpc schema [--format json|markdown|coming-from]\n"
    "       ddpc --version | --help | help COMMAND | COMMAND --help\n"
    "\n"
    "  check   validate specs (a directory: every *.yaml/*.yml below it);\n"
    "          every problem as file:line:col\n"
    "  plan    print the launch plan: ranks, shards, batches, learning rate,\n"
    "          gradient buckets, memory per device, timeouts, checkpoints\n"
    "  build   check, plan, generate job_config.h from the m4 templates and\n"
    "          compile the job program OUT (default ./NAME from the spec)\n"
    "          --emit-dir DIR  keep the generated files in DIR\n"
    "          --verbose       print the compiler command line\n"
    "          --cpu-only      never link the CUDA backend\n"
    "          --no-data       do not read data files (plan and build); counts\n"
    "                          that need them are left unknown\n"
    "          --force         replace OUT even when it was built from another spec\n"
    "  schema  print the JSON Schema of the spec language\n"
    "  FILE -  the spec on standard input (\"<stdin>\" in messages; its relative\n"
    "          paths resolve against the current directory); a FILE that is a pipe\n"
    "          (/dev/stdin, <(...)) is read the same way\n"
    "  --set KEY.PATH=VALUE  (check, plan, build) override a key of the spec with a\n"
    "          YAML value, e.g. --set epochs=1 --set data.train.path=small.csv;\n"
    "          repeatable; the built job carries the overrides (and their hash)\n"
    "\n"
    "exit status: 0 ok, 1 invalid spec, 2 usage or I/O error, 3 compile failure\n";

static const char plan_usage[] =
    "usage: ddpc plan FILE|- [--json] [--no-data] [--set KEY.PATH=VALUE]...\n"
    "  print the launch plan: ranks, shards, batches, learning rate, gradient\n"
    "  buckets, memory per device, timeouts, checkpoints, launch commands\n"
    "  --json       the same plan as JSON (build's job.plan.json)\n"
    "  --no-data    do not read data files; counts that need them are unknown\n"
    "  --set K=V    override key K (dotted) with the YAML value V; repeatable\n"
    "exit: 0 ok, 1 invalid spec, 2 usage or I/O error\n";

static const char build_usage[] =
    "usage: ddpc build FILE|- [-o OUT] [--emit-dir DIR] [--verbose] [--cpu-only] [--no-data]\n"
    "                  [--force] [--set KEY.PATH=VALUE]...\n"
    "  check, plan, generate job_config.h from the m4 templates and compile the\n"
    "  job program OUT (default ./NAME from the spec)\n"
    "  -o OUT          the program to write\n"
    "  --emit-dir DIR  keep the generated files in DIR\n"
    "  --verbose       print the m4 and compiler command lines\n"
    "  --cpu-only      never load the CUDA backend\n"
    "  --no-data       do not read data files (for building where the data is not)\n"
    "  --force         replace OUT even when it was built from another spec (or by\n"
    "                  another tool): without it, such a program is kept and the\n"
    "                  build refused\n"
    "  --set K=V       override key K (dotted) with the YAML value V; repeatable;\n"
    "                  the program carries the overrides and their hash\n"
    "exit: 0 ok, 1 invalid spec, 2 usage or I/O error, 3 compile failure\n";

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "ddpc: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n%s", usage_text);
    return EXIT_USAGE;
}

/* Prints the collected diagnostics in source order. */
/* Prints d's diagnostics from index `from` on. Only a full print sorts:
 * sorting after the first `from` were printed would move a new error (file
 * "ddpc", line 0) in front of them, and it would never be printed. */
static void print_diags(struct ddpc_diag *d, int from)
{
    if (from == 0)
        diag_sort(d);
    diag_print(d, from, DDPC_FMT_TEXT, stderr);
}

/* Loads and validates path. Returns EXIT_OK with *job and *doc filled (free
 * the doc), or the exit status after printing why. */
static int load(const char *path, int no_data, const struct cli_sets *sets,
                struct ddpc_job *job, struct spec_doc **doc, struct ddpc_diag *d)
{
    /* read data headers unless told not to (as `ddpc check` does): a layer
     * size that does not match the data is caught before anything is
     * compiled; --no-data is for building where the data is not */
    struct spec_options opt = { .read_data_headers = !no_data, .overrides = sets->v,
                                .n_overrides = sets->n };
    memset(job, 0, sizeof *job);
    int rc = spec_load_job(path, &opt, job, doc, d);
    print_diags(d, 0);
    if (rc == 2 || d->io_error)
        return EXIT_USAGE;
    if (rc != 0 || d->n_errors > 0)
        return EXIT_INVALID;
    return EXIT_OK;
}

static int cmd_plan(int argc, char **argv)
{
    const char *file = NULL;
    int json = 0, no_data = 0, r;
    struct cli_sets sets = { .n = 0 };
    for (int i = 1; i < argc; i++) {
        if ((r = cli_take_set(argc, argv, &i, "plan", &sets)) != 0) {
            if (r < 0)
                return EXIT_USAGE;
            continue;
        }
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(plan_usage, stdout);
            return EXIT_OK;
        }
        if (strcmp(argv[i], "--json") == 0)
            json = 1;
        else if (strcmp(argv[i], "--no-data") == 0)
            no_data = 1;
        else if (argv[i][0] == '-' && argv[i][1])
            return usage_error("plan: unknown option %s", argv[i]);
        else if (file)
            return usage_error("plan: one spec at a time (%s is extra)", argv[i]);
        else
            file = argv[i];
    }
    if (!file)
        return usage_error("plan: no spec file given%s", "");

    struct ddpc_diag d;
    struct ddpc_job job;
    struct ddpc_plan plan = { 0 };
    struct spec_doc *doc = NULL;
    char *text = NULL;
    diag_init(&d);
    int rc = load(file, no_data, &sets, &job, &doc, &d);
    if (rc != EXIT_OK)
        goto done;
    int from = d.n;
    if (plan_build(&job, NULL, &plan, &d) != 0) {
        print_diags(&d, from);
        rc = EXIT_INVALID;
        goto done;
    }
    if (json) {
        text = plan_json(&plan, &job);
        if (!text || fputs(text, stdout) == EOF) {
            fprintf(stderr, "ddpc: cannot write the plan\n");
            rc = EXIT_USAGE;
        }
    } else if (plan_write_text(&plan, &job, stdout) != 0) {
        fprintf(stderr, "ddpc: cannot write the plan\n");
        rc = EXIT_USAGE;
    }
    if (fflush(stdout) != 0)
        rc = EXIT_USAGE;
done:
    free(text);
    plan_free(&plan);
    spec_doc_free(doc);
    diag_free(&d);
    return rc;
}

/* The files emit may write in a temporary emit dir. */
static const char *const emit_names[] = { "job_config.h", "job.plan.json", "job.sbatch" };

/* Removes the files emit may have written in a temporary emit dir, then it. */
static void remove_emit_dir(const char *dir)
{
    const char *const *names = emit_names;
    intr_track_dir(NULL, NULL, 0);
    for (size_t i = 0; i < sizeof emit_names / sizeof emit_names[0]; i++) {
        char *p;
        if (asprintf(&p, "%s/%s", dir, names[i]) < 0)
            continue;
        if (unlink(p) != 0 && errno != ENOENT)
            fprintf(stderr, "ddpc: warning: cannot remove %s: %s\n", p, strerror(errno));
        free(p);
    }
    if (rmdir(dir) != 0)
        fprintf(stderr, "ddpc: warning: cannot remove %s: %s\n", dir, strerror(errno));
}

/* Before anything is written: OUT must be a place for a program. Never
 * the spec itself (`ddpc build x` of a spec named x, or -o the spec), never
 * an existing file that is not an executable program (a typo'd -o over
 * notes.txt), and its directory must exist. A rebuild over the program an
 * earlier build wrote is fine. Returns 0, or -1 with a diagnostic. */
static int check_output(const char *out, const char *spec, int defaulted, struct ddpc_diag *d)
{
    const char *how = defaulted ? "the program's name (the spec's name, the default for -o)"
                                : "-o";
    struct stat so, ss;
    if (stat(out, &so) == 0) {
        if (strcmp(spec, "-") != 0 && stat(spec, &ss) == 0 && so.st_dev == ss.st_dev &&
            so.st_ino == ss.st_ino) {
            diag_add(d, DDPC_SEV_ERROR, out, 0, 0, "", "%s is the spec file itself: building "
                     "would overwrite it with the program; choose another output with -o%s",
                     how, defaulted ? ", or give the spec file an extension (.yaml)" : "");
            return -1;
        }
        if (S_ISDIR(so.st_mode)) {
            diag_add(d, DDPC_SEV_ERROR, out, 0, 0, "", "%s names a directory; give the "
                     "program a file name, e.g. -o %s/%s", how, out, "job");
            return -1;
        }
        unsigned char magic[4] = { 0 };
        int is_prog = 0;
        if (S_ISREG(so.st_mode) && (so.st_mode & 0111)) {
            int fd = open(out, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
            if (fd >= 0) {
                is_prog = read(fd, magic, 4) == 4 && memcmp(magic, "\177ELF", 4) == 0;
                (void)close(fd);   /* read-only */
            }
        }
        if (!is_prog) {
            diag_add(d, DDPC_SEV_ERROR, out, 0, 0, "", "%s names an existing file that is not "
                     "a program (%s): refusing to overwrite it; remove it first or choose "
                     "another output with -o", how,
                     !S_ISREG(so.st_mode) ? "not a regular file" :
                     !(so.st_mode & 0111) ? "not executable" : "not an ELF executable");
            return -1;
        }
    } else if (errno != ENOENT) {
        diag_add(d, DDPC_SEV_ERROR, out, 0, 0, "", "cannot write the program here: %s",
                 strerror(errno));
        return -1;
    }
    char dir[PATH_MAX];
    const char *slash = strrchr(out, '/');
    if (slash) {
        size_t n = slash == out ? 1 : (size_t)(slash - out);
        if (n >= sizeof dir) {
            diag_add(d, DDPC_SEV_ERROR, out, 0, 0, "", "path too long");
            return -1;
        }
        memcpy(dir, out, n);
        dir[n] = '\0';
        struct stat sd;
        int there = stat(dir, &sd) == 0;
        if (!there || !S_ISDIR(sd.st_mode)) {
            diag_add(d, DDPC_SEV_ERROR, out, 0, 0, "", "the output's directory %s %s; "
                     "create it first (mkdir -p %s) or choose another output with -o", dir,
                     !there ? "does not exist" : "is not a directory", dir);
            return -1;
        }
    } else {
        strcpy(dir, ".");
    }
    /* the link writes OUT.tmp.PID there: an unwritable directory failed as
     * 'compiling job.c and linking the runtime failed' (exit 3), a compile
     * failure that was none */
    if (access(dir, W_OK | X_OK) != 0) {
        diag_add(d, DDPC_SEV_ERROR, out, 0, 0, "", "cannot write the program into %s: %s; "
                 "choose another output with -o", dir, strerror(errno));
        return -1;
    }
    return 0;
}

/* A program at OUT that ddpc built from another spec is another job's:
 * `ddpc build` replaces it only with --force (a sweep that rebuilt one
 * -o for every configuration lost all programs but the last). The spec a
 * program came from is the DDPC-BUILT-FROM line runtime/job.c bakes into
 * it; the file is read, never run. A program without one (another tool's,
 * or an older ddpc's) is refused the same way. */
static int check_replace(const char *out, const char *built_from, int force,
                         struct ddpc_diag *d)
{
    struct stat st;
    if (force || stat(out, &st) != 0 || !S_ISREG(st.st_mode))
        return 0;   /* nothing there: check_output has refused anything else */
    if (st.st_size > ((off_t)1 << 30)) {
        diag_add(d, DDPC_SEV_ERROR, out, 0, 0, "", "an existing file of %lld bytes: not a "
                 "program ddpc built; refusing to replace it (--force does, or choose another "
                 "output with -o)", (long long)st.st_size);
        return -1;
    }
    int fd = open(out, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    char *b = malloc((size_t)st.st_size + 1);
    size_t got = 0;
    while (fd >= 0 && b && got < (size_t)st.st_size) {
        ssize_t r = read(fd, b + got, (size_t)st.st_size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    if (fd >= 0)
        (void)close(fd);   /* read-only */
    char theirs[4200] = "";
    static const char mark[] = "\nDDPC-BUILT-FROM ";
    const char *m = b ? memmem(b, got, mark, sizeof mark - 1) : NULL;
    if (m) {
        const char *v = m + sizeof mark - 1, *nl = memchr(v, '\n', got - (size_t)(v - b));
        if (nl && (size_t)(nl - v) < sizeof theirs)
            memcpy(theirs, v, (size_t)(nl - v));
    }
    free(b);
    if (theirs[0] && strcmp(theirs, built_from) == 0)
        return 0;
    if (theirs[0])
        diag_add(d, DDPC_SEV_ERROR, out, 0, 0, "", "this program was built from another spec "
                 "(%s; this build is %s): refusing to replace it. Choose another output with "
                 "-o, or replace it with --force", theirs, built_from);
    else
        diag_add(d, DDPC_SEV_ERROR, out, 0, 0, "", "a program that does not say which spec "
                 "it was built from (another tool's, or an older ddpc's): refusing to replace "
                 "it. Choose another output with -o, or replace it with --force");
    return -1;
}

/* How the plan and the sbatch script name the program: ./BASENAME, the
 * binary as run from its own directory. Not the -o path as given: the plan
 * is baked into the binary and must not depend on where it was built
 * (same spec and name, same bytes). */
static char *program_name(const char *out)
{
    const char *base = strrchr(out, '/');
    base = base ? base + 1 : out;
    char *p;
    if (asprintf(&p, "./%s", base) < 0)
        return NULL;
    return p;
}

/* Long on purpose (~150 lines): the build's phases in order (arguments,
 * check, plan, generate, compile), each a call (plan_build, emit_files,
 * cc_build), with what every phase holds released at the one fail/done exit. */
static int cmd_build(int argc, char **argv)
{
    const char *file = NULL, *out = NULL, *emit_dir = NULL;
    int verbose = 0, cpu_only = 0, no_data = 0, force = 0, r;
    struct cli_sets sets = { .n = 0 };
    for (int i = 1; i < argc; i++) {
        if ((r = cli_take_set(argc, argv, &i, "build", &sets)) != 0) {
            if (r < 0)
                return EXIT_USAGE;
            continue;
        }
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(build_usage, stdout);
            return EXIT_OK;
        }
        if (strcmp(argv[i], "-o") == 0 || strcmp(argv[i], "--emit-dir") == 0) {
            if (i + 1 >= argc)
                return usage_error("build: %s needs a value", argv[i]);
            if (argv[i][1] == 'o')
                out = argv[++i];
            else
                emit_dir = argv[++i];
        } else if (strcmp(argv[i], "--verbose") == 0 || strcmp(argv[i], "-v") == 0) {
            verbose = 1;
        } else if (strcmp(argv[i], "--cpu-only") == 0) {
            cpu_only = 1;
        } else if (strcmp(argv[i], "--no-data") == 0) {
            no_data = 1;
        } else if (strcmp(argv[i], "--force") == 0) {
            force = 1;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return usage_error("build: unknown option %s", argv[i]);
        } else if (file) {
            return usage_error("build: one spec at a time (%s is extra)", argv[i]);
        } else {
            file = argv[i];
        }
    }
    if (!file)
        return usage_error("build: no spec file given%s", "");
    if (out && (!out[0] || out[strlen(out) - 1] == '/'))
        return usage_error("build: -o needs a file name, not %s", out[0] ? out : "\"\"");
    /* '-' is standard output to most tools; a program cannot go there (it
     * is an executable file, with job.sbatch beside it), and a file named
     * '-' is never what was meant. */
    if (out && strcmp(out, "-") == 0)
        return usage_error("build: -o - would name a file '-': the program is an executable "
                           "file and cannot be written to standard output; give it a name "
                           "(-o ./- if '-' is really the name you want)%s", "");

    struct ddpc_diag d;
    struct ddpc_job job;
    struct ddpc_plan plan = { 0 };
    struct spec_doc *doc = NULL;
    char prefix[PATH_MAX], hash[65];
    char *tmp_dir = NULL, *program = NULL, *out_default = NULL, *templates = NULL;
    char *sbatch = NULL, *cc_output = NULL, *built_from = NULL;
    diag_init(&d);

    intr_install();     /* an interrupt leaves no temp file or directory behind */
    int rc = load(file, no_data, &sets, &job, &doc, &d);
    if (rc != EXIT_OK)
        goto done;
    int from = d.n;
    rc = EXIT_COMPILE;    /* cannot find the installation */
    if (paths_prefix(prefix, sizeof prefix, &d) != 0)
        goto fail;
    rc = EXIT_USAGE;
    if (!out) {
        if (asprintf(&out_default, "%s", job.name) < 0)
            goto oom;
        out = out_default;
    }
    if (!(program = program_name(out)))
        goto oom;
    if (check_output(out, file, out == out_default, &d) != 0)
        goto fail;
    {   /* the spec this program comes from: its file, wherever it is built from */
        char abs[PATH_MAX];
        int from_stdin = strcmp(file, "-") == 0;
        if (from_stdin || !realpath(file, abs))
            (void)snprintf(abs, sizeof abs, "%s", from_stdin ? DDPC_SPEC_STDIN : file);
        if ((from_stdin ? asprintf(&built_from, "spec=%s job=%s", abs, job.name)
                        : asprintf(&built_from, "spec=%s", abs)) < 0)
            goto oom;
    }
    if (check_replace(out, built_from, force, &d) != 0)
        goto fail;

    rc = EXIT_INVALID;
    if (plan_build(&job, program, &plan, &d) != 0)
        goto fail;

    /* ---- generate ---- */
    rc = EXIT_USAGE;
    if (emit_dir) {
        if (mkdir(emit_dir, 0755) != 0 && errno != EEXIST) {
            diag_add(&d, DDPC_SEV_ERROR, emit_dir, 0, 0, "", "cannot create: %s",
                     strerror(errno));
            goto fail;
        }
    } else {
        const char *t = getenv("TMPDIR");
        if (asprintf(&tmp_dir, "%s/ddpc-XXXXXX", t && t[0] ? t : "/tmp") < 0)
            goto oom;
        sigset_t held;
        intr_hold(&held);           /* created and tracked as one step */
        int made = mkdtemp(tmp_dir) != NULL;
        int err = errno;
        if (made)
            intr_track_dir(tmp_dir, emit_names, (int)(sizeof emit_names / sizeof emit_names[0]));
        intr_release(&held);
        if (!made) {
            diag_add(&d, DDPC_SEV_ERROR, tmp_dir, 0, 0, "", "cannot create: %s", strerror(err));
            free(tmp_dir);
            tmp_dir = NULL;
            goto fail;
        }
        emit_dir = tmp_dir;
    }
    if (asprintf(&templates, "%s/share/ddpc/templates", prefix) < 0)
        goto oom;
    if (job.launch.launcher == DDPC_LAUNCHER_SLURM && asprintf(&sbatch, "%s.sbatch", out) < 0)
        goto oom;
    size_t spec_len = 0;
    const char *spec_text = spec_doc_text(doc, &spec_len);
    spec_sha256_hex(spec_text, spec_len, hash);
    struct emit_input in = {
        .job = &job, .plan = &plan, .spec_text = spec_text,
        .spec_path = strcmp(file, "-") == 0 ? DDPC_SPEC_STDIN : file,
        .spec_len = spec_len, .spec_hash = hash, .built_from = built_from,
        .version = DDPC_VERSION,
        .templates_dir = templates, .m4 = NULL, .log = verbose ? stderr : NULL,
    };
    rc = EXIT_COMPILE;
    /* job.sbatch is generated into the emit dir and put beside the program
     * only once the program is built: an interrupted or failed build left a
     * new script beside the old program */
    if (emit_files(&in, emit_dir, NULL, &d) != 0)
        goto fail;
    if (verbose)
        fprintf(stderr, "ddpc: generated %s/job_config.h, job.plan.json%s\n", emit_dir,
                sbatch ? " and job.sbatch" : "");

    /* ---- compile ---- */
    struct cc_options cc = {
        .job = &job, .prefix = prefix, .emit_dir = emit_dir, .out = out,
        .verbose = verbose, .cpu_only = cpu_only, .log = stderr,
    };
    if (cc_build(&cc, &cc_output, &d) != 0)
        goto fail;
    if (cc_output && cc_output[0])
        fputs(cc_output, stderr);
    if (sbatch) {
        char *gen;
        if (asprintf(&gen, "%s/job.sbatch", emit_dir) < 0)
            goto oom;
        int ir = emit_install(gen, sbatch, 0755, &d);
        free(gen);
        if (ir != 0)
            goto fail;
    }
    if (verbose)
        fprintf(stderr, "ddpc: wrote %s%s%s\n", out, sbatch ? " and " : "", sbatch ? sbatch : "");
    rc = EXIT_OK;
    goto done;
oom:
    diag_add(&d, DDPC_SEV_ERROR, "ddpc", 0, 0, "", "out of memory");
fail:
    print_diags(&d, from);
    if (cc_output && cc_output[0])
        fputs(cc_output, stderr);
done:
    if (tmp_dir)
        remove_emit_dir(tmp_dir);
    free(tmp_dir);
    free(templates);
    free(sbatch);
    free(program);
    free(out_default);
    free(cc_output);
    free(built_from);
    plan_free(&plan);
    spec_doc_free(doc);
    diag_free(&d);
    return rc;
}

int main(int argc, char **argv)
{
    /* ddpc build >&-: its messages would go into the first file it opens */
    if (std_fds_open() < 0)
        return EXIT_USAGE;
    if (argc < 2)
        return usage_error("no command given%s", "");
    const char *cmd = argv[1];
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
        printf("ddpc %s (spec language version %d, CUDA backend %s)\n", DDPC_VERSION,
               DDPC_JOB_VERSION, DDPC_HAVE_CUDA_LIB ? "built" : "not built");
        return EXIT_OK;
    }
    static char help_opt[] = "--help";
    static char *help_argv[4];
    if (strcmp(cmd, "help") == 0 && argc > 2) {
        /* `ddpc help plan` is `ddpc plan --help` */
        if (strcmp(argv[2], "check") == 0 || strcmp(argv[2], "schema") == 0 ||
            strcmp(argv[2], "plan") == 0 || strcmp(argv[2], "build") == 0) {
            help_argv[0] = argv[0];
            help_argv[1] = argv[2];
            help_argv[2] = help_opt;
            cmd = argv[2];
            argc = 3;
            argv = help_argv;
        } else {
            return usage_error("help: unknown command %s", argv[2]);
        }
    } else if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        fputs(usage_text, stdout);
        return EXIT_OK;
    }
    /* each subcommand sees argv starting at its own name */
    if (strcmp(cmd, "check") == 0)
        return cmd_check(argc - 1, argv + 1);
    if (strcmp(cmd, "schema") == 0)
        return cmd_schema(argc - 1, argv + 1);
    if (strcmp(cmd, "plan") == 0)
        return cmd_plan(argc - 1, argv + 1);
    if (strcmp(cmd, "build") == 0)
        return cmd_build(argc - 1, argv + 1);
    return usage_error("unknown command %s", cmd);
}
