/* devprobe.c - the GPU probe's verdict and the launcher's choice (devprobe.h). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devprobe.h"
#include "env.h"
#include "job.h"

enum ddpc_probe_status devprobe_classify(int cuda_error, int count)
{
    if (cuda_error == DDPC_CUDA_NO_DEVICE)
        return DDPC_PROBE_NO_DEVICE;
    if (cuda_error != DDPC_CUDA_SUCCESS)
        return DDPC_PROBE_FAILED;
    return count > 0 ? DDPC_PROBE_FOUND : DDPC_PROBE_NO_DEVICE;
}

const char *devprobe_hint(int cuda_error)
{
    switch (cuda_error) {
    case DDPC_CUDA_INSUFFICIENT_DRIVER:
    case DDPC_CUDA_COMPAT_NOT_SUPPORTED:
        return "the NVIDIA driver is too old for this CUDA toolkit (CUDA 13 needs driver "
               "580+; `nvidia-smi` shows it): update the driver";
    case DDPC_CUDA_SYSTEM_DRIVER_MISMATCH:
        return "libcuda.so and the kernel module differ in version (a driver update "
               "without a reboot?): reboot, or reinstall the driver";
    case DDPC_CUDA_DEVICES_UNAVAILABLE:
        return "the GPUs are busy, or in exclusive-process mode and taken (`nvidia-smi`); "
               "wait, or pick a free one with CUDA_VISIBLE_DEVICES";
    case DDPC_CUDA_STUB_LIBRARY:
        return "the CUDA stub libcuda.so was loaded instead of the driver's: take "
               "lib64/stubs out of LD_LIBRARY_PATH";
    case DDPC_CUDA_NOT_PERMITTED:
    case DDPC_CUDA_OPERATING_SYSTEM:
        return "the system refused access to the GPU: check /dev/nvidia* permissions and "
               "that the container was given the GPU";
    case DDPC_CUDA_SYSTEM_NOT_READY:
        return "the GPU system is not ready (NVSwitch machines: `systemctl status "
               "nvidia-fabricmanager`)";
    default:
        return "the CUDA driver or install is broken: see `nvidia-smi` and `dmesg` (Xid "
               "errors)";
    }
}

enum ddpc_accel_choice devprobe_decide(int accelerator, const struct ddpc_device_info *info,
                                       char *msg, size_t cap)
{
    if (cap)
        msg[0] = '\0';
    const char *note = info->note[0] ? info->note : "no GPU found";
    int status = info->status;
    if (status == DDPC_PROBE_FOUND && info->count < 1)
        status = DDPC_PROBE_NO_DEVICE;   /* "found" nothing */
    switch (status) {
    case DDPC_PROBE_FOUND:
        return DDPC_CHOOSE_GPU;
    case DDPC_PROBE_NO_DEVICE:
    case DDPC_PROBE_NO_DRIVER:
        if (accelerator == DDPC_ACCEL_GPU)
            return DDPC_CHOOSE_GPU;     /* the plan names the device it cannot find */
        (void)snprintf(msg, cap, "%s", note);
        return DDPC_CHOOSE_CPU;
    default:
        break;
    }
    /* 512 bytes (struct ddpc_err) hold the note (160), the hint and this */
    (void)snprintf(msg, cap, "accelerator %s: the GPU probe failed: %s\n---> HINT: %s%s",
                   accelerator == DDPC_ACCEL_GPU ? "gpu" : "auto", note,
                   devprobe_hint(info->cuda_error),
                   accelerator == DDPC_ACCEL_GPU ? ""
                   : "; auto picks CPU workers only where there is no GPU: to use them "
                     "here, set accelerator: cpu");
    return DDPC_CHOOSE_FAIL;
}

int devprobe_test_error(void)
{
    return env_get()->test_cuda_probe_error;
}

int devprobe_gpu_nodes(void)
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
