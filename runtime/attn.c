/* attn.c - causal self-attention forward and backward (see attn.h).
 *
 * Forward, per sample b and head h (Q, K, V: [T, hs] views of qkv with row
 * stride 3C; batched over heads with stride hs):
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
 */
#include <math.h>
#include <string.h>

#include "attn.h"
#include "ops_kernels.h"

int64_t attn_scratch_floats(int T, int heads, int dropout)
{
    return (int64_t)heads * T * T * (dropout ? 2 : 1);
}

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

int attn_forward(struct ddpc_ops *o, const struct ddpc_attn *at, const float *qkv, float *att,
                 float *y, float *scratch, struct ddpc_err *e)
{
    DDPC_TRY(check_shape(at, e));
    int T = at->T, C = at->C, H = at->heads, hs = C / H, C3 = 3 * C;
    long long tt = (long long)T * T, htt = (long long)H * tt;
    float scale = (float)(1.0 / sqrt((double)hs));
    for (int b = 0; b < at->B; b++) {
        const float *q = qkv + (size_t)b * T * C3;
        DDPC_TRY(o->gemm_batched(o, 0, 1, T, T, hs, scale, q, C3, hs, q + C, C3, hs, 0.0f,
                                 att + b * htt, T, tt, H, e));
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
        DDPC_TRY(o->gemm_batched(o, 0, 0, T, hs, T, 1.0f, pd + b * htt, T, tt, v, C3, hs, 0.0f,
                                 y + (size_t)b * T * C, C, hs, H, e));
    }
    return 0;
}

int attn_backward(struct ddpc_ops *o, const struct ddpc_attn *at, const float *qkv,
                  const float *att, const float *dy, float *dqkv, int acc, float *scratch,
                  struct ddpc_err *e)
{
    DDPC_TRY(check_shape(at, e));
    int T = at->T, C = at->C, H = at->heads, hs = C / H, C3 = 3 * C;
    long long tt = (long long)T * T, htt = (long long)H * tt;
    size_t n = (size_t)at->B * (size_t)htt;
    float scale = (float)(1.0 / sqrt((double)hs)), beta = acc ? 1.0f : 0.0f;
    float *dp = scratch;                  /* [B, H, T, T]: dPd, then dP, then dS */
    const float *pd = att;
    if (dropping(at)) {
        DDPC_TRY(drop_probs(o, at, att, scratch + n, n, e));
        pd = scratch + n;
    }
    for (int b = 0; b < at->B; b++) {
        const float *v = qkv + (size_t)b * T * C3 + 2 * C, *dyb = dy + (size_t)b * T * C;
        DDPC_TRY(o->gemm_batched(o, 0, 1, T, T, hs, 1.0f, dyb, C, hs, v, C3, hs, 0.0f,
                                 dp + b * htt, T, tt, H, e));
        DDPC_TRY(o->gemm_batched(o, 1, 0, T, hs, T, 1.0f, pd + b * htt, T, tt, dyb, C, hs, beta,
                                 dqkv + (size_t)b * T * C3 + 2 * C, C3, hs, H, e));
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
        const float *q = qkv + (size_t)b * T * C3;
        float *dq = dqkv + (size_t)b * T * C3;
        DDPC_TRY(o->gemm_batched(o, 0, 0, T, hs, T, 1.0f, dp + b * htt, T, tt, q + C, C3, hs,
                                 beta, dq, C3, hs, H, e));
        DDPC_TRY(o->gemm_batched(o, 1, 0, T, hs, T, 1.0f, dp + b * htt, T, tt, q, C3, hs, beta,
                                 dq + C, C3, hs, H, e));
    }
    return 0;
}
