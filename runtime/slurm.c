/* slurm.c - Slurm's GPU renumbering (slurm.h).
 *
 * Owns slurm_gpu_map. Never reads the environment (the launcher does) and
 * never fails silently: a changed mapping is described in the note.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "slurm.h"

/* cvd "2,3" -> idx {2, 3}; -1 if it is not a list of integers. */
static int parse_cvd(const char *cvd, int *idx, int max)
{
    int k = 0;
    const char *p = cvd;
    if (!p || !*p)
        return -1;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > 1 << 20 || k >= max)
            return -1;
        idx[k++] = (int)v;
        if (*end == ',')
            end++;
        else if (*end)
            return -1;
        p = end;
    }
    return k;
}

static void put_list(char *buf, size_t len, const int *v, int n, const char *pre)
{
    size_t at = strlen(buf);
    for (int i = 0; i < n && at < len; i++) {
        int w = snprintf(buf + at, len - at, "%s%s%d", i ? ", " : "", i ? "" : pre, v[i]);
        if (w < 0)
            return;
        at += (size_t)w;
    }
}

int slurm_gpu_map(const int *devices, int n, const char *cvd, int count, int *out,
                  char *note, size_t len)
{
    int idx[256];
    int m = parse_cvd(cvd, idx, 256);
    if (note && len)
        note[0] = '\0';
    int all_in = m > 0;
    for (int i = 0; i < n && all_in; i++) {
        int pos = -1;
        for (int k = 0; k < m; k++)
            if (idx[k] == devices[i])
                pos = k;
        if (pos < 0 || pos >= count)
            all_in = 0;
        else
            out[i] = pos;
    }
    if (!all_in) {
        if (n > count) {
            if (note)
                snprintf(note, len, "Slurm gave this node %d GPU%s (CUDA_VISIBLE_DEVICES=%s) "
                         "but devices lists %d: ask for --gpus-per-node=%d (the generated "
                         "sbatch script does)", count, count == 1 ? "" : "s",
                         cvd ? cvd : "unset", n, n);
            return -1;
        }
        for (int i = 0; i < n; i++)
            out[i] = i;
    }
    int changed = 0;
    for (int i = 0; i < n; i++)
        changed |= out[i] != devices[i];
    if (changed && note) {
        snprintf(note, len, "ddpc: note: under Slurm (CUDA_VISIBLE_DEVICES=%s), devices ",
                 cvd ? cvd : "unset");
        put_list(note, len, devices, n, "[");
        size_t at = strlen(note);
        snprintf(note + at, len - at, "] %s: ",
                 all_in ? "are the GPUs Slurm gave, renumbered"
                        : "name GPUs Slurm did not give; the ones it gave are used in order");
        put_list(note, len, out, n, "cuda:");
    }
    return changed;
}
