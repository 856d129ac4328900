/* comm_nccl.h - the NCCL communicator's entry point.
 *
 * backend_cuda.cu calls comm_nccl_init (the gradient communicator) and
 * comm_nccl_split (rank-sync) in the worker, after ops_cuda_init selected
 * the device (NCCL binds a communicator to the current device).
 * It needs cuda_runtime.h: the CUDA toolkit's, or, in the comm_nccl suite
 * (tests/test_comm_nccl.c, a C file), the CPU stand-in's (tests/standin);
 * hence C linkage.
 */
#ifndef DDPC_COMM_NCCL_H
#define DDPC_COMM_NCCL_H

#include <cuda_runtime.h>
#include "comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Fills c with a non-blocking NCCL communicator over `world` ranks. The
 * unique id goes through the job's store (store.h) at master_addr:
 * master_port, key <prefix>/nccl/<purpose>/id: rank 0 calls ncclGetUniqueId
 * and publishes it, every other rank waits for it until deadline (a rank 0
 * that never comes is named). No NCCL_COMM_ID: NCCL binds no port of ours
 * and needs no host name. `compute` is
 * the ops' compute stream: all-reduce and broadcast wait for the work issued
 * on it before they start, and it waits for them in all_reduce_wait. NULL is
 * allowed for a communicator that only runs barriers (rank-sync).
 * Init is bounded by deadline (0 = none): past it the half-made communicator
 * is aborted and DDPC_E_TIMEOUT names the purpose and the address.
 * c->destroy is safe after a failed init. Destroy communicators before the
 * ops whose stream they borrow. */
int comm_nccl_init(struct ddpc_comm *c, const char *purpose, int rank, int world,
                   const char *master_addr, int master_port, const char *prefix,
                   cudaStream_t compute, double deadline, struct ddpc_err *e);

/* Fills c with a communicator over the same ranks as parent, made by
 * ncclCommSplit on the parent's connections (no second bootstrap), with its
 * own stream and the parent's compute stream. Collective over parent: every
 * rank calls it, with nothing outstanding on parent. Returns once parent
 * and child are both ready (a non-blocking split keeps the parent busy
 * until the child exists). Bounded by deadline like init: past it, or on a
 * failed split, parent and child are both aborted. c->destroy is safe after
 * a failure. Destroy c before parent. */
int comm_nccl_split(struct ddpc_comm *parent, struct ddpc_comm *c, const char *purpose,
                    double deadline, struct ddpc_err *e);

#ifdef __cplusplus
}
#endif

#endif /* DDPC_COMM_NCCL_H */
