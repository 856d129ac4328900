/* ops_kernels.h - element-wise arithmetic shared by the CPU and CUDA backends.
 *
 * Every function here is DDPC_HD: compiled for the host by the C compiler
 * (ops_cpu.c) and for host and device by nvcc (ops_cuda.cu). The CPU unit
 * tests therefore cover the exact arithmetic the GPU kernels run. Keep these
 * pure: no memory allocation, no I/O, no globals.
 */
#ifndef DDPC_OPS_KERNELS_H
#define DDPC_OPS_KERNELS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define DDPC_HD __host__ __device__ static inline
#else
#define DDPC_HD static inline
#endif

/* Activation ids match enum ddpc_activation in spec/job.h. */
#define DDPC_K_RELU     0
#define DDPC_K_GELU     1
#define DDPC_K_TANH     2
#define DDPC_K_SIGMOID  3
#define DDPC_K_IDENTITY 4

/* Optimizer ids match enum ddpc_optimizer_type. */
#define DDPC_K_ADAM  0
#define DDPC_K_ADAMW 1
#define DDPC_K_SGD   2

/* x rounded to bfloat16, to nearest even (a NaN stays a NaN): the top 16
 * bits of the float it becomes. The fused attention's operands
 * (ops_cuda_attn.cuh) and the tests' bf16-valued inputs. */
DDPC_HD uint32_t ddpc_k_bf16_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (u >> 16) | 0x40u;
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

/* x rounded to bfloat16, as a float. */
DDPC_HD float ddpc_k_bf16_round(float x)
{
    uint32_t u = ddpc_k_bf16_bits(x) << 16;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* GELU, exact (erf) form: PyTorch's nn.GELU() default. */
DDPC_HD float ddpc_k_act(int act, float z)
{
    switch (act) {
    case DDPC_K_RELU:    return z > 0.0f ? z : 0.0f;
    case DDPC_K_GELU:    return 0.5f * z * (1.0f + erff(z * 0.70710678118654752f));
    case DDPC_K_TANH:    return tanhf(z);
    case DDPC_K_SIGMOID: return 1.0f / (1.0f + expf(-z));
    default:             return z;
    }
}

/* d act(z) / dz */
DDPC_HD float ddpc_k_act_grad(int act, float z)
{
    switch (act) {
    case DDPC_K_RELU:    return z > 0.0f ? 1.0f : 0.0f;
    case DDPC_K_GELU: {
        float cdf = 0.5f * (1.0f + erff(z * 0.70710678118654752f));
        float pdf = 0.39894228040143268f * expf(-0.5f * z * z);
        return cdf + z * pdf;
    }
    case DDPC_K_TANH:    { float t = tanhf(z); return 1.0f - t * t; }
    case DDPC_K_SIGMOID: { float s = 1.0f / (1.0f + expf(-z)); return s * (1.0f - s); }
    default:             return 1.0f;
    }
}

/* One parameter's update. g is the averaged gradient times grad_scale.
 * Matches torch.optim.{SGD,Adam,AdamW} for a single step:
 *   sgd:   g += wd*p; b = mu*b + g (b = g on the first step, which m == 0 and
 *          first_step signal); p -= lr * (nesterov ? g + mu*b : b)
 *   adam:  g += wd*p (L2); m,v moments; p -= lr * mhat / (sqrt(vhat) + eps)
 *   adamw: p *= 1 - lr*wd; then adam without the L2 term. */
DDPC_HD void ddpc_k_sgd(float *p, float g, float *buf, float lr, float mu, int nesterov,
                        float wd, int first_step)
{
    g += wd * *p;
    if (mu != 0.0f) {
        float b = first_step ? g : mu * *buf + g;
        *buf = b;
        g = nesterov ? g + mu * b : b;
    }
    *p -= lr * g;
}

/* Adam / AdamW exactly as torch.optim's single-tensor path computes it,
 * operation for operation, with its Python-float constants precomputed in
 * double and rounded once (struct ddpc_optim_step's one_minus_beta*,
 * step_size, bc2_sqrt, decay):
 *   adamw: p *= decay (= 1 - lr*wd);   adam: g += wd*p
 *   m = m*b1 + omb1*g;  v = v*b2 + omb2*g*g
 *   p += (-step_size) * m / (sqrt(v)/bc2_sqrt + eps) */
DDPC_HD void ddpc_k_adam_exact(float *p, float g, float *m, float *v, float b1, float b2,
                               float omb1, float omb2, float eps, float wd, int decoupled,
                               float decay, float step_size, float bc2_sqrt)
{
    if (decoupled)
        *p *= decay;
    else
        g += wd * *p;
    *m = *m * b1 + omb1 * g;
    *v = *v * b2 + omb2 * g * g;
    float denom = sqrtf(*v) / bc2_sqrt + eps;
    *p += (-step_size) * *m / denom;
}

/* The same step with every constant derived in float from lr, b1, b2, bc1,
 * bc2 (less exact: 1 - 0.999f loses 1e-5 relative). Prefer
 * ddpc_k_adam_exact with the host-precomputed constants. */
DDPC_HD void ddpc_k_adam(float *p, float g, float *m, float *v, float lr, float b1, float b2,
                         float eps, float wd, int decoupled, float bc1, float bc2)
{
    ddpc_k_adam_exact(p, g, m, v, b1, b2, 1.0f - b1, 1.0f - b2, eps, wd, decoupled,
                      1.0f - lr * wd, lr / bc1, sqrtf(bc2));
}

/* Loss ids match enum ddpc_loss. */
#define DDPC_K_LOSS_XENT 0
#define DDPC_K_LOSS_MSE  1

/* One row of softmax cross-entropy; the loss op calls it once per sample.
 *   x[cols]: logits; y: the label, 0 <= y < cols (callers check first);
 *   d[cols] = grad_scale * (softmax(x) - onehot(y)); d may alias x;
 *   returns logsumexp(x) - x[y], max-shifted so large logits do not overflow;
 *   *correct = argmax(x) == y, the first maximum winning ties (torch.argmax).
 * Accumulate the returned per-row losses in double. */
DDPC_HD double ddpc_k_xent_row(const float *x, int y, float *d, int cols, float grad_scale,
                               int *correct)
{
    float xy = x[y];              /* read before d, which may alias x, is written */
    float mx = x[0];
    int arg = 0;
    for (int j = 1; j < cols; j++)
        if (x[j] > mx) {
            mx = x[j];
            arg = j;
        }
    float s = 0.0f;
    for (int j = 0; j < cols; j++) {
        float ex = expf(x[j] - mx);
        d[j] = ex;
        s += ex;
    }
    float inv = grad_scale / s;
    for (int j = 0; j < cols; j++)
        d[j] *= inv;
    d[y] -= grad_scale;
    *correct = arg == y;
    return (double)logf(s) + (double)(mx - xy);
}

/* One row of mean squared error: returns the mean over cols of (x - t)^2,
 * so (sum over rows) / rows is PyTorch's MSELoss(reduction='mean');
 * d[cols] = grad_scale * 2 (x - t) / cols; d may alias x. */
DDPC_HD double ddpc_k_mse_row(const float *x, const float *t, float *d, int cols,
                              float grad_scale)
{
    float gs = 2.0f * grad_scale / (float)cols;
    double row = 0.0;
    for (int j = 0; j < cols; j++) {
        float diff = x[j] - t[j];
        row += (double)diff * diff;
        d[j] = gs * diff;
    }
    return row / cols;
}


/* ===================== layer kernels (model.c's layers) =====================
 *
 * Each kernel computes ONE output element i of a layer operation; the CPU
 * backend loops i over [0, n) in order, the CUDA backend runs one thread
 * per i. Every output element is written by exactly one i, and every sum
 * runs in a fixed order, so both backends are deterministic and the CPU
 * tests check the arithmetic the GPU runs. Reductions over a batch
 * (batch-norm statistics, parameter gradients) accumulate in double.
 * Shapes are NCHW, row-major, as PyTorch's. */

/* Extra activation ids (layer lists only; values after DDPC_K_IDENTITY). */
#define DDPC_K_LEAKY_RELU 5
#define DDPC_K_SILU       6
#define DDPC_K_GELU_TANH  7

/* exp(x) without a libm call, so loops over it vectorize (GELU below):
 * Cephes' expf, exp(x) = 2^n exp(r) with |r| <= ln2/2, a degree-5
 * polynomial for exp(r), about 1 ulp. x is clamped to [-87, 88], where
 * 2^n stays a normal float (exp(-87) = 1.6e-38, exp(88) = 1.7e38); NaN
 * gives NaN. */
DDPC_HD float ddpc_k_expf(float x0)
{
    float x = x0 > -87.0f ? x0 : -87.0f;   /* NaN -> -87: no NaN reaches the int conversion */
    x = x < 88.0f ? x : 88.0f;
    /* n = round(x / ln2): adding 1.5 * 2^23 rounds to an integer (C11: no
     * contraction, so the sum is rounded exactly once) */
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - n * 0.693359375f;          /* ln2 in two parts (Cody-Waite) */
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float y = p * (r * r) + r + 1.0f;
    union { int32_t i; float f; } two_n;     /* 2^n from its exponent bits */
    two_n.i = ((int32_t)n + 127) << 23;
    return x0 == x0 ? y * two_n.f : x0;   /* NaN in, NaN out */
}

/* GELU, tanh form: 0.5 z (1 + tanh(u)), u = sqrt(2/pi) (z + 0.044715 z^3),
 * computed as z * s with s = sigmoid(2u) = 1 / (1 + exp(-2u)) (the same
 * function: 1 + tanh(u) = 2 sigmoid(2u)), which needs one exp and no
 * cancellation where tanh(u) is near -1. */
DDPC_HD float ddpc_k_gelu_tanh(float z)
{
    float u = 0.79788456080286536f * (z + 0.044715f * z * z * z);
    return z / (1.0f + ddpc_k_expf(-2.0f * u));
}

/* d/dz of the above, PyTorch's GeluBackward tanh form rewritten with
 * s = sigmoid(2u): 0.5 (1 + t) = s, 0.5 z (1 - t^2) = 2 z s (1 - s), so
 * s + 2 z s (1 - s) sqrt(2/pi) (1 + 3 * 0.044715 z^2); 1 - s = e s. */
DDPC_HD float ddpc_k_gelu_tanh_grad(float z)
{
    const float beta = 0.79788456080286536f, kappa = 0.044715f;
    float x2 = z * z;
    float e = ddpc_k_expf(-2.0f * (beta * (z + kappa * x2 * z)));
    float s = 1.0f / (1.0f + e);
    return s + 2.0f * z * s * (e * s) * beta * (1.0f + 3.0f * kappa * x2);
}

DDPC_HD float ddpc_k_act2(int act, float z, float slope)
{
    switch (act) {
    case DDPC_K_LEAKY_RELU: return z > 0.0f ? z : z * slope;
    case DDPC_K_SILU:       return z / (1.0f + expf(-z));
    case DDPC_K_GELU_TANH:  return ddpc_k_gelu_tanh(z);
    default:                return ddpc_k_act(act, z);
    }
}

DDPC_HD float ddpc_k_act2_grad(int act, float z, float slope)
{
    switch (act) {
    case DDPC_K_LEAKY_RELU: return z > 0.0f ? 1.0f : slope;
    case DDPC_K_SILU: {
        float s = 1.0f / (1.0f + expf(-z));
        return s * (1.0f + z * (1.0f - s));
    }
    case DDPC_K_GELU_TANH:  return ddpc_k_gelu_tanh_grad(z);
    default:                return ddpc_k_act_grad(act, z);
    }
}

/* Kernel ids of struct ddpc_ops.layer_kernel. */
enum ddpc_lk_kind {
    DDPC_LK_IM2COL,        /* y[n][c*K*K][OH*OW] = x[n][c][..] (0 outside); i over N*C*K*K*OH*OW */
    DDPC_LK_COL2IM,        /* dx[n][c][h][w] (+)= sum of aux (col) entries that read it; i over N*C*H*W;
                              ws: H*W floats of scratch (the CPU backend's sums with accx) */
    DDPC_LK_CHAN_BIAS,     /* y[n][c][s] += w[c]; i over N*C*H (H = spatial) */
    DDPC_LK_CHAN_BIAS_ACT, /* y[n][c][s] += w[c], then t = act(y) (act, f0 as ACT_FWD): a
                              conv2d's bias and the activation after it in one pass;
                              t may be y (in place) */
    DDPC_LK_CHAN_BIAS_GRAD,/* db[c] (+)= sum over n, s of dy[n][c][s]; i over C */
    DDPC_LK_POOL_FWD,      /* act 0 max (idx: argmax in the plane), 1 avg; i over N*C*OH*OW */
    DDPC_LK_POOL_BWD,      /* dx (+)= gradient of the pooling; i over N*C*H*W. Max
                              pooling with aux (its own outputs): times ReLU's
                              gradient at the input, the pooling of a ReLU's output */
    DDPC_LK_GAP_FWD,       /* y[n][c] = mean over H (spatial) of x[n][c][.]; i over N*C */
    DDPC_LK_GAP_BWD,       /* dx[n][c][s] (+)= dy[n][c] / H; i over N*C*H */
    DDPC_LK_ACT_FWD,       /* y = act(x); i over n */
    DDPC_LK_ACT_BWD,       /* dx (+)= dy * act'(x); i over n */
    DDPC_LK_BN_STATS,      /* training: s0 = batch mean, s1 = 1/sqrt(var + eps), running
                              stats updated (rs); eval: from rs; i over C */
    DDPC_LK_BN_FWD,        /* y = (x - s0) s1 w + b; i over N*C*H */
    DDPC_LK_BN_BWD_REDUCE, /* t[c] = sum dy, t[C + c] = sum dy xhat; dw, db (+)= them; i over C */
    DDPC_LK_BN_BWD_DX,     /* dx (+)= w s1 (dy - t[c]/m - xhat t[C+c]/m); i over N*C*H */
    DDPC_LK_LN_FWD,        /* per row of C: s0 = mean, s1 = rstd, y = xhat w + b; i over rows */
    DDPC_LK_LN_BWD_DX,     /* i over rows */
    DDPC_LK_LN_BWD_DW,     /* dw[j], db[j] (+)= sums over rows; i over C */
    DDPC_LK_DROPOUT_FWD,   /* y = keep(i) ? x * f1 : 0, keep = uniform(seed, i) >= f0; i over n */
    DDPC_LK_DROPOUT_BWD,   /* dx (+)= keep(i) ? dy * f1 : 0 */
    DDPC_LK_ADD,           /* y = x + aux; i over n */
    DDPC_LK_ACCUM,         /* dx (+)= dy; i over n */
    /* GPT (issue 15). Tokens travel as floats holding exact integer ids. */
    DDPC_LK_EMB_FWD,       /* y[r][c] = w[x[r]][c] + b[r % T][c] (wte, wpe); i over N*T*C;
                              an id outside [0, V) gives NaN (no read outside w) */
    DDPC_LK_EMB_BWD_WTE,   /* dw[v][c] (+)= sum over rows r with x[r] == v of dy[r][c], rows in
                              order (accg 0: column c zeroed first); i over C */
    DDPC_LK_EMB_BWD_WPE,   /* db[t][c] (+)= sum over n of dy[n][t][c]; i over T*C */
    DDPC_LK_ATTN_SOFTMAX,  /* row i of y [N*heads*T, T], query t = i % T: causal softmax in
                              place (keys j > t get 0); i over N*heads*T */
    DDPC_LK_ATTN_SOFTMAX_BWD, /* dx[i][j] = f1 P[i][j] (dy[i][j] - sum_k P[i][k] dy[i][k]),
                              P = x (the probabilities), f1 the score scale; dx may alias dy;
                              i over rows as above */
    DDPC_LK_COUNT
};

/* Arguments of one layer kernel; which fields a kind reads is stated above. */
struct ddpc_lk {
    const float *x, *w, *b, *dy, *aux;
    float   *y, *dx, *dw, *db, *s0, *s1, *rs, *t;
    int32_t *idx;
    float   *ws;               /* scratch the caller allocated at init: kernels never allocate */
    int      N, C, H, W, OH, OW, K, S, P;
    int      act;
    float    f0, f1, f2;       /* slope; p and 1/(1-p); eps, momentum */
    uint64_t seed;
    int      accx;             /* dx: add instead of overwrite */
    int      accg;             /* dw, db: add instead of overwrite */
    int      training;
    int      T, V, heads;      /* GPT: sequence length, vocabulary, attention heads */
};

/* splitmix64 of seed and i: the dropout draw of element i, in [0, 1). */
DDPC_HD float ddpc_k_uniform(uint64_t seed, uint64_t i)
{
    uint64_t z = seed + 0x9E3779B97F4A7C15ull * (i + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)(z >> 40) * (1.0f / 16777216.0f);
}

DDPC_HD void ddpc_k_put(float *dst, float v, int acc)
{
    *dst = acc ? *dst + v : v;
}

DDPC_HD void ddpc_lk_im2col(size_t i, const struct ddpc_lk *a)
{
    size_t ohw = (size_t)a->OH * a->OW, kk = (size_t)a->K * a->K, ckk = (size_t)a->C * kk;
    size_t p = i % ohw, r = (i / ohw) % ckk, n = i / ohw / ckk;
    int c = (int)(r / kk), ky = (int)(r / a->K % a->K), kx = (int)(r % a->K);
    int iy = (int)(p / a->OW) * a->S - a->P + ky, ix = (int)(p % a->OW) * a->S - a->P + kx;
    a->y[i] = iy >= 0 && iy < a->H && ix >= 0 && ix < a->W
                  ? a->x[((n * a->C + c) * a->H + iy) * a->W + ix] : 0.0f;
}

DDPC_HD void ddpc_lk_col2im(size_t i, const struct ddpc_lk *a)
{
    size_t hw = (size_t)a->H * a->W, ohw = (size_t)a->OH * a->OW, kk = (size_t)a->K * a->K;
    size_t nc = i / hw;
    int c = (int)(nc % a->C), n = (int)(nc / a->C);
    int iy = (int)(i % hw / a->W), ix = (int)(i % a->W);
    const float *col = a->aux + (size_t)n * a->C * kk * ohw;
    float s = 0.0f;
    for (int ky = 0; ky < a->K; ky++) {
        int ty = iy + a->P - ky;
        if (ty < 0 || ty % a->S || ty / a->S >= a->OH)
            continue;
        for (int kx = 0; kx < a->K; kx++) {
            int tx = ix + a->P - kx;
            if (tx < 0 || tx % a->S || tx / a->S >= a->OW)
                continue;
            s += col[((size_t)c * kk + (size_t)ky * a->K + kx) * ohw +
                     (size_t)(ty / a->S) * a->OW + tx / a->S];
        }
    }
    ddpc_k_put(&a->dx[i], s, a->accx);
}

DDPC_HD void ddpc_lk_pool_fwd(size_t i, const struct ddpc_lk *a)
{
    size_t ohw = (size_t)a->OH * a->OW;
    const float *x = a->x + i / ohw * (size_t)a->H * a->W;
    int oy = (int)(i % ohw / a->OW), ox = (int)(i % a->OW);
    if (a->act == 0) {
        float best = -INFINITY;
        int arg = -1;
        for (int ky = 0; ky < a->K; ky++) {
            int iy = oy * a->S - a->P + ky;
            if (iy < 0 || iy >= a->H)
                continue;
            for (int kx = 0; kx < a->K; kx++) {
                int ix = ox * a->S - a->P + kx;
                if (ix < 0 || ix >= a->W)
                    continue;
                float v = x[iy * a->W + ix];
                if (v > best || v != v || arg < 0) {   /* NaN propagates, as in PyTorch */
                    best = v;
                    arg = iy * a->W + ix;
                }
            }
        }
        a->y[i] = best;
        a->idx[i] = arg;
    } else {
        float s = 0.0f;
        for (int ky = 0; ky < a->K; ky++) {
            int iy = oy * a->S - a->P + ky;
            if (iy < 0 || iy >= a->H)
                continue;
            for (int kx = 0; kx < a->K; kx++) {
                int ix = ox * a->S - a->P + kx;
                if (ix >= 0 && ix < a->W)
                    s += x[iy * a->W + ix];
            }
        }
        a->y[i] = s / (float)(a->K * a->K);
    }
}

DDPC_HD void ddpc_lk_pool_bwd(size_t i, const struct ddpc_lk *a)
{
    size_t hw = (size_t)a->H * a->W, ohw = (size_t)a->OH * a->OW;
    size_t plane = i / hw;
    int iy = (int)(i % hw / a->W), ix = (int)(i % a->W), me = iy * a->W + ix;
    const float *dy = a->dy + plane * ohw;
    const int32_t *idx = a->idx ? a->idx + plane * ohw : 0;
    /* aux: the pooled ReLU outputs; at an argmax the pooled value is the
     * ReLU's output there, so ReLU's gradient at this input is 1 iff it is
     * > 0. Applied to the pooling's sum as ReLU's backward would, so the
     * same bits as the two passes */
    const float *pooled = a->aux ? a->aux + plane * ohw : 0;
    float s = 0.0f, inv = 1.0f / (float)(a->K * a->K), relu_grad = 0.0f;
    for (int ky = 0; ky < a->K; ky++) {
        int ty = iy + a->P - ky;
        if (ty < 0 || ty % a->S || ty / a->S >= a->OH)
            continue;
        for (int kx = 0; kx < a->K; kx++) {
            int tx = ix + a->P - kx;
            if (tx < 0 || tx % a->S || tx / a->S >= a->OW)
                continue;
            size_t o = (size_t)(ty / a->S) * a->OW + tx / a->S;
            if (a->act == 0) {
                if (idx[o] == me) {
                    s += dy[o];
                    if (pooled)
                        relu_grad = ddpc_k_act_grad(DDPC_K_RELU, pooled[o]);
                }
            } else {
                s += dy[o] * inv;
            }
        }
    }
    ddpc_k_put(&a->dx[i], pooled ? s * relu_grad : s, a->accx);
}

DDPC_HD void ddpc_lk_bn_stats(size_t c, const struct ddpc_lk *a)
{
    float *rm = a->rs, *rv = a->rs + a->C;
    if (!a->training) {
        a->s0[c] = rm[c];
        a->s1[c] = 1.0f / sqrtf(rv[c] + a->f2);
        return;
    }
    size_t m = (size_t)a->N * a->H;
    double sum = 0.0, sq = 0.0;
    for (int n = 0; n < a->N; n++) {
        const float *x = a->x + ((size_t)n * a->C + c) * a->H;
        for (int s = 0; s < a->H; s++)
            sum += x[s];
    }
    double mean = sum / (double)m;
    for (int n = 0; n < a->N; n++) {
        const float *x = a->x + ((size_t)n * a->C + c) * a->H;
        for (int s = 0; s < a->H; s++) {
            double d = x[s] - mean;
            sq += d * d;
        }
    }
    double var = sq / (double)m;
    a->s0[c] = (float)mean;
    a->s1[c] = (float)(1.0 / sqrt(var + (double)a->f2));
    float mom = a->f1;
    double unbiased = m > 1 ? sq / (double)(m - 1) : var;
    rm[c] = (1.0f - mom) * rm[c] + mom * (float)mean;
    rv[c] = (1.0f - mom) * rv[c] + mom * (float)unbiased;
    if (c == 0)
        a->rs[2 * a->C] += 1.0f;   /* num_batches_tracked */
}

DDPC_HD void ddpc_lk_bn_fwd(size_t i, const struct ddpc_lk *a)
{
    size_t c = i / a->H % a->C;
    a->y[i] = (a->x[i] - a->s0[c]) * a->s1[c] * a->w[c] + a->b[c];
}

DDPC_HD void ddpc_lk_bn_bwd_reduce(size_t c, const struct ddpc_lk *a)
{
    double sdy = 0.0, sdyx = 0.0;
    float mean = a->s0[c], inv = a->s1[c];
    for (int n = 0; n < a->N; n++) {
        size_t o = ((size_t)n * a->C + c) * a->H;
        for (int s = 0; s < a->H; s++) {
            float dy = a->dy[o + s];
            sdy += dy;
            sdyx += (double)dy * ((a->x[o + s] - mean) * inv);
        }
    }
    a->t[c] = (float)sdy;
    a->t[a->C + c] = (float)sdyx;
    ddpc_k_put(&a->dw[c], (float)sdyx, a->accg);
    ddpc_k_put(&a->db[c], (float)sdy, a->accg);
}

DDPC_HD void ddpc_lk_bn_bwd_dx(size_t i, const struct ddpc_lk *a)
{
    size_t c = i / a->H % a->C;
    float m = (float)((size_t)a->N * a->H);
    float xhat = (a->x[i] - a->s0[c]) * a->s1[c];
    float v = a->w[c] * a->s1[c] * (a->dy[i] - a->t[c] / m - xhat * a->t[a->C + c] / m);
    ddpc_k_put(&a->dx[i], v, a->accx);
}

/* Row sums (layer norm, softmax) and maxima in DDPC_K_LANES interleaved partial
 * results (element j goes to lane j % LANES), combined in a fixed tree:
 * a fixed order, so deterministic and the same on both backends, and
 * loops the CPU vectorizes instead of one chain of dependent additions. */
#define DDPC_K_LANES 8

DDPC_HD double ddpc_k_lanes_sum(const double *l)
{
    return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

DDPC_HD void ddpc_lk_ln_fwd(size_t r, const struct ddpc_lk *a)
{
    const float *x = a->x + r * a->C;
    int C = a->C, j = 0;
    double sum[DDPC_K_LANES] = { 0 }, sq[DDPC_K_LANES] = { 0 };
    for (; j + DDPC_K_LANES <= C; j += DDPC_K_LANES)
        for (int l = 0; l < DDPC_K_LANES; l++)
            sum[l] += x[j + l];
    for (int l = 0; j + l < C; l++)
        sum[l] += x[j + l];
    double mean = ddpc_k_lanes_sum(sum) / C;
    for (j = 0; j + DDPC_K_LANES <= C; j += DDPC_K_LANES)
        for (int l = 0; l < DDPC_K_LANES; l++) {
            double d = x[j + l] - mean;
            sq[l] += d * d;
        }
    for (int l = 0; j + l < C; l++) {
        double d = x[j + l] - mean;
        sq[l] += d * d;
    }
    float fm = (float)mean, rstd = (float)(1.0 / sqrt(ddpc_k_lanes_sum(sq) / C + (double)a->f2));
    a->s0[r] = fm;
    a->s1[r] = rstd;
    float *y = a->y + r * a->C;
    if (a->b)
        for (j = 0; j < C; j++)
            y[j] = (x[j] - fm) * rstd * a->w[j] + a->b[j];
    else
        for (j = 0; j < C; j++)
            y[j] = (x[j] - fm) * rstd * a->w[j] + 0.0f;
}

DDPC_HD void ddpc_lk_ln_bwd_dx(size_t r, const struct ddpc_lk *a)
{
    /* one chain of sums: lanes as in the forward measured slower here */
    const float *x = a->x + r * a->C, *dy = a->dy + r * a->C;
    float fm = a->s0[r], rstd = a->s1[r];
    double s1 = 0.0, s2 = 0.0;
    for (int j = 0; j < a->C; j++) {
        float wdy = dy[j] * a->w[j];
        s1 += wdy;
        s2 += (double)wdy * ((x[j] - fm) * rstd);
    }
    float m1 = (float)(s1 / a->C), m2 = (float)(s2 / a->C);
    float *dx = a->dx + r * a->C;
    for (int j = 0; j < a->C; j++) {
        float xhat = (x[j] - fm) * rstd;
        ddpc_k_put(&dx[j], rstd * (dy[j] * a->w[j] - m1 - xhat * m2), a->accx);
    }
}

DDPC_HD void ddpc_lk_ln_bwd_dw(size_t j, const struct ddpc_lk *a)
{
    double sw = 0.0, sb = 0.0;
    for (int r = 0; r < a->N; r++) {
        size_t o = (size_t)r * a->C + j;
        float xhat = (a->x[o] - a->s0[r]) * a->s1[r];
        sw += (double)a->dy[o] * xhat;
        sb += a->dy[o];
    }
    ddpc_k_put(&a->dw[j], (float)sw, a->accg);
    if (a->db)   /* a layernorm without bias (nanoGPT's bias=False) */
        ddpc_k_put(&a->db[j], (float)sb, a->accg);
}

/* ---- GPT: token + position embedding, causal attention's softmax ----
 *
 * Attention itself (nanoGPT's CausalSelfAttention, non-flash path) is
 * model.c's sequence of strided batched gemms around these two row kernels:
 * S = Q K^T / sqrt(hs) (gemm alpha), P = causal softmax(S), optional dropout
 * of P (DDPC_LK_DROPOUT_FWD over P's elements), Y = P V. */

/* The token id a float holds, or -1 when it is not an integer in [0, V). */
DDPC_HD int ddpc_k_token(float x, int V)
{
    if (!(x >= 0.0f && x < (float)V))   /* NaN fails too */
        return -1;
    int v = (int)x;
    return (float)v == x ? v : -1;
}

DDPC_HD void ddpc_lk_emb_fwd(size_t i, const struct ddpc_lk *a)
{
    size_t r = i / (size_t)a->C, c = i % (size_t)a->C;
    int v = ddpc_k_token(a->x[r], a->V);
    a->y[i] = v < 0 ? NAN : a->w[(size_t)v * a->C + c] + a->b[(r % (size_t)a->T) * a->C + c];
}

/* Column c of dwte: one pass over the rows in order, so every element sums
 * its rows in row order (deterministic on both backends, no atomics). */
DDPC_HD void ddpc_lk_emb_bwd_wte(size_t c, const struct ddpc_lk *a)
{
    size_t C = (size_t)a->C, rows = (size_t)a->N * a->T;
    if (!a->accg)
        for (size_t v = 0; v < (size_t)a->V; v++)
            a->dw[v * C + c] = 0.0f;
    for (size_t r = 0; r < rows; r++) {
        int v = ddpc_k_token(a->x[r], a->V);
        if (v >= 0)
            a->dw[(size_t)v * C + c] += a->dy[r * C + c];
    }
}

DDPC_HD void ddpc_lk_emb_bwd_wpe(size_t i, const struct ddpc_lk *a)
{
    size_t tc = (size_t)a->T * a->C;
    double s = 0.0;
    for (int n = 0; n < a->N; n++)
        s += a->dy[(size_t)n * tc + i];
    ddpc_k_put(&a->db[i], (float)s, a->accg);
}

/* max over y[0..n). A NaN is passed over here (v > m is false), but the
 * row still ends NaN: exp(NaN - max) is NaN and so is the row's sum, as in
 * PyTorch. (The comparison is x86's maxps, so this vectorizes.) */
DDPC_HD float ddpc_k_row_max(const float *y, int n)
{
    float m[DDPC_K_LANES];
    for (int l = 0; l < DDPC_K_LANES; l++)
        m[l] = -INFINITY;
    int j = 0;
    for (; j + DDPC_K_LANES <= n; j += DDPC_K_LANES)
        for (int l = 0; l < DDPC_K_LANES; l++)
            m[l] = y[j + l] > m[l] ? y[j + l] : m[l];
    for (int l = 0; j + l < n; l++)
        m[l] = y[j + l] > m[l] ? y[j + l] : m[l];
    float mx = m[0];
    for (int l = 1; l < DDPC_K_LANES; l++)
        mx = m[l] > mx ? m[l] : mx;
    return mx;
}

DDPC_HD void ddpc_lk_attn_softmax(size_t i, const struct ddpc_lk *a)
{
    int T = a->T, t = (int)(i % (size_t)T), n = t + 1;
    float *y = a->y + i * (size_t)T;
    float mx = ddpc_k_row_max(y, n);
    for (int j = 0; j < n; j++)   /* vectorizes (ddpc_k_expf) */
        y[j] = ddpc_k_expf(y[j] - mx);
    double s[DDPC_K_LANES] = { 0 };
    int j = 0;
    for (; j + DDPC_K_LANES <= n; j += DDPC_K_LANES)
        for (int l = 0; l < DDPC_K_LANES; l++)
            s[l] += y[j + l];
    for (int l = 0; j + l < n; l++)
        s[l] += y[j + l];
    float inv = (float)(1.0 / ddpc_k_lanes_sum(s));
    for (j = 0; j < n; j++)
        y[j] *= inv;
    for (j = n; j < T; j++)
        y[j] = 0.0f;
}

DDPC_HD void ddpc_lk_attn_softmax_bwd(size_t i, const struct ddpc_lk *a)
{
    int T = a->T, t = (int)(i % (size_t)T), n = t + 1;
    const float *p = a->x + i * (size_t)T, *dy = a->dy + i * (size_t)T;
    float *dx = a->dx + i * (size_t)T;
    double s[DDPC_K_LANES] = { 0 };
    int j = 0;
    for (; j + DDPC_K_LANES <= n; j += DDPC_K_LANES)
        for (int l = 0; l < DDPC_K_LANES; l++)
            s[l] += (double)p[j + l] * dy[j + l];
    for (int l = 0; j + l < n; l++)
        s[l] += (double)p[j + l] * dy[j + l];
    float fs = (float)ddpc_k_lanes_sum(s);
    for (j = 0; j < n; j++)
        dx[j] = a->f1 * (p[j] * (dy[j] - fs));
    for (j = n; j < T; j++)
        dx[j] = 0.0f;
}

/* One element i of kernel `kind`. */
DDPC_HD void ddpc_lk_run(int kind, size_t i, const struct ddpc_lk *a)
{
    switch (kind) {
    case DDPC_LK_IM2COL:    ddpc_lk_im2col(i, a); break;
    case DDPC_LK_COL2IM:    ddpc_lk_col2im(i, a); break;
    case DDPC_LK_CHAN_BIAS: a->y[i] += a->w[i / a->H % a->C]; break;
    case DDPC_LK_CHAN_BIAS_ACT: {
        float v = a->y[i] + a->w[i / a->H % a->C];
        a->y[i] = v;
        a->t[i] = ddpc_k_act2(a->act, v, a->f0);
        break;
    }
    case DDPC_LK_CHAN_BIAS_GRAD: {
        double s = 0.0;
        for (int n = 0; n < a->N; n++) {
            const float *dy = a->dy + ((size_t)n * a->C + i) * a->H;
            for (int k = 0; k < a->H; k++)
                s += dy[k];
        }
        ddpc_k_put(&a->db[i], (float)s, a->accg);
        break;
    }
    case DDPC_LK_POOL_FWD:  ddpc_lk_pool_fwd(i, a); break;
    case DDPC_LK_POOL_BWD:  ddpc_lk_pool_bwd(i, a); break;
    case DDPC_LK_GAP_FWD: {
        const float *x = a->x + i * a->H;
        float s = 0.0f;
        for (int k = 0; k < a->H; k++)
            s += x[k];
        a->y[i] = s / (float)a->H;
        break;
    }
    case DDPC_LK_GAP_BWD:   ddpc_k_put(&a->dx[i], a->dy[i / a->H] / (float)a->H, a->accx); break;
    case DDPC_LK_ACT_FWD:   a->y[i] = ddpc_k_act2(a->act, a->x[i], a->f0); break;
    case DDPC_LK_ACT_BWD:
        ddpc_k_put(&a->dx[i], a->dy[i] * ddpc_k_act2_grad(a->act, a->x[i], a->f0), a->accx);
        break;
    case DDPC_LK_BN_STATS:  ddpc_lk_bn_stats(i, a); break;
    case DDPC_LK_BN_FWD:    ddpc_lk_bn_fwd(i, a); break;
    case DDPC_LK_BN_BWD_REDUCE: ddpc_lk_bn_bwd_reduce(i, a); break;
    case DDPC_LK_BN_BWD_DX: ddpc_lk_bn_bwd_dx(i, a); break;
    case DDPC_LK_LN_FWD:    ddpc_lk_ln_fwd(i, a); break;
    case DDPC_LK_LN_BWD_DX: ddpc_lk_ln_bwd_dx(i, a); break;
    case DDPC_LK_LN_BWD_DW: ddpc_lk_ln_bwd_dw(i, a); break;
    case DDPC_LK_DROPOUT_FWD:
        a->y[i] = ddpc_k_uniform(a->seed, i) >= a->f0 ? a->x[i] * a->f1 : 0.0f;
        break;
    case DDPC_LK_DROPOUT_BWD:
        ddpc_k_put(&a->dx[i], ddpc_k_uniform(a->seed, i) >= a->f0 ? a->dy[i] * a->f1 : 0.0f,
                   a->accx);
        break;
    case DDPC_LK_ADD:       a->y[i] = a->x[i] + a->aux[i]; break;
    case DDPC_LK_ACCUM:     ddpc_k_put(&a->dx[i], a->dy[i], a->accx); break;
    case DDPC_LK_EMB_FWD:   ddpc_lk_emb_fwd(i, a); break;
    case DDPC_LK_EMB_BWD_WTE: ddpc_lk_emb_bwd_wte(i, a); break;
    case DDPC_LK_EMB_BWD_WPE: ddpc_lk_emb_bwd_wpe(i, a); break;
    case DDPC_LK_ATTN_SOFTMAX: ddpc_lk_attn_softmax(i, a); break;
    case DDPC_LK_ATTN_SOFTMAX_BWD: ddpc_lk_attn_softmax_bwd(i, a); break;
    default: break;
    }
}

#endif /* DDPC_OPS_KERNELS_H */
