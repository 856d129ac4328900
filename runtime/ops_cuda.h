/* ops_cuda.h - the CUDA math backend's two entry points.
 *
 * backend_cuda.cu calls ops_cuda_init from the worker (after fork) and hands
 * ops_cuda_stream to comm_nccl, whose communication stream must be ordered
 * against this compute stream with events. It needs cuda_runtime.h: the
 * toolkit's, or the CPU stand-in's in the cuda_standin suite.
 */
#ifndef DDPC_OPS_CUDA_H
#define DDPC_OPS_CUDA_H

#include <cuda_runtime.h>
#include "ops.h"

/* C linkage: the cuda_standin suite (a C file) calls these on the CPU
 * stand-in for CUDA (tests/standin) */
#ifdef __cplusplus
extern "C" {
#endif

/* Selects `device` in the calling thread, creates the compute stream and the
 * cuBLAS handle bound to it, and fills o. On failure o->destroy (if set) is
 * still safe to call. */
int ops_cuda_init(struct ddpc_ops *o, int device, struct ddpc_err *e);

/* The stream every op of o runs on, in issue order. NULL if o is not a CUDA
 * ops struct. Borrowed: o owns it and destroys it in o->destroy. */
cudaStream_t ops_cuda_stream(const struct ddpc_ops *o);

#ifdef __cplusplus
}
#endif

#endif /* DDPC_OPS_CUDA_H */
