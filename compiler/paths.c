/* paths.c - PREFIX from /proc/self/exe (see paths.h).
 *
 * Owns: the one rule for finding the runtime. Never: searches PATH or cwd.
 */
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <unistd.h>
#include "paths.h"

int paths_prefix(char *out, size_t n, struct ddpc_diag *d)
{
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) {
        diag_add(d, DDPC_SEV_ERROR, "ddpc", 0, 0, "",
                 "cannot find ddpc's own executable (/proc/self/exe: %s)",
                 len < 0 ? strerror(errno) : "empty");
        return -1;
    }
    exe[len] = '\0';
    /* strip "/ddpc", then "/bin" */
    for (int i = 0; i < 2; i++) {
        char *slash = strrchr(exe, '/');
        if (!slash) {
            diag_add(d, DDPC_SEV_ERROR, "ddpc", 0, 0, "", "unexpected executable path %s", exe);
            return -1;
        }
        *slash = '\0';
    }
    if (exe[0] == '\0')
        strcpy(exe, "/");
    if (strlen(exe) + 1 > n) {
        diag_add(d, DDPC_SEV_ERROR, "ddpc", 0, 0, "", "installation path too long: %s", exe);
        return -1;
    }
    memcpy(out, exe, strlen(exe) + 1);
    return 0;
}
