/* test_emit.c - PLACEHOLDER, to be replaced by the module's owner. */
#include "suites.h"
Suite *emit_suite(void) { return suite_create("emit"); }
