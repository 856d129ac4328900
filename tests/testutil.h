/* testutil.h - helpers for tests that run programs the way a user does.
 *
 * run_capture forks and execs argv (never a shell), collects stdout and
 * stderr, and kills the whole process group if it runs past timeout_s, so a
 * hanging job fails the test instead of hanging the suite. */
#ifndef DDPC_TESTUTIL_H
#define DDPC_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct run_result {
    int    exited;      /* 1: exited normally, status in code */
    int    code;        /* exit status, or the signal number when !exited */
    int    timed_out;
    double seconds;
    char  *out;         /* stdout, NUL-terminated; free with run_result_free */
    char  *err;         /* stderr */
};

/* cwd may be NULL. env_extra: NULL-terminated "K=V" list added to the
 * environment, or NULL. Returns 0, or -1 if the program could not be run. */
int  run_capture(char *const argv[], const char *cwd, char *const env_extra[],
                 double timeout_s, struct run_result *r);
void run_result_free(struct run_result *r);

/* The shipped loader on an export, as a user runs it: /usr/bin/python3 -m
 * ddpc_torch MODEL [--spec SPEC --score] with PYTHONPATH the build's
 * share/ddpc/python (what make install puts in PREFIX/share/ddpc/python),
 * from / so that nothing of tests/ is on its path. Exit 1 with "cannot
 * import torch" in its stderr when torch is missing (the caller SKIPs). */
int  run_loader(const char *model, const char *spec, double timeout_s, struct run_result *r);
/* Whether r is the loader's "no torch" failure (the caller SKIPs). */
int  loader_lacks_torch(const struct run_result *r);

/* A program started in the background, in its own process group (pgid ==
 * pid), with its output collected as it comes. */
struct run_proc {
    pid_t  pid;
    int    fd_out, fd_err;
    double t0;
    char  *out, *err;          /* output so far, NUL-terminated */
    size_t out_n, out_cap, err_n, err_cap;
};
int  run_start(char *const argv[], const char *cwd, char *const env_extra[],
               struct run_proc *p);
/* Collects output until `needle` appears in stdout or stderr (1), or
 * timeout_s passes or the program closes both (0). */
int  run_wait_output(struct run_proc *p, const char *needle, double timeout_s);
/* The same, until needle has occurred `count` times in stdout + stderr. */
int  run_wait_count(struct run_proc *p, const char *needle, int count, double timeout_s);
/* Collects the rest, waits for the exit (SIGKILL to the whole group after
 * timeout_s) and moves the output into r; p is spent. Call it before
 * anything that reaps with waitpid(-1) (leftover_children), or the status
 * is lost (r->exited 0, r->code -1). */
int  run_finish(struct run_proc *p, double timeout_s, struct run_result *r);

/* Live children of parent, in fork order (start time, then pid); at most
 * max. For a job's launcher that is its workers by local rank. */
int  child_pids(pid_t parent, pid_t *out, int max);
/* /proc state letter of pid ('R', 'S', 'T' stopped, 'Z'), or 0 when gone. */
char proc_state(pid_t pid);
/* Waits until none of pids is alive (zombies count as gone; those of them
 * that are our children, adopted or not, are reaped); returns how many are
 * still alive after timeout_s. */
int  wait_gone(const pid_t *pids, int n, double timeout_s);

/* A test, or a part of one, that needs what this machine lacks: prints
 * "SKIP <what>: <why>" on stdout and counts it, so the run's summary says how
 * many tests skipped something (tests/main.c). Then return from the test (or
 * go on with the parts that can run). */
void test_skip(const char *what, const char *why_fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* tests/main.c: the count lives in memory shared with the forked tests. */
void test_skip_init(void);
int  test_skipped(void);

/* $DDPC_TOP and $DDPC_BUILD (set by make test), with "." and "build" as fallback. */
const char *test_top(void);
const char *test_build(void);

/* A fresh directory under $TMPDIR; caller frees the string and removes the
 * tree with rm_tree. */
char *make_temp_dir(const char *tag);
int   rm_tree(const char *path);
int   write_file(const char *path, const void *data, size_t len);
/* The whole file, NUL-terminated (len without it); asserts it could be
 * read. Caller frees. */
char *read_whole(const char *path, size_t *len);
/* Writes an IDX pair as the Fashion-MNIST files are laid out: images
 * [n, rows, cols] of uint8 (magic 0x803) and labels [n] of uint8 (0x801).
 * Returns 0, or -1 if a file could not be written. */
int   write_idx_pair(const char *images, const char *labels, int n, int rows, int cols,
                     const unsigned char *pixels, const unsigned char *label_bytes);
/* Runs `ddpc build spec -o out` (the ddpc of $DDPC_BUILD) and asserts that
 * it succeeded and out is executable. */
void  ddpc_build_ok(const char *spec, const char *out);
/* Writes an llm.c token shard (dev/data/data_common.py write_datafile): 256
 * little-endian int32 (magic, version, count, zeros), then ntok
 * little-endian uint16; count is what the header claims, which a bad shard
 * makes differ. Returns 0, or -1 if it could not be written. */
int   write_llmc_shard(const char *path, int32_t magic, int32_t version, int32_t count,
                       const uint16_t *tok, size_t ntok);
/* The double after "key=" in text (first occurrence at or after from), or NAN. */
double find_kv(const char *text, const char *key);

/* Makes this process the reaper of orphans (PR_SET_CHILD_SUBREAPER), so a
 * worker that outlives its launcher becomes our child. */
void adopt_orphans(void);
/* Number of children still alive after grace_s (kills and reaps them). */
int  leftover_children(double grace_s);

/* Loads the spec at path into *job (and *doc, for spec_doc_free) as ddpc
 * build does, reading the data files' headers; on any error prints every
 * diagnostic on stdout and fails the test with the first. */
struct ddpc_job;
struct spec_doc;
void test_load_job(const char *path, struct ddpc_job *job, struct spec_doc **doc);

/* The next of a reproducible stream of floats in [-1, 1) (a 64-bit LCG,
 * Knuth's MMIX constants; the top 24 bits): the emulator suites' inputs. */
float test_urand(uint64_t *state);

/* Allocations made by this process's own code (ddpc's and the tests'; not
 * by shared libraries) between alloc_count_start and alloc_count_stop:
 * malloc, calloc, realloc, posix_memalign and aligned_alloc, which the
 * Makefile links run_tests to wrap (-Wl,--wrap=...). For contracts such as
 * model.h's "forward/backward never allocate". */
void alloc_count_start(void);
long alloc_count_stop(void);

/* A tiny safetensors writer (F32 only) for the PyTorch parity tests:
 * st_add copies data; st_write writes every entry to path (asserting each
 * step) and empties f. */
struct st_entry {
    char    name[96];
    int     nd;
    int64_t shape[5];
    float  *data;      /* owned */
    size_t  n;
};

struct st_file {
    struct st_entry e[256];
    int n;
};

void st_add(struct st_file *f, const char *name, int nd, const int64_t *shape,
            const float *data);
void st_write(struct st_file *f, const char *path);

#endif
