/* cc.c - the compiler driver of `ddpc build` (see cc.h).
 *
 * Owns: the command line that turns job.c + job_config.h into a program,
 * the CPU/CUDA choice, and the messages when that fails. A job is never
 * linked with CUDA: when it may use GPUs, the absolute path of
 * PREFIX/lib/ddpc/libddprt_cuda.so is baked in (DDPC_CUDA_PLUGIN) and the job's
 * launcher dlopen()s it only when a GPU will be used (runtime/ddprt.c).
 * Never: runs a shell, prints the compiler's output before saying what
 * failed, or leaves OUT half-written.
 */
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include "buf.h"
#include "cc.h"
#include "interrupt.h"
#include "spawn.h"
#include "toolchain.h"    /* DDPC_CC, DDPC_JOB_CFLAGS, DDPC_RT_LIBS, DDPC_HAVE_*, DDPC_SANFLAGS */

#ifndef DDPC_JOB_CFLAGS
#define DDPC_JOB_CFLAGS "-O2"
#endif
#ifndef DDPC_SANFLAGS
#define DDPC_SANFLAGS ""
#endif

/* argv under construction: every string owned */
struct argv_list {
    char **v;
    int    n, cap;
    int    oom;
};

static void argv_add(struct argv_list *a, const char *s)
{
    if (a->oom)
        return;
    if (a->n + 2 > a->cap) {
        int cap = a->cap ? a->cap * 2 : 32;
        char **v = realloc(a->v, (size_t)cap * sizeof *v);
        if (!v) {
            a->oom = 1;
            return;
        }
        a->v = v;
        a->cap = cap;
    }
    if (!(a->v[a->n] = strdup(s))) {
        a->oom = 1;
        return;
    }
    a->v[++a->n] = NULL;
}

static void argv_addf(struct argv_list *a, const char *fmt, const char *x, const char *y)
{
    char *s;
    if (asprintf(&s, fmt, x, y) < 0) {
        a->oom = 1;
        return;
    }
    argv_add(a, s);
    free(s);
}

/* Toolchain strings from the Makefile are space-separated word lists. */
static void argv_add_words(struct argv_list *a, const char *words)
{
    char *copy = strdup(words), *save = NULL;
    if (!copy) {
        a->oom = 1;
        return;
    }
    for (char *w = strtok_r(copy, " \t", &save); w; w = strtok_r(NULL, " \t", &save))
        argv_add(a, w);
    free(copy);
}

static void argv_free(struct argv_list *a)
{
    for (int i = 0; i < a->n; i++)
        free(a->v[i]);
    free(a->v);
    memset(a, 0, sizeof *a);
}

int cc_wants_cuda(const struct ddpc_job *job, int cpu_only)
{
    return DDPC_HAVE_CUDA_LIB && !cpu_only && job->accelerator != DDPC_ACCEL_CPU;
}

#ifndef DDPC_HAVE_GLOO_LIB
#define DDPC_HAVE_GLOO_LIB 0
#endif

int cc_wants_gloo(const struct ddpc_job *job, int cpu_only)
{
    return DDPC_HAVE_GLOO_LIB && job->launch.num_nodes > 1 &&
           (cpu_only || job->accelerator != DDPC_ACCEL_GPU);
}

/* -DNAME="PREFIX/lib/FILE" as one argv word (no shell; buf_c_str escapes
 * every byte that could matter). */
static int add_path_define(struct argv_list *a, const char *name, const char *prefix,
                           const char *file)
{
    struct ddpc_buf lit;
    char *so;
    if (asprintf(&so, "%s/lib/ddpc/%s", prefix, file) < 0)
        return -1;
    buf_init(&lit);
    buf_printf(&lit, "-D%s=", name);
    buf_c_str(&lit, so, strlen(so));
    free(so);
    char *def = buf_take(&lit);
    if (!def)
        return -1;
    argv_add(a, def);
    free(def);
    return 0;
}

/* A file the build needs; the hint says how to get it. */
static int need(const char *prefix, const char *rel, const char *what, struct ddpc_diag *d)
{
    char *p;
    if (asprintf(&p, "%s/%s", prefix, rel) < 0)
        return -1;
    int ok = access(p, R_OK) == 0;
    if (!ok)
        diag_add(d, DDPC_SEV_ERROR, "ddpc", 0, 0, "",
                 "%s not found at %s: run `make` in the ddpc source tree, or `make install`",
                 what, p);
    free(p);
    return ok ? 0 : -1;
}

const char *cc_failure_hint(const char *output)
{
    static const struct { const char *needle, *hint; } known[] = {
        { "cannot find -lopenblas",
          "the linker cannot find OpenBLAS (-lopenblas): install libopenblas-dev" },
        { "cannot find -lz", "the linker cannot find zlib (-lz): install zlib1g-dev" },
        { "undefined reference to",
          "the runtime library does not match this ddpc (a symbol is missing): rebuild and "
          "reinstall both with make install" },
        { "job_config.h: No such file",
          "the generated header is missing: rerun ddpc build (with --emit-dir to keep it)" },
    };
    if (!output)
        return NULL;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strstr(output, known[i].needle))
            return known[i].hint;
    return NULL;
}

/* Everything the compiler wrote to fd, as a string the caller frees. */
static char *read_output(int fd)
{
    struct ddpc_buf b;
    char chunk[4096];
    ssize_t n;
    buf_init(&b);
    buf_add(&b, "", 0);
    if (lseek(fd, 0, SEEK_SET) == 0)
        while ((n = read(fd, chunk, sizeof chunk)) > 0)
            buf_add(&b, chunk, (size_t)n);
    return buf_take(&b);
}

/* Long on purpose (~170 lines): the compiler's argument vector, its private
 * temp directory and its captured output are made and released along one
 * path (the done/oom labels); apart, each would need its own cleanup. */
int cc_build(const struct cc_options *o, char **output, struct ddpc_diag *d)
{
    int rc = -1, out_fd = -1, have_fa = 0, tmp_slot = -1;
    char *tmp = NULL, *cc_tmp = NULL, *tmp_env = NULL;
    char **envp = NULL;
    struct argv_list a = { 0 };
    posix_spawn_file_actions_t fa;
    FILE *log = o->log ? o->log : stderr;
    *output = NULL;
    int cuda = cc_wants_cuda(o->job, o->cpu_only);
    int gloo = cc_wants_gloo(o->job, o->cpu_only);

    if (o->job->accelerator == DDPC_ACCEL_GPU && !DDPC_HAVE_CUDA_LIB && !o->cpu_only) {
        diag_add(d, DDPC_SEV_ERROR, "ddpc", 0, 0, "accelerator",
                 "the job asks for GPUs but this ddpc was built without CUDA (no nvcc): "
                 "rebuild ddpc where CUDA is installed, or use accelerator: auto or cpu");
        goto done;
    }
    if (need(o->prefix, "lib/libddprt.a", "the runtime library libddprt.a", d) != 0 ||
        need(o->prefix, "share/ddpc/job.c", "the job main (job.c)", d) != 0 ||
        need(o->prefix, "include/ddpc/ddprt.h", "the runtime headers", d) != 0 ||
        (cuda && need(o->prefix, "lib/ddpc/libddprt_cuda.so", "the CUDA backend libddprt_cuda.so", d) != 0) ||
        (gloo && need(o->prefix, "lib/ddpc/libddprt_gloo.so", "the multi-node CPU communicator libddprt_gloo.so", d) != 0))
        goto done;

    if (asprintf(&tmp, "%s.tmp.%ld", o->out, (long)getpid()) < 0) {
        tmp = NULL;
        goto oom;
    }
    tmp_slot = intr_track(tmp);     /* the compiler creates it; a signal removes it */

    /* The compiler's own temp files (cc*.s, cc*.o) go to a private
     * TMPDIR, emptied and removed afterwards and on a signal: a compiler
     * killed mid-step cannot leave them in the user's TMPDIR. */
    const char *t = getenv("TMPDIR");
    if (asprintf(&cc_tmp, "%s/ddpc-cc-XXXXXX", t && t[0] ? t : "/tmp") < 0) {
        cc_tmp = NULL;
        goto oom;
    }
    sigset_t held;
    intr_hold(&held);
    int made = mkdtemp(cc_tmp) != NULL;
    int mk_err = errno;
    if (made)
        intr_track_wipe(cc_tmp);
    intr_release(&held);
    if (!made) {
        diag_add(d, DDPC_SEV_ERROR, "ddpc", 0, 0, "", "cannot create a temporary directory "
                 "%s: %s; set TMPDIR to a writable directory", cc_tmp, strerror(mk_err));
        free(cc_tmp);
        cc_tmp = NULL;
        goto done;
    }
    size_t n_env = 0;
    while (environ[n_env])
        n_env++;
    envp = calloc(n_env + 2, sizeof *envp);
    if (!envp || asprintf(&tmp_env, "TMPDIR=%s", cc_tmp) < 0) {
        tmp_env = NULL;
        goto oom;
    }
    size_t k = 0;
    for (size_t i = 0; i < n_env; i++)
        if (strncmp(environ[i], "TMPDIR=", 7) != 0)
            envp[k++] = environ[i];
    envp[k++] = tmp_env;
    envp[k] = NULL;

    /* the compiler and flags this ddpc was built with (JOB_CFLAGS, -O2 by
     * default: one small file, the job's speed is in libddprt) */
    argv_add_words(&a, DDPC_CC);
    argv_add_words(&a, DDPC_JOB_CFLAGS);
    argv_add_words(&a, DDPC_SANFLAGS);
    argv_addf(&a, "-I%s%s", "", o->emit_dir);
    argv_addf(&a, "-I%s/%s", o->prefix, "include/ddpc");
    if (cuda) {
        /* the plugin's absolute path as a C string literal (one argv word,
         * no shell; buf_c_str escapes every byte that could matter) */
        struct ddpc_buf lit;
        char *so;
        if (asprintf(&so, "%s/lib/ddpc/libddprt_cuda.so", o->prefix) < 0)
            goto oom;
        buf_init(&lit);
        buf_puts(&lit, "-DDDPC_CUDA_PLUGIN=");
        buf_c_str(&lit, so, strlen(so));
        free(so);
        char *def = buf_take(&lit);
        if (!def)
            goto oom;
        argv_add(&a, "-DDDPC_WITH_CUDA=1");
        argv_add(&a, def);
        free(def);
    }
    if (gloo && add_path_define(&a, "DDPC_GLOO_PLUGIN", o->prefix, "libddprt_gloo.so") < 0)
        goto oom;
    argv_addf(&a, "%s/%s", o->prefix, "share/ddpc/job.c");
    argv_addf(&a, "%s/%s", o->prefix, "lib/libddprt.a");
    argv_add_words(&a, DDPC_RT_LIBS);
    argv_add(&a, "-o");
    argv_add(&a, tmp);
    if (a.oom)
        goto oom;

    if (o->verbose) {
        for (int i = 0; i < a.n; i++)
            fprintf(log, "%s%s", i ? " " : "", a.v[i]);
        fputc('\n', log);
    }

    /* the compiler's stdout and stderr go to an anonymous file, so they can
     * follow our summary instead of preceding it */
    out_fd = memfd_create("ddpc-cc", MFD_CLOEXEC);
    if (out_fd < 0) {
        diag_add(d, DDPC_SEV_ERROR, "ddpc", 0, 0, "", "memfd_create: %s", strerror(errno));
        goto done;
    }
    if (posix_spawn_file_actions_init(&fa) != 0)
        goto oom;
    have_fa = 1;
    if (posix_spawn_file_actions_adddup2(&fa, out_fd, 1) != 0 ||
        posix_spawn_file_actions_adddup2(&fa, out_fd, 2) != 0)
        goto oom;
    int st;
    if (spawn_wait(a.v, &fa, envp, "the C compiler ", " (install one: apt-get install gcc)",
                   &st, d) != 0)
        goto done;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        if (WIFEXITED(st)) {
            /* read now: the hint comes from it, and goes before it */
            *output = read_output(out_fd);
            const char *hint = cc_failure_hint(*output);
            diag_add(d, DDPC_SEV_ERROR, "ddpc", 0, 0, "",
                     "compiling job.c and linking the runtime%s failed (%s exit status %d)%s%s; "
                     "the compiler's output follows", cuda ? " (with CUDA)" : "", a.v[0],
                     WEXITSTATUS(st), hint ? ": " : "", hint ? hint : "");
        } else
            diag_add(d, DDPC_SEV_ERROR, "ddpc", 0, 0, "", "the C compiler %s was killed by signal %d",
                     a.v[0], WTERMSIG(st));
        goto done;
    }
    if (rename(tmp, o->out) != 0) {
        diag_add(d, DDPC_SEV_ERROR, o->out, 0, 0, "", "cannot write the program: %s",
                 strerror(errno));
        goto done;
    }
    free(tmp);
    tmp = NULL;
    rc = 0;
    goto done;
oom:
    diag_add(d, DDPC_SEV_ERROR, "ddpc", 0, 0, "", "out of memory");
done:
    /* the summary is in d; the caller prints it, then this output */
    if (out_fd >= 0 && !*output)
        *output = read_output(out_fd);
    if (have_fa)
        posix_spawn_file_actions_destroy(&fa);
    if (tmp) {
        unlink(tmp);
        free(tmp);
    }
    intr_untrack(tmp_slot);
    if (cc_tmp)
        intr_wipe_now(cc_tmp);
    free(cc_tmp);
    free(tmp_env);
    free(envp);
    argv_free(&a);
    if (out_fd >= 0)
        close(out_fd);
    return rc;
}
