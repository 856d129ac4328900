/* test_multinode.c - real multi-node CPU jobs, two network namespaces as hosts.
 *
 * Each test case gets two network namespaces joined by a veth pair (names
 * carry the pid, addresses 10.<x>.<y>.1 and .2 derived from it; everything
 * lives inside the namespaces, so no traffic reaches the machine's own
 * network). Node 0 runs in the first, node 1 in the second, through
 * `nsenter --net` (the job's file system is the test's own). The fixture is
 * unchecked (it runs in the test runner, not in the forked case): the
 * namespaces and everything still running in them are removed after every
 * case, passed or failed.
 *
 * Cases: a 2-node job ends within 1e-3 of the same world size on one host
 * (1 and 2 workers per node); killing node 1 ends node 0 non-zero within
 * 5 s naming node 1; node 0 alone ends at its timeout naming the ranks it
 * waited for; a link cut mid-run ends both nodes within their timeout.
 * Case group "stops" (max_restarts 2, nccl_timeout 60 s): a node that
 * gives up stops the other at its next rendezvous, naming its reason, and
 * node 0 gone stops node 1 at its next rendezvous, both within seconds.
 * Without root, `ip` or `nsenter`, or where namespaces cannot be made, each
 * case prints SKIP with the reason.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <check.h>
#include "suites.h"
#include "testutil.h"
#include "comm.h"   /* ddpc_now */
#include "slurm.h"

#define TIMEOUT_S 2   /* nccl_timeout of the jobs that must fail */

static struct {
    int  ok;
    char skip[200];
    char ns[2][32], veth[2][16], ip[2][24];
} net;

static int run_quiet(char *const argv[], char *err, size_t len)
{
    struct run_result r;
    if (run_capture(argv, NULL, NULL, 20, &r) != 0) {
        snprintf(err, len, "%s could not be run", argv[0]);
        return -1;
    }
    int ok = r.exited && r.code == 0;
    if (!ok)
        snprintf(err, len, "%s %s %s: %s", argv[0], argv[1], argv[2] ? argv[2] : "",
                 r.err && *r.err ? r.err : "failed");
    run_result_free(&r);
    return ok ? 0 : -1;
}

static int ip_cmd(char *err, size_t len, const char *a0, const char *a1, const char *a2,
                  const char *a3, const char *a4, const char *a5, const char *a6,
                  const char *a7, const char *a8)
{
    char *argv[] = { "ip", (char *)a0, (char *)a1, (char *)a2, (char *)a3, (char *)a4,
                     (char *)a5, (char *)a6, (char *)a7, (char *)a8, NULL };
    return run_quiet(argv, err, len);
}

/* Kills whatever runs in namespace ns (ip netns pids). */
static void ns_kill_all(const char *ns)
{
    char *argv[] = { "ip", "netns", "pids", (char *)ns, NULL };
    struct run_result r;
    if (run_capture(argv, NULL, NULL, 10, &r) != 0)
        return;
    char *p = r.out;
    while (p && *p) {
        char *end;
        long pid = strtol(p, &end, 10);
        if (end == p)
            break;
        if (pid > 1)
            (void)kill((pid_t)pid, SIGKILL);
        p = end;
    }
    run_result_free(&r);
}

/* Kills what runs in ns, then deletes it (its end of the veth goes too). */
static void ns_delete(const char *ns)
{
    ns_kill_all(ns);
    char err[256];
    char *del[] = { "ip", "netns", "del", (char *)ns, NULL };
    (void)run_quiet(del, err, sizeof err);
}

static void net_up(void)
{
    memset(&net, 0, sizeof net);
    if (geteuid() != 0) {
        snprintf(net.skip, sizeof net.skip, "network namespaces need root (euid %d)",
                 (int)geteuid());
        return;
    }
    if (access("/usr/bin/nsenter", X_OK) != 0 && access("/bin/nsenter", X_OK) != 0) {
        snprintf(net.skip, sizeof net.skip, "nsenter not found (util-linux)");
        return;
    }
    int pid = (int)getpid();
    for (int k = 0; k < 2; k++) {
        snprintf(net.ns[k], sizeof net.ns[k], "ddpc%d%c", pid, 'a' + k);
        snprintf(net.veth[k], sizeof net.veth[k], "dv%d%c", pid % 1000000, 'a' + k);
        snprintf(net.ip[k], sizeof net.ip[k], "10.%d.%d.%d", 100 + pid % 100, (pid / 100) % 250,
                 k + 1);
    }
    char err[512], cidr[32];
    if (ip_cmd(err, sizeof err, "netns", "add", net.ns[0], 0, 0, 0, 0, 0, 0) < 0) {
        snprintf(net.skip, sizeof net.skip, "cannot make a network namespace: %.150s", err);
        return;
    }
    net.ok = 1;   /* from here net_down removes what exists */
    if (ip_cmd(err, sizeof err, "netns", "add", net.ns[1], 0, 0, 0, 0, 0, 0) < 0 ||
        ip_cmd(err, sizeof err, "link", "add", net.veth[0], "netns", net.ns[0], "type", "veth",
               "peer", net.veth[1]) < 0 ||
        ip_cmd(err, sizeof err, "link", "set", net.veth[1], "netns", net.ns[1], 0, 0, 0, 0) < 0)
        goto fail;
    for (int k = 0; k < 2; k++) {
        snprintf(cidr, sizeof cidr, "%s/24", net.ip[k]);
        if (ip_cmd(err, sizeof err, "-n", net.ns[k], "addr", "add", cidr, "dev", net.veth[k], 0,
                   0) < 0 ||
            ip_cmd(err, sizeof err, "-n", net.ns[k], "link", "set", net.veth[k], "up", 0, 0,
                   0) < 0 ||
            ip_cmd(err, sizeof err, "-n", net.ns[k], "link", "set", "lo", "up", 0, 0, 0) < 0)
            goto fail;
    }
    return;
fail:
    snprintf(net.skip, sizeof net.skip, "cannot wire two namespaces: %.150s", err);
    for (int k = 0; k < 2; k++)
        ns_delete(net.ns[k]);
    net.ok = 0;
}

static void net_down(void)
{
    if (!net.ok)
        return;
    for (int k = 0; k < 2; k++)
        ns_delete(net.ns[k]);   /* the veth pair goes with them */
    net.ok = 0;
}

/* Before each case (in its forked process): nothing left from the last. */
static void net_clean(void)
{
    if (!net.ok)
        return;
    for (int k = 0; k < 2; k++)
        ns_kill_all(net.ns[k]);
}

static int skipped(void)
{
    if (net.ok)
        return 0;
    test_skip("multinode", "%s", net.skip);
    return 1;
}

/* ===== jobs ===== */

struct built {
    char *dir, *job, *one;   /* the 2-node job and its 1-host twin */
};

/* Builds a 2-node job with `per_node` workers per node (and, if twin, the
 * same world on one host). epochs: how long it runs; extra: more spec text
 * (launch keys go in as "  key: value" lines). */
static void build_x(struct built *b, int per_node, int epochs, int twin, const char *extra)
{
    memset(b, 0, sizeof *b);
    b->dir = make_temp_dir("multinode");
    ck_assert_ptr_nonnull(b->dir);
    const char *fmt =
        "name: %s\n"
        "devices: %d\n"
        "accelerator: %s\n"
        "epochs: %d\n"
        "batch_size: 16\n"
        "learning_rate: 0.01\n"
        "lr_scaling: none\n"
        "seed: 11\n"
        "nccl_timeout: %ds\n"
        "model: {layers: [16, 32, 4]}\n"
        "logging: {every_n_steps: 8}\n"
        "data:\n"
        "  train: {format: synthetic, samples: 1024, features: 16, classes: 4}\n"
        "launch:\n  num_nodes: %d\n  master_addr: %s\n  master_port: 29555\n%s";
    for (int k = 0; k < 1 + twin; k++) {
        char *spec, *text, *out, *ddpc;
        ck_assert_int_ge(asprintf(&spec, "%s/%s.yaml", b->dir, k ? "one" : "two"), 0);
        ck_assert_int_ge(asprintf(&out, "%s/%s", b->dir, k ? "one" : "two"), 0);
        /* 2 workers per node: accelerator auto, which finds no GPU here
         * (or is built without CUDA) and runs CPU workers over gloo, as
         * check, plan and build accepted */
        ck_assert_int_ge(asprintf(&text, fmt, k ? "one" : "two", k ? 2 * per_node : per_node,
                                  per_node == 2 ? "auto" : "cpu", epochs, TIMEOUT_S,
                                  k ? 1 : 2, net.ip[0], extra), 0);
        ck_assert_int_eq(write_file(spec, text, strlen(text)), 0);
        ck_assert_int_ge(asprintf(&ddpc, "%s/bin/ddpc", test_build()), 0);
        char *argv[] = { ddpc, "build", spec, "-o", out, NULL };
        struct run_result r;
        ck_assert_int_eq(run_capture(argv, b->dir, NULL, 120, &r), 0);
        ck_assert_msg(r.exited && r.code == 0, "ddpc build: %s%s", r.out, r.err);
        run_result_free(&r);
        if (k)
            b->one = out;
        else
            b->job = out;
        free(spec);
        free(text);
        free(ddpc);
    }
}

static void build(struct built *b, int per_node, int epochs, int twin)
{
    build_x(b, per_node, epochs, twin, "");
}

static void built_free(struct built *b)
{
    rm_tree(b->dir);
    free(b->dir);
    free(b->job);
    free(b->one);
}

/* Starts node k of b->job in namespace k. */
static void start_node(struct run_proc *p, const struct built *b, int k)
{
    char nsarg[64], rank[8];
    snprintf(nsarg, sizeof nsarg, "--net=/run/netns/%s", net.ns[k]);
    snprintf(rank, sizeof rank, "%d", k);
    char *argv[] = { "nsenter", nsarg, "--", b->job, "--node-rank", rank, NULL };
    ck_assert_int_eq(run_start(argv, b->dir, NULL, p), 0);
}

/* Starts node 1, then node 0, and waits until node 0 prints `line` (an
 * epoch it reached: both nodes are training together). */
static void start_both_until(struct run_proc p[2], const struct built *b, const char *line)
{
    start_node(&p[1], b, 1);
    start_node(&p[0], b, 0);
    ck_assert_msg(run_wait_output(&p[0], line, 30), "node 0 never trained:\n%s%s",
                  p[0].out, p[0].err);
}

static double final_loss(const char *out)
{
    const char *d = strstr(out, "done ");
    return d ? find_kv(d, "train_loss") : NAN;
}

/* ===== cases ===== */

static void same_as_one_host(int per_node)
{
    struct built b;
    build(&b, per_node, 2, 1);
    struct run_proc p[2];
    struct run_result r[2], one;
    start_node(&p[1], &b, 1);
    start_node(&p[0], &b, 0);
    for (int k = 0; k < 2; k++)
        ck_assert_int_eq(run_finish(&p[k], 60, &r[k]), 0);
    for (int k = 0; k < 2; k++)
        ck_assert_msg(r[k].exited && r[k].code == 0, "node %d (%d per node) status %d:\n%s%s", k,
                      per_node, r[k].code, r[k].out, r[k].err);
    char *argv[] = { b.one, NULL };
    ck_assert_int_eq(run_capture(argv, b.dir, NULL, 60, &one), 0);
    ck_assert_msg(one.exited && one.code == 0, "one host: %s%s", one.out, one.err);
    double l2 = final_loss(r[0].out), l1 = final_loss(one.out);
    ck_assert_msg(isfinite(l2) && isfinite(l1), "no final loss:\n%s\n---\n%s", r[0].out,
                  one.out);
    ck_assert_msg(fabs(l2 - l1) <= 1e-3, "%d per node: 2 nodes loss %.6f, one host %.6f",
                  per_node, l2, l1);
    /* only rank 0 (node 0) reports */
    ck_assert_ptr_null(strstr(r[1].out, "done "));
    for (int k = 0; k < 2; k++)
        run_result_free(&r[k]);
    run_result_free(&one);
    built_free(&b);
}

START_TEST(two_nodes_match_one_host)
{
    if (skipped())
        return;
    same_as_one_host(1);
    same_as_one_host(2);
}
END_TEST

START_TEST(killed_node_ends_node_0)
{
    if (skipped())
        return;
    struct built b;
    build(&b, 1, 1000, 0);
    struct run_proc p[2];
    struct run_result r[2];
    start_both_until(p, &b, "epoch 2/");
    pid_t pg1 = p[1].pid;
    ck_assert_int_eq(kill(-pg1, SIGKILL), 0);   /* node 1's launcher and workers */
    double t0 = ddpc_now();
    ck_assert_int_eq(run_finish(&p[0], 30, &r[0]), 0);
    double dt = ddpc_now() - t0;
    ck_assert_int_eq(run_finish(&p[1], 5, &r[1]), 0);
    ck_assert_msg(r[0].exited && r[0].code != 0, "node 0 status %d", r[0].code);
    ck_assert_msg(dt < 5.0, "node 0 took %.2f s to end", dt);
    ck_assert_msg(strstr(r[0].err, "node 1"), "node 0 does not name node 1:\n%s", r[0].err);
    for (int k = 0; k < 2; k++)
        run_result_free(&r[k]);
    built_free(&b);
}
END_TEST

START_TEST(node_0_alone_names_what_it_waited_for)
{
    if (skipped())
        return;
    struct built b;
    build(&b, 2, 1, 0);
    struct run_proc p;
    struct run_result r;
    start_node(&p, &b, 0);
    double t0 = ddpc_now();
    ck_assert_int_eq(run_finish(&p, 30, &r), 0);
    double dt = ddpc_now() - t0;
    ck_assert_msg(r.exited && r.code == 1, "status %d:\n%s", r.code, r.err);
    ck_assert_msg(dt >= TIMEOUT_S - 0.1 && dt < TIMEOUT_S + 3, "ended after %.2f s", dt);
    ck_assert_msg(strstr(r.err, "rank 2 (node 1), rank 3 (node 1)") &&
                  strstr(r.err, "never arrived"), "%s", r.err);
    run_result_free(&r);
    built_free(&b);
}
END_TEST

static char *build_variant(const struct built *b, const char *name, const char *from,
                           const char *to);

/* Two ./job given the same node rank (--node-rank 1 twice; srun with two
 * tasks on a node, which share SLURM_NODEID): the second to register is
 * told that its rank is taken, at once, while the job trains with the
 * first; it used to overwrite the first's address and one of the two
 * failed at the timeout with gloo's 'Connect timeout' to node 0. The
 * refused copy neither restarts nor tells the job's nodes to stop. */
START_TEST(two_jobs_as_one_node_rank_are_named)
{
    if (skipped())
        return;
    struct built b;
    build_x(&b, 1, 300, 0, "  max_restarts: 1\n");
    struct built v = b;   /* a deadline longer than the hold below */
    v.job = build_variant(&b, "long", "nccl_timeout: 2s", "nccl_timeout: 20s");
    struct run_proc p[3];
    struct run_result r[3];
    start_node(&p[1], &v, 1);
    start_node(&p[2], &v, 1);
    start_node(&p[0], &v, 0);
    int lost = 0;
    for (int i = 0; i < 600 && !lost; i++)
        for (int k = 1; k <= 2 && !lost; k++)
            if (run_wait_output(&p[k], "is already taken", 0.05))
                lost = k;
    ck_assert_msg(lost, "neither node 1 was refused:\n%s\n%s", p[1].err, p[2].err);
    int won = 3 - lost;
    ck_assert_int_eq(run_finish(&p[lost], 30, &r[lost]), 0);
    ck_assert_msg(r[lost].exited && r[lost].code == 1, "node 1 (second) status %d:\n%s",
                  r[lost].code, r[lost].err);
    ck_assert_msg(strstr(r[lost].err, "rank 1 (node 1) is already taken") &&
                  strstr(r[lost].err, "--node-rank") &&
                  strstr(r[lost].err, "not restarting: another ./job runs as this node"),
                  "%s", r[lost].err);
    /* The refused copy speaks for nobody: the job's own node 1 loses its
     * worker, both nodes restart (max_restarts 1) and finish. It used to
     * announce "node 1 gave up" to the next attempt, whose rendezvous then
     * stopped on it whenever a node waited there for the other. */
    ck_assert_msg(run_wait_output(&p[0], "epoch 2/", 30), "node 0 never trained:\n%s",
                  p[0].err);
    pid_t w[4];
    int n = child_pids(p[won].pid, w, 4);
    ck_assert_int_ge(n, 1);
    /* node 0's launcher held back 2.5 s: node 1's next attempt waits for it
     * at the rendezvous, long enough to look for a stop (store.h
     * store_get_watch looks each second) */
    ck_assert_int_eq(kill(p[0].pid, SIGSTOP), 0);
    ck_assert_int_eq(kill(w[0], SIGKILL), 0);
    usleep(2500000);
    ck_assert_int_eq(kill(p[0].pid, SIGCONT), 0);
    ck_assert_int_eq(run_finish(&p[0], 90, &r[0]), 0);
    ck_assert_int_eq(run_finish(&p[won], 90, &r[won]), 0);
    const int job_nodes[2] = { 0, won };
    for (int i = 0; i < 2; i++) {
        const struct run_result *q = &r[job_nodes[i]];
        ck_assert_msg(q->exited && q->code == 0 && strstr(q->err, "restarting (1 of 1)"),
                      "node %d status %d:\n%s", i, q->code, q->err);
    }
    ck_assert_msg(!strstr(r[0].err, "gave up"), "node 0:\n%s", r[0].err);
    for (int k = 0; k < 3; k++)
        run_result_free(&r[k]);
    free(v.job);
    built_free(&b);
}
END_TEST

/* Builds b->dir/NAME from b's spec (two.yaml) with `from` replaced by `to`. */
static char *build_variant(const struct built *b, const char *name, const char *from,
                           const char *to)
{
    char *spec, *out, *ddpc, *two;
    ck_assert_int_ge(asprintf(&two, "%s/two.yaml", b->dir), 0);
    ck_assert_int_ge(asprintf(&spec, "%s/%s.yaml", b->dir, name), 0);
    ck_assert_int_ge(asprintf(&out, "%s/%s", b->dir, name), 0);
    ck_assert_int_ge(asprintf(&ddpc, "%s/bin/ddpc", test_build()), 0);
    size_t n = 0;
    char *text = read_whole(two, &n), *at = strstr(text, from), *t2;
    ck_assert_ptr_nonnull(at);
    ck_assert_int_ge(asprintf(&t2, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from)),
                     0);
    ck_assert_int_eq(write_file(spec, t2, strlen(t2)), 0);
    char *argv[] = { ddpc, "build", spec, "-o", out, NULL };
    struct run_result r;
    ck_assert_int_eq(run_capture(argv, b->dir, NULL, 120, &r), 0);
    ck_assert_msg(r.exited && r.code == 0, "ddpc build: %s%s", r.out, r.err);
    run_result_free(&r);
    free(two);
    free(spec);
    free(ddpc);
    free(text);
    free(t2);
    return out;
}

/* Node 0 runs b->job; node 1 runs job1, in a mount namespace of its own
 * where, if `over` is given, the file `bind` is bind-mounted over it (its
 * own copy of the data). Both must end, non-zero, within 20 s; node 1's
 * message must hold `want`. */
static void other_node_refused(const struct built *b, const char *job1, const char *bind,
                               const char *over, const char *want)
{
    struct run_proc p[2];
    struct run_result r[2];
    char cmd[1024], nsarg[64];
    snprintf(nsarg, sizeof nsarg, "--net=/run/netns/%s", net.ns[1]);
    snprintf(cmd, sizeof cmd, "%sexec \"$0\" --node-rank 1",
             over ? "mount --bind \"$1\" \"$2\" && " : "");
    char *argv1[] = { "nsenter", nsarg, "--", "unshare", "--mount", "--propagation", "private",
                      "/bin/sh", "-c", cmd, (char *)job1, (char *)bind, (char *)over, NULL };
    if (!over)
        argv1[11] = NULL;
    ck_assert_int_eq(run_start(argv1, b->dir, NULL, &p[1]), 0);
    start_node(&p[0], b, 0);
    for (int k = 0; k < 2; k++)
        ck_assert_int_eq(run_finish(&p[k], 20, &r[k]), 0);
    for (int k = 0; k < 2; k++)
        ck_assert_msg(!r[k].timed_out && r[k].exited && r[k].code != 0,
                      "node %d: status %d%s:\n%s%s", k, r[k].code,
                      r[k].timed_out ? " (timed out)" : "", r[k].out, r[k].err);
    ck_assert_msg(strstr(r[1].err, want), "node 1 lacks '%s':\n%s", want, r[1].err);
    /* not restarted, not called ddpc's fault */
    ck_assert_msg(!strstr(r[1].err, "internal error"), "%s", r[1].err);
    ck_assert_msg(!strstr(r[0].out, "epoch 1/"), "node 0 trained:\n%s", r[0].out);
    printf("multinode: %s", r[1].err);
    for (int k = 0; k < 2; k++)
        run_result_free(&r[k]);
}

/* A node that runs a job built from another spec, or reads other data:
 * named before anything trains. Node 1 with learning_rate 0.02 trained on
 * without a word, applying its own rate to the averaged gradients (the
 * replicas drift apart); with fewer samples its epochs had other batch
 * counts and its collectives met node 0's out of step. */
START_TEST(a_node_with_another_job_or_data_is_named)
{
    if (skipped())
        return;
    struct built b;
    build(&b, 1, 1000, 0);
    char *lr = build_variant(&b, "lr", "learning_rate: 0.01", "learning_rate: 0.02");
    other_node_refused(&b, lr, NULL, NULL, "rank 1 runs another configuration than rank 0");
    /* the same job on both nodes, node 1's copy of the data shorter */
    char *csv = NULL, *csv1 = NULL;
    ck_assert_int_ge(asprintf(&csv, "%s/d.csv", b.dir), 0);
    ck_assert_int_ge(asprintf(&csv1, "%s/d1.csv", b.dir), 0);
    FILE *f0 = fopen(csv, "w"), *f1 = fopen(csv1, "w");
    ck_assert(f0 && f1);
    for (int i = 0; i < 1024; i++)     /* label, then 16 features */
        for (int k = 0; k < 17; k++) {
            fprintf(f0, "%d%c", k ? (i * k) % 9 : i % 4, k < 16 ? ',' : '\n');
            if (i < 1000)
                fprintf(f1, "%d%c", k ? (i * k) % 9 : i % 4, k < 16 ? ',' : '\n');
        }
    ck_assert_int_eq(fclose(f0), 0);
    ck_assert_int_eq(fclose(f1), 0);
    char *to = NULL;
    ck_assert_int_ge(asprintf(&to, "train: {format: csv, path: %s}", csv), 0);
    char *cj = build_variant(&b, "csvjob", "train: {format: synthetic, samples: 1024, "
                             "features: 16, classes: 4}", to);
    struct built c = b;
    c.job = cj;
    other_node_refused(&c, cj, csv1, csv, "rank 1 read 1000 training samples, rank 0 read 1024");
    free(to);
    free(csv);
    free(csv1);
    free(cj);
    free(lr);
    built_free(&b);
}
END_TEST

/* max_restarts across nodes: a worker of node 1 dies; node 1 restarts its
 * workers, node 0's see a dead peer and restart theirs, both meet again at
 * the rendezvous (the next attempt's keys) and the job resumes from its
 * last checkpoint and completes. */
START_TEST(restart_after_a_dead_worker_on_node_1)
{
    if (skipped())
        return;
    struct built b;
    build_x(&b, 1, 60, 0, "  max_restarts: 1\ncheckpoint_dir: ckpt\n");
    struct run_proc p[2];
    struct run_result r[2];
    start_both_until(p, &b, "epoch 3/");
    pid_t w[4];
    ck_assert_int_eq(child_pids(p[1].pid, w, 4), 1);   /* node 1's one worker */
    ck_assert_int_eq(kill(w[0], SIGKILL), 0);
    for (int k = 0; k < 2; k++)
        ck_assert_int_eq(run_finish(&p[k], 60, &r[k]), 0);
    for (int k = 0; k < 2; k++) {
        ck_assert_msg(r[k].exited && r[k].code == 0, "node %d status %d:\n%s", k, r[k].code,
                      r[k].err);
        ck_assert_msg(strstr(r[k].err, "restarting (1 of 1) from the last checkpoint"),
                      "node %d:\n%s", k, r[k].err);
    }
    ck_assert_msg(strstr(r[0].out, "resumed from") && strstr(r[0].out, "done "), "%s",
                  r[0].out);
    for (int k = 0; k < 2; k++)
        run_result_free(&r[k]);
    built_free(&b);
}
END_TEST

/* Both nodes restart (max_restarts 2) and wait up to nccl_timeout (60 s
 * here) at each attempt's rendezvous. A node that gives up (node 1 runs
 * another configuration: a data error, which would recur) tells the others
 * through node 0's store, so node 0 stops at its next rendezvous and names
 * node 1's reason; it used to restart twice and wait out nccl_timeout each
 * time for a node 1 that had already stopped. */
START_TEST(a_node_that_gives_up_stops_the_others)
{
    if (skipped())
        return;
    struct built b;
    build_x(&b, 1, 1000, 0, "  max_restarts: 2\n");
    struct built n0 = b, n1 = b;
    n0.job = build_variant(&b, "slow", "nccl_timeout: 2s", "nccl_timeout: 60s");
    n1.job = build_variant(&b, "slowlr", "learning_rate: 0.01\nlr_scaling: none\nseed: 11\n"
                           "nccl_timeout: 2s", "learning_rate: 0.02\nlr_scaling: none\n"
                           "seed: 11\nnccl_timeout: 60s");
    struct run_proc p[2];
    struct run_result r[2];
    double t0 = ddpc_now();
    start_node(&p[1], &n1, 1);
    start_node(&p[0], &n0, 0);
    for (int k = 0; k < 2; k++)
        ck_assert_int_eq(run_finish(&p[k], 30, &r[k]), 0);
    double dt = ddpc_now() - t0;
    for (int k = 0; k < 2; k++)
        ck_assert_msg(!r[k].timed_out && r[k].exited && r[k].code != 0,
                      "node %d: status %d%s after %.1f s:\n%s", k, r[k].code,
                      r[k].timed_out ? " (timed out)" : "", dt, r[k].err);
    ck_assert_msg(dt < 20, "the nodes took %.1f s to end (nccl_timeout 60 s)", dt);
    ck_assert_msg(strstr(r[1].err, "not restarting"), "node 1:\n%s", r[1].err);
    ck_assert_msg(strstr(r[0].err, "node 1 gave up") &&
                  strstr(r[0].err, "rank 1 runs another configuration than rank 0"),
                  "node 0 does not name node 1's reason:\n%s", r[0].err);
    ck_assert_msg(!strstr(r[0].err, "restarting (2 of 2)"), "node 0:\n%s", r[0].err);
    printf("multinode: stopped after %.1f s; node 0:\n%s", dt, r[0].err);
    for (int k = 0; k < 2; k++)
        run_result_free(&r[k]);
    free(n0.job);
    free(n1.job);
    built_free(&b);
}
END_TEST

/* A node that stops in its preflight, before any attempt (here node 1's
 * --resume names no file; a data file it cannot read, or its memory
 * preflight, end it there too), gives up as surely as one whose attempts
 * failed: node 0, waiting at attempt 0's rendezvous, stops within seconds
 * naming it. It used to hear nothing, wait nccl_timeout (60 s here) for
 * node 1, restart and wait again at every attempt left. */
START_TEST(a_node_that_stops_in_its_preflight_stops_the_others)
{
    if (skipped())
        return;
    struct built b;
    build_x(&b, 1, 1000, 0, "  max_restarts: 2\n");
    struct built n0 = b;
    n0.job = build_variant(&b, "slow", "nccl_timeout: 2s", "nccl_timeout: 60s");
    struct run_proc p[2];
    struct run_result r[2];
    double t0 = ddpc_now();
    start_node(&p[0], &n0, 0);
    usleep(1500 * 1000);   /* node 0's store is up, its ranks at the rendezvous */
    char nsarg[64];
    snprintf(nsarg, sizeof nsarg, "--net=/run/netns/%s", net.ns[1]);
    char *argv[] = { "nsenter", nsarg, "--", n0.job, "--node-rank", "1", "--resume",
                     "/nonexistent/h13.ckpt", NULL };
    ck_assert_int_eq(run_start(argv, b.dir, NULL, &p[1]), 0);
    for (int k = 0; k < 2; k++)
        ck_assert_int_eq(run_finish(&p[k], 40, &r[k]), 0);
    double dt = ddpc_now() - t0;
    for (int k = 0; k < 2; k++)
        ck_assert_msg(!r[k].timed_out && r[k].exited && r[k].code != 0,
                      "node %d: status %d%s after %.1f s:\n%s", k, r[k].code,
                      r[k].timed_out ? " (timed out)" : "", dt, r[k].err);
    ck_assert_msg(dt < 20, "the nodes took %.1f s to end (nccl_timeout 60 s):\n%s", dt,
                  r[0].err);
    ck_assert_msg(strstr(r[0].err, "node 1 gave up"), "node 0 does not name node 1:\n%s",
                  r[0].err);
    printf("multinode: stopped after %.1f s; node 0:\n%s", dt, r[0].err);
    for (int k = 0; k < 2; k++)
        run_result_free(&r[k]);
    free(n0.job);
    built_free(&b);
}
END_TEST

/* Node 0's launcher hosts the store for the job's whole life: once node 1
 * has met it there, a refused connection means node 0 has stopped. With
 * node 0 killed, node 1 restarts (max_restarts 2) and stops at its next
 * rendezvous, naming node 0; it used to retry connecting until nccl_timeout
 * (60 s here), twice. */
START_TEST(node_1_stops_when_node_0_is_gone)
{
    if (skipped())
        return;
    struct built b;
    build_x(&b, 1, 1000, 0, "  max_restarts: 2\n");
    struct built s = b;
    s.job = build_variant(&b, "slow", "nccl_timeout: 2s", "nccl_timeout: 60s");
    struct run_proc p[2];
    struct run_result r[2];
    start_both_until(p, &s, "epoch 2/");
    ck_assert_int_eq(kill(-p[0].pid, SIGKILL), 0);   /* node 0's launcher, store and workers */
    double t0 = ddpc_now();
    ck_assert_int_eq(run_finish(&p[1], 30, &r[1]), 0);
    double dt = ddpc_now() - t0;
    ck_assert_int_eq(run_finish(&p[0], 5, &r[0]), 0);
    ck_assert_msg(!r[1].timed_out && r[1].exited && r[1].code != 0,
                  "node 1: status %d%s after %.1f s:\n%s", r[1].code,
                  r[1].timed_out ? " (timed out)" : "", dt, r[1].err);
    ck_assert_msg(dt < 10, "node 1 took %.1f s to end (nccl_timeout 60 s)", dt);
    ck_assert_msg(strstr(r[1].err, "node 0 has stopped"), "node 1:\n%s", r[1].err);
    ck_assert_msg(!strstr(r[1].err, "restarting (2 of 2)"), "node 1:\n%s", r[1].err);
    printf("multinode: node 1 stopped %.1f s after node 0 was killed:\n%s", dt, r[1].err);
    for (int k = 0; k < 2; k++)
        run_result_free(&r[k]);
    free(s.job);
    built_free(&b);
}
END_TEST

START_TEST(cut_link_ends_both_nodes)
{
    if (skipped())
        return;
    struct built b;
    build(&b, 1, 1000, 0);
    struct run_proc p[2];
    struct run_result r[2];
    start_both_until(p, &b, "epoch 2/");
    char err[256];
    ck_assert_msg(ip_cmd(err, sizeof err, "-n", net.ns[1], "link", "set", net.veth[1], "down",
                         0, 0, 0) == 0, "%s", err);
    double t0 = ddpc_now();
    for (int k = 0; k < 2; k++)
        ck_assert_int_eq(run_finish(&p[k], 30, &r[k]), 0);
    double dt = ddpc_now() - t0;
    ck_assert_msg(dt < TIMEOUT_S + 3, "the nodes took %.2f s to end", dt);
    for (int k = 0; k < 2; k++) {
        ck_assert_msg(r[k].exited && r[k].code == 1, "node %d status %d", k, r[k].code);
        ck_assert_msg(strstr(r[k].err, "deadline") || strstr(r[k].err, "timeout"),
                      "node %d:\n%s", k, r[k].err);
    }
    for (int k = 0; k < 2; k++)
        run_result_free(&r[k]);
    built_free(&b);
}
END_TEST

/* ===== a real Slurm cluster (tests/slurm_cluster.sh) ===== */

/* The script builds the cluster, runs the sbatch script `ddpc build`
 * generated (completed, scancel, SIGUSR1, requeue after a lost node) and tears it
 * all down. Whatever it left if it was killed is removed here: its two
 * namespaces (TAGa, TAGb) with everything in them, and its munged. */
START_TEST(slurm_runs_the_generated_sbatch)
{
    char *dir = make_temp_dir("slurm");
    ck_assert_ptr_nonnull(dir);
    char script[4096], ddpc[4096], tag[32];
    snprintf(script, sizeof script, "%s/tests/slurm_cluster.sh", test_top());
    snprintf(ddpc, sizeof ddpc, "%s/bin/ddpc", test_build());
    snprintf(tag, sizeof tag, "ds%d", (int)getpid());
    char *argv[] = { "bash", script, dir, ddpc, tag, NULL };
    struct run_result r;
    ck_assert_int_eq(run_capture(argv, NULL, NULL, 280, &r), 0);

    char ns[40], pidf[4200];
    for (int k = 0; k < 2; k++) {
        snprintf(ns, sizeof ns, "%s%c", tag, 'a' + k);
        ns_delete(ns);
    }
    snprintf(pidf, sizeof pidf, "%s/munge/pid", dir);
    FILE *f = fopen(pidf, "r");
    long mpid = 0;
    if (f) {
        if (fscanf(f, "%ld", &mpid) == 1 && mpid > 1)
            (void)kill((pid_t)mpid, SIGKILL);
        fclose(f);
    }

    if (r.exited && r.code == 77) {
        printf("%s", r.out);   /* its SKIP line */
    } else {
        ck_assert_msg(!r.timed_out, "the Slurm cases ran past 280 s:\n%s%s", r.out, r.err);
        printf("%s", r.out);
        ck_assert_msg(r.exited && r.code == 0, "Slurm cases failed (status %d):\n%s%s", r.code,
                      r.out, r.err);
        static const char *const cases[] = { "completed", "scancel", "usr1", "requeue" };
        for (int i = 0; i < 4; i++) {
            char want[64];
            snprintf(want, sizeof want, "case %s: ok", cases[i]);
            ck_assert_msg(strstr(r.out, want), "no '%s':\n%s", want, r.out);
        }
    }
    run_result_free(&r);
    rm_tree(dir);
    free(dir);
}
END_TEST

/* ===== Slurm's GPU renumbering (runtime/slurm.c) ===== */

START_TEST(slurm_gpu_renumbering)
{
    int out[4];
    char note[400];
    /* Slurm gave exactly the listed GPUs: their positions */
    ck_assert_int_eq(slurm_gpu_map((int[]){ 2, 3 }, 2, "2,3", 2, out, note, sizeof note), 1);
    ck_assert_int_eq(out[0], 0);
    ck_assert_int_eq(out[1], 1);
    ck_assert_msg(strstr(note, "devices [2, 3] are the GPUs Slurm gave") &&
                  strstr(note, "cuda:0, 1"), "%s", note);
    /* out of order */
    ck_assert_int_eq(slurm_gpu_map((int[]){ 5, 1 }, 2, "1,5", 2, out, note, sizeof note), 1);
    ck_assert_int_eq(out[0], 1);
    ck_assert_int_eq(out[1], 0);
    /* other GPUs than listed: used in order, said so */
    ck_assert_int_eq(slurm_gpu_map((int[]){ 2, 3 }, 2, "0,1", 2, out, note, sizeof note), 1);
    ck_assert_int_eq(out[0], 0);
    ck_assert_int_eq(out[1], 1);
    ck_assert_ptr_nonnull(strstr(note, "did not give"));
    /* nothing to change */
    ck_assert_int_eq(slurm_gpu_map((int[]){ 0, 1 }, 2, "0,1", 2, out, note, sizeof note), 0);
    ck_assert_str_eq(note, "");
    /* UUIDs: positional */
    ck_assert_int_eq(slurm_gpu_map((int[]){ 3 }, 1, "GPU-8f2a", 1, out, note, sizeof note), 1);
    ck_assert_int_eq(out[0], 0);
    /* too few */
    ck_assert_int_eq(slurm_gpu_map((int[]){ 0, 1, 2 }, 3, "4,5", 2, out, note, sizeof note), -1);
    ck_assert_msg(strstr(note, "gave this node 2 GPUs") && strstr(note, "--gpus-per-node=3"),
                  "%s", note);
}
END_TEST

/* A 2-node job started by Slurm on 3 nodes says what differs and stops
 * before any worker starts; on 2 it plans (--dry-run), taking its node
 * rank from SLURM_NODEID. No namespaces needed: nothing connects. */
START_TEST(slurm_node_count_is_checked)
{
    struct built b;
    memset(&net, 0, sizeof net);
    snprintf(net.ip[0], sizeof net.ip[0], "10.0.0.1");
    build(&b, 1, 1, 0);
    char *argv[] = { b.job, "--dry-run", NULL };
    char *three[] = { "SLURM_NNODES=3", "SLURM_NODEID=1", NULL };
    struct run_result r;
    ck_assert_int_eq(run_capture(argv, b.dir, three, 30, &r), 0);
    ck_assert_msg(r.exited && r.code == 1, "status %d:\n%s", r.code, r.err);
    ck_assert_msg(strstr(r.err, "SLURM gave this job 3 nodes (SLURM_NNODES=3) but it was built "
                         "for launch.num_nodes 2"), "%s", r.err);
    /* launcher local: no sbatch script was generated, so none is named */
    ck_assert_msg(!strstr(r.err, "sbatch script unchanged") &&
                  strstr(r.err, "srun --nodes=2 --ntasks-per-node=1"), "%s", r.err);
    run_result_free(&r);
    struct built s;
    build_x(&s, 1, 1, 0, "  launcher: slurm\n");
    char *sargv[] = { s.job, "--dry-run", NULL };
    ck_assert_int_eq(run_capture(sargv, s.dir, three, 30, &r), 0);
    ck_assert_msg(r.exited && r.code == 1 && strstr(r.err, "submit the generated sbatch script "
                  "unchanged (it asks for --nodes=2)"), "status %d:\n%s", r.code, r.err);
    run_result_free(&r);
    built_free(&s);
    char *two[] = { "SLURM_JOB_NUM_NODES=2", "SLURM_NODEID=1", NULL };
    ck_assert_int_eq(run_capture(argv, b.dir, two, 30, &r), 0);
    ck_assert_msg(r.exited && r.code == 0, "status %d:\n%s", r.code, r.err);
    ck_assert_msg(strstr(r.out, "node rank") && strstr(r.out, "rank 1   node 1"), "%s", r.out);
    run_result_free(&r);
    built_free(&b);
}
END_TEST

Suite *multinode_suite(void)
{
    Suite *s = suite_create("multinode");
    TCase *t = tcase_create("namespaces");
    tcase_add_unchecked_fixture(t, net_up, net_down);
    tcase_add_checked_fixture(t, net_clean, NULL);
    tcase_set_timeout(t, 90);
    tcase_add_test(t, two_nodes_match_one_host);
    tcase_add_test(t, killed_node_ends_node_0);
    tcase_add_test(t, node_0_alone_names_what_it_waited_for);
    tcase_add_test(t, restart_after_a_dead_worker_on_node_1);
    tcase_add_test(t, a_node_with_another_job_or_data_is_named);
    tcase_add_test(t, two_jobs_as_one_node_rank_are_named);
    tcase_add_test(t, cut_link_ends_both_nodes);   /* last: it leaves the link down */
    suite_add_tcase(s, t);
    /* restarts across nodes: a node that stops, stops the others */
    TCase *st = tcase_create("stops");
    tcase_add_unchecked_fixture(st, net_up, net_down);
    tcase_add_checked_fixture(st, net_clean, NULL);
    tcase_set_timeout(st, 90);
    tcase_add_test(st, a_node_that_gives_up_stops_the_others);
    tcase_add_test(st, a_node_that_stops_in_its_preflight_stops_the_others);
    tcase_add_test(st, node_1_stops_when_node_0_is_gone);
    suite_add_tcase(s, st);
    TCase *sl = tcase_create("slurm");
    tcase_set_timeout(sl, 300);
    tcase_add_test(sl, slurm_runs_the_generated_sbatch);
    suite_add_tcase(s, sl);
    TCase *u = tcase_create("slurm_env");
    tcase_add_test(u, slurm_gpu_renumbering);
    tcase_add_test(u, slurm_node_count_is_checked);
    suite_add_tcase(s, u);
    return s;
}
