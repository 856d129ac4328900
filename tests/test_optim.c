/* test_optim.c - optim.c: optimizers over flat buffers, schedule, clipping.
 *
 * Each optimizer for several steps against the same steps computed by hand
 * in double the way torch.optim does (weight decay, nesterov, AdamW's
 * decoupled decay); lr scaling; warmup + constant/cosine/step schedule at
 * key steps; clip_grad_norm_'s factor, applied through grad_scale. */
#include <math.h>
#include <string.h>
#include "suites.h"
#include "optim.h"

#define N 5

static void job_base(struct ddpc_job *j, int type)
{
    memset(j, 0, sizeof *j);
    j->learning_rate = 0.05;
    j->grad_accumulation = 1;
    j->optimizer.type = (enum ddpc_optimizer_type)type;
    j->optimizer.beta1 = 0.9;
    j->optimizer.beta2 = 0.999;
    j->optimizer.eps = 1e-8;
    j->schedule.warmup_start_factor = 1;
    j->schedule.gamma = 0.1;
}

static const float g_seq[3][N] = {
    { 0.5f, -0.2f, 0.0f, 1.5f, -0.7f },
    { 0.1f, 0.3f, -0.4f, 0.2f, 0.05f },
    { -0.6f, 0.2f, 0.9f, -0.1f, 0.4f },
};

/* Runs three optim_step calls and compares with a double reference. */
static void run_vs_reference(struct ddpc_job *j, float grad_scale)
{
    struct ddpc_ops o;
    struct ddpc_err e = {0};
    ops_cpu_init(&o, &e);
    struct ddpc_optim opt;
    ck_assert_msg(optim_init(&opt, &o, j, 1, N, 100, &e) == 0, "%s", e.msg);
    float p[N] = { 1.0f, -0.5f, 0.25f, 2.0f, -1.0f };
    double pd[N], m[N] = {0}, v[N] = {0};
    for (int i = 0; i < N; i++)
        pd[i] = p[i];
    const double lr = j->learning_rate, wd = j->optimizer.weight_decay;
    const double mu = j->optimizer.momentum, b1 = j->optimizer.beta1, b2 = j->optimizer.beta2;
    for (int t = 1; t <= 3; t++) {
        ck_assert_int_eq(optim_step(&opt, p, g_seq[t - 1], grad_scale, &e), 0);
        ck_assert_int_eq(opt.step, t);
        for (int i = 0; i < N; i++) {
            double g = (double)g_seq[t - 1][i] * grad_scale;
            switch (j->optimizer.type) {
            case DDPC_OPTIM_SGD:
                g += wd * pd[i];
                if (mu != 0) {
                    m[i] = t == 1 ? g : mu * m[i] + g;
                    g = j->optimizer.nesterov ? g + mu * m[i] : m[i];
                }
                pd[i] -= lr * g;
                break;
            case DDPC_OPTIM_ADAM:
            case DDPC_OPTIM_ADAMW:
                if (j->optimizer.type == DDPC_OPTIM_ADAMW)
                    pd[i] *= 1 - lr * wd;
                else
                    g += wd * pd[i];
                m[i] = b1 * m[i] + (1 - b1) * g;
                v[i] = b2 * v[i] + (1 - b2) * g * g;
                pd[i] -= lr * (m[i] / (1 - pow(b1, t))) /
                         (sqrt(v[i] / (1 - pow(b2, t))) + j->optimizer.eps);
                break;
            }
            ck_assert_msg(fabs(p[i] - pd[i]) < 3e-6 * (1 + fabs(pd[i])),
                          "type %d step %d p[%d] = %.8g, torch arithmetic gives %.8g",
                          j->optimizer.type, t, i, (double)p[i], pd[i]);
        }
    }
    optim_free(&opt);
    optim_free(&opt);
}

START_TEST(sgd_variants)
{
    struct ddpc_job j;
    job_base(&j, DDPC_OPTIM_SGD);
    run_vs_reference(&j, 1.0f);                 /* plain */
    j.optimizer.weight_decay = 0.01;
    run_vs_reference(&j, 1.0f);                 /* + L2 */
    j.optimizer.momentum = 0.9;
    run_vs_reference(&j, 1.0f);                 /* + momentum */
    j.optimizer.nesterov = 1;
    run_vs_reference(&j, 0.5f);                 /* + nesterov, grad_scale */
}
END_TEST

START_TEST(adam_and_adamw)
{
    struct ddpc_job j;
    job_base(&j, DDPC_OPTIM_ADAM);
    run_vs_reference(&j, 1.0f);
    j.optimizer.weight_decay = 0.1;
    run_vs_reference(&j, 1.0f);                 /* L2 in the gradient */
    j.optimizer.type = DDPC_OPTIM_ADAMW;
    run_vs_reference(&j, 1.0f);                 /* decoupled */
    run_vs_reference(&j, 0.25f);
}
END_TEST

START_TEST(adamw_decay_is_decoupled)
{
    /* same grads, same wd: adam and adamw differ, and adamw's step equals an
     * adam step (wd 0) on p * (1 - lr wd) */
    struct ddpc_job ja, jw, j0;
    job_base(&ja, DDPC_OPTIM_ADAM);
    job_base(&jw, DDPC_OPTIM_ADAMW);
    job_base(&j0, DDPC_OPTIM_ADAM);
    ja.optimizer.weight_decay = jw.optimizer.weight_decay = 0.5;
    struct ddpc_ops o;
    struct ddpc_err e = {0};
    ops_cpu_init(&o, &e);
    struct ddpc_optim oa, ow, o0;
    optim_init(&oa, &o, &ja, 1, N, 10, &e);
    optim_init(&ow, &o, &jw, 1, N, 10, &e);
    optim_init(&o0, &o, &j0, 1, N, 10, &e);
    float pa[N] = { 1, 1, 1, 1, 1 }, pw[N] = { 1, 1, 1, 1, 1 }, p0[N];
    for (int i = 0; i < N; i++)
        p0[i] = 1.0f * (1.0f - 0.05f * 0.5f);
    optim_step(&oa, pa, g_seq[0], 1.0f, &e);
    optim_step(&ow, pw, g_seq[0], 1.0f, &e);
    optim_step(&o0, p0, g_seq[0], 1.0f, &e);
    ck_assert(fabsf(pa[2] - pw[2]) > 1e-3f);   /* g = 0: adam still moves by L2 */
    for (int i = 0; i < N; i++)
        ck_assert_float_eq_tol(pw[i], p0[i], 1e-6f);
    optim_free(&oa);
    optim_free(&ow);
    optim_free(&o0);
}
END_TEST

/* Three steps from p = [1, -0.5, 0.25, 2, -1] with g_seq, lr 0.05, printed by
 * PyTorch 1.13 (torch.optim, CPU, float32) with %.9g. AdamW and SGD with
 * momentum agree bit for bit; ATen fuses `add(x, alpha=a)` into an FMA, so
 * Adam's L2 term and Nesterov's sum may differ in the last bit or two. */
START_TEST(matches_torch_optim_printed_values)
{
    static const struct { int type; double wd, mom; int nest; float want[N]; } ref[] = {
        { DDPC_OPTIM_ADAM,  0.1, 0, 0,
          { 0.900636256f, -0.468047649f, 0.215686366f, 1.87558508f, -0.900313139f } },
        { DDPC_OPTIM_ADAMW, 0.1, 0, 0,
          { 0.899883389f, -0.479231298f, 0.265775412f, 1.85540974f, -0.900134325f } },
        { DDPC_OPTIM_SGD, 0.01, 0.9, 1,
          { 0.953591704f, -0.523273885f, 0.217658669f, 1.71683705f, -0.920564651f } },
        { DDPC_OPTIM_SGD, 0.01, 0.9, 0,
          { 0.949996173f, -0.510009587f, 0.242289037f, 1.77728987f, -0.927161455f } },
    };
    struct ddpc_ops o;
    struct ddpc_err e = {0};
    ops_cpu_init(&o, &e);
    for (size_t k = 0; k < sizeof ref / sizeof ref[0]; k++) {
        struct ddpc_job j;
        job_base(&j, ref[k].type);
        j.optimizer.weight_decay = ref[k].wd;
        j.optimizer.momentum = ref[k].mom;
        j.optimizer.nesterov = ref[k].nest;
        struct ddpc_optim opt;
        ck_assert_int_eq(optim_init(&opt, &o, &j, 1, N, 10, &e), 0);
        float p[N] = { 1.0f, -0.5f, 0.25f, 2.0f, -1.0f };
        for (int t = 0; t < 3; t++)
            ck_assert_int_eq(optim_step(&opt, p, g_seq[t], 1.0f, &e), 0);
        for (int i = 0; i < N; i++) {
            float ulp = nextafterf(fabsf(ref[k].want[i]), INFINITY) - fabsf(ref[k].want[i]);
            ck_assert_msg(fabsf(p[i] - ref[k].want[i]) <= 4 * ulp,
                          "case %zu p[%d] = %.9g, torch printed %.9g", k, i, (double)p[i],
                          (double)ref[k].want[i]);
            if (ref[k].type == DDPC_OPTIM_ADAMW)
                ck_assert_float_eq(p[i], ref[k].want[i]);
        }
        optim_free(&opt);
    }
}
END_TEST

START_TEST(schedule_key_points)
{
    struct ddpc_job j;
    job_base(&j, DDPC_OPTIM_ADAM);
    j.learning_rate = 0.1;
    struct ddpc_ops o;
    struct ddpc_err e = {0};
    ops_cpu_init(&o, &e);
    struct ddpc_optim opt;

    /* lr scaling by world 4 x accumulation 2 */
    j.grad_accumulation = 2;
    j.lr_scaling = DDPC_LR_SCALING_LINEAR;
    optim_init(&opt, &o, &j, 4, N, 100, &e);
    ck_assert_double_eq_tol(optim_lr(&opt, 0), 0.8, 1e-12);
    optim_free(&opt);
    j.lr_scaling = DDPC_LR_SCALING_SQRT;
    optim_init(&opt, &o, &j, 4, N, 100, &e);
    ck_assert_double_eq_tol(optim_lr(&opt, 50), 0.1 * sqrt(8.0), 1e-12);
    optim_free(&opt);
    j.lr_scaling = DDPC_LR_SCALING_NONE;
    j.grad_accumulation = 1;

    /* warmup 10 from 0.1, then cosine over the remaining 90 steps to 0.01 */
    j.schedule.warmup_steps = 10;
    j.schedule.warmup_start_factor = 0.1;
    j.schedule.decay = DDPC_DECAY_COSINE;
    j.schedule.min_lr_factor = 0.01;
    optim_init(&opt, &o, &j, 2, N, 100, &e);
    ck_assert_double_eq_tol(optim_lr(&opt, 0), 0.01, 1e-12);
    ck_assert_double_eq_tol(optim_lr(&opt, 5), 0.1 * (0.1 + 0.9 * 0.5), 1e-12);
    ck_assert_double_eq_tol(optim_lr(&opt, 10), 0.1, 1e-12);
    ck_assert_double_eq_tol(optim_lr(&opt, 55), 0.1 * (0.01 + 0.99 * 0.5), 1e-12);
    ck_assert_double_eq_tol(optim_lr(&opt, 100), 0.001, 1e-12);
    ck_assert_double_eq_tol(optim_lr(&opt, 150), 0.001, 1e-12);   /* clamps */
    for (int t = 11; t < 100; t++)
        ck_assert(optim_lr(&opt, t) < optim_lr(&opt, t - 1));
    optim_free(&opt);

    /* step decay every 30 steps by 0.5, after 10 warmup steps; constant */
    j.schedule.decay = DDPC_DECAY_STEP;
    j.schedule.step_size = 30;
    j.schedule.gamma = 0.5;
    optim_init(&opt, &o, &j, 1, N, 100, &e);
    ck_assert_double_eq_tol(optim_lr(&opt, 39), 0.1, 1e-12);
    ck_assert_double_eq_tol(optim_lr(&opt, 40), 0.05, 1e-12);
    ck_assert_double_eq_tol(optim_lr(&opt, 70), 0.025, 1e-12);
    optim_free(&opt);
    j.schedule.decay = DDPC_DECAY_CONSTANT;
    j.schedule.warmup_steps = 0;
    optim_init(&opt, &o, &j, 1, N, 100, &e);
    ck_assert_double_eq_tol(optim_lr(&opt, 0), 0.1, 1e-12);
    ck_assert_double_eq_tol(optim_lr(&opt, 99), 0.1, 1e-12);
    /* the step uses the schedule's lr of its own (0-based) index */
    float p[N] = {0};
    optim_step(&opt, p, g_seq[0], 1.0f, &e);
    ck_assert_float_eq_tol(p[0], -0.1f, 1e-6f);   /* adam's first step: lr * sign(g) */
    optim_free(&opt);
}
END_TEST

START_TEST(clipping)
{
    /* torch clip_grad_norm_(max_norm=1): coef = 1 / (norm + 1e-6), capped at 1 */
    ck_assert_float_eq(optim_clip_scale(0.25, 1.0), 1.0f);
    ck_assert_float_eq_tol(optim_clip_scale(25.0, 1.0), (float)(1.0 / (5.0 + 1e-6)), 1e-9f);
    ck_assert_float_eq(optim_clip_scale(1e9, 0.0), 1.0f);   /* off */
    /* through sgd: a clipped step is the unclipped step scaled */
    struct ddpc_job j;
    job_base(&j, DDPC_OPTIM_SGD);
    j.learning_rate = 1.0;
    struct ddpc_ops o;
    struct ddpc_err e = {0};
    ops_cpu_init(&o, &e);
    struct ddpc_optim opt;
    optim_init(&opt, &o, &j, 1, 2, 1, &e);
    float p[2] = {0, 0}, g[2] = { 3.0f, 4.0f };
    double ss = 0;
    o.sumsq(&o, g, 2, &ss, &e);
    optim_step(&opt, p, g, optim_clip_scale(ss, 1.0), &e);
    ck_assert_float_eq_tol(p[0], -0.6f, 1e-6f);
    ck_assert_float_eq_tol(p[1], -0.8f, 1e-6f);
    ck_assert_float_eq(g[0], 3.0f);   /* grads themselves untouched */
    optim_free(&opt);
}
END_TEST

Suite *optim_suite(void)
{
    Suite *s = suite_create("optim");
    TCase *tc = tcase_create("optim");
    tcase_add_test(tc, sgd_variants);
    tcase_add_test(tc, adam_and_adamw);
    tcase_add_test(tc, adamw_decay_is_decoupled);
    tcase_add_test(tc, matches_torch_optim_printed_values);
    tcase_add_test(tc, schedule_key_points);
    tcase_add_test(tc, clipping);
    suite_add_tcase(s, tc);
    return s;
}
