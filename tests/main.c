/* main.c - the one test runner: every suite in suites.h, Check's summary last.
 *
 *   build/tests/run_tests            all suites
 *   build/tests/run_tests load data  only the named suites
 *
 * Exit status is non-zero when any test failed. */
#include <stdlib.h>
#include <string.h>
#include <check.h>
#include "suites.h"

struct named_suite { const char *name; Suite *(*make)(void); };

#define DDPC_SUITE_ENTRY(n) { #n, n##_suite },
static const struct named_suite all_suites[] = { DDPC_SUITES(DDPC_SUITE_ENTRY) };

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
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
