/* testutil.h - helpers for tests that run programs the way a user does.
 *
 * run_capture forks and execs argv (never a shell), collects stdout and
 * stderr, and kills the whole process group if it runs past timeout_s, so a
 * hanging job fails the test instead of hanging the suite. */
#ifndef DDPC_TESTUTIL_H
#define DDPC_TESTUTIL_H

#include <stddef.h>

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

/* $DDPC_TOP and $DDPC_BUILD (set by make test), with "." and "build" as fallback. */
const char *test_top(void);
const char *test_build(void);

/* A fresh directory under $TMPDIR; caller frees the string and removes the
 * tree with rm_tree. */
char *make_temp_dir(const char *tag);
int   rm_tree(const char *path);
int   write_file(const char *path, const void *data, size_t len);
/* The double after "key=" in text (first occurrence at or after from), or NAN. */
double find_kv(const char *text, const char *key);

/* Makes this process the reaper of orphans (PR_SET_CHILD_SUBREAPER), so a
 * worker that outlives its launcher becomes our child. */
void adopt_orphans(void);
/* Number of children still alive after grace_s (kills and reaps them). */
int  leftover_children(double grace_s);

#endif
