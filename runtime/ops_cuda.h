/* ops_cuda.h - the CUDA math backend's two entry points, for .cu files only.
 *
 * backend_cuda.cu calls ops_cuda_init from the worker (after fork) and hands
 * ops_cuda_stream to comm_nccl, whose communication stream must be ordered
 * against this compute stream with events. Never included by C files: it
 * needs cuda_runtime.h.
 */
#ifndef DDPC_OPS_CUDA_H
#define DDPC_OPS_CUDA_H

#include <cuda_runtime.h>
#include "ops.h"

/* Selects `device` in the calling thread, creates the compute stream and the
 * cuBLAS handle bound to it, and fills o. On failure o->destroy (if set) is
 * still safe to call. */
int ops_cuda_init(struct ddpc_ops *o, int device, struct ddpc_err *e);

/* The stream every op of o runs on, in issue order. NULL if o is not a CUDA
 * ops struct. Borrowed: o owns it and destroys it in o->destroy. */
cudaStream_t ops_cuda_stream(const struct ddpc_ops *o);

#endif /* DDPC_OPS_CUDA_H */
