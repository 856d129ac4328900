/* test_data.c - data.c: every format round-trips, every bad file is named.
 *
 * Files are written by the tests into a fresh temp dir: IDX gzipped and
 * plain, NPY float32/uint8 (+ int64 labels, float regression targets), CSV
 * with a header; the synthetic generator is deterministic per seed. Errors:
 * missing file, wrong IDX magic, truncated file, count mismatch — each
 * message names the offending file. Token streams (text, llm.c shards
 * written by a small writer here): windows byte for byte as docs/DESIGN.md
 * (Models: token data) says, ranges, shards in name order, and every bad shard by name. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <zlib.h>
#include "suites.h"
#include "data.h"
#include "sampler.h"
#include "same_file.h"
#include "testutil.h"

static char dir[256];
static char path_buf[8][320];

static const char *tmp_path(int slot, const char *name)
{
    snprintf(path_buf[slot], sizeof path_buf[slot], "%s/%s", dir, name);
    return path_buf[slot];
}

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/ddpc-test-data-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void)
{
    char cmd[300];
    /* only our own mkdtemp directory */
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

static void write_bytes(const char *path, const void *buf, size_t n, int gz)
{
    if (gz) {
        gzFile f = gzopen(path, "wb");
        ck_assert_ptr_nonnull(f);
        ck_assert_int_eq(gzwrite(f, buf, (unsigned)n), (int)n);
        ck_assert_int_eq(gzclose(f), Z_OK);
    } else {
        FILE *f = fopen(path, "wb");
        ck_assert_ptr_nonnull(f);
        ck_assert_uint_eq(fwrite(buf, 1, n, f), n);
        ck_assert_int_eq(fclose(f), 0);
    }
}

/* images: 3 samples of 2x2 u8; labels 3 u8 */
static size_t idx_images(unsigned char *b, int n)
{
    unsigned char h[16] = { 0, 0, 0x08, 3, 0, 0, 0, (unsigned char)n, 0, 0, 0, 2, 0, 0, 0, 2 };
    memcpy(b, h, 16);
    for (int i = 0; i < n * 4; i++)
        b[16 + i] = (unsigned char)(i * 20);
    return 16 + (size_t)n * 4;
}

static size_t idx_labels(unsigned char *b, int n)
{
    unsigned char h[8] = { 0, 0, 0x08, 1, 0, 0, 0, (unsigned char)n };
    memcpy(b, h, 8);
    for (int i = 0; i < n; i++)
        b[8 + i] = (unsigned char)(i % 3 == 2 ? 9 : i);
    return 8 + (size_t)n;
}

static void check_idx_dataset(const struct ddpc_dataset *ds)
{
    ck_assert_int_eq(ds->n, 3);
    ck_assert_int_eq(ds->features, 4);
    ck_assert_int_eq(ds->classes, 10);
    ck_assert_int_eq(ds->dtype, DDPC_DTYPE_U8);
    ck_assert_int_eq(ds->labels[2], 9);
    int64_t idx[2] = { 2, 0 };
    float x[8];
    int32_t lab[2];
    data_gather(ds, idx, 2, x, lab, NULL);
    ck_assert_float_eq_tol(x[0], 160.0f / 255.0f, 1e-7f);   /* sample 2, pixel 0 = 8*20 */
    ck_assert_float_eq_tol(x[3], 220.0f / 255.0f, 1e-7f);
    ck_assert_float_eq(x[4], 0.0f);
    ck_assert_int_eq(lab[0], 9);
    ck_assert_int_eq(lab[1], 0);
}

START_TEST(idx_gz_and_plain_round_trip)
{
    unsigned char img[64], lab[16];
    size_t ni = idx_images(img, 3), nl = idx_labels(lab, 3);
    for (int gz = 0; gz <= 1; gz++) {
        struct ddpc_data_source src = { .format = DDPC_DATA_IDX,
            .inputs = tmp_path(0, gz ? "x.gz" : "x"), .labels = tmp_path(1, gz ? "y.gz" : "y") };
        write_bytes(src.inputs, img, ni, gz);
        write_bytes(src.labels, lab, nl, gz);
        struct ddpc_dataset ds;
        struct ddpc_err e = {0};
        ck_assert_msg(data_load(&src, &ds, &e) == 0, "%s", e.msg);
        check_idx_dataset(&ds);
        ck_assert(strstr(ds.source, src.inputs) != NULL);
        data_free(&ds);
        data_free(&ds);
    }
}
END_TEST

/* float32 inputs (type 0x0d, big-endian) and int32 labels (0x0c) */
START_TEST(idx_float_and_int_types)
{
    unsigned char img[16 + 2 * 3 * 4], lab[8 + 2 * 4];
    const unsigned char hi[12] = { 0, 0, 0x0d, 2, 0, 0, 0, 2, 0, 0, 0, 3 };
    memcpy(img, hi, 12);
    const float vals[6] = { 0.5f, -2.0f, 3.25f, 1e-3f, 7.0f, -0.125f };
    for (int i = 0; i < 6; i++) {
        uint32_t u;
        memcpy(&u, &vals[i], 4);
        for (int b = 0; b < 4; b++)
            img[12 + 4 * i + b] = (unsigned char)(u >> (24 - 8 * b));
    }
    const unsigned char hl[8] = { 0, 0, 0x0c, 1, 0, 0, 0, 2 };
    memcpy(lab, hl, 8);
    const unsigned char l32[8] = { 0, 0, 0, 4, 0, 0, 1, 0 };   /* 4, 256 */
    memcpy(lab + 8, l32, 8);
    struct ddpc_data_source src = { .format = DDPC_DATA_IDX, .inputs = tmp_path(0, "xf"),
                                    .labels = tmp_path(1, "yi") };
    write_bytes(src.inputs, img, 12 + 24, 0);
    write_bytes(src.labels, lab, 16, 1);
    struct ddpc_dataset ds;
    struct ddpc_err e = {0};
    ck_assert_msg(data_load(&src, &ds, &e) == 0, "%s", e.msg);
    ck_assert_int_eq(ds.dtype, DDPC_DTYPE_F32);
    ck_assert_int_eq(ds.features, 3);
    ck_assert_int_eq(ds.classes, 257);
    int64_t idx[1] = { 1 };
    float x[3];
    int32_t l[1];
    data_gather(&ds, idx, 1, x, l, NULL);
    ck_assert_float_eq(x[0], 1e-3f);
    ck_assert_float_eq(x[2], -0.125f);
    ck_assert_int_eq(l[0], 256);
    data_free(&ds);
}
END_TEST

static void expect_error(const struct ddpc_data_source *src, const char *file, const char *what)
{
    struct ddpc_dataset ds;
    struct ddpc_err e = {0};
    ck_assert_int_eq(data_load(src, &ds, &e), DDPC_E_DATA);
    ck_assert_msg(strstr(e.msg, file) != NULL, "message does not name %s: %s", file, e.msg);
    ck_assert_msg(strstr(e.msg, what) != NULL, "message lacks \"%s\": %s", what, e.msg);
    ck_assert_ptr_null(ds.x);
    data_free(&ds);   /* safe after a failed load */
}

START_TEST(idx_errors_name_the_file)
{
    unsigned char img[64], lab[16];
    size_t ni = idx_images(img, 3), nl = idx_labels(lab, 3);
    struct ddpc_data_source src = { .format = DDPC_DATA_IDX, .inputs = tmp_path(0, "x.gz"),
                                    .labels = tmp_path(1, "y.gz") };
    write_bytes(src.labels, lab, nl, 1);
    /* missing */
    expect_error(&src, src.inputs, "No such file");
    /* wrong magic */
    unsigned char bad[64];
    memcpy(bad, img, ni);
    bad[0] = 0x1f;
    write_bytes(src.inputs, bad, ni, 1);
    expect_error(&src, src.inputs, "not an IDX file");
    /* truncated: header says 3 samples, data for 2.5 */
    write_bytes(src.inputs, img, ni - 2, 1);
    expect_error(&src, src.inputs, "truncated");
    write_bytes(src.inputs, img, 10, 0);   /* inside the dims */
    expect_error(&src, src.inputs, "truncated");
    /* 3 images, 2 labels */
    write_bytes(src.inputs, img, ni, 1);
    nl = idx_labels(lab, 2);
    write_bytes(src.labels, lab, nl, 1);
    expect_error(&src, src.labels, "must match");
    /* corrupt gzip stream */
    unsigned char gzbad[40] = { 0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 0xff, 0xff, 0xff, 0xff };
    write_bytes(src.inputs, gzbad, sizeof gzbad, 0);
    struct ddpc_dataset ds;
    struct ddpc_err e = {0};
    ck_assert_int_eq(data_load(&src, &ds, &e), DDPC_E_DATA);
    ck_assert(strstr(e.msg, src.inputs) != NULL);
}
END_TEST

/* An IDX file with more data than its header announces (two files joined
 * with cat) is refused, plain, gzipped (libdeflate's one member) or as two
 * gzip members (zlib): the loader read the first header's count and
 * dropped the rest without a word. */
START_TEST(idx_extra_bytes_are_refused)
{
    unsigned char img[128] = {0}, lab[16] = {0};
    size_t ni = idx_images(img, 3), nl = idx_labels(lab, 3);
    memcpy(img + ni, img, ni);   /* two 3-image files, end to end */
    struct ddpc_data_source src = { .format = DDPC_DATA_IDX, .inputs = tmp_path(0, "x"),
                                    .labels = tmp_path(1, "y") };
    write_bytes(src.labels, lab, nl, 0);
    for (int gz = 0; gz <= 1; gz++) {
        write_bytes(src.inputs, img, 2 * ni, gz);
        expect_error(&src, src.inputs, "extra bytes");
    }
    /* one byte more is enough */
    write_bytes(src.inputs, img, ni + 1, 0);
    expect_error(&src, src.inputs, "3 x 2 x 2 elements");
    /* a second gzip member */
    write_bytes(src.inputs, img, ni, 1);
    gzFile f = gzopen(src.inputs, "ab");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(gzwrite(f, img, (unsigned)ni), (int)ni);
    ck_assert_int_eq(gzclose(f), Z_OK);
    expect_error(&src, src.inputs, "extra bytes");
    /* exactly the announced data still loads, and so do labels */
    write_bytes(src.inputs, img, ni, 1);
    struct ddpc_dataset ds;
    struct ddpc_err e = {0};
    ck_assert_msg(data_load(&src, &ds, &e) == 0, "%s", e.msg);
    check_idx_dataset(&ds);
    data_free(&ds);
    write_bytes(src.labels, lab, nl + 1, 0);
    expect_error(&src, src.labels, "extra bytes");
}
END_TEST

static size_t npy_header(unsigned char *b, const char *descr, const char *shape)
{
    char dict[128];
    int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                     descr, shape);
    size_t total = 10 + (size_t)n + 1;
    size_t padded = (total + 63) / 64 * 64;
    memcpy(b, "\x93NUMPY\x01\x00", 8);
    size_t hl = padded - 10;
    b[8] = (unsigned char)(hl & 0xff);
    b[9] = (unsigned char)(hl >> 8);
    memset(b + 10, ' ', hl);
    memcpy(b + 10, dict, (size_t)n);
    b[padded - 1] = '\n';
    return padded;
}

START_TEST(npy_f32_u8_and_targets)
{
    unsigned char buf[512];
    struct ddpc_err e = {0};
    struct ddpc_dataset ds;
    /* float32 inputs [2, 3], int64 labels [2] */
    size_t h = npy_header(buf, "<f4", "(2, 3)");
    float xf[6] = { 0.5f, -1, 2, 3, 4.25f, -5 };
    memcpy(buf + h, xf, sizeof xf);
    write_bytes(tmp_path(0, "x.npy"), buf, h + sizeof xf, 0);
    h = npy_header(buf, "<i8", "(2,)");
    int64_t yl[2] = { 1, 4 };
    memcpy(buf + h, yl, sizeof yl);
    write_bytes(tmp_path(1, "y.npy"), buf, h + sizeof yl, 0);
    struct ddpc_data_source src = { .format = DDPC_DATA_NPY, .inputs = path_buf[0],
                                    .labels = path_buf[1] };
    ck_assert_msg(data_load(&src, &ds, &e) == 0, "%s", e.msg);
    ck_assert_int_eq(ds.n, 2);
    ck_assert_int_eq(ds.features, 3);
    ck_assert_int_eq(ds.dtype, DDPC_DTYPE_F32);
    ck_assert_int_eq(ds.classes, 5);
    int64_t idx[1] = { 1 };
    float x[8];
    int32_t lab[1];
    data_gather(&ds, idx, 1, x, lab, NULL);
    ck_assert_float_eq(x[1], 4.25f);
    ck_assert_int_eq(lab[0], 4);
    data_free(&ds);

    /* uint8 inputs [2, 2, 2] scaled by 1/255; float32 targets [2, 2]: regression */
    h = npy_header(buf, "|u1", "(2, 2, 2)");
    for (int i = 0; i < 8; i++)
        buf[h + i] = (unsigned char)(i * 30);
    write_bytes(tmp_path(0, "x.npy"), buf, h + 8, 0);
    h = npy_header(buf, "<f4", "(2, 2)");
    float yt[4] = { 0.1f, 0.2f, 0.3f, 0.4f };
    memcpy(buf + h, yt, sizeof yt);
    write_bytes(tmp_path(1, "y.npy"), buf, h + sizeof yt, 0);
    ck_assert_msg(data_load(&src, &ds, &e) == 0, "%s", e.msg);
    ck_assert_int_eq(ds.features, 4);
    ck_assert_int_eq(ds.dtype, DDPC_DTYPE_U8);
    ck_assert_int_eq(ds.classes, 0);
    ck_assert_int_eq(ds.targets, 2);
    float y[2];
    data_gather(&ds, idx, 1, x, NULL, y);
    ck_assert_float_eq_tol(x[0], 120.0f / 255.0f, 1e-7f);
    ck_assert_float_eq(y[1], 0.4f);
    data_free(&ds);

    /* not npy; truncated */
    write_bytes(tmp_path(0, "x.npy"), "hello world", 11, 0);
    expect_error(&src, path_buf[0], "not a .npy");
    h = npy_header(buf, "<f4", "(2, 3)");
    write_bytes(tmp_path(0, "x.npy"), buf, h + 8, 0);
    expect_error(&src, path_buf[0], "truncated");
}
END_TEST

/* numpy's bool inputs ('|b1') are 0 and 1, as torch.from_numpy(a).float()
 * makes them: they used to take uint8's pixel path and train as 0 and
 * 1/255 without a word. bool labels stay class indices 0 and 1. */
START_TEST(npy_bool_inputs_are_zero_and_one)
{
    unsigned char buf[512];
    struct ddpc_err e = {0};
    struct ddpc_dataset ds;
    size_t h = npy_header(buf, "|b1", "(2, 3)");
    const unsigned char xb[6] = { 1, 0, 1, 0, 0, 1 };
    memcpy(buf + h, xb, sizeof xb);
    write_bytes(tmp_path(0, "x.npy"), buf, h + sizeof xb, 0);
    h = npy_header(buf, "|b1", "(2,)");
    const unsigned char yb[2] = { 0, 1 };
    memcpy(buf + h, yb, sizeof yb);
    write_bytes(tmp_path(1, "y.npy"), buf, h + sizeof yb, 0);
    struct ddpc_data_source src = { .format = DDPC_DATA_NPY, .inputs = path_buf[0],
                                    .labels = path_buf[1] };
    ck_assert_msg(data_load(&src, &ds, &e) == 0, "%s", e.msg);
    ck_assert_int_eq(ds.n, 2);
    ck_assert_int_eq(ds.features, 3);
    ck_assert_int_eq(ds.classes, 2);
    int64_t idx[2] = { 0, 1 };
    float x[6];
    int32_t lab[2];
    data_gather(&ds, idx, 2, x, lab, NULL);
    for (int i = 0; i < 6; i++)
        ck_assert_msg(x[i] == (float)xb[i], "element %d is %g, the file holds %d", i,
                      (double)x[i], xb[i]);
    ck_assert_int_eq(lab[0], 0);
    ck_assert_int_eq(lab[1], 1);
    data_free(&ds);
}
END_TEST

/* float16 (numpy's '<f2', either byte order) reads exactly: normal,
 * subnormal, negative zero; an infinity is refused like float32's; dtypes
 * ddpc does not read (complex, strings) are named. check reads the same
 * rule (spec/npy_dtype.h): it used to pass '<f2' that the job refused. */
START_TEST(npy_float16_and_unsupported_dtypes)
{
    unsigned char buf[512];
    struct ddpc_err e = {0};
    struct ddpc_dataset ds;
    /* 1.0, -2.5, 65504 (max), 2^-24 (smallest subnormal), -0.0, 0.333 (0x3555) */
    const uint16_t hx[6] = { 0x3c00, 0xc100, 0x7bff, 0x0001, 0x8000, 0x3555 };
    const float want[6] = { 1.0f, -2.5f, 65504.0f, 5.9604644775390625e-08f, -0.0f,
                            0.333251953125f };
    for (int big = 0; big < 2; big++) {
        size_t h = npy_header(buf, big ? ">f2" : "<f2", "(2, 3)");
        for (int i = 0; i < 6; i++) {
            buf[h + 2 * i + (big ? 1 : 0)] = (unsigned char)(hx[i] & 0xff);
            buf[h + 2 * i + (big ? 0 : 1)] = (unsigned char)(hx[i] >> 8);
        }
        write_bytes(tmp_path(0, "x.npy"), buf, h + sizeof hx, 0);
        /* float16 regression targets [2, 1] */
        h = npy_header(buf, "<f2", "(2, 1)");
        const uint16_t ht[2] = { 0x3800, 0xb400 };   /* 0.5, -0.25 */
        memcpy(buf + h, ht, sizeof ht);
        write_bytes(tmp_path(1, "y.npy"), buf, h + sizeof ht, 0);
        struct ddpc_data_source src = { .format = DDPC_DATA_NPY, .inputs = path_buf[0],
                                        .labels = path_buf[1] };
        ck_assert_msg(data_load(&src, &ds, &e) == 0, "%s", e.msg);
        ck_assert_int_eq(ds.targets, 1);
        float x[8], y[2];
        for (int64_t r = 0; r < 2; r++) {
            int64_t idx[1] = { r };
            data_gather(&ds, idx, 1, x, NULL, y);
            for (int i = 0; i < 3; i++)
                ck_assert_msg(memcmp(&x[i], &want[3 * r + i], sizeof(float)) == 0,
                              "big=%d [%lld][%d]: %a, want %a", big, (long long)r, i, x[i],
                              want[3 * r + i]);
            ck_assert_float_eq(y[0], r ? -0.25f : 0.5f);
        }
        data_free(&ds);
    }
    struct ddpc_data_source src = { .format = DDPC_DATA_NPY, .inputs = path_buf[0],
                                    .labels = path_buf[1] };
    /* an infinity in float16 inputs: refused, naming the sample */
    size_t h = npy_header(buf, "<f2", "(2, 3)");
    const uint16_t hi[6] = { 0x3c00, 0x3c00, 0x3c00, 0x3c00, 0x7c00, 0x3c00 };
    memcpy(buf + h, hi, sizeof hi);
    write_bytes(tmp_path(0, "x.npy"), buf, h + sizeof hi, 0);
    expect_error(&src, path_buf[0], "sample 1, column 1");
    /* complex, unicode strings, float128: named, with what ddpc reads */
    const char *bad[] = { "<c8", "<U1", "<f16" };
    for (int i = 0; i < 3; i++) {
        h = npy_header(buf, bad[i], "(2, 3)");
        memset(buf + h, 0, 96);
        write_bytes(tmp_path(0, "x.npy"), buf, h + 96, 0);
        memset(&e, 0, sizeof e);   /* an error keeps its first message */
        ck_assert_int_eq(data_load(&src, &ds, &e), DDPC_E_DATA);
        char want_msg[64];
        snprintf(want_msg, sizeof want_msg, "NPY dtype '%s' is not supported (use float16",
                 bad[i]);
        ck_assert_msg(strstr(e.msg, want_msg), "%s", e.msg);
    }
}
END_TEST

/* Shapes whose element count wraps past 2^64 to a few elements: the
 * loader read those few bytes as the whole array, then indexed the huge
 * one past them (labels 1.. of 2^62 + 1 read past the buffer; ASan's
 * heap-buffer-overflow). Refused, naming the file. */
START_TEST(wrapping_shapes_are_refused)
{
    unsigned char buf[512];
    /* NPY: 2^62 + 1 rows of 4 floats (16 bytes: 4 elements, wrapped), and
     * as many int64 labels (8 bytes: the byte count wraps) */
    size_t h = npy_header(buf, "<f4", "(4611686018427387905, 4)");
    memset(buf + h, 0, 16);
    write_bytes(tmp_path(0, "x.npy"), buf, h + 16, 0);
    h = npy_header(buf, "<i8", "(4611686018427387905,)");
    memset(buf + h, 0, 8);
    write_bytes(tmp_path(1, "y.npy"), buf, h + 8, 0);
    struct ddpc_data_source src = { .format = DDPC_DATA_NPY, .inputs = path_buf[0],
                                    .labels = path_buf[1] };
    expect_error(&src, path_buf[0], "more elements than any file can hold");
    /* the labels alone, with inputs of 3 rows */
    h = npy_header(buf, "<f4", "(3, 4)");
    memset(buf + h, 0, 48);
    write_bytes(tmp_path(0, "x.npy"), buf, h + 48, 0);
    expect_error(&src, path_buf[1], "more elements than any file can hold");
    /* IDX: 111620 x 429509837 x 384773 = 2^64 + 4 (4 bytes of u8 images) */
    static const unsigned char idx[] = { 0, 0, 0x08, 3, 0x00, 0x01, 0xb4, 0x04,
                                         0x19, 0x99, 0xcc, 0xcd, 0x00, 0x05, 0xdf, 0x05,
                                         1, 2, 3, 4 };
    unsigned char lab[16];
    size_t nl = idx_labels(lab, 3);
    struct ddpc_data_source isrc = { .format = DDPC_DATA_IDX, .inputs = tmp_path(0, "x.idx"),
                                     .labels = tmp_path(1, "y.idx") };
    write_bytes(isrc.inputs, idx, sizeof idx, 0);
    write_bytes(isrc.labels, lab, nl, 0);
    expect_error(&isrc, isrc.inputs, "more elements than any file can hold");
}
END_TEST

START_TEST(csv_with_header)
{
    const char *text = "label,a,b\n2,0.5,1.5\n0,-1,2\r\n\n1,3,4\n";
    write_bytes(tmp_path(0, "d.csv"), text, strlen(text), 0);
    struct ddpc_data_source src = { .format = DDPC_DATA_CSV, .path = path_buf[0],
                                    .label_column = 0 };
    struct ddpc_dataset ds;
    struct ddpc_err e = {0};
    ck_assert_msg(data_load(&src, &ds, &e) == 0, "%s", e.msg);
    ck_assert_int_eq(ds.n, 3);
    ck_assert_int_eq(ds.features, 2);
    ck_assert_int_eq(ds.classes, 3);
    int64_t idx[2] = { 1, 2 };
    float x[4];
    int32_t lab[2];
    data_gather(&ds, idx, 2, x, lab, NULL);
    ck_assert_float_eq(x[0], -1.0f);
    ck_assert_float_eq(x[3], 4.0f);
    ck_assert_int_eq(lab[0], 0);
    ck_assert_int_eq(lab[1], 1);
    data_free(&ds);

    /* last column as a float target: regression */
    text = "1,2,0.25\n3,4,-0.5\n";
    write_bytes(tmp_path(0, "d.csv"), text, strlen(text), 1);   /* gzipped csv */
    src.label_column = 2;
    ck_assert_msg(data_load(&src, &ds, &e) == 0, "%s", e.msg);
    ck_assert_int_eq(ds.classes, 0);
    ck_assert_int_eq(ds.targets, 1);
    ck_assert_float_eq(ds.y[1], -0.5f);
    data_free(&ds);

    /* ragged row and non-number are errors with file:line */
    text = "1,2,3\n4,5\n";
    write_bytes(tmp_path(0, "d.csv"), text, strlen(text), 0);
    expect_error(&src, path_buf[0], ":2: expected 3 columns");
    text = "1,2,3\n4,x,6\n";
    write_bytes(tmp_path(0, "d.csv"), text, strlen(text), 0);
    expect_error(&src, path_buf[0], "not a number");
    /* hex is no number in a CSV (pandas reads "0x10" as text): strtod
     * trained on it as 16 */
    text = "1,2,3\n4,0x10,6\n";
    write_bytes(tmp_path(0, "d.csv"), text, strlen(text), 0);
    expect_error(&src, path_buf[0], ":2: column 2 (\"0x10\") is not a number");
    text = "1,2,3\n4,\" -0X1p2\",6\n";
    write_bytes(tmp_path(0, "d.csv"), text, strlen(text), 0);
    expect_error(&src, path_buf[0], "is not a number");
    /* a UTF-8 byte order mark (Excel's "CSV UTF-8") is not part of the
     * first field: that row was taken for a header and dropped */
    text = "\xef\xbb\xbf" "1,2,0\n3,4,1\n";
    write_bytes(tmp_path(0, "d.csv"), text, strlen(text), 0);
    ck_assert_msg(data_load(&src, &ds, &e) == 0, "%s", e.msg);
    ck_assert_int_eq(ds.n, 2);
    ck_assert_float_eq(ds.y[0], 0.0f);
    data_free(&ds);
    text = "\xef\xbb\xbf" "a,b,y\n1,2,0\n3,4,1\n";     /* with a header: the same rows */
    write_bytes(tmp_path(0, "d.csv"), text, strlen(text), 0);
    ck_assert_msg(data_load(&src, &ds, &e) == 0, "%s", e.msg);
    ck_assert_int_eq(ds.n, 2);
    data_free(&ds);
    /* pandas.DataFrame(array).to_csv(index=False) names the columns 0, 1,
     * ..., k-1: that first line is a header (csv_header.h); it trained as a
     * sample (label 2, features 0 and 1). Any other first line of numbers
     * is data. */
    text = "0,1,2\r\n1,2,0\n3,4,1\n";
    write_bytes(tmp_path(0, "d.csv"), text, strlen(text), 0);
    ck_assert_msg(data_load(&src, &ds, &e) == 0, "%s", e.msg);
    ck_assert_int_eq(ds.n, 2);
    ck_assert_float_eq(ds.y[0], 0.0f);
    data_free(&ds);
    text = "\"0\",\"1\",\"2\"\n1,2,0\n3,4,1\n";     /* quoted, as to_csv(quoting=ALL) */
    write_bytes(tmp_path(0, "d.csv"), text, strlen(text), 1);
    ck_assert_msg(data_load(&src, &ds, &e) == 0, "%s", e.msg);
    ck_assert_int_eq(ds.n, 2);
    data_free(&ds);
    const char *data_first[] = { "0,1,3\n1,2,0\n", "1,2,3\n1,2,0\n", "0,01,2\n1,2,0\n",
                                 "0,1,2.0\n1,2,0\n", "0,2,1\n1,2,0\n" };
    for (size_t k = 0; k < sizeof data_first / sizeof data_first[0]; k++) {
        write_bytes(tmp_path(0, "d.csv"), data_first[k], strlen(data_first[k]), 0);
        ck_assert_msg(data_load(&src, &ds, &e) == 0, "%s", e.msg);
        ck_assert_msg(ds.n == 2, "%s: %lld rows", data_first[k], (long long)ds.n);
        data_free(&ds);
    }
    /* a NUL byte ended the text there: the rows after it were dropped
     * without a word (2 of 4 rows trained); gzipped too */
    static const char nul_text[] = "1,2,0\n3,4,1\n\0\0\0\0\n5,6,0\n7,8,1\n";
    for (int gz = 0; gz < 2; gz++) {
        write_bytes(tmp_path(0, "d.csv"), nul_text, sizeof nul_text - 1, gz);
        expect_error(&src, path_buf[0], ":3: a NUL byte (byte 13 of 29)");
    }
    src.path = tmp_path(1, "missing.csv");
    expect_error(&src, path_buf[1], "cannot open");
}
END_TEST

/* A CSV whose labels are not in label_column: the dataset names the
 * column that looks like labels, so the worker can point at label_column. */
START_TEST(csv_label_hint)
{
    const char *text = "a,b,c,y\n0.5,1.5,2,1\n0.25,1,3,0\n1.5,2,4,2\n";
    write_bytes(tmp_path(0, "d.csv"), text, strlen(text), 0);
    struct ddpc_data_source src = { .format = DDPC_DATA_CSV, .path = path_buf[0],
                                    .label_column = 0 };
    struct ddpc_dataset ds;
    struct ddpc_err e = {0};
    ck_assert_msg(data_load(&src, &ds, &e) == 0, "%s", e.msg);
    ck_assert_ptr_null(ds.labels);          /* column 0 holds fractions */
    ck_assert_int_eq(ds.label_ok, 0);
    ck_assert_int_eq(ds.label_hint, 3);     /* the last column first, though column 2 fits too */
    ck_assert_int_eq(ds.label_hint_max, 2);
    data_free(&ds);
    src.label_column = 3;
    ck_assert_msg(data_load(&src, &ds, &e) == 0, "%s", e.msg);
    ck_assert_int_eq(ds.label_ok, 1);
    ck_assert_int_eq(ds.classes, 3);
    ck_assert_int_eq(ds.label_hint, 2);
    data_free(&ds);
    /* nothing looks like labels: no hint */
    text = "0.5,1.5\n0.25,-1\n";
    write_bytes(tmp_path(0, "d.csv"), text, strlen(text), 0);
    src.label_column = 0;
    ck_assert_msg(data_load(&src, &ds, &e) == 0, "%s", e.msg);
    ck_assert_int_eq(ds.label_hint, -1);
    data_free(&ds);
}
END_TEST

/* One NaN or infinity anywhere in float data is an error naming the file
 * and where, in every format: it would train the model to chance. */
START_TEST(nonfinite_values_are_refused)
{
    unsigned char buf[512];
    /* NPY float32 inputs [2, 3] with a NaN at sample 1, column 2 */
    size_t h = npy_header(buf, "<f4", "(2, 3)");
    float xf[6] = { 0.5f, -1, 2, 3, 4.25f, NAN };
    memcpy(buf + h, xf, sizeof xf);
    write_bytes(tmp_path(0, "x.npy"), buf, h + sizeof xf, 0);
    h = npy_header(buf, "<i8", "(2,)");
    int64_t yl[2] = { 1, 0 };
    memcpy(buf + h, yl, sizeof yl);
    write_bytes(tmp_path(1, "y.npy"), buf, h + sizeof yl, 0);
    struct ddpc_data_source src = { .format = DDPC_DATA_NPY, .inputs = path_buf[0],
                                    .labels = path_buf[1] };
    expect_error(&src, path_buf[0], "sample 1, column 2 (element 5) is NaN");
    /* float64 inputs (converted): an infinity, and a value float32 cannot hold */
    h = npy_header(buf, "<f8", "(2, 2)");
    double xd[4] = { 0, -INFINITY, 1, 2 };
    memcpy(buf + h, xd, sizeof xd);
    write_bytes(tmp_path(0, "x.npy"), buf, h + sizeof xd, 0);
    expect_error(&src, path_buf[0], "sample 0, column 1 (element 1) is -infinity");
    xd[1] = 1e300;
    memcpy(buf + h, xd, sizeof xd);
    write_bytes(tmp_path(0, "x.npy"), buf, h + sizeof xd, 0);
    expect_error(&src, path_buf[0], "is +infinity (as float32)");
    /* NPY float targets (regression) */
    h = npy_header(buf, "<f4", "(2, 3)");
    xf[5] = 1;
    memcpy(buf + h, xf, sizeof xf);
    write_bytes(tmp_path(0, "x.npy"), buf, h + sizeof xf, 0);
    h = npy_header(buf, "<f4", "(2,)");
    float yt[2] = { 0.5f, INFINITY };
    memcpy(buf + h, yt, sizeof yt);
    write_bytes(tmp_path(1, "y.npy"), buf, h + sizeof yt, 0);
    expect_error(&src, path_buf[1], "target of sample 1");

    /* IDX float32 (big-endian, converted on little-endian hosts) */
    unsigned char img[12 + 6 * 4];
    const unsigned char hi[12] = { 0, 0, 0x0d, 2, 0, 0, 0, 2, 0, 0, 0, 3 };
    memcpy(img, hi, 12);
    const float vals[6] = { 0.5f, -2.0f, 3.25f, 1e-3f, NAN, -0.125f };
    for (int i = 0; i < 6; i++) {
        uint32_t u;
        memcpy(&u, &vals[i], 4);
        for (int b = 0; b < 4; b++)
            img[12 + 4 * i + b] = (unsigned char)(u >> (24 - 8 * b));
    }
    unsigned char lab[16];
    size_t nl = idx_labels(lab, 2);
    struct ddpc_data_source isrc = { .format = DDPC_DATA_IDX, .inputs = tmp_path(2, "xf"),
                                     .labels = tmp_path(3, "yl") };
    write_bytes(isrc.inputs, img, sizeof img, 1);
    write_bytes(isrc.labels, lab, nl, 0);
    expect_error(&isrc, path_buf[2], "sample 1, column 1 (element 4) is NaN");

    /* CSV: nan, inf and a float32 overflow, each with its line */
    struct ddpc_data_source csrc = { .format = DDPC_DATA_CSV, .path = tmp_path(4, "d.csv") };
    const char *text = "label,a,b\n1,2,3\n0,nan,1\n";
    write_bytes(csrc.path, text, strlen(text), 0);
    expect_error(&csrc, path_buf[4], ":3: column 2 (\"nan\") is not finite");
    text = "1,2,3\n0,1,-inf\n";
    write_bytes(csrc.path, text, strlen(text), 0);
    expect_error(&csrc, path_buf[4], ":2: column 3 (\"-inf\") is not finite");
    text = "1e39,2,3\n0,1,1\n";   /* the first line is data, not a header */
    write_bytes(csrc.path, text, strlen(text), 0);
    expect_error(&csrc, path_buf[4], ":1: column 1 (\"1e39\") is not finite");
}
END_TEST

/* CSV labels that cannot be class indices make the file a regression set;
 * the dataset says which line did it, for the cross_entropy error. */
START_TEST(csv_label_note_names_the_line)
{
    const char *text = "1,2,3\n0,1,1\n-1,5,5\n2.5,0,0\n";
    write_bytes(tmp_path(0, "d.csv"), text, strlen(text), 0);
    struct ddpc_data_source src = { .format = DDPC_DATA_CSV, .path = path_buf[0] };
    struct ddpc_dataset ds;
    struct ddpc_err e = {0};
    ck_assert_msg(data_load(&src, &ds, &e) == 0, "%s", e.msg);
    ck_assert_ptr_null(ds.labels);
    ck_assert_msg(strstr(ds.label_note, ":3: label -1 (column 1)") != NULL, "%s", ds.label_note);
    ck_assert_str_eq(ds.labels_source, path_buf[0]);
    data_free(&ds);
}
END_TEST

/* A FIFO (or a device, a directory) as a data file: an error at once,
 * never an open() that waits for a writer. */
START_TEST(non_regular_files_are_refused_without_blocking)
{
    ck_assert_int_eq(mkfifo(tmp_path(0, "fifo"), 0600), 0);
    unsigned char lab[16];
    size_t nl = idx_labels(lab, 3);
    write_bytes(tmp_path(1, "y"), lab, nl, 0);
    struct ddpc_data_source src = { .format = DDPC_DATA_IDX, .inputs = path_buf[0],
                                    .labels = path_buf[1] };
    expect_error(&src, path_buf[0], "is not a regular file (it is a FIFO)");
    src.inputs = "/dev/zero";
    expect_error(&src, "/dev/zero", "(it is a character device)");
    struct ddpc_data_source csv = { .format = DDPC_DATA_CSV, .path = dir };
    expect_error(&csv, dir, "(it is a directory)");
    csv.path = path_buf[0];
    expect_error(&csv, path_buf[0], "FIFO");
}
END_TEST

START_TEST(synthetic_deterministic)
{
    struct ddpc_data_source src = { .format = DDPC_DATA_SYNTHETIC, .samples = 100,
                                    .features = 6, .classes = 4, .seed = 9 };
    struct ddpc_dataset a, b;
    struct ddpc_err e = {0};
    ck_assert_int_eq(data_load(&src, &a, &e), 0);
    ck_assert_int_eq(data_load(&src, &b, &e), 0);
    ck_assert_int_eq(a.classes, 4);
    ck_assert_mem_eq(a.x, b.x, 600 * sizeof(float));
    ck_assert_mem_eq(a.labels, b.labels, 100 * sizeof(int32_t));
    int seen[4] = {0};
    for (int i = 0; i < 100; i++)
        seen[a.labels[i]]++;
    for (int c = 0; c < 4; c++)
        ck_assert_int_gt(seen[c], 5);
    data_free(&b);
    src.seed = 10;
    ck_assert_int_eq(data_load(&src, &b, &e), 0);
    ck_assert(memcmp(a.x, b.x, 600 * sizeof(float)) != 0);
    data_free(&a);
    data_free(&b);
    src.classes = 0;   /* regression */
    ck_assert_int_eq(data_load(&src, &a, &e), 0);
    ck_assert_int_eq(a.targets, 1);
    ck_assert_ptr_nonnull(a.y);
    ck_assert_ptr_null(a.labels);
    data_free(&a);
}
END_TEST

/* ===== token streams: text and llm.c shards ===== */

/* An llm.c shard (testutil's write_llmc_shard) at path. */
static void write_shard(const char *path, int32_t magic, int32_t version, int32_t count,
                        const uint16_t *tok, size_t ntok)
{
    ck_assert_int_eq(write_llmc_shard(path, magic, version, count, tok, ntok), 0);
}

static void load_ok(const struct ddpc_data_source *src, struct ddpc_dataset *ds)
{
    struct ddpc_err e = {0};
    ck_assert_msg(data_load(src, ds, &e) == 0, "%s", e.msg);
}

static void windows_ok(struct ddpc_dataset *ds, int T, int stride, int vocab)
{
    struct ddpc_err e = {0};
    ck_assert_msg(data_set_windows(ds, T, stride, vocab, &e) == 0, "%s", e.msg);
}

static void expect_window_error(struct ddpc_dataset *ds, int T, int stride, int vocab,
                                const char *what1, const char *what2)
{
    struct ddpc_err e = {0};
    int64_t n = ds->n;
    ck_assert_int_lt(data_set_windows(ds, T, stride, vocab, &e), 0);
    ck_assert_msg(strstr(e.msg, what1) != NULL, "message lacks \"%s\": %s", what1, e.msg);
    ck_assert_msg(strstr(e.msg, what2) != NULL, "message lacks \"%s\": %s", what2, e.msg);
    ck_assert_int_eq(ds->n, n);   /* unchanged by a failed call */
}

/* Token windows (docs/DESIGN.md, Models) on a 20-byte text, T = 4: training windows d[5i .. 5i+5)
 * (input 4, labels the next 4), test windows at stride 4 over
 * floor((20 - 1) / 4) = 4 of them. */
START_TEST(text_windows_train_and_test)
{
    const char *txt = "0123456789abcdefghij";
    write_bytes(tmp_path(0, "t.txt"), txt, 20, 0);
    struct ddpc_data_source src = { .format = DDPC_DATA_TEXT, .path = path_buf[0],
                                    .range_lo = 0, .range_hi = 1 };
    struct ddpc_dataset tr, te;
    load_ok(&src, &tr);
    ck_assert_int_eq(tr.dtype, DDPC_DTYPE_U8);
    ck_assert_int_eq(tr.ntok, 20);
    ck_assert_int_eq(tr.max_token, 'j');
    ck_assert_int_eq(tr.n, 0);   /* no samples before windows */
    windows_ok(&tr, 4, 5, 256);
    ck_assert_int_eq(tr.n, 4);
    ck_assert_int_eq(tr.features, 4);
    ck_assert_int_eq(tr.seq_len, 4);
    int64_t idx[2] = { 1, 3 };
    float x[8];
    int32_t lab[8];
    data_gather(&tr, idx, 2, x, lab, NULL);
    const char *want_x = "5678fghi", *want_l = "6789ghij";
    for (int t = 0; t < 8; t++) {
        ck_assert_float_eq(x[t], (float)want_x[t]);
        ck_assert_int_eq(lab[t], want_l[t]);
    }
    load_ok(&src, &te);
    windows_ok(&te, 4, 4, 256);
    ck_assert_int_eq(te.n, 4);   /* floor(19 / 4) */
    int64_t last = 3, mid = 2;
    data_gather(&te, &mid, 1, x, lab, NULL);
    for (int t = 0; t < 4; t++) {
        ck_assert_float_eq(x[t], (float)"89ab"[t]);
        ck_assert_int_eq(lab[t], "9abc"[t]);
    }
    data_gather(&te, &last, 1, x, lab, NULL);
    for (int t = 0; t < 4; t++) {
        ck_assert_float_eq(x[t], (float)"cdef"[t]);
        ck_assert_int_eq(lab[t], "defg"[t]);
    }
    /* 19 tokens: still 4 test windows ((19-1)/4), 3 training ones */
    data_free(&te);
    write_bytes(path_buf[0], txt, 19, 0);
    load_ok(&src, &te);
    windows_ok(&te, 4, 4, 256);
    ck_assert_int_eq(te.n, 4);
    data_free(&te);
    load_ok(&src, &te);
    windows_ok(&te, 4, 5, 256);
    ck_assert_int_eq(te.n, 3);
    data_free(&te);
    data_free(&tr);
}
END_TEST

/* range [0, 0.9] and [0.9, 1] of one file: the train part ends where the
 * test part starts, so no token is in both and none is lost. */
START_TEST(text_range_splits_one_file)
{
    char txt[101];
    for (int i = 0; i < 100; i++)
        txt[i] = (char)('A' + i % 50);
    write_bytes(tmp_path(0, "f.txt"), txt, 97, 0);   /* 97: 0.9 n is not whole */
    struct ddpc_data_source a = { .format = DDPC_DATA_TEXT, .path = path_buf[0],
                                  .range_lo = 0.0, .range_hi = 0.9 };
    struct ddpc_data_source b = a;
    b.range_lo = 0.9;
    b.range_hi = 1.0;
    struct ddpc_dataset da, db;
    load_ok(&a, &da);
    load_ok(&b, &db);
    ck_assert_int_eq(da.ntok, 87);   /* floor(0.9 * 97) */
    ck_assert_int_eq(db.ntok, 10);
    ck_assert_int_eq(db.tok_first, 87);
    ck_assert_mem_eq(da.x, txt, 87);
    ck_assert_mem_eq(db.x, txt + 87, 10);
    /* too short for T = 10: the message says the range and what to do */
    expect_window_error(&db, 10, 11, 256, "10 tokens (range [0.9, 1] of its 97 tokens)",
                        "block_size + 1 = 11");
    windows_ok(&db, 9, 10, 256);
    ck_assert_int_eq(db.n, 1);
    data_free(&da);
    data_free(&db);
}
END_TEST

/* Shards named by a glob pattern are one stream in the byte order of their
 * names (not the order written, not the locale's): windows cross shard
 * boundaries, and uint16 tokens above 255 survive. */
START_TEST(tokens_shards_in_order)
{
    uint16_t a[3] = { 1000, 1001, 1002 }, b[3] = { 1003, 1004, 1005 },
             c[4] = { 1006, 1007, 1008, 65535 };
    write_shard(tmp_path(0, "sh_c.bin"), 20240520, 1, 4, c, 4);
    write_shard(tmp_path(0, "sh_a.bin"), 20240520, 1, 3, a, 3);
    write_shard(tmp_path(0, "sh_b.bin"), 20240520, 1, 3, b, 3);
    write_shard(tmp_path(0, "sh_B.bin"), 20240520, 1, 1, b, 1);  /* 'B' < 'a': first */
    write_bytes(tmp_path(0, "other.bin"), "x", 1, 0);            /* not matched */
    tmp_path(1, "sh_[a-c].bin");
    struct ddpc_data_source src = { .format = DDPC_DATA_TOKENS, .path = path_buf[1],
                                    .range_lo = 0, .range_hi = 1 };
    struct ddpc_dataset ds;
    load_ok(&src, &ds);
    ck_assert_int_eq(ds.files.n, 3);
    ck_assert_msg(strstr(ds.files.f[1].path, "sh_b.bin") != NULL, "%s", ds.files.f[1].path);
    ck_assert_int_eq(ds.dtype, DDPC_DTYPE_U16);
    ck_assert_int_eq(ds.ntok, 10);
    ck_assert_int_eq(ds.max_token, 65535);
    windows_ok(&ds, 3, 4, 65536);
    ck_assert_int_eq(ds.n, 2);   /* floor(10 / 4) */
    int64_t idx[2] = { 1, 0 };
    float x[6];
    int32_t lab[6];
    data_gather(&ds, idx, 2, x, lab, NULL);
    const int wx[6] = { 1004, 1005, 1006, 1000, 1001, 1002 };
    const int wl[6] = { 1005, 1006, 1007, 1001, 1002, 1003 };
    for (int t = 0; t < 6; t++) {
        ck_assert_float_eq(x[t], (float)wx[t]);
        ck_assert_int_eq(lab[t], wl[t]);
    }
    data_free(&ds);
    /* every sh_*: sh_B first; a range of the whole stream (11 tokens) */
    tmp_path(1, "sh_*.bin");
    src.range_lo = 0.5;
    load_ok(&src, &ds);
    ck_assert_int_eq(ds.files.n, 4);
    ck_assert_int_eq(ds.ntok, 6);   /* [5, 11) */
    ck_assert_int_eq(((uint16_t *)ds.x)[0], 1004);   /* B, a a a, b [b] b */
    ck_assert_int_eq(((uint16_t *)ds.x)[5], 65535);
    data_free(&ds);
    /* one shard named plainly */
    src.path = path_buf[0];
    tmp_path(0, "sh_b.bin");
    src.range_lo = 0;
    load_ok(&src, &ds);
    ck_assert_int_eq(ds.ntok, 3);
    ck_assert_int_eq(((uint16_t *)ds.x)[2], 1005);
    data_free(&ds);
}
END_TEST

/* The directory ddpc joined a spec's relative path on (path_literal bytes)
 * is a name, not a pattern, whatever it holds: d[1]/ is not d1/, s*t?/ is
 * not sXtY/, b\[x]/ is itself, not b[x]/; the spec's own part stays a
 * pattern, and its messages show the path unescaped. A path written
 * absolute (path_literal 0) is all the user's, pattern characters and all. */
START_TEST(tokens_pattern_below_a_literal_dir)
{
    static const char *const dirs[][2] = {
        { "d[1]", "d1" }, { "s*t?", "sXtY" }, { "b\\[x]", "b[x]" } };
    uint16_t a[3] = { 1, 2, 3 }, b[2] = { 4, 5 }, z[4] = { 9, 9, 9, 9 };
    for (size_t k = 0; k < sizeof dirs / sizeof dirs[0]; k++) {
        char d[288], decoy[288];
        snprintf(d, sizeof d, "%s/%s", dir, dirs[k][0]);
        snprintf(decoy, sizeof decoy, "%s/%s", dir, dirs[k][1]);
        ck_assert_int_eq(mkdir(d, 0700), 0);
        ck_assert_int_eq(mkdir(decoy, 0700), 0);
        snprintf(path_buf[0], sizeof path_buf[0], "%s/sh_a.bin", d);
        write_shard(path_buf[0], 20240520, 1, 3, a, 3);
        snprintf(path_buf[0], sizeof path_buf[0], "%s/sh_b.bin", d);
        write_shard(path_buf[0], 20240520, 1, 2, b, 2);
        snprintf(path_buf[0], sizeof path_buf[0], "%s/sh_z.bin", decoy);
        write_shard(path_buf[0], 20240520, 1, 4, z, 4);
        snprintf(path_buf[1], sizeof path_buf[1], "%s/sh_*.bin", d);
        struct ddpc_data_source src = { .format = DDPC_DATA_TOKENS, .path = path_buf[1],
                                        .path_literal = (int32_t)strlen(d) + 1,
                                        .range_lo = 0, .range_hi = 1 };
        struct ddpc_dataset ds;
        load_ok(&src, &ds);
        ck_assert_int_eq(ds.files.n, 2);
        ck_assert_int_eq(ds.ntok, 5);
        snprintf(path_buf[0], sizeof path_buf[0], "%s/sh_a.bin", d);
        ck_assert_str_eq(ds.files.f[0].path, path_buf[0]);
        ck_assert_int_eq(((uint16_t *)ds.x)[4], 5);
        data_free(&ds);
        /* the spec's part: still a pattern after the escaped directory */
        snprintf(path_buf[1], sizeof path_buf[1], "%s/sh_[b].bin", d);
        load_ok(&src, &ds);
        ck_assert_int_eq(ds.files.n, 1);
        ck_assert_int_eq(ds.ntok, 2);
        data_free(&ds);
        /* written absolute: the directory's name is the user's pattern */
        snprintf(path_buf[1], sizeof path_buf[1], "%s/sh_*.bin", d);
        src.path_literal = 0;
        load_ok(&src, &ds);
        int decoyed = 0;
        for (int i = 0; i < ds.files.n; i++)
            decoyed |= strstr(ds.files.f[i].path, "sh_z.bin") != NULL;
        ck_assert_msg(decoyed, "%s: the pattern did not match %s", dirs[k][0], dirs[k][1]);
        data_free(&ds);
        /* nothing matches: the path as given */
        snprintf(path_buf[1], sizeof path_buf[1], "%s/none_*.bin", d);
        src.path_literal = (int32_t)strlen(d) + 1;
        char want[400];
        snprintf(want, sizeof want, "no file matches the pattern '%s'", path_buf[1]);
        expect_error(&src, path_buf[1], want);
    }
}
END_TEST

/* An output (metrics_csv, export) that is one of the files a text or
 * tokens source's pattern matches is an input the run would overwrite:
 * job_input_at (check's warning, the job's refusal) named a literal data
 * path only, so `path: "d/?.txt"` with `metrics_csv: d/b.txt` let the job
 * replace d/b.txt with its metrics. A file the pattern does not match, and
 * a CSV path (never a pattern), are not its files. */
START_TEST(output_in_a_token_pattern_is_an_input)
{
    char d[288];
    snprintf(d, sizeof d, "%s/d[1]", dir);   /* the joined directory: a name */
    ck_assert_int_eq(mkdir(d, 0700), 0);
    snprintf(path_buf[0], sizeof path_buf[0], "%s/a.txt", d);
    write_bytes(path_buf[0], "abcdefgh", strlen("abcdefgh"), 0);
    snprintf(path_buf[1], sizeof path_buf[1], "%s/b.txt", d);
    write_bytes(path_buf[1], "ijklmnop", strlen("ijklmnop"), 0);
    snprintf(path_buf[2], sizeof path_buf[2], "%s/c.csv", d);
    write_bytes(path_buf[2], "1,0\n", strlen("1,0\n"), 0);
    snprintf(path_buf[3], sizeof path_buf[3], "%s/*.txt", d);
    struct ddpc_job j;
    memset(&j, 0, sizeof j);
    j.data.train = (struct ddpc_data_source){ .format = DDPC_DATA_TEXT, .path = path_buf[3],
                                              .path_literal = (int32_t)strlen(d) + 1,
                                              .range_lo = 0, .range_hi = 1 };
    struct stat so;
    const char *key = NULL;
    ck_assert_int_eq(stat(path_buf[1], &so), 0);
    ck_assert_ptr_eq(job_input_at(&j, &so, "resume", &key), path_buf[3]);
    ck_assert_str_eq(key, "one of the files data.train.path matches");
    j.data.test = j.data.train;
    j.data.has_test = 1;
    j.data.train.format = DDPC_DATA_TOKENS;
    j.data.train.path = path_buf[2];
    key = NULL;
    ck_assert_ptr_eq(job_input_at(&j, &so, "resume", &key), path_buf[3]);
    ck_assert_str_eq(key, "one of the files data.test.path matches");
    /* a file the pattern does not match; a CSV's path is no pattern */
    ck_assert_int_eq(stat(path_buf[2], &so), 0);
    j.data.train.path = path_buf[0];
    ck_assert_ptr_null(job_input_at(&j, &so, "resume", &key));
    j.data.train.path = path_buf[3];
    j.data.train.format = DDPC_DATA_CSV;
    j.data.test.path = NULL;
    ck_assert_int_eq(stat(path_buf[1], &so), 0);
    ck_assert_ptr_null(job_input_at(&j, &so, "resume", &key));
    /* the literal path itself keeps its name */
    j.data.train.format = DDPC_DATA_TEXT;
    j.data.train.path = path_buf[1];
    ck_assert_ptr_eq(job_input_at(&j, &so, "resume", &key), path_buf[1]);
    ck_assert_str_eq(key, "data.train.path");
}
END_TEST

/* A token at or above vocab_size: the file, its position in that file and
 * its value, and what to do; text names the byte. */
START_TEST(tokens_over_vocab_are_named)
{
    uint16_t a[3] = { 1, 2, 3 }, b[4] = { 4, 700, 6, 900 };
    write_shard(tmp_path(0, "s_0.bin"), 20240520, 1, 3, a, 3);
    write_shard(tmp_path(0, "s_1.bin"), 20240520, 1, 4, b, 4);
    tmp_path(1, "s_?.bin");
    struct ddpc_data_source src = { .format = DDPC_DATA_TOKENS, .path = path_buf[1],
                                    .range_lo = 0, .range_hi = 1 };
    struct ddpc_dataset ds;
    load_ok(&src, &ds);
    expect_window_error(&ds, 2, 3, 512, "s_1.bin: token 1 (counting from 0) is 700, not below "
                        "model.vocab_size 512 (and larger ones follow)", "at least 901");
    windows_ok(&ds, 2, 3, 901);
    data_free(&ds);
    /* the position is the file's, also when a range starts inside it */
    src.range_lo = 0.5;   /* [3, 7): s_1's tokens */
    load_ok(&src, &ds);
    expect_window_error(&ds, 2, 3, 800, "s_1.bin: token 3 (counting from 0) is 900", "901");
    data_free(&ds);
    write_bytes(tmp_path(2, "t.txt"), "abc\xff" "def", 7, 0);
    struct ddpc_data_source t = { .format = DDPC_DATA_TEXT, .path = path_buf[2],
                                  .range_lo = 0, .range_hi = 1 };
    load_ok(&t, &ds);
    ck_assert_int_eq(ds.max_token, 255);
    expect_window_error(&ds, 2, 3, 128, "t.txt: byte 3 (counting from 0) is 255", "256");
    data_free(&ds);
}
END_TEST

static void expect_tokens_error(const char *path, const char *file, const char *what)
{
    struct ddpc_data_source src = { .format = DDPC_DATA_TOKENS, .path = path,
                                    .range_lo = 0, .range_hi = 1 };
    expect_error(&src, file, what);
}

START_TEST(tokens_bad_shards_are_named)
{
    uint16_t t[4] = { 1, 2, 3, 4 };
    write_shard(tmp_path(0, "magic.bin"), 20240521, 1, 4, t, 4);
    expect_tokens_error(path_buf[0], "magic.bin", "its magic is 20240521, not 20240520");
    write_shard(tmp_path(0, "v2.bin"), 20240520, 2, 4, t, 4);
    expect_tokens_error(path_buf[0], "v2.bin", "version 2 token shard (uint32 tokens");
    write_shard(tmp_path(0, "trunc.bin"), 20240520, 1, 5, t, 4);
    expect_tokens_error(path_buf[0], "trunc.bin", "header says 5 tokens (10 bytes after the "
                        "1024-byte header) but the file has 8 bytes after it: truncated");
    write_shard(tmp_path(0, "extra.bin"), 20240520, 1, 3, t, 4);
    expect_tokens_error(path_buf[0], "extra.bin", "extra bytes after the tokens");
    write_shard(tmp_path(0, "neg.bin"), 20240520, 1, -1, t, 4);
    expect_tokens_error(path_buf[0], "neg.bin", "token count is negative (-1)");
    write_bytes(tmp_path(0, "short.bin"), "\x88\xd8\x34\x01", 4, 0);
    expect_tokens_error(path_buf[0], "short.bin", "less than the 1024-byte header");
    expect_tokens_error(tmp_path(0, "absent.bin"), "absent.bin", "No such file");
    expect_tokens_error(tmp_path(0, "none_*.bin"), "none_*.bin", "no file matches the pattern");
    /* one bad shard among good ones is named */
    write_shard(tmp_path(0, "g_0.bin"), 20240520, 1, 4, t, 4);
    write_shard(tmp_path(0, "g_1.bin"), 20240520, 1, 9, t, 4);
    expect_tokens_error(tmp_path(1, "g_*.bin"), "g_1.bin", "truncated");
    /* a directory that matches */
    ck_assert_int_eq(mkdir(tmp_path(0, "g_2.bin"), 0700), 0);
    unlink(tmp_path(0, "g_1.bin"));
    expect_tokens_error(tmp_path(1, "g_*.bin"), "g_2.bin", "is a directory");
    /* text: a missing file, and a file with no tokens */
    struct ddpc_data_source txt = { .format = DDPC_DATA_TEXT, .path = tmp_path(2, "no.txt"),
                                    .range_lo = 0, .range_hi = 1 };
    expect_error(&txt, "no.txt", "No such file");
    write_bytes(tmp_path(2, "empty.txt"), "", 0, 0);
    struct ddpc_dataset ds;
    load_ok(&txt, &ds);
    expect_window_error(&ds, 1, 2, 256, "empty.txt has 0 tokens", "block_size + 1 = 2");
    data_free(&ds);
}
END_TEST

/* Windows are samples like any other: a non-token dataset is refused, and
 * the sampler's shards over window indices cover every training window
 * once per epoch across ranks, so each token of the windowed prefix is an
 * input or the last label exactly once. */
START_TEST(windows_through_the_sampler)
{
    struct ddpc_data_source syn = { .format = DDPC_DATA_SYNTHETIC, .samples = 10,
                                    .features = 2, .classes = 2, .seed = 1 };
    struct ddpc_dataset ds;
    load_ok(&syn, &ds);
    expect_window_error(&ds, 2, 3, 0, "is not a token stream", "format text or tokens");
    data_free(&ds);
    unsigned char txt[1000];
    for (int i = 0; i < 1000; i++)
        txt[i] = (unsigned char)(i * 7 % 251);
    write_bytes(tmp_path(0, "s.txt"), txt, sizeof txt, 0);
    struct ddpc_data_source src = { .format = DDPC_DATA_TEXT, .path = path_buf[0],
                                    .range_lo = 0, .range_hi = 1 };
    load_ok(&src, &ds);
    const int T = 7;
    windows_ok(&ds, T, T + 1, 256);
    ck_assert_int_eq(ds.n, 125);
    int seen[1000] = {0};
    for (int epoch = 0; epoch < 2; epoch++) {
        memset(seen, 0, sizeof seen);
        for (int rank = 0; rank < 2; rank++) {
            struct ddpc_sampler s;
            struct ddpc_err e = {0};
            ck_assert_int_eq(sampler_init(&s, ds.n, rank, 2, 2, 1, 1, 42, 0, 1.0, &e), 0);
            sampler_set_epoch(&s, epoch);
            for (int64_t bi = 0; bi < s.n_batches; bi++) {
                const int64_t *idx;
                int rows = sampler_batch(&s, bi, &idx);
                float x[4 * 7];
                int32_t lab[4 * 7];
                data_gather(&ds, idx, rows, x, lab, NULL);
                for (int r = 0; r < rows; r++) {
                    int64_t s0 = idx[r] * (T + 1);
                    for (int t = 0; t < T; t++) {
                        ck_assert_float_eq(x[r * T + t], (float)txt[s0 + t]);
                        ck_assert_int_eq(lab[r * T + t], txt[s0 + t + 1]);
                        seen[s0 + t]++;
                    }
                    seen[s0 + T]++;
                }
            }
            sampler_free(&s);
        }
        /* drop_last: 124 of 125 windows (62 per rank, 31 batches of 2), each once */
        int once = 0;
        for (int i = 0; i < 1000; i++) {
            ck_assert_int_le(seen[i], 1);
            once += seen[i];
        }
        ck_assert_int_eq(once, 124 * (T + 1));
    }
    data_free(&ds);
}
END_TEST

/* The loading estimate the launcher checks against a cgroup limit before
 * it loads (ddprt.c): a gzip file read whole holds its compressed bytes
 * and all they decompress to at once (libdeflate), a streamed one only
 * the latter; ISIZE is taken mod 2^32 and a multi-member file's is its
 * last member's, so a size a header tells wins, and an ISIZE below half
 * the compressed bytes is raised to that half, never to ISIZE + 2^32. */
START_TEST(memory_estimate_before_loading)
{
    const uint64_t G = (uint64_t)1 << 30;
    struct data_mem m = { 0 };
    data_file_mem(1000, 0, 0, 0, 1, &m);   /* plain */
    ck_assert(m.peak == 1000 && m.held == 1000 && m.gz == 0 && m.raw == 0);
    memset(&m, 0, sizeof m);   /* Fashion-MNIST's training images */
    data_file_mem(26421856, 1, 47040016, 0, 1, &m);
    ck_assert(m.peak == 26421856 + 47040016 && m.held == 47040016);
    ck_assert(m.gz == 26421856 && m.raw == 47040016);
    data_file_mem(26421856, 1, 47040016, 0, 0, &m);   /* zlib streams it */
    ck_assert(m.peak == 47040016 && m.held == 47040016);
    memset(&m, 0, sizeof m);   /* 6 GiB in 5 GiB: ISIZE says 2 GiB */
    data_file_mem(5 * G, 1, (uint32_t)(2 * G), 0, 1, &m);
    ck_assert(m.held == (5 * G - 18) / 2 && m.peak == 5 * G);
    data_file_mem(3 * G, 1, (uint32_t)(2 * G), 6 * G, 1, &m);   /* the header knows */
    ck_assert(m.held == 6 * G && m.peak == 6 * G);   /* libdeflate gives up, zlib streams */
    memset(&m, 0, sizeof m);   /* bgzip: 1 MiB of 64 KiB members, the last 1000 bytes */
    data_file_mem(1 << 20, 1, 1000, 0, 1, &m);
    ck_assert(m.held == ((1 << 20) - 18) / 2 && m.peak == 1 << 20);
    /* the test set on its own thread: one's peak while the other is held */
    struct data_mem tr = { 73461872, 47340016, 0, 0 }, te = { 12262095, 7880016, 0, 0 };
    ck_assert(data_mem_together(&tr, &te) == 73461872 + 7880016);
    ck_assert(data_mem_together(&te, &tr) == 73461872 + 7880016);

    /* a gzipped IDX of 200 x 28 x 28 bytes: the file, then its output
     * held with the labels', their int32 copy; int16 inputs add a float copy */
    enum { N = 200 };
    static unsigned char img[16 + N * 784], lab[8 + N];
    const unsigned char hi[16] = { 0, 0, 8, 3, 0, 0, 0, N, 0, 0, 0, 28, 0, 0, 0, 28 };
    const unsigned char hl[8] = { 0, 0, 8, 1, 0, 0, 0, N };
    memcpy(img, hi, 16);
    memcpy(lab, hl, 8);
    for (int i = 0; i < N * 784; i++)
        img[16 + i] = (unsigned char)(i * 7919 % 251);
    for (int i = 0; i < N; i++)
        lab[8 + i] = (unsigned char)(i % 10);
    struct ddpc_data_source src = { .format = DDPC_DATA_IDX, .inputs = tmp_path(0, "mx.gz"),
                                    .labels = tmp_path(1, "my") };
    write_bytes(src.inputs, img, sizeof img, 1);
    write_bytes(src.labels, lab, sizeof lab, 0);
    struct stat st;
    ck_assert_int_eq(stat(src.inputs, &st), 0);
    ck_assert_int_eq(data_mem_estimate(&src, &m), 0);
    int whole = m.peak == (uint64_t)st.st_size + sizeof img;   /* libdeflate's build */
    ck_assert_msg(whole || m.peak == sizeof img + sizeof lab + 4 * N, "peak %llu",
                  (unsigned long long)m.peak);
    ck_assert(m.held == sizeof img + 4 * N && m.gz == (uint64_t)st.st_size &&
              m.raw == sizeof img);
    img[2] = 0x0B;   /* int16, N / 2 samples, plain: converted to float */
    img[7] = N / 2;
    write_bytes(src.inputs, img, sizeof img, 0);
    ck_assert_int_eq(data_mem_estimate(&src, &m), 0);
    uint64_t conv = 4 * (uint64_t)(N / 2) * 784;
    ck_assert_msg(m.peak == sizeof img + sizeof lab + conv + 4 * N &&
                  m.held == conv + 4 * N && m.gz == 0, "peak %llu held %llu",
                  (unsigned long long)m.peak, (unsigned long long)m.held);
    /* a FIFO is not opened (it would block): data_load says what it is */
    src.inputs = tmp_path(2, "fifo");
    ck_assert_int_eq(mkfifo(src.inputs, 0600), 0);
    ck_assert_int_eq(data_mem_estimate(&src, &m), -1);
}
END_TEST

Suite *data_suite(void)
{
    Suite *s = suite_create("data");
    TCase *tc = tcase_create("data");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, idx_gz_and_plain_round_trip);
    tcase_add_test(tc, idx_errors_name_the_file);
    tcase_add_test(tc, idx_extra_bytes_are_refused);
    tcase_add_test(tc, idx_float_and_int_types);
    tcase_add_test(tc, npy_f32_u8_and_targets);
    tcase_add_test(tc, npy_float16_and_unsupported_dtypes);
    tcase_add_test(tc, npy_bool_inputs_are_zero_and_one);
    tcase_add_test(tc, wrapping_shapes_are_refused);
    tcase_add_test(tc, csv_with_header);
    tcase_add_test(tc, csv_label_hint);
    tcase_add_test(tc, synthetic_deterministic);
    tcase_add_test(tc, nonfinite_values_are_refused);
    tcase_add_test(tc, csv_label_note_names_the_line);
    tcase_add_test(tc, non_regular_files_are_refused_without_blocking);
    tcase_add_test(tc, text_windows_train_and_test);
    tcase_add_test(tc, text_range_splits_one_file);
    tcase_add_test(tc, tokens_shards_in_order);
    tcase_add_test(tc, tokens_pattern_below_a_literal_dir);
    tcase_add_test(tc, tokens_over_vocab_are_named);
    tcase_add_test(tc, output_in_a_token_pattern_is_an_input);
    tcase_add_test(tc, tokens_bad_shards_are_named);
    tcase_add_test(tc, windows_through_the_sampler);
    tcase_add_test(tc, memory_estimate_before_loading);
    suite_add_tcase(s, tc);
    return s;
}
