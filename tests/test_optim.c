/* test_optim.c - PLACEHOLDER, to be replaced by the module's owner. */
#include "suites.h"
Suite *optim_suite(void) { return suite_create("optim"); }
