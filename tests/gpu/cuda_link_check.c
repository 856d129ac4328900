/* cuda_link_check.c - proves libddprt_cuda.a links into a C program and
 * behaves without a GPU.
 *
 * Built and run by `make cuda-link-check` (CI, whenever nvcc exists). It
 * references ddpc_cuda_backend the way runtime/job.c does, runs the probe
 * (which forks; this process never initialises CUDA) and reports what it
 * found. Exit 0 when the probe answered, with or without devices; 1 when the
 * probe itself failed. It does not test the math: tests/gpu/test_gpu.c does,
 * on a machine with a GPU.
 */
#include <stdio.h>
#include "backend.h"

int main(void)
{
    const struct ddpc_backend *b = &ddpc_cuda_backend;
    struct ddpc_device_info info;
    struct ddpc_err e = {0};
    if (!b->probe || !b->ops_init || !b->comm_init) {
        fprintf(stderr, "cuda-link-check: backend \"%s\" has a NULL entry point\n", b->name);
        return 1;
    }
    if (b->probe(&info, &e) < 0) {
        fprintf(stderr, "cuda-link-check: probe failed: %s (%s:%d)\n", e.msg,
                e.file ? e.file : "?", e.line);
        return 1;
    }
    if (info.count == 0) {
        printf("cuda-link-check: backend \"%s\" linked; probe: 0 CUDA devices (%s); "
               "a job with accelerator auto would run as CPU workers\n",
               b->name, info.note[0] ? info.note : "no reason given");
        return 0;
    }
    printf("cuda-link-check: backend \"%s\" linked; probe: %d CUDA device(s)\n", b->name,
           info.count);
    for (int i = 0; i < info.count && i < 64; i++)
        printf("  cuda:%d  %s\n", i, info.names[i]);
    return 0;
}
