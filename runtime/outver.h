/* outver.h - outputs that carry the run's identity, and versions beside
 * them: a run never overwrites what another configuration wrote.
 *
 * defines: struct ddpc_out_id, outver_name, outver_identity, outver_resolve,
 *          outver_refuse, outver_note
 *
 * Checkpoints carry the run's identity (ident.h) in their names; the other
 * outputs carry it inside: the export in its safetensors __metadata__
 * (ddpc_identity), the metrics CSV in a first comment line
 * ("# ddpc job=NAME identity=HASH"), a TensorBoard directory in its lock
 * file (.ddpc.lock: "job=NAME identity=HASH"). A path that holds another
 * configuration's output (another identity, or a file ddpc did not mark: an
 * older ddpc's, another tool's) is never written: the run writes the next
 * version beside it, Lightning's way, and says so (other_run_outputs:
 * version, the default), or stops naming it (refuse):
 *   a file     model.safetensors -> model-v1.safetensors, model-v2...
 *              (the number before the last extension; none: model-v1)
 *   a directory runs/            -> runs/version_1/, runs/version_2/ ...
 *              (inside it, so `tensorboard --logdir runs` shows them all)
 * Version k is taken when it is absent or holds this run's identity (a
 * rerun of one configuration writes over its own files: same identity,
 * same trajectory), skipping those of other identities; the lowest such k
 * wins, so the choice is the same every time for the same files.
 * Resolution only reads; the writers (ckpt.c, metrics.c) make it safe
 * against a second run choosing the same free name at the same time (an
 * exclusive link for the export, the CSV's and directory's flock).
 */
#ifndef DDPC_OUTVER_H
#define DDPC_OUTVER_H

#include <stddef.h>
#include <stdio.h>
#include "err.h"

#define DDPC_OUTVER_MAX 10000   /* versions looked at before giving up */

/* The run an output belongs to. */
struct ddpc_out_id {
    const char *job;        /* the job's name */
    const char *hash;       /* ident_hash (ident.h): 64 hex digits */
    const char *ident;      /* its description, for messages; may be NULL */
    int         refuse;     /* other_run_outputs: refuse (0: version) */
};

enum ddpc_out_kind {
    DDPC_OUT_EXPORT,        /* checkpoint.export: a safetensors file */
    DDPC_OUT_CSV,           /* logging.metrics_csv */
    DDPC_OUT_TB,            /* logging.tensorboard: a directory */
};

/* What a path holds, for one kind of output. */
enum ddpc_out_owner {
    DDPC_OUT_FREE,          /* absent, or empty: anyone may take it */
    DDPC_OUT_OURS,          /* this identity's */
    DDPC_OUT_OTHER,         /* another identity's, or unmarked content */
};

/* Version k of base (k 0: base itself) into out. -1 when it does not fit. */
int outver_name(enum ddpc_out_kind kind, const char *base, int k, char *out, size_t cap);

/* Who path belongs to, given this run's hash. other_hash (65 bytes; may be
 * NULL) receives the identity it holds ("" when unmarked). Never writes,
 * never blocks (a FIFO at the path is OTHER). */
enum ddpc_out_owner outver_identity(enum ddpc_out_kind kind, const char *path,
                                    const char *hash, char *other_hash);

/* The version of base this run writes: out receives it, *owner what is
 * there now (FREE or OURS). With id->refuse, base itself or an error
 * naming what holds it. key names the spec key in messages
 * ("checkpoint.export"). */
int outver_resolve(enum ddpc_out_kind kind, const char *base, const char *key,
                   const struct ddpc_out_id *id, char *out, size_t cap,
                   enum ddpc_out_owner *owner, struct ddpc_err *e);

/* The refusal of other_run_outputs: refuse, naming whose output base
 * holds and the version `version` would write. Returns its code. */
int outver_refuse(enum ddpc_out_kind kind, const char *key, const char *base,
                  const struct ddpc_out_id *id, struct ddpc_err *e);

/* The line a run prints when it writes a version instead of base:
 * "note: KEY BASE holds another configuration's WHAT (identity 1a2b3c4d...;
 * this run's 5e6f7a8b...): this run writes CHOSEN". */
void outver_note(FILE *f, enum ddpc_out_kind kind, const char *key, const char *base,
                 const char *chosen, const struct ddpc_out_id *id);

#endif /* DDPC_OUTVER_H */
