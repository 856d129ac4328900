/* test_kernels.c - ops_kernels.h: the element-wise math both backends run.
 *
 * Activations against reference values and their derivatives against
 * central finite differences (in double, around float evaluations);
 * ddpc_k_sgd / ddpc_k_adam against steps computed by hand the way
 * torch.optim.SGD / Adam / AdamW compute them. */
#include <math.h>
#include "suites.h"
#include "ops_kernels.h"

static const int acts[] = { DDPC_K_RELU, DDPC_K_GELU, DDPC_K_TANH, DDPC_K_SIGMOID,
                            DDPC_K_IDENTITY };

START_TEST(act_values)
{
    ck_assert_float_eq(ddpc_k_act(DDPC_K_RELU, -2.0f), 0.0f);
    ck_assert_float_eq(ddpc_k_act(DDPC_K_RELU, 3.5f), 3.5f);
    /* torch.nn.GELU()(1.0) = 0.8413447, (-1.0) = -0.1586553 */
    ck_assert_float_eq_tol(ddpc_k_act(DDPC_K_GELU, 1.0f), 0.8413447f, 1e-6f);
    ck_assert_float_eq_tol(ddpc_k_act(DDPC_K_GELU, -1.0f), -0.1586553f, 1e-6f);
    ck_assert_float_eq_tol(ddpc_k_act(DDPC_K_TANH, 0.5f), 0.46211716f, 1e-6f);
    ck_assert_float_eq_tol(ddpc_k_act(DDPC_K_SIGMOID, 0.0f), 0.5f, 1e-7f);
    ck_assert_float_eq_tol(ddpc_k_act(DDPC_K_SIGMOID, 2.0f), 0.88079708f, 1e-6f);
    ck_assert_float_eq(ddpc_k_act(DDPC_K_IDENTITY, -7.25f), -7.25f);
    /* saturation stays finite */
    ck_assert(isfinite(ddpc_k_act(DDPC_K_SIGMOID, -100.0f)));
    ck_assert(isfinite(ddpc_k_act_grad(DDPC_K_SIGMOID, 100.0f)));
    ck_assert(isfinite(ddpc_k_act_grad(DDPC_K_GELU, -30.0f)));
}
END_TEST

START_TEST(act_grads_match_finite_differences)
{
    const float zs[] = { -3.0f, -1.3f, -0.4f, 0.2f, 0.9f, 2.7f };
    for (size_t a = 0; a < sizeof acts / sizeof acts[0]; a++) {
        for (size_t i = 0; i < sizeof zs / sizeof zs[0]; i++) {
            float z = zs[i];
            double h = 1e-3;
            double fd = ((double)ddpc_k_act(acts[a], (float)(z + h)) -
                         (double)ddpc_k_act(acts[a], (float)(z - h))) / (2 * h);
            double g = ddpc_k_act_grad(acts[a], z);
            ck_assert_msg(fabs(fd - g) < 2e-3 + 1e-3 * fabs(g),
                          "act %d at z=%g: derivative %g, finite difference %g", acts[a],
                          (double)z, g, fd);
        }
    }
    ck_assert_float_eq(ddpc_k_act_grad(DDPC_K_RELU, -0.5f), 0.0f);
    ck_assert_float_eq(ddpc_k_act_grad(DDPC_K_RELU, 0.5f), 1.0f);
    ck_assert_float_eq(ddpc_k_act_grad(DDPC_K_IDENTITY, 123.0f), 1.0f);
}
END_TEST

/* torch.optim.SGD(lr=0.1, momentum=0.9, weight_decay=0.01[, nesterov]) */
START_TEST(sgd_matches_torch)
{
    /* plain: p -= lr * g */
    float p = 1.0f;
    ddpc_k_sgd(&p, 0.5f, NULL, 0.1f, 0.0f, 0, 0.0f, 1);
    ck_assert_float_eq_tol(p, 0.95f, 1e-7f);

    /* momentum + weight decay, two steps */
    float buf = 0.0f;
    double pd = 1.0, bd = 0.0;
    p = 1.0f;
    const float g[2] = { 0.5f, -0.25f };
    for (int t = 0; t < 2; t++) {
        double d = g[t] + 0.01 * pd;
        bd = t == 0 ? d : 0.9 * bd + d;
        pd -= 0.1 * bd;
        ddpc_k_sgd(&p, g[t], &buf, 0.1f, 0.9f, 0, 0.01f, t == 0);
        ck_assert_float_eq_tol(buf, (float)bd, 1e-6f);
        ck_assert_float_eq_tol(p, (float)pd, 1e-6f);
    }

    /* nesterov: p -= lr * (d + mu * buf) */
    buf = 0.0f;
    pd = 1.0;
    bd = 0.0;
    p = 1.0f;
    for (int t = 0; t < 2; t++) {
        double d = g[t] + 0.01 * pd;
        bd = t == 0 ? d : 0.9 * bd + d;
        pd -= 0.1 * (d + 0.9 * bd);
        ddpc_k_sgd(&p, g[t], &buf, 0.1f, 0.9f, 1, 0.01f, t == 0);
        ck_assert_float_eq_tol(p, (float)pd, 1e-6f);
    }
}
END_TEST

/* torch.optim.Adam / AdamW, three steps, computed in double by hand. */
static void adam_reference(int decoupled, double wd, double *p_out)
{
    const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8;
    const double g[3] = { 0.5, -0.1, 0.3 };
    double p = 0.8, m = 0, v = 0;
    for (int t = 1; t <= 3; t++) {
        double gg = g[t - 1];
        if (decoupled)
            p *= 1 - lr * wd;
        else
            gg += wd * p;
        m = b1 * m + (1 - b1) * gg;
        v = b2 * v + (1 - b2) * gg * gg;
        double mhat = m / (1 - pow(b1, t)), vhat = v / (1 - pow(b2, t));
        p -= lr * mhat / (sqrt(vhat) + eps);
        p_out[t - 1] = p;
    }
}

START_TEST(adam_and_adamw_match_torch)
{
    for (int dec = 0; dec <= 1; dec++) {
        double ref[3];
        adam_reference(dec, 0.1, ref);
        float p = 0.8f, m = 0, v = 0;
        const float g[3] = { 0.5f, -0.1f, 0.3f };
        for (int t = 1; t <= 3; t++) {
            float bc1 = (float)(1 - pow(0.9, t)), bc2 = (float)(1 - pow(0.999, t));
            ddpc_k_adam(&p, g[t - 1], &m, &v, 0.01f, 0.9f, 0.999f, 1e-8f, 0.1f, dec, bc1, bc2);
            ck_assert_msg(fabs(p - ref[t - 1]) < 2e-6, "%s step %d: %.9g vs %.9g",
                          dec ? "adamw" : "adam", t, (double)p, ref[t - 1]);
        }
    }
    /* the exact form with host constants: one step by hand in float, torch's order */
    {
        float p = 0.8f, m = 0.2f, v = 0.01f, g = 0.5f;
        float omb1 = (float)(1 - 0.9), omb2 = (float)(1 - 0.999);
        float ss = (float)(0.01 / (1 - 0.9 * 0.9)), bq = (float)sqrt(1 - 0.999 * 0.999);
        float decay = (float)(1 - 0.01 * 0.1);
        float pe = p * decay, me = m * 0.9f + omb1 * g, ve = v * 0.999f + omb2 * g * g;
        pe += (-ss) * me / (sqrtf(ve) / bq + 1e-8f);
        ddpc_k_adam_exact(&p, g, &m, &v, 0.9f, 0.999f, omb1, omb2, 1e-8f, 0.1f, 1, decay, ss, bq);
        ck_assert_float_eq(m, me);
        ck_assert_float_eq(v, ve);
        ck_assert_float_eq(p, pe);
    }
    /* the first Adam step moves by lr * sign(g), whatever |g| */
    float p = 1.0f, m = 0, v = 0;
    ddpc_k_adam(&p, 123.0f, &m, &v, 0.001f, 0.9f, 0.999f, 1e-8f, 0.0f, 0, 0.1f,
                (float)(1 - 0.999));
    ck_assert_float_eq_tol(p, 0.999f, 1e-6f);
    /* adamw's decay is decoupled: with g = 0 only p *= 1 - lr*wd happens */
    p = 2.0f;
    m = v = 0;
    ddpc_k_adam(&p, 0.0f, &m, &v, 0.1f, 0.9f, 0.999f, 1e-8f, 0.5f, 1, 0.1f, 0.001f);
    ck_assert_float_eq_tol(p, 1.9f, 1e-6f);
    ck_assert_float_eq(m, 0.0f);
    /* while adam's L2 term enters the moments */
    p = 2.0f;
    m = v = 0;
    ddpc_k_adam(&p, 0.0f, &m, &v, 0.1f, 0.9f, 0.999f, 1e-8f, 0.5f, 0, 0.1f, 0.001f);
    ck_assert_float_eq_tol(m, 0.1f, 1e-6f);
    ck_assert_float_eq_tol(p, 1.9f, 1e-5f);
}
END_TEST

Suite *kernels_suite(void)
{
    Suite *s = suite_create("kernels");
    TCase *tc = tcase_create("kernels");
    tcase_add_test(tc, act_values);
    tcase_add_test(tc, act_grads_match_finite_differences);
    tcase_add_test(tc, sgd_matches_torch);
    tcase_add_test(tc, adam_and_adamw_match_torch);
    suite_add_tcase(s, tc);
    return s;
}
