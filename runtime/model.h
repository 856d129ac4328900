/* model.h - the network: MLP / linear layers over one flat parameter buffer.
 *
 * defines: model_init, model_init_params, model_forward, model_backward, model_free
 *
 * Parameters live in ONE flat backend buffer with named views in PyTorch's
 * order: W0 [out0, in0], b0 [out0], W1 [out1, in1], b1, ... Gradients are a
 * second buffer with the same offsets, so a gradient bucket is a slice.
 * Forward keeps Z (pre-activation) and A (activation) per layer for backward.
 * All buffers are allocated once in model_init for up to max_batch rows;
 * forward/backward never allocate. Never communicates: the backward hook
 * tells the caller when a layer's gradients are final.
 */
#ifndef DDPC_MODEL_H
#define DDPC_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include "job.h"
#include "ops.h"

struct ddpc_layer {
    int    in, out;
    int    act;             /* DDPC_K_* activation after this layer */
    size_t w_off;           /* floats into params/grads: W [out, in] */
    size_t b_off;           /* b [out] */
};

struct ddpc_model {
    struct ddpc_ops  *ops;
    int               n_layers;             /* linear layers (sizes - 1) */
    struct ddpc_layer layer[DDPC_MAX_LAYERS];
    int               max_batch;
    int               max_width;            /* widest layer input or output */
    size_t            n_params;
    float  *params;     /* [n_params] backend memory; owned unless params_borrowed */
    int     params_borrowed;  /* params live in memory the ranks share */
    float  *grads;      /* [n_params] same offsets; owned unless grads_borrowed */
    int     grads_borrowed;   /* grads live in a communicator's shared buffer */
    float  *z[DDPC_MAX_LAYERS];   /* [max_batch, out_l] pre-activation */
    float  *a[DDPC_MAX_LAYERS];   /* [max_batch, out_l]; == z for identity layers */
    float  *dbuf[2];              /* [max_batch, max_width] backward ping-pong */
    float  *logits;               /* == a[n_layers-1] after forward */
};

/* Called by model_backward once layer l's dW and db are final (layers go
 * n_layers-1 down to 0). Returning < 0 stops backward with that code. */
typedef int (*ddpc_layer_done_fn)(void *ctx, int layer, struct ddpc_err *e);

/* Shapes from job->model (type linear: exactly two sizes, no activation). */
int  model_init(struct ddpc_model *m, struct ddpc_ops *ops, const struct ddpc_job *job,
                int max_batch, struct ddpc_err *e);
/* Seeded init on the host (same on every rank), copied to params. */
int  model_init_params(struct ddpc_model *m, enum ddpc_init init, uint64_t seed,
                       struct ddpc_err *e);
/* x [rows, in0] backend memory; logits end in m->logits [rows, out_last]. */
int  model_forward(struct ddpc_model *m, const float *x, int rows, struct ddpc_err *e);
/* dlogits [rows, out_last] (may be m->dbuf[0]); x is the forward input.
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
