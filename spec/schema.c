/* schema.c - spec/keys.def -> JSON Schema (2020-12) and the Markdown reference.
 *
 * Both documents are generated from the same table the validator walks, so
 * neither can drift from what `ddpc check` accepts (tests compare
 * spec/README.md with spec_write_reference's output byte for byte).
 * Never validates anything; output is deterministic.
 */
#include "spec.h"

#include <stdio.h>
#include <string.h>

#include "units.h"
#include "validate.h"

static void json_str(FILE *out, const char *s)
{
    fputc('"', out);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fprintf(out, "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            fprintf(out, "\\u%04x", (unsigned char)*s);
        else
            fputc(*s, out);
    }
    fputc('"', out);
}

static void indent(FILE *out, int n)
{
    fprintf(out, "%*s", 2 * n, "");
}

static int is_int_text(const char *s)
{
    int64_t v;
    return units_int64(s, &v) == 0 && !strpbrk(s, ".eE_xob");
}

static void bounds_json(FILE *out, const struct ddpc_key *k)
{
    if (k->lo != DDPC_NOLO)
        fprintf(out, ", \"%s\": %.17g", k->flags & DDPC_F_LO_OPEN ? "exclusiveMinimum" : "minimum",
                k->lo);
    if (k->hi != DDPC_NOHI)
        fprintf(out, ", \"%s\": %.17g", k->flags & DDPC_F_HI_OPEN ? "exclusiveMaximum" : "maximum",
                k->hi);
}

static void default_json(FILE *out, const struct ddpc_key *k)
{
    if (!k->def)
        return;
    fputs(", \"default\": ", out);
    int b;
    switch (k->type) {
    case DDPC_T_CUSTOM:
    case DDPC_T_INT:
    case DDPC_T_INT64:
    case DDPC_T_U64:
    case DDPC_T_DOUBLE:
        fputs(k->def, out);
        break;
    case DDPC_T_BOOL:
        fputs(units_bool(k->def, &b) == 0 && b ? "true" : "false", out);
        break;
    default:
        json_str(out, k->def);
    }
}

static const char *const duration_pattern =
    "^(([0-9]+([.][0-9]+)?(ms|d|h|m|s) ?)+|([0-9]+ days?, )?[0-9]+:[0-9]{2}(:[0-9]{2}([.][0-9]+)?)?"
    "|[0-9]+([.][0-9]+)?)$";

static void block_json(FILE *out, enum ddpc_block b, int lvl);

/* The list block whose path is `path` ("model.layers"), or -1. */
static int list_block(const char *path)
{
    for (int i = 0; i < ddpc_n_keys; i++)
        if (ddpc_keys[i].type == DDPC_T_ITEM &&
            strcmp(validate_block_path(ddpc_keys[i].block), path) == 0)
            return (int)ddpc_keys[i].block;
    return -1;
}

/* The schema of one item of list block lb: a bare name (item types with
 * no required keys) or a one-key mapping; nested lists refer back to
 * #/$defs/<lb path>. */
static void item_json(FILE *out, enum ddpc_block lb, int lvl)
{
    int first = 1;
    fputs("{\"anyOf\": [{\"enum\": [", out);
    for (int i = 0; i < ddpc_n_keys; i++) {
        const struct ddpc_key *k = &ddpc_keys[i];
        int req = 0;
        for (int j = 0; j < ddpc_n_keys; j++)
            req |= ddpc_keys[j].block == k->child && (ddpc_keys[j].flags & DDPC_F_REQUIRED);
        if (k->block != lb || k->type != DDPC_T_ITEM || req || (k->flags & DDPC_F_LIST))
            continue;
        fputs(first ? "" : ", ", out);
        json_str(out, k->name);
        first = 0;
    }
    fputs("]},\n", out);
    indent(out, lvl + 1);
    fputs("{\"type\": \"object\", \"minProperties\": 1, \"maxProperties\": 1, "
          "\"additionalProperties\": false, \"properties\": {", out);
    first = 1;
    for (int i = 0; i < ddpc_n_keys; i++) {
        const struct ddpc_key *k = &ddpc_keys[i];
        if (k->block != lb || k->type != DDPC_T_ITEM)
            continue;
        fputs(first ? "\n" : ",\n", out);
        indent(out, lvl + 2);
        json_str(out, k->name);
        fputs(": {\"description\": ", out);
        json_str(out, k->doc);
        if (k->flags & DDPC_F_LIST) {
            fputs(", \"type\": \"array\", \"minItems\": 1, \"items\": {\"$ref\": \"#/$defs/", out);
            fputs(validate_block_path(lb), out);
            fputs("\"}}", out);
        } else {
            fputs(", \"anyOf\": [{\"type\": \"null\"}, {", out);
            block_json(out, k->child, lvl + 2);
            fputs("]}", out);
        }
        first = 0;
    }
    fputs("\n", out);
    indent(out, lvl + 1);
    fputs("}}]}", out);
}

static void key_json(FILE *out, const struct ddpc_key *k, int lvl)
{
    fputs("{\"description\": ", out);
    json_str(out, k->doc);
    default_json(out, k);
    switch (k->type) {
    case DDPC_T_BLOCK:
        fputs(", ", out);
        block_json(out, k->child, lvl);
        return;
    case DDPC_T_CUSTOM: {
        char path[128];
        const char *bp = validate_block_path(k->block);
        snprintf(path, sizeof path, "%s%s%s", bp, bp[0] ? "." : "", k->name);
        if (list_block(path) >= 0) {
            /* its fragment, or a list of the items of the same name */
            fprintf(out, ", \"anyOf\": [%s, {\"type\": \"array\", \"minItems\": 1, "
                    "\"maxItems\": %d, \"items\": {\"$ref\": \"#/$defs/%s\"}}]}", k->schema,
                    DDPC_MAX_ITEMS, path);
            return;
        }
        /* the fragment is one object: splice its members in */
        size_t l = strlen(k->schema);
        fprintf(out, ", %.*s}", (int)(l - 2), k->schema + 1);
        return;
    }
    case DDPC_T_ITEM:
        break;
    case DDPC_T_INT:
    case DDPC_T_INT64:
    case DDPC_T_U64:
        fputs(", \"type\": [\"integer\", \"null\"]", out);
        bounds_json(out, k);
        break;
    case DDPC_T_DOUBLE:
        fputs(", \"type\": [\"number\", \"null\"]", out);
        bounds_json(out, k);
        break;
    case DDPC_T_BOOL:
        fputs(", \"type\": [\"boolean\", \"null\"]", out);
        break;
    case DDPC_T_ENUM: {
        fputs(", \"enum\": [", out);
        const struct ddpc_enum *e = k->values;
        int first = 1;
        for (int j = 0; j < e->n; j++) {
            const char *v = e->v[j].spelling;
            if (e->v[j].kind == DDPC_EK_HIDDEN)
                continue;
            fputs(first ? "" : ", ", out);
            json_str(out, v);
            /* YAML reads precision: 32 as a number; accept both */
            if (is_int_text(v))
                fprintf(out, ", %s", v);
            /* YAML 1.1 tools read on/off as booleans */
            if (strcmp(v, "on") == 0 || strcmp(v, "off") == 0)
                fputs(v[1] == 'n' ? ", true" : ", false", out);
            first = 0;
        }
        /* `key:` with no value means the default */
        fputs(", null]", out);
        break;
    }
    case DDPC_T_NAME:
        fputs(", \"type\": [\"string\", \"null\"], \"pattern\": \"^[A-Za-z0-9._-]{1,64}$\"", out);
        break;
    case DDPC_T_PATH:
    case DDPC_T_OUTPATH:
        fputs(", \"type\": [\"string\", \"null\"], \"minLength\": 1", out);
        break;
    case DDPC_T_STRING:
        fputs(", \"type\": [\"string\", \"null\"]", out);
        break;
    case DDPC_T_DURATION:
        fputs(", \"anyOf\": [{\"type\": \"null\"}, {\"type\": \"number\", \"exclusiveMinimum\": 0}, "
              "{\"type\": \"string\", \"pattern\": ", out);
        json_str(out, duration_pattern);
        fputs("}]", out);
        break;
    }
    fputc('}', out);
}

static const struct ddpc_key *sibling(const struct ddpc_key *k, size_t *vals_off)
{
    const char *eq = strchr(k->only, '=');
    size_t nl = (size_t)(eq - k->only);
    *vals_off = nl + 1;
    for (int i = 0; i < ddpc_n_keys; i++)
        if (ddpc_keys[i].block == k->block && strlen(ddpc_keys[i].name) == nl &&
            memcmp(ddpc_keys[i].name, k->only, nl) == 0)
            return &ddpc_keys[i];
    return NULL;
}

static void enum_json_list(FILE *out, const char *vals)
{
    fputc('[', out);
    for (const char *p = vals; *p;) {
        size_t l = strcspn(p, "|");
        char v[64];
        snprintf(v, sizeof v, "%.*s", (int)l, p);
        json_str(out, v);
        p += l;
        if (*p == '|') {
            p++;
            fputs(", ", out);
        }
    }
    fputc(']', out);
}

static int in_list(const char *vals, const char *v)
{
    size_t vl = strlen(v);
    for (const char *p = vals; *p;) {
        size_t l = strcspn(p, "|");
        if (l == vl && memcmp(p, v, l) == 0)
            return 1;
        p += l;
        if (*p == '|')
            p++;
    }
    return 0;
}

static void block_json(FILE *out, enum ddpc_block b, int lvl)
{
    int first = 1, any_only = 0;
    fputs("\"type\": \"object\", \"additionalProperties\": false,\n", out);
    indent(out, lvl + 1);
    fputs("\"properties\": {", out);
    for (int i = 0; i < ddpc_n_keys; i++) {
        const struct ddpc_key *k = &ddpc_keys[i];
        if (k->block != b)
            continue;
        fputs(first ? "\n" : ",\n", out);
        indent(out, lvl + 2);
        json_str(out, k->name);
        fputs(": ", out);
        key_json(out, k, lvl + 2);
        first = 0;
        any_only |= k->only != NULL;
    }
    fputs("\n", out);
    indent(out, lvl + 1);
    fputs("}", out);
    first = 1;
    for (int i = 0; i < ddpc_n_keys; i++) {
        const struct ddpc_key *k = &ddpc_keys[i];
        if (k->block != b || !(k->flags & DDPC_F_REQUIRED) || k->only)
            continue;
        fputs(first ? ",\n" : ", ", out);
        if (first) {
            indent(out, lvl + 1);
            fputs("\"required\": [", out);
        }
        json_str(out, k->name);
        first = 0;
    }
    if (!first)
        fputc(']', out);
    if (any_only) {
        /* keys for some optimizer types / data formats only */
        fputs(",\n", out);
        indent(out, lvl + 1);
        fputs("\"allOf\": [", out);
        first = 1;
        for (int i = 0; i < ddpc_n_keys; i++) {
            const struct ddpc_key *k = &ddpc_keys[i];
            size_t vo;
            const struct ddpc_key *s;
            if (k->block != b || !k->only || !(s = sibling(k, &vo)))
                continue;
            const char *vals = k->only + vo;
            /* when the sibling is absent its default decides */
            int def_applies = s->def && in_list(vals, s->def);
            const char *req = "";
            char reqbuf[96];
            snprintf(reqbuf, sizeof reqbuf, "\"required\": [\"%s\"], ", s->name);
            /* forbid the key when the sibling has another value */
            req = def_applies ? reqbuf : "";
            fputs(first ? "\n" : ",\n", out);
            indent(out, lvl + 2);
            fprintf(out, "{\"if\": {%s\"properties\": {\"%s\": {\"not\": {\"enum\": ", req,
                    s->name);
            enum_json_list(out, vals);
            fprintf(out, "}}}}, \"then\": {\"not\": {\"required\": [\"%s\"]}}}", k->name);
            first = 0;
            if (k->flags & DDPC_F_REQUIRED) {
                /* and require it when the sibling has one of the values */
                req = def_applies ? "" : reqbuf;
                fputs(",\n", out);
                indent(out, lvl + 2);
                fprintf(out, "{\"if\": {%s\"properties\": {\"%s\": {\"enum\": ", req, s->name);
                enum_json_list(out, vals);
                fprintf(out, "}}}, \"then\": {\"required\": [\"%s\"]}}", k->name);
            }
        }
        fputs("\n", out);
        indent(out, lvl + 1);
        fputc(']', out);
    }
    fputs("}", out);
}

void spec_write_schema(FILE *out)
{
    fputs("{\n  \"$schema\": \"https://json-schema.org/draft/2020-12/schema\",\n"
          "  \"title\": \"ddpc job spec, version 1\",\n"
          "  \"description\": \"Generated by `ddpc schema` from spec/keys.def.\",\n"
          "  \"patternProperties\": {\"^x-\": true},\n", out);
    /* item lists: one definition each, so nested lists can refer to it */
    fputs("  \"$defs\": {", out);
    int first = 1;
    for (int b = 0; b < DDPC_B_COUNT; b++) {
        const char *bp = validate_block_path((enum ddpc_block)b);
        if (list_block(bp) != b)
            continue;
        fputs(first ? "\n    " : ",\n    ", out);
        json_str(out, bp);
        fputs(": ", out);
        item_json(out, (enum ddpc_block)b, 2);
        first = 0;
    }
    fputs("\n  },\n  ", out);
    block_json(out, DDPC_B_ROOT, 0);
    fputs("\n", out);
}

/* ===================== Markdown reference ===================== */

/* Table cells: '|' would end the cell. */
static void md_cell(FILE *out, const char *s)
{
    for (; *s; s++) {
        if (*s == '|')
            fputs("\\|", out);
        else
            fputc(*s, out);
    }
}

static void md_bounds(FILE *out, const struct ddpc_key *k)
{
    int lo = k->lo != DDPC_NOLO, hi = k->hi != DDPC_NOHI;
    if (lo && hi && k->lo == k->hi)
        fprintf(out, ", %.17g", k->lo);
    else if (lo && hi)
        fprintf(out, " in %s%.17g, %.17g%s", k->flags & DDPC_F_LO_OPEN ? "(" : "[", k->lo, k->hi,
                k->flags & DDPC_F_HI_OPEN ? ")" : "]");
    else if (lo)
        fprintf(out, " %s %.17g", k->flags & DDPC_F_LO_OPEN ? ">" : ">=", k->lo);
    else if (hi)
        fprintf(out, " %s %.17g", k->flags & DDPC_F_HI_OPEN ? "<" : "<=", k->hi);
}

static void md_type(FILE *out, const struct ddpc_key *k)
{
    switch (k->type) {
    case DDPC_T_BLOCK: fputs("mapping", out); break;
    case DDPC_T_CUSTOM: md_cell(out, k->typetext); break;
    case DDPC_T_INT: case DDPC_T_INT64: case DDPC_T_U64:
        fputs("integer", out);
        md_bounds(out, k);
        break;
    case DDPC_T_DOUBLE:
        fputs("number", out);
        md_bounds(out, k);
        break;
    case DDPC_T_BOOL: fputs("boolean", out); break;
    case DDPC_T_ENUM: {
        fputs("one of ", out);
        char v[64];
        for (int i = 0; validate_enum_value(k, i, v, sizeof v) == 0; i++)
            fprintf(out, "%s`%s`", i ? ", " : "", v);
        break;
    }
    case DDPC_T_NAME: fputs("name", out); break;
    case DDPC_T_PATH: fputs("input path", out); break;
    case DDPC_T_OUTPATH: fputs("output path", out); break;
    case DDPC_T_STRING: fputs("string", out); break;
    case DDPC_T_DURATION: fputs("duration", out); break;
    case DDPC_T_ITEM: fputs("layer", out); break;
    }
}

static void md_default(FILE *out, const struct ddpc_key *k)
{
    if (k->flags & DDPC_F_REQUIRED) {
        fputs(k->only ? "required when it applies" : "**required**", out);
        return;
    }
    if (k->type == DDPC_T_BLOCK || !k->def) {
        fputs("-", out);
        return;
    }
    fputs("`", out);
    md_cell(out, k->def);
    fputs("`", out);
    /* and the defaults that depend on a sibling (DDPC_DEFAULT_WHEN) */
    for (const struct ddpc_default_when *w = ddpc_default_whens; w->name; w++) {
        if (w->block != k->block || strcmp(w->name, k->name) != 0)
            continue;
        const char *eq = strchr(w->when, '=');
        fputs("; `", out);
        md_cell(out, w->def);
        fprintf(out, "` when `%.*s` is ", (int)(eq - w->when), w->when);
        int first = 1;
        for (const char *p = eq + 1; *p;) {
            size_t l = strcspn(p, "|");
            fprintf(out, "%s`%.*s`", first ? "" : " or ", (int)l, p);
            first = 0;
            p += l + (p[l] == '|');
        }
    }
}

static void md_block(FILE *out, enum ddpc_block b, const char *title, unsigned *done);

/* The item types of list block lb, then each type's keys. */
static void md_items(FILE *out, enum ddpc_block lb, unsigned *done)
{
    if (*done & (1u << lb))
        return;
    *done |= 1u << lb;
    fprintf(out, "\n## `%s` items (model type sequential)\n\n"
            "Each item is a bare name (`- relu`) or a mapping with one key, the layer's name, whose "
            "value holds its arguments (`- conv2d: {out_channels: 32, kernel_size: 3}`). Names and "
            "arguments are PyTorch's; input sizes (in_features, in_channels) are inferred.\n\n"
            "| Layer | Arguments | Description |\n|---|---|---|\n", validate_block_path(lb));
    for (int i = 0; i < ddpc_n_keys; i++) {
        const struct ddpc_key *k = &ddpc_keys[i];
        if (k->block != lb || k->type != DDPC_T_ITEM)
            continue;
        fprintf(out, "| `%s` | ", k->name);
        int any = 0;
        for (int j = 0; j < ddpc_n_keys; j++)
            if (ddpc_keys[j].block == k->child) {
                fprintf(out, "%s`%s`", any ? ", " : "", ddpc_keys[j].name);
                any = 1;
            }
        if (k->flags & DDPC_F_LIST)
            fputs("a list of layers", out);
        else if (!any)
            fputs("-", out);
        fputs(" | ", out);
        md_cell(out, k->doc);
        fputs(" |\n", out);
    }
    for (int i = 0; i < ddpc_n_keys; i++) {
        const struct ddpc_key *k = &ddpc_keys[i];
        if (k->block != lb || k->type != DDPC_T_ITEM || (*done & (1u << k->child)))
            continue;
        int any = 0;
        for (int j = 0; j < ddpc_n_keys; j++)
            any |= ddpc_keys[j].block == k->child;
        if (!any)
            continue;
        char t[256];
        size_t o = (size_t)snprintf(t, sizeof t, "Arguments of ");
        for (int j = 0, n = 0; j < ddpc_n_keys; j++)
            if (ddpc_keys[j].block == lb && ddpc_keys[j].type == DDPC_T_ITEM &&
                ddpc_keys[j].child == k->child && o < sizeof t)
                o += (size_t)snprintf(t + o, sizeof t - o, "%s`%s`", n++ ? ", " : "",
                                      ddpc_keys[j].name);
        md_block(out, k->child, t, done);
    }
}

static void md_block(FILE *out, enum ddpc_block b, const char *title, unsigned *done)
{
    if (*done & (1u << b))
        return;
    *done |= 1u << b;
    fprintf(out, "\n## %s\n\n| Key | Type | Default | Description |\n|---|---|---|---|\n", title);
    for (int i = 0; i < ddpc_n_keys; i++) {
        const struct ddpc_key *k = &ddpc_keys[i];
        if (k->block != b)
            continue;
        fprintf(out, "| `%s` | ", k->name);
        md_type(out, k);
        fputs(" | ", out);
        md_default(out, k);
        fputs(" | ", out);
        md_cell(out, k->doc);
        if (k->only) {
            const char *eq = strchr(k->only, '=');
            fprintf(out, " Only when `%.*s` is ", (int)(eq - k->only), k->only);
            int first = 1;
            for (const char *p = eq + 1; *p;) {
                size_t l = strcspn(p, "|");
                fprintf(out, "%s`%.*s`", first ? "" : " or ", (int)l, p);
                first = 0;
                p += l + (p[l] == '|');
            }
            fputs(".", out);
        }
        fputs(" |\n", out);
    }
    for (int i = 0; i < ddpc_n_keys; i++) {
        const struct ddpc_key *k = &ddpc_keys[i];
        if (k->block != b || k->type != DDPC_T_BLOCK)
            continue;
        char t[128];
        if (k->child == DDPC_B_SOURCE)
            snprintf(t, sizeof t, "`data.train`, `data.test`: a data source");
        else
            snprintf(t, sizeof t, "`%s`", validate_block_path(k->child));
        md_block(out, k->child, t, done);
    }
    /* lists of typed items named by a key of this block */
    for (int i = 0; i < ddpc_n_keys; i++) {
        const struct ddpc_key *k = &ddpc_keys[i];
        char path[128];
        const char *bp = validate_block_path(b);
        if (k->block != b || k->type != DDPC_T_CUSTOM)
            continue;
        snprintf(path, sizeof path, "%s%s%s", bp, bp[0] ? "." : "", k->name);
        int lb = list_block(path);
        if (lb >= 0)
            md_items(out, (enum ddpc_block)lb, done);
    }
}

/* The codes of `ddpc check --format json`, from spec/rules.def. */
static void md_rules(FILE *out)
{
    fputs("\n## Diagnostic codes\n\n"
          "Each finding of `ddpc check --format json` has one of these codes as its `rule`.\n"
          "A code never changes meaning or spelling; new ones are added. `E-other`,\n"
          "`W-other` and `N-other` are the compiler's own findings, never a spec's.\n\n"
          "| Code | Severity | Finds |\n|---|---|---|\n", out);
    for (int r = 0; r < DDPC_R_COUNT; r++) {
        const struct ddpc_rule_info *ri = diag_rule_info(r);
        fprintf(out, "| `%s` | %s | ", ri->code,
                ri->severity == DDPC_SEV_ERROR ? "error"
                : ri->severity == DDPC_SEV_WARNING ? "warning" : "note");
        md_cell(out, ri->doc);
        fputs(" |\n", out);
    }
}

void spec_write_reference(FILE *out)
{
    unsigned done = 0;
    fputs("# ddpc job spec reference (version 1)\n\n"
          "<!-- Generated by `ddpc schema --format markdown` from spec/keys.def; do not edit.\n"
          "     The speccorpus test fails when this file and the table disagree. -->\n\n"
          "A job spec is one YAML 1.1 document: a mapping of the keys below. Every key is\n"
          "known; an unknown key is an error with a did-you-mean suggestion, and so is a\n"
          "duplicate key. Aliases (`&a`/`*a`) are allowed; a document that expands to more\n"
          "than 100000 nodes, nests deeper than 64 levels or is larger than 16 MiB is refused.\n"
          "A key written with no value (`key:` or `key: null`) takes its default. Merge keys\n"
          "(`<<: *defaults`) work as in YAML 1.1, and top-level keys starting with `x-` are\n"
          "ignored, so they can hold anchors.\n\n"
          "`ddpc check FILE...` reports every problem of a file at once, in source order, as\n"
          "`file:line:col: error|warning: key.path: message`; it exits 0 when all files are\n"
          "valid (warnings allowed; `--strict` fails on them), 1 when one is invalid, and 2\n"
          "on a usage or I/O error. `--format github` prints the findings as Actions\n"
          "annotations; `--format json` prints one document for machines: every file checked\n"
          "(`{\"file\", \"status\": valid|invalid|unreadable, \"errors\", \"warnings\", \"notes\"}`,\n"
          "a clean one too) and every finding (`{\"file\", \"line\", \"col\", \"severity\",\n"
          "\"rule\", \"path\", \"message\"}`), whose `rule` is a stable code (the table at the\n"
          "end) that CI can filter and count on. `--no-data` skips reading data headers,\n"
          "`model.init_from` and the resume path, so the result depends on the spec only.\n\n"
          "Editors: `ddpc schema > ddpc.schema.json` writes the JSON Schema (2020-12) of this\n"
          "language; with the YAML language server, a first line\n"
          "`# yaml-language-server: $schema=ddpc.schema.json` gives completion and hover docs.\n"
          "The schema checks keys, types and ranges; the rules across keys below need `ddpc check`.\n\n"
          "Values:\n\n"
          "- integers are decimal (`1_000`, `0x10` and `0o17` work), or a float literal with an\n"
          "  exact integer value (`1e6`); a quoted `\"64\"` is a string, not a number; a number\n"
          "  with a leading zero (`017`) is refused, whatever its key: YAML 1.1 readers\n"
          "  (PyYAML) take it for octal, YAML 1.2 readers for decimal;\n"
          "- booleans are `true`/`false`, `yes`/`no`, `on`/`off`;\n"
          "- durations: a bare number is seconds; `90s`, `30m`, `1h30m`, `1.5h`, `500ms`,\n"
          "  `1:30:00`, or Python's `1 day, 2:00:00`; always positive;\n"
          "- input paths (data files) are relative to the spec file's directory (to the\n"
          "  current one for a spec read from standard input, `ddpc check -`); output\n"
          "  paths (checkpoints, metrics, exports) to the directory the job runs in;\n"
          "- nothing in a spec is executed or expanded: no shell, no environment variables,\n"
          "  no YAML tags other than the core ones, which mean their type as in any YAML\n"
          "  reader (`!!float 1` is 1.0; `!!int 1.5` is an error).\n\n", out);
    fputs("Rules across keys (checked by `ddpc check`):\n\n"
          "- `strategy: none` with several devices is an error;\n"
          "- several devices and no `lr_scaling`: a warning that shows the linearly scaled rate;\n"
          "- `nccl_timeout`/`rank_sync_timeout` on a single device: a warning; they are ignored;\n"
          "- `precision` bf16/fp16 with `accelerator: cpu` is an error;\n"
          "- `model.layers` must match the data: input size = features per sample (read from\n"
          "  IDX/NPY headers and the CSV's first line, or `features` of synthetic data); output\n"
          "  size = `classes` of synthetic data, and larger than every label of IDX/NPY label\n"
          "  files (labels are class indices from 0); `model.type: linear` takes exactly 2 sizes;\n"
          "- `loss: cross_entropy` needs class labels (not synthetic `classes: 0`);\n"
          "- `batch_size` × world size must not exceed the training set;\n"
          "- `schedule.warmup_steps` (or, for `decay: step`, the first decay) at or past the\n"
          "  run's last optimizer step: a warning; the rate never reaches its peak (decays);\n"
          "- `checkpoint.resume` naming a file that does not exist: an error when the path\n"
          "  is absolute, a warning when it is relative (the job runs in its own directory);\n"
          "- `launch.num_nodes` > 1 with launcher local needs `launch.master_addr`; GPUs\n"
          "  communicate over NCCL, CPU workers over gloo, so several nodes need no GPU;\n"
          "- `model.init_from` is read as the run reads it: a missing file, another model's\n"
          "  tensors, a tensor of another shape and a NaN or infinity are errors;\n"
          "- regression targets (NPY float labels) must number the model's outputs;\n"
          "- keys for one optimizer type or data format (e.g. `momentum` with adam) are errors.\n",
          out);
    md_block(out, DDPC_B_ROOT, "Top level", &done);
    md_rules(out);
}

/* ===================== docs/coming-from.md ===================== */

/* One finding of the validator on a spec given as text, as `ddpc check`
 * prints it: the doc's examples are the program's own words. */
static void example_finding(FILE *out, const char *yaml)
{
    struct ddpc_arena a = { 0 };
    struct ddpc_node *root = NULL;
    struct ddpc_diag d;
    struct ddpc_job job;
    struct spec_options opt = { .read_data_headers = 0 };
    diag_init(&d);
    if (load_yaml("job.yaml", yaml, strlen(yaml), &a, &root, &d) == 0)
        validate_job("job.yaml", root, &opt, &a, &job, &d);
    diag_sort(&d);
    for (int i = 0; i < d.n; i++) {
        fputs("    ", out);
        diag_print_entry(&d.v[i], DDPC_FMT_TEXT, out);
    }
    diag_free(&d);
    arena_free(&a);
}

static void tool_table(FILE *out, enum ddpc_tool t, const char *title, const char *intro)
{
    fprintf(out, "\n## %s\n\n%s\n\n| %s | ddpc | Notes |\n|---|---|---|\n", title, intro,
            t == DDPC_TOOL_TORCHRUN ? "Flag" : "Argument");
    for (int i = 0; i < ddpc_n_aliases; i++) {
        const struct ddpc_alias *a = &ddpc_aliases[i];
        if (a->tool != t)
            continue;
        fputs("| `", out);
        md_cell(out, a->shown);
        fputs("` | ", out);
        /* a NULL row whose name ddpc has since gained is that key */
        const char *target = a->target ? a->target
                             : validate_key_exists(a->name) ? a->name : NULL;
        if (target) {
            fputs("`", out);
            md_cell(out, target);
            fputs("`", out);
        } else {
            fputs("none", out);
        }
        fputs(" | ", out);
        if (a->target || !target)
            md_cell(out, a->note);
        fputs(" |\n", out);
    }
}

void spec_write_coming_from(FILE *out)
{
    fputs("# Coming from Lightning, torchrun or TrainingParams\n\n"
          "<!-- Generated by `ddpc schema --format coming-from` from spec/aliases.def and\n"
          "     spec/keys.def; do not edit. The speccorpus test fails when this file and the\n"
          "     tables disagree. -->\n\n"
          "ddpc keeps one spelling of each setting. Write another tool's name and\n"
          "`ddpc check` says, at that key's line, which key ddpc uses or why it has none:\n\n",
          out);
    example_finding(out, "epochs: 1\nbatch_size: 8\nmodel: {layers: [16, 2]}\n"
                         "data: {train: {format: synthetic}}\n"
                         "max_epochs: 10\naccumulate_grad_batches: 4\nprofiler: simple\n");
    fputs("\nKeys are checked in every block, so PyTorch's `lr` inside `optimizer:` gets the\n"
          "same answer; torchrun flags are recognized with their dashes (`--nproc-per-node`)\n"
          "or as YAML keys (`nproc_per_node`). `--set KEY=VALUE` on `ddpc check`, `plan` and\n"
          "`build` overrides a key from the command line, and the same messages name the\n"
          "`--set`.\n\n"
          "## Values\n\n"
          "Lightning's spellings of these values are accepted and mean what they mean in\n"
          "Lightning:\n\n"
          "| Key | Accepted | Means |\n|---|---|---|\n"
          "| `devices` | `auto`, `-1`, `all` | every device of the accelerator (GPUs, or one CPU worker per core) |\n"
          "| `devices` | `2`, `\"2\"`, `[0, 1]`, `\"0,1\"` | a count (indices 0..n-1) or a list of indices |\n",
          out);
    for (int i = 0; i < ddpc_n_keys; i++) {
        const struct ddpc_key *k = &ddpc_keys[i];
        if (k->block != DDPC_B_ROOT || k->type != DDPC_T_ENUM)
            continue;
        const struct ddpc_enum *e = k->values;
        for (int j = 0; j < e->n; j++) {
            if (e->v[j].kind != DDPC_EK_ALIAS)
                continue;
            const struct ddpc_enum_value *c = ddpc_enum_find(e, e->v[j].value);
            fprintf(out, "| `%s` | `%s` | `%s`", k->name, e->v[j].spelling, c ? c->spelling : "?");
            if (strcmp(k->name, "strategy") == 0 && strcmp(e->v[j].spelling, "auto") == 0)
                fputs(" with several devices, `none` with one", out);
            if (strcmp(k->name, "precision") == 0 && c && strcmp(c->spelling, "fp32") != 0)
                fputs(" compute, fp32 master weights (Lightning's mixed precision)", out);
            fputs(" |\n", out);
        }
    }
    fputs("\nValues ddpc does not have are errors that say what it does instead:\n\n"
          "| Key | Value | What ddpc does |\n|---|---|---|\n", out);
    for (int i = 0; i < ddpc_n_refused_values; i++) {
        const struct ddpc_refused_value *r = &ddpc_refused_values[i];
        fprintf(out, "| `%s` | `%s` | ", r->key, r->value);
        md_cell(out, r->note);
        fputs(" |\n", out);
    }
    tool_table(out, DDPC_TOOL_LIGHTNING, "Lightning: `Trainer(...)`",
               "Every argument of Lightning 2.x's Trainer, and the 1.x names still seen in "
               "configs.");
    tool_table(out, DDPC_TOOL_LIGHTNINGCLI, "LightningCLI config files",
               "A LightningCLI YAML nests the Trainer's arguments and names classes; a ddpc "
               "spec is flat and names no code.");
    tool_table(out, DDPC_TOOL_MODELCKPT, "Lightning: `ModelCheckpoint(...)`",
               "Checkpoints are written under `checkpoint_dir`, with `checkpoint.*` for cadence "
               "and retention.");
    tool_table(out, DDPC_TOOL_TORCHRUN, "torchrun",
               "`./job` is its own launcher: one worker process per device, supervised, "
               "restarted from the last checkpoint on failure. Multi-node jobs run `./job "
               "--node-rank N` on each node, or `launch.launcher: slurm` writes the sbatch script.");
    tool_table(out, DDPC_TOOL_PYTORCH, "PyTorch",
               "Optimizer, scheduler, DistributedDataParallel, DistributedSampler and "
               "DataLoader arguments.");
    tool_table(out, DDPC_TOOL_TRAININGPARAMS, "TrainingParams",
               "ddpc's top-level keys are TrainingParams' names, so a TrainingParams config's "
               "core carries over as it is.");
    tool_table(out, DDPC_TOOL_HF, "Hugging Face `TrainingArguments`",
               "The names a `TrainingArguments` config uses for the same settings.");
    fputs("\n## Learning rate across devices\n\n"
          "`learning_rate` is the single-device rate. `lr_scaling: linear` multiplies it by\n"
          "world size × `grad_accumulation` (the global batch grows by both), `sqrt` by the\n"
          "square root of that; `none` keeps it. With several devices and no `lr_scaling`,\n"
          "`ddpc check` warns and shows what linear would use, by the same rule `ddpc plan`\n"
          "and the job use:\n\n",
          out);
    example_finding(out, "epochs: 1\nbatch_size: 8\nmodel: {layers: [16, 2]}\n"
                         "data: {train: {format: synthetic}}\n"
                         "devices: 2\ngrad_accumulation: 4\nlearning_rate: 0.001\n");
}
