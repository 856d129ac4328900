/* data.c - datasets from IDX (.gz or plain), NPY, CSV, a seeded generator,
 * and token streams (text files, llm.c shards) cut into windows.
 *
 * Owns: data_load, data_free, data_set_windows, data_gather (see data.h). A single-member
 * gzip file is decompressed whole by libdeflate when the build has it;
 * everything else is read through zlib's gzopen/gzread, which reads plain
 * files as well as gzipped ones. Every error names the file and says what is wrong and what to do.
 * Runs in the launcher before fork; never communicates, never trains.
 */
/* The Makefile compiles this file with -O3: data_gather's conversion loop
 * runs every step. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#ifdef DDPC_HAVE_LIBDEFLATE
#include <libdeflate.h>
#endif

#include "data.h"
#include "csv_header.h"
#include "finite.h"
#include "npy_dtype.h"
#include "rng.h"
#include "tokens.h"

/* ===== reading: libdeflate for whole gzip files, zlib otherwise ===== */

/* A file being read: either decompressed whole into mem (one gzip member,
 * through libdeflate, ~1.7x zlib's speed here: 0.12 s instead of 0.19 s
 * for the 26 MB Fashion-MNIST training images) or streamed by zlib, which
 * also reads plain files and multi-member gzip. */
struct dfile {
    gzFile gz;
    unsigned char *mem;     /* [len] decompressed file, or NULL */
    size_t len, pos;
};

#ifdef DDPC_HAVE_LIBDEFLATE
/* Tries the libdeflate path on fd (a regular file of st_size bytes, at
 * offset 0); 0 with f->mem NULL when it does not apply (not gzip, several
 * members, or ISIZE wrong for a file >= 4 GiB); pread leaves fd's offset at 0. */
static int file_slurp_gzip(struct dfile *f, int fd, off_t st_size, const char *path,
                           struct ddpc_err *e)
{
    unsigned char *in = NULL;
    int rc = 0;
    if (st_size < 18)
        goto out;   /* let zlib report it */
    size_t n = (size_t)st_size;
    in = malloc(n);
    if (!in) {
        rc = DDPC_FAIL(e, DDPC_E_NOMEM, "%s: cannot allocate %zu bytes", path, n);
        goto out;
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, in + got, n - got, (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            rc = DDPC_FAIL(e, DDPC_E_DATA, "%s: read error: %s", path,
                           r < 0 ? strerror(errno) : "file shrank while reading");
            goto out;
        }
        got += (size_t)r;
    }
    if (in[0] != 0x1f || in[1] != 0x8b)
        goto out;
    /* ISIZE: the uncompressed size mod 2^32, little endian in the trailer */
    size_t isz = (size_t)in[n - 4] | (size_t)in[n - 3] << 8 | (size_t)in[n - 2] << 16 |
                 (size_t)in[n - 1] << 24;
    unsigned char *out = malloc(isz ? isz : 1);
    if (!out) {
        rc = DDPC_FAIL(e, DDPC_E_NOMEM, "%s: cannot allocate %zu bytes", path, isz);
        goto out;
    }
    struct libdeflate_decompressor *d = libdeflate_alloc_decompressor();
    if (!d) {
        free(out);
        rc = DDPC_FAIL(e, DDPC_E_NOMEM, "%s: cannot allocate a decompressor", path);
        goto out;
    }
    size_t used = 0, outn = 0;
    enum libdeflate_result r = libdeflate_gzip_decompress_ex(d, in, n, out, isz, &used, &outn);
    libdeflate_free_decompressor(d);
    if (r != LIBDEFLATE_SUCCESS || used != n || outn != isz) {
        free(out);   /* corrupt, multi-member or >= 4 GiB: zlib decides */
        goto out;
    }
    f->mem = out;
    f->len = isz;
out:
    free(in);
    return rc;
}
#endif

/* Opens path for reading without ever blocking: O_NONBLOCK, so a FIFO or a
 * device with no writer cannot hang the job before any worker starts, then
 * only a regular file is read (a FIFO, a directory, /dev/zero would block
 * or never end). */
static int file_open(struct dfile *f, const char *path, const char *what, struct ddpc_err *e)
{
    memset(f, 0, sizeof *f);
    if (!path || !*path)
        return DDPC_FAIL(e, DDPC_E_DATA, "%s: no file given in the spec", what);
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return DDPC_FAIL(e, DDPC_E_DATA, "%s: cannot open %s: %s; check the path in the spec",
                         what, path, strerror(errno));
    struct stat st;
    int flags;
    if (fstat(fd, &st) != 0 || (flags = fcntl(fd, F_GETFL)) == -1 ||
        fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) == -1) {
        int err = errno;
        (void)close(fd);
        return DDPC_FAIL(e, DDPC_E_DATA, "%s: %s: %s", what, path, strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        (void)close(fd);
        return DDPC_FAIL(e, DDPC_E_DATA, "%s: %s is not a regular file (it is a %s); data "
                         "must be a file on disk", what, path,
                         S_ISFIFO(st.st_mode) ? "FIFO" : S_ISDIR(st.st_mode) ? "directory"
                         : S_ISCHR(st.st_mode) ? "character device"
                         : S_ISBLK(st.st_mode) ? "block device"
                         : S_ISSOCK(st.st_mode) ? "socket" : "special file");
    }
#ifdef DDPC_HAVE_LIBDEFLATE
    int rc = file_slurp_gzip(f, fd, st.st_size, path, e);
    if (rc < 0 || f->mem) {
        (void)close(fd);
        return rc;
    }
#endif
    errno = 0;
    f->gz = gzdopen(fd, "rb");   /* owns fd from here; a failed gzdopen does not close it */
    if (!f->gz) {
        int err = errno;
        (void)close(fd);
        return DDPC_FAIL(e, DDPC_E_DATA, "%s: cannot open %s: %s", what, path,
                         err ? strerror(err) : "out of memory");
    }
    gzbuffer(f->gz, 1 << 17);
    return 0;
}

static void file_close(struct dfile *f)
{
    if (f->gz)
        (void)gzclose(f->gz);   /* read-only: nothing to flush */
    free(f->mem);
    memset(f, 0, sizeof *f);
}

/* Reads up to bytes; *got says how many came (short = end of file). */
static int file_read(struct dfile *f, const char *path, void *buf, size_t bytes, size_t *got,
                     struct ddpc_err *e)
{
    if (f->mem) {
        size_t n = f->len - f->pos < bytes ? f->len - f->pos : bytes;
        memcpy(buf, f->mem + f->pos, n);
        f->pos += n;
        *got = n;
        return 0;
    }
    unsigned char *p = buf;
    size_t done = 0;
    while (done < bytes) {
        size_t chunk = bytes - done;
        if (chunk > (1u << 30))
            chunk = 1u << 30;
        int r = gzread(f->gz, p + done, (unsigned)chunk);
        if (r < 0) {
            int zerr = 0;
            const char *msg = gzerror(f->gz, &zerr);
            return DDPC_FAIL(e, DDPC_E_DATA, "%s: read error: %s (corrupt gzip stream?)",
                             path, zerr == Z_ERRNO ? strerror(errno) : msg);
        }
        if (r == 0)
            break;
        done += (size_t)r;
    }
    *got = done;
    return 0;
}

static int read_exact(struct dfile *f, const char *path, void *buf, size_t bytes, const char *what,
                      struct ddpc_err *e)
{
    size_t got = 0;
    DDPC_TRY(file_read(f, path, buf, bytes, &got, e));
    if (got != bytes)
        return DDPC_FAIL(e, DDPC_E_DATA,
                         "%s: truncated: expected %zu bytes of %s, the file has only %zu; "
                         "re-download or re-create it",
                         path, bytes, what, got);
    return 0;
}

/* *out = the next `bytes` of the file in a malloc'd buffer the caller frees.
 * A decompressed file hands over its own buffer (the payload moved to the
 * front: one memmove instead of a second 47 MB buffer and its page faults). */
static int read_owned(struct dfile *f, const char *path, size_t bytes, unsigned char **out,
                      const char *what, struct ddpc_err *e)
{
    *out = NULL;
    if (f->mem && f->len - f->pos >= bytes) {
        memmove(f->mem, f->mem + f->pos, bytes);
        *out = f->mem;
        f->mem = NULL;
        f->len = f->pos = 0;
        return 0;
    }
    unsigned char *p = malloc(bytes ? bytes : 1);
    if (!p)
        return DDPC_FAIL(e, DDPC_E_NOMEM, "%s: cannot allocate %zu bytes", path, bytes);
    int rc = read_exact(f, path, p, bytes, what, e);
    if (rc < 0) {
        free(p);
        return rc;
    }
    *out = p;
    return 0;
}

/* ===== element conversion ===== */

/* IEEE 754 binary16 (numpy's float16), exactly: every half is a double. */
static double half_to_double(uint16_t h)
{
    int exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    double v = exp == 0 ? ldexp(man, -24)                     /* zero, subnormal */
             : exp == 31 ? (man ? NAN : INFINITY)
             : ldexp(man + 1024, exp - 25);
    return h & 0x8000 ? -v : v;
}

/* kind: 'u' unsigned, 'i' signed, 'f' float; size 1, 2, 4, 8 bytes (a
 * float: 2, 4, 8). */
static double elem_load(const unsigned char *p, char kind, int size, int big_endian)
{
    unsigned char b[8];
    for (int i = 0; i < size; i++)
        b[i] = big_endian ? p[size - 1 - i] : p[i];   /* to little endian */
    uint64_t u = 0;
    for (int i = size - 1; i >= 0; i--)
        u = (u << 8) | b[i];
    if (kind == 'f') {
        if (size == 2)
            return half_to_double((uint16_t)u);
        if (size == 4) {
            uint32_t w = (uint32_t)u;
            float fv;
            memcpy(&fv, &w, 4);
            return fv;
        }
        double dv;
        memcpy(&dv, &u, 8);
        return dv;
    }
    if (kind == 'i') {
        int shift = 64 - 8 * size;
        return (double)((int64_t)(u << shift) >> shift);
    }
    return (double)u;
}

static int host_big_endian(void)
{
    const uint16_t one = 1;
    return *(const unsigned char *)&one == 0;
}

/* One NaN or infinity trains the whole model to chance without any error:
 * refuse the file, naming the sample and column. */
static int check_finite(const float *x, int64_t count, int64_t per_sample, const char *path,
                        const char *what, struct ddpc_err *e)
{
    int64_t i = ddpc_first_nonfinite(x, count);
    if (i < 0)
        return 0;
    return DDPC_FAIL(e, DDPC_E_DATA, "%s: %s of sample %lld, column %lld (element %lld) is %s "
                     "(as float32); fix or drop that sample", path, what,
                     (long long)(i / per_sample), (long long)(i % per_sample), (long long)i,
                     ddpc_nonfinite_name(x[i]));
}

/* labels[n] from raw integer elements; classes = max + 1. */
static int labels_from_raw(struct ddpc_dataset *ds, const unsigned char *raw, int64_t n,
                           char kind, int size, int big_endian, const char *path,
                           struct ddpc_err *e)
{
    if (kind == 'f')
        return DDPC_FAIL(e, DDPC_E_DATA, "%s: labels must be integers for classification", path);
    ds->labels = malloc((size_t)n * sizeof *ds->labels);
    if (!ds->labels)
        return DDPC_FAIL(e, DDPC_E_NOMEM, "%s: cannot allocate %lld labels", path, (long long)n);
    int32_t mx = -1;
    for (int64_t i = 0; i < n; i++) {
        double v = elem_load(raw + (size_t)i * size, kind, size, big_endian);
        if (v < 0 || v > 1e9)
            return DDPC_FAIL(e, DDPC_E_DATA, "%s: label %lld is %g; class labels must be "
                             "0..classes-1", path, (long long)i, v);
        ds->labels[i] = (int32_t)v;
        if (ds->labels[i] > mx)
            mx = ds->labels[i];
    }
    ds->classes = mx + 1;
    return 0;
}

/* ===== IDX ===== */

/* A whole array as an IDX or NPY file stores it, before conversion. */
struct raw_array {
    char     kind;          /* 'u' 'i' 'f' */
    int      size;          /* bytes per element */
    int      big_endian;    /* IDX: always; NPY: from its descr */
    int      boolean;       /* NPY bool: 0 or 1 (kind 'u', size 1), not a pixel */
    int      ndims;
    int64_t  dims[8];
    int64_t  count;         /* elements */
    unsigned char *raw;     /* [count * size], as stored; owned */
};

/* Checks that inputs x and labels y describe the same samples and makes x
 * the dataset's inputs: uint8 and native float32 are taken over without a
 * copy, anything else is converted to float. Labels are the caller's. */
static int inputs_from_array(const struct ddpc_data_source *src, struct raw_array *x,
                             const struct raw_array *y, struct ddpc_dataset *ds,
                             struct ddpc_err *e)
{
    ds->n = x->dims[0];
    int64_t feat = x->count / x->dims[0];
    if (y->dims[0] != ds->n)
        return DDPC_FAIL(e, DDPC_E_DATA, "%s has %lld samples but %s has %lld labels; they "
                         "must match", src->inputs, (long long)ds->n, src->labels,
                         (long long)y->dims[0]);
    if (feat > INT32_MAX)
        return DDPC_FAIL(e, DDPC_E_DATA, "%s: %lld features per sample is too many",
                         src->inputs, (long long)feat);
    ds->features = (int32_t)feat;
    if (x->kind == 'u' && x->size == 1 && !x->boolean) {
        ds->dtype = DDPC_DTYPE_U8;
        ds->u8_scale = 1.0f / 255.0f;
        ds->x = x->raw;
        x->raw = NULL;
    } else if (x->kind == 'f' && x->size == 4 && x->big_endian == host_big_endian()) {
        ds->dtype = DDPC_DTYPE_F32;
        ds->u8_scale = 1.0f;
        ds->x = x->raw;
        x->raw = NULL;
    } else {
        float *xf = malloc((size_t)x->count * sizeof *xf);
        if (!xf)
            return DDPC_FAIL(e, DDPC_E_NOMEM, "%s: cannot allocate inputs", src->inputs);
        /* a bool is 1.0 where true, as torch.from_numpy(a).float() */
        for (int64_t i = 0; i < x->count; i++)
            xf[i] = x->boolean ? (float)(x->raw[i] != 0)
                               : (float)elem_load(x->raw + (size_t)i * x->size, x->kind,
                                                  x->size, x->big_endian);
        ds->dtype = DDPC_DTYPE_F32;
        ds->u8_scale = 1.0f;
        ds->x = xf;
    }
    if (ds->dtype == DDPC_DTYPE_F32)
        return check_finite(ds->x, x->count, feat, src->inputs, "input", e);
    return 0;
}

/* Reads src's inputs and labels with one format's reader; on failure
 * nothing is left allocated. */
static int read_pair(int (*reader)(const char *, const char *, struct raw_array *,
                                   struct ddpc_err *),
                     const struct ddpc_data_source *src, struct raw_array *x,
                     struct raw_array *y, struct ddpc_err *e)
{
    DDPC_TRY(reader(src->inputs, "data inputs", x, e));
    int rc = reader(src->labels, "data labels", y, e);
    if (rc < 0) {
        free(x->raw);
        x->raw = NULL;
    }
    return rc;
}

static int idx_read(const char *path, const char *what, struct raw_array *a,
                    struct ddpc_err *e)
{
    memset(a, 0, sizeof *a);
    struct dfile f;
    DDPC_TRY(file_open(&f, path, what, e));
    unsigned char hdr[4];
    int rc = read_exact(&f, path, hdr, 4, "IDX header", e);
    if (rc < 0)
        goto out;
    a->big_endian = 1;
    a->ndims = hdr[3];
    switch (hdr[2]) {
    case 0x08: a->kind = 'u'; a->size = 1; break;
    case 0x09: a->kind = 'i'; a->size = 1; break;
    case 0x0B: a->kind = 'i'; a->size = 2; break;
    case 0x0C: a->kind = 'i'; a->size = 4; break;
    case 0x0D: a->kind = 'f'; a->size = 4; break;
    case 0x0E: a->kind = 'f'; a->size = 8; break;
    default:   a->size = 0; break;
    }
    if (hdr[0] != 0 || hdr[1] != 0 || a->size == 0 || a->ndims < 1 || a->ndims > 4) {
        rc = DDPC_FAIL(e, DDPC_E_DATA,
                       "%s: not an IDX file (magic bytes %02x %02x %02x %02x; expected "
                       "00 00 <type 08..0e> <dims 1..4>); is format: idx right for it?",
                       path, hdr[0], hdr[1], hdr[2], hdr[3]);
        goto out;
    }
    unsigned char dimb[16];
    rc = read_exact(&f, path, dimb, (size_t)4 * a->ndims, "IDX dimensions", e);
    if (rc < 0)
        goto out;
    a->count = 1;
    int wrapped = 0;    /* dims whose product wraps to a small count: see npy_read */
    for (int i = 0; i < a->ndims; i++) {
        const unsigned char *d = dimb + 4 * i;
        a->dims[i] = ((int64_t)d[0] << 24) | ((int64_t)d[1] << 16) | ((int64_t)d[2] << 8) | d[3];
        wrapped |= __builtin_mul_overflow(a->count, a->dims[i], &a->count);
    }
    if (wrapped || a->count <= 0 || a->count > ((int64_t)1 << 40)) {
        rc = wrapped ? DDPC_FAIL(e, DDPC_E_DATA, "%s: the IDX header's dimensions multiply "
                                 "to more elements than any file can hold: the header is "
                                 "corrupt", path)
                     : DDPC_FAIL(e, DDPC_E_DATA, "%s: IDX header gives %lld elements", path,
                                 (long long)a->count);
        goto out;
    }
    size_t bytes = (size_t)a->count * a->size;
    /* more data than the header announces (two IDX files joined with cat,
     * a header that undercounts): the rest would be dropped without a
     * word, as llm.c shards' extra bytes are refused (tokens.c) */
    int extra = f.mem && f.len - f.pos > bytes;
    rc = read_owned(&f, path, bytes, &a->raw, "data the IDX header announces", e);
    if (rc == 0 && !extra && f.gz) {
        unsigned char more;
        size_t got = 0;
        rc = file_read(&f, path, &more, 1, &got, e);
        extra = rc == 0 && got > 0;
    }
    if (rc == 0 && extra) {
        char shape[96] = "";
        for (int i = 0, at = 0; i < a->ndims && at < (int)sizeof shape; i++)
            at += snprintf(shape + at, sizeof shape - (size_t)at, "%s%lld", i ? " x " : "",
                           (long long)a->dims[i]);
        rc = DDPC_FAIL(e, DDPC_E_DATA, "%s: the file holds more than the %s elements its IDX "
                       "header announces: extra bytes after the data (files joined with cat? "
                       "give one header the total count, or keep them as separate files)",
                       path, shape);
    }
out:
    file_close(&f);
    if (rc < 0) {
        free(a->raw);
        a->raw = NULL;
    }
    return rc;
}

static int load_idx(const struct ddpc_data_source *src, struct ddpc_dataset *ds,
                    struct ddpc_err *e)
{
    struct raw_array x, y;
    DDPC_TRY(read_pair(idx_read, src, &x, &y, e));
    int rc;
    if (y.ndims != 1)
        rc = DDPC_FAIL(e, DDPC_E_DATA, "%s: labels must be one-dimensional, the file has %d "
                       "dimensions", src->labels, y.ndims);
    else if ((rc = inputs_from_array(src, &x, &y, ds, e)) == 0)
        rc = labels_from_raw(ds, y.raw, y.count, y.kind, y.size, y.big_endian, src->labels, e);
    free(x.raw);
    free(y.raw);
    return rc;
}

/* ===== NPY ===== */

/* Finds 'key': in the header dict and returns a pointer past the colon. */
static const char *npy_key(const char *hdr, const char *key)
{
    char pat[32];
    snprintf(pat, sizeof pat, "'%s'", key);
    const char *p = strstr(hdr, pat);
    if (!p) {
        snprintf(pat, sizeof pat, "\"%s\"", key);
        p = strstr(hdr, pat);
    }
    if (!p)
        return NULL;
    p = strchr(p + strlen(pat), ':');
    if (!p)
        return NULL;
    p++;
    while (isspace((unsigned char)*p))
        p++;
    return p;
}

static int npy_read(const char *path, const char *what, struct raw_array *a,
                    struct ddpc_err *e)
{
    memset(a, 0, sizeof *a);
    struct dfile f;
    char *hdr = NULL;
    DDPC_TRY(file_open(&f, path, what, e));
    unsigned char pre[8];
    int rc = read_exact(&f, path, pre, 8, "NPY preamble", e);
    if (rc < 0)
        goto out;
    if (memcmp(pre, "\x93NUMPY", 6) != 0 || pre[6] < 1 || pre[6] > 3) {
        rc = DDPC_FAIL(e, DDPC_E_DATA, "%s: not a .npy file (no \\x93NUMPY magic); save it "
                       "with numpy.save or use another data format", path);
        goto out;
    }
    /* v1: u16 header length; v2/v3: u32, both little endian */
    int lenbytes = pre[6] == 1 ? 2 : 4;
    unsigned char lb[4] = {0, 0, 0, 0};
    rc = read_exact(&f, path, lb, (size_t)lenbytes, "NPY header length", e);
    if (rc < 0)
        goto out;
    size_t hlen = (size_t)lb[0] | ((size_t)lb[1] << 8) | ((size_t)lb[2] << 16) |
                  ((size_t)lb[3] << 24);
    if (hlen > (1u << 20)) {
        rc = DDPC_FAIL(e, DDPC_E_DATA, "%s: NPY header of %zu bytes is implausible", path, hlen);
        goto out;
    }
    hdr = malloc(hlen + 1);
    if (!hdr) {
        rc = DDPC_FAIL(e, DDPC_E_NOMEM, "%s: out of memory", path);
        goto out;
    }
    rc = read_exact(&f, path, hdr, hlen, "NPY header", e);
    if (rc < 0)
        goto out;
    hdr[hlen] = 0;
    const char *d = npy_key(hdr, "descr");
    const char *fo = npy_key(hdr, "fortran_order");
    const char *sh = npy_key(hdr, "shape");
    if (!d || !fo || !sh || (*d != '\'' && *d != '"') || *sh != '(') {
        rc = DDPC_FAIL(e, DDPC_E_DATA, "%s: cannot parse the NPY header \"%s\"", path, hdr);
        goto out;
    }
    if (strncmp(fo, "False", 5) != 0) {
        rc = DDPC_FAIL(e, DDPC_E_DATA, "%s: Fortran-order arrays are not supported; save "
                       "with numpy.ascontiguousarray", path);
        goto out;
    }
    const char *dend = strchr(d + 1, *d);   /* e.g. '<f4' '|u1' '>i8' */
    struct npy_dtype dt;
    if (!dend || npy_dtype_parse(d + 1, (size_t)(dend - d - 1), &dt) < 0) {
        rc = DDPC_FAIL(e, DDPC_E_DATA, "%s: NPY dtype %.*s is not supported (use "
                       NPY_DTYPES_READ ")", path, dend ? (int)(dend - d + 1) : 12, d);
        goto out;
    }
    a->kind = dt.kind;
    a->size = dt.size;
    a->big_endian = dt.big_endian;
    a->boolean = dt.boolean;
    const char *p = sh + 1;
    a->count = 1;
    while (*p && *p != ')') {
        while (*p == ' ' || *p == ',')
            p++;
        if (*p == ')')
            break;
        char *endp;
        long long v = strtoll(p, &endp, 10);
        if (endp == p || v < 0 || a->ndims == 8) {
            rc = DDPC_FAIL(e, DDPC_E_DATA, "%s: bad NPY shape in \"%s\"", path, hdr);
            goto out;
        }
        a->dims[a->ndims++] = v;
        /* a shape whose product wraps (2^62 + 1 rows of 4) would read a
         * few bytes as a huge array, and index past them */
        if (__builtin_mul_overflow(a->count, (int64_t)v, &a->count) ||
            a->count > INT64_MAX / 8) {
            rc = DDPC_FAIL(e, DDPC_E_DATA, "%s: the NPY shape in \"%s\" has more elements "
                           "than any file can hold: the header is corrupt", path, hdr);
            goto out;
        }
        p = endp;
    }
    if (a->ndims == 0 || a->count <= 0) {
        rc = DDPC_FAIL(e, DDPC_E_DATA, "%s: NPY array is empty or a scalar", path);
        goto out;
    }
    size_t bytes = (size_t)a->count * a->size;
    a->raw = malloc(bytes);
    if (!a->raw) {
        rc = DDPC_FAIL(e, DDPC_E_NOMEM, "%s: cannot allocate %zu bytes", path, bytes);
        goto out;
    }
    rc = read_exact(&f, path, a->raw, bytes, "data the NPY header announces", e);
out:
    free(hdr);
    file_close(&f);
    if (rc < 0) {
        free(a->raw);
        a->raw = NULL;
    }
    return rc;
}

static int load_npy(const struct ddpc_data_source *src, struct ddpc_dataset *ds,
                    struct ddpc_err *e)
{
    struct raw_array x, y;
    DDPC_TRY(read_pair(npy_read, src, &x, &y, e));
    int rc = inputs_from_array(src, &x, &y, ds, e);
    if (rc < 0)
        goto out;
    if (y.kind == 'f') {
        /* float labels: regression targets [n, targets] */
        int64_t tg = y.count / y.dims[0];
        ds->classes = 0;
        ds->targets = (int32_t)tg;
        ds->y = malloc((size_t)y.count * sizeof *ds->y);
        if (!ds->y) {
            rc = DDPC_FAIL(e, DDPC_E_NOMEM, "%s: cannot allocate targets", src->labels);
            goto out;
        }
        for (int64_t i = 0; i < y.count; i++)
            ds->y[i] = (float)elem_load(y.raw + (size_t)i * y.size, 'f', y.size,
                                        y.big_endian);
        rc = check_finite(ds->y, y.count, tg, src->labels, "target", e);
    } else {
        if (y.count != y.dims[0]) {   /* [n] or [n, 1] */
            rc = DDPC_FAIL(e, DDPC_E_DATA, "%s: integer labels must be one per sample, shape "
                           "(n,) or (n, 1)", src->labels);
            goto out;
        }
        rc = labels_from_raw(ds, y.raw, y.count, y.kind, y.size, y.big_endian, src->labels, e);
    }
out:
    free(x.raw);
    free(y.raw);
    return rc;
}

/* ===== CSV ===== */

/* Reads the whole (possibly gzipped) file into a NUL-terminated buffer. */
static int slurp(const char *path, const char *what, char **out, size_t *len,
                 struct ddpc_err *e)
{
    *out = NULL;
    struct dfile f;
    DDPC_TRY(file_open(&f, path, what, e));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    int rc = 0;
    for (;;) {
        if (!buf) {
            rc = DDPC_FAIL(e, DDPC_E_NOMEM, "%s: out of memory", path);
            break;
        }
        size_t got = 0;
        rc = file_read(&f, path, buf + n, cap - n, &got, e);
        if (rc < 0)
            break;
        n += got;
        if (n < cap)
            break;
        cap *= 2;
        char *nb = realloc(buf, cap + 1);
        if (!nb)
            free(buf);
        buf = nb;
    }
    file_close(&f);
    if (rc < 0) {
        free(buf);
        return rc;
    }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return 0;
}

/* Splits one line in place on commas; returns the field count (max cap). */
static int csv_fields(char *line, char **fields, int cap)
{
    int n = 0;
    char *p = line;
    for (;;) {
        if (n < cap)
            fields[n] = p;
        n++;
        char *c = strchr(p, ',');
        if (!c)
            break;
        *c = 0;
        p = c + 1;
    }
    return n;
}

static int csv_number(const char *s, double *v)
{
    while (isspace((unsigned char)*s) || *s == '"')
        s++;
    /* decimal only, as pandas reads a CSV: strtod's 0x10 is 16 */
    const char *d = s + (*s == '+' || *s == '-');
    if (d[0] == '0' && (d[1] == 'x' || d[1] == 'X'))
        return 0;
    char *end;
    errno = 0;
    *v = strtod(s, &end);
    if (end == s || errno == ERANGE)
        return 0;
    while (isspace((unsigned char)*end) || *end == '"')
        end++;
    return *end == 0;
}

/* Long on purpose (~170 lines): one pass over the file's text whose buffers
 * (lines, fields, x, y, labels) all end at one cleanup label; split, each
 * piece would hand their ownership back and forth. */
static int load_csv(const struct ddpc_data_source *src, struct ddpc_dataset *ds,
                    struct ddpc_err *e)
{
    const char *path = src->path;
    char *text;
    size_t len;
    DDPC_TRY(slurp(path, "data csv", &text, &len, e));
    int rc = 0;
    /* pass 1: count data lines and columns */
    int cols = 0;
    int64_t rows = 0;
    char **fields = NULL;
    float *x = NULL, *y = NULL;
    int32_t *labels = NULL;
    unsigned char *notlab = NULL;
    double *cmax = NULL;
    size_t nlines = 0;
    for (size_t i = 0; i < len; i++)
        nlines += text[i] == '\n';
    nlines++;
    char **lines = malloc(nlines * sizeof *lines);
    if (!lines) {
        rc = DDPC_FAIL(e, DDPC_E_NOMEM, "%s: out of memory", path);
        goto out;
    }
    /* the lines below are C strings: a NUL would end the file there, and
     * every row after it would be dropped without a word (a file cut short
     * by a crash is often padded with zeros) */
    const char *nul = memchr(text, '\0', len);
    if (nul) {
        size_t line = 1;
        for (const char *c = text; c < nul; c++)
            line += *c == '\n';
        rc = DDPC_FAIL(e, DDPC_E_DATA, "%s:%zu: a NUL byte (byte %zu of %zu): a CSV file is "
                       "text, and this one is binary or zero-filled from there (a copy or "
                       "write cut short?); fix or regenerate the file", path, line,
                       (size_t)(nul - text) + 1, len);
        goto out;
    }
    size_t nl = 0;
    /* a UTF-8 byte order mark (Excel's "CSV UTF-8") is no part of the
     * first field: with it, a first data row read as a header, dropped */
    size_t bom = len >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0 ? 3 : 0;
    for (char *p = text + bom; p && *p;) {
        char *q = strchr(p, '\n');
        if (q)
            *q = 0;
        size_t l = strlen(p);
        if (l && p[l - 1] == '\r')
            p[l - 1] = 0;
        lines[nl++] = p;
        p = q ? q + 1 : NULL;
    }
    /* columns from the first non-empty line */
    size_t first = 0;
    while (first < nl && lines[first][0] == 0)
        first++;
    if (first == nl) {
        rc = DDPC_FAIL(e, DDPC_E_DATA, "%s: the CSV file is empty", path);
        goto out;
    }
    cols = 1;
    for (const char *c = lines[first]; *c; c++)
        cols += *c == ',';
    if (cols < 2) {
        rc = DDPC_FAIL(e, DDPC_E_DATA, "%s: needs a label column and at least one feature "
                       "column, comma-separated", path);
        goto out;
    }
    int lc = src->label_column < 0 ? cols + src->label_column : src->label_column;
    if (lc < 0 || lc >= cols) {
        rc = DDPC_FAIL(e, DDPC_E_DATA, "%s: label_column %d is out of range for %d columns",
                       path, (int)src->label_column, cols);
        goto out;
    }
    fields = malloc((size_t)cols * sizeof *fields);
    x = malloc(((size_t)nl * (cols - 1) + 1) * sizeof *x);
    y = malloc(((size_t)nl + 1) * sizeof *y);
    if (!fields || !x || !y) {
        rc = DDPC_FAIL(e, DDPC_E_NOMEM, "%s: out of memory", path);
        goto out;
    }
    int integral = 1;
    double ymax = -1;
    /* per column: whole numbers >= 0 only, and the largest (label hint) */
    notlab = calloc((size_t)cols, 1);
    cmax = calloc((size_t)cols, sizeof *cmax);
    if (!notlab || !cmax) {
        rc = DDPC_FAIL(e, DDPC_E_NOMEM, "%s: out of memory", path);
        goto out;
    }
    for (size_t li = first; li < nl; li++) {
        if (lines[li][0] == 0)
            continue;
        if (li == first && csv_is_column_numbers(lines[li]))
            continue;   /* pandas' header of column numbers (csv_header.h) */
        int nf = csv_fields(lines[li], fields, cols);
        if (nf != cols) {
            rc = DDPC_FAIL(e, DDPC_E_DATA, "%s:%zu: expected %d columns like the first line, "
                           "got %d", path, li + 1, cols, nf);
            goto out;
        }
        float *xr = x + (size_t)rows * (cols - 1);
        int k = 0, bad = -1;
        double yv = 0;
        for (int c = 0; c < cols; c++) {
            double v;
            if (!csv_number(fields[c], &v)) {
                bad = c;
                break;
            }
            if (!isfinite((float)v)) {
                bad = c;
                break;
            }
            if (c == lc)
                yv = v;
            else
                xr[k++] = (float)v;
            if (v != floor(v) || v < 0 || v > 1e6)
                notlab[c] = 1;
            else if (v > cmax[c])
                cmax[c] = v;
        }
        if (bad >= 0) {
            double v = 0;
            int number = csv_number(fields[bad], &v);
            if (li == first && !number)   /* a header line */
                continue;
            rc = DDPC_FAIL(e, DDPC_E_DATA, "%s:%zu: column %d (\"%s\") is %s", path, li + 1,
                           bad + 1, fields[bad], number ? "not finite as a float32; fix or "
                           "drop that row" : "not a number");
            goto out;
        }
        y[rows] = (float)yv;
        if (yv != floor(yv) || yv < 0 || yv > 1e6) {
            if (integral)
                (void)snprintf(ds->label_note, sizeof ds->label_note,
                               "%s:%zu: label %s (column %d) is not a class index 0, 1, 2, ...",
                               path, li + 1, fields[lc], lc + 1);
            integral = 0;
        } else if (yv > ymax) {
            ymax = yv;
            ds->label_max_line = (int64_t)li + 1;
        }
        rows++;
    }
    if (rows == 0) {
        rc = DDPC_FAIL(e, DDPC_E_DATA, "%s: no data rows", path);
        goto out;
    }
    ds->n = rows;
    ds->features = cols - 1;
    ds->label_ok = !notlab[lc];
    ds->label_hint = -1;
    for (int k = -1; k < cols && ds->label_hint < 0; k++) {   /* the last column first */
        int c = k < 0 ? cols - 1 : k;
        if (c != lc && !notlab[c]) {
            ds->label_hint = c;
            ds->label_hint_max = (int32_t)cmax[c];
        }
    }
    ds->dtype = DDPC_DTYPE_F32;
    ds->u8_scale = 1.0f;
    ds->x = x;
    x = NULL;
    /* y is always kept (regression / mse); integral non-negative labels also
     * become class indices */
    ds->targets = 1;
    ds->y = y;
    y = NULL;
    if (integral) {
        labels = malloc((size_t)rows * sizeof *labels);
        if (!labels) {
            rc = DDPC_FAIL(e, DDPC_E_NOMEM, "%s: out of memory", path);
            goto out;
        }
        for (int64_t i = 0; i < rows; i++)
            labels[i] = (int32_t)ds->y[i];
        ds->labels = labels;
        labels = NULL;
        ds->classes = (int32_t)ymax + 1;
    }
out:
    free(notlab);
    free(cmax);
    free(labels);
    free(x);
    free(y);
    free(fields);
    free(lines);
    free(text);
    return rc;
}

/* ===== synthetic ===== */

/* classes > 0: Gaussian blobs, x = centre[label] + N(0, 1), centres N(0, 1);
 * classes 0: x ~ N(0, 1), y = x . w + 0.1 N(0, 1), w ~ N(0, 1/features).
 * The task (centres, w) depends only on (features, classes), so a train and
 * a test set with different seeds share it; the samples come from one
 * xoshiro stream seeded by src->seed, in a fixed order. */
static int load_synthetic(const struct ddpc_data_source *src, struct ddpc_dataset *ds,
                          struct ddpc_err *e)
{
    if (src->samples <= 0 || src->features <= 0 || src->classes < 0)
        return DDPC_FAIL(e, DDPC_E_DATA, "synthetic data needs samples > 0 and features > 0 "
                         "(got %lld, %d)", (long long)src->samples, (int)src->features);
    int64_t n = src->samples;
    int f = src->features, k = src->classes;
    struct ddpc_rng r, task;
    rng_seed(&r, src->seed);
    rng_seed2(&task, 0x7461736bull /* "task" */, (uint64_t)f * 65536u + (uint64_t)k);
    float *x = malloc((size_t)n * f * sizeof *x);
    if (!x)
        return DDPC_FAIL(e, DDPC_E_NOMEM, "synthetic: cannot allocate %lld x %d inputs",
                         (long long)n, f);
    ds->x = x;
    ds->n = n;
    ds->features = f;
    ds->dtype = DDPC_DTYPE_F32;
    ds->u8_scale = 1.0f;
    if (k > 0) {
        float *centre = malloc((size_t)k * f * sizeof *centre);   /* [k, f] */
        ds->labels = malloc((size_t)n * sizeof *ds->labels);
        if (!centre || !ds->labels) {
            free(centre);
            return DDPC_FAIL(e, DDPC_E_NOMEM, "synthetic: out of memory");
        }
        for (size_t i = 0; i < (size_t)k * f; i++)
            centre[i] = (float)rng_normal(&task);
        for (int64_t i = 0; i < n; i++) {
            int c = (int)rng_below(&r, (uint64_t)k);
            ds->labels[i] = c;
            for (int j = 0; j < f; j++)
                x[(size_t)i * f + j] = centre[(size_t)c * f + j] + (float)rng_normal(&r);
        }
        free(centre);
        ds->classes = k;
    } else {
        float *w = malloc((size_t)f * sizeof *w);
        ds->y = malloc((size_t)n * sizeof *ds->y);
        if (!w || !ds->y) {
            free(w);
            return DDPC_FAIL(e, DDPC_E_NOMEM, "synthetic: out of memory");
        }
        for (int j = 0; j < f; j++)
            w[j] = (float)(rng_normal(&task) / sqrt((double)f));
        for (int64_t i = 0; i < n; i++) {
            double acc = 0;
            for (int j = 0; j < f; j++) {
                float v = (float)rng_normal(&r);
                x[(size_t)i * f + j] = v;
                acc += (double)v * w[j];
            }
            ds->y[i] = (float)(acc + 0.1 * rng_normal(&r));
        }
        free(w);
        ds->classes = 0;
        ds->targets = 1;
    }
    return 0;
}

/* ===== token streams: text (bytes) and tokens (llm.c shards) ===== */

/* Reads bytes [off, off + len) of file f (listed by tokens_list) into buf;
 * the file must still have the size it had when listed. */
static int token_file_read(const struct ddpc_token_file *f, int64_t off, size_t len,
                           unsigned char *buf, struct ddpc_err *e)
{
    int fd = open(f->path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return DDPC_FAIL(e, DDPC_E_DATA, "cannot open %s: %s; check data's path in the spec",
                         f->path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (int64_t)st.st_size != f->bytes) {
        (void)close(fd);
        return DDPC_FAIL(e, DDPC_E_DATA, "%s changed while the job was reading it (it had "
                         "%lld bytes); run the job again when it is complete", f->path,
                         (long long)f->bytes);
    }
    size_t got = 0;
    while (got < len) {
        size_t want = len - got > ((size_t)1 << 30) ? (size_t)1 << 30 : len - got;
        ssize_t r = pread(fd, buf + got, want, (off_t)(off + (int64_t)got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            int err = errno;
            (void)close(fd);
            return DDPC_FAIL(e, DDPC_E_DATA, "%s: read error: %s", f->path,
                             r < 0 ? strerror(err) : "the file shrank while the job read it");
        }
        got += (size_t)r;
    }
    (void)close(fd);
    return 0;
}

static void u16_from_le(uint16_t *t, size_t n)
{
    if (!host_big_endian())
        return;
    for (size_t i = 0; i < n; i++)
        t[i] = (uint16_t)(t[i] >> 8 | t[i] << 8);
}

/* The source's range of its files' token stream, in its stored type. */
static int load_tokens(const struct ddpc_data_source *src, struct ddpc_dataset *ds,
                       struct ddpc_err *e)
{
    char why[PATH_MAX + 256];
    struct ddpc_token_files *tf = &ds->files;
    if (tokens_list(src->path, (size_t)src->path_literal, src->format, tf, why,
                    sizeof why) < 0)
        return DDPC_FAIL(e, DDPC_E_DATA, "%s; check data's path in the spec", why);
    int64_t a, b;
    tokens_range(tf->total, src->range_lo, src->range_hi, &a, &b);
    const size_t elem = (size_t)tf->elem, n = (size_t)(b - a);
    unsigned char *buf = malloc(n ? n * elem : 1);
    if (!buf)
        return DDPC_FAIL(e, DDPC_E_NOMEM, "%s: cannot allocate %zu tokens", ds->source, n);
    ds->x = buf;
    ds->dtype = src->format == DDPC_DATA_TOKENS ? DDPC_DTYPE_U16 : DDPC_DTYPE_U8;
    ds->u8_scale = 1.0f;
    ds->ntok = (int64_t)n;
    ds->tok_first = a;
    ds->range_lo = src->range_lo;
    ds->range_hi = src->range_hi;
    ds->max_token = -1;
    for (int i = 0; i < tf->n; i++) {
        const struct ddpc_token_file *f = &tf->f[i];
        int64_t lo, hi;
        if (!tokens_file_part(f, a, b, &lo, &hi))
            continue;
        DDPC_TRY(token_file_read(f, (int64_t)tf->header + (lo - f->first) * (int64_t)elem,
                                 (size_t)(hi - lo) * elem, buf + (size_t)(lo - a) * elem, e));
    }
    int32_t mx = -1;
    if (ds->dtype == DDPC_DTYPE_U16) {
        uint16_t *t = (uint16_t *)buf, m = 0;
        u16_from_le(t, n);
        for (size_t i = 0; i < n; i++)
            m = t[i] > m ? t[i] : m;
        mx = n ? m : -1;
    } else {
        uint8_t m = 0;
        for (size_t i = 0; i < n; i++)
            m = buf[i] > m ? buf[i] : m;
        mx = n ? m : -1;
    }
    ds->max_token = mx;
    return 0;
}

static int64_t token_at(const struct ddpc_dataset *ds, int64_t i)
{
    return ds->dtype == DDPC_DTYPE_U16 ? ((const uint16_t *)ds->x)[i]
                                       : ((const uint8_t *)ds->x)[i];
}

/* " (range [0.9, 1] of its 1000 tokens)" when the source takes a part. */
static const char *range_note(const struct ddpc_dataset *ds, char *buf, size_t cap)
{
    buf[0] = '\0';
    if (ds->range_lo > 0 || ds->range_hi < 1)
        snprintf(buf, cap, " (range [%g, %g] of its %lld tokens)", ds->range_lo, ds->range_hi,
                 (long long)ds->files.total);
    return buf;
}

int data_set_windows(struct ddpc_dataset *ds, int32_t T, int64_t stride, int32_t vocab,
                     struct ddpc_err *e)
{
    char note[128];
    if (ds->files.n < 1 || !ds->x)
        return DDPC_FAIL(e, DDPC_E_INVALID, "%s is not a token stream (format text or tokens); "
                         "a gpt model reads its data as tokens", ds->source);
    if (T < 1 || stride < 1)
        return DDPC_FAIL(e, DDPC_E_INVALID, "windows of %d tokens at stride %lld", (int)T,
                         (long long)stride);
    if (vocab > 0 && ds->max_token >= vocab) {
        int64_t i = 0;
        while (i < ds->ntok && token_at(ds, i) < vocab)
            i++;
        int64_t pos = 0;
        const struct ddpc_token_file *f = tokens_locate(&ds->files, ds->tok_first + i, &pos);
        int text = ds->dtype == DDPC_DTYPE_U8;
        return DDPC_FAIL(e, DDPC_E_DATA, "%s: %s %lld (counting from 0) is %lld, not below "
                         "model.vocab_size %d%s; set model.vocab_size to at least %d%s",
                         f ? f->path : ds->source, text ? "byte" : "token", (long long)pos,
                         (long long)token_at(ds, i), (int)vocab,
                         ds->max_token > token_at(ds, i) ? " (and larger ones follow)" : "",
                         (int)ds->max_token + 1,
                         text ? " (256 takes every byte)"
                              : ", or use shards tokenized for this vocabulary");
    }
    int64_t w = tokens_windows(ds->ntok, T, stride);
    if (w < 1)
        return DDPC_FAIL(e, DDPC_E_DATA, "%s has %lld tokens%s, fewer than the block_size + 1 "
                         "= %lld one window of the model needs; use more data, a wider range, "
                         "or a smaller model.block_size", ds->source, (long long)ds->ntok,
                         range_note(ds, note, sizeof note), (long long)T + 1);
    ds->n = w;
    ds->features = T;
    ds->seq_len = T;
    ds->stride = stride;
    ds->classes = ds->max_token + 1;
    return 0;
}

/* ===== memory estimate (before loading) ===== */

#ifdef DDPC_HAVE_LIBDEFLATE
#define DATA_WHOLE 1
#else
#define DATA_WHOLE 0
#endif

void data_file_mem(uint64_t bytes, int gzip, uint32_t isize, uint64_t known, int whole,
                   struct data_mem *m)
{
    if (!gzip) {
        /* read whole and freed, then streamed into the array: never both */
        m->peak = m->held = bytes;
        return;
    }
    /* ISIZE is mod 2^32, and a multi-member file's is its last member's;
     * deflate never more than doubles its input (a code is at most 15
     * bits), so an ISIZE below half the compressed bytes is one of those,
     * and the size is at least that half (ISIZE + 2^32 would be far too
     * much for a bgzip file's last 64 KiB block). A header's size (IDX,
     * NPY) is the size. */
    uint64_t floor = bytes > 18 ? (bytes - 18) / 2 : 0;
    uint64_t size = known ? known : isize > floor ? isize : floor;
    int fits = size == (uint64_t)isize;   /* what file_slurp_gzip decompresses whole */
    if (whole && fits)
        m->peak = bytes + size;   /* the compressed file and its output at once */
    else if (whole)
        m->peak = bytes > size ? bytes : size;   /* libdeflate gives up, zlib streams */
    else
        m->peak = size;
    m->held = size;
    m->gz += bytes;
    m->raw += size;
}

uint64_t data_mem_together(const struct data_mem *a, const struct data_mem *b)
{
    uint64_t x = a->peak + b->held, y = b->peak + a->held;
    return x > y ? x : y;
}

/* path's first bytes (decompressed when gzip) into buf, and what
 * data_file_mem needs to know of it; -1 when it is no regular file or
 * cannot be read. */
static int mem_peek(const char *path, unsigned char *buf, int cap, uint64_t *bytes, int *gzip,
                    uint32_t *isize)
{
    if (!path || !*path)
        return -1;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    struct stat st;
    unsigned char h[4];
    if (fd < 0)
        return -1;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        (void)close(fd);
        return -1;
    }
    *bytes = (uint64_t)st.st_size;
    *gzip = pread(fd, h, 2, 0) == 2 && h[0] == 0x1f && h[1] == 0x8b;
    *isize = 0;
    if (*gzip && st.st_size >= 18 && pread(fd, h, 4, st.st_size - 4) == 4)
        *isize = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 |
                 (uint32_t)h[3] << 24;
    gzFile g = gzdopen(fd, "rb");
    if (!g) {
        (void)close(fd);
        return -1;
    }
    int got = gzread(g, buf, (unsigned)cap);
    (void)gzclose(g);
    return got;
}

/* An IDX or NPY file: m from data_file_mem, *count its elements, *conv
 * whether inputs_from_array converts them to float. */
static int mem_array(const char *path, int npy, struct data_mem *m, uint64_t *count, int *conv)
{
    unsigned char b[1024];
    uint64_t bytes;
    int gzip;
    uint32_t isize;
    int got = mem_peek(path, b, (int)sizeof b - 1, &bytes, &gzip, &isize);
    if (got < 8)
        return -1;
    uint64_t hdr, size;
    if (!npy) {
        static const int esize[] = { [0x08] = 1, [0x09] = 1, [0x0B] = 2, [0x0C] = 4,
                                     [0x0D] = 4, [0x0E] = 8 };
        int nd = b[3];
        if (b[2] > 0x0E || !esize[b[2]] || nd < 1 || nd > 4 || got < 4 + 4 * nd)
            return -1;
        *count = 1;
        for (int i = 0; i < nd; i++) {
            const unsigned char *d = b + 4 + 4 * i;
            uint64_t v = (uint64_t)d[0] << 24 | (uint64_t)d[1] << 16 | (uint64_t)d[2] << 8 | d[3];
            if (__builtin_mul_overflow(*count, v, count))
                return -1;
        }
        if (*count > ((uint64_t)1 << 40))
            return -1;   /* data_load refuses it */
        hdr = 4 + 4 * (uint64_t)nd;
        *conv = b[2] != 0x08;   /* IDX is big endian: only bytes are taken as they are */
        size = *count * (uint64_t)esize[b[2]];
        /* read_owned takes the decompressed file over as the array */
        data_file_mem(bytes, gzip, isize, hdr + size, DATA_WHOLE, m);
        return 0;
    }
    if (memcmp(b, "\x93NUMPY", 6) != 0 || b[6] < 1 || b[6] > 3)
        return -1;
    hdr = b[6] == 1 ? 10 + ((uint64_t)b[8] | (uint64_t)b[9] << 8)
                    : 12 + ((uint64_t)b[8] | (uint64_t)b[9] << 8 | (uint64_t)b[10] << 16 |
                            (uint64_t)b[11] << 24);
    b[got] = 0;
    const char *d = npy_key((const char *)b, "descr");
    const char *dend = d && (*d == '\'' || *d == '"') ? strchr(d + 1, *d) : NULL;
    struct npy_dtype dt;
    if (!dend || npy_dtype_parse(d + 1, (size_t)(dend - d - 1), &dt) < 0)
        return -1;
    const char *sh = npy_key((const char *)b, "shape");
    if (!sh || *sh != '(')
        return -1;
    *count = 1;
    for (const char *p = sh + 1; *p && *p != ')';) {
        char *end;
        unsigned long long v = strtoull(p, &end, 10);
        if (end == p) {
            p++;
            continue;
        }
        if (__builtin_mul_overflow(*count, (uint64_t)v, count))
            return -1;
        p = end;
    }
    if (*count > ((uint64_t)1 << 60))
        return -1;   /* data_load refuses it */
    size = *count * (uint64_t)dt.size;
    data_file_mem(bytes, gzip, isize, hdr + size, DATA_WHOLE, m);
    *conv = !((dt.kind == 'u' && dt.size == 1 && !dt.boolean) ||
              (dt.kind == 'f' && dt.size == 4 && dt.big_endian == host_big_endian()));
    if (gzip && DATA_WHOLE && m->peak == bytes + m->held) {
        /* npy_read copies the array out of the decompressed file */
        if (m->held + size > m->peak)
            m->peak = m->held + size;
    } else if (size > m->peak) {
        m->peak = size;
    }
    m->held = size;
    if (dt.kind == 'f')
        *conv |= 2;   /* as labels: float targets */
    return 0;
}

int data_mem_estimate(const struct ddpc_data_source *src, struct data_mem *m)
{
    memset(m, 0, sizeof *m);
    switch (src->format) {
    case DDPC_DATA_IDX:
    case DDPC_DATA_NPY: {
        int npy = src->format == DDPC_DATA_NPY, cx, cy;
        struct data_mem x = { 0 }, y = { 0 };
        uint64_t nx, ny;
        if (mem_array(src->inputs, npy, &x, &nx, &cx) < 0 ||
            mem_array(src->labels, npy, &y, &ny, &cy) < 0)
            return -1;
        /* the inputs, then the labels while they are held, then the float
         * copy of the inputs and the int32 labels (or float targets) while
         * both raw arrays are */
        uint64_t conv = (cx & 1) ? 4 * nx : 0, lab = 4 * ny;
        uint64_t p2 = x.held + y.peak, p3 = x.held + y.held + conv + lab;
        m->peak = x.peak > p2 ? x.peak : p2;
        m->peak = m->peak > p3 ? m->peak : p3;
        m->held = (conv ? conv : x.held) + lab;
        m->gz = x.gz + y.gz;
        m->raw = x.raw + y.raw;
        return 0;
    }
    case DDPC_DATA_CSV: {
        unsigned char b[4];
        int gzip;
        uint32_t isize;
        uint64_t bytes;
        if (mem_peek(src->path, b, (int)sizeof b, &bytes, &gzip, &isize) < 0)
            return -1;
        data_file_mem(bytes, gzip, isize, 0, DATA_WHOLE, m);
        /* slurp copies a decompressed file into its text; the floats
         * parsed from the text are not known before it is parsed */
        if (gzip && DATA_WHOLE && 2 * m->held > m->peak)
            m->peak = 2 * m->held;
        m->held = 0;
        return 0;
    }
    case DDPC_DATA_TEXT:
    case DDPC_DATA_TOKENS: {
        struct ddpc_token_files tf;
        char why[PATH_MAX + 256];
        memset(&tf, 0, sizeof tf);
        if (tokens_list(src->path, (size_t)src->path_literal, src->format, &tf, why,
                        sizeof why) < 0) {
            tokens_list_free(&tf);
            return -1;
        }
        int64_t a, b;
        tokens_range(tf.total, src->range_lo, src->range_hi, &a, &b);
        m->peak = m->held = (uint64_t)(b - a) * (uint64_t)tf.elem;
        tokens_list_free(&tf);
        return 0;
    }
    case DDPC_DATA_SYNTHETIC:
        if (src->samples <= 0 || src->features <= 0)
            return -1;
        m->peak = m->held = (uint64_t)src->samples * ((uint64_t)src->features + 1) * 4;
        return 0;
    default:
        return -1;
    }
}

/* ===== public ===== */

int data_load(const struct ddpc_data_source *src, struct ddpc_dataset *ds,
              struct ddpc_err *e)
{
    memset(ds, 0, sizeof *ds);
    ds->label_hint = -1;
    int rc;
    switch (src->format) {
    case DDPC_DATA_IDX:
        snprintf(ds->source, sizeof ds->source, "%s", src->inputs ? src->inputs : "?");
        snprintf(ds->labels_source, sizeof ds->labels_source, "%s",
                 src->labels ? src->labels : "?");
        rc = load_idx(src, ds, e);
        break;
    case DDPC_DATA_NPY:
        snprintf(ds->source, sizeof ds->source, "%s", src->inputs ? src->inputs : "?");
        snprintf(ds->labels_source, sizeof ds->labels_source, "%s",
                 src->labels ? src->labels : "?");
        rc = load_npy(src, ds, e);
        break;
    case DDPC_DATA_CSV:
        snprintf(ds->source, sizeof ds->source, "%s", src->path ? src->path : "?");
        snprintf(ds->labels_source, sizeof ds->labels_source, "%s", ds->source);
        rc = load_csv(src, ds, e);
        break;
    case DDPC_DATA_TEXT:
    case DDPC_DATA_TOKENS:
        snprintf(ds->source, sizeof ds->source, "%s", src->path ? src->path : "?");
        snprintf(ds->labels_source, sizeof ds->labels_source, "%s", ds->source);
        rc = load_tokens(src, ds, e);
        break;
    case DDPC_DATA_SYNTHETIC:
        snprintf(ds->source, sizeof ds->source, "synthetic(seed=%llu)",
                 (unsigned long long)src->seed);
        snprintf(ds->labels_source, sizeof ds->labels_source, "%s", ds->source);
        rc = load_synthetic(src, ds, e);
        break;
    default:
        rc = DDPC_FAIL(e, DDPC_E_INVALID, "unknown data format %d", (int)src->format);
        break;
    }
    if (rc < 0)
        data_free(ds);
    return rc;
}

void data_free(struct ddpc_dataset *ds)
{
    free(ds->x);
    free(ds->labels);
    free(ds->y);
    ds->x = NULL;
    ds->labels = NULL;
    ds->y = NULL;
    ds->n = 0;
    ds->ntok = 0;
    ds->stride = 0;
    tokens_list_free(&ds->files);
}

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
static void u8_to_float(const uint8_t *restrict src, float *restrict dst, size_t n, float s)
{
    for (size_t j = 0; j < n; j++)
        dst[j] = (float)src[j] * s;
}

/* Token windows: inputs d[s .. s+T) as float, labels d[s+1 .. s+T+1). */
static void gather_windows(const struct ddpc_dataset *ds, const int64_t *idx, int count,
                           float *x_out, int32_t *labels_out)
{
    const size_t T = (size_t)ds->seq_len, st = (size_t)ds->stride;
    for (int i = 0; i < count; i++) {
        const size_t s = (size_t)idx[i] * st;
        float *x = x_out ? x_out + (size_t)i * T : NULL;
        int32_t *l = labels_out ? labels_out + (size_t)i * T : NULL;
        if (ds->dtype == DDPC_DTYPE_U16) {
            const uint16_t *d = (const uint16_t *)ds->x + s;
            for (size_t t = 0; x && t < T; t++)
                x[t] = (float)d[t];
            for (size_t t = 0; l && t < T; t++)
                l[t] = d[t + 1];
        } else {
            const uint8_t *d = (const uint8_t *)ds->x + s;
            for (size_t t = 0; x && t < T; t++)
                x[t] = (float)d[t];
            for (size_t t = 0; l && t < T; t++)
                l[t] = d[t + 1];
        }
    }
}

void data_gather(const struct ddpc_dataset *ds, const int64_t *idx, int count,
                 float *x_out, int32_t *labels_out, float *y_out)
{
    if (ds->stride > 0) {
        gather_windows(ds, idx, count, x_out, labels_out);
        return;
    }
    const size_t f = (size_t)ds->features;
    if (x_out) {
        if (ds->dtype == DDPC_DTYPE_U8) {
            const uint8_t *x = ds->x;   /* [n, f] */
            const float s = ds->u8_scale;
            for (int i = 0; i < count; i++) {
#if defined(__GNUC__)
                /* rows are scattered: fetch row i+4 while converting row i */
                if (i + 4 < count)
                    for (size_t off = 0; off < f; off += 64)
                        __builtin_prefetch(x + (size_t)idx[i + 4] * f + off, 0, 3);
#endif
                u8_to_float(x + (size_t)idx[i] * f, x_out + (size_t)i * f, f, s);
            }
        } else {
            const float *x = ds->x;     /* [n, f] */
            for (int i = 0; i < count; i++)
                memcpy(x_out + (size_t)i * f, x + (size_t)idx[i] * f, f * sizeof *x_out);
        }
    }
    if (labels_out && ds->labels)
        for (int i = 0; i < count; i++)
            labels_out[i] = ds->labels[idx[i]];
    if (y_out && ds->y) {
        const size_t t = (size_t)ds->targets;
        for (int i = 0; i < count; i++)
            memcpy(y_out + (size_t)i * t, ds->y + (size_t)idx[i] * t, t * sizeof *y_out);
    }
}

void data_elements_to_float(const void *raw, size_t n, char kind, int size, int big_endian,
                            int boolean, float *out)
{
    const unsigned char *p = raw;
    if (kind == 'u' && size == 1 && !boolean) {
        u8_to_float(p, out, n, 1.0f / 255.0f);   /* inputs_from_array's u8_scale */
        return;
    }
    for (size_t i = 0; i < n; i++)
        out[i] = boolean ? (float)(p[i] != 0)
                         : (float)elem_load(p + i * (size_t)size, kind, size, big_endian);
}

int data_csv_number(const char *s, double *v)
{
    return csv_number(s, v);
}

void data_prefetch(const struct ddpc_dataset *ds, const int64_t *idx, int count)
{
#if defined(__GNUC__)
    size_t elem = ds->dtype == DDPC_DTYPE_U8 ? 1 : ds->dtype == DDPC_DTYPE_U16 ? 2 : sizeof(float);
    /* token windows: T + 1 tokens from idx * stride */
    size_t row = ds->stride > 0 ? ((size_t)ds->seq_len + 1) * elem : (size_t)ds->features * elem;
    size_t step = ds->stride > 0 ? (size_t)ds->stride * elem : row;
    const char *x = ds->x;
    for (int i = 0; i < count; i++) {
        const char *p = x + (size_t)idx[i] * step;
        for (size_t off = 0; off < row; off += 64)
            __builtin_prefetch(p + off, 0, 3);
    }
#else
    (void)ds; (void)idx; (void)count;
#endif
}
