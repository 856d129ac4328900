/* standin.h - what a test may set and read of the CPU stand-in for the
 * CUDA runtime and NCCL (tests/standin/standin.cc). Plain C; extern "C".
 *
 * The settings are per process and copied by fork: set them in the test
 * before it forks its ranks. They widen the windows NCCL leaves open on a
 * real machine (an init or split takes tens to hundreds of milliseconds, a
 * non-blocking collective's launch finishes on another thread), so a caller
 * that skips a poll fails every time here instead of rarely there.
 */
#ifndef DDPC_STANDIN_H
#define DDPC_STANDIN_H

#ifdef __cplusplus
extern "C" {
#endif

struct standin_config {
    int    devices;           /* cudaGetDeviceCount's answer (default 1) */
    double init_s;            /* a non-blocking init stays ncclInProgress at least this long
                                 before it meets its peers (default 0.05) */
    double split_s;           /* a split: the parent stays ncclInProgress at least this long
                                 (default 0.1) */
    double coll_s;            /* a deferred collective launch lands on its stream this long
                                 after the call (default 0.002) */
    int    coll_defer_every;  /* 1: every collective on a non-blocking communicator answers
                                 ncclInProgress and is launched by another thread, as NCCL
                                 2.28 does; N: every Nth (and the first); 0: none (default 1) */
};

void standin_config_get(struct standin_config *c);
void standin_config_set(const struct standin_config *c);

/* Counts of this process, since it started. */
struct standin_stats {
    long host_funcs;          /* cudaLaunchHostFunc functions run */
    long collectives;         /* collectives a stream executed (not those skipped after abort) */
    long deferred;            /* collective launches that answered ncclInProgress */
    long used_unsettled;      /* calls refused with ncclInvalidArgument: their communicator was
                                 still ncclInProgress (NCCL's ncclCommEnsureReady) */
    long live_comms;          /* communicators neither destroyed nor aborted */
    long kernels;             /* kernel launches run (tests/cuda_emu.h), ops_cuda.cu's */
};
void standin_stats(struct standin_stats *s);

/* The prefix of every shared-memory object the stand-in's communicators
 * make under /dev/shm ("ddpc-si-<pid of the rank that made the id>-"): a
 * test checks none is left behind. */
#define STANDIN_SHM_PREFIX "ddpc-si-"

#ifdef __cplusplus
}
#endif
#endif
