/* comm_shm.h - collectives between CPU worker processes on one host.
 *
 * The launcher maps one region per communicator (MAP_SHARED|MAP_ANONYMOUS)
 * BEFORE fork; every worker inherits the mapping and attaches to it as its
 * rank. Calls follow comm.h: absolute deadlines, DDPC_E_TIMEOUT naming the
 * ranks that did not arrive, DDPC_E_ABORTED / DDPC_E_PEER for asynchronous
 * failures. Sums run in rank order 0..W-1 for every element, so results are
 * bitwise reproducible for a given world size.
 *
 * Lifetimes: comm_shm_create (launcher) ... comm_shm_region_free (launcher,
 * after all workers are reaped). comm_shm_attach (worker) ... c->destroy(c),
 * which frees only the worker's handle, never the shared mapping.
 */
#ifndef DDPC_COMM_SHM_H
#define DDPC_COMM_SHM_H

#include <stddef.h>
#include <sys/types.h>
#include "comm.h"
#include "err.h"

#define DDPC_SHM_MAX_WORLD 1024

struct comm_shm_region;

/* Maps a region for `world` ranks whose slots hold `slot_floats` floats each
 * (0: a default of 1 Mi floats). Larger operations are done slot by slot.
 * The mapping costs (world + 4) * slot_floats * 4 bytes of address space
 * (slots, result, and 3 slots of shared_buffer); pages are only allocated
 * when touched. *r is NULL on failure. */
int  comm_shm_create(struct comm_shm_region **r, int world, size_t slot_floats,
                     struct ddpc_err *e);
/* Unmaps. Safe with NULL. Call once, in the process that created it, after
 * every worker using it has exited. */
void comm_shm_region_free(struct comm_shm_region *r);

/* Worker side, after fork: fills c (name "shm", purpose as given, which must
 * be a string that outlives c: "gradient", "rank-sync"). Records the calling
 * process's pid for the rank so peers can notice its death.
 * An all-reduce of the buffers grad_buffer hands out is zero-copy and
 * non-blocking (comm.h); any other all-reduce copies through the slots and
 * is done entirely in start, wait only reports. */
int  comm_shm_attach(struct ddpc_comm *c, struct comm_shm_region *r, int rank,
                     const char *purpose, struct ddpc_err *e);

/* Launcher side (or a dying worker): make every pending and future call on
 * the region fail with DDPC_E_ABORTED and `why` (the first reason given
 * wins). Lock-free: atomics, a copy and a futex wake, so it cannot block on
 * a rank that died holding anything. Safe with NULL. */
void comm_shm_abort_all(struct comm_shm_region *r, const char *why);
/* Launcher side: rank `rank` died; calls fail with DDPC_E_PEER and `why`
 * (unless an abort reason was recorded first). Safe with NULL. */
void comm_shm_mark_dead(struct comm_shm_region *r, int rank, const char *why);

#endif /* DDPC_COMM_SHM_H */
