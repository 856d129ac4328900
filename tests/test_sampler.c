/* test_sampler.c - PLACEHOLDER, to be replaced by the module's owner. */
#include "suites.h"
Suite *sampler_suite(void) { return suite_create("sampler"); }
