/* layers.h - a model's layers resolved: shapes, parameter layout, FLOPs,
 * activation sizes and gradient buckets, computed once by one module.
 *
 * defines: layers_build, layers_buckets, layers_type_name, layers_shape_str
 *
 * The checker (spec/validate.c), the planner (compiler/plan.c) and the
 * runtime (runtime/model.c, worker.c, ckpt export) all call layers_build on
 * the same job, so the shapes `ddpc check` reports, the parameters `ddpc
 * plan` lists and the buffers the runtime trains can never disagree. Plain
 * C: no YAML, no allocation, no I/O; the runtime library links it.
 *
 * Lowering: `mlp` and `linear` models become the same node list a
 * sequential spec would give (linear, activation, linear, ...), so there is
 * one runtime path. Their tensor names keep the MLP export's numbering:
 * "layers.<l>" for the l-th linear layer (activations have no module
 * index); a sequential model's names use the item's position in the list.
 *
 * A residual item becomes one node placed AFTER its body (the add): the
 * body's first node reads the residual's input, the add node reads the
 * body's last node and adds its skip input. Nodes are therefore in
 * evaluation order, and in PyTorch's named_parameters() order.
 *
 * Flat buffers: params holds every trainable tensor in node order (weight,
 * then bias); state holds batch-norm buffers (running_mean, running_var,
 * num_batches_tracked stored as a float, exact below 2^24 batches).
 *
 * A gpt model lowers to nanoGPT's module tree: `transformer` (an embedding
 * node: wte [V, C] as its weight, wpe [T, C] as its "bias"), per block
 * ln_1, attn.c_attn (linear 3C), attn (causal self-attention over the
 * [T, 3C] rows: q | k | v, head h in columns h*hs..), attn.c_proj, a
 * residual add, ln_2, mlp.c_fc (4C), gelu (tanh), mlp.c_proj, a residual
 * add; then transformer.ln_f and lm_head, a linear TIED to wte (node.tie).
 * Input: [T] token ids held as floats (exact below 2^24); output [T, V].
 */
#ifndef DDPC_LAYERS_H
#define DDPC_LAYERS_H

#include <stddef.h>
#include <stdint.h>
#include "job.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Nodes of one net: a sequential list gives at most DDPC_MAX_ITEMS, a gpt
 * 2 + 12 per block (48 blocks at most) + 2. */
#define DDPC_MAX_NODES   600
/* At most 2 tensors per node, batch norm's 5 (only in sequential lists). */
#define DDPC_MAX_TENSORS (2 * DDPC_MAX_NODES + 3 * DDPC_MAX_ITEMS)
/* Module paths and tensor names, whole for every list the spec accepts:
 * residuals nest 16 deep and positions are below DDPC_MAX_ITEMS, so a
 * path is at most "layers" + 16 x ".63.body" + ".63" (137 characters),
 * a tensor name that + ".num_batches_tracked". layers_build refuses a
 * name that would not fit rather than cut it (cut names collide). */
#define DDPC_NODE_NAME   144
#define DDPC_TENSOR_NAME (DDPC_NODE_NAME + 32)
#define DDPC_MAX_BUCKETS_L 64

struct ddpc_shape {
    int32_t n;                      /* dimensions, 1..DDPC_MAX_DIMS */
    int32_t d[DDPC_MAX_DIMS];
};

struct ddpc_lnode {
    struct ddpc_layer_item it;      /* type and arguments; pool stride resolved */
    int     item;                   /* index in job->model.items; -1 when lowered */
    int     src;                    /* node whose output is the input; -1 = model input */
    int     skip;                   /* residual add: the residual's input node (-1: model input) */
    struct ddpc_shape in, out;
    int64_t in_numel, out_numel;    /* floats per sample */
    size_t  w_off, w_numel;         /* weight in params (0 numel: none) */
    size_t  b_off, b_numel;         /* bias in params (0 numel: none) */
    size_t  s_off;                  /* batch norm: running_mean [C], running_var [C], count [1] */
    int     channels;               /* conv/pool/norm: C of the input; linear: in features */
    int     spatial;                /* conv/pool/norm: H*W (or L) of the input; 1 otherwise */
    int     rows;                   /* linear, layernorm: rows per sample (numel / last dim) */
    int     tie;                    /* linear: the node whose weight it uses instead of its own
                                       (gpt's lm_head: the embedding's wte); -1: none. A tied
                                       weight adds no parameters and no tensor; w_off points
                                       at the owner's */
    double  fwd_flops, bwd_flops;   /* per sample */
    int64_t act_floats;             /* per sample, kept for backward (output, its gradient, extras) */
    int64_t scratch_floats;         /* per sample, reusable across layers (conv im2col) */
    char    name[DDPC_NODE_NAME];   /* module path: "layers.3", "layers.2.body.0" */
};

enum ddpc_tensor_kind { DDPC_TENSOR_PARAM, DDPC_TENSOR_STATE };

struct ddpc_tensor {
    char    name[DDPC_TENSOR_NAME]; /* PyTorch state_dict name */
    int     node;
    int     kind;                   /* enum ddpc_tensor_kind */
    int     is_count;               /* num_batches_tracked: int64 in PyTorch */
    int     nd;
    int64_t shape[4];
    size_t  off, numel;             /* in params (PARAM) or state (STATE) */
};

struct ddpc_net {
    int     n;
    struct ddpc_lnode node[DDPC_MAX_NODES];
    struct ddpc_shape input;
    int64_t in_numel, out_numel;
    size_t  n_params, n_state;
    int     n_tensors;
    struct ddpc_tensor tensor[DDPC_MAX_TENSORS];
    double  fwd_flops, bwd_flops;   /* per sample */
    int64_t act_floats, scratch_floats;   /* per sample: sum, max */
    int     has_batchnorm, has_dropout;
    int     seq_len;                /* rows of the output per sample: gpt T (logits [T, V],
                                       one label per position); 1 otherwise */
    int     tie_tensor;             /* a tied weight's tensor (gpt: transformer.wte.weight),
                                       exported a second time as tie_name; -1: none */
    char    tie_name[80];           /* "lm_head.weight" */
};

/* One gradient bucket: params [lo, hi); it may start all-reducing once
 * backward has finished node low_node (nodes finish in reverse order). */
struct ddpc_bucket_span {
    size_t lo, hi;
    int    low_node;
    int    first_tensor, n_tensors;   /* tensors t with first_tensor - n < t <= first, fill order */
};

/* Resolves job's model for one input sample shape. input is ignored for mlp
 * and linear (their input is [layers[0]]); for a sequential model NULL
 * means job->model.input (which must then be set). On error returns -1,
 * writes the message into why ("linear after flatten gets 3136 features
 * ...") and the offending item index (into job->model.items, -1 when none
 * applies) into *bad_item. */
int  layers_build(const struct ddpc_job *job, const struct ddpc_shape *input,
                  struct ddpc_net *net, int *bad_item, char *why, size_t cap);

/* One finding of layers_build_each: item as *bad_item, why its message. */
typedef void (*layers_report_fn)(void *ctx, int item, const char *why);

/* layers_build for the checker, which reports every mismatch in one pass:
 * a layer whose declared input size (in_features, in_channels) is not the
 * size it gets is passed to report and the build goes on (its output shape
 * does not depend on the declaration); an error that leaves no shape to go
 * on with ends it in why and *bad_item as layers_build does, and is not
 * passed to report. Returns 0, or -1 when anything was found: with why
 * empty, only reported mismatches, and the net is whole (its shapes are
 * those of the sizes each layer gets). */
int  layers_build_each(const struct ddpc_job *job, const struct ddpc_shape *input,
                       struct ddpc_net *net, int *bad_item, char *why, size_t cap,
                       layers_report_fn report, void *report_ctx);

/* The CUDA backend fuses causal attention (runtime/ops_cuda_attn.cuh),
 * dropout on the probabilities included, for bf16 gemm inputs and these
 * head sizes, each its own kernels. */
#define DDPC_ATTN_FUSED_HS(hs) ((hs) == 64 || (hs) == 32)

/* Per sample floats of net's buffers (act_floats + scratch_floats) on a
 * backend that fuses every attention node it can (runtime/attn.h
 * attn_floats): such a node keeps heads*T log-sum-exps where unfused it
 * keeps heads*T*T probabilities, and needs heads*T of scratch where
 * unfused it needs their gradient. *scratch (may be NULL): that scratch. */
int64_t layers_floats_fused(const struct ddpc_net *net, int64_t *scratch);

/* Gradient buckets over net's parameter tensors, filled from the last one
 * backward, each closed once it holds >= cap_bytes (cap <= 0: one bucket;
 * a tensor is never split; at most max buckets, the last taking the rest).
 * The planner and the runtime both call this. Returns the count. */
int  layers_buckets(const struct ddpc_net *net, double cap_bytes, struct ddpc_bucket_span *out,
                    int max);

/* Rows per evaluation batch, at most (layers_eval_rows). */
#define DDPC_EVAL_BATCH  512

/* Rows of one evaluation batch: eval_batch, unless that many samples'
 * activations would pass 256 MiB (CNNs), then max(batch, 1) capped at
 * eval_batch. The worker evaluates with it; the launcher's memory estimate
 * assumes it. */
int  layers_eval_rows(const struct ddpc_net *net, int batch, int eval_batch);

/* Rows a worker sizes its activations and cast buffers for: the training
 * batch, or the evaluation's rows (DDPC_EVAL_BATCH) when the job evaluates
 * a test set and they are more. The worker, the launcher's memory preflight
 * and ddpc plan all count with it. */
int  layers_buffer_rows(const struct ddpc_net *net, int batch, int evaluates);

/* The spec name of a layer type ("conv2d"), from spec/keys.def. */
const char *layers_type_name(int type);
/* "[32, 14, 14]" */
const char *layers_shape_str(const struct ddpc_shape *s, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif /* DDPC_LAYERS_H */
