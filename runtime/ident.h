/* ident.h - a run's identity for checkpoints: what decides the training
 * trajectory, and what does not.
 *
 * defines: ident_format, ident_hash, ident_diff, ident_value
 *
 * ident_format describes a job as text, one "K key=value" line per field,
 * K = 'T' when the field changes the trajectory (the sequence of parameters
 * a run computes) and 'C' when it does not. The checkpoint stores the text
 * and the SHA-256 of its T lines (ident_hash): a checkpoint resumes a job
 * whose T lines are the same; C differences are reported and accepted, T
 * differences are named and refused (ckpt.h, worker.c).
 *
 * The field list: every field keys.def knows (spec/keytab.h walks them,
 * named by their C designators: "learning_rate", "model.items[2].out",
 * "nccl_timeout_s"), plus the run's world size and backend. Which are C is
 * decided in one place, ident.c's ident_compatible; everything else is T,
 * so a key added later refuses a resume across its change until someone
 * lists it, and never accepts a wrong one:
 *   T  world (ranks), backend (cpu/cuda), seed, deterministic,
 *      learning_rate, lr_scaling, batch_size, grad_accumulation,
 *      limit_train_*, precision, grad_clip_norm, model.* (every layer and
 *      its arguments, init, init_from), loss, data.train.*, data.shuffle,
 *      data.drop_last, optimizer.*, schedule.*, and epochs when
 *      schedule.decay is cosine (its length is the run's total steps)
 *   C  epochs (other decays: raising it continues the run), devices,
 *      accelerator, strategy, bucket_cap_mb (slices the same sum),
 *      checkpoint_dir, nccl_timeout, rank_sync_timeout, data.test,
 *      has_test and test_every_n_epochs (evaluation only), checkpoint.*
 *      (cadence, keep_last, export), logging.*, launch.*, other_run_outputs
 * Not described: name (it is already in every checkpoint's file name),
 * version, checkpoint.resume and its path (they say where to resume from).
 * Comments and formatting of the spec change no field: the checkpoint also
 * carries the spec file's hash, so a resume can say "the spec text
 * changed, no field did".
 */
#ifndef DDPC_IDENT_H
#define DDPC_IDENT_H

#include <stddef.h>
#include "job.h"

#define DDPC_IDENT_HASH_LEN 64      /* hex chars, without the NUL */

/* Writes j's description for a run of `world` ranks on `backend` ("cpu",
 * "cuda"; NULL: "cpu") into buf (NUL-terminated). Returns the length, or -1
 * when cap is too small. Same job, world and backend: the same bytes. */
int  ident_format(const struct ddpc_job *j, int world, const char *backend, char *buf,
                  size_t cap);

/* Hex SHA-256 of the T lines of text (in order). */
void ident_hash(const char *text, char out[DDPC_IDENT_HASH_LEN + 1]);

/* Compares the kind ('T' or 'C') lines of old and now by key: writes
 * "key changed: a -> b; key2 ..." into out (NUL-terminated, truncated with
 * "..." when cap is short) and returns how many keys differ. A key in one
 * text only counts as changed from/to "(absent)". old may be "" (a
 * checkpoint without a description): then every line of now differs. */
int  ident_diff(const char *old, const char *now, char kind, char *out, size_t cap);

/* Copies the value of text's kind line for key ("batch_size") into buf
 * (NUL-terminated, cut to cap). Returns 1, or 0 when text has no such line
 * (buf is then ""). */
int  ident_value(const char *text, char kind, const char *key, char *buf, size_t cap);

#endif /* DDPC_IDENT_H */
