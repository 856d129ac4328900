/* emit.h - job + plan -> job_config.h, job.plan.json, job.sbatch via m4.
 *
 * defines: emit_files, emit_prologue, emit_m4, emit_install
 *
 * emit_prologue turns every value into one m4 definition (M_NAME, M_SEED,
 * ...) whose body is already a C token, a C string literal, a JSON text or a
 * shell word, made only of printable ASCII, and quoted twice with quote
 * strings made of non-ASCII bytes, so expanding it in a template yields the
 * text exactly and never runs an m4 builtin. Comments are off (# is plain
 * text) and m4 runs with -P, so only m4_-prefixed words are builtins.
 * emit_m4 starts m4 with an argv array (posix_spawnp, never a shell),
 * feeding the prologue on stdin from a memfd, and writes the output
 * atomically (temp file in the same directory, then rename).
 *
 * Never: puts an unescaped spec byte into a generated file, starts a shell,
 * writes a timestamp or a temporary path into an output.
 */
#ifndef DDPC_EMIT_H
#define DDPC_EMIT_H

#include <stddef.h>
#include <stdio.h>
#include "job.h"
#include "diag.h"
#include "plan.h"

struct emit_input {
    const struct ddpc_job  *job;
    const struct ddpc_plan *plan;
    const char *spec_path;       /* as the user gave it; baked as DDPC_SPEC_PATH */
    const char *spec_text;       /* the spec's bytes */
    size_t      spec_len;
    const char *spec_hash;       /* 64 hex digits (spec_sha256_hex) */
    const char *built_from;      /* "job=NAME spec=ABSOLUTE-PATH", baked as DDPC_BUILT_FROM:
                                    what `ddpc build` reads back from a program it would
                                    replace (NULL: "") */
    const char *version;         /* ddpc version, baked as DDPC_COMPILER_VERSION */
    const char *templates_dir;   /* holds job_config.h.m4, job.plan.json.m4, job.sbatch.m4 */
    const char *m4;              /* m4 program; NULL: "m4" on PATH */
    FILE       *log;             /* non-NULL: print each m4 command line here */
};

/* Writes out_dir/job_config.h and out_dir/job.plan.json, and with launcher
 * slurm also sbatch_path (out_dir/job.sbatch when NULL). out_dir must exist.
 * Returns 0, or -1 with an error in d (nothing half-written is left). */
int emit_files(const struct emit_input *in, const char *out_dir, const char *sbatch_path,
               struct ddpc_diag *d);

/* The m4 definitions for in (and the plan JSON text), as one string the
 * caller frees; NULL with an error in d. */
char *emit_prologue(const struct emit_input *in, const char *plan_json, struct ddpc_diag *d);

/* Runs `m4 -P -E - template` with prologue on stdin, output to out_path
 * (atomically); with log, the command is printed there first. Returns 0, or -1 with an error in d that names what failed. */
int emit_m4(const char *m4, const char *prologue, const char *template_path,
            const char *out_path, FILE *log, struct ddpc_diag *d);

/* Copies the file `from` to `to` atomically (to.tmp.PID in to's directory,
 * fsync, chmod mode, rename; removed on a signal or an error): how `ddpc
 * build` puts job.sbatch beside the program once the program is built, so a
 * failed or interrupted build leaves the old pair, never a new script beside
 * an old program. Returns 0, or -1 with an error in d. */
int emit_install(const char *from, const char *to, unsigned mode, struct ddpc_diag *d);

#endif /* DDPC_EMIT_H */
