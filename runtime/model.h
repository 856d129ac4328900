/* model.h - the network: a list of layers (spec/layers.h) over flat buffers.
 *
 * defines: model_init, model_init_params, model_set_mode, model_forward,
 *          model_backward, model_borrow_grads, model_borrow_params, model_free
 *
 * One runtime path for every model: mlp and linear specs are lowered by
 * layers_build to the same node list a sequential spec gives. Parameters
 * live in ONE flat backend buffer in PyTorch's named_parameters() order
 * (layers.h); gradients are a second buffer with the same offsets, so a
 * gradient bucket is a slice. Batch-norm running statistics are a third,
 * private buffer (state): never all-reduced, each rank's own (rank 0's are
 * checkpointed, exported and broadcast before evaluation by the worker).
 * Forward keeps every node's output that backward reads (every one but a
 * convolution's whose ReLU a pooling's backward takes, out_in_relu); all buffers are
 * allocated once in model_init for up to max_batch rows; forward/backward
 * never allocate. Never communicates: the backward hook tells the caller
 * when a node's gradients are final.
 *
 * Train vs eval (model_set_mode), as PyTorch's module.train()/eval():
 * dropout is the identity in eval; batch norm normalizes with the batch's
 * statistics and updates the running ones in training, and uses the running
 * ones in eval.
 */
#ifndef DDPC_MODEL_H
#define DDPC_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include "job.h"
#include "layers.h"
#include "ops.h"

struct ddpc_model {
    struct ddpc_ops  *ops;
    struct ddpc_net   net;
    int               max_batch;
    size_t            n_params;
    size_t            n_state;              /* batch-norm buffers (floats) */
    float  *params;     /* [n_params] backend memory; owned unless params_borrowed */
    int     params_borrowed;  /* params live in memory the ranks share */
    float  *grads;      /* [n_params] same offsets; owned unless grads_borrowed */
    int     grads_borrowed;   /* grads live in a communicator's shared buffer */
    float  *state;      /* [n_state] this rank's running statistics */
    float  *y[DDPC_MAX_NODES];    /* [max_batch, out_numel] each node's output */
    float  *g[DDPC_MAX_NODES];    /* [max_batch, out_numel] its gradient */
    int32_t *idx[DDPC_MAX_NODES]; /* max pooling: argmax per output */
    float  *stat[DDPC_MAX_NODES]; /* norms: mean and 1/std (per channel or row), then
                                     batch norm's backward sums */
    float  *col;                  /* scratch [max_batch * scratch_floats]: conv's im2col,
                                     attention's gradients */
    int64_t scratch_floats;       /* per sample: the largest node's on this backend (the
                                     net's, less where attention is fused, attn.h) */
    float  *ws;                   /* layer kernels' scratch (struct ddpc_lk.ws): col2im's
                                     plane, the largest conv input's H*W floats */
    int     tied[DDPC_MAX_NODES]; /* 1: an embedding whose wte a later linear uses (lm_head) */
    int     fused[DDPC_MAX_NODES];/* 1: a linear or conv2d node whose following
                                     activation node is computed with it
                                     (bias_act_forward, DDPC_LK_CHAN_BIAS_ACT) */
    int     relu_in_pool[DDPC_MAX_NODES]; /* 1: a ReLU node whose only reader is the max
                                     pooling after it: that pooling's backward applies
                                     the ReLU's gradient too (DDPC_LK_POOL_BWD's aux),
                                     one pass less over the largest activations */
    int     out_in_relu[DDPC_MAX_NODES]; /* 1: a conv2d read only by its fused ReLU, whose
                                     backward is a pooling's (relu_in_pool): nothing
                                     reads the conv's own output, so it is computed in
                                     the ReLU's buffer, bias and ReLU applied in place,
                                     and y[k] is not allocated (NULL) */
    float  *logits;               /* == y[last] after forward */
    float  *dbuf[2];              /* dbuf[0] == g[last]: where the loss writes dlogits */
    int     training;             /* model_set_mode */
    uint64_t drop_seed;           /* dropout masks of this forward */
};

/* Called by model_backward once node k's parameter gradients are final
 * (nodes with parameters only, in reverse node order). Returning < 0 stops
 * backward with that code. */
typedef int (*ddpc_layer_done_fn)(void *ctx, int node, struct ddpc_err *e);

/* Nodes from layers_build(job) with job->model.input as the input shape. */
int  model_init(struct ddpc_model *m, struct ddpc_ops *ops, const struct ddpc_job *job,
                int max_batch, struct ddpc_err *e);
/* Seeded init on the host (same on every rank), copied to params; batch
 * norm: weight 1, bias 0, running mean 0, running var 1. Linear and conv
 * layers draw in node order (weight, then bias) from one stream. */
int  model_init_params(struct ddpc_model *m, enum ddpc_init init, uint64_t seed,
                       struct ddpc_err *e);
/* training 1: train mode; seed: this forward's dropout masks (the caller
 * mixes seed, rank and step). */
void model_set_mode(struct ddpc_model *m, int training, uint64_t seed);
/* The seed of node k's dropout mask in this forward (ops_kernels.h's
 * DDPC_LK_DROPOUT_FWD draws ddpc_k_uniform(seed, element)); for tests. */
uint64_t model_dropout_seed(const struct ddpc_model *m, int k);
/* x [rows, in_numel] backend memory; logits end in m->logits [rows, out]. */
int  model_forward(struct ddpc_model *m, const float *x, int rows, struct ddpc_err *e);
/* dlogits [rows, out] (may be m->dbuf[0]); x is the forward input.
 * accumulate: add into grads (grad accumulation) instead of overwriting. */
int  model_backward(struct ddpc_model *m, const float *x, const float *dlogits, int rows,
                    int accumulate, ddpc_layer_done_fn done, void *ctx, struct ddpc_err *e);
/* Backward writes gradients into buf [n_params] from now on (a
 * communicator's zero-copy buffer, comm.h grad_buffer): frees the model's
 * own gradient buffer; model_free leaves buf alone. */
void model_borrow_grads(struct ddpc_model *m, float *buf);
/* Same for the parameters (one copy shared by the ranks, comm.h
 * shared_buffer); the values already in params are not copied. */
void model_borrow_params(struct ddpc_model *m, float *buf);
void model_free(struct ddpc_model *m);

#endif /* DDPC_MODEL_H */
