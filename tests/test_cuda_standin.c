/* test_cuda_standin.c - runtime/ops_cuda.cu's real code (host side and
 * kernels) on the CPU stand-in for the CUDA runtime and cuBLAS
 * (tests/standin), its kernels on tests/cuda_emu.h.
 *
 * The Makefile compiles a copy of ops_cuda.cu whose launches it rewrote
 * (standin_kernels.h) with the host C++ compiler, with or without nvcc.
 * The stand-in's streams run on threads of their own, so every host wait
 * ops_cuda.cu makes is a real one:
 *   - to_host, to_device and synchronize wait for the compute stream for at
 *     most wait_timeout_s (nccl_timeout), and name what waited, when the
 *     stream is held up (as behind a collective a dead peer never joins);
 *   - the loss accumulator, kept on the device, is read back right (the
 *     "loss read" of logging steps), and the loss kernels' values match the
 *     CPU backend's over a thread-per-row and a block-per-row width;
 *   - gemm in fp32 and with bf16 inputs (cast by ops_cuda's kernels, then
 *     the stand-in's column-major cuBLAS) matches the CPU in all four
 *     transpose pairs, so ops_cuda's row-major mapping is checked here;
 *   - worker_run on ops_cuda + comm_nccl at world 2, a bucket per tensor
 *     (every all-reduce started while backward runs, the stream-delay hook
 *     on) ends bit for bit where one bucket does, and within bounds of the
 *     CPU backend's run: test_gpu's overlap part, on the CPU. It loses the
 *     race of a collective that does not wait for the compute stream (its
 *     ready event) every time; the other direction (the optimizer waiting
 *     for a reduction) it cannot lose here, the emulated kernels being far
 *     slower than the stand-in's collectives: suite comm_nccl checks that.
 * What only a GPU shows (its memory model, cuBLAS's own sums, speed) is
 * tests/gpu's.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "suites.h"
#include "testutil.h"
#include "comm.h"
#include "comm_nccl.h"
#include "comm_shm.h"
#include "data.h"
#include "env.h"
#include "job.h"
#include "ops.h"
#include "ops_cuda.h"
#include "ops_kernels.h"
#include "standin.h"
#include "store.h"
#include "worker.h"

static uint64_t rng = 12345;

static float *rand_vec(size_t n, float scale)
{
    float *v = malloc(n * sizeof *v + 4);
    ck_assert_ptr_nonnull(v);
    for (size_t i = 0; i < n; i++)
        v[i] = scale * test_urand(&rng);
    return v;
}

static double rel_err(const float *got, const float *want, size_t n)
{
    double d = 0, m = 1e-30;
    for (size_t i = 0; i < n; i++) {
        double x = fabs((double)got[i] - want[i]);
        d = isnan(x) ? INFINITY : fmax(d, x);
        m = fmax(m, fabs(want[i]));
    }
    return d / m;
}

static void cuda_ops(struct ddpc_ops *o)
{
    struct ddpc_err e = {0};
    struct standin_config c;
    standin_config_get(&c);
    c.devices = 1;
    standin_config_set(&c);
    memset(o, 0, sizeof *o);
    ck_assert_msg(ops_cuda_init(o, 0, &e) == 0, "ops_cuda_init: %s", e.msg);
}

static void *up(struct ddpc_ops *o, const void *host, size_t bytes)
{
    struct ddpc_err e = {0};
    void *d = NULL;
    ck_assert_msg(o->alloc(o, &d, bytes, &e) == 0, "alloc: %s", e.msg);
    ck_assert_msg(o->to_device(o, d, host, bytes, &e) == 0, "to_device: %s", e.msg);
    return d;
}

static float *down(struct ddpc_ops *o, const float *dev, size_t n)
{
    struct ddpc_err e = {0};
    float *h = malloc(n * sizeof *h + 4);
    ck_assert_msg(o->to_host(o, h, dev, n * sizeof *h, &e) == 0, "to_host: %s", e.msg);
    return h;
}

/* ===== bounded waits ===== */

/* Holds the compute stream until *release, as a collective a dead peer
 * never joins holds it (the stream waits on its event). */
static void hold_fn(void *p)
{
    volatile int *release = p;
    while (!*release)
        usleep(1000);
}

START_TEST(host_waits_for_a_held_stream_end_at_nccl_timeout)
{
    struct ddpc_ops o;
    struct ddpc_err e = {0};
    cuda_ops(&o);
    enum { N = 1000 };
    float h[N], back[N];
    float *d = NULL;
    ck_assert_int_eq(o.alloc(&o, (void **)&d, sizeof h, &e), 0);
    /* alloc's zeroing is ordered before everything later on the stream (the
     * stand-in's device memory starts as 0xff: NaN) */
    ck_assert_int_eq(o.to_host(&o, back, d, sizeof back, &e), 0);
    for (int i = 0; i < N; i++)
        ck_assert_msg(back[i] == 0.0f, "alloc: element %d is %g, not 0", i, (double)back[i]);
    for (int i = 0; i < N; i++)
        h[i] = (float)i * 0.5f;
    ck_assert_int_eq(o.to_device(&o, d, h, sizeof h, &e), 0);
    memset(h, 0, sizeof h);                /* to_device returned: h is the caller's again */
    ck_assert_int_eq(o.to_host(&o, back, d, sizeof back, &e), 0);
    for (int i = 0; i < N; i++)
        ck_assert_msg(back[i] == (float)i * 0.5f, "round trip: element %d is %g", i,
                      (double)back[i]);
    /* a staged batch: pinned, asynchronous, fenced */
    float *pin = NULL;
    ck_assert_int_eq(o.host_alloc(&o, (void **)&pin, sizeof h, &e), 0);
    for (int i = 0; i < N; i++)
        pin[i] = (float)-i;
    ck_assert_int_eq(o.to_device_async(&o, d, pin, sizeof h, 1, &e), 0);
    ck_assert_int_eq(o.fence(&o, 1, &e), 0);
    ck_assert_int_eq(o.to_host(&o, back, d, sizeof back, &e), 0);
    ck_assert_msg(back[7] == -7.0f && back[N - 1] == (float)-(N - 1), "staged copy: %g %g",
                  (double)back[7], (double)back[N - 1]);

    volatile int release = 0;
    o.wait_timeout_s = 0.3;
    ck_assert_int_eq(cudaLaunchHostFunc(ops_cuda_stream(&o), hold_fn, (void *)&release),
                     cudaSuccess);
    static const char *const what[3] = {"to_host", "to_device", "synchronize"};
    for (int k = 0; k < 3; k++) {
        double t0 = ddpc_now();
        int rc = k == 0 ? o.to_host(&o, back, d, 4, &e)
                        : k == 1 ? o.to_device(&o, d, h, 4, &e) : o.synchronize(&o, &e);
        double took = ddpc_now() - t0;
        ck_assert_msg(rc == DDPC_E_TIMEOUT && strstr(e.msg, what[k]) &&
                      strstr(e.msg, "nccl_timeout"),
                      "%s with the stream held: want DDPC_E_TIMEOUT naming it and nccl_timeout, "
                      "got %d: %s", what[k], rc, e.msg);
        ck_assert_msg(took >= 0.29 && took < 1.5, "%s gave up after %.2f s, not at 0.3 s",
                      what[k], took);
        ddpc_err_clear(&e);
    }
    release = 1;
    ck_assert_msg(o.to_host(&o, back, d, sizeof back, &e) == 0, "after the release: %s", e.msg);
    ck_assert_msg(back[7] == -7.0f, "the copy that timed out wrote the buffer: %g",
                  (double)back[7]);
    o.host_free(&o, pin);
    o.release(&o, d);
    o.destroy(&o);
}
END_TEST

/* ===== the loss, and reading it back ===== */

START_TEST(loss_accumulates_on_the_device_and_reads_back_as_the_cpu_computes_it)
{
    static const int widths[2] = {10, 2000};   /* thread per row; block per row */
    int cols = widths[_i], rows = 37;
    struct ddpc_ops g, c;
    struct ddpc_err e = {0};
    cuda_ops(&g);
    ck_assert_int_eq(ops_cpu_init(&c, &e), 0);
    float *logits = rand_vec((size_t)rows * cols, 4.0f);
    int32_t *labels = malloc((size_t)rows * sizeof *labels);
    for (int r = 0; r < rows; r++)
        labels[r] = (int32_t)((r * 7919) % cols);
    float *dl_c = malloc((size_t)rows * cols * sizeof *dl_c);
    double acc_c[DDPC_LOSS_ACC] = {0, 0, 0};
    ck_assert_int_eq(c.loss(&c, 0, logits, labels, NULL, dl_c, rows, cols, 1.0f / rows, acc_c,
                            &e), 0);
    float *d_logits = up(&g, logits, (size_t)rows * cols * 4);
    int32_t *d_labels = up(&g, labels, (size_t)rows * 4);
    float *d_dl = NULL;
    double *d_acc = NULL;
    ck_assert_int_eq(g.alloc(&g, (void **)&d_dl, (size_t)rows * cols * 4, &e), 0);
    ck_assert_int_eq(g.alloc(&g, (void **)&d_acc, sizeof acc_c, &e), 0);
    /* twice: it adds */
    for (int k = 0; k < 2; k++)
        ck_assert_msg(g.loss(&g, 0, d_logits, d_labels, NULL, d_dl, rows, cols, 1.0f / rows,
                             d_acc, &e) == 0, "loss: %s", e.msg);
    double acc_g[DDPC_LOSS_ACC];
    ck_assert_int_eq(g.to_host(&g, acc_g, d_acc, sizeof acc_g, &e), 0);
    ck_assert_msg(fabs(acc_g[0] - 2 * acc_c[0]) <= 1e-6 * fabs(acc_c[0]) &&
                  acc_g[1] == 2 * acc_c[1] && acc_g[2] == 0,
                  "loss read: %.9g %.0f %.0f, the CPU twice: %.9g %.0f 0", acc_g[0], acc_g[1],
                  acc_g[2], 2 * acc_c[0], 2 * acc_c[1]);
    float *dl_g = down(&g, d_dl, (size_t)rows * cols);
    double err = rel_err(dl_g, dl_c, (size_t)rows * cols);
    ck_assert_msg(err <= 2e-6, "dlogits: rel err %.3g", err);
    free(dl_g);
    free(dl_c);
    free(logits);
    free(labels);
    g.release(&g, d_logits);
    g.release(&g, d_labels);
    g.release(&g, d_dl);
    g.release(&g, d_acc);
    g.destroy(&g);
    c.destroy(&c);
}
END_TEST

/* ===== gemm: ops_cuda's row-major mapping onto cuBLAS, fp32 and bf16 ===== */

START_TEST(gemm_matches_the_cpu_in_every_transpose_and_in_bf16)
{
    struct ddpc_ops g, c;
    struct ddpc_err e = {0};
    cuda_ops(&g);
    ck_assert_int_eq(ops_cpu_init(&c, &e), 0);
    const int m = 13, n = 21, k = 33, pad = 3;
    for (int t = 0; t < 8; t++) {
        int bf16 = t / 4, ta = (t >> 1) & 1, tb = t & 1;
        int lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
        size_t na = (size_t)(ta ? k : m) * lda, nb = (size_t)(tb ? n : k) * ldb,
               nc = (size_t)m * ldc;
        float *A = rand_vec(na, 1), *B = rand_vec(nb, 1), *C = rand_vec(nc, 1);
        /* the CPU gets the inputs the GPU's bf16 gemm sees: rounded */
        float *Ar = malloc(na * 4), *Br = malloc(nb * 4), *Cc = malloc(nc * 4);
        for (size_t i = 0; i < na; i++)
            Ar[i] = bf16 ? ddpc_k_bf16_round(A[i]) : A[i];
        for (size_t i = 0; i < nb; i++)
            Br[i] = bf16 ? ddpc_k_bf16_round(B[i]) : B[i];
        memcpy(Cc, C, nc * 4);
        ck_assert_int_eq(c.gemm(&c, ta, tb, m, n, k, 0.5f, Ar, lda, Br, ldb, 0.25f, Cc, ldc, &e),
                         0);
        g.gemm_precision = bf16 ? DDPC_PRECISION_BF16 : DDPC_PRECISION_FP32;
        float *dA = up(&g, A, na * 4), *dB = up(&g, B, nb * 4), *dC = up(&g, C, nc * 4);
        ck_assert_msg(g.gemm(&g, ta, tb, m, n, k, 0.5f, dA, lda, dB, ldb, 0.25f, dC, ldc, &e) ==
                      0, "gemm: %s", e.msg);
        float *got = down(&g, dC, nc);
        /* the padding past each row's n columns is never written */
        for (int r = 0; r < m; r++)
            for (int p = n; p < ldc; p++)
                ck_assert_msg(got[(size_t)r * ldc + p] == C[(size_t)r * ldc + p],
                              "gemm wrote the padding at row %d column %d", r, p);
        double err = rel_err(got, Cc, nc);
        ck_assert_msg(err <= 1e-5, "gemm %s trans_a %d trans_b %d: rel err %.3g",
                      bf16 ? "bf16" : "fp32", ta, tb, err);
        free(got);
        g.release(&g, dA);
        g.release(&g, dB);
        g.release(&g, dC);
        free(A);
        free(B);
        free(C);
        free(Ar);
        free(Br);
        free(Cc);
    }
    g.destroy(&g);
    c.destroy(&c);
}
END_TEST

/* ===== worker_run on ops_cuda + comm_nccl: overlap, as test_gpu does it ===== */

#define OVL_MAX 8192

struct ovl_out {
    int    failed;
    char   msg[600];
    size_t n;
    int64_t steps[2];
    double delay_us[2];
    float  params[2][OVL_MAX];   /* [0] a bucket per tensor, [1] one bucket */
};

/* test_gpu's overlap job, smaller: MLP 16-32-32-8, AdamW, grad_accumulation 2,
 * the rank-sync barrier; bucket_cap_mb 1 byte (a bucket per tensor) or 0
 * (one bucket). No clipping: its norm (sumsq, a fixed grid of 256 x 256
 * threads) takes cuda_emu 1.4 s a step. */
static void ovl_job(struct ddpc_job *j, int per_tensor)
{
    memset(j, 0, sizeof *j);
    j->version = 1;
    j->name = "overlap";
    j->seed = 4321;
    j->epochs = 1;
    j->learning_rate = 1e-3;
    j->batch_size = 16;
    j->grad_accumulation = 2;
    j->limit_train_fraction = 1.0;
    j->precision = DDPC_PRECISION_FP32;
    j->model.type = DDPC_MODEL_MLP;
    j->model.n_layers = 4;
    j->model.layers[0] = 16;
    j->model.layers[1] = 32;
    j->model.layers[2] = 32;
    j->model.layers[3] = 8;
    j->model.activation = DDPC_ACT_GELU;
    j->loss = DDPC_LOSS_CROSS_ENTROPY;
    j->data.shuffle = 1;
    j->optimizer.type = DDPC_OPTIM_ADAMW;
    j->optimizer.beta1 = 0.9;
    j->optimizer.beta2 = 0.999;
    j->optimizer.eps = 1e-8;
    j->optimizer.weight_decay = 1e-2;
    j->bucket_cap_mb = per_tensor ? 1.0 / 1048576.0 : 0.0;
    j->nccl_timeout_s = 30;
    j->rank_sync_timeout_s = 30;
}

static void ovl_rank(int gpu, int rank, int world, int port, struct comm_shm_region *gr,
                     struct comm_shm_region *sr, const struct ddpc_dataset *tr,
                     struct ovl_out *out)
{
    struct ddpc_ops ops;
    struct ddpc_comm grad, sync;
    struct ddpc_err e = {0};
    memset(&ops, 0, sizeof ops);
    memset(&grad, 0, sizeof grad);
    memset(&sync, 0, sizeof sync);
    out->delay_us[rank] = env_get()->test_stream_delay_us;
    double dl = ddpc_deadline_after(30);
    int rc = gpu ? ops_cuda_init(&ops, 0, &e) : ops_cpu_init(&ops, &e);
    if (rc == 0)
        rc = gpu ? comm_nccl_init(&grad, "gradient", rank, world, "127.0.0.1", port, "a0",
                                  ops_cuda_stream(&ops), dl, &e)
                 : comm_shm_attach(&grad, gr, rank, "gradient", &e);
    if (rc == 0)
        rc = gpu ? comm_nccl_split(&grad, &sync, "rank-sync", dl, &e)
                 : comm_shm_attach(&sync, sr, rank, "rank-sync", &e);
    for (int run = 0; run < 2 && rc == 0; run++) {
        struct ddpc_job j;
        ovl_job(&j, run == 0);
        struct ddpc_worker_args a = { .job = &j, .rank = rank, .world = world, .device = 0,
                                      .ops = &ops, .grad_comm = &grad, .sync_comm = &sync,
                                      .train = tr, .test = NULL, .out = NULL,
                                      .t_launch = ddpc_now() };
        struct ddpc_worker_result res;
        memset(&res, 0, sizeof res);
        res.want_params = 1;
        rc = worker_run(&a, &res, &e);
        if (rc == 0 && rank == 0 && res.n_params <= OVL_MAX) {
            out->n = res.n_params;
            out->steps[run] = res.steps;
            memcpy(out->params[run], res.params, res.n_params * sizeof(float));
        }
        free(res.params);
    }
    if (rc < 0) {
        out->failed = 1;
        snprintf(out->msg, sizeof out->msg, "rank %d (%s): %s", rank, gpu ? "cuda" : "cpu",
                 e.msg);
        if (grad.abort)
            grad.abort(&grad, "a rank failed");
        if (sync.abort)
            sync.abort(&sync, "a rank failed");
    }
    if (sync.destroy)
        sync.destroy(&sync);
    if (grad.destroy)
        grad.destroy(&grad);
    if (ops.destroy)
        ops.destroy(&ops);
}

static struct ovl_out *ovl_train(int gpu, int world, const struct ddpc_dataset *tr)
{
    struct ovl_out *out = mmap(NULL, sizeof *out, PROT_READ | PROT_WRITE,
                               MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(out, MAP_FAILED);
    memset(out, 0, sizeof *out);
    struct comm_shm_region *gr = NULL, *sr = NULL;
    struct store_host h = {0, -1, 0};
    struct ddpc_err e = {0};
    if (gpu)
        ck_assert_msg(store_host_start(&h, "127.0.0.1", 0, 0, &e) == 0, "store: %s", e.msg);
    else
        ck_assert(comm_shm_create(&gr, world, 0, &e) == 0 &&
                  comm_shm_create(&sr, world, 0, &e) == 0);
    pid_t pids[2];
    fflush(stdout);
    for (int r = 0; r < world; r++) {
        pids[r] = fork();
        ck_assert_int_ge(pids[r], 0);
        if (pids[r] == 0) {
            ovl_rank(gpu, r, world, h.port, gr, sr, tr, out);
            _exit(0);
        }
    }
    int left = world, bad_exit = 0;
    double end = ddpc_now() + 120;
    while (left > 0 && ddpc_now() < end) {
        for (int r = 0; r < world; r++) {
            int st = 0;
            if (pids[r] > 0 && waitpid(pids[r], &st, WNOHANG) == pids[r]) {
                bad_exit += !WIFEXITED(st) || WEXITSTATUS(st) != 0;
                pids[r] = 0;
                left--;
            }
        }
        usleep(5000);
    }
    for (int r = 0; r < world; r++)
        if (pids[r] > 0) {
            kill(pids[r], SIGKILL);
            waitpid(pids[r], NULL, 0);
        }
    store_host_stop(&h);
    comm_shm_region_free(gr);
    comm_shm_region_free(sr);
    ck_assert_msg(left == 0, "%s ranks still running after 120 s", gpu ? "cuda" : "cpu");
    ck_assert_msg(!out->failed, "%s", out->msg);
    ck_assert_msg(!bad_exit, "%d %s rank(s) died or exited non-zero (a sanitizer's report?)",
                  bad_exit, gpu ? "cuda" : "cpu");
    ck_assert_msg(out->n > 0, "no parameters back");
    return out;
}

START_TEST(worker_overlap_on_cuda_and_nccl_matches_one_bucket_and_the_cpu)
{
    const int world = 2;
    struct standin_config c;
    standin_config_get(&c);
    c.devices = 1;                /* the two ranks share the stand-in's one GPU */
    c.split_s = 0.1;
    standin_config_set(&c);
    ck_assert_int_eq(setenv("DDPC_TEST_STREAM_DELAY_US", "300", 1), 0);
    struct ddpc_data_source src = { .format = DDPC_DATA_SYNTHETIC, .samples = 256,
                                    .features = 16, .classes = 8, .seed = 11 };
    struct ddpc_dataset tr;
    struct ddpc_err e = {0};
    memset(&tr, 0, sizeof tr);
    ck_assert_msg(data_load(&src, &tr, &e) == 0, "%s", e.msg);
    struct ovl_out *g = ovl_train(1, world, &tr);
    struct ovl_out *cpu = ovl_train(0, world, &tr);
    for (int r = 0; r < world; r++)
        ck_assert_msg(g->delay_us[r] == 300, "rank %d ran with a stream delay of %g us", r,
                      g->delay_us[r]);
    size_t differ = 0;
    for (size_t i = 0; i < g->n; i++)
        differ += memcmp(&g->params[0][i], &g->params[1][i], sizeof(float)) != 0;
    ck_assert_msg(!differ && g->steps[0] == g->steps[1] && g->steps[0] > 0,
                  "a bucket per tensor vs one bucket: %zu of %zu parameters differ in their "
                  "bits, steps %lld/%lld", differ, g->n, (long long)g->steps[0],
                  (long long)g->steps[1]);
    ck_assert_int_eq(g->n, cpu->n);
    ck_assert_int_eq(g->steps[0], cpu->steps[0]);
    double err = rel_err(g->params[0], cpu->params[0], g->n);
    ck_assert_msg(err <= 1e-4, "cuda vs cpu parameters: rel err %.3g", err);
    munmap(g, sizeof *g);
    munmap(cpu, sizeof *cpu);
    data_free(&tr);
    unsetenv("DDPC_TEST_STREAM_DELAY_US");
}
END_TEST

Suite *cuda_standin_suite(void)
{
    Suite *s = suite_create("cuda_standin");
    TCase *t = tcase_create("ops_cuda");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, host_waits_for_a_held_stream_end_at_nccl_timeout);
    tcase_add_loop_test(t, loss_accumulates_on_the_device_and_reads_back_as_the_cpu_computes_it,
                        0, 2);
    tcase_add_test(t, gemm_matches_the_cpu_in_every_transpose_and_in_bf16);
    suite_add_tcase(s, t);
    TCase *w = tcase_create("worker");
    tcase_set_timeout(w, 180);
    tcase_add_test(w, worker_overlap_on_cuda_and_nccl_matches_one_bucket_and_the_cpu);
    suite_add_tcase(s, w);
    return s;
}
