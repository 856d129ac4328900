/* slurm.h - what a job's launcher reads from Slurm's environment.
 *
 * The generated sbatch script (templates/job.sbatch.m4) runs one ./job per
 * node under srun. Slurm then says which node this is, how many nodes it
 * gave, and which GPUs: --gpus-per-node sets CUDA_VISIBLE_DEVICES to the
 * GPUs it allocated, which CUDA renumbers 0..n-1, so a spec's `devices:
 * [2, 3]` must be translated to what this process sees.
 * Pure functions of their arguments (the caller reads getenv), so they are
 * tested without Slurm.
 */
#ifndef DDPC_SLURM_H
#define DDPC_SLURM_H

#include <stddef.h>

/* Maps the listed GPU indices (devices, n of them) to indices visible in
 * this process, given CUDA_VISIBLE_DEVICES as Slurm set it (cvd) and the
 * number of GPUs CUDA sees (count):
 *   - every listed index appears in cvd: its position there (Slurm gave
 *     exactly the GPUs the spec names: "2,3" -> 0, 1);
 *   - else, when n <= count: the k-th listed device is visible GPU k (the
 *     spec's indices only count GPUs; Slurm chose which);
 *   - else -1 (too few GPUs), and note says so.
 * Returns 1 when the indices changed (note says how), 0 when they did not,
 * -1 on error. cvd NULL or not a list of integers (UUIDs): positional. */
int slurm_gpu_map(const int *devices, int n, const char *cvd, int count, int *out,
                  char *note, size_t len);

#endif /* DDPC_SLURM_H */
