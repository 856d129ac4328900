/* sampler.h - which samples a rank trains on: PyTorch's DistributedSampler
 * followed by a DataLoader's batching.
 *
 * defines: sampler_init, sampler_set_epoch, sampler_batch, sampler_free
 *
 * Per epoch: one permutation of [0, n) from (seed, epoch) (identity without
 * shuffle), padded by repeating its start to a multiple of world (or cut to
 * one with drop_last); rank r takes positions r, r+W, r+2W, ...; batches of
 * batch_size in that order, the last partial one kept unless drop_last;
 * then limit_train_batches. Every rank computes the same permutation, so no
 * communication is needed. Never allocates after init.
 */
#ifndef DDPC_SAMPLER_H
#define DDPC_SAMPLER_H

#include <stdint.h>
#include "err.h"

struct ddpc_sampler {
    int64_t  n;             /* dataset size */
    int      rank, world;
    int      batch_size;
    int      shuffle, drop_last;
    uint64_t seed;
    int64_t  num_samples;   /* this rank's shard size per epoch */
    int64_t  total_size;    /* num_samples * world */
    int64_t  n_batches;     /* batches per epoch after limit_train_batches */
    int64_t  epoch;         /* last set */
    int64_t *perm;          /* [n] scratch permutation */
    int64_t *indices;       /* [num_samples] this rank's shard, in order */
};

/* limit_batches > 0 caps batches per epoch; else limit_fraction (0, 1] keeps
 * floor(fraction * batches), at least 1. */
int  sampler_init(struct ddpc_sampler *s, int64_t n, int rank, int world, int batch_size,
                  int shuffle, int drop_last, uint64_t seed, int64_t limit_batches,
                  double limit_fraction, struct ddpc_err *e);
/* Recomputes the shard for this epoch (0-based). */
void sampler_set_epoch(struct ddpc_sampler *s, int64_t epoch);
/* Batch b (0-based, < n_batches): sets *idx to its sample indices and returns
 * how many there are. */
int  sampler_batch(const struct ddpc_sampler *s, int64_t b, const int64_t **idx);
void sampler_free(struct ddpc_sampler *s);

#endif /* DDPC_SAMPLER_H */
