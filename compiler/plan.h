/* plan.h - struct ddpc_plan: the static launch plan of a validated job.
 *
 * defines: plan_build, plan_free, plan_write_text, plan_json,
 *          plan_count_samples, plan_count_windows
 *
 * The plan is everything about a run that can be known before it starts:
 * ranks and their devices, each rank's data shard and steps, the effective
 * batch, the scaled learning rate and its schedule, gradient buckets, a
 * per-device memory estimate, communicators and timeouts, checkpoints and
 * the launch command(s). `ddpc plan` prints it; `ddpc build` bakes its JSON
 * into job_config.h and job.plan.json.
 *
 * Conventions the runtime must share (they are stated again in the output):
 *   - shards are DistributedSampler's: ceil(n/W) per rank padded, or
 *     floor(n/W) with drop_last; batches ceil/floor by batch_size the same
 *     way; then limit_train_batches (count, or floor(fraction x batches),
 *     at least 1);
 *   - optimizer steps per epoch = ceil(batches / grad_accumulation): a last
 *     partial accumulation still steps, as Lightning does;
 *   - parameters are flat as W0[out,in], b0[out], W1, b1, ...; buckets fill
 *     from the last parameter backward and close once they reach
 *     bucket_cap_mb x 2^20 bytes (a tensor is never split, so a bucket may
 *     exceed the cap by its last tensor), like PyTorch's DDP reducer but
 *     without its special 1 MiB first bucket;
 *   - gradients and all state are fp32 (4 bytes) whatever `precision` says;
 *     bf16/fp16 add 2-byte copies of the largest gemm operands (CUDA);
 *   - the learning-rate key points are in step order.
 *
 * Never: reads YAML, prints diagnostics itself, or exits.
 */
#ifndef DDPC_PLAN_H
#define DDPC_PLAN_H

#include <stdint.h>
#include <stdio.h>
#include "job.h"
#include "diag.h"
#include "layers.h"

#define DDPC_PLAN_MAX_PARAMS DDPC_MAX_TENSORS
#define DDPC_PLAN_MAX_LR_POINTS 8

struct ddpc_plan_rank {
    int32_t rank, node, local_rank, device;
};

struct ddpc_plan_param {
    char    name[DDPC_TENSOR_NAME];   /* "W0", "b0", ... (mlp, linear); "layers.0.weight" (sequential) */
    int32_t rows, cols;      /* W: [out, in]; b: [out] (cols 0) */
    char    shape[48];       /* "[32, 1, 3, 3]" */
    int64_t numel;
    int64_t offset;          /* in elements, in the flat parameter buffer */
};

struct ddpc_plan_bucket {
    int32_t n;                               /* tensors in this bucket */
    int32_t params[DDPC_PLAN_MAX_PARAMS];    /* indices into plan.params, in fill order */
    int64_t numel, bytes;
};

struct ddpc_plan_lr_point {
    int64_t     step;        /* optimizer step */
    double      lr;
    const char *what;        /* static string: "start", "warmup end", ... */
};

struct ddpc_plan {
    /* ---- world ---- */
    int32_t world_known;       /* 0: devices all/-1, counted at run time */
    int32_t world_size;        /* num_nodes x devices_per_node; 0 when unknown */
    int32_t num_nodes, devices_per_node;
    struct ddpc_plan_rank *ranks;   /* [world_size]; owned, NULL when unknown */
    const char *program;       /* launch path, e.g. "./fashion-mnist"; owned */

    /* ---- data and batches (-1: unknown) ---- */
    int64_t train_samples;
    char    samples_source[320];     /* where the count came from, or why unknown */
    int64_t samples_per_rank;        /* DistributedSampler num_samples */
    int64_t padded_samples;          /* repeated to fill the last round (no drop_last) */
    int64_t dropped_samples;         /* cut by drop_last */
    int64_t full_batches_per_epoch;  /* before limit_train_batches */
    int64_t batches_per_epoch;       /* after it: micro-steps per rank per epoch */
    int64_t last_batch_size;         /* size of the last batch of an epoch */
    int64_t optimizer_steps_per_epoch;
    int64_t total_optimizer_steps;
    int64_t global_batch;            /* batch_size x world x grad_accumulation; -1 unknown */

    /* ---- learning rate ---- */
    double  lr_base, lr_factor, lr_peak;
    int32_t n_lr_points;
    struct ddpc_plan_lr_point lr_points[DDPC_PLAN_MAX_LR_POINTS];

    /* ---- layers (layers_build; NULL when the input shape is unknown) ---- */
    struct ddpc_net *net;            /* owned */

    /* ---- parameters and buckets ---- */
    int32_t n_params;
    struct ddpc_plan_param params[DDPC_PLAN_MAX_PARAMS];
    int64_t total_params;            /* elements */
    int64_t bucket_cap_bytes;
    int32_t n_buckets;
    struct ddpc_plan_bucket buckets[DDPC_MAX_BUCKETS_L];

    /* ---- memory per device, bytes ---- */
    int32_t optim_states;            /* fp32 copies of the parameters: 0, 1 or 2 */
    int64_t buffer_rows;             /* rows the worker's buffers hold: batch, or the
                                        evaluation's when more (layers_buffer_rows) */
    int64_t activation_floats;       /* rows x sum(layers) x 2; layered: rows x sample_floats */
    int64_t sample_floats;           /* layered: per sample, every node's buffers and scratch */
    int64_t sample_floats_fused;     /* the same where the GPU fuses attention (layers.h
                                        layers_floats_fused; == sample_floats: nothing fuses) */
    int     attn_fused;              /* 1: a GPU job in bf16, the estimate counts attention
                                        fused (sample_floats is then the fused figure) */
    int64_t cast_a_elems, cast_b_elems; /* bf16/fp16 on a GPU: the two cast buffers
                                        (gemm inputs A, B), as the worker reserves
                                        them; 0 for fp32 */
    int64_t mem_params, mem_grads, mem_optim, mem_activations, mem_comm, mem_cast, mem_total;
    int64_t mem_weights_lo;          /* bf16/fp16 on a GPU: the parameters' 2-byte copy */

    /* ---- communicators ---- */
    int32_t grad_comm;               /* 1 when world > 1 (or unknown) */
    int32_t sync_comm;               /* 1 with a rank_sync_timeout and world > 1 */
    double  grad_timeout_s, sync_timeout_s;   /* 0: none */
    int32_t grad_port, sync_port;
    int32_t ports_fixed;             /* 1: grad_port/sync_port are used as given
                                        (several nodes); 0: see rendezvous */
    const char *rendezvous;          /* static: how the ranks find each other */

    /* ---- checkpoints ---- */
    int32_t ckpt_enabled;
    int32_t ckpt_saves;              /* per full run */
    int64_t ckpt_bytes;              /* params + optimizer state, payload only */

    /* ---- launch ---- */
    int32_t n_commands;
    char  **commands;                /* [n_commands] shell command lines; owned */
    int32_t n_node_commands;         /* slurm with several nodes: the same launch by
                                        hand, one command per node; else 0 */
    char  **node_commands;           /* [n_node_commands]; owned */
};

/* Fills p from job. program is how the launch commands name the binary
 * ("./NAME" when NULL). Data headers are read to count training samples when
 * the format allows (a file that cannot be read leaves the count unknown and
 * says why in samples_source, it is not an error here: the runtime reports
 * it). Returns 0, or -1 on a job the plan cannot describe (an error in d).
 * plan_free is safe after a failed build. */
int  plan_build(const struct ddpc_job *job, const char *program, struct ddpc_plan *p,
                struct ddpc_diag *d);
void plan_free(struct ddpc_plan *p);

/* The plan for people. Returns 0, -1 on a write error. */
int  plan_write_text(const struct ddpc_plan *p, const struct ddpc_job *job, FILE *out);
/* The plan as one JSON object, ending in a newline; pure ASCII. The caller
 * frees it. NULL when out of memory. */
char *plan_json(const struct ddpc_plan *p, const struct ddpc_job *job);

/* Training samples in src without loading it: synthetic from the spec, IDX
 * (gzipped or not) and NPY from their headers, CSV by counting data lines
 * (a first line that is not numeric is a header). Returns the count, or -1
 * with the reason in why. */
int64_t plan_count_samples(const struct ddpc_data_source *src, char *why, size_t why_len);
/* A token source's (text, tokens) windows of T + 1 tokens at this stride
 * in its range (tokens.h tokens_windows), from the files' sizes and shard
 * headers. Returns the count, or -1 with the reason in why. */
int64_t plan_count_windows(const struct ddpc_data_source *src, int64_t T, int64_t stride,
                           char *why, size_t why_len);

#endif /* DDPC_PLAN_H */
