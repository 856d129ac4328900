/* test_optim.c - optim.c: optimizers over flat buffers, schedule, clipping.
 *
 * Each optimizer for several steps against the same steps computed by hand
 * in double the way torch.optim does (weight decay, nesterov, AdamW's
 * decoupled decay); lr scaling; warmup + constant/cosine/step schedule at
 * key steps; clip_grad_norm_'s factor, applied through grad_scale; weight
 * decay on 2+-D tensors only (optimizer.weight_decay_on: weights) against
 * torch.optim with nanoGPT's two parameter groups, run by /usr/bin/python3. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "suites.h"
#include "testutil.h"
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
    ck_assert_msg(optim_init(&opt, &o, j, NULL, 1, N, 100, &e) == 0, "%s", e.msg);
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
    optim_init(&oa, &o, &ja, NULL, 1, N, 10, &e);
    optim_init(&ow, &o, &jw, NULL, 1, N, 10, &e);
    optim_init(&o0, &o, &j0, NULL, 1, N, 10, &e);
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
        ck_assert_int_eq(optim_init(&opt, &o, &j, NULL, 1, N, 10, &e), 0);
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
    optim_init(&opt, &o, &j, NULL, 4, N, 100, &e);
    ck_assert_double_eq_tol(optim_lr(&opt, 0), 0.8, 1e-12);
    optim_free(&opt);
    j.lr_scaling = DDPC_LR_SCALING_SQRT;
    optim_init(&opt, &o, &j, NULL, 4, N, 100, &e);
    ck_assert_double_eq_tol(optim_lr(&opt, 50), 0.1 * sqrt(8.0), 1e-12);
    optim_free(&opt);
    j.lr_scaling = DDPC_LR_SCALING_NONE;
    j.grad_accumulation = 1;

    /* warmup 10 from 0.1, then cosine over the remaining 90 steps to 0.01 */
    j.schedule.warmup_steps = 10;
    j.schedule.warmup_start_factor = 0.1;
    j.schedule.decay = DDPC_DECAY_COSINE;
    j.schedule.min_lr_factor = 0.01;
    optim_init(&opt, &o, &j, NULL, 2, N, 100, &e);
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
    optim_init(&opt, &o, &j, NULL, 1, N, 100, &e);
    ck_assert_double_eq_tol(optim_lr(&opt, 39), 0.1, 1e-12);
    ck_assert_double_eq_tol(optim_lr(&opt, 40), 0.05, 1e-12);
    ck_assert_double_eq_tol(optim_lr(&opt, 70), 0.025, 1e-12);
    optim_free(&opt);
    j.schedule.decay = DDPC_DECAY_CONSTANT;
    j.schedule.warmup_steps = 0;
    optim_init(&opt, &o, &j, NULL, 1, N, 100, &e);
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
    optim_init(&opt, &o, &j, NULL, 1, 2, 1, &e);
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

/* A net of five parameter tensors as a small MLP with a norm lays them out:
 * W1 [3, 2], b1 [3], norm weight [3], W2 [2, 3], b2 [2]: 20 floats. */
#define GN 20
static const char *const g_shapes = "3x2,3,3,2x3,2";
static struct ddpc_net *groups_net(void)
{
    static const struct { int nd; int64_t d0, d1; } t[5] = {
        { 2, 3, 2 }, { 1, 3, 0 }, { 1, 3, 0 }, { 2, 2, 3 }, { 1, 2, 0 },
    };
    struct ddpc_net *net = calloc(1, sizeof *net);
    ck_assert_ptr_nonnull(net);
    size_t off = 0;
    for (int i = 0; i < 5; i++) {
        struct ddpc_tensor *x = &net->tensor[i];
        snprintf(x->name, sizeof x->name, "t%d", i);
        x->kind = DDPC_TENSOR_PARAM;
        x->nd = t[i].nd;
        x->shape[0] = t[i].d0;
        x->shape[1] = t[i].d1;
        x->numel = (size_t)(t[i].d0 * (t[i].nd == 2 ? t[i].d1 : 1));
        x->off = off;
        off += x->numel;
    }
    net->n_tensors = 5;
    net->n_params = off;
    ck_assert_uint_eq(off, GN);
    return net;
}

/* Parameters, then STEPS gradient buffers: values of both signs. */
#define GSTEPS 3
static void groups_values(float *buf)
{
    uint32_t x = 12345;
    for (int i = 0; i < GN * (GSTEPS + 1); i++) {
        x = x * 1664525u + 1013904223u;
        buf[i] = ((float)(x >> 8) / 16777216.0f - 0.5f) * (i < GN ? 4.0f : 1.0f);
    }
}

/* torch.optim over groups_values: adamw weights, adamw all, adam weights,
 * adam all, GN floats each; 0, or 77 (SKIP: no torch). */
static int groups_torch(double lr, double wd, float out[4 * GN])
{
    char *dir = make_temp_dir("optgroups"), *in, *outp, *script;
    ck_assert_ptr_nonnull(dir);
    ck_assert_int_ge(asprintf(&in, "%s/in.f32", dir), 0);
    ck_assert_int_ge(asprintf(&outp, "%s/out.f32", dir), 0);
    ck_assert_int_ge(asprintf(&script, "%s/tests/torch_optim_groups.py", test_top()), 0);
    float buf[GN * (GSTEPS + 1)];
    groups_values(buf);
    ck_assert_int_eq(write_file(in, buf, sizeof buf), 0);
    char lrs[32], wds[32], steps[8];
    snprintf(lrs, sizeof lrs, "%.17g", lr);
    snprintf(wds, sizeof wds, "%.17g", wd);
    snprintf(steps, sizeof steps, "%d", GSTEPS);
    char *argv[] = { "/usr/bin/python3", script, lrs, wds, steps, (char *)g_shapes, in, outp,
                     NULL };
    struct run_result rr;
    ck_assert_int_eq(run_capture(argv, NULL, NULL, 100, &rr), 0);
    int rc = 0;
    if (!rr.exited || rr.code == 127) {
        test_skip("optim: torch.optim groups", "no /usr/bin/python3");
        rc = 77;
    } else if (rr.code == 77) {
        test_skip("optim: torch.optim groups", "%s", rr.out);
        rc = 77;
    } else {
        ck_assert_msg(rr.code == 0, "torch_optim_groups.py: %s%s", rr.out, rr.err);
        FILE *f = fopen(outp, "rb");
        ck_assert_ptr_nonnull(f);
        ck_assert_uint_eq(fread(out, sizeof(float), 4 * GN, f), 4 * GN);
        fclose(f);
    }
    run_result_free(&rr);
    rm_tree(dir);
    free(dir);
    free(in);
    free(outp);
    free(script);
    return rc;
}

/* ddpc's steps over groups_values with the net's tensors. */
static void groups_ddpc(struct ddpc_job *j, const struct ddpc_net *net, float p[GN])
{
    struct ddpc_ops o;
    struct ddpc_err e = {0};
    ck_assert_int_eq(ops_cpu_init(&o, &e), 0);
    struct ddpc_optim opt;
    ck_assert_msg(optim_init(&opt, &o, j, net, 1, GN, 100, &e) == 0, "%s", e.msg);
    ck_assert_int_eq(opt.n_ranges, j->optimizer.weight_decay_on == DDPC_WD_ON_WEIGHTS ? 4 : 1);
    float buf[GN * (GSTEPS + 1)];
    groups_values(buf);
    memcpy(p, buf, GN * sizeof(float));
    for (int t = 1; t <= GSTEPS; t++)
        ck_assert_int_eq(optim_step(&opt, p, buf + GN * t, 1.0f, &e), 0);
    optim_free(&opt);
}

/* nanoGPT's groups: AdamW (decoupled) and Adam (L2) with weight decay on
 * W1 and W2 only, and on everything, each against torch.optim. */
START_TEST(weight_decay_groups_match_torch)
{
    static const struct { int type; const char *name; } ty[] = {
        { DDPC_OPTIM_ADAMW, "adamw" }, { DDPC_OPTIM_ADAM, "adam" },
    };
    float want[4 * GN];
    if (groups_torch(0.05, 0.1, want) == 77)
        return;
    struct ddpc_net *net = groups_net();
    for (size_t k = 0; k < 2; k++) {
        float got_w[GN], got_a[GN];
        const float *want_w = want + 2 * k * GN, *want_a = want_w + GN;
        struct ddpc_job j;
        job_base(&j, ty[k].type);
        j.optimizer.weight_decay = 0.1;
        j.optimizer.weight_decay_on = DDPC_WD_ON_WEIGHTS;
        groups_ddpc(&j, net, got_w);
        j.optimizer.weight_decay_on = DDPC_WD_ON_ALL;
        groups_ddpc(&j, net, got_a);
        double most = 0;
        for (int i = 0; i < GN; i++) {
            ck_assert_msg(fabsf(got_w[i] - want_w[i]) <= 1e-6f * (1 + fabsf(want_w[i])),
                          "%s weights p[%d] = %.9g, torch %.9g", ty[k].name, i,
                          (double)got_w[i], (double)want_w[i]);
            ck_assert_msg(fabsf(got_a[i] - want_a[i]) <= 1e-6f * (1 + fabsf(want_a[i])),
                          "%s all p[%d] = %.9g, torch %.9g", ty[k].name, i,
                          (double)got_a[i], (double)want_a[i]);
            /* the groups matter: 1-D tensors move differently, 2-D alike */
            int two_d = i < 6 || (i >= 12 && i < 18);
            if (two_d)
                ck_assert_float_eq(got_w[i], got_a[i]);
            else if (fabs((double)want_w[i] - want_a[i]) > most)
                most = fabs((double)want_w[i] - want_a[i]);
        }
        ck_assert_msg(most > 1e-3, "%s: decay on 1-D tensors changed them by only %g",
                      ty[k].name, most);
    }
    free(net);
}
END_TEST

/* A rank updates only its shard (worker.c): optim_update over pieces that
 * cut through ranges gives the bytes of one whole step; a tensor list that
 * does not tile the buffer is refused. */
START_TEST(weight_decay_groups_sharded_and_checked)
{
    struct ddpc_net *net = groups_net();
    struct ddpc_job j;
    job_base(&j, DDPC_OPTIM_ADAMW);
    j.optimizer.weight_decay = 0.1;
    j.optimizer.weight_decay_on = DDPC_WD_ON_WEIGHTS;
    struct ddpc_ops o;
    struct ddpc_err e = {0};
    ck_assert_int_eq(ops_cpu_init(&o, &e), 0);
    struct ddpc_optim a, b;
    ck_assert_int_eq(optim_init(&a, &o, &j, net, 1, GN, 100, &e), 0);
    ck_assert_int_eq(optim_init(&b, &o, &j, net, 1, GN, 100, &e), 0);
    float buf[GN * (GSTEPS + 1)], pa[GN], pb[GN];
    groups_values(buf);
    memcpy(pa, buf, sizeof pa);
    memcpy(pb, buf, sizeof pb);
    static const size_t cut[] = { 0, 7, 15, GN };
    for (int t = 1; t <= GSTEPS; t++) {
        ck_assert_int_eq(optim_step(&a, pa, buf + GN * t, 1.0f, &e), 0);
        for (int c = 0; c < 3; c++)
            ck_assert_int_eq(optim_update(&b, pb, buf + GN * t, cut[c], cut[c + 1], 1.0f, &e), 0);
        b.step++;
    }
    ck_assert_mem_eq(pa, pb, sizeof pa);
    ck_assert_int_lt(optim_update(&b, pb, buf, 5, GN + 1, 1.0f, &e), 0);
    optim_free(&a);
    optim_free(&b);

    memset(&e, 0, sizeof e);
    net->tensor[2].off += 1;   /* a gap before the norm weight, an overlap after it */
    ck_assert_int_lt(optim_init(&a, &o, &j, net, 1, GN, 100, &e), 0);
    ck_assert_msg(strstr(e.msg, "tile"), "%s", e.msg);
    optim_free(&a);
    free(net);
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
    tcase_add_test(tc, weight_decay_groups_sharded_and_checked);
    suite_add_tcase(s, tc);
    TCase *py = tcase_create("torch");   /* python3 + import torch: seconds under load */
    tcase_set_timeout(py, 120);
    tcase_add_test(py, weight_decay_groups_match_torch);
    suite_add_tcase(s, py);
    return s;
}
