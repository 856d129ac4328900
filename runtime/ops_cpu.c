/* ops_cpu.c - the CPU math backend: OpenBLAS cblas_sgemm + loops over ops_kernels.h.
 *
 * Owns: ops_cpu_init and the struct ddpc_ops it fills. Memory is ordinary
 * host memory (64-byte aligned, zeroed). Every loop runs in a fixed order on
 * the calling thread, so results are bitwise reproducible as long as OpenBLAS
 * runs one thread per rank (the launcher sets that). Never allocates per call.
 *
 * Speed: the element-wise hot loops (optimizer, activations) are compiled in
 * AVX-512 / AVX2 / baseline clones picked at load time. That cannot change a
 * result: the loops are element-wise (no reassociation), and C11 mode keeps
 * fp-contract off, so every clone rounds exactly like ops_kernels.h's scalar
 * code. ops_cpu_init also sets flush-to-zero / denormals-are-zero for the
 * calling thread: Adam's moments of never-active inputs (Fashion-MNIST's
 * blank border pixels) decay into denormals, which are ~100x slower on x86.
 */
/* The Makefile compiles this file with -O3 and -fno-math-errno (which lets
 * sqrtf vectorize; it changes no value), ops_kernels.h's inline kernels
 * included. */
#include <cblas.h>
#include <float.h>
#if defined(__x86_64__) || defined(__i386__)
#include <pmmintrin.h>
#include <xmmintrin.h>
#endif
#include <stdlib.h>
#include <string.h>

#include "job.h"
#include "ops.h"
#include "ops_kernels.h"

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define DDPC_HOT __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define DDPC_HOT
#endif

static int cpu_alloc(struct ddpc_ops *o, void **p, size_t bytes, struct ddpc_err *e)
{
    *p = NULL;
    size_t rounded = (bytes + 63) / 64 * 64;
    if (rounded == 0)
        rounded = 64;
    void *q = NULL;
    if (posix_memalign(&q, 64, rounded) != 0)
        return DDPC_FAIL(e, DDPC_E_NOMEM, "cpu: cannot allocate %zu bytes", bytes);
    memset(q, 0, rounded);
    *p = q;
    return 0;
}

static void cpu_release(struct ddpc_ops *o, void *p)
{
    free(p);
}

static int cpu_copy(struct ddpc_ops *o, void *dst, const void *src, size_t bytes,
                    struct ddpc_err *e)
{
    if (bytes && dst != src)
        memmove(dst, src, bytes);
    return 0;
}

static int cpu_synchronize(struct ddpc_ops *o, struct ddpc_err *e)
{
    return 0;
}

static int cpu_gemm(struct ddpc_ops *o, int trans_a, int trans_b, int m, int n, int k,
                    float alpha, const float *A, int lda, const float *B, int ldb,
                    float beta, float *C, int ldc, struct ddpc_err *e)
{
    if (m < 0 || n < 0 || k < 0)
        return DDPC_FAIL(e, DDPC_E_INVALID, "cpu gemm: negative size m=%d n=%d k=%d", m, n, k);
    if (m == 0 || n == 0)
        return 0;
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, A, lda, B, ldb,
                beta, C, ldc);
    return 0;
}

/* One loop per activation so the switch in ddpc_k_act folds away. */
#define BIAS_ACT_LOOP(ACT)                                                   \
    for (int i = 0; i < rows; i++) {                                         \
        float *zr = z + (size_t)i * cols;                                    \
        float *ar = a + (size_t)i * cols;                                    \
        for (int j = 0; j < cols; j++) {                                     \
            float v = zr[j] + bias[j];                                       \
            zr[j] = v;                                                       \
            ar[j] = ddpc_k_act(ACT, v);                                      \
        }                                                                    \
    }

static int cpu_gemm_batched(struct ddpc_ops *o, int trans_a, int trans_b, int m, int n, int k,
                            float alpha, const float *A, int lda, long long stride_a,
                            const float *B, int ldb, long long stride_b, float beta, float *C,
                            int ldc, long long stride_c, int batch, struct ddpc_err *e)
{
    if (batch < 0)
        return DDPC_FAIL(e, DDPC_E_INVALID, "cpu gemm_batched: negative batch %d", batch);
    for (int b = 0; b < batch; b++)
        DDPC_TRY(cpu_gemm(o, trans_a, trans_b, m, n, k, alpha, A + b * stride_a, lda,
                          B + b * stride_b, ldb, beta, C + b * stride_c, ldc, e));
    return 0;
}

static int cpu_bias_act_forward(struct ddpc_ops *o, float *z, const float *bias, float *a,
                                int rows, int cols, int act, struct ddpc_err *e)
{
    if (a == z && act != DDPC_K_IDENTITY)
        return DDPC_FAIL(e, DDPC_E_INVALID, "bias_act_forward: a == z needs identity");
    switch (act) {
    case DDPC_K_RELU:     BIAS_ACT_LOOP(DDPC_K_RELU);     break;
    case DDPC_K_GELU:     BIAS_ACT_LOOP(DDPC_K_GELU);     break;
    case DDPC_K_TANH:     BIAS_ACT_LOOP(DDPC_K_TANH);     break;
    case DDPC_K_SIGMOID:  BIAS_ACT_LOOP(DDPC_K_SIGMOID);  break;
    case DDPC_K_IDENTITY: BIAS_ACT_LOOP(DDPC_K_IDENTITY); break;
    default:
        return DDPC_FAIL(e, DDPC_E_INVALID, "bias_act_forward: unknown activation %d", act);
    }
    return 0;
}

/* Out of place and in place are separate loops: with dz == da exactly,
 * GCC's runtime overlap check would send the shared loop down its scalar
 * path; restrict lets each vectorise. */
#define ACT_BACK_LOOP(ACT)                                                   \
    for (size_t i = 0; i < n; i++)                                           \
        dz[i] = da[i] * ddpc_k_act_grad(ACT, z[i]);
#define ACT_BACK_INPLACE(ACT)                                                \
    for (size_t i = 0; i < n; i++)                                           \
        d[i] *= ddpc_k_act_grad(ACT, z[i]);

DDPC_HOT static void act_back_inplace(const float *restrict z, float *restrict d, size_t n,
                                      int act)
{
    switch (act) {
    case DDPC_K_RELU:    ACT_BACK_INPLACE(DDPC_K_RELU);    break;
    case DDPC_K_GELU:    ACT_BACK_INPLACE(DDPC_K_GELU);    break;
    case DDPC_K_TANH:    ACT_BACK_INPLACE(DDPC_K_TANH);    break;
    case DDPC_K_SIGMOID: ACT_BACK_INPLACE(DDPC_K_SIGMOID); break;
    default:             break;
    }
}

DDPC_HOT static void act_back(const float *restrict z, const float *restrict da,
                              float *restrict dz, size_t n, int act)
{
    switch (act) {
    case DDPC_K_RELU:    ACT_BACK_LOOP(DDPC_K_RELU);    break;
    case DDPC_K_GELU:    ACT_BACK_LOOP(DDPC_K_GELU);    break;
    case DDPC_K_TANH:    ACT_BACK_LOOP(DDPC_K_TANH);    break;
    case DDPC_K_SIGMOID: ACT_BACK_LOOP(DDPC_K_SIGMOID); break;
    default:             break;
    }
}

static int cpu_act_backward(struct ddpc_ops *o, const float *z, const float *da, float *dz,
                            size_t n, int act, struct ddpc_err *e)
{
    if (act < DDPC_K_RELU || act > DDPC_K_IDENTITY)
        return DDPC_FAIL(e, DDPC_E_INVALID, "act_backward: unknown activation %d", act);
    if (act == DDPC_K_IDENTITY) {
        if (dz != da)
            memmove(dz, da, n * sizeof *dz);
    } else if (dz == da) {
        act_back_inplace(z, dz, n, act);
    } else {
        act_back(z, da, dz, n, act);
    }
    return 0;
}

static int cpu_bias_grad(struct ddpc_ops *o, const float *dz, float *db, int rows, int cols,
                         float beta, struct ddpc_err *e)
{
    if (beta == 0.0f)
        memset(db, 0, (size_t)cols * sizeof *db);
    else if (beta != 1.0f)
        for (int j = 0; j < cols; j++)
            db[j] *= beta;
    /* rows outer: unit-stride inner loop, fixed summation order */
    for (int i = 0; i < rows; i++) {
        const float *r = dz + (size_t)i * cols;
        for (int j = 0; j < cols; j++)
            db[j] += r[j];
    }
    return 0;
}

/* Per-sample loss summed into acc[0] (host memory: this backend's), the
 * correct count into acc[1]; a bad label fails at once (acc[2] stays 0):
 *   cross_entropy: logsumexp(x) - x[label]
 *   mse:           mean over cols of (x - y)^2, so that sum/rows is PyTorch's
 *                  reduction='mean' over all elements.
 * dlogits = grad_scale * d(per-sample loss)/dx. */
static int cpu_loss(struct ddpc_ops *o, int loss_type, const float *logits,
                    const int32_t *labels, const float *targets, float *dlogits, int rows,
                    int cols, float grad_scale, double *acc, struct ddpc_err *e)
{
    double loss_sum = 0.0;
    int64_t correct = 0;
    if (loss_type == DDPC_LOSS_CROSS_ENTROPY) {
        if (!labels)
            return DDPC_FAIL(e, DDPC_E_INVALID, "cross_entropy loss needs labels");
        for (int i = 0; i < rows; i++) {
            const float *x = logits + (size_t)i * cols;   /* [cols] */
            float *d = dlogits + (size_t)i * cols;        /* [cols] */
            int32_t y = labels[i];
            if (y < 0 || y >= cols)
                return DDPC_FAIL(e, DDPC_E_DATA,
                                 "label %d out of range for %d output classes; "
                                 "model.layers must end with the number of classes",
                                 (int)y, cols);
            int ok = 0;
            loss_sum += ddpc_k_xent_row(x, y, d, cols, grad_scale, &ok);
            correct += ok;
        }
    } else if (loss_type == DDPC_LOSS_MSE) {
        if (!targets)
            return DDPC_FAIL(e, DDPC_E_INVALID, "mse loss needs float targets");
        for (int i = 0; i < rows; i++)
            loss_sum += ddpc_k_mse_row(logits + (size_t)i * cols, targets + (size_t)i * cols,
                                       dlogits + (size_t)i * cols, cols, grad_scale);
    } else {
        return DDPC_FAIL(e, DDPC_E_INVALID, "unknown loss %d", loss_type);
    }
    if (acc) {
        acc[0] += loss_sum;
        acc[1] += (double)correct;
    }
    return 0;
}

static int cpu_sumsq(struct ddpc_ops *o, const float *x, size_t n, double *host_out,
                     struct ddpc_err *e)
{
    /* four partial sums in a fixed pattern: fast and still deterministic */
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += (double)x[i] * x[i];
        s1 += (double)x[i + 1] * x[i + 1];
        s2 += (double)x[i + 2] * x[i + 2];
        s3 += (double)x[i + 3] * x[i + 3];
    }
    for (; i < n; i++)
        s0 += (double)x[i] * x[i];
    *host_out = (s0 + s1) + (s2 + s3);
    return 0;
}

static int cpu_scale(struct ddpc_ops *o, float *x, size_t n, float s, struct ddpc_err *e)
{
    for (size_t i = 0; i < n; i++)
        x[i] *= s;
    return 0;
}

/* grad * gs is exact for gs == 1, so one loop serves both. */
DDPC_HOT static void sgd_loop(float *restrict p, const float *restrict g, float *restrict buf,
                              size_t n, float gs, float lr, float mu, int nesterov, float wd,
                              int first)
{
    if (mu == 0.0f) {
        for (size_t i = 0; i < n; i++)
            ddpc_k_sgd(&p[i], g[i] * gs, NULL, lr, 0.0f, 0, wd, 0);
    } else if (nesterov) {
        for (size_t i = 0; i < n; i++)
            ddpc_k_sgd(&p[i], g[i] * gs, &buf[i], lr, mu, 1, wd, first);
    } else {
        for (size_t i = 0; i < n; i++)
            ddpc_k_sgd(&p[i], g[i] * gs, &buf[i], lr, mu, 0, wd, first);
    }
}

DDPC_HOT static void adam_loop(float *restrict p, const float *restrict g, float *restrict m,
                               float *restrict v, size_t n, float gs, float b1, float b2,
                               float omb1, float omb2, float eps, float wd, int decoupled,
                               float decay, float step_size, float bc2_sqrt)
{
    if (decoupled) {
        for (size_t i = 0; i < n; i++)
            ddpc_k_adam_exact(&p[i], g[i] * gs, &m[i], &v[i], b1, b2, omb1, omb2, eps, wd, 1,
                              decay, step_size, bc2_sqrt);
    } else {
        for (size_t i = 0; i < n; i++)
            ddpc_k_adam_exact(&p[i], g[i] * gs, &m[i], &v[i], b1, b2, omb1, omb2, eps, wd, 0,
                              decay, step_size, bc2_sqrt);
    }
}

static int cpu_optim_step(struct ddpc_ops *o, const struct ddpc_optim_step *s, float *param,
                          const float *grad, float *m, float *v, size_t n, struct ddpc_err *e)
{
    switch (s->type) {
    case DDPC_K_SGD:
        if (s->momentum != 0.0f && !m)
            return DDPC_FAIL(e, DDPC_E_INVALID, "sgd with momentum needs a momentum buffer");
        sgd_loop(param, grad, m, n, s->grad_scale, s->lr, s->momentum, s->nesterov,
                 s->weight_decay, s->step <= 1);
        break;
    case DDPC_K_ADAM:
    case DDPC_K_ADAMW: {
        if (!m || !v)
            return DDPC_FAIL(e, DDPC_E_INVALID, "adam needs moment buffers");
        /* constants from the host (double, rounded once) or derived here */
        float omb1 = s->one_minus_beta1 != 0.0f ? s->one_minus_beta1 : 1.0f - s->beta1;
        float omb2 = s->one_minus_beta2 != 0.0f ? s->one_minus_beta2 : 1.0f - s->beta2;
        float ss = s->step_size != 0.0f ? s->step_size : s->lr / s->bias_correction1;
        float bq = s->bc2_sqrt != 0.0f ? s->bc2_sqrt : sqrtf(s->bias_correction2);
        float decay = s->decay != 0.0f ? s->decay : 1.0f - s->lr * s->weight_decay;
        adam_loop(param, grad, m, v, n, s->grad_scale, s->beta1, s->beta2, omb1, omb2, s->eps,
                  s->weight_decay, s->type == DDPC_K_ADAMW, decay, ss, bq);
        break;
    }
    default:
        return DDPC_FAIL(e, DDPC_E_INVALID, "unknown optimizer %d", s->type);
    }
    return 0;
}

static void cpu_destroy(struct ddpc_ops *o)
{
    (void)o;
}

/* Layer kernels: the element functions of ops_kernels.h, looped in index
 * order, except the hot ones below, which loop over rows instead of
 * dividing every index into coordinates. They compute every element with
 * the same arithmetic, in the same order of additions (col2im and pooling
 * add their terms in (ky, kx) order, as the element functions do), so the
 * results are the same bits. */
/* im2col of a stride-1 "same" convolution (output H x W, so 2P = K - 1,
 * as the CNN's 3 x 3 / padding 1): row (ky, kx) of the columns is the
 * plane shifted by (ky - P) rows and (kx - P) columns, so one copy per
 * (c, ky, kx) of every row that lies inside, then zeros where the shift
 * wraps around a row's edge and for the rows outside; not one short copy
 * per output row. */
static void im2col_same(const struct ddpc_lk *a)
{
    long H = a->H, W = a->W, P = a->P, hw = H * W;
    for (size_t nc = 0; nc < (size_t)a->N * a->C; nc++) {
        const float *x = a->x + nc * (size_t)hw;
        float *col = a->y + nc * (size_t)a->K * a->K * hw;
        for (long ky = 0; ky < a->K; ky++)
            for (long kx = 0; kx < a->K; kx++, col += hw) {
                long dy = ky - P, dx = kx - P;
                long y0 = dy < 0 ? -dy : 0, y1 = dy > 0 ? H - dy : H;   /* rows inside */
                long j0 = y0 * W, j1 = y1 * W, off = dy * W + dx;
                if (j0 > 0)
                    memset(col, 0, (size_t)j0 * sizeof *col);
                if (j1 < hw)
                    memset(col + j1, 0, (size_t)(hw - j1) * sizeof *col);
                /* col[j] = x[j + off], clamped to the plane: what the clamp
                 * cuts is wrapped columns, zeroed next */
                long s0 = j0 + off < 0 ? -off : j0, s1 = j1 + off > hw ? hw - off : j1;
                memcpy(col + s0, x + s0 + off, (size_t)(s1 - s0) * sizeof *col);
                for (long oy = y0; oy < y1 && dx != 0; oy++) {
                    float *r = col + oy * W;
                    for (long ox = dx < 0 ? 0 : W - dx; ox < (dx < 0 ? -dx : W); ox++)
                        r[ox] = 0.0f;
                }
            }
    }
}

static void cpu_im2col(const struct ddpc_lk *a)
{
    size_t ohw = (size_t)a->OH * a->OW, kk = (size_t)a->K * a->K;
    if (a->S == 1 && a->OH == a->H && a->OW == a->W && a->P < a->H && a->P < a->W) {
        im2col_same(a);
        return;
    }
    for (int n = 0; n < a->N; n++)
        for (int c = 0; c < a->C; c++) {
            const float *x = a->x + ((size_t)n * a->C + c) * a->H * a->W;
            float *col = a->y + ((size_t)n * a->C + c) * kk * ohw;
            for (int ky = 0; ky < a->K; ky++)
                for (int kx = 0; kx < a->K; kx++, col += ohw)
                    for (int oy = 0; oy < a->OH; oy++) {
                        int iy = oy * a->S - a->P + ky;
                        float *dst = col + (size_t)oy * a->OW;
                        if (iy < 0 || iy >= a->H) {
                            memset(dst, 0, (size_t)a->OW * sizeof *dst);
                            continue;
                        }
                        const float *row = x + (size_t)iy * a->W;
                        /* ox in [lo, hi) reads inside the row */
                        int lo = 0, hi = a->OW;
                        while (lo < hi && lo * a->S - a->P + kx < 0)
                            lo++;
                        while (hi > lo && (hi - 1) * a->S - a->P + kx >= a->W)
                            hi--;
                        for (int ox = 0; ox < lo; ox++)
                            dst[ox] = 0.0f;
                        const float *src = row + (lo * a->S - a->P + kx);
                        if (a->S == 1)
                            memcpy(dst + lo, src, (size_t)(hi - lo) * sizeof *dst);
                        else
                            for (int ox = lo; ox < hi; ox++)
                                dst[ox] = src[(ox - lo) * a->S];
                        for (int ox = hi; ox < a->OW; ox++)
                            dst[ox] = 0.0f;
                    }
        }
}

/* dx[n][c] (+)= the col entries that read each pixel, added in (ky, kx)
 * order into a zeroed plane, then into dx: the gather's sum, same bits. */
static void cpu_col2im(const struct ddpc_lk *a, float *plane)
{
    size_t ohw = (size_t)a->OH * a->OW, kk = (size_t)a->K * a->K, hw = (size_t)a->H * a->W;
    for (int n = 0; n < a->N; n++)
        for (int c = 0; c < a->C; c++) {
            const float *col = a->aux + ((size_t)n * a->C + c) * kk * ohw;
            float *dx = a->dx + ((size_t)n * a->C + c) * hw;
            float *acc = a->accx ? plane : dx;
            memset(acc, 0, hw * sizeof *acc);
            for (int ky = 0; ky < a->K; ky++)
                for (int kx = 0; kx < a->K; kx++, col += ohw)
                    for (int oy = 0; oy < a->OH; oy++) {
                        int iy = oy * a->S - a->P + ky;
                        if (iy < 0 || iy >= a->H)
                            continue;
                        float *row = acc + (size_t)iy * a->W;
                        const float *src = col + (size_t)oy * a->OW;
                        int lo = 0, hi = a->OW;
                        while (lo < hi && lo * a->S - a->P + kx < 0)
                            lo++;
                        while (hi > lo && (hi - 1) * a->S - a->P + kx >= a->W)
                            hi--;
                        float *dst = row + (lo * a->S - a->P + kx);
                        if (a->S == 1)
                            for (int ox = lo; ox < hi; ox++)
                                dst[ox - lo] += src[ox];
                        else
                            for (int ox = lo; ox < hi; ox++)
                                dst[(ox - lo) * a->S] += src[ox];
                    }
            if (a->accx)
                for (size_t i = 0; i < hw; i++)
                    dx[i] += plane[i];
        }
}

/* Max pooling 2 x 2, stride 2, no padding (the CNN's pooling): the element
 * function's three comparisons per window, in its order, as bit selects
 * instead of branches (a data-dependent branch mispredicts on half the
 * windows), so the same values and argmaxes, NaN propagating. Eight windows
 * of one output row at a time in GCC/Clang vector types (the rows here are
 * 14 and 7 wide: too short for the auto-vectorizer, which unrolls them into
 * branches); the rest of a row one window at a time, with the same
 * selects on the values' bits.
 * at0: the input index of the block's first window. */
enum { POOL2_B = 8 };
typedef float   v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

/* t ? a : b per lane, t all ones or all zeros (a macro: a function
 * returning a vector draws GCC's -Wpsabi note in the baseline clone) */
#define V8_SEL(t, a, b) (((a) & (t)) | ((b) & ~(t)))
/* the even and the odd lanes of a:b (__builtin_shufflevector: Clang, GCC >= 12) */
#if defined(__clang__) || __GNUC__ >= 12
#define V8_EVEN(a, b) __builtin_shufflevector(a, b, 0, 2, 4, 6, 8, 10, 12, 14)
#define V8_ODD(a, b)  __builtin_shufflevector(a, b, 1, 3, 5, 7, 9, 11, 13, 15)
/* a0 b0 a1 b1 ... a3 b3 and a4 b4 ... a7 b7: V8_EVEN/V8_ODD's inverse */
#define V8_ILO(a, b)  __builtin_shufflevector(a, b, 0, 8, 1, 9, 2, 10, 3, 11)
#define V8_IHI(a, b)  __builtin_shufflevector(a, b, 4, 12, 5, 13, 6, 14, 7, 15)
#else
#define V8_EVEN(a, b) __builtin_shuffle(a, b, (v8i){ 0, 2, 4, 6, 8, 10, 12, 14 })
#define V8_ODD(a, b)  __builtin_shuffle(a, b, (v8i){ 1, 3, 5, 7, 9, 11, 13, 15 })
#define V8_ILO(a, b)  __builtin_shuffle(a, b, (v8i){ 0, 8, 1, 9, 2, 10, 3, 11 })
#define V8_IHI(a, b)  __builtin_shuffle(a, b, (v8i){ 4, 12, 5, 13, 6, 14, 7, 15 })
#endif

static inline void pool2_block(const float *r0, const float *r1, float *y, int32_t *idx,
                               int32_t at0, int32_t W)
{
    v8f a0, a1, b0, b1;
    memcpy(&a0, r0, sizeof a0);
    memcpy(&a1, r0 + POOL2_B, sizeof a1);
    memcpy(&b0, r1, sizeof b0);
    memcpy(&b1, r1 + POOL2_B, sizeof b1);
    v8f x00 = V8_EVEN(a0, a1), x01 = V8_ODD(a0, a1);
    v8f x10 = V8_EVEN(b0, b1), x11 = V8_ODD(b0, b1);
    v8i at = (v8i){ 0, 2, 4, 6, 8, 10, 12, 14 } + at0;
    v8i best = (v8i)x00, arg = at;
    v8i t = (x01 > (v8f)best) | (x01 != x01);
    best = V8_SEL(t, (v8i)x01, best);
    arg = V8_SEL(t, at + 1, arg);
    t = (x10 > (v8f)best) | (x10 != x10);
    best = V8_SEL(t, (v8i)x10, best);
    arg = V8_SEL(t, at + W, arg);
    t = (x11 > (v8f)best) | (x11 != x11);
    best = V8_SEL(t, (v8i)x11, best);
    arg = V8_SEL(t, at + (W + 1), arg);
    memcpy(y, &best, sizeof best);
    memcpy(idx, &arg, sizeof arg);
}

/* The rest of one output row, from ox: the block's selects on bits, one
 * window at a time. */
static void pool2_row_scalar(const float *r0, const float *r1, float *yr, int32_t *ir,
                             int32_t row0, int W, int ox, int OW)
{
    for (; ox < OW; ox++) {
        int32_t at = row0 + 2 * ox, arg = at;
        float best = r0[2 * ox];
        const float v[3] = { r0[2 * ox + 1], r1[2 * ox], r1[2 * ox + 1] };
        const int32_t off[3] = { 1, W, W + 1 };
        for (int k = 0; k < 3; k++) {
            uint32_t t = -(uint32_t)((v[k] > best) | (v[k] != v[k])), bb, vb;
            memcpy(&bb, &best, sizeof bb);
            memcpy(&vb, &v[k], sizeof vb);
            bb = (vb & t) | (bb & ~t);
            memcpy(&best, &bb, sizeof best);
            arg = (int32_t)(((uint32_t)(at + off[k]) & t) | ((uint32_t)arg & ~t));
        }
        yr[ox] = best;
        ir[ox] = arg;
    }
}

/* planes planes of H x W in, OH x OW out (2 OH <= H, 2 OW <= W). A row
 * shorter than a block, or its last partial block, is one block that
 * reads on into the rows after it and writes on into the next output row,
 * which is computed after it and overwrites those lanes; a partial last
 * block starts at OW - 8 instead and recomputes windows already done, to
 * the same values. The call's last output row, which has nothing after it
 * to read or overwrite, and short rows near the end, whose block would
 * reach past it, take the scalar path. */
DDPC_HOT static void pool2_max_planes(const float *restrict x, float *restrict y,
                                      int32_t *restrict idx, int H, int W, int OH, int OW,
                                      size_t planes)
{
    size_t rows = planes * (size_t)OH, x_len = planes * (size_t)H * W;
    for (size_t r = 0; r < rows; r++) {
        size_t pl = r / (size_t)OH;
        int oy = (int)(r % (size_t)OH);
        size_t at_x = pl * (size_t)H * W + (size_t)2 * oy * W;
        const float *r0 = x + at_x, *r1 = r0 + W;
        float *yr = y + r * OW;
        int32_t *ir = idx + r * OW;
        int32_t row0 = 2 * oy * W;
        int inside = x_len - at_x >= (size_t)W + 2 * POOL2_B && (rows - r) * OW >= POOL2_B;
        if (r + 1 == rows || (OW < POOL2_B && !inside)) {
            int ox = 0;
            for (; ox + POOL2_B <= OW; ox += POOL2_B)
                pool2_block(r0 + 2 * ox, r1 + 2 * ox, yr + ox, ir + ox, row0 + 2 * ox, W);
            pool2_row_scalar(r0, r1, yr, ir, row0, W, ox, OW);
            continue;
        }
        if (OW < POOL2_B) {
            pool2_block(r0, r1, yr, ir, row0, W);
            continue;
        }
        int ox = 0;
        for (; ox + POOL2_B <= OW; ox += POOL2_B)
            pool2_block(r0 + 2 * ox, r1 + 2 * ox, yr + ox, ir + ox, row0 + 2 * ox, W);
        if (ox < OW) {
            ox = OW - POOL2_B;
            pool2_block(r0 + 2 * ox, r1 + 2 * ox, yr + ox, ir + ox, row0 + 2 * ox, W);
        }
    }
}

/* Backward of 2 x 2 / stride 2 max pooling over planes of exactly
 * 2 OH x 2 OW: every input written once, the window's gradient where the
 * forward's argmax is and +0 elsewhere, so no zeroing pass and no
 * scattered adds. 0 + dy, as the generic path's add into a zeroed plane,
 * so a -0 gradient arrives as +0 there too. pooled (the pooling of a
 * ReLU's output, DDPC_LK_POOL_BWD's aux): that times ReLU's gradient, as
 * the element function. Short rows and partial last
 * blocks as pool2_max_planes: a block that writes on into the rows after
 * it is overwritten by theirs; the end of the call goes window by window. */
static inline void pool2_back_block(const float *dy, const int32_t *idx, const float *pooled,
                                    float *d0, float *d1, int32_t at0, int32_t W)
{
    v8f d, zero = { 0 };
    v8i a;
    memcpy(&d, dy, sizeof d);
    memcpy(&a, idx, sizeof a);
    d = d + zero;
    if (pooled) {   /* times ReLU's gradient, 1 where the pooled output is > 0 */
        v8f p, one = { 1, 1, 1, 1, 1, 1, 1, 1 };
        memcpy(&p, pooled, sizeof p);
        d = d * (v8f)V8_SEL(p > zero, (v8i)one, (v8i)zero);
    }
    v8i at = (v8i){ 0, 2, 4, 6, 8, 10, 12, 14 } + at0;
    v8i z = (v8i)zero, dv = (v8i)d;
    v8f t00 = (v8f)V8_SEL(a == at, dv, z), t01 = (v8f)V8_SEL(a == at + 1, dv, z);
    v8f t10 = (v8f)V8_SEL(a == at + W, dv, z), t11 = (v8f)V8_SEL(a == at + (W + 1), dv, z);
    v8f top_lo = V8_ILO(t00, t01), top_hi = V8_IHI(t00, t01);
    v8f bot_lo = V8_ILO(t10, t11), bot_hi = V8_IHI(t10, t11);
    memcpy(d0, &top_lo, sizeof top_lo);
    memcpy(d0 + POOL2_B, &top_hi, sizeof top_hi);
    memcpy(d1, &bot_lo, sizeof bot_lo);
    memcpy(d1 + POOL2_B, &bot_hi, sizeof bot_hi);
}

DDPC_HOT static void pool2_back_planes(const float *restrict dy, const int32_t *restrict idx,
                                       const float *restrict pooled, float *restrict dx, int OH,
                                       int OW, size_t planes)
{
    int W = 2 * OW;
    size_t rows = planes * (size_t)OH;
    for (size_t r = 0; r < rows; r++) {
        int oy = (int)(r % (size_t)OH);
        const float *dyr = dy + r * OW;
        const int32_t *ir = idx + r * OW;
        const float *pr = pooled ? pooled + r * OW : NULL;
        float *d0 = dx + r * 2 * (size_t)W, *d1 = d0 + W;
        int32_t row0 = 2 * oy * W;
        /* a block reads 8 outputs and writes 16 floats from d1 */
        int inside = (rows - r) * OW >= POOL2_B && (rows - r) * 2 * (size_t)W >= (size_t)W + 2 * POOL2_B;
        if (OW < POOL2_B && inside) {
            pool2_back_block(dyr, ir, pr, d0, d1, row0, W);
            continue;
        }
        int ox = 0;
        for (; ox + POOL2_B <= OW; ox += POOL2_B)
            pool2_back_block(dyr + ox, ir + ox, pr ? pr + ox : NULL, d0 + 2 * ox, d1 + 2 * ox,
                             row0 + 2 * ox, W);
        if (ox < OW && OW >= POOL2_B) {
            ox = OW - POOL2_B;
            pool2_back_block(dyr + ox, ir + ox, pr ? pr + ox : NULL, d0 + 2 * ox, d1 + 2 * ox,
                             row0 + 2 * ox, W);
            continue;
        }
        for (; ox < OW; ox++) {
            int32_t at = row0 + 2 * ox;
            float v = dyr[ox] + 0.0f;
            if (pr)
                v *= ddpc_k_act_grad(DDPC_K_RELU, pr[ox]);
            d0[2 * ox] = ir[ox] == at ? v : 0.0f;
            d0[2 * ox + 1] = ir[ox] == at + 1 ? v : 0.0f;
            d1[2 * ox] = ir[ox] == at + W ? v : 0.0f;
            d1[2 * ox + 1] = ir[ox] == at + W + 1 ? v : 0.0f;
        }
    }
}

/* ---- 3 x 3 convolutions, stride 1, padding 1, by Winograd's F(2x2, 3x3) ----
 *
 * Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks"
 * (2016): each 2 x 2 block of outputs is A^T [(G g G^T) . (B^T d B)] A for
 * the 4 x 4 input tile d around it, so the reduction over input channels
 * becomes 16 gemms [out x in] . [in x tiles], 2.25x fewer multiplies than
 * im2col's [out x in*9] . [in*9 x pixels]. The transforms are additions
 * (and G's halvings) in fp32: the results differ from im2col's by
 * rounding (about 4e-7 relative for the CNN's second layer),
 * deterministically.
 *
 * Layouts, for a chunk of n samples of T = TH x TW tiles, rows of
 * ldv = n T + WINO_B floats (the slack takes a tile block's spare lanes):
 * U[16][out][in] (the filters, once per call), V[in][16][ldv] and
 * M[out][16][ldv], so the 16 values of one channel's tile sit near each
 * other for the transforms and gemm xi reads rows xi of each with a
 * stride of 16 ldv. */
/* A chunk's V and M stay within about 1 MiB, so they are still in L2
 * between the input transform, the gemms and the output transform: on
 * the CNN's second layer (300 KB a sample) 3 samples; measured there,
 * 1 to 4 samples a chunk ran 3,800-3,900 samples/s, 8 ran 3,580, 16
 * ran 3,180 and 32 ran 3,060 (one worker, 200 steps of 64). */
enum { WINO_CHUNK_FLOATS = 256 * 1024, WINO_B = 8 };

/* U from w, [out][in][3][3]; flip: w is the forward layer's [in][out]
 * weights and each filter is rotated by 180 degrees (what the input
 * gradient of that layer convolves with). */
static void wino_filters(const float *w, float *U, int out, int in, int flip)
{
    size_t plane = (size_t)out * in;
    for (int o = 0; o < out; o++)
        for (int c = 0; c < in; c++) {
            float g[3][3];
            const float *src = flip ? w + ((size_t)c * out + o) * 9 : w + ((size_t)o * in + c) * 9;
            for (int i = 0; i < 3; i++)
                for (int j = 0; j < 3; j++)
                    g[i][j] = flip ? src[(2 - i) * 3 + (2 - j)] : src[i * 3 + j];
            float t[4][3];
            for (int j = 0; j < 3; j++) {
                t[0][j] = g[0][j];
                t[1][j] = 0.5f * (g[0][j] + g[1][j] + g[2][j]);
                t[2][j] = 0.5f * (g[0][j] - g[1][j] + g[2][j]);
                t[3][j] = g[2][j];
            }
            float *u = U + (size_t)o * in + c;
            for (int i = 0; i < 4; i++) {
                u[(size_t)(4 * i + 0) * plane] = t[i][0];
                u[(size_t)(4 * i + 1) * plane] = 0.5f * (t[i][0] + t[i][1] + t[i][2]);
                u[(size_t)(4 * i + 2) * plane] = 0.5f * (t[i][0] - t[i][1] + t[i][2]);
                u[(size_t)(4 * i + 3) * plane] = t[i][2];
            }
        }
}

/* Floats of wino_inputs' scratch: the padded plane and four rows, each
 * row with room for the last tile block's loads. */
static size_t wino_pad_floats(int TH, int TW)
{
    size_t Q = 2 * (size_t)TW + 2 + 2 * WINO_B + 2;
    return (2 * (size_t)TH + 2 + 4) * Q;
}

/* V for samples x[n][in][H][W]: each plane copied once inside a zero
 * border, then per tile row B^T down its four padded rows (whole rows,
 * a loop that vectorizes) and B across the tiles, WINO_B tiles at a time
 * from the rows' even and odd columns. A block's lanes past the row's
 * last tile land where the next tile row (or the row's slack) is written
 * after it. */
DDPC_HOT static void wino_inputs(const float *restrict x, float *restrict V, int n, int in,
                                 int H, int W, int TH, int TW, size_t ldv, float *restrict pad)
{
    size_t T = (size_t)TH * TW;
    size_t Q = 2 * (size_t)TW + 2 + 2 * WINO_B + 2, R = 2 * (size_t)TH + 2;
    float *t = pad + R * Q;   /* 4 rows of Q */
    memset(pad, 0, (R + 4) * Q * sizeof *pad);
    for (int s = 0; s < n; s++)
        for (int c = 0; c < in; c++) {
            const float *xp = x + ((size_t)s * in + c) * H * W;
            for (int r = 0; r < H; r++)
                memcpy(pad + (size_t)(r + 1) * Q + 1, xp + (size_t)r * W, (size_t)W * sizeof *xp);
            float *vc = V + (size_t)c * 16 * ldv + (size_t)s * T;
            for (int ty = 0; ty < TH; ty++) {
                const float *d0 = pad + (size_t)2 * ty * Q, *d1 = d0 + Q, *d2 = d1 + Q, *d3 = d2 + Q;
                /* whole vectors (the rows' slack takes the last one's
                 * spare lanes), stored as the vectors the loads below
                 * read back: scalar stores there stall the loads */
                for (size_t q = 0; q < 2 * (size_t)TW + 2; q += 8) {
                    v8f a, b, c2, d;
                    memcpy(&a, d0 + q, sizeof a);
                    memcpy(&b, d1 + q, sizeof b);
                    memcpy(&c2, d2 + q, sizeof c2);
                    memcpy(&d, d3 + q, sizeof d);
                    v8f r0 = a - c2, r1 = b + c2, r2 = c2 - b, r3 = b - d;
                    memcpy(t + q, &r0, sizeof r0);
                    memcpy(t + Q + q, &r1, sizeof r1);
                    memcpy(t + 2 * Q + q, &r2, sizeof r2);
                    memcpy(t + 3 * Q + q, &r3, sizeof r3);
                }
                for (int i = 0; i < 4; i++) {
                    const float *ti = t + (size_t)i * Q;
                    float *v = vc + (size_t)(4 * i) * ldv + (size_t)ty * TW;
                    for (int tx = 0; tx < TW; tx += WINO_B) {
                        v8f a0, a1, b0, b1;
                        memcpy(&a0, ti + 2 * tx, sizeof a0);
                        memcpy(&a1, ti + 2 * tx + 8, sizeof a1);
                        memcpy(&b0, ti + 2 * tx + 2, sizeof b0);
                        memcpy(&b1, ti + 2 * tx + 10, sizeof b1);
                        v8f e0 = V8_EVEN(a0, a1), o0 = V8_ODD(a0, a1);
                        v8f e1 = V8_EVEN(b0, b1), o1 = V8_ODD(b0, b1);
                        v8f r0 = e0 - e1, r1 = o0 + e1, r2 = e1 - o0, r3 = o0 - o1;
                        memcpy(v + tx, &r0, sizeof r0);
                        memcpy(v + ldv + tx, &r1, sizeof r1);
                        memcpy(v + 2 * ldv + tx, &r2, sizeof r2);
                        memcpy(v + 3 * ldv + tx, &r3, sizeof r3);
                    }
                }
            }
        }
}

/* y[n][out][H][W] (+)= A^T m A for each tile of M, WINO_B tiles at a time
 * (lanes past the row's last tile read the slack or the next tile row,
 * and are not stored). */
DDPC_HOT static void wino_outputs(const float *restrict M, float *restrict y, int n, int out,
                                  int H, int W, int TH, int TW, size_t ldv, int acc,
                                  const float *restrict bias, int relu)
{
    size_t T = (size_t)TH * TW;
    for (int s = 0; s < n; s++)
        for (int o = 0; o < out; o++) {
            float *yp = y + ((size_t)s * out + o) * H * W;
            const float *mo = M + (size_t)o * 16 * ldv + (size_t)s * T;
            for (int ty = 0; ty < TH; ty++)
                for (int tx0 = 0; tx0 < TW; tx0 += WINO_B) {
                    const float *m = mo + (size_t)ty * TW + tx0;
                    v8f a[16];
                    for (int xi = 0; xi < 16; xi++)
                        memcpy(&a[xi], m + (size_t)xi * ldv, sizeof a[xi]);
                    v8f r0[4], r1[4];
                    for (int j = 0; j < 4; j++) {
                        r0[j] = a[j] + a[4 + j] + a[8 + j];
                        r1[j] = a[4 + j] - a[8 + j] - a[12 + j];
                    }
                    float q[4][WINO_B];   /* rows 0, 1 of the block: even, odd columns */
                    v8f q00 = r0[0] + r0[1] + r0[2], q01 = r0[1] - r0[2] - r0[3];
                    v8f q10 = r1[0] + r1[1] + r1[2], q11 = r1[1] - r1[2] - r1[3];
                    if (bias) {   /* the layer's bias (and ReLU), as CHAN_BIAS_ACT would */
                        q00 += bias[o];
                        q01 += bias[o];
                        q10 += bias[o];
                        q11 += bias[o];
                    }
                    if (relu) {
                        v8f zero = { 0 };
                        q00 = (v8f)V8_SEL(q00 > zero, (v8i)q00, (v8i)zero);
                        q01 = (v8f)V8_SEL(q01 > zero, (v8i)q01, (v8i)zero);
                        q10 = (v8f)V8_SEL(q10 > zero, (v8i)q10, (v8i)zero);
                        q11 = (v8f)V8_SEL(q11 > zero, (v8i)q11, (v8i)zero);
                    }
                    memcpy(q[0], &q00, sizeof q00);
                    memcpy(q[1], &q01, sizeof q01);
                    memcpy(q[2], &q10, sizeof q10);
                    memcpy(q[3], &q11, sizeof q11);
                    int nt = TW - tx0 < WINO_B ? TW - tx0 : WINO_B;
                    for (int i = 0; i < 2 && 2 * ty + i < H; i++) {
                        float *yr = yp + (size_t)(2 * ty + i) * W + 2 * tx0;
                        const float *ev = q[2 * i], *od = q[2 * i + 1];
                        int full = 2 * (tx0 + nt) <= W ? nt : nt - 1;   /* odd W: no last odd column */
                        if (acc) {
                            for (int k = 0; k < full; k++) {
                                yr[2 * k] += ev[k];
                                yr[2 * k + 1] += od[k];
                            }
                            if (full < nt)
                                yr[2 * full] += ev[full];
                        } else {
                            for (int k = 0; k < full; k++) {
                                yr[2 * k] = ev[k];
                                yr[2 * k + 1] = od[k];
                            }
                            if (full < nt)
                                yr[2 * full] = ev[full];
                        }
                    }
                }
        }
}

/* How conv3x3 and conv3x3_wgrad lay out their scratch ws: 16 x out x in
 * filter-domain floats (U, or the weight gradient's sums), wino_inputs'
 * pad, then a chunk's V and M (or D): 16 (in + out) rows of c T + WINO_B
 * floats for chunks of c samples. */
struct wino_plan {
    int    TH, TW;      /* tiles down and across a plane */
    size_t T;           /* tiles per plane */
    int    chunk;       /* samples per chunk */
    float *filt, *pad, *V;
};

/* 0, or 1 when ws_floats cannot hold a chunk of one sample. */
static int wino_plan_of(struct wino_plan *p, int in, int out, int H, int W, float *ws,
                        size_t ws_floats)
{
    p->TH = (H + 1) / 2;
    p->TW = (W + 1) / 2;
    p->T = (size_t)p->TH * p->TW;
    size_t nfilt = 16 * (size_t)out * in, npad = wino_pad_floats(p->TH, p->TW);
    size_t fixed = nfilt + npad + 16 * (size_t)(in + out) * WINO_B;
    size_t per = 16 * (size_t)(in + out) * p->T;
    if (ws_floats < fixed + per)
        return 1;
    size_t fit = (ws_floats - fixed) / per, want = WINO_CHUNK_FLOATS / per;
    p->chunk = (int)(want < 1 ? 1 : want < fit ? want : fit);
    p->filt = ws;
    p->pad = ws + nfilt;
    p->V = p->pad + npad;
    return 0;
}

/* See ops.h. */
static int cpu_conv3x3(struct ddpc_ops *o, const float *x, const float *w, float *y, int n,
                       int in, int out, int H, int W, int flip, int acc, const float *bias,
                       int relu, float *ws, size_t ws_floats, struct ddpc_err *e)
{
    struct wino_plan p;
    if (n <= 0)
        return 0;
    if (acc && (bias || relu))
        return DDPC_FAIL(e, DDPC_E_INVALID, "conv3x3: bias and ReLU apply to a written "
                         "output, not an added one");
    if (wino_plan_of(&p, in, out, H, W, ws, ws_floats))
        return 1;   /* not enough scratch: the caller's im2col path */
    int TH = p.TH, TW = p.TW, chunk = p.chunk;
    size_t T = p.T;
    float *U = p.filt, *pad = p.pad, *V = p.V;
    wino_filters(w, U, out, in, flip);
    for (int s0 = 0; s0 < n; s0 += chunk) {
        int c = n - s0 < chunk ? n - s0 : chunk;
        size_t nt = (size_t)c * T, ldv = nt + WINO_B;
        float *M = V + 16 * (size_t)in * ldv;
        wino_inputs(x + (size_t)s0 * in * H * W, V, c, in, H, W, TH, TW, ldv, pad);
        for (int xi = 0; xi < 16; xi++)
            DDPC_TRY(cpu_gemm(o, 0, 0, out, (int)nt, in, 1.0f, U + (size_t)xi * out * in, in,
                              V + (size_t)xi * ldv, (int)(16 * ldv), 0.0f, M + (size_t)xi * ldv,
                              (int)(16 * ldv), e));
        wino_outputs(M, y + (size_t)s0 * out * H * W, c, out, H, W, TH, TW, ldv, acc, bias,
                     relu);
    }
    return 0;
}

/* D[out][16][ldv] = A g A^T for each 2 x 2 block g of dy[n][out][H][W]
 * (zero past the plane's edge), WINO_B tiles at a time: the adjoint of
 * wino_outputs' A^T m A, for the weight gradient. pad: 2 TH rows of
 * Q = 2 TW + 20 floats (inside wino_pad_floats). */
DDPC_HOT static void wino_grads(const float *restrict dy, float *restrict D, int n, int out,
                                int H, int W, int TH, int TW, size_t ldv, float *restrict pad)
{
    size_t T = (size_t)TH * TW, Q = 2 * (size_t)TW + 2 + 2 * WINO_B + 2;
    memset(pad, 0, 2 * (size_t)TH * Q * sizeof *pad);
    for (int s = 0; s < n; s++)
        for (int o = 0; o < out; o++) {
            const float *dp = dy + ((size_t)s * out + o) * H * W;
            for (int r = 0; r < H; r++)
                memcpy(pad + (size_t)r * Q, dp + (size_t)r * W, (size_t)W * sizeof *dp);
            float *dc = D + (size_t)o * 16 * ldv + (size_t)s * T;
            for (int ty = 0; ty < TH; ty++) {
                const float *r0 = pad + (size_t)2 * ty * Q, *r1 = r0 + Q;
                float *d = dc + (size_t)ty * TW;
                for (int tx = 0; tx < TW; tx += WINO_B) {
                    v8f a0, a1, b0, b1;
                    memcpy(&a0, r0 + 2 * tx, sizeof a0);
                    memcpy(&a1, r0 + 2 * tx + 8, sizeof a1);
                    memcpy(&b0, r1 + 2 * tx, sizeof b0);
                    memcpy(&b1, r1 + 2 * tx + 8, sizeof b1);
                    v8f g00 = V8_EVEN(a0, a1), g01 = V8_ODD(a0, a1);
                    v8f g10 = V8_EVEN(b0, b1), g11 = V8_ODD(b0, b1);
                    /* A down the block's two rows, then across */
                    v8f u[4][2] = { { g00, g01 }, { g00 + g10, g01 + g11 },
                                    { g00 - g10, g01 - g11 }, { -g10, -g11 } };
                    for (int i = 0; i < 4; i++) {
                        v8f q[4] = { u[i][0], u[i][0] + u[i][1], u[i][0] - u[i][1], -u[i][1] };
                        for (int j = 0; j < 4; j++)
                            memcpy(d + (size_t)(4 * i + j) * ldv + tx, &q[j], sizeof q[j]);
                    }
                }
            }
        }
}

/* See ops.h. */
static int cpu_conv3x3_wgrad(struct ddpc_ops *o, const float *x, const float *dy, float *dw,
                             int n, int in, int out, int H, int W, int acc, float *ws,
                             size_t ws_floats, struct ddpc_err *e)
{
    struct wino_plan p;
    if (n <= 0)
        return 0;
    if (wino_plan_of(&p, in, out, H, W, ws, ws_floats))
        return 1;
    int TH = p.TH, TW = p.TW, chunk = p.chunk;
    size_t T = p.T;
    float *Mw = p.filt, *pad = p.pad, *V = p.V;
    /* Mw[xi][o][c] = sum over tiles of D[o][xi] . V[c][xi] */
    for (int s0 = 0; s0 < n; s0 += chunk) {
        int c = n - s0 < chunk ? n - s0 : chunk;
        size_t nt = (size_t)c * T, ldv = nt + WINO_B;
        float *D = V + 16 * (size_t)in * ldv;
        wino_inputs(x + (size_t)s0 * in * H * W, V, c, in, H, W, TH, TW, ldv, pad);
        wino_grads(dy + (size_t)s0 * out * H * W, D, c, out, H, W, TH, TW, ldv, pad);
        for (int xi = 0; xi < 16; xi++)
            DDPC_TRY(cpu_gemm(o, 0, 1, out, in, (int)nt, 1.0f, D + (size_t)xi * ldv,
                              (int)(16 * ldv), V + (size_t)xi * ldv, (int)(16 * ldv),
                              s0 == 0 ? 0.0f : 1.0f, Mw + (size_t)xi * out * in, in, e));
    }
    /* dw = G^T Mw G, the adjoint of wino_filters' G g G^T */
    size_t plane = (size_t)out * in;
    for (size_t oc = 0; oc < plane; oc++) {
        float m[4][4], t[3][4];
        for (int xi = 0; xi < 16; xi++)
            m[xi / 4][xi % 4] = Mw[(size_t)xi * plane + oc];
        for (int j = 0; j < 4; j++) {
            t[0][j] = m[0][j] + 0.5f * (m[1][j] + m[2][j]);
            t[1][j] = 0.5f * (m[1][j] - m[2][j]);
            t[2][j] = 0.5f * (m[1][j] + m[2][j]) + m[3][j];
        }
        float *g = dw + oc * 9;
        for (int i = 0; i < 3; i++) {
            float v[3] = { t[i][0] + 0.5f * (t[i][1] + t[i][2]), 0.5f * (t[i][1] - t[i][2]),
                           0.5f * (t[i][1] + t[i][2]) + t[i][3] };
            for (int j = 0; j < 3; j++)
                g[i * 3 + j] = acc ? g[i * 3 + j] + v[j] : v[j];
        }
    }
    return 0;
}

/* ReLU, ddpc_k_act's expression without its switch. */
DDPC_HOT static void relu_loop(const float *restrict x, float *restrict y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

/* Per-channel bias then ReLU, rows of len: y += b; t = relu(y). In place
 * (t == y, a convolution computed in its ReLU's buffer): y = relu(y + b),
 * a loop of its own, as restrict forbids the two to alias. */
DDPC_HOT static void bias_relu_rows_inplace(float *restrict y, const float *w, size_t rows,
                                            size_t len, int C)
{
    for (size_t r = 0; r < rows; r++) {
        float b = w[r % (size_t)C], *yr = y + r * len;
        for (size_t k = 0; k < len; k++) {
            float v = yr[k] + b;
            yr[k] = v > 0.0f ? v : 0.0f;
        }
    }
}

DDPC_HOT static void bias_relu_rows(float *restrict y, float *restrict t, const float *w,
                                    size_t rows, size_t len, int C)
{
    for (size_t r = 0; r < rows; r++) {
        float b = w[r % (size_t)C];
        float *yr = y + r * len, *tr = t + r * len;
        for (size_t k = 0; k < len; k++) {
            float v = yr[k] + b;
            yr[k] = v;
            tr[k] = v > 0.0f ? v : 0.0f;
        }
    }
}

/* db[c] (+)= sum over n, s of dy[n][c][s], accumulated in double in the
 * element function's order (n, then s) for each channel: that order is a
 * chain of dependent additions, so eight channels' chains run side by side
 * as the eight lanes of one vector (the same additions, each chain in its
 * own order: the same bits). chan_sums8 adds N samples of G groups of
 * eight channels' planes of H floats (channel stride H, sample stride C H)
 * into sums[8 G]: eight consecutive s of the eight channels are loaded as
 * rows and transposed in registers, so each step adds the eight channels'
 * next value; the G groups' vectors are independent chains, whose adds
 * overlap (one chain waits on each add's latency); the rest of a plane
 * goes value by value. */
typedef double v8d __attribute__((vector_size(64)));
#if defined(__clang__) || __GNUC__ >= 12
#define V8_SHUF(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define V8_SHUF(a, b, ...) __builtin_shuffle(a, b, (v8i){ __VA_ARGS__ })
#endif
enum { SUM_GROUPS = 4 };   /* groups of 8 channels summed side by side */
DDPC_HOT static void chan_sums8(const float *restrict dy, double *restrict sums, int N,
                                size_t C, size_t H, int G)
{
    v8d acc[SUM_GROUPS];
    memcpy(acc, sums, (size_t)G * sizeof acc[0]);
    for (int n = 0; n < N; n++) {
        size_t k = 0;
        for (; k + 8 <= H; k += 8)
            for (int q = 0; q < G; q++) {   /* independent chains: their adds overlap */
                const float *d = dy + ((size_t)n * C + 8 * (size_t)q) * H;
                v8f r[8], t[8], u[8], col[8];
                for (int j = 0; j < 8; j++)
                    memcpy(&r[j], d + j * H + k, sizeof r[j]);
                for (int j = 0; j < 8; j += 2) {   /* a0 b0 a1 b1 a4 b4 a5 b5 / a2 b2 ... */
                    t[j] = V8_SHUF(r[j], r[j + 1], 0, 8, 1, 9, 4, 12, 5, 13);
                    t[j + 1] = V8_SHUF(r[j], r[j + 1], 2, 10, 3, 11, 6, 14, 7, 15);
                }
                for (int j = 0; j < 8; j += 4) {   /* a0 b0 c0 d0 a4 b4 c4 d4, ... */
                    u[j] = V8_SHUF(t[j], t[j + 2], 0, 1, 8, 9, 4, 5, 12, 13);
                    u[j + 1] = V8_SHUF(t[j], t[j + 2], 2, 3, 10, 11, 6, 7, 14, 15);
                    u[j + 2] = V8_SHUF(t[j + 1], t[j + 3], 0, 1, 8, 9, 4, 5, 12, 13);
                    u[j + 3] = V8_SHUF(t[j + 1], t[j + 3], 2, 3, 10, 11, 6, 7, 14, 15);
                }
                for (int j = 0; j < 4; j++) {      /* the channels at s = k + j, k + j + 4 */
                    col[j] = V8_SHUF(u[j], u[j + 4], 0, 1, 2, 3, 8, 9, 10, 11);
                    col[j + 4] = V8_SHUF(u[j], u[j + 4], 4, 5, 6, 7, 12, 13, 14, 15);
                }
                for (int j = 0; j < 8; j++)
                    acc[q] += __builtin_convertvector(col[j], v8d);
            }
        if (k < H)
            for (int q = 0; q < G; q++) {
                const float *d = dy + ((size_t)n * C + 8 * (size_t)q) * H;
                double s[8];
                memcpy(s, &acc[q], sizeof s);
                for (size_t kk = k; kk < H; kk++)
                    for (int j = 0; j < 8; j++)
                        s[j] += d[j * H + kk];
                memcpy(&acc[q], s, sizeof s);
            }
    }
    memcpy(sums, acc, (size_t)G * sizeof acc[0]);
}

static void chan_bias_grad(const struct ddpc_lk *a)
{
    size_t H = (size_t)a->H, C = (size_t)a->C;
    size_t c = 0;
    for (; c + 8 <= C; ) {
        int G = (int)((C - c) / 8 < SUM_GROUPS ? (C - c) / 8 : SUM_GROUPS);
        double s[8 * SUM_GROUPS] = { 0 };
        chan_sums8(a->dy + c * H, s, a->N, C, H, G);
        for (int j = 0; j < 8 * G; j++)
            ddpc_k_put(&a->db[c + j], (float)s[j], a->accg);
        c += 8 * (size_t)G;
    }
    for (; c < C; c++)
        ddpc_lk_run(DDPC_LK_CHAN_BIAS_GRAD, c, a);
}

/* See ops.h. Up to 8 SUM_GROUPS channels at a time (the last C % 8 one
 * by one), sample by sample: the pooling's backward of those planes, then
 * their sums while they are in L1 or L2. Each call of pool2_back_planes covers whole planes, so
 * its blocks never read or write past them; the dx written is the bits of
 * one call over all planes, the sums are CHAN_BIAS_GRAD's (per channel:
 * samples in order, each plane in order). */
static int cpu_pool2_bias_backward(struct ddpc_ops *o, const struct ddpc_lk *a,
                                   struct ddpc_err *e)
{
    (void)o;
    (void)e;
    if (a->act != 0 || a->K != 2 || a->S != 2 || a->P != 0 || a->accx || !a->idx || !a->db ||
        a->H != 2 * a->OH || a->W != 2 * a->OW)
        return 1;
    size_t C = (size_t)a->C, hw = (size_t)a->H * a->W, ohw = (size_t)a->OH * a->OW;
    size_t g;   /* channels at once: up to 8 SUM_GROUPS, then the last C % 8 one by one */
    for (size_t c = 0; c < C; c += g) {
        size_t groups = (C - c) / 8 < SUM_GROUPS ? (C - c) / 8 : SUM_GROUPS;
        g = groups ? 8 * groups : 1;
        double s[8 * SUM_GROUPS] = { 0 };
        for (int n = 0; n < a->N; n++) {
            size_t p = (size_t)n * C + c;
            pool2_back_planes(a->dy + p * ohw, a->idx + p * ohw, a->aux ? a->aux + p * ohw : NULL,
                              a->dx + p * hw, a->OH, a->OW, g);
            if (groups) {
                chan_sums8(a->dx + p * hw, s, 1, g, hw, (int)groups);
                continue;
            }
            const float *d = a->dx + p * hw;
            for (size_t k = 0; k < hw; k++)
                s[0] += d[k];
        }
        for (size_t j = 0; j < g; j++)
            ddpc_k_put(&a->db[c + j], (float)s[j], a->accg);
    }
    return 0;
}

/* GELU (tanh form) over n elements: the element functions in loops that
 * vectorize (ddpc_k_expf has no libm call), so the same values. */
DDPC_HOT static void cpu_gelu_tanh_fwd(const float *x, float *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = ddpc_k_gelu_tanh(x[i]);
}

DDPC_HOT static void cpu_gelu_tanh_bwd(const float *x, const float *dy, float *dx, size_t n,
                                       int acc)
{
    if (acc)
        for (size_t i = 0; i < n; i++)
            dx[i] += dy[i] * ddpc_k_gelu_tanh_grad(x[i]);
    else
        for (size_t i = 0; i < n; i++)
            dx[i] = dy[i] * ddpc_k_gelu_tanh_grad(x[i]);
}

/* y = x + aux (residual add); dx (+)= dy (gradient copies): the element
 * functions' expressions in loops that vectorize. */
DDPC_HOT static void cpu_add(const float *restrict x, const float *restrict aux,
                             float *restrict y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = x[i] + aux[i];
}

DDPC_HOT static void cpu_accum(const float *dy, float *dx, size_t n, int acc)
{
    if (acc)
        for (size_t i = 0; i < n; i++)
            dx[i] += dy[i];
    else if (dx != dy)
        memcpy(dx, dy, n * sizeof *dx);
}

/* The causal softmax's rows (forward, backward): the element functions,
 * whose lane loops vectorize in these clones. */
DDPC_HOT static void cpu_attn_softmax(const struct ddpc_lk *a, size_t rows, int bwd)
{
    if (bwd)
        for (size_t i = 0; i < rows; i++)
            ddpc_lk_attn_softmax_bwd(i, a);
    else
        for (size_t i = 0; i < rows; i++)
            ddpc_lk_attn_softmax(i, a);
}

/* Layer norm's rows (forward): the element function, whose lane sums and
 * row loops vectorize in these clones. */
DDPC_HOT static void cpu_ln_rows(const struct ddpc_lk *a, size_t rows)
{
    for (size_t r = 0; r < rows; r++)
        ddpc_lk_ln_fwd(r, a);
}

/* Layer norm's dw, db: rows in order as the element function (each
 * column sums its rows in row order, in double), but a row at a time, so
 * x and dy are read along their rows instead of down a column. */
static void cpu_ln_bwd_dw(const struct ddpc_lk *a)
{
    enum { CHUNK = 256 };
    double sw[CHUNK], sb[CHUNK];
    for (int j0 = 0; j0 < a->C; j0 += CHUNK) {
        int nj = a->C - j0 < CHUNK ? a->C - j0 : CHUNK;
        for (int j = 0; j < nj; j++)
            sw[j] = sb[j] = 0.0;
        for (int r = 0; r < a->N; r++) {
            size_t o = (size_t)r * a->C + j0;
            float m = a->s0[r], rstd = a->s1[r];
            for (int j = 0; j < nj; j++) {
                float xhat = (a->x[o + j] - m) * rstd;
                sw[j] += (double)a->dy[o + j] * xhat;
                sb[j] += a->dy[o + j];
            }
        }
        for (int j = 0; j < nj; j++) {
            ddpc_k_put(&a->dw[j0 + j], (float)sw[j], a->accg);
            if (a->db)
                ddpc_k_put(&a->db[j0 + j], (float)sb[j], a->accg);
        }
    }
}

static int cpu_layer_kernel(struct ddpc_ops *o, int kind, size_t n, const struct ddpc_lk *a,
                            struct ddpc_err *e)
{
    (void)o;
    if (kind < 0 || kind >= DDPC_LK_COUNT)
        return DDPC_FAIL(e, DDPC_E_INVALID, "layer_kernel: unknown kind %d", kind);
    switch (kind) {
    case DDPC_LK_IM2COL:
        cpu_im2col(a);
        break;
    case DDPC_LK_COL2IM:
        if (a->accx && !a->ws)   /* model_init's scratch: the step never allocates */
            return DDPC_FAIL(e, DDPC_E_INVALID, "col2im: adding into dx needs ws (H*W floats)");
        cpu_col2im(a, a->ws);
        break;
    case DDPC_LK_CHAN_BIAS:
        for (size_t r = 0, rows = n / (size_t)a->H; r < rows; r++) {
            float b = a->w[r % (size_t)a->C], *y = a->y + r * (size_t)a->H;
            for (int k = 0; k < a->H; k++)
                y[k] += b;
        }
        break;
    case DDPC_LK_CHAN_BIAS_ACT:
        if (a->act == DDPC_K_RELU && a->t == a->y) {
            bias_relu_rows_inplace(a->y, a->w, n / (size_t)a->H, (size_t)a->H, a->C);
            break;
        }
        if (a->act == DDPC_K_RELU) {
            bias_relu_rows(a->y, a->t, a->w, n / (size_t)a->H, (size_t)a->H, a->C);
            break;
        }
        for (size_t r = 0, rows = n / (size_t)a->H; r < rows; r++) {
            float b = a->w[r % (size_t)a->C], *y = a->y + r * (size_t)a->H;
            float *t = a->t + r * (size_t)a->H;
            for (int k = 0; k < a->H; k++) {
                y[k] += b;
                t[k] = ddpc_k_act2(a->act, y[k], a->f0);
            }
        }
        break;
    case DDPC_LK_CHAN_BIAS_GRAD:
        chan_bias_grad(a);
        break;
    case DDPC_LK_BN_FWD:
        for (size_t r = 0, rows = n / (size_t)a->H; r < rows; r++) {
            size_t c = r % (size_t)a->C;
            float m = a->s0[c], inv = a->s1[c], w = a->w[c], b = a->b[c];
            const float *x = a->x + r * (size_t)a->H;
            float *y = a->y + r * (size_t)a->H;
            for (int k = 0; k < a->H; k++)
                y[k] = (x[k] - m) * inv * w + b;
        }
        break;
    case DDPC_LK_BN_BWD_DX:
        for (size_t r = 0, rows = n / (size_t)a->H; r < rows; r++) {
            size_t c = r % (size_t)a->C, off = r * (size_t)a->H;
            float m = (float)((size_t)a->N * a->H);
            float mean = a->s0[c], inv = a->s1[c], t0 = a->t[c], t1 = a->t[a->C + c];
            float wi = a->w[c] * inv;
            for (int k = 0; k < a->H; k++) {
                float xhat = (a->x[off + k] - mean) * inv;
                float v = wi * (a->dy[off + k] - t0 / m - xhat * t1 / m);
                a->dx[off + k] = a->accx ? a->dx[off + k] + v : v;
            }
        }
        break;
    case DDPC_LK_POOL_FWD:
        /* planes of H x W; windows row by row (the element function's
         * order within each window). Max over a window that lies inside
         * the plane: the element function's comparisons without its
         * index arithmetic and bounds tests (its first term always wins
         * the arg < 0 test), so the same value and argmax. */
        if (a->act == 0 && a->K == 2 && a->S == 2 && a->P == 0 && a->idx) {
            pool2_max_planes(a->x, a->y, a->idx, a->H, a->W, a->OH, a->OW,
                             n / ((size_t)a->OH * a->OW));
            break;
        }
        for (size_t pl = 0, planes = n / ((size_t)a->OH * a->OW); pl < planes; pl++) {
            struct ddpc_lk b = *a;
            size_t ohw = (size_t)a->OH * a->OW;
            b.x = a->x + pl * (size_t)a->H * a->W;
            b.y = a->y + pl * ohw;
            b.idx = a->idx ? a->idx + pl * ohw : NULL;
            if (a->act != 0) {
                for (size_t i = 0; i < ohw; i++)
                    ddpc_lk_pool_fwd(i, &b);
                continue;
            }
            for (int oy = 0; oy < a->OH; oy++)
                for (int ox = 0; ox < a->OW; ox++) {
                    int iy0 = oy * a->S - a->P, ix0 = ox * a->S - a->P;
                    size_t o2 = (size_t)oy * a->OW + ox;
                    if (iy0 < 0 || ix0 < 0 || iy0 + a->K > a->H || ix0 + a->K > a->W) {
                        ddpc_lk_pool_fwd(o2, &b);
                        continue;
                    }
                    int arg = iy0 * a->W + ix0;
                    float best = b.x[arg];
                    for (int ky = 0; ky < a->K; ky++)
                        for (int kx = ky == 0; kx < a->K; kx++) {
                            int at = (iy0 + ky) * a->W + ix0 + kx;
                            float v = b.x[at];
                            if (v > best || v != v) {   /* NaN propagates, as in PyTorch */
                                best = v;
                                arg = at;
                            }
                        }
                    b.y[o2] = best;
                    b.idx[o2] = arg;
                }
        }
        break;
    case DDPC_LK_POOL_BWD:
        if (a->S < a->K || a->accx) {   /* overlapping windows: the gather's order */
            for (size_t i = 0; i < n; i++)
                ddpc_lk_run(kind, i, a);
            break;
        }
        if (a->act == 0 && a->K == 2 && a->S == 2 && a->P == 0 && a->H == 2 * a->OH &&
            a->W == 2 * a->OW) {
            pool2_back_planes(a->dy, a->idx, a->aux, a->dx, a->OH, a->OW,
                              n / ((size_t)a->H * a->W));
            break;
        }
        /* windows do not overlap: each input takes at most one term */
        memset(a->dx, 0, n * sizeof *a->dx);
        for (size_t pl = 0, planes = n / ((size_t)a->H * a->W); pl < planes; pl++) {
            size_t ohw = (size_t)a->OH * a->OW;
            float *dx = a->dx + pl * (size_t)a->H * a->W;
            const float *dy = a->dy + pl * ohw;
            if (a->act == 0) {
                const int32_t *idx = a->idx + pl * ohw;
                const float *pooled = a->aux ? a->aux + pl * ohw : NULL;
                for (size_t o2 = 0; o2 < ohw; o2++)
                    if (idx[o2] >= 0) {
                        dx[idx[o2]] += dy[o2];
                        if (pooled)   /* the ReLU's gradient, as the element function */
                            dx[idx[o2]] *= ddpc_k_act_grad(DDPC_K_RELU, pooled[o2]);
                    }
            } else {
                float inv = 1.0f / (float)(a->K * a->K);
                for (int oy = 0; oy < a->OH; oy++)
                    for (int ox = 0; ox < a->OW; ox++)
                        for (int ky = 0; ky < a->K; ky++) {
                            int iy = oy * a->S - a->P + ky;
                            for (int kx = 0; kx < a->K && iy >= 0 && iy < a->H; kx++) {
                                int ix = ox * a->S - a->P + kx;
                                if (ix >= 0 && ix < a->W)
                                    dx[iy * a->W + ix] += dy[(size_t)oy * a->OW + ox] * inv;
                            }
                        }
            }
        }
        break;
    case DDPC_LK_EMB_FWD:
        /* ids are data: a bad one is the data's error, said here (the
         * element function would give NaN) */
        for (size_t r = 0, rows = n / (size_t)a->C; r < rows; r++)
            if (ddpc_k_token(a->x[r], a->V) < 0)
                return DDPC_FAIL(e, DDPC_E_DATA, "embedding: token %g at position %zu of "
                                 "sample %zu is not an id in [0, %d) (vocab_size)",
                                 (double)a->x[r], r % (size_t)a->T, r / (size_t)a->T, a->V);
        for (size_t i = 0; i < n; i++)
            ddpc_lk_emb_fwd(i, a);
        break;
    case DDPC_LK_EMB_BWD_WTE: {
        /* rows in order, a whole row at a time: each element still sums
         * its rows in row order, as the column-wise element function */
        size_t C = (size_t)a->C, rows = (size_t)a->N * a->T;
        if (!a->accg)
            memset(a->dw, 0, (size_t)a->V * C * sizeof *a->dw);
        for (size_t r = 0; r < rows; r++) {
            int v = ddpc_k_token(a->x[r], a->V);
            if (v < 0)
                continue;
            float *dw = a->dw + (size_t)v * C;
            const float *dy = a->dy + r * C;
            for (size_t c = 0; c < C; c++)
                dw[c] += dy[c];
        }
        break;
    }
    case DDPC_LK_LN_BWD_DW:
        cpu_ln_bwd_dw(a);
        break;
    case DDPC_LK_ADD:
        if (a->y == a->x || a->y == a->aux)
            goto element;   /* in place: restrict would not hold */
        cpu_add(a->x, a->aux, a->y, n);
        break;
    case DDPC_LK_ACCUM:
        cpu_accum(a->dy, a->dx, n, a->accx);
        break;
    case DDPC_LK_LN_FWD:
        cpu_ln_rows(a, n);
        break;
    case DDPC_LK_ATTN_SOFTMAX:
    case DDPC_LK_ATTN_SOFTMAX_BWD:
        cpu_attn_softmax(a, n, kind == DDPC_LK_ATTN_SOFTMAX_BWD);
        break;
    case DDPC_LK_ACT_BWD:
        if (a->act != DDPC_K_GELU_TANH)
            goto element;
        cpu_gelu_tanh_bwd(a->x, a->dy, a->dx, n, a->accx);
        break;
    case DDPC_LK_ACT_FWD:
        if (a->act == DDPC_K_GELU_TANH)
            cpu_gelu_tanh_fwd(a->x, a->y, n);
        else if (a->act == DDPC_K_RELU)
            relu_loop(a->x, a->y, n);
        else
            for (size_t i = 0; i < n; i++)
                a->y[i] = ddpc_k_act2(a->act, a->x[i], a->f0);
        break;
    default:
    element:
        for (size_t i = 0; i < n; i++)
            ddpc_lk_run(kind, i, a);
    }
    return 0;
}

int ops_cpu_init(struct ddpc_ops *o, struct ddpc_err *e)
{
    memset(o, 0, sizeof *o);
    o->name = "cpu";
    o->alloc = cpu_alloc;
    o->release = cpu_release;
    o->to_device = cpu_copy;
    o->to_host = cpu_copy;
    o->synchronize = cpu_synchronize;
    o->gemm = cpu_gemm;
    o->gemm_batched = cpu_gemm_batched;
    o->bias_act_forward = cpu_bias_act_forward;
    o->act_backward = cpu_act_backward;
    o->bias_grad = cpu_bias_grad;
    o->loss = cpu_loss;
    o->sumsq = cpu_sumsq;
    o->scale = cpu_scale;
    o->optim_step = cpu_optim_step;
    o->layer_kernel = cpu_layer_kernel;
    o->destroy = cpu_destroy;
    o->host_memory = 1;
    o->conv_rows = 1;
    o->conv3x3 = cpu_conv3x3;
    o->conv3x3_wgrad = cpu_conv3x3_wgrad;
    o->pool2_bias_backward = cpu_pool2_bias_backward;
#if defined(__x86_64__) || defined(__i386__)
    _MM_SET_FLUSH_ZERO_MODE(_MM_FLUSH_ZERO_ON);
    _MM_SET_DENORMALS_ZERO_MODE(_MM_DENORMALS_ZERO_ON);
#endif
    return 0;
}
