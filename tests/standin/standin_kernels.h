/* standin_kernels.h - what ops_cuda.cu needs, besides the stand-in's
 * headers, to run its kernels on the CPU: tests/cuda_emu.h (threadIdx,
 * barriers, shuffles, the warp's mma) and a launch that queues the kernel
 * on its stream. The Makefile force-includes this file (-include) into a
 * copy of ops_cuda.cu whose `k<<<grid, block, shmem, stream>>>(args)` it
 * rewrote as `DDPC_STANDIN_LAUNCH(k, grid, block, shmem, stream)(args)`;
 * nothing else of ops_cuda.cu changes.
 *
 * As in CUDA, the arguments are copied at the launch (into a tuple the
 * queued run owns), an impossible shape fails the launch at once
 * (cudaGetLastError: cudaErrorInvalidConfiguration), and a kernel that
 * fails while it runs (cuda_emu: a deadlock, a shuffle outside CUDA's
 * rules) fails every later call of the process with
 * cudaErrorLaunchFailure, as a faulted context does.
 */
#ifndef DDPC_STANDIN_KERNELS_H
#define DDPC_STANDIN_KERNELS_H

#include <memory>
#include <tuple>
#include <utility>

#include "cuda_emu.h"
#include "cuda_runtime.h"

/* standin.cc: checks the shape (a failure goes to cudaGetLastError) and
 * queues body(arg) for every thread of the grid on stream s. */
void standin_launch_kernel(dim3 grid, dim3 block, size_t shmem, cudaStream_t s,
                           void (*body)(void *), std::shared_ptr<void> arg);

template <class... P> struct standin_kernel_call {
    void (*kernel)(P...);
    std::tuple<P...> args;
    static void body(void *self)
    {
        auto *c = static_cast<standin_kernel_call *>(self);
        std::apply(c->kernel, c->args);
    }
};

template <class... P> struct standin_launcher {
    void (*kernel)(P...);
    dim3 grid, block;
    size_t shmem;
    cudaStream_t stream;
    template <class... A> void operator()(A &&...a) const
    {
        auto call = std::make_shared<standin_kernel_call<P...>>(
            standin_kernel_call<P...>{kernel, std::tuple<P...>(std::forward<A>(a)...)});
        standin_launch_kernel(grid, block, shmem, stream, &standin_kernel_call<P...>::body,
                              call);
    }
};

template <class... P>
standin_launcher<P...> standin_launch_of(void (*kernel)(P...), dim3 grid, dim3 block,
                                         size_t shmem = 0, cudaStream_t stream = nullptr)
{
    return standin_launcher<P...>{kernel, grid, block, shmem, stream};
}

#define DDPC_STANDIN_LAUNCH(kernel, ...) standin_launch_of(kernel, __VA_ARGS__)

#endif
