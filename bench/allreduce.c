/* allreduce.c - all-reduce bandwidth of the shared-memory communicator,
 * reported like nccl-tests (algbw, busbw, wrong elements).
 *
 *   make && cc -O2 -D_GNU_SOURCE -Ispec -Iruntime bench/allreduce.c \
 *       build/lib/libddprt.a -lopenblas -lz -lm -lpthread -o build/bench_allreduce
 *   build/bench_allreduce [world] [max_bytes] [iters] [slot_bytes]
 *       defaults: 2 ranks, 64 MiB, 20 iterations, the library's default slot
 *
 * Forks `world` ranks over one comm_shm region, sweeps sizes from 4 bytes to
 * max_bytes by x4, times `iters` average all-reduces per size after warm-up
 * (rank 0's wall time from a barrier to the last result), and checks every
 * element against the rank-ordered sum. busbw = algbw * 2 (W - 1) / W, the
 * nccl-tests convention, so numbers compare across world sizes.
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

struct bench_out {
    double seconds[64];     /* per size, rank 0 */
    long   wrong[64][64];   /* per size, per rank */
    int    failed;
    char   msg[600];
};

static float value(int rank, size_t j)
{
    return (float)((j * 7 + (size_t)rank * 13) % 1024) * 0.25f - 100.0f;
}

static int bench_rank(struct comm_shm_region *r, int rank, size_t max_floats, int iters,
                      struct bench_out *out)
{
    struct ddpc_comm c;
    struct ddpc_err e = { 0 };
    if (comm_shm_attach(&c, r, rank, "gradient", &e) < 0)
        goto fail;
    float *send = malloc(max_floats * sizeof(float));
    float *recv = malloc(max_floats * sizeof(float));
    if (!send || !recv) {
        snprintf(out->msg, sizeof out->msg, "rank %d: out of memory", rank);
        out->failed = 1;
        return 1;
    }
    for (size_t j = 0; j < max_floats; j++)
        send[j] = value(rank, j);
    int k = 0;
    for (size_t n = 1; n <= max_floats; n *= 4, k++) {
        if (comm_all_reduce(&c, send, recv, n, DDPC_REDUCE_AVG, 0, &e) < 0)   /* warm-up */
            goto fail;
        if (c.barrier(&c, 0, &e) < 0)
            goto fail;
        double t0 = ddpc_now();
        for (int i = 0; i < iters; i++)
            if (comm_all_reduce(&c, send, recv, n, DDPC_REDUCE_AVG, 0, &e) < 0)
                goto fail;
        if (rank == 0)
            out->seconds[k] = (ddpc_now() - t0) / iters;
        long wrong = 0;
        for (size_t j = 0; j < n; j++) {
            float s = value(0, j);
            for (int q = 1; q < c.world; q++)
                s += value(q, j);
            s /= (float)c.world;
            if (recv[j] != s)
                wrong++;
        }
        out->wrong[k][rank] = wrong;
    }
    free(send);
    free(recv);
    c.destroy(&c);
    return 0;
fail:
    snprintf(out->msg, sizeof out->msg, "rank %d: %s", rank, e.msg);
    out->failed = 1;
    return 1;
}

int main(int argc, char **argv)
{
    int world = argc > 1 ? atoi(argv[1]) : 2;
    size_t max_bytes = argc > 2 ? strtoull(argv[2], NULL, 0) : (size_t)64 << 20;
    int iters = argc > 3 ? atoi(argv[3]) : 20;
    size_t slot_floats = argc > 4 ? strtoull(argv[4], NULL, 0) / sizeof(float) : 0;
    if (world < 1 || world > 64 || max_bytes < 4 || iters < 1) {
        fprintf(stderr, "usage: %s [world 1..64] [max_bytes] [iters]\n", argv[0]);
        return 2;
    }
    size_t max_floats = max_bytes / sizeof(float);
    struct comm_shm_region *r = NULL;
    struct ddpc_err e = { 0 };
    if (comm_shm_create(&r, world, slot_floats, &e) < 0) {
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
            _exit(bench_rank(r, i, max_floats, iters, out));
    }
    int bad = 0;
    for (int i = 0; i < world; i++) {
        int st;
        if (waitpid(pids[i], &st, 0) == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            bad = 1;
    }
    if (bad || out->failed) {
        fprintf(stderr, "bench: %s\n", out->msg[0] ? out->msg : "a rank failed");
        return 1;
    }
    printf("# comm_shm all-reduce (avg, float32), %d ranks, %d iterations per size\n", world,
           iters);
    printf("# %12s %12s %10s %10s %10s %8s\n", "size(B)", "count", "time(us)", "algbw(GB/s)",
           "busbw(GB/s)", "#wrong");
    long total_wrong = 0;
    int k = 0;
    for (size_t n = 1; n <= max_floats; n *= 4, k++) {
        long wrong = 0;
        for (int i = 0; i < world; i++)
            wrong += out->wrong[k][i];
        total_wrong += wrong;
        double t = out->seconds[k];
        double algbw = (double)(n * sizeof(float)) / t / 1e9;
        double busbw = algbw * 2.0 * (world - 1) / world;
        printf("  %12zu %12zu %10.1f %10.2f %10.2f %8ld\n", n * sizeof(float), n, t * 1e6,
               algbw, busbw, wrong);
    }
    printf("# Out of bounds values : %ld %s\n", total_wrong, total_wrong ? "FAILED" : "OK");
    comm_shm_region_free(r);
    return total_wrong ? 1 : 0;
}
