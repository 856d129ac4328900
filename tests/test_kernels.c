/* test_kernels.c - PLACEHOLDER, to be replaced by the module's owner. */
#include "suites.h"
Suite *kernels_suite(void) { return suite_create("kernels"); }
