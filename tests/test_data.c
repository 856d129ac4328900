/* test_data.c - data.c: every format round-trips, every bad file is named.
 *
 * Files are written by the tests into a fresh temp dir: IDX gzipped and
 * plain, NPY float32/uint8 (+ int64 labels, float regression targets), CSV
 * with a header; the synthetic generator is deterministic per seed. Errors:
 * missing file, wrong IDX magic, truncated file, count mismatch — each
 * message names the offending file. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <zlib.h>
#include "suites.h"
#include "data.h"

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

Suite *data_suite(void)
{
    Suite *s = suite_create("data");
    TCase *tc = tcase_create("data");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, idx_gz_and_plain_round_trip);
    tcase_add_test(tc, idx_errors_name_the_file);
    tcase_add_test(tc, idx_float_and_int_types);
    tcase_add_test(tc, npy_f32_u8_and_targets);
    tcase_add_test(tc, csv_with_header);
    tcase_add_test(tc, csv_label_hint);
    tcase_add_test(tc, synthetic_deterministic);
    tcase_add_test(tc, nonfinite_values_are_refused);
    tcase_add_test(tc, csv_label_note_names_the_line);
    tcase_add_test(tc, non_regular_files_are_refused_without_blocking);
    suite_add_tcase(s, tc);
    return s;
}
