/* store.c - the rendezvous store (store.h): a TCP key-value server and its client.
 *
 * Owns the wire protocol, the serving loop (one poll() over the listening
 * socket, the stop pipe and every connection; no threads) and the blocking
 * client. Name lookups, node 0's for the bind and the client's, run on
 * glibc's getaddrinfo_a thread, so that the job's deadline bounds them
 * too. Never trains, never knows about ranks beyond the `who` string a
 * caller passes for messages, never calls exit() except in the serving
 * child it forks. Prints one thing: the client's notice, after 5 s and then
 * every minute, that it still cannot reach the store, and why.
 *
 * Wire format (integers big-endian):
 *   request  u32 len | u8 op | u16 klen | key | body
 *            SET: value bytes   GET: u32 timeout_ms (~0: none)
 *            CHECK: -           ADD: i64 delta
 *   reply    u32 len | u8 status | body
 *            status 0 ok (GET: value; ADD: i64 new value; CHECK: u8 found)
 *            status 1 timed out (GET only)
 *            status 2 refused (ADD: the sum would overflow an i64)
 *            status 3 full (sent unasked, then the connection is closed:
 *                     the server has no descriptor left; body: the limit)
 * A GET for a key that is absent is parked on the server until a SET makes
 * the key appear or its timeout passes, so waiting costs no polling.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include "comm.h"
#include "store.h"
#include "units.h"

enum { OP_SET = 1, OP_GET = 2, OP_CHECK = 3, OP_ADD = 4 };
/* store_client_connect's notices while it cannot connect */
#define STORE_NOTE_FIRST_S 5.0
#define STORE_NOTE_EVERY_S 60.0
enum { ST_OK = 0, ST_TIMEOUT = 1, ST_REFUSED = 2, ST_FULL = 3 };

#define STORE_FRAME_MAX  (1 + 2 + STORE_KEY_MAX + STORE_VALUE_MAX)
#define STORE_IO_S       60.0   /* a reply to set/check/add: the server answers at once */
#define STORE_SLACK_S    5.0    /* a parked get: the server's own timeout fires first */
#define STORE_NO_TIMEOUT 0xffffffffu
#define STORE_SLICE_S    1.0    /* store_get_watch looks at its stop key this often */

static void put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void put_i64(uint8_t *p, int64_t v)
{
    uint64_t u = (uint64_t)v;
    put_u32(p, (uint32_t)(u >> 32));
    put_u32(p + 4, (uint32_t)u);
}

static int64_t get_i64(const uint8_t *p)
{
    return (int64_t)((uint64_t)get_u32(p) << 32 | get_u32(p + 4));
}

/* ===== addresses ===== */

void store_format_addr(char *buf, size_t len, const char *host, int port)
{
    int v6 = host && strchr(host, ':') != NULL;
    (void)snprintf(buf, len, "%s%s%s:%d", v6 ? "[" : "", host ? host : "?", v6 ? "]" : "", port);
}

int store_split_addr(const char *s, char *host, size_t len, int *port)
{
    const char *colon = strrchr(s, ':');
    if (!colon || colon == s)
        return -1;
    const char *h = s, *he = colon;
    if (*h == '[') {
        if (he < h + 2 || he[-1] != ']')
            return -1;
        h++;
        he--;
    } else if (memchr(s, ':', (size_t)(colon - s))) {
        return -1;   /* a bare IPv6 address: the port is ambiguous without brackets */
    }
    if ((size_t)(he - h) >= len || he == h)
        return -1;
    memcpy(host, h, (size_t)(he - h));
    host[he - h] = '\0';
    int64_t p;
    if (units_flag_int(colon + 1, 1, 65535, &p) < 0)
        return -1;
    *port = (int)p;
    return 0;
}

/* ----- name resolution with a deadline -----
 * getaddrinfo blocks for as long as the resolver likes (a name server that
 * never answers: resolv.conf's timeout x attempts x servers; an NSS module:
 * without bound), and the job's deadline and its "still waiting" notices
 * would wait behind it, node 0's bind as much as every client's connect.
 * glibc's getaddrinfo_a runs the lookup on its own thread; the caller waits
 * for it with gai_suspend, by a time it chooses. A lookup still running
 * when the caller gives up is cancelled, or, when glibc cannot cancel it
 * (it is inside the resolver), abandoned: its block is then never freed,
 * since glibc's thread still writes its result there. */
struct store_lookup {
    struct gaicb    cb;
    struct addrinfo hints;
    double          since;      /* ddpc_now() at its start */
    char            port[16];
    char            host[];
};

static struct store_lookup *lookup_start(const char *host, int port, int *gai_out)
{
    size_t hl = strlen(host) + 1;
    struct store_lookup *l = calloc(1, sizeof *l + hl);
    if (!l) {
        *gai_out = EAI_MEMORY;
        return NULL;
    }
    memcpy(l->host, host, hl);
    (void)snprintf(l->port, sizeof l->port, "%d", port);
    l->hints.ai_socktype = SOCK_STREAM;
    l->cb.ar_name = l->host;
    l->cb.ar_service = l->port;
    l->cb.ar_request = &l->hints;
    l->since = ddpc_now();
    struct gaicb *list[1] = { &l->cb };
    int g = getaddrinfo_a(GAI_NOWAIT, list, 1, NULL);
    if (g != 0) {
        free(l);
        *gai_out = g;
        return NULL;
    }
    return l;
}

/* Waits for l until `until`: 1 when it finished (its result or error in
 * gai_error(&l->cb)), 0 when it is still running. */
static int lookup_wait(struct store_lookup *l, double until)
{
    const struct gaicb *list[1] = { &l->cb };
    for (;;) {
        if (gai_error(&l->cb) != EAI_INPROGRESS)
            return 1;
        double left = until - ddpc_now();
        if (left <= 0)
            return 0;
        if (left > 3600)
            left = 3600;   /* an hour at a time: (time_t)1e308 is undefined */
        struct timespec ts = { (time_t)left, (long)((left - (double)(time_t)left) * 1e9) };
        (void)gai_suspend(list, 1, &ts);    /* done, timed out or interrupted: look again */
    }
}

/* Ends l: frees it, or abandons it to glibc's thread (see above). */
static void lookup_end(struct store_lookup *l)
{
    if (!l)
        return;
    int g = gai_error(&l->cb);
    if (g == EAI_INPROGRESS) {
        if (gai_cancel(&l->cb) == EAI_NOTCANCELED)
            return; /* still running inside the resolver: its memory is glibc's now */
        if ((g = gai_error(&l->cb)) == EAI_INPROGRESS)
            return;
    }
    if (g == 0 && l->cb.ar_result)
        freeaddrinfo(l->cb.ar_result);
    free(l);
}

/* Resolves host:port for a stream socket by `until` (0: no deadline): an
 * address at once, a name on glibc's lookup thread. Returns 1 with *res
 * (the caller frees it), 0 when the lookup is still running at `until`
 * (*lookup then carries it: call again to wait on, or lookup_end it), or
 * -1 with *gai_out a getaddrinfo code. The one lookup of master_addr, for
 * node 0 binding the store and every client connecting to it. */
static int resolve_by(const char *host, int port, double until, struct store_lookup **lookup,
                      struct addrinfo **res, int *gai_out)
{
    *res = NULL;
    struct addrinfo hints;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICHOST;    /* an address: no lookup, no thread */
    char ps[16];
    (void)snprintf(ps, sizeof ps, "%d", port);
    int g = getaddrinfo(host, ps, &hints, res);
    if (g == EAI_NONAME) {              /* a name */
        *res = NULL;
        if (!*lookup && !(*lookup = lookup_start(host, port, gai_out)))
            return -1;
        if (!lookup_wait(*lookup, until > 0 ? until : ddpc_now() + 365 * 86400.0))
            return 0;
        g = gai_error(&(*lookup)->cb);
        *res = g == 0 ? (*lookup)->cb.ar_result : NULL;
        (*lookup)->cb.ar_result = NULL;     /* ours to free now */
        lookup_end(*lookup);
        *lookup = NULL;
    }
    if (g != 0 || !*res) {
        *gai_out = g ? g : EAI_NONAME;
        return -1;
    }
    return 1;
}

/* The family to bind for a name: that of the first address it resolves to
 * (AF_INET when it resolves to none), looked up by resolve_by, bounded by
 * deadline, in a child process of its own. In the caller glibc's
 * getaddrinfo_a would leave its helper thread idling for a second after
 * the lookup, and a process forked in that second (the launcher forks its
 * workers next) inherits glibc's belief that the thread is there: its own
 * lookups are queued for a thread that does not exist and never finish
 * (node 0's workers could not reach the store by its name). Returns 1 with
 * *family, 0 when the lookup had not finished by deadline, -1 with errno. */
static int family_of_name(const char *host, int port, double deadline, int *family)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) == -1)
        return -1;
    (void)fflush(NULL);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == -1) {
        int err = errno;
        (void)close(p[0]);
        (void)close(p[1]);
        errno = err;
        return -1;
    }
    if (pid == 0) {
        /* dies with the caller, and of an interrupt as the caller's
         * handlers would not let it */
        (void)signal(SIGINT, SIG_DFL);
        (void)signal(SIGTERM, SIG_DFL);
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) == -1 || getppid() != parent)
            _exit(1);
        (void)close(p[0]);
        struct store_lookup *lookup = NULL;
        struct addrinfo *res = NULL;
        int gai = 0;
        int got = resolve_by(host, port, deadline, &lookup, &res, &gai);
        char c = got == 0 ? 't' : got > 0 && res->ai_family == AF_INET6 ? '6' : '4';
        _exit(write(p[1], &c, 1) == 1 ? 0 : 1);   /* a lookup left running ends with us */
    }
    (void)close(p[1]);
    char c = 0;
    ssize_t n;
    while ((n = read(p[0], &c, 1)) == -1 && errno == EINTR)
        ;
    int err = errno;
    (void)close(p[0]);
    while (waitpid(pid, NULL, 0) == -1 && errno == EINTR)
        ;
    if (n != 1) {
        errno = n == 0 ? EINTR : err;   /* it died (an interrupt) before it answered */
        return -1;
    }
    if (c == 't')
        return 0;
    *family = c == '6' ? AF_INET6 : AF_INET;
    return 1;
}

/* A host written as a loopback literal is bound exactly (nobody else can
 * reach it anyway); anything else binds its family's wildcard, because a
 * name may resolve to a loopback alias on node 0 itself (Debian maps the
 * host name to 127.0.1.1) while other hosts reach it by its real address. */
static int host_is_loopback_literal(const char *host, int *family)
{
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, host, &a4) == 1) {
        *family = AF_INET;
        return (ntohl(a4.s_addr) >> 24) == 127;
    }
    if (inet_pton(AF_INET6, host, &a6) == 1) {
        *family = AF_INET6;
        return IN6_IS_ADDR_LOOPBACK(&a6);
    }
    return 0;
}

int store_listen(const char *host, int port, double deadline, int *fd_out, int *port_out,
                 struct ddpc_err *e)
{
    *fd_out = -1;
    if (!host || !*host)
        host = "0.0.0.0";
    int family = AF_INET;
    int exact = host_is_loopback_literal(host, &family);
    if (!exact && family != AF_INET6 && !strchr(host, ':')) {
        /* a name: bind the wildcard of the family it resolves to (one that
         * does not resolve: IPv4's), found by the job's deadline */
        double t0 = ddpc_now();
        int got = family_of_name(host, port, deadline, &family);
        if (got == 0)
            return DDPC_FAIL(e, DDPC_E_TIMEOUT, "rendezvous store: the name lookup of node 0's "
                             "address '%s' has not finished within %.1f s (the job's deadline, "
                             "nccl_timeout): no answer from the name server.\n---> HINT: see "
                             "/etc/resolv.conf, or give launch.master_addr / --master as an IP "
                             "address", host, ddpc_now() - t0);
        if (got < 0)
            return DDPC_FAIL(e, DDPC_E_SYS, "rendezvous store: the name lookup of node 0's "
                             "address '%s': %s", host, strerror(errno));
    } else if (strchr(host, ':')) {
        family = AF_INET6;
    }
    struct sockaddr_storage ss;
    socklen_t sl;
    memset(&ss, 0, sizeof ss);
    if (family == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons((uint16_t)port);
        a->sin6_addr = in6addr_any;
        if (exact)
            (void)inet_pton(AF_INET6, host, &a->sin6_addr);
        sl = sizeof *a;
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        a->sin_port = htons((uint16_t)port);
        a->sin_addr.s_addr = htonl(INADDR_ANY);
        if (exact)
            (void)inet_pton(AF_INET, host, &a->sin_addr);
        sl = sizeof *a;
    }
    char where[300];
    store_format_addr(where, sizeof where, host, port);
    int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return DDPC_FAIL(e, DDPC_E_SYS, "rendezvous store %s: socket: %s", where, strerror(errno));
    int one = 1, zero = 0;
    /* SO_REUSEADDR only lets a restarted job bind over its old connections
     * in TIME_WAIT; without SO_REUSEPORT a second live listener is refused. */
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == -1 ||
        (family == AF_INET6 && !exact &&
         setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero) == -1)) {
        int err = errno;
        (void)close(fd);
        return DDPC_FAIL(e, DDPC_E_SYS, "rendezvous store %s: setsockopt: %s", where,
                         strerror(err));
    }
    if (bind(fd, (struct sockaddr *)&ss, sl) == -1) {
        int err = errno;
        (void)close(fd);
        if (err == EADDRINUSE)
            return DDPC_FAIL(e, DDPC_E_SYS, "rendezvous store: port %d on node 0 is already in "
                             "use (another job, or a previous run of this one still "
                             "exiting?): %s.\n---> HINT: give each concurrent job its own "
                             "launch.master_port, or pass --master HOST:PORT", port,
                             strerror(err));
        return DDPC_FAIL(e, DDPC_E_SYS, "rendezvous store: bind %s (for master %s): %s",
                         family == AF_INET6 ? "[::]" : "0.0.0.0", where, strerror(err));
    }
    if (listen(fd, 1024) == -1) {
        int err = errno;
        (void)close(fd);
        return DDPC_FAIL(e, DDPC_E_SYS, "rendezvous store %s: listen: %s", where, strerror(err));
    }
    memset(&ss, 0, sizeof ss);
    sl = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == -1) {
        int err = errno;
        (void)close(fd);
        return DDPC_FAIL(e, DDPC_E_SYS, "rendezvous store %s: getsockname: %s", where,
                         strerror(err));
    }
    *port_out = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                              : ((struct sockaddr_in *)&ss)->sin_port);
    *fd_out = fd;
    return 0;
}

/* ===== server ===== */

struct srv_kv {
    char    *key;
    uint8_t *val;
    size_t   len;
};

struct srv_conn {
    int      fd;
    uint8_t *in;            /* bytes read, not yet a whole frame */
    size_t   in_len, in_cap;
    char    *wait_key;      /* a parked GET, or NULL */
    double   wait_until;    /* 0: no timeout */
};

struct srv {
    struct srv_kv   *kv;
    size_t           n_kv, cap_kv;
    struct srv_conn *conn;
    size_t           n_conn, cap_conn;
};

static struct srv_kv *srv_find(struct srv *s, const char *key)
{
    for (size_t i = 0; i < s->n_kv; i++)
        if (strcmp(s->kv[i].key, key) == 0)
            return &s->kv[i];
    return NULL;
}

/* Writes all of buf to a non-blocking socket, waiting for room at most
 * STORE_IO_S in all. -1: the connection is to be dropped. */
static int srv_write(int fd, const uint8_t *buf, size_t n)
{
    double deadline = ddpc_now() + STORE_IO_S;
    while (n > 0) {
        ssize_t w = send(fd, buf, n, MSG_NOSIGNAL);
        if (w > 0) {
            buf += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            double left = deadline - ddpc_now();
            struct pollfd p = { fd, POLLOUT, 0 };
            if (left <= 0 || poll(&p, 1, (int)ddpc_wait_ms(left, INT_MAX)) < 0)
                return -1;
            continue;
        }
        return -1;
    }
    return 0;
}

static int srv_reply(int fd, int status, const void *body, size_t n)
{
    uint8_t hdr[5];
    put_u32(hdr, (uint32_t)(1 + n));
    hdr[4] = (uint8_t)status;
    if (srv_write(fd, hdr, sizeof hdr) < 0)
        return -1;
    return n ? srv_write(fd, body, n) : 0;
}

static void srv_drop(struct srv *s, size_t i)
{
    struct srv_conn *c = &s->conn[i];
    (void)close(c->fd);
    free(c->in);
    free(c->wait_key);
    s->conn[i] = s->conn[--s->n_conn];
}

/* Sets key to a copy of (val, n) and answers the GETs parked on it. -1:
 * out of memory. */
static int srv_store(struct srv *s, const char *key, const uint8_t *val, size_t n)
{
    struct srv_kv *kv = srv_find(s, key);
    uint8_t *v = malloc(n ? n : 1);
    if (!v)
        return -1;
    memcpy(v, val, n);
    if (!kv) {
        if (s->n_kv == s->cap_kv) {
            size_t cap = s->cap_kv ? 2 * s->cap_kv : 64;
            struct srv_kv *nk = realloc(s->kv, cap * sizeof *nk);
            if (!nk) {
                free(v);
                return -1;
            }
            s->kv = nk;
            s->cap_kv = cap;
        }
        char *k = strdup(key);
        if (!k) {
            free(v);
            return -1;
        }
        kv = &s->kv[s->n_kv++];
        kv->key = k;
        kv->val = NULL;
    }
    free(kv->val);
    kv->val = v;
    kv->len = n;
    for (size_t i = 0; i < s->n_conn; i++) {
        struct srv_conn *w = &s->conn[i];
        if (w->wait_key && strcmp(w->wait_key, key) == 0) {
            free(w->wait_key);
            w->wait_key = NULL;
            /* a waiter that cannot take its answer is dropped on its next
             * poll: shutdown makes it readable with EOF */
            if (srv_reply(w->fd, ST_OK, kv->val, kv->len) < 0)
                (void)shutdown(w->fd, SHUT_RDWR);
        }
    }
    return 0;
}

/* Handles one whole frame (p, n) of connection i. -1: drop it. */
static int srv_handle(struct srv *s, struct srv_conn *c, const uint8_t *p, size_t n)
{
    if (n < 3)
        return -1;
    int op = p[0];
    size_t klen = (size_t)p[1] << 8 | p[2];
    if (klen == 0 || klen > STORE_KEY_MAX || 3 + klen > n)
        return -1;
    char key[STORE_KEY_MAX + 1];
    memcpy(key, p + 3, klen);
    key[klen] = '\0';
    if (memchr(key, '\0', klen))
        return -1;
    const uint8_t *body = p + 3 + klen;
    size_t blen = n - 3 - klen;
    struct srv_kv *kv = srv_find(s, key);

    switch (op) {
    case OP_SET:
        if (blen > STORE_VALUE_MAX || srv_store(s, key, body, blen) < 0)
            return -1;
        return srv_reply(c->fd, ST_OK, NULL, 0);
    case OP_GET: {
        if (blen != 4)
            return -1;
        if (kv)
            return srv_reply(c->fd, ST_OK, kv->val, kv->len);
        uint32_t ms = get_u32(body);
        if (ms == 0)
            return srv_reply(c->fd, ST_TIMEOUT, NULL, 0);
        if (!(c->wait_key = strdup(key)))
            return -1;
        c->wait_until = ms == STORE_NO_TIMEOUT ? 0 : ddpc_now() + ms / 1000.0;
        return 0;
    }
    case OP_CHECK: {
        uint8_t found = kv != NULL;
        return srv_reply(c->fd, ST_OK, &found, 1);
    }
    case OP_ADD: {
        if (blen != 8)
            return -1;
        int64_t v = 0;
        if (kv && kv->len == 8)
            v = get_i64(kv->val);
        /* the delta is the peer's: a sum past an i64 is refused (signed
         * overflow is undefined), the counter kept */
        if (__builtin_add_overflow(v, get_i64(body), &v))
            return srv_reply(c->fd, ST_REFUSED, NULL, 0);
        uint8_t enc[8];
        put_i64(enc, v);
        if (srv_store(s, key, enc, 8) < 0)
            return -1;
        return srv_reply(c->fd, ST_OK, enc, 8);
    }
    default:
        return -1;
    }
}

/* Reads what is there and handles every whole frame, unless a GET is
 * parked (the client waits for its answer before sending more). -1: drop. */
static int srv_read(struct srv *s, size_t i)
{
    struct srv_conn *c = &s->conn[i];
    for (;;) {
        if (c->in_cap - c->in_len < 65536) {
            size_t cap = c->in_cap ? 2 * c->in_cap : 65536;
            if (cap > 4 + STORE_FRAME_MAX + 65536)
                cap = 4 + STORE_FRAME_MAX + 65536;
            if (cap <= c->in_len)
                return -1;
            uint8_t *nb = realloc(c->in, cap);
            if (!nb)
                return -1;
            c->in = nb;
            c->in_cap = cap;
        }
        ssize_t r = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, 0);
        if (r == 0)
            return -1;
        if (r < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            return -1;
        }
        c->in_len += (size_t)r;
    }
    size_t off = 0;
    while (!c->wait_key && c->in_len - off >= 4) {
        uint32_t n = get_u32(c->in + off);
        if (n > STORE_FRAME_MAX)
            return -1;
        if (c->in_len - off - 4 < n)
            break;
        if (srv_handle(s, c, c->in + off + 4, n) < 0)
            return -1;
        c = &s->conn[i];   /* srv_handle never reorders conn[], but be plain about it */
        off += 4 + n;
    }
    memmove(c->in, c->in + off, c->in_len - off);
    c->in_len -= off;
    return 0;
}

static void srv_free(struct srv *s)
{
    while (s->n_conn)
        srv_drop(s, s->n_conn - 1);
    for (size_t i = 0; i < s->n_kv; i++) {
        free(s->kv[i].key);
        free(s->kv[i].val);
    }
    free(s->kv);
    free(s->conn);
}

/* accept4 failed for want of a descriptor (every rank of a large job holds
 * a connection while it waits): the pending connection would stay in the
 * backlog, the listener readable, and the loop would spin on it while its
 * client waited for a reply until its deadline. The spare descriptor kept
 * for this is given up to take the connection, which is told why (ST_FULL,
 * with the limit) and closed. */
static void srv_refuse_full(int listen_fd, int *spare_fd, int err)
{
    if (*spare_fd >= 0) {
        (void)close(*spare_fd);
        *spare_fd = -1;
    }
    int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd >= 0) {
        struct rlimit rl;
        uint8_t msg[5 + 160];
        int n = snprintf((char *)msg + 5, sizeof msg - 5, "%s (ulimit -n: %lld)", strerror(err),
                         getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
                         ? (long long)rl.rlim_cur : -1LL);
        if (n < 0 || n >= (int)sizeof msg - 5)
            n = 0;
        put_u32(msg, (uint32_t)(1 + n));
        msg[4] = ST_FULL;
        /* a fresh connection's empty buffer takes it whole; never waits */
        (void)send(fd, msg, 5 + (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL);
        (void)close(fd);
    }
    *spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (*spare_fd < 0) {
        /* not even that: let the backlog wait instead of spinning */
        struct timespec ts = { 0, 10 * 1000 * 1000 };
        (void)nanosleep(&ts, NULL);
    }
}

int store_serve(int listen_fd, int stop_fd)
{
    struct srv s;
    memset(&s, 0, sizeof s);
    int spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);   /* see srv_refuse_full */
    struct pollfd *pfd = NULL;
    size_t pcap = 0;
    int rc = 0;
    for (;;) {
        if (pcap < s.n_conn + 2) {
            size_t cap = (s.n_conn + 2) * 2;
            struct pollfd *np = realloc(pfd, cap * sizeof *np);
            if (!np) {
                rc = -1;
                break;
            }
            pfd = np;
            pcap = cap;
        }
        pfd[0] = (struct pollfd){ stop_fd, POLLIN, 0 };
        pfd[1] = (struct pollfd){ listen_fd, POLLIN, 0 };
        double now = ddpc_now(), next = 0;
        for (size_t i = 0; i < s.n_conn; i++) {
            pfd[2 + i] = (struct pollfd){ s.conn[i].fd, POLLIN, 0 };
            double u = s.conn[i].wait_key ? s.conn[i].wait_until : 0;
            if (u > 0 && (next == 0 || u < next))
                next = u;
        }
        int timeout = next == 0 ? -1 : (int)ddpc_wait_ms(next - now, INT_MAX);
        int n = poll(pfd, 2 + s.n_conn, timeout);
        if (n < 0 && errno != EINTR) {
            rc = -1;
            break;
        }
        if (pfd[0].revents)
            break;   /* stop: readable or hung up */
        /* parked GETs whose time ran out */
        now = ddpc_now();
        for (size_t i = 0; i < s.n_conn; i++) {
            struct srv_conn *c = &s.conn[i];
            if (c->wait_key && c->wait_until > 0 && now >= c->wait_until) {
                free(c->wait_key);
                c->wait_key = NULL;
                if (srv_reply(c->fd, ST_TIMEOUT, NULL, 0) < 0)
                    (void)shutdown(c->fd, SHUT_RDWR);
            }
        }
        if (n <= 0)
            continue;
        /* connections first, from the end, so a drop does not skip one */
        size_t nc = s.n_conn;
        for (size_t k = nc; k-- > 0;) {
            if (!pfd[2 + k].revents)
                continue;
            /* pfd[2 + k] is conn k as it was when polled; drops only move
             * higher indices, which are done */
            if (srv_read(&s, k) < 0)
                srv_drop(&s, k);
        }
        if (pfd[1].revents & POLLIN) {
            int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
            if (fd < 0 && (errno == EMFILE || errno == ENFILE))
                srv_refuse_full(listen_fd, &spare_fd, errno);
            if (fd >= 0) {
                int one = 1;
                (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                if (s.n_conn == s.cap_conn) {
                    size_t cap = s.cap_conn ? 2 * s.cap_conn : 16;
                    struct srv_conn *nc2 = realloc(s.conn, cap * sizeof *nc2);
                    if (!nc2) {
                        (void)close(fd);
                        continue;
                    }
                    s.conn = nc2;
                    s.cap_conn = cap;
                }
                s.conn[s.n_conn++] = (struct srv_conn){ .fd = fd };
            }
        }
    }
    free(pfd);
    srv_free(&s);
    if (spare_fd >= 0)
        (void)close(spare_fd);
    return rc;
}

int store_host_start(struct store_host *h, const char *host, int port, double deadline,
                     struct ddpc_err *e)
{
    h->pid = 0;
    h->stop_fd = -1;
    h->port = 0;
    int lfd, bound;
    DDPC_TRY(store_listen(host, port, deadline, &lfd, &bound, e));
    int p[2];
    if (pipe2(p, O_CLOEXEC) == -1) {
        int err = errno;
        (void)close(lfd);
        return DDPC_FAIL(e, DDPC_E_SYS, "rendezvous store: pipe: %s", strerror(err));
    }
    (void)fflush(NULL);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == -1) {
        int err = errno;
        (void)close(lfd);
        (void)close(p[0]);
        (void)close(p[1]);
        return DDPC_FAIL(e, DDPC_E_SYS, "rendezvous store: fork: %s", strerror(err));
    }
    if (pid == 0) {
        /* the store lives exactly as long as node 0's launcher */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) == -1 || getppid() != parent)
            _exit(1);
        (void)signal(SIGINT, SIG_IGN);   /* the launcher stops it (stop pipe) */
        /* a connection per rank: a large world outgrows the usual soft
         * limit of 1024 descriptors; the hard limit is the store's to take */
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
            rl.rlim_cur = rl.rlim_max;
            (void)setrlimit(RLIMIT_NOFILE, &rl);
        }
        (void)signal(SIGPIPE, SIG_IGN);
        (void)close(p[1]);
        _exit(store_serve(lfd, p[0]) < 0 ? 1 : 0);
    }
    (void)close(lfd);
    (void)close(p[0]);
    h->pid = pid;
    h->stop_fd = p[1];
    h->port = bound;
    return 0;
}

void store_host_stop(struct store_host *h)
{
    if (!h)
        return;
    if (h->stop_fd >= 0)
        (void)close(h->stop_fd);
    h->stop_fd = -1;
    if (h->pid <= 0)
        return;
    for (int i = 0; i < 100; i++) {
        pid_t r = waitpid(h->pid, NULL, WNOHANG);
        if (r == h->pid || (r == -1 && errno != EINTR)) {
            h->pid = 0;
            return;
        }
        struct timespec ts = { 0, 10 * 1000 * 1000 };
        (void)nanosleep(&ts, NULL);
    }
    (void)kill(h->pid, SIGKILL);
    while (waitpid(h->pid, NULL, 0) == -1 && errno == EINTR)
        ;
    h->pid = 0;
}

/* ===== client ===== */

static int set_nonblock(int fd, int on)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl == -1)
        return -1;
    return fcntl(fd, F_SETFL, on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK);
}

/* One attempt at each resolved address, each bounded by `until`. On
 * failure *err_out is an errno, or 0 with *gai_out a getaddrinfo code
 * (glibc's EAI_* are negative, other systems' positive: never mixed).
 * *lookup carries a name lookup across attempts: one that has not finished
 * by `until` is waited for again at the next attempt (*gai_out is then
 * EAI_INPROGRESS), so a slow name server is given the whole deadline while
 * the caller still prints its notices and stops at its deadline. */
static int client_try(const char *host, int port, double until, struct store_lookup **lookup,
                      int *fd_out, int *err_out, int *gai_out, int *all_refused)
{
    *all_refused = 0;
    struct addrinfo *res;
    int got = resolve_by(host, port, until, lookup, &res, gai_out);
    if (got == 0) {
        /* the cause once it has taken a while; until then the last
         * attempt's (a refused connection) still is */
        if (ddpc_now() - (*lookup)->since >= 1.0 || (!*err_out && !*gai_out)) {
            *err_out = 0;
            *gai_out = EAI_INPROGRESS;
        }
        return -1;
    }
    if (got < 0) {
        *err_out = 0;
        return -1;
    }
    int ok = -1;
    int n_addr = 0, i_addr = 0, n_refused = 0;
    for (struct addrinfo *a = res; a; a = a->ai_next)
        n_addr++;
    for (struct addrinfo *a = res; a && ok < 0; a = a->ai_next, i_addr++) {
        int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            *err_out = errno;
            continue;
        }
        if (set_nonblock(fd, 1) == -1) {
            *err_out = errno;
            (void)close(fd);
            continue;
        }
        int r = connect(fd, a->ai_addr, a->ai_addrlen);
        if (r == -1 && errno == EINPROGRESS) {
            /* each address gets its share of what is left: one that never
             * answers (an IPv6 address with no route back, listed first)
             * took the whole attempt, and the next, the store's, got a
             * poll of 0 ms, too short for any handshake but loopback's */
            double left = (until - ddpc_now()) / (n_addr - i_addr);
            struct pollfd p = { fd, POLLOUT, 0 };
            int pr = poll(&p, 1, (int)ddpc_wait_ms(left, INT_MAX));
            if (pr == 1) {
                int soerr = 0;
                socklen_t sl = sizeof soerr;
                if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr == 0)
                    r = 0;
                else
                    errno = soerr ? soerr : errno;
            } else {
                errno = pr == 0 ? ETIMEDOUT : errno;
            }
        }
        if (r == 0 && set_nonblock(fd, 0) == 0) {
            int one = 1;
            (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            *fd_out = fd;
            ok = 0;
        } else {
            *err_out = errno;
            n_refused += errno == ECONNREFUSED;
            (void)close(fd);
        }
    }
    freeaddrinfo(res);
    *all_refused = ok < 0 && n_addr > 0 && n_refused == n_addr;
    return ok;
}

/* What the last attempt ran into, for a message. */
static const char *client_why(int err, int gai)
{
    if (err)
        return strerror(err);
    if (gai == EAI_INPROGRESS)
        return "the name lookup of its host has not finished (no answer from the name server "
               "yet: see /etc/resolv.conf, or give launch.master_addr / --master as an IP "
               "address)";
    return gai_strerror(gai);
}

int store_client_connect(struct store_client *c, const char *host, int port, double deadline,
                         struct ddpc_err *e)
{
    return store_client_connect_ex(c, host, port, deadline, 0, e);
}

int store_client_connect_ex(struct store_client *c, const char *host, int port,
                            double deadline, int flags, struct ddpc_err *e)
{
    c->fd = -1;
    store_format_addr(c->addr, sizeof c->addr, host, port);
    double t0 = ddpc_now(), next_note = t0 + STORE_NOTE_FIRST_S;
    int err = 0, gai = 0;
    struct store_lookup *lookup = NULL;
    for (int attempt = 0;; attempt++) {
        double now = ddpc_now();
        if (now >= next_note && (err || gai) && !(flags & STORE_CONNECT_ONCE)) {
            /* a typo in master_addr, or node 0 not started, would otherwise
             * be silent until the deadline (nccl_timeout: 30 min by default) */
            char left[48] = "no deadline";
            if (deadline > 0)
                (void)snprintf(left, sizeof left, "giving up in %.0f s", deadline - now);
            fprintf(stderr, "ddpc: still waiting for the rendezvous store at %s (node 0) after "
                    "%.0f s: %s; %s. Is node 0 running, and is launch.master_addr / --master "
                    "its address?\n", c->addr, now - t0, client_why(err, gai), left);
            next_note = now + STORE_NOTE_EVERY_S;
        }
        double until = now + 2.0;
        if (deadline > 0 && until > deadline)
            until = deadline;
        if (until > next_note && now < next_note)
            until = next_note;      /* a lookup that hangs must not hold back the notice */
        int fd, refused;
        if (client_try(host, port, until, &lookup, &fd, &err, &gai, &refused) == 0) {
            lookup_end(lookup);
            c->fd = fd;
            return 0;
        }
        if (refused && (flags & STORE_CONNECT_REFUSED_STOPS)) {
            lookup_end(lookup);
            return DDPC_FAIL(e, DDPC_E_STOPPED, "node 0's rendezvous store at %s is gone "
                             "(connection refused): node 0 has stopped (its ./job hosts the "
                             "store for the job's whole life, and this node met it there "
                             "before)", c->addr);
        }
        now = ddpc_now();
        if ((deadline > 0 && now >= deadline) || (flags & STORE_CONNECT_ONCE))
            break;
        if (lookup)
            continue;               /* the lookup goes on: wait for it again */
        /* refused: node 0 is not listening yet; back off up to 100 ms */
        double pause = attempt < 10 ? 0.01 : 0.1;
        if (deadline > 0 && now + pause > deadline)
            pause = deadline - now;
        struct timespec ts = { 0, (long)(pause * 1e9) };
        (void)nanosleep(&ts, NULL);
    }
    lookup_end(lookup);
    return DDPC_FAIL(e, DDPC_E_TIMEOUT, "could not reach the rendezvous store at %s (node 0) "
                     "within %.1f s: %s.\n---> HINT: node 0 must be running (it hosts the "
                     "store); check launch.master_addr / --master and that this host can "
                     "reach it", c->addr, ddpc_now() - t0,
                     err || gai ? client_why(err, gai) : "no attempt finished");
}

void store_client_close(struct store_client *c)
{
    if (c && c->fd >= 0) {
        (void)close(c->fd);
        c->fd = -1;
    }
}

static int client_reply(struct store_client *c, double until, int *status, uint8_t **body,
                        size_t *blen, struct ddpc_err *e);

/* A connection to the store that its end closed or reset: node 0's
 * launcher, which hosts the store for the job's whole life, has ended
 * (the serving child dies with it), and will not be back. */
#define STORE_GONE ": node 0 has stopped (its ./job hosts the store for the job's whole life)"
static int gone_errno(int err)
{
    return err == ECONNRESET || err == EPIPE;
}

static int client_send(struct store_client *c, int op, const char *key, const void *body,
                       size_t blen, struct ddpc_err *e)
{
    size_t klen = strlen(key);
    if (klen == 0 || klen > STORE_KEY_MAX)
        return DDPC_FAIL(e, DDPC_E_INVALID, "rendezvous store: key of %zu bytes (1..%d)", klen,
                         STORE_KEY_MAX);
    if (blen > STORE_VALUE_MAX)
        return DDPC_FAIL(e, DDPC_E_INVALID, "rendezvous store: value of %zu bytes for %s "
                         "(at most %u)", blen, key, STORE_VALUE_MAX);
    if (c->fd < 0)
        return DDPC_FAIL(e, DDPC_E_INVALID, "rendezvous store: not connected");
    uint8_t hdr[7];
    put_u32(hdr, (uint32_t)(3 + klen + blen));
    hdr[4] = (uint8_t)op;
    hdr[5] = (uint8_t)(klen >> 8);
    hdr[6] = (uint8_t)klen;
    struct { const void *p; size_t n; } parts[3] = { { hdr, 7 }, { key, klen }, { body, blen } };
    for (int i = 0; i < 3; i++) {
        const uint8_t *p = parts[i].p;
        size_t n = parts[i].n;
        while (n > 0) {
            ssize_t w = send(c->fd, p, n, MSG_NOSIGNAL);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0) {
                int err = errno;
                /* a store that has no descriptor left said so, and closed:
                 * the reset it sent for the rest of this frame must not
                 * hide why */
                uint8_t peek[5];
                int st;
                uint8_t *junk;
                size_t jn;
                if (recv(c->fd, peek, sizeof peek, MSG_PEEK | MSG_DONTWAIT) == (ssize_t)sizeof peek &&
                    peek[4] == ST_FULL &&
                    client_reply(c, ddpc_now() + 1.0, &st, &junk, &jn, e) < 0)
                    return e->code;
                return DDPC_FAIL(e, gone_errno(err) ? DDPC_E_STOPPED : DDPC_E_PEER,
                                 "rendezvous store %s: send: %s%s", c->addr, strerror(err),
                                 gone_errno(err) ? STORE_GONE : " (did node 0 end?)");
            }
            p += w;
            n -= (size_t)w;
        }
    }
    return 0;
}

/* Reads exactly n bytes by `until` (0: no limit). */
static int client_read(struct store_client *c, void *buf, size_t n, double until,
                       struct ddpc_err *e)
{
    uint8_t *p = buf;
    while (n > 0) {
        int ms = -1;
        if (until > 0) {
            double left = until - ddpc_now();
            if (left <= 0)
                return DDPC_FAIL(e, DDPC_E_TIMEOUT, "rendezvous store %s did not answer in "
                                 "time (node 0 unreachable?)", c->addr);
            ms = (int)ddpc_wait_ms(left, INT_MAX);
        }
        struct pollfd pf = { c->fd, POLLIN, 0 };
        int pr = poll(&pf, 1, ms);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr < 0)
            return DDPC_FAIL(e, DDPC_E_SYS, "rendezvous store %s: poll: %s", c->addr,
                             strerror(errno));
        if (pr == 0)
            continue;   /* the deadline check above ends it */
        ssize_t r = recv(c->fd, p, n, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 0)
            return DDPC_FAIL(e, DDPC_E_STOPPED, "rendezvous store %s closed the connection"
                             STORE_GONE, c->addr);
        if (r < 0) {
            int err = errno;
            return DDPC_FAIL(e, gone_errno(err) ? DDPC_E_STOPPED : DDPC_E_PEER,
                             "rendezvous store %s: %s%s", c->addr, strerror(err),
                             gone_errno(err) ? STORE_GONE : " (node 0's launcher ended?)");
        }
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

/* Reads one reply: status and a malloc'ed body (NUL-terminated). */
static int client_reply(struct store_client *c, double until, int *status, uint8_t **body,
                        size_t *blen, struct ddpc_err *e)
{
    uint8_t hdr[5];
    DDPC_TRY(client_read(c, hdr, 5, until, e));
    uint32_t n = get_u32(hdr);
    if (n < 1 || n > 1 + STORE_VALUE_MAX) {
        store_client_close(c);
        return DDPC_FAIL(e, DDPC_E_PEER, "rendezvous store %s: malformed reply (%u bytes); "
                         "is something else listening on that port?", c->addr, n);
    }
    *status = hdr[4];
    *blen = n - 1;
    if (*status == ST_FULL) {
        char why[200] = "";
        size_t take = *blen < sizeof why - 1 ? *blen : sizeof why - 1;
        if (client_read(c, why, take, until, e) < 0)
            why[0] = '\0';
        else
            why[take] = '\0';
        for (char *q = why; *q; q++)
            if ((unsigned char)*q < 0x20 || (unsigned char)*q >= 0x7f)
                *q = '?';   /* the peer's bytes, printed */
        store_client_close(c);
        ddpc_err_clear(e);
        return DDPC_FAIL(e, DDPC_E_SYS, "the rendezvous store %s (node 0) has no file "
                         "descriptor left for this connection: %s.\n---> HINT: raise the "
                         "open-file limit of node 0's ./job (ulimit -n; the store takes the "
                         "hard limit, and needs one descriptor per rank of the job)", c->addr,
                         why);
    }
    *body = malloc(*blen + 1);
    if (!*body)
        return DDPC_FAIL(e, DDPC_E_NOMEM, "rendezvous store: out of memory");
    if (client_read(c, *body, *blen, until, e) < 0) {
        free(*body);
        *body = NULL;
        return e->code ? e->code : DDPC_E_PEER;
    }
    (*body)[*blen] = '\0';
    return 0;
}

int store_set(struct store_client *c, const char *key, const void *val, size_t len,
              struct ddpc_err *e)
{
    DDPC_TRY(client_send(c, OP_SET, key, val, len, e));
    int st;
    uint8_t *b;
    size_t n;
    DDPC_TRY(client_reply(c, ddpc_now() + STORE_IO_S, &st, &b, &n, e));
    free(b);
    if (st != ST_OK)
        return DDPC_FAIL(e, DDPC_E_PEER, "rendezvous store %s refused set %s", c->addr, key);
    return 0;
}

/* store_get, its message counting the wait from t0; *answered (may be
 * NULL): 1 when the store replied, so the connection is in step (its own
 * timeout included), 0 when it failed before the reply (no answer in
 * time, a closed connection) */
static int client_get(struct store_client *c, const char *key, void **val, size_t *len,
                      double deadline, const char *who, double t0, int *answered,
                      struct ddpc_err *e)
{
    *val = NULL;
    *len = 0;
    if (answered)
        *answered = 0;
    uint32_t ms = STORE_NO_TIMEOUT;
    if (deadline > 0) {
        double left = deadline - ddpc_now();
        ms = (uint32_t)ddpc_wait_ms(left, STORE_NO_TIMEOUT - 1);
    }
    uint8_t body[4];
    put_u32(body, ms);
    DDPC_TRY(client_send(c, OP_GET, key, body, 4, e));
    int st;
    uint8_t *b;
    size_t n;
    DDPC_TRY(client_reply(c, deadline > 0 ? deadline + STORE_SLACK_S : 0, &st, &b, &n, e));
    if (answered)
        *answered = 1;
    if (st == ST_TIMEOUT) {
        free(b);
        return DDPC_FAIL(e, DDPC_E_TIMEOUT, "rendezvous store %s: waited %.1f s for %s%s%s, "
                         "which never arrived", c->addr, ddpc_now() - t0,
                         who ? who : "key '", who ? "" : key, who ? "" : "'");
    }
    if (st != ST_OK) {
        free(b);
        return DDPC_FAIL(e, DDPC_E_PEER, "rendezvous store %s: get %s: status %d", c->addr,
                         key, st);
    }
    *val = b;
    *len = n;
    return 0;
}

int store_get(struct store_client *c, const char *key, void **val, size_t *len,
              double deadline, const char *who, struct ddpc_err *e)
{
    return client_get(c, key, val, len, deadline, who, ddpc_now(), NULL, e);
}

int store_get_watch(struct store_client *c, const char *key, const char *stop_key, void **val,
                    size_t *len, double deadline, const char *who, struct ddpc_err *e)
{
    double t0 = ddpc_now();
    for (;;) {
        /* the key first: a rendezvous whose keys are there costs no more */
        double slice = ddpc_now() + STORE_SLICE_S;
        int last = deadline > 0 && slice >= deadline;
        int answered;
        int rc = client_get(c, key, val, len, last ? deadline : slice, who, t0, &answered, e);
        /* only the store's own timeout goes on: a store that did not answer
         * in time (its reply may still come, out of step with the next
         * request) or a read error ends the wait, as it ends store_get */
        if (rc == 0 || last || e->code != DDPC_E_TIMEOUT || !answered)
            return rc;
        ddpc_err_clear(e);
        int found = store_check(c, stop_key, e);
        if (found < 0)
            return found;
        if (!found)
            continue;
        void *v = NULL;
        size_t n = 0;
        DDPC_TRY(client_get(c, stop_key, &v, &n, ddpc_now() + STORE_SLICE_S, NULL, ddpc_now(),
                            NULL, e));
        for (char *q = v; *q; q++)
            if ((unsigned char)*q < 0x20 || (unsigned char)*q >= 0x7f)
                *q = ' ';   /* another node's words, printed on one line */
        rc = DDPC_FAIL(e, DDPC_E_STOPPED, "%.400s (at the rendezvous; this node stops too)",
                       (char *)v);
        free(v);
        return rc;
    }
}

int store_check(struct store_client *c, const char *key, struct ddpc_err *e)
{
    DDPC_TRY(client_send(c, OP_CHECK, key, NULL, 0, e));
    int st;
    uint8_t *b;
    size_t n;
    DDPC_TRY(client_reply(c, ddpc_now() + STORE_IO_S, &st, &b, &n, e));
    int found = st == ST_OK && n == 1 && b[0] == 1;
    free(b);
    return found;
}

int store_add(struct store_client *c, const char *key, int64_t delta, int64_t *out,
              struct ddpc_err *e)
{
    uint8_t body[8];
    put_i64(body, delta);
    DDPC_TRY(client_send(c, OP_ADD, key, body, 8, e));
    int st;
    uint8_t *b;
    size_t n;
    DDPC_TRY(client_reply(c, ddpc_now() + STORE_IO_S, &st, &b, &n, e));
    if (st == ST_REFUSED) {
        free(b);
        return DDPC_FAIL(e, DDPC_E_PEER, "rendezvous store %s: add %lld to %s would overflow "
                         "the counter", c->addr, (long long)delta, key);
    }
    if (st != ST_OK || n != 8) {
        free(b);
        return DDPC_FAIL(e, DDPC_E_PEER, "rendezvous store %s: add %s: bad reply", c->addr, key);
    }
    if (out)
        *out = get_i64(b);
    free(b);
    return 0;
}
