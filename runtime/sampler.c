/* sampler.c - DistributedSampler + DataLoader batching over sample indices.
 *
 * Owns: the per-epoch permutation and each rank's shard (see sampler.h).
 * Never touches sample data and never communicates.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "epoch_batches.h"
#include "rng.h"
#include "sampler.h"

int sampler_init(struct ddpc_sampler *s, int64_t n, int rank, int world, int batch_size,
                 int shuffle, int drop_last, uint64_t seed, int64_t limit_batches,
                 double limit_fraction, struct ddpc_err *e)
{
    memset(s, 0, sizeof *s);
    if (n <= 0 || world <= 0 || rank < 0 || rank >= world || batch_size <= 0)
        return DDPC_FAIL(e, DDPC_E_INVALID,
                         "sampler: bad arguments n=%lld rank=%d world=%d batch_size=%d",
                         (long long)n, rank, world, batch_size);
    s->n = n;
    s->rank = rank;
    s->world = world;
    s->batch_size = batch_size;
    s->shuffle = shuffle;
    s->drop_last = drop_last;
    s->seed = seed;
    s->epoch = -1;
    /* DistributedSampler: drop_last cuts to floor(n / W), else pads to ceil */
    int64_t full;
    int64_t nb = epoch_batches(n, world, batch_size, drop_last, limit_batches, limit_fraction,
                               &s->num_samples, &full);
    s->total_size = s->num_samples * world;
    if (s->num_samples == 0)
        return DDPC_FAIL(e, DDPC_E_DATA,
                         "%lld samples cannot be split over %d ranks with drop_last",
                         (long long)n, world);
    if (full == 0)
        return DDPC_FAIL(e, DDPC_E_DATA,
                         "each rank gets %lld samples, fewer than one batch of %d with "
                         "drop_last: lower batch_size or set drop_last: false",
                         (long long)s->num_samples, batch_size);
    s->n_batches = nb;
    s->perm = malloc((size_t)n * sizeof *s->perm);
    s->indices = malloc((size_t)s->num_samples * sizeof *s->indices);
    if (!s->perm || !s->indices) {
        sampler_free(s);
        return DDPC_FAIL(e, DDPC_E_NOMEM, "sampler: cannot allocate %lld indices",
                         (long long)n);
    }
    sampler_set_epoch(s, 0);
    return 0;
}

void sampler_set_epoch(struct ddpc_sampler *s, int64_t epoch)
{
    int64_t n = s->n;
    s->epoch = epoch;
    for (int64_t i = 0; i < n; i++)
        s->perm[i] = i;
    if (s->shuffle) {
        /* Fisher-Yates, from the end, unbiased bounded draws */
        struct ddpc_rng r;
        rng_seed2(&r, s->seed, (uint64_t)epoch);
        for (int64_t i = n - 1; i > 0; i--) {
            int64_t j = (int64_t)rng_below(&r, (uint64_t)i + 1);
            int64_t t = s->perm[i];
            s->perm[i] = s->perm[j];
            s->perm[j] = t;
        }
    }
    /* position p of the padded list is perm[p mod n] (padding repeats the
     * start, as many times as needed); rank r takes p = r + k*W */
    for (int64_t k = 0; k < s->num_samples; k++) {
        int64_t p = s->rank + k * s->world;
        s->indices[k] = s->perm[p % n];
    }
}

int sampler_batch(const struct ddpc_sampler *s, int64_t b, const int64_t **idx)
{
    int64_t start = b * s->batch_size;
    int64_t count = s->num_samples - start;
    if (count > s->batch_size)
        count = s->batch_size;
    if (b < 0 || count <= 0) {
        *idx = NULL;
        return 0;
    }
    *idx = s->indices + start;
    return (int)count;
}

void sampler_free(struct ddpc_sampler *s)
{
    free(s->perm);
    free(s->indices);
    s->perm = NULL;
    s->indices = NULL;
}
