/* ddprt.c - ddprt_main: what ./job does between argv and the exit status.
 *
 * Owns: run-time flags (--help --version --dry-run --resume --node-rank
 * --master --sample --prompt --temperature --eval --predict -o --checkpoint
 * --model --data --labels --report), the backend and device choice
 * (cpu / gpu / auto), the dry-run report of the baked job, the rendezvous (node 0 hosts the job's store,
 * store.h, for gloo and NCCL alike: at master_addr:master_port, or on an
 * ephemeral loopback port for a one-node GPU job), the node rank and the
 * Slurm checks, the gloo plugin, loading the datasets once before fork,
 * the max_restarts loop, and the worker body that launch.c runs in each
 * forked process (ops + communicators + worker_run).
 * Never parses YAML, never trains (worker.c does), never forks workers or
 * signals them (launch.c does), never calls exit(): the status goes back to
 * main.
 *
 * The CUDA backend of a built job is a plugin (program->cuda_plugin, the
 * path of libddprt_cuda.so): with accelerator auto the launcher asks a
 * forked child to probe (the child exits, so the launcher never maps
 * cuBLAS, NCCL or cudart): without the driver library (libcuda.so.1) the
 * answer is 0 GPUs at once; with it, the child dlopen()s the plugin and
 * runs its probe. The launcher dlopen()s the plugin itself only when that
 * found a GPU; with accelerator gpu it dlopen()s it at once. dlopen does
 * not initialise CUDA: workers do, after fork (ops_init). Only "no device"
 * and "no driver" send auto to CPU workers; any other probe answer (a
 * driver too old, a busy GPU, a broken install, a probe that hangs) stops
 * the job with its cause (devprobe.h).
 *
 * checkpoint_dir and the export, from the launcher's side: checked before
 * any worker starts (creatable, writable, room for the checkpoints the run
 * will hold at once), and before and after every attempt the temp files of
 * workers that died mid-write (SIGINT, SIGKILL after the grace period, an
 * earlier kill -9) are removed, so an interrupted job leaves no partial file.
 *
 * TEST HOOKS (tests/test_faults.c, tests/test_cuda.c; never set them in
 * production):
 *   DDPC_TEST_CKPT_STOP_AFTER_BYTES=N   rank 0 stops itself with SIGSTOP
 *   after writing N bytes of its first checkpoint temp file (ckpt_set_fault),
 *   so a test can kill the job in the middle of a checkpoint write.
 *   DDPC_TEST_CUDA_PROBE_ERROR=N   the CUDA probe answers cudaError_t N
 *   without asking the driver (devprobe_test_error).
 *   DDPC_TEST_CKPT_SLOW_S=S   every checkpoint write sleeps S seconds before
 *   its rename (ckpt_set_slow): a slow file system, for rank_sync_timeout.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include "child_msg.h"
#include "ckpt.h"
#include "layers.h"
#include "comm_shm.h"
#include "data.h"
#include "ddprt.h"
#include "devprobe.h"
#include "env.h"
#include "ident.h"
#include "outver.h"
#include "evaluate.h"
#include "keytab.h"
#include "launch.h"
#include "predict.h"
#include "report.h"
#include "same_file.h"
#include "std_fds.h"
#include "sample.h"
#include "slurm.h"
#include "store.h"
#include "units.h"
#include "worker.h"

#define DDPRT_EXIT_USAGE   2
#define DDPRT_EXIT_FAIL    1
#define DDPRT_DEFAULT_PORT 29500
/* Collective pieces: 4 MiB per rank for gradients (a bucket of 25 MB goes
 * through in a few pieces); the rank-sync communicator only runs barriers. */
#define DDPRT_GRAD_SLOT    ((size_t)1 << 20)
#define DDPRT_SYNC_SLOT    ((size_t)64)

/* Everything the launcher decided, for the workers and for --dry-run. */
struct ddprt_run {
    const struct ddprt_program *p;
    const struct ddpc_backend *cuda;   /* p->cuda, or the loaded plugin's; NULL: none */
    struct ddpc_job job;               /* the baked job with run-time overrides */
    int   use_cuda;
    const struct ddpc_gloo_backend *gloo;  /* CPU workers on several nodes; else NULL */
    int   attempt;                     /* 0, 1, ...: keys of this attempt in the store */
    int  *store_met;                   /* shared with the workers: 1 once a rank of this
                                        * node finished a rendezvous at node 0's store */
    int   world;                       /* global */
    int   local_world;
    int   node_rank, num_nodes;
    int   devices[DDPC_MAX_DEVICES];   /* local rank -> device index / cpu worker */
    char  master_addr[128];
    int   master_port;
    char  accel_note[700];             /* how the accelerator was chosen */
    struct ddpc_device_info info;      /* probe result, when probed */
    struct ddpc_dataset train, test;
    int   has_test;
    double t_launch;
    struct ddpc_sample_opts sample;    /* --sample; n 0: none */
    int   evaluating;                  /* --eval or --predict: no training (evaluate.h) */
    struct ddpc_eval_opts eval;
};

/* ===== flags ===== */

struct ddprt_flags {
    int dry_run, help, version;
    const char *resume;
    int node_rank;                     /* -1: not given */
    const char *master;                /* HOST:PORT */
    int64_t sample;                    /* --sample N; 0: none */
    const char *prompt;                /* --prompt TEXT */
    double temperature;                /* --temperature T; default 1 */
    int have_temperature;
    /* the model without training (evaluate.h) */
    int eval;                          /* --eval */
    const char *predict;               /* --predict INPUT */
    const char *output;                /* -o / --output OUT */
    const char *checkpoint;            /* --checkpoint last|best|FILE */
    const char *model;                 /* --model FILE.safetensors */
    const char *data;                  /* --data PATH (--eval) */
    const char *labels;                /* --labels PATH (--eval --data, idx and npy) */
    int report;                        /* --report */
};

static void ddprt_usage(FILE *f, const char *argv0, const struct ddprt_program *p)
{
    fprintf(f,
            "usage: %s [--dry-run] [--resume PATH] [--node-rank K] [--master HOST:PORT]\n"
            "       [--sample N [--prompt TEXT] [--temperature T]]\n"
            "       %s --eval [--checkpoint last|FILE | --model FILE]\n"
            "              [--data PATH [--labels PATH]]\n"
            "       %s --predict INPUT -o OUT.npy|OUT.csv\n"
            "              [--checkpoint last|FILE | --model FILE]\n"
            "       %s --report\n"
            "\n"
            "Trains the job `%s` built by ddpc from %s: one worker process per device,\n"
            "gradients all-reduced every step.\n"
            "\n"
            "  --dry-run          print the baked configuration and the launch plan; train nothing\n"
            "  --resume PATH      start from this checkpoint (overrides checkpoint.resume)\n"
            "  --node-rank K      this node's index in a multi-node job (default: $SLURM_NODEID,\n"
            "                     else $SLURM_PROCID, else 0)\n"
            "  --master HOST:PORT the rendezvous, hosted by node 0 (default: launch.master_addr\n"
            "                     and master_port from the spec; IPv6 as [ADDR]:PORT; one-node\n"
            "                     GPU jobs pick a free local port)\n",
            argv0, argv0, argv0, argv0, p->job->name ? p->job->name : "?",
            p->spec_path ? p->spec_path : "?");
    fputs(
            "  --sample N         after training (or when a resumed job has nothing left to\n"
            "                     train), generate N tokens from the final model: rank 0, the\n"
            "                     job's seed; raw bytes when vocab_size <= 256, else token ids\n"
            "                     (model.type gpt)\n"
            "  --prompt TEXT      the text the sample continues (vocab_size <= 256: its bytes\n"
            "                     are the tokens; default: a newline)\n"
            "  --temperature T    divide the logits by T >= 0 before sampling; 0 takes the most\n"
            "                     likely token (default 1)\n"
            "  --eval             score the model on the test set (data.test) on the job's\n"
            "                     workers, train nothing, write nothing: the numbers the end of\n"
            "                     training prints for the same weights\n"
            "  --checkpoint W     the weights --eval and --predict use: last (the newest\n"
            "                     checkpoint of this configuration in checkpoint_dir; the\n"
            "                     default), or a checkpoint file (./best, ./last for files of\n"
            "                     those names); without checkpoint_dir, the default is the export\n"
            "  --model FILE       a safetensors export (checkpoint.export's, or PyTorch's with\n"
            "                     the same tensor names) instead of a checkpoint\n"
            "  --data PATH        --eval on this file, in data.test's format (data.train's\n"
            "                     without a test set); --labels PATH for idx and npy\n"
            "  --predict INPUT    run the model over INPUT (NPY, IDX, CSV; a gpt: text or an\n"
            "                     llm.c shard), streamed, on every worker, into -o OUT: .npy or\n"
            "                     .csv, one row per sample in input order: class and\n"
            "                     probabilities (cross_entropy), the outputs (mse), or for a\n"
            "                     gpt per token: token, next (most likely next token), prob,\n"
            "                     logprob of the actual next token (context: its block_size\n"
            "                     window, as data.test's); OUT appears whole or not at all\n"
            "  --report           write the run report (HTML beside metrics_csv: curves,\n"
            "                     learning rate, throughput, the plan) from the metrics so far\n"
            "  --version          print the ddpc version and the spec's hash\n"
            "  --help             this text\n"
            "\n"
            "Checkpoints (checkpoint_dir): the newest valid one is resumed from unless\n"
            "checkpoint.resume says otherwise; a corrupt one is reported and skipped.\n"
            "Outputs (checkpoint.export, metrics_csv, tensorboard) carry the run's identity:\n"
            "a path holding another configuration's is left alone and the run writes the\n"
            "next version beside it (model-v1.safetensors, metrics-v1.csv, <dir>/version_1)\n"
            "and says so; other_run_outputs: refuse stops instead. At the end of a run with\n"
            "metrics_csv, the report (metrics.html beside metrics.csv) is written too.\n"
            "\n"
            "Exit status: 0 trained (or evaluated, predicted, reported); 1 a worker failed\n"
            "(the message names its rank, device and cause) or a check before training\n"
            "failed; 2 bad arguments; 130 / 143 / 129 / 138 / 140 stopped by SIGINT /\n"
            "SIGTERM / SIGHUP / SIGUSR1 / SIGUSR2 (every worker is stopped, no partial\n"
            "file is left; no checkpoint is written for the signal); 141, without a\n"
            "message, when standard output is a pipe whose reader ended (./job | head),\n"
            "likewise.\n", f);
}

/* Command-line and environment numbers (units.h: decimal only, no
 * blanks, 0x10 or "inf" refused) in [lo, hi] into *out: 0, or -1. */
static int ddprt_parse_int(const char *s, int lo, int hi, int *out)
{
    int64_t v;
    if (units_flag_int(s, lo, hi, &v) < 0)
        return -1;
    *out = (int)v;
    return 0;
}

/* The --sample flags against the baked model. Returns 0, or an exit
 * status after printing the problem. */
static int ddprt_check_sample(const struct ddprt_flags *f, const struct ddpc_job *j,
                              const char *argv0)
{
    if (!f->sample) {
        if (f->prompt || f->have_temperature) {
            fprintf(stderr, "%s: %s applies only with --sample N (see --help)\n", argv0,
                    f->prompt ? "--prompt" : "--temperature");
            return DDPRT_EXIT_USAGE;
        }
        return 0;
    }
    if (j->model.type != DDPC_MODEL_GPT) {
        fprintf(stderr, "%s: --sample generates text from a language model; this job's "
                "model.type is not gpt\n", argv0);
        return DDPRT_EXIT_USAGE;
    }
    /* before training, not after it: a bad prompt must not cost the run */
    struct ddpc_err e = { 0 };
    if (sample_prompt_check(f->prompt, (int)j->model.vocab_size, &e) < 0) {
        fprintf(stderr, "%s: %s\n", argv0, e.msg);
        return DDPRT_EXIT_USAGE;
    }
    return 0;
}

/* --eval, --predict and --report against the other flags and the baked
 * job. Returns 0, or an exit status after printing the problem. */
static int ddprt_check_eval(const struct ddprt_flags *f, const struct ddpc_job *j,
                            const char *argv0)
{
    const char *bad = NULL, *why = NULL;
    int modes = f->eval + (f->predict != NULL) + f->report;
    if (modes > 1)
        bad = "--eval, --predict and --report", why = "are separate runs: give one";
    else if (f->output && !f->predict)
        bad = "-o", why = "names --predict's output: it applies only with --predict INPUT";
    else if (f->predict && !f->output)
        bad = "--predict", why = "needs -o OUT.npy or -o OUT.csv, where the predictions go";
    else if ((f->checkpoint || f->model) && !f->eval && !f->predict)
        bad = f->checkpoint ? "--checkpoint" : "--model",
        why = "names the weights of --eval or --predict (training resumes with --resume)";
    else if ((f->data || f->labels) && !f->eval)
        bad = f->data ? "--data" : "--labels",
        why = f->predict ? "applies to --eval; --predict takes its input as --predict INPUT"
                         : "applies only with --eval";
    else if (f->labels && !f->data)
        bad = "--labels", why = "goes with --data PATH (the inputs it labels)";
    else if (modes && (f->resume || f->sample || f->prompt || f->have_temperature || f->dry_run))
        bad = f->eval ? "--eval" : f->predict ? "--predict" : "--report",
        why = "trains nothing: --resume, --sample, --prompt, --temperature and --dry-run do "
              "not apply";
    if (bad) {
        fprintf(stderr, "%s: %s %s (see --help)\n", argv0, bad, why);
        return DDPRT_EXIT_USAGE;
    }
    if (!f->eval && !f->predict)
        return 0;
    struct ddpc_model_source src;
    char msg[600];
    if (evaluate_source_parse(f->checkpoint, f->model, &src, msg, sizeof msg) < 0) {
        fprintf(stderr, "%s: %s\n", argv0, msg);
        return DDPRT_EXIT_USAGE;
    }
    if (f->eval && !f->data && !j->data.has_test) {
        fprintf(stderr, "%s: --eval: the job has no test set (data.test); name the data to "
                "evaluate on: --data PATH (in data.train's format)\n", argv0);
        return DDPRT_EXIT_USAGE;
    }
    if (f->data) {
        const struct ddpc_data_source *base = j->data.has_test ? &j->data.test : &j->data.train;
        int pair = base->format == DDPC_DATA_IDX || base->format == DDPC_DATA_NPY;
        const char *fmt = base->format == DDPC_DATA_IDX ? "idx" : base->format == DDPC_DATA_NPY
                        ? "npy" : base->format == DDPC_DATA_CSV ? "csv"
                        : base->format == DDPC_DATA_TEXT ? "text"
                        : base->format == DDPC_DATA_TOKENS ? "tokens" : "synthetic";
        if (base->format == DDPC_DATA_SYNTHETIC) {
            fprintf(stderr, "%s: --data: the job's data is synthetic: there is no file format "
                    "to read another file in\n", argv0);
            return DDPRT_EXIT_USAGE;
        }
        if (pair && !f->labels) {
            fprintf(stderr, "%s: --data %s: the job's data is %s, inputs and labels in two "
                    "files: give the labels too (--labels PATH)\n", argv0, f->data, fmt);
            return DDPRT_EXIT_USAGE;
        }
        if (!pair && f->labels) {
            fprintf(stderr, "%s: --labels: the job's data is %s, whose labels are in the file "
                    "itself (--data alone)\n", argv0, fmt);
            return DDPRT_EXIT_USAGE;
        }
    }
    return 0;
}

/* The run's --eval / --predict options, and --eval's data source in place
 * of data.test (data.train's format without a test set; a text or token
 * file whole). */
static void ddprt_eval_setup(struct ddprt_run *r, const struct ddprt_flags *f)
{
    struct ddpc_job *j = &r->job;
    r->evaluating = 1;
    r->eval.predict = f->predict != NULL;
    (void)evaluate_source_parse(f->checkpoint, f->model, &r->eval.src, NULL, 0);
    r->eval.input = f->predict;
    r->eval.output = f->output;
    r->eval.data_desc = "data.test";
    /* a failure would fail the same way again */
    j->launch.max_restarts = 0;
    if (!f->data)
        return;
    struct ddpc_data_source src = j->data.has_test ? j->data.test : j->data.train;
    if (src.format == DDPC_DATA_IDX || src.format == DDPC_DATA_NPY) {
        src.inputs = f->data;
        src.labels = f->labels;
    } else {
        src.path = f->data;
        src.path_literal = (int32_t)strlen(f->data);   /* a file name, not a pattern */
        src.range_lo = 0;
        src.range_hi = 1;
    }
    j->data.test = src;
    j->data.has_test = 1;
    r->eval.data_desc = f->data;
}

static int ddprt_parse_flags(int argc, char **argv, struct ddprt_flags *f)
{
    memset(f, 0, sizeof *f);
    f->node_rank = -1;
    f->temperature = 1.0;
    const char *argv0 = argc > 0 ? argv[0] : "job";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = NULL;
        const char *eq = strchr(a, '=');
        size_t klen = eq ? (size_t)(eq - a) : strlen(a);
        /* --flag VALUE and --flag=VALUE both work, as in getopt_long */
#define FLAG_IS(name) (klen == strlen(name) && strncmp(a, name, klen) == 0)
#define TAKE_VALUE() do {                                                        \
            if (eq) val = eq + 1;                                                \
            else if (i + 1 < argc) val = argv[++i];                              \
            else { fprintf(stderr, "%s: %.*s needs a value (see --help)\n",      \
                           argv0, (int)klen, a); return DDPRT_EXIT_USAGE; }      \
        } while (0)
        /* --dry-run=no must not dry-run: a flag without a value takes none */
        if (eq && (FLAG_IS("--help") || FLAG_IS("-h") || FLAG_IS("--version") ||
                   FLAG_IS("--dry-run") || FLAG_IS("--eval") || FLAG_IS("--report"))) {
            fprintf(stderr, "%s: %.*s takes no value (got '%s'; see --help)\n", argv0,
                    (int)klen, a, eq + 1);
            return DDPRT_EXIT_USAGE;
        }
        if (FLAG_IS("--help") || FLAG_IS("-h")) {
            f->help = 1;
        } else if (FLAG_IS("--version")) {
            f->version = 1;
        } else if (FLAG_IS("--dry-run")) {
            f->dry_run = 1;
        } else if (FLAG_IS("--resume")) {
            TAKE_VALUE();
            if (!*val) {
                fprintf(stderr, "%s: --resume needs a checkpoint path\n", argv0);
                return DDPRT_EXIT_USAGE;
            }
            f->resume = val;
        } else if (FLAG_IS("--node-rank")) {
            TAKE_VALUE();
            if (ddprt_parse_int(val, 0, 65535, &f->node_rank) < 0) {
                fprintf(stderr, "%s: --node-rank '%s': expected an integer >= 0\n", argv0, val);
                return DDPRT_EXIT_USAGE;
            }
        } else if (FLAG_IS("--master")) {
            TAKE_VALUE();
            f->master = val;
        } else if (FLAG_IS("--sample")) {
            TAKE_VALUE();
            if (units_flag_int(val, 1, 1000000000, &f->sample) < 0) {
                fprintf(stderr, "%s: --sample '%s': expected a number of tokens, 1 to "
                        "1000000000\n", argv0, val);
                return DDPRT_EXIT_USAGE;
            }
        } else if (FLAG_IS("--prompt")) {
            TAKE_VALUE();
            f->prompt = val;
        } else if (FLAG_IS("--temperature")) {
            TAKE_VALUE();
            if (units_flag_double(val, 0, HUGE_VAL, &f->temperature) < 0) {
                fprintf(stderr, "%s: --temperature '%s': expected a number >= 0 (0: the most "
                        "likely token every time)\n", argv0, val);
                return DDPRT_EXIT_USAGE;
            }
            f->have_temperature = 1;
        } else if (FLAG_IS("--eval")) {
            f->eval = 1;
        } else if (FLAG_IS("--report")) {
            f->report = 1;
        } else if (FLAG_IS("--predict") || FLAG_IS("-o") || FLAG_IS("--output") ||
                   FLAG_IS("--checkpoint") || FLAG_IS("--model") || FLAG_IS("--data") ||
                   FLAG_IS("--labels")) {
            const char **slot = FLAG_IS("--predict") ? &f->predict
                              : FLAG_IS("--checkpoint") ? &f->checkpoint
                              : FLAG_IS("--model") ? &f->model : FLAG_IS("--data") ? &f->data
                              : FLAG_IS("--labels") ? &f->labels : &f->output;
            TAKE_VALUE();
            if (!*val) {
                fprintf(stderr, "%s: %.*s needs a path\n", argv0, (int)klen, a);
                return DDPRT_EXIT_USAGE;
            }
            *slot = val;
        } else {
            fprintf(stderr, "%s: unknown argument '%s' (see --help)\n", argv0, a);
            return DDPRT_EXIT_USAGE;
        }
#undef FLAG_IS
#undef TAKE_VALUE
    }
    return 0;
}

/* "host:port" -> addr, port. [v6]:port is accepted too. */
static int ddprt_split_master(const char *s, char *addr, size_t len, int *port)
{
    const char *colon = strrchr(s, ':');
    if (!colon || colon == s)
        return -1;
    const char *h = s, *he = colon;
    if (*h == '[' || he[-1] == ']') {   /* [v6]:port, brackets matched */
        if (*h != '[' || he[-1] != ']' || he <= h + 2)
            return -1;
        h++;
        he--;
    }
    if (memchr(h, '[', (size_t)(he - h)) || memchr(h, ']', (size_t)(he - h)) ||
        (size_t)(he - h) >= len)
        return -1;
    memcpy(addr, h, (size_t)(he - h));
    addr[he - h] = '\0';
    return ddprt_parse_int(colon + 1, 1, 65535, port);
}

/* ===== the launch plan: backend and devices ===== */

static int ddprt_cpu_plan(struct ddprt_run *r, struct ddpc_err *e)
{
    const struct ddpc_job *j = &r->job;
    int n = j->n_devices;
    if (j->devices_all) {
        /* the CPUs this process may run on (taskset, a cgroup cpuset, SLURM's
         * binding), not every CPU of the machine: more workers than that
         * would only take turns */
        cpu_set_t set;
        long ncpu = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set)
                                                                : sysconf(_SC_NPROCESSORS_ONLN);
        n = ncpu > 0 ? (int)ncpu : 1;
        if (n > DDPC_MAX_DEVICES)
            n = DDPC_MAX_DEVICES;
    }
    if (j->strategy == DDPC_STRATEGY_NONE)
        n = 1;
    if (n < 1)
        return DDPC_FAIL(e, DDPC_E_INVALID, "devices: no device listed");
    if (r->num_nodes > 1 && !r->p->gloo && !r->p->gloo_plugin)
        return DDPC_FAIL(e, DDPC_E_INVALID,
                         "launch.num_nodes is %d and the job runs as CPU workers, but it was "
                         "built without the multi-node CPU communicator (libddprt_gloo.so: "
                         "install libgloo-dev, rebuild ddpc and the job), or set num_nodes: 1",
                         r->num_nodes);
    r->use_cuda = 0;
    r->local_world = n;
    for (int i = 0; i < n; i++)
        r->devices[i] = i;   /* CPU workers are numbered, not bound */
    return 0;
}

static int ddprt_gpu_plan(struct ddprt_run *r, struct ddpc_err *e)
{
    const struct ddpc_job *j = &r->job;
    int count = r->info.count;
    if (j->devices_all) {
        if (count < 1)
            return DDPC_FAIL(e, DDPC_E_DEVICE, "devices: all: no GPU visible%s%s",
                             r->info.note[0] ? ": " : "", r->info.note);
        r->local_world = count > DDPC_MAX_DEVICES ? DDPC_MAX_DEVICES : count;
        for (int i = 0; i < r->local_world; i++)
            r->devices[i] = i;
    } else {
        int n = j->strategy == DDPC_STRATEGY_NONE ? 1 : j->n_devices;
        int listed[DDPC_MAX_DEVICES];
        for (int i = 0; i < n; i++)
            listed[i] = j->devices[i];
        /* under Slurm (--gpus-per-node), the GPUs it gave are renumbered
         * 0..n-1 in this process: translate the spec's indices (slurm.h) */
        if (getenv("SLURM_JOB_ID") && (getenv("SLURM_JOB_GPUS") || getenv("SLURM_STEP_GPUS") ||
                                       getenv("SLURM_GPUS_ON_NODE"))) {
            char note[400];
            int mapped[DDPC_MAX_DEVICES];
            int m = slurm_gpu_map(listed, n, getenv("CUDA_VISIBLE_DEVICES"), count, mapped,
                                  note, sizeof note);
            if (m < 0)
                return DDPC_FAIL(e, DDPC_E_DEVICE, "devices: %s", note);
            if (m > 0) {
                fprintf(stderr, "%s\n", note);
                memcpy(listed, mapped, (size_t)n * sizeof *listed);
            }
        }
        for (int i = 0; i < n; i++) {
            int d = listed[i];
            if (d >= count) {
                if (count == 0)
                    return DDPC_FAIL(e, DDPC_E_DEVICE,
                                     "devices: GPU %d not found: no GPU is visible%s%s "
                                     "(check nvidia-smi and CUDA_VISIBLE_DEVICES, or set "
                                     "accelerator: cpu)", d, r->info.note[0] ? ": " : "",
                                     r->info.note);
                return DDPC_FAIL(e, DDPC_E_DEVICE,
                                 "devices: GPU %d not found: %d GPU%s visible (indices 0..%d); "
                                 "check CUDA_VISIBLE_DEVICES or list fewer devices", d, count,
                                 count == 1 ? " is" : "s are", count - 1);
            }
            r->devices[i] = d;
        }
        r->local_world = n;
    }
    r->use_cuda = 1;
    /* DDP steps at the pace of the slowest GPU, and memory-bound choices
     * (batch size) fit the smallest: different models in one job deserve a
     * warning, not an error. The probe's names carry model, sm and memory. */
    for (int i = 1; i < r->local_world; i++) {
        int d0 = r->devices[0], d = r->devices[i];
        if (d0 < 64 && d < 64 && strcmp(r->info.names[d0], r->info.names[d]) != 0) {
            fprintf(stderr, "ddpc: warning: different GPU models in one job: cuda:%d is %s, "
                    "cuda:%d is %s; every step waits for the slowest, and batch_size must "
                    "fit the smallest\n", d0, r->info.names[d0], d, r->info.names[d]);
            break;
        }
    }
    return 0;
}

/* ===== the CUDA plugin (see the file header) ===== */

#define DDPRT_PLUGIN_PROBE_TIMEOUT_MS 60000   /* the plugin's own probe gives up at 30 s */

/* dlopen()s the plugin into this process and sets r->cuda. Never unloaded:
 * the workers forked later run its code. */
static int ddprt_plugin_open(struct ddprt_run *r, struct ddpc_err *e)
{
    const char *path = r->p->cuda_plugin;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    const struct ddpc_backend *b = h ? dlsym(h, "ddpc_cuda_backend") : NULL;
    if (!b) {
        const char *why = dlerror();
        return DDPC_FAIL(e, DDPC_E_DEVICE, "CUDA backend %s could not be loaded: %s; rebuild "
                         "the job with --cpu-only or install CUDA", path,
                         why ? why : "ddpc_cuda_backend not found");
    }
    r->cuda = b;
    return 0;
}

/* What the probe child answers: fixed size, read until EOF. */
struct ddprt_probe_msg {
    int rc;                            /* 0, or -1 with msg */
    char msg[sizeof ((struct ddpc_err *)0)->msg];
    struct ddpc_device_info info;
};

/* Runs the plugin's probe in a forked child that dlopen()s it, so neither
 * the CUDA libraries nor their memory ever reach this process. A plugin
 * that cannot be loaded is an error (e) like a failed probe. */
static int ddprt_plugin_probe(const char *path, struct ddpc_device_info *info,
                              struct ddpc_err *e)
{
    memset(info, 0, sizeof *info);
    int fds[2];
    pid_t pid = child_msg_fork(fds);
    if (pid < 0)
        return DDPC_FAIL(e, DDPC_E_SYS, "fork for the CUDA probe: %s", strerror(errno));
    if (pid == 0) {
        static struct ddprt_probe_msg m;
        struct ddpc_err ce = { 0 };
        /* No driver library, no GPU: answered without loading the plugin,
         * whose CUDA libraries take ~0.1 s and ~100 MiB to map (the test
         * hook goes on to the plugin, whose probe answers for it) */
        void *drv = devprobe_test_error() > 0 ? (void *)path
                                              : dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
        const char *drv_err = drv ? NULL : dlerror();
        void *h = drv ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
        const struct ddpc_backend *b = h ? dlsym(h, "ddpc_cuda_backend") : NULL;
        if (!drv) {
            m.info.status = DDPC_PROBE_NO_DRIVER;
            (void)snprintf(m.info.note, sizeof m.info.note, "no CUDA driver: %s",
                           drv_err ? drv_err : "libcuda.so.1 not found");
        } else if (!b) {
            const char *why = dlerror();
            m.rc = -1;
            (void)snprintf(m.msg, sizeof m.msg, "CUDA backend %s could not be loaded: %s",
                           path, why ? why : "ddpc_cuda_backend not found");
        } else if (b->probe(&m.info, &ce) < 0) {
            m.rc = -1;
            (void)snprintf(m.msg, sizeof m.msg, "%s", ce.msg);
        }
        child_msg_send_and_exit(fds[1], &m, sizeof m);
    }
    static struct ddprt_probe_msg m;
    memset(&m, 0, sizeof m);
    struct child_msg_result r =
        child_msg_receive(fds[0], pid, &m, sizeof m, DDPRT_PLUGIN_PROBE_TIMEOUT_MS);
    size_t got = r.got;
    int timed_out = r.timed_out, read_err = r.read_err, status = r.status;
    if (timed_out)
        return DDPC_FAIL(e, DDPC_E_DEVICE, "the CUDA probe (%s) did not answer within %d s",
                         path, DDPRT_PLUGIN_PROBE_TIMEOUT_MS / 1000);
    if (read_err)
        return DDPC_FAIL(e, DDPC_E_SYS, "reading the CUDA probe: %s", strerror(read_err));
    if (got != sizeof m || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        if (WIFSIGNALED(status))
            return DDPC_FAIL(e, DDPC_E_DEVICE, "the CUDA probe (%s) died of signal %d (%s)",
                             path, WTERMSIG(status), strsignal(WTERMSIG(status)));
        return DDPC_FAIL(e, DDPC_E_DEVICE, "the CUDA probe (%s) answered %zu of %zu bytes "
                         "(exit status %d)", path, got, sizeof m,
                         WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    }
    if (m.rc < 0)
        return DDPC_FAIL(e, DDPC_E_DEVICE, "%s", m.msg);
    *info = m.info;
    for (int i = 0; i < 64; i++)   /* from another process: keep every string terminated */
        info->names[i][DDPC_DEVICE_NAME_MAX - 1] = '\0';
    info->note[sizeof info->note - 1] = '\0';
    if (info->count < 0)
        info->count = 0;
    return 0;
}

/* The probe answered (r->info): stop with its reason, or go on, *use_gpu
 * (if not NULL) saying whether GPU workers are planned (devprobe_decide:
 * only "no device" and "no driver" mean no GPU). */
static int ddprt_probe_verdict(struct ddprt_run *r, int accelerator, int *use_gpu,
                               struct ddpc_err *e)
{
    char msg[sizeof e->msg];
    enum ddpc_accel_choice c = devprobe_decide(accelerator, &r->info, msg, sizeof msg);
    if (c == DDPC_CHOOSE_FAIL)
        return DDPC_FAIL(e, DDPC_E_DEVICE, "%s", msg);
    if (use_gpu)
        *use_gpu = c == DDPC_CHOOSE_GPU;
    return 0;
}

/* The gloo plugin, for CPU workers on several nodes: dlopen()ed here, in
 * the launcher, so a missing or broken plugin stops the job before any
 * worker starts; never unloaded (the workers run its code). */
static int ddprt_gloo_open(struct ddprt_run *r, struct ddpc_err *e)
{
    if (r->p->gloo) {
        r->gloo = r->p->gloo;
        return 0;
    }
    const char *path = r->p->gloo_plugin;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    const struct ddpc_gloo_backend *b = h ? dlsym(h, "ddpc_gloo_backend") : NULL;
    if (!b) {
        const char *why = dlerror();
        return DDPC_FAIL(e, DDPC_E_INVALID, "the multi-node CPU communicator %s could not be "
                         "loaded: %s; install libgloo-dev and rebuild ddpc and the job",
                         path, why ? why : "ddpc_gloo_backend not found");
    }
    r->gloo = b;
    return 0;
}

/* Inside a SLURM allocation, the node count SLURM gave must be the one the
 * job was built for: more nodes would each start a ./job whose node rank
 * is out of range, fewer would leave the others waiting at the rendezvous
 * until its deadline. Says which variable holds what. */
static int ddprt_check_slurm_nodes(const struct ddprt_run *r, struct ddpc_err *e)
{
    static const char *const vars[] = { "SLURM_NNODES", "SLURM_JOB_NUM_NODES" };
    for (int k = 0; k < 2; k++) {
        const char *v = getenv(vars[k]);
        int n;
        if (!v || !*v || ddprt_parse_int(v, 1, 1 << 20, &n) < 0)
            continue;
        if (n == r->num_nodes)
            return 0;
        if (r->num_nodes == 1) {
            /* a one-node job run by hand inside a larger allocation */
            fprintf(stderr, "ddpc: warning: %s=%d but this job runs on one node "
                    "(launch.num_nodes 1)\n", vars[k], n);
            return 0;
        }
        /* launcher local writes no sbatch script: ask for the nodes */
        if (r->job.launch.launcher == DDPC_LAUNCHER_SLURM)
            return DDPC_FAIL(e, DDPC_E_INVALID,
                             "SLURM gave this job %d node%s (%s=%d) but it was built for "
                             "launch.num_nodes %d: submit the generated sbatch script "
                             "unchanged (it asks for --nodes=%d), or change num_nodes and "
                             "rebuild", n, n == 1 ? "" : "s", vars[k], n, r->num_nodes,
                             r->num_nodes);
        return DDPC_FAIL(e, DDPC_E_INVALID,
                         "SLURM gave this job %d node%s (%s=%d) but it was built for "
                         "launch.num_nodes %d: run it in an allocation of %d nodes, one task "
                         "each (salloc or srun --nodes=%d --ntasks-per-node=1), or change "
                         "num_nodes and rebuild (launch.launcher: slurm writes an sbatch "
                         "script that asks for them)", n, n == 1 ? "" : "s", vars[k], n,
                         r->num_nodes, r->num_nodes, r->num_nodes);
    }
    return 0;
}

static int ddprt_plan(struct ddprt_run *r, const struct ddprt_flags *f, struct ddpc_err *e)
{
    const struct ddprt_program *p = r->p;
    const struct ddpc_job *j = &r->job;

    r->num_nodes = j->launch.num_nodes > 0 ? j->launch.num_nodes : 1;
    r->node_rank = 0;
    if (f->node_rank >= 0) {
        r->node_rank = f->node_rank;
    } else if (r->num_nodes > 1) {
        /* one task per node (the generated sbatch): node id = task id */
        static const char *const vars[] = { "SLURM_NODEID", "SLURM_PROCID" };
        for (int k = 0; k < 2; k++) {
            const char *v = getenv(vars[k]);
            if (!v || !*v)
                continue;
            if (ddprt_parse_int(v, 0, 65535, &r->node_rank) < 0)
                return DDPC_FAIL(e, DDPC_E_INVALID, "%s '%s' is not a node index", vars[k], v);
            break;
        }
    }
    DDPC_TRY(ddprt_check_slurm_nodes(r, e));
    if (r->node_rank >= r->num_nodes)
        return DDPC_FAIL(e, DDPC_E_INVALID, "--node-rank %d: the job has %d node%s (0..%d)",
                         r->node_rank, r->num_nodes, r->num_nodes == 1 ? "" : "s",
                         r->num_nodes - 1);
    (void)snprintf(r->master_addr, sizeof r->master_addr, "%s",
                   j->launch.master_addr && *j->launch.master_addr ? j->launch.master_addr
                                                                   : "127.0.0.1");
    /* master_addr: [v6] is the v6 address (brackets only separate a port) */
    size_t ml = strlen(r->master_addr);
    if (ml > 2 && r->master_addr[0] == '[' && r->master_addr[ml - 1] == ']') {
        memmove(r->master_addr, r->master_addr + 1, ml - 2);
        r->master_addr[ml - 2] = '\0';
    }
    r->master_port = j->launch.master_port > 0 ? j->launch.master_port : DDPRT_DEFAULT_PORT;
    if (f->master && ddprt_split_master(f->master, r->master_addr, sizeof r->master_addr,
                                        &r->master_port) < 0)
        return DDPC_FAIL(e, DDPC_E_INVALID, "--master '%s': expected HOST:PORT, or "
                         "[ADDRESS]:PORT for IPv6", f->master);

    switch (j->accelerator) {
    case DDPC_ACCEL_CPU:
        (void)snprintf(r->accel_note, sizeof r->accel_note, "accelerator cpu");
        DDPC_TRY(ddprt_cpu_plan(r, e));
        break;
    case DDPC_ACCEL_GPU:
        if (!p->cuda && !p->cuda_plugin)
            return DDPC_FAIL(e, DDPC_E_DEVICE,
                             "accelerator gpu, but this job was built without CUDA (no nvcc "
                             "when `ddpc build` ran): rebuild where CUDA is installed, or set "
                             "accelerator: cpu or auto");
        r->cuda = p->cuda;
        if (!r->cuda)
            DDPC_TRY(ddprt_plugin_open(r, e));   /* a GPU will be used: load it here */
        DDPC_TRY(r->cuda->probe(&r->info, e));
        DDPC_TRY(ddprt_probe_verdict(r, DDPC_ACCEL_GPU, NULL, e));
        (void)snprintf(r->accel_note, sizeof r->accel_note, "accelerator gpu: %d GPU%s visible",
                       r->info.count, r->info.count == 1 ? "" : "s");
        DDPC_TRY(ddprt_gpu_plan(r, e));
        break;
    case DDPC_ACCEL_AUTO: {
        /* a linked backend probes here; a plugin probes in a child, and is
         * loaded only if that finds a GPU. A probe that cannot answer (hung,
         * killed, a plugin that will not load next to a driver) is not "no
         * GPU": it stops the job like any other probe failure. */
        const char *why = "built without CUDA";
        if (p->cuda || p->cuda_plugin) {
            struct ddpc_err pe = { 0 };
            int rc = p->cuda ? p->cuda->probe(&r->info, &pe)
                             : ddprt_plugin_probe(p->cuda_plugin, &r->info, &pe);
            if (rc < 0)
                return DDPC_FAIL(e, pe.code ? pe.code : DDPC_E_DEVICE,
                                 "accelerator auto: %s\n---> HINT: a GPU may be present but "
                                 "could not be probed; accelerator auto falls back to CPU "
                                 "workers only where there is no GPU: to run on CPU workers "
                                 "anyway, set accelerator: cpu", pe.msg);
            int gpu = 0;
            DDPC_TRY(ddprt_probe_verdict(r, DDPC_ACCEL_AUTO, &gpu, e));
            why = gpu ? NULL : r->info.note;
        }
        if (!why) {
            r->cuda = p->cuda;
            if (!r->cuda)
                DDPC_TRY(ddprt_plugin_open(r, e));
            (void)snprintf(r->accel_note, sizeof r->accel_note,
                           "accelerator auto: %d GPU%s found", r->info.count,
                           r->info.count == 1 ? "" : "s");
            DDPC_TRY(ddprt_gpu_plan(r, e));
        } else {
            /* the CPU backend computes in fp32: training it silently would
             * not be the run the spec asked for */
            if (j->precision != DDPC_PRECISION_FP32)
                return DDPC_FAIL(e, DDPC_E_INVALID,
                                 "precision: %s needs a GPU, and accelerator auto found none "
                                 "(%s); set precision: fp32 to train on this machine's CPUs, "
                                 "or run on a GPU machine (accelerator: gpu makes that "
                                 "explicit)", j->precision == DDPC_PRECISION_BF16 ? "bf16"
                                                                                : "fp16",
                                 *why ? why : "no GPU found");
            DDPC_TRY(ddprt_cpu_plan(r, e));
            (void)snprintf(r->accel_note, sizeof r->accel_note,
                           "accelerator auto: no GPU found, running %d CPU worker process%s (%s)",
                           r->local_world, r->local_world == 1 ? "" : "es",
                           *why ? why : "no GPU found");
        }
        break;
    }
    default:
        return DDPC_FAIL(e, DDPC_E_INVALID, "accelerator %d unknown", (int)j->accelerator);
    }
    r->world = r->local_world * r->num_nodes;
    if (!r->use_cuda && r->num_nodes > 1)
        DDPC_TRY(ddprt_gloo_open(r, e));
    return 0;
}

/* ===== --dry-run: every field of the job, exactly as baked ===== */

/* The shortest %g that reads back as the same double: exactly the baked
 * value, without %.17g's 0.90000000000000002. */
static void put_double(FILE *f, const char *key, double v)
{
    char buf[40];
    for (int prec = 15; prec <= 17; prec++) {
        (void)snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    fprintf(f, "  %-34s %s\n", key, buf);
}

static void put_str(FILE *f, const char *key, const char *v)
{
    if (!v) {
        fprintf(f, "  %-34s null\n", key);
        return;
    }
    fprintf(f, "  %-34s \"", key);
    for (const char *c = v; *c; c++) {
        if (*c == '"' || *c == '\\')
            fprintf(f, "\\%c", *c);
        else if ((unsigned char)*c < 0x20)
            fprintf(f, "\\x%02x", (unsigned char)*c);
        else
            fputc(*c, f);
    }
    fputs("\"\n", f);
}

/* One field of the job (keytab.h's walk, in keys.def's order): its C path
 * and its value, enums by their spec spelling. */
static void put_field(void *ctx, const struct ddpc_field *fd, const char *path, const char *p,
                      const char *blk)
{
    FILE *f = ctx;
    switch (fd->type) {
    case DDPC_FT_I32:
    case DDPC_FT_BOOL:
    case DDPC_FT_I64:
        fprintf(f, "  %-34s %lld\n", path, (long long)ddpc_field_i64(fd, p));
        break;
    case DDPC_FT_U64:
        fprintf(f, "  %-34s %llu\n", path, (unsigned long long)ddpc_field_u64(p));
        break;
    case DDPC_FT_F64:
        put_double(f, path, ddpc_field_f64(p));
        break;
    case DDPC_FT_STR:
        put_str(f, path, ddpc_field_str(p));
        break;
    case DDPC_FT_ENUM: {
        const struct ddpc_enum_value *v = ddpc_enum_find(fd->e, (int)ddpc_field_i64(fd, p));
        fprintf(f, "  %-34s %s\n", path, v ? v->spelling : "?");
        break;
    }
    case DDPC_FT_I32_LIST: {
        int n = ddpc_field_count(fd, blk);
        fprintf(f, "  %-34s [", path);
        for (int i = 0; i < n; i++) {
            int32_t v;
            memcpy(&v, p + (size_t)i * sizeof v, sizeof v);
            fprintf(f, "%s%d", i ? ", " : "", v);
        }
        fprintf(f, "]\n");
        break;
    }
    default:
        break;
    }
}

static void ddprt_print_job(FILE *f, const struct ddpc_job *j)
{
    fprintf(f, "job (as baked into this binary):\n");
    ddpc_job_walk(j, put_field, f);
}

static void ddprt_rank_label(const struct ddprt_run *r, int local, char *buf, size_t len)
{
    int d = r->devices[local];
    if (r->use_cuda)
        (void)snprintf(buf, len, "cuda:%d", d);
    else
        (void)snprintf(buf, len, "cpu worker %d", d);
}

static void ddprt_print_plan(FILE *f, const struct ddprt_run *r, const struct ddprt_flags *fl)
{
    fprintf(f, "launch plan:\n");
    fprintf(f, "  %-34s %s\n", "backend", r->use_cuda ? "cuda (NCCL)"
                                          : r->gloo ? "cpu (gloo between nodes)"
                                                    : "cpu (shared memory)");
    fprintf(f, "  %-34s %s\n", "device choice", r->accel_note);
    fprintf(f, "  %-34s %d (%d node%s x %d)\n", "world size", r->world, r->num_nodes,
            r->num_nodes == 1 ? "" : "s", r->local_world);
    fprintf(f, "  %-34s %d\n", "node rank", r->node_rank);
    if (r->gloo || r->num_nodes > 1 || (r->use_cuda && fl->master)) {
        char where[300];
        store_format_addr(where, sizeof where, r->master_addr, r->master_port);
        fprintf(f, "  %-34s %s (the store node 0 hosts)\n", "rendezvous", where);
    }
    else if (r->use_cuda)
        fprintf(f, "  %-34s the store on 127.0.0.1, a free port picked at launch\n",
                "rendezvous");
    if (r->job.nccl_timeout_s > 0)
        fprintf(f, "  %-34s %.17g s per gradient all-reduce%s\n", "nccl_timeout",
                r->job.nccl_timeout_s, r->gloo ? " and for the rendezvous" : "");
    else
        fprintf(f, "  %-34s none\n", "nccl_timeout");
    if (r->job.rank_sync_timeout_s > 0 && r->world > 1)
        fprintf(f, "  %-34s %.17g s per step barrier\n", "rank_sync_timeout",
                r->job.rank_sync_timeout_s);
    else
        fprintf(f, "  %-34s off (no per-step barrier)\n", "rank_sync_timeout");
    if (fl->resume)
        fprintf(f, "  %-34s %s\n", "resume from (--resume)", fl->resume);
    for (int i = 0; i < r->local_world; i++) {
        char label[48];
        ddprt_rank_label(r, i, label, sizeof label);
        int g = r->node_rank * r->local_world + i;
        fprintf(f, "  rank %-3d node %d local %-3d %s", g, r->node_rank, i, label);
        if (r->use_cuda && r->devices[i] < 64 && r->info.names[r->devices[i]][0])
            fprintf(f, " (%s)", r->info.names[r->devices[i]]);
        fputc('\n', f);
    }
}

static void ddprt_print_text(FILE *f, const char *title, const char *text)
{
    fprintf(f, "%s:\n", title);
    if (!text) {
        fprintf(f, "  (not embedded)\n");
        return;
    }
    fputs(text, f);
    size_t n = strlen(text);
    if (n == 0 || text[n - 1] != '\n')
        fputc('\n', f);
}

/* ===== the worker body (runs in each forked process) ===== */

static int ddprt_worker(const struct launch_worker *w, struct ddpc_err *e)
{
    const struct ddprt_run *r = w->user;
    const struct ddpc_job *j = &r->job;
    struct ddpc_ops ops;
    struct ddpc_comm grad, sync;
    int have_ops = 0, have_grad = 0, have_sync = 0;
    int want_sync = r->world > 1 && j->rank_sync_timeout_s > 0;
    int rc;
    memset(&ops, 0, sizeof ops);
    memset(&grad, 0, sizeof grad);
    memset(&sync, 0, sizeof sync);

    if (r->use_cuda)
        rc = r->cuda->ops_init(&ops, w->device, e);
    else
        rc = ops_cpu_init(&ops, e);
    if (rc < 0)
        goto out;
    have_ops = 1;

    if (r->use_cuda) {
        /* One GPU: nothing to reduce, no communicator (worker.c needs one
         * only for world > 1). Else NCCL init waits for every rank: bound it
         * like a collective. The rank-sync communicator is split from the
         * gradient one (no second bootstrap). */
        double dl = ddpc_deadline_after(j->nccl_timeout_s);
        if (r->world > 1) {
            char prefix[32];
            (void)snprintf(prefix, sizeof prefix, "a%d", r->attempt);
            rc = r->cuda->comm_init(&grad, "gradient", w->rank, w->world, r->master_addr,
                                    r->master_port, prefix, dl, e);
            have_grad = 1;   /* destroy is safe after a failed init */
            if (rc < 0)
                goto out;
            if (r->store_met)
                __atomic_store_n(r->store_met, 1, __ATOMIC_RELAXED);
        }
        if (want_sync) {
            rc = r->cuda->comm_split(&grad, &sync, "rank-sync", dl, e);
            have_sync = 1;
            if (rc < 0)
                goto out;
        }
    } else if (r->gloo) {
        /* CPU workers on several nodes: gloo, through node 0's store */
        char prefix[32];
        (void)snprintf(prefix, sizeof prefix, "a%d", r->attempt);
        /* nccl_timeout (30 min unless the spec says otherwise) bounds the
         * rendezvous too: a node that never comes is named when it passes */
        double t = j->nccl_timeout_s;
        struct ddpc_gloo_init in = {
            .purpose = "gradient", .rank = w->rank, .world = w->world,
            .ranks_per_node = r->local_world, .store_host = r->master_addr,
            .store_port = r->master_port, .prefix = prefix,
            .deadline = ddpc_deadline_after(t), .default_timeout_s = t,
            /* node 0's store lives as long as its launcher: once met, a
             * refused connection means node 0 has stopped */
            .store_met = r->node_rank > 0 && r->store_met && *r->store_met,
        };
        rc = r->gloo->comm_init(&grad, &in, e);
        have_grad = 1;   /* destroy is safe after a failed init */
        if (rc < 0)
            goto out;
        if (r->store_met)
            __atomic_store_n(r->store_met, 1, __ATOMIC_RELAXED);
        if (want_sync) {
            in.purpose = "rank-sync";
            in.default_timeout_s = j->rank_sync_timeout_s;
            rc = r->gloo->comm_init(&sync, &in, e);
            have_sync = 1;
            if (rc < 0)
                goto out;
        }
    } else {
        if ((rc = comm_shm_attach(&grad, w->grad_region, w->rank, "gradient", e)) < 0)
            goto out;
        have_grad = 1;
        if (want_sync) {
            if ((rc = comm_shm_attach(&sync, w->sync_region, w->rank, "rank-sync", e)) < 0)
                goto out;
            have_sync = 1;
        }
    }

    struct ddpc_worker_args args = {
        .job = j,
        .rank = w->rank,
        .world = w->world,
        .device = w->device,
        .ops = &ops,
        .grad_comm = have_grad ? &grad : NULL,
        .sync_comm = have_sync ? &sync : NULL,
        .train = r->evaluating ? NULL : &r->train,
        .test = r->has_test ? &r->test : NULL,
        .out = w->rank == 0 ? stdout : NULL,
        .t_launch = r->t_launch,
        .spec_hash = r->p->spec_hash,   /* stamped into checkpoints, checked on resume */
        .sample = r->sample.n > 0 ? &r->sample : NULL,
        .eval = r->evaluating ? &r->eval : NULL,
    };
    struct ddpc_worker_result res;
    memset(&res, 0, sizeof res);
    rc = worker_run(&args, &res, e);
    free(res.params);

out:
    if (rc < 0) {
        /* Peers blocked in a collective stop now. They name this rank, not
         * its message: it prints that itself, whole, once ([rank N]
         * error:), where a copy in every peer's line was cut at the shared
         * region's 384 bytes */
        char why[128];
        (void)snprintf(why, sizeof why, "rank %d (%s) failed", w->rank, w->label);
        if (have_grad && grad.abort)
            grad.abort(&grad, why);
        if (have_sync && sync.abort)
            sync.abort(&sync, why);
    }
    /* Communicators borrow the ops' stream: destroy them first. */
    if (have_sync && sync.destroy)
        sync.destroy(&sync);
    if (have_grad && grad.destroy)
        grad.destroy(&grad);
    if (have_ops && ops.destroy)
        ops.destroy(&ops);
    return rc;
}

/* ===== ddprt_main ===== */

/* ===== checkpoint_dir, from the launcher ===== */

/* Bytes of one checkpoint of this job: the model's parameters (model.h's
 * shapes) and the optimizer state optim.c keeps (Adam m and v, SGD
 * momentum). */
static size_t ddprt_ckpt_bytes(const struct ddpc_job *j)
{
    static struct ddpc_net net;   /* large; the launcher is one thread */
    char why[512];
    int bad;
    size_t n = 0, n_state = 0;
    if (layers_build(j, NULL, &net, &bad, why, sizeof why) == 0) {
        n = net.n_params;
        n_state = net.n_state;
    }
    size_t n_opt = 0;
    if (j->optimizer.type == DDPC_OPTIM_ADAM || j->optimizer.type == DDPC_OPTIM_ADAMW)
        n_opt = 2 * n;
    else if (j->optimizer.type == DDPC_OPTIM_SGD && j->optimizer.momentum != 0.0)
        n_opt = n;
    return ckpt_file_size(n + n_state, n_opt);
}

/* Before any worker starts (node 0, where rank 0 writes): the export's
 * directory and checkpoint_dir can be created and written, and
 * checkpoint_dir has room for the checkpoints the run holds at once:
 * keep_last + 1 (a new one is complete before the oldest goes), or 2 when
 * every checkpoint is kept (how many of the run's own are already there is
 * only known at resume; the writer reports a full disk). */
static int ddprt_ckpt_preflight(const struct ddprt_run *r, struct ddpc_err *e)
{
    const struct ddpc_job *j = &r->job;
    if (r->node_rank != 0)
        return 0;
    /* the export is written after the last epoch: a bad path must not
     * cost the whole run */
    DDPC_TRY(ckpt_preflight_export(j->checkpoint.export_path, e));
    if (!j->checkpoint_dir || !*j->checkpoint_dir)
        return 0;
    int every = j->checkpoint.every_n_epochs;
    long long writes = every > 0 ? j->epochs / every + (j->epochs % every != 0) : 1;
    if (j->checkpoint.every_n_steps > 0 || j->checkpoint.every_n_minutes > 0)
        writes = LLONG_MAX;     /* mid-epoch ones too: keep_last bounds what is held */
    long long held = 2;
    if (j->checkpoint.keep_last > 0)
        held = (long long)j->checkpoint.keep_last + 1 < writes
             ? (long long)j->checkpoint.keep_last + 1 : writes;
    return ckpt_preflight_n(j->checkpoint_dir, ddprt_ckpt_bytes(j), held > 2 ? (int)held : 2, e);
}

/* An output path that exists must be the kind the job writes: a FIFO would
 * block the open (rank 0, mid-run, with the others waiting), a device or
 * /dev/null would swallow the metrics or, for the export, be replaced by
 * the atomic rename. Checked with stat, which never blocks, before any
 * worker starts. */
static int ddprt_output_kind(const char *path, const char *key, int want_dir,
                             struct ddpc_err *e)
{
    struct stat st;
    if (!path || !*path || stat(path, &st) != 0)
        return 0;   /* absent: created later (errors then name it) */
    if (want_dir ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode))
        return 0;
    const char *kind = S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISDIR(st.st_mode) ? "a directory"
                     : S_ISREG(st.st_mode) ? "a regular file"
                     : S_ISCHR(st.st_mode) ? "a character device"
                     : S_ISBLK(st.st_mode) ? "a block device"
                     : S_ISSOCK(st.st_mode) ? "a socket" : "a special file";
    return DDPC_FAIL(e, DDPC_E_INVALID, "%s: %s is %s, not %s; point %s at a %s path", key, path,
                     kind, want_dir ? "a directory" : "a regular file", key,
                     want_dir ? "directory" : "file");
}

/* An output file that is one of the job's inputs (a data file, init_from,
 * the checkpoint it resumes from), the program itself, or the other output
 * file would be overwritten by the run: the training data replaced by the
 * metrics, the program by the export. Refused before any worker starts;
 * paths that do not exist yet are no input (inputs exist); two outputs are
 * compared by same_file (check refuses the ones it can see). */
static int ddprt_output_clobbers(const struct ddpc_job *j, const char *out, const char *key,
                                 const char *other, const char *other_key, struct ddpc_err *e)
{
    struct stat so, si;
    if (!out || !*out)
        return 0;
    int there = stat(out, &so) == 0 && S_ISREG(so.st_mode);
    if (other && *other && same_file(out, other))
        return DDPC_FAIL(e, DDPC_E_INVALID, "%s and %s are the same file (%s): one would "
                         "overwrite the other; give each its own path", other_key, key, out);
    if (!there)
        return 0;
    const char *what, *path = job_input_at(j, &so, "the checkpoint to resume from", &what);
    if (path)
        return DDPC_FAIL(e, DDPC_E_INVALID, "%s: %s is %s (%s): the run would overwrite it; "
                         "point %s at another file", key, out, what, path, key);
    if (stat("/proc/self/exe", &si) == 0 && si.st_dev == so.st_dev && si.st_ino == so.st_ino)
        return DDPC_FAIL(e, DDPC_E_INVALID, "%s: %s is this program: the run would overwrite "
                         "it; point %s at another file", key, out, key);
    return 0;
}

static int ddprt_output_preflight(const struct ddprt_run *r, struct ddpc_err *e)
{
    const struct ddpc_job *j = &r->job;
    if (r->node_rank != 0)
        return 0;   /* rank 0 writes them */
    DDPC_TRY(ddprt_output_kind(j->logging.metrics_csv, "logging.metrics_csv", 0, e));
    DDPC_TRY(ddprt_output_kind(j->logging.tensorboard, "logging.tensorboard", 1, e));
    DDPC_TRY(ddprt_output_kind(j->checkpoint.export_path, "checkpoint.export", 0, e));
    DDPC_TRY(ddprt_output_clobbers(j, j->logging.metrics_csv, "logging.metrics_csv",
                                   j->checkpoint.export_path, "checkpoint.export", e));
    DDPC_TRY(ddprt_output_clobbers(j, j->checkpoint.export_path, "checkpoint.export", NULL,
                                   NULL, e));
    const char *files[2][2] = { { "logging.metrics_csv", j->logging.metrics_csv },
                                { "checkpoint.export", j->checkpoint.export_path } };
    for (int i = 0; i < 2; i++) {
        const char *dkey = job_output_dir_at(j, files[i][1]);
        if (dkey)
            return DDPC_FAIL(e, DDPC_E_INVALID, "%s and %s are the same path (%s): the run "
                             "would write the one and refuse the other; give each its own "
                             "path", files[i][0], dkey, files[i][1]);
    }
    return ddprt_output_kind(j->checkpoint_dir, "checkpoint_dir", 1, e);
}

/* Temp files of writers that are gone (a worker killed mid-write by the
 * user's signal, the grace-period SIGKILL, or an earlier kill -9 of the
 * whole job), in checkpoint_dir and next to the export. Only this host's
 * dead pids: ckpt_prune with keep_last 0 removes nothing else. */
static void ddprt_remove_stale_temps(const struct ddprt_run *r)
{
    const struct ddpc_job *j = &r->job;
    struct ddpc_err pe = { 0 };
    if (r->evaluating) {
        /* --eval and --predict never touch checkpoint_dir or the export:
         * only --predict's own output, whose temp a killed run left */
        if (r->eval.output && ckpt_remove_stale_export_temps(r->eval.output, &pe) < 0)
            fprintf(stderr, "ddpc: warning: %s\n", pe.msg);
        return;
    }
    if (ckpt_remove_stale_export_temps(j->checkpoint.export_path, &pe) < 0)
        fprintf(stderr, "ddpc: warning: %s\n", pe.msg);
    ddpc_err_clear(&pe);
    if (!j->checkpoint_dir || !*j->checkpoint_dir || !j->name)
        return;
    if (ckpt_prune(j->checkpoint_dir, j->name, NULL, 0, &pe) < 0)
        fprintf(stderr, "ddpc: warning: %s\n", pe.msg);
}

/* ddpc check's rule, batch_size x world <= training samples, for what only
 * the run can resolve: devices: -1 / all (check knew only the machine it
 * ran on, and warned with that machine's count). */
static int ddprt_batch_rule(const struct ddprt_run *r, struct ddpc_err *e)
{
    const struct ddpc_job *j = &r->job;
    long long global = (long long)j->batch_size * r->world;
    if (!j->devices_all || global <= r->train.n)
        return 0;
    return DDPC_FAIL(e, DDPC_E_INVALID, "batch_size %d x %d worker%s (devices: -1 on this "
                     "machine: %s) = %lld is larger than the training set (%lld samples); "
                     "lower batch_size or list the devices", j->batch_size, r->world,
                     r->world == 1 ? "" : "s", r->use_cuda ? "its GPUs"
                     : "the CPUs this process may run on", global, (long long)r->train.n);
}

/* ===== memory limits, from the launcher ===== */

/* What a CPU worker maps beyond what it inherits, from the job alone:
 * parameters, gradients, optimizer state, activations and batch buffers
 * (model.c, worker.c), plus OpenBLAS's per-thread gemm buffer, which it
 * maps on the first gemm: 128 MiB in Debian's OpenBLAS 0.3.21 (measured:
 * a worker of the example maps one more 131072 kB region than the
 * launcher). Returns the model part; *blas the buffer. */
#define DDPRT_BLAS_BUFFER ((size_t)128 << 20)
static size_t ddprt_worker_bytes(const struct ddpc_job *j)
{
    static struct ddpc_net net;   /* large; the launcher is one thread */
    char why[512];
    int bad;
    if (layers_build(j, NULL, &net, &bad, why, sizeof why) < 0)
        return 0;   /* the worker reports it */
    size_t n = net.n_params;
    size_t rows = (size_t)layers_buffer_rows(&net, j->batch_size, j->data.has_test);
    size_t n_opt = j->optimizer.type == DDPC_OPTIM_SGD ? (j->optimizer.momentum != 0.0 ? n : 0)
                                                       : 2 * n;
    /* params, grads, optimizer and batch-norm state; every node's output
     * and its gradient (and pooling argmaxes), the im2col scratch */
    return (2 * n + n_opt + net.n_state) * sizeof(float) +
           rows * (size_t)(net.act_floats + net.scratch_floats) * sizeof(float);
}

/* The host copy model_init_params fills (parameters and batch-norm state):
 * freed after the broadcast, but its pages stay in the worker's heap. */
static size_t ddprt_init_bytes(const struct ddpc_job *j)
{
    static struct ddpc_net net;   /* large; the launcher is one thread */
    char why[512];
    int bad;
    if (layers_build(j, NULL, &net, &bad, why, sizeof why) < 0)
        return 0;
    return (net.n_params + net.n_state) * sizeof(float);
}

/* Bytes of this process's address space (statm: size) or resident set
 * (statm: resident); 0 when /proc cannot tell. */
static size_t ddprt_self_bytes(int resident)
{
    FILE *f = fopen("/proc/self/statm", "re");
    unsigned long long size = 0, rss = 0;
    if (!f)
        return 0;
    int got = fscanf(f, "%llu %llu", &size, &rss);
    (void)fclose(f);
    long page = sysconf(_SC_PAGESIZE);
    if (got != 2 || page <= 0)
        return 0;
    return (size_t)(resident ? rss : size) * (size_t)page;
}

static void ddprt_mib(char *buf, size_t len, double bytes)
{
    (void)snprintf(buf, len, bytes < 10485760.0 ? "%.1f MiB" : "%.0f MiB", bytes / 1048576.0);
}

/* This process's cgroup memory limit in bytes: v2 memory.max, else v1
 * memory.limit_in_bytes (its "unlimited" is a huge page-rounded number);
 * 0 when there is none or it cannot be read. The path in /proc/self/cgroup
 * is tried under the mount, then the mount itself (a cgroup namespace
 * shows the container's own group there). */
static unsigned long long ddprt_cgroup_read(const char *path)
{
    FILE *f = fopen(path, "re");
    unsigned long long v = 0;
    if (!f)
        return 0;
    if (fscanf(f, "%llu", &v) != 1 || v >= (1ULL << 62))
        v = 0;   /* "max", or v1's unlimited */
    (void)fclose(f);
    return v;
}

static unsigned long long ddprt_cgroup_max(void)
{
    FILE *f = fopen("/proc/self/cgroup", "re");
    char line[4096], path[4300];
    unsigned long long v = 0;
    if (!f)
        return 0;
    while (!v && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        const char *rel = NULL, *dir = NULL, *file = NULL;
        if (strncmp(line, "0::", 3) == 0) {
            rel = line + 3;
            dir = "/sys/fs/cgroup";
            file = "memory.max";
        } else {
            const char *c1 = strchr(line, ':');
            const char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
            if (c1 && c2 && c2 - c1 - 1 == 6 && strncmp(c1 + 1, "memory", 6) == 0) {
                rel = c2 + 1;
                dir = "/sys/fs/cgroup/memory";
                file = "memory.limit_in_bytes";
            }
        }
        if (!rel)
            continue;
        (void)snprintf(path, sizeof path, "%s%s/%s", dir, rel, file);
        v = ddprt_cgroup_read(path);
        if (!v) {
            (void)snprintf(path, sizeof path, "%s/%s", dir, file);
            v = ddprt_cgroup_read(path);
        }
    }
    (void)fclose(f);
    return v;
}

/* Before fork, with the data loaded: a memory limit too small for the
 * workers is an error now, naming both numbers, instead of what happens
 * later: under ulimit -v, OpenBLAS retries its failing buffer mmap forever
 * (measured: the example under ulimit -v 400000 spins until killed); under
 * a cgroup's memory.max, the OOM killer. Each worker is a copy of this
 * process (same address space, data shared) that then maps its own state. */
static int ddprt_memory_preflight(const struct ddprt_run *r, struct ddpc_err *e)
{
    const struct ddpc_job *j = &r->job;
    if (r->use_cuda)
        return 0;   /* CUDA reserves address space of its own; ulimit -v cannot work */
    size_t model = ddprt_worker_bytes(j);
    size_t comm = r->local_world > 1
        ? ((size_t)r->local_world + 4) * (DDPRT_GRAD_SLOT + DDPRT_SYNC_SLOT) * sizeof(float) : 0;
    /* resident of those: each rank's slot and the result (whole once the
     * parameters outgrow a slot), not the shared state the small models'
     * parameters move into, which model already counts per worker */
    size_t n_grad = ddprt_init_bytes(j) / sizeof(float);
    size_t comm_touched = r->local_world > 1
        ? ((size_t)r->local_world + 1) * (n_grad < DDPRT_GRAD_SLOT ? n_grad : DDPRT_GRAD_SLOT) *
          sizeof(float) : 0;
    char a[32], b[32], c[32], d[32], f[32];
    struct rlimit rl;
    size_t vm = ddprt_self_bytes(0);
    if (vm > 0 && getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        /* + one glibc malloc arena (64 MiB of address space) for a thread
         * a worker may start (the gloo engine's comm thread). vm no longer
         * depends on thread timing: with OpenBLAS's pool kept from
         * starting (ddprt_blas_without_pool) this process has no thread
         * of its own now, and a worker is a copy of it (measured for the
         * small e2e job: 115 MiB here every run, each worker's VmPeak
         * 268 MiB against the 331 MiB asked for). */
        double need = (double)vm + (double)comm + (double)DDPRT_BLAS_BUFFER + (double)model +
                      67108864.0;
        if ((double)rl.rlim_cur < need) {
            ddprt_mib(a, sizeof a, (double)rl.rlim_cur);
            ddprt_mib(b, sizeof b, need);
            ddprt_mib(c, sizeof c, (double)vm);
            ddprt_mib(d, sizeof d, (double)comm + (double)DDPRT_BLAS_BUFFER + 67108864.0);
            ddprt_mib(f, sizeof f, (double)model);
            return DDPC_FAIL(e, DDPC_E_NOMEM,
                             "the address-space limit (ulimit -v, RLIMIT_AS) is %s per process, "
                             "but each worker needs about %s: %s mapped already (libraries and "
                             "the data), %s of collective and OpenBLAS buffers and a thread's "
                             "malloc arena, %s of model, "
                             "optimizer state and activations. Raise it (ulimit -v %llu or "
                             "more) or lift it (ulimit -v unlimited)", a, b, c, d, f,
                             /* + an arena: under a limit this tight the
                              * test loader's thread may have found no room
                              * for its own (vm 51 MiB under ulimit -v
                              * 100000), which it gets under the advised one */
                             (unsigned long long)((need + 67108864.0) / 1024 * 1.1));
        }
    }
    unsigned long long cg = ddprt_cgroup_max();
    size_t rss = ddprt_self_bytes(1);
    if (cg > 0 && rss > 0) {
        /* resident: the data once (shared), each worker's own state, and
         * what model_init_params' host copy of the parameters leaves
         * resident in each worker's heap (measured: a worker of an MLP of
         * 5.8M parameters holds 22 MiB more than its model); on node 0,
         * rank 0's host copy of the checkpoint (parameters, batch-norm and
         * optimizer state: worker.c run_ckpt_init) when it writes
         * checkpoints or an export; the collective slots the ranks touch.
         * Without these a job of 300 MiB by the old count, allowed 400 MiB,
         * trained its first epoch and was OOM-killed writing its
         * checkpoint. */
        size_t init = ddprt_init_bytes(j), ckpt = 0;
        if (r->node_rank == 0 &&
            ((j->checkpoint_dir && *j->checkpoint_dir) ||
             (j->checkpoint.export_path && *j->checkpoint.export_path)))
            ckpt = ddprt_ckpt_bytes(j);
        double need = (double)rss + (double)r->local_world * ((double)model + (double)init) +
                      (double)ckpt + (double)comm_touched;
        if ((double)cg < need) {
            ddprt_mib(a, sizeof a, (double)cg);
            ddprt_mib(b, sizeof b, need);
            ddprt_mib(c, sizeof c, (double)rss);
            ddprt_mib(d, sizeof d, (double)model + (double)init);
            ddprt_mib(f, sizeof f, (double)ckpt + (double)comm_touched);
            return DDPC_FAIL(e, DDPC_E_NOMEM,
                             "this job's cgroup allows %s (memory.max, or v1's "
                             "memory.limit_in_bytes), but the job needs at least %s: %s "
                             "resident already (the data), %d worker%s x %s of model, "
                             "optimizer state and activations, %s of rank 0's checkpoint "
                             "copy and the collectives' buffers. Raise the limit, "
                             "or lower batch_size or the devices", a, b, c, r->local_world,
                             r->local_world == 1 ? "" : "s", d, f);
        }
    }
    return 0;
}

/* This process's anonymous resident memory (RssAnon): what a cgroup cannot
 * reclaim, unlike the pages of its libraries; 0 when /proc cannot tell. */
static size_t ddprt_anon_bytes(void)
{
    FILE *f = fopen("/proc/self/status", "re");
    char line[256];
    unsigned long long kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "RssAnon: %llu kB", &kb) == 1)
            break;
    if (f)
        (void)fclose(f);
    return (size_t)kb * 1024;
}

/* Before loading: a cgroup limit below what loading the data takes at its
 * peak is an error naming both, instead of the OOM killer's SIGKILL in the
 * middle of decompressing (exit 137, "Killed" and nothing else: the
 * example's 25 MiB of gzipped training images and the 45 MiB they
 * decompress to are held at once, measured 78.0-78.5 MiB the least that
 * loads it). data_mem_estimate counts from the files' sizes and headers
 * what data.c allocates; a source it cannot read is data_load's to report. */
static int ddprt_data_preflight(const struct ddprt_run *r, struct ddpc_err *e)
{
    const struct ddpc_job *j = &r->job;
    unsigned long long cg = ddprt_cgroup_max();
    struct data_mem tr, te = { 0 };
    if (!cg || data_mem_estimate(&j->data.train, &tr) < 0 ||
        (j->data.has_test && data_mem_estimate(&j->data.test, &te) < 0))
        return 0;
    size_t anon = ddprt_anon_bytes();
    double need = (double)anon + (double)data_mem_together(&tr, &te);
    if ((double)cg >= need)
        return 0;
    char a[32], b[32], c[32], d[32], f[32], g[32], h[32], gz[200] = "";
    ddprt_mib(a, sizeof a, (double)cg);
    ddprt_mib(b, sizeof b, need);
    ddprt_mib(c, sizeof c, (double)anon);
    ddprt_mib(d, sizeof d, (double)tr.peak);
    ddprt_mib(f, sizeof f, j->data.has_test ? (double)te.held : 0.0);
    if (tr.gz) {
        ddprt_mib(g, sizeof g, (double)tr.gz);
        ddprt_mib(h, sizeof h, (double)tr.raw);
        (void)snprintf(gz, sizeof gz, " (%s of gzip files and the %s they decompress to, "
                       "held at once)", g, h);
    }
    return DDPC_FAIL(e, DDPC_E_NOMEM,
                     "this job's cgroup allows %s (memory.max, or v1's memory.limit_in_bytes), "
                     "but the job needs at least %s to load its data, before any worker "
                     "starts: %s resident already, %s at the peak of reading data.train%s, "
                     "%s of data.test. Raise the limit to %.0f MiB or more: the data's size is "
                     "what it is%s", a, b, c, d, gz, f,
                     /* a MiB of headroom: the launcher's own resident
                      * memory moves by a fraction of one between runs */
                     ceil(need / 1048576.0) + 1,
                     tr.gz || te.gz ? " (uncompressed files, gunzip'd, need only what they "
                     "hold: not the compressed copy too)" : "");
}

struct ddprt_test_load {
    const struct ddpc_data_source *src;
    struct ddpc_dataset *ds;
    struct ddpc_err e;
    int rc;
};

static void *ddprt_test_loader(void *arg)
{
    struct ddprt_test_load *t = arg;
    t->rc = data_load(t->src, t->ds, &t->e);
    return NULL;
}

/* The test set decompresses on a second thread while the training set
 * does on this one: the time to the first step is the larger of the two.
 * A training-data error is reported first, as before. */
static int ddprt_load_data(struct ddprt_run *r, struct ddpc_err *e)
{
    struct ddprt_test_load t = { &r->job.data.test, &r->test, { 0 }, 0 };
    pthread_t th;
    int threaded = 0;
    if (r->job.data.has_test)
        threaded = pthread_create(&th, NULL, ddprt_test_loader, &t) == 0;
    int rc = data_load(&r->job.data.train, &r->train, e);
    if (threaded)
        (void)pthread_join(th, NULL);   /* fails only for a bad thread id */
    else if (r->job.data.has_test && rc == 0)
        ddprt_test_loader(&t);
    DDPC_TRY(rc);
    if (r->job.data.has_test) {
        if (t.rc < 0) {
            *e = t.e;
            return t.rc;
        }
        r->has_test = 1;
    }
    if (r->job.model.type == DDPC_MODEL_GPT) {
        /* the token streams become windows of block_size + 1 (docs/DESIGN.md,
         * Models: token data): training's do not overlap, the test's
         * targets cover every token but the first once */
        int32_t T = r->job.model.block_size, V = r->job.model.vocab_size;
        DDPC_TRY(data_set_windows(&r->train, T, (int64_t)T + 1, V, e));
        if (r->has_test)
            DDPC_TRY(data_set_windows(&r->test, T, T, V, e));
    }
    return 0;
}

static void ddprt_report(const struct ddpc_err *e)
{
    fprintf(stderr, "ddpc: error: %s", e->msg);
    if (e->file && env_get()->debug)   /* ddpc's own source: for bug reports only */
        fprintf(stderr, " (%s:%d)", e->file, e->line);
    fputc('\n', stderr);
}

/* --version: the job, the ddpc that built it, the spec, the backends. */
static void ddprt_print_version(const struct ddprt_program *p, const char *argv0)
{
    printf("%s: job %s, built by ddpc %s from %s (sha256 %s), backends: cpu%s\n", argv0,
           p->job->name ? p->job->name : "?", p->ddpc_version ? p->ddpc_version : "?",
           p->spec_path ? p->spec_path : "?", p->spec_hash ? p->spec_hash : "?",
           p->cuda || p->cuda_plugin ? ", cuda" : "");
}

/* The run's state: the baked job with --resume applied, the launch clock. */
static struct ddprt_run *ddprt_run_new(const struct ddprt_program *p,
                                       const struct ddprt_flags *fl)
{
    struct ddprt_run *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->p = p;
    r->job = *p->job;
    r->t_launch = ddpc_now();
    /* Benchmarks (bench/measure.py) set DDPC_BENCH_T0 to the wall-clock
     * time before exec, so first_step_s also counts exec and loading the
     * shared libraries, the way torch_ddp.py counts its interpreter start. */
    struct timespec wall;
    if (env_get()->bench_t0 > 0 && clock_gettime(CLOCK_REALTIME, &wall) == 0) {
        double since = (double)wall.tv_sec + (double)wall.tv_nsec * 1e-9 - env_get()->bench_t0;
        if (since > 0 && since < 60)
            r->t_launch -= since;
    }
    if (fl->resume) {
        r->job.checkpoint.resume = DDPC_RESUME_PATH;
        r->job.checkpoint.resume_path = fl->resume;
    }
    r->sample = (struct ddpc_sample_opts){ .n = fl->sample, .prompt = fl->prompt,
                                           .temperature = fl->temperature, .seed = p->job->seed };
    if (fl->eval || fl->predict)
        ddprt_eval_setup(r, fl);
    return r;
}

/* Dry run: the configuration baked into this binary and the launch plan;
 * nothing is trained. Returns the exit status. */
static int ddprt_dry_run(struct ddprt_run *r, const struct ddprt_flags *fl, const char *argv0,
                         struct ddpc_err *e)
{
    const struct ddprt_program *p = r->p;
    printf("# %s --dry-run: the configuration baked into this binary and the launch "
           "plan; nothing is trained\n", argv0);
    printf("# built by ddpc %s from %s (sha256 %s)\n",
           p->ddpc_version ? p->ddpc_version : "?", p->spec_path ? p->spec_path : "?",
           p->spec_hash ? p->spec_hash : "?");
    ddprt_print_job(stdout, p->job);   /* as baked: before any override */
    int prc = ddprt_plan(r, fl, e);
    if (prc == 0)
        ddprt_print_plan(stdout, r, fl);
    ddprt_print_text(stdout, "spec", p->spec_text);
    ddprt_print_text(stdout, "plan (job.plan.json)", p->plan_json);
    if (fflush(stdout) == EOF) {
        fprintf(stderr, "ddpc: error: writing stdout: %s\n", strerror(errno));
        return DDPRT_EXIT_FAIL;
    }
    if (prc < 0) {
        ddprt_report(e);
        return DDPRT_EXIT_FAIL;
    }
    return 0;
}

/* Prepare --eval and --predict: no checkpoint or output preflight (they
 * write into checkpoint_dir: a probe, a prune), no training data; the
 * model file named is readable, --predict's input and output make sense,
 * --eval's data loaded. Returns 0, or -1 with the error reported. */
static int ddprt_prepare_eval(struct ddprt_run *r, struct ddpc_err *e)
{
    const struct ddpc_eval_opts *o = &r->eval;
    const char *named = o->src.kind == DDPC_SOURCE_FILE || o->src.kind == DDPC_SOURCE_EXPORT
                      ? o->src.path : NULL;
    struct stat st;
    if (r->node_rank == 0 && named && (stat(named, &st) != 0 || access(named, R_OK) != 0)) {
        fprintf(stderr, "ddpc: error: %s %s: %s\n",
                o->src.kind == DDPC_SOURCE_EXPORT ? "--model" : "--checkpoint", named,
                strerror(errno));
        return -1;
    }
    if (r->node_rank == 0 && named && !S_ISREG(st.st_mode)) {
        fprintf(stderr, "ddpc: error: %s %s: not a regular file; name one %s\n",
                o->src.kind == DDPC_SOURCE_EXPORT ? "--model" : "--checkpoint", named,
                o->src.kind == DDPC_SOURCE_EXPORT ? "safetensors file" : "checkpoint (a .ckpt "
                "in checkpoint_dir)");
        return -1;
    }
    int rc = 0;
    if (o->predict) {
        rc = predict_preflight(&r->job, o->input, o->output, e);
        if (rc == 0)
            ddprt_remove_stale_temps(r);
    } else {
        rc = data_load(&r->job.data.test, &r->test, e);
        if (rc == 0 && r->job.model.type == DDPC_MODEL_GPT)
            rc = data_set_windows(&r->test, r->job.model.block_size, r->job.model.block_size,
                                  r->job.model.vocab_size, e);
        r->has_test = rc == 0;
    }
    if (rc == 0)
        rc = ddprt_memory_preflight(r, e);
    if (rc < 0) {
        ddprt_report(e);
        return -1;
    }
    return 0;
}

/* Prepare: the plan, the preflights (outputs, checkpoints, batch, memory)
 * and the data, loaded once before fork and shared copy-on-write by every
 * worker: a bad file or setting stops the job here with nothing started.
 * Returns 0, or -1 with the error reported. */
static int ddprt_prepare(struct ddprt_run *r, const struct ddprt_flags *fl, struct ddpc_err *e)
{
    if (ddprt_plan(r, fl, e) < 0) {
        ddprt_report(e);
        return -1;
    }
    if (r->job.accelerator == DDPC_ACCEL_AUTO && !r->use_cuda)
        fprintf(stderr, "%s\n", r->accel_note);
    if (r->evaluating)
        return ddprt_prepare_eval(r, e);
    /* the checkpoint named (--resume, checkpoint.resume: PATH) is a file
     * rank 0 can read: said here, once, instead of by rank 0 after the
     * workers started (with the other ranks' "stopped" lines). Rank 0 is
     * node 0's: another node only checks that a --resume exists, as before */
    const char *rp = r->job.checkpoint.resume == DDPC_RESUME_PATH
                   ? r->job.checkpoint.resume_path : NULL;
    if (r->node_rank != 0 && fl->resume && access(fl->resume, R_OK) != 0) {
        fprintf(stderr, "ddpc: error: --resume %s: %s\n", fl->resume, strerror(errno));
        return -1;
    }
    if (r->node_rank == 0 && rp && *rp) {
        const char *how = fl->resume ? "--resume" : "checkpoint.resume:";
        struct stat st;
        if (stat(rp, &st) != 0 || access(rp, R_OK) != 0) {
            fprintf(stderr, "ddpc: error: %s %s: %s\n", how, rp, strerror(errno));
            return -1;
        }
        if (!S_ISREG(st.st_mode)) {
            fprintf(stderr, "ddpc: error: %s %s: %s; name one checkpoint file (a .ckpt in "
                    "checkpoint_dir)%s\n", how, rp,
                    S_ISDIR(st.st_mode) ? "is a directory" : "not a regular file",
                    S_ISDIR(st.st_mode) ? ", or set checkpoint_dir to it and checkpoint.resume: "
                    "auto for its newest" : "");
            return -1;
        }
    }
    if (ddprt_output_preflight(r, e) < 0 || ddprt_ckpt_preflight(r, e) < 0) {
        ddprt_report(e);
        return -1;
    }
    ddprt_remove_stale_temps(r);
    if (ddprt_data_preflight(r, e) < 0 || ddprt_load_data(r, e) < 0) {
        ddprt_report(e);
        return -1;
    }
    if (ddprt_batch_rule(r, e) < 0 || ddprt_memory_preflight(r, e) < 0) {
        ddprt_report(e);
        return -1;
    }
    return 0;
}

/* The run report (report.h) from this configuration's metrics CSV (the
 * version of logging.metrics_csv that carries this run's identity:
 * outver.h). at_end: after a run, where a job without metrics_csv has
 * none and says nothing. Prints "report: PATH": --report's result on
 * standard output; after a run, a note on standard error, so the run's
 * own output (a --sample's text) ends standard output. */
static int ddprt_write_report(const struct ddprt_run *r, int at_end, struct ddpc_err *e)
{
    const struct ddpc_job *j = &r->job;
    const char *base = j->logging.metrics_csv;
    if (!base || !*base)
        return at_end ? 0 : DDPC_FAIL(e, DDPC_E_INVALID, "--report: the job writes no metrics "
                                      "(logging.metrics_csv): there is nothing to draw; set it "
                                      "and train");
    size_t cap = 16384;
    char *ident = malloc(cap), hash[DDPC_IDENT_HASH_LEN + 1], csv[4200], html[4300];
    if (!ident)
        return DDPC_FAIL(e, DDPC_E_NOMEM, "report: out of memory");
    int rc = 0;
    /* the identity the workers give the run (worker.c run_ckpt_init) */
    if (ident_format(j, r->world, r->use_cuda ? "cuda" : "cpu", ident, cap) < 0) {
        rc = DDPC_FAIL(e, DDPC_E_INVALID, "report: the run's description exceeds %zu bytes", cap);
        goto out;
    }
    ident_hash(ident, hash);
    struct ddpc_out_id id = { .job = j->name, .hash = hash, .ident = ident };
    enum ddpc_out_owner who;
    if ((rc = outver_resolve(DDPC_OUT_CSV, base, "logging.metrics_csv", &id, csv, sizeof csv,
                             &who, e)) < 0)
        goto out;
    if (who != DDPC_OUT_OURS) {
        rc = DDPC_FAIL(e, DDPC_E_DATA, "%s: logging.metrics_csv %s holds no metrics of this "
                       "configuration (identity %.8s...): train it first (./job)",
                       at_end ? "report" : "--report", base, hash);
        goto out;
    }
    struct report_input in = { .job = j, .csv = csv, .plan_json = r->p->plan_json,
                               .spec_path = r->p->spec_path, .ddpc_version = r->p->ddpc_version };
    if ((rc = report_write(&in, html, sizeof html, e)) == 0) {
        FILE *o = at_end ? stderr : stdout;
        fprintf(o, "report: %s\n", html);
        if (fflush(o) == EOF)
            rc = DDPC_FAIL(e, DDPC_E_SYS, "writing the report's path: %s", strerror(errno));
    }
out:
    free(ident);
    return rc;
}

/* One rendezvous for every engine: node 0 hosts the store (store.h) for the
 * job's whole life (every attempt) whenever ranks must meet: gloo between
 * nodes, NCCL between GPUs. A port in use is reported here, before any
 * worker starts. A one-node GPU job without --master takes an ephemeral
 * loopback port (no collision between two jobs on one machine, like
 * torchrun --standalone). nccl_timeout bounds the lookup of master_addr
 * as it bounds every client's. Returns 0, or -1 with the error reported. */
static int ddprt_rendezvous(struct ddprt_run *r, const struct ddprt_flags *fl,
                            struct store_host *store, struct ddpc_err *e)
{
    if (r->node_rank != 0 || !(r->gloo || (r->use_cuda && r->world > 1)))
        return 0;
    int standalone = r->use_cuda && r->num_nodes == 1 && !fl->master;
    if (standalone)
        (void)snprintf(r->master_addr, sizeof r->master_addr, "127.0.0.1");
    if (store_host_start(store, r->master_addr, standalone ? 0 : r->master_port,
                         ddpc_deadline_after(r->job.nccl_timeout_s), e) < 0) {
        ddprt_report(e);
        return -1;
    }
    r->master_port = store->port;
    return 0;
}

/* Launch options: this node's workers, their devices, the shared-memory
 * slots, and how long a stopped worker may hold up the others. */
static void ddprt_launch_opts(const struct ddprt_run *r, struct launch_opts *o)
{
    memset(o, 0, sizeof *o);
    o->world = r->local_world;
    o->rank_offset = r->node_rank * r->local_world;
    o->global_world = r->world;
    for (int i = 0; i < r->local_world; i++)
        o->devices[i] = r->devices[i];
    o->device_kind = r->use_cuda ? "cuda:" : "cpu worker";
    o->use_shm = !r->use_cuda && !r->gloo;
    o->grad_slot_floats = DDPRT_GRAD_SLOT;
    o->sync_slot_floats = DDPRT_SYNC_SLOT;
    o->grace_s = 1.0;
    o->single_blas_thread = !r->use_cuda;
    if (r->world > 1) {
        /* a stopped worker holds up the others: no longer than the
         * shortest deadline the spec gives them */
        double rs = r->job.rank_sync_timeout_s, nc = r->job.nccl_timeout_s;
        int use_rs = rs > 0 && (!(nc > 0) || rs <= nc);
        o->stopped_limit_s = use_rs ? rs : nc > 0 ? nc : 0;
        o->stopped_key = use_rs ? "rank_sync_timeout" : "nccl_timeout";
    }
}

/* A node K > 0 that gives up says so in node 0's store, under the key the
 * next attempt's ranks watch while they wait at the rendezvous
 * (a<A+1>/stop, store.h store_get_watch; a0/stop when it stopped before
 * its first attempt, in its preflight): the other nodes, which saw only
 * a dead peer and restart, then stop at once and name this node's reason
 * instead of waiting nccl_timeout for it at every attempt left. One try,
 * bounded by a couple of seconds; a failure is ignored (node 0 may be
 * gone, and then the others know: its store is gone with it). Node 0 says
 * nothing: its store ends with it, which the others notice at once. */
static void ddprt_announce_stop(const struct ddprt_run *r, int next_attempt, const char *why)
{
    if (r->node_rank == 0 || !(r->gloo || (r->use_cuda && r->world > 1)))
        return;
    char key[32], val[400];
    (void)snprintf(key, sizeof key, "a%d/stop", next_attempt);
    int n = snprintf(val, sizeof val, "node %d gave up: %s", r->node_rank, why);
    if (n < 0)
        return;
    val[strcspn(val, "\n")] = '\0';   /* the first line: no hint */
    struct store_client c;
    struct ddpc_err me = { 0 };
    if (store_client_connect_ex(&c, r->master_addr, r->master_port, ddpc_deadline_after(2.0),
                                STORE_CONNECT_ONCE, &me) < 0)
        return;
    (void)store_set(&c, key, val, strlen(val), &me);
    store_client_close(&c);
}

/* Supervise and restart: launch the workers, and again after a failure, up
 * to launch.max_restarts times (resuming from the last checkpoint when there
 * is a checkpoint_dir); an interrupt, a data or configuration error, or the
 * last attempt's failure ends it. Returns the exit status. */
static int ddprt_supervise(struct ddprt_run *r, const struct launch_opts *o, struct ddpc_err *e)
{
    if (env_get()->test_ckpt_stop_after >= 0)   /* see the header */
        ckpt_set_fault(env_get()->test_ckpt_stop_after, DDPC_CKPT_FAULT_STOP);
    if (env_get()->test_ckpt_slow_s > 0)   /* tests: every checkpoint write takes this long */
        ckpt_set_slow(env_get()->test_ckpt_slow_s);

    int status = DDPRT_EXIT_FAIL;
    int max_restarts = r->job.launch.max_restarts > 0 ? r->job.launch.max_restarts : 0;
    /* what ended each attempt, for the history printed when giving up */
    char (*hist)[sizeof e->msg] = calloc((size_t)max_restarts + 1, sizeof *hist);
    if (!hist) {
        fprintf(stderr, "ddpc: error: out of memory\n");
        return status;
    }
    const int has_dir = r->job.checkpoint_dir && *r->job.checkpoint_dir;
    /* the workers say here that they met node 0's store (a later refusal
     * then means it has gone) */
    int *met = mmap(NULL, sizeof *met, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    r->store_met = met == MAP_FAILED ? NULL : met;
    int attempt;
    for (attempt = 0;; attempt++) {
        ddpc_err_clear(e);
        r->attempt = attempt;
        /* the newest checkpoint before this attempt: did it write one? */
        int64_t before_s = 0, before_ns = 0, after_s = 0, after_ns = 0;
        struct ddpc_err me = { 0 };
        if (has_dir)
            (void)ckpt_newest_mtime(r->job.checkpoint_dir, r->job.name, &before_s, &before_ns,
                                    &me);
        status = launch_run(o, ddprt_worker, r, e);
        ddprt_remove_stale_temps(r);
        if (status == 0)
            break;
        if (status == 128 + SIGPIPE)
            break;      /* `./job | head`: as quiet as any tool whose reader left */
        fprintf(stderr, "ddpc: %s\n", e->msg);
        (void)snprintf(hist[attempt], sizeof hist[attempt], "%s", e->msg);
        /* An interrupt is the user's decision, not a fault to retry; a data
         * or configuration error would only fail the same way again. */
        if (status >= 128)
            break;
        if (attempt >= max_restarts) {
            if (max_restarts > 0) {
                fprintf(stderr, "ddpc: giving up after %d attempts (launch.max_restarts: %d):\n",
                        attempt + 1, max_restarts);
                for (int k = 0; k <= attempt; k++)
                    fprintf(stderr, "ddpc:   attempt %d: %s\n", k + 1, hist[k]);
            }
            break;
        }
        if (e->code == DDPC_E_DATA || e->code == DDPC_E_INVALID) {
            fprintf(stderr, "ddpc: not restarting: a %s error would recur\n",
                    e->code == DDPC_E_DATA ? "data" : "configuration");
            break;
        }
        if (e->code == DDPC_E_DIVERGED) {
            fprintf(stderr, "ddpc: not restarting: from the last checkpoint the run would "
                    "diverge again\n");
            break;
        }
        if (e->code == DDPC_E_TAKEN) {
            /* a second copy of a node: the job runs without it */
            fprintf(stderr, "ddpc: not restarting: another ./job runs as this node\n");
            break;
        }
        if (e->code == DDPC_E_STOPPED) {
            /* another node gave up, or node 0 has gone: nobody to meet */
            fprintf(stderr, "ddpc: not restarting: another node has stopped for good, and "
                    "the next attempt would only wait for it\n");
            if (attempt > 0) {
                fprintf(stderr, "ddpc: giving up after %d attempts:\n", attempt + 1);
                for (int k = 0; k <= attempt; k++)
                    fprintf(stderr, "ddpc:   attempt %d: %s\n", k + 1, hist[k]);
            }
            break;
        }
        /* A run that started from a named checkpoint (--resume,
         * checkpoint.resume: PATH) starts from it again until an attempt
         * has written one of its own: checkpoint_dir may hold nothing of
         * this run yet, and resume: auto would then start from scratch. */
        int named = r->job.checkpoint.resume == DDPC_RESUME_PATH &&
                    r->job.checkpoint.resume_path && *r->job.checkpoint.resume_path;
        int wrote = 1;
        ddpc_err_clear(&me);
        if (has_dir && named &&
            ckpt_newest_mtime(r->job.checkpoint_dir, r->job.name, &after_s, &after_ns,
                              &me) == 0 && after_s == before_s && after_ns == before_ns)
            wrote = 0;
        if (has_dir && wrote)
            fprintf(stderr, "ddpc: restarting (%d of %d) from the last checkpoint\n",
                    attempt + 1, max_restarts);
        else if (named)
            fprintf(stderr, "ddpc: restarting (%d of %d) from %s, the checkpoint it started "
                    "from (%s)\n", attempt + 1, max_restarts, r->job.checkpoint.resume_path,
                    has_dir ? "no checkpoint written since" : "no checkpoint_dir is set");
        else
            fprintf(stderr, "ddpc: restarting (%d of %d) from scratch: no checkpoint_dir is "
                    "set\n", attempt + 1, max_restarts);
        if (has_dir && wrote) {
            r->job.checkpoint.resume = DDPC_RESUME_AUTO;
            r->job.checkpoint.resume_path = NULL;
        }
        r->t_launch = ddpc_now();
    }
    /* given up (a failure not retried, restarts used up, an interrupt):
     * tell the other nodes, unless it was they who stopped this one, or
     * this is a second copy of a node, refused while the job runs on
     * (its stop would end the job's next attempt) */
    if (status != 0 && e->code != DDPC_E_STOPPED && e->code != DDPC_E_TAKEN)
        ddprt_announce_stop(r, r->attempt + 1, e->msg);
    if (r->store_met) {
        (void)munmap(r->store_met, sizeof *r->store_met);
        r->store_met = NULL;
    }
    free(hist);
    return status;
}

/* OpenBLAS starts its thread pool when the library loads, before main:
 * a thread per core but one, each of which first maps a 128 MiB buffer
 * and, when that fails, retries forever (its blas_memory_alloc loop).
 * ddpc never gives those threads work: each CPU worker runs BLAS on its
 * own thread (launch_opts.single_blas_thread), the GPU path none. Under a
 * tight ulimit -v the pool's late allocation spun, and the launcher's exit
 * (or fork's atfork hook) then waited on it forever, after the memory
 * preflight had already printed its refusal: the fresh-clone CI's hang.
 * Only OPENBLAS_NUM_THREADS, read at load, keeps the pool from starting,
 * so a job started without it = 1 sets it and execs itself again, once.
 * Where that exec fails (no /proc), the job goes on as before. Called by
 * job.c's main, not by ddprt_main, which tests call inside their own
 * process. */
void ddprt_blas_without_pool(char **argv)
{
    const char *threads = getenv("OPENBLAS_NUM_THREADS");
    if (threads && strcmp(threads, "1") == 0)
        return;
    if (setenv("OPENBLAS_NUM_THREADS", "1", 1) != 0)
        return;
    /* the file /proc/self/exe names, not the link itself: the kernel
     * names the process after what it execs, and ps should say the job */
    char self[PATH_MAX];
    ssize_t n_self = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n_self <= 0 || (size_t)n_self >= sizeof self - 1)
        return;
    self[n_self] = '\0';
    (void)execv(self, argv);   /* returns only on failure */
}

int ddprt_main(const struct ddprt_program *p, int argc, char **argv)
{
    /* ./job >&-: its progress lines went into the metrics CSV it opened */
    if (std_fds_open() < 0)
        return DDPRT_EXIT_FAIL;
    const char *argv0 = argc > 0 && argv[0] ? argv[0] : "job";
    struct ddprt_flags fl;
    int st = ddprt_parse_flags(argc, argv, &fl);
    if (st)
        return st;
    if (fl.help) {
        ddprt_usage(stdout, argv0, p);
        return 0;
    }
    if (fl.version) {
        ddprt_print_version(p, argv0);
        return 0;
    }
    if ((st = ddprt_check_sample(&fl, p->job, argv0)) != 0 ||
        (st = ddprt_check_eval(&fl, p->job, argv0)) != 0)
        return st;

    struct ddpc_err ee = { 0 };
    if (env_load(&ee) < 0) {   /* a DDPC_* variable with a value it cannot take */
        fprintf(stderr, "ddpc: error: %s\n", ee.msg);
        return DDPRT_EXIT_USAGE;
    }

    struct ddprt_run *r = ddprt_run_new(p, &fl);
    if (!r) {
        fprintf(stderr, "ddpc: error: out of memory\n");
        return DDPRT_EXIT_FAIL;
    }
    struct ddpc_err e = { 0 };
    int status = DDPRT_EXIT_FAIL;
    struct store_host store = { 0, -1, 0 };   /* node 0 of a multi-node CPU job */
    if (fl.dry_run) {
        status = ddprt_dry_run(r, &fl, argv0, &e);
    } else if (fl.report) {
        /* the report alone: no worker, no data */
        status = ddprt_plan(r, &fl, &e) == 0 && ddprt_write_report(r, 0, &e) == 0
               ? 0 : DDPRT_EXIT_FAIL;
        if (status)
            ddprt_report(&e);
    } else if (ddprt_prepare(r, &fl, &e) == 0) {
        if (ddprt_rendezvous(r, &fl, &store, &e) == 0) {
            struct launch_opts o;
            ddprt_launch_opts(r, &o);
            status = ddprt_supervise(r, &o, &e);
        }
        /* a finished run's report, beside its metrics (node 0 holds them);
         * the training stands whatever happens to it */
        if (status == 0 && !r->evaluating && r->node_rank == 0 &&
            ddprt_write_report(r, 1, &e) < 0)
            fprintf(stderr, "ddpc: warning: the run report was not written: %s\n", e.msg);
    } else {
        /* a node K > 0 that stops before its first attempt (its data, a
         * preflight, its --resume) gives up as surely as one whose attempts
         * failed: the others, at attempt 0's rendezvous, are told */
        ddprt_announce_stop(r, 0, e.msg[0] ? e.msg : "its ./job stopped before its workers "
                            "started (see its log)");
    }
    store_host_stop(&store);
    data_free(&r->train);
    data_free(&r->test);
    free(r);
    /* after an interrupt the stop signals stay ignored (launch.h): main
     * returns this status, and exit's library destructors (OpenBLAS's)
     * take long enough for Slurm's next SIGTERM to land in them */
    return status;
}
