/* test_ckpt.c - checkpoints (runtime/ckpt.c): format round trip, corruption
 * and truncation detection, resume selection, pruning, out-of-space and
 * kill -9 in the middle of a write, pre-flight, safetensors export.
 *
 * Every test works in its own directory from make_temp_dir and removes it.
 * Out-of-space is simulated with ckpt_set_fault everywhere, and also on a
 * real 64 KiB tmpfs when the test may mount one (root in a privileged
 * container); otherwise that case prints SKIP.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <check.h>
#include "suites.h"
#include "testutil.h"
#include "ckpt.h"
#include "crc32c.h"
#include "ident.h"
#include "layers.h"

/* ===== helpers ===== */

static const char *HASH_A =
    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
static const char *HASH_B =
    "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Arbitrary bit patterns, NaN payloads, infinities, -0 and denormals
 * included: the round trip must be bit-exact, not merely float-equal. */
static void fill_bits(float *x, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)mix(seed * 1000003u + i);
        memcpy(&x[i], &u, 4);
    }
}

/* A checkpoint with malloc'd buffers (release with ckpt_free). */
static void make_ckpt(struct ddpc_ckpt *c, size_t np, size_t no, int64_t epoch,
                      int64_t step, const char *hash)
{
    memset(c, 0, sizeof *c);
    memcpy(c->ident_hash, hash, DDPC_CKPT_HASH_LEN + 1);
    c->world = 3;
    c->epoch = epoch;
    c->step = step;
    c->seed = 0xfeedfacecafebeefull;
    c->sampler_epoch = epoch;
    c->sampler_batches = 7;
    for (int i = 0; i < 4; i++)
        c->rng[i] = mix((uint64_t)step * 4 + (uint64_t)i);
    c->optim_step = step;
    c->epoch_loss = 0.125 * (double)step;
    c->n_params = np;
    c->n_opt = no;
    c->params = np ? malloc(np * 4) : NULL;
    c->opt = no ? malloc(no * 4) : NULL;
    ck_assert(!np || c->params);
    ck_assert(!no || c->opt);
    fill_bits(c->params, np, (uint64_t)step);
    fill_bits(c->opt, no, (uint64_t)step + 777);
}

static void assert_same(const struct ddpc_ckpt *a, const struct ddpc_ckpt *b)
{
    ck_assert_str_eq(a->ident_hash, b->ident_hash);
    ck_assert_str_eq(a->spec_hash, b->spec_hash);
    ck_assert_int_eq(a->world, b->world);
    ck_assert_int_eq(a->epoch, b->epoch);
    ck_assert_int_eq(a->step, b->step);
    ck_assert_uint_eq(a->seed, b->seed);
    ck_assert_int_eq(a->sampler_epoch, b->sampler_epoch);
    ck_assert_int_eq(a->sampler_batches, b->sampler_batches);
    for (int i = 0; i < 4; i++)
        ck_assert_uint_eq(a->rng[i], b->rng[i]);
    ck_assert_int_eq(a->optim_step, b->optim_step);
    ck_assert(a->epoch_loss == b->epoch_loss);
    ck_assert_uint_eq(a->n_params, b->n_params);
    ck_assert_uint_eq(a->n_opt, b->n_opt);
    ck_assert(a->n_params == 0 || memcmp(a->params, b->params, 4 * a->n_params) == 0);
    ck_assert(a->n_opt == 0 || memcmp(a->opt, b->opt, 4 * a->n_opt) == 0);
    ck_assert(b->n_opt != 0 || b->opt == NULL);
}

/* Writes one checkpoint; returns its path (static buffer per call site is
 * not enough, so the caller passes one). */
static void write_one(const char *dir, const char *job, size_t np, size_t no,
                      int64_t epoch, int64_t step, const char *hash, char *path, size_t cap)
{
    struct ddpc_ckpt c;
    struct ddpc_err e;
    ddpc_err_clear(&e);
    make_ckpt(&c, np, no, epoch, step, hash);
    int rc = ckpt_write(dir, job, &c, path, cap, &e);
    ck_assert_msg(rc == 0, "ckpt_write: %s", e.msg);
    ckpt_free(&c);
}

/* Directory entries other than . and .., sorted, space-separated. */
static void list_dir(const char *dir, char *out, size_t cap)
{
    char *names[256];
    int n = 0;
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    struct dirent *de;
    while ((de = readdir(d)) != NULL && n < 256) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        names[n] = strdup(de->d_name);
        ck_assert_ptr_nonnull(names[n]);
        n++;
    }
    ck_assert_int_eq(closedir(d), 0);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
            char *t = names[j]; names[j] = names[j - 1]; names[j - 1] = t;
        }
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        size_t l = strlen(out);
        snprintf(out + l, cap - l, "%s%s", i ? " " : "", names[i]);
        free(names[i]);
    }
}

static long long file_size(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return -1;
    return (long long)st.st_size;
}

static void flip_byte(const char *path, long long off)
{
    int fd = open(path, O_RDWR);
    ck_assert_int_ge(fd, 0);
    unsigned char b;
    ck_assert_int_eq(pread(fd, &b, 1, off), 1);
    b ^= 0x10;
    ck_assert_int_eq(pwrite(fd, &b, 1, off), 1);
    ck_assert_int_eq(close(fd), 0);
}

/* ===== CRC32C ===== */

/* crc32c.c's 8-byte step: chained and misaligned calls give the answer of
 * one call (the vectors and the table are in test_metrics.c; its speed in
 * build/bench/crc32c). */
START_TEST(crc32c_chains_and_misaligns)
{
    size_t n = 1 << 20;
    unsigned char *buf = malloc(n + 1);
    ck_assert_ptr_nonnull(buf);
    for (size_t i = 0; i < n + 1; i++)
        buf[i] = (unsigned char)mix(i);
    uint32_t one = crc32c(0, buf + 1, n);
    uint32_t two = crc32c(crc32c(0, buf + 1, 12345), buf + 1 + 12345, n - 12345);
    ck_assert_uint_eq(one, two);
    for (size_t k = 0; k < 8; k++)   /* every alignment of the start */
        ck_assert_uint_eq(crc32c(crc32c(0, buf + 1, k), buf + 1 + k, n - k), one);
    free(buf);
}
END_TEST

/* ===== write / read ===== */

START_TEST(round_trip_bit_exact)
{
    char *dir = make_temp_dir("ckpt");
    ck_assert_ptr_nonnull(dir);
    umask(022);     /* this test's own process (Check forks): files must be 0644 */
    size_t shapes[][2] = { { 1000, 2000 }, { 1000, 1000 }, { 1000, 0 }, { 1, 0 } };
    for (int k = 0; k < 4; k++) {
        struct ddpc_ckpt c, r;
        struct ddpc_err e;
        char path[4096];
        ddpc_err_clear(&e);
        make_ckpt(&c, shapes[k][0], shapes[k][1], 2, 100 + k, HASH_A);
        ck_assert_msg(ckpt_write(dir, "mnist", &c, path, sizeof path, &e) == 0, "%s", e.msg);
        char want[4096];
        snprintf(want, sizeof want, "%s/mnist-e0002-s%09d-01234567.ckpt", dir, 100 + k);
        ck_assert_str_eq(path, want);
        ck_assert_int_eq(file_size(path), (long long)ckpt_file_size(shapes[k][0], shapes[k][1]));
        struct stat st;
        ck_assert_int_eq(stat(path, &st), 0);
        ck_assert_int_eq(st.st_mode & 0777, 0644);
        ck_assert_msg(ckpt_read(path, &r, &e) == 0, "%s", e.msg);
        assert_same(&c, &r);
        ckpt_free(&r);
        ckpt_free(&r);      /* twice: must be harmless */
        ckpt_free(&c);
    }
    /* No temp file left behind by successful writes. */
    char ls[4096];
    list_dir(dir, ls, sizeof ls);
    ck_assert_str_eq(ls, "mnist-e0002-s000000100-01234567.ckpt mnist-e0002-s000000101-01234567.ckpt "
                         "mnist-e0002-s000000102-01234567.ckpt mnist-e0002-s000000103-01234567.ckpt");
    ck_assert_int_eq(rm_tree(dir), 0);
    free(dir);
}
END_TEST

START_TEST(header_is_little_endian_at_documented_offsets)
{
    char *dir = make_temp_dir("ckpt");
    char path[4096];
    write_one(dir, "j", 3, 6, 1, 0x0102030405LL, HASH_A, path, sizeof path);
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    unsigned char h[256];
    ck_assert_uint_eq(fread(h, 1, 256, f), 256);
    ck_assert_int_eq(fclose(f), 0);
    ck_assert(memcmp(h, "DDPCCKPT", 8) == 0);
    ck_assert_int_eq(h[8], 2);                       /* version */
    ck_assert_int_eq(h[12] | h[13] << 8, 256);       /* header size */
    ck_assert(memcmp(h + 16, HASH_A, 64) == 0);
    ck_assert_int_eq(h[80], 3);                      /* world */
    ck_assert_int_eq(h[96], 0x05);                   /* step, LE */
    ck_assert_int_eq(h[100], 0x01);
    ck_assert_int_eq(h[168], 3);                     /* n_params */
    ck_assert_int_eq(h[176], 6);                     /* n_opt */
    ck_assert_int_eq(rm_tree(dir), 0);
    free(dir);
}
END_TEST

START_TEST(every_flipped_byte_is_detected)
{
    char *dir = make_temp_dir("ckpt");
    char path[4096];
    write_one(dir, "j", 10, 20, 0, 1, HASH_A, path, sizeof path);
    long long size = file_size(path);
    ck_assert_int_eq(size, 256 + 4 * 30 + 4);
    for (long long off = 0; off < size; off++) {
        flip_byte(path, off);
        struct ddpc_ckpt r;
        struct ddpc_err e;
        ddpc_err_clear(&e);
        int rc = ckpt_read(path, &r, &e);
        ck_assert_msg(rc == DDPC_E_DATA, "flip at %lld: rc %d (%s)", off, rc, e.msg);
        ck_assert_msg(strstr(e.msg, path) != NULL, "message must name the file: %s", e.msg);
        if (off < 8)
            ck_assert_msg(strstr(e.msg, "not a ddpc checkpoint (bad magic)"), "%s", e.msg);
        else
            ck_assert_msg(strstr(e.msg, "checksum mismatch") && strstr(e.msg, "the file is corrupt"),
                          "flip at %lld: %s", off, e.msg);
        ck_assert_ptr_null(r.params);
        ck_assert_ptr_null(r.opt);
        flip_byte(path, off);   /* restore */
    }
    /* A large file: a flip deep in the optimizer state. */
    write_one(dir, "j", 100000, 200000, 0, 2, HASH_A, path, sizeof path);
    flip_byte(path, 256 + 4 * 250000 + 3);
    struct ddpc_ckpt r;
    struct ddpc_err e;
    ddpc_err_clear(&e);
    ck_assert_int_eq(ckpt_read(path, &r, &e), DDPC_E_DATA);
    ck_assert_msg(strstr(e.msg, "checksum mismatch: the file is corrupt"), "%s", e.msg);
    ck_assert_int_eq(rm_tree(dir), 0);
    free(dir);
}
END_TEST

START_TEST(truncation_and_trailing_data_are_detected)
{
    char *dir = make_temp_dir("ckpt");
    char path[4096];
    write_one(dir, "j", 50, 100, 0, 1, HASH_A, path, sizeof path);
    long long size = file_size(path);
    long long cuts[] = { size - 1, size - 4, size - 5, 256 + 4, 256 };
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        ck_assert_int_eq(truncate(path, cuts[i]), 0);
        struct ddpc_ckpt r;
        struct ddpc_err e;
        ddpc_err_clear(&e);
        ck_assert_int_eq(ckpt_read(path, &r, &e), DDPC_E_DATA);
        char want[128];
        snprintf(want, sizeof want, "truncated: expected %lld bytes, found %lld", size, cuts[i]);
        ck_assert_msg(strstr(e.msg, want) && strstr(e.msg, path), "cut %lld: %s", cuts[i], e.msg);
    }
    long long short_cuts[] = { 255, 8, 3, 0 };
    for (size_t i = 0; i < sizeof short_cuts / sizeof short_cuts[0]; i++) {
        ck_assert_int_eq(truncate(path, short_cuts[i]), 0);
        struct ddpc_ckpt r;
        struct ddpc_err e;
        ddpc_err_clear(&e);
        ck_assert_int_eq(ckpt_read(path, &r, &e), DDPC_E_DATA);
        ck_assert_msg(strstr(e.msg, "truncated: expected at least 256 bytes"), "%s", e.msg);
    }
    /* Trailing garbage is not silently accepted either. */
    write_one(dir, "j", 50, 100, 0, 2, HASH_A, path, sizeof path);
    FILE *f = fopen(path, "ab");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fputc('x', f), 'x');
    ck_assert_int_eq(fclose(f), 0);
    struct ddpc_ckpt r;
    struct ddpc_err e;
    ddpc_err_clear(&e);
    ck_assert_int_eq(ckpt_read(path, &r, &e), DDPC_E_DATA);
    ck_assert_msg(strstr(e.msg, "size mismatch"), "%s", e.msg);
    /* Not a checkpoint at all, and a missing file. */
    ck_assert_int_eq(write_file(path, "hello, world, this is text", 26), 0);
    ddpc_err_clear(&e);
    ck_assert_int_eq(ckpt_read(path, &r, &e), DDPC_E_DATA);
    ck_assert_msg(strstr(e.msg, "bad magic"), "%s", e.msg);
    ddpc_err_clear(&e);
    ck_assert_int_eq(ckpt_read("/nonexistent/x.ckpt", &r, &e), DDPC_E_SYS);
    ck_assert_msg(strstr(e.msg, "/nonexistent/x.ckpt: cannot open"), "%s", e.msg);
    /* A FIFO under a checkpoint's name is refused at once, not read
     * (a blocking open would hang resume forever). */
    char fifo[4200];
    snprintf(fifo, sizeof fifo, "%s/j-e0000-s000000009-01234567.ckpt", dir);
    ck_assert_int_eq(mkfifo(fifo, 0644), 0);
    ddpc_err_clear(&e);
    ck_assert_int_eq(ckpt_read(fifo, &r, &e), DDPC_E_DATA);
    ck_assert_msg(strstr(e.msg, "not a regular file"), "%s", e.msg);
    ck_assert_int_eq(rm_tree(dir), 0);
    free(dir);
}
END_TEST

/* A crafted file (valid checksums, hand-made counters) whose position
 * ckpt_write never writes is refused as impossible: a negative epoch
 * resumed into a loop of ~2^37 epochs, a negative batch into empty
 * batches. Offsets are ckpt.h's. */
START_TEST(crafted_counters_are_refused)
{
    char *dir = make_temp_dir("ckpt");
    char path[4096];
    write_one(dir, "j", 10, 20, 3, 40, HASH_A, path, sizeof path);
    size_t n = (size_t)file_size(path);
    unsigned char *b = malloc(n), *orig = malloc(n);
    ck_assert(b && orig);
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fread(orig, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
    static const struct { int off, width; int64_t v; } bad[] = {
        { 80, 4, 0 },                       /* world 0 */
        { 88, 8, -1 },                      /* epoch */
        { 96, 8, -5 },                      /* step */
        { 112, 8, -100000000000LL },        /* sampler_epoch */
        { 112, 8, 1LL << 40 },
        { 120, 8, -5 },                     /* sampler_batches */
        { 160, 8, -3 },                     /* optim_step */
        { 188, 4, -1 },                     /* good_steps */
        { 192, 8, -1 },                     /* skipped_steps */
        { 236, 8, -7 },                     /* train_samples */
        { 244, 8, (int64_t)0xbff0000000000000ull },   /* epoch_loss -1.0 */
        { 244, 8, 0x7ff8000000000000LL },   /* epoch_loss NaN */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memcpy(b, orig, n);
        for (int k = 0; k < bad[i].width; k++)
            b[bad[i].off + k] = (unsigned char)((uint64_t)bad[i].v >> (8 * k));
        uint32_t hc = crc32c(0, b, 252);
        for (int k = 0; k < 4; k++)
            b[252 + k] = (unsigned char)(hc >> (8 * k));
        uint32_t pc = crc32c(0, b, n - 4);
        for (int k = 0; k < 4; k++)
            b[n - 4 + k] = (unsigned char)(pc >> (8 * k));
        ck_assert_int_eq(write_file(path, b, n), 0);
        struct ddpc_ckpt r;
        struct ddpc_err e;
        ddpc_err_clear(&e);
        int rc = ckpt_read(path, &r, &e);
        ck_assert_msg(rc == DDPC_E_DATA && strstr(e.msg, "impossible header") &&
                      strstr(e.msg, path), "offset %d = %lld: rc %d: %s", bad[i].off,
                      (long long)bad[i].v, rc, e.msg);
        ck_assert_ptr_null(r.params);
    }
    /* the untouched file still reads */
    ck_assert_int_eq(write_file(path, orig, n), 0);
    struct ddpc_ckpt r;
    struct ddpc_err e;
    ddpc_err_clear(&e);
    ck_assert_msg(ckpt_read(path, &r, &e) == 0, "%s", e.msg);
    ckpt_free(&r);
    free(b);
    free(orig);
    ck_assert_int_eq(rm_tree(dir), 0);
    free(dir);
}
END_TEST

START_TEST(write_rejects_bad_input)
{
    char *dir = make_temp_dir("ckpt");
    struct ddpc_ckpt c;
    struct ddpc_err e;
    make_ckpt(&c, 4, 0, 0, 1, HASH_A);
    const char *bad_names[] = { "../escape", "a/b", "", ".hidden" };
    for (size_t i = 0; i < 4; i++) {
        ddpc_err_clear(&e);
        ck_assert_int_eq(ckpt_write(dir, bad_names[i], &c, NULL, 0, &e), DDPC_E_INVALID);
    }
    c.ident_hash[10] = 'g';
    ddpc_err_clear(&e);
    ck_assert_int_eq(ckpt_write(dir, "j", &c, NULL, 0, &e), DDPC_E_INVALID);
    ck_assert_msg(strstr(e.msg, "64 hex digits"), "%s", e.msg);
    ckpt_free(&c);
    char ls[4096];
    list_dir(dir, ls, sizeof ls);
    ck_assert_str_eq(ls, "");
    ck_assert_int_eq(rm_tree(dir), 0);
    free(dir);
}
END_TEST

/* ===== resume selection and pruning ===== */

START_TEST(resume_picks_newest_valid)
{
    char *dir = make_temp_dir("ckpt");
    char p10[4096], p20[4096], p30[4096], got[4096];
    struct ddpc_ckpt r;
    struct ddpc_err e;
    ddpc_err_clear(&e);

    /* No directory, then an empty one: nothing to resume, not an error. */
    char missing[4200];
    snprintf(missing, sizeof missing, "%s/not-there", dir);
    ck_assert_int_eq(ckpt_find_resume(missing, "job", HASH_A, NULL, NULL, &r, got, sizeof got, NULL, &e), 0);
    ck_assert_int_eq(ckpt_find_resume(dir, "job", HASH_A, NULL, NULL, &r, got, sizeof got, NULL, &e), 0);
    ck_assert_int_eq(e.code, 0);

    write_one(dir, "job", 100, 200, 0, 10, HASH_A, p10, sizeof p10);
    write_one(dir, "job", 100, 200, 1, 20, HASH_A, p20, sizeof p20);
    write_one(dir, "job", 100, 200, 2, 30, HASH_A, p30, sizeof p30);
    /* Distractors: another job, whose name extends ours, with a newer step;
     * a temp file of a crashed writer; an unrelated file. */
    char other[4096];
    write_one(dir, "job-e1", 100, 200, 9, 99, HASH_A, other, sizeof other);
    write_one(dir, "jobx", 100, 200, 9, 99, HASH_A, other, sizeof other);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s/.job-e0009-s000000099-01234567.ckpt.tmp.somehost.999999", dir);
    ck_assert_int_eq(write_file(tmp, "partial", 7), 0);
    snprintf(tmp, sizeof tmp, "%s/job-e0009-s000000099-01234567.ckpt.bak", dir);
    ck_assert_int_eq(write_file(tmp, "junk", 4), 0);

    ck_assert_msg(ckpt_find_resume(dir, "job", HASH_A, NULL, NULL, &r, got, sizeof got, NULL, &e) == 1,
                  "%s", e.msg);
    ck_assert_str_eq(got, p30);
    ck_assert_int_eq(r.step, 30);
    ck_assert_int_eq(r.epoch, 2);
    ck_assert_uint_eq(r.n_opt, 200);
    ckpt_free(&r);

    /* Corrupt newest: one report line naming it, and the previous one. */
    flip_byte(p30, 1000);
    char rep[4096] = "";
    FILE *mf = fmemopen(rep, sizeof rep, "w");
    ck_assert_ptr_nonnull(mf);
    int rc = ckpt_find_resume(dir, "job", HASH_A, NULL, NULL, &r, got, sizeof got, mf, &e);
    ck_assert_int_eq(fclose(mf), 0);
    ck_assert_msg(rc == 1, "%s", e.msg);
    ck_assert_str_eq(got, p20);
    ck_assert_int_eq(r.step, 20);
    ckpt_free(&r);
    ck_assert_msg(strstr(rep, p30) && strstr(rep, "checksum mismatch"), "report: %s", rep);
    ck_assert_msg(strchr(rep, '\n') == rep + strlen(rep) - 1, "exactly one line: %s", rep);
    printf("ckpt: resume report was: %s", rep);

    /* Truncated too: falls back to the oldest. */
    ck_assert_int_eq(truncate(p20, 300), 0);
    ck_assert_int_eq(ckpt_find_resume(dir, "job", HASH_A, NULL, NULL, &r, got, sizeof got, NULL, &e), 1);
    ck_assert_str_eq(got, p10);
    ckpt_free(&r);

    /* All broken: an error, never a silent fresh start. */
    flip_byte(p10, 300);
    rc = ckpt_find_resume(dir, "job", HASH_A, NULL, NULL, &r, got, sizeof got, NULL, &e);
    ck_assert_int_eq(rc, DDPC_E_DATA);
    ck_assert_msg(strstr(e.msg, "3 checkpoints of job job found but none is readable"), "%s", e.msg);
    ck_assert_ptr_null(r.params);
    ck_assert_int_eq(rm_tree(dir), 0);
    free(dir);
}
END_TEST

START_TEST(resume_refuses_other_spec_unless_named)
{
    char *dir = make_temp_dir("ckpt");
    char pa[4096], pb[4096], got[4096];
    struct ddpc_ckpt r;
    struct ddpc_err e;
    /* only another configuration's checkpoint: refused, naming what changed */
    struct ddpc_ckpt c;
    make_ckpt(&c, 10, 0, 1, 20, HASH_B);
    c.ident = strdup("T world=2\nT learning_rate=0.01\nC epochs=3\n");
    ck_assert_ptr_nonnull(c.ident);
    ddpc_err_clear(&e);
    ck_assert_msg(ckpt_write(dir, "job", &c, pb, sizeof pb, &e) == 0, "%s", e.msg);
    ckpt_free(&c);

    ddpc_err_clear(&e);
    int rc = ckpt_find_resume(dir, "job", HASH_A, "T world=2\nT learning_rate=0.02\nC epochs=3\n",
                              NULL, &r, got, sizeof got, NULL, &e);
    ck_assert_int_eq(rc, DDPC_E_DATA);
    ck_assert_msg(strstr(e.msg, pb) && strstr(e.msg, "different configuration") &&
                  strstr(e.msg, "identity fedcba9876543210...") &&
                  strstr(e.msg, "this job 0123456789abcdef...") &&
                  strstr(e.msg, "learning_rate changed: 0.01 -> 0.02") &&
                  !strstr(e.msg, "epochs") &&
                  strstr(e.msg, "set checkpoint.resume: never") &&
                  strstr(e.msg, "nothing of it is removed"), "%s", e.msg);
    ck_assert_ptr_null(r.params);
    printf("ckpt: refusal was: %s\n", e.msg);

    /* with an older checkpoint of its own too: that one, and a note */
    write_one(dir, "job", 10, 0, 0, 10, HASH_A, pa, sizeof pa);
    char rep0[1024] = "";
    FILE *m0 = fmemopen(rep0, sizeof rep0, "w");
    ck_assert_ptr_nonnull(m0);
    ddpc_err_clear(&e);
    rc = ckpt_find_resume(dir, "job", HASH_A, NULL, NULL, &r, got, sizeof got, m0, &e);
    ck_assert_int_eq(fclose(m0), 0);
    ck_assert_msg(rc == 1, "%s", e.msg);
    ck_assert_str_eq(got, pa);
    ck_assert_msg(strstr(rep0, "another configuration") && strstr(rep0, "-fedcba98.ckpt"),
                  "%s", rep0);
    ckpt_free(&r);

    /* Named explicitly: used, with a note. */
    char rep[1024] = "";
    FILE *mf = fmemopen(rep, sizeof rep, "w");
    ck_assert_ptr_nonnull(mf);
    ddpc_err_clear(&e);
    rc = ckpt_find_resume(dir, "job", HASH_A, NULL, pb, &r, got, sizeof got, mf, &e);
    ck_assert_int_eq(fclose(mf), 0);
    ck_assert_msg(rc == 1, "%s", e.msg);
    ck_assert_str_eq(got, pb);
    ck_assert_str_eq(r.ident_hash, HASH_B);
    ck_assert_msg(strstr(rep, "different configuration") && strstr(rep, "named explicitly"), "%s", rep);
    ckpt_free(&r);

    /* Named explicitly but corrupt: an error, no fallback. */
    flip_byte(pb, 280);
    ddpc_err_clear(&e);
    rc = ckpt_find_resume(dir, "job", HASH_A, NULL, pb, &r, got, sizeof got, NULL, &e);
    ck_assert_int_eq(rc, DDPC_E_DATA);
    ck_assert_msg(strstr(e.msg, "checksum mismatch"), "%s", e.msg);
    ck_assert_int_eq(rm_tree(dir), 0);
    free(dir);
}
END_TEST

START_TEST(prune_keeps_newest)
{
    char *dir = make_temp_dir("ckpt");
    char p[4096];
    struct ddpc_err e;
    ddpc_err_clear(&e);
    for (int i = 1; i <= 5; i++)
        write_one(dir, "job", 5, 5, i, 100 * i, HASH_A, p, sizeof p);
    write_one(dir, "other", 5, 5, 1, 1, HASH_A, p, sizeof p);
    ck_assert_int_eq(ckpt_prune(dir, "job", HASH_A, 0, &e), 0);          /* 0: keep all */
    char ls[4096];
    list_dir(dir, ls, sizeof ls);
    ck_assert_str_eq(ls, "job-e0001-s000000100-01234567.ckpt job-e0002-s000000200-01234567.ckpt "
                         "job-e0003-s000000300-01234567.ckpt job-e0004-s000000400-01234567.ckpt "
                         "job-e0005-s000000500-01234567.ckpt other-e0001-s000000001-01234567.ckpt");
    ck_assert_msg(ckpt_prune(dir, "job", HASH_A, 2, &e) == 0, "%s", e.msg);
    list_dir(dir, ls, sizeof ls);
    ck_assert_str_eq(ls, "job-e0004-s000000400-01234567.ckpt job-e0005-s000000500-01234567.ckpt "
                         "other-e0001-s000000001-01234567.ckpt");
    ck_assert_int_eq(ckpt_prune(dir, "job", HASH_A, 1, &e), 0);
    list_dir(dir, ls, sizeof ls);
    ck_assert_str_eq(ls, "job-e0005-s000000500-01234567.ckpt other-e0001-s000000001-01234567.ckpt");
    ck_assert_int_eq(ckpt_prune(dir, "job", HASH_A, 5, &e), 0);
    list_dir(dir, ls, sizeof ls);
    ck_assert_str_eq(ls, "job-e0005-s000000500-01234567.ckpt other-e0001-s000000001-01234567.ckpt");
    ck_assert_int_eq(e.code, 0);

    /* Past the padded widths, order is numeric, not by name: s1000000000
     * sorts before s999999999 in `ls` but is newer. */
    write_one(dir, "job", 5, 5, 12345, 999999999LL, HASH_A, p, sizeof p);
    write_one(dir, "job", 5, 5, 12346, 1000000000LL, HASH_A, p, sizeof p);
    char got[4096];
    struct ddpc_ckpt r;
    ck_assert_int_eq(ckpt_find_resume(dir, "job", HASH_A, NULL, NULL, &r, got, sizeof got, NULL, &e), 1);
    ck_assert_int_eq(r.step, 1000000000LL);
    ck_assert_int_eq(r.epoch, 12346);
    ck_assert_str_eq(got, p);
    ckpt_free(&r);
    ck_assert_int_eq(ckpt_prune(dir, "job", HASH_A, 1, &e), 0);
    list_dir(dir, ls, sizeof ls);
    ck_assert_str_eq(ls, "job-e12346-s1000000000-01234567.ckpt other-e0001-s000000001-01234567.ckpt");
    ck_assert_int_eq(rm_tree(dir), 0);
    free(dir);
}
END_TEST

/* Two configurations under one job name in one checkpoint_dir (issue 12:
 * the second, started with resume: never as the refusal advised, pruned
 * the first's checkpoints and overwrote its same-step files): names carry
 * the identity, so nothing is overwritten, and pruning removes only files
 * whose tag AND header hash are this identity's. */
START_TEST(prune_and_names_keep_identities_apart)
{
    static const char *HASH_C =     /* A's tag, another identity */
        "01234567ffffffffffffffffffffffffffffffffffffffffffffffffffffffff";
    char *dir = make_temp_dir("ckpt");
    char p[4096], legacy[4200], ls[4096];
    struct ddpc_err e;
    ddpc_err_clear(&e);
    for (int i = 1; i <= 3; i++) {
        write_one(dir, "job", 5, 5, i, 100 * i, HASH_A, p, sizeof p);
        write_one(dir, "job", 5, 5, i, 100 * i, HASH_B, p, sizeof p);
    }
    /* a file from before names carried the identity, and a tag collision */
    write_one(dir, "job", 5, 5, 0, 5, HASH_A, p, sizeof p);
    snprintf(legacy, sizeof legacy, "%s/job-e0000-s000000005.ckpt", dir);
    ck_assert_int_eq(rename(p, legacy), 0);
    write_one(dir, "job", 5, 5, 0, 1, HASH_C, p, sizeof p);
    list_dir(dir, ls, sizeof ls);
    ck_assert_str_eq(ls, "job-e0000-s000000001-01234567.ckpt job-e0000-s000000005.ckpt "
                         "job-e0001-s000000100-01234567.ckpt job-e0001-s000000100-fedcba98.ckpt "
                         "job-e0002-s000000200-01234567.ckpt job-e0002-s000000200-fedcba98.ckpt "
                         "job-e0003-s000000300-01234567.ckpt job-e0003-s000000300-fedcba98.ckpt");

    ck_assert_msg(ckpt_prune(dir, "job", HASH_B, 1, &e) == 0, "%s", e.msg);
    list_dir(dir, ls, sizeof ls);
    ck_assert_str_eq(ls, "job-e0000-s000000001-01234567.ckpt job-e0000-s000000005.ckpt "
                         "job-e0001-s000000100-01234567.ckpt "
                         "job-e0002-s000000200-01234567.ckpt "
                         "job-e0003-s000000300-01234567.ckpt job-e0003-s000000300-fedcba98.ckpt");
    /* A keeps its newest written (mtime order: s300 was written before
     * C's s1, but C's file is not A's, whatever its tag) */
    ck_assert_msg(ckpt_prune(dir, "job", HASH_A, 1, &e) == 0, "%s", e.msg);
    list_dir(dir, ls, sizeof ls);
    ck_assert_str_eq(ls, "job-e0000-s000000001-01234567.ckpt job-e0000-s000000005.ckpt "
                         "job-e0003-s000000300-01234567.ckpt job-e0003-s000000300-fedcba98.ckpt");
    /* NULL identity: temp files only */
    ck_assert_int_eq(ckpt_prune(dir, "job", NULL, 1, &e), 0);
    list_dir(dir, ls, sizeof ls);
    ck_assert_str_eq(ls, "job-e0000-s000000001-01234567.ckpt job-e0000-s000000005.ckpt "
                         "job-e0003-s000000300-01234567.ckpt job-e0003-s000000300-fedcba98.ckpt");
    ck_assert_int_eq(rm_tree(dir), 0);
    free(dir);
}
END_TEST

/* ===== identity: what changes the trajectory ===== */

static void base_job(struct ddpc_job *j)
{
    memset(j, 0, sizeof *j);
    j->version = 1;
    j->name = "id";
    j->n_devices = 2;
    j->devices[1] = 1;
    j->seed = 7;
    j->epochs = 2;
    j->learning_rate = 0.001;
    j->batch_size = 16;
    j->grad_accumulation = 1;
    j->limit_train_fraction = 1.0;
    j->bucket_cap_mb = 25;
    j->checkpoint_dir = "ckpt";
    j->model.n_layers = 3;
    j->model.layers[0] = 32;
    j->model.layers[1] = 64;
    j->model.layers[2] = 4;
    j->data.train.format = DDPC_DATA_SYNTHETIC;
    j->data.train.samples = 1024;
    j->data.train.features = 32;
    j->data.train.classes = 4;
    j->data.shuffle = 1;
    j->optimizer.beta1 = 0.9;
    j->optimizer.beta2 = 0.999;
    j->optimizer.eps = 1e-8;
    j->schedule.warmup_start_factor = 0.1;
    j->schedule.gamma = 0.1;
    j->checkpoint.every_n_epochs = 1;
    j->logging.every_n_steps = 50;
    j->launch.num_nodes = 1;
    j->launch.master_port = 29500;
}

/* One edit of each kind: the identity changes exactly for the trajectory's
 * fields, and the diff names the field with both values. */
START_TEST(identity_splits_trajectory_from_the_rest)
{
    struct ddpc_job j0, j;
    base_job(&j0);
    char *t0 = malloc(16384), *t1 = malloc(16384), d[2048];
    char h0[DDPC_IDENT_HASH_LEN + 1], h1[DDPC_IDENT_HASH_LEN + 1];
    ck_assert(t0 && t1);
    ck_assert_int_gt(ident_format(&j0, 2, "cpu", t0, 16384), 0);
    ident_hash(t0, h0);
    ck_assert_int_gt(ident_format(&j0, 2, "cpu", t1, 16384), 0);
    ck_assert_str_eq(t0, t1);                     /* same job: same bytes */
    ck_assert_int_eq(ident_format(&j0, 2, "cpu", t1, 64), -1);   /* too small: said */

    for (int k = 0; k < 35; k++) {
        j = j0;
        int world = 2, traj = 1;
        const char *backend = "cpu", *want = NULL;
        switch (k) {
        /* the trajectory */
        case 0: j.learning_rate = 0.002; want = "learning_rate changed: 0.001 -> 0.002"; break;
        case 1: j.seed = 8; want = "seed changed: 7 -> 8"; break;
        case 2: world = 4; want = "world changed: 2 -> 4"; break;
        case 3: j.batch_size = 32; want = "batch_size changed: 16 -> 32"; break;
        case 4: j.grad_accumulation = 2; want = "grad_accumulation changed: 1 -> 2"; break;
        case 5: j.precision = DDPC_PRECISION_BF16; want = "precision changed: fp32 -> bf16"; break;
        case 6: j.model.layers[1] = 128; want = "model.layers changed: [32,64,4] -> [32,128,4]"; break;
        case 7: j.optimizer.type = DDPC_OPTIM_SGD; want = "optimizer.type changed: adam -> sgd"; break;
        case 8: j.schedule.warmup_steps = 10; want = "schedule.warmup_steps changed: 0 -> 10"; break;
        case 9: j.data.train.samples = 2048; want = "data.train.samples changed: 1024 -> 2048"; break;
        case 10: backend = "cuda"; want = "backend changed: cpu -> cuda"; break;
        case 11: j.lr_scaling = DDPC_LR_SCALING_LINEAR; want = "lr_scaling changed: none -> linear"; break;
        case 12: j.schedule.decay = DDPC_DECAY_COSINE; want = "schedule.decay changed: constant -> cosine"; break;
        /* epochs moves from C to T with the decay: its old value, not "(absent)" */
        case 31: j.schedule.decay = DDPC_DECAY_COSINE; j.epochs = 3; want = "epochs changed: 2 -> 3"; break;
        case 13: j.data.drop_last = 1; want = "data.drop_last changed: 0 -> 1"; break;
        /* cosine decays over the run's length: epochs is the trajectory's */
        case 27: j.model.type = DDPC_MODEL_SEQUENTIAL; j.model.n_items = 1;
                 j.model.items[0].type = DDPC_LAYER_LINEAR; j.model.items[0].out = 4;
                 want = "model.items[0].out changed: (absent) -> 4"; break;
        case 14: j0.schedule.decay = j.schedule.decay = DDPC_DECAY_COSINE; j.epochs = 3;
                 want = "epochs changed: 2 -> 3"; break;
        /* not the trajectory */
        case 15: j.epochs = 3; traj = 0; want = "epochs changed: 2 -> 3"; break;
        case 16: j.logging.every_n_steps = 10; traj = 0; want = "logging.every_n_steps changed: 50 -> 10"; break;
        case 17: j.nccl_timeout_s = 60; traj = 0; want = "nccl_timeout changed: 0 -> 60"; break;
        case 18: j.rank_sync_timeout_s = 1.5; traj = 0; want = "rank_sync_timeout changed: 0 -> 1.5"; break;
        case 19: j.checkpoint.every_n_steps = 100; traj = 0; want = "checkpoint.every_n_steps changed: 0 -> 100"; break;
        case 20: j.checkpoint.every_n_minutes = 30; traj = 0; want = "checkpoint.every_n_minutes changed: 0 -> 30"; break;
        case 21: j.checkpoint.keep_last = 2; traj = 0; want = "checkpoint.keep_last changed: 0 -> 2"; break;
        case 22: j.logging.metrics_csv = "m.csv"; traj = 0; want = "logging.metrics_csv changed: (none) -> m.csv"; break;
        case 23: j.checkpoint.export_path = "out/model.safetensors"; traj = 0; want = "checkpoint.export changed: (none) -> out/model.safetensors"; break;
        case 24: j.bucket_cap_mb = 1; traj = 0; want = "bucket_cap_mb changed: 25 -> 1"; break;
        case 25: j.data.has_test = 1; traj = 0; want = "data.has_test changed: 0 -> 1"; break;
        case 26: j.launch.max_restarts = 3; traj = 0; want = "launch.max_restarts changed: 0 -> 3"; break;
        /* fields nobody classified are the trajectory's: ident.c walks the key
         * table, so a key added later cannot be left out of the identity */
        case 28: j.sync_batchnorm = 1; want = "sync_batchnorm changed: 0 -> 1"; break;
        case 29: j.matmul_precision = DDPC_MATMUL_HIGH; want = "matmul_precision changed: highest -> high"; break;
        case 30: j.optimizer.weight_decay_on = DDPC_WD_ON_WEIGHTS;
                 want = "optimizer.weight_decay_on changed: all -> weights"; break;
        /* limit_train_batches is two fields (a count, 0 for a fraction; the
         * fraction), named as the one key the spec wrote, as written: it
         * said 'limit_train_batches changed: 0 -> 3' of a spec's 1.0, and
         * 'limit_train_fraction changed: 1 -> 0.5', a key no spec has */
        case 32: j.limit_train_batches = 3; want = "limit_train_batches changed: 1.0 -> 3"; break;
        case 33: j.limit_train_fraction = 0.5; want = "limit_train_batches changed: 1.0 -> 0.5"; break;
        case 34: j0.limit_train_batches = 5; j.limit_train_batches = 2;
                 want = "limit_train_batches changed: 5 -> 2"; break;
        }
        ck_assert_int_gt(ident_format(&j0, 2, "cpu", t0, 16384), 0);
        ident_hash(t0, h0);
        ck_assert_int_gt(ident_format(&j, world, backend, t1, 16384), 0);
        ident_hash(t1, h1);
        ck_assert_msg((strcmp(h0, h1) != 0) == traj, "edit %d (%s): identity %s", k, want,
                      traj ? "unchanged" : "changed");
        int nt = ident_diff(t0, t1, 'T', d, sizeof d);
        if (traj) {
            ck_assert_msg(nt >= 1 && strstr(d, want), "edit %d: T diff '%s', want '%s'", k, d, want);
            ck_assert_msg(!strstr(d, "(absent)") || k == 27, "edit %d: T diff '%s'", k, d);
            ck_assert_msg(!strstr(d, "limit_train_fraction"), "edit %d: T diff '%s'", k, d);
        } else {
            ck_assert_msg(nt == 0, "edit %d: T diff '%s'", k, d);
            ck_assert_msg(ident_diff(t0, t1, 'C', d, sizeof d) >= 1 && strstr(d, want),
                          "edit %d: C diff '%s', want '%s'", k, d, want);
        }
        j0.schedule.decay = DDPC_DECAY_CONSTANT;
        j0.limit_train_batches = 0;
    }
    /* a description missing from an old checkpoint: every line differs */
    ck_assert_int_gt(ident_diff("", t0, 'T', d, sizeof d), 10);
    ck_assert_msg(strstr(d, "learning_rate changed: (absent) -> 0.001"), "%s", d);
    /* a long diff is cut with "..." inside the buffer */
    char small[40];
    ck_assert_int_gt(ident_diff("", t0, 'T', small, sizeof small), 10);
    ck_assert_uint_eq(strlen(small), sizeof small - 1);
    ck_assert_str_eq(small + sizeof small - 4, "...");
    free(t0);
    free(t1);
}
END_TEST

/* ===== failures in the middle of a write ===== */

START_TEST(enospc_via_fault_hook_leaves_earlier_intact)
{
    char *dir = make_temp_dir("ckpt");
    char p1[4096];
    write_one(dir, "job", 1000, 2000, 0, 10, HASH_A, p1, sizeof p1);
    size_t need = ckpt_file_size(1000, 2000);
    /* Fail in the header, the params, the optimizer state, the trailer. */
    int64_t at[] = { 0, 100, 3000, 256 + 4000 + 10, (int64_t)need - 1 };
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
        struct ddpc_ckpt c;
        struct ddpc_err e;
        char p2[4096] = "";
        ddpc_err_clear(&e);
        make_ckpt(&c, 1000, 2000, 1, 20, HASH_A);
        ckpt_set_fault(at[i], ENOSPC);
        int rc = ckpt_write(dir, "job", &c, p2, sizeof p2, &e);
        ckpt_set_fault(-1, 0);
        ckpt_free(&c);
        ck_assert_int_lt(rc, 0);
        char want[8192];
        snprintf(want, sizeof want, "checkpoint_dir %s: no space left on device writing "
                 "%s/job-e0001-s000000020-01234567.ckpt (%zu bytes needed); earlier checkpoints are intact",
                 dir, dir, need);
        ck_assert_msg(strcmp(e.msg, want) == 0, "at %lld:\n got  %s\n want %s",
                      (long long)at[i], e.msg, want);
        char ls[4096];
        list_dir(dir, ls, sizeof ls);
        ck_assert_str_eq(ls, "job-e0000-s000000010-01234567.ckpt");   /* no temp, no new file */
        struct ddpc_ckpt r;
        ddpc_err_clear(&e);
        ck_assert_msg(ckpt_read(p1, &r, &e) == 0, "%s", e.msg);
        ck_assert_int_eq(r.step, 10);
        ckpt_free(&r);
    }
    /* Other errnos get their own text. */
    struct ddpc_ckpt c;
    struct ddpc_err e;
    ddpc_err_clear(&e);
    make_ckpt(&c, 10, 0, 1, 30, HASH_A);
    ckpt_set_fault(50, EIO);
    ck_assert_int_lt(ckpt_write(dir, "job", &c, NULL, 0, &e), 0);
    ckpt_set_fault(-1, 0);
    ck_assert_msg(strstr(e.msg, "Input/output error") &&
                  strstr(e.msg, "earlier checkpoints are intact"), "%s", e.msg);
    /* With the hook off again, the same write succeeds (the short writes
     * above went through the loop; this one is whole). */
    ddpc_err_clear(&e);
    ck_assert_msg(ckpt_write(dir, "job", &c, NULL, 0, &e) == 0, "%s", e.msg);
    ckpt_free(&c);
    ck_assert_int_eq(rm_tree(dir), 0);
    free(dir);
}
END_TEST

START_TEST(kill9_mid_write_leaves_no_final_file)
{
    char *dir = make_temp_dir("ckpt");
    char p1[4096];
    write_one(dir, "job", 1000, 0, 0, 10, HASH_A, p1, sizeof p1);
    const int64_t cut = 3 * 1024 * 1024;
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        struct ddpc_ckpt c;
        struct ddpc_err e;
        ddpc_err_clear(&e);
        make_ckpt(&c, 1 << 20, 1 << 20, 1, 20, HASH_A);     /* 8 MiB */
        ckpt_set_fault(cut, DDPC_CKPT_FAULT_STOP);
        int rc = ckpt_write(dir, "job", &c, NULL, 0, &e);
        _exit(rc == 0 ? 0 : 1);     /* only reached if not killed */
    }
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, WUNTRACED), pid);
    ck_assert_msg(WIFSTOPPED(st), "writer should have stopped itself mid-write (status %d)", st);
    /* The half file exists only under its temp name,
     * .<final>.tmp.<host>.<pid>, frozen exactly at the cut. */
    char ls[4096], tmpname[512], host[128], suffix[32];
    list_dir(dir, ls, sizeof ls);
    const char *pre = ".job-e0001-s000000020-01234567.ckpt.tmp.";
    ck_assert_msg(strncmp(ls, pre, strlen(pre)) == 0, "%s", ls);
    ck_assert_int_eq(sscanf(ls, "%511s", tmpname), 1);
    snprintf(suffix, sizeof suffix, ".%ld", (long)pid);
    size_t tl = strlen(tmpname), sl = strlen(suffix), pl = strlen(pre);
    ck_assert(tl > pl + sl && strcmp(tmpname + tl - sl, suffix) == 0);
    snprintf(host, sizeof host, "%.*s", (int)(tl - pl - sl), tmpname + pl);
    char want[4096];
    snprintf(want, sizeof want, "%s job-e0000-s000000010-01234567.ckpt", tmpname);
    ck_assert_str_eq(ls, want);
    char tmp[4800];
    snprintf(tmp, sizeof tmp, "%s/%s", dir, tmpname);
    ck_assert_int_eq(file_size(tmp), cut);
    ck_assert_int_eq(kill(pid, SIGKILL), 0);
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    list_dir(dir, ls, sizeof ls);
    ck_assert_str_eq(ls, want);     /* and no final file appeared */

    struct ddpc_ckpt r;
    struct ddpc_err e;
    char got[4096];
    ddpc_err_clear(&e);
    char rep[1024] = "";
    FILE *mf = fmemopen(rep, sizeof rep, "w");
    ck_assert_ptr_nonnull(mf);
    int rc = ckpt_find_resume(dir, "job", HASH_A, NULL, NULL, &r, got, sizeof got, mf, &e);
    ck_assert_int_eq(fclose(mf), 0);
    ck_assert_msg(rc == 1, "%s", e.msg);
    ck_assert_str_eq(got, p1);
    ck_assert_str_eq(rep, "");       /* the temp file is not even mentioned */
    ckpt_free(&r);

    /* The next prune clears the dead writer's temp file, but not one of
     * a live process (pid 1) nor one written from another host, where the
     * pid means nothing here. */
    char live[4800], remote[4800];
    snprintf(live, sizeof live, "%s/.job-e0002-s000000030-01234567.ckpt.tmp.%s.1", dir, host);
    snprintf(remote, sizeof remote, "%s/.job-e0002-s000000031-01234567.ckpt.tmp.otherhost.%ld",
             dir, (long)pid);
    ck_assert_int_eq(write_file(live, "x", 1), 0);
    ck_assert_int_eq(write_file(remote, "x", 1), 0);
    ck_assert_msg(ckpt_prune(dir, "job", HASH_A, 3, &e) == 0, "%s", e.msg);
    list_dir(dir, ls, sizeof ls);
    snprintf(want, sizeof want, ".job-e0002-s000000030-01234567.ckpt.tmp.%s.1 "
             ".job-e0002-s000000031-01234567.ckpt.tmp.otherhost.%ld job-e0000-s000000010-01234567.ckpt",
             host, (long)pid);
    ck_assert_str_eq(ls, want);
    ck_assert_int_eq(rm_tree(dir), 0);
    free(dir);
}
END_TEST

/* Temp-file cleanup removes only this host's dead writers' files, and the
 * host is known by its name made file-safe: hosts whose names differ only
 * where that replaces a character ("node_1" and "node.1" next to
 * "node-1", on a checkpoint_dir shared by the nodes) must not share a tag,
 * or one removes a live temp file of another (its pid means nothing here).
 * A UTS namespace gives the forked case the host names. */
START_TEST(temp_cleanup_tells_similar_host_names_apart)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (unshare(CLONE_NEWUTS) != 0)
            _exit(77);
        pid_t dead = fork();   /* a pid that no process has now */
        if (dead == 0)
            _exit(0);
        if (dead < 0 || waitpid(dead, NULL, 0) != dead)
            _exit(2);
        char *dir = make_temp_dir("ckpt-host");
        char tmp[4096], ls[4096];
        snprintf(tmp, sizeof tmp, "%s/.job-e0002-s000000030-01234567.ckpt.tmp.node-1.%ld", dir,
                 (long)dead);
        struct ddpc_err e;
        ddpc_err_clear(&e);
        static const char *const others[] = { "node_1", "node.1", "NODE-1" };
        for (int k = 0; k < 3; k++) {
            if (write_file(tmp, "x", 1) != 0 || sethostname(others[k], strlen(others[k])) != 0)
                _exit(3);
            if (ckpt_prune(dir, "job", HASH_A, 3, &e) != 0)
                _exit(4);
            list_dir(dir, ls, sizeof ls);
            if (!strstr(ls, ".tmp.node-1.")) {
                fprintf(stderr, "host %s removed node-1's temp file\n", others[k]);
                _exit(10 + k);
            }
        }
        /* the host that wrote it still removes it */
        if (sethostname("node-1", 6) != 0 || ckpt_prune(dir, "job", HASH_A, 3, &e) != 0)
            _exit(5);
        list_dir(dir, ls, sizeof ls);
        if (strstr(ls, ".tmp.node-1."))
            _exit(6);
        rm_tree(dir);
        _exit(0);
    }
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 77) {
        test_skip("ckpt temp_cleanup_tells_similar_host_names_apart",
                  "no UTS namespace here (needs root)");
        return;
    }
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status 0x%x (exit %d)", st,
                  WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}
END_TEST

START_TEST(enospc_on_real_tmpfs)
{
    char *dir = make_temp_dir("ckpt-tmpfs");
    ck_assert_ptr_nonnull(dir);
    if (geteuid() != 0 || mount("tmpfs", dir, "tmpfs", 0, "size=64k") != 0) {
        test_skip("ckpt enospc_on_real_tmpfs", "cannot mount a tmpfs here (%s)",
               geteuid() != 0 ? "not root" : strerror(errno));
        ck_assert_int_eq(rm_tree(dir), 0);
        free(dir);
        return;
    }
    struct ddpc_err e;
    ddpc_err_clear(&e);
    size_t np = 9000;       /* ~36 KB: one fits in 64 KiB, two do not */
    size_t bytes = ckpt_file_size(np, 0);
    ck_assert_int_eq(ckpt_preflight(dir, bytes, &e), DDPC_E_SYS);
    ck_assert_msg(strstr(e.msg, " free, checkpoints need "), "%s", e.msg);
    printf("ckpt: tmpfs preflight said: %s\n", e.msg);

    char p1[4096];
    write_one(dir, "job", np, 0, 0, 1, HASH_A, p1, sizeof p1);
    struct ddpc_ckpt c;
    make_ckpt(&c, np, 0, 0, 2, HASH_A);
    ddpc_err_clear(&e);
    int rc = ckpt_write(dir, "job", &c, NULL, 0, &e);
    ckpt_free(&c);
    ck_assert_int_eq(rc, DDPC_E_SYS);
    char want[8192];
    snprintf(want, sizeof want, "checkpoint_dir %s: no space left on device writing "
             "%s/job-e0000-s000000002-01234567.ckpt (%zu bytes needed); earlier checkpoints are intact",
             dir, dir, bytes);
    ck_assert_str_eq(e.msg, want);
    char ls[4096];
    list_dir(dir, ls, sizeof ls);
    ck_assert_str_eq(ls, "job-e0000-s000000001-01234567.ckpt");
    struct ddpc_ckpt r;
    ddpc_err_clear(&e);
    ck_assert_msg(ckpt_read(p1, &r, &e) == 0, "%s", e.msg);
    ckpt_free(&r);
    ck_assert_int_eq(umount(dir), 0);
    ck_assert_int_eq(rm_tree(dir), 0);
    free(dir);
}
END_TEST

/* ===== pre-flight ===== */

START_TEST(preflight_creates_and_checks)
{
    char *dir = make_temp_dir("ckpt");
    struct ddpc_err e;
    ddpc_err_clear(&e);
    char nested[4200];
    snprintf(nested, sizeof nested, "%s/a/b/c", dir);
    ck_assert_msg(ckpt_preflight(nested, 1024, &e) == 0, "%s", e.msg);
    struct stat st;
    ck_assert_int_eq(stat(nested, &st), 0);
    ck_assert(S_ISDIR(st.st_mode));
    ck_assert_msg(ckpt_preflight(nested, 1024, &e) == 0, "again: %s", e.msg);  /* idempotent */
    char ls[4096];
    list_dir(nested, ls, sizeof ls);
    ck_assert_str_eq(ls, "");       /* the probe is gone */

    /* The probe's name is predictable (pid): a link planted under it in
     * a shared checkpoint_dir must not make the preflight truncate (or
     * create) the file it points to. */
    char victim[4200], probe[4300];
    snprintf(victim, sizeof victim, "%s/victim", dir);
    ck_assert_int_eq(write_file(victim, "precious", 8), 0);
    snprintf(probe, sizeof probe, "%s/.ddpc-probe.%ld", nested, (long)getpid());
    ck_assert_int_eq(symlink(victim, probe), 0);
    ddpc_err_clear(&e);
    ck_assert_msg(ckpt_preflight(nested, 1024, &e) == 0, "with a planted link: %s", e.msg);
    ck_assert_int_eq(file_size(victim), 8);
    list_dir(nested, ls, sizeof ls);
    ck_assert_str_eq(ls, "");
    snprintf(victim, sizeof victim, "%s/created", dir);
    ck_assert_int_eq(symlink(victim, probe), 0);
    ck_assert_msg(ckpt_preflight(nested, 1024, &e) == 0, "with a dangling link: %s", e.msg);
    ck_assert_int_eq(access(victim, F_OK), -1);
    list_dir(nested, ls, sizeof ls);
    ck_assert_str_eq(ls, "");

    /* Under a regular file: fails even for root, where chmod would not. */
    char file[4200], under[4300];
    snprintf(file, sizeof file, "%s/plainfile", dir);
    ck_assert_int_eq(write_file(file, "x", 1), 0);
    snprintf(under, sizeof under, "%s/sub", file);
    ck_assert_int_eq(ckpt_preflight(under, 1024, &e), DDPC_E_SYS);
    ck_assert_msg(strstr(e.msg, "cannot create directory") && strstr(e.msg, "Not a directory"),
                  "%s", e.msg);
    ddpc_err_clear(&e);
    ck_assert_int_eq(ckpt_preflight(file, 1024, &e), DDPC_E_SYS);
    ck_assert_msg(strstr(e.msg, "not a directory"), "%s", e.msg);

    /* An existing directory nobody may create files in. */
    ddpc_err_clear(&e);
    ck_assert_int_lt(ckpt_preflight("/proc/self", 1024, &e), 0);
    ck_assert_msg(strstr(e.msg, "not writable"), "%s", e.msg);
    printf("ckpt: preflight on /proc/self said: %s\n", e.msg);

    /* More space than any disk has. */
    ddpc_err_clear(&e);
    ck_assert_int_eq(ckpt_preflight(nested, SIZE_MAX / 2, &e), DDPC_E_SYS);
    ck_assert_msg(strstr(e.msg, " free, checkpoints need "), "%s", e.msg);
    ck_assert_int_eq(rm_tree(dir), 0);
    free(dir);
}
END_TEST

/* ===== safetensors ===== */

static void mlp_job(struct ddpc_job *job, const int *sizes, int n)
{
    memset(job, 0, sizeof *job);
    job->name = "fmnist";
    job->model.type = n == 2 ? DDPC_MODEL_LINEAR : DDPC_MODEL_MLP;
    job->model.n_layers = n;
    for (int i = 0; i < n; i++)
        job->model.layers[i] = sizes[i];
    job->model.activation = DDPC_ACT_RELU;
}

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
    long sz = ftell(f);
    ck_assert_int_ge(sz, 0);
    rewind(f);
    unsigned char *b = malloc((size_t)sz + 1);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(fread(b, 1, (size_t)sz, f), (size_t)sz);
    ck_assert_int_eq(fclose(f), 0);
    b[sz] = 0;
    *n = (size_t)sz;
    return b;
}

START_TEST(safetensors_layout_and_data)
{
    char *dir = make_temp_dir("ckpt");
    int sizes[] = { 784, 256, 10 };
    struct ddpc_job job;
    mlp_job(&job, sizes, 3);
    size_t np = 256 * 784 + 256 + 10 * 256 + 10;
    float *params = malloc(np * 4);
    ck_assert_ptr_nonnull(params);
    for (size_t i = 0; i < np; i++)     /* finite values, so torch can compare with == */
        params[i] = (float)((int64_t)(mix(i) % 20001) - 10000) / 4096.0f;
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    struct ddpc_err e;
    ddpc_err_clear(&e);
    ck_assert_msg(ckpt_export_safetensors(path, &job, params, np, NULL, NULL, 0, &e) == 0, "%s",
                  e.msg);

    size_t n;
    unsigned char *b = slurp(path, &n);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = (hl << 8) | b[i];
    ck_assert_uint_eq(hl % 8, 0);
    ck_assert_uint_eq(n, 8 + hl + 4 * np);
    char *hdr = strndup((char *)b + 8, hl);
    ck_assert_ptr_nonnull(hdr);
    ck_assert_int_eq(hdr[0], '{');
    const char *want[] = {
        "\"layers.0.weight\":{\"dtype\":\"F32\",\"shape\":[256,784],\"data_offsets\":[0,802816]}",
        "\"layers.0.bias\":{\"dtype\":\"F32\",\"shape\":[256],\"data_offsets\":[802816,803840]}",
        "\"layers.1.weight\":{\"dtype\":\"F32\",\"shape\":[10,256],\"data_offsets\":[803840,814080]}",
        "\"layers.1.bias\":{\"dtype\":\"F32\",\"shape\":[10],\"data_offsets\":[814080,814120]}",
        "\"__metadata__\":{\"format\":\"pt\"",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        ck_assert_msg(strstr(hdr, want[i]), "missing %s in %s", want[i], hdr);
    /* Closing brace, then only space padding. */
    char *close = strrchr(hdr, '}');
    ck_assert_ptr_nonnull(close);
    for (char *q = close + 1; *q; q++)
        ck_assert_int_eq(*q, ' ');
    ck_assert_uint_eq(strlen(hdr), hl);
    ck_assert(memcmp(b + 8 + hl, params, 4 * np) == 0);
    printf("ckpt: safetensors header: %s\n", hdr);
    free(hdr);
    free(b);

    /* Python: the header as JSON always (stdlib), and safetensors + torch
     * loading into nn.Linear layers when those packages are installed. */
    char expect[4200], script[4200], layers[64];
    snprintf(expect, sizeof expect, "%s/expected.f32", dir);
    ck_assert_int_eq(write_file(expect, params, 4 * np), 0);
    snprintf(script, sizeof script, "%s/tests/safetensors_load.py", test_top());
    snprintf(layers, sizeof layers, "784,256,10");
    const char *py = getenv("DDPC_PYTHON");
    if (!py || !*py)
        py = access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
    char *argv[] = { (char *)py, script, path, expect, layers, NULL };
    struct run_result rr;
    if (run_capture(argv, NULL, NULL, 120, &rr) != 0) {
        test_skip("safetensors load", "cannot run %s", py);
    } else {
        if (rr.exited && rr.code == 127)
            test_skip("safetensors load", "%s not found", py);
        else if (rr.exited && rr.code == 77)
            test_skip("safetensors load", "%s cannot import torch (apt-get install "
                      "python3-torch)", py);
        else
            ck_assert_msg(rr.exited && rr.code == 0, "%s failed (%d):\n%s%s",
                          script, rr.code, rr.out, rr.err);
        fputs(rr.out, stdout);
        run_result_free(&rr);
    }

    /* Wrong parameter count: refused, nothing written. */
    ddpc_err_clear(&e);
    char path2[4200];
    snprintf(path2, sizeof path2, "%s/bad.safetensors", dir);
    ck_assert_int_eq(ckpt_export_safetensors(path2, &job, params, np - 1, NULL, NULL, 0, &e),
                     DDPC_E_INVALID);
    ck_assert_int_eq(file_size(path2), -1);

    /* Out of space during export: error, previous export intact. */
    ddpc_err_clear(&e);
    ckpt_set_fault(500, ENOSPC);
    ck_assert_int_lt(ckpt_export_safetensors(path, &job, params, np, NULL, NULL, 0, &e), 0);
    ckpt_set_fault(-1, 0);
    ck_assert_msg(strstr(e.msg, "no space left on device") && strstr(e.msg, path), "%s", e.msg);
    ck_assert_int_eq(file_size(path), (long long)(8 + hl + 4 * np));
    char ls[4096];
    list_dir(dir, ls, sizeof ls);
    ck_assert_str_eq(ls, "expected.f32 model.safetensors");
    free(params);
    ck_assert_int_eq(rm_tree(dir), 0);
    free(dir);
}
END_TEST

/* A safetensors file of header hdr and data bytes at path. */
static void st_raw(const char *path, const char *hdr, const void *data, size_t n)
{
    size_t hl = strlen(hdr);
    unsigned char *b = malloc(8 + hl + n);
    ck_assert_ptr_nonnull(b);
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(b + 8, hdr, hl);
    memcpy(b + 8 + hl, data, n);
    ck_assert_int_eq(write_file(path, b, 8 + hl + n), 0);
    free(b);
}

/* model.init_from reads the header's top-level entries: a tensor's name
 * in __metadata__ (or in any value) is not that tensor, a "data_offsets"
 * there does not count as one, and a name given twice is refused. It
 * searched the whole header for the quoted name, so a valid file whose
 * metadata mentioned "layers.0.weight" first was refused with 'has no
 * tensor layers.0.weight', and of a duplicated name the first was read. */
START_TEST(init_from_reads_top_level_names_only)
{
    char *dir = make_temp_dir("ckpt");
    int sizes[] = { 3, 2 };
    struct ddpc_job job;
    mlp_job(&job, sizes, 2);
    static struct ddpc_net net;
    char why[256];
    int bad;
    ck_assert_int_eq(layers_build(&job, NULL, &net, &bad, why, sizeof why), 0);
    ck_assert_int_eq(net.n_tensors, 2);
    float data[16] = { 1, 2, 3, 4, 5, 6, -1, -2, 9, 9, 9, 9, 9, 9, 9, 9 }, params[8];
    char path[4200];
    snprintf(path, sizeof path, "%s/m.safetensors", dir);
    struct ddpc_err e = { 0 };
    /* the metadata first, naming a tensor and holding "data_offsets" */
    st_raw(path, "{\"__metadata__\": {\"source\": \"layers.0.weight\", \"data_offsets\": \"x\", "
           "\"n\": \"{[\\\"}\"},\n \"layers.0.bias\": {\"dtype\": \"F32\", \"shape\": [2], "
           "\"data_offsets\": [24, 32]}, \"layers.0.weight\": {\"dtype\": \"F32\", "
           "\"shape\": [2, 3], \"data_offsets\": [0, 24]}}", data, 32);
    memset(params, 0, sizeof params);
    ck_assert_msg(ckpt_read_net(path, &net, params, NULL, &e) == 0, "%s", e.msg);
    ck_assert_int_eq(memcmp(params, data, 8 * sizeof(float)), 0);
    /* a name twice (the second with other values) */
    st_raw(path, "{\"layers.0.weight\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
           "\"layers.0.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[24,32]},"
           "\"layers.0.weight\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[32,56]}}",
           data, 64);
    memset(&e, 0, sizeof e);
    ck_assert_int_lt(ckpt_read_net(path, &net, params, NULL, &e), 0);
    ck_assert_msg(strstr(e.msg, "holds 3 tensors") || strstr(e.msg, "2 times"), "%s", e.msg);
    /* a tensor's name only as a value: not there */
    st_raw(path, "{\"layers.0.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[24,32]},"
           "\"x\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[0,24],\"a\":\"layers.0.weight\"}}",
           data, 32);
    memset(&e, 0, sizeof e);
    ck_assert_int_lt(ckpt_read_net(path, &net, params, NULL, &e), 0);
    ck_assert_msg(strstr(e.msg, "has no tensor layers.0.weight"), "%s", e.msg);
    /* not JSON */
    st_raw(path, "{\"layers.0.bias\" {}}", data, 32);
    memset(&e, 0, sizeof e);
    ck_assert_int_lt(ckpt_read_net(path, &net, params, NULL, &e), 0);
    ck_assert_msg(strstr(e.msg, "not valid JSON"), "%s", e.msg);
    rm_tree(dir);
    free(dir);
}
END_TEST

START_TEST(safetensors_linear_model)
{
    char *dir = make_temp_dir("ckpt");
    int sizes[] = { 3, 2 };
    struct ddpc_job job;
    mlp_job(&job, sizes, 2);
    float params[8] = { 1, 2, 3, 4, 5, 6, -1, -2 };
    char path[4200];
    snprintf(path, sizeof path, "%s/lin.safetensors", dir);
    struct ddpc_err e;
    ddpc_err_clear(&e);
    ck_assert_msg(ckpt_export_safetensors(path, &job, params, 8, NULL, NULL, 0, &e) == 0, "%s",
                  e.msg);
    size_t n;
    unsigned char *b = slurp(path, &n);
    ck_assert(strstr((char *)b + 8, "\"layers.0.weight\":{\"dtype\":\"F32\",\"shape\":[2,3],"
                                    "\"data_offsets\":[0,24]}"));
    ck_assert(strstr((char *)b + 8, "\"layers.0.bias\":{\"dtype\":\"F32\",\"shape\":[2],"
                                    "\"data_offsets\":[24,32]}"));
    ck_assert(strstr((char *)b + 8, "\"ddpc_model\":\"linear\""));
    ck_assert(memcmp(b + n - 32, params, 32) == 0);
    free(b);
    ck_assert_int_eq(rm_tree(dir), 0);
    free(dir);
}
END_TEST

Suite *ckpt_suite(void)
{
    Suite *s = suite_create("ckpt");
    TCase *t = tcase_create("format");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, crc32c_chains_and_misaligns);
    tcase_add_test(t, round_trip_bit_exact);
    tcase_add_test(t, header_is_little_endian_at_documented_offsets);
    tcase_add_test(t, every_flipped_byte_is_detected);
    tcase_add_test(t, truncation_and_trailing_data_are_detected);
    tcase_add_test(t, crafted_counters_are_refused);
    tcase_add_test(t, write_rejects_bad_input);
    suite_add_tcase(s, t);

    t = tcase_create("resume");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, resume_picks_newest_valid);
    tcase_add_test(t, resume_refuses_other_spec_unless_named);
    tcase_add_test(t, prune_keeps_newest);
    tcase_add_test(t, prune_and_names_keep_identities_apart);
    tcase_add_test(t, identity_splits_trajectory_from_the_rest);
    suite_add_tcase(s, t);

    t = tcase_create("faults");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, enospc_via_fault_hook_leaves_earlier_intact);
    tcase_add_test(t, kill9_mid_write_leaves_no_final_file);
    tcase_add_test(t, enospc_on_real_tmpfs);
    tcase_add_test(t, temp_cleanup_tells_similar_host_names_apart);
    tcase_add_test(t, preflight_creates_and_checks);
    suite_add_tcase(s, t);

    t = tcase_create("safetensors");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, safetensors_layout_and_data);
    tcase_add_test(t, safetensors_linear_model);
    tcase_add_test(t, init_from_reads_top_level_names_only);
    suite_add_tcase(s, t);
    return s;
}
