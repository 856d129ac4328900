/* launch.h - fork one worker per rank, supervise, tear everything down.
 *
 * launch_run is the process side of ./job without any training in it: it
 * maps the shared-memory communicators, forks `world` workers, runs `fn` in
 * each, and waits. When a worker dies by a signal or exits non-zero it
 * aborts the communicators, SIGTERMs the others, SIGKILLs them after a grace
 * period, reaps them all and reports the rank, its device and the cause.
 * SIGINT / SIGTERM / SIGHUP to the launcher are forwarded the same way. No path
 * leaves a worker behind: workers also get SIGKILL if the launcher dies
 * (PR_SET_PDEATHSIG).
 *
 * ddprt.c passes the real worker (ops + comms + worker_run); tests pass a
 * fake one.
 */
#ifndef DDPC_LAUNCH_H
#define DDPC_LAUNCH_H

#include <stddef.h>
#include "comm_shm.h"
#include "err.h"
#include "job.h"

/* What a forked worker is handed. */
struct launch_worker {
    int rank, world;
    int device;                              /* device index or cpu worker number */
    const char *label;                       /* "cpu worker 1", "cuda:1" */
    struct comm_shm_region *grad_region;     /* NULL unless opts.use_shm */
    struct comm_shm_region *sync_region;
    void *user;                              /* launch_run's user pointer */
};

/* Runs in the worker process. Returns 0, or a negative ddpc_err_code with e
 * filled; launch.c then prints "[rank N] error: msg (file:line)" and exits
 * with launch_exit_code(code). Anything it writes to stdout must be flushed
 * before returning (workers leave with _exit). */
typedef int (*launch_worker_fn)(const struct launch_worker *w, struct ddpc_err *e);

struct launch_opts {
    int    world;                            /* ranks on this host, >= 1 */
    int    rank_offset;                      /* global rank of local rank 0 (multi-node) */
    int    global_world;                     /* 0: same as world */
    int    devices[DDPC_MAX_DEVICES];        /* device of each local rank */
    const char *device_kind;                 /* "cpu worker" or "cuda:" (label prefix) */
    int    use_shm;                          /* map the two shm communicators */
    size_t grad_slot_floats;                 /* 0: default */
    size_t sync_slot_floats;                 /* 0: default */
    double grace_s;                          /* SIGTERM -> SIGKILL; 0: 1 s */
    int    single_blas_thread;               /* OPENBLAS_NUM_THREADS=1 in workers */
    /* A worker stopped (SIGSTOP, a debugger) for longer than this holds up
     * every other rank: the job is torn down, naming it and stopped_key.
     * 0: not watched. */
    double stopped_limit_s;
    const char *stopped_key;                 /* the spec key the limit comes from */
};

/* Worker exit status for an error code: 10 + |code| (11 sys ... 20 stopped),
 * so the launcher (and a person reading `echo $?`) can tell them apart. */
int launch_exit_code(int err_code);
/* "timeout" for 13 etc.; NULL for a status that is not one of ours. */
const char *launch_exit_name(int status);

/* Forks and supervises. Returns the launcher's exit status: 0 when every
 * worker exited 0; 1 when one failed (e says which rank, device and why);
 * 128 + the signal after SIGINT / SIGTERM / SIGHUP / SIGUSR1 / SIGUSR2;
 * 141 (128 + SIGPIPE) when standard output is a pipe whose reader left (`./job | head`: the workers
 * are stopped, and the caller should say nothing); 1 with e filled when
 * setup (mmap, fork) failed. On a worker failure e->code is that worker's own error code when
 * it exited with one (DDPC_E_DATA for status 12, ...), DDPC_E_PEER when it
 * died by a signal or with a status of its own. Blocks until no worker is
 * left. Installs SIGINT/SIGTERM/SIGHUP/SIGUSR1/SIGUSR2/SIGCHLD
 * handlers for its duration and restores the previous ones on return, but
 * after a stop signal it leaves the stop signals ignored (a second SIGTERM
 * must not kill the caller's cleanup) until launch_release_signals. */
int launch_run(const struct launch_opts *o, launch_worker_fn fn, void *user,
               struct ddpc_err *e);

/* Restores the stop signals' dispositions that launch_run left ignored
 * after an interrupt; nothing when it did not. */
void launch_release_signals(void);

#endif /* DDPC_LAUNCH_H */
