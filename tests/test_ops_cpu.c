/* test_ops_cpu.c - the CPU backend (ops_cpu.c) against naive loops.
 *
 * gemm in all four transpose combinations with row strides, alpha and beta;
 * bias + activation forward/backward; bias gradient; cross_entropy and mse
 * values and gradients; sumsq/scale; the fused optimizer pass; the layer
 * kernels' loops, bit for bit the element functions of ops_kernels.h (what
 * the CUDA backend runs). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "suites.h"
#include "job.h"
#include "ops.h"
#include "ops_kernels.h"
#include "rng.h"

static void fill(struct ddpc_rng *r, float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(2 * rng_uniform(r) - 1);
}

START_TEST(gemm_all_transposes)
{
    struct ddpc_ops o;
    struct ddpc_err e = {0};
    ck_assert_int_eq(ops_cpu_init(&o, &e), 0);
    ck_assert_int_eq(o.host_memory, 1);
    struct ddpc_rng r;
    rng_seed(&r, 7);
    const int m = 5, n = 4, k = 3, pad = 2;
    float A[64], B[64], C[64], ref[64];
    for (int ta = 0; ta <= 1; ta++) {
        for (int tb = 0; tb <= 1; tb++) {
            /* stored shapes: A is [m, k] or [k, m]; B is [k, n] or [n, k] */
            int lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
            fill(&r, A, 64);
            fill(&r, B, 64);
            fill(&r, C, 64);
            memcpy(ref, C, sizeof C);
            const float alpha = 0.75f, beta = -0.5f;
            for (int i = 0; i < m; i++)
                for (int j = 0; j < n; j++) {
                    double s = 0;
                    for (int p = 0; p < k; p++) {
                        double a = ta ? A[p * lda + i] : A[i * lda + p];
                        double b = tb ? B[j * ldb + p] : B[p * ldb + j];
                        s += a * b;
                    }
                    ref[i * ldc + j] = (float)(alpha * s + beta * ref[i * ldc + j]);
                }
            ck_assert_int_eq(o.gemm(&o, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc,
                                    &e), 0);
            for (int i = 0; i < m; i++)
                for (int j = 0; j < ldc; j++)
                    ck_assert_msg(fabsf(C[i * ldc + j] - ref[i * ldc + j]) < 1e-5f,
                                  "ta=%d tb=%d C[%d,%d] %g vs %g", ta, tb, i, j,
                                  (double)C[i * ldc + j], (double)ref[i * ldc + j]);
        }
    }
    o.destroy(&o);
}
END_TEST

START_TEST(bias_act_and_bias_grad)
{
    struct ddpc_ops o;
    struct ddpc_err e = {0};
    ops_cpu_init(&o, &e);
    const int rows = 3, cols = 4;
    float z[12], z0[12], a[12], bias[4] = { 0.1f, -0.2f, 0.3f, -0.4f }, da[12], dz[12];
    struct ddpc_rng r;
    rng_seed(&r, 3);
    for (int act = DDPC_K_RELU; act <= DDPC_K_IDENTITY; act++) {
        fill(&r, z0, 12);
        fill(&r, da, 12);
        memcpy(z, z0, sizeof z);
        float *aout = act == DDPC_K_IDENTITY ? z : a;
        ck_assert_int_eq(o.bias_act_forward(&o, z, bias, aout, rows, cols, act, &e), 0);
        for (int i = 0; i < 12; i++) {
            float zz = z0[i] + bias[i % cols];
            ck_assert_float_eq(z[i], zz);
            ck_assert_float_eq_tol(aout[i], ddpc_k_act(act, zz), 1e-7f);
        }
        ck_assert_int_eq(o.act_backward(&o, z, da, dz, 12, act, &e), 0);
        for (int i = 0; i < 12; i++)
            ck_assert_float_eq_tol(dz[i], da[i] * ddpc_k_act_grad(act, z[i]), 1e-7f);
    }
    /* in place is allowed for backward */
    memcpy(dz, da, sizeof dz);
    ck_assert_int_eq(o.act_backward(&o, z, dz, dz, 12, DDPC_K_TANH, &e), 0);
    ck_assert_float_eq_tol(dz[5], da[5] * ddpc_k_act_grad(DDPC_K_TANH, z[5]), 1e-7f);
    /* a == z with a non-identity activation is refused */
    ck_assert_int_lt(o.bias_act_forward(&o, z, bias, z, rows, cols, DDPC_K_RELU, &e), 0);

    float db[4] = { 1, 1, 1, 1 };
    ck_assert_int_eq(o.bias_grad(&o, da, db, rows, cols, 0.0f, &e), 0);
    for (int j = 0; j < cols; j++)
        ck_assert_float_eq_tol(db[j], da[j] + da[4 + j] + da[8 + j], 1e-6f);
    float prev = db[2];
    ck_assert_int_eq(o.bias_grad(&o, da, db, rows, cols, 1.0f, &e), 0);
    ck_assert_float_eq_tol(db[2], 2 * prev, 1e-6f);
}
END_TEST

START_TEST(cross_entropy_values_and_grads)
{
    struct ddpc_ops o;
    struct ddpc_err e = {0};
    ops_cpu_init(&o, &e);
    /* torch.nn.functional.cross_entropy([[1,2,3],[1000,0,-1000]], [2, 1]) per row:
     * 0.40760596 and 1000 (stable: no overflow) */
    float logits[6] = { 1, 2, 3, 1000, 0, -1000 }, d[6];
    int32_t lab[2] = { 2, 1 };
    double acc[DDPC_LOSS_ACC] = {0, 0, 0};
    ck_assert_int_eq(o.loss(&o, DDPC_LOSS_CROSS_ENTROPY, logits, lab, NULL, d, 2, 3, 0.5f,
                            acc, &e), 0);
    ck_assert_double_eq_tol(acc[0], 0.40760596 + 1000.0, 1e-4);
    ck_assert_double_eq(acc[1], 1);
    ck_assert_double_eq(acc[2], 0);
    /* d = grad_scale * (softmax - onehot) */
    double s = exp(1.0) + exp(2.0) + exp(3.0);
    ck_assert_float_eq_tol(d[0], (float)(0.5 * exp(1.0) / s), 1e-6f);
    ck_assert_float_eq_tol(d[2], (float)(0.5 * (exp(3.0) / s - 1)), 1e-6f);
    ck_assert_float_eq_tol(d[3], 0.5f, 1e-6f);
    ck_assert_float_eq_tol(d[4], -0.5f, 1e-6f);
    for (int i = 0; i < 6; i++)
        ck_assert(isfinite(d[i]));
    /* out-of-range label is an error, not a wild write */
    lab[1] = 3;
    ck_assert_int_eq(o.loss(&o, DDPC_LOSS_CROSS_ENTROPY, logits, lab, NULL, d, 2, 3, 1.0f,
                            acc, &e), DDPC_E_DATA);
}
END_TEST

START_TEST(mse_values_and_grads)
{
    struct ddpc_ops o;
    struct ddpc_err e = {0};
    ops_cpu_init(&o, &e);
    /* torch mse_loss(reduction='mean') over 2x2 = mean of (x-y)^2 = (1+4+0+9)/4 = 3.5;
     * our sum of per-row means over rows 2 gives the same mean */
    float x[4] = { 1, 2, 3, 4 }, y[4] = { 0, 0, 3, 7 }, d[4];
    double acc[DDPC_LOSS_ACC] = {0, 0, 0};
    ck_assert_int_eq(o.loss(&o, DDPC_LOSS_MSE, x, NULL, y, d, 2, 2, 0.5f, acc, &e), 0);
    ck_assert_double_eq_tol(acc[0] / 2, 3.5, 1e-9);
    ck_assert_double_eq(acc[1], 0);
    /* d mean / dx = 2 (x - y) / (rows * cols) */
    ck_assert_float_eq_tol(d[0], 2.0f * 1 / 4, 1e-7f);
    ck_assert_float_eq_tol(d[1], 2.0f * 2 / 4, 1e-7f);
    ck_assert_float_eq_tol(d[2], 0.0f, 1e-7f);
    ck_assert_float_eq_tol(d[3], 2.0f * -3 / 4, 1e-7f);
}
END_TEST

START_TEST(sumsq_scale_optim_step)
{
    struct ddpc_ops o;
    struct ddpc_err e = {0};
    ops_cpu_init(&o, &e);
    float *x;
    ck_assert_int_eq(o.alloc(&o, (void **)&x, 7 * sizeof(float), &e), 0);
    for (int i = 0; i < 7; i++)
        ck_assert_float_eq(x[i], 0.0f);   /* zeroed */
    for (int i = 0; i < 7; i++)
        x[i] = (float)(i + 1);
    double ss = 0;
    ck_assert_int_eq(o.sumsq(&o, x, 7, &ss, &e), 0);
    ck_assert_double_eq(ss, 140.0);
    ck_assert_int_eq(o.scale(&o, x, 7, 0.5f, &e), 0);
    ck_assert_float_eq(x[6], 3.5f);

    /* the fused (vectorised) pass equals the scalar kernel element by element,
     * bit for bit, grad_scale first; 103 elements cover vector body and tail */
    enum { NP = 103 };
    float p[NP], pk[NP], g[NP], m[NP] = {0}, v[NP] = {0}, mk[NP] = {0}, vk[NP] = {0};
    for (int i = 0; i < NP; i++) {
        p[i] = pk[i] = 0.01f * i - 0.3f;
        g[i] = 0.05f * (i % 7 - 3);
    }
    struct ddpc_optim_step s = { .type = DDPC_K_ADAMW, .lr = 0.01f, .weight_decay = 0.1f,
        .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .bias_correction1 = 0.1f,
        .bias_correction2 = 0.001f, .grad_scale = 0.5f, .step = 1 };
    for (int type = DDPC_K_ADAM; type <= DDPC_K_ADAMW; type++) {
        s.type = type;
        ck_assert_int_eq(o.optim_step(&o, &s, p, g, m, v, NP, &e), 0);
        for (int i = 0; i < NP; i++) {
            ddpc_k_adam(&pk[i], g[i] * 0.5f, &mk[i], &vk[i], 0.01f, 0.9f, 0.999f, 1e-8f, 0.1f,
                        type == DDPC_K_ADAMW, 0.1f, 0.001f);
            ck_assert_float_eq(p[i], pk[i]);
            ck_assert_float_eq(v[i], vk[i]);
        }
    }
    s.type = DDPC_K_SGD;
    s.momentum = 0.9f;
    s.nesterov = 1;
    s.step = 2;
    ck_assert_int_eq(o.optim_step(&o, &s, p, g, m, NULL, NP, &e), 0);
    for (int i = 0; i < NP; i++) {
        ddpc_k_sgd(&pk[i], g[i] * 0.5f, &mk[i], 0.01f, 0.9f, 1, 0.1f, 0);
        ck_assert_float_eq(p[i], pk[i]);
    }
    ck_assert_int_lt(o.optim_step(&o, &s, p, g, NULL, NULL, NP, &e), 0);   /* no buffer */
    o.release(&o, x);
}
END_TEST

/* ---- layer kernels: ops_cpu's loops against ddpc_lk_run, bitwise ---- */

/* Every output a layer kernel may write, twice: [0] for ops_cpu, [1] for
 * the element functions; both start as the same noise, so accumulating
 * (accx, accg) and in-place kernels see the same old values. */
struct lk_bufs {
    float   *y[2], *dx[2], *db[2];
    int32_t *idx[2];
    size_t   ny, ndx, ndb;
};

static void lk_bufs_init(struct lk_bufs *b, struct ddpc_rng *r, size_t ny, size_t ndx, size_t ndb)
{
    b->ny = ny;
    b->ndx = ndx;
    b->ndb = ndb;
    for (int k = 0; k < 2; k++) {
        b->y[k] = malloc(ny * sizeof(float));
        b->dx[k] = malloc(ndx * sizeof(float));
        b->db[k] = malloc(ndb * sizeof(float));
        b->idx[k] = malloc(ny * sizeof(int32_t));
        ck_assert(b->y[k] && b->dx[k] && b->db[k] && b->idx[k]);
    }
    fill(r, b->y[0], ny);
    fill(r, b->dx[0], ndx);
    fill(r, b->db[0], ndb);
    for (size_t i = 0; i < ny; i++)
        b->idx[0][i] = (int32_t)i;
    memcpy(b->y[1], b->y[0], ny * sizeof(float));
    memcpy(b->dx[1], b->dx[0], ndx * sizeof(float));
    memcpy(b->db[1], b->db[0], ndb * sizeof(float));
    memcpy(b->idx[1], b->idx[0], ny * sizeof(int32_t));
}

static void lk_bufs_free(struct lk_bufs *b)
{
    for (int k = 0; k < 2; k++) {
        free(b->y[k]);
        free(b->dx[k]);
        free(b->db[k]);
        free(b->idx[k]);
    }
}

/* kind over n elements both ways; what = a label for failures. */
static void lk_same(struct ddpc_ops *o, int kind, size_t n, const struct ddpc_lk *args,
                    struct lk_bufs *b, const char *what)
{
    struct ddpc_lk a[2] = { *args, *args };
    struct ddpc_err e = { 0 };
    for (int k = 0; k < 2; k++) {
        a[k].y = b->y[k];
        a[k].dx = b->dx[k];
        a[k].db = b->db[k];
        a[k].idx = args->idx ? args->idx : b->idx[k];   /* given: pooling backward's argmax */
        if (args->t)   /* a kind that writes t (CHAN_BIAS_ACT): into the dx buffers */
            a[k].t = b->dx[k];
    }
    ck_assert_msg(o->layer_kernel(o, kind, n, &a[0], &e) == 0, "%s: %s", what, e.msg);
    for (size_t i = 0; i < n; i++)
        ddpc_lk_run(kind, i, &a[1]);
    ck_assert_msg(memcmp(b->y[0], b->y[1], b->ny * sizeof(float)) == 0, "%s: y differs", what);
    ck_assert_msg(memcmp(b->dx[0], b->dx[1], b->ndx * sizeof(float)) == 0, "%s: dx differs",
                  what);
    ck_assert_msg(memcmp(b->db[0], b->db[1], b->ndb * sizeof(float)) == 0, "%s: db differs",
                  what);
    ck_assert_msg(memcmp(b->idx[0], b->idx[1], b->ny * sizeof(int32_t)) == 0,
                  "%s: argmax differs", what);
}

START_TEST(layer_kernels_match_element_functions)
{
    /* N, C, H, W, K, S, P: convolutions and poolings, overlapping or not,
     * padded, odd sizes whose last row and column no window reads */
    static const int shapes[][7] = {
        { 2, 3, 7, 6, 3, 1, 1 }, { 2, 3, 9, 9, 3, 2, 1 }, { 2, 2, 8, 8, 2, 2, 0 },
        { 1, 2, 7, 7, 2, 2, 0 }, { 2, 2, 6, 6, 3, 2, 1 }, { 3, 4, 28, 28, 2, 2, 0 },
        { 2, 3, 14, 14, 3, 1, 1 }, { 1, 1, 5, 8, 1, 1, 0 }, { 2, 2, 6, 7, 3, 3, 0 },
        { 2, 5, 9, 9, 2, 1, 1 }, { 2, 2, 6, 5, 5, 1, 2 }, { 1, 2, 3, 4, 5, 1, 2 },
        /* 2 x 2 max pooling's blocks of 8 windows: rows shorter than a
         * block (7, 2, 1 windows), a row of exactly two blocks, rows with
         * a partial last block (14, 17), odd planes whose last row and
         * column no window reads */
        { 2, 3, 14, 14, 2, 2, 0 }, { 3, 2, 4, 4, 2, 2, 0 }, { 1, 1, 2, 2, 2, 2, 0 },
        { 2, 2, 32, 32, 2, 2, 0 }, { 2, 1, 6, 34, 2, 2, 0 }, { 2, 3, 15, 13, 2, 2, 0 },
        /* 8 or more channels: the bias gradient's eight-channel vectors,
         * with and without a channel left over, planes with a partial
         * block of 8 and without */
        { 2, 9, 5, 7, 3, 1, 1 }, { 2, 16, 9, 8, 3, 1, 1 },
    };
    struct ddpc_ops o;
    struct ddpc_err e = { 0 };
    ck_assert_int_eq(ops_cpu_init(&o, &e), 0);
    struct ddpc_rng r;
    rng_seed(&r, 77);
    char what[96];
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        const int *s = shapes[t];
        int N = s[0], C = s[1], H = s[2], W = s[3], K = s[4], S = s[5], P = s[6];
        int OH = (H + 2 * P - K) / S + 1, OW = (W + 2 * P - K) / S + 1;
        size_t hw = (size_t)H * W, ohw = (size_t)OH * OW, nin = (size_t)N * C * hw;
        size_t nout = (size_t)N * C * ohw, ncol = (size_t)N * C * K * K * ohw;
        float *x = malloc(nin * sizeof *x), *dy = malloc(nout * sizeof *dy);
        float *col = malloc(ncol * sizeof *col), *ws = malloc(hw * sizeof *ws);
        float *w = malloc((size_t)C * sizeof *w);
        ck_assert(x && dy && col && ws && w);
        fill(&r, x, nin);
        fill(&r, dy, nout);
        fill(&r, col, ncol);
        fill(&r, w, (size_t)C);
        /* ties, zeros, NaNs and infinities: argmax and max must still agree */
        for (size_t i = 0; i < nin; i += 7)
            x[i] = x[i + 1 < nin ? i + 1 : i];
        for (size_t i = 3; i < nin; i += 29)
            x[i] = 0.0f;
        for (size_t i = 5; i < nin; i += 53)
            x[i] = NAN;
        for (size_t i = 11; i < nin; i += 97)
            x[i] = -INFINITY;
        for (size_t i = 2; i < nout; i += 31)   /* a gradient's -0 sums to +0 */
            dy[i] = -0.0f;
        struct ddpc_lk a;
        memset(&a, 0, sizeof a);
        a.N = N; a.C = C; a.H = H; a.W = W; a.OH = OH; a.OW = OW; a.K = K; a.S = S; a.P = P;
        struct lk_bufs b;

        lk_bufs_init(&b, &r, ncol, 1, 1);
        a.x = x;
        snprintf(what, sizeof what, "im2col shape %zu", t);
        lk_same(&o, DDPC_LK_IM2COL, ncol, &a, &b, what);
        lk_bufs_free(&b);

        for (int acc = 0; acc < 2; acc++) {
            lk_bufs_init(&b, &r, 1, nin, 1);
            struct ddpc_lk c = a;
            c.aux = col;
            c.ws = ws;
            c.accx = acc;
            snprintf(what, sizeof what, "col2im shape %zu accx %d", t, acc);
            lk_same(&o, DDPC_LK_COL2IM, nin, &c, &b, what);
            lk_bufs_free(&b);
        }

        for (int mode = 0; mode < 2; mode++) {   /* max, avg */
            lk_bufs_init(&b, &r, nout, 1, 1);
            struct ddpc_lk p = a;
            p.x = x;
            p.act = mode;
            snprintf(what, sizeof what, "pool fwd shape %zu mode %d", t, mode);
            lk_same(&o, DDPC_LK_POOL_FWD, nout, &p, &b, what);
            int32_t *idx = malloc(nout * sizeof *idx);
            ck_assert_ptr_nonnull(idx);
            memcpy(idx, b.idx[0], nout * sizeof *idx);
            lk_bufs_free(&b);
            for (int acc = 0; acc < 2; acc++) {
                lk_bufs_init(&b, &r, 1, nin, 1);
                struct ddpc_lk q = p;
                q.x = NULL;
                q.dy = dy;
                q.idx = mode == 0 ? idx : NULL;
                q.accx = acc;
                snprintf(what, sizeof what, "pool bwd shape %zu mode %d accx %d", t, mode, acc);
                lk_same(&o, DDPC_LK_POOL_BWD, nin, &q, &b, what);
                lk_bufs_free(&b);
            }
            free(idx);
        }

        /* per channel over H*W: bias, its gradient */
        struct ddpc_lk c;
        memset(&c, 0, sizeof c);
        c.N = N; c.C = C; c.H = (int)hw;
        lk_bufs_init(&b, &r, nin, 1, (size_t)C);
        c.w = w;
        snprintf(what, sizeof what, "chan bias shape %zu", t);
        lk_same(&o, DDPC_LK_CHAN_BIAS, nin, &c, &b, what);
        lk_bufs_free(&b);
        for (int act = 0; act <= DDPC_K_GELU_TANH; act++) {
            lk_bufs_init(&b, &r, nin, nin, (size_t)C);
            memcpy(b.y[0], x, nin * sizeof *x);   /* NaNs, infinities, zeros */
            memcpy(b.y[1], x, nin * sizeof *x);
            struct ddpc_lk f = c;
            f.act = act;
            f.f0 = 0.01f;
            f.t = b.dx[0];
            snprintf(what, sizeof what, "chan bias act %d shape %zu", act, t);
            lk_same(&o, DDPC_LK_CHAN_BIAS_ACT, nin, &f, &b, what);
            lk_bufs_free(&b);
        }
        lk_bufs_init(&b, &r, nin, 1, (size_t)C);
        for (int acc = 0; acc < 2; acc++) {
            struct ddpc_lk g = c;
            g.dy = x;   /* with NaNs and infinities */
            g.accg = acc;
            snprintf(what, sizeof what, "chan bias grad shape %zu accg %d", t, acc);
            lk_same(&o, DDPC_LK_CHAN_BIAS_GRAD, (size_t)C, &g, &b, what);
            g.dy = dy;   /* C * ohw floats per sample as [N, C, ohw] */
            g.H = (int)ohw;
            lk_same(&o, DDPC_LK_CHAN_BIAS_GRAD, (size_t)C, &g, &b, what);
        }
        lk_bufs_free(&b);

        for (int act = 0; act <= DDPC_K_GELU_TANH; act++)
            for (int acc = 0; acc < 2; acc++) {
                struct ddpc_lk f;
                memset(&f, 0, sizeof f);
                f.act = act;
                f.f0 = 0.01f;
                f.x = x;
                f.dy = x;
                f.accx = acc;
                lk_bufs_init(&b, &r, nin, nin, 1);
                snprintf(what, sizeof what, "act %d shape %zu accx %d", act, t, acc);
                if (acc == 0)
                    lk_same(&o, DDPC_LK_ACT_FWD, nin, &f, &b, what);
                lk_same(&o, DDPC_LK_ACT_BWD, nin, &f, &b, what);
                lk_bufs_free(&b);
            }
        free(x);
        free(dy);
        free(col);
        free(ws);
        free(w);
    }
    o.destroy(&o);
}
END_TEST

/* y (+)= conv3x3(x, w), stride 1, padding 1, in double: the reference for
 * the backend's fast path. flip: w is [in_of_layer = out][out_of_layer = in]
 * rotated by 180 degrees, as ops.h defines it. */
static void conv3x3_ref(const float *x, const float *w, double *y, int n, int in, int out,
                        int H, int W, int flip)
{
    for (int s = 0; s < n; s++)
        for (int o = 0; o < out; o++)
            for (int py = 0; py < H; py++)
                for (int px = 0; px < W; px++) {
                    double acc = 0;
                    for (int c = 0; c < in; c++)
                        for (int ky = 0; ky < 3; ky++)
                            for (int kx = 0; kx < 3; kx++) {
                                int iy = py + ky - 1, ix = px + kx - 1;
                                if (iy < 0 || iy >= H || ix < 0 || ix >= W)
                                    continue;
                                float g = flip ? w[((size_t)c * out + o) * 9 + (2 - ky) * 3 + (2 - kx)]
                                               : w[((size_t)o * in + c) * 9 + ky * 3 + kx];
                                acc += (double)g * x[(((size_t)s * in + c) * H + iy) * W + ix];
                            }
                    y[(((size_t)s * out + o) * H + py) * W + px] = acc;
                }
}

/* ops.pool2_bias_backward: the 2 x 2 max pooling's backward (with and
 * without the ReLU's gradient) and the bias gradient of the convolution
 * before it, in one pass, against the two kernels it replaces: the same
 * bits in dx and in db, written and added; channels in groups of 8 (up
 * to 4 side by side) and alone; a pooling it does not take (3 x 3) is left to the caller (1). */
START_TEST(pool_and_bias_backward_same_bits)
{
    static const int shapes[][4] = {   /* N, C, OH, OW */
        { 3, 9, 7, 7 }, { 2, 16, 14, 14 }, { 2, 3, 3, 17 }, { 1, 8, 1, 1 },
        { 2, 41, 3, 5 },   /* 4 groups of 8 side by side, then 1, then 1 alone */
    };
    struct ddpc_ops o;
    struct ddpc_err e = { 0 };
    ck_assert_int_eq(ops_cpu_init(&o, &e), 0);
    ck_assert(o.pool2_bias_backward != NULL);
    struct ddpc_rng r;
    rng_seed(&r, 5);
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        int N = shapes[t][0], C = shapes[t][1], OH = shapes[t][2], OW = shapes[t][3];
        size_t nout = (size_t)N * C * OH * OW, nin = 4 * nout;
        float *x = malloc(nin * sizeof *x), *y = malloc(nout * sizeof *y);
        float *dy = malloc(nout * sizeof *dy), *dx[2], db[2][48], db0[48];
        int32_t *idx = malloc(nout * sizeof *idx);
        dx[0] = malloc(nin * sizeof(float));
        dx[1] = malloc(nin * sizeof(float));
        ck_assert(x && y && dy && idx && dx[0] && dx[1]);
        fill(&r, x, nin);
        fill(&r, dy, nout);
        fill(&r, db0, 48);
        for (size_t i = 0; i < nin; i++)   /* a ReLU's output: zeros, whole windows of them */
            x[i] = x[i] > 0.0f ? x[i] : 0.0f;
        struct ddpc_lk a;
        memset(&a, 0, sizeof a);
        a.N = N; a.C = C; a.H = 2 * OH; a.W = 2 * OW; a.OH = OH; a.OW = OW; a.K = 2; a.S = 2;
        a.x = x;
        a.y = y;
        a.idx = idx;
        ck_assert_int_eq(o.layer_kernel(&o, DDPC_LK_POOL_FWD, nout, &a, &e), 0);
        for (int relu = 0; relu < 2; relu++)
            for (int accg = 0; accg < 2; accg++) {
                struct ddpc_lk b;
                memset(&b, 0, sizeof b);
                b.N = N; b.C = C; b.H = 2 * OH; b.W = 2 * OW; b.OH = OH; b.OW = OW;
                b.K = 2; b.S = 2; b.dy = dy; b.idx = idx; b.aux = relu ? y : NULL;
                b.accg = accg;
                memcpy(db[0], db0, sizeof db0);
                memcpy(db[1], db0, sizeof db0);
                /* the two kernels */
                b.dx = dx[1];
                ck_assert_int_eq(o.layer_kernel(&o, DDPC_LK_POOL_BWD, nin, &b, &e), 0);
                struct ddpc_lk g;
                memset(&g, 0, sizeof g);
                g.dy = dx[1]; g.db = db[1]; g.N = N; g.C = C; g.H = 4 * OH * OW; g.accg = accg;
                ck_assert_int_eq(o.layer_kernel(&o, DDPC_LK_CHAN_BIAS_GRAD, (size_t)C, &g, &e), 0);
                /* the one pass */
                b.dx = dx[0];
                b.db = db[0];
                ck_assert_int_eq(o.pool2_bias_backward(&o, &b, &e), 0);
                ck_assert_msg(memcmp(dx[0], dx[1], nin * sizeof(float)) == 0,
                              "shape %zu relu %d: dx differs", t, relu);
                ck_assert_msg(memcmp(db[0], db[1], (size_t)C * sizeof(float)) == 0,
                              "shape %zu relu %d accg %d: db differs", t, relu, accg);
            }
        struct ddpc_lk k3;
        memset(&k3, 0, sizeof k3);
        k3.N = N; k3.C = C; k3.H = 2 * OH; k3.W = 2 * OW; k3.K = 3; k3.S = 2;
        k3.OH = OH; k3.OW = OW; k3.dy = dy; k3.idx = idx; k3.dx = dx[0]; k3.db = db[0];
        ck_assert_int_eq(o.pool2_bias_backward(&o, &k3, &e), 1);
        free(x);
        free(y);
        free(dy);
        free(idx);
        free(dx[0]);
        free(dx[1]);
    }
    o.destroy(&o);
}
END_TEST

/* The CPU's 3 x 3 convolution (Winograd F(2x2, 3x3), ops.conv3x3 and
 * conv3x3_wgrad) against the direct sum in double: forward, flipped (the
 * input gradient) and the weight gradient,
 * written and added, odd and even planes, the output with a bias and ReLU
 * (bitwise the separate pass over the plain output), planes smaller than a tile,
 * rows of more than one block of tiles; within 1e-5 of the result's norm
 * (rounding of its transforms, about 1e-7 here), every element checked
 * against a bound so a wrong tile cannot hide in the norm; too little
 * scratch is refused (1) with nothing written. Buffers are exact, so ASan
 * (make sanitize) sees any read or write past them. */
START_TEST(conv3x3_matches_direct_sum)
{
    static const int shapes[][5] = {   /* n, in, out, H, W */
        { 3, 16, 5, 14, 14 }, { 2, 17, 6, 7, 5 }, { 1, 16, 3, 1, 1 }, { 2, 20, 4, 2, 3 },
        { 5, 16, 2, 18, 35 }, { 1, 32, 64, 14, 14 },
    };
    struct ddpc_ops o;
    struct ddpc_err e = { 0 };
    ck_assert_int_eq(ops_cpu_init(&o, &e), 0);
    ck_assert(o.conv3x3 != NULL && o.conv3x3_wgrad != NULL);
    struct ddpc_rng r;
    rng_seed(&r, 31);
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        int n = shapes[t][0], in = shapes[t][1], out = shapes[t][2], H = shapes[t][3],
            W = shapes[t][4];
        size_t nx = (size_t)n * in * H * W, ny = (size_t)n * out * H * W, nw = (size_t)in * out * 9;
        size_t nws = 16 * (size_t)(in + out) * ((H + 1) / 2) * ((W + 1) / 2) * 3 + 16 * nw + 4096;
        float *x = malloc(nx * sizeof *x), *w = malloc(nw * sizeof *w);
        float *y = malloc(ny * sizeof *y), *y0 = malloc(ny * sizeof *y0);
        float *ws = malloc(nws * sizeof *ws);
        double *ref = malloc(ny * sizeof *ref);
        ck_assert(x && w && y && y0 && ws && ref);
        fill(&r, x, nx);
        fill(&r, w, nw);
        fill(&r, y0, ny);
        for (int flip = 0; flip < 2; flip++)
            for (int acc = 0; acc < 2; acc++) {
                conv3x3_ref(x, w, ref, n, in, out, H, W, flip);
                memcpy(y, y0, ny * sizeof *y);
                ck_assert_int_eq(o.conv3x3(&o, x, w, y, n, in, out, H, W, flip, acc, NULL, 0, ws, nws, &e),
                                 0);
                double d2 = 0, r2 = 0, worst = 0;
                for (size_t i = 0; i < ny; i++) {
                    double want = ref[i] + (acc ? y0[i] : 0.0);
                    d2 += (y[i] - want) * (y[i] - want);
                    r2 += want * want;
                    if (fabs(y[i] - want) > worst)
                        worst = fabs(y[i] - want);
                }
                ck_assert_msg(sqrt(d2) <= 1e-5 * sqrt(r2) && worst <= 1e-5 * in * 9,
                              "shape %zu flip %d acc %d: %g relative, worst element %g off", t,
                              flip, acc, sqrt(d2 / r2), worst);
            }
        /* with the layer's bias and ReLU in the output pass: the bits of
         * the plain output, then y + b, then max(., 0) (CHAN_BIAS_ACT) */
        {
            float *b = malloc((size_t)out * sizeof *b), *yb = malloc(ny * sizeof *yb);
            ck_assert(b && yb);
            fill(&r, b, (size_t)out);
            ck_assert_int_eq(o.conv3x3(&o, x, w, y, n, in, out, H, W, 0, 0, NULL, 0, ws, nws,
                                       &e), 0);
            ck_assert_int_eq(o.conv3x3(&o, x, w, yb, n, in, out, H, W, 0, 0, b, 1, ws, nws,
                                       &e), 0);
            long off = 0;
            for (size_t i = 0; i < ny; i++) {
                float v = y[i] + b[i / ((size_t)H * W) % (size_t)out];
                v = v > 0.0f ? v : 0.0f;
                off += memcmp(&v, &yb[i], sizeof v) != 0;
            }
            ck_assert_msg(off == 0, "shape %zu: %ld outputs with bias and ReLU differ from the "
                          "separate pass", t, off);
            ck_assert_int_lt(o.conv3x3(&o, x, w, yb, n, in, out, H, W, 0, 1, b, 1, ws, nws, &e),
                             0);
            ddpc_err_clear(&e);
            free(b);
            free(yb);
        }
        /* the weight gradient, x with y0 as the output gradient */
        double *gref = malloc(nw * sizeof *gref);
        float *g = malloc(nw * sizeof *g), *g0 = malloc(nw * sizeof *g0);
        ck_assert(gref && g && g0);
        fill(&r, g0, nw);
        for (size_t i = 0; i < nw; i++)
            gref[i] = 0;
        for (int s = 0; s < n; s++)
            for (int oc = 0; oc < out; oc++)
                for (int c = 0; c < in; c++)
                    for (int ky = 0; ky < 3; ky++)
                        for (int kx = 0; kx < 3; kx++)
                            for (int py = 0; py < H; py++)
                                for (int px = 0; px < W; px++) {
                                    int iy = py + ky - 1, ix = px + kx - 1;
                                    if (iy < 0 || iy >= H || ix < 0 || ix >= W)
                                        continue;
                                    gref[((size_t)oc * in + c) * 9 + ky * 3 + kx] +=
                                        (double)y0[(((size_t)s * out + oc) * H + py) * W + px] *
                                        x[(((size_t)s * in + c) * H + iy) * W + ix];
                                }
        for (int acc = 0; acc < 2; acc++) {
            memcpy(g, g0, nw * sizeof *g);
            ck_assert_int_eq(o.conv3x3_wgrad(&o, x, y0, g, n, in, out, H, W, acc, ws, nws, &e), 0);
            double d2 = 0, r2 = 0;
            for (size_t i = 0; i < nw; i++) {
                double want = gref[i] + (acc ? g0[i] : 0.0);
                d2 += (g[i] - want) * (g[i] - want);
                r2 += want * want;
            }
            ck_assert_msg(sqrt(d2) <= 1e-5 * sqrt(r2), "shape %zu wgrad acc %d: %g relative", t,
                          acc, sqrt(d2 / r2));
        }
        memcpy(g, g0, nw * sizeof *g);
        ck_assert_int_eq(o.conv3x3_wgrad(&o, x, y0, g, n, in, out, H, W, 0, ws,
                                         16 * (size_t)in * out, &e), 1);
        ck_assert_mem_eq(g, g0, nw * sizeof *g);
        free(gref);
        free(g);
        free(g0);
        memcpy(y, y0, ny * sizeof *y);
        ck_assert_int_eq(o.conv3x3(&o, x, w, y, n, in, out, H, W, 0, 0, NULL, 0, ws,
                                   16 * (size_t)in * out, &e), 1);
        ck_assert_mem_eq(y, y0, ny * sizeof *y);
        free(x);
        free(w);
        free(y);
        free(y0);
        free(ws);
        free(ref);
    }
    o.destroy(&o);
}
END_TEST

Suite *ops_cpu_suite(void)
{
    Suite *s = suite_create("ops_cpu");
    TCase *tc = tcase_create("ops_cpu");
    tcase_add_test(tc, gemm_all_transposes);
    tcase_add_test(tc, bias_act_and_bias_grad);
    tcase_add_test(tc, cross_entropy_values_and_grads);
    tcase_add_test(tc, mse_values_and_grads);
    tcase_add_test(tc, sumsq_scale_optim_step);
    tcase_add_test(tc, layer_kernels_match_element_functions);
    tcase_add_test(tc, conv3x3_matches_direct_sum);
    tcase_add_test(tc, pool_and_bias_backward_same_bits);
    suite_add_tcase(s, tc);
    return s;
}
