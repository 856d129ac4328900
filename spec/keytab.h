/* keytab.h - what every side of the spec shares from spec/keys.def and the
 * enum lists of spec/job.h: blocks, field offsets, enum spellings, and the
 * output view of the table (every field of struct ddpc_job, typed).
 *
 * Readers: spec/validate.c and spec/schema.c (with the parsing columns of
 * keys.def, in validate.h), compiler/emit.c (the baked initializer),
 * runtime/ddprt.c (--dry-run's listing) and tests/emit_dump.h. None of them
 * lists a field or an enum spelling by hand: a key added to keys.def and
 * job.h reaches all of them. Plain C, no YAML; header-only (static tables,
 * a few hundred bytes per reader) because the compiler and the runtime link
 * no library in common.
 */
#ifndef DDPC_KEYTAB_H
#define DDPC_KEYTAB_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "job.h"

/* ---- blocks: one per mapping of the spec ---- */
enum ddpc_block {
    DDPC_B_ROOT, DDPC_B_MODEL, DDPC_B_DATA, DDPC_B_SOURCE, DDPC_B_OPTIMIZER,
    DDPC_B_SCHEDULE, DDPC_B_CHECKPOINT, DDPC_B_LOGGING, DDPC_B_LAUNCH,
    /* model.layers: the item types (DDPC_ITEM rows), each type's keys, and
     * ITEM, the fields of struct ddpc_layer_item for the output side */
    DDPC_B_LAYERS, DDPC_B_L_LINEAR, DDPC_B_L_CONV2D, DDPC_B_L_POOL, DDPC_B_L_ADAPTIVE,
    DDPC_B_L_BATCHNORM, DDPC_B_L_LAYERNORM, DDPC_B_L_DROPOUT, DDPC_B_L_LEAKY, DDPC_B_L_GELU,
    DDPC_B_L_NONE, DDPC_B_ITEM, DDPC_B_COUNT
};

/* A row's field offset, from the start of its block's struct (a block row
 * adds its member's offset, so SOURCE rows serve data.train and data.test). */
#define DDPC_OFF_IN_(m, f)     (offsetof(struct ddpc_job, m.f) - offsetof(struct ddpc_job, m))
#define DDPC_OFF_ROOT(f)       offsetof(struct ddpc_job, f)
#define DDPC_OFF_MODEL(f)      DDPC_OFF_IN_(model, f)
#define DDPC_OFF_DATA(f)       DDPC_OFF_IN_(data, f)
#define DDPC_OFF_SOURCE(f)     offsetof(struct ddpc_data_source, f)
#define DDPC_OFF_OPTIMIZER(f)  DDPC_OFF_IN_(optimizer, f)
#define DDPC_OFF_SCHEDULE(f)   DDPC_OFF_IN_(schedule, f)
#define DDPC_OFF_CHECKPOINT(f) DDPC_OFF_IN_(checkpoint, f)
#define DDPC_OFF_LOGGING(f)    DDPC_OFF_IN_(logging, f)
#define DDPC_OFF_LAUNCH(f)     DDPC_OFF_IN_(launch, f)
/* an item's keys: offsets into struct ddpc_layer_item */
#define DDPC_OFF_ITEM(f)        offsetof(struct ddpc_layer_item, f)
#define DDPC_OFF_L_LINEAR(f)    DDPC_OFF_ITEM(f)
#define DDPC_OFF_L_CONV2D(f)    DDPC_OFF_ITEM(f)
#define DDPC_OFF_L_POOL(f)      DDPC_OFF_ITEM(f)
#define DDPC_OFF_L_ADAPTIVE(f)  DDPC_OFF_ITEM(f)
#define DDPC_OFF_L_BATCHNORM(f) DDPC_OFF_ITEM(f)
#define DDPC_OFF_L_LAYERNORM(f) DDPC_OFF_ITEM(f)
#define DDPC_OFF_L_DROPOUT(f)   DDPC_OFF_ITEM(f)
#define DDPC_OFF_L_LEAKY(f)     DDPC_OFF_ITEM(f)
#define DDPC_OFF_L_GELU(f)      DDPC_OFF_ITEM(f)

/* ---- enums: one table per list in job.h ---- */
enum ddpc_enum_kind { DDPC_EK_VALUE, DDPC_EK_ALIAS, DDPC_EK_HIDDEN };

struct ddpc_enum_value {
    const char *spelling;       /* as a spec writes it */
    const char *cname;          /* the C enumerator */
    int value;
    enum ddpc_enum_kind kind;
};

struct ddpc_enum {
    const char *name;           /* the list's name: "accelerator" */
    const struct ddpc_enum_value *v;
    int n;                      /* entries in v, aliases included */
};

#define DDPC_EV_VALUE_(id, s)  { s, #id, (int)(id), DDPC_EK_VALUE },
#define DDPC_EV_ALIAS_(id, s)  { s, #id, (int)(id), DDPC_EK_ALIAS },
#define DDPC_EV_HIDDEN_(id, s) { s, #id, (int)(id), DDPC_EK_HIDDEN },
#define DDPC_ENUM_TABLE_(name)                                                             \
    static const struct ddpc_enum_value ddpc_enum_v_##name[] = {                           \
        DDPC_ENUM_LIST_##name(DDPC_EV_VALUE_, DDPC_EV_ALIAS_, DDPC_EV_HIDDEN_)             \
    };                                                                                     \
    static const struct ddpc_enum ddpc_enum_##name = {                                     \
        #name, ddpc_enum_v_##name,                                                         \
        (int)(sizeof ddpc_enum_v_##name / sizeof ddpc_enum_v_##name[0])                    \
    };
DDPC_ENUM_LISTS(DDPC_ENUM_TABLE_)
#undef DDPC_ENUM_TABLE_

/* The entry of value v that is not an alias, or NULL. */
static inline const struct ddpc_enum_value *ddpc_enum_find(const struct ddpc_enum *e, int v)
{
    for (int i = 0; i < e->n; i++)
        if (e->v[i].value == v && e->v[i].kind != DDPC_EK_ALIAS)
            return &e->v[i];
    return NULL;
}

/* The spec spelling of value v ("?" for none: a corrupt job). */
static inline const char *ddpc_enum_spell(const struct ddpc_enum *e, int v)
{
    const struct ddpc_enum_value *x = ddpc_enum_find(e, v);
    return x ? x->spelling : "?";
}

/* ---- the output view: every field of struct ddpc_job ---- */
enum ddpc_ftype {
    DDPC_FT_NONE,               /* a custom key: its DDPC_OUT rows carry its fields */
    DDPC_FT_BLOCK,              /* a nested block: walk child at off */
    DDPC_FT_I32, DDPC_FT_I64, DDPC_FT_U64, DDPC_FT_F64,
    DDPC_FT_BOOL,               /* int32_t 0/1 */
    DDPC_FT_STR,                /* const char *, NULL allowed */
    DDPC_FT_ENUM,               /* int-sized enum, spelled through e */
    DDPC_FT_I32_LIST,           /* int32_t[cap], count in the int32_t at count_off */
    DDPC_FT_ITEMS               /* struct ddpc_layer_item[cap], count at count_off: the
                                   walk visits block ITEM's fields of each used item */
};

/* keys.def's types as output types */
#define DDPC_FT_OF_INT      DDPC_FT_I32
#define DDPC_FT_OF_INT64    DDPC_FT_I64
#define DDPC_FT_OF_U64      DDPC_FT_U64
#define DDPC_FT_OF_DOUBLE   DDPC_FT_F64
#define DDPC_FT_OF_DURATION DDPC_FT_F64
#define DDPC_FT_OF_BOOL     DDPC_FT_BOOL
#define DDPC_FT_OF_STRING   DDPC_FT_STR
#define DDPC_FT_OF_NAME     DDPC_FT_STR
#define DDPC_FT_OF_PATH     DDPC_FT_STR
#define DDPC_FT_OF_OUTPATH  DDPC_FT_STR

struct ddpc_field {
    enum ddpc_block block;
    const char *member;         /* C member name in the block's struct */
    enum ddpc_ftype type;
    size_t off;                 /* from the block's start (BLOCK: the child's start) */
    size_t size;                /* sizeof the member (BLOCK: 0) */
    const struct ddpc_enum *e;  /* ENUM */
    size_t count_off;           /* I32_LIST: the count's offset in the block */
    enum ddpc_block child;      /* BLOCK */
};

#define DDPC_FSIZE_ROOT(f)       sizeof(((struct ddpc_job *)0)->f)
#define DDPC_FSIZE_MODEL(f)      sizeof(((struct ddpc_job *)0)->model.f)
#define DDPC_FSIZE_DATA(f)       sizeof(((struct ddpc_job *)0)->data.f)
#define DDPC_FSIZE_SOURCE(f)     sizeof(((struct ddpc_data_source *)0)->f)
#define DDPC_FSIZE_OPTIMIZER(f)  sizeof(((struct ddpc_job *)0)->optimizer.f)
#define DDPC_FSIZE_SCHEDULE(f)   sizeof(((struct ddpc_job *)0)->schedule.f)
#define DDPC_FSIZE_CHECKPOINT(f) sizeof(((struct ddpc_job *)0)->checkpoint.f)
#define DDPC_FSIZE_LOGGING(f)    sizeof(((struct ddpc_job *)0)->logging.f)
#define DDPC_FSIZE_LAUNCH(f)     sizeof(((struct ddpc_job *)0)->launch.f)
#define DDPC_FSIZE_ITEM(f)       sizeof(((struct ddpc_layer_item *)0)->f)
#define DDPC_FSIZE_L_LINEAR(f)   DDPC_FSIZE_ITEM(f)
#define DDPC_FSIZE_L_CONV2D(f)   DDPC_FSIZE_ITEM(f)
#define DDPC_FSIZE_L_POOL(f)     DDPC_FSIZE_ITEM(f)
#define DDPC_FSIZE_L_ADAPTIVE(f) DDPC_FSIZE_ITEM(f)
#define DDPC_FSIZE_L_BATCHNORM(f) DDPC_FSIZE_ITEM(f)
#define DDPC_FSIZE_L_LAYERNORM(f) DDPC_FSIZE_ITEM(f)
#define DDPC_FSIZE_L_DROPOUT(f)  DDPC_FSIZE_ITEM(f)
#define DDPC_FSIZE_L_LEAKY(f)    DDPC_FSIZE_ITEM(f)
#define DDPC_FSIZE_L_GELU(f)     DDPC_FSIZE_ITEM(f)

#define DDPC_KEY(b, n, t, f, lo, hi, fl, def, only, chk, doc) \
    { DDPC_B_##b, #f, DDPC_FT_OF_##t, DDPC_OFF_##b(f), DDPC_FSIZE_##b(f), NULL, 0, DDPC_B_ROOT },
#define DDPC_ENUM(b, n, f, list, fl, def, only, doc) \
    { DDPC_B_##b, #f, DDPC_FT_ENUM, DDPC_OFF_##b(f), DDPC_FSIZE_##b(f), &ddpc_enum_##list, 0, \
      DDPC_B_ROOT },
#define DDPC_BLOCK(b, n, ch, m, fl, doc) \
    { DDPC_B_##b, #m, DDPC_FT_BLOCK, DDPC_OFF_##b(m), 0, NULL, 0, DDPC_B_##ch },
#define DDPC_CUSTOM(b, n, f, fn, fl, def, only, schema, tt, doc)
#define DDPC_OUT(b, f, t) \
    { DDPC_B_##b, #f, DDPC_FT_OF_##t, DDPC_OFF_##b(f), DDPC_FSIZE_##b(f), NULL, 0, DDPC_B_ROOT },
#define DDPC_OUT_ENUM(b, f, list) \
    { DDPC_B_##b, #f, DDPC_FT_ENUM, DDPC_OFF_##b(f), DDPC_FSIZE_##b(f), &ddpc_enum_##list, 0, \
      DDPC_B_ROOT },
#define DDPC_OUT_LIST(b, f, count) \
    { DDPC_B_##b, #f, DDPC_FT_I32_LIST, DDPC_OFF_##b(f), DDPC_FSIZE_##b(f), NULL, \
      DDPC_OFF_##b(count), DDPC_B_ROOT },
#define DDPC_OUT_ITEMS(b, f, count, ch) \
    { DDPC_B_##b, #f, DDPC_FT_ITEMS, DDPC_OFF_##b(f), DDPC_FSIZE_##b(f), NULL, \
      DDPC_OFF_##b(count), DDPC_B_##ch },
static const struct ddpc_field ddpc_fields[] = {
#include "keys.def"
};
#define DDPC_N_FIELDS ((int)(sizeof ddpc_fields / sizeof ddpc_fields[0]))

/* Calls fn for every field of block b whose struct starts at base, in table
 * order, nested blocks where their rows are. path is the field's C
 * designator from the job ("data.train.format"), which is also its name in
 * listings; p points at the field; blk is the block's base (for a list's
 * count). */
typedef void (*ddpc_field_fn)(void *ctx, const struct ddpc_field *f, const char *path,
                              const char *p, const char *blk);

static inline void ddpc_fields_walk(enum ddpc_block b, const char *base, const char *prefix,
                                    ddpc_field_fn fn, void *ctx)
{
    char path[128];
    for (int i = 0; i < DDPC_N_FIELDS; i++) {
        const struct ddpc_field *f = &ddpc_fields[i];
        if (f->block != b)
            continue;
        size_t pl = strlen(prefix), ml = strlen(f->member);
        if (pl + ml + 2 > sizeof path)
            continue;   /* cannot happen with keys.def's names; a test walks them all */
        memcpy(path, prefix, pl);
        if (pl)
            path[pl++] = '.';
        memcpy(path + pl, f->member, ml + 1);
        if (f->type == DDPC_FT_BLOCK) {
            ddpc_fields_walk(f->child, base + f->off, path, fn, ctx);
        } else if (f->type == DDPC_FT_ITEMS) {
            /* "model.items[3].type": a C designator too */
            int32_t n;
            memcpy(&n, base + f->count_off, sizeof n);
            size_t cap = f->size / sizeof(struct ddpc_layer_item);
            for (int k = 0; k >= 0 && (size_t)k < cap && k < n; k++) {
                char ipath[160];
                snprintf(ipath, sizeof ipath, "%s[%d]", path, k);
                ddpc_fields_walk(f->child, base + f->off + (size_t)k * sizeof(struct ddpc_layer_item),
                                 ipath, fn, ctx);
            }
        } else
            fn(ctx, f, path, base + f->off, base);
    }
}

/* Every field of a job. */
static inline void ddpc_job_walk(const struct ddpc_job *j, ddpc_field_fn fn, void *ctx)
{
    ddpc_fields_walk(DDPC_B_ROOT, (const char *)j, "", fn, ctx);
}

/* Reading a field of each type (p from the walk). */
static inline int64_t ddpc_field_i64(const struct ddpc_field *f, const char *p)
{
    int32_t v32;
    int64_t v64;
    switch (f->type) {
    case DDPC_FT_I64:
        memcpy(&v64, p, sizeof v64);
        return v64;
    case DDPC_FT_ENUM: {
        int e;
        memcpy(&e, p, sizeof e);
        return e;
    }
    default:
        memcpy(&v32, p, sizeof v32);
        return v32;
    }
}

static inline uint64_t ddpc_field_u64(const char *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline double ddpc_field_f64(const char *p)
{
    double v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline const char *ddpc_field_str(const char *p)
{
    const char *s;
    memcpy(&s, p, sizeof s);
    return s;
}

/* I32_LIST: the count, clamped to [0, capacity]. */
static inline int ddpc_field_count(const struct ddpc_field *f, const char *blk)
{
    int32_t n;
    memcpy(&n, blk + f->count_off, sizeof n);
    int cap = (int)(f->size / sizeof(int32_t));
    return n < 0 ? 0 : n > cap ? cap : n;
}

#endif /* DDPC_KEYTAB_H */
