/* test_model.c - model.c: layout, seeded init, forward and backward.
 *
 * Every parameter's gradient is checked against a central finite difference
 * of an independent double-precision forward pass written here (so the
 * float forward is checked too): each hidden activation, MLPs of depth 3+,
 * the linear model, cross_entropy and mse. Also: the flat layout
 * (W0 [out,in], b0, W1, ...), the layer-done hook order, accumulation. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "suites.h"
#include "model.h"
#include "ops_kernels.h"
#include "rng.h"

#define ROWS 4

static void job_mlp(struct ddpc_job *j, const int *sizes, int n, int act, int loss)
{
    memset(j, 0, sizeof *j);
    j->model.type = n == 2 ? DDPC_MODEL_LINEAR : DDPC_MODEL_MLP;
    j->model.n_layers = n;
    for (int i = 0; i < n; i++)
        j->model.layers[i] = sizes[i];
    j->model.activation = (enum ddpc_activation)act;
    j->loss = (enum ddpc_loss)loss;
}

static double act_d(int act, double z)
{
    switch (act) {
    case DDPC_K_RELU:    return z > 0 ? z : 0;
    case DDPC_K_GELU:    return 0.5 * z * (1 + erf(z / sqrt(2.0)));
    case DDPC_K_TANH:    return tanh(z);
    case DDPC_K_SIGMOID: return 1 / (1 + exp(-z));
    default:             return z;
    }
}

/* Mean loss over rows, in double, from parameters p (model layout). */
static double ref_loss(const struct ddpc_model *m, const double *p, const float *x,
                       const int32_t *lab, const float *y, int loss, int rows)
{
    double a[64], next[64], total = 0;
    for (int r = 0; r < rows; r++) {
        int w = m->net.node[0].channels;
        for (int i = 0; i < w; i++)
            a[i] = x[r * w + i];
        /* the lowered node list: linear, activation, linear, ... */
        for (int k = 0; k < m->net.n; k++) {
            const struct ddpc_lnode *L = &m->net.node[k];
            if (L->it.type != DDPC_LAYER_LINEAR) {
                int act = L->it.type == DDPC_LAYER_RELU ? DDPC_K_RELU
                        : L->it.type == DDPC_LAYER_GELU ? DDPC_K_GELU
                        : L->it.type == DDPC_LAYER_TANH ? DDPC_K_TANH : DDPC_K_SIGMOID;
                for (int i = 0; i < w; i++)
                    a[i] = act_d(act, a[i]);
                continue;
            }
            int in = L->channels, out = L->it.out;
            for (int o = 0; o < out; o++) {
                double s = p[L->b_off + o];
                for (int i = 0; i < in; i++)
                    s += p[L->w_off + (size_t)o * in + i] * a[i];
                next[o] = s;
            }
            memcpy(a, next, sizeof(double) * out);
            w = out;
        }
        if (loss == DDPC_LOSS_CROSS_ENTROPY) {
            double mx = a[0], s = 0;
            for (int i = 1; i < w; i++)
                if (a[i] > mx) mx = a[i];
            for (int i = 0; i < w; i++)
                s += exp(a[i] - mx);
            total += log(s) + mx - a[lab[r]];
        } else {
            double s = 0;
            for (int i = 0; i < w; i++)
                s += (a[i] - y[r * w + i]) * (a[i] - y[r * w + i]);
            total += s / w;
        }
    }
    return total / rows;
}

struct hook_log { int calls, order[DDPC_MAX_LAYERS]; };

static int hook(void *ctx, int layer, struct ddpc_err *e)
{
    struct hook_log *h = ctx;
    h->order[h->calls++] = layer;
    return 0;
}

/* Builds the model, runs forward/backward in float, checks loss and every
 * gradient against the double reference. */
static void check_gradients(const int *sizes, int n, int act, int loss, uint64_t seed)
{
    struct ddpc_job j;
    job_mlp(&j, sizes, n, act, loss);
    struct ddpc_ops o;
    struct ddpc_err e = {0};
    ck_assert_int_eq(ops_cpu_init(&o, &e), 0);
    struct ddpc_model m;
    ck_assert_msg(model_init(&m, &o, &j, ROWS, &e) == 0, "%s", e.msg);
    ck_assert_int_eq(model_init_params(&m, DDPC_INIT_PYTORCH, seed, &e), 0);
    struct ddpc_rng r;
    rng_seed(&r, seed + 1);
    /* nudge params so relu kinks and biases are exercised */
    for (size_t i = 0; i < m.n_params; i++)
        m.params[i] += (float)(0.3 * (rng_uniform(&r) - 0.5));
    int in = sizes[0], out = sizes[n - 1];
    float x[ROWS * 16], y[ROWS * 16];
    int32_t lab[ROWS];
    for (int i = 0; i < ROWS * in; i++)
        x[i] = (float)(2 * rng_uniform(&r) - 1);
    for (int i = 0; i < ROWS * out; i++)
        y[i] = (float)(2 * rng_uniform(&r) - 1);
    for (int i = 0; i < ROWS; i++)
        lab[i] = (int32_t)rng_below(&r, (uint64_t)out);

    ck_assert_int_eq(model_forward(&m, x, ROWS, &e), 0);
    double lsum[DDPC_LOSS_ACC] = {0, 0, 0};
    ck_assert_int_eq(o.loss(&o, loss, m.logits, loss == DDPC_LOSS_MSE ? NULL : lab,
                            loss == DDPC_LOSS_MSE ? y : NULL, m.dbuf[0], ROWS, out,
                            1.0f / ROWS, lsum, &e), 0);
    struct hook_log h = {0};
    ck_assert_int_eq(model_backward(&m, x, m.dbuf[0], ROWS, 0, hook, &h, &e), 0);
    ck_assert_int_eq(h.calls, n - 1);
    for (int i = 0; i < n - 1; i++)
        ck_assert_int_eq(h.order[i], 2 * (n - 2 - i));   /* reverse order: linear nodes */

    double *p = malloc(m.n_params * sizeof *p);
    for (size_t i = 0; i < m.n_params; i++)
        p[i] = m.params[i];
    double l0 = ref_loss(&m, p, x, lab, y, loss, ROWS);
    ck_assert_msg(fabs(lsum[0] / ROWS - l0) < 1e-5 * (1 + fabs(l0)), "loss %g vs reference %g",
                  lsum[0] / ROWS, l0);
    const double h_fd = 1e-5;
    for (size_t i = 0; i < m.n_params; i++) {
        double keep = p[i];
        p[i] = keep + h_fd;
        double lp = ref_loss(&m, p, x, lab, y, loss, ROWS);
        p[i] = keep - h_fd;
        double lm = ref_loss(&m, p, x, lab, y, loss, ROWS);
        p[i] = keep;
        double fd = (lp - lm) / (2 * h_fd);
        ck_assert_msg(fabs(m.grads[i] - fd) < 1e-4 + 1e-3 * fabs(fd),
                      "sizes[0]=%d layers=%d act=%d loss=%d param %zu: grad %.7g, finite "
                      "difference %.7g", sizes[0], n, act, loss, i, (double)m.grads[i], fd);
    }
    free(p);
    model_free(&m);
    model_free(&m);   /* idempotent */
}

START_TEST(mlp_gradients_each_activation)
{
    const int sizes[] = { 5, 7, 6, 4 };   /* depth 3 */
    int act = _i;
    check_gradients(sizes, 4, act, DDPC_LOSS_CROSS_ENTROPY, 11 + act);
    check_gradients(sizes, 4, act, DDPC_LOSS_MSE, 21 + act);
}
END_TEST

START_TEST(deep_mlp_and_linear_gradients)
{
    const int deep[] = { 6, 8, 5, 7, 3 };   /* depth 4 */
    check_gradients(deep, 5, DDPC_ACT_TANH, DDPC_LOSS_CROSS_ENTROPY, 5);
    check_gradients(deep, 5, DDPC_ACT_RELU, DDPC_LOSS_MSE, 6);
    const int lin[] = { 5, 3 };
    check_gradients(lin, 2, DDPC_ACT_RELU, DDPC_LOSS_CROSS_ENTROPY, 7);
    check_gradients(lin, 2, DDPC_ACT_RELU, DDPC_LOSS_MSE, 8);
}
END_TEST

START_TEST(layout_and_init)
{
    const int sizes[] = { 784, 256, 10 };
    struct ddpc_job j;
    job_mlp(&j, sizes, 3, DDPC_ACT_RELU, DDPC_LOSS_CROSS_ENTROPY);
    struct ddpc_ops o;
    struct ddpc_err e = {0};
    ops_cpu_init(&o, &e);
    struct ddpc_model m, m2;
    ck_assert_int_eq(model_init(&m, &o, &j, 8, &e), 0);
    ck_assert_uint_eq(m.n_params, 784 * 256 + 256 + 256 * 10 + 10);
    /* lowered: linear, relu, linear (no activation after the last) */
    ck_assert_int_eq(m.net.n, 3);
    ck_assert_uint_eq(m.net.node[0].w_off, 0);
    ck_assert_uint_eq(m.net.node[0].b_off, 784 * 256);
    ck_assert_uint_eq(m.net.node[2].w_off, 784 * 256 + 256);
    ck_assert_uint_eq(m.net.node[2].b_off, 784 * 256 + 256 + 2560);
    ck_assert_int_eq(m.net.node[1].it.type, DDPC_LAYER_RELU);
    ck_assert_int_eq(m.net.node[2].it.type, DDPC_LAYER_LINEAR);
    ck_assert_str_eq(m.net.tensor[2].name, "layers.1.weight");
    ck_assert_ptr_eq(m.logits, m.y[2]);

    /* pytorch init: |W0|, |b0| <= 1/sqrt(784), roughly uniform; same seed same values */
    ck_assert_int_eq(model_init_params(&m, DDPC_INIT_PYTORCH, 42, &e), 0);
    double bound = 1 / sqrt(784.0), mx = 0, mean = 0;
    for (size_t i = 0; i < 784 * 256 + 256; i++) {
        mx = fmax(mx, fabs(m.params[i]));
        mean += m.params[i];
    }
    ck_assert(mx <= bound && mx > 0.99 * bound);
    ck_assert(fabs(mean / (784 * 256)) < 0.01 * bound);
    ck_assert_int_eq(model_init(&m2, &o, &j, 8, &e), 0);
    ck_assert_int_eq(model_init_params(&m2, DDPC_INIT_PYTORCH, 42, &e), 0);
    ck_assert_mem_eq(m.params, m2.params, m.n_params * sizeof(float));
    ck_assert_int_eq(model_init_params(&m2, DDPC_INIT_PYTORCH, 43, &e), 0);
    ck_assert(memcmp(m.params, m2.params, m.n_params * sizeof(float)) != 0);

    /* xavier: bound sqrt(6/(in+out)), zero bias; kaiming: std sqrt(2/in) */
    ck_assert_int_eq(model_init_params(&m2, DDPC_INIT_XAVIER_UNIFORM, 1, &e), 0);
    mx = 0;
    for (size_t i = 0; i < 784 * 256; i++)
        mx = fmax(mx, fabs(m2.params[i]));
    ck_assert(mx <= sqrt(6.0 / (784 + 256)) && mx > 0.99 * sqrt(6.0 / (784 + 256)));
    ck_assert_float_eq(m2.params[m2.net.node[0].b_off + 3], 0.0f);
    ck_assert_int_eq(model_init_params(&m2, DDPC_INIT_KAIMING_NORMAL, 1, &e), 0);
    double ss = 0;
    for (size_t i = 0; i < 784 * 256; i++)
        ss += (double)m2.params[i] * m2.params[i];
    ck_assert_double_eq_tol(sqrt(ss / (784 * 256)), sqrt(2.0 / 784), 0.01 * sqrt(2.0 / 784));
    model_free(&m);
    model_free(&m2);

    /* bad shapes are refused; free after a failed init is safe */
    j.model.n_layers = 1;
    ck_assert_int_lt(model_init(&m, &o, &j, 8, &e), 0);
    model_free(&m);
}
END_TEST

START_TEST(accumulate_adds)
{
    const int sizes[] = { 3, 4, 2 };
    struct ddpc_job j;
    job_mlp(&j, sizes, 3, DDPC_ACT_SIGMOID, DDPC_LOSS_CROSS_ENTROPY);
    struct ddpc_ops o;
    struct ddpc_err e = {0};
    ops_cpu_init(&o, &e);
    struct ddpc_model m;
    ck_assert_int_eq(model_init(&m, &o, &j, 2, &e), 0);
    ck_assert_int_eq(model_init_params(&m, DDPC_INIT_PYTORCH, 1, &e), 0);
    float x[6] = { 0.1f, -0.2f, 0.3f, 0.5f, 0.4f, -0.6f };
    int32_t lab[2] = { 0, 1 };
    float once[64];
    for (int pass = 0; pass < 2; pass++) {
        ck_assert_int_eq(model_forward(&m, x, 2, &e), 0);
        ck_assert_int_eq(o.loss(&o, DDPC_LOSS_CROSS_ENTROPY, m.logits, lab, NULL, m.dbuf[0], 2,
                                2, 0.5f, NULL, &e), 0);
        ck_assert_int_eq(model_backward(&m, x, m.dbuf[0], 2, pass, NULL, NULL, &e), 0);
        if (pass == 0)
            memcpy(once, m.grads, m.n_params * sizeof(float));
    }
    for (size_t i = 0; i < m.n_params; i++)
        ck_assert_float_eq_tol(m.grads[i], 2 * once[i], 1e-7f);
    model_free(&m);
}
END_TEST

Suite *model_suite(void)
{
    Suite *s = suite_create("model");
    TCase *tc = tcase_create("model");
    tcase_add_loop_test(tc, mlp_gradients_each_activation, DDPC_ACT_RELU, DDPC_ACT_SIGMOID + 1);
    tcase_add_test(tc, deep_mlp_and_linear_gradients);
    tcase_add_test(tc, layout_and_init);
    tcase_add_test(tc, accumulate_adds);
    suite_add_tcase(s, tc);
    return s;
}
