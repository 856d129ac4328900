/* ident.c - a job's checkpoint identity: the text in ident.h's format, its
 * hash, and the comparison that names what changed.
 *
 * The field list and why each field is T or C is in ident.h; this file is
 * its only implementation. Values are printed canonically (enums by their
 * spec spelling, doubles as the shortest text that reads back exactly), so
 * the same job always gives the same bytes and a message can quote them.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ident.h"
#include "keytab.h"     /* ddpc_job_walk: every field of the job */
#include "spec.h"       /* spec_sha256_hex */

struct ident_buf {
    char  *p;
    size_t cap, len;
    int    over;
    char   epochs_kind;         /* 'T' with a cosine schedule, else 'C' */
};

static void put(struct ident_buf *b, char kind, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void put(struct ident_buf *b, char kind, const char *key, const char *fmt, ...)
{
    if (b->over)
        return;
    int n = snprintf(b->p + b->len, b->cap - b->len, "%c %s=", kind, key);
    if (n < 0 || (size_t)n >= b->cap - b->len) {
        b->over = 1;
        return;
    }
    b->len += (size_t)n;
    va_list ap;
    va_start(ap, fmt);
    n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n + 1 >= b->cap - b->len) {
        b->over = 1;
        return;
    }
    b->len += (size_t)n;
    b->p[b->len++] = '\n';
    b->p[b->len] = '\0';
}

/* The shortest of %.15g..%.17g that reads back as v. */
static void fmt_double(char *s, size_t cap, double v)
{
    for (int prec = 15; prec <= 17; prec++) {
        (void)snprintf(s, cap, "%.*g", prec, v);
        if (strtod(s, NULL) == v)
            break;
    }
}

/* Does path name prefix or a field under it ("data.test" covers
 * "data.test.format", "model.items" covers "model.items[2].out")? */
static int under(const char *path, const char *prefix)
{
    size_t n = strlen(prefix);
    return strncmp(path, prefix, n) == 0 &&
           (path[n] == '\0' || path[n] == '.' || path[n] == '[');
}

/* Not described: they say where to resume from, or name the files. */
static const char *const ident_skip[] = {
    "version", "name", "checkpoint.resume", "checkpoint.resume_path",
};

/* Compatible: the rest of the job (ident.h says why). Everything not
 * listed here is the trajectory's: a key added later refuses a resume
 * across its change until it is listed, never accepts a wrong one. */
static const char *const ident_compatible[] = {
    "n_devices", "devices_all", "devices", "accelerator", "strategy", "bucket_cap_mb",
    "checkpoint_dir", "nccl_timeout_s", "rank_sync_timeout_s",
    "data.test", "data.has_test", "data.test_every_n_epochs",
    "checkpoint", "logging", "launch", "other_run_outputs",
};

static char field_kind(const struct ident_buf *b, const char *path)
{
    for (size_t i = 0; i < sizeof ident_skip / sizeof ident_skip[0]; i++)
        if (strcmp(path, ident_skip[i]) == 0)
            return 0;
    if (strcmp(path, "epochs") == 0)
        return b->epochs_kind;
    for (size_t i = 0; i < sizeof ident_compatible / sizeof ident_compatible[0]; i++)
        if (under(path, ident_compatible[i]))
            return 'C';
    return 'T';
}

/* The spec's spelling where the C member differs: messages quote keys a
 * user can find in the spec ("nccl_timeout changed", not "nccl_timeout_s"). */
static const char *const ident_spelled[][2] = {
    { "nccl_timeout_s", "nccl_timeout" },
    { "rank_sync_timeout_s", "rank_sync_timeout" },
    { "checkpoint.export_path", "checkpoint.export" },
    { "launch.time_limit_s", "launch.time_limit" },
};

static void put_field(void *ctx, const struct ddpc_field *fd, const char *path, const char *p,
                      const char *blk)
{
    struct ident_buf *b = ctx;
    char kind = field_kind(b, path);
    if (!kind)
        return;
    for (size_t i = 0; i < sizeof ident_spelled / sizeof ident_spelled[0]; i++)
        if (strcmp(path, ident_spelled[i][0]) == 0)
            path = ident_spelled[i][1];
    char v[64];
    switch (fd->type) {
    case DDPC_FT_I32:
    case DDPC_FT_BOOL:
    case DDPC_FT_I64:
        put(b, kind, path, "%lld", (long long)ddpc_field_i64(fd, p));
        break;
    case DDPC_FT_U64:
        put(b, kind, path, "%llu", (unsigned long long)ddpc_field_u64(p));
        break;
    case DDPC_FT_F64:
        fmt_double(v, sizeof v, ddpc_field_f64(p));
        put(b, kind, path, "%s", v);
        break;
    case DDPC_FT_STR: {
        const char *s = ddpc_field_str(p);
        put(b, kind, path, "%s", s && *s ? s : "(none)");
        break;
    }
    case DDPC_FT_ENUM: {
        const struct ddpc_enum_value *e = ddpc_enum_find(fd->e, (int)ddpc_field_i64(fd, p));
        if (e)
            put(b, kind, path, "%s", e->spelling);
        else
            put(b, kind, path, "%lld", (long long)ddpc_field_i64(fd, p));
        break;
    }
    case DDPC_FT_I32_LIST: {
        char list[16 * 64] = "";
        size_t ll = 0;
        int n = ddpc_field_count(fd, blk);
        for (int i = 0; i < n; i++) {
            int32_t x;
            memcpy(&x, p + (size_t)i * sizeof x, sizeof x);
            int w = snprintf(list + ll, sizeof list - ll, "%s%d", i ? "," : "", (int)x);
            if (w > 0 && (size_t)w < sizeof list - ll)
                ll += (size_t)w;
        }
        put(b, kind, path, "[%s]", list);
        break;
    }
    default:
        break;
    }
}

int ident_format(const struct ddpc_job *j, int world, const char *backend, char *buf,
                 size_t cap)
{
    if (!buf || cap == 0)
        return -1;
    /* cosine decays over the whole run: more epochs, a different curve */
    struct ident_buf b = { buf, cap, 0, 0,
                           j->schedule.decay == DDPC_DECAY_COSINE ? 'T' : 'C' };
    buf[0] = '\0';
    /* what the job struct does not hold: where it runs */
    put(&b, 'T', "world", "%d", world);
    put(&b, 'T', "backend", "%s", backend ? backend : "cpu");
    /* every field keys.def knows, in table order */
    ddpc_job_walk(j, put_field, &b);
    return b.over ? -1 : (int)b.len;
}

void ident_hash(const char *text, char out[DDPC_IDENT_HASH_LEN + 1])
{
    /* the T lines are one run of text at the start (ident_format writes
     * them first), but select them anyway: a description from elsewhere
     * may interleave */
    size_t n = strlen(text);
    char *t = malloc(n + 1);
    if (!t) {
        /* hash the whole text: a mismatch at worst, never a false match
         * (C lines only add to it) */
        spec_sha256_hex(text, n, out);
        return;
    }
    size_t m = 0;
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) + 1 : strlen(p);
        if (p[0] == 'T' && p[1] == ' ') {
            memcpy(t + m, p, len);
            m += len;
        }
        p += len;
    }
    spec_sha256_hex(t, m, out);
    free(t);
}

/* Finds the kind line for key (klen bytes) in text; sets *val, *vlen. */
static int find_line(const char *text, char kind, const char *key, size_t klen,
                     const char **val, size_t *vlen)
{
    for (const char *p = text; p && *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        if (len > klen + 2 && p[0] == kind && p[1] == ' ' && memcmp(p + 2, key, klen) == 0 &&
            p[2 + klen] == '=') {
            *val = p + 3 + klen;
            *vlen = len - 3 - klen;
            return 1;
        }
        p = nl ? nl + 1 : NULL;
    }
    return 0;
}

int ident_value(const char *text, char kind, const char *key, char *buf, size_t cap)
{
    const char *v;
    size_t vl;
    int found = text && find_line(text, kind, key, strlen(key), &v, &vl);
    if (cap)
        (void)snprintf(buf, cap, "%.*s", found ? (int)vl : 0, found ? v : "");
    return found;
}

struct diff_out {
    char  *p;
    size_t cap, len;
    int    n;
};

static void diff_add(struct diff_out *d, const char *key, size_t klen, const char *a,
                     size_t al, const char *b, size_t bl)
{
    d->n++;
    if (d->cap == 0)
        return;
    size_t room = d->cap - d->len;
    int w = snprintf(d->p + d->len, room, "%s%.*s changed: %.*s -> %.*s", d->n > 1 ? "; " : "",
                     (int)klen, key, (int)al, a, (int)bl, b);
    if (w >= 0 && (size_t)w < room) {
        d->len += (size_t)w;
        return;
    }
    /* truncated: end with "..." and stop adding */
    if (d->cap >= 4)
        memcpy(d->p + d->cap - 4, "...", 4);
    d->len = d->cap - 1;
}

/* The spec's limit_train_batches is two fields in the job (a count, 0 when
 * it is a fraction; the fraction): described apart, so the hash of every
 * checkpoint stays what it was, but named in a diff as the one key the user
 * wrote, spelled as written there: 3, or 1.0 and 0.5 (a fraction keeps its
 * point: 1 would be one batch). Writes text's value into buf; 0 when text
 * has no such line. */
static int limit_spelled(const char *text, char kind, char *buf, size_t cap)
{
    const char *v;
    size_t vl;
    if (!find_line(text, kind, "limit_train_batches", 19, &v, &vl))
        return 0;
    if (!(vl == 1 && v[0] == '0') ||
        !find_line(text, kind, "limit_train_fraction", 20, &v, &vl)) {
        (void)snprintf(buf, cap, "%.*s", (int)vl, v);
        return 1;
    }
    int bare = !memchr(v, '.', vl) && !memchr(v, 'e', vl) && !memchr(v, 'n', vl);
    (void)snprintf(buf, cap, "%.*s%s", (int)vl, v, bare ? ".0" : "");
    return 1;
}

static void diff_scan(struct diff_out *d, const char *from, const char *to, char kind,
                      int from_is_old)
{
    for (const char *p = from; p && *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        if (len > 2 && p[0] == kind && p[1] == ' ' && eq) {
            const char *key = p + 2;
            size_t klen = (size_t)(eq - key);
            const char *v = eq + 1, *w;
            size_t vl = len - 3 - klen, wl;
            char lv[64], lw[64];
            if (klen == 20 && memcmp(key, "limit_train_fraction", 20) == 0)
                goto next;              /* named as limit_train_batches */
            if (klen == 19 && memcmp(key, "limit_train_batches", 19) == 0 &&
                limit_spelled(from, kind, lv, sizeof lv)) {
                if (!limit_spelled(to, kind, lw, sizeof lw))
                    diff_add(d, key, klen, from_is_old ? lv : "(absent)",
                             from_is_old ? strlen(lv) : 8, from_is_old ? "(absent)" : lv,
                             from_is_old ? 8 : strlen(lv));
                else if (from_is_old && strcmp(lv, lw) != 0)
                    diff_add(d, key, klen, lv, strlen(lv), lw, strlen(lw));
                goto next;
            }
            int there = find_line(to, kind, key, klen, &w, &wl);
            /* a key whose kind changed with the job (epochs is T under a
             * cosine schedule, else C) is not absent: its value is the
             * other kind's; the other side of the change is named too */
            int moved = !there && find_line(to, kind == 'T' ? 'C' : 'T', key, klen, &w, &wl);
            if (moved) {
                if (vl != wl || memcmp(v, w, vl) != 0) {
                    if (from_is_old)
                        diff_add(d, key, klen, v, vl, w, wl);
                    else
                        diff_add(d, key, klen, w, wl, v, vl);
                }
            } else if (from_is_old) {
                if (!there)
                    diff_add(d, key, klen, v, vl, "(absent)", 8);
                else if (vl != wl || memcmp(v, w, vl) != 0)
                    diff_add(d, key, klen, v, vl, w, wl);
            } else if (!there) {
                diff_add(d, key, klen, "(absent)", 8, v, vl);
            }
        }
next:
        p = nl ? nl + 1 : NULL;
    }
}

int ident_diff(const char *old, const char *now, char kind, char *out, size_t cap)
{
    struct diff_out d = { out, cap, 0, 0 };
    if (cap)
        out[0] = '\0';
    old = old ? old : "";
    now = now ? now : "";
    diff_scan(&d, old, now, kind, 1);   /* changed or removed */
    diff_scan(&d, now, old, kind, 0);   /* added */
    return d.n;
}
