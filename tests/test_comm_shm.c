/* test_comm_shm.c - the shared-memory communicator and the launcher, with
 * real forked processes.
 *
 * Collectives: per-rank data from a seed, an expectation computed here in
 * the same fixed order the contract promises (so it must match bitwise),
 * and a count of wrong elements like nccl-tests. Results travel back from
 * the workers through a MAP_SHARED result page.
 * Launcher: fake worker functions through launch_run, so no training code
 * is needed: a worker that gets SIGKILLed, one that fails, one that hangs.
 */
#include <dirent.h>
#include <errno.h>
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
#include "comm.h"
#include "comm_shm.h"
#include "launch.h"
#include "store.h"
#include "ddprt.h"
#include "env.h"
#include "ops.h"
#include <fcntl.h>

/* ===== helpers ===== */

/* splitmix64: reproducible per-rank inputs with varied magnitudes, so the
 * summation order is visible in the low bits. */
static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static float rank_value(uint64_t seed, int rank, size_t j)
{
    uint64_t h = mix(seed ^ mix((uint64_t)rank * 1000003u + j));
    float u = (float)(h >> 40) / (float)(1u << 24);   /* [0, 1) */
    float scale = (h & 1) ? 1e-3f : 1e3f;
    return (u - 0.5f) * scale;
}

static void fill_rank(float *x, size_t n, uint64_t seed, int rank)
{
    for (size_t j = 0; j < n; j++)
        x[j] = rank_value(seed, rank, j);
}

static float expect_at(uint64_t seed, int world, size_t j, enum ddpc_reduce op)
{
    float s = rank_value(seed, 0, j);
    for (int k = 1; k < world; k++)
        s += rank_value(seed, k, j);
    if (op == DDPC_REDUCE_AVG)
        s /= (float)world;
    return s;
}

/* Shared page where each worker reports back. */
struct report {
    int    rc[8];
    int    code[8];
    double took[8];
    long   wrong[8];
    uint64_t hash[8];
    char   msg[8][512];
};

static struct report *report_map(void)
{
    void *m = mmap(NULL, sizeof(struct report), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(m, MAP_FAILED);
    memset(m, 0, sizeof(struct report));
    return m;
}

static uint64_t hash_floats(const float *x, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    const unsigned char *p = (const unsigned char *)x;
    for (size_t i = 0; i < n * sizeof(float); i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

typedef void (*rank_body)(struct ddpc_comm *c, int rank, struct report *rep, void *arg);

/* Forks `world` processes attached to region r, runs body in each, waits.
 * Every child exits 0; the body reports through rep. */
static void run_ranks(int world, size_t slot, rank_body body, void *arg, struct report *rep)
{
    struct comm_shm_region *r = NULL;
    struct ddpc_err e = { 0 };
    ck_assert_int_eq(comm_shm_create(&r, world, slot, &e), 0);
    pid_t pids[8];
    for (int i = 0; i < world; i++) {
        pids[i] = fork();
        ck_assert_int_ne(pids[i], -1);
        if (pids[i] == 0) {
            struct ddpc_comm c;
            struct ddpc_err ce = { 0 };
            if (comm_shm_attach(&c, r, i, "gradient", &ce) < 0)
                _exit(3);
            body(&c, i, rep, arg);
            c.destroy(&c);
            _exit(0);
        }
    }
    for (int i = 0; i < world; i++) {
        int st;
        ck_assert_int_eq(waitpid(pids[i], &st, 0), pids[i]);
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank %d wait status 0x%x", i, st);
    }
    comm_shm_region_free(r);
}

/* ===== all-reduce correctness ===== */

struct ar_case {
    size_t n;
    enum ddpc_reduce op;
    int in_place;
    uint64_t seed;
    int repeats;
};

static void body_all_reduce(struct ddpc_comm *c, int rank, struct report *rep, void *arg)
{
    const struct ar_case *k = arg;
    size_t n = k->n;
    float *send = malloc((n ? n : 1) * sizeof(float));
    float *recv = malloc((n ? n : 1) * sizeof(float));
    if (!send || !recv)
        _exit(4);
    uint64_t first = 0;
    for (int rep_i = 0; rep_i < k->repeats; rep_i++) {
        fill_rank(send, n, k->seed, rank);
        for (size_t j = 0; j < n; j++)
            recv[j] = -7.0f;   /* poison: every element must be written */
        struct ddpc_err e = { 0 };
        float *out = k->in_place ? send : recv;
        int rc = comm_all_reduce(c, send, out, n, k->op, ddpc_deadline_after(60), &e);
        rep->rc[rank] = rc;
        if (rc < 0) {
            (void)snprintf(rep->msg[rank], sizeof rep->msg[rank], "%s", e.msg);
            break;
        }
        long wrong = 0;
        for (size_t j = 0; j < n; j++) {
            float want = expect_at(k->seed, c->world, j, k->op);
            if (memcmp(&out[j], &want, sizeof want) != 0)
                wrong++;
        }
        rep->wrong[rank] += wrong;
        uint64_t h = hash_floats(out, n);
        if (rep_i == 0)
            first = h;
        else if (h != first)
            rep->wrong[rank] += 1000000000L;   /* not reproducible */
        rep->hash[rank] = h;
    }
    free(send);
    free(recv);
}

static void check_all_reduce(int world, size_t slot, size_t n, enum ddpc_reduce op, int in_place)
{
    struct report *rep = report_map();
    struct ar_case k = { n, op, in_place, 0x5eed0000u + n * 31u + (uint64_t)world, 2 };
    run_ranks(world, slot, body_all_reduce, &k, rep);
    for (int i = 0; i < world; i++) {
        ck_assert_msg(rep->rc[i] == 0, "rank %d: %s", i, rep->msg[i]);
        ck_assert_msg(rep->wrong[i] == 0,
                      "world %d n %zu op %d in_place %d: rank %d has %ld wrong elements",
                      world, n, (int)op, in_place, i, rep->wrong[i]);
        ck_assert(rep->hash[i] == rep->hash[0]);
    }
    munmap(rep, sizeof *rep);
}

START_TEST(all_reduce_sizes_2_and_3_ranks)
{
    static const size_t sizes[] = { 1, 7, 1000003 };
    for (int world = 2; world <= 3; world++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
            for (int op = 0; op < 2; op++)
                for (int in_place = 0; in_place < 2; in_place++)
                    check_all_reduce(world, 0, sizes[s], (enum ddpc_reduce)op, in_place);
}
END_TEST

START_TEST(all_reduce_larger_than_slot)
{
    /* 1000 floats through 64-float slots: 16 pieces, last one partial. */
    for (int world = 2; world <= 3; world++) {
        check_all_reduce(world, 64, 1000, DDPC_REDUCE_SUM, 0);
        check_all_reduce(world, 64, 1000, DDPC_REDUCE_AVG, 1);
        check_all_reduce(world, 16, 33, DDPC_REDUCE_SUM, 1);
    }
}
END_TEST

START_TEST(all_reduce_bitwise_across_runs)
{
    struct report *a = report_map(), *b = report_map();
    struct ar_case k = { 100000, DDPC_REDUCE_AVG, 0, 42, 3 };
    run_ranks(3, 4096, body_all_reduce, &k, a);
    run_ranks(3, 4096, body_all_reduce, &k, b);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(a->rc[i], 0);
        ck_assert_int_eq(a->wrong[i], 0);
        ck_assert(a->hash[i] == b->hash[i]);
    }
    munmap(a, sizeof *a);
    munmap(b, sizeof *b);
}
END_TEST

START_TEST(all_reduce_single_rank_and_empty)
{
    check_all_reduce(1, 0, 1000, DDPC_REDUCE_AVG, 0);
    check_all_reduce(2, 0, 0, DDPC_REDUCE_SUM, 0);
}
END_TEST

/* ===== zero-copy all-reduce (grad_buffer) and shared_buffer ===== */

/* Three buckets of an odd-sized gradient buffer, started in reverse order
 * like backward, three steps in a row, with an ordinary all-reduce and a
 * broadcast (the metrics path) in between: every element is the rank-ordered
 * reduction, bitwise, on every rank. */
static void body_zero_copy(struct ddpc_comm *c, int rank, struct report *rep, void *arg)
{
    const struct ar_case *k = arg;
    size_t n = k->n;
    float *send = NULL, *res = NULL;
    struct ddpc_err e = { 0 };
    int rc = c->grad_buffer(c, n, &send, &res, &e);
    if (rc < 0 || !send || !res) {
        rep->rc[rank] = rc < 0 ? rc : -100;
        (void)snprintf(rep->msg[rank], sizeof rep->msg[rank], "no grad buffer: %.400s", e.msg);
        return;
    }
    size_t edge[4] = { 0, n / 4, n / 2 + 1, n };   /* buckets [edge[b], edge[b+1]) */
    uint64_t first = 0;
    for (int step = 0; step < k->repeats && rc == 0; step++) {
        fill_rank(send, n, k->seed, rank);
        for (int b = 2; b >= 0 && rc == 0; b--)
            rc = c->all_reduce_start(c, b, send + edge[b], res + edge[b], edge[b + 1] - edge[b],
                                     k->op, ddpc_deadline_after(60), &e);
        for (int b = 0; b < 3 && rc == 0; b++)
            rc = c->all_reduce_wait(c, b, ddpc_deadline_after(60), &e);
        if (rc < 0)
            break;
        long wrong = 0;
        for (size_t j = 0; j < n; j++) {
            float want = expect_at(k->seed, c->world, j, k->op);
            if (memcmp(&res[j], &want, sizeof want) != 0)
                wrong++;
        }
        rep->wrong[rank] += wrong;
        uint64_t h = hash_floats(res, n);
        if (step == 0)
            first = h;
        else if (h != first)
            rep->wrong[rank] += 1000000000L;
        rep->hash[rank] = h;
        /* every rank has read res before anyone's next collective */
        rc = c->barrier(c, ddpc_deadline_after(60), &e);
        float m[3] = { (float)rank, 1, 2 };
        if (rc == 0)
            rc = comm_all_reduce(c, m, m, 3, DDPC_REDUCE_SUM, ddpc_deadline_after(60), &e);
        if (rc == 0 && m[0] != (float)(c->world * (c->world - 1) / 2))
            rep->wrong[rank] += 1;
        if (rc == 0)
            rc = c->broadcast(c, m, 3, 0, ddpc_deadline_after(60), &e);
    }
    rep->rc[rank] = rc;
    if (rc < 0)
        (void)snprintf(rep->msg[rank], sizeof rep->msg[rank], "%s", e.msg);
}

START_TEST(zero_copy_buckets_2_and_3_ranks)
{
    static const size_t sizes[] = { 7, 1003, 200000 };
    for (int world = 2; world <= 3; world++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
            for (int op = 0; op < 2; op++) {
                struct report *rep = report_map();
                struct ar_case k = { sizes[s], (enum ddpc_reduce)op, 0,
                                     0x2e40u + sizes[s] + (uint64_t)world, 3 };
                run_ranks(world, 0, body_zero_copy, &k, rep);
                for (int i = 0; i < world; i++) {
                    ck_assert_msg(rep->rc[i] == 0, "rank %d: %s", i, rep->msg[i]);
                    ck_assert_msg(rep->wrong[i] == 0, "world %d n %zu op %d: rank %d: %ld wrong",
                                  world, sizes[s], op, i, rep->wrong[i]);
                    ck_assert(rep->hash[i] == rep->hash[0]);
                }
                munmap(rep, sizeof *rep);
            }
}
END_TEST

/* grad_buffer refuses more than a slot; the zero-copy result equals the
 * copy path's bit for bit. */
START_TEST(zero_copy_too_large_and_same_as_copy)
{
    struct report *a = report_map(), *b = report_map();
    struct ar_case k = { 1000, DDPC_REDUCE_AVG, 0, 99, 1 };
    run_ranks(2, 0, body_zero_copy, &k, a);
    run_ranks(2, 0, body_all_reduce, &k, b);
    ck_assert_int_eq(a->rc[0], 0);
    ck_assert_int_eq(b->rc[0], 0);
    ck_assert(a->hash[0] == b->hash[0]);
    k.n = 65;   /* slot of 64 floats */
    run_ranks(2, 64, body_zero_copy, &k, a);
    ck_assert_int_eq(a->rc[0], -100);
    munmap(a, sizeof *a);
    munmap(b, sizeof *b);
}
END_TEST

/* Chunks of >= 1 Mi floats per rank take the streaming-store path. */
START_TEST(zero_copy_large_chunks)
{
    struct report *rep = report_map();
    struct ar_case k = { 4200003, DDPC_REDUCE_AVG, 0, 7, 2 };
    run_ranks(2, k.n, body_zero_copy, &k, rep);
    for (int i = 0; i < 2; i++) {
        ck_assert_msg(rep->rc[i] == 0, "rank %d: %s", i, rep->msg[i]);
        ck_assert_int_eq(rep->wrong[i], 0);
    }
    munmap(rep, sizeof *rep);
}
END_TEST

/* mode 0: rank 1 never starts (rank 0 times out naming it, not arrived);
 * mode 1: rank 1 starts a different piece (both see "ranks disagree");
 * mode 2: rank 0 calls broadcast with a bucket outstanding (refused). */
static void body_zero_copy_faults(struct ddpc_comm *c, int rank, struct report *rep, void *arg)
{
    int mode = *(const int *)arg;
    float *send = NULL, *res = NULL;
    struct ddpc_err e = { 0 };
    int rc = c->grad_buffer(c, 100, &send, &res, &e);
    size_t n = mode == 1 && rank == 1 ? 99 : 100;
    double t0 = ddpc_now();
    if (rc == 0 && !(mode == 0 && rank == 1))
        rc = c->all_reduce_start(c, 0, send, res, n, DDPC_REDUCE_SUM, 0, &e);
    if (rc == 0 && mode == 2 && rank == 0) {
        float x = 1;
        rc = c->broadcast(c, &x, 1, 0, ddpc_deadline_after(1), &e);
    }
    if (rc == 0 && mode == 0 && rank == 1)
        rc = c->barrier(c, ddpc_deadline_after(5), &e);   /* elsewhere, not in the bucket */
    else if (rc == 0)
        rc = c->all_reduce_wait(c, 0, ddpc_deadline_after(0.3), &e);
    rep->rc[rank] = rc;
    rep->took[rank] = ddpc_now() - t0;
    (void)snprintf(rep->msg[rank], sizeof rep->msg[rank], "%s", e.msg);
}

START_TEST(zero_copy_deadline_mismatch_and_misuse)
{
    struct report *rep = report_map();
    int mode = 0;
    run_ranks(2, 0, body_zero_copy_faults, &mode, rep);
    ck_assert_int_eq(rep->rc[0], DDPC_E_TIMEOUT);
    ck_assert_msg(strstr(rep->msg[0], "bucket 0") && strstr(rep->msg[0], "rank 1 ") &&
                  strstr(rep->msg[0], "did not arrive") && strstr(rep->msg[0], "nccl_timeout"),
                  "message: %s", rep->msg[0]);
    ck_assert_int_eq(rep->rc[1], DDPC_E_ABORTED);   /* woken by rank 0's abort */
    ck_assert_msg(rep->took[1] < 2.0, "rank 1 waited %.2f s", rep->took[1]);
    munmap(rep, sizeof *rep);

    rep = report_map();
    mode = 1;
    run_ranks(2, 0, body_zero_copy_faults, &mode, rep);
    for (int i = 0; i < 2; i++)
        ck_assert_msg(rep->rc[i] < 0 && strstr(rep->msg[i], "ranks disagree"), "rank %d: %s",
                      i, rep->msg[i]);
    munmap(rep, sizeof *rep);

    rep = report_map();
    mode = 2;
    run_ranks(2, 0, body_zero_copy_faults, &mode, rep);
    ck_assert_int_eq(rep->rc[0], DDPC_E_INVALID);
    ck_assert_msg(strstr(rep->msg[0], "outstanding"), "message: %s", rep->msg[0]);
    munmap(rep, sizeof *rep);
}
END_TEST

static void body_shared_buffer(struct ddpc_comm *c, int rank, struct report *rep, void *arg)
{
    (void)arg;
    float *buf = NULL;
    struct ddpc_err e = { 0 };
    int rc = c->shared_buffer(c, 3000, &buf, &e);
    if (rc == 0 && !buf)
        rc = -100;
    if (rc == 0 && rank == 0)
        for (int j = 0; j < 3000; j++)
            buf[j] = (float)j;
    if (rc == 0)
        rc = c->barrier(c, ddpc_deadline_after(60), &e);
    /* a copy-path all-reduce must not touch the shared buffer */
    float x[64] = { 0 };
    if (rc == 0)
        rc = comm_all_reduce(c, x, x, 64, DDPC_REDUCE_SUM, ddpc_deadline_after(60), &e);
    for (int j = 0; rc == 0 && j < 3000; j++)
        rep->wrong[rank] += buf[j] != (float)j;
    rep->rc[rank] = rc;
    (void)snprintf(rep->msg[rank], sizeof rep->msg[rank], "%s", e.msg);
}

START_TEST(shared_buffer_is_one_copy)
{
    struct report *rep = report_map();
    run_ranks(3, 1024, body_shared_buffer, NULL, rep);
    for (int i = 0; i < 3; i++) {
        ck_assert_msg(rep->rc[i] == 0, "rank %d: %s", i, rep->msg[i]);
        ck_assert_int_eq(rep->wrong[i], 0);
    }
    munmap(rep, sizeof *rep);
}
END_TEST

/* ===== broadcast and barrier ===== */

static void body_broadcast(struct ddpc_comm *c, int rank, struct report *rep, void *arg)
{
    (void)arg;
    size_t n = 777;
    float *x = malloc(n * sizeof(float));
    if (!x)
        _exit(4);
    for (int root = 0; root < c->world; root++) {
        fill_rank(x, n, 99, rank);
        struct ddpc_err e = { 0 };
        int rc = c->broadcast(c, x, n, root, ddpc_deadline_after(30), &e);
        if (rc < 0) {
            rep->rc[rank] = rc;
            (void)snprintf(rep->msg[rank], sizeof rep->msg[rank], "%s", e.msg);
            break;
        }
        for (size_t j = 0; j < n; j++) {
            float want = rank_value(99, root, j);
            if (memcmp(&x[j], &want, sizeof want) != 0)
                rep->wrong[rank]++;
        }
    }
    free(x);
}

START_TEST(broadcast_from_every_root)
{
    for (int world = 2; world <= 3; world++) {
        struct report *rep = report_map();
        run_ranks(world, 100, body_broadcast, NULL, rep);   /* 777 > slot: pieces */
        for (int i = 0; i < world; i++) {
            ck_assert_msg(rep->rc[i] == 0, "rank %d: %s", i, rep->msg[i]);
            ck_assert_int_eq(rep->wrong[i], 0);
        }
        munmap(rep, sizeof *rep);
    }
}
END_TEST

/* Rank r sleeps r*50 ms, then barriers; nobody may leave before the last
 * arrives. */
static void body_barrier(struct ddpc_comm *c, int rank, struct report *rep, void *arg)
{
    (void)arg;
    struct ddpc_err e = { 0 };
    for (int round = 0; round < 3; round++) {
        usleep((useconds_t)(rank * 50000));
        double t0 = ddpc_now();
        int rc = c->barrier(c, ddpc_deadline_after(10), &e);
        rep->rc[rank] = rc;
        if (rc < 0) {
            (void)snprintf(rep->msg[rank], sizeof rep->msg[rank], "%s", e.msg);
            return;
        }
        rep->took[rank] += ddpc_now() - t0;
    }
}

START_TEST(barrier_waits_for_the_last_rank)
{
    struct report *rep = report_map();
    run_ranks(3, 0, body_barrier, NULL, rep);
    for (int i = 0; i < 3; i++)
        ck_assert_msg(rep->rc[i] == 0, "rank %d: %s", i, rep->msg[i]);
    /* rank 0 waited ~100 ms per round for rank 2 */
    ck_assert_msg(rep->took[0] > 0.25, "rank 0 waited %.3f s", rep->took[0]);
    ck_assert_msg(rep->took[2] < 0.1, "rank 2 waited %.3f s", rep->took[2]);
    munmap(rep, sizeof *rep);
}
END_TEST

/* ===== timeouts and aborts ===== */

/* Rank 1 of 3 never arrives (sleeps past everyone's deadline). */
static void body_missing_rank(struct ddpc_comm *c, int rank, struct report *rep, void *arg)
{
    (void)arg;
    if (rank == 1) {
        usleep(2500000);
        return;
    }
    float x[5] = { 1, 2, 3, 4, 5 };
    struct ddpc_err e = { 0 };
    double t0 = ddpc_now();
    double deadline = t0 + 0.5 + 0.3 * rank;   /* rank 0 expires first */
    rep->rc[rank] = comm_all_reduce(c, x, x, 5, DDPC_REDUCE_SUM, deadline, &e);
    rep->took[rank] = ddpc_now() - deadline;
    rep->code[rank] = e.code;
    (void)snprintf(rep->msg[rank], sizeof rep->msg[rank], "%s", e.msg);
}

START_TEST(deadline_names_the_missing_rank)
{
    struct report *rep = report_map();
    run_ranks(3, 0, body_missing_rank, NULL, rep);
    /* rank 0 times out itself and names rank 1 */
    ck_assert_int_eq(rep->rc[0], DDPC_E_TIMEOUT);
    ck_assert_msg(strstr(rep->msg[0], "gradient") && strstr(rep->msg[0], "all-reduce") &&
                  strstr(rep->msg[0], "rank 1 ") && !strstr(rep->msg[0], "rank 2"),
                  "message: %s", rep->msg[0]);
    ck_assert_msg(rep->took[0] >= 0 && rep->took[0] < 1.0, "expired %.3f s late", rep->took[0]);
    /* rank 2 is woken by rank 0's abort before its own deadline */
    ck_assert_int_eq(rep->rc[2], DDPC_E_ABORTED);
    ck_assert_msg(strstr(rep->msg[2], "timed out"), "message: %s", rep->msg[2]);
    ck_assert_msg(rep->took[2] < 0, "rank 2 waited for its own deadline");
    munmap(rep, sizeof *rep);
}
END_TEST

/* Rank 0 aborts while ranks 1 and 2 wait in a barrier with no deadline. */
static void body_abort(struct ddpc_comm *c, int rank, struct report *rep, void *arg)
{
    (void)arg;
    struct ddpc_err e = { 0 };
    if (rank == 0) {
        usleep(200000);
        c->abort(c, "loss is NaN");
        rep->took[0] = ddpc_now();
        return;
    }
    rep->rc[rank] = c->barrier(c, 0, &e);
    rep->took[rank] = ddpc_now();
    (void)snprintf(rep->msg[rank], sizeof rep->msg[rank], "%s", e.msg);
    /* and every later call fails at once */
    struct ddpc_err e2 = { 0 };
    rep->code[rank] = c->barrier(c, 0, &e2);
}

START_TEST(abort_wakes_the_others)
{
    struct report *rep = report_map();
    run_ranks(3, 0, body_abort, NULL, rep);
    for (int i = 1; i < 3; i++) {
        ck_assert_int_eq(rep->rc[i], DDPC_E_ABORTED);
        ck_assert_msg(strstr(rep->msg[i], "rank 0: loss is NaN"), "message: %s", rep->msg[i]);
        ck_assert_msg(rep->took[i] - rep->took[0] < 0.2, "woke %.3f s after the abort",
                      rep->took[i] - rep->took[0]);
        ck_assert_int_eq(rep->code[i], DDPC_E_ABORTED);
    }
    munmap(rep, sizeof *rep);
}
END_TEST

/* Rank 1 exits without telling anyone; rank 0 must notice (DDPC_E_PEER)
 * without a launcher, by polling liveness. The test reaps rank 1 first. */
START_TEST(dead_peer_is_noticed)
{
    struct comm_shm_region *r = NULL;
    struct ddpc_err e = { 0 };
    struct report *rep = report_map();
    ck_assert_int_eq(comm_shm_create(&r, 2, 0, &e), 0);
    pid_t p1 = fork();
    if (p1 == 0) {
        struct ddpc_comm c;
        if (comm_shm_attach(&c, r, 1, "rank-sync", &e) < 0)
            _exit(3);
        _exit(0);
    }
    int st;
    ck_assert_int_eq(waitpid(p1, &st, 0), p1);
    pid_t p0 = fork();
    if (p0 == 0) {
        struct ddpc_comm c;
        struct ddpc_err ce = { 0 };
        if (comm_shm_attach(&c, r, 0, "rank-sync", &ce) < 0)
            _exit(3);
        double t0 = ddpc_now();
        rep->rc[0] = c.barrier(&c, ddpc_deadline_after(10), &ce);
        rep->took[0] = ddpc_now() - t0;
        (void)snprintf(rep->msg[0], sizeof rep->msg[0], "%s", ce.msg);
        _exit(0);
    }
    ck_assert_int_eq(waitpid(p0, &st, 0), p0);
    ck_assert_int_eq(rep->rc[0], DDPC_E_PEER);
    ck_assert_msg(strstr(rep->msg[0], "rank 1") && strstr(rep->msg[0], "rank-sync"),
                  "message: %s", rep->msg[0]);
    ck_assert_msg(rep->took[0] < 1.0, "noticed after %.3f s", rep->took[0]);
    comm_shm_region_free(r);
    munmap(rep, sizeof *rep);
}
END_TEST

/* Rank 0 reduces 10 floats, rank 1 reduces 11: both fail, the message says
 * what each passed. */
static void body_mismatch(struct ddpc_comm *c, int rank, struct report *rep, void *arg)
{
    (void)arg;
    float x[11] = { 0 };
    struct ddpc_err e = { 0 };
    rep->rc[rank] = comm_all_reduce(c, x, x, 10 + (size_t)rank, DDPC_REDUCE_SUM,
                                    ddpc_deadline_after(5), &e);
    (void)snprintf(rep->msg[rank], sizeof rep->msg[rank], "%s", e.msg);
}

START_TEST(mismatched_calls_are_reported)
{
    struct report *rep = report_map();
    run_ranks(2, 0, body_mismatch, NULL, rep);
    int invalid = 0;
    for (int i = 0; i < 2; i++) {
        ck_assert_int_ne(rep->rc[i], 0);
        ck_assert_msg(strstr(rep->msg[i], "ranks disagree") && strstr(rep->msg[i], "of 11 floats"),
                      "rank %d: %s", i, rep->msg[i]);
        invalid += rep->rc[i] == DDPC_E_INVALID;
    }
    ck_assert_int_ge(invalid, 1);
    munmap(rep, sizeof *rep);
}
END_TEST

START_TEST(create_rejects_bad_world)
{
    struct comm_shm_region *r = (void *)1;
    struct ddpc_err e = { 0 };
    ck_assert_int_eq(comm_shm_create(&r, 0, 0, &e), DDPC_E_INVALID);
    ck_assert_ptr_null(r);
    comm_shm_region_free(NULL);
}
END_TEST

/* ===== the launcher with fake workers ===== */

/* Each fake worker runs barriers on the gradient communicator until told to
 * stop; what it does differently per rank comes from the mode. */
enum fake_mode { FAKE_OK, FAKE_KILL_RANK1, FAKE_FAIL_RANK1, FAKE_HANG, FAKE_TIMEOUT_RANK1,
                 FAKE_FAIL_RANK1_LONG };

/* FAKE_FAIL_RANK1_LONG: rank 0's error, in memory shared across fork */
static char *fake_seen;

static int fake_worker(const struct launch_worker *w, struct ddpc_err *e)
{
    enum fake_mode mode = *(const enum fake_mode *)w->user;
    struct ddpc_comm c;
    DDPC_TRY(comm_shm_attach(&c, w->grad_region, w->rank, "gradient", e));
    int rc = 0;
    for (int step = 0; step < 20 && rc == 0; step++) {
        if (w->rank == 1 && step == 5) {
            if (mode == FAKE_KILL_RANK1)
                raise(SIGKILL);
            if (mode == FAKE_FAIL_RANK1) {
                rc = DDPC_FAIL(e, DDPC_E_DATA, "fake: batch %d is corrupt", step);
                break;
            }
            if (mode == FAKE_FAIL_RANK1_LONG) {
                rc = DDPC_FAIL(e, DDPC_E_DATA, "fake: batch %d is corrupt: %0450d", step, 7);
                break;
            }
            if (mode == FAKE_TIMEOUT_RANK1)
                sleep(30);
        }
        if (mode == FAKE_HANG && w->rank == 0 && step == 2)
            pause();
        if (mode == FAKE_FAIL_RANK1_LONG && w->rank == 0)
            (void)signal(SIGTERM, SIG_IGN);   /* say what it saw before the SIGKILL */
        float x[3] = { (float)w->rank, 1, 2 };
        rc = comm_all_reduce(&c, x, x, 3, DDPC_REDUCE_SUM,
                             ddpc_deadline_after(mode == FAKE_TIMEOUT_RANK1 ? 0.5 : 0), e);
        /* this node's ranks: c.world (w->world counts every node's) */
        if (rc == 0 && x[1] != (float)c.world)
            rc = DDPC_FAIL(e, DDPC_E_INVALID, "fake: sum %g != %d", x[1], c.world);
        if (rc < 0 && mode == FAKE_FAIL_RANK1_LONG && w->rank == 0)
            (void)snprintf(fake_seen, 1024, "%s", e->msg);
    }
    c.destroy(&c);
    return rc;
}

static void fake_opts(struct launch_opts *o, int world)
{
    memset(o, 0, sizeof *o);
    o->world = world;
    o->device_kind = "cpu worker";
    o->use_shm = 1;
    o->grace_s = 1.0;
    for (int i = 0; i < world; i++)
        o->devices[i] = i;
}

/* The fake workers' "[rank N] error:" lines are expected; keep them out of
 * the test log. Each Check test runs in its own process, so this is local. */
static void silence_stderr(void)
{
    int fd = open("/dev/null", O_WRONLY);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(dup2(fd, 2), 2);
    close(fd);
}

/* No process of ours may be left: no child to wait for. */
static void assert_no_children(void)
{
    ck_assert_int_eq(waitpid(-1, NULL, WNOHANG), -1);
}

START_TEST(launch_all_ok)
{
    struct launch_opts o;
    fake_opts(&o, 3);
    enum fake_mode mode = FAKE_OK;
    struct ddpc_err e = { 0 };
    int st = launch_run(&o, fake_worker, &mode, &e);
    ck_assert_msg(st == 0, "status %d: %s", st, e.msg);
    assert_no_children();
}
END_TEST

START_TEST(launch_worker_killed)
{
    silence_stderr();
    struct launch_opts o;
    fake_opts(&o, 3);
    enum fake_mode mode = FAKE_KILL_RANK1;
    struct ddpc_err e = { 0 };
    double t0 = ddpc_now();
    int st = launch_run(&o, fake_worker, &mode, &e);
    ck_assert_int_eq(st, 1);
    ck_assert_msg(strstr(e.msg, "rank 1 (cpu worker 1) killed by signal 9"), "msg: %s", e.msg);
    ck_assert_msg(ddpc_now() - t0 < 3.0, "took %.2f s", ddpc_now() - t0);
    assert_no_children();
}
END_TEST

START_TEST(launch_worker_fails)
{
    silence_stderr();
    struct launch_opts o;
    fake_opts(&o, 2);
    enum fake_mode mode = FAKE_FAIL_RANK1;
    struct ddpc_err e = { 0 };
    int st = launch_run(&o, fake_worker, &mode, &e);
    ck_assert_int_eq(st, 1);
    ck_assert_msg(strstr(e.msg, "rank 1 (cpu worker 1) exited with status 12 (data error)"),
                  "msg: %s", e.msg);
    assert_no_children();
}
END_TEST

/* A rank that fails with a long message (500 bytes) stops its peers with
 * "rank 1 (cpu worker 1) failed", not with its message: they repeated it,
 * cut at the shared region's 384 bytes, after "failed:". It prints its
 * message itself, once, whole. */
START_TEST(launch_peer_names_the_failed_rank_only)
{
    silence_stderr();
    fake_seen = mmap(NULL, 1024, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert(fake_seen != MAP_FAILED);
    fake_seen[0] = '\0';
    struct launch_opts o;
    fake_opts(&o, 2);
    enum fake_mode mode = FAKE_FAIL_RANK1_LONG;
    struct ddpc_err e = { 0 };
    int st = launch_run(&o, fake_worker, &mode, &e);
    ck_assert_int_eq(st, 1);
    ck_assert_msg(strstr(e.msg, "rank 1 (cpu worker 1) exited with status 12 (data error)"),
                  "msg: %s", e.msg);
    const char *tail = "aborted: rank 1 (cpu worker 1) failed";
    size_t n = strlen(fake_seen), t = strlen(tail);
    ck_assert_msg(n >= t && strcmp(fake_seen + n - t, tail) == 0 && !strstr(fake_seen, "fake:"),
                  "rank 0 saw: %s", fake_seen);
    munmap(fake_seen, 1024);
    assert_no_children();
}
END_TEST

/* On several nodes the launcher's last line carries what the failed rank
 * saw; a message too long to follow it whole in 511 bytes says it was cut
 * (the rank's own line has it whole) instead of ending mid-word. */
START_TEST(launch_last_line_cut_says_so)
{
    silence_stderr();
    fake_seen = mmap(NULL, 1024, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert(fake_seen != MAP_FAILED);
    struct launch_opts o;
    fake_opts(&o, 2);
    o.global_world = 4;   /* this node's ranks 0 and 1 of 4 */
    enum fake_mode mode = FAKE_FAIL_RANK1_LONG;
    struct ddpc_err e = { 0 };
    ck_assert_int_eq(launch_run(&o, fake_worker, &mode, &e), 1);
    /* "fake: batch 5 is corrupt: 000...0007" is 476 bytes */
    const char *head = "rank 1 (cpu worker 1) exited with status 12 (data error): fake: batch "
                       "5 is corrupt: 000";
    const char *tail = "000 [... cut: the rank's error line has it whole]";
    size_t n = strlen(e.msg), t = strlen(tail);
    ck_assert_msg(strncmp(e.msg, head, strlen(head)) == 0 && n >= t &&
                  strcmp(e.msg + n - t, tail) == 0, "msg (%zu): %s", n, e.msg);
    munmap(fake_seen, 1024);
    assert_no_children();
}
END_TEST

/* A message longer than struct ddpc_err holds ends in " [...]", cut at a
 * UTF-8 character's start: it ended mid-word (mid-character) as if that
 * were all of it. */
START_TEST(err_cut_says_so)
{
    char path[700];
    memset(path, 'a', sizeof path);
    for (int i = 0; i < 10; i++)   /* e-acute x 10: the 511-byte cut falls inside one */
        memcpy(path + 481 + 2 * i, "\xc3\xa9", 2);
    path[sizeof path - 1] = '\0';
    struct ddpc_err e = { 0 };
    ck_assert_int_eq(DDPC_FAIL(&e, DDPC_E_DATA, "checkpoint %s: truncated", path), DDPC_E_DATA);
    size_t n = strlen(e.msg);
    ck_assert_msg(n <= sizeof e.msg - 1 && n >= sizeof e.msg - 8 &&
                  strcmp(e.msg + n - 6, " [...]") == 0, "%zu: %s", n, e.msg);
    /* the byte before the marker ends a whole e-acute */
    unsigned char last = (unsigned char)e.msg[n - 7];
    ck_assert_msg(last == 0xa9 && (unsigned char)e.msg[n - 8] == 0xc3, "0x%02x", last);
    struct ddpc_err s = { 0 };
    (void)DDPC_FAIL(&s, DDPC_E_DATA, "short: %s", "whole");
    ck_assert_str_eq(s.msg, "short: whole");
}
END_TEST

START_TEST(launch_timeout_reports_the_slow_rank)
{
    silence_stderr();
    struct launch_opts o;
    fake_opts(&o, 2);
    enum fake_mode mode = FAKE_TIMEOUT_RANK1;
    struct ddpc_err e = { 0 };
    double t0 = ddpc_now();
    int st = launch_run(&o, fake_worker, &mode, &e);
    ck_assert_int_eq(st, 1);
    /* rank 0 times out (exit 13) and is the cause; rank 1 is torn down */
    ck_assert_msg(strstr(e.msg, "rank 0 (cpu worker 0) exited with status 13 (timeout)"),
                  "msg: %s", e.msg);
    ck_assert_msg(ddpc_now() - t0 < 3.0, "took %.2f s", ddpc_now() - t0);
    assert_no_children();
}
END_TEST

/* SIGTERM to the launcher: forwarded, reaped, status 143. The hanging
 * worker ignores nothing, so it dies by the forwarded signal. */
static void send_sigterm_later(pid_t target)
{
    pid_t p = fork();
    if (p == 0) {
        usleep(300000);
        kill(target, SIGTERM);
        _exit(0);
    }
}

START_TEST(launch_sigterm_stops_everything)
{
    silence_stderr();
    struct launch_opts o;
    fake_opts(&o, 2);
    enum fake_mode mode = FAKE_HANG;
    struct ddpc_err e = { 0 };
    send_sigterm_later(getpid());
    int st = launch_run(&o, fake_worker, &mode, &e);
    ck_assert_int_eq(st, 143);
    ck_assert_msg(strstr(e.msg, "SIGTERM"), "msg: %s", e.msg);
    /* the signal helper is our child too; reap it, then nothing is left */
    while (waitpid(-1, NULL, 0) > 0)
        ;
    assert_no_children();
}
END_TEST

/* The launcher itself is SIGKILLed: PR_SET_PDEATHSIG takes the workers. */
START_TEST(launch_killed_launcher_leaves_no_worker)
{
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t launcher = fork();
    if (launcher == 0) {
        close(fds[0]);
        struct launch_opts o;
        fake_opts(&o, 2);
        enum fake_mode mode = FAKE_HANG;   /* rank 0 pauses, rank 1 waits */
        struct ddpc_err e = { 0 };
        /* keep the write end open in every worker: EOF on the read end
         * then proves that every process holding it is gone */
        (void)launch_run(&o, fake_worker, &mode, &e);
        _exit(0);
    }
    close(fds[1]);
    usleep(300000);
    ck_assert_int_eq(kill(launcher, SIGKILL), 0);
    int st;
    ck_assert_int_eq(waitpid(launcher, &st, 0), launcher);
    /* read() returns 0 once no process holds the write end */
    char b;
    double t0 = ddpc_now();
    ssize_t n = read(fds[0], &b, 1);
    ck_assert_int_eq((int)n, 0);
    ck_assert_msg(ddpc_now() - t0 < 2.0, "workers outlived the launcher by %.2f s",
                  ddpc_now() - t0);
    close(fds[0]);
}
END_TEST

START_TEST(exit_codes_are_distinct)
{
    ck_assert_int_eq(launch_exit_code(0), 0);
    ck_assert_int_eq(launch_exit_code(DDPC_E_TIMEOUT), 13);
    ck_assert_str_eq(launch_exit_name(13), "timeout");
    ck_assert_ptr_null(launch_exit_name(1));
    for (int c = DDPC_E_SYS; c >= DDPC_E_TAKEN; c--)
        ck_assert_ptr_nonnull(launch_exit_name(launch_exit_code(c)));
}
END_TEST


/* ===== ddprt_main: flags, device plan, dry run, a real tiny run ===== */

/* A small valid job: synthetic 3-class data, MLP 8-16-3, two CPU workers. */
static void tiny_job(struct ddpc_job *j)
{
    memset(j, 0, sizeof *j);
    j->version = 1;
    j->name = "tiny";
    j->n_devices = 2;
    j->devices[0] = 0;
    j->devices[1] = 1;
    j->strategy = DDPC_STRATEGY_DDP;
    j->accelerator = DDPC_ACCEL_CPU;
    j->seed = 7;
    j->epochs = 1;
    j->learning_rate = 1e-3;
    j->batch_size = 16;
    j->grad_accumulation = 1;
    j->limit_train_fraction = 1.0;
    j->bucket_cap_mb = 25;
    j->nccl_timeout_s = 30;
    j->rank_sync_timeout_s = 30;
    j->model.type = DDPC_MODEL_MLP;
    j->model.n_layers = 3;
    j->model.layers[0] = 8;
    j->model.layers[1] = 16;
    j->model.layers[2] = 3;
    j->loss = DDPC_LOSS_CROSS_ENTROPY;
    j->data.train.format = DDPC_DATA_SYNTHETIC;
    j->data.train.samples = 256;
    j->data.train.features = 8;
    j->data.train.classes = 3;
    j->data.train.seed = 1;
    j->data.shuffle = 1;
    j->optimizer.type = DDPC_OPTIM_ADAM;
    j->optimizer.beta1 = 0.9;
    j->optimizer.beta2 = 0.999;
    j->optimizer.eps = 1e-8;
    j->schedule.warmup_start_factor = 1.0;
    j->schedule.gamma = 0.1;
    j->schedule.step_size = 1;
    j->logging.every_n_steps = 50;
    j->logging.progress = DDPC_PROGRESS_OFF;
    j->launch.num_nodes = 1;
    j->launch.master_port = 29500;
}

/* Runs ddprt_main in a child with stdout/stderr in files; returns its exit
 * status (or 1000 + signal) and the two outputs (static buffers). */
static char main_out[65536], main_err[65536];

static void slurp(const char *path, char *buf, size_t len)
{
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    size_t n = fread(buf, 1, len - 1, f);
    buf[n] = '\0';
    fclose(f);
}

static int run_main(const struct ddpc_job *job, const struct ddpc_backend *cuda,
                    const char *a1, const char *a2)
{
    char out[] = "/tmp/ddprt_out_XXXXXX", err[] = "/tmp/ddprt_err_XXXXXX";
    int fo = mkstemp(out), fe = mkstemp(err);
    ck_assert(fo >= 0 && fe >= 0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    ck_assert_int_ne(pid, -1);
    if (pid == 0) {
        dup2(fo, 1);
        dup2(fe, 2);
        struct ddprt_program p = {
            .job = job, .spec_path = "tiny.yaml", .spec_hash = "abc123",
            .spec_text = "name: tiny\n", .plan_json = "{\"world\": 2}",
            .ddpc_version = "test", .cuda = cuda,
        };
        char *argv[4] = { (char *)"job", (char *)a1, (char *)a2, NULL };
        int argc = a1 ? (a2 ? 3 : 2) : 1;
        int rc = ddprt_main(&p, argc, argv);
        fflush(stdout);   /* main's return would flush; _exit does not */
        _exit(rc);
    }
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    slurp(out, main_out, sizeof main_out);
    slurp(err, main_err, sizeof main_err);
    close(fo);
    close(fe);
    unlink(out);
    unlink(err);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1000 + WTERMSIG(st);
}

START_TEST(ddprt_dry_run_prints_everything)
{
    struct ddpc_job j;
    tiny_job(&j);
    int st = run_main(&j, NULL, "--dry-run", NULL);
    ck_assert_msg(st == 0, "status %d: %s", st, main_err);
    static const char *want[] = {
        "learning_rate", "0.001", "data.train.format", "synthetic", "optimizer.beta2",
        "launch.max_restarts", "world size", "rank 1 ", "cpu worker 1", "name: tiny",
        "{\"world\": 2}", "nccl_timeout", "rank_sync_timeout", "abc123",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        ck_assert_msg(strstr(main_out, want[i]), "dry run lacks '%s':\n%s", want[i], main_out);
}
END_TEST

START_TEST(ddprt_flags)
{
    struct ddpc_job j;
    tiny_job(&j);
    ck_assert_int_eq(run_main(&j, NULL, "--bogus", NULL), 2);
    ck_assert_msg(strstr(main_err, "--bogus"), "%s", main_err);
    ck_assert_int_eq(run_main(&j, NULL, "--help", NULL), 0);
    ck_assert_msg(strstr(main_out, "--dry-run"), "%s", main_out);
    ck_assert_int_eq(run_main(&j, NULL, "--version", NULL), 0);
    ck_assert_msg(strstr(main_out, "abc123"), "%s", main_out);
    /* a flag that takes no value refuses one: --dry-run=no dry-ran (the
     * value was dropped), --help=1 and --version=2 answered as if plain */
    static const char *const no_value[] = { "--dry-run=no", "--dry-run=", "--help=1",
                                            "-h=x", "--version=2" };
    for (size_t i = 0; i < sizeof no_value / sizeof no_value[0]; i++) {
        ck_assert_msg(run_main(&j, NULL, no_value[i], NULL) == 2, "%s: %s%s", no_value[i],
                      main_out, main_err);
        ck_assert_msg(strstr(main_err, "takes no value") && !strstr(main_out, "dry-run"),
                      "%s: %s%s", no_value[i], main_out, main_err);
    }
    ck_assert_int_eq(run_main(&j, NULL, "--node-rank", "x"), 2);
    ck_assert_int_eq(run_main(&j, NULL, "--node-rank", " 1"), 2);
    ck_assert_msg(strstr(main_err, "--node-rank ' 1'"), "%s", main_err);
    ck_assert_int_eq(run_main(&j, NULL, "--resume", NULL), 2);
    ck_assert_int_eq(run_main(&j, NULL, "--resume", "/nonexistent/ckpt"), 1);
    ck_assert_msg(strstr(main_err, "/nonexistent/ckpt"), "%s", main_err);
    /* a directory or a device is refused before any worker starts (rank 0
     * said "checkpoint /tmp: not a regular file", the others "stopped") */
    ck_assert_int_eq(run_main(&j, NULL, "--resume", "/tmp"), 1);
    ck_assert_msg(strstr(main_err, "ddpc: error: --resume /tmp: is a directory; name one "
                                   "checkpoint file") && !strstr(main_err, "[rank"),
                  "%s", main_err);
    j.checkpoint.resume = DDPC_RESUME_PATH;
    j.checkpoint.resume_path = "/dev/null";
    ck_assert_int_eq(run_main(&j, NULL, NULL, NULL), 1);
    ck_assert_msg(strstr(main_err, "ddpc: error: checkpoint.resume: /dev/null: not a regular "
                                   "file") && !strstr(main_err, "[rank"), "%s", main_err);
    j.checkpoint.resume = DDPC_RESUME_AUTO;
    j.checkpoint.resume_path = NULL;
    ck_assert_int_eq(run_main(&j, NULL, "--master", "nohost"), 1);
    ck_assert_msg(strstr(main_err, "HOST:PORT"), "%s", main_err);
    /* brackets only around a whole IPv6 address: '[::1' used to become
     * host '[:' and port 1, and the job then waited for it */
    static const char *const bad_master[] = { "[::1", "::1]:5", "[]:5", "a[b:5", "[::1]5:6" };
    for (size_t i = 0; i < sizeof bad_master / sizeof bad_master[0]; i++) {
        ck_assert_int_eq(run_main(&j, NULL, "--master", bad_master[i]), 1);
        ck_assert_msg(strstr(main_err, "[ADDRESS]:PORT for IPv6"), "%s: %s", bad_master[i],
                      main_err);
    }
    /* --sample N >= 1 tokens; --temperature a number >= 0; both of them and
     * --prompt only with --sample */
    static const char *const bad_sample[][2] = {
        { "--sample", "0" }, { "--sample", "-3" }, { "--sample", "12abc" }, { "--sample", "" },
        { "--sample=5", "--temperature=-1" }, { "--sample=5", "--temperature=nan" },
        { "--sample=5", "--temperature=warm" }, { "--temperature=0.5", NULL },
        /* strtod's hex and blanks: --temperature 0x10 was 16 */
        { "--sample=5", "--temperature=0x10" }, { "--sample=5", "--temperature= 1" },
        { "--sample=5", "--temperature=infinity" }, { "--sample", "0x10" },
        { "--prompt=hello", NULL }, { "--sample", NULL },
    };
    for (size_t i = 0; i < sizeof bad_sample / sizeof bad_sample[0]; i++) {
        ck_assert_msg(run_main(&j, NULL, bad_sample[i][0], bad_sample[i][1]) == 2,
                      "%s %s: %s", bad_sample[i][0], bad_sample[i][1], main_err);
        ck_assert_msg(strstr(main_err, "--sample") || strstr(main_err, "--temperature"),
                      "%s", main_err);
    }
    ck_assert_int_eq(run_main(&j, NULL, "--help", NULL), 0);
    ck_assert_msg(strstr(main_out, "--sample N") && strstr(main_out, "--temperature T"), "%s",
                  main_out);
    /* a model that is not a gpt has nothing to sample; a prompt needs bytes
     * for tokens (checked before anything starts) */
    ck_assert_int_eq(run_main(&j, NULL, "--sample=5", NULL), 2);
    ck_assert_msg(strstr(main_err, "gpt"), "%s", main_err);
    j.model.type = DDPC_MODEL_GPT;
    j.model.vocab_size = 50257;
    ck_assert_int_eq(run_main(&j, NULL, "--sample=5", "--prompt=Once"), 2);
    ck_assert_msg(strstr(main_err, "vocab_size 50257"), "%s", main_err);
    /* a byte outside a byte vocabulary: refused before training, not after
     * it (the job used to train, then fail at the sample) */
    j.model.vocab_size = 128;
    ck_assert_int_eq(run_main(&j, NULL, "--sample=5", "--prompt=caf\xc3\xa9"), 2);
    ck_assert_msg(strstr(main_err, "byte 3 (0xc3) is not a token of this model (vocab_size 128)"),
                  "%s", main_err);
}
END_TEST

/* DDPC_* variables are parsed with a range: garbage stops the job with the
 * variable's name instead of becoming 0; good values reach env_get(). */
START_TEST(ddprt_env_checked)
{
    struct ddpc_job j;
    tiny_job(&j);
    static const char *const bad[][2] = {
        { "DDPC_PROFILE", "yes" }, { "DDPC_SHM_SPIN_US", "abc" }, { "DDPC_SHM_SPIN_US", "-5" },
        { "DDPC_BENCH_T0", "12x" }, { "DDPC_TEST_CKPT_STOP_AFTER_BYTES", "1e3" },
        { "DDPC_TEST_CUDA_PROBE_ERROR", "0" }, { "DDPC_TEST_STREAM_DELAY_US", "2e6" },
        /* decimal only: strtod took DDPC_SHM_SPIN_US=0x10 as 16 */
        { "DDPC_SHM_SPIN_US", "0x10" }, { "DDPC_BENCH_T0", " 5" },
        { "DDPC_TEST_CKPT_SLOW_S", "0x1p2" }, { "DDPC_FUSED_ATTN", "no" },
        { "DDPC_DEBUG", "2" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(setenv(bad[i][0], bad[i][1], 1), 0);
        int st = run_main(&j, NULL, "--dry-run", NULL);
        ck_assert_int_eq(unsetenv(bad[i][0]), 0);
        char want[96];
        snprintf(want, sizeof want, "%s='%s': expected", bad[i][0], bad[i][1]);
        ck_assert_msg(st == 2 && strstr(main_err, want), "%s=%s: status %d, stderr:\n%s",
                      bad[i][0], bad[i][1], st, main_err);
        ck_assert_msg(!strstr(main_out, "job (as baked"), "ran anyway:\n%s", main_out);
    }
    ck_assert_int_eq(setenv("DDPC_PROFILE", "all", 1), 0);
    ck_assert_int_eq(setenv("DDPC_SHM_SPIN_US", "2.5", 1), 0);
    ck_assert_int_eq(setenv("DDPC_TEST_CKPT_STOP_AFTER_BYTES", "4096", 1), 0);
    ck_assert_int_eq(setenv("DDPC_TEST_STREAM_DELAY_US", "300", 1), 0);
    ck_assert_int_eq(env_get()->fused_attn, 1);
    ck_assert_int_eq(setenv("DDPC_FUSED_ATTN", "0", 1), 0);
    struct ddpc_err e = { 0 };
    int rc = env_load(&e);
    unsetenv("DDPC_FUSED_ATTN");
    unsetenv("DDPC_PROFILE");
    unsetenv("DDPC_SHM_SPIN_US");
    unsetenv("DDPC_TEST_CKPT_STOP_AFTER_BYTES");
    unsetenv("DDPC_TEST_STREAM_DELAY_US");
    ck_assert_msg(rc == 0, "%s", e.msg);
    ck_assert_int_eq(env_get()->profile, DDPC_PROFILE_ALL);
    ck_assert_double_eq(env_get()->shm_spin_us, 2.5);
    ck_assert_int_eq(env_get()->test_ckpt_stop_after, 4096);
    ck_assert_int_eq(env_get()->test_cuda_probe_error, -1);
    ck_assert_double_eq(env_get()->test_stream_delay_us, 300);
    ck_assert_int_eq(env_get()->fused_attn, 0);
    ck_assert_int_eq(env_load(&e), 0);   /* back to the defaults */
    ck_assert_int_eq(env_get()->fused_attn, 1);
    ck_assert(env_get()->test_stream_delay_us < 0);
    ck_assert_int_eq(env_get()->profile, DDPC_PROFILE_OFF);
    ck_assert(env_get()->shm_spin_us < 0);
}
END_TEST

START_TEST(ddprt_gpu_without_cuda_fails_at_once)
{
    struct ddpc_job j;
    tiny_job(&j);
    j.accelerator = DDPC_ACCEL_GPU;
    double t0 = ddpc_now();
    ck_assert_int_eq(run_main(&j, NULL, NULL, NULL), 1);
    ck_assert_msg(strstr(main_err, "without CUDA"), "%s", main_err);
    ck_assert(ddpc_now() - t0 < 2.0);
}
END_TEST

/* A fake CUDA backend whose probe sees one GPU. */
static int probe_one(struct ddpc_device_info *info, struct ddpc_err *e)
{
    (void)e;
    memset(info, 0, sizeof *info);
    info->count = 1;
    snprintf(info->names[0], sizeof info->names[0], "Fake GPU");
    return 0;
}

static int probe_none(struct ddpc_device_info *info, struct ddpc_err *e)
{
    (void)e;
    memset(info, 0, sizeof *info);
    return 0;
}

START_TEST(ddprt_missing_gpu_named)
{
    struct ddpc_job j;
    tiny_job(&j);
    j.accelerator = DDPC_ACCEL_GPU;
    struct ddpc_backend one = { "cuda", probe_one, NULL, NULL, NULL };
    ck_assert_int_eq(run_main(&j, &one, NULL, NULL), 1);
    ck_assert_msg(strstr(main_err, "GPU 1 not found") && strstr(main_err, "1 GPU is visible"),
                  "%s", main_err);
    /* auto with no GPU falls back to CPU workers, and says so (dry run) */
    j.accelerator = DDPC_ACCEL_AUTO;
    struct ddpc_backend none = { "cuda", probe_none, NULL, NULL, NULL };
    ck_assert_int_eq(run_main(&j, &none, "--dry-run", NULL), 0);
    ck_assert_msg(strstr(main_out, "accelerator auto: no GPU found, running 2 CPU worker "
                                   "processes"), "%s", main_out);
}
END_TEST

START_TEST(ddprt_multinode_cpu_refused)
{
    struct ddpc_job j;
    tiny_job(&j);
    j.launch.num_nodes = 2;
    ck_assert_int_eq(run_main(&j, NULL, NULL, NULL), 1);
    ck_assert_msg(strstr(main_err, "num_nodes") && strstr(main_err, "CPU"), "%s", main_err);
}
END_TEST

START_TEST(ddprt_bad_data_file_forks_nothing)
{
    struct ddpc_job j;
    tiny_job(&j);
    j.data.train.format = DDPC_DATA_IDX;
    j.data.train.inputs = "/nonexistent/train-images.gz";
    j.data.train.labels = "/nonexistent/train-labels.gz";
    ck_assert_int_eq(run_main(&j, NULL, NULL, NULL), 1);
    ck_assert_msg(strstr(main_err, "/nonexistent/train-"), "%s", main_err);
    ck_assert_msg(!strstr(main_err, "[rank"), "a worker ran: %s", main_err);
}
END_TEST

START_TEST(ddprt_trains_tiny_job)
{
    struct ddpc_job j;
    tiny_job(&j);
    int st = run_main(&j, NULL, NULL, NULL);
    ck_assert_msg(st == 0, "status %d\nstdout:\n%s\nstderr:\n%s", st, main_out, main_err);
    ck_assert_msg(!strstr(main_out, "[rank 1]"), "rank 1 printed:\n%s", main_out);
}
END_TEST

/* A worker-side failure (model input 9 != 8 data features) is reported with
 * the rank; max_restarts does not relaunch a data error, which would recur. */
START_TEST(ddprt_worker_failure_and_restarts)
{
    struct ddpc_job j;
    tiny_job(&j);
    j.model.layers[0] = 9;
    j.launch.max_restarts = 1;
    int st = run_main(&j, NULL, NULL, NULL);
    ck_assert_int_eq(st, 1);
    /* whichever rank fails first is reported; the other may be torn down
     * before it prints */
    ck_assert_msg(strstr(main_err, "] error: train data") && strstr(main_err, "ddpc: rank ") &&
                  strstr(main_err, "exited with status 12 (data error)") &&
                  strstr(main_err, "not restarting: a data error would recur"), "%s", main_err);
}
END_TEST

/* A stand-in for the CUDA backend: CPU ops, and "NCCL" communicators that
 * are shm regions mapped by the test before ddprt_main forks. Checks the GPU
 * plumbing: device indices, both purposes, and that the launcher hosts the
 * store the ranks bootstrap through (the fake passes a value from rank 0 to
 * the others through it, as NCCL's unique id goes). */
static struct comm_shm_region *fake_grad, *fake_sync;
static struct fake_calls {
    int ops_device[4];
    int grad_port[4];
    int sync_split[4];   /* rank-sync made by comm_split of the gradient comm */
    int world[4];
    int via_store[4];    /* rank 0's value came through the store */
} *fake_calls;

static int fake_probe2(struct ddpc_device_info *info, struct ddpc_err *e)
{
    (void)e;
    memset(info, 0, sizeof *info);
    info->count = 4;
    return 0;
}

static int fake_ops_init(struct ddpc_ops *ops, int device, struct ddpc_err *e)
{
    (void)device;
    return ops_cpu_init(ops, e);
}

static int fake_comm_init(struct ddpc_comm *c, const char *purpose, int rank, int world,
                          const char *master_addr, int master_port, const char *prefix,
                          double deadline, struct ddpc_err *e)
{
    if (rank >= 0 && rank < 4) {
        fake_calls->grad_port[rank] = master_port;
        fake_calls->world[rank] = world;
    }
    struct store_client sc;
    char key[64];
    snprintf(key, sizeof key, "%s/fake/%s/id", prefix, purpose);
    DDPC_TRY(store_client_connect(&sc, master_addr, master_port, deadline, e));
    int rc = 0;
    if (rank == 0) {
        rc = store_set(&sc, key, "id-0", 4, e);
    } else {
        void *v = NULL;
        size_t n = 0;
        rc = store_get(&sc, key, &v, &n, deadline, "rank 0's id", e);
        if (rc == 0 && n == 4 && memcmp(v, "id-0", 4) == 0 && rank < 4)
            fake_calls->via_store[rank] = 1;
        free(v);
    }
    store_client_close(&sc);
    if (rank == 0 && rc == 0)
        fake_calls->via_store[0] = 1;
    DDPC_TRY(rc);
    return comm_shm_attach(c, fake_grad, rank, purpose, e);
}

static int fake_comm_split(struct ddpc_comm *parent, struct ddpc_comm *c, const char *purpose,
                           double deadline, struct ddpc_err *e)
{
    (void)deadline;
    int rank = parent->rank;
    if (rank >= 0 && rank < 4 && strcmp(parent->purpose, "gradient") == 0)
        fake_calls->sync_split[rank] = 1;
    return comm_shm_attach(c, fake_sync, rank, purpose, e);
}

static int fake_ops_init_rec(struct ddpc_ops *ops, int device, struct ddpc_err *e)
{
    /* rank is not passed to ops_init: record by device */
    if (device >= 0 && device < 4)
        fake_calls->ops_device[device] = 1;
    return fake_ops_init(ops, device, e);
}

START_TEST(ddprt_gpu_path_with_fake_backend)
{
    struct ddpc_err e = { 0 };
    fake_calls = mmap(NULL, sizeof *fake_calls, PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(fake_calls, MAP_FAILED);
    memset(fake_calls, 0, sizeof *fake_calls);
    ck_assert_int_eq(comm_shm_create(&fake_grad, 2, 0, &e), 0);
    ck_assert_int_eq(comm_shm_create(&fake_sync, 2, 64, &e), 0);
    struct ddpc_job j;
    tiny_job(&j);
    j.accelerator = DDPC_ACCEL_GPU;
    j.devices[0] = 1;
    j.devices[1] = 3;
    j.launch.master_port = 31000;
    struct ddpc_backend fake = { "cuda", fake_probe2, fake_ops_init_rec, fake_comm_init,
                                 fake_comm_split };
    int st = run_main(&j, &fake, NULL, NULL);
    ck_assert_msg(st == 0, "status %d\n%s\n%s", st, main_out, main_err);
    ck_assert(fake_calls->ops_device[1] && fake_calls->ops_device[3]);
    ck_assert(!fake_calls->ops_device[0] && !fake_calls->ops_device[2]);
    /* one node, no --master: the store on an ephemeral port, the same on
     * every rank, and the ranks met through it */
    ck_assert_int_gt(fake_calls->grad_port[0], 0);
    for (int r = 0; r < 2; r++) {
        ck_assert_int_eq(fake_calls->grad_port[r], fake_calls->grad_port[0]);
        ck_assert_int_eq(fake_calls->via_store[r], 1);
        ck_assert_int_eq(fake_calls->sync_split[r], 1);   /* split, not a second init */
        ck_assert_int_eq(fake_calls->world[r], 2);
    }
    /* --master wins; fresh regions, since a run leaves its barrier counts */
    comm_shm_region_free(fake_grad);
    comm_shm_region_free(fake_sync);
    ck_assert_int_eq(comm_shm_create(&fake_grad, 2, 0, &e), 0);
    ck_assert_int_eq(comm_shm_create(&fake_sync, 2, 64, &e), 0);
    /* a port free a moment ago: the launcher binds it for the store */
    int port = 0;
    {
        struct store_host h;
        ck_assert_msg(store_host_start(&h, "127.0.0.1", 0, 0, &e) == 0, "%s", e.msg);
        port = h.port;
        store_host_stop(&h);
    }
    char master[40];
    snprintf(master, sizeof master, "127.0.0.1:%d", port);
    memset(fake_calls, 0, sizeof *fake_calls);
    st = run_main(&j, &fake, "--master", master);
    ck_assert_msg(st == 0, "status %d\n%s\n%s", st, main_out, main_err);
    for (int r = 0; r < 2; r++) {
        ck_assert_int_eq(fake_calls->grad_port[r], port);
        ck_assert_int_eq(fake_calls->via_store[r], 1);
    }
    /* the dry run names the devices */
    st = run_main(&j, &fake, "--dry-run", NULL);
    ck_assert_int_eq(st, 0);
    ck_assert_msg(strstr(main_out, "cuda:1") && strstr(main_out, "cuda:3"), "%s", main_out);
    /* one GPU: nothing to reduce, so no communicator at all */
    memset(fake_calls, 0, sizeof *fake_calls);
    j.n_devices = 1;
    j.devices[0] = 2;
    st = run_main(&j, &fake, NULL, NULL);
    ck_assert_msg(st == 0, "status %d\n%s\n%s", st, main_out, main_err);
    ck_assert(fake_calls->ops_device[2]);
    ck_assert_int_eq(fake_calls->world[0], 0);       /* comm_init never called */
    ck_assert_int_eq(fake_calls->sync_split[0], 0);  /* nor comm_split */
    comm_shm_region_free(fake_grad);
    comm_shm_region_free(fake_sync);
    munmap(fake_calls, sizeof *fake_calls);
}
END_TEST

/* Two nodes of two GPUs: node 1 runs global ranks 2 and 3. */
START_TEST(ddprt_multinode_plan)
{
    struct ddpc_job j;
    tiny_job(&j);
    j.accelerator = DDPC_ACCEL_GPU;
    j.launch.num_nodes = 2;
    struct ddpc_backend fake = { "cuda", fake_probe2, fake_ops_init, fake_comm_init,
                                 fake_comm_split };
    char *argv[] = { (char *)"--node-rank=1", NULL };
    int st = run_main(&j, &fake, "--dry-run", argv[0]);
    ck_assert_msg(st == 0, "%s", main_err);
    ck_assert_msg(strstr(main_out, "4 (2 nodes x 2)") && strstr(main_out, "rank 2 ") &&
                  strstr(main_out, "rank 3 ") && !strstr(main_out, "rank 0 "), "%s", main_out);
    ck_assert_int_eq(run_main(&j, &fake, "--dry-run", "--node-rank=2"), 1);
    ck_assert_msg(strstr(main_err, "--node-rank 2"), "%s", main_err);
}
END_TEST

/* ===== the real launch path under faults ===== */

/* Children of `parent`, from /proc (the workers of a launcher). */
static int children_of(pid_t parent, pid_t *out, int max)
{
    int n = 0;
    DIR *d = opendir("/proc");
    ck_assert_ptr_nonnull(d);
    struct dirent *de;
    while ((de = readdir(d)) && n < max) {
        char path[300], buf[512];
        if (de->d_name[0] < '0' || de->d_name[0] > '9')
            continue;
        snprintf(path, sizeof path, "/proc/%s/stat", de->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t len = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[len] = '\0';
        char *rp = strrchr(buf, ')');   /* comm may contain spaces */
        int ppid = 0;
        char state;
        if (rp && sscanf(rp + 1, " %c %d", &state, &ppid) == 2 && ppid == parent)
            out[n++] = (pid_t)atoi(de->d_name);
    }
    closedir(d);
    return n;
}

/* Starts ddprt_main on a job that trains for a while, in a child whose
 * stderr goes to a file; returns the child (the launcher). */
static pid_t start_long_job(char *err_path, int max_restarts)
{
    static struct ddpc_job j;
    tiny_job(&j);
    j.launch.max_restarts = max_restarts;
    j.epochs = 1000;
    j.data.train.samples = 4096;
    int fe = mkstemp(err_path);
    ck_assert_int_ge(fe, 0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    ck_assert_int_ne(pid, -1);
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 1);
        dup2(fe, 2);
        struct ddprt_program p = { .job = &j, .spec_path = "tiny.yaml", .spec_hash = "x",
                                   .ddpc_version = "test" };
        char *argv[] = { (char *)"job", NULL };
        _exit(ddprt_main(&p, 1, argv));
    }
    close(fe);
    return pid;
}

static pid_t wait_for_workers(pid_t launcher, pid_t *w, int n)
{
    for (int i = 0; i < 200; i++) {
        if (children_of(launcher, w, n) == n)
            return 0;
        usleep(10000);
    }
    ck_abort_msg("the launcher did not start %d workers", n);
    return -1;
}

static void assert_gone(const pid_t *w, int n)
{
    for (int i = 0; i < n; i++)
        ck_assert_msg(kill(w[i], 0) == -1 && errno == ESRCH, "worker %d is still there",
                      (int)w[i]);
}

START_TEST(job_worker_sigkill_is_reported)
{
    char err[] = "/tmp/ddprt_job_err_XXXXXX";
    pid_t launcher = start_long_job(err, 0);
    pid_t w[2];
    wait_for_workers(launcher, w, 2);
    usleep(300000);   /* well into training */
    ck_assert_int_eq(kill(w[1], SIGKILL), 0);
    int st;
    double t0 = ddpc_now();
    ck_assert_int_eq(waitpid(launcher, &st, 0), launcher);
    ck_assert_msg(ddpc_now() - t0 < 3.0, "teardown took %.2f s", ddpc_now() - t0);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1);
    slurp(err, main_err, sizeof main_err);
    unlink(err);
    /* /proc order does not say which rank w[1] is: either is named */
    ck_assert_msg((strstr(main_err, "ddpc: rank 1 (cpu worker 1) killed by signal 9") ||
                   strstr(main_err, "ddpc: rank 0 (cpu worker 0) killed by signal 9")),
                  "%s", main_err);
    assert_gone(w, 2);
}
END_TEST

START_TEST(job_sigint_stops_everything)
{
    char err[] = "/tmp/ddprt_job_err_XXXXXX";
    pid_t launcher = start_long_job(err, 0);
    pid_t w[2];
    wait_for_workers(launcher, w, 2);
    usleep(200000);
    ck_assert_int_eq(kill(launcher, SIGINT), 0);
    int st;
    ck_assert_int_eq(waitpid(launcher, &st, 0), launcher);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 130, "wait status 0x%x", st);
    slurp(err, main_err, sizeof main_err);
    unlink(err);
    ck_assert_msg(strstr(main_err, "interrupted by SIGINT"), "%s", main_err);
    assert_gone(w, 2);
}
END_TEST

/* A crash with max_restarts 1: the launcher starts fresh workers; a second
 * crash is final. */
START_TEST(job_restarts_after_a_crash)
{
    char err[] = "/tmp/ddprt_job_err_XXXXXX";
    pid_t launcher = start_long_job(err, 1);
    pid_t w[2], w2[2];
    wait_for_workers(launcher, w, 2);
    usleep(200000);
    ck_assert_int_eq(kill(w[0], SIGKILL), 0);
    /* wait for a new pair */
    int found = 0;
    for (int i = 0; i < 300 && !found; i++) {
        usleep(10000);
        if (children_of(launcher, w2, 2) == 2 && w2[0] != w[0] && w2[0] != w[1] &&
            w2[1] != w[0] && w2[1] != w[1])
            found = 1;
    }
    ck_assert_msg(found, "no restart");
    usleep(200000);
    ck_assert_int_eq(kill(w2[1], SIGKILL), 0);
    int st;
    ck_assert_int_eq(waitpid(launcher, &st, 0), launcher);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1);
    slurp(err, main_err, sizeof main_err);
    unlink(err);
    ck_assert_msg(strstr(main_err, "restarting (1 of 1) from scratch") &&
                  strstr(main_err, "killed by signal 9"), "%s", main_err);
    assert_gone(w2, 2);
}
END_TEST

Suite *comm_shm_suite(void)
{
    Suite *s = suite_create("comm_shm");
    TCase *t = tcase_create("collectives");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, all_reduce_sizes_2_and_3_ranks);
    tcase_add_test(t, all_reduce_larger_than_slot);
    tcase_add_test(t, all_reduce_bitwise_across_runs);
    tcase_add_test(t, all_reduce_single_rank_and_empty);
    tcase_add_test(t, broadcast_from_every_root);
    tcase_add_test(t, barrier_waits_for_the_last_rank);
    tcase_add_test(t, create_rejects_bad_world);
    tcase_add_test(t, zero_copy_buckets_2_and_3_ranks);
    tcase_add_test(t, zero_copy_too_large_and_same_as_copy);
    tcase_add_test(t, zero_copy_large_chunks);
    tcase_add_test(t, zero_copy_deadline_mismatch_and_misuse);
    tcase_add_test(t, shared_buffer_is_one_copy);
    suite_add_tcase(s, t);

    TCase *f = tcase_create("failures");
    tcase_set_timeout(f, 30);
    tcase_add_test(f, deadline_names_the_missing_rank);
    tcase_add_test(f, abort_wakes_the_others);
    tcase_add_test(f, dead_peer_is_noticed);
    tcase_add_test(f, mismatched_calls_are_reported);
    suite_add_tcase(s, f);

    TCase *l = tcase_create("launch");
    tcase_set_timeout(l, 30);
    tcase_add_test(l, exit_codes_are_distinct);
    tcase_add_test(l, launch_all_ok);
    tcase_add_test(l, launch_worker_killed);
    tcase_add_test(l, launch_worker_fails);
    tcase_add_test(l, launch_peer_names_the_failed_rank_only);
    tcase_add_test(l, launch_last_line_cut_says_so);
    tcase_add_test(l, err_cut_says_so);
    tcase_add_test(l, launch_timeout_reports_the_slow_rank);
    tcase_add_test(l, launch_sigterm_stops_everything);
    tcase_add_test(l, launch_killed_launcher_leaves_no_worker);
    suite_add_tcase(s, l);

    TCase *m = tcase_create("ddprt");
    tcase_set_timeout(m, 60);
    tcase_add_test(m, ddprt_dry_run_prints_everything);
    tcase_add_test(m, ddprt_env_checked);
    tcase_add_test(m, ddprt_flags);
    tcase_add_test(m, ddprt_gpu_without_cuda_fails_at_once);
    tcase_add_test(m, ddprt_missing_gpu_named);
    tcase_add_test(m, ddprt_multinode_cpu_refused);
    tcase_add_test(m, ddprt_bad_data_file_forks_nothing);
    tcase_add_test(m, ddprt_trains_tiny_job);
    tcase_add_test(m, ddprt_worker_failure_and_restarts);
    tcase_add_test(m, ddprt_gpu_path_with_fake_backend);
    tcase_add_test(m, ddprt_multinode_plan);
    tcase_add_test(m, job_worker_sigkill_is_reported);
    tcase_add_test(m, job_sigint_stops_everything);
    tcase_add_test(m, job_restarts_after_a_crash);
    suite_add_tcase(s, m);
    return s;
}
