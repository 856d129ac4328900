/* backend.h - struct ddpc_backend: a device family the launcher can run on.
 *
 * The CPU backend is always linked. The CUDA backend (ops_cuda.cu,
 * comm_nccl.cu, in libddprt_cuda.a) is linked only into jobs built with CUDA;
 * job.c passes &ddpc_cuda_backend or NULL to ddprt_main, which is the one
 * place the choice is made. Nothing else tests for CUDA.
 */
#ifndef DDPC_BACKEND_H
#define DDPC_BACKEND_H

#include "err.h"
#include "ops.h"
#include "comm.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DDPC_DEVICE_NAME_MAX 96

struct ddpc_device_info {
    int  count;                                    /* devices visible to this process */
    char names[64][DDPC_DEVICE_NAME_MAX];          /* model name of each, for warnings */
    char note[160];     /* with count 0: the driver's reason, e.g. "cudaErrorNoDevice
                         * (no CUDA-capable device is detected)"; "" otherwise */
};

struct ddpc_backend {
    const char *name;   /* "cuda" */
    /* Launcher, before fork. Must not initialise the device runtime in the
     * calling process (CUDA does not survive fork): probe in a child. A
     * machine without devices gives count 0 and returns 0. */
    int (*probe)(struct ddpc_device_info *info, struct ddpc_err *e);
    /* Worker, after fork: select `device` and fill ops. */
    int (*ops_init)(struct ddpc_ops *ops, int device, struct ddpc_err *e);
    /* Worker: a communicator over all ranks, bootstrapped from master:port
     * (NCCL_COMM_ID). Two are made, purpose "gradient" and "rank-sync"; port
     * differs per purpose. Init itself is bounded by deadline. */
    int (*comm_init)(struct ddpc_comm *c, const char *purpose, int rank, int world,
                     const char *master_addr, int master_port, double deadline,
                     struct ddpc_err *e);
};

/* backend_cuda.cu, in libddprt_cuda.a: only jobs linked with CUDA see it. */
extern const struct ddpc_backend ddpc_cuda_backend;

#ifdef __cplusplus
}
#endif
#endif /* DDPC_BACKEND_H */
