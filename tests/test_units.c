/* test_units.c - PLACEHOLDER, to be replaced by the module's owner. */
#include "suites.h"
Suite *units_suite(void) { return suite_create("units"); }
