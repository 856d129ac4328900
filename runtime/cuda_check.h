/* cuda_check.h - CUDA_CHECK / CUBLAS_CHECK / NCCL_CHECK / KERNEL_CHECK.
 *
 * Only .cu files include this (it pulls in the CUDA headers). Each macro runs
 * one foreign call and, on failure, records the call text, the library's name
 * and description of the status, and a hint into a caller-owned struct
 * ddpc_err with this file:line, then RETURNS DDPC_E_DEVICE from the enclosing
 * function (which must return int). They never print and never exit: a
 * collective has to be able to abort, and the worker's top level decides
 * what a failure means (see err.h).
 *
 * NCCL_CHECK accepts ncclInProgress as well as ncclSuccess: every ddpc
 * communicator is non-blocking (config.blocking = 0), where ncclInProgress
 * means "accepted, poll ncclCommGetAsyncError" (comm_nccl.cu does).
 */
#ifndef DDPC_CUDA_CHECK_H
#define DDPC_CUDA_CHECK_H

#include <string.h>
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <nccl.h>
#include "err.h"

#define DDPC_CUDA_HINT \
    "---> HINT: check the device index against `nvidia-smi -L` and that the driver " \
    "supports this CUDA toolkit; rerun with CUDA_LAUNCH_BLOCKING=1 to pin an " \
    "asynchronous kernel failure to its launch"
#define DDPC_NCCL_HINT \
    "---> HINT: rerun with NCCL_DEBUG=WARN (or INFO) for NCCL's own reason"

#define CUDA_CHECK(e, call) do {                                                 \
        cudaError_t st_ = (call);                                                \
        if (st_ != cudaSuccess)                                                  \
            return ddpc_err_set((e), DDPC_E_DEVICE, __FILE__, __LINE__,          \
                                "%s: %s (%s)\n" DDPC_CUDA_HINT, #call,           \
                                cudaGetErrorName(st_), cudaGetErrorString(st_)); \
    } while (0)

/* After a <<<...>>> launch: launch-configuration errors surface only through
 * cudaGetLastError. Faults inside the kernel surface at the next
 * synchronising call, which is itself checked. */
#define KERNEL_CHECK(e, kernel_name) do {                                        \
        cudaError_t st_ = cudaGetLastError();                                    \
        if (st_ != cudaSuccess)                                                  \
            return ddpc_err_set((e), DDPC_E_DEVICE, __FILE__, __LINE__,          \
                                "launch of kernel %s: %s (%s)\n" DDPC_CUDA_HINT, \
                                (kernel_name), cudaGetErrorName(st_),            \
                                cudaGetErrorString(st_));                        \
    } while (0)

#define CUBLAS_CHECK(e, call) do {                                               \
        cublasStatus_t st_ = (call);                                             \
        if (st_ != CUBLAS_STATUS_SUCCESS)                                        \
            return ddpc_err_set((e), DDPC_E_DEVICE, __FILE__, __LINE__,          \
                                "%s: %s (%s)\n" DDPC_CUDA_HINT, #call,           \
                                cublasGetStatusName(st_),                        \
                                cublasGetStatusString(st_));                     \
    } while (0)

#define NCCL_CHECK(e, call) do {                                                 \
        ncclResult_t st_ = (call);                                               \
        if (st_ != ncclSuccess && st_ != ncclInProgress)                         \
            return ddpc_err_set((e), DDPC_E_DEVICE, __FILE__, __LINE__,          \
                                "%s: %s (%s)\n" DDPC_NCCL_HINT, #call,           \
                                ncclGetErrorString(st_), ncclGetLastError(NULL));\
    } while (0)

#endif /* DDPC_CUDA_CHECK_H */
