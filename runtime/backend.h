/* backend.h - struct ddpc_backend: a device family the launcher can run on.
 *
 * The CPU backend is always linked. The CUDA backend (ops_cuda.cu,
 * comm_nccl.cu, backend_cuda.cu) is the plugin libddprt_cuda.so: job.c
 * passes its path (or NULL) to ddprt_main, and the launcher (ddprt.c)
 * dlopen()s it and looks up ddpc_cuda_backend only when a GPU will be used.
 * Nothing else tests for CUDA. (libddprt_cuda.a holds the same objects for
 * tests/gpu, which link them.)
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
    int  status;        /* enum ddpc_probe_status (devprobe.h): found, no device, no
                         * driver, or failed; only failed is an error */
    int  cuda_error;    /* the cudaError_t behind status (0: none) */
    char names[64][DDPC_DEVICE_NAME_MAX];          /* model name of each, for warnings */
    char note[160];     /* unless found: the driver's reason, e.g. "cudaGetDeviceCount:
                         * cudaErrorNoDevice (no CUDA-capable device is detected)" */
};

struct ddpc_backend {
    const char *name;   /* "cuda" */
    /* Launcher, before fork. Must not initialise the device runtime in the
     * calling process (CUDA does not survive fork): probe in a child. Any
     * answer of the driver returns 0 with info->status saying what it was
     * (a machine without devices: count 0, status no device); devprobe.h
     * decides what it means. Fails only when the probe itself could not
     * answer (hung, killed). */
    int (*probe)(struct ddpc_device_info *info, struct ddpc_err *e);
    /* Worker, after fork: select `device` and fill ops. */
    int (*ops_init)(struct ddpc_ops *ops, int device, struct ddpc_err *e);
    /* Worker: a communicator over all ranks, bootstrapped through the job's
     * store (store.h) at master_addr:master_port, under keys starting with
     * prefix (one per attempt: "a0", "a1", ...): the "gradient" one. Only
     * for world > 1: a one-GPU job makes none. Init itself is bounded by
     * deadline. */
    int (*comm_init)(struct ddpc_comm *c, const char *purpose, int rank, int world,
                     const char *master_addr, int master_port, const char *prefix,
                     double deadline, struct ddpc_err *e);
    /* Worker: another communicator over parent's ranks, split from it
     * (ncclCommSplit: no second bootstrap): the "rank-sync" one. Every rank
     * calls it; bounded by deadline. Destroy c before parent. */
    int (*comm_split)(struct ddpc_comm *parent, struct ddpc_comm *c, const char *purpose,
                      double deadline, struct ddpc_err *e);
};

/* backend_cuda.cu: exported by libddprt_cuda.so (the name dlsym looks up). */
extern const struct ddpc_backend ddpc_cuda_backend;

#ifdef __cplusplus
}
#endif
#endif /* DDPC_BACKEND_H */
