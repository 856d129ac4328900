/* test_gpu.c - the CUDA backend against the CPU backend, on a real GPU.
 *
 *   make gpu-test            (builds everything, then runs build/tests/test_gpu)
 *   DDPC_TEST_SEED=42 build/tests/test_gpu    (replay one seed)
 *   DDPC_TEST_PARTS=nccl2,overlap2 build/tests/test_gpu    (rerun some parts)
 *   DDPC_TEST_OUT=results.tsv build/tests/test_gpu   (one line per check, too)
 *   tests/gpu/README.md      (tests/gpu/stage.sh: the one call on a lent GPU machine)
 *
 * Owns: the GPU checks that the CPU-only Check runner cannot link. They run
 * as parts, each in a forked child in a process group of its own, killed
 * whole at its deadline, in this order (world 1 first: the most to learn,
 * and nothing NCCL may lack; world 4 last; the deadlines sum to 410 s):
 *   ops (80 s)      Every op of struct ddpc_ops, CUDA vs ops_cpu_init, on
 *      fresh random inputs (the seed is printed), with relative error
 *      bounds for fp32, and gemm with bf16 / fp16 inputs against the fp32
 *      CPU result; the optimizer step (SGD, Adam, AdamW) bit for bit, and
 *      scale exactly; GPT and CNN steps, fused attention.
 *   training (60 s) A small job trained by worker_run on cuda:0 (fp32, bf16,
 *      fp16 with dynamic loss scaling, tf32) against the same job on the CPU
 *      backend: steps, final train/test loss, test accuracy and parameters
 *      within bounds.
 *   init-timeout (20 s) An NCCL init whose peer never comes times out.
 *   e2e (60 s)      The same small spec built by build/bin/ddpc (DDPC_BUILD)
 *      with accelerator gpu and with accelerator cpu, on 2 GPUs (1 if that
 *      is all there is) and as many CPU workers: both jobs succeed and their
 *      final train_loss and test_accuracy agree within tolerance.
 *   nccl2, nccl4 (30 s, 40 s)  NCCL at world 2 and 4, one forked process
 *      per rank on cuda:(rank % GPUs): with fewer GPUs than ranks they share
 *      (NCCL >= 2.30, NCCL_MULTI_RANK_GPU_ENABLE=1, NCCL_MAX_CTAS=2).
 *      Seeded per-rank data, a host-computed expectation, wrong-element
 *      counts (nccl-tests style): out-of-place sum and in-place average
 *      overlapping on two tags, broadcast, the rank-sync communicator split
 *      from the gradient one (ncclCommSplit), its barrier, and a barrier
 *      deadline that must fire naming "rank-sync" and "barrier".
 *   overlap2, overlap4 (60 s each)  4 linear layers, fp32 and bf16, gradient
 *      accumulation and the rank-sync barrier; a bucket per tensor (every
 *      all-reduce starts while backward runs, DDPC_TEST_STREAM_DELAY_US
 *      making the compute stream late before each start; main sets it
 *      before anything reads the environment and every rank reports it)
 *      ends bit for bit where one bucket does, and within bounds of the CPU
 *      backend's run of the same job at the same world size.
 *   nccl-all (40 s) NCCL over every GPU, where there are more than 4.
 * A part whose world this machine cannot run (fewer GPUs than ranks and an
 * NCCL older than 2.30) is reported NOT RUN with the reason. A rank that
 * fails aborts its communicators, and its peers are killed 2 s later, so
 * no part waits out its deadline for a rank that is gone. Before the parts,
 * a child prints the CUDA runtime, driver, cuBLAS and NCCL versions, the SM
 * count and the compute mode.
 * This process never initialises CUDA: the probe, every rank and every part
 * runs in a forked child, so no parent holds a context while a part, or a
 * job a part starts, runs.
 *
 * Never pretends: without a GPU it prints "SKIP test_gpu: no GPU: <the
 * probe's reason>" and exits 0; where there is a GPU to test (a
 * /dev/nvidia<N> node, or DDPC_REQUIRE_GPU=1) but it cannot be, a failed
 * probe, a missing piece (build/bin/ddpc), or any mismatch, the exit status
 * is 1; 2 when everything that ran passed but some part could not run here.
 * DDPC_TEST_OUT=path appends "<kind> TAB <part> TAB <verdict> TAB <text>"
 * lines to path: probe, env, every check, every part, the summary last.
 * DDPC_TEST_FAKE_GPUS=N (tests only): where the probe finds no GPU, run
 * the parts as if it had found N; each fails at its first CUDA call. The
 * cuda suite checks this harness so (its order, NOT RUN, the results file).
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "attn.h"
#include "backend.h"
#include "comm_shm.h"
#include "data.h"
#include "devprobe.h"
#include "env.h"
#include "model.h"
#include "ops.h"
#include "ops_kernels.h"
#include "store.h"
#include "worker.h"

#define TOL_ELEM 2e-6   /* fp32 element-wise: a few ulps (device expf/erff/tanhf) */
#define TOL_SUM  1e-5   /* fp32 dot products / column sums: different summation order */

static int checks, failures;   /* of this process (a part's child, or main) */
static uint64_t rng_state;
static int g_gpus;            /* GPUs the probe saw; rank r runs on cuda:(r % g_gpus) */
static int g_share_ok;        /* NCCL >= 2.30: more ranks than GPUs may share them */
static const char *g_part = "main";   /* the part this process runs, for the results file */
static int g_results = -1;    /* DDPC_TEST_OUT, opened for appending by main; -1: none */

/* World `world` can run here: a GPU per rank, or ranks sharing them. */
static int world_ok(int world)
{
    return world <= g_gpus || g_share_ok;
}

/* In a rank's process, before its ops and communicators exist: more ranks
 * than GPUs share them, which NCCL >= 2.30 allows with
 * NCCL_MULTI_RANK_GPU_ENABLE=1 (main checks the version first); each such
 * rank gets at most 2 CTAs (channels), as NCCL's guide asks of ranks
 * sharing a GPU ("use NCCL_MAX_CTAS ... failing to do so will result in a
 * hang"), unless the caller set NCCL_MAX_CTAS itself. */
static int rank_env(int world)
{
    if (world > g_gpus && (setenv("NCCL_MULTI_RANK_GPU_ENABLE", "1", 1) != 0 ||
                           setenv("NCCL_MAX_CTAS", "2", 0) != 0)) {
        printf("FAIL setenv NCCL_MULTI_RANK_GPU_ENABLE / NCCL_MAX_CTAS: %s\n", strerror(errno));
        return -1;
    }
    return 0;
}

/* One line of the results file: "<kind>\t<part>\t<verdict>\t<text>", one
 * write(2) to an O_APPEND file, so the lines of forked parts and ranks never
 * interleave. Tabs and newlines inside text become spaces. */
static void result_line(const char *kind, const char *verdict, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void result_line(const char *kind, const char *verdict, const char *fmt, ...)
{
    if (g_results < 0)
        return;
    char text[900], line[1100];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    for (char *c = text; *c; c++)
        if (*c == '\t' || *c == '\n')
            *c = ' ';
    int n = snprintf(line, sizeof line, "%s\t%s\t%s\t%s\n", kind, g_part, verdict, text);
    if (n > (int)sizeof line - 1)
        n = (int)sizeof line - 1;
    if (write(g_results, line, (size_t)n) != n)
        perror("test_gpu: writing the results file (DDPC_TEST_OUT)");
}

static void check(int ok, const char *what, double err, double tol)
{
    checks++;
    if (!ok)
        failures++;
    printf("%s %-40s max rel err %.3g (bound %.3g)\n", ok ? "PASS" : "FAIL", what, err, tol);
    fflush(stdout);
    result_line("check", ok ? "PASS" : "FAIL", "%s: err %.3g bound %.3g", what, err, tol);
}

/* A check whose verdict is a sentence: "PASS|FAIL <text>" */
static void check_msg(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check_msg(int ok, const char *fmt, ...)
{
    char text[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    checks++;
    if (!ok)
        failures++;
    printf("%s %s\n", ok ? "PASS" : "FAIL", text);
    fflush(stdout);
    result_line("check", ok ? "PASS" : "FAIL", "%s", text);
}

static void fail_err(const char *what, const struct ddpc_err *e)
{
    check_msg(0, "%s: %s (%s:%d)", what, e->msg, e->file ? e->file : "?", e->line);
}

static float frand(void)   /* uniform in [-1, 1) */
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) * (1.0 / (1ull << 24))) * 2.0f - 1.0f;
}

static float *rand_vec(size_t n, float scale)
{
    float *v = malloc(n * sizeof *v + 4);
    for (size_t i = 0; i < n; i++)
        v[i] = frand() * scale;
    return v;
}

/* max |got - want| / max |want| (norm-wise: a tiny want next to a large
 * one does not make an ulp look like a failure) */
static double rel_err(const float *got, const float *want, size_t n)
{
    double d = 0.0, m = 1e-30;
    for (size_t i = 0; i < n; i++) {
        double x = fabs((double)got[i] - want[i]);
        if (x > d || isnan(x))
            d = isnan(x) ? INFINITY : x;
        if (fabs(want[i]) > m)
            m = fabs(want[i]);
    }
    return d / m;
}

/* ===== ops: CUDA vs CPU ===== */

struct pair {
    struct ddpc_ops cpu, gpu;
};

/* A host array copied to a new device buffer; NULL (and a FAIL) on error. */
static float *up(struct pair *p, const void *host, size_t bytes)
{
    struct ddpc_err e = {0};
    void *d = NULL;
    if (p->gpu.alloc(&p->gpu, &d, bytes, &e) < 0 || p->gpu.to_device(&p->gpu, d, host, bytes, &e) < 0) {
        fail_err("upload", &e);
        return NULL;
    }
    return d;
}

static float *down(struct pair *p, const float *dev, size_t n)
{
    struct ddpc_err e = {0};
    float *h = malloc(n * sizeof *h + 4);
    if (p->gpu.to_host(&p->gpu, h, dev, n * sizeof *h, &e) < 0) {
        fail_err("download", &e);
        memset(h, 0, n * sizeof *h);
    }
    return h;
}

static void compare_dev(struct pair *p, const char *what, const float *dev, const float *want,
                        size_t n, double tol)
{
    float *got = down(p, dev, n);
    double err = rel_err(got, want, n);
    check(err <= tol, what, err, tol);
    free(got);
}

/* gemm_precision 0 fp32, 1 bf16, 2 fp16 (enum ddpc_precision): inputs rounded
 * to 8 / 11 significant bits, fp32 accumulation; bounds are a few units of
 * that rounding, relative to the largest element of C. */
static const double gemm_tol[3] = {TOL_SUM, 3e-2, 5e-3};
static const char *const prec_name[3] = {"fp32", "bf16", "fp16"};

static void test_gemm(struct pair *p)
{
    const int m = 37, n = 53, k = 129, pad = 3;
    for (int t = 0; t < 12; t++) {         /* 3 precisions x 4 transpose pairs */
        int prec = t / 4, ta = (t >> 1) & 1, tb = t & 1;
        p->gpu.gemm_precision = prec;
        int lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
        size_t na = (size_t)(ta ? k : m) * lda, nb = (size_t)(tb ? n : k) * ldb,
               nc = (size_t)m * ldc;
        float *A = rand_vec(na, 1), *B = rand_vec(nb, 1), *C = rand_vec(nc, 1);
        float *dA = up(p, A, na * 4), *dB = up(p, B, nb * 4), *dC = up(p, C, nc * 4);
        struct ddpc_err e = {0};
        char what[64];
        snprintf(what, sizeof what, "gemm %s trans_a=%d trans_b=%d", prec_name[prec], ta, tb);
        if (!dA || !dB || !dC ||
            p->cpu.gemm(&p->cpu, ta, tb, m, n, k, 0.7f, A, lda, B, ldb, 0.3f, C, ldc, &e) < 0 ||
            p->gpu.gemm(&p->gpu, ta, tb, m, n, k, 0.7f, dA, lda, dB, ldb, 0.3f, dC, ldc, &e) < 0)
            fail_err(what, &e);
        else
            compare_dev(p, what, dC, C, nc, gemm_tol[prec]);
        p->gpu.release(&p->gpu, dA);
        p->gpu.release(&p->gpu, dB);
        p->gpu.release(&p->gpu, dC);
        free(A);
        free(B);
        free(C);
    }
    p->gpu.gemm_precision = 0;
}

/* gemm_batched in the three precisions. A is attention's kind of operand:
 * per-head [T, hs] views of one [T, 3C] buffer (row stride 3C, batch
 * stride hs, so the views overlap), used as is or transposed; B is a dense
 * per-head matrix of the shape that fits, stored as is or transposed,
 * with padded rows. */
static void test_gemm_batched(struct pair *p)
{
    const int T = 45, H = 3, hs = 16, C3 = 3 * H * hs, N = 21, pad = 2;
    for (int t = 0; t < 12; t++) {         /* 3 precisions x 4 transpose pairs */
        int prec = t / 4, ta = (t >> 1) & 1, tb = t & 1;
        p->gpu.gemm_precision = prec;
        int m = ta ? hs : T, k = ta ? T : hs, n = N;
        int ldb = (tb ? k : n) + pad;                     /* stored B: [k, n] or [n, k] */
        long long sb = (long long)(tb ? n : k) * ldb, sc = (long long)m * n;
        size_t na = (size_t)T * C3, nb = (size_t)H * sb, nc = (size_t)H * sc;
        float *A = rand_vec(na, 1), *B = rand_vec(nb, 1), *Cm = rand_vec(nc, 1);
        float *dA = up(p, A, na * 4), *dB = up(p, B, nb * 4), *dC = up(p, Cm, nc * 4);
        struct ddpc_err e = {0};
        char what[80];
        snprintf(what, sizeof what, "gemm_batched %s trans_a=%d trans_b=%d", prec_name[prec],
                 ta, tb);
        if (!dA || !dB || !dC ||
            p->cpu.gemm_batched(&p->cpu, ta, tb, m, n, k, 0.25f, A, C3, hs, B, ldb, sb, 0.5f,
                                Cm, n, sc, H, &e) < 0 ||
            p->gpu.gemm_batched(&p->gpu, ta, tb, m, n, k, 0.25f, dA, C3, hs, dB, ldb, sb, 0.5f,
                                dC, n, sc, H, &e) < 0)
            fail_err(what, &e);
        else
            compare_dev(p, what, dC, Cm, nc, gemm_tol[prec]);
        p->gpu.release(&p->gpu, dA);
        p->gpu.release(&p->gpu, dB);
        p->gpu.release(&p->gpu, dC);
        free(A);
        free(B);
        free(Cm);
    }
    p->gpu.gemm_precision = 0;
}

/* The bf16 copy of the weights (set_weights): a gemm reading them matches
 * the CPU, and after the weights change (to_device into them, an optimizer
 * step) the next gemm reads the new values, not the stale copy. Also TF32
 * (matmul_tf32) stays within TF32's rounding of the fp32 result. */
static void test_weight_copy(struct pair *p)
{
    const int m = 33, n = 40, k = 64;
    const size_t nw = (size_t)n * k + 7;        /* W [n, k] inside a bigger buffer */
    float *W = rand_vec(nw, 1), *X = rand_vec((size_t)m * k, 1), *C = calloc((size_t)m * n, 4);
    float *G = rand_vec(nw, 1);
    float *dW = up(p, W, nw * 4), *dX = up(p, X, (size_t)m * k * 4);
    float *dC = up(p, C, (size_t)m * n * 4), *dG = up(p, G, nw * 4);
    struct ddpc_err e = {0};
    if (!dW || !dX || !dC || !dG || p->gpu.set_weights(&p->gpu, dW, nw, &e) < 0) {
        fail_err("weight copy: setup", &e);
        return;
    }
    p->gpu.gemm_precision = DDPC_PRECISION_BF16;
    for (int round = 0; round < 3; round++) {
        if (round == 1) {                    /* new weights through to_device */
            for (size_t i = 0; i < nw; i++)
                W[i] = -W[i] * 0.5f;
            if (p->gpu.to_device(&p->gpu, dW, W, nw * 4, &e) < 0)
                fail_err("weight copy: to_device", &e);
        } else if (round == 2) {             /* new weights through optim_step */
            struct ddpc_optim_step st = {0};
            st.type = DDPC_K_SGD;
            st.lr = 0.5f;
            st.grad_scale = 1.0f;
            st.step = 1;
            if (p->cpu.optim_step(&p->cpu, &st, W, G, NULL, NULL, nw, &e) < 0 ||
                p->gpu.optim_step(&p->gpu, &st, dW, dG, NULL, NULL, nw, &e) < 0)
                fail_err("weight copy: optim_step", &e);
        }
        char what[64];
        snprintf(what, sizeof what, "gemm bf16 from the weights' copy, round %d", round);
        /* C = X W^T, W at offset 7 of the weight buffer */
        if (p->cpu.gemm(&p->cpu, 0, 1, m, n, k, 1.0f, X, k, W + 7, k, 0.0f, C, n, &e) < 0 ||
            p->gpu.gemm(&p->gpu, 0, 1, m, n, k, 1.0f, dX, k, dW + 7, k, 0.0f, dC, n, &e) < 0)
            fail_err(what, &e);
        else
            compare_dev(p, what, dC, C, (size_t)m * n, gemm_tol[DDPC_PRECISION_BF16]);
    }
    p->gpu.gemm_precision = DDPC_PRECISION_FP32;
    p->gpu.matmul_tf32 = 1;
    if (p->cpu.gemm(&p->cpu, 0, 1, m, n, k, 1.0f, X, k, W + 7, k, 0.0f, C, n, &e) < 0 ||
        p->gpu.gemm(&p->gpu, 0, 1, m, n, k, 1.0f, dX, k, dW + 7, k, 0.0f, dC, n, &e) < 0)
        fail_err("gemm tf32", &e);
    else
        compare_dev(p, "gemm fp32 with matmul_tf32 (TF32 rounding)", dC, C, (size_t)m * n, 5e-3);
    p->gpu.matmul_tf32 = 0;
    (void)p->gpu.set_weights(&p->gpu, NULL, 0, &e);
    p->gpu.release(&p->gpu, dW);
    p->gpu.release(&p->gpu, dX);
    p->gpu.release(&p->gpu, dC);
    p->gpu.release(&p->gpu, dG);
    free(W);
    free(X);
    free(C);
    free(G);
}

static void test_act(struct pair *p)
{
    static const char *names[] = {"relu", "gelu", "tanh", "sigmoid", "identity"};
    const int rows = 33, cols = 70;
    size_t n = (size_t)rows * cols;
    for (int act = 0; act <= DDPC_K_IDENTITY; act++) {
        float *z = rand_vec(n, 3), *bias = rand_vec(cols, 1), *a = calloc(n, 4);
        float *dz = up(p, z, n * 4), *db = up(p, bias, cols * 4), *da = up(p, a, n * 4);
        struct ddpc_err e = {0};
        char what[64];
        snprintf(what, sizeof what, "bias_act_forward %s", names[act]);
        if (!dz || !db || !da ||
            p->cpu.bias_act_forward(&p->cpu, z, bias, a, rows, cols, act, &e) < 0 ||
            p->gpu.bias_act_forward(&p->gpu, dz, db, da, rows, cols, act, &e) < 0) {
            fail_err(what, &e);
        } else {
            compare_dev(p, what, dz, z, n, TOL_ELEM);
            compare_dev(p, what, da, a, n, TOL_ELEM);
        }
        /* backward on the same z, fresh upstream gradient */
        float *g = rand_vec(n, 1), *gz = calloc(n, 4);
        float *dg = up(p, g, n * 4), *dgz = up(p, gz, n * 4);
        snprintf(what, sizeof what, "act_backward %s", names[act]);
        if (!dg || !dgz || p->cpu.act_backward(&p->cpu, z, g, gz, n, act, &e) < 0 ||
            p->gpu.act_backward(&p->gpu, dz, dg, dgz, n, act, &e) < 0)
            fail_err(what, &e);
        else
            compare_dev(p, what, dgz, gz, n, TOL_ELEM);
        p->gpu.release(&p->gpu, dz);
        p->gpu.release(&p->gpu, db);
        p->gpu.release(&p->gpu, da);
        p->gpu.release(&p->gpu, dg);
        p->gpu.release(&p->gpu, dgz);
        free(z);
        free(bias);
        free(a);
        free(g);
        free(gz);
    }
}

static void test_bias_grad(struct pair *p)
{
    const int rows = 129, cols = 300;
    for (int b = 0; b < 2; b++) {
        float beta = (float)b;
        float *dz = rand_vec((size_t)rows * cols, 1), *db = rand_vec(cols, 1);
        float *ddz = up(p, dz, (size_t)rows * cols * 4), *ddb = up(p, db, cols * 4);
        struct ddpc_err e = {0};
        char what[64];
        snprintf(what, sizeof what, "bias_grad beta=%d", b);
        if (!ddz || !ddb || p->cpu.bias_grad(&p->cpu, dz, db, rows, cols, beta, &e) < 0 ||
            p->gpu.bias_grad(&p->gpu, ddz, ddb, rows, cols, beta, &e) < 0)
            fail_err(what, &e);
        else
            compare_dev(p, what, ddb, db, cols, TOL_SUM);
        p->gpu.release(&p->gpu, ddz);
        p->gpu.release(&p->gpu, ddb);
        free(dz);
        free(db);
    }
}

/* cols 10: a thread per row (k_loss_rows); 2000: cross-entropy takes a
 * block per row (k_xent_wide, a GPT's vocabulary) */
static void test_loss_cols(struct pair *p, int cols)
{
    const int rows = 100;
    size_t n = (size_t)rows * cols;
    int32_t labels[100];
    for (int r = 0; r < rows; r++)
        labels[r] = (int32_t)((frand() + 1.0f) * 0.5f * cols) % cols;
    for (int type = 0; type < 2; type++) {       /* 0 cross_entropy, 1 mse */
        char name[64];
        snprintf(name, sizeof name, "%s, %d columns", type ? "loss mse" : "loss cross_entropy",
                 cols);
        float *x = rand_vec(n, 4), *t = rand_vec(n, 1), *dx = calloc(n, 4);
        float *gx = up(p, x, n * 4), *gt = up(p, t, n * 4), *gdx = up(p, dx, n * 4);
        int32_t *gl = (int32_t *)up(p, labels, sizeof labels);
        /* the device accumulator starts at 1, 2, 0: the loss adds into it */
        double ac[DDPC_LOSS_ACC] = {1, 2, 0}, ag[DDPC_LOSS_ACC] = {0, 0, 0};
        double *gacc = (double *)up(p, ac, sizeof ac);
        struct ddpc_err e = {0};
        if (!gx || !gt || !gdx || !gl || !gacc ||
            p->cpu.loss(&p->cpu, type, x, type ? NULL : labels, type ? t : NULL, dx, rows, cols,
                        1.0f / rows, ac, &e) < 0 ||
            p->gpu.loss(&p->gpu, type, gx, type ? NULL : gl, type ? gt : NULL, gdx, rows, cols,
                        1.0f / rows, gacc, &e) < 0 ||
            p->gpu.to_host(&p->gpu, ag, gacc, sizeof ag, &e) < 0) {
            fail_err(name, &e);
        } else {
            double lc = ac[0] - 1, lg = ag[0] - 1;
            long long cc = (long long)ac[1] - 2, cg = (long long)ag[1] - 2;
            char what[128];
            snprintf(what, sizeof what, "%s dlogits", name);
            /* the block per row sums exp in another order than the CPU */
            compare_dev(p, what, gdx, dx, n, cols > 100 && !type ? TOL_SUM : TOL_ELEM);
            double err = fabs(lg - lc) / fabs(lc);
            snprintf(what, sizeof what, "%s sum", name);
            check(err <= 1e-6, what, err, 1e-6);
            snprintf(what, sizeof what, "%s correct %lld == %lld", name, (long long)cg,
                     (long long)cc);
            check(cg == cc, what, (double)llabs(cg - cc), 0);
            check(ag[2] == 0, "loss: no bad labels counted", ag[2], 0);
        }
        p->gpu.release(&p->gpu, gacc);
        p->gpu.release(&p->gpu, gx);
        p->gpu.release(&p->gpu, gt);
        p->gpu.release(&p->gpu, gdx);
        p->gpu.release(&p->gpu, gl);
        free(x);
        free(t);
        free(dx);
    }
}

/* A label outside [0, cols) is counted in acc[2], which the caller
 * reads (worker.c: a data error); the CPU fails at once instead. */
static void test_loss_bad_label(struct pair *p, int cols)
{
    int32_t bad[2] = {1, cols};
    float *x = rand_vec(2 * cols, 1);
    double a0[DDPC_LOSS_ACC] = {0, 0, 0};
    float *gx = up(p, x, 2 * cols * 4), *gdx = up(p, x, 2 * cols * 4);
    int32_t *gl = (int32_t *)up(p, bad, sizeof bad);
    double *gacc = (double *)up(p, a0, sizeof a0);
    struct ddpc_err e = {0};
    int rc = gx && gdx && gl && gacc
                 ? p->gpu.loss(&p->gpu, 0, gx, gl, NULL, gdx, 2, cols, 0.5f, gacc, &e) : -1;
    if (rc == 0)
        rc = p->gpu.to_host(&p->gpu, a0, gacc, sizeof a0, &e);
    char what[96];
    snprintf(what, sizeof what, "loss, %d columns: label out of range counted in acc[2]", cols);
    check(rc == 0 && a0[2] == 1, what, a0[2], 1);
    p->gpu.release(&p->gpu, gacc);
    p->gpu.release(&p->gpu, gx);
    p->gpu.release(&p->gpu, gdx);
    p->gpu.release(&p->gpu, gl);
    free(x);
}

static void test_loss(struct pair *p)
{
    for (int cols = 10; cols <= 2000; cols += 1990) {
        test_loss_cols(p, cols);
        test_loss_bad_label(p, cols);
    }
}

static void test_sumsq_scale(struct pair *p)
{
    size_t n = 1000007;
    float *x = rand_vec(n, 2);
    float *gx = up(p, x, n * 4);
    double sc = 0, sg = 0;
    struct ddpc_err e = {0};
    if (!gx || p->cpu.sumsq(&p->cpu, x, n, &sc, &e) < 0 || p->gpu.sumsq(&p->gpu, gx, n, &sg, &e) < 0) {
        fail_err("sumsq", &e);
    } else {
        double err = fabs(sg - sc) / sc;
        check(err <= 1e-9, "sumsq (double accumulation)", err, 1e-9);
    }
    if (!gx || p->cpu.scale(&p->cpu, x, n, 0.37f, &e) < 0 ||
        p->gpu.scale(&p->gpu, gx, n, 0.37f, &e) < 0)
        fail_err("scale", &e);
    else
        compare_dev(p, "scale (one multiply: exact)", gx, x, n, 0.0);
    p->gpu.release(&p->gpu, gx);
    free(x);
}

/* Bit-for-bit: the number of elements whose float bits differ. For the
 * element-wise ops whose arithmetic is only +, -, *, / and sqrt
 * (ops_kernels.h), compiled without FMA contraction and with the CPU's
 * FTZ/DAZ (Makefile: CUDA_EXACT_MATH). */
static void compare_dev_exact(struct pair *p, const char *what, const float *dev,
                              const float *want, size_t n)
{
    float *got = down(p, dev, n);
    size_t differ = 0;
    for (size_t i = 0; i < n; i++)
        differ += memcmp(&got[i], &want[i], sizeof got[i]) != 0;
    check_msg(!differ, "%-40s %zu of %zu elements differ in their bits (bound 0)", what,
              differ, n);
    free(got);
}

static void test_optim(struct pair *p)
{
    static const struct { int type; float mu; int nesterov; float wd; const char *name; } cases[] = {
        {DDPC_K_SGD, 0.0f, 0, 0.0f, "sgd"},
        {DDPC_K_SGD, 0.9f, 0, 1e-4f, "sgd momentum"},
        {DDPC_K_SGD, 0.9f, 1, 1e-4f, "sgd nesterov"},
        {DDPC_K_ADAM, 0.0f, 0, 1e-4f, "adam"},
        {DDPC_K_ADAMW, 0.0f, 0, 1e-2f, "adamw"},
    };
    const size_t n = 10007;
    const size_t n_cases = sizeof cases / sizeof cases[0];
    /* each case twice: Adam constants derived in float by the backend (0 in
     * the fields), then precomputed in double as optim.c does */
    for (size_t cc = 0; cc < 2 * n_cases; cc++) {
        size_t c = cc % n_cases;
        int host_consts = cc >= n_cases;
        if (host_consts && cases[c].type == DDPC_K_SGD)
            continue;             /* sgd has no such constants */
        float *w = rand_vec(n, 1), *m = calloc(n, 4), *v = calloc(n, 4);
        float *gw = up(p, w, n * 4), *gm = up(p, m, n * 4), *gv = up(p, v, n * 4);
        int ok = gw && gm && gv;
        struct ddpc_err e = {0};
        for (long step = 1; ok && step <= 3; step++) {
            float *g = rand_vec(n, 1);
            float *gg = up(p, g, n * 4);
            struct ddpc_optim_step s = {0};
            s.type = cases[c].type;
            s.lr = 1e-2f;
            s.momentum = cases[c].mu;
            s.nesterov = cases[c].nesterov;
            s.weight_decay = cases[c].wd;
            s.beta1 = 0.9f;
            s.beta2 = 0.999f;
            s.eps = 1e-8f;
            s.bias_correction1 = 1.0f - powf(0.9f, (float)step);
            s.bias_correction2 = 1.0f - powf(0.999f, (float)step);
            s.grad_scale = step == 2 ? 0.5f : 1.0f;
            s.step = step;
            if (host_consts) {
                double bc1 = 1.0 - pow(0.9, (double)step), bc2 = 1.0 - pow(0.999, (double)step);
                s.one_minus_beta1 = (float)(1.0 - 0.9);
                s.one_minus_beta2 = (float)(1.0 - 0.999);
                s.step_size = (float)(1e-2 / bc1);
                s.bc2_sqrt = (float)sqrt(bc2);
                s.decay = (float)(1.0 - 1e-2 * (double)cases[c].wd);
            }
            float *mm = cases[c].type == DDPC_K_SGD && cases[c].mu == 0.0f ? NULL : m;
            float *gmm = mm ? gm : NULL;
            if (!gg || p->cpu.optim_step(&p->cpu, &s, w, g, mm, v, n, &e) < 0 ||
                p->gpu.optim_step(&p->gpu, &s, gw, gg, gmm, gv, n, &e) < 0) {
                fail_err(cases[c].name, &e);
                ok = 0;
            }
            p->gpu.release(&p->gpu, gg);
            free(g);
        }
        if (ok) {
            const char *how = cases[c].type == DDPC_K_SGD ? ""
                              : host_consts                ? " (host consts)"
                                                           : " (derived)";
            char what[96];
            snprintf(what, sizeof what, "optim_step %s%s: params, 3 steps", cases[c].name, how);
            compare_dev_exact(p, what, gw, w, n);
            if (cases[c].type != DDPC_K_SGD || cases[c].mu != 0.0f) {
                snprintf(what, sizeof what, "optim_step %s%s: first moment", cases[c].name, how);
                compare_dev_exact(p, what, gm, m, n);
            }
            if (cases[c].type != DDPC_K_SGD) {
                snprintf(what, sizeof what, "optim_step %s%s: second moment", cases[c].name, how);
                compare_dev_exact(p, what, gv, v, n);
            }
        }
        p->gpu.release(&p->gpu, gw);
        p->gpu.release(&p->gpu, gm);
        p->gpu.release(&p->gpu, gv);
        free(w);
        free(m);
        free(v);
    }
}

/* A small GPT (issue 15: embedding, causal attention through gemm_batched
 * and the softmax kernels, tanh GELU, bias-less layer norms, the tied
 * lm_head, attention and residual dropout) trained one step on ops o from
 * nanoGPT's init (seed 5); logits [B*T, V], every gradient and the loss come
 * back to the host. */
static int model_step_on(struct ddpc_ops *o, const struct ddpc_job *j, const float *x,
                         const int32_t *y, int B, int in_per, int labels_per, int V,
                         float *logits, float *grads, float *state, double *loss,
                         struct ddpc_err *e)
{
    static struct ddpc_model m;
    int R = B * labels_per;
    size_t nx = (size_t)B * in_per;
    float *dx = NULL;
    int32_t *dy = NULL;
    double *acc = NULL, hacc[DDPC_LOSS_ACC] = {0, 0, 0};
    int rc = model_init(&m, o, j, B, e);
    if (rc == 0)
        rc = model_init_params(&m, DDPC_INIT_PYTORCH, 5, e);
    if (rc == 0)
        rc = o->alloc(o, (void **)&dx, nx * sizeof *dx, e);
    if (rc == 0)
        rc = o->alloc(o, (void **)&dy, (size_t)R * sizeof *dy, e);
    if (rc == 0)
        rc = o->alloc(o, (void **)&acc, sizeof hacc, e);
    if (rc == 0)
        rc = o->to_device(o, dx, x, nx * sizeof *x, e);
    if (rc == 0)
        rc = o->to_device(o, dy, y, (size_t)R * sizeof *y, e);
    if (rc == 0)
        rc = o->to_device(o, acc, hacc, sizeof hacc, e);
    model_set_mode(&m, 1, 99);
    if (rc == 0)
        rc = model_forward(&m, dx, B, e);
    if (rc == 0)
        rc = o->loss(o, DDPC_LOSS_CROSS_ENTROPY, m.logits, dy, NULL, m.dbuf[0], R, V,
                     1.0f / (float)R, acc, e);
    if (rc == 0)
        rc = o->to_host(o, logits, m.logits, (size_t)R * V * sizeof *logits, e);
    if (rc == 0)
        rc = model_backward(&m, dx, m.dbuf[0], B, 0, NULL, NULL, e);
    if (rc == 0)
        rc = o->to_host(o, grads, m.grads, m.n_params * sizeof *grads, e);
    if (rc == 0 && state && m.n_state)
        rc = o->to_host(o, state, m.state, m.n_state * sizeof *state, e);
    if (rc == 0)
        rc = o->to_host(o, hacc, acc, sizeof hacc, e);
    *loss = hacc[0] / R;
    if (dx)
        o->release(o, dx);
    if (dy)
        o->release(o, dy);
    if (acc)
        o->release(o, acc);
    model_free(&m);
    return rc;
}

/* One training step of a GPT (B sequences of T tokens) on o. */
static int gpt_step_on(struct ddpc_ops *o, const struct ddpc_job *j, const float *x,
                       const int32_t *y, int B, float *logits, float *grads, double *loss,
                       struct ddpc_err *e)
{
    int T = j->model.block_size;
    return model_step_on(o, j, x, y, B, T, T, j->model.vocab_size, logits, grads, NULL, loss,
                         e);
}

/* "name suffix", for one check's line at a time. */
static const char *what(const char *name, const char *suffix)
{
    static char buf[160];
    snprintf(buf, sizeof buf, "%s %s", name, suffix);
    return buf;
}

/* A GPT of n_embd / n_head / block_size T / dropout, one step, CUDA vs
 * CPU: fp32, then bf16 (name says which attention the GPU's bf16 runs). */
static void gpt_case(struct pair *p, const char *name, int n_embd, int n_head, int T_,
                     double dropout)
{
    static struct ddpc_job j;
    memset(&j, 0, sizeof j);
    j.model.type = DDPC_MODEL_GPT;
    j.model.vocab_size = 64;
    j.model.block_size = T_;
    j.model.n_layer = 2;
    j.model.n_head = n_head;
    j.model.n_embd = n_embd;
    j.model.dropout = dropout;
    j.model.bias = 1;
    j.loss = DDPC_LOSS_CROSS_ENTROPY;
    enum { B = 3 };
    int T = j.model.block_size, V = j.model.vocab_size, R = B * T;
    static struct ddpc_net net;
    char why[256];
    int bad;
    if (layers_build(&j, NULL, &net, &bad, why, sizeof why) < 0) {
        check(0, why, 1, 0);
        return;
    }
    float *x = malloc((size_t)R * sizeof *x);
    int32_t *y = malloc((size_t)R * sizeof *y);
    for (int i = 0; i < R; i++) {
        x[i] = (float)(((uint32_t)i * 2654435761u >> 7) % (uint32_t)V);
        y[i] = (int32_t)(((uint32_t)i * 40503u >> 3) % (uint32_t)V);
    }
    size_t nl = (size_t)R * V, np = net.n_params;
    float *lc = malloc(nl * 4), *lg = malloc(nl * 4), *gc = malloc(np * 4), *gg = malloc(np * 4);
    float *gg2 = malloc(np * 4);
    double loss_c = 0, loss_g = 0, loss_g2 = 0;
    struct ddpc_err e = {0};
    if (gpt_step_on(&p->cpu, &j, x, y, B, lc, gc, &loss_c, &e) < 0) {
        fail_err(what(name, "CPU step"), &e);
        goto out;
    }
    /* fp32 both sides: the GPU sums in other orders (cuBLAS), through two
     * blocks of products and norms. bf16 products (every gemm and
     * attention's gemm_batched or fused kernels) against the CPU's fp32:
     * within bf16's rounding of the operands (8 bits). The CPU backend with
     * its products' operands rounded to bf16 (round to nearest even, fp32
     * sums, as cuBLAS's CUBLAS_COMPUTE_32F) is off by loss 8e-7, logits
     * 2.2e-3, gradients 5.4e-3: bounds 4x that. Both: deterministic on the
     * GPU too (docs/DESIGN.md: no float atomics). */
    static const struct {
        int prec;
        const char *tag;
        double loss, logits, grads;
    } runs[] = { { DDPC_PRECISION_FP32, "", 1e-5, 1e-4, 1e-4 },
                 { DDPC_PRECISION_BF16, "bf16 ", 1e-3, 1e-2, 2e-2 } };
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
        char label[48];
        p->gpu.gemm_precision = runs[k].prec;
        snprintf(label, sizeof label, "%sstep", runs[k].tag);
        if (gpt_step_on(&p->gpu, &j, x, y, B, lg, gg, &loss_g, &e) < 0 ||
            gpt_step_on(&p->gpu, &j, x, y, B, lg, gg2, &loss_g2, &e) < 0) {
            fail_err(what(name, label), &e);
            continue;
        }
        double err = fabs(loss_g - loss_c) / fabs(loss_c);
        snprintf(label, sizeof label, "%sloss", runs[k].tag);
        check(err <= runs[k].loss, what(name, label), err, runs[k].loss);
        err = rel_err(lg, lc, nl);
        snprintf(label, sizeof label, "%slogits", runs[k].tag);
        check(err <= runs[k].logits, what(name, label), err, runs[k].logits);
        err = rel_err(gg, gc, np);
        snprintf(label, sizeof label, "%sgradients (all parameters)", runs[k].tag);
        check(err <= runs[k].grads, what(name, label), err, runs[k].grads);
        snprintf(label, sizeof label, "%stwo GPU steps give the same gradient bytes",
                 runs[k].tag);
        check(memcmp(gg, gg2, np * 4) == 0 && loss_g == loss_g2, what(name, label), 0, 0);
    }
out:
    p->gpu.gemm_precision = DDPC_PRECISION_FP32;
    free(x);
    free(y);
    free(lc);
    free(lg);
    free(gc);
    free(gg);
    free(gg2);
}

static void test_gpt(struct pair *p)
{
    /* T 80: more than one causal block of the CPU's attention; head size
     * 16 and dropout: attention by gemm_batched and the row kernels */
    gpt_case(p, "gpt", 32, 2, 80, 0.1);
    /* head sizes 64 and 32, no dropout: bf16 runs the fused attention
     * (ops_cuda_attn.cuh); T 150: three tiles, the last partial */
    gpt_case(p, "gpt fused", 128, 2, 150, 0.0);
    gpt_case(p, "gpt fused 32", 64, 2, 150, 0.0);
    gpt_case(p, "gpt fused dropout", 128, 2, 150, 0.1);
}

/* Fused attention alone (bf16, head size hs, dropout drop;
 * ops_cuda_attn.cuh) against the CPU's unfused fp32 on the same bf16-valued
 * inputs: y and dqkv within the bounds tests/test_cuda_attn.c sets for the
 * same kernels on the CPU stand-in (4e-3 and 6e-3 of each part's scale;
 * measured there up to 3.4e-3: P and dS rounded to bf16 for their
 * products), here of the largest element of each (y 5e-3, dqkv 6e-3);
 * then dqkv accumulated (acc) onto itself is exactly twice; the same bytes
 * twice. */
static void attn_fused_case(struct pair *p, int hs, float drop)
{
    enum { B = 2, T = 200, H = 3 };
    int C = H * hs;
    char name[64];
    snprintf(name, sizeof name, "attention fused, head size %d, dropout %.1f", hs,
             (double)drop);
    size_t R = (size_t)B * T, n3 = R * 3 * C, n1 = R * C, natt = (size_t)B * H * T * T;
    float *qkv = rand_vec(n3, 2.0f), *dy = rand_vec(n1, 1.0f);
    for (size_t i = 0; i < n3; i++)                  /* bf16 values: no input rounding left */
        qkv[i] = ddpc_k_bf16_round(qkv[i]);
    for (size_t i = 0; i < n1; i++)
        dy[i] = ddpc_k_bf16_round(dy[i]);
    int64_t kept, scr, kept_gpu, scr_gpu;
    attn_floats(&p->cpu, T, C, H, drop, &kept, &scr);
    float *y = calloc(n1, 4), *dqkv = calloc(n3, 4), *att = calloc(natt, 4);
    float *scratch = calloc((size_t)B * (size_t)scr, 4);
    struct ddpc_attn at = { .B = B, .T = T, .C = C, .heads = H, .p = drop, .training = 1,
                            .seed = 41 };
    struct ddpc_err e = {0};
    p->gpu.gemm_precision = DDPC_PRECISION_BF16;
    if (!p->gpu.attn_fused_fits || !p->gpu.attn_fused_fits(&p->gpu, T, C, H)) {
        check(0, what(name, "taken (bf16)"), 0, 0);
        goto out;
    }
    /* the fused path's own sizes, as the model allocates them: [B, H, T] */
    attn_floats(&p->gpu, T, C, H, drop, &kept_gpu, &scr_gpu);
    check(kept_gpu == (int64_t)H * T && scr_gpu == (int64_t)H * T,
          what(name, "keeps and scratches heads*T floats per sample"), 0, 0);
    float *d_qkv = up(p, qkv, n3 * 4), *d_dy = up(p, dy, n1 * 4), *d_y = up(p, y, n1 * 4);
    float *d_dqkv = up(p, dqkv, n3 * 4), *d_att = up(p, att, (size_t)B * kept_gpu * 4);
    float *d_scr = up(p, scratch, (size_t)B * scr_gpu * 4);
    if (!d_qkv || !d_dy || !d_y || !d_dqkv || !d_att || !d_scr ||
        attn_forward(&p->cpu, &at, qkv, att, y, scratch, &e) < 0 ||
        attn_backward(&p->cpu, &at, qkv, att, y, dy, dqkv, 0, scratch, &e) < 0 ||
        attn_forward(&p->gpu, &at, d_qkv, d_att, d_y, d_scr, &e) < 0 ||
        attn_backward(&p->gpu, &at, d_qkv, d_att, d_y, d_dy, d_dqkv, 0, d_scr, &e) < 0) {
        fail_err(name, &e);
    } else {
        compare_dev(p, what(name, "y"), d_y, y, n1, 5e-3);
        compare_dev(p, what(name, "dqkv"), d_dqkv, dqkv, n3, 6e-3);
        float *g1 = down(p, d_dqkv, n3);
        if (attn_backward(&p->gpu, &at, d_qkv, d_att, d_y, d_dy, d_dqkv, 1, d_scr, &e) < 0) {
            fail_err(what(name, "acc"), &e);
        } else {
            float *g2 = down(p, d_dqkv, n3);
            size_t bad = 0;
            for (size_t i = 0; i < n3; i++)
                bad += g2[i] != 2.0f * g1[i];
            check(bad == 0, what(name, "acc adds, the same bytes again"), (double)bad, 0);
            free(g2);
        }
        free(g1);
    }
    void *bufs[] = { d_qkv, d_dy, d_y, d_dqkv, d_att, d_scr };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i])
            p->gpu.release(&p->gpu, bufs[i]);
    /* DDPC_FUSED_ATTN=0 (env.h, through the worker): the unfused path and
     * its buffers */
    p->gpu.fused_attn = 0;
    attn_floats(&p->gpu, T, C, H, 0.0f, &kept_gpu, &scr_gpu);
    check(!p->gpu.attn_fused_fits(&p->gpu, T, C, H) && kept_gpu == (int64_t)H * T * T,
          what(name, "fused_attn 0 unfuses"), 0, 0);
    p->gpu.fused_attn = 1;
out:
    p->gpu.gemm_precision = DDPC_PRECISION_FP32;
    free(qkv);
    free(dy);
    free(y);
    free(dqkv);
    free(att);
    free(scratch);
}

static void test_attn_fused(struct pair *p)
{
    attn_fused_case(p, 64, 0.0f);
    attn_fused_case(p, 32, 0.0f);
    attn_fused_case(p, 64, 0.2f);   /* the CPU's mask, drawn in the kernels */
}

/* One training step of a small CNN, CUDA vs CPU: the GPU's im2col
 * convolutions, batch norm (statistics and backward sums by channel
 * segments, ops_cuda_rows.cuh), ReLU fused into max pooling's backward,
 * global average pooling, dropout; logits, every gradient and the running
 * statistics within fp32 rounding, and the same bytes twice on the GPU. */
static void test_cnn(struct pair *p)
{
    static struct ddpc_job j;
    memset(&j, 0, sizeof j);
    j.model.type = DDPC_MODEL_SEQUENTIAL;
    j.model.n_input = 3;
    j.model.input[0] = 3;
    j.model.input[1] = 12;
    j.model.input[2] = 12;
    static const struct ddpc_layer_item items[] = {
        { .type = DDPC_LAYER_CONV2D, .out = 8, .kernel_size = 3, .stride = 1, .padding = 1,
          .bias = 1 },
        { .type = DDPC_LAYER_BATCHNORM2D, .momentum = 0.1, .eps = 1e-5 },
        { .type = DDPC_LAYER_RELU },
        { .type = DDPC_LAYER_MAXPOOL2D, .kernel_size = 2 },
        { .type = DDPC_LAYER_CONV2D, .out = 16, .kernel_size = 3, .stride = 1, .padding = 1,
          .bias = 1 },
        { .type = DDPC_LAYER_RELU },
        { .type = DDPC_LAYER_MAXPOOL2D, .kernel_size = 2 },
        { .type = DDPC_LAYER_CONV2D, .out = 16, .kernel_size = 3, .stride = 1, .padding = 1,
          .bias = 1 },
        { .type = DDPC_LAYER_RELU },
        { .type = DDPC_LAYER_ADAPTIVEAVGPOOL2D, .output_size = 1 },
        { .type = DDPC_LAYER_FLATTEN },
        { .type = DDPC_LAYER_DROPOUT, .p = 0.25 },
        { .type = DDPC_LAYER_LINEAR, .out = 10, .bias = 1 },
    };
    j.model.n_items = (int)(sizeof items / sizeof items[0]);
    memcpy(j.model.items, items, sizeof items);
    j.loss = DDPC_LOSS_CROSS_ENTROPY;
    enum { B = 40, V = 10 };               /* 40 samples: more than the 16 segments */
    const int in_per = 3 * 12 * 12;
    static struct ddpc_net net;
    char why[256];
    int bad;
    if (layers_build(&j, NULL, &net, &bad, why, sizeof why) < 0) {
        check(0, why, 1, 0);
        return;
    }
    size_t nx = (size_t)B * in_per, nl = (size_t)B * V, np = net.n_params;
    size_t ns = 2 * 8 + 1;                 /* one batch norm: mean, var, count */
    float *x = malloc(nx * sizeof *x);
    int32_t y[B];
    for (size_t i = 0; i < nx; i++)
        x[i] = frand();
    for (int i = 0; i < B; i++)
        y[i] = (int32_t)(((uint32_t)i * 40503u >> 3) % V);
    float *lc = malloc(nl * 4), *lg = malloc(nl * 4), *gc = malloc(np * 4), *gg = malloc(np * 4);
    float *gg2 = malloc(np * 4), *sc = calloc(ns, 4), *sg = calloc(ns, 4);
    double loss_c = 0, loss_g = 0, loss_g2 = 0;
    struct ddpc_err e = {0};
    if (model_step_on(&p->cpu, &j, x, y, B, in_per, 1, V, lc, gc, sc, &loss_c, &e) < 0 ||
        model_step_on(&p->gpu, &j, x, y, B, in_per, 1, V, lg, gg, sg, &loss_g, &e) < 0 ||
        model_step_on(&p->gpu, &j, x, y, B, in_per, 1, V, lg, gg2, NULL, &loss_g2, &e) < 0) {
        fail_err("cnn step", &e);
    } else {
        double err = fabs(loss_g - loss_c) / fabs(loss_c);
        check(err <= 1e-5, "cnn loss", err, 1e-5);
        err = rel_err(lg, lc, nl);
        check(err <= 1e-4, "cnn logits", err, 1e-4);
        err = rel_err(gg, gc, np);
        check(err <= 1e-4, "cnn gradients (all parameters)", err, 1e-4);
        err = rel_err(sg, sc, ns);
        check(err <= 1e-5, "cnn batch norm running statistics", err, 1e-5);
        check(memcmp(gg, gg2, np * 4) == 0 && loss_g == loss_g2,
              "cnn: two GPU steps give the same gradient bytes", 0, 0);
    }
    free(x);
    free(lc);
    free(lg);
    free(gc);
    free(gg);
    free(gg2);
    free(sc);
    free(sg);
}

static void run_ops_tests(const struct ddpc_backend *b)
{
    struct pair p;
    struct ddpc_err e = {0};
    if (ops_cpu_init(&p.cpu, &e) < 0) {
        fail_err("ops_cpu_init", &e);
        return;
    }
    if (b->ops_init(&p.gpu, 0, &e) < 0) {
        fail_err("cuda ops_init(device 0)", &e);
        if (p.gpu.destroy)
            p.gpu.destroy(&p.gpu);
        return;
    }
    test_gemm(&p);
    test_gemm_batched(&p);
    test_weight_copy(&p);
    test_act(&p);
    test_bias_grad(&p);
    test_loss(&p);
    test_sumsq_scale(&p);
    test_optim(&p);
    test_attn_fused(&p);
    test_gpt(&p);
    test_cnn(&p);
    p.gpu.destroy(&p.gpu);
    p.cpu.destroy(&p.cpu);
}

/* ===== training: the same job on the GPU and on the CPU ===== */

/* A small job the CPU trains in a fraction of a second: synthetic 10-class
 * data, MLP 32-64-64-10 (gelu), AdamW with warmup and cosine decay, grad
 * clipping, 2 epochs of 32 steps; it ends mid-training (loss ~1.5, accuracy
 * ~0.9), where differences show, not at a loss near 0 where all agree. */
static void train_job(struct ddpc_job *j, int precision)
{
    memset(j, 0, sizeof *j);
    j->version = 1;
    j->name = "gpu-vs-cpu";
    j->seed = 4321;
    j->epochs = 2;
    j->learning_rate = 1e-3;
    j->batch_size = 64;
    j->grad_accumulation = 1;
    j->limit_train_fraction = 1.0;
    j->bucket_cap_mb = 25;
    j->grad_clip_norm = 5.0;
    j->precision = (enum ddpc_precision)precision;
    j->model.type = DDPC_MODEL_MLP;
    j->model.n_layers = 4;
    j->model.layers[0] = 32;
    j->model.layers[1] = 64;
    j->model.layers[2] = 64;
    j->model.layers[3] = 10;
    j->model.activation = DDPC_ACT_GELU;
    j->loss = DDPC_LOSS_CROSS_ENTROPY;
    j->data.shuffle = 1;
    j->data.has_test = 1;
    j->optimizer.type = DDPC_OPTIM_ADAMW;
    j->optimizer.beta1 = 0.9;
    j->optimizer.beta2 = 0.999;
    j->optimizer.eps = 1e-8;
    j->optimizer.weight_decay = 1e-2;
    j->schedule.warmup_steps = 10;
    j->schedule.warmup_start_factor = 0.1;
    j->schedule.decay = DDPC_DECAY_COSINE;
    j->schedule.gamma = 0.1;
}

static int train_once(struct ddpc_ops *o, const struct ddpc_job *j,
                      const struct ddpc_dataset *tr, const struct ddpc_dataset *te,
                      struct ddpc_worker_result *res, const char *what)
{
    struct ddpc_err e = {0};
    struct ddpc_worker_args a = { .job = j, .rank = 0, .world = 1, .device = 0, .ops = o,
                                  .train = tr, .test = te, .out = NULL,
                                  .t_launch = ddpc_now() };
    memset(res, 0, sizeof *res);
    res->want_params = 1;
    if (worker_run(&a, res, &e) < 0) {
        fail_err(what, &e);
        return -1;
    }
    return 0;
}

/* Bounds on the final metrics, GPU vs CPU, per gemm precision: fp32 differs
 * only by cuBLAS's summation order and the device's expf/erff (a few ulps per
 * step, grown over 64 steps); bf16/fp16 round every gemm input to 8/11
 * significant bits. Calibrated on the CPU with a gemm that sums in double
 * (fp32) or rounds its inputs to bf16/fp16 first: the observed differences
 * (loss 1e-8 / 2.5e-5 / 8e-6, parameters 2e-6 / 1.4e-3 / 7e-4) sit 10x or
 * more inside these bounds. */
static const double train_loss_tol[3] = {1e-4, 5e-3, 1e-3};   /* relative */
static const double train_acc_tol[3]  = {0.01, 0.03, 0.02};   /* absolute */
static const double train_par_tol[3]  = {1e-3, 3e-2, 1e-2};   /* norm-wise relative */

static void test_training(const struct ddpc_backend *b)
{
    struct ddpc_data_source src = { .format = DDPC_DATA_SYNTHETIC, .samples = 2048,
                                    .features = 32, .classes = 10, .seed = 11 };
    struct ddpc_dataset tr, te;
    struct ddpc_err e = {0};
    memset(&tr, 0, sizeof tr);
    memset(&te, 0, sizeof te);
    if (data_load(&src, &tr, &e) < 0) {
        fail_err("training: synthetic train set", &e);
        return;
    }
    src.samples = 512;
    src.seed = 12;
    if (data_load(&src, &te, &e) < 0) {
        fail_err("training: synthetic test set", &e);
        data_free(&tr);
        return;
    }
    struct ddpc_job j;
    train_job(&j, DDPC_PRECISION_FP32);
    struct ddpc_ops cpu;
    struct ddpc_worker_result rc;
    int cpu_ok = 0;
    if (ops_cpu_init(&cpu, &e) < 0) {
        fail_err("training: ops_cpu_init", &e);
    } else {
        cpu_ok = train_once(&cpu, &j, &tr, &te, &rc, "training on cpu") == 0;
        cpu.destroy(&cpu);
    }
    if (!cpu_ok) {
        data_free(&tr);
        data_free(&te);
        return;
    }
    printf("     training on cpu : %lld steps, train_loss %.6f test_loss %.6f "
           "test_accuracy %.4f\n", (long long)rc.steps, rc.train_loss, rc.test_loss,
           rc.test_accuracy);
    for (int v = 0; v < 4; v++) {
        /* v 3: fp32 with matmul_precision high (TF32), bounded like bf16 */
        int prec = v < 3 ? v : DDPC_PRECISION_FP32, tol = v < 3 ? v : DDPC_PRECISION_BF16;
        const char *pname = v < 3 ? prec_name[prec] : "fp32 tf32";
        train_job(&j, prec);
        j.matmul_precision = v == 3 ? DDPC_MATMUL_HIGH : DDPC_MATMUL_HIGHEST;
        struct ddpc_ops gpu;
        struct ddpc_worker_result rg;
        char what[96];
        snprintf(what, sizeof what, "training on cuda:0 %s", pname);
        if (b->ops_init(&gpu, 0, &e) < 0) {
            fail_err(what, &e);
            if (gpu.destroy)
                gpu.destroy(&gpu);
            continue;
        }
        int ok = train_once(&gpu, &j, &tr, &te, &rg, what) == 0;
        long grows = gpu.scratch_grows;
        gpu.destroy(&gpu);
        if (ok) {
            /* set_weights/reserve sized everything before the first step:
             * no step, evaluation included, allocated device memory */
            snprintf(what, sizeof what, "train %s: scratch allocations in steps", pname);
            check(grows == 0, what, (double)grows, 0);
        }
        if (!ok)
            continue;
        printf("     %s: %lld steps, train_loss %.6f test_loss %.6f test_accuracy %.4f\n",
               what, (long long)rg.steps, rg.train_loss, rg.test_loss, rg.test_accuracy);
        /* fp16's loss scaler may skip a few steps on overflow (GradScaler) */
        int64_t skip_ok = prec == DDPC_PRECISION_FP16 ? 3 : 0;
        snprintf(what, sizeof what, "train %s: steps %lld of %lld", pname,
                 (long long)rg.steps, (long long)rc.steps);
        check(rg.steps <= rc.steps && rc.steps - rg.steps <= skip_ok, what,
              (double)llabs(rg.steps - rc.steps), (double)skip_ok);
        double el = fabs(rg.train_loss - rc.train_loss) / fabs(rc.train_loss);
        snprintf(what, sizeof what, "train %s: train_loss vs cpu", pname);
        check(el <= train_loss_tol[tol], what, el, train_loss_tol[tol]);
        double et = fabs(rg.test_loss - rc.test_loss) / fabs(rc.test_loss);
        snprintf(what, sizeof what, "train %s: test_loss vs cpu", pname);
        check(et <= train_loss_tol[tol], what, et, train_loss_tol[tol]);
        double ea = fabs(rg.test_accuracy - rc.test_accuracy);
        snprintf(what, sizeof what, "train %s: test_accuracy vs cpu (abs)", pname);
        check(ea <= train_acc_tol[tol], what, ea, train_acc_tol[tol]);
        if (rg.params && rc.params && rg.n_params == rc.n_params) {
            double ep = rel_err(rg.params, rc.params, rc.n_params);
            snprintf(what, sizeof what, "train %s: final parameters vs cpu", pname);
            check(ep <= train_par_tol[tol], what, ep, train_par_tol[tol]);
        } else {
            check_msg(0, "train %s: no final parameters to compare", pname);
        }
        free(rg.params);
    }
    /* the job learned something: the comparison is not of two failures */
    check(rc.test_accuracy > 0.5, "training on cpu learned (test_accuracy > 0.5)",
          rc.test_accuracy, 0.5);
    free(rc.params);
    data_free(&tr);
    data_free(&te);
}

/* ===== end to end: ddpc build + ./job, accelerator gpu vs cpu ===== */

/* Runs argv in dir with stdout (and stderr) into out_path; returns the exit
 * status, or -1. Killed after timeout_s: a hung job is a failure. */
static int run_in(const char *dir, char *const argv[], const char *out_path, double timeout_s)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        if (chdir(dir) != 0)
            _exit(126);
        FILE *f = freopen(out_path, "w", stdout);
        if (!f || dup2(fileno(f), 2) < 0)
            _exit(126);
        setpgid(0, 0);            /* so a timeout can kill the job's workers too */
        execv(argv[0], argv);
        _exit(127);
    }
    setpgid(pid, pid);
    int status = 0;
    double end = ddpc_now() + timeout_s;
    pid_t w;
    while ((w = waitpid(pid, &status, WNOHANG)) == 0 && ddpc_now() < end)
        usleep(20000);
    if (w == 0) {
        kill(-pid, SIGKILL);
        waitpid(pid, &status, 0);
        return -1;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* The double after "key=" on the job's "done " line, or NAN. */
static double done_value(const char *path, const char *key)
{
    FILE *f = fopen(path, "r");
    char line[1024];
    double v = NAN;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "done ", 5) == 0) {
            char k[64];
            snprintf(k, sizeof k, " %s=", key);
            const char *at = strstr(line, k);
            if (at)
                v = strtod(at + strlen(k), NULL);
        }
    if (f)
        fclose(f);
    return v;
}

/* Within the part's 60 s: two builds of 10 s at most, two jobs of 20 s. */
#define E2E_BUILD_S 10
#define E2E_JOB_S   20

static void part_e2e(const struct ddpc_backend *be)
{
    (void)be;
    const char *b = getenv("DDPC_BUILD");
    char rel[4096], dir[] = "/tmp/ddpc-gpu-e2e-XXXXXX";
    snprintf(rel, sizeof rel, "%s/bin/ddpc", b ? b : "build");
    char *ddpc = realpath(rel, NULL);     /* the jobs run in dir, not here */
    if (!ddpc || access(ddpc, X_OK) != 0) {
        check_msg(0, "end to end: %s not built (make all)", rel);
        free(ddpc);
        return;
    }
    if (!mkdtemp(dir)) {
        check_msg(0, "end to end: mkdtemp: %s", strerror(errno));
        free(ddpc);
        return;
    }
    int world = g_gpus >= 2 ? 2 : 1;
    static const char *const accel[2] = {"cpu", "gpu"};
    double loss[2] = {NAN, NAN}, acc[2] = {NAN, NAN};
    char path[2][3][4200];            /* [accel][spec, program, output] */
    for (int g = 0; g < 2; g++) {
        snprintf(path[g][0], sizeof path[g][0], "%s/%s.yaml", dir, accel[g]);
        snprintf(path[g][1], sizeof path[g][1], "%s/%s-job", dir, accel[g]);
        snprintf(path[g][2], sizeof path[g][2], "%s/%s.out", dir, accel[g]);
        FILE *f = fopen(path[g][0], "w");
        if (!f)
            continue;
        fprintf(f,
                "version: 1\nname: e2e\ndevices: %d\naccelerator: %s\nseed: 3\nepochs: 1\n"
                "batch_size: 32\nlearning_rate: 0.001\nlr_scaling: none\n"
                "model: {type: mlp, layers: [32, 64, 10], activation: gelu}\n"
                "optimizer: {type: adamw, weight_decay: 0.01}\n"
                "data:\n"
                "  train: {format: synthetic, samples: 2048, features: 32, classes: 10, seed: 11}\n"
                "  test: {format: synthetic, samples: 512, features: 32, classes: 10, seed: 12}\n",
                world, accel[g]);
        fclose(f);
        char *build[] = {ddpc, (char *)"build", path[g][0], (char *)"-o", path[g][1], NULL};
        int rc = run_in(dir, build, path[g][2], E2E_BUILD_S);
        char what[96];
        snprintf(what, sizeof what, "end to end: ddpc build (accelerator %s)", accel[g]);
        check(rc == 0, what, rc, 0);
        if (rc != 0) {        /* ddpc's own words: m4 or cc missing, a link error */
            char line[1024];
            FILE *o = fopen(path[g][2], "r");
            while (o && fgets(line, sizeof line, o))
                printf("     %s", line);
            if (o)
                fclose(o);
            continue;
        }
        char *run[] = {path[g][1], NULL};
        rc = run_in(dir, run, path[g][2], E2E_JOB_S);
        snprintf(what, sizeof what, "end to end: ./job on %d %s%s", world,
                 g ? "GPU" : "CPU worker", world > 1 ? "s" : "");
        check(rc == 0, what, rc, 0);
        loss[g] = done_value(path[g][2], "train_loss");
        acc[g] = done_value(path[g][2], "test_accuracy");
        if (rc != 0 || g == 1) {      /* the GPU job's report, or any failure's */
            char line[1024];
            FILE *o = fopen(path[g][2], "r");
            while (o && fgets(line, sizeof line, o))
                if (rc != 0 || strncmp(line, "done ", 5) == 0)
                    printf("     %s", line);
            if (o)
                fclose(o);
        }
    }
    if (isfinite(loss[0]) && isfinite(loss[1])) {
        /* printed with 4 decimals: allow that rounding plus fp32 drift */
        double el = fabs(loss[1] - loss[0]);
        double tl = 2e-4 + 1e-3 * fabs(loss[0]);
        check(el <= tl, "end to end: train_loss gpu vs cpu (abs)", el, tl);
        double ea = fabs(acc[1] - acc[0]);
        check(ea <= 0.01, "end to end: test_accuracy gpu vs cpu (abs)", ea, 0.01);
    } else if (isfinite(loss[0]) || isfinite(loss[1])) {
        check_msg(0, "end to end: no final train_loss from one of the jobs");
    }
    for (int g = 0; g < 2; g++)
        for (int k = 0; k < 3; k++)
            unlink(path[g][k]);
    rmdir(dir);
    free(ddpc);
}

/* ===== ranks: forked processes, waited for with a bound ===== */

/* Waits for world ranks, at most timeout_s, then kills the rest (our own
 * children, by pid). A rank that fails aborts its communicators first, but
 * a peer inside a collective with it may never hear of it (NCCL tells a
 * peer nothing when its partner aborts over shared memory or P2P), so 2 s
 * after the first failure the others are killed too, and named so: no
 * part waits out its deadline for a rank that is gone. Returns the number
 * of ranks that did not exit 0. */
static int wait_ranks(pid_t *pids, int world, double timeout_s, const char *what)
{
    int bad = 0, alive = world, first_bad = -1;
    double end = ddpc_now() + timeout_s, kill_at = 0;
    while (alive > 0) {
        for (int r = 0; r < world; r++) {
            int st = 0;
            if (pids[r] <= 0 || waitpid(pids[r], &st, WNOHANG) != pids[r])
                continue;
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                printf("FAIL %s: rank %d %s %d\n", what, r,
                       WIFEXITED(st) ? "exited" : "died of signal",
                       WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
                bad++;
                if (first_bad < 0) {
                    first_bad = r;
                    kill_at = ddpc_now() + 2;
                }
            }
            pids[r] = 0;
            alive--;
        }
        double t = ddpc_now();
        if (alive > 0 && (t > end || (kill_at > 0 && t > kill_at))) {
            for (int r = 0; r < world; r++)
                if (pids[r] > 0) {
                    if (t > end)
                        printf("FAIL %s: rank %d still running after %.0f s; killed\n", what, r,
                               timeout_s);
                    else
                        printf("FAIL %s: rank %d still running 2 s after rank %d failed; "
                               "killed\n", what, r, first_bad);
                    kill(pids[r], SIGKILL);
                    waitpid(pids[r], NULL, 0);
                    pids[r] = 0;
                    alive--;
                    bad++;
                }
        }
        usleep(10000);
    }
    fflush(stdout);
    return bad;
}

/* ===== NCCL: one process per rank ===== */

#define NCCL_RANK_S 20    /* every rank's deadline: init, split, each collective */

/* The job's store on an ephemeral loopback port, hosted the way a job's
 * launcher hosts it: the ranks bootstrap NCCL through it (comm_nccl.h). */
static int store_up(struct store_host *h, int *port)
{
    struct ddpc_err e = {0};
    if (store_host_start(h, "127.0.0.1", 0, 0, &e) < 0) {
        printf("FAIL store: %s\n", e.msg);
        return -1;
    }
    *port = h->port;
    return 0;
}

static float rank_value(int rank, size_t i)   /* small integers: sums are exact in fp32 */
{
    return (float)((long)((i * 7 + (size_t)rank * 13) % 17) - 8);
}

#define RFAIL(...) do { printf("FAIL [rank %d] ", rank); printf(__VA_ARGS__); printf("\n"); \
                        fflush(stdout); bad++; } while (0)

/* Runs in a forked child; returns its failure count (the exit status). A
 * rank that fails aborts its communicators before it leaves. */
static int nccl_rank(const struct ddpc_backend *b, int rank, int world, int port)
{
    struct ddpc_ops ops;
    struct ddpc_comm grad, sync;
    struct ddpc_err e = {0};
    int bad = 0, have_ops = 0;
    double dl = ddpc_deadline_after(NCCL_RANK_S);
    const size_t n = (1u << 20) + 3;
    float *h = malloc(n * sizeof *h), *out = malloc(n * sizeof *out);
    float *a = NULL, *r = NULL, *c = NULL;
    memset(&ops, 0, sizeof ops);
    memset(&grad, 0, sizeof grad);
    memset(&sync, 0, sizeof sync);
    if (rank_env(world) < 0 || (have_ops = 1, b->ops_init(&ops, rank % g_gpus, &e)) < 0 ||
        b->comm_init(&grad, "gradient", rank, world, "127.0.0.1", port, "a0", dl, &e) < 0 ||
        b->comm_split(&grad, &sync, "rank-sync", dl, &e) < 0) {
        RFAIL("init: %s (%s:%d)", e.msg, e.file ? e.file : "?", e.line);
        goto out;
    }
    if (ops.alloc(&ops, (void **)&a, n * 4, &e) < 0 || ops.alloc(&ops, (void **)&r, n * 4, &e) < 0 ||
        ops.alloc(&ops, (void **)&c, n * 4, &e) < 0) {
        RFAIL("alloc: %s", e.msg);
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        h[i] = rank_value(rank, i);
    if (ops.to_device(&ops, a, h, n * 4, &e) < 0 || ops.to_device(&ops, c, h, n * 4, &e) < 0) {
        RFAIL("upload: %s", e.msg);
        goto out;
    }
    /* two tags in flight at once, like two gradient buckets */
    if (grad.all_reduce_start(&grad, 0, a, r, n, DDPC_REDUCE_SUM, dl, &e) < 0 ||
        grad.all_reduce_start(&grad, 1, c, c, n, DDPC_REDUCE_AVG, dl, &e) < 0 ||
        grad.all_reduce_wait(&grad, 1, dl, &e) < 0 || grad.all_reduce_wait(&grad, 0, dl, &e) < 0) {
        RFAIL("all-reduce: %s (%s:%d)", e.msg, e.file ? e.file : "?", e.line);
        goto out;
    }
    size_t wrong_sum = 0, wrong_avg = 0;
    if (ops.to_host(&ops, out, r, n * 4, &e) < 0) {
        RFAIL("download: %s", e.msg);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        double want = 0;
        for (int q = 0; q < world; q++)
            want += rank_value(q, i);
        wrong_sum += out[i] != (float)want;
    }
    if (ops.to_host(&ops, out, c, n * 4, &e) < 0) {
        RFAIL("download: %s", e.msg);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        double want = 0;
        for (int q = 0; q < world; q++)
            want += rank_value(q, i);
        want /= world;
        wrong_avg += fabs(out[i] - want) > 1e-6 * (fabs(want) + 1);
    }
    if (wrong_sum)
        RFAIL("all-reduce sum out of place: %zu of %zu wrong", wrong_sum, n);
    if (wrong_avg)
        RFAIL("all-reduce avg in place: %zu of %zu wrong", wrong_avg, n);

    /* broadcast from the last rank */
    for (size_t i = 0; i < n; i++)
        h[i] = (float)rank * 1000.0f + (float)(i % 1000);
    size_t wrong_bc = 0;
    if (ops.to_device(&ops, a, h, n * 4, &e) < 0 ||
        grad.broadcast(&grad, a, n, world - 1, dl, &e) < 0 || ops.to_host(&ops, out, a, n * 4, &e) < 0) {
        RFAIL("broadcast: %s (%s:%d)", e.msg, e.file ? e.file : "?", e.line);
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        wrong_bc += out[i] != (float)(world - 1) * 1000.0f + (float)(i % 1000);
    if (wrong_bc)
        RFAIL("broadcast: %zu of %zu wrong", wrong_bc, n);
    if (sync.barrier(&sync, dl, &e) < 0) {
        RFAIL("barrier: %s (%s:%d)", e.msg, e.file ? e.file : "?", e.line);
        goto out;
    }

    /* the deadline: rank 0 arrives 2 s late, the others allow 0.5 s */
    if (world >= 2 && !bad) {
        if (rank == 0) {
            sleep(2);
            struct ddpc_err e2 = {0};
            (void)sync.barrier(&sync, ddpc_deadline_after(2), &e2);  /* peers gave up */
        } else {
            struct ddpc_err e2 = {0};
            int rc = sync.barrier(&sync, ddpc_deadline_after(0.5), &e2);
            if (rc != DDPC_E_TIMEOUT || !strstr(e2.msg, "rank-sync") || !strstr(e2.msg, "barrier"))
                RFAIL("late peer: want DDPC_E_TIMEOUT naming rank-sync barrier, got %d: %s", rc,
                      e2.msg);
            else
                printf("[rank %d] deadline fired as expected: %.120s...\n", rank, e2.msg);
        }
    }
    if (!bad)
        printf("[rank %d] all-reduce sum/avg, broadcast, barrier: %zu floats OK\n", rank, n);
out:
    fflush(stdout);
    if (bad) {
        if (grad.abort)
            grad.abort(&grad, "a rank failed");
        if (sync.abort)
            sync.abort(&sync, "a rank failed");
    }
    if (a)
        ops.release(&ops, a);
    if (r)
        ops.release(&ops, r);
    if (c)
        ops.release(&ops, c);
    if (sync.destroy)
        sync.destroy(&sync);
    if (grad.destroy)
        grad.destroy(&grad);
    if (have_ops && ops.destroy)
        ops.destroy(&ops);
    free(h);
    free(out);
    return bad;
}

/* In a child: rank 0 of a world of 2 whose rank 1 never comes. Init must
 * give up at its deadline with DDPC_E_TIMEOUT naming the init, not hang. */
static int nccl_init_timeout_child(const struct ddpc_backend *b, int port)
{
    struct ddpc_ops ops;
    struct ddpc_comm c;
    struct ddpc_err e = {0};
    memset(&c, 0, sizeof c);
    if (b->ops_init(&ops, 0, &e) < 0) {
        printf("FAIL init-timeout: ops_init: %s\n", e.msg);
        return 1;
    }
    double t0 = ddpc_now();
    int rc = b->comm_init(&c, "gradient", 0, 2, "127.0.0.1", port, "a0", ddpc_deadline_after(2),
                          &e);
    double took = ddpc_now() - t0;
    int ok = rc == DDPC_E_TIMEOUT && strstr(e.msg, "init") && strstr(e.msg, "gradient") &&
             took < 10;
    printf("%s nccl init with a missing peer: rc %d after %.1f s: %.100s...\n",
           ok ? "PASS" : "FAIL", rc, took, e.msg);
    if (c.destroy)
        c.destroy(&c);
    ops.destroy(&ops);
    fflush(stdout);
    return ok ? 0 : 1;
}

static void part_init_timeout(const struct ddpc_backend *b)
{
    int port;
    struct store_host h;
    if (store_up(&h, &port) < 0) {
        check_msg(0, "init-timeout: no store");
        return;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        int rc = nccl_init_timeout_child(b, port);
        fflush(stdout);
        _exit(rc);
    }
    pid_t pids[1] = {pid};
    int bad = pid < 0 ? 1 : wait_ranks(pids, 1, 15, "init-timeout");
    store_host_stop(&h);
    check_msg(!bad, "nccl init whose peer never comes times out at its deadline (2 s)");
}

static void run_nccl_tests(const struct ddpc_backend *b, int world, double timeout_s)
{
    int port;
    struct store_host h;
    if (store_up(&h, &port) < 0) {
        check_msg(0, "nccl W=%d: no store", world);
        return;
    }
    pid_t pids[64] = {0};
    fflush(stdout);
    for (int r = 0; r < world; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            int bad = nccl_rank(b, r, world, port);
            fflush(stdout);
            _exit(bad > 100 ? 100 : bad);
        }
        if (pids[r] < 0) {
            check_msg(0, "nccl W=%d: fork rank %d: %s", world, r, strerror(errno));
            world = r;
            break;
        }
    }
    char what[64];
    snprintf(what, sizeof what, "nccl W=%d", world);
    int bad = wait_ranks(pids, world, timeout_s, what);
    store_host_stop(&h);
    check_msg(!bad, "nccl W=%d: all-reduce sum/avg on two tags, broadcast, the rank-sync split "
              "and its barrier and deadline: %d of %d ranks failed", world, bad, world);
}

/* ===== overlap: a bucket per tensor vs one bucket, over NCCL ===== */

#define OVL_MAX_PARAMS 16384
#define OVL_RANK_S     15     /* every rank's deadline (and the job's timeouts) */
#define OVL_STREAM_DELAY_US 300

/* What the ranks of a run hand back through shared memory. */
struct ovl_out {
    int     rc;               /* 0: both runs done */
    char    msg[600];
    size_t  n;
    int64_t steps[2];
    double  train_loss[2];
    double  delay_us[8];      /* each rank's DDPC_TEST_STREAM_DELAY_US as env_get() read it */
    float   params[2][OVL_MAX_PARAMS];   /* [0] a bucket per tensor, [1] one bucket */
};

/* 4 linear layers (32-64-64-64-10), AdamW, grad_accumulation 2, the
 * rank-sync barrier on, clipping on; bucket_cap_mb 1 byte (every tensor
 * closes a bucket, so each all-reduce starts while backward still runs) or
 * 0 (one bucket, started after backward). */
static void ovl_job(struct ddpc_job *j, int precision, int per_tensor)
{
    train_job(j, precision);
    j->name = "overlap";
    j->epochs = 1;
    j->batch_size = 32;
    j->grad_accumulation = 2;
    j->model.n_layers = 5;
    j->model.layers[3] = 64;
    j->model.layers[4] = 10;
    j->bucket_cap_mb = per_tensor ? 1.0 / 1048576.0 : 0.0;
    j->nccl_timeout_s = OVL_RANK_S;
    j->rank_sync_timeout_s = OVL_RANK_S;
}

/* One rank: both runs on the same communicators, the bucket-per-tensor run
 * first. gpu: NCCL on cuda:(rank % g_gpus); else CPU workers over comm_shm
 * (the regions are mapped by the parent before fork). */
static int ovl_rank(const struct ddpc_backend *b, int gpu, int precision, int rank, int world,
                    int port, struct comm_shm_region *gr, struct comm_shm_region *sr,
                    const struct ddpc_dataset *tr, struct ovl_out *out)
{
    struct ddpc_ops ops;
    struct ddpc_comm grad, sync;
    struct ddpc_err e = {0};
    int rc = 0, have_ops = 0, have_grad = 0, have_sync = 0;
    memset(&ops, 0, sizeof ops);
    memset(&grad, 0, sizeof grad);
    memset(&sync, 0, sizeof sync);
    double dl = ddpc_deadline_after(OVL_RANK_S);
    /* what comm_nccl.cu read, once per process (main set it before any
     * env_get): the race detector is on in every configuration */
    if (rank < 8)
        out->delay_us[rank] = env_get()->test_stream_delay_us;
    if (gpu) {
        if (rank_env(world) < 0)
            return -1;
        /* W > 2: NCCL's ring adds an element's W values in an order that
         * depends on where the element falls in its chunk, so a different
         * bucket layout may round differently. One channel of the tree
         * algorithm adds every element in the same order (the chain's). W = 2
         * needs nothing: a + b rounds as b + a. The tree for all-reduce only
         * ("allreduce:tree"): a bare "Tree" applies to every function and
         * leaves broadcast, which only has Ring, with no algorithm at all
         * (NCCL tuning.cc), so worker_run's first broadcast would fail. */
        if (world > 2 && (setenv("NCCL_ALGO", "allreduce:tree", 1) != 0 ||
                          setenv("NCCL_MIN_NCHANNELS", "1", 1) != 0 ||
                          setenv("NCCL_MAX_NCHANNELS", "1", 1) != 0))
            return -1;
        rc = b->ops_init(&ops, rank % g_gpus, &e);
        have_ops = 1;
        if (rc == 0) {
            rc = b->comm_init(&grad, "gradient", rank, world, "127.0.0.1", port, "a0", dl, &e);
            have_grad = 1;
        }
        if (rc == 0) {
            rc = b->comm_split(&grad, &sync, "rank-sync", dl, &e);
            have_sync = 1;
        }
    } else {
        rc = ops_cpu_init(&ops, &e);
        have_ops = 1;
        if (rc == 0 && (rc = comm_shm_attach(&grad, gr, rank, "gradient", &e)) == 0)
            have_grad = 1;
        if (rc == 0 && (rc = comm_shm_attach(&sync, sr, rank, "rank-sync", &e)) == 0)
            have_sync = 1;
    }
    for (int run = 0; run < 2 && rc == 0; run++) {
        struct ddpc_job j;
        ovl_job(&j, precision, run == 0);
        struct ddpc_worker_args a = { .job = &j, .rank = rank, .world = world,
                                      .device = rank % g_gpus, .ops = &ops,
                                      .grad_comm = &grad, .sync_comm = &sync, .train = tr,
                                      .test = NULL, .out = NULL, .t_launch = ddpc_now() };
        struct ddpc_worker_result res;
        memset(&res, 0, sizeof res);
        res.want_params = 1;
        rc = worker_run(&a, &res, &e);
        if (rc == 0 && rank == 0) {
            out->n = res.n_params;
            out->steps[run] = res.steps;
            out->train_loss[run] = res.train_loss;
            if (res.n_params <= OVL_MAX_PARAMS)
                memcpy(out->params[run], res.params, res.n_params * sizeof(float));
        }
        free(res.params);
    }
    if (rc < 0) {
        snprintf(out->msg, sizeof out->msg, "rank %d: %s (%s:%d)", rank, e.msg,
                 e.file ? e.file : "?", e.line);
        if (have_grad && grad.abort)
            grad.abort(&grad, "a rank failed");
        if (have_sync && sync.abort)
            sync.abort(&sync, "a rank failed");
    }
    if (have_sync && sync.destroy)
        sync.destroy(&sync);
    if (have_grad && grad.destroy)
        grad.destroy(&grad);
    if (have_ops && ops.destroy)
        ops.destroy(&ops);
    return rc;
}

/* One backend, world ranks, both runs; NULL (and a FAIL) on failure. The
 * result is shared memory (munmap it). */
static struct ovl_out *ovl_train(const struct ddpc_backend *b, int gpu, int precision,
                                 int world, const struct ddpc_dataset *tr, double timeout_s)
{
    char what[96];
    snprintf(what, sizeof what, "overlap %s W=%d %s", prec_name[precision], world,
             gpu ? "nccl" : "cpu reference");
    struct ovl_out *out = (struct ovl_out *)mmap(NULL, sizeof *out, PROT_READ | PROT_WRITE,
                                                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (out == MAP_FAILED) {
        check_msg(0, "%s: mmap: %s", what, strerror(errno));
        return NULL;
    }
    memset(out, 0, sizeof *out);
    struct comm_shm_region *gr = NULL, *sr = NULL;
    struct ddpc_err e = {0};
    int port = 0;
    struct store_host h = { 0, -1, 0 };
    if (gpu ? store_up(&h, &port) < 0
            : comm_shm_create(&gr, world, 0, &e) < 0 || comm_shm_create(&sr, world, 0, &e) < 0) {
        check_msg(0, "%s: setup: %s", what, gpu ? "no store" : e.msg);
        comm_shm_region_free(gr);
        comm_shm_region_free(sr);
        munmap(out, sizeof *out);
        return NULL;
    }
    pid_t pids[8] = {0};
    fflush(stdout);
    for (int r = 0; r < world; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            int rc = ovl_rank(b, gpu, precision, r, world, port, gr, sr, tr, out);
            if (rc < 0)
                printf("FAIL %s: %s\n", what, out->msg);
            fflush(stdout);
            _exit(rc < 0 ? 1 : 0);
        }
    }
    int bad = wait_ranks(pids, world, timeout_s, what);
    store_host_stop(&h);
    comm_shm_region_free(gr);
    comm_shm_region_free(sr);
    if (bad || out->n == 0 || out->n > OVL_MAX_PARAMS) {
        check_msg(0, "%s: %d rank(s) failed, %zu parameters back", what, bad, out->n);
        munmap(out, sizeof *out);
        return NULL;
    }
    check_msg(1, "%-40s %lld steps, train_loss %.6f (per tensor) %.6f (one bucket)", what,
              (long long)out->steps[0], out->train_loss[0], out->train_loss[1]);
    return out;
}

/* Overlap is correct: with every bucket's all-reduce started while backward
 * runs (and the stream-delay hook widening any race, on in every rank of
 * every configuration), the parameters after training are bit for bit those
 * of one bucket started after backward, and within the GPU-vs-CPU bounds of
 * the CPU backend's run of the same job at the same world size. fp32 and
 * bf16 at one world size (a part each: overlap2, overlap4). */
static void overlap_at(const struct ddpc_backend *b, int world)
{
    struct ddpc_data_source src = { .format = DDPC_DATA_SYNTHETIC, .samples = 2048,
                                    .features = 32, .classes = 10, .seed = 11 };
    struct ddpc_dataset tr;
    struct ddpc_err e = {0};
    memset(&tr, 0, sizeof tr);
    if (data_load(&src, &tr, &e) < 0) {
        fail_err("overlap: synthetic train set", &e);
        return;
    }
    static const int precs[2] = {DDPC_PRECISION_FP32, DDPC_PRECISION_BF16};
    for (int pi = 0; pi < 2; pi++) {
        int prec = precs[pi];
        struct ovl_out *g = ovl_train(b, 1, prec, world, &tr, 20);
        struct ovl_out *c = ovl_train(b, 0, prec, world, &tr, 10);
        char what[96];
        if (g) {
            int off = 0;
            for (int r = 0; r < world && r < 8; r++)
                off += g->delay_us[r] != OVL_STREAM_DELAY_US;
            check_msg(!off, "overlap %s W=%d: the stream-delay race detector ran at %d us in "
                      "every rank (%d of %d did not)", prec_name[prec], world,
                      OVL_STREAM_DELAY_US, off, world);
            size_t differ = 0;
            for (size_t i = 0; i < g->n; i++)
                differ += memcmp(&g->params[0][i], &g->params[1][i], sizeof(float)) != 0;
            check_msg(!differ && g->steps[0] == g->steps[1],
                      "overlap %s W=%d: bucket per tensor vs one bucket: %zu of %zu parameters "
                      "differ in their bits (bound 0), steps %lld/%lld", prec_name[prec], world,
                      differ, g->n, (long long)g->steps[0], (long long)g->steps[1]);
        }
        if (g && c && g->n == c->n) {
            double ep = rel_err(g->params[0], c->params[0], g->n);
            snprintf(what, sizeof what, "overlap %s W=%d: nccl vs cpu params",
                     prec_name[prec], world);
            check(ep <= train_par_tol[prec], what, ep, train_par_tol[prec]);
            snprintf(what, sizeof what, "overlap %s W=%d: steps %lld == cpu %lld",
                     prec_name[prec], world, (long long)g->steps[0],
                     (long long)c->steps[0]);
            check(g->steps[0] == c->steps[0], what, 0, 0);
        }
        if (g)
            munmap(g, sizeof *g);
        if (c)
            munmap(c, sizeof *c);
    }
    data_free(&tr);
}

/* ===== the parts, each in its own process ===== */

static void part_ops(const struct ddpc_backend *b)
{
    run_ops_tests(b);
}

static void part_nccl2(const struct ddpc_backend *b)
{
    run_nccl_tests(b, 2, 25);
}

static void part_nccl4(const struct ddpc_backend *b)
{
    run_nccl_tests(b, 4, 35);
}

static void part_nccl_all(const struct ddpc_backend *b)
{
    run_nccl_tests(b, g_gpus > 64 ? 64 : g_gpus, 35);
}

static void part_overlap2(const struct ddpc_backend *b)
{
    overlap_at(b, 2);
}

static void part_overlap4(const struct ddpc_backend *b)
{
    overlap_at(b, 4);
}

/* In the order they run: world 1 first (the most informative, and they need
 * nothing NCCL may lack), world 4 last; deadlines sum to 410 s, under the 7
 * minutes a first run on a lent machine can give them. */
static const struct part {
    const char *name;
    void (*fn)(const struct ddpc_backend *);
    double timeout_s;
    int world;                /* ranks it runs (1: one GPU, no NCCL collective) */
    const char *what;
} parts[] = {
    {"ops", part_ops, 80, 1, "every op, CUDA vs CPU"},
    {"training", test_training, 60, 1, "a small job on cuda:0 vs CPU, fp32/bf16/fp16/tf32"},
    {"init-timeout", part_init_timeout, 20, 1, "an NCCL init whose peer never comes"},
    {"e2e", part_e2e, 60, 1, "ddpc build + ./job, accelerator gpu vs cpu"},
    {"nccl2", part_nccl2, 30, 2, "NCCL at W=2"},
    {"overlap2", part_overlap2, 60, 2, "bucketed overlap at W=2 vs one bucket and vs CPU"},
    {"nccl4", part_nccl4, 40, 4, "NCCL at W=4"},
    {"overlap4", part_overlap4, 60, 4, "bucketed overlap at W=4 vs one bucket and vs CPU"},
};

/* Parts that passed, failed, could not run here, or were filtered out. */
static int parts_pass, parts_fail, parts_notrun;
static volatile pid_t g_running_part;   /* the part's pid (and process group), or 0 */

/* test_gpu itself stopped (stage.sh's backstop timeout, ^C): the running
 * part is in a process group of its own, which a signal to ours does not
 * reach; take it, and the ranks it forked, down too. */
static void on_stop(int sig)
{
    pid_t p = g_running_part;
    if (p > 0)
        kill(-p, SIGKILL);
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Runs part p in a forked child, in a process group of its own (its ranks
 * with it), killed whole past its deadline; its failures are counted here
 * as one failed part. The parent never initialises CUDA (the probe runs in
 * a child of its own), so no process holds a CUDA context while another
 * part, or a job a part starts, runs. */
static void run_part(const struct part *p, const struct ddpc_backend *b)
{
    printf("---- part %s: %s (deadline %.0f s)\n", p->name, p->what, p->timeout_s);
    fflush(stdout);
    double t0 = ddpc_now();
    pid_t pid = fork();
    if (pid < 0) {
        parts_fail++;
        check_msg(0, "part %s: fork: %s", p->name, strerror(errno));
        return;
    }
    if (pid == 0) {
        setpgid(0, 0);
        g_part = p->name;
        checks = failures = 0;
        p->fn(b);
        fflush(stdout);
        _exit(failures > 100 ? 100 : failures);
    }
    setpgid(pid, pid);
    g_running_part = pid;
    int st = 0, done = 0;
    while (!(done = waitpid(pid, &st, WNOHANG) == pid) && ddpc_now() - t0 < p->timeout_s)
        usleep(20000);
    if (!done) {
        kill(-pid, SIGKILL);      /* the part and the ranks it forked */
        waitpid(pid, &st, 0);
    }
    g_running_part = 0;
    double took = ddpc_now() - t0;
    const char *verdict = done && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? "PASS" : "FAIL";
    char why[128] = "";
    if (!done)
        snprintf(why, sizeof why, "killed at its deadline (%.0f s)", p->timeout_s);
    else if (WIFSIGNALED(st))
        snprintf(why, sizeof why, "died of signal %d", WTERMSIG(st));
    else if (WEXITSTATUS(st))
        snprintf(why, sizeof why, "%d check(s) failed", WEXITSTATUS(st));
    *verdict == 'P' ? parts_pass++ : parts_fail++;
    checks++;
    failures += *verdict == 'F';
    printf("---- part %s: %s in %.1f s%s%s\n", p->name, verdict, took, *why ? ": " : "", why);
    fflush(stdout);
    g_part = p->name;
    result_line("part", verdict, "%.1f s%s%s", took, *why ? ": " : "", why);
    g_part = "main";
}

/* DDPC_TEST_PARTS: a comma-separated list of part names (a rerun of what
 * failed); unset or empty: every part. */
static int part_wanted(const char *name)
{
    const char *want = getenv("DDPC_TEST_PARTS");
    if (!want || !*want)
        return 1;
    size_t n = strlen(name);
    for (const char *at = want; (at = strstr(at, name)); at += n)
        if ((at == want || at[-1] == ',') && (at[n] == ',' || at[n] == 0))
            return 1;
    return 0;
}

/* The versions and the device, from a child (CUDA is initialised there,
 * never here): what a report of this run needs. */
static void print_env(int nccl)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        int rt = 0, drv = 0, sms = 0, mode = -1, maj = 0, min = 0, cb[3] = {0, 0, 0};
        cudaError_t st = cudaRuntimeGetVersion(&rt);
        if (st == cudaSuccess)
            st = cudaDriverGetVersion(&drv);
        if (st == cudaSuccess)
            st = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
        if (st == cudaSuccess)
            st = cudaDeviceGetAttribute(&mode, cudaDevAttrComputeMode, 0);
        if (st == cudaSuccess)
            st = cudaDeviceGetAttribute(&maj, cudaDevAttrComputeCapabilityMajor, 0);
        if (st == cudaSuccess)
            st = cudaDeviceGetAttribute(&min, cudaDevAttrComputeCapabilityMinor, 0);
        cublasStatus_t bs = cublasGetProperty(MAJOR_VERSION, &cb[0]);
        if (bs == CUBLAS_STATUS_SUCCESS)
            bs = cublasGetProperty(MINOR_VERSION, &cb[1]);
        if (bs == CUBLAS_STATUS_SUCCESS)
            bs = cublasGetProperty(PATCH_LEVEL, &cb[2]);
        static const char *const modes[] = {"default", "exclusive-thread (deprecated)",
                                            "prohibited", "exclusive-process"};
        printf("test_gpu: env: CUDA runtime %d.%d, driver API %d.%d, cuBLAS %d.%d.%d, "
               "NCCL %d.%d.%d; cuda:0 sm_%d%d, %d SMs, compute mode %s%s%s\n",
               rt / 1000, rt % 1000 / 10, drv / 1000, drv % 1000 / 10, cb[0], cb[1], cb[2],
               nccl / 10000, nccl / 100 % 100, nccl % 100, maj, min, sms,
               mode >= 0 && mode <= 3 ? modes[mode] : "?",
               st != cudaSuccess ? "; CUDA: " : "", st != cudaSuccess ? cudaGetErrorString(st)
                                                                      : "");
        result_line("env", st == cudaSuccess && bs == CUBLAS_STATUS_SUCCESS ? "PASS" : "FAIL",
                    "CUDA runtime %d driver %d cuBLAS %d.%d.%d NCCL %d SMs %d sm_%d%d "
                    "compute_mode %d", rt, drv, cb[0], cb[1], cb[2], nccl, sms, maj, min, mode);
        if (mode == 1 || mode == 3)
            printf("FAIL test_gpu: cuda:0 is in an exclusive compute mode: one process per "
                   "GPU, so ranks sharing it and jobs started next to a part fail\n");
        fflush(stdout);
        _exit(st == cudaSuccess && bs == CUBLAS_STATUS_SUCCESS ? 0 : 1);
    }
    pid_t pids[1] = {pid};
    if (pid < 0 || wait_ranks(pids, 1, 30, "env") != 0)
        check_msg(0, "test_gpu: the versions child failed (see above)");
}

int main(void)
{
    const struct ddpc_backend *b = &ddpc_cuda_backend;
    struct ddpc_device_info info;
    struct ddpc_err e = {0};
    /* The overlap parts' race detector (comm_nccl.cu's stream delay): set
     * before anything here reads the environment (env.c reads it once per
     * process, and forked parts and ranks inherit what was read), so it is
     * on in every rank of every configuration; the ranks report it. */
    if (setenv("DDPC_TEST_STREAM_DELAY_US", "300", 1) != 0) {
        printf("FAIL test_gpu: setenv: %s\n", strerror(errno));
        return 1;
    }
    signal(SIGTERM, on_stop);
    signal(SIGINT, on_stop);
    signal(SIGHUP, on_stop);
    const char *rpath = getenv("DDPC_TEST_OUT");
    if (rpath && *rpath) {
        g_results = open(rpath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (g_results < 0) {
            printf("FAIL test_gpu: DDPC_TEST_OUT=%s: %s\n", rpath, strerror(errno));
            return 1;
        }
    }
    /* the probe forks; this process never initialises CUDA (run_part) */
    if (b->probe(&info, &e) < 0) {
        printf("FAIL probe: %s\n", e.msg);
        result_line("probe", "FAIL", "%s", e.msg);
        return 1;
    }
    if (info.status == DDPC_PROBE_FAILED) {
        printf("FAIL probe: %s\n---> HINT: %s\n", info.note, devprobe_hint(info.cuda_error));
        result_line("probe", "FAIL", "%s", info.note);
        return 1;
    }
    const char *fake = getenv("DDPC_TEST_FAKE_GPUS");
    if (info.count == 0 && fake && atoi(fake) > 0 && atoi(fake) <= 64) {
        /* the harness itself (parts, deadlines, NOT RUN, the results file)
         * on a machine without a GPU: every part runs and fails at its
         * first CUDA call, so the exit status cannot be 0 */
        info.count = atoi(fake);
        snprintf(info.names[0], sizeof info.names[0], "(none: DDPC_TEST_FAKE_GPUS=%s)", fake);
        printf("test_gpu: DDPC_TEST_FAKE_GPUS=%s: no GPU is here; every part must fail\n", fake);
    }
    if (info.count == 0) {
        /* a GPU node, or DDPC_REQUIRE_GPU=1 (the device machine's command):
         * there is a GPU to test, so not testing it is a failure */
        const char *req = getenv("DDPC_REQUIRE_GPU");
        int nodes = devprobe_gpu_nodes();
        if (nodes > 0 || (req && strcmp(req, "1") == 0)) {
            printf("FAIL test_gpu: %s, but the probe found no GPU: %s\n",
                   nodes > 0 ? "/dev/nvidia<N> exists" : "DDPC_REQUIRE_GPU=1",
                   info.note[0] ? info.note : "0 devices");
            result_line("probe", "FAIL", "no GPU: %s", info.note[0] ? info.note : "0 devices");
            return 1;
        }
        printf("SKIP test_gpu: no GPU: %s; nothing was tested\n",
               info.note[0] ? info.note : "probe saw 0 devices");
        result_line("probe", "SKIP", "no GPU: %s", info.note[0] ? info.note : "0 devices");
        return 0;
    }
    g_gpus = info.count;
    /* the pieces: a missing one is a failure, not a skip */
    const char *bd = getenv("DDPC_BUILD");
    char ddpc[4096];
    snprintf(ddpc, sizeof ddpc, "%s/bin/ddpc", bd ? bd : "build");
    if (access(ddpc, X_OK) != 0) {
        printf("FAIL test_gpu: %s is not built (make all; DDPC_BUILD names the build "
               "directory)\n", ddpc);
        result_line("probe", "FAIL", "%s not built", ddpc);
        return 1;
    }
    int nccl = 0;
    if (ncclGetVersion(&nccl) != ncclSuccess)
        nccl = 0;
    const char *s = getenv("DDPC_TEST_SEED");
    uint64_t seed = s ? strtoull(s, NULL, 10) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
    rng_state = seed ? seed : 1;
    printf("test_gpu: %d GPU(s), first %s; NCCL %d.%d.%d; seed %llu (DDPC_TEST_SEED to "
           "replay)\n", info.count, info.names[0], nccl / 10000, nccl / 100 % 100, nccl % 100,
           (unsigned long long)seed);
    result_line("probe", "PASS", "%d GPU(s), first %s; NCCL %d; seed %llu", info.count,
                info.names[0], nccl, (unsigned long long)seed);
    print_env(nccl);
    /* world 2 and 4 on however many GPUs there are: more ranks than GPUs
     * need NCCL >= 2.30 (tests/gpu/README.md) */
    g_share_ok = nccl >= 23000;
    size_t np = sizeof parts / sizeof parts[0];
    for (size_t i = 0; i <= np; i++) {
        struct part all = {"nccl-all", part_nccl_all, 40, g_gpus, "NCCL over every GPU"};
        const struct part *p = i < np ? &parts[i] : g_gpus > 4 ? &all : NULL;
        if (!p || !part_wanted(p->name))
            continue;
        if (!world_ok(p->world)) {
            /* reported, not run; the rest still runs: the first session on
             * a GPU should learn as much as it can from one call */
            parts_notrun++;
            printf("---- part %s: NOT RUN: world %d on %d GPU(s) needs ranks sharing a GPU, "
                   "which NCCL allows from 2.30 (NCCL_MULTI_RANK_GPU_ENABLE); this is NCCL "
                   "%d.%d.%d\n---> HINT: carry an NCCL >= 2.30 as .nccl/libnccl.so.2 "
                   "(tests/gpu/README.md)\n", p->name, p->world, g_gpus, nccl / 10000,
                   nccl / 100 % 100, nccl % 100);
            g_part = p->name;
            result_line("part", "NOTRUN", "world %d on %d GPU(s) needs NCCL >= 2.30, this is %d",
                        p->world, g_gpus, nccl);
            g_part = "main";
            continue;
        }
        run_part(p, b);
    }
    printf("test_gpu: %d part(s) passed, %d failed, %d not run here; %d failure(s) in all\n",
           parts_pass, parts_fail, parts_notrun, failures);
    result_line("summary", failures ? "FAIL" : parts_notrun ? "PARTIAL" : "PASS",
                "%d passed, %d failed, %d not run", parts_pass, parts_fail, parts_notrun);
    /* 0: everything ran and passed; 2: what ran passed, some could not run */
    return failures ? 1 : parts_notrun ? 2 : 0;
}
