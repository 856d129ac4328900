/* optim.c - LR schedule, clipping factor and optimizer state over flat buffers.
 *
 * Owns: the moment buffers and the step counter (see optim.h). The
 * per-element arithmetic is ddpc_k_sgd / ddpc_k_adam in ops_kernels.h, run by
 * the backend's optim_step in one fused pass. Never communicates.
 */
#include <math.h>
#include <string.h>

#include "optim.h"
#include "ops_kernels.h"

int optim_init(struct ddpc_optim *o, struct ddpc_ops *ops, const struct ddpc_job *job,
               int world, size_t n, int64_t total_steps, struct ddpc_err *e)
{
    memset(o, 0, sizeof *o);
    o->ops = ops;
    o->job = job;
    o->n = n;
    o->total_steps = total_steps;
    o->base_lr = job->learning_rate * ddpc_job_lr_factor(job, job->lr_scaling, world);
    int type = (int)job->optimizer.type;
    if (type == DDPC_OPTIM_SGD) {
        if (job->optimizer.momentum != 0.0)
            DDPC_TRY(ops->alloc(ops, (void **)&o->m, n * sizeof(float), e));
    } else if (type == DDPC_OPTIM_ADAM || type == DDPC_OPTIM_ADAMW) {
        DDPC_TRY(ops->alloc(ops, (void **)&o->m, n * sizeof(float), e));
        DDPC_TRY(ops->alloc(ops, (void **)&o->v, n * sizeof(float), e));
    } else {
        return DDPC_FAIL(e, DDPC_E_INVALID, "unknown optimizer type %d", type);
    }
    return 0;
}

double optim_lr(const struct ddpc_optim *o, int64_t t)
{
    const struct ddpc_job *j = o->job;
    double f = 1.0;
    int64_t w = j->schedule.warmup_steps > 0 ? j->schedule.warmup_steps : 0;
    if (t < w) {
        double s = j->schedule.warmup_start_factor;
        return o->base_lr * (s + (1.0 - s) * (double)t / (double)w);
    }
    int64_t u = t - w;
    switch (j->schedule.decay) {
    case DDPC_DECAY_COSINE: {
        int64_t span = o->total_steps - w;
        double mn = j->schedule.min_lr_factor;
        if (span <= 0)
            f = 1.0;
        else {
            double x = u >= span ? 1.0 : (double)u / (double)span;
            f = mn + (1.0 - mn) * 0.5 * (1.0 + cos(M_PI * x));
        }
        break;
    }
    case DDPC_DECAY_STEP:
        if (j->schedule.step_size > 0)
            f = pow(j->schedule.gamma, (double)(u / j->schedule.step_size));
        break;
    default:
        break;
    }
    return o->base_lr * f;
}

float optim_clip_scale(double sumsq, double max_norm)
{
    if (max_norm <= 0.0)
        return 1.0f;
    double coef = max_norm / (sqrt(sumsq) + 1e-6);
    return coef < 1.0 ? (float)coef : 1.0f;
}

int optim_step(struct ddpc_optim *o, float *params, const float *grads, float grad_scale,
               struct ddpc_err *e)
{
    const struct ddpc_job *j = o->job;
    long t = o->step + 1;   /* 1-based, like torch's state['step'] */
    struct ddpc_optim_step s = {
        .type = (int)j->optimizer.type,
        .lr = (float)optim_lr(o, o->step),
        .momentum = (float)j->optimizer.momentum,
        .nesterov = j->optimizer.nesterov,
        .weight_decay = (float)j->optimizer.weight_decay,
        .beta1 = (float)j->optimizer.beta1,
        .beta2 = (float)j->optimizer.beta2,
        .eps = (float)j->optimizer.eps,
        .bias_correction1 = (float)(1.0 - pow(j->optimizer.beta1, (double)t)),
        .bias_correction2 = (float)(1.0 - pow(j->optimizer.beta2, (double)t)),
        .grad_scale = grad_scale,
        .step = t,
    };
    /* torch.optim's Python-float arithmetic: double, rounded once */
    double lr = optim_lr(o, o->step);
    double bc1 = 1.0 - pow(j->optimizer.beta1, (double)t);
    double bc2 = 1.0 - pow(j->optimizer.beta2, (double)t);
    s.one_minus_beta1 = (float)(1.0 - j->optimizer.beta1);
    s.one_minus_beta2 = (float)(1.0 - j->optimizer.beta2);
    s.step_size = (float)(lr / bc1);
    s.bc2_sqrt = (float)sqrt(bc2);
    s.decay = (float)(1.0 - lr * j->optimizer.weight_decay);
    DDPC_TRY(o->ops->optim_step(o->ops, &s, params, grads, o->m, o->v, o->n, e));
    o->step = t;
    return 0;
}

void optim_free(struct ddpc_optim *o)
{
    if (!o->ops)
        return;
    if (o->m)
        o->ops->release(o->ops, o->m);
    if (o->v)
        o->ops->release(o->ops, o->v);
    o->m = o->v = NULL;
}
