/* allreduce.c - all-reduce bandwidth of the shared-memory communicator,
 * reported like nccl-tests (time, algbw, busbw, wrong elements), next to
 * single-thread memcpy bandwidth measured in the same program.
 *
 *   make bench
 *   build/bench/allreduce [world] [max_bytes] [min_bytes]
 *       defaults: 2 ranks, 256 MiB, 1 KiB; sizes grow x4
 *
 * Forks `world` ranks over one comm_shm region whose slots hold the largest
 * size, and for each size times average all-reduces two ways:
 *   copy:      comm_all_reduce of private buffers (copy in, reduce, copy out;
 *              the path of metrics and of a backend without grad_buffer);
 *   zero-copy: start + wait on the grad_buffer (the training path: backward
 *              writes into the slot, the optimizer reads the shared result).
 * Each time is rank 0's wall time over enough iterations to last ~0.2 s,
 * after a barrier and a warm-up. Every element of both results is checked
 * against the rank-ordered sum. busbw = algbw * 2 (W - 1) / W, the
 * nccl-tests convention, so numbers compare across world sizes.
 *
 * memcpy: one thread copies `size` bytes between two private buffers
 * (touched first); bandwidth counts bytes read + written (2 * size / t),
 * the figure a reduction's memory traffic compares with. The last column is
 * zero-copy busbw / memcpy bandwidth at the same size.
 * Never part of the library; exits non-zero when any element is wrong.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include "comm.h"
#include "comm_shm.h"
#include "units.h"

#define MAX_SIZES 32
#define TARGET_S  0.2

struct bench_out {
    double copy_s[MAX_SIZES], zc_s[MAX_SIZES];   /* per size, rank 0 */
    long   wrong[MAX_SIZES][64];                 /* per size, per rank */
    int    failed;
    char   msg[600];
};

static float value(int rank, size_t j)
{
    return (float)((j * 7 + (size_t)rank * 13) % 1024) * 0.25f - 100.0f;
}

static long count_wrong(const float *x, size_t n, int world)
{
    long wrong = 0;
    for (size_t j = 0; j < n; j++) {
        float s = value(0, j);
        for (int q = 1; q < world; q++)
            s += value(q, j);
        s /= (float)world;
        if (x[j] != s)
            wrong++;
    }
    return wrong;
}

/* Iterations for ~TARGET_S at an assumed 5 GB/s, at least 3. */
static int iters_for(size_t bytes)
{
    double it = TARGET_S * 5e9 / (double)(bytes + 4096);
    return it < 3 ? 3 : it > 20000 ? 20000 : (int)it;
}

static int bench_rank(struct comm_shm_region *r, int rank, size_t min_floats,
                      size_t max_floats, struct bench_out *out)
{
    struct ddpc_comm c;
    struct ddpc_err e = { 0 };
    float *send = NULL, *recv = NULL, *zs = NULL, *zr = NULL;
    if (comm_shm_attach(&c, r, rank, "gradient", &e) < 0)
        goto fail;
    send = malloc(max_floats * sizeof(float));
    recv = malloc(max_floats * sizeof(float));
    if (!send || !recv) {
        snprintf(out->msg, sizeof out->msg, "rank %d: out of memory", rank);
        out->failed = 1;
        return 1;
    }
    if (c.grad_buffer(&c, max_floats, &zs, &zr, &e) < 0)
        goto fail;
    if (!zs) {
        snprintf(out->msg, sizeof out->msg, "rank %d: no grad buffer of %zu floats", rank,
                 max_floats);
        out->failed = 1;
        return 1;
    }
    for (size_t j = 0; j < max_floats; j++)
        send[j] = zs[j] = value(rank, j);
    memset(recv, 0, max_floats * sizeof(float));
    int k = 0;
    for (size_t n = min_floats; n <= max_floats && k < MAX_SIZES; n *= 4, k++) {
        int iters = iters_for(n * sizeof(float));
        /* copy path */
        if (comm_all_reduce(&c, send, recv, n, DDPC_REDUCE_AVG, 0, &e) < 0 ||
            c.barrier(&c, 0, &e) < 0)
            goto fail;
        double t0 = ddpc_now();
        for (int i = 0; i < iters; i++)
            if (comm_all_reduce(&c, send, recv, n, DDPC_REDUCE_AVG, 0, &e) < 0)
                goto fail;
        if (rank == 0)
            out->copy_s[k] = (ddpc_now() - t0) / iters;
        out->wrong[k][rank] = count_wrong(recv, n, c.world);
        /* zero-copy path: the inputs stay in the slots, so start + wait
         * back to back is the whole operation */
        if (c.barrier(&c, 0, &e) < 0 ||
            c.all_reduce_start(&c, 0, zs, zr, n, DDPC_REDUCE_AVG, 0, &e) < 0 ||
            c.all_reduce_wait(&c, 0, 0, &e) < 0 || c.barrier(&c, 0, &e) < 0)
            goto fail;
        t0 = ddpc_now();
        for (int i = 0; i < iters; i++)
            if (c.all_reduce_start(&c, 0, zs, zr, n, DDPC_REDUCE_AVG, 0, &e) < 0 ||
                c.all_reduce_wait(&c, 0, 0, &e) < 0)
                goto fail;
        if (rank == 0)
            out->zc_s[k] = (ddpc_now() - t0) / iters;
        out->wrong[k][rank] += count_wrong(zr, n, c.world);
        /* nobody rewrites the result while a peer still checks it */
        if (c.barrier(&c, 0, &e) < 0)
            goto fail;
    }
    free(send);
    free(recv);
    c.destroy(&c);
    return 0;
fail:
    snprintf(out->msg, sizeof out->msg, "rank %d: %s", rank, e.msg);
    out->failed = 1;
    free(send);
    free(recv);
    return 1;
}

/* Single-thread memcpy bandwidth for `bytes`, counting read + written. */
static double memcpy_gbs(size_t bytes)
{
    char *a = malloc(bytes), *b = malloc(bytes);
    if (!a || !b) {
        free(a);
        free(b);
        return 0;
    }
    memset(a, 1, bytes);
    memset(b, 2, bytes);
    int iters = iters_for(bytes) * 2;
    memcpy(b, a, bytes);
    double t0 = ddpc_now();
    for (int i = 0; i < iters; i++) {
        memcpy(i & 1 ? a : b, i & 1 ? b : a, bytes);
        __asm__ __volatile__("" ::: "memory");   /* keep every copy */
    }
    double t = (ddpc_now() - t0) / iters;
    free(a);
    free(b);
    return 2.0 * (double)bytes / t / 1e9;
}

int main(int argc, char **argv)
{
    /* decimal arguments, read as ./job reads its flags (units.h) */
    int64_t a[3] = { 2, (int64_t)256 << 20, 1024 };   /* world, max_bytes, min_bytes */
    if ((argc > 1 && units_flag_int(argv[1], 1, 64, &a[0]) < 0) ||
        (argc > 2 && units_flag_int(argv[2], 4, (int64_t)1 << 40, &a[1]) < 0) ||
        (argc > 3 && units_flag_int(argv[3], 4, (int64_t)1 << 40, &a[2]) < 0) || a[1] < a[2]) {
        fprintf(stderr, "usage: %s [world 1..64] [max_bytes] [min_bytes]\n", argv[0]);
        return 2;
    }
    int world = (int)a[0];
    size_t max_bytes = (size_t)a[1], min_bytes = (size_t)a[2];
    size_t min_floats = min_bytes / sizeof(float);
    size_t max_floats = max_bytes / sizeof(float);
    struct comm_shm_region *r = NULL;
    struct ddpc_err e = { 0 };
    if (comm_shm_create(&r, world, max_floats, &e) < 0) {
        fprintf(stderr, "bench: %s\n", e.msg);
        return 1;
    }
    struct bench_out *out = mmap(NULL, sizeof *out, PROT_READ | PROT_WRITE,
                                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (out == MAP_FAILED) {
        perror("bench: mmap");
        return 1;
    }
    memset(out, 0, sizeof *out);
    fflush(stdout);
    pid_t pids[64];
    for (int i = 0; i < world; i++) {
        pids[i] = fork();
        if (pids[i] == -1) {
            perror("bench: fork");
            return 1;
        }
        if (pids[i] == 0)
            _exit(bench_rank(r, i, min_floats, max_floats, out));
    }
    int bad = 0;
    for (int i = 0; i < world; i++) {
        int st;
        if (waitpid(pids[i], &st, 0) == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            bad = 1;
    }
    comm_shm_region_free(r);
    if (bad || out->failed) {
        fprintf(stderr, "bench: %s\n", out->msg[0] ? out->msg : "a rank failed");
        return 1;
    }
    printf("# comm_shm all-reduce (avg, float32), %d ranks; busbw = algbw * 2(W-1)/W\n", world);
    printf("# memcpy: one thread, private buffers, GB/s counting bytes read + written\n");
    printf("# %10s %10s | %9s %8s %8s | %9s %8s %8s | %8s %6s %6s\n", "size(B)", "count",
           "copy(us)", "algbw", "busbw", "zc(us)", "algbw", "busbw", "memcpy", "zc/mc", "#wrong");
    long total_wrong = 0;
    int k = 0;
    for (size_t n = min_floats; n <= max_floats && k < MAX_SIZES; n *= 4, k++) {
        long wrong = 0;
        for (int i = 0; i < world; i++)
            wrong += out->wrong[k][i];
        total_wrong += wrong;
        double bytes = (double)(n * sizeof(float));
        double ca = bytes / out->copy_s[k] / 1e9, za = bytes / out->zc_s[k] / 1e9;
        double f = 2.0 * (world - 1) / world;
        double mc = memcpy_gbs(n * sizeof(float));
        printf("  %10zu %10zu | %9.1f %8.2f %8.2f | %9.1f %8.2f %8.2f | %8.2f %6.2f %6ld\n",
               n * sizeof(float), n, out->copy_s[k] * 1e6, ca, ca * f, out->zc_s[k] * 1e6, za,
               za * f, mc, mc > 0 ? za * f / mc : 0.0, wrong);
        fflush(stdout);
    }
    printf("# Out of bounds values : %ld %s\n", total_wrong, total_wrong ? "FAILED" : "OK");
    return total_wrong ? 1 : 0;
}
