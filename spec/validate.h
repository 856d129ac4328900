/* validate.h - positioned tree -> struct ddpc_job, driven by spec/keys.def.
 *
 * validate_job walks the tree against the key table: types, ranges, enums,
 * defaults, unknown keys (with a did-you-mean), keys given for the wrong
 * optimizer type or data format, then the cross-key rules (devices vs
 * strategy, lr scaling, timeouts, precision, layer sizes vs data headers,
 * batch vs dataset size, resume path, multi-node). Every finding is a
 * diagnostic at the offending node; nothing is printed.
 *
 * The key table itself is exported for schema.c (the only other reader of
 * its parsing columns; spec/keytab.h has the columns every side shares).
 */
#ifndef DDPC_VALIDATE_H
#define DDPC_VALIDATE_H

#include <stddef.h>
#include "diag.h"
#include "job.h"
#include "keytab.h"
#include "load.h"
#include "spec.h"

enum ddpc_key_type {
    DDPC_T_BLOCK, DDPC_T_ENUM, DDPC_T_CUSTOM,
    DDPC_T_ITEM,     /* an item type of a list (off: its enum value; child: its keys) */
    DDPC_T_INT,      /* int32_t */
    DDPC_T_INT64,    /* int64_t */
    DDPC_T_U64,      /* uint64_t */
    DDPC_T_DOUBLE,
    DDPC_T_BOOL,     /* int32_t 0/1 */
    DDPC_T_STRING,   /* const char * */
    DDPC_T_NAME,     /* const char *, [A-Za-z0-9._-]{1,64} */
    DDPC_T_PATH,     /* const char *, input file, resolved against the spec's directory */
    DDPC_T_OUTPATH,  /* const char *, output, relative to the run's working directory */
    DDPC_T_DURATION  /* double seconds */
};

#define DDPC_F_REQUIRED 1u
#define DDPC_F_LO_OPEN  2u   /* lo is exclusive */
#define DDPC_F_HI_OPEN  4u   /* hi is exclusive */
#define DDPC_F_LIST     8u   /* ITEM: the value is a nested list of the same items */

#define DDPC_NOLO (-1e300)
#define DDPC_NOHI (1e300)

struct ddpc_vctx;   /* validation state of one file (validate.c) */

struct ddpc_key {
    enum ddpc_block block;
    const char *name;
    enum ddpc_key_type type;
    size_t off;                 /* field offset from the block instance's base;
                                   BLOCK: the child's base */
    double lo, hi;
    unsigned flags;
    const char *def;            /* default: spec text (generic), JSON (custom), NULL = none */
    const struct ddpc_enum *values; /* ENUM: its list (job.h) */
    const char *only;           /* "sibling=v1|v2" or NULL */
    enum ddpc_block child;      /* BLOCK */
    /* CUSTOM: parses n (NULL: write the default) into field. Others: an
     * extra check after the generic one. Adds its own diagnostics; returns
     * 0 or -1. */
    int (*fn)(struct ddpc_vctx *c, const struct ddpc_node *n, void *field, const char *path);
    const char *schema;         /* CUSTOM: JSON Schema fragment */
    const char *typetext;       /* CUSTOM: type name in the reference */
    const char *doc;
};

extern const struct ddpc_key ddpc_keys[];
extern const int ddpc_n_keys;

/* A DDPC_DEFAULT_WHEN row: key `name` of `block` defaults to def when the
 * condition `when` ("sibling=v1|v2") holds. The table ends with name NULL. */
struct ddpc_default_when {
    enum ddpc_block block;
    const char *name, *when, *def;
};
extern const struct ddpc_default_when ddpc_default_whens[];

/* Another tool's name for a setting (spec/aliases.def), for the unknown-key
 * message and docs/coming-from.md. */
enum ddpc_tool {
    DDPC_TOOL_LIGHTNING, DDPC_TOOL_LIGHTNINGCLI, DDPC_TOOL_MODELCKPT, DDPC_TOOL_TORCHRUN,
    DDPC_TOOL_PYTORCH,
    DDPC_TOOL_TRAININGPARAMS, DDPC_TOOL_HF, DDPC_TOOL_COUNT
};

struct ddpc_alias {
    enum ddpc_tool tool;
    const char *name;           /* as written in YAML, underscores */
    const char *shown;          /* as the tool spells it */
    const char *target;         /* ddpc's dotted key path; NULL: none */
    const char *note;           /* what differs, or why there is none ("" allowed) */
};

/* A value ddpc refuses with a reason (`strategy: fsdp`). */
struct ddpc_refused_value {
    const char *key;            /* dotted key path */
    const char *value;
    const char *note;           /* what ddpc does instead */
};

extern const struct ddpc_alias ddpc_aliases[];
extern const int ddpc_n_aliases;
extern const struct ddpc_refused_value ddpc_refused_values[];
extern const int ddpc_n_refused_values;

/* "Lightning Trainer", "torchrun", ... */
const char *validate_tool_name(enum ddpc_tool t);
/* The row for a key another tool's user may write: name with '-' read as
 * '_' and leading dashes dropped (`--nproc-per-node`), matched exactly.
 * Rows that are ddpc's own key (name == the target's last part) are not
 * returned: those names are not unknown. NULL when there is none. */
const struct ddpc_alias *validate_alias_find(const char *name, size_t len);
/* Whether the dotted path names a key (or block) of keys.def. */
int validate_key_exists(const char *dotted);

/* The dotted path of a block ("data.train" for SOURCE, "" for ROOT). */
const char *validate_block_path(enum ddpc_block b);
/* The canonical values of an enum row, i.e. without aliases: writes the i-th
 * (0-based) into out; returns -1 past the end. */
int validate_enum_value(const struct ddpc_key *k, int i, char *out, size_t cap);

/* Fills job from root (which may be NULL: an empty document). file names the
 * diagnostics and locates relative data paths. Strings of the job point into
 * the tree or into a. Returns 0 valid, -1 with errors in d. */
int validate_job(const char *file, const struct ddpc_node *root, const struct spec_options *opt,
                 struct ddpc_arena *a, struct ddpc_job *job, struct ddpc_diag *d);

/* Optimal-string-alignment edit distance (for did-you-mean). */
int validate_distance(const char *a, const char *b);

#endif /* DDPC_VALIDATE_H */
