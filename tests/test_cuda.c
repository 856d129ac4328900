/* test_cuda.c - PLACEHOLDER, to be replaced by the module's owner. */
#include "suites.h"
Suite *cuda_suite(void) { return suite_create("cuda"); }
