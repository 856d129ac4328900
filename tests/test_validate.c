/* test_validate.c - spec/validate.c and keys.def: defaults, value forms,
 * exact diagnostics for each kind of mistake, cross-key rules, and the key
 * table's own consistency. */
#include <fcntl.h>
#include <math.h>
#include <sched.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "load.h"
#include "spec.h"
#include "suites.h"
#include "testutil.h"
#include "validate.h"

struct checked {
    struct ddpc_arena a;
    struct ddpc_node *root;
    struct ddpc_diag d;
    struct ddpc_job job;
    char *text;
    int rc;
};

/* Loads and validates yaml as if it were the file `file`; data headers are
 * not read unless the test asks. */
static void check_as(struct checked *c, const char *file, const char *yaml, int read_data)
{
    struct spec_options opt = { .read_data_headers = read_data };
    memset(c, 0, sizeof *c);
    diag_init(&c->d);
    c->rc = load_yaml(file, yaml, strlen(yaml), &c->a, &c->root, &c->d);
    if (c->rc == 0)
        c->rc = validate_job(file, c->root, &opt, &c->a, &c->job, &c->d);
    diag_sort(&c->d);
    size_t sz;
    FILE *f = open_memstream(&c->text, &sz);
    ck_assert_ptr_nonnull(f);
    diag_print(&c->d, 0, DDPC_FMT_TEXT, f);
    fclose(f);
}

static void check(struct checked *c, const char *yaml)
{
    check_as(c, "dir/t.yaml", yaml, 0);
}

static void checked_free(struct checked *c)
{
    arena_free(&c->a);
    diag_free(&c->d);
    free(c->text);
}

#define GPT_SPEC "epochs: 1\nbatch_size: 4\nmodel: {type: gpt, vocab_size: 64, block_size: 8, " \
    "n_layer: 1, n_head: 2, n_embd: 16}\n" \
    "data: {train: {format: text, path: t.txt}}\n"
#define MINIMAL "epochs: 1\nbatch_size: 8\nmodel: {layers: [16, 2]}\ndata: {train: {format: synthetic}}\n"

START_TEST(test_defaults_filled)
{
    struct checked c;
    check(&c, MINIMAL);
    ck_assert_str_eq(c.text, "");
    ck_assert_int_eq(c.rc, 0);
    const struct ddpc_job *j = &c.job;
    ck_assert_int_eq(j->version, 1);
    ck_assert_str_eq(j->name, "t");
    ck_assert_int_eq(j->n_devices, 1);
    ck_assert_int_eq(j->devices[0], 0);
    ck_assert_int_eq(j->devices_all, 0);
    ck_assert_int_eq(j->strategy, DDPC_STRATEGY_DDP);
    ck_assert_int_eq(j->accelerator, DDPC_ACCEL_AUTO);
    ck_assert_uint_eq(j->seed, 0);
    ck_assert_int_eq(j->deterministic, 0);
    ck_assert_int_eq(j->epochs, 1);
    ck_assert(j->learning_rate == 0.001);
    ck_assert_int_eq(j->lr_scaling, DDPC_LR_SCALING_NONE);
    ck_assert_int_eq(j->batch_size, 8);
    ck_assert_int_eq(j->grad_accumulation, 1);
    ck_assert_int_eq(j->limit_train_batches, 0);
    ck_assert(j->limit_train_fraction == 1.0);
    ck_assert_int_eq(j->precision, DDPC_PRECISION_FP32);
    ck_assert(j->grad_clip_norm == 0);
    ck_assert(j->bucket_cap_mb == 25);
    ck_assert_ptr_null(j->checkpoint_dir);
    /* nothing waits forever unless asked: 30 minutes, as PyTorch's default */
    ck_assert(j->nccl_timeout_s == 1800 && j->rank_sync_timeout_s == 0);
    ck_assert_int_eq(j->model.type, DDPC_MODEL_MLP);
    ck_assert_int_eq(j->model.n_layers, 2);
    ck_assert_int_eq(j->model.layers[0], 16);
    ck_assert_int_eq(j->model.layers[1], 2);
    ck_assert_int_eq(j->model.activation, DDPC_ACT_RELU);
    ck_assert_int_eq(j->model.init, DDPC_INIT_PYTORCH);
    ck_assert_int_eq(j->loss, DDPC_LOSS_CROSS_ENTROPY);
    ck_assert_int_eq(j->data.train.format, DDPC_DATA_SYNTHETIC);
    ck_assert_int_eq(j->data.train.samples, 1024);
    ck_assert_int_eq(j->data.train.features, 16);
    ck_assert_int_eq(j->data.train.classes, 2);
    ck_assert_int_eq(j->data.has_test, 0);
    ck_assert_int_eq(j->data.shuffle, 1);
    ck_assert_int_eq(j->data.drop_last, 0);
    ck_assert_int_eq(j->optimizer.type, DDPC_OPTIM_ADAM);
    ck_assert(j->optimizer.beta1 == 0.9 && j->optimizer.beta2 == 0.999);
    ck_assert(j->optimizer.eps == 1e-8);
    ck_assert(j->optimizer.weight_decay == 0);
    ck_assert(j->optimizer.momentum == 0);
    ck_assert_int_eq(j->schedule.warmup_steps, 0);
    ck_assert(j->schedule.warmup_start_factor == 0.01);
    ck_assert_int_eq(j->schedule.decay, DDPC_DECAY_CONSTANT);
    ck_assert(j->schedule.gamma == 0.1);
    ck_assert_int_eq(j->checkpoint.every_n_epochs, 1);
    ck_assert_int_eq(j->checkpoint.keep_last, 0);
    ck_assert_int_eq(j->checkpoint.resume, DDPC_RESUME_AUTO);
    ck_assert_ptr_null(j->checkpoint.resume_path);
    ck_assert_ptr_null(j->checkpoint.export_path);
    ck_assert_int_eq(j->logging.every_n_steps, 50);
    ck_assert_ptr_null(j->logging.metrics_csv);
    ck_assert_int_eq(j->logging.progress, DDPC_PROGRESS_AUTO);
    ck_assert_int_eq(j->launch.num_nodes, 1);
    ck_assert_int_eq(j->launch.launcher, DDPC_LAUNCHER_LOCAL);
    ck_assert_str_eq(j->launch.master_addr, "127.0.0.1");
    ck_assert_int_eq(j->launch.master_port, 29500);
    ck_assert_int_eq(j->launch.max_restarts, 0);
    ck_assert_int_eq(ddpc_job_world_size(j, 8), 1);
    checked_free(&c);

    /* adamw's weight decay defaults to 0.01, like torch.optim.AdamW */
    check(&c, MINIMAL "optimizer: {type: adamw}\n");
    ck_assert_str_eq(c.text, "");
    ck_assert(c.job.optimizer.weight_decay == 0.01);
    ck_assert_int_eq(c.job.optimizer.weight_decay_on, DDPC_WD_ON_ALL);
    checked_free(&c);

    /* a gpt decays only its 2-D weights (nanoGPT's groups) unless the spec
     * says otherwise, wherever the optimizer block stands in the file */
    static const struct { const char *yaml; int want; } wd[] = {
        { "optimizer: {type: adamw}\n" GPT_SPEC, DDPC_WD_ON_WEIGHTS },
        { GPT_SPEC "optimizer: {type: adamw}\n", DDPC_WD_ON_WEIGHTS },
        { GPT_SPEC, DDPC_WD_ON_WEIGHTS },
        { "optimizer: {weight_decay_on: all}\n" GPT_SPEC, DDPC_WD_ON_ALL },
        { GPT_SPEC "optimizer: {weight_decay_on: all}\n", DDPC_WD_ON_ALL },
        { MINIMAL "optimizer: {weight_decay_on: weights}\n", DDPC_WD_ON_WEIGHTS },
    };
    for (size_t i = 0; i < sizeof wd / sizeof wd[0]; i++) {
        check(&c, wd[i].yaml);
        ck_assert_msg(strcmp(c.text, "") == 0, "%s", c.text);
        ck_assert_msg((int)c.job.optimizer.weight_decay_on == wd[i].want, "case %zu", i);
        checked_free(&c);
    }
    check(&c, MINIMAL "optimizer: {weight_decay_on: biases}\n");
    ck_assert_msg(strstr(c.text, "weight_decay_on") && strstr(c.text, "weights"), "%s", c.text);
    checked_free(&c);
}
END_TEST

START_TEST(test_devices_forms)
{
    static const struct { const char *v; int n, all, first, last; } forms[] = {
        { "[0, 1]", 2, 0, 0, 1 }, { "[3, 1]", 2, 0, 3, 1 }, { "2", 2, 0, 0, 1 },
        { "\"0,1\"", 2, 0, 0, 1 }, { "\"1,\"", 1, 0, 1, 1 }, { "\"4\"", 4, 0, 0, 3 },
        { "-1", 0, 1, 0, 0 }, { "all", 0, 1, 0, 0 }, { "\"all\"", 0, 1, 0, 0 },
    };
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        char y[512];
        struct checked c;
        snprintf(y, sizeof y, "devices: %s\nlr_scaling: linear\n" MINIMAL, forms[i].v);
        check(&c, y);
        ck_assert_msg(c.rc == 0, "devices: %s: %s", forms[i].v, c.text);
        ck_assert_int_eq(c.job.n_devices, forms[i].n);
        ck_assert_int_eq(c.job.devices_all, forms[i].all);
        if (forms[i].n) {
            ck_assert_int_eq(c.job.devices[0], forms[i].first);
            ck_assert_int_eq(c.job.devices[forms[i].n - 1], forms[i].last);
        }
        checked_free(&c);
    }
    struct checked c;
    check(&c, "devices: all\nlr_scaling: linear\n" MINIMAL);
    ck_assert_int_eq(ddpc_job_world_size(&c.job, 8), 8);
    checked_free(&c);
    check(&c, "devices: [0, 0]\n" MINIMAL);
    ck_assert_str_eq(c.text, "dir/t.yaml:1:14: error: devices[1]: device 0 is listed twice\n");
    checked_free(&c);
}
END_TEST

START_TEST(test_value_forms)
{
    struct checked c;
    check(&c, MINIMAL "precision: 32-true\nnccl_timeout: 1:30:00\nrank_sync_timeout: 90s\n"
          "devices: 2\nlr_scaling: sqrt\nlimit_train_batches: 10\nseed: 0x10\n");
    ck_assert_str_eq(c.text, "");
    ck_assert_int_eq(c.job.precision, DDPC_PRECISION_FP32);
    ck_assert(c.job.nccl_timeout_s == 5400);
    ck_assert(c.job.rank_sync_timeout_s == 90);
    ck_assert_int_eq(c.job.limit_train_batches, 10);
    ck_assert_uint_eq(c.job.seed, 16);
    checked_free(&c);

    /* Lightning's enable_progress_bar: False / True (coming-from.md) */
    check(&c, MINIMAL "logging: {progress: false}\n");
    ck_assert_str_eq(c.text, "");
    ck_assert_int_eq(c.job.logging.progress, DDPC_PROGRESS_OFF);
    checked_free(&c);
    check(&c, MINIMAL "logging: {progress: true}\n");
    ck_assert_str_eq(c.text, "");
    ck_assert_int_eq(c.job.logging.progress, DDPC_PROGRESS_ON);
    checked_free(&c);

    check(&c, MINIMAL "precision: bf16-mixed\nlimit_train_batches: 0.25\n");
    ck_assert_str_eq(c.text, "");
    ck_assert_int_eq(c.job.precision, DDPC_PRECISION_BF16);
    ck_assert_int_eq(c.job.limit_train_batches, 0);
    ck_assert(c.job.limit_train_fraction == 0.25);
    checked_free(&c);

    check(&c, MINIMAL "precision: 16-mixed\nlimit_train_batches: 1.0\n");
    ck_assert_int_eq(c.job.precision, DDPC_PRECISION_FP16);
    ck_assert(c.job.limit_train_fraction == 1.0);
    checked_free(&c);

    /* a core tag means its type, as for PyYAML: !!float 1 is 1.0, the whole
     * epoch (it was one batch); !!int "2" is 2 (it was refused as a string) */
    check(&c, MINIMAL "limit_train_batches: !!float 1\ndeterministic: !!bool \"yes\"\n");
    ck_assert_str_eq(c.text, "");
    ck_assert_int_eq(c.job.limit_train_batches, 0);
    ck_assert(c.job.limit_train_fraction == 1.0);
    ck_assert_int_eq(c.job.deterministic, 1);
    checked_free(&c);
    check(&c, MINIMAL "limit_train_batches: !!int \"2\"\ncheckpoint_dir: !!null ''\n");
    ck_assert_str_eq(c.text, "");
    ck_assert_int_eq(c.job.limit_train_batches, 2);
    ck_assert_ptr_null(c.job.checkpoint_dir);
    checked_free(&c);

    /* a key with no value takes its default */
    check(&c, MINIMAL "checkpoint_dir:\nlearning_rate: ~\n");
    ck_assert_str_eq(c.text, "");
    ck_assert_ptr_null(c.job.checkpoint_dir);
    ck_assert(c.job.learning_rate == 0.001);
    checked_free(&c);
}
END_TEST

START_TEST(test_paths_resolved)
{
    struct checked c;
    check_as(&c, "specs/run/t.yaml",
             "epochs: 1\nbatch_size: 8\nmodel: {layers: [4, 2]}\ncheckpoint_dir: ckpt\n"
             "data:\n  train: {format: idx, inputs: data/x.idx, labels: /abs/y.idx}\n", 0);
    ck_assert_str_eq(c.text, "");
    const char *in = c.job.data.train.inputs;
    ck_assert_msg(in[0] == '/', "inputs not absolute: %s", in);
    size_t l = strlen(in), sl = strlen("/specs/run/data/x.idx");
    ck_assert(l > sl && strcmp(in + l - sl, "/specs/run/data/x.idx") == 0);
    ck_assert_str_eq(c.job.data.train.labels, "/abs/y.idx");
    /* outputs stay relative to the run's working directory */
    ck_assert_str_eq(c.job.checkpoint_dir, "ckpt");
    ck_assert_str_eq(c.job.name, "t");
    checked_free(&c);

    check_as(&c, "/x/my job.v2.yml", MINIMAL, 0);
    ck_assert_str_eq(c.job.name, "my_job.v2");
    checked_free(&c);
    /* the default obeys the rule a written name does: no leading '-' (it
     * named the program -x, and its checkpoints -x-e1-...) */
    check_as(&c, "/x/-x.yaml", MINIMAL, 0);
    ck_assert_str_eq(c.text, "");
    ck_assert_str_eq(c.job.name, "_x");
    checked_free(&c);
}
END_TEST

START_TEST(test_did_you_mean)
{
    struct checked c;
    check(&c, MINIMAL "learnig_rate: 0.01\nepoch: 2\noptimizer: {typ: sgd}\nnesterov: true\n"
          "accelerator: gpus\nzzz: 1\n");
    ck_assert_str_eq(c.text,
        "dir/t.yaml:5:1: error: learnig_rate: unknown key 'learnig_rate'; did you mean 'learning_rate'?\n"
        "dir/t.yaml:6:1: error: epoch: unknown key 'epoch'; did you mean 'epochs'?\n"
        "dir/t.yaml:7:13: error: optimizer.typ: unknown key 'typ'; did you mean 'type'?\n"
        "dir/t.yaml:8:1: error: nesterov: unknown key 'nesterov' here; did you mean 'optimizer.nesterov'?\n"
        "dir/t.yaml:9:14: error: accelerator: expected one of auto, cpu, gpu (or cuda); found 'gpus'; did you mean 'gpu'?\n"
        "dir/t.yaml:10:1: error: zzz: unknown key 'zzz'\n");
    ck_assert_int_eq(c.rc, -1);
    checked_free(&c);
    ck_assert_int_eq(validate_distance("learnig_rate", "learning_rate"), 1);
    ck_assert_int_eq(validate_distance("ab", "ba"), 1);
    ck_assert_int_eq(validate_distance("", "abc"), 3);
}
END_TEST

START_TEST(test_cross_rules)
{
    struct checked c;
    check(&c, "devices: 2\nlearning_rate: 0.001\n" MINIMAL);
    ck_assert_int_eq(c.rc, 0);
    ck_assert_str_eq(c.text, "dir/t.yaml:2:16: warning: learning_rate: 2 devices and no lr_scaling: "
                             "learning_rate stays 0.001; lr_scaling: linear would use 0.002\n");
    checked_free(&c);

    check(&c, "devices: [0, 1, 2, 3]\nstrategy: none\nlr_scaling: none\n" MINIMAL);
    ck_assert_str_eq(c.text, "dir/t.yaml:2:11: error: strategy: strategy none runs a single process, "
                             "but 4 devices are listed; use strategy: ddp or one device\n");
    checked_free(&c);

    check(&c, "nccl_timeout: 30m\n" MINIMAL);
    ck_assert_int_eq(c.rc, 0);
    ck_assert_str_eq(c.text, "dir/t.yaml:1:15: warning: nccl_timeout: ignored on a single device "
                             "(there is no collective to bound)\n");
    ck_assert(c.job.nccl_timeout_s == 0);
    checked_free(&c);

    /* the 30-minute default is turned off by name only */
    check(&c, "devices: 2\nlr_scaling: linear\nnccl_timeout: none\n" MINIMAL);
    ck_assert_str_eq(c.text, "");
    ck_assert(c.job.nccl_timeout_s == 0);
    checked_free(&c);

    check(&c, "accelerator: cpu\nprecision: fp16\n" MINIMAL);
    ck_assert_str_eq(c.text, "dir/t.yaml:2:12: error: precision: fp16 needs a GPU, but accelerator "
                             "is cpu; the CPU backend computes in fp32\n");
    checked_free(&c);

    check(&c, "epochs: 1\nbatch_size: 8\nmodel: {layers: [16, 5]}\n"
              "data: {train: {format: synthetic, features: 12, classes: 4}}\n");
    ck_assert_str_eq(c.text,
        "dir/t.yaml:3:18: error: model.layers[0]: input size 16 does not match the 12 features per sample of data.train\n"
        "dir/t.yaml:3:22: error: model.layers[1]: output size 5 does not match the 4 classes of data.train\n");
    checked_free(&c);

    check(&c, "epochs: 1\nbatch_size: 8\nloss: cross_entropy\nmodel: {layers: [16, 1]}\n"
              "data: {train: {format: synthetic, classes: 0}}\n");
    ck_assert_str_eq(c.text, "dir/t.yaml:3:7: error: loss: cross_entropy needs class labels, but "
                             "data.train is regression data (classes: 0); use loss: mse\n");
    checked_free(&c);

    check(&c, "epochs: 1\nbatch_size: 600\ndevices: 2\nlr_scaling: linear\nmodel: {layers: [16, 2]}\n"
              "data: {train: {format: synthetic, samples: 1000}}\n");
    ck_assert_str_eq(c.text, "dir/t.yaml:2:13: error: batch_size: batch_size 600 × 2 devices = 1200 "
                             "is larger than the training set (1000 samples)\n");
    checked_free(&c);

    check(&c, MINIMAL "accelerator: cpu\nlaunch: {num_nodes: 2}\n");
    ck_assert_str_eq(c.text, "dir/t.yaml:6:21: warning: launch.num_nodes: 2 devices and no lr_scaling: "
                             "learning_rate stays 0.001; lr_scaling: linear would use 0.002\n"
                             "dir/t.yaml:6:21: error: launch.num_nodes: 2 nodes with launcher local "
                             "need launch.master_addr, the address of node 0\n");
    checked_free(&c);
}
END_TEST

/* What the job would refuse at start and check can know, check refuses:
 * output paths of the wrong kind (absolute: an error; relative: a warning,
 * since they resolve where the job runs), blank paths, and with devices: -1
 * on CPU the batch rule for this machine's CPUs (a warning: the job
 * resolves -1 where it runs, and refuses there). */
START_TEST(test_check_knows_what_the_job_refuses)
{
    char dir[] = "/tmp/ddpc-outpath-XXXXXX", file[64], fifo[64], y[512];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(file, sizeof file, "%s/afile", dir);
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    FILE *f = fopen(file, "w");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fclose(f), 0);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    struct checked c;

    snprintf(y, sizeof y, "checkpoint_dir: %s\n" MINIMAL, file);
    check(&c, y);
    ck_assert_int_ne(c.rc, 0);
    ck_assert_msg(strstr(c.text, "error: checkpoint_dir: '") &&
                  strstr(c.text, "afile' is a regular file, not a directory"), "%s", c.text);
    checked_free(&c);

    check(&c, "checkpoint_dir: /dev/null\n" MINIMAL);
    ck_assert_str_eq(c.text, "dir/t.yaml:1:17: error: checkpoint_dir: '/dev/null' is a character "
                             "device, not a directory; the job would refuse it\n");
    checked_free(&c);

    snprintf(y, sizeof y, MINIMAL "logging: {metrics_csv: %s}\ncheckpoint: {export: /dev/null}\n",
             fifo);
    check(&c, y);
    ck_assert_msg(strstr(c.text, "error: logging.metrics_csv: '") &&
                  strstr(c.text, "fifo' is a FIFO, not a regular file") &&
                  strstr(c.text, "error: checkpoint.export: '/dev/null' is a character device"),
                  "%s", c.text);
    checked_free(&c);

    check(&c, "checkpoint_dir: '  '\n" MINIMAL);
    ck_assert_str_eq(c.text, "dir/t.yaml:1:17: error: checkpoint_dir: must not be blank\n");
    checked_free(&c);

    /* relative: resolved where the job runs, so only a warning here (the
     * test runs in the repository root, where Makefile is a file) */
    check(&c, "checkpoint_dir: Makefile\n" MINIMAL);
    ck_assert_int_eq(c.rc, 0);
    ck_assert_str_eq(c.text, "dir/t.yaml:1:17: warning: checkpoint_dir: 'Makefile' is a regular "
                             "file here, not a directory; a job run from this directory would "
                             "refuse it\n");
    checked_free(&c);

    /* a directory on the way that is a file: the job cannot create the path */
    snprintf(y, sizeof y, MINIMAL "checkpoint_dir: %s/sub\ncheckpoint: {export: %s/m.st}\n",
             file, file);
    check(&c, y);
    ck_assert_int_ne(c.rc, 0);
    ck_assert_msg(strstr(c.text, "error: checkpoint_dir: '") &&
                  strstr(c.text, "afile/sub': a directory on the path is a file; the job would "
                                 "refuse it") &&
                  strstr(c.text, "error: checkpoint.export: '") &&
                  strstr(c.text, "afile/m.st': a directory on the path is a file"), "%s", c.text);
    checked_free(&c);
    check(&c, "logging: {metrics_csv: Makefile/m.csv}\n" MINIMAL);
    ck_assert_int_eq(c.rc, 0);
    ck_assert_str_eq(c.text, "dir/t.yaml:1:24: warning: logging.metrics_csv: 'Makefile/m.csv': a "
                             "directory on the path is a file here; a job run from this "
                             "directory would refuse it\n");
    checked_free(&c);

    /* devices: -1 on CPU: as many workers as this process's CPUs */
    cpu_set_t set;
    ck_assert_int_eq(sched_getaffinity(0, sizeof set, &set), 0);
    int ncpu = CPU_COUNT(&set);
    check(&c, "devices: -1\naccelerator: cpu\nlr_scaling: linear\nepochs: 1\nbatch_size: 600\n"
              "model: {layers: [16, 2]}\ndata: {train: {format: synthetic, samples: 1000}}\n");
    ck_assert_int_eq(c.rc, 0);
    if (ncpu >= 2) {
        char want[256];
        snprintf(want, sizeof want, "on this machine that is %d: batch_size 600 × %d = %d is "
                 "larger than the training set (1000 samples)", ncpu, ncpu, 600 * ncpu);
        ck_assert_msg(strstr(c.text, "warning: batch_size: devices: -1 is one CPU worker per CPU") &&
                      strstr(c.text, want), "%s", c.text);
    } else {
        ck_assert_str_eq(c.text, "");
    }
    checked_free(&c);
    /* one worker at least: batch_size over the samples is an error anyway */
    check(&c, "devices: -1\naccelerator: cpu\nlr_scaling: linear\nepochs: 1\nbatch_size: 1200\n"
              "model: {layers: [16, 2]}\ndata: {train: {format: synthetic, samples: 1000}}\n");
    ck_assert_msg(strstr(c.text, "error: batch_size: batch_size 1200 × 1 device = 1200 is larger"),
                  "%s", c.text);
    checked_free(&c);

    unlink(fifo);
    unlink(file);
    rmdir(dir);
}
END_TEST

START_TEST(test_type_specific_keys)
{
    struct checked c;
    check(&c, MINIMAL "optimizer:\n  type: adam\n  momentum: 0.9\n");
    ck_assert_str_eq(c.text, "dir/t.yaml:7:3: error: optimizer.momentum: applies only when type is "
                             "sgd (type here is adam)\n");
    checked_free(&c);
    /* the sibling may come after the key */
    check(&c, MINIMAL "optimizer:\n  momentum: 0.9\n  type: sgd\n");
    ck_assert_str_eq(c.text, "");
    ck_assert(c.job.optimizer.momentum == 0.9);
    checked_free(&c);
    /* the default type (adam) decides when type is absent */
    check(&c, MINIMAL "optimizer: {momentum: 0.9}\n");
    ck_assert_str_eq(c.text, "dir/t.yaml:5:13: error: optimizer.momentum: applies only when type is "
                             "sgd (type here is adam)\n");
    checked_free(&c);
}
END_TEST

START_TEST(test_data_headers)
{
    /* a FIFO or a device must not hang or be read */
    struct checked c;
    check_as(&c, "t.yaml", "epochs: 1\nbatch_size: 8\nmodel: {layers: [4, 2]}\n"
                 "data: {train: {format: idx, inputs: /dev/zero, labels: /dev/null}}\n", 1);
    ck_assert_str_eq(c.text, "t.yaml:4:37: error: data.train.inputs: cannot read '/dev/zero': "
                             "not a regular file\n");
    checked_free(&c);
    /* with data reads off, the same spec is valid */
    check_as(&c, "t.yaml", "epochs: 1\nbatch_size: 8\nmodel: {layers: [4, 2]}\n"
                 "data: {train: {format: idx, inputs: /dev/zero, labels: /dev/null}}\n", 0);
    ck_assert_str_eq(c.text, "");
    checked_free(&c);
}
END_TEST

static void write_bytes(const char *path, const void *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(b, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
}

/* A token range over 64 MiB is not read to compare its tokens with
 * vocab_size (the job does at load), and check says so: here a sparse
 * shard of 2^25 + 8 tokens (a hole reads as token 0) with a token of 9999
 * at its end for a vocab_size of 64. Under the bound the same token is
 * found, named with its index and byte offset. */
START_TEST(test_token_scan_bound)
{
    char *dir = make_temp_dir("validate-scan");
    ck_assert_ptr_nonnull(dir);
    char *path = NULL;
    ck_assert_int_ge(asprintf(&path, "%s/big.bin", dir), 0);
    const int32_t n = (1 << 25) + 8;
    uint16_t last = 9999;
    ck_assert_int_eq(write_llmc_shard(path, 20240520, 1, n, &last, 0), 0);
    int fd = open(path, O_WRONLY);
    ck_assert_int_ge(fd, 0);
    const unsigned char le[2] = { 9999 & 0xff, 9999 >> 8 };
    ck_assert_int_eq(pwrite(fd, le, 2, 1024 + 2 * (off_t)(n - 1)), 2);
    ck_assert_int_eq(close(fd), 0);
    char yaml[1024], file[600];
    snprintf(yaml, sizeof yaml, "epochs: 1\nbatch_size: 2\nmodel: {type: gpt, vocab_size: 64, "
             "block_size: 8, n_layer: 1, n_head: 2, n_embd: 8}\n"
             "data: {train: {format: tokens, path: %s}}\n", path);
    snprintf(file, sizeof file, "%s/t.yaml", dir);
    struct checked c;
    check_as(&c, file, yaml, 1);
    ck_assert_msg(strstr(c.text, "warning: model.vocab_size: '") &&
                  strstr(c.text, "big.bin' holds 33554440 tokens (64 MiB) in its files, more "
                                 "than check reads (64 MiB): they were not compared with "
                                 "vocab_size 64; the job fails at load if one is >= it"),
                  "%s", c.text);
    ck_assert_int_eq(c.rc, 0);
    checked_free(&c);
    /* the last 1000 tokens: read, and the token named */
    snprintf(yaml, sizeof yaml, "epochs: 1\nbatch_size: 2\nmodel: {type: gpt, vocab_size: 64, "
             "block_size: 8, n_layer: 1, n_head: 2, n_embd: 8}\n"
             "data: {train: {format: tokens, path: %s, range: [0.99997, 1.0]}}\n", path);
    check_as(&c, file, yaml, 1);
    ck_assert_msg(strstr(c.text, "error: model.vocab_size: data.train: '") &&
                  strstr(c.text, "big.bin' holds token 9999 at token 33554439 of the file (byte "
                                 "offset 67109902), not below vocab_size 64; set "
                                 "model.vocab_size to at least 10000"), "%s", c.text);
    checked_free(&c);
    ck_assert_int_eq(unlink(path), 0);
    free(path);
    rm_tree(dir);
    free(dir);
}
END_TEST

/* The data-facts cache gives the same answers as reading, and notices a
 * data file that changed between two specs. */
START_TEST(test_data_cache)
{
    char dir[] = "/tmp/ddpc-cache-XXXXXX", spec[64], images[64], labels[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(spec, sizeof spec, "%s/s.yaml", dir);
    snprintf(images, sizeof images, "%s/i.idx", dir);
    snprintf(labels, sizeof labels, "%s/l.idx", dir);
    const unsigned char img[] = { 0, 0, 8, 3, 0, 0, 0, 4, 0, 0, 0, 1, 0, 0, 0, 2, 1, 2, 3, 4, 5, 6, 7, 8 };
    const unsigned char lab_ok[] = { 0, 0, 8, 1, 0, 0, 0, 4, 0, 1, 1, 0 };
    const unsigned char lab_bad[] = { 0, 0, 8, 1, 0, 0, 0, 4, 0, 1, 5, 0 };
    write_bytes(images, img, sizeof img);
    write_bytes(labels, lab_ok, sizeof lab_ok);
    const char *y = "epochs: 1\nbatch_size: 2\nmodel: {layers: [2, 2]}\n"
                    "data: {train: {format: idx, inputs: i.idx, labels: l.idx}}\n";
    write_bytes(spec, y, strlen(y));
    struct spec_options opt = { .read_data_headers = 1, .cache = spec_cache_new() };
    ck_assert_ptr_nonnull(opt.cache);
    for (int round = 0; round < 3; round++) {
        if (round == 2) {
            /* same size, new content: the mtime must differ for the cache to see it */
            struct timespec ts = { 0, 20 * 1000 * 1000 };
            nanosleep(&ts, NULL);
            write_bytes(labels, lab_bad, sizeof lab_bad);
        }
        struct ddpc_diag d;
        struct ddpc_job job;
        struct spec_doc *doc = NULL;
        diag_init(&d);
        int rc = spec_load_job(spec, &opt, &job, &doc, &d);
        ck_assert_msg(rc == (round == 2 ? 1 : 0), "round %d: rc %d", round, rc);
        if (round == 2)
            ck_assert(strstr(d.v[0].message, "labels of data.train go up to 5") != NULL);
        spec_doc_free(doc);
        diag_free(&d);
    }
    spec_cache_free(opt.cache);
    spec_cache_free(NULL);
    unlink(spec);
    unlink(images);
    unlink(labels);
    rmdir(dir);
}
END_TEST

/* Values as Lightning writes them are accepted and mean what Lightning
 * means; strategies ddpc lacks are refused with what ddpc does instead. */
START_TEST(test_lightning_values)
{
    struct checked c;
    /* precision: a YAML integer and a string spell the same value */
    static const struct { const char *text; int want; } prec[] = {
        { "16", DDPC_PRECISION_FP16 }, { "\"16\"", DDPC_PRECISION_FP16 },
        { "32", DDPC_PRECISION_FP32 }, { "\"32\"", DDPC_PRECISION_FP32 },
        { "bf16", DDPC_PRECISION_BF16 }, { "16-mixed", DDPC_PRECISION_FP16 },
        { "bf16-mixed", DDPC_PRECISION_BF16 }, { "32-true", DDPC_PRECISION_FP32 },
    };
    for (size_t i = 0; i < sizeof prec / sizeof prec[0]; i++) {
        char y[512];
        snprintf(y, sizeof y, MINIMAL "accelerator: cuda\nprecision: %s\n", prec[i].text);
        check(&c, y);
        ck_assert_msg(c.rc == 0, "precision %s: %s", prec[i].text, c.text);
        ck_assert_int_eq(c.job.precision, prec[i].want);
        ck_assert_int_eq(c.job.accelerator, DDPC_ACCEL_GPU);
        checked_free(&c);
    }
    /* devices: auto is every device of the accelerator */
    check(&c, MINIMAL "devices: auto\nlr_scaling: linear\n");
    ck_assert_str_eq(c.text, "");
    ck_assert_int_eq(c.job.devices_all, 1);
    ck_assert_int_eq(c.job.strategy, DDPC_STRATEGY_DDP);
    checked_free(&c);
    /* strategy: auto is ddp with several devices, none with one */
    check(&c, MINIMAL "devices: 2\nstrategy: auto\nlr_scaling: linear\n");
    ck_assert_str_eq(c.text, "");
    ck_assert_int_eq(c.job.strategy, DDPC_STRATEGY_DDP);
    checked_free(&c);
    check(&c, MINIMAL "devices: 1\nstrategy: auto\n");
    ck_assert_str_eq(c.text, "");
    ck_assert_int_eq(c.job.strategy, DDPC_STRATEGY_NONE);
    checked_free(&c);
    check(&c, MINIMAL "devices: auto\nstrategy: auto\nlr_scaling: linear\n");
    ck_assert_int_eq(c.job.strategy, DDPC_STRATEGY_DDP);
    checked_free(&c);
    /* strategies ddpc lacks: an error at the value that says what to write */
    static const char *const refused[] = {
        "ddp_spawn", "ddp_find_unused_parameters_true", "ddp_notebook", "fsdp", "deepspeed",
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        char y[512], want[256];
        snprintf(y, sizeof y, "strategy: %s\n" MINIMAL, refused[i]);
        check(&c, y);
        ck_assert_int_eq(c.rc, -1);
        snprintf(want, sizeof want, "dir/t.yaml:1:11: error: strategy: '%s' is not available: ",
                 refused[i]);
        ck_assert_msg(strncmp(c.text, want, strlen(want)) == 0, "%s", c.text);
        ck_assert_msg(strstr(c.text, "strategy: ddp\n") != NULL, "%s", c.text);
        ck_assert_int_eq(c.d.n, 1);
        checked_free(&c);
    }
    check(&c, "strategy: fsdp\n" MINIMAL);
    ck_assert_str_eq(c.text, "dir/t.yaml:1:11: error: strategy: 'fsdp' is not available: ddpc "
                             "replicates the model on every device (DDP) and does not shard it; "
                             "use strategy: ddp\n");
    checked_free(&c);
    check(&c, MINIMAL "precision: 16-true\n");
    ck_assert_str_eq(c.text, "dir/t.yaml:5:12: error: precision: '16-true' is not available: "
                             "ddpc keeps fp32 master weights and computes in fp16 (16-mixed); "
                             "write 16-mixed or fp16\n");
    checked_free(&c);
}
END_TEST

/* Another tool's key name: an error at the key that names ddpc's key. */
START_TEST(test_other_tools_keys)
{
    static const struct { const char *key, *target; } cases[] = {
        { "accumulate_grad_batches", "grad_accumulation" }, { "gradient_clip_val", "grad_clip_norm" },
        { "max_epochs", "epochs" }, { "log_every_n_steps", "logging.every_n_steps" },
        { "num_nodes", "launch.num_nodes" }, { "lr", "learning_rate" },
        { "default_root_dir", "checkpoint_dir" }, { "dirpath", "checkpoint_dir" },
        { "nnodes", "launch.num_nodes" }, { "--nproc-per-node", "devices" },
        { "nproc_per_node", "devices" }, { "master_port", "launch.master_port" },
        { "gradient_accumulation_steps", "grad_accumulation" },
    };
    struct checked c;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char y[512], want[256];
        snprintf(y, sizeof y, MINIMAL "%s: 2\n", cases[i].key);
        check(&c, y);
        ck_assert_int_eq(c.rc, -1);
        ck_assert_int_eq(c.d.n, 1);
        snprintf(want, sizeof want, "dir/t.yaml:5:1: error: %s: unknown key '%s' ", cases[i].key,
                 cases[i].key);
        ck_assert_msg(strncmp(c.text, want, strlen(want)) == 0, "%s", c.text);
        /* "ddpc's key is 'x'", or for ddpc's own name in the wrong block
         * (num_nodes) "did you mean 'launch.num_nodes'?" */
        snprintf(want, sizeof want, "'%s'", cases[i].target);
        ck_assert_msg(strstr(c.text, want) != NULL, "%s: %s", cases[i].key, c.text);
        checked_free(&c);
    }
    check(&c, MINIMAL "max_epochs: 3\n");
    ck_assert_str_eq(c.text, "dir/t.yaml:5:1: error: max_epochs: unknown key 'max_epochs' "
                             "(Lightning Trainer); ddpc's key is 'epochs': ddpc runs exactly this "
                             "many epochs (there is no early stopping)\n");
    checked_free(&c);
    /* PyTorch's lr inside the optimizer block: the key is top level */
    check(&c, MINIMAL "optimizer: {type: sgd, lr: 0.1}\n");
    ck_assert_str_eq(c.text, "dir/t.yaml:5:24: error: optimizer.lr: unknown key 'lr' (PyTorch's "
                             "optim.*(lr=)); ddpc's key is 'learning_rate' (top level): the "
                             "single-device rate; lr_scaling scales it by the world size\n");
    checked_free(&c);
    /* a setting ddpc does not have says why */
    check(&c, MINIMAL "profiler: simple\n");
    ck_assert_str_eq(c.text, "dir/t.yaml:5:1: error: profiler: unknown key 'profiler' (Lightning "
                             "Trainer); ddpc has no such key: no profiler hook; ddpc plan shows "
                             "the memory, the run prints throughput\n");
    checked_free(&c);
    /* ddpc's own key in the wrong block keeps its own message */
    check(&c, MINIMAL "momentum: 0.9\n");
    ck_assert_str_eq(c.text, "dir/t.yaml:5:1: error: momentum: unknown key 'momentum' here; did "
                             "you mean 'optimizer.momentum'?\n");
    checked_free(&c);
}
END_TEST

/* Names a Lightning, PyTorch or Hugging Face user writes that ddpc spells
 * otherwise, or lacks: each gets the alias message (ddpc's key, or why
 * there is none), where check said a bare "unknown key 'transforms'". */
START_TEST(test_more_tools_keys)
{
    static const char *const names[] = {
        "transforms", "transform", "train_transforms", "target_transform", "lr_scheduler",
        "max_lr", "milestones", "T_0", "clip_grad_norm", "amp", "use_amp", "autocast",
        "mixed_precision", "allow_tf32", "compile", "pretrained", "persistent_workers",
        "prefetch_factor", "collate_fn", "sampler", "auto_select_gpus", "num_processes",
        "tpu_cores", "distributed_backend", "amp_backend", "amp_level", "replace_sampler_ddp",
        "auto_lr_find", "auto_scale_batch_size", "track_grad_norm", "progress_bar_refresh_rate",
        "weights_summary", "terminate_on_nan", "stochastic_weight_avg", "lr_monitor",
        "model_checkpoint", "tf32", "adam_beta1", "adam_epsilon", "optim", "warmup_ratio",
        "save_steps", "logging_dir", "report_to", "run_name", "gradient_checkpointing",
        "dataloader_num_workers", "torch_compile",
    };
    struct checked c;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char y[512], want[256];
        snprintf(y, sizeof y, MINIMAL "%s: 2\n", names[i]);
        check(&c, y);
        ck_assert_int_eq(c.rc, -1);
        ck_assert_int_eq(c.d.n, 1);
        snprintf(want, sizeof want, "dir/t.yaml:5:1: error: %s: unknown key '%s' (", names[i],
                 names[i]);
        ck_assert_msg(strncmp(c.text, want, strlen(want)) == 0 &&
                      (strstr(c.text, "); ddpc's key is '") ||
                       strstr(c.text, "); ddpc has no such key: ")), "%s", c.text);
        checked_free(&c);
    }
    check(&c, MINIMAL "transforms: [ToTensor]\n");
    ck_assert_str_eq(c.text, "dir/t.yaml:5:1: error: transforms: unknown key 'transforms' "
                             "(PyTorch's torchvision.transforms); ddpc has no such key: "
                             "preprocessing is not yet in the spec: samples are read as stored "
                             "(8-bit images scaled to [0, 1], as ToTensor does); write the data "
                             "already transformed\n");
    checked_free(&c);
    /* torch's dtype names for precision say which spelling ddpc takes */
    check(&c, MINIMAL "precision: bfloat16\n");
    ck_assert_str_eq(c.text, "dir/t.yaml:5:12: error: precision: 'bfloat16' is not available: "
                             "torch's dtype name; ddpc keeps fp32 master weights and computes in "
                             "bf16: write bf16-mixed (or bf16)\n");
    checked_free(&c);
}
END_TEST

/* aliases.def is consistent: every target is a key of keys.def, no name is
 * one of ddpc's keys in the same place, every refused value belongs to an
 * enum key and is not one of its accepted spellings. */
START_TEST(test_alias_table_consistent)
{
    for (int i = 0; i < ddpc_n_aliases; i++) {
        const struct ddpc_alias *a = &ddpc_aliases[i];
        ck_assert_msg(!a->target || validate_key_exists(a->target), "aliases.def: %s -> %s: no "
                      "such key", a->name, a->target);
        ck_assert_msg(a->target || a->note[0], "aliases.def: %s has neither a key nor a reason",
                      a->name);
        ck_assert_msg(a->tool < DDPC_TOOL_COUNT && validate_tool_name(a->tool)[0], "%s", a->name);
        /* a top-level key under another tool's name would shadow ddpc's own */
        const struct ddpc_alias *f = validate_alias_find(a->name, strlen(a->name));
        ck_assert_msg(!f || !validate_key_exists(a->name), "aliases.def: %s is a ddpc key",
                      a->name);
        /* every name is answered: by the alias message, or as ddpc's own key */
        ck_assert_msg(f || validate_key_exists(a->target ? a->target : a->name),
                      "aliases.def: %s is neither an alias nor a ddpc key", a->name);
        /* the first row for a name decides the message: same target for all */
        if (f && a->target != f->target)
            ck_assert_msg(a->target && f->target && strcmp(a->target, f->target) == 0,
                          "aliases.def: %s has two targets", a->name);
    }
    for (int i = 0; i < ddpc_n_refused_values; i++) {
        const struct ddpc_refused_value *r = &ddpc_refused_values[i];
        int found = 0;
        for (int k = 0; k < ddpc_n_keys; k++)
            if (ddpc_keys[k].block == DDPC_B_ROOT && strcmp(ddpc_keys[k].name, r->key) == 0) {
                found = 1;
                ck_assert_int_eq(ddpc_keys[k].type, DDPC_T_ENUM);
                char y[256];
                snprintf(y, sizeof y, MINIMAL "%s: %s\n", r->key, r->value);
                struct checked c;
                check(&c, y);
                ck_assert_msg(strstr(c.text, "is not available: ") != NULL, "%s", c.text);
                checked_free(&c);
            }
        ck_assert_msg(found, "aliases.def: refused value of unknown key %s", r->key);
    }
}
END_TEST

/* The lr_scaling warning uses the plan's rule: world × grad_accumulation. */
START_TEST(test_lr_scaling_rule)
{
    struct checked c;
    check(&c, MINIMAL "devices: 2\ngrad_accumulation: 4\nlearning_rate: 0.001\n");
    ck_assert_str_eq(c.text, "dir/t.yaml:7:16: warning: learning_rate: 2 devices and no "
                             "lr_scaling: learning_rate stays 0.001; lr_scaling: linear would use "
                             "0.008 (0.001 × 2 devices × grad_accumulation 4)\n");
    ck_assert(ddpc_job_lr_factor(&c.job, DDPC_LR_SCALING_LINEAR, 2) == 8.0);
    ck_assert(ddpc_job_lr_factor(&c.job, DDPC_LR_SCALING_SQRT, 2) == sqrt(8.0));
    ck_assert(ddpc_job_lr_factor(&c.job, DDPC_LR_SCALING_NONE, 2) == 1.0);
    checked_free(&c);
}
END_TEST

START_TEST(test_key_table_consistent)
{
    /* each DDPC_ITEM row's name is its layer type's spelling in job.h */
    int items = 0;
    for (int i = 0; i < ddpc_n_keys; i++)
        if (ddpc_keys[i].type == DDPC_T_ITEM) {
            items++;
            ck_assert_str_eq(ddpc_enum_spell(&ddpc_enum_layer_type, (int)ddpc_keys[i].off),
                             ddpc_keys[i].name);
        }
    /* the types after the items are the gpt lowering's own, never spelled */
    ck_assert_int_eq(items, DDPC_LAYER_EMBEDDING);
    ck_assert_int_lt(ddpc_n_keys, 256);
    for (int i = 0; i < ddpc_n_keys; i++) {
        const struct ddpc_key *k = &ddpc_keys[i];
        ck_assert_msg(k->doc && k->doc[0], "%s has no doc", k->name);
        for (int j = 0; j < i; j++)
            ck_assert_msg(ddpc_keys[j].block != k->block || strcmp(ddpc_keys[j].name, k->name),
                          "key %s twice in one block", k->name);
        if (k->type == DDPC_T_CUSTOM)
            ck_assert_msg(k->fn && k->schema && k->typetext, "custom %s incomplete", k->name);
        if (k->only) {
            const char *eq = strchr(k->only, '=');
            ck_assert_ptr_nonnull(eq);
            int found = 0;
            for (int j = 0; j < ddpc_n_keys; j++)
                if (ddpc_keys[j].block == k->block && ddpc_keys[j].type == DDPC_T_ENUM &&
                    strlen(ddpc_keys[j].name) == (size_t)(eq - k->only) &&
                    strncmp(ddpc_keys[j].name, k->only, (size_t)(eq - k->only)) == 0)
                    found = 1;
            ck_assert_msg(found, "%s: 'only' names no enum sibling", k->name);
        }
    }
    /* enum order follows job.h */
    char v[64];
    for (int i = 0; i < ddpc_n_keys; i++) {
        const struct ddpc_key *k = &ddpc_keys[i];
        if (k->type != DDPC_T_ENUM)
            continue;
        if (strcmp(k->name, "type") == 0 && k->block == DDPC_B_OPTIMIZER) {
            ck_assert_int_eq(validate_enum_value(k, DDPC_OPTIM_SGD, v, sizeof v), 0);
            ck_assert_str_eq(v, "sgd");
        }
        if (strcmp(k->name, "accelerator") == 0) {
            ck_assert_int_eq(validate_enum_value(k, DDPC_ACCEL_GPU, v, sizeof v), 0);
            ck_assert_str_eq(v, "gpu");
        }
        if (strcmp(k->name, "format") == 0) {
            ck_assert_int_eq(validate_enum_value(k, DDPC_DATA_SYNTHETIC, v, sizeof v), 0);
            ck_assert_str_eq(v, "synthetic");
        }
        if (strcmp(k->name, "decay") == 0) {
            ck_assert_int_eq(validate_enum_value(k, DDPC_DECAY_STEP, v, sizeof v), 0);
            ck_assert_str_eq(v, "step");
        }
    }
}
END_TEST

/* The rule codes of `ddpc check --format json` (spec/rules.def) are what
 * CI filters and counts on: this list pins every one, in table order, so a
 * code renamed, dropped or reused fails here before it breaks a pipeline.
 * A new rule is appended to the table and to this list. Each code names
 * its severity (E-, W-, N-) and is unique. */
START_TEST(test_rule_codes_are_stable)
{
    static const char *const pinned[] = {
        "E-other", "W-other", "N-other",
        "E-io", "E-walk-limit", "N-walk-skip", "E-yaml", "E-duplicate-key", "E-set", "E-octal",
        "E-oom",
        "E-unknown-key", "E-alias-key", "E-missing-key", "E-only-for", "E-type", "E-range",
        "E-enum", "E-refused-value", "E-string", "W-path-literal", "E-devices",
        "E-layer-syntax", "E-not-implemented",
        "E-data-read", "E-data-count", "E-labels", "E-label-column", "N-csv-header",
        "W-csv-header", "E-input-shape", "E-layer-shape", "N-shapes-unchecked",
        "E-output-shape", "E-classes", "E-targets", "E-test-features", "E-loss", "E-gpt",
        "E-data-format", "E-tokens-short", "E-tokens-vocab", "W-tokens-unchecked",
        "E-batchnorm-batch", "W-batchnorm-last-batch", "E-batch-size", "W-batch-size",
        "W-test-is-train", "E-init-from",
        "E-model-type", "E-strategy", "E-precision", "E-nesterov", "E-multinode",
        "W-lr-unscaled", "W-single-device-timeout", "W-schedule-past-run",
        "W-no-checkpoint-dir", "E-resume", "W-resume", "E-output-path", "W-output-path",
        "E-output-clobber", "W-output-clobber",
    };
    ck_assert_int_eq(DDPC_R_COUNT, (int)(sizeof pinned / sizeof pinned[0]));
    for (int r = 0; r < DDPC_R_COUNT; r++) {
        const struct ddpc_rule_info *ri = diag_rule_info(r);
        ck_assert_ptr_nonnull(ri);
        ck_assert_msg(strcmp(ri->code, pinned[r]) == 0, "rule %d is %s, pinned %s", r, ri->code,
                      pinned[r]);
        char want = ri->severity == DDPC_SEV_ERROR ? 'E'
                    : ri->severity == DDPC_SEV_WARNING ? 'W' : 'N';
        ck_assert_msg(ri->code[0] == want && ri->code[1] == '-', "%s: not its severity", ri->code);
        for (const char *p = ri->code + 2; *p; p++)
            ck_assert_msg((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
                          (*p == '-' && p[1] && p[-1] != '-'), "%s: not [a-z0-9-]", ri->code);
        ck_assert_msg(ri->doc[0], "%s has no description", ri->code);
        for (int q = 0; q < r; q++)
            ck_assert_msg(strcmp(diag_rule_info(q)->code, ri->code) != 0, "%s twice", ri->code);
    }
    ck_assert_ptr_null(diag_rule_info(DDPC_R_COUNT));
    /* a finding carries its rule's severity */
    struct ddpc_diag d;
    diag_init(&d);
    diag_rule(&d, DDPC_R_LR_UNSCALED, "f.yaml", 1, 1, "learning_rate", "x");
    ck_assert_int_eq(d.v[0].severity, DDPC_SEV_WARNING);
    ck_assert_int_eq(d.n_warnings, 1);
    diag_add(&d, DDPC_SEV_NOTE, "f.yaml", 1, 1, "", "y");
    ck_assert_int_eq(d.v[1].rule, DDPC_R_NOTE);
    diag_free(&d);
    /* the validator's own findings have theirs */
    struct checked c;
    check(&c, MINIMAL "max_epochs: 3\nmomentum: 0.9\n");
    ck_assert_int_eq(c.d.n, 2);
    ck_assert_int_eq(c.d.v[0].rule, DDPC_R_ALIAS_KEY);
    ck_assert_int_eq(c.d.v[1].rule, DDPC_R_UNKNOWN_KEY);
    checked_free(&c);
}
END_TEST

START_TEST(test_output_formats)
{
    struct ddpc_diag d;
    char *out = NULL;
    size_t sz;
    diag_init(&d);
    diag_add(&d, DDPC_SEV_ERROR, "a,b:c.yaml", 3, 7, "model.layers", "bad \"x\", 100%% wrong");
    diag_add(&d, DDPC_SEV_WARNING, "w.yaml", 1, 1, "", "careful");
    diag_rule(&d, DDPC_R_IO, "io.yaml", 0, 0, "", "cannot read");
    ck_assert_int_eq(d.n_errors, 2);
    ck_assert_int_eq(d.n_warnings, 1);
    FILE *f = open_memstream(&out, &sz);
    diag_print(&d, 0, DDPC_FMT_GITHUB, f);
    fclose(f);
    ck_assert_str_eq(out,
        "::error file=a%2Cb%3Ac.yaml,line=3,col=7::model.layers: bad \"x\", 100%25 wrong\n"
        "::warning file=w.yaml,line=1,col=1::careful\n"
        "::error file=io.yaml::cannot read\n");
    free(out);
    f = open_memstream(&out, &sz);
    diag_print(&d, 1, DDPC_FMT_JSON, f);
    fclose(f);
    ck_assert_str_eq(out,
        "[\n {\"file\":\"w.yaml\",\"line\":1,\"col\":1,\"severity\":\"warning\",\"rule\":\"W-other\","
        "\"path\":\"\",\"message\":\"careful\"},\n"
        " {\"file\":\"io.yaml\",\"line\":0,\"col\":0,\"severity\":\"error\",\"rule\":\"E-io\","
        "\"path\":\"\",\"message\":\"cannot read\"}\n]\n");
    free(out);
    f = open_memstream(&out, &sz);
    diag_print(&d, 0, DDPC_FMT_TEXT, f);
    fclose(f);
    ck_assert_str_eq(out,
        "a,b:c.yaml:3:7: error: model.layers: bad \"x\", 100% wrong\n"
        "w.yaml:1:1: warning: careful\n"
        "io.yaml: error: cannot read\n");
    free(out);
    diag_free(&d);
    diag_free(&d);   /* safe twice */

    /* a key with a newline in it stays on one line */
    diag_add(&d, DDPC_SEV_ERROR, "t.yaml", 1, 1, "a\nb", "unknown key 'a\nb'");
    ck_assert_str_eq(d.v[0].path, "a?b");
    ck_assert_str_eq(d.v[0].message, "unknown key 'a?b'");
    diag_free(&d);
}
END_TEST

START_TEST(test_schema_generated)
{
    char *out = NULL;
    size_t sz;
    FILE *f = open_memstream(&out, &sz);
    spec_write_schema(f);
    fclose(f);
    ck_assert(strstr(out, "\"$schema\": \"https://json-schema.org/draft/2020-12/schema\"") != NULL);
    /* every key of the table appears, and brackets balance outside strings */
    for (int i = 0; i < ddpc_n_keys; i++) {
        char q[80];
        snprintf(q, sizeof q, "\"%s\": {", ddpc_keys[i].name);
        ck_assert_msg(strstr(out, q) != NULL, "schema lacks %s", ddpc_keys[i].name);
    }
    int depth = 0, in_str = 0;
    for (const char *p = out; *p; p++) {
        if (in_str) {
            if (*p == '\\')
                p++;
            else if (*p == '"')
                in_str = 0;
            continue;
        }
        if (*p == '"')
            in_str = 1;
        else if (*p == '{' || *p == '[')
            depth++;
        else if (*p == '}' || *p == ']')
            ck_assert_int_ge(--depth, 0);
    }
    ck_assert_int_eq(depth, 0);
    ck_assert_int_eq(in_str, 0);
    free(out);
}
END_TEST

/* ---- the key table reaches every field of job.h, once ---- */

#define MAX_FIELDS 256

struct field_set {
    char path[MAX_FIELDS][96];
    int count[MAX_FIELDS];
    int n;
};

static void set_add(struct field_set *fs, const char *path)
{
    for (int i = 0; i < fs->n; i++)
        if (strcmp(fs->path[i], path) == 0) {
            fs->count[i]++;
            return;
        }
    ck_assert_int_lt(fs->n, MAX_FIELDS);
    snprintf(fs->path[fs->n], sizeof fs->path[0], "%s", path);
    fs->count[fs->n++] = 1;
}

/* The body of "struct NAME {" ... matching "}" in text (comments removed). */
static char *struct_body(const char *text, const char *name)
{
    char open[96];
    snprintf(open, sizeof open, "struct %s {", name);
    const char *p = strstr(text, open);
    ck_assert_msg(p != NULL, "job.h has no %s", open);
    p += strlen(open);
    int depth = 1;
    const char *q = p;
    for (; *q && depth; q++)
        depth += *q == '{' ? 1 : *q == '}' ? -1 : 0;
    return strndup(p, (size_t)(q - 1 - p));
}

static const char *skip_ws(const char *p)
{
    while (*p == ' ' || *p == '\n' || *p == '\t')
        p++;
    return p;
}

/* The member names a struct body declares, as dotted paths under prefix:
 * "struct { ... } name;" nests, "struct ddpc_data_source name;" expands
 * source's members, "T a, b[N], *c;" declares a, b and c. */
static const char *item_src;   /* struct ddpc_layer_item's body */

static void body_fields(struct field_set *fs, const char *body, const char *source,
                        const char *prefix)
{
    const char *p = skip_ws(body);
    char pre[256];
    while (*p) {
        if (strncmp(p, "struct {", 8) == 0 || strncmp(p, "struct{", 7) == 0) {
            const char *b = strchr(p, '{') + 1, *q = b;
            int depth = 1;
            for (; *q && depth; q++)
                depth += *q == '{' ? 1 : *q == '}' ? -1 : 0;
            char *inner = strndup(b, (size_t)(q - 1 - b));
            const char *semi = strchr(q, ';');
            char name[64];
            ck_assert_int_eq(sscanf(q, " %63[A-Za-z0-9_]", name), 1);
            snprintf(pre, sizeof pre, "%s%s%s", prefix, prefix[0] ? "." : "", name);
            body_fields(fs, inner, source, pre);
            free(inner);
            p = skip_ws(semi + 1);
            continue;
        }
        const char *semi = strchr(p, ';');
        ck_assert_ptr_nonnull(semi);
        char decl[256];
        snprintf(decl, sizeof decl, "%.*s", (int)(semi - p), p);
        if (strncmp(decl, "struct ddpc_layer_item ", 23) == 0) {
            /* items[N]: the walk visits each used item; the test job has one */
            char *br = strchr(decl, '[');
            if (br)
                *br = '\0';
            snprintf(pre, sizeof pre, "%s%s%s[0]", prefix, prefix[0] ? "." : "",
                     (const char *)skip_ws(decl + 23));
            body_fields(fs, item_src, source, pre);
        } else if (strncmp(decl, "struct ddpc_data_source ", 24) == 0) {
            snprintf(pre, sizeof pre, "%s%s%s", prefix, prefix[0] ? "." : "",
                     (const char *)skip_ws(decl + 24));
            body_fields(fs, source, source, pre);
        } else {
            /* each declarator of "T a, b[N]": the last identifier before '[' */
            for (char *part = strtok(decl, ","); part; part = strtok(NULL, ",")) {
                char *br = strchr(part, '[');
                if (br)
                    *br = '\0';
                char *end = part + strlen(part);
                while (end > part && !(end[-1] == '_' || (end[-1] >= '0' && end[-1] <= '9') ||
                                       (end[-1] >= 'a' && end[-1] <= 'z') ||
                                       (end[-1] >= 'A' && end[-1] <= 'Z')))
                    *--end = '\0';
                char *start = end;
                while (start > part && (start[-1] == '_' || (start[-1] >= '0' && start[-1] <= '9') ||
                                        (start[-1] >= 'a' && start[-1] <= 'z') ||
                                        (start[-1] >= 'A' && start[-1] <= 'Z')))
                    start--;
                char path[128];
                snprintf(path, sizeof path, "%s%s%s", prefix, prefix[0] ? "." : "", start);
                set_add(fs, path);
            }
        }
        p = skip_ws(semi + 1);
    }
}

static void walk_collect(void *ctx, const struct ddpc_field *f, const char *path, const char *p,
                         const char *blk)
{
    (void)f;
    (void)p;
    (void)blk;
    set_add(ctx, path);
}

START_TEST(test_key_table_reaches_every_field)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/spec/job.h", test_top());
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "%s", path);
    static char text[1 << 16];
    size_t len = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[len] = '\0';
    /* drop comments */
    char *w = text;
    for (const char *r = text; *r;) {
        if (r[0] == '/' && r[1] == '*') {
            const char *e = strstr(r + 2, "*/");
            r = e ? e + 2 : r + strlen(r);
            *w++ = ' ';
        } else if (r[0] == '/' && r[1] == '/') {
            r += strcspn(r, "\n");
        } else {
            *w++ = *r++;
        }
    }
    *w = '\0';

    char *source = struct_body(text, "ddpc_data_source"), *job = struct_body(text, "ddpc_job");
    char *item = struct_body(text, "ddpc_layer_item");
    item_src = item;
    static struct field_set declared, walked;
    memset(&declared, 0, sizeof declared);
    memset(&walked, 0, sizeof walked);
    body_fields(&declared, job, source, "");
    struct ddpc_job j;
    memset(&j, 0, sizeof j);
    j.model.n_items = 1;   /* items[0]'s fields */
    ddpc_job_walk(&j, walk_collect, &walked);
    ck_assert_int_gt(declared.n, 50);   /* the parser found the struct */
    for (int i = 0; i < declared.n; i++) {
        int found = 0;
        for (int k = 0; k < walked.n; k++)
            if (strcmp(walked.path[k], declared.path[i]) == 0) {
                found = 1;
                ck_assert_msg(walked.count[k] == 1, "keys.def outputs %s %d times",
                              walked.path[k], walked.count[k]);
            }
        ck_assert_msg(found, "job.h field %s is not reached by keys.def: add its key row or "
                      "a DDPC_OUT row after the custom key that fills it", declared.path[i]);
    }
    for (int k = 0; k < walked.n; k++) {
        int found = 0;
        for (int i = 0; i < declared.n; i++)
            found |= strcmp(walked.path[k], declared.path[i]) == 0;
        ck_assert_msg(found, "keys.def outputs %s, which job.h does not declare", walked.path[k]);
    }
    free(source);
    free(job);
    free(item);
}
END_TEST

Suite *validate_suite(void)
{
    Suite *s = suite_create("validate");
    TCase *tc = tcase_create("validate");
    tcase_add_test(tc, test_defaults_filled);
    tcase_add_test(tc, test_devices_forms);
    tcase_add_test(tc, test_value_forms);
    tcase_add_test(tc, test_paths_resolved);
    tcase_add_test(tc, test_did_you_mean);
    tcase_add_test(tc, test_cross_rules);
    tcase_add_test(tc, test_check_knows_what_the_job_refuses);
    tcase_add_test(tc, test_type_specific_keys);
    tcase_add_test(tc, test_data_headers);
    tcase_add_test(tc, test_token_scan_bound);
    tcase_add_test(tc, test_data_cache);
    tcase_add_test(tc, test_lightning_values);
    tcase_add_test(tc, test_other_tools_keys);
    tcase_add_test(tc, test_alias_table_consistent);
    tcase_add_test(tc, test_more_tools_keys);
    tcase_add_test(tc, test_rule_codes_are_stable);
    tcase_add_test(tc, test_lr_scaling_rule);
    tcase_add_test(tc, test_key_table_consistent);
    tcase_add_test(tc, test_key_table_reaches_every_field);
    tcase_add_test(tc, test_output_formats);
    tcase_add_test(tc, test_schema_generated);
    suite_add_tcase(s, tc);
    return s;
}
