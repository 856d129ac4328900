/* spawn.h - run a tool (m4, the C compiler) and wait for it.
 *
 * defines: spawn_wait
 *
 * Through interrupt.h's intr_spawnp/intr_wait, so an interrupted build
 * stops the child. Never: starts a shell (argv goes to posix_spawnp as it
 * is), prints.
 */
#ifndef DDPC_SPAWN_H
#define DDPC_SPAWN_H

#include <spawn.h>
#include "diag.h"

/* Runs argv (argv[0] looked up in PATH) with the file actions fa and the
 * environment envp (NULL: ddpc's own) and waits for it. Returns 0 with the
 * wait status in *st, or -1 with an error in d: "cannot run
 * <what><argv[0]>: <why><hint>", hint added when the tool is not found
 * (e.g. " (install GNU m4: apt-get install m4)"). */
int spawn_wait(char *const argv[], const posix_spawn_file_actions_t *fa, char *const envp[],
               const char *what, const char *hint, int *st, struct ddpc_diag *d);

#endif /* DDPC_SPAWN_H */
