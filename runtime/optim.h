/* optim.h - learning-rate schedule, gradient clipping and the optimizer step
 * over the flat parameter/gradient buffers.
 *
 * defines: optim_init, optim_lr, optim_clip_scale, optim_step, optim_free
 *
 * lr(t) for optimizer step t (0-based) =
 *   learning_rate * scaling                  (none 1, linear W*accum, sqrt of it)
 *   * warmup factor   t < warmup_steps:      start + (1 - start) * t / warmup_steps
 *   * decay factor    over u = t - warmup_steps of U = total_steps - warmup_steps:
 *       constant 1; cosine min + (1-min)(1 + cos(pi u/U))/2; step gamma^floor(u/step_size)
 * (torch's LinearLR then CosineAnnealingLR/StepLR chained by SequentialLR).
 * The step itself is one fused ops->optim_step pass (torch.optim arithmetic).
 */
#ifndef DDPC_OPTIM_H
#define DDPC_OPTIM_H

#include <stddef.h>
#include <stdint.h>
#include "job.h"
#include "ops.h"

struct ddpc_optim {
    struct ddpc_ops *ops;
    const struct ddpc_job *job;
    double  base_lr;        /* learning_rate after lr_scaling */
    int64_t total_steps;    /* optimizer steps in the whole run, for cosine */
    long    step;           /* optimizer steps taken so far */
    size_t  n;
    float  *m;              /* [n] sgd momentum buffer / adam first moment; backend */
    float  *v;              /* [n] adam second moment; NULL for sgd */
};

/* world and job->grad_accumulation feed lr_scaling. */
int    optim_init(struct ddpc_optim *o, struct ddpc_ops *ops, const struct ddpc_job *job,
                  int world, size_t n, int64_t total_steps, struct ddpc_err *e);
/* Learning rate of optimizer step t (0-based). */
double optim_lr(const struct ddpc_optim *o, int64_t t);
/* torch.nn.utils.clip_grad_norm_: min(1, max_norm / (sqrt(sumsq) + 1e-6));
 * 1 when max_norm <= 0. */
float  optim_clip_scale(double sumsq, double max_norm);
/* params -= update(grads * grad_scale); advances o->step. */
int    optim_step(struct ddpc_optim *o, float *params, const float *grads, float grad_scale,
                  struct ddpc_err *e);
void   optim_free(struct ddpc_optim *o);

#endif /* DDPC_OPTIM_H */
