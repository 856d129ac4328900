/* env.h - every DDPC_* environment variable the runtime reads, in one place.
 *
 * A job's behaviour comes from its baked spec; these are the few knobs for
 * measuring it and for testing failure paths, never for configuring a run:
 *
 *   DDPC_DEBUG=0|1           1: errors also name the ddpc source file and line
 *                            that raised them (for a bug report); 0: default
 *   DDPC_PROFILE=0|1|all     step-time breakdown at the end: rank 0 on its
 *                            report stream (1), or every rank (all)
 *   DDPC_SHM_SPIN_US=US      shared-memory collectives spin this long before
 *                            sleeping (>= 0; default: by core count)
 *   DDPC_FUSED_ATTN=0|1      0: the CUDA backend runs causal attention
 *                            unfused (ops_cuda_attn.cuh not used), to measure
 *                            what fusing gains or to rule it out; 1: default
 *   DDPC_BENCH_T0=SECONDS    wall-clock time before exec (bench/measure.py),
 *                            so first_step_s counts exec and loading
 *   DDPC_TEST_CKPT_STOP_AFTER_BYTES=N   tests: rank 0 stops itself (SIGSTOP)
 *                            after writing N bytes of its first checkpoint
 *   DDPC_TEST_CKPT_SLOW_S=S             tests: every checkpoint write sleeps
 *                            S seconds before its rename (0 to 3600)
 *   DDPC_TEST_CUDA_PROBE_ERROR=N        tests: the CUDA probe answers
 *                            cudaError_t N (1..99999) without the driver
 *   DDPC_TEST_STREAM_DELAY_US=US        tests: NCCL all-reduces start and
 *                            end US microseconds late on the GPU (0..1e6;
 *                            comm_nccl.cu), to widen any missing stream wait
 *
 * Each is parsed with an end pointer and a range: a value that is not what
 * the variable takes is an error naming the variable, not a silent 0.
 * ddprt_main calls env_load first and refuses to start on one; code that
 * runs without it (tests, the CUDA plugin) gets env_get(), which loads on first
 * use and, on a bad value, says so on stderr once and uses the default.
 */
#ifndef DDPC_ENV_H
#define DDPC_ENV_H

#include <stdint.h>
#include "err.h"

#ifdef __cplusplus
extern "C" {
#endif

enum ddpc_profile { DDPC_PROFILE_OFF, DDPC_PROFILE_RANK0, DDPC_PROFILE_ALL };

struct ddpc_env {
    int debug;                      /* DDPC_DEBUG=1 */
    enum ddpc_profile profile;
    int fused_attn;                 /* DDPC_FUSED_ATTN: 1 (default) or 0 */
    double shm_spin_us;             /* < 0: unset */
    double bench_t0;                /* wall-clock seconds; 0: unset */
    int64_t test_ckpt_stop_after;   /* bytes; < 0: unset */
    double test_ckpt_slow_s;        /* 0: unset */
    int test_cuda_probe_error;      /* cudaError_t; -1: unset */
    double test_stream_delay_us;    /* < 0: unset */
};

/* Reads every variable into the process's copy; on a bad value returns -1
 * with e naming it (the copy then holds the defaults for the bad ones). */
int env_load(struct ddpc_err *e);

/* The process's copy, loaded on first use. */
const struct ddpc_env *env_get(void);

#ifdef __cplusplus
}
#endif

#endif /* DDPC_ENV_H */
