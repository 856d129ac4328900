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
 *   - no GPU, or no driver, is not an error: count 0, return 0;
 *   - ops_init and comm_init run in the worker, in that order (comm_init
 *     needs the device selected and the compute stream made by ops_init).
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

#include "backend.h"
#include "child_msg.h"
#include "cuda_check.h"
#include "ops_cuda.h"
#include "comm_nccl.h"

#define PROBE_TIMEOUT_MS 30000    /* driver init on a big node takes seconds, not 30 */

/* What the probe child writes: fixed size, read until EOF. */
struct probe_msg {
    int  count;
    char names[64][DDPC_DEVICE_NAME_MAX];
    char note[160];
};

static cudaStream_t g_compute_stream;   /* see the file header */

/* Runs in the forked child only; never returns. Every CUDA call is checked:
 * a failure becomes count 0 plus a note, which is the answer the launcher
 * needs ("no usable GPU, and why"). */
static void probe_child(int fd)
{
    static struct probe_msg m;
    memset(&m, 0, sizeof m);
    int n = 0;
    cudaError_t st = cudaGetDeviceCount(&n);
    if (st != cudaSuccess) {
        snprintf(m.note, sizeof m.note, "cudaGetDeviceCount: %s (%s)", cudaGetErrorName(st),
                 cudaGetErrorString(st));
        n = 0;
    }
    m.count = n;
    for (int i = 0; i < n && i < 64; i++) {
        cudaDeviceProp p;
        st = cudaGetDeviceProperties(&p, i);
        if (st != cudaSuccess)
            snprintf(m.names[i], sizeof m.names[i], "(unknown: %s)", cudaGetErrorName(st));
        else
            snprintf(m.names[i], sizeof m.names[i], "%.60s (sm_%d%d, %.0f GiB)", p.name,
                     p.major, p.minor, (double)p.totalGlobalMem / (1024.0 * 1024 * 1024));
    }
    child_msg_send_and_exit(fd, &m, sizeof m);
}

static int cuda_probe(struct ddpc_device_info *info, struct ddpc_err *e)
{
    memset(info, 0, sizeof *info);
    int fds[2];
    SYS_CHECK(e, pipe2(fds, O_CLOEXEC));
    fflush(NULL);                 /* the child must not inherit unflushed output */
    pid_t pid = fork();
    if (pid < 0) {
        int err = errno;
        close(fds[0]);
        close(fds[1]);
        return DDPC_FAIL(e, DDPC_E_SYS, "fork for the CUDA probe: %s", strerror(err));
    }
    if (pid == 0) {
        close(fds[0]);
        probe_child(fds[1]);
    }
    close(fds[1]);

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
    info->count = m.count < 0 ? 0 : m.count;
    for (int i = 0; i < info->count && i < 64; i++)
        snprintf(info->names[i], sizeof info->names[i], "%s", m.names[i]);
    snprintf(info->note, sizeof info->note, "%s", m.note);
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
                          const char *master_addr, int master_port, double deadline,
                          struct ddpc_err *e)
{
    if (!g_compute_stream)
        return DDPC_FAIL(e, DDPC_E_INVALID,
                         "cuda comm_init(%s) before ops_init: the communicator needs the "
                         "device selected and the compute stream made first", purpose);
    return comm_nccl_init(c, purpose, rank, world, master_addr, master_port,
                          g_compute_stream, deadline, e);
}

extern "C" const struct ddpc_backend ddpc_cuda_backend = {
    "cuda",
    cuda_probe,
    cuda_ops_init,
    cuda_comm_init,
};
