/* test_comm_gloo.c - the gloo communicator (libddprt_gloo.so) with real
 * forked ranks on loopback, rendezvousing through a store on an ephemeral
 * port.
 *
 * Collectives are checked like test_comm_shm's: seeded per-rank data, an
 * expectation computed here, a count of wrong elements (gloo's ring sums
 * in its own order, so the comparison allows rounding, 1e-5 relative).
 * Failures: a rank that never arrives is named at the deadline; a rank
 * that dies mid-collective is noticed by the others in well under a
 * second; a rank that stops calling costs the others exactly their
 * deadline; abort wakes a waiter; tags overlap.
 * The plugin is dlopen()ed the way a job's launcher does; without gloo the
 * cases print SKIP.
 */
#include <dlfcn.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <check.h>
#include "suites.h"
#include "testutil.h"
#include "comm.h"
#include "comm_gloo.h"
#include "store.h"

#define MAXR 8

static const struct ddpc_gloo_backend *gloo_backend(void)
{
    static const struct ddpc_gloo_backend *b;
    static int tried;
    if (!tried) {
        tried = 1;
        char path[4096];
        snprintf(path, sizeof path, "%s/lib/ddpc/libddprt_gloo.so", test_build());
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        b = h ? dlsym(h, "ddpc_gloo_backend") : NULL;
        if (!b)
            test_skip("gloo", "%s could not be loaded (%s); install libgloo-dev and rebuild",
                   path, dlerror());
    }
    return b;
}

struct report {
    int    rc[MAXR];
    int    code[MAXR];
    double took[MAXR];
    long   wrong[MAXR];
    uint32_t bits[MAXR];   /* a hash of a rank's results, to compare the ranks' bits */
    char   msg[MAXR][512];
};

static struct report *report_map(void)
{
    void *m = mmap(NULL, sizeof(struct report), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(m, MAP_FAILED);
    memset(m, 0, sizeof(struct report));
    return m;
}

static float rank_value(int rank, size_t j)
{
    uint32_t h = (uint32_t)(rank * 2654435761u) ^ (uint32_t)(j * 40503u + 17);
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    return ((float)(h & 0xffff) / 65536.0f - 0.5f) * ((h >> 16) & 1 ? 1.0f : 100.0f);
}

typedef void (*rank_body)(struct ddpc_comm *c, int rank, int world, struct report *rep,
                          void *arg);

struct job {
    int world;
    int rpn;               /* ranks per "node", for names */
    double init_s;         /* rendezvous deadline */
    int skip_rank;         /* this rank never starts (-1: none) */
    double timeout_s;      /* the communicator's nccl_timeout (0: 30 s) */
};

/* Forks the ranks, each connecting through a fresh store; waits for all.
 * Returns the exit statuses in st[]. */
static void run_ranks(const struct job *j, rank_body body, void *arg, struct report *rep,
                      int st[MAXR])
{
    const struct ddpc_gloo_backend *b = gloo_backend();
    struct store_host h;
    struct ddpc_err e = { 0 };
    ck_assert_msg(store_host_start(&h, "127.0.0.1", 0, 0, &e) == 0, "%s", e.msg);
    pid_t pids[MAXR];
    for (int i = 0; i < j->world; i++) {
        pids[i] = -1;
        if (i == j->skip_rank)
            continue;
        pids[i] = fork();
        ck_assert_int_ne(pids[i], -1);
        if (pids[i] == 0) {
            struct ddpc_comm c;
            struct ddpc_err ce = { 0 };
            struct ddpc_gloo_init in = {
                .purpose = "gradient", .rank = i, .world = j->world, .ranks_per_node = j->rpn,
                .store_host = "127.0.0.1", .store_port = h.port, .prefix = "a0",
                .deadline = ddpc_deadline_after(j->init_s),
                .default_timeout_s = j->timeout_s > 0 ? j->timeout_s : 30,
            };
            double t0 = ddpc_now();
            int rc = b->comm_init(&c, &in, &ce);
            if (rc < 0) {
                rep->rc[i] = rc;
                rep->code[i] = ce.code;
                rep->took[i] = ddpc_now() - t0;
                snprintf(rep->msg[i], sizeof rep->msg[i], "%s", ce.msg);
                c.destroy(&c);
                _exit(2);
            }
            body(&c, i, j->world, rep, arg);
            c.destroy(&c);
            _exit(0);
        }
    }
    for (int i = 0; i < j->world; i++) {
        st[i] = 0;
        if (pids[i] > 0)
            ck_assert_int_eq(waitpid(pids[i], &st[i], 0), pids[i]);
    }
    store_host_stop(&h);
}

/* ===== collectives ===== */

struct ar_case { size_t n; enum ddpc_reduce op; int in_place; double deadline_s; };

static void body_all_reduce(struct ddpc_comm *c, int rank, int world, struct report *rep,
                            void *arg)
{
    const struct ar_case *k = arg;
    size_t n = k->n;
    float *send = malloc((n ? n : 1) * sizeof(float));
    float *recv = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++)
        send[i] = rank_value(rank, i);
    struct ddpc_err e = { 0 };
    float *out = k->in_place ? send : recv;
    double after = k->deadline_s > 0 ? k->deadline_s : 20;
    rep->rc[rank] = comm_all_reduce(c, send, out, n, k->op, ddpc_deadline_after(after), &e);
    /* leave together, as the worker does: a rank that exits while its peer
     * still reads the last message fails the peer's call (comm.h) */
    if (rep->rc[rank] == 0)
        rep->rc[rank] = comm_leave(c, ddpc_deadline_after(20), 20, &e);
    snprintf(rep->msg[rank], sizeof rep->msg[rank], "%s", e.msg);
    long wrong = 0;
    for (size_t i = 0; i < n; i++) {
        double s = 0, mag = 0;
        for (int r = 0; r < world; r++) {
            s += rank_value(r, i);
            mag += fabs(rank_value(r, i));
        }
        if (k->op == DDPC_REDUCE_AVG) {
            s /= world;
            mag /= world;
        }
        if (fabs(out[i] - s) > 1e-5 * mag + 1e-30)
            wrong++;
    }
    rep->wrong[rank] = wrong;
    free(send);
    free(recv);
}

START_TEST(all_reduce_sizes)
{
    if (!gloo_backend())
        return;
    static const struct ar_case cases[] = {
        { 1, DDPC_REDUCE_SUM, 0, 0 }, { 1000, DDPC_REDUCE_AVG, 1, 0 },
        { 300000, DDPC_REDUCE_SUM, 1, 0 }, { 0, DDPC_REDUCE_SUM, 0, 0 },
        /* from 2 MiB on the caller's floats (comm_gloo.cc kInPlaceBytes) */
        { 524288, DDPC_REDUCE_AVG, 0, 0 }, { 524287, DDPC_REDUCE_AVG, 1, 0 },
    };
    for (int w = 2; w <= 3; w++)
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
            struct report *rep = report_map();
            struct job j = { w, 1, 10, -1, 0 };
            int st[MAXR];
            run_ranks(&j, body_all_reduce, (void *)&cases[k], rep, st);
            for (int r = 0; r < w; r++) {
                ck_assert_msg(WIFEXITED(st[r]) && WEXITSTATUS(st[r]) == 0,
                              "w=%d n=%zu rank %d: status 0x%x %s", w, cases[k].n, r, st[r],
                              rep->msg[r]);
                ck_assert_msg(rep->rc[r] == 0, "w=%d n=%zu rank %d: %s", w, cases[k].n, r,
                              rep->msg[r]);
                ck_assert_msg(rep->wrong[r] == 0, "w=%d n=%zu rank %d: %ld wrong", w,
                              cases[k].n, r, rep->wrong[r]);
            }
            munmap(rep, sizeof *rep);
        }
}
END_TEST

/* Calls back to back across the paths' borders (comm_gloo.cc: one
 * exchange while a rank sends at most 8 MiB, or 256 KiB with several ranks
 * a host, gloo's ring object on a copy above, gloo's options API from
 * 2 MiB), each with its own values, so a
 * call that read a peer's previous or next contribution is wrong; every
 * rank's results are hashed to show the ranks hold the same bits. arg:
 * the sizes, 0-terminated. */
static void body_back_to_back(struct ddpc_comm *c, int rank, int world, struct report *rep,
                              void *arg)
{
    const size_t *sizes = arg;
    size_t maxn = 1;
    for (int k = 0; sizes[k]; k++)
        maxn = sizes[k] > maxn ? sizes[k] : maxn;
    float *x = malloc(maxn * sizeof *x);
    uint32_t h = 2166136261u;
    long wrong = 0;
    struct ddpc_err e = { 0 };
    for (int k = 0; sizes[k] && rep->rc[rank] == 0; k++) {
        size_t n = sizes[k];
        enum ddpc_reduce op = k % 2 ? DDPC_REDUCE_AVG : DDPC_REDUCE_SUM;
        for (size_t i = 0; i < n; i++)
            x[i] = rank_value(rank + 8 * k, i);
        rep->rc[rank] = comm_all_reduce(c, x, x, n, op, ddpc_deadline_after(20), &e);
        for (size_t i = 0; i < n; i++) {
            double s = 0, mag = 0;
            for (int r = 0; r < world; r++) {
                s += rank_value(r + 8 * k, i);
                mag += fabs(rank_value(r + 8 * k, i));
            }
            if (op == DDPC_REDUCE_AVG) {
                s /= world;
                mag /= world;
            }
            wrong += fabs(x[i] - s) > 1e-5 * mag + 1e-30;
            uint32_t b;
            memcpy(&b, &x[i], sizeof b);
            h = (h ^ b) * 16777619u;
        }
    }
    if (rep->rc[rank] == 0)
        rep->rc[rank] = comm_leave(c, ddpc_deadline_after(20), 20, &e);
    snprintf(rep->msg[rank], sizeof rep->msg[rank], "%s", e.msg);
    rep->wrong[rank] = wrong;
    rep->bits[rank] = h;
    free(x);
}

/* A timeout of weeks or more (nccl_timeout: 30d, 1e308) is a long wait:
 * 1e308 s as milliseconds in a long long overflowed, and gloo refused the
 * communicator ("Invalid timeout"); past that, the caller's condition wait
 * of 1e308 s returned at once, a spin that starved the comm thread. Both
 * sizes' paths (a ring object on a copy, the options API in place). */
START_TEST(far_deadlines_wait)
{
    if (!gloo_backend())
        return;
    static const struct ar_case cases[] = {
        { 1000, DDPC_REDUCE_AVG, 0, 1e308 }, { 524288, DDPC_REDUCE_SUM, 1, 30 * 86400.0 },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        struct report *rep = report_map();
        struct job j = { 2, 1, 10, -1, cases[k].deadline_s };
        int st[MAXR];
        run_ranks(&j, body_all_reduce, (void *)&cases[k], rep, st);
        for (int r = 0; r < 2; r++) {
            ck_assert_msg(WIFEXITED(st[r]) && WEXITSTATUS(st[r]) == 0 && rep->rc[r] == 0,
                          "timeout %g s, rank %d: status 0x%x %s", cases[k].deadline_s, r,
                          st[r], rep->msg[r]);
            ck_assert_int_eq(rep->wrong[r], 0);
        }
        munmap(rep, sizeof *rep);
    }
}
END_TEST

START_TEST(back_to_back_sizes_same_bits)
{
    if (!gloo_backend())
        return;
    /* world 2-4: the exchange up to the options API's 524288 floats (2 MiB),
     * the calls alternating halves (an odd run of 7s) */
    static const size_t small_w[] = { 1, 1000, 7, 7, 7, 524287, 524288, 3, 65536, 2, 0 };
    /* world 6: the exchange up to 419430 floats (5 x 419430 x 4 bytes
     * <= 8 MiB), the ring object above */
    static const size_t w6[] = { 419430, 419431, 5, 419431, 419430, 524288, 2, 0 };
    /* world 4 as 2 hosts of 2 ranks: the exchange only up to 21845
     * floats (3 x 21845 x 4 bytes <= 256 KiB), the ring object above */
    static const size_t w4_2[] = { 21845, 21846, 7, 21846, 21845, 524288, 3, 0 };
    static const struct { int world, rpn; const size_t *sizes; } runs[] = {
        { 2, 1, small_w }, { 3, 1, small_w }, { 4, 1, small_w }, { 6, 1, w6 }, { 4, 2, w4_2 },
    };
    for (size_t wi = 0; wi < sizeof runs / sizeof runs[0]; wi++) {
        int w = runs[wi].world;
        struct report *rep = report_map();
        struct job j = { w, runs[wi].rpn, 10, -1, 0 };
        int st[MAXR];
        run_ranks(&j, body_back_to_back, (void *)runs[wi].sizes, rep, st);
        for (int r = 0; r < w; r++) {
            ck_assert_msg(WIFEXITED(st[r]) && WEXITSTATUS(st[r]) == 0 && rep->rc[r] == 0,
                          "w=%d/%d rank %d: status 0x%x %s", w, j.rpn, r, st[r], rep->msg[r]);
            ck_assert_msg(rep->wrong[r] == 0, "w=%d/%d rank %d: %ld wrong", w, j.rpn, r,
                          rep->wrong[r]);
            ck_assert_msg(rep->bits[r] == rep->bits[0], "w=%d: rank %d's results differ from "
                          "rank 0's", w, r);
        }
        munmap(rep, sizeof *rep);
    }
}
END_TEST

/* Two buckets in flight at once (start, start, wait, wait), then a
 * broadcast from the last rank and a barrier. */
static void body_overlap(struct ddpc_comm *c, int rank, int world, struct report *rep,
                         void *arg)
{
    enum { N = 5000 };
    static float a[N], b[N], p[N];
    for (int i = 0; i < N; i++) {
        a[i] = (float)(rank + 1);
        b[i] = (float)(i % 7) * (float)(rank + 1);
        p[i] = rank == world - 1 ? (float)i : -1.0f;
    }
    struct ddpc_err e = { 0 };
    double dl = ddpc_deadline_after(20);
    int rc = c->all_reduce_start(c, 0, a, a, N, DDPC_REDUCE_SUM, dl, &e);
    if (!rc) rc = c->all_reduce_start(c, 1, b, b, N, DDPC_REDUCE_SUM, dl, &e);
    if (!rc) rc = c->all_reduce_wait(c, 0, dl, &e);
    if (!rc) rc = c->all_reduce_wait(c, 1, dl, &e);
    if (!rc) rc = c->broadcast(c, p, N, world - 1, dl, &e);
    if (!rc) rc = comm_leave(c, dl, 20, &e);
    rep->rc[rank] = rc;
    snprintf(rep->msg[rank], sizeof rep->msg[rank], "%s", e.msg);
    float tot = (float)(world * (world + 1) / 2);
    long wrong = 0;
    for (int i = 0; i < N; i++)
        wrong += a[i] != tot || b[i] != (float)(i % 7) * tot || p[i] != (float)i;
    rep->wrong[rank] = wrong;
}

START_TEST(overlapping_tags_broadcast_barrier)
{
    if (!gloo_backend())
        return;
    struct report *rep = report_map();
    struct job j = { 3, 1, 10, -1, 0 };
    int st[MAXR];
    run_ranks(&j, body_overlap, NULL, rep, st);
    for (int r = 0; r < 3; r++) {
        ck_assert_msg(rep->rc[r] == 0 && WIFEXITED(st[r]) && WEXITSTATUS(st[r]) == 0,
                      "rank %d: %s", r, rep->msg[r]);
        ck_assert_int_eq(rep->wrong[r], 0);
    }
    munmap(rep, sizeof *rep);
}
END_TEST

/* ===== failures ===== */

static void body_none(struct ddpc_comm *c, int rank, int world, struct report *rep, void *arg)
{
}

START_TEST(missing_rank_is_named_at_the_deadline)
{
    if (!gloo_backend())
        return;
    struct report *rep = report_map();
    struct job j = { 4, 2, 1.0, 3, 0 };   /* rank 3 = node 1 never starts */
    int st[MAXR];
    run_ranks(&j, body_none, NULL, rep, st);
    for (int r = 0; r < 3; r++) {
        ck_assert_msg(WIFEXITED(st[r]) && WEXITSTATUS(st[r]) == 2, "rank %d status 0x%x", r,
                      st[r]);
        ck_assert_int_eq(rep->code[r], DDPC_E_TIMEOUT);
        ck_assert_msg(strstr(rep->msg[r], "rank 3 (node 1)") &&
                      strstr(rep->msg[r], "never arrived"), "rank %d: %s", r, rep->msg[r]);
        ck_assert_msg(rep->took[r] > 0.9 && rep->took[r] < 3.0, "rank %d gave up after %.2f s",
                      r, rep->took[r]);
    }
    munmap(rep, sizeof *rep);
}
END_TEST

/* Rank 1 dies (SIGKILL, as a crashed node) while the others are inside an
 * all-reduce with a 20 s deadline: they must know within a second, and the
 * message must name node 1. */
static void body_one_dies(struct ddpc_comm *c, int rank, int world, struct report *rep,
                          void *arg)
{
    const size_t N = *(const size_t *)arg;
    float *x = calloc(N, sizeof *x);
    struct ddpc_err e = { 0 };
    /* one good round first, so every connection is up */
    int rc = comm_all_reduce(c, x, x, N, DDPC_REDUCE_SUM, ddpc_deadline_after(20), &e);
    if (rank == 1) {
        usleep(300 * 1000);
        kill(getpid(), SIGKILL);
    }
    double t0 = ddpc_now();
    if (!rc) {
        rc = comm_all_reduce(c, x, x, N, DDPC_REDUCE_SUM, ddpc_deadline_after(20), &e);
        /* the second round is entered before rank 1 dies: time from the
         * death, about 0.3 s after entering */
    }
    rep->rc[rank] = rc;
    rep->code[rank] = e.code;
    rep->took[rank] = ddpc_now() - t0;
    snprintf(rep->msg[rank], sizeof rep->msg[rank], "%s", e.msg);
    /* a broken communicator refuses at once */
    struct ddpc_err e2 = { 0 };
    if (rc < 0 && c->barrier(c, ddpc_deadline_after(20), &e2) != DDPC_E_ABORTED)
        rep->wrong[rank] = 1;
    free(x);
}

/* a small all-reduce (gloo's ring object) and a large one (in place) */
static const size_t fault_sizes[] = { 1000, 600000 };

START_TEST(dead_peer_is_noticed_at_once)
{
    if (!gloo_backend())
        return;
    for (size_t k = 0; k < sizeof fault_sizes / sizeof fault_sizes[0]; k++) {
        struct report *rep = report_map();
        struct job j = { 3, 1, 10, -1, 0 };
        int st[MAXR];
        run_ranks(&j, body_one_dies, (void *)&fault_sizes[k], rep, st);
        ck_assert(WIFSIGNALED(st[1]));
        for (int r = 0; r < 3; r += 2) {
            ck_assert_msg(rep->code[r] == DDPC_E_PEER, "n=%zu rank %d: code %d: %s",
                          fault_sizes[k], r, rep->code[r], rep->msg[r]);
            ck_assert_msg(rep->took[r] < 0.3 + 0.7, "n=%zu rank %d noticed after %.3f s",
                          fault_sizes[k], r, rep->took[r]);
            ck_assert_msg(strstr(rep->msg[r], "node 1"), "n=%zu rank %d: %s", fault_sizes[k],
                          r, rep->msg[r]);
            ck_assert_int_eq(rep->wrong[r], 0);
        }
        munmap(rep, sizeof *rep);
    }
}
END_TEST

/* Rank 0 stops calling (alive, connections open, as a hung peer): the
 * others wait exactly their deadline. */
static void body_hang(struct ddpc_comm *c, int rank, int world, struct report *rep, void *arg)
{
    const size_t N = *(const size_t *)arg;
    struct ddpc_err e = { 0 };
    if (rank == 0) {
        sleep(4);
        return;
    }
    float *x = calloc(N, sizeof *x);
    double t0 = ddpc_now();
    int rc = comm_all_reduce(c, x, x, N, DDPC_REDUCE_SUM, t0 + 1.0, &e);
    rep->rc[rank] = rc;
    rep->code[rank] = e.code;
    rep->took[rank] = ddpc_now() - t0;
    snprintf(rep->msg[rank], sizeof rep->msg[rank], "%s", e.msg);
    free(x);
}

START_TEST(hung_peer_costs_the_deadline)
{
    if (!gloo_backend())
        return;
    for (size_t k = 0; k < sizeof fault_sizes / sizeof fault_sizes[0]; k++) {
        struct report *rep = report_map();
        struct job j = { 2, 1, 10, -1, 0 };
        int st[MAXR];
        run_ranks(&j, body_hang, (void *)&fault_sizes[k], rep, st);
        ck_assert_msg(rep->code[1] == DDPC_E_TIMEOUT, "n=%zu code %d: %s", fault_sizes[k],
                      rep->code[1], rep->msg[1]);
        ck_assert_msg(rep->took[1] > 0.95 && rep->took[1] < 2.2, "n=%zu gave up after %.3f s",
                      fault_sizes[k], rep->took[1]);
        ck_assert_msg(strstr(rep->msg[1], "nccl_timeout"), "%s", rep->msg[1]);
        munmap(rep, sizeof *rep);
    }
}
END_TEST

/* abort from another thread wakes a rank blocked in wait at once. */
struct abort_arg { struct ddpc_comm *c; };
static void *abort_later(void *p)
{
    struct abort_arg *a = p;
    usleep(200 * 1000);
    a->c->abort(a->c, "test abort");
    return NULL;
}

#include <pthread.h>
static void body_abort(struct ddpc_comm *c, int rank, int world, struct report *rep, void *arg)
{
    enum { N = 100 };
    static float x[N];
    struct ddpc_err e = { 0 };
    if (rank == 0) {
        sleep(2);
        return;
    }
    pthread_t t;
    struct abort_arg a = { c };
    pthread_create(&t, NULL, abort_later, &a);
    double t0 = ddpc_now();
    int rc = comm_all_reduce(c, x, x, N, DDPC_REDUCE_SUM, t0 + 10, &e);
    rep->took[rank] = ddpc_now() - t0;
    pthread_join(t, NULL);
    rep->rc[rank] = rc;
    rep->code[rank] = e.code;
    snprintf(rep->msg[rank], sizeof rep->msg[rank], "%s", e.msg);
}

START_TEST(abort_wakes_a_waiter)
{
    if (!gloo_backend())
        return;
    struct report *rep = report_map();
    struct job j = { 2, 1, 10, -1, 0 };
    int st[MAXR];
    run_ranks(&j, body_abort, NULL, rep, st);
    ck_assert_msg(rep->code[1] == DDPC_E_ABORTED, "code %d: %s", rep->code[1], rep->msg[1]);
    ck_assert_msg(rep->took[1] < 1.0, "woke after %.3f s", rep->took[1]);
    ck_assert_msg(strstr(rep->msg[1], "test abort"), "%s", rep->msg[1]);
    munmap(rep, sizeof *rep);
}
END_TEST

Suite *comm_gloo_suite(void)
{
    Suite *s = suite_create("comm_gloo");
    TCase *t = tcase_create("collectives");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, all_reduce_sizes);
    tcase_add_test(t, far_deadlines_wait);
    tcase_add_test(t, back_to_back_sizes_same_bits);
    tcase_add_test(t, overlapping_tags_broadcast_barrier);
    suite_add_tcase(s, t);
    TCase *f = tcase_create("failures");
    tcase_set_timeout(f, 30);
    tcase_add_test(f, missing_rank_is_named_at_the_deadline);
    tcase_add_test(f, dead_peer_is_noticed_at_once);
    tcase_add_test(f, hung_peer_costs_the_deadline);
    tcase_add_test(f, abort_wakes_a_waiter);
    suite_add_tcase(s, f);
    return s;
}
