/* test_lifecycle.c - after training, as a user runs it: runs that never
 * overwrite each other's outputs (outver.h), `ddpc build --force`.
 *
 * One small job serves them: a CNN on 8x8 images of three classes (a
 * quadrant brighter than the others), trained by 2 CPU workers in about a
 * second. Writes only under temporary directories. */
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
 * and say so. A rerun of one configuration rewrites its own version,
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

Suite *lifecycle_suite(void)
{
    Suite *s = suite_create("lifecycle");
    TCase *ver = tcase_create("versions");
    tcase_set_timeout(ver, 300);
    tcase_add_test(ver, version_names);
    tcase_add_test(ver, sweep_of_four_learning_rates_keeps_four_exports);
    tcase_add_test(ver, build_keeps_another_specs_program);
    suite_add_tcase(s, ver);
    return s;
}
