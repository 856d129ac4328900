/* outver.c - which version of an output path a run writes (outver.h).
 *
 * Owns: the version names, reading the identity an output carries, and
 * the notes and refusals that name them. Never writes, never blocks (FIFOs
 * are not opened for reading), never exits; ckpt.c and metrics.c write.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "ckpt.h"
#include "ident.h"
#include "outver.h"

int outver_name(enum ddpc_out_kind kind, const char *base, int k, char *out, size_t cap)
{
    size_t bl = strlen(base);
    int n;
    if (k == 0) {
        n = snprintf(out, cap, "%s", base);
    } else if (kind == DDPC_OUT_TB) {
        while (bl > 1 && base[bl - 1] == '/')
            bl--;
        n = snprintf(out, cap, "%.*s/version_%d", (int)bl, base, k);
    } else {
        /* the number goes before the last extension of the file name (not
         * of a directory in its path, nor a dot file's leading dot) */
        const char *slash = strrchr(base, '/');
        const char *name = slash ? slash + 1 : base;
        const char *dot = strrchr(name, '.');
        if (!dot || dot == name)
            dot = base + bl;
        n = snprintf(out, cap, "%.*s-v%d%s", (int)(dot - base), base, k, dot);
    }
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

/* "identity=<64 hex>" somewhere in the first line of text: 1 with hash set. */
static int line_identity(const char *text, char hash[DDPC_IDENT_HASH_LEN + 1])
{
    const char *nl = strchr(text, '\n');
    const char *p = strstr(text, "identity=");
    if (!p || (nl && p > nl))
        return 0;
    p += strlen("identity=");
    for (int i = 0; i < DDPC_IDENT_HASH_LEN; i++)
        if (!isxdigit((unsigned char)p[i]))
            return 0;
    memcpy(hash, p, DDPC_IDENT_HASH_LEN);
    hash[DDPC_IDENT_HASH_LEN] = '\0';
    return 1;
}

/* The first bytes of a regular file (NUL-terminated), or -1. */
static ssize_t read_head(const char *path, char *buf, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
    if (fd < 0)
        return -1;
    struct stat st;
    ssize_t got = -1;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        got = 0;
        while ((size_t)got < cap - 1) {
            ssize_t r = read(fd, buf + got, cap - 1 - (size_t)got);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                break;
            got += r;
        }
        buf[got] = '\0';
    }
    (void)close(fd);   /* read-only */
    return got;
}

/* A directory holding TensorBoard event files of its own (another tool's,
 * or an older ddpc's, which left its lock file empty). */
static int has_events(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int found = 0;
    struct dirent *de;
    while (!found && (de = readdir(d)) != NULL)
        found = strstr(de->d_name, "tfevents") != NULL;
    (void)closedir(d);   /* a listing: nothing to lose */
    return found;
}

enum ddpc_out_owner outver_identity(enum ddpc_out_kind kind, const char *path,
                                    const char *hash, char *other_hash)
{
    char h[DDPC_IDENT_HASH_LEN + 1] = "", buf[512];
    struct stat st;
    enum ddpc_out_owner who = DDPC_OUT_OTHER;
    if (other_hash)
        other_hash[0] = '\0';
    if (lstat(path, &st) != 0)
        return DDPC_OUT_FREE;
    switch (kind) {
    case DDPC_OUT_EXPORT:
        if (!S_ISREG(st.st_mode))
            break;
        if (st.st_size == 0)
            return DDPC_OUT_FREE;
        if (ckpt_export_identity(path, h, NULL, 0) < 0)
            h[0] = '\0';
        break;
    case DDPC_OUT_CSV:
        /* /dev/stdout and the like are written through: nobody's file; a
         * link is metrics.c's to refuse (it does not write through one) */
        if (!S_ISREG(st.st_mode) || st.st_size == 0)
            return DDPC_OUT_FREE;
        if (read_head(path, buf, sizeof buf) > 0 && strncmp(buf, "# ddpc ", 7) == 0)
            (void)line_identity(buf, h);
        break;
    case DDPC_OUT_TB: {
        if (!S_ISDIR(st.st_mode))
            break;
        char lock[PATH_MAX];
        if (snprintf(lock, sizeof lock, "%s/.ddpc.lock", path) >= (int)sizeof lock)
            break;
        if (read_head(lock, buf, sizeof buf) > 0 && line_identity(buf, h))
            break;
        return has_events(path) ? DDPC_OUT_OTHER : DDPC_OUT_FREE;
    }
    }
    if (other_hash)
        memcpy(other_hash, h, sizeof h);
    if (h[0] && hash && strcmp(h, hash) == 0)
        who = DDPC_OUT_OURS;
    return who;
}

static const char *kind_what(enum ddpc_out_kind kind)
{
    return kind == DDPC_OUT_EXPORT ? "model" : kind == DDPC_OUT_CSV ? "metrics"
                                                                     : "TensorBoard events";
}

/* "another configuration's model (identity 1a2b3c4d...; this run's ...)"
 * or "a model no ddpc run marked (an older ddpc's, or another program's)" */
static void whose(char *buf, size_t cap, enum ddpc_out_kind kind, const char *path,
                  const struct ddpc_out_id *id)
{
    char h[DDPC_IDENT_HASH_LEN + 1];
    (void)outver_identity(kind, path, id->hash, h);
    if (!h[0]) {
        (void)snprintf(buf, cap, "%s no ddpc run marked as its own (an older ddpc's, or "
                       "another program's)", kind == DDPC_OUT_TB ? "events" :
                       kind == DDPC_OUT_CSV ? "a metrics file" : "a model");
        return;
    }
    char diff[600] = "";
    if (kind == DDPC_OUT_EXPORT && id->ident) {
        /* an export carries its description: name what differs */
        char desc[16384], d[500];
        if (ckpt_export_identity(path, h, desc, sizeof desc) > 0 && desc[0] &&
            ident_diff(desc, id->ident, 'T', d, sizeof d) > 0)
            (void)snprintf(diff, sizeof diff, ": %s", d);
    }
    (void)snprintf(buf, cap, "another configuration's %s (identity %.8s...; this run's "
                   "%.8s...%s)", kind_what(kind), h, id->hash, diff);
}

int outver_refuse(enum ddpc_out_kind kind, const char *key, const char *base,
                  const struct ddpc_out_id *id, struct ddpc_err *e)
{
    char w[900], v1[PATH_MAX];
    whose(w, sizeof w, kind, base, id);
    if (outver_name(kind, base, 1, v1, sizeof v1) < 0)
        (void)snprintf(v1, sizeof v1, "another path");
    return DDPC_FAIL(e, DDPC_E_INVALID, "%s %s holds %s, and other_run_outputs is refuse: not "
                     "overwriting it. Point %s elsewhere, move it away, or set "
                     "other_run_outputs: version to write %s beside it", key, base, w, key, v1);
}

int outver_resolve(enum ddpc_out_kind kind, const char *base, const char *key,
                   const struct ddpc_out_id *id, char *out, size_t cap,
                   enum ddpc_out_owner *owner, struct ddpc_err *e)
{
    for (int k = 0; k < DDPC_OUTVER_MAX; k++) {
        if (outver_name(kind, base, k, out, cap) < 0)
            return DDPC_FAIL(e, DDPC_E_INVALID, "%s %s: path too long for a version", key, base);
        enum ddpc_out_owner who = outver_identity(kind, out, id->hash, NULL);
        if (who != DDPC_OUT_OTHER) {
            if (owner)
                *owner = who;
            return 0;
        }
        if (id->refuse)
            return outver_refuse(kind, key, base, id, e);
    }
    return DDPC_FAIL(e, DDPC_E_INVALID, "%s %s: versions 1 to %d are all other runs' outputs; "
                     "point %s elsewhere", key, base, DDPC_OUTVER_MAX - 1, key);
}

void outver_note(FILE *f, enum ddpc_out_kind kind, const char *key, const char *base,
                 const char *chosen, const struct ddpc_out_id *id)
{
    if (!f || strcmp(base, chosen) == 0)
        return;
    char w[900];
    whose(w, sizeof w, kind, base, id);
    fprintf(f, "note: %s %s holds %s: this run writes %s (other_run_outputs: refuse "
            "stops instead)\n", key, base, w, chosen);
    fflush(f);
}
