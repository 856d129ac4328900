/* gpt_step.c - one GPT training step's forward + backward on the CPU
 * backend (runtime/model.c over ops_cpu), without data loading, the loss's
 * reduction across ranks or the optimizer: the model's own compute.
 *
 *   make build/bench/gpt_step
 *   OPENBLAS_NUM_THREADS=1 build/bench/gpt_step [steps] [V T L H C B]
 *       defaults: 20 steps of issue 15's bench model, vocab 256, block 128,
 *       4 layers, 4 heads, 128 wide, batch 16
 *
 * Prints the median step time, tokens/s, and where the time goes: the
 * backend's calls are wrapped and timed per layer-kernel kind and per gemm
 * entry point (all steps), so the profile needs no perf. The first step is
 * a warm-up, not counted.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "job.h"
#include "layers.h"
#include "model.h"
#include "ops.h"
#include "ops_kernels.h"
#include "rng.h"
#include "units.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- timing wrappers around the CPU backend (CPU time: the machine may be
 * shared, and wall time would count the waits) ---- */

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}


static struct ddpc_ops real;
static double t_kind[DDPC_LK_COUNT], t_gemm, t_batched, t_loss, t_other;
static int counting;

static int w_layer_kernel(struct ddpc_ops *o, int kind, size_t n, const struct ddpc_lk *a,
                          struct ddpc_err *e)
{
    double t0 = cpu_s();
    int rc = real.layer_kernel(o, kind, n, a, e);
    if (counting && kind >= 0 && kind < DDPC_LK_COUNT)
        t_kind[kind] += cpu_s() - t0;
    return rc;
}

static int w_gemm(struct ddpc_ops *o, int ta, int tb, int m, int n, int k, float alpha,
                  const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc,
                  struct ddpc_err *e)
{
    double t0 = cpu_s();
    int rc = real.gemm(o, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, e);
    if (counting)
        t_gemm += cpu_s() - t0;
    return rc;
}

static int w_gemm_batched(struct ddpc_ops *o, int ta, int tb, int m, int n, int k, float alpha,
                          const float *A, int lda, long long sa, const float *B, int ldb,
                          long long sb, float beta, float *C, int ldc, long long sc, int batch,
                          struct ddpc_err *e)
{
    double t0 = cpu_s();
    int rc = real.gemm_batched(o, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc,
                               sc, batch, e);
    if (counting)
        t_batched += cpu_s() - t0;
    return rc;
}

static int w_bias_act(struct ddpc_ops *o, float *z, const float *bias, float *a, int rows,
                      int cols, int act, struct ddpc_err *e)
{
    double t0 = cpu_s();
    int rc = real.bias_act_forward(o, z, bias, a, rows, cols, act, e);
    if (counting)
        t_other += cpu_s() - t0;
    return rc;
}

static int w_bias_grad(struct ddpc_ops *o, const float *dz, float *db, int rows, int cols,
                       float beta, struct ddpc_err *e)
{
    double t0 = cpu_s();
    int rc = real.bias_grad(o, dz, db, rows, cols, beta, e);
    if (counting)
        t_other += cpu_s() - t0;
    return rc;
}

static const char *kind_name(int k)
{
    static const char *const names[DDPC_LK_COUNT] = {
        [DDPC_LK_ACT_FWD] = "activation forward (gelu tanh)",
        [DDPC_LK_ACT_BWD] = "activation backward",
        [DDPC_LK_LN_FWD] = "layernorm forward",
        [DDPC_LK_LN_BWD_DX] = "layernorm backward dx",
        [DDPC_LK_LN_BWD_DW] = "layernorm backward dw, db",
        [DDPC_LK_ADD] = "residual add",
        [DDPC_LK_ACCUM] = "gradient copy / accumulate",
        [DDPC_LK_EMB_FWD] = "embedding forward",
        [DDPC_LK_EMB_BWD_WTE] = "embedding backward wte",
        [DDPC_LK_EMB_BWD_WPE] = "embedding backward wpe",
        [DDPC_LK_ATTN_SOFTMAX] = "attention softmax",
        [DDPC_LK_ATTN_SOFTMAX_BWD] = "attention softmax backward",
        [DDPC_LK_DROPOUT_FWD] = "dropout forward",
        [DDPC_LK_DROPOUT_BWD] = "dropout backward",
    };
    return names[k] ? names[k] : "other layer kernel";
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    /* steps, V, T, L, H, C, B: decimal, read as ./job reads its flags (units.h) */
    int64_t a[7] = { 20, 256, 128, 4, 4, 128, 16 };
    int bad = argc != 1 && argc != 2 && argc != 8;
    for (int i = 1; i < argc && !bad; i++)
        bad = units_flag_int(argv[i], 1, 1 << 24, &a[i - 1]) < 0;
    int steps = (int)a[0], V = (int)a[1], T = (int)a[2], L = (int)a[3], H = (int)a[4],
        C = (int)a[5], B = (int)a[6];
    if (bad) {
        fprintf(stderr, "usage: gpt_step [steps] [V T L H C B]\n");
        return 2;
    }
    if (steps < 1)
        steps = 1;
    static struct ddpc_job job;
    job.model.type = DDPC_MODEL_GPT;
    job.model.vocab_size = V;
    job.model.block_size = T;
    job.model.n_layer = L;
    job.model.n_head = H;
    job.model.n_embd = C;
    job.model.bias = 1;
    job.loss = DDPC_LOSS_CROSS_ENTROPY;
    struct ddpc_err e = { 0 };
    struct ddpc_ops o;
    static struct ddpc_model m;
    if (ops_cpu_init(&o, &e) < 0)
        return 1;
    real = o;
    o.layer_kernel = w_layer_kernel;
    o.gemm = w_gemm;
    o.gemm_batched = w_gemm_batched;
    o.bias_act_forward = w_bias_act;
    o.bias_grad = w_bias_grad;
    if (model_init(&m, &o, &job, B, &e) < 0 ||
        model_init_params(&m, DDPC_INIT_PYTORCH, 1, &e) < 0) {
        fprintf(stderr, "gpt_step: %s\n", e.msg);
        return 1;
    }
    int R = B * T;
    float *x = malloc((size_t)R * sizeof *x);
    int32_t *y = malloc((size_t)R * sizeof *y);
    double *times = malloc((size_t)steps * sizeof *times);
    double *cpus = malloc((size_t)steps * sizeof *cpus);
    if (!x || !y || !times || !cpus)
        return 1;
    struct ddpc_rng r;
    rng_seed(&r, 2);
    for (int i = 0; i < R; i++) {
        x[i] = (float)rng_below(&r, (uint64_t)V);
        y[i] = (int32_t)rng_below(&r, (uint64_t)V);
    }
    printf("gpt_step: vocab %d block %d layers %d heads %d width %d batch %d: %zu parameters\n",
           V, T, L, H, C, B, m.n_params);
    for (int s = 0; s <= steps; s++) {
        counting = s > 0;
        double t0 = now_s(), c0 = cpu_s();
        double acc[DDPC_LOSS_ACC] = { 0 };
        int rc = model_forward(&m, x, B, &e);
        double tl = cpu_s();
        if (rc == 0)
            rc = o.loss(&o, DDPC_LOSS_CROSS_ENTROPY, m.logits, y, NULL, m.dbuf[0], R, V,
                        1.0f / (float)R, acc, &e);
        if (counting)
            t_loss += cpu_s() - tl;
        if (rc < 0 || model_backward(&m, x, m.dbuf[0], B, 0, NULL, NULL, &e) < 0) {
            fprintf(stderr, "gpt_step: %s\n", e.msg);
            return 1;
        }
        if (s > 0) {
            times[s - 1] = now_s() - t0;
            cpus[s - 1] = cpu_s() - c0;
        }
        else
            printf("loss %.4f (ln V = %.4f)\n", acc[0] / R, __builtin_log((double)V));
    }
    double total = 0;
    for (int s = 0; s < steps; s++)
        total += times[s];
    qsort(times, (size_t)steps, sizeof *times, cmp_d);
    qsort(cpus, (size_t)steps, sizeof *cpus, cmp_d);
    double med = times[steps / 2], cmed = cpus[steps / 2];
    /* CPU time too: on a shared machine the wall time includes waiting */
    printf("forward+backward: median %.1f ms/step wall (min %.1f, max %.1f), %.1f ms CPU, "
           "over %d steps: %.0f tokens/s (wall), %.0f (CPU)\n", 1e3 * med, 1e3 * times[0],
           1e3 * times[steps - 1], 1e3 * cmed, steps, R / med, R / cmed);
    double ctotal = 0;
    for (int s = 0; s < steps; s++)
        ctotal += cpus[s];
    total = ctotal;   /* the profile is CPU time */
    printf("where the CPU time goes (all %d steps, %.0f ms):\n", steps, 1e3 * total);
    printf("  %-34s %8.1f ms %5.1f%%\n", "gemm (linears, lm_head)", 1e3 * t_gemm,
           100 * t_gemm / total);
    printf("  %-34s %8.1f ms %5.1f%%\n", "gemm_batched (attention)", 1e3 * t_batched,
           100 * t_batched / total);
    printf("  %-34s %8.1f ms %5.1f%%\n", "bias add / bias gradient", 1e3 * t_other,
           100 * t_other / total);
    printf("  %-34s %8.1f ms %5.1f%%\n", "cross-entropy", 1e3 * t_loss, 100 * t_loss / total);
    for (int k = 0; k < DDPC_LK_COUNT; k++)
        if (t_kind[k] > 0)
            printf("  %-34s %8.1f ms %5.1f%%\n", kind_name(k), 1e3 * t_kind[k],
                   100 * t_kind[k] / total);
    model_free(&m);
    o.destroy(&o);
    free(x);
    free(y);
    free(times);
    free(cpus);
    return 0;
}
