/* devprobe.h - what a GPU probe's answer means, and what the launcher does.
 *
 * The CUDA plugin's probe (backend_cuda.cu) runs in a forked child and
 * answers a struct ddpc_device_info (backend.h). This is the plain C that
 * turns its CUDA status into a verdict and the verdict into an action, so
 * the rules are tested on a machine without a GPU (tests/test_cuda.c):
 *
 *   - only "no device" (cudaErrorNoDevice, or 0 devices) and "no driver"
 *     (libcuda.so.1 is not installed) mean "this machine has no GPU";
 *   - every other CUDA error (a driver too old for this toolkit, a device
 *     busy or in exclusive-process mode, a broken install) means a GPU may
 *     be there but cannot be used: it is reported with its name and a hint,
 *     and with accelerator auto it stops the job instead of falling back to
 *     CPU workers, which would be a silent 10-100x slowdown.
 *
 * It is compiled into the C runtime and, -fPIC, into libddprt_cuda.so (the
 * plugin cannot call into the job's static runtime).
 */
#ifndef DDPC_DEVPROBE_H
#define DDPC_DEVPROBE_H

#include <stddef.h>
#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* cudaError_t values this file needs, without the CUDA headers;
 * backend_cuda.cu asserts at compile time that they match. */
#define DDPC_CUDA_SUCCESS              0
#define DDPC_CUDA_INITIALIZATION_ERROR 3
#define DDPC_CUDA_STUB_LIBRARY         34
#define DDPC_CUDA_INSUFFICIENT_DRIVER  35
#define DDPC_CUDA_DEVICES_UNAVAILABLE  46
#define DDPC_CUDA_NO_DEVICE            100
#define DDPC_CUDA_OPERATING_SYSTEM     304
#define DDPC_CUDA_NOT_PERMITTED        800
#define DDPC_CUDA_SYSTEM_NOT_READY     802
#define DDPC_CUDA_SYSTEM_DRIVER_MISMATCH 803
#define DDPC_CUDA_COMPAT_NOT_SUPPORTED 804

/* struct ddpc_device_info.status */
enum ddpc_probe_status {
    DDPC_PROBE_FOUND = 0,   /* count >= 1, every device answered */
    DDPC_PROBE_NO_DEVICE,   /* cudaErrorNoDevice, or 0 devices: no GPU here */
    DDPC_PROBE_NO_DRIVER,   /* libcuda.so.1 not installed: no GPU here */
    DDPC_PROBE_FAILED,      /* any other error: cuda_error and note say which */
};

/* The verdict on cudaGetDeviceCount's answer (cuda_error 0 = success). */
enum ddpc_probe_status devprobe_classify(int cuda_error, int count);

/* What to do about a CUDA error found by the probe: one sentence for the
 * "---> HINT:" line; never NULL. */
const char *devprobe_hint(int cuda_error);

enum ddpc_accel_choice {
    DDPC_CHOOSE_GPU,   /* plan GPU workers (which checks the listed devices) */
    DDPC_CHOOSE_CPU,   /* accelerator auto and no GPU here: CPU workers */
    DDPC_CHOOSE_FAIL,  /* stop; msg says why and what to do */
};

/* accelerator (enum ddpc_accelerator) is auto or gpu. With gpu and no
 * device the answer is GPU: the plan then names the device it cannot find.
 * msg (cap bytes) gets the reason for CPU (no GPU here, and why) or FAIL. */
enum ddpc_accel_choice devprobe_decide(int accelerator, const struct ddpc_device_info *info,
                                       char *msg, size_t cap);

/* The one test hook: DDPC_TEST_CUDA_PROBE_ERROR=<cudaError_t number> makes
 * the probe child answer as if cudaGetDeviceCount had returned it, without
 * touching the driver (and without the no-driver short cut), so the
 * launcher's handling of every answer is tested on a machine without a GPU.
 * Returns the number, or -1 when unset or not a number in [1, 99999]. */
int devprobe_test_error(void);

/* /dev/nvidia0, /dev/nvidia1, ...: the device nodes the driver made, one
 * per GPU it exposes here, whatever a probe says (nvidiactl and nvidia-uvm
 * do not count). The GPU tests use it to tell "no GPU" from "a GPU the
 * probe could not use". */
int devprobe_gpu_nodes(void);

#ifdef __cplusplus
}
#endif
#endif /* DDPC_DEVPROBE_H */
