/* cuda_emu.h - enough of CUDA's execution model, on the CPU, to run the
 * kernels of runtime/ops_cuda_rows.cuh in a test on a machine without a GPU.
 *
 * Include it before the kernel file. A launch runs the grid's blocks one
 * after another, each with all its threads as fibers (each its own stack)
 * of which one runs at a time, in a fixed order (emu_order): a thread runs
 * until it waits at __syncthreads or __shfl_xor_sync, or returns. So a
 * barrier is a real barrier, a shuffle a real exchange, every run the same,
 * and a read of shared memory that no barrier ordered sees the stale value
 * in one of the two orders. A kernel whose lanes leave a shuffle's group,
 * or whose threads miss a barrier, deadlocks: the launch fails, naming the
 * wait. `__shared__` is a static: the one block running owns it.
 *
 * What this does not model: the GPU's memory model beyond what barriers
 * order, device pointers (everything is host memory), speed. tests/gpu runs
 * the same kernels on a GPU. C or C++ (tests/standin runs ops_cuda.cu's
 * kernels on it, launched from the stand-in's streams).
 */
#ifndef DDPC_CUDA_EMU_H
#define DDPC_CUDA_EMU_H

#ifdef __CUDACC__
#error "cuda_emu.h stands in for CUDA on the CPU; nvcc has the real thing"
#endif

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

struct emu_dim3 {
    unsigned x, y, z;
};

extern struct emu_dim3 threadIdx, blockIdx, blockDim, gridDim;
/* The order the threads of a block take turns in (EMU_ASCENDING: thread
 * 0 first, then each runs after the one before it; EMU_AHEAD: always the
 * lowest-numbered thread that can run, so warp 0 runs ahead of the others
 * until a barrier stops it, and a missing barrier before shared memory is
 * overwritten shows even where the warps' turns would keep in step). */
enum { EMU_ASCENDING, EMU_DESCENDING, EMU_AHEAD };
extern int emu_order;

#define __global__
#define __device__
#define __host__
#define __shared__ static

void   __syncthreads(void);
double emu_shfl_xor_d(unsigned mask, double v, int lane_mask, int width);
float  emu_shfl_xor_f(unsigned mask, float v, int lane_mask, int width);
int    emu_shfl_xor_i(unsigned mask, int v, int lane_mask, int width);

#ifndef __cplusplus
#define __shfl_xor_sync(mask, v, lane_mask, width)                          \
    _Generic((v), double: emu_shfl_xor_d, float: emu_shfl_xor_f,            \
                  int: emu_shfl_xor_i)((mask), (v), (lane_mask), (width))
#endif

/* mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 with d as C and D:
 * the 32 lanes of the warp post their fragments (the layouts in PTX's
 * "Matrix Fragments for mma.m16n8k16", as runtime/ops_cuda_attn.cuh
 * describes them), all wait, each computes its four sums (fp32, k in
 * order), all wait again. A warp some of whose lanes never arrive
 * deadlocks; a block that is not whole warps fails the launch. */
void emu_mma_bf16_16816(float *d, const unsigned *a, const unsigned *b);

/* Runs body(arg) as every thread of a launch of `grid` blocks of `block`
 * threads. Returns 0, or -1 with *why filled: an invalid shape (no
 * threads, a block over 1024), a thread that cannot start, a shuffle
 * outside CUDA's rules (a mask that is not the lane's group of `width`,
 * lane_mask >= width), or a deadlock: a barrier or shuffle some threads
 * never reach. */
int emu_launch(struct emu_dim3 grid, struct emu_dim3 block, void (*body)(void *), void *arg,
               char *why, size_t why_len);

#ifdef __cplusplus
}
/* C++ (tests/standin compiles ops_cuda.cu's kernels with it): overloads
 * where C has _Generic */
static inline double __shfl_xor_sync(unsigned m, double v, int lane_mask, int width)
{
    return emu_shfl_xor_d(m, v, lane_mask, width);
}
static inline float __shfl_xor_sync(unsigned m, float v, int lane_mask, int width)
{
    return emu_shfl_xor_f(m, v, lane_mask, width);
}
static inline int __shfl_xor_sync(unsigned m, int v, int lane_mask, int width)
{
    return emu_shfl_xor_i(m, v, lane_mask, width);
}
#endif

#endif
