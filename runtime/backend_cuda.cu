/* backend_cuda.cu - ddpc_cuda_backend: probe, ops_init, comm_init.
 *
 * Owns: the one `const struct ddpc_backend ddpc_cuda_backend` (backend.h)
 * that runtime/job.c hands to ddprt_main when the job is linked with CUDA.
 *
 * Rules this file keeps:
 *   - probe runs in the launcher BEFORE fork and never initialises CUDA in
 *     the calling process (a CUDA context does not survive fork): it forks a
 *     child that asks the driver and answers through a pipe, read with a
 *     timeout, and reaps it;
 *   - every answer of the driver is returned, not judged: count, status
 *     (devprobe.h: found, no device, no driver, failed), the CUDA error and
 *     its name; the launcher decides (devprobe_decide) that only "no
 *     device" and "no driver" mean no GPU;
 *   - ops_init, comm_init and comm_split run in the worker, in that order
 *     (comm_init needs the device selected and the compute stream made by
 *     ops_init; the split needs the communicator it splits).
 *
 * The one piece of file state: the compute stream that ops_init made, kept
 * for comm_init, whose signature (backend.h) carries no ops pointer. A
 * worker process has exactly one device and one ops, so there is exactly one
 * such stream per process; it is cleared by nothing because the process ends
 * with it.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dlfcn.h>

#include "backend.h"
#include "child_msg.h"
#include "cuda_check.h"
#include "devprobe.h"
#include "ops_cuda.h"
#include "comm_nccl.h"

#define PROBE_TIMEOUT_MS 30000    /* driver init on a big node takes seconds, not 30 */

/* devprobe.h spells the cudaError_t values it judges without CUDA headers */
static_assert(DDPC_CUDA_SUCCESS == cudaSuccess, "devprobe.h");
static_assert(DDPC_CUDA_INITIALIZATION_ERROR == cudaErrorInitializationError, "devprobe.h");
static_assert(DDPC_CUDA_STUB_LIBRARY == cudaErrorStubLibrary, "devprobe.h");
static_assert(DDPC_CUDA_INSUFFICIENT_DRIVER == cudaErrorInsufficientDriver, "devprobe.h");
static_assert(DDPC_CUDA_DEVICES_UNAVAILABLE == cudaErrorDevicesUnavailable, "devprobe.h");
static_assert(DDPC_CUDA_NO_DEVICE == cudaErrorNoDevice, "devprobe.h");
static_assert(DDPC_CUDA_OPERATING_SYSTEM == cudaErrorOperatingSystem, "devprobe.h");
static_assert(DDPC_CUDA_NOT_PERMITTED == cudaErrorNotPermitted, "devprobe.h");
static_assert(DDPC_CUDA_SYSTEM_NOT_READY == cudaErrorSystemNotReady, "devprobe.h");
static_assert(DDPC_CUDA_SYSTEM_DRIVER_MISMATCH == cudaErrorSystemDriverMismatch, "devprobe.h");
static_assert(DDPC_CUDA_COMPAT_NOT_SUPPORTED == cudaErrorCompatNotSupportedOnDevice,
              "devprobe.h");

/* What the probe child writes: fixed size, read until EOF. */
struct probe_msg {
    struct ddpc_device_info info;
};

static cudaStream_t g_compute_stream;   /* see the file header */

/* Runs in the forked child only; never returns. Answers what the driver
 * said, unjudged (see the file header): without libcuda.so.1 there is no
 * driver (cudart would call that cudaErrorInsufficientDriver, which is also
 * what a driver too old says, so ask the loader first). */
static void probe_child(int fd)
{
    static struct probe_msg m;
    memset(&m, 0, sizeof m);
    struct ddpc_device_info *info = &m.info;
    int n = 0;
    int hook = devprobe_test_error();
    cudaError_t st;
    if (hook > 0) {
        st = (cudaError_t)hook;
    } else {
        void *drv = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
        if (!drv) {
            const char *why = dlerror();
            info->status = DDPC_PROBE_NO_DRIVER;
            snprintf(info->note, sizeof info->note, "no CUDA driver: %s",
                     why ? why : "libcuda.so.1 not found");
            child_msg_send_and_exit(fd, &m, sizeof m);
        }
        st = cudaGetDeviceCount(&n);
    }
    if (st != cudaSuccess) {
        snprintf(info->note, sizeof info->note, "cudaGetDeviceCount: %s (%s)%s",
                 cudaGetErrorName(st), cudaGetErrorString(st),
                 hook > 0 ? " [DDPC_TEST_CUDA_PROBE_ERROR]" : "");
        n = 0;
    }
    info->cuda_error = (int)st;
    info->status = devprobe_classify((int)st, n);
    info->count = n;
    for (int i = 0; i < n && i < 64; i++) {
        cudaDeviceProp p;
        st = cudaGetDeviceProperties(&p, i);
        if (st != cudaSuccess) {
            /* a device that cannot be queried cannot be used either */
            snprintf(info->names[i], sizeof info->names[i], "(unknown: %s)", cudaGetErrorName(st));
            if (info->status == DDPC_PROBE_FOUND) {
                info->status = DDPC_PROBE_FAILED;
                info->cuda_error = (int)st;
                snprintf(info->note, sizeof info->note, "cudaGetDeviceProperties(%d): %s (%s)",
                         i, cudaGetErrorName(st), cudaGetErrorString(st));
            }
        } else {
            snprintf(info->names[i], sizeof info->names[i], "%.60s (sm_%d%d, %.0f GiB)", p.name,
                     p.major, p.minor, (double)p.totalGlobalMem / (1024.0 * 1024 * 1024));
        }
    }
    child_msg_send_and_exit(fd, &m, sizeof m);
}

static int cuda_probe(struct ddpc_device_info *info, struct ddpc_err *e)
{
    memset(info, 0, sizeof *info);
    int fds[2];
    pid_t pid = child_msg_fork(fds);
    if (pid < 0)
        return DDPC_FAIL(e, DDPC_E_SYS, "fork for the CUDA probe: %s", strerror(errno));
    if (pid == 0)
        probe_child(fds[1]);

    static struct probe_msg m;
    memset(&m, 0, sizeof m);
    struct child_msg_result r = child_msg_receive(fds[0], pid, &m, sizeof m, PROBE_TIMEOUT_MS);
    size_t got = r.got;
    int timed_out = r.timed_out, read_err = r.read_err, status = r.status;

    if (timed_out)
        return DDPC_FAIL(e, DDPC_E_DEVICE,
                         "the CUDA probe did not answer within %d s\n---> HINT: the driver "
                         "may be hung; check `nvidia-smi`, or run with accelerator: cpu",
                         PROBE_TIMEOUT_MS / 1000);
    if (read_err)
        return DDPC_FAIL(e, DDPC_E_SYS, "reading the CUDA probe: %s", strerror(read_err));
    if (got != sizeof m || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        if (WIFSIGNALED(status))
            return DDPC_FAIL(e, DDPC_E_DEVICE,
                             "the CUDA probe process died of signal %d (%s)\n---> HINT: the "
                             "CUDA driver is broken or mismatched; check `nvidia-smi`",
                             WTERMSIG(status), strsignal(WTERMSIG(status)));
        return DDPC_FAIL(e, DDPC_E_DEVICE, "the CUDA probe answered %zu of %zu bytes "
                         "(exit status %d)", got, sizeof m,
                         WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    }
    *info = m.info;
    for (int i = 0; i < 64; i++)   /* from another process: keep every string terminated */
        info->names[i][DDPC_DEVICE_NAME_MAX - 1] = '\0';
    info->note[sizeof info->note - 1] = '\0';
    if (info->count < 0)
        info->count = 0;
    return 0;
}

static int cuda_ops_init(struct ddpc_ops *ops, int device, struct ddpc_err *e)
{
    g_compute_stream = NULL;
    DDPC_TRY(ops_cuda_init(ops, device, e));
    g_compute_stream = ops_cuda_stream(ops);
    return 0;
}

static int cuda_comm_init(struct ddpc_comm *c, const char *purpose, int rank, int world,
                          const char *master_addr, int master_port, const char *prefix,
                          double deadline, struct ddpc_err *e)
{
    if (!g_compute_stream)
        return DDPC_FAIL(e, DDPC_E_INVALID,
                         "cuda comm_init(%s) before ops_init: the communicator needs the "
                         "device selected and the compute stream made first", purpose);
    return comm_nccl_init(c, purpose, rank, world, master_addr, master_port, prefix,
                          g_compute_stream, deadline, e);
}

static int cuda_comm_split(struct ddpc_comm *parent, struct ddpc_comm *c, const char *purpose,
                           double deadline, struct ddpc_err *e)
{
    return comm_nccl_split(parent, c, purpose, deadline, e);
}

extern "C" const struct ddpc_backend ddpc_cuda_backend = {
    "cuda",
    cuda_probe,
    cuda_ops_init,
    cuda_comm_init,
    cuda_comm_split,
};
