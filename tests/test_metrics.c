/* test_metrics.c - Check suite "metrics": runtime/metrics.c.
 *
 * CRC-32C against published vectors and a bit-by-bit recomputation; ETA
 * formatting; the CSV byte for byte; the TensorBoard file parsed back by a
 * small TFRecord + protobuf reader here (lengths and CRCs verified), and by
 * TensorBoard's own EventAccumulator through tests/tb_read.py when the
 * python package is installed (SKIP otherwise, never the network); the
 * progress line captured in a memstream: redrawn on a terminal, plain lines
 * without one, and nothing when off.
 */
#include <check.h>
#include <fcntl.h>
#include <sys/file.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "crc32c.h"
#include "metrics.h"
#include "suites.h"
#include "testutil.h"

/* ===== fixtures ========================================================= */

static struct ddpc_job job_for(const char *csv, const char *tb, enum ddpc_progress progress,
                               int every_n)
{
    struct ddpc_job j;
    memset(&j, 0, sizeof j);
    j.epochs = 3;
    j.logging.every_n_steps = every_n;
    j.logging.metrics_csv = csv;
    j.logging.tensorboard = tb;
    j.logging.progress = progress;
    return j;
}

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    char *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = (cap + 4096) * 2;
            buf = realloc(buf, cap);
            ck_assert_ptr_nonnull(buf);
        }
        size_t r = fread(buf + n, 1, 4096, f);
        n += r;
        if (r == 0)
            break;
    }
    ck_assert_int_eq(ferror(f), 0);
    ck_assert_int_eq(fclose(f), 0);
    buf[n] = '\0';
    if (len)
        *len = n;
    return buf;
}

static char *path_in(const char *dir, const char *rel)
{
    char *p = NULL;
    ck_assert_int_ge(asprintf(&p, "%s/%s", dir, rel), 0);
    return p;
}

/* ===== CRC-32C ========================================================== */

static uint32_t crc32c_bitwise(const uint8_t *p, size_t n)
{
    uint32_t crc = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++)
            crc = (crc & 1) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
    }
    return crc ^ 0xffffffffu;
}

START_TEST(crc32c_vectors)
{
    uint8_t buf[32];
    ck_assert_uint_eq(crc32c(0, "123456789", 9), 0xE3069283u);
    ck_assert_uint_eq(crc32c(0, "", 0), 0u);
    /* RFC 3720 (iSCSI) B.4 test patterns. */
    memset(buf, 0, sizeof buf);
    ck_assert_uint_eq(crc32c(0, buf, 32), 0x8A9136AAu);
    memset(buf, 0xff, sizeof buf);
    ck_assert_uint_eq(crc32c(0, buf, 32), 0x62A8AB43u);
    for (int i = 0; i < 32; i++)
        buf[i] = (uint8_t)i;
    ck_assert_uint_eq(crc32c(0, buf, 32), 0x46DD794Eu);
    for (int i = 0; i < 32; i++)
        buf[i] = (uint8_t)(31 - i);
    ck_assert_uint_eq(crc32c(0, buf, 32), 0x113FDB5Cu);
}
END_TEST

START_TEST(crc32c_table_matches_bitwise)
{
    /* Every single byte exercises every table entry; longer pseudo-random
     * buffers exercise the chaining. */
    for (int b = 0; b < 256; b++) {
        uint8_t c = (uint8_t)b;
        ck_assert_uint_eq(crc32c(0, &c, 1), crc32c_bitwise(&c, 1));
    }
    uint8_t buf[1000];
    uint32_t x = 12345;
    for (size_t i = 0; i < sizeof buf; i++) {
        x = x * 1103515245u + 12345u;
        buf[i] = (uint8_t)(x >> 16);
    }
    for (size_t n = 0; n <= sizeof buf; n += 37)
        ck_assert_uint_eq(crc32c(0, buf, n), crc32c_bitwise(buf, n));
}
END_TEST

START_TEST(crc32c_masked)
{
    uint32_t c = 0xE3069283u;
    ck_assert_uint_eq(metrics_crc32c_masked("123456789", 9),
                      ((c >> 15) | (c << 17)) + 0xa282ead8u);
    /* The masked CRC of an empty record's 8-byte length, as tensorboard's
     * own masked_crc32c computes it (bytes 8..11 of a zero-length TFRecord). */
    uint8_t zero[8] = { 0 };
    ck_assert_uint_eq(metrics_crc32c_masked(zero, 8), 0x07980329u);
}
END_TEST

/* ===== ETA ============================================================== */

START_TEST(eta_format)
{
    char b[16];
    ck_assert_str_eq(metrics_format_eta(0, b, sizeof b), "0:00:00");
    ck_assert_str_eq(metrics_format_eta(59.4, b, sizeof b), "0:00:59");
    ck_assert_str_eq(metrics_format_eta(59.6, b, sizeof b), "0:01:00");
    ck_assert_str_eq(metrics_format_eta(65, b, sizeof b), "0:01:05");
    ck_assert_str_eq(metrics_format_eta(3599.6, b, sizeof b), "1:00:00");
    ck_assert_str_eq(metrics_format_eta(3 * 3600 + 7 * 60 + 9, b, sizeof b), "3:07:09");
    ck_assert_str_eq(metrics_format_eta(100000, b, sizeof b), "27:46:40");
    ck_assert_str_eq(metrics_format_eta(99999.0 * 3600, b, sizeof b), "99999:00:00");
    ck_assert_str_eq(metrics_format_eta(-1, b, sizeof b), "-:--:--");
    ck_assert_str_eq(metrics_format_eta(NAN, b, sizeof b), "-:--:--");
    ck_assert_str_eq(metrics_format_eta(INFINITY, b, sizeof b), "-:--:--");
    ck_assert_str_eq(metrics_format_eta(1e300, b, sizeof b), "-:--:--");
    /* Truncates, never overflows. */
    char small[4] = "xxx";
    ck_assert_str_eq(metrics_format_eta(65, small, sizeof small), "0:0");
}
END_TEST

/* ===== CSV ============================================================== */

static const char *hdr = "step,epoch,lr,loss,samples_per_s,eval_loss,eval_accuracy\n";

START_TEST(csv_exact)
{
    char *dir = make_temp_dir("metrics");
    char *csv = path_in(dir, "a/b/m.csv");          /* parents do not exist yet */
    struct ddpc_job j = job_for(csv, NULL, DDPC_PROGRESS_OFF, 2);
    struct ddpc_metrics m;
    struct ddpc_err e = { 0 };
    ck_assert_int_eq(metrics_open(&m, &j, 6, -1, stdout, 1, &e), 0);
    double loss[] = { 2.0, 1.5, 1.25, 1.0, 0.75, 0.5 };
    for (int s = 1; s <= 4; s++)
        ck_assert_int_eq(metrics_step(&m, s, 1, 0.1, loss[s - 1], 1000.5, 10, &e), 0);
    ck_assert_int_eq(metrics_eval(&m, 4, 1, 0.625, 0.875, &e), 0);
    for (int s = 5; s <= 6; s++)
        ck_assert_int_eq(metrics_step(&m, s, 2, 1e-3, loss[s - 1], 2e6, 0, &e), 0);
    ck_assert_int_eq(metrics_eval(&m, 6, 2, 0.4, -1, &e), 0);  /* no accuracy */
    ck_assert_int_eq(metrics_close(&m, &e), 0);
    ck_assert_int_eq(e.code, 0);

    char *got = read_all(csv, NULL);
    char want[1024];
    snprintf(want, sizeof want, "%s"
             "2,1,0.1,1.5,1000.5,,\n"
             "4,1,0.1,1,1000.5,,\n"
             "4,1,,,,0.625,0.875\n"
             "6,2,0.001,0.5,2000000,,\n"
             "6,2,,,,0.4,\n", hdr);
    ck_assert_str_eq(got, want);
    free(got);

    /* Resumed at step 6: appended after the existing rows. */
    ck_assert_int_eq(metrics_open(&m, &j, 8, 6, stdout, 0, &e), 0);
    ck_assert_int_eq(metrics_step(&m, 8, 3, 0.1, 0.25, 10, 0, &e), 0);
    ck_assert_int_eq(metrics_close(&m, &e), 0);
    got = read_all(csv, NULL);
    size_t wl = strlen(want);
    ck_assert_int_eq(strncmp(got, want, wl), 0);
    ck_assert_str_eq(got + wl, "8,3,0.1,0.25,10,,\n");
    free(got);

    /* Not resumed: a fresh file with only the header. */
    ck_assert_int_eq(metrics_open(&m, &j, 8, -1, stdout, 0, &e), 0);
    ck_assert_int_eq(metrics_close(&m, &e), 0);
    got = read_all(csv, NULL);
    ck_assert_str_eq(got, hdr);
    free(got);

    free(csv);
    ck_assert_int_eq(rm_tree(dir), 0);
    free(dir);
}
END_TEST

START_TEST(csv_resume_repairs_and_replaces)
{
    char *dir = make_temp_dir("metrics");
    char *csv = path_in(dir, "m.csv");
    struct ddpc_job j = job_for(csv, NULL, DDPC_PROGRESS_OFF, 1);
    struct ddpc_metrics m;
    struct ddpc_err e = { 0 };

    /* A crash cut the last row short: resuming drops it. */
    char cut[256];
    snprintf(cut, sizeof cut, "%s1,1,0.1,2,5,,\n2,1,0.", hdr);
    ck_assert_int_eq(write_file(csv, cut, strlen(cut)), 0);
    ck_assert_int_eq(metrics_open(&m, &j, 0, 1, NULL, 0, &e), 0);
    ck_assert_int_eq(metrics_step(&m, 2, 1, 0.1, 1.5, 5, -1, &e), 0);
    ck_assert_int_eq(metrics_close(&m, &e), 0);
    char *got = read_all(csv, NULL);
    char want[512];
    snprintf(want, sizeof want, "%s1,1,0.1,2,5,,\n2,1,0.1,1.5,5,,\n", hdr);
    ck_assert_str_eq(got, want);
    free(got);

    /* Rows past the checkpoint (the crashed attempt's steps 3..6 and its
     * evaluation) go: the resumed run writes those steps again. */
    char run[512];
    snprintf(run, sizeof run, "%s1,1,0.1,2,5,,\n2,1,0.1,1.5,5,,\n2,1,,,,0.5,0.75\n"
             "3,2,0.1,1,5,,\n4,2,0.1,0.5,5,,\n4,2,,,,0.25,0.875\n", hdr);
    ck_assert_int_eq(write_file(csv, run, strlen(run)), 0);
    ck_assert_int_eq(metrics_open(&m, &j, 0, 2, NULL, 0, &e), 0);
    ck_assert_int_eq(metrics_step(&m, 3, 2, 0.1, 0.9, 5, -1, &e), 0);
    ck_assert_int_eq(metrics_close(&m, &e), 0);
    got = read_all(csv, NULL);
    snprintf(want, sizeof want, "%s1,1,0.1,2,5,,\n2,1,0.1,1.5,5,,\n2,1,,,,0.5,0.75\n"
             "3,2,0.1,0.899999976,5,,\n", hdr);
    ck_assert_msg(strcmp(got, want) == 0 || strstr(got, "3,2,0.1,0.9,5,,\n"), "%s", got);
    ck_assert_ptr_null(strstr(got, "0.875"));
    ck_assert_ptr_null(strstr(got, "4,2"));
    free(got);

    /* Someone else's file: resuming does not append to it. */
    ck_assert_int_eq(write_file(csv, "a,b\n1,2\n", 8), 0);
    ck_assert_int_eq(metrics_open(&m, &j, 0, 1, NULL, 0, &e), 0);
    ck_assert_int_eq(metrics_close(&m, &e), 0);
    got = read_all(csv, NULL);
    ck_assert_str_eq(got, hdr);
    free(got);

    free(csv);
    ck_assert_int_eq(rm_tree(dir), 0);
    free(dir);
}
END_TEST

/* Issue 12: a second job writing the same CSV or TensorBoard directory at
 * the same time is refused (the first one's file stays whole), and
 * metrics_csv never writes through a symbolic link into another file. */
START_TEST(second_writer_and_symlinks_refused)
{
    char *dir = make_temp_dir("metrics");
    char *csv = path_in(dir, "m.csv"), *tb = path_in(dir, "tb");
    struct ddpc_job j = job_for(csv, tb, DDPC_PROGRESS_OFF, 1);
    struct ddpc_metrics m1, m2;
    struct ddpc_err e = { 0 };
    ck_assert_int_eq(metrics_open(&m1, &j, 0, -1, NULL, 0, &e), 0);
    ck_assert_int_eq(metrics_step(&m1, 1, 1, 0.1, 2, 5, -1, &e), 0);
    struct ddpc_job jc = job_for(csv, NULL, DDPC_PROGRESS_OFF, 1);
    ck_assert_int_eq(metrics_open(&m2, &jc, 0, -1, NULL, 0, &e), DDPC_E_INVALID);
    ck_assert_msg(strstr(e.msg, "being written by another running job") && strstr(e.msg, csv),
                  "%s", e.msg);
    ck_assert_int_eq(metrics_close(&m2, &e), 0);
    ddpc_err_clear(&e);
    struct ddpc_job jt = job_for(NULL, tb, DDPC_PROGRESS_OFF, 1);
    ck_assert_int_eq(metrics_open(&m2, &jt, 0, -1, NULL, 0, &e), DDPC_E_INVALID);
    ck_assert_msg(strstr(e.msg, "logging.tensorboard") && strstr(e.msg, "another running job"),
                  "%s", e.msg);
    ck_assert_int_eq(metrics_close(&m2, &e), 0);
    ddpc_err_clear(&e);
    ck_assert_int_eq(metrics_step(&m1, 2, 1, 0.1, 1.5, 5, -1, &e), 0);
    ck_assert_int_eq(metrics_close(&m1, &e), 0);
    char *got = read_all(csv, NULL), want[256];
    snprintf(want, sizeof want, "%s1,1,0.1,2,5,,\n2,1,0.1,1.5,5,,\n", hdr);
    ck_assert_str_eq(got, want);            /* not truncated, not spliced */
    free(got);
    /* released at close: the next run opens the CSV, and the directory's
     * lock is free (a new event file in the same second and pid would
     * collide by name, so the lock is tried directly) */
    ck_assert_msg(metrics_open(&m2, &jc, 0, -1, NULL, 0, &e) == 0, "%s", e.msg);
    ck_assert_int_eq(metrics_close(&m2, &e), 0);
    char *lockf = path_in(tb, ".ddpc.lock");
    int lfd = open(lockf, O_RDWR);
    ck_assert_int_ge(lfd, 0);
    ck_assert_int_eq(flock(lfd, LOCK_EX | LOCK_NB), 0);
    ck_assert_int_eq(close(lfd), 0);
    free(lockf);

    /* a symbolic link to a file, or to nothing yet: refused, target untouched */
    char *target = path_in(dir, "other.txt"), *link = path_in(dir, "link.csv");
    char *dangling = path_in(dir, "dangling.csv");
    ck_assert_int_eq(write_file(target, "precious\n", 9), 0);
    ck_assert_int_eq(symlink(target, link), 0);
    ck_assert_int_eq(symlink("nowhere/x.csv", dangling), 0);
    const char *bad[2] = { link, dangling };
    for (int i = 0; i < 2; i++) {
        ddpc_err_clear(&e);
        struct ddpc_job jl = job_for(bad[i], NULL, DDPC_PROGRESS_OFF, 1);
        ck_assert_int_eq(metrics_open(&m2, &jl, 0, -1, NULL, 0, &e), DDPC_E_INVALID);
        ck_assert_msg(strstr(e.msg, "symbolic link") && strstr(e.msg, bad[i]), "%s", e.msg);
        ck_assert_int_eq(metrics_close(&m2, &e), 0);
    }
    got = read_all(target, NULL);
    ck_assert_str_eq(got, "precious\n");
    free(got);
    /* a link to a device (like /dev/stdout) is written through */
    char *devlink = path_in(dir, "null.csv");
    ck_assert_int_eq(symlink("/dev/null", devlink), 0);
    ddpc_err_clear(&e);
    struct ddpc_job jd = job_for(devlink, NULL, DDPC_PROGRESS_OFF, 1);
    ck_assert_msg(metrics_open(&m2, &jd, 0, -1, NULL, 0, &e) == 0, "%s", e.msg);
    ck_assert_int_eq(metrics_step(&m2, 1, 1, 0.1, 2, 5, -1, &e), 0);
    ck_assert_int_eq(metrics_close(&m2, &e), 0);
    free(devlink);
    free(target);
    free(link);
    free(dangling);
    free(csv);
    free(tb);
    ck_assert_int_eq(rm_tree(dir), 0);
    free(dir);
}
END_TEST

/* ===== TensorBoard: a minimal TFRecord + protobuf reader ================ */

static uint64_t le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint64_t rd_varint(const uint8_t **p, const uint8_t *end)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        ck_assert_msg(*p < end, "varint runs past its message");
        uint8_t b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return v;
    }
    ck_abort_msg("varint longer than 10 bytes");
    return 0;
}

#define MAX_VALUES 4
struct ev {
    double  wall_time;
    int64_t step;
    char    file_version[32];
    int     session_status;     /* SessionLog.status; 0: none */
    int     n_values;
    char    tag[MAX_VALUES][32];
    float   value[MAX_VALUES];
};

static void parse_value(const uint8_t *p, const uint8_t *end, struct ev *ev)
{
    ck_assert_int_lt(ev->n_values, MAX_VALUES);
    int i = ev->n_values++;
    int have_tag = 0, have_value = 0;
    while (p < end) {
        uint64_t key = rd_varint(&p, end);
        if (key == ((1 << 3) | 2)) {
            uint64_t n = rd_varint(&p, end);
            ck_assert_uint_le(n, (uint64_t)(end - p));
            ck_assert_uint_lt(n, sizeof ev->tag[i]);
            memcpy(ev->tag[i], p, n);
            ev->tag[i][n] = '\0';
            p += n;
            have_tag = 1;
        } else if (key == ((2 << 3) | 5)) {
            ck_assert_int_ge(end - p, 4);
            uint32_t bits = (uint32_t)le(p, 4);
            memcpy(&ev->value[i], &bits, 4);
            p += 4;
            have_value = 1;
        } else {
            ck_abort_msg("unexpected Value field key %llu", (unsigned long long)key);
        }
    }
    ck_assert(have_tag && have_value);
}

static void parse_event(const uint8_t *p, const uint8_t *end, struct ev *ev)
{
    memset(ev, 0, sizeof *ev);
    while (p < end) {
        uint64_t key = rd_varint(&p, end);
        if (key == ((1 << 3) | 1)) {
            ck_assert_int_ge(end - p, 8);
            uint64_t bits = le(p, 8);
            memcpy(&ev->wall_time, &bits, 8);
            p += 8;
        } else if (key == ((2 << 3) | 0)) {
            ev->step = (int64_t)rd_varint(&p, end);
        } else if (key == ((3 << 3) | 2)) {
            uint64_t n = rd_varint(&p, end);
            ck_assert_uint_le(n, (uint64_t)(end - p));
            ck_assert_uint_lt(n, sizeof ev->file_version);
            memcpy(ev->file_version, p, n);
            p += n;
        } else if (key == ((7 << 3) | 2)) {         /* SessionLog */
            uint64_t n = rd_varint(&p, end);
            ck_assert_uint_le(n, (uint64_t)(end - p));
            const uint8_t *s = p, *send = p + n;
            while (s < send) {
                ck_assert_uint_eq(rd_varint(&s, send), (1 << 3) | 0);   /* status */
                ev->session_status = (int)rd_varint(&s, send);
            }
            p = send;
        } else if (key == ((5 << 3) | 2)) {         /* Summary */
            uint64_t n = rd_varint(&p, end);
            ck_assert_uint_le(n, (uint64_t)(end - p));
            const uint8_t *s = p, *send = p + n;
            while (s < send) {
                ck_assert_uint_eq(rd_varint(&s, send), (1 << 3) | 2);   /* Value */
                uint64_t vn = rd_varint(&s, send);
                ck_assert_uint_le(vn, (uint64_t)(send - s));
                parse_value(s, s + vn, ev);
                s += vn;
            }
            p = send;
        } else {
            ck_abort_msg("unexpected Event field key %llu", (unsigned long long)key);
        }
    }
    ck_assert_ptr_eq(p, end);
}

/* Splits the file into TFRecords, verifying both CRCs of each, and parses
 * every record as an Event. Returns the number of events. */
static int read_events(const char *path, struct ev *evs, int max)
{
    size_t len;
    uint8_t *buf = (uint8_t *)read_all(path, &len);
    size_t off = 0;
    int n = 0;
    while (off < len) {
        ck_assert_uint_ge(len - off, 12);
        uint64_t rl = le(buf + off, 8);
        ck_assert_uint_eq(le(buf + off + 8, 4), metrics_crc32c_masked(buf + off, 8));
        ck_assert_uint_ge(len - off - 12, rl + 4);
        const uint8_t *data = buf + off + 12;
        ck_assert_uint_eq(le(data + rl, 4), metrics_crc32c_masked(data, rl));
        ck_assert_int_lt(n, max);
        parse_event(data, data + rl, &evs[n++]);
        off += 12 + rl + 4;
    }
    ck_assert_uint_eq(off, len);
    free(buf);
    return n;
}

/* The one file in dir; checks TensorFlow's naming. */
static char *event_file(const char *dir)
{
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    struct dirent *de;
    char *found = NULL;
    int n = 0;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        n++;
        found = path_in(dir, de->d_name);
        char host[256], want_tail[320];
        ck_assert_int_eq(gethostname(host, sizeof host), 0);
        host[sizeof host - 1] = '\0';
        snprintf(want_tail, sizeof want_tail, ".%s.%ld.ddpc", host, (long)getpid());
        const char *pre = "events.out.tfevents.";
        ck_assert_int_eq(strncmp(de->d_name, pre, strlen(pre)), 0);
        char *end = NULL;
        long long t = strtoll(de->d_name + strlen(pre), &end, 10);
        ck_assert_int_gt(t, 1600000000LL);
        ck_assert_str_eq(end, want_tail);
    }
    ck_assert_int_eq(closedir(d), 0);
    ck_assert_int_eq(n, 1);
    return found;
}

START_TEST(tfrecord_framing)
{
    char *dir = make_temp_dir("metrics");
    char *tbdir = path_in(dir, "runs/exp1");          /* created, with its parent */
    struct ddpc_job j = job_for(NULL, tbdir, DDPC_PROGRESS_OFF, 2);
    struct ddpc_metrics m;
    struct ddpc_err e = { 0 };
    ck_assert_int_eq(metrics_open(&m, &j, 0, -1, NULL, 0, &e), 0);
    for (int s = 1; s <= 4; s++)
        ck_assert_int_eq(metrics_step(&m, s, 1, 0.5, 2.0 / s, 100.0 * s, -1, &e), 0);
    ck_assert_int_eq(metrics_eval(&m, 4, 1, 0.25, 0.75, &e), 0);
    ck_assert_int_eq(metrics_eval(&m, 300, 2, 0.125, -1, &e), 0);  /* 2-byte varint step */
    ck_assert_int_eq(metrics_close(&m, &e), 0);

    char *path = event_file(tbdir);
    ck_assert_str_eq(m.tb_path, path);           /* tb_path names the file */
    struct ev ev[8];
    int n = read_events(path, ev, 8);
    ck_assert_int_eq(n, 5);
    /* First record: the format marker, no step, no summary. */
    ck_assert_str_eq(ev[0].file_version, "brain.Event:2");
    ck_assert_int_eq(ev[0].n_values, 0);
    ck_assert_int_eq(ev[0].step, 0);
    double now = (double)time(NULL);
    for (int i = 0; i < n; i++)
        ck_assert(fabs(ev[i].wall_time - now) < 60);
    /* Steps 2 and 4 (every_n_steps = 2). */
    for (int k = 0; k < 2; k++) {
        struct ev *x = &ev[1 + k];
        int s = 2 * (k + 1);
        ck_assert_int_eq(x->step, s);
        ck_assert_str_eq(x->file_version, "");
        ck_assert_int_eq(x->n_values, 3);
        ck_assert_str_eq(x->tag[0], "train/loss");
        ck_assert_str_eq(x->tag[1], "train/lr");
        ck_assert_str_eq(x->tag[2], "train/samples_per_s");
        ck_assert(x->value[0] == (float)(2.0 / s));
        ck_assert(x->value[1] == 0.5f);
        ck_assert(x->value[2] == (float)(100.0 * s));
    }
    ck_assert_int_eq(ev[3].step, 4);
    ck_assert_int_eq(ev[3].n_values, 2);
    ck_assert_str_eq(ev[3].tag[0], "eval/loss");
    ck_assert_str_eq(ev[3].tag[1], "eval/accuracy");
    ck_assert(ev[3].value[0] == 0.25f && ev[3].value[1] == 0.75f);
    ck_assert_int_eq(ev[4].step, 300);
    ck_assert_int_eq(ev[4].n_values, 1);
    ck_assert_str_eq(ev[4].tag[0], "eval/loss");
    free(path);

    /* Resumed from step 2: a new file that starts with a SessionLog START
     * at step 3, so TensorBoard drops the old file's points from step 3 on */
    char *tb2 = path_in(dir, "runs/exp2");
    j = job_for(NULL, tb2, DDPC_PROGRESS_OFF, 2);
    ck_assert_int_eq(metrics_open(&m, &j, 0, 2, NULL, 0, &e), 0);
    ck_assert_int_eq(metrics_step(&m, 4, 1, 0.5, 0.5, 400, -1, &e), 0);
    ck_assert_int_eq(metrics_close(&m, &e), 0);
    path = event_file(tb2);
    n = read_events(path, ev, 8);
    ck_assert_int_eq(n, 3);
    ck_assert_str_eq(ev[0].file_version, "brain.Event:2");
    ck_assert_int_eq(ev[1].session_status, 1);      /* START */
    ck_assert_int_eq(ev[1].step, 3);
    ck_assert_int_eq(ev[1].n_values, 0);
    ck_assert_int_eq(ev[2].step, 4);
    ck_assert_int_eq(ev[2].session_status, 0);
    free(tb2);
    free(path);
    free(tbdir);
    ck_assert_int_eq(rm_tree(dir), 0);
    free(dir);
}
END_TEST

/* TensorBoard's own reader, when the python package is there. */
START_TEST(tensorboard_reads_it)
{
    char *dir = make_temp_dir("metrics");
    struct ddpc_job j = job_for(NULL, dir, DDPC_PROGRESS_OFF, 1);
    struct ddpc_metrics m;
    struct ddpc_err e = { 0 };
    ck_assert_int_eq(metrics_open(&m, &j, 0, -1, NULL, 0, &e), 0);
    ck_assert_int_eq(metrics_step(&m, 1, 1, 0.01, 2.5, 64, -1, &e), 0);
    ck_assert_int_eq(metrics_step(&m, 2, 1, 0.02, 1.75, 128, -1, &e), 0);
    ck_assert_int_eq(metrics_eval(&m, 2, 1, 1.5, 0.625, &e), 0);
    ck_assert_int_eq(metrics_step(&m, 1000, 2, 0.03, 0.5, 256, -1, &e), 0);
    ck_assert_int_eq(metrics_close(&m, &e), 0);

    char *script = path_in(test_top(), "tests/tb_read.py");
    const char *env_py = getenv("DDPC_PYTHON");
    const char *pythons[] = { env_py && *env_py ? env_py : "python3", "python3",
                              "/usr/bin/python3" };
    int ran = 0;
    for (size_t i = 0; i < sizeof pythons / sizeof pythons[0] && !ran; i++) {
        char *argv[] = { (char *)pythons[i], script, dir,
                         "train/loss=1:2.5,2:1.75,1000:0.5",
                         "train/lr=1:0.01,2:0.02,1000:0.03",
                         "train/samples_per_s=1:64,2:128,1000:256",
                         "eval/loss=2:1.5", "eval/accuracy=2:0.625", NULL };
        struct run_result r;
        ck_assert_int_eq(run_capture(argv, NULL, NULL, 120, &r), 0);
        /* 127: no such python */
        if (r.exited && r.code == 127) {
            run_result_free(&r);
            continue;
        }
        ck_assert_msg(r.exited && r.code == 0, "%s %s failed (%d):\n%s%s", pythons[i],
                      script, r.code, r.out, r.err);
        printf("%s", r.out);                           /* "tb_read: OK, ..." */
        run_result_free(&r);
        ran = 1;
    }
    if (!ran)
        test_skip("tensorboard read", "no python3");
    free(script);
    ck_assert_int_eq(rm_tree(dir), 0);
    free(dir);
}
END_TEST

/* ===== progress line ==================================================== */

static double mono_s(void)
{
    struct timespec ts;
    ck_assert_int_eq(clock_gettime(CLOCK_MONOTONIC, &ts), 0);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

START_TEST(progress_on_exact)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    ck_assert_ptr_nonnull(out);
    struct ddpc_job j = job_for(NULL, NULL, DDPC_PROGRESS_ON, 50);
    struct ddpc_metrics m;
    struct ddpc_err e = { 0 };
    ck_assert_int_eq(metrics_open(&m, &j, 100, -1, out, 1, &e), 0);   /* on, a terminal */
    m.min_redraw_s = 0;                                              /* see every redraw */
    ck_assert_int_eq(metrics_step(&m, 1, 1, 0.1, 2.5, 1234.4, 65, &e), 0);
    ck_assert_int_eq(metrics_step(&m, 2, 1, 0.1, 2.25, 1500, 3725, &e), 0);
    ck_assert_int_eq(metrics_eval(&m, 2, 1, 2.0, 0.5, &e), 0);
    ck_assert_int_eq(metrics_clear_progress(&m, &e), 0);            /* nothing shown: no-op */
    ck_assert_int_eq(metrics_step(&m, 100, 3, 0.1, 0.123456, 2000, 0, &e), 0);
    ck_assert_int_eq(metrics_close(&m, &e), 0);
    ck_assert_int_eq(fclose(out), 0);
    ck_assert_str_eq(buf,
        "\r\033[Kepoch 1/3  step 1/100  loss 2.5000  1234 samples/s  ETA 0:01:05"
        "\r\033[Kepoch 1/3  step 2/100  loss 2.2500  1500 samples/s  ETA 1:02:05"
        "\r\033[K"
        "\r\033[Kepoch 3/3  step 100/100  loss 0.1235  2000 samples/s  ETA 0:00:00"
        "\r\033[K");
    free(buf);

    /* Unknown total: no "/total"; unknown ETA. */
    buf = NULL;
    out = open_memstream(&buf, &len);
    ck_assert_ptr_nonnull(out);
    ck_assert_int_eq(metrics_open(&m, &j, 0, -1, out, 1, &e), 0);
    ck_assert_int_eq(metrics_step(&m, 7, 2, 0.1, 1, 10, -1, &e), 0);
    ck_assert_int_eq(metrics_close(&m, &e), 0);
    ck_assert_int_eq(fclose(out), 0);
    ck_assert_str_eq(buf, "\r\033[Kepoch 2/3  step 7  loss 1.0000  10 samples/s  ETA -:--:--"
                          "\r\033[K");
    free(buf);
}
END_TEST

/* The worker reads a GPU's loss only where metrics_wants_loss says the
 * step uses it: fed NaN everywhere else, no CSV row and no progress output
 * may show a NaN, and every step it wants does use its loss. */
START_TEST(wants_loss_exactly_where_a_step_uses_it)
{
    char *dir = make_temp_dir("metrics");
    char *csv = path_in(dir, "m.csv");
    const struct { const char *csv; enum ddpc_progress p; int tty, every; double redraw; } cases[] = {
        { NULL, DDPC_PROGRESS_ON, 1, 1, 1e9 },     /* redraws: only first and last */
        { NULL, DDPC_PROGRESS_ON, 1, 1, 0 },       /* redraws: every step */
        { NULL, DDPC_PROGRESS_ON, 0, 5, 0 },       /* lines every 5 steps, and the last */
        { csv, DDPC_PROGRESS_OFF, 1, 3, 0 },       /* CSV rows every 3 steps */
        { NULL, DDPC_PROGRESS_OFF, 1, 1, 0 },      /* nothing: never */
    };
    static const int want_n[] = { 2, 20, 4, 6, 0 };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char *buf = NULL;
        size_t len = 0;
        FILE *out = open_memstream(&buf, &len);
        ck_assert_ptr_nonnull(out);
        struct ddpc_job j = job_for(cases[c].csv, NULL, cases[c].p, cases[c].every);
        struct ddpc_metrics m;
        struct ddpc_err e = { 0 };
        ck_assert_int_eq(metrics_open(&m, &j, 20, -1, out, cases[c].tty, &e), 0);
        m.min_redraw_s = cases[c].redraw;
        int wanted = 0;
        for (int s = 1; s <= 20; s++) {
            int w = metrics_wants_loss(&m, s);
            wanted += w;
            ck_assert_int_eq(metrics_step(&m, s, 1, 0.1, w ? 1.0 + s : NAN, 100, 1, &e), 0);
        }
        ck_assert_int_eq(metrics_close(&m, &e), 0);
        ck_assert_int_eq(fclose(out), 0);
        char *rows = cases[c].csv ? read_all(csv, NULL) : NULL;
        ck_assert_msg(!strstr(buf, "nan") && !(rows && strstr(rows, "nan")),
                      "case %zu used a loss it did not ask for:\n%s%s", c, buf, rows ? rows : "");
        ck_assert_msg(wanted == want_n[c], "case %zu: %d steps wanted the loss, expected %d", c,
                      wanted, want_n[c]);
        free(rows);
        free(buf);
    }
    free(csv);
    ck_assert_int_eq(rm_tree(dir), 0);
    free(dir);
}
END_TEST

START_TEST(progress_throttled)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    ck_assert_ptr_nonnull(out);
    struct ddpc_job j = job_for(NULL, NULL, DDPC_PROGRESS_AUTO, 1);
    struct ddpc_metrics m;
    struct ddpc_err e = { 0 };
    ck_assert_int_eq(metrics_open(&m, &j, 1000, -1, out, 1, &e), 0);   /* auto + tty: on */
    double t0 = mono_s();
    for (int s = 1; s <= 1000; s++)
        ck_assert_int_eq(metrics_step(&m, s, 1, 0.1, 1.0, 1e4, 1000 - s, &e), 0);
    double spent = mono_s() - t0;
    ck_assert_int_eq(metrics_close(&m, &e), 0);
    ck_assert_int_eq(fclose(out), 0);
    int draws = 0;
    for (const char *p = buf; (p = strstr(p, "epoch ")) != NULL; p++)
        draws++;
    /* The first and the last step always draw; in between at most one per
     * 0.1 s of the loop's time (1000 calls take microseconds, more under
     * sanitizers, so allow for that rather than assume). */
    ck_assert_int_ge(draws, 2);
    ck_assert_int_le(draws, 2 + (int)(spent / DDPC_METRICS_REDRAW_S) + 1);
    ck_assert_ptr_nonnull(strstr(buf, "step 1/1000 "));
    ck_assert_ptr_nonnull(strstr(buf, "step 1000/1000 "));
    free(buf);
}
END_TEST

START_TEST(progress_off_writes_nothing)
{
    const struct { enum ddpc_progress p; int tty; } cases[] = {
        { DDPC_PROGRESS_OFF, 1 }, { DDPC_PROGRESS_OFF, 0 },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char *buf = NULL;
        size_t len = 0;
        FILE *out = open_memstream(&buf, &len);
        ck_assert_ptr_nonnull(out);
        struct ddpc_job j = job_for(NULL, NULL, cases[c].p, 1);
        struct ddpc_metrics m;
        struct ddpc_err e = { 0 };
        ck_assert_int_eq(metrics_open(&m, &j, 10, -1, out, cases[c].tty, &e), 0);
        m.min_redraw_s = 0;
        for (int s = 1; s <= 10; s++)
            ck_assert_int_eq(metrics_step(&m, s, 1, 0.1, 1.0, 5, 1, &e), 0);
        ck_assert_int_eq(metrics_eval(&m, 10, 1, 1.0, 0.5, &e), 0);
        ck_assert_int_eq(metrics_clear_progress(&m, &e), 0);
        ck_assert_int_eq(metrics_close(&m, &e), 0);
        ck_assert_int_eq(fclose(out), 0);
        ck_assert_uint_eq(len, 0);
        free(buf);
    }
}
END_TEST

/* Without a terminal (CI, SLURM output): auto and on print a plain line
 * every every_n_steps steps and at the last one, never an escape code. */
START_TEST(progress_lines_without_terminal)
{
    const enum ddpc_progress modes[] = { DDPC_PROGRESS_AUTO, DDPC_PROGRESS_ON };
    for (size_t c = 0; c < sizeof modes / sizeof modes[0]; c++) {
        char *buf = NULL;
        size_t len = 0;
        FILE *out = open_memstream(&buf, &len);
        ck_assert_ptr_nonnull(out);
        struct ddpc_job j = job_for(NULL, NULL, modes[c], 4);
        struct ddpc_metrics m;
        struct ddpc_err e = { 0 };
        ck_assert_int_eq(metrics_open(&m, &j, 10, -1, out, 0, &e), 0);
        for (int s = 1; s <= 10; s++)
            ck_assert_int_eq(metrics_step(&m, s, 1 + (s > 5), 0.1, 1.0 / s, 1000.0 * s,
                                          10 - s, &e), 0);
        ck_assert_int_eq(metrics_eval(&m, 10, 2, 1.0, 0.5, &e), 0);
        ck_assert_int_eq(metrics_clear_progress(&m, &e), 0);
        ck_assert_int_eq(metrics_close(&m, &e), 0);
        ck_assert_int_eq(fclose(out), 0);
        ck_assert_str_eq(buf,
            "step 4/10  epoch 1/3  loss 0.2500  4000 samples/s  ETA 0:00:06\n"
            "step 8/10  epoch 2/3  loss 0.1250  8000 samples/s  ETA 0:00:02\n"
            "step 10/10  epoch 2/3  loss 0.1000  10000 samples/s  ETA 0:00:00\n");
        ck_assert_ptr_null(strchr(buf, '\033'));
        ck_assert_ptr_null(strchr(buf, '\r'));
        free(buf);
    }
}
END_TEST

/* ===== lifecycle and errors ============================================= */

START_TEST(close_is_safe)
{
    struct ddpc_metrics m;
    struct ddpc_err e = { 0 };
    memset(&m, 0, sizeof m);
    ck_assert_int_eq(metrics_close(&m, &e), 0);       /* never opened */
    ck_assert_int_eq(metrics_close(&m, &e), 0);

    /* Open fails half way: the CSV opened, the TensorBoard dir cannot be
     * made (a regular file is in the way). */
    char *dir = make_temp_dir("metrics");
    char *csv = path_in(dir, "m.csv");
    char *file = path_in(dir, "file");
    char *tb = path_in(dir, "file/tb");
    ck_assert_int_eq(write_file(file, "x", 1), 0);
    struct ddpc_job j = job_for(csv, tb, DDPC_PROGRESS_OFF, 1);
    ck_assert_int_lt(metrics_open(&m, &j, 0, -1, NULL, 0, &e), 0);
    ck_assert_int_eq(e.code, DDPC_E_SYS);
    ck_assert_ptr_nonnull(strstr(e.msg, "logging.tensorboard"));
    ck_assert_ptr_nonnull(strstr(e.msg, tb));
    ck_assert_ptr_null(m.csv);                          /* unwound */
    ck_assert_ptr_null(m.tb);
    ck_assert_int_eq(metrics_close(&m, &e), 0);
    ck_assert_int_eq(metrics_close(&m, &e), 0);

    /* The CSV's parent is a file. */
    ddpc_err_clear(&e);
    char *badcsv = path_in(dir, "file/m.csv");
    j = job_for(badcsv, NULL, DDPC_PROGRESS_OFF, 1);
    ck_assert_int_lt(metrics_open(&m, &j, 0, -1, NULL, 0, &e), 0);
    ck_assert_ptr_nonnull(strstr(e.msg, "logging.metrics_csv"));
    ck_assert_int_eq(metrics_close(&m, &e), 0);

    /* Nothing configured: every call is a cheap no-op. */
    ddpc_err_clear(&e);
    j = job_for(NULL, "", DDPC_PROGRESS_OFF, 1);
    ck_assert_int_eq(metrics_open(&m, &j, 0, -1, NULL, 1, &e), 0);
    ck_assert_int_eq(metrics_step(&m, 1, 1, 0.1, 1, 1, 1, &e), 0);
    ck_assert_int_eq(metrics_eval(&m, 1, 1, 1, 1, &e), 0);
    ck_assert_int_eq(metrics_close(&m, &e), 0);
    ck_assert_int_eq(e.code, 0);

    free(badcsv);
    free(tb);
    free(file);
    free(csv);
    ck_assert_int_eq(rm_tree(dir), 0);
    free(dir);
}
END_TEST

START_TEST(write_error_reported)
{
    /* /dev/full accepts the open and fails every write with ENOSPC: the
     * header write must report it, not lose it in a buffer. */
    if (access("/dev/full", W_OK) != 0) {
        test_skip("write_error_reported", "no /dev/full");
        return;
    }
    struct ddpc_job j = job_for("/dev/full", NULL, DDPC_PROGRESS_OFF, 1);
    struct ddpc_metrics m;
    struct ddpc_err e = { 0 };
    ck_assert_int_eq(metrics_open(&m, &j, 0, -1, NULL, 0, &e), DDPC_E_SYS);
    /* the file is named: a run's message said only 'writing metrics CSV' */
    ck_assert_msg(strstr(e.msg, "metrics CSV '/dev/full'"), "%s", e.msg);
    ck_assert_ptr_null(m.csv);
    ck_assert_int_eq(metrics_close(&m, &e), 0);
}
END_TEST

Suite *metrics_suite(void)
{
    Suite *s = suite_create("metrics");
    TCase *tc = tcase_create("crc32c");
    tcase_add_test(tc, crc32c_vectors);
    tcase_add_test(tc, crc32c_table_matches_bitwise);
    tcase_add_test(tc, crc32c_masked);
    tcase_add_test(tc, eta_format);
    suite_add_tcase(s, tc);

    tc = tcase_create("files");
    tcase_add_test(tc, csv_exact);
    tcase_add_test(tc, csv_resume_repairs_and_replaces);
    tcase_add_test(tc, second_writer_and_symlinks_refused);
    tcase_add_test(tc, tfrecord_framing);
    tcase_add_test(tc, close_is_safe);
    tcase_add_test(tc, write_error_reported);
    suite_add_tcase(s, tc);

    tc = tcase_create("tensorboard");
    tcase_add_test(tc, tensorboard_reads_it);
    tcase_set_timeout(tc, 150);   /* importing tensorboard takes seconds */
    suite_add_tcase(s, tc);

    tc = tcase_create("progress");
    tcase_add_test(tc, progress_on_exact);
    tcase_add_test(tc, progress_throttled);
    tcase_add_test(tc, wants_loss_exactly_where_a_step_uses_it);
    tcase_add_test(tc, progress_off_writes_nothing);
    tcase_add_test(tc, progress_lines_without_terminal);
    suite_add_tcase(s, tc);
    return s;
}
