/* emit_dump.h - every field of a struct ddpc_job as text, bit-exact.
 *
 * Included by test_emit.c and by the little programs it compiles against a
 * generated job_config.h: the same code prints the job ddpc was given and
 * the job the header baked, so any field the template drops or changes
 * shows up as a difference. Strings are hex (NULL is "null"), doubles %a.
 * A new field in job.h must be added here too. */
#ifndef DDPC_EMIT_DUMP_H
#define DDPC_EMIT_DUMP_H

#include <stdio.h>
#include "job.h"

static void dump_str(FILE *f, const char *k, const char *s)
{
    fprintf(f, "%s=", k);
    if (!s) {
        fputs("null\n", f);
        return;
    }
    for (const unsigned char *c = (const unsigned char *)s; *c; c++)
        fprintf(f, "%02x", *c);
    fputc('\n', f);
}

#define DUMP_I(k, v) fprintf(f, "%s=%lld\n", k, (long long)(v))
#define DUMP_U(k, v) fprintf(f, "%s=%llu\n", k, (unsigned long long)(v))
#define DUMP_D(k, v) fprintf(f, "%s=%a\n", k, (double)(v))

static void dump_source(FILE *f, const char *pre, const struct ddpc_data_source *s)
{
    fprintf(f, "[%s]\n", pre);
    DUMP_I("format", s->format);
    dump_str(f, "inputs", s->inputs);
    dump_str(f, "labels", s->labels);
    dump_str(f, "path", s->path);
    DUMP_I("label_column", s->label_column);
    DUMP_I("samples", s->samples);
    DUMP_I("features", s->features);
    DUMP_I("classes", s->classes);
    DUMP_U("seed", s->seed);
}

static void dump_job(FILE *f, const struct ddpc_job *j)
{
    DUMP_I("version", j->version);
    dump_str(f, "name", j->name);
    DUMP_I("n_devices", j->n_devices);
    DUMP_I("devices_all", j->devices_all);
    for (int i = 0; i < DDPC_MAX_DEVICES; i++)
        DUMP_I("device", j->devices[i]);
    DUMP_I("strategy", j->strategy);
    DUMP_I("accelerator", j->accelerator);
    DUMP_U("seed", j->seed);
    DUMP_I("deterministic", j->deterministic);
    DUMP_I("epochs", j->epochs);
    DUMP_D("learning_rate", j->learning_rate);
    DUMP_I("lr_scaling", j->lr_scaling);
    DUMP_I("batch_size", j->batch_size);
    DUMP_I("grad_accumulation", j->grad_accumulation);
    DUMP_I("limit_train_batches", j->limit_train_batches);
    DUMP_D("limit_train_fraction", j->limit_train_fraction);
    DUMP_I("precision", j->precision);
    DUMP_D("grad_clip_norm", j->grad_clip_norm);
    DUMP_D("bucket_cap_mb", j->bucket_cap_mb);
    dump_str(f, "checkpoint_dir", j->checkpoint_dir);
    DUMP_D("nccl_timeout_s", j->nccl_timeout_s);
    DUMP_D("rank_sync_timeout_s", j->rank_sync_timeout_s);
    DUMP_I("model.type", j->model.type);
    DUMP_I("model.n_layers", j->model.n_layers);
    for (int i = 0; i < DDPC_MAX_LAYERS; i++)
        DUMP_I("model.layer", j->model.layers[i]);
    DUMP_I("model.activation", j->model.activation);
    DUMP_I("model.init", j->model.init);
    DUMP_I("loss", j->loss);
    dump_source(f, "train", &j->data.train);
    dump_source(f, "test", &j->data.test);
    DUMP_I("data.has_test", j->data.has_test);
    DUMP_I("data.shuffle", j->data.shuffle);
    DUMP_I("data.drop_last", j->data.drop_last);
    DUMP_I("optimizer.type", j->optimizer.type);
    DUMP_D("optimizer.momentum", j->optimizer.momentum);
    DUMP_I("optimizer.nesterov", j->optimizer.nesterov);
    DUMP_D("optimizer.weight_decay", j->optimizer.weight_decay);
    DUMP_D("optimizer.beta1", j->optimizer.beta1);
    DUMP_D("optimizer.beta2", j->optimizer.beta2);
    DUMP_D("optimizer.eps", j->optimizer.eps);
    DUMP_I("schedule.warmup_steps", j->schedule.warmup_steps);
    DUMP_D("schedule.warmup_start_factor", j->schedule.warmup_start_factor);
    DUMP_I("schedule.decay", j->schedule.decay);
    DUMP_D("schedule.min_lr_factor", j->schedule.min_lr_factor);
    DUMP_I("schedule.step_size", j->schedule.step_size);
    DUMP_D("schedule.gamma", j->schedule.gamma);
    DUMP_I("checkpoint.every_n_epochs", j->checkpoint.every_n_epochs);
    DUMP_I("checkpoint.keep_last", j->checkpoint.keep_last);
    DUMP_I("checkpoint.resume", j->checkpoint.resume);
    dump_str(f, "checkpoint.resume_path", j->checkpoint.resume_path);
    dump_str(f, "checkpoint.export_path", j->checkpoint.export_path);
    DUMP_I("logging.every_n_steps", j->logging.every_n_steps);
    dump_str(f, "logging.metrics_csv", j->logging.metrics_csv);
    dump_str(f, "logging.tensorboard", j->logging.tensorboard);
    DUMP_I("logging.progress", j->logging.progress);
    DUMP_I("launch.num_nodes", j->launch.num_nodes);
    DUMP_I("launch.launcher", j->launch.launcher);
    dump_str(f, "launch.master_addr", j->launch.master_addr);
    DUMP_I("launch.master_port", j->launch.master_port);
    DUMP_I("launch.max_restarts", j->launch.max_restarts);
}

#endif
