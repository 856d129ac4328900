/* load.h - YAML text -> ddpc's positioned tree (struct ddpc_node).
 *
 * spec/load.c is the only file that includes <yaml.h>. It drives libyaml's
 * event parser and composes its own tree, copying every mark (+1, so lines
 * and columns are 1-based) and freeing each libyaml event as it goes; nothing
 * of libyaml outlives load_yaml(). Composing from events rather than
 * yaml_parser_load() lets the loader stop at the first node past a limit
 * (depth, node count, alias expansion) instead of building the whole bomb.
 *
 * Rules it keeps:
 *   - one document; duplicate keys are errors; keys are scalars;
 *   - aliases share the anchored node (no copy), but every alias counts the
 *     anchored subtree's full size against DDPC_LOAD_MAX_NODES, so a
 *     billion-laughs file is refused after a few hundred events;
 *   - nesting deeper than DDPC_LOAD_MAX_DEPTH is refused;
 *   - libyaml errors (syntax, NUL bytes, invalid UTF-8) become diagnostics
 *     with both the problem and the context positions.
 *
 * All memory of the tree lives in a struct ddpc_arena; arena_free releases it.
 */
#ifndef DDPC_LOAD_H
#define DDPC_LOAD_H

#include <stddef.h>
#include "diag.h"

#define DDPC_LOAD_MAX_BYTES   (16u << 20)   /* a spec file larger than 16 MiB is refused */
#define DDPC_LOAD_MAX_DEPTH   64            /* nested collections */
#define DDPC_LOAD_MAX_NODES   100000        /* nodes after alias expansion */
#define DDPC_LOAD_MAX_ANCHORS 1024

/* ---- arena: bump allocation in chunks, freed all at once ---- */
struct ddpc_arena_chunk;
struct ddpc_arena {
    struct ddpc_arena_chunk *head;
};
/* Zeroed memory, 16-byte aligned; NULL only when out of memory. */
void *arena_alloc(struct ddpc_arena *a, size_t n);
/* A NUL-terminated copy of s[0..n). */
char *arena_strndup(struct ddpc_arena *a, const char *s, size_t n);
char *arena_printf(struct ddpc_arena *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void arena_free(struct ddpc_arena *a);   /* safe on a zeroed arena; leaves it zeroed */

/* ---- the tree ---- */
enum ddpc_node_kind { DDPC_NODE_SCALAR, DDPC_NODE_SEQ, DDPC_NODE_MAP };

struct ddpc_node {
    enum ddpc_node_kind kind;
    int line, col;               /* 1-based start of the node */
    /* scalar */
    const char *str;             /* text, NUL-terminated (may hold a NUL from "\0": len tells) */
    size_t len;
    int quoted;                  /* quoted, block literal or tagged !!str: a string, never a
                                    number, bool or null */
    /* seq: items[0..n); map: items[2i] is the key, items[2i+1] its value */
    int n;
    struct ddpc_node **items;
    const char *origin;          /* NULL: the spec file; else the override that made this
                                    node ("--set epochs=2"): diagnostics name it, not a line */
};

/* Parses buf[0..len) (file names the diagnostics). On success returns 0 and
 * sets *root (NULL for an empty document). On failure adds errors to d and
 * returns -1. Nodes live in a. */
int load_yaml(const char *file, const char *buf, size_t len, struct ddpc_arena *a,
              struct ddpc_node **root, struct ddpc_diag *d);

/* Applies one override `key.path=value` to *root (NULL: an empty
 * document, replaced by a mapping). The value is YAML text, parsed like a
 * spec (an empty value is null: the key's default). Maps on the path are
 * copied before they change, so a node shared through an alias elsewhere
 * keeps its value; missing maps on the path are created. Every node the
 * override makes has origin = `origin` (which must outlive the tree).
 * Returns 0, or -1 with an error in d named by origin. Nodes live in a. */
int load_override(struct ddpc_arena *a, struct ddpc_node **root, const char *origin,
                  const char *path, size_t path_len, const char *value, struct ddpc_diag *d);

/* Scalar helpers shared by the validator. */
int load_is_null(const struct ddpc_node *n);   /* plain "", "~", "null" */
/* Value of key in map (NULL if absent or map is not a mapping). */
const struct ddpc_node *load_map_get(const struct ddpc_node *map, const char *key);
/* Node at a dotted path from root ("data.train.format"); NULL if absent. */
const struct ddpc_node *load_lookup(const struct ddpc_node *root, const char *dotted);

#endif /* DDPC_LOAD_H */
