/* predict.c - ./job --predict: INPUT through the model into OUT (predict.h).
 *
 * Owns: reading INPUT in pieces (its format from its bytes), the rounds of
 * samples the ranks share, the softmax of the outputs, and OUT's format.
 * Rank 0 alone writes, through ckpt.h's atomic writer. Never holds more
 * than one round of samples, never trains, never exits; every libc and
 * zlib call is checked, and every error names INPUT (and its line, for a
 * CSV) or OUT.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include "ckpt.h"
#include "csv_header.h"
#include "data.h"
#include "layers.h"
#include "npy_dtype.h"
#include "predict.h"
#include "same_file.h"
#include "tokens.h"

/* ===== INPUT ===== */

enum pin_kind { PIN_ARRAY, PIN_CSV, PIN_TEXT, PIN_SHARD };

/* What the model reads, for the input's checks. */
struct pin_model {
    int in_dim;             /* floats per sample */
    int T;                  /* a gpt's block_size; 0 otherwise */
    int vocab;              /* a gpt's vocab_size */
    int csv_label;          /* the training CSV's label_column (may be < 0 from the end);
                               INT_MIN: the job does not train on CSV */
};

struct pin {
    enum pin_kind kind;
    const char *path;
    int     fd;             /* plain file: pread; -1 for a gzip stream */
    gzFile  gz;             /* sequential reads (zlib reads plain files too) */
    int64_t pos;            /* gz: uncompressed offset of its next byte */
    int64_t n;              /* samples: array rows, CSV rows, token windows */
    /* NPY, IDX */
    const char *fmt;
    char    ek;             /* element kind 'u' 'i' 'f', size, byte order, bool */
    int     esize, ebig, ebool;
    int64_t feat, off;      /* elements per sample; byte offset of element 0 */
    /* CSV */
    int     cols, drop;     /* columns per line; the one dropped, or -1 */
    int     header;         /* the first non-empty line is a header */
    int     seen_first;     /* the first non-empty line was read */
    char  **fields;         /* [cols] */
    int64_t line;           /* lines read */
    int64_t next;           /* index of the next data row */
    char   *lbuf;           /* the current line */
    size_t  lcap;
    char    blk[65536];     /* read-ahead */
    size_t  bpos, blen;
    int     eof;
    /* token streams */
    int64_t ntok;
    int     T, vocab;
    int     tok16;          /* uint16 tokens (a shard), else bytes */
    unsigned char *raw;     /* one read's stored bytes */
    size_t  rawcap;
};

static int pin_grow(struct pin *p, size_t need, struct ddpc_err *e)
{
    if (need <= p->rawcap)
        return 0;
    unsigned char *nr = realloc(p->raw, need);
    if (!nr)
        return DDPC_FAIL(e, DDPC_E_NOMEM, "--predict %s: out of memory", p->path);
    p->raw = nr;
    p->rawcap = need;
    return 0;
}

/* n bytes of the uncompressed stream at offset off into buf: pread on a
 * plain file, else the gzip stream moved forward (or rewound) to off. */
static int pin_read_at(struct pin *p, int64_t off, void *buf, size_t n, struct ddpc_err *e)
{
    unsigned char *b = buf;
    if (p->fd >= 0) {
        size_t got = 0;
        while (got < n) {
            ssize_t r = pread(p->fd, b + got, n - got, (off_t)(off + (int64_t)got));
            if (r < 0 && errno == EINTR)
                continue;
            if (r < 0)
                return DDPC_FAIL(e, DDPC_E_DATA, "--predict %s: %s", p->path, strerror(errno));
            if (r == 0)
                return DDPC_FAIL(e, DDPC_E_DATA, "--predict %s: the file ends at byte %lld, "
                                 "before the data its header announces (a copy cut short?)",
                                 p->path, (long long)(off + (int64_t)got));
            got += (size_t)r;
        }
        return 0;
    }
    if (off != p->pos) {
        if (gzseek(p->gz, (z_off_t)off, SEEK_SET) != (z_off_t)off) {
            int zerr;
            const char *zm = gzerror(p->gz, &zerr);
            return DDPC_FAIL(e, DDPC_E_DATA, "--predict %s: the gzip stream ends before byte "
                             "%lld%s%s", p->path, (long long)off, zerr ? ": " : "",
                             zerr ? zm : "");
        }
        p->pos = off;
    }
    size_t got = 0;
    while (got < n) {
        unsigned chunk = n - got > (1u << 30) ? 1u << 30 : (unsigned)(n - got);
        int r = gzread(p->gz, b + got, chunk);
        if (r < 0) {
            int zerr;
            return DDPC_FAIL(e, DDPC_E_DATA, "--predict %s: %s", p->path, gzerror(p->gz, &zerr));
        }
        if (r == 0)
            return DDPC_FAIL(e, DDPC_E_DATA, "--predict %s: the data ends at byte %lld, before "
                             "what its header announces (a file cut short?)", p->path,
                             (long long)(off + (int64_t)got));
        got += (size_t)r;
    }
    p->pos = off + (int64_t)n;
    return 0;
}

/* The next line of a CSV stream (no '\n', a '\r' before it dropped) in
 * p->lbuf: 1, 0 at the end, or an error (a NUL byte: binary data). */
static int pin_line(struct pin *p, size_t *len, struct ddpc_err *e)
{
    size_t n = 0;
    for (;;) {
        if (p->bpos == p->blen) {
            if (p->eof)
                break;
            int r = gzread(p->gz, p->blk, sizeof p->blk);
            if (r < 0) {
                int zerr;
                return DDPC_FAIL(e, DDPC_E_DATA, "--predict %s: %s", p->path,
                                 gzerror(p->gz, &zerr));
            }
            p->bpos = 0;
            p->blen = (size_t)r;
            if (r == 0) {
                p->eof = 1;
                break;
            }
        }
        const char *s = p->blk + p->bpos;
        const char *nl = memchr(s, '\n', p->blen - p->bpos);
        size_t take = nl ? (size_t)(nl - s) : p->blen - p->bpos;
        if (memchr(s, '\0', take))
            return DDPC_FAIL(e, DDPC_E_DATA, "--predict %s:%lld: a NUL byte: a CSV file is text, "
                             "and this one is binary from there", p->path,
                             (long long)p->line + 1);
        if (n + take + 1 > p->lcap) {
            size_t nc = p->lcap ? p->lcap : 4096;
            while (nc < n + take + 1)
                nc *= 2;
            char *nb = realloc(p->lbuf, nc);
            if (!nb)
                return DDPC_FAIL(e, DDPC_E_NOMEM, "--predict %s:%lld: out of memory for a line",
                                 p->path, (long long)p->line + 1);
            p->lbuf = nb;
            p->lcap = nc;
        }
        memcpy(p->lbuf + n, s, take);
        n += take;
        p->bpos += take + (nl ? 1 : 0);
        if (nl)
            goto got;
    }
    if (n == 0)
        return 0;
got:
    p->line++;
    if (n && p->lbuf[n - 1] == '\r')
        n--;
    p->lbuf[n] = '\0';
    *len = n;
    return 1;
}

/* Splits line in place on commas into f[cap]; the field count. */
static int csv_split(char *line, char **f, int cap)
{
    int n = 0;
    for (char *s = line;; n++) {
        if (n < cap)
            f[n] = s;
        char *c = strchr(s, ',');
        if (!c)
            return n + 1;
        *c = '\0';
        s = c + 1;
    }
}

static int csv_all_numbers(const char *line)
{
    const char *s = line;
    for (;;) {
        const char *c = strchr(s, ',');
        char field[128];
        size_t l = c ? (size_t)(c - s) : strlen(s);
        double v;
        if (l >= sizeof field)
            return 0;
        memcpy(field, s, l);
        field[l] = '\0';
        if (!data_csv_number(field, &v))
            return 0;
        if (!c)
            return 1;
        s = c + 1;
    }
}

/* A CSV: its columns, header and data rows, from one pass over it. */
static int pin_csv_scan(struct pin *p, const struct pin_model *m, struct ddpc_err *e)
{
    size_t len;
    int rc, first = 1;
    p->n = 0;
    while ((rc = pin_line(p, &len, e)) > 0) {
        if (len == 0)
            continue;
        if (first) {
            first = 0;
            p->cols = 1;
            for (const char *c = p->lbuf; *c; c++)
                p->cols += *c == ',';
            p->header = csv_is_column_numbers(p->lbuf) || !csv_all_numbers(p->lbuf);
            if (p->header)
                continue;
        }
        p->n++;
    }
    if (rc < 0)
        return rc;
    if (first)
        return DDPC_FAIL(e, DDPC_E_DATA, "--predict %s: the file is empty: nothing to predict",
                         p->path);
    p->drop = -1;
    if (p->cols == m->in_dim + 1 && m->csv_label != INT_MIN) {
        int lc = m->csv_label < 0 ? p->cols + m->csv_label : m->csv_label;
        if (lc >= 0 && lc < p->cols)
            p->drop = lc;
    }
    if (p->cols != m->in_dim && p->drop < 0)
        return DDPC_FAIL(e, DDPC_E_DATA, "--predict %s: %d column%s per line, but the model "
                         "reads %d input%s%s", p->path, p->cols, p->cols == 1 ? "" : "s",
                         m->in_dim, m->in_dim == 1 ? "" : "s",
                         m->csv_label != INT_MIN ? " (a line may also hold the label column "
                         "data.train names: it is dropped)" : "");
    p->fields = malloc((size_t)p->cols * sizeof *p->fields);
    if (!p->fields)
        return DDPC_FAIL(e, DDPC_E_NOMEM, "--predict %s: out of memory", p->path);
    if (gzrewind(p->gz) != 0)
        return DDPC_FAIL(e, DDPC_E_DATA, "--predict %s: cannot read it again from its start",
                         p->path);
    p->seen_first = 0;
    p->bpos = p->blen = 0;
    p->eof = 0;
    p->line = 0;
    p->next = 0;
    return 0;
}

/* An NPY or IDX header at the stream's start: element type, shape, where
 * the data begins. */
static int pin_array_header(struct pin *p, const unsigned char *magic,
                            const struct pin_model *m, struct ddpc_err *e)
{
    int64_t dims[8], count = 1;
    int nd = 0;
    if (memcmp(magic, "\x93NUMPY", 6) == 0) {
        p->fmt = "NPY";
        int lb = magic[6] == 1 ? 2 : 4;
        unsigned char l[4] = { 0, 0, 0, 0 };
        DDPC_TRY(pin_read_at(p, 8, l, (size_t)lb, e));
        size_t hl = (size_t)l[0] | (size_t)l[1] << 8 | (size_t)l[2] << 16 | (size_t)l[3] << 24;
        if (hl > (1u << 20))
            return DDPC_FAIL(e, DDPC_E_DATA, "--predict %s: NPY header of %zu bytes is "
                             "implausible", p->path, hl);
        char *h = malloc(hl + 1);
        if (!h)
            return DDPC_FAIL(e, DDPC_E_NOMEM, "--predict %s: out of memory", p->path);
        int rc = pin_read_at(p, 8 + lb, h, hl, e);
        if (rc < 0) {
            free(h);
            return rc;
        }
        h[hl] = '\0';
        p->off = 8 + lb + (int64_t)hl;
        const char *d = strstr(h, "'descr'"), *f = strstr(h, "'fortran_order'");
        const char *s = strstr(h, "'shape'");
        struct npy_dtype dt;
        const char *q = d ? strchr(d + 7, '\'') : NULL;
        const char *qe = q ? strchr(q + 1, '\'') : NULL;
        s = s ? strchr(s, '(') : NULL;
        const char *fv = f ? strchr(f + 15, ':') : NULL;
        while (fv && (*fv == ':' || *fv == ' '))
            fv++;
        if (!q || !qe || !fv || !s || npy_dtype_parse(q + 1, (size_t)(qe - q - 1), &dt) < 0 ||
            strncmp(fv, "False", 5) != 0) {
            rc = DDPC_FAIL(e, DDPC_E_DATA, "--predict %s: NPY header \"%.200s\": a C-order "
                           "array of " NPY_DTYPES_READ " is what ddpc reads", p->path, h);
            free(h);
            return rc;
        }
        p->ek = dt.kind;
        p->esize = dt.size;
        p->ebig = dt.big_endian;
        p->ebool = dt.boolean;
        for (s++; *s && *s != ')' && nd < 8;) {
            while (*s == ' ' || *s == ',')
                s++;
            if (*s == ')')
                break;
            char *end;
            long long v = strtoll(s, &end, 10);
            if (end == s || v < 0)
                break;
            dims[nd++] = v;
            s = end;
        }
        free(h);
    } else {
        p->fmt = "IDX";
        p->ebig = 1;
        p->ebool = 0;
        switch (magic[2]) {
        case 0x08: p->ek = 'u'; p->esize = 1; break;
        case 0x09: p->ek = 'i'; p->esize = 1; break;
        case 0x0B: p->ek = 'i'; p->esize = 2; break;
        case 0x0C: p->ek = 'i'; p->esize = 4; break;
        case 0x0D: p->ek = 'f'; p->esize = 4; break;
        default:   p->ek = 'f'; p->esize = 8; break;
        }
        nd = magic[3];
        unsigned char db[16];
        DDPC_TRY(pin_read_at(p, 4, db, (size_t)nd * 4, e));
        for (int i = 0; i < nd; i++)
            dims[i] = (int64_t)db[4 * i] << 24 | (int64_t)db[4 * i + 1] << 16 |
                      (int64_t)db[4 * i + 2] << 8 | db[4 * i + 3];
        p->off = 4 + 4 * (int64_t)nd;
    }
    for (int i = 0; i < nd; i++)
        if (__builtin_mul_overflow(count, dims[i], &count) || count > ((int64_t)1 << 50))
            return DDPC_FAIL(e, DDPC_E_DATA, "--predict %s: the %s header's shape multiplies to "
                             "more elements than a file holds: it is corrupt", p->path, p->fmt);
    if (nd < 1)
        return DDPC_FAIL(e, DDPC_E_DATA, "--predict %s: the %s array is a scalar or its shape "
                         "cannot be read", p->path, p->fmt);
    p->n = dims[0];
    p->feat = dims[0] ? count / dims[0] : 0;
    if (p->n > 0 && p->feat != m->in_dim) {
        char shape[120] = "";
        for (int i = 0, at = 0; i < nd && at < (int)sizeof shape; i++)
            at += snprintf(shape + at, sizeof shape - (size_t)at, "%s%lld", i ? ", " : "",
                           (long long)dims[i]);
        return DDPC_FAIL(e, DDPC_E_DATA, "--predict %s: a %s array of shape (%s): %lld values "
                         "per sample, but the model reads %d (model.input, or the first "
                         "layer's in_features)", p->path, p->fmt, shape, (long long)p->feat,
                         m->in_dim);
    }
    /* a plain file shorter than its header says: said now, not mid-run */
    struct stat st;
    if (p->fd >= 0 && fstat(p->fd, &st) == 0 &&
        st.st_size < p->off + p->n * p->feat * p->esize)
        return DDPC_FAIL(e, DDPC_E_DATA, "--predict %s: %lld bytes, but its %s header announces "
                         "%lld (a copy cut short?)", p->path, (long long)st.st_size, p->fmt,
                         (long long)(p->off + p->n * p->feat * p->esize));
    return 0;
}

static void pin_close(struct pin *p)
{
    if (p->gz)
        (void)gzclose(p->gz);   /* read-only */
    if (p->fd >= 0)
        (void)close(p->fd);
    free(p->lbuf);
    free(p->raw);
    free(p->fields);
    memset(p, 0, sizeof *p);
    p->fd = -1;
}

static int pin_open(struct pin *p, const char *path, const struct pin_model *m,
                    struct ddpc_err *e)
{
    memset(p, 0, sizeof *p);
    p->fd = -1;
    p->path = path;
    p->T = m->T;
    p->vocab = m->vocab;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return DDPC_FAIL(e, DDPC_E_DATA, "--predict %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        (void)close(fd);
        return DDPC_FAIL(e, DDPC_E_DATA, "--predict %s: not a regular file (every rank reads "
                         "its own rows of it: a pipe cannot be shared)", path);
    }
    int gfd = dup(fd);
    p->gz = gfd >= 0 ? gzdopen(gfd, "rb") : NULL;
    if (!p->gz) {
        if (gfd >= 0)
            (void)close(gfd);
        (void)close(fd);
        return DDPC_FAIL(e, DDPC_E_NOMEM, "--predict %s: cannot open a reader", path);
    }
    (void)gzbuffer(p->gz, 1 << 17);
    unsigned char magic[8] = { 0 };
    int got = gzread(p->gz, magic, sizeof magic);
    if (got < 0) {
        int zerr;
        int rc = DDPC_FAIL(e, DDPC_E_DATA, "--predict %s: %s", path, gzerror(p->gz, &zerr));
        (void)close(fd);
        return rc;
    }
    p->pos = got;
    if (gzdirect(p->gz))
        p->fd = fd;           /* plain: rows are read where they are */
    else
        (void)close(fd);      /* gzip: the stream only */
    int rc;
    if (m->T > 0) {
        int32_t h0 = 0;
        if (got >= 4)
            memcpy(&h0, magic, 4);
        p->kind = h0 == DDPC_SHARD_MAGIC ? PIN_SHARD : PIN_TEXT;
        if (p->kind == PIN_SHARD) {
            int32_t hdr[3];
            if ((rc = pin_read_at(p, 0, hdr, sizeof hdr, e)) < 0)
                return rc;
            if (hdr[1] != DDPC_SHARD_VERSION || hdr[2] < 0)
                return DDPC_FAIL(e, DDPC_E_DATA, "--predict %s: an llm.c token shard of version "
                                 "%d with %d tokens: version %d is what ddpc reads", path,
                                 (int)hdr[1], (int)hdr[2], DDPC_SHARD_VERSION);
            p->tok16 = 1;
            p->ntok = hdr[2];
            p->off = DDPC_SHARD_HEADER_BYTES;
            if (p->fd >= 0 && st.st_size < p->off + 2 * p->ntok)
                return DDPC_FAIL(e, DDPC_E_DATA, "--predict %s: %lld bytes, but its header "
                                 "announces %lld tokens (a copy cut short?)", path,
                                 (long long)st.st_size, (long long)p->ntok);
        } else if (p->fd >= 0) {
            p->ntok = st.st_size;
        } else {
            /* gzip text: its length from one pass */
            unsigned char buf[65536];
            int64_t n = got;
            int r;
            while ((r = gzread(p->gz, buf, sizeof buf)) > 0)
                n += r;
            if (r < 0) {
                int zerr;
                return DDPC_FAIL(e, DDPC_E_DATA, "--predict %s: %s", path,
                                 gzerror(p->gz, &zerr));
            }
            p->ntok = n;
            p->pos = n;
        }
        p->n = p->ntok ? (p->ntok + m->T - 1) / m->T : 0;
        return 0;
    }
    if (got >= 8 && memcmp(magic, "\x93NUMPY", 6) == 0 && magic[6] >= 1 && magic[6] <= 3)
        return pin_array_header(p, magic, m, e);
    if (got >= 4 && magic[0] == 0 && magic[1] == 0 &&
        (magic[2] == 0x08 || magic[2] == 0x09 || (magic[2] >= 0x0B && magic[2] <= 0x0E)) &&
        magic[3] >= 1 && magic[3] <= 4)
        return pin_array_header(p, magic, m, e);
    p->kind = PIN_CSV;
    if (gzrewind(p->gz) != 0)
        return DDPC_FAIL(e, DDPC_E_DATA, "--predict %s: cannot read it from its start", path);
    p->pos = 0;
    return pin_csv_scan(p, m, e);
}

/* Samples [s0, s0 + cnt) as floats into x[cnt, in_dim]; a gpt's window
 * tokens (block_size + 1 of them, -1 past the end) into tok. */
static int pin_read(struct pin *p, int64_t s0, int cnt, int in_dim, float *x, int32_t *tok,
                    struct ddpc_err *e)
{
    if (p->kind == PIN_ARRAY) {
        size_t elems = (size_t)cnt * (size_t)p->feat, bytes = elems * (size_t)p->esize;
        DDPC_TRY(pin_grow(p, bytes, e));
        DDPC_TRY(pin_read_at(p, p->off + s0 * p->feat * p->esize, p->raw, bytes, e));
        data_elements_to_float(p->raw, elems, p->ek, p->esize, p->ebig, p->ebool, x);
        if (p->ek == 'f')
            for (size_t i = 0; i < elems; i++)
                if (!isfinite(x[i]))
                    return DDPC_FAIL(e, DDPC_E_DATA, "--predict %s: input %lld of sample %lld "
                                     "is %s (as float32); fix or drop that sample", p->path,
                                     (long long)(i % (size_t)p->feat),
                                     (long long)(s0 + (int64_t)(i / (size_t)p->feat)),
                                     isnan(x[i]) ? "NaN" : "infinite");
        return 0;
    }
    if (p->kind == PIN_CSV) {
        size_t len;
        int rc;
        for (int i = 0; i < cnt;) {
            if ((rc = pin_line(p, &len, e)) < 0)
                return rc;
            if (rc == 0)
                return DDPC_FAIL(e, DDPC_E_DATA, "--predict %s: the file ended at line %lld, "
                                 "before its row %lld (it changed while being read?)", p->path,
                                 (long long)p->line, (long long)s0 + i + 1);
            if (len == 0)
                continue;
            if (!p->seen_first) {
                p->seen_first = 1;
                if (p->header)
                    continue;
            }
            int64_t row = p->next++;
            if (row < s0)
                continue;   /* another rank's */
            char **f = p->fields;
            int nf = csv_split(p->lbuf, f, p->cols);
            if (nf != p->cols)
                return DDPC_FAIL(e, DDPC_E_DATA, "--predict %s:%lld: expected %d columns like "
                                 "the first line, got %d", p->path, (long long)p->line, p->cols,
                                 nf);
            float *xr = x + (size_t)i * (size_t)in_dim;
            int k = 0;
            for (int c = 0; c < p->cols; c++) {
                if (c == p->drop)
                    continue;
                double v;
                if (!data_csv_number(f[c], &v) || !isfinite((float)v))
                    return DDPC_FAIL(e, DDPC_E_DATA, "--predict %s:%lld: column %d (\"%.40s\") "
                                     "is %s", p->path, (long long)p->line, c + 1, f[c],
                                     data_csv_number(f[c], &v) ? "not finite as a float32"
                                                               : "not a number");
                xr[k++] = (float)v;
            }
            i++;
        }
        return 0;
    }
    /* token windows: T inputs from token s * T, and the token after each */
    const int T = p->T;
    size_t esz = p->tok16 ? 2 : 1;
    for (int i = 0; i < cnt; i++) {
        int64_t start = (s0 + i) * T;
        int64_t have = p->ntok - start < T + 1 ? p->ntok - start : T + 1;
        DDPC_TRY(pin_grow(p, (size_t)(T + 1) * esz, e));
        DDPC_TRY(pin_read_at(p, p->off + start * (int64_t)esz, p->raw, (size_t)have * esz, e));
        int32_t *t = tok + (size_t)i * (size_t)(T + 1);
        for (int k = 0; k <= T; k++) {
            int32_t v = -1;
            if (k < have)
                v = p->tok16 ? (int32_t)(p->raw[2 * k] | p->raw[2 * k + 1] << 8) : p->raw[k];
            if (v >= p->vocab)
                return DDPC_FAIL(e, DDPC_E_DATA, "--predict %s: token %d at position %lld is "
                                 "not below vocab_size %d", p->path, (int)v,
                                 (long long)(start + k), p->vocab);
            t[k] = v;
            if (k < T)   /* past the end: token 0, which causal attention keeps from
                            every earlier position (sample.c pads the same way) */
                x[(size_t)i * (size_t)in_dim + (size_t)k] = v < 0 ? 0.0f : (float)v;
        }
    }
    return 0;
}

/* ===== OUT ===== */

enum pout_kind { POUT_CLASS, POUT_REGRESSION, POUT_TOKENS };

struct pout {
    enum pout_kind kind;
    int     npy;
    int     width;          /* classes, outputs */
    struct ckpt_afile f;
    int     open;
    char    buf[1 << 16];
    size_t  n;
};

static int pout_put(struct pout *o, const void *p, size_t n, struct ddpc_err *e)
{
    if (o->n + n > sizeof o->buf) {
        DDPC_TRY(ckpt_out_write(&o->f, o->buf, o->n, e));
        o->n = 0;
    }
    if (n > sizeof o->buf)
        return ckpt_out_write(&o->f, p, n, e);
    memcpy(o->buf + o->n, p, n);
    o->n += n;
    return 0;
}

static int pout_printf(struct pout *o, struct ddpc_err *e, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int pout_printf(struct pout *o, struct ddpc_err *e, const char *fmt, ...)
{
    char line[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof line)
        return DDPC_FAIL(e, DDPC_E_INVALID, "--predict: a CSV cell does not fit");
    return pout_put(o, line, (size_t)n, e);
}

/* %.9g reads back as the same float32; NaN is "nan" whatever its sign */
static int pout_float(struct pout *o, float v, int last, struct ddpc_err *e)
{
    if (isnan(v))
        return pout_printf(o, e, "nan%s", last ? "\n" : ",");
    return pout_printf(o, e, "%.9g%s", (double)v, last ? "\n" : ",");
}

static int pout_i32(struct pout *o, int32_t v, struct ddpc_err *e)
{
    unsigned char b[4] = { (unsigned char)v, (unsigned char)(v >> 8),
                           (unsigned char)(v >> 16), (unsigned char)(v >> 24) };
    return pout_put(o, b, 4, e);
}

static int pout_f32(struct pout *o, float v, struct ddpc_err *e)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    return pout_i32(o, (int32_t)u, e);
}

/* The NPY header for n rows: version 1.0, the dict padded so the data
 * starts at a multiple of 64 bytes, as numpy.save writes it. */
static int pout_npy_header(struct pout *o, int64_t n, int T, struct ddpc_err *e)
{
    char descr[200], shape[64], dict[400], head[512];
    if (o->kind == POUT_CLASS)
        (void)snprintf(descr, sizeof descr, "[('class', '<i4'), ('prob', '<f4', (%d,))]",
                       o->width);
    else if (o->kind == POUT_TOKENS)
        (void)snprintf(descr, sizeof descr, "[('token', '<i4'), ('next', '<i4'), "
                       "('prob', '<f4'), ('logprob', '<f4')]");
    else
        (void)snprintf(descr, sizeof descr, "'<f4'");
    (void)T;
    if (o->kind == POUT_REGRESSION)
        (void)snprintf(shape, sizeof shape, "(%lld, %d)", (long long)n, o->width);
    else
        (void)snprintf(shape, sizeof shape, "(%lld,)", (long long)n);
    int dl = snprintf(dict, sizeof dict, "{'descr': %s, 'fortran_order': False, 'shape': %s, }",
                      descr, shape);
    size_t total = 10 + (size_t)dl + 1, pad = (64 - total % 64) % 64;
    size_t hl = (size_t)dl + pad + 1;
    memcpy(head, "\x93NUMPY\x01\x00", 8);
    head[8] = (char)(hl & 0xff);
    head[9] = (char)(hl >> 8);
    memcpy(head + 10, dict, (size_t)dl);
    memset(head + 10 + dl, ' ', pad);
    head[10 + dl + pad] = '\n';
    return pout_put(o, head, 10 + hl, e);
}

static int pout_begin(struct pout *o, const char *path, int64_t rows, int T,
                      struct ddpc_err *e)
{
    DDPC_TRY(ckpt_out_open(&o->f, path, "--predict -o", "-o", "any earlier file there is "
                           "intact", e));
    o->open = 1;
    if (o->npy)
        return pout_npy_header(o, rows, T, e);
    if (o->kind == POUT_TOKENS)
        return pout_printf(o, e, "token,next,prob,logprob\n");
    if (o->kind == POUT_CLASS)
        DDPC_TRY(pout_printf(o, e, "class%s", o->width ? "," : "\n"));
    for (int c = 0; c < o->width; c++)
        DDPC_TRY(pout_printf(o, e, "%s%d%s", o->kind == POUT_CLASS ? "p" : "y", c,
                             c + 1 < o->width ? "," : "\n"));
    return 0;
}

/* One sample's row (or a gpt window's rows) from the gathered floats. */
static int pout_rows(struct pout *o, const float *v, int positions, struct ddpc_err *e)
{
    if (o->kind == POUT_TOKENS) {
        for (int t = 0; t < positions; t++, v += 4) {
            if (o->npy) {
                DDPC_TRY(pout_i32(o, (int32_t)v[0], e));
                DDPC_TRY(pout_i32(o, (int32_t)v[1], e));
                DDPC_TRY(pout_f32(o, v[2], e));
                DDPC_TRY(pout_f32(o, v[3], e));
            } else {
                DDPC_TRY(pout_printf(o, e, "%d,%d,", (int)v[0], (int)v[1]));
                DDPC_TRY(pout_float(o, v[2], 0, e));
                DDPC_TRY(pout_float(o, v[3], 1, e));
            }
        }
        return 0;
    }
    if (o->kind == POUT_CLASS) {
        if (o->npy)
            DDPC_TRY(pout_i32(o, (int32_t)v[0], e));
        else
            DDPC_TRY(pout_printf(o, e, "%d,", (int)v[0]));
        v++;
    }
    for (int c = 0; c < o->width; c++) {
        if (o->npy)
            DDPC_TRY(pout_f32(o, v[c], e));
        else
            DDPC_TRY(pout_float(o, v[c], c + 1 == o->width, e));
    }
    return 0;
}

static int pout_finish(struct pout *o, struct ddpc_err *e)
{
    if (o->n)
        DDPC_TRY(ckpt_out_write(&o->f, o->buf, o->n, e));
    o->n = 0;
    return ckpt_out_commit(&o->f, e);
}

/* ===== the model's outputs ===== */

/* Row r of logits [.., V] in double: the softmax's max and log-sum-exp. */
static void softmax_stats(const float *l, int V, double *mx, double *lse)
{
    double m = l[0];
    for (int i = 1; i < V; i++)
        m = l[i] > m ? l[i] : m;
    double s = 0;
    for (int i = 0; i < V; i++)
        s += exp((double)l[i] - m);
    *mx = m;
    /* s >= 1: the maximum's own term is exp(0) */
    // cppcheck-suppress invalidFunctionArg
    *lse = m + log(s);
}

/* argmax, the first maximum winning ties (as torch.argmax) */
static int argmax(const float *l, int V)
{
    int a = 0;
    for (int i = 1; i < V; i++)
        if (l[i] > l[a])
            a = i;
    return a;
}

/* The per-sample output floats of `cnt` samples into slot. */
static void outputs_fill(enum pout_kind kind, const float *logits, int cnt, int T, int V,
                         const int32_t *tok, float *slot)
{
    if (kind == POUT_REGRESSION) {
        memcpy(slot, logits, (size_t)cnt * (size_t)V * sizeof *slot);
        return;
    }
    if (kind == POUT_CLASS) {
        for (int i = 0; i < cnt; i++) {
            const float *l = logits + (size_t)i * (size_t)V;
            float *o = slot + (size_t)i * (size_t)(V + 1);
            double mx, lse;
            softmax_stats(l, V, &mx, &lse);
            o[0] = (float)argmax(l, V);
            for (int c = 0; c < V; c++)
                o[1 + c] = (float)exp((double)l[c] - lse);
        }
        return;
    }
    for (int i = 0; i < cnt; i++) {
        const int32_t *t = tok + (size_t)i * (size_t)(T + 1);
        for (int p = 0; p < T; p++) {
            const float *l = logits + ((size_t)i * (size_t)T + (size_t)p) * (size_t)V;
            float *o = slot + ((size_t)i * (size_t)T + (size_t)p) * 4;
            double mx, lse;
            softmax_stats(l, V, &mx, &lse);
            int a = argmax(l, V);
            o[0] = (float)(t[p] < 0 ? 0 : t[p]);
            o[1] = (float)a;
            o[2] = (float)exp((double)l[a] - lse);
            o[3] = t[p] >= 0 && t[p + 1] >= 0 ? (float)((double)l[t[p + 1]] - lse) : NAN;
        }
    }
}

/* ===== the run ===== */

static void pin_model_of(const struct ddpc_job *j, int in_dim, struct pin_model *m)
{
    m->in_dim = in_dim;
    m->T = j->model.type == DDPC_MODEL_GPT ? j->model.block_size : 0;
    m->vocab = j->model.vocab_size;
    m->csv_label = j->data.train.format == DDPC_DATA_CSV ? j->data.train.label_column
                 : j->data.has_test && j->data.test.format == DDPC_DATA_CSV
                     ? j->data.test.label_column : INT_MIN;
}

static int out_is(const char *path, const char *ext)
{
    size_t l = strlen(path), el = strlen(ext);
    return l > el && strcasecmp(path + l - el, ext) == 0;
}

int predict_run(const struct predict_ctx *c, const char *input, const char *output,
                struct ddpc_err *e)
{
    const struct ddpc_job *j = c->job;
    struct pin_model pm;
    pin_model_of(j, c->in_dim, &pm);
    struct pin in;
    struct pout *o = NULL;
    float *hg = NULL, *dg = NULL, *hl = NULL;
    int32_t *tok = NULL;
    int rc = pin_open(&in, input, &pm, e);
    if (rc < 0)
        goto out;
    enum pout_kind kind = j->model.type == DDPC_MODEL_GPT ? POUT_TOKENS
                        : j->loss == DDPC_LOSS_CROSS_ENTROPY ? POUT_CLASS : POUT_REGRESSION;
    const int T = c->seq_len, V = c->out_dim, rows = c->rows;
    /* floats per sample in the gathered slot */
    size_t per = kind == POUT_TOKENS ? (size_t)T * 4 : kind == POUT_CLASS ? (size_t)V + 1
                                                                         : (size_t)V;
    size_t slot = 1 + (size_t)rows * per, total = slot * (size_t)c->world;
    hg = malloc(total * sizeof *hg);
    if (kind == POUT_TOKENS)
        tok = malloc((size_t)rows * (size_t)(T + 1) * sizeof *tok);
    if (!c->ops->host_memory)
        hl = malloc((size_t)rows * (size_t)T * (size_t)V * sizeof *hl);
    if (!hg || (kind == POUT_TOKENS && !tok) || (!c->ops->host_memory && !hl)) {
        rc = DDPC_FAIL(e, DDPC_E_NOMEM, "--predict: out of memory for %d samples' outputs",
                       rows);
        goto out;
    }
    if (c->world > 1 && !c->ops->host_memory &&
        (rc = c->ops->alloc(c->ops, (void **)&dg, total * sizeof *dg, e)) < 0)
        goto out;
    int64_t n_rows = kind == POUT_TOKENS ? in.ntok : in.n;
    if (c->rank == 0) {
        o = calloc(1, sizeof *o);
        if (!o) {
            rc = DDPC_FAIL(e, DDPC_E_NOMEM, "--predict: out of memory");
            goto out;
        }
        o->kind = kind;
        o->npy = out_is(output, ".npy");
        o->width = kind == POUT_TOKENS ? 0 : V;
        if ((rc = pout_begin(o, output, n_rows, T, e)) < 0)
            goto out;
    }
    model_set_mode(c->model, 0, 0);
    double t0 = ddpc_now(), last_note = t0;
    const int64_t per_round = (int64_t)rows * c->world;
    for (int64_t base = 0; base < in.n; base += per_round) {
        int64_t s0 = base + (int64_t)c->rank * rows;
        int cnt = s0 < in.n ? (int)(in.n - s0 < rows ? in.n - s0 : rows) : 0;
        memset(hg, 0, total * sizeof *hg);
        float *mine = hg + (size_t)c->rank * slot;
        if (cnt > 0) {
            if ((rc = pin_read(&in, s0, cnt, c->in_dim, c->hx, tok, e)) < 0)
                goto out;
            if (c->hx != c->dx &&
                (rc = c->ops->to_device(c->ops, c->dx, c->hx,
                                        (size_t)cnt * (size_t)c->in_dim * sizeof(float), e)) < 0)
                goto out;
            if ((rc = model_forward(c->model, c->dx, cnt, e)) < 0)
                goto out;
            const float *logits = c->model->logits;
            if (hl) {
                if ((rc = c->ops->to_host(c->ops, hl, logits, (size_t)cnt * (size_t)T *
                                          (size_t)V * sizeof *hl, e)) < 0)
                    goto out;
                logits = hl;
            }
            mine[0] = (float)cnt;
            outputs_fill(kind, logits, cnt, T, V, tok, mine + 1);
        }
        if (c->world > 1) {
            float *buf = dg ? dg : hg;
            double dl = c->timeout_s > 0 ? ddpc_deadline_after(c->timeout_s) : 0;
            if ((dg && (rc = c->ops->to_device(c->ops, dg, hg, total * sizeof *hg, e)) < 0) ||
                (rc = comm_all_reduce(c->comm, buf, buf, total, DDPC_REDUCE_SUM, dl, e)) < 0 ||
                (dg && (rc = c->ops->to_host(c->ops, hg, dg, total * sizeof *hg, e)) < 0))
                goto out;
        }
        if (!o)
            continue;
        for (int k = 0; k < c->world; k++) {
            const float *sl = hg + (size_t)k * slot;
            int got = (int)sl[0];
            for (int i = 0; i < got; i++) {
                int positions = 1;
                if (kind == POUT_TOKENS) {
                    int64_t start = (base + (int64_t)k * rows + i) * T;
                    positions = in.ntok - start < T ? (int)(in.ntok - start) : T;
                }
                if ((rc = pout_rows(o, sl + 1 + (size_t)i * per, positions, e)) < 0)
                    goto out;
            }
        }
        double now = ddpc_now();
        if (c->out && now - last_note >= 10.0) {
            int64_t done = base + per_round < in.n ? base + per_round : in.n;
            fprintf(c->out, "predict: %lld/%lld %s, %.0f s\n", (long long)done,
                    (long long)in.n, kind == POUT_TOKENS ? "windows" : "samples", now - t0);
            fflush(c->out);
            last_note = now;
        }
    }
    if (o) {
        if ((rc = pout_finish(o, e)) < 0)
            goto out;
        if (c->out) {
            fprintf(c->out, "done predict rows=%lld output=%s wall_s=%.3f\n",
                    (long long)n_rows, output, ddpc_now() - t0);
            fflush(c->out);
        }
    }
out:
    if (o) {
        if (o->open)
            ckpt_out_abort(&o->f);
        free(o);
    }
    if (dg)
        c->ops->release(c->ops, dg);
    free(hg);
    free(hl);
    free(tok);
    pin_close(&in);
    return rc;
}

int predict_preflight(const struct ddpc_job *job, const char *input, const char *output,
                      struct ddpc_err *e)
{
    if (!out_is(output, ".npy") && !out_is(output, ".csv"))
        return DDPC_FAIL(e, DDPC_E_INVALID, "-o %s: the predictions are written as NPY or CSV, "
                         "chosen by the name's extension: end it in .npy or .csv", output);
    struct stat so;
    if (stat(output, &so) == 0 && !S_ISREG(so.st_mode))
        return DDPC_FAIL(e, DDPC_E_INVALID, "-o %s is not a regular file (a directory, a "
                         "device?): name a file", output);
    if (same_file(input, output))
        return DDPC_FAIL(e, DDPC_E_INVALID, "-o %s is the input itself: the predictions "
                         "would replace it; name another file", output);
    static struct ddpc_net net;   /* large; the launcher is one thread */
    char why[512];
    int bad;
    if (layers_build(job, NULL, &net, &bad, why, sizeof why) < 0)
        return DDPC_FAIL(e, DDPC_E_INVALID, "model: %s", why);
    struct pin_model pm;
    pin_model_of(job, (int)net.in_numel, &pm);
    struct pin in;
    int rc = pin_open(&in, input, &pm, e);
    pin_close(&in);
    return rc;
}
