/* plan.c - the static launch plan: what a job will do, computed before it runs.
 *
 * Owns: the arithmetic of ranks, shards, batches, learning-rate scaling and
 * schedule, gradient buckets, memory and checkpoints, and the launch
 * commands; and reading just enough of a data file to count its samples.
 * The conventions it shares with the runtime are listed in plan.h.
 *
 * Never: parses YAML (the job is already validated), trains, prints a
 * diagnostic itself, or exits.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include "buf.h"
#include "csv_header.h"
#include "epoch_batches.h"
#include "keytab.h"
#include "plan.h"
#include "tokens.h"
#include "probe.h"

/* ======================= counting samples ======================= */

/* IDX and NPY: the first dimension of the header (probe.c, the prober
 * `ddpc check` uses too). */
static int64_t count_header(const char *path, int npy, char *why, size_t why_len)
{
    struct ddpc_probe pr;
    char r[256];
    int rc = npy ? probe_npy(path, &pr, r, sizeof r) : probe_idx(path, &pr, r, sizeof r);
    if (rc < 0 || pr.nd < 1) {
        snprintf(why, why_len, "cannot read %s: %s", path, rc < 0 ? r : "no dimensions");
        return -1;
    }
    snprintf(why, why_len, "%s header of %s", npy ? "NPY" : "IDX", path);
    return pr.dims[0];
}

/* One CSV field is a number the way the runtime reads it (runtime/data.c):
 * strtod after blanks and quotes, nothing but blanks and quotes after. */
static int csv_number(const char *s, const char *end)
{
    while (s < end && (isspace((unsigned char)*s) || *s == '"'))
        s++;
    char tmp[128];
    size_t n = (size_t)(end - s);
    if (n == 0 || n >= sizeof tmp)
        return n != 0;   /* a very long field: assume numeric, the runtime decides */
    memcpy(tmp, s, n);
    tmp[n] = '\0';
    char *stop;
    errno = 0;
    (void)strtod(tmp, &stop);
    if (stop == tmp || errno == ERANGE)
        return 0;
    while (*stop && (isspace((unsigned char)*stop) || *stop == '"'))
        stop++;
    return *stop == '\0';
}

/* The first non-empty line is a header when one of its fields is not a
 * number, or it is pandas' column numbers (csv_header.h), as the runtime
 * decides; a UTF-8 byte order mark is no part of it (runtime/data.c). */
static int csv_is_header(const char *line)
{
    if (strncmp(line, "\xef\xbb\xbf", 3) == 0)
        line += 3;
    if (csv_is_column_numbers(line))
        return 1;
    const char *f = line;
    for (;;) {
        const char *c = strchr(f, ',');
        const char *end = c ? c : f + strlen(f);
        if (!csv_number(f, end))
            return 1;
        if (!c)
            return 0;
        f = c + 1;
    }
}

/* Data lines of a CSV file, gzipped or not (gzread reads both, like the
 * runtime): non-empty lines, minus a header line. */
static int64_t count_csv(const char *path, char *why, size_t why_len)
{
    gzFile f = gzopen(path, "rb");
    if (!f) {
        snprintf(why, why_len, "cannot open %s: %s", path, strerror(errno ? errno : ENOMEM));
        return -1;
    }
    int64_t n = 0;
    int first = 1, header = 0, err = 0;
    struct ddpc_buf line;
    buf_init(&line);
    char chunk[8192];
    for (;;) {
        char *got = gzgets(f, chunk, sizeof chunk);
        if (got)
            buf_puts(&line, chunk);
        size_t len = line.len;
        int complete = got && len > 0 && line.s[len - 1] == '\n';
        if (got && !complete && !gzeof(f))
            continue;            /* a line longer than the chunk: read on */
        if (!got && line.len == 0)
            break;
        /* a whole line (or the last one, without a newline) */
        while (line.len && (line.s[line.len - 1] == '\n' || line.s[line.len - 1] == '\r'))
            line.s[--line.len] = '\0';
        if (line.oom) {
            err = 1;
            break;
        }
        if (line.len) {
            if (first && csv_is_header(line.s))
                header = 1;
            else
                n++;
            first = 0;
        }
        line.len = 0;
        if (line.s)
            line.s[0] = '\0';
        if (!got)
            break;
    }
    int zerr;
    gzerror(f, &zerr);
    if (zerr != Z_OK && zerr != Z_STREAM_END)
        err = 1;
    buf_free(&line);
    gzclose(f);
    if (err) {
        snprintf(why, why_len, "%s: read error", path);
        return -1;
    }
    snprintf(why, why_len, "data lines of %s%s", path, header ? " (after its header line)" : "");
    return n;
}

int64_t plan_count_samples(const struct ddpc_data_source *src, char *why, size_t why_len)
{
    switch (src->format) {
    case DDPC_DATA_SYNTHETIC:
        snprintf(why, why_len, "data.train.samples");
        return src->samples;
    case DDPC_DATA_IDX:
        if (!src->inputs)
            break;
        return count_header(src->inputs, 0, why, why_len);
    case DDPC_DATA_NPY:
        if (!src->inputs)
            break;
        return count_header(src->inputs, 1, why, why_len);
    case DDPC_DATA_CSV:
        if (!src->path)
            break;
        return count_csv(src->path, why, why_len);
    case DDPC_DATA_TEXT:
    case DDPC_DATA_TOKENS:
        snprintf(why, why_len, "a token stream: its samples are windows of block_size + 1 "
                 "tokens (plan_count_windows)");
        return -1;
    }
    snprintf(why, why_len, "no data file named");
    return -1;
}

int64_t plan_count_windows(const struct ddpc_data_source *src, int64_t T, int64_t stride,
                           char *why, size_t why_len)
{
    struct ddpc_token_files tf;
    if (tokens_list(src->path, (size_t)src->path_literal, src->format, &tf, why,
                    why_len) < 0)
        return -1;
    int64_t a, b;
    tokens_range(tf.total, src->range_lo, src->range_hi, &a, &b);
    int nf = tf.n;
    tokens_list_free(&tf);
    int64_t w = tokens_windows(b - a, T, stride);
    char files[32] = "", range[64] = "";
    if (nf > 1)
        snprintf(files, sizeof files, " (%d files)", nf);
    if (src->range_lo > 0 || src->range_hi < 1)
        snprintf(range, sizeof range, " (range [%g, %g])", src->range_lo, src->range_hi);
    snprintf(why, why_len, "windows of %lld tokens in %lld tokens%s of %s%s", (long long)T + 1,
             (long long)(b - a), range, src->path, files);
    return w;
}

/* ======================= the plan ======================= */

/* Models the planner lists layer by layer with PyTorch's tensor names
 * (sequential, gpt); mlp and linear keep their W0/b0 plans byte for byte. */
static int layered(const struct ddpc_job *job)
{
    return job->model.type == DDPC_MODEL_SEQUENTIAL || job->model.type == DDPC_MODEL_GPT;
}

static void lr_point(struct ddpc_plan *p, int64_t step, double lr, const char *what)
{
    if (p->n_lr_points < DDPC_PLAN_MAX_LR_POINTS)
        p->lr_points[p->n_lr_points++] = (struct ddpc_plan_lr_point){ step, lr, what };
}

/* The schedule's key points. Warmup is linear from warmup_start_factor x peak
 * at step 0 to the peak at warmup_steps; decay runs from there: cosine to
 * min_lr_factor x peak at the last step, or x gamma every step_size steps. */
static void plan_schedule(const struct ddpc_job *job, struct ddpc_plan *p)
{
    int64_t w = job->schedule.warmup_steps > 0 ? job->schedule.warmup_steps : 0;
    int64_t total = p->total_optimizer_steps;    /* -1: unknown */
    double peak = p->lr_peak;
    if (w > 0) {
        lr_point(p, 0, peak * job->schedule.warmup_start_factor, "start (warmup)");
        lr_point(p, w, peak, "warmup end, peak");
    } else {
        lr_point(p, 0, peak, "start, peak");
    }
    switch (job->schedule.decay) {
    case DDPC_DECAY_CONSTANT:
        break;
    case DDPC_DECAY_COSINE:
        if (total > w) {
            double lo = peak * job->schedule.min_lr_factor;
            int64_t mid = w + (total - w) / 2;
            double t = (double)(mid - w) / (double)(total - w);
            lr_point(p, mid, lo + (peak - lo) * 0.5 * (1.0 + cos(M_PI * t)), "cosine midpoint");
            lr_point(p, total, lo, "cosine end (min_lr_factor), after the last step");
        }
        break;
    case DDPC_DECAY_STEP:
        if (job->schedule.step_size > 0) {
            double lr = peak;
            for (int64_t s = w + job->schedule.step_size;
                 (total < 0 || s < total) && p->n_lr_points < DDPC_PLAN_MAX_LR_POINTS - 1;
                 s += job->schedule.step_size) {
                lr *= job->schedule.gamma;
                lr_point(p, s, lr, "step decay (x gamma)");
            }
        }
        break;
    }
    if (total >= 0) {
        /* the rate of the last step the run takes */
        double last = peak;
        int64_t s = total > 0 ? total - 1 : 0;
        if (w > 0 && s < w)
            last = peak * (job->schedule.warmup_start_factor +
                           (1.0 - job->schedule.warmup_start_factor) * (double)s / (double)w);
        else if (job->schedule.decay == DDPC_DECAY_COSINE && total > w) {
            double lo = peak * job->schedule.min_lr_factor;
            last = lo + (peak - lo) * 0.5 * (1.0 + cos(M_PI * (double)(s - w) / (double)(total - w)));
        } else if (job->schedule.decay == DDPC_DECAY_STEP && job->schedule.step_size > 0)
            last = peak * pow(job->schedule.gamma, (double)((s - w) / job->schedule.step_size));
        lr_point(p, s, last, "last step");
    }
    /* in step order (stable): a cosine schedule ends at step `total`, one
     * after the last step the run takes */
    for (int i = 1; i < p->n_lr_points; i++) {
        struct ddpc_plan_lr_point x = p->lr_points[i];
        int k = i;
        for (; k > 0 && p->lr_points[k - 1].step > x.step; k--)
            p->lr_points[k] = p->lr_points[k - 1];
        p->lr_points[k] = x;
    }
}

/* The layers (layers_build, the runtime's own layout), their parameter
 * tensors, and the buckets by layers_buckets, the runtime's function. mlp
 * and linear keep their W<l>/b<l> names. */
static int plan_params(const struct ddpc_job *job, struct ddpc_plan *p, struct ddpc_diag *d)
{
    char why[512];
    int bad;
    p->net = calloc(1, sizeof *p->net);
    if (!p->net) {
        diag_add(d, DDPC_SEV_ERROR, "ddpc", 0, 0, "model", "out of memory");
        return -1;
    }
    if (layers_build(job, NULL, p->net, &bad, why, sizeof why) < 0) {
        diag_add(d, DDPC_SEV_ERROR, "ddpc", 0, 0, "model.layers", "the plan needs the layers' "
                 "shapes: %s", why);
        free(p->net);
        p->net = NULL;
        return -1;
    }
    const struct ddpc_net *net = p->net;
    int seq = layered(job);
    int pindex[DDPC_MAX_TENSORS];
    for (int t = 0; t < DDPC_MAX_TENSORS; t++)
        pindex[t] = -1;   /* also past the params limit below */
    for (int t = 0; t < net->n_tensors && p->n_params < DDPC_PLAN_MAX_PARAMS; t++) {
        const struct ddpc_tensor *T = &net->tensor[t];
        pindex[t] = -1;
        if (T->kind != DDPC_TENSOR_PARAM)
            continue;
        pindex[t] = p->n_params;
        struct ddpc_plan_param *q = &p->params[p->n_params++];
        int is_w = strstr(T->name, ".weight") != NULL;
        if (seq)
            snprintf(q->name, sizeof q->name, "%s", T->name);
        else
            snprintf(q->name, sizeof q->name, "%c%d", is_w ? 'W' : 'b', p->n_params / 2 - !is_w);
        if (!seq && is_w)
            snprintf(q->name, sizeof q->name, "W%d", (p->n_params - 1) / 2);
        else if (!seq)
            snprintf(q->name, sizeof q->name, "b%d", (p->n_params - 1) / 2);
        q->rows = (int32_t)T->shape[0];
        q->cols = T->nd == 2 ? (int32_t)T->shape[1] : 0;
        struct ddpc_shape sh = { T->nd < 3 ? T->nd : 3, { 0, 0, 0 } };
        size_t o = (size_t)snprintf(q->shape, sizeof q->shape, "[");
        for (int i = 0; i < T->nd && o < sizeof q->shape; i++)
            o += (size_t)snprintf(q->shape + o, sizeof q->shape - o, "%s%lld", i ? ", " : "",
                                  (long long)T->shape[i]);
        if (o < sizeof q->shape)
            snprintf(q->shape + o, sizeof q->shape - o, "]");
        (void)sh;
        q->numel = (int64_t)T->numel;
        q->offset = (int64_t)T->off;
    }
    p->total_params = (int64_t)net->n_params;

    /* bytes >= cap for whole bytes is bytes >= ceil(cap), the runtime's
     * comparison against the unrounded cap; cap 0 (or less) is one bucket */
    double cap = job->bucket_cap_mb * 1024.0 * 1024.0;
    p->bucket_cap_bytes = cap > 0 ? (int64_t)ceil(cap) : 0;
    struct ddpc_bucket_span span[DDPC_MAX_BUCKETS_L];
    int nb = layers_buckets(net, cap, span, DDPC_MAX_BUCKETS_L);
    for (int i = 0; i < nb && i < DDPC_MAX_BUCKETS_L; i++) {
        struct ddpc_plan_bucket *k = &p->buckets[p->n_buckets++];
        for (int t = span[i].first_tensor, c = 0; t >= 0 && c < span[i].n_tensors; t--) {
            if (pindex[t] < 0)
                continue;
            k->params[k->n++] = pindex[t];
            c++;
        }
        k->numel = (int64_t)(span[i].hi - span[i].lo);
        k->bytes = k->numel * 4;
    }
    return 0;
}

static int plan_data(const struct ddpc_job *job, struct ddpc_plan *p)
{
    const struct ddpc_data_source *tr = &job->data.train;
    int64_t n = job->model.type == DDPC_MODEL_GPT &&
                        (tr->format == DDPC_DATA_TEXT || tr->format == DDPC_DATA_TOKENS)
                    ? plan_count_windows(tr, job->model.block_size,
                                         (int64_t)job->model.block_size + 1,
                                         p->samples_source, sizeof p->samples_source)
                    : plan_count_samples(tr, p->samples_source, sizeof p->samples_source);
    p->train_samples = n;
    p->samples_per_rank = p->padded_samples = p->dropped_samples = -1;
    p->full_batches_per_epoch = p->batches_per_epoch = p->last_batch_size = -1;
    p->optimizer_steps_per_epoch = p->total_optimizer_steps = -1;
    if (n < 0 || !p->world_known)
        return 0;
    int64_t W = p->world_size, bs = job->batch_size > 0 ? job->batch_size : 1;
    int64_t nb = epoch_batches(n, W, bs, job->data.drop_last, job->limit_train_batches,
                               job->limit_train_fraction, &p->samples_per_rank,
                               &p->full_batches_per_epoch);
    p->padded_samples = job->data.drop_last ? 0 : p->samples_per_rank * W - n;
    p->dropped_samples = job->data.drop_last ? n - p->samples_per_rank * W : 0;
    p->batches_per_epoch = nb;
    if (nb == p->full_batches_per_epoch && !job->data.drop_last &&
        p->samples_per_rank % bs != 0)
        p->last_batch_size = p->samples_per_rank % bs;
    else
        p->last_batch_size = nb > 0 ? bs : 0;
    p->optimizer_steps_per_epoch = epoch_optimizer_steps(nb, job->grad_accumulation);
    p->total_optimizer_steps = p->optimizer_steps_per_epoch * job->epochs;
    return 0;
}

static char *program_default(const struct ddpc_job *job)
{
    struct ddpc_buf b;
    buf_init(&b);
    buf_puts(&b, "./");
    buf_puts(&b, job->name ? job->name : "job");
    return buf_take(&b);
}

/* PROGRAM --node-rank K --master HOST:PORT, shell-quoted. master NULL: the
 * script's $MASTER (Slurm: the allocation's first node). */
static char *node_command(const struct ddpc_plan *p, int k, const char *master, int port)
{
    struct ddpc_buf b;
    buf_init(&b);
    buf_sh_word(&b, p->program);
    buf_printf(&b, " --node-rank %d --master ", k);
    if (master) {
        char m[300];
        snprintf(m, sizeof m, "%s:%d", master, port);
        buf_sh_word(&b, m);
    } else {
        buf_printf(&b, "\"$MASTER\":%d", port);
    }
    return buf_take(&b);
}

static int plan_launch(const struct ddpc_job *job, struct ddpc_plan *p)
{
    if (job->launch.launcher == DDPC_LAUNCHER_SLURM && p->num_nodes > 1) {
        /* what the sbatch script's srun runs on each node, by hand */
        const char *m = job->launch.master_addr;
        int from_alloc = !m || !m[0] || strcmp(m, "localhost") == 0 || strcmp(m, "127.0.0.1") == 0;
        p->node_commands = calloc((size_t)p->num_nodes, sizeof *p->node_commands);
        if (!p->node_commands)
            return -1;
        p->n_node_commands = p->num_nodes;
        for (int k = 0; k < p->num_nodes; k++)
            if (!(p->node_commands[k] = node_command(p, k, from_alloc ? NULL : m,
                                                     job->launch.master_port)))
                return -1;
    }
    int n = (p->num_nodes > 1 && job->launch.launcher == DDPC_LAUNCHER_LOCAL) ? p->num_nodes : 1;
    p->commands = calloc((size_t)n, sizeof *p->commands);
    if (!p->commands)
        return -1;
    p->n_commands = n;
    for (int k = 0; k < n; k++) {
        struct ddpc_buf b;
        buf_init(&b);
        if (job->launch.launcher == DDPC_LAUNCHER_SLURM) {
            buf_puts(&b, "sbatch ");
            struct ddpc_buf s;
            buf_init(&s);
            buf_printf(&s, "%s.sbatch", p->program);
            char *script = buf_take(&s);
            if (!script) {
                buf_free(&b);
                return -1;
            }
            buf_sh_word(&b, script);
            free(script);
        } else {
            buf_sh_word(&b, p->program);
            if (p->num_nodes > 1) {
                char master[300];
                snprintf(master, sizeof master, "%s:%d",
                         job->launch.master_addr ? job->launch.master_addr : "localhost",
                         job->launch.master_port);
                buf_printf(&b, " --node-rank %d --master ", k);
                buf_sh_word(&b, master);
            }
        }
        if (!(p->commands[k] = buf_take(&b)))
            return -1;
    }
    return 0;
}

/* Long on purpose (~160 lines): the plan's sections (world; data, batches
 * and learning rate; parameters, buckets and memory; communicators;
 * checkpoints; launch) in the order each needs the one before, every
 * number computed once into p. Split, the sections would pass most of p
 * and the job between them and read no better. */
int plan_build(const struct ddpc_job *job, const char *program, struct ddpc_plan *p,
               struct ddpc_diag *d)
{
    memset(p, 0, sizeof *p);
    int rc = -1;

    p->program = program ? strdup(program) : program_default(job);
    if (!p->program)
        goto oom;

    /* ---- world ---- */
    p->num_nodes = job->launch.num_nodes > 0 ? job->launch.num_nodes : 1;
    p->world_known = !job->devices_all;
    if (job->n_devices < (p->world_known ? 1 : 0) || job->n_devices > DDPC_MAX_DEVICES) {
        diag_add(d, DDPC_SEV_ERROR, "ddpc", 0, 0, "devices", "%d devices: 1 to %d per node",
                 job->n_devices, DDPC_MAX_DEVICES);
        goto done;
    }
    if (p->world_known) {
        p->devices_per_node = job->n_devices;
        if (ddpc_job_world_size(job, 0) > (1 << 20)) {
            diag_add(d, DDPC_SEV_ERROR, "ddpc", 0, 0, "launch.num_nodes",
                     "%d nodes x %d devices is more ranks than a plan can list",
                     p->num_nodes, p->devices_per_node);
            goto done;
        }
        p->world_size = (int)ddpc_job_world_size(job, 0);
        p->ranks = calloc((size_t)p->world_size, sizeof *p->ranks);
        if (!p->ranks)
            goto oom;
        for (int r = 0; r < p->world_size; r++) {
            int local = r % p->devices_per_node;
            p->ranks[r] = (struct ddpc_plan_rank){
                .rank = r, .node = r / p->devices_per_node, .local_rank = local,
                .device = job->n_devices > 0 ? job->devices[local] : 0,
            };
        }
    }

    /* ---- data, batches, learning rate ---- */
    int64_t acc = job->grad_accumulation > 0 ? job->grad_accumulation : 1;
    p->global_batch = p->world_known ? (int64_t)job->batch_size * p->world_size * acc : -1;
    if (plan_data(job, p) != 0)
        goto done;
    p->lr_base = job->learning_rate;
    p->lr_factor = job->lr_scaling == DDPC_LR_SCALING_NONE ? 1.0
                   : p->world_known ? ddpc_job_lr_factor(job, job->lr_scaling, p->world_size)
                   : NAN;
    p->lr_peak = p->lr_base * p->lr_factor;
    plan_schedule(job, p);

    /* ---- parameters, buckets, memory ---- */
    if (plan_params(job, p, d) != 0)
        goto done;
    switch (job->optimizer.type) {
    case DDPC_OPTIM_SGD:   p->optim_states = job->optimizer.momentum != 0.0 ? 1 : 0; break;
    case DDPC_OPTIM_ADAM:
    case DDPC_OPTIM_ADAMW: p->optim_states = 2; break;
    }
    int64_t layer_sum = 0;
    for (int l = 0; l < job->model.n_layers; l++)
        layer_sum += job->model.layers[l];
    /* bf16 on a GPU: the attention nodes that the CUDA backend fuses keep
     * log-sum-exps, not probabilities, and need less scratch
     * (runtime/attn.h); other precisions are unfused */
    int bf16 = job->precision == DDPC_PRECISION_BF16;
    int64_t scratch_gpu = p->net->scratch_floats;
    int64_t floats_fused = layers_floats_fused(p->net, bf16 ? &scratch_gpu : NULL);
    /* the worker's buffers hold the training batch, or the evaluation's
     * rows when they are more (layers_buffer_rows) */
    int64_t rows = job->batch_size > 0
                       ? layers_buffer_rows(p->net, (int)job->batch_size, job->data.has_test)
                       : 1;
    p->buffer_rows = rows;
    if (layered(job)) {   /* outputs, gradients, argmaxes, scratch */
        p->sample_floats = p->net->act_floats + p->net->scratch_floats;
        p->sample_floats_fused = bf16 ? floats_fused : p->sample_floats;
        p->attn_fused = job->accelerator == DDPC_ACCEL_GPU &&
                        p->sample_floats_fused < p->sample_floats;
        if (p->attn_fused)
            p->sample_floats = p->sample_floats_fused;
        p->activation_floats = rows * p->sample_floats;
    } else
        p->activation_floats = rows * layer_sum * 2;
    p->mem_params = p->total_params * 4;
    p->mem_grads = p->total_params * 4;
    p->mem_optim = p->total_params * 4 * p->optim_states;
    p->mem_activations = p->activation_floats * 4;
    /* one staging copy of the flat gradients for the all-reduce */
    p->mem_comm = (!p->world_known || p->world_size > 1) ? p->total_params * 4 : 0;
    /* bf16/fp16 on a GPU, what the worker has ops_cuda allocate before the
     * first step (set_weights, reserve): one 2-byte copy of the
     * parameters, and two cast buffers (a gemm's inputs A and B) of the
     * worker's rows (max(batch, the evaluation's)) x the widest non-weight
     * operand: a node's input or output, or the scratch (im2col, unfused
     * attention's probabilities). */
    if (job->precision != DDPC_PRECISION_FP32 && job->accelerator != DDPC_ACCEL_CPU) {
        const struct ddpc_net *net = p->net;
        int64_t widest = scratch_gpu;
        for (int k = 0; k < net->n; k++) {
            widest = net->node[k].in_numel > widest ? net->node[k].in_numel : widest;
            widest = net->node[k].out_numel > widest ? net->node[k].out_numel : widest;
        }
        p->cast_a_elems = p->cast_b_elems = rows * (widest > 1 ? widest : 1);
        p->mem_weights_lo = p->total_params * 2;
    }
    p->mem_cast = (p->cast_a_elems + p->cast_b_elems) * 2;
    p->mem_total = p->mem_params + p->mem_grads + p->mem_optim + p->mem_activations + p->mem_comm +
                   p->mem_cast + p->mem_weights_lo;

    /* ---- communicators ---- */
    p->grad_comm = !p->world_known || p->world_size > 1;
    p->grad_timeout_s = p->grad_comm ? job->nccl_timeout_s : 0;
    p->sync_comm = p->grad_comm && job->rank_sync_timeout_s > 0;
    p->sync_timeout_s = p->sync_comm ? job->rank_sync_timeout_s : 0;
    p->grad_port = job->launch.master_port;
    p->sync_port = job->launch.master_port;   /* the same store; NCCL splits it off */
    /* as runtime/ddprt.c decides: several nodes meet at the store node 0
     * hosts at the spec's master; one node uses shared memory (CPU workers)
     * or the store on a free loopback port picked at launch (GPUs), unless
     * --master overrides it */
    p->ports_fixed = p->num_nodes > 1;
    if (p->num_nodes > 1 && job->accelerator == DDPC_ACCEL_CPU)
        p->rendezvous = "gloo, through the store node 0 hosts at launch.master_addr:"
                        "master_port (or --master HOST:PORT)";
    else if (p->num_nodes > 1 && job->accelerator == DDPC_ACCEL_GPU)
        p->rendezvous = "NCCL, its unique id through the store node 0 hosts at "
                        "launch.master_addr:master_port (or --master HOST:PORT)";
    else if (p->num_nodes > 1)
        p->rendezvous = "the store node 0 hosts at launch.master_addr:master_port (or --master "
                        "HOST:PORT): NCCL's unique id on GPUs, gloo's addresses on CPU workers";
    else if (job->accelerator == DDPC_ACCEL_CPU)
        p->rendezvous = "shared memory between the CPU workers (no port)";
    else if (job->accelerator == DDPC_ACCEL_GPU)
        p->rendezvous = "NCCL, its unique id through the store on a free loopback port picked "
                        "at launch (--master HOST:PORT fixes it)";
    else
        p->rendezvous = "GPUs: NCCL through the store on a free loopback port picked at launch; "
                        "CPU workers: shared memory";

    /* ---- checkpoints ---- */
    p->ckpt_enabled = job->checkpoint_dir && job->checkpoint_dir[0];
    if (p->ckpt_enabled) {
        int every = job->checkpoint.every_n_epochs;
        if (every <= 0 || every >= job->epochs)
            p->ckpt_saves = 1;
        else
            p->ckpt_saves = job->epochs / every + (job->epochs % every != 0);
        /* every_n_steps: each multiple of N is a save, one at an epoch's
         * end merging with that epoch's (the worker saves it once, after
         * the evaluation); every_n_minutes depends on the machine and is
         * not counted */
        int64_t n = job->checkpoint.every_n_steps, spe = p->optimizer_steps_per_epoch;
        if (n > 0 && spe > 0) {
            int64_t saves = 0;
            for (int64_t ep = 0; ep < job->epochs; ep++) {
                int64_t lo = ep * spe, hi = lo + spe;
                int end_saves = ep + 1 == job->epochs || (every > 0 && (ep + 1) % every == 0);
                int64_t multiples = hi / n - lo / n;
                saves += multiples + (end_saves && hi % n != 0);
            }
            p->ckpt_saves = saves > INT32_MAX ? INT32_MAX : (int32_t)saves;
        }
        p->ckpt_bytes = p->mem_params + p->mem_optim;
    }

    /* ---- launch ---- */
    if (plan_launch(job, p) != 0)
        goto oom;
    rc = 0;
    goto done;
oom:
    diag_add(d, DDPC_SEV_ERROR, "ddpc", 0, 0, "", "out of memory while planning");
done:
    return rc;
}

void plan_free(struct ddpc_plan *p)
{
    free(p->ranks);
    free((char *)p->program);
    for (int i = 0; i < p->n_commands; i++)
        free(p->commands[i]);
    free(p->commands);
    for (int i = 0; i < p->n_node_commands; i++)
        free(p->node_commands[i]);
    free(p->node_commands);
    free(p->net);
    memset(p, 0, sizeof *p);
}

/* ======================= output ======================= */

/* Bytes for people: exact count and a binary-prefixed approximation. */
static void put_bytes(struct ddpc_buf *b, int64_t n)
{
    if (n >= 1 << 30)
        buf_printf(b, "%lld B (%.2f GiB)", (long long)n, (double)n / (1 << 30));
    else if (n >= 1 << 20)
        buf_printf(b, "%lld B (%.2f MiB)", (long long)n, (double)n / (1 << 20));
    else if (n >= 1 << 10)
        buf_printf(b, "%lld B (%.2f KiB)", (long long)n, (double)n / (1 << 10));
    else
        buf_printf(b, "%lld B", (long long)n);
}

/* The rows the worker's buffers hold: "32 batch", or "512 evaluation rows
 * (> batch 32)" where the evaluation's batch is the larger. */
static void put_rows(struct ddpc_buf *b, const struct ddpc_job *job, const struct ddpc_plan *p)
{
    if (p->buffer_rows > job->batch_size)
        buf_printf(b, "%lld evaluation rows (> batch %d)", (long long)p->buffer_rows,
                   job->batch_size);
    else
        buf_printf(b, "%d batch", job->batch_size);
}

static void put_count(struct ddpc_buf *b, int64_t n)
{
    if (n < 0)
        buf_puts(b, "unknown");
    else
        buf_printf(b, "%lld", (long long)n);
}

static void put_timeout(struct ddpc_buf *b, double s)
{
    if (s > 0)
        buf_printf(b, "%gs", s);
    else
        buf_puts(b, "none");
}

/* Untrusted strings in text output: printable ASCII as is, other bytes as
 * \xHH, so a spec cannot drive the terminal with escape sequences. */
static void put_text(struct ddpc_buf *b, const char *s)
{
    if (!s) {
        buf_puts(b, "(none)");
        return;
    }
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c >= 0x20 && *c < 0x7f)
            buf_add(b, c, 1);
        else
            buf_printf(b, "\\x%02x", *c);
    }
}

/* Long on purpose (~240 lines): straight-line printing, one block per
 * section of `ddpc plan`, in the order a reader scans them; it computes
 * nothing (plan_build did), so each line can be checked against the output. */
/* Tokens one device consumes per optimizer step: batch x block_size x
 * accumulation micro-steps (the text and JSON plans both print it). */
static int64_t gpt_tokens_per_step(const struct ddpc_job *job)
{
    return (int64_t)job->batch_size * job->model.block_size *
           (job->grad_accumulation > 0 ? job->grad_accumulation : 1);
}

/* A gpt's figures per token, the unit its users count in: a sample is one
 * window of block_size tokens. Attention is in the FLOPs (as the full T x T
 * score matrices the kernels compute); nanoGPT's 6N + 12 L T C estimate is
 * beside it for comparison. */
static void plan_text_gpt(struct ddpc_buf *b, const struct ddpc_plan *p,
                          const struct ddpc_job *job)
{
    const struct ddpc_net *net = p->net;
    double T = job->model.block_size, C = job->model.n_embd, L = job->model.n_layer;
    double per_tok = (net->fwd_flops + net->bwd_flops) / T;
    /* nanoGPT counts parameters without the position embedding */
    double n_nonemb = (double)p->total_params - T * C;
    int64_t tokens = gpt_tokens_per_step(job);
    buf_printf(b, "  per token: %.4g FLOPs (forward %.4g + backward %.4g, attention included; "
               "nanoGPT's 6N + 12LTC estimate: %.4g)\n", per_tok, net->fwd_flops / T,
               net->bwd_flops / T, 6 * n_nonemb + 12 * L * T * C);
    buf_printf(b, "  activations: %lld bytes per sequence of %d tokens%s\n",
               (long long)(p->sample_floats * 4), job->model.block_size,
               p->attn_fused ? " (attention fused)" : "");
    buf_printf(b, "  tokens per optimizer step: %lld per device (batch %d x block_size %d",
               (long long)tokens, job->batch_size, job->model.block_size);
    if (job->grad_accumulation > 1)
        buf_printf(b, " x grad_accumulation %d", job->grad_accumulation);
    if (p->world_known)
        buf_printf(b, "), %lld across %d devices\n", (long long)tokens * p->world_size,
                   p->world_size);
    else
        buf_puts(b, "); x the devices where the job runs\n");
}

int plan_write_text(const struct ddpc_plan *p, const struct ddpc_job *job, FILE *out)
{
    struct ddpc_buf b;
    buf_init(&b);

    buf_puts(&b, "job ");
    put_text(&b, job->name);
    buf_puts(&b, "\n\nworld\n");
    if (p->world_known) {
        buf_printf(&b, "  world size      %d = %d node%s x %d device%s (accelerator %s)\n",
                   p->world_size, p->num_nodes, p->num_nodes == 1 ? "" : "s",
                   p->devices_per_node, p->devices_per_node == 1 ? "" : "s",
                   ddpc_enum_spell(&ddpc_enum_accelerator, job->accelerator));
        /* DistributedSampler gives every rank the same count (padded, or
         * dropped with drop_last), so each row repeats the shard */
        buf_printf(&b, "  rank  node  local  %-10s  shard samples  batches/epoch  steps/epoch\n",
                   job->accelerator == DDPC_ACCEL_CPU ? "cpu worker"
                   : job->accelerator == DDPC_ACCEL_GPU ? "gpu" : "gpu|worker");
        for (int r = 0; r < p->world_size; r++) {
            buf_printf(&b, "  %4d  %4d  %5d  %10d  ", p->ranks[r].rank, p->ranks[r].node,
                       p->ranks[r].local_rank, p->ranks[r].device);
            if (p->samples_per_rank >= 0)
                buf_printf(&b, "%13lld  %13lld  %11lld\n", (long long)p->samples_per_rank,
                           (long long)p->batches_per_epoch,
                           (long long)p->optimizer_steps_per_epoch);
            else
                buf_printf(&b, "%13s  %13s  %11s\n", "?", "?", "?");
        }
    } else {
        buf_printf(&b, "  world size      %d node%s x every device the machine has "
                   "(counted at run time; accelerator %s)\n", p->num_nodes,
                   p->num_nodes == 1 ? "" : "s",
                   ddpc_enum_spell(&ddpc_enum_accelerator, job->accelerator));
    }

    buf_puts(&b, "\ndata (per rank, DistributedSampler)\n  train samples   ");
    put_count(&b, p->train_samples);
    buf_puts(&b, "  [");
    put_text(&b, p->samples_source);
    buf_puts(&b, "]\n");
    if (p->samples_per_rank >= 0) {
        buf_printf(&b, "  shard           %lld samples per rank", (long long)p->samples_per_rank);
        if (job->data.drop_last)
            buf_printf(&b, " (drop_last: %lld dropped)\n", (long long)p->dropped_samples);
        else
            buf_printf(&b, " (ceil(%lld/%d); %lld padded)\n", (long long)p->train_samples,
                       p->world_size, (long long)p->padded_samples);
        buf_printf(&b, "  batches/epoch   %lld of %d", (long long)p->batches_per_epoch,
                   job->batch_size);
        if (p->batches_per_epoch != p->full_batches_per_epoch)
            buf_printf(&b, " (limited from %lld)", (long long)p->full_batches_per_epoch);
        buf_printf(&b, ", last batch %lld\n", (long long)p->last_batch_size);
        buf_printf(&b, "  optimizer steps %lld per epoch (grad_accumulation %d), %lld in %d epochs\n",
                   (long long)p->optimizer_steps_per_epoch, job->grad_accumulation,
                   (long long)p->total_optimizer_steps, job->epochs);
    } else {
        buf_puts(&b, "  shard, batches  unknown (they need the sample count and the world size)\n");
    }
    buf_puts(&b, "  global batch    ");
    if (p->global_batch >= 0)
        buf_printf(&b, "%lld = %d per device x %d ranks x %d accumulation\n",
                   (long long)p->global_batch, job->batch_size, p->world_size,
                   job->grad_accumulation);
    else
        buf_printf(&b, "%d per device x world size x %d accumulation\n", job->batch_size,
                   job->grad_accumulation);

    buf_puts(&b, "\nlearning rate\n");
    buf_printf(&b, "  base %g, lr_scaling %s", p->lr_base,
               ddpc_enum_spell(&ddpc_enum_lr_scaling, job->lr_scaling));
    if (isfinite(p->lr_factor))
        buf_printf(&b, " (x %g) -> peak %g\n", p->lr_factor, p->lr_peak);
    else
        buf_puts(&b, " -> peak depends on the world size\n");
    buf_printf(&b, "  schedule: warmup %lld steps, decay %s\n",
               (long long)job->schedule.warmup_steps,
               ddpc_enum_spell(&ddpc_enum_decay, job->schedule.decay));
    for (int i = 0; i < p->n_lr_points; i++)
        buf_printf(&b, "    step %-8lld lr %-14g %s\n", (long long)p->lr_points[i].step,
                   p->lr_points[i].lr, p->lr_points[i].what);

    if (layered(job) && p->net) {
        const struct ddpc_net *net = p->net;
        char sh[96];
        buf_printf(&b, "\nlayers (input %s per sample; FLOPs and activations per sample)\n",
                   layers_shape_str(&net->input, sh, sizeof sh));
        int wn = 22, wt = 18;   /* gpt's module paths are longer than a list's */
        for (int k = 0; k < net->n; k++) {
            int ln = (int)strlen(net->node[k].name);
            int lt = (int)strlen(layers_type_name(net->node[k].it.type));
            wn = ln > wn ? ln : wn;
            wt = lt > wt ? lt : wt;
        }
        buf_printf(&b, "  %-*s %-*s %-16s %10s %12s %12s %12s\n", wn, "module", wt, "layer",
                   "output", "params", "fwd FLOPs", "bwd FLOPs", "act bytes");
        for (int k = 0; k < net->n; k++) {
            const struct ddpc_lnode *L = &net->node[k];
            buf_printf(&b, "  %-*s %-*s %-16s %10lld %12.4g %12.4g %12lld", wn, L->name, wt,
                       layers_type_name(L->it.type), layers_shape_str(&L->out, sh, sizeof sh),
                       (long long)(L->tie >= 0 ? L->b_numel : L->w_numel + L->b_numel),
                       L->fwd_flops, L->bwd_flops, (long long)(L->act_floats * 4));
            if (L->tie >= 0)
                buf_printf(&b, "  (weight tied to %s.wte)", net->node[L->tie].name);
            buf_puts(&b, "\n");
        }
        buf_printf(&b, "  total: %.4g FLOPs forward + %.4g backward per sample = %.4g per step "
                   "(batch %d)\n", net->fwd_flops, net->bwd_flops,
                   (net->fwd_flops + net->bwd_flops) * job->batch_size, job->batch_size);
        if (job->model.type == DDPC_MODEL_GPT)
            plan_text_gpt(&b, p, job);
    }
    buf_printf(&b, "\nparameters (%lld, flat in this order)\n", (long long)p->total_params);
    for (int i = 0; i < p->n_params; i++) {
        const struct ddpc_plan_param *q = &p->params[i];
        if (layered(job))
            buf_printf(&b, "  %s %s", q->name, q->shape);
        else if (q->cols)
            buf_printf(&b, "  %-4s [%d, %d]", q->name, q->rows, q->cols);
        else
            buf_printf(&b, "  %-4s [%d]", q->name, q->rows);
        buf_printf(&b, "  %lld elements at offset %lld\n", (long long)q->numel,
                   (long long)q->offset);
    }
    buf_printf(&b, "\ngradient buckets (bucket_cap_mb %g = %lld B, filled from the last parameter)\n",
               job->bucket_cap_mb, (long long)p->bucket_cap_bytes);
    for (int i = 0; i < p->n_buckets; i++) {
        const struct ddpc_plan_bucket *k = &p->buckets[i];
        buf_printf(&b, "  bucket %d:", i);
        for (int j = 0; j < k->n; j++)
            buf_printf(&b, " %s", p->params[k->params[j]].name);
        buf_printf(&b, "  %lld elements, ", (long long)k->numel);
        put_bytes(&b, k->bytes);
        buf_puts(&b, "\n");
    }

    buf_printf(&b, "\nmemory per device (estimate; fp32 weights, gradients and state%s)\n",
               p->mem_cast ? ", 2-byte gemm input copies" : "");
    buf_printf(&b, "  parameters      %lld x 4 B = ", (long long)p->total_params);
    put_bytes(&b, p->mem_params);
    buf_printf(&b, "\n  gradients       %lld x 4 B = ", (long long)p->total_params);
    put_bytes(&b, p->mem_grads);
    buf_printf(&b, "\n  optimizer state %d x %lld x 4 B (%s%s) = ", p->optim_states,
               (long long)p->total_params,
               ddpc_enum_spell(&ddpc_enum_optimizer_type, job->optimizer.type),
               job->optimizer.type == DDPC_OPTIM_SGD
                   ? (p->optim_states ? " with momentum" : " without momentum") : "");
    put_bytes(&b, p->mem_optim);
    buf_puts(&b, "\n  activations     ");
    put_rows(&b, job, p);
    if (layered(job))
        buf_printf(&b, " x %lld floats (outputs, their gradients, %s) x 4 B = ",
                   (long long)p->sample_floats,
                   job->model.type != DDPC_MODEL_GPT ? "argmaxes, im2col"
                   : p->attn_fused ? "norm statistics, fused attention's log-sum-exps"
                                   : "norm statistics, attention probabilities");
    else
        buf_printf(&b, " x %lld layer units x 2 x 4 B = ",
                   (long long)(p->activation_floats / 2 / p->buffer_rows));
    put_bytes(&b, p->mem_activations);
    buf_puts(&b, "\n  comm buffers    ");
    if (p->mem_comm)
        buf_printf(&b, "%lld x 4 B (gradient staging) = ", (long long)p->total_params);
    put_bytes(&b, p->mem_comm);
    if (p->mem_cast) {
        const char *lo = job->precision == DDPC_PRECISION_BF16 ? "bf16" : "fp16";
        buf_printf(&b, "\n  %s weights    %lld x 2 B (the parameters' copy) = ", lo,
                   (long long)p->total_params);
        put_bytes(&b, p->mem_weights_lo);
        buf_printf(&b, "\n  %s casts      (%lld + %lld) x 2 B (gemm inputs A, B: rows x "
                   "widest operand) = ", lo, (long long)p->cast_a_elems,
                   (long long)p->cast_b_elems);
        put_bytes(&b, p->mem_cast);
    }
    buf_puts(&b, "\n  total           ");
    put_bytes(&b, p->mem_total);
    if (job->accelerator == DDPC_ACCEL_AUTO && p->sample_floats_fused < p->sample_floats) {
        buf_puts(&b, "\n  (on a GPU, attention fused in bf16: activations ");
        put_rows(&b, job, p);
        buf_printf(&b, " x %lld floats x 4 B = ", (long long)p->sample_floats_fused);
        put_bytes(&b, p->buffer_rows * p->sample_floats_fused * 4);
        buf_puts(&b, ")");
    }
    if (job->accelerator != DDPC_ACCEL_CPU)
        buf_puts(&b, "\n  (on a GPU add the CUDA context, cuBLAS and NCCL: a few hundred MiB)");
    buf_puts(&b, "\n");

    buf_puts(&b, "\ncommunicators\n");
    if (p->grad_comm) {
        buf_puts(&b, "  gradient        timeout ");
        put_timeout(&b, p->grad_timeout_s);
        if (p->ports_fixed)
            buf_printf(&b, " (nccl_timeout), port %d\n", p->grad_port);
        else
            buf_puts(&b, " (nccl_timeout)\n");
        buf_puts(&b, "  rank-sync       ");
        if (p->sync_comm) {
            buf_puts(&b, "timeout ");
            put_timeout(&b, p->sync_timeout_s);
            if (p->ports_fixed)
                buf_printf(&b, " (rank_sync_timeout), port %d\n", p->sync_port);
            else
                buf_puts(&b, " (rank_sync_timeout)\n");
        } else {
            buf_puts(&b, "none (no rank_sync_timeout)\n");
        }
        buf_puts(&b, "  rendezvous      ");
        buf_puts(&b, p->rendezvous);
        buf_puts(&b, "\n");
    } else {
        buf_puts(&b, "  none (one rank)\n");
    }

    buf_puts(&b, "\ncheckpoints\n");
    if (p->ckpt_enabled) {
        buf_puts(&b, "  dir             ");
        put_text(&b, job->checkpoint_dir);
        int ep_every = job->checkpoint.every_n_epochs;
        int ep_saves = ep_every <= 0 || ep_every >= job->epochs ? 1
                     : job->epochs / ep_every + (job->epochs % ep_every != 0);
        if (ep_every > 0)
            buf_printf(&b, "\n  schedule        every %d epoch%s and at the end: %d save%s\n",
                       ep_every, ep_every == 1 ? "" : "s", ep_saves, ep_saves == 1 ? "" : "s");
        else if (job->checkpoint.every_n_steps <= 0)
            buf_puts(&b, "\n  schedule        at the end only: 1 save\n");
        else
            buf_puts(&b, "\n");
        if (job->checkpoint.every_n_steps > 0)
            buf_printf(&b, "  steps           every %lld optimizer steps, mid-epoch too: %d "
                       "saves in all\n", (long long)job->checkpoint.every_n_steps,
                       p->ckpt_saves);
        if (job->checkpoint.every_n_minutes > 0)
            buf_printf(&b, "  time            also after every %g minutes of training (not "
                       "counted above)\n", job->checkpoint.every_n_minutes);
        buf_puts(&b, "  size            ");
        put_bytes(&b, p->ckpt_bytes);
        buf_puts(&b, " (parameters + optimizer state)\n");
    } else {
        buf_puts(&b, "  none (no checkpoint_dir)\n");
    }

    buf_puts(&b, "\nlaunch\n");
    for (int i = 0; i < p->n_commands; i++) {
        if (p->n_commands > 1)
            buf_printf(&b, "  node %d: ", i);
        else
            buf_puts(&b, "  ");
        put_text(&b, p->commands[i]);
        buf_puts(&b, "\n");
    }
    if (job->launch.launcher == DDPC_LAUNCHER_SLURM && !p->world_known &&
        job->accelerator != DDPC_ACCEL_CPU)
        buf_puts(&b, "  (devices: all: the script asks for whole nodes (--exclusive); each node "
                 "counts its GPUs at launch, and every node must have as many)\n");
    if (p->n_node_commands) {
        buf_puts(&b, "  by hand instead, one per node (what the script's srun runs)");
        if (strstr(p->node_commands[0], "\"$MASTER\""))
            buf_puts(&b, "; MASTER = node 0's host name");
        buf_puts(&b, ":\n");
        for (int i = 0; i < p->n_node_commands; i++) {
            buf_printf(&b, "    node %d: ", i);
            put_text(&b, p->node_commands[i]);
            buf_puts(&b, "\n");
        }
    }

    int rc = -1;
    if (!b.oom && fwrite(b.s, 1, b.len, out) == b.len)
        rc = 0;
    buf_free(&b);
    return rc;
}

static void json_count(struct ddpc_buf *b, const char *key, int64_t n)
{
    if (n < 0)
        buf_printf(b, "\"%s\": null", key);
    else
        buf_printf(b, "\"%s\": %lld", key, (long long)n);
}

static void json_double(struct ddpc_buf *b, const char *key, double v)
{
    buf_printf(b, "\"%s\": ", key);
    buf_json_num(b, v);
}

static void json_string(struct ddpc_buf *b, const char *key, const char *s)
{
    buf_printf(b, "\"%s\": ", key);
    buf_json_str(b, s);
}

/* Long on purpose (~200 lines): the same sections as plan_write_text, as
 * one JSON object written top to bottom; it computes nothing. */
char *plan_json(const struct ddpc_plan *p, const struct ddpc_job *job)
{
    struct ddpc_buf b;
    buf_init(&b);

    buf_puts(&b, "{\n  \"ddpc_plan\": 1,\n  ");
    json_string(&b, "job", job->name);

    buf_puts(&b, ",\n  \"world\": {");
    buf_printf(&b, "\"known\": %s, ", p->world_known ? "true" : "false");
    json_count(&b, "size", p->world_known ? p->world_size : -1);
    buf_printf(&b, ", \"num_nodes\": %d, ", p->num_nodes);
    json_count(&b, "devices_per_node", p->world_known ? p->devices_per_node : -1);
    buf_printf(&b, ", \"accelerator\": \"%s\"}",
               ddpc_enum_spell(&ddpc_enum_accelerator, job->accelerator));

    buf_puts(&b, ",\n  \"ranks\": [");
    for (int r = 0; p->world_known && r < p->world_size; r++)
    {
        buf_printf(&b, "%s\n    {\"rank\": %d, \"node\": %d, \"local_rank\": %d, \"device\": %d, ",
                   r ? "," : "", p->ranks[r].rank, p->ranks[r].node, p->ranks[r].local_rank,
                   p->ranks[r].device);
        json_count(&b, "samples", p->samples_per_rank);
        buf_puts(&b, ", ");
        json_count(&b, "batches_per_epoch", p->batches_per_epoch);
        buf_puts(&b, ", ");
        json_count(&b, "optimizer_steps_per_epoch", p->optimizer_steps_per_epoch);
        buf_puts(&b, "}");
    }
    buf_puts(&b, p->world_known && p->world_size ? "\n  ]" : "]");

    buf_puts(&b, ",\n  \"data\": {");
    json_count(&b, "train_samples", p->train_samples);
    buf_puts(&b, ", ");
    json_string(&b, "samples_source", p->samples_source);
    buf_puts(&b, ",\n    ");
    json_count(&b, "samples_per_rank", p->samples_per_rank);
    buf_puts(&b, ", ");
    json_count(&b, "padded_samples", p->padded_samples);
    buf_puts(&b, ", ");
    json_count(&b, "dropped_samples", p->dropped_samples);
    buf_printf(&b, ", \"shuffle\": %s, \"drop_last\": %s,\n    \"batch_size\": %d, ",
               job->data.shuffle ? "true" : "false", job->data.drop_last ? "true" : "false",
               job->batch_size);
    json_count(&b, "full_batches_per_epoch", p->full_batches_per_epoch);
    buf_puts(&b, ", ");
    json_count(&b, "batches_per_epoch", p->batches_per_epoch);
    buf_puts(&b, ", ");
    json_count(&b, "last_batch_size", p->last_batch_size);
    buf_printf(&b, ",\n    \"grad_accumulation\": %d, ", job->grad_accumulation);
    json_count(&b, "optimizer_steps_per_epoch", p->optimizer_steps_per_epoch);
    buf_printf(&b, ", \"epochs\": %d, ", job->epochs);
    json_count(&b, "total_optimizer_steps", p->total_optimizer_steps);
    buf_puts(&b, ", ");
    json_count(&b, "global_batch", p->global_batch);
    buf_puts(&b, "}");

    buf_puts(&b, ",\n  \"learning_rate\": {");
    json_double(&b, "base", p->lr_base);
    buf_printf(&b, ", \"scaling\": \"%s\", ",
               ddpc_enum_spell(&ddpc_enum_lr_scaling, job->lr_scaling));
    json_double(&b, "factor", p->lr_factor);
    buf_puts(&b, ", ");
    json_double(&b, "peak", p->lr_peak);
    buf_printf(&b, ",\n    \"warmup_steps\": %lld, ", (long long)job->schedule.warmup_steps);
    json_double(&b, "warmup_start_factor", job->schedule.warmup_start_factor);
    buf_printf(&b, ", \"decay\": \"%s\",\n    \"points\": [",
               ddpc_enum_spell(&ddpc_enum_decay, job->schedule.decay));
    for (int i = 0; i < p->n_lr_points; i++) {
        buf_printf(&b, "%s\n      {\"step\": %lld, ", i ? "," : "",
                   (long long)p->lr_points[i].step);
        json_double(&b, "lr", p->lr_points[i].lr);
        buf_puts(&b, ", ");
        json_string(&b, "at", p->lr_points[i].what);
        buf_puts(&b, "}");
    }
    buf_puts(&b, p->n_lr_points ? "\n    ]}" : "]}");

    /* the text plan's layer table; only for sequential models, so the plans
     * of mlp and linear jobs keep their bytes */
    if (layered(job) && p->net) {
        const struct ddpc_net *net = p->net;
        char sh[96];
        buf_printf(&b, ",\n  \"layers\": {\"per\": \"sample\", \"input\": %s, ",
                   layers_shape_str(&net->input, sh, sizeof sh));
        json_double(&b, "fwd_flops", net->fwd_flops);
        buf_puts(&b, ", ");
        json_double(&b, "bwd_flops", net->bwd_flops);
        buf_puts(&b, ", \"list\": [");
        for (int k = 0; k < net->n; k++) {
            const struct ddpc_lnode *L = &net->node[k];
            buf_puts(&b, k ? ",\n    {" : "\n    {");
            json_string(&b, "module", L->name);
            buf_puts(&b, ", ");
            json_string(&b, "layer", layers_type_name(L->it.type));
            buf_printf(&b, ", \"output\": %s, \"params\": %lld, ",
                       layers_shape_str(&L->out, sh, sizeof sh),
                       (long long)(L->tie >= 0 ? L->b_numel : L->w_numel + L->b_numel));
            if (L->tie >= 0)
                buf_printf(&b, "\"tied_to\": \"%s\", ", net->node[L->tie].name);
            json_double(&b, "fwd_flops", L->fwd_flops);
            buf_puts(&b, ", ");
            json_double(&b, "bwd_flops", L->bwd_flops);
            buf_printf(&b, ", \"activation_bytes\": %lld}", (long long)(L->act_floats * 4));
        }
        buf_puts(&b, net->n ? "\n  ]}" : "]}");
    }
    if (job->model.type == DDPC_MODEL_GPT && p->net) {
        const struct ddpc_net *net = p->net;
        int64_t tokens = gpt_tokens_per_step(job);
        buf_puts(&b, ",\n  \"gpt\": {");
        json_double(&b, "flops_per_token", (net->fwd_flops + net->bwd_flops) /
                                           job->model.block_size);
        buf_printf(&b, ", \"activation_bytes_per_sequence\": %lld, "
                   "\"tokens_per_step_per_device\": %lld, \"tokens_per_step\": %lld}",
                   (long long)(p->sample_floats * 4), (long long)tokens,
                   p->world_known ? (long long)tokens * p->world_size : -1LL);
    }

    buf_printf(&b, ",\n  \"parameters\": {\"total\": %lld, \"tensors\": [",
               (long long)p->total_params);
    for (int i = 0; i < p->n_params; i++) {
        const struct ddpc_plan_param *q = &p->params[i];
        buf_printf(&b, "%s\n    {\"name\": \"%s\", ", i ? "," : "", q->name);
        if (layered(job))
            buf_printf(&b, "\"shape\": %s", q->shape);
        else if (q->cols)
            buf_printf(&b, "\"shape\": [%d, %d]", q->rows, q->cols);
        else
            buf_printf(&b, "\"shape\": [%d]", q->rows);
        buf_printf(&b, ", \"numel\": %lld, \"offset\": %lld}", (long long)q->numel,
                   (long long)q->offset);
    }
    buf_puts(&b, "\n  ]}");

    buf_printf(&b, ",\n  \"buckets\": {\"cap_bytes\": %lld, \"order\": \"reverse\", \"list\": [",
               (long long)p->bucket_cap_bytes);
    for (int i = 0; i < p->n_buckets; i++) {
        const struct ddpc_plan_bucket *k = &p->buckets[i];
        buf_printf(&b, "%s\n    {\"index\": %d, \"tensors\": [", i ? "," : "", i);
        for (int j = 0; j < k->n; j++)
            buf_printf(&b, "%s\"%s\"", j ? ", " : "", p->params[k->params[j]].name);
        buf_printf(&b, "], \"numel\": %lld, \"bytes\": %lld}", (long long)k->numel,
                   (long long)k->bytes);
    }
    buf_puts(&b, "\n  ]}");

    buf_printf(&b, ",\n  \"memory_per_device\": {\"bytes_per_float\": 4, \"rows\": %lld, "
               "\"params\": %lld, \"grads\": %lld,\n    \"optimizer_states\": %d, "
               "\"optimizer\": %lld, \"activation_floats\": %lld, \"activations\": %lld,\n"
               "    \"comm\": %lld, \"cast_elements\": [%lld, %lld], \"casts\": %lld, "
               "\"weights_copy\": %lld, \"total\": %lld}",
               (long long)p->buffer_rows, (long long)p->mem_params, (long long)p->mem_grads,
               p->optim_states, (long long)p->mem_optim, (long long)p->activation_floats,
               (long long)p->mem_activations, (long long)p->mem_comm,
               (long long)p->cast_a_elems, (long long)p->cast_b_elems, (long long)p->mem_cast,
               (long long)p->mem_weights_lo, (long long)p->mem_total);

    buf_puts(&b, ",\n  \"communicators\": [");
    if (p->grad_comm) {
        buf_puts(&b, "\n    {\"name\": \"gradient\", ");
        json_double(&b, "timeout_s", p->grad_timeout_s > 0 ? p->grad_timeout_s : NAN);
        buf_puts(&b, ", ");
        json_count(&b, "port", p->ports_fixed ? p->grad_port : -1);
        buf_puts(&b, ", ");
        json_string(&b, "rendezvous", p->rendezvous);
        buf_puts(&b, "}");
        if (p->sync_comm) {
            buf_puts(&b, ",\n    {\"name\": \"rank-sync\", ");
            json_double(&b, "timeout_s", p->sync_timeout_s);
            buf_puts(&b, ", ");
            json_count(&b, "port", p->ports_fixed ? p->sync_port : -1);
            buf_puts(&b, ", ");
            json_string(&b, "rendezvous", p->rendezvous);
            buf_puts(&b, "}");
        }
        buf_puts(&b, "\n  ]");
    } else {
        buf_puts(&b, "]");
    }

    buf_printf(&b, ",\n  \"checkpoint\": {\"enabled\": %s", p->ckpt_enabled ? "true" : "false");
    if (p->ckpt_enabled) {
        buf_puts(&b, ", ");
        json_string(&b, "dir", job->checkpoint_dir);
        buf_printf(&b, ", \"every_n_epochs\": %d, \"saves\": %d, \"keep_last\": %d, "
                   "\"bytes\": %lld", job->checkpoint.every_n_epochs, p->ckpt_saves,
                   job->checkpoint.keep_last, (long long)p->ckpt_bytes);
        /* only when set, so the plans of jobs without them keep their bytes */
        if (job->checkpoint.every_n_steps > 0)
            buf_printf(&b, ", \"every_n_steps\": %lld",
                       (long long)job->checkpoint.every_n_steps);
        if (job->checkpoint.every_n_minutes > 0)
            buf_printf(&b, ", \"every_n_minutes\": %.17g", job->checkpoint.every_n_minutes);
    }
    buf_puts(&b, "}");

    buf_printf(&b, ",\n  \"launch\": {\"launcher\": \"%s\", ",
               ddpc_enum_spell(&ddpc_enum_launcher, job->launch.launcher));
    json_string(&b, "program", p->program);
    buf_puts(&b, ", \"commands\": [");
    for (int i = 0; i < p->n_commands; i++) {
        buf_puts(&b, i ? ", " : "");
        buf_json_str(&b, p->commands[i]);
    }
    buf_puts(&b, "], \"per_node\": [");
    for (int i = 0; i < p->n_node_commands; i++) {
        buf_puts(&b, i ? ", " : "");
        buf_json_str(&b, p->node_commands[i]);
    }
    buf_puts(&b, "]}\n}\n");
    return buf_take(&b);
}
