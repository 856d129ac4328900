/* test_layers.c - sequential models: PyTorch parity of every layer type,
 * shapes, the plan's buckets are the runtime's, train/eval, determinism.
 *
 * Parity: each case is a spec; the model is built by the runtime (ops_cpu),
 * given seeded weights (batch-norm weights nudged off 1/0), one forward in
 * training mode and one backward of the mean cross-entropy; the weights, the
 * batch, the loss, every gradient, the batch-norm buffers after the forward
 * and the dropout masks go to a safetensors file, and tests/torch_ref.py
 * rebuilds the same torch.nn.Sequential, loads the weights with
 * strict=True and compares (1e-5 relative). SKIP without torch.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layers.h"
#include "model.h"
#include "ops.h"
#include "ops_kernels.h"
#include "plan.h"
#include "rng.h"
#include "spec.h"
#include "testutil.h"

/* ---- building a model from spec text ---- */

struct built {
    char *dir, *spec;
    struct spec_doc *doc;
    struct ddpc_job job;
};

static void build_spec(struct built *b, const char *yaml)
{
    b->dir = make_temp_dir("layers");
    ck_assert_ptr_nonnull(b->dir);
    ck_assert_int_ge(asprintf(&b->spec, "%s/spec.yaml", b->dir), 0);
    ck_assert_int_eq(write_file(b->spec, yaml, strlen(yaml)), 0);
    test_load_job(b->spec, &b->job, &b->doc);
}

static void built_free(struct built *b)
{
    spec_doc_free(b->doc);
    rm_tree(b->dir);
    free(b->dir);
    free(b->spec);
}

/* Node shape [N, out...] for a tensor of rows samples. */
static int node_shape(const struct ddpc_lnode *L, int rows, int64_t *shape)
{
    shape[0] = rows;
    for (int i = 0; i < L->out.n; i++)
        shape[1 + i] = L->out.d[i];
    return 1 + L->out.n;
}

/* The CPU backend (conv_rows >= 0: that many samples per convolution
 * chunk) and the built spec's model for up to rows samples, PyTorch's
 * init from seed. */
static void model_up(const struct built *b, struct ddpc_ops *o, struct ddpc_model *m, int rows,
                     uint64_t seed, int conv_rows)
{
    struct ddpc_err e = { 0 };
    ck_assert_int_eq(ops_cpu_init(o, &e), 0);
    if (conv_rows >= 0)
        o->conv_rows = conv_rows;
    ck_assert_msg(model_init(m, o, &b->job, rows, &e) == 0, "%s", e.msg);
    ck_assert_int_eq(model_init_params(m, DDPC_INIT_PYTORCH, seed, &e), 0);
}

/* The parity run of one spec (see the file comment). */
static void parity(const char *yaml, int rows, uint64_t seed)
{
    struct built b;
    build_spec(&b, yaml);
    struct ddpc_ops o;
    struct ddpc_err e = { 0 };
    struct ddpc_model m;
    model_up(&b, &o, &m, rows, seed, -1);
    struct ddpc_rng r;
    rng_seed(&r, seed + 7);
    for (size_t i = 0; i < m.n_params; i++)   /* norms' weight 1 / bias 0 are too easy */
        m.params[i] += (float)(0.2 * (rng_uniform(&r) - 0.5));
    for (int k = 0; k < m.net.n; k++)
        if (m.net.node[k].it.type == DDPC_LAYER_BATCHNORM1D ||
            m.net.node[k].it.type == DDPC_LAYER_BATCHNORM2D)
            for (int c = 0; c < m.net.node[k].channels; c++) {
                m.state[m.net.node[k].s_off + (size_t)c] = (float)(rng_uniform(&r) - 0.5);
                m.state[m.net.node[k].s_off + (size_t)m.net.node[k].channels + (size_t)c] =
                    (float)(0.5 + rng_uniform(&r));
            }

    struct st_file *f = calloc(1, sizeof *f);
    ck_assert_ptr_nonnull(f);
    for (int t = 0; t < m.net.n_tensors; t++) {
        const struct ddpc_tensor *T = &m.net.tensor[t];
        float count = 0;
        const float *src = T->kind == DDPC_TENSOR_PARAM ? m.params + T->off : m.state + T->off;
        if (T->is_count)
            src = &count;   /* F32 here; torch_ref converts */
        int64_t one = 1;
        st_add(f, T->name, T->nd ? T->nd : 0, T->nd ? T->shape : &one, src);
    }
    size_t in = (size_t)m.net.in_numel, out = (size_t)m.net.out_numel;
    float *x = malloc((size_t)rows * in * sizeof *x);
    float *lab = malloc((size_t)rows * sizeof *lab);
    int32_t *ilab = malloc((size_t)rows * sizeof *ilab);
    for (size_t i = 0; i < (size_t)rows * in; i++)
        x[i] = (float)(2 * rng_uniform(&r) - 1);
    for (int i = 0; i < rows; i++) {
        ilab[i] = (int32_t)rng_below(&r, out);
        lab[i] = (float)ilab[i];
    }
    int64_t xs[4] = { rows };
    for (int i = 0; i < m.net.input.n; i++)
        xs[1 + i] = m.net.input.d[i];
    st_add(f, "x", 1 + m.net.input.n, xs, x);
    int64_t ls[1] = { rows };
    st_add(f, "labels", 1, ls, lab);

    model_set_mode(&m, 1, 0x1234 + seed);
    ck_assert_msg(model_forward(&m, x, rows, &e) == 0, "%s", e.msg);
    double acc[DDPC_LOSS_ACC] = { 0 };
    ck_assert_int_eq(o.loss(&o, DDPC_LOSS_CROSS_ENTROPY, m.logits, ilab, NULL, m.dbuf[0], rows,
                            (int)out, 1.0f / rows, acc, &e), 0);
    double lsum = acc[0];
    ck_assert_msg(model_backward(&m, x, m.dbuf[0], rows, 0, NULL, NULL, &e) == 0, "%s", e.msg);
    float loss = (float)(lsum / rows);
    int64_t one[1] = { 1 };
    st_add(f, "loss", 1, one, &loss);
    char name[160];
    for (int t = 0; t < m.net.n_tensors; t++) {
        const struct ddpc_tensor *T = &m.net.tensor[t];
        if (T->kind == DDPC_TENSOR_PARAM) {
            snprintf(name, sizeof name, "grad.%s", T->name);
            st_add(f, name, T->nd, T->shape, m.grads + T->off);
        } else {
            snprintf(name, sizeof name, "after.%s", T->name);
            st_add(f, name, T->nd ? T->nd : 1, T->nd ? T->shape : one, m.state + T->off);
        }
    }
    /* dropout: the keep-mask this forward drew, as 0/1 */
    for (int k = 0; k < m.net.n; k++) {
        const struct ddpc_lnode *L = &m.net.node[k];
        if (L->it.type != DDPC_LAYER_DROPOUT)
            continue;
        size_t n = (size_t)rows * (size_t)L->out_numel;
        float *mask = malloc(n * sizeof *mask);
        uint64_t s = model_dropout_seed(&m, k);
        for (size_t i = 0; i < n; i++)
            mask[i] = ddpc_k_uniform(s, i) >= (float)L->it.p ? 1.0f : 0.0f;
        int64_t sh[4];
        int nd = node_shape(L, rows, sh);
        snprintf(name, sizeof name, "mask.%s", L->name);
        st_add(f, name, nd, sh, mask);
        free(mask);
    }
    char *data;
    ck_assert_int_ge(asprintf(&data, "%s/data.safetensors", b.dir), 0);
    st_write(f, data);

    char *script;
    ck_assert_int_ge(asprintf(&script, "%s/tests/torch_ref.py", test_top()), 0);
    char *argv[] = { "/usr/bin/python3", script, "grads", b.spec, data, NULL };
    struct run_result rr;
    ck_assert_int_eq(run_capture(argv, NULL, NULL, 300, &rr), 0);
    if (rr.exited && rr.code == 77) {
        test_skip("layers: PyTorch parity", "%s", rr.out);
    } else {
        ck_assert_msg(rr.exited && rr.code == 0, "torch_ref.py for\n%s\n%s%s", yaml, rr.out,
                      rr.err);
        ck_assert_ptr_nonnull(strstr(rr.out, "\nOK"));
    }
    run_result_free(&rr);
    free(script);
    free(data);
    free(x);
    free(lab);
    free(ilab);
    free(f);
    model_free(&m);
    o.destroy(&o);
    built_free(&b);
}

#define HEAD "version: 1\nepochs: 1\nbatch_size: 4\nseed: 3\n"

START_TEST(parity_linear_and_activations)
{
    parity(HEAD "model:\n  type: sequential\n  input: [12]\n  layers:\n"
           "    - linear: {out_features: 9}\n    - relu\n"
           "    - linear: {out_features: 8, bias: false}\n    - leaky_relu: {negative_slope: 0.1}\n"
           "    - linear: {out_features: 8}\n    - gelu\n"
           "    - linear: {out_features: 8}\n    - gelu: {approximate: tanh}\n"
           "    - linear: {out_features: 7}\n    - silu\n"
           "    - linear: {out_features: 7}\n    - tanh\n"
           "    - linear: {out_features: 6}\n    - sigmoid\n"
           "    - linear: {out_features: 5}\n"
           "data:\n  train: {format: synthetic, samples: 64, features: 12, classes: 5}\n",
           6, 1);
}
END_TEST

START_TEST(parity_conv_pools)
{
    parity(HEAD "model:\n  type: sequential\n  input: [2, 9, 9]\n  layers:\n"
           "    - conv2d: {out_channels: 4, kernel_size: 3, stride: 2, padding: 1}\n    - relu\n"
           "    - maxpool2d: {kernel_size: 2, stride: 1}\n"
           "    - conv2d: {out_channels: 3, kernel_size: 2, bias: false}\n"
           "    - avgpool2d: {kernel_size: 2, padding: 1}\n"
           "    - flatten\n    - linear: {out_features: 4}\n"
           "data:\n  train: {format: synthetic, samples: 64, features: 162, classes: 4}\n",
           5, 2);
    parity(HEAD "model:\n  type: sequential\n  input: [3, 7, 6]\n  layers:\n"
           "    - maxpool2d: {kernel_size: 3, stride: 2, padding: 1}\n"
           "    - conv2d: {out_channels: 5, kernel_size: 3, padding: 2}\n"
           "    - adaptiveavgpool2d\n    - flatten\n    - linear: {out_features: 3}\n"
           "data:\n  train: {format: synthetic, samples: 64, features: 126, classes: 3}\n",
           4, 3);
}
END_TEST

START_TEST(parity_norms)
{
    parity(HEAD "model:\n  type: sequential\n  input: [3, 6, 6]\n  layers:\n"
           "    - conv2d: {out_channels: 4, kernel_size: 3}\n"
           "    - batchnorm2d: {momentum: 0.2, eps: 0.001}\n    - relu\n"
           "    - flatten\n    - linear: {out_features: 10}\n    - batchnorm1d\n    - silu\n"
           "    - linear: {out_features: 6}\n    - layernorm\n    - linear: {out_features: 4}\n"
           "data:\n  train: {format: synthetic, samples: 64, features: 108, classes: 4}\n",
           6, 4);
    /* batchnorm1d over [channels, length] and layernorm over the last dimension */
    parity(HEAD "model:\n  type: sequential\n  input: [3, 5]\n  layers:\n"
           "    - layernorm: {eps: 0.01}\n    - batchnorm1d\n    - linear: {out_features: 4}\n"
           "    - flatten\n    - linear: {out_features: 3}\n"
           "data:\n  train: {format: synthetic, samples: 64, features: 15, classes: 3}\n",
           5, 5);
}
END_TEST

START_TEST(parity_residual_dropout)
{
    parity(HEAD "model:\n  type: sequential\n  input: [10]\n  layers:\n"
           "    - linear: {out_features: 8}\n"
           "    - residual:\n        - linear: {out_features: 8}\n        - relu\n"
           "        - residual: [linear: {out_features: 8}, tanh]\n"
           "    - dropout: {p: 0.3}\n    - linear: {out_features: 4}\n"
           "data:\n  train: {format: synthetic, samples: 64, features: 10, classes: 4}\n",
           6, 6);
}
END_TEST

START_TEST(parity_example_cnn)
{
    /* examples/fashion-mnist-cnn.yaml's layers (with batch norm and dropout) */
    parity(HEAD "model:\n  type: sequential\n  input: [1, 28, 28]\n  layers:\n"
           "    - conv2d: {out_channels: 32, kernel_size: 3, padding: 1}\n    - relu\n"
           "    - maxpool2d: {kernel_size: 2}\n"
           "    - conv2d: {out_channels: 64, kernel_size: 3, padding: 1}\n    - batchnorm2d\n"
           "    - relu\n    - maxpool2d: {kernel_size: 2}\n    - flatten\n"
           "    - dropout: {p: 0.25}\n    - linear: {out_features: 128}\n    - relu\n"
           "    - linear: {out_features: 10}\n"
           "data:\n  train: {format: synthetic, samples: 64, features: 784, classes: 10}\n",
           8, 7);
}
END_TEST

/* Residuals nested deep (16 levels are accepted) keep PyTorch's whole
 * module paths: names were cut at 47 characters, so from the fifth level
 * on the export's names were not the nn.Sequential's (strict loading
 * failed) and two tensors could share a name (model.init_from then read
 * one tensor's values into both). */
START_TEST(deep_residual_names_are_pytorchs)
{
    const char *yaml = HEAD "model:\n  type: sequential\n  input: [4]\n  layers:\n"
        "    - residual:\n      - residual:\n        - residual:\n          - residual:\n"
        "            - residual:\n              - linear: {out_features: 4}\n"
        "              - residual:\n                - linear: {out_features: 4}\n"
        "                - batchnorm1d\n"
        "    - linear: {out_features: 3}\n"
        "data:\n  train: {format: synthetic, samples: 64, features: 4, classes: 3}\n";
    struct built b;
    build_spec(&b, yaml);
    static struct ddpc_net net;
    char why[512];
    int bad;
    ck_assert_msg(layers_build(&b.job, NULL, &net, &bad, why, sizeof why) == 0, "%s", why);
    const char *want[] = {
        "layers.0.body.0.body.0.body.0.body.0.body.0.weight",
        "layers.0.body.0.body.0.body.0.body.0.body.1.body.0.weight",
        "layers.0.body.0.body.0.body.0.body.0.body.1.body.1.num_batches_tracked",
    };
    for (size_t w = 0; w < sizeof want / sizeof want[0]; w++) {
        int found = 0;
        for (int t = 0; t < net.n_tensors; t++)
            found += strcmp(net.tensor[t].name, want[w]) == 0;
        ck_assert_msg(found == 1, "tensor %s found %d times", want[w], found);
    }
    for (int t = 0; t < net.n_tensors; t++)
        for (int u = t + 1; u < net.n_tensors; u++)
            ck_assert_msg(strcmp(net.tensor[t].name, net.tensor[u].name) != 0,
                          "two tensors named %s", net.tensor[t].name);
    built_free(&b);
    /* and PyTorch's nn.Sequential of the spec loads them (strict=True) */
    parity(yaml, 4, 23);
}
END_TEST

/* The plan's buckets are the runtime's: both come from layers_buckets over
 * the same layers_build, and the plan lists them in fill order. */
START_TEST(plan_buckets_are_runtime_buckets)
{
    struct built b;
    build_spec(&b, HEAD "bucket_cap_mb: 0.001\nmodel:\n  type: sequential\n  input: [1, 28, 28]\n"
               "  layers:\n    - conv2d: {out_channels: 8, kernel_size: 3}\n    - batchnorm2d\n"
               "    - relu\n    - flatten\n    - linear: {out_features: 32}\n    - relu\n"
               "    - linear: {out_features: 10}\n"
               "data:\n  train: {format: synthetic, samples: 64, features: 784, classes: 10}\n");
    struct ddpc_plan p;
    struct ddpc_diag d;
    diag_init(&d);
    ck_assert_int_eq(plan_build(&b.job, "./x", &p, &d), 0);
    struct ddpc_ops o;
    struct ddpc_err e = { 0 };
    ck_assert_int_eq(ops_cpu_init(&o, &e), 0);
    struct ddpc_model m;
    ck_assert_int_eq(model_init(&m, &o, &b.job, 4, &e), 0);
    struct ddpc_bucket_span span[DDPC_MAX_BUCKETS_L];
    int nb = layers_buckets(&m.net, b.job.bucket_cap_mb * 1048576.0, span, DDPC_MAX_BUCKETS_L);
    ck_assert_int_gt(nb, 2);
    ck_assert_int_eq(p.n_buckets, nb);
    for (int i = 0; i < nb; i++) {
        ck_assert_int_eq(p.buckets[i].numel, (int64_t)(span[i].hi - span[i].lo));
        /* the bucket's lowest tensor (filled last) starts at lo */
        const struct ddpc_plan_param *q = &p.params[p.buckets[i].params[p.buckets[i].n - 1]];
        ck_assert_int_eq(q->offset, (int64_t)span[i].lo);
    }
    ck_assert_int_eq(p.total_params, (int64_t)m.n_params);
    model_free(&m);
    o.destroy(&o);
    plan_free(&p);
    diag_free(&d);
    built_free(&b);
}
END_TEST

/* Evaluation differs from training where PyTorch's does: dropout is the
 * identity, batch norm uses (and keeps) the running statistics. */
START_TEST(train_and_eval_modes)
{
    struct built b;
    build_spec(&b, HEAD "model:\n  type: sequential\n  input: [6]\n  layers:\n"
               "    - batchnorm1d\n    - dropout: {p: 0.5}\n    - linear: {out_features: 3}\n"
               "data:\n  train: {format: synthetic, samples: 64, features: 6, classes: 3}\n");
    struct ddpc_ops o;
    struct ddpc_err e = { 0 };
    ck_assert_int_eq(ops_cpu_init(&o, &e), 0);
    struct ddpc_model m;
    ck_assert_int_eq(model_init(&m, &o, &b.job, 8, &e), 0);
    ck_assert_int_eq(model_init_params(&m, DDPC_INIT_PYTORCH, 1, &e), 0);
    float x[48];
    for (int i = 0; i < 48; i++)
        x[i] = (float)(i % 7) - 2.5f;
    float state0[13];
    ck_assert_uint_eq(m.n_state, 13);
    memcpy(state0, m.state, sizeof state0);
    model_set_mode(&m, 0, 0);
    ck_assert_int_eq(model_forward(&m, x, 8, &e), 0);
    ck_assert_mem_eq(m.state, state0, sizeof state0);   /* eval keeps the statistics */
    /* eval: batch norm with running mean 0, var 1 and dropout off: y = x / sqrt(1 + eps) */
    for (int i = 0; i < 48; i++)
        ck_assert_float_eq_tol(m.y[1][i], x[i] / sqrtf(1.0f + 1e-5f), 1e-6f);
    model_set_mode(&m, 1, 99);
    ck_assert_int_eq(model_forward(&m, x, 8, &e), 0);
    ck_assert_float_eq(m.state[12], 1.0f);               /* num_batches_tracked */
    ck_assert(memcmp(m.state, state0, 12 * sizeof(float)) != 0);
    int zeros = 0;
    for (int i = 0; i < 48; i++)
        zeros += m.y[1][i] == 0.0f;
    ck_assert(zeros > 10 && zeros < 38);                 /* about half dropped */
    /* same seed, same mask; another seed (rank or step), another mask */
    float y1[48];
    memcpy(y1, m.y[1], sizeof y1);
    ck_assert_int_eq(model_forward(&m, x, 8, &e), 0);
    ck_assert_mem_eq(m.y[1], y1, sizeof y1);
    model_set_mode(&m, 1, 100);
    ck_assert_int_eq(model_forward(&m, x, 8, &e), 0);
    ck_assert(memcmp(m.y[1], y1, sizeof y1) != 0);
    model_free(&m);
    o.destroy(&o);
    built_free(&b);
}
END_TEST

/* One forward and backward of the spec's model on a fixed batch of rows
 * (inputs in [-1, 1], so ReLUs zero some outputs and whole pooling
 * windows), conv_rows as model_up's: the logits, then every gradient,
 * malloc'ed; *fused: how many ReLUs the pooling after them takes (model.h
 * relu_in_pool). */
static float *logits_and_grads(const struct built *b, int conv_rows, int rows, size_t *n,
                               int *fused)
{
    struct ddpc_ops o;
    struct ddpc_err e = { 0 };
    struct ddpc_model m;
    model_up(b, &o, &m, rows, 5, conv_rows);
    size_t in = (size_t)m.net.in_numel, out = (size_t)m.net.out_numel;
    float *x = malloc((size_t)rows * in * sizeof *x);
    int32_t *lab = malloc((size_t)rows * sizeof *lab);
    ck_assert(x && lab);
    for (size_t i = 0; i < (size_t)rows * in; i++)
        x[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
    for (int i = 0; i < rows; i++)
        lab[i] = i % (int)out;
    model_set_mode(&m, 1, 1);
    ck_assert_msg(model_forward(&m, x, rows, &e) == 0, "%s", e.msg);
    double acc[DDPC_LOSS_ACC] = { 0 };
    ck_assert_int_eq(o.loss(&o, DDPC_LOSS_CROSS_ENTROPY, m.logits, lab, NULL, m.dbuf[0], rows,
                            (int)out, 1.0f / (float)rows, acc, &e), 0);
    ck_assert_msg(model_backward(&m, x, m.dbuf[0], rows, 0, NULL, NULL, &e) == 0, "%s", e.msg);
    *n = (size_t)rows * out + m.n_params;
    float *got = malloc(*n * sizeof *got);
    ck_assert_ptr_nonnull(got);
    memcpy(got, m.logits, (size_t)rows * out * sizeof *got);
    memcpy(got + (size_t)rows * out, m.grads, m.n_params * sizeof *got);
    *fused = 0;
    for (int k = 0; k < m.net.n; k++)
        *fused += m.relu_in_pool[k];
    free(x);
    free(lab);
    model_free(&m);
    o.destroy(&o);
    return got;
}

/* A convolution's stages run a chunk of samples at a time on the CPU
 * (ops.conv_rows, so the columns stay in cache): any chunk gives the bits
 * of whole-batch stages (conv_rows 0, the CUDA backend's way), forward and
 * backward, with and without bias, into a first layer (no input gradient)
 * and a later one (col2im), strided and padded. */
START_TEST(conv_chunks_are_the_whole_batch)
{
    struct built b;
    build_spec(&b, HEAD "model:\n  type: sequential\n  input: [3, 11, 10]\n  layers:\n"
               "    - conv2d: {out_channels: 5, kernel_size: 3, padding: 1}\n    - relu\n"
               "    - conv2d: {out_channels: 4, kernel_size: 3, stride: 2, bias: false}\n"
               "    - conv2d: {out_channels: 6, kernel_size: 2, padding: 1}\n"
               "    - flatten\n    - linear: {out_features: 3}\n"
               "data:\n  train: {format: synthetic, samples: 64, features: 330, classes: 3}\n");
    enum { ROWS = 7 };
    static const int chunks[] = { 0, 1, 3, 7, 100 };
    float *ref = NULL;
    size_t nref = 0;
    for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
        size_t n;
        int fused;
        float *got = logits_and_grads(&b, chunks[c], ROWS, &n, &fused);
        if (!ref) {
            ref = got;
            nref = n;
        } else {
            ck_assert_uint_eq(n, nref);
            ck_assert_msg(memcmp(got, ref, n * sizeof *got) == 0,
                          "conv_rows %d: not the whole batch's bits", chunks[c]);
            free(got);
        }
    }
    free(ref);
    built_free(&b);
}
END_TEST

/* A ReLU read only by a max pooling has its backward done by the
 * pooling's (one pass less): the same bits as the two passes, which a
 * dropout of p 0 between them (a copy each way) keeps apart. Every CPU
 * path of the pooling's backward: 2 x 2 planes with rows shorter than a
 * block (OW 5) and longer with a partial block (OW 18), overlapping
 * windows (kernel 3, stride 2) and odd planes (9 x 7: the scatter); the
 * convolution before it computed in the ReLU's buffer (model.h
 * out_in_relu), by im2col and by the 3 x 3 path. */
START_TEST(relu_backward_in_pooling_same_bits)
{
    static const char *bodies[] = {
        "  input: [2, 8, 10]\n  layers:\n"
        "    - conv2d: {out_channels: 4, kernel_size: 3, padding: 1}\n    - relu\n%s"
        "    - maxpool2d: {kernel_size: 2}\n"
        "    - conv2d: {out_channels: 5, kernel_size: 3, padding: 1}\n    - relu\n%s"
        "    - maxpool2d: {kernel_size: 3, stride: 2}\n"
        "    - flatten\n    - linear: {out_features: 3}\n",
        "  input: [1, 4, 36]\n  layers:\n"
        "    - conv2d: {out_channels: 2, kernel_size: 3, padding: 1}\n    - relu\n%s"
        "    - maxpool2d: {kernel_size: 2}\n"
        "    - conv2d: {out_channels: 3, kernel_size: 1}\n    - relu\n%s"
        "    - maxpool2d: {kernel_size: 1}\n"
        "    - flatten\n    - linear: {out_features: 3}\n",
        "  input: [2, 9, 7]\n  layers:\n"
        "    - conv2d: {out_channels: 4, kernel_size: 3, padding: 1}\n    - relu\n%s"
        "    - maxpool2d: {kernel_size: 2}\n    - relu\n%s"
        "    - maxpool2d: {kernel_size: 2, stride: 1}\n"
        "    - flatten\n    - linear: {out_features: 3}\n",
        /* 16 input channels: the 3 x 3 path (ops.conv3x3) adds the bias
         * and applies the ReLU in its output pass; 9 output channels: the
         * pooling's backward sums the bias gradient of a group of 8 and of
         * one alone (ops.pool2_bias_backward) */
        "  input: [16, 6, 6]\n  layers:\n"
        "    - conv2d: {out_channels: 9, kernel_size: 3, padding: 1}\n    - relu\n%s"
        "    - maxpool2d: {kernel_size: 2}\n    - relu\n%s"
        "    - maxpool2d: {kernel_size: 3, stride: 1}\n"
        "    - flatten\n    - linear: {out_features: 3}\n",
    };
    static const int features[] = { 160, 144, 126, 576 };   /* the inputs' floats */
    for (size_t c = 0; c < sizeof bodies / sizeof bodies[0]; c++) {
        char body[2][1024], yaml[2][2400];
        static const char *apart = "    - dropout: {p: 0.0}\n";
        snprintf(body[0], sizeof body[0], bodies[c], "", "");
        snprintf(body[1], sizeof body[1], bodies[c], apart, apart);
        float *got[2];
        size_t n[2];
        int fused[2];
        for (int v = 0; v < 2; v++) {
            snprintf(yaml[v], sizeof yaml[v], HEAD "model:\n  type: sequential\n%s"
                     "data:\n  train: {format: synthetic, samples: 64, features: %d, "
                     "classes: 3}\n", body[v], features[c]);
            struct built b;
            build_spec(&b, yaml[v]);
            got[v] = logits_and_grads(&b, -1, 5, &n[v], &fused[v]);
            built_free(&b);
        }
        ck_assert_msg(fused[0] == 2 && fused[1] == 0, "case %zu: %d and %d ReLUs taken by a "
                      "pooling", c, fused[0], fused[1]);
        ck_assert_uint_eq(n[0], n[1]);
        ck_assert_msg(memcmp(got[0], got[1], n[0] * sizeof(float)) == 0,
                      "case %zu: the pooling's ReLU backward changed the bits", c);
        free(got[0]);
        free(got[1]);
    }
}
END_TEST

/* The gpt preset lowers to nanoGPT's modules: GPT-2 124M has nanoGPT's
 * parameter count (124,439,808 with the tied lm_head counted once), its
 * tensor names in named_parameters() order, and about the FLOPs per token
 * that nanoGPT's estimate (6N + 12 L T C, N without wpe) gives. */
START_TEST(gpt_lowering_is_nanogpt)
{
    struct built b;
    /* a token stream long enough for batch_size 4 windows of 1024 + 1 */
    char *dir = make_temp_dir("gpt"), *text = NULL, *yaml = NULL;
    ck_assert_ptr_nonnull(dir);
    ck_assert_int_ge(asprintf(&text, "%s/t.txt", dir), 0);
    static char bytes[8192];
    memset(bytes, 'a', sizeof bytes);
    ck_assert_int_eq(write_file(text, bytes, sizeof bytes), 0);
    ck_assert_int_ge(asprintf(&yaml, HEAD "model:\n  type: gpt\n  vocab_size: 50257\n"
                              "  block_size: 1024\n  n_layer: 12\n  n_head: 12\n  n_embd: 768\n"
                              "data:\n  train: {format: text, path: %s}\n", text), 0);
    build_spec(&b, yaml);
    free(yaml);
    static struct ddpc_net net;
    char why[256];
    int bad;
    ck_assert_int_eq(layers_build(&b.job, NULL, &net, &bad, why, sizeof why), 0);
    ck_assert_uint_eq(net.n_params, 124439808u);
    ck_assert_int_eq(net.seq_len, 1024);
    ck_assert_int_eq(net.n, 1 + 12 * 10 + 2);
    ck_assert_int_eq(net.input.n, 1);
    ck_assert_int_eq(net.input.d[0], 1024);
    ck_assert_int_eq(net.out_numel, (int64_t)1024 * 50257);
    /* named_parameters() order, nanoGPT's names */
    static const char *const first[] = {
        "transformer.wte.weight", "transformer.wpe.weight", "transformer.h.0.ln_1.weight",
        "transformer.h.0.ln_1.bias", "transformer.h.0.attn.c_attn.weight",
        "transformer.h.0.attn.c_attn.bias", "transformer.h.0.attn.c_proj.weight",
        "transformer.h.0.attn.c_proj.bias", "transformer.h.0.ln_2.weight",
        "transformer.h.0.ln_2.bias", "transformer.h.0.mlp.c_fc.weight",
        "transformer.h.0.mlp.c_fc.bias", "transformer.h.0.mlp.c_proj.weight",
        "transformer.h.0.mlp.c_proj.bias", "transformer.h.1.ln_1.weight",
    };
    for (size_t i = 0; i < sizeof first / sizeof *first; i++)
        ck_assert_str_eq(net.tensor[i].name, first[i]);
    ck_assert_int_eq(net.n_tensors, 2 + 12 * 12 + 2);
    ck_assert_str_eq(net.tensor[net.n_tensors - 1].name, "transformer.ln_f.bias");
    ck_assert_int_eq(net.tensor[4].shape[0], 3 * 768);   /* nn.Linear's [out, in] */
    ck_assert_int_eq(net.tensor[4].shape[1], 768);
    /* lm_head: tied to wte, no parameters of its own, exported under its name */
    const struct ddpc_lnode *head = &net.node[net.n - 1];
    ck_assert_str_eq(head->name, "lm_head");
    ck_assert_int_eq(head->tie, 0);
    ck_assert_uint_eq(head->w_off, net.node[0].w_off);
    ck_assert_int_eq(net.tie_tensor, 0);
    ck_assert_str_eq(net.tie_name, "lm_head.weight");
    /* attention's node: heads and the [T, 3C] -> [T, C] rows */
    const struct ddpc_lnode *att = &net.node[3];
    ck_assert_int_eq(att->it.type, DDPC_LAYER_ATTENTION);
    ck_assert_int_eq(att->it.heads, 12);
    ck_assert_int_eq(att->out.d[1], 768);
    double per_tok = (net.fwd_flops + net.bwd_flops) / 1024;
    double nano = 6.0 * (124439808.0 - 1024 * 768) + 12.0 * 12 * 1024 * 768;
    ck_assert_double_lt(fabs(per_tok / nano - 1), 0.01);
    built_free(&b);

    /* no biases: layer norms and linears without them (nanoGPT bias=False) */
    ck_assert_int_ge(asprintf(&yaml, HEAD "model:\n  type: gpt\n  vocab_size: 256\n"
                              "  block_size: 8\n  n_layer: 2\n  n_head: 2\n  n_embd: 16\n"
                              "  bias: false\n  dropout: 0.1\n"
                              "data:\n  train: {format: text, path: %s}\n", text), 0);
    build_spec(&b, yaml);
    free(yaml);
    ck_assert_int_eq(layers_build(&b.job, NULL, &net, &bad, why, sizeof why), 0);
    for (int t = 0; t < net.n_tensors; t++)
        ck_assert_ptr_null(strstr(net.tensor[t].name, ".bias"));
    /* 256*16 + 8*16 + 2 * (16 + 48*16 + 16*16 + 16 + 64*16 + 16*64) + 16 */
    ck_assert_uint_eq(net.n_params, 4096u + 128 + 2 * (16 + 768 + 256 + 16 + 1024 + 1024) + 16);
    ck_assert_int_eq(net.has_dropout, 1);
    ck_assert_str_eq(net.node[1].name, "transformer.drop");
    built_free(&b);
    rm_tree(dir);
    free(dir);
    free(text);
}
END_TEST

/* model.h's contract: forward and backward never allocate after
 * model_init (a training step must not fail or stall in malloc). Every
 * layer type, a conv2d whose input gradient adds to a residual's (col2im
 * with accx, which once malloc'ed a plane per call), train and eval. */
START_TEST(step_never_allocates)
{
    struct built b;
    build_spec(&b, HEAD "model:\n  type: sequential\n  input: [2, 8, 8]\n  layers:\n"
               "    - conv2d: {out_channels: 4, kernel_size: 3, padding: 1}\n"
               "    - residual:\n        - conv2d: {out_channels: 4, kernel_size: 3, padding: 1}\n"
               "        - batchnorm2d\n        - relu\n"
               "    - maxpool2d: {kernel_size: 2}\n    - avgpool2d: {kernel_size: 2, padding: 1}\n"
               "    - leaky_relu\n    - adaptiveavgpool2d\n    - flatten\n"
               "    - linear: {out_features: 6}\n    - batchnorm1d\n    - gelu\n"
               "    - dropout: {p: 0.5}\n    - linear: {out_features: 5}\n    - layernorm\n"
               "    - silu\n    - tanh\n    - sigmoid\n    - linear: {out_features: 3}\n"
               "data:\n  train: {format: synthetic, samples: 64, features: 128, classes: 3}\n");
    struct ddpc_ops o;
    struct ddpc_err e = { 0 };
    ck_assert_int_eq(ops_cpu_init(&o, &e), 0);
    struct ddpc_model m;
    enum { ROWS = 5 };
    ck_assert_msg(model_init(&m, &o, &b.job, ROWS, &e) == 0, "%s", e.msg);
    ck_assert_int_eq(model_init_params(&m, DDPC_INIT_PYTORCH, 3, &e), 0);
    float x[ROWS * 128];
    int32_t lab[ROWS];
    for (int i = 0; i < ROWS * 128; i++)
        x[i] = (float)(i % 11) - 5.0f;
    for (int i = 0; i < ROWS; i++)
        lab[i] = i % 3;
    double acc[DDPC_LOSS_ACC] = { 0 };
    int rc = 0;
    /* no ck_assert inside: Check's own location records allocate */
    alloc_count_start();
    for (int step = 0; step < 2 && rc == 0; step++) {   /* overwrite, then accumulate */
        model_set_mode(&m, 1, 7 + (uint64_t)step);
        rc = model_forward(&m, x, ROWS, &e);
        if (rc == 0)
            rc = o.loss(&o, DDPC_LOSS_CROSS_ENTROPY, m.logits, lab, NULL, m.dbuf[0], ROWS, 3,
                        1.0f / ROWS, acc, &e);
        if (rc == 0)
            rc = model_backward(&m, x, m.dbuf[0], ROWS, step, NULL, NULL, &e);
    }
    model_set_mode(&m, 0, 0);
    if (rc == 0)
        rc = model_forward(&m, x, ROWS - 1, &e);
    long n = alloc_count_stop();
    ck_assert_msg(rc == 0, "%s", e.msg);
    ck_assert_msg(n == 0, "forward/backward made %ld allocations", n);
    ck_assert(isfinite(acc[0]));
    /* the counter itself works: model_init allocates */
    struct ddpc_model m2;
    alloc_count_start();
    ck_assert_int_eq(model_init(&m2, &o, &b.job, ROWS, &e), 0);
    ck_assert_int_gt(alloc_count_stop(), 0);
    model_free(&m2);
    model_free(&m);
    o.destroy(&o);
    built_free(&b);
}
END_TEST

Suite *layers_suite(void)
{
    Suite *s = suite_create("layers");
    TCase *t = tcase_create("parity");
    tcase_set_timeout(t, 600);
    tcase_add_test(t, parity_linear_and_activations);
    tcase_add_test(t, parity_conv_pools);
    tcase_add_test(t, parity_norms);
    tcase_add_test(t, parity_residual_dropout);
    tcase_add_test(t, parity_example_cnn);
    tcase_add_test(t, deep_residual_names_are_pytorchs);
    suite_add_tcase(s, t);
    TCase *u = tcase_create("runtime");
    tcase_add_test(u, plan_buckets_are_runtime_buckets);
    tcase_add_test(u, train_and_eval_modes);
    tcase_add_test(u, conv_chunks_are_the_whole_batch);
    tcase_add_test(u, relu_backward_in_pooling_same_bits);
    tcase_add_test(u, gpt_lowering_is_nanogpt);
    tcase_add_test(u, step_never_allocates);
    suite_add_tcase(s, u);
    return s;
}
