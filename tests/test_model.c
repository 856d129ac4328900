/* test_model.c - PLACEHOLDER, to be replaced by the module's owner. */
#include "suites.h"
Suite *model_suite(void) { return suite_create("model"); }
