/* same_file.h - do two paths name one file, whether it exists yet or not:
 * one rule for `ddpc check` (validate.c) and the job's start (ddprt.c),
 * which refuse two outputs that would overwrite each other.
 *
 * defines: same_file
 */
#ifndef DDPC_SAME_FILE_H
#define DDPC_SAME_FILE_H

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* 1 when a and b are one file: the same device and inode when both exist,
 * else (neither exists) the same last component in the same directory
 * ("out" and "./out", "a/../out"); 0 otherwise, or when it cannot tell. */
static inline int same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    int ea = stat(a, &sa) == 0, eb = stat(b, &sb) == 0;
    if (ea || eb)
        return ea && eb && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    if (strcmp(a, b) == 0)
        return 1;
    const char *ba = strrchr(a, '/'), *bb = strrchr(b, '/');
    if (strcmp(ba ? ba + 1 : a, bb ? bb + 1 : b) != 0)
        return 0;
    char da[PATH_MAX], db[PATH_MAX], ra[PATH_MAX], rb[PATH_MAX];
    size_t la = ba ? (size_t)(ba - a) + (ba == a) : 1, lb = bb ? (size_t)(bb - b) + (bb == b) : 1;
    if (la >= sizeof da || lb >= sizeof db)
        return 0;
    memcpy(da, ba ? a : ".", la);
    da[la] = '\0';
    memcpy(db, bb ? b : ".", lb);
    db[lb] = '\0';
    return realpath(da, ra) && realpath(db, rb) && strcmp(ra, rb) == 0;
}

#endif /* DDPC_SAME_FILE_H */
