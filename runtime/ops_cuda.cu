/* ops_cuda.cu - struct ddpc_ops on one CUDA device: cuBLAS gemm + thin kernels.
 *
 * Owns: ops_cuda_init / ops_cuda_stream (ops_cuda.h) and the ops struct they
 * fill. Every op runs on ONE compute stream, in issue order, so the training
 * loop needs no synchronisation of its own; only the calls that hand a number
 * to the host (sumsq, to_host), to_device (whose host buffer the caller
 * reuses at once) and fence wait for the stream, each for at most
 * o->wait_timeout_s (a collective the stream waits on may never finish).
 * The loss adds into a device accumulator the caller reads when it wants
 * the numbers; batches come from pinned staging by to_device_async.
 *
 * Rules this file keeps:
 *   - per-element arithmetic is ops_kernels.h (the DDPC_HD functions the CPU
 *     backend runs too); every kernel that reduces is ops_cuda_rows.cuh,
 *     fused attention ops_cuda_attn.cuh (C as well as CUDA: the CPU suites
 *     cuda_rows and cuda_attn run them); the kernels here only index, fill
 *     and cast;
 *     built -fmad=false -ftz=true (Makefile CUDA_EXACT_MATH), so +, -, *, /
 *     and sqrt round as on the CPU and the optimizer step matches it bit for
 *     bit (test_gpu checks); expf/erff/tanhf are the device's own (ulps);
 *   - reductions that reach the host (loss, sumsq) use a fixed grid and a
 *     fixed tree order, never atomics, so they are run-to-run reproducible;
 *   - every CUDA / cuBLAS call is checked (cuda_check.h) and errors are
 *     returned, never printed, never exit();
 *   - it never touches a communicator: comm_nccl.cu orders itself against
 *     this stream with events.
 *
 * Precision: o->gemm_precision (ops.h) picks the gemm inputs: fp32
 * (cublasSgemm; TF32 only with o->matmul_tf32, matmul_precision: high), or
 * bf16/fp16 copies of A and B multiplied by cublasGemmEx with
 * CUBLAS_COMPUTE_32F into fp32 C: an operand inside the parameters
 * (set_weights) is read from their one copy, cast by the first gemm after
 * they changed (once per step), any other operand is cast into scratch.
 * Everything else (weights, gradients, optimizer state) is fp32: the master
 * copies. fp16 loss scaling is the caller's (see ops.h).
 *
 * Scratch (loss rows, ones, casts) is sized by reserve before the first
 * step; growth after it is counted in o->scratch_grows (tests/gpu asserts
 * none), since cudaMalloc/cudaFree synchronise the device. The segment
 * sums' scratch (d_seg) has a fixed size, allocated at init: wider layers
 * take more passes, never more memory.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "comm.h"          /* ddpc_now */
#include "ops.h"
#include "ops_kernels.h"
#include "ops_cuda_rows.cuh"
#include "ops_cuda_attn.cuh"
#include "cuda_check.h"
#include "ops_cuda.h"

#define THREADS     256     /* block size of every kernel here */
#define MAX_BLOCKS  65535   /* element-wise kernels loop grid-stride past this */
#define SEG_CHUNK   4096    /* layer norm dw/db: columns per pass (d_seg's width) */
#define SEG_DOUBLES ((size_t)2 * SEG_ROWS * SEG_CHUNK)   /* d_seg's size */

/* enum ddpc_precision (spec/job.h) */
#define PREC_FP32 0
#define PREC_BF16 1
#define PREC_FP16 2

struct ops_cuda_ctx {
    int             device;
    cudaStream_t    stream;          /* compute stream: every op, in order */
    cublasHandle_t  blas;            /* bound to stream */
    /* loss scratch, grown on demand: one entry per row */
    double         *d_row_loss;      /* [cap_rows] */
    int            *d_row_flag;      /* [cap_rows] 1 correct, 0 wrong, -1 bad label */
    int             cap_rows;
    double         *d_partial;       /* [RED_BLOCKS] first-stage sums */
    double         *d_seg;           /* [SEG_DOUBLES]: layer norm dw/db and per-channel segment sums */
    double         *d_result;        /* [3] final sums, copied to h_result */
    double         *h_result;        /* [3] pinned, so the copy is truly async */
    float          *d_ones;          /* [cap_ones] 1.0f, for bias_grad */
    int             cap_ones;
    /* gemm input casts for bf16/fp16 (2-byte elements), sized by reserve,
     * grown on demand (counted in o->scratch_grows) */
    void           *d_lo[2];         /* [0] A, [1] B */
    size_t          cap_lo[2];       /* bytes */
    /* set_weights: the parameters and their one low-precision copy */
    const float    *w_base;          /* [w_n] fp32, the caller's */
    size_t          w_n;
    void           *d_w_lo;          /* [w_n] 2-byte elements */
    int             w_lo_prec;       /* PREC_BF16/FP16 the copy holds; 0: stale */
    int             tf32;            /* cuBLAS math mode set: 1 TF32, 0 pedantic fp32 */
    int             reserving;       /* 1 inside reserve/set_weights: growth not counted */
    struct ddpc_ops *ops;            /* for scratch_grows */
    cudaEvent_t     ev_wait;         /* stream_wait's marker */
    cudaEvent_t     ev_slot[2];      /* to_device_async: the last copy of each slot */
};

/* A scratch allocation or free outside reserve/set_weights: a step paid a
 * device synchronisation for it (ops.h scratch_grows). */
static void count_grow(struct ops_cuda_ctx *c)
{
    if (!c->reserving && c->ops)
        c->ops->scratch_grows++;
}

static struct ops_cuda_ctx *ctx_of(const struct ddpc_ops *o)
{
    return (struct ops_cuda_ctx *)o->ctx;
}

static unsigned grid_for(size_t n)
{
    size_t b = (n + THREADS - 1) / THREADS;
    return (unsigned)(b > MAX_BLOCKS ? MAX_BLOCKS : b);
}

/* ===== kernels ===== */

/* z[rows, cols] += bias[cols] (bias may be NULL); a = act(z). */
__global__ static void k_bias_act(float *z, const float *bias, float *a, size_t n, int cols,
                                  int act)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = z[i] + (bias ? bias[i % (size_t)cols] : 0.0f);
        z[i] = v;
        a[i] = ddpc_k_act(act, v);
    }
}

/* dz = da * act'(z) */
__global__ static void k_act_back(const float *z, const float *da, float *dz, size_t n,
                                  int act)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dz[i] = da[i] * ddpc_k_act_grad(act, z[i]);
}

__global__ static void k_fill(float *x, size_t n, float v)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] = v;
}

__global__ static void k_scale(float *x, size_t n, float s)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] *= s;
}

/* The fused optimizer step; s is passed by value (kernel parameter space),
 * with its Adam constants already resolved by cuda_optim_step exactly as
 * ops_cpu.c resolves them, so both backends run ddpc_k_sgd /
 * ddpc_k_adam_exact on the same float operands. g * grad_scale is exact for
 * grad_scale 1, as in ops_cpu.c's loops. Bit-for-bit agreement with the CPU
 * also needs this file compiled without FMA contraction and with denormals
 * flushed like the CPU's FTZ/DAZ (-fmad=false -ftz=true: the Makefile's
 * CUDA_EXACT_MATH). */
__global__ static void k_optim(struct ddpc_optim_step s, float *p, const float *g, float *m,
                               float *v, size_t n)
{
    const int first = s.step <= 1;
    const int decoupled = s.type == DDPC_K_ADAMW;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float gi = g[i] * s.grad_scale;
        if (s.type == DDPC_K_SGD)
            ddpc_k_sgd(&p[i], gi, m ? &m[i] : NULL, s.lr, s.momentum, s.nesterov,
                       s.weight_decay, first);
        else
            ddpc_k_adam_exact(&p[i], gi, &m[i], &v[i], s.beta1, s.beta2, s.one_minus_beta1,
                              s.one_minus_beta2, s.eps, s.weight_decay, decoupled, s.decay,
                              s.step_size, s.bc2_sqrt);
    }
}

/* y = x rounded to bf16 / fp16 (round to nearest even; fp16 overflows to inf,
 * which the caller's loss scaling detects). */
__global__ static void k_to_bf16(const float *x, __nv_bfloat16 *y, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = __float2bfloat16(x[i]);
}

__global__ static void k_to_half(const float *x, __half *y, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = __float2half(x[i]);
}

/* ===== ops ===== */

/* Waits until the stream has run everything issued so far, for at most
 * o->wait_timeout_s (ops.h): the stream may wait on a collective's event,
 * and a hung peer must cost a deadline, not a hang. Spins briefly, then
 * sleeps 20 us between polls, as comm_nccl.cu does. */
static int event_wait(struct ddpc_ops *o, cudaEvent_t ev, const char *what,
                      struct ddpc_err *e)
{
    struct ops_cuda_ctx *c = ctx_of(o);
    double deadline = o->wait_timeout_s > 0 ? ddpc_now() + o->wait_timeout_s : 0;
    for (unsigned spins = 0;; spins++) {
        cudaError_t q = cudaEventQuery(ev);
        if (q == cudaSuccess)
            return 0;
        if (q != cudaErrorNotReady)
            CUDA_CHECK(e, q);
        if (deadline > 0 && ddpc_now() > deadline)
            return DDPC_FAIL(e, DDPC_E_TIMEOUT,
                             "cuda:%d: %s: the device did not finish its queued work within "
                             "%.0f s; it is probably waiting for a collective that a hung or "
                             "dead peer never joins\n---> HINT: if steps are legitimately "
                             "this slow, raise nccl_timeout", c->device, what,
                             o->wait_timeout_s);
        if (spins >= 200) {
            struct timespec ts = {0, 20000};
            (void)nanosleep(&ts, NULL);
        }
    }
}

static int stream_wait(struct ddpc_ops *o, const char *what, struct ddpc_err *e)
{
    struct ops_cuda_ctx *c = ctx_of(o);
    CUDA_CHECK(e, cudaEventRecord(c->ev_wait, c->stream));
    return event_wait(o, c->ev_wait, what, e);
}

static int cuda_alloc(struct ddpc_ops *o, void **p, size_t bytes, struct ddpc_err *e)
{
    struct ops_cuda_ctx *c = ctx_of(o);
    *p = NULL;
    if (bytes == 0)
        bytes = 1;                /* a valid, distinct pointer, like ops_cpu */
    cudaError_t st = cudaMalloc(p, bytes);
    if (st != cudaSuccess) {
        *p = NULL;
        return DDPC_FAIL(e, DDPC_E_NOMEM,
                         "cuda:%d: cannot allocate %zu bytes of device memory: %s\n"
                         "---> HINT: lower batch_size or the model's widths, or check "
                         "`nvidia-smi` for other processes on this GPU",
                         c->device, bytes, cudaGetErrorString(st));
    }
    /* Zeroed, as ops.h promises. On the compute stream, so every later op on
     * it sees zeros without a host-side wait. */
    CUDA_CHECK(e, cudaMemsetAsync(*p, 0, bytes, c->stream));
    return 0;
}

static void cuda_release(struct ddpc_ops *o, void *p)
{
    /* release cannot report: a failing cudaFree means the context is already
     * broken, and the next checked call on this device reports that. */
    if (p)
        (void)cudaFree(p);
}

static int cuda_to_device(struct ddpc_ops *o, void *dst, const void *host_src, size_t bytes,
                          struct ddpc_err *e)
{
    struct ops_cuda_ctx *c = ctx_of(o);
    if (bytes == 0)
        return 0;
    uintptr_t d = (uintptr_t)dst, base = (uintptr_t)c->w_base;
    if (d < base + c->w_n * sizeof(float) && d + bytes > base)
        c->w_lo_prec = 0;         /* the parameters changed: their copy is stale */
    /* The stream first, bounded: host_src is pageable (the callers' stack,
     * malloc), and a copy from pageable memory may itself wait for the
     * stream to drain before it stages the bytes (CUDA's "API
     * synchronization behavior"), inside the driver, without any bound,
     * behind a collective a hung peer never joins. */
    DDPC_TRY(stream_wait(o, "to_device", e));
    CUDA_CHECK(e, cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, c->stream));
    /* Wait: the caller may reuse host_src as soon as we return, and a
     * pinned source would otherwise still be read by the DMA engine
     * (batches take to_device_async instead). */
    return stream_wait(o, "to_device", e);
}

static int cuda_to_device_async(struct ddpc_ops *o, void *dst, const void *host_src,
                                size_t bytes, int slot, struct ddpc_err *e)
{
    struct ops_cuda_ctx *c = ctx_of(o);
    if (slot < 0 || slot > 1)
        return DDPC_FAIL(e, DDPC_E_INVALID, "cuda to_device_async: slot %d is not 0 or 1", slot);
    if (bytes == 0)
        return 0;
    /* from pinned memory: a DMA the host does not wait for; fence(slot)
     * does, before the caller writes host_src again */
    CUDA_CHECK(e, cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, c->stream));
    CUDA_CHECK(e, cudaEventRecord(c->ev_slot[slot], c->stream));
    return 0;
}

static int cuda_fence(struct ddpc_ops *o, int slot, struct ddpc_err *e)
{
    if (slot < 0 || slot > 1)
        return DDPC_FAIL(e, DDPC_E_INVALID, "cuda fence: slot %d is not 0 or 1", slot);
    /* an event never recorded counts as done */
    return event_wait(o, ctx_of(o)->ev_slot[slot], "the copy of a staged batch", e);
}

static int cuda_host_alloc(struct ddpc_ops *o, void **p, size_t bytes, struct ddpc_err *e)
{
    *p = NULL;
    cudaError_t st = cudaMallocHost(p, bytes ? bytes : 1);
    if (st != cudaSuccess) {
        *p = NULL;
        return DDPC_FAIL(e, DDPC_E_NOMEM, "cuda:%d: cannot allocate %zu bytes of pinned host "
                         "memory: %s", ctx_of(o)->device, bytes, cudaGetErrorString(st));
    }
    return 0;
}

static void cuda_host_free(struct ddpc_ops *o, void *p)
{
    if (p)
        (void)cudaFreeHost(p);   /* cannot report; see cuda_release */
}

static int cuda_to_host(struct ddpc_ops *o, void *host_dst, const void *src, size_t bytes,
                        struct ddpc_err *e)
{
    struct ops_cuda_ctx *c = ctx_of(o);
    if (bytes == 0)
        return 0;
    /* The stream first, bounded (see cuda_to_device): a copy into pageable
     * memory (host_dst is the caller's stack or malloc) may wait for the
     * stream inside the driver without bound; and a copy issued before a
     * timed-out wait would still land in host_dst after the caller has
     * given it up. */
    DDPC_TRY(stream_wait(o, "to_host", e));
    /* On the compute stream, so the copy sees every op issued before it. */
    CUDA_CHECK(e, cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, c->stream));
    return stream_wait(o, "to_host", e);
}

static int cuda_synchronize(struct ddpc_ops *o, struct ddpc_err *e)
{
    return stream_wait(o, "synchronize", e);
}

/* The elements a row-major [rows, cols] matrix with row stride ld spans:
 * (rows-1)*ld + cols (the padding after the last row may not exist); for
 * `batch` of them `stride` apart, the span of all. */
static size_t span_of(int batch, long long stride, int rows, int cols, int ld)
{
    return (size_t)(batch - 1) * (size_t)stride + (size_t)(rows - 1) * (size_t)ld +
           (size_t)cols;
}

/* Copies n fp32 elements (a matrix's or a batch's span, padding and all)
 * into scratch `which` as bf16/fp16 at the same offsets, so the same
 * strides address it. */
static int cast_span(struct ops_cuda_ctx *c, int which, int prec, const float *x, size_t n,
                     const void **out, struct ddpc_err *e)
{
    size_t bytes = n * 2;
    if (bytes > c->cap_lo[which]) {
        /* reserve sized it; an operand larger than that grows it here,
         * paying a device synchronisation (cudaFree), counted */
        count_grow(c);
        if (c->d_lo[which])
            CUDA_CHECK(e, cudaFree(c->d_lo[which]));
        c->d_lo[which] = NULL;
        c->cap_lo[which] = 0;
        CUDA_CHECK(e, cudaMalloc(&c->d_lo[which], bytes));
        c->cap_lo[which] = bytes;
    }
    if (!x) {                     /* reserve: the buffer only */
        *out = c->d_lo[which];
        return 0;
    }
    if (prec == PREC_BF16) {
        k_to_bf16<<<grid_for(n), THREADS, 0, c->stream>>>(x, (__nv_bfloat16 *)c->d_lo[which], n);
        KERNEL_CHECK(e, "k_to_bf16");
    } else {
        k_to_half<<<grid_for(n), THREADS, 0, c->stream>>>(x, (__half *)c->d_lo[which], n);
        KERNEL_CHECK(e, "k_to_half");
    }
    *out = c->d_lo[which];
    return 0;
}

static int cast_lo(struct ops_cuda_ctx *c, int which, int prec, const float *x, int rows,
                   int cols, int ld, const void **out, struct ddpc_err *e)
{
    return cast_span(c, which, prec, x, span_of(1, 0, rows, cols, ld), out, e);
}

/* The bf16/fp16 copy of a gemm operand: inside the parameters
 * (set_weights), a view into their one copy, recast only after they changed;
 * otherwise cast into scratch `which`. */
static int operand_lo(struct ops_cuda_ctx *c, int which, int prec, const float *x, int rows,
                      int cols, int ld, const void **out, struct ddpc_err *e)
{
    uintptr_t p = (uintptr_t)x, base = (uintptr_t)c->w_base;
    size_t n = (size_t)(rows - 1) * (size_t)ld + (size_t)cols;
    if (c->d_w_lo && p >= base && p + n * sizeof(float) <= base + c->w_n * sizeof(float)) {
        if (c->w_lo_prec != prec) {
            if (prec == PREC_BF16) {
                k_to_bf16<<<grid_for(c->w_n), THREADS, 0, c->stream>>>(
                    c->w_base, (__nv_bfloat16 *)c->d_w_lo, c->w_n);
                KERNEL_CHECK(e, "k_to_bf16");
            } else {
                k_to_half<<<grid_for(c->w_n), THREADS, 0, c->stream>>>(
                    c->w_base, (__half *)c->d_w_lo, c->w_n);
                KERNEL_CHECK(e, "k_to_half");
            }
            c->w_lo_prec = prec;
        }
        *out = (const char *)c->d_w_lo + (p - base) / sizeof(float) * 2;
        return 0;
    }
    return cast_lo(c, which, prec, x, rows, cols, ld, out, e);
}

/* matmul_precision: high rounds fp32 inputs to TF32 on the tensor cores;
 * highest keeps true fp32 (no TF32 anywhere). Set lazily, before fp32 gemms. */
static int fp32_math_mode(struct ddpc_ops *o, struct ops_cuda_ctx *c, struct ddpc_err *e)
{
    if (c->tf32 != (o->matmul_tf32 != 0)) {
        CUBLAS_CHECK(e, cublasSetMathMode(c->blas, o->matmul_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                                  : CUBLAS_DEFAULT_MATH));
        c->tf32 = o->matmul_tf32 != 0;
    }
    return 0;
}

/* Row-major C[m,n] = alpha op(A) op(B) + beta C through column-major cuBLAS:
 * a row-major matrix with row stride ld is, read column-major, its transpose
 * with leading dimension ld. So compute C^T = op(B)^T op(A)^T: swap the
 * operands and m/n, keep each operand's own transpose flag. */
static int cuda_gemm(struct ddpc_ops *o, int trans_a, int trans_b, int m, int n, int k,
                     float alpha, const float *A, int lda, const float *B, int ldb,
                     float beta, float *C, int ldc, struct ddpc_err *e)
{
    if (m < 0 || n < 0 || k < 0)
        return DDPC_FAIL(e, DDPC_E_INVALID, "cuda gemm: negative size m=%d n=%d k=%d", m, n, k);
    if (m == 0 || n == 0)
        return 0;
    struct ops_cuda_ctx *c = ctx_of(o);
    cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    int prec = o->gemm_precision;
    if (prec == PREC_FP32 || k == 0) {
        DDPC_TRY(fp32_math_mode(o, c, e));
        CUBLAS_CHECK(e, cublasSgemm(c->blas, op_b, op_a, n, m, k, &alpha, B, ldb, A, lda,
                                    &beta, C, ldc));
        return 0;
    }
    if (prec != PREC_BF16 && prec != PREC_FP16)
        return DDPC_FAIL(e, DDPC_E_INVALID, "cuda gemm: unknown precision %d", prec);
    /* stored shapes: A is [m,k] (or [k,m] transposed), B is [k,n] (or [n,k]) */
    const void *a_lo = NULL, *b_lo = NULL;
    DDPC_TRY(operand_lo(c, 0, prec, A, trans_a ? k : m, trans_a ? m : k, lda, &a_lo, e));
    DDPC_TRY(operand_lo(c, 1, prec, B, trans_b ? n : k, trans_b ? k : n, ldb, &b_lo, e));
    cudaDataType_t t = prec == PREC_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    /* fp32 accumulation and fp32 output: only the inputs are rounded */
    CUBLAS_CHECK(e, cublasGemmEx(c->blas, op_b, op_a, n, m, k, &alpha, b_lo, t, ldb, a_lo, t,
                                 lda, &beta, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                                 CUBLAS_GEMM_DEFAULT));
    return 0;
}

/* The batched form of cuda_gemm, with the same operand swap: C_b^T =
 * op(B_b)^T op(A_b)^T. bf16/fp16: each operand's whole span (all batch
 * entries, overlapping views such as attention's heads of one qkv buffer
 * included) is cast once into scratch, as torch.autocast runs bmm. */
static int cuda_gemm_batched(struct ddpc_ops *o, int trans_a, int trans_b, int m, int n, int k,
                             float alpha, const float *A, int lda, long long stride_a,
                             const float *B, int ldb, long long stride_b, float beta, float *C,
                             int ldc, long long stride_c, int batch, struct ddpc_err *e)
{
    if (m < 0 || n < 0 || k < 0 || batch < 0)
        return DDPC_FAIL(e, DDPC_E_INVALID, "cuda gemm_batched: negative size m=%d n=%d k=%d "
                         "batch=%d", m, n, k, batch);
    if (m == 0 || n == 0 || batch == 0)
        return 0;
    if (stride_a < 0 || stride_b < 0 || stride_c < 0)
        return DDPC_FAIL(e, DDPC_E_INVALID, "cuda gemm_batched: negative stride");
    struct ops_cuda_ctx *c = ctx_of(o);
    cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    int prec = o->gemm_precision;
    if (prec == PREC_FP32 || k == 0) {
        DDPC_TRY(fp32_math_mode(o, c, e));
        CUBLAS_CHECK(e, cublasSgemmStridedBatched(c->blas, op_b, op_a, n, m, k, &alpha, B, ldb,
                                                  stride_b, A, lda, stride_a, &beta, C, ldc,
                                                  stride_c, batch));
        return 0;
    }
    if (prec != PREC_BF16 && prec != PREC_FP16)
        return DDPC_FAIL(e, DDPC_E_INVALID, "cuda gemm_batched: unknown precision %d", prec);
    const void *a_lo = NULL, *b_lo = NULL;
    DDPC_TRY(cast_span(c, 0, prec, A, span_of(batch, stride_a, trans_a ? k : m,
                                              trans_a ? m : k, lda), &a_lo, e));
    DDPC_TRY(cast_span(c, 1, prec, B, span_of(batch, stride_b, trans_b ? n : k,
                                              trans_b ? k : n, ldb), &b_lo, e));
    cudaDataType_t t = prec == PREC_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    CUBLAS_CHECK(e, cublasGemmStridedBatchedEx(c->blas, op_b, op_a, n, m, k, &alpha, b_lo, t,
                                               ldb, stride_b, a_lo, t, lda, stride_a, &beta, C,
                                               CUDA_R_32F, ldc, stride_c, batch,
                                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return 0;
}

static int cuda_bias_act_forward(struct ddpc_ops *o, float *z, const float *bias, float *a,
                                 int rows, int cols, int act, struct ddpc_err *e)
{
    size_t n = (size_t)rows * (size_t)cols;
    if (n == 0)
        return 0;
    k_bias_act<<<grid_for(n), THREADS, 0, ctx_of(o)->stream>>>(z, bias, a, n, cols, act);
    KERNEL_CHECK(e, "k_bias_act");
    return 0;
}

static int cuda_act_backward(struct ddpc_ops *o, const float *z, const float *da, float *dz,
                             size_t n, int act, struct ddpc_err *e)
{
    if (n == 0)
        return 0;
    struct ops_cuda_ctx *c = ctx_of(o);
    if (act == DDPC_K_IDENTITY) {
        if (dz != da)
            CUDA_CHECK(e, cudaMemcpyAsync(dz, da, n * sizeof *dz, cudaMemcpyDeviceToDevice,
                                          c->stream));
        return 0;
    }
    k_act_back<<<grid_for(n), THREADS, 0, c->stream>>>(z, da, dz, n, act);
    KERNEL_CHECK(e, "k_act_back");
    return 0;
}

/* A device vector of at least n ones (for bias_grad), grown on demand. */
static int ensure_ones(struct ops_cuda_ctx *c, int n, struct ddpc_err *e)
{
    if (n <= c->cap_ones)
        return 0;
    count_grow(c);
    if (c->d_ones)
        CUDA_CHECK(e, cudaFree(c->d_ones));
    c->d_ones = NULL;
    c->cap_ones = 0;
    CUDA_CHECK(e, cudaMalloc(&c->d_ones, (size_t)n * sizeof *c->d_ones));
    k_fill<<<grid_for((size_t)n), THREADS, 0, c->stream>>>(c->d_ones, (size_t)n, 1.0f);
    KERNEL_CHECK(e, "k_fill");
    c->cap_ones = n;
    return 0;
}

/* db[cols] = beta db + dz^T 1: a GEMV against a ones vector. Row-major
 * dz[rows, cols] read column-major is a cols x rows matrix with leading
 * dimension cols, so this is y = M x with no transpose. cuBLAS reads the
 * whole matrix at full bandwidth, where a thread per column would leave most
 * SMs idle on a 4096-wide layer. */
static int cuda_bias_grad(struct ddpc_ops *o, const float *dz, float *db, int rows, int cols,
                          float beta, struct ddpc_err *e)
{
    struct ops_cuda_ctx *c = ctx_of(o);
    if (cols <= 0)
        return 0;
    if (rows <= 0) {              /* BLAS quick-returns on n == 0 even with beta 0 */
        if (beta == 0.0f)
            CUDA_CHECK(e, cudaMemsetAsync(db, 0, (size_t)cols * sizeof *db, c->stream));
        else
            DDPC_TRY(o->scale(o, db, (size_t)cols, beta, e));
        return 0;
    }
    DDPC_TRY(ensure_ones(c, rows, e));
    const float one = 1.0f;
    /* beta == 0: BLAS does not read db, so stale NaNs cannot leak in */
    CUBLAS_CHECK(e, cublasSgemv(c->blas, CUBLAS_OP_N, cols, rows, &one, dz, cols, c->d_ones, 1,
                                &beta, db, 1));
    return 0;
}

/* Grows the per-row loss scratch (reserve sizes it before the first step;
 * growth later synchronises the device and is counted). */
static int ensure_rows(struct ops_cuda_ctx *c, int rows, struct ddpc_err *e)
{
    if (rows <= c->cap_rows)
        return 0;
    count_grow(c);
    if (c->d_row_loss)
        CUDA_CHECK(e, cudaFree(c->d_row_loss));
    if (c->d_row_flag)
        CUDA_CHECK(e, cudaFree(c->d_row_flag));
    c->d_row_loss = NULL;
    c->d_row_flag = NULL;
    c->cap_rows = 0;
    CUDA_CHECK(e, cudaMalloc(&c->d_row_loss, (size_t)rows * sizeof *c->d_row_loss));
    CUDA_CHECK(e, cudaMalloc(&c->d_row_flag, (size_t)rows * sizeof *c->d_row_flag));
    c->cap_rows = rows;
    return 0;
}

static int cuda_loss(struct ddpc_ops *o, int loss_type, const float *logits,
                     const int32_t *labels, const float *targets, float *dlogits, int rows,
                     int cols, float grad_scale, double *acc, struct ddpc_err *e)
{
    struct ops_cuda_ctx *c = ctx_of(o);
    if (loss_type == DDPC_K_LOSS_XENT && !labels)
        return DDPC_FAIL(e, DDPC_E_INVALID, "cross_entropy loss needs labels");
    if (loss_type == DDPC_K_LOSS_MSE && !targets)
        return DDPC_FAIL(e, DDPC_E_INVALID, "mse loss needs float targets");
    if (loss_type != DDPC_K_LOSS_XENT && loss_type != DDPC_K_LOSS_MSE)
        return DDPC_FAIL(e, DDPC_E_INVALID, "unknown loss %d", loss_type);
    if (rows <= 0 || cols <= 0)
        return 0;
    DDPC_TRY(ensure_rows(c, rows, e));
    if (loss_type == DDPC_K_LOSS_XENT && cols >= XENT_WIDE) {
        /* a GPT's vocabulary: a block per row (ops_cuda_rows.cuh) */
        k_xent_wide<<<xent_blocks(rows), XENT_THREADS, 0, c->stream>>>(
            logits, labels, dlogits, rows, cols, grad_scale, c->d_row_loss, c->d_row_flag);
        KERNEL_CHECK(e, "k_xent_wide");
    } else {
        k_loss_rows<<<(rows + THREADS - 1) / THREADS, THREADS, 0, c->stream>>>(
            loss_type, logits, labels, targets, dlogits, rows, cols, grad_scale,
            c->d_row_loss, c->d_row_flag);
        KERNEL_CHECK(e, "k_loss_rows");
    }
    /* into the caller's device accumulator: no copy, no wait (ops.h) */
    k_loss_reduce<<<1, BLOCK_THREADS, 0, c->stream>>>(c->d_row_loss, c->d_row_flag, rows, acc);
    KERNEL_CHECK(e, "k_loss_reduce");
    return 0;
}

static int cuda_sumsq(struct ddpc_ops *o, const float *x, size_t n, double *host_out,
                      struct ddpc_err *e)
{
    struct ops_cuda_ctx *c = ctx_of(o);
    if (n == 0) {
        *host_out = 0.0;
        return 0;
    }
    /* Fixed grid (not sized by n), so the summation order depends only on n. */
    k_sumsq_partial<<<RED_BLOCKS, BLOCK_THREADS, 0, c->stream>>>(x, n, c->d_partial);
    KERNEL_CHECK(e, "k_sumsq_partial");
    k_sum_partials<<<1, BLOCK_THREADS, 0, c->stream>>>(c->d_partial, RED_BLOCKS, c->d_result);
    KERNEL_CHECK(e, "k_sum_partials");
    CUDA_CHECK(e, cudaMemcpyAsync(c->h_result, c->d_result, sizeof *c->h_result,
                                  cudaMemcpyDeviceToHost, c->stream));
    DDPC_TRY(stream_wait(o, "sumsq", e));
    *host_out = c->h_result[0];
    return 0;
}

static int cuda_scale(struct ddpc_ops *o, float *x, size_t n, float s, struct ddpc_err *e)
{
    if (n == 0 || s == 1.0f)
        return 0;
    k_scale<<<grid_for(n), THREADS, 0, ctx_of(o)->stream>>>(x, n, s);
    KERNEL_CHECK(e, "k_scale");
    return 0;
}

/* Layer kernels: one thread per element of ops_kernels.h's element
 * functions, the arithmetic the CPU backend runs. Arguments by value. */
__global__ static void k_layer(int kind, size_t n, struct ddpc_lk a)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (; i < n; i += stride)
        ddpc_lk_run(kind, i, &a);
}

/* Layer norm's dw, db (n = C columns over a->N rows): segment sums of at
 * most SEG_CHUNK columns at a time into d_seg, then their sum in order. */
static int ln_bwd_dw(struct ops_cuda_ctx *c, const struct ddpc_lk *a, struct ddpc_err *e)
{
    for (int c0 = 0; c0 < a->C; c0 += SEG_CHUNK) {
        int cols = a->C - c0 < SEG_CHUNK ? a->C - c0 : SEG_CHUNK;
        dim3 grid((unsigned)((cols + SEG_COLS - 1) / SEG_COLS), SEG_ROWS);
        dim3 block(SEG_COLS, SEG_DEPTH);
        k_ln_dw_part<<<grid, block, 0, c->stream>>>(*a, c0, cols, c->d_seg);
        KERNEL_CHECK(e, "k_ln_dw_part");
        k_ln_dw_sum<<<grid_for((size_t)cols), THREADS, 0, c->stream>>>(*a, c0, cols, c->d_seg);
        KERNEL_CHECK(e, "k_ln_dw_sum");
    }
    return 0;
}

/* A per-channel reduction (ops_cuda_rows.cuh), as many channels a pass as
 * d_seg holds: the conv bias gradient, batch norm's backward sums, or (bn
 * = 1) batch norm's training statistics, whose second pass needs the
 * first's means. */
static int chan_sums(struct ops_cuda_ctx *c, int what, int bn, const struct ddpc_lk *a,
                     struct ddpc_err *e)
{
    int chunk = (int)(SEG_DOUBLES / chan_part_doubles(1));
    for (int c0 = 0; c0 < a->C; c0 += chunk) {
        int cols = a->C - c0 < chunk ? a->C - c0 : chunk;
        dim3 grid((unsigned)cols, CH_SEGS);
        for (int pass = 0; pass < (bn ? 2 : 1); pass++) {
            int w = bn ? (pass ? CH_BN_SQ : CH_BN_SUM) : what;
            k_chan_part<<<grid, CH_THREADS, 0, c->stream>>>(w, *a, c0, cols, c->d_seg);
            KERNEL_CHECK(e, "k_chan_part");
            k_chan_sum<<<grid_for((size_t)cols), THREADS, 0, c->stream>>>(w, *a, c0, cols,
                                                                          c->d_seg);
            KERNEL_CHECK(e, "k_chan_sum");
        }
    }
    return 0;
}

/* The token embedding's dW (n = C): zeroed unless accg, then each
 * (column, vocabulary slice) thread adds its rows in row order. */
static int wte_bwd(struct ops_cuda_ctx *c, const struct ddpc_lk *a, struct ddpc_err *e)
{
    size_t C = (size_t)a->C, rows = (size_t)a->N * (size_t)a->T;
    if (!a->accg)
        CUDA_CHECK(e, cudaMemsetAsync(a->dw, 0, (size_t)a->V * C * sizeof *a->dw, c->stream));
    if (rows == 0)
        return 0;
    dim3 grid((unsigned)((C + WTE_COLS - 1) / WTE_COLS), WTE_SLICES / 8), block(WTE_COLS, 8);
    k_wte_bwd<<<grid, block, 0, c->stream>>>(*a, rows);
    KERNEL_CHECK(e, "k_wte_bwd");
    return 0;
}

/* Row kernels of 8 lanes (ops_cuda_rows.cuh) for the reductions along a
 * row, the column kernels for those down a column; everything else is
 * the element function, one thread per index. */
static int cuda_layer_kernel(struct ddpc_ops *o, int kind, size_t n, const struct ddpc_lk *a,
                             struct ddpc_err *e)
{
    struct ops_cuda_ctx *c = ctx_of(o);
    if (kind < 0 || kind >= DDPC_LK_COUNT)
        return DDPC_FAIL(e, DDPC_E_INVALID, "layer_kernel: unknown kind %d", kind);
    if (n == 0)
        return 0;
    switch (kind) {
    case DDPC_LK_LN_FWD:
        k_ln_fwd8<<<rows_blocks(n), ROW_THREADS, 0, c->stream>>>(n, *a);
        KERNEL_CHECK(e, "k_ln_fwd8");
        return 0;
    case DDPC_LK_LN_BWD_DX:
        k_ln_bwd_dx8<<<rows_blocks(n), ROW_THREADS, 0, c->stream>>>(n, *a);
        KERNEL_CHECK(e, "k_ln_bwd_dx8");
        return 0;
    case DDPC_LK_ATTN_SOFTMAX:
        k_attn_softmax8<<<rows_blocks(n), ROW_THREADS, 0, c->stream>>>(n, *a);
        KERNEL_CHECK(e, "k_attn_softmax8");
        return 0;
    case DDPC_LK_ATTN_SOFTMAX_BWD:
        k_attn_softmax_bwd8<<<rows_blocks(n), ROW_THREADS, 0, c->stream>>>(n, *a);
        KERNEL_CHECK(e, "k_attn_softmax_bwd8");
        return 0;
    case DDPC_LK_LN_BWD_DW:
        return ln_bwd_dw(c, a, e);
    case DDPC_LK_EMB_BWD_WTE:
        return wte_bwd(c, a, e);
    case DDPC_LK_CHAN_BIAS_GRAD:
        return chan_sums(c, CH_BIAS_GRAD, 0, a, e);
    case DDPC_LK_BN_BWD_REDUCE:
        return chan_sums(c, CH_BN_BWD, 0, a, e);
    case DDPC_LK_BN_STATS:
        if (a->training)
            return chan_sums(c, 0, 1, a, e);
        k_layer<<<grid_for(n), THREADS, 0, c->stream>>>(kind, n, *a);   /* running stats */
        KERNEL_CHECK(e, "k_layer");
        return 0;
    default:
        k_layer<<<grid_for(n), THREADS, 0, c->stream>>>(kind, n, *a);
        KERNEL_CHECK(e, "k_layer");
        return 0;
    }
}

/* Fused causal attention (ops_cuda_attn.cuh): bf16 products, the head
 * sizes layers.h's DDPC_ATTN_FUSED_HS names (each its own kernels); a
 * grid's y is the heads, its z the samples, at most FA_GRID_YZ of each,
 * so a call of more samples runs in slices of FA_GRID_YZ, each kernel told
 * its slice's first sample (tests/test_cuda_attn.c launches slices of 2). */
static int cuda_attn_fused_fits(const struct ddpc_ops *o, int T, int C, int heads)
{
    return o->fused_attn && o->gemm_precision == PREC_BF16 && fa_shape_fits(T, C, heads);
}

static int fa_shape(const struct ddpc_ops *o, int B, int T, int C, int H, float p,
                    const char *what, struct ddpc_err *e)
{
    if (!cuda_attn_fused_fits(o, T, C, H) || B < 0 || !(p >= 0.0f && p < 1.0f))
        return DDPC_FAIL(e, DDPC_E_INVALID, "cuda %s: B=%d T=%d C=%d heads=%d dropout %g at "
                         "precision %d is not a fused attention's shape", what, B, T, C, H,
                         (double)p, o->gemm_precision);
    return 0;
}

/* One kernel for head size hs, with dropout or not (ops_cuda_attn_hs.cuh's
 * k_fa_<name>_<hs>[_drop]), launched on grid with the rest of the
 * arguments. */
#define FA_LAUNCH(name, hs, dropping, grid, stream, ...)                                \
    do {                                                                                \
        if ((hs) == 64 && !(dropping))                                                  \
            k_fa_##name##_64<<<(grid), FA_THREADS, 0, (stream)>>>(__VA_ARGS__);         \
        else if ((hs) == 64)                                                            \
            k_fa_##name##_64_drop<<<(grid), FA_THREADS, 0, (stream)>>>(__VA_ARGS__);    \
        else if (!(dropping))                                                           \
            k_fa_##name##_32<<<(grid), FA_THREADS, 0, (stream)>>>(__VA_ARGS__);         \
        else                                                                            \
            k_fa_##name##_32_drop<<<(grid), FA_THREADS, 0, (stream)>>>(__VA_ARGS__);    \
        KERNEL_CHECK(e, "k_fa_" #name);                                                 \
    } while (0)
static_assert(DDPC_ATTN_FUSED_HS(64) && DDPC_ATTN_FUSED_HS(32) && !DDPC_ATTN_FUSED_HS(16) &&
                  !DDPC_ATTN_FUSED_HS(48) && !DDPC_ATTN_FUSED_HS(128),
              "FA_LAUNCH has kernels for head sizes 64 and 32, no others");

static int cuda_attn_fused_forward(struct ddpc_ops *o, int B, int T, int C, int H, float p,
                                   uint64_t seed, const float *qkv, float *y, float *lse,
                                   struct ddpc_err *e)
{
    struct ops_cuda_ctx *c = ctx_of(o);
    DDPC_TRY(fa_shape(o, B, T, C, H, p, "attention forward", e));
    int hs = C / H;
    float scale = (float)(1.0 / sqrt((double)hs));
    struct fa_drop drop = fa_drop_of(p, seed);
    for (int b0 = 0; b0 < B; b0 += FA_GRID_YZ) {
        int nb = B - b0 < FA_GRID_YZ ? B - b0 : FA_GRID_YZ;
        dim3 grid(fa_tiles(T), (unsigned)H, (unsigned)nb);
        FA_LAUNCH(fwd, hs, p > 0.0f, grid, c->stream, qkv, y, lse, b0, T, C, H, scale, drop);
    }
    return 0;
}

static int cuda_attn_fused_backward(struct ddpc_ops *o, int B, int T, int C, int H, float p,
                                    uint64_t seed, const float *qkv, const float *y,
                                    const float *lse, const float *dy, float *dqkv, int acc,
                                    float *scratch, struct ddpc_err *e)
{
    struct ops_cuda_ctx *c = ctx_of(o);
    DDPC_TRY(fa_shape(o, B, T, C, H, p, "attention backward", e));
    if (B == 0)
        return 0;
    int hs = C / H;
    float scale = (float)(1.0 / sqrt((double)hs));
    float *delta = scratch;
    struct fa_drop drop = fa_drop_of(p, seed);
    k_fa_delta<<<grid_for((size_t)B * H * T), THREADS, 0, c->stream>>>(y, dy, delta, B, T, C, H);
    KERNEL_CHECK(e, "k_fa_delta");
    for (int b0 = 0; b0 < B; b0 += FA_GRID_YZ) {
        int nb = B - b0 < FA_GRID_YZ ? B - b0 : FA_GRID_YZ;
        dim3 grid(fa_tiles(T), (unsigned)H, (unsigned)nb);
        FA_LAUNCH(bwd_kv, hs, p > 0.0f, grid, c->stream, qkv, dy, lse, delta, dqkv, b0, T, C, H,
                  scale, acc, drop);
        FA_LAUNCH(bwd_q, hs, p > 0.0f, grid, c->stream, qkv, dy, lse, delta, dqkv, b0, T, C, H,
                  scale, acc, drop);
    }
    return 0;
}

static int cuda_optim_step(struct ddpc_ops *o, const struct ddpc_optim_step *s, float *param,
                           const float *grad, float *m, float *v, size_t n, struct ddpc_err *e)
{
    switch (s->type) {
    case DDPC_K_SGD:
        if (s->momentum != 0.0f && !m)
            return DDPC_FAIL(e, DDPC_E_INVALID, "sgd with momentum needs a momentum buffer");
        break;
    case DDPC_K_ADAM:
    case DDPC_K_ADAMW:
        if (!m || !v)
            return DDPC_FAIL(e, DDPC_E_INVALID, "adam needs moment buffers");
        break;
    default:
        return DDPC_FAIL(e, DDPC_E_INVALID, "unknown optimizer %d", s->type);
    }
    if (n == 0)
        return 0;
    /* Adam/AdamW constants: the host's (double, rounded once), or 0 = derive
     * in float, with the very expressions of ops_cpu.c's cpu_optim_step (on
     * the host here too, so the fallback rounds the same way). */
    struct ddpc_optim_step t = *s;
    if (t.type != DDPC_K_SGD) {
        t.one_minus_beta1 = s->one_minus_beta1 != 0.0f ? s->one_minus_beta1 : 1.0f - s->beta1;
        t.one_minus_beta2 = s->one_minus_beta2 != 0.0f ? s->one_minus_beta2 : 1.0f - s->beta2;
        t.step_size = s->step_size != 0.0f ? s->step_size : s->lr / s->bias_correction1;
        t.bc2_sqrt = s->bc2_sqrt != 0.0f ? s->bc2_sqrt : sqrtf(s->bias_correction2);
        t.decay = s->decay != 0.0f ? s->decay : 1.0f - s->lr * s->weight_decay;
    }
    k_optim<<<grid_for(n), THREADS, 0, ctx_of(o)->stream>>>(t, param, grad, m, v, n);
    KERNEL_CHECK(e, "k_optim");
    ctx_of(o)->w_lo_prec = 0;     /* the parameters changed: their copy is stale */
    return 0;
}

static int cuda_set_weights(struct ddpc_ops *o, const float *params, size_t n,
                            struct ddpc_err *e)
{
    struct ops_cuda_ctx *c = ctx_of(o);
    if (c->d_w_lo)
        CUDA_CHECK(e, cudaFree(c->d_w_lo));
    c->d_w_lo = NULL;
    c->w_base = NULL;
    c->w_n = 0;
    c->w_lo_prec = 0;
    /* fp32 gemms read the parameters themselves: no copy (a GPT-2 124M's
     * would be 249 MB) */
    if (!params || n == 0 || o->gemm_precision == PREC_FP32)
        return 0;
    CUDA_CHECK(e, cudaMalloc(&c->d_w_lo, n * 2));
    c->w_base = params;
    c->w_n = n;
    return 0;
}

static int cuda_reserve(struct ddpc_ops *o, int rows, size_t elems, struct ddpc_err *e)
{
    struct ops_cuda_ctx *c = ctx_of(o);
    const void *unused = NULL;
    int rc = 0;
    c->reserving = 1;
    if (rows > 0)
        rc = ensure_rows(c, rows, e);
    if (rc == 0 && rows > 0)
        rc = ensure_ones(c, rows, e);
    /* fp32 gemms cast nothing: no cast buffers (GPT-2 124M at batch 8:
     * the logits' gradient alone would take two of 824 MB) */
    for (int i = 0; rc == 0 && i < 2 && elems > 0 && o->gemm_precision != PREC_FP32; i++)
        rc = cast_lo(c, i, PREC_BF16, NULL, 1, (int)(elems < INT32_MAX ? elems : INT32_MAX),
                     0, &unused, e);
    c->reserving = 0;
    return rc;
}

/* Safe after a partial init: every handle is checked for NULL. Errors are
 * ignored here on purpose: destroy runs on the way out, often after the
 * failure that is being reported, which must not be overwritten. */
static void cuda_destroy(struct ddpc_ops *o)
{
    struct ops_cuda_ctx *c = ctx_of(o);
    if (!c)
        return;
    if (c->stream)
        (void)cudaStreamSynchronize(c->stream);
    if (c->blas)
        (void)cublasDestroy(c->blas);
    if (c->d_row_loss)
        (void)cudaFree(c->d_row_loss);
    if (c->d_row_flag)
        (void)cudaFree(c->d_row_flag);
    if (c->d_partial)
        (void)cudaFree(c->d_partial);
    if (c->d_seg)
        (void)cudaFree(c->d_seg);
    if (c->d_result)
        (void)cudaFree(c->d_result);
    if (c->h_result)
        (void)cudaFreeHost(c->h_result);
    if (c->d_ones)
        (void)cudaFree(c->d_ones);
    for (int i = 0; i < 2; i++)
        if (c->d_lo[i])
            (void)cudaFree(c->d_lo[i]);
    if (c->d_w_lo)
        (void)cudaFree(c->d_w_lo);
    if (c->ev_wait)
        (void)cudaEventDestroy(c->ev_wait);
    for (int i = 0; i < 2; i++)
        if (c->ev_slot[i])
            (void)cudaEventDestroy(c->ev_slot[i]);
    if (c->stream)
        (void)cudaStreamDestroy(c->stream);
    free(c);
    o->ctx = NULL;
}

static int ctx_init(struct ops_cuda_ctx *c, int device, struct ddpc_err *e)
{
    int count = 0;
    CUDA_CHECK(e, cudaGetDeviceCount(&count));
    if (device < 0 || device >= count)
        return DDPC_FAIL(e, DDPC_E_DEVICE,
                         "cuda: device %d does not exist: this process sees %d GPU(s)\n"
                         "---> HINT: list them with `nvidia-smi -L`; CUDA_VISIBLE_DEVICES "
                         "renumbers them from 0",
                         device, count);
    c->device = device;
    /* In the worker, after fork: the launcher never initialised CUDA. */
    CUDA_CHECK(e, cudaSetDevice(device));
    /* Non-blocking: no implicit ordering with the legacy default stream, so
     * NCCL's stream and ours are ordered only by the events we record. */
    CUDA_CHECK(e, cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    CUBLAS_CHECK(e, cublasCreate(&c->blas));
    CUBLAS_CHECK(e, cublasSetStream(c->blas, c->stream));
    /* fp32 (cuBLAS's default math uses no TF32): results comparable with
     * the CPU backend. matmul_precision: high opts into TF32 (cuda_gemm
     * switches the mode when o->matmul_tf32 changes). */
    CUBLAS_CHECK(e, cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH));
    c->tf32 = 0;
    CUDA_CHECK(e, cudaEventCreateWithFlags(&c->ev_wait, cudaEventDisableTiming));
    for (int i = 0; i < 2; i++)
        CUDA_CHECK(e, cudaEventCreateWithFlags(&c->ev_slot[i], cudaEventDisableTiming));
    CUDA_CHECK(e, cudaMalloc(&c->d_partial, RED_BLOCKS * sizeof *c->d_partial));
    CUDA_CHECK(e, cudaMalloc(&c->d_seg, SEG_DOUBLES * sizeof *c->d_seg));
    CUDA_CHECK(e, cudaMalloc(&c->d_result, 3 * sizeof *c->d_result));
    CUDA_CHECK(e, cudaMallocHost(&c->h_result, 3 * sizeof *c->h_result));
    return 0;
}

int ops_cuda_init(struct ddpc_ops *o, int device, struct ddpc_err *e)
{
    memset(o, 0, sizeof *o);
    o->name = "cuda";
    o->destroy = cuda_destroy;
    struct ops_cuda_ctx *c = (struct ops_cuda_ctx *)calloc(1, sizeof *c);
    if (!c)
        return DDPC_FAIL(e, DDPC_E_NOMEM, "cuda: cannot allocate the backend context");
    o->ctx = c;
    o->gemm_precision = PREC_FP32;
    o->fused_attn = 1;
    DDPC_TRY(ctx_init(c, device, e));
    o->alloc = cuda_alloc;
    o->release = cuda_release;
    o->to_device = cuda_to_device;
    o->to_host = cuda_to_host;
    o->synchronize = cuda_synchronize;
    o->gemm = cuda_gemm;
    o->bias_act_forward = cuda_bias_act_forward;
    o->act_backward = cuda_act_backward;
    o->bias_grad = cuda_bias_grad;
    o->loss = cuda_loss;
    o->sumsq = cuda_sumsq;
    o->scale = cuda_scale;
    o->optim_step = cuda_optim_step;
    o->set_weights = cuda_set_weights;
    o->reserve = cuda_reserve;
    o->host_alloc = cuda_host_alloc;
    o->host_free = cuda_host_free;
    o->to_device_async = cuda_to_device_async;
    o->fence = cuda_fence;
    o->layer_kernel = cuda_layer_kernel;
    o->gemm_batched = cuda_gemm_batched;
    o->attn_fused_fits = cuda_attn_fused_fits;
    o->attn_fused_forward = cuda_attn_fused_forward;
    o->attn_fused_backward = cuda_attn_fused_backward;
    c->ops = o;
    return 0;
}

cudaStream_t ops_cuda_stream(const struct ddpc_ops *o)
{
    if (!o || !o->ctx || !o->name || strcmp(o->name, "cuda") != 0)
        return NULL;
    return ctx_of(o)->stream;
}
