/* ckpt.h - checkpoints: atomic write, verified read, resume selection,
 * pruning, pre-flight checks, and safetensors export of the final model.
 *
 * defines: ckpt_write, ckpt_read, ckpt_free, ckpt_find_resume, ckpt_find_newest, ckpt_prune,
 *          ckpt_newest_mtime, ckpt_preflight, ckpt_preflight_n, ckpt_preflight_export,
 *          ckpt_file_size, ckpt_export_safetensors, ckpt_export_identity,
 *          ckpt_remove_stale_export_temps, ckpt_out_open/write/commit/abort,
 *          ckpt_set_fault, ckpt_set_slow (tests only)
 *
 * Only rank 0 calls the writers. Nothing here trains, communicates or
 * exits; every failure comes back as a negative code and a message in
 * struct ddpc_err that names the file and says what to do.
 *
 * File format (version 2), all integers little-endian:
 *
 *   off  size  field
 *     0     8  magic "DDPCCKPT"
 *     8     4  u32 format version (2; version 1 files are still read)
 *    12     4  u32 header size (256)
 *    16    64  identity hash, 64 lowercase hex chars: ident_hash() of the
 *              run's description (ident.h: what decides the trajectory).
 *              Version 1 held the SHA-256 of the spec bytes here.
 *    80     4  u32 world size
 *    84     4  u32 reserved (0)
 *    88     8  i64 epoch            completed epochs
 *    96     8  i64 step             optimizer steps taken
 *   104     8  u64 seed
 *   112     8  i64 sampler_epoch    epoch the sampler is in
 *   120     8  i64 sampler_batches  batches already consumed in that epoch
 *   128    32  u64 rng[4]           xoshiro256** state (struct ddpc_rng)
 *   160     8  i64 optim_step       the optimizer's own step count (Adam's t)
 *   168     8  u64 n_params
 *   176     8  u64 n_opt
 *   184     4  f32 loss_scale       fp16 dynamic loss scale; 0: not recorded
 *                                   (fp32/bf16, or a file from before the field)
 *   188     4  u32 good_steps       the loss scaler's good steps in a row
 *   192     8  i64 skipped_steps    optimizer steps the loss scaler skipped
 *   200     4  u32 ident_len        bytes of description after the header
 *                                   (version 2; at most DDPC_CKPT_IDENT_MAX)
 *   204    32  spec file SHA-256, raw (version 2; zeros: not recorded)
 *   236     8  i64 train_samples    samples of the training set the sampler
 *                                   shuffled (0: not recorded, a file from
 *                                   before the field)
 *   244     8  f64 epoch_loss     a mid-epoch position's training loss so far
 *                                   in its epoch: summed over every rank's samples
 *                                   (a gpt's tokens); 0: none (at an epoch's end,
 *                                   or a file from before the field)
 *              (184..199 were reserved and written as 0 before they had a
 *              meaning, so older files read as "not recorded": version 1)
 *   252     4  u32 CRC32C of bytes [0, 252): the header checks itself, so a
 *              flipped size field reads as corruption, not as truncation
 *   256        the run's description (ident.h), ident_len bytes, no NUL
 *     .        float32 params [n_params]
 *     .        float32 opt    [n_opt]
 *     .     4  u32 CRC32C of every preceding byte
 *
 * Names: <job>-e<epoch:04>-s<step:09>-<tag>.ckpt, tag the first 8 hex
 * digits of the identity hash, so `ls` sorts them by time for any run
 * shorter than 10^9 steps (readers parse the numbers anyway), and two runs
 * of different configurations under one job name never write the same
 * name. Names without -<tag> (written before version 2) are read, never
 * pruned.
 * Temp files: .<final name>.tmp.<host>.<pid>, in the same directory (rename
 * is only atomic within one file system); no reader ever matches them.
 */
#ifndef DDPC_CKPT_H
#define DDPC_CKPT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include "err.h"
#include "job.h"
#include "outver.h"

#define DDPC_CKPT_VERSION     2
#define DDPC_CKPT_TAG_LEN     8     /* hex digits of the identity hash in file names */
#define DDPC_CKPT_IDENT_MAX   65536 /* bytes of description a reader accepts */
#define DDPC_CKPT_HEADER_SIZE 256
#define DDPC_CKPT_HASH_LEN    64    /* hex chars, without the NUL */

struct ddpc_ckpt {
    char     ident_hash[DDPC_CKPT_HASH_LEN + 1]; /* NUL-terminated hex: the identity */
    char     spec_hash[DDPC_CKPT_HASH_LEN + 1];  /* the spec file's SHA-256 in hex; ""
                                                    when not recorded */
    char    *ident;             /* description (ident.h), NUL-terminated; NULL when
                                   none (version 1). The writer does not own it;
                                   ckpt_read's result does (ckpt_free) */
    int32_t  world;
    int64_t  epoch;             /* completed epochs */
    int64_t  step;              /* optimizer steps taken */
    uint64_t seed;
    int64_t  sampler_epoch;     /* a mid-epoch checkpoint resumes at */
    int64_t  sampler_batches;   /*   (sampler_epoch, sampler_batches) exactly */
    uint64_t rng[4];
    int64_t  optim_step;
    size_t   n_params;
    size_t   n_opt;             /* 0, n_params (momentum) or 2*n_params (Adam m, v) */
    float    loss_scale;        /* fp16 loss scaler state; 0 (and 0, 0): none */
    int32_t  good_steps;
    int64_t  skipped_steps;
    int64_t  train_samples;     /* the training set's size (a mid-epoch position is
                                   into its permutation); 0: not recorded */
    double   epoch_loss;        /* the loss summed over the epoch's batches before a
                                   mid-epoch position, every rank's; 0: none */
    float   *params;            /* [n_params] */
    float   *opt;               /* [n_opt]; NULL when n_opt is 0 */
};

/* Bytes of a checkpoint file holding n_params + n_opt floats, without its
 * description (add at most DDPC_CKPT_IDENT_MAX for it). */
size_t ckpt_file_size(size_t n_params, size_t n_opt);

/* Writes c atomically as dir/<job>-e<epoch>-s<step>-<tag>.ckpt: temp file in dir
 * (O_CREAT|O_EXCL, 0644), full writes, fsync, rename, fsync(dir). On any
 * failure the temp file is removed and every earlier checkpoint is left as
 * it was. path_out (may be NULL) receives the final path. dir must exist
 * (ckpt_preflight creates it). */
int  ckpt_write(const char *dir, const char *job_name, const struct ddpc_ckpt *c,
                char *path_out, size_t path_cap, struct ddpc_err *e);

/* Reads and verifies one file: magic, header checksum, version, sizes
 * against the file size, payload checksum. On success *out owns params and
 * opt: release them with ckpt_free. On failure *out holds nothing to free. */
int  ckpt_read(const char *path, struct ddpc_ckpt *out, struct ddpc_err *e);
/* Frees what ckpt_read allocated; safe on a zeroed or already-freed struct. */
void ckpt_free(struct ddpc_ckpt *c);

/* Picks the checkpoint to resume from. ident_hash is the job's identity
 * (ident.h), ident its description (for messages; may be NULL).
 *   explicit_path != NULL: exactly that file. Any read error is an error.
 *     A different identity is allowed (the user named it), with one line
 *     to report saying so and what differs.
 *   explicit_path == NULL (resume: auto): the newest valid <job>-*.ckpt in
 *     dir with this identity, by (step, epoch). A corrupt or truncated one
 *     gets one line on report and the previous one is tried. When only
 *     checkpoints of other identities are readable, the newest is refused:
 *     an error naming what changed ("learning_rate changed: 0.01 -> 0.02")
 *     and how to proceed. When this identity has one too, it is used and
 *     report gets one line about the others. Temp files are ignored.
 * ident_hash NULL takes any identity. World size, seed and shapes are the
 * caller's to compare with the job (it knows which differences matter).
 * Returns 1 with *out filled (ckpt_free it) and path_out set; 0 when there
 * is no checkpoint (no directory, or no file of this job: start fresh);
 * negative on error, including "files exist but none is readable", so a
 * job never silently restarts from scratch over a broken history.
 * report may be NULL. */
int  ckpt_find_resume(const char *dir, const char *job_name, const char *ident_hash,
                      const char *ident, const char *explicit_path, struct ddpc_ckpt *out,
                      char *path_out, size_t path_cap, FILE *report,
                      struct ddpc_err *e);

/* The newest readable checkpoint of identity ident_hash among job_name's
 * in dir (./job --eval's "last"): by name's tag, then the header's full
 * identity. Never writes; a corrupt one gets a line on report (may be NULL)
 * and the one before is tried. Returns 1 with *out filled (ckpt_free it)
 * and path_out set, 0 when there is none (no directory, or no file of this
 * identity: *others counts those of other identities), negative on error. */
int  ckpt_find_newest(const char *dir, const char *job_name, const char *ident_hash,
                      struct ddpc_ckpt *out, char *path_out, size_t path_cap, int *others,
                      FILE *report, struct ddpc_err *e);

/* Removes this job's checkpoints of identity ident_hash beyond the
 * keep_last most recently written (modification time, then step;
 * keep_last <= 0 or ident_hash NULL keeps all), and temp files left by dead
 * writers on this host (a crash mid-write; their host and pid are in the
 * temp name). Only files whose name carries this identity's tag AND whose
 * header holds the full identity hash are ever removed: another
 * configuration's checkpoints under the same job name, older untagged ones
 * and unreadable ones are left alone. Call only after ckpt_write returned
 * 0, so the newest one is durable. A run started over in a directory
 * holding an older run's higher-step checkpoints keeps its own. */
int  ckpt_prune(const char *dir, const char *job_name, const char *ident_hash, int keep_last,
                struct ddpc_err *e);

/* The newest modification time (*sec, *nsec) among job_name's checkpoint
 * files in dir, any identity; 0, 0 when there is none (or no dir). The
 * launcher compares it before and after an attempt to learn whether the
 * attempt wrote a checkpoint: times of one file system, never this
 * machine's clock. */
int  ckpt_newest_mtime(const char *dir, const char *job_name, int64_t *sec, int64_t *nsec,
                       struct ddpc_err *e);

/* Before training: mkdir -p dir, prove it writable (create and unlink a
 * probe file), and require free space >= 2 * ckpt_bytes (the new file is
 * complete before the old one is pruned). */
int  ckpt_preflight(const char *dir, size_t ckpt_bytes, struct ddpc_err *e);
/* The same with room for `copies` checkpoints (fewer than 2 counts as 2):
 * the launcher passes how many the run holds at once (keep_last + 1). */
int  ckpt_preflight_n(const char *dir, size_t ckpt_bytes, int copies, struct ddpc_err *e);
/* Before training: the export file's directory exists (mkdir -p) and is
 * writable, and path is not a directory, so a run does not fail at its very
 * end. NULL or "" is no export: 0. */
int  ckpt_preflight_export(const char *path, struct ddpc_err *e);
/* Removes temp files of the export at path left by dead writers on this
 * host (an export interrupted by a signal); ckpt_prune does the same for
 * checkpoint_dir. NULL or "" is no export: 0. */
int  ckpt_remove_stale_export_temps(const char *path, struct ddpc_err *e);

/* An output file written atomically, as checkpoints are: a temp file
 * beside it (.<name>.tmp.<host>.<pid>, which ckpt_remove_stale_export_temps
 * finds when its writer died), fsync, rename over the name, fsync(dir).
 * ckpt_out_open creates missing parent directories; what ("--predict -o")
 * and key (what to change) prefix messages, intact says what a failure
 * leaves ("any earlier file is intact"). ckpt_out_abort always, after a
 * commit too: it unlinks the temp file unless it was renamed. */
struct ckpt_afile {
    int      fd;                /* -1 when closed */
    int      renamed;           /* the final name exists: nothing to unlink */
    uint64_t written;           /* bytes written so far */
    uint64_t total;             /* bytes the file will have, for messages */
    const char *what;           /* "checkpoint_dir <dir>" etc., message prefix */
    const char *intact;         /* what a failure leaves intact, for messages */
    char     dir[4096];
    char     tmp[4096];
    char     final[4096];
};
int  ckpt_out_open(struct ckpt_afile *f, const char *path, const char *what, const char *key,
                   const char *intact, struct ddpc_err *e);
int  ckpt_out_write(struct ckpt_afile *f, const void *buf, size_t n, struct ddpc_err *e);
int  ckpt_out_commit(struct ckpt_afile *f, struct ddpc_err *e);
void ckpt_out_abort(struct ckpt_afile *f);

/* Writes the model's parameters (flat buffer, model.h's order) as a
 * safetensors file, atomically, creating missing parent directories. Tensor names follow a PyTorch module whose
 * `layers` is an nn.ModuleList (or a Sequential of Linear layers only) of
 * nn.Linear, one per pair of sizes in job->model.layers:
 *     W_l [out_l, in_l] -> "layers.<l>.weight"   (Linear's layout, no transpose)
 *     b_l [out_l]       -> "layers.<l>.bias"
 * type linear is the one-layer case ("layers.0.*"). Activations have no
 * parameters and are recorded in __metadata__ only. n_params must equal the
 * count the shapes imply.
 * id (may be NULL: path itself, replaced): the run's identity, written into
 * __metadata__ (ddpc_identity, ddpc_ident: its hash and description), and
 * the file goes to the version of path outver.h picks (path, or
 * <stem>-v<k><ext> beside another configuration's export); written (may be
 * NULL) receives the path written. */
int  ckpt_export_safetensors(const char *path, const struct ddpc_job *job,
                             const float *params, size_t n_params, const struct ddpc_out_id *id,
                             char *written, size_t written_cap, struct ddpc_err *e);

/* The identity an export carries: hash (65 bytes) its __metadata__'s
 * ddpc_identity, "" when it has none (an older ddpc's, another program's);
 * desc (may be NULL) its ddpc_ident description. Returns 1 for a
 * safetensors file, -1 for anything else or an unreadable file. Never
 * blocks on a FIFO. */
int  ckpt_export_identity(const char *path, char hash[DDPC_CKPT_HASH_LEN + 1], char *desc,
                          size_t desc_cap);

/* Writes a layer list's tensors (spec/layers.h: names, shapes, order) as
 * safetensors, atomically: parameters from params, batch-norm buffers from
 * state (num_batches_tracked as I64, as PyTorch keeps it). A
 * torch.nn.Module whose `layers` is the matching nn.Sequential loads it
 * with strict=True (tests/torch_ref.py builds one). A gpt's names are
 * nanoGPT's, and its tied weight (net->tie_tensor) is written a second
 * time as net->tie_name (lm_head.weight), so nanoGPT's GPT loads the file
 * with strict=True (its attn.bias mask buffers aside, on torch < 2.0). */
struct ddpc_net;
/* model.init_from: reads a safetensors file holding exactly net's tensors
 * (names, shapes, F32; num_batches_tracked I64 or F32) into host params and
 * state; with a tied weight also its second name, which must hold the same
 * values. Every mismatch is an error naming the tensor and both shapes. The
 * file is untrusted: every offset is checked against the file's size. */
int  ckpt_read_net(const char *path, const struct ddpc_net *net, float *params, float *state,
                   struct ddpc_err *e);
/* The same, messages naming the file as `what` ("--model") instead of
 * model.init_from. */
int  ckpt_read_net_as(const char *path, const char *what, const struct ddpc_net *net,
                      float *params, float *state, struct ddpc_err *e);
/* id, written: as ckpt_export_safetensors. */
int  ckpt_export_net(const char *path, const struct ddpc_job *job, const struct ddpc_net *net,
                     const float *params, const float *state, const struct ddpc_out_id *id,
                     char *written, size_t written_cap, struct ddpc_err *e);

/* TEST ONLY: every checkpoint write sleeps this many seconds before its
 * rename (a slow file system). 0: off. */
void ckpt_set_slow(double seconds);

/* TEST ONLY: fault injection for the writers in this file. After this call,
 * every temp file written allows exactly fail_after_bytes bytes (writes are
 * cut short to land on that boundary, which also exercises the short-write
 * loop); the next write then fails with errno = err, or, when err is
 * DDPC_CKPT_FAULT_STOP, the process stops itself with SIGSTOP (for kill -9
 * tests). fail_after_bytes < 0 turns injection off. Process-wide; never
 * called outside tests. */
#define DDPC_CKPT_FAULT_STOP (-1)
void ckpt_set_fault(int64_t fail_after_bytes, int err);

#endif /* DDPC_CKPT_H */
