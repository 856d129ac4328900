/* test_ddp.c - PLACEHOLDER, to be replaced by the module's owner. */
#include "suites.h"
Suite *ddp_suite(void) { return suite_create("ddp"); }
