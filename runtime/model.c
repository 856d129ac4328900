/* model.c - MLP / linear forward and backward over flat parameter buffers.
 *
 * Owns: the layer table, the params/grads buffers and the per-layer
 * activations (see model.h). Math only through struct ddpc_ops, so the same
 * code runs on the CPU and CUDA backends. Never communicates and never
 * allocates after model_init.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "ops_kernels.h"
#include "rng.h"

int model_init(struct ddpc_model *m, struct ddpc_ops *ops, const struct ddpc_job *job,
               int max_batch, struct ddpc_err *e)
{
    memset(m, 0, sizeof *m);
    m->ops = ops;
    int sizes = job->model.n_layers;
    if (sizes < 2 || sizes > DDPC_MAX_LAYERS)
        return DDPC_FAIL(e, DDPC_E_INVALID, "model.layers needs 2..%d sizes, got %d",
                         DDPC_MAX_LAYERS, sizes);
    if (job->model.type == DDPC_MODEL_LINEAR && sizes != 2)
        return DDPC_FAIL(e, DDPC_E_INVALID, "a linear model has exactly [in, out] sizes");
    if (max_batch <= 0)
        return DDPC_FAIL(e, DDPC_E_INVALID, "model: max_batch %d", max_batch);
    m->n_layers = sizes - 1;
    m->max_batch = max_batch;
    size_t off = 0;
    int width = 0;
    for (int l = 0; l < m->n_layers; l++) {
        struct ddpc_layer *L = &m->layer[l];
        L->in = job->model.layers[l];
        L->out = job->model.layers[l + 1];
        if (L->in <= 0 || L->out <= 0)
            return DDPC_FAIL(e, DDPC_E_INVALID, "model.layers[%d]: sizes must be positive", l);
        L->act = (l == m->n_layers - 1 || job->model.type == DDPC_MODEL_LINEAR)
                     ? DDPC_K_IDENTITY : (int)job->model.activation;
        L->w_off = off;
        off += (size_t)L->in * L->out;
        L->b_off = off;
        off += (size_t)L->out;
        if (L->in > width) width = L->in;
        if (L->out > width) width = L->out;
    }
    m->n_params = off;
    m->max_width = width;

    DDPC_TRY(ops->alloc(ops, (void **)&m->params, off * sizeof(float), e));
    DDPC_TRY(ops->alloc(ops, (void **)&m->grads, off * sizeof(float), e));
    for (int l = 0; l < m->n_layers; l++) {
        size_t bytes = (size_t)max_batch * m->layer[l].out * sizeof(float);
        DDPC_TRY(ops->alloc(ops, (void **)&m->z[l], bytes, e));
        if (m->layer[l].act == DDPC_K_IDENTITY)
            m->a[l] = m->z[l];
        else
            DDPC_TRY(ops->alloc(ops, (void **)&m->a[l], bytes, e));
    }
    for (int i = 0; i < 2; i++)
        DDPC_TRY(ops->alloc(ops, (void **)&m->dbuf[i],
                            (size_t)max_batch * width * sizeof(float), e));
    m->logits = m->a[m->n_layers - 1];
    return 0;
}

/* Draw order is fixed (W0, b0, W1, b1, ...), from one stream seeded by seed,
 * so every rank draws the same values before the broadcast makes it certain.
 *   pytorch:        W, b ~ U(-1/sqrt(in), 1/sqrt(in))   (nn.Linear default)
 *   xavier_uniform: W ~ U(-a, a), a = sqrt(6/(in+out));  b = 0
 *   kaiming_normal: W ~ N(0, 2/in) (relu gain, fan_in);  b = 0 */
int model_init_params(struct ddpc_model *m, enum ddpc_init init, uint64_t seed,
                      struct ddpc_err *e)
{
    float *host = malloc(m->n_params * sizeof *host);
    if (!host)
        return DDPC_FAIL(e, DDPC_E_NOMEM, "model: cannot allocate %zu parameters",
                         m->n_params);
    struct ddpc_rng r;
    rng_seed(&r, seed);
    for (int l = 0; l < m->n_layers; l++) {
        const struct ddpc_layer *L = &m->layer[l];
        float *w = host + L->w_off;   /* [out, in] */
        float *b = host + L->b_off;   /* [out] */
        size_t nw = (size_t)L->in * L->out;
        double fan_in = L->in, fan_out = L->out;
        switch (init) {
        case DDPC_INIT_XAVIER_UNIFORM: {
            double a = sqrt(6.0 / (fan_in + fan_out));
            for (size_t i = 0; i < nw; i++)
                w[i] = (float)((2.0 * rng_uniform(&r) - 1.0) * a);
            memset(b, 0, (size_t)L->out * sizeof *b);
            break;
        }
        case DDPC_INIT_KAIMING_NORMAL: {
            double sd = sqrt(2.0 / fan_in);
            for (size_t i = 0; i < nw; i++)
                w[i] = (float)(rng_normal(&r) * sd);
            memset(b, 0, (size_t)L->out * sizeof *b);
            break;
        }
        case DDPC_INIT_PYTORCH:
        default: {
            double a = 1.0 / sqrt(fan_in);
            for (size_t i = 0; i < nw; i++)
                w[i] = (float)((2.0 * rng_uniform(&r) - 1.0) * a);
            for (int i = 0; i < L->out; i++)
                b[i] = (float)((2.0 * rng_uniform(&r) - 1.0) * a);
            break;
        }
        }
    }
    int rc = m->ops->to_device(m->ops, m->params, host, m->n_params * sizeof *host, e);
    free(host);
    return rc;
}

int model_forward(struct ddpc_model *m, const float *x, int rows, struct ddpc_err *e)
{
    struct ddpc_ops *o = m->ops;
    if (rows > m->max_batch)
        return DDPC_FAIL(e, DDPC_E_INVALID, "model: batch of %d rows > max %d", rows,
                         m->max_batch);
    const float *in = x;   /* [rows, L->in] */
    for (int l = 0; l < m->n_layers; l++) {
        const struct ddpc_layer *L = &m->layer[l];
        /* Z[rows, out] = in[rows, in] . W[out, in]^T */
        DDPC_TRY(o->gemm(o, 0, 1, rows, L->out, L->in, 1.0f, in, L->in,
                         m->params + L->w_off, L->in, 0.0f, m->z[l], L->out, e));
        DDPC_TRY(o->bias_act_forward(o, m->z[l], m->params + L->b_off, m->a[l], rows,
                                     L->out, L->act, e));
        in = m->a[l];
    }
    return 0;
}

int model_backward(struct ddpc_model *m, const float *x, const float *dlogits, int rows,
                   int accumulate, ddpc_layer_done_fn done, void *ctx, struct ddpc_err *e)
{
    struct ddpc_ops *o = m->ops;
    float beta = accumulate ? 1.0f : 0.0f;
    const float *dz = dlogits;   /* [rows, out_l]: dLoss/dZ_l (output layer is identity) */
    int p = dlogits == m->dbuf[0] ? 1 : 0;   /* dbuf[p] is free to write */
    for (int l = m->n_layers - 1; l >= 0; l--) {
        const struct ddpc_layer *L = &m->layer[l];
        const float *in = l > 0 ? m->a[l - 1] : x;   /* [rows, in] */
        /* dW[out, in] (+)= dZ[rows, out]^T . in[rows, in] */
        DDPC_TRY(o->gemm(o, 1, 0, L->out, L->in, rows, 1.0f, dz, L->out, in, L->in, beta,
                         m->grads + L->w_off, L->in, e));
        DDPC_TRY(o->bias_grad(o, dz, m->grads + L->b_off, rows, L->out, beta, e));
        /* layer l's gradients are final: its bucket may start reducing while
         * the rest of backward runs (it never writes them again) */
        if (done)
            DDPC_TRY(done(ctx, l, e));
        if (l > 0) {
            /* dA_{l-1}[rows, in] = dZ[rows, out] . W[out, in]; then dZ_{l-1} in place */
            float *da = m->dbuf[p];
            DDPC_TRY(o->gemm(o, 0, 0, rows, L->in, L->out, 1.0f, dz, L->out,
                             m->params + L->w_off, L->in, 0.0f, da, L->in, e));
            DDPC_TRY(o->act_backward(o, m->z[l - 1], da, da, (size_t)rows * L->in,
                                     m->layer[l - 1].act, e));
            dz = da;
            p ^= 1;
        }
    }
    return 0;
}

void model_borrow_grads(struct ddpc_model *m, float *buf)
{
    if (m->grads && !m->grads_borrowed)
        m->ops->release(m->ops, m->grads);
    m->grads = buf;
    m->grads_borrowed = 1;
}

void model_borrow_params(struct ddpc_model *m, float *buf)
{
    if (m->params && !m->params_borrowed)
        m->ops->release(m->ops, m->params);
    m->params = buf;
    m->params_borrowed = 1;
}

void model_free(struct ddpc_model *m)
{
    struct ddpc_ops *o = m->ops;
    if (!o)
        return;
    for (int l = 0; l < DDPC_MAX_LAYERS; l++) {
        if (m->a[l] && m->a[l] != m->z[l])
            o->release(o, m->a[l]);
        if (m->z[l])
            o->release(o, m->z[l]);
        m->a[l] = m->z[l] = NULL;
    }
    for (int i = 0; i < 2; i++) {
        if (m->dbuf[i])
            o->release(o, m->dbuf[i]);
        m->dbuf[i] = NULL;
    }
    if (m->params && !m->params_borrowed)
        o->release(o, m->params);
    if (m->grads && !m->grads_borrowed)
        o->release(o, m->grads);
    m->params = m->grads = NULL;
    m->logits = NULL;
}
