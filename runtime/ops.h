/* ops.h - struct ddpc_ops: the math backend interface.
 *
 * ops_cpu.c (OpenBLAS + loops) and ops_cuda.cu (cuBLAS + kernels) each fill
 * one of these. Model and optimizer code call only through it, so the same
 * training loop runs on either backend. Element-wise arithmetic lives in
 * ops_kernels.h and is shared by both.
 *
 * Layout: row-major everywhere. A matrix "[r, c]" has r rows of c floats.
 * Linear layers keep W as [out, in] (PyTorch's layout, so exports need no
 * transpose). All pointers passed to ops are backend memory (host memory for
 * the CPU backend, device memory for CUDA) unless the name says host.
 * Every function returns 0 or a negative ddpc_err_code with e filled.
 */
#ifndef DDPC_OPS_H
#define DDPC_OPS_H

#include <stddef.h>
#include <stdint.h>
#include "err.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ddpc_lk;   /* ops_kernels.h */

/* Hyper-parameters of one fused optimizer step (see ops_kernels.h). */
struct ddpc_optim_step {
    int    type;          /* enum ddpc_optimizer_type */
    float  lr;            /* this step's learning rate, schedule applied */
    float  momentum;      /* sgd */
    int    nesterov;      /* sgd */
    float  weight_decay;
    float  beta1, beta2, eps;
    float  bias_correction1;   /* 1 - beta1^t, precomputed on the host */
    float  bias_correction2;   /* 1 - beta2^t */
    float  grad_scale;    /* multiply grads first (clipping, loss scaling); 1 = none */
    long   step;          /* 1-based optimizer step (sgd momentum starts at step 1) */
    /* Adam/AdamW constants computed on the host in double and rounded once,
     * as torch.optim does with its Python-float hyper-parameters (optim.c
     * fills them; 0 = derive in float from the fields above). 1 - beta2 from
     * a float beta2 = 0.999f is off by 1.3e-5 relative, hence these. */
    float  one_minus_beta1;    /* 1 - beta1 */
    float  one_minus_beta2;    /* 1 - beta2 */
    float  step_size;          /* lr / bias_correction1 */
    float  bc2_sqrt;           /* sqrt(bias_correction2) */
    float  decay;              /* adamw: 1 - lr * weight_decay */
};

#define DDPC_LOSS_ACC 3   /* doubles of a loss accumulator: loss sum, correct, bad labels */

struct ddpc_ops {
    const char *name;     /* "cpu" or "cuda" */
    void *ctx;            /* backend state (cuBLAS handle, streams); owned by the backend */

    int  (*alloc)(struct ddpc_ops *o, void **p, size_t bytes, struct ddpc_err *e); /* zeroed */
    void (*release)(struct ddpc_ops *o, void *p);
    int  (*to_device)(struct ddpc_ops *o, void *dst, const void *host_src, size_t bytes,
                      struct ddpc_err *e);
    int  (*to_host)(struct ddpc_ops *o, void *host_dst, const void *src, size_t bytes,
                    struct ddpc_err *e);
    int  (*synchronize)(struct ddpc_ops *o, struct ddpc_err *e);

    /* C[m, n] = alpha * op(A) * op(B) + beta * C, op(X) = X or X^T (trans_x != 0).
     * lda/ldb/ldc are row strides as stored. */
    int (*gemm)(struct ddpc_ops *o, int trans_a, int trans_b, int m, int n, int k,
                float alpha, const float *A, int lda, const float *B, int ldb,
                float beta, float *C, int ldc, struct ddpc_err *e);

    /* batch independent gemms: for b in [0, batch), C + b*stride_c = alpha *
     * op(A + b*stride_a) op(B + b*stride_b) + beta * (C + b*stride_c), each
     * as gemm above (strides in floats, >= 0). Attention's per-head
     * products. gemm_precision applies as to gemm (CUDA: bf16/fp16 copies
     * of both operands in scratch, as torch.autocast's bmm; the CPU stays
     * fp32), and so does matmul_tf32. */
    int (*gemm_batched)(struct ddpc_ops *o, int trans_a, int trans_b, int m, int n, int k,
                        float alpha, const float *A, int lda, long long stride_a,
                        const float *B, int ldb, long long stride_b, float beta, float *C,
                        int ldc, long long stride_c, int batch, struct ddpc_err *e);

    /* z[rows, cols] += bias[cols]; a = act(z). a may equal z only for identity
     * (backward of the other activations needs z). */
    int (*bias_act_forward)(struct ddpc_ops *o, float *z, const float *bias, float *a,
                            int rows, int cols, int act, struct ddpc_err *e);
    /* dz = da * act'(z), element-wise over n; dz may equal da. */
    int (*act_backward)(struct ddpc_ops *o, const float *z, const float *da, float *dz,
                        size_t n, int act, struct ddpc_err *e);
    /* db[cols] = sum over rows of dz[rows, cols] (beta = 0: overwrite, 1: add). */
    int (*bias_grad)(struct ddpc_ops *o, const float *dz, float *db, int rows, int cols,
                     float beta, struct ddpc_err *e);

    /* Loss over a batch of `rows`. Writes dlogits = d(mean loss)/dlogits scaled
     * by grad_scale (typically 1/rows for the mean; callers pass 1/global rows
     * for accumulation), and adds into acc, DDPC_LOSS_ACC doubles of BACKEND
     * memory: acc[0] += the summed loss, acc[1] += the correct count (argmax
     * == label; 0 for mse), acc[2] += labels outside [0, cols). The CUDA
     * backend adds on the device and never waits, so the caller reads acc
     * (to_host) only where it needs the numbers (logging steps, epoch end)
     * and must check acc[2] then; the CPU backend fails at once with
     * DDPC_E_DATA instead (acc[2] stays 0). acc may be NULL (not kept).
     * labels: int32 class indices (cross_entropy) or NULL;
     * targets: float [rows, cols] (mse) or NULL. */
    int (*loss)(struct ddpc_ops *o, int loss_type, const float *logits, const int32_t *labels,
                const float *targets, float *dlogits, int rows, int cols, float grad_scale,
                double *acc, struct ddpc_err *e);

    /* sum of squares of x[n] into *host_out (for grad_clip_norm). */
    int (*sumsq)(struct ddpc_ops *o, const float *x, size_t n, double *host_out,
                 struct ddpc_err *e);
    /* x[n] *= s */
    int (*scale)(struct ddpc_ops *o, float *x, size_t n, float s, struct ddpc_err *e);

    /* One fused pass: param, grad, m, v are [n]; m/v unused by plain sgd. */
    int (*optim_step)(struct ddpc_ops *o, const struct ddpc_optim_step *s, float *param,
                      const float *grad, float *m, float *v, size_t n, struct ddpc_err *e);

    /* One layer kernel of ops_kernels.h (enum ddpc_lk_kind) over elements
     * [0, n); a's pointers are backend memory. */
    int (*layer_kernel)(struct ddpc_ops *o, int kind, size_t n, const struct ddpc_lk *a,
                        struct ddpc_err *e);

    void (*destroy)(struct ddpc_ops *o);

    /* 1: backend pointers are ordinary host memory (the CPU backend), so
     * callers may gather batches straight into them; 0 (CUDA): go through
     * to_device. Zero-initialised ops default to 0, the safe choice. */
    int host_memory;

    /* Samples per pass of a convolution's stages (im2col, gemms, bias;
     * backward: im2col, gemms, col2im): n > 0 runs them n samples at a
     * time, so a chunk's columns are still in cache from one stage to the
     * next (the CPU: 1); 0 runs each stage over the whole batch (CUDA: one
     * launch each). The same values either way. */
    int conv_rows;

    /* Optional (NULL on CUDA): a 3 x 3 convolution of stride 1 and padding
     * 1 without bias, y[n][out][H][W] (+= when acc) = x[n][in][H][W] conv
     * w, by a faster algorithm than im2col + gemm (the CPU: Winograd's
     * F(2x2, 3x3), the same values up to rounding). w is [out][in][3][3];
     * flip: w is [in][out][3][3] and each filter is rotated 180 degrees,
     * which makes this the input gradient of the convolution w is the
     * weight of (dx = conv3x3(dy, w, flip)). bias: NULL, or [out] added
     * to each output channel and then, relu 1, max(., 0): a layer's bias
     * and ReLU in the same pass as its output (not with acc). ws: ws_floats
     * floats of scratch. Returns 1, computing nothing, when ws is too small. */
    int (*conv3x3)(struct ddpc_ops *o, const float *x, const float *w, float *y, int n,
                   int in, int out, int H, int W, int flip, int acc, const float *bias,
                   int relu, float *ws, size_t ws_floats, struct ddpc_err *e);
    /* Optional (NULL on CUDA): that convolution's weight gradient,
     * dw[out][in][3][3] (+= when acc) = sum over the n samples of the
     * correlation of x[n][in][H][W] (padding 1) with dy[n][out][H][W]; the
     * same algorithm, scratch and return as conv3x3. */
    int (*conv3x3_wgrad)(struct ddpc_ops *o, const float *x, const float *dy, float *dw, int n,
                         int in, int out, int H, int W, int acc, float *ws, size_t ws_floats,
                         struct ddpc_err *e);
    /* Optional (NULL on CUDA): DDPC_LK_POOL_BWD of a 2 x 2 / stride 2 max
     * pooling over planes of exactly 2 OH x 2 OW (a as for that kind: N,
     * C, H, W, OH, OW, dy, idx, aux, dx; accx 0) and, in the same pass,
     * the bias gradient of the convolution whose output reaches the
     * pooling: a->db[C] (+= when a->accg) = DDPC_LK_CHAN_BIAS_GRAD's sums
     * over the dx it writes, in that kind's order, so the same bits as the
     * two kernels, each plane summed while it is still in cache. Returns
     * 1, computing nothing, where the shapes do not fit. */
    int (*pool2_bias_backward)(struct ddpc_ops *o, const struct ddpc_lk *a, struct ddpc_err *e);

    /* enum ddpc_precision of gemm inputs; the caller sets it after init
     * (0 = fp32, the default). CUDA: bf16/fp16 copies of A and B, fp32
     * accumulation and fp32 C (cublasGemmEx, CUBLAS_COMPUTE_32F); weights,
     * gradients and the optimizer stay fp32 (master copies). fp16 needs the
     * caller's dynamic loss scaling: loss(grad_scale = S/rows), sumsq of the
     * grads not finite -> skip the step and lower S, else optim_step with
     * grad_scale = 1/S. CPU: ignored, always fp32. */
    int gemm_precision;

    /* 1: fp32 gemms may round their inputs to TF32, fp32 accumulation
     * (matmul_precision: high, torch's set_float32_matmul_precision("high"));
     * 0: true fp32 (highest). The caller sets it after init, like
     * gemm_precision. CPU: ignored, always fp32. */
    int matmul_tf32;

    /* Optional (NULL on the CPU). The model's parameters: n floats of
     * backend memory. With bf16/fp16 gemm inputs, an operand inside them is
     * read from one low-precision copy of all of them, made by the first
     * gemm after they changed (optim_step, or to_device into them), so a
     * weight is cast once per step, not once per gemm. Its memory is
     * allocated here, once, and only for bf16/fp16 (set gemm_precision
     * first; a later change to bf16/fp16 casts per gemm into scratch). */
    int (*set_weights)(struct ddpc_ops *o, const float *params, size_t n, struct ddpc_err *e);
    /* Optional (NULL on the CPU). Sizes the backend's scratch for batches of
     * up to `rows` rows and low-precision gemm operands of up to `elems`
     * floats (bf16/fp16 only: set gemm_precision first), so no step
     * allocates or frees device memory (which would synchronise the
     * device). */
    int (*reserve)(struct ddpc_ops *o, int rows, size_t elems, struct ddpc_err *e);
    /* Debug counter: device memory the backend allocated or freed for its
     * scratch after set_weights/reserve, i.e. inside steps (each one a
     * device synchronisation). tests/gpu asserts 0 after training. */
    long scratch_grows;

    /* Device waits (to_host, to_device, synchronize, sumsq, fence) give up
     * after this many seconds with DDPC_E_TIMEOUT: the stream may be waiting
     * for a collective that will never finish (a hung or dead peer), and
     * no host wait may be unbounded. 0: no bound. The caller sets it after
     * init (worker.c: nccl_timeout). CPU: unused (nothing waits). */
    double wait_timeout_s;
    /* Optional (NULL: batches go through to_device, which waits; the CPU
     * needs neither). Pinned host memory for staging batches, and a copy to
     * the device that does not wait: host_src must stay untouched until
     * fence(slot) returns, which waits (bounded) for every copy issued with
     * that slot (0 or 1), so two staging buffers alternate and the host
     * gathers batch b+1 while batch b is copied and computed. */
    int  (*host_alloc)(struct ddpc_ops *o, void **p, size_t bytes, struct ddpc_err *e);
    void (*host_free)(struct ddpc_ops *o, void *p);
    int  (*to_device_async)(struct ddpc_ops *o, void *dst, const void *host_src, size_t bytes,
                            int slot, struct ddpc_err *e);
    int  (*fence)(struct ddpc_ops *o, int slot, struct ddpc_err *e);

    /* Optional (NULL on the CPU): causal self-attention (attn.h) fused, so
     * that its [T, T] scores and probabilities never reach memory (CUDA:
     * ops_cuda_attn.cuh, bf16 tensor-core products). attn_fused_fits says
     * whether it takes a layer of this shape at the current gemm_precision
     * (attn.c asks once per pass and calls the pair, or neither: forward
     * and backward must agree). The forward writes y [B, T, C] and the
     * rows' log-sum-exps lse [B, heads, T]; the backward reads both, as
     * the forward left them, and writes (acc: adds) dqkv, with B * heads *
     * T floats of scratch. p > 0: dropout on the probabilities with seed,
     * the very mask attn.c's unfused path draws (DDPC_LK_DROPOUT_FWD over
     * [B, heads, T, T]); both passes get the same p and seed. */
    int (*attn_fused_fits)(const struct ddpc_ops *o, int T, int C, int heads);
    /* 1 (the CUDA backend's init): attn_fused_fits may say yes; the worker
     * clears it for DDPC_FUSED_ATTN=0 (env.h) before model_init */
    int fused_attn;
    int (*attn_fused_forward)(struct ddpc_ops *o, int B, int T, int C, int heads, float p,
                              uint64_t seed, const float *qkv, float *y, float *lse,
                              struct ddpc_err *e);
    int (*attn_fused_backward)(struct ddpc_ops *o, int B, int T, int C, int heads, float p,
                               uint64_t seed, const float *qkv, const float *y,
                               const float *lse, const float *dy, float *dqkv, int acc,
                               float *scratch, struct ddpc_err *e);
};

/* ops_cpu.c */
int ops_cpu_init(struct ddpc_ops *o, struct ddpc_err *e);

#ifdef __cplusplus
}
#endif
#endif /* DDPC_OPS_H */
