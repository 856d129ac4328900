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

#include <stdint.h>

#define DDPC_JOB_VERSION   1    /* spec language version this build understands */
#define DDPC_MAX_DEVICES   64
#define DDPC_MAX_LAYERS    16   /* sizes, input and output included: 784-256-10 is 3 */

enum ddpc_accelerator { DDPC_ACCEL_AUTO, DDPC_ACCEL_CPU, DDPC_ACCEL_GPU };
enum ddpc_strategy    { DDPC_STRATEGY_DDP, DDPC_STRATEGY_NONE };
enum ddpc_lr_scaling  { DDPC_LR_SCALING_NONE, DDPC_LR_SCALING_LINEAR, DDPC_LR_SCALING_SQRT };
enum ddpc_precision   { DDPC_PRECISION_FP32, DDPC_PRECISION_BF16, DDPC_PRECISION_FP16 };

enum ddpc_model_type  { DDPC_MODEL_MLP, DDPC_MODEL_LINEAR };
enum ddpc_activation  { DDPC_ACT_RELU, DDPC_ACT_GELU, DDPC_ACT_TANH, DDPC_ACT_SIGMOID,
                        DDPC_ACT_IDENTITY /* output layer; not a spec value */ };
/* pytorch: nn.Linear's default, U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for W and b */
enum ddpc_init        { DDPC_INIT_PYTORCH, DDPC_INIT_XAVIER_UNIFORM, DDPC_INIT_KAIMING_NORMAL };
enum ddpc_loss        { DDPC_LOSS_CROSS_ENTROPY, DDPC_LOSS_MSE };

enum ddpc_data_format { DDPC_DATA_IDX, DDPC_DATA_NPY, DDPC_DATA_CSV, DDPC_DATA_SYNTHETIC };
enum ddpc_optimizer_type { DDPC_OPTIM_ADAM, DDPC_OPTIM_ADAMW, DDPC_OPTIM_SGD };
enum ddpc_decay       { DDPC_DECAY_CONSTANT, DDPC_DECAY_COSINE, DDPC_DECAY_STEP };
enum ddpc_resume      { DDPC_RESUME_AUTO, DDPC_RESUME_NEVER, DDPC_RESUME_PATH };
enum ddpc_progress    { DDPC_PROGRESS_AUTO, DDPC_PROGRESS_ON, DDPC_PROGRESS_OFF };
enum ddpc_launcher    { DDPC_LAUNCHER_LOCAL, DDPC_LAUNCHER_SLURM };

/* One data source (data.train or data.test). Which fields matter depends on
 * format:
 *   idx:       inputs, labels  (IDX files, gzipped if they end in .gz)
 *   npy:       inputs, labels  (float32 or uint8 inputs, integer labels, C order)
 *   csv:       path, label_column (0-based; other columns are features)
 *   synthetic: samples, features, classes, seed (classes 0 = regression) */
struct ddpc_data_source {
    enum ddpc_data_format format;
    const char *inputs;         /* idx, npy: path of the input array */
    const char *labels;         /* idx, npy: path of the label array */
    const char *path;           /* csv */
    int32_t     label_column;   /* csv */
    int64_t     samples;        /* synthetic */
    int32_t     features;       /* synthetic */
    int32_t     classes;        /* synthetic; 0 means regression targets */
    uint64_t    seed;           /* synthetic */
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
    double      grad_clip_norm;         /* 0 = off */
    double      bucket_cap_mb;          /* gradient bucket size, like PyTorch DDP (25) */
    const char *checkpoint_dir;         /* NULL or "" = no checkpoints */
    double      nccl_timeout_s;         /* 0 = unset: no deadline */
    double      rank_sync_timeout_s;    /* 0 = unset: no per-step barrier */

    /* ---- model ---- */
    struct {
        enum ddpc_model_type type;
        int32_t n_layers;               /* number of sizes in layers[] */
        int32_t layers[DDPC_MAX_LAYERS];/* [in, hidden..., out] */
        enum ddpc_activation activation;/* hidden layers; the output layer is identity */
        enum ddpc_init init;
    } model;

    enum ddpc_loss loss;

    /* ---- data ---- */
    struct {
        struct ddpc_data_source train;
        struct ddpc_data_source test;   /* format idx etc.; has_test 0 = no evaluation */
        int32_t has_test;
        int32_t shuffle;                /* bool, default 1 */
        int32_t drop_last;              /* bool, default 0 */
    } data;

    /* ---- optimizer ---- */
    struct {
        enum ddpc_optimizer_type type;
        double momentum;                /* sgd */
        int32_t nesterov;               /* sgd */
        double weight_decay;            /* L2 for sgd/adam, decoupled for adamw */
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
    } launch;
};

#endif /* DDPC_JOB_H */
