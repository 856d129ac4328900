/* test_cuda_rows.c - the CUDA backend's row and column kernels
 * (runtime/ops_cuda_rows.cuh), run on the CPU by tests/cuda_emu.h with the
 * launch shapes ops_cuda.cu uses, against the CPU backend's element
 * functions (ops_kernels.h):
 *   - layer norm forward, causal softmax forward and backward, the token
 *     embedding's gradient: the CPU's bits, element for element;
 *   - layer norm's dx and dw/db, cross-entropy over wide rows, the conv
 *     bias gradient, batch norm's statistics (running ones too) and
 *     backward sums: other sum orders, so within rounding of the CPU;
 * each at sizes that leave partial lane groups, partial blocks and more
 * than one block, and with a one-block grid (every thread strides).
 * Every test runs with the block's threads taking turns in ascending and
 * in descending order (tests/cuda_emu.h), so a missing barrier shows.
 * The emulator itself: barriers and shuffles exchange what they should, a
 * shuffle outside CUDA's rules and a shuffle some lanes skip fail the launch.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "suites.h"
#include "testutil.h"
#include "cuda_emu.h"
#include "ops_cuda_rows.cuh"

/* ---- helpers ---- */

static uint64_t rng_state;

static float urand(void)            /* in [-1, 1) */
{
    return test_urand(&rng_state);
}

static float *fill(size_t n, float scale)
{
    float *p = malloc(n * sizeof *p);
    ck_assert_ptr_nonnull(p);
    for (size_t i = 0; i < n; i++)
        p[i] = scale * urand();
    return p;
}

static float *dup(const float *x, size_t n)
{
    float *p = malloc(n * sizeof *p);
    ck_assert_ptr_nonnull(p);
    memcpy(p, x, n * sizeof *p);
    return p;
}

static void launch(struct emu_dim3 grid, struct emu_dim3 block, void (*body)(void *), void *arg)
{
    char why[512];
    ck_assert_msg(emu_launch(grid, block, body, arg, why, sizeof why) == 0, "%s", why);
}

static struct emu_dim3 d3(unsigned x, unsigned y)
{
    return (struct emu_dim3){ x, y, 1 };
}

static void same_bits(const float *got, const float *want, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(memcmp(&got[i], &want[i], sizeof got[i]) == 0,
                      "%s: element %zu is %.9g on the GPU kernel, %.9g on the CPU", what, i,
                      (double)got[i], (double)want[i]);
}

static void near(const float *got, const float *want, size_t n, double rel, const char *what)
{
    double worst = 0, scale = 0;
    for (size_t i = 0; i < n; i++)
        scale = fmax(scale, fabs(want[i]));
    for (size_t i = 0; i < n; i++) {
        ck_assert_msg(isfinite(got[i]), "%s: element %zu is %g", what, i, (double)got[i]);
        worst = fmax(worst, fabs((double)got[i] - want[i]));
    }
    ck_assert_msg(worst <= rel * (scale > 0 ? scale : 1), "%s: max abs difference %.3g, "
                  "bound %.3g", what, worst, rel * scale);
}

/* ---- a launch of each row kernel ---- */

struct rows_call {
    void (*kernel)(size_t rows, struct ddpc_lk a);
    size_t rows;
    struct ddpc_lk a;
};

static void rows_body(void *p)
{
    struct rows_call *c = p;
    c->kernel(c->rows, c->a);
}

/* As ops_cuda.cu launches it (all_blocks), or with one block of 32 rows
 * whose threads stride over the rest. */
static void run_rows(void (*kernel)(size_t, struct ddpc_lk), size_t rows, const struct ddpc_lk *a,
                     int all_blocks)
{
    struct rows_call c = { kernel, rows, *a };
    launch(d3(all_blocks ? rows_blocks(rows) : 1, 1), d3(ROW_THREADS, 1), rows_body, &c);
}

/* ---- layer norm ---- */

START_TEST(ln_forward_same_bits)
{
    emu_order = _i;
    static const int Cs[] = { 1, 5, 8, 13, 64, 100 };
    static const int Ns[] = { 1, 7, 33, 70 };
    rng_state = 11;
    for (size_t ci = 0; ci < sizeof Cs / sizeof Cs[0]; ci++)
        for (size_t ni = 0; ni < sizeof Ns / sizeof Ns[0]; ni++)
            for (int bias = 0; bias < 2; bias++)
                for (int all = 0; all < 2; all++) {
                    int C = Cs[ci], N = Ns[ni];
                    size_t n = (size_t)N * C;
                    float *x = fill(n, 3.0f), *w = fill((size_t)C, 1.0f);
                    float *b = fill((size_t)C, 1.0f);
                    for (size_t i = 0; i < n; i++)
                        x[i] += 0.5f;                     /* a mean away from 0 */
                    if (C >= 8) {
                        /* lanes 1e16, 1, -1e16, 1: their sum is 0 in the CPU's
                         * tree and 2 in most others */
                        memset(x, 0, (size_t)C * sizeof *x);
                        x[0] = 1e16f;
                        x[1] = 1.0f;
                        x[2] = -1e16f;
                        x[3] = 1.0f;
                    }
                    float *y0 = calloc(n, 4), *y1 = calloc(n, 4);
                    float *m0 = calloc((size_t)N, 4), *m1 = calloc((size_t)N, 4);
                    float *r0 = calloc((size_t)N, 4), *r1 = calloc((size_t)N, 4);
                    struct ddpc_lk a = { .x = x, .w = w, .b = bias ? b : NULL, .C = C,
                                         .f2 = 1e-5f };
                    a.y = y0; a.s0 = m0; a.s1 = r0;
                    for (int r = 0; r < N; r++)
                        ddpc_lk_ln_fwd((size_t)r, &a);
                    a.y = y1; a.s0 = m1; a.s1 = r1;
                    run_rows(k_ln_fwd8, (size_t)N, &a, all);
                    same_bits(y1, y0, n, "layer norm y");
                    same_bits(m1, m0, (size_t)N, "layer norm mean");
                    same_bits(r1, r0, (size_t)N, "layer norm rstd");
                    free(x); free(w); free(b); free(y0); free(y1);
                    free(m0); free(m1); free(r0); free(r1);
                }
}
END_TEST

/* dx (accx 0 and 1), and dw/db through the column-segment kernels with
 * the column chunks ops_cuda.cu uses for a wide layer. */
struct seg_call {
    struct ddpc_lk a;
    int c0, cols;
    double *part;
    int sum;
};

static void seg_body(void *p)
{
    struct seg_call *c = p;
    if (c->sum)
        k_ln_dw_sum(c->a, c->c0, c->cols, c->part);
    else
        k_ln_dw_part(c->a, c->c0, c->cols, c->part);
}

static void run_ln_dw(const struct ddpc_lk *a, int chunk)
{
    double *part = malloc((size_t)2 * SEG_ROWS * (size_t)chunk * sizeof *part);
    ck_assert_ptr_nonnull(part);
    for (int c0 = 0; c0 < a->C; c0 += chunk) {
        int cols = a->C - c0 < chunk ? a->C - c0 : chunk;
        struct seg_call c = { *a, c0, cols, part, 0 };
        launch(d3((unsigned)((cols + SEG_COLS - 1) / SEG_COLS), SEG_ROWS),
               d3(SEG_COLS, SEG_DEPTH), seg_body, &c);
        c.sum = 1;
        launch(d3((unsigned)((cols + 255) / 256), 1), d3(256, 1), seg_body, &c);
    }
    free(part);
}

START_TEST(ln_backward_within_rounding)
{
    emu_order = _i;
    /* columns, rows: 1100 rows give every thread down a column of every
     * segment rows of its own */
    static const int shapes[][2] = { { 3, 1 }, { 8, 9 }, { 77, 9 }, { 40, 1100 }, { 5, 130 } };
    rng_state = 12;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int acc = 0; acc < 2; acc++) {
                int C = shapes[si][0], N = shapes[si][1];
                size_t n = (size_t)N * C;
                float *x = fill(n, 2.0f), *w = fill((size_t)C, 1.0f), *dy = fill(n, 1.0f);
                float *y = calloc(n, 4), *mean = calloc((size_t)N, 4), *rstd = calloc((size_t)N, 4);
                struct ddpc_lk a = { .x = x, .w = w, .y = y, .s0 = mean, .s1 = rstd, .C = C,
                                     .N = N, .f2 = 1e-5f, .dy = dy, .accx = acc, .accg = acc };
                for (int r = 0; r < N; r++)
                    ddpc_lk_ln_fwd((size_t)r, &a);
                float *dx0 = fill(n, 1.0f), *dx1 = dup(dx0, n), *dx2 = dup(dx0, n);
                a.dx = dx0;
                for (int r = 0; r < N; r++)
                    ddpc_lk_ln_bwd_dx((size_t)r, &a);
                a.dx = dx1;
                run_rows(k_ln_bwd_dx8, (size_t)N, &a, 1);
                near(dx1, dx0, n, 1e-6, "layer norm dx");
                a.dx = dx2;
                run_rows(k_ln_bwd_dx8, (size_t)N, &a, 0);
                same_bits(dx2, dx1, n, "layer norm dx, one block against all");

                float *dw0 = fill((size_t)C, 1.0f), *db0 = fill((size_t)C, 1.0f);
                float *dw1 = dup(dw0, (size_t)C), *db1 = dup(db0, (size_t)C);
                float *dw2 = dup(dw0, (size_t)C), *db2 = dup(db0, (size_t)C);
                a.dw = dw0; a.db = db0;
                for (int j = 0; j < C; j++)
                    ddpc_lk_ln_bwd_dw((size_t)j, &a);
                a.dw = dw1; a.db = db1;
                run_ln_dw(&a, 4096);
                near(dw1, dw0, (size_t)C, 1e-6, "layer norm dw");
                near(db1, db0, (size_t)C, 1e-6, "layer norm db");
                a.dw = dw2; a.db = NULL;          /* no bias; chunks of 32 columns */
                run_ln_dw(&a, 32);
                same_bits(dw2, dw1, (size_t)C, "layer norm dw in column chunks");
                free(x); free(w); free(dy); free(y); free(mean); free(rstd);
                free(dx0); free(dx1); free(dx2);
                free(dw0); free(db0); free(dw1); free(db1); free(dw2); free(db2);
            }
}
END_TEST

/* ---- causal softmax ---- */

START_TEST(attn_softmax_same_bits)
{
    emu_order = _i;
    static const int Ts[] = { 1, 7, 8, 9, 80 };
    rng_state = 13;
    for (size_t ti = 0; ti < sizeof Ts / sizeof Ts[0]; ti++)
        for (int all = 0; all < 2; all++) {
            int T = Ts[ti], BH = 3;
            size_t rows = (size_t)BH * T, n = rows * (size_t)T;
            float *s = fill(n, 4.0f);
            s[T * (T - 1)] = NAN;                /* a NaN row ends NaN on both */
            float *p0 = dup(s, n), *p1 = dup(s, n);
            struct ddpc_lk a = { .T = T };
            a.y = p0;
            for (size_t i = 0; i < rows; i++)
                ddpc_lk_attn_softmax(i, &a);
            a.y = p1;
            run_rows(k_attn_softmax8, rows, &a, all);
            same_bits(p1, p0, n, "causal softmax");

            float *dy = fill(n, 1.0f), *dx0 = fill(n, 1.0f), *dx1 = dup(dx0, n);
            float *alias = dup(dy, n);
            struct ddpc_lk b = { .T = T, .x = p0, .dy = dy, .f1 = 0.125f };
            b.dx = dx0;
            for (size_t i = 0; i < rows; i++)
                ddpc_lk_attn_softmax_bwd(i, &b);
            b.dx = dx1;
            run_rows(k_attn_softmax_bwd8, rows, &b, all);
            same_bits(dx1, dx0, n, "causal softmax backward");
            b.dy = alias;                        /* in place, as attn.c calls it */
            b.dx = alias;
            run_rows(k_attn_softmax_bwd8, rows, &b, all);
            same_bits(alias, dx0, n, "causal softmax backward in place");
            free(s); free(p0); free(p1); free(dy); free(dx0); free(dx1); free(alias);
        }
}
END_TEST

/* ---- per-channel sums (conv bias gradient, batch norm) ---- */

struct chan_call {
    int what, c0, cols, sum;
    struct ddpc_lk a;
    double *part;
};

static void chan_body(void *p)
{
    struct chan_call *c = p;
    if (c->sum)
        k_chan_sum(c->what, c->a, c->c0, c->cols, c->part);
    else
        k_chan_part(c->what, c->a, c->c0, c->cols, c->part);
}

/* ops_cuda.cu's chan_sums, `chunk` channels a pass */
static void run_chan(int what, int bn, const struct ddpc_lk *a, int chunk)
{
    double *part = malloc(chan_part_doubles(chunk) * sizeof *part);
    ck_assert_ptr_nonnull(part);
    for (int c0 = 0; c0 < a->C; c0 += chunk) {
        int cols = a->C - c0 < chunk ? a->C - c0 : chunk;
        for (int pass = 0; pass < (bn ? 2 : 1); pass++) {
            struct chan_call c = { bn ? (pass ? CH_BN_SQ : CH_BN_SUM) : what, c0, cols, 0, *a,
                                   part };
            launch(d3((unsigned)cols, CH_SEGS), d3(CH_THREADS, 1), chan_body, &c);
            c.sum = 1;
            launch(d3((unsigned)((cols + 255) / 256), 1), d3(256, 1), chan_body, &c);
        }
    }
    free(part);
}

START_TEST(channel_sums_within_rounding)
{
    emu_order = _i;
    /* samples, channels, plane size: fewer samples than segments, a plane
     * smaller than a block, one larger than a block */
    static const int shapes[][3] = { { 1, 3, 1 }, { 5, 4, 9 }, { 40, 3, 300 }, { 17, 2, 64 } };
    rng_state = 16;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int acc = 0; acc < 2; acc++) {
            int N = shapes[si][0], C = shapes[si][1], H = shapes[si][2];
            size_t n = (size_t)N * C * H;
            float *x = fill(n, 2.0f), *dy = fill(n, 1.0f);
            for (size_t i = 0; i < n; i++)
                x[i] += 0.75f;
            /* conv bias gradient, chunks of 2 channels */
            float *db0 = fill((size_t)C, 1.0f), *db1 = dup(db0, (size_t)C);
            struct ddpc_lk a = { .x = x, .dy = dy, .N = N, .C = C, .H = H, .accg = acc };
            a.db = db0;
            for (int c = 0; c < C; c++)
                ddpc_lk_run(DDPC_LK_CHAN_BIAS_GRAD, (size_t)c, &a);
            a.db = db1;
            run_chan(CH_BIAS_GRAD, 0, &a, 2);
            near(db1, db0, (size_t)C, 1e-6, "conv bias gradient");

            /* batch norm statistics and running statistics, then backward sums */
            size_t ns = (size_t)2 * C + 1;
            float *rs0 = fill(ns, 1.0f), *rs1 = dup(rs0, ns);
            for (int c = 0; c < 2 * C; c++)
                rs0[c] = rs1[c] = fabsf(rs0[c]) + 0.5f;     /* variances > 0 */
            float *m0 = calloc((size_t)C, 4), *m1 = calloc((size_t)C, 4);
            float *i0 = calloc((size_t)C, 4), *i1 = calloc((size_t)C, 4);
            struct ddpc_lk b = { .x = x, .dy = dy, .N = N, .C = C, .H = H, .accg = acc,
                                 .training = 1, .f1 = 0.1f, .f2 = 1e-5f };
            b.rs = rs0; b.s0 = m0; b.s1 = i0;
            for (int c = 0; c < C; c++)
                ddpc_lk_bn_stats((size_t)c, &b);
            b.rs = rs1; b.s0 = m1; b.s1 = i1;
            run_chan(0, 1, &b, C > 2 ? C - 1 : C);           /* two passes, two chunks */
            near(m1, m0, (size_t)C, 1e-6, "batch norm mean");
            near(i1, i0, (size_t)C, 1e-6, "batch norm 1/std");
            near(rs1, rs0, ns, 1e-6, "batch norm running statistics and count");

            float *t0 = calloc((size_t)2 * C, 4), *t1 = calloc((size_t)2 * C, 4);
            float *dw0 = fill((size_t)C, 1.0f), *dw1 = dup(dw0, (size_t)C);
            float *db2 = fill((size_t)C, 1.0f), *db3 = dup(db2, (size_t)C);
            b.s0 = m0; b.s1 = i0;                        /* the same statistics both */
            b.t = t0; b.dw = dw0; b.db = db2;
            for (int c = 0; c < C; c++)
                ddpc_lk_bn_bwd_reduce((size_t)c, &b);
            b.t = t1; b.dw = dw1; b.db = db3;
            run_chan(CH_BN_BWD, 0, &b, 4096);
            near(t1, t0, (size_t)2 * C, 1e-6, "batch norm backward sums");
            near(dw1, dw0, (size_t)C, 1e-6, "batch norm dw");
            near(db3, db2, (size_t)C, 1e-6, "batch norm db");
            free(x); free(dy); free(db0); free(db1); free(rs0); free(rs1);
            free(m0); free(m1); free(i0); free(i1); free(t0); free(t1);
            free(dw0); free(dw1); free(db2); free(db3);
        }
}
END_TEST

/* ---- the token embedding's gradient ---- */

struct wte_call {
    struct ddpc_lk a;
    size_t rows;
};

static void wte_body(void *p)
{
    struct wte_call *c = p;
    k_wte_bwd(c->a, c->rows);
}

START_TEST(wte_backward_same_bits)
{
    emu_order = _i;
    static const int Cs[] = { 5, 32, 45 };
    rng_state = 14;
    for (size_t ci = 0; ci < sizeof Cs / sizeof Cs[0]; ci++) {
        int C = Cs[ci], V = 150, N = 3, T = 11;
        size_t rows = (size_t)N * T, nw = (size_t)V * C;
        float *ids = malloc(rows * sizeof *ids);
        for (size_t r = 0; r < rows; r++)       /* repeats: one id in many rows */
            ids[r] = (float)((r * 37 + r / 5) % 70 + (r % 3 ? 80 : 0));
        ids[4] = -1.0f;                         /* not ids: skipped on both */
        ids[9] = (float)V;
        ids[10] = 2.5f;
        float *dy = fill(rows * C, 1.0f), *w0 = fill(nw, 1.0f), *w1 = dup(w0, nw);
        struct ddpc_lk a = { .x = ids, .dy = dy, .C = C, .N = N, .T = T, .V = V, .accg = 1 };
        a.dw = w0;
        for (int c = 0; c < C; c++)
            ddpc_lk_emb_bwd_wte((size_t)c, &a);
        a.dw = w1;                              /* accg: added to what is there */
        struct wte_call call = { a, rows };
        launch(d3((unsigned)((C + WTE_COLS - 1) / WTE_COLS), WTE_SLICES / 8), d3(WTE_COLS, 8),
               wte_body, &call);
        same_bits(w1, w0, nw, "token embedding gradient");
        free(ids); free(dy); free(w0); free(w1);
    }
}
END_TEST

/* ---- cross-entropy over wide rows ---- */

struct xent_call {
    const float *x;
    const int32_t *y;
    float *d;
    int rows, cols;
    double *loss;
    int *flag;
};

static void xent_body(void *p)
{
    struct xent_call *c = p;
    k_xent_wide(c->x, c->y, c->d, c->rows, c->cols, 0.25f, c->loss, c->flag);
}

START_TEST(xent_wide_within_rounding)
{
    emu_order = _i;
    enum { ROWS = 6, COLS = XENT_WIDE + 37 };
    size_t n = (size_t)ROWS * COLS;
    rng_state = 15;
    float *x = fill(n, 6.0f);
    int32_t y[ROWS] = { 3, COLS - 1, 700, 5, -1, 9 };
    /* row 2: its label is a tied maximum, after the first (not correct);
     * row 3: tied maxima, the label the first of them (correct);
     * row 5: x[0] NaN: the scan keeps it as the maximum, as the CPU's */
    x[128] = 1000.0f;                 /* row 0's maximum, thread 128's: a block's
                                       * next row reads it if a barrier is missing */
    x[2 * COLS + 100] = 50.0f;
    x[2 * COLS + 700] = 50.0f;
    x[3 * COLS + 5] = 50.0f;
    x[3 * COLS + 900] = 50.0f;
    x[5 * COLS] = NAN;
    x[5 * COLS + 9] = 50.0f;          /* the label's: still not correct, as the CPU */
    for (int alias = 0; alias < 2; alias++) {
        float *xg = dup(x, n), *d0 = calloc(n, 4), *d1 = alias ? xg : calloc(n, 4);
        double loss[ROWS];
        int flag[ROWS];
        struct xent_call c = { xg, y, d1, ROWS, COLS, loss, flag };
        /* as ops_cuda.cu launches it (a block per row), or 2 blocks whose
         * rows follow one another through the same shared memory */
        launch(d3(alias ? 2 : xent_blocks(ROWS), 1), d3(XENT_THREADS, 1), xent_body, &c);
        for (int r = 0; r < ROWS; r++) {
            const float *xr = x + (size_t)r * COLS;
            if (y[r] < 0) {
                ck_assert_int_eq(flag[r], -1);
                ck_assert(loss[r] == 0.0);
                continue;
            }
            int ok = 0;
            double want = ddpc_k_xent_row(xr, y[r], d0 + (size_t)r * COLS, COLS, 0.25f, &ok);
            ck_assert_msg(flag[r] == ok, "row %d: correct %d on the GPU kernel, %d on the CPU",
                          r, flag[r], ok);
            if (isnan(want)) {
                ck_assert_msg(isnan(loss[r]), "row %d: loss %g, the CPU's NaN", r, loss[r]);
                continue;
            }
            ck_assert_msg(fabs(loss[r] - want) <= 1e-5 * fabs(want), "row %d: loss %.9g on "
                          "the GPU kernel, %.9g on the CPU", r, loss[r], want);
            near(d1 + (size_t)r * COLS, d0 + (size_t)r * COLS, COLS, 1e-5, "xent gradient");
        }
        ck_assert_int_eq(flag[2], 0);
        ck_assert_int_eq(flag[3], 1);
        free(xg); free(d0);
        if (!alias)
            free(d1);
    }
    free(x);
}
END_TEST

/* ---- the loss's and sumsq's block sums ---- */

struct loss_call {
    int type, stage, rows, cols;
    const float *x, *t;
    const int32_t *y;
    float *d;
    double *loss, *acc;
    int *flag;
};

static void loss_body(void *p)
{
    struct loss_call *c = p;
    if (c->stage == 0)
        k_loss_rows(c->type, c->x, c->y, c->t, c->d, c->rows, c->cols, 0.5f, c->loss, c->flag);
    else
        k_loss_reduce(c->loss, c->flag, c->rows, c->acc);
}

/* Cross-entropy and mse rows (a thread each: ddpc_k_xent_row's and
 * ddpc_k_mse_row's bits), then their sums added into an accumulator that
 * holds earlier values, over more rows than a block has threads. */
START_TEST(loss_rows_and_sums)
{
    emu_order = _i;
    enum { ROWS = 300, COLS = 7 };
    size_t n = (size_t)ROWS * COLS;
    rng_state = 17;
    float *x = fill(n, 3.0f), *t = fill(n, 1.0f);
    int32_t y[ROWS];
    for (int r = 0; r < ROWS; r++)
        y[r] = r % 37 == 5 ? COLS + r % 2 * -(COLS + 1) : (r * 7) % COLS;   /* some bad */
    for (int type = 0; type < 2; type++) {
        float *d0 = calloc(n, 4), *d1 = calloc(n, 4);
        double loss[ROWS], acc[3] = { 1.0, 2.0, 3.0 }, want[3] = { 1.0, 2.0, 3.0 };
        int flag[ROWS];
        struct loss_call c = { type, 0, ROWS, COLS, x, t, y, d1, loss, acc, flag };
        launch(d3((ROWS + BLOCK_THREADS - 1) / BLOCK_THREADS, 1), d3(BLOCK_THREADS, 1),
               loss_body, &c);
        c.stage = 1;
        launch(d3(1, 1), d3(BLOCK_THREADS, 1), loss_body, &c);
        for (int r = 0; r < ROWS; r++) {
            const float *xr = x + (size_t)r * COLS;
            float *dr = d0 + (size_t)r * COLS;
            if (type == 0 && (y[r] < 0 || y[r] >= COLS)) {
                ck_assert_int_eq(flag[r], -1);
                want[2] += 1;
                continue;
            }
            int ok = 0;
            double l = type ? ddpc_k_mse_row(xr, t + (size_t)r * COLS, dr, COLS, 0.5f)
                            : ddpc_k_xent_row(xr, y[r], dr, COLS, 0.5f, &ok);
            ck_assert_msg(memcmp(&l, &loss[r], sizeof l) == 0, "row %d: loss %.17g, the "
                          "CPU's %.17g", r, loss[r], l);
            ck_assert_int_eq(flag[r], type ? 0 : ok);
            want[0] += l;
            want[1] += ok;
            same_bits(d1 + (size_t)r * COLS, dr, COLS, "loss gradient row");
        }
        ck_assert_msg(fabs(acc[0] - want[0]) <= 1e-12 * fabs(want[0]), "loss sum %.17g, "
                      "in row order %.17g", acc[0], want[0]);
        ck_assert(acc[1] == want[1] && acc[2] == want[2]);
        ck_assert_msg(type == 1 || want[2] > 3.0, "the test has bad labels");
        free(d0); free(d1);
    }
    free(x); free(t);
}
END_TEST

struct sumsq_call {
    const float *x;
    size_t n;
    double *partial, *out;
    int stage;
};

static void sumsq_body(void *p)
{
    struct sumsq_call *c = p;
    if (c->stage == 0)
        k_sumsq_partial(c->x, c->n, c->partial);
    else
        k_sum_partials(c->partial, RED_BLOCKS, c->out);
}

/* sumsq over sizes below one thread each, exactly RED_BLOCKS blocks, and
 * many times that (the fixed grid strides): the exact sum within double
 * rounding, and the same bits in both thread orders. */
START_TEST(sumsq_fixed_grid)
{
    static const size_t ns[] = { 1, 300, (size_t)RED_BLOCKS * BLOCK_THREADS + 17, 200000 };
    rng_state = 18;
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        float *x = fill(ns[k], 2.0f);
        double partial[RED_BLOCKS], out[2] = { -1.0, -2.0 }, want = 0.0;
        for (size_t i = 0; i < ns[k]; i++)
            want += (double)x[i] * x[i];
        for (int order = EMU_ASCENDING; order <= EMU_DESCENDING; order++) {
            emu_order = order;
            struct sumsq_call c = { x, ns[k], partial, &out[order], 0 };
            launch(d3(RED_BLOCKS, 1), d3(BLOCK_THREADS, 1), sumsq_body, &c);
            c.stage = 1;
            launch(d3(1, 1), d3(BLOCK_THREADS, 1), sumsq_body, &c);
            ck_assert_msg(fabs(out[order] - want) <= 1e-12 * want, "n %zu: sumsq %.17g, "
                          "exact %.17g", ns[k], out[order], want);
        }
        ck_assert_msg(memcmp(&out[0], &out[1], sizeof out[0]) == 0, "n %zu: sumsq %.17g and "
                      "%.17g in the two thread orders", ns[k], out[0], out[1]);
        free(x);
    }
}
END_TEST

/* ---- the emulator itself ---- */

static int rotated[64];

static void rotate_body(void *p)
{
    (void)p;
    __shared__ int s[64];
    unsigned t = threadIdx.x;
    s[t] = (int)(t * 10 + blockIdx.x);
    __syncthreads();
    int v = s[(t + 1) % 64];
    __syncthreads();                            /* the next block overwrites s */
    if (blockIdx.x == 1)
        rotated[t] = v + __shfl_xor_sync(0xFFu << (t % 32 / 8 * 8), (int)t, 3, 8);
}

static void bad_mask_body(void *p)
{
    (void)p;
    (void)__shfl_xor_sync(0xFFFFFFFFu, 1.0, 1, 8);   /* a group of 8 with a warp's mask */
}

static void skipped_shuffle_body(void *p)
{
    (void)p;
    if (threadIdx.x % 8 != 5)                         /* lane 5 never arrives */
        (void)__shfl_xor_sync(0xFFu << (threadIdx.x % 32 / 8 * 8), 1.0f, 1, 8);
}

START_TEST(emulator_barriers_and_shuffles)
{
    emu_order = _i;
    launch(d3(2, 1), d3(64, 1), rotate_body, NULL);
    for (unsigned t = 0; t < 64; t++)
        ck_assert_int_eq(rotated[t], (int)(((t + 1) % 64) * 10 + 1 + (t ^ 3)));
    char why[512];
    ck_assert_int_eq(emu_launch(d3(1, 1), d3(32, 1), bad_mask_body, NULL, why, sizeof why), -1);
    ck_assert_msg(strstr(why, "mask 0xffffffff") && strstr(why, "(0xff"), "%s", why);
    ck_assert_int_eq(emu_launch(d3(1, 1), d3(16, 1), skipped_shuffle_body, NULL, why,
                                sizeof why), -1);
    ck_assert_msg(strstr(why, "waits at a shuffle that the block's other threads never reach"),
                  "%s", why);
}
END_TEST

Suite *cuda_rows_suite(void)
{
    Suite *s = suite_create("cuda_rows");
    TCase *tc = tcase_create("cuda_rows");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, ln_forward_same_bits, EMU_ASCENDING, EMU_DESCENDING + 1);
    tcase_add_loop_test(tc, ln_backward_within_rounding, EMU_ASCENDING, EMU_DESCENDING + 1);
    tcase_add_loop_test(tc, attn_softmax_same_bits, EMU_ASCENDING, EMU_DESCENDING + 1);
    tcase_add_loop_test(tc, wte_backward_same_bits, EMU_ASCENDING, EMU_DESCENDING + 1);
    tcase_add_loop_test(tc, channel_sums_within_rounding, EMU_ASCENDING, EMU_DESCENDING + 1);
    tcase_add_loop_test(tc, xent_wide_within_rounding, EMU_ASCENDING, EMU_DESCENDING + 1);
    tcase_add_loop_test(tc, loss_rows_and_sums, EMU_ASCENDING, EMU_DESCENDING + 1);
    tcase_add_test(tc, sumsq_fixed_grid);
    tcase_add_loop_test(tc, emulator_barriers_and_shuffles, EMU_ASCENDING, EMU_DESCENDING + 1);
    suite_add_tcase(s, tc);
    return s;
}
