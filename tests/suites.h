/* suites.h - every Check suite of the test runner, one line each.
 * A module's tests live in tests/test_<module>.c and define <module>_suite(). */
#ifndef DDPC_TEST_SUITES_H
#define DDPC_TEST_SUITES_H
#include <check.h>

#define DDPC_SUITES(X) \
    X(units)    X(load)     X(validate) X(speccorpus) \
    X(plan)     X(emit)     \
    X(kernels)  X(ops_cpu)  X(model)    X(optim)    X(data)     X(sampler) \
    X(comm_shm) X(ddp)      X(cuda)     X(e2e)      X(ckpt)      X(metrics) \
    X(faults)   X(store)    X(comm_gloo) X(multinode) X(layers) \
    X(gpt)      X(gpt_run)  X(cuda_rows) X(cuda_attn) X(comm_nccl) \
    X(cuda_standin) X(lifecycle)

#define DDPC_DECLARE_SUITE(name) Suite *name##_suite(void);
DDPC_SUITES(DDPC_DECLARE_SUITE)

#endif
