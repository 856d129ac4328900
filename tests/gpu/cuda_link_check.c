/* cuda_link_check.c - proves libddprt_cuda.so loads into a C program that
 * is linked without CUDA, the way a job's launcher loads it, and that its
 * device probe runs.
 *
 * Built and run by `make cuda-link-check` (CI, whenever nvcc exists) with
 * the plugin's path as argv[1]. It dlopen()s it and looks up
 * ddpc_cuda_backend as runtime/ddprt.c does, runs the probe (which forks;
 * this process never initialises CUDA) and reports what it found: 0 devices
 * on a machine without a GPU is a pass, and says so; exit 1 only if the
 * plugin does not load, an entry point is missing, or the
 * probe itself failed. It does not test the math: tests/gpu/test_gpu.c does,
 * on a machine with a GPU.
 */
#include <dlfcn.h>
#include <stdio.h>
#include "backend.h"
#include "devprobe.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH/libddprt_cuda.so\n", argv[0]);
        return 2;
    }
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    const struct ddpc_backend *b = h ? dlsym(h, "ddpc_cuda_backend") : NULL;
    if (!b) {
        fprintf(stderr, "cuda-link-check: %s could not be loaded: %s\n", argv[1], dlerror());
        return 1;
    }
    struct ddpc_device_info info;
    struct ddpc_err e = {0};
    if (!b->probe || !b->ops_init || !b->comm_init || !b->comm_split) {
        fprintf(stderr, "cuda-link-check: backend \"%s\" has a NULL entry point\n", b->name);
        return 1;
    }
    if (b->probe(&info, &e) < 0) {
        fprintf(stderr, "cuda-link-check: probe failed: %s (%s:%d)\n", e.msg,
                e.file ? e.file : "?", e.line);
        return 1;
    }
    if (info.status == DDPC_PROBE_FAILED) {
        printf("cuda-link-check: backend \"%s\" loaded; probe FAILED: %s; a job with "
               "accelerator auto or gpu would stop with that reason\n", b->name, info.note);
        return 0;
    }
    if (info.count == 0) {
        printf("cuda-link-check: backend \"%s\" loaded; probe: 0 CUDA devices (%s); "
               "a job with accelerator auto would run as CPU workers\n",
               b->name, info.note[0] ? info.note : "no reason given");
        return 0;
    }
    printf("cuda-link-check: backend \"%s\" loaded; probe: %d CUDA device(s)\n", b->name,
           info.count);
    for (int i = 0; i < info.count && i < 64; i++)
        printf("  cuda:%d  %s\n", i, info.names[i]);
    return 0;
}
