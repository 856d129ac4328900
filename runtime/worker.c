/* worker.c - one rank's training loop, with PyTorch DDP's semantics.
 *
 * Owns: worker_run (see worker.h) and struct ddpc_run, everything a rank
 * holds. Order of a run: build model/optimizer/sampler; seeded init and
 * broadcast from rank 0; per epoch: per step [rank-sync barrier] ->
 * micro-batches (gather, forward, loss, backward) -> bucketed gradient
 * all-reduce started as backward finishes each bucket -> wait -> clip ->
 * optimizer; then evaluation on this rank's strided test shard and metrics
 * reduced across ranks; rank 0 prints, logs (metrics.h) and checkpoints
 * (ckpt.h). Resume: rank 0 reads the checkpoint and broadcasts it, so every
 * rank continues from the same state. Never exits, never parses YAML, never
 * allocates inside the step loop.
 *
 * With a communicator that offers grad_buffer and shared_buffer (comm.h;
 * comm_shm does, NCCL does not): backward writes gradients straight into the
 * rank's shared slot, a bucket's start only publishes it, the ranks reduce
 * disjoint chunks into one shared result, and the parameters and optimizer
 * state are one shared copy of which each rank updates its chunk. No
 * gradient or parameter is copied; the optimizer's memory-bound pass is
 * split W ways. Without them, the classic path: private buffers reduced in
 * place, every rank runs the whole optimizer. Both give the same bits.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt.h"
#include "env.h"
#include "epoch_batches.h"
#include "ident.h"
#include "metrics.h"
#include "model.h"
#include "ops_kernels.h"
#include "optim.h"
#include "outver.h"
#include "predict.h"
#include "sampler.h"
#include "worker.h"

#define DDPC_MAX_BUCKETS DDPC_MAX_BUCKETS_L
#define DDPC_N_METRICS   10

/* A slice [lo, hi) of the flat gradient buffer, reduced as one collective.
 * Buckets are filled with tensors in reverse order (b_last, W_last, b_..., W0)
 * until they hold >= bucket_cap_mb MiB, like torch DDP's bucket assignment
 * (without its smaller first bucket). */
struct ddpc_bucket {
    size_t lo, hi;          /* floats */
    int    low_node;        /* node owning the tensor at lo: done => bucket ready */
    int    started;
};

struct ddpc_run {
    const struct ddpc_worker_args *a;
    const struct ddpc_job *job;
    struct ddpc_ops       *ops;
    struct ddpc_model      model;
    struct ddpc_optim      optim;
    struct ddpc_sampler    sampler;
    int      rank, world;
    int      comm_on;       /* world > 1: gradients are all-reduced */
    int      batch;         /* per-rank batch size */
    int      in_dim, out_dim;
    int      seq_len;       /* labels per sample: 1, or T for token windows (data.h) */
    int      eval_rows;     /* rows per evaluation batch */
    size_t   n_ck;          /* floats of a checkpoint's "params": parameters, then
                               batch-norm running statistics (model.state) */
    int      use_y;         /* mse: float targets (from y, or one-hot labels) */
    /* fp16 dynamic loss scaling, like torch.cuda.amp.GradScaler: the loss
     * gradient is multiplied by loss_scale; a step whose averaged gradients
     * are not finite is skipped and the scale halved; 2000 good steps in a
     * row double it. Powers of two, so scaling itself never rounds. The
     * loss itself is never scaled: a non-finite loss is divergence, an
     * error as in fp32. A scale halved below 1 means the gradients overflow
     * fp16 unscaled: an error too, not a run that skips every step. The
     * state is checkpointed, so a resume continues with the same scale. */
    struct {
        int      on;            /* precision: fp16 */
        float    scale;
        int      good_steps;
        int64_t  skipped_steps;
    } scaler;
    /* host staging and the backend's copies of a batch */
    struct {
        /* host staging; aliases the backend buffers when ops->host_memory */
        float   *hx;            /* [max_rows, in] */
        int32_t *hlab;          /* [max_rows * seq_len] */
        float   *hy;            /* [max_rows, out] */
        /* with ops->to_device_async: two pinned sets of the three above that
         * alternate (hx, hlab, hy point at the one in use), so a batch's copy
         * to the device never makes the host wait (ops.h fence) */
        void    *stage[2][3];
        int      staged, stage_slot;
        float   *dx;            /* backend copies of the same */
        int32_t *dlab;
        float   *dy;
    } buf;
    int64_t *eidx;          /* [DDPC_EVAL_BATCH] test indices of one eval batch */
    float   *metric;        /* [DDPC_N_METRICS] backend, for metric all-reduce */
    /* [2 * DDPC_LOSS_ACC] backend: the loss accumulators ops->loss adds into
     * (ops.h), this epoch's training first, then one evaluation's. On a GPU
     * they live on the device and are read only where the numbers are
     * needed (acc_read: logging steps, progress redraws, epoch end), so a
     * step never waits for the device to hand the host its loss. */
    double  *acc;
    /* Averaged gradients the optimizer reads: model.grads (reduced in place)
     * or, with a zero-copy communicator, its shared result buffer. */
    float   *rgrads;
    /* 1: params and optimizer state are one copy in memory the ranks share
     * (comm.h shared_buffer); each rank updates its shard and a barrier on
     * the gradient communicator ends the step. */
    int      shared_state;
    int      params_pending;    /* shards updated, no barrier since (params_ready) */
    struct ddpc_bucket bucket[DDPC_MAX_BUCKETS];
    int      n_buckets;
    long     step_no;       /* 1-based number of the step in progress, for messages */
    int      end_of_epoch;  /* 1-based epoch whose end (evaluation, report,
                               checkpoint) runs; 0 inside a step */
    int      fail_located;  /* the recorded error already says where it happened */
    /* Step-time breakdown, seconds summed over this run's steps: two clock
     * reads per phase (~40 ns) are cheap enough to keep always on; rank 0
     * prints it with DDPC_PROFILE=1. sync: the rank-sync barrier and, with
     * sharded optimizer state, the wait for the other ranks' shards. */
    struct {
        double data, fwd, bwd, comm, opt, sync, other;
        long   steps;
    } prof;
    /* rank 0's logging */
    struct {
        struct ddpc_job     mjob;   /* job as metrics sees it (progress off without out) */
        struct ddpc_metrics metrics;
        int                 on;
    } log;
    /* checkpoints: resume position, identity and cadence (ident.h;
     * every_n_steps/minutes) */
    struct {
        int      on;            /* checkpoint_dir is set */
        size_t   n_opt;         /* optimizer state floats: 0, n (momentum) or 2n (Adam) */
        float   *host_state;    /* [n_params + n_opt] rank 0's host copy; NULL elsewhere */
        int64_t  start_epoch;   /* where a resumed run continues */
        int64_t  start_batch;
        double   start_loss;    /* rank 0: the training loss of start_epoch before
                                   start_batch, every rank's (the checkpoint's
                                   epoch_loss; 0: none) */
        int64_t  file_step;     /* rank 0: the resumed checkpoint's own step count (its
                                   run's metrics rows end there; optim.step may be
                                   this job's count: resume_step) */
        int      resumed;
        char    *ident;         /* rank 0: this run's description; NULL elsewhere */
        char     ident_hash[DDPC_IDENT_HASH_LEN + 1];
        struct ddpc_out_id out_id;  /* the identity outputs carry (outver.h) */
        double   last_t;        /* rank 0: start, or the last checkpoint written */
        double   check_t;       /* rank 0: time of the last every_n_minutes look */
        int64_t  check_step;    /* all ranks: step of that look */
        int64_t  check_at;      /* all ranks: step of the next look */
    } ckpt;
};

/* ===== errors ===== */

/* Prefixes the recorded message, once, with where the run was: "step 37:
 * ..." inside a step, "epoch 2's end, after step 37: ..." in the
 * evaluation, report and checkpoint that close an epoch. */
static int step_fail(struct ddpc_run *r, struct ddpc_err *e, int rc)
{
    if (r->fail_located)
        return rc;
    r->fail_located = 1;
    char tmp[sizeof e->msg];
    int n = r->end_of_epoch
                ? snprintf(tmp, sizeof tmp, "epoch %d's end, after step %ld: %s",
                           r->end_of_epoch, (long)r->optim.step, e->msg)
                : snprintf(tmp, sizeof tmp, "step %ld: %s", r->step_no, e->msg);
    if (n > 0)   /* truncated at worst, always terminated */
        memcpy(e->msg, tmp, sizeof tmp);
    return rc;
}

/* ===== finite gradients ===== */

/* Whether x[n] holds no NaN or infinity, i.e. its norm is finite. Float
 * bits, not isfinite(), so the loop vectorizes (measured on the example
 * MLP's 203,530 gradients: 18 us vectorized, 74 us not). */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("tree-vectorize")))
#endif
static int floats_finite(const float *x, size_t n)
{
    uint32_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        bad |= (uint32_t)((u & 0x7f800000u) == 0x7f800000u);
    }
    return bad == 0;
}

/* fp32: a NaN or infinite gradient after the all-reduce ends the job at this
 * step instead of turning the parameters into NaN (the loss check catches a
 * non-finite loss, but a gradient can overflow with a finite loss, and relu
 * can hide NaN parameters from later losses). Checks g[lo, hi) of the
 * averaged gradients; ss: their sum of squares when clipping computed it, or
 * < 0. With host memory the scan runs every step on the slice this rank's
 * optimizer is about to read (warm in cache, 1/W of the gradients with
 * sharded state); a rank that finds one aborts the others with this
 * message. A GPU's gradients are checked (sumsq) only where the host reads
 * the loss anyway, like the loss itself. */
static int grads_check(struct ddpc_run *r, size_t lo, size_t hi, double ss, struct ddpc_err *e)
{
    if (ss < 0) {
        if (r->ops->host_memory) {
            if (floats_finite(r->rgrads + lo, hi - lo))
                return 0;
            for (size_t i = lo; i < hi; i++)
                if (!isfinite(r->rgrads[i])) {
                    ss = r->rgrads[i];   /* NaN or an infinity, as the norm would be */
                    break;
                }
        } else {
            DDPC_TRY(r->ops->sumsq(r->ops, r->rgrads + lo, hi - lo, &ss, e));
        }
    }
    if (isfinite(ss))
        return 0;
    return DDPC_FAIL(e, DDPC_E_DIVERGED,
                     "step %ld: the gradient norm is not finite (%s) on rank %d%s: the run "
                     "diverged. Lower learning_rate, set grad_clip_norm, or check the data",
                     r->step_no, isnan(ss) ? "a gradient is NaN" : "a gradient is infinite",
                     r->rank, r->comm_on ? " after the all-reduce" : "");
}

/* ===== buckets ===== */

/* layers_buckets: the function `ddpc plan` prints the buckets with. */
static void buckets_plan(struct ddpc_run *r)
{
    struct ddpc_bucket_span span[DDPC_MAX_BUCKETS];
    int nb = layers_buckets(&r->model.net, r->job->bucket_cap_mb * 1048576.0, span,
                            DDPC_MAX_BUCKETS);
    for (int i = 0; i < nb; i++) {
        r->bucket[i].lo = span[i].lo;
        r->bucket[i].hi = span[i].hi;
        r->bucket[i].low_node = span[i].low_node;
        r->bucket[i].started = 0;
    }
    r->n_buckets = nb;
}

static int bucket_start(struct ddpc_run *r, int i, struct ddpc_err *e)
{
    struct ddpc_comm *c = r->a->grad_comm;
    struct ddpc_bucket *b = &r->bucket[i];
    b->started = 1;
    int rc = c->all_reduce_start(c, i, r->model.grads + b->lo, r->rgrads + b->lo,
                                 b->hi - b->lo, DDPC_REDUCE_AVG,
                                 ddpc_deadline_after(r->job->nccl_timeout_s), e);
    return rc < 0 ? step_fail(r, e, rc) : 0;
}

/* model_backward hook: start every bucket whose tensors are all final. */
static int on_layer_done(void *ctx, int node, struct ddpc_err *e)
{
    struct ddpc_run *r = ctx;
    for (int i = 0; i < r->n_buckets; i++)
        if (!r->bucket[i].started && r->bucket[i].low_node >= node)
            DDPC_TRY(bucket_start(r, i, e));
    return 0;
}

static int buckets_finish(struct ddpc_run *r, struct ddpc_err *e)
{
    struct ddpc_comm *c = r->a->grad_comm;
    for (int i = 0; i < r->n_buckets; i++)
        if (!r->bucket[i].started)
            DDPC_TRY(bucket_start(r, i, e));
    for (int i = 0; i < r->n_buckets; i++) {
        int rc = c->all_reduce_wait(c, i, ddpc_deadline_after(r->job->nccl_timeout_s), e);
        if (rc < 0)
            return step_fail(r, e, rc);
        r->bucket[i].started = 0;
    }
    return 0;
}

/* The optimizer step. With shared state, this rank updates only its shard
 * of each bucket (the chunk it reduced, still in its cache); every shard
 * must be written before anyone reads the parameters again (the next
 * forward, evaluation, a checkpoint). That needs a barrier, but not a
 * dedicated one right here: the step only marks the update pending, and
 * params_ready pays for it where the parameters are next read, unless the
 * next step's rank-sync barrier (a release/acquire barrier between the
 * same processes) already ordered it. The update is element-wise, so
 * sharding changes no value. */
static int run_optim_step(struct ddpc_run *r, float gscale, int check, struct ddpc_err *e)
{
    if (!r->shared_state) {
        if (check)
            DDPC_TRY(grads_check(r, 0, r->model.n_params, -1, e));
        return optim_step(&r->optim, r->model.params, r->rgrads, gscale, e);
    }
    int W = r->world;
    for (int i = 0; i < r->n_buckets; i++) {
        size_t off = r->bucket[i].lo, n = r->bucket[i].hi - off;
        size_t per = (n + (size_t)W - 1) / (size_t)W;
        size_t lo = off + per * (size_t)r->rank, hi = lo + per;
        lo = (lo + 15) / 16 * 16;    /* cache-line edges, as comm_shm's chunks */
        hi = (hi + 15) / 16 * 16;
        if (r->rank == 0)
            lo = off;
        if (r->rank == W - 1 || hi > off + n)
            hi = off + n;
        if (lo >= hi)
            continue;
        if (check)
            DDPC_TRY(grads_check(r, lo, hi, -1, e));
        DDPC_TRY(optim_update(&r->optim, r->model.params, r->rgrads, lo, hi, gscale, e));
    }
    r->optim.step++;
    r->params_pending = 1;
    return 0;
}

/* Before anything reads the parameters: every rank's shard is written.
 * Every rank reaches the same calls (same steps, same epochs), so the
 * barriers match. */
static int params_ready(struct ddpc_run *r, struct ddpc_err *e)
{
    if (!r->params_pending)
        return 0;
    r->params_pending = 0;
    struct ddpc_comm *c = r->a->grad_comm;
    int rc = c->barrier(c, ddpc_deadline_after(r->job->nccl_timeout_s), e);
    return rc < 0 ? step_fail(r, e, rc) : 0;
}

/* ===== setup ===== */

static int run_check_data(struct ddpc_run *r, const struct ddpc_dataset *ds, const char *what,
                          struct ddpc_err *e)
{
    const struct ddpc_job *j = r->job;
    if (ds->stride > 0) {
        /* token windows (data_set_windows): T inputs, T labels, every token
         * already checked against vocab_size at load */
        if (ds->features != r->in_dim)
            return DDPC_FAIL(e, DDPC_E_INVALID, "%s data (%s): windows of %d tokens, but the "
                             "model reads %d", what, ds->source, (int)ds->features, r->in_dim);
        return 0;
    }
    if (ds->features != r->in_dim && j->model.type == DDPC_MODEL_SEQUENTIAL)
        return DDPC_FAIL(e, DDPC_E_DATA, "%s data (%s) has %d features per sample but "
                         "model.input is %d floats per sample; set model.input to the shape "
                         "of one sample of this data, or build with the data the model is for",
                         what, ds->source, (int)ds->features, r->in_dim);
    if (ds->features != r->in_dim)
        return DDPC_FAIL(e, DDPC_E_DATA, "%s data (%s) has %d features per sample but "
                         "model.layers[0] is %d; make them equal", what, ds->source,
                         (int)ds->features, r->in_dim);
    if (j->loss == DDPC_LOSS_CROSS_ENTROPY) {
        /* a CSV whose labels are in another column than label_column says */
        int lc_bad = !ds->labels || ds->classes > r->out_dim;
        if (lc_bad && ds->label_hint >= 0 && ds->label_hint_max < r->out_dim) {
            const struct ddpc_data_source *src = strcmp(what, "test") == 0 ? &j->data.test
                                                                           : &j->data.train;
            return DDPC_FAIL(e, DDPC_E_DATA, "%s data (%s): column %d (label_column) %s, so it "
                             "is not the label column; column %d holds whole numbers up to %d: "
                             "set data.%s.label_column: %d", what, ds->source,
                             (int)src->label_column, !ds->label_ok
                                 ? "holds values that are not class labels (fractions or "
                                   "negative numbers)"
                                 : "has more classes than the model has outputs",
                             (int)ds->label_hint, (int)ds->label_hint_max, what,
                             (int)ds->label_hint);
        }
        if (!ds->labels)
            return DDPC_FAIL(e, DDPC_E_DATA, "%s data (%s) has no class labels, which "
                             "cross_entropy needs%s%s; use loss: mse for regression targets",
                             what, ds->labels_source, ds->label_note[0] ? ": " : "",
                             ds->label_note);
        if (ds->classes > r->out_dim && ds->label_max_line > 0) {
            /* a CSV: where the largest label is, and how many rows are past the outputs */
            int64_t past = 0;
            for (int64_t i = 0; i < ds->n; i++)
                past += ds->labels[i] >= r->out_dim;
            return DDPC_FAIL(e, DDPC_E_DATA, "%s:%lld: label %d, the largest of the %s data, "
                             "needs %d outputs, but the model has %d (%lld row%s %s a label "
                             "of %d or more); the last of model.layers must be >= %d, or fix "
                             "those rows", ds->labels_source, (long long)ds->label_max_line,
                             (int)ds->classes - 1, what, (int)ds->classes, r->out_dim,
                             (long long)past, past == 1 ? "" : "s", past == 1 ? "has" : "have",
                             r->out_dim, (int)ds->classes);
        }
        if (ds->classes > r->out_dim)
            return DDPC_FAIL(e, DDPC_E_DATA, "%s labels (%s) go up to %d but the model "
                             "has %d outputs; the last of model.layers must be >= %d", what,
                             ds->labels_source, (int)ds->classes - 1, r->out_dim,
                             (int)ds->classes);
    } else {
        if (ds->y && ds->targets == r->out_dim && !(ds->labels && r->out_dim > 1))
            return 0;
        if (ds->labels && ds->classes <= r->out_dim && r->out_dim > 1)
            return 0;   /* one-hot targets */
        return DDPC_FAIL(e, DDPC_E_DATA, "%s data (%s) has %d targets per sample but the model "
                         "has %d outputs; mse needs them equal", what, ds->labels_source,
                         ds->y ? (int)ds->targets : (int)ds->classes, r->out_dim);
    }
    return 0;
}

/* With a zero-copy communicator (comm.h grad_buffer, shared_buffer): the
 * gradients, then params and optimizer state, in memory the ranks share. */
static int run_share(struct ddpc_run *r, struct ddpc_err *e)
{
    const struct ddpc_worker_args *a = r->a;
    r->rgrads = r->model.grads;
    struct ddpc_comm *gc = a->grad_comm;
    if (r->comm_on && gc->grad_buffer && r->ops->host_memory) {
        /* Backward writes straight into this rank's shared slot and the
         * optimizer reads the shared average: no copy in, no copy out. */
        float *send = NULL, *result = NULL;
        DDPC_TRY(gc->grad_buffer(gc, r->model.n_params, &send, &result, e));
        if (send && result) {
            model_borrow_grads(&r->model, send);
            r->rgrads = result;
        }
    }
    if (r->rgrads != r->model.grads && gc->shared_buffer) {
        /* One copy of params, m and v instead of one per rank: less memory,
         * and each rank runs the (memory-bound) optimizer on 1/W of it. */
        size_t n = r->model.n_params;
        size_t nst = n + (r->optim.m ? n : 0) + (r->optim.v ? n : 0);
        float *st = NULL;
        DDPC_TRY(gc->shared_buffer(gc, nst, &st, e));
        if (st) {
            model_borrow_params(&r->model, st);
            if (r->optim.m) {
                r->ops->release(r->ops, r->optim.m);
                r->optim.m = st + n;
            }
            if (r->optim.v) {
                r->ops->release(r->ops, r->optim.v);
                r->optim.v = st + 2 * n;
            }
            r->shared_state = 1;
        }
    }

    return 0;
}

/* The batch buffers: the backend's, and the host's staging for them
 * (aliases on the CPU, pinned pairs or malloc on a device). */
static int run_alloc_buffers(struct ddpc_run *r, int max_rows, struct ddpc_err *e)
{
    struct ddpc_ops *o = r->ops;
    /* device backends: the weights' low-precision copy and every scratch
     * buffer sized now, so no step allocates (ops.h) */
    if (o->set_weights)
        DDPC_TRY(o->set_weights(o, r->model.params, r->model.n_params, e));
    if (o->reserve) {
        /* the largest gemm operand that is not a weight: a node's input or
         * output activations, a convolution's im2col columns, or unfused
         * attention's probabilities (the model's scratch) */
        const struct ddpc_net *net = &r->model.net;
        int64_t widest = r->model.scratch_floats > 1 ? r->model.scratch_floats : 1;
        for (int k = 0; k < net->n; k++) {
            const struct ddpc_lnode *nd = &net->node[k];
            widest = nd->in_numel > widest ? nd->in_numel : widest;
            widest = nd->out_numel > widest ? nd->out_numel : widest;
        }
        DDPC_TRY(o->reserve(o, max_rows, (size_t)max_rows * (size_t)widest, e));
    }
    size_t xb = (size_t)max_rows * r->in_dim * sizeof(float);
    size_t lb = (size_t)max_rows * (size_t)r->seq_len * sizeof(int32_t);
    size_t yb = (size_t)max_rows * r->out_dim * sizeof(float);
    DDPC_TRY(o->alloc(o, (void **)&r->buf.dx, xb, e));
    DDPC_TRY(o->alloc(o, (void **)&r->buf.dlab, lb, e));
    DDPC_TRY(o->alloc(o, (void **)&r->buf.dy, yb, e));
    DDPC_TRY(o->alloc(o, (void **)&r->metric, DDPC_N_METRICS * sizeof(float), e));
    DDPC_TRY(o->alloc(o, (void **)&r->acc, 2 * DDPC_LOSS_ACC * sizeof(double), e));
    if (o->host_memory) {
        r->buf.hx = r->buf.dx;
        r->buf.hlab = r->buf.dlab;
        r->buf.hy = r->buf.dy;
    } else if (o->host_alloc && o->to_device_async && o->fence) {
        size_t bytes[3] = { xb, lb, yb };
        r->buf.staged = 1;
        for (int k = 0; k < 2; k++)
            for (int i = 0; i < 3; i++)
                DDPC_TRY(o->host_alloc(o, &r->buf.stage[k][i], bytes[i], e));
        r->buf.hx = r->buf.stage[0][0];
        r->buf.hlab = r->buf.stage[0][1];
        r->buf.hy = r->buf.stage[0][2];
    } else {
        r->buf.hx = malloc(xb);
        r->buf.hlab = malloc(lb);
        r->buf.hy = malloc(yb);
    }
    r->eidx = malloc((size_t)r->eval_rows * sizeof *r->eidx);
    if (!r->buf.hx || !r->buf.hlab || !r->buf.hy || !r->eidx)
        return DDPC_FAIL(e, DDPC_E_NOMEM, "worker: cannot allocate batch buffers");
    return 0;
}

/* Checkpoint state: rank 0's host copy, the directory's preflight, the
 * run's identity (ident.h) and the cadence clocks. */
static int run_ckpt_init(struct ddpc_run *r, struct ddpc_err *e)
{
    const struct ddpc_job *j = r->job;
    r->ckpt.on = j->checkpoint_dir && *j->checkpoint_dir;
    r->ckpt.n_opt = (r->optim.m ? r->model.n_params : 0) + (r->optim.v ? r->model.n_params : 0);
    r->n_ck = r->model.n_params + r->model.n_state;
    if (r->rank == 0 && !r->a->eval &&
        (r->ckpt.on || (j->checkpoint.export_path && *j->checkpoint.export_path))) {
        r->ckpt.host_state = malloc((r->n_ck + r->ckpt.n_opt) * sizeof(float));
        if (!r->ckpt.host_state)
            return DDPC_FAIL(e, DDPC_E_NOMEM, "worker: cannot allocate the checkpoint buffer");
    }
    if (r->rank == 0 && r->ckpt.on && !r->a->eval)   /* --eval writes nothing there */
        DDPC_TRY(ckpt_preflight(j->checkpoint_dir,
                                ckpt_file_size(r->n_ck, r->ckpt.n_opt) +
                                DDPC_CKPT_IDENT_MAX, e));
    {   /* every rank: run_same_job compares the identities */
        size_t cap = 16384;
        r->ckpt.ident = malloc(cap);
        if (!r->ckpt.ident)
            return DDPC_FAIL(e, DDPC_E_NOMEM, "worker: cannot allocate the run's description");
        if (ident_format(j, r->world, r->ops->name, r->ckpt.ident, cap) < 0)
            return DDPC_FAIL(e, DDPC_E_INVALID, "worker: the run's description exceeds %zu "
                             "bytes (paths that long?)", cap);
        ident_hash(r->ckpt.ident, r->ckpt.ident_hash);
        r->ckpt.out_id = (struct ddpc_out_id){
            .job = j->name, .hash = r->ckpt.ident_hash, .ident = r->ckpt.ident,
            .refuse = j->other_run_outputs == DDPC_OTHER_OUTPUTS_REFUSE,
        };
        r->ckpt.last_t = r->ckpt.check_t = ddpc_now();
    }
    return 0;
}

static int run_init(struct ddpc_run *r, const struct ddpc_worker_args *a, struct ddpc_err *e)
{
    const struct ddpc_job *j = a->job;
    memset(r, 0, sizeof *r);
    r->a = a;
    r->job = j;
    r->ops = a->ops;
    r->rank = a->rank;
    r->world = a->world;
    r->comm_on = a->world > 1;
    r->batch = j->batch_size;
    if (r->comm_on && !a->grad_comm)
        return DDPC_FAIL(e, DDPC_E_INVALID, "world %d needs a gradient communicator", a->world);
    if (!a->train && !a->eval)
        return DDPC_FAIL(e, DDPC_E_INVALID, "no training data");
    if (j->batch_size <= 0 || j->epochs < 0)
        return DDPC_FAIL(e, DDPC_E_INVALID, "batch_size %d, epochs %d", (int)j->batch_size,
                         (int)j->epochs);
    /* the model's input and output sizes, the evaluation batch and the
     * rows the buffers hold */
    int seq = 1, max_rows = 0;
    {
        struct ddpc_net *net = malloc(sizeof *net);
        char why[512];
        int bad;
        if (!net)
            return DDPC_FAIL(e, DDPC_E_NOMEM, "worker: out of memory");
        if (layers_build(j, NULL, net, &bad, why, sizeof why) < 0) {
            free(net);
            return DDPC_FAIL(e, DDPC_E_INVALID, "model: %s", why);
        }
        r->in_dim = (int)net->in_numel;
        /* a gpt's logits are [T, V] per sample: the loss sees T rows of V */
        r->out_dim = (int)(net->out_numel / (net->seq_len > 1 ? net->seq_len : 1));
        seq = net->seq_len > 1 ? net->seq_len : 1;
        r->eval_rows = layers_eval_rows(net, r->batch, DDPC_EVAL_BATCH);
        max_rows = layers_buffer_rows(net, r->batch, a->test != NULL || a->eval != NULL);
        free(net);
    }
    if (a->train)
        DDPC_TRY(run_check_data(r, a->train, "train", e));
    if (a->test)
        DDPC_TRY(run_check_data(r, a->test, "test", e));
    r->seq_len = !a->train ? seq : a->train->seq_len > 1 ? a->train->seq_len : 1;
    if (r->seq_len != seq)
        return DDPC_FAIL(e, DDPC_E_INVALID, "training data has %d labels per sample, the model "
                         "predicts %d", r->seq_len, seq);
    if (a->test && (a->test->seq_len > 1 ? a->test->seq_len : 1) != r->seq_len)
        return DDPC_FAIL(e, DDPC_E_INVALID, "test data has %d labels per sample, training "
                         "data %d", (int)a->test->seq_len, r->seq_len);
    if (j->loss == DDPC_LOSS_MSE)
        r->use_y = 1;
    /* reduced-precision gemm inputs where the backend has them (CUDA); the
     * CPU backend ignores the field and stays fp32, so it needs no scaler */
    r->ops->gemm_precision = (int)j->precision;
    r->ops->matmul_tf32 = j->matmul_precision == DDPC_MATMUL_HIGH;
    r->ops->fused_attn = r->ops->fused_attn && env_get()->fused_attn;   /* before model_init */
    r->ops->wait_timeout_s = j->nccl_timeout_s;   /* device waits are bounded (ops.h) */
    r->scaler.on = j->precision == DDPC_PRECISION_FP16 && !r->ops->host_memory;
    r->scaler.scale = 65536.0f;
    DDPC_TRY(model_init(&r->model, r->ops, j, max_rows, e));
    if (a->eval) {   /* the model only: no sampler, optimizer or shared state */
        DDPC_TRY(run_alloc_buffers(r, max_rows, e));
        return run_ckpt_init(r, e);
    }
    DDPC_TRY(sampler_init(&r->sampler, a->train->n, r->rank, r->world, r->batch,
                          j->data.shuffle, j->data.drop_last, j->seed, j->limit_train_batches,
                          j->limit_train_fraction, e));
    int64_t steps_per_epoch = epoch_optimizer_steps(r->sampler.n_batches, j->grad_accumulation);
    DDPC_TRY(optim_init(&r->optim, r->ops, j, &r->model.net, r->world, r->model.n_params,
                        steps_per_epoch * j->epochs, e));
    buckets_plan(r);
    DDPC_TRY(run_share(r, e));
    DDPC_TRY(run_alloc_buffers(r, max_rows, e));
    return run_ckpt_init(r, e);
}

static void run_free(struct ddpc_run *r)
{
    struct ddpc_ops *o = r->ops;
    if (!o)
        return;
    if (r->buf.staged) {
        for (int k = 0; k < 2; k++)
            for (int i = 0; i < 3; i++)
                o->host_free(o, r->buf.stage[k][i]);
    } else if (!o->host_memory) {
        free(r->buf.hx);
        free(r->buf.hlab);
        free(r->buf.hy);
    }
    if (r->buf.dx) o->release(o, r->buf.dx);
    if (r->buf.dlab) o->release(o, r->buf.dlab);
    if (r->buf.dy) o->release(o, r->buf.dy);
    if (r->metric) o->release(o, r->metric);
    if (r->acc) o->release(o, r->acc);
    if (r->log.on) {
        struct ddpc_err ignored = {0};   /* keep the error that ended the run */
        (void)metrics_close(&r->log.metrics, &ignored);
    }
    free(r->ckpt.host_state);
    free(r->ckpt.ident);
    free(r->eidx);
    if (r->shared_state)
        r->optim.m = r->optim.v = NULL;   /* borrowed from the communicator */
    optim_free(&r->optim);
    sampler_free(&r->sampler);
    model_free(&r->model);
    memset(r, 0, sizeof *r);
}

/* ===== one batch ===== */

/* Gathers samples idx[0..rows) of ds into the backend batch buffers. */
static int batch_load(struct ddpc_run *r, const struct ddpc_dataset *ds, const int64_t *idx,
                      int rows, struct ddpc_err *e)
{
    struct ddpc_ops *o = r->ops;
    /* mse: targets as the file holds them, or one-hot class labels; decided
     * per set (run_check_data's two cases), so a test set of labels is
     * not read as the training set's targets, nor the other way round (the
     * buffer of the form not gathered holds the last training batch) */
    int onehot = r->use_y && !(ds->y && ds->targets == r->out_dim &&
                               !(ds->labels && r->out_dim > 1));
    int want_lab = !r->use_y || onehot;
    int k = r->buf.stage_slot;
    if (r->buf.staged) {
        /* this set's last copy (two batches ago) has left host memory */
        DDPC_TRY(o->fence(o, k, e));
        r->buf.stage_slot ^= 1;
        r->buf.hx = r->buf.stage[k][0];
        r->buf.hlab = r->buf.stage[k][1];
        r->buf.hy = r->buf.stage[k][2];
    }
    data_gather(ds, idx, rows, r->buf.hx, want_lab ? r->buf.hlab : NULL,
                r->use_y && !onehot ? r->buf.hy : NULL);
    if (onehot) {
        memset(r->buf.hy, 0, (size_t)rows * r->out_dim * sizeof *r->buf.hy);
        for (int i = 0; i < rows; i++)
            r->buf.hy[(size_t)i * r->out_dim + r->buf.hlab[i]] = 1.0f;
    }
    size_t xbytes = (size_t)rows * r->in_dim * sizeof(float);
    size_t ybytes = (size_t)rows * r->out_dim * sizeof(float);
    size_t lbytes = (size_t)rows * (size_t)r->seq_len * sizeof(int32_t);
    if (r->buf.staged) {
        DDPC_TRY(o->to_device_async(o, r->buf.dx, r->buf.hx, xbytes, k, e));
        if (r->use_y)
            DDPC_TRY(o->to_device_async(o, r->buf.dy, r->buf.hy, ybytes, k, e));
        else
            DDPC_TRY(o->to_device_async(o, r->buf.dlab, r->buf.hlab, lbytes, k, e));
    } else if (!o->host_memory) {
        DDPC_TRY(o->to_device(o, r->buf.dx, r->buf.hx, xbytes, e));
        if (r->use_y)
            DDPC_TRY(o->to_device(o, r->buf.dy, r->buf.hy, ybytes, e));
        else
            DDPC_TRY(o->to_device(o, r->buf.dlab, r->buf.hlab, lbytes, e));
    }
    return 0;
}

/* Forward + loss; dlogits land in model.dbuf[0]; the loss sum and correct
 * count are added into acc (backend memory, ops.h). A gpt's loss runs over
 * rows * T rows of logits [V], one label each (the next token), so acc
 * sums per-token losses; grad_scale already divides by the tokens. */
static int batch_forward(struct ddpc_run *r, int rows, float grad_scale, double *acc,
                         struct ddpc_err *e)
{
    struct ddpc_ops *o = r->ops;
    DDPC_TRY(model_forward(&r->model, r->buf.dx, rows, e));
    return o->loss(o, (int)r->job->loss, r->model.logits, r->use_y ? NULL : r->buf.dlab,
                   r->use_y ? r->buf.dy : NULL, r->model.dbuf[0], rows * r->seq_len,
                   r->out_dim, grad_scale, acc, e);
}

/* Loss accumulator `which` (0 training, 1 evaluation) set to zero. */
static int acc_zero(struct ddpc_run *r, int which, struct ddpc_err *e)
{
    static const double zero[DDPC_LOSS_ACC];
    struct ddpc_ops *o = r->ops;
    double *acc = r->acc + which * DDPC_LOSS_ACC;
    if (o->host_memory) {
        memset(acc, 0, sizeof zero);
        return 0;
    }
    return o->to_device(o, acc, zero, sizeof zero, e);
}

/* Loss accumulator `which` into host[DDPC_LOSS_ACC]: in place on the CPU, a
 * wait for the device on a GPU (so only where the numbers are needed). A
 * label the device found out of range is reported here (ops.h). */
static int acc_read(struct ddpc_run *r, int which, double *host, struct ddpc_err *e)
{
    struct ddpc_ops *o = r->ops;
    const double *acc = r->acc + which * DDPC_LOSS_ACC;
    if (o->host_memory)
        memcpy(host, acc, DDPC_LOSS_ACC * sizeof *host);
    else
        DDPC_TRY(o->to_host(o, host, acc, DDPC_LOSS_ACC * sizeof *host, e));
    if (host[2] > 0)
        return DDPC_FAIL(e, DDPC_E_DATA, "%.0f label(s) out of range for %d output classes; "
                         "model.layers must end with the number of classes", host[2],
                         r->out_dim);
    return 0;
}

/* The training loss so far this epoch into cur[DDPC_LOSS_ACC]; a loss that
 * is not finite ends the run naming the step that read it. */
static int train_loss_read(struct ddpc_run *r, double *cur, struct ddpc_err *e)
{
    DDPC_TRY(acc_read(r, 0, cur, e));
    if (!isfinite(cur[0]))
        return DDPC_FAIL(e, DDPC_E_DIVERGED,
                         "step %ld: the training loss is %g on rank %d (read at this step; it "
                         "became non-finite at or before it): the run diverged. Lower "
                         "learning_rate, set grad_clip_norm, or check the data for nan/inf",
                         r->step_no, cur[0], r->rank);
    return 0;
}

/* ===== metrics ===== */

/* Doubles through the small metric buffer as float pairs hi + lo, which
 * keep ~48 bits (counts exact below 2^48): summed over ranks (bcast 0) or
 * rank 0's sent to all (bcast 1). A value past float's range goes as an
 * infinity of its sign (hi = inf, lo = -inf would sum to nan), so that a
 * diverging loss sum arrives infinite on every rank (reduced_loss_ok). */
static int doubles_collective(struct ddpc_run *r, double *v, int n, int bcast,
                              struct ddpc_err *e)
{
    if (!r->comm_on)
        return 0;
    struct ddpc_ops *o = r->ops;
    struct ddpc_comm *c = r->a->grad_comm;
    double deadline = ddpc_deadline_after(r->job->nccl_timeout_s);
    float h[DDPC_N_METRICS];
    if (n < 0 || 2 * n > DDPC_N_METRICS)
        return DDPC_FAIL(e, DDPC_E_INVALID, "worker: %d values exceed the collective's %d",
                         n, DDPC_N_METRICS / 2);
    for (int i = 0; i < n; i++) {
        h[2 * i] = (float)v[i];
        h[2 * i + 1] = isfinite(h[2 * i]) ? (float)(v[i] - (double)h[2 * i]) : 0.0f;
    }
    DDPC_TRY(o->to_device(o, r->metric, h, (size_t)2 * n * sizeof(float), e));
    if (bcast)
        DDPC_TRY(c->broadcast(c, r->metric, (size_t)2 * n, 0, deadline, e));
    else
        DDPC_TRY(comm_all_reduce(c, r->metric, r->metric, (size_t)2 * n, DDPC_REDUCE_SUM,
                                 deadline, e));
    DDPC_TRY(o->to_host(o, h, r->metric, (size_t)2 * n * sizeof(float), e));
    for (int i = 0; i < n; i++)
        v[i] = (double)h[2 * i] + (double)h[2 * i + 1];
    return 0;
}

/* Sums v[n] over ranks. */
static int metrics_reduce(struct ddpc_run *r, double *v, int n, struct ddpc_err *e)
{
    return doubles_collective(r, v, n, 0, e);
}

/* A training loss summed over the ranks (`what`: "the loss of the steps
 * since step N"): each rank's sum was finite, but past float's range the
 * sum cannot be reported (the progress line and the metrics said nan for
 * steps on end before a rank's own loss overflowed). Every rank sees the
 * same sum, so all stop here together. */
static int reduced_loss_ok(double sum, const char *what, struct ddpc_err *e)
{
    if (isfinite(sum))
        return 0;
    return DDPC_FAIL(e, DDPC_E_DIVERGED, "%s, summed over the ranks, is %g (past float32's "
                     "range): the run diverged. Lower learning_rate, set grad_clip_norm, or "
                     "check the data for nan/inf", what, sum);
}

/* This rank's strided shard of the test set: r, r+W, ... (no padding). */
static int evaluate(struct ddpc_run *r, double *loss_sum, double *correct, double *count,
                    struct ddpc_err *e)
{
    const struct ddpc_dataset *ds = r->a->test;
    int64_t n = ds->n, mine = n > r->rank ? (n - r->rank + r->world - 1) / r->world : 0;
    DDPC_TRY(acc_zero(r, 1, e));
    int er = r->eval_rows;
    /* evaluation mode, with rank 0's batch-norm statistics (the ones the
     * export holds; PyTorch DDP broadcasts rank 0's buffers likewise) */
    model_set_mode(&r->model, 0, 0);
    if (r->model.n_state && r->comm_on) {
        struct ddpc_comm *c = r->a->grad_comm;
        DDPC_TRY(c->broadcast(c, r->model.state, r->model.n_state, 0,
                              ddpc_deadline_after(r->job->nccl_timeout_s), e));
    }
    for (int64_t s = 0; s < mine; s += er) {
        int rows = (int)(mine - s < er ? mine - s : er);
        for (int i = 0; i < rows; i++)
            r->eidx[i] = r->rank + (s + i) * r->world;
        DDPC_TRY(batch_load(r, ds, r->eidx, rows, e));
        DDPC_TRY(batch_forward(r, rows, 1.0f, r->acc + DDPC_LOSS_ACC, e));
    }
    model_set_mode(&r->model, 1, 0);
    double h[DDPC_LOSS_ACC];
    DDPC_TRY(acc_read(r, 1, h, e));
    *loss_sum = h[0];
    *correct = h[1];
    *count = (double)mine * r->seq_len;   /* gpt: every token of every test window */
    return 0;
}

/* ===== checkpoints ===== */

/* Copies params (and the optimizer state after them) to rank 0's host buffer. */
static int state_to_host(struct ddpc_run *r, int with_opt, struct ddpc_err *e)
{
    struct ddpc_ops *o = r->ops;
    size_t n = r->model.n_params;
    DDPC_TRY(o->to_host(o, r->ckpt.host_state, r->model.params, n * sizeof(float), e));
    if (r->model.n_state)
        DDPC_TRY(o->to_host(o, r->ckpt.host_state + n, r->model.state,
                            r->model.n_state * sizeof(float), e));
    float *opt = r->ckpt.host_state + r->n_ck;
    if (with_opt && r->optim.m)
        DDPC_TRY(o->to_host(o, opt, r->optim.m, n * sizeof(float), e));
    if (with_opt && r->optim.v)
        DDPC_TRY(o->to_host(o, opt + n, r->optim.v, n * sizeof(float), e));
    return 0;
}

/* Rank 0, after `done_epochs` completed epochs and `batches` batches of
 * epoch `in_epoch` (0 at an epoch's end, when in_epoch == done_epochs). */
static int ckpt_save(struct ddpc_run *r, int64_t done_epochs, int64_t in_epoch,
                     int64_t batches, double epoch_loss, struct ddpc_err *e)
{
    const struct ddpc_job *j = r->job;
    DDPC_TRY(state_to_host(r, 1, e));
    struct ddpc_ckpt c;
    memset(&c, 0, sizeof c);
    memcpy(c.ident_hash, r->ckpt.ident_hash, sizeof c.ident_hash);
    c.ident = r->ckpt.ident;
    const char *h = r->a->spec_hash;
    if (h && strlen(h) == DDPC_CKPT_HASH_LEN)
        memcpy(c.spec_hash, h, DDPC_CKPT_HASH_LEN);
    c.world = r->world;
    c.epoch = done_epochs;
    c.step = r->optim.step;
    c.seed = j->seed;
    c.sampler_epoch = in_epoch;
    c.sampler_batches = batches;
    c.optim_step = r->optim.step + r->optim.t_ahead;   /* Adam's t: the updates made */
    c.n_params = r->n_ck;
    c.n_opt = r->ckpt.n_opt;
    c.train_samples = r->a->train->n;
    c.epoch_loss = epoch_loss;
    if (r->scaler.on) {   /* fp32/bf16 files keep these 0, as before they existed */
        c.loss_scale = r->scaler.scale;
        c.good_steps = r->scaler.good_steps;
        c.skipped_steps = r->scaler.skipped_steps;
    }
    c.params = r->ckpt.host_state;
    c.opt = r->ckpt.n_opt ? r->ckpt.host_state + r->n_ck : NULL;
    char path[4096];
    DDPC_TRY(ckpt_write(j->checkpoint_dir, j->name, &c, path, sizeof path, e));
    r->ckpt.last_t = ddpc_now();
    return ckpt_prune(j->checkpoint_dir, j->name, r->ckpt.ident_hash, j->checkpoint.keep_last, e);
}

static int bcast_doubles(struct ddpc_run *r, double *v, int n, struct ddpc_err *e);

/* All ranks, after each optimizer step: is a step- or time-cadence
 * checkpoint due? Every rank must answer alike (the save is preceded by a
 * collective), so every_n_minutes is rank 0's clock, broadcast together
 * with when to look next: about once a second of training (4 times per
 * period when that is shorter), not every step.
 * Returns 1, 0, or a negative error. */
static int ckpt_due(struct ddpc_run *r, struct ddpc_err *e)
{
    const struct ddpc_job *j = r->job;
    int64_t step = r->optim.step;
    int due = j->checkpoint.every_n_steps > 0 && step % j->checkpoint.every_n_steps == 0;
    if (j->checkpoint.every_n_minutes > 0 && step >= r->ckpt.check_at) {
        double v[2] = { 0, 1 };   /* due, steps to the next look */
        if (r->rank == 0) {
            double now = ddpc_now();
            v[0] = now - r->ckpt.last_t >= j->checkpoint.every_n_minutes * 60.0;
            int64_t done = step - r->ckpt.check_step;
            double per = done > 0 ? (now - r->ckpt.check_t) / (double)done : 0;
            /* look about once a second, or 4 times per period if shorter */
            double look = j->checkpoint.every_n_minutes * 15.0 < 1.0
                        ? j->checkpoint.every_n_minutes * 15.0 : 1.0;
            double next = per > 0 ? look / per : 1;
            v[1] = next < 1 ? 1 : next > 4096 ? 4096 : (double)(int64_t)next;
            r->ckpt.check_t = now;
        }
        DDPC_TRY(bcast_doubles(r, v, 2, e));
        r->ckpt.check_step = step;
        r->ckpt.check_at = step + (int64_t)v[1];
        due = due || v[0] != 0;
    }
    return due;
}

/* Rank 0's v[n] to every rank. */
static int bcast_doubles(struct ddpc_run *r, double *v, int n, struct ddpc_err *e)
{
    return doubles_collective(r, v, n, 1, e);
}

/* Rank 0, after resuming from c with this run's identity: one "note:"
 * line on the report stream (stdout, next to "resumed from", never inside
 * an epoch or done line) naming the compatible changes since c was
 * written, or saying the spec's text changed and no field did. */
static void resume_notice(const struct ddpc_run *r, const struct ddpc_ckpt *c, FILE *out)
{
    if (strcmp(c->ident_hash, r->ckpt.ident_hash) != 0 || !c->ident)
        return;     /* named explicitly: ckpt_find_resume said what differs */
    char d[1024];
    if (ident_diff(c->ident, r->ckpt.ident, 'C', d, sizeof d) > 0)
        fprintf(out, "note: the spec changed since that checkpoint in ways that keep the "
                "training trajectory: %s\n", d);
    else if (c->spec_hash[0] && r->a->spec_hash && strcmp(c->spec_hash, r->a->spec_hash) != 0)
        fprintf(out, "note: the spec's text changed since that checkpoint (comments or "
                "formatting); no setting did\n");
}

/* The first T key under data.train (its format, files, range, synthetic
 * size, ...) whose value differs between identities a and b, a key in one
 * only included: "data.train.samples changed: 512 -> 640: ..." into what.
 * Returns 1 when there is one. */
static int ident_train_data_moved(const char *a, const char *b, char *what, size_t cap)
{
    static const char prefix[] = "T data.train.";
    const char *texts[2] = { a, b };
    for (int t = 0; t < 2; t++)
        for (const char *p = texts[t]; p && *p;) {
            const char *nl = strchr(p, '\n');
            size_t len = nl ? (size_t)(nl - p) : strlen(p);
            const char *eq = memchr(p, '=', len);
            char key[128], was[1024], is[1024];
            size_t kl = eq ? (size_t)(eq - p) - 2 : 0;
            if (eq && strncmp(p, prefix, sizeof prefix - 1) == 0 && kl < sizeof key) {
                memcpy(key, p + 2, kl);
                key[kl] = '\0';
                int ha = ident_value(a, 'T', key, was, sizeof was);
                int hb = ident_value(b, 'T', key, is, sizeof is);
                if (ha != hb || strcmp(was, is) != 0) {
                    (void)snprintf(what, cap, "%.100s changed: %.150s -> %.150s: the epoch is "
                                   "over other samples (samples would be trained twice or "
                                   "skipped)", key, ha ? was : "(absent)",
                                   hb ? is : "(absent)");
                    return 1;
                }
            }
            p = nl ? nl + 1 : NULL;
        }
    return 0;
}

/* A mid-epoch position is a batch index into the epoch's shard: it means
 * the same samples only while the batch size and the shuffle do (the world
 * and the seed are checked apart), and it starts an optimizer step only
 * where it is a multiple of grad_accumulation (a step is micro-batches
 * b..b+accum-1 of the epoch, b a multiple of accum). Writes what changed
 * and what that does to the rest of the epoch ("batch_size changed: 16 ->
 * 32: the batches left ...") into what and returns 1 when one of them
 * differs between c (which must describe itself: a format-1 file does
 * not) and this job's identity; 0 when the rest of the epoch is the one
 * this job would train from there. */
static int mid_epoch_moved(const struct ddpc_ckpt *c, const char *ident, int accum, char *what,
                           size_t cap)
{
    if (!c->ident || !ident)
        return 0;
    static const char *const keys[] = { "batch_size", "data.shuffle" };
    char was[64], is[64];
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (ident_value(c->ident, 'T', keys[i], was, sizeof was) &&
            ident_value(ident, 'T', keys[i], is, sizeof is) && strcmp(was, is) != 0) {
            (void)snprintf(what, cap, "%s changed: %s -> %s: the batches left of that epoch "
                           "are not the ones it had left (samples would be trained twice or "
                           "skipped)", keys[i], was, is);
            return 1;
        }
    /* another training set: the epoch's permutation is over other samples */
    if (ident_train_data_moved(c->ident, ident, what, cap))
        return 1;
    /* the position ends one of the checkpoint's steps: at a step's start
     * under this job's grad_accumulation the rest of the epoch is grouped
     * as this job groups it; elsewhere the first step would hold fewer
     * micro-batches and still be weighted as a whole one */
    if (c->sampler_batches % accum != 0 &&
        ident_value(c->ident, 'T', "grad_accumulation", was, sizeof was) &&
        ident_value(ident, 'T', "grad_accumulation", is, sizeof is) && strcmp(was, is) != 0) {
        (void)snprintf(what, cap, "grad_accumulation changed: %s -> %s: %lld batches is not "
                       "a whole number of this job's optimizer steps (its first step there "
                       "would hold fewer than %d micro-batches, weighted as %d)", was, is,
                       (long long)c->sampler_batches, accum, accum);
        return 1;
    }
    return 0;
}

/* This job's optimizer step at c's position. A checkpoint's step counts
 * its own job's steps, and this job's schedule (warmup, decay over
 * total_steps) is in this job's: sampler_epoch whole epochs and
 * sampler_batches into the next (a step's start: mid_epoch_moved) are
 * sampler_epoch x steps-per-epoch + sampler_batches / accum of them. Where
 * c's count differs from that (with the fp16 scaler's skipped steps, which
 * advance no step), its job grouped the samples into other steps
 * (grad_accumulation, batch_size, the world, the data or
 * limit_train_batches changed), and keeping it would shift the schedule
 * by the difference: returns this job's count, less the skipped steps;
 * else c's own. */
static int64_t resume_step(const struct ddpc_run *r, const struct ddpc_ckpt *c)
{
    int accum = r->job->grad_accumulation > 0 ? r->job->grad_accumulation : 1;
    int64_t per_epoch = (r->sampler.n_batches + accum - 1) / accum;
    int64_t at = c->sampler_epoch * per_epoch + c->sampler_batches / accum;
    int64_t skipped = c->skipped_steps > 0 ? c->skipped_steps : 0;
    if (c->step + skipped == at)
        return c->step;
    return at > skipped ? at - skipped : 0;
}

/* Rank 0 picks and reads the checkpoint (ckpt_find_resume), then broadcasts
 * the position and the state, so all ranks resume identically. Every rank
 * decides from the job alone whether to look, so the collectives match. */
static int run_resume(struct ddpc_run *r, struct ddpc_err *e)
{
    const struct ddpc_job *j = r->job;
    int by_path = j->checkpoint.resume == DDPC_RESUME_PATH && j->checkpoint.resume_path &&
                  *j->checkpoint.resume_path;
    if (!by_path && !(r->ckpt.on && j->checkpoint.resume == DDPC_RESUME_AUTO))
        return 0;
    double pos[5] = { 0, 0, 0, 0, 0 };   /* found, epoch, batch, optimizer step, t_ahead */
    double amp[3] = { 0, 0, 0 };      /* loss scale (0: not recorded), good, skipped */
    size_t n = r->model.n_params;
    if (r->rank == 0) {
        struct ddpc_ckpt c;
        char path[4096] = "", what[512];
        memset(&c, 0, sizeof c);
        int found = ckpt_find_resume(r->ckpt.on ? j->checkpoint_dir : ".", j->name,
                                     r->ckpt.ident_hash, r->ckpt.ident,
                                     by_path ? j->checkpoint.resume_path : NULL,
                                     &c, path, sizeof path, r->a->out, e);
        if (found < 0)
            return found;
        if (found) {
            int rc = 0;
            if (c.n_params != r->n_ck || c.n_opt != r->ckpt.n_opt)
                rc = DDPC_FAIL(e, DDPC_E_DATA, "checkpoint %s holds %zu parameters and %zu "
                               "optimizer values; this job's model and optimizer need %zu and "
                               "%zu. %s", path, c.n_params, c.n_opt, r->n_ck, r->ckpt.n_opt,
                               /* named by --resume or checkpoint.resume: PATH, the
                                * way out is another file, not checkpoint_dir */
                               by_path ? "Name a checkpoint of this model and optimizer "
                                         "(--resume, or checkpoint.resume), or leave it out to "
                                         "start fresh"
                                       : "Point checkpoint_dir elsewhere or set "
                                         "checkpoint.resume: never");
            else if (c.world != r->world && c.sampler_batches != 0)
                rc = DDPC_FAIL(e, DDPC_E_DATA, "checkpoint %s was taken mid-epoch by %d ranks; "
                               "resume it with %d ranks (this job has %d)", path, (int)c.world,
                               (int)c.world, r->world);
            else if (c.sampler_batches >= r->sampler.n_batches)
                /* a position past this job's epoch would train nothing of
                 * it and report its loss as nan */
                rc = DDPC_FAIL(e, DDPC_E_DATA, "checkpoint %s was taken mid-epoch, %lld batches "
                               "into epoch %lld, but this job's epochs have %lld batches "
                               "(batch_size, limit_train_batches or the training data differ): "
                               "resume from a checkpoint taken at an epoch's end, or keep those "
                               "settings", path, (long long)c.sampler_batches,
                               (long long)c.sampler_epoch + 1, (long long)r->sampler.n_batches);
            else if (c.sampler_batches != 0 &&
                     mid_epoch_moved(&c, r->ckpt.ident, j->grad_accumulation > 0 ?
                                     j->grad_accumulation : 1, what, sizeof what))
                /* batch k of the epoch is other samples now, or not the
                 * start of a step */
                rc = DDPC_FAIL(e, DDPC_E_DATA, "checkpoint %s was taken mid-epoch, %lld batches "
                               "into epoch %lld, and %s. Resume it with the checkpoint's "
                               "setting, or from a checkpoint taken at an epoch's end", path,
                               (long long)c.sampler_batches, (long long)c.sampler_epoch + 1,
                               what);
            else if (c.sampler_batches != 0 && c.train_samples > 0 &&
                     c.train_samples != r->a->train->n)
                /* the same settings over a data file that changed since */
                rc = DDPC_FAIL(e, DDPC_E_DATA, "checkpoint %s was taken mid-epoch, %lld batches "
                               "into epoch %lld of %lld training samples, and this job reads "
                               "%lld (the data changed since): the epoch is over other "
                               "samples (samples would be trained twice or skipped). Resume it "
                               "with the data it was taken with, or from a checkpoint taken at "
                               "an epoch's end", path, (long long)c.sampler_batches,
                               (long long)c.sampler_epoch + 1, (long long)c.train_samples,
                               (long long)r->a->train->n);
            else if (c.seed != j->seed)
                rc = DDPC_FAIL(e, DDPC_E_DATA, "checkpoint %s was written with seed %llu, this "
                               "job has seed %llu; the data order would differ", path,
                               (unsigned long long)c.seed, (unsigned long long)j->seed);
            if (rc == 0)
                rc = r->ops->to_device(r->ops, r->model.params, c.params, n * sizeof(float), e);
            if (rc == 0 && r->model.n_state)
                rc = r->ops->to_device(r->ops, r->model.state, c.params + n,
                                       r->model.n_state * sizeof(float), e);
            if (rc == 0 && r->optim.m)
                rc = r->ops->to_device(r->ops, r->optim.m, c.opt, n * sizeof(float), e);
            if (rc == 0 && r->optim.v)
                rc = r->ops->to_device(r->ops, r->optim.v, c.opt + n, n * sizeof(float), e);
            pos[0] = 1;
            pos[1] = (double)c.sampler_epoch;
            pos[2] = (double)c.sampler_batches;
            int64_t step = resume_step(r, &c);
            r->ckpt.file_step = c.step;
            pos[3] = (double)step;
            /* the moments keep the updates they had (torch's state['step']) */
            pos[4] = (double)(c.optim_step - step);
            r->ckpt.start_loss = c.sampler_batches ? c.epoch_loss : 0;
            amp[0] = (double)c.loss_scale;
            amp[1] = (double)c.good_steps;
            amp[2] = (double)c.skipped_steps;
            if (rc == 0 && r->a->out) {
                /* epochs counted from 1, as the epoch lines count them: a
                 * mid-epoch checkpoint's epoch is the one it is inside of
                 * (it said "epoch 0" for one inside epoch 1) */
                if (c.sampler_batches)
                    fprintf(r->a->out, "resumed from %s (step %lld, %lld batch%s into epoch "
                            "%lld, mid-epoch)\n", path, (long long)c.step,
                            (long long)c.sampler_batches, c.sampler_batches == 1 ? "" : "es",
                            (long long)c.sampler_epoch + 1);
                else
                    fprintf(r->a->out, "resumed from %s (epoch %lld, step %lld)\n", path,
                            (long long)c.sampler_epoch, (long long)c.step);
                char data[160] = "";   /* the same settings over other data */
                if (c.train_samples > 0 && c.train_samples != r->a->train->n)
                    (void)snprintf(data, sizeof data, " (the training data holds %lld "
                                   "samples, the checkpoint's run read %lld)",
                                   (long long)r->a->train->n, (long long)c.train_samples);
                if (step != c.step)
                    fprintf(r->a->out, "note: the checkpoint's run took %lld optimizer steps "
                            "to get here, this job takes %lld (%lld an epoch)%s: its "
                            "learning-rate schedule resumes at step %lld of %lld, where a "
                            "run of this job would be; the optimizer's moments keep their "
                            "%lld updates\n", (long long)c.step, (long long)step,
                            (long long)(r->optim.total_steps / (j->epochs > 0 ? j->epochs : 1)),
                            data, (long long)step, (long long)r->optim.total_steps,
                            (long long)c.optim_step);
                resume_notice(r, &c, r->a->out);
                fflush(r->a->out);
            }
            ckpt_free(&c);
            if (rc < 0)
                return rc;
        }
    }
    DDPC_TRY(bcast_doubles(r, pos, 5, e));
    if (pos[0] == 0)
        return 0;
    if (r->scaler.on) {   /* every rank has the same job, so the same amp */
        DDPC_TRY(bcast_doubles(r, amp, 3, e));
        /* a file without the scaler's state (fp32/bf16, or older) starts
         * the scaler afresh, as a new run does */
        if (isfinite(amp[0]) && amp[0] >= 1 && amp[1] >= 0 && amp[1] < 2000 && amp[2] >= 0) {
            r->scaler.scale = (float)amp[0];
            r->scaler.good_steps = (int)amp[1];
            r->scaler.skipped_steps = (int64_t)amp[2];
        }
    }
    if (r->shared_state) {
        /* rank 0 read the checkpoint into the one shared copy */
        struct ddpc_comm *c = r->a->grad_comm;
        DDPC_TRY(c->barrier(c, ddpc_deadline_after(j->nccl_timeout_s), e));
    } else if (r->comm_on) {
        struct ddpc_comm *c = r->a->grad_comm;
        double dl = ddpc_deadline_after(j->nccl_timeout_s);
        DDPC_TRY(c->broadcast(c, r->model.params, n, 0, dl, e));
        if (r->optim.m)
            DDPC_TRY(c->broadcast(c, r->optim.m, n, 0, dl, e));
        if (r->optim.v)
            DDPC_TRY(c->broadcast(c, r->optim.v, n, 0, dl, e));
    }
    r->ckpt.resumed = 1;
    r->ckpt.start_epoch = (int64_t)pos[1];
    r->ckpt.start_batch = (int64_t)pos[2];
    r->optim.step = (long)pos[3];
    r->optim.t_ahead = (long)pos[4];
    return 0;
}

/* ===== the loop ===== */

/* All ranks, at the same steps: the training loss of the window since the
 * last record, averaged over ranks (rank 0 logs it). */
static int window_loss(struct ddpc_run *r, double *sum, double *cnt, int64_t step,
                       struct ddpc_err *e)
{
    const struct ddpc_job *j = r->job;
    int every = j->logging.every_n_steps > 0 ? j->logging.every_n_steps : 1;
    int logged = j->logging.metrics_csv || j->logging.tensorboard;
    if (!r->comm_on || !logged || step % every != 0)
        return 0;
    double v[2] = { *sum, *cnt };
    DDPC_TRY(metrics_reduce(r, v, 2, e));
    /* the caller's step_fail names the step */
    DDPC_TRY(reduced_loss_ok(v[0], "the training loss of the logged window", e));
    *sum = v[0];
    *cnt = v[1];
    return 0;
}

/* model.init_from: the parameters and batch-norm statistics of a
 * safetensors file with the export's names (ckpt_read_net checks them). */
static int run_init_from(struct ddpc_run *r, struct ddpc_err *e)
{
    struct ddpc_model *m = &r->model;
    float *host = malloc((m->n_params + m->n_state + 1) * sizeof *host);
    if (!host)
        return DDPC_FAIL(e, DDPC_E_NOMEM, "model.init_from: out of memory");
    int rc = ckpt_read_net(r->job->model.init_from, &m->net, host, host + m->n_params, e);
    if (rc == 0)
        rc = r->ops->to_device(r->ops, m->params, host, m->n_params * sizeof *host, e);
    if (rc == 0 && m->n_state)
        rc = r->ops->to_device(r->ops, m->state, host + m->n_params, m->n_state * sizeof *host, e);
    free(host);
    return rc;
}

/* ===== the training step ===== */

/* What run_train's steps share: the loop's settings and totals, the epoch
 * and the step in progress. */
struct train_state {
    struct ddpc_worker_result *res;
    FILE    *out;           /* rank 0's report stream; NULL elsewhere */
    int      accum;         /* micro-batches per optimizer step */
    int      sync;          /* a rank-sync barrier starts every step */
    int      every;         /* logging.every_n_steps */
    double   train_time;
    double   total_samples;
    long     run_first_step;    /* steps before this run (resume) */
    /* the epoch in progress */
    int64_t  epoch, b0;
    double   t_epoch;
    /* the training loss lives in r->acc (on the device on a GPU); cur is
     * it as last read, the window runs from win_base/win_seen to there */
    double   cur[DDPC_LOSS_ACC], win_sum, win_cnt, win_base;
    int64_t  seen, win_seen;
    int      due_at_end;
    int      eval;          /* this epoch evaluates on the test set */
    double   t_train, global_seen, epoch_s;
    /* the micro-batch and step in progress */
    int64_t  b;
    int      micro, last_micro;
    int      rows;
    double   before;        /* r->acc[0] before this micro-batch (host memory) */
    int      read;          /* the loss was read this step (cur) */
    int      fp32_plain;    /* fp32 without clipping */
    double   ss;            /* the averaged gradients' sum of squares */
    double   lr;
    double   tick;          /* clock at the end of the last profiled phase */
};

/* Every node runs its own ./job on its own copy of the data: a node with
 * a job built from another spec (another learning rate, model, ...) or
 * other training data trained on without a word, its ranks applying their
 * own settings to the averaged gradients (the replicas drift apart), or
 * ran other batch counts and met the others' collectives out of step.
 * Before anything else crosses ranks (the parameters' broadcast has this
 * job's size), each rank compares its training identity (ident.h: the
 * settings that decide the trajectory) and its data's sample counts with
 * rank 0's. Ranks forked by one launcher (shared state) are the same. */
static int run_same_job(struct ddpc_run *r, struct ddpc_err *e)
{
    const struct ddpc_worker_args *a = r->a;
    if (!r->comm_on || r->shared_state)
        return 0;
    /* integers below 2^48: exact through doubles_collective's float pairs
     * (a 24-bit float and the remainder); 3 values fit its buffer */
    char h[13];
    memcpy(h, r->ckpt.ident_hash, 12);
    h[12] = '\0';
    int64_t id = (int64_t)strtoull(h, NULL, 16);
    int64_t nt = a->train ? a->train->n : 0, ne = a->test ? a->test->n : 0;
    const int64_t low48 = ((int64_t)1 << 48) - 1;
    double mine[3] = { (double)id, (double)(nt & low48), (double)(ne & low48) };
    double v[3];
    memcpy(v, mine, sizeof v);
    DDPC_TRY(bcast_doubles(r, v, 3, e));
    if (v[0] != mine[0])
        return DDPC_FAIL(e, DDPC_E_DATA, "rank %d runs another configuration than rank 0: "
                         "its training identity is %.12s..., rank 0's %012llx... (settings "
                         "that decide the training differ: learning rate, model, data, batch, "
                         "...). Every node must run a ./job built from the same spec by the "
                         "same ddpc", r->rank, r->ckpt.ident_hash, (unsigned long long)v[0]);
    int64_t t0 = (int64_t)v[1], e0 = (int64_t)v[2];
    nt &= low48;
    ne &= low48;
    if (t0 != nt || e0 != ne)
        return DDPC_FAIL(e, DDPC_E_DATA, "rank %d read %lld %s samples, rank 0 read %lld: "
                         "every node must read the same data (a copy on this node differs?)",
                         r->rank, (long long)(t0 != nt ? nt : ne),
                         t0 != nt ? "training" : "test", (long long)(t0 != nt ? t0 : e0));
    return 0;
}

/* Identical initial parameters on every rank, then a checkpoint's on resume. */
static int train_init_params(struct ddpc_run *r, struct ddpc_err *e)
{
    const struct ddpc_worker_args *a = r->a;
    const struct ddpc_job *j = r->job;
    DDPC_TRY(run_same_job(r, e));
    /* seeded init, then rank 0's copy wins (with shared state there is only
     * rank 0's copy) */
    if (!r->shared_state || r->rank == 0) {
        DDPC_TRY(model_init_params(&r->model, j->model.init, j->seed, e));
        if (j->model.init_from && *j->model.init_from)
            DDPC_TRY(run_init_from(r, e));
    }
    if (r->shared_state)
        DDPC_TRY(a->grad_comm->barrier(a->grad_comm, ddpc_deadline_after(j->nccl_timeout_s),
                                       e));
    else if (r->comm_on)
        DDPC_TRY(a->grad_comm->broadcast(a->grad_comm, r->model.params, r->model.n_params, 0,
                                         ddpc_deadline_after(j->nccl_timeout_s), e));
    if (r->comm_on && r->model.n_state)   /* batch-norm statistics: rank 0's */
        DDPC_TRY(a->grad_comm->broadcast(a->grad_comm, r->model.state, r->model.n_state, 0,
                                         ddpc_deadline_after(j->nccl_timeout_s), e));
    return run_resume(r, e);
}

/* Rank 0, at the start: where the outputs go when their paths hold
 * another configuration's (outver.h): the CSV and TensorBoard versions
 * metrics opened, and the export's as things stand (it is chosen again
 * when it is written, at the end). other_run_outputs: refuse stops here,
 * before any step. */
static int train_output_notes(struct ddpc_run *r, struct train_state *t, struct ddpc_err *e)
{
    const struct ddpc_job *j = r->job;
    const struct ddpc_metrics *m = &r->log.metrics;
    if (j->logging.metrics_csv && *j->logging.metrics_csv)
        outver_note(t->out, DDPC_OUT_CSV, "logging.metrics_csv", j->logging.metrics_csv,
                    m->csv_path, &r->ckpt.out_id);
    if (j->logging.tensorboard && *j->logging.tensorboard)
        outver_note(t->out, DDPC_OUT_TB, "logging.tensorboard", j->logging.tensorboard,
                    m->tb_dir, &r->ckpt.out_id);
    const char *x = j->checkpoint.export_path;
    if (x && *x) {
        char v[4096];
        DDPC_TRY(outver_resolve(DDPC_OUT_EXPORT, x, "checkpoint.export", &r->ckpt.out_id, v,
                                sizeof v, NULL, e));
        outver_note(t->out, DDPC_OUT_EXPORT, "checkpoint.export", x, v, &r->ckpt.out_id);
    }
    return 0;
}

/* Rank 0 opens its logging (progress line, metrics CSV, TensorBoard). */
static int train_open_metrics(struct ddpc_run *r, struct train_state *t, struct ddpc_err *e)
{
    if (r->rank != 0)
        return 0;
    r->log.mjob = *r->job;
    if (!t->out)
        r->log.mjob.logging.progress = DDPC_PROGRESS_OFF;
    /* the rows the checkpoint's run wrote up to it stay (in its steps,
     * where a resume_step regrouping numbers this run's otherwise) */
    DDPC_TRY(metrics_open_as(&r->log.metrics, &r->log.mjob, &r->ckpt.out_id,
                             r->optim.total_steps, r->ckpt.resumed ? r->ckpt.file_step : -1,
                             t->out, t->out ? isatty(fileno(t->out)) : 0, e));
    r->log.on = 1;
    DDPC_TRY(train_output_notes(r, t, e));
    /* Lightning warns of this too: a training-loss row is written every
     * every_n_steps optimizer steps, so a shorter run writes none */
    const struct ddpc_job *j = r->job;
    int64_t every = j->logging.every_n_steps;
    if ((j->logging.metrics_csv || j->logging.tensorboard) && r->optim.total_steps > 0 &&
        every > r->optim.total_steps)
        fprintf(stderr, "ddpc: warning: logging.every_n_steps is %lld, but this run has %lld "
                "optimizer step%s: %s will hold no training loss; set logging.every_n_steps "
                "to %lld or less to see it\n", (long long)every,
                (long long)r->optim.total_steps, r->optim.total_steps == 1 ? "" : "s",
                j->logging.metrics_csv && j->logging.tensorboard ? "metrics_csv and tensorboard"
                : j->logging.metrics_csv ? "metrics_csv" : "tensorboard",
                (long long)r->optim.total_steps);
    return 0;
}

/* Start of an epoch: the sampler's order, the loss window, where it starts. */
static int epoch_begin(struct ddpc_run *r, struct train_state *t, int64_t epoch,
                       struct ddpc_err *e)
{
    t->epoch = epoch;
    t->t_epoch = ddpc_now();
    sampler_set_epoch(&r->sampler, epoch);
    for (int i = 0; i < DDPC_LOSS_ACC; i++)
        t->cur[i] = 0;
    t->win_sum = t->win_cnt = t->win_base = 0;
    t->seen = t->win_seen = 0;
    DDPC_TRY(acc_zero(r, 0, e));
    t->due_at_end = 0;
    t->b0 = epoch == r->ckpt.start_epoch ? r->ckpt.start_batch : 0;
    return 0;
}

/* Start of an optimizer step: the rank-sync barrier (rank_sync_timeout). */
static int step_sync(struct ddpc_run *r, struct train_state *t, struct ddpc_err *e)
{
    const struct ddpc_job *j = r->job;
    r->step_no = r->optim.step + 1;
    if (!t->sync)
        return 0;
    double ts = ddpc_now();
    /* a checkpoint rank 0 wrote is not data-loading skew: the ranks waited
     * for it before this step (ckpt_written_barrier, under nccl_timeout) */
    int rc = r->a->sync_comm->barrier(r->a->sync_comm,
                                      ddpc_deadline_after(j->rank_sync_timeout_s), e);
    if (rc < 0)
        return step_fail(r, e, rc);
    r->prof.sync += ddpc_now() - ts;
    /* every rank finished its optimizer shard before this barrier: the
     * parameters are ready */
    r->params_pending = 0;
    return 0;
}

/* Load batch: this micro-batch's rows to the backend, the next one's fetched. */
static int step_load_batch(struct ddpc_run *r, struct train_state *t, struct ddpc_err *e)
{
    const int64_t *idx;
    t->rows = sampler_batch(&r->sampler, t->b, &idx);
    t->before = r->ops->host_memory ? r->acc[0] : 0.0;
    double t0 = ddpc_now();
    DDPC_TRY(batch_load(r, r->a->train, idx, t->rows, e));
    if (t->b + 1 < r->sampler.n_batches) {
        /* the next batch's rows travel from DRAM while this one computes */
        const int64_t *nidx;
        int nrows = sampler_batch(&r->sampler, t->b + 1, &nidx);
        data_prefetch(r->a->train, nidx, nrows);
    }
    double tp = ddpc_now();
    r->prof.data += tp - t0;
    DDPC_TRY(params_ready(r, e));
    t->tick = ddpc_now();
    r->prof.sync += t->tick - tp;
    return 0;
}

/* Forward: the loss into r->acc; its gradient scaled for fp16 and averaged. */
static int step_forward(struct ddpc_run *r, struct train_state *t, struct ddpc_err *e)
{
    const struct ddpc_job *j = r->job;
    float ls = r->scaler.on ? r->scaler.scale : 1.0f;
    /* dropout masks: from seed, rank and micro-step, the same on a rerun */
    model_set_mode(&r->model, 1, j->seed * 0x9E3779B97F4A7C15ull ^
                   ((uint64_t)r->rank << 48) ^
                   (uint64_t)(t->epoch * r->sampler.n_batches + t->b));
    /* the mean over this rank's rows (a gpt's: over its rows * T tokens,
     * docs/DESIGN.md); the all-reduce averages over the ranks */
    DDPC_TRY(batch_forward(r, t->rows,
                           ls / ((float)t->rows * (float)r->seq_len * (float)t->accum), r->acc,
                           e));
    double t2 = ddpc_now();
    r->prof.fwd += t2 - t->tick;
    t->tick = t2;
    /* before backward, so no collective is left half-started. On the CPU
     * the loss is in host memory, checked every micro-batch; a GPU's is
     * checked where it is read (logging steps, progress redraws, the
     * epoch's end), so a step never waits for it: a divergence stops the
     * run that many steps later, named by the step that read it */
    if (r->ops->host_memory && !isfinite(r->acc[0] - t->before))
        return DDPC_FAIL(e, DDPC_E_DIVERGED,
                         "step %ld: the training loss is %g on rank %d: the run "
                         "diverged. Lower learning_rate, set grad_clip_norm, or check "
                         "the data for nan/inf", r->step_no, r->acc[0] - t->before, r->rank);
    return 0;
}

/* Backward: the buckets' all-reduces start as their layers finish (the
 * step's last micro-batch); then the wait for the last of them. */
static int step_backward(struct ddpc_run *r, struct train_state *t, struct ddpc_err *e)
{
    int reduce = t->last_micro && r->comm_on;
    DDPC_TRY(model_backward(&r->model, r->buf.dx, r->model.dbuf[0], t->rows, t->micro > 0,
                            reduce ? on_layer_done : NULL, r, e));
    double t3 = ddpc_now();
    r->prof.bwd += t3 - t->tick;
    t->tick = t3;
    t->seen += t->rows;
    if (!t->last_micro)
        return 0;
    if (reduce)
        DDPC_TRY(buckets_finish(r, e));
    t->tick = ddpc_now();
    r->prof.comm += t->tick - t3;
    return 0;
}

/* Loss scaling: the averaged gradients' norm where fp16 or clipping needs
 * it; fp16's scaler skips a step (*skip) whose gradients overflowed. */
static int step_loss_scale(struct ddpc_run *r, struct train_state *t, int *skip,
                           struct ddpc_err *e)
{
    const struct ddpc_job *j = r->job;
    struct ddpc_ops *o = r->ops;
    /* a device's loss is read where the host waits anyway: the scaler's and
     * clipping's norm below (so a diverged loss is named before fp16's
     * scaler skips on it), else in step_log */
    t->read = 0;
    if (!o->host_memory && (r->scaler.on || j->grad_clip_norm > 0)) {
        DDPC_TRY(train_loss_read(r, t->cur, e));
        t->read = 1;
    }
    if (!(j->grad_clip_norm > 0 || r->scaler.on))
        return 0;
    /* the grads are averaged, so every rank decides alike */
    t->ss = 0;
    DDPC_TRY(o->sumsq(o, r->rgrads, r->model.n_params, &t->ss, e));
    if (!r->scaler.on)
        DDPC_TRY(grads_check(r, 0, r->model.n_params, t->ss, e));
    if (r->scaler.on && !isfinite(t->ss)) {
        r->scaler.scale *= 0.5f;   /* overflow: skip this step */
        r->scaler.good_steps = 0;
        r->scaler.skipped_steps++;
        if (r->scaler.scale < 1.0f)
            return DDPC_FAIL(e, DDPC_E_INVALID,
                             "step %ld: fp16 loss scaling: the gradients are not "
                             "finite even at loss scale %g (%lld steps skipped in "
                             "all): they overflow fp16 unscaled, or the run "
                             "diverged. Lower learning_rate, or use precision: bf16",
                             r->step_no, (double)r->scaler.scale * 2,
                             (long long)r->scaler.skipped_steps);
        *skip = 1;
    }
    return 0;
}

/* Optimizer step: clipping and fp16's unscaling in one factor, the update
 * (a scaler's good step counts toward doubling the scale). */
static int step_optimize(struct ddpc_run *r, struct train_state *t, struct ddpc_err *e)
{
    const struct ddpc_job *j = r->job;
    struct ddpc_ops *o = r->ops;
    float gscale = 1.0f;
    if (j->grad_clip_norm > 0 || r->scaler.on) {
        double s2 = (double)r->scaler.scale * r->scaler.scale;
        gscale = optim_clip_scale(r->scaler.on ? t->ss / s2 : t->ss, j->grad_clip_norm);
        if (r->scaler.on) {
            gscale /= r->scaler.scale;
            if (++r->scaler.good_steps == 2000) {
                r->scaler.scale *= 2.0f;
                r->scaler.good_steps = 0;
            }
        }
    }
    t->lr = optim_lr(&r->optim, r->optim.step);
    /* fp32 without clipping: on the CPU the optimizer's slice is checked
     * every step; a GPU's gradients where the loss is read (step_log), so
     * that no step waits for a norm it did not ask for */
    t->fp32_plain = !r->scaler.on && j->grad_clip_norm <= 0;
    DDPC_TRY(run_optim_step(r, gscale, t->fp32_plain && o->host_memory, e));
    double t5 = ddpc_now();
    r->prof.opt += t5 - t->tick;
    t->tick = t5;
    r->prof.steps++;
    if (r->optim.step == t->run_first_step + 1) {
        DDPC_TRY(o->synchronize(o, e));
        t->res->first_step_s = ddpc_now() - r->a->t_launch;
    }
    return 0;
}

/* Logging: the loss window, reduced over the ranks; rank 0's metrics. */
static int step_log(struct ddpc_run *r, struct train_state *t, struct ddpc_err *e)
{
    const struct ddpc_job *j = r->job;
    struct ddpc_ops *o = r->ops;
    /* read the loss where it is used: every rank at the logged steps
     * (window_loss reduces it), rank 0 also for its progress line; the CPU
     * reads it in place every step */
    int logged = j->logging.metrics_csv || j->logging.tensorboard;
    if (!t->read && (o->host_memory || (logged && r->optim.step % t->every == 0) ||
                     (r->log.on && metrics_wants_loss(&r->log.metrics, r->optim.step)))) {
        DDPC_TRY(train_loss_read(r, t->cur, e));
        t->read = 1;
    }
    if (t->read) {
        t->win_sum = t->cur[0] - t->win_base;
        t->win_cnt = (double)(t->seen - t->win_seen) * r->seq_len;   /* gpt: per token */
        if (t->fp32_plain && !o->host_memory)
            DDPC_TRY(grads_check(r, 0, r->model.n_params, -1, e));
    }
    int rc = window_loss(r, &t->win_sum, &t->win_cnt, r->optim.step, e);
    if (rc < 0)
        return step_fail(r, e, rc);
    if (r->log.on) {
        double el = ddpc_now() - t->t_epoch;
        double done = (double)(r->optim.step - t->run_first_step);
        double eta = done > 0 ? (t->train_time + el) / done *
                                (double)(r->optim.total_steps - r->optim.step) : -1;
        DDPC_TRY(metrics_step(&r->log.metrics, r->optim.step, (int)t->epoch + 1, t->lr,
                              t->win_cnt > 0 ? t->win_sum / t->win_cnt : 0.0,
                              el > 0 ? (double)t->seen * r->seq_len * r->world / el : 0.0, eta,
                              e));
    }
    if (t->read && r->optim.step % t->every == 0) {
        t->win_base = t->cur[0];
        t->win_seen = t->seen;
    }
    return 0;
}

/* Rank 0, in an epoch resumed mid-way from a checkpoint that recorded its
 * loss so far: that loss (count 0), or the samples (a gpt's tokens) of
 * every rank it sums (count 1): start_batch full batches each. 0 on other
 * ranks and in other epochs (the epoch's figures are summed over ranks). */
static double epoch_carry(const struct ddpc_run *r, const struct train_state *t, int count)
{
    if (r->rank != 0 || !r->ckpt.resumed || t->epoch != r->ckpt.start_epoch ||
        !(r->ckpt.start_loss > 0))
        return 0;
    return count ? (double)r->ckpt.start_batch * r->sampler.batch_size * r->world * r->seq_len
                 : r->ckpt.start_loss;
}

/* All ranks, right after rank 0 wrote a checkpoint or the export (`what`
 * into `where`): they meet here, under nccl_timeout as every collective,
 * so that a write slower than that is named as the cause on the other
 * ranks ("rank 0 was writing a checkpoint to ckpt"), not reported as a
 * rank 0 that is stuck in the next step's all-reduce or at the exit. */
static int ckpt_written_barrier(struct ddpc_run *r, const char *what, const char *where,
                                struct ddpc_err *e)
{
    if (!r->comm_on)
        return 0;
    struct ddpc_comm *c = r->a->grad_comm;
    int rc = c->barrier(c, ddpc_deadline_after(r->job->nccl_timeout_s), e);
    if (rc == DDPC_E_TIMEOUT && r->rank != 0) {
        size_t l = strlen(e->msg);
        (void)snprintf(e->msg + l, sizeof e->msg - l, " (rank 0 was writing %s to %s: a slow "
                       "or hung file system? nccl_timeout bounds the write too)", what, where);
    }
    return rc;
}

/* Checkpoint due by steps or minutes: saved mid-epoch, or at the epoch's end. */
static int step_checkpoint(struct ddpc_run *r, struct train_state *t, struct ddpc_err *e)
{
    if (!r->ckpt.on)
        return 0;
    int due = ckpt_due(r, e);
    if (due < 0)
        return step_fail(r, e, due);
    if (due && t->b + 1 < r->sampler.n_batches) {
        /* mid-epoch: the position (epoch, b + 1) is saved, with the
         * epoch's loss so far (every rank's), so that a run resumed there
         * reports the whole epoch's train_loss */
        DDPC_TRY(params_ready(r, e));
        double cur[DDPC_LOSS_ACC];
        DDPC_TRY(train_loss_read(r, cur, e));
        double lsum = cur[0];
        DDPC_TRY(metrics_reduce(r, &lsum, 1, e));
        int rl = reduced_loss_ok(lsum, "the epoch's training loss so far", e);
        if (rl < 0)
            return step_fail(r, e, rl);
        if (r->rank == 0)
            DDPC_TRY(ckpt_save(r, t->epoch, t->epoch, t->b + 1, lsum + epoch_carry(r, t, 0), e));
        int rc = ckpt_written_barrier(r, "a checkpoint", r->job->checkpoint_dir, e);
        if (rc < 0)
            return step_fail(r, e, rc);
    } else if (due) {
        t->due_at_end = 1;     /* the epoch's end saves it, after evaluation */
    }
    return 0;
}

/* The test metrics from evaluate()'s sums reduced over the ranks (loss,
 * correct, count): the one rule for the end of an epoch and for --eval. */
static void test_result(const struct ddpc_run *r, const double sums[3],
                        struct ddpc_worker_result *res)
{
    res->test_loss = sums[2] > 0 ? sums[0] / sums[2] : NAN;
    /* a gpt's next-token accuracy is not a figure anyone reads: none */
    res->test_accuracy = r->job->loss == DDPC_LOSS_CROSS_ENTROPY && sums[2] > 0 &&
                         r->seq_len == 1 ? sums[1] / sums[2] : -1;
}

/* End of epoch, evaluate: the epoch's training loss and the test set's,
 * reduced over the ranks into res. */
static int epoch_evaluate(struct ddpc_run *r, struct train_state *t, struct ddpc_err *e)
{
    const struct ddpc_job *j = r->job;
    struct ddpc_worker_result *res = t->res;
    DDPC_TRY(r->ops->synchronize(r->ops, e));
    DDPC_TRY(params_ready(r, e));   /* evaluation and checkpoints read them */
    t->t_train = ddpc_now() - t->t_epoch;
    t->train_time += t->t_train;
    t->global_seen = (double)t->seen * r->world;
    t->total_samples += t->global_seen;

    /* test_every_n_epochs: 0 in a job made by hand means every epoch */
    int every_test = j->data.test_every_n_epochs > 1 ? j->data.test_every_n_epochs : 1;
    t->eval = r->a->test && ((t->epoch + 1) % every_test == 0 || t->epoch + 1 == j->epochs);
    DDPC_TRY(acc_read(r, 0, t->cur, e));
    if (!isfinite(t->cur[0]))
        return DDPC_FAIL(e, DDPC_E_DIVERGED,
                         "epoch %d: the training loss is %g on rank %d: the run diverged. "
                         "Lower learning_rate, set grad_clip_norm, or check the data for "
                         "nan/inf", (int)t->epoch + 1, t->cur[0], r->rank);
    /* loss sums over samples, a gpt's over tokens: the means per token;
     * an epoch resumed mid-way counts its batches before the resume too */
    double m[5] = { t->cur[0] + epoch_carry(r, t, 0),
                    (double)t->seen * r->seq_len + epoch_carry(r, t, 1), 0, 0, 0 };
    if (t->eval)
        DDPC_TRY(evaluate(r, &m[2], &m[3], &m[4], e));
    DDPC_TRY(metrics_reduce(r, m, 5, e));
    if (!isfinite(m[0])) {
        char what[64];
        snprintf(what, sizeof what, "epoch %d: the training loss", (int)t->epoch + 1);
        return reduced_loss_ok(m[0], what, e);
    }
    res->train_loss = m[1] > 0 ? m[0] / m[1] : NAN;
    if (t->eval)
        test_result(r, m + 2, res);
    t->epoch_s = ddpc_now() - t->t_epoch;
    return 0;
}

/* End of epoch, report: rank 0's metrics and its epoch line. */
static int epoch_report(struct ddpc_run *r, struct train_state *t, struct ddpc_err *e)
{
    struct ddpc_worker_result *res = t->res;
    FILE *out = t->out;
    if (r->log.on) {
        if (t->eval)
            DDPC_TRY(metrics_eval(&r->log.metrics, r->optim.step, (int)t->epoch + 1,
                                  res->test_loss, res->test_accuracy, e));
        DDPC_TRY(metrics_clear_progress(&r->log.metrics, e));
    }
    if (out) {
        fprintf(out, "epoch %d/%d  train_loss=%.4f", (int)t->epoch + 1, (int)r->job->epochs,
                res->train_loss);
        if (t->eval) {
            fprintf(out, "  test_loss=%.4f", res->test_loss);
            if (res->test_accuracy >= 0)
                fprintf(out, "  test_accuracy=%.4f", res->test_accuracy);
        }
        fprintf(out, "  %s=%.0f  epoch_s=%.2f\n",
                r->seq_len > 1 ? "tokens_per_s" : "samples_per_s",
                t->t_train > 0 ? t->global_seen * r->seq_len / t->t_train : 0.0, t->epoch_s);
        fflush(out);
    }
    return 0;
}

/* End of epoch, checkpoint: every_n_epochs, the last epoch, or one due. */
static int epoch_checkpoint(struct ddpc_run *r, struct train_state *t, struct ddpc_err *e)
{
    const struct ddpc_job *j = r->job;
    int64_t done_epochs = t->epoch + 1;
    int every_ep = j->checkpoint.every_n_epochs;
    if (r->ckpt.on && ((every_ep > 0 && done_epochs % every_ep == 0) ||
                       done_epochs == j->epochs || t->due_at_end)) {
        if (r->rank == 0)
            DDPC_TRY(ckpt_save(r, done_epochs, done_epochs, 0, 0, e));
        DDPC_TRY(ckpt_written_barrier(r, "a checkpoint", j->checkpoint_dir, e));
    }
    return 0;
}

/* Final report, totals: steps, skipped steps, throughput into res. */
static void train_totals(struct ddpc_run *r, struct train_state *t)
{
    t->res->steps = r->optim.step;
    t->res->skipped_steps = r->scaler.skipped_steps;
    t->res->samples_per_s = t->train_time > 0 ? t->total_samples / t->train_time : 0;
    t->res->tokens_per_s = t->res->samples_per_s * r->seq_len;
}

/* Final report, export: rank 0 writes checkpoint.export_path. */
static int train_export(struct ddpc_run *r, struct ddpc_err *e)
{
    const struct ddpc_job *j = r->job;
    if (!j->checkpoint.export_path || !*j->checkpoint.export_path)
        return 0;
    if (r->rank == 0) {
        char written[4096];
        DDPC_TRY(state_to_host(r, 0, e));
        if (j->model.type == DDPC_MODEL_SEQUENTIAL || j->model.type == DDPC_MODEL_GPT)
            DDPC_TRY(ckpt_export_net(j->checkpoint.export_path, j, &r->model.net,
                                     r->ckpt.host_state, r->ckpt.host_state + r->model.n_params,
                                     &r->ckpt.out_id, written, sizeof written, e));
        else
            DDPC_TRY(ckpt_export_safetensors(j->checkpoint.export_path, j, r->ckpt.host_state,
                                             r->model.n_params, &r->ckpt.out_id, written,
                                             sizeof written, e));
        /* beside another configuration's export: the end of the log says where */
        if (r->a->out && strcmp(written, j->checkpoint.export_path) != 0) {
            fprintf(r->a->out, "exported to %s (checkpoint.export %s holds another "
                    "configuration's model)\n", written, j->checkpoint.export_path);
            fflush(r->a->out);
        }
    }
    return ckpt_written_barrier(r, "the export", j->checkpoint.export_path, e);
}

/* Final report: metrics closed, rank 0's "done" line, checked as written. */
static int train_report(struct ddpc_run *r, struct train_state *t, struct ddpc_err *e)
{
    const struct ddpc_job *j = r->job;
    struct ddpc_worker_result *res = t->res;
    FILE *out = t->out;
    if (r->log.on) {
        r->log.on = 0;
        DDPC_TRY(metrics_close(&r->log.metrics, e));
    }
    res->wall_s = ddpc_now() - r->a->t_launch;
    if (out && r->ckpt.start_epoch >= j->epochs) {
        /* resumed from a checkpoint that already covers every epoch (or
         * more: epochs was lowered since; the model is the checkpoint's) */
        if (r->ckpt.start_epoch > j->epochs)
            fprintf(out, "nothing to train: the checkpoint is at the end of epoch %lld, past "
                    "this job's %d epochs (the model is that checkpoint's)\n",
                    (long long)r->ckpt.start_epoch, (int)j->epochs);
        else
            fprintf(out, "nothing to train: the checkpoint already completed all %d epochs\n",
                    (int)j->epochs);
        fprintf(out, "done epochs=%d steps=%lld wall_s=%.3f\n", (int)j->epochs,
                (long long)res->steps, res->wall_s);
        fflush(out);
    } else if (out) {
        fprintf(out, "done epochs=%d steps=%lld train_loss=%.4f", (int)j->epochs,
                (long long)res->steps, res->train_loss);
        if (r->a->test) {
            fprintf(out, " test_loss=%.4f", res->test_loss);
            if (res->test_accuracy >= 0)
                fprintf(out, " test_accuracy=%.4f", res->test_accuracy);
        }
        if (r->seq_len > 1)
            fprintf(out, " tokens_per_s=%.0f", res->tokens_per_s);
        else
            fprintf(out, " samples_per_s=%.0f", res->samples_per_s);
        fprintf(out, " first_step_s=%.3f wall_s=%.3f", res->first_step_s, res->wall_s);
        if (j->precision == DDPC_PRECISION_FP16)
            fprintf(out, " skipped_steps=%lld", (long long)res->skipped_steps);
        fputc('\n', out);
    }
    if (out) {
        /* the summary is the run's result: losing it (stdout on a full
         * disk, a closed pipe) is a failure, not a quiet exit 0 */
        int bad = fflush(out) == EOF;
        int err = errno;
        if (bad || ferror(out))
            return DDPC_FAIL(e, DDPC_E_SYS, "writing the run's report to standard output "
                             "failed%s%s; the training itself completed (its checkpoints and "
                             "export are written)", bad ? ": " : "", bad ? strerror(err) : "");
    }
    return 0;
}

/* Final report, profile: DDPC_PROFILE=1: rank 0 on its report stream;
 * =all: every rank, the others on stderr with their [rank N] prefix. */
static void train_profile(struct ddpc_run *r, struct train_state *t)
{
    enum ddpc_profile pe = env_get()->profile;
    FILE *pout = r->rank == 0 ? t->out : pe == DDPC_PROFILE_ALL ? stderr : NULL;
    if (!pout || r->prof.steps <= 0 || pe == DDPC_PROFILE_OFF)
        return;
    double k = 1e6 / (double)r->prof.steps;
    double tot = r->prof.data + r->prof.fwd + r->prof.bwd + r->prof.comm + r->prof.opt +
                 r->prof.sync + r->prof.other;
    char who[24] = "";
    if (r->rank != 0)
        (void)snprintf(who, sizeof who, "[rank %d] ", r->rank);
    fprintf(pout, "%sprofile: rank %d, us per step over %ld steps: data=%.1f forward=%.1f "
            "backward=%.1f allreduce_wait=%.1f optimizer=%.1f sync=%.1f other=%.1f "
            "total=%.1f\n", who, r->rank, r->prof.steps, r->prof.data * k, r->prof.fwd * k,
            r->prof.bwd * k, r->prof.comm * k, r->prof.opt * k, r->prof.sync * k,
            r->prof.other * k, tot * k);
    fflush(pout);
}

/* The final parameters into res, where the caller asked for them (tests). */
static int train_params_out(struct ddpc_run *r, struct ddpc_worker_result *res,
                            struct ddpc_err *e)
{
    if (!res->want_params)
        return 0;
    res->n_params = r->model.n_params;
    res->params = malloc(r->model.n_params * sizeof(float));
    if (!res->params)
        return DDPC_FAIL(e, DDPC_E_NOMEM, "worker: cannot copy parameters out");
    return r->ops->to_host(r->ops, res->params, r->model.params,
                           r->model.n_params * sizeof(float), e);
}

/* The training loop: epochs of optimizer steps of micro-batches. Each step
 * is one function above; struct train_state carries what they share. */
static int run_train(struct ddpc_run *r, struct ddpc_worker_result *res, struct ddpc_err *e)
{
    const struct ddpc_job *j = r->job;
    struct train_state t;
    memset(&t, 0, sizeof t);
    t.res = res;
    t.out = r->rank == 0 ? r->a->out : NULL;
    t.accum = j->grad_accumulation > 0 ? j->grad_accumulation : 1;
    t.sync = r->comm_on && r->a->sync_comm && j->rank_sync_timeout_s > 0;
    t.every = j->logging.every_n_steps > 0 ? j->logging.every_n_steps : 1;

    DDPC_TRY(train_init_params(r, e));
    DDPC_TRY(train_open_metrics(r, &t, e));
    res->test_accuracy = -1;
    t.run_first_step = r->optim.step;
    for (int64_t epoch = r->ckpt.start_epoch; epoch < j->epochs; epoch++) {
        DDPC_TRY(epoch_begin(r, &t, epoch, e));
        for (t.b = t.b0; t.b < r->sampler.n_batches; t.b++) {
            t.micro = (int)(t.b % t.accum);
            t.last_micro = t.micro == t.accum - 1 || t.b == r->sampler.n_batches - 1;
            if (t.micro == 0 || t.b == t.b0)
                DDPC_TRY(step_sync(r, &t, e));
            DDPC_TRY(step_load_batch(r, &t, e));
            DDPC_TRY(step_forward(r, &t, e));
            DDPC_TRY(step_backward(r, &t, e));
            if (!t.last_micro)
                continue;
            int skip = 0;
            DDPC_TRY(step_loss_scale(r, &t, &skip, e));
            if (skip)
                continue;
            DDPC_TRY(step_optimize(r, &t, e));
            DDPC_TRY(step_log(r, &t, e));
            DDPC_TRY(step_checkpoint(r, &t, e));
            r->prof.other += ddpc_now() - t.tick;
        }
        r->end_of_epoch = (int)epoch + 1;
        int rc = epoch_evaluate(r, &t, e);
        if (rc >= 0)
            rc = epoch_report(r, &t, e);
        if (rc >= 0)
            rc = epoch_checkpoint(r, &t, e);
        if (rc < 0)
            return step_fail(r, e, rc);
        r->end_of_epoch = 0;
    }
    train_totals(r, &t);
    DDPC_TRY(train_export(r, e));
    DDPC_TRY(train_report(r, &t, e));
    train_profile(r, &t);
    return train_params_out(r, res, e);
}

/* ===== --eval and --predict: the model without training ===== */

/* Rank 0 reads the weights --eval or --predict names (evaluate.h: never a
 * write), every rank gets them, as a resume's are broadcast. what
 * receives rank 0's description of them. */
static int eval_weights(struct ddpc_run *r, char *what, size_t cap, struct ddpc_err *e)
{
    struct ddpc_model *m = &r->model;
    DDPC_TRY(run_same_job(r, e));
    if (r->rank == 0) {
        float *host = malloc((m->n_params + m->n_state + 1) * sizeof *host);
        if (!host)
            return DDPC_FAIL(e, DDPC_E_NOMEM, "worker: cannot allocate the model's host copy");
        int rc = evaluate_load(r->job, &m->net, &r->ckpt.out_id, &r->a->eval->src, host,
                               host + m->n_params, r->a->out, what, cap, e);
        if (rc == 0)
            rc = r->ops->to_device(r->ops, m->params, host, m->n_params * sizeof *host, e);
        if (rc == 0 && m->n_state)
            rc = r->ops->to_device(r->ops, m->state, host + m->n_params,
                                   m->n_state * sizeof *host, e);
        free(host);
        if (rc < 0)
            return rc;
    }
    if (r->comm_on) {
        struct ddpc_comm *c = r->a->grad_comm;
        double dl = ddpc_deadline_after(r->job->nccl_timeout_s);
        DDPC_TRY(c->broadcast(c, m->params, m->n_params, 0, dl, e));
        if (m->n_state)
            DDPC_TRY(c->broadcast(c, m->state, m->n_state, 0, dl, e));
    }
    return 0;
}

/* --eval: the test set's metrics with evaluate() and test_result, as the
 * end of training computes them (the same numbers for the same weights);
 * --predict: predict.c over the model. */
static int run_eval(struct ddpc_run *r, struct ddpc_worker_result *res, struct ddpc_err *e)
{
    const struct ddpc_eval_opts *o = r->a->eval;
    char what[4400] = "";
    DDPC_TRY(eval_weights(r, what, sizeof what, e));
    if (o->predict) {
        struct predict_ctx c = {
            .job = r->job, .model = &r->model, .ops = r->ops,
            .comm = r->comm_on ? r->a->grad_comm : NULL, .rank = r->rank, .world = r->world,
            .rows = r->eval_rows, .dx = r->buf.dx, .hx = r->buf.hx, .in_dim = r->in_dim,
            .out_dim = r->out_dim, .seq_len = r->seq_len,
            .out = r->rank == 0 ? r->a->out : NULL, .timeout_s = r->job->nccl_timeout_s,
        };
        return predict_run(&c, o->input, o->output, e);
    }
    if (!r->a->test)
        return DDPC_FAIL(e, DDPC_E_INVALID, "--eval: no data to evaluate on");
    double m[3];
    DDPC_TRY(evaluate(r, &m[0], &m[1], &m[2], e));
    DDPC_TRY(metrics_reduce(r, m, 3, e));
    test_result(r, m, res);
    res->wall_s = ddpc_now() - r->a->t_launch;
    FILE *out = r->rank == 0 ? r->a->out : NULL;
    if (!out)
        return 0;
    evaluate_report(out, r->job, what, o->data_desc, m[2], res->test_loss, res->test_accuracy,
                    res->wall_s);
    if (fflush(out) == EOF || ferror(out))
        return DDPC_FAIL(e, DDPC_E_SYS, "writing --eval's result to standard output failed: %s",
                         strerror(errno));
    return 0;
}

int worker_run(const struct ddpc_worker_args *a, struct ddpc_worker_result *res,
               struct ddpc_err *e)
{
    int want = res->want_params;
    memset(res, 0, sizeof *res);
    res->want_params = want;
    res->test_accuracy = -1;
    res->train_loss = res->test_loss = NAN;
    struct ddpc_run r;
    int rc = run_init(&r, a, e);
    if (rc == 0)
        rc = a->eval ? run_eval(&r, res, e) : run_train(&r, res, e);
    /* The ranks leave together. A rank that exits while a peer still reads
     * the last collective can reset the connection under it (TCP answers a
     * close with unread bytes, such as gloo's ring notifications, with a
     * reset), and that peer fails its last step: seen between two nodes,
     * "connection closed by peer" at step 64/64. comm_leave's first barrier
     * ends every collective; its second keeps each rank until all have
     * passed the first (comm.h). */
    if (rc == 0 && r.comm_on)
        rc = comm_leave(a->grad_comm, ddpc_deadline_after(r.job->nccl_timeout_s), 60, e);
    /* --sample: rank 0 alone, from the parameters in memory; the others
     * have left (no collective waits on this) */
    if (rc == 0 && a->sample && a->rank == 0 && a->out)
        rc = sample_run(&r.model, a->sample, a->out, e);
    /* A device frees its buffers with cudaFree, which waits for every
     * stream of the GPU, the communicators' too: after a failure one of
     * them may hold a collective that never completes (a timed-out device
     * wait, a rank-sync barrier past its deadline, a hung peer), and the
     * free would wait for it forever, before ddprt.c's abort. So abort
     * first, in ddprt.c's order: the gradient comm, then the rank-sync
     * comm (NCCL links the child's abort flag to the parent's only while
     * the split runs); that ends those kernels (the CPU keeps ddprt.c's
     * place for it). */
    if (rc < 0 && a->ops && !a->ops->host_memory) {
        char why[64];
        (void)snprintf(why, sizeof why, "rank %d failed", a->rank);
        if (a->grad_comm && a->grad_comm->abort)
            a->grad_comm->abort(a->grad_comm, why);
        if (a->sync_comm && a->sync_comm->abort)
            a->sync_comm->abort(a->sync_comm, why);
    }
    run_free(&r);
    return rc;
}
