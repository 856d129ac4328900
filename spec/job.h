/* job.h - struct ddpc_job: the validated job.
 *
 * This is the one type the compiler and the runtime share. spec/validate.c
 * fills it from YAML; the compiler bakes it into job_config.h as a
 * `static const struct ddpc_job`; the runtime reads it and never parses YAML.
 *
 * Rules this file keeps:
 *   - plain data only: no pointers to heap memory the runtime must free;
 *     strings are `const char *` (string literals in the baked job; owned by
 *     the spec arena in the compiler, see validate.h);
 *   - every field has a value after validation (defaults from spec/keys.def);
 *   - enums start at 0 with the default where a default exists.
 */
#ifndef DDPC_JOB_H
#define DDPC_JOB_H

#include <math.h>
#include <stdint.h>

#define DDPC_JOB_VERSION   1    /* spec language version this build understands */
#define DDPC_MAX_DEVICES   64
#define DDPC_MAX_LAYERS    16   /* sizes, input and output included: 784-256-10 is 3 */
#define DDPC_MAX_ITEMS     64   /* model.layers items of a sequential model, residual
                                   blocks and their bodies included */
#define DDPC_MAX_DIMS      3    /* model.input: [features], [C, L] or [C, H, W] */

/* Every enum is one list, X-macro style, and that list alone makes the C
 * enum (here), its enumerator names in generated headers (compiler/emit.c)
 * and its spellings in a spec, a schema, a reference and a dry run
 * (spec/keytab.h). Each list calls
 *   V(enumerator, "spelling")   a value; the n-th V is n (the default first)
 *   A(enumerator, "spelling")   another spelling of that value (an alias)
 *   H(enumerator, "name")       a value no spec may spell (set by a rule)
 * and keys.def's DDPC_ENUM rows name the list. */
#define DDPC_ENUM_LIST_strategy(V, A, H) \
    V(DDPC_STRATEGY_DDP, "ddp") V(DDPC_STRATEGY_NONE, "none") \
    A(DDPC_STRATEGY_DDP, "auto") /* validate.c: none when the world is one device */
#define DDPC_ENUM_LIST_accelerator(V, A, H) \
    V(DDPC_ACCEL_AUTO, "auto") V(DDPC_ACCEL_CPU, "cpu") V(DDPC_ACCEL_GPU, "gpu") \
    A(DDPC_ACCEL_GPU, "cuda")
#define DDPC_ENUM_LIST_lr_scaling(V, A, H) \
    V(DDPC_LR_SCALING_NONE, "none") V(DDPC_LR_SCALING_LINEAR, "linear") \
    V(DDPC_LR_SCALING_SQRT, "sqrt")
#define DDPC_ENUM_LIST_precision(V, A, H) \
    V(DDPC_PRECISION_FP32, "fp32") V(DDPC_PRECISION_BF16, "bf16") V(DDPC_PRECISION_FP16, "fp16") \
    A(DDPC_PRECISION_FP32, "32-true") A(DDPC_PRECISION_FP32, "32") \
    A(DDPC_PRECISION_BF16, "bf16-mixed") A(DDPC_PRECISION_FP16, "16-mixed") \
    A(DDPC_PRECISION_FP16, "16")
/* torch.set_float32_matmul_precision: highest = fp32 GEMMs, high = TF32 */
#define DDPC_ENUM_LIST_matmul_precision(V, A, H) \
    V(DDPC_MATMUL_HIGHEST, "highest") V(DDPC_MATMUL_HIGH, "high")
#define DDPC_ENUM_LIST_model_type(V, A, H) \
    V(DDPC_MODEL_MLP, "mlp") V(DDPC_MODEL_LINEAR, "linear") V(DDPC_MODEL_SEQUENTIAL, "sequential") \
    V(DDPC_MODEL_GPT, "gpt")
/* The item types of a sequential model's `layers` list; keys.def's
 * DDPC_ITEM rows name them (a test checks the spellings agree). */
#define DDPC_ENUM_LIST_layer_type(V, A, H) \
    V(DDPC_LAYER_LINEAR, "linear") V(DDPC_LAYER_CONV2D, "conv2d") \
    V(DDPC_LAYER_MAXPOOL2D, "maxpool2d") V(DDPC_LAYER_AVGPOOL2D, "avgpool2d") \
    V(DDPC_LAYER_ADAPTIVEAVGPOOL2D, "adaptiveavgpool2d") V(DDPC_LAYER_BATCHNORM1D, "batchnorm1d") \
    V(DDPC_LAYER_BATCHNORM2D, "batchnorm2d") V(DDPC_LAYER_LAYERNORM, "layernorm") \
    V(DDPC_LAYER_DROPOUT, "dropout") V(DDPC_LAYER_FLATTEN, "flatten") V(DDPC_LAYER_RELU, "relu") \
    V(DDPC_LAYER_LEAKY_RELU, "leaky_relu") V(DDPC_LAYER_GELU, "gelu") V(DDPC_LAYER_SILU, "silu") \
    V(DDPC_LAYER_TANH, "tanh") V(DDPC_LAYER_SIGMOID, "sigmoid") V(DDPC_LAYER_RESIDUAL, "residual") \
    H(DDPC_LAYER_EMBEDDING, "embedding") H(DDPC_LAYER_ATTENTION, "causal_self_attention") \
    H(DDPC_LAYER_COUNT, "count")
/* embedding and causal_self_attention are the GPT lowering's own node types
 * (spec/layers.c): no spec item spells them. */
#define DDPC_ENUM_LIST_gelu_approx(V, A, H) \
    V(DDPC_GELU_NONE, "none") V(DDPC_GELU_TANH, "tanh")
/* identity: the output layer's; not a spec value */
#define DDPC_ENUM_LIST_activation(V, A, H) \
    V(DDPC_ACT_RELU, "relu") V(DDPC_ACT_GELU, "gelu") V(DDPC_ACT_TANH, "tanh") \
    V(DDPC_ACT_SIGMOID, "sigmoid") H(DDPC_ACT_IDENTITY, "identity")
/* pytorch: nn.Linear's default, U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for W and b */
#define DDPC_ENUM_LIST_init(V, A, H) \
    V(DDPC_INIT_PYTORCH, "pytorch") V(DDPC_INIT_XAVIER_UNIFORM, "xavier_uniform") \
    V(DDPC_INIT_KAIMING_NORMAL, "kaiming_normal")
#define DDPC_ENUM_LIST_loss(V, A, H) \
    V(DDPC_LOSS_CROSS_ENTROPY, "cross_entropy") V(DDPC_LOSS_MSE, "mse")
#define DDPC_ENUM_LIST_data_format(V, A, H) \
    V(DDPC_DATA_IDX, "idx") V(DDPC_DATA_NPY, "npy") V(DDPC_DATA_CSV, "csv") \
    V(DDPC_DATA_SYNTHETIC, "synthetic") V(DDPC_DATA_TEXT, "text") V(DDPC_DATA_TOKENS, "tokens")
#define DDPC_ENUM_LIST_optimizer_type(V, A, H) \
    V(DDPC_OPTIM_ADAM, "adam") V(DDPC_OPTIM_ADAMW, "adamw") V(DDPC_OPTIM_SGD, "sgd")
/* weights: only tensors of 2+ dimensions (nanoGPT's configure_optimizers groups) */
#define DDPC_ENUM_LIST_weight_decay_on(V, A, H) \
    V(DDPC_WD_ON_ALL, "all") V(DDPC_WD_ON_WEIGHTS, "weights")
#define DDPC_ENUM_LIST_decay(V, A, H) \
    V(DDPC_DECAY_CONSTANT, "constant") V(DDPC_DECAY_COSINE, "cosine") V(DDPC_DECAY_STEP, "step")
/* path: a checkpoint file was named (checkpoint.resume is a custom key) */
#define DDPC_ENUM_LIST_resume(V, A, H) \
    V(DDPC_RESUME_AUTO, "auto") V(DDPC_RESUME_NEVER, "never") H(DDPC_RESUME_PATH, "path")
/* true / false: Lightning's enable_progress_bar (docs/coming-from.md) */
#define DDPC_ENUM_LIST_progress(V, A, H) \
    V(DDPC_PROGRESS_AUTO, "auto") V(DDPC_PROGRESS_ON, "on") V(DDPC_PROGRESS_OFF, "off") \
    A(DDPC_PROGRESS_ON, "true") A(DDPC_PROGRESS_OFF, "false")
#define DDPC_ENUM_LIST_launcher(V, A, H) \
    V(DDPC_LAUNCHER_LOCAL, "local") V(DDPC_LAUNCHER_SLURM, "slurm")
/* an output path holding another configuration's file (runtime/outver.h) */
#define DDPC_ENUM_LIST_other_run_outputs(V, A, H) \
    V(DDPC_OTHER_OUTPUTS_VERSION, "version") V(DDPC_OTHER_OUTPUTS_REFUSE, "refuse")

/* Every list, for code that instantiates them all (spec/keytab.h). */
#define DDPC_ENUM_LISTS(X) \
    X(strategy) X(accelerator) X(lr_scaling) X(precision) X(matmul_precision) X(model_type) \
    X(activation) \
    X(init) X(loss) X(data_format) X(optimizer_type) X(decay) X(resume) X(progress) \
    X(launcher) X(layer_type) X(gelu_approx) X(weight_decay_on) X(other_run_outputs)

#define DDPC_ENUMERATOR_(id, s) id,
#define DDPC_NO_ENUMERATOR_(id, s)
#define DDPC_ENUM_BODY_(name) \
    DDPC_ENUM_LIST_##name(DDPC_ENUMERATOR_, DDPC_NO_ENUMERATOR_, DDPC_ENUMERATOR_)

enum ddpc_strategy       { DDPC_ENUM_BODY_(strategy) };
enum ddpc_accelerator    { DDPC_ENUM_BODY_(accelerator) };
enum ddpc_lr_scaling     { DDPC_ENUM_BODY_(lr_scaling) };
enum ddpc_precision      { DDPC_ENUM_BODY_(precision) };
enum ddpc_matmul_precision { DDPC_ENUM_BODY_(matmul_precision) };
enum ddpc_model_type     { DDPC_ENUM_BODY_(model_type) };
enum ddpc_activation     { DDPC_ENUM_BODY_(activation) };
enum ddpc_init           { DDPC_ENUM_BODY_(init) };
enum ddpc_loss           { DDPC_ENUM_BODY_(loss) };
enum ddpc_data_format    { DDPC_ENUM_BODY_(data_format) };
enum ddpc_optimizer_type { DDPC_ENUM_BODY_(optimizer_type) };
enum ddpc_decay          { DDPC_ENUM_BODY_(decay) };
enum ddpc_resume         { DDPC_ENUM_BODY_(resume) };
enum ddpc_progress       { DDPC_ENUM_BODY_(progress) };
enum ddpc_launcher       { DDPC_ENUM_BODY_(launcher) };
enum ddpc_layer_type     { DDPC_ENUM_BODY_(layer_type) };
enum ddpc_gelu_approx    { DDPC_ENUM_BODY_(gelu_approx) };
enum ddpc_weight_decay_on { DDPC_ENUM_BODY_(weight_decay_on) };
enum ddpc_other_run_outputs { DDPC_ENUM_BODY_(other_run_outputs) };

/* One item of a sequential model's layer list: the arguments of every type
 * side by side (a type reads only its own; the others stay 0). PyTorch's
 * argument names; in_features/in_channels 0 = inferred from the shapes. */
struct ddpc_layer_item {
    enum ddpc_layer_type type;
    int32_t n_body;         /* residual: the next n_body items (nested ones
                               included) are its body */
    int32_t in;             /* linear in_features, conv2d in_channels; 0 = inferred */
    int32_t out;            /* linear out_features, conv2d out_channels */
    int32_t kernel_size;    /* conv2d, pools */
    int32_t stride;         /* conv2d, pools; pools: 0 = kernel_size (PyTorch's None) */
    int32_t padding;        /* conv2d, pools */
    int32_t bias;           /* linear, conv2d, layernorm: bool */
    int32_t heads;          /* causal_self_attention (gpt lowering): n_head */
    int32_t output_size;    /* adaptiveavgpool2d: 1 */
    enum ddpc_gelu_approx approximate;  /* gelu */
    double  p;              /* dropout */
    double  momentum, eps;  /* batchnorm (momentum, eps), layernorm (eps) */
    double  negative_slope; /* leaky_relu */
};

/* One data source (data.train or data.test). Which fields matter depends on
 * format:
 *   idx:       inputs, labels  (IDX files, gzipped if they end in .gz)
 *   npy:       inputs, labels  (float32 or uint8 inputs, integer labels, C order)
 *   csv:       path, label_column (0-based; other columns are features)
 *   synthetic: samples, features, classes, seed (classes 0 = regression)
 *   text:      path (the file's bytes are the tokens), range
 *   tokens:    path (one llm.c shard, or a glob(3) pattern of shards, read in
 *              strcmp order), range
 * path_literal: the bytes at the start of path that ddpc joined on (the
 * spec's directory, absolute, and '/'): a directory name, never pattern
 * characters, whatever it holds (a checkout at run[1]/); 0 for a path
 * written absolute, whose every byte is the user's. Only text and tokens
 * read it (tokens_list).
 * range_lo, range_hi: the part of the token stream used, as fractions of
 * its length n: tokens [floor(lo * n), floor(hi * n)), so [0, 0.9] and
 * [0.9, 1] of one stream never share a token. */
struct ddpc_data_source {
    enum ddpc_data_format format;
    const char *inputs;         /* idx, npy: path of the input array */
    const char *labels;         /* idx, npy: path of the label array */
    const char *path;           /* csv, text, tokens (tokens: may be a glob pattern) */
    int32_t     path_literal;   /* text, tokens: bytes of path that are no pattern */
    int32_t     label_column;   /* csv */
    int64_t     samples;        /* synthetic */
    int32_t     features;       /* synthetic */
    int32_t     classes;        /* synthetic; 0 means regression targets */
    uint64_t    seed;           /* synthetic */
    double      range_lo;       /* text, tokens: 0 <= range_lo < range_hi <= 1 */
    double      range_hi;
};

struct ddpc_job {
    /* ---- top level (Lightning-style TrainingParams names) ---- */
    int32_t     version;
    const char *name;                   /* [A-Za-z0-9._-]{1,64}: becomes file names */
    int32_t     n_devices;              /* resolved count; 0 with devices_all = "all"/-1 */
    int32_t     devices_all;            /* 1: every device the machine has */
    int32_t     devices[DDPC_MAX_DEVICES]; /* device indices, n_devices of them */
    enum ddpc_strategy    strategy;
    enum ddpc_accelerator accelerator;
    uint64_t    seed;
    int32_t     deterministic;          /* bool */
    int32_t     epochs;
    double      learning_rate;          /* single-device rate, before lr_scaling */
    enum ddpc_lr_scaling  lr_scaling;
    int32_t     batch_size;             /* per device */
    int32_t     grad_accumulation;      /* micro-steps per optimizer step, >= 1 */
    int64_t     limit_train_batches;    /* > 0: batches per epoch; 0: use fraction */
    double      limit_train_fraction;   /* (0, 1]; 1.0 = whole epoch */
    enum ddpc_precision   precision;
    enum ddpc_matmul_precision matmul_precision;   /* fp32 GEMMs on GPUs: exact or TF32 */
    double      grad_clip_norm;         /* 0 = off */
    double      bucket_cap_mb;          /* gradient bucket size, like PyTorch DDP (25) */
    const char *checkpoint_dir;         /* NULL or "" = no checkpoints */
    double      nccl_timeout_s;         /* 0 = unset: no deadline */
    double      rank_sync_timeout_s;    /* 0 = unset: no per-step barrier */
    enum ddpc_other_run_outputs other_run_outputs;  /* another run's output at a path */

    /* ---- model ---- */
    struct {
        enum ddpc_model_type type;
        int32_t n_layers;               /* number of sizes in layers[] */
        int32_t layers[DDPC_MAX_LAYERS];/* [in, hidden..., out] */
        enum ddpc_activation activation;/* hidden layers; the output layer is identity */
        enum ddpc_init init;
        int32_t n_input;                /* sequential: dims of model.input; 0 = from the data */
        int32_t input[DDPC_MAX_DIMS];
        int32_t n_items;                /* sequential: items of model.layers */
        struct ddpc_layer_item items[DDPC_MAX_ITEMS];
        const char *init_from;          /* safetensors file to start from; NULL = init */
        /* gpt (nanoGPT's GPTConfig) */
        int32_t vocab_size, block_size, n_layer, n_head, n_embd;
        double  dropout;
        int32_t bias;                   /* bool: biases in linears and layer norms */
    } model;
    int32_t sync_batchnorm;             /* bool; true is refused (not implemented) */

    enum ddpc_loss loss;

    /* ---- data ---- */
    struct {
        struct ddpc_data_source train;
        struct ddpc_data_source test;   /* format idx etc.; has_test 0 = no evaluation */
        int32_t has_test;
        int32_t shuffle;                /* bool, default 1 */
        int32_t drop_last;              /* bool, default 0 */
        int32_t test_every_n_epochs;    /* evaluate every N epochs and after the last */
    } data;

    /* ---- optimizer ---- */
    struct {
        enum ddpc_optimizer_type type;
        double momentum;                /* sgd */
        int32_t nesterov;               /* sgd */
        double weight_decay;            /* L2 for sgd/adam, decoupled for adamw */
        enum ddpc_weight_decay_on weight_decay_on;  /* all tensors, or 2+-D ones only */
        double beta1, beta2, eps;       /* adam, adamw */
    } optimizer;

    /* ---- schedule ---- */
    struct {
        int64_t warmup_steps;
        double  warmup_start_factor;    /* lr factor at step 0 of warmup, (0, 1] */
        enum ddpc_decay decay;
        double  min_lr_factor;          /* cosine: floor as a fraction of the peak */
        int64_t step_size;              /* step: decay every step_size optimizer steps */
        double  gamma;                  /* step: factor per decay */
    } schedule;

    /* ---- checkpoint ---- */
    struct {
        int32_t every_n_epochs;         /* 0 = only at the end */
        int64_t every_n_steps;          /* 0 = off; mid-epoch, sampler position saved */
        double  every_n_minutes;        /* 0 = off; rank 0's clock, decided at step ends */
        int32_t keep_last;              /* 0 = keep all */
        enum ddpc_resume resume;
        const char *resume_path;        /* resume == DDPC_RESUME_PATH */
        const char *export_path;        /* safetensors file, NULL = none */
    } checkpoint;

    /* ---- logging ---- */
    struct {
        int32_t every_n_steps;
        const char *metrics_csv;        /* NULL = none */
        const char *tensorboard;        /* event dir, NULL = none */
        enum ddpc_progress progress;
    } logging;

    /* ---- launch ---- */
    struct {
        int32_t num_nodes;
        enum ddpc_launcher launcher;
        const char *master_addr;
        int32_t master_port;
        int32_t max_restarts;
        double time_limit_s;            /* sbatch --time; 0 = the partition's default */
        const char *partition;          /* sbatch --partition; NULL = default */
        const char *account;            /* sbatch --account; NULL = default */
    } launch;
};

/* The world size, the one rule: devices per node (`devices_here`, what the
 * caller counted, for devices: all; the listed devices otherwise) times
 * launch.num_nodes. `ddpc check` and the plan call it with devices_here 0
 * (unknown until the job runs). */
static inline int64_t ddpc_job_world_size(const struct ddpc_job *job, int devices_here)
{
    int64_t per_node = job->devices_all ? devices_here : job->n_devices;
    return per_node * (job->launch.num_nodes > 0 ? job->launch.num_nodes : 1);
}

/* The factor lr_scaling `how` multiplies learning_rate by in a world of
 * `world` ranks: world × grad_accumulation (linear), its square root (sqrt),
 * 1 (none). The one rule: the plan, the optimizer and `ddpc check`'s
 * "linear would use" warning all call it. */
static inline double ddpc_job_lr_factor(const struct ddpc_job *job, enum ddpc_lr_scaling how,
                                        int world)
{
    double k = (double)world * (job->grad_accumulation > 0 ? job->grad_accumulation : 1);
    switch (how) {
    case DDPC_LR_SCALING_LINEAR: return k;
    case DDPC_LR_SCALING_SQRT:   return sqrt(k);
    default:                     return 1.0;
    }
}

#endif /* DDPC_JOB_H */
