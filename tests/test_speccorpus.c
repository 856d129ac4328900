/* test_speccorpus.c - PLACEHOLDER, to be replaced by the module's owner. */
#include "suites.h"
Suite *speccorpus_suite(void) { return suite_create("speccorpus"); }
