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
 * The probe's verdict (devprobe.h) as plain C: only "no device" and "no
 * driver" mean no GPU. And end to end through the real plugin, whose probe
 * answers the CUDA error that DDPC_TEST_CUDA_PROBE_ERROR names: a driver
 * too old, a busy GPU, a broken init stop the job with their cause under
 * accelerator auto too (SKIP where the plugin is not built).
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "suites.h"
#include "testutil.h"
#include "ddprt.h"
#include "devprobe.h"
#include "env.h"
#include "job.h"

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
static const char *dry_run_probe_error;  /* DDPC_TEST_CUDA_PROBE_ERROR in the child, or NULL */
static int dry_run_stdout;          /* 1: capture stdout too (the dry-run report) */

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
        if (dry_run_stdout ? dup2(fd, 1) < 0 : !freopen("/dev/null", "w", stdout))
            _exit(99);
        dup2(fd, 2);
        if (dry_run_probe_error && setenv("DDPC_TEST_CUDA_PROBE_ERROR", dry_run_probe_error, 1))
            _exit(98);
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
    struct ddpc_backend two = { "cuda", probe_two, NULL, NULL, NULL };
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
    struct ddpc_backend zero = { "cuda", probe_zero, NULL, NULL, NULL };
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

/* ===== the probe's verdict (devprobe.h), as plain C ===== */

START_TEST(probe_classify_only_no_device_means_none)
{
    ck_assert_int_eq(devprobe_classify(DDPC_CUDA_SUCCESS, 2), DDPC_PROBE_FOUND);
    ck_assert_int_eq(devprobe_classify(DDPC_CUDA_SUCCESS, 0), DDPC_PROBE_NO_DEVICE);
    ck_assert_int_eq(devprobe_classify(DDPC_CUDA_NO_DEVICE, 0), DDPC_PROBE_NO_DEVICE);
    static const int failed[] = {
        DDPC_CUDA_INSUFFICIENT_DRIVER, DDPC_CUDA_DEVICES_UNAVAILABLE,
        DDPC_CUDA_INITIALIZATION_ERROR, DDPC_CUDA_SYSTEM_DRIVER_MISMATCH,
        DDPC_CUDA_COMPAT_NOT_SUPPORTED, DDPC_CUDA_STUB_LIBRARY, DDPC_CUDA_NOT_PERMITTED,
        DDPC_CUDA_OPERATING_SYSTEM, DDPC_CUDA_SYSTEM_NOT_READY, 999 /* cudaErrorUnknown */,
        101 /* cudaErrorInvalidDevice */,
    };
    for (size_t i = 0; i < sizeof failed / sizeof failed[0]; i++)
        ck_assert_msg(devprobe_classify(failed[i], 0) == DDPC_PROBE_FAILED,
                      "cudaError %d must be a failure, not 'no GPU'", failed[i]);
}
END_TEST

static struct ddpc_device_info probe_info(int status, int cuda_error, int count, const char *note)
{
    struct ddpc_device_info info;
    memset(&info, 0, sizeof info);
    info.status = status;
    info.cuda_error = cuda_error;
    info.count = count;
    snprintf(info.note, sizeof info.note, "%s", note);
    return info;
}

START_TEST(probe_decide_each_answer)
{
    char msg[1024];
    struct ddpc_device_info found = probe_info(DDPC_PROBE_FOUND, 0, 1, "");
    ck_assert_int_eq(devprobe_decide(DDPC_ACCEL_AUTO, &found, msg, sizeof msg), DDPC_CHOOSE_GPU);
    ck_assert_int_eq(devprobe_decide(DDPC_ACCEL_GPU, &found, msg, sizeof msg), DDPC_CHOOSE_GPU);

    /* no device / no driver: auto runs on CPU workers and says why; gpu goes
     * on to the plan, which names the listed device it cannot find */
    struct ddpc_device_info none = probe_info(DDPC_PROBE_NO_DEVICE, DDPC_CUDA_NO_DEVICE, 0,
                                              "cudaGetDeviceCount: cudaErrorNoDevice (x)");
    ck_assert_int_eq(devprobe_decide(DDPC_ACCEL_AUTO, &none, msg, sizeof msg), DDPC_CHOOSE_CPU);
    ck_assert_str_eq(msg, "cudaGetDeviceCount: cudaErrorNoDevice (x)");
    ck_assert_int_eq(devprobe_decide(DDPC_ACCEL_GPU, &none, msg, sizeof msg), DDPC_CHOOSE_GPU);
    struct ddpc_device_info nodrv = probe_info(DDPC_PROBE_NO_DRIVER, 0, 0, "no CUDA driver: y");
    ck_assert_int_eq(devprobe_decide(DDPC_ACCEL_AUTO, &nodrv, msg, sizeof msg), DDPC_CHOOSE_CPU);
    ck_assert_str_eq(msg, "no CUDA driver: y");
    struct ddpc_device_info zero = probe_info(DDPC_PROBE_FOUND, 0, 0, "");
    ck_assert_int_eq(devprobe_decide(DDPC_ACCEL_AUTO, &zero, msg, sizeof msg), DDPC_CHOOSE_CPU);

    /* every other answer stops the job, names the error and what to do */
    static const struct { int err; const char *name, *hint; } fails[] = {
        {DDPC_CUDA_INSUFFICIENT_DRIVER, "cudaErrorInsufficientDriver", "driver is too old"},
        {DDPC_CUDA_DEVICES_UNAVAILABLE, "cudaErrorDevicesUnavailable", "exclusive-process"},
        {DDPC_CUDA_SYSTEM_DRIVER_MISMATCH, "cudaErrorSystemDriverMismatch", "reboot"},
        {DDPC_CUDA_INITIALIZATION_ERROR, "cudaErrorInitializationError", "dmesg"},
    };
    for (size_t i = 0; i < sizeof fails / sizeof fails[0]; i++) {
        char note[160];
        snprintf(note, sizeof note, "cudaGetDeviceCount: %s (text)", fails[i].name);
        struct ddpc_device_info bad = probe_info(DDPC_PROBE_FAILED, fails[i].err, 0, note);
        for (int g = 0; g < 2; g++) {
            int accel = g ? DDPC_ACCEL_GPU : DDPC_ACCEL_AUTO;
            ck_assert_int_eq(devprobe_decide(accel, &bad, msg, sizeof msg), DDPC_CHOOSE_FAIL);
            ck_assert_msg(strstr(msg, fails[i].name) && strstr(msg, fails[i].hint) &&
                          strstr(msg, "---> HINT"), "%s", msg);
            ck_assert_msg(g || strstr(msg, "set accelerator: cpu"), "auto: %s", msg);
        }
    }
}
END_TEST

START_TEST(probe_test_hook_parsing)
{
    static const struct { const char *v; int want; } cases[] = {
        {NULL, -1}, {"", -1}, {"35", 35}, {"100", 100}, {"0", -1}, {"-3", -1},
        {"35x", -1}, {"cudaErrorNoDevice", -1}, {"100000", -1},
    };
    const char *old = getenv("DDPC_TEST_CUDA_PROBE_ERROR");
    char *keep = old ? strdup(old) : NULL;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (cases[i].v)
            ck_assert_int_eq(setenv("DDPC_TEST_CUDA_PROBE_ERROR", cases[i].v, 1), 0);
        else
            ck_assert_int_eq(unsetenv("DDPC_TEST_CUDA_PROBE_ERROR"), 0);
        /* read once per process (env.c); a value out of range is an error */
        struct ddpc_err e = { 0 };
        int unset = !cases[i].v || !*cases[i].v;
        ck_assert_int_eq(env_load(&e) == 0, unset || cases[i].want != -1);
        ck_assert_msg(devprobe_test_error() == cases[i].want, "'%s'",
                      cases[i].v ? cases[i].v : "(unset)");
    }
    if (keep)
        setenv("DDPC_TEST_CUDA_PROBE_ERROR", keep, 1);
    else
        unsetenv("DDPC_TEST_CUDA_PROBE_ERROR");
    free(keep);
}
END_TEST

/* End to end through the real plugin (build/lib/ddpc/libddprt_cuda.so): the
 * launcher's probe child loads it, its probe forks and answers the error
 * the test hook names, and the launcher decides. */
static char plugin_path[4096];

static int have_plugin(void)
{
    const char *b = getenv("DDPC_BUILD");
    snprintf(plugin_path, sizeof plugin_path, "%s/lib/ddpc/libddprt_cuda.so", b ? b : "build");
    if (access(plugin_path, R_OK) == 0)
        return 1;
    test_skip("cuda probe end to end", "%s not built (needs nvcc)", plugin_path);
    return 0;
}

static int hooked_dry_run(struct ddpc_job *j, int accel, const char *err)
{
    j->accelerator = accel;
    dry_run_plugin = plugin_path;
    dry_run_probe_error = err;
    dry_run_stdout = 1;
    int rc = dry_run(j, NULL);
    dry_run_plugin = NULL;
    dry_run_probe_error = NULL;
    dry_run_stdout = 0;
    return rc;
}

START_TEST(launcher_probe_failure_is_not_no_gpu)
{
    if (!have_plugin())
        return;
    struct ddpc_job j;
    two_gpu_job(&j);
    /* a driver too old for CUDA 13, a busy or exclusive GPU: auto and gpu
     * both stop, naming the error and the way out; never CPU workers */
    static const struct { const char *code, *name, *hint; } fails[] = {
        {"35", "cudaErrorInsufficientDriver", "driver is too old"},
        {"46", "cudaErrorDevicesUnavailable", "exclusive-process"},
        {"3", "cudaErrorInitializationError", "dmesg"},
    };
    for (size_t i = 0; i < sizeof fails / sizeof fails[0]; i++) {
        int rc = hooked_dry_run(&j, DDPC_ACCEL_AUTO, fails[i].code);
        ck_assert_msg(rc == 1 && strstr(launcher_err, fails[i].name) &&
                      strstr(launcher_err, fails[i].hint) &&
                      strstr(launcher_err, "set accelerator: cpu") &&
                      !strstr(launcher_err, "CPU worker process"),
                      "auto, cudaError %s: rc %d\n%s", fails[i].code, rc, launcher_err);
        rc = hooked_dry_run(&j, DDPC_ACCEL_GPU, fails[i].code);
        ck_assert_msg(rc == 1 && strstr(launcher_err, fails[i].name) &&
                      strstr(launcher_err, fails[i].hint),
                      "gpu, cudaError %s: rc %d\n%s", fails[i].code, rc, launcher_err);
    }
    /* no device: auto runs CPU workers and says why; gpu names the device */
    int rc = hooked_dry_run(&j, DDPC_ACCEL_AUTO, "100");
    ck_assert_msg(rc == 0 && strstr(launcher_err, "no GPU found") &&
                  strstr(launcher_err, "cudaErrorNoDevice"), "auto, no device: rc %d\n%s", rc,
                  launcher_err);
    rc = hooked_dry_run(&j, DDPC_ACCEL_GPU, "100");
    ck_assert_msg(rc == 1 && strstr(launcher_err, "GPU 0 not found: no GPU is visible") &&
                  strstr(launcher_err, "cudaErrorNoDevice"), "gpu, no device: rc %d\n%s", rc,
                  launcher_err);
    /* a plugin that will not load where a driver is (the hook stands for
     * the driver) is a broken install, not "no GPU" */
    j.accelerator = DDPC_ACCEL_AUTO;
    dry_run_plugin = "/nonexistent/ddpc/lib/libddprt_cuda.so";
    dry_run_probe_error = "100";
    rc = dry_run(&j, NULL);
    dry_run_plugin = NULL;
    dry_run_probe_error = NULL;
    ck_assert_msg(rc == 1 && strstr(launcher_err, "could not be loaded") &&
                  strstr(launcher_err, "set accelerator: cpu"), "rc %d\n%s", rc, launcher_err);
}
END_TEST

/* test_gpu's own verdicts, on a machine without a GPU: SKIP (exit 0) with
 * the probe's exact reason; a failed probe (the hook's driver too old) and
 * DDPC_REQUIRE_GPU=1 (the device machine's command) fail instead. env: a
 * NULL-terminated list of NAME=VALUE for test_gpu, or NULL. */
static int run_test_gpu(char *const env[], char *out, size_t cap)
{
    char path[] = "/tmp/ddpc_test_gpu_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    fflush(stdout);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        unsetenv("DDPC_REQUIRE_GPU");
        unsetenv("DDPC_TEST_CUDA_PROBE_ERROR");
        unsetenv("DDPC_TEST_PARTS");
        unsetenv("DDPC_TEST_OUT");
        unsetenv("DDPC_TEST_FAKE_GPUS");
        for (int i = 0; env && env[i]; i++)
            if (putenv(env[i]) != 0)
                _exit(98);
        char *argv[] = {test_gpu_path, NULL};
        execv(test_gpu_path, argv);
        _exit(127);
    }
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ssize_t n = pread(fd, out, cap - 1, 0);
    out[n > 0 ? n : 0] = '\0';
    close(fd);
    unlink(path);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1000 + WTERMSIG(st);
}

START_TEST(test_gpu_skips_only_without_a_gpu)
{
    if (access(test_gpu_path, X_OK) != 0) {
        test_skip("cuda", "test_gpu verdicts: %s not built (make cuda-link-check)",
               test_gpu_path);
        return;
    }
    char out[4096];
    int rc = run_test_gpu(NULL, out, sizeof out);
    ck_assert_msg(rc == 0 && strncmp(out, "SKIP test_gpu: no GPU: no CUDA driver", 37) == 0,
                  "rc %d: %s", rc, out);
    char *req[] = {(char *)"DDPC_REQUIRE_GPU=1", NULL};
    rc = run_test_gpu(req, out, sizeof out);
    ck_assert_msg(rc == 1 && strstr(out, "FAIL test_gpu: DDPC_REQUIRE_GPU=1") &&
                  strstr(out, "no CUDA driver") && !strstr(out, "SKIP"), "rc %d: %s", rc, out);
    char *old_driver[] = {(char *)"DDPC_TEST_CUDA_PROBE_ERROR=35", NULL};
    rc = run_test_gpu(old_driver, out, sizeof out);
    ck_assert_msg(rc == 1 && strstr(out, "FAIL probe") &&
                  strstr(out, "cudaErrorInsufficientDriver") && strstr(out, "too old") &&
                  !strstr(out, "SKIP"), "rc %d: %s", rc, out);
}
END_TEST

/* The harness a lent GPU machine runs (tests/gpu/stage.sh), without a GPU:
 * DDPC_TEST_FAKE_GPUS makes every part run and fail at its first CUDA
 * call. The parts a DDPC_TEST_PARTS filter names run, in test_gpu's order,
 * and no other; world 2 and 4 on one GPU with this NCCL (2.28 < 2.30) are
 * NOT RUN with the reason; the results file holds a line per part and the
 * summary last; the exit status is a failure. */
START_TEST(test_gpu_runs_the_parts_it_is_asked_for_in_order)
{
    if (access(test_gpu_path, X_OK) != 0) {
        test_skip("cuda", "test_gpu harness: %s not built (make cuda-link-check)",
                  test_gpu_path);
        return;
    }
    char results[] = "/tmp/ddpc_test_gpu_results_XXXXXX";
    int fd = mkstemp(results);
    ck_assert_int_ge(fd, 0);
    close(fd);
    char out_env[64];
    snprintf(out_env, sizeof out_env, "DDPC_TEST_OUT=%s", results);
    char *env[] = {(char *)"DDPC_TEST_FAKE_GPUS=1",
                   (char *)"DDPC_TEST_PARTS=overlap4,init-timeout,nccl2,ops", out_env, NULL};
    static char out[65536];
    int rc = run_test_gpu(env, out, sizeof out);
    const char *ops = strstr(out, "---- part ops: FAIL");
    const char *it = strstr(out, "---- part init-timeout: FAIL");
    const char *n2 = strstr(out, "---- part nccl2: NOT RUN");
    const char *o4 = strstr(out, "---- part overlap4: NOT RUN");
    ck_assert_msg(rc == 1 && ops && it && n2 && o4 && ops < it && it < n2 && n2 < o4,
                  "rc %d: %s", rc, out);
    ck_assert_msg(!strstr(out, "part training") && !strstr(out, "part e2e") &&
                  !strstr(out, "part nccl4") && !strstr(out, "part overlap2"),
                  "parts outside DDPC_TEST_PARTS ran: %s", out);
    size_t len = 0;
    char *r = read_whole(results, &len);
    unlink(results);
    ck_assert_msg(strstr(r, "part\tops\tFAIL\t") && strstr(r, "part\tinit-timeout\tFAIL\t") &&
                  strstr(r, "part\tnccl2\tNOTRUN\tworld 2 on 1 GPU(s) needs NCCL >= 2.30") &&
                  strstr(r, "part\toverlap4\tNOTRUN\t") && strstr(r, "check\tops\tFAIL\t"),
                  "results file:\n%s", r);
    const char *last = len > 1 ? r + len - 2 : r;
    while (last > r && last[-1] != '\n')
        last--;
    ck_assert_msg(strncmp(last, "summary\tmain\tFAIL\t0 passed, 2 failed, 2 not run", 45) == 0,
                  "the results file's last line: %s", last);
    free(r);
}
END_TEST

Suite *cuda_suite(void)
{
    Suite *s = suite_create("cuda");
    TCase *tl = tcase_create("launcher");
    tcase_add_test(tl, launcher_warns_on_mixed_gpu_models);
    tcase_add_test(tl, launcher_gpu_without_gpus_fails_at_once);
    tcase_add_test(tl, launcher_missing_cuda_plugin);
    tcase_add_test(tl, probe_classify_only_no_device_means_none);
    tcase_add_test(tl, probe_decide_each_answer);
    tcase_add_test(tl, probe_test_hook_parsing);
    tcase_add_test(tl, launcher_probe_failure_is_not_no_gpu);
    tcase_set_timeout(tl, 60);   /* ~12 probes that each load the CUDA libraries */
    suite_add_tcase(s, tl);
    int gpus = devprobe_gpu_nodes();
    find_test_gpu();
    if (gpus == 0) {
        TCase *tv = tcase_create("test_gpu verdicts");
        tcase_add_test(tv, test_gpu_skips_only_without_a_gpu);
        tcase_add_test(tv, test_gpu_runs_the_parts_it_is_asked_for_in_order);
        tcase_set_timeout(tv, 30);
        suite_add_tcase(s, tv);
        test_skip("cuda", "no GPU found (no /dev/nvidia<N>); the CUDA backend is only "
               "compiled and link-checked here (make cuda-link-check)\n");
        TCase *tc = tcase_create("SKIP no GPU found");
        tcase_add_test(tc, skipped_no_gpu);
        suite_add_tcase(s, tc);
        return s;
    }
    if (access(test_gpu_path, X_OK) != 0) {
        test_skip("cuda", "%d GPU(s) found but %s is not built (needs nvcc: make gpu-test)",
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
