/* attn.c - causal self-attention forward and backward (see attn.h).
 *
 * Forward, per sample b and head h (Q, K, V: [T, hs] views of qkv with row
 * stride 3C; batched over heads with stride hs; every product in causal
 * blocks of query rows on the CPU, see ATTN_BLOCK):
 *   S = scale * Q K^T            [T, T], scale = 1/sqrt(hs) as a float
 *   P = causal softmax(S)        row t: keys 0..t, zeros after (kept: att)
 *   Pd = dropout(P)              training with p > 0 only, into scratch
 *   Y = Pd V                     written into columns h*hs.. of y (ld C)
 * Backward:
 *   dPd = dY V^T;  dV (+)= Pd^T dY
 *   dP = dropout'(dPd)  (the same mask, regenerated from the seed)
 *   dS = scale * P (dP - rowsum(P dP))      (0 above the diagonal)
 *   dQ (+)= dS K;  dK (+)= dS^T Q
 * The masked scores are never used: the softmax kernel reads keys 0..t
 * only, exactly what masked_fill(-inf) + softmax gives (exp(-inf) = 0).
 *
 * A backend with fused attention (CUDA, bf16, head size 64 or 32, dropout
 * too: ops.h attn_fused_*) computes the same without S, P, dP or dS in memory;
 * att then holds its rows' log-sum-exps instead of P, and the backward
 * reads y (rowsum(P * dP) = rowsum(y * dy) per head).
 */
#include <math.h>
#include <string.h>

#include "attn.h"
#include "ops_kernels.h"

static int dropping(const struct ddpc_attn *at)
{
    return at->training && at->p > 0.0f;
}

/* Pd = dropout(P) over all of att, into pd. */
static int drop_probs(struct ddpc_ops *o, const struct ddpc_attn *at, const float *att,
                      float *pd, size_t n, struct ddpc_err *e)
{
    struct ddpc_lk a;
    memset(&a, 0, sizeof a);
    a.x = att;
    a.y = pd;
    a.f0 = at->p;
    a.f1 = (float)(1.0 / (1.0 - (double)at->p));
    a.seed = at->seed;
    return o->layer_kernel(o, DDPC_LK_DROPOUT_FWD, n, &a, e);
}

static int check_shape(const struct ddpc_attn *at, struct ddpc_err *e)
{
    if (at->B < 0 || at->T < 1 || at->heads < 1 || at->C < 1 || at->C % at->heads)
        return DDPC_FAIL(e, DDPC_E_INVALID, "attention: B=%d T=%d C=%d heads=%d (C must be a "
                         "multiple of heads)", at->B, at->T, at->C, at->heads);
    return 0;
}

/* Causal blocks: queries in blocks of bs rows; block [r0, r1) needs keys
 * [0, r1) only, so the products skip part of the zero upper triangle
 * (T = 128, bs = 64: 3/4 of the full products' work; measured on the bench
 * GPT, 1 thread: attention's gemms 23.7 -> 20.3 ms/step; blocks of 32 gain
 * nothing more, their extra calls cost what they save). Entries above the
 * diagonal inside a block are computed and then ignored (softmax) or zero
 * (P, dS). On the GPU one call per sample keeps the launches few. */
#define ATTN_BLOCK 64

/* The fused path (ops.h attn_fused_*): the backend takes the shape (with
 * dropout too: the kernels draw drop_probs's mask). att then holds the
 * rows' log-sum-exps, [B, heads, T] of it. */
static int fused(const struct ddpc_ops *o, const struct ddpc_attn *at)
{
    return o->attn_fused_fits && o->attn_fused_fits(o, at->T, at->C, at->heads);
}

void attn_floats(const struct ddpc_ops *o, int T, int C, int heads, float p, int64_t *kept,
                 int64_t *scratch)
{
    struct ddpc_attn at = { .B = 1, .T = T, .C = C, .heads = heads, .p = p, .training = 1 };
    int64_t ht = (int64_t)heads * T;
    if (o && fused(o, &at)) {
        *kept = ht;
        *scratch = ht;
        return;
    }
    *kept = ht * T;
    *scratch = ht * T * (p > 0.0f ? 2 : 1);
}

static int block_rows(const struct ddpc_ops *o, int T)
{
    return o->host_memory ? ATTN_BLOCK : T;
}

int attn_forward(struct ddpc_ops *o, const struct ddpc_attn *at, const float *qkv, float *att,
                 float *y, float *scratch, struct ddpc_err *e)
{
    DDPC_TRY(check_shape(at, e));
    int T = at->T, C = at->C, H = at->heads, hs = C / H, C3 = 3 * C, bs = block_rows(o, T);
    long long tt = (long long)T * T, htt = (long long)H * tt;
    float scale = (float)(1.0 / sqrt((double)hs));
    if (fused(o, at))
        return o->attn_fused_forward(o, at->B, T, C, H, dropping(at) ? at->p : 0.0f, at->seed,
                                     qkv, y, att, e);
    for (int b = 0; b < at->B; b++) {
        const float *q = qkv + (size_t)b * T * C3;
        for (int r0 = 0; r0 < T; r0 += bs) {
            int r1 = r0 + bs < T ? r0 + bs : T;
            /* S[r0:r1, 0:r1] = scale Q[r0:r1] K[0:r1]^T */
            DDPC_TRY(o->gemm_batched(o, 0, 1, r1 - r0, r1, hs, scale, q + (size_t)r0 * C3, C3,
                                     hs, q + C, C3, hs, 0.0f, att + b * htt + (size_t)r0 * T, T,
                                     tt, H, e));
        }
    }
    struct ddpc_lk a;
    memset(&a, 0, sizeof a);
    a.y = att;
    a.T = T;
    DDPC_TRY(o->layer_kernel(o, DDPC_LK_ATTN_SOFTMAX, (size_t)at->B * H * T, &a, e));
    const float *pd = att;
    if (dropping(at)) {
        DDPC_TRY(drop_probs(o, at, att, scratch, (size_t)at->B * htt, e));
        pd = scratch;
    }
    for (int b = 0; b < at->B; b++) {
        const float *v = qkv + (size_t)b * T * C3 + 2 * C;
        for (int r0 = 0; r0 < T; r0 += bs) {
            int r1 = r0 + bs < T ? r0 + bs : T;
            /* Y[r0:r1] = Pd[r0:r1, 0:r1] V[0:r1] */
            DDPC_TRY(o->gemm_batched(o, 0, 0, r1 - r0, hs, r1, 1.0f,
                                     pd + b * htt + (size_t)r0 * T, T, tt, v, C3, hs, 0.0f,
                                     y + ((size_t)b * T + r0) * C, C, hs, H, e));
        }
    }
    return 0;
}

int attn_backward(struct ddpc_ops *o, const struct ddpc_attn *at, const float *qkv,
                  const float *att, const float *y, const float *dy, float *dqkv, int acc,
                  float *scratch, struct ddpc_err *e)
{
    DDPC_TRY(check_shape(at, e));
    int T = at->T, C = at->C, H = at->heads, hs = C / H, C3 = 3 * C, bs = block_rows(o, T);
    long long tt = (long long)T * T, htt = (long long)H * tt;
    size_t n = (size_t)at->B * (size_t)htt;
    float scale = (float)(1.0 / sqrt((double)hs)), beta = acc ? 1.0f : 0.0f;
    if (fused(o, at))
        return o->attn_fused_backward(o, at->B, T, C, H, dropping(at) ? at->p : 0.0f,
                                      at->seed, qkv, y, att, dy, dqkv, acc, scratch, e);
    float *dp = scratch;                  /* [B, H, T, T]: dPd, then dP, then dS */
    const float *pd = att;
    if (dropping(at)) {
        DDPC_TRY(drop_probs(o, at, att, scratch + n, n, e));
        pd = scratch + n;
    }
    for (int b = 0; b < at->B; b++) {
        const float *v = qkv + (size_t)b * T * C3 + 2 * C, *dyb = dy + (size_t)b * T * C;
        float *dv = dqkv + (size_t)b * T * C3 + 2 * C;
        for (int r0 = 0; r0 < T; r0 += bs) {
            int r1 = r0 + bs < T ? r0 + bs : T;
            /* dPd[r0:r1, 0:r1] = dY[r0:r1] V[0:r1]^T */
            DDPC_TRY(o->gemm_batched(o, 0, 1, r1 - r0, r1, hs, 1.0f, dyb + (size_t)r0 * C, C, hs,
                                     v, C3, hs, 0.0f, dp + b * htt + (size_t)r0 * T, T, tt, H,
                                     e));
            /* keys [r0, r1): dV = Pd[r0:T, r0:r1]^T dY[r0:T] (later queries only) */
            DDPC_TRY(o->gemm_batched(o, 1, 0, r1 - r0, hs, T - r0, 1.0f,
                                     pd + b * htt + (size_t)r0 * T + r0, T, tt,
                                     dyb + (size_t)r0 * C, C, hs, beta, dv + (size_t)r0 * C3, C3,
                                     hs, H, e));
        }
    }
    struct ddpc_lk a;
    memset(&a, 0, sizeof a);
    if (dropping(at)) {
        a.dy = dp;
        a.dx = dp;
        a.f0 = at->p;
        a.f1 = (float)(1.0 / (1.0 - (double)at->p));
        a.seed = at->seed;
        DDPC_TRY(o->layer_kernel(o, DDPC_LK_DROPOUT_BWD, n, &a, e));
        memset(&a, 0, sizeof a);
    }
    a.x = att;
    a.dy = dp;
    a.dx = dp;
    a.f1 = scale;
    a.T = T;
    DDPC_TRY(o->layer_kernel(o, DDPC_LK_ATTN_SOFTMAX_BWD, (size_t)at->B * H * T, &a, e));
    for (int b = 0; b < at->B; b++) {
        const float *q = qkv + (size_t)b * T * C3, *ds = dp + b * htt;
        float *dq = dqkv + (size_t)b * T * C3;
        for (int r0 = 0; r0 < T; r0 += bs) {
            int r1 = r0 + bs < T ? r0 + bs : T;
            /* dQ[r0:r1] = dS[r0:r1, 0:r1] K[0:r1] */
            DDPC_TRY(o->gemm_batched(o, 0, 0, r1 - r0, hs, r1, 1.0f, ds + (size_t)r0 * T, T, tt,
                                     q + C, C3, hs, beta, dq + (size_t)r0 * C3, C3, hs, H, e));
            /* keys [r0, r1): dK = dS[r0:T, r0:r1]^T Q[r0:T] */
            DDPC_TRY(o->gemm_batched(o, 1, 0, r1 - r0, hs, T - r0, 1.0f,
                                     ds + (size_t)r0 * T + r0, T, tt, q + (size_t)r0 * C3, C3,
                                     hs, beta, dq + C + (size_t)r0 * C3, C3, hs, H, e));
        }
    }
    return 0;
}
