/* test_cuda.c - the `cuda` suite of the CPU test runner.
 *
 * Owns: deciding, without linking CUDA, whether this machine can run the GPU
 * tests, and running them when it can. The runner never links CUDA, so the
 * real checks live in tests/gpu/test_gpu.c (`make gpu-test`); this suite runs
 * that program (argv, no shell) and requires exit status 0.
 *
 * Without a GPU (no /dev/nvidia<N>) it prints "SKIP cuda: no GPU found" and
 * registers one test whose name says it was skipped and which checks
 * nothing: a skipped GPU test must say so, never pass as if it had tested.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "suites.h"

/* /dev/nvidia0, /dev/nvidia1, ...: one node per GPU the driver exposes to
 * this container (nvidiactl and nvidia-uvm do not count). */
static int gpu_nodes(void)
{
    DIR *d = opendir("/dev");
    if (!d)
        return 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        const char *s = de->d_name;
        if (strncmp(s, "nvidia", 6) != 0 || !s[6])
            continue;
        s += 6;
        while (*s >= '0' && *s <= '9')
            s++;
        n += *s == '\0';
    }
    closedir(d);
    return n;
}

static char test_gpu_path[4096];

static void find_test_gpu(void)
{
    const char *b = getenv("DDPC_BUILD");
    snprintf(test_gpu_path, sizeof test_gpu_path, "%s/tests/test_gpu", b ? b : "build");
}

START_TEST(skipped_no_gpu)
{
    /* Records the skip only; see the file header. */
}
END_TEST

START_TEST(skipped_test_gpu_not_built)
{
    /* Records the skip only: a GPU is here but this build has no CUDA. */
}
END_TEST

START_TEST(gpu_test_program_passes)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        char *argv[] = {test_gpu_path, NULL};
        execv(test_gpu_path, argv);
        _exit(127);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status), "%s died of signal %d", test_gpu_path,
                  WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    ck_assert_msg(WEXITSTATUS(status) == 0, "%s exited %d: see its FAIL lines above",
                  test_gpu_path, WEXITSTATUS(status));
}
END_TEST

Suite *cuda_suite(void)
{
    Suite *s = suite_create("cuda");
    int gpus = gpu_nodes();
    find_test_gpu();
    if (gpus == 0) {
        printf("SKIP cuda: no GPU found (no /dev/nvidia<N>); the CUDA backend is only "
               "compiled and link-checked here (make cuda-link-check)\n");
        TCase *tc = tcase_create("SKIP no GPU found");
        tcase_add_test(tc, skipped_no_gpu);
        suite_add_tcase(s, tc);
        return s;
    }
    if (access(test_gpu_path, X_OK) != 0) {
        printf("SKIP cuda: %d GPU(s) found but %s is not built (needs nvcc: make gpu-test)\n",
               gpus, test_gpu_path);
        TCase *tc = tcase_create("SKIP test_gpu not built");
        tcase_add_test(tc, skipped_test_gpu_not_built);
        suite_add_tcase(s, tc);
        return s;
    }
    TCase *tc = tcase_create("gpu");
    tcase_set_timeout(tc, 600);   /* NCCL init on every GPU plus every op */
    tcase_add_test(tc, gpu_test_program_passes);
    suite_add_tcase(s, tc);
    return s;
}
