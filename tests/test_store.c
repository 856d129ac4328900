/* test_store.c - the rendezvous store (runtime/store.c) on loopback.
 *
 * Every case hosts its own store on an ephemeral port (store_host_start
 * with port 0) and talks to it with real clients, some in forked
 * processes; nothing binds a fixed port.
 */
#include <limits.h>
#include <math.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <poll.h>
#include <sched.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <check.h>
#include "suites.h"
#include "testutil.h"
#include "comm.h"
#include "store.h"

static struct store_host start_host(const char *host)
{
    struct store_host h;
    struct ddpc_err e = { 0 };
    ck_assert_msg(store_host_start(&h, host, 0, 0, &e) == 0, "%s", e.msg);
    ck_assert_int_gt(h.port, 0);
    return h;
}

static void connect_to(struct store_client *c, const char *host, int port)
{
    struct ddpc_err e = { 0 };
    ck_assert_msg(store_client_connect(c, host, port, ddpc_deadline_after(5), &e) == 0, "%s",
                  e.msg);
}

START_TEST(set_get_check_add)
{
    struct store_host h = start_host("127.0.0.1");
    struct store_client c;
    connect_to(&c, "127.0.0.1", h.port);
    struct ddpc_err e = { 0 };
    ck_assert_int_eq(store_check(&c, "a", &e), 0);
    ck_assert_int_eq(store_set(&c, "a", "hello", 5, &e), 0);
    ck_assert_int_eq(store_check(&c, "a", &e), 1);
    void *v;
    size_t n;
    ck_assert_int_eq(store_get(&c, "a", &v, &n, ddpc_deadline_after(5), NULL, &e), 0);
    ck_assert_uint_eq(n, 5);
    ck_assert_str_eq((char *)v, "hello");   /* NUL-terminated past len */
    free(v);
    /* overwrite, empty value, binary value */
    ck_assert_int_eq(store_set(&c, "a", "", 0, &e), 0);
    ck_assert_int_eq(store_get(&c, "a", &v, &n, ddpc_deadline_after(5), NULL, &e), 0);
    ck_assert_uint_eq(n, 0);
    free(v);
    unsigned char bin[256];
    for (int i = 0; i < 256; i++)
        bin[i] = (unsigned char)i;
    ck_assert_int_eq(store_set(&c, "bin", bin, sizeof bin, &e), 0);
    ck_assert_int_eq(store_get(&c, "bin", &v, &n, ddpc_deadline_after(5), NULL, &e), 0);
    ck_assert_uint_eq(n, 256);
    ck_assert_int_eq(memcmp(v, bin, 256), 0);
    free(v);
    int64_t x = 0;
    ck_assert_int_eq(store_add(&c, "ctr", 5, &x, &e), 0);
    ck_assert_int_eq(x, 5);
    ck_assert_int_eq(store_add(&c, "ctr", -7, &x, &e), 0);
    ck_assert_int_eq(x, -2);
    /* a value too large is refused before anything is sent */
    ck_assert_int_lt(store_set(&c, "big", bin, STORE_VALUE_MAX + 1, &e), 0);
    ck_assert_int_eq(e.code, DDPC_E_INVALID);
    store_client_close(&c);
    store_host_stop(&h);
}
END_TEST

/* A get parked before the set is answered when the set comes, from
 * another process, without polling. */
START_TEST(get_waits_for_a_later_set)
{
    struct store_host h = start_host("127.0.0.1");
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        struct store_client c;
        struct ddpc_err e = { 0 };
        usleep(200 * 1000);
        if (store_client_connect(&c, "127.0.0.1", h.port, ddpc_deadline_after(5), &e) < 0 ||
            store_set(&c, "late", "v1", 2, &e) < 0)
            _exit(1);
        _exit(0);
    }
    struct store_client c;
    connect_to(&c, "127.0.0.1", h.port);
    struct ddpc_err e = { 0 };
    void *v;
    size_t n;
    double t0 = ddpc_now();
    ck_assert_msg(store_get(&c, "late", &v, &n, ddpc_deadline_after(5), "the late key", &e) == 0,
                  "%s", e.msg);
    double dt = ddpc_now() - t0;
    ck_assert_str_eq((char *)v, "v1");
    free(v);
    ck_assert_msg(dt > 0.15 && dt < 2.0, "waited %.3f s", dt);
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    store_client_close(&c);
    store_host_stop(&h);
}
END_TEST

/* A wait's milliseconds (comm.h ddpc_wait_ms): rounded up, none when the
 * deadline has passed, capped where a deadline weeks or centuries away
 * (nccl_timeout: 30d, 1e308) overflowed poll()'s int. */
START_TEST(wait_ms_is_bounded)
{
    ck_assert_int_eq(ddpc_wait_ms(2.5, INT_MAX), 2501);
    ck_assert_int_eq(ddpc_wait_ms(0.0004, INT_MAX), 1);
    ck_assert_int_eq(ddpc_wait_ms(0.0, INT_MAX), 0);
    ck_assert_int_eq(ddpc_wait_ms(-3.0, INT_MAX), 0);
    ck_assert_int_eq(ddpc_wait_ms(NAN, INT_MAX), 0);
    ck_assert_int_eq(ddpc_wait_ms(30 * 86400.0, INT_MAX), INT_MAX);
    ck_assert_int_eq(ddpc_wait_ms(1e308, INT_MAX), INT_MAX);
    ck_assert_int_eq(ddpc_wait_ms(1e308, 1000000000000LL), 1000000000000LL);
}
END_TEST

START_TEST(get_timeout_names_who)
{
    struct store_host h = start_host("127.0.0.1");
    struct store_client c;
    connect_to(&c, "127.0.0.1", h.port);
    struct ddpc_err e = { 0 };
    void *v;
    size_t n;
    double t0 = ddpc_now();
    ck_assert_int_eq(store_get(&c, "rank/3", &v, &n, t0 + 0.3, "rank 3 (node 1)", &e),
                     DDPC_E_TIMEOUT);
    double dt = ddpc_now() - t0;
    ck_assert_msg(dt >= 0.29 && dt < 1.5, "timed out after %.3f s", dt);
    ck_assert_msg(strstr(e.msg, "rank 3 (node 1)") && strstr(e.msg, "never arrived"), "%s",
                  e.msg);
    /* the connection stays usable after a timeout */
    ddpc_err_clear(&e);
    ck_assert_int_eq(store_set(&c, "rank/3", "x", 1, &e), 0);
    ck_assert_int_eq(store_get(&c, "rank/3", &v, &n, ddpc_deadline_after(1), NULL, &e), 0);
    free(v);
    store_client_close(&c);
    store_host_stop(&h);
}
END_TEST

/* A wait that watches a stop key (a node that gave up sets it): it ends
 * within a slice of the key's arrival with its value, DDPC_E_STOPPED; with
 * none, it times out at its deadline and counts the whole wait. */
START_TEST(get_watch_stops_on_the_stop_key)
{
    struct store_host h = start_host("127.0.0.1");
    struct store_client c;
    connect_to(&c, "127.0.0.1", h.port);
    struct ddpc_err e = { 0 };
    void *v;
    size_t n;
    double t0 = ddpc_now();
    ck_assert_int_eq(store_get_watch(&c, "a1/rank/1", "a1/stop", &v, &n, t0 + 2.5,
                                     "rank 1 (node 1)", &e), DDPC_E_TIMEOUT);
    double dt = ddpc_now() - t0;
    ck_assert_msg(dt >= 2.45 && dt < 3.5, "timed out after %.3f s", dt);
    ck_assert_msg(strstr(e.msg, "waited 2.") && strstr(e.msg, "rank 1 (node 1)"), "%s", e.msg);
    /* the key, when it comes first */
    ddpc_err_clear(&e);
    ck_assert_int_eq(store_set(&c, "a1/rank/1", "x", 1, &e), 0);
    ck_assert_int_eq(store_get_watch(&c, "a1/rank/1", "a1/stop", &v, &n, 0, NULL, &e), 0);
    ck_assert_int_eq((int)n, 1);
    free(v);
    /* the stop key, set by another client while this one waits */
    pid_t k = fork();
    ck_assert_int_ge(k, 0);
    if (k == 0) {
        struct store_client o;
        struct ddpc_err oe = { 0 };
        usleep(300 * 1000);
        if (store_client_connect(&o, "127.0.0.1", h.port, ddpc_deadline_after(5), &oe) < 0 ||
            store_set(&o, "a1/stop", "node 1 gave up: bad\ndata", 24, &oe) < 0)
            _exit(1);
        _exit(0);
    }
    t0 = ddpc_now();
    ck_assert_int_eq(store_get_watch(&c, "a1/rank/2", "a1/stop", &v, &n, t0 + 30, NULL, &e),
                     DDPC_E_STOPPED);
    dt = ddpc_now() - t0;
    int st;
    ck_assert_int_eq(waitpid(k, &st, 0), k);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    ck_assert_msg(dt < 2.0, "stopped after %.3f s", dt);
    ck_assert_msg(strstr(e.msg, "node 1 gave up: bad data"), "%s", e.msg);
    store_client_close(&c);
    store_host_stop(&h);
}
END_TEST

/* A store that takes the connection but never answers (node 0 frozen, a
 * link that drops its packets): store_get_watch fails as store_get does,
 * a few seconds past its deadline, not after another full request's wait
 * on a connection whose get is still unanswered. */
START_TEST(get_watch_on_a_silent_store_keeps_its_deadline)
{
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(lfd, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t al = sizeof a;
    ck_assert_int_eq(bind(lfd, (struct sockaddr *)&a, sizeof a), 0);
    ck_assert_int_eq(listen(lfd, 4), 0);
    ck_assert_int_eq(getsockname(lfd, (struct sockaddr *)&a, &al), 0);
    struct store_client c;
    connect_to(&c, "127.0.0.1", ntohs(a.sin_port));   /* in the backlog: never served */
    struct ddpc_err e = { 0 };
    void *v;
    size_t n;
    double t0 = ddpc_now();
    int rc = store_get_watch(&c, "a1/rank/1", "a1/stop", &v, &n, t0 + 1.5, "rank 1 (node 1)",
                             &e);
    double dt = ddpc_now() - t0;
    ck_assert_int_eq(rc, DDPC_E_TIMEOUT);
    ck_assert_msg(dt < 1.5 + 5 + 1, "gave up after %.1f s (deadline 1.5 s): %s", dt, e.msg);
    ck_assert_msg(strstr(e.msg, "did not answer"), "%s", e.msg);
    store_client_close(&c);
    (void)close(lfd);
}
END_TEST

/* Many clients at once (as a world of ranks does), each setting its key
 * and waiting for everyone else's. */
START_TEST(many_clients_all_gather)
{
    struct store_host h = start_host("127.0.0.1");
    enum { N = 24 };
    pid_t pids[N];
    for (int r = 0; r < N; r++) {
        pids[r] = fork();
        ck_assert_int_ge(pids[r], 0);
        if (pids[r] == 0) {
            struct store_client c;
            struct ddpc_err e = { 0 };
            char key[32], val[32];
            if (store_client_connect(&c, "127.0.0.1", h.port, ddpc_deadline_after(10), &e) < 0)
                _exit(2);
            snprintf(key, sizeof key, "r/%d", r);
            snprintf(val, sizeof val, "v%d", r * 7);
            if (store_set(&c, key, val, strlen(val), &e) < 0)
                _exit(3);
            for (int k = 0; k < N; k++) {
                void *v;
                size_t n;
                snprintf(key, sizeof key, "r/%d", k);
                snprintf(val, sizeof val, "v%d", k * 7);
                if (store_get(&c, key, &v, &n, ddpc_deadline_after(10), NULL, &e) < 0)
                    _exit(4);
                int ok = n == strlen(val) && memcmp(v, val, n) == 0;
                free(v);
                if (!ok)
                    _exit(5);
            }
            if (store_add(&c, "done", 1, NULL, &e) < 0)
                _exit(6);
            _exit(0);
        }
    }
    for (int r = 0; r < N; r++) {
        int st;
        ck_assert_int_eq(waitpid(pids[r], &st, 0), pids[r]);
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "client %d: status 0x%x", r, st);
    }
    struct store_client c;
    connect_to(&c, "127.0.0.1", h.port);
    struct ddpc_err e = { 0 };
    int64_t done = 0;
    ck_assert_int_eq(store_add(&c, "done", 0, &done, &e), 0);
    ck_assert_int_eq(done, N);
    store_client_close(&c);
    store_host_stop(&h);
}
END_TEST

/* Two jobs on one port: the second is refused with a message, not
 * handed a shared listener. */
START_TEST(second_job_on_the_port_is_refused)
{
    struct store_host h = start_host("127.0.0.1");
    struct store_host h2;
    struct ddpc_err e = { 0 };
    ck_assert_int_lt(store_host_start(&h2, "127.0.0.1", h.port, 0, &e), 0);
    ck_assert_msg(strstr(e.msg, "already in use") && strstr(e.msg, "master_port"), "%s", e.msg);
    char num[16];
    snprintf(num, sizeof num, "%d", h.port);
    ck_assert_msg(strstr(e.msg, num), "%s", e.msg);
    store_host_stop(&h);
}
END_TEST

START_TEST(ipv6_in_brackets)
{
    char host[64];
    int port = 0;
    ck_assert_int_eq(store_split_addr("[::1]:29500", host, sizeof host, &port), 0);
    ck_assert_str_eq(host, "::1");
    ck_assert_int_eq(port, 29500);
    ck_assert_int_eq(store_split_addr("10.1.2.3:80", host, sizeof host, &port), 0);
    ck_assert_str_eq(host, "10.1.2.3");
    ck_assert_int_eq(store_split_addr("node-0.cluster:1", host, sizeof host, &port), 0);
    ck_assert_str_eq(host, "node-0.cluster");
    ck_assert_int_eq(store_split_addr("::1:29500", host, sizeof host, &port), -1);
    ck_assert_int_eq(store_split_addr("[::1]", host, sizeof host, &port), -1);
    ck_assert_int_eq(store_split_addr("h:0", host, sizeof host, &port), -1);
    ck_assert_int_eq(store_split_addr("h:65536", host, sizeof host, &port), -1);
    ck_assert_int_eq(store_split_addr(":5", host, sizeof host, &port), -1);
    ck_assert_int_eq(store_split_addr("h: 5", host, sizeof host, &port), -1);   /* strtol's blank */
    ck_assert_int_eq(store_split_addr("h:+5", host, sizeof host, &port), 0);
    char buf[80];
    store_format_addr(buf, sizeof buf, "::1", 7);
    ck_assert_str_eq(buf, "[::1]:7");
    store_format_addr(buf, sizeof buf, "10.0.0.1", 7);
    ck_assert_str_eq(buf, "10.0.0.1:7");

    /* a real IPv6 store, where the machine has ::1 */
    int s6 = socket(AF_INET6, SOCK_STREAM, 0);
    if (s6 < 0) {
        test_skip("ipv6 store", "no IPv6 sockets here (%s)", strerror(errno));
        return;
    }
    close(s6);
    struct store_host h;
    struct ddpc_err e = { 0 };
    if (store_host_start(&h, "::1", 0, 0, &e) < 0) {
        test_skip("ipv6 store", "cannot bind [::1]: %s", e.msg);
        return;
    }
    struct store_client c;
    connect_to(&c, "::1", h.port);
    ck_assert_ptr_nonnull(strstr(c.addr, "[::1]:"));
    ck_assert_int_eq(store_set(&c, "k", "v6", 2, &e), 0);
    void *v;
    size_t n;
    ck_assert_int_eq(store_get(&c, "k", &v, &n, ddpc_deadline_after(2), NULL, &e), 0);
    ck_assert_str_eq((char *)v, "v6");
    free(v);
    store_client_close(&c);
    store_host_stop(&h);
}
END_TEST

/* No store: connect gives up at its deadline and names the address. A
 * store that goes away under a waiting client: the client is told at once. */
START_TEST(unreachable_and_vanishing_store)
{
    /* an ephemeral port nobody listens on any more */
    struct store_host h = start_host("127.0.0.1");
    int port = h.port;
    store_host_stop(&h);
    struct store_client c;
    struct ddpc_err e = { 0 };
    double t0 = ddpc_now();
    ck_assert_int_eq(store_client_connect(&c, "127.0.0.1", port, t0 + 0.4, &e), DDPC_E_TIMEOUT);
    double dt = ddpc_now() - t0;
    ck_assert_msg(dt >= 0.35 && dt < 2.0, "gave up after %.3f s", dt);
    ck_assert_msg(strstr(e.msg, "127.0.0.1:") && strstr(e.msg, "node 0"), "%s", e.msg);
    /* a client that met the store before: refused means node 0 has stopped */
    ddpc_err_clear(&e);
    t0 = ddpc_now();
    ck_assert_int_eq(store_client_connect_ex(&c, "127.0.0.1", port, t0 + 5,
                                             STORE_CONNECT_REFUSED_STOPS, &e), DDPC_E_STOPPED);
    ck_assert_msg(ddpc_now() - t0 < 0.5, "gave up after %.3f s", ddpc_now() - t0);
    ck_assert_msg(strstr(e.msg, "connection refused") && strstr(e.msg, "node 0 has stopped"),
                  "%s", e.msg);
    /* one try: no retrying until the deadline */
    ddpc_err_clear(&e);
    t0 = ddpc_now();
    ck_assert_int_eq(store_client_connect_ex(&c, "127.0.0.1", port, t0 + 5, STORE_CONNECT_ONCE,
                                             &e), DDPC_E_TIMEOUT);
    ck_assert_msg(ddpc_now() - t0 < 0.5, "gave up after %.3f s", ddpc_now() - t0);

    h = start_host("127.0.0.1");
    connect_to(&c, "127.0.0.1", h.port);
    pid_t pid = h.pid;
    pid_t k = fork();
    ck_assert_int_ge(k, 0);
    if (k == 0) {
        usleep(200 * 1000);
        kill(pid, SIGKILL);
        _exit(0);
    }
    ddpc_err_clear(&e);
    void *v;
    size_t n;
    t0 = ddpc_now();
    /* the store lives as long as node 0's launcher: not a fault to retry */
    ck_assert_int_eq(store_get(&c, "never", &v, &n, ddpc_deadline_after(20), NULL, &e),
                     DDPC_E_STOPPED);
    ck_assert_msg(ddpc_now() - t0 < 2.0, "noticed after %.3f s", ddpc_now() - t0);
    ck_assert_msg(strstr(e.msg, "closed the connection") && strstr(e.msg, "node 0 has stopped"),
                  "%s", e.msg);
    waitpid(k, NULL, 0);
    store_client_close(&c);
    store_host_stop(&h);
}
END_TEST

/* A client that cannot connect says so on stderr after 5 s, naming the
 * address and the cause, instead of waiting silently until its deadline
 * (nccl_timeout: 30 min by default) as it did when master_addr was wrong. */
START_TEST(waiting_client_says_why_after_5_s)
{
    struct store_host h = start_host("127.0.0.1");
    int port = h.port;
    store_host_stop(&h);   /* nobody listens there any more: refused */
    char path[] = "/tmp/ddpc-test-store-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    fflush(stderr);
    int saved = dup(2);
    ck_assert_int_ge(saved, 0);
    ck_assert_int_ge(dup2(fd, 2), 0);
    struct store_client c;
    struct ddpc_err e = { 0 };
    double t0 = ddpc_now();
    int rc = store_client_connect(&c, "127.0.0.1", port, t0 + 5.6, &e);
    fflush(stderr);
    ck_assert_int_ge(dup2(saved, 2), 0);
    close(saved);
    char out[1024] = "";
    ssize_t n = pread(fd, out, sizeof out - 1, 0);
    close(fd);
    unlink(path);
    out[n > 0 ? n : 0] = '\0';
    ck_assert_int_eq(rc, DDPC_E_TIMEOUT);
    char want[128];
    snprintf(want, sizeof want, "still waiting for the rendezvous store at 127.0.0.1:%d (node 0) "
             "after 5 s: %s", port, strerror(ECONNREFUSED));
    ck_assert_msg(strstr(out, want), "stderr: '%s'", out);
    ck_assert_msg(strstr(e.msg, strerror(ECONNREFUSED)), "%s", e.msg);
}
END_TEST

/* ----- name resolution in namespaces of the test's own ----- */

/* In the calling process: a network and mount namespace of its own, with
 * `target` (/etc/resolv.conf, /etc/hosts) replaced by a bind mount of a
 * file holding text. Returns 0, or -1 with why filled (no root, no
 * namespaces). */
static int private_net_with_file(const char *target, const char *text, char *why, size_t cap)
{
    char tmp[] = "/tmp/ddpc-test-etc-XXXXXX";
    int fd = mkstemp(tmp);
    if (fd < 0) {
        snprintf(why, cap, "mkstemp: %s", strerror(errno));
        return -1;
    }
    size_t len = strlen(text);
    int ok = write(fd, text, len) == (ssize_t)len;
    close(fd);
    const char *step = !ok ? "write" : NULL;
    if (!step && unshare(CLONE_NEWNS | CLONE_NEWNET) != 0)
        step = "unshare(CLONE_NEWNS | CLONE_NEWNET)";
    if (!step && mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
        step = "mount --make-rprivate /";
    if (!step && mount(tmp, target, NULL, MS_BIND, NULL) != 0)
        step = "bind mount over the file";
    int e = errno;
    unlink(tmp);   /* the mount holds it */
    if (step) {
        snprintf(why, cap, "%s (%s): %s", step, target, strerror(e));
        return -1;
    }
    return 0;
}

/* A name server that never answers: private_net_with_file's namespaces,
 * /etc/resolv.conf naming a name server on 127.0.0.1 with a 30 s timeout,
 * loopback up and a socket bound there that reads no query. */
static int silent_dns_enter(char *why, size_t cap, int *dns_fd)
{
    if (private_net_with_file("/etc/resolv.conf",
                              "nameserver 127.0.0.1\noptions timeout:30 attempts:1\n", why,
                              cap) != 0)
        return -1;
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "lo");
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(53) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (s < 0 || ioctl(s, SIOCGIFFLAGS, &ifr) != 0 || (ifr.ifr_flags |= IFF_UP, 0) ||
        ioctl(s, SIOCSIFFLAGS, &ifr) != 0 || bind(s, (struct sockaddr *)&a, sizeof a) != 0) {
        snprintf(why, cap, "loopback name server: %s", strerror(errno));
        return -1;
    }
    *dns_fd = s;    /* bound, never read: queries go unanswered */
    return 0;
}

/* Runs body in a child inside silent_dns_enter's namespaces, its stderr
 * to a file, and reads what body writes to its fd for at most limit_s.
 * out: that text ("SKIP why" when the namespaces could not be made), err:
 * its stderr. Returns the seconds it took. */
static double in_silent_dns(void (*body)(int fd), double limit_s, char *out, size_t cap,
                            char *err, size_t err_cap)
{
    int pfd[2];
    ck_assert_int_eq(pipe(pfd), 0);
    char errpath[] = "/tmp/ddpc-test-store-XXXXXX";
    int errfd = mkstemp(errpath);
    ck_assert_int_ge(errfd, 0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        char why[256] = "";
        int dns = -1;
        close(pfd[0]);
        if (silent_dns_enter(why, sizeof why, &dns) != 0) {
            dprintf(pfd[1], "SKIP %s", why);
            _exit(0);
        }
        (void)dup2(errfd, 2);
        body(pfd[1]);
        fflush(stderr);
        _exit(0);
    }
    close(pfd[1]);
    size_t n = 0;
    double t0 = ddpc_now();
    struct pollfd p = { pfd[0], POLLIN, 0 };
    while (n < cap - 1 && ddpc_now() - t0 < limit_s && poll(&p, 1, 200) >= 0) {
        if (!(p.revents & (POLLIN | POLLHUP)))
            continue;
        ssize_t r = read(pfd[0], out + n, cap - 1 - n);
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    out[n] = '\0';
    double took = ddpc_now() - t0;
    (void)kill(pid, SIGKILL);
    (void)waitpid(pid, NULL, 0);
    close(pfd[0]);
    ssize_t en = pread(errfd, err, err_cap - 1, 0);
    err[en > 0 ? en : 0] = '\0';
    close(errfd);
    unlink(errpath);
    return took;
}

static void connect_to_unresolvable(int fd)
{
    struct store_client c;
    struct ddpc_err e = { 0 };
    double t0 = ddpc_now();
    int rc = store_client_connect(&c, "ddpc-rendezvous.example.org", 29500, t0 + 5.6, &e);
    fflush(stderr);
    dprintf(fd, "rc=%d after=%.2f msg=%s", rc, ddpc_now() - t0, e.msg);
}

/* master_addr a name, and a name server that never answers: the client
 * gives up at the job's deadline, after its 5 s notice saying the name
 * lookup has not finished. getaddrinfo blocked for the resolver's own
 * timeout (here 30 s; with an NSS module, without bound) past both. */
START_TEST(name_lookup_is_bounded_by_the_deadline)
{
    char out[2048] = "", err[2048] = "";
    double took = in_silent_dns(connect_to_unresolvable, 15, out, sizeof out, err, sizeof err);
    if (strncmp(out, "SKIP ", 5) == 0) {
        test_skip("name_lookup_is_bounded_by_the_deadline", "%s", out + 5);
        return;
    }
    ck_assert_msg(out[0], "the client was still in its name lookup after %.1f s (deadline "
                  "5.6 s)\nstderr: %s", took, err);
    printf("store: silent name server: %s\n", out);
    double after = 0;
    ck_assert_msg(sscanf(out, "rc=%*d after=%lf", &after) == 1, "%s", out);
    ck_assert_msg(strncmp(out, "rc=-", 4) == 0 && after >= 5.5 && after < 7.0, "%s", out);
    ck_assert_msg(strstr(out, "the name lookup of its host has not finished"), "%s", out);
    ck_assert_msg(strstr(err, "still waiting for the rendezvous store at "
                              "ddpc-rendezvous.example.org:29500 (node 0) after 5 s: the name "
                              "lookup of its host has not finished"), "stderr: %s", err);
}
END_TEST

static void host_at_unresolvable(int fd)
{
    struct store_host h;
    struct ddpc_err e = { 0 };
    double t0 = ddpc_now();
    int rc = store_host_start(&h, "ddpc-rendezvous.example.org", 0, t0 + 2.5, &e);
    dprintf(fd, "rc=%d code=%d after=%.2f msg=%s", rc, (int)e.code, ddpc_now() - t0, e.msg);
    if (rc == 0)
        store_host_stop(&h);
}

/* Node 0 binding the store at master_addr, a name, with a name server
 * that never answers: the lookup (which picks the family to bind) ends at
 * the job's deadline with a message naming the name and what to do. It
 * blocked in getaddrinfo for the resolver's 30 s, whatever nccl_timeout
 * said, and then bound IPv4's wildcard without a word. */
START_TEST(bind_lookup_is_bounded_by_the_deadline)
{
    char out[2048] = "", err[2048] = "";
    double took = in_silent_dns(host_at_unresolvable, 15, out, sizeof out, err, sizeof err);
    if (strncmp(out, "SKIP ", 5) == 0) {
        test_skip("bind_lookup_is_bounded_by_the_deadline", "%s", out + 5);
        return;
    }
    ck_assert_msg(out[0], "node 0 was still in its name lookup after %.1f s (deadline 2.5 s)",
                  took);
    printf("store: bind, silent name server: %s\n", out);
    double after = 0;
    int code = 0;
    ck_assert_msg(sscanf(out, "rc=%*d code=%d after=%lf", &code, &after) == 2, "%s", out);
    ck_assert_msg(strncmp(out, "rc=-", 4) == 0 && code == DDPC_E_TIMEOUT, "%s", out);
    ck_assert_msg(after >= 2.4 && after < 4.0, "%s", out);
    ck_assert_msg(strstr(out, "the name lookup of node 0's address "
                              "'ddpc-rendezvous.example.org' has not finished"), "%s", out);
    ck_assert_msg(strstr(out, "give launch.master_addr / --master as an IP address"), "%s", out);
}
END_TEST

/* Reads what a forked case child wrote to fd until it closed it, reaps
 * the child, and checks the report: "SKIP why" skips the test; otherwise
 * it must say "rc=0 after=S" (a store_client_connect that succeeded) with
 * S < limit seconds. */
static void connected_within(int fd, pid_t pid, const char *test, const char *label,
                             double limit, const char *fail)
{
    char out[2048];
    size_t n = 0;
    ssize_t r;
    while (n < sizeof out - 1 && (r = read(fd, out + n, sizeof out - 1 - n)) > 0)
        n += (size_t)r;
    out[n] = '\0';
    close(fd);
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    if (strncmp(out, "SKIP ", 5) == 0) {
        test_skip(test, "%s", out + 5);
        return;
    }
    printf("store: %s: %s\n", label, out);
    double after = 99;
    ck_assert_msg(sscanf(out, "rc=0 after=%lf", &after) == 1 && after < limit, "%s: %s", fail,
                  out);
}

/* Node 0 binds the store at a name (here from /etc/hosts, in namespaces
 * of the test's own) and forks a worker at once, as the launcher does: the
 * worker reaches the store by that name within its deadline. When node 0
 * looked the name up with getaddrinfo_a in its own process, the worker,
 * forked while glibc's helper thread idled, inherited a lookup queue
 * waiting on a thread it did not have: its lookup never finished and it
 * gave up at its deadline (the Slurm test's rank 0, 'the name lookup of
 * its host has not finished'). */
START_TEST(worker_forked_after_the_bind_resolves_the_name)
{
    int pfd[2];
    ck_assert_int_eq(pipe(pfd), 0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        char why[256] = "";
        close(pfd[0]);
        if (private_net_with_file("/etc/hosts", "127.0.0.1 rdv\n", why, sizeof why) != 0) {
            dprintf(pfd[1], "SKIP %s", why);
            _exit(0);
        }
        char *up[] = { "/bin/sh", "-c", "ip link set lo up", NULL };
        struct run_result rr;
        if (run_capture(up, NULL, NULL, 10, &rr) != 0 || !rr.exited || rr.code != 0) {
            dprintf(pfd[1], "SKIP ip link set lo up failed");
            _exit(0);
        }
        run_result_free(&rr);
        struct store_host h;
        struct ddpc_err e = { 0 };
        if (store_host_start(&h, "rdv", 0, ddpc_deadline_after(5), &e) != 0) {
            dprintf(pfd[1], "host: %s", e.msg);
            _exit(0);
        }
        fflush(stdout);
        fflush(stderr);
        pid_t w = fork();
        if (w == 0) {
            struct store_client c;
            double t0 = ddpc_now();
            int rc = store_client_connect(&c, "rdv", h.port, t0 + 3.0, &e);
            dprintf(pfd[1], "rc=%d after=%.2f msg=%s", rc, ddpc_now() - t0, rc ? e.msg : "");
            _exit(0);
        }
        int st;
        (void)waitpid(w, &st, 0);
        store_host_stop(&h);
        _exit(0);
    }
    close(pfd[1]);
    connected_within(pfd[0], pid, "worker_forked_after_the_bind_resolves_the_name",
                     "worker forked after the bind", 1.0,
                     "the worker did not reach the store by its name");
}
END_TEST

/* In the calling process: network and mount namespaces of its own where
 * the name "rdv" is first 2001:db8::9, an address that swallows every
 * packet (a veth whose peer has no such address; a permanent neighbour
 * entry, so not even neighbour discovery fails), then 127.0.0.1. Returns 0,
 * or -1 with why filled. */
static int blackhole_first_enter(char *why, size_t cap)
{
    if (private_net_with_file("/etc/hosts", "2001:db8::9 rdv\n127.0.0.1 rdv\n", why, cap) != 0)
        return -1;
    static const char *const cmds[] = {
        "ip link set lo up",
        "ip link add v0 type veth peer name v1",
        "ip link set v0 up",
        "ip link set v1 up",
        "ip -6 addr add 2001:db8::1/64 dev v0 nodad",
        "ip -6 neigh add 2001:db8::9 lladdr 02:00:00:00:00:09 dev v0 nud permanent",
    };
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char *argv[] = { "/bin/sh", "-c", (char *)cmds[i], NULL };
        struct run_result r;
        if (run_capture(argv, NULL, NULL, 10, &r) != 0 || !r.exited || r.code != 0) {
            snprintf(why, cap, "%s failed", cmds[i]);
            return -1;
        }
        run_result_free(&r);
    }
    return 0;
}

/* A name whose first address never answers (an IPv6 address without a
 * route back) and whose second is the store: the first gets its share of
 * an attempt (1 s of 2), not all of it. Every attempt spent its 2 s on the
 * first address and gave the second a poll() of 0 ms: enough here, where
 * loopback's handshake is done inside connect(), never across a network,
 * where the client gave up at its deadline. */
START_TEST(silent_first_address_leaves_time_for_the_next)
{
    int pfd[2];
    ck_assert_int_eq(pipe(pfd), 0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        char why[256] = "";
        close(pfd[0]);
        if (blackhole_first_enter(why, sizeof why) != 0) {
            dprintf(pfd[1], "SKIP %s", why);
            _exit(0);
        }
        struct store_host h;
        struct ddpc_err e = { 0 };
        if (store_host_start(&h, "127.0.0.1", 0, 0, &e) != 0) {
            dprintf(pfd[1], "host: %s", e.msg);
            _exit(0);
        }
        struct store_client c;
        double t0 = ddpc_now();
        int rc = store_client_connect(&c, "rdv", h.port, t0 + 6.5, &e);
        dprintf(pfd[1], "rc=%d after=%.2f msg=%s", rc, ddpc_now() - t0, rc ? e.msg : "");
        if (rc == 0)
            store_client_close(&c);
        store_host_stop(&h);
        _exit(0);
    }
    close(pfd[1]);
    connected_within(pfd[0], pid, "silent_first_address_leaves_time_for_the_next",
                     "silent first address", 1.6,
                     "did not connect through the second address in time");
}
END_TEST

/* Garbage on the port (a client that is not ddpc's) costs that
 * connection, not the store. */
START_TEST(garbage_drops_only_that_connection)
{
    struct store_host h = start_host("127.0.0.1");
    struct store_client bad, good;
    connect_to(&bad, "127.0.0.1", h.port);
    connect_to(&good, "127.0.0.1", h.port);
    const char junk[] = "\xff\xff\xff\xff GET / HTTP/1.0\r\n\r\n";
    ck_assert_int_eq(send(bad.fd, junk, sizeof junk, MSG_NOSIGNAL), (ssize_t)sizeof junk);
    struct ddpc_err e = { 0 };
    ck_assert_int_eq(store_set(&good, "k", "v", 1, &e), 0);
    void *v;
    size_t n;
    ck_assert_int_eq(store_get(&good, "k", &v, &n, ddpc_deadline_after(2), NULL, &e), 0);
    free(v);
    char b;
    ck_assert_int_eq(recv(bad.fd, &b, 1, 0), 0);   /* dropped: EOF */
    store_client_close(&bad);
    store_client_close(&good);
    store_host_stop(&h);
}
END_TEST

/* ADD is signed 64-bit arithmetic on the server: a sum that does not fit
 * (a hostile or buggy peer's delta) is refused, the counter kept, never
 * wrapped (signed overflow is undefined behaviour in the serving child). */
START_TEST(add_overflow_is_refused)
{
    struct store_host h = start_host("127.0.0.1");
    struct store_client c;
    connect_to(&c, "127.0.0.1", h.port);
    struct ddpc_err e = { 0 };
    int64_t v = 0;
    ck_assert_int_eq(store_add(&c, "n", INT64_MAX, &v, &e), 0);
    ck_assert(v == INT64_MAX);
    ddpc_err_clear(&e);
    ck_assert_int_lt(store_add(&c, "n", 1, &v, &e), 0);
    ck_assert_msg(strstr(e.msg, "overflow"), "%s", e.msg);
    ddpc_err_clear(&e);
    ck_assert_int_eq(store_add(&c, "n", 0, &v, &e), 0);   /* still served, value kept */
    ck_assert(v == INT64_MAX);
    ck_assert_int_eq(store_add(&c, "m", INT64_MIN, &v, &e), 0);
    ck_assert_int_lt(store_add(&c, "m", -1, &v, &e), 0);
    ddpc_err_clear(&e);
    ck_assert_int_eq(store_add(&c, "m", INT64_MAX, &v, &e), 0);
    ck_assert(v == -1);
    store_client_close(&c);
    store_host_stop(&h);
}
END_TEST

/* A world of ranks holds a connection each to node 0's store (gloo's whole
 * exchange, NCCL's wait for the unique id), more than a soft descriptor
 * limit of 1024 (the usual default) on a large job: the store serves up to
 * the hard limit, and past it refuses a connection without spinning. */
START_TEST(more_clients_than_the_soft_fd_limit)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        enum { N = 96 };
        struct rlimit rl = { 64, 4096 };
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            _exit(10);
        struct store_host h;
        struct ddpc_err e = { 0 };
        if (store_host_start(&h, "127.0.0.1", 0, 0, &e) < 0)
            _exit(11);
        rl.rlim_cur = 4096;   /* the clients' side: this test's own limit */
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            _exit(12);
        static struct store_client c[N];
        for (int i = 0; i < N; i++)
            if (store_client_connect(&c[i], "127.0.0.1", h.port, ddpc_deadline_after(5), &e) < 0)
                _exit(13);
        /* every connection answered, the last first, each within 5 s */
        for (int i = N; i-- > 0;) {
            uint8_t req[4 + 3 + 1] = { 0, 0, 0, 4, 3, 0, 1, 'k' };   /* CHECK "k" */
            if (send(c[i].fd, req, sizeof req, MSG_NOSIGNAL) != (ssize_t)sizeof req)
                _exit(14);
            struct pollfd pf = { c[i].fd, POLLIN, 0 };
            if (poll(&pf, 1, 5000) != 1)
                _exit(15);
            uint8_t rep[6];
            if (recv(c[i].fd, rep, sizeof rep, MSG_WAITALL) != (ssize_t)sizeof rep)
                _exit(16);
        }
        for (int i = 0; i < N; i++)
            store_client_close(&c[i]);
        store_host_stop(&h);
        /* a hard limit of 64: the clients past it are told so at once */
        int port_p[2], stop_p[2];
        if (pipe(port_p) != 0 || pipe(stop_p) != 0)
            _exit(17);
        pid_t sp = fork();
        if (sp < 0)
            _exit(18);
        if (sp == 0) {
            struct rlimit low = { 64, 64 };
            int lfd, port;
            (void)close(stop_p[1]);
            if (setrlimit(RLIMIT_NOFILE, &low) != 0 ||
                store_listen("127.0.0.1", 0, 0, &lfd, &port, &e) < 0 ||
                write(port_p[1], &port, sizeof port) != (ssize_t)sizeof port)
                _exit(1);
            _exit(store_serve(lfd, stop_p[0]) < 0 ? 2 : 0);
        }
        (void)close(stop_p[0]);
        int port = 0;
        if (read(port_p[0], &port, sizeof port) != (ssize_t)sizeof port)
            _exit(19);
        int served = 0, told = 0;
        double t0 = ddpc_now();
        for (int i = 0; i < N; i++)
            if (store_client_connect(&c[i], "127.0.0.1", port, ddpc_deadline_after(5), &e) < 0)
                _exit(20);
        for (int i = N; i-- > 0;) {
            ddpc_err_clear(&e);
            int r = store_check(&c[i], "k", &e);
            if (r == 0)
                served++;
            else if (r < 0 && strstr(e.msg, "no file descriptor left") &&
                     strstr(e.msg, "ulimit -n: 64"))
                told++;
            else {
                fprintf(stderr, "client %d: %d %s\n", i, r, e.msg);
                _exit(21);
            }
            store_client_close(&c[i]);
        }
        (void)close(stop_p[1]);
        int sst;
        if (waitpid(sp, &sst, 0) != sp || !WIFEXITED(sst) || WEXITSTATUS(sst) != 0)
            _exit(22);
        if (served < 32 || told < 1 || served + told != N || ddpc_now() - t0 > 10)
            _exit(23);
        _exit(0);
    }
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status 0x%x (exit %d)", st,
                  WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}
END_TEST

Suite *store_suite(void)
{
    Suite *s = suite_create("store");
    TCase *t = tcase_create("store");
    tcase_set_timeout(t, 30);
    tcase_add_test(t, set_get_check_add);
    tcase_add_test(t, get_waits_for_a_later_set);
    tcase_add_test(t, get_timeout_names_who);
    tcase_add_test(t, get_watch_stops_on_the_stop_key);
    tcase_add_test(t, get_watch_on_a_silent_store_keeps_its_deadline);
    tcase_add_test(t, wait_ms_is_bounded);
    tcase_add_test(t, many_clients_all_gather);
    tcase_add_test(t, second_job_on_the_port_is_refused);
    tcase_add_test(t, ipv6_in_brackets);
    tcase_add_test(t, unreachable_and_vanishing_store);
    tcase_add_test(t, waiting_client_says_why_after_5_s);
    tcase_add_test(t, name_lookup_is_bounded_by_the_deadline);
    tcase_add_test(t, bind_lookup_is_bounded_by_the_deadline);
    tcase_add_test(t, worker_forked_after_the_bind_resolves_the_name);
    tcase_add_test(t, silent_first_address_leaves_time_for_the_next);
    tcase_add_test(t, garbage_drops_only_that_connection);
    tcase_add_test(t, add_overflow_is_refused);
    tcase_add_test(t, more_clients_than_the_soft_fd_limit);
    suite_add_tcase(s, t);
    return s;
}
