/* test_ops_cpu.c - PLACEHOLDER, to be replaced by the module's owner. */
#include "suites.h"
Suite *ops_cpu_suite(void) { return suite_create("ops_cpu"); }
