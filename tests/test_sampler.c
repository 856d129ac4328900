/* test_sampler.c - sampler.c: DistributedSampler + DataLoader semantics.
 *
 * Shards are disjoint and cover the set (padding duplicates only the start
 * of the permutation); drop_last cuts instead; a new permutation each epoch,
 * the same one for the same seed; no shuffle is the identity; batching and
 * limit_train_batches; W=2 batch b covers W=1 batch 2b step for step. */
#include <stdlib.h>
#include <string.h>
#include "suites.h"
#include "sampler.h"

static void shard(struct ddpc_sampler *s, int64_t n, int rank, int world, int bs, int shuffle,
                  int drop_last, uint64_t seed)
{
    struct ddpc_err e = {0};
    ck_assert_msg(sampler_init(s, n, rank, world, bs, shuffle, drop_last, seed, 0, 1.0, &e) == 0,
                  "%s", e.msg);
}

START_TEST(disjoint_and_covering_with_padding)
{
    const int64_t n = 10;
    const int W = 3;
    int count[10] = {0};
    int64_t total = 0;
    for (int r = 0; r < W; r++) {
        struct ddpc_sampler s;
        shard(&s, n, r, W, 2, 1, 0, 5);
        ck_assert_int_eq(s.num_samples, 4);        /* ceil(10 / 3) */
        ck_assert_int_eq(s.n_batches, 2);
        for (int64_t k = 0; k < s.num_samples; k++) {
            ck_assert(s.indices[k] >= 0 && s.indices[k] < n);
            count[s.indices[k]]++;
        }
        total += s.num_samples;
        sampler_free(&s);
    }
    ck_assert_int_eq(total, 12);
    /* every sample at least once; exactly 2 duplicates, the permutation's first two */
    struct ddpc_sampler s0;
    shard(&s0, n, 0, 1, 10, 1, 0, 5);
    int dup = 0;
    for (int i = 0; i < 10; i++) {
        ck_assert_int_ge(count[i], 1);
        dup += count[i] - 1;
    }
    ck_assert_int_eq(dup, 2);
    ck_assert_int_eq(count[s0.indices[0]], 2);
    ck_assert_int_eq(count[s0.indices[1]], 2);
    sampler_free(&s0);
}
END_TEST

START_TEST(drop_last_cuts)
{
    int count[10] = {0};
    for (int r = 0; r < 3; r++) {
        struct ddpc_sampler s;
        shard(&s, 10, r, 3, 2, 1, 1, 5);
        ck_assert_int_eq(s.num_samples, 3);        /* floor(10 / 3) */
        ck_assert_int_eq(s.n_batches, 1);          /* 3 / 2, partial batch dropped */
        const int64_t *idx;
        ck_assert_int_eq(sampler_batch(&s, 0, &idx), 2);
        for (int k = 0; k < 3; k++)
            count[s.indices[k]]++;
        sampler_free(&s);
    }
    int seen = 0;
    for (int i = 0; i < 10; i++) {
        ck_assert_int_le(count[i], 1);             /* disjoint */
        seen += count[i];
    }
    ck_assert_int_eq(seen, 9);
}
END_TEST

START_TEST(epochs_and_seeds)
{
    struct ddpc_sampler a, b, c;
    shard(&a, 1000, 1, 2, 10, 1, 0, 42);
    shard(&b, 1000, 1, 2, 10, 1, 0, 42);
    shard(&c, 1000, 1, 2, 10, 1, 0, 43);
    ck_assert_mem_eq(a.indices, b.indices, 500 * sizeof(int64_t));      /* same seed */
    ck_assert(memcmp(a.indices, c.indices, 500 * sizeof(int64_t)) != 0); /* other seed */
    int64_t *e0 = malloc(500 * sizeof *e0);
    memcpy(e0, a.indices, 500 * sizeof *e0);
    sampler_set_epoch(&a, 1);
    ck_assert(memcmp(a.indices, e0, 500 * sizeof(int64_t)) != 0);      /* reshuffled */
    sampler_set_epoch(&a, 0);
    ck_assert_mem_eq(a.indices, e0, 500 * sizeof(int64_t));            /* reproducible */
    free(e0);
    sampler_free(&a);
    sampler_free(&b);
    sampler_free(&c);

    /* shuffle off: rank r gets r, r+W, ... in order */
    shard(&a, 7, 1, 2, 3, 0, 0, 42);
    ck_assert_int_eq(a.num_samples, 4);
    const int64_t want[4] = { 1, 3, 5, 0 };    /* position 7 wraps to the start */
    ck_assert_mem_eq(a.indices, want, sizeof want);
    const int64_t *idx;
    ck_assert_int_eq(a.n_batches, 2);
    ck_assert_int_eq(sampler_batch(&a, 1, &idx), 1);   /* partial last batch kept */
    ck_assert_int_eq(idx[0], 0);
    ck_assert_int_eq(sampler_batch(&a, 2, &idx), 0);
    sampler_free(&a);
}
END_TEST

START_TEST(limit_train_batches)
{
    struct ddpc_sampler s;
    struct ddpc_err e = {0};
    ck_assert_int_eq(sampler_init(&s, 100, 0, 1, 10, 1, 0, 1, 3, 1.0, &e), 0);
    ck_assert_int_eq(s.n_batches, 3);
    sampler_free(&s);
    ck_assert_int_eq(sampler_init(&s, 100, 0, 1, 10, 1, 0, 1, 0, 0.25, &e), 0);
    ck_assert_int_eq(s.n_batches, 2);          /* floor(10 * 0.25) */
    sampler_free(&s);
    ck_assert_int_eq(sampler_init(&s, 100, 0, 1, 10, 1, 0, 1, 0, 0.01, &e), 0);
    ck_assert_int_eq(s.n_batches, 1);          /* at least one */
    sampler_free(&s);
    ck_assert_int_eq(sampler_init(&s, 100, 0, 1, 10, 1, 0, 1, 500, 1.0, &e), 0);
    ck_assert_int_eq(s.n_batches, 10);         /* a cap, never more */
    sampler_free(&s);
    /* too few samples for one batch with drop_last */
    ck_assert_int_eq(sampler_init(&s, 5, 0, 2, 4, 1, 1, 1, 0, 1.0, &e), DDPC_E_DATA);
    sampler_free(&s);
}
END_TEST

START_TEST(two_ranks_cover_one_rank_batches)
{
    /* W=1 batch 8 vs W=2 batch 4: step k sees the same 8 samples */
    struct ddpc_sampler one, r0, r1;
    shard(&one, 64, 0, 1, 8, 1, 0, 77);
    shard(&r0, 64, 0, 2, 4, 1, 0, 77);
    shard(&r1, 64, 1, 2, 4, 1, 0, 77);
    for (int epoch = 0; epoch < 2; epoch++) {
        sampler_set_epoch(&one, epoch);
        sampler_set_epoch(&r0, epoch);
        sampler_set_epoch(&r1, epoch);
        ck_assert_int_eq(one.n_batches, r0.n_batches);
        for (int64_t b = 0; b < one.n_batches; b++) {
            const int64_t *a, *x, *y;
            int na = sampler_batch(&one, b, &a);
            int nx = sampler_batch(&r0, b, &x), ny = sampler_batch(&r1, b, &y);
            ck_assert_int_eq(na, nx + ny);
            int hit[64] = {0};
            for (int i = 0; i < na; i++)
                hit[a[i]]++;
            for (int i = 0; i < nx; i++)
                ck_assert_int_eq(hit[x[i]]--, 1);
            for (int i = 0; i < ny; i++)
                ck_assert_int_eq(hit[y[i]]--, 1);
        }
    }
    sampler_free(&one);
    sampler_free(&r0);
    sampler_free(&r1);
}
END_TEST

Suite *sampler_suite(void)
{
    Suite *s = suite_create("sampler");
    TCase *tc = tcase_create("sampler");
    tcase_add_test(tc, disjoint_and_covering_with_padding);
    tcase_add_test(tc, drop_last_cuts);
    tcase_add_test(tc, epochs_and_seeds);
    tcase_add_test(tc, limit_train_batches);
    tcase_add_test(tc, two_ranks_cover_one_rank_batches);
    suite_add_tcase(s, tc);
    return s;
}
