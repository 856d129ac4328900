/* ops_cuda_attn.cuh - causal self-attention fused into three kernels on the
 * tensor cores (bf16 products, fp32 accumulation), flash attention's way
 * (Dao, "FlashAttention-2", 2023): the scores S and probabilities P of a
 * block of queries live in registers, tile by tile of keys, and never reach
 * memory. attn.c's unfused path writes S, P, dP and dS, [B, heads, T, T]
 * fp32 each, ~70 GB a step for GPT-2 124M (bench/README.md): this reads qkv
 * and dy and writes y and dqkv, a few hundred MB.
 *
 *   k_fa_fwd     a block per (64 queries, sample x head), a warp per 16 of
 *                them: for each tile of 64 keys up to the diagonal,
 *                S = Q K^T (mma), the online softmax (running max m and
 *                sum l per row), O = O * exp(m_old - m) + P V (mma); at the
 *                end y = O / l, and lse = m + log l (natural log, S scaled
 *                by 1/sqrt(hs)) kept for backward.
 *   k_fa_delta   D = rowsum(dY * Y) per (row, head), what the softmax
 *                backward calls rowsum(P * dP).
 *   k_fa_bwd_kv  a block per (64 keys, sample x head), a warp per 16 keys:
 *                for each tile of 64 queries from the diagonal on, P^T from
 *                K Q^T and lse, dV += P^T dY, dP^T = V dY^T,
 *                dS^T = P^T (dP^T - D) / sqrt(hs), dK += dS^T Q.
 *   k_fa_bwd_q   a block per (64 queries, ...): for each tile of keys up to
 *                the diagonal, P, dP = dY V^T, dS, dQ += dS K.
 * dK, dV and dQ are each summed by one warp in tile order: no atomics, the
 * same bits on every run (the price: S and P computed twice in backward).
 * Dropout on the probabilities (struct fa_drop: the mask attn.c's
 * unfused path draws, entry by entry from the same counter-based hash):
 * l sums P before it, O sums Z P after it (Z = mask / (1 - p)); backward,
 * dV += (Z P)^T dY and dS = P (Z dP - D), D still rowsum(dY * Y).
 *
 * Shapes: head size 64 (GPT-2's and nanoGPT's 768 / 12) or 32, each its
 * own three kernels (ops_cuda_attn_hs.cuh, included once per size), any
 * T; the last tile is padded with zero rows and masked. qkv [B, T, 3C] as
 * attn.h lays it out, y [B, T, C], fp32 in memory: the kernels round Q, K,
 * V and dY to bf16 as they load them, so no cast pass and no bf16 copy.
 *
 * Tensor-core fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16",
 * .bf16): lane = 4 g + t. A 16x16 (row-major): a[0] = A[g][2t, 2t+1],
 * a[1] = A[g+8][2t..], a[2] = A[g][2t+8..], a[3] = A[g+8][2t+8..], each a
 * pair of bf16 in one 32-bit register, the lower column in the low half.
 * B 16x8 (k x n): b[0] = B[2t, 2t+1][g], b[1] = B[2t+8, 2t+9][g]. C/D 16x8
 * fp32: d[0], d[1] = D[g][2t, 2t+1], d[2], d[3] = D[g+8][2t, 2t+1]. Two
 * C tiles side by side are, rounded to bf16, exactly an A fragment: so P
 * and dS go from one product into the next without leaving the registers.
 *
 * Like ops_cuda_rows.cuh this file is C as well as CUDA: tests compile it
 * against tests/cuda_emu.h, whose fa_mma is a warp-wide exchange of these
 * fragments, so the CPU suite checks the indexing, masking, barriers and
 * the fragment layout as written above (tests/gpu checks that the tensor
 * cores agree).
 */
#ifndef DDPC_OPS_CUDA_ATTN_CUH
#define DDPC_OPS_CUDA_ATTN_CUH

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "layers.h"        /* DDPC_ATTN_FUSED_HS: the head sizes instantiated below */
#include "ops_kernels.h"

#define FA_TILE    64                 /* queries per block, keys per tile */
#define FA_WARPS   4                  /* 16 rows each */
#define FA_THREADS (32 * FA_WARPS)
/* 32-bit words per shared row of `cols` bf16: padded so that a fragment's
 * 8 rows x 4 words hit 32 banks (the stride is 4 mod 32 words) */
#define FA_LDS(cols) ((cols) / 2 + 4)

/* Two bf16 in one register: lo in bits 0-15. */
__device__ static inline unsigned fa_pack(float lo, float hi)
{
    return ddpc_k_bf16_bits(lo) | (ddpc_k_bf16_bits(hi) << 16);
}

/* d (16x8 fp32) += a (16x16 bf16) b (16x8 bf16), the warp together. */
#ifdef __CUDACC__
__device__ static inline void fa_mma(float *d, const unsigned *a, const unsigned *b)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#else
#define fa_mma emu_mma_bf16_16816
#endif

/* Max and sum over the 4 lanes of a quad (lanes 4g .. 4g+3: one row's). */
__device__ static inline float fa_quad_max(float v)
{
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1, 32));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2, 32));
}

__device__ static inline float fa_quad_sum(float v)
{
    v += __shfl_xor_sync(0xffffffffu, v, 1, 32);
    return v + __shfl_xor_sync(0xffffffffu, v, 2, 32);
}

/* Dropout on the probabilities, as attn.c's unfused path draws it
 * (DDPC_LK_DROPOUT_FWD over the call's [B, H, T, T]): entry (b, h, query,
 * key) is kept iff ddpc_k_uniform(seed, ((b * H + h) * T + query) * T +
 * key) >= p, and then scaled by keep (1 / (1 - p), rounded as attn.c
 * rounds it). p = 0: nothing dropped. */
struct fa_drop {
    float    p, keep;
    uint64_t seed;
};

/* The call's dropout (p 0: none); keep rounded as attn.c's drop_probs
 * rounds f1. */
__host__ __device__ static inline struct fa_drop fa_drop_of(float p, uint64_t seed)
{
    struct fa_drop d;
    d.p = p;
    d.keep = p > 0.0f ? (float)(1.0 / (1.0 - (double)p)) : 1.0f;
    d.seed = seed;
    return d;
}

/* What entry (b, h, query, key) of P is multiplied by: keep or 0. */
__device__ static inline float fa_dropped(const struct fa_drop *d, int b, int H, int h, int T,
                                          int query, int key)
{
    uint64_t i = (((uint64_t)b * (uint64_t)H + (uint64_t)h) * (uint64_t)T +
                  (uint64_t)query) * (uint64_t)T + (uint64_t)key;
    return ddpc_k_uniform(d->seed, i) >= d->p ? d->keep : 0.0f;
}

/* The helpers below take their sizes as arguments; every caller passes
 * constants (FA_TILE, a head size), so once inlined their loops unroll
 * and the fragment arrays stay in registers (ptxas: no stack frame). */

/* Tiles of bf16 pairs in shared memory (rows of lds words), from 64 rows
 * r0.. of a row-major fp32 matrix x of `cols` columns (row stride ld; rows
 * at or past T read as 0):
 *   rows: dst[r][p] = (x[r0+r][2p], x[r0+r][2p+1])   (a B operand whose n is the row)
 *   cols: dst[c][p] = (x[r0+2p][c], x[r0+2p+1][c])   (a B operand whose k is the row) */
__device__ static void fa_load_rows(unsigned *dst, int lds, int cols, const float *x, size_t ld,
                                    int r0, int T)
{
    for (int i = (int)threadIdx.x; i < FA_TILE * cols / 2; i += FA_THREADS) {
        int r = i / (cols / 2), p = i % (cols / 2);
        float x0 = 0.0f, x1 = 0.0f;
        if (r0 + r < T) {
            const float *s = x + (size_t)(r0 + r) * ld + 2 * p;
            x0 = s[0];
            x1 = s[1];
        }
        dst[r * lds + p] = fa_pack(x0, x1);
    }
}

__device__ static void fa_load_cols(unsigned *dst, int lds, int cols, const float *x, size_t ld,
                                    int r0, int T)
{
    for (int i = (int)threadIdx.x; i < cols * FA_TILE / 2; i += FA_THREADS) {
        int c = i % cols, p = i / cols, r = r0 + 2 * p;
        float x0 = r < T ? x[(size_t)r * ld + c] : 0.0f;
        float x1 = r + 1 < T ? x[(size_t)(r + 1) * ld + c] : 0.0f;
        dst[c * lds + p] = fa_pack(x0, x1);
    }
}

/* The A fragments of this lane for rows r, r + 8 (of 16 from the warp's
 * first) of a row-major fp32 matrix, `cols` columns: a[kk] for columns
 * 16 kk .. 16 kk + 15. Rows at or past T are 0. */
__device__ static void fa_load_a(unsigned (*a)[4], int cols, const float *x, size_t ld, int r,
                                 int T)
{
    int t = (int)threadIdx.x % 4;
    const float *lo = x + (size_t)r * ld, *hi = x + (size_t)(r + 8) * ld;
    for (int kk = 0; kk < cols / 16; kk++) {
        int c = 16 * kk + 2 * t;
        a[kk][0] = r < T ? fa_pack(lo[c], lo[c + 1]) : 0u;
        a[kk][1] = r + 8 < T ? fa_pack(hi[c], hi[c + 1]) : 0u;
        a[kk][2] = r < T ? fa_pack(lo[c + 8], lo[c + 9]) : 0u;
        a[kk][3] = r + 8 < T ? fa_pack(hi[c + 8], hi[c + 9]) : 0u;
    }
}

/* acc[j] (16 x 8 n8 as n8 tiles of 8 columns) += A (16 x 16 k16, fragments
 * a) B, B's 16 k16 x 8 n8 from a shared tile (rows of lds words) whose row
 * n holds B's column n. S = Q K^T is n8 = FA_TILE / 8, k16 = hs / 16;
 * O = P V the other way round. */
__device__ static void fa_mma_tile(float (*acc)[4], const unsigned (*a)[4], const unsigned *b,
                                   int lds, int n8, int k16)
{
    int g = (int)threadIdx.x % 32 / 4, t = (int)threadIdx.x % 4;
    for (int j = 0; j < n8; j++)
        for (int kk = 0; kk < k16; kk++) {
            unsigned bf[2];
            bf[0] = b[(8 * j + g) * lds + 8 * kk + t];
            bf[1] = b[(8 * j + g) * lds + 8 * kk + 4 + t];
            fa_mma(acc[j], a[kk], bf);
        }
}

/* The A fragments of a 16 x 64 product held as C tiles (x[j], columns
 * 8j..8j+7), rounded to bf16: columns 16 kk.. are tiles 2 kk and 2 kk + 1. */
__device__ static void fa_c_to_a(unsigned (*a)[4], const float (*x)[4])
{
    for (int kk = 0; kk < FA_TILE / 16; kk++) {
        a[kk][0] = fa_pack(x[2 * kk][0], x[2 * kk][1]);
        a[kk][1] = fa_pack(x[2 * kk][2], x[2 * kk][3]);
        a[kk][2] = fa_pack(x[2 * kk + 1][0], x[2 * kk + 1][1]);
        a[kk][3] = fa_pack(x[2 * kk + 1][2], x[2 * kk + 1][3]);
    }
}

__device__ static void fa_zero(float (*x)[4], int n8)
{
    for (int j = 0; j < n8; j++)
        x[j][0] = x[j][1] = x[j][2] = x[j][3] = 0.0f;
}

/* Writes (acc 0: =, 1: +=) this lane's part of a 16 x 8 n8 C-tile product,
 * rows r and r + 8 (those below T), into row-major dst (row stride ld). */
__device__ static void fa_store(float *dst, size_t ld, int r, int T, const float (*x)[4], int n8,
                                float mul_lo, float mul_hi, int acc)
{
    int t = (int)threadIdx.x % 4;
    for (int j = 0; j < n8; j++) {
        int c = 8 * j + 2 * t;
        if (r < T) {
            float *d = dst + (size_t)r * ld + c;
            d[0] = (acc ? d[0] : 0.0f) + x[j][0] * mul_lo;
            d[1] = (acc ? d[1] : 0.0f) + x[j][1] * mul_lo;
        }
        if (r + 8 < T) {
            float *d = dst + (size_t)(r + 8) * ld + c;
            d[0] = (acc ? d[0] : 0.0f) + x[j][2] * mul_hi;
            d[1] = (acc ? d[1] : 0.0f) + x[j][3] * mul_hi;
        }
    }
}

/* Grid: (fa_tiles(T), H, nb) blocks of FA_THREADS: a sample's heads on y
 * and samples b0 .. b0 + nb - 1 of the call on z (each dimension at most
 * FA_GRID_YZ: a call of more samples is launched in slices, b0 the
 * slice's first), so no product B * H has a limit. */
#define FA_GRID_YZ 65535

/* Whether these kernels take a layer of this shape (ops_cuda.cu adds the
 * precision, bf16, and ops.fused_attn): a head size they have
 * (layers.h DDPC_ATTN_FUSED_HS), heads within the grid's y. */
__host__ __device__ static inline int fa_shape_fits(int T, int C, int heads)
{
    return heads >= 1 && heads <= FA_GRID_YZ && C % heads == 0 &&
           DDPC_ATTN_FUSED_HS(C / heads) && T >= 1;
}

__host__ __device__ static inline unsigned fa_tiles(int T)
{
    return (unsigned)((T + FA_TILE - 1) / FA_TILE);
}

/* delta[b, h, r] = sum over the head's hs = C / H columns of dy * y, in
 * column order; one thread per (b, h, r), B * H * T of them. */
__global__ static void k_fa_delta(const float *y, const float *dy, float *delta, int B, int T,
                                  int C, int H)
{
    size_t n = (size_t)B * H * T, hs = (size_t)(C / H);
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i % (size_t)T, bh = i / (size_t)T, b = bh / (size_t)H, h = bh % (size_t)H;
        size_t off = (b * T + r) * C + h * hs;
        float d = 0.0f;
        for (size_t c = 0; c < hs; c++)
            d += dy[off + c] * y[off + c];
        delta[i] = d;
    }
}

/* The three kernels for each head size (DDPC_ATTN_FUSED_HS in layers.h
 * names the same ones), without and with dropout: k_fa_fwd_64,
 * k_fa_fwd_64_drop, k_fa_bwd_kv_64, ... and the same for 32. */
#define FA_CAT2(a, b) a##b
#define FA_CAT(a, b)  FA_CAT2(a, b)
#define FA_HS 64
#define FA_DROP 0
#define FA_VARIANT
#include "ops_cuda_attn_hs.cuh"
#undef FA_DROP
#undef FA_VARIANT
#define FA_DROP 1
#define FA_VARIANT _drop
#include "ops_cuda_attn_hs.cuh"
#undef FA_DROP
#undef FA_VARIANT
#undef FA_HS
#define FA_HS 32
#define FA_DROP 0
#define FA_VARIANT
#include "ops_cuda_attn_hs.cuh"
#undef FA_DROP
#undef FA_VARIANT
#define FA_DROP 1
#define FA_VARIANT _drop
#include "ops_cuda_attn_hs.cuh"
#undef FA_DROP
#undef FA_VARIANT
#undef FA_HS

#endif /* DDPC_OPS_CUDA_ATTN_CUH */
