/* specwalk.h - the specs below a directory, for `ddpc check DIR`.
 *
 * A directory argument stands for every *.yaml and *.yml regular file
 * below it, sorted by name at each level, symbolic links followed. The walk
 * is bounded whatever the tree holds (a symlink "ladder" that reaches one
 * directory by 2^30 paths, /proc, a tree of a million directories):
 *   - each real directory (device, inode) is read once, under the first
 *     path that reaches it;
 *   - it stops SPECWALK_MAX_DEPTH levels down and after SPECWALK_MAX_DIRS
 *     directories, with an error naming the limit;
 *   - a special file system (proc, sysfs, devtmpfs, cgroup, ...) is not
 *     entered: a note says which and why;
 *   - only regular files are specs: a FIFO named x.yaml would block the
 *     check on open, so it gets a note and is skipped.
 */
#ifndef DDPC_SPECWALK_H
#define DDPC_SPECWALK_H

#include "diag.h"

#define SPECWALK_MAX_DEPTH 64
#define SPECWALK_MAX_DIRS 100000

/* A list of owned strings. */
struct specwalk_list {
    char **v;
    int n, cap;
};

struct specwalk_limits {
    int max_depth;   /* directories below the named one, at most */
    int max_dirs;    /* directories read, the named one included */
};

/* Appends a copy of s; -1 when out of memory. */
int specwalk_add(struct specwalk_list *l, const char *s);
/* Frees every string and the array; safe on a zeroed list. */
void specwalk_list_free(struct specwalk_list *l);

/* Appends the specs below dir to out. What cannot be read, and a limit
 * reached, is an error in d (with d->io_error set); a skipped file system or
 * file is a note. lim NULL: SPECWALK_MAX_DEPTH and SPECWALK_MAX_DIRS.
 * Returns -1 only when out of memory. */
int specwalk_dir(const char *dir, const struct specwalk_limits *lim, struct specwalk_list *out,
                 struct ddpc_diag *d);

/* The name of the special file system dir is on ("proc", "devtmpfs"),
 * or NULL when it is an ordinary one (or cannot be told). */
const char *specwalk_special_fs(const char *dir);

#endif /* DDPC_SPECWALK_H */
