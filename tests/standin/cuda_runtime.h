/* cuda_runtime.h (stand-in) - the part of the CUDA runtime API that ddpc's
 * host code calls, declared for tests/standin/standin.cc, which runs it on
 * the CPU. Only the `comm_nccl` suite's objects are compiled against this
 * directory (-Itests/standin); nothing in a build that has the real CUDA
 * headers sees it.
 *
 * Names and numeric values are CUDA's (driver_types.h of CUDA 13), so an
 * error a test prints reads as it would on a GPU. The semantics are those
 * CUDA documents (standin.cc says how each is modelled): streams run their
 * work in order on a thread of their own, asynchronously to the host;
 * events mark a point in a stream; device memory is host memory the
 * stand-in allocated, and a copy says which way it goes.
 */
#ifndef DDPC_STANDIN_CUDA_RUNTIME_H
#define DDPC_STANDIN_CUDA_RUNTIME_H

#include <stddef.h>

#ifdef __CUDACC__
#error "tests/standin/cuda_runtime.h stands in for CUDA on the CPU; nvcc has the real one"
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define DDPC_CUDA_STANDIN 1

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInitializationError = 3,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInsufficientDriver = 35,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
    cudaErrorIllegalAddress = 700,
    cudaErrorLaunchFailure = 719,
    cudaErrorNotSupported = 801,
    cudaErrorUnknown = 999
} cudaError_t;

typedef struct standin_stream *cudaStream_t;
typedef struct standin_event *cudaEvent_t;
typedef void (*cudaHostFn_t)(void *user_data);

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
};

#define cudaStreamDefault      0x00
#define cudaStreamNonBlocking  0x01
#define cudaEventDefault       0x00
#define cudaEventBlockingSync  0x01
#define cudaEventDisableTiming 0x02

const char *cudaGetErrorName(cudaError_t e);
const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);

cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaRuntimeGetVersion(int *version);
cudaError_t cudaDriverGetVersion(int *version);
cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest);

cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned flags, int priority);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamQuery(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t ev, unsigned flags);
cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void *user_data);

cudaError_t cudaEventCreate(cudaEvent_t *ev);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t ev);
cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t s);
cudaError_t cudaEventQuery(cudaEvent_t ev);
cudaError_t cudaEventSynchronize(cudaEvent_t ev);

cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocHost(void **p, size_t bytes);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                            cudaStream_t s);
cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s);

#ifdef __cplusplus
}
/* a launch's shape, as CUDA's vector_types.h has it */
struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
/* cudaMalloc<T>(T **, size_t), as cuda_runtime.h has it for C++ callers */
template <class T> static inline cudaError_t cudaMalloc(T **p, size_t bytes)
{
    return cudaMalloc((void **)p, bytes);
}
template <class T> static inline cudaError_t cudaMallocHost(T **p, size_t bytes)
{
    return cudaMallocHost((void **)p, bytes);
}
#endif

#endif /* DDPC_STANDIN_CUDA_RUNTIME_H */
