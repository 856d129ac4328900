/* predict.h - ./job --predict INPUT -o OUT: the model over new inputs,
 * streamed, on every rank, into one NPY or CSV file.
 *
 * defines: struct predict_ctx, predict_run, predict_preflight
 *
 * INPUT (its format read from its bytes, gzip or not):
 *   NPY      "\x93NUMPY": an array of samples, [n, features...], any dtype
 *            data.train reads (uint8 as pixels / 255, as training reads them)
 *   IDX      00 00 <type> <dims>: the images file alone (no labels)
 *   CSV      otherwise: one sample per line; a first line that is not all
 *            numbers is a header; as many columns as the model has inputs,
 *            or one more when the job trains on CSV: its label_column is
 *            dropped
 *   a gpt:   a text file (its bytes are the tokens, vocab_size >= 256) or
 *            an llm.c token shard (magic 20240520)
 * OUT, by its extension (.npy or .csv), one row per sample, in input order:
 *   classification (loss cross_entropy): class, the most likely class id,
 *            then the C softmax probabilities: NPY records
 *            [('class', '<i4'), ('prob', '<f4', (C,))], CSV class,p0,...,p<C-1>
 *   regression (loss mse): the model's K outputs: NPY '<f4' [n, K], CSV
 *            y0,...,y<K-1>
 *   a gpt:   one row per token position p of INPUT: token (the input token
 *            at p), next (the most likely next token given the context),
 *            prob (its probability) and logprob (the log-probability of
 *            the token that does follow p in INPUT; NaN at the last
 *            position). The context of position p is its window: INPUT is
 *            cut into windows of block_size tokens (the last may be
 *            shorter), as data.test is for test_loss, so over the positions
 *            of whole windows the mean of -logprob is the test_loss
 *            --eval --data INPUT prints. NPY records
 *            [('token','<i4'), ('next','<i4'), ('prob','<f4'), ('logprob','<f4')].
 * Work: rounds of world x rows samples; in round r, rank k runs samples
 * [(r * world + k) * rows, + rows) (reading only those bytes of a file it
 * can seek in; a gzip stream, or a CSV's lines, it reads past), the ranks
 * gather the outputs (a sum over zeros), and rank 0 appends them to the
 * temp file beside OUT, which is renamed over OUT at the end (ckpt.h's
 * atomic writer: a failure or kill leaves no partial OUT, and OUT's old
 * contents until then). Memory does not grow with INPUT: one round's rows.
 */
#ifndef DDPC_PREDICT_H
#define DDPC_PREDICT_H

#include <stdio.h>
#include "comm.h"
#include "err.h"
#include "job.h"
#include "model.h"
#include "ops.h"

struct predict_ctx {
    const struct ddpc_job *job;
    struct ddpc_model *model;   /* the weights loaded; set to eval mode here */
    struct ddpc_ops   *ops;
    struct ddpc_comm  *comm;    /* NULL: world 1 */
    int    rank, world;
    int    rows;                /* samples per forward (<= model->max_batch) */
    float *dx;                  /* backend [rows, in_dim] */
    float *hx;                  /* host [rows, in_dim] (dx itself on host memory) */
    int    in_dim;              /* floats per sample */
    int    out_dim;             /* logits per row: classes, targets, vocab_size */
    int    seq_len;             /* rows of logits per sample: block_size (gpt), else 1 */
    FILE  *out;                 /* rank 0's report stream; NULL elsewhere */
    double timeout_s;           /* each collective's deadline (nccl_timeout); 0: none */
};

/* Every rank: the whole of it (see above). Rank 0 writes OUT. */
int predict_run(const struct predict_ctx *c, const char *input, const char *output,
                struct ddpc_err *e);

/* The launcher, before any worker starts: OUT ends in .npy or .csv, is
 * not INPUT, and its directory can be written; INPUT can be read and is a
 * format this model takes, with the model's number of inputs. */
int predict_preflight(const struct ddpc_job *job, const char *input, const char *output,
                      struct ddpc_err *e);

#endif /* DDPC_PREDICT_H */
