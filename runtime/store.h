/* store.h - the job's rendezvous: a small TCP key-value store.
 *
 * One store per job, hosted by node 0's launcher at launch.master_addr:
 * master_port, for every engine: gloo's ranks exchange their addresses
 * through it, NCCL's rank 0 publishes its unique id in it, and every rank
 * registers there, so a rank or node that never arrives is named when the
 * job's deadline passes instead of being waited for forever.
 *
 * The host side (store_host_*) binds the wildcard address of master_addr's
 * family (0.0.0.0 or ::) so other hosts reach it, without SO_REUSEPORT: a
 * second job on the same port is refused with EADDRINUSE, never shares the
 * listener. It serves from a forked child process, so the workers forked
 * later by the launcher hold none of its sockets. That child raises its
 * open-file limit to the hard limit (it holds a connection per waiting
 * rank); a connection past it is told so (the client's error names
 * ulimit -n) and closed, never left unanswered in the backlog.
 *
 * The client side (store_client_*) is one blocking TCP connection. Every
 * call that waits takes an absolute CLOCK_MONOTONIC deadline (comm.h);
 * get waits on the server for a key to appear, so it costs no polling.
 * A connection the store closes or resets fails with DDPC_E_STOPPED: the
 * store lives as long as node 0's launcher, so node 0 has stopped.
 *
 * The store trusts its network: like torch's TCPStore it has no
 * authentication, only bounds (keys <= 1 KiB, values <= 1 MiB). Bind it on
 * a cluster network, not on the internet.
 */
#ifndef DDPC_STORE_H
#define DDPC_STORE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "err.h"

#ifdef __cplusplus
extern "C" {
#endif

#define STORE_KEY_MAX   1024
#define STORE_VALUE_MAX (1u << 20)

/* ===== host ===== */

struct store_host {
    pid_t pid;          /* the serving child; 0 when not started */
    int   stop_fd;      /* write end of its stop pipe; -1 when not started */
    int   port;         /* the bound port (the one asked for, or the ephemeral one) */
};

/* Binds host:port's family wildcard (port 0: an ephemeral port, for tests),
 * the family found by a name lookup bounded by deadline (ddpc_now() time;
 * 0: none; a lookup unfinished by then is DDPC_E_TIMEOUT), listens, and
 * forks the serving child (it dies with the caller: PR_SET_PDEATHSIG). A port in use is DDPC_E_SYS with a message naming the
 * port and what to do. h->port is the bound port. */
int  store_host_start(struct store_host *h, const char *host, int port, double deadline,
                      struct ddpc_err *e);
/* Stops the child and reaps it (SIGKILL after 1 s). Safe on a zeroed or
 * never-started host (stop_fd must then be -1 or pid 0). */
void store_host_stop(struct store_host *h);

/* The serving loop itself, for tests that run it on a thread: serves
 * listen_fd until stop_fd is readable or hung up; closes neither. */
int  store_serve(int listen_fd, int stop_fd);
/* The listening socket store_host_start makes (CLOEXEC). *port_out: the
 * bound port. */
int  store_listen(const char *host, int port, double deadline, int *fd_out, int *port_out,
                  struct ddpc_err *e);

/* ===== client ===== */

struct store_client {
    int  fd;            /* -1 when closed */
    char addr[300];     /* "host:port" ("[v6]:port"), for messages */
};

/* Connects to host:port, retrying refused/unreachable connections (and
 * names that do not resolve yet: a cluster's DNS may learn node 0 late)
 * until deadline (node 0 may start later than this node). After 5 s of
 * failed attempts, and then every minute, prints to stderr that it is
 * still waiting and the last error. On timeout: DDPC_E_TIMEOUT naming the
 * address and the last error. */
int  store_client_connect(struct store_client *c, const char *host, int port, double deadline,
                          struct ddpc_err *e);
/* The same with flags:
 * STORE_CONNECT_REFUSED_STOPS: a connection refused at every address of
 *   host fails at once with DDPC_E_STOPPED ("node 0 has stopped"), for a
 *   client that met the store before (a later attempt of a job: node 0's
 *   launcher hosts the store for the job's whole life, so nothing
 *   listening there means it has ended); other errors are retried.
 * STORE_CONNECT_ONCE: one attempt, bounded by deadline, no notice: for a
 *   best-effort message to a store that may be gone. */
#define STORE_CONNECT_REFUSED_STOPS 1
#define STORE_CONNECT_ONCE          2
int  store_client_connect_ex(struct store_client *c, const char *host, int port,
                             double deadline, int flags, struct ddpc_err *e);
void store_client_close(struct store_client *c);

int  store_set(struct store_client *c, const char *key, const void *val, size_t len,
               struct ddpc_err *e);
/* Waits for key until deadline (0: no deadline; the server still answers).
 * *val (malloc'ed, the caller frees; one extra NUL byte after len) and *len.
 * Timeout: DDPC_E_TIMEOUT, "... waited N s for <who>" where who describes
 * the key to a person ("rank 3 (node 1)"); who NULL names the key. */
int  store_get(struct store_client *c, const char *key, void **val, size_t *len,
               double deadline, const char *who, struct ddpc_err *e);
/* store_get that also watches stop_key: it waits in slices of a second and
 * looks for stop_key between them; once stop_key is there it fails with
 * DDPC_E_STOPPED and stop_key's value (one line: "node 1 gave up: ...").
 * Another node's launcher sets that key when it gives up (ddprt.c), so the
 * ranks waiting for it stop within a second instead of at the deadline. */
int  store_get_watch(struct store_client *c, const char *key, const char *stop_key, void **val,
                     size_t *len, double deadline, const char *who, struct ddpc_err *e);
/* 1 if key exists, 0 if not (no waiting); negative on error. */
int  store_check(struct store_client *c, const char *key, struct ddpc_err *e);
/* Atomically adds delta to the integer counter key (0 if absent); *out: the
 * new value (may be NULL). */
int  store_add(struct store_client *c, const char *key, int64_t delta, int64_t *out,
               struct ddpc_err *e);

/* "host:port" with IPv6 addresses in brackets: "[::1]:29500". */
void store_format_addr(char *buf, size_t len, const char *host, int port);
/* Parses "HOST:PORT" or "[V6]:PORT". Returns 0 or -1. */
int  store_split_addr(const char *s, char *host, size_t len, int *port);

#ifdef __cplusplus
}
#endif
#endif /* DDPC_STORE_H */
