/* test_emit.c - generated files: hostile values baked exactly, nothing run,
 * same job -> same bytes; the cc driver's success and failure paths.
 *
 * The generated job_config.h is compiled into a small program that prints
 * the baked job with emit_dump.h; the test prints the original job with the
 * same code and compares. Marker files prove that no m4 builtin or shell
 * construct in a value ran. `make install` into a temporary PREFIX, then a
 * build and run from another directory, proves the installed layout. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <check.h>
#include "suites.h"
#include "testutil.h"
#include "buf.h"
#include "cc.h"
#include "emit.h"
#include "plan.h"
#include "emit_dump.h"

static char marker[256];   /* a file that must never exist */

static int exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

/* Everything that has ever escaped a quoting layer somewhere, with
 * marker-creating payloads for m4, the shell and the C preprocessor. */
static char *hostile(const char *tag)
{
    char *s;
    int n = asprintf(&s,
        "%s q\"uote \\back\\ nl\n tab\t bq`touch %s` $(touch %s) "
        "m4_syscmd(touch %s)m4_esyscmd(touch %s) m4_include(/etc/hostname) "
        "m4_changequote([,])m4_define(M_NAME,x) M_NAME DDPC_SPEC_TEXT DDPC_JOB_NAME "
        "*/ /* # hash ?\?/ trigraph $1 $# $@ $* ${x} \xc2\xab\xc2\xbb guillemets "
        "'single' %%s %%n \x01\x7f\xff end\\",
        tag, marker, marker, marker, marker);
    ck_assert_int_ge(n, 0);
    return s;
}

/* A job with every field away from zero, so a field the template forgets
 * shows up in the dump. */
static struct ddpc_job full_job(char **strings)
{
    struct ddpc_job j;
    memset(&j, 0, sizeof j);
    j.version = 1;
    j.name = strings[0];
    j.n_devices = 3;
    j.devices[0] = 4;
    j.devices[1] = 0;
    j.devices[2] = 7;
    j.devices_all = 0;
    j.strategy = DDPC_STRATEGY_DDP;
    j.accelerator = DDPC_ACCEL_CPU;
    j.seed = UINT64_MAX;
    j.deterministic = 1;
    j.epochs = 5;
    j.learning_rate = 0.1;               /* not exact in binary: must round-trip */
    j.lr_scaling = DDPC_LR_SCALING_SQRT;
    j.batch_size = 33;
    j.grad_accumulation = 2;
    j.limit_train_batches = 3000000000LL;
    j.limit_train_fraction = 1.0 / 3.0;
    j.precision = DDPC_PRECISION_BF16;
    j.matmul_precision = DDPC_MATMUL_HIGH;
    j.grad_clip_norm = 1e-300;
    j.bucket_cap_mb = 25;
    j.checkpoint_dir = strings[1];
    j.nccl_timeout_s = 5400.5;
    j.rank_sync_timeout_s = -0.0;
    j.model.type = DDPC_MODEL_MLP;
    j.model.n_layers = 4;
    j.model.layers[0] = 784;
    j.model.layers[1] = 300;
    j.model.layers[2] = 100;
    j.model.layers[3] = 10;
    j.model.activation = DDPC_ACT_GELU;
    j.model.init = DDPC_INIT_KAIMING_NORMAL;
    j.loss = DDPC_LOSS_MSE;
    j.data.train.format = DDPC_DATA_SYNTHETIC;
    j.data.train.inputs = strings[2];
    j.data.train.labels = "";
    j.data.train.path = NULL;
    j.data.train.label_column = -1;
    j.data.train.samples = 1000;
    j.data.train.features = 784;
    j.data.train.classes = 10;
    j.data.train.seed = 12345678901234567ULL;
    j.data.test.format = DDPC_DATA_CSV;
    j.data.test.path = strings[3];
    j.data.test.label_column = 9;
    j.data.has_test = 1;
    j.data.shuffle = 1;
    j.data.drop_last = 1;
    j.optimizer.type = DDPC_OPTIM_ADAMW;
    j.optimizer.momentum = 0.9;
    j.optimizer.nesterov = 1;
    j.optimizer.weight_decay = 0.05;
    j.optimizer.beta1 = 0.9;
    j.optimizer.beta2 = 0.999;
    j.optimizer.eps = 1e-8;
    j.schedule.warmup_steps = 10;
    j.schedule.warmup_start_factor = 0.01;
    j.schedule.decay = DDPC_DECAY_COSINE;
    j.schedule.min_lr_factor = 0.001;
    j.schedule.step_size = 7;
    j.schedule.gamma = 0.5;
    j.checkpoint.every_n_epochs = 2;
    j.checkpoint.keep_last = 3;
    j.checkpoint.resume = DDPC_RESUME_PATH;
    j.checkpoint.resume_path = strings[4];
    j.checkpoint.export_path = strings[5];
    j.logging.every_n_steps = 11;
    j.logging.metrics_csv = strings[6];
    j.logging.tensorboard = strings[7];
    j.logging.progress = DDPC_PROGRESS_OFF;
    j.launch.num_nodes = 2;
    j.launch.launcher = DDPC_LAUNCHER_SLURM;
    j.launch.master_addr = strings[8];
    j.launch.master_port = 29400;
    j.launch.max_restarts = 2;
    return j;
}

#define N_STRINGS 10

struct fixture {
    char *dir;
    char *strings[N_STRINGS];
    struct ddpc_job job;
    struct ddpc_plan plan;
    char *templates;
    char *spec_text;
};

static void fixture_init(struct fixture *fx, int hostile_strings)
{
    memset(fx, 0, sizeof *fx);
    snprintf(marker, sizeof marker, "/tmp/ddpc-pwned-%ld", (long)getpid());
    unlink(marker);
    fx->dir = make_temp_dir("emit");
    ck_assert_ptr_nonnull(fx->dir);
    for (int i = 0; i < N_STRINGS; i++) {
        char tag[16];
        snprintf(tag, sizeof tag, "s%d", i);
        fx->strings[i] = hostile_strings ? hostile(tag) : strdup(tag);
    }
    fx->job = full_job(fx->strings);
    struct ddpc_diag d;
    diag_init(&d);
    ck_assert_int_eq(plan_build(&fx->job, fx->strings[9], &fx->plan, &d), 0);
    diag_free(&d);
    ck_assert_int_ge(asprintf(&fx->templates, "%s/templates", test_top()), 0);
    fx->spec_text = hostile("spec");
}

static void fixture_free(struct fixture *fx)
{
    rm_tree(fx->dir);
    free(fx->dir);
    for (int i = 0; i < N_STRINGS; i++)
        free(fx->strings[i]);
    plan_free(&fx->plan);
    free(fx->templates);
    free(fx->spec_text);
}

static void emit_into(struct fixture *fx, const char *dir, const char *spec_path)
{
    struct emit_input in = {
        .job = &fx->job, .plan = &fx->plan, .spec_path = spec_path,
        .spec_text = fx->spec_text, .spec_len = strlen(fx->spec_text) + 1, /* with a NUL */
        .spec_hash = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        .version = "test", .templates_dir = fx->templates,
    };
    struct ddpc_diag d;
    diag_init(&d);
    int rc = emit_files(&in, dir, NULL, &d);
    ck_assert_msg(rc == 0, "emit_files: %s", d.n ? d.v[0].message : "?");
    diag_free(&d);
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
    char *s = NULL;
    size_t n = 0, cap = 0;
    int c;
    while ((c = fgetc(f)) != EOF) {
        if (n + 2 > cap) {
            cap = cap ? cap * 2 : 4096;
            s = realloc(s, cap);
            ck_assert_ptr_nonnull(s);
        }
        s[n++] = (char)c;
    }
    fclose(f);
    if (!s)
        s = calloc(1, 1);
    else
        s[n] = '\0';
    if (len)
        *len = n;
    return s;
}

static void hex(FILE *f, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%02x", (unsigned char)s[i]);
    fputc('\n', f);
}

static const char prog_src[] =
    "#include <stdio.h>\n"
    "#include \"job_config.h\"\n"
    "#include \"emit_dump.h\"\n"
    "static void hex(const char *s, size_t n)\n"
    "{ for (size_t i = 0; i < n; i++) printf(\"%02x\", (unsigned char)s[i]); putchar('\\n'); }\n"
    "int main(void)\n"
    "{\n"
    "    dump_job(stdout, &ddpc_job);\n"
    "    hex(DDPC_SPEC_PATH, sizeof DDPC_SPEC_PATH - 1);\n"
    "    hex(DDPC_SPEC_HASH, sizeof DDPC_SPEC_HASH - 1);\n"
    "    hex(DDPC_SPEC_TEXT, DDPC_SPEC_LEN);\n"
    "    hex(DDPC_PLAN_JSON, sizeof DDPC_PLAN_JSON - 1);\n"
    "    printf(\"%d %lld %lld\\n\", DDPC_WORLD_SIZE, (long long)DDPC_GLOBAL_BATCH,\n"
    "           (long long)DDPC_N_PARAMS);\n"
    "    return 0;\n"
    "}\n";

/* Compiles prog_src against dir/job_config.h and returns what it prints. */
static char *run_baked(const char *dir)
{
    char *src, *exe, *inc_spec, *inc_tests, *inc_dir;
    ck_assert_int_ge(asprintf(&src, "%s/prog.c", dir), 0);
    ck_assert_int_ge(asprintf(&exe, "%s/prog", dir), 0);
    ck_assert_int_ge(asprintf(&inc_spec, "-I%s/spec", test_top()), 0);
    ck_assert_int_ge(asprintf(&inc_tests, "-I%s/tests", test_top()), 0);
    ck_assert_int_ge(asprintf(&inc_dir, "-I%s", dir), 0);
    ck_assert_int_eq(write_file(src, prog_src, sizeof prog_src - 1), 0);
    char *cc[] = { "cc", "-std=c11", "-Wall", "-Wextra", "-pedantic", "-Werror",
                   "-Wno-overlength-strings", "-Wno-unused-function", inc_dir, inc_spec,
                   inc_tests, src, "-o", exe, NULL };
    struct run_result r;
    ck_assert_int_eq(run_capture(cc, NULL, NULL, 60, &r), 0);
    ck_assert_msg(r.exited && r.code == 0, "compiling the generated header failed:\n%s%s",
                  r.out, r.err);
    run_result_free(&r);
    char *run[] = { exe, NULL };
    ck_assert_int_eq(run_capture(run, NULL, NULL, 30, &r), 0);
    ck_assert_msg(r.exited && r.code == 0, "prog failed: %s", r.err);
    char *out = strdup(r.out);
    run_result_free(&r);
    free(src);
    free(exe);
    free(inc_spec);
    free(inc_tests);
    free(inc_dir);
    return out;
}

/* Emits fx's job into dir, compiles the header, and compares the baked job,
 * spec and plan with the originals. */
static void check_baked(struct fixture *fx, const char *dir, const char *spec_path)
{
    emit_into(fx, dir, spec_path);
    char *got = run_baked(dir);

    char *want = NULL;
    size_t want_len = 0;
    FILE *f = open_memstream(&want, &want_len);
    ck_assert_ptr_nonnull(f);
    dump_job(f, &fx->job);
    hex(f, spec_path, strlen(spec_path));
    hex(f, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", 64);
    hex(f, fx->spec_text, strlen(fx->spec_text) + 1);
    char *json = plan_json(&fx->plan, &fx->job);
    hex(f, json, strlen(json));
    fprintf(f, "%d %lld %lld\n", fx->plan.world_known ? fx->plan.world_size : 0,
            (long long)fx->plan.global_batch, (long long)fx->plan.total_params);
    ck_assert_int_eq(fclose(f), 0);
    ck_assert_str_eq(got, want);
    ck_assert_msg(!exists(marker), "a value ran: %s exists", marker);
    free(json);
    free(want);
    free(got);
}

START_TEST(hostile_values_baked_exactly)
{
    struct fixture fx;
    fixture_init(&fx, 1);
    char *spec_path = hostile("path");
    check_baked(&fx, fx.dir, spec_path);

    /* again with the fields that were still zero (enum defaults, the unused
     * test source, devices_all) set, so none of them can be forgotten */
    fx.job.devices_all = 1;
    fx.job.strategy = DDPC_STRATEGY_NONE;
    fx.job.model.type = DDPC_MODEL_SEQUENTIAL;   /* every item field non-zero */
    fx.job.model.n_input = 1;
    fx.job.model.input[0] = 784;
    fx.job.model.n_items = 1;
    fx.job.model.items[0] = (struct ddpc_layer_item){
        .type = DDPC_LAYER_LINEAR, .n_body = 0, .in = 784, .out = 10, .kernel_size = 3,
        .stride = 2, .padding = 1, .bias = 1, .output_size = 1, .approximate = DDPC_GELU_TANH,
        .p = 0.25, .momentum = 0.3, .eps = 1e-3, .negative_slope = 0.2 };
    fx.job.model.init_from = fx.strings[1];
    fx.job.sync_batchnorm = 1;
    fx.job.data.test.inputs = fx.strings[2];
    fx.job.data.test.labels = fx.strings[3];
    fx.job.data.test.samples = 77;
    fx.job.data.test.features = 5;
    fx.job.data.test.classes = 4;
    fx.job.data.test.seed = 99;
    fx.job.data.train.path = fx.strings[4];
    plan_free(&fx.plan);
    struct ddpc_diag d;
    diag_init(&d);
    ck_assert_int_eq(plan_build(&fx.job, "./x", &fx.plan, &d), 0);
    diag_free(&d);
    char *dir2;
    ck_assert_int_ge(asprintf(&dir2, "%s/second", fx.dir), 0);
    ck_assert_int_eq(mkdir(dir2, 0755), 0);
    check_baked(&fx, dir2, spec_path);
    free(dir2);
    free(spec_path);
    fixture_free(&fx);
}
END_TEST

START_TEST(nothing_runs_anywhere)
{
    struct fixture fx;
    fixture_init(&fx, 1);
    char *spec_path = hostile("path");
    emit_into(&fx, fx.dir, spec_path);
    ck_assert_msg(!exists(marker), "a value ran: %s exists", marker);

    /* m4's include did not happen either: /etc/hostname's text is absent
     * and the literal request is present in escaped form */
    char *path;
    ck_assert_int_ge(asprintf(&path, "%s/job_config.h", fx.dir), 0);
    char *h = slurp(path, NULL);
    ck_assert_ptr_nonnull(strstr(h, "m4_include(/etc/hostname)"));
    ck_assert_ptr_nonnull(strstr(h, "m4_syscmd(touch"));
    /* every byte printable ASCII: the quote bytes never reach the output */
    for (const unsigned char *c = (const unsigned char *)h; *c; c++)
        ck_assert_msg((*c >= 0x20 && *c < 0x7f) || *c == '\n', "byte 0x%02x", *c);
    /* the banner is one comment: its first close is the template's own */
    const char *close = strstr(h, "*/");
    ck_assert_ptr_nonnull(close);
    ck_assert_ptr_nonnull(strstr(close, "#ifndef DDPC_JOB_CONFIG_H"));
    free(h);
    free(path);
    free(spec_path);
    fixture_free(&fx);
}
END_TEST

START_TEST(same_job_same_bytes)
{
    struct fixture fx;
    fixture_init(&fx, 1);
    char *a, *b;
    ck_assert_int_ge(asprintf(&a, "%s/a", fx.dir), 0);
    ck_assert_int_ge(asprintf(&b, "%s/bb", fx.dir), 0);
    ck_assert_int_eq(mkdir(a, 0755), 0);
    ck_assert_int_eq(mkdir(b, 0755), 0);
    emit_into(&fx, a, "spec.yaml");
    emit_into(&fx, b, "spec.yaml");
    static const char *const files[] = { "job_config.h", "job.plan.json", "job.sbatch" };
    for (int i = 0; i < 3; i++) {
        char *pa, *pb;
        size_t na, nb;
        ck_assert_int_ge(asprintf(&pa, "%s/%s", a, files[i]), 0);
        ck_assert_int_ge(asprintf(&pb, "%s/%s", b, files[i]), 0);
        char *sa = slurp(pa, &na), *sb = slurp(pb, &nb);
        ck_assert_msg(na == nb && memcmp(sa, sb, na) == 0, "%s differs", files[i]);
        /* no trace of where it was generated */
        ck_assert_ptr_null(strstr(sa, fx.dir));
        free(sa);
        free(sb);
        free(pa);
        free(pb);
    }
    free(a);
    free(b);
    fixture_free(&fx);
}
END_TEST

START_TEST(plan_json_file_is_plan_json)
{
    struct fixture fx;
    fixture_init(&fx, 1);
    emit_into(&fx, fx.dir, "spec.yaml");
    char *path;
    ck_assert_int_ge(asprintf(&path, "%s/job.plan.json", fx.dir), 0);
    char *file = slurp(path, NULL);
    char *json = plan_json(&fx.plan, &fx.job);
    ck_assert_str_eq(file, json);
    free(file);
    free(json);
    free(path);
    fixture_free(&fx);
}
END_TEST

START_TEST(sbatch_is_shell_and_quotes_hold)
{
    struct fixture fx;
    fixture_init(&fx, 1);
    emit_into(&fx, fx.dir, "spec.yaml");
    char *path;
    ck_assert_int_ge(asprintf(&path, "%s/job.sbatch", fx.dir), 0);
    char *s = slurp(path, NULL);
    ck_assert_ptr_nonnull(strstr(s, "#SBATCH --nodes=2\n"));
    ck_assert_ptr_null(strstr(s, "--gpus-per-node"));       /* accelerator cpu */
    ck_assert_ptr_nonnull(strstr(s, "srun"));
    struct run_result r;
    char *syntax[] = { "bash", "-n", path, NULL };
    ck_assert_int_eq(run_capture(syntax, NULL, NULL, 30, &r), 0);
    ck_assert_msg(r.exited && r.code == 0, "bash -n: %s", r.err);
    run_result_free(&r);

    /* the MASTER= line, run on its own, sets exactly the hostile address */
    char *line = strstr(s, "\nMASTER=");
    ck_assert_ptr_nonnull(line);
    line++;
    char *eol = strchr(line, '\n');
    ck_assert_ptr_nonnull(eol);
    char *script;
    ck_assert_int_ge(asprintf(&script, "%.*s\nprintf %%s \"$MASTER\"", (int)(eol - line), line),
                     0);
    char *sh[] = { "bash", "-c", script, NULL };
    ck_assert_int_eq(run_capture(sh, NULL, NULL, 30, &r), 0);
    ck_assert_msg(r.exited && r.code == 0, "bash: %s", r.err);
    ck_assert_str_eq(r.out, fx.strings[8]);
    run_result_free(&r);
    ck_assert_msg(!exists(marker), "a value ran: %s exists", marker);
    ck_assert_ptr_null(strstr(s, "--exclusive"));
    free(script);
    free(s);

    /* devices: all on GPUs: whole nodes, no GPU count to ask for */
    fx.job.accelerator = DDPC_ACCEL_GPU;
    fx.job.devices_all = 1;
    fx.job.n_devices = 0;
    plan_free(&fx.plan);
    struct ddpc_diag d;
    diag_init(&d);
    ck_assert_int_eq(plan_build(&fx.job, fx.strings[9], &fx.plan, &d), 0);
    diag_free(&d);
    emit_into(&fx, fx.dir, "spec.yaml");
    s = slurp(path, NULL);
    ck_assert_ptr_nonnull(strstr(s, "\n#SBATCH --exclusive\n"));
    ck_assert_ptr_null(strstr(s, "--gpus-per-node"));
    ck_assert_int_eq(run_capture(syntax, NULL, NULL, 30, &r), 0);
    ck_assert_msg(r.exited && r.code == 0, "bash -n: %s", r.err);
    run_result_free(&r);
    free(s);
    free(path);
    fixture_free(&fx);
}
END_TEST

/* The script's first lines run under set -euo pipefail, and the master
 * was `scontrol show hostnames ... | head -n 1`: on an allocation whose
 * host list outgrows a pipe's buffer (about 2000 nodes of 10-character
 * names; launch.num_nodes goes to 4096), head left, scontrol died of
 * SIGPIPE, pipefail made the assignment fail, and the batch script exited
 * 141 before srun, with no word of why. A fake scontrol prints 20000. */
START_TEST(sbatch_master_from_a_long_node_list)
{
    struct fixture fx;
    fixture_init(&fx, 0);
    fx.job.launch.master_addr = NULL;   /* the allocation's first node */
    plan_free(&fx.plan);
    struct ddpc_diag d;
    diag_init(&d);
    ck_assert_int_eq(plan_build(&fx.job, fx.strings[9], &fx.plan, &d), 0);
    diag_free(&d);
    emit_into(&fx, fx.dir, "spec.yaml");
    char *path, *bin, *fake, *script;
    ck_assert_int_ge(asprintf(&path, "%s/job.sbatch", fx.dir), 0);
    ck_assert_int_ge(asprintf(&bin, "%s/bin", fx.dir), 0);
    ck_assert_int_eq(mkdir(bin, 0755), 0);
    ck_assert_int_ge(asprintf(&fake, "%s/scontrol", bin), 0);
    FILE *f = fopen(fake, "w");
    ck_assert_ptr_nonnull(f);
    fputs("#!/bin/sh\nexec seq -f 'node%05g' 1 20000\n", f);
    ck_assert_int_eq(fclose(f), 0);
    ck_assert_int_eq(chmod(fake, 0755), 0);
    char *s = slurp(path, NULL);
    char *line = strstr(s, "\nMASTER=$(");
    ck_assert_msg(line != NULL, "no MASTER from the allocation:\n%s", s);
    line++;
    char *eol = strchr(line, '\n');
    ck_assert_ptr_nonnull(eol);
    ck_assert_int_ge(asprintf(&script, "set -euo pipefail\nPATH=%s:$PATH\n"
                              "SLURM_JOB_NODELIST='node[00001-20000]'\n%.*s\n"
                              "printf %%s \"$MASTER\"", bin, (int)(eol - line), line), 0);
    char *sh[] = { "bash", "-c", script, NULL };
    struct run_result r;
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(run_capture(sh, NULL, NULL, 30, &r), 0);
        ck_assert_msg(r.exited && r.code == 0, "the MASTER line failed (status %d): %s",
                      r.code, r.err);
        ck_assert_str_eq(r.out, "node00001");
        run_result_free(&r);
    }
    free(script);
    free(s);
    free(fake);
    free(bin);
    free(path);
    fixture_free(&fx);
}
END_TEST

START_TEST(escapers)
{
    struct ddpc_buf b;
    buf_init(&b);
    const char in[] = "a\"b\\c\nd?*$`'#\x01\xff" "9";
    buf_c_str(&b, in, sizeof in - 1);
    ck_assert_str_eq(b.s, "\"a\\042b\\134c\\012d\\077\\052\\044\\140\\047\\043\\001\\3779\"");
    buf_free(&b);

    buf_json_str(&b, "\xf0\x9f\x98\x80 \xe9 \x7f");
    ck_assert_str_eq(b.s, "\"\\ud83d\\ude00 \\ufffd \\u007f\"");
    buf_free(&b);

    /* shell words read back exactly through bash */
    const char *words[] = { "plain-1.2/x", "", "a b", "it's", "$HOME", "$(id)", "`id`",
                            "new\nline", "\xff\x01", "*", "~user", NULL };
    for (int i = 0; words[i]; i++) {
        buf_sh_word(&b, words[i]);
        for (const char *c = b.s; (c = strchr(c, '$')); c++)
            ck_assert_msg(c[1] == '\'', "'$' not followed by a quote in %s", b.s);
        char *script;
        ck_assert_int_ge(asprintf(&script, "printf %%s %s", b.s), 0);
        char *sh[] = { "bash", "-c", script, NULL };
        struct run_result r;
        ck_assert_int_eq(run_capture(sh, NULL, NULL, 30, &r), 0);
        ck_assert_msg(r.exited && r.code == 0, "bash: %s", r.err);
        ck_assert_msg(strcmp(r.out, words[i]) == 0, "word %d: %s", i, b.s);
        run_result_free(&r);
        free(script);
        buf_free(&b);
    }
}
END_TEST

START_TEST(bad_values_refused)
{
    struct fixture fx;
    fixture_init(&fx, 0);
    fx.job.learning_rate = NAN;
    struct emit_input in = {
        .job = &fx.job, .plan = &fx.plan, .spec_path = "x.yaml", .spec_text = "",
        .spec_len = 0, .spec_hash = "00", .version = "test", .templates_dir = fx.templates,
    };
    struct ddpc_diag d;
    diag_init(&d);
    ck_assert_ptr_null(emit_prologue(&in, "{}", &d));
    ck_assert_int_ge(d.n_errors, 1);
    ck_assert_ptr_nonnull(strstr(d.v[0].message, "learning_rate"));
    diag_free(&d);

    fx.job.learning_rate = 0.1;
    fx.job.loss = (enum ddpc_loss)77;
    diag_init(&d);
    ck_assert_ptr_null(emit_prologue(&in, "{}", &d));
    diag_free(&d);

    /* m4 missing: a clear message and no output file */
    fx.job.loss = DDPC_LOSS_MSE;
    in.m4 = "/nonexistent/bin/m4";
    diag_init(&d);
    ck_assert_int_eq(emit_files(&in, fx.dir, NULL, &d), -1);
    ck_assert_ptr_nonnull(strstr(d.v[0].message, "cannot run /nonexistent/bin/m4"));
    diag_free(&d);
    char *p;
    ck_assert_int_ge(asprintf(&p, "%s/job.plan.json", fx.dir), 0);
    ck_assert(!exists(p));
    free(p);
    fixture_free(&fx);
}
END_TEST

/* ---- the cc driver ---- */

START_TEST(cc_missing_runtime)
{
    struct fixture fx;
    fixture_init(&fx, 0);
    char *out;
    ck_assert_int_ge(asprintf(&out, "%s/job", fx.dir), 0);
    struct cc_options o = {
        .job = &fx.job, .prefix = fx.dir, .emit_dir = fx.dir, .out = out, .cpu_only = 1,
    };
    char *output = NULL;
    struct ddpc_diag d;
    diag_init(&d);
    ck_assert_int_eq(cc_build(&o, &output, &d), -1);
    ck_assert_ptr_nonnull(strstr(d.v[0].message, "libddprt.a not found"));
    ck_assert_ptr_nonnull(strstr(d.v[0].message, "make install"));
    ck_assert(!exists(out));
    free(output);
    diag_free(&d);
    free(out);
    fixture_free(&fx);
}
END_TEST


START_TEST(cc_compile_failure_reported)
{
    char *lib;
    ck_assert_int_ge(asprintf(&lib, "%s/lib/libddprt.a", test_build()), 0);
    if (!exists(lib)) {
        test_skip("cc_compile_failure_reported", "%s not built", lib);
        free(lib);
        return;
    }
    free(lib);
    struct fixture fx;
    fixture_init(&fx, 0);
    char *hdr, *out;
    ck_assert_int_ge(asprintf(&hdr, "%s/job_config.h", fx.dir), 0);
    ck_assert_int_ge(asprintf(&out, "%s/job", fx.dir), 0);
    const char broken[] = "#error this header is broken on purpose\n";
    ck_assert_int_eq(write_file(hdr, broken, sizeof broken - 1), 0);
    struct cc_options o = {
        .job = &fx.job, .prefix = test_build(), .emit_dir = fx.dir, .out = out, .cpu_only = 1,
    };
    char *output = NULL;
    struct ddpc_diag d;
    diag_init(&d);
    ck_assert_int_eq(cc_build(&o, &output, &d), -1);
    /* first what failed, in words; then the compiler's own message */
    ck_assert_ptr_nonnull(strstr(d.v[0].message, "compiling job.c and linking the runtime failed"));
    ck_assert_ptr_nonnull(output);
    ck_assert_ptr_nonnull(strstr(output, "broken on purpose"));
    ck_assert(!exists(out));
    char *tmp;
    ck_assert_int_ge(asprintf(&tmp, "%s.tmp.%ld", out, (long)getpid()), 0);
    ck_assert(!exists(tmp));
    free(tmp);
    free(output);
    diag_free(&d);
    free(hdr);
    free(out);
    fixture_free(&fx);
}
END_TEST

START_TEST(cc_builds_a_job)
{
    char *lib;
    ck_assert_int_ge(asprintf(&lib, "%s/lib/libddprt.a", test_build()), 0);
    if (!exists(lib)) {
        test_skip("cc_builds_a_job", "%s not built", lib);
        free(lib);
        return;
    }
    free(lib);
    struct fixture fx;
    fixture_init(&fx, 1);
    fx.job.launch.launcher = DDPC_LAUNCHER_LOCAL;
    emit_into(&fx, fx.dir, "spec.yaml");
    char *out;
    ck_assert_int_ge(asprintf(&out, "%s/job", fx.dir), 0);
    struct cc_options o = {
        .job = &fx.job, .prefix = test_build(), .emit_dir = fx.dir, .out = out,
        .cpu_only = 1,
    };
    char *output = NULL;
    struct ddpc_diag d;
    diag_init(&d);
    int rc = cc_build(&o, &output, &d);
    ck_assert_msg(rc == 0, "cc_build: %s\n%s", d.n ? d.v[0].message : "?",
                  output ? output : "");
    ck_assert(exists(out));
    char *tmp;
    ck_assert_int_ge(asprintf(&tmp, "%s.tmp.%ld", out, (long)getpid()), 0);
    ck_assert(!exists(tmp));
    ck_assert_msg(!exists(marker), "a value ran: %s exists", marker);
    free(tmp);
    free(output);
    diag_free(&d);
    free(out);
    fixture_free(&fx);
}
END_TEST


/* ---- ddpc itself: YAML in, program out ---- */

static char *ddpc_bin(void)
{
    char *p;
    ck_assert_int_ge(asprintf(&p, "%s/bin/ddpc", test_build()), 0);
    return p;
}

static const char hostile_yaml[] =
    "version: 1\n"
    "name: hostile\n"
    "devices: 1\n"
    "accelerator: cpu\n"
    "epochs: 1\n"
    "batch_size: 8\n"
    "learning_rate: 0.01\n"
    "model: {type: mlp, layers: [4, 3], activation: relu}\n"
    "optimizer: {type: sgd}\n"
    "checkpoint_dir: \"ck'\\\"\\\\ $(touch MARK) `touch MARK` m4_syscmd(touch MARK) */ # ?\?/ $1 \xc2\xab\xc2\xbb\"\n"
    "logging: {metrics_csv: \"m4_esyscmd(touch MARK)DDPC_JOB_NAME.csv\"}\n"
    "data:\n"
    "  train: {format: synthetic, samples: 64, features: 4, classes: 3, seed: 1}\n";

/* hostile_yaml with MARK replaced by the marker path */
static char *hostile_spec(void)
{
    struct ddpc_buf b;
    buf_init(&b);
    for (const char *c = hostile_yaml; *c; c++) {
        if (strncmp(c, "MARK", 4) == 0) {
            buf_puts(&b, marker);
            c += 3;
        } else {
            buf_add(&b, c, 1);
        }
    }
    return buf_take(&b);
}

START_TEST(cli_build_hostile_yaml)
{
    char *ddpc = ddpc_bin(), *lib;
    ck_assert_int_ge(asprintf(&lib, "%s/lib/libddprt.a", test_build()), 0);
    if (!exists(ddpc) || !exists(lib)) {
        test_skip("cli_build_hostile_yaml", "ddpc or libddprt.a not built");
        free(ddpc);
        free(lib);
        return;
    }
    struct fixture fx;
    fixture_init(&fx, 0);
    char *spec, *out, *emit, *text = hostile_spec();
    ck_assert_ptr_nonnull(text);
    ck_assert_int_ge(asprintf(&spec, "%s/h.yaml", fx.dir), 0);
    ck_assert_int_ge(asprintf(&out, "%s/hostile", fx.dir), 0);
    ck_assert_int_ge(asprintf(&emit, "%s/gen", fx.dir), 0);
    ck_assert_int_eq(write_file(spec, text, strlen(text)), 0);

    char *argv[] = { ddpc, "build", spec, "-o", out, "--emit-dir", emit, "--cpu-only", NULL };
    struct run_result r;
    ck_assert_int_eq(run_capture(argv, NULL, NULL, 60, &r), 0);
    ck_assert_msg(r.exited && r.code == 0, "ddpc build: %d\n%s%s", r.code, r.out, r.err);
    run_result_free(&r);
    ck_assert(exists(out));
    ck_assert_msg(!exists(marker), "a value ran: %s exists", marker);

    /* the baked checkpoint_dir is the YAML string exactly */
    const char *v = strstr(text, "checkpoint_dir: \"") + strlen("checkpoint_dir: \"");
    const char *want_raw = "ck'\"\\ $(touch ";
    ck_assert_int_eq(strncmp(v, "ck'\\\"\\\\ $(touch ", 15), 0);
    char *got = run_baked(emit);
    struct ddpc_buf want;
    buf_init(&want);
    buf_puts(&want, "checkpoint_dir=");
    struct ddpc_buf dir;
    buf_init(&dir);
    buf_printf(&dir, "%s%s) `touch %s` m4_syscmd(touch %s) */ # ?\?/ $1 \xc2\xab\xc2\xbb",
               want_raw, marker, marker, marker);
    for (size_t i = 0; i < dir.len; i++)
        buf_printf(&want, "%02x", (unsigned char)dir.s[i]);
    buf_puts(&want, "\n");
    ck_assert_msg(strstr(got, want.s), "checkpoint_dir not baked exactly:\n%s", got);
    ck_assert_msg(!exists(marker), "a value ran: %s exists", marker);

    buf_free(&want);
    buf_free(&dir);
    free(got);
    free(text);
    free(spec);
    free(out);
    free(emit);
    free(lib);
    free(ddpc);
    fixture_free(&fx);
}
END_TEST

START_TEST(cli_exit_statuses)
{
    char *ddpc = ddpc_bin();
    if (!exists(ddpc)) {
        test_skip("cli_exit_statuses", "ddpc not built");
        free(ddpc);
        return;
    }
    struct fixture fx;
    fixture_init(&fx, 0);
    char *bad, *out, *missing;
    ck_assert_int_ge(asprintf(&bad, "%s/bad.yaml", fx.dir), 0);
    ck_assert_int_ge(asprintf(&out, "%s/bad", fx.dir), 0);
    ck_assert_int_ge(asprintf(&missing, "%s/missing.yaml", fx.dir), 0);
    const char text[] = "version: 1\nname: bad\nepochs: -1\n";
    ck_assert_int_eq(write_file(bad, text, sizeof text - 1), 0);

    struct { char *argv[6]; int code; } cases[] = {
        { { ddpc, "build", bad, "-o", out, NULL }, 1 },
        { { ddpc, "plan", bad, NULL }, 1 },
        { { ddpc, "build", missing, "-o", out, NULL }, 2 },
        { { ddpc, "build", NULL }, 2 },
        { { ddpc, "build", bad, "--frobnicate", NULL }, 2 },
        { { ddpc, "plan", bad, bad, NULL }, 2 },
        { { ddpc, "nonsense", NULL }, 2 },
        { { ddpc, "--version", NULL }, 0 },
        { { ddpc, "--help", NULL }, 0 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct run_result r;
        ck_assert_int_eq(run_capture(cases[i].argv, NULL, NULL, 30, &r), 0);
        ck_assert_msg(r.exited && r.code == cases[i].code, "case %zu (%s %s): exit %d, want %d\n%s",
                      i, cases[i].argv[1], cases[i].argv[2] ? cases[i].argv[2] : "", r.code,
                      cases[i].code, r.err);
        run_result_free(&r);
    }
    ck_assert(!exists(out));
    free(bad);
    free(out);
    free(missing);
    free(ddpc);
    fixture_free(&fx);
}
END_TEST

/* Issue 12: `ddpc build x` of a spec file named x (the job's name) wrote
 * the program over the spec. The output must be a place for a program:
 * never the spec, never an existing non-program, in a directory that
 * exists. A rebuild over its own program is fine. */
static const char small_yaml[] =
    "version: 1\nname: x\ndevices: 1\naccelerator: cpu\nepochs: 1\nbatch_size: 8\n"
    "model: {type: mlp, layers: [4, 8, 2]}\n"
    "data:\n  train: {format: synthetic, samples: 64, features: 4, classes: 2}\n";

START_TEST(build_never_overwrites_the_spec_or_a_non_program)
{
    char *ddpc = ddpc_bin(), *lib;
    ck_assert_int_ge(asprintf(&lib, "%s/lib/libddprt.a", test_build()), 0);
    if (!exists(ddpc) || !exists(lib)) {
        test_skip("build_never_overwrites", "ddpc or libddprt.a not built");
        free(ddpc);
        free(lib);
        return;
    }
    struct fixture fx;
    fixture_init(&fx, 0);
    char *x, *yaml, *notes, *prog;
    ck_assert_int_ge(asprintf(&x, "%s/x", fx.dir), 0);
    ck_assert_int_ge(asprintf(&yaml, "%s/x.yaml", fx.dir), 0);
    ck_assert_int_ge(asprintf(&notes, "%s/notes.txt", fx.dir), 0);
    ck_assert_int_ge(asprintf(&prog, "%s/prog", fx.dir), 0);
    ck_assert_int_eq(write_file(x, small_yaml, sizeof small_yaml - 1), 0);
    ck_assert_int_eq(write_file(yaml, small_yaml, sizeof small_yaml - 1), 0);
    ck_assert_int_eq(write_file(notes, "keep me\n", 8), 0);
    struct {
        char *argv[6];
        const char *cwd, *file, *want;
    } cases[] = {
        /* default output: the job's name, which is the spec file */
        { { ddpc, "build", "x", NULL }, fx.dir, x, "is the spec file itself" },
        { { ddpc, "build", yaml, "-o", yaml, NULL }, NULL, yaml, "is the spec file itself" },
        { { ddpc, "build", yaml, "-o", notes, NULL }, NULL, notes, "not executable" },
        { { ddpc, "build", yaml, "-o", fx.dir, NULL }, NULL, NULL, "names a directory" },
        { { ddpc, "build", yaml, "-o", "/nonexistent/dir/job", NULL }, NULL, NULL,
          "directory /nonexistent/dir does not exist" },
        /* '-' is standard output to most tools; it wrote a program named '-' */
        { { ddpc, "build", yaml, "-o", "-", NULL }, fx.dir, NULL,
          "cannot be written to standard output" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t before_n = 0, after_n = 0;
        char *before = cases[i].file ? slurp(cases[i].file, &before_n) : NULL;
        struct run_result r;
        ck_assert_int_eq(run_capture(cases[i].argv, cases[i].cwd, NULL, 60, &r), 0);
        ck_assert_msg(r.exited && r.code == 2 && strstr(r.err, cases[i].want),
                      "case %zu: exit %d, want 2 and '%s':\n%s", i, r.code, cases[i].want, r.err);
        printf("emit: refused: %s", r.err);
        run_result_free(&r);
        if (before) {
            char *after = slurp(cases[i].file, &after_n);
            ck_assert_msg(before_n == after_n && memcmp(before, after, before_n) == 0,
                          "case %zu: %s changed", i, cases[i].file);
            free(after);
            free(before);
        }
    }
    /* a read-only directory: named as such, exit 2; it was reported as a
     * compile failure (exit 3, ld's "cannot open output file") */
    char *ro = NULL, *ro_out = NULL;
    ck_assert_int_ge(asprintf(&ro, "%s/ro", fx.dir), 0);
    ck_assert_int_ge(asprintf(&ro_out, "%s/ro/job", fx.dir), 0);
    ck_assert_int_eq(mkdir(ro, 0755), 0);
    /* in a mount namespace of this test's own: the mount goes with it */
    if (unshare(CLONE_NEWNS) != 0 || mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount("ddpc-ro", ro, "tmpfs", MS_RDONLY, "size=64k") != 0) {
        test_skip("build into a read-only directory", "mount tmpfs: %s", strerror(errno));
    } else {
        char *rargv[] = { ddpc, "build", yaml, "-o", ro_out, NULL };
        struct run_result rr;
        ck_assert_int_eq(run_capture(rargv, NULL, NULL, 60, &rr), 0);
        (void)umount(ro);
        ck_assert_msg(rr.exited && rr.code == 2 &&
                      strstr(rr.err, "cannot write the program into") &&
                      strstr(rr.err, strerror(EROFS)), "exit %d:\n%s", rr.code, rr.err);
        run_result_free(&rr);
    }
    free(ro);
    free(ro_out);
    char *dash;
    ck_assert_int_ge(asprintf(&dash, "%s/-", fx.dir), 0);
    ck_assert_msg(!exists(dash), "-o - wrote a file named '-'");
    free(dash);
    /* an executable that is not a program (a script) is refused too; the
     * program of an earlier build is rebuilt in place */
    ck_assert_int_eq(chmod(notes, 0755), 0);
    char *argv[] = { ddpc, "build", yaml, "-o", notes, "--cpu-only", NULL };
    struct run_result r;
    ck_assert_int_eq(run_capture(argv, NULL, NULL, 60, &r), 0);
    ck_assert_msg(r.exited && r.code == 2 && strstr(r.err, "not an ELF executable"), "%s", r.err);
    run_result_free(&r);
    argv[4] = prog;
    for (int k = 0; k < 2; k++) {
        ck_assert_int_eq(run_capture(argv, NULL, NULL, 120, &r), 0);
        ck_assert_msg(r.exited && r.code == 0, "build %d: %d\n%s", k, r.code, r.err);
        run_result_free(&r);
    }
    ck_assert(exists(prog));
    free(x);
    free(yaml);
    free(notes);
    free(prog);
    free(lib);
    free(ddpc);
    fixture_free(&fx);
}
END_TEST

/* Issue 12: SIGTERM to ddpc alone (the compiler keeps running unless ddpc
 * stops it) and Ctrl-C to the process group, while the C compiler runs:
 * no temp directory, no OUT.tmp.PID, no OUT, no compiler left running. */
START_TEST(interrupted_build_leaves_nothing)
{
    char *ddpc = ddpc_bin(), *lib;
    ck_assert_int_ge(asprintf(&lib, "%s/lib/libddprt.a", test_build()), 0);
    if (!exists(ddpc) || !exists(lib)) {
        test_skip("interrupted_build_leaves_nothing", "ddpc or libddprt.a not built");
        free(ddpc);
        free(lib);
        return;
    }
    adopt_orphans();
    struct fixture fx;
    fixture_init(&fx, 0);
    char *yaml, *out, *tmpdir, *envtmp;
    ck_assert_int_ge(asprintf(&yaml, "%s/x.yaml", fx.dir), 0);
    ck_assert_int_ge(asprintf(&out, "%s/prog", fx.dir), 0);
    ck_assert_int_ge(asprintf(&tmpdir, "%s/tmp", fx.dir), 0);
    ck_assert_int_eq(mkdir(tmpdir, 0755), 0);
    ck_assert_int_ge(asprintf(&envtmp, "TMPDIR=%s", tmpdir), 0);
    ck_assert_int_eq(write_file(yaml, small_yaml, sizeof small_yaml - 1), 0);
    char *env[] = { envtmp, NULL };
    int sigs[2] = { SIGTERM, SIGINT };
    for (int k = 0; k < 2; k++) {
        char *argv[] = { ddpc, "build", yaml, "-o", out, "--cpu-only", NULL };
        struct run_proc p;
        ck_assert_int_eq(run_start(argv, NULL, env, &p), 0);
        /* the compiler runs once the generated header is in place */
        pid_t child = 0;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (;;) {
            pid_t kids[4];
            int n = child_pids(p.pid, kids, 4);
            DIR *d = opendir(tmpdir);
            ck_assert_ptr_nonnull(d);
            struct dirent *de;
            int generated = 0;
            char gen[512] = "";
            while ((de = readdir(d)) != NULL)
                if (de->d_name[0] != '.') {
                    char path[1024];
                    snprintf(path, sizeof path, "%s/%s/job.plan.json", tmpdir, de->d_name);
                    int g = exists(path);
                    snprintf(path, sizeof path, "%s/%s/job_config.h", tmpdir, de->d_name);
                    generated |= g && exists(path);
                    snprintf(gen, sizeof gen, "%s", de->d_name);
                }
            closedir(d);
            if (n >= 1 && generated) {
                child = kids[0];
                break;
            }
            clock_gettime(CLOCK_MONOTONIC, &t1);
            ck_assert_msg(t1.tv_sec - t0.tv_sec < 60, "the compiler never started (%s)", gen);
            usleep(1000);
        }
        ck_assert_int_eq(kill(k == 0 ? p.pid : -p.pid, sigs[k]), 0);
        struct run_result r;
        ck_assert_int_eq(run_finish(&p, 60, &r), 0);
        ck_assert_msg(!r.exited && r.code == sigs[k], "ddpc: exited %d code %d\n%s", r.exited,
                      r.code, r.err);
        run_result_free(&r);
        ck_assert_int_eq(wait_gone(&child, 1, 5.0), 0);
        DIR *d = opendir(tmpdir);
        ck_assert_ptr_nonnull(d);
        struct dirent *de;
        while ((de = readdir(d)) != NULL)
            ck_assert_msg(de->d_name[0] == '.', "left in TMPDIR: %s", de->d_name);
        closedir(d);
        d = opendir(fx.dir);
        ck_assert_ptr_nonnull(d);
        while ((de = readdir(d)) != NULL)
            ck_assert_msg(strncmp(de->d_name, "prog", 4) != 0, "left: %s", de->d_name);
        closedir(d);
    }
    ck_assert_int_eq(leftover_children(1.0), 0);
    free(yaml);
    free(out);
    free(tmpdir);
    free(envtmp);
    free(lib);
    free(ddpc);
    fixture_free(&fx);
}
END_TEST

/* job.sbatch goes beside the program only once the program is built: an
 * interrupted rebuild of a changed spec left the new script (a new
 * partition, node count, time limit) beside the old program. */
START_TEST(interrupted_rebuild_keeps_the_old_sbatch)
{
    char *ddpc = ddpc_bin(), *lib;
    ck_assert_int_ge(asprintf(&lib, "%s/lib/libddprt.a", test_build()), 0);
    if (!exists(ddpc) || !exists(lib)) {
        test_skip("interrupted_rebuild_keeps_the_old_sbatch", "ddpc or libddprt.a not built");
        free(ddpc);
        free(lib);
        return;
    }
    adopt_orphans();
    struct fixture fx;
    fixture_init(&fx, 0);
    char *yaml, *out, *sbatch, *text;
    ck_assert_int_ge(asprintf(&yaml, "%s/x.yaml", fx.dir), 0);
    ck_assert_int_ge(asprintf(&out, "%s/prog", fx.dir), 0);
    ck_assert_int_ge(asprintf(&sbatch, "%s/prog.sbatch", fx.dir), 0);
    const char *parts[2] = { "old", "new" };
    for (int k = 0; k < 2; k++) {
        ck_assert_int_ge(asprintf(&text, "%slaunch: {num_nodes: 2, launcher: slurm, "
                                  "partition: %s}\n", small_yaml, parts[k]), 0);
        ck_assert_int_eq(write_file(yaml, text, strlen(text)), 0);
        free(text);
        char *argv[] = { ddpc, "build", "-v", yaml, "-o", out, "--cpu-only", NULL };
        if (k == 0) {
            struct run_result r;
            ck_assert_int_eq(run_capture(argv, NULL, NULL, 120, &r), 0);
            ck_assert_msg(r.exited && r.code == 0, "build: %d\n%s", r.code, r.err);
            run_result_free(&r);
            continue;
        }
        /* the rebuild is stopped while it compiles, after generating */
        struct run_proc p;
        ck_assert_int_eq(run_start(argv, NULL, NULL, &p), 0);
        ck_assert_int_eq(run_wait_output(&p, "ddpc: generated", 60), 1);
        ck_assert_int_eq(kill(p.pid, SIGTERM), 0);
        struct run_result r;
        ck_assert_int_eq(run_finish(&p, 60, &r), 0);
        ck_assert_msg(!r.exited && r.code == SIGTERM, "ddpc: exited %d code %d\n%s", r.exited,
                      r.code, r.err);
        run_result_free(&r);
    }
    text = read_whole(sbatch, NULL);
    ck_assert_ptr_nonnull(text);
    ck_assert_msg(strstr(text, "#SBATCH --partition=old\n") != NULL, "%s", text);
    free(text);
    DIR *d = opendir(fx.dir);
    ck_assert_ptr_nonnull(d);
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        ck_assert_msg(strstr(de->d_name, ".tmp.") == NULL, "left: %s", de->d_name);
    closedir(d);
    ck_assert_int_eq(leftover_children(1.0), 0);
    free(yaml);
    free(out);
    free(sbatch);
    free(lib);
    free(ddpc);
    fixture_free(&fx);
}
END_TEST

START_TEST(cc_failure_hints)
{
    ck_assert_ptr_null(cc_failure_hint(NULL));
    ck_assert_ptr_null(cc_failure_hint("job.c:1:1: error: something else"));
    const char *h = cc_failure_hint("/usr/bin/ld: cannot find -lopenblas: No such file");
    ck_assert_ptr_nonnull(h);
    ck_assert_ptr_nonnull(strstr(h, "libopenblas-dev"));
    h = cc_failure_hint("/usr/bin/ld: cannot find -lz: No such file or directory");
    ck_assert_ptr_nonnull(h);
    ck_assert_ptr_nonnull(strstr(h, "zlib1g-dev"));
    h = cc_failure_hint("job.c:(.text+0x1): undefined reference to `ddprt_main'");
    ck_assert_ptr_nonnull(h);
    ck_assert_ptr_nonnull(strstr(h, "make install"));
}
END_TEST

/* ---- make install: an installed ddpc works from any directory ---- */

/* A spec with a warning (two devices, no lr_scaling): the build's own error
 * must still be printed after it. */
static const char install_yaml[] =
    "version: 1\n"
    "name: installed\n"
    "devices: 2\n"
    "accelerator: cpu\n"
    "epochs: 1\n"
    "batch_size: 16\n"
    "learning_rate: 0.01\n"
    "model: {type: mlp, layers: [4, 8, 3], activation: relu}\n"
    "optimizer: {type: sgd}\n"
    "data:\n"
    "  train: {format: synthetic, samples: 128, features: 4, classes: 3, seed: 1}\n";

static void assert_same_file(const char *a, const char *b)
{
    size_t na, nb;
    char *x = slurp(a, &na), *y = slurp(b, &nb);
    ck_assert_msg(na == nb && memcmp(x, y, na) == 0, "%s differs from %s", a, b);
    free(x);
    free(y);
}

/* The pids (at most 8) whose lines in an LD_DEBUG=files log mention
 * needle; the log's lines start "<spaces>PID:". Returns how many. */
static int ld_debug_pids(const char *log, const char *needle, long pids[8])
{
    int n = 0;
    for (const char *l = log; l && *l;) {
        const char *nl = strchr(l, '\n');
        size_t len = nl ? (size_t)(nl - l) : strlen(l);
        const char *hit = strstr(l, needle);
        if (hit && hit < l + len) {
            long pid = strtol(l, NULL, 10);
            int seen = 0;
            for (int i = 0; i < n; i++)
                seen |= pids[i] == pid;
            if (!seen && n < 8)
                pids[n++] = pid;
        }
        l = nl ? nl + 1 : NULL;
    }
    return n;
}

/* An installed ddpc with the CUDA plugin: a job built from an `accelerator:
 * auto` spec links no CUDA library; on this machine (no GPU) it runs as CPU
 * workers with the one-line notice, and only the forked probe child may map
 * the plugin and CUDA, never the launcher or a worker (LD_DEBUG=files logs
 * every object each process loads, dlopen included, under its pid). A
 * missing plugin: auto falls back to CPU; gpu stops with a clear error. */
static void installed_cuda_plugin(const char *prefix, const char *idpc, const char *work)
{
    char *so, *so_away, *spec, *gspec, *job, *log_base, *log_env, *log = NULL;
    ck_assert_int_ge(asprintf(&so, "%s/lib/ddpc/libddprt_cuda.so", prefix), 0);
    if (!exists(so) || !exists("/usr/local/cuda") || access("/dev/nvidia0", F_OK) == 0) {
        test_skip("installed_cuda_plugin", "no CUDA plugin installed, or a GPU is "
                "here (the test expects the CPU fallback)");
        free(so);
        return;
    }
    ck_assert_int_ge(asprintf(&so_away, "%s.away", so), 0);
    ck_assert_int_ge(asprintf(&spec, "%s/auto.yaml", work), 0);
    ck_assert_int_ge(asprintf(&gspec, "%s/gpu1.yaml", work), 0);
    ck_assert_int_ge(asprintf(&job, "%s/auto_job", work), 0);
    ck_assert_int_ge(asprintf(&log_base, "%s/ld", work), 0);
    ck_assert_int_ge(asprintf(&log_env, "LD_DEBUG_OUTPUT=%s", log_base), 0);
    static const char auto_yaml[] =
        "version: 1\nname: auto\ndevices: 2\naccelerator: auto\nepochs: 1\nbatch_size: 16\n"
        "learning_rate: 0.01\nlr_scaling: none\nmodel: {type: mlp, layers: [4, 8, 3]}\n"
        "optimizer: {type: sgd}\n"
        "data:\n  train: {format: synthetic, samples: 128, features: 4, classes: 3, seed: 1}\n";
    static const char gpu_yaml[] =
        "version: 1\nname: g\ndevices: 1\naccelerator: gpu\nepochs: 1\nbatch_size: 8\n"
        "learning_rate: 0.01\nmodel: {type: mlp, layers: [4, 3]}\noptimizer: {type: sgd}\n"
        "data:\n  train: {format: synthetic, samples: 16, features: 4, classes: 3}\n";
    ck_assert_int_eq(write_file(spec, auto_yaml, sizeof auto_yaml - 1), 0);
    ck_assert_int_eq(write_file(gspec, gpu_yaml, sizeof gpu_yaml - 1), 0);
    struct run_result r;
    char *bld[] = { (char *)idpc, "build", "auto.yaml", "-o", "auto_job", NULL };
    ck_assert_int_eq(run_capture(bld, work, NULL, 60, &r), 0);
    ck_assert_msg(r.exited && r.code == 0, "build auto: %d\n%s", r.code, r.err);
    run_result_free(&r);

    /* the binary's own dependencies: no CUDA library */
    char *trace_env[] = { "LD_TRACE_LOADED_OBJECTS=1", NULL };
    char *jv[] = { job, NULL };
    ck_assert_int_eq(run_capture(jv, work, trace_env, 30, &r), 0);
    ck_assert_msg(r.exited && r.code == 0 && strstr(r.out, "libc.so"), "ldd: %s%s", r.out, r.err);
    ck_assert_msg(!strstr(r.out, "libcudart") && !strstr(r.out, "libcublas") &&
                  !strstr(r.out, "libnccl") && !strstr(r.out, "libddprt_cuda"),
                  "the auto job links CUDA:\n%s", r.out);
    run_result_free(&r);

    /* a real run: CPU workers, the notice, CUDA only in the probe child */
    char *dbg_env[] = { "LD_DEBUG=files", log_env, NULL };
    ck_assert_int_eq(run_capture(jv, work, dbg_env, 60, &r), 0);
    ck_assert_msg(r.exited && r.code == 0 && strstr(r.out, "done epochs=1") &&
                  strstr(r.err, "accelerator auto: no GPU found, running 2 CPU worker"),
                  "auto job: %d\n%s%s", r.code, r.out, r.err);
    run_result_free(&r);
    DIR *dir = opendir(work);
    ck_assert_ptr_nonnull(dir);
    long launcher = 0;
    for (struct dirent *de; (de = readdir(dir));)
        if (!strncmp(de->d_name, "ld.", 3)) {
            char *f;
            ck_assert_int_ge(asprintf(&f, "%s/%s", work, de->d_name), 0);
            ck_assert_ptr_null(log);   /* forks inherit the launcher's log */
            size_t n;
            log = slurp(f, &n);
            launcher = strtol(de->d_name + 3, NULL, 10);
            unlink(f);
            free(f);
        }
    closedir(dir);
    ck_assert_msg(log && launcher > 0, "no LD_DEBUG log under %s", work);
    /* "file=X" is where a process maps X (as needed or by dlopen). Without
     * a driver (no libcuda.so.1) no process loads the plugin; with one,
     * only the probe child (not the launcher, not a worker) may. */
    long plug[8], other[8];
    int np = ld_debug_pids(log, "libddprt_cuda.so [0];  dynamically loaded", plug);
    ck_assert_msg(np <= 1 && (np == 0 || plug[0] != launcher), "the plugin was loaded by %d "
                  "pid(s) (first %ld; launcher %ld)", np, np ? plug[0] : 0L, launcher);
    static const char *const libs[] = { "file=libcudart", "file=libcublas", "file=libnccl" };
    for (size_t i = 0; i < sizeof libs / sizeof libs[0]; i++) {
        int no = ld_debug_pids(log, libs[i], other);
        ck_assert_msg(no == 0 || (np == 1 && no == 1 && other[0] == plug[0]),
                      "%s: %d pid(s), first %ld; only the probe child may load it "
                      "(launcher %ld)", libs[i], no, no ? other[0] : 0L, launcher);
    }
    ck_assert_ptr_nonnull(strstr(log, "libc.so.6"));   /* the log is a real one */
    free(log);

    /* the plugin gone: auto runs on CPU; gpu stops, clearly */
    ck_assert_int_eq(rename(so, so_away), 0);
    ck_assert_int_eq(run_capture(jv, work, NULL, 60, &r), 0);
    ck_assert_msg(r.exited && r.code == 0 && strstr(r.out, "done epochs=1") &&
                  strstr(r.err, "no GPU found"),
                  "auto, no plugin: %d\n%s%s", r.code, r.out, r.err);
    run_result_free(&r);
    ck_assert_int_eq(rename(so_away, so), 0);
    char *bldg[] = { (char *)idpc, "build", "gpu1.yaml", "-o", "gpu_job", NULL };
    ck_assert_int_eq(run_capture(bldg, work, NULL, 60, &r), 0);
    ck_assert_msg(r.exited && r.code == 0, "build gpu: %d\n%s", r.code, r.err);
    run_result_free(&r);
    ck_assert_int_eq(rename(so, so_away), 0);
    char *gv[] = { "./gpu_job", NULL };
    ck_assert_int_eq(run_capture(gv, work, NULL, 60, &r), 0);
    ck_assert_msg(r.exited && r.code != 0 && strstr(r.err, "CUDA backend") &&
                  strstr(r.err, so) && strstr(r.err, "could not be loaded") &&
                  strstr(r.err, "--cpu-only"), "gpu, no plugin: %d\n%s", r.code, r.err);
    run_result_free(&r);
    ck_assert_int_eq(rename(so_away, so), 0);

    free(so);
    free(so_away);
    free(spec);
    free(gspec);
    free(job);
    free(log_base);
    free(log_env);
}

START_TEST(installed_ddpc_works_anywhere)
{
    char *ddpc = ddpc_bin(), *lib;
    ck_assert_int_ge(asprintf(&lib, "%s/lib/libddprt.a", test_build()), 0);
    if (!exists(ddpc) || !exists(lib)) {
        test_skip("installed_ddpc_works_anywhere", "ddpc or libddprt.a not built");
        free(ddpc);
        free(lib);
        return;
    }
    char *root = make_temp_dir("install");
    ck_assert_ptr_nonnull(root);
    char *prefix, *work, *pathdir, *cuda_lib, *a_prefix, *a_b;
    ck_assert_int_ge(asprintf(&prefix, "%s/prefix", root), 0);
    ck_assert_int_ge(asprintf(&work, "%s/elsewhere", root), 0);
    ck_assert_int_ge(asprintf(&pathdir, "%s/m4-only", root), 0);
    ck_assert_int_ge(asprintf(&cuda_lib, "%s/lib/ddpc/libddprt_cuda.so", test_build()), 0);
    ck_assert_int_ge(asprintf(&a_prefix, "PREFIX=%s", prefix), 0);
    ck_assert_int_ge(asprintf(&a_b, "B=%s", test_build()), 0);
    ck_assert_int_eq(mkdir(work, 0755), 0);

    /* the real install recipe; -o all: the suite's own make built
     * everything, and nothing may be rebuilt under a running test. NVCC=
     * when this build tree has no CUDA library (make sanitize). */
    char *mk[] = { "make", "-s", "-C", (char *)test_top(), "-o", "all", "install", a_prefix, a_b,
                   exists(cuda_lib) ? NULL : "NVCC=", NULL };
    char *clean_env[] = { "MAKEFLAGS=", "MFLAGS=", NULL };
    struct run_result r;
    if (run_capture(mk, NULL, clean_env, 60, &r) != 0) {
        test_skip("installed_ddpc_works_anywhere", "cannot run make");
        goto out;
    }
    ck_assert_msg(r.exited && r.code == 0, "make install: %d\n%s%s", r.code, r.out, r.err);
    run_result_free(&r);
    static const char *const installed[] = {
        "bin/ddpc", "lib/libddprt.a", "include/ddpc/ddprt.h", "include/ddpc/job.h",
        "share/ddpc/job.c", "share/ddpc/templates/job_config.h.m4",
        "share/ddpc/ddpc.schema.json", "share/man/man1/ddpc.1",
        "share/ddpc/python/ddpc_torch.py",
    };
    for (size_t i = 0; i < sizeof installed / sizeof installed[0]; i++) {
        char *f;
        ck_assert_int_ge(asprintf(&f, "%s/%s", prefix, installed[i]), 0);
        ck_assert_msg(exists(f), "make install did not install %s", f);
        free(f);
    }
    char *man_src, *man_dst, *schema, *idpc, *spec_path;
    ck_assert_int_ge(asprintf(&man_src, "%s/docs/ddpc.1", test_top()), 0);
    ck_assert_int_ge(asprintf(&man_dst, "%s/share/man/man1/ddpc.1", prefix), 0);
    ck_assert_int_ge(asprintf(&schema, "%s/share/ddpc/ddpc.schema.json", prefix), 0);
    ck_assert_int_ge(asprintf(&idpc, "%s/bin/ddpc", prefix), 0);
    ck_assert_int_ge(asprintf(&spec_path, "%s/job.yaml", work), 0);
    assert_same_file(man_src, man_dst);

    /* the installed schema is what the installed ddpc prints */
    char *sch[] = { idpc, "schema", NULL };
    ck_assert_int_eq(run_capture(sch, work, NULL, 30, &r), 0);
    ck_assert_msg(r.exited && r.code == 0, "ddpc schema: %s", r.err);
    size_t n;
    char *text = slurp(schema, &n);
    ck_assert_msg(strlen(r.out) == n && memcmp(r.out, text, n) == 0,
                  "installed ddpc.schema.json differs from `ddpc schema`");
    ck_assert_ptr_nonnull(strstr(text, "\"$schema\""));
    free(text);
    run_result_free(&r);

    /* build and run from a directory that is neither the tree nor PREFIX,
     * with relative paths */
    ck_assert_int_eq(write_file(spec_path, install_yaml, sizeof install_yaml - 1), 0);
    char *bld[] = { idpc, "build", "job.yaml", "-o", "job", NULL };
    ck_assert_int_eq(run_capture(bld, work, NULL, 60, &r), 0);
    ck_assert_msg(r.exited && r.code == 0, "installed ddpc build: %d\n%s", r.code, r.err);
    run_result_free(&r);
    char *job[] = { "./job", NULL };
    ck_assert_int_eq(run_capture(job, work, NULL, 60, &r), 0);
    ck_assert_msg(r.exited && r.code == 0 && strstr(r.out, "done epochs=1"),
                  "./job: %d\n%s%s", r.code, r.out, r.err);
    run_result_free(&r);

    /* no C compiler on PATH (m4 still there): says so first, exit 3 */
    ck_assert_int_eq(mkdir(pathdir, 0755), 0);
    const char *m4 = exists("/usr/bin/m4") ? "/usr/bin/m4" : "/bin/m4";
    char *m4_link, *env_path;
    ck_assert_int_ge(asprintf(&m4_link, "%s/m4", pathdir), 0);
    ck_assert_int_ge(asprintf(&env_path, "PATH=%s", pathdir), 0);
    ck_assert_int_eq(symlink(m4, m4_link), 0);
    char *nocc_env[] = { env_path, NULL };
    char *bld2[] = { idpc, "build", "job.yaml", "-o", "job2", NULL };
    ck_assert_int_eq(run_capture(bld2, work, nocc_env, 60, &r), 0);
    ck_assert_msg(r.exited && r.code == 3, "no cc: exit %d\n%s", r.code, r.err);
    ck_assert_msg(strstr(r.err, "warning: learning_rate"), "%s", r.err);
    ck_assert_msg(strstr(r.err, "error: cannot run the C compiler") &&
                  strstr(r.err, "install one"), "no cc, no clear message:\n%s", r.err);
    run_result_free(&r);

    /* the runtime library missing under PREFIX/lib: names it and make install */
    char *rt, *rt_away;
    ck_assert_int_ge(asprintf(&rt, "%s/lib/libddprt.a", prefix), 0);
    ck_assert_int_ge(asprintf(&rt_away, "%s/lib/libddprt.a.away", prefix), 0);
    ck_assert_int_eq(rename(rt, rt_away), 0);
    ck_assert_int_eq(run_capture(bld2, work, NULL, 60, &r), 0);
    ck_assert_msg(r.exited && r.code == 3, "no runtime: exit %d\n%s", r.code, r.err);
    ck_assert_msg(strstr(r.err, "libddprt.a not found at") && strstr(r.err, rt) &&
                  strstr(r.err, "make install"), "no runtime, no clear message:\n%s", r.err);
    run_result_free(&r);
    ck_assert_int_eq(rename(rt_away, rt), 0);

    installed_cuda_plugin(prefix, idpc, work);

    /* a ddpc built with CUDA whose libddprt_cuda.so is gone: a GPU job says so */
    char *cu, *cu_away;
    ck_assert_int_ge(asprintf(&cu, "%s/lib/ddpc/libddprt_cuda.so", prefix), 0);
    ck_assert_int_ge(asprintf(&cu_away, "%s/lib/ddpc/libddprt_cuda.so.away", prefix), 0);
    if (exists(cu)) {
        static const char gpu_yaml[] =
            "version: 1\nname: g\ndevices: 1\naccelerator: gpu\nepochs: 1\nbatch_size: 8\n"
            "learning_rate: 0.01\nmodel: {type: mlp, layers: [4, 3]}\noptimizer: {type: sgd}\n"
            "data:\n  train: {format: synthetic, samples: 16, features: 4, classes: 3}\n";
        char *gspec;
        ck_assert_int_ge(asprintf(&gspec, "%s/gpu.yaml", work), 0);
        ck_assert_int_eq(write_file(gspec, gpu_yaml, sizeof gpu_yaml - 1), 0);
        ck_assert_int_eq(rename(cu, cu_away), 0);
        char *bld3[] = { idpc, "build", "gpu.yaml", "-o", "job2", NULL };
        ck_assert_int_eq(run_capture(bld3, work, NULL, 60, &r), 0);
        ck_assert_msg(r.exited && r.code == 3 && strstr(r.err, "libddprt_cuda.so not found at") &&
                      strstr(r.err, "make install"), "no CUDA runtime: %d\n%s", r.code, r.err);
        run_result_free(&r);
        free(gspec);
    }
    char *job2;
    ck_assert_int_ge(asprintf(&job2, "%s/job2", work), 0);
    ck_assert(!exists(job2));
    free(cu);
    free(cu_away);

    free(job2);
    free(rt);
    free(rt_away);
    free(m4_link);
    free(env_path);
    free(man_src);
    free(man_dst);
    free(schema);
    free(idpc);
    free(spec_path);
out:
    rm_tree(root);
    free(root);
    free(prefix);
    free(work);
    free(pathdir);
    free(cuda_lib);
    free(a_prefix);
    free(a_b);
    free(ddpc);
    free(lib);
}
END_TEST

Suite *emit_suite(void)
{
    Suite *s = suite_create("emit");
    TCase *tc = tcase_create("emit");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, escapers);
    tcase_add_test(tc, hostile_values_baked_exactly);
    tcase_add_test(tc, nothing_runs_anywhere);
    tcase_add_test(tc, same_job_same_bytes);
    tcase_add_test(tc, plan_json_file_is_plan_json);
    tcase_add_test(tc, sbatch_is_shell_and_quotes_hold);
    tcase_add_test(tc, sbatch_master_from_a_long_node_list);
    tcase_add_test(tc, bad_values_refused);
    tcase_add_test(tc, cc_missing_runtime);
    tcase_add_test(tc, cc_compile_failure_reported);
    tcase_add_test(tc, cc_builds_a_job);
    tcase_add_test(tc, cli_build_hostile_yaml);
    tcase_add_test(tc, cli_exit_statuses);
    tcase_add_test(tc, build_never_overwrites_the_spec_or_a_non_program);
    tcase_add_test(tc, interrupted_build_leaves_nothing);
    tcase_add_test(tc, interrupted_rebuild_keeps_the_old_sbatch);
    tcase_add_test(tc, cc_failure_hints);
    tcase_add_test(tc, installed_ddpc_works_anywhere);
    suite_add_tcase(s, tc);
    return s;
}
