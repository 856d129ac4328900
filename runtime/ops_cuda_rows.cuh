/* ops_cuda_rows.cuh - the CUDA backend's row and column kernels.
 *
 * The element functions of ops_kernels.h run one thread per index: right
 * for element-wise work, wrong for a reduction over a row of 768 or 1024
 * floats (one thread walking a row reads a 32-byte sector per element, 8
 * rows apart per warp) or down a column of 8192 rows (768 threads for a
 * whole GPU). These kernels split such work across threads, and keep every
 * sum in a fixed order: no atomics, the same bits on every run.
 *
 *   rows of 8 lanes   layer norm forward and dx, the causal softmax forward
 *                     and backward: 8 threads per row, lane l owns the
 *                     elements j = l (mod 8). That is exactly how the CPU
 *                     code (ops_kernels.h, DDPC_K_LANES) splits its row
 *                     sums, and the 8 lanes combine in ddpc_k_lanes_sum's
 *                     tree, so the forward kernels give the CPU's bits.
 *                     Layer norm's dx sums in lanes here and in one chain
 *                     on the CPU (faster there): equal up to rounding.
 *   column segments   layer norm's dw, db: SEG_ROWS row segments of 32
 *                     columns per block, 8 threads down each column; the
 *                     segment sums go to scratch and a second kernel adds
 *                     them in segment order.
 *   vocabulary slices the token embedding's gradient: thread (c, s) owns
 *                     column c of the token ids v = s (mod WTE_SLICES) and
 *                     walks all rows in order, so each dw[v][c] adds its
 *                     rows in row order: the CPU's bits.
 *   a block per row   softmax cross-entropy over a wide row (GPT's 50257
 *                     logits): max, sum and the gradient with 256 threads.
 *   block sums        the loss's per-row values and flags into the
 *                     caller's device accumulator, and sumsq (gradient
 *                     clipping's norm) in a fixed grid of blocks, each a
 *                     fixed tree (block_sum).
 *   channel segments  a CNN's per-channel sums over [N][C][H] planes (conv
 *                     bias gradient, batch norm's statistics and backward
 *                     sums): 16 sample segments per channel, a block each,
 *                     then the segments in order.
 *
 * This file is C as well as CUDA: tests/test_cuda_rows.c compiles it with
 * the C compiler against tests/cuda_emu.h, which runs each block's threads
 * as real threads with real barriers and warp shuffles, so the CPU test
 * suite checks these kernels' indexing, barriers and sums (not the GPU's
 * memory model or speed: tests/gpu does that on a GPU). Keep to the common
 * subset: no templates, no references, no overloads, no <<<>>> here. The
 * launch shapes are the ROWS_/SEG_/WTE_ functions below, which ops_cuda.cu
 * and the test both use.
 */
#ifndef DDPC_OPS_CUDA_ROWS_CUH
#define DDPC_OPS_CUDA_ROWS_CUH

#include "ops_kernels.h"

#define ROW_LANES      DDPC_K_LANES  /* threads per row: the CPU's lanes */
#define ROW_THREADS    256           /* block of the row kernels: 32 rows */
#define ROW_MAX_BLOCKS 65535         /* more rows: grid-stride */
#define SEG_COLS       32            /* columns per column-segment block */
#define SEG_DEPTH      8             /* threads down each column */
#define SEG_ROWS       64            /* row segments (blockIdx.y) */
#define WTE_COLS       32            /* columns per embedding-gradient block */
#define WTE_SLICES     64            /* vocabulary slices: 8 per block, 8 blocks */
#define XENT_THREADS   256           /* cross-entropy: threads per row */
#define XENT_WIDE      1024          /* a row at least this wide takes a block */

/* Blocks for `rows` rows of ROW_LANES threads. */
DDPC_HD unsigned rows_blocks(size_t rows)
{
    size_t per = ROW_THREADS / ROW_LANES;
    size_t b = (rows + per - 1) / per;
    return (unsigned)(b > ROW_MAX_BLOCKS ? ROW_MAX_BLOCKS : b);
}

/* Rows per segment, so that SEG_ROWS segments cover n rows. */
DDPC_HD int seg_rows_per(int n)
{
    return (n + SEG_ROWS - 1) / SEG_ROWS;
}

/* Blocks for k_xent_wide: one per row, up to ROW_MAX_BLOCKS. */
DDPC_HD unsigned xent_blocks(int rows)
{
    return (unsigned)(rows > ROW_MAX_BLOCKS ? ROW_MAX_BLOCKS : rows);
}

/* ---- block sums: the loss's and sumsq's reductions ---- */

#define BLOCK_THREADS  256           /* block of every block_sum kernel */
#define RED_BLOCKS     256           /* fixed grid of sumsq's first stage: fixed order */

/* Sum of v over the block, in a fixed tree order. Every thread must call it;
 * every thread gets the result. */
__device__ static double block_sum(double v)
{
    __shared__ double s[BLOCK_THREADS];
    s[threadIdx.x] = v;
    __syncthreads();
    for (int w = BLOCK_THREADS / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w)
            s[threadIdx.x] += s[threadIdx.x + w];
        __syncthreads();
    }
    double r = s[0];
    __syncthreads();              /* s is reused by the next call in this kernel */
    return r;
}

/* One thread per row: the row's loss, correctness flag and dlogits. */
__global__ static void k_loss_rows(int loss_type, const float *logits, const int32_t *labels,
                                   const float *targets, float *dlogits, int rows, int cols,
                                   float grad_scale, double *row_loss, int *row_flag)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows)
        return;
    const float *x = logits + (size_t)r * cols;     /* [cols] */
    float *d = dlogits + (size_t)r * cols;          /* [cols] */
    if (loss_type == DDPC_K_LOSS_XENT) {
        int y = labels[r];
        if (y < 0 || y >= cols) {                   /* reported by the host */
            row_loss[r] = 0.0;
            row_flag[r] = -1;
            return;
        }
        int correct = 0;
        row_loss[r] = ddpc_k_xent_row(x, y, d, cols, grad_scale, &correct);
        row_flag[r] = correct;
    } else {
        row_loss[r] = ddpc_k_mse_row(x, targets + (size_t)r * cols, d, cols, grad_scale);
        row_flag[r] = 0;
    }
}

/* One block: acc[0] += sum row_loss, acc[1] += correct rows, acc[2] += bad
 * labels (acc may be NULL: nothing kept). Stream order makes the read-add-
 * write of acc safe: one thread, one kernel at a time. */
__global__ static void k_loss_reduce(const double *row_loss, const int *row_flag, int rows,
                                     double *acc)
{
    double l = 0.0, c = 0.0, bad = 0.0;
    for (int r = threadIdx.x; r < rows; r += blockDim.x) {
        l += row_loss[r];
        c += row_flag[r] == 1;
        bad += row_flag[r] == -1;
    }
    l = block_sum(l);
    c = block_sum(c);
    bad = block_sum(bad);
    if (threadIdx.x == 0 && acc) {
        acc[0] += l;
        acc[1] += c;
        acc[2] += bad;
    }
}

/* Stage 1 of sumsq: RED_BLOCKS blocks, each a grid-stride partial sum
 * (a fixed grid, not sized by n: the summation order depends on n only). */
__global__ static void k_sumsq_partial(const float *x, size_t n, double *partial)
{
    double s = 0.0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        s += (double)x[i] * x[i];
    s = block_sum(s);
    if (threadIdx.x == 0)
        partial[blockIdx.x] = s;
}

/* Stage 2: one block sums the RED_BLOCKS partials. */
__global__ static void k_sum_partials(const double *partial, int n, double *out)
{
    double s = 0.0;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        s += partial[i];
    s = block_sum(s);
    if (threadIdx.x == 0)
        out[0] = s;
}

/* ---- 8 lanes per row ---- */

/* This thread's lane in its row and its row group's shuffle mask (the
 * group's 8 lanes of the warp: lanes of other groups may have left). */
__device__ static inline unsigned row_lane(void)
{
    return threadIdx.x % ROW_LANES;
}

__device__ static inline unsigned row_mask(void)
{
    return 0xFFu << (threadIdx.x % 32 / ROW_LANES * ROW_LANES);
}

/* The first row of this thread and the stride between its rows. */
__device__ static inline size_t row_first(void)
{
    return (size_t)blockIdx.x * (ROW_THREADS / ROW_LANES) + threadIdx.x / ROW_LANES;
}

__device__ static inline size_t row_stride(void)
{
    return (size_t)gridDim.x * (ROW_THREADS / ROW_LANES);
}

/* The first index j >= n that lane l owns (j = l mod ROW_LANES). */
DDPC_HD int lane_from(int n, unsigned l)
{
    return n + (int)((l + ROW_LANES - (unsigned)n % ROW_LANES) % ROW_LANES);
}

/* The sum of the group's 8 lane values, as ddpc_k_lanes_sum adds them:
 * ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)). Each xor step pairs
 * the operands that tree pairs (addition commutes bit for bit), and every
 * lane ends with the same value. */
__device__ static inline double lanes_sum8(double v)
{
    unsigned m = row_mask();
    v += __shfl_xor_sync(m, v, 1, ROW_LANES);
    v += __shfl_xor_sync(m, v, 2, ROW_LANES);
    v += __shfl_xor_sync(m, v, 4, ROW_LANES);
    return v;
}

/* The group's maximum of its lane maxima (none NaN: see ddpc_k_row_max). */
__device__ static inline float lanes_max8(float v)
{
    unsigned m = row_mask();
    for (int w = 1; w < ROW_LANES; w <<= 1) {
        float o = __shfl_xor_sync(m, v, w, ROW_LANES);
        v = o > v ? o : v;
    }
    return v;
}

/* DDPC_LK_LN_FWD, rows in 8 lanes: ddpc_lk_ln_fwd's bits. */
__global__ static void k_ln_fwd8(size_t rows, struct ddpc_lk a)
{
    unsigned l = row_lane();
    int C = a.C;
    for (size_t r = row_first(); r < rows; r += row_stride()) {
        const float *x = a.x + r * (size_t)C;
        double sum = 0.0, sq = 0.0;
        for (int j = (int)l; j < C; j += ROW_LANES)
            sum += x[j];
        double mean = lanes_sum8(sum) / C;
        for (int j = (int)l; j < C; j += ROW_LANES) {
            double d = x[j] - mean;
            sq += d * d;
        }
        float fm = (float)mean;
        float rstd = (float)(1.0 / sqrt(lanes_sum8(sq) / C + (double)a.f2));
        if (l == 0) {
            a.s0[r] = fm;
            a.s1[r] = rstd;
        }
        float *y = a.y + r * (size_t)C;
        for (int j = (int)l; j < C; j += ROW_LANES)
            y[j] = (x[j] - fm) * rstd * a.w[j] + (a.b ? a.b[j] : 0.0f);
    }
}

/* DDPC_LK_LN_BWD_DX, rows in 8 lanes: ddpc_lk_ln_bwd_dx's arithmetic with
 * its two row sums in lanes (so not its bits: it sums in one chain). */
__global__ static void k_ln_bwd_dx8(size_t rows, struct ddpc_lk a)
{
    unsigned l = row_lane();
    int C = a.C;
    for (size_t r = row_first(); r < rows; r += row_stride()) {
        const float *x = a.x + r * (size_t)C, *dy = a.dy + r * (size_t)C;
        float fm = a.s0[r], rstd = a.s1[r];
        double s1 = 0.0, s2 = 0.0;
        for (int j = (int)l; j < C; j += ROW_LANES) {
            float wdy = dy[j] * a.w[j];
            s1 += wdy;
            s2 += (double)wdy * ((x[j] - fm) * rstd);
        }
        float m1 = (float)(lanes_sum8(s1) / C), m2 = (float)(lanes_sum8(s2) / C);
        float *dx = a.dx + r * (size_t)C;
        for (int j = (int)l; j < C; j += ROW_LANES) {
            float xhat = (x[j] - fm) * rstd;
            ddpc_k_put(&dx[j], rstd * (dy[j] * a.w[j] - m1 - xhat * m2), a.accx);
        }
    }
}

/* DDPC_LK_ATTN_SOFTMAX, rows in 8 lanes: ddpc_lk_attn_softmax's bits. */
__global__ static void k_attn_softmax8(size_t rows, struct ddpc_lk a)
{
    unsigned l = row_lane();
    int T = a.T;
    for (size_t i = row_first(); i < rows; i += row_stride()) {
        int n = (int)(i % (size_t)T) + 1;
        float *y = a.y + i * (size_t)T;
        float m = -INFINITY;
        for (int j = (int)l; j < n; j += ROW_LANES)
            m = y[j] > m ? y[j] : m;
        float mx = lanes_max8(m);
        double s = 0.0;
        for (int j = (int)l; j < n; j += ROW_LANES) {
            float ex = ddpc_k_expf(y[j] - mx);
            y[j] = ex;
            s += ex;
        }
        float inv = (float)(1.0 / lanes_sum8(s));
        for (int j = (int)l; j < n; j += ROW_LANES)
            y[j] *= inv;
        for (int j = lane_from(n, l); j < T; j += ROW_LANES)
            y[j] = 0.0f;
    }
}

/* DDPC_LK_ATTN_SOFTMAX_BWD, rows in 8 lanes: ddpc_lk_attn_softmax_bwd's
 * bits. dx may alias dy: a lane writes only the elements it read. */
__global__ static void k_attn_softmax_bwd8(size_t rows, struct ddpc_lk a)
{
    unsigned l = row_lane();
    int T = a.T;
    for (size_t i = row_first(); i < rows; i += row_stride()) {
        int n = (int)(i % (size_t)T) + 1;
        const float *p = a.x + i * (size_t)T, *dy = a.dy + i * (size_t)T;
        float *dx = a.dx + i * (size_t)T;
        double s = 0.0;
        for (int j = (int)l; j < n; j += ROW_LANES)
            s += (double)p[j] * dy[j];
        float fs = (float)lanes_sum8(s);
        for (int j = (int)l; j < n; j += ROW_LANES)
            dx[j] = a.f1 * (p[j] * (dy[j] - fs));
        for (int j = lane_from(n, l); j < T; j += ROW_LANES)
            dx[j] = 0.0f;
    }
}

/* ---- layer norm's dw, db: column segments ---- */

/* Block (SEG_COLS x SEG_DEPTH) of grid (columns / SEG_COLS, SEG_ROWS):
 * thread (tx, ty) sums column j = c0 + blockIdx.x SEG_COLS + tx over rows
 * r0 + ty, r0 + ty + SEG_DEPTH, ... of segment blockIdx.y; the block adds
 * its SEG_DEPTH sums in a fixed tree and writes the segment's sums to
 * part[blockIdx.y][j - c0] (dw) and part[SEG_ROWS + blockIdx.y][j - c0]
 * (db), a scratch row of `cols` doubles each. Columns [c0, c0 + cols). */
__global__ static void k_ln_dw_part(struct ddpc_lk a, int c0, int cols, double *part)
{
    __shared__ double sw[SEG_DEPTH][SEG_COLS], sb[SEG_DEPTH][SEG_COLS];
    int tx = (int)threadIdx.x, ty = (int)threadIdx.y;
    int jc = (int)blockIdx.x * SEG_COLS + tx, j = c0 + jc;
    int per = seg_rows_per(a.N);
    int r0 = (int)blockIdx.y * per, r1 = r0 + per < a.N ? r0 + per : a.N;
    double w = 0.0, b = 0.0;
    if (jc < cols)
        for (int r = r0 + ty; r < r1; r += SEG_DEPTH) {
            size_t o = (size_t)r * a.C + j;
            float xhat = (a.x[o] - a.s0[r]) * a.s1[r];
            w += (double)a.dy[o] * xhat;
            b += a.dy[o];
        }
    sw[ty][tx] = w;
    sb[ty][tx] = b;
    __syncthreads();
    for (int h = SEG_DEPTH / 2; h > 0; h >>= 1) {
        if (ty < h) {
            sw[ty][tx] += sw[ty + h][tx];
            sb[ty][tx] += sb[ty + h][tx];
        }
        __syncthreads();
    }
    if (ty == 0 && jc < cols) {
        part[(size_t)blockIdx.y * cols + jc] = sw[0][tx];
        part[(size_t)(SEG_ROWS + blockIdx.y) * cols + jc] = sb[0][tx];
    }
}

/* One thread per column of [c0, c0 + cols): the segment sums in order. */
__global__ static void k_ln_dw_sum(struct ddpc_lk a, int c0, int cols, const double *part)
{
    for (int jc = (int)(blockIdx.x * blockDim.x + threadIdx.x); jc < cols;
         jc += (int)(gridDim.x * blockDim.x)) {
        double w = 0.0, b = 0.0;
        for (int s = 0; s < SEG_ROWS; s++) {
            w += part[(size_t)s * cols + jc];
            b += part[(size_t)(SEG_ROWS + s) * cols + jc];
        }
        ddpc_k_put(&a.dw[c0 + jc], (float)w, a.accg);
        if (a.db)
            ddpc_k_put(&a.db[c0 + jc], (float)b, a.accg);
    }
}

/* ---- per-channel sums over [N][C][H] planes (conv bias, batch norm) ----
 *
 * DDPC_LK_CHAN_BIAS_GRAD and batch norm's statistics and backward sums add,
 * for each channel c, the N * H elements of its planes: one thread per
 * channel walked up to 131072 elements (a CNN's first layer at batch 128).
 * Here block (c, g) of CH_THREADS threads adds the elements of samples
 * [g n_per, (g+1) n_per) of channel c, flattened so that a small plane
 * does not idle the block, in a fixed tree; k_chan_sum adds the CH_SEGS
 * segment sums in order and finishes the op. Channels [c0, c0 + cols) per
 * pass; part holds 2 CH_SEGS cols sums, then cols means (batch norm). */
#define CH_THREADS BLOCK_THREADS
#define CH_SEGS    16

/* What k_chan_part sums: */
enum {
    CH_BIAS_GRAD,   /* v0: dy */
    CH_BN_SUM,      /* v0: x */
    CH_BN_SQ,       /* v0: (x - mean)^2, mean from k_chan_sum's CH_BN_SUM */
    CH_BN_BWD       /* v0: dy, v1: dy xhat */
};

DDPC_HD size_t chan_part_doubles(int cols)
{
    return (size_t)(2 * CH_SEGS + 1) * (size_t)cols;
}

__global__ static void k_chan_part(int what, struct ddpc_lk a, int c0, int cols, double *part)
{
    int cc = (int)blockIdx.x, c = c0 + cc, g = (int)blockIdx.y;
    int n_per = (a.N + CH_SEGS - 1) / CH_SEGS;
    int n0 = g * n_per, n1 = n0 + n_per < a.N ? n0 + n_per : a.N;
    size_t H = (size_t)a.H, count = n1 > n0 ? (size_t)(n1 - n0) * H : 0;
    const double *mean = part + (size_t)2 * CH_SEGS * cols;
    double v0 = 0.0, v1 = 0.0;
    for (size_t k = threadIdx.x; k < count; k += CH_THREADS) {
        size_t n = (size_t)n0 + k / H, o = (n * (size_t)a.C + (size_t)c) * H + k % H;
        switch (what) {
        case CH_BIAS_GRAD:
            v0 += a.dy[o];
            break;
        case CH_BN_SUM:
            v0 += a.x[o];
            break;
        case CH_BN_SQ: {
            double d = a.x[o] - mean[cc];
            v0 += d * d;
            break;
        }
        default: {                /* CH_BN_BWD: ddpc_lk_bn_bwd_reduce's terms */
            float dy = a.dy[o];
            v0 += dy;
            v1 += (double)dy * ((a.x[o] - a.s0[c]) * a.s1[c]);
            break;
        }
        }
    }
    v0 = block_sum(v0);
    if (what == CH_BN_BWD)
        v1 = block_sum(v1);
    if (threadIdx.x == 0) {
        part[(size_t)g * cols + cc] = v0;
        part[(size_t)(CH_SEGS + g) * cols + cc] = v1;
    }
}

/* One thread per channel of [c0, c0 + cols): the segment sums in order,
 * then what the element function does with its sums. */
__global__ static void k_chan_sum(int what, struct ddpc_lk a, int c0, int cols, double *part)
{
    double *mean = part + (size_t)2 * CH_SEGS * cols;
    for (int cc = (int)(blockIdx.x * blockDim.x + threadIdx.x); cc < cols;
         cc += (int)(gridDim.x * blockDim.x)) {
        int c = c0 + cc;
        double v0 = 0.0, v1 = 0.0;
        for (int g = 0; g < CH_SEGS; g++) {
            v0 += part[(size_t)g * cols + cc];
            v1 += part[(size_t)(CH_SEGS + g) * cols + cc];
        }
        size_t m = (size_t)a.N * (size_t)a.H;
        if (what == CH_BIAS_GRAD) {
            ddpc_k_put(&a.db[c], (float)v0, a.accg);
        } else if (what == CH_BN_SUM) {
            mean[cc] = v0 / (double)m;
        } else if (what == CH_BN_SQ) {
            /* ddpc_lk_bn_stats from its two sums on */
            float *rm = a.rs, *rv = a.rs + a.C;
            double var = v0 / (double)m;
            a.s0[c] = (float)mean[cc];
            a.s1[c] = (float)(1.0 / sqrt(var + (double)a.f2));
            float mom = a.f1;
            double unbiased = m > 1 ? v0 / (double)(m - 1) : var;
            rm[c] = (1.0f - mom) * rm[c] + mom * (float)mean[cc];
            rv[c] = (1.0f - mom) * rv[c] + mom * (float)unbiased;
            if (c == 0)
                a.rs[2 * a.C] += 1.0f;   /* num_batches_tracked */
        } else {
            a.t[c] = (float)v0;
            a.t[a.C + c] = (float)v1;
            ddpc_k_put(&a.dw[c], (float)v1, a.accg);
            ddpc_k_put(&a.db[c], (float)v0, a.accg);
        }
    }
}

/* ---- the token embedding's gradient ---- */

/* Block (WTE_COLS x 8) of grid (ceil(C / WTE_COLS), WTE_SLICES / 8):
 * thread (tx, ty) owns column c = blockIdx.x WTE_COLS + tx of every token
 * id v with v % WTE_SLICES == blockIdx.y 8 + ty, and adds dy's rows to
 * them in row order. dw is already zero, or holds what accg adds to. */
__global__ static void k_wte_bwd(struct ddpc_lk a, size_t rows)
{
    int c = (int)(blockIdx.x * WTE_COLS + threadIdx.x);
    int s = (int)(blockIdx.y * blockDim.y + threadIdx.y);
    if (c >= a.C)
        return;
    size_t C = (size_t)a.C;
    for (size_t r = 0; r < rows; r++) {
        int v = ddpc_k_token(a.x[r], a.V);
        if (v >= 0 && v % WTE_SLICES == s)
            a.dw[(size_t)v * C + c] += a.dy[r * C + c];
    }
}

/* ---- softmax cross-entropy, a block per row ---- */

/* ddpc_k_xent_row's results for a row of cols >= XENT_WIDE, one block of
 * XENT_THREADS per row: the maximum with its first index (torch.argmax's
 * tie rule), the sum of exp in double per thread and a fixed tree, then
 * d. The sum's order is not the CPU's one float chain: equal up to
 * rounding (closer to the exact sum). Labels are checked by the caller's
 * flag as in k_loss_rows. */
__global__ static void k_xent_wide(const float *logits, const int32_t *labels, float *dlogits,
                                   int rows, int cols, float grad_scale, double *row_loss,
                                   int *row_flag)
{
    __shared__ float smax[XENT_THREADS];
    __shared__ int sarg[XENT_THREADS];
    __shared__ double ssum[XENT_THREADS];
    int t = (int)threadIdx.x;
    for (int r = (int)blockIdx.x; r < rows; r += (int)gridDim.x) {
        const float *x = logits + (size_t)r * cols;
        float *d = dlogits + (size_t)r * cols;
        int y = labels[r];
        if (y < 0 || y >= cols) {              /* uniform across the block */
            if (t == 0) {
                row_loss[r] = 0.0;
                row_flag[r] = -1;
            }
            continue;
        }
        float xy = x[y];                       /* before d, which may alias x */
        /* As the CPU's scan: x[0] is the first candidate, and a later
         * element replaces the candidate only when greater (so a NaN
         * wins only at 0). Other threads start from -inf at index cols,
         * which any element's index beats on a tie. */
        float mx = t == 0 ? x[0] : -INFINITY;
        int arg = t == 0 ? 0 : cols;
        for (int j = t == 0 ? XENT_THREADS : t; j < cols; j += XENT_THREADS)
            if (x[j] > mx) {
                mx = x[j];
                arg = j;
            }
        smax[t] = mx;
        sarg[t] = arg;
        __syncthreads();
        for (int h = XENT_THREADS / 2; h > 0; h >>= 1) {
            if (t < h) {
                float o = smax[t + h];
                int oa = sarg[t + h];
                /* the larger; on a tie the lower index, as a left-to-right scan */
                if (o > smax[t] || (o == smax[t] && oa < sarg[t])) {
                    smax[t] = o;
                    sarg[t] = oa;
                }
            }
            __syncthreads();
        }
        mx = smax[0];
        arg = sarg[0];
        double s = 0.0;
        for (int j = t; j < cols; j += XENT_THREADS) {
            float ex = expf(x[j] - mx);
            d[j] = ex;
            s += ex;
        }
        ssum[t] = s;
        __syncthreads();
        for (int h = XENT_THREADS / 2; h > 0; h >>= 1) {
            if (t < h)
                ssum[t] += ssum[t + h];
            __syncthreads();
        }
        float fs = (float)ssum[0];
        float inv = grad_scale / fs;
        for (int j = t; j < cols; j += XENT_THREADS)
            d[j] = j == y ? d[j] * inv - grad_scale : d[j] * inv;
        if (t == 0) {
            row_loss[r] = (double)logf(fs) + (double)(mx - xy);
            row_flag[r] = arg == y;
        }
        /* No barrier needed before the next row's writes to smax and ssum:
         * every thread read smax[0] before this row's sum tree and
         * ssum[0] before the next row's max tree, whose barriers all pass. */
    }
}

#endif
