/* spec_limits.c - how fast the spec loader refuses what it must refuse:
 * a 20000-key map with one duplicate (sorted duplicate detection), an alias
 * expansion bomb (bounded at 100000 nodes), 8 MiB of '[' (nesting bounded at
 * 64). The unit tests (tests/test_load.c) check that each is refused with
 * the right message; the time is measured here, where a loaded machine
 * gives a slow number instead of a failed test.
 *
 *   make bench && build/bench/spec_limits
 *
 * Prints the best of 5 per case; exits non-zero if a case is not refused.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "load.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Best of 5 load_yaml times of buf; -1 when it was accepted. */
static double best_refusal(const char *buf, size_t len)
{
    double best = 1e9;
    for (int r = 0; r < 5; r++) {
        struct ddpc_arena a;
        struct ddpc_node *root = NULL;
        struct ddpc_diag d;
        memset(&a, 0, sizeof a);
        diag_init(&d);
        double t0 = now_s();
        int rc = load_yaml("bench.yaml", buf, len, &a, &root, &d);
        double dt = now_s() - t0;
        arena_free(&a);
        diag_free(&d);
        if (rc == 0)
            return -1;
        best = dt < best ? dt : best;
    }
    return best;
}

int main(void)
{
    int bad = 0;
    size_t cap = 20001 * 16, o = 0;
    char *map = malloc(cap);
    size_t n = 8u << 20;
    char *deep = malloc(n);
    if (!map || !deep) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    for (int i = 0; i < 20000; i++)
        o += (size_t)snprintf(map + o, cap - o, "k%d: 1\n", i);
    o += (size_t)snprintf(map + o, cap - o, "k77: 2\n");
    const char *bomb =
        "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n"
        "b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
        "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
        "f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\ng: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]\n"
        "h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]\ni: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]\n";
    memset(deep, '[', n);
    struct { const char *what; const char *buf; size_t len; } cases[] = {
        { "20000-key map, one duplicate", map, o },
        { "alias expansion bomb", bomb, strlen(bomb) },
        { "8 MiB of '['", deep, n },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double t = best_refusal(cases[i].buf, cases[i].len);
        if (t < 0) {
            printf("%-32s ACCEPTED (must be refused)\n", cases[i].what);
            bad = 1;
        } else {
            printf("%-32s refused in %.2f ms (best of 5)\n", cases[i].what, t * 1e3);
        }
    }
    free(map);
    free(deep);
    return bad;
}
