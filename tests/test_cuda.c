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
 *
 * Always (no GPU needed): the launcher's GPU decisions through ddprt_main
 * --dry-run with a fake CUDA backend whose probe answers what a test needs:
 * two different models warn; accelerator gpu with no GPU fails at once.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "suites.h"
#include "ddprt.h"

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

/* ===== the launcher's GPU decisions, with a fake CUDA backend ===== */

/* A two-device job for ddprt_main: accelerator gpu, devices [0, 1]. */
static void two_gpu_job(struct ddpc_job *j)
{
    memset(j, 0, sizeof *j);
    j->version = 1;
    j->name = "two-gpu";
    j->n_devices = 2;
    j->devices[1] = 1;
    j->strategy = DDPC_STRATEGY_DDP;
    j->accelerator = DDPC_ACCEL_GPU;
    j->epochs = 1;
    j->learning_rate = 1e-3;
    j->batch_size = 8;
    j->grad_accumulation = 1;
    j->limit_train_fraction = 1.0;
    j->bucket_cap_mb = 25;
    j->model.type = DDPC_MODEL_MLP;
    j->model.n_layers = 2;
    j->model.layers[0] = 4;
    j->model.layers[1] = 2;
    j->loss = DDPC_LOSS_CROSS_ENTROPY;
    j->data.train.format = DDPC_DATA_SYNTHETIC;
    j->data.train.samples = 16;
    j->data.train.features = 4;
    j->data.train.classes = 2;
    j->optimizer.type = DDPC_OPTIM_SGD;
    j->launch.num_nodes = 1;
}

static const char *fake_names[2];

static int probe_two(struct ddpc_device_info *info, struct ddpc_err *e)
{
    (void)e;
    memset(info, 0, sizeof *info);
    info->count = 2;
    for (int i = 0; i < 2; i++)
        snprintf(info->names[i], sizeof info->names[i], "%s", fake_names[i]);
    return 0;
}

static int probe_zero(struct ddpc_device_info *info, struct ddpc_err *e)
{
    (void)e;
    memset(info, 0, sizeof *info);
    snprintf(info->note, sizeof info->note, "cudaGetDeviceCount: cudaErrorNoDevice");
    return 0;
}

static char launcher_err[8192];

/* ddprt_main(job, --dry-run) in a child, stderr captured; returns its status. */
static const char *dry_run_plugin;   /* .cuda_plugin of the next dry_run */

static int dry_run(const struct ddpc_job *j, const struct ddpc_backend *cuda)
{
    char path[] = "/tmp/ddpc_cuda_err_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stdout))
            _exit(99);
        dup2(fd, 2);
        struct ddprt_program p = { .job = j, .spec_path = "two.yaml", .spec_hash = "00",
                                   .spec_text = "", .plan_json = "{}",
                                   .ddpc_version = "test", .cuda = cuda,
                                   .cuda_plugin = dry_run_plugin };
        char *argv[] = { (char *)"job", (char *)"--dry-run", NULL };
        int rc = ddprt_main(&p, 2, argv);
        fflush(NULL);
        _exit(rc);
    }
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ssize_t n = pread(fd, launcher_err, sizeof launcher_err - 1, 0);
    launcher_err[n > 0 ? n : 0] = '\0';
    close(fd);
    unlink(path);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1000 + WTERMSIG(st);
}

START_TEST(launcher_warns_on_mixed_gpu_models)
{
    struct ddpc_job j;
    two_gpu_job(&j);
    struct ddpc_backend two = { "cuda", probe_two, NULL, NULL };
    fake_names[0] = "NVIDIA H100 80GB HBM3 (sm_90, 79 GiB)";
    fake_names[1] = "NVIDIA A100-SXM4-40GB (sm_80, 39 GiB)";
    ck_assert_int_eq(dry_run(&j, &two), 0);
    ck_assert_msg(strstr(launcher_err, "warning: different GPU models") &&
                  strstr(launcher_err, "cuda:0 is NVIDIA H100") &&
                  strstr(launcher_err, "cuda:1 is NVIDIA A100"), "%s", launcher_err);
    fake_names[1] = fake_names[0];
    ck_assert_int_eq(dry_run(&j, &two), 0);
    ck_assert_msg(!strstr(launcher_err, "warning"), "same models, yet: %s", launcher_err);
}
END_TEST

START_TEST(launcher_gpu_without_gpus_fails_at_once)
{
    struct ddpc_job j;
    two_gpu_job(&j);
    struct ddpc_backend zero = { "cuda", probe_zero, NULL, NULL };
    double t0 = ddpc_now();
    ck_assert_int_eq(dry_run(&j, &zero), 1);
    ck_assert_msg(strstr(launcher_err, "GPU 0 not found: no GPU is visible") &&
                  strstr(launcher_err, "cudaErrorNoDevice") &&
                  strstr(launcher_err, "accelerator: cpu"), "%s", launcher_err);
    j.devices_all = 1;
    ck_assert_int_eq(dry_run(&j, &zero), 1);
    ck_assert_msg(strstr(launcher_err, "devices: all: no GPU visible"), "%s", launcher_err);
    ck_assert(ddpc_now() - t0 < 5.0);
}
END_TEST

/* A job's CUDA plugin path that names no file: accelerator gpu stops with
 * a message naming the path, the loader's reason and what to do; auto runs
 * on CPU workers (no driver here, or the plugin cannot load: both say so). */
START_TEST(launcher_missing_cuda_plugin)
{
    struct ddpc_job j;
    two_gpu_job(&j);
    dry_run_plugin = "/nonexistent/ddpc/lib/libddprt_cuda.so";
    int rc = dry_run(&j, NULL);
    dry_run_plugin = NULL;
    /* with a driver the plugin cannot load; without one the probe never
     * gets that far, so gpu loads the plugin first and says why */
    ck_assert_int_eq(rc, 1);
    ck_assert_msg(strstr(launcher_err, "CUDA backend /nonexistent/ddpc/lib/libddprt_cuda.so "
                         "could not be loaded: ") &&
                  strstr(launcher_err, "No such file") && strstr(launcher_err, "--cpu-only"),
                  "%s", launcher_err);

    j.accelerator = DDPC_ACCEL_AUTO;
    dry_run_plugin = "/nonexistent/ddpc/lib/libddprt_cuda.so";
    rc = dry_run(&j, NULL);
    dry_run_plugin = NULL;
    ck_assert_msg(rc == 0, "auto, missing plugin: %d\n%s", rc, launcher_err);
}
END_TEST

Suite *cuda_suite(void)
{
    Suite *s = suite_create("cuda");
    TCase *tl = tcase_create("launcher");
    tcase_add_test(tl, launcher_warns_on_mixed_gpu_models);
    tcase_add_test(tl, launcher_gpu_without_gpus_fails_at_once);
    tcase_add_test(tl, launcher_missing_cuda_plugin);
    suite_add_tcase(s, tl);
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
