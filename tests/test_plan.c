/* test_plan.c - the plan's numbers for jobs whose answers are known by hand.
 *
 * Jobs are built directly as struct ddpc_job (no YAML), so these tests pin
 * plan.c's arithmetic alone: shards, steps, global batch, scaled learning
 * rate and schedule points, buckets, memory, communicators, checkpoints and
 * launch commands, and the data-header readers. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <check.h>
#include "suites.h"
#include "testutil.h"
#include "plan.h"
#include "spec.h"
#include "sampler.h"    /* the runtime's sampler: the plan must agree with it */

/* The Fashion-MNIST example with synthetic data of 60000 samples, so no
 * test depends on a data file. */
static struct ddpc_job fmnist(void)
{
    struct ddpc_job j;
    memset(&j, 0, sizeof j);
    j.version = 1;
    j.name = "fashion-mnist";
    j.n_devices = 2;
    j.devices[0] = 0;
    j.devices[1] = 1;
    j.seed = 42;
    j.epochs = 3;
    j.learning_rate = 0.001;
    j.batch_size = 64;
    j.grad_accumulation = 1;
    j.limit_train_fraction = 1.0;
    j.bucket_cap_mb = 25;
    j.nccl_timeout_s = 1800;
    j.rank_sync_timeout_s = 300;
    j.model.n_layers = 3;
    j.model.layers[0] = 784;
    j.model.layers[1] = 256;
    j.model.layers[2] = 10;
    j.data.train.format = DDPC_DATA_SYNTHETIC;
    j.data.train.samples = 60000;
    j.data.train.features = 784;
    j.data.train.classes = 10;
    j.data.has_test = 1;
    j.data.test = j.data.train;
    j.data.test.samples = 10000;
    j.data.shuffle = 1;
    j.optimizer.type = DDPC_OPTIM_ADAM;
    j.optimizer.beta1 = 0.9;
    j.optimizer.beta2 = 0.999;
    j.optimizer.eps = 1e-8;
    j.schedule.warmup_start_factor = 1.0;
    j.schedule.gamma = 0.1;
    j.logging.every_n_steps = 50;
    j.launch.num_nodes = 1;
    j.launch.master_addr = "127.0.0.1";
    j.launch.master_port = 29500;
    return j;
}

static void build(const struct ddpc_job *j, struct ddpc_plan *p)
{
    struct ddpc_diag d;
    diag_init(&d);
    int rc = plan_build(j, NULL, p, &d);
    ck_assert_msg(rc == 0, "plan_build failed: %s", d.n ? d.v[0].message : "?");
    diag_free(&d);
}

/* The text `ddpc plan` prints for p; the caller frees it. */
static char *plan_text(const struct ddpc_plan *p, const struct ddpc_job *j)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(plan_write_text(p, j, f), 0);
    ck_assert_int_eq(fclose(f), 0);
    return text;
}

START_TEST(shards_padded)
{
    struct ddpc_job j = fmnist();
    struct ddpc_plan p;
    build(&j, &p);
    ck_assert_int_eq(p.world_size, 2);
    ck_assert_int_eq(p.train_samples, 60000);
    ck_assert_int_eq(p.samples_per_rank, 30000);
    ck_assert_int_eq(p.padded_samples, 0);
    ck_assert_int_eq(p.batches_per_epoch, 469);          /* ceil(30000 / 64) */
    ck_assert_int_eq(p.last_batch_size, 30000 - 468 * 64);
    ck_assert_int_eq(p.optimizer_steps_per_epoch, 469);
    ck_assert_int_eq(p.total_optimizer_steps, 3 * 469);
    ck_assert_int_eq(p.global_batch, 128);
    plan_free(&p);

    /* 10 samples over 4 ranks: ceil(10/4) = 3 each, 2 repeated */
    j.data.train.samples = 10;
    j.n_devices = 4;
    for (int i = 0; i < 4; i++)
        j.devices[i] = i;
    j.batch_size = 2;
    build(&j, &p);
    ck_assert_int_eq(p.samples_per_rank, 3);
    ck_assert_int_eq(p.padded_samples, 2);
    ck_assert_int_eq(p.batches_per_epoch, 2);
    ck_assert_int_eq(p.last_batch_size, 1);
    plan_free(&p);
}
END_TEST

START_TEST(shards_drop_last)
{
    struct ddpc_job j = fmnist();
    struct ddpc_plan p;
    j.data.train.samples = 60001;
    j.data.drop_last = 1;
    build(&j, &p);
    ck_assert_int_eq(p.samples_per_rank, 30000);
    ck_assert_int_eq(p.dropped_samples, 1);
    ck_assert_int_eq(p.batches_per_epoch, 468);          /* floor(30000 / 64) */
    ck_assert_int_eq(p.last_batch_size, 64);
    plan_free(&p);
}
END_TEST

START_TEST(limits_and_accumulation)
{
    struct ddpc_job j = fmnist();
    struct ddpc_plan p;
    j.limit_train_batches = 10;
    build(&j, &p);
    ck_assert_int_eq(p.full_batches_per_epoch, 469);
    ck_assert_int_eq(p.batches_per_epoch, 10);
    ck_assert_int_eq(p.last_batch_size, 64);
    plan_free(&p);

    j.limit_train_batches = 0;
    j.limit_train_fraction = 0.5;
    build(&j, &p);
    ck_assert_int_eq(p.batches_per_epoch, 234);          /* floor(0.5 x 469) */
    plan_free(&p);

    j.limit_train_fraction = 1.0;
    j.grad_accumulation = 3;
    build(&j, &p);
    ck_assert_int_eq(p.optimizer_steps_per_epoch, 157);  /* ceil(469 / 3) */
    ck_assert_int_eq(p.global_batch, 64 * 2 * 3);
    plan_free(&p);
}
END_TEST

START_TEST(lr_scaling)
{
    struct ddpc_job j = fmnist();
    struct ddpc_plan p;
    j.learning_rate = 0.1;
    j.n_devices = 4;
    for (int i = 0; i < 4; i++)
        j.devices[i] = i;
    j.grad_accumulation = 2;
    j.lr_scaling = DDPC_LR_SCALING_LINEAR;
    build(&j, &p);
    ck_assert_double_eq(p.lr_factor, 8.0);
    ck_assert_double_eq_tol(p.lr_peak, 0.8, 1e-15);
    plan_free(&p);

    j.lr_scaling = DDPC_LR_SCALING_SQRT;
    build(&j, &p);
    ck_assert_double_eq_tol(p.lr_peak, 0.1 * sqrt(8.0), 1e-15);
    plan_free(&p);

    j.lr_scaling = DDPC_LR_SCALING_NONE;
    build(&j, &p);
    ck_assert_double_eq(p.lr_peak, 0.1);
    plan_free(&p);
}
END_TEST

START_TEST(schedule_points)
{
    struct ddpc_job j = fmnist();
    struct ddpc_plan p;
    j.schedule.warmup_steps = 100;
    j.schedule.warmup_start_factor = 0.1;
    j.schedule.decay = DDPC_DECAY_COSINE;
    j.schedule.min_lr_factor = 0.01;
    build(&j, &p);
    /* in step order: start, warmup end, midpoint, last step, cosine end
     * (one past the last step the run takes) */
    ck_assert_int_eq(p.n_lr_points, 5);
    for (int i = 1; i < p.n_lr_points; i++)
        ck_assert_int_le(p.lr_points[i - 1].step, p.lr_points[i].step);
    ck_assert_int_eq(p.lr_points[0].step, 0);
    ck_assert_double_eq_tol(p.lr_points[0].lr, 0.0001, 1e-18);
    ck_assert_int_eq(p.lr_points[1].step, 100);
    ck_assert_double_eq(p.lr_points[1].lr, 0.001);
    ck_assert_int_eq(p.lr_points[3].step, 1406);
    ck_assert_str_eq(p.lr_points[3].what, "last step");
    ck_assert_int_eq(p.lr_points[4].step, 1407);
    ck_assert_double_eq_tol(p.lr_points[4].lr, 0.00001, 1e-18);
    plan_free(&p);

    j.schedule.warmup_steps = 0;
    j.schedule.decay = DDPC_DECAY_STEP;
    j.schedule.step_size = 500;
    j.schedule.gamma = 0.5;
    build(&j, &p);
    ck_assert_int_eq(p.lr_points[1].step, 500);
    ck_assert_double_eq_tol(p.lr_points[1].lr, 0.0005, 1e-18);
    ck_assert_int_eq(p.lr_points[2].step, 1000);
    ck_assert_double_eq_tol(p.lr_points[2].lr, 0.00025, 1e-18);
    /* the last step, 1406, is after two decays */
    ck_assert_int_eq(p.lr_points[p.n_lr_points - 1].step, 1406);
    ck_assert_double_eq_tol(p.lr_points[p.n_lr_points - 1].lr, 0.00025, 1e-18);
    plan_free(&p);
}
END_TEST

START_TEST(params_and_buckets)
{
    struct ddpc_job j = fmnist();
    struct ddpc_plan p;
    build(&j, &p);
    ck_assert_int_eq(p.n_params, 4);
    ck_assert_str_eq(p.params[0].name, "W0");
    ck_assert_int_eq(p.params[0].rows, 256);
    ck_assert_int_eq(p.params[0].cols, 784);
    ck_assert_int_eq(p.params[1].numel, 256);
    ck_assert_int_eq(p.params[2].offset, 200704 + 256);
    ck_assert_int_eq(p.params[3].numel, 10);
    ck_assert_int_eq(p.total_params, 203530);
    /* 25 MiB holds everything: one bucket, filled from b1 backward */
    ck_assert_int_eq(p.bucket_cap_bytes, 25 * 1024 * 1024);
    ck_assert_int_eq(p.n_buckets, 1);
    ck_assert_int_eq(p.buckets[0].n, 4);
    ck_assert_int_eq(p.buckets[0].params[0], 3);
    ck_assert_int_eq(p.buckets[0].params[3], 0);
    ck_assert_int_eq(p.buckets[0].bytes, 203530 * 4);
    plan_free(&p);

    /* 0.01 MiB = 10485.76 B: b1 (40) + W1 (10240) + b0 (1024) reach it, W0 alone */
    j.bucket_cap_mb = 0.01;
    build(&j, &p);
    ck_assert_int_eq(p.bucket_cap_bytes, 10486);
    ck_assert_int_eq(p.n_buckets, 2);
    ck_assert_int_eq(p.buckets[0].n, 3);
    ck_assert_int_eq(p.buckets[0].bytes, 40 + 10240 + 1024);
    ck_assert_int_eq(p.buckets[1].n, 1);
    ck_assert_int_eq(p.buckets[1].params[0], 0);
    ck_assert_int_eq(p.buckets[1].bytes, 802816);
    plan_free(&p);

    /* exactly at the cap closes the bucket: 40 + 10240 B */
    j.bucket_cap_mb = 10280.0 / (1024 * 1024);
    build(&j, &p);
    ck_assert_int_eq(p.n_buckets, 2);
    ck_assert_int_eq(p.buckets[0].bytes, 10280);
    ck_assert_int_eq(p.buckets[1].n, 2);      /* b0 alone is under the cap, so W0 joins */
    ck_assert_int_eq(p.buckets[1].bytes, 1024 + 802816);
    plan_free(&p);

    /* no cap: one bucket, as the runtime does */
    j.bucket_cap_mb = 0;
    build(&j, &p);
    ck_assert_int_eq(p.n_buckets, 1);
    plan_free(&p);
}
END_TEST

START_TEST(memory)
{
    struct ddpc_job j = fmnist();
    struct ddpc_plan p;
    build(&j, &p);
    ck_assert_int_eq(p.optim_states, 2);
    ck_assert_int_eq(p.mem_params, 814120);
    ck_assert_int_eq(p.mem_grads, 814120);
    ck_assert_int_eq(p.mem_optim, 2 * 814120);
    /* activations of the evaluation's 512 rows, more than the batch's 64
     * (the worker's buffers hold the larger: test_ddp
     * plan_counts_what_the_worker_reserves) */
    ck_assert_int_eq(p.buffer_rows, 512);
    ck_assert_int_eq(p.activation_floats, 512 * 1050 * 2);
    ck_assert_int_eq(p.mem_activations, 512 * 1050 * 2 * 4);
    ck_assert_int_eq(p.mem_comm, 814120);
    ck_assert_int_eq(p.mem_total, 814120 * 5 + 512 * 1050 * 2 * 4);
    char *text = plan_text(&p, &j);
    ck_assert_msg(strstr(text, "activations     512 evaluation rows (> batch 64) x 1050 layer "
                               "units x 2 x 4 B = 4300800 B"), "%s", text);
    free(text);
    plan_free(&p);
    /* without a test set, the batch's */
    j.data.has_test = 0;
    build(&j, &p);
    ck_assert_int_eq(p.buffer_rows, 64);
    ck_assert_int_eq(p.activation_floats, 64 * 1050 * 2);
    text = plan_text(&p, &j);
    ck_assert_msg(strstr(text, "activations     64 batch x 1050 layer units x 2 x 4 B = 537600 B"),
                  "%s", text);
    free(text);
    plan_free(&p);
    j.data.has_test = 1;

    j.optimizer.type = DDPC_OPTIM_SGD;
    build(&j, &p);
    ck_assert_int_eq(p.optim_states, 0);
    ck_assert_int_eq(p.mem_optim, 0);
    plan_free(&p);
    j.optimizer.momentum = 0.9;
    build(&j, &p);
    ck_assert_int_eq(p.optim_states, 1);
    plan_free(&p);

    /* one device: no communicators, no comm buffer */
    j.n_devices = 1;
    build(&j, &p);
    ck_assert_int_eq(p.mem_comm, 0);
    ck_assert_int_eq(p.grad_comm, 0);
    ck_assert_int_eq(p.sync_comm, 0);
    plan_free(&p);
}
END_TEST

START_TEST(comms_and_checkpoints)
{
    struct ddpc_job j = fmnist();
    struct ddpc_plan p;
    build(&j, &p);
    ck_assert_int_eq(p.grad_comm, 1);
    ck_assert_int_eq(p.sync_comm, 1);
    ck_assert_double_eq(p.grad_timeout_s, 1800);
    ck_assert_double_eq(p.sync_timeout_s, 300);
    ck_assert_int_eq(p.ckpt_enabled, 0);
    plan_free(&p);

    j.rank_sync_timeout_s = 0;
    j.checkpoint_dir = "ckpt";
    j.epochs = 10;
    j.checkpoint.every_n_epochs = 3;
    build(&j, &p);
    ck_assert_int_eq(p.sync_comm, 0);
    ck_assert_int_eq(p.ckpt_enabled, 1);
    ck_assert_int_eq(p.ckpt_saves, 4);           /* epochs 3, 6, 9 and the end */
    ck_assert_int_eq(p.ckpt_bytes, 814120 * 3);  /* params + Adam's two moments */
    plan_free(&p);

    /* every_n_steps 469 (one epoch): a save at every epoch's end, each
     * merged with the epoch cadence's; every 1000 steps over 4690: 4 mid-
     * epoch saves plus the 4 epoch ones */
    j.checkpoint.every_n_steps = 469;
    build(&j, &p);
    ck_assert_int_eq(p.ckpt_saves, 10);
    plan_free(&p);
    j.checkpoint.every_n_steps = 1000;
    build(&j, &p);
    ck_assert_int_eq(p.ckpt_saves, 8);
    plan_free(&p);
}
END_TEST

START_TEST(ranks_and_launch)
{
    struct ddpc_job j = fmnist();
    struct ddpc_plan p;
    build(&j, &p);
    ck_assert_int_eq(p.n_commands, 1);
    ck_assert_str_eq(p.commands[0], "./fashion-mnist");
    plan_free(&p);

    j.launch.num_nodes = 2;
    j.devices[0] = 2;
    j.devices[1] = 3;
    j.launch.master_addr = "node 0";    /* quoted in the command */
    build(&j, &p);
    ck_assert_int_eq(p.world_size, 4);
    ck_assert_int_eq(p.ranks[3].node, 1);
    ck_assert_int_eq(p.ranks[3].local_rank, 1);
    ck_assert_int_eq(p.ranks[3].device, 3);
    ck_assert_int_eq(p.ranks[2].device, 2);
    ck_assert_int_eq(p.n_commands, 2);
    ck_assert_str_eq(p.commands[1], "./fashion-mnist --node-rank 1 --master node' '0:29500");
    ck_assert_int_eq(p.n_node_commands, 0);
    ck_assert_int_eq(p.samples_per_rank, 15000);
    ck_assert_int_eq(p.ports_fixed, 1);
    plan_free(&p);

    /* slurm: the sbatch line, and the same launch by hand, one per node */
    j.launch.launcher = DDPC_LAUNCHER_SLURM;
    build(&j, &p);
    ck_assert_int_eq(p.n_commands, 1);
    ck_assert_str_eq(p.commands[0], "sbatch ./fashion-mnist.sbatch");
    ck_assert_int_eq(p.n_node_commands, 2);
    ck_assert_str_eq(p.node_commands[0], "./fashion-mnist --node-rank 0 --master node' '0:29500");
    ck_assert_str_eq(p.node_commands[1], "./fashion-mnist --node-rank 1 --master node' '0:29500");
    plan_free(&p);
    /* no master_addr: the script takes the allocation's first node */
    j.launch.master_addr = NULL;
    build(&j, &p);
    ck_assert_str_eq(p.node_commands[1], "./fashion-mnist --node-rank 1 --master \"$MASTER\":29500");
    plan_free(&p);
    j.launch.master_addr = "node 0";

    /* devices: all: the world is counted at run time */
    j.launch.launcher = DDPC_LAUNCHER_LOCAL;
    j.launch.num_nodes = 1;
    j.devices_all = 1;
    j.n_devices = 0;
    build(&j, &p);
    ck_assert_int_eq(p.world_known, 0);
    ck_assert_int_eq(p.global_batch, -1);
    ck_assert_int_eq(p.samples_per_rank, -1);
    ck_assert(isnan(p.lr_peak) == 0);          /* scaling none: still known */
    char *json = plan_json(&p, &j);
    ck_assert_ptr_nonnull(json);
    ck_assert_ptr_nonnull(strstr(json, "\"size\": null"));
    free(json);
    plan_free(&p);
}
END_TEST

/* Each rank's shard in the rank table (text and JSON); the rendezvous as
 * the runtime does it; bf16 gemm input copies in the memory estimate. */
START_TEST(ranks_shards_rendezvous_memory)
{
    struct ddpc_job j = fmnist();
    struct ddpc_plan p;
    j.accelerator = DDPC_ACCEL_CPU;
    build(&j, &p);
    ck_assert_int_eq(p.ports_fixed, 0);
    ck_assert_ptr_nonnull(strstr(p.rendezvous, "shared memory"));
    ck_assert_int_eq(p.mem_cast, 0);
    char *json = plan_json(&p, &j);
    ck_assert_ptr_nonnull(json);
    ck_assert_ptr_nonnull(strstr(json, "{\"rank\": 1, \"node\": 0, \"local_rank\": 1, "
                                       "\"device\": 1, \"samples\": 30000, "
                                       "\"batches_per_epoch\": 469, "
                                       "\"optimizer_steps_per_epoch\": 469}"));
    ck_assert_ptr_nonnull(strstr(json, "\"port\": null"));
    free(json);
    char *text = plan_text(&p, &j);
    ck_assert_msg(strstr(text, "shard samples  batches/epoch  steps/epoch") &&
                  strstr(text, "     1     0      1           1          30000            469"
                               "          469\n"), "%s", text);
    ck_assert_ptr_null(strstr(text, "port 29500"));
    free(text);
    plan_free(&p);

    /* one node of GPUs: the store on a port picked at launch, not the spec's */
    j.accelerator = DDPC_ACCEL_GPU;
    j.precision = DDPC_PRECISION_BF16;
    build(&j, &p);
    ck_assert_ptr_nonnull(strstr(p.rendezvous, "free loopback port picked at launch"));
    /* 784-256-10 at batch 64, evaluated 512 rows at a time: two cast
     * buffers of 512 x 784 (the input, the widest operand; test_ddp's
     * plan_counts_what_the_worker_reserves: the worker's own figure) and
     * the parameters' bf16 copy */
    ck_assert_int_eq(p.cast_a_elems, 512 * 784);
    ck_assert_int_eq(p.cast_b_elems, 512 * 784);
    ck_assert_int_eq(p.mem_cast, 2 * 512 * 784 * 2);
    ck_assert_int_eq(p.mem_weights_lo, p.total_params * 2);
    ck_assert_int_eq(p.mem_total, p.mem_params + p.mem_grads + p.mem_optim +
                                  p.mem_activations + p.mem_comm + p.mem_cast +
                                  p.mem_weights_lo);
    char *gtext = plan_text(&p, &j);
    ck_assert_msg(strstr(gtext, "bf16 weights    203530 x 2 B (the parameters' copy) = ") &&
                  strstr(gtext, "bf16 casts      (401408 + 401408) x 2 B"), "%s", gtext);
    free(gtext);
    plan_free(&p);
}
END_TEST

START_TEST(json_is_ascii_and_escaped)
{
    struct ddpc_job j = fmnist();
    struct ddpc_plan p;
    j.name = "we\"ird\\name$(x)`y`\n\xc3\xa9";
    j.checkpoint_dir = "d#*/";
    struct ddpc_diag d;
    diag_init(&d);
    ck_assert_int_eq(plan_build(&j, "./a b", &p, &d), 0);
    diag_free(&d);
    char *json = plan_json(&p, &j);
    ck_assert_ptr_nonnull(json);
    for (const unsigned char *c = (const unsigned char *)json; *c; c++)
        ck_assert_msg((*c >= 0x20 && *c < 0x7f) || *c == '\n', "byte 0x%02x in JSON", *c);
    ck_assert_ptr_nonnull(strstr(json, "\"job\": \"we\\\"ird\\\\name\\u0024(x)\\u0060y\\u0060\\u000a\\u00e9\""));
    ck_assert_ptr_nonnull(strstr(json, "\"dir\": \"d\\u0023\\u002a/\""));
    ck_assert_ptr_nonnull(strstr(json, "\"commands\": [\"./a\\u0027 \\u0027b\"]"));
    ck_assert_ptr_null(strchr(json, '$'));
    free(json);
    plan_free(&p);
}
END_TEST

/* ---- sample counts from data headers ---- */

/* Token streams: the plan's samples are training windows of T + 1 in the
 * range, from file sizes and shard headers, as the job cuts them. */
START_TEST(count_token_windows)
{
    char *dir = make_temp_dir("plan");
    char path[512], why[320];
    /* 100 bytes of text: 100 / 9 = 11 windows of T = 8; range [0, 0.5]: 50 / 9 = 5 */
    snprintf(path, sizeof path, "%s/t.txt", dir);
    char txt[100];
    memset(txt, 'a', sizeof txt);
    ck_assert_int_eq(write_file(path, txt, sizeof txt), 0);
    struct ddpc_data_source s = { .format = DDPC_DATA_TEXT, .path = path, .range_lo = 0,
                                  .range_hi = 1 };
    ck_assert_int_eq(plan_count_samples(&s, why, sizeof why), -1);
    ck_assert_int_eq(plan_count_windows(&s, 8, 9, why, sizeof why), 11);
    ck_assert_msg(strstr(why, "windows of 9 tokens in 100 tokens of") != NULL, "%s", why);
    s.range_hi = 0.5;
    ck_assert_int_eq(plan_count_windows(&s, 8, 9, why, sizeof why), 5);
    ck_assert_msg(strstr(why, "(range [0, 0.5])") != NULL, "%s", why);
    /* two shards of 30 tokens by a pattern: 60 / 9 = 6; test stride 8: 59 / 8 = 7 */
    unsigned char sh[1024 + 60];
    memset(sh, 0, sizeof sh);
    const unsigned char hdr[12] = { 0x88, 0xd8, 0x34, 0x01, 1, 0, 0, 0, 30, 0, 0, 0 };
    memcpy(sh, hdr, sizeof hdr);
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/s_%d.bin", dir, i);
        ck_assert_int_eq(write_file(path, sh, sizeof sh), 0);
    }
    snprintf(path, sizeof path, "%s/s_*.bin", dir);
    s = (struct ddpc_data_source){ .format = DDPC_DATA_TOKENS, .path = path, .range_lo = 0,
                                   .range_hi = 1 };
    ck_assert_int_eq(plan_count_windows(&s, 8, 9, why, sizeof why), 6);
    ck_assert_msg(strstr(why, "(2 files)") != NULL, "%s", why);
    ck_assert_int_eq(plan_count_windows(&s, 8, 8, why, sizeof why), 7);
    /* a bad shard: unknown, with the reason */
    sh[0] = 0;
    snprintf(path, sizeof path, "%s/s_1.bin", dir);
    ck_assert_int_eq(write_file(path, sh, sizeof sh), 0);
    snprintf(path, sizeof path, "%s/s_*.bin", dir);
    ck_assert_int_eq(plan_count_windows(&s, 8, 9, why, sizeof why), -1);
    ck_assert_msg(strstr(why, "s_1.bin' is not an llm.c token shard") != NULL, "%s", why);
    rm_tree(dir);
    free(dir);
}
END_TEST


START_TEST(count_idx_gz_npy_csv)
{
    char *dir = make_temp_dir("plan");
    char path[512], why[320];
    struct ddpc_data_source s = { .format = DDPC_DATA_IDX };

    /* IDX, gzipped: 0 0 0x08 3, then 123 x 28 x 28 */
    snprintf(path, sizeof path, "%s/x.idx3.gz", dir);
    gzFile g = gzopen(path, "wb");
    ck_assert_ptr_nonnull(g);
    unsigned char h[16] = { 0, 0, 8, 3, 0, 0, 0, 123, 0, 0, 0, 28, 0, 0, 0, 28 };
    ck_assert_int_eq(gzwrite(g, h, sizeof h), (int)sizeof h);
    ck_assert_int_eq(gzclose(g), Z_OK);
    s.inputs = path;
    ck_assert_int_eq(plan_count_samples(&s, why, sizeof why), 123);

    /* the same, uncompressed, 70000 samples */
    snprintf(path, sizeof path, "%s/x.idx3", dir);
    unsigned char h2[16] = { 0, 0, 8, 3, 0, 1, 0x11, 0x70, 0, 0, 0, 28, 0, 0, 0, 28 };
    ck_assert_int_eq(write_file(path, h2, sizeof h2), 0);
    ck_assert_int_eq(plan_count_samples(&s, why, sizeof why), 70000);

    /* bad magic and a missing file: unknown, with a reason */
    unsigned char bad[8] = { 'P', 'K', 3, 4, 0, 0, 0, 1 };
    ck_assert_int_eq(write_file(path, bad, sizeof bad), 0);
    ck_assert_int_eq(plan_count_samples(&s, why, sizeof why), -1);
    ck_assert_ptr_nonnull(strstr(why, "not an IDX file"));
    s.inputs = "/nonexistent/ddpc/x.gz";
    ck_assert_int_eq(plan_count_samples(&s, why, sizeof why), -1);
    ck_assert_ptr_nonnull(strstr(why, "No such file or directory"));

    /* NPY v1 */
    snprintf(path, sizeof path, "%s/x.npy", dir);
    const char dict[] = "{'descr': '<f4', 'fortran_order': False, 'shape': (321, 16), }";
    char npy[128];
    size_t hl = 128 - 10;
    memset(npy, ' ', sizeof npy);
    memcpy(npy, "\x93NUMPY\x01\x00", 8);
    npy[8] = (char)(hl & 0xff);
    npy[9] = (char)(hl >> 8);
    memcpy(npy + 10, dict, sizeof dict - 1);
    npy[127] = '\n';
    ck_assert_int_eq(write_file(path, npy, sizeof npy), 0);
    s.format = DDPC_DATA_NPY;
    s.inputs = path;
    ck_assert_int_eq(plan_count_samples(&s, why, sizeof why), 321);

    /* CSV with a header line and a blank line */
    snprintf(path, sizeof path, "%s/x.csv", dir);
    const char csv[] = "a,b,label\n1,2,0\n3,4,1\n\n5,6,1";
    ck_assert_int_eq(write_file(path, csv, sizeof csv - 1), 0);
    s.format = DDPC_DATA_CSV;
    s.path = path;
    ck_assert_int_eq(plan_count_samples(&s, why, sizeof why), 3);
    /* pandas' header of column numbers, and a byte order mark before a
     * data line: both as the loader reads them (runtime/data.c) */
    const char pandas[] = "0,1,2\n1,2,0\n3,4,1\n";
    ck_assert_int_eq(write_file(path, pandas, sizeof pandas - 1), 0);
    ck_assert_int_eq(plan_count_samples(&s, why, sizeof why), 2);
    const char bom[] = "\xef\xbb\xbf" "1,2,0\n3,4,1\n";
    ck_assert_int_eq(write_file(path, bom, sizeof bom - 1), 0);
    ck_assert_int_eq(plan_count_samples(&s, why, sizeof why), 2);

    /* gzipped CSV, CRLF, no header ("nan" and " 1e3" are numbers to strtod,
     * as to the runtime), and a line longer than gzgets' chunk */
    snprintf(path, sizeof path, "%s/y.csv.gz", dir);
    g = gzopen(path, "wb");
    ck_assert_ptr_nonnull(g);
    ck_assert_int_gt(gzputs(g, "nan, 1e3,0\r\n1,2,1\r\n"), 0);
    for (int i = 0; i < 3000; i++)
        ck_assert_int_gt(gzputs(g, "1.2345,"), 0);
    ck_assert_int_gt(gzputs(g, "0\n\n"), 0);
    ck_assert_int_eq(gzclose(g), Z_OK);
    s.path = path;
    ck_assert_int_eq(plan_count_samples(&s, why, sizeof why), 3);

    rm_tree(dir);
    free(dir);
}
END_TEST

START_TEST(count_fashion_mnist)
{
    const char *f = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz";
    FILE *probe = fopen(f, "rb");
    if (!probe) {
        test_skip("count_fashion_mnist", "%s not installed", f);
        return;
    }
    fclose(probe);
    struct ddpc_data_source s = { .format = DDPC_DATA_IDX, .inputs = f };
    char why[320];
    ck_assert_int_eq(plan_count_samples(&s, why, sizeof why), 60000);
}
END_TEST


/* The plan's shard and batch counts equal what the runtime's sampler does,
 * over a grid of sizes, world sizes, batch sizes, drop_last and limits. */
START_TEST(agrees_with_runtime_sampler)
{
    static const int64_t ns[] = { 1, 7, 10, 63, 64, 65, 1000, 60000 };
    static const int worlds[] = { 1, 2, 3, 4, 8 };
    static const int batches[] = { 1, 3, 64 };
    static const int64_t limits[] = { 0, 1, 5 };
    static const double fractions[] = { 1.0, 0.5, 0.01 };
    int checked = 0;
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
    for (size_t b = 0; b < sizeof worlds / sizeof worlds[0]; b++)
    for (size_t c = 0; c < sizeof batches / sizeof batches[0]; c++)
    for (int drop = 0; drop < 2; drop++)
    for (size_t l = 0; l < sizeof limits / sizeof limits[0]; l++)
    for (size_t f = 0; f < sizeof fractions / sizeof fractions[0]; f++) {
        if (drop && ns[a] < worlds[b])
            continue;                     /* nothing per rank: the spec rejects it */
        struct ddpc_job j = fmnist();
        j.data.train.samples = ns[a];
        j.n_devices = worlds[b];
        for (int i = 0; i < worlds[b]; i++)
            j.devices[i] = i;
        j.batch_size = batches[c];
        j.data.drop_last = drop;
        j.limit_train_batches = limits[l];
        j.limit_train_fraction = fractions[f];
        struct ddpc_plan p;
        build(&j, &p);
        struct ddpc_sampler smp;
        struct ddpc_err e = { 0 };
        if (sampler_init(&smp, ns[a], 0, worlds[b], batches[c], 1, drop, 1, limits[l],
                         fractions[f], &e) != 0) {
            plan_free(&p);
            continue;                     /* the runtime refuses it too */
        }
        ck_assert_msg(p.samples_per_rank == smp.num_samples &&
                      p.batches_per_epoch == smp.n_batches,
                      "n=%lld W=%d bs=%d drop=%d limit=%lld frac=%g: plan %lld/%lld, "
                      "sampler %lld/%lld", (long long)ns[a], worlds[b], batches[c], drop,
                      (long long)limits[l], fractions[f], (long long)p.samples_per_rank,
                      (long long)p.batches_per_epoch, (long long)smp.num_samples,
                      (long long)smp.n_batches);
        /* and the last batch's size */
        sampler_set_epoch(&smp, 0);
        if (smp.n_batches > 0) {
            const int64_t *idx;
            int rows = sampler_batch(&smp, smp.n_batches - 1, &idx);
            ck_assert_int_eq(p.last_batch_size, rows);
        }
        sampler_free(&smp);
        plan_free(&p);
        checked++;
    }
    ck_assert_int_gt(checked, 500);
}
END_TEST

START_TEST(text_output)
{
    struct ddpc_job j = fmnist();
    struct ddpc_plan p;
    build(&j, &p);
    char *text = plan_text(&p, &j);
    ck_assert_ptr_nonnull(strstr(text, "world size      2 = 1 node x 2 devices"));
    ck_assert_ptr_nonnull(strstr(text, "30000 samples per rank"));
    ck_assert_ptr_nonnull(strstr(text, "bucket 0: b1 W1 b0 W0"));
    ck_assert_ptr_nonnull(strstr(text, "./fashion-mnist"));
    free(text);
    plan_free(&p);
}
END_TEST

/* The JSON plan lists examples/fashion-mnist-cnn.yaml's layers with the text
 * plan's numbers: module, type, output shape, parameters, forward and
 * backward FLOPs and activation bytes per sample, each parsed back and
 * compared with the value worked out by hand (conv: 2 x MACs + bias adds
 * forward, 4 x MACs + bias adds backward; activations: output and its
 * gradient in fp32, plus the argmax for max pooling). The example's IDX
 * files need not exist: its data block is replaced by synthetic data and
 * its input given. */
START_TEST(json_layers_of_example_cnn)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/examples/fashion-mnist-cnn.yaml", test_top());
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "%s", path);
    static char text[16384];
    size_t n = fread(text, 1, sizeof text - 1, f);
    ck_assert_int_eq(fclose(f), 0);
    text[n] = 0;
    char *data = strstr(text, "\ndata:\n");
    char *type = strstr(text, "  type: sequential\n");
    ck_assert(data && type && type < data);
    data[1] = 0;
    type += strlen("  type: sequential\n");
    char *yaml = NULL;
    ck_assert_int_ge(asprintf(&yaml, "%.*s  input: [1, 28, 28]\n%sdata:\n  train: {format: "
                              "synthetic, samples: 640, features: 784, classes: 10}\n",
                              (int)(type - text), text, type), 0);
    char *dir = make_temp_dir("plan-cnn"), *spec = NULL;
    ck_assert_ptr_nonnull(dir);
    ck_assert_int_ge(asprintf(&spec, "%s/cnn.yaml", dir), 0);
    ck_assert_int_eq(write_file(spec, yaml, strlen(yaml)), 0);
    struct ddpc_job j;
    struct spec_doc *doc = NULL;
    test_load_job(spec, &j, &doc);
    struct ddpc_plan p;
    build(&j, &p);
    char *json = plan_json(&p, &j);
    ck_assert_ptr_nonnull(json);

    static const struct {
        const char *layer, *out;
        long long params;
        double fwd, bwd;
        long long act;
    } want[] = {
        { "conv2d", "32, 28, 28", 320, 476672, 928256, 200704 },
        { "relu", "32, 28, 28", 0, 25088, 25088, 200704 },
        { "maxpool2d", "32, 14, 14", 0, 25088, 25088, 75264 },
        { "conv2d", "64, 14, 14", 18496, 7237888, 14463232, 100352 },
        { "batchnorm2d", "64, 14, 14", 128, 50176, 100352, 100352 },
        { "relu", "64, 14, 14", 0, 12544, 12544, 100352 },
        { "maxpool2d", "64, 7, 7", 0, 12544, 12544, 37632 },
        { "flatten", "3136", 0, 0, 0, 25088 },
        { "dropout", "3136", 0, 3136, 3136, 25088 },
        { "linear", "128", 401536, 802944, 1605760, 1024 },
        { "relu", "128", 0, 128, 128, 1024 },
        { "linear", "10", 1290, 2570, 5130, 80 },
    };
    const int nl = (int)(sizeof want / sizeof want[0]);
    const char *at = strstr(json, ",\n  \"layers\": {\"per\": \"sample\", \"input\": [1, 28, 28], ");
    ck_assert_msg(at != NULL, "%s", json);
    double tf = 0, tb = 0, sum_f = 0, sum_b = 0;
    ck_assert_int_eq(sscanf(at, ",\n  \"layers\": {\"per\": \"sample\", \"input\": [1, 28, 28], "
                                "\"fwd_flops\": %lf, \"bwd_flops\": %lf, \"list\": [", &tf, &tb), 2);
    long long params_sum = 0;
    for (int k = 0; k < nl; k++) {
        char module[32], key[48], layer[32], out[64];
        snprintf(module, sizeof module, "layers.%d", k);
        snprintf(key, sizeof key, "{\"module\": \"%s\", ", module);
        const char *row = strstr(at, key);
        ck_assert_msg(row != NULL, "no row for %s in %s", module, at);
        long long params = -1, act = -1;
        double fwd = -1, bwd = -1;
        int got = sscanf(row + strlen(key), "\"layer\": \"%31[^\"]\", \"output\": [%63[^]]], "
                         "\"params\": %lld, \"fwd_flops\": %lf, \"bwd_flops\": %lf, "
                         "\"activation_bytes\": %lld}", layer, out, &params, &fwd, &bwd, &act);
        ck_assert_msg(got == 6, "%s: parsed %d fields of %.200s", module, got, row);
        ck_assert_str_eq(layer, want[k].layer);
        ck_assert_str_eq(out, want[k].out);
        ck_assert_int_eq(params, want[k].params);
        ck_assert_double_eq(fwd, want[k].fwd);
        ck_assert_double_eq(bwd, want[k].bwd);
        ck_assert_int_eq(act, want[k].act);
        params_sum += params;
        sum_f += fwd;
        sum_b += bwd;
    }
    /* no thirteenth row; the totals and the parameter count follow from the rows */
    ck_assert_ptr_null(strstr(at, "{\"module\": \"layers.12\""));
    ck_assert_double_eq(tf, sum_f);
    ck_assert_double_eq(tb, sum_b);
    ck_assert_int_eq(params_sum, p.total_params);
    char total[64];
    snprintf(total, sizeof total, "\"parameters\": {\"total\": %lld,", params_sum);
    ck_assert_ptr_nonnull(strstr(json, total));

    /* an mlp's plan has no layer list (its bytes are unchanged) */
    struct ddpc_job m = fmnist();
    struct ddpc_plan pm;
    build(&m, &pm);
    char *mj = plan_json(&pm, &m);
    ck_assert_ptr_nonnull(mj);
    ck_assert_ptr_null(strstr(mj, "\"layers\""));
    free(mj);
    plan_free(&pm);

    free(json);
    plan_free(&p);
    spec_doc_free(doc);
    rm_tree(dir);
    free(dir);
    free(spec);
    free(yaml);
}
END_TEST

/* GPT-2 124M on 8 GPUs, as the issue asks: nanoGPT's parameter count, the
 * FLOPs per token with attention (within 1% of nanoGPT's 6N + 12LTC), the
 * tokens per optimizer step, activation memory from the layer table. */
START_TEST(gpt2_124m_on_gpus)
{
    struct ddpc_job j = fmnist();
    j.model.type = DDPC_MODEL_GPT;
    j.model.n_layers = 0;
    j.model.vocab_size = 50257;
    j.model.block_size = 1024;
    j.model.n_layer = 12;
    j.model.n_head = 12;
    j.model.n_embd = 768;
    j.model.bias = 1;
    j.accelerator = DDPC_ACCEL_GPU;
    j.n_devices = 8;
    for (int i = 0; i < 8; i++)
        j.devices[i] = i;
    j.batch_size = 8;
    j.grad_accumulation = 4;
    j.optimizer.type = DDPC_OPTIM_ADAMW;
    struct ddpc_plan p;
    build(&j, &p);
    ck_assert_int_eq(p.total_params, 124439808);
    ck_assert_int_eq(p.world_size, 8);
    ck_assert_str_eq(p.params[0].name, "transformer.wte.weight");
    ck_assert_str_eq(p.params[0].shape, "[50257, 768]");
    /* outputs and gradients of every node, norm statistics, the kept
     * attention probabilities [12, 1024, 1024] per block: gigabytes */
    ck_assert_int_gt(p.mem_activations, (int64_t)8 * 12 * 12 * 1024 * 1024 * 4);
    char *text = plan_text(&p, &j);
    ck_assert_msg(strstr(text, "tokens per optimizer step: 32768 per device (batch 8 x "
                               "block_size 1024 x grad_accumulation 4), 262144 across 8 devices"),
                  "%s", text);
    ck_assert_msg(strstr(text, "lm_head") && strstr(text, "(weight tied to transformer.wte)"),
                  "%s", text);
    const char *pt = strstr(text, "per token: ");
    ck_assert_ptr_nonnull(pt);
    double per_tok = strtod(pt + 11, NULL);
    double nano = 6.0 * (124439808.0 - 1024 * 768) + 12.0 * 12 * 1024 * 768;
    ck_assert_double_lt(fabs(per_tok / nano - 1), 0.01);
    free(text);
    char *json = plan_json(&p, &j);
    ck_assert_ptr_nonnull(json);
    ck_assert_msg(strstr(json, "\"tokens_per_step_per_device\": 32768, \"tokens_per_step\": "
                               "262144}"), "%s", json);
    free(json);

    /* bf16 on GPUs: the CUDA backend fuses the attention (head size 64),
     * so each block keeps [12, 1024] log-sum-exps instead of the
     * probabilities, and the scratch shrinks alike (runtime/attn.h) */
    int64_t ht = 12 * 1024, saved = 8 * 4 * 13 * (ht * 1024 - ht);
    ck_assert_int_eq(p.attn_fused, 0);
    struct ddpc_plan pb;
    j.precision = DDPC_PRECISION_BF16;
    build(&j, &pb);
    ck_assert_int_eq(pb.attn_fused, 1);
    ck_assert_int_eq(p.mem_activations - pb.mem_activations, saved);
    /* bf16 casts: the widest operand is the logits, [1024, 50257] */
    ck_assert_int_eq(pb.cast_a_elems, (int64_t)8 * 1024 * 50257);
    ck_assert_int_eq(pb.mem_weights_lo, (int64_t)124439808 * 2);
    text = plan_text(&pb, &j);
    ck_assert_msg(strstr(text, "fused attention's log-sum-exps") &&
                  strstr(text, "per sequence of 1024 tokens (attention fused)"), "%s", text);
    free(text);
    plan_free(&pb);
    /* accelerator auto: the CPU's figure, and the GPU's beside it */
    j.accelerator = DDPC_ACCEL_AUTO;
    build(&j, &pb);
    ck_assert_int_eq(pb.attn_fused, 0);
    ck_assert_int_eq(pb.mem_activations, p.mem_activations);
    text = plan_text(&pb, &j);
    char want[160];
    snprintf(want, sizeof want, "(on a GPU, attention fused in bf16: activations 8 batch x %lld "
             "floats x 4 B = %lld B", (long long)((p.mem_activations - saved) / 32),
             (long long)(p.mem_activations - saved));
    ck_assert_msg(strstr(text, want), "%s\nwants %s", text, want);
    free(text);
    plan_free(&pb);
    /* dropout on the probabilities: fused too (the kernels draw the mask);
     * fp16: not fused */
    j.accelerator = DDPC_ACCEL_GPU;
    j.model.dropout = 0.1;
    build(&j, &pb);
    ck_assert_int_eq(pb.attn_fused, 1);
    plan_free(&pb);
    j.precision = DDPC_PRECISION_FP16;
    build(&j, &pb);
    ck_assert_int_eq(pb.attn_fused, 0);
    plan_free(&pb);
    plan_free(&p);
}
END_TEST

Suite *plan_suite(void)
{
    Suite *s = suite_create("plan");
    TCase *tc = tcase_create("plan");
    tcase_add_test(tc, shards_padded);
    tcase_add_test(tc, shards_drop_last);
    tcase_add_test(tc, limits_and_accumulation);
    tcase_add_test(tc, lr_scaling);
    tcase_add_test(tc, schedule_points);
    tcase_add_test(tc, params_and_buckets);
    tcase_add_test(tc, memory);
    tcase_add_test(tc, comms_and_checkpoints);
    tcase_add_test(tc, ranks_and_launch);
    tcase_add_test(tc, json_is_ascii_and_escaped);
    tcase_add_test(tc, count_idx_gz_npy_csv);
    tcase_add_test(tc, count_token_windows);
    tcase_add_test(tc, count_fashion_mnist);
    tcase_add_test(tc, text_output);
    tcase_add_test(tc, json_layers_of_example_cnn);
    tcase_add_test(tc, agrees_with_runtime_sampler);
    tcase_add_test(tc, ranks_shards_rendezvous_memory);
    tcase_add_test(tc, gpt2_124m_on_gpus);
    suite_add_tcase(s, tc);
    return s;
}
