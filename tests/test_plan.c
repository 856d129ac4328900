/* test_plan.c - PLACEHOLDER, to be replaced by the module's owner. */
#include "suites.h"
Suite *plan_suite(void) { return suite_create("plan"); }
