/* ddprt.h - the runtime library's entry point, called by the generated job main.
 *
 * runtime/job.c (compiled by `ddpc build` with the job's job_config.h) fills
 * struct ddprt_program with the baked job, its spec text and plan, and calls
 * ddprt_main. The library never depends on a particular spec.
 */
#ifndef DDPC_DDPRT_H
#define DDPC_DDPRT_H

#include "job.h"
#include "backend.h"
#include "comm_gloo.h"

struct ddprt_program {
    const struct ddpc_job     *job;
    const char                *spec_path;   /* as given to ddpc build */
    const char                *spec_hash;   /* hex SHA-256 of the spec bytes */
    const char                *spec_text;   /* the spec, verbatim */
    const char                *plan_json;   /* job.plan.json, verbatim */
    const char                *ddpc_version;
    /* The CUDA backend, one of two ways (both NULL: built without CUDA):
     * cuda, a backend linked in (tests, fake backends); or cuda_plugin, the
     * path of libddprt_cuda.so, which the launcher probes in a child and
     * dlopen()s only when a GPU will be used (jobs from `ddpc build`). cuda
     * wins when both are set. */
    const struct ddpc_backend *cuda;
    const char                *cuda_plugin;
    /* The gloo communicator for CPU jobs on several nodes, the same two
     * ways (both NULL: multi-node CPU jobs are refused at launch): gloo,
     * linked in (tests); or gloo_plugin, the path of libddprt_gloo.so,
     * dlopen()ed by the launcher only when a CPU job runs on several nodes. */
    const struct ddpc_gloo_backend *gloo;
    const char                *gloo_plugin;
};

/* Parses the run-time flags (--dry-run, --help, --version, --resume, ...),
 * launches and supervises the workers. Returns the process exit status;
 * after SIGINT/SIGTERM/SIGHUP/SIGUSR1/SIGUSR2 stopped the job (128 + the
 * signal), those signals are left ignored for the rest of the process
 * (launch_release_signals restores them). */
int ddprt_main(const struct ddprt_program *p, int argc, char **argv);

/* A job's first call: execs the job again with OPENBLAS_NUM_THREADS=1 when
 * it was started without, so OpenBLAS's unused thread pool never starts;
 * returns where that is already so or the exec fails. */
void ddprt_blas_without_pool(char **argv);

#endif /* DDPC_DDPRT_H */
