/* optim.c - LR schedule, clipping factor and optimizer state over flat buffers.
 *
 * Owns: the moment buffers, the step counter and the weight-decay ranges
 * (see optim.h). The
 * per-element arithmetic is ddpc_k_sgd / ddpc_k_adam in ops_kernels.h, run by
 * the backend's optim_step in one fused pass. Never communicates.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "optim.h"
#include "ops_kernels.h"

/* The parameter tensors of net in buffer order, each decayed or not, merged
 * where neighbours agree. They must tile [0, n): a gap or an overlap would
 * leave parameters unupdated or update them twice. */
static int ranges_build(struct ddpc_optim *o, const struct ddpc_net *net, int only_weights,
                        struct ddpc_err *e)
{
    int cap = net ? net->n_tensors + 1 : 1;
    o->range = calloc((size_t)cap, sizeof *o->range);
    if (!o->range)
        return DDPC_FAIL(e, DDPC_E_NOMEM, "optimizer ranges: out of memory");
    o->n_ranges = 0;
    if (!net) {
        o->range[0] = (struct ddpc_optim_range){ 0, o->n, 1 };
        o->n_ranges = 1;
        return 0;
    }
    size_t at = 0;
    while (at < o->n) {
        /* the parameter tensor that starts at `at` (tensors are few, at
         * most a few hundred: a scan per tensor is fine) */
        const struct ddpc_tensor *t = NULL;
        for (int i = 0; i < net->n_tensors && !t; i++)
            if (net->tensor[i].kind == DDPC_TENSOR_PARAM && net->tensor[i].off == at &&
                net->tensor[i].numel > 0)
                t = &net->tensor[i];
        if (!t)
            return DDPC_FAIL(e, DDPC_E_INVALID, "no parameter tensor starts at element %zu "
                             "of %zu: the tensor list does not tile the parameters", at, o->n);
        int decay = !only_weights || t->nd >= 2;
        struct ddpc_optim_range *last = o->n_ranges ? &o->range[o->n_ranges - 1] : NULL;
        if (last && last->decay == decay) {
            last->hi = at + t->numel;
        } else {
            if (o->n_ranges == cap)
                return DDPC_FAIL(e, DDPC_E_INVALID, "parameter tensors overlap");
            o->range[o->n_ranges++] = (struct ddpc_optim_range){ at, at + t->numel, decay };
        }
        at += t->numel;
    }
    if (at != o->n)
        return DDPC_FAIL(e, DDPC_E_INVALID, "parameter tensors end at %zu, the buffer at %zu",
                         at, o->n);
    return 0;
}

int optim_init(struct ddpc_optim *o, struct ddpc_ops *ops, const struct ddpc_job *job,
               const struct ddpc_net *net, int world, size_t n, int64_t total_steps,
               struct ddpc_err *e)
{
    memset(o, 0, sizeof *o);
    o->ops = ops;
    o->job = job;
    o->n = n;
    o->total_steps = total_steps;
    o->base_lr = job->learning_rate * ddpc_job_lr_factor(job, job->lr_scaling, world);
    DDPC_TRY(ranges_build(o, net, job->optimizer.weight_decay_on == DDPC_WD_ON_WEIGHTS, e));
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

int optim_update(struct ddpc_optim *o, float *params, const float *grads, size_t lo,
                 size_t hi, float grad_scale, struct ddpc_err *e)
{
    const struct ddpc_job *j = o->job;
    long t = o->step + o->t_ahead + 1;   /* 1-based, like torch's state['step'] */
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
    if (hi > o->n || lo > hi)
        return DDPC_FAIL(e, DDPC_E_INVALID, "optimizer update of [%zu, %zu) outside [0, %zu)",
                         lo, hi, o->n);
    for (int k = 0; k < o->n_ranges; k++) {
        size_t a = o->range[k].lo > lo ? o->range[k].lo : lo;
        size_t b = o->range[k].hi < hi ? o->range[k].hi : hi;
        if (a >= b)
            continue;
        /* a group without decay: torch's weight_decay 0 (adamw's factor 1) */
        s.weight_decay = o->range[k].decay ? (float)j->optimizer.weight_decay : 0.0f;
        s.decay = o->range[k].decay ? (float)(1.0 - lr * j->optimizer.weight_decay) : 1.0f;
        DDPC_TRY(o->ops->optim_step(o->ops, &s, params + a, grads + a, o->m ? o->m + a : NULL,
                                    o->v ? o->v + a : NULL, b - a, e));
    }
    return 0;
}

int optim_step(struct ddpc_optim *o, float *params, const float *grads, float grad_scale,
               struct ddpc_err *e)
{
    DDPC_TRY(optim_update(o, params, grads, 0, o->n, grad_scale, e));
    o->step++;
    return 0;
}

void optim_free(struct ddpc_optim *o)
{
    free(o->range);
    o->range = NULL;
    o->n_ranges = 0;
    if (!o->ops)
        return;
    if (o->m)
        o->ops->release(o->ops, o->m);
    if (o->v)
        o->ops->release(o->ops, o->v);
    o->m = o->v = NULL;
}
