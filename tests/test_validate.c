/* test_validate.c - PLACEHOLDER, to be replaced by the module's owner. */
#include "suites.h"
Suite *validate_suite(void) { return suite_create("validate"); }
