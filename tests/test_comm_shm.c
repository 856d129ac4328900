/* test_comm_shm.c - PLACEHOLDER, to be replaced by the module's owner. */
#include "suites.h"
Suite *comm_shm_suite(void) { return suite_create("comm_shm"); }
