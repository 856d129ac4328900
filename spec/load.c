/* load.c - libyaml events -> ddpc's positioned tree; the arena it lives in.
 *
 * The ONLY file that includes <yaml.h>. Owns: parse errors with positions,
 * one-document rule, duplicate keys, scalar-only keys, tags, alias expansion
 * bounds, nesting depth. Never interprets values (validate.c does).
 * See load.h for the rules and limits.
 */
#include "load.h"
#include "units.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

/* ===================== arena ===================== */

struct ddpc_arena_chunk {
    struct ddpc_arena_chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

#define ARENA_CHUNK (16u << 10)

void *arena_alloc(struct ddpc_arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    struct ddpc_arena_chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > ARENA_CHUNK ? n : ARENA_CHUNK;
        c = malloc(sizeof *c + cap);
        if (!c)
            return NULL;
        c->cap = cap;
        c->used = 0;
        /* a chunk made for one large object goes behind the current one so
         * the current chunk's free space is not wasted */
        if (a->head && cap > ARENA_CHUNK) {
            c->next = a->head->next;
            a->head->next = c;
        } else {
            c->next = a->head;
            a->head = c;
        }
    }
    void *p = c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

char *arena_strndup(struct ddpc_arena *a, const char *s, size_t n)
{
    char *p = arena_alloc(a, n + 1);
    if (!p)
        return NULL;
    if (n)
        memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

char *arena_printf(struct ddpc_arena *a, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return NULL;
    char *p = arena_alloc(a, (size_t)n + 1);
    if (!p)
        return NULL;
    va_start(ap, fmt);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return p;
}

void arena_free(struct ddpc_arena *a)
{
    struct ddpc_arena_chunk *c = a->head;
    while (c) {
        struct ddpc_arena_chunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
}

/* ===================== tree helpers ===================== */

int load_is_null(const struct ddpc_node *n)
{
    if (!n || n->kind != DDPC_NODE_SCALAR || n->quoted)
        return 0;
    return n->len == 0 || strcmp(n->str, "~") == 0 || strcmp(n->str, "null") == 0 ||
           strcmp(n->str, "Null") == 0 || strcmp(n->str, "NULL") == 0;
}

const struct ddpc_node *load_map_get(const struct ddpc_node *map, const char *key)
{
    if (!map || map->kind != DDPC_NODE_MAP)
        return NULL;
    size_t kl = strlen(key);
    for (int i = 0; i < map->n; i++) {
        const struct ddpc_node *k = map->items[2 * i];
        if (k->kind == DDPC_NODE_SCALAR && k->len == kl && memcmp(k->str, key, kl) == 0)
            return map->items[2 * i + 1];
    }
    return NULL;
}

const struct ddpc_node *load_lookup(const struct ddpc_node *root, const char *dotted)
{
    char part[128];
    const struct ddpc_node *n = root;
    while (n && *dotted) {
        size_t l = strcspn(dotted, ".");
        if (l >= sizeof part)
            return NULL;
        memcpy(part, dotted, l);
        part[l] = '\0';
        n = load_map_get(n, part);
        dotted += l;
        if (*dotted == '.')
            dotted++;
    }
    return n;
}

/* ===================== composer ===================== */

struct frame {
    struct ddpc_node *node;
    struct ddpc_node **items;   /* malloc'd while open; copied to the arena on close */
    int n, cap;
    size_t size;                /* nodes in this subtree, aliases expanded */
    char *anchor;               /* malloc'd; registered when the node closes */
};

struct anchor {
    char *name;                 /* malloc'd */
    struct ddpc_node *node;
    size_t size;
};

struct composer {
    const char *file;
    const char *buf;
    size_t len;
    struct ddpc_arena *a;
    struct ddpc_diag *d;
    struct frame stack[DDPC_LOAD_MAX_DEPTH + 1];
    int depth;
    struct anchor anchors[DDPC_LOAD_MAX_ANCHORS];
    int n_anchors;
    size_t total;               /* nodes so far, aliases expanded */
    int expanded;               /* an alias was expanded */
    struct ddpc_node *root;
    int n_docs;
    int failed;                 /* errors that do not stop the parse (duplicate keys) */
};

/* The dotted path of the node about to be added to the innermost open
 * collection (for messages only). */
static void composer_path(const struct composer *c, int upto, char *out, size_t cap)
{
    size_t o = 0;
    out[0] = '\0';
    for (int i = 0; i < upto && o < cap; i++) {
        const struct frame *f = &c->stack[i];
        int w = 0;
        if (f->node->kind == DDPC_NODE_SEQ) {
            w = snprintf(out + o, cap - o, "[%d]", f->n);
        } else if (f->n % 2 == 1 || i + 1 < upto) {
            /* in a map the pending key is the last item when n is odd */
            const struct ddpc_node *k = f->n >= 1 ? f->items[(f->n - 1) & ~1] : NULL;
            if (k && k->kind == DDPC_NODE_SCALAR)
                w = snprintf(out + o, cap - o, "%s%s", o ? "." : "", k->str);
        }
        if (w < 0)
            return;
        o += (size_t)w;
    }
    if (o >= cap)
        out[cap - 1] = '\0';
}

static void mark_pos(const struct composer *c, yaml_mark_t m, int *line, int *col)
{
    (void)c;
    *line = (int)m.line + 1;
    *col = (int)m.column + 1;
}

/* 1-based line:col of a byte offset (libyaml reader errors carry only the offset). */
static void offset_pos(const struct composer *c, size_t off, int *line, int *col)
{
    int l = 1;
    size_t start = 0;
    if (off > c->len)
        off = c->len;
    for (size_t i = 0; i < off; i++)
        if (c->buf[i] == '\n') {
            l++;
            start = i + 1;
        }
    *line = l;
    *col = (int)(off - start) + 1;
}

static void report_parser_error(struct composer *c, const yaml_parser_t *p)
{
    int line = 1, col = 1;
    const char *problem = p->problem ? p->problem : "cannot parse the document";
    switch (p->error) {
    case YAML_MEMORY_ERROR:
        diag_rule(c->d, DDPC_R_OOM, c->file, 0, 0, "", "out of memory while parsing");
        return;
    case YAML_READER_ERROR:
        offset_pos(c, p->problem_offset, &line, &col);
        if (p->problem_value != -1)
            diag_rule(c->d, DDPC_R_YAML, c->file, line, col, "", "%s (#x%02X)", problem,
                      (unsigned)p->problem_value);
        else
            diag_rule(c->d, DDPC_R_YAML, c->file, line, col, "", "%s", problem);
        return;
    default:
        mark_pos(c, p->problem_mark, &line, &col);
        if (p->context) {
            int cl, cc;
            mark_pos(c, p->context_mark, &cl, &cc);
            diag_rule(c->d, DDPC_R_YAML, c->file, line, col, "", "%s (%s at %d:%d)", problem,
                      p->context, cl, cc);
        } else {
            diag_rule(c->d, DDPC_R_YAML, c->file, line, col, "", "%s", problem);
        }
        return;
    }
}

static int composer_error(struct composer *c, yaml_mark_t m, const char *fmt, const char *arg)
{
    int line, col;
    char path[256];
    mark_pos(c, m, &line, &col);
    /* a path 64 levels deep says less than its position does */
    if (c->depth < 8)
        composer_path(c, c->depth, path, sizeof path);
    else
        path[0] = '\0';
    diag_rule(c->d, DDPC_R_YAML, c->file, line, col, path, fmt, arg);
    return -1;
}

/* Counts n more nodes against the expansion bound. */
static int composer_count(struct composer *c, size_t n, yaml_mark_t m)
{
    c->total += n;
    if (c->total > DDPC_LOAD_MAX_NODES) {
        char lim[32];
        snprintf(lim, sizeof lim, "%d", DDPC_LOAD_MAX_NODES);
        return c->expanded
               ? composer_error(c, m, "document expands to more than %s nodes "
                                "(alias expansion bomb?); refusing to load it", lim)
               : composer_error(c, m, "document has more than %s nodes (a spec has a few "
                                "hundred: is this the right file?); refusing to load it", lim);
    }
    return 0;
}

/* Adds a finished node (size = its expanded node count) to the innermost
 * open collection, or makes it the root. */
static int composer_attach(struct composer *c, struct ddpc_node *n, size_t size)
{
    if (c->depth == 0) {
        c->root = n;
        return 0;
    }
    struct frame *f = &c->stack[c->depth - 1];
    if (f->n == f->cap) {
        int cap = f->cap ? f->cap * 2 : 8;
        struct ddpc_node **v = realloc(f->items, (size_t)cap * sizeof *v);
        if (!v) {
            diag_rule(c->d, DDPC_R_OOM, c->file, 0, 0, "", "out of memory while loading");
            return -1;
        }
        f->items = v;
        f->cap = cap;
    }
    if (f->node->kind == DDPC_NODE_MAP && f->n % 2 == 0 && n->kind != DDPC_NODE_SCALAR) {
        char path[256];
        composer_path(c, c->depth, path, sizeof path);
        diag_rule(c->d, DDPC_R_YAML, c->file, n->line, n->col, path,
                  "mapping keys must be plain scalars, found a %s",
                  n->kind == DDPC_NODE_MAP ? "mapping" : "sequence");
        c->failed = 1;
    }
    f->items[f->n++] = n;
    f->size += size;
    return 0;
}

static int composer_register(struct composer *c, const char *anchor, struct ddpc_node *n,
                             size_t size, yaml_mark_t m)
{
    if (!anchor)
        return 0;
    if (c->n_anchors == DDPC_LOAD_MAX_ANCHORS) {
        char lim[32];
        snprintf(lim, sizeof lim, "%d", DDPC_LOAD_MAX_ANCHORS);
        return composer_error(c, m, "more than %s anchors", lim);
    }
    char *name = strdup(anchor);
    if (!name)
        return composer_error(c, m, "%s", "out of memory while loading");
    c->anchors[c->n_anchors].name = name;
    c->anchors[c->n_anchors].node = n;
    c->anchors[c->n_anchors].size = size;
    c->n_anchors++;
    return 0;
}

/* Tags: core tags are fine, and mean what they mean to other YAML readers;
 * anything else is refused, because a spec is plain data and a tag is how
 * YAML loaders elsewhere are talked into constructing objects. */
enum tag_kind { TAG_NONE, TAG_BANG, TAG_STR, TAG_INT, TAG_FLOAT, TAG_BOOL, TAG_NULL, TAG_MAP, TAG_SEQ };

static int composer_tag(struct composer *c, const yaml_char_t *tag, yaml_mark_t m,
                        enum tag_kind *kind)
{
    *kind = TAG_NONE;
    if (!tag)
        return 0;
    const char *t = (const char *)tag;
    if (strcmp(t, "!") == 0 || strcmp(t, YAML_STR_TAG) == 0) {
        *kind = t[1] ? TAG_STR : TAG_BANG;   /* "!": a string scalar, or a plain collection */
        return 0;
    }
    if (strncmp(t, "tag:yaml.org,2002:", 18) == 0) {
        static const struct { const char *name; enum tag_kind kind; } core[] = {
            { "int", TAG_INT }, { "float", TAG_FLOAT }, { "bool", TAG_BOOL },
            { "null", TAG_NULL }, { "map", TAG_MAP }, { "seq", TAG_SEQ },
        };
        for (size_t i = 0; i < sizeof core / sizeof core[0]; i++)
            if (strcmp(t + 18, core[i].name) == 0) {
                *kind = core[i].kind;
                return 0;
            }
    }
    c->failed = 1;
    char shown[256];
    /* show the tag as written: !!x rather than tag:yaml.org,2002:x */
    if (strncmp(t, "tag:yaml.org,2002:", 18) == 0)
        snprintf(shown, sizeof shown, "!!%s", t + 18);
    else
        snprintf(shown, sizeof shown, "%s", t);
    composer_error(c, m, "unsupported tag '%s'; a spec holds plain values only", shown);
    return 0;
}

static const char *const tag_names[] = { "", "!", "!!str", "!!int", "!!float", "!!bool", "!!null",
                                         "!!map", "!!seq" };

/* A collection's tag: none, or its own kind's. */
static void composer_collection_tag(struct composer *c, enum ddpc_node_kind node_kind,
                                    enum tag_kind kind, yaml_mark_t m)
{
    if (kind == TAG_NONE || kind == TAG_BANG ||
        (node_kind == DDPC_NODE_MAP && kind == TAG_MAP) ||
        (node_kind == DDPC_NODE_SEQ && kind == TAG_SEQ))
        return;
    c->failed = 1;
    char msg[128];
    snprintf(msg, sizeof msg, "tag '%s' on a %s: YAML readers refuse it; remove the tag",
             tag_names[kind], node_kind == DDPC_NODE_MAP ? "mapping" : "sequence");
    composer_error(c, m, "%s", msg);
}

/* A scalar's core tag decides its type, as it does for PyYAML and every
 * other YAML reader: `!!float 1` is 1.0 (limit_train_batches: the whole
 * epoch, not one batch), `!!int "3"` is 3, `!!null 5` is null. ddpc reads a
 * scalar by its text, so the text is made to say what the tag says (an
 * integer text under !!float gets ".0"), and a text the tag cannot read
 * (`!!int 1.5`, `!!bool 1`, `!!null 5`) is an error rather than a value
 * another reader would not see. Returns the node's text to keep, or NULL
 * after an error. */
static const char *composer_scalar_tag(struct composer *c, struct ddpc_node *n,
                                       enum tag_kind kind, yaml_mark_t m)
{
    const char *s = n->str, *why = NULL;
    int64_t iv;
    double dv;
    int bv;
    switch (kind) {
    case TAG_NONE:
        return s;
    case TAG_BANG:
    case TAG_STR:
        n->quoted = 1;
        return s;
    case TAG_INT:
        /* PyYAML's int: no fraction, no exponent (0x1E is hex) */
        if (strlen(s) != n->len || units_int64(s, &iv) != 0 ||
            (!strpbrk(s, "xX") && strpbrk(s, ".eE")))
            why = "an integer";
        break;
    case TAG_FLOAT:
        if (strlen(s) != n->len || units_double(s, &dv) != 0)
            why = "a number";
        break;
    case TAG_BOOL:
        if (strlen(s) != n->len || units_bool(s, &bv) != 0)
            why = "true or false";
        break;
    case TAG_NULL:
        n->quoted = 0;
        if (!load_is_null(n))
            why = "null (~, null or nothing)";
        break;
    case TAG_MAP:
    case TAG_SEQ:
        why = kind == TAG_MAP ? "a mapping" : "a sequence";
        break;
    }
    if (why) {
        c->failed = 1;
        char msg[160];
        snprintf(msg, sizeof msg, "tag '%s' needs %s, found '%.40s'; remove the tag or the "
                 "value that contradicts it", tag_names[kind], why, s);
        composer_error(c, m, "%s", msg);
        return NULL;
    }
    n->quoted = 0;
    if (kind == TAG_FLOAT && !strpbrk(s, ".eE")) {
        /* "1" under !!float is 1.0: say so in the text ddpc reads */
        char *f = arena_alloc(c->a, n->len + 3);
        if (!f) {
            composer_error(c, m, "%s", "out of memory while loading");
            return NULL;
        }
        memcpy(f, s, n->len);
        memcpy(f + n->len, ".0", 3);
        n->len += 2;
        return f;
    }
    return s;
}

static int key_cmp(const void *pa, const void *pb)
{
    const struct ddpc_node *const *a = pa, *const *b = pb;
    size_t la = (*a)->len, lb = (*b)->len;
    int r = memcmp((*a)->str, (*b)->str, la < lb ? la : lb);
    if (r)
        return r;
    if (la != lb)
        return la < lb ? -1 : 1;
    /* equal keys keep source order, so the first one is the original */
    if ((*a)->line != (*b)->line)
        return (*a)->line < (*b)->line ? -1 : 1;
    return (*a)->col < (*b)->col ? -1 : (*a)->col > (*b)->col;
}

static int same_key(const struct ddpc_node *a, const struct ddpc_node *b)
{
    return a->kind == DDPC_NODE_SCALAR && b->kind == DDPC_NODE_SCALAR && a->len == b->len &&
           memcmp(a->str, b->str, a->len) == 0;
}

static void composer_dup_report(struct composer *c, const struct ddpc_node *first,
                                const struct ddpc_node *dup)
{
    char path[256];
    composer_path(c, c->depth - 1, path, sizeof path);
    char full[512];
    snprintf(full, sizeof full, "%s%s%s", path, path[0] ? "." : "", dup->str);
    diag_rule(c->d, DDPC_R_DUPLICATE_KEY, c->file, dup->line, dup->col, full,
              "duplicate key '%s' (first given at %d:%d)", dup->str, first->line, first->col);
    c->failed = 1;
}

/* Duplicate keys of the map being closed (frame f). Quadratic for the small
 * maps a spec has; sorted for large ones so a hostile file stays fast. */
static int composer_dups(struct composer *c, struct frame *f)
{
    int nk = f->n / 2;
    if (nk <= 16) {
        for (int i = 1; i < nk; i++)
            for (int j = 0; j < i; j++)
                if (same_key(f->items[2 * i], f->items[2 * j])) {
                    composer_dup_report(c, f->items[2 * j], f->items[2 * i]);
                    break;
                }
        return 0;
    }
    struct ddpc_node **keys = malloc((size_t)nk * sizeof *keys);
    if (!keys) {
        diag_rule(c->d, DDPC_R_OOM, c->file, 0, 0, "", "out of memory while loading");
        return -1;
    }
    int nscalar = 0;
    for (int i = 0; i < nk; i++)
        if (f->items[2 * i]->kind == DDPC_NODE_SCALAR)
            keys[nscalar++] = f->items[2 * i];
    qsort(keys, (size_t)nscalar, sizeof *keys, key_cmp);
    int reported = 0;
    for (int i = 1; i < nscalar && reported < 20; i++) {
        int g = i - 1;
        while (g > 0 && same_key(keys[g - 1], keys[i]))
            g--;
        if (same_key(keys[g], keys[i])) {
            composer_dup_report(c, keys[g], keys[i]);
            reported++;
        }
    }
    free(keys);
    return 0;
}

static int composer_open(struct composer *c, enum ddpc_node_kind kind, const yaml_event_t *e,
                         const yaml_char_t *anchor, const yaml_char_t *tag)
{
    if (c->depth == DDPC_LOAD_MAX_DEPTH) {
        char lim[16];
        snprintf(lim, sizeof lim, "%d", DDPC_LOAD_MAX_DEPTH);
        return composer_error(c, e->start_mark, "nesting deeper than %s levels", lim);
    }
    enum tag_kind tk;
    if (composer_tag(c, tag, e->start_mark, &tk) < 0 || composer_count(c, 1, e->start_mark) < 0)
        return -1;
    composer_collection_tag(c, kind, tk, e->start_mark);
    struct ddpc_node *n = arena_alloc(c->a, sizeof *n);
    if (!n)
        return composer_error(c, e->start_mark, "%s", "out of memory while loading");
    n->kind = kind;
    mark_pos(c, e->start_mark, &n->line, &n->col);
    struct frame *f = &c->stack[c->depth++];
    memset(f, 0, sizeof *f);
    f->node = n;
    f->size = 1;
    if (anchor && !(f->anchor = strdup((const char *)anchor)))
        return composer_error(c, e->start_mark, "%s", "out of memory while loading");
    return 0;
}

static int is_merge_key(const struct ddpc_node *k)
{
    return k->kind == DDPC_NODE_SCALAR && !k->quoted && strcmp(k->str, "<<") == 0;
}

static int has_key(struct ddpc_node **items, int n, const struct ddpc_node *k)
{
    for (int i = 0; i < n; i += 2)
        if (same_key(items[i], k))
            return 1;
    return 0;
}

/* YAML 1.1 merge keys: `<<: *defaults` (or a list of aliases) adds the
 * pairs of those mappings that the map does not set itself; earlier
 * sources win over later ones. Rewrites f->items in place. */
static int composer_merge(struct composer *c, struct frame *f, const yaml_event_t *e)
{
    int any = 0;
    for (int i = 0; i < f->n; i += 2)
        any |= is_merge_key(f->items[i]);
    if (!any)
        return 0;
    int cap = f->n, n = 0;
    struct ddpc_node **out = NULL;
    /* count what may be added, bounded so a merge cannot go quadratic */
    for (int i = 0; i < f->n; i += 2) {
        const struct ddpc_node *v = f->items[i + 1];
        if (!is_merge_key(f->items[i]))
            continue;
        if (v->kind == DDPC_NODE_MAP)
            cap += 2 * v->n;
        else if (v->kind == DDPC_NODE_SEQ)
            for (int j = 0; j < v->n; j++)
                cap += v->items[j]->kind == DDPC_NODE_MAP ? 2 * v->items[j]->n : 0;
    }
    if (cap > 2 * 4096) {
        composer_error(c, e->start_mark, "%s", "merge key '<<' brings more than 4096 keys");
        return -1;
    }
    out = malloc((size_t)cap * sizeof *out);
    if (!out) {
        composer_error(c, e->start_mark, "%s", "out of memory while loading");
        return -1;
    }
    for (int i = 0; i < f->n; i += 2)
        if (!is_merge_key(f->items[i])) {
            out[n++] = f->items[i];
            out[n++] = f->items[i + 1];
        }
    for (int i = 0; i < f->n; i += 2) {
        const struct ddpc_node *k = f->items[i], *v = f->items[i + 1];
        if (!is_merge_key(k))
            continue;
        int nsrc = v->kind == DDPC_NODE_SEQ ? v->n : 1;
        for (int s = 0; s < nsrc; s++) {
            const struct ddpc_node *src = v->kind == DDPC_NODE_SEQ ? v->items[s] : v;
            if (src->kind != DDPC_NODE_MAP) {
                char path[256], full[300];
                composer_path(c, c->depth - 1, path, sizeof path);
                snprintf(full, sizeof full, "%s%s<<", path, path[0] ? "." : "");
                diag_rule(c->d, DDPC_R_YAML, c->file, src->line, src->col, full,
                          "a merge key takes a mapping or a list of mappings");
                c->failed = 1;
                continue;
            }
            for (int j = 0; j < src->n; j++)
                if (!has_key(out, n, src->items[2 * j])) {
                    out[n++] = src->items[2 * j];
                    out[n++] = src->items[2 * j + 1];
                }
        }
    }
    free(f->items);
    f->items = out;
    f->n = n;
    f->cap = cap;
    return 0;
}

static int composer_close(struct composer *c, const yaml_event_t *e)
{
    struct frame *f = &c->stack[c->depth - 1];
    struct ddpc_node *n = f->node;
    if (n->kind == DDPC_NODE_MAP && (composer_dups(c, f) < 0 || composer_merge(c, f, e) < 0))
        return -1;
    n->n = n->kind == DDPC_NODE_MAP ? f->n / 2 : f->n;
    if (f->n) {
        n->items = arena_alloc(c->a, (size_t)f->n * sizeof *n->items);
        if (!n->items)
            return composer_error(c, e->start_mark, "%s", "out of memory while loading");
        memcpy(n->items, f->items, (size_t)f->n * sizeof *n->items);
    }
    free(f->items);
    f->items = NULL;
    size_t size = f->size;
    char *anchor = f->anchor;
    f->anchor = NULL;
    c->depth--;
    int rc = composer_register(c, anchor, n, size, e->start_mark);
    free(anchor);
    if (rc < 0)
        return -1;
    return composer_attach(c, n, size);
}

static int composer_scalar(struct composer *c, const yaml_event_t *e)
{
    enum tag_kind tk;
    if (composer_tag(c, e->data.scalar.tag, e->start_mark, &tk) < 0 ||
        composer_count(c, 1, e->start_mark) < 0)
        return -1;
    struct ddpc_node *n = arena_alloc(c->a, sizeof *n);
    if (!n)
        return composer_error(c, e->start_mark, "%s", "out of memory while loading");
    n->kind = DDPC_NODE_SCALAR;
    mark_pos(c, e->start_mark, &n->line, &n->col);
    n->len = e->data.scalar.length;
    n->str = arena_strndup(c->a, (const char *)e->data.scalar.value, n->len);
    if (!n->str)
        return composer_error(c, e->start_mark, "%s", "out of memory while loading");
    n->quoted = e->data.scalar.style != YAML_PLAIN_SCALAR_STYLE;
    const char *text = composer_scalar_tag(c, n, tk, e->start_mark);
    if (text)
        n->str = text;
    if (composer_register(c, (const char *)e->data.scalar.anchor, n, 1, e->start_mark) < 0)
        return -1;
    return composer_attach(c, n, 1);
}

static int composer_alias(struct composer *c, const yaml_event_t *e)
{
    const char *name = (const char *)e->data.alias.anchor;
    for (int i = c->n_anchors - 1; i >= 0; i--) {
        if (strcmp(c->anchors[i].name, name) == 0) {
            c->expanded = 1;
            if (composer_count(c, c->anchors[i].size, e->start_mark) < 0)
                return -1;
            struct ddpc_node *n = c->anchors[i].node;
            if (n->kind == DDPC_NODE_SCALAR) {
                /* a scalar used through an alias is placed where the alias
                 * is, so a key duplicated by an alias ("*k: 2") shows both
                 * positions, not the anchor's twice */
                struct ddpc_node *cp = arena_alloc(c->a, sizeof *cp);
                if (!cp)
                    return composer_error(c, e->start_mark, "%s", "out of memory");
                *cp = *n;
                mark_pos(c, e->start_mark, &cp->line, &cp->col);
                n = cp;
            }
            return composer_attach(c, n, c->anchors[i].size);
        }
    }
    /* an anchor still open (a node aliasing itself) is not registered yet,
     * so a recursive alias lands here too */
    return composer_error(c, e->start_mark,
                          "alias '*%s' has no complete anchor before it "
                          "(undefined or recursive)", name);
}

static int composer_event(struct composer *c, const yaml_event_t *e)
{
    switch (e->type) {
    case YAML_DOCUMENT_START_EVENT:
        if (++c->n_docs > 1)
            return composer_error(c, e->start_mark, "%s",
                                  "more than one YAML document; a spec is one document");
        return 0;
    case YAML_SCALAR_EVENT:
        return composer_scalar(c, e);
    case YAML_ALIAS_EVENT:
        return composer_alias(c, e);
    case YAML_SEQUENCE_START_EVENT:
        return composer_open(c, DDPC_NODE_SEQ, e, e->data.sequence_start.anchor,
                             e->data.sequence_start.tag);
    case YAML_MAPPING_START_EVENT:
        return composer_open(c, DDPC_NODE_MAP, e, e->data.mapping_start.anchor,
                             e->data.mapping_start.tag);
    case YAML_SEQUENCE_END_EVENT:
    case YAML_MAPPING_END_EVENT:
        return composer_close(c, e);
    default:
        return 0;
    }
}

int load_yaml(const char *file, const char *buf, size_t len, struct ddpc_arena *a,
              struct ddpc_node **root, struct ddpc_diag *d)
{
    yaml_parser_t p;
    struct composer *c = NULL;
    int rc = -1, parser_ok = 0;

    *root = NULL;
    memset(&p, 0, sizeof p);
    if (len > DDPC_LOAD_MAX_BYTES) {
        diag_rule(d, DDPC_R_IO, file, 0, 0, "", "file is larger than %u MiB",
                  DDPC_LOAD_MAX_BYTES >> 20);
        goto out;
    }
    c = calloc(1, sizeof *c);
    if (!c) {
        diag_rule(d, DDPC_R_OOM, file, 0, 0, "", "out of memory");
        goto out;
    }
    /* A UTF-8 byte-order mark (Windows editors write one): libyaml told the
     * encoding would read it as content. It takes no column. */
    if (len >= 3 && memcmp(buf, "\xEF\xBB\xBF", 3) == 0) {
        buf += 3;
        len -= 3;
    }
    c->file = file;
    c->buf = buf;
    c->len = len;
    c->a = a;
    c->d = d;
    if (!yaml_parser_initialize(&p)) {
        diag_rule(d, DDPC_R_OOM, file, 0, 0, "", "out of memory");
        goto out;
    }
    parser_ok = 1;
    yaml_parser_set_input_string(&p, (const unsigned char *)buf, len);
    yaml_parser_set_encoding(&p, YAML_UTF8_ENCODING);
    for (;;) {
        yaml_event_t e;
        if (!yaml_parser_parse(&p, &e)) {
            report_parser_error(c, &p);
            goto out;
        }
        int done = e.type == YAML_STREAM_END_EVENT;
        int erc = composer_event(c, &e);
        yaml_event_delete(&e);
        if (erc < 0)
            goto out;
        if (done)
            break;
    }
    if (!c->failed) {
        *root = c->root;
        rc = 0;
    }
out:
    if (c) {
        for (int i = 0; i < c->depth; i++) {
            free(c->stack[i].items);
            free(c->stack[i].anchor);
        }
        for (int i = 0; i < c->n_anchors; i++)
            free(c->anchors[i].name);
        free(c);
    }
    if (parser_ok)
        yaml_parser_delete(&p);
    return rc;
}

/* ===================== overrides (--set key.path=value) ===================== */

static void mark_origin(struct ddpc_node *n, const char *origin, int depth)
{
    if (!n || depth > DDPC_LOAD_MAX_DEPTH + 1)
        return;
    n->origin = origin;
    int items = n->kind == DDPC_NODE_MAP ? 2 * n->n : n->kind == DDPC_NODE_SEQ ? n->n : 0;
    for (int i = 0; i < items; i++)
        mark_origin(n->items[i], origin, depth + 1);
}

static struct ddpc_node *node_new(struct ddpc_arena *a, enum ddpc_node_kind kind,
                                  const char *origin)
{
    struct ddpc_node *n = arena_alloc(a, sizeof *n);
    if (n) {
        n->kind = kind;
        n->origin = origin;
        n->str = "";
    }
    return n;
}

/* A copy of map with room for one more entry (items shared, array new). */
static struct ddpc_node *map_copy(struct ddpc_arena *a, const struct ddpc_node *map)
{
    struct ddpc_node *m = arena_alloc(a, sizeof *m);
    struct ddpc_node **items = arena_alloc(a, (size_t)(2 * map->n + 2) * sizeof *items);
    if (!m || !items)
        return NULL;
    *m = *map;
    if (map->n)
        memcpy(items, map->items, (size_t)(2 * map->n) * sizeof *items);
    m->items = items;
    return m;
}

/* The index of key k[0..kl) in map, or -1. */
static int map_find(const struct ddpc_node *map, const char *k, size_t kl)
{
    for (int i = 0; i < map->n; i++) {
        const struct ddpc_node *key = map->items[2 * i];
        if (key->kind == DDPC_NODE_SCALAR && key->len == kl && memcmp(key->str, k, kl) == 0)
            return i;
    }
    return -1;
}

int load_override(struct ddpc_arena *a, struct ddpc_node **root, const char *origin,
                  const char *path, size_t path_len, const char *value, struct ddpc_diag *d)
{
    struct ddpc_node *v = NULL;
    if (path_len == 0 || path[0] == '.' || path[path_len - 1] == '.' ||
        memmem(path, path_len, "..", 2) || memchr(path, '[', path_len)) {
        diag_rule(d, DDPC_R_SET, origin, 0, 0, "", "expected key.path=value, with the key "
                  "path as dotted names (data.train.path); a list is set whole (model.layers=[784, 10])");
        return -1;
    }
    if (load_yaml(origin, value, strlen(value), a, &v, d) != 0)
        return -1;
    if (!v && !(v = node_new(a, DDPC_NODE_SCALAR, origin)))
        goto oom;   /* an empty value: null, the key's default */
    mark_origin(v, origin, 0);

    if (!*root || (*root)->kind != DDPC_NODE_MAP) {
        if (*root) {
            diag_rule(d, DDPC_R_SET, origin, 0, 0, "", "the spec is not a mapping of keys; "
                      "nothing to override");
            return -1;
        }
        if (!(*root = node_new(a, DDPC_NODE_MAP, origin)))
            goto oom;
    }
    struct ddpc_node *map = *root;
    const char *p = path, *end = path + path_len;
    for (;;) {
        const char *dot = memchr(p, '.', (size_t)(end - p));
        size_t kl = (size_t)((dot ? dot : end) - p);
        int i = map_find(map, p, kl);
        if (i < 0) {
            /* a new entry: the map gets a new items array with room for it */
            struct ddpc_node *key = node_new(a, DDPC_NODE_SCALAR, origin);
            struct ddpc_node **items = arena_alloc(a, (size_t)(2 * map->n + 2) * sizeof *items);
            if (!key || !items || !(key->str = arena_strndup(a, p, kl)))
                goto oom;
            key->len = kl;
            if (map->n)
                memcpy(items, map->items, (size_t)(2 * map->n) * sizeof *items);
            items[2 * map->n] = key;
            items[2 * map->n + 1] = NULL;
            map->items = items;
            i = map->n++;
        }
        if (!dot) {
            map->items[2 * i + 1] = v;
            return 0;
        }
        /* descend: copy the child map (it may be shared through an alias),
         * or make one where there is none or a scalar stood */
        struct ddpc_node *child = map->items[2 * i + 1];
        child = child && child->kind == DDPC_NODE_MAP ? map_copy(a, child)
                                                      : node_new(a, DDPC_NODE_MAP, origin);
        if (!child)
            goto oom;
        map->items[2 * i + 1] = child;
        map = child;
        p = dot + 1;
    }
oom:
    diag_rule(d, DDPC_R_OOM, origin, 0, 0, "", "out of memory");
    return -1;
}
