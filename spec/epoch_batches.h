/* epoch_batches.h - how many batches one rank trains per epoch: the one
 * count of the runtime's sampler (runtime/sampler.c), `ddpc plan`
 * (compiler/plan.c) and check's schedule warning (spec/validate.c), which
 * each wrote it out.
 *
 * defines: epoch_batches, epoch_optimizer_steps
 */
#ifndef DDPC_EPOCH_BATCHES_H
#define DDPC_EPOCH_BATCHES_H

#include <math.h>
#include <stdint.h>

/* n samples over `world` ranks as torch's DistributedSampler shards them
 * (drop_last: floor(n / world) each, else padded to the ceiling), cut into
 * batches of `batch` (drop_last: full ones only), then limited:
 * limit_batches > 0 caps the count, else a limit_fraction in (0, 1) takes
 * floor(fraction x count), at least 1 of a non-empty epoch. *per_rank and
 * *full get the shard's samples and the batches before the limit (either
 * may be NULL). Arguments must be positive. */
static inline int64_t epoch_batches(int64_t n, int64_t world, int64_t batch, int drop_last,
                                    int64_t limit_batches, double limit_fraction,
                                    int64_t *per_rank, int64_t *full)
{
    int64_t shard = drop_last ? n / world : (n + world - 1) / world;
    int64_t all = drop_last ? shard / batch : (shard + batch - 1) / batch, nb = all;
    if (limit_batches > 0) {
        if (limit_batches < nb)
            nb = limit_batches;
    } else if (limit_fraction > 0.0 && limit_fraction < 1.0) {
        nb = (int64_t)floor(limit_fraction * (double)nb);
        if (nb < 1 && all > 0)
            nb = 1;
    }
    if (per_rank)
        *per_rank = shard;
    if (full)
        *full = all;
    return nb;
}

/* Optimizer steps of one epoch of nb batches under grad_accumulation acc
 * (< 1 reads as 1): ceil(nb / acc), since the epoch's last, partial group
 * of micro-batches steps too. The run has epochs times as many; the LR
 * schedule spans them. The worker, `ddpc plan` and check's schedule
 * warning (samples or a gpt's token windows alike) all count with it. */
static inline int64_t epoch_optimizer_steps(int64_t nb, int64_t acc)
{
    if (acc < 1)
        acc = 1;
    return (nb + acc - 1) / acc;
}

#endif /* DDPC_EPOCH_BATCHES_H */
