/* test_load.c - spec/load.c: positions, the one-document rule, duplicate
 * keys, tags, and hostile input (alias bombs, NUL bytes, invalid UTF-8, deep
 * nesting, huge maps) refused without crashing (how fast:
 * build/bench/spec_limits). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "load.h"
#include "spec.h"
#include "suites.h"

struct loaded {
    struct ddpc_arena a;
    struct ddpc_node *root;
    struct ddpc_diag d;
    char *text;      /* the diagnostics as `ddpc check` prints them */
    int rc;
};

static void load_str(struct loaded *l, const char *buf, size_t len)
{
    memset(l, 0, sizeof *l);
    diag_init(&l->d);
    l->rc = load_yaml("t.yaml", buf, len, &l->a, &l->root, &l->d);
    size_t sz;
    FILE *f = open_memstream(&l->text, &sz);
    ck_assert_ptr_nonnull(f);
    diag_print(&l->d, 0, DDPC_FMT_TEXT, f);
    fclose(f);
}

static void loaded_free(struct loaded *l)
{
    arena_free(&l->a);
    diag_free(&l->d);
    free(l->text);
}

START_TEST(test_positions)
{
    struct loaded l;
    const char *y = "# comment\nepochs: 3\nmodel:\n  layers: [784, 256, 10]\n  name: 'q'\n";
    load_str(&l, y, strlen(y));
    ck_assert_int_eq(l.rc, 0);
    ck_assert_str_eq(l.text, "");
    ck_assert_int_eq(l.root->kind, DDPC_NODE_MAP);
    ck_assert_int_eq(l.root->n, 2);
    const struct ddpc_node *e = load_map_get(l.root, "epochs");
    ck_assert_int_eq(e->line, 2);
    ck_assert_int_eq(e->col, 9);
    ck_assert_str_eq(e->str, "3");
    ck_assert_int_eq(e->quoted, 0);
    const struct ddpc_node *layers = load_lookup(l.root, "model.layers");
    ck_assert_int_eq(layers->kind, DDPC_NODE_SEQ);
    ck_assert_int_eq(layers->n, 3);
    ck_assert_int_eq(layers->items[2]->line, 4);
    ck_assert_int_eq(layers->items[2]->col, 22);
    const struct ddpc_node *q = load_lookup(l.root, "model.name");
    ck_assert_int_eq(q->quoted, 1);
    ck_assert_int_eq(q->col, 9);
    ck_assert_ptr_null(load_lookup(l.root, "model.nope"));
    ck_assert_ptr_null(load_lookup(l.root, "epochs.x"));
    loaded_free(&l);
}
END_TEST

START_TEST(test_nulls_and_strings)
{
    struct loaded l;
    const char *y = "a:\nb: ~\nc: null\nd: ''\ne: !!str 5\nf: \"a\\0b\"\n";
    load_str(&l, y, strlen(y));
    ck_assert_int_eq(l.rc, 0);
    ck_assert(load_is_null(load_map_get(l.root, "a")));
    ck_assert(load_is_null(load_map_get(l.root, "b")));
    ck_assert(load_is_null(load_map_get(l.root, "c")));
    ck_assert(!load_is_null(load_map_get(l.root, "d")));
    ck_assert_int_eq(load_map_get(l.root, "e")->quoted, 1);
    /* an escaped NUL survives with its length, for the validator to refuse */
    ck_assert_uint_eq(load_map_get(l.root, "f")->len, 3);
    loaded_free(&l);
}
END_TEST

START_TEST(test_duplicate_keys)
{
    struct loaded l;
    const char *y = "a: 1\nb:\n  x: 1\n  x: 2\na: 3\n";
    load_str(&l, y, strlen(y));
    ck_assert_int_eq(l.rc, -1);
    /* the loader reports in close order; spec_load_job sorts */
    diag_sort(&l.d);
    free(l.text);
    size_t sz;
    FILE *f = open_memstream(&l.text, &sz);
    diag_print(&l.d, 0, DDPC_FMT_TEXT, f);
    fclose(f);
    ck_assert_str_eq(l.text,
                     "t.yaml:4:3: error: b.x: duplicate key 'x' (first given at 3:3)\n"
                     "t.yaml:5:1: error: a: duplicate key 'a' (first given at 1:1)\n");
    loaded_free(&l);
}
END_TEST

START_TEST(test_duplicate_keys_large_map)
{
    /* 20000 keys, one duplicate: sorted detection keeps this fast */
    size_t cap = 20001 * 16;
    char *buf = malloc(cap);
    size_t o = 0;
    for (int i = 0; i < 20000; i++)
        o += (size_t)snprintf(buf + o, cap - o, "k%d: 1\n", i);
    o += (size_t)snprintf(buf + o, cap - o, "k77: 2\n");
    struct loaded l;
    load_str(&l, buf, o);   /* its time: build/bench/spec_limits */
    ck_assert_int_eq(l.rc, -1);
    ck_assert_str_eq(l.text, "t.yaml:20001:1: error: k77: duplicate key 'k77' (first given at 78:1)\n");
    loaded_free(&l);
    free(buf);
}
END_TEST

START_TEST(test_aliases_shared_and_bounded)
{
    struct loaded l;
    const char *y = "a: &x {k: [1, 2]}\nb: *x\n";
    load_str(&l, y, strlen(y));
    ck_assert_int_eq(l.rc, 0);
    ck_assert_ptr_eq(load_map_get(l.root, "a"), load_map_get(l.root, "b"));
    loaded_free(&l);

    const char *bomb =
        "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n"
        "b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
        "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
        "f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\ng: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]\n"
        "h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]\ni: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]\n";
    load_str(&l, bomb, strlen(bomb));   /* its time: build/bench/spec_limits */
    ck_assert_int_eq(l.rc, -1);
    ck_assert_str_eq(l.text, "t.yaml:6:8: error: f[0]: document expands to more than 100000 "
                             "nodes (alias expansion bomb?); refusing to load it\n");
    loaded_free(&l);

    const char *rec = "a: &x [1, *x]\n";
    load_str(&l, rec, strlen(rec));
    ck_assert_int_eq(l.rc, -1);
    ck_assert_str_eq(l.text, "t.yaml:1:11: error: a[1]: alias '*x' has no complete anchor before "
                             "it (undefined or recursive)\n");
    loaded_free(&l);
}
END_TEST

START_TEST(test_merge_keys)
{
    struct loaded l;
    const char *y = "a: &a {x: 1, y: 2}\nb: &b {y: 5, z: 6}\n"
                    "c: {<<: *a, x: 3}\nd: {<<: [*a, *b], w: 0}\n";
    load_str(&l, y, strlen(y));
    ck_assert_int_eq(l.rc, 0);
    ck_assert_str_eq(load_lookup(l.root, "c.x")->str, "3");   /* explicit keys win */
    ck_assert_str_eq(load_lookup(l.root, "c.y")->str, "2");
    ck_assert_ptr_null(load_lookup(l.root, "c.<<"));
    ck_assert_str_eq(load_lookup(l.root, "d.y")->str, "2");   /* earlier sources win */
    ck_assert_str_eq(load_lookup(l.root, "d.z")->str, "6");
    ck_assert_int_eq(load_lookup(l.root, "d")->n, 4);
    loaded_free(&l);
}
END_TEST

START_TEST(test_hostile_bytes)
{
    struct loaded l;
    static const char nul[] = "a: 1\nb: x\0y\n";
    load_str(&l, nul, sizeof nul - 1);
    ck_assert_int_eq(l.rc, -1);
    ck_assert_str_eq(l.text, "t.yaml:2:5: error: control characters are not allowed (#x00)\n");
    loaded_free(&l);

    const char *utf = "a: caf\xc3\n";
    load_str(&l, utf, strlen(utf));
    ck_assert_int_eq(l.rc, -1);
    ck_assert_str_eq(l.text, "t.yaml:1:8: error: invalid trailing UTF-8 octet (#x0A)\n");
    loaded_free(&l);

    const char *lead = "a: \xff\n";
    load_str(&l, lead, strlen(lead));
    ck_assert_int_eq(l.rc, -1);
    ck_assert_str_eq(l.text, "t.yaml:1:4: error: invalid leading UTF-8 octet (#xFF)\n");
    loaded_free(&l);

    const char *syn = "a:\n  b: [1\nc: 2\n";
    load_str(&l, syn, strlen(syn));
    ck_assert_int_eq(l.rc, -1);
    ck_assert_str_eq(l.text, "t.yaml:3:2: error: did not find expected ',' or ']' "
                             "(while parsing a flow sequence at 2:6)\n");
    loaded_free(&l);

    const char *two = "a: 1\n---\nb: 2\n";
    load_str(&l, two, strlen(two));
    ck_assert_int_eq(l.rc, -1);
    ck_assert_str_eq(l.text, "t.yaml:2:1: error: more than one YAML document; a spec is one document\n");
    loaded_free(&l);

    const char *tag = "a: !!python/object:os.system x\nb: !custom 1\n";
    load_str(&l, tag, strlen(tag));
    ck_assert_int_eq(l.rc, -1);
    ck_assert_str_eq(l.text,
                     "t.yaml:1:4: error: a: unsupported tag '!!python/object:os.system'; a spec holds plain values only\n"
                     "t.yaml:2:4: error: b: unsupported tag '!custom'; a spec holds plain values only\n");
    loaded_free(&l);

    /* a core tag the value contradicts is refused: another reader would
     * see the tag's type (!!null 5 is null to PyYAML; ddpc read 5) */
    const char *core = "a: !!null 5\nb: !!int 1.5\nc: !!bool 1\nd: !!float 0x10\n"
                       "e: !!seq {x: 1}\nf: !!str [1]\ng: !!map 3\nh: ! [1]\n";
    load_str(&l, core, strlen(core));
    ck_assert_int_eq(l.rc, -1);
    ck_assert_str_eq(l.text,
                     "t.yaml:1:4: error: a: tag '!!null' needs null (~, null or nothing), found '5'; remove the tag or the value that contradicts it\n"
                     "t.yaml:2:4: error: b: tag '!!int' needs an integer, found '1.5'; remove the tag or the value that contradicts it\n"
                     "t.yaml:3:4: error: c: tag '!!bool' needs true or false, found '1'; remove the tag or the value that contradicts it\n"
                     "t.yaml:4:4: error: d: tag '!!float' needs a number, found '0x10'; remove the tag or the value that contradicts it\n"
                     "t.yaml:5:4: error: e: tag '!!seq' on a mapping: YAML readers refuse it; remove the tag\n"
                     "t.yaml:6:4: error: f: tag '!!str' on a sequence: YAML readers refuse it; remove the tag\n"
                     "t.yaml:7:4: error: g: tag '!!map' needs a mapping, found '3'; remove the tag or the value that contradicts it\n");
    loaded_free(&l);
    const char *typed = "a: !!float 1\nb: !!int \"7\"\nc: !!null ''\nd: !!float -2e3\n";
    load_str(&l, typed, strlen(typed));
    ck_assert_int_eq(l.rc, 0);
    ck_assert_str_eq(load_map_get(l.root, "a")->str, "1.0");
    ck_assert_uint_eq(load_map_get(l.root, "a")->len, 3);
    ck_assert_str_eq(load_map_get(l.root, "b")->str, "7");
    ck_assert_int_eq(load_map_get(l.root, "b")->quoted, 0);
    ck_assert(load_is_null(load_map_get(l.root, "c")));
    ck_assert_str_eq(load_map_get(l.root, "d")->str, "-2e3");
    loaded_free(&l);

    const char *key = "[a]: 1\n";
    load_str(&l, key, strlen(key));
    ck_assert_int_eq(l.rc, -1);
    ck_assert_str_eq(l.text, "t.yaml:1:1: error: mapping keys must be plain scalars, found a sequence\n");
    loaded_free(&l);

    load_str(&l, "", 0);
    ck_assert_int_eq(l.rc, 0);
    ck_assert_ptr_null(l.root);
    loaded_free(&l);
}
END_TEST

START_TEST(test_deep_nesting)
{
    /* 65 levels is refused; 8 MiB of '[' is refused as fast */
    size_t n = 8u << 20;
    char *buf = malloc(n);
    memset(buf, '[', n);
    struct loaded l;
    load_str(&l, buf, 64);
    ck_assert_int_eq(l.rc, -1);   /* unclosed, but within depth: a parse error */
    loaded_free(&l);
    load_str(&l, buf, n);   /* its time: build/bench/spec_limits */
    ck_assert_int_eq(l.rc, -1);
    ck_assert_str_eq(l.text, "t.yaml:1:65: error: nesting deeper than 64 levels\n");
    loaded_free(&l);
    memset(buf, ' ', n);
    load_str(&l, buf, DDPC_LOAD_MAX_BYTES + 1);
    ck_assert_int_eq(l.rc, -1);
    ck_assert_str_eq(l.text, "t.yaml: error: file is larger than 16 MiB\n");
    loaded_free(&l);
    free(buf);
}
END_TEST

START_TEST(test_node_count_bound)
{
    /* no aliases, just many nodes: still bounded */
    size_t cap = 4u << 20, o = 0;
    char *buf = malloc(cap);
    o += (size_t)snprintf(buf, cap, "a: [");
    for (int i = 0; i < 200000; i++)
        o += (size_t)snprintf(buf + o, cap - o, "1,");
    o += (size_t)snprintf(buf + o, cap - o, "1]\n");
    struct loaded l;
    load_str(&l, buf, o);
    ck_assert_int_eq(l.rc, -1);
    /* not called an alias expansion bomb: there is no alias */
    ck_assert_str_eq(l.text, "t.yaml:1:199999: error: a[99997]: document has more than 100000 "
                             "nodes (a spec has a few hundred: is this the right file?); "
                             "refusing to load it\n");
    loaded_free(&l);
    free(buf);
}
END_TEST

/* The spec file itself: a regular file at most 16 MiB (refused from its
 * size, without reading it); a FIFO is read as a pipe is (/dev/stdin,
 * <(...)), and one without a writer is empty at once: no hang. */
START_TEST(test_spec_file_kinds)
{
    char dir[] = "/tmp/ddpc-kinds-XXXXXX", fifo[64], big[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(fifo, sizeof fifo, "%s/fifo.yaml", dir);
    snprintf(big, sizeof big, "%s/big.yaml", dir);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    int fd = open(big, O_WRONLY | O_CREAT, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, (off_t)DDPC_LOAD_MAX_BYTES + 1), 0);
    close(fd);
    const char *paths[2] = { fifo, big };
    int want_rc[2] = { 1, 1 };
    const char *want_msg[2] = { "the spec is empty",
                                "file is larger than 16 MiB; not a job spec" };
    for (int i = 0; i < 2; i++) {
        struct ddpc_diag d;
        struct ddpc_job job;
        struct spec_doc *doc = NULL;
        diag_init(&d);
        int rc = spec_load_job(paths[i], NULL, &job, &doc, &d);   /* a FIFO: no hang */
        ck_assert_int_eq(rc, want_rc[i]);
        ck_assert_int_eq(d.io_error, rc == 2);
        ck_assert_int_eq(d.n, 1);
        ck_assert_str_eq(d.v[0].message, want_msg[i]);
        ck_assert_int_eq(d.v[0].line, i == 0);
        spec_doc_free(doc);
        diag_free(&d);
    }
    unlink(fifo);
    unlink(big);
    rmdir(dir);
}
END_TEST

/* Random byte mutations of a real spec: the loader and validator must
 * never crash or leak (run under `make sanitize`), whatever they report. */
START_TEST(test_mutation_fuzz)
{
    const char *base =
        "version: 1\nname: fuzz\ndevices: [0, 1]\nepochs: 3\nbatch_size: 64\n"
        "nccl_timeout: 30m\nmodel: {type: mlp, layers: [784, 256, 10]}\n"
        "optimizer: {type: sgd, momentum: 0.9}\nanchors: &a {x: [1, 2, *a]}\n"
        "data:\n  train:\n    format: synthetic\n    features: 784\n    classes: 10\n";
    size_t n = strlen(base);
    char *buf = malloc(n + 1);
    unsigned seed = 12345;
    char path[] = "/tmp/ddpc-fuzz-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    for (int it = 0; it < 3000; it++) {
        memcpy(buf, base, n);
        int muts = 1 + it % 4;
        for (int m = 0; m < muts; m++) {
            seed = seed * 1103515245u + 12345u;
            size_t pos = (seed >> 8) % n;
            seed = seed * 1103515245u + 12345u;
            static const char pool[] = "[]{}:,&*!|>'\"\n\t -#0\x00\xff\xc3?%@`";
            buf[pos] = pool[(seed >> 8) % (sizeof pool - 1)];
        }
        FILE *f = fopen(path, "wb");
        ck_assert_ptr_nonnull(f);
        ck_assert_uint_eq(fwrite(buf, 1, n, f), n);
        ck_assert_int_eq(fclose(f), 0);
        struct ddpc_diag d;
        struct ddpc_job job;
        struct spec_doc *doc = NULL;
        struct spec_options opt = { 0 };
        diag_init(&d);
        int rc = spec_load_job(path, &opt, &job, &doc, &d);
        ck_assert(rc == 0 || rc == 1);
        ck_assert_int_eq(rc == 1, d.n_errors > 0);
        spec_doc_free(doc);
        diag_free(&d);
    }
    unlink(path);
    free(buf);
}
END_TEST

Suite *load_suite(void)
{
    Suite *s = suite_create("load");
    TCase *tc = tcase_create("load");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_positions);
    tcase_add_test(tc, test_nulls_and_strings);
    tcase_add_test(tc, test_duplicate_keys);
    tcase_add_test(tc, test_duplicate_keys_large_map);
    tcase_add_test(tc, test_aliases_shared_and_bounded);
    tcase_add_test(tc, test_merge_keys);
    tcase_add_test(tc, test_hostile_bytes);
    tcase_add_test(tc, test_deep_nesting);
    tcase_add_test(tc, test_node_count_bound);
    tcase_add_test(tc, test_spec_file_kinds);
    tcase_add_test(tc, test_mutation_fuzz);
    suite_add_tcase(s, tc);
    return s;
}
