/* worker.h - one rank's training loop.
 *
 * The launcher forks, builds a rank's ops and communicators, and calls
 * worker_run. worker_run owns everything else a rank does: seeded init and
 * broadcast from rank 0, the sampler, forward/backward, bucketed gradient
 * all-reduce, the optimizer, evaluation, and (rank 0 only) printing.
 * It returns instead of exiting, so tests can run ranks in threads or
 * processes and inspect the result.
 */
#ifndef DDPC_WORKER_H
#define DDPC_WORKER_H

#include <stdio.h>
#include "job.h"
#include "ops.h"
#include "comm.h"
#include "data.h"
#include "sample.h"
#include "evaluate.h"

struct ddpc_worker_args {
    const struct ddpc_job     *job;
    int                        rank, world;
    int                        device;      /* device index, or cpu worker number */
    struct ddpc_ops           *ops;
    struct ddpc_comm          *grad_comm;   /* gradients, init broadcast, metrics */
    struct ddpc_comm          *sync_comm;   /* per-step rank-sync barrier; may be NULL */
    const struct ddpc_dataset *train;
    const struct ddpc_dataset *test;        /* NULL: no evaluation */
    FILE                      *out;         /* rank 0's report stream (stdout) */
    double                     t_launch;    /* ddpc_now() when ./job started */
    const char                *spec_hash;   /* hex SHA-256 of the spec, stamped into
                                               checkpoints; NULL: all zeros, and
                                               resume does not check it */
    const struct ddpc_sample_opts *sample;  /* rank 0 generates from the final model
                                               into out after the ranks' last barrier
                                               (sample.h); NULL: no */
    const struct ddpc_eval_opts *eval;      /* ./job --eval or --predict (evaluate.h):
                                               the model is read, never trained, and
                                               test is the set --eval scores (train
                                               may be NULL); NULL: train */
};

/* What a finished run reports (identical on every rank after the final
 * reductions). params is a host copy of the final flat parameters when the
 * caller asks for it (for tests): set want_params and free *params. */
struct ddpc_worker_result {
    double  train_loss;        /* mean over the last epoch, all ranks */
    double  test_loss;
    double  test_accuracy;     /* -1 without a test set */
    double  samples_per_s;     /* global training samples / training seconds */
    double  tokens_per_s;      /* gpt: samples_per_s * block_size; else samples_per_s */
    double  wall_s;            /* since t_launch */
    double  first_step_s;      /* since t_launch, to the end of the first step */
    int64_t steps;             /* optimizer steps taken */
    int64_t skipped_steps;     /* fp16 loss scaling: steps skipped for non-finite
                                  gradients (not in steps; 0 without fp16 scaling) */
    int     want_params;
    float  *params;            /* malloc'd by worker_run when want_params */
    size_t  n_params;
};

int worker_run(const struct ddpc_worker_args *a, struct ddpc_worker_result *res,
               struct ddpc_err *e);

#endif /* DDPC_WORKER_H */
