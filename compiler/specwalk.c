/* specwalk.c - the specs below a directory (specwalk.h says which and the
 * bounds). Never opens a file it lists: spec_load_job reads them.
 */
#include "specwalk.h"

#include <dirent.h>
#include <errno.h>
#include <linux/magic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>

int specwalk_add(struct specwalk_list *l, const char *s)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        char **nv = realloc(l->v, (size_t)cap * sizeof *nv);
        if (!nv)
            return -1;
        l->v = nv;
        l->cap = cap;
    }
    if (!(l->v[l->n] = strdup(s)))
        return -1;
    l->n++;
    return 0;
}

void specwalk_list_free(struct specwalk_list *l)
{
    for (int i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
    memset(l, 0, sizeof *l);
}

/* ---- special file systems ---- */

/* File systems that hold kernel state, not files a user wrote: reading
 * them is slow or endless (/proc/self/root leads back to /), and no spec
 * lives there. */
static const struct { unsigned long magic; const char *name; } special_fs[] = {
    { PROC_SUPER_MAGIC, "proc" },       { SYSFS_MAGIC, "sysfs" },
    { DEVPTS_SUPER_MAGIC, "devpts" },   { CGROUP_SUPER_MAGIC, "cgroup" },
    { CGROUP2_SUPER_MAGIC, "cgroup2" }, { DEBUGFS_MAGIC, "debugfs" },
    { TRACEFS_MAGIC, "tracefs" },       { SECURITYFS_MAGIC, "securityfs" },
    { PSTOREFS_MAGIC, "pstore" },       { BPF_FS_MAGIC, "bpf" },
    { BINFMTFS_MAGIC, "binfmt_misc" },  { EFIVARFS_MAGIC, "efivarfs" },
    { SELINUX_MAGIC, "selinuxfs" },     { NSFS_MAGIC, "nsfs" },
    { 0x62656570UL, "configfs" },       { 0x65735543UL, "fusectl" },
    { 0x19800202UL, "mqueue" },
};

/* devtmpfs reports tmpfs's magic to statfs; only the mount table tells
 * /dev from /tmp. Returns 1 when the mount of dev is devtmpfs. */
static int is_devtmpfs(dev_t dev)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return 0;
    char want[32], *line = NULL;
    size_t cap = 0;
    int found = 0;
    snprintf(want, sizeof want, " %u:%u ", major(dev), minor(dev));
    while (!found && getline(&line, &cap, f) > 0) {
        /* "36 35 0:6 / /dev rw - devtmpfs udev rw": the third field, then
         * the type after the " - " separator */
        char *mm = strstr(line, want), *sep = strstr(line, " - ");
        if (mm && sep && mm < sep && strncmp(sep + 3, "devtmpfs ", 9) == 0)
            found = 1;
    }
    free(line);
    fclose(f);
    return found;
}

const char *specwalk_special_fs(const char *dir)
{
    struct statfs sf;
    if (statfs(dir, &sf) != 0)
        return NULL;
    for (size_t i = 0; i < sizeof special_fs / sizeof special_fs[0]; i++)
        if ((unsigned long)sf.f_type == special_fs[i].magic)
            return special_fs[i].name;
    struct stat st;
    if ((unsigned long)sf.f_type == TMPFS_MAGIC && stat(dir, &st) == 0 && is_devtmpfs(st.st_dev))
        return "devtmpfs";
    return NULL;
}

/* ---- the directories read so far, by (device, inode) ---- */

struct seen {
    struct { dev_t dev; ino_t ino; int used; } *v;
    size_t cap, n;
};

static size_t seen_hash(dev_t dev, ino_t ino)
{
    uint64_t h = (uint64_t)ino * 0x9E3779B97F4A7C15ull ^ (uint64_t)dev * 0xC2B2AE3D27D4EB4Full;
    return (size_t)(h ^ (h >> 29));
}

/* Adds (dev, ino): 1 when new, 0 when already there, -1 out of memory. */
static int seen_add(struct seen *s, dev_t dev, ino_t ino)
{
    if (2 * (s->n + 1) > s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 256;
        struct seen grown = { calloc(cap, sizeof *s->v), cap, 0 };
        if (!grown.v)
            return -1;
        for (size_t i = 0; i < s->cap; i++)
            if (s->v[i].used)
                seen_add(&grown, s->v[i].dev, s->v[i].ino);   /* cannot grow again */
        free(s->v);
        *s = grown;
    }
    size_t i = seen_hash(dev, ino) & (s->cap - 1);
    while (s->v[i].used) {
        if (s->v[i].dev == dev && s->v[i].ino == ino)
            return 0;
        i = (i + 1) & (s->cap - 1);
    }
    s->v[i].dev = dev;
    s->v[i].ino = ino;
    s->v[i].used = 1;
    s->n++;
    return 1;
}

/* ---- the walk ---- */

struct walk {
    const struct specwalk_limits *lim;
    struct seen seen;
    int dirs;          /* directories read */
    int stopped;       /* max_dirs was hit: no directory is read after it */
    struct specwalk_list *out;
    struct ddpc_diag *d;
};

static int is_spec_name(const char *name)
{
    size_t l = strlen(name);
    return (l > 5 && strcmp(name + l - 5, ".yaml") == 0) ||
           (l > 4 && strcmp(name + l - 4, ".yml") == 0);
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void walk_error(struct walk *w, const char *path, const char *fmt, const char *what)
{
    diag_rule(w->d, DDPC_R_IO, path, 0, 0, "", fmt, what);
    w->d->io_error = 1;
}

/* Reads dir (depth levels below the named one; st its stat, parent_dev the
 * device of the directory holding it) and walks what it holds. Returns -1
 * only when out of memory. */
static int walk_dir(struct walk *w, const char *dir, const struct stat *st, dev_t parent_dev,
                    int depth)
{
    if (w->stopped)
        return 0;
    int r = seen_add(&w->seen, st->st_dev, st->st_ino);
    if (r <= 0)
        return r;   /* read already, under another path (a loop, or two links to it) */
    if (depth == 0 || st->st_dev != parent_dev) {
        /* a mount point (or the named directory): which file system? */
        const char *fs = specwalk_special_fs(dir);
        if (fs) {
            diag_rule(w->d, DDPC_R_WALK_SKIP, dir, 0, 0, "", "not walked: a %s file system holds "
                      "kernel state, not specs", fs);
            return 0;
        }
    }
    if (depth > w->lim->max_depth) {
        diag_rule(w->d, DDPC_R_WALK_LIMIT, dir, 0, 0, "", "not walked: more than %d directories "
                  "deep; name a deeper directory on the command line", w->lim->max_depth);
        w->d->io_error = 1;
        return 0;
    }
    if (w->dirs >= w->lim->max_dirs) {
        diag_rule(w->d, DDPC_R_WALK_LIMIT, dir, 0, 0, "", "stopped after %d directories; the "
                  "rest of the tree is not checked: name the directories that hold the specs",
                  w->lim->max_dirs);
        w->d->io_error = 1;
        w->stopped = 1;
        return 0;
    }
    w->dirs++;
    DIR *dp = opendir(dir);
    if (!dp) {
        walk_error(w, dir, "cannot read directory: %s", strerror(errno));
        return 0;
    }
    struct specwalk_list names = { 0 };
    int rc = 0;
    struct dirent *e;
    errno = 0;
    while ((e = readdir(dp))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (specwalk_add(&names, e->d_name) < 0) {
            rc = -1;
            break;
        }
        errno = 0;
    }
    if (rc == 0 && errno)
        walk_error(w, dir, "cannot read directory: %s", strerror(errno));
    closedir(dp);
    if (names.n)
        qsort(names.v, (size_t)names.n, sizeof *names.v, name_cmp);
    size_t dl = strlen(dir);
    int slash = dl && dir[dl - 1] == '/';
    for (int i = 0; rc == 0 && i < names.n; i++) {
        char *p;
        if (asprintf(&p, "%s%s%s", dir, slash ? "" : "/", names.v[i]) < 0) {
            rc = -1;
            break;
        }
        struct stat cs;
        if (stat(p, &cs) == 0 && S_ISDIR(cs.st_mode)) {
            rc = walk_dir(w, p, &cs, st->st_dev, depth + 1);
        } else if (is_spec_name(names.v[i])) {
            if (stat(p, &cs) == 0 && !S_ISREG(cs.st_mode))
                diag_rule(w->d, DDPC_R_WALK_SKIP, p, 0, 0, "", "not checked: not a regular file "
                          "(name it on the command line to read it)");
            else
                rc = specwalk_add(w->out, p);   /* unreadable or dangling: spec_load_job says so */
        }
        free(p);
    }
    specwalk_list_free(&names);
    return rc;
}

int specwalk_dir(const char *dir, const struct specwalk_limits *lim, struct specwalk_list *out,
                 struct ddpc_diag *d)
{
    static const struct specwalk_limits defaults = { SPECWALK_MAX_DEPTH, SPECWALK_MAX_DIRS };
    struct walk w = { .lim = lim ? lim : &defaults, .out = out, .d = d };
    struct stat st;
    if (stat(dir, &st) != 0) {
        walk_error(&w, dir, "cannot read: %s", strerror(errno));
        return 0;
    }
    int rc = walk_dir(&w, dir, &st, st.st_dev, 0);
    free(w.seen.v);
    return rc;
}
