/* layers.c - shape inference, parameter layout, FLOPs and buckets (layers.h).
 *
 * Owns: the lowering of mlp/linear to nodes, each layer type's shape rule
 * and argument checks, the flat parameter and state layout with PyTorch's
 * tensor names, per-layer FLOPs and activation sizes, and the one bucket
 * function. Never allocates, never prints.
 */
#include "layers.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---- names from the key table ---- */

#define DDPC_KEY(...)
#define DDPC_ENUM(...)
#define DDPC_BLOCK(...)
#define DDPC_CUSTOM(...)
#define DDPC_ITEM(list, n, lt, ch, fl, doc) [lt] = #n,
static const char *const type_names[DDPC_LAYER_COUNT] = {
#include "keys.def"
};
#undef DDPC_KEY
#undef DDPC_ENUM
#undef DDPC_BLOCK
#undef DDPC_CUSTOM
#undef DDPC_ITEM

const char *layers_type_name(int type)
{
    /* the gpt lowering's own node types: no spec item spells them */
    if (type == DDPC_LAYER_EMBEDDING)
        return "embedding";
    if (type == DDPC_LAYER_ATTENTION)
        return "causal_self_attention";
    return type >= 0 && type < DDPC_LAYER_COUNT && type_names[type] ? type_names[type] : "?";
}

const char *layers_shape_str(const struct ddpc_shape *s, char *buf, size_t cap)
{
    size_t o = 0;
    o += (size_t)snprintf(buf + o, cap - o, "[");
    for (int i = 0; i < s->n && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%d", i ? ", " : "", (int)s->d[i]);
    if (o < cap)
        snprintf(buf + o, cap - o, "]");
    return buf;
}

static int64_t numel(const struct ddpc_shape *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->n; i++)
        n *= s->d[i];
    return n;
}

/* ---- building ---- */

struct bctx {
    const struct ddpc_job *job;
    struct ddpc_net *net;
    int *bad;
    char *why;
    size_t cap;
    layers_report_fn report;   /* NULL: the first error stops the build */
    void *report_ctx;
    int reported;              /* errors passed to report */
};

static int fail(struct bctx *b, int item, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int fail(struct bctx *b, int item, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->why, b->cap, fmt, ap);
    va_end(ap);
    *b->bad = item;
    return -1;
}

/* A layer whose declared input size (in_features, in_channels) is not
 * what it gets: its output shape does not depend on the declaration, so
 * with a report function the build goes on (each such layer is reported,
 * in one pass); without one it stops, as fail does. */
static int mismatch(struct bctx *b, int item, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int mismatch(struct bctx *b, int item, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->report ? msg : b->why, b->report ? sizeof msg : b->cap, fmt, ap);
    va_end(ap);
    if (!b->report) {
        *b->bad = item;
        return -1;
    }
    b->report(b->report_ctx, item, msg);
    b->reported++;
    return 0;
}

static const struct ddpc_shape *shape_of(const struct ddpc_net *net, int src)
{
    return src < 0 ? &net->input : &net->node[src].out;
}

/* "linear after flatten", "conv2d after the input" */
static void after(const struct ddpc_net *net, int type, int src, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s after %s", layers_type_name(type),
             src < 0 ? "the input" : layers_type_name(net->node[src].it.type));
}

static void add_tensor(struct ddpc_net *net, int node, const char *suffix, int kind, int nd,
                       const int64_t *shape, size_t off, size_t n, int is_count)
{
    struct ddpc_tensor *t = &net->tensor[net->n_tensors++];
    char base[sizeof net->node[node].name];
    memcpy(base, net->node[node].name, sizeof base);
    snprintf(t->name, sizeof t->name, "%.*s.%s", (int)sizeof base - 1, base, suffix);
    t->node = node;
    t->kind = kind;
    t->is_count = is_count;
    t->nd = nd;
    for (int i = 0; i < nd; i++)
        t->shape[i] = shape[i];
    t->off = off;
    t->numel = n;
}

/* The shape rule, arguments check, parameters and costs of node k, whose
 * it/src/item/name are set. */
static int node_resolve(struct bctx *b, int k)
{
    struct ddpc_net *net = b->net;
    struct ddpc_lnode *L = &net->node[k];
    struct ddpc_layer_item *it = &L->it;
    const struct ddpc_shape *in = shape_of(net, L->src);
    char who[64], sh[96];
    after(net, it->type, L->src, who, sizeof who);
    layers_shape_str(in, sh, sizeof sh);
    L->in = *in;
    L->out = *in;
    L->in_numel = numel(in);
    L->spatial = 1;
    L->rows = 1;
    int64_t n = L->in_numel;
    double f = 0, bw = 0;
    switch (it->type) {
    case DDPC_LAYER_LINEAR: {
        int feat = in->d[in->n - 1];
        if (it->in && it->in != feat &&
            mismatch(b, L->item, "%s gets %d features (input %s), but in_features is %d",
                     who, feat, sh, (int)it->in) < 0)
            return -1;
        L->channels = feat;
        L->rows = (int)(n / feat);
        L->out.d[in->n - 1] = it->out;
        L->w_numel = (size_t)it->out * (size_t)feat;
        L->b_numel = it->bias ? (size_t)it->out : 0;
        if (L->tie >= 0) {
            /* lm_head: the embedding's wte [V, C] is this layer's [out, in] */
            const struct ddpc_lnode *o = &net->node[L->tie];
            if (o->w_numel != L->w_numel || L->b_numel)
                return fail(b, L->item, "%s: a tied weight must be [%d, %d] without bias",
                            who, (int)it->out, feat);
        }
        f = 2.0 * L->rows * feat * it->out + (it->bias ? (double)L->rows * it->out : 0);
        bw = 4.0 * L->rows * feat * it->out + (it->bias ? (double)L->rows * it->out : 0);
        break;
    }
    case DDPC_LAYER_EMBEDDING: {
        /* [T] token ids -> [T, C]: wte[V, C] is the weight, wpe[T, C] the "bias" */
        if (in->n != 1)
            return fail(b, L->item, "%s gets %s; it needs [block_size] token ids", who, sh);
        int T = in->d[0], C = it->out, V = it->in;
        L->out.n = 2;
        L->out.d[0] = T;
        L->out.d[1] = C;
        L->channels = C;
        L->rows = T;
        L->w_numel = (size_t)V * (size_t)C;
        L->b_numel = (size_t)T * (size_t)C;
        f = (double)T * C;
        bw = 2.0 * T * C;
        break;
    }
    case DDPC_LAYER_ATTENTION: {
        /* [T, 3C] (q | k | v) -> [T, C]; full T x T score matrices per head */
        int H = it->heads;
        if (in->n != 2 || in->d[1] % 3 != 0 || H < 1 || (in->d[1] / 3) % H != 0)
            return fail(b, L->item, "%s gets %s; it needs [T, 3 x C] with C divisible by the "
                        "%d heads", who, sh, H);
        int T = in->d[0], C = in->d[1] / 3;
        L->out.d[1] = C;
        L->channels = C;
        L->rows = T;
        /* q k^T and att v: 2 T^2 C multiply-adds each; softmax ~5 per score.
         * Backward: four such products (d att, d v, d q, d k) and the softmax's. */
        f = 4.0 * T * T * C + 5.0 * H * T * T;
        bw = 8.0 * T * T * C + 4.0 * H * T * T;
        break;
    }
    case DDPC_LAYER_CONV2D:
    case DDPC_LAYER_MAXPOOL2D:
    case DDPC_LAYER_AVGPOOL2D:
    case DDPC_LAYER_ADAPTIVEAVGPOOL2D: {
        if (in->n != 3)
            return fail(b, L->item, "%s gets %s; it needs [channels, height, width] (set "
                        "model.input, or move flatten after it)", who, sh);
        int C = in->d[0], H = in->d[1], W = in->d[2];
        if (it->type == DDPC_LAYER_ADAPTIVEAVGPOOL2D) {
            it->kernel_size = 0;
            L->out.d[1] = L->out.d[2] = 1;
            L->channels = C;
            L->spatial = H * W;
            f = (double)n;
            bw = (double)n;
            break;
        }
        int ks = it->kernel_size, p = it->padding;
        if (it->type != DDPC_LAYER_CONV2D && it->stride == 0)
            it->stride = ks;
        int s = it->stride;
        if (s < 1)
            return fail(b, L->item, "%s: stride must be at least 1, found %d", who, s);
        if (it->type != DDPC_LAYER_CONV2D && 2 * p > ks)
            return fail(b, L->item, "%s: padding %d is more than half of kernel_size %d",
                        who, p, ks);
        if (H + 2 * p < ks || W + 2 * p < ks)
            return fail(b, L->item, "%s: kernel_size %d is larger than the padded input "
                        "%dx%d (input %s, padding %d)", who, ks, H + 2 * p, W + 2 * p, sh, p);
        int OH = (H + 2 * p - ks) / s + 1, OW = (W + 2 * p - ks) / s + 1;
        L->channels = C;
        L->spatial = H * W;
        L->out.d[1] = OH;
        L->out.d[2] = OW;
        if (it->type == DDPC_LAYER_CONV2D) {
            if (it->in && it->in != C &&
                mismatch(b, L->item, "%s gets %d channels (input %s), but in_channels is %d",
                         who, C, sh, (int)it->in) < 0)
                return -1;
            L->out.d[0] = it->out;
            L->w_numel = (size_t)it->out * C * ks * ks;
            L->b_numel = it->bias ? (size_t)it->out : 0;
            double macs = (double)it->out * C * ks * ks * OH * OW;
            f = 2 * macs + (it->bias ? (double)it->out * OH * OW : 0);
            bw = 4 * macs + (it->bias ? (double)it->out * OH * OW : 0);
            L->scratch_floats = (int64_t)C * ks * ks * OH * OW;
        } else {
            f = (double)C * OH * OW * ks * ks;
            bw = f;
        }
        break;
    }
    case DDPC_LAYER_BATCHNORM1D:
    case DDPC_LAYER_BATCHNORM2D: {
        int want2d = it->type == DDPC_LAYER_BATCHNORM2D;
        if (want2d ? in->n != 3 : in->n > 2)
            return fail(b, L->item, "%s gets %s; it needs %s", who, sh,
                        want2d ? "[channels, height, width]" : "[features] or [channels, length]");
        L->channels = in->d[0];
        L->spatial = (int)(n / in->d[0]);
        L->w_numel = L->b_numel = (size_t)L->channels;
        f = 4.0 * n;
        bw = 8.0 * n;
        break;
    }
    case DDPC_LAYER_LAYERNORM:
        L->channels = in->d[in->n - 1];
        L->rows = (int)(n / L->channels);
        L->w_numel = (size_t)L->channels;
        L->b_numel = it->bias ? (size_t)L->channels : 0;
        f = 6.0 * n;
        bw = 10.0 * n;
        break;
    case DDPC_LAYER_FLATTEN:
        L->out.n = 1;
        L->out.d[0] = (int32_t)n;
        L->out.d[1] = L->out.d[2] = 0;
        break;
    case DDPC_LAYER_DROPOUT:
    case DDPC_LAYER_RELU:
    case DDPC_LAYER_LEAKY_RELU:
    case DDPC_LAYER_GELU:
    case DDPC_LAYER_SILU:
    case DDPC_LAYER_TANH:
    case DDPC_LAYER_SIGMOID:
        f = bw = (double)n;
        break;
    case DDPC_LAYER_RESIDUAL: {
        /* the add node: in is the body's output, skip is the residual's input */
        const struct ddpc_shape *x = shape_of(net, L->skip);
        char xs[96];
        if (numel(x) != n || x->n != in->n || memcmp(x->d, in->d, sizeof x->d) != 0)
            return fail(b, L->item, "residual: its body turns %s into %s; the body must keep "
                        "the shape of its input", layers_shape_str(x, xs, sizeof xs), sh);
        f = bw = (double)n;
        break;
    }
    default:
        return fail(b, L->item, "unknown layer type %d", (int)it->type);
    }
    L->out_numel = numel(&L->out);
    if (L->out_numel <= 0 || L->out_numel > (1 << 28))
        return fail(b, L->item, "%s: output of %lld floats per sample is out of range", who,
                    (long long)L->out_numel);
    L->fwd_flops = f;
    L->bwd_flops = bw;
    /* output and its gradient; max pooling keeps the argmax of each output */
    L->act_floats = 2 * L->out_numel + (it->type == DDPC_LAYER_MAXPOOL2D ? L->out_numel : 0);
    if (it->type == DDPC_LAYER_BATCHNORM1D || it->type == DDPC_LAYER_BATCHNORM2D)
        L->act_floats += 0;   /* mean and 1/std are per channel, not per sample */
    if (it->type == DDPC_LAYER_LAYERNORM)
        L->act_floats += 2 * (int64_t)L->rows;   /* mean and 1/std per row */
    if (it->type == DDPC_LAYER_ATTENTION) {
        /* unfused (the CPU): the softmax probabilities [H, T, T] are kept
         * for backward; their gradient is scratch, with dropout also the
         * dropped probabilities (runtime/attn.h attn_floats; fused on a
         * GPU both are [H, T]: layers_floats_fused) */
        int64_t att = (int64_t)it->heads * L->rows * L->rows;
        L->act_floats += att;
        L->scratch_floats = att * (it->p > 0 ? 2 : 1);
    }

    /* parameters: weight then bias, PyTorch's order */
    if (L->tie >= 0) {
        L->w_off = net->node[L->tie].w_off;
        L->b_off = net->n_params;
        return 0;
    }
    L->w_off = net->n_params;
    net->n_params += L->w_numel;
    L->b_off = net->n_params;
    net->n_params += L->b_numel;
    if (it->type == DDPC_LAYER_EMBEDDING) {
        int64_t wte[2] = { it->in, it->out }, wpe[2] = { L->rows, it->out };
        add_tensor(net, k, "wte.weight", DDPC_TENSOR_PARAM, 2, wte, L->w_off, L->w_numel, 0);
        add_tensor(net, k, "wpe.weight", DDPC_TENSOR_PARAM, 2, wpe, L->b_off, L->b_numel, 0);
        return 0;
    }
    if (L->w_numel) {
        int64_t shp[4];
        int nd;
        if (it->type == DDPC_LAYER_CONV2D) {
            shp[0] = it->out; shp[1] = in->d[0]; shp[2] = shp[3] = it->kernel_size;
            nd = 4;
        } else if (it->type == DDPC_LAYER_LINEAR) {
            shp[0] = it->out; shp[1] = L->channels;
            nd = 2;
        } else {
            shp[0] = L->channels;
            nd = 1;
        }
        add_tensor(net, k, "weight", DDPC_TENSOR_PARAM, nd, shp, L->w_off, L->w_numel, 0);
    }
    if (L->b_numel) {
        int64_t shp[1] = { (int64_t)L->b_numel };
        add_tensor(net, k, "bias", DDPC_TENSOR_PARAM, 1, shp, L->b_off, L->b_numel, 0);
    }
    if (it->type == DDPC_LAYER_BATCHNORM1D || it->type == DDPC_LAYER_BATCHNORM2D) {
        int64_t c[1] = { L->channels }, none[1] = { 0 };
        L->s_off = net->n_state;
        add_tensor(net, k, "running_mean", DDPC_TENSOR_STATE, 1, c, L->s_off, (size_t)L->channels, 0);
        add_tensor(net, k, "running_var", DDPC_TENSOR_STATE, 1, c, L->s_off + (size_t)L->channels,
                   (size_t)L->channels, 0);
        add_tensor(net, k, "num_batches_tracked", DDPC_TENSOR_STATE, 0, none,
                   L->s_off + 2 * (size_t)L->channels, 1, 1);
        net->n_state += 2 * (size_t)L->channels + 1;
        net->has_batchnorm = 1;
    }
    if (it->type == DDPC_LAYER_DROPOUT || (it->type == DDPC_LAYER_ATTENTION && it->p > 0))
        net->has_dropout = 1;
    return 0;
}

static int new_node(struct bctx *b, int item, const struct ddpc_layer_item *it, int src,
                    const char *name)
{
    struct ddpc_net *net = b->net;
    if (net->n >= DDPC_MAX_NODES)
        return fail(b, item, "more than %d layers", DDPC_MAX_NODES);
    int k = net->n++;
    struct ddpc_lnode *L = &net->node[k];
    memset(L, 0, sizeof *L);
    L->it = *it;
    L->item = item;
    L->src = src;
    L->skip = -1;
    L->tie = -1;
    snprintf(L->name, sizeof L->name, "%s", name);
    return k;
}

/* Items [first, first + count) form one list; prefix names its modules
 * ("layers", "layers.3.body"). *src is the node feeding the list (-1: the
 * model input) and becomes the list's last node. */
static int build_list(struct bctx *b, int first, int count, int *src, const char *prefix,
                      int depth)
{
    const struct ddpc_job *job = b->job;
    if (depth > 16)
        return fail(b, first, "residual blocks nested more than 16 deep");
    int pos = 0;
    for (int i = first; i < first + count; pos++) {
        const struct ddpc_layer_item *it = &job->model.items[i];
        char name[DDPC_NODE_NAME];
        int len = snprintf(name, sizeof name, "%s.%d", prefix, pos);
        if (len < 0 || (size_t)len >= sizeof name)   /* never within DDPC_MAX_ITEMS and 16 levels */
            return fail(b, i, "module path %s.%d is longer than %d characters", prefix, pos,
                        DDPC_NODE_NAME - 1);
        if (it->type == DDPC_LAYER_RESIDUAL) {
            if (it->n_body < 1 || i + 1 + it->n_body > first + count)
                return fail(b, i, "residual needs a non-empty list of layers");
            int in = *src, body = *src;
            char bp[DDPC_NODE_NAME];
            len = snprintf(bp, sizeof bp, "%s.body", name);
            if (len < 0 || (size_t)len >= sizeof bp)
                return fail(b, i, "module path %s.body is longer than %d characters", name,
                            DDPC_NODE_NAME - 1);
            if (build_list(b, i + 1, it->n_body, &body, bp, depth + 1) < 0)
                return -1;
            int k = new_node(b, i, it, body, name);
            if (k < 0)
                return -1;
            b->net->node[k].skip = in;
            if (node_resolve(b, k) < 0)
                return -1;
            *src = k;
            i += 1 + it->n_body;
        } else {
            int k = new_node(b, i, it, *src, name);
            if (k < 0 || node_resolve(b, k) < 0)
                return -1;
            *src = k;
            i++;
        }
    }
    return 0;
}

static int build_mlp(struct bctx *b)
{
    const struct ddpc_job *job = b->job;
    int sizes = job->model.n_layers;
    if (sizes < 2 || sizes > DDPC_MAX_LAYERS)
        return fail(b, -1, "model.layers needs 2 to %d sizes, found %d", DDPC_MAX_LAYERS, sizes);
    if (job->model.type == DDPC_MODEL_LINEAR && sizes != 2)
        return fail(b, -1, "model type linear takes exactly 2 sizes [in, out], found %d", sizes);
    for (int l = 0; l < sizes; l++)
        if (job->model.layers[l] < 1)
            return fail(b, -1, "model.layers[%d]: sizes must be positive", l);
    b->net->input.n = 1;
    b->net->input.d[0] = job->model.layers[0];
    static const int acts[] = { DDPC_LAYER_RELU, DDPC_LAYER_GELU, DDPC_LAYER_TANH,
                                DDPC_LAYER_SIGMOID };
    int src = -1;
    for (int l = 0; l + 1 < sizes; l++) {
        struct ddpc_layer_item it;
        memset(&it, 0, sizeof it);
        it.type = DDPC_LAYER_LINEAR;
        it.out = job->model.layers[l + 1];
        it.bias = 1;
        char name[48];
        snprintf(name, sizeof name, "layers.%d", l);
        int k = new_node(b, -1, &it, src, name);
        if (k < 0 || node_resolve(b, k) < 0)
            return -1;
        src = k;
        if (l + 2 < sizes) {
            memset(&it, 0, sizeof it);
            int a = (int)job->model.activation;
            it.type = (enum ddpc_layer_type)acts[a >= 0 && a < 4 ? a : 0];
            snprintf(name, sizeof name, "act.%d", l);
            k = new_node(b, -1, &it, src, name);
            if (k < 0 || node_resolve(b, k) < 0)
                return -1;
            src = k;
        }
    }
    return 0;
}

/* One lowered node of type `type` reading src; returns its index or -1. */
static int gpt_node(struct bctx *b, const struct ddpc_layer_item *it, int src, const char *fmt,
                    ...) __attribute__((format(printf, 4, 5)));

static int gpt_node(struct bctx *b, const struct ddpc_layer_item *it, int src, const char *fmt,
                    ...)
{
    char name[48];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    int k = new_node(b, -1, it, src, name);
    if (k < 0 || node_resolve(b, k) < 0)
        return -1;
    return k;
}

static struct ddpc_layer_item gpt_item(int type, int out, int bias)
{
    struct ddpc_layer_item it;
    memset(&it, 0, sizeof it);
    it.type = (enum ddpc_layer_type)type;
    it.out = out;
    it.bias = bias;
    it.eps = 1e-5;   /* nanoGPT's LayerNorm: F.layer_norm(..., 1e-5) */
    return it;
}

/* A dropout node after src when the model has dropout; else src. */
static int gpt_dropout(struct bctx *b, int src, const char *name)
{
    if (b->job->model.dropout <= 0)
        return src;
    struct ddpc_layer_item it = gpt_item(DDPC_LAYER_DROPOUT, 0, 0);
    it.p = b->job->model.dropout;
    return gpt_node(b, &it, src, "%s", name);
}

/* The residual add closing a block's branch: reads the branch's last node
 * (src) and adds the block's input (skip). */
static int gpt_add(struct bctx *b, int src, int skip, const char *name)
{
    struct ddpc_layer_item it = gpt_item(DDPC_LAYER_RESIDUAL, 0, 0);
    int k = new_node(b, -1, &it, src, name);
    if (k < 0)
        return -1;
    b->net->node[k].skip = skip;
    return node_resolve(b, k) < 0 ? -1 : k;
}

/* One transformer block reading node x; returns its last node or -1. */
static int gpt_block(struct bctx *b, int l, int x)
{
    const struct ddpc_job *job = b->job;
    int C = job->model.n_embd, bias = job->model.bias != 0;
    char pre[32], name[64];   /* "transformer.h.47.attn.resid_dropout": 35 */
    snprintf(pre, sizeof pre, "transformer.h.%d", l);
    struct ddpc_layer_item it = gpt_item(DDPC_LAYER_LAYERNORM, 0, bias);
    int k = gpt_node(b, &it, x, "%s.ln_1", pre);
    if (k < 0)
        return -1;
    it = gpt_item(DDPC_LAYER_LINEAR, 3 * C, bias);
    if ((k = gpt_node(b, &it, k, "%s.attn.c_attn", pre)) < 0)
        return -1;
    it = gpt_item(DDPC_LAYER_ATTENTION, 0, 0);
    it.heads = job->model.n_head;
    it.p = job->model.dropout;
    if ((k = gpt_node(b, &it, k, "%s.attn", pre)) < 0)
        return -1;
    it = gpt_item(DDPC_LAYER_LINEAR, C, bias);
    if ((k = gpt_node(b, &it, k, "%s.attn.c_proj", pre)) < 0)
        return -1;
    snprintf(name, sizeof name, "%s.attn.resid_dropout", pre);
    if ((k = gpt_dropout(b, k, name)) < 0)
        return -1;
    snprintf(name, sizeof name, "%s.add_1", pre);
    if ((x = gpt_add(b, k, x, name)) < 0)
        return -1;
    it = gpt_item(DDPC_LAYER_LAYERNORM, 0, bias);
    if ((k = gpt_node(b, &it, x, "%s.ln_2", pre)) < 0)
        return -1;
    it = gpt_item(DDPC_LAYER_LINEAR, 4 * C, bias);
    if ((k = gpt_node(b, &it, k, "%s.mlp.c_fc", pre)) < 0)
        return -1;
    it = gpt_item(DDPC_LAYER_GELU, 0, 0);
    it.approximate = DDPC_GELU_TANH;
    if ((k = gpt_node(b, &it, k, "%s.mlp.gelu", pre)) < 0)
        return -1;
    it = gpt_item(DDPC_LAYER_LINEAR, C, bias);
    if ((k = gpt_node(b, &it, k, "%s.mlp.c_proj", pre)) < 0)
        return -1;
    snprintf(name, sizeof name, "%s.mlp.dropout", pre);
    if ((k = gpt_dropout(b, k, name)) < 0)
        return -1;
    snprintf(name, sizeof name, "%s.add_2", pre);
    return gpt_add(b, k, x, name);
}

/* nanoGPT's GPT as nodes (layers.h); names are its module paths. */
static int build_gpt(struct bctx *b)
{
    const struct ddpc_job *job = b->job;
    struct ddpc_net *net = b->net;
    int V = job->model.vocab_size, T = job->model.block_size, L = job->model.n_layer;
    int H = job->model.n_head, C = job->model.n_embd, bias = job->model.bias != 0;
    if (V < 1 || T < 1 || L < 1 || H < 1 || C < 1)
        return fail(b, -1, "gpt: vocab_size, block_size, n_layer, n_head and n_embd must be "
                    "positive");
    if (L > 48)
        return fail(b, -1, "gpt: n_layer %d is more than 48", L);
    if (C % H != 0)
        return fail(b, -1, "gpt: n_embd %d is not divisible by n_head %d (each head gets "
                    "n_embd / n_head features)", C, H);
    if ((int64_t)V * C > (int64_t)1 << 31 || (int64_t)T * 4 * C > (int64_t)1 << 28)
        return fail(b, -1, "gpt: vocab_size x n_embd or block_size x 4 n_embd is too large");
    net->input.n = 1;
    net->input.d[0] = T;
    net->seq_len = T;

    struct ddpc_layer_item it = gpt_item(DDPC_LAYER_EMBEDDING, C, 0);
    it.in = V;
    int emb = gpt_node(b, &it, -1, "transformer");
    if (emb < 0)
        return -1;
    int x = gpt_dropout(b, emb, "transformer.drop");
    for (int l = 0; l < L && x >= 0; l++)
        x = gpt_block(b, l, x);
    if (x < 0)
        return -1;
    it = gpt_item(DDPC_LAYER_LAYERNORM, 0, bias);
    int k = gpt_node(b, &it, x, "transformer.ln_f");
    if (k < 0)
        return -1;
    it = gpt_item(DDPC_LAYER_LINEAR, V, 0);
    int head = new_node(b, -1, &it, k, "lm_head");
    if (head < 0)
        return -1;
    net->node[head].tie = emb;
    if (node_resolve(b, head) < 0)
        return -1;
    for (int t = 0; t < net->n_tensors; t++)
        if (net->tensor[t].node == emb && net->tensor[t].off == net->node[emb].w_off)
            net->tie_tensor = t;
    snprintf(net->tie_name, sizeof net->tie_name, "lm_head.weight");
    return 0;
}

int layers_build(const struct ddpc_job *job, const struct ddpc_shape *input,
                 struct ddpc_net *net, int *bad_item, char *why, size_t cap)
{
    *bad_item = -1;
    return layers_build_each(job, input, net, bad_item, why, cap, NULL, NULL);
}

int layers_build_each(const struct ddpc_job *job, const struct ddpc_shape *input,
                      struct ddpc_net *net, int *bad_item, char *why, size_t cap,
                      layers_report_fn report, void *report_ctx)
{
    struct bctx b = { job, net, bad_item, why, cap, report, report_ctx, 0 };
    memset(net, 0, sizeof *net);
    net->seq_len = 1;
    net->tie_tensor = -1;
    *bad_item = -1;
    if (cap)
        why[0] = '\0';
    int rc;
    if (job->model.type == DDPC_MODEL_GPT) {
        rc = build_gpt(&b);
    } else if (job->model.type != DDPC_MODEL_SEQUENTIAL) {
        rc = build_mlp(&b);
    } else {
        if (job->model.n_items < 1 || job->model.n_items > DDPC_MAX_ITEMS)
            return fail(&b, -1, "a sequential model needs 1 to %d layers, found %d",
                        DDPC_MAX_ITEMS, (int)job->model.n_items);
        if (input) {
            net->input = *input;
        } else {
            net->input.n = job->model.n_input;
            for (int i = 0; i < job->model.n_input && i < DDPC_MAX_DIMS; i++)
                net->input.d[i] = job->model.input[i];
        }
        if (net->input.n < 1 || net->input.n > DDPC_MAX_DIMS)
            return fail(&b, -1, "the input shape is unknown; set model.input");
        for (int i = 0; i < net->input.n; i++)
            if (net->input.d[i] < 1)
                return fail(&b, -1, "model.input has a dimension < 1");
        int src = -1;
        rc = build_list(&b, 0, job->model.n_items, &src, "layers", 0);
    }
    if (rc < 0)
        return -1;
    net->in_numel = numel(&net->input);
    net->out_numel = net->n ? net->node[net->n - 1].out_numel : net->in_numel;
    for (int k = 0; k < net->n; k++) {
        net->fwd_flops += net->node[k].fwd_flops;
        net->bwd_flops += net->node[k].bwd_flops;
        net->act_floats += net->node[k].act_floats;
        if (net->node[k].scratch_floats > net->scratch_floats)
            net->scratch_floats = net->node[k].scratch_floats;
    }
    return b.reported ? -1 : 0;
}

int64_t layers_floats_fused(const struct ddpc_net *net, int64_t *scratch_out)
{
    int64_t act = 0, scratch = 0;
    for (int k = 0; k < net->n; k++) {
        const struct ddpc_lnode *L = &net->node[k];
        int64_t a = L->act_floats, s = L->scratch_floats;
        if (L->it.type == DDPC_LAYER_ATTENTION && L->channels % L->it.heads == 0 &&
            DDPC_ATTN_FUSED_HS(L->channels / L->it.heads)) {
            int64_t ht = (int64_t)L->it.heads * L->rows;
            a -= ht * L->rows - ht;
            s = ht;
        }
        act += a;
        scratch = s > scratch ? s : scratch;
    }
    if (scratch_out)
        *scratch_out = scratch;
    return act + scratch;
}

int layers_buckets(const struct ddpc_net *net, double cap_bytes, struct ddpc_bucket_span *out,
                   int max)
{
    int nb = 0;
    size_t hi = net->n_params;
    double bytes = 0;
    int last = -1, first_t = -1, count = 0;
    /* the first parameter tensor in layout order closes the last bucket */
    for (int t = 0; t < net->n_tensors; t++)
        if (net->tensor[t].kind == DDPC_TENSOR_PARAM) {
            last = t;
            break;
        }
    for (int t = net->n_tensors - 1; t >= 0 && max > 0; t--) {
        const struct ddpc_tensor *T = &net->tensor[t];
        if (T->kind != DDPC_TENSOR_PARAM)
            continue;
        if (first_t < 0)
            first_t = t;
        count++;
        bytes += (double)T->numel * sizeof(float);
        if ((cap_bytes > 0 && bytes >= cap_bytes && nb < max - 1) || t == last) {
            out[nb].lo = T->off;
            out[nb].hi = hi;
            out[nb].low_node = T->node;
            out[nb].first_tensor = first_t;
            out[nb].n_tensors = count;
            hi = T->off;
            bytes = 0;
            first_t = -1;
            count = 0;
            nb++;
        }
    }
    return nb;
}

int layers_eval_rows(const struct ddpc_net *net, int batch, int eval_batch)
{
    double per = (double)(net->act_floats + net->scratch_floats) * 4;
    int rows = per * eval_batch > 256.0 * 1048576 ? batch : eval_batch;
    if (rows > eval_batch)
        rows = eval_batch;
    return rows > 0 ? rows : 1;
}

int layers_buffer_rows(const struct ddpc_net *net, int batch, int evaluates)
{
    int eval = evaluates ? layers_eval_rows(net, batch, DDPC_EVAL_BATCH) : 0;
    return batch > eval ? batch : eval;
}
