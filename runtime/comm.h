/* comm.h - struct ddpc_comm: collectives between the ranks of one job.
 *
 * comm_shm.c (CPU workers on one host, memory mapped before fork) and
 * comm_nccl.cu (NCCL) each fill one of these. Every call takes an absolute
 * deadline on CLOCK_MONOTONIC in seconds (0 = none); past it the call returns
 * DDPC_E_TIMEOUT with a message naming the operation and the ranks that did
 * not arrive. A call also returns DDPC_E_ABORTED / DDPC_E_PEER when another
 * rank aborted or died, so no rank waits forever on a dead peer.
 *
 * Reduction order is fixed (rank 0, 1, ..., W-1 for every element), so sums
 * are bitwise reproducible for a given world size.
 */
#ifndef DDPC_COMM_H
#define DDPC_COMM_H

#include <stddef.h>
#include "err.h"

#ifdef __cplusplus
extern "C" {
#endif

enum ddpc_reduce { DDPC_REDUCE_SUM, DDPC_REDUCE_AVG };

struct ddpc_comm {
    const char *name;     /* "shm" or "nccl" */
    const char *purpose;  /* "gradient" or "rank-sync": named in timeout messages */
    int rank, world;
    void *impl;           /* owned by the backend */

    /* recv[n] = reduce over ranks of send[n]; send == recv is in place.
     * The async pair lets a bucket's reduction overlap the rest of backward:
     * start may return before the data moved; wait completes it. Backends
     * without real asynchrony do the work in start. One outstanding
     * operation per tag (bucket index) at a time. On a device backend
     * (NCCL), wait completes it in the compute stream's order: device work
     * issued after wait sees recv reduced, and the host may get back before
     * the data moved (reading recv from the host goes through that stream:
     * ops->to_host). */
    int (*all_reduce_start)(struct ddpc_comm *c, int tag, const float *send, float *recv,
                            size_t n, enum ddpc_reduce op, double deadline,
                            struct ddpc_err *e);
    int (*all_reduce_wait)(struct ddpc_comm *c, int tag, double deadline, struct ddpc_err *e);

    /* Optional (NULL: the backend has none, e.g. NCCL). Zero-copy gradients:
     * *send is this rank's buffer of n floats inside memory the ranks share,
     * *result a shared buffer of n floats every rank reads. An all-reduce
     * with send = *send + off and recv = *result + off (same off on every
     * rank) moves no data: start publishes "my piece is ready" and returns
     * at once; a later start or wait reduces outstanding pieces whose peers
     * have all arrived; after wait, recv holds the reduction on every rank.
     * Until every started tag was waited for, no other collective may be
     * called. Both buffers are valid until destroy; any other collective
     * (broadcast, an all-reduce of other buffers) may overwrite them, so use
     * them only between backward and the optimizer step. Returns 0 and sets
     * both to NULL when n is too large: use ordinary buffers then. */
    int (*grad_buffer)(struct ddpc_comm *c, size_t n, float **send, float **result,
                       struct ddpc_err *e);
    /* Optional (NULL for NCCL). *buf: n floats that every rank sees (one
     * copy, zero at first), which collectives never touch: lets the ranks
     * keep one copy of the parameters and optimizer state and each update
     * its own shard. Callers order their accesses with barrier. Sets *buf
     * to NULL when n is too large. */
    int (*shared_buffer)(struct ddpc_comm *c, size_t n, float **buf, struct ddpc_err *e);

    /* buf[n] on every rank = buf[n] on root. */
    int (*broadcast)(struct ddpc_comm *c, float *buf, size_t n, int root, double deadline,
                     struct ddpc_err *e);
    int (*barrier)(struct ddpc_comm *c, double deadline, struct ddpc_err *e);
    /* Make every rank's pending and future calls fail with DDPC_E_ABORTED. */
    void (*abort)(struct ddpc_comm *c, const char *why);
    void (*destroy)(struct ddpc_comm *c);
};

/* Convenience: start + wait on tag 0. */
int comm_all_reduce(struct ddpc_comm *c, const float *send, float *recv, size_t n,
                    enum ddpc_reduce op, double deadline, struct ddpc_err *e);

/* The ranks leave together, at the end of a job: a barrier whose failure
 * is the caller's (deadline: the job's), then a second one whose failure is
 * ignored (bounded by linger_s). Why two: a rank that passes the last
 * collective and exits closes its connections while a slower peer may still
 * be inside that collective; gloo then fails the peer's call ("connection
 * closed by peer", seen in a 3-rank barrier under load) although every
 * message it needed was sent. After the first barrier every rank has done
 * all its work; a rank leaves the second only once all have entered it,
 * i.e. all have passed the first, so the first never sees an early close,
 * and whatever the second sees can no longer change a result. */
int comm_leave(struct ddpc_comm *c, double deadline, double linger_s, struct ddpc_err *e);

/* Seconds on CLOCK_MONOTONIC; deadline_after(0) = 0 (none). */
double ddpc_now(void);
double ddpc_deadline_after(double seconds);

/* Milliseconds for a wait of `left` seconds (poll(), a timed wait): one
 * more than left's whole milliseconds, 0 when nothing is left (or left is
 * NaN), and at most max_ms: (int)(left * 1000) of a deadline weeks away
 * (nccl_timeout: 30d, 1e308) overflowed into a wait without end, or none.
 * A loop that waits again until its deadline keeps any deadline this way. */
long long ddpc_wait_ms(double left, long long max_ms);

#ifdef __cplusplus
}
#endif
#endif /* DDPC_COMM_H */
