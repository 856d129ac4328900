/* comm_gloo.h - the gloo communicator: CPU ranks on several hosts.
 *
 * comm_gloo.cc (C++, the only C++ in the runtime) fills struct ddpc_comm
 * over gloo's TCP transport. It is built into the plugin libddprt_gloo.so,
 * which the launcher dlopen()s only for a multi-node CPU job, so no
 * single-node job links C++ or gloo (the same reason the CUDA backend is a
 * plugin: a job's start-up maps only what it uses).
 *
 * Rendezvous goes through the job's store (store.h): every rank registers
 * its address under <prefix>/rank/<r>, waits for all the others (a rank
 * that never arrives is named, with its node, when the deadline passes),
 * then gloo connects its full mesh through the same store. While it waits
 * it watches <prefix>/stop, which a node that gave up sets (ddprt.c): then
 * it fails at once with DDPC_E_STOPPED and that node's reason, as it does
 * when node 0's store is gone (store.h).
 *
 * Semantics (comm.h): start queues the operation for the communicator's
 * thread, where gloo blocks; wait waits for it with the caller's deadline.
 * Each operation passes its deadline to gloo as its timeout. A peer whose
 * process ends resets or closes its connections, which gloo reports at
 * once: the error names the rank and node at the other end (DDPC_E_PEER).
 * A cut link shows only as the deadline passing (DDPC_E_TIMEOUT). After
 * any error or abort the communicator is broken: every later call fails at
 * once with DDPC_E_ABORTED and the first cause. SIGPIPE is ignored in the
 * calling process (a write to a dead peer must be an error, not a death).
 */
#ifndef DDPC_COMM_GLOO_H
#define DDPC_COMM_GLOO_H

#include "comm.h"
#include "err.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ddpc_gloo_init {
    const char *purpose;          /* "gradient" or "rank-sync" (outlives the comm) */
    int         rank, world;
    int         ranks_per_node;   /* to name a rank's node: rank / ranks_per_node */
    const char *store_host;       /* node 0's store: launch.master_addr */
    int         store_port;
    const char *prefix;           /* keys of this job attempt: "a0", "a1", ... */
    double      deadline;         /* absolute; bounds connecting and the rendezvous */
    double      default_timeout_s;/* for operations called with deadline 0 */
    int         store_met;        /* this node met the store at an earlier attempt: a
                                   * refused connection means node 0 has stopped */
};

struct ddpc_gloo_backend {
    const char *name;             /* "gloo" */
    /* Fills c. c->destroy is safe after a failed init. */
    int (*comm_init)(struct ddpc_comm *c, const struct ddpc_gloo_init *in, struct ddpc_err *e);
};

/* exported by libddprt_gloo.so (the name dlsym looks up) */
extern const struct ddpc_gloo_backend ddpc_gloo_backend;

#ifdef __cplusplus
}
#endif
#endif /* DDPC_COMM_GLOO_H */
