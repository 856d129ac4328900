/* validate.c - positioned tree -> struct ddpc_job, by walking spec/keys.def.
 *
 * Owns: the key table's instantiation, generic type/range/enum checks and
 * their messages, defaults, unknown keys with did-you-mean, keys that apply
 * only to some optimizer types or data formats, the custom validators named
 * in keys.def, the cross-key rules and the data-header reads they need.
 * Never parses YAML (load.c does), never prints (diag.c does), and never
 * runs anything a spec names: data files are opened read-only, non-blocking,
 * and only when they are regular files.
 */
#include "validate.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "layers.h"
#include "epoch_batches.h"
#include "npy_dtype.h"
#include "same_file.h"
#include "csv_header.h"
#include "probe.h"
#include "safetensors.h"
#include "tokens.h"
#include "units.h"

/* The shortest deadline a duration key takes: below a scheduler tick, every
 * healthy collective would time out. */
#define DDPC_MIN_TIMEOUT_S 0.001

struct ddpc_vctx {
    const char *file;
    const struct spec_options *opt;
    struct ddpc_arena *a;
    struct ddpc_diag *d;
    struct ddpc_job *job;
    const struct ddpc_node *root;
    const char *dir;        /* the spec file's directory as written ("" for none) */
    const char *abs_dir;    /* the same, absolute; computed on first use */
    /* model.layers items of a sequential model: where each was written */
    const struct ddpc_node *item_node[DDPC_MAX_ITEMS];
    const char *item_path[DDPC_MAX_ITEMS];
    /* DDPC_DEFAULT_WHEN rows whose condition names another block
     * ("model.type=gpt"): applied once the whole spec is read, since that
     * block may come later in the file */
    struct { int key; char *field; const char *when, *def; char path[128]; } late[8];
    int n_late;
};

/* ===================== the key table ===================== */

static int key_devices(struct ddpc_vctx *c, const struct ddpc_node *n, void *field, const char *path);
static int key_layers(struct ddpc_vctx *c, const struct ddpc_node *n, void *field, const char *path);
static int key_betas(struct ddpc_vctx *c, const struct ddpc_node *n, void *field, const char *path);
static int key_range(struct ddpc_vctx *c, const struct ddpc_node *n, void *field, const char *path);
static int key_limit(struct ddpc_vctx *c, const struct ddpc_node *n, void *field, const char *path);
static int key_resume(struct ddpc_vctx *c, const struct ddpc_node *n, void *field, const char *path);
static int check_host(struct ddpc_vctx *c, const struct ddpc_node *n, void *field, const char *path);
static int check_slurm_name(struct ddpc_vctx *c, const struct ddpc_node *n, void *field,
                            const char *path);
static int key_input(struct ddpc_vctx *c, const struct ddpc_node *n, void *field, const char *path);
static int check_sync_bn(struct ddpc_vctx *c, const struct ddpc_node *n, void *field, const char *path);
static int check_path_literal(struct ddpc_vctx *c, const struct ddpc_node *n, void *field,
                              const char *path);

#define NOLO     DDPC_NOLO
#define NOHI     DDPC_NOHI
#define REQUIRED DDPC_F_REQUIRED
#define LO_OPEN  DDPC_F_LO_OPEN
#define HI_OPEN  DDPC_F_HI_OPEN
#define LIST     DDPC_F_LIST

#define DDPC_KEY(b, n, t, f, lo, hi, fl, def, only, chk, doc) \
    { DDPC_B_##b, #n, DDPC_T_##t, DDPC_OFF_##b(f), lo, hi, fl, def, NULL, only, DDPC_B_ROOT, \
      chk, NULL, NULL, doc },
#define DDPC_ENUM(b, n, f, list, fl, def, only, doc) \
    { DDPC_B_##b, #n, DDPC_T_ENUM, DDPC_OFF_##b(f), NOLO, NOHI, fl, def, &ddpc_enum_##list, only, \
      DDPC_B_ROOT, NULL, NULL, NULL, doc },
#define DDPC_BLOCK(b, n, ch, m, fl, doc) \
    { DDPC_B_##b, #n, DDPC_T_BLOCK, DDPC_OFF_##b(m), NOLO, NOHI, fl, NULL, NULL, NULL, DDPC_B_##ch, \
      NULL, NULL, NULL, doc },
#define DDPC_CUSTOM(b, n, f, fn, fl, def, only, schema, tt, doc) \
    { DDPC_B_##b, #n, DDPC_T_CUSTOM, DDPC_OFF_##b(f), NOLO, NOHI, fl, def, NULL, only, DDPC_B_ROOT, \
      fn, schema, tt, doc },

#define DDPC_ITEM(list, n, lt, ch, fl, doc) \
    { DDPC_B_##list, #n, DDPC_T_ITEM, (size_t)(lt), NOLO, NOHI, fl, NULL, NULL, NULL, DDPC_B_##ch, \
      NULL, NULL, NULL, doc },

const struct ddpc_key ddpc_keys[] = {
#include "keys.def"
};
const int ddpc_n_keys = (int)(sizeof ddpc_keys / sizeof ddpc_keys[0]);

#define DDPC_DEFAULT_WHEN(b, n, when, def) { DDPC_B_##b, #n, when, def },
const struct ddpc_default_when ddpc_default_whens[] = {
#include "keys.def"
    { DDPC_B_COUNT, NULL, NULL, NULL }   /* the end (the table may have no rows) */
};

#define MAX_KEYS 256   /* per-walk arrays; a test asserts ddpc_n_keys fits */

/* ===================== other tools' names (aliases.def) ===================== */

#define DDPC_ALIAS(tool, name, shown, target, note) { DDPC_TOOL_##tool, #name, shown, target, note },
#define DDPC_VALUE(key, value, note)
const struct ddpc_alias ddpc_aliases[] = {
#include "aliases.def"
};
#undef DDPC_ALIAS
#undef DDPC_VALUE
const int ddpc_n_aliases = (int)(sizeof ddpc_aliases / sizeof ddpc_aliases[0]);

#define DDPC_ALIAS(tool, name, shown, target, note)
#define DDPC_VALUE(key, value, note) { #key, value, note },
const struct ddpc_refused_value ddpc_refused_values[] = {
#include "aliases.def"
};
#undef DDPC_ALIAS
#undef DDPC_VALUE
const int ddpc_n_refused_values =
    (int)(sizeof ddpc_refused_values / sizeof ddpc_refused_values[0]);

const char *validate_tool_name(enum ddpc_tool t)
{
    static const char *const names[DDPC_TOOL_COUNT] = {
        [DDPC_TOOL_LIGHTNING] = "Lightning Trainer", [DDPC_TOOL_LIGHTNINGCLI] = "LightningCLI",
        [DDPC_TOOL_MODELCKPT] = "Lightning ModelCheckpoint",
        [DDPC_TOOL_TORCHRUN] = "torchrun", [DDPC_TOOL_PYTORCH] = "PyTorch",
        [DDPC_TOOL_TRAININGPARAMS] = "TrainingParams", [DDPC_TOOL_HF] = "Hugging Face TrainingArguments",
    };
    return t < DDPC_TOOL_COUNT ? names[t] : "";
}

const struct ddpc_alias *validate_alias_find(const char *name, size_t len)
{
    char key[64];
    while (len && *name == '-')
        name++, len--;
    if (len == 0 || len >= sizeof key)
        return NULL;
    for (size_t i = 0; i < len; i++)
        key[i] = name[i] == '-' ? '_' : name[i];
    key[len] = '\0';
    for (int i = 0; i < ddpc_n_aliases; i++) {
        const struct ddpc_alias *a = &ddpc_aliases[i];
        if (strcmp(a->name, key) != 0)
            continue;
        const char *last = a->target ? strrchr(a->target, '.') : NULL;
        last = last ? last + 1 : a->target;
        if ((last && strcmp(last, a->name) == 0) || (!a->target && validate_key_exists(a->name)))
            continue;   /* ddpc's own key: the caller's "wrong block" message fits */
        return a;
    }
    return NULL;
}

static const char *const block_paths[DDPC_B_COUNT] = {
    [DDPC_B_ROOT] = "", [DDPC_B_MODEL] = "model", [DDPC_B_DATA] = "data",
    [DDPC_B_SOURCE] = "data.train", [DDPC_B_OPTIMIZER] = "optimizer",
    [DDPC_B_SCHEDULE] = "schedule", [DDPC_B_CHECKPOINT] = "checkpoint",
    [DDPC_B_LOGGING] = "logging", [DDPC_B_LAUNCH] = "launch",
    [DDPC_B_LAYERS] = "model.layers", [DDPC_B_L_LINEAR] = "model.layers[].linear",
    [DDPC_B_L_CONV2D] = "model.layers[].conv2d", [DDPC_B_L_POOL] = "model.layers[].maxpool2d",
    [DDPC_B_L_ADAPTIVE] = "model.layers[].adaptiveavgpool2d",
    [DDPC_B_L_BATCHNORM] = "model.layers[].batchnorm2d",
    [DDPC_B_L_LAYERNORM] = "model.layers[].layernorm", [DDPC_B_L_DROPOUT] = "model.layers[].dropout",
    [DDPC_B_L_LEAKY] = "model.layers[].leaky_relu", [DDPC_B_L_GELU] = "model.layers[].gelu",
    [DDPC_B_L_NONE] = "model.layers[]", [DDPC_B_ITEM] = "model.items",
};

const char *validate_block_path(enum ddpc_block b)
{
    return b < DDPC_B_COUNT ? block_paths[b] : "";
}

/* ===================== small helpers ===================== */

/* A finding of rule (spec/rules.def, which gives its severity) at node n. */
static void vdiag(struct ddpc_vctx *c, enum ddpc_rule rule, const struct ddpc_node *n,
                  const char *path, const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static void vdiag(struct ddpc_vctx *c, enum ddpc_rule rule, const struct ddpc_node *n,
                  const char *path, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int line = n ? n->line : 0, col = n ? n->col : 0;
    if (!n && c->root) {
        line = c->root->line;
        col = c->root->col;
    }
    if (n && n->origin) {   /* a value from --set: name it, it has no line */
        diag_rule(c->d, rule, n->origin, 0, 0, path, "%s", msg);
        return;
    }
    diag_rule(c->d, rule, c->file, line, col, path, "%s", msg);
}

static void join_path(char *out, size_t cap, const char *a, const char *b)
{
    snprintf(out, cap, "%s%s%s", a, a[0] ? "." : "", b);
}

/* How a node looks in a message: 'text' for plain scalars, "text" for
 * quoted ones, "a mapping"/"a sequence" otherwise. Long or unprintable
 * text is shortened and masked. */
static const char *describe(const struct ddpc_node *n, char *buf, size_t cap)
{
    if (n->kind == DDPC_NODE_MAP)
        return "a mapping";
    if (n->kind == DDPC_NODE_SEQ)
        return "a sequence";
    if (load_is_null(n))
        return "null";
    char text[48];
    size_t o = 0, i = 0;
    /* 40 bytes, but never half a UTF-8 character (JSON output must stay valid) */
    for (; i < n->len && (o < 40 || ((unsigned char)n->str[i] & 0xC0) == 0x80) && o < 46; i++) {
        unsigned char ch = (unsigned char)n->str[i];
        text[o++] = ch < 0x20 || ch == 0x7f ? '?' : (char)ch;
    }
    text[o] = '\0';
    const char *more = i < n->len ? "..." : "";
    if (n->quoted)
        snprintf(buf, cap, "the string \"%s%s\"", text, more);
    else
        snprintf(buf, cap, "'%s%s'", text, more);
    return buf;
}

static const char *fmt_num(double x, char *buf, size_t cap)
{
    if (x == floor(x) && fabs(x) < 1e15)
        snprintf(buf, cap, "%.0f", x);
    else
        snprintf(buf, cap, "%g", x);
    return buf;
}

int validate_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63)
        return 99;
    int dp[64][64];
    for (size_t i = 0; i <= la; i++)
        dp[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++)
        dp[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            int cost = a[i - 1] != b[j - 1];
            int v = dp[i - 1][j] + 1;
            if (dp[i][j - 1] + 1 < v)
                v = dp[i][j - 1] + 1;
            if (dp[i - 1][j - 1] + cost < v)
                v = dp[i - 1][j - 1] + cost;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                dp[i - 2][j - 2] + 1 < v)
                v = dp[i - 2][j - 2] + 1;
            dp[i][j] = v;
        }
    return dp[la][lb];
}

/* Close enough to be a typo: one edit for short words, up to a third of
 * the length for long ones. */
static int close_enough(const char *typed, const char *known, int dist)
{
    size_t l = strlen(known);
    int limit = l <= 4 ? 1 : l <= 8 ? 2 : 3;
    (void)typed;
    return dist <= limit;
}

int validate_enum_value(const struct ddpc_key *k, int i, char *out, size_t cap)
{
    const struct ddpc_enum *e = k->values;
    for (int j = 0, idx = 0; e && j < e->n; j++) {
        if (e->v[j].kind != DDPC_EK_VALUE)
            continue;
        if (idx++ == i) {
            if (strlen(e->v[j].spelling) >= cap)
                return -1;
            snprintf(out, cap, "%s", e->v[j].spelling);
            return 0;
        }
    }
    return -1;
}

/* The value an enum row's spelling stands for (aliases included), -1 if none. */
static int enum_lookup(const struct ddpc_key *k, const char *text, size_t tl)
{
    const struct ddpc_enum *e = k->values;
    for (int j = 0; j < e->n; j++)
        if (e->v[j].kind != DDPC_EK_HIDDEN && strlen(e->v[j].spelling) == tl &&
            memcmp(e->v[j].spelling, text, tl) == 0)
            return e->v[j].value;
    return -1;
}

/* "a, b, c" (canonical) and " (or x, y)" (aliases) for enum messages. */
static void enum_list(const struct ddpc_key *k, char *out, size_t cap)
{
    char canon[512] = "", alias[256] = "";
    const struct ddpc_enum *e = k->values;
    for (int j = 0; j < e->n; j++) {
        if (e->v[j].kind == DDPC_EK_HIDDEN)
            continue;
        int is_alias = e->v[j].kind == DDPC_EK_ALIAS;
        char *dst = is_alias ? alias : canon;
        size_t dl = strlen(dst), dcap = is_alias ? sizeof alias : sizeof canon;
        snprintf(dst + dl, dcap - dl, "%s%s", dl ? ", " : "", e->v[j].spelling);
    }
    if (alias[0])
        snprintf(out, cap, "%s (or %s)", canon, alias);
    else
        snprintf(out, cap, "%s", canon);
}

static int key_index(enum ddpc_block b, const char *name, size_t len)
{
    for (int i = 0; i < ddpc_n_keys; i++)
        if (ddpc_keys[i].block == b && strlen(ddpc_keys[i].name) == len &&
            memcmp(ddpc_keys[i].name, name, len) == 0)
            return i;
    return -1;
}

int validate_key_exists(const char *dotted)
{
    enum ddpc_block b = DDPC_B_ROOT;
    const char *p = dotted;
    for (;;) {
        size_t l = strcspn(p, ".");
        int i = key_index(b, p, l);
        if (i < 0)
            return 0;
        if (!p[l])
            return 1;
        if (ddpc_keys[i].type != DDPC_T_BLOCK)
            return 0;
        b = ddpc_keys[i].child;
        p += l + 1;
    }
}

/* A note from aliases.def for a message: Markdown's backticks dropped. */
static const char *plain_note(const char *note, char *buf, size_t cap)
{
    size_t o = 0;
    for (; *note && o + 1 < cap; note++)
        if (*note != '`')
            buf[o++] = *note;
    buf[o] = '\0';
    return buf;
}

/* ===================== generic scalar conversion ===================== */

static const char *type_noun(enum ddpc_key_type t)
{
    switch (t) {
    case DDPC_T_INT: case DDPC_T_INT64: case DDPC_T_U64: return "an integer";
    case DDPC_T_DOUBLE: return "a number";
    case DDPC_T_BOOL: return "a boolean (true or false)";
    case DDPC_T_DURATION: return "a duration";
    case DDPC_T_BLOCK: return "a mapping";
    default: return "a string";
    }
}

static int range_check(struct ddpc_vctx *c, const struct ddpc_key *k, const struct ddpc_node *n,
                       const char *path, double x)
{
    int lo_ok = k->lo == NOLO || (k->flags & LO_OPEN ? x > k->lo : x >= k->lo);
    int hi_ok = k->hi == NOHI || (k->flags & HI_OPEN ? x < k->hi : x <= k->hi);
    if (lo_ok && hi_ok)
        return 0;
    char lo[32], hi[32], found[96];
    fmt_num(k->lo, lo, sizeof lo);
    fmt_num(k->hi, hi, sizeof hi);
    describe(n, found, sizeof found);
    if (found[0] == '\'') {   /* numbers read better bare: "found 0" */
        memmove(found, found + 1, strlen(found));
        found[strlen(found) - 1] = '\0';
    }
    if (k->lo == k->hi)
        vdiag(c, DDPC_R_RANGE, n, path, "must be %s, found %s", lo, found);
    else if (k->hi == NOHI)
        vdiag(c, DDPC_R_RANGE, n, path, "must be %s %s, found %s",
              k->flags & LO_OPEN ? ">" : ">=", lo, found);
    else if (k->lo == NOLO)
        vdiag(c, DDPC_R_RANGE, n, path, "must be %s %s, found %s",
              k->flags & HI_OPEN ? "<" : "<=", hi, found);
    else if (k->flags & (LO_OPEN | HI_OPEN))
        vdiag(c, DDPC_R_RANGE, n, path, "must be in %s%s, %s%s, found %s",
              k->flags & LO_OPEN ? "(" : "[", lo, hi, k->flags & HI_OPEN ? ")" : "]", found);
    else
        vdiag(c, DDPC_R_RANGE, n, path, "must be between %s and %s, found %s", lo, hi, found);
    return -1;
}

/* Strings that end up in file names, C string literals and scripts: no
 * control characters (and no NUL from a "\0" escape). */
static int string_check(struct ddpc_vctx *c, const struct ddpc_node *n, const char *path,
                        int nonempty)
{
    if (nonempty && n->len == 0) {
        vdiag(c, DDPC_R_STRING, n, path, "must not be empty");
        return -1;
    }
    if (nonempty && strspn(n->str, " \t") == n->len) {
        vdiag(c, DDPC_R_STRING, n, path, "must not be blank");
        return -1;
    }
    for (size_t i = 0; i < n->len; i++) {
        unsigned char ch = (unsigned char)n->str[i];
        if (ch < 0x20 || ch == 0x7f) {
            vdiag(c, DDPC_R_STRING, n, path, "must not contain control characters");
            return -1;
        }
    }
    return 0;
}

/* A spec is never expanded: say so when a path looks like it expects a
 * shell ("~/data", "$HOME/runs"), since it will be taken literally. */
static void expansion_warning(struct ddpc_vctx *c, const struct ddpc_node *n, const char *path)
{
    if (n->str[0] == '~')
        vdiag(c, DDPC_R_PATH_LITERAL, n, path, "'~' is not expanded (a spec has no shell); "
              "this path is taken literally");
    else if (strchr(n->str, '$'))
        vdiag(c, DDPC_R_PATH_LITERAL, n, path, "'$' is not expanded (a spec has no environment "
              "variables); this path is taken literally");
}

static int name_ok(const char *s, size_t len)
{
    if (len < 1 || len > 64 || strspn(s, ".") == len)
        return 0;
    for (size_t i = 0; i < len; i++) {
        char ch = s[i];
        if (!((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
              ch == '.' || ch == '_' || ch == '-'))
            return 0;
    }
    return 1;
}

static const char *abs_dir(struct ddpc_vctx *c)
{
    if (c->abs_dir)
        return c->abs_dir;
    if (c->dir[0] == '/') {
        c->abs_dir = c->dir;
        return c->abs_dir;
    }
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd))
        return NULL;
    c->abs_dir = c->dir[0] ? arena_printf(c->a, "%s/%s", cwd, c->dir) : arena_printf(c->a, "%s", cwd);
    return c->abs_dir;
}

static int parse_scalar(struct ddpc_vctx *c, const struct ddpc_key *k, const struct ddpc_node *n,
                        void *field, const char *path)
{
    char found[96];
    if (n->kind != DDPC_NODE_SCALAR) {
        if (k->type == DDPC_T_ENUM) {
            char list[512];
            enum_list(k, list, sizeof list);
            vdiag(c, DDPC_R_ENUM, n, path, "expected one of %s; found %s", list,
                  describe(n, found, sizeof found));
        } else {
            vdiag(c, DDPC_R_TYPE, n, path, "expected %s, found %s", type_noun(k->type),
                  describe(n, found, sizeof found));
        }
        return -1;
    }
    int64_t iv;
    double dv;
    int bv;
    switch (k->type) {
    case DDPC_T_INT:
    case DDPC_T_INT64:
    case DDPC_T_U64:
        if (n->quoted || units_int64(n->str, &iv) < 0) {
            /* U64 keys (seeds) take 0 .. 2^64-1: above INT64_MAX, or out of
             * range, say so rather than "expected an integer" */
            char digits[64];
            size_t o = 0;
            for (const char *q = n->str; *q && o + 1 < sizeof digits; q++)
                if (*q != '_')
                    digits[o++] = *q;
            digits[o] = '\0';
            int all_digits = !n->quoted && o > 0 && strspn(digits, "0123456789") == o;
            if (all_digits) {
                errno = 0;
                char *end;
                unsigned long long u = strtoull(digits, &end, 10);
                if (k->type == DDPC_T_U64 && errno == 0 && *end == '\0') {
                    memcpy(field, &(uint64_t){ (uint64_t)u }, sizeof(uint64_t));
                    break;
                }
                vdiag(c, DDPC_R_RANGE, n, path, "%s is out of range: must be between %s and "
                      "%s", describe(n, found, sizeof found),
                      k->type == DDPC_T_U64 ? "0" : k->type == DDPC_T_INT64
                          ? "-9223372036854775808" : "-2147483648",
                      k->type == DDPC_T_U64 ? "18446744073709551615"
                          : k->type == DDPC_T_INT64 ? "9223372036854775807" : "2147483647");
                return -1;
            }
            vdiag(c, DDPC_R_TYPE, n, path, "expected an integer, found %s",
                  describe(n, found, sizeof found));
            return -1;
        }
        if (range_check(c, k, n, path, (double)iv) < 0)
            return -1;
        if (k->type == DDPC_T_INT) {
            int32_t v32 = (int32_t)iv;
            memcpy(field, &v32, sizeof v32);
        } else if (k->type == DDPC_T_INT64) {
            memcpy(field, &iv, sizeof iv);
        } else {
            uint64_t u = (uint64_t)iv;
            memcpy(field, &u, sizeof u);
        }
        break;
    case DDPC_T_DOUBLE:
        if (n->quoted || units_double(n->str, &dv) < 0) {
            vdiag(c, DDPC_R_TYPE, n, path, "expected a number, found %s",
                  describe(n, found, sizeof found));
            return -1;
        }
        if (range_check(c, k, n, path, dv) < 0)
            return -1;
        memcpy(field, &dv, sizeof dv);
        break;
    case DDPC_T_BOOL:
        if (n->quoted || units_bool(n->str, &bv) < 0) {
            vdiag(c, DDPC_R_TYPE, n, path, "expected a boolean (true or false), found %s",
                  describe(n, found, sizeof found));
            return -1;
        }
        {
            int32_t b32 = bv;
            memcpy(field, &b32, sizeof b32);
        }
        break;
    case DDPC_T_ENUM: {
        int e = enum_lookup(k, n->str, n->len);
        for (int i = 0; e < 0 && i < ddpc_n_refused_values; i++) {
            const struct ddpc_refused_value *r = &ddpc_refused_values[i];
            char note[256];
            if (strcmp(r->key, path) == 0 && strlen(r->value) == n->len &&
                memcmp(r->value, n->str, n->len) == 0) {
                vdiag(c, DDPC_R_REFUSED_VALUE, n, path, "%s is not available: %s",
                      describe(n, found, sizeof found), plain_note(r->note, note, sizeof note));
                return -1;
            }
        }
        if (e < 0) {
            char list[512], best[96] = "";
            int bestd = 99;
            enum_list(k, list, sizeof list);
            for (int i = 0; validate_enum_value(k, i, found, sizeof found) == 0; i++) {
                int dist = validate_distance(n->str, found);
                if (dist < bestd && close_enough(n->str, found, dist)) {
                    bestd = dist;
                    snprintf(best, sizeof best, "%s", found);
                }
            }
            if (best[0])
                vdiag(c, DDPC_R_ENUM, n, path, "expected one of %s; found %s; did you mean '%s'?",
                      list, describe(n, found, sizeof found), best);
            else
                vdiag(c, DDPC_R_ENUM, n, path, "expected one of %s; found %s", list,
                      describe(n, found, sizeof found));
            return -1;
        }
        memcpy(field, &e, sizeof e);
        break;
    }
    case DDPC_T_STRING:
    case DDPC_T_OUTPATH:
        if (string_check(c, n, path, k->type == DDPC_T_OUTPATH) < 0)
            return -1;
        if (k->type == DDPC_T_OUTPATH)
            expansion_warning(c, n, path);
        memcpy(field, &n->str, sizeof n->str);
        break;
    case DDPC_T_NAME:
        if (n->len > 0 && n->str[0] == '-') {
            vdiag(c, DDPC_R_STRING, n, path, "must not start with '-' (it names files, and "
                  "would read as a command-line option), found %s",
                  describe(n, found, sizeof found));
            return -1;
        }
        if (!name_ok(n->str, n->len) || strlen(n->str) != n->len) {
            vdiag(c, DDPC_R_STRING, n, path,
                  "must be 1 to 64 characters from A-Z a-z 0-9 . _ - (it names files), found %s",
                  describe(n, found, sizeof found));
            return -1;
        }
        memcpy(field, &n->str, sizeof n->str);
        break;
    case DDPC_T_PATH: {
        if (string_check(c, n, path, 1) < 0)
            return -1;
        expansion_warning(c, n, path);
        const char *p = n->str;
        if (p[0] != '/') {
            const char *dir = abs_dir(c);
            if (!dir) {
                vdiag(c, DDPC_R_IO, n, path, "cannot resolve the relative path: %s",
                      strerror(errno));
                return -1;
            }
            p = arena_printf(c->a, "%s/%s", dir, n->str);
            if (!p) {
                vdiag(c, DDPC_R_OOM, n, path, "out of memory");
                return -1;
            }
        }
        memcpy(field, &p, sizeof p);
        break;
    }
    case DDPC_T_DURATION: {
        const char *why;
        if (strcmp(n->str, "none") == 0) {
            dv = 0;   /* explicitly no deadline */
        } else if (units_duration(n->str, &dv, &why) < 0) {
            vdiag(c, DDPC_R_TYPE, n, path, "%s%s; found %s", why,
                  strncmp(why, "expected", 8) == 0 ? ", or none" : "",
                  describe(n, found, sizeof found));
            return -1;
        } else if (dv < DDPC_MIN_TIMEOUT_S) {
            /* a deadline shorter than one scheduler tick fails every healthy run */
            vdiag(c, DDPC_R_RANGE, n, path, "must be at least 1ms, found %s",
                  describe(n, found, sizeof found));
            return -1;
        }
        memcpy(field, &dv, sizeof dv);
        break;
    }
    default:
        return -1;
    }
    if (k->fn)
        return k->fn(c, n, field, path);
    return 0;
}

/* Parses def, a default written as spec text, into field. */
static void apply_default_text(struct ddpc_vctx *c, const struct ddpc_key *k, const char *def,
                               void *field, const char *path)
{
    struct ddpc_node n;
    memset(&n, 0, sizeof n);
    n.kind = DDPC_NODE_SCALAR;
    n.str = def;
    n.len = strlen(def);
    parse_scalar(c, k, &n, field, path);
}

/* Writes row k's default into field. */
static void apply_default(struct ddpc_vctx *c, const struct ddpc_key *k, void *field,
                          const char *path)
{
    if (k->type == DDPC_T_CUSTOM) {
        k->fn(c, NULL, field, path);
        return;
    }
    if (!k->def) {
        switch (k->type) {
        case DDPC_T_INT: case DDPC_T_BOOL: case DDPC_T_ENUM: memset(field, 0, 4); break;
        case DDPC_T_INT64: case DDPC_T_U64: case DDPC_T_DOUBLE: case DDPC_T_DURATION:
            memset(field, 0, 8);
            break;
        default: {
            const char *null = NULL;
            memcpy(field, &null, sizeof null);
        }
        }
        return;
    }
    apply_default_text(c, k, k->def, field, path);
}

/* ===================== the walk ===================== */

/* Whether row k applies given its block's sibling enum ("type=sgd"). On
 * false, writes "when type is sgd (type here is adam)" into why. */
static int cond_holds(enum ddpc_block b, const char *only, const char *base, char *why,
                      size_t cap)
{
    if (!only)
        return 1;
    const char *eq = strchr(only, '=');
    int s = key_index(b, only, (size_t)(eq - only));
    if (s < 0)
        return 1;
    int v;
    memcpy(&v, base + ddpc_keys[s].off, sizeof v);
    char cur[64];
    if (validate_enum_value(&ddpc_keys[s], v, cur, sizeof cur) < 0)
        return 1;
    const char *p = eq + 1;
    char list[256] = "";
    int count = 0, total = 1;
    for (const char *q = p; *q; q++)
        total += *q == '|';
    while (*p) {
        size_t l = strcspn(p, "|");
        if (strlen(cur) == l && memcmp(cur, p, l) == 0)
            return 1;
        size_t ll = strlen(list);
        count++;
        snprintf(list + ll, sizeof list - ll, "%s%.*s",
                 count == 1 ? "" : count == total ? " or " : ", ", (int)l, p);
        p += l;
        if (*p == '|')
            p++;
    }
    snprintf(why, cap, "when %s is %s (%s here is %s)", ddpc_keys[s].name, list,
             ddpc_keys[s].name, cur);
    return 0;
}

static int only_holds(const struct ddpc_key *k, const char *base, char *why, size_t cap)
{
    return cond_holds(k->block, k->only, base, why, cap);
}

static void unknown_key(struct ddpc_vctx *c, enum ddpc_block b, const struct ddpc_node *key,
                        const char *path)
{
    char found[96];
    if (key->kind != DDPC_NODE_SCALAR)
        return;   /* the loader reported it */
    /* another tool's name: say which key ddpc spells it with, or why none */
    const struct ddpc_alias *al = validate_alias_find(key->str, key->len);
    if (al) {
        char note[256], shown[96];
        struct ddpc_node plain = *key;
        plain.quoted = 0;
        describe(&plain, found, sizeof found);
        plain_note(al->note, note, sizeof note);
        /* "(torchrun's --nnodes)", or "(Lightning Trainer)" when spelled alike */
        if (strcmp(al->shown, al->name) == 0)
            snprintf(shown, sizeof shown, "%s", validate_tool_name(al->tool));
        else
            snprintf(shown, sizeof shown, "%s's %s", validate_tool_name(al->tool), al->shown);
        if (!al->target)
            vdiag(c, DDPC_R_ALIAS_KEY, key, path, "unknown key %s (%s); ddpc has no such "
                  "key: %s", found, shown, note);
        else
            vdiag(c, DDPC_R_ALIAS_KEY, key, path, "unknown key %s (%s); ddpc's key is '%s'%s%s%s",
                  found, shown, al->target,
                  b != DDPC_B_ROOT && !strchr(al->target, '.') ? " (top level)" : "",
                  note[0] ? ": " : "", note);
        return;
    }
    const char *best = NULL;
    int bestd = 99;
    for (int i = 0; i < ddpc_n_keys; i++) {
        if (ddpc_keys[i].block != b)
            continue;
        int dist = validate_distance(key->str, ddpc_keys[i].name);
        if (dist < bestd && close_enough(key->str, ddpc_keys[i].name, dist)) {
            bestd = dist;
            best = ddpc_keys[i].name;
        }
    }
    /* the key as text, masked and shortened like any value in a message */
    struct ddpc_node plain = *key;
    plain.quoted = 0;
    describe(&plain, found, sizeof found);
    if (best) {
        vdiag(c, DDPC_R_UNKNOWN_KEY, key, path, "unknown key %s; did you mean '%s'?", found, best);
        return;
    }
    /* the right key in the wrong block: say where it belongs */
    for (int i = 0; i < ddpc_n_keys; i++) {
        /* (a layer's argument is no key of a block: not suggested here) */
        if (ddpc_keys[i].block == b || ddpc_keys[i].block >= DDPC_B_LAYERS ||
            strcmp(ddpc_keys[i].name, key->str) != 0)
            continue;
        char where[128];
        join_path(where, sizeof where, validate_block_path(ddpc_keys[i].block), key->str);
        vdiag(c, DDPC_R_UNKNOWN_KEY, key, path, "unknown key %s here; did you mean '%s'?", found,
              where);
        return;
    }
    /* the block's name and the key joined is a top-level key: checkpoint:
     * {dir: ...} for checkpoint_dir */
    const char *block = validate_block_path(b);
    if (b != DDPC_B_ROOT && block && !strchr(block, '.')) {
        char joined[160];
        snprintf(joined, sizeof joined, "%s_%s", block, key->str);
        for (int i = 0; i < ddpc_n_keys; i++)
            if (ddpc_keys[i].block == DDPC_B_ROOT && strcmp(ddpc_keys[i].name, joined) == 0) {
                vdiag(c, DDPC_R_UNKNOWN_KEY, key, path, "unknown key %s here; did you mean '%s' "
                      "(top level)?", found, joined);
                return;
            }
    }
    vdiag(c, DDPC_R_UNKNOWN_KEY, key, path, "unknown key %s", found);
}

static void walk_block(struct ddpc_vctx *c, enum ddpc_block b, const struct ddpc_node *map,
                       char *base, const char *bpath);

static void parse_row(struct ddpc_vctx *c, const struct ddpc_key *k, const struct ddpc_node *v,
                      char *base, const char *path)
{
    char found[96];
    if (k->type == DDPC_T_BLOCK) {
        if (v->kind != DDPC_NODE_MAP) {
            vdiag(c, DDPC_R_TYPE, v, path, "expected a mapping, found %s",
                  describe(v, found, sizeof found));
            return;
        }
        walk_block(c, k->child, v, base + k->off, path);
    } else if (k->type == DDPC_T_CUSTOM) {
        k->fn(c, v, base + k->off, path);
    } else {
        parse_scalar(c, k, v, base + k->off, path);
    }
}

/* Whether the sibling enum that row k depends on has a trustworthy value:
 * given and valid, or absent with a default. Otherwise "applies only" and
 * "required when" findings would be guesses, so they are skipped. */
static int sibling_known(enum ddpc_block b, const char *only,
                         const struct ddpc_node *const *given_val, const int *failed)
{
    const char *eq = strchr(only, '=');
    int s = key_index(b, only, (size_t)(eq - only));
    if (s < 0)
        return 0;
    return given_val[s] ? !failed[s] : ddpc_keys[s].def != NULL;
}

/* Defaults that depend on a sibling enum (DDPC_DEFAULT_WHEN rows), for the
 * keys of block b that were not given, once the siblings are known. */
static void defaults_when(struct ddpc_vctx *c, enum ddpc_block b, char *base, const char *bpath,
                          const struct ddpc_node *const *given_val, const int *failed)
{
    char path[256], why[256];
    for (const struct ddpc_default_when *w = ddpc_default_whens; w->name; w++) {
        int i = w->block == b ? key_index(b, w->name, strlen(w->name)) : -1;
        if (i < 0)
            continue;
        const char *dot = strchr(w->when, '.');
        int late = dot && dot < strchr(w->when, '=');
        /* a block is walked twice, for defaults and then for its keys: the
         * second walk's word on the key replaces the first's */
        for (int n = 0; late && n < c->n_late; n++)
            if (c->late[n].field == base + ddpc_keys[i].off)
                c->late[n--] = c->late[--c->n_late];
        if (given_val[i])
            continue;
        if (late) {
            if (c->n_late < (int)(sizeof c->late / sizeof c->late[0])) {
                c->late[c->n_late].key = i;
                c->late[c->n_late].field = base + ddpc_keys[i].off;
                c->late[c->n_late].when = w->when;
                c->late[c->n_late].def = w->def;
                join_path(c->late[c->n_late].path, sizeof c->late[0].path, bpath, w->name);
                c->n_late++;
            }
            continue;
        }
        if (!sibling_known(b, w->when, given_val, failed) ||
            !cond_holds(b, w->when, base, why, sizeof why))
            continue;
        join_path(path, sizeof path, bpath, w->name);
        apply_default_text(c, &ddpc_keys[i], w->def, base + ddpc_keys[i].off, path);
    }
}

/* The deferred DDPC_DEFAULT_WHEN rows: "block.key=v1|v2" against the
 * top-level block `block` of the finished job. */
static void defaults_when_late(struct ddpc_vctx *c)
{
    char why[256];
    for (int n = 0; n < c->n_late; n++) {
        const char *when = c->late[n].when, *dot = strchr(when, '.');
        int bk = key_index(DDPC_B_ROOT, when, (size_t)(dot - when));
        if (bk < 0 || ddpc_keys[bk].type != DDPC_T_BLOCK)
            continue;
        enum ddpc_block child = ddpc_keys[bk].child;
        if (!cond_holds(child, dot + 1, (const char *)c->job + ddpc_keys[bk].off, why, sizeof why))
            continue;
        apply_default_text(c, &ddpc_keys[c->late[n].key], c->late[n].def, c->late[n].field,
                           c->late[n].path);
    }
    c->n_late = 0;
}

static void walk_block(struct ddpc_vctx *c, enum ddpc_block b, const struct ddpc_node *map,
                       char *base, const char *bpath)
{
    const struct ddpc_node *given_key[MAX_KEYS] = { 0 }, *given_val[MAX_KEYS] = { 0 };
    int failed[MAX_KEYS] = { 0 };
    char path[256];

    /* defaults first, so a partial or wrong block still leaves a whole job */
    for (int i = 0; i < ddpc_n_keys; i++) {
        const struct ddpc_key *k = &ddpc_keys[i];
        if (k->block != b)
            continue;
        join_path(path, sizeof path, bpath, k->name);
        if (k->type == DDPC_T_BLOCK)
            walk_block(c, k->child, NULL, base + k->off, path);
        else
            apply_default(c, k, base + k->off, path);
    }
    if (!map) {
        defaults_when(c, b, base, bpath, given_val, failed);
        return;
    }

    for (int j = 0; j < map->n; j++) {
        const struct ddpc_node *key = map->items[2 * j], *val = map->items[2 * j + 1];
        if (key->kind != DDPC_NODE_SCALAR)
            continue;
        /* top-level x-* keys are free for the user (a home for anchors),
         * as in Docker Compose */
        if (b == DDPC_B_ROOT && strncmp(key->str, "x-", 2) == 0)
            continue;
        int i = key_index(b, key->str, key->len);
        join_path(path, sizeof path, bpath, key->str);
        if (i < 0) {
            unknown_key(c, b, key, path);
            continue;
        }
        if (load_is_null(val))
            continue;   /* `key:` or `key: null` means "the default" */
        given_key[i] = key;
        given_val[i] = val;
        if (!ddpc_keys[i].only) {
            int e0 = c->d->n_errors;
            parse_row(c, &ddpc_keys[i], val, base, path);
            failed[i] = c->d->n_errors != e0;
        }
    }
    /* keys that depend on a sibling enum, now that every sibling is parsed */
    for (int i = 0; i < ddpc_n_keys; i++) {
        const struct ddpc_key *k = &ddpc_keys[i];
        if (k->block != b || !k->only || !given_val[i] || !sibling_known(b, k->only, given_val, failed))
            continue;
        char why[256];
        join_path(path, sizeof path, bpath, k->name);
        if (!only_holds(k, base, why, sizeof why)) {
            vdiag(c, DDPC_R_ONLY_FOR, given_key[i], path, "applies only %s", why);
            continue;
        }
        parse_row(c, k, given_val[i], base, path);
    }
    defaults_when(c, b, base, bpath, given_val, failed);
    for (int i = 0; i < ddpc_n_keys; i++) {
        const struct ddpc_key *k = &ddpc_keys[i];
        if (k->block != b || !(k->flags & REQUIRED) || given_val[i] ||
            (k->only && !sibling_known(b, k->only, given_val, failed)))
            continue;
        char why[256];
        if (!only_holds(k, base, why, sizeof why))
            continue;
        if (k->only) {
            /* "when format is idx or npy (format here is idx)" -> the sibling's value */
            const char *eq = strchr(k->only, '=');
            int s = key_index(b, k->only, (size_t)(eq - k->only));
            int v;
            char cur[64] = "";
            memcpy(&v, base + ddpc_keys[s].off, sizeof v);
            validate_enum_value(&ddpc_keys[s], v, cur, sizeof cur);
            vdiag(c, DDPC_R_MISSING_KEY, map, bpath, "missing required key '%s' (needed when %s is %s)",
                  k->name, ddpc_keys[s].name, cur);
        } else {
            vdiag(c, DDPC_R_MISSING_KEY, map, bpath, "missing required key '%s'", k->name);
        }
    }
}

/* ===================== custom validators (named in keys.def) ===================== */

static int plain_int(const struct ddpc_node *n, int64_t *v)
{
    return n->kind == DDPC_NODE_SCALAR && !n->quoted && units_int64(n->str, v) == 0 ? 0 : -1;
}

static int key_devices(struct ddpc_vctx *c, const struct ddpc_node *n, void *field,
                       const char *path)
{
    struct ddpc_job *job = c->job;
    char found[96], why[160], ipath[280];
    (void)field;
    job->devices_all = 0;
    if (!n) {
        job->n_devices = 1;
        job->devices[0] = 0;
        return 0;
    }
    if (n->kind == DDPC_NODE_SCALAR) {
        int cnt = 0, all = 0;
        if (units_devices(n->str, job->devices, &cnt, &all, DDPC_MAX_DEVICES, why, sizeof why) < 0) {
            vdiag(c, DDPC_R_DEVICES, n, path, "%s", why);
            return -1;
        }
        job->n_devices = cnt;
        job->devices_all = all;
        return 0;
    }
    if (n->kind != DDPC_NODE_SEQ) {
        vdiag(c, DDPC_R_TYPE, n, path, "expected a device list, count, -1 or \"all\"; found %s",
              describe(n, found, sizeof found));
        return -1;
    }
    if (n->n == 0) {
        vdiag(c, DDPC_R_DEVICES, n, path, "empty device list");
        return -1;
    }
    if (n->n > DDPC_MAX_DEVICES) {
        vdiag(c, DDPC_R_DEVICES, n, path, "more than %d devices", DDPC_MAX_DEVICES);
        return -1;
    }
    int rc = 0, cnt = 0;
    for (int i = 0; i < n->n; i++) {
        const struct ddpc_node *it = n->items[i];
        int64_t v;
        snprintf(ipath, sizeof ipath, "%s[%d]", path, i);
        if (plain_int(it, &v) < 0) {
            vdiag(c, DDPC_R_TYPE, it, ipath, "expected a device index, found %s",
                  describe(it, found, sizeof found));
            rc = -1;
            continue;
        }
        if (v < 0 || v >= DDPC_MAX_DEVICES) {
            vdiag(c, DDPC_R_RANGE, it, ipath, "device index must be between 0 and %d, found %s",
                  DDPC_MAX_DEVICES - 1, it->str);
            rc = -1;
            continue;
        }
        int dup = 0;
        for (int j = 0; j < cnt; j++)
            dup |= job->devices[j] == v;
        if (dup) {
            vdiag(c, DDPC_R_DEVICES, it, ipath, "device %s is listed twice", it->str);
            rc = -1;
            continue;
        }
        job->devices[cnt++] = (int32_t)v;
    }
    job->n_devices = cnt;
    return rc;
}

/* The ITEM row of list block `list` named name[0..len), or -1. */
static int item_index(enum ddpc_block list, const char *name, size_t len)
{
    for (int i = 0; i < ddpc_n_keys; i++)
        if (ddpc_keys[i].block == list && ddpc_keys[i].type == DDPC_T_ITEM &&
            strlen(ddpc_keys[i].name) == len && memcmp(ddpc_keys[i].name, name, len) == 0)
            return i;
    return -1;
}

static int item_has_required(const struct ddpc_key *row)
{
    for (int i = 0; i < ddpc_n_keys; i++)
        if (ddpc_keys[i].block == row->child && (ddpc_keys[i].flags & REQUIRED))
            return i;
    return -1;
}

static void unknown_item(struct ddpc_vctx *c, const struct ddpc_node *n, const char *path)
{
    char found[96];
    struct ddpc_node plain = *n;
    plain.quoted = 0;
    describe(&plain, found, sizeof found);
    const char *best = NULL;
    int bestd = 99;
    for (int i = 0; i < ddpc_n_keys; i++) {
        if (ddpc_keys[i].block != DDPC_B_LAYERS)
            continue;
        int dist = validate_distance(n->str, ddpc_keys[i].name);
        if (dist < bestd && close_enough(n->str, ddpc_keys[i].name, dist)) {
            bestd = dist;
            best = ddpc_keys[i].name;
        }
    }
    if (best)
        vdiag(c, DDPC_R_LAYER_SYNTAX, n, path, "unknown layer %s; did you mean '%s'?", found, best);
    else
        vdiag(c, DDPC_R_LAYER_SYNTAX, n, path, "unknown layer %s; see `ddpc schema --format markdown` "
              "for the layer types", found);
}

/* Parses the items of seq (a list of layers) into job->model.items,
 * flattened: a residual item is followed by its body. */
static int parse_items(struct ddpc_vctx *c, const struct ddpc_node *seq, const char *path,
                       int depth)
{
    struct ddpc_job *job = c->job;
    char found[96], ipath[280];
    int rc = 0;
    for (int i = 0; i < seq->n; i++) {
        const struct ddpc_node *it = seq->items[i], *name = it, *val = NULL;
        snprintf(ipath, sizeof ipath, "%s[%d]", path, i);
        if (it->kind == DDPC_NODE_MAP) {
            if (it->n != 1) {
                vdiag(c, DDPC_R_LAYER_SYNTAX, it, ipath, "expected a layer: a name (`- relu`) or a "
                      "mapping with one key (`- linear: {out_features: 10}`), found a mapping of "
                      "%d keys", it->n);
                rc = -1;
                continue;
            }
            name = it->items[0];
            val = it->items[1];
            if (load_is_null(val))
                val = NULL;
        }
        if (name->kind != DDPC_NODE_SCALAR || load_is_null(name)) {
            vdiag(c, DDPC_R_LAYER_SYNTAX, it, ipath, "expected a layer: a name (`- relu`) or a mapping "
                  "with one key (`- linear: {out_features: 10}`), found %s",
                  describe(name, found, sizeof found));
            rc = -1;
            continue;
        }
        int r = item_index(DDPC_B_LAYERS, name->str, name->len);
        if (r < 0) {
            unknown_item(c, name, ipath);
            rc = -1;
            continue;
        }
        const struct ddpc_key *row = &ddpc_keys[r];
        if (job->model.n_items >= DDPC_MAX_ITEMS) {
            vdiag(c, DDPC_R_LAYER_SYNTAX, it, ipath, "more than %d layers (residual bodies included)",
                  DDPC_MAX_ITEMS);
            return -1;
        }
        int k = job->model.n_items++;
        struct ddpc_layer_item *item = &job->model.items[k];
        memset(item, 0, sizeof *item);
        item->type = (enum ddpc_layer_type)row->off;
        c->item_node[k] = it;
        c->item_path[k] = arena_strndup(c->a, ipath, strlen(ipath));
        char kpath[300];
        snprintf(kpath, sizeof kpath, "%s.%s", ipath, row->name);
        if (row->flags & DDPC_F_LIST) {
            if (!val || val->kind != DDPC_NODE_SEQ || val->n == 0) {
                vdiag(c, DDPC_R_LAYER_SYNTAX, val ? val : it, kpath, "%s takes a non-empty list of "
                      "layers (`- %s: [linear: {out_features: 64}, relu]`), found %s", row->name,
                      row->name, val ? describe(val, found, sizeof found) : "nothing");
                rc = -1;
                continue;
            }
            if (depth >= 16) {
                vdiag(c, DDPC_R_LAYER_SYNTAX, val, kpath, "%s blocks nested more than 16 deep",
                      row->name);
                return -1;
            }
            int before = job->model.n_items;
            if (parse_items(c, val, kpath, depth + 1) < 0)
                rc = -1;
            job->model.items[k].n_body = job->model.n_items - before;
            continue;
        }
        if (val && val->kind != DDPC_NODE_MAP) {
            vdiag(c, DDPC_R_LAYER_SYNTAX, val, kpath, "expected the arguments of %s as a mapping "
                  "(`- %s: {...}`), found %s", row->name, row->name,
                  describe(val, found, sizeof found));
            rc = -1;
            continue;
        }
        int req = item_has_required(row);
        if (!val && req >= 0) {
            vdiag(c, DDPC_R_LAYER_SYNTAX, it, ipath, "%s needs %s: write `- %s: {%s: ...}`",
                  row->name, ddpc_keys[req].name, row->name, ddpc_keys[req].name);
            rc = -1;
        }
        int e0 = c->d->n_errors;
        walk_block(c, row->child, val, (char *)item, kpath);
        if (c->d->n_errors != e0)
            rc = -1;
        item->type = (enum ddpc_layer_type)row->off;
    }
    return rc;
}

static int key_layers(struct ddpc_vctx *c, const struct ddpc_node *n, void *field,
                      const char *path)
{
    struct ddpc_job *job = c->job;
    char found[96], ipath[280];
    int64_t v;
    (void)field;
    job->model.n_layers = 0;
    job->model.n_items = 0;
    if (!n)
        return 0;
    if (n->kind != DDPC_NODE_SEQ) {
        vdiag(c, DDPC_R_TYPE, n, path, "expected a list of layer sizes [in, hidden..., out] "
              "or of layers, found %s", describe(n, found, sizeof found));
        return -1;
    }
    /* a list of layers (sequential) unless it starts with a size */
    if (n->n > 0 && plain_int(n->items[0], &v) < 0) {
        int rc = parse_items(c, n, path, 0);
        if (rc < 0)
            job->model.n_items = 0;
        return rc;
    }
    if (n->n < 2 || n->n > DDPC_MAX_LAYERS) {
        vdiag(c, DDPC_R_RANGE, n, path, "expected 2 to %d layer sizes [in, hidden..., out], "
              "found %d", DDPC_MAX_LAYERS, n->n);
        return -1;
    }
    int rc = 0;
    for (int i = 0; i < n->n; i++) {
        const struct ddpc_node *it = n->items[i];
        snprintf(ipath, sizeof ipath, "%s[%d]", path, i);
        if (plain_int(it, &v) < 0) {
            vdiag(c, DDPC_R_TYPE, it, ipath, "expected an integer, found %s",
                  describe(it, found, sizeof found));
            rc = -1;
        } else if (v < 1 || v > (1 << 24)) {
            vdiag(c, DDPC_R_RANGE, it, ipath, "must be between 1 and %d, found %s", 1 << 24,
                  it->str);
            rc = -1;
        } else {
            job->model.layers[i] = (int32_t)v;
        }
    }
    if (rc == 0)
        job->model.n_layers = n->n;
    return rc;
}

static int key_input(struct ddpc_vctx *c, const struct ddpc_node *n, void *field,
                     const char *path)
{
    struct ddpc_job *job = c->job;
    char found[96], ipath[280];
    (void)field;
    job->model.n_input = 0;
    if (!n)
        return 0;
    if (n->kind != DDPC_NODE_SEQ || n->n < 1 || n->n > DDPC_MAX_DIMS) {
        vdiag(c, DDPC_R_TYPE, n, path, "expected the shape of one sample: [features], "
              "[channels, length] or [channels, height, width]; found %s",
              n->kind == DDPC_NODE_SEQ ? "a list of another length" : describe(n, found, sizeof found));
        return -1;
    }
    int64_t total = 1;
    for (int i = 0; i < n->n; i++) {
        int64_t v;
        snprintf(ipath, sizeof ipath, "%s[%d]", path, i);
        if (plain_int(n->items[i], &v) < 0 || v < 1 || v > (1 << 24)) {
            vdiag(c, DDPC_R_RANGE, n->items[i], ipath, "expected an integer between 1 and %d, "
                  "found %s", 1 << 24, describe(n->items[i], found, sizeof found));
            return -1;
        }
        total *= v;
        job->model.input[i] = (int32_t)v;
    }
    if (total > (1 << 28)) {
        vdiag(c, DDPC_R_RANGE, n, path, "%lld floats per sample is more than %d",
              (long long)total, 1 << 28);
        return -1;
    }
    job->model.n_input = n->n;
    return 0;
}

static int check_sync_bn(struct ddpc_vctx *c, const struct ddpc_node *n, void *field,
                         const char *path)
{
    int32_t v;
    memcpy(&v, field, sizeof v);
    if (n && v) {
        vdiag(c, DDPC_R_NOT_IMPLEMENTED, n, path, "not implemented yet: batch-norm statistics are not "
              "reduced across ranks (each rank normalizes with its own batch, as PyTorch DDP "
              "without SyncBatchNorm); use sync_batchnorm: false");
        return -1;
    }
    return 0;
}

static int key_betas(struct ddpc_vctx *c, const struct ddpc_node *n, void *field,
                     const char *path)
{
    struct ddpc_job *job = c->job;
    char found[96], ipath[280];
    (void)field;
    if (!n) {
        job->optimizer.beta1 = 0.9;
        job->optimizer.beta2 = 0.999;
        return 0;
    }
    if (n->kind != DDPC_NODE_SEQ || n->n != 2) {
        vdiag(c, DDPC_R_TYPE, n, path, "expected a list of two numbers [beta1, beta2], found %s",
              n->kind == DDPC_NODE_SEQ ? (n->n == 1 ? "1 item" : "more than 2 items")
                                       : describe(n, found, sizeof found));
        return -1;
    }
    int rc = 0;
    double b[2];
    for (int i = 0; i < 2; i++) {
        const struct ddpc_node *it = n->items[i];
        snprintf(ipath, sizeof ipath, "%s[%d]", path, i);
        if (it->kind != DDPC_NODE_SCALAR || it->quoted || units_double(it->str, &b[i]) < 0) {
            vdiag(c, DDPC_R_TYPE, it, ipath, "expected a number, found %s",
                  describe(it, found, sizeof found));
            rc = -1;
        } else if (b[i] < 0 || b[i] >= 1) {
            vdiag(c, DDPC_R_RANGE, it, ipath, "must be in [0, 1), found %s", it->str);
            rc = -1;
        }
    }
    if (rc == 0) {
        job->optimizer.beta1 = b[0];
        job->optimizer.beta2 = b[1];
    }
    return rc;
}

/* data.<source>.range: [from, to], fractions of the token stream. field is
 * the source's range_lo; range_hi follows it in the same source. */
static int key_range(struct ddpc_vctx *c, const struct ddpc_node *n, void *field,
                     const char *path)
{
    struct ddpc_data_source *src =
        (struct ddpc_data_source *)((char *)field - offsetof(struct ddpc_data_source, range_lo));
    char found[96], ipath[280];
    src->range_lo = 0.0;
    src->range_hi = 1.0;
    if (!n)
        return 0;
    if (n->kind != DDPC_NODE_SEQ || n->n != 2) {
        vdiag(c, DDPC_R_TYPE, n, path, "expected a list of two fractions [from, to] of the "
              "token stream, such as [0.0, 0.9], found %s",
              n->kind == DDPC_NODE_SEQ ? (n->n == 1 ? "1 item" : n->n == 0 ? "no items"
                                                               : "more than 2 items")
                                       : describe(n, found, sizeof found));
        return -1;
    }
    int rc = 0;
    double v[2];
    for (int i = 0; i < 2; i++) {
        const struct ddpc_node *it = n->items[i];
        snprintf(ipath, sizeof ipath, "%s[%d]", path, i);
        if (it->kind != DDPC_NODE_SCALAR || it->quoted || units_double(it->str, &v[i]) < 0 ||
            !isfinite(v[i])) {
            vdiag(c, DDPC_R_TYPE, it, ipath, "expected a number, found %s",
                  describe(it, found, sizeof found));
            rc = -1;
        } else if (v[i] < 0 || v[i] > 1) {
            vdiag(c, DDPC_R_RANGE, it, ipath, "must be a fraction in [0, 1], found %s", it->str);
            rc = -1;
        }
    }
    if (rc == 0 && v[0] >= v[1]) {
        vdiag(c, DDPC_R_RANGE, n, path, "from (%s) must be less than to (%s): the range "
              "[from, to] would hold no tokens", n->items[0]->str, n->items[1]->str);
        rc = -1;
    }
    if (rc == 0) {
        src->range_lo = v[0];
        src->range_hi = v[1];
    }
    return rc;
}

/* data.<source>.path, once parsed (field: the source's path, joined on the
 * spec's absolute directory when written relative): how many of its bytes
 * ddpc joined on, so that only the user's part is read as a pattern. */
static int check_path_literal(struct ddpc_vctx *c, const struct ddpc_node *n, void *field,
                              const char *path)
{
    (void)c;
    (void)path;
    struct ddpc_data_source *src =
        (struct ddpc_data_source *)((char *)field - offsetof(struct ddpc_data_source, path));
    size_t full = src->path ? strlen(src->path) : 0, own = n ? strlen(n->str) : full;
    src->path_literal = n && n->str[0] != '/' && full > own ? (int32_t)(full - own) : 0;
    return 0;
}

static int key_limit(struct ddpc_vctx *c, const struct ddpc_node *n, void *field,
                     const char *path)
{
    struct ddpc_job *job = c->job;
    char found[96];
    (void)field;
    job->limit_train_batches = 0;
    job->limit_train_fraction = 1.0;
    if (!n)
        return 0;
    int64_t iv;
    double dv;
    /* as in Lightning: 1 is one batch, 1.0 the whole epoch */
    int is_float = n->kind == DDPC_NODE_SCALAR && strpbrk(n->str, ".eE") != NULL;
    if (n->kind == DDPC_NODE_SCALAR && !n->quoted && !is_float && units_int64(n->str, &iv) == 0 &&
        iv >= 1) {
        job->limit_train_batches = iv;
        return 0;
    }
    if (n->kind == DDPC_NODE_SCALAR && !n->quoted && is_float && units_double(n->str, &dv) == 0 &&
        dv > 0 && dv <= 1) {
        job->limit_train_fraction = dv;
        return 0;
    }
    vdiag(c, DDPC_R_TYPE, n, path, "expected a batch count (integer >= 1) or a fraction in "
          "(0, 1]; found %s", describe(n, found, sizeof found));
    return -1;
}

static int key_resume(struct ddpc_vctx *c, const struct ddpc_node *n, void *field,
                      const char *path)
{
    struct ddpc_job *job = c->job;
    char found[96];
    (void)field;
    job->checkpoint.resume = DDPC_RESUME_AUTO;
    job->checkpoint.resume_path = NULL;
    if (!n)
        return 0;
    if (n->kind != DDPC_NODE_SCALAR) {
        vdiag(c, DDPC_R_TYPE, n, path, "expected auto, never or a checkpoint path; found %s",
              describe(n, found, sizeof found));
        return -1;
    }
    if (strcmp(n->str, "auto") == 0)
        return 0;
    if (strcmp(n->str, "never") == 0) {
        job->checkpoint.resume = DDPC_RESUME_NEVER;
        return 0;
    }
    if (string_check(c, n, path, 1) < 0)
        return -1;
    job->checkpoint.resume = DDPC_RESUME_PATH;
    job->checkpoint.resume_path = n->str;
    return 0;
}

static int check_host(struct ddpc_vctx *c, const struct ddpc_node *n, void *field,
                      const char *path)
{
    char found[96];
    (void)field;
    int ok = n->len >= 1 && n->len <= 253 && strlen(n->str) == n->len;
    for (size_t i = 0; ok && i < n->len; i++) {
        char ch = n->str[i];
        ok = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
             ch == '.' || ch == '-' || ch == ':' || ch == '_' ||
             /* brackets only around a whole IPv6 address: [::1] */
             (ch == '[' && i == 0 && n->str[n->len - 1] == ']' && n->len > 2) ||
             (ch == ']' && i == n->len - 1 && n->str[0] == '[');
    }
    if (!ok) {
        vdiag(c, DDPC_R_STRING, n, path, "expected a host name or IP address, found %s",
              describe(n, found, sizeof found));
        return -1;
    }
    return 0;
}

/* Slurm partition and account names go into #SBATCH lines, which sbatch
 * reads itself (no shell): letters, digits, `_ . -` and commas only. */
static int check_slurm_name(struct ddpc_vctx *c, const struct ddpc_node *n, void *field,
                            const char *path)
{
    char found[96];
    (void)field;
    int ok = n->len >= 1 && n->len <= 128 && strlen(n->str) == n->len;
    for (size_t i = 0; ok && i < n->len; i++) {
        char ch = n->str[i];
        ok = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
             ch == '.' || ch == '-' || ch == '_' || ch == ',';
    }
    if (!ok) {
        vdiag(c, DDPC_R_STRING, n, path, "expected a Slurm name (letters, digits, `_ . -`, "
              "commas between several), found %s", describe(n, found, sizeof found));
        return -1;
    }
    return 0;
}

/* ===================== data headers ===================== */

struct data_info {
    int64_t samples;    /* -1 unknown */
    int64_t features;   /* -1 unknown */
    int64_t classes;    /* synthetic: exact (0 regression); -1 unknown */
    int64_t max_label;  /* label files: the largest label; -1 unknown */
    int     nd;         /* dims of one sample (0 unknown): IDX images [1, rows, cols] */
    int64_t dims[8];
    int64_t targets;    /* NPY float labels (regression targets): values per sample; -1 none */
    char    targets_file[PATH_MAX + 64];   /* that labels file, as the spec names it */
    char    targets_shape[96];             /* its shape, "[6, 2]" */
};

/* What the first CSV_SEEN columns of a CSV's head look like, to tell which
 * one holds class labels. */
#define CSV_SEEN 64

struct csv_look {
    int64_t rows;                   /* whole data lines looked at */
    uint64_t labels;                /* bit c: column c held only integers >= 0 */
    double max[CSV_SEEN];           /* column c's largest value */
    double odd[CSV_SEEN];           /* column c's first value that is not a class label */
    int odd_line[CSV_SEEN];         /* its line (1-based); 0: none */
    int max_line[CSV_SEEN];         /* the line of column c's first largest value */
    /* the first line, when it is not all numbers (the job takes it for a
     * header and does not train on it): its fields, how many of them are
     * numbers, and its first field that is not one (column, text) */
    int first_fields, first_numbers, first_odd_col, first_line;
    int first_column_numbers;       /* the first line is pandas' 0,1,...,k-1 (csv_header.h) */
    char first_odd[32];
};

/* Fills look's first_* from line (the file's first non-empty line), split
 * and trimmed as csv_columns reads fields. */
static void csv_first_line(const char *line, int lineno, struct csv_look *look)
{
    look->first_line = lineno;
    look->first_odd_col = -1;
    for (const char *f = line;; look->first_fields++) {
        const char *end = strchr(f, ',');
        size_t len = end ? (size_t)(end - f) : strlen(f);
        char field[64];
        size_t o = 0;
        for (size_t i = 0; i < len && o + 1 < sizeof field; i++)
            if (f[i] != ' ' && f[i] != '\t' && f[i] != '"' && f[i] != '\r')
                field[o++] = f[i];
        field[o] = '\0';
        char *e;
        double v = o ? strtod(field, &e) : 0;
        const char *d = field + (field[0] == '+' || field[0] == '-');
        if (d[0] == '0' && (d[1] == 'x' || d[1] == 'X'))
            e = field;   /* decimal only, as the job reads it: 0x10 is no number */
        if (o && *e == '\0' && isfinite(v))
            look->first_numbers++;
        else if (look->first_odd_col < 0) {
            look->first_odd_col = look->first_fields;
            snprintf(look->first_odd, sizeof look->first_odd, "%s", field);
        }
        if (!end)
            break;
        f = end + 1;
    }
    look->first_fields++;
}

/* CSV: the number of columns of the first line, and a look at the whole
 * lines of the first 64 KiB (a first line that is not numbers is a header,
 * as the runtime reads it). */
static int csv_columns(const char *p, int64_t *cols, struct csv_look *look, char *why, size_t cap)
{
    static unsigned char b[65536 + 1];   /* check is single-threaded */
    long got = probe_head(p, b, sizeof b - 1, why, cap);
    if (got < 0)
        return -1;
    /* columns from the first line that is not empty, as the job counts
     * them: blank lines before it ("\n", "\r\n") are skipped */
    int64_t n = 1;
    long i = 0;
    while (i < got && (b[i] == '\n' || (b[i] == '\r' && i + 1 < got && b[i + 1] == '\n')))
        i += b[i] == '\r' ? 2 : 1;
    long start = i;
    for (; i < got && b[i] != '\n'; i++)
        n += b[i] == ',';
    if (start == got || (i == got && got == (long)sizeof b - 1)) {
        snprintf(why, cap, start == got ? "empty CSV file" : "first CSV line longer than 64 KiB");
        return -1;
    }
    const unsigned char *nul = memchr(b, '\0', (size_t)got);
    if (nul) {      /* the job refuses it too (runtime/data.c) */
        long line = 1;
        for (const unsigned char *c = b; c < nul; c++)
            line += *c == '\n';
        snprintf(why, cap, "a NUL byte on line %ld (byte %ld): a CSV file is text, and this "
                 "one is binary or zero-filled from there (a copy or write cut short?)", line,
                 (long)(nul - b) + 1);
        return -1;
    }
    *cols = n;
    memset(look, 0, sizeof *look);
    look->labels = ~UINT64_C(0);
    /* whole lines only: the head may end in the middle of one */
    long end = got;
    if (got == (long)sizeof b - 1)
        while (end > 0 && b[end - 1] != '\n')
            end--;
    b[end] = '\0';
    int line = 0;
    int bom = end >= 3 && memcmp(b, "\xef\xbb\xbf", 3) == 0 ? 3 : 0;   /* as the job */
    for (char *q = (char *)b + bom; q < (char *)b + end && *q;) {
        char *nl = strchr(q, '\n');
        if (nl)
            *nl = '\0';
        line++;
        double v[CSV_SEEN];
        int nv = 0, numeric = 1;
        for (char *f = q; numeric && nv < CSV_SEEN;) {
            char *e;
            while (*f == ' ' || *f == '\t' || *f == '"')
                f++;
            v[nv] = strtod(f, &e);
            const char *d = f + (*f == '+' || *f == '-');
            if (d[0] == '0' && (d[1] == 'x' || d[1] == 'X'))
                e = f;   /* decimal only, as the job reads it */
            while (*e == ' ' || *e == '\t' || *e == '"' || *e == '\r')
                e++;
            numeric = e != f && (*e == ',' || *e == '\0') && isfinite(v[nv]);
            nv++;
            if (*e != ',')
                break;
            f = e + 1;
        }
        if (!look->first_line && *q && *q != '\r' && csv_is_column_numbers(q)) {
            /* pandas' header: a header, as the job reads it */
            look->first_line = line;
            look->first_column_numbers = 1;
            numeric = 0;
        }
        if (!numeric && !look->first_line && *q && *q != '\r')
            csv_first_line(q, line, look);
        if (numeric && !look->first_line)
            look->first_line = -1;      /* the first line is data */
        if (numeric && nv > 1) {
            look->rows++;
            for (int c = 0; c < nv; c++) {
                int label = v[c] >= 0 && v[c] == floor(v[c]) && v[c] <= 1e6;
                if (!label && (look->labels >> c & 1)) {
                    look->labels &= ~(UINT64_C(1) << c);
                    look->odd[c] = v[c];
                    look->odd_line[c] = line;
                }
                if (look->rows == 1 || v[c] > look->max[c]) {
                    look->max[c] = v[c];
                    look->max_line[c] = line;
                }
            }
        }
        if (!nl)
            break;
        q = nl + 1;
    }
    return 0;
}

/* The smallest and largest label of a label file whose elements are
 * little-endian (or single-byte) integers of elem bytes after hdr header
 * bytes. Reads the whole file, so only up to 16 MiB of labels; leaves
 * *max = -1 when it cannot tell. */
static void label_range(const char *p, size_t hdr, int elem, int is_signed, int big_endian,
                        int64_t count, int64_t *min, int64_t *max, int *known)
{
    char why[256];
    *min = 0;
    *max = -1;
    if (count <= 0 || elem < 1 || elem > 8 || (uint64_t)count > (16u << 20) / (unsigned)elem)
        return;
    size_t want = hdr + (size_t)count * (size_t)elem;
    unsigned char *b = malloc(want);
    if (!b)
        return;
    /* short or unreadable: the runtime reports it with more context */
    if (probe_head(p, b, want, why, sizeof why) == (long)want) {
        int64_t lo = INT64_MAX, hi = INT64_MIN;
        for (int64_t i = 0; i < count; i++) {
            const unsigned char *q = b + hdr + (size_t)i * (size_t)elem;
            uint64_t u = 0;
            for (int k = 0; k < elem; k++)
                u = u << 8 | q[big_endian ? k : elem - 1 - k];
            int64_t v = (int64_t)u;
            if (is_signed && elem < 8 && (u >> (8 * elem - 1)) & 1)
                v = (int64_t)(u | ~((UINT64_C(1) << (8 * elem)) - 1));
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
        }
        *min = lo;
        *max = hi;
        *known = 1;
    }
    free(b);
}

/* Everything check wants to know about one data file, read once. */
struct file_facts {
    int ok;                 /* 0: why says what is wrong */
    char why[256];
    int64_t dims[8];        /* idx, npy */
    int nd;
    char descr[32];         /* npy dtype */
    int64_t cols;           /* csv */
    struct csv_look look;   /* csv */
    int64_t min_label, max_label;   /* integer label files, when labels_known */
    int labels_known;
};

enum { ROLE_INPUTS, ROLE_LABELS, ROLE_CSV };

/* An uncompressed IDX or NPY file holds what its header announces (the job
 * refuses one that does not: runtime/data.c): a shape whose element count
 * wraps past 2^63 is a corrupt header, a file shorter than header + data
 * was cut short. A gzipped file's size says nothing: left to the job. */
static void facts_size(const char *p, enum ddpc_data_format fmt, int idx_type, size_t hdr,
                       struct file_facts *f)
{
    struct npy_dtype dt;
    int elem = fmt == DDPC_DATA_NPY ? (npy_dtype_parse(f->descr, strlen(f->descr), &dt) == 0
                                       ? dt.size : 0)
             : idx_type == 0x08 || idx_type == 0x09 ? 1 : idx_type == 0x0B ? 2
             : idx_type == 0x0C || idx_type == 0x0D ? 4 : idx_type == 0x0E ? 8 : 0;
    unsigned char magic[2];
    char why[64];
    struct stat st;
    int fd = elem ? probe_open(p, &st, why, sizeof why) : -1;
    if (fd < 0)
        return;
    ssize_t got = read(fd, magic, 2);
    (void)close(fd);    /* read-only */
    if (got != 2 || (magic[0] == 0x1f && magic[1] == 0x8b))
        return;
    int64_t n = 1;
    int wrapped = 0;
    for (int i = 0; i < f->nd; i++)
        wrapped |= __builtin_mul_overflow(n, f->dims[i], &n);
    int64_t need = 0;
    wrapped = wrapped || __builtin_mul_overflow(n, (int64_t)elem, &need) ||
              __builtin_add_overflow(need, (int64_t)hdr, &need);
    if (wrapped) {
        f->ok = 0;
        snprintf(f->why, sizeof f->why, "its header's shape has more elements than any file "
                 "can hold: the header is corrupt");
    } else if ((int64_t)st.st_size < need) {
        f->ok = 0;
        snprintf(f->why, sizeof f->why, "truncated: its header announces %lld bytes, the file "
                 "has %lld; re-download or re-create it", (long long)need,
                 (long long)st.st_size);
    } else if (fmt == DDPC_DATA_IDX && (int64_t)st.st_size > need) {
        /* the job refuses what it would drop (runtime/data.c idx_read) */
        f->ok = 0;
        snprintf(f->why, sizeof f->why, "extra bytes after the data: its header announces "
                 "%lld bytes, the file has %lld (files joined with cat?)", (long long)need,
                 (long long)st.st_size);
    }
}

static void facts_read(const char *p, enum ddpc_data_format fmt, int role, struct file_facts *f)
{
    int type = 0;
    size_t hdr = 0;
    memset(f, 0, sizeof *f);
    f->max_label = -1;
    if (role == ROLE_CSV) {
        f->ok = csv_columns(p, &f->cols, &f->look, f->why, sizeof f->why) == 0;
        return;
    }
    struct ddpc_probe pr;
    int rc = fmt == DDPC_DATA_IDX ? probe_idx(p, &pr, f->why, sizeof f->why)
                                  : probe_npy(p, &pr, f->why, sizeof f->why);
    f->ok = rc == 0;
    if (f->ok) {
        memcpy(f->dims, pr.dims, sizeof f->dims);
        f->nd = pr.nd;
        type = pr.idx_type;
        hdr = pr.header_bytes;
        snprintf(f->descr, sizeof f->descr, "%s", pr.descr);
        struct npy_dtype dt;
        if (fmt == DDPC_DATA_NPY && npy_dtype_parse(f->descr, strlen(f->descr), &dt) < 0) {
            f->ok = 0;
            snprintf(f->why, sizeof f->why, "its NPY dtype '%s' is not one ddpc reads (use "
                     NPY_DTYPES_READ ")", f->descr);
        }
    }
    if (f->ok)
        facts_size(p, fmt, type, hdr, f);
    if (!f->ok || role != ROLE_LABELS || f->nd < 1)
        return;
    /* class labels: IDX integers (08 ubyte, 09 sbyte, 0B short, 0C int,
     * big-endian), or NPY integers and bools of either byte order, as the
     * loader reads them (npy_dtype_parse, the loader's rule) */
    int idx_size = type == 0x08 || type == 0x09 ? 1 : type == 0x0B ? 2 : type == 0x0C ? 4 : 0;
    struct npy_dtype dt;
    if (fmt == DDPC_DATA_IDX && idx_size)
        label_range(p, hdr, idx_size, type != 0x08, 1, f->dims[0], &f->min_label,
                    &f->max_label, &f->labels_known);
    else if (fmt == DDPC_DATA_NPY && npy_dtype_parse(f->descr, strlen(f->descr), &dt) == 0 &&
             dt.kind != 'f')
        label_range(p, hdr, dt.size, dt.kind == 'i', dt.big_endian, f->dims[0], &f->min_label,
                    &f->max_label, &f->labels_known);
}

/* ---- spec_cache: file facts memoized by identity across specs ---- */

struct cache_entry {
    char *path;
    int fmt, role;
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
    struct file_facts facts;
};

struct spec_cache {
    struct cache_entry v[64];   /* a check run names few distinct data files */
    int n;
};

struct spec_cache *spec_cache_new(void)
{
    return calloc(1, sizeof(struct spec_cache));
}

void spec_cache_free(struct spec_cache *cache)
{
    if (!cache)
        return;
    for (int i = 0; i < cache->n; i++)
        free(cache->v[i].path);
    free(cache);
}

/* facts_read through the cache: an entry is reused only while the file's
 * device, inode, size and mtime are unchanged. */
static void facts_get(struct ddpc_vctx *c, const char *p, enum ddpc_data_format fmt, int role,
                      struct file_facts *f)
{
    struct spec_cache *cache = c->opt ? c->opt->cache : NULL;
    struct stat st;
    if (!cache || stat(p, &st) < 0 || !S_ISREG(st.st_mode)) {
        facts_read(p, fmt, role, f);
        return;
    }
    for (int i = 0; i < cache->n; i++) {
        const struct cache_entry *e = &cache->v[i];
        if (e->fmt == (int)fmt && e->role == role && e->dev == st.st_dev && e->ino == st.st_ino &&
            e->size == st.st_size && e->mtime.tv_sec == st.st_mtim.tv_sec &&
            e->mtime.tv_nsec == st.st_mtim.tv_nsec && strcmp(e->path, p) == 0) {
            *f = e->facts;
            return;
        }
    }
    facts_read(p, fmt, role, f);
    if (cache->n == (int)(sizeof cache->v / sizeof cache->v[0]))
        return;
    struct cache_entry *e = &cache->v[cache->n];
    if (!(e->path = strdup(p)))
        return;
    e->fmt = (int)fmt;
    e->role = role;
    e->dev = st.st_dev;
    e->ino = st.st_ino;
    e->size = st.st_size;
    e->mtime = st.st_mtim;
    e->facts = *f;
    cache->n++;
}

/* What the spec text called a path, for messages: the value as written,
 * relative to the spec's directory, shown relative to the current one. */
static const char *shown_path(struct ddpc_vctx *c, const struct ddpc_node *n, char *buf, size_t cap)
{
    if (n->str[0] == '/' || !c->dir[0])
        snprintf(buf, cap, "%s", n->str);
    else
        snprintf(buf, cap, "%s/%s", c->dir, n->str);
    return buf;
}

/* A CSV whose label_column cannot hold class labels (a fraction, a
 * negative number, or more classes than the model has outputs) while
 * another column could: say so at label_column (or at the path when it is
 * left at its default), instead of a message about the loss or the layers
 * at run time. Class labels with no other column to blame, some past the
 * model's outputs: say so at the output size, with the line (as the job
 * does for the whole file; check reads its first 64 KiB). */
static void csv_label_hint(struct ddpc_vctx *c, const struct ddpc_data_source *s,
                           const char *spath, const struct ddpc_node *pathnode,
                           const struct file_facts *f)
{
    const struct csv_look *lk = &f->look;
    const struct ddpc_job *j = c->job;
    int lc = s->label_column, cols = f->cols < CSV_SEEN ? (int)f->cols : CSV_SEEN;
    if (j->loss != DDPC_LOSS_CROSS_ENTROPY || lk->rows == 0 || lc >= cols)
        return;
    /* the model's outputs when its sizes say (mlp, linear); a sequential
     * model's are not known yet: then only a value that is no label counts */
    double out = j->model.n_layers >= 2 ? j->model.layers[j->model.n_layers - 1] : HUGE_VAL;
    int fits = (lk->labels >> lc & 1) && lk->max[lc] < out;
    if (fits)
        return;
    /* the last column first (the usual other place), then left to right */
    int cand = -1;
    for (int k = -1; k < cols && cand < 0; k++) {
        int col = k < 0 ? cols - 1 : k;
        if (col != lc && (lk->labels >> col & 1) && lk->max[col] < out)
            cand = col;
    }
    char lkey[64], why[160], shown[PATH_MAX + 64], v[32];
    const struct ddpc_node *layers;
    if (cand < 0 && (lk->labels >> lc & 1) && isfinite(out) &&
        (layers = load_lookup(c->root, "model.layers")) && layers->kind == DDPC_NODE_SEQ &&
        layers->n > 0) {
        char lp[48];
        snprintf(lp, sizeof lp, "model.layers[%d]", layers->n - 1);
        vdiag(c, DDPC_R_CLASSES, layers->items[layers->n - 1], lp, "output size %.0f is too "
              "small: the labels of %s go up to %s ('%s' line %d, column %d is label_column)",
              out, spath, fmt_num(lk->max[lc], v, sizeof v),
              shown_path(c, pathnode, shown, sizeof shown), lk->max_line[lc], lc);
    }
    if (cand < 0)
        return;
    snprintf(lkey, sizeof lkey, "%s.label_column", spath);
    const struct ddpc_node *given = load_lookup(c->root, lkey);
    if (!(lk->labels >> lc & 1))
        snprintf(why, sizeof why, "holds %s (line %d), not a class label",
                 fmt_num(lk->odd[lc], v, sizeof v), lk->odd_line[lc]);
    else
        snprintf(why, sizeof why, "goes up to %s, more classes than the %.0f outputs of "
                 "model.layers", fmt_num(lk->max[lc], v, sizeof v), out);
    vdiag(c, DDPC_R_LABEL_COLUMN, given ? given : pathnode, lkey,
          "column %d of '%s' %s, so it is not the label column (label_column is %d%s); "
          "column %d holds whole numbers up to %.0f: set %s: %d", lc,
          shown_path(c, pathnode, shown, sizeof shown), why, lc, given ? "" : " by default",
          cand, lk->max[cand], lkey, cand);
}

static void data_source_info(struct ddpc_vctx *c, const struct ddpc_data_source *s,
                             const char *spath, struct data_info *info)
{
    char key[64], shown[PATH_MAX + 64];
    info->samples = info->features = info->classes = info->max_label = -1;
    info->nd = 0;
    info->targets = -1;
    if (s->format == DDPC_DATA_SYNTHETIC) {
        info->samples = s->samples;
        info->features = s->features;
        info->nd = 1;
        info->dims[0] = s->features;
        info->classes = s->classes;
        return;
    }
    if (!c->opt || !c->opt->read_data_headers)
        return;
    if (s->format == DDPC_DATA_CSV) {
        snprintf(key, sizeof key, "%s.path", spath);
        const struct ddpc_node *n = load_lookup(c->root, key);
        struct file_facts f;
        if (!s->path || !n)
            return;
        facts_get(c, s->path, s->format, ROLE_CSV, &f);
        if (!f.ok) {
            vdiag(c, DDPC_R_DATA_READ, n, key, "cannot read '%s': %s",
                  shown_path(c, n, shown, sizeof shown), f.why);
            return;
        }
        int64_t cols = f.cols;
        if (s->label_column >= cols) {
            char lk[64];
            snprintf(lk, sizeof lk, "%s.label_column", spath);
            const struct ddpc_node *ln = load_lookup(c->root, lk);
            vdiag(c, DDPC_R_LABEL_COLUMN, ln ? ln : n, ln ? lk : key,
                  "label column %d does not exist: '%s' has %lld columns", s->label_column,
                  shown_path(c, n, shown, sizeof shown), (long long)cols);
            return;
        }
        info->features = cols - 1;
        const struct csv_look *lk = &f.look;
        if (lk->first_column_numbers)
            vdiag(c, DDPC_R_CSV_HEADER_NOTE, n, key, "line %d of '%s' holds the column numbers 0, 1, "
                  "..., %lld (the header pandas' to_csv writes for an unnamed array): it is "
                  "taken for a header and not trained on", lk->first_line,
                  shown_path(c, n, shown, sizeof shown), (long long)cols - 1);
        else if (lk->first_line > 0 && lk->first_numbers > 0 &&
            2 * lk->first_numbers >= lk->first_fields)
            /* a header has names; a data line with a typo reads as one,
             * and is dropped without a word (pandas' read_csv drops it too) */
            vdiag(c, DDPC_R_CSV_HEADER, n, key, "line %d of '%s' is taken for a header (column "
                  "%d is '%s', not a number) and not trained on, but %d of its %d columns are "
                  "numbers: if it is data, fix column %d", lk->first_line,
                  shown_path(c, n, shown, sizeof shown), lk->first_odd_col, lk->first_odd,
                  lk->first_numbers, lk->first_fields, lk->first_odd_col);
        csv_label_hint(c, s, spath, n, &f);
        info->nd = 1;
        info->dims[0] = cols - 1;
        return;
    }
    /* idx, npy: inputs [N, features...], labels [N] */
    const char *which[2] = { "inputs", "labels" };
    const char *paths[2] = { s->inputs, s->labels };
    int64_t count[2] = { -1, -1 };
    for (int w = 0; w < 2; w++) {
        snprintf(key, sizeof key, "%s.%s", spath, which[w]);
        const struct ddpc_node *n = load_lookup(c->root, key);
        struct file_facts f;
        if (!paths[w] || !n)
            return;
        facts_get(c, paths[w], s->format, w ? ROLE_LABELS : ROLE_INPUTS, &f);
        if (!f.ok) {
            vdiag(c, DDPC_R_DATA_READ, n, key, "cannot read '%s': %s",
                  shown_path(c, n, shown, sizeof shown), f.why);
            return;
        }
        /* NPY float labels are regression targets, [N, targets...] (the
         * loader's rule: runtime/data.c load_npy) */
        int targets = w == 1 && s->format == DDPC_DATA_NPY && f.descr[1] == 'f';
        if (f.nd < 1 || (w == 1 && f.nd != 1 && !(f.nd == 2 && f.dims[1] == 1) && !targets)) {
            vdiag(c, DDPC_R_LABELS, n, key, "'%s' has %d dimensions; labels must be one value per "
                  "sample", shown_path(c, n, shown, sizeof shown), f.nd);
            return;
        }
        count[w] = f.dims[0];
        if (targets) {
            /* the run refuses targets that are not one per model output */
            info->targets = 1;
            size_t o = (size_t)snprintf(info->targets_shape, sizeof info->targets_shape, "[");
            for (int i = 0; i < f.nd && o < sizeof info->targets_shape; i++) {
                if (i > 0)
                    info->targets *= f.dims[i];
                o += (size_t)snprintf(info->targets_shape + o, sizeof info->targets_shape - o,
                                      "%s%lld", i ? ", " : "", (long long)f.dims[i]);
            }
            if (o < sizeof info->targets_shape)
                snprintf(info->targets_shape + o, sizeof info->targets_shape - o, "]");
            shown_path(c, n, info->targets_file, sizeof info->targets_file);
        }
        if (w == 0) {
            int64_t feat = 1;
            for (int i = 1; i < f.nd; i++)
                feat *= f.dims[i];
            info->features = feat;
            /* one sample's shape: IDX images [N, rows, cols] are [1, rows, cols] */
            if (s->format == DDPC_DATA_IDX && f.nd == 3) {
                info->nd = 3;
                info->dims[0] = 1;
                info->dims[1] = f.dims[1];
                info->dims[2] = f.dims[2];
            } else if (f.nd == 1) {
                info->nd = 1;
                info->dims[0] = 1;
            } else if (f.nd <= 9) {
                info->nd = f.nd - 1;
                for (int i = 1; i < f.nd; i++)
                    info->dims[i - 1] = f.dims[i];
            }
        } else if (f.labels_known && f.min_label < 0) {
            /* the loader refuses negative integer labels whatever the loss */
            vdiag(c, DDPC_R_LABELS, n, key, "'%s' has a negative label (%lld); class labels "
                  "start at 0", shown_path(c, n, shown, sizeof shown), (long long)f.min_label);
        } else if (c->job->loss == DDPC_LOSS_CROSS_ENTROPY) {
            if (s->format == DDPC_DATA_NPY && f.descr[1] == 'f')
                vdiag(c, DDPC_R_LABELS, n, key, "'%s' holds floats (%s); cross_entropy needs "
                      "integer class labels", shown_path(c, n, shown, sizeof shown), f.descr);
            else if (f.labels_known)
                info->max_label = f.max_label;
        }
    }
    if (count[0] != count[1]) {
        snprintf(key, sizeof key, "%s.labels", spath);
        vdiag(c, DDPC_R_DATA_COUNT, load_lookup(c->root, key), key,
              "%lld labels for %lld inputs", (long long)count[1], (long long)count[0]);
        return;
    }
    info->samples = count[0];
}

/* Regression targets (NPY float labels) against the model's outputs: mse
 * compares them one to one, so the run refuses any other count (worker.c
 * check_labels). At the last layer (n, lp), naming the labels file and
 * both shapes. */
static void targets_rule(struct ddpc_vctx *c, const struct data_info *tr,
                         const struct data_info *te, int64_t out, const struct ddpc_node *n,
                         const char *lp)
{
    for (int w = 0; w < 2 && n && c->job->loss == DDPC_LOSS_MSE; w++) {
        const struct data_info *di = w ? te : tr;
        if (di->targets < 0 || di->targets == out)
            continue;
        char want[64];
        long long rows = (long long)(di->samples >= 0 ? di->samples : 0);
        if (out == 1)
            snprintf(want, sizeof want, "[%lld]", rows);
        else
            snprintf(want, sizeof want, "[%lld, %lld]", rows, (long long)out);
        vdiag(c, DDPC_R_TARGETS, n, lp, "the model gives %lld output%s per sample ([%lld]), but "
              "%s.labels '%s' holds regression targets of shape %s, %lld per sample: mse needs "
              "one output per target; give the model %lld output%s, or labels of shape %s",
              (long long)out, out == 1 ? "" : "s", (long long)out,
              w ? "data.test" : "data.train", di->targets_file, di->targets_shape,
              (long long)di->targets, (long long)di->targets, di->targets == 1 ? "" : "s", want);
    }
}

/* ---- token sources (format text, tokens) ---- */

/* check reads at most this many bytes of a token source's range to compare
 * its tokens with vocab_size (a text source's bytes with a vocab_size below
 * 256, a shard's uint16 tokens with one below 65536); beyond it, a warning
 * says the check was not made (the job checks every token at load) */
#define TOKEN_SCAN_MAX ((int64_t)64 << 20)

/* The first token of stream range [a, b) of tf (text bytes or shard uint16
 * tokens, little-endian) that is >= vocab: its file, its index in that
 * file, its value, and the largest token of the range's files from there
 * on; 0 if none, -1 if unreadable. */
static int token_first_over(const struct ddpc_token_files *tf, int64_t a, int64_t b,
                            int64_t vocab, const char **file, int64_t *idx, int64_t *val,
                            int64_t *max)
{
    unsigned char buf[65536];
    int found = 0;
    for (int k = 0; k < tf->n; k++) {
        const struct ddpc_token_file *f = &tf->f[k];
        int64_t lo, hi;
        if (!tokens_file_part(f, a, b, &lo, &hi))
            continue;
        int fd = open(f->path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
            return -1;
        size_t el = (size_t)tf->elem, per = sizeof buf / el;
        for (int64_t t = lo - f->first; t < hi - f->first;) {
            int64_t left = hi - f->first - t;
            size_t want = (left < (int64_t)per ? (size_t)left : per) * el;
            ssize_t r = pread(fd, buf, want, (off_t)(tf->header + (size_t)t * el));
            if (r < 0 && errno == EINTR)
                continue;
            if (r < (ssize_t)el) {
                close(fd);
                return -1;
            }
            size_t n = (size_t)r / el;
            for (size_t i = 0; i < n; i++) {
                int64_t v = el == 1 ? buf[i] : (int64_t)(buf[2 * i] | buf[2 * i + 1] << 8);
                if (v < vocab)
                    continue;
                if (!found) {
                    found = 1;
                    *file = f->path;
                    *idx = t + (int64_t)i;
                    *val = *max = v;
                } else if (v > *max) {
                    *max = v;
                }
            }
            t += (int64_t)n;
        }
        close(fd);
    }
    return found;
}

/* A text or tokens source: its files exist, shard headers are sound, the
 * range holds one window of T + 1 tokens (T 0: unknown), and a text
 * source's bytes and a shard's tokens are below vocab (vocab 0: unknown; a
 * range larger than TOKEN_SCAN_MAX bytes gets a warning saying they were
 * not compared, the job checks at load).
 * Returns the windows at this stride, -1 when unknown. */
static int64_t token_source_check(struct ddpc_vctx *c, const struct ddpc_data_source *s,
                                  const char *spath, int64_t vocab, int64_t T, int64_t stride)
{
    char key[64], why[PATH_MAX + 256];
    snprintf(key, sizeof key, "%s.path", spath);
    const struct ddpc_node *n = load_lookup(c->root, key);
    struct ddpc_token_files tf;
    if (!s->path || !n || !c->opt || !c->opt->read_data_headers)
        return -1;
    /* the path as written (from the current directory), so messages name it so;
     * the spec's directory in front of it is no pattern */
    char shown[PATH_MAX + 64];
    const char *p = shown_path(c, n, shown, sizeof shown);
    size_t lit = n->str[0] == '/' || !c->dir[0] ? 0 : strlen(c->dir) + 1;
    if (tokens_list(p, lit < strlen(p) ? lit : 0, s->format, &tf, why, sizeof why) < 0) {
        vdiag(c, DDPC_R_DATA_READ, n, key, "%s", why);
        return -1;
    }
    int64_t a, b;
    tokens_range(tf.total, s->range_lo, s->range_hi, &a, &b);
    char rk[64];
    snprintf(rk, sizeof rk, "%s.range", spath);
    const struct ddpc_node *rn = load_lookup(c->root, rk);
    int64_t w = T > 0 ? tokens_windows(b - a, T, stride) : -1;
    if (T > 0 && w < 1) {
        char files[32] = "";
        if (tf.n > 1)
            snprintf(files, sizeof files, " (%d files)", tf.n);
        vdiag(c, DDPC_R_TOKENS_SHORT, rn ? rn : n, rn ? rk : key, "'%s'%s holds %lld tokens%s, fewer "
              "than block_size + 1 = %lld that one window needs; use more data%s or a smaller "
              "model.block_size", p, files, (long long)(b - a), rn ? " in this range" : "",
              (long long)T + 1, rn ? ", a wider range" : "");
    } else if (vocab > 0 && vocab < (s->format == DDPC_DATA_TEXT ? 256 : 65536)) {
        const struct ddpc_node *vn = load_lookup(c->root, "model.vocab_size");
        int text = s->format == DDPC_DATA_TEXT;
        int64_t bytes = (b - a) * tf.elem;
        if (bytes > TOKEN_SCAN_MAX) {
            if (text)
                vdiag(c, DDPC_R_TOKENS_UNCHECKED, vn ? vn : n, vn ? "model.vocab_size" : key,
                      "'%s' is a text source (tokens are bytes, 0 to 255) larger than check "
                      "reads (%lld MiB); the job fails at load if a byte is >= vocab_size %lld",
                      p, (long long)(TOKEN_SCAN_MAX >> 20), (long long)vocab);
            else
                vdiag(c, DDPC_R_TOKENS_UNCHECKED, vn ? vn : n, vn ? "model.vocab_size" : key,
                      "'%s' holds %lld tokens (%lld MiB) in %s, more than check reads (%lld "
                      "MiB): they were not compared with vocab_size %lld; the job fails at "
                      "load if one is >= it", p, (long long)(b - a), (long long)(bytes >> 20),
                      rn ? "this range" : "its files", (long long)(TOKEN_SCAN_MAX >> 20),
                      (long long)vocab);
        } else {
            int64_t idx = 0, val = 0, max = 0;
            const char *file = p;
            int r = token_first_over(&tf, a, b, vocab, &file, &idx, &val, &max);
            if (r < 0)
                vdiag(c, DDPC_R_DATA_READ, n, key, "cannot read '%s': %s", p, strerror(errno));
            else if (r > 0 && text)
                vdiag(c, DDPC_R_TOKENS_VOCAB, vn ? vn : n, vn ? "model.vocab_size" : key,
                      "'%s' holds byte %lld at offset %lld, not below vocab_size %lld: a text "
                      "source's tokens are its bytes; set model.vocab_size: 256", file,
                      (long long)val, (long long)idx, (long long)vocab);
            else if (r > 0)
                vdiag(c, DDPC_R_TOKENS_VOCAB, vn ? vn : n, vn ? "model.vocab_size" : key,
                      "%s: '%s' holds token %lld at token %lld of the file (byte offset %lld), "
                      "not below vocab_size %lld%s; set model.vocab_size to at least %lld, or "
                      "use shards tokenized for this vocabulary", spath, file, (long long)val,
                      (long long)idx, (long long)(DDPC_SHARD_HEADER_BYTES + 2 * idx),
                      (long long)vocab, max > val ? " (and larger ones follow)" : "",
                      (long long)max + 1);
        }
    }
    tokens_list_free(&tf);
    return w;
}

/* ===================== cross-key rules ===================== */

static const struct ddpc_node *at(struct ddpc_vctx *c, const char *dotted)
{
    return load_lookup(c->root, dotted);
}

/* An output path that exists must be the kind the job writes there, or the
 * job refuses to start (runtime/ddprt.c): a directory for checkpoint_dir
 * and tensorboard, a regular file for the export and metrics_csv (a FIFO
 * would block, /dev/null would be replaced by the export's rename).
 * Absolute paths are the same wherever the job runs: an error. Relative
 * ones resolve in the run's working directory, which check can only guess
 * is its own: a warning. Absent paths are created by the job. */
static void outpath_kind(struct ddpc_vctx *c, const char *key, int want_dir)
{
    const struct ddpc_node *n = at(c, key);
    struct stat st;
    if (!n || n->kind != DDPC_NODE_SCALAR || !n->str[0])
        return;
    if (stat(n->str, &st) != 0) {
        /* a directory on the way is a file: the job cannot create it */
        if (errno != ENOTDIR)
            return;
        if (n->str[0] == '/')
            vdiag(c, DDPC_R_OUTPUT_PATH, n, key, "'%s': a directory on the path is a file; the job "
                  "would refuse it", n->str);
        else
            vdiag(c, DDPC_R_OUTPUT_PATH_HERE, n, key, "'%s': a directory on the path is a file here; a "
                  "job run from this directory would refuse it", n->str);
        return;
    }
    if (want_dir ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode))
        return;
    const char *kind = S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISDIR(st.st_mode) ? "a directory"
                     : S_ISREG(st.st_mode) ? "a regular file"
                     : S_ISCHR(st.st_mode) ? "a character device"
                     : S_ISBLK(st.st_mode) ? "a block device"
                     : S_ISSOCK(st.st_mode) ? "a socket" : "a special file";
    if (n->str[0] == '/')
        vdiag(c, DDPC_R_OUTPUT_PATH, n, key, "'%s' is %s, not %s; the job would refuse it", n->str,
              kind, want_dir ? "a directory" : "a regular file");
    else
        vdiag(c, DDPC_R_OUTPUT_PATH_HERE, n, key, "'%s' is %s here, not %s; a job run from this "
              "directory would refuse it", n->str, kind, want_dir ? "a directory"
                                                              : "a regular file");
}

/* An output file that is the spec file, one of the job's inputs (data,
 * model.init_from, checkpoint.resume; resolved already) or the other output
 * would be overwritten by the run (the job refuses all but the spec, which
 * it does not know). Error or warning as in outpath_kind: a relative output
 * resolves where the job runs. */
static void outpath_clobbers(struct ddpc_vctx *c, const char *key, const char *other_key)
{
    const struct ddpc_node *n = at(c, key), *o = other_key ? at(c, other_key) : NULL;
    if (!n || n->kind != DDPC_NODE_SCALAR || !n->str[0])
        return;
    enum ddpc_rule rule = n->str[0] == '/' ? DDPC_R_OUTPUT_CLOBBER : DDPC_R_OUTPUT_CLOBBER_HERE;
    const char *here = n->str[0] == '/' ? "" : " here";
    struct stat so, si;
    int there = stat(n->str, &so) == 0 && S_ISREG(so.st_mode);
    if (o && o->kind == DDPC_NODE_SCALAR && o->str[0] && same_file(o->str, n->str)) {
        vdiag(c, DDPC_R_OUTPUT_CLOBBER, n, key, "'%s' is %s's file too: one would overwrite the "
              "other; give each its own path", n->str, other_key);
        return;
    }
    if (!there)
        return;
    const char *what;
    if (strcmp(c->file, DDPC_SPEC_STDIN) != 0 && stat(c->file, &si) == 0 &&
        si.st_dev == so.st_dev && si.st_ino == so.st_ino)
        what = "the spec file itself";
    else if (!job_input_at(c->job, &so, "checkpoint.resume", &what))
        return;
    vdiag(c, rule, n, key, "'%s' is %s%s: the run would overwrite it; point %s at another file",
          n->str, what, here, key);
}

/* Where data.train's sample shape came from, for the messages that ask for
 * model.input: "its NPY array is [6, 5]", "its CSV rows have 3 values besides
 * the label", ... (buf is empty when the format says nothing more). */
static const char *data_origin(const struct ddpc_job *j, const struct data_info *tr, char *buf,
                               size_t cap)
{
    size_t o = 0;
    buf[0] = 0;
    switch (j->data.train.format) {
    case DDPC_DATA_NPY:
    case DDPC_DATA_IDX:
        o += (size_t)snprintf(buf, cap, "its %s array is [",
                              j->data.train.format == DDPC_DATA_NPY ? "NPY" : "IDX");
        if (tr->samples >= 0 && o < cap)
            o += (size_t)snprintf(buf + o, cap - o, "%lld", (long long)tr->samples);
        else if (o < cap)
            o += (size_t)snprintf(buf + o, cap - o, "N");
        /* IDX images [N, rows, cols] are samples [1, rows, cols] */
        int from = j->data.train.format == DDPC_DATA_IDX && tr->nd == 3 ? 1 : 0;
        if (!(tr->nd == 1 && tr->dims[0] == 1 && tr->features == 1))
            for (int i = from; i < tr->nd && o < cap; i++)
                o += (size_t)snprintf(buf + o, cap - o, ", %lld", (long long)tr->dims[i]);
        if (o < cap)
            snprintf(buf + o, cap - o, "]");
        break;
    case DDPC_DATA_CSV:
        snprintf(buf, cap, "its CSV rows have %lld values besides the label column",
                 (long long)tr->features);
        break;
    default:
        break;
    }
    return buf;
}

/* Batch norm in training normalizes each channel over the batch's values
 * of it: batch rows x the channel's spatial size. Over one value (a
 * batchnorm1d on features at batch_size 1) the output is the layer's bias
 * whatever the input, and the running variance decays to 0 (evaluation
 * then divides by sqrt(eps): test_loss 6.8 on two classes): PyTorch raises
 * ("Expected more than 1 value per channel when training"), the job
 * trained on without a word.
 * batch_size 1 there is an error; an epoch whose last batch holds 1 sample
 * (the shard's remainder) a warning: data.drop_last drops that batch. */
static void batchnorm_batch_rules(struct ddpc_vctx *c, const struct ddpc_net *net,
                                  int64_t samples)
{
    const struct ddpc_job *j = c->job;
    int64_t world = ddpc_job_world_size(j, 0);
    if (world <= 0)
        world = j->launch.num_nodes > 0 ? j->launch.num_nodes : 1;
    int64_t shard = 0, full = 0, nb = 0, b = j->batch_size > 0 ? j->batch_size : 1;
    if (samples > 0)
        nb = epoch_batches(samples, world, b, j->data.drop_last, j->limit_train_batches,
                           j->limit_train_fraction, &shard, &full);
    int last_one = samples > 0 && !j->data.drop_last && nb == full && shard % b == 1;
    for (int i = 0; i < net->n; i++) {
        const struct ddpc_lnode *bn = &net->node[i];
        if ((bn->it.type != DDPC_LAYER_BATCHNORM1D && bn->it.type != DDPC_LAYER_BATCHNORM2D) ||
            bn->spatial != 1 || bn->item < 0 || !c->item_node[bn->item])
            continue;
        const char *name = layers_type_name(bn->it.type);
        if (b == 1)
            vdiag(c, DDPC_R_BATCHNORM_BATCH, c->item_node[bn->item], c->item_path[bn->item], "%s "
                  "normalizes each channel over the batch, and at batch_size 1 a channel has "
                  "one value: the layer outputs its bias whatever the input, and its running "
                  "variance decays to 0, which ruins evaluation (PyTorch raises 'Expected more "
                  "than 1 value per channel when training'); use batch_size 2 or more, or "
                  "layernorm", name);
        else if (last_one)
            vdiag(c, DDPC_R_BATCHNORM_LAST, c->item_node[bn->item], c->item_path[bn->item], "the "
                  "last batch of every epoch holds 1 sample per rank (%lld samples per rank, "
                  "batches of %lld): there %s outputs its bias whatever the input and pulls "
                  "its running variance toward 0 (PyTorch raises there); set data.drop_last: "
                  "true to drop that batch, or change batch_size", (long long)shard,
                  (long long)b, name);
        else
            continue;
        return;     /* once per model */
    }
}

/* A sequential model: the input shape (model.input or the data's), every
 * layer's shapes and arguments (layers.c), then the output against the
 * classes or targets. Findings go to the offending item. */
/* layers_build_each's report: a layer's declared input size that is not
 * what it gets, at that layer. */
static void layer_mismatch(void *ctx, int item, const char *why)
{
    struct ddpc_vctx *c = ctx;
    if (item >= 0 && item < c->job->model.n_items && c->item_node[item])
        vdiag(c, DDPC_R_LAYER_SHAPE, c->item_node[item], c->item_path[item], "%s", why);
    else
        vdiag(c, DDPC_R_LAYER_SHAPE, at(c, "model.layers"), "model.layers", "%s", why);
}

static void sequential_shapes(struct ddpc_vctx *c, const struct data_info *tr,
                              const struct data_info *te)
{
    struct ddpc_job *j = c->job;
    const struct ddpc_node *n, *ln = at(c, "model.layers"), *in_node = at(c, "model.input");
    struct ddpc_shape shape;
    char sh[96], why[1024];
    memset(&shape, 0, sizeof shape);
    if (j->model.n_input) {
        shape.n = j->model.n_input;
        int64_t total = 1;
        for (int i = 0; i < shape.n; i++) {
            shape.d[i] = j->model.input[i];
            total *= shape.d[i];
        }
        if (tr->features >= 0 && total != tr->features) {
            char org[160];
            data_origin(j, tr, org, sizeof org);
            vdiag(c, DDPC_R_INPUT_SHAPE, in_node, "model.input", "%s is %lld floats per sample, but "
                  "data.train has %lld features per sample%s%s%s: give model.input a shape of "
                  "%lld floats in all (e.g. [%lld]), or point data.train at the data the model "
                  "is for", layers_shape_str(&shape, sh, sizeof sh), (long long)total,
                  (long long)tr->features, org[0] ? " (" : "", org, org[0] ? ")" : "",
                  (long long)tr->features, (long long)tr->features);
            /* the layers are still checked against model.input */
        }
    } else if (tr->nd >= 1 && tr->nd <= DDPC_MAX_DIMS) {
        shape.n = tr->nd;
        for (int i = 0; i < shape.n; i++)
            shape.d[i] = (int32_t)tr->dims[i];
    } else if (tr->nd > DDPC_MAX_DIMS) {
        /* the leading dimensions merged into the channels: [1, 1, 28, 28] -> [1, 28, 28] */
        int64_t lead = 1;
        for (int i = 0; i + 2 < tr->nd; i++)
            lead *= tr->dims[i];
        char org[160];
        vdiag(c, DDPC_R_INPUT_SHAPE, ln, "model.layers", "data.train's samples have %d dimensions "
              "(%s); at most %d are supported ([features], [channels, length] or [channels, "
              "height, width]): set model.input to the shape each sample has, %lld floats in "
              "all (e.g. [%lld, %lld, %lld], the leading dimensions merged), or store the "
              "array as [N, channels, height, width]", tr->nd,
              data_origin(j, tr, org, sizeof org), DDPC_MAX_DIMS, (long long)tr->features,
              (long long)lead, (long long)tr->dims[tr->nd - 2], (long long)tr->dims[tr->nd - 1]);
        return;
    } else {
        /* --no-data: the runtime checks against the data; say so, since a
         * clean check could read as "the layers fit" */
        if (c->opt && !c->opt->read_data_headers)
            vdiag(c, DDPC_R_SHAPES_UNCHECKED, ln, "model.layers", "the layers' shapes were not checked: "
                  "--no-data reads no data header, and model.input is not set (set it to the "
                  "shape of one sample, e.g. [1, 28, 28], to check them without the data)");
        return;
    }
    if (te->features >= 0 && tr->features >= 0 && te->features != tr->features)
        vdiag(c, DDPC_R_TEST_FEATURES, at(c, "data.test"), "data.test", "%lld features per sample, "
              "but data.train has %lld", (long long)te->features, (long long)tr->features);
    static struct ddpc_net net;   /* large; validation is single-threaded */
    int bad = -1;
    /* a declared input size that does not fit is reported and the build goes
     * on: every such layer, and the output rules below, in one pass */
    if (layers_build_each(j, &shape, &net, &bad, why, sizeof why, layer_mismatch, c) < 0 &&
        why[0]) {
        if (!j->model.n_input && bad == 0) {
            /* the first layer refuses the data's own shape: say where it came
             * from and what model.input would be */
            char org[160], hint[320] = "";
            data_origin(j, tr, org, sizeof org);
            if (shape.n == 2)
                snprintf(hint, sizeof hint, "; for one-channel images set model.input: "
                         "[1, %d, %d]", (int)shape.d[0], (int)shape.d[1]);
            else if (shape.n == 1)
                snprintf(hint, sizeof hint, "; for images set model.input: [channels, height, "
                         "width] with %d floats in all", (int)shape.d[0]);
            size_t wl = strlen(why);
            snprintf(why + wl, sizeof why - wl, "; the input %s is data.train's sample "
                     "shape%s%s%s%s", layers_shape_str(&shape, sh, sizeof sh),
                     org[0] ? " (" : "", org, org[0] ? ")" : "", hint);
        }
        if (bad >= 0 && bad < j->model.n_items && c->item_node[bad])
            vdiag(c, DDPC_R_LAYER_SHAPE, c->item_node[bad], c->item_path[bad], "%s", why);
        else
            vdiag(c, DDPC_R_LAYER_SHAPE, ln, "model.layers", "%s", why);
        return;
    }
    if (!j->model.n_input) {
        /* bake the data's shape, so the runtime and the plan use the same */
        j->model.n_input = shape.n;
        for (int i = 0; i < shape.n; i++)
            j->model.input[i] = shape.d[i];
    }
    batchnorm_batch_rules(c, &net, tr->samples);
    const struct ddpc_lnode *last = &net.node[net.n - 1];
    int li = last->item >= 0 ? last->item : 0;
    n = c->item_node[li] ? c->item_node[li] : ln;
    const char *lp = c->item_path[li] ? c->item_path[li] : "model.layers";
    if (last->out.n != 1) {
        vdiag(c, DDPC_R_OUTPUT_SHAPE, n, lp, "the model's output is %s per sample; the loss needs one "
              "vector per sample ([classes] or [targets]): end with flatten and a linear layer",
              layers_shape_str(&last->out, sh, sizeof sh));
        return;
    }
    int64_t out = last->out_numel;
    targets_rule(c, tr, te, out, n, lp);
    if (tr->classes > 0 && out != tr->classes)
        vdiag(c, DDPC_R_CLASSES, n, lp, "%s gives %lld outputs, but data.train has %lld classes",
              layers_type_name(last->it.type), (long long)out, (long long)tr->classes);
    for (int w = 0; w < 2; w++) {
        const struct data_info *di = w ? te : tr;
        if (di->max_label >= out)
            vdiag(c, DDPC_R_CLASSES, n, lp, "%s gives %lld outputs, too few: the labels of %s go "
                  "up to %lld (%lld classes)", layers_type_name(last->it.type), (long long)out,
                  w ? "data.test" : "data.train", (long long)di->max_label,
                  (long long)di->max_label + 1);
    }
}

/* A gpt model: the preset's own rules, at the key that breaks them. The
 * lowering (layers_build) is the judge of what else can be built. */
static void gpt_rules(struct ddpc_vctx *c)
{
    struct ddpc_job *j = c->job;
    const struct ddpc_node *n;
    int before = c->d->n_errors;
    int C = j->model.n_embd, H = j->model.n_head;
    if (C % H != 0) {
        /* the divisor of n_embd nearest to n_head, the lower one on a tie */
        int near = 1;
        for (int h = 1; h <= C && h <= 2 * H; h++)
            if (C % h == 0 && abs(h - H) < abs(near - H))
                near = h;
        n = at(c, "model.n_head") ? at(c, "model.n_head") : at(c, "model.n_embd");
        vdiag(c, DDPC_R_GPT, n ? n : at(c, "model.type"),
              at(c, "model.n_head") ? "model.n_head" : "model.n_embd",
              "n_embd %d is not divisible by n_head %d: each head gets n_embd / n_head "
              "features (n_head %d would give %d)", C, H, near, C / near);
    }
    if (j->loss != DDPC_LOSS_CROSS_ENTROPY && (n = at(c, "loss")))
        vdiag(c, DDPC_R_LOSS, n, "loss", "a gpt model predicts the next token: its loss is "
              "cross_entropy");
    if (c->d->n_errors != before)
        return;
    static struct ddpc_net net;   /* large; validation is single-threaded */
    char why[512];
    int bad;
    if (layers_build(j, NULL, &net, &bad, why, sizeof why) < 0)
        vdiag(c, DDPC_R_GPT, at(c, "model.type"), "model.type", "%s", why);
}

/* Token streams and gpt models go together: a gpt learns from windows of
 * a token stream, and no other model reads one (its "samples" would be
 * windows of nothing it can use). */
static void token_format_rules(struct ddpc_vctx *c)
{
    struct ddpc_job *j = c->job;
    int gpt = j->model.type == DDPC_MODEL_GPT;
    for (int w = 0; w < 2; w++) {
        const struct ddpc_data_source *s = w ? &j->data.test : &j->data.train;
        const char *key = w ? "data.test.format" : "data.train.format";
        const struct ddpc_node *n = at(c, key);
        if (!n || (w && !j->data.has_test))
            continue;
        int tok = s->format == DDPC_DATA_TEXT || s->format == DDPC_DATA_TOKENS;
        if (gpt && !tok)
            vdiag(c, DDPC_R_DATA_FORMAT, n, key, "a gpt model trains on a token stream: format "
                  "text (a file's bytes) or tokens (llm.c shards), found %s",
                  ddpc_enum_spell(&ddpc_enum_data_format, s->format));
        else if (!gpt && tok)
            vdiag(c, DDPC_R_DATA_FORMAT, n, key, "format %s is a token stream for model.type gpt; "
                  "a %s model needs samples with labels (idx, npy, csv or synthetic)",
                  ddpc_enum_spell(&ddpc_enum_data_format, s->format),
                  ddpc_enum_spell(&ddpc_enum_model_type, j->model.type));
    }
}

/* An mlp or linear model: the first size against the features, the last
 * against the classes or labels. */
static void mlp_shapes(struct ddpc_vctx *c, const struct data_info *trp,
                       const struct data_info *tep)
{
    struct ddpc_job *j = c->job;
    const struct ddpc_node *n;
    struct data_info tr = *trp, te = *tep;
    int in = j->model.layers[0], out = j->model.layers[j->model.n_layers - 1];
    if (tr.features >= 0 && tr.features != in && (n = at(c, "model.layers")))
        vdiag(c, DDPC_R_INPUT_SHAPE, n->items[0], "model.layers[0]", "input size %d does not match "
              "the %lld features per sample of data.train", in, (long long)tr.features);
    if (te.features >= 0 && tr.features >= 0 && te.features != tr.features)
        vdiag(c, DDPC_R_TEST_FEATURES, at(c, "data.test"), "data.test", "%lld features per sample, "
              "but data.train has %lld", (long long)te.features, (long long)tr.features);
    if (tr.classes > 0 && out != tr.classes && (n = at(c, "model.layers"))) {
        char lp[48];
        snprintf(lp, sizeof lp, "model.layers[%d]", n->n - 1);
        vdiag(c, DDPC_R_CLASSES, n->items[n->n - 1], lp, "output size %d does not match the "
              "%lld classes of data.train", out, (long long)tr.classes);
    }
    if ((n = at(c, "model.layers"))) {
        char lp[48];
        snprintf(lp, sizeof lp, "model.layers[%d]", n->n - 1);
        targets_rule(c, &tr, &te, out, n->items[n->n - 1], lp);
    }
    /* every label needs an output: label 9 with 5 outputs would index past the logits */
    for (int w = 0; w < 2; w++) {
        const struct data_info *di = w ? &te : &tr;
        if (di->max_label >= out && (n = at(c, "model.layers"))) {
            char lp[48];
            snprintf(lp, sizeof lp, "model.layers[%d]", n->n - 1);
            vdiag(c, DDPC_R_CLASSES, n->items[n->n - 1], lp, "output size %d is too small: "
                  "the labels of %s go up to %lld (%lld classes)", out,
                  w ? "data.test" : "data.train", (long long)di->max_label,
                  (long long)di->max_label + 1);
        }
    }
}

/* A schedule whose warmup or first step decay lies at or past the run's
 * last optimizer step: the rate never reaches its peak (or never decays),
 * which the job does without a word. The run's steps are the plan's and
 * the job's: epoch_batches over the samples (a gpt's token windows), then
 * epoch_optimizer_steps, times epochs. */
static void schedule_reach(struct ddpc_vctx *c, int64_t samples, int world)
{
    const struct ddpc_job *j = c->job;
    int64_t nb = epoch_batches(samples, world, j->batch_size > 0 ? j->batch_size : 1,
                               j->data.drop_last, j->limit_train_batches,
                               j->limit_train_fraction, NULL, NULL);
    int64_t total = epoch_optimizer_steps(nb, j->grad_accumulation) *
                    (j->epochs > 0 ? j->epochs : 1);
    const struct ddpc_node *n;
    if (total < 1)
        return;
    if (j->schedule.warmup_steps >= total && (n = at(c, "schedule.warmup_steps")))
        vdiag(c, DDPC_R_SCHEDULE_PAST_RUN, n, "schedule.warmup_steps",
              "warmup of %lld steps, but the run has %lld optimizer step%s: the learning rate "
              "never reaches its peak%s; lower warmup_steps below %lld (`ddpc plan` shows the rate at each point)",
              (long long)j->schedule.warmup_steps, (long long)total, total == 1 ? "" : "s",
              j->schedule.decay != DDPC_DECAY_CONSTANT ? " and never decays" : "",
              (long long)total);
    else if (j->schedule.decay == DDPC_DECAY_STEP && j->schedule.step_size > 0 &&
             j->schedule.warmup_steps + j->schedule.step_size >= total &&
             (n = at(c, "schedule.step_size")))
        vdiag(c, DDPC_R_SCHEDULE_PAST_RUN, n, "schedule.step_size", "the first decay is at optimizer "
              "step %lld (warmup_steps + step_size + 1), but the run has %lld: the learning rate "
              "never decays; lower step_size (`ddpc plan` shows the rate at each point)",
              (long long)(j->schedule.warmup_steps + j->schedule.step_size + 1), (long long)total);
}

/* Two token sources with other paths (a pattern and one of its files,
 * two patterns that match a file in common): a file whose tokens both
 * ranges take, in what (e.g. "tokens data.train reads too (d/b.txt is one
 * of the files data.train.path matches, and both ranges take tokens of
 * it)"); what is left alone when none is, or a source cannot be listed
 * (its own check says why). */
static void tokens_shared_file(const struct ddpc_vctx *c, const struct ddpc_data_source *tr,
                               const struct ddpc_data_source *te, char *what, size_t cap)
{
    struct ddpc_token_files ft, fe;
    char why[64];
    if (tokens_list(tr->path, (size_t)tr->path_literal, tr->format, &ft, why, sizeof why) < 0)
        return;
    if (tokens_list(te->path, (size_t)te->path_literal, te->format, &fe, why, sizeof why) < 0) {
        tokens_list_free(&ft);
        return;
    }
    int64_t a1, b1, a2, b2;
    tokens_range(ft.total, tr->range_lo, tr->range_hi, &a1, &b1);
    tokens_range(fe.total, te->range_lo, te->range_hi, &a2, &b2);
    for (int i = 0; i < fe.n && !what[0]; i++) {
        int64_t lo2, hi2;
        struct stat se, st;
        if (!tokens_file_part(&fe.f[i], a2, b2, &lo2, &hi2) || stat(fe.f[i].path, &se) != 0)
            continue;
        for (int k = 0; k < ft.n && !what[0]; k++) {
            int64_t lo1, hi1;
            if (!tokens_file_part(&ft.f[k], a1, b1, &lo1, &hi1) ||
                stat(ft.f[k].path, &st) != 0 || st.st_dev != se.st_dev ||
                st.st_ino != se.st_ino)
                continue;
            /* the same file: the tokens of it each range takes, in the file */
            lo1 -= ft.f[k].first;
            hi1 -= ft.f[k].first;
            lo2 -= fe.f[i].first;
            hi2 -= fe.f[i].first;
            /* named as the path is written (from the current directory) */
            const char *fp = fe.f[i].path;
            size_t lit = (size_t)te->path_literal;
            int rel = lit > 0 && c->dir[0] && strncmp(fp, te->path, lit) == 0;
            if (lo1 < hi2 && lo2 < hi1)
                snprintf(what, cap, "tokens data.train reads too ('%s%s%s' is a file of both "
                         "data.train.path and data.test.path, and both ranges take tokens %lld "
                         "to %lld of it)", rel ? c->dir : "", rel ? "/" : "",
                         rel ? fp + lit : fp, (long long)(lo1 > lo2 ? lo1 : lo2),
                         (long long)(hi1 < hi2 ? hi1 : hi2) - 1);
            lo2 += fe.f[i].first;
            hi2 += fe.f[i].first;
        }
    }
    tokens_list_free(&ft);
    tokens_list_free(&fe);
}

/* data.test that reads the training data (the same file, the same
 * synthetic samples, or token ranges of one stream that overlap): its loss
 * and accuracy then measure the training set, and nothing says so. A
 * warning at data.test: the same file can be meant (a smoke test). */
static void test_reads_train(struct ddpc_vctx *c)
{
    const struct ddpc_data_source *tr = &c->job->data.train, *te = &c->job->data.test;
    if (!c->job->data.has_test || tr->format != te->format)
        return;
    char what[PATH_MAX + 256] = "";
    switch (tr->format) {
    case DDPC_DATA_CSV:
        if (tr->path && te->path && same_file(tr->path, te->path))
            snprintf(what, sizeof what, "the same file as data.train");
        break;
    case DDPC_DATA_IDX:
    case DDPC_DATA_NPY:
        if (tr->inputs && te->inputs && same_file(tr->inputs, te->inputs))
            snprintf(what, sizeof what, "the same inputs file as data.train");
        break;
    case DDPC_DATA_SYNTHETIC:
        if (tr->samples == te->samples && tr->features == te->features &&
            tr->classes == te->classes && tr->seed == te->seed)
            snprintf(what, sizeof what, "the samples of data.train (the same synthetic "
                     "samples, features, classes and seed)");
        break;
    case DDPC_DATA_TEXT:
    case DDPC_DATA_TOKENS: {
        double lo = tr->range_lo > te->range_lo ? tr->range_lo : te->range_lo;
        double hi = tr->range_hi < te->range_hi ? tr->range_hi : te->range_hi;
        if (!tr->path || !te->path)
            break;
        if (strcmp(tr->path, te->path) == 0 || same_file(tr->path, te->path)) {
            if (lo < hi)
                snprintf(what, sizeof what, "tokens data.train reads too (its range [%g, %g] "
                         "overlaps data.train's [%g, %g] of the same %s)", te->range_lo,
                         te->range_hi, tr->range_lo, tr->range_hi,
                         tr->format == DDPC_DATA_TEXT ? "file" : "shards");
        } else if (c->opt && c->opt->read_data_headers) {
            tokens_shared_file(c, tr, te, what, sizeof what);
        }
        break;
    }
    default:
        break;
    }
    if (what[0])
        vdiag(c, DDPC_R_TEST_IS_TRAIN, at(c, "data.test"), "data.test", "reads %s: its loss and "
              "accuracy measure the training data, not held-out data; give data.test data of "
              "its own%s", what, tr->format == DDPC_DATA_TEXT || tr->format == DDPC_DATA_TOKENS
                  ? " (ranges that do not overlap: train [0, 0.9], test [0.9, 1])" : "");
}

static void cross_rules(struct ddpc_vctx *c)
{
    outpath_kind(c, "checkpoint_dir", 1);
    outpath_kind(c, "logging.tensorboard", 1);
    outpath_kind(c, "checkpoint.export", 0);
    outpath_kind(c, "logging.metrics_csv", 0);
    outpath_clobbers(c, "logging.metrics_csv", "checkpoint.export");
    outpath_clobbers(c, "checkpoint.export", NULL);
    const char *files[2][2] = { { "logging.metrics_csv", c->job->logging.metrics_csv },
                                { "checkpoint.export", c->job->checkpoint.export_path } };
    for (int i = 0; i < 2; i++) {
        const char *dkey = job_output_dir_at(c->job, files[i][1]);
        if (dkey)
            vdiag(c, DDPC_R_OUTPUT_CLOBBER, at(c, files[i][0]), files[i][0], "'%s' is %s's directory "
                  "too: the job would write the one and refuse the other; give each its own "
                  "path", files[i][1], dkey);
    }

    struct ddpc_job *j = c->job;
    const struct ddpc_node *n;
    char num[32], num2[32];
    int nodes = j->launch.num_nodes > 0 ? j->launch.num_nodes : 1;
    int world = (int)ddpc_job_world_size(j, 0);
    int several = j->devices_all || world > 1;

    j->data.has_test = at(c, "data.test") != NULL && !load_is_null(at(c, "data.test"));
    test_reads_train(c);

    /* strategy: auto, as in Lightning: ddp with several devices, none with one */
    if ((n = at(c, "strategy")) && n->kind == DDPC_NODE_SCALAR && strcmp(n->str, "auto") == 0 &&
        !several)
        j->strategy = DDPC_STRATEGY_NONE;

    if (j->strategy == DDPC_STRATEGY_NONE && several && (n = at(c, "strategy"))) {
        char what[64];
        if (j->devices_all)
            snprintf(what, sizeof what, "devices is all");
        else
            snprintf(what, sizeof what, "%d devices are listed", world);
        vdiag(c, DDPC_R_STRATEGY, n, "strategy",
              "strategy none runs a single process, but %s; use strategy: ddp or one device", what);
    }

    if (several && !at(c, "lr_scaling")) {
        /* at the key that made it several devices, unless the rate is written */
        static const char *const where[3] = { "learning_rate", "devices", "launch.num_nodes" };
        const char *p = where[0];
        n = NULL;
        for (int i = 0; i < 3 && !n; i++)
            if ((n = at(c, where[i])))
                p = where[i];
        fmt_num(j->learning_rate, num, sizeof num);
        char acc[64] = "";
        if (j->grad_accumulation > 1)
            snprintf(acc, sizeof acc, " × grad_accumulation %d", j->grad_accumulation);
        char how[128] = "";
        if (acc[0])
            snprintf(how, sizeof how, " (%s × %d devices%s)", num, world, acc);
        if (j->devices_all) {
            vdiag(c, DDPC_R_LR_UNSCALED, n, p, "all devices and no lr_scaling: learning_rate stays "
                  "%s; lr_scaling: linear would multiply it by the device count%s", num, acc);
        } else {
            snprintf(num2, sizeof num2, "%g",
                     j->learning_rate * ddpc_job_lr_factor(j, DDPC_LR_SCALING_LINEAR, world));
            vdiag(c, DDPC_R_LR_UNSCALED, n, p, "%d devices and no lr_scaling: learning_rate stays %s; "
                  "lr_scaling: linear would use %s%s", world, num, num2, how);
        }
    }

    if (!several) {
        static const char *const keys[2] = { "nccl_timeout", "rank_sync_timeout" };
        double *fields[2] = { &j->nccl_timeout_s, &j->rank_sync_timeout_s };
        for (int i = 0; i < 2; i++)
            if ((n = at(c, keys[i])) && *fields[i] > 0) {
                vdiag(c, DDPC_R_SINGLE_DEVICE_TIMEOUT, n, keys[i],
                      "ignored on a single device (there is no collective to bound)");
                *fields[i] = 0;
            }
    }

    if (j->precision != DDPC_PRECISION_FP32 && j->accelerator == DDPC_ACCEL_CPU &&
        (n = at(c, "precision")))
        vdiag(c, DDPC_R_PRECISION, n, "precision", "%s needs a GPU, but accelerator is cpu; "
              "the CPU backend computes in fp32",
              ddpc_enum_spell(&ddpc_enum_precision, j->precision));

    /* several nodes: GPUs talk over NCCL, CPU workers over gloo, both
     * meeting at node 0's store; accelerator auto decides per node at
     * launch, so every node must find the same kind of device */
    if (nodes > 1 && (n = at(c, "launch.num_nodes"))) {
        if (j->launch.launcher == DDPC_LAUNCHER_LOCAL && !at(c, "launch.master_addr"))
            vdiag(c, DDPC_R_MULTINODE, n, "launch.num_nodes", "%d nodes with launcher local need "
                  "launch.master_addr, the address of node 0", nodes);
    }

    if (j->model.type == DDPC_MODEL_SEQUENTIAL && j->model.n_layers && (n = at(c, "model.layers")))
        vdiag(c, DDPC_R_MODEL_TYPE, n, "model.layers", "model type sequential takes a list of layers "
              "(`- linear: {out_features: 10}`), found layer sizes; sizes are for type mlp or linear");
    if (j->model.type != DDPC_MODEL_SEQUENTIAL && j->model.n_items && (n = at(c, "model.layers")))
        vdiag(c, DDPC_R_MODEL_TYPE, n, "model.layers", "a list of layers needs model.type: sequential "
              "(type here is %s)", j->model.type == DDPC_MODEL_LINEAR ? "linear" : "mlp");

    if (j->model.type == DDPC_MODEL_LINEAR && j->model.n_layers && j->model.n_layers != 2 &&
        (n = at(c, "model.layers")))
        vdiag(c, DDPC_R_MODEL_TYPE, n, "model.layers", "model type linear takes exactly 2 sizes "
              "[in, out], found %d", j->model.n_layers);

    if (j->model.type == DDPC_MODEL_GPT)
        gpt_rules(c);
    token_format_rules(c);

    if (j->optimizer.type == DDPC_OPTIM_SGD && j->optimizer.nesterov &&
        j->optimizer.momentum <= 0 && (n = at(c, "optimizer.nesterov")))
        vdiag(c, DDPC_R_NESTEROV, n, "optimizer.nesterov", "nesterov needs momentum > 0");

    if (!at(c, "checkpoint_dir")) {
        static const char *const keys[4] = { "checkpoint.every_n_epochs", "checkpoint.keep_last",
                                             "checkpoint.every_n_steps",
                                             "checkpoint.every_n_minutes" };
        for (int i = 0; i < 4; i++)
            if ((n = at(c, keys[i])) && !load_is_null(n))
                vdiag(c, DDPC_R_NO_CHECKPOINT_DIR, n, keys[i], "has no effect without checkpoint_dir");
    }

    if (j->checkpoint.resume == DDPC_RESUME_PATH && c->opt && c->opt->read_data_headers &&
        (n = at(c, "checkpoint.resume"))) {
        /* relative to the directory the job runs in, which need not be
         * where check runs (build here, run in the experiment's directory):
         * as for outputs, only an absolute path is sure to be missing */
        struct stat st;
        if (stat(j->checkpoint.resume_path, &st) < 0) {
            if (j->checkpoint.resume_path[0] == '/')
                vdiag(c, DDPC_R_RESUME, n, "checkpoint.resume", "cannot resume from '%s': %s",
                      j->checkpoint.resume_path, strerror(errno));
            else
                vdiag(c, DDPC_R_RESUME_HERE, n, "checkpoint.resume", "cannot resume from '%s' "
                      "here: %s; a job run from this directory would refuse it (the path is "
                      "relative to the directory the job runs in)", j->checkpoint.resume_path,
                      strerror(errno));
        } else if (!S_ISREG(st.st_mode)) {
            /* the job refuses it at its start: one file is resumed */
            vdiag(c, j->checkpoint.resume_path[0] == '/' ? DDPC_R_RESUME : DDPC_R_RESUME_HERE,
                  n, "checkpoint.resume", "'%s' %s%s: name one checkpoint file (a .ckpt in "
                  "checkpoint_dir)%s", j->checkpoint.resume_path,
                  S_ISDIR(st.st_mode) ? "is a directory" : "is not a regular file",
                  j->checkpoint.resume_path[0] == '/' ? "" : " here",
                  S_ISDIR(st.st_mode) ? ", or checkpoint.resume: auto for the newest in "
                  "checkpoint_dir" : "");
        }
    }

    /* a gpt's token sources (token_format_rules pairs formats and models):
     * their files, shard headers, windows and, for text, bytes vs vocab */
    for (int s = 0; s < 2 && j->model.type == DDPC_MODEL_GPT; s++) {
        const struct ddpc_data_source *src = s ? &j->data.test : &j->data.train;
        const char *sp = s ? "data.test" : "data.train";
        if (!at(c, sp) || (s && !j->data.has_test) ||
            (src->format != DDPC_DATA_TEXT && src->format != DDPC_DATA_TOKENS))
            continue;
        int64_t T = j->model.block_size;
        int64_t w = token_source_check(c, src, sp, j->model.vocab_size, T, s ? T : T + 1);
        int eff = world > 0 ? world : nodes;
        if (!s && w > 0 && (int64_t)j->batch_size * eff > w && (n = at(c, "batch_size")))
            vdiag(c, DDPC_R_BATCH_SIZE, n, "batch_size", "batch_size %d × %d device%s = %lld is "
                  "larger than the training set (%lld window%s of block_size + 1 = %lld "
                  "tokens)", j->batch_size, eff, eff == 1 ? "" : "s",
                  (long long)j->batch_size * eff, (long long)w, w == 1 ? "" : "s",
                  (long long)T + 1);
        else if (!s && w > 0 && world > 0)
            schedule_reach(c, w, world);   /* a gpt has no model.layers: the rule below skips it */
    }

    /* data vs model: only when the blocks themselves were valid */
    int seq = j->model.type == DDPC_MODEL_SEQUENTIAL;
    if (!at(c, "data.train") || (seq ? j->model.n_items < 1 : j->model.n_layers < 2))
        return;
    struct data_info tr, te;
    int before = c->d->n_errors;
    data_source_info(c, &j->data.train, "data.train", &tr);
    te.samples = te.features = te.classes = te.max_label = te.targets = -1;
    if (j->data.has_test)
        data_source_info(c, &j->data.test, "data.test", &te);
    if (c->d->n_errors != before)
        return;
    if (seq)
        sequential_shapes(c, &tr, &te);
    else
        mlp_shapes(c, &tr, &te);
    if (tr.classes == 0 && j->loss == DDPC_LOSS_CROSS_ENTROPY) {
        const struct ddpc_node *ln = at(c, "loss");
        vdiag(c, DDPC_R_LOSS, ln ? ln : at(c, "data.train.classes"),
              ln ? "loss" : "data.train.classes", "cross_entropy needs class labels, but "
              "data.train is regression data (classes: 0); use loss: mse");
    }
    /* devices: -1 resolves at run time; at least one device per node is sure */
    int eff_world = world > 0 ? world : nodes;
    if (tr.samples >= 0 && (int64_t)j->batch_size * eff_world > tr.samples &&
        (n = at(c, "batch_size")))
        vdiag(c, DDPC_R_BATCH_SIZE, n, "batch_size", "batch_size %d × %d device%s = %lld is larger "
              "than the training set (%lld samples)", j->batch_size, eff_world,
              eff_world == 1 ? "" : "s", (long long)j->batch_size * eff_world,
              (long long)tr.samples);
    else if (tr.samples >= 0 && j->devices_all && j->accelerator == DDPC_ACCEL_CPU &&
             (n = at(c, "batch_size"))) {
        /* accelerator cpu: -1 means the CPUs the job's process may use where
         * it runs, which check can only guess from where it runs itself: a
         * warning (the job refuses it at start where it is true) */
        cpu_set_t set;
        int ncpu = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
        long long g = (long long)j->batch_size * ncpu * nodes;
        if (ncpu > 0 && g > tr.samples)
            vdiag(c, DDPC_R_BATCH_SIZE_CPUS, n, "batch_size", "devices: -1 is one CPU worker per CPU "
                  "the job may use; on this machine that is %d: batch_size %d × %d = %lld is "
                  "larger than the training set (%lld samples), and the job refuses that at "
                  "start", ncpu * nodes, j->batch_size, ncpu * nodes, g, (long long)tr.samples);
    }
    else if (tr.samples >= 0 && world > 0)
        schedule_reach(c, tr.samples, world);
}

/* ---- model.init_from: the file the run starts from ---- */

/* st_check_net's report: each finding at the key's line. */
static void init_from_report(void *ctx, const char *why)
{
    struct ddpc_vctx *c = ctx;
    vdiag(c, DDPC_R_INIT_FROM, at(c, "model.init_from"), "model.init_from", "%s", why);
}

/* What the run refuses of model.init_from, refused at check: a missing
 * file, another model's tensors, wrong shapes, a non-finite value
 * (spec/safetensors.c st_check_net, on the walk the run's reader takes).
 * Only when the model can be built (else there is no tensor list to
 * compare with; its own check says why), and not under --no-data (the
 * file is data). */
static void init_from_rules(struct ddpc_vctx *c)
{
    struct ddpc_job *j = c->job;
    const struct ddpc_node *n = at(c, "model.init_from");
    if (!n || !j->model.init_from || !j->model.init_from[0] || !c->opt ||
        !c->opt->read_data_headers)
        return;
    if (j->model.type == DDPC_MODEL_SEQUENTIAL && !j->model.n_input)
        return;   /* no input shape (the data's is baked in when it was read) */
    static struct ddpc_net net;   /* large; validation is single-threaded */
    char why[512];
    int bad = -1;
    if (layers_build(j, NULL, &net, &bad, why, sizeof why) < 0)
        return;   /* the model's own check says why */
    /* named as the spec writes it (a --set value: as resolved) */
    char shown[PATH_MAX + 64];
    st_check_net(j->model.init_from,
                 n->origin ? j->model.init_from : shown_path(c, n, shown, sizeof shown), &net,
                 init_from_report, c);
}

/* ===================== entry ===================== */

static int ends_with(const char *s, const char *suffix)
{
    size_t l = strlen(s), sl = strlen(suffix);
    return l >= sl && strcmp(s + l - sl, suffix) == 0;
}

/* The default job name: the spec file's base name without .yaml/.yml,
 * reduced to the name alphabet ("stdin" for a spec read from it). */
static const char *default_name(struct ddpc_vctx *c)
{
    if (strcmp(c->file, DDPC_SPEC_STDIN) == 0 || (c->opt && c->opt->paths_from_cwd))
        return "stdin";
    const char *base = strrchr(c->file, '/');
    base = base ? base + 1 : c->file;
    size_t l = strlen(base);
    if (ends_with(base, ".yaml"))
        l -= 5;
    else if (ends_with(base, ".yml"))
        l -= 4;
    if (l > 64)
        l = 64;
    char *name = arena_strndup(c->a, base, l);
    if (!name)
        return "job";
    for (size_t i = 0; i < l; i++)
        if (!name_ok(name + i, 1) && name[i] != '.')
            name[i] = '_';
    /* a name given in the spec may not start with '-' (DDPC_T_NAME): nor
     * may one taken from a file called -x.yaml */
    if (l && name[0] == '-')
        name[0] = '_';
    return l && name_ok(name, l) ? name : "job";
}

/* An unquoted number written with a leading zero ("017", "-007", "0_17")
 * means different things to different YAML readers: octal to YAML 1.1
 * (PyYAML, and the tools on libyaml that resolve as it does: 15), decimal
 * to YAML 1.2 (17), and with an 8 or 9 in it text to YAML 1.1. ddpc read
 * 17, so a spec that a Python tool also reads trained on another value
 * without a word. Every such scalar, whatever its key (an integer, a
 * number, a layer's argument, a name), is an error at its position that
 * says what to write. Keys are not values and are not looked at. */
static void leading_zeros(struct ddpc_vctx *c, const struct ddpc_node *n, const char *path,
                          int depth)
{
    if (!n || depth > DDPC_LOAD_MAX_DEPTH)
        return;
    char sub[280];
    if (n->kind == DDPC_NODE_MAP) {
        for (int i = 0; i < n->n; i++) {
            const struct ddpc_node *k = n->items[2 * i];
            join_path(sub, sizeof sub, path, k && k->kind == DDPC_NODE_SCALAR ? k->str : "?");
            leading_zeros(c, n->items[2 * i + 1], sub, depth + 1);
        }
        return;
    }
    if (n->kind == DDPC_NODE_SEQ) {
        for (int i = 0; i < n->n; i++) {
            snprintf(sub, sizeof sub, "%s[%d]", path, i);
            leading_zeros(c, n->items[i], sub, depth + 1);
        }
        return;
    }
    if (n->quoted || strlen(n->str) != n->len)
        return;
    const char *p = n->str;
    int neg = *p == '-';
    if (*p == '+' || *p == '-')
        p++;
    if (p[0] != '0' || !p[1] || strspn(p, "0123456789_") != strlen(p) ||
        strspn(p + 1, "_") == strlen(p + 1))
        return;
    char digits[64];
    size_t o = 0;
    for (const char *q = p; *q && o + 1 < sizeof digits; q++)
        if (*q != '_')
            digits[o++] = *q;
    digits[o] = '\0';
    const char *d = digits + strspn(digits, "0");
    if (!*d)
        d = "0";
    char found[96], v11[48] = "text", v12[48] = "";
    const char *sign = neg ? "-" : "";
    int octal = strspn(digits, "01234567") == o;
    unsigned long long oct = octal ? strtoull(digits, NULL, 8) : 0;
    if (octal)
        snprintf(v11, sizeof v11, "octal %s%llu", sign, oct);
    if (!strchr(n->str, '_'))   /* YAML 1.2 has no digit separators: text to it */
        snprintf(v12, sizeof v12, ", YAML 1.2 readers for %s%s", sign, d);
    if (octal && oct == strtoull(d, NULL, 10))
        vdiag(c, DDPC_R_OCTAL, n, path, "%s has a leading zero, which YAML 1.1 readers "
              "(PyYAML) read as octal; write %s%s (quote it, \"%s\", for text)",
              describe(n, found, sizeof found), sign, d, n->str);
    else {
        char as_oct[96] = "";
        if (octal)
            snprintf(as_oct, sizeof as_oct, ", or %s0o%s for octal %llu", sign,
                     digits + strspn(digits, "0"), oct);
        vdiag(c, DDPC_R_OCTAL, n, path, "%s has a leading zero: YAML 1.1 readers (PyYAML) "
              "take it for %s%s; write %s%s%s (quote it, \"%s\", for text)",
              describe(n, found, sizeof found), v11, v12, sign, d, as_oct, n->str);
    }
}

int validate_job(const char *file, const struct ddpc_node *root, const struct spec_options *opt,
                 struct ddpc_arena *a, struct ddpc_job *job, struct ddpc_diag *d)
{
    struct ddpc_vctx c;
    char found[96];
    int before = d->n_errors;

    memset(job, 0, sizeof *job);
    memset(&c, 0, sizeof c);
    c.file = file;
    c.opt = opt;
    c.a = a;
    c.d = d;
    c.job = job;
    c.root = root;
    const char *slash = opt && opt->paths_from_cwd ? NULL : strrchr(file, '/');
    c.dir = slash ? arena_strndup(a, file, slash == file ? 1 : (size_t)(slash - file)) : "";
    if (!c.dir)
        c.dir = "";

    if (root && root->kind != DDPC_NODE_MAP) {
        vdiag(&c, DDPC_R_TYPE, root, "", "a spec is a mapping of keys, found %s",
              describe(root, found, sizeof found));
        walk_block(&c, DDPC_B_ROOT, NULL, (char *)job, "");
    } else if (!root) {
        diag_rule(d, DDPC_R_TYPE, file, 1, 1, "", "the spec is empty");
        walk_block(&c, DDPC_B_ROOT, NULL, (char *)job, "");
    } else {
        leading_zeros(&c, root, "", 0);
        walk_block(&c, DDPC_B_ROOT, root, (char *)job, "");
        defaults_when_late(&c);
        cross_rules(&c);
        init_from_rules(&c);
    }
    if (!job->name)
        job->name = default_name(&c);
    return d->n_errors == before ? 0 : -1;
}
