/* cc.h - compile the job: runtime/job.c + job_config.h + libddprt -> ./job.
 *
 * defines: cc_build, cc_wants_cuda, cc_wants_gloo, cc_failure_hint
 *
 * Never: starts a shell (compiler and linker get argv arrays), leaves a
 * partial output file (it links to OUT.tmp.PID and renames), or hides the
 * compiler's own messages (they follow a one-line summary of what failed).
 */
#ifndef DDPC_CC_H
#define DDPC_CC_H

#include <stdio.h>
#include "job.h"
#include "diag.h"

struct cc_options {
    const struct ddpc_job *job;
    const char *prefix;      /* holds lib/, include/ddpc/, share/ddpc/ */
    const char *emit_dir;    /* holds job_config.h */
    const char *out;         /* the program to write */
    int         verbose;     /* print each command before running it */
    int         cpu_only;    /* never link the CUDA backend */
    FILE       *log;         /* where --verbose prints commands (stderr when NULL) */
};

/* Returns 0; -1 when the compile or link failed or could not start: the
 * error, in words a user can act on, is in d. *output receives what the
 * compiler printed (malloc'd, possibly empty, NULL if it never ran; the
 * caller frees it and prints it after the error). With verbose the command
 * line is printed to log first. */
int cc_build(const struct cc_options *o, char **output, struct ddpc_diag *d);

/* 1 when a job with this accelerator would be linked with CUDA by this ddpc
 * (built with CUDA, accelerator auto or gpu, not cpu_only). */
int cc_wants_cuda(const struct ddpc_job *job, int cpu_only);
/* 1 when the job may run as CPU workers on several nodes and this ddpc has
 * the gloo plugin: its path is baked in (DDPC_GLOO_PLUGIN). */
int cc_wants_gloo(const struct ddpc_job *job, int cpu_only);

/* What to do first about a failed compile or link, read from the compiler's
 * output (a library the linker cannot find, a runtime that does not match
 * this ddpc), or NULL when the output names nothing ddpc knows. A static
 * string; `cuda` says whether the CUDA backend was being linked. */
const char *cc_failure_hint(const char *output);

#endif /* DDPC_CC_H */
