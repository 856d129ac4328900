/* job.c - main() of every job binary: the baked job in, ddprt_main out.
 *
 * `ddpc build` compiles this file (installed as share/ddpc/job.c) with the
 * job's generated job_config.h on the include path and links libddprt.
 *
 * Rules this file keeps:
 *   - it is the ONLY file that includes job_config.h, so libddprt never
 *     depends on a particular spec and is built once;
 *   - it holds the project's one `#if DDPC_WITH_CUDA`: ddpc build defines it
 *     to 1, with DDPC_CUDA_PLUGIN the absolute path of the installed
 *     libddprt_cuda.so, when the job may use GPUs; the path is handed to
 *     the runtime here, which dlopen()s the plugin only when a GPU will be
 *     used. The job itself never links CUDA. Nothing else tests for CUDA;
 *   - it never parses anything and holds no logic beyond filling the struct
 *     (and ddprt_blas_without_pool, which must run in the job's own main:
 *     tests call ddprt_main inside their own process).
 */
#include "ddprt.h"
#include "job_config.h"

#ifndef DDPC_WITH_CUDA
#define DDPC_WITH_CUDA 0
#endif

#if DDPC_WITH_CUDA
/* libddprt_cuda.so defines ddpc_cuda_backend (backend.h) */
#define DDPC_JOB_CUDA_PLUGIN DDPC_CUDA_PLUGIN
#else
#define DDPC_JOB_CUDA_PLUGIN NULL
#endif

/* ddpc build defines DDPC_GLOO_PLUGIN, the absolute path of the installed
 * libddprt_gloo.so, for a job that may run as CPU workers on several nodes */
#ifndef DDPC_GLOO_PLUGIN
#define DDPC_GLOO_PLUGIN NULL
#endif

#ifdef DDPC_BUILT_FROM
/* Where this program came from, as bytes in the file: `ddpc build -o` of
 * another spec (or another job) refuses to replace it without --force
 * (compiler/main.c reads the line back; it never runs the program). */
__attribute__((used)) static const char ddpc_built_from[] =
    "\nDDPC-BUILT-FROM " DDPC_BUILT_FROM "\n";
#endif

int main(int argc, char **argv)
{
    const struct ddprt_program program = {
        .job          = &ddpc_job,
        .spec_path    = DDPC_SPEC_PATH,
        .spec_hash    = DDPC_SPEC_HASH,
        .spec_text    = DDPC_SPEC_TEXT,
        .plan_json    = DDPC_PLAN_JSON,
        .ddpc_version = DDPC_COMPILER_VERSION,
        .cuda         = NULL,
        .cuda_plugin  = DDPC_JOB_CUDA_PLUGIN,
        .gloo         = NULL,
        .gloo_plugin  = DDPC_GLOO_PLUGIN,
    };
    ddprt_blas_without_pool(argv);
    return ddprt_main(&program, argc, argv);
}
