/* test_speccorpus.c - the spec corpus and the `ddpc check` CLI.
 *
 *   tests/specs/invalid/X.yaml  must fail; its diagnostics, as `ddpc check`
 *                               prints them in text, equal X.expect exactly
 *   tests/specs/valid/X.yaml    must load with no errors; X.expect, when
 *                               present, holds its exact warnings
 *   examples/ *.yaml            must be valid (warnings allowed)
 *   spec/README.md              must equal `ddpc schema --format markdown`
 *   docs/coming-from.md         must equal `ddpc schema --format coming-from`
 *
 * Paths in .expect files are relative to the repository root, which comes
 * from DDPC_TOP (`make test` sets it; "." otherwise). The CLI cases run
 * $DDPC_BUILD/bin/ddpc and are skipped, saying so, without DDPC_BUILD.
 */
#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <glob.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "spec.h"
#include "specwalk.h"
#include "suites.h"
#include "testutil.h"

extern char **environ;

#define MAX_CORPUS 256
static char *corpus_invalid[MAX_CORPUS], *corpus_valid[MAX_CORPUS];
static int n_invalid, n_valid;

static const char *top(void)
{
    const char *t = getenv("DDPC_TOP");
    return t && t[0] ? t : ".";
}

/* chdir to the repository root for the duration of a test (Check forks
 * each test, but this keeps CK_FORK=no runs correct too). */
static int enter_top(void)
{
    int fd = open(".", O_RDONLY | O_DIRECTORY);
    ck_assert_int_ge(fd, 0);
    ck_assert_msg(chdir(top()) == 0, "cannot chdir to DDPC_TOP=%s", top());
    return fd;
}

static void leave_top(int fd)
{
    ck_assert_int_eq(fchdir(fd), 0);
    close(fd);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 8192;
            char *nb = realloc(buf, cap);
            ck_assert_ptr_nonnull(nb);
            buf = nb;
        }
        size_t r = fread(buf + n, 1, 4096, f);
        n += r;
        if (r == 0)
            break;
    }
    fclose(f);
    buf[n] = '\0';
    return buf;
}

/* Runs spec_load_job and returns its text diagnostics (caller frees). */
static char *check_text(const char *path, int *rc, int read_data)
{
    struct ddpc_diag d;
    struct ddpc_job job;
    struct spec_doc *doc = NULL;
    struct spec_options opt = { .read_data_headers = read_data };
    char *out = NULL;
    size_t sz;
    diag_init(&d);
    *rc = spec_load_job(path, &opt, &job, &doc, &d);
    /* every finding about a spec has a rule of its own (rules.def), so the
     * JSON's codes classify it: E-other is the compiler's, never a spec's */
    for (int k = 0; k < d.n; k++)
        ck_assert_msg(d.v[k].rule > DDPC_R_NOTE, "%s:%d: a finding with no rule (rules.def): %s",
                      path, d.v[k].line, d.v[k].message);
    FILE *f = open_memstream(&out, &sz);
    ck_assert_ptr_nonnull(f);
    diag_print(&d, 0, DDPC_FMT_TEXT, f);
    fclose(f);
    spec_doc_free(doc);
    diag_free(&d);
    return out;
}

/* The first line where got and want differ, for a readable failure. */
static void first_difference(const char *got, const char *want, char *buf, size_t cap)
{
    int line = 1;
    const char *g = got, *w = want;
    while (*g && *w && *g == *w) {
        if (*g == '\n')
            line++;
        g++, w++;
    }
    const char *gl = g, *wl = w;
    while (gl > got && gl[-1] != '\n')
        gl--;
    while (wl > want && wl[-1] != '\n')
        wl--;
    snprintf(buf, cap, "line %d\n  got:  %.*s\n  want: %.*s", line, (int)strcspn(gl, "\n"), gl,
             (int)strcspn(wl, "\n"), wl);
}

static char *expect_path(const char *yaml)
{
    size_t l = strlen(yaml);
    char *p = malloc(l + 8);
    ck_assert_ptr_nonnull(p);
    memcpy(p, yaml, l - 5);
    strcpy(p + l - 5, ".expect");
    return p;
}

START_TEST(test_invalid_spec)
{
    int fd = enter_top();
    const char *yaml = corpus_invalid[_i];
    char *expect_file = expect_path(yaml);
    char *want = slurp(expect_file);
    ck_assert_msg(want != NULL, "%s: missing %s", yaml, expect_file);
    int rc;
    char *got = check_text(yaml, &rc, 1);
    ck_assert_msg(rc == 1, "%s: spec_load_job returned %d, want 1 (invalid)", yaml, rc);
    if (strcmp(got, want) != 0) {
        char diff[1024];
        first_difference(got, want, diff, sizeof diff);
        ck_abort_msg("%s: diagnostics differ from %s at %s", yaml, expect_file, diff);
    }
    free(got);
    free(want);
    free(expect_file);
    leave_top(fd);
}
END_TEST

START_TEST(test_valid_spec)
{
    int fd = enter_top();
    const char *yaml = corpus_valid[_i];
    int rc;
    /* examples name system data (Debian's dataset-fashion-mnist); read their
     * headers only where it is installed, so the corpus passes without it */
    int is_example = strncmp(yaml, "examples/", 9) == 0;
    int read_data = !is_example || access("/usr/share/datasets/fashion-mnist", R_OK) == 0;
    char *got = check_text(yaml, &rc, read_data);
    ck_assert_msg(rc == 0, "%s is in the valid corpus but has errors:\n%s", yaml, got);
    char *expect_file = expect_path(yaml);
    char *want = slurp(expect_file);
    /* the corpus pins its warnings; examples belong to their authors */
    if (!want)
        want = strdup(is_example ? got : "");
    if (strcmp(got, want) != 0) {
        char diff[1024];
        first_difference(got, want, diff, sizeof diff);
        ck_abort_msg("%s: warnings differ from %s at %s", yaml, expect_file, diff);
    }
    free(got);
    free(want);
    free(expect_file);
    leave_top(fd);
}
END_TEST

START_TEST(test_reference_up_to_date)
{
    int fd = enter_top();
    char *want = slurp("spec/README.md"), *got = NULL;
    size_t sz;
    ck_assert_msg(want != NULL, "spec/README.md is missing");
    FILE *f = open_memstream(&got, &sz);
    spec_write_reference(f);
    fclose(f);
    if (strcmp(got, want) != 0) {
        char diff[1024];
        first_difference(got, want, diff, sizeof diff);
        ck_abort_msg("spec/README.md is stale; regenerate it with `make docs` "
                     "(build/bin/ddpc schema --format markdown > spec/README.md) (%s)", diff);
    }
    free(got);
    free(want);
    leave_top(fd);
}
END_TEST

/* docs/coming-from.md is generated from spec/aliases.def and keys.def */
/* What the reference says of several nodes is what check does: a CPU job
 * on two nodes (gloo) is valid, and the reference said multi-node needed a
 * GPU accelerator. */
START_TEST(test_reference_multinode_cpu)
{
    int fd = enter_top();
    char *ref = slurp("spec/README.md");
    ck_assert_ptr_nonnull(ref);
    ck_assert_msg(!strstr(ref, "needs a GPU accelerator"), "spec/README.md says several nodes "
                  "need a GPU");
    ck_assert_ptr_nonnull(strstr(ref, "CPU workers over gloo, so several nodes need no GPU"));
    free(ref);
    int rc;
    char *got = check_text("examples/multinode-cpu.yaml", &rc, 0);
    ck_assert_msg(rc == 0, "%s", got);
    free(got);
    struct ddpc_diag d;
    struct ddpc_job job;
    struct spec_doc *doc = NULL;
    struct spec_options opt = { .read_data_headers = 0 };
    diag_init(&d);
    ck_assert_int_eq(spec_load_job("examples/multinode-cpu.yaml", &opt, &job, &doc, &d), 0);
    ck_assert_int_eq(job.accelerator, DDPC_ACCEL_CPU);
    ck_assert_int_eq(job.launch.num_nodes, 2);
    spec_doc_free(doc);
    diag_free(&d);
    leave_top(fd);
}
END_TEST

/* Every Markdown file a source or test comment cites exists (at the top,
 * under docs/, or beside the citing file): ten comments cited a GPT design
 * note (GPT dot md) that was never in the tree. */
static void cited_docs_in(const char *dir, char *missing, size_t cap)
{
    DIR *dp = opendir(dir);
    if (!dp)
        return;
    struct dirent *e;
    while ((e = readdir(dp))) {
        char p[1024];
        if (e->d_name[0] == '.')
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(p, &st) != 0)
            continue;
        if (S_ISDIR(st.st_mode)) {
            cited_docs_in(p, missing, cap);
            continue;
        }
        const char *x = strrchr(e->d_name, '.');
        static const char *const kinds[] = { ".c", ".h", ".cu", ".cuh", ".cc", ".py", ".sh",
                                             ".m4", ".def" };
        int src = 0;
        for (size_t k = 0; x && k < sizeof kinds / sizeof kinds[0]; k++)
            src |= strcmp(x, kinds[k]) == 0;
        char *text = src ? slurp(p) : NULL;
        for (char *m = text; m && (m = strstr(m, ".md")); m += 3) {
            char *b = m;
            while (b > text && (isalnum((unsigned char)b[-1]) || strchr("_./-", b[-1])))
                b--;
            if (b == m || isalnum((unsigned char)m[3]))
                continue;
            char name[256], try_[3][1400];
            snprintf(name, sizeof name, "%.*s", (int)(m + 3 - b), b);
            snprintf(try_[0], sizeof try_[0], "%s", name);
            snprintf(try_[1], sizeof try_[1], "docs/%s", name);
            snprintf(try_[2], sizeof try_[2], "%s/%s", dir, name);
            if (access(try_[0], R_OK) && access(try_[1], R_OK) && access(try_[2], R_OK)) {
                size_t l = strlen(missing);
                snprintf(missing + l, cap - l, "%s cites %s\n", p, name);
            }
        }
        free(text);
    }
    closedir(dp);
}

START_TEST(test_cited_docs_exist)
{
    int fd = enter_top();
    char missing[4096] = "";
    static const char *const dirs[] = { "spec", "compiler", "runtime", "tests", "bench",
                                        "templates", "scripts" };
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++)
        cited_docs_in(dirs[i], missing, sizeof missing);
    ck_assert_msg(!missing[0], "cited documents that do not exist:\n%s", missing);
    leave_top(fd);
}
END_TEST

/* A spec's findings are made by the front end (spec/ and the walk of
 * check DIR); each must name its rule of spec/rules.def, or the JSON's code
 * is E-other. The corpus catches a finding it produces; this catches one
 * written without a rule: no diag_add (the rule-less call, for the
 * compiler's own errors) and no severity where vdiag takes a rule. */
START_TEST(test_front_end_findings_have_rules)
{
    int fd = enter_top();
    static const char *const files[] = {
        "spec/validate.c", "spec/load.c", "spec/spec.c", "spec/safetensors.c",
        "spec/schema.c", "spec/layers.c", "spec/probe.c", "spec/tokens.c", "spec/units.c",
        "compiler/specwalk.c", "compiler/check.c",
    };
    char bad[4096] = "";
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char *text = slurp(files[i]);
        ck_assert_msg(text != NULL, "cannot read %s", files[i]);
        int line = 1;
        for (char *l = text; l && *l; line++) {
            char *nl = strchr(l, '\n');
            if (nl)
                *nl = '\0';
            if (strstr(l, "diag_add(") || (strstr(l, "vdiag(") && strstr(l, "DDPC_SEV_"))) {
                size_t o = strlen(bad);
                snprintf(bad + o, sizeof bad - o, "%s:%d: %s\n", files[i], line, l);
            }
            l = nl ? nl + 1 : NULL;
        }
        free(text);
    }
    ck_assert_msg(!bad[0], "findings without a rule (give diag_rule / vdiag a DDPC_R_ of "
                  "spec/rules.def):\n%s", bad);
    leave_top(fd);
}
END_TEST

START_TEST(test_coming_from_up_to_date)
{
    int fd = enter_top();
    char *want = slurp("docs/coming-from.md"), *got = NULL;
    size_t sz;
    ck_assert_msg(want != NULL, "docs/coming-from.md is missing");
    FILE *f = open_memstream(&got, &sz);
    spec_write_coming_from(f);
    fclose(f);
    if (strcmp(got, want) != 0) {
        char diff[1024];
        first_difference(got, want, diff, sizeof diff);
        ck_abort_msg("docs/coming-from.md is stale; regenerate it with `make docs` (%s)", diff);
    }
    /* the brief's names each have their row */
    static const char *const rows[] = {
        "| `accumulate_grad_batches` | `grad_accumulation` |", "| `gradient_clip_val` | `grad_clip_norm` |",
        "| `max_epochs` | `epochs` |", "| `log_every_n_steps` | `logging.every_n_steps` |",
        "| `num_nodes` | `launch.num_nodes` |", "| `default_root_dir` | `checkpoint_dir` |",
        "| `dirpath` | `checkpoint_dir` |", "| `--nnodes` | `launch.num_nodes` |",
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        ck_assert_msg(strstr(got, rows[i]) != NULL, "docs/coming-from.md lacks %s", rows[i]);
    free(got);
    free(want);
    leave_top(fd);
}
END_TEST

/* ---- the CLI, as CI runs it ---- */

struct cli_result {
    int status;
    char *out;   /* stdout */
    char *err;   /* stderr */
};

static char *read_all(int fd)
{
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 4097 > cap) {
            cap = cap ? cap * 2 : 8192;
            char *nb = realloc(buf, cap);
            ck_assert_ptr_nonnull(nb);
            buf = nb;
        }
        ssize_t r = read(fd, buf + n, 4096);
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    buf[n] = '\0';
    return buf;
}

/* How long a ddpc run may take before it is killed and the test fails
 * (status CLI_TIMED_OUT). */
static int cli_deadline_s = 45;
#define CLI_TIMED_OUT 1000

/* Runs ddpc with argv (no shell), its standard input the file stdin_path
 * or, with stdin_text, a pipe that text is written into (NULL both: the
 * test's); stdout and stderr go to temp files so a large output cannot
 * deadlock a pipe. */
static int run_ddpc_io(char *const argv[], const char *stdin_path, const char *stdin_text,
                       struct cli_result *r)
{
    const char *b = getenv("DDPC_BUILD");
    if (!b || !b[0])
        return -1;
    char exe[4096];
    snprintf(exe, sizeof exe, "%s/bin/ddpc", b);
    if (access(exe, X_OK) != 0)
        return -1;
    char outp[] = "/tmp/ddpc-out-XXXXXX", errp[] = "/tmp/ddpc-err-XXXXXX";
    int ofd = mkstemp(outp), efd = mkstemp(errp);
    ck_assert(ofd >= 0 && efd >= 0);
    posix_spawn_file_actions_t fa;
    ck_assert_int_eq(posix_spawn_file_actions_init(&fa), 0);
    ck_assert_int_eq(posix_spawn_file_actions_adddup2(&fa, ofd, 1), 0);
    ck_assert_int_eq(posix_spawn_file_actions_adddup2(&fa, efd, 2), 0);
    if (stdin_path)
        ck_assert_int_eq(posix_spawn_file_actions_addopen(&fa, 0, stdin_path, O_RDONLY, 0), 0);
    int pfd[2] = { -1, -1 };
    if (stdin_text) {
        /* the whole text waits in the pipe (less than its buffer), the
         * write end closed: ddpc reads it and then EOF, or never reads */
        ck_assert_int_eq(pipe(pfd), 0);
        size_t len = strlen(stdin_text);
        ck_assert(len < 65536);
        ck_assert_int_eq(write(pfd[1], stdin_text, len), (ssize_t)len);
        close(pfd[1]);
        ck_assert_int_eq(posix_spawn_file_actions_adddup2(&fa, pfd[0], 0), 0);
    }
    pid_t pid;
    char *args[64];
    int n = 0;
    args[n++] = exe;
    for (int i = 0; argv[i] && n < 63; i++)
        args[n++] = argv[i];
    args[n] = NULL;
    ck_assert_int_eq(posix_spawn(&pid, exe, &fa, NULL, args, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    if (stdin_text)
        close(pfd[0]);
    /* a deadline, so a ddpc that never ends fails the test and is not left
     * running after it (Check's own timeout kills only the test) */
    int st;
    struct timespec t0, now, tick = { 0, 5 * 1000 * 1000 };
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pid_t w;
    while ((w = waitpid(pid, &st, WNOHANG)) == 0) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - t0.tv_sec >= cli_deadline_s) {
            kill(pid, SIGKILL);
            ck_assert_int_eq(waitpid(pid, &st, 0), pid);
            w = -2;
            break;
        }
        nanosleep(&tick, NULL);
    }
    ck_assert_int_ne(w, -1);
    r->status = w == -2 ? CLI_TIMED_OUT : WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    lseek(ofd, 0, SEEK_SET);
    lseek(efd, 0, SEEK_SET);
    r->out = read_all(ofd);
    r->err = read_all(efd);
    close(ofd);
    close(efd);
    unlink(outp);
    unlink(errp);
    return 0;
}

static int run_ddpc_in(char *const argv[], const char *stdin_path, struct cli_result *r)
{
    return run_ddpc_io(argv, stdin_path, NULL, r);
}

static int run_ddpc(char *const argv[], struct cli_result *r)
{
    return run_ddpc_in(argv, NULL, r);
}

static void run_free(struct cli_result *r)
{
    free(r->out);
    free(r->err);
}

#define NEED_DDPC(rc)                                                          \
    do {                                                                       \
        if ((rc) < 0) {                                                        \
            test_skip("speccorpus CLI", "DDPC_BUILD/bin/ddpc not found");          \
            leave_top(fd);                                                     \
            return;                                                            \
        }                                                                      \
    } while (0)

START_TEST(test_cli_exit_codes)
{
    int fd = enter_top();
    struct cli_result r;
    char *ok[] = { "check", "--no-data", "tests/specs/valid/minimal.yaml",
                   "examples/fashion-mnist.yaml", NULL };
    NEED_DDPC(run_ddpc(ok, &r));
    ck_assert_int_eq(r.status, 0);
    ck_assert_str_eq(r.out, "");
    ck_assert_str_eq(r.err, "2 files checked, 0 errors, 0 warnings\n");
    run_free(&r);

    char *bad[] = { "check", "--quiet", "tests/specs/valid/minimal.yaml",
                    "tests/specs/invalid/linear-layers.yaml", NULL };
    ck_assert_int_eq(run_ddpc(bad, &r), 0);
    ck_assert_int_eq(r.status, 1);
    ck_assert_str_eq(r.out, "tests/specs/invalid/linear-layers.yaml:5:11: error: model.layers: "
                            "model type linear takes exactly 2 sizes [in, out], found 3\n");
    ck_assert_str_eq(r.err, "");
    run_free(&r);

    char *io[] = { "check", "tests/specs/invalid/linear-layers.yaml", "no/such/file.yaml", NULL };
    ck_assert_int_eq(run_ddpc(io, &r), 0);
    ck_assert_int_eq(r.status, 2);
    ck_assert(strstr(r.out, "no/such/file.yaml: error: cannot read: No such file or directory\n"));
    run_free(&r);

    char *usage[] = { "check", "--format", "xml", "a.yaml", NULL };
    ck_assert_int_eq(run_ddpc(usage, &r), 0);
    ck_assert_int_eq(r.status, 2);
    run_free(&r);
    char *none[] = { "check", NULL };
    ck_assert_int_eq(run_ddpc(none, &r), 0);
    ck_assert_int_eq(r.status, 2);
    run_free(&r);

    /* warnings pass, unless --strict */
    char *warn[] = { "check", "tests/specs/valid/warnings.yaml", NULL };
    ck_assert_int_eq(run_ddpc(warn, &r), 0);
    ck_assert_int_eq(r.status, 0);
    run_free(&r);
    char *strict[] = { "check", "--strict", "tests/specs/valid/warnings.yaml", NULL };
    ck_assert_int_eq(run_ddpc(strict, &r), 0);
    ck_assert_int_eq(r.status, 1);
    run_free(&r);
    char *quiet[] = { "check", "-q", "tests/specs/valid/warnings.yaml", NULL };
    ck_assert_int_eq(run_ddpc(quiet, &r), 0);
    ck_assert_int_eq(r.status, 0);
    ck_assert_str_eq(r.out, "");
    ck_assert_str_eq(r.err, "");
    run_free(&r);
    /* --quiet --strict still shows what fails */
    char *qs[] = { "check", "-q", "--strict", "tests/specs/valid/single-device-timeouts.yaml", NULL };
    ck_assert_int_eq(run_ddpc(qs, &r), 0);
    ck_assert_int_eq(r.status, 1);
    char *want = slurp("tests/specs/valid/single-device-timeouts.expect");
    ck_assert_ptr_nonnull(want);
    ck_assert_str_eq(r.out, want);
    free(want);
    run_free(&r);
    leave_top(fd);
}
END_TEST

/* "-" is the spec on standard input (`cat job.yaml | ddpc check -`), for
 * check, plan and build alike: messages name "<stdin>", and its relative
 * paths resolve against the working directory (here the top, where
 * csv.yaml's ../data/small.csv is not and tests/specs/data/small.csv is).
 * check took "-" for a file of that name: "-: error: cannot read: No such
 * file or directory", exit 2. */
START_TEST(test_cli_stdin)
{
    int fd = enter_top();
    struct cli_result r;
    char *bad[] = { "check", "-", NULL };
    NEED_DDPC(run_ddpc_in(bad, "tests/specs/invalid/linear-layers.yaml", &r));
    ck_assert_msg(r.status == 1, "status %d: %s%s", r.status, r.out, r.err);
    ck_assert_str_eq(r.out, "<stdin>:5:11: error: model.layers: model type linear takes "
                            "exactly 2 sizes [in, out], found 3\n");
    run_free(&r);
    /* relative to the working directory, not to where the text came from */
    ck_assert_int_eq(run_ddpc_in(bad, "tests/specs/valid/csv.yaml", &r), 0);
    ck_assert_msg(r.status == 1 && strstr(r.out, "<stdin>:11:11: error: data.train.path: "
                                                 "cannot read '../data/small.csv'"),
                  "status %d: %s%s", r.status, r.out, r.err);
    run_free(&r);
    char spec[] = "/tmp/ddpc-stdin-XXXXXX";
    int sfd = mkstemp(spec);
    ck_assert_int_ge(sfd, 0);
    const char *text = "devices: 1\nepochs: 1\nbatch_size: 2\nmodel: {type: linear, layers: "
                       "[3, 3]}\ndata: {train: {format: csv, path: tests/specs/data/small.csv, "
                       "label_column: 0}}\n";
    ck_assert_int_eq(write(sfd, text, strlen(text)), (ssize_t)strlen(text));
    close(sfd);
    ck_assert_int_eq(run_ddpc_in(bad, spec, &r), 0);
    ck_assert_msg(r.status == 0 && strcmp(r.err, "1 file checked, 0 errors, 0 warnings\n") == 0,
                  "status %d: %s%s", r.status, r.out, r.err);
    run_free(&r);
    char *plan[] = { "plan", "-", NULL };
    ck_assert_int_eq(run_ddpc_in(plan, spec, &r), 0);
    ck_assert_msg(r.status == 0 && strncmp(r.out, "job stdin\n", 10) == 0, "status %d: %s%s",
                  r.status, r.out, r.err);
    run_free(&r);
    /* standard input is read once */
    char *twice[] = { "check", "-", "-", NULL };
    ck_assert_int_eq(run_ddpc_in(twice, spec, &r), 0);
    ck_assert_msg(r.status == 2 && strstr(r.err, "- (standard input) given twice"),
                  "status %d: %s%s", r.status, r.out, r.err);
    run_free(&r);
    unlink(spec);
    leave_top(fd);
}
END_TEST

/* A pipe named as a file (/dev/stdin, /dev/fd/0; a shell's <(...) is
 * /dev/fd/63) is read as "-" is, to its end: check refused it ("cannot
 * read: not a regular file", exit 2) while "-" read the same pipe. Messages
 * keep the name; relative paths resolve in the working directory (not in
 * /dev); the default job name is "stdin". */
START_TEST(test_cli_pipe_path)
{
    int fd = enter_top();
    struct cli_result r;
    char *text = slurp("tests/specs/invalid/linear-layers.yaml");
    ck_assert_ptr_nonnull(text);
    char *dev[] = { "check", "/dev/stdin", NULL };
    NEED_DDPC(run_ddpc_io(dev, NULL, text, &r));
    ck_assert_msg(r.status == 1, "status %d: %s%s", r.status, r.out, r.err);
    ck_assert_str_eq(r.out, "/dev/stdin:5:11: error: model.layers: model type linear takes "
                            "exactly 2 sizes [in, out], found 3\n");
    run_free(&r);
    free(text);
    const char *ok = "devices: 1\nepochs: 1\nbatch_size: 2\nmodel: {type: linear, layers: "
                     "[3, 3]}\ndata: {train: {format: csv, path: tests/specs/data/small.csv, "
                     "label_column: 0}}\n";
    char *fd0[] = { "check", "/dev/fd/0", NULL };
    ck_assert_int_eq(run_ddpc_io(fd0, NULL, ok, &r), 0);
    ck_assert_msg(r.status == 0 && strcmp(r.err, "1 file checked, 0 errors, 0 warnings\n") == 0,
                  "status %d: %s%s", r.status, r.out, r.err);
    run_free(&r);
    char *plan[] = { "plan", "/dev/stdin", NULL };
    ck_assert_int_eq(run_ddpc_io(plan, NULL, ok, &r), 0);
    ck_assert_msg(r.status == 0 && strncmp(r.out, "job stdin\n", 10) == 0, "status %d: %s%s",
                  r.status, r.out, r.err);
    run_free(&r);
    leave_top(fd);
}
END_TEST

START_TEST(test_cli_formats)
{
    int fd = enter_top();
    struct cli_result r;
    char *gh[] = { "check", "--format", "github", "tests/specs/invalid/bf16-cpu.yaml",
                   "tests/specs/valid/single-device-timeouts.yaml", NULL };
    NEED_DDPC(run_ddpc(gh, &r));
    ck_assert_int_eq(r.status, 1);
    ck_assert_str_eq(r.out,
        "::error file=tests/specs/invalid/bf16-cpu.yaml,line=2,col=12::precision: bf16 needs a GPU, "
        "but accelerator is cpu; the CPU backend computes in fp32\n"
        "::warning file=tests/specs/valid/single-device-timeouts.yaml,line=5,col=15::nccl_timeout: "
        "ignored on a single device (there is no collective to bound)\n"
        "::warning file=tests/specs/valid/single-device-timeouts.yaml,line=6,col=20::rank_sync_timeout: "
        "ignored on a single device (there is no collective to bound)\n");
    run_free(&r);

    /* JSON: every file checked, the clean one too, and a rule code per
     * finding; it listed only findings, without codes */
    char *js[] = { "check", "--format=json", "tests/specs/invalid/bf16-cpu.yaml",
                   "tests/specs/valid/minimal.yaml", "tests/specs/valid/warnings.yaml", NULL };
    ck_assert_int_eq(run_ddpc(js, &r), 0);
    ck_assert_int_eq(r.status, 1);
    ck_assert_str_eq(r.out,
        "{\"version\":2,\"files\":[\n"
        " {\"file\":\"tests/specs/invalid/bf16-cpu.yaml\",\"status\":\"invalid\",\"errors\":1,"
        "\"warnings\":0,\"notes\":0},\n"
        " {\"file\":\"tests/specs/valid/minimal.yaml\",\"status\":\"valid\",\"errors\":0,"
        "\"warnings\":0,\"notes\":0},\n"
        " {\"file\":\"tests/specs/valid/warnings.yaml\",\"status\":\"valid\",\"errors\":0,"
        "\"warnings\":2,\"notes\":0}\n"
        "],\n\"diagnostics\":[\n"
        " {\"file\":\"tests/specs/invalid/bf16-cpu.yaml\",\"line\":2,\"col\":12,\"severity\":\"error\","
        "\"rule\":\"E-precision\",\"path\":\"precision\",\"message\":\"bf16 needs a GPU, but "
        "accelerator is cpu; the CPU backend computes in fp32\"},\n"
        " {\"file\":\"tests/specs/valid/warnings.yaml\",\"line\":5,\"col\":16,\"severity\":\"warning\","
        "\"rule\":\"W-lr-unscaled\",\"path\":\"learning_rate\",\"message\":\"2 devices and no "
        "lr_scaling: learning_rate stays 0.001; lr_scaling: linear would use 0.002\"},\n"
        " {\"file\":\"tests/specs/valid/warnings.yaml\",\"line\":12,\"col\":14,\"severity\":\"warning\","
        "\"rule\":\"W-no-checkpoint-dir\",\"path\":\"checkpoint.keep_last\",\"message\":\"has no "
        "effect without checkpoint_dir\"}\n"
        "],\n\"errors\":1,\"warnings\":2}\n");
    run_free(&r);

    /* a clean file is listed; --strict makes a warning's file invalid;
     * --quiet keeps the files and drops what does not fail */
    char *js0[] = { "check", "--format", "json", "tests/specs/valid/minimal.yaml", NULL };
    ck_assert_int_eq(run_ddpc(js0, &r), 0);
    ck_assert_int_eq(r.status, 0);
    ck_assert_str_eq(r.out, "{\"version\":2,\"files\":[\n"
                            " {\"file\":\"tests/specs/valid/minimal.yaml\",\"status\":\"valid\","
                            "\"errors\":0,\"warnings\":0,\"notes\":0}\n"
                            "],\n\"diagnostics\":[],\n\"errors\":0,\"warnings\":0}\n");
    run_free(&r);
    char *jsq[] = { "check", "--format", "json", "--quiet", "--strict",
                    "tests/specs/valid/warnings.yaml", "no/such.yaml", NULL };
    ck_assert_int_eq(run_ddpc(jsq, &r), 0);
    ck_assert_int_eq(r.status, 2);
    ck_assert_msg(strstr(r.out, "{\"file\":\"tests/specs/valid/warnings.yaml\",\"status\":"
                                "\"invalid\",\"errors\":0,\"warnings\":2,\"notes\":0}") &&
                  strstr(r.out, "{\"file\":\"no/such.yaml\",\"status\":\"unreadable\"") &&
                  strstr(r.out, "\"rule\":\"E-io\"") && strstr(r.out, "\"W-lr-unscaled\""),
                  "%s", r.out);
    run_free(&r);

    char *md[] = { "schema", "--format", "markdown", NULL };
    ck_assert_int_eq(run_ddpc(md, &r), 0);
    ck_assert_int_eq(r.status, 0);
    char *readme = slurp("spec/README.md");
    ck_assert_ptr_nonnull(readme);
    ck_assert_str_eq(r.out, readme);
    free(readme);
    run_free(&r);
    leave_top(fd);
}
END_TEST

/* Many specs in one call: 1000 copies of the example checked (data headers
 * off) in one run, all valid, nothing printed with --quiet. How fast:
 * bench/check_bench.sh. */
START_TEST(test_cli_many_specs)
{
    int fd = enter_top();
    char dir[] = "/tmp/ddpc-corpus-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char *text = slurp("examples/fashion-mnist.yaml");
    ck_assert_ptr_nonnull(text);
    enum { N = 1000 };
    static char *argv[N + 4];
    static char paths[N][64];
    argv[0] = "check";
    argv[1] = "--no-data";
    argv[2] = "--quiet";
    for (int i = 0; i < N; i++) {
        snprintf(paths[i], sizeof paths[i], "%s/s%04d.yaml", dir, i);
        FILE *f = fopen(paths[i], "w");
        ck_assert_ptr_nonnull(f);
        fputs(text, f);
        ck_assert_int_eq(fclose(f), 0);
        argv[3 + i] = paths[i];
    }
    argv[N + 3] = NULL;
    struct cli_result r;
    int rc = run_ddpc(argv, &r);
    for (int i = 0; i < N; i++)
        unlink(paths[i]);
    rmdir(dir);
    free(text);
    NEED_DDPC(rc);
    ck_assert_int_eq(r.status, 0);
    ck_assert_str_eq(r.out, "");
    run_free(&r);
    leave_top(fd);
}
END_TEST

/* Every subcommand answers --help: usage on stdout, exit 0. */
START_TEST(test_cli_help)
{
    int fd = enter_top();
    static const char *const cmds[] = { "check", "plan", "build", "schema" };
    struct cli_result r;
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char want[64];
        snprintf(want, sizeof want, "usage: ddpc %s", cmds[i]);
        char *a[] = { (char *)cmds[i], "--help", NULL };
        NEED_DDPC(run_ddpc(a, &r));
        ck_assert_msg(r.status == 0, "ddpc %s --help: exit %d", cmds[i], r.status);
        ck_assert_msg(strncmp(r.out, want, strlen(want)) == 0, "ddpc %s --help:\n%s", cmds[i],
                      r.out);
        ck_assert_str_eq(r.err, "");
        char *out = strdup(r.out);
        run_free(&r);
        char *h[] = { "help", (char *)cmds[i], NULL };   /* `ddpc help X` says the same */
        ck_assert_int_eq(run_ddpc(h, &r), 0);
        ck_assert_int_eq(r.status, 0);
        ck_assert_str_eq(r.out, out);
        free(out);
        run_free(&r);
    }
    char *top_help[] = { "--help", NULL };
    ck_assert_int_eq(run_ddpc(top_help, &r), 0);
    ck_assert_int_eq(r.status, 0);
    ck_assert(strncmp(r.out, "usage: ddpc ", 12) == 0);
    run_free(&r);
    leave_top(fd);
}
END_TEST

static void put(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
}

/* `ddpc check DIR` checks every *.yaml and *.yml below DIR, sorted, and a
 * directory without specs is an error, not a silent pass. */
START_TEST(test_cli_check_dir)
{
    int fd = enter_top();
    char dir[] = "/tmp/ddpc-checkdir-XXXXXX", p[256];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    const char *ok = "epochs: 1\nbatch_size: 8\nmodel: {layers: [16, 2]}\n"
                     "data: {train: {format: synthetic}}\n";
    snprintf(p, sizeof p, "%s/b.yaml", dir);
    put(p, ok);
    snprintf(p, sizeof p, "%s/a", dir);
    ck_assert_int_eq(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/a/z.yml", dir);
    put(p, ok);
    snprintf(p, sizeof p, "%s/a/notes.txt", dir);
    put(p, "not a spec\n");
    snprintf(p, sizeof p, "%s/a/deep", dir);
    ck_assert_int_eq(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/a/deep/bad.yaml", dir);
    put(p, "epochs: 0\nbatch_size: 8\nmodel: {layers: [16, 2]}\ndata: {train: {format: synthetic}}\n");
    snprintf(p, sizeof p, "%s/empty", dir);
    ck_assert_int_eq(mkdir(p, 0755), 0);
    /* a symlink back up the tree is not walked twice */
    snprintf(p, sizeof p, "%s/a/deep/loop", dir);
    ck_assert_int_eq(symlink(dir, p), 0);

    struct cli_result r;
    char *argv[] = { "check", dir, NULL };
    NEED_DDPC(run_ddpc(argv, &r));
    char want[1024];
    snprintf(want, sizeof want, "%s/a/deep/bad.yaml:1:9: error: epochs: must be between 1 and "
             "1000000, found 0\n", dir);
    ck_assert_str_eq(r.out, want);
    /* empty/ has no spec, but the tree does: only a named directory must have one */
    ck_assert_str_eq(r.err, "3 files checked, 1 error, 0 warnings\n");
    ck_assert_int_eq(r.status, 1);
    run_free(&r);

    char *json[] = { "check", "--format", "json", "--quiet", dir, NULL };
    ck_assert_int_eq(run_ddpc(json, &r), 0);
    ck_assert_int_eq(r.status, 1);
    ck_assert(strstr(r.out, "bad.yaml") != NULL);
    run_free(&r);

    snprintf(p, sizeof p, "%s/empty", dir);
    char *empty[] = { "check", p, NULL };
    ck_assert_int_eq(run_ddpc(empty, &r), 0);
    ck_assert_int_eq(r.status, 2);
    snprintf(want, sizeof want, "%s: error: no *.yaml or *.yml file in this directory or below\n", p);
    ck_assert_str_eq(r.out, want);
    run_free(&r);

    snprintf(p, sizeof p, "%s/a/deep/loop", dir);
    ck_assert_int_eq(unlink(p), 0);
    static const char *const files[] = { "a/deep/bad.yaml", "a/z.yml", "a/notes.txt", "b.yaml" };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        ck_assert_int_eq(unlink(p), 0);
    }
    static const char *const dirs[] = { "a/deep", "a", "empty", "" };
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, dirs[i]);
        ck_assert_int_eq(rmdir(p), 0);
    }
    leave_top(fd);
}
END_TEST

/* A directory is walked in bounded time whatever its links: a "ladder" of
 * 30 directories, each linking twice to the next, reaches the last one by
 * 2^29 paths, and check walked them all (it never ended); each real
 * directory is now read once, so the one spec is checked once. */
START_TEST(test_cli_check_dir_symlink_ladder)
{
    int fd = enter_top();
    char dir[] = "/tmp/ddpc-ladder-XXXXXX", p[512], t[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    enum { RUNGS = 30 };
    for (int i = 0; i < RUNGS; i++) {
        snprintf(p, sizeof p, "%s/l%02d", dir, i);
        ck_assert_int_eq(mkdir(p, 0755), 0);
    }
    for (int i = 0; i + 1 < RUNGS; i++) {
        snprintf(t, sizeof t, "../l%02d", i + 1);
        snprintf(p, sizeof p, "%s/l%02d/a", dir, i);
        ck_assert_int_eq(symlink(t, p), 0);
        snprintf(p, sizeof p, "%s/l%02d/b", dir, i);
        ck_assert_int_eq(symlink(t, p), 0);
    }
    snprintf(p, sizeof p, "%s/l%02d/top.yaml", dir, RUNGS - 1);
    put(p, "epochs: 1\nbatch_size: 8\nmodel: {layers: [16, 2]}\ndata: {train: {format: synthetic}}\n");

    struct cli_result r;
    char *argv[] = { "check", dir, NULL };
    cli_deadline_s = 20;
    NEED_DDPC(run_ddpc(argv, &r));
    ck_assert_msg(r.status == 0, "status %d (%d: timed out): %s%s", r.status, CLI_TIMED_OUT,
                  r.out, r.err);
    ck_assert_str_eq(r.out, "");
    ck_assert_str_eq(r.err, "1 file checked, 0 errors, 0 warnings\n");
    run_free(&r);

    ck_assert_int_eq(unlink(p), 0);
    for (int i = 0; i < RUNGS; i++) {
        if (i + 1 < RUNGS) {
            snprintf(p, sizeof p, "%s/l%02d/a", dir, i);
            ck_assert_int_eq(unlink(p), 0);
            snprintf(p, sizeof p, "%s/l%02d/b", dir, i);
            ck_assert_int_eq(unlink(p), 0);
        }
        snprintf(p, sizeof p, "%s/l%02d", dir, i);
        ck_assert_int_eq(rmdir(p), 0);
    }
    ck_assert_int_eq(rmdir(dir), 0);
    leave_top(fd);
}
END_TEST

/* /proc, /sys and /dev are not walked (/proc/self/root leads back to /, and
 * check never answered): a note names the file system, and a named
 * directory with no spec is still an error (exit 2). */
START_TEST(test_cli_check_dir_special_fs)
{
    int fd = enter_top();
    static const struct { const char *dir, *fs; } cases[] = {
        { "/proc", "proc" }, { "/sys", "sysfs" }, { "/dev", "devtmpfs" },
    };
    int ran = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *fs = specwalk_special_fs(cases[i].dir);
        if (!fs || strcmp(fs, cases[i].fs) != 0) {
            fprintf(stderr, "SKIP check_dir_special_fs %s: not a %s mount here\n", cases[i].dir,
                    cases[i].fs);
            continue;
        }
        struct cli_result r;
        char *argv[] = { "check", (char *)cases[i].dir, NULL };
        cli_deadline_s = 20;
        NEED_DDPC(run_ddpc(argv, &r));
        char want[512];
        snprintf(want, sizeof want, "%s: note: not walked: a %s file system holds kernel state, "
                 "not specs\n%s: error: no *.yaml or *.yml file in this directory or below\n",
                 cases[i].dir, cases[i].fs, cases[i].dir);
        ck_assert_msg(r.status == 2, "status %d (%d: timed out): %s%s", r.status, CLI_TIMED_OUT,
                      r.out, r.err);
        ck_assert_str_eq(r.out, want);
        run_free(&r);
        ran++;
    }
    if (!ran)
        test_skip("check_dir_special_fs", "none of /proc, /sys, /dev is its special file system");
    leave_top(fd);
}
END_TEST

/* The walk stops at its depth and directory-count limits, saying which and
 * where (an error: the rest of the tree is not checked), and a FIFO named
 * x.yaml is skipped with a note (opening it would block the check). */
START_TEST(test_specwalk_limits)
{
    char dir[] = "/tmp/ddpc-walklim-XXXXXX", p[512];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    /* dir/d/d/d/d/d, a spec at each level */
    size_t l = (size_t)snprintf(p, sizeof p, "%s", dir);
    for (int i = 0; i < 5; i++) {
        l += (size_t)snprintf(p + l, sizeof p - l, "/d");
        ck_assert_int_eq(mkdir(p, 0755), 0);
        char f[600];
        snprintf(f, sizeof f, "%s/s.yaml", p);
        put(f, "epochs: 1\n");
    }
    snprintf(p, sizeof p, "%s/fifo.yaml", dir);
    ck_assert_int_eq(mkfifo(p, 0600), 0);

    struct specwalk_list out = { 0 };
    struct ddpc_diag d;
    diag_init(&d);
    ck_assert_int_eq(specwalk_dir(dir, NULL, &out, &d), 0);
    ck_assert_int_eq(out.n, 5);
    ck_assert_int_eq(d.n, 1);
    ck_assert_int_eq(d.v[0].severity, DDPC_SEV_NOTE);
    ck_assert_str_eq(d.v[0].file, p);
    ck_assert_str_eq(d.v[0].message, "not checked: not a regular file (name it on the command "
                                     "line to read it)");
    ck_assert_int_eq(d.io_error, 0);
    specwalk_list_free(&out);
    diag_free(&d);

    struct specwalk_limits deep = { .max_depth = 2, .max_dirs = 100 };
    ck_assert_int_eq(specwalk_dir(dir, &deep, &out, &d), 0);
    ck_assert_int_eq(out.n, 2);   /* dir/d/s.yaml, dir/d/d/s.yaml */
    ck_assert_int_eq(d.n_errors, 1);
    ck_assert(d.io_error);
    char want[600];
    snprintf(want, sizeof want, "%s/d/d/d", dir);
    int k = d.v[0].severity == DDPC_SEV_ERROR ? 0 : 1;
    ck_assert_str_eq(d.v[k].file, want);
    ck_assert_str_eq(d.v[k].message, "not walked: more than 2 directories deep; name a deeper "
                                     "directory on the command line");
    specwalk_list_free(&out);
    diag_free(&d);

    struct specwalk_limits few = { .max_depth = 64, .max_dirs = 3 };
    ck_assert_int_eq(specwalk_dir(dir, &few, &out, &d), 0);
    ck_assert_int_eq(out.n, 2);
    ck_assert_int_eq(d.n_errors, 1);
    k = d.v[0].severity == DDPC_SEV_ERROR ? 0 : 1;
    ck_assert_str_eq(d.v[k].file, want);
    ck_assert_str_eq(d.v[k].message, "stopped after 3 directories; the rest of the tree is not "
                                     "checked: name the directories that hold the specs");
    specwalk_list_free(&out);
    diag_free(&d);

    ck_assert_int_eq(unlink(p), 0);
    for (int i = 5; i > 0; i--) {
        l = (size_t)snprintf(p, sizeof p, "%s", dir);
        for (int j = 0; j < i; j++)
            l += (size_t)snprintf(p + l, sizeof p - l, "/d");
        char f[600];
        snprintf(f, sizeof f, "%s/s.yaml", p);
        ck_assert_int_eq(unlink(f), 0);
        ck_assert_int_eq(rmdir(p), 0);
    }
    ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

/* --no-data reads no data header: a sequential model without model.input
 * has no input shape, so its layers are not checked, and check says so
 * (a note) rather than pass in silence; with model.input they are. */
START_TEST(test_cli_no_data_shapes)
{
    int fd = enter_top();
    struct cli_result r;
    char *nd[] = { "check", "--no-data", "examples/fashion-mnist-cnn.yaml", NULL };
    NEED_DDPC(run_ddpc(nd, &r));
    ck_assert_int_eq(r.status, 0);
    ck_assert_msg(strstr(r.out, "examples/fashion-mnist-cnn.yaml:") &&
                  strstr(r.out, ": note: model.layers: the layers' shapes were not checked: "
                                "--no-data reads no data header, and model.input is not set"),
                  "%s", r.out);
    run_free(&r);
    char *in[] = { "check", "--no-data", "--set", "model.input=[1, 28, 28]",
                   "examples/fashion-mnist-cnn.yaml", NULL };
    ck_assert_int_eq(run_ddpc(in, &r), 0);
    ck_assert_int_eq(r.status, 0);
    ck_assert_str_eq(r.out, "");
    run_free(&r);
    /* and a wrong one is found without the data */
    char *bad[] = { "check", "--no-data", "--set", "model.input=[784]",
                    "examples/fashion-mnist-cnn.yaml", NULL };
    ck_assert_int_eq(run_ddpc(bad, &r), 0);
    ck_assert_int_eq(r.status, 1);
    ck_assert_msg(strstr(r.out, "error: model.layers[0]: "), "%s", r.out);
    run_free(&r);
    leave_top(fd);
}
END_TEST

/* --set KEY=VALUE overrides the spec on check and plan; a finding about the
 * overridden value names the --set, not a line of the file. */
START_TEST(test_cli_set)
{
    int fd = enter_top();
    struct cli_result r;
    char *bad[] = { "check", "--set", "epochs=0", "--set=model.layers=[16, x]",
                    "tests/specs/valid/minimal.yaml", NULL };
    NEED_DDPC(run_ddpc(bad, &r));
    ck_assert_int_eq(r.status, 1);
    ck_assert_str_eq(r.out,
        "--set epochs=0: error: epochs: must be between 1 and 1000000, found 0\n"
        "--set model.layers=[16, x]: error: model.layers[1]: expected an integer, found 'x'\n");
    run_free(&r);

    /* an override repairs a spec, and applies to every file checked */
    char *fix[] = { "check", "--set", "model.layers=[16, 2]", "--set", "epochs=2",
                    "tests/specs/invalid/linear-layers.yaml", "tests/specs/valid/minimal.yaml",
                    NULL };
    ck_assert_int_eq(run_ddpc(fix, &r), 0);
    ck_assert_msg(r.status == 0, "%s%s", r.out, r.err);
    run_free(&r);

    /* GitHub annotations: an override is not a file */
    char *gh[] = { "check", "--format", "github", "--set", "epochs=0",
                   "tests/specs/valid/minimal.yaml", NULL };
    ck_assert_int_eq(run_ddpc(gh, &r), 0);
    ck_assert_int_eq(r.status, 1);
    ck_assert_str_eq(r.out, "::error::--set epochs=0: epochs: must be between 1 and 1000000, "
                            "found 0\n");
    run_free(&r);

    /* another tool's name through --set gets the same help */
    char *lr[] = { "check", "--set", "lr=0.1", "tests/specs/valid/minimal.yaml", NULL };
    ck_assert_int_eq(run_ddpc(lr, &r), 0);
    ck_assert_int_eq(r.status, 1);
    ck_assert(strncmp(r.out, "--set lr=0.1: error: lr: unknown key 'lr' (PyTorch's", 52) == 0);
    run_free(&r);

    /* plan sees the overridden job */
    char *plan[] = { "plan", "tests/specs/valid/minimal.yaml", "--set", "devices=2", "--set",
                     "lr_scaling=linear", "--set", "data.train.samples=100", "--json", NULL };
    ck_assert_int_eq(run_ddpc(plan, &r), 0);
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_msg(strstr(r.out, "\"known\": true, \"size\": 2,") != NULL, "%s", r.out);
    ck_assert_str_eq(r.err, "");
    run_free(&r);

    /* usage errors: exit 2, nothing checked */
    static const char *const usage[][3] = { { "--set", NULL }, { "--set", "epochs" },
                                            { "--set", "=1" } };
    for (size_t i = 0; i < sizeof usage / sizeof usage[0]; i++) {
        char *u[] = { "check", "tests/specs/valid/minimal.yaml", (char *)usage[i][0],
                      (char *)usage[i][1], NULL };
        ck_assert_int_eq(run_ddpc(u, &r), 0);
        ck_assert_int_eq(r.status, 2);
        ck_assert(strstr(r.err, "--set takes KEY.PATH=VALUE") != NULL);
        run_free(&r);
    }
    leave_top(fd);
}
END_TEST

/* The text a build bakes (and hashes) carries the overrides; an override of
 * a key shared through an alias changes only the path it names. */
START_TEST(test_set_overrides_spec)
{
    int fd = enter_top();
    char dir[] = "/tmp/ddpc-set-XXXXXX", p[256];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(p, sizeof p, "%s/s.yaml", dir);
    put(p, "x-src: &src {format: synthetic, samples: 64}\nepochs: 1\nbatch_size: 8\n"
           "model: {layers: [16, 2]}\ndata: {train: *src, test: *src}");
    const char *sets[] = { "data.test.samples=32", "epochs=3", "name=a\tb" };
    struct spec_options opt = { .read_data_headers = 1, .overrides = sets, .n_overrides = 2 };
    struct ddpc_diag d;
    struct ddpc_job job;
    struct spec_doc *doc = NULL;
    diag_init(&d);
    ck_assert_int_eq(spec_load_job(p, &opt, &job, &doc, &d), 0);
    ck_assert_int_eq(job.data.train.samples, 64);
    ck_assert_int_eq(job.data.test.samples, 32);
    ck_assert_int_eq(job.epochs, 3);
    size_t len;
    const char *text = spec_doc_text(doc, &len);
    ck_assert_uint_eq(strlen(text), len);
    const char *tail = "data: {train: *src, test: *src}\n"
                       "# ddpc --set data.test.samples=32\n# ddpc --set epochs=3\n";
    ck_assert(len > strlen(tail));
    ck_assert_str_eq(text + len - strlen(tail), tail);
    spec_doc_free(doc);
    diag_free(&d);

    /* control characters cannot end the comment line */
    opt.overrides = sets + 2;
    opt.n_overrides = 1;
    diag_init(&d);
    ck_assert_int_eq(spec_load_job(p, &opt, &job, &doc, &d), 1);
    text = spec_doc_text(doc, &len);
    ck_assert(strstr(text, "\n# ddpc --set name=a\\x09b\n") != NULL);
    ck_assert_str_eq(d.v[0].file, "--set name=a\tb");
    spec_doc_free(doc);
    diag_free(&d);
    ck_assert_int_eq(unlink(p), 0);
    ck_assert_int_eq(rmdir(dir), 0);
    leave_top(fd);
}
END_TEST

/* The README's commands work as printed: its `export PATH=...` line and
 * every `ddpc ...` line of its code blocks run, in order, with /bin/sh from
 * a directory laid out like the repository's top (examples/, build/), and
 * each must succeed. Lines that train (./job) are not run: the e2e suite
 * trains. */
START_TEST(test_readme_commands)
{
    int fd = enter_top();
    const char *b = getenv("DDPC_BUILD");
    if (!b || !b[0] || access("/usr/share/datasets/fashion-mnist", R_OK) != 0) {
        test_skip("readme commands", "%s", !b || !b[0] ? "DDPC_BUILD is not set"
                : "the examples' data (dataset-fashion-mnist) is not installed");
        leave_top(fd);
        return;
    }
    char *readme = slurp("README.md");
    ck_assert_ptr_nonnull(readme);
    char dir[] = "/tmp/ddpc-readme-XXXXXX", cwd[4096], p[4200];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    ck_assert_ptr_nonnull(getcwd(cwd, sizeof cwd));
    char *script = NULL;
    size_t sl = 0;
    FILE *sf = open_memstream(&script, &sl);
    ck_assert_ptr_nonnull(sf);
    fprintf(sf, "cd '%s' || exit 1\n", dir);
    int fenced = 0, n_ddpc = 0, n_export = 0;
    for (char *line = readme; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        if (strncmp(line, "```", 3) == 0)
            fenced = !fenced;
        else if (!fenced && strncmp(line, "    ", 4) == 0) {
            char *cmd = line + 4, *c;
            if ((c = strstr(cmd, "  #")))
                *c = '\0';
            if ((c = strstr(cmd, " && ./")))
                *c = '\0';   /* builds, but does not train */
            size_t l = strlen(cmd);
            while (l && cmd[l - 1] == ' ')
                cmd[--l] = '\0';
            int is_ddpc = strncmp(cmd, "ddpc ", 5) == 0 || strncmp(cmd, "build/bin/ddpc ", 15) == 0;
            int is_export = strncmp(cmd, "export PATH=", 12) == 0;
            if (is_ddpc || is_export) {
                fprintf(sf, "%s || { echo 'README command failed: %s' >&2; exit 1; }\n", cmd, cmd);
                n_ddpc += is_ddpc;
                n_export += is_export;
            }
        }
        line = nl ? nl + 1 : NULL;
    }
    ck_assert_int_eq(fclose(sf), 0);
    ck_assert_msg(n_export == 1, "README has %d `export PATH=` lines", n_export);
    ck_assert_msg(n_ddpc >= 6, "README has only %d ddpc commands", n_ddpc);
    /* the repository's layout: examples/ and build/ (the build under test) */
    snprintf(p, sizeof p, "%s/examples", dir);
    char target[4200];
    snprintf(target, sizeof target, "%s/examples", cwd);
    ck_assert_int_eq(symlink(target, p), 0);
    snprintf(p, sizeof p, "%s/build", dir);
    if (b[0] == '/')
        snprintf(target, sizeof target, "%s", b);
    else
        snprintf(target, sizeof target, "%s/%s", cwd, b);
    ck_assert_int_eq(symlink(target, p), 0);
    pid_t pid;
    char *args[] = { "/bin/sh", "-c", script, NULL };
    ck_assert_int_eq(posix_spawn(&pid, "/bin/sh", NULL, NULL, args, environ), 0);
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    snprintf(p, sizeof p, "%s/fashion-mnist", dir);
    int built = access(p, X_OK) == 0;
    /* clean up what the commands wrote, then judge */
    static const char *const made[] = { "fashion-mnist", "fashion-mnist-cnn", "quick",
                                        "gpt-fortunes",
                                        "ddpc.schema.json", "examples",
                                        "build" };
    for (size_t i = 0; i < sizeof made / sizeof made[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, made[i]);
        unlink(p);
    }
    int left = rmdir(dir) != 0;
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "README commands failed:\n%s", script);
    ck_assert_msg(built, "the README's build did not write ./fashion-mnist");
    ck_assert_msg(!left, "README commands left files in %s", dir);
    free(script);
    free(readme);
    leave_top(fd);
}
END_TEST

static int collect(const char *pattern, char **dst)
{
    char full[4096];
    glob_t g;
    int n = 0;
    snprintf(full, sizeof full, "%s/%s", top(), pattern);
    if (glob(full, 0, NULL, &g) != 0)
        return 0;
    size_t skip = strlen(top()) + 1;
    for (size_t i = 0; i < g.gl_pathc && n < MAX_CORPUS; i++)
        dst[n++] = strdup(g.gl_pathv[i] + skip);   /* relative to the top; kept for the run */
    globfree(&g);
    return n;
}

Suite *speccorpus_suite(void)
{
    Suite *s = suite_create("speccorpus");
    TCase *tc = tcase_create("corpus");
    n_invalid = collect("tests/specs/invalid/*.yaml", corpus_invalid);
    n_valid = collect("tests/specs/valid/*.yaml", corpus_valid);
    n_valid += collect("examples/*.yaml", corpus_valid + n_valid);
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_invalid_spec, 0, n_invalid);
    tcase_add_loop_test(tc, test_valid_spec, 0, n_valid);
    tcase_add_test(tc, test_reference_up_to_date);
    tcase_add_test(tc, test_coming_from_up_to_date);
    tcase_add_test(tc, test_reference_multinode_cpu);
    tcase_add_test(tc, test_cited_docs_exist);
    tcase_add_test(tc, test_front_end_findings_have_rules);
    suite_add_tcase(s, tc);
    TCase *cli = tcase_create("cli");
    tcase_set_timeout(cli, 60);
    tcase_add_test(cli, test_cli_exit_codes);
    tcase_add_test(cli, test_cli_stdin);
    tcase_add_test(cli, test_cli_pipe_path);
    tcase_add_test(cli, test_cli_formats);
    tcase_add_test(cli, test_cli_many_specs);
    tcase_add_test(cli, test_cli_help);
    tcase_add_test(cli, test_readme_commands);
    tcase_add_test(cli, test_cli_check_dir);
    tcase_add_test(cli, test_cli_check_dir_symlink_ladder);
    tcase_add_test(cli, test_cli_check_dir_special_fs);
    tcase_add_test(cli, test_specwalk_limits);
    tcase_add_test(cli, test_cli_no_data_shapes);
    tcase_add_test(cli, test_cli_set);
    tcase_add_test(tc, test_set_overrides_spec);
    suite_add_tcase(s, cli);
    return s;
}
