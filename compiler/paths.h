/* paths.h - where the installed runtime is, found from ddpc's own executable.
 *
 * defines: paths_prefix
 *
 * ddpc lives in PREFIX/bin; PREFIX holds lib/ (libddprt.a, libddprt_cuda.a),
 * include/ddpc/ (job.h, ddprt.h, ...) and share/ddpc/ (job.c, templates/).
 * The build tree has the same layout under build/, so one rule serves both.
 *
 * Never: consults PATH or the current directory.
 */
#ifndef DDPC_PATHS_H
#define DDPC_PATHS_H

#include <stddef.h>
#include "diag.h"

/* Fills out with PREFIX (no trailing slash): the parent of the directory
 * that holds the running executable. Returns 0, or -1 with an error in d. */
int paths_prefix(char *out, size_t n, struct ddpc_diag *d);

#endif /* DDPC_PATHS_H */
