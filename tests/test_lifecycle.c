/* test_lifecycle.c - after training, as a user runs it: ./job --eval,
 * ./job --predict, runs that never overwrite each other's outputs
 * (outver.h), `ddpc build --force`, and the run report.
 *
 * One small job serves them: a CNN on 8x8 images of three classes (a
 * quadrant brighter than the others), trained by 2 CPU workers in about a
 * second. PyTorch parity (tests/torch_ref.py, /usr/bin/python3) is SKIPped
 * where torch is missing. Writes only under temporary directories. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <zlib.h>

#include "ckpt.h"
#include "crc32c.h"
#include "outver.h"
#include "suites.h"
#include "testutil.h"

#define SIDE 8            /* images SIDE x SIDE */
#define N_TRAIN 600
#define N_TEST 200

/* ---- the job ---- */

struct lc {
    int   no_ckpt_dir;      /* set before lc_make: the spec has no checkpoint_dir */
    char *dir, *spec, *job;
    char *train_x, *train_y, *test_x, *test_y;
};

/* Images whose label is the brightest of three regions (left half, top
 * right, bottom right), with noise: learnable in a few epochs. */
static void make_images(unsigned char *px, unsigned char *lab, int n, uint64_t seed)
{
    for (int i = 0; i < n; i++) {
        int c = (int)((seed >> 33) % 3);
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        lab[i] = (unsigned char)c;
        for (int y = 0; y < SIDE; y++)
            for (int x = 0; x < SIDE; x++) {
                int region = x < SIDE / 2 ? 0 : y < SIDE / 2 ? 1 : 2;
                seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
                int v = (int)((seed >> 40) % 140) + (region == c ? 110 : 0);
                px[((size_t)i * SIDE + y) * SIDE + x] = (unsigned char)v;
            }
    }
}

static char *path_in(const char *dir, const char *name)
{
    char *p = NULL;
    ck_assert_int_ge(asprintf(&p, "%s/%s", dir, name), 0);
    return p;
}

/* The spec (extra: more top-level YAML lines) into f->spec; built into
 * f->job unless build is 0. */
static void lc_make(struct lc *f, const char *tag, const char *extra, int build)
{
    int no_dir = f->no_ckpt_dir;
    memset(f, 0, sizeof *f);
    f->no_ckpt_dir = no_dir;
    f->dir = make_temp_dir(tag);
    ck_assert_ptr_nonnull(f->dir);
    f->spec = path_in(f->dir, "job.yaml");
    f->job = path_in(f->dir, "job");
    f->train_x = path_in(f->dir, "train-x.idx");
    f->train_y = path_in(f->dir, "train-y.idx");
    f->test_x = path_in(f->dir, "test-x.idx");
    f->test_y = path_in(f->dir, "test-y.idx");
    unsigned char *px = malloc((size_t)N_TRAIN * SIDE * SIDE), lab[N_TRAIN];
    ck_assert_ptr_nonnull(px);
    make_images(px, lab, N_TRAIN, 1);
    ck_assert_int_eq(write_idx_pair(f->train_x, f->train_y, N_TRAIN, SIDE, SIDE, px, lab), 0);
    make_images(px, lab, N_TEST, 2);
    ck_assert_int_eq(write_idx_pair(f->test_x, f->test_y, N_TEST, SIDE, SIDE, px, lab), 0);
    free(px);
    char *text = NULL;
    ck_assert_int_ge(asprintf(&text,
        "version: 1\nname: lc\ndevices: 2\naccelerator: cpu\nepochs: 2\nbatch_size: 16\n"
        "learning_rate: 0.01\nlr_scaling: none\nseed: 3\n"
        "model:\n  type: sequential\n  input: [1, %d, %d]\n  layers:\n"
        "    - conv2d: {out_channels: 4, kernel_size: 3, padding: 1}\n"
        "    - batchnorm2d\n    - relu\n    - maxpool2d: {kernel_size: 2}\n    - flatten\n"
        "    - linear: {out_features: 3}\n"
        "optimizer: {type: adam}\n"
        "%s"
        "checkpoint: {export: out/model.safetensors}\n"
        "logging: {metrics_csv: logs/metrics.csv, every_n_steps: 5}\n"
        "data:\n"
        "  train: {format: idx, inputs: train-x.idx, labels: train-y.idx}\n"
        "  test: {format: idx, inputs: test-x.idx, labels: test-y.idx}\n%s",
        SIDE, SIDE, f->no_ckpt_dir ? "" : "checkpoint_dir: ckpt\n", extra ? extra : ""), 0);
    ck_assert_int_eq(write_file(f->spec, text, strlen(text)), 0);
    free(text);
    if (build)
        ddpc_build_ok(f->spec, f->job);
}

static void lc_free(struct lc *f)
{
    rm_tree(f->dir);
    free(f->dir); free(f->spec); free(f->job);
    free(f->train_x); free(f->train_y); free(f->test_x); free(f->test_y);
}

/* Runs argv in f->dir; asserts exit `code` (-1: any failure) and that no
 * process is left. */
static void lc_run(const struct lc *f, char *const argv[], int code, struct run_result *r)
{
    ck_assert_int_eq(run_capture(argv, f->dir, NULL, 120, r), 0);
    ck_assert_msg(!r->timed_out, "%s hung:\n%s%s", argv[0], r->out, r->err);
    if (code >= 0)
        ck_assert_msg(r->exited && r->code == code, "%s %s: exit %d, wanted %d:\n%s%s", argv[0],
                      argv[1] ? argv[1] : "", r->code, code, r->out, r->err);
    else
        ck_assert_msg(r->exited && r->code != 0, "%s %s succeeded:\n%s%s", argv[0],
                      argv[1] ? argv[1] : "", r->out, r->err);
    ck_assert_int_eq(leftover_children(1.0), 0);
}

/* "test_loss=X test_accuracy=Y" after `after` in text, as printed. */
static void metrics_of(const char *text, const char *after, char *buf, size_t cap)
{
    const char *p = strstr(text, after);
    ck_assert_msg(p, "no '%s' in:\n%s", after, text);
    const char *l = strstr(p, "test_loss="), *a = strstr(p, "test_accuracy=");
    ck_assert_msg(l && a, "no test metrics after '%s' in:\n%s", after, text);
    int ll = (int)strcspn(l, " \n"), al = (int)strcspn(a, " \n");
    snprintf(buf, cap, "%.*s %.*s", ll, l, al, a);
}

/* ---- the checkpoint directory, byte for byte ---- */

/* Every entry of dir: name, size, mtime (ns) and a CRC of its bytes. */
static char *dir_snapshot(const char *dir)
{
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    char *names[256];
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) && n < 256)
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            names[n++] = strdup(de->d_name);
    closedir(d);
    for (int i = 0; i < n; i++)
        for (int k = i + 1; k < n; k++)
            if (strcmp(names[k], names[i]) < 0) {
                char *t = names[i]; names[i] = names[k]; names[k] = t;
            }
    size_t cap = 256 + (size_t)n * 400, len = 0;
    char *out = malloc(cap);
    ck_assert_ptr_nonnull(out);
    out[0] = '\0';
    struct stat st;
    ck_assert_int_eq(stat(dir, &st), 0);
    len += (size_t)snprintf(out + len, cap - len, ". mtime %lld.%09ld\n",
                            (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
    for (int i = 0; i < n; i++) {
        char *p = path_in(dir, names[i]);
        ck_assert_int_eq(lstat(p, &st), 0);
        size_t blen = 0;
        char *bytes = read_whole(p, &blen);
        len += (size_t)snprintf(out + len, cap - len, "%s %lld %lld.%09ld %08x\n", names[i],
                                (long long)st.st_size, (long long)st.st_mtim.tv_sec,
                                st.st_mtim.tv_nsec, (unsigned)crc32c(0, bytes, blen));
        free(bytes);
        free(p);
        free(names[i]);
    }
    return out;
}

/* A pid that is not running (a child reaped at once). */
static pid_t dead_pid(void)
{
    pid_t p = fork();
    ck_assert_int_ge(p, 0);
    if (p == 0)
        _exit(0);
    ck_assert_int_eq(waitpid(p, NULL, 0), p);
    return p;
}

/* ---- --eval ---- */

/* ./job --eval scores the newest checkpoint of the configuration (and a
 * named one, and the export) on the job's test set with the numbers the
 * training printed for those weights, and leaves the checkpoint directory
 * exactly as it was: not a byte, a name or a time changed, and not even
 * a dead writer's temp file removed (the training launcher removes those).
 * The same numbers in PyTorch, from the export. */
START_TEST(eval_scores_checkpoints_without_touching_them)
{
    adopt_orphans();
    struct lc f = { 0 };
    lc_make(&f, "lc-eval", NULL, 1);
    struct run_result r;
    char *train[] = { f.job, NULL };
    lc_run(&f, train, 0, &r);
    char done[128], epoch1[128], got[128];
    metrics_of(r.out, "\ndone ", done, sizeof done);
    metrics_of(r.out, "epoch 1/2", epoch1, sizeof epoch1);
    run_result_free(&r);

    char *ckdir = path_in(f.dir, "ckpt");
    char host[256] = "h";
    ck_assert_int_eq(gethostname(host, sizeof host), 0);
    int simple = strlen(host) <= 63 && strspn(host, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMN"
                                              "OPQRSTUVWXYZ0123456789-") == strlen(host);
    char *stale = NULL;
    if (simple) {   /* the temp name a writer dead mid-checkpoint leaves (ckpt.h) */
        ck_assert_int_ge(asprintf(&stale, "%s/.lc-e0001-s000000019.ckpt.tmp.%s.%d", ckdir, host,
                                  (int)dead_pid()), 0);
        ck_assert_int_eq(write_file(stale, "partial", 7), 0);
    }
    char *before = dir_snapshot(ckdir);

    char *e1[] = { f.job, "--eval", NULL };
    lc_run(&f, e1, 0, &r);
    metrics_of(r.out, "done eval", got, sizeof got);
    ck_assert_msg(strcmp(got, done) == 0, "--eval: %s; training ended with %s", got, done);
    ck_assert_msg(strstr(r.out, "eval: checkpoint ckpt/lc-e0002-s"), "%s", r.out);
    ck_assert_msg(strstr(r.out, "samples=200 "), "%s", r.out);
    run_result_free(&r);

    /* the first epoch's checkpoint: the first epoch's line */
    DIR *d = opendir(ckdir);
    char first[512] = "";
    struct dirent *de;
    while ((de = readdir(d)))
        if (strncmp(de->d_name, "lc-e0001-", 9) == 0)
            snprintf(first, sizeof first, "ckpt/%s", de->d_name);
    closedir(d);
    ck_assert_msg(first[0], "no epoch-1 checkpoint");
    char *e2[] = { f.job, "--eval", "--checkpoint", first, NULL };
    lc_run(&f, e2, 0, &r);
    metrics_of(r.out, "done eval", got, sizeof got);
    ck_assert_msg(strcmp(got, epoch1) == 0, "--eval --checkpoint %s: %s; epoch 1 printed %s",
                  first, got, epoch1);
    run_result_free(&r);

    char *e3[] = { f.job, "--eval", "--model", "out/model.safetensors", NULL };
    lc_run(&f, e3, 0, &r);
    metrics_of(r.out, "done eval", got, sizeof got);
    ck_assert_msg(strcmp(got, done) == 0, "--eval --model: %s; training ended with %s", got, done);
    run_result_free(&r);

    /* another file of the same format: the training set */
    char *e4[] = { f.job, "--eval", "--data", "train-x.idx", "--labels", "train-y.idx", NULL };
    lc_run(&f, e4, 0, &r);
    ck_assert_msg(strstr(r.out, "samples=600 ") && strstr(r.out, " on train-x.idx"), "%s", r.out);
    run_result_free(&r);

    char *after = dir_snapshot(ckdir);
    ck_assert_msg(strcmp(before, after) == 0, "--eval changed checkpoint_dir:\nbefore:\n%s"
                  "after:\n%s", before, after);

    /* PyTorch on the export: the same digits */
    char *script = NULL;
    ck_assert_int_ge(asprintf(&script, "%s/tests/torch_ref.py", test_top()), 0);
    char *py[] = { "/usr/bin/python3", script, "eval", f.spec, "out/model.safetensors",
                   "test-x.idx", "test-y.idx", NULL };
    ck_assert_int_eq(run_capture(py, f.dir, NULL, 120, &r), 0);
    if (r.exited && r.code == 77) {
        test_skip("lifecycle: --eval against PyTorch", "%s", r.out);
    } else {
        ck_assert_msg(r.exited && r.code == 0, "torch_ref.py eval:\n%s%s", r.out, r.err);
        metrics_of(r.out, "test_loss", got, sizeof got);
        ck_assert_msg(strcmp(got, done) == 0, "PyTorch: %s; ddpc: %s", got, done);
    }
    run_result_free(&r);
    free(script);
    free(stale);
    free(before);
    free(after);
    free(ckdir);
    lc_free(&f);
}
END_TEST

/* What --eval is given wrong says so before any worker starts. */
START_TEST(eval_refusals_name_the_cause)
{
    adopt_orphans();
    struct lc f = { 0 };
    lc_make(&f, "lc-evalbad", NULL, 1);
    struct run_result r;
    struct { char *argv[8]; const char *want; int code; } c[] = {
        { { f.job, "--eval", NULL }, "no checkpoint of this configuration of job lc in "
          "checkpoint_dir ckpt", 1 },
        { { f.job, "--eval", "--checkpoint", "best", NULL }, "keeps no best checkpoint", 1 },
        { { f.job, "--eval", "--checkpoint", "nope.ckpt", NULL }, "nope.ckpt: No such file", 1 },
        { { f.job, "--eval", "--model", "train-x.idx", NULL }, "--model train-x.idx", 1 },
        { { f.job, "--eval", "--data", "test-x.idx", NULL }, "give the labels too", 2 },
        { { f.job, "--eval", "--labels", "test-y.idx", NULL }, "--labels goes with --data", 2 },
        { { f.job, "--eval", "--resume", "x", NULL }, "trains nothing", 2 },
        { { f.job, "--eval", "--checkpoint", "last", "--model", "m", NULL }, "give one", 2 },
        { { f.job, "--checkpoint", "last", NULL }, "names the weights of --eval", 2 },
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        lc_run(&f, c[i].argv, c[i].code, &r);
        ck_assert_msg(strstr(r.err, c[i].want), "%s %s: no '%s' in:\n%s", c[i].argv[1],
                      c[i].argv[2] ? c[i].argv[2] : "", c[i].want, r.err);
        ck_assert_msg(!strstr(r.out, "epoch 1/"), "it trained:\n%s", r.out);
        run_result_free(&r);
    }
    char *ck = path_in(f.dir, "ckpt");
    ck_assert_msg(access(ck, F_OK) != 0, "--eval created checkpoint_dir");
    free(ck);
    lc_free(&f);
}
END_TEST

/* ---- --predict ---- */

static void write_npy_u8(const char *path, const unsigned char *px, int n)
{
    char head[128];
    int dl = snprintf(head + 10, sizeof head - 10, "{'descr': '|u1', 'fortran_order': False, "
                      "'shape': (%d, 1, %d, %d), }", n, SIDE, SIDE);
    int pad = (64 - (10 + dl + 1) % 64) % 64;
    memcpy(head, "\x93NUMPY\x01\x00", 8);
    head[8] = (char)((dl + pad + 1) & 0xff);
    head[9] = (char)((dl + pad + 1) >> 8);
    memset(head + 10 + dl, ' ', (size_t)pad);
    head[10 + dl + pad] = '\n';
    size_t hl = (size_t)(10 + dl + pad + 1), nb = (size_t)n * SIDE * SIDE;
    char *b = malloc(hl + nb);
    ck_assert_ptr_nonnull(b);
    memcpy(b, head, hl);
    memcpy(b + hl, px, nb);
    ck_assert_int_eq(write_file(path, b, hl + nb), 0);
    free(b);
}

static void gzip_file(const char *src, const char *dst)
{
    size_t n;
    char *b = read_whole(src, &n);
    gzFile g = gzopen(dst, "wb");
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(gzwrite(g, b, (unsigned)n), (int)n);
    ck_assert_int_eq(gzclose(g), Z_OK);
    free(b);
}

/* torch_ref.py predict: class ids equal torch's argmax, probabilities
 * within 2e-6; returns 0 when torch is missing (SKIP printed). */
static void torch_predict(const struct lc *f, const char *input, const char *pred)
{
    char *script = NULL;
    ck_assert_int_ge(asprintf(&script, "%s/tests/torch_ref.py", test_top()), 0);
    char *py[] = { "/usr/bin/python3", script, "predict", f->spec, "out/model.safetensors",
                   (char *)input, (char *)pred, NULL };
    struct run_result r;
    ck_assert_int_eq(run_capture(py, f->dir, NULL, 120, &r), 0);
    if (r.exited && r.code == 77)
        test_skip("lifecycle: --predict against PyTorch", "%s", r.out);
    else
        ck_assert_msg(r.exited && r.code == 0, "torch_ref.py predict %s %s:\n%s%s", input, pred,
                      r.out, r.err);
    run_result_free(&r);
    free(script);
}

/* ./job --predict over an IDX, a gzipped IDX, an NPY and a CSV of the
 * test images writes one row per sample in input order, as NPY records or
 * CSV, on 2 workers the bytes 1 worker writes, and PyTorch's softmax on
 * the export gives the same classes and probabilities (2e-6). The
 * classes, against the labels, give --eval's accuracy. */
START_TEST(predict_writes_rows_in_input_order)
{
    adopt_orphans();
    struct lc f = { 0 };
    lc_make(&f, "lc-predict", NULL, 1);
    struct run_result r;
    char *train[] = { f.job, NULL };
    lc_run(&f, train, 0, &r);
    char done[128];
    metrics_of(r.out, "\ndone ", done, sizeof done);
    run_result_free(&r);

    unsigned char *px = malloc((size_t)N_TEST * SIDE * SIDE), lab[N_TEST];
    make_images(px, lab, N_TEST, 2);
    char *npy = path_in(f.dir, "test.npy"), *gz = path_in(f.dir, "test-x.idx.gz");
    char *csv = path_in(f.dir, "test.csv");
    write_npy_u8(npy, px, N_TEST);
    gzip_file(f.test_x, gz);
    /* the CSV holds the floats the model reads, and the label column the
     * job would read from a CSV: here none, so as many columns as inputs */
    FILE *c = fopen(csv, "w");
    ck_assert_ptr_nonnull(c);
    for (int k = 0; k < SIDE * SIDE; k++)   /* a header line */
        fprintf(c, "x%d%s", k, k + 1 < SIDE * SIDE ? "," : "\n");
    for (int i = 0; i < N_TEST; i++)
        for (int k = 0; k < SIDE * SIDE; k++)
            fprintf(c, "%.9g%s", (double)((float)px[(size_t)i * SIDE * SIDE + k] *
                                         (1.0f / 255.0f)), k + 1 < SIDE * SIDE ? "," : "\n");
    ck_assert_int_eq(fclose(c), 0);

    const char *inputs[] = { "test-x.idx", "test-x.idx.gz", "test.npy", "test.csv" };
    char *first = NULL;
    size_t first_n = 0;
    for (int i = 0; i < 4; i++) {
        char out[64];
        snprintf(out, sizeof out, "pred-%d.npy", i);
        char *p[] = { f.job, "--predict", (char *)inputs[i], "-o", out, NULL };
        lc_run(&f, p, 0, &r);
        ck_assert_msg(strstr(r.out, "done predict rows=200 "), "%s", r.out);
        run_result_free(&r);
        char *op = path_in(f.dir, out);
        size_t n;
        char *bytes = read_whole(op, &n);
        if (!first) {
            first = bytes;
            first_n = n;
        } else {
            /* the same floats from every format of the same pixels */
            ck_assert_msg(n == first_n && memcmp(bytes, first, n) == 0, "%s predicts other "
                          "numbers than %s", inputs[i], inputs[0]);
            free(bytes);
        }
        free(op);
        torch_predict(&f, inputs[i], out);
    }
    /* NPY records: class (int32) then 3 float32, after a 128-byte header */
    ck_assert_int_eq((int)first_n, 128 + N_TEST * 16);
    int right = 0;
    for (int i = 0; i < N_TEST; i++) {
        int32_t k;
        memcpy(&k, first + 128 + (size_t)i * 16, 4);
        right += k == lab[i];
    }
    char acc[64];
    snprintf(acc, sizeof acc, "test_accuracy=%.4f", right / (double)N_TEST);
    ck_assert_msg(strstr(done, acc), "predicted classes give %s; the run printed %s", acc, done);

    /* CSV out; and a one-worker program of the same spec writes the same bytes */
    char *p2[] = { f.job, "--predict", "test.npy", "-o", "pred.csv", NULL };
    lc_run(&f, p2, 0, &r);
    run_result_free(&r);
    torch_predict(&f, "test.npy", "pred.csv");
    char *one = path_in(f.dir, "one"), *ddpc = NULL;
    ck_assert_int_ge(asprintf(&ddpc, "%s/bin/ddpc", test_build()), 0);
    char *b1[] = { ddpc, "build", f.spec, "-o", one, "--set", "devices=1", NULL };
    lc_run(&f, b1, 0, &r);
    run_result_free(&r);
    char *p3[] = { one, "--predict", "test.npy", "-o", "pred-one.npy", "--model",
                   "out/model.safetensors", NULL };
    lc_run(&f, p3, 0, &r);
    run_result_free(&r);
    char *op = path_in(f.dir, "pred-one.npy");
    size_t n;
    char *bytes = read_whole(op, &n);
    ck_assert_msg(n == first_n && memcmp(bytes, first, n) == 0,
                  "1 worker predicts other bytes than 2");
    free(bytes);
    free(op);
    free(first);
    free(ddpc);
    free(one);
    free(px);
    free(npy);
    free(gz);
    free(csv);
    lc_free(&f);
}
END_TEST

/* A bad input found mid-way (a CSV line near the end that is not
 * numbers) fails the run naming the line, and leaves OUT as it was: no
 * partial file under its name, no temp file beside it. */
START_TEST(predict_failure_leaves_the_output_as_it_was)
{
    adopt_orphans();
    struct lc f = { 0 };
    lc_make(&f, "lc-predbad", NULL, 1);
    struct run_result r;
    char *train[] = { f.job, NULL };
    lc_run(&f, train, 0, &r);
    run_result_free(&r);
    char *csv = path_in(f.dir, "in.csv"), *out = path_in(f.dir, "p.csv");
    FILE *c = fopen(csv, "w");
    ck_assert_ptr_nonnull(c);
    for (int i = 0; i < 3000; i++)
        for (int k = 0; k < SIDE * SIDE; k++)
            fprintf(c, "%s%s", i == 2990 && k == 7 ? "x7" : "0.5",
                    k + 1 < SIDE * SIDE ? "," : "\n");
    ck_assert_int_eq(fclose(c), 0);
    ck_assert_int_eq(write_file(out, "old\n", 4), 0);
    char *p[] = { f.job, "--predict", "in.csv", "-o", "p.csv", NULL };
    lc_run(&f, p, 1, &r);
    ck_assert_msg(strstr(r.err, "in.csv:2991: column 8 (\"x7\") is not a number"), "%s", r.err);
    run_result_free(&r);
    size_t n;
    char *b = read_whole(out, &n);
    ck_assert_msg(n == 4 && memcmp(b, "old\n", 4) == 0, "p.csv changed: %s", b);
    free(b);
    DIR *d = opendir(f.dir);
    struct dirent *de;
    while ((de = readdir(d)))
        ck_assert_msg(!strstr(de->d_name, ".tmp."), "left %s", de->d_name);
    closedir(d);
    /* wrong widths and names are refused before any worker starts */
    char *p2[] = { f.job, "--predict", "train-y.idx", "-o", "q.npy", NULL };
    lc_run(&f, p2, 1, &r);
    ck_assert_msg(strstr(r.err, "1 values per sample, but the model reads 64"), "%s", r.err);
    run_result_free(&r);
    char *p3[] = { f.job, "--predict", "test-x.idx", "-o", "q.json", NULL };
    lc_run(&f, p3, 1, &r);
    ck_assert_msg(strstr(r.err, "end it in .npy or .csv"), "%s", r.err);
    run_result_free(&r);
    char *p4[] = { f.job, "--predict", "in.csv", "-o", "./in.csv", NULL };
    lc_run(&f, p4, 1, &r);
    ck_assert_msg(strstr(r.err, "is the input itself"), "%s", r.err);
    run_result_free(&r);
    free(csv);
    free(out);
    lc_free(&f);
}
END_TEST

/* Writes an NPY of n float32 samples of SIDE*SIDE values, in pieces. */
static void write_big_npy(const char *path, long n)
{
    FILE *o = fopen(path, "wb");
    ck_assert_ptr_nonnull(o);
    char dict[128];
    int dl = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, "
                      "'shape': (%ld, 1, %d, %d), }", n, SIDE, SIDE);
    int pad = (64 - (10 + dl + 1) % 64) % 64, hl = dl + pad + 1;
    fwrite("\x93NUMPY\x01\x00", 1, 8, o);
    fputc(hl & 0xff, o);
    fputc(hl >> 8, o);
    fwrite(dict, 1, (size_t)dl, o);
    for (int i = 0; i < pad; i++)
        fputc(' ', o);
    fputc('\n', o);
    float row[SIDE * SIDE * 256];
    uint64_t s = 7;
    for (long i = 0; i < n; i += 256) {
        for (int k = 0; k < SIDE * SIDE * 256; k++)
            row[k] = test_urand(&s);
        long m = n - i < 256 ? n - i : 256;
        ck_assert_int_eq((int)fwrite(row, sizeof(float) * SIDE * SIDE, (size_t)m, o), (int)m);
    }
    ck_assert_int_eq(fclose(o), 0);
}

/* Peak resident memory (KiB) of argv's process tree: run from a child of
 * its own, whose RUSAGE_CHILDREN then holds only it. */
static long peak_kib(const struct lc *f, char *const argv[])
{
    int fd[2];
    ck_assert_int_eq(pipe(fd), 0);
    pid_t p = fork();
    ck_assert_int_ge(p, 0);
    if (p == 0) {
        struct run_result r;
        long kib = -1;
        if (run_capture(argv, f->dir, NULL, 300, &r) == 0 && r.exited && r.code == 0) {
            struct rusage u;
            if (getrusage(RUSAGE_CHILDREN, &u) == 0)
                kib = u.ru_maxrss;
        } else {
            fprintf(stderr, "%s%s", r.out ? r.out : "", r.err ? r.err : "");
        }
        if (write(fd[1], &kib, sizeof kib) != sizeof kib)
            _exit(1);
        _exit(0);
    }
    close(fd[1]);
    long kib = -1;
    ck_assert_int_eq((int)read(fd[0], &kib, sizeof kib), (int)sizeof kib);
    close(fd[0]);
    ck_assert_int_eq(waitpid(p, NULL, 0), p);
    ck_assert_msg(kib > 0, "the run failed");
    return kib;
}

/* --predict streams: the largest process of the job holds about the same
 * resident memory for an input 8 times as large (12 MiB and 100 MiB of
 * float32 samples), where reading the input whole would add its size. */
START_TEST(predict_memory_does_not_grow_with_the_input)
{
    adopt_orphans();
    struct lc f = { 0 };
    lc_make(&f, "lc-predmem", NULL, 1);
    struct run_result r;
    char *train[] = { f.job, NULL };
    lc_run(&f, train, 0, &r);
    run_result_free(&r);
    char *small = path_in(f.dir, "small.npy"), *big = path_in(f.dir, "big.npy");
    write_big_npy(small, 50000);
    write_big_npy(big, 400000);
    char *ps[] = { f.job, "--predict", "small.npy", "-o", "s.npy", NULL };
    char *pb[] = { f.job, "--predict", "big.npy", "-o", "b.npy", NULL };
    long ks = peak_kib(&f, ps), kb = peak_kib(&f, pb);
    printf("lifecycle: --predict peak RSS %ld KiB for 12.2 MiB of input, %ld KiB for 97.7 "
           "MiB\n", ks, kb);
    ck_assert_msg(kb - ks < 16 * 1024, "peak RSS grew by %ld KiB for 85 MiB more input", kb - ks);
    struct stat st;
    char *bo = path_in(f.dir, "b.npy");
    ck_assert_int_eq(stat(bo, &st), 0);
    ck_assert_int_eq((long long)st.st_size, 128 + 400000LL * 16);
    free(bo);
    free(small);
    free(big);
    lc_free(&f);
}
END_TEST

/* Under a real cgroup memory limit (v1's memory.limit_in_bytes, where
 * this machine lets root make a group) smaller than the input, --predict
 * runs through it: the input is read in pieces, never held. */
START_TEST(predict_input_larger_than_a_cgroup_limit)
{
    adopt_orphans();
    FILE *cg = fopen("/proc/self/cgroup", "re");
    char line[512], rel[400] = "";
    while (cg && fgets(line, sizeof line, cg))
        if (sscanf(line, "%*d:memory:%399s", rel) == 1)
            break;
    if (cg)
        fclose(cg);
    char *group = NULL;
    ck_assert_int_ge(asprintf(&group, "/sys/fs/cgroup/memory%s/ddpc-predict-%d",
                              strcmp(rel, "/") == 0 ? "" : rel, (int)getpid()), 0);
    if (!rel[0] || geteuid() != 0 || mkdir(group, 0755) != 0) {
        test_skip("lifecycle: --predict under a cgroup limit", "needs root and a writable "
                  "cgroup v1 memory hierarchy (%s: %s)", group, strerror(errno));
        free(group);
        return;
    }
    struct lc f = { 0 };
    lc_make(&f, "lc-predcg", NULL, 1);
    struct run_result r;
    char *train[] = { f.job, NULL };
    lc_run(&f, train, 0, &r);
    run_result_free(&r);
    char *big = path_in(f.dir, "big.npy");
    write_big_npy(big, 1000000);   /* 244 MiB */
    char *limit = path_in(group, "memory.limit_in_bytes");
    ck_assert_int_eq(write_file(limit, "167772160", 9), 0);   /* 160 MiB */
    char *sh = NULL;
    ck_assert_int_ge(asprintf(&sh, "echo $$ > %s/cgroup.procs && exec \"$0\" --predict big.npy "
                              "-o b.npy", group), 0);
    char *argv[] = { "/bin/sh", "-c", sh, f.job, NULL };
    lc_run(&f, argv, 0, &r);
    ck_assert_msg(strstr(r.out, "done predict rows=1000000 "), "%s%s", r.out, r.err);
    run_result_free(&r);
    char *failcnt = path_in(group, "memory.max_usage_in_bytes");
    size_t n;
    char *peak = read_whole(failcnt, &n);
    printf("lifecycle: --predict of 244 MiB under a 160 MiB cgroup: peak usage %s", peak);
    free(peak);
    free(failcnt);
    ck_assert_int_eq(rmdir(group), 0);
    free(sh);
    free(limit);
    free(big);
    free(group);
    lc_free(&f);
}
END_TEST

/* A gpt: --eval prints the test_loss the training ended with; --predict
 * of a text file writes a row per byte (its token, the most likely next
 * one, its probability, the log-probability of the byte that follows),
 * whose mean -logprob over the whole windows is --eval --data's test_loss
 * for the same file, and nanoGPT in PyTorch on the export agrees on every
 * row (tests/gpt_export.py). */
START_TEST(gpt_eval_and_predict_next_tokens)
{
    adopt_orphans();
    char *dir = make_temp_dir("lc-gpt");
    struct lc f = { .dir = dir };
    char *txt = path_in(dir, "t.txt"), *spec = path_in(dir, "g.yaml"), *job = path_in(dir, "g");
    FILE *t = fopen(txt, "w");
    ck_assert_ptr_nonnull(t);
    const char *words[] = { "the ", "quick ", "brown ", "fox ", "jumps ", "over ", "a ",
                            "lazy ", "dog", ".\n" };
    uint64_t st = 5;
    for (int i = 0; i < 900; i++) {
        st = st * 6364136223846793005ULL + 1442695040888963407ULL;
        fputs(words[(st >> 33) % 10], t);
    }
    ck_assert_int_eq(fclose(t), 0);
    const char *text =
        "version: 1\nname: g\ndevices: 2\naccelerator: cpu\nepochs: 2\nbatch_size: 4\n"
        "learning_rate: 0.003\nlr_scaling: none\n"
        "model: {type: gpt, vocab_size: 256, block_size: 16, n_layer: 1, n_head: 2, n_embd: 16, "
        "dropout: 0.0}\n"
        "optimizer: {type: adamw}\ncheckpoint_dir: ck\ncheckpoint: {export: g.safetensors}\n"
        "data:\n  train: {format: text, path: t.txt, range: [0, 0.9]}\n"
        "  test: {format: text, path: t.txt, range: [0.9, 1]}\n";
    ck_assert_int_eq(write_file(spec, text, strlen(text)), 0);
    ddpc_build_ok(spec, job);
    struct run_result r;
    char *train[] = { job, NULL };
    lc_run(&f, train, 0, &r);
    double loss = find_kv(strstr(r.out, "\ndone "), "test_loss");
    run_result_free(&r);
    char *ev[] = { job, "--eval", NULL };
    lc_run(&f, ev, 0, &r);
    ck_assert_msg(fabs(find_kv(r.out, "test_loss") - loss) < 1e-9 && strstr(r.out, "perplexity="),
                  "--eval: %s; the run ended at test_loss=%.4f", r.out, loss);
    run_result_free(&r);
    char *ed[] = { job, "--eval", "--data", "t.txt", NULL };
    lc_run(&f, ed, 0, &r);
    double whole = find_kv(r.out, "test_loss");
    run_result_free(&r);
    char *pr[] = { job, "--predict", "t.txt", "-o", "p.npy", NULL };
    lc_run(&f, pr, 0, &r);
    run_result_free(&r);
    size_t nt, np;
    char *pp = path_in(dir, "p.npy"), *bytes = read_whole(txt, &nt), *pred = read_whole(pp, &np);
    /* NPY 1.0: the header's length at bytes 8-9, then 16-byte records */
    size_t h = 10 + ((unsigned char)pred[8] | (size_t)(unsigned char)pred[9] << 8);
    ck_assert_int_eq((int)np, (int)(h + 16 * nt));
    free(pp);
    double sum = 0;
    size_t whole_rows = (nt - 1) / 16 * 16;
    for (size_t i = 0; i < nt; i++) {
        int32_t tok;
        float lp;
        memcpy(&tok, pred + h + 16 * i, 4);
        memcpy(&lp, pred + h + 16 * i + 12, 4);
        ck_assert_int_eq(tok, (unsigned char)bytes[i]);
        ck_assert_msg(i + 1 < nt ? isfinite(lp) && lp <= 0 : isnan(lp), "row %zu: %g", i, lp);
        if (i < whole_rows)
            sum -= lp;
    }
    char a[32], b[32];
    snprintf(a, sizeof a, "%.4f", sum / (double)whole_rows);
    snprintf(b, sizeof b, "%.4f", whole);
    ck_assert_msg(strcmp(a, b) == 0, "mean -logprob %s, --eval --data %s", a, b);
    char *script = NULL;
    ck_assert_int_ge(asprintf(&script, "%s/tests/gpt_export.py", test_top()), 0);
    char *py[] = { "/usr/bin/python3", script, "g.safetensors", "t.txt", "256", "16", "1", "2",
                   "16", "1", "p.npy", NULL };
    ck_assert_int_eq(run_capture(py, dir, NULL, 120, &r), 0);
    if (r.exited && r.code == 77)
        test_skip("lifecycle: gpt --predict against nanoGPT", "%s", r.out);
    else
        ck_assert_msg(r.exited && r.code == 0 && strstr(r.out, "next_mismatches=0"),
                      "gpt_export.py:\n%s%s", r.out, r.err);
    run_result_free(&r);
    free(script);
    free(bytes);
    free(pred);
    free(txt);
    free(spec);
    free(job);
    rm_tree(dir);
    free(dir);
}
END_TEST

/* ---- outputs that never overwrite another configuration's ---- */

/* Version names: before the last extension of the file name, inside a
 * directory for TensorBoard. */
START_TEST(version_names)
{
    char out[256];
    struct { enum ddpc_out_kind k; const char *base; int v; const char *want; } c[] = {
        { DDPC_OUT_EXPORT, "out/model.safetensors", 0, "out/model.safetensors" },
        { DDPC_OUT_EXPORT, "out/model.safetensors", 1, "out/model-v1.safetensors" },
        { DDPC_OUT_CSV, "logs.d/metrics.csv", 12, "logs.d/metrics-v12.csv" },
        { DDPC_OUT_CSV, "logs.d/metrics", 2, "logs.d/metrics-v2" },
        { DDPC_OUT_CSV, ".hidden", 1, ".hidden-v1" },
        { DDPC_OUT_EXPORT, "a.tar.gz", 3, "a.tar-v3.gz" },
        { DDPC_OUT_TB, "runs/x/", 1, "runs/x/version_1" },
        { DDPC_OUT_TB, "runs", 4, "runs/version_4" },
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        ck_assert_int_eq(outver_name(c[i].k, c[i].base, c[i].v, out, sizeof out), 0);
        ck_assert_str_eq(out, c[i].want);
    }
    ck_assert_int_eq(outver_name(DDPC_OUT_CSV, "m.csv", 1, out, 5), -1);
}
END_TEST

/* Returns the job's done line's test metrics, after asserting it ran. */
static void sweep_run(const struct lc *f, const char *job, char *done, size_t cap,
                      struct run_result *r)
{
    char *argv[] = { (char *)job, NULL };
    lc_run(f, argv, 0, r);
    metrics_of(r->out, "\ndone ", done, cap);
}

/* A sweep: one spec, four builds with --set learning_rate=..., run one
 * after the other in one directory, leaves four intact exports, four
 * metrics CSVs and four TensorBoard runs, each carrying its own
 * configuration's identity, without a single extra flag: the first run
 * writes the paths the spec names, the others the next version beside them
 * and say so. Each export, given to --eval, gives its own run's numbers, as
 * does each job's --eval by default (no checkpoint_dir: the export of its
 * configuration). A rerun of one configuration rewrites its own version,
 * none other; other_run_outputs: refuse stops before training, naming the
 * file. (Before: each run replaced model.safetensors and metrics.csv.) */
START_TEST(sweep_of_four_learning_rates_keeps_four_exports)
{
    adopt_orphans();
    struct lc f = { .no_ckpt_dir = 1 };
    lc_make(&f, "lc-sweep", "  tensorboard: tb\n", 0);
    /* tensorboard belongs in the logging block: append it there */
    char *text = read_whole(f.spec, NULL);
    char *lg = strstr(text, "logging: {metrics_csv: logs/metrics.csv, every_n_steps: 5}");
    ck_assert_ptr_nonnull(lg);
    char *fixed = NULL;
    ck_assert_int_ge(asprintf(&fixed, "%.*slogging: {metrics_csv: logs/metrics.csv, "
                              "every_n_steps: 5, tensorboard: tb}%s", (int)(lg - text), text,
                              lg + strlen("logging: {metrics_csv: logs/metrics.csv, "
                                          "every_n_steps: 5}")), 0);
    char *tail = strstr(fixed, "  tensorboard: tb\n");
    ck_assert_ptr_nonnull(tail);
    *tail = '\0';
    ck_assert_int_eq(write_file(f.spec, fixed, strlen(fixed)), 0);
    free(fixed);
    free(text);

    const char *lrs[] = { "0.001", "0.003", "0.01", "0.03" };
    const char *exports[] = { "out/model.safetensors", "out/model-v1.safetensors",
                              "out/model-v2.safetensors", "out/model-v3.safetensors" };
    const char *csvs[] = { "logs/metrics.csv", "logs/metrics-v1.csv", "logs/metrics-v2.csv",
                           "logs/metrics-v3.csv" };
    const char *tbs[] = { "tb", "tb/version_1", "tb/version_2", "tb/version_3" };
    char done[4][128], got[128], *jobs[4];
    char hashes[4][DDPC_CKPT_HASH_LEN + 1];
    char *ddpc = NULL;
    ck_assert_int_ge(asprintf(&ddpc, "%s/bin/ddpc", test_build()), 0);
    struct run_result r;
    for (int i = 0; i < 4; i++) {
        char set[64];
        snprintf(set, sizeof set, "learning_rate=%s", lrs[i]);
        ck_assert_int_ge(asprintf(&jobs[i], "%s/job-%d", f.dir, i), 0);
        char *b[] = { ddpc, "build", f.spec, "-o", jobs[i], "--set", set, NULL };
        lc_run(&f, b, 0, &r);
        run_result_free(&r);
        sweep_run(&f, jobs[i], done[i], sizeof done[i], &r);
        if (i == 0) {
            ck_assert_msg(!strstr(r.out, "note: checkpoint.export") &&
                          !strstr(r.out, "exported to"), "%s", r.out);
        } else {
            char note[256];
            snprintf(note, sizeof note, "note: checkpoint.export out/model.safetensors holds "
                     "another configuration's model (identity ");
            ck_assert_msg(strstr(r.out, note) && strstr(r.out, "learning_rate changed: 0.001 -> ")
                          && strstr(r.out, exports[i]), "run %d:\n%s", i, r.out);
            snprintf(note, sizeof note, "exported to %s (checkpoint.export "
                     "out/model.safetensors holds another configuration's model)", exports[i]);
            ck_assert_msg(strstr(r.out, note), "run %d: no '%s' in:\n%s", i, note, r.out);
            snprintf(note, sizeof note, "this run writes %s", csvs[i]);
            ck_assert_msg(strstr(r.out, note), "run %d: no '%s' in:\n%s", i, note, r.out);
            snprintf(note, sizeof note, "this run writes %s", tbs[i]);
            ck_assert_msg(strstr(r.out, note), "run %d: no '%s' in:\n%s", i, note, r.out);
        }
        run_result_free(&r);
    }
    for (int i = 0; i < 4; i++) {
        char *x = path_in(f.dir, exports[i]);
        ck_assert_msg(ckpt_export_identity(x, hashes[i], NULL, 0) == 1 && hashes[i][0],
                      "%s: no identity", exports[i]);
        for (int k = 0; k < i; k++)
            ck_assert_msg(strcmp(hashes[i], hashes[k]) != 0, "%s and %s: one identity",
                          exports[i], exports[k]);
        free(x);
        /* the export is its run's model: --eval on it prints the run's numbers */
        char *e[] = { jobs[0], "--eval", "--model", (char *)exports[i], NULL };
        lc_run(&f, e, 0, &r);
        metrics_of(r.out, "done eval", got, sizeof got);
        ck_assert_msg(strcmp(got, done[i]) == 0, "%s: %s, its run printed %s", exports[i], got,
                      done[i]);
        if (i > 0)
            ck_assert_msg(strstr(r.out, "was written by another configuration"), "%s", r.out);
        run_result_free(&r);
        char *d[] = { jobs[i], "--eval", NULL };   /* the default: its own export */
        lc_run(&f, d, 0, &r);
        metrics_of(r.out, "done eval", got, sizeof got);
        ck_assert_msg(strcmp(got, done[i]) == 0 && strstr(r.out, exports[i]),
                      "job-%d --eval: %s", i, r.out);
        run_result_free(&r);
        char *c = path_in(f.dir, csvs[i]), *line = read_whole(c, NULL), want[400];
        snprintf(want, sizeof want, "# ddpc job=lc identity=%s\nstep,", hashes[i]);
        ck_assert_msg(strncmp(line, want, strlen(want)) == 0, "%s:\n%.200s", csvs[i], line);
        free(line);
        free(c);
        char *lock = NULL;
        ck_assert_int_ge(asprintf(&lock, "%s/%s/.ddpc.lock", f.dir, tbs[i]), 0);
        line = read_whole(lock, NULL);
        ck_assert_msg(strstr(line, hashes[i]), "%s: %s", lock, line);
        free(line);
        free(lock);
    }
    /* a rerun of the second configuration: its own version again */
    char *v1 = path_in(f.dir, exports[1]);
    struct stat st0, st1;
    ck_assert_int_eq(stat(v1, &st0), 0);
    sweep_run(&f, jobs[1], got, sizeof got, &r);
    ck_assert_msg(strcmp(got, done[1]) == 0, "rerun: %s, first %s", got, done[1]);
    ck_assert_msg(strstr(r.out, "exported to out/model-v1.safetensors"), "%s", r.out);
    run_result_free(&r);
    ck_assert_int_eq(stat(v1, &st1), 0);
    ck_assert_msg(st1.st_ino != st0.st_ino, "model-v1 was not rewritten");
    char *v4 = path_in(f.dir, "out/model-v4.safetensors"), *c4 = path_in(f.dir,
                                                                       "logs/metrics-v4.csv");
    ck_assert_msg(access(v4, F_OK) != 0 && access(c4, F_OK) != 0, "a rerun wrote a new version");

    /* other_run_outputs: refuse, a fifth configuration: stopped, named */
    char *job5 = path_in(f.dir, "job-refuse");
    char *b5[] = { ddpc, "build", f.spec, "-o", job5, "--set", "learning_rate=0.1", "--set",
                   "other_run_outputs=refuse", NULL };
    lc_run(&f, b5, 0, &r);
    run_result_free(&r);
    char *r5[] = { job5, NULL };
    lc_run(&f, r5, 1, &r);
    ck_assert_msg(strstr(r.err, "logging.metrics_csv logs/metrics.csv holds another "
                         "configuration's metrics") &&
                  strstr(r.err, "other_run_outputs is refuse") && !strstr(r.out, "step 5/"),
                  "%s%s", r.out, r.err);
    run_result_free(&r);
    ck_assert_msg(access(v4, F_OK) != 0 && access(c4, F_OK) != 0, "the refused run wrote");
    for (int i = 0; i < 4; i++)
        free(jobs[i]);
    free(job5);
    free(v1);
    free(v4);
    free(c4);
    free(ddpc);
    lc_free(&f);
}
END_TEST

/* `ddpc build -o OUT` keeps a program at OUT built from another spec (a
 * sweep that builds one -o per configuration from several specs, a typo
 * in -o) unless --force; rebuilding from the same spec replaces it. */
START_TEST(build_keeps_another_specs_program)
{
    struct lc f = { 0 };
    lc_make(&f, "lc-force", NULL, 1);
    char *ddpc = NULL, *other = path_in(f.dir, "other.yaml");
    ck_assert_int_ge(asprintf(&ddpc, "%s/bin/ddpc", test_build()), 0);
    char *text = read_whole(f.spec, NULL);
    ck_assert_int_eq(write_file(other, text, strlen(text)), 0);
    free(text);
    struct stat st0, st1;
    ck_assert_int_eq(stat(f.job, &st0), 0);
    struct run_result r;
    char *same[] = { ddpc, "build", f.spec, "-o", f.job, "--set", "epochs=1", NULL };
    lc_run(&f, same, 0, &r);
    run_result_free(&r);
    char *b[] = { ddpc, "build", other, "-o", f.job, NULL };
    lc_run(&f, b, 2, &r);
    ck_assert_msg(strstr(r.err, "this program was built from another spec (spec=") &&
                  strstr(r.err, "job.yaml; this build is spec=") && strstr(r.err, "--force"),
                  "%s", r.err);
    run_result_free(&r);
    ck_assert_int_eq(stat(f.job, &st1), 0);
    char *bf[] = { ddpc, "build", other, "-o", f.job, "--force", NULL };
    lc_run(&f, bf, 0, &r);
    run_result_free(&r);
    char *p[] = { f.job, "--version", NULL };
    lc_run(&f, p, 0, &r);
    ck_assert_msg(strstr(r.out, "other.yaml"), "%s", r.out);
    run_result_free(&r);
    /* a program no ddpc marked */
    char *ls = path_in(f.dir, "ls");
    size_t n;
    char *bytes = read_whole("/bin/true", &n);
    ck_assert_int_eq(write_file(ls, bytes, n), 0);
    ck_assert_int_eq(chmod(ls, 0755), 0);
    free(bytes);
    char *bl[] = { ddpc, "build", f.spec, "-o", ls, NULL };
    lc_run(&f, bl, 2, &r);
    ck_assert_msg(strstr(r.err, "does not say which spec it was built from"), "%s", r.err);
    run_result_free(&r);
    free(ls);
    free(other);
    free(ddpc);
    lc_free(&f);
}
END_TEST

/* ---- the run report ---- */

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* A PNG as Chromium's --screenshot writes it (8-bit RGB or RGBA, not
 * interlaced): the fraction of pixels that are not white (*ink) and of
 * those near the color rgb (*color). 0, or -1 for a PNG it cannot read. */
static int png_ink(const char *path, const unsigned char rgb[3], double *ink, double *color)
{
    size_t n;
    unsigned char *b = (unsigned char *)read_whole(path, &n);
    if (n < 33 || memcmp(b, "\x89PNG\r\n\x1a\n", 8) != 0) {
        free(b);
        return -1;
    }
    uint32_t w = be32(b + 16), h = be32(b + 20);
    int bpp = b[25] == 6 ? 4 : b[25] == 2 ? 3 : 0;
    if (b[24] != 8 || !bpp || b[28] != 0 || w == 0 || h == 0 || w > 10000 || h > 10000) {
        free(b);
        return -1;
    }
    unsigned char *idat = malloc(n);
    size_t il = 0;
    for (size_t pos = 8; pos + 12 <= n;) {
        uint32_t len = be32(b + pos);
        if (pos + 12 + len > n)
            break;
        if (memcmp(b + pos + 4, "IDAT", 4) == 0) {
            memcpy(idat + il, b + pos + 8, len);
            il += len;
        }
        pos += 12 + len;
    }
    size_t stride = (size_t)w * (size_t)bpp;
    uLongf rl = (uLongf)((stride + 1) * h);
    unsigned char *raw = malloc(rl), *prev = calloc(1, stride);
    int rc = uncompress(raw, &rl, idat, il) == Z_OK && rl == (stride + 1) * h ? 0 : -1;
    long inked = 0, near = 0;
    for (uint32_t y = 0; rc == 0 && y < h; y++) {
        unsigned char *line = raw + (size_t)y * (stride + 1) + 1, f = line[-1];
        for (size_t x = 0; x < stride; x++) {
            int a = x >= (size_t)bpp ? line[x - bpp] : 0, up = prev[x];
            int c = x >= (size_t)bpp ? prev[x - bpp] : 0, pr;
            switch (f) {
            case 1: line[x] = (unsigned char)(line[x] + a); break;
            case 2: line[x] = (unsigned char)(line[x] + up); break;
            case 3: line[x] = (unsigned char)(line[x] + (a + up) / 2); break;
            case 4: {
                int p = a + up - c, pa = abs(p - a), pb = abs(p - up), pc = abs(p - c);
                pr = pa <= pb && pa <= pc ? a : pb <= pc ? up : c;
                line[x] = (unsigned char)(line[x] + pr);
                break;
            }
            default: break;
            }
        }
        for (size_t x = 0; x < stride; x += (size_t)bpp) {
            inked += line[x] < 245 || line[x + 1] < 245 || line[x + 2] < 245;
            near += abs(line[x] - rgb[0]) < 40 && abs(line[x + 1] - rgb[1]) < 40 &&
                    abs(line[x + 2] - rgb[2]) < 40;
        }
        memcpy(prev, line, stride);
    }
    *ink = (double)inked / ((double)w * h);
    *color = (double)near / ((double)w * h);
    free(prev);
    free(raw);
    free(idat);
    free(b);
    return rc;
}

/* A finished run writes its report beside the metrics (logs/metrics.html),
 * ./job --report writes it again: one HTML file, no script, nothing
 * fetched, with the loss, learning-rate (and the plan's points) and
 * throughput charts, the best epoch, a confusion matrix found beside the
 * metrics, and the plan against the run. Headless Chromium renders it
 * (Debian's chromium; SKIP without it): the screenshot is not blank, and
 * the charts' blue lines are drawn. */
START_TEST(report_renders_in_chromium)
{
    adopt_orphans();
    struct lc f = { 0 };
    lc_make(&f, "lc-report", NULL, 1);
    struct run_result r;
    char *train[] = { f.job, NULL };
    lc_run(&f, train, 0, &r);
    ck_assert_msg(strstr(r.err, "report: logs/metrics.html\n"), "%s", r.err);
    run_result_free(&r);
    char *cm = path_in(f.dir, "logs/metrics-confusion.csv");
    ck_assert_int_eq(write_file(cm, "step,0,1,2\n38,60,3,2\n38,4,55,6\n38,1,2,67\n", 42), 0);
    char *rep[] = { f.job, "--report", NULL };
    lc_run(&f, rep, 0, &r);
    ck_assert_msg(strstr(r.out, "report: logs/metrics.html\n"), "%s", r.out);
    run_result_free(&r);
    char *html = path_in(f.dir, "logs/metrics.html");
    char *page = read_whole(html, NULL);
    const char *want[] = { "<svg", "<title>Loss</title>", "<title>Learning rate</title>",
                           "the plan's schedule points", "<title>Throughput</title>",
                           "best epoch ", "eval_loss", "configuration identity",
                           "from <code>logs/metrics-confusion.csv</code>",
                           "true \\ predicted", "0.85)\">67</td>",
                           "optimizer steps in all</td><td>38</td><td>38</td>",
                           "This plan predicts no times yet" };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        ck_assert_msg(strstr(page, want[i]), "no '%s' in the report:\n%.3000s", want[i], page);
    ck_assert_msg(!strstr(page, "<script") && !strstr(page, "src=") && !strstr(page, "href=") &&
                  !strstr(page, "url("), "the report refers to something outside it");
    for (const char *h = page; (h = strstr(h, "http")); h++)
        ck_assert_msg(strncmp(h - 7, "xmlns=\"http://www.w3.org/2000/svg", 33) == 0,
                      "a link in the report: %.60s", h);
    free(page);

    if (access("/usr/bin/chromium", X_OK) != 0) {
        test_skip("lifecycle: the report in Chromium", "/usr/bin/chromium is missing "
                  "(Debian's chromium package; scripts/install-deps installs it)");
    } else {
        char *shot = path_in(f.dir, "shot.png"), *prof = path_in(f.dir, "chromium-profile");
        char *url = NULL, *shot_arg = NULL, *prof_arg = NULL;
        ck_assert_int_ge(asprintf(&url, "file://%s", html), 0);
        ck_assert_int_ge(asprintf(&shot_arg, "--screenshot=%s", shot), 0);
        ck_assert_int_ge(asprintf(&prof_arg, "--user-data-dir=%s", prof), 0);
        char *ch[] = { "/usr/bin/chromium", "--headless", "--no-sandbox", "--disable-gpu",
                       "--hide-scrollbars", "--no-first-run", "--disable-extensions",
                       "--window-size=800,1300", prof_arg, shot_arg, url, NULL };
        char *home = NULL;
        ck_assert_int_ge(asprintf(&home, "HOME=%s", f.dir), 0);
        char *env[] = { home, NULL };
        ck_assert_int_eq(run_capture(ch, f.dir, env, 120, &r), 0);
        ck_assert_msg(r.exited && r.code == 0 && access(shot, R_OK) == 0,
                      "chromium exit %d:\n%s%s", r.code, r.out, r.err);
        run_result_free(&r);
        double ink, blue;
        const unsigned char line_blue[3] = { 0x1f, 0x77, 0xb4 };
        ck_assert_msg(png_ink(shot, line_blue, &ink, &blue) == 0, "cannot read %s", shot);
        printf("lifecycle: the report in Chromium: %.1f%% of the screenshot drawn, %.2f%% the "
               "charts' blue\n", 100 * ink, 100 * blue);
        ck_assert_msg(ink > 0.03, "the screenshot is blank (%.4f drawn)", ink);
        ck_assert_msg(blue > 0.001, "no chart line in the screenshot (%.5f blue)", blue);
        free(home);
        free(url);
        free(shot_arg);
        free(prof_arg);
        free(shot);
        free(prof);
    }
    (void)leftover_children(2.0);   /* chromium's helpers, should any outlive it */
    free(cm);
    free(html);
    lc_free(&f);
}
END_TEST

Suite *lifecycle_suite(void)
{
    Suite *s = suite_create("lifecycle");
    TCase *eval = tcase_create("eval");
    tcase_set_timeout(eval, 300);
    tcase_add_test(eval, eval_scores_checkpoints_without_touching_them);
    tcase_add_test(eval, eval_refusals_name_the_cause);
    suite_add_tcase(s, eval);
    TCase *pred = tcase_create("predict");
    tcase_set_timeout(pred, 300);
    tcase_add_test(pred, predict_writes_rows_in_input_order);
    tcase_add_test(pred, predict_failure_leaves_the_output_as_it_was);
    tcase_add_test(pred, predict_memory_does_not_grow_with_the_input);
    tcase_add_test(pred, predict_input_larger_than_a_cgroup_limit);
    tcase_add_test(pred, gpt_eval_and_predict_next_tokens);
    suite_add_tcase(s, pred);
    TCase *ver = tcase_create("versions");
    tcase_set_timeout(ver, 300);
    tcase_add_test(ver, version_names);
    tcase_add_test(ver, sweep_of_four_learning_rates_keeps_four_exports);
    tcase_add_test(ver, build_keeps_another_specs_program);
    suite_add_tcase(s, ver);
    TCase *rep = tcase_create("report");
    tcase_set_timeout(rep, 300);
    tcase_add_test(rep, report_renders_in_chromium);
    suite_add_tcase(s, rep);
    return s;
}
