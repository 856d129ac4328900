/* optim.h - learning-rate schedule, gradient clipping and the optimizer step
 * over the flat parameter/gradient buffers.
 *
 * defines: optim_init, optim_lr, optim_clip_scale, optim_update, optim_step, optim_free
 *
 * lr(t) for optimizer step t (0-based) =
 *   learning_rate * scaling                  (none 1, linear W*accum, sqrt of it)
 *   * warmup factor   t < warmup_steps:      start + (1 - start) * t / warmup_steps
 *   * decay factor    over u = t - warmup_steps of U = total_steps - warmup_steps:
 *       constant 1; cosine min + (1-min)(1 + cos(pi u/U))/2; step gamma^floor(u/step_size)
 * (torch's LinearLR then CosineAnnealingLR/StepLR chained by SequentialLR).
 * The step itself is one fused ops->optim_step pass (torch.optim arithmetic)
 * per range of the flat buffer: weight decay applies to every parameter
 * (optimizer.weight_decay_on: all) or only to the tensors of 2+ dimensions
 * (weights: torch.optim with nanoGPT's two param groups, the other group's
 * weight_decay 0). The ranges come from the net's tensor list, adjacent
 * tensors of one kind merged: a GPT block is a handful of passes.
 */
#ifndef DDPC_OPTIM_H
#define DDPC_OPTIM_H

#include <stddef.h>
#include <stdint.h>
#include "job.h"
#include "layers.h"
#include "ops.h"

/* Parameters [lo, hi) of the flat buffer, with weight decay or without. */
struct ddpc_optim_range {
    size_t lo, hi;
    int    decay;
};

struct ddpc_optim {
    struct ddpc_ops *ops;
    const struct ddpc_job *job;
    double  base_lr;        /* learning_rate after lr_scaling */
    int64_t total_steps;    /* optimizer steps in the whole run, for cosine */
    long    step;           /* optimizer steps taken so far: the schedule's position */
    long    t_ahead;        /* updates the moments hold beyond step (torch's
                               state['step'] - step): nonzero after a resume whose
                               checkpoint counted other steps (grad_accumulation
                               changed), where step was set from the epochs and
                               batches seen; 0 otherwise */
    size_t  n;
    float  *m;              /* [n] sgd momentum buffer / adam first moment; backend */
    float  *v;              /* [n] adam second moment; NULL for sgd */
    int     n_ranges;
    struct ddpc_optim_range *range;   /* [n_ranges] tiling [0, n) in order; host, owned */
};

/* world and job->grad_accumulation feed lr_scaling. net: the parameter
 * tensors (their shapes decide optimizer.weight_decay_on: weights), which
 * must tile [0, n); NULL: the whole buffer is one tensor that is decayed
 * (tests of the arithmetic). */
int    optim_init(struct ddpc_optim *o, struct ddpc_ops *ops, const struct ddpc_job *job,
                  const struct ddpc_net *net, int world, size_t n, int64_t total_steps,
                  struct ddpc_err *e);
/* Learning rate of optimizer step t (0-based). */
double optim_lr(const struct ddpc_optim *o, int64_t t);
/* torch.nn.utils.clip_grad_norm_: min(1, max_norm / (sqrt(sumsq) + 1e-6));
 * 1 when max_norm <= 0. */
float  optim_clip_scale(double sumsq, double max_norm);
/* Elements [lo, hi) of the whole buffers params and grads (and of the
 * moments): params -= update(grads * grad_scale) at the learning rate of
 * step o->step, as the moments' update o->step + o->t_ahead + 1 (Adam's
 * bias correction, SGD momentum's first step), each range with its own
 * weight decay. Does not advance
 * o->step (a rank that updates only its shard advances it once, after). */
int    optim_update(struct ddpc_optim *o, float *params, const float *grads, size_t lo,
                    size_t hi, float grad_scale, struct ddpc_err *e);
/* optim_update over [0, n), then advances o->step. */
int    optim_step(struct ddpc_optim *o, float *params, const float *grads, float grad_scale,
                  struct ddpc_err *e);
void   optim_free(struct ddpc_optim *o);

#endif /* DDPC_OPTIM_H */
