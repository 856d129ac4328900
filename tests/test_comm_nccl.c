/* test_comm_nccl.c - runtime/comm_nccl.cu's real host code, at world 2 and
 * 4, on the CPU stand-in for the CUDA runtime and NCCL (tests/standin).
 *
 * comm_nccl.cu is host code only; the Makefile compiles it a second time
 * with the host C++ compiler against tests/standin's headers and links it,
 * with standin.cc, into this runner, with or without nvcc. Each test forks
 * its ranks (one process each, as ddpc's workers are), hosts the job's
 * store here and bootstraps through it (comm_nccl_init), and the ranks
 * report through shared memory. The stand-in keeps NCCL's non-blocking
 * windows open on purpose (standin.h): an init or a split stays
 * ncclInProgress for tens of milliseconds, and every collective's launch
 * lands on its stream from another thread, so a step that skips a poll or
 * an event fails here every time.
 *
 * What is checked:
 *   - the rank-sync split on a non-blocking parent (issue 34, D1): the
 *     gradient communicator's collectives and the rank-sync barrier work
 *     right after it, and a split past its deadline aborts parent and child
 *     at the deadline instead of reporting success;
 *   - bucketed all-reduce overlapping a compute stream that writes each
 *     bucket late (DDPC_TEST_STREAM_DELAY_US on, and proven on): every
 *     bucket reduces what "backward" wrote, and the "optimizer" queued
 *     after all_reduce_wait reads the reduced values;
 *   - deadlines: a late peer at the rank-sync barrier, a bucket a peer
 *     never joins (named by the next collective), an init whose peer never
 *     comes; each aborts and names what to raise;
 *   - a peer that exits: DDPC_E_PEER;
 *   - the stand-in itself: a collective with no event wait reads stale
 *     data, a communicator used before it settled is refused, an abort from
 *     another thread ends a collective stuck on its stream.
 * The tests play the compute stream's part with cudaLaunchHostFunc;
 * suite cuda_standin runs ops_cuda.cu (and worker_run) on the stand-in.
 */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <nccl.h>           /* the stand-in's (-Itests/standin) */

#include "suites.h"
#include "comm.h"
#include "comm_nccl.h"
#include "env.h"
#include "standin.h"
#include "store.h"

#define MAX_WORLD 4

struct rank_report {
    int    rc;                /* 0: everything this rank checked held */
    char   msg[700];
    double seconds;           /* what the rank timed, where it times something */
    double delay_us;          /* env_get()->test_stream_delay_us in the rank */
    long   host_funcs;        /* the stand-in's count in the rank */
    long   own_funcs;         /* of those, the test's own */
    long   all_reduces;       /* all-reduces the rank started */
    long   live_comms;        /* the stand-in's count after the rank destroyed everything */
};

struct world {
    int                world;
    int                port;          /* the store's */
    ncclUniqueId       id;            /* for the raw stand-in tests */
    int                arg;
    struct rank_report r[MAX_WORLD];
};

typedef void (*rank_fn)(struct world *w, int rank, struct rank_report *rep);

static void rfail(struct rank_report *rep, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void rfail(struct rank_report *rep, const char *fmt, ...)
{
    if (rep->rc)
        return;                   /* the first failure is the cause */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rep->msg, sizeof rep->msg, fmt, ap);
    va_end(ap);
    rep->rc = 1;
}

static int shm_left(pid_t maker)
{
    char prefix[64];
    snprintf(prefix, sizeof prefix, STANDIN_SHM_PREFIX "%d-", (int)maker);
    DIR *d = opendir("/dev/shm");
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d)))
        n += strncmp(de->d_name, prefix, strlen(prefix)) == 0;
    if (d)
        closedir(d);
    return n;
}

/* The stand-in as these tests want it: one "GPU" the ranks share, init and
 * split in progress long enough to be seen, every collective deferred. */
static void standin_defaults(double split_s)
{
    struct standin_config c;
    standin_config_get(&c);
    c.devices = 1;
    c.init_s = 0.03;
    c.split_s = split_s;
    c.coll_s = 0.001;
    c.coll_defer_every = 1;
    standin_config_set(&c);
}

/* Forks w->world ranks running fn with the store up, waits at most
 * timeout_s (then kills them: a hang fails the test), asserts every rank
 * reported success and that no shared-memory object was left behind. */
static void run_world(struct world *w, rank_fn fn, double timeout_s)
{
    struct store_host h;
    struct ddpc_err e = {0};
    ck_assert_msg(store_host_start(&h, "127.0.0.1", 0, 0, &e) == 0, "store: %s", e.msg);
    w->port = h.port;
    pid_t pids[MAX_WORLD];
    fflush(stdout);
    for (int r = 0; r < w->world; r++) {
        pids[r] = fork();
        ck_assert_int_ge(pids[r], 0);
        if (pids[r] == 0) {
            fn(w, r, &w->r[r]);
            fflush(stdout);
            _exit(0);
        }
    }
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int alive = w->world, hung = 0;
    while (alive > 0) {
        for (int r = 0; r < w->world; r++) {
            int st;
            if (pids[r] > 0 && waitpid(pids[r], &st, WNOHANG) == pids[r]) {
                if (!WIFEXITED(st) && !w->r[r].rc)
                    rfail(&w->r[r], "died of signal %d", WTERMSIG(st));
                else if (WIFEXITED(st) && WEXITSTATUS(st) != 0 && !w->r[r].rc)
                    rfail(&w->r[r], "exited %d (a sanitizer's report?)", WEXITSTATUS(st));
                pids[r] = -pids[r];
                alive--;
            }
        }
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (alive > 0 && (t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) * 1e-9 > timeout_s) {
            for (int r = 0; r < w->world; r++)
                if (pids[r] > 0) {
                    kill(pids[r], SIGKILL);
                    waitpid(pids[r], NULL, 0);
                    pids[r] = -pids[r];
                    hung++;
                }
            break;
        }
        usleep(2000);
    }
    store_host_stop(&h);
    ck_assert_msg(!hung, "%d rank(s) still running after %.0f s (killed)", hung, timeout_s);
    for (int r = 0; r < w->world; r++)
        ck_assert_msg(w->r[r].rc == 0, "rank %d of %d: %s", r, w->world, w->r[r].msg);
    ck_assert_msg(shm_left(-pids[0]) == 0, "rank 0 left a shared-memory object in /dev/shm");
}

static struct world *world_new(int world)
{
    struct world *w = mmap(NULL, sizeof *w, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                           -1, 0);
    ck_assert_ptr_ne(w, MAP_FAILED);
    memset(w, 0, sizeof *w);
    w->world = world;
    return w;
}

static double now(void)
{
    return ddpc_now();
}

/* ===== a rank's communicators, as ddprt.c's worker makes them ===== */

struct rank_ctx {
    cudaStream_t     compute;
    struct ddpc_comm grad, sync;
    int              have_grad, have_sync;
};

static int rank_open(struct rank_ctx *x, struct world *w, int rank, int split, double dl,
                     struct rank_report *rep)
{
    struct ddpc_err e = {0};
    memset(x, 0, sizeof *x);
    cudaError_t ce = cudaSetDevice(0);
    if (ce == cudaSuccess)
        ce = cudaStreamCreateWithFlags(&x->compute, cudaStreamNonBlocking);
    if (ce != cudaSuccess) {
        rfail(rep, "cuda: %s", cudaGetErrorString(ce));
        return -1;
    }
    x->have_grad = 1;         /* destroy is safe after a failed init */
    if (comm_nccl_init(&x->grad, "gradient", rank, w->world, "127.0.0.1", w->port, "a0",
                       x->compute, dl, &e) < 0) {
        rfail(rep, "init: %s", e.msg);
        return -1;
    }
    if (split) {
        x->have_sync = 1;
        if (comm_nccl_split(&x->grad, &x->sync, "rank-sync", dl, &e) < 0) {
            rfail(rep, "split: %s", e.msg);
            return -1;
        }
    }
    return 0;
}

/* ddprt.c's order: abort on failure, then the child, then the parent. */
static void rank_close(struct rank_ctx *x, struct rank_report *rep)
{
    if (rep->rc) {
        if (x->have_grad && x->grad.abort)
            x->grad.abort(&x->grad, "a rank failed");
        if (x->have_sync && x->sync.abort)
            x->sync.abort(&x->sync, "a rank failed");
    }
    if (x->have_sync && x->sync.destroy)
        x->sync.destroy(&x->sync);
    if (x->have_grad && x->grad.destroy)
        x->grad.destroy(&x->grad);
    if (x->compute) {
        /* what a test queued there (its host functions' arguments live on
         * the rank's stack) has run before the rank returns */
        (void)cudaStreamSynchronize(x->compute);
        (void)cudaStreamDestroy(x->compute);
    }
    struct standin_stats s;
    standin_stats(&s);
    rep->live_comms = s.live_comms;
    rep->host_funcs = s.host_funcs;
}

static float rank_value(int rank, size_t i)   /* small integers: every sum exact */
{
    return (float)((long)((i * 7 + (size_t)rank * 13) % 17) - 8);
}

static float *dev_floats(size_t n, struct rank_report *rep)
{
    void *p = NULL;
    if (cudaMalloc(&p, n * sizeof(float)) != cudaSuccess)
        rfail(rep, "cudaMalloc %zu floats", n);
    return p;
}

/* The host's view of n floats at dev, read through the compute stream as
 * ops->to_host does. */
static int download(struct rank_ctx *x, float *host, const float *dev, size_t n,
                    struct rank_report *rep)
{
    if (cudaMemcpyAsync(host, dev, n * sizeof *host, cudaMemcpyDeviceToHost, x->compute) !=
        cudaSuccess) {
        rfail(rep, "download: %s", cudaGetErrorString(cudaGetLastError()));
        return -1;
    }
    return cudaStreamSynchronize(x->compute) == cudaSuccess ? 0 : -1;
}

static int upload(struct rank_ctx *x, float *dev, const float *host, size_t n,
                  struct rank_report *rep)
{
    if (cudaMemcpyAsync(dev, host, n * sizeof *host, cudaMemcpyHostToDevice, x->compute) !=
            cudaSuccess ||
        cudaStreamSynchronize(x->compute) != cudaSuccess) {
        rfail(rep, "upload: %s", cudaGetErrorString(cudaGetLastError()));
        return -1;
    }
    return 0;
}

/* ===== D1: the rank-sync split, then both communicators at once ===== */

static void rank_split_then_collectives(struct world *w, int rank, struct rank_report *rep)
{
    struct rank_ctx x;
    struct ddpc_err e = {0};
    double dl = now() + 20;
    const size_t n = 300007;      /* two of the stand-in's phases, and a bit */
    float *h = malloc(n * sizeof *h), *out = malloc(n * sizeof *out);
    float *a = NULL, *r = NULL, *c = NULL;
    if (rank_open(&x, w, rank, 1, dl, rep) < 0)
        goto done;
    a = dev_floats(n, rep);
    r = dev_floats(n, rep);
    c = dev_floats(n, rep);
    for (size_t i = 0; i < n; i++)
        h[i] = rank_value(rank, i);
    if (rep->rc || upload(&x, a, h, n, rep) < 0 || upload(&x, c, h, n, rep) < 0)
        goto done;
    /* two tags in flight, as two gradient buckets; right after the split,
     * as ddprt.c's first broadcast comes right after it */
    if (x.grad.all_reduce_start(&x.grad, 0, a, r, n, DDPC_REDUCE_SUM, dl, &e) < 0 ||
        x.grad.all_reduce_start(&x.grad, 1, c, c, n, DDPC_REDUCE_AVG, dl, &e) < 0 ||
        x.grad.all_reduce_wait(&x.grad, 1, dl, &e) < 0 ||
        x.grad.all_reduce_wait(&x.grad, 0, dl, &e) < 0) {
        rfail(rep, "gradient all-reduce after the split: %s", e.msg);
        goto done;
    }
    size_t wrong_sum = 0, wrong_avg = 0;
    if (download(&x, out, r, n, rep) < 0)
        goto done;
    for (size_t i = 0; i < n; i++) {
        float want = 0;
        for (int q = 0; q < w->world; q++)
            want += rank_value(q, i);
        wrong_sum += out[i] != want;
    }
    if (download(&x, out, c, n, rep) < 0)
        goto done;
    for (size_t i = 0; i < n; i++) {
        double want = 0;
        for (int q = 0; q < w->world; q++)
            want += rank_value(q, i);
        want /= w->world;
        wrong_avg += fabs(out[i] - want) > 1e-6 * (fabs(want) + 1);
    }
    if (wrong_sum || wrong_avg) {
        rfail(rep, "all-reduce: %zu of %zu sums and %zu averages wrong", wrong_sum, n, wrong_avg);
        goto done;
    }
    for (size_t i = 0; i < n; i++)
        h[i] = (float)rank * 1000.0f + (float)(i % 1000);
    if (upload(&x, a, h, n, rep) < 0)
        goto done;
    if (x.grad.broadcast(&x.grad, a, n, w->world - 1, dl, &e) < 0) {
        rfail(rep, "broadcast: %s", e.msg);
        goto done;
    }
    if (download(&x, out, a, n, rep) < 0)
        goto done;
    size_t wrong_bc = 0;
    for (size_t i = 0; i < n; i++)
        wrong_bc += out[i] != (float)(w->world - 1) * 1000.0f + (float)(i % 1000);
    if (wrong_bc) {
        rfail(rep, "broadcast: %zu of %zu wrong", wrong_bc, n);
        goto done;
    }
    for (int k = 0; k < 3; k++)
        if (x.sync.barrier(&x.sync, dl, &e) < 0) {
            rfail(rep, "rank-sync barrier %d: %s", k, e.msg);
            goto done;
        }
done:
    if (a)
        (void)cudaFree(a);
    if (r)
        (void)cudaFree(r);
    if (c)
        (void)cudaFree(c);
    rank_close(&x, rep);
    if (!rep->rc && rep->live_comms != 0)
        rfail(rep, "%ld communicator(s) neither destroyed nor aborted", rep->live_comms);
    free(h);
    free(out);
}

START_TEST(split_then_gradient_collectives_and_barrier)
{
    int world = 2 << _i;
    standin_defaults(0.3);    /* the parent stays ncclInProgress 300 ms after ncclCommSplit */
    struct world *w = world_new(world);
    run_world(w, rank_split_then_collectives, 30);
    munmap(w, sizeof *w);
}
END_TEST

static void rank_split_timeout(struct world *w, int rank, struct rank_report *rep)
{
    struct rank_ctx x;
    struct ddpc_err e = {0};
    if (rank_open(&x, w, rank, 0, now() + 20, rep) < 0) {
        rank_close(&x, rep);
        return;
    }
    x.have_sync = 1;
    double t0 = now();
    int rc = comm_nccl_split(&x.grad, &x.sync, "rank-sync", t0 + 0.3, &e);
    rep->seconds = now() - t0;
    if (rc != DDPC_E_TIMEOUT || !strstr(e.msg, "rank-sync") || !strstr(e.msg, "split"))
        rfail(rep, "a split past its deadline: want DDPC_E_TIMEOUT naming the rank-sync split, "
              "got %d after %.2f s: %s", rc, rep->seconds, e.msg);
    else if (rep->seconds > 2.0)
        rfail(rep, "the split's deadline was 0.3 s; it gave up after %.2f s", rep->seconds);
    /* the parent was aborted with it (its abort also ends the child's init) */
    struct ddpc_err e2 = {0};
    float *d = dev_floats(4, rep);
    if (!rep->rc && x.grad.all_reduce_start(&x.grad, 0, d, d, 4, DDPC_REDUCE_SUM, now() + 5,
                                            &e2) != DDPC_E_ABORTED)
        rfail(rep, "the gradient communicator after its split timed out: want DDPC_E_ABORTED, "
              "got: %s", e2.msg);
    (void)cudaFree(d);
    int failed = rep->rc;
    rep->rc = 0;              /* aborted already: rank_close must not abort again */
    rank_close(&x, rep);
    rep->rc = failed;
    if (!rep->rc && rep->live_comms != 0)
        rfail(rep, "%ld communicator(s) left after the failed split (the child was not aborted)",
              rep->live_comms);
}

START_TEST(split_past_its_deadline_aborts_parent_and_child)
{
    standin_defaults(5.0);    /* the split takes 5 s; its deadline is 0.3 s */
    struct world *w = world_new(2);
    run_world(w, rank_split_timeout, 30);
    munmap(w, sizeof *w);
}
END_TEST

/* ===== overlap: buckets reduced while "backward" still writes ===== */

#define OVL_BUCKETS 6
#define OVL_STEPS   3
static const size_t ovl_size[OVL_BUCKETS] = {1, 100, 5000, 70001, 300007, 17};

struct fill_arg {             /* one bucket's "backward kernel" */
    float *dev;
    size_t n;
    int    step, rank, bucket;
};

static float grad_value(int step, int rank, int bucket, size_t i)
{
    return (float)((long)((i * 3 + (size_t)step * 5 + (size_t)rank * 7 + (size_t)bucket) % 11) -
                   5);
}

/* Runs on the compute stream: late, like backward's kernels behind the
 * delay hook, then writes the bucket. */
static void fill_fn(void *p)
{
    const struct fill_arg *a = p;
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
    for (size_t i = 0; i < a->n; i++)
        a->dev[i] = grad_value(a->step, a->rank, a->bucket, i);
}

struct check_arg {            /* the "optimizer": reads every reduced bucket */
    float **dev;
    int     step, world;
    long    wrong;
};

static void check_fn(void *p)
{
    struct check_arg *a = p;
    for (int b = 0; b < OVL_BUCKETS; b++)
        for (size_t i = 0; i < ovl_size[b]; i++) {
            float want = 0;
            for (int q = 0; q < a->world; q++)
                want += grad_value(a->step, q, b, i) * (1.0f / (float)a->world);
            a->wrong += a->dev[b][i] != want;
        }
}

static void rank_overlap(struct world *w, int rank, struct rank_report *rep)
{
    struct rank_ctx x;
    struct ddpc_err e = {0};
    double dl = now() + 20;
    float *g[OVL_BUCKETS] = {0};
    struct fill_arg fills[OVL_STEPS][OVL_BUCKETS];
    struct check_arg checks[OVL_STEPS];
    rep->delay_us = env_get()->test_stream_delay_us;
    if (rank_open(&x, w, rank, 1, dl, rep) < 0)
        goto done;
    for (int b = 0; b < OVL_BUCKETS; b++)
        if (!(g[b] = dev_floats(ovl_size[b], rep)))
            goto done;
    for (int s = 0; s < OVL_STEPS; s++) {
        /* backward: the last layer's bucket first; each all-reduce is started
         * as soon as the host has queued its bucket's kernels, long before
         * they run */
        for (int b = OVL_BUCKETS - 1; b >= 0; b--) {
            fills[s][b] = (struct fill_arg){g[b], ovl_size[b], s, rank, b};
            if (cudaLaunchHostFunc(x.compute, fill_fn, &fills[s][b]) != cudaSuccess) {
                rfail(rep, "cudaLaunchHostFunc");
                goto done;
            }
            rep->own_funcs++;
            if (x.grad.all_reduce_start(&x.grad, b, g[b], g[b], ovl_size[b], DDPC_REDUCE_AVG,
                                        dl, &e) < 0) {
                rfail(rep, "step %d bucket %d all_reduce_start: %s", s, b, e.msg);
                goto done;
            }
            rep->all_reduces++;
        }
        for (int b = OVL_BUCKETS - 1; b >= 0; b--)
            if (x.grad.all_reduce_wait(&x.grad, b, dl, &e) < 0) {
                rfail(rep, "step %d bucket %d all_reduce_wait: %s", s, b, e.msg);
                goto done;
            }
        checks[s] = (struct check_arg){g, s, w->world, 0};
        if (cudaLaunchHostFunc(x.compute, check_fn, &checks[s]) != cudaSuccess) {
            rfail(rep, "cudaLaunchHostFunc");
            goto done;
        }
        rep->own_funcs++;
        if (x.sync.barrier(&x.sync, dl, &e) < 0) {
            rfail(rep, "step %d rank-sync barrier: %s", s, e.msg);
            goto done;
        }
    }
    if (cudaStreamSynchronize(x.compute) != cudaSuccess) {
        rfail(rep, "cudaStreamSynchronize");
        goto done;
    }
    for (int s = 0; s < OVL_STEPS; s++)
        if (checks[s].wrong)
            rfail(rep, "step %d: the optimizer read %ld wrong gradient values (a missing event "
                  "wait between the streams)", s, checks[s].wrong);
done:
    /* destroy drains the comm stream: every delay hook has run after it */
    rank_close(&x, rep);
    for (int b = 0; b < OVL_BUCKETS; b++)
        if (g[b])
            (void)cudaFree(g[b]);
    struct standin_stats st;
    standin_stats(&st);
    rep->host_funcs = st.host_funcs;
}

START_TEST(bucketed_overlap_reads_what_backward_wrote)
{
    int world = 2 << _i;
    standin_defaults(0.05);
    /* before any env_get() in the ranks: they read it once (env.c) */
    ck_assert_int_eq(setenv("DDPC_TEST_STREAM_DELAY_US", "300", 1), 0);
    struct world *w = world_new(world);
    run_world(w, rank_overlap, 30);
    for (int r = 0; r < world; r++) {
        const struct rank_report *p = &w->r[r];
        ck_assert_msg(p->delay_us == 300, "rank %d ran with a stream delay of %g us, not 300", r,
                      p->delay_us);
        /* the hook's two delays per all-reduce ran, and nothing else */
        ck_assert_msg(p->host_funcs == p->own_funcs + 2 * p->all_reduces,
                      "rank %d: %ld host functions ran; the test queued %ld and the delay hook "
                      "should have queued %ld", r, p->host_funcs, p->own_funcs,
                      2 * p->all_reduces);
    }
    unsetenv("DDPC_TEST_STREAM_DELAY_US");
    munmap(w, sizeof *w);
}
END_TEST

/* ===== deadlines and a peer that leaves ===== */

static void rank_late_barrier(struct world *w, int rank, struct rank_report *rep)
{
    struct rank_ctx x;
    struct ddpc_err e = {0};
    if (rank_open(&x, w, rank, 1, now() + 20, rep) < 0)
        goto done;
    if (rank == 0) {
        usleep(1500000);      /* the others gave up 1 s ago */
        (void)x.sync.barrier(&x.sync, now() + 0.5, &e);
        goto done;
    }
    double t0 = now();
    int rc = x.sync.barrier(&x.sync, t0 + 0.4, &e);
    rep->seconds = now() - t0;
    if (rc != DDPC_E_TIMEOUT || !strstr(e.msg, "rank-sync") || !strstr(e.msg, "barrier") ||
        !strstr(e.msg, "rank_sync_timeout")) {
        rfail(rep, "a late peer: want DDPC_E_TIMEOUT naming the rank-sync barrier and "
              "rank_sync_timeout, got %d: %s", rc, e.msg);
        goto done;
    }
    if (rep->seconds > 1.5) {
        rfail(rep, "the barrier's deadline was 0.4 s; it gave up after %.2f s", rep->seconds);
        goto done;
    }
    struct ddpc_err e2 = {0};
    rc = x.sync.barrier(&x.sync, now() + 5, &e2);
    if (rc != DDPC_E_ABORTED || !strstr(e2.msg, "aborted earlier"))
        rfail(rep, "after the timeout: want DDPC_E_ABORTED, got %d: %s", rc, e2.msg);
done:
    rank_close(&x, rep);
}

START_TEST(late_peer_at_the_rank_sync_barrier_times_out)
{
    standin_defaults(0.05);
    struct world *w = world_new(2 << _i);
    run_world(w, rank_late_barrier, 30);
    munmap(w, sizeof *w);
}
END_TEST

/* Rank 1 never joins bucket 0. Rank 0's all_reduce_wait only makes the
 * compute stream wait (comm_nccl.cu), so the bucket's deadline is kept by
 * the next collective, which must name the all-reduce and nccl_timeout. */
static void rank_bucket_deadline(struct world *w, int rank, struct rank_report *rep)
{
    struct rank_ctx x;
    struct ddpc_err e = {0};
    float *d = NULL;
    if (rank_open(&x, w, rank, 0, now() + 20, rep) < 0)
        goto done;
    d = dev_floats(1000, rep);
    if (rank == 1) {
        usleep(1200000);      /* alive, but never joins: rank 0's deadline is 0.5 s */
        goto done;
    }
    double t0 = now();
    if (x.grad.all_reduce_start(&x.grad, 0, d, d, 1000, DDPC_REDUCE_SUM, t0 + 0.5, &e) < 0 ||
        x.grad.all_reduce_wait(&x.grad, 0, t0 + 0.5, &e) < 0) {
        rfail(rep, "start/wait must not wait for the peer: %s", e.msg);
        goto done;
    }
    int rc = x.grad.broadcast(&x.grad, d, 1000, 0, now() + 10, &e);
    rep->seconds = now() - t0;
    if (rc != DDPC_E_TIMEOUT || !strstr(e.msg, "all_reduce") || !strstr(e.msg, "nccl_timeout"))
        rfail(rep, "the next collective: want DDPC_E_TIMEOUT naming the bucket's all_reduce and "
              "nccl_timeout, got %d: %s", rc, e.msg);
    else if (rep->seconds > 1.5)
        rfail(rep, "the bucket's deadline was 0.5 s; it was named after %.2f s", rep->seconds);
done:
    if (d)
        (void)cudaFree(d);
    rank_close(&x, rep);
}

START_TEST(bucket_deadline_is_kept_by_the_next_collective)
{
    standin_defaults(0.05);
    struct world *w = world_new(2);
    run_world(w, rank_bucket_deadline, 30);
    munmap(w, sizeof *w);
}
END_TEST

static void rank_peer_exits(struct world *w, int rank, struct rank_report *rep)
{
    struct rank_ctx x;
    struct ddpc_err e = {0};
    float *d = NULL;
    if (rank_open(&x, w, rank, 0, now() + 20, rep) < 0) {
        rank_close(&x, rep);
        return;
    }
    if (rank == 1)
        _exit(0);             /* gone, without a word: a crashed worker */
    d = dev_floats(1000, rep);
    double dl = now() + 10;
    int rc = x.grad.all_reduce_start(&x.grad, 0, d, d, 1000, DDPC_REDUCE_SUM, dl, &e);
    if (rc == 0)
        rc = x.grad.all_reduce_wait(&x.grad, 0, dl, &e);
    if (rc == 0)
        rc = x.grad.broadcast(&x.grad, d, 1000, 0, dl, &e);
    if (rc != DDPC_E_PEER || !strstr(e.msg, "remote process exited"))
        rfail(rep, "a peer that exited: want DDPC_E_PEER with NCCL's ncclRemoteError, got %d: %s",
              rc, e.msg);
    (void)cudaFree(d);
    rank_close(&x, rep);
}

START_TEST(peer_that_exits_is_ddpc_e_peer)
{
    standin_defaults(0.05);
    struct world *w = world_new(2);
    run_world(w, rank_peer_exits, 30);
    munmap(w, sizeof *w);
}
END_TEST

START_TEST(init_whose_peer_never_comes_times_out)
{
    standin_defaults(0.05);
    struct world *w = world_new(1);
    struct store_host h;
    struct ddpc_err e = {0};
    ck_assert_msg(store_host_start(&h, "127.0.0.1", 0, 0, &e) == 0, "store: %s", e.msg);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        struct rank_report *rep = &w->r[0];
        cudaStream_t s;
        struct ddpc_comm c;
        if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess)
            _exit(2);
        double t0 = now();
        /* rank 0 of 2; rank 1 never starts */
        int rc = comm_nccl_init(&c, "gradient", 0, 2, "127.0.0.1", h.port, "a0", s, t0 + 0.4,
                                &e);
        rep->seconds = now() - t0;
        if (rc != DDPC_E_TIMEOUT || !strstr(e.msg, "init") || !strstr(e.msg, "gradient"))
            rfail(rep, "want DDPC_E_TIMEOUT naming the gradient init, got %d: %s", rc, e.msg);
        else if (rep->seconds > 2)
            rfail(rep, "the init's deadline was 0.4 s; it gave up after %.2f s", rep->seconds);
        c.destroy(&c);
        struct standin_stats st;
        standin_stats(&st);
        if (!rep->rc && st.live_comms)
            rfail(rep, "the timed-out communicator was not freed");
        _exit(0);
    }
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    store_host_stop(&h);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the rank exited with 0x%x", st);
    ck_assert_msg(w->r[0].rc == 0, "%s", w->r[0].msg);
    ck_assert_msg(shm_left(pid) == 0, "the timed-out init left its shared-memory object");
    munmap(w, sizeof *w);
}
END_TEST

/* ===== the stand-in is as asynchronous as the real thing ===== */

/* Raw stand-in calls, no ddpc code: each rank on its own non-blocking
 * communicator made from w->id. */
static ncclComm_t raw_init(struct world *w, int rank, struct rank_report *rep)
{
    ncclComm_t comm = NULL;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&comm, w->world, w->id, rank, &cfg);
    while (r == ncclInProgress)
        (void)ncclCommGetAsyncError(comm, &r);
    if (r != ncclSuccess) {
        rfail(rep, "init: %s", ncclGetErrorString(r));
        return NULL;
    }
    return comm;
}

static ncclResult_t raw_settle(ncclComm_t comm, ncclResult_t r)
{
    while (r == ncclInProgress)
        (void)ncclCommGetAsyncError(comm, &r);
    return r;
}

static void late_ones(void *p)   /* "a kernel" that writes 1s, 50 ms late */
{
    float *d = p;
    usleep(50000);
    for (int i = 0; i < 64; i++)
        d[i] = 1.0f;
}

static void rank_missing_wait(struct world *w, int rank, struct rank_report *rep)
{
    cudaStream_t compute, comm_stream;
    cudaEvent_t ready;
    float *d = NULL, *r = NULL, host[64];
    ncclComm_t comm = raw_init(w, rank, rep);
    if (!comm || cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking) ||
        cudaStreamCreateWithFlags(&comm_stream, cudaStreamNonBlocking) ||
        cudaEventCreateWithFlags(&ready, cudaEventDisableTiming) ||
        cudaMalloc((void **)&d, 64 * sizeof *d) || cudaMalloc((void **)&r, 64 * sizeof *r)) {
        rfail(rep, "setup");
        return;
    }
    for (int with_wait = 0; with_wait < 2 && !rep->rc; with_wait++) {
        if (cudaMemsetAsync(d, 0, 64 * sizeof *d, compute) || cudaStreamSynchronize(compute) ||
            cudaLaunchHostFunc(compute, late_ones, d)) {
            rfail(rep, "compute stream");
            break;
        }
        if (with_wait) {
            (void)cudaEventRecord(ready, compute);
            (void)cudaStreamWaitEvent(comm_stream, ready, 0);
        }
        ncclResult_t res = raw_settle(comm, ncclAllReduce(d, r, 64, ncclFloat, ncclSum, comm,
                                                          comm_stream));
        if (res != ncclSuccess || cudaStreamSynchronize(comm_stream) ||
            cudaStreamSynchronize(compute) ||
            cudaMemcpy(host, r, sizeof host, cudaMemcpyDeviceToHost)) {
            rfail(rep, "all-reduce: %s", ncclGetErrorString(res));
            break;
        }
        /* without the wait the reduction read d before the 1s were
         * written: 0 (the race, lost every time); with it, world */
        float want = with_wait ? (float)w->world : 0.0f;
        if (host[0] != want)
            rfail(rep, "%s the ready event: the all-reduce gave %g, want %g",
                  with_wait ? "with" : "without", (double)host[0], (double)want);
    }
    (void)ncclCommDestroy(comm);
}

START_TEST(standin_collective_without_an_event_wait_reads_stale_data)
{
    standin_defaults(0.05);
    struct world *w = world_new(2);
    ck_assert_int_eq(ncclGetUniqueId(&w->id), ncclSuccess);
    run_world(w, rank_missing_wait, 30);
    munmap(w, sizeof *w);
}
END_TEST

static void rank_unsettled(struct world *w, int rank, struct rank_report *rep)
{
    cudaStream_t s;
    float *d = NULL;
    ncclComm_t comm = NULL, child = NULL;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) ||
        cudaMalloc((void **)&d, 16 * sizeof *d)) {
        rfail(rep, "setup");
        return;
    }
    ncclResult_t r = ncclCommInitRankConfig(&comm, w->world, w->id, rank, &cfg);
    if (r != ncclInProgress || !comm) {
        rfail(rep, "a non-blocking init: want ncclInProgress and the communicator at once, got "
              "%s, %p", ncclGetErrorString(r), (void *)comm);
        return;
    }
    r = ncclAllReduce(d, d, 16, ncclFloat, ncclSum, comm, s);
    if (r != ncclInvalidArgument || !strstr(ncclGetLastError(comm), "before the previous"))
        rfail(rep, "a collective before init settled: want ncclInvalidArgument, got %s (%s)",
              ncclGetErrorString(r), ncclGetLastError(comm));
    do
        (void)ncclCommGetAsyncError(comm, &r);
    while (r == ncclInProgress || r == ncclInvalidArgument);
    /* NCCL's split on a non-blocking parent: ncclSuccess, child NULL, the
     * parent ncclInProgress until the child exists */
    r = ncclCommSplit(comm, 0, rank, &child, &cfg);
    ncclResult_t pa = ncclInternalError;
    (void)ncclCommGetAsyncError(comm, &pa);
    if (!rep->rc && (r != ncclSuccess || __atomic_load_n(&child, __ATOMIC_ACQUIRE) != NULL ||
                     pa != ncclInProgress))
        rfail(rep, "ncclCommSplit: want ncclSuccess, child NULL, parent ncclInProgress; got %s, "
              "%p, %s", ncclGetErrorString(r), (void *)child, ncclGetErrorString(pa));
    r = ncclBroadcast(d, d, 16, ncclFloat, 0, comm, s);
    if (!rep->rc && r != ncclInvalidArgument)
        rfail(rep, "the parent during the split: want ncclInvalidArgument, got %s",
              ncclGetErrorString(r));
    do
        (void)ncclCommGetAsyncError(comm, &r);
    while (r == ncclInProgress || r == ncclInvalidArgument);
    ncclComm_t got = __atomic_load_n(&child, __ATOMIC_ACQUIRE);
    if (!rep->rc && (r != ncclSuccess || !got))
        rfail(rep, "after the parent settled: want ncclSuccess and the child, got %s, %p",
              ncclGetErrorString(r), (void *)got);
    if (got) {
        r = raw_settle(got, ncclAllReduce(d, d, 16, ncclFloat, ncclSum, got, s));
        if (!rep->rc && r != ncclSuccess)
            rfail(rep, "the child's first all-reduce: %s", ncclGetErrorString(r));
        (void)cudaStreamSynchronize(s);
        (void)ncclCommDestroy(got);
    }
    (void)ncclCommDestroy(comm);
}

START_TEST(standin_communicator_used_before_it_settled_is_refused)
{
    standin_defaults(0.5);
    struct standin_config c;
    standin_config_get(&c);
    c.init_s = 0.5;           /* the calls below come microseconds after init and split */
    standin_config_set(&c);
    struct world *w = world_new(2);
    ck_assert_int_eq(ncclGetUniqueId(&w->id), ncclSuccess);
    run_world(w, rank_unsettled, 30);
    munmap(w, sizeof *w);
}
END_TEST

struct abort_arg {
    ncclComm_t comm;
};

static void *abort_later(void *p)
{
    usleep(100000);
    (void)ncclCommAbort(((struct abort_arg *)p)->comm);
    return NULL;
}

static void rank_abort_thread(struct world *w, int rank, struct rank_report *rep)
{
    cudaStream_t s;
    float *d = NULL;
    ncclComm_t comm = raw_init(w, rank, rep);
    if (!comm || cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) ||
        cudaMalloc((void **)&d, 16 * sizeof *d)) {
        rfail(rep, "setup");
        return;
    }
    if (rank == 1) {          /* never joins; leaves once rank 0 is done */
        usleep(1000000);
        (void)ncclCommAbort(comm);
        return;
    }
    ncclResult_t r = raw_settle(comm, ncclAllReduce(d, d, 16, ncclFloat, ncclSum, comm, s));
    if (r != ncclSuccess) {
        rfail(rep, "all-reduce: %s", ncclGetErrorString(r));
        return;
    }
    pthread_t t;
    struct abort_arg a = {comm};
    double t0 = now();
    pthread_create(&t, NULL, abort_later, &a);
    cudaError_t q = cudaStreamSynchronize(s);   /* stuck until the abort ends it */
    rep->seconds = now() - t0;
    pthread_join(t, NULL);
    if (q != cudaSuccess || rep->seconds > 2.0)   /* the abort comes at 0.1 s */
        rfail(rep, "the stream of a collective aborted from another thread drained after "
              "%.2f s (%s)", rep->seconds, cudaGetErrorString(q));
}

START_TEST(standin_abort_from_another_thread_ends_a_stuck_collective)
{
    standin_defaults(0.05);
    struct world *w = world_new(2);
    ck_assert_int_eq(ncclGetUniqueId(&w->id), ncclSuccess);
    run_world(w, rank_abort_thread, 30);
    munmap(w, sizeof *w);
}
END_TEST

Suite *comm_nccl_suite(void)
{
    Suite *s = suite_create("comm_nccl");
    TCase *d1 = tcase_create("split");
    tcase_set_timeout(d1, 60);
    tcase_add_loop_test(d1, split_then_gradient_collectives_and_barrier, 0, 2);   /* W 2, 4 */
    tcase_add_test(d1, split_past_its_deadline_aborts_parent_and_child);
    suite_add_tcase(s, d1);
    TCase *o = tcase_create("overlap");
    tcase_set_timeout(o, 60);
    tcase_add_loop_test(o, bucketed_overlap_reads_what_backward_wrote, 0, 2);
    suite_add_tcase(s, o);
    TCase *f = tcase_create("faults");
    tcase_set_timeout(f, 60);
    tcase_add_loop_test(f, late_peer_at_the_rank_sync_barrier_times_out, 0, 2);
    tcase_add_test(f, bucket_deadline_is_kept_by_the_next_collective);
    tcase_add_test(f, peer_that_exits_is_ddpc_e_peer);
    tcase_add_test(f, init_whose_peer_never_comes_times_out);
    suite_add_tcase(s, f);
    TCase *m = tcase_create("standin");
    tcase_set_timeout(m, 60);
    tcase_add_test(m, standin_collective_without_an_event_wait_reads_stale_data);
    tcase_add_test(m, standin_communicator_used_before_it_settled_is_refused);
    tcase_add_test(m, standin_abort_from_another_thread_ends_a_stuck_collective);
    suite_add_tcase(s, m);
    return s;
}
