/* ckpt.c - checkpoints on disk: the format in ckpt.h, atomic writes,
 * verified reads, resume selection, pruning, pre-flight, safetensors export.
 *
 * Owns every byte ddpc writes into checkpoint_dir and the export file, and
 * their CRC32C checks (crc32c.c computes them). Never trains, never communicates, never
 * prints except the one-line skip notes ckpt_find_resume writes to the
 * caller's stream, never exits. Never leaves a partially written file
 * under a final name: every file goes temp -> fsync -> rename -> fsync(dir),
 * and every failure path unlinks the temp file.
 *
 * Floats are written as their in-memory bytes, which is little-endian on
 * every machine ddpc builds for; the static assert below keeps it that way.
 * Header integers are written byte by byte, so they are LE everywhere.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>
#include "ckpt.h"
#include "crc32c.h"
#include "ident.h"
#include "layers.h"
#include "outver.h"
#include "safetensors.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "ckpt.c writes float32 data as raw bytes, which the format defines as little-endian");
_Static_assert(sizeof(float) == 4, "float32 payload");

static const char ckpt_magic[8] = { 'D', 'D', 'P', 'C', 'C', 'K', 'P', 'T' };
#define HDR_CRC_OFF 252         /* header checksum covers [0, 252) */
#define TRAILER     4           /* payload CRC32C */

/* ===================================================================== */
/* little-endian fields                                                    */
/* ===================================================================== */

static void put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get_u32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint64_t get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* ===================================================================== */
/* fault injection (tests only)                                            */
/* ===================================================================== */

/* Process-wide on purpose: tests set it before calling the public API, and
 * production code never touches it (fail_after < 0). */
static struct {
    int64_t fail_after;     /* bytes a temp file may receive; < 0: off */
    int     err;            /* errno to fail with, or DDPC_CKPT_FAULT_STOP */
} ckpt_fault = { -1, 0 };

void ckpt_set_fault(int64_t fail_after_bytes, int err)
{
    ckpt_fault.fail_after = fail_after_bytes;
    ckpt_fault.err = err;
}

static double ckpt_slow_s;      /* tests only: sleep before each rename */

void ckpt_set_slow(double seconds)
{
    ckpt_slow_s = seconds > 0 ? seconds : 0;
}

/* ===================================================================== */
/* atomic files: temp in the same directory, fsync, rename, fsync(dir)     */
/* ===================================================================== */

/* struct ckpt_afile is in ckpt.h (predict.c writes its output with it) */

/* This machine's name for temp file names: checkpoint_dir may be on a file
 * system shared by several nodes, and a pid is only meaningful on the host
 * that issued it, so the tag must name one host. A name of [A-Za-z0-9-]
 * (at most 63 chars) is its own tag; any other is reduced to those
 * characters (at most 54) and followed by '_' and the CRC-32C of the whole
 * name in hex, so that "node_1", "node.1" and "node-1", or two long names
 * alike in their first 63 characters, never share a tag (a tag with '_'
 * can only come from a reduced name). */
static void host_tag(char *out, size_t cap)
{
    char h[256];
    if (gethostname(h, sizeof h) != 0)
        h[0] = '\0';                 /* unnamed host: still a valid tag */
    h[sizeof h - 1] = '\0';
    size_t hl = strlen(h), n = 0;
    int changed = hl > 63;
    for (const char *p = h; *p; p++)
        changed |= !(isalnum((unsigned char)*p) || *p == '-');
    size_t keep = changed ? 54 : 63;
    for (const char *p = h; *p && n + 1 < cap && n < keep; p++)
        out[n++] = isalnum((unsigned char)*p) || *p == '-' ? *p : '-';
    if (n == 0 && cap > 1)
        out[n++] = 'h';
    out[n] = '\0';
    if (changed && cap > n)
        (void)snprintf(out + n, cap - n, "_%08x", (unsigned)crc32c(0, h, hl));
}

/* snprintf that reports truncation as an error instead of a wrong path. */
static int path_join(char *out, size_t cap, struct ddpc_err *e, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int path_join(char *out, size_t cap, struct ddpc_err *e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, cap, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= cap)
        return DDPC_FAIL(e, DDPC_E_INVALID, "path too long (over %zu bytes): %.200s...", cap, out);
    return 0;
}

static int fsync_dir(const char *dir, const char *what, struct ddpc_err *e)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return DDPC_FAIL(e, DDPC_E_SYS, "%s: open(%s) to fsync the directory: %s",
                         what, dir, strerror(errno));
    int rc = 0;
    /* EINVAL: the file system cannot sync directories (some FUSE/NFS
     * setups); the rename itself is still atomic, only its durability
     * across power loss is up to that file system. */
    if (fsync(fd) != 0 && errno != EINVAL)
        rc = DDPC_FAIL(e, DDPC_E_SYS, "%s: fsync(%s): %s", what, dir, strerror(errno));
    if (close(fd) != 0 && rc == 0)
        rc = DDPC_FAIL(e, DDPC_E_SYS, "%s: close(%s): %s", what, dir, strerror(errno));
    return rc;
}

static int afile_fail(struct ckpt_afile *f, int err, const char *op, struct ddpc_err *e)
{
    if (err == ENOSPC || err == EDQUOT)
        return DDPC_FAIL(e, DDPC_E_SYS,
                         "%s: no space left on device writing %s (%" PRIu64 " bytes needed); %s",
                         f->what, f->final, f->total, f->intact);
    return DDPC_FAIL(e, DDPC_E_SYS, "%s: %s %s: %s; %s",
                     f->what, op, f->final, strerror(err), f->intact);
}

/* Opens dir/.name.tmp.<host>.<pid> exclusively, mode 0644 (less umask).
 * total is only used in messages. */
static int afile_open(struct ckpt_afile *f, const char *dir, const char *name,
                      uint64_t total, const char *what, const char *intact,
                      struct ddpc_err *e)
{
    f->fd = -1;
    f->renamed = 0;
    f->written = 0;
    f->total = total;
    f->what = what;
    f->intact = intact;
    f->tmp[0] = '\0';
    DDPC_TRY(path_join(f->dir, sizeof f->dir, e, "%s", dir));
    DDPC_TRY(path_join(f->final, sizeof f->final, e, "%s/%s", dir, name));
    char host[72];
    host_tag(host, sizeof host);
    DDPC_TRY(path_join(f->tmp, sizeof f->tmp, e, "%s/.%s.tmp.%s.%ld", dir, name, host,
                       (long)getpid()));
    for (int attempt = 0; attempt < 2; attempt++) {
        f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (f->fd >= 0)
            return 0;
        /* EEXIST: a temp file with our host and pid can only be left by
         * an earlier process that had the same pid and crashed mid-write
         * (this file is the only writer and is not re-entered): garbage. */
        if (errno != EEXIST || unlink(f->tmp) != 0)
            break;
    }
    int err = errno;
    f->tmp[0] = '\0';          /* not ours: never unlink it */
    return afile_fail(f, err, "creating a temp file for", e);
}

static int afile_write(struct ckpt_afile *f, const void *buf, size_t n, struct ddpc_err *e)
{
    const unsigned char *p = buf;
    while (n > 0) {
        size_t chunk = n;
        ssize_t w;
        if (ckpt_fault.fail_after >= 0 && (int64_t)f->written >= ckpt_fault.fail_after) {
            if (ckpt_fault.err == DDPC_CKPT_FAULT_STOP) {
                /* Freeze with the temp file half written, so a test can
                 * SIGKILL us at exactly this point. If continued, finish. */
                ckpt_fault.fail_after = -1;
                if (raise(SIGSTOP) != 0)
                    return afile_fail(f, errno, "raise(SIGSTOP) while writing", e);
                continue;
            }
            /* Straight to the error path: an injected EINTR must not
             * become an endless retry. */
            return afile_fail(f, ckpt_fault.err, "writing", e);
        }
        if (ckpt_fault.fail_after >= 0 && (uint64_t)ckpt_fault.fail_after - f->written < chunk)
            chunk = (size_t)((uint64_t)ckpt_fault.fail_after - f->written);
        w = write(f->fd, p, chunk);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return afile_fail(f, errno, "writing", e);
        }
        if (w == 0)             /* no progress and no errno: treat as I/O error */
            return afile_fail(f, EIO, "writing", e);
        p += w;
        n -= (size_t)w;
        f->written += (uint64_t)w;
    }
    return 0;
}

/* fsync, close, rename over the final name, fsync the directory. */
static int afile_commit(struct ckpt_afile *f, struct ddpc_err *e)
{
    /* Delayed allocation can report ENOSPC only here, so fsync's error gets
     * the same message as write's. (fd -1: afile_commit_new closed it and
     * found its name taken; the export's next name comes here.) */
    if (f->fd >= 0 && fsync(f->fd) != 0)
        return afile_fail(f, errno, "fsync of the temp file for", e);
    if (ckpt_slow_s > 0) {
        struct timespec ts = { (time_t)ckpt_slow_s,
                               (long)((ckpt_slow_s - (double)(time_t)ckpt_slow_s) * 1e9) };
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
    }
    int fd = f->fd;
    f->fd = -1;
    if (fd >= 0 && close(fd) != 0)
        return afile_fail(f, errno, "close of the temp file for", e);
    if (rename(f->tmp, f->final) != 0)
        return afile_fail(f, errno, "renaming the temp file to", e);
    f->renamed = 1;
    return fsync_dir(f->dir, f->what, e);
}

/* As afile_commit, but the final name must not exist yet: link(2) fails
 * with EEXIST where another writer took it first (an export version two
 * runs chose at once: outver.h). Returns 1 when it was taken (the temp
 * file is kept, closed, for the caller's next name), 0, or an error. A
 * file system without hard links (EPERM, ENOTSUP, EXDEV on some FUSE or
 * FAT mounts) gets the rename, after a last look that the name is free. */
static int afile_commit_new(struct ckpt_afile *f, struct ddpc_err *e)
{
    if (f->fd >= 0) {
        if (fsync(f->fd) != 0)
            return afile_fail(f, errno, "fsync of the temp file for", e);
        int fd = f->fd;
        f->fd = -1;
        if (close(fd) != 0)
            return afile_fail(f, errno, "close of the temp file for", e);
    }
    if (link(f->tmp, f->final) == 0) {
        if (unlink(f->tmp) != 0)
            return afile_fail(f, errno, "removing the temp file (linked) of", e);
        f->renamed = 1;
        return fsync_dir(f->dir, f->what, e);
    }
    if (errno == EEXIST)
        return 1;
    if (errno != EPERM && errno != ENOTSUP && errno != EXDEV && errno != EOPNOTSUPP)
        return afile_fail(f, errno, "linking the temp file to", e);
    struct stat st;
    if (lstat(f->final, &st) == 0)
        return 1;
    if (rename(f->tmp, f->final) != 0)
        return afile_fail(f, errno, "renaming the temp file to", e);
    f->renamed = 1;
    return fsync_dir(f->dir, f->what, e);
}

/* Cleanup after success or failure: closes and unlinks a temp file that was
 * not renamed. Never overwrites the first error. */
static void afile_abort(struct ckpt_afile *f)
{
    if (f->fd >= 0) {
        (void)close(f->fd);     /* the file is being discarded anyway */
        f->fd = -1;
    }
    if (!f->renamed && f->tmp[0]) {
        if (unlink(f->tmp) == 0)
            (void)fsync_dir(f->dir, f->what, NULL);  /* best effort; NULL e ignores */
        f->tmp[0] = '\0';
    }
}

/* ===================================================================== */
/* names                                                                   */
/* ===================================================================== */

/* The spec guarantees [A-Za-z0-9._-]{1,64}; checked again because the name
 * becomes a path component here and a '/' or ".." would escape dir. */
static int check_job_name(const char *job, struct ddpc_err *e)
{
    size_t n = job ? strlen(job) : 0;
    int ok = n >= 1 && n <= 64 && job[0] != '.';
    for (size_t i = 0; ok && i < n; i++)
        ok = isalnum((unsigned char)job[i]) || job[i] == '.' || job[i] == '_' || job[i] == '-';
    if (!ok)
        return DDPC_FAIL(e, DDPC_E_INVALID,
                         "job name '%.80s' cannot name checkpoint files: use 1-64 of "
                         "[A-Za-z0-9._-], not starting with '.'", job ? job : "(null)");
    return 0;
}

static int is_hex_hash(const char *h)
{
    for (int i = 0; i < DDPC_CKPT_HASH_LEN; i++)
        if (!isxdigit((unsigned char)h[i]))
            return 0;
    return h[DDPC_CKPT_HASH_LEN] == '\0';
}

static int hexval(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 :
           c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* Reads a run of decimal digits into *v; returns the end, or NULL. */
static const char *parse_digits(const char *s, int64_t *v)
{
    if (!isdigit((unsigned char)*s))
        return NULL;
    int64_t x = 0;
    for (; isdigit((unsigned char)*s); s++) {
        if (x > (INT64_MAX - 9) / 10)
            return NULL;
        x = x * 10 + (*s - '0');
    }
    *v = x;
    return s;
}

/* Could the process pid still write a file? A zombie (dead, not yet
 * reaped by its parent) cannot, though kill(pid, 0) finds it. */
static int writer_alive(long pid)
{
    if (kill((pid_t)pid, 0) != 0 && errno == ESRCH)
        return 0;
    char path[64], buf[256];
    (void)snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno != ENOENT;          /* no /proc: trust kill() */
    ssize_t n = read(fd, buf, sizeof buf - 1);
    (void)close(fd);                     /* read-only */
    if (n <= 0)
        return 1;
    buf[n] = '\0';
    const char *rp = strrchr(buf, ')');  /* "pid (comm) S ...", comm may hold ')' */
    return !(rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X'));
}

/* Is name exactly <job>-e<digits>-s<digits>-<tag>.ckpt, tag 8 lowercase
 * hex digits (or, written before files carried their identity, no -<tag>)?
 * Sets tag (9 bytes) to the tag, or "" for an untagged name. */
static int parse_ckpt_name(const char *name, const char *job, int64_t *epoch, int64_t *step,
                           char tag[DDPC_CKPT_TAG_LEN + 1])
{
    size_t jl = strlen(job);
    tag[0] = '\0';
    if (strncmp(name, job, jl) != 0 || strncmp(name + jl, "-e", 2) != 0)
        return 0;
    const char *p = parse_digits(name + jl + 2, epoch);
    if (!p || strncmp(p, "-s", 2) != 0)
        return 0;
    p = parse_digits(p + 2, step);
    if (!p)
        return 0;
    if (*p == '-') {
        for (int i = 1; i <= DDPC_CKPT_TAG_LEN; i++)
            if (!isdigit((unsigned char)p[i]) && !(p[i] >= 'a' && p[i] <= 'f'))
                return 0;
        memcpy(tag, p + 1, DDPC_CKPT_TAG_LEN);
        tag[DDPC_CKPT_TAG_LEN] = '\0';
        p += 1 + DDPC_CKPT_TAG_LEN;
    }
    return strcmp(p, ".ckpt") == 0;
}

/* Is name .<job>-e<digits>-s<digits>.ckpt.tmp.<host>.<pid>? Sets host
 * (NUL-terminated, hcap bytes) and *pid. */
static int parse_tmp_name(const char *name, const char *job, char *host, size_t hcap, long *pid)
{
    if (name[0] != '.')
        return 0;
    const char *t = strstr(name, ".ckpt.tmp.");
    if (!t)
        return 0;
    char base[NAME_MAX + 1];
    size_t bl = (size_t)(t - (name + 1)) + strlen(".ckpt");
    if (bl >= sizeof base)
        return 0;
    memcpy(base, name + 1, bl);
    base[bl] = '\0';
    int64_t ep, st, p;
    char tag[DDPC_CKPT_TAG_LEN + 1];
    if (!parse_ckpt_name(base, job, &ep, &st, tag))
        return 0;
    const char *h = t + strlen(".ckpt.tmp.");
    const char *dot = strrchr(h, '.');
    if (!dot || dot == h || (size_t)(dot - h) >= hcap)
        return 0;
    const char *end = parse_digits(dot + 1, &p);
    if (!end || *end || p <= 0 || p > LONG_MAX)
        return 0;
    memcpy(host, h, (size_t)(dot - h));
    host[dot - h] = '\0';
    *pid = (long)p;
    return 1;
}

struct ckpt_entry {
    char   *name;
    char    tag[DDPC_CKPT_TAG_LEN + 1];   /* "" for an untagged (older) name */
    int64_t epoch, step;
    int64_t mtime_s, mtime_ns;   /* filled by ckpt_prune only */
};

/* Newest first: by step, then epoch (a run restarted with a shorter epoch
 * can't reuse a step number with a larger epoch, but be total anyway),
 * then name for a deterministic order. */
static int entry_cmp(const void *a, const void *b)
{
    const struct ckpt_entry *x = a, *y = b;
    if (x->step != y->step)
        return x->step < y->step ? 1 : -1;
    if (x->epoch != y->epoch)
        return x->epoch < y->epoch ? 1 : -1;
    return strcmp(y->name, x->name);
}

static void entries_free(struct ckpt_entry *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i].name);
    free(v);
}

/* This job's checkpoints in dir, newest first. *missing = 1 when dir does
 * not exist (not an error: nothing was ever written). */
static int list_ckpts(const char *dir, const char *job, struct ckpt_entry **out,
                      size_t *n_out, int *missing, struct ddpc_err *e)
{
    *out = NULL;
    *n_out = 0;
    *missing = 0;
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) {
            *missing = 1;
            return 0;
        }
        return DDPC_FAIL(e, DDPC_E_SYS, "checkpoint_dir %s: cannot list it: %s",
                         dir, strerror(errno));
    }
    int rc = 0;
    struct ckpt_entry *v = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        errno = 0;
        struct dirent *de = readdir(d);
        if (!de) {
            if (errno != 0)
                rc = DDPC_FAIL(e, DDPC_E_SYS, "checkpoint_dir %s: readdir: %s",
                               dir, strerror(errno));
            break;
        }
        int64_t ep, st;
        char tag[DDPC_CKPT_TAG_LEN + 1];
        if (!parse_ckpt_name(de->d_name, job, &ep, &st, tag))
            continue;
        if (n == cap) {
            size_t nc = cap ? 2 * cap : 16;
            struct ckpt_entry *nv = realloc(v, nc * sizeof *nv);
            if (!nv) {
                rc = DDPC_FAIL(e, DDPC_E_NOMEM, "checkpoint_dir %s: out of memory listing it", dir);
                break;
            }
            v = nv;
            cap = nc;
        }
        v[n].name = strdup(de->d_name);
        if (!v[n].name) {
            rc = DDPC_FAIL(e, DDPC_E_NOMEM, "checkpoint_dir %s: out of memory listing it", dir);
            break;
        }
        memcpy(v[n].tag, tag, sizeof tag);
        v[n].epoch = ep;
        v[n].step = st;
        v[n].mtime_s = v[n].mtime_ns = 0;
        n++;
    }
    if (closedir(d) != 0 && rc == 0)
        rc = DDPC_FAIL(e, DDPC_E_SYS, "checkpoint_dir %s: closedir: %s", dir, strerror(errno));
    if (rc < 0) {
        entries_free(v, n);
        return rc;
    }
    if (n > 1)
        qsort(v, n, sizeof *v, entry_cmp);
    *out = v;
    *n_out = n;
    return 0;
}

/* ===================================================================== */
/* write                                                                   */
/* ===================================================================== */

size_t ckpt_file_size(size_t n_params, size_t n_opt)
{
    return DDPC_CKPT_HEADER_SIZE + 4 * (n_params + n_opt) + TRAILER;
}

int ckpt_write(const char *dir, const char *job_name, const struct ddpc_ckpt *c,
               char *path_out, size_t path_cap, struct ddpc_err *e)
{
    DDPC_TRY(check_job_name(job_name, e));
    if (!dir || !dir[0] || !c)
        return DDPC_FAIL(e, DDPC_E_INVALID, "ckpt_write: no checkpoint_dir or no checkpoint");
    if (!is_hex_hash(c->ident_hash))
        return DDPC_FAIL(e, DDPC_E_INVALID, "ckpt_write: identity hash '%.70s' is not 64 hex "
                         "digits", c->ident_hash);
    size_t ident_len = c->ident ? strlen(c->ident) : 0;
    if (ident_len > DDPC_CKPT_IDENT_MAX)
        return DDPC_FAIL(e, DDPC_E_INVALID, "ckpt_write: description of %zu bytes (at most %d)",
                         ident_len, DDPC_CKPT_IDENT_MAX);
    if (c->world < 1 || c->epoch < 0 || c->step < 0 || c->sampler_epoch < 0 ||
        c->sampler_batches < 0 || c->optim_step < 0)
        return DDPC_FAIL(e, DDPC_E_INVALID,
                         "ckpt_write: negative counter (world %d epoch %" PRId64 " step %" PRId64 ")",
                         (int)c->world, c->epoch, c->step);
    if ((c->n_params && !c->params) || (c->n_opt && !c->opt) ||
        c->n_params > (SIZE_MAX / 4 - DDPC_CKPT_HEADER_SIZE) / 2 ||
        c->n_opt > (SIZE_MAX / 4 - DDPC_CKPT_HEADER_SIZE) / 2)
        return DDPC_FAIL(e, DDPC_E_INVALID, "ckpt_write: bad buffers (n_params %zu, n_opt %zu)",
                         c->n_params, c->n_opt);

    char name[NAME_MAX + 1];
    char tag[DDPC_CKPT_TAG_LEN + 1];
    for (int i = 0; i < DDPC_CKPT_TAG_LEN; i++)
        tag[i] = (char)tolower((unsigned char)c->ident_hash[i]);
    tag[DDPC_CKPT_TAG_LEN] = '\0';
    DDPC_TRY(path_join(name, sizeof name, e, "%s-e%04" PRId64 "-s%09" PRId64 "-%s.ckpt",
                       job_name, c->epoch, c->step, tag));

    unsigned char h[DDPC_CKPT_HEADER_SIZE];
    memset(h, 0, sizeof h);
    memcpy(h, ckpt_magic, 8);
    put_u32(h + 8, DDPC_CKPT_VERSION);
    put_u32(h + 12, DDPC_CKPT_HEADER_SIZE);
    for (int i = 0; i < DDPC_CKPT_HASH_LEN; i++)
        h[16 + i] = (unsigned char)tolower((unsigned char)c->ident_hash[i]);
    put_u32(h + 80, (uint32_t)c->world);
    put_u64(h + 88, (uint64_t)c->epoch);
    put_u64(h + 96, (uint64_t)c->step);
    put_u64(h + 104, c->seed);
    put_u64(h + 112, (uint64_t)c->sampler_epoch);
    put_u64(h + 120, (uint64_t)c->sampler_batches);
    for (int i = 0; i < 4; i++)
        put_u64(h + 128 + 8 * i, c->rng[i]);
    put_u64(h + 160, (uint64_t)c->optim_step);
    put_u64(h + 168, (uint64_t)c->n_params);
    put_u64(h + 176, (uint64_t)c->n_opt);
    uint32_t ls;
    memcpy(&ls, &c->loss_scale, 4);
    put_u32(h + 184, ls);
    put_u32(h + 188, (uint32_t)c->good_steps);
    put_u64(h + 192, (uint64_t)c->skipped_steps);
    put_u32(h + 200, (uint32_t)ident_len);
    put_u64(h + 236, (uint64_t)c->train_samples);
    uint64_t el;
    memcpy(&el, &c->epoch_loss, 8);
    put_u64(h + 244, el);
    if (is_hex_hash(c->spec_hash))
        for (int i = 0; i < 32; i++)
            h[204 + i] = (unsigned char)(hexval(c->spec_hash[2 * i]) << 4 |
                                         hexval(c->spec_hash[2 * i + 1]));
    put_u32(h + HDR_CRC_OFF, crc32c(0, h, HDR_CRC_OFF));

    size_t pbytes = 4 * c->n_params, obytes = 4 * c->n_opt;
    uint32_t crc = crc32c(0, h, sizeof h);
    crc = crc32c(crc, c->ident, ident_len);
    crc = crc32c(crc, c->params, pbytes);
    crc = crc32c(crc, c->opt, obytes);
    unsigned char trailer[TRAILER];
    put_u32(trailer, crc);

    char what[PATH_MAX + 32];
    (void)snprintf(what, sizeof what, "checkpoint_dir %s", dir);   /* message only */
    struct ckpt_afile f;
    int rc = afile_open(&f, dir, name, ckpt_file_size(c->n_params, c->n_opt) + ident_len, what,
                        "earlier checkpoints are intact", e);
    if (rc < 0)
        goto out;
    if ((rc = afile_write(&f, h, sizeof h, e)) < 0 ||
        (rc = afile_write(&f, c->ident, ident_len, e)) < 0 ||
        (rc = afile_write(&f, c->params, pbytes, e)) < 0 ||
        (rc = afile_write(&f, c->opt, obytes, e)) < 0 ||
        (rc = afile_write(&f, trailer, sizeof trailer, e)) < 0 ||
        (rc = afile_commit(&f, e)) < 0)
        goto out;
    if (path_out && path_cap) {
        if ((size_t)snprintf(path_out, path_cap, "%s", f.final) >= path_cap)
            rc = DDPC_FAIL(e, DDPC_E_INVALID, "ckpt_write: path_out too small for %s", f.final);
    }
out:
    afile_abort(&f);
    return rc;
}

/* ===================================================================== */
/* read                                                                    */
/* ===================================================================== */

/* Reads exactly n bytes; *got says how many arrived before EOF. */
static int read_full(int fd, void *buf, size_t n, size_t *got)
{
    unsigned char *p = buf;
    *got = 0;
    while (*got < n) {
        ssize_t r = read(fd, p + *got, n - *got);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (r == 0)
            break;
        *got += (size_t)r;
    }
    return 0;
}

void ckpt_free(struct ddpc_ckpt *c)
{
    if (!c)
        return;
    free(c->params);
    free(c->opt);
    free(c->ident);
    c->params = NULL;
    c->opt = NULL;
    c->ident = NULL;
}

/* Long on purpose (~160 lines): the file's checks in the order of its bytes
 * (header, sizes, sections, checksum), each failure a goto to the one cleanup
 * that leaves *out empty; read top to bottom it is the format's validator. */
int ckpt_read(const char *path, struct ddpc_ckpt *out, struct ddpc_err *e)
{
    memset(out, 0, sizeof *out);
    int rc = 0;
    float *params = NULL, *opt = NULL;
    char *ident = NULL;
    unsigned char h[DDPC_CKPT_HEADER_SIZE];
    size_t got = 0;
    struct stat st;
    /* O_NONBLOCK: a FIFO with a checkpoint's name must not hang resume;
     * it is rejected by the S_ISREG check below. No effect on files. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return DDPC_FAIL(e, DDPC_E_SYS, "checkpoint %s: cannot open: %s", path, strerror(errno));
    if (fstat(fd, &st) != 0) {
        rc = DDPC_FAIL(e, DDPC_E_SYS, "checkpoint %s: fstat: %s", path, strerror(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = DDPC_FAIL(e, DDPC_E_DATA, "checkpoint %s: not a regular file", path);
        goto out;
    }
    uint64_t fsize = (uint64_t)st.st_size;
    if (read_full(fd, h, sizeof h, &got) != 0) {
        rc = DDPC_FAIL(e, DDPC_E_SYS, "checkpoint %s: read: %s", path, strerror(errno));
        goto out;
    }
    if (got >= 8 && memcmp(h, ckpt_magic, 8) != 0) {
        rc = DDPC_FAIL(e, DDPC_E_DATA, "checkpoint %s: not a ddpc checkpoint (bad magic)", path);
        goto out;
    }
    if (got < sizeof h) {
        rc = DDPC_FAIL(e, DDPC_E_DATA,
                       "checkpoint %s: truncated: expected at least %d bytes, found %zu",
                       path, DDPC_CKPT_HEADER_SIZE, got);
        goto out;
    }
    if (get_u32(h + HDR_CRC_OFF) != crc32c(0, h, HDR_CRC_OFF)) {
        rc = DDPC_FAIL(e, DDPC_E_DATA,
                       "checkpoint %s: checksum mismatch in the header: the file is corrupt", path);
        goto out;
    }
    uint32_t version = get_u32(h + 8), hsize = get_u32(h + 12);
    if (version != DDPC_CKPT_VERSION && version != 1) {
        rc = DDPC_FAIL(e, DDPC_E_DATA,
                       "checkpoint %s: format version %u, this ddpc reads version %d "
                       "(written by a different ddpc release?)", path, version, DDPC_CKPT_VERSION);
        goto out;
    }
    if (hsize != DDPC_CKPT_HEADER_SIZE) {
        rc = DDPC_FAIL(e, DDPC_E_DATA, "checkpoint %s: header size %u, expected %d",
                       path, hsize, DDPC_CKPT_HEADER_SIZE);
        goto out;
    }
    memcpy(out->ident_hash, h + 16, DDPC_CKPT_HASH_LEN);
    out->ident_hash[DDPC_CKPT_HASH_LEN] = '\0';
    uint32_t ident_len = 0;
    if (version == 1) {
        /* the field held the spec file's hash: keep it as that too */
        memcpy(out->spec_hash, out->ident_hash, sizeof out->spec_hash);
    } else {
        ident_len = get_u32(h + 200);
        static const unsigned char zero[32];
        if (memcmp(h + 204, zero, 32) != 0)
            for (int i = 0; i < 32; i++)
                (void)snprintf(out->spec_hash + 2 * i, 3, "%02x", h[204 + i]);
    }
    out->world = (int32_t)get_u32(h + 80);
    out->epoch = (int64_t)get_u64(h + 88);
    out->step = (int64_t)get_u64(h + 96);
    out->seed = get_u64(h + 104);
    out->sampler_epoch = (int64_t)get_u64(h + 112);
    out->sampler_batches = (int64_t)get_u64(h + 120);
    for (int i = 0; i < 4; i++)
        out->rng[i] = get_u64(h + 128 + 8 * i);
    out->optim_step = (int64_t)get_u64(h + 160);
    uint32_t ls = get_u32(h + 184);
    memcpy(&out->loss_scale, &ls, 4);
    out->good_steps = (int32_t)get_u32(h + 188);
    out->skipped_steps = (int64_t)get_u64(h + 192);
    out->train_samples = (int64_t)get_u64(h + 236);
    uint64_t el = get_u64(h + 244);
    memcpy(&out->epoch_loss, &el, 8);
    uint64_t np = get_u64(h + 168), no = get_u64(h + 176);
    /* Checked before multiplying so a hostile size cannot wrap or ask for
     * an absurd allocation (the header checksum is not a defence). */
    uint64_t limit = ((uint64_t)SIZE_MAX / 4 - DDPC_CKPT_HEADER_SIZE) / 2;
    if (np > limit || no > limit || !is_hex_hash(out->ident_hash) ||
        ident_len > DDPC_CKPT_IDENT_MAX) {
        rc = DDPC_FAIL(e, DDPC_E_DATA, "checkpoint %s: impossible header (n_params %" PRIu64
                       ", n_opt %" PRIu64 ", description %" PRIu32 " bytes): the file is "
                       "corrupt", path, np, no, ident_len);
        goto out;
    }
    /* The counters place the run (epochs, steps, a batch into the epoch)
     * and travel to the other ranks as doubles: a negative or absurd one,
     * which ckpt_write never writes, would resume at a nonsensical
     * position (a negative epoch trains ~forever, a negative batch feeds
     * empty batches). Epochs fit an int, as the spec's do. */
    const int64_t cmax = (int64_t)1 << 53;
    if (out->world < 1 || out->epoch < 0 || out->epoch > INT32_MAX || out->sampler_epoch < 0 ||
        out->sampler_epoch > INT32_MAX || out->step < 0 || out->step > cmax ||
        out->sampler_batches < 0 || out->sampler_batches > cmax || out->optim_step < 0 ||
        out->optim_step > cmax || out->skipped_steps < 0 || out->skipped_steps > cmax ||
        out->good_steps < 0 || out->train_samples < 0 || out->train_samples > cmax ||
        !isfinite(out->epoch_loss) || out->epoch_loss < 0) {
        rc = DDPC_FAIL(e, DDPC_E_DATA, "checkpoint %s: impossible header (world %" PRId32
                       ", epoch %" PRId64 ", step %" PRId64 ", position %" PRId64 " batches "
                       "into epoch %" PRId64 ", optimizer step %" PRId64 "): the file is "
                       "corrupt", path, out->world, out->epoch, out->step, out->sampler_batches,
                       out->sampler_epoch, out->optim_step);
        goto out;
    }
    uint64_t expect = ckpt_file_size((size_t)np, (size_t)no) + ident_len;
    if (fsize < expect) {
        rc = DDPC_FAIL(e, DDPC_E_DATA, "checkpoint %s: truncated: expected %" PRIu64
                       " bytes, found %" PRIu64, path, expect, fsize);
        goto out;
    }
    if (fsize > expect) {
        rc = DDPC_FAIL(e, DDPC_E_DATA, "checkpoint %s: size mismatch: expected %" PRIu64
                       " bytes, found %" PRIu64 " (trailing data)", path, expect, fsize);
        goto out;
    }
    size_t pbytes = 4 * (size_t)np, obytes = 4 * (size_t)no;
    if ((np && !(params = malloc(pbytes))) || (no && !(opt = malloc(obytes))) ||
        (version != 1 && !(ident = malloc((size_t)ident_len + 1)))) {
        rc = DDPC_FAIL(e, DDPC_E_NOMEM, "checkpoint %s: out of memory for %" PRIu64
                       " floats", path, np + no);
        goto out;
    }
    unsigned char trailer[TRAILER];
    size_t g0 = 0, g1 = 0, g2 = 0, g3 = 0;
    if ((ident && read_full(fd, ident, ident_len, &g0) != 0) ||
        read_full(fd, params, pbytes, &g1) != 0 || read_full(fd, opt, obytes, &g2) != 0 ||
        read_full(fd, trailer, sizeof trailer, &g3) != 0) {
        rc = DDPC_FAIL(e, DDPC_E_SYS, "checkpoint %s: read: %s", path, strerror(errno));
        goto out;
    }
    if ((ident && g0 != ident_len) || g1 != pbytes || g2 != obytes || g3 != sizeof trailer) {
        /* fstat said it was long enough: someone truncated it under us. */
        rc = DDPC_FAIL(e, DDPC_E_DATA, "checkpoint %s: truncated while reading: expected %"
                       PRIu64 " bytes", path, expect);
        goto out;
    }
    uint32_t crc = crc32c(0, h, sizeof h);
    crc = crc32c(crc, ident, ident ? ident_len : 0);
    crc = crc32c(crc, params, pbytes);
    crc = crc32c(crc, opt, obytes);
    if (crc != get_u32(trailer)) {
        rc = DDPC_FAIL(e, DDPC_E_DATA, "checkpoint %s: checksum mismatch: the file is corrupt "
                       "(stored crc32c %08x, computed %08x)", path, get_u32(trailer), crc);
        goto out;
    }
    out->n_params = (size_t)np;
    out->n_opt = (size_t)no;
    out->params = params;
    out->opt = opt;
    params = opt = NULL;
    if (ident) {
        ident[ident_len] = '\0';
        if (memchr(ident, '\0', ident_len)) {     /* a checksummed file; still be strict */
            rc = DDPC_FAIL(e, DDPC_E_DATA, "checkpoint %s: a NUL byte in its description: the "
                           "file is corrupt", path);
            goto out;
        }
        out->ident = ident;
        ident = NULL;
    }
out:
    free(params);
    free(opt);
    free(ident);
    if (close(fd) != 0 && rc == 0)
        rc = DDPC_FAIL(e, DDPC_E_SYS, "checkpoint %s: close: %s", path, strerror(errno));
    if (rc < 0) {
        ckpt_free(out);
        memset(out, 0, sizeof *out);
    }
    return rc;
}

/* ===================================================================== */
/* resume selection and pruning                                            */
/* ===================================================================== */

/* "; learning_rate changed: 0.01 -> 0.02" for a message: what separates
 * checkpoint c from the job described by ident. */
static void what_changed(const struct ddpc_ckpt *c, const char *ident, char *out, size_t cap)
{
    out[0] = '\0';
    if (!ident)
        return;
    if (!c->ident) {
        (void)snprintf(out, cap, "; it was written by an older ddpc (format 1), whose "
                       "checkpoints do not record their configuration");
        return;
    }
    char d[1024];
    if (ident_diff(c->ident, ident, 'T', d, sizeof d) > 0)
        (void)snprintf(out, cap, "; %s", d);
}

int ckpt_find_resume(const char *dir, const char *job_name, const char *ident_hash,
                     const char *ident, const char *explicit_path, struct ddpc_ckpt *out,
                     char *path_out, size_t path_cap, FILE *report,
                     struct ddpc_err *e)
{
    memset(out, 0, sizeof *out);
    if (path_out && path_cap)
        path_out[0] = '\0';
    int rc = 0;
    struct ckpt_entry *v = NULL;
    size_t n = 0;
    char path[PATH_MAX], changed[1200];

    if (explicit_path) {
        DDPC_TRY(path_join(path, sizeof path, e, "%s", explicit_path));
        DDPC_TRY(ckpt_read(explicit_path, out, e));
        if (ident_hash && strcmp(out->ident_hash, ident_hash) != 0 && report) {
            what_changed(out, ident, changed, sizeof changed);
            fprintf(report, "ckpt: resuming from %s, written by a different configuration "
                    "(identity %.12s..., this job %.12s...%s): used because it was named "
                    "explicitly\n", explicit_path, out->ident_hash, ident_hash, changed);
        }
        rc = 1;
        goto found;
    }

    DDPC_TRY(check_job_name(job_name, e));
    int missing = 0;
    DDPC_TRY(list_ckpts(dir, job_name, &v, &n, &missing, e));
    size_t n_bad = 0, i_other = SIZE_MAX;
    for (size_t i = 0; i < n; i++) {
        /* another configuration's file (by its tag) is read only when no
         * file of ours turns up: its name says enough until then */
        if (ident_hash && v[i].tag[0] && strncmp(v[i].tag, ident_hash, DDPC_CKPT_TAG_LEN) != 0) {
            if (i_other == SIZE_MAX)
                i_other = i;
            continue;
        }
        if ((rc = path_join(path, sizeof path, e, "%s/%s", dir, v[i].name)) < 0)
            goto out;
        struct ddpc_err re;
        ddpc_err_clear(&re);
        if (ckpt_read(path, out, &re) < 0) {
            /* One bad file (a crash mid-copy, a disk error) must not cost
             * the whole run: say so and fall back to the one before. */
            n_bad++;
            if (report)
                fprintf(report, "ckpt: skipping %s; trying the previous checkpoint\n", re.msg);
            continue;
        }
        if (ident_hash && strcmp(out->ident_hash, ident_hash) != 0) {
            if (i_other == SIZE_MAX || i < i_other)
                i_other = i;
            ckpt_free(out);
            memset(out, 0, sizeof *out);
            continue;
        }
        if (i_other != SIZE_MAX && report)
            fprintf(report, "ckpt: %s also holds %s, of another configuration of job %s; "
                    "resuming this configuration's own newest checkpoint (the other's files "
                    "are left as they are)\n", dir, v[i_other].name, job_name);
        rc = 1;
        goto found;
    }
    /* Nothing of ours. The newest readable checkpoint of another
     * configuration is refused, naming what changed: resuming over it, or
     * silently starting afresh next to it, would both surprise. */
    for (size_t i = i_other; i < n; i++) {
        if ((rc = path_join(path, sizeof path, e, "%s/%s", dir, v[i].name)) < 0)
            goto out;
        struct ddpc_err re;
        ddpc_err_clear(&re);
        if (ckpt_read(path, out, &re) < 0)
            continue;
        if (strcmp(out->ident_hash, ident_hash) == 0) {   /* unreachable: ours were above */
            ckpt_free(out);
            memset(out, 0, sizeof *out);
            continue;
        }
        what_changed(out, ident, changed, sizeof changed);
        rc = DDPC_FAIL(e, DDPC_E_DATA,
                       "checkpoint %s was written by a different configuration of job %s "
                       "(identity %.16s..., this job %.16s...%s): refusing to resume from it. "
                       "To start fresh, set checkpoint.resume: never (this job's checkpoints "
                       "are named and pruned apart from it: nothing of it is removed) or use "
                       "another checkpoint_dir; to resume from it anyway, set "
                       "checkpoint.resume: %s",
                       path, job_name, out->ident_hash, ident_hash, changed, path);
        ckpt_free(out);
        memset(out, 0, sizeof *out);
        goto out;
    }
    if (n_bad > 0)
        rc = DDPC_FAIL(e, DDPC_E_DATA,
                       "checkpoint_dir %s: %zu checkpoint%s of job %s found but none is readable "
                       "(see above); move %s away to start fresh, or set checkpoint.resume: never "
                       "(which leaves %s in place)",
                       dir, n_bad, n_bad == 1 ? "" : "s", job_name, n_bad == 1 ? "it" : "them",
                       n_bad == 1 ? "it" : "them");
    goto out;   /* rc 0: nothing to resume from */

found:
    if (path_out && path_cap && (size_t)snprintf(path_out, path_cap, "%s", path) >= path_cap) {
        ckpt_free(out);
        memset(out, 0, sizeof *out);
        rc = DDPC_FAIL(e, DDPC_E_INVALID, "ckpt_find_resume: path_out too small for %s", path);
    }
out:
    entries_free(v, n);
    return rc;
}

int ckpt_find_newest(const char *dir, const char *job_name, const char *ident_hash,
                     struct ddpc_ckpt *out, char *path_out, size_t path_cap, int *others,
                     FILE *report, struct ddpc_err *e)
{
    memset(out, 0, sizeof *out);
    *others = 0;
    if (path_out && path_cap)
        path_out[0] = '\0';
    DDPC_TRY(check_job_name(job_name, e));
    struct ckpt_entry *v = NULL;
    size_t n = 0;
    int missing = 0, rc = 0;
    char path[PATH_MAX];
    DDPC_TRY(list_ckpts(dir, job_name, &v, &n, &missing, e));
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (v[i].tag[0] && strncmp(v[i].tag, ident_hash, DDPC_CKPT_TAG_LEN) != 0) {
            ++*others;
            continue;
        }
        if ((rc = path_join(path, sizeof path, e, "%s/%s", dir, v[i].name)) < 0)
            break;
        struct ddpc_err re;
        ddpc_err_clear(&re);
        if (ckpt_read(path, out, &re) < 0) {
            if (report)
                fprintf(report, "ckpt: skipping %s; trying the previous checkpoint\n", re.msg);
            continue;
        }
        if (strcmp(out->ident_hash, ident_hash) != 0) {
            ++*others;
            ckpt_free(out);
            memset(out, 0, sizeof *out);
            continue;
        }
        rc = 1;
        if (path_out && path_cap && (size_t)snprintf(path_out, path_cap, "%s", path) >= path_cap) {
            ckpt_free(out);
            memset(out, 0, sizeof *out);
            rc = DDPC_FAIL(e, DDPC_E_INVALID, "ckpt_find_newest: path_out too small for %s",
                           path);
        }
    }
    entries_free(v, n);
    return rc;
}

/* Does the header of dir/name hold identity ident_hash? Reads the header
 * only (its own checksum included); anything unreadable is "no". */
static int header_has_ident(const char *path, const char *ident_hash)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return 0;
    unsigned char h[DDPC_CKPT_HEADER_SIZE];
    size_t got = 0;
    struct stat st;
    int ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
             read_full(fd, h, sizeof h, &got) == 0 && got == sizeof h &&
             memcmp(h, ckpt_magic, 8) == 0 &&
             get_u32(h + HDR_CRC_OFF) == crc32c(0, h, HDR_CRC_OFF) &&
             get_u32(h + 8) == DDPC_CKPT_VERSION;
    (void)close(fd);            /* read-only */
    if (!ok)
        return 0;
    for (int i = 0; i < DDPC_CKPT_HASH_LEN; i++)
        if (h[16 + i] != (unsigned char)tolower((unsigned char)ident_hash[i]))
            return 0;
    return 1;
}

/* Most recently written first (modification time), then by step: what
 * keep_last keeps. Not the step alone: a run started over (resume: never,
 * or resumed from an older file) would otherwise see the abandoned run's
 * higher-step files as "newest" and prune each checkpoint it just wrote. */
static int entry_written_cmp(const void *a, const void *b)
{
    const struct ckpt_entry *x = a, *y = b;
    if (x->mtime_s != y->mtime_s)
        return x->mtime_s < y->mtime_s ? 1 : -1;
    if (x->mtime_ns != y->mtime_ns)
        return x->mtime_ns < y->mtime_ns ? 1 : -1;
    return entry_cmp(a, b);
}

int ckpt_prune(const char *dir, const char *job_name, const char *ident_hash, int keep_last,
               struct ddpc_err *e)
{
    DDPC_TRY(check_job_name(job_name, e));
    struct ckpt_entry *v = NULL;
    size_t n = 0;
    int missing = 0, rc = 0, removed = 0;
    char path[PATH_MAX];
    DDPC_TRY(list_ckpts(dir, job_name, &v, &n, &missing, e));
    if (missing)
        return 0;
    /* only this identity's files take part, by tag and (the tag is 32
     * bits) the header's full hash: drop the others from the list */
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        int ours = ident_hash && keep_last > 0 && v[i].tag[0] &&
                   strncmp(v[i].tag, ident_hash, DDPC_CKPT_TAG_LEN) == 0;
        if (ours) {
            /* a path too long to open cannot be checked: not ours */
            int len = snprintf(path, sizeof path, "%s/%s", dir, v[i].name);
            ours = len > 0 && (size_t)len < sizeof path && header_has_ident(path, ident_hash);
        }
        if (ours)
            v[kept++] = v[i];
        else
            free(v[i].name);
    }
    n = kept;
    if (keep_last > 0 && (size_t)keep_last < n) {
        for (size_t i = 0; i < n; i++) {
            struct stat st;
            if ((rc = path_join(path, sizeof path, e, "%s/%s", dir, v[i].name)) < 0)
                goto out;
            if (stat(path, &st) == 0) {   /* gone meanwhile: oldest, unlink is ENOENT */
                v[i].mtime_s = (int64_t)st.st_mtim.tv_sec;
                v[i].mtime_ns = (int64_t)st.st_mtim.tv_nsec;
            }
        }
        qsort(v, n, sizeof *v, entry_written_cmp);
    }
    for (size_t i = keep_last > 0 ? (size_t)keep_last : n; i < n; i++) {
        if ((rc = path_join(path, sizeof path, e, "%s/%s", dir, v[i].name)) < 0)
            goto out;
        if (unlink(path) != 0 && errno != ENOENT) {
            rc = DDPC_FAIL(e, DDPC_E_SYS, "checkpoint_dir %s: removing old checkpoint %s: %s",
                           dir, v[i].name, strerror(errno));
            goto out;
        }
        removed++;
    }

    /* Temp files of writers that died mid-write (kill -9, OOM, power):
     * only those written from this host by a pid that no longer exists, so
     * a live writer's file, here or on another node, is never touched. */
    char self_host[72];
    host_tag(self_host, sizeof self_host);
    DIR *d = opendir(dir);
    if (!d) {
        rc = DDPC_FAIL(e, DDPC_E_SYS, "checkpoint_dir %s: cannot list it: %s", dir, strerror(errno));
        goto out;
    }
    for (;;) {
        errno = 0;
        struct dirent *de = readdir(d);
        if (!de) {
            if (errno != 0)
                rc = DDPC_FAIL(e, DDPC_E_SYS, "checkpoint_dir %s: readdir: %s", dir, strerror(errno));
            break;
        }
        long pid;
        char host[72];
        if (!parse_tmp_name(de->d_name, job_name, host, sizeof host, &pid) ||
            strcmp(host, self_host) != 0 || pid == (long)getpid())
            continue;
        if (writer_alive(pid))
            continue;
        if ((rc = path_join(path, sizeof path, e, "%s/%s", dir, de->d_name)) < 0)
            break;
        if (unlink(path) != 0 && errno != ENOENT) {
            rc = DDPC_FAIL(e, DDPC_E_SYS, "checkpoint_dir %s: removing stale temp file %s: %s",
                           dir, de->d_name, strerror(errno));
            break;
        }
        removed++;
    }
    if (closedir(d) != 0 && rc == 0)
        rc = DDPC_FAIL(e, DDPC_E_SYS, "checkpoint_dir %s: closedir: %s", dir, strerror(errno));
    if (rc == 0 && removed) {
        char what[PATH_MAX + 32];
        (void)snprintf(what, sizeof what, "checkpoint_dir %s", dir);   /* message only */
        rc = fsync_dir(dir, what, e);
    }
out:
    entries_free(v, n);
    return rc;
}

int ckpt_newest_mtime(const char *dir, const char *job_name, int64_t *sec, int64_t *nsec,
                      struct ddpc_err *e)
{
    *sec = *nsec = 0;
    DDPC_TRY(check_job_name(job_name, e));
    struct ckpt_entry *v = NULL;
    size_t n = 0;
    int missing = 0, rc = 0;
    char path[PATH_MAX];
    DDPC_TRY(list_ckpts(dir, job_name, &v, &n, &missing, e));
    for (size_t i = 0; i < n; i++) {
        struct stat st;
        if ((rc = path_join(path, sizeof path, e, "%s/%s", dir, v[i].name)) < 0)
            break;
        if (stat(path, &st) != 0)   /* pruned meanwhile */
            continue;
        if ((int64_t)st.st_mtim.tv_sec > *sec ||
            ((int64_t)st.st_mtim.tv_sec == *sec && (int64_t)st.st_mtim.tv_nsec > *nsec)) {
            *sec = (int64_t)st.st_mtim.tv_sec;
            *nsec = (int64_t)st.st_mtim.tv_nsec;
        }
    }
    entries_free(v, n);
    return rc;
}

/* ===================================================================== */
/* pre-flight                                                              */
/* ===================================================================== */

/* "36.2 KiB", "1.5 GiB": sizes people read in an error message. */
static const char *fmt_bytes(char *buf, size_t cap, long double b)
{
    static const char *unit[] = { "bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
    int u = 0;
    while (b >= 1024.0L && u < 6) {
        b /= 1024.0L;
        u++;
    }
    (void)snprintf(buf, cap, u ? "%.1Lf %s" : "%.0Lf %s", b, unit[u]);   /* fits in 32 */
    return buf;
}

int ckpt_preflight(const char *dir, size_t ckpt_bytes, struct ddpc_err *e)
{
    return ckpt_preflight_n(dir, ckpt_bytes, 2, e);
}

/* mkdir -p dir, then prove it writable. `what` prefixes messages ("checkpoint_dir
 * ckpt", "checkpoint.export out/model.safetensors"), `key` names the spec key
 * to change. */
static int dir_ready(const char *dir, const char *what, const char *key, struct ddpc_err *e)
{
    char p[PATH_MAX];
    DDPC_TRY(path_join(p, sizeof p, e, "%s", dir));

    /* mkdir -p: create each missing component; existing ones are fine as
     * long as the last one turns out to be a directory. */
    for (char *s = p + 1; ; s++) {
        if (*s != '/' && *s != '\0')
            continue;
        char saved = *s;
        *s = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST)
            return DDPC_FAIL(e, DDPC_E_SYS, "%s: cannot create directory %s: %s; point %s "
                             "elsewhere", what, p, strerror(errno), key);
        *s = saved;
        if (saved == '\0')
            break;
    }
    struct stat st;
    if (stat(dir, &st) != 0)
        return DDPC_FAIL(e, DDPC_E_SYS, "%s: %s: %s", what, dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return DDPC_FAIL(e, DDPC_E_SYS, "%s: %s exists and is not a directory", what, dir);

    /* access(W_OK) would lie for root and on read-only mounts; creating a
     * file is the only honest test. */
    char probe[PATH_MAX];
    DDPC_TRY(path_join(probe, sizeof probe, e, "%s/.ddpc-probe.%ld", dir, (long)getpid()));
    /* Exclusive and not through a link: the name is predictable, and a
     * link planted under it in a shared directory would have this job
     * truncate (or create) whatever it points to. EEXIST: a probe or a
     * link left there; remove the name (never its target) and try again. */
    int fd = -1;
    for (int attempt = 0; attempt < 2 && fd < 0; attempt++) {
        fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0 && (errno != EEXIST || unlink(probe) != 0))
            break;
    }
    if (fd < 0)
        return DDPC_FAIL(e, DDPC_E_SYS, "%s: directory %s is not writable: cannot create a "
                         "file in it: %s; fix its permissions or point %s elsewhere",
                         what, dir, strerror(errno), key);
    int rc = 0;
    if (close(fd) != 0)
        rc = DDPC_FAIL(e, DDPC_E_SYS, "%s: close(%s): %s", what, probe, strerror(errno));
    if (unlink(probe) != 0 && rc == 0)
        rc = DDPC_FAIL(e, DDPC_E_SYS, "%s: unlink(%s): %s", what, probe, strerror(errno));
    return rc;
}

/* The directory part of path ("." for a bare name, "/" for "/x"); base
 * (may be NULL) receives the file name's offset in path. */
static int split_dir(const char *path, char *dir, size_t cap, size_t *base, struct ddpc_err *e)
{
    DDPC_TRY(path_join(dir, cap, e, "%s", path));
    char *slash = strrchr(dir, '/');
    size_t b = 0;
    if (!slash) {
        strcpy(dir, ".");
    } else {
        b = (size_t)(slash - dir) + 1;
        if (slash == dir)
            slash[1] = '\0';    /* "/model.safetensors": the root directory */
        else
            *slash = '\0';
    }
    if (base)
        *base = b;
    return 0;
}

int ckpt_remove_stale_export_temps(const char *path, struct ddpc_err *e)
{
    if (!path || !path[0])
        return 0;
    char dir[PATH_MAX], self_host[72], prefix[NAME_MAX + 16], p[PATH_MAX];
    size_t base;
    DDPC_TRY(split_dir(path, dir, sizeof dir, &base, e));
    if (!path[base])
        return 0;
    /* afile_open's temp name: .<base>.tmp.<host>.<pid> */
    if ((size_t)snprintf(prefix, sizeof prefix, ".%s.tmp.", path + base) >= sizeof prefix)
        return 0;
    host_tag(self_host, sizeof self_host);
    DIR *d = opendir(dir);
    if (!d)
        return 0;   /* no directory: nothing was ever written there */
    int rc = 0, removed = 0;
    size_t pl = strlen(prefix), hl = strlen(self_host);
    for (;;) {
        errno = 0;
        struct dirent *de = readdir(d);
        if (!de)
            break;
        const char *n = de->d_name;
        int64_t pid;
        const char *end;
        if (strncmp(n, prefix, pl) != 0 || strncmp(n + pl, self_host, hl) != 0 ||
            n[pl + hl] != '.' || !(end = parse_digits(n + pl + hl + 1, &pid)) || *end ||
            pid <= 0 || pid > INT_MAX || pid == (int64_t)getpid())
            continue;
        if (writer_alive((long)pid))
            continue;   /* a live writer's */
        if ((rc = path_join(p, sizeof p, e, "%s/%s", dir, n)) < 0)
            break;
        if (unlink(p) != 0 && errno != ENOENT) {
            rc = DDPC_FAIL(e, DDPC_E_SYS, "checkpoint.export %s: removing stale temp file %s: %s",
                           path, n, strerror(errno));
            break;
        }
        removed++;
    }
    (void)closedir(d);   /* read-only listing: nothing to lose */
    if (rc == 0 && removed) {
        char what[PATH_MAX + 32];
        (void)snprintf(what, sizeof what, "checkpoint.export %s", path);   /* message only */
        rc = fsync_dir(dir, what, e);
    }
    return rc;
}

int ckpt_preflight_export(const char *path, struct ddpc_err *e)
{
    if (!path || !path[0])
        return 0;
    char dir[PATH_MAX], what[PATH_MAX + 32];
    size_t base;
    DDPC_TRY(split_dir(path, dir, sizeof dir, &base, e));
    (void)snprintf(what, sizeof what, "checkpoint.export %s", path);   /* message only */
    if (!path[base])
        return DDPC_FAIL(e, DDPC_E_INVALID, "%s: names a directory, not a file", what);
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return DDPC_FAIL(e, DDPC_E_SYS, "%s is a directory; name a file", what);
    return dir_ready(dir, what, "checkpoint.export", e);
}

int ckpt_preflight_n(const char *dir, size_t ckpt_bytes, int copies, struct ddpc_err *e)
{
    if (!dir || !dir[0])
        return DDPC_FAIL(e, DDPC_E_INVALID, "ckpt_preflight: empty checkpoint_dir");
    char what[PATH_MAX + 32];
    (void)snprintf(what, sizeof what, "checkpoint_dir %s", dir);   /* message only */
    DDPC_TRY(dir_ready(dir, what, "checkpoint_dir", e));

    struct statvfs sv;
    char have_s[32], need_s[32];
    if (statvfs(dir, &sv) != 0)
        return DDPC_FAIL(e, DDPC_E_SYS, "checkpoint_dir %s: statvfs: %s", dir, strerror(errno));
    /* Unprivileged free space (f_bavail), the budget a job really has. */
    long double avail = (long double)sv.f_bavail * (long double)sv.f_frsize;
    if (copies < 2)
        copies = 2;
    long double need = (long double)copies * (long double)ckpt_bytes;
    if (avail < need)
        return DDPC_FAIL(e, DDPC_E_SYS,
                         "checkpoint_dir %s: %s free, checkpoints need %s (%d x %zu bytes: %s); "
                         "free some space or point checkpoint_dir elsewhere",
                         dir, fmt_bytes(have_s, sizeof have_s, avail),
                         fmt_bytes(need_s, sizeof need_s, need), copies, ckpt_bytes,
                         copies == 2 ? "a new checkpoint is written in full before the previous "
                                       "one is pruned"
                                     : "the checkpoints this run holds at once, a new one "
                                       "written in full before the oldest is pruned");
    return 0;
}

/* ===================================================================== */
/* safetensors export                                                      */
/* ===================================================================== */

struct sbuf {
    char  *s;
    size_t len, cap;
    int    oom;
};

static void sb_printf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(struct sbuf *b, const char *fmt, ...)
{
    for (;;) {
        if (b->oom)
            return;
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = 1;
            return;
        }
        if (b->s && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t nc = (b->cap ? b->cap : 512);
        while (nc <= b->len + (size_t)n)
            nc *= 2;
        char *ns = realloc(b->s, nc);
        if (!ns) {
            b->oom = 1;
            return;
        }
        b->s = ns;
        b->cap = nc;
    }
}

/* A JSON string literal; the job name is [A-Za-z0-9._-] but the escaping
 * costs nothing and keeps the header valid whatever is passed. */
static void sb_json_str(struct sbuf *b, const char *s)
{
    sb_printf(b, "\"");
    for (; s && *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            sb_printf(b, "\\%c", ch);
        else if (ch < 0x20)
            sb_printf(b, "\\u%04x", ch);
        else
            sb_printf(b, "%c", ch);
    }
    sb_printf(b, "\"");
}

static const char *act_name(enum ddpc_activation a)
{
    switch (a) {
    case DDPC_ACT_RELU:     return "relu";
    case DDPC_ACT_GELU:     return "gelu";
    case DDPC_ACT_TANH:     return "tanh";
    case DDPC_ACT_SIGMOID:  return "sigmoid";
    case DDPC_ACT_IDENTITY: return "identity";
    }
    return "unknown";
}

/* ---- model.init_from: a safetensors file with the export's names ---- */

int ckpt_read_net(const char *path, const struct ddpc_net *net, float *params, float *state,
                  struct ddpc_err *e)
{
    return ckpt_read_net_as(path, "model.init_from", net, params, state, e);
}

int ckpt_read_net_as(const char *path, const char *what, const struct ddpc_net *net,
                     float *params, float *state, struct ddpc_err *e)
{
    FILE *f = fopen(path, "rbe");
    if (!f)
        return DDPC_FAIL(e, DDPC_E_DATA, "%s %s: %s", what, path, strerror(errno));
    unsigned char lb[8];
    char *hdr = NULL;
    int rc = 0;
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        rc = DDPC_FAIL(e, DDPC_E_DATA, "%s %s: not a regular file", what, path);
        goto out;
    }
    if (fread(lb, 1, 8, f) != 8) {
        rc = DDPC_FAIL(e, DDPC_E_DATA, "%s %s: too short for safetensors", what, path);
        goto out;
    }
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = hl << 8 | lb[i];
    if (hl < 2 || hl > (uint64_t)st.st_size - 8 || hl > (64u << 20)) {
        rc = DDPC_FAIL(e, DDPC_E_DATA, "%s %s: header length %llu does not fit "
                       "the file (%lld bytes): not a safetensors file", what, path,
                       (unsigned long long)hl, (long long)st.st_size);
        goto out;
    }
    hdr = malloc(hl + 1);
    if (!hdr || fread(hdr, 1, hl, f) != hl) {
        rc = DDPC_FAIL(e, DDPC_E_DATA, "%s %s: cannot read its header", what, path);
        goto out;
    }
    hdr[hl] = '\0';
    const char *end = hdr + hl;
    uint64_t data_len = (uint64_t)st.st_size - 8 - hl;
    /* the top-level entries other than __metadata__ are the tensors */
    const char *body = st_skip_ws(hdr, end), *k, *val, *ve;
    size_t kl;
    int entries = 0, more;
    if (body >= end || *body != '{') {
        rc = DDPC_FAIL(e, DDPC_E_DATA, "%s %s: its header is not a JSON object: "
                       "not a safetensors file", what, path);
        goto out;
    }
    body++;
    for (const char *p = body; (more = st_next(&p, end, &k, &kl, &val, &ve)) > 0;)
        entries += !(kl == 12 && memcmp(k, "__metadata__", 12) == 0);
    if (more < 0) {
        rc = DDPC_FAIL(e, DDPC_E_DATA, "%s %s: its header is not valid JSON: not a "
                       "safetensors file", what, path);
        goto out;
    }
    /* a tied weight is in the file twice (nanoGPT's state_dict: wte and
     * lm_head.weight); read it once under each name and require equality */
    int tied = net->tie_tensor >= 0 && net->tie_tensor < net->n_tensors && net->tie_name[0];
    if (entries != net->n_tensors + tied) {
        rc = DDPC_FAIL(e, DDPC_E_DATA, "%s %s holds %d tensors; this model has %d "
                       "(`ddpc plan` lists them%s%s; the file must hold exactly those names)",
                       what, path,
                       entries, net->n_tensors + tied, tied ? ", and the tied " : "",
                       tied ? net->tie_name : "");
        goto out;
    }
    float *tie_copy = NULL;
    for (int t = 0; t < net->n_tensors + tied && rc == 0; t++) {
        /* t == n_tensors: the tied weight's second name, read into a copy */
        struct ddpc_tensor tie_alias;
        const struct ddpc_tensor *T = &net->tensor[t < net->n_tensors ? t : net->tie_tensor];
        if (t == net->n_tensors) {
            tie_alias = *T;
            snprintf(tie_alias.name, sizeof tie_alias.name, "%s", net->tie_name);
            T = &tie_alias;
            tie_copy = malloc(4 * T->numel + 4);
            if (!tie_copy) {
                rc = DDPC_FAIL(e, DDPC_E_NOMEM, "%s %s: out of memory", what, path);
                break;
            }
        }
        size_t nl = strlen(T->name);
        const char *open = NULL, *close = NULL;
        int times = 0;
        for (const char *p = body; st_next(&p, end, &k, &kl, &val, &ve) > 0;)
            if (kl == nl && memcmp(k, T->name, nl) == 0 && times++ == 0 && *val == '{') {
                open = val;
                close = ve - 1;   /* its '}' */
            }
        if (times > 1) {
            rc = DDPC_FAIL(e, DDPC_E_DATA, "%s %s holds tensor %s %d times", what, path,
                           T->name, times);
            break;
        }
        if (!close) {
            rc = DDPC_FAIL(e, DDPC_E_DATA, "%s %s has no tensor %s", what, path, T->name);
            break;
        }
        const char *dt = st_field(open, close, "dtype");
        int is_i64 = dt && strncmp(dt, "\"I64\"", 5) == 0, is_f32 = dt && strncmp(dt, "\"F32\"", 5) == 0;
        uint64_t shp[8], offs[2];
        int nd = st_ints(st_field(open, close, "shape"), close, shp, 8);
        int no = st_ints(st_field(open, close, "data_offsets"), close, offs, 2);
        int want_i64 = T->is_count;
        if (!(want_i64 ? (is_i64 || is_f32) : is_f32)) {
            rc = DDPC_FAIL(e, DDPC_E_DATA, "%s %s: tensor %s is not %s", what, path,
                           T->name, want_i64 ? "I64" : "F32");
            break;
        }
        int same = nd == T->nd;
        for (int i = 0; same && i < nd; i++)
            same = shp[i] == (uint64_t)T->shape[i];
        if (!same) {
            char want[96] = "[", got[96] = "[";
            for (int i = 0; i < T->nd; i++)
                snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", i ? ", " : "",
                         (long long)T->shape[i]);
            for (int i = 0; i < nd && nd > 0; i++)
                snprintf(got + strlen(got), sizeof got - strlen(got), "%s%llu", i ? ", " : "",
                         (unsigned long long)shp[i]);
            rc = DDPC_FAIL(e, DDPC_E_DATA, "%s %s: tensor %s has shape %s], this "
                           "model's has %s]", what, path, T->name, nd < 0 ? "(unreadable" : got,
                           want);
            break;
        }
        uint64_t esz = is_i64 ? 8 : 4;
        if (no != 2 || offs[1] < offs[0] || offs[1] - offs[0] != esz * T->numel ||
            offs[1] > data_len) {
            rc = DDPC_FAIL(e, DDPC_E_DATA, "%s %s: tensor %s's data_offsets do not "
                           "fit its shape or the file", what, path, T->name);
            break;
        }
        float *dst = t == net->n_tensors ? tie_copy
                                         : (T->kind == DDPC_TENSOR_PARAM ? params : state) + T->off;
        if (fseeko(f, (off_t)(8 + hl + offs[0]), SEEK_SET) != 0) {
            rc = DDPC_FAIL(e, DDPC_E_DATA, "%s %s: %s", what, path, strerror(errno));
            break;
        }
        if (is_i64 || (want_i64 && is_f32)) {
            unsigned char b8[8] = { 0 };
            if (fread(b8, 1, (size_t)esz, f) != esz) {
                rc = DDPC_FAIL(e, DDPC_E_DATA, "%s %s: truncated", what, path);
                break;
            }
            if (is_i64) {
                uint64_t v = 0;
                for (int i = 7; i >= 0; i--)
                    v = v << 8 | b8[i];
                dst[0] = (float)(int64_t)v;
            } else {
                memcpy(dst, b8, 4);
            }
        } else if (fread(dst, 4, T->numel, f) != T->numel) {
            rc = DDPC_FAIL(e, DDPC_E_DATA, "%s %s: truncated", what, path);
            break;
        }
        if (t == net->n_tensors) {
            const struct ddpc_tensor *W = &net->tensor[net->tie_tensor];
            if (memcmp(tie_copy, params + W->off, 4 * W->numel) != 0) {
                size_t i = 0;
                while (i < W->numel && memcmp(&tie_copy[i], &params[W->off + i], 4) == 0)
                    i++;
                rc = DDPC_FAIL(e, DDPC_E_DATA, "%s %s: %s differs from %s (element "
                               "%zu: %.9g vs %.9g), but this model ties them (one weight): a "
                               "file of an untied model cannot be continued", what, path,
                               net->tie_name, W->name, i, (double)tie_copy[i],
                               (double)params[W->off + i]);
            }
        }
    }
    free(tie_copy);
out:
    free(hdr);
    fclose(f);
    return rc;
}

/* Pads the safetensors header b so the data starts 8-byte aligned, opens
 * the export's temp file next to path (the rename stays on one file system;
 * missing parent directories are created, like metrics_csv's) and writes
 * the header's length and the header. The caller writes data_bytes of
 * tensor data, then afile_commit; afile_abort(f) always (f is set up even
 * on failure). */
static int export_begin(const char *path, struct sbuf *b, uint64_t data_bytes,
                        struct ckpt_afile *f, struct ddpc_err *e)
{
    f->fd = -1;
    f->tmp[0] = '\0';
    f->renamed = 0;
    while (!b->oom && b->len % 8 != 0)
        sb_printf(b, " ");
    if (b->oom)
        return DDPC_FAIL(e, DDPC_E_NOMEM, "export %s: out of memory building the header", path);
    unsigned char lenbuf[8];
    put_u64(lenbuf, (uint64_t)b->len);
    char dir[PATH_MAX], what[PATH_MAX + 32];
    size_t base_off = 0;
    int rc = split_dir(path, dir, sizeof dir, &base_off, e);
    if (rc < 0)
        return rc;
    const char *base = path + base_off;
    if (!base[0])
        return DDPC_FAIL(e, DDPC_E_INVALID, "export %s: names a directory, not a file", path);
    (void)snprintf(what, sizeof what, "export %s", path);  /* message only */
    if ((rc = dir_ready(dir, what, "checkpoint.export", e)) < 0 ||
        (rc = afile_open(f, dir, base, 8 + b->len + data_bytes, what,
                         "any earlier export is intact", e)) < 0 ||
        (rc = afile_write(f, lenbuf, sizeof lenbuf, e)) < 0)
        return rc;
    return afile_write(f, b->s, b->len, e);
}

/* The export's complete temp file f under its name: path itself without an
 * identity, else the version of path that is free or this run's
 * (outver.h), taken by an exclusive link when it is new, so two runs that
 * chose one free version at once each end with a file of their own.
 * written (may be NULL) receives the name. */
static int export_commit(struct ckpt_afile *f, const char *path, const struct ddpc_out_id *id,
                         char *written, size_t cap, struct ddpc_err *e)
{
    int rc = 1;
    for (int tries = 0; rc == 1 && tries < 100; tries++) {
        char cand[PATH_MAX];
        enum ddpc_out_owner who = DDPC_OUT_OURS;
        if (id)
            DDPC_TRY(outver_resolve(DDPC_OUT_EXPORT, path, "checkpoint.export", id, cand,
                                    sizeof cand, &who, e));
        else
            DDPC_TRY(path_join(cand, sizeof cand, e, "%s", path));
        DDPC_TRY(path_join(f->final, sizeof f->final, e, "%s", cand));
        struct stat st;
        /* over this run's own file (or an empty one): the rename replaces it */
        rc = !id || lstat(cand, &st) == 0 ? afile_commit(f, e) : afile_commit_new(f, e);
    }
    if (rc == 1)
        return DDPC_FAIL(e, DDPC_E_SYS, "export %s: every version this run chose was taken by "
                         "another at once, 100 times; %s", path, f->intact);
    if (rc == 0 && written && cap)
        (void)snprintf(written, cap, "%s", f->final);
    return rc;
}

int ckpt_out_open(struct ckpt_afile *f, const char *path, const char *what, const char *key,
                  const char *intact, struct ddpc_err *e)
{
    f->fd = -1;
    f->tmp[0] = '\0';
    f->renamed = 0;
    char dir[PATH_MAX];
    size_t base_off = 0;
    DDPC_TRY(split_dir(path, dir, sizeof dir, &base_off, e));
    if (!path[base_off])
        return DDPC_FAIL(e, DDPC_E_INVALID, "%s %s: names a directory, not a file", what, path);
    DDPC_TRY(dir_ready(dir, what, key, e));
    return afile_open(f, dir, path + base_off, 0, what, intact, e);
}

int ckpt_out_write(struct ckpt_afile *f, const void *buf, size_t n, struct ddpc_err *e)
{
    return afile_write(f, buf, n, e);
}

int ckpt_out_commit(struct ckpt_afile *f, struct ddpc_err *e)
{
    return afile_commit(f, e);
}

void ckpt_out_abort(struct ckpt_afile *f)
{
    afile_abort(f);
}

/* __metadata__'s identity entries: the run's identity hash and the lines
 * of its description (ident.h) that the hash covers, those that decide the
 * trajectory ('T'), so a later run knows whose file this is (outver.h) and
 * can name what differs; two runs of one trajectory (other logging, other
 * checkpoint cadence) still write the same bytes. */
static void export_identity_meta(struct sbuf *b, const struct ddpc_out_id *id)
{
    if (!id || !id->hash)
        return;
    sb_printf(b, ",\"ddpc_identity\":");
    sb_json_str(b, id->hash);
    if (!id->ident)
        return;
    size_t n = strlen(id->ident), k = 0;
    char *t = malloc(n + 1);
    if (!t) {
        b->oom = 1;
        return;
    }
    for (const char *p = id->ident; *p;) {
        const char *nl = strchr(p, '\n');
        size_t l = nl ? (size_t)(nl - p) + 1 : strlen(p);
        if (p[0] == 'T' && p[1] == ' ') {
            memcpy(t + k, p, l);
            k += l;
        }
        p += l;
    }
    t[k] = '\0';
    sb_printf(b, ",\"ddpc_ident\":");
    sb_json_str(b, t);
    free(t);
}

/* The JSON string at p (its opening quote) unescaped into out (cap bytes,
 * NUL-terminated, cut short when it does not fit). Returns 0, or -1 when it
 * is not a string. */
static int st_string_copy(const char *p, const char *end, char *out, size_t cap)
{
    const char *q = p < end && *p == '"' ? st_string_end(p, end) : NULL;
    if (!q)
        return -1;
    size_t n = 0;
    for (p++, q--; p < q && n + 1 < cap; p++) {
        char c = *p;
        if (c == '\\' && p + 1 < q) {
            c = *++p;
            if (c == 'n') c = '\n';
            else if (c == 't') c = '\t';
            else if (c == 'r') c = '\r';
            else if (c == 'u' && p + 4 < q) {
                int v = 0;
                for (int i = 1; i <= 4; i++)
                    v = v * 16 + (hexval(p[i]) < 0 ? 0 : hexval(p[i]));
                p += 4;
                c = v < 0x80 ? (char)v : '?';
            }
        }
        out[n++] = c;
    }
    if (cap)
        out[n < cap ? n : cap - 1] = '\0';
    return 0;
}

int ckpt_export_identity(const char *path, char hash[DDPC_CKPT_HASH_LEN + 1], char *desc,
                         size_t desc_cap)
{
    hash[0] = '\0';
    if (desc && desc_cap)
        desc[0] = '\0';
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return -1;
    struct stat st;
    unsigned char lb[8];
    char *hdr = NULL;
    int rc = -1;
    size_t got = 0;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || read_full(fd, lb, 8, &got) != 0 ||
        got != 8)
        goto out;
    uint64_t hl = get_u64(lb);
    if (hl < 2 || hl > (uint64_t)st.st_size - 8 || hl > (64u << 20) || !(hdr = malloc(hl + 1)) ||
        read_full(fd, hdr, (size_t)hl, &got) != 0 || got != hl)
        goto out;
    hdr[hl] = '\0';
    const char *end = hdr + hl, *p = st_skip_ws(hdr, end), *k, *v, *ve;
    size_t kl;
    if (p >= end || *p != '{')
        goto out;
    p++;
    int more;
    rc = 1;   /* a safetensors header, with or without ddpc's marks */
    while ((more = st_next(&p, end, &k, &kl, &v, &ve)) > 0) {
        if (kl != 12 || memcmp(k, "__metadata__", 12) != 0 || *v != '{')
            continue;
        const char *h = st_field(v, ve, "ddpc_identity");
        char tmp[DDPC_CKPT_HASH_LEN + 8];
        if (h && st_string_copy(h, ve, tmp, sizeof tmp) == 0 && strlen(tmp) == DDPC_CKPT_HASH_LEN &&
            is_hex_hash(tmp))
            memcpy(hash, tmp, DDPC_CKPT_HASH_LEN + 1);
        const char *d = st_field(v, ve, "ddpc_ident");
        if (d && desc && desc_cap)
            (void)st_string_copy(d, ve, desc, desc_cap);
    }
    if (more < 0)
        rc = -1;
out:
    free(hdr);
    (void)close(fd);   /* read-only */
    return rc;
}

int ckpt_export_net(const char *path, const struct ddpc_job *job, const struct ddpc_net *net,
                    const float *params, const float *state, const struct ddpc_out_id *id,
                    char *written, size_t written_cap, struct ddpc_err *e)
{
    if (!path || !path[0] || !job || !net || (net->n_params && !params) ||
        (net->n_state && !state))
        return DDPC_FAIL(e, DDPC_E_INVALID, "ckpt_export_net: no path, job, net or buffers");
    struct sbuf b = { 0 };
    uint64_t off = 0;
    /* a tied weight is written a second time under its other name, as
     * PyTorch's state_dict lists both (nanoGPT: lm_head.weight) */
    int tied = net->tie_tensor >= 0 && net->tie_tensor < net->n_tensors && net->tie_name[0];
    sb_printf(&b, "{");
    for (int t = 0; t < net->n_tensors + tied; t++) {
        const struct ddpc_tensor *T = &net->tensor[t < net->n_tensors ? t : net->tie_tensor];
        const char *name = t < net->n_tensors ? T->name : net->tie_name;
        uint64_t bytes = (T->is_count ? 8 : 4) * (uint64_t)T->numel;
        sb_printf(&b, "\"%s\":{\"dtype\":\"%s\",\"shape\":[", name, T->is_count ? "I64" : "F32");
        for (int d = 0; d < T->nd; d++)
            sb_printf(&b, "%s%lld", d ? "," : "", (long long)T->shape[d]);
        sb_printf(&b, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]},", off, off + bytes);
        off += bytes;
    }
    sb_printf(&b, "\"__metadata__\":{\"format\":\"pt\",\"ddpc_job\":");
    sb_json_str(&b, job->name ? job->name : "");
    if (job->model.type == DDPC_MODEL_GPT)
        sb_printf(&b, ",\"ddpc_model\":\"gpt\",\"ddpc_layout\":\"nanoGPT's GPT (model.py) "
                  "state_dict: nn.Linear weights [out, in]; lm_head.weight is "
                  "transformer.wte.weight (tied); the attn.bias causal masks are not stored\"");
    else
        sb_printf(&b, ",\"ddpc_model\":\"sequential\",\"ddpc_layout\":\"torch.nn.Sequential held "
                  "as attribute layers; index = position in the spec's list; residual i: a module "
                  "whose body (nn.Sequential) is layers.<i>.body, output x + body(x)\"");
    export_identity_meta(&b, id);
    sb_printf(&b, "}}");
    struct ckpt_afile f;
    int rc = export_begin(path, &b, off, &f, e);
    for (int t = 0; t < net->n_tensors + tied && rc == 0; t++) {
        const struct ddpc_tensor *T = &net->tensor[t < net->n_tensors ? t : net->tie_tensor];
        const float *src = (T->kind == DDPC_TENSOR_PARAM ? params : state) + T->off;
        if (T->is_count) {
            unsigned char c8[8];
            put_u64(c8, (uint64_t)(int64_t)src[0]);
            rc = afile_write(&f, c8, 8, e);
        } else {
            rc = afile_write(&f, src, 4 * T->numel, e);
        }
    }
    if (rc == 0)
        rc = export_commit(&f, path, id, written, written_cap, e);
    afile_abort(&f);
    free(b.s);
    return rc;
}

int ckpt_export_safetensors(const char *path, const struct ddpc_job *job,
                            const float *params, size_t n_params, const struct ddpc_out_id *id,
                            char *written, size_t written_cap, struct ddpc_err *e)
{
    if (!path || !path[0] || !job || (n_params && !params))
        return DDPC_FAIL(e, DDPC_E_INVALID, "ckpt_export_safetensors: no path, job or params");
    int sizes = job->model.n_layers;
    if (sizes < 2 || sizes > DDPC_MAX_LAYERS)
        return DDPC_FAIL(e, DDPC_E_INVALID, "export %s: model has %d layer sizes, need 2..%d",
                         path, sizes, DDPC_MAX_LAYERS);
    uint64_t count = 0;
    for (int l = 0; l < sizes; l++) {
        if (job->model.layers[l] < 1)
            return DDPC_FAIL(e, DDPC_E_INVALID, "export %s: layer size %d is not positive",
                             path, (int)job->model.layers[l]);
        if (l + 1 < sizes)
            count += (uint64_t)job->model.layers[l + 1] * ((uint64_t)job->model.layers[l] + 1);
    }
    if (count != n_params)
        return DDPC_FAIL(e, DDPC_E_INVALID, "export %s: the model's shapes need %" PRIu64
                         " parameters, the buffer has %zu", path, count, n_params);

    /* Header: tensors in buffer order, byte offsets relative to the data
     * section, which begins right after the (padded) header. */
    struct sbuf b = { 0 };
    uint64_t off = 0;
    sb_printf(&b, "{");
    for (int l = 0; l + 1 < sizes; l++) {
        uint64_t in = (uint64_t)job->model.layers[l], outd = (uint64_t)job->model.layers[l + 1];
        uint64_t wb = 4 * in * outd, bb = 4 * outd;
        sb_printf(&b, "\"layers.%d.weight\":{\"dtype\":\"F32\",\"shape\":[%" PRIu64 ",%" PRIu64
                  "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]},", l, outd, in, off, off + wb);
        off += wb;
        sb_printf(&b, "\"layers.%d.bias\":{\"dtype\":\"F32\",\"shape\":[%" PRIu64
                  "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]},", l, outd, off, off + bb);
        off += bb;
    }
    /* __metadata__ values must be strings (safetensors rule). */
    sb_printf(&b, "\"__metadata__\":{\"format\":\"pt\",\"ddpc_job\":");
    sb_json_str(&b, job->name ? job->name : "");
    sb_printf(&b, ",\"ddpc_model\":\"%s\",\"ddpc_layers\":\"",
              job->model.type == DDPC_MODEL_LINEAR ? "linear" : "mlp");
    for (int l = 0; l < sizes; l++)
        sb_printf(&b, "%s%d", l ? "," : "", (int)job->model.layers[l]);
    sb_printf(&b, "\",\"ddpc_activation\":\"%s\",\"ddpc_layout\":\"layers.<l>.weight is "
              "nn.Linear [out, in]; activation between layers, none after the last\"",
              job->model.type == DDPC_MODEL_LINEAR ? "identity" : act_name(job->model.activation));
    export_identity_meta(&b, id);
    sb_printf(&b, "}}");
    struct ckpt_afile f;
    int rc = export_begin(path, &b, 4 * (uint64_t)n_params, &f, e);
    if (rc < 0 ||
        (rc = afile_write(&f, params, 4 * n_params, e)) < 0 ||
        (rc = export_commit(&f, path, id, written, written_cap, e)) < 0)
        goto out;
out:
    afile_abort(&f);
    free(b.s);
    return rc;
}
