/* test_data.c - PLACEHOLDER, to be replaced by the module's owner. */
#include "suites.h"
Suite *data_suite(void) { return suite_create("data"); }
