/* test_gpt.c - the GPT's operations against PyTorch (tests/gpt_ref.py, whose
 * modules are tests/nanogpt.py's), and their determinism.
 *
 * Each op case runs ddpc's kernels through the CPU backend (ops_cpu) on
 * seeded inputs and a seeded output gradient, writes inputs, outputs and
 * gradients to a safetensors file and lets gpt_ref.py recompute them with
 * torch.autograd: 1e-5 relative (L2) on every output and gradient. The
 * model cases build a whole GPT from a spec (model.type: gpt) through
 * model_init, give it nanoGPT's init nudged (so biases and norms are not
 * 0 and 1), run one training forward and backward of the mean
 * cross-entropy over every position, and compare the loss and every
 * parameter's gradient with tests/nanogpt.py's GPT holding the same weights
 * (and, with dropout, ddpc's masks). SKIP without torch.
 */
#include <check.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "layers.h"
#include "model.h"
#include "ops.h"
#include "ops_kernels.h"
#include "rng.h"
#include "spec.h"
#include "testutil.h"

/* ---- helpers ---- */

static float *fbuf(size_t n)
{
    float *p = calloc(n ? n : 1, sizeof *p);
    ck_assert_ptr_nonnull(p);
    return p;
}

/* n floats uniform in [-s, s) */
static float *frand(struct ddpc_rng *r, size_t n, double s)
{
    float *p = fbuf(n);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)((2.0 * rng_uniform(r) - 1.0) * s);
    return p;
}

static float *ftokens(struct ddpc_rng *r, size_t n, int V)
{
    float *p = fbuf(n);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)rng_below(r, (uint64_t)V);
    return p;
}

static void add(struct st_file *f, const char *name, const float *data, int nd, ...)
{
    int64_t shape[5];
    va_list ap;
    va_start(ap, nd);
    for (int i = 0; i < nd; i++)
        shape[i] = va_arg(ap, int64_t);
    va_end(ap);
    st_add(f, name, nd, shape, data);
}

/* cfg = [B, T, C, V, heads, p, bias] */
static void add_cfg(struct st_file *f, int B, int T, int C, int V, int H, double p, int bias)
{
    float cfg[7] = { (float)B, (float)T, (float)C, (float)V, (float)H, (float)p, (float)bias };
    add(f, "cfg", cfg, 1, (int64_t)7);
}

/* Writes f and runs gpt_ref.py ARGS... on it; SKIP without torch. */
static void compare(struct st_file *f, const char *mode, const char *kind)
{
    char *dir = make_temp_dir("gpt");
    ck_assert_ptr_nonnull(dir);
    char *data, *script;
    ck_assert_int_ge(asprintf(&data, "%s/data.safetensors", dir), 0);
    ck_assert_int_ge(asprintf(&script, "%s/tests/gpt_ref.py", test_top()), 0);
    st_write(f, data);
    char *argv_op[] = { "/usr/bin/python3", script, (char *)mode, (char *)kind, data, NULL };
    char *argv_model[] = { "/usr/bin/python3", script, (char *)mode, data, NULL };
    struct run_result rr;
    ck_assert_int_eq(run_capture(kind ? argv_op : argv_model, NULL, NULL, 300, &rr), 0);
    if (rr.exited && rr.code == 77) {
        test_skip("gpt: PyTorch parity", "%s", rr.out);
    } else {
        ck_assert_msg(rr.exited && rr.code == 0, "gpt_ref.py %s %s:\n%s%s", mode,
                      kind ? kind : "", rr.out, rr.err);
        ck_assert_ptr_nonnull(strstr(rr.out, "\nOK"));
        if (getenv("DDPC_TEST_VERBOSE"))   /* each tensor's error */
            printf("gpt_ref.py %s %s:\n%s", mode, kind ? kind : "", rr.out);
    }
    run_result_free(&rr);
    rm_tree(dir);
    free(dir);
    free(data);
    free(script);
}

static struct st_file *st_new(void)
{
    struct st_file *f = calloc(1, sizeof *f);
    ck_assert_ptr_nonnull(f);
    return f;
}

/* ---- embedding ---- */

START_TEST(op_embedding)
{
    int B = 3, T = 7, C = 6, V = 11;
    struct ddpc_ops o;
    struct ddpc_err e = { 0 };
    ck_assert_int_eq(ops_cpu_init(&o, &e), 0);
    struct ddpc_rng r;
    rng_seed(&r, 15);
    float *x = ftokens(&r, (size_t)B * T, V);
    x[0] = x[1] = x[5];   /* repeated ids: the scatter sums them */
    float *wte = frand(&r, (size_t)V * C, 1), *wpe = frand(&r, (size_t)T * C, 1);
    float *y = fbuf((size_t)B * T * C), *dy = frand(&r, (size_t)B * T * C, 1);
    float *dwte = frand(&r, (size_t)V * C, 1), *dwpe = frand(&r, (size_t)T * C, 1); /* overwritten */
    struct ddpc_lk a;
    memset(&a, 0, sizeof a);
    a.x = x; a.w = wte; a.b = wpe; a.y = y; a.dy = dy; a.dw = dwte; a.db = dwpe;
    a.N = B; a.T = T; a.C = C; a.V = V;
    ck_assert_int_eq(o.layer_kernel(&o, DDPC_LK_EMB_FWD, (size_t)B * T * C, &a, &e), 0);
    ck_assert_int_eq(o.layer_kernel(&o, DDPC_LK_EMB_BWD_WTE, (size_t)C, &a, &e), 0);
    ck_assert_int_eq(o.layer_kernel(&o, DDPC_LK_EMB_BWD_WPE, (size_t)T * C, &a, &e), 0);

    /* the element function (the GPU's) column by column gives the same bytes */
    float *dwte2 = fbuf((size_t)V * C);
    struct ddpc_lk b = a;
    b.dw = dwte2;
    for (int c = 0; c < C; c++)
        ddpc_lk_emb_bwd_wte((size_t)c, &b);
    ck_assert_int_eq(memcmp(dwte, dwte2, (size_t)V * C * sizeof *dwte), 0);

    struct st_file *f = st_new();
    add_cfg(f, B, T, C, V, 1, 0, 1);
    add(f, "x", x, 2, (int64_t)B, (int64_t)T);
    add(f, "wte", wte, 2, (int64_t)V, (int64_t)C);
    add(f, "wpe", wpe, 2, (int64_t)T, (int64_t)C);
    add(f, "y", y, 3, (int64_t)B, (int64_t)T, (int64_t)C);
    add(f, "dy", dy, 3, (int64_t)B, (int64_t)T, (int64_t)C);
    add(f, "dwte", dwte, 2, (int64_t)V, (int64_t)C);
    add(f, "dwpe", dwpe, 2, (int64_t)T, (int64_t)C);
    compare(f, "op", "embedding");

    /* a token id outside the vocabulary is the data's error, said clearly */
    x[4] = (float)V;
    ck_assert_int_eq(o.layer_kernel(&o, DDPC_LK_EMB_FWD, (size_t)B * T * C, &a, &e), DDPC_E_DATA);
    ck_assert_ptr_nonnull(strstr(e.msg, "vocab_size"));
    x[4] = 2.5f;
    ck_assert_int_eq(o.layer_kernel(&o, DDPC_LK_EMB_FWD, (size_t)B * T * C, &a, &e), DDPC_E_DATA);
    /* the element function never reads outside wte: NaN instead */
    ddpc_lk_emb_fwd(4 * (size_t)C, &a);
    ck_assert(isnan(y[4 * C]));
    free(f);
    free(x); free(wte); free(wpe); free(y); free(dy); free(dwte); free(dwpe); free(dwte2);
    o.destroy(&o);
}
END_TEST

/* ---- layernorm, with and without bias ---- */

static void layernorm_case(int bias)
{
    int R = 10, C = 24;
    struct ddpc_ops o;
    struct ddpc_err e = { 0 };
    ck_assert_int_eq(ops_cpu_init(&o, &e), 0);
    struct ddpc_rng r;
    rng_seed(&r, 20 + (uint64_t)bias);
    float *x = frand(&r, (size_t)R * C, 2), *w = frand(&r, (size_t)C, 1);
    float *bb = frand(&r, (size_t)C, 1), *dy = frand(&r, (size_t)R * C, 1);
    float *y = fbuf((size_t)R * C), *dx = fbuf((size_t)R * C), *dw = fbuf((size_t)C);
    float *db = fbuf((size_t)C), *st = fbuf(2 * (size_t)R);
    for (int j = 0; j < C; j++)
        w[j] += 1.0f;
    struct ddpc_lk a;
    memset(&a, 0, sizeof a);
    a.x = x; a.w = w; a.b = bias ? bb : NULL; a.y = y; a.dy = dy; a.dx = dx; a.dw = dw;
    a.db = bias ? db : NULL; a.s0 = st; a.s1 = st + R; a.C = C; a.N = R; a.f2 = 1e-5f;
    ck_assert_int_eq(o.layer_kernel(&o, DDPC_LK_LN_FWD, (size_t)R, &a, &e), 0);
    ck_assert_int_eq(o.layer_kernel(&o, DDPC_LK_LN_BWD_DW, (size_t)C, &a, &e), 0);
    ck_assert_int_eq(o.layer_kernel(&o, DDPC_LK_LN_BWD_DX, (size_t)R, &a, &e), 0);
    struct st_file *f = st_new();
    add_cfg(f, 2, R / 2, C, 1, 1, 0, bias);
    add(f, "x", x, 3, (int64_t)2, (int64_t)(R / 2), (int64_t)C);
    add(f, "w", w, 1, (int64_t)C);
    if (bias) {
        add(f, "b", bb, 1, (int64_t)C);
        add(f, "db", db, 1, (int64_t)C);
    }
    add(f, "y", y, 3, (int64_t)2, (int64_t)(R / 2), (int64_t)C);
    add(f, "dy", dy, 3, (int64_t)2, (int64_t)(R / 2), (int64_t)C);
    add(f, "dx", dx, 3, (int64_t)2, (int64_t)(R / 2), (int64_t)C);
    add(f, "dw", dw, 1, (int64_t)C);
    compare(f, "op", "layernorm");
    free(f);
    free(x); free(w); free(bb); free(dy); free(y); free(dx); free(dw); free(db); free(st);
    o.destroy(&o);
}

START_TEST(op_layernorm)
{
    layernorm_case(0);
    layernorm_case(1);
}
END_TEST

/* ---- causal self-attention (nanoGPT's CausalSelfAttention without
 * resid_dropout: c_attn, the attention core, c_proj) ---- */

struct attn_run {
    float *x, *wa, *ba, *wp, *bp, *dy;                /* inputs */
    float *qkv, *att, *ya, *y, *scratch;              /* forward */
    float *dya, *dqkv, *dx, *dwa, *dba, *dwp, *dbp;   /* backward */
};

static void attn_run(struct ddpc_ops *o, const struct ddpc_attn *at, struct attn_run *s)
{
    struct ddpc_err e = { 0 };
    int R = at->B * at->T, C = at->C, C3 = 3 * C;
    /* forward: qkv = x Wa^T + ba; core; y = ya Wp^T + bp */
    ck_assert_int_eq(o->gemm(o, 0, 1, R, C3, C, 1.0f, s->x, C, s->wa, C, 0.0f, s->qkv, C3, &e), 0);
    ck_assert_int_eq(o->bias_act_forward(o, s->qkv, s->ba, s->qkv, R, C3, DDPC_K_IDENTITY, &e), 0);
    ck_assert_msg(attn_forward(o, at, s->qkv, s->att, s->ya, s->scratch, &e) == 0, "%s", e.msg);
    ck_assert_int_eq(o->gemm(o, 0, 1, R, C, C, 1.0f, s->ya, C, s->wp, C, 0.0f, s->y, C, &e), 0);
    ck_assert_int_eq(o->bias_act_forward(o, s->y, s->bp, s->y, R, C, DDPC_K_IDENTITY, &e), 0);
    /* backward */
    ck_assert_int_eq(o->gemm(o, 1, 0, C, C, R, 1.0f, s->dy, C, s->ya, C, 0.0f, s->dwp, C, &e), 0);
    ck_assert_int_eq(o->bias_grad(o, s->dy, s->dbp, R, C, 0.0f, &e), 0);
    ck_assert_int_eq(o->gemm(o, 0, 0, R, C, C, 1.0f, s->dy, C, s->wp, C, 0.0f, s->dya, C, &e), 0);
    ck_assert_msg(attn_backward(o, at, s->qkv, s->att, s->ya, s->dya, s->dqkv, 0, s->scratch,
                                &e) == 0,
                  "%s", e.msg);
    ck_assert_int_eq(o->gemm(o, 1, 0, C3, C, R, 1.0f, s->dqkv, C3, s->x, C, 0.0f, s->dwa, C, &e), 0);
    ck_assert_int_eq(o->bias_grad(o, s->dqkv, s->dba, R, C3, 0.0f, &e), 0);
    ck_assert_int_eq(o->gemm(o, 0, 0, R, C, C3, 1.0f, s->dqkv, C3, s->wa, C, 0.0f, s->dx, C, &e), 0);
}

static void attention_case(int B, int T, int C, int H, double p, uint64_t seed)
{
    struct ddpc_ops o;
    struct ddpc_err e = { 0 };
    ck_assert_int_eq(ops_cpu_init(&o, &e), 0);
    struct ddpc_rng r;
    rng_seed(&r, seed);
    size_t R = (size_t)B * T, htt = (size_t)H * T * T;
    struct attn_run s;
    s.x = frand(&r, R * C, 1);
    s.wa = frand(&r, 3 * (size_t)C * C, 0.5);
    s.ba = frand(&r, 3 * (size_t)C, 0.1);
    s.wp = frand(&r, (size_t)C * C, 0.3);
    s.bp = frand(&r, (size_t)C, 0.1);
    s.dy = frand(&r, R * C, 1);
    s.qkv = fbuf(R * 3 * C); s.att = fbuf(B * htt); s.ya = fbuf(R * C); s.y = fbuf(R * C);
    int64_t kept, scratch;
    attn_floats(&o, T, C, H, (float)p, &kept, &scratch);   /* the CPU's: unfused */
    ck_assert_int_eq(kept, (int64_t)htt);
    ck_assert_int_eq(scratch, (int64_t)htt * (p > 0 ? 2 : 1));
    s.scratch = fbuf((size_t)B * (size_t)scratch);
    s.dya = fbuf(R * C); s.dqkv = fbuf(R * 3 * C); s.dx = fbuf(R * C);
    s.dwa = fbuf(3 * (size_t)C * C); s.dba = fbuf(3 * (size_t)C);
    s.dwp = fbuf((size_t)C * C); s.dbp = fbuf((size_t)C);
    struct ddpc_attn at = { .B = B, .T = T, .C = C, .heads = H, .p = (float)p, .training = 1,
                            .seed = seed * 77 + 1 };
    attn_run(&o, &at, &s);

    struct st_file *f = st_new();
    add_cfg(f, B, T, C, 1, H, p, 1);
    add(f, "x", s.x, 3, (int64_t)B, (int64_t)T, (int64_t)C);
    add(f, "c_attn.weight", s.wa, 2, (int64_t)3 * C, (int64_t)C);
    add(f, "c_attn.bias", s.ba, 1, (int64_t)3 * C);
    add(f, "c_proj.weight", s.wp, 2, (int64_t)C, (int64_t)C);
    add(f, "c_proj.bias", s.bp, 1, (int64_t)C);
    add(f, "y", s.y, 3, (int64_t)B, (int64_t)T, (int64_t)C);
    add(f, "dy", s.dy, 3, (int64_t)B, (int64_t)T, (int64_t)C);
    add(f, "dx", s.dx, 3, (int64_t)B, (int64_t)T, (int64_t)C);
    add(f, "grad.c_attn.weight", s.dwa, 2, (int64_t)3 * C, (int64_t)C);
    add(f, "grad.c_attn.bias", s.dba, 1, (int64_t)3 * C);
    add(f, "grad.c_proj.weight", s.dwp, 2, (int64_t)C, (int64_t)C);
    add(f, "grad.c_proj.bias", s.dbp, 1, (int64_t)C);
    if (p > 0) {   /* the keep-mask over the probabilities, [B, H, T, T] */
        float *mask = fbuf(B * htt);
        for (size_t i = 0; i < B * htt; i++)
            mask[i] = ddpc_k_uniform(at.seed, i) >= (float)p ? 1.0f : 0.0f;
        add(f, "mask.attn", mask, 4, (int64_t)B, (int64_t)H, (int64_t)T, (int64_t)T);
        free(mask);
    }
    compare(f, "op", "attention");
    free(f);

    /* a second run on fresh buffers gives the same bytes */
    struct attn_run s2 = s;
    s2.y = fbuf(R * C); s2.dx = fbuf(R * C); s2.dwa = fbuf(3 * (size_t)C * C);
    attn_run(&o, &at, &s2);
    ck_assert_int_eq(memcmp(s.y, s2.y, R * C * sizeof(float)), 0);
    ck_assert_int_eq(memcmp(s.dx, s2.dx, R * C * sizeof(float)), 0);
    ck_assert_int_eq(memcmp(s.dwa, s2.dwa, 3 * (size_t)C * C * sizeof(float)), 0);
    free(s2.y); free(s2.dx); free(s2.dwa);

    float *bufs[] = { s.x, s.wa, s.ba, s.wp, s.bp, s.dy, s.qkv, s.att, s.ya, s.y, s.scratch,
                      s.dya, s.dqkv, s.dx, s.dwa, s.dba, s.dwp, s.dbp };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    o.destroy(&o);
}

START_TEST(op_attention)
{
    attention_case(2, 9, 12, 3, 0.0, 31);
    attention_case(3, 5, 8, 1, 0.0, 32);
    attention_case(2, 8, 16, 2, 0.25, 33);   /* attn_dropout with ddpc's mask */
    attention_case(2, 70, 16, 2, 0.0, 34);   /* causal blocks of 32: 32 + 32 + 6 rows */
    attention_case(1, 64, 8, 2, 0.1, 35);
}
END_TEST

/* ---- GELU, tanh form ---- */

START_TEST(op_gelu_tanh)
{
    size_t n = 300;
    struct ddpc_ops o;
    struct ddpc_err e = { 0 };
    ck_assert_int_eq(ops_cpu_init(&o, &e), 0);
    struct ddpc_rng r;
    rng_seed(&r, 40);
    float *x = frand(&r, n, 5), *dy = frand(&r, n, 1), *y = fbuf(n), *dx = fbuf(n);
    struct ddpc_lk a;
    memset(&a, 0, sizeof a);
    a.x = x; a.y = y; a.dy = dy; a.dx = dx; a.act = DDPC_K_GELU_TANH;
    ck_assert_int_eq(o.layer_kernel(&o, DDPC_LK_ACT_FWD, n, &a, &e), 0);
    ck_assert_int_eq(o.layer_kernel(&o, DDPC_LK_ACT_BWD, n, &a, &e), 0);
    struct st_file *f = st_new();
    add_cfg(f, 1, 1, 1, 1, 1, 0, 1);
    add(f, "x", x, 1, (int64_t)n);
    add(f, "y", y, 1, (int64_t)n);
    add(f, "dy", dy, 1, (int64_t)n);
    add(f, "dx", dx, 1, (int64_t)n);
    compare(f, "op", "gelu_tanh");
    free(f); free(x); free(dy); free(y); free(dx);
    o.destroy(&o);
}
END_TEST

/* ddpc_k_expf (GELU's exp, a polynomial so loops vectorize) against exp in
 * double: within 2 ulp-ish (2.5e-7 relative) over its range, clamped
 * outside it; GELU keeps NaN and its limits. */
START_TEST(expf_and_gelu_limits)
{
    double worst = 0;
    for (float x = -87.0f; x <= 88.0f; x += 0.00731f) {
        double want = exp((double)x), r = fabs(ddpc_k_expf(x) - want) / want;
        worst = r > worst ? r : worst;
    }
    ck_assert_msg(worst < 2.5e-7, "ddpc_k_expf: worst relative error %g", worst);
    ck_assert_float_eq(ddpc_k_expf(0.0f), 1.0f);
    ck_assert(isfinite(ddpc_k_expf(1000.0f)) && ddpc_k_expf(-1000.0f) > 0.0f);
    ck_assert(isnan(ddpc_k_gelu_tanh(NAN)) && isnan(ddpc_k_gelu_tanh_grad(NAN)));
    ck_assert_float_eq(ddpc_k_gelu_tanh(50.0f), 50.0f);
    ck_assert_float_eq_tol(ddpc_k_gelu_tanh(-50.0f), 0.0f, 1e-30f);
    ck_assert_float_eq(ddpc_k_gelu_tanh_grad(50.0f), 1.0f);
    ck_assert_float_eq_tol(ddpc_k_gelu_tanh_grad(-50.0f), 0.0f, 1e-30f);
    ck_assert(isnan(ddpc_k_expf(NAN)));
    /* the causal softmax: rows sum to 1 over keys 0..t, 0 after; a NaN
     * score makes its row NaN (as torch.softmax does) */
    float att[4 * 4] = { 1, 9, 9, 9,  2, 3, 9, 9,  0, NAN, 1, 9,  -1, 0, 1, 2 };
    struct ddpc_lk a;
    memset(&a, 0, sizeof a);
    a.y = att;
    a.T = 4;
    for (size_t i = 0; i < 4; i++)
        ddpc_lk_attn_softmax(i, &a);
    ck_assert_float_eq(att[0], 1.0f);
    ck_assert(att[1] == 0.0f && att[2] == 0.0f && att[3] == 0.0f && att[7] == 0.0f);
    ck_assert_float_eq_tol(att[4] + att[5], 1.0f, 1e-6f);
    ck_assert_float_eq_tol(att[5], 1.0f / (1.0f + expf(-1.0f)), 1e-6f);
    ck_assert(isnan(att[8]) && isnan(att[9]) && isnan(att[10]) && att[11] == 0.0f);
    ck_assert_float_eq_tol(att[12] + att[13] + att[14] + att[15], 1.0f, 1e-6f);
    /* torch.nn.GELU(approximate='tanh')(torch.tensor([1.0, -1.0])) */
    ck_assert_float_eq_tol(ddpc_k_gelu_tanh(1.0f), 0.8411920f, 1e-6f);
    ck_assert_float_eq_tol(ddpc_k_gelu_tanh(-1.0f), -0.1588080f, 1e-6f);
}
END_TEST

/* ---- cross-entropy over every position: [B*T, V] rows ---- */

START_TEST(op_xent_seq)
{
    int B = 3, T = 6, V = 17, R = B * T;
    struct ddpc_ops o;
    struct ddpc_err e = { 0 };
    ck_assert_int_eq(ops_cpu_init(&o, &e), 0);
    struct ddpc_rng r;
    rng_seed(&r, 50);
    float *logits = frand(&r, (size_t)R * V, 4), *d = fbuf((size_t)R * V);
    float *tf = ftokens(&r, (size_t)R, V);
    int32_t lab[18];
    for (int i = 0; i < R; i++)
        lab[i] = (int32_t)tf[i];
    double acc[DDPC_LOSS_ACC] = { 0 };
    ck_assert_int_eq(o.loss(&o, DDPC_LOSS_CROSS_ENTROPY, logits, lab, NULL, d, R, V, 1.0f / R,
                            acc, &e), 0);
    float loss = (float)(acc[0] / R);
    struct st_file *f = st_new();
    add_cfg(f, B, T, 1, V, 1, 0, 1);
    add(f, "logits", logits, 3, (int64_t)B, (int64_t)T, (int64_t)V);
    add(f, "targets", tf, 2, (int64_t)B, (int64_t)T);
    add(f, "loss", &loss, 1, (int64_t)1);
    add(f, "dlogits", d, 3, (int64_t)B, (int64_t)T, (int64_t)V);
    compare(f, "op", "xent_seq");
    free(f); free(logits); free(d); free(tf);
    o.destroy(&o);
}
END_TEST

/* ---- the tied head: embedding -> lm_head (W = wte) -> cross-entropy.
 * Backward as the model runs it (docs/DESIGN.md, Models: the tied weight):
 * the head writes its dW into wte's gradient, the embedding adds its
 * scatter. ---- */

START_TEST(op_tied_head)
{
    int B = 2, T = 5, C = 8, V = 13, R = B * T;
    struct ddpc_ops o;
    struct ddpc_err e = { 0 };
    ck_assert_int_eq(ops_cpu_init(&o, &e), 0);
    struct ddpc_rng r;
    rng_seed(&r, 60);
    float *x = ftokens(&r, (size_t)R, V), *tf = ftokens(&r, (size_t)R, V);
    float *wte = frand(&r, (size_t)V * C, 1), *wpe = frand(&r, (size_t)T * C, 1);
    float *h = fbuf((size_t)R * C), *logits = fbuf((size_t)R * V), *dlog = fbuf((size_t)R * V);
    float *dh = fbuf((size_t)R * C), *dwte = fbuf((size_t)V * C), *dwpe = fbuf((size_t)T * C);
    int32_t lab[10];
    for (int i = 0; i < R; i++)
        lab[i] = (int32_t)tf[i];
    struct ddpc_lk a;
    memset(&a, 0, sizeof a);
    a.x = x; a.w = wte; a.b = wpe; a.y = h; a.dy = dh; a.dw = dwte; a.db = dwpe;
    a.N = B; a.T = T; a.C = C; a.V = V;
    ck_assert_int_eq(o.layer_kernel(&o, DDPC_LK_EMB_FWD, (size_t)R * C, &a, &e), 0);
    ck_assert_int_eq(o.gemm(&o, 0, 1, R, V, C, 1.0f, h, C, wte, C, 0.0f, logits, V, &e), 0);
    double acc[DDPC_LOSS_ACC] = { 0 };
    ck_assert_int_eq(o.loss(&o, DDPC_LOSS_CROSS_ENTROPY, logits, lab, NULL, dlog, R, V, 1.0f / R,
                            acc, &e), 0);
    ck_assert_int_eq(o.gemm(&o, 1, 0, V, C, R, 1.0f, dlog, V, h, C, 0.0f, dwte, C, &e), 0);
    ck_assert_int_eq(o.gemm(&o, 0, 0, R, C, V, 1.0f, dlog, V, wte, C, 0.0f, dh, C, &e), 0);
    a.accg = 1;   /* wte: add the scatter to the head's dW */
    ck_assert_int_eq(o.layer_kernel(&o, DDPC_LK_EMB_BWD_WTE, (size_t)C, &a, &e), 0);
    a.accg = 0;
    ck_assert_int_eq(o.layer_kernel(&o, DDPC_LK_EMB_BWD_WPE, (size_t)T * C, &a, &e), 0);
    float loss = (float)(acc[0] / R);
    struct st_file *f = st_new();
    add_cfg(f, B, T, C, V, 1, 0, 1);
    add(f, "x", x, 2, (int64_t)B, (int64_t)T);
    add(f, "targets", tf, 2, (int64_t)B, (int64_t)T);
    add(f, "wte", wte, 2, (int64_t)V, (int64_t)C);
    add(f, "wpe", wpe, 2, (int64_t)T, (int64_t)C);
    add(f, "loss", &loss, 1, (int64_t)1);
    add(f, "dwte", dwte, 2, (int64_t)V, (int64_t)C);
    add(f, "dwpe", dwpe, 2, (int64_t)T, (int64_t)C);
    compare(f, "op", "tied_head");
    free(f);
    free(x); free(tf); free(wte); free(wpe); free(h); free(logits); free(dlog); free(dh);
    free(dwte); free(dwpe);
    o.destroy(&o);
}
END_TEST

/* ---- the whole GPT ---- */

struct gpt_case {
    char *dir;
    struct spec_doc *doc;
    struct ddpc_job job;
    struct ddpc_ops o;
    struct ddpc_model m;
    int rows;
    float *x, *ytf;      /* ids and targets as floats [rows, T] */
    int32_t *y;
    float loss;
};

static void gpt_open(struct gpt_case *g, const char *model_yaml, int rows, uint64_t seed)
{
    memset(g, 0, sizeof *g);
    g->dir = make_temp_dir("gptm");
    ck_assert_ptr_nonnull(g->dir);
    char *spec, *yaml;
    ck_assert_int_ge(asprintf(&spec, "%s/spec.yaml", g->dir), 0);
    /* a text source long enough for any block_size these cases use, of
     * byte 0: below every vocab_size (check compares a text's bytes) */
    char *text;
    static char bytes[8192];
    ck_assert_int_ge(asprintf(&text, "%s/t.txt", g->dir), 0);
    ck_assert_int_eq(write_file(text, bytes, sizeof bytes), 0);
    free(text);
    ck_assert_int_ge(asprintf(&yaml, "version: 1\nepochs: 1\nbatch_size: %d\nseed: 3\n"
                              "model:\n  type: gpt\n%s"
                              "data:\n  train: {format: text, path: t.txt}\n", rows,
                              model_yaml), 0);
    ck_assert_int_eq(write_file(spec, yaml, strlen(yaml)), 0);
    test_load_job(spec, &g->job, &g->doc);
    free(spec);
    free(yaml);
    struct ddpc_err e = { 0 };
    ck_assert_int_eq(ops_cpu_init(&g->o, &e), 0);
    ck_assert_msg(model_init(&g->m, &g->o, &g->job, rows, &e) == 0, "%s", e.msg);
    ck_assert_int_eq(model_init_params(&g->m, DDPC_INIT_PYTORCH, seed, &e), 0);
    struct ddpc_rng r;
    rng_seed(&r, seed + 7);
    for (size_t i = 0; i < g->m.n_params; i++)   /* biases 0 and norms 1 are too easy */
        g->m.params[i] += (float)(0.1 * (rng_uniform(&r) - 0.5));
    int T = g->job.model.block_size, V = g->job.model.vocab_size;
    g->rows = rows;
    g->x = ftokens(&r, (size_t)rows * T, V);
    g->ytf = ftokens(&r, (size_t)rows * T, V);
    g->y = calloc((size_t)rows * T, sizeof *g->y);
    ck_assert_ptr_nonnull(g->y);
    for (int i = 0; i < rows * T; i++)
        g->y[i] = (int32_t)g->ytf[i];
}

/* One training forward + backward of the mean cross-entropy over all
 * rows * T positions (grads overwritten). */
static void gpt_step(struct gpt_case *g, uint64_t drop_seed)
{
    struct ddpc_err e = { 0 };
    int T = g->job.model.block_size, V = g->job.model.vocab_size, R = g->rows * T;
    model_set_mode(&g->m, 1, drop_seed);
    ck_assert_msg(model_forward(&g->m, g->x, g->rows, &e) == 0, "%s", e.msg);
    double acc[DDPC_LOSS_ACC] = { 0 };
    ck_assert_int_eq(g->o.loss(&g->o, DDPC_LOSS_CROSS_ENTROPY, g->m.logits, g->y, NULL,
                               g->m.dbuf[0], R, V, 1.0f / (float)R, acc, &e), 0);
    g->loss = (float)(acc[0] / R);
    ck_assert_msg(model_backward(&g->m, g->x, g->m.dbuf[0], g->rows, 0, NULL, NULL, &e) == 0,
                  "%s", e.msg);
}

static void gpt_close(struct gpt_case *g)
{
    model_free(&g->m);
    g->o.destroy(&g->o);
    spec_doc_free(g->doc);
    rm_tree(g->dir);
    free(g->dir);
    free(g->x);
    free(g->ytf);
    free(g->y);
}

static void gpt_parity(const char *model_yaml, int rows, uint64_t seed)
{
    struct gpt_case g;
    gpt_open(&g, model_yaml, rows, seed);
    struct st_file *f = st_new();
    const struct ddpc_net *net = &g.m.net;
    for (int t = 0; t < net->n_tensors; t++)   /* the weights, before the step */
        st_add(f, net->tensor[t].name, net->tensor[t].nd, net->tensor[t].shape,
               g.m.params + net->tensor[t].off);
    gpt_step(&g, 0x5eed + seed);
    const struct ddpc_job *j = &g.job;
    int T = j->model.block_size, C = j->model.n_embd, H = j->model.n_head;
    float cfg[8] = { (float)rows, (float)T, (float)C, (float)j->model.vocab_size, (float)H,
                     (float)j->model.dropout, (float)j->model.bias, (float)j->model.n_layer };
    add(f, "cfg", cfg, 1, (int64_t)8);
    add(f, "x", g.x, 2, (int64_t)rows, (int64_t)T);
    add(f, "y", g.ytf, 2, (int64_t)rows, (int64_t)T);
    add(f, "loss", &g.loss, 1, (int64_t)1);
    char name[160];
    for (int t = 0; t < net->n_tensors; t++) {
        snprintf(name, sizeof name, "grad.%s", net->tensor[t].name);
        st_add(f, name, net->tensor[t].nd, net->tensor[t].shape, g.m.grads + net->tensor[t].off);
    }
    /* dropout: the keep-masks this forward drew, under torch's module names */
    for (int k = 0; k < net->n; k++) {
        const struct ddpc_lnode *L = &net->node[k];
        int att = L->it.type == DDPC_LAYER_ATTENTION;
        if (!(L->it.type == DDPC_LAYER_DROPOUT || att) || L->it.p <= 0)
            continue;
        size_t n = (size_t)rows * (att ? (size_t)H * T * T : (size_t)T * C);
        float *mask = fbuf(n);
        uint64_t sd = model_dropout_seed(&g.m, k);
        for (size_t i = 0; i < n; i++)
            mask[i] = ddpc_k_uniform(sd, i) >= (float)L->it.p ? 1.0f : 0.0f;
        snprintf(name, sizeof name, "mask.%s%s", L->name, att ? ".attn_dropout" : "");
        if (att)
            add(f, name, mask, 4, (int64_t)rows, (int64_t)H, (int64_t)T, (int64_t)T);
        else
            add(f, name, mask, 3, (int64_t)rows, (int64_t)T, (int64_t)C);
        free(mask);
    }
    compare(f, "model", NULL);
    free(f);
    gpt_close(&g);
}

#define GPT_SMALL "  vocab_size: 64\n  block_size: 16\n  n_layer: 2\n  n_head: 2\n  n_embd: 32\n"

START_TEST(gpt_matches_nanogpt)
{
    gpt_parity(GPT_SMALL, 3, 1);
}
END_TEST

START_TEST(gpt_no_bias_dropout_matches_nanogpt)
{
    gpt_parity("  vocab_size: 50\n  block_size: 12\n  n_layer: 3\n  n_head: 4\n  n_embd: 16\n"
               "  bias: false\n  dropout: 0.2\n", 2, 2);
}
END_TEST

/* nanoGPT's init: N(0, 0.02) weights and embeddings, 0.02 / sqrt(2 n_layer)
 * for the residual projections, zero biases, unit norms; lm_head is wte. */
START_TEST(gpt_init_is_nanogpts)
{
    struct gpt_case g;
    gpt_open(&g, GPT_SMALL, 1, 4);
    struct ddpc_err e = { 0 };
    ck_assert_int_eq(model_init_params(&g.m, DDPC_INIT_PYTORCH, 4, &e), 0);   /* un-nudged */
    const struct ddpc_net *net = &g.m.net;
    for (int t = 0; t < net->n_tensors; t++) {
        const struct ddpc_tensor *T = &net->tensor[t];
        const float *p = g.m.params + T->off;
        double s = 0, s2 = 0;
        for (size_t i = 0; i < T->numel; i++) {
            s += p[i];
            s2 += (double)p[i] * p[i];
        }
        double mean = s / T->numel, sd = sqrt(s2 / T->numel - mean * mean);
        const char *nm = T->name;
        size_t len = strlen(nm);
        if (strstr(nm, ".ln_") || strstr(nm, "ln_f")) {
            ck_assert_double_eq(mean, strstr(nm, ".weight") ? 1.0 : 0.0);
            ck_assert_double_eq(sd, 0.0);
        } else if (!strcmp(nm + len - 5, ".bias")) {
            ck_assert_double_eq(s2, 0.0);
        } else {
            double want = strstr(nm, "c_proj.weight") ? 0.02 / sqrt(4.0) : 0.02;
            ck_assert_msg(fabs(sd / want - 1) < 0.15 && fabs(mean) < 0.2 * want,
                          "%s: mean %g sd %g, want sd %g", nm, mean, sd, want);
        }
    }
    /* lm_head reads wte's slice: no parameters of its own */
    const struct ddpc_lnode *head = &net->node[net->n - 1];
    ck_assert_int_eq(head->tie, 0);
    ck_assert_uint_eq(head->w_off, net->node[0].w_off);
    gpt_close(&g);
}
END_TEST

/* Two runs (fresh models, same seeds), dropout on: the same loss, logits and
 * gradients, byte for byte. */
START_TEST(gpt_cpu_is_bitwise_deterministic)
{
    const char *cfg = GPT_SMALL "  dropout: 0.1\n";
    struct gpt_case a, b;
    gpt_open(&a, cfg, 4, 9);
    gpt_open(&b, cfg, 4, 9);
    gpt_step(&a, 77);
    gpt_step(&b, 77);
    size_t nl = (size_t)4 * a.m.net.out_numel;
    ck_assert_int_eq(memcmp(&a.loss, &b.loss, sizeof a.loss), 0);
    ck_assert_int_eq(memcmp(a.m.logits, b.m.logits, nl * sizeof(float)), 0);
    ck_assert_int_eq(memcmp(a.m.grads, b.m.grads, a.m.n_params * sizeof(float)), 0);
    /* and a second step of the same model repeats itself */
    float *g1 = fbuf(a.m.n_params);
    memcpy(g1, a.m.grads, a.m.n_params * sizeof(float));
    gpt_step(&a, 77);
    ck_assert_int_eq(memcmp(g1, a.m.grads, a.m.n_params * sizeof(float)), 0);
    free(g1);
    gpt_close(&a);
    gpt_close(&b);
}
END_TEST

/* model.h's contract for the GPT's nodes too: a training step (dropout on,
 * overwrite then accumulate) and an eval forward allocate nothing. */
START_TEST(gpt_step_never_allocates)
{
    struct gpt_case g;
    gpt_open(&g, GPT_SMALL "  dropout: 0.1\n", 2, 5);
    int T = g.job.model.block_size, V = g.job.model.vocab_size, R = g.rows * T;
    struct ddpc_err e = { 0 };
    double acc[DDPC_LOSS_ACC] = { 0 };
    int rc = 0;
    alloc_count_start();   /* no ck_assert inside: Check's own records allocate */
    for (int step = 0; step < 2 && rc == 0; step++) {
        model_set_mode(&g.m, 1, 11 + (uint64_t)step);
        rc = model_forward(&g.m, g.x, g.rows, &e);
        if (rc == 0)
            rc = g.o.loss(&g.o, DDPC_LOSS_CROSS_ENTROPY, g.m.logits, g.y, NULL, g.m.dbuf[0], R,
                          V, 1.0f / (float)R, acc, &e);
        if (rc == 0)
            rc = model_backward(&g.m, g.x, g.m.dbuf[0], g.rows, step, NULL, NULL, &e);
    }
    model_set_mode(&g.m, 0, 0);
    if (rc == 0)
        rc = model_forward(&g.m, g.x, g.rows, &e);
    long n = alloc_count_stop();
    ck_assert_msg(rc == 0, "%s", e.msg);
    ck_assert_msg(n == 0, "a GPT step allocated %ld times", n);
    gpt_close(&g);
}
END_TEST

Suite *gpt_suite(void)
{
    Suite *s = suite_create("gpt");
    TCase *tc = tcase_create("ops");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, op_embedding);
    tcase_add_test(tc, op_layernorm);
    tcase_add_test(tc, op_attention);
    tcase_add_test(tc, op_gelu_tanh);
    tcase_add_test(tc, expf_and_gelu_limits);
    tcase_add_test(tc, op_xent_seq);
    tcase_add_test(tc, op_tied_head);
    suite_add_tcase(s, tc);
    TCase *tm = tcase_create("model");
    tcase_set_timeout(tm, 300);
    tcase_add_test(tm, gpt_matches_nanogpt);
    tcase_add_test(tm, gpt_no_bias_dropout_matches_nanogpt);
    tcase_add_test(tm, gpt_init_is_nanogpts);
    tcase_add_test(tm, gpt_cpu_is_bitwise_deterministic);
    tcase_add_test(tm, gpt_step_never_allocates);
    suite_add_tcase(s, tm);
    return s;
}
