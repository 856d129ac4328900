/* test_load.c - PLACEHOLDER, to be replaced by the module's owner. */
#include "suites.h"
Suite *load_suite(void) { return suite_create("load"); }
