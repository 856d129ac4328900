/* spawn.c - run a tool and wait for it (spawn.h). */
#include "spawn.h"

#include <errno.h>
#include <string.h>
#include "interrupt.h"

int spawn_wait(char *const argv[], const posix_spawn_file_actions_t *fa, char *const envp[],
               const char *what, const char *hint, int *st, struct ddpc_diag *d)
{
    pid_t pid;
    int err = envp ? intr_spawnpe(&pid, argv[0], fa, argv, envp)
                   : intr_spawnp(&pid, argv[0], fa, argv);
    if (err != 0) {
        diag_add(d, DDPC_SEV_ERROR, "ddpc", 0, 0, "", "cannot run %s%s: %s%s", what, argv[0],
                 strerror(err), err == ENOENT && hint ? hint : "");
        return -1;
    }
    if (intr_wait(pid, st) < 0) {
        diag_add(d, DDPC_SEV_ERROR, "ddpc", 0, 0, "", "waitpid: %s", strerror(errno));
        return -1;
    }
    return 0;
}
