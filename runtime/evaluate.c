/* evaluate.c - which weights ./job --eval and --predict use, read for rank 0
 * (evaluate.h), and the --eval result line.
 *
 * Owns: the meaning of --checkpoint and --model, and the messages of a
 * model that cannot be found or does not fit. Never writes a file, never
 * communicates (the worker broadcasts what rank 0 read), never exits.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ckpt.h"
#include "evaluate.h"
#include "ident.h"
#include "layers.h"
#include "outver.h"

int evaluate_source_parse(const char *checkpoint, const char *model,
                          struct ddpc_model_source *src, char *why, size_t cap)
{
    memset(src, 0, sizeof *src);
    if (checkpoint && model) {
        (void)snprintf(why, cap, "--checkpoint %s and --model %s name two models; give one",
                       checkpoint, model);
        return -1;
    }
    if ((checkpoint && !*checkpoint) || (model && !*model)) {
        (void)snprintf(why, cap, "%s needs a value", checkpoint ? "--checkpoint" : "--model");
        return -1;
    }
    if (model) {
        src->kind = DDPC_SOURCE_EXPORT;
        src->path = model;
    } else if (checkpoint && strcmp(checkpoint, "last") == 0) {
        src->kind = DDPC_SOURCE_LAST;
    } else if (checkpoint && strcmp(checkpoint, "best") == 0) {
        src->kind = DDPC_SOURCE_BEST;
    } else if (checkpoint) {
        src->kind = DDPC_SOURCE_FILE;
        src->path = checkpoint;
    }
    return 0;
}

/* A checkpoint's tensors into params and state, its shapes checked. */
static int load_ckpt(const struct ddpc_ckpt *c, const char *path, const struct ddpc_net *net,
                     float *params, float *state, struct ddpc_err *e)
{
    size_t want = net->n_params + net->n_state;
    if (c->n_params != want)
        return DDPC_FAIL(e, DDPC_E_DATA, "checkpoint %s holds %zu parameters%s; this job's "
                         "model has %zu%s: it is another model's checkpoint. Name one of this "
                         "model (--checkpoint FILE), or its export (--model FILE.safetensors)",
                         path, c->n_params, net->n_state ? " and batch-norm values" : "", want,
                         net->n_state ? " (parameters and batch-norm values)" : "");
    memcpy(params, c->params, net->n_params * sizeof *params);
    if (net->n_state)
        memcpy(state, c->params + net->n_params, net->n_state * sizeof *state);
    return 0;
}

/* The note for weights of another configuration, named explicitly. */
static void other_note(FILE *report, const char *what, const char *path, const char *hash,
                       const char *desc, const struct ddpc_out_id *id)
{
    if (!report || !hash[0] || !id || !id->hash || strcmp(hash, id->hash) == 0)
        return;
    char d[600] = "";
    if (desc && desc[0] && id->ident) {
        char diff[560];
        if (ident_diff(desc, id->ident, 'T', diff, sizeof diff) > 0)
            (void)snprintf(d, sizeof d, ": %s", diff);
    }
    fprintf(report, "note: %s %s was written by another configuration (identity %.8s...; this "
            "job's %.8s...%s): used because it was named\n", what, path, hash, id->hash, d);
}

int evaluate_load(const struct ddpc_job *job, const struct ddpc_net *net,
                  const struct ddpc_out_id *id, const struct ddpc_model_source *src,
                  float *params, float *state, FILE *report, char *what, size_t cap,
                  struct ddpc_err *e)
{
    struct ddpc_model_source s = *src;
    const int has_dir = job->checkpoint_dir && *job->checkpoint_dir;
    const char *exp = job->checkpoint.export_path;
    char chosen[4096];
    if (s.kind == DDPC_SOURCE_DEFAULT) {
        if (has_dir) {
            s.kind = DDPC_SOURCE_LAST;
        } else if (exp && *exp) {
            /* the version of the export this configuration wrote */
            struct ddpc_out_id look = *id;
            enum ddpc_out_owner who;
            look.refuse = 0;
            DDPC_TRY(outver_resolve(DDPC_OUT_EXPORT, exp, "checkpoint.export", &look, chosen,
                                    sizeof chosen, &who, e));
            if (who != DDPC_OUT_OURS)
                return DDPC_FAIL(e, DDPC_E_DATA, "no model to use: the job has no "
                                 "checkpoint_dir, and checkpoint.export %s holds no export of "
                                 "this configuration (train it first: ./job), or name the "
                                 "model: --model FILE.safetensors, --checkpoint FILE", exp);
            s.kind = DDPC_SOURCE_EXPORT;
            s.path = chosen;
        } else {
            return DDPC_FAIL(e, DDPC_E_INVALID, "no model to use: the job has neither "
                             "checkpoint_dir nor checkpoint.export; name the model: --checkpoint "
                             "FILE (a .ckpt) or --model FILE.safetensors");
        }
    }
    struct ddpc_ckpt c;
    char path[4096], hash[DDPC_CKPT_HASH_LEN + 1];
    int rc;
    switch (s.kind) {
    case DDPC_SOURCE_BEST:
        return DDPC_FAIL(e, DDPC_E_INVALID, "--checkpoint best: this job keeps no best "
                         "checkpoint (that needs checkpoint.monitor, which this ddpc does not "
                         "have); use --checkpoint last, or name a file (./best for a file of "
                         "that name)");
    case DDPC_SOURCE_LAST: {
        if (!has_dir)
            return DDPC_FAIL(e, DDPC_E_INVALID, "--checkpoint last: the job has no "
                             "checkpoint_dir; name a checkpoint file (--checkpoint FILE) or an "
                             "export (--model FILE.safetensors)");
        int others = 0;
        rc = ckpt_find_newest(job->checkpoint_dir, job->name, id->hash, &c, path, sizeof path,
                              &others, report, e);
        if (rc < 0)
            return rc;
        if (rc == 0)
            return DDPC_FAIL(e, DDPC_E_DATA, "no checkpoint of this configuration of job %s in "
                             "checkpoint_dir %s%s%s: train it first (./job), or name the model: "
                             "--checkpoint FILE, --model FILE.safetensors", job->name,
                             job->checkpoint_dir, others ? " (it holds checkpoints of other "
                             "configurations, by their identity in the name: name one with "
                             "--checkpoint FILE to use it anyway" : "", others ? ")" : "");
        break;
    }
    case DDPC_SOURCE_FILE:
        DDPC_TRY(ckpt_read(s.path, &c, e));
        (void)snprintf(path, sizeof path, "%s", s.path);
        other_note(report, "checkpoint", path, c.ident_hash, c.ident, id);
        break;
    case DDPC_SOURCE_EXPORT: {
        DDPC_TRY(ckpt_read_net_as(s.path, "--model", net, params, state, e));
        char *desc = malloc(65536);
        if (desc && ckpt_export_identity(s.path, hash, desc, 65536) > 0)
            other_note(report, "export", s.path, hash, desc, id);
        free(desc);
        (void)snprintf(what, cap, "export %s", s.path);
        return 0;
    }
    default:
        return DDPC_FAIL(e, DDPC_E_INVALID, "evaluate_load: model source %d", (int)s.kind);
    }
    rc = load_ckpt(&c, path, net, params, state, e);
    if (rc == 0)
        (void)snprintf(what, cap, "checkpoint %s (epoch %lld, step %lld%s)", path,
                       (long long)c.sampler_epoch, (long long)c.step,
                       c.sampler_batches ? ", mid-epoch" : "");
    ckpt_free(&c);
    return rc;
}

void evaluate_report(FILE *out, const struct ddpc_job *job, const char *what,
                     const char *data_desc, double samples, double loss, double accuracy,
                     double wall_s)
{
    if (!out)
        return;
    fprintf(out, "eval: %s on %s\n", what, data_desc);
    if (job->model.type == DDPC_MODEL_GPT)
        fprintf(out, "done eval tokens=%.0f test_loss=%.4f perplexity=%.4f", samples, loss,
                exp(loss));
    else
        fprintf(out, "done eval samples=%.0f test_loss=%.4f", samples, loss);
    if (accuracy >= 0)
        fprintf(out, " test_accuracy=%.4f", accuracy);
    fprintf(out, " wall_s=%.3f\n", wall_s);
}
