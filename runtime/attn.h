/* attn.h - causal self-attention over a [B, T, 3C] qkv buffer, as nanoGPT's
 * CausalSelfAttention computes it between c_attn and c_proj (its non-flash
 * path: masked_fill with the causal mask, softmax, attn_dropout, att @ v).
 *
 * defines: attn_forward, attn_backward, attn_floats
 *
 * Layout (docs/DESIGN.md, Models): row t of a sample's qkv is [q (C) | k (C) | v (C)];
 * head h owns columns h*hs .. (h+1)*hs of each (hs = C / heads), as
 * nanoGPT's split + view(B, T, nh, hs). The output y [B, T, C] puts head h
 * in the same columns (transpose(1, 2).contiguous().view(B, T, C)).
 * Everything is strided batched gemms (struct ddpc_ops.gemm_batched, batch
 * = heads, one call per sample) around two row kernels of ops_kernels.h, so
 * both backends run it and the CPU is bitwise deterministic.
 */
#ifndef DDPC_ATTN_H
#define DDPC_ATTN_H

#include <stdint.h>
#include "err.h"
#include "ops.h"

struct ddpc_attn {
    int      B, T, C, heads;
    float    p;          /* dropout on the probabilities (training only; 0: none) */
    int      training;
    uint64_t seed;       /* its mask: DDPC_LK_DROPOUT_FWD over att's elements */
};

/* Per sample floats a layer of this shape needs on backend o: *kept for
 * att, which forward leaves for backward, and *scratch, reusable between
 * layers. Unfused: the probabilities [heads, T, T] kept, and their
 * gradient (with dropout p > 0 also the dropped probabilities) as scratch.
 * Fused (ops.h attn_fused_fits; dropout or not), heads*T of each: the
 * rows' log-sum-exps and, in backward, rowsum(y * dy). o NULL: unfused,
 * as the CPU runs it. */
void attn_floats(const struct ddpc_ops *o, int T, int C, int heads, float p, int64_t *kept,
                 int64_t *scratch);

/* qkv [B, T, 3C] -> y [B, T, C]; att [B, heads, T, T] keeps the
 * probabilities (before dropout) for backward (on the fused path, attn.c:
 * what that backend's backward needs instead). */
int attn_forward(struct ddpc_ops *o, const struct ddpc_attn *at, const float *qkv, float *att,
                 float *y, float *scratch, struct ddpc_err *e);

/* dy [B, T, C] -> dqkv [B, T, 3C] (acc: add into it instead of overwriting);
 * att and y as forward left them; the same seed and training flag as that
 * forward. */
int attn_backward(struct ddpc_ops *o, const struct ddpc_attn *at, const float *qkv,
                  const float *att, const float *y, const float *dy, float *dqkv, int acc,
                  float *scratch, struct ddpc_err *e);

#endif /* DDPC_ATTN_H */
