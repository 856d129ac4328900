/* test_e2e.c - PLACEHOLDER, to be replaced by the module's owner. */
#include "suites.h"
Suite *e2e_suite(void) { return suite_create("e2e"); }
