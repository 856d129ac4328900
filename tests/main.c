/* main.c - the one test runner: every suite in suites.h, Check's summary last.
 *
 *   build/tests/run_tests            all suites
 *   build/tests/run_tests load data  only the named suites
 *   DDPC_TEST_ONLY=a_test,another build/tests/run_tests faults
 *                                    only the named tests of those suites
 *
 * Last line: "N passed, M failed, K skipped" (a test that printed SKIP for
 * what this machine lacks counts as skipped). Exit status is non-zero when
 * any test failed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <check.h>
#include "suites.h"
#include "testutil.h"

struct named_suite { const char *name; Suite *(*make)(void); };

#define DDPC_SUITE_ENTRY(n) { #n, n##_suite },
static const struct named_suite all_suites[] = { DDPC_SUITES(DDPC_SUITE_ENTRY) };

/* Whether `name` is in the comma-separated list `list`. */
static int in_list(const char *name, const char *list)
{
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0)
            return 1;
        if (!end)
            break;
        p = end + 1;
    }
    return 0;
}

/* Every tcase_add_test* of every suite comes here (the Makefile links the
 * runner with --wrap=_tcase_add_test): with DDPC_TEST_ONLY set, a test not
 * named in it is never added, so it neither runs nor counts. */
void __real__tcase_add_test(TCase *tc, const TTest *ttest, int sig, int exit_value,
                            int start, int end);
void __wrap__tcase_add_test(TCase *tc, const TTest *ttest, int sig, int exit_value,
                            int start, int end);
void __wrap__tcase_add_test(TCase *tc, const TTest *ttest, int sig, int exit_value,
                            int start, int end)
{
    const char *only = getenv("DDPC_TEST_ONLY");
    if (only && *only && !in_list(ttest->name, only))
        return;
    __real__tcase_add_test(tc, ttest, sig, exit_value, start, end);
}

static int wanted(const char *name, int argc, char **argv)
{
    if (argc < 2)
        return 1;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return 1;
    return 0;
}

int main(int argc, char **argv)
{
    SRunner *sr = NULL;
    test_skip_init();   /* before the suites are made: some skip while made */
    size_t n = sizeof all_suites / sizeof all_suites[0];
    for (size_t i = 0; i < n; i++) {
        if (!wanted(all_suites[i].name, argc, argv))
            continue;
        if (!sr)
            sr = srunner_create(all_suites[i].make());
        else
            srunner_add_suite(sr, all_suites[i].make());
    }
    if (!sr)
        return 2;
    srunner_run_all(sr, CK_NORMAL);
    int run = srunner_ntests_run(sr), failed = srunner_ntests_failed(sr);
    int skipped = test_skipped();
    int passed = run - failed - skipped;
    /* after Check's own "100%: Checks: ..." line, the one CI's log reader
     * takes: a test that skipped a part (SKIP ...) counts as skipped, not
     * passed */
    printf("%d passed, %d failed, %d skipped\n", passed < 0 ? 0 : passed, failed, skipped);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
