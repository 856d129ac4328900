/* evaluate.h - a trained model put to use without training:
 *   ./job --eval    [--checkpoint last|FILE | --model FILE.safetensors]
 *                   [--data PATH [--labels PATH]]
 *   ./job --predict INPUT -o OUT [--checkpoint last|FILE | --model FILE.safetensors]
 *
 * defines: struct ddpc_model_source, struct ddpc_eval_opts, evaluate_source_parse,
 *          evaluate_load, evaluate_report
 *
 * Which weights (struct ddpc_model_source), read by rank 0 and broadcast
 * by the worker (worker.c run_eval):
 *   default  the job's newest checkpoint of this configuration in
 *            checkpoint_dir ("last"); a job without checkpoint_dir: its
 *            export (checkpoint.export, the version this configuration
 *            wrote: outver.h)
 *   last     the newest checkpoint of this configuration (its identity,
 *            as resume picks it); none is an error naming the directory
 *   FILE     that checkpoint (a .ckpt of any configuration whose model has
 *            this job's shapes; another identity is said, not refused)
 *   --model  a safetensors export with this job's tensor names and shapes
 *            (ddpc's own, or one PyTorch saved under those names)
 * "best" (the best checkpoint by checkpoint.monitor, issue 33's model
 * selection) slots in as one more kind: evaluate_source_parse maps the
 * word to DDPC_SOURCE_BEST, and evaluate_load asks the checkpoint module
 * for that file and reads it as a FILE; until the job keeps a best
 * checkpoint, the word is refused with that reason. A checkpoint file
 * named best or last is given as ./best.
 *
 * Nothing here writes: not a checkpoint, not a probe file, not a prune
 * (the launcher skips its checkpoint preflights too in these modes).
 */
#ifndef DDPC_EVALUATE_H
#define DDPC_EVALUATE_H

#include <stddef.h>
#include <stdio.h>
#include "err.h"
#include "job.h"

enum ddpc_source_kind {
    DDPC_SOURCE_DEFAULT,    /* last, or the export without checkpoint_dir */
    DDPC_SOURCE_LAST,
    DDPC_SOURCE_BEST,       /* not kept yet: refused with the reason */
    DDPC_SOURCE_FILE,       /* a checkpoint file */
    DDPC_SOURCE_EXPORT,     /* a safetensors export */
};

struct ddpc_model_source {
    enum ddpc_source_kind kind;
    const char *path;       /* FILE, EXPORT */
};

/* What --eval and --predict were asked for (ddprt.c fills it). */
struct ddpc_eval_opts {
    int         predict;    /* 0: --eval, 1: --predict */
    struct ddpc_model_source src;
    const char *data_desc;  /* --eval: "data.test" or the --data path, for the report */
    const char *input;      /* --predict INPUT */
    const char *output;     /* --predict -o OUT (.npy or .csv) */
};

/* --checkpoint WORD: "last", "best" or a file path; --model PATH. 0, or -1
 * with a message in why (cap bytes). */
int evaluate_source_parse(const char *checkpoint, const char *model,
                          struct ddpc_model_source *src, char *why, size_t cap);

struct ddpc_net;
struct ddpc_out_id;

/* Rank 0: resolves src for job (id: this run's identity, for "last" and
 * the default export) and reads the weights into params[net->n_params]
 * and state[net->n_state]. Shapes must be the job's: a checkpoint of
 * another model is refused naming both counts, an export through
 * ckpt_read_net's checks. Notes (another configuration's checkpoint,
 * skipped corrupt files) go to report (may be NULL); what (cap bytes)
 * receives a description of the weights read ("checkpoint ckpt/x.ckpt
 * (epoch 3, step 1407)"). Never writes a file. */
int evaluate_load(const struct ddpc_job *job, const struct ddpc_net *net,
                  const struct ddpc_out_id *id, const struct ddpc_model_source *src,
                  float *params, float *state, FILE *report, char *what, size_t cap,
                  struct ddpc_err *e);

/* Rank 0's result line of --eval, as the training's summary spells the
 * same numbers (so they can be compared):
 *   done eval samples=N test_loss=L [test_accuracy=A] wall_s=S
 * a gpt: tokens=N test_loss=L perplexity=P. accuracy < 0: none. */
void evaluate_report(FILE *out, const struct ddpc_job *job, const char *what,
                     const char *data_desc, double samples, double loss, double accuracy,
                     double wall_s);

#endif /* DDPC_EVALUATE_H */
