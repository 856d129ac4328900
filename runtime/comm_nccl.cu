/* comm_nccl.cu - struct ddpc_comm over NCCL, with deadlines and abort.
 *
 * Owns: comm_nccl_init (comm_nccl.h) and the communicator it fills: its own
 * high-priority communication stream, one pair of events per tag, and a
 * two-float scratch for barriers.
 *
 * How a gradient bucket moves:
 *   all_reduce_start: record "ready" on the compute stream, make the comm
 *     stream wait for it, enqueue ncclAllReduce there, record "done". The host
 *     does not wait, so backward keeps issuing kernels while NCCL reduces.
 *   all_reduce_wait: check ncclCommGetAsyncError once and make the compute
 *     stream wait for "done", so the optimizer (issued next on the compute
 *     stream) reads reduced gradients, without the host waiting for it: the
 *     host goes on issuing the optimizer and gathering the next batch. The
 *     collective's deadline is still kept: the next collective on this
 *     communicator first confirms every such wait (confirm_waits, polling
 *     "done" until that bucket's own deadline), and every host wait of the
 *     compute stream is bounded too (ops_cuda.cu, o->wait_timeout_s).
 *   broadcast and barrier: the host polls until done (their callers want
 *     the result now).
 *
 * The rank-sync communicator is split from the gradient one (ncclCommSplit,
 * comm_nccl_split): same ranks, its own stream and NCCL channels, no second
 * bootstrap.
 *
 * TEST HOOK (tests/gpu/test_gpu.c; never set it in production):
 *   DDPC_TEST_STREAM_DELAY_US=N   before each all-reduce start, a host
 *   function that sleeps N us on the compute stream (so every later compute
 *   kernel, the next bucket's gradients among them, runs late), and one on
 *   the comm stream after the collective (so its result lands late). A missing
 *   event wait in either direction then reads stale data reliably instead
 *   of rarely. Read once, at init (env.c parses it).
 *
 * Rules this file keeps:
 *   - communicators are non-blocking (config.blocking = 0), so no NCCL call
 *     can hang the host: every wait is a poll against the caller's deadline,
 *     and past it the communicator is aborted (ncclCommAbort) and the error
 *     names the purpose ("gradient"/"rank-sync"), the operation, the timeout
 *     and the spec key that sets it;
 *   - every CUDA and NCCL call is checked (cuda_check.h); errors are returned,
 *     never printed, never exit();
 *   - it never allocates model memory and never issues compute work (but
 *     the test hook's delay);
 *   - it is host code only (no kernel, no <<<>>>): the comm_nccl suite
 *     compiles it with the host C++ compiler against tests/standin, a CPU
 *     stand-in for the CUDA runtime and NCCL, and runs it at world 2 and 4.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm.h"
#include "cuda_check.h"
#include "comm_nccl.h"
#include "env.h"
#include "store.h"

/* One operation in flight on a tag (gradient bucket), or the internal slot
 * used by broadcast and barrier. */
struct nccl_slot {
    cudaEvent_t ready;        /* on compute: the inputs are written */
    cudaEvent_t done;         /* on the comm stream: the collective finished */
    int         pending;
    int         unconfirmed;  /* waited for on the GPU only: done not yet seen fired */
    double      deadline;     /* of the unconfirmed wait */
    int         ordered;      /* 1: compute must wait for done (all-reduce, broadcast) */
    const char *what;         /* "all_reduce", "broadcast", "barrier" */
    size_t      n;            /* floats */
    double      t_start;      /* ddpc_now() at start, for the timeout message */
};

struct comm_nccl {
    ncclComm_t        comm;       /* NULL once aborted or destroyed */
    cudaStream_t      stream;     /* communication stream, owned */
    cudaStream_t      compute;    /* the ops' compute stream, borrowed; may be NULL */
    struct nccl_slot *slots;      /* [n_slots], indexed by tag, grown on demand */
    int               n_slots;
    struct nccl_slot  sys;        /* broadcast, barrier */
    float            *d_sync;     /* [2] barrier: send 0, receive 0 (stays 0) */
    int               aborted;
    char              why[200];   /* why it was aborted */
    char              addr[160];  /* "master:port", for messages */
    const char       *timeout_key;/* the spec key that sets this comm's deadlines */
    long long         delay_ns;   /* DDPC_TEST_STREAM_DELAY_US (see the header); 0: off */
};

static struct comm_nccl *impl_of(const struct ddpc_comm *c)
{
    return (struct comm_nccl *)c->impl;
}

/* The test hook's delay: a host function that sleeps, queued on a stream,
 * holds back everything queued after it there. A host function, not a
 * kernel, so this file is host code only and runs unchanged on the CPU
 * stand-in (tests/standin, the comm_nccl suite). The delay travels in the
 * pointer: nothing to free when the stream outlives the communicator. */
static void delay_fn(void *ns)
{
    long long left = (long long)(uintptr_t)ns;
    struct timespec ts = {(time_t)(left / 1000000000), (long)(left % 1000000000)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static int stream_delay(cudaStream_t st, long long ns, struct ddpc_err *e)
{
    CUDA_CHECK(e, cudaLaunchHostFunc(st, delay_fn, (void *)(uintptr_t)ns));
    return 0;
}

/* Polling back-off: small buckets finish in microseconds, so spin briefly
 * before sleeping; 20 us sleeps keep a waiting rank off the CPU the data
 * loader needs without adding measurable latency to a millisecond reduce. */
static void poll_pause(unsigned spins)
{
    if (spins < 200)
        return;
    struct timespec ts = {0, 20000};
    (void)nanosleep(&ts, NULL);   /* EINTR only shortens one pause */
}

/* Tears the communicator down at once. ncclCommAbort does not wait for
 * peers or for outstanding kernels, which is the point: a timed-out
 * collective will never complete. Its result is ignored because the
 * communicator is gone either way and the caller is already reporting the
 * cause. */
static void kill_comm(struct comm_nccl *k, const char *why)
{
    if (!k->aborted)
        snprintf(k->why, sizeof k->why, "%s", why);
    k->aborted = 1;
    if (k->comm) {
        (void)ncclCommAbort(k->comm);
        k->comm = NULL;
    }
}

static int check_alive(const struct ddpc_comm *c, struct ddpc_err *e)
{
    struct comm_nccl *k = impl_of(c);
    if (!k || !k->aborted)
        return 0;
    return DDPC_FAIL(e, DDPC_E_ABORTED,
                     "nccl %s communicator was aborted earlier (%s); no further "
                     "collectives can run on it",
                     c->purpose, k->why);
}

static int timeout_err(struct ddpc_comm *c, struct nccl_slot *s, int tag, double deadline,
                       struct ddpc_err *e)
{
    struct comm_nccl *k = impl_of(c);
    kill_comm(k, "a collective passed its deadline");
    s->pending = 0;
    return DDPC_FAIL(e, DDPC_E_TIMEOUT,
                     "nccl %s %s (tag %d, %zu floats, rank %d of %d) did not complete "
                     "within %.1f s; the communicator was aborted. A peer is hung, dead "
                     "or far behind.\n---> HINT: if the launcher names a rank that died, "
                     "that is the cause; if steps are legitimately this slow, raise %s",
                     c->purpose, s->what, tag, s->n, c->rank, c->world,
                     deadline - s->t_start, k->timeout_key);
}

static int async_err(struct ddpc_comm *c, const char *what, ncclResult_t st,
                     struct ddpc_err *e)
{
    struct comm_nccl *k = impl_of(c);
    const char *detail = k->comm ? ncclGetLastError(k->comm) : "";
    /* ncclRemoteError: a peer exited or its connection broke, which comm.h
     * reports as DDPC_E_PEER on every backend */
    int r = DDPC_FAIL(e, st == ncclRemoteError ? DDPC_E_PEER : DDPC_E_DEVICE,
                      "nccl %s %s failed on rank %d of %d: %s (%s); the communicator was "
                      "aborted\n" DDPC_NCCL_HINT,
                      c->purpose, what, c->rank, c->world, ncclGetErrorString(st), detail);
    kill_comm(k, "an NCCL operation failed");
    return r;
}

/* A non-blocking communicator may answer ncclInProgress while it is still
 * setting up (the lazy connection of the first collective, or init itself).
 * Nothing else may be issued on it until ncclCommGetAsyncError says
 * ncclSuccess, and an event recorded before that would not cover the kernel,
 * so poll here, bounded by the deadline. */
static int settle(struct ddpc_comm *c, struct nccl_slot *s, int tag, ncclResult_t st,
                  double deadline, struct ddpc_err *e)
{
    struct comm_nccl *k = impl_of(c);
    for (unsigned spins = 0;; spins++) {
        if (st == ncclSuccess)
            return 0;
        if (st != ncclInProgress)
            return async_err(c, s->what, st, e);
        if (deadline > 0 && ddpc_now() > deadline)
            return timeout_err(c, s, tag, deadline, e);
        poll_pause(spins);
        NCCL_CHECK(e, ncclCommGetAsyncError(k->comm, &st));
    }
}

static int slot_events(struct nccl_slot *s, struct ddpc_err *e)
{
    if (!s->ready)
        CUDA_CHECK(e, cudaEventCreateWithFlags(&s->ready, cudaEventDisableTiming));
    if (!s->done)
        CUDA_CHECK(e, cudaEventCreateWithFlags(&s->done, cudaEventDisableTiming));
    return 0;
}

static int slot_get(struct ddpc_comm *c, int tag, struct nccl_slot **out, struct ddpc_err *e)
{
    struct comm_nccl *k = impl_of(c);
    if (tag < 0)
        return DDPC_FAIL(e, DDPC_E_INVALID, "nccl %s: negative tag %d", c->purpose, tag);
    if (tag >= k->n_slots) {
        int n = tag + 1 > 2 * k->n_slots ? tag + 1 : 2 * k->n_slots;
        struct nccl_slot *p =
            (struct nccl_slot *)realloc(k->slots, (size_t)n * sizeof *p);
        if (!p)
            return DDPC_FAIL(e, DDPC_E_NOMEM, "nccl %s: cannot grow the tag table to %d",
                             c->purpose, n);
        memset(p + k->n_slots, 0, (size_t)(n - k->n_slots) * sizeof *p);
        k->slots = p;
        k->n_slots = n;
    }
    *out = &k->slots[tag];
    return slot_events(*out, e);
}

/* Every all-reduce waited for on the GPU only (coll_wait) has finished:
 * polled until its own deadline, so a hung collective is still named and
 * aborted, one collective later at most. Usually each fired long ago. */
static int confirm_waits(struct ddpc_comm *c, struct ddpc_err *e)
{
    struct comm_nccl *k = impl_of(c);
    for (int tag = 0; tag < k->n_slots; tag++) {
        struct nccl_slot *s = &k->slots[tag];
        for (unsigned spins = 0; s->unconfirmed; spins++) {
            cudaError_t q = cudaEventQuery(s->done);
            if (q == cudaSuccess) {
                s->unconfirmed = 0;
                break;
            }
            if (q != cudaErrorNotReady) {
                s->unconfirmed = 0;
                kill_comm(k, "a CUDA error while confirming a collective");
                return DDPC_FAIL(e, DDPC_E_DEVICE,
                                 "nccl %s %s (tag %d): cudaEventQuery: %s (%s); the "
                                 "communicator was aborted\n" DDPC_CUDA_HINT,
                                 c->purpose, s->what, tag, cudaGetErrorName(q),
                                 cudaGetErrorString(q));
            }
            ncclResult_t ae = ncclSuccess;
            NCCL_CHECK(e, ncclCommGetAsyncError(k->comm, &ae));
            if (ae != ncclSuccess && ae != ncclInProgress) {
                s->unconfirmed = 0;
                return async_err(c, s->what, ae, e);
            }
            if (s->deadline > 0 && ddpc_now() > s->deadline) {
                s->unconfirmed = 0;
                return timeout_err(c, s, tag, s->deadline, e);
            }
            poll_pause(spins);
        }
    }
    return 0;
}

enum coll { COLL_ALL_REDUCE, COLL_BROADCAST, COLL_BARRIER };

static int coll_start(struct ddpc_comm *c, struct nccl_slot *s, int tag, enum coll kind,
                      const float *send, float *recv, size_t n, ncclRedOp_t op, int root,
                      double deadline, struct ddpc_err *e)
{
    struct comm_nccl *k = impl_of(c);
    static const char *const names[] = {"all_reduce", "broadcast", "barrier"};
    if (s->pending)
        return DDPC_FAIL(e, DDPC_E_INVALID,
                         "nccl %s %s: tag %d still has a %s outstanding; wait for it first",
                         c->purpose, names[kind], tag, s->what);
    DDPC_TRY(confirm_waits(c, e));
    s->what = names[kind];
    s->n = n;
    s->t_start = ddpc_now();
    s->ordered = kind != COLL_BARRIER;
    if (s->ordered) {
        if (!k->compute)
            return DDPC_FAIL(e, DDPC_E_INVALID,
                             "nccl %s %s needs the compute stream, but the communicator "
                             "was made without one",
                             c->purpose, s->what);
        /* The collective reads what the compute stream wrote (a bucket's
         * gradients, the initial parameters). Order it after that work with an
         * event instead of a host sync: the host returns at once and keeps
         * issuing backward kernels, which overlap this reduction. */
        if (k->delay_ns > 0 && kind == COLL_ALL_REDUCE)
            DDPC_TRY(stream_delay(k->compute, k->delay_ns, e));
        CUDA_CHECK(e, cudaEventRecord(s->ready, k->compute));
        CUDA_CHECK(e, cudaStreamWaitEvent(k->stream, s->ready, 0));
    }
    ncclResult_t st;
    switch (kind) {
    case COLL_ALL_REDUCE:
        st = ncclAllReduce(send, recv, n, ncclFloat, op, k->comm, k->stream);
        break;
    case COLL_BROADCAST:
        st = ncclBroadcast(recv, recv, n, ncclFloat, root, k->comm, k->stream);
        break;
    default:
        /* A barrier is a one-float all-reduce: it completes only when every
         * rank has contributed. It waits for no compute work on purpose: it
         * measures arrival (data-loading skew), not the GPU queue. */
        st = ncclAllReduce(k->d_sync, k->d_sync + 1, 1, ncclFloat, ncclSum, k->comm,
                           k->stream);
        break;
    }
    DDPC_TRY(settle(c, s, tag, st, deadline, e));
    if (k->delay_ns > 0 && kind == COLL_ALL_REDUCE)
        DDPC_TRY(stream_delay(k->stream, k->delay_ns, e));
    CUDA_CHECK(e, cudaEventRecord(s->done, k->stream));
    s->pending = 1;
    return 0;
}

static int coll_wait(struct ddpc_comm *c, struct nccl_slot *s, int tag, double deadline,
                     struct ddpc_err *e)
{
    struct comm_nccl *k = impl_of(c);
    if (!s->pending)
        return DDPC_FAIL(e, DDPC_E_INVALID, "nccl %s: wait on tag %d, which has nothing "
                         "outstanding", c->purpose, tag);
    if (tag >= 0 && s->ordered) {
        /* a bucket: the GPU waits, not the host (see the file header) */
        ncclResult_t ae = ncclSuccess;
        NCCL_CHECK(e, ncclCommGetAsyncError(k->comm, &ae));
        if (ae != ncclSuccess && ae != ncclInProgress) {
            s->pending = 0;
            return async_err(c, s->what, ae, e);
        }
        CUDA_CHECK(e, cudaStreamWaitEvent(k->compute, s->done, 0));
        s->pending = 0;
        s->unconfirmed = 1;
        s->deadline = deadline;
        return 0;
    }
    for (unsigned spins = 0;; spins++) {
        /* NCCL reports a peer's failure (or a network error) here, while the
         * event would simply never fire. */
        ncclResult_t ae = ncclSuccess;
        NCCL_CHECK(e, ncclCommGetAsyncError(k->comm, &ae));
        if (ae != ncclSuccess && ae != ncclInProgress) {
            s->pending = 0;
            return async_err(c, s->what, ae, e);
        }
        cudaError_t q = cudaEventQuery(s->done);
        if (q == cudaSuccess)
            break;
        if (q != cudaErrorNotReady) {
            s->pending = 0;
            kill_comm(k, "a CUDA error while waiting for a collective");
            return DDPC_FAIL(e, DDPC_E_DEVICE,
                             "nccl %s %s (tag %d): cudaEventQuery: %s (%s); the "
                             "communicator was aborted\n" DDPC_CUDA_HINT,
                             c->purpose, s->what, tag, cudaGetErrorName(q),
                             cudaGetErrorString(q));
        }
        if (deadline > 0 && ddpc_now() > deadline)
            return timeout_err(c, s, tag, deadline, e);
        poll_pause(spins);
    }
    s->pending = 0;
    /* The optimizer is issued next on the compute stream and must read the
     * reduced values: make the compute stream wait for "done" (on the GPU;
     * the host already knows it fired). */
    if (s->ordered)
        CUDA_CHECK(e, cudaStreamWaitEvent(k->compute, s->done, 0));
    return 0;
}

/* ===== struct ddpc_comm ===== */

static int nccl_all_reduce_start(struct ddpc_comm *c, int tag, const float *send, float *recv,
                                 size_t n, enum ddpc_reduce op, double deadline,
                                 struct ddpc_err *e)
{
    DDPC_TRY(check_alive(c, e));
    struct nccl_slot *s;
    DDPC_TRY(slot_get(c, tag, &s, e));
    return coll_start(c, s, tag, COLL_ALL_REDUCE, send, recv, n,
                      op == DDPC_REDUCE_AVG ? ncclAvg : ncclSum, 0, deadline, e);
}

static int nccl_all_reduce_wait(struct ddpc_comm *c, int tag, double deadline,
                                struct ddpc_err *e)
{
    DDPC_TRY(check_alive(c, e));
    struct nccl_slot *s;
    DDPC_TRY(slot_get(c, tag, &s, e));
    return coll_wait(c, s, tag, deadline, e);
}

static int nccl_broadcast(struct ddpc_comm *c, float *buf, size_t n, int root,
                          double deadline, struct ddpc_err *e)
{
    DDPC_TRY(check_alive(c, e));
    struct comm_nccl *k = impl_of(c);
    if (root < 0 || root >= c->world)
        return DDPC_FAIL(e, DDPC_E_INVALID, "nccl %s broadcast: root %d outside world %d",
                         c->purpose, root, c->world);
    DDPC_TRY(coll_start(c, &k->sys, -1, COLL_BROADCAST, buf, buf, n, ncclSum, root,
                        deadline, e));
    return coll_wait(c, &k->sys, -1, deadline, e);
}

static int nccl_barrier(struct ddpc_comm *c, double deadline, struct ddpc_err *e)
{
    DDPC_TRY(check_alive(c, e));
    struct comm_nccl *k = impl_of(c);
    DDPC_TRY(coll_start(c, &k->sys, -1, COLL_BARRIER, NULL, NULL, 1, ncclSum, 0, deadline,
                        e));
    return coll_wait(c, &k->sys, -1, deadline, e);
}

static void nccl_abort(struct ddpc_comm *c, const char *why)
{
    struct comm_nccl *k = impl_of(c);
    if (k)
        kill_comm(k, why ? why : "aborted by the caller");
}

static void slot_free(struct nccl_slot *s)
{
    if (s->ready)
        (void)cudaEventDestroy(s->ready);
    if (s->done)
        (void)cudaEventDestroy(s->done);
    s->ready = s->done = NULL;
}

/* Safe after a failed init. A clean communicator is finalized (flushing
 * outstanding work) with a bounded poll and then destroyed; one with work
 * still pending, or that will not finalize in time, is aborted instead.
 * Errors are ignored: destroy runs on the way out, often after the failure
 * that is being reported. */
static void nccl_destroy(struct ddpc_comm *c)
{
    struct comm_nccl *k = impl_of(c);
    if (!k)
        return;
    if (k->comm) {
        int pending = k->sys.pending;
        for (int i = 0; i < k->n_slots; i++)
            pending |= k->slots[i].pending ||
                       (k->slots[i].unconfirmed && cudaEventQuery(k->slots[i].done) != cudaSuccess);
        /* non-blocking: finalize answers ncclInProgress and completes in the
         * background; poll it for a bounded time */
        ncclResult_t st = pending ? ncclInvalidUsage : ncclCommFinalize(k->comm);
        double deadline = ddpc_now() + 10.0;
        for (unsigned spins = 0; st == ncclInProgress; spins++) {
            if (ddpc_now() > deadline || ncclCommGetAsyncError(k->comm, &st) != ncclSuccess)
                st = ncclInternalError;
            poll_pause(spins);
        }
        if (st == ncclSuccess) {
            (void)ncclCommDestroy(k->comm);
            k->comm = NULL;
        } else {
            kill_comm(k, "destroyed with work outstanding");
        }
    }
    /* Never wait on the stream of an aborted communicator: its kernels are
     * being torn down, and cudaStreamDestroy releases it once they are. */
    if (k->stream && !k->aborted)
        (void)cudaStreamSynchronize(k->stream);
    for (int i = 0; i < k->n_slots; i++)
        slot_free(&k->slots[i]);
    slot_free(&k->sys);
    free(k->slots);
    if (k->d_sync)
        (void)cudaFree(k->d_sync);
    if (k->stream)
        (void)cudaStreamDestroy(k->stream);
    free(k);
    c->impl = NULL;
}

/* The part of a new communicator every way of making one shares: c's
 * fields, the impl, the high-priority comm stream, events, barrier scratch. */
static int comm_prepare(struct ddpc_comm *c, const char *purpose, int rank, int world,
                        cudaStream_t compute, struct ddpc_err *e)
{
    memset(c, 0, sizeof *c);
    c->name = "nccl";
    c->purpose = purpose;
    c->rank = rank;
    c->world = world;
    c->destroy = nccl_destroy;
    c->abort = nccl_abort;
    struct comm_nccl *k = (struct comm_nccl *)calloc(1, sizeof *k);
    if (!k)
        return DDPC_FAIL(e, DDPC_E_NOMEM, "nccl %s: cannot allocate the communicator",
                         purpose);
    c->impl = k;
    k->compute = compute;
    k->timeout_key = strcmp(purpose, "rank-sync") == 0 ? "rank_sync_timeout" : "nccl_timeout";
    double d = env_get()->test_stream_delay_us;
    k->delay_ns = d > 0 ? (long long)(d * 1000.0) : 0;
    if (rank < 0 || rank >= world)
        return DDPC_FAIL(e, DDPC_E_INVALID, "nccl %s: rank %d outside world %d", purpose,
                         rank, world);

    /* Highest priority: NCCL's kernels get SMs as soon as their bucket is
     * ready instead of queueing behind the backward kernels they overlap. */
    int least = 0, greatest = 0;
    CUDA_CHECK(e, cudaDeviceGetStreamPriorityRange(&least, &greatest));
    CUDA_CHECK(e, cudaStreamCreateWithPriority(&k->stream, cudaStreamNonBlocking, greatest));
    DDPC_TRY(slot_events(&k->sys, e));
    CUDA_CHECK(e, cudaMalloc(&k->d_sync, 2 * sizeof *k->d_sync));
    CUDA_CHECK(e, cudaMemsetAsync(k->d_sync, 0, 2 * sizeof *k->d_sync, k->stream));
    CUDA_CHECK(e, cudaStreamSynchronize(k->stream));
    return 0;
}

/* Polls a non-blocking init (or split) that answered st until the
 * communicator is ready; past the deadline it is aborted. */
static int init_settle(struct ddpc_comm *c, ncclResult_t st, double t0, double deadline,
                       const char *how, struct ddpc_err *e)
{
    struct comm_nccl *k = impl_of(c);
    const char *purpose = c->purpose;
    int rank = c->rank, world = c->world;
    for (unsigned spins = 0;; spins++) {
        if (st == ncclSuccess)
            break;
        if (st != ncclInProgress) {
            int r = DDPC_FAIL(e, DDPC_E_DEVICE,
                              "nccl %s communicator %s (rank %d of %d, store %s) "
                              "failed: %s (%s)\n" DDPC_NCCL_HINT,
                              purpose, how, rank, world, k->addr, ncclGetErrorString(st),
                              k->comm ? ncclGetLastError(k->comm) : "");
            kill_comm(k, "init failed");
            return r;
        }
        if (deadline > 0 && ddpc_now() > deadline) {
            kill_comm(k, "init passed its deadline");
            return DDPC_FAIL(e, DDPC_E_TIMEOUT,
                             "nccl %s communicator %s (rank %d of %d, store %s) did "
                             "not complete within %.1f s; it was aborted.\n---> HINT: every "
                             "rank must start and reach the others: check that every node "
                             "runs the job, firewalls between the nodes, and NCCL_SOCKET_IFNAME "
                             "if the hosts have several interfaces",
                             purpose, how, rank, world, k->addr, deadline - t0);
        }
        poll_pause(spins);
        if (!k->comm)
            return DDPC_FAIL(e, DDPC_E_DEVICE, "nccl %s communicator %s returned "
                             "ncclInProgress without a communicator", purpose, how);
        NCCL_CHECK(e, ncclCommGetAsyncError(k->comm, &st));
    }
    return 0;
}

static void comm_ready(struct ddpc_comm *c)
{
    c->all_reduce_start = nccl_all_reduce_start;
    c->all_reduce_wait = nccl_all_reduce_wait;
    c->broadcast = nccl_broadcast;
    c->barrier = nccl_barrier;
}

/* The unique id of a communicator, through the job's store (comm_nccl.h):
 * rank 0 makes and publishes it, the others wait for it. */
static int bootstrap_id(const char *purpose, int rank, const char *host, int port,
                        const char *prefix, double deadline, ncclUniqueId *id,
                        struct ddpc_err *e)
{
    struct store_client sc;
    char key[160], stop[64];
    snprintf(key, sizeof key, "%s/nccl/%s/id", prefix && *prefix ? prefix : "a0", purpose);
    /* set by a node that gave up (ddprt.c): stop waiting for rank 0 then */
    snprintf(stop, sizeof stop, "%s/stop", prefix && *prefix ? prefix : "a0");
    int rc = store_client_connect(&sc, host, port, deadline, e);
    if (rc == 0 && rank == 0) {
        ncclResult_t st = ncclGetUniqueId(id);
        if (st != ncclSuccess)
            rc = DDPC_FAIL(e, DDPC_E_DEVICE, "nccl %s: ncclGetUniqueId: %s\n" DDPC_NCCL_HINT,
                           purpose, ncclGetErrorString(st));
        else
            rc = store_set(&sc, key, id, sizeof *id, e);
    } else if (rc == 0) {
        void *v = NULL;
        size_t n = 0;
        rc = store_get_watch(&sc, key, stop, &v, &n, deadline, "rank 0 (node 0)'s NCCL unique id",
                             e);
        if (rc == 0 && n != sizeof *id)
            rc = DDPC_FAIL(e, DDPC_E_PEER, "nccl %s: the unique id in the store has %zu bytes, "
                           "not %zu: is another program using this store?", purpose, n,
                           sizeof *id);
        else if (rc == 0)
            memcpy(id, v, sizeof *id);
        free(v);
    }
    store_client_close(&sc);
    return rc;
}

int comm_nccl_init(struct ddpc_comm *c, const char *purpose, int rank, int world,
                   const char *master_addr, int master_port, const char *prefix,
                   cudaStream_t compute, double deadline, struct ddpc_err *e)
{
    DDPC_TRY(comm_prepare(c, purpose, rank, world, compute, e));
    struct comm_nccl *k = impl_of(c);
    store_format_addr(k->addr, sizeof k->addr, master_addr, master_port);

    /* One rendezvous for every engine: the id comes through node 0's store */
    ncclUniqueId id;
    if (bootstrap_id(purpose, rank, master_addr, master_port, prefix, deadline, &id, e) < 0) {
        char why[sizeof e->msg];
        snprintf(why, sizeof why, "%s", e->msg);
        int code = e->code;
        ddpc_err_clear(e);
        return DDPC_FAIL(e, code, "nccl %s communicator init (rank %d of %d): %s", purpose,
                         rank, world, why);
    }

    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    /* Non-blocking: init and every collective return at once (possibly with
     * ncclInProgress) and we poll, so a missing peer costs a deadline, not a
     * hang. */
    cfg.blocking = 0;
    cfg.commName = strcmp(purpose, "rank-sync") == 0 ? "ddpc-rank-sync" : "ddpc-gradient";
    double t0 = ddpc_now();
    ncclResult_t st = ncclCommInitRankConfig(&k->comm, world, id, rank, &cfg);
    DDPC_TRY(init_settle(c, st, t0, deadline, "init", e));
    comm_ready(c);
    return 0;
}

/* A split on a non-blocking parent is a job of the PARENT: ncclCommSplit
 * returns ncclSuccess at once with the child NULL, the parent answers
 * ncclInProgress until the child's init has ended, and NCCL's thread then
 * stores the child pointer (NCCL 2.28.9 init.cc:2571-2610, 1610-1615,
 * group.cc:707-738; its user guide polls the parent after a split). Until
 * then nothing may be issued on the parent (ncclInvalidArgument,
 * ncclCommEnsureReady). So: poll the parent, bounded by the deadline; past
 * it, or on a failed split, abort the parent (which, while the split runs,
 * aborts the child's init too, and joins NCCL's thread) and then the child
 * if one was stored; otherwise read the child with an acquire load (it was
 * written by another thread) and settle it like any new communicator. */
static int split_settle(struct ddpc_comm *parent, struct ddpc_comm *c, ncclResult_t st,
                        double t0, double deadline, struct ddpc_err *e)
{
    struct comm_nccl *pk = impl_of(parent), *k = impl_of(c);
    char how[96];
    snprintf(how, sizeof how, "split from the %s communicator", parent->purpose);
    if (st != ncclSuccess && st != ncclInProgress)
        return init_settle(c, st, t0, deadline, how, e);   /* refused: no child, no job */
    for (unsigned spins = 0;; spins++) {
        ncclResult_t ps = ncclInProgress;
        ncclResult_t q = ncclCommGetAsyncError(pk->comm, &ps);
        if (q != ncclSuccess)
            ps = q;
        if (ps == ncclSuccess)
            break;
        int late = ps == ncclInProgress && deadline > 0 && ddpc_now() > deadline;
        if (ps != ncclInProgress || late) {
            const char *detail = ncclGetLastError(pk->comm);
            char why[sizeof e->msg];
            if (late)
                snprintf(why, sizeof why, "did not complete within %.1f s", deadline - t0);
            else
                snprintf(why, sizeof why, "failed: %s (%s)", ncclGetErrorString(ps), detail);
            kill_comm(pk, late ? "its split passed its deadline" : "its split failed");
            /* the abort joined NCCL's thread: whatever it stored in k->comm
             * is final, and a child is aborted too (the docs' "if childComm
             * is not NCCL_COMM_NULL, abort it as well") */
            kill_comm(k, late ? "the split passed its deadline" : "the split failed");
            return DDPC_FAIL(e, late ? DDPC_E_TIMEOUT : DDPC_E_DEVICE,
                             "nccl %s communicator %s (rank %d of %d, store %s) %s; both "
                             "communicators were aborted.\n---> HINT: every rank splits right "
                             "after its init: a rank that died or hangs before it is the cause "
                             "(if the launcher names a rank, that is the one); otherwise rerun "
                             "with NCCL_DEBUG=WARN for NCCL's reason",
                             c->purpose, how, c->rank, c->world, k->addr, why);
        }
        poll_pause(spins);
    }
    if (!__atomic_load_n(&k->comm, __ATOMIC_ACQUIRE)) {
        kill_comm(k, "the split made no communicator");
        return DDPC_FAIL(e, DDPC_E_DEVICE, "nccl %s communicator %s (rank %d of %d): NCCL "
                         "reported success but made no communicator\n" DDPC_NCCL_HINT,
                         c->purpose, how, c->rank, c->world);
    }
    return init_settle(c, ncclInProgress, t0, deadline, how, e);
}

int comm_nccl_split(struct ddpc_comm *parent, struct ddpc_comm *c, const char *purpose,
                    double deadline, struct ddpc_err *e)
{
    struct comm_nccl *pk = impl_of(parent);
    if (!pk || !pk->comm || pk->aborted)
        return DDPC_FAIL(e, DDPC_E_INVALID, "nccl %s: cannot split from the %s communicator: "
                         "it is not open", purpose, parent->purpose);
    DDPC_TRY(comm_prepare(c, purpose, parent->rank, parent->world, pk->compute, e));
    struct comm_nccl *k = impl_of(c);
    snprintf(k->addr, sizeof k->addr, "%s", pk->addr);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;         /* as the parent: poll against the deadline */
    cfg.commName = strcmp(purpose, "rank-sync") == 0 ? "ddpc-rank-sync" : "ddpc-split";
    /* every rank, one color, keyed by its rank: the same ranks in the same
     * order, on the parent's bootstrap (no second rendezvous) */
    double t0 = ddpc_now();
    ncclResult_t st = ncclCommSplit(pk->comm, 0, parent->rank, &k->comm, &cfg);
    DDPC_TRY(split_settle(parent, c, st, t0, deadline, e));
    comm_ready(c);
    return 0;
}
