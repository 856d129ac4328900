/* model.c - forward and backward of a layer list over flat parameter buffers.
 *
 * Owns: the node buffers (outputs, their gradients, pooling argmaxes, norm
 * statistics, the im2col scratch), parameter init, and each layer type's
 * forward and backward as calls to struct ddpc_ops (gemm, bias_act_forward,
 * act_backward, bias_grad, layer_kernel), so the same code runs on the CPU
 * and CUDA backends. Never communicates and never allocates after
 * model_init. See model.h for the contract and layers.h for the layout.
 *
 * Backward walks the nodes in reverse; a node's input gradient goes into
 * its source's g buffer, overwriting on the first write of this backward
 * and adding on later ones (a residual's input receives its skip and its
 * body's gradient), so no buffer needs zeroing.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "model.h"
#include "ops_kernels.h"
#include "rng.h"

static int act_id(int type, const struct ddpc_layer_item *it)
{
    switch (type) {
    case DDPC_LAYER_RELU:       return DDPC_K_RELU;
    case DDPC_LAYER_GELU:       return it->approximate == DDPC_GELU_TANH ? DDPC_K_GELU_TANH
                                                                         : DDPC_K_GELU;
    case DDPC_LAYER_TANH:       return DDPC_K_TANH;
    case DDPC_LAYER_SIGMOID:    return DDPC_K_SIGMOID;
    case DDPC_LAYER_LEAKY_RELU: return DDPC_K_LEAKY_RELU;
    case DDPC_LAYER_SILU:       return DDPC_K_SILU;
    default:                    return -1;
    }
}

/* How many nodes read node k's output: as their input, or as a residual's
 * skip. */
static int readers_of(const struct ddpc_net *net, int k)
{
    int readers = 0;
    for (int q = 0; q < net->n; q++)
        readers += (net->node[q].src == k) +
                   (net->node[q].it.type == DDPC_LAYER_RESIDUAL && net->node[q].skip == k);
    return readers;
}

int model_init(struct ddpc_model *m, struct ddpc_ops *ops, const struct ddpc_job *job,
               int max_batch, struct ddpc_err *e)
{
    memset(m, 0, sizeof *m);
    m->ops = ops;
    if (max_batch <= 0)
        return DDPC_FAIL(e, DDPC_E_INVALID, "model: max_batch %d", max_batch);
    if (job->model.type == DDPC_MODEL_SEQUENTIAL && job->model.n_input < 1)
        return DDPC_FAIL(e, DDPC_E_INVALID, "model.input is unknown (the job was built with "
                         "--no-data); set model.input in the spec and build again");
    char why[512];
    int bad;
    if (layers_build(job, NULL, &m->net, &bad, why, sizeof why) < 0) {
        if (bad >= 0)
            return DDPC_FAIL(e, DDPC_E_INVALID, "model.layers[item %d]: %s", bad, why);
        return DDPC_FAIL(e, DDPC_E_INVALID, "%s", why);
    }
    if (!ops->layer_kernel && job->model.type == DDPC_MODEL_SEQUENTIAL)
        return DDPC_FAIL(e, DDPC_E_INVALID, "backend %s has no layer kernels", ops->name);
    struct ddpc_net *net = &m->net;
    if (job->model.type == DDPC_MODEL_GPT && (!ops->layer_kernel || !ops->gemm_batched))
        return DDPC_FAIL(e, DDPC_E_INVALID, "backend %s has no attention kernels", ops->name);
    m->max_batch = max_batch;
    m->n_params = net->n_params;
    m->n_state = net->n_state;
    size_t B = (size_t)max_batch;
    DDPC_TRY(ops->alloc(ops, (void **)&m->params, (m->n_params ? m->n_params : 1) * sizeof(float), e));
    DDPC_TRY(ops->alloc(ops, (void **)&m->grads, (m->n_params ? m->n_params : 1) * sizeof(float), e));
    if (m->n_state)
        DDPC_TRY(ops->alloc(ops, (void **)&m->state, m->n_state * sizeof(float), e));
    /* a ReLU read by one max pooling and nothing else (not a residual's
     * skip): the pooling's backward takes the ReLU's, as the pooled value
     * at the argmax is the ReLU's output there */
    for (int k = 0; k < net->n; k++) {
        int r = net->node[k].src;
        if (net->node[k].it.type != DDPC_LAYER_MAXPOOL2D || r < 0 ||
            net->node[r].it.type != DDPC_LAYER_RELU || net->node[r].src < 0)
            continue;
        m->relu_in_pool[r] = readers_of(net, r) == 1;
    }
    /* a conv2d whose only reader is such a ReLU, fused with it: its
     * output goes to the ReLU's buffer (bias and ReLU in place there) */
    for (int k = 0; k + 1 < net->n; k++) {
        if (net->node[k].it.type != DDPC_LAYER_CONV2D || !m->relu_in_pool[k + 1] ||
            net->node[k + 1].src != k || !net->node[k].b_numel)
            continue;
        m->out_in_relu[k] = readers_of(net, k) == 1;
    }
    for (int k = 0; k < net->n; k++) {
        const struct ddpc_lnode *L = &net->node[k];
        size_t bytes = B * (size_t)L->out_numel * sizeof(float);
        if (!m->out_in_relu[k])
            DDPC_TRY(ops->alloc(ops, (void **)&m->y[k], bytes, e));
        DDPC_TRY(ops->alloc(ops, (void **)&m->g[k], bytes, e));
        if (L->it.type == DDPC_LAYER_MAXPOOL2D)
            DDPC_TRY(ops->alloc(ops, (void **)&m->idx[k], B * (size_t)L->out_numel * sizeof(int32_t), e));
        if (L->it.type == DDPC_LAYER_BATCHNORM1D || L->it.type == DDPC_LAYER_BATCHNORM2D)
            DDPC_TRY(ops->alloc(ops, (void **)&m->stat[k], 4 * (size_t)L->channels * sizeof(float), e));
        if (L->it.type == DDPC_LAYER_LAYERNORM)
            DDPC_TRY(ops->alloc(ops, (void **)&m->stat[k], 2 * B * (size_t)L->rows * sizeof(float), e));
        int64_t scratch = L->scratch_floats;
        if (L->it.type == DDPC_LAYER_ATTENTION) {   /* probabilities, or log-sum-exps */
            int64_t kept;
            attn_floats(ops, L->rows, L->channels, L->it.heads, (float)L->it.p, &kept,
                        &scratch);
            DDPC_TRY(ops->alloc(ops, (void **)&m->stat[k], B * (size_t)kept * sizeof(float), e));
        }
        if (scratch > m->scratch_floats)
            m->scratch_floats = scratch;
        if (L->tie >= 0)
            m->tied[L->tie] = 1;
        /* linear + a plain activation: one fused pass (the MLP's hot path);
         * conv2d + any activation: bias and activation in one pass */
        if (L->b_numel && k + 1 < net->n && net->node[k + 1].src == k) {
            int a = act_id(net->node[k + 1].it.type, &net->node[k + 1].it);
            if (L->it.type == DDPC_LAYER_LINEAR)
                m->fused[k] = a >= DDPC_K_RELU && a <= DDPC_K_SIGMOID;
            else if (L->it.type == DDPC_LAYER_CONV2D)
                m->fused[k] = a >= 0;
        }
    }
    if (m->scratch_floats)
        DDPC_TRY(ops->alloc(ops, (void **)&m->col, B * (size_t)m->scratch_floats * sizeof(float), e));
    size_t plane = 0;
    for (int k = 0; k < net->n; k++)
        if (net->node[k].it.type == DDPC_LAYER_CONV2D &&
            (size_t)net->node[k].in.d[1] * net->node[k].in.d[2] > plane)
            plane = (size_t)net->node[k].in.d[1] * net->node[k].in.d[2];
    if (plane)
        DDPC_TRY(ops->alloc(ops, (void **)&m->ws, plane * sizeof(float), e));
    m->logits = m->y[net->n - 1];
    m->dbuf[0] = m->g[net->n - 1];
    m->training = 1;
    return 0;
}

/* nanoGPT's init (GPT._init_weights and its c_proj rule), drawn in node
 * order from r: wte, wpe, then each linear's weight ~ N(0, 0.02), the
 * residual projections (attn.c_proj, mlp.c_proj) ~ N(0, 0.02 /
 * sqrt(2 n_layer)); biases 0; layer norms weight 1, bias 0. The tied
 * lm_head draws nothing (its weight is wte). */
static void gpt_init(const struct ddpc_net *net, float *host, struct ddpc_rng *r)
{
    int n_layer = 0;
    for (int k = 0; k < net->n; k++)
        n_layer += net->node[k].it.type == DDPC_LAYER_ATTENTION;
    for (int k = 0; k < net->n; k++) {
        const struct ddpc_lnode *L = &net->node[k];
        float *w = host + L->w_off;
        size_t nw = L->w_numel, nb = L->b_numel;
        double sd = 0.02;
        switch (L->it.type) {
        case DDPC_LAYER_LAYERNORM:
            for (size_t i = 0; i < nw; i++)
                w[i] = 1.0f;
            break;
        case DDPC_LAYER_LINEAR:
            if (L->tie >= 0)
                break;
            nb = 0;   /* biases stay 0 */
            if (strlen(L->name) >= 6 && !strcmp(L->name + strlen(L->name) - 6, "c_proj"))
                sd = 0.02 / sqrt(2.0 * n_layer);
            /* fall through */
        case DDPC_LAYER_EMBEDDING:   /* wte, then wpe (its "bias") */
            for (size_t i = 0; i < nw; i++)
                w[i] = (float)(rng_normal(r) * sd);
            for (size_t i = 0; i < nb; i++)
                host[L->b_off + i] = (float)(rng_normal(r) * sd);
            break;
        default:
            break;
        }
    }
}

/* Draw order is fixed (node order; weight, then bias), from one stream
 * seeded by seed, so every rank draws the same values before the broadcast
 * makes it certain. For linear and conv2d, fan_in = in_features or
 * in_channels x k x k, fan_out = out x k x k:
 *   pytorch:        W, b ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in))   (PyTorch's defaults)
 *   xavier_uniform: W ~ U(-a, a), a = sqrt(6/(fan_in+fan_out));  b = 0
 *   kaiming_normal: W ~ N(0, 2/fan_in) (relu gain);  b = 0
 * Norm layers: weight 1, bias 0; running mean 0, variance 1, count 0. */
int model_init_params(struct ddpc_model *m, enum ddpc_init init, uint64_t seed,
                      struct ddpc_err *e)
{
    size_t np = m->n_params ? m->n_params : 1;
    float *host = calloc(np + m->n_state, sizeof *host);
    if (!host)
        return DDPC_FAIL(e, DDPC_E_NOMEM, "model: cannot allocate %zu parameters",
                         m->n_params);
    float *st = host + np;
    struct ddpc_rng r;
    rng_seed(&r, seed);
    if (m->net.node[0].it.type == DDPC_LAYER_EMBEDDING) {
        gpt_init(&m->net, host, &r);
        goto copy;
    }
    for (int k = 0; k < m->net.n; k++) {
        const struct ddpc_lnode *L = &m->net.node[k];
        float *w = host + L->w_off, *b = host + L->b_off;
        int t = L->it.type;
        if (t == DDPC_LAYER_BATCHNORM1D || t == DDPC_LAYER_BATCHNORM2D ||
            t == DDPC_LAYER_LAYERNORM) {
            for (size_t i = 0; i < L->w_numel; i++)
                w[i] = 1.0f;
            if (t != DDPC_LAYER_LAYERNORM)
                for (int c = 0; c < L->channels; c++)
                    st[L->s_off + (size_t)L->channels + (size_t)c] = 1.0f;
            continue;
        }
        if (!L->w_numel)
            continue;
        size_t nw = L->w_numel;
        double ksz = t == DDPC_LAYER_CONV2D ? (double)L->it.kernel_size * L->it.kernel_size : 1;
        double fan_in = (double)nw / L->it.out, fan_out = L->it.out * ksz;
        switch (init) {
        case DDPC_INIT_XAVIER_UNIFORM: {
            double a = sqrt(6.0 / (fan_in + fan_out));
            for (size_t i = 0; i < nw; i++)
                w[i] = (float)((2.0 * rng_uniform(&r) - 1.0) * a);
            break;
        }
        case DDPC_INIT_KAIMING_NORMAL: {
            double sd = sqrt(2.0 / fan_in);
            for (size_t i = 0; i < nw; i++)
                w[i] = (float)(rng_normal(&r) * sd);
            break;
        }
        case DDPC_INIT_PYTORCH:
        default: {
            double a = 1.0 / sqrt(fan_in);
            for (size_t i = 0; i < nw; i++)
                w[i] = (float)((2.0 * rng_uniform(&r) - 1.0) * a);
            for (size_t i = 0; i < L->b_numel; i++)
                b[i] = (float)((2.0 * rng_uniform(&r) - 1.0) * a);
            break;
        }
        }
    }
copy:;
    int rc = m->ops->to_device(m->ops, m->params, host, m->n_params * sizeof *host, e);
    if (rc == 0 && m->n_state)
        rc = m->ops->to_device(m->ops, m->state, st, m->n_state * sizeof *host, e);
    free(host);
    return rc;
}

void model_set_mode(struct ddpc_model *m, int training, uint64_t seed)
{
    m->training = training;
    m->drop_seed = seed;
}

uint64_t model_dropout_seed(const struct ddpc_model *m, int k)
{
    return m->drop_seed ^ (0xD1B54A32D192ED03ull * (uint64_t)(k + 1));
}

static int lk(struct ddpc_ops *o, int kind, size_t n, const struct ddpc_lk *a, struct ddpc_err *e)
{
    return o->layer_kernel(o, kind, n, a, e);
}

/* dst = src (copy through the accumulate kernel with accx 0) */
static int copy_f(struct ddpc_ops *o, float *dst, const float *src, size_t n, int acc,
                  struct ddpc_err *e)
{
    struct ddpc_lk a;
    memset(&a, 0, sizeof a);
    a.dy = src;
    a.dx = dst;
    a.accx = acc;
    return lk(o, DDPC_LK_ACCUM, n, &a, e);
}

/* Node k's attention shapes for a batch of rows samples. */
static struct ddpc_attn attn_of(const struct ddpc_model *m, int k, int rows)
{
    const struct ddpc_lnode *L = &m->net.node[k];
    struct ddpc_attn at = { .B = rows, .T = L->rows, .C = L->channels, .heads = L->it.heads,
                            .p = (float)L->it.p, .training = m->training,
                            .seed = model_dropout_seed(m, k) };
    return at;
}

/* Whether convolution node L, given `in` input channels, can take the
 * backend's 3 x 3 path: 3 x 3, stride 1, padding 1, and WINO_MIN_IN input
 * channels or more, below which its 16 gemms would be too shallow to gain
 * (a guess: measured only on the CNN's second layer, 32 channels in
 * forward and 64 in the input gradient; its first layer has 1). */
enum { WINO_MIN_IN = 16 };
static int conv3x3_fits(const struct ddpc_lnode *L, int in)
{
    return L->it.kernel_size == 3 && L->it.stride == 1 && L->it.padding == 1 &&
           in >= WINO_MIN_IN;
}

/* Its scratch: m->col, sized for im2col (the path it replaces). */
static size_t conv3x3_scratch(const struct ddpc_model *m)
{
    return (size_t)m->max_batch * (size_t)m->scratch_floats;
}

/* The backend's fast 3 x 3 convolution (ops.conv3x3) for node k, y (+)=
 * conv(x) over rows samples, or 1 where it does not apply (no such backend
 * function, conv3x3_fits says no, too little scratch): the caller's im2col
 * path then. flip: the input gradient (x = dy, y = dx). bias_relu: the
 * layer's bias and ReLU too (forward only). */
static int conv3x3_try(struct ddpc_model *m, int k, const float *x, float *y, int rows, int flip,
                       int acc, int bias_relu, struct ddpc_err *e)
{
    struct ddpc_ops *o = m->ops;
    const struct ddpc_lnode *L = &m->net.node[k];
    int in = flip ? L->it.out : L->channels, out = flip ? L->channels : L->it.out;
    if (!o->conv3x3 || !conv3x3_fits(L, in))
        return 1;
    return o->conv3x3(o, x, m->params + L->w_off, y, rows, in, out, L->in.d[1], L->in.d[2], flip,
                      acc, bias_relu ? m->params + L->b_off : NULL, bias_relu, m->col,
                      conv3x3_scratch(m), e);
}

/* The backend's weight gradient of that convolution (ops.conv3x3_wgrad),
 * dW (+)= over rows samples of input x and output gradient dy, or 1 where
 * it does not apply (as conv3x3_try). */
static int conv3x3_wgrad_try(struct ddpc_model *m, int k, const float *x, const float *dy,
                             int rows, int acc, struct ddpc_err *e)
{
    struct ddpc_ops *o = m->ops;
    const struct ddpc_lnode *L = &m->net.node[k];
    if (!o->conv3x3_wgrad || !conv3x3_fits(L, L->channels))
        return 1;
    return o->conv3x3_wgrad(o, x, dy, m->grads + L->w_off, rows, L->channels, L->it.out,
                            L->in.d[1], L->in.d[2], acc, m->col, conv3x3_scratch(m), e);
}

/* Whether convolution node k's bias gradient is computed by the pooling's
 * backward as it writes k's output gradient (ops.pool2_bias_backward): a
 * conv2d computed in its ReLU's buffer (out_in_relu), on a backend that
 * can. */
static int bias_in_pool(const struct ddpc_model *m, int k)
{
    return m->out_in_relu[k] && m->ops->pool2_bias_backward;
}

/* Convolution node k's bias gradient from its output gradient dy, over
 * rows samples (beta: add). */
static int conv_bias_grad(struct ddpc_model *m, int k, const float *dy, int rows, float beta,
                          struct ddpc_err *e)
{
    const struct ddpc_lnode *L = &m->net.node[k];
    struct ddpc_lk b;
    memset(&b, 0, sizeof b);
    b.dy = dy;
    b.db = m->grads + L->b_off;
    b.N = rows;
    b.C = L->it.out;
    b.H = L->out.d[1] * L->out.d[2];
    b.accg = beta != 0.0f;
    return lk(m->ops, DDPC_LK_CHAN_BIAS_GRAD, (size_t)b.C, &b, e);
}

static int node_forward(struct ddpc_model *m, int k, const float *x, int rows,
                        struct ddpc_err *e)
{
    struct ddpc_ops *o = m->ops;
    const struct ddpc_lnode *L = &m->net.node[k];
    const struct ddpc_layer_item *it = &L->it;
    const float *in = L->src < 0 ? x : m->y[L->src];
    float *y = m->out_in_relu[k] ? m->y[k + 1] : m->y[k];   /* out_in_relu: in place there */
    size_t n_out = (size_t)rows * (size_t)L->out_numel;
    struct ddpc_lk a;
    memset(&a, 0, sizeof a);
    a.x = in;
    a.y = y;
    a.N = rows;
    a.C = L->channels;
    a.H = L->spatial;
    int act = act_id(it->type, it);
    if (act >= 0) {
        if (k > 0 && m->fused[k - 1] && L->src == k - 1)
            return 0;   /* computed with the linear or conv2d layer before it */
        a.act = act;
        a.f0 = (float)it->negative_slope;
        return lk(o, DDPC_LK_ACT_FWD, n_out, &a, e);
    }
    switch (it->type) {
    case DDPC_LAYER_LINEAR: {
        int R = rows * L->rows, in_f = L->channels, out_f = it->out;
        DDPC_TRY(o->gemm(o, 0, 1, R, out_f, in_f, 1.0f, in, in_f, m->params + L->w_off, in_f,
                         0.0f, y, out_f, e));
        if (m->fused[k])
            return o->bias_act_forward(o, y, m->params + L->b_off, m->y[k + 1], R, out_f,
                                       act_id(m->net.node[k + 1].it.type, &m->net.node[k + 1].it),
                                       e);
        if (L->b_numel)
            return o->bias_act_forward(o, y, m->params + L->b_off, y, R, out_f, DDPC_K_IDENTITY, e);
        return 0;
    }
    case DDPC_LAYER_CONV2D: {
        int C = L->channels, K = it->kernel_size, OH = L->out.d[1], OW = L->out.d[2];
        size_t ckk = (size_t)C * K * K, ohw = (size_t)OH * OW;
        a.C = C; a.H = L->in.d[1]; a.W = L->in.d[2]; a.OH = OH; a.OW = OW;
        a.K = K; a.S = it->stride; a.P = it->padding;
        size_t in_numel = (size_t)L->in_numel, out_numel = (size_t)L->out_numel;
        const struct ddpc_layer_item *next = m->fused[k] ? &m->net.node[k + 1].it : NULL;
        struct ddpc_lk b;
        memset(&b, 0, sizeof b);
        b.w = m->params + L->b_off;
        b.C = it->out;
        b.H = (int)ohw;
        b.act = next ? act_id(next->type, next) : 0;
        b.f0 = next ? (float)next->negative_slope : 0.0f;
        /* chunks of conv_rows samples (all of them where the backend says
         * 0): im2col, the per-sample gemms and the bias (+ activation) of
         * one chunk run back to back, so its columns and outputs are still
         * in cache; the same operations on the same values as one pass
         * per stage, so the same bits */
        int chunk = o->conv_rows > 0 && o->conv_rows < rows ? o->conv_rows : rows;
        /* in place in the ReLU's buffer: the 3 x 3 path's output pass adds
         * the bias and applies the ReLU, as the pass below would */
        int bias_relu = m->out_in_relu[k];
        int by_im2col = conv3x3_try(m, k, in, y, rows, 0, 0, bias_relu, e);
        if (by_im2col < 0)
            return by_im2col;
        if (!by_im2col && bias_relu)
            return 0;
        for (int s0 = 0; s0 < rows; s0 += chunk) {
            int n = rows - s0 < chunk ? rows - s0 : chunk;
            a.x = in + (size_t)s0 * in_numel;
            a.y = m->col;
            a.N = n;
            if (by_im2col)
                DDPC_TRY(lk(o, DDPC_LK_IM2COL, (size_t)n * ckk * ohw, &a, e));
            for (int s = 0; s < n && by_im2col; s++)
                DDPC_TRY(o->gemm(o, 0, 0, it->out, (int)ohw, (int)ckk, 1.0f,
                                 m->params + L->w_off, (int)ckk, m->col + (size_t)s * ckk * ohw,
                                 (int)ohw, 0.0f, y + (size_t)(s0 + s) * out_numel, (int)ohw, e));
            if (!L->b_numel)
                continue;
            b.y = y + (size_t)s0 * out_numel;
            if (!next) {
                DDPC_TRY(lk(o, DDPC_LK_CHAN_BIAS, (size_t)n * out_numel, &b, e));
                continue;
            }
            b.t = m->y[k + 1] + (size_t)s0 * out_numel;
            DDPC_TRY(lk(o, DDPC_LK_CHAN_BIAS_ACT, (size_t)n * out_numel, &b, e));
        }
        return 0;
    }
    case DDPC_LAYER_MAXPOOL2D:
    case DDPC_LAYER_AVGPOOL2D:
        a.H = L->in.d[1]; a.W = L->in.d[2]; a.OH = L->out.d[1]; a.OW = L->out.d[2];
        a.K = it->kernel_size; a.S = it->stride; a.P = it->padding;
        a.act = it->type == DDPC_LAYER_MAXPOOL2D ? 0 : 1;
        a.idx = m->idx[k];
        return lk(o, DDPC_LK_POOL_FWD, n_out, &a, e);
    case DDPC_LAYER_ADAPTIVEAVGPOOL2D:
        return lk(o, DDPC_LK_GAP_FWD, n_out, &a, e);
    case DDPC_LAYER_BATCHNORM1D:
    case DDPC_LAYER_BATCHNORM2D:
        a.s0 = m->stat[k];
        a.s1 = m->stat[k] + L->channels;
        a.rs = m->state + L->s_off;
        a.training = m->training;
        a.f1 = (float)it->momentum;
        a.f2 = (float)it->eps;
        a.w = m->params + L->w_off;
        a.b = m->params + L->b_off;
        DDPC_TRY(lk(o, DDPC_LK_BN_STATS, (size_t)L->channels, &a, e));
        return lk(o, DDPC_LK_BN_FWD, n_out, &a, e);
    case DDPC_LAYER_LAYERNORM: {
        size_t R = (size_t)rows * L->rows;
        a.s0 = m->stat[k];
        a.s1 = m->stat[k] + (size_t)m->max_batch * L->rows;
        a.f2 = (float)it->eps;
        a.w = m->params + L->w_off;
        a.b = L->b_numel ? m->params + L->b_off : NULL;
        return lk(o, DDPC_LK_LN_FWD, R, &a, e);
    }
    case DDPC_LAYER_EMBEDDING:
        a.w = m->params + L->w_off;
        a.b = m->params + L->b_off;
        a.T = L->rows;
        a.V = it->in;
        return lk(o, DDPC_LK_EMB_FWD, n_out, &a, e);
    case DDPC_LAYER_ATTENTION: {
        struct ddpc_attn at = attn_of(m, k, rows);
        return attn_forward(o, &at, in, m->stat[k], y, m->col, e);
    }
    case DDPC_LAYER_DROPOUT:
        if (!m->training || it->p <= 0.0)
            return copy_f(o, y, in, n_out, 0, e);
        a.f0 = (float)it->p;
        a.f1 = (float)(1.0 / (1.0 - it->p));
        a.seed = model_dropout_seed(m, k);
        return lk(o, DDPC_LK_DROPOUT_FWD, n_out, &a, e);
    case DDPC_LAYER_FLATTEN:
        return copy_f(o, y, in, n_out, 0, e);
    case DDPC_LAYER_RESIDUAL:
        a.aux = L->skip < 0 ? x : m->y[L->skip];
        return lk(o, DDPC_LK_ADD, n_out, &a, e);
    default:
        return DDPC_FAIL(e, DDPC_E_INVALID, "model: node %d has unknown type %d", k, (int)it->type);
    }
}

int model_forward(struct ddpc_model *m, const float *x, int rows, struct ddpc_err *e)
{
    if (rows > m->max_batch)
        return DDPC_FAIL(e, DDPC_E_INVALID, "model: batch of %d rows > max %d", rows,
                         m->max_batch);
    for (int k = 0; k < m->net.n; k++)
        DDPC_TRY(node_forward(m, k, x, rows, e));
    return 0;
}

/* Node k's backward: parameter gradients (beta: accumulate) and, when its
 * source is a node, the input gradient into that node's g (written[] says
 * whether this backward wrote it already). Long on purpose (~160 lines):
 * one switch with a short case per layer type, each the mirror of its case
 * in node_forward; a function per case would pass the same six arguments
 * and hide that symmetry. */
static int node_backward(struct ddpc_model *m, int k, const float *x, int rows, float beta,
                         int *written, struct ddpc_err *e)
{
    struct ddpc_ops *o = m->ops;
    const struct ddpc_lnode *L = &m->net.node[k];
    const struct ddpc_layer_item *it = &L->it;
    const float *in = L->src < 0 ? x : m->y[L->src];
    const float *dy = m->g[k];
    int want_dx = L->src >= 0;
    float *dx = want_dx ? m->g[L->src] : NULL;
    int accx = want_dx && written[L->src];
    size_t n_out = (size_t)rows * (size_t)L->out_numel, n_in = (size_t)rows * (size_t)L->in_numel;
    struct ddpc_lk a;
    memset(&a, 0, sizeof a);
    a.x = in;
    a.dy = dy;
    a.dx = dx;
    a.accx = accx;
    a.accg = beta != 0.0f;
    a.N = rows;
    a.C = L->channels;
    a.H = L->spatial;
    int act = act_id(it->type, it);
    int rc = 0;
    if (act >= 0) {
        if (m->relu_in_pool[k])
            return 0;   /* done by the pooling's backward, which wrote g[src] */
        if (want_dx) {
            if (!accx && act <= DDPC_K_SIGMOID)
                rc = o->act_backward(o, in, dy, dx, n_out, act, e);
            else {
                a.act = act;
                a.f0 = (float)it->negative_slope;
                rc = lk(o, DDPC_LK_ACT_BWD, n_out, &a, e);
            }
        }
        goto out;
    }
    switch (it->type) {
    case DDPC_LAYER_LINEAR: {
        int R = rows * L->rows, in_f = L->channels, out_f = it->out;
        /* dW[out, in] (+)= dY[R, out]^T . X[R, in] */
        DDPC_TRY(o->gemm(o, 1, 0, out_f, in_f, R, 1.0f, dy, out_f, in, in_f, beta,
                         m->grads + L->w_off, in_f, e));
        if (L->b_numel)
            DDPC_TRY(o->bias_grad(o, dy, m->grads + L->b_off, R, out_f, beta, e));
        if (want_dx)
            rc = o->gemm(o, 0, 0, R, in_f, out_f, 1.0f, dy, out_f, m->params + L->w_off, in_f,
                         accx ? 1.0f : 0.0f, dx, in_f, e);
        break;
    }
    case DDPC_LAYER_CONV2D: {
        int C = L->channels, K = it->kernel_size, OH = L->out.d[1], OW = L->out.d[2];
        int OC = it->out;
        size_t ckk = (size_t)C * K * K, ohw = (size_t)OH * OW;
        a.H = L->in.d[1]; a.W = L->in.d[2]; a.OH = OH; a.OW = OW;
        a.K = K; a.S = it->stride; a.P = it->padding;
        size_t in_numel = (size_t)L->in_numel;
        /* in chunks, as the forward (same operations in the same order per
         * sample: im2col, dW, dcol in place of col, col2im) */
        int chunk = o->conv_rows > 0 && o->conv_rows < rows ? o->conv_rows : rows;
        /* the input gradient (dx = conv3x3(dy, W flipped)) and the weight
         * gradient where the backend's 3 x 3 convolution takes them; the
         * im2col loop for what it does not */
        int dcol = want_dx ? conv3x3_try(m, k, dy, dx, rows, 1, accx, 0, e) : 0;
        if (dcol < 0)
            return dcol;
        int dw_by_im2col = conv3x3_wgrad_try(m, k, in, dy, rows, beta != 0.0f, e);
        if (dw_by_im2col < 0)
            return dw_by_im2col;
        for (int s0 = 0; s0 < rows && (dcol || dw_by_im2col); s0 += chunk) {
            int n = rows - s0 < chunk ? rows - s0 : chunk;
            a.x = in + (size_t)s0 * in_numel;
            a.y = m->col;
            a.N = n;
            DDPC_TRY(lk(o, DDPC_LK_IM2COL, (size_t)n * ckk * ohw, &a, e));
            for (int s = 0; s < n; s++) {
                float *col = m->col + (size_t)s * ckk * ohw;
                const float *dys = dy + (size_t)(s0 + s) * OC * ohw;
                /* dW[OC, ckk] (+)= dY_s[OC, ohw] . col_s[ckk, ohw]^T */
                if (dw_by_im2col)
                    DDPC_TRY(o->gemm(o, 0, 1, OC, (int)ckk, (int)ohw, 1.0f, dys, (int)ohw,
                                     col, (int)ohw, s0 + s == 0 ? beta : 1.0f,
                                     m->grads + L->w_off, (int)ckk, e));
                /* dcol_s[ckk, ohw] = W^T . dY_s, in place of col_s (read above) */
                if (dcol)
                    DDPC_TRY(o->gemm(o, 1, 0, (int)ckk, (int)ohw, OC, 1.0f, m->params + L->w_off,
                                     (int)ckk, dys, (int)ohw, 0.0f, col, (int)ohw, e));
            }
            if (dcol) {
                a.aux = m->col;
                a.ws = m->ws;
                a.dx = dx + (size_t)s0 * in_numel;
                DDPC_TRY(lk(o, DDPC_LK_COL2IM, (size_t)n * in_numel, &a, e));
            }
        }
        if (L->b_numel && !bias_in_pool(m, k))   /* else the pooling's backward did it */
            DDPC_TRY(conv_bias_grad(m, k, dy, rows, beta, e));
        break;
    }
    case DDPC_LAYER_MAXPOOL2D:
    case DDPC_LAYER_AVGPOOL2D:
        if (want_dx) {
            a.H = L->in.d[1]; a.W = L->in.d[2]; a.OH = L->out.d[1]; a.OW = L->out.d[2];
            a.K = it->kernel_size; a.S = it->stride; a.P = it->padding;
            a.act = it->type == DDPC_LAYER_MAXPOOL2D ? 0 : 1;
            a.idx = m->idx[k];
            int r_src = -1;
            if (m->relu_in_pool[L->src]) {
                /* the ReLU's backward too: into the ReLU's input's gradient */
                r_src = m->net.node[L->src].src;
                a.aux = m->y[k];
                a.dx = m->g[r_src];
                a.accx = written[r_src];
                written[r_src] = 1;
            }
            if (r_src >= 0 && bias_in_pool(m, r_src)) {
                /* and the convolution's bias gradient, from the planes it writes */
                a.db = m->grads + m->net.node[r_src].b_off;
                a.accg = beta != 0.0f;
                rc = o->pool2_bias_backward(o, &a, e);
                if (rc == 1 && (rc = lk(o, DDPC_LK_POOL_BWD, n_in, &a, e)) == 0)
                    rc = conv_bias_grad(m, r_src, a.dx, rows, beta, e);
                break;
            }
            rc = lk(o, DDPC_LK_POOL_BWD, n_in, &a, e);
        }
        break;
    case DDPC_LAYER_ADAPTIVEAVGPOOL2D:
        if (want_dx)
            rc = lk(o, DDPC_LK_GAP_BWD, n_in, &a, e);
        break;
    case DDPC_LAYER_BATCHNORM1D:
    case DDPC_LAYER_BATCHNORM2D:
        a.s0 = m->stat[k];
        a.s1 = m->stat[k] + L->channels;
        a.t = m->stat[k] + 2 * (size_t)L->channels;
        a.w = m->params + L->w_off;
        a.dw = m->grads + L->w_off;
        a.db = m->grads + L->b_off;
        DDPC_TRY(lk(o, DDPC_LK_BN_BWD_REDUCE, (size_t)L->channels, &a, e));
        if (want_dx)
            rc = lk(o, DDPC_LK_BN_BWD_DX, n_in, &a, e);
        break;
    case DDPC_LAYER_LAYERNORM: {
        size_t R = (size_t)rows * L->rows;
        a.s0 = m->stat[k];
        a.s1 = m->stat[k] + (size_t)m->max_batch * L->rows;
        a.w = m->params + L->w_off;
        a.dw = m->grads + L->w_off;
        a.db = L->b_numel ? m->grads + L->b_off : NULL;
        a.N = (int)R;
        DDPC_TRY(lk(o, DDPC_LK_LN_BWD_DW, (size_t)L->channels, &a, e));
        if (want_dx)
            rc = lk(o, DDPC_LK_LN_BWD_DX, R, &a, e);
        break;
    }
    case DDPC_LAYER_EMBEDDING:
        /* wte: a tied lm_head's backward (run before this one) wrote its dW
         * there already, so the scatter adds (docs/DESIGN.md, Models: the
         * tied weight) */
        a.dw = m->grads + L->w_off;
        a.db = m->grads + L->b_off;
        a.T = L->rows;
        a.V = it->in;
        a.accg = beta != 0.0f || m->tied[k];
        DDPC_TRY(lk(o, DDPC_LK_EMB_BWD_WTE, (size_t)L->channels, &a, e));
        a.accg = beta != 0.0f;
        rc = lk(o, DDPC_LK_EMB_BWD_WPE, (size_t)L->rows * L->channels, &a, e);
        break;
    case DDPC_LAYER_ATTENTION:
        if (want_dx) {
            struct ddpc_attn at = attn_of(m, k, rows);
            rc = attn_backward(o, &at, in, m->stat[k], m->y[k], dy, dx, accx, m->col, e);
        }
        break;
    case DDPC_LAYER_DROPOUT:
        if (!want_dx)
            break;
        if (!m->training || it->p <= 0.0) {
            rc = copy_f(o, dx, dy, n_in, accx, e);
            break;
        }
        a.f0 = (float)it->p;
        a.f1 = (float)(1.0 / (1.0 - it->p));
        a.seed = model_dropout_seed(m, k);
        rc = lk(o, DDPC_LK_DROPOUT_BWD, n_in, &a, e);
        break;
    case DDPC_LAYER_FLATTEN:
        if (want_dx)
            rc = copy_f(o, dx, dy, n_in, accx, e);
        break;
    case DDPC_LAYER_RESIDUAL:
        if (want_dx)
            DDPC_TRY(copy_f(o, dx, dy, n_in, accx, e));
        if (L->skip >= 0) {
            DDPC_TRY(copy_f(o, m->g[L->skip], dy, n_in, written[L->skip], e));
            written[L->skip] = 1;
        }
        break;
    default:
        return DDPC_FAIL(e, DDPC_E_INVALID, "model: node %d has unknown type %d", k, (int)it->type);
    }
out:
    if (rc < 0)
        return rc;
    if (want_dx)
        written[L->src] = 1;
    return 0;
}

int model_backward(struct ddpc_model *m, const float *x, const float *dlogits, int rows,
                   int accumulate, ddpc_layer_done_fn done, void *ctx, struct ddpc_err *e)
{
    struct ddpc_ops *o = m->ops;
    float beta = accumulate ? 1.0f : 0.0f;
    int last = m->net.n - 1;
    int written[DDPC_MAX_NODES] = { 0 };
    if (dlogits != m->g[last])
        DDPC_TRY(copy_f(o, m->g[last], dlogits, (size_t)rows * m->net.out_numel, 0, e));
    for (int k = last; k >= 0; k--) {
        DDPC_TRY(node_backward(m, k, x, rows, beta, written, e));
        /* node k's gradients are final: its bucket may start reducing while
         * the rest of backward runs (it never writes them again) */
        if (done && (m->net.node[k].w_numel || m->net.node[k].b_numel))
            DDPC_TRY(done(ctx, k, e));
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
    for (int k = 0; k < DDPC_MAX_NODES; k++) {
        void *bufs[4] = { m->y[k], m->g[k], m->idx[k], m->stat[k] };
        for (int i = 0; i < 4; i++)
            if (bufs[i])
                o->release(o, bufs[i]);
        m->y[k] = m->g[k] = m->stat[k] = NULL;
        m->idx[k] = NULL;
    }
    if (m->col)
        o->release(o, m->col);
    if (m->ws)
        o->release(o, m->ws);
    if (m->state)
        o->release(o, m->state);
    if (m->params && !m->params_borrowed)
        o->release(o, m->params);
    if (m->grads && !m->grads_borrowed)
        o->release(o, m->grads);
    m->col = m->ws = m->state = m->params = m->grads = NULL;
    m->logits = NULL;
    m->dbuf[0] = m->dbuf[1] = NULL;
}
