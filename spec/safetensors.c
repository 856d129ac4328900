/* safetensors.c - the header's JSON as safetensors writes it, and check's
 * model.init_from rule (safetensors.h). Reads files; never writes one.
 */
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "finite.h"

const char *st_skip_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

/* Inside one tensor's {...} (entry [p, end)): the value after "key": */
const char *st_field(const char *p, const char *end, const char *key)
{
    size_t kl = strlen(key);
    for (const char *q = p; q + kl + 2 < end; q++)
        if (*q == '"' && (size_t)(end - q) > kl + 2 && memcmp(q + 1, key, kl) == 0 &&
            q[kl + 1] == '"') {
            const char *v = st_skip_ws(q + kl + 2, end);
            if (v < end && *v == ':')
                return st_skip_ws(v + 1, end);
        }
    return NULL;
}

/* p at a string's opening quote: just past its closing one, or NULL. */
const char *st_string_end(const char *p, const char *end)
{
    for (p++; p < end; p++) {
        if (*p == '\\')
            p++;
        else if (*p == '"')
            return p + 1;
    }
    return NULL;
}

/* p at a JSON value: just past it (strings and nesting skipped), or NULL. */
const char *st_value_end(const char *p, const char *end)
{
    if (p < end && *p == '"')
        return st_string_end(p, end);
    int depth = 0;
    for (; p < end; p++) {
        if (*p == '"') {
            if (!(p = st_string_end(p, end)))
                return NULL;
            p--;
        } else if (*p == '{' || *p == '[') {
            depth++;
        } else if (*p == '}' || *p == ']') {
            if (depth == 0)
                return p;            /* a scalar ended by its object's close */
            if (--depth == 0)
                return p + 1;
        } else if (*p == ',' && depth == 0) {
            return p;
        }
    }
    return depth == 0 ? p : NULL;
}

/* The next entry of the header's top-level object, *pp just inside its
 * '{' or after the previous entry: its key [*k, *k + *kl) (quotes off,
 * escapes kept) and its value [*v, *ve). 1: an entry, 0: the object's
 * end, -1: not JSON as safetensors writes it. Only top-level keys are
 * tensor names: a name in __metadata__ or inside a value is not one. */
int st_next(const char **pp, const char *end, const char **k, size_t *kl, const char **v,
                   const char **ve)
{
    const char *p = st_skip_ws(*pp, end);
    if (p < end && *p == ',')
        p = st_skip_ws(p + 1, end);
    if (p < end && *p == '}')
        return 0;
    const char *ke = p < end && *p == '"' ? st_string_end(p, end) : NULL;
    if (!ke)
        return -1;
    *k = p + 1;
    *kl = (size_t)(ke - 1 - *k);
    p = st_skip_ws(ke, end);
    if (p >= end || *p != ':')
        return -1;
    *v = st_skip_ws(p + 1, end);
    if (!(*ve = st_value_end(*v, end)) || *ve == *v)
        return -1;
    *pp = *ve;
    return 1;
}

/* "[a, b, ...]" of non-negative integers; returns the count or -1. */
int st_ints(const char *p, const char *end, uint64_t *v, int max)
{
    if (!p || p >= end || *p != '[')
        return -1;
    p = st_skip_ws(p + 1, end);
    int n = 0;
    if (p < end && *p == ']')
        return 0;
    while (p < end) {
        if (*p < '0' || *p > '9' || n >= max)
            return -1;
        uint64_t x = 0;
        while (p < end && *p >= '0' && *p <= '9') {
            if (x > (UINT64_MAX - 9) / 10)
                return -1;
            x = x * 10 + (uint64_t)(*p++ - '0');
        }
        v[n++] = x;
        p = st_skip_ws(p, end);
        if (p < end && *p == ']')
            return n;
        if (p >= end || *p != ',')
            return -1;
        p = st_skip_ws(p + 1, end);
    }
    return -1;
}

/* ---- st_check_net ---- */

struct stc {
    st_report_fn report;
    void *ctx;
    int n;
};

static void say(struct stc *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void say(struct stc *s, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    s->report(s->ctx, msg);
    s->n++;
}

/* Appends name (len bytes, at most 60 shown) to a comma list in buf. */
static void list_name(char *buf, size_t cap, int *shown, const char *name, size_t len)
{
    size_t o = strlen(buf);
    if (*shown == 4) {
        if (o + 5 < cap)
            memcpy(buf + o, ", ...", 6);
        (*shown)++;
        return;
    }
    if (*shown > 4)
        return;
    snprintf(buf + o, cap - o, "%s%.*s%s", *shown ? ", " : "", (int)(len > 60 ? 60 : len), name,
             len > 60 ? "..." : "");
    (*shown)++;
}

static void shape_text(char *buf, size_t cap, const uint64_t *d, int nd)
{
    size_t o = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < nd && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%" PRIu64, i ? ", " : "", d[i]);
    if (o < cap)
        snprintf(buf + o, cap - o, "]");
}

/* Element i of a tensor of shape d[nd] as "[a, b, c]". */
static void index_text(char *buf, size_t cap, uint64_t i, const int64_t *d, int nd)
{
    uint64_t idx[4] = { 0 };
    for (int k = nd - 1; k >= 0; k--) {
        uint64_t dk = d[k] > 0 ? (uint64_t)d[k] : 1;
        idx[k] = i % dk;
        i /= dk;
    }
    shape_text(buf, cap, idx, nd);
}

/* The first non-finite float of count at file offset off (chunked reads);
 * *at gets its index. 1 found, 0 none, -1 a read failed. */
static int scan_floats(FILE *f, uint64_t off, uint64_t count, uint64_t *at, float *bad)
{
    enum { CHUNK = 1 << 16 };
    static float buf[CHUNK];   /* check is single-threaded */
    if (fseeko(f, (off_t)off, SEEK_SET) != 0)
        return -1;
    for (uint64_t done = 0; done < count;) {
        size_t want = count - done < CHUNK ? (size_t)(count - done) : CHUNK;
        if (fread(buf, 4, want, f) != want)
            return -1;
        int64_t i = ddpc_first_nonfinite(buf, (int64_t)want);
        if (i >= 0) {
            *at = done + (uint64_t)i;
            *bad = buf[i];
            return 1;
        }
        done += want;
    }
    return 0;
}

/* The first element where two float ranges of the file differ: 1 (index
 * and values in *at, *x, *y), 0 equal, -1 a read failed. */
static int compare_floats(FILE *f, uint64_t a, uint64_t b, uint64_t count, uint64_t *at,
                          float *x, float *y)
{
    enum { CHUNK = 1 << 14 };
    static float ba[CHUNK], bb[CHUNK];
    for (uint64_t done = 0; done < count;) {
        size_t want = count - done < CHUNK ? (size_t)(count - done) : CHUNK;
        if (fseeko(f, (off_t)(a + 4 * done), SEEK_SET) != 0 || fread(ba, 4, want, f) != want ||
            fseeko(f, (off_t)(b + 4 * done), SEEK_SET) != 0 || fread(bb, 4, want, f) != want)
            return -1;
        for (size_t i = 0; i < want; i++)
            if (memcmp(&ba[i], &bb[i], 4) != 0) {
                *at = done + i;
                *x = ba[i];
                *y = bb[i];
                return 1;
            }
        done += want;
    }
    return 0;
}

/* Whether the header key [k, k + kl) is name. */
static int key_is(const char *k, size_t kl, const char *name)
{
    return strlen(name) == kl && memcmp(k, name, kl) == 0;
}

int st_check_net(const char *file, const char *path, const struct ddpc_net *net,
                 st_report_fn report, void *ctx)
{
    struct stc s = { report, ctx, 0 };
    if (!path)
        path = file;
    /* non-blocking: a FIFO named here must not hang check; only a regular
     * file is read */
    int fd = open(file, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0) {
        say(&s, "cannot read '%s': %s", path, strerror(errno));
        return s.n;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        say(&s, "'%s' is not a regular file; the run would refuse it", path);
        close(fd);
        return s.n;
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        say(&s, "cannot read '%s': %s", path, strerror(errno));
        close(fd);
        return s.n;
    }
    char *hdr = NULL;
    unsigned char lb[8];
    if (fread(lb, 1, 8, f) != 8) {
        say(&s, "'%s' is too short for safetensors (%lld bytes)", path, (long long)st.st_size);
        goto out;
    }
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = hl << 8 | lb[i];
    if (hl < 2 || hl > (uint64_t)st.st_size - 8 || hl > ST_MAX_HEADER) {
        say(&s, "'%s': header length %" PRIu64 " does not fit the file (%lld bytes): not a "
            "safetensors file", path, hl, (long long)st.st_size);
        goto out;
    }
    if (!(hdr = malloc(hl + 1)) || fread(hdr, 1, hl, f) != hl) {
        say(&s, "'%s': cannot read its header", path);
        goto out;
    }
    hdr[hl] = '\0';
    const char *end = hdr + hl, *k, *val, *ve;
    uint64_t data_len = (uint64_t)st.st_size - 8 - hl, data_at = 8 + hl;
    size_t kl;
    const char *body = st_skip_ws(hdr, end);
    if (body >= end || *body != '{') {
        say(&s, "'%s': its header is not a JSON object: not a safetensors file", path);
        goto out;
    }
    body++;
    int more;
    for (const char *p = body; (more = st_next(&p, end, &k, &kl, &val, &ve)) > 0;)
        ;
    if (more < 0) {
        say(&s, "'%s': its header is not valid JSON: not a safetensors file", path);
        goto out;
    }

    /* names: the file's entries against net's tensors (and the tied name) */
    int tied = net->tie_tensor >= 0 && net->tie_tensor < net->n_tensors && net->tie_name[0];
    int want = net->n_tensors + tied;
    char lacks[512] = "", holds[512] = "";
    int n_lacks = 0, n_holds = 0, shown_l = 0, shown_h = 0;
    for (int t = 0; t < want; t++) {
        const char *name = t < net->n_tensors ? net->tensor[t].name : net->tie_name;
        int times = 0;
        for (const char *p = body; st_next(&p, end, &k, &kl, &val, &ve) > 0;)
            times += key_is(k, kl, name);
        if (times == 0) {
            n_lacks++;
            list_name(lacks, sizeof lacks, &shown_l, name, strlen(name));
        } else if (times > 1) {
            say(&s, "'%s' holds tensor %s %d times", path, name, times);
        }
    }
    for (const char *p = body; st_next(&p, end, &k, &kl, &val, &ve) > 0;) {
        if (key_is(k, kl, "__metadata__"))
            continue;
        int known = tied && key_is(k, kl, net->tie_name);
        for (int t = 0; t < net->n_tensors && !known; t++)
            known = key_is(k, kl, net->tensor[t].name);
        if (!known) {
            n_holds++;
            list_name(holds, sizeof holds, &shown_h, k, kl);
        }
    }
    if (n_lacks || n_holds) {
        char a[600] = "", b[600] = "";
        if (n_lacks)
            snprintf(a, sizeof a, "lacks %d of this model's %d tensors (%s)", n_lacks, want,
                     lacks);
        if (n_holds)
            snprintf(b, sizeof b, "holds %d this model does not have (%s)", n_holds, holds);
        say(&s, "'%s' is not this model's: it %s%s%s; `ddpc plan` lists this model's tensors, "
            "and the file must hold exactly those names", path, a, n_lacks && n_holds ? " and " : "",
            b);
    }

    /* each tensor the file holds once: dtype, shape, offsets, values */
    for (int t = 0; t < want; t++) {
        const struct ddpc_tensor *T = &net->tensor[t < net->n_tensors ? t : net->tie_tensor];
        const char *name = t < net->n_tensors ? T->name : net->tie_name;
        const char *open = NULL, *close = NULL;
        int times = 0;
        for (const char *p = body; st_next(&p, end, &k, &kl, &val, &ve) > 0;)
            if (key_is(k, kl, name) && times++ == 0 && *val == '{') {
                open = val;
                close = ve - 1;
            }
        if (times != 1)
            continue;   /* said above */
        if (!close) {
            say(&s, "'%s': tensor %s is not a JSON object", path, name);
            continue;
        }
        const char *dt = st_field(open, close, "dtype");
        int is_i64 = dt && strncmp(dt, "\"I64\"", 5) == 0;
        int is_f32 = dt && strncmp(dt, "\"F32\"", 5) == 0;
        if (!(T->is_count ? (is_i64 || is_f32) : is_f32)) {
            const char *de = dt && *dt == '"' ? st_string_end(dt, close) : NULL;
            say(&s, "'%s': tensor %s is %.*s, not %s", path, name,
                de ? (int)(de - dt > 16 ? 16 : de - dt) : 9, de ? dt : "unreadable",
                T->is_count ? "I64" : "F32");
            continue;
        }
        uint64_t shp[8], offs[2];
        int nd = st_ints(st_field(open, close, "shape"), close, shp, 8);
        int no = st_ints(st_field(open, close, "data_offsets"), close, offs, 2);
        int same = nd == T->nd;
        for (int i = 0; same && i < nd; i++)
            same = shp[i] == (uint64_t)T->shape[i];
        if (!same) {
            char got[96], mine[96];
            uint64_t ts[4];
            for (int i = 0; i < T->nd; i++)
                ts[i] = (uint64_t)T->shape[i];
            shape_text(got, sizeof got, shp, nd > 0 ? nd : 0);
            shape_text(mine, sizeof mine, ts, T->nd);
            say(&s, "'%s': tensor %s has shape %s, this model's has %s", path, name,
                nd < 0 ? "(unreadable)" : got, mine);
            continue;
        }
        uint64_t esz = is_i64 ? 8 : 4;
        if (no != 2 || offs[1] < offs[0] || offs[1] - offs[0] != esz * T->numel ||
            offs[1] > data_len) {
            say(&s, "'%s': tensor %s's data_offsets do not fit its shape or the file", path,
                name);
            continue;
        }
        if (!is_f32)
            continue;
        uint64_t at = 0;
        float bad = 0;
        int r = scan_floats(f, data_at + offs[0], T->numel, &at, &bad);
        if (r < 0) {
            say(&s, "'%s': cannot read tensor %s: %s", path, name,
                ferror(f) ? strerror(errno) : "truncated");
            continue;
        }
        if (r > 0) {
            char ix[96];
            index_text(ix, sizeof ix, at, T->shape, T->nd);
            say(&s, "'%s': tensor %s element %" PRIu64 " (index %s) is %s (as float32): the "
                "model would start from it; fix or re-export the file", path, name, at, ix,
                ddpc_nonfinite_name(bad));
            continue;
        }
        if (t == net->n_tensors) {
            /* the tied name: the same values as the weight it ties to */
            const char *wo = NULL, *wc = NULL;
            for (const char *p = body; st_next(&p, end, &k, &kl, &val, &ve) > 0;)
                if (key_is(k, kl, T->name) && *val == '{') {
                    wo = val;
                    wc = ve - 1;
                }
            uint64_t wofs[2];
            if (!wc || st_ints(st_field(wo, wc, "data_offsets"), wc, wofs, 2) != 2 ||
                wofs[1] - wofs[0] != 4 * T->numel || wofs[1] > data_len)
                continue;   /* the weight's own check said why */
            float x, y;
            r = compare_floats(f, data_at + offs[0], data_at + wofs[0], T->numel, &at, &x, &y);
            if (r > 0)
                say(&s, "'%s': %s differs from %s (element %" PRIu64 ": %.9g vs %.9g), but this "
                    "model ties them (one weight): a file of an untied model cannot be "
                    "continued", path, net->tie_name, T->name, at, (double)x, (double)y);
            else if (r < 0)
                say(&s, "'%s': cannot read tensor %s", path, name);
        }
    }
out:
    free(hdr);
    fclose(f);
    return s.n;
}
