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
#include "spec.h"       /* spec_sha256_hex */

struct ident_buf {
    char  *p;
    size_t cap, len;
    int    over;
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
static void put_d(struct ident_buf *b, char kind, const char *key, double v)
{
    char s[40];
    for (int prec = 15; prec <= 17; prec++) {
        (void)snprintf(s, sizeof s, "%.*g", prec, v);
        if (strtod(s, NULL) == v)
            break;
    }
    put(b, kind, key, "%s", s);
}

static void put_e(struct ident_buf *b, char kind, const char *key, int v,
                  const char *const *names, int n)
{
    if (v >= 0 && v < n)
        put(b, kind, key, "%s", names[v]);
    else
        put(b, kind, key, "%d", v);
}

static void put_s(struct ident_buf *b, char kind, const char *key, const char *s)
{
    put(b, kind, key, "%s", s && *s ? s : "(none)");
}

/* An enum's spellings from its one list (job.h), aliases left out */
#define IDENT_NAME_(id, s) s,
#define IDENT_SKIP_(id, s)
#define IDENT_LIST_(list) { DDPC_ENUM_LIST_##list(IDENT_NAME_, IDENT_SKIP_, IDENT_NAME_) }
#define NAMES(list) (const char *const[])IDENT_LIST_(list), \
    (int)(sizeof((const char *const[])IDENT_LIST_(list)) / sizeof(const char *))

static void put_source(struct ident_buf *b, char kind, const char *pre,
                       const struct ddpc_data_source *s)
{
    char k[64];
#define KEY(name) ((void)snprintf(k, sizeof k, "%s.%s", pre, name), k)
    put_e(b, kind, KEY("format"), s->format, NAMES(data_format));
    switch (s->format) {
    case DDPC_DATA_IDX:
    case DDPC_DATA_NPY:
        put_s(b, kind, KEY("inputs"), s->inputs);
        put_s(b, kind, KEY("labels"), s->labels);
        break;
    case DDPC_DATA_CSV:
        put_s(b, kind, KEY("path"), s->path);
        put(b, kind, KEY("label_column"), "%d", (int)s->label_column);
        break;
    case DDPC_DATA_SYNTHETIC:
        put(b, kind, KEY("samples"), "%lld", (long long)s->samples);
        put(b, kind, KEY("features"), "%d", (int)s->features);
        put(b, kind, KEY("classes"), "%d", (int)s->classes);
        put(b, kind, KEY("seed"), "%llu", (unsigned long long)s->seed);
        break;
    }
#undef KEY
}

int ident_format(const struct ddpc_job *j, int world, const char *backend, char *buf,
                 size_t cap)
{
    if (!buf || cap == 0)
        return -1;
    struct ident_buf b = { buf, cap, 0, 0 };
    buf[0] = '\0';

    /* ---- T: the trajectory ---- */
    put(&b, 'T', "world", "%d", world);
    put_s(&b, 'T', "backend", backend ? backend : "cpu");
    put(&b, 'T', "seed", "%llu", (unsigned long long)j->seed);
    put(&b, 'T', "deterministic", "%d", (int)j->deterministic);
    put_d(&b, 'T', "learning_rate", j->learning_rate);
    put_e(&b, 'T', "lr_scaling", j->lr_scaling, NAMES(lr_scaling));
    put(&b, 'T', "batch_size", "%d", (int)j->batch_size);
    put(&b, 'T', "grad_accumulation", "%d", (int)j->grad_accumulation);
    put(&b, 'T', "limit_train_batches", "%lld", (long long)j->limit_train_batches);
    put_d(&b, 'T', "limit_train_fraction", j->limit_train_fraction);
    put_e(&b, 'T', "precision", j->precision, NAMES(precision));
    put_e(&b, 'T', "matmul_precision", j->matmul_precision, NAMES(matmul_precision));
    put_d(&b, 'T', "grad_clip_norm", j->grad_clip_norm);
    put_e(&b, 'T', "model.type", j->model.type, NAMES(model_type));
    char layers[16 * DDPC_MAX_LAYERS] = "";
    size_t ll = 0;
    for (int i = 0; i < j->model.n_layers && i < DDPC_MAX_LAYERS; i++) {
        int n = snprintf(layers + ll, sizeof layers - ll, "%s%d", i ? "," : "",
                         (int)j->model.layers[i]);
        if (n > 0 && (size_t)n < sizeof layers - ll)
            ll += (size_t)n;
    }
    put(&b, 'T', "model.layers", "[%s]", layers);
    put_e(&b, 'T', "model.activation", j->model.activation,
          NAMES(activation));
    put_e(&b, 'T', "model.init", j->model.init,
          NAMES(init));
    /* a sequential model: its input and every item (only then, so the
     * identity of an mlp is what it was) */
    if (j->model.n_input > 0)
        put(&b, 'T', "model.input", "[%d,%d,%d]/%d", (int)j->model.input[0],
            (int)j->model.input[1], (int)j->model.input[2], (int)j->model.n_input);
    for (int i = 0; i < j->model.n_items && i < DDPC_MAX_ITEMS; i++) {
        const struct ddpc_layer_item *it = &j->model.items[i];
        char key[40];
        (void)snprintf(key, sizeof key, "model.items[%d].type", i);
        put_e(&b, 'T', key, it->type, NAMES(layer_type));
        (void)snprintf(key, sizeof key, "model.items[%d]", i);
        put(&b, 'T', key, "body=%d in=%d out=%d k=%d s=%d p=%d bias=%d os=%d gelu=%s "
            "p=%.17g momentum=%.17g eps=%.17g slope=%.17g", (int)it->n_body, (int)it->in, (int)it->out, (int)it->kernel_size, (int)it->stride,
            (int)it->padding, (int)it->bias, (int)it->output_size,
            it->approximate == DDPC_GELU_TANH ? "tanh" : "none", it->p, it->momentum, it->eps,
            it->negative_slope);
    }
    if (j->model.init_from)
        put_s(&b, 'T', "model.init_from", j->model.init_from);
    put_e(&b, 'T', "loss", j->loss, NAMES(loss));
    put_source(&b, 'T', "data.train", &j->data.train);
    put(&b, 'T', "data.shuffle", "%d", (int)j->data.shuffle);
    put(&b, 'T', "data.drop_last", "%d", (int)j->data.drop_last);
    put_e(&b, 'T', "optimizer.type", j->optimizer.type, NAMES(optimizer_type));
    put_d(&b, 'T', "optimizer.momentum", j->optimizer.momentum);
    put(&b, 'T', "optimizer.nesterov", "%d", (int)j->optimizer.nesterov);
    put_d(&b, 'T', "optimizer.weight_decay", j->optimizer.weight_decay);
    put_d(&b, 'T', "optimizer.beta1", j->optimizer.beta1);
    put_d(&b, 'T', "optimizer.beta2", j->optimizer.beta2);
    put_d(&b, 'T', "optimizer.eps", j->optimizer.eps);
    put(&b, 'T', "schedule.warmup_steps", "%lld", (long long)j->schedule.warmup_steps);
    put_d(&b, 'T', "schedule.warmup_start_factor", j->schedule.warmup_start_factor);
    put_e(&b, 'T', "schedule.decay", j->schedule.decay, NAMES(decay));
    put_d(&b, 'T', "schedule.min_lr_factor", j->schedule.min_lr_factor);
    put(&b, 'T', "schedule.step_size", "%lld", (long long)j->schedule.step_size);
    put_d(&b, 'T', "schedule.gamma", j->schedule.gamma);
    /* cosine decays over the whole run: more epochs, a different curve */
    char ep_kind = j->schedule.decay == DDPC_DECAY_COSINE ? 'T' : 'C';
    put(&b, ep_kind, "epochs", "%d", (int)j->epochs);

    /* ---- C: the rest ---- */
    char devs[8 * DDPC_MAX_DEVICES] = "";
    size_t dl = 0;
    for (int i = 0; i < j->n_devices && i < DDPC_MAX_DEVICES; i++) {
        int n = snprintf(devs + dl, sizeof devs - dl, "%s%d", i ? "," : "", (int)j->devices[i]);
        if (n > 0 && (size_t)n < sizeof devs - dl)
            dl += (size_t)n;
    }
    put(&b, 'C', "devices", j->devices_all ? "all" : "[%s]", devs);
    put_e(&b, 'C', "accelerator", j->accelerator, NAMES(accelerator));
    put_e(&b, 'C', "strategy", j->strategy, NAMES(strategy));
    put_d(&b, 'C', "bucket_cap_mb", j->bucket_cap_mb);
    put_s(&b, 'C', "checkpoint_dir", j->checkpoint_dir);
    put_d(&b, 'C', "nccl_timeout", j->nccl_timeout_s);
    put_d(&b, 'C', "rank_sync_timeout", j->rank_sync_timeout_s);
    put(&b, 'C', "data.has_test", "%d", (int)j->data.has_test);
    if (j->data.has_test) {
        put_source(&b, 'C', "data.test", &j->data.test);
        put(&b, 'C', "data.test_every_n_epochs", "%d", (int)j->data.test_every_n_epochs);
    }
    put(&b, 'C', "checkpoint.every_n_epochs", "%d", (int)j->checkpoint.every_n_epochs);
    put(&b, 'C', "checkpoint.every_n_steps", "%lld", (long long)j->checkpoint.every_n_steps);
    put_d(&b, 'C', "checkpoint.every_n_minutes", j->checkpoint.every_n_minutes);
    put(&b, 'C', "checkpoint.keep_last", "%d", (int)j->checkpoint.keep_last);
    put_s(&b, 'C', "checkpoint.export", j->checkpoint.export_path);
    put(&b, 'C', "logging.every_n_steps", "%d", (int)j->logging.every_n_steps);
    put_s(&b, 'C', "logging.metrics_csv", j->logging.metrics_csv);
    put_s(&b, 'C', "logging.tensorboard", j->logging.tensorboard);
    put_e(&b, 'C', "logging.progress", j->logging.progress, NAMES(progress));
    put(&b, 'C', "launch.num_nodes", "%d", (int)j->launch.num_nodes);
    put_e(&b, 'C', "launch.launcher", j->launch.launcher, NAMES(launcher));
    put_s(&b, 'C', "launch.master_addr", j->launch.master_addr);
    put(&b, 'C', "launch.master_port", "%d", (int)j->launch.master_port);
    put(&b, 'C', "launch.max_restarts", "%d", (int)j->launch.max_restarts);
    put_d(&b, 'C', "launch.time_limit", j->launch.time_limit_s);
    put_s(&b, 'C', "launch.partition", j->launch.partition);
    put_s(&b, 'C', "launch.account", j->launch.account);
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
            int there = find_line(to, kind, key, klen, &w, &wl);
            if (from_is_old) {
                if (!there)
                    diff_add(d, key, klen, v, vl, "(absent)", 8);
                else if (vl != wl || memcmp(v, w, vl) != 0)
                    diff_add(d, key, klen, v, vl, w, wl);
            } else if (!there) {
                diff_add(d, key, klen, "(absent)", 8, v, vl);
            }
        }
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
