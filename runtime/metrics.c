/* metrics.c - rank 0's observability: progress line, metrics CSV, TensorBoard.
 *
 * Owns: the metrics CSV file, the TensorBoard event file (TFRecord framing,
 * hand-encoded Event protobufs, CRC-32C) and the in-place progress line.
 * API and file formats: metrics.h.
 *
 * Rules this file keeps:
 *   - it runs on rank 0 only (the caller guarantees it): it never touches a
 *     communicator, never reduces, never names ranks; values arrive reduced;
 *   - it never prints anything but the progress line, and nothing at all to
 *     `out` when progress is off (the caller owns the plain per-epoch lines);
 *   - it never exits and never aborts the job: every libc call is checked and
 *     failures come back as struct ddpc_err, the caller decides;
 *   - no globals: the CRC table is const data, all state is in ddpc_metrics.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "crc32c.h"
#include "metrics.h"
#include "outver.h"

/* ===== CRC-32C ========================================================== */

uint32_t metrics_crc32c_masked(const void *data, size_t n)
{
    /* TFRecord masks the CRC so that a CRC of data that itself holds CRCs
     * does not degenerate (see TensorFlow's crc32c.h). */
    uint32_t crc = crc32c(0, data, n);
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

/* ===== small helpers ==================================================== */

static double mono_now(void)
{
    struct timespec ts;
    /* CLOCK_MONOTONIC cannot fail on Linux with a valid pointer. */
    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double wall_now(void)
{
    struct timespec ts;
    /* TensorBoard plots "relative" and "wall" time from this: it must be
     * Unix time, not monotonic. */
    (void)clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* mkdir -p: every component of dir, 0755. An existing component is fine;
 * one that exists but is not a directory fails at the next mkdir or open,
 * with ENOTDIR/EEXIST in the message. */
static int mkdir_p(const char *dir, const char *what, struct ddpc_err *e)
{
    char buf[PATH_MAX];
    size_t len = strlen(dir);
    if (len == 0)
        return 0;
    if (len >= sizeof buf)
        return DDPC_FAIL(e, DDPC_E_INVALID, "%s '%s': path too long", what, dir);
    memcpy(buf, dir, len + 1);
    for (size_t i = 1; i <= len; i++) {
        if (buf[i] != '/' && buf[i] != '\0')
            continue;
        char saved = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0755) == -1 && errno != EEXIST)
            return DDPC_FAIL(e, DDPC_E_SYS, "%s: cannot create directory '%s': %s; "
                             "---> HINT: point it at a writable location", what, buf,
                             strerror(errno));
        buf[i] = saved;
    }
    struct stat st;
    if (stat(dir, &st) == -1 || !S_ISDIR(st.st_mode))
        return DDPC_FAIL(e, DDPC_E_SYS, "%s: '%s' exists and is not a directory; "
                         "---> HINT: move it away or choose another path", what, dir);
    return 0;
}

/* fwrite all of it, then fflush, so that a killed job keeps every record
 * written before the kill. */
static int write_flush(FILE *f, const void *p, size_t n, const char *what, struct ddpc_err *e)
{
    if (n > 0 && fwrite(p, 1, n, f) != n)
        return DDPC_FAIL(e, DDPC_E_SYS, "writing %s: %s; ---> HINT: is the disk full?",
                         what, strerror(errno));
    if (fflush(f) == EOF)
        return DDPC_FAIL(e, DDPC_E_SYS, "writing %s: %s; ---> HINT: is the disk full?",
                         what, strerror(errno));
    return 0;
}

/* fflush + fsync + fclose; *fp is NULL afterwards whatever happens. */
static int close_file(FILE **fp, const char *what, struct ddpc_err *e)
{
    FILE *f = *fp;
    int rc = 0;
    if (!f)
        return 0;
    *fp = NULL;
    if (fflush(f) == EOF)
        rc = DDPC_FAIL(e, DDPC_E_SYS, "flushing %s: %s", what, strerror(errno));
    /* EINVAL/EROFS: a pipe or special file (metrics_csv: /dev/stdout) that
     * cannot be synced; there is nothing to make durable. */
    if (fsync(fileno(f)) == -1 && errno != EINVAL && errno != EROFS && rc == 0)
        rc = DDPC_FAIL(e, DDPC_E_SYS, "fsync %s: %s", what, strerror(errno));
    if (fclose(f) == EOF && rc == 0)
        rc = DDPC_FAIL(e, DDPC_E_SYS, "closing %s: %s", what, strerror(errno));
    return rc;
}

char *metrics_format_eta(double eta_s, char *buf, size_t n)
{
    if (n == 0)
        return buf;
    /* Unknown (< 0, NaN) or meaningless (a first-step estimate of years). */
    if (!(eta_s >= 0.0) || eta_s > 100000.0 * 3600.0) {
        (void)snprintf(buf, n, "-:--:--");
        return buf;
    }
    long long s = (long long)(eta_s + 0.5);
    (void)snprintf(buf, n, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
    return buf;
}

/* ===== CSV ============================================================== */

static const char csv_header[] =
    "step,epoch,lr,loss,samples_per_s,eval_loss,eval_accuracy\n";
/* a gpt counts tokens (samples * block_size) and has no accuracy to show */
static const char csv_header_gpt[] =
    "step,epoch,lr,loss,tokens_per_s,eval_loss,eval_accuracy\n";

static const char *csv_header_of(const struct ddpc_metrics *m)
{
    return m->job->model.type == DDPC_MODEL_GPT ? csv_header_gpt : csv_header;
}

/* A cell: %.9g keeps every digit a float-precision metric has and reads
 * back in any CSV reader; absent values are empty cells. */
static void csv_cell(char *buf, size_t n, int present, double v)
{
    if (present)
        (void)snprintf(buf, n, ",%.9g", v);
    else
        (void)snprintf(buf, n, ",");
}

static int csv_row(struct ddpc_metrics *m, int64_t step, int epoch, int train, double lr,
                   double loss, double sps, int eval, double eval_loss, double eval_acc,
                   struct ddpc_err *e)
{
    char c[5][40], line[256];
    csv_cell(c[0], sizeof c[0], train, lr);
    csv_cell(c[1], sizeof c[1], train, loss);
    csv_cell(c[2], sizeof c[2], train, sps);
    csv_cell(c[3], sizeof c[3], eval, eval_loss);
    csv_cell(c[4], sizeof c[4], eval && eval_acc >= 0.0, eval_acc);
    int len = snprintf(line, sizeof line, "%lld,%d%s%s%s%s%s\n", (long long)step, epoch,
                       c[0], c[1], c[2], c[3], c[4]);
    if (len < 0 || (size_t)len >= sizeof line)
        return DDPC_FAIL(e, DDPC_E_INVALID, "metrics CSV row does not fit %zu bytes",
                         sizeof line);
    char what[4200];
    (void)snprintf(what, sizeof what, "metrics CSV '%s'", m->job->logging.metrics_csv);
    return write_flush(m->csv, line, (size_t)len, what, e);
}

/* The CSV's first line when the run has an identity (outver.h): a comment
 * naming the job and its identity, "# ddpc job=NAME identity=HASH\n"
 * (pandas: read_csv(path, comment="#")). Its length; 0 without one. */
static size_t csv_id_line(const struct ddpc_metrics *m, char *buf, size_t cap)
{
    if (!m->id || !m->id->hash)
        return 0;
    int n = snprintf(buf, cap, "# ddpc job=%s identity=%s\n", m->id->job ? m->id->job : "",
                     m->id->hash);
    return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

/* Where a resumed run continues the CSV at fd (ours: our header): after
 * the last complete row whose step is <= resume_step. Rows past the
 * checkpoint were written by the attempt that crashed; the resumed run
 * writes those steps again, so they go (like TensorBoard's purge at a
 * SessionLog START). 0: not our file (or unreadable): start it afresh.
 * Rows are in step order, an evaluation row carrying its step too. */
static off_t csv_keep(const struct ddpc_metrics *m, int fd, int64_t resume_step)
{
    char idline[256];
    size_t il = csv_id_line(m, idline, sizeof idline);
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size <= 0 || st.st_size > (off_t)1 << 30)
        return 0;
    size_t n = (size_t)st.st_size;
    char *t = malloc(n + 1);
    if (!t)
        return 0;
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, t + got, n - got, (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    t[got] = '\0';
    off_t keep = 0;
    const char *header = csv_header_of(m);
    size_t hl = strlen(header);
    /* ours: the identity line (when the run has one), then the header */
    if (got >= il + hl && memcmp(t, idline, il) == 0 && memcmp(t + il, header, hl) == 0) {
        keep = (off_t)(il + hl);
        for (char *p = t + il + hl; *p;) {
            char *nl = strchr(p, '\n');
            if (!nl)
                break;                  /* a row cut short by a crash */
            char *end;
            errno = 0;
            long long step = strtoll(p, &end, 10);
            if (end == p || *end != ',' || errno != 0 || step > resume_step)
                break;
            p = nl + 1;
            keep = (off_t)(p - t);
        }
    }
    free(t);
    return keep;
}

/* metrics_csv must not lead ddpc to write into a file it was not pointed
 * at: a symbolic link to a regular file (or to nothing yet) is refused; one
 * to a device or pipe (/dev/stdout) is written through. A regular file is
 * locked (flock) for the run, so a second job writing the same CSV is
 * refused instead of splicing its rows in. */
static int csv_open_one(struct ddpc_metrics *m, const char *path, int64_t resume_step,
                        struct ddpc_err *e)
{
    char dir[PATH_MAX];
    size_t len = strlen(path);
    if (len >= sizeof dir)
        return DDPC_FAIL(e, DDPC_E_INVALID, "logging.metrics_csv '%s': path too long", path);
    memcpy(dir, path, len + 1);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = '\0';
        DDPC_TRY(mkdir_p(dir, "logging.metrics_csv", e));
    }
    struct stat lst, st;
    int follow = 0;
    if (lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode)) {
        if (stat(path, &st) != 0 || S_ISREG(st.st_mode) || S_ISDIR(st.st_mode))
            return DDPC_FAIL(e, DDPC_E_INVALID, "logging.metrics_csv '%s' is a symbolic link "
                             "(to a file, or to nothing yet): ddpc does not write through "
                             "links, which could overwrite another file; ---> HINT: point "
                             "metrics_csv at the real path", path);
        follow = 1;     /* /dev/stdout and the like */
    }
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW), 0644);
    if (fd < 0 && errno == ELOOP)
        return DDPC_FAIL(e, DDPC_E_INVALID, "logging.metrics_csv '%s' became a symbolic "
                         "link: ddpc does not write through links; ---> HINT: point "
                         "metrics_csv at the real path", path);
    if (fd < 0 && (errno == EACCES || errno == EPERM || errno == EISDIR || errno == ENXIO))
        fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW), 0644);
    if (fd < 0)
        return DDPC_FAIL(e, DDPC_E_SYS, "logging.metrics_csv: cannot open '%s': %s; "
                         "---> HINT: point it at a writable file", path, strerror(errno));
    int rc = 0;
    off_t keep = 0;
    if (fstat(fd, &st) != 0) {
        rc = DDPC_FAIL(e, DDPC_E_SYS, "logging.metrics_csv '%s': fstat: %s", path,
                       strerror(errno));
        goto fail;
    }
    if (S_ISREG(st.st_mode)) {
        while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            if (errno == EINTR)
                continue;
            /* another run's file, being written: the next version (outver.h) */
            if (errno == EWOULDBLOCK && m->id &&
                outver_identity(DDPC_OUT_CSV, path, m->id->hash, NULL) == DDPC_OUT_OTHER) {
                rc = m->id->refuse ? outver_refuse(DDPC_OUT_CSV, "logging.metrics_csv", path,
                                                   m->id, e) : 1;
                goto fail;
            }
            if (errno == EWOULDBLOCK)
                rc = DDPC_FAIL(e, DDPC_E_INVALID, "logging.metrics_csv '%s' is being written "
                               "by another running job: two runs would splice their rows "
                               "into one file; ---> HINT: let that run finish, or point this "
                               "job's metrics_csv at another file", path);
            else
                rc = DDPC_FAIL(e, DDPC_E_SYS, "logging.metrics_csv '%s': flock: %s", path,
                               strerror(errno));
            goto fail;
        }
        /* under the lock: a file of another configuration (or unmarked
         * content) is left as it is, and the run takes the next version */
        if (m->id && outver_identity(DDPC_OUT_CSV, path, m->id->hash, NULL) == DDPC_OUT_OTHER) {
            rc = m->id->refuse ? outver_refuse(DDPC_OUT_CSV, "logging.metrics_csv", path, m->id,
                                               e) : 1;
            goto fail;
        }
        if (resume_step >= 0)
            keep = csv_keep(m, fd, resume_step);
        /* truncated only now, under the lock: another run's file is never
         * cut before the lock says it is ours */
        if (ftruncate(fd, keep) != 0 || lseek(fd, 0, SEEK_END) < 0) {
            rc = DDPC_FAIL(e, DDPC_E_SYS, "logging.metrics_csv '%s': truncating: %s", path,
                           strerror(errno));
            goto fail;
        }
    }
    m->csv = fdopen(fd, "w");
    if (!m->csv) {
        rc = DDPC_FAIL(e, DDPC_E_SYS, "logging.metrics_csv '%s': fdopen: %s", path,
                       strerror(errno));
        goto fail;
    }
    if (keep > 0)
        return 0;
    char what[4200], idline[256];
    (void)snprintf(what, sizeof what, "metrics CSV '%s'", path);
    size_t il = csv_id_line(m, idline, sizeof idline);
    if (il)
        DDPC_TRY(write_flush(m->csv, idline, il, what, e));
    return write_flush(m->csv, csv_header_of(m), strlen(csv_header_of(m)), what, e);
fail:
    (void)close(fd);            /* nothing of ours was written */
    return rc;
}

/* metrics_csv, or (with an identity) the first version of it that is free
 * or this run's (outver.h); m->csv_path is the file opened. */
static int csv_open(struct ddpc_metrics *m, const char *path, int64_t resume_step,
                    struct ddpc_err *e)
{
    for (int k = 0; k < DDPC_OUTVER_MAX; k++) {
        if (outver_name(DDPC_OUT_CSV, path, k, m->csv_path, sizeof m->csv_path) < 0)
            return DDPC_FAIL(e, DDPC_E_INVALID, "logging.metrics_csv '%s': path too long", path);
        int rc = csv_open_one(m, m->csv_path, resume_step, e);
        if (rc != 1)
            return rc;
    }
    return DDPC_FAIL(e, DDPC_E_INVALID, "logging.metrics_csv '%s': versions 1 to %d are all "
                     "other runs' files; point metrics_csv elsewhere", path, DDPC_OUTVER_MAX - 1);
}

/* ===== TensorBoard: protobuf + TFRecord ================================= */

/* A fixed-size protobuf output buffer: our events are a handful of short,
 * constant tags, so overflow means a bug, reported as such. */
struct pb_buf {
    uint8_t b[512];
    size_t  n;
    int     overflow;
};

static void pb_bytes(struct pb_buf *p, const void *d, size_t n)
{
    if (n > sizeof p->b - p->n) {
        p->overflow = 1;
        return;
    }
    memcpy(p->b + p->n, d, n);
    p->n += n;
}

static void pb_byte(struct pb_buf *p, uint8_t v) { pb_bytes(p, &v, 1); }

static void pb_varint(struct pb_buf *p, uint64_t v)
{
    while (v >= 0x80) {
        pb_byte(p, (uint8_t)(v | 0x80));
        v >>= 7;
    }
    pb_byte(p, (uint8_t)v);
}

static size_t varint_len(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

/* Little-endian by shifting, so the file is the same on any host. */
static void put_le(uint8_t *dst, uint64_t v, int nbytes)
{
    for (int i = 0; i < nbytes; i++)
        dst[i] = (uint8_t)(v >> (8 * i));
}

static void pb_fixed(struct pb_buf *p, uint64_t v, int nbytes)
{
    uint8_t le[8];
    put_le(le, v, nbytes);
    pb_bytes(p, le, (size_t)nbytes);
}

/* Protobuf tag byte: field number and wire type (0 varint, 1 fixed64,
 * 2 length-delimited, 5 fixed32). All our field numbers are < 16. */
#define PB_TAG(field, wire) ((uint8_t)(((field) << 3) | (wire)))

/* One TFRecord: length, masked CRC of the length, data, masked CRC of data. */
static int tb_record(struct ddpc_metrics *m, const uint8_t *data, size_t n, struct ddpc_err *e)
{
    uint8_t head[12], foot[4];
    put_le(head, (uint64_t)n, 8);
    put_le(head + 8, metrics_crc32c_masked(head, 8), 4);
    put_le(foot, metrics_crc32c_masked(data, n), 4);
    if (fwrite(head, 1, sizeof head, m->tb) != sizeof head ||
        fwrite(data, 1, n, m->tb) != n ||
        fwrite(foot, 1, sizeof foot, m->tb) != sizeof foot)
        return DDPC_FAIL(e, DDPC_E_SYS, "writing TensorBoard events '%s': %s; "
                         "---> HINT: is the disk full?", m->tb_path, strerror(errno));
    char what[4200];
    (void)snprintf(what, sizeof what, "TensorBoard events '%s'", m->tb_path);
    return write_flush(m->tb, NULL, 0, what, e);
}

struct tb_scalar {
    const char *tag;
    double      value;
};

/* Event { 1: double wall_time; 2: int64 step; 3: string file_version;
 *         5: Summary summary }
 * Summary { repeated 1: Value value }
 * Value { 1: string tag; 2: float simple_value }
 * (tensorflow/core/util/event.proto, framework/summary.proto). */
static int tb_event(struct ddpc_metrics *m, int64_t step, const char *file_version,
                    const struct tb_scalar *v, int nv, struct ddpc_err *e)
{
    struct pb_buf sum = { .n = 0 }, ev = { .n = 0 };
    for (int i = 0; i < nv; i++) {
        size_t tl = strlen(v[i].tag);
        float f = (float)v[i].value;       /* simple_value is a float */
        uint32_t fbits;
        memcpy(&fbits, &f, sizeof fbits);
        pb_byte(&sum, PB_TAG(1, 2));
        pb_varint(&sum, 1 + varint_len(tl) + tl + 1 + 4);
        pb_byte(&sum, PB_TAG(1, 2));
        pb_varint(&sum, tl);
        pb_bytes(&sum, v[i].tag, tl);
        pb_byte(&sum, PB_TAG(2, 5));
        pb_fixed(&sum, fbits, 4);
    }
    double wt = wall_now();
    uint64_t wbits;
    memcpy(&wbits, &wt, sizeof wbits);
    pb_byte(&ev, PB_TAG(1, 1));
    pb_fixed(&ev, wbits, 8);
    if (step != 0) {                       /* proto3: 0 is the default, omitted */
        pb_byte(&ev, PB_TAG(2, 0));
        pb_varint(&ev, (uint64_t)step);
    }
    if (file_version) {
        size_t fl = strlen(file_version);
        pb_byte(&ev, PB_TAG(3, 2));
        pb_varint(&ev, fl);
        pb_bytes(&ev, file_version, fl);
    }
    if (nv > 0) {
        pb_byte(&ev, PB_TAG(5, 2));
        pb_varint(&ev, sum.n);
        pb_bytes(&ev, sum.b, sum.n);
    }
    if (sum.overflow || ev.overflow)
        return DDPC_FAIL(e, DDPC_E_INVALID, "TensorBoard event does not fit %zu bytes",
                         sizeof ev.b);
    return tb_record(m, ev.b, ev.n, e);
}

/* Names the file like TensorFlow's writer (events.out.tfevents.<time>.
 * <host>.<pid> plus a suffix), so TensorBoard and tools that glob
 * "*tfevents*" find it; O_EXCL so two runs never share one file. */
static int tb_open_one(struct ddpc_metrics *m, const char *dir, int64_t resume_step,
                       struct ddpc_err *e)
{
    char host[256];
    DDPC_TRY(mkdir_p(dir, "logging.tensorboard", e));
    /* One run writes a directory at a time: TensorBoard reads every event
     * file in it as one run, so two live writers would interleave their
     * curves. The lock file stays (empty); the flock goes with the fd. */
    int len = snprintf(m->tb_path, sizeof m->tb_path, "%s/.ddpc.lock", dir);
    if (len < 0 || (size_t)len >= sizeof m->tb_path)
        return DDPC_FAIL(e, DDPC_E_INVALID, "logging.tensorboard '%s': path too long", dir);
    int lfd = open(m->tb_path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (lfd < 0)
        return DDPC_FAIL(e, DDPC_E_SYS, "logging.tensorboard: cannot create the lock file "
                         "'%s': %s; ---> HINT: point it at a writable directory", m->tb_path,
                         strerror(errno));
    while (flock(lfd, LOCK_EX | LOCK_NB) != 0) {
        if (errno == EINTR)
            continue;
        int err = errno;
        (void)close(lfd);       /* not ours */
        /* another configuration's run, writing: the next version (outver.h) */
        if (err == EWOULDBLOCK && m->id &&
            outver_identity(DDPC_OUT_TB, dir, m->id->hash, NULL) == DDPC_OUT_OTHER)
            return m->id->refuse ? outver_refuse(DDPC_OUT_TB, "logging.tensorboard", dir, m->id,
                                                 e) : 1;
        if (err == EWOULDBLOCK)
            return DDPC_FAIL(e, DDPC_E_INVALID, "logging.tensorboard '%s' is being written by "
                             "another running job: TensorBoard would show both as one run; "
                             "---> HINT: let that run finish, or give this job another "
                             "tensorboard directory", dir);
        return DDPC_FAIL(e, DDPC_E_SYS, "logging.tensorboard '%s': flock: %s", m->tb_path,
                         strerror(err));
    }
    if (m->id) {
        /* under the lock: another configuration's directory (or events no
         * run marked) is left as it is; a free one becomes this run's, its
         * lock file naming the run */
        if (outver_identity(DDPC_OUT_TB, dir, m->id->hash, NULL) == DDPC_OUT_OTHER) {
            (void)close(lfd);   /* not ours: nothing written */
            return m->id->refuse ? outver_refuse(DDPC_OUT_TB, "logging.tensorboard", dir, m->id,
                                                 e) : 1;
        }
        char mark[256];
        int ml = snprintf(mark, sizeof mark, "job=%s identity=%s\n",
                          m->id->job ? m->id->job : "", m->id->hash);
        if (ml < 0 || (size_t)ml >= sizeof mark || ftruncate(lfd, 0) != 0 ||
            pwrite(lfd, mark, (size_t)ml, 0) != ml) {
            int err = errno;
            (void)close(lfd);
            return DDPC_FAIL(e, DDPC_E_SYS, "logging.tensorboard: writing the lock file '%s': "
                             "%s", m->tb_path, strerror(err));
        }
    }
    m->tb_lock = lfd + 1;
    if (gethostname(host, sizeof host) == -1)
        (void)snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = '\0';
    for (char *h = host; *h; h++)          /* a '/' would make it a path */
        if (*h == '/')
            *h = '_';
    len = snprintf(m->tb_path, sizeof m->tb_path, "%s/events.out.tfevents.%lld.%s.%ld.ddpc",
                       dir, (long long)time(NULL), host, (long)getpid());
    if (len < 0 || (size_t)len >= sizeof m->tb_path)
        return DDPC_FAIL(e, DDPC_E_INVALID, "logging.tensorboard '%s': path too long", dir);
    int fd = open(m->tb_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd == -1)
        return DDPC_FAIL(e, DDPC_E_SYS, "logging.tensorboard: cannot create '%s': %s; "
                         "---> HINT: point it at a writable directory", m->tb_path,
                         strerror(errno));
    m->tb = fdopen(fd, "wb");
    if (!m->tb) {
        int saved = errno;
        (void)close(fd);                   /* nothing written yet */
        return DDPC_FAIL(e, DDPC_E_SYS, "fdopen '%s': %s", m->tb_path, strerror(saved));
    }
    /* The first record says which Event format follows; readers skip
     * files without it. */
    DDPC_TRY(tb_event(m, 0, "brain.Event:2", NULL, 0, e));
    if (resume_step < 0)
        return 0;
    /* Resumed: a SessionLog START at the first step after the checkpoint.
     * TensorBoard (event_accumulator's purge of orphaned data) then drops
     * the crashed attempt's points at and after that step, which this run
     * writes again, and keeps those up to the checkpoint.
     * Event { 7: SessionLog session_log }, SessionLog { 1: status START=1 } */
    struct pb_buf ev = { .n = 0 };
    double wt = wall_now();
    uint64_t wbits;
    memcpy(&wbits, &wt, sizeof wbits);
    pb_byte(&ev, PB_TAG(1, 1));
    pb_fixed(&ev, wbits, 8);
    pb_byte(&ev, PB_TAG(2, 0));
    pb_varint(&ev, (uint64_t)resume_step + 1);
    pb_byte(&ev, PB_TAG(7, 2));
    pb_varint(&ev, 2);
    pb_byte(&ev, PB_TAG(1, 0));
    pb_byte(&ev, 1);
    return tb_record(m, ev.b, ev.n, e);
}

/* logging.tensorboard, or (with an identity) the first version of it that
 * is free or this run's: <dir>/version_<k> (outver.h); m->tb_dir is the
 * directory written. */
static int tb_open(struct ddpc_metrics *m, const char *dir, int64_t resume_step,
                   struct ddpc_err *e)
{
    for (int k = 0; k < DDPC_OUTVER_MAX; k++) {
        if (outver_name(DDPC_OUT_TB, dir, k, m->tb_dir, sizeof m->tb_dir) < 0)
            return DDPC_FAIL(e, DDPC_E_INVALID, "logging.tensorboard '%s': path too long", dir);
        int rc = tb_open_one(m, m->tb_dir, resume_step, e);
        if (rc != 1)
            return rc;
        if (!m->id)
            break;
    }
    return DDPC_FAIL(e, DDPC_E_INVALID, "logging.tensorboard '%s': versions 1 to %d are all "
                     "other runs' directories; point tensorboard elsewhere", dir,
                     DDPC_OUTVER_MAX - 1);
}

/* ===== progress line ==================================================== */

/* "\r" returns to column 0 and ESC[K erases to the end of the line, so a
 * shorter line leaves no tail of the previous one. */
#define CLEAR_LINE "\r\033[K"

/* One progress report. redraw (a terminal): rewrites the line in place,
 * kept under 80 columns because a wrapped line cannot be rewritten with \r.
 * Otherwise (CI, SLURM output, a pipe): one plain line per every_n_steps
 * steps, no escape codes, starting with "step" so a log's progress and its
 * "epoch N/M" summaries grep apart. */
static int progress_put(struct ddpc_metrics *m, int redraw, int64_t step, int epoch,
                        double loss, double sps, double eta_s, struct ddpc_err *e)
{
    char eta[16], total[32] = "", line[256];
    if (m->total_steps > 0)
        (void)snprintf(total, sizeof total, "/%lld", (long long)m->total_steps);
    metrics_format_eta(eta_s, eta, sizeof eta);
    const char *unit = m->job->model.type == DDPC_MODEL_GPT ? "tokens" : "samples";
    int len = redraw
        ? snprintf(line, sizeof line,
                   CLEAR_LINE "epoch %d/%d  step %lld%s  loss %.4f  %.0f %s/s  ETA %s",
                   epoch, m->job->epochs, (long long)step, total, loss, sps, unit, eta)
        : snprintf(line, sizeof line,
                   "step %lld%s  epoch %d/%d  loss %.4f  %.0f %s/s  ETA %s\n",
                   (long long)step, total, epoch, m->job->epochs, loss, sps, unit, eta);
    if (len < 0)
        return DDPC_FAIL(e, DDPC_E_INVALID, "formatting the progress line failed");
    if ((size_t)len >= sizeof line) {
        len = (int)sizeof line - 1;        /* absurd numbers: show what fits */
        if (!redraw)
            line[len - 1] = '\n';
    }
    if (redraw)
        m->line_shown = 1;
    return write_flush(m->out, line, (size_t)len, "progress line", e);
}

int metrics_clear_progress(struct ddpc_metrics *m, struct ddpc_err *e)
{
    if (m->progress != DDPC_METRICS_REDRAW || !m->line_shown)
        return 0;
    m->line_shown = 0;
    /* The next step redraws at once instead of waiting out the throttle. */
    m->last_draw_s = -1.0;
    return write_flush(m->out, CLEAR_LINE, sizeof CLEAR_LINE - 1, "progress line", e);
}

/* ===== API ============================================================== */

int metrics_open(struct ddpc_metrics *m, const struct ddpc_job *job, int64_t total_steps,
                 int64_t resume_step, FILE *out, int is_tty, struct ddpc_err *e)
{
    return metrics_open_as(m, job, NULL, total_steps, resume_step, out, is_tty, e);
}

int metrics_open_as(struct ddpc_metrics *m, const struct ddpc_job *job,
                    const struct ddpc_out_id *id, int64_t total_steps, int64_t resume_step,
                    FILE *out, int is_tty, struct ddpc_err *e)
{
    memset(m, 0, sizeof *m);
    m->job = job;
    m->id = id;
    m->out = out;
    m->every_n_steps = job->logging.every_n_steps >= 1 ? job->logging.every_n_steps : 1;
    m->total_steps = total_steps > 0 ? total_steps : 0;
    m->min_redraw_s = DDPC_METRICS_REDRAW_S;
    m->last_draw_s = -1.0;
    /* on and auto: redrawn in place on a terminal, plain lines elsewhere
     * (escape codes in a log file are noise) */
    switch (job->logging.progress) {
    case DDPC_PROGRESS_ON:
    case DDPC_PROGRESS_AUTO: m->progress = is_tty ? DDPC_METRICS_REDRAW : DDPC_METRICS_LINES; break;
    case DDPC_PROGRESS_OFF:  m->progress = DDPC_METRICS_QUIET; break;
    }
    if (!out)
        m->progress = DDPC_METRICS_QUIET;

    int rc = 0;
    const char *csv = job->logging.metrics_csv, *tb = job->logging.tensorboard;
    if (csv && csv[0])
        rc = csv_open(m, csv, resume_step, e);
    if (rc == 0 && tb && tb[0])
        rc = tb_open(m, tb, resume_step, e);
    if (rc < 0) {
        /* Unwind; e keeps the open failure, the first error. */
        (void)metrics_close(m, e);
        return rc;
    }
    return 0;
}

int metrics_step(struct ddpc_metrics *m, int64_t step, int epoch, double lr, double loss,
                 double samples_per_s, double eta_s, struct ddpc_err *e)
{
    if (step % m->every_n_steps == 0) {
        if (m->csv)
            DDPC_TRY(csv_row(m, step, epoch, 1, lr, loss, samples_per_s, 0, 0.0, 0.0, e));
        if (m->tb) {
            const struct tb_scalar v[] = {
                { "train/loss", loss }, { "train/lr", lr },
                { m->job->model.type == DDPC_MODEL_GPT ? "train/tokens_per_s"
                                                       : "train/samples_per_s", samples_per_s },
            };
            DDPC_TRY(tb_event(m, step, NULL, v, 3, e));
        }
    }
    if (m->progress == DDPC_METRICS_LINES) {
        int final = m->total_steps > 0 && step == m->total_steps;
        if (step % m->every_n_steps == 0 || final)
            DDPC_TRY(progress_put(m, 0, step, epoch, loss, samples_per_s, eta_s, e));
    } else if (m->progress == DDPC_METRICS_REDRAW) {
        /* One clock read per step when nothing is drawn: the throttle makes
         * the display free even at thousands of steps per second. The final
         * step always shows, so the line ends at step total/total. */
        double now = mono_now();
        int final = m->total_steps > 0 && step >= m->total_steps;
        if (m->last_draw_s < 0.0 || final || now - m->last_draw_s >= m->min_redraw_s) {
            m->last_draw_s = now;
            DDPC_TRY(progress_put(m, 1, step, epoch, loss, samples_per_s, eta_s, e));
        }
    }
    return 0;
}

int metrics_wants_loss(const struct ddpc_metrics *m, int64_t step)
{
    int final = m->total_steps > 0 && step >= m->total_steps;
    if (step % m->every_n_steps == 0 && (m->csv || m->tb))
        return 1;
    if (m->progress == DDPC_METRICS_LINES)
        return step % m->every_n_steps == 0 || final;
    if (m->progress == DDPC_METRICS_REDRAW)
        return m->last_draw_s < 0.0 || final || mono_now() - m->last_draw_s >= m->min_redraw_s;
    return 0;
}

int metrics_eval(struct ddpc_metrics *m, int64_t step, int epoch, double eval_loss,
                 double eval_accuracy, struct ddpc_err *e)
{
    DDPC_TRY(metrics_clear_progress(m, e));
    if (m->csv)
        DDPC_TRY(csv_row(m, step, epoch, 0, 0.0, 0.0, 0.0, 1, eval_loss, eval_accuracy, e));
    if (m->tb) {
        const struct tb_scalar v[] = {
            { "eval/loss", eval_loss }, { "eval/accuracy", eval_accuracy },
        };
        DDPC_TRY(tb_event(m, step, NULL, v, eval_accuracy >= 0.0 ? 2 : 1, e));
    }
    return 0;
}

int metrics_close(struct ddpc_metrics *m, struct ddpc_err *e)
{
    /* Every step runs even after a failure, so no file is left open; the
     * first failure is the one reported. */
    int rc = 0, r;
    if (m->progress && m->out && (r = metrics_clear_progress(m, e)) < 0)
        rc = r;
    m->progress = DDPC_METRICS_QUIET;
    if ((r = close_file(&m->csv, "metrics CSV", e)) < 0 && rc == 0)
        rc = r;
    if ((r = close_file(&m->tb, "TensorBoard events", e)) < 0 && rc == 0)
        rc = r;
    if (m->tb_lock > 0)
        (void)close(m->tb_lock - 1);    /* the lock file holds nothing to lose */
    m->tb_lock = 0;
    return rc;
}
