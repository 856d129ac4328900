/* test_faults.c - issue 5 end to end: what a user sees when a run dies.
 *
 * Every test builds a small real job with `ddpc build` (synthetic data, an
 * MLP, 2 CPU workers, about 0.05 s per epoch, 0.9 MB checkpoints) and runs it the way a user
 * does, in the background (testutil's run_start), then hurts it: kill -9 of
 * a worker or of the launcher, SIGSTOP of a worker under short timeouts,
 * Ctrl-C and SIGTERM, a kill in the middle of a checkpoint write, a flipped
 * byte, a checkpoint of another spec, a full or unwritable checkpoint_dir,
 * max_restarts. Each asserts the exit status, the message, the files left
 * in checkpoint_dir, and that no process is left behind.
 *
 * "Mid-training" is made deterministic by reacting to the job's own output:
 * when rank 0 prints "epoch N/", the test freezes the whole process group
 * (SIGSTOP), does its damage, and thaws it (SIGCONT), so how fast the
 * machine (or ASan) is does not decide what is tested.
 *
 * The one runtime test hook used here is DDPC_TEST_CKPT_STOP_AFTER_BYTES
 * (see runtime/ddprt.c): rank 0 stops itself with SIGSTOP after writing that
 * many bytes of its first checkpoint temp file, so a kill lands exactly in
 * the middle of a write. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ckpt.h"
#include "suites.h"
#include "testutil.h"

#define JOB_NAME   "fj"
#define EPOCHS     8
#define LAYERS     "32,256,256,4"
#define RUN_LIMIT  120.0      /* seconds: only a hang ever gets near it */

static double tnow(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static char *path_in(const char *dir, const char *name)
{
    char *p = NULL;
    ck_assert_int_ge(asprintf(&p, "%s/%s", dir, name), 0);
    return p;
}

/* ===== the job ===== */

struct fopts {
    const char *lr;            /* learning_rate, as written; NULL: 0.01 */
    const char *ckdir;         /* checkpoint_dir; NULL: ckpt; "": none (export only) */
    int         keep_last;
    const char *resume;        /* checkpoint.resume; NULL: absent (auto) */
    const char *extra;         /* more top-level lines; NULL: none */
    const char *export_path;   /* checkpoint.export; NULL: model.safetensors */
    int         every;         /* checkpoint.every_n_epochs; 0: 1 */
    int         epochs;        /* 0: EPOCHS */
    const char  *ckextra;      /* more checkpoint keys (", k: v"); NULL: none */
    const char  *model;        /* the model line; NULL: the MLP of LAYERS */
};

/* Writes dir/<bin>.yaml and builds dir/<bin>; returns the binary's path.
 * Paths in the spec are relative, so one binary runs in several working
 * directories with the same spec hash. */
static char *build_job(const char *dir, const char *bin, const struct fopts *o)
{
    char *spec = NULL, *job = path_in(dir, bin), *text = NULL, *resume = NULL;
    ck_assert_int_ge(asprintf(&spec, "%s/%s.yaml", dir, bin), 0);
    if (o->resume)
        ck_assert_int_ge(asprintf(&resume, ", resume: %s", o->resume), 0);
    const char *exp = o->export_path ? o->export_path : "model.safetensors";
    char *ckpt = NULL;
    if (o->ckdir && !*o->ckdir)
        ck_assert_int_ge(asprintf(&ckpt, "checkpoint: {export: %s}\n", exp), 0);
    else
        ck_assert_int_ge(asprintf(&ckpt, "checkpoint_dir: %s\n"
                                  "checkpoint: {every_n_epochs: %d, keep_last: %d, export: %s%s%s}\n",
                                  o->ckdir ? o->ckdir : "ckpt", o->every > 0 ? o->every : 1,
                                  o->keep_last, exp,
                                  resume ? resume : "", o->ckextra ? o->ckextra : ""), 0);
    ck_assert_int_ge(asprintf(&text,
        "version: 1\n"
        "name: " JOB_NAME "\n"
        "devices: 2\n"
        "accelerator: cpu\n"
        "epochs: %d\n"
        "batch_size: 16\n"
        "learning_rate: %s\n"
        "lr_scaling: none\n"
        "seed: 7\n"
        "%s"
        "optimizer: {type: adam}\n"
        "%s"
        "logging: {metrics_csv: m.csv, tensorboard: tb, every_n_steps: 64}\n"
        "data:\n"
        "  train: {format: synthetic, samples: 8192, features: 32, classes: 4}\n"
        "  test: {format: synthetic, samples: 512, features: 32, classes: 4, seed: 1}\n"
        "%s",
        o->epochs > 0 ? o->epochs : EPOCHS, o->lr ? o->lr : "0.01",
        o->model ? o->model : "model: {type: mlp, layers: [" LAYERS "], activation: relu}\n",
        ckpt,
        o->extra ? o->extra : ""), 0);
    ck_assert_int_eq(write_file(spec, text, strlen(text)), 0);
    char *ddpc = NULL;
    ck_assert_int_ge(asprintf(&ddpc, "%s/bin/ddpc", test_build()), 0);
    char *argv[] = { ddpc, "build", spec, "-o", job, NULL };
    struct run_result r;
    /* in dir: checkpoint.resume names a file relative to the run's cwd */
    ck_assert_int_eq(run_capture(argv, dir, NULL, 120, &r), 0);
    ck_assert_msg(r.exited && r.code == 0, "ddpc build %s failed (%d):\n%s%s", spec, r.code,
                  r.out, r.err);
    run_result_free(&r);
    free(ddpc);
    free(text);
    free(ckpt);
    free(resume);
    free(spec);
    return job;
}

/* A fresh working directory for one run of a job. */
static char *subdir(const char *dir, const char *name)
{
    char *p = path_in(dir, name);
    ck_assert_int_eq(mkdir(p, 0755), 0);
    return p;
}

static void start(struct run_proc *p, const char *job, const char *cwd, char *const env[])
{
    char *argv[] = { (char *)job, NULL };
    ck_assert_int_eq(run_start(argv, cwd, env, p), 0);
}

/* Whether out holds the end-of-epoch line that starts with needle
 * ("epoch 2/"); the progress lines carry the same words mid-line. */
static int has_epoch_line(const char *out, const char *needle)
{
    size_t n = strlen(needle);
    if (strncmp(out, needle, n) == 0)
        return 1;
    for (const char *p = strchr(out, '\n'); p; p = strchr(p + 1, '\n'))
        if (strncmp(p + 1, needle, n) == 0)
            return 1;
    return 0;
}

/* The job's workers by local rank (waits for them to exist). */
static void workers_of(const struct run_proc *p, pid_t w[2])
{
    double t0 = tnow();
    while (child_pids(p->pid, w, 2) != 2) {
        ck_assert_msg(tnow() - t0 < 10, "the job's two workers never appeared");
        usleep(2000);
    }
}

/* "epoch N/" means the end-of-epoch line, which starts a line: the plain
 * progress lines ("step s/S  epoch N/E  loss ...", every 64 steps here)
 * carry the same words mid-line, in the middle of epoch N. */
static void wait_line(struct run_proc *p, const char *needle)
{
    char buf[64];
    if (strncmp(needle, "epoch ", 6) == 0 && strlen(needle) + 2 < sizeof buf) {
        snprintf(buf, sizeof buf, "\n%s", needle);
        needle = buf;
    }
    ck_assert_msg(run_wait_output(p, needle, RUN_LIMIT), "no '%s' from the job:\n%s%s",
                  needle, p->out, p->err);
}

static void finish(struct run_proc *p, struct run_result *r)
{
    ck_assert_int_eq(run_finish(p, RUN_LIMIT, r), 0);
    ck_assert_msg(!r->timed_out, "the job hung:\n%s%s", r->out, r->err);
}

static void run_ok(const char *job, const char *cwd, struct run_result *r)
{
    struct run_proc p;
    start(&p, job, cwd, NULL);
    finish(&p, r);
    ck_assert_msg(r->exited && r->code == 0, "exit %d:\n%s%s", r->code, r->out, r->err);
}

/* ===== files ===== */

/* "fj-e0001-s000000256-1a2b3c4d.ckpt" -> "fj-e0001-s000000256.ckpt": the
 * identity tag (ckpt.h) depends on the whole configuration, so tests name
 * checkpoints by job, epoch and step. Other names are left as they are. */
static void untag(char *name)
{
    size_t n = strlen(name);
    if (n < 14 || strcmp(name + n - 5, ".ckpt") != 0 || name[n - 14] != '-')
        return;
    for (size_t i = n - 13; i < n - 5; i++)
        if (!strchr("0123456789abcdef", name[i]))
            return;
    memmove(name + n - 14, name + n - 5, 6);
}

/* Names in dir containing `part`, untagged, sorted, joined by spaces. */
static void names_with(const char *dir, const char *part, char *buf, size_t cap)
{
    char names[64][256];
    int n = 0;
    buf[0] = '\0';
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL && n < 64)
        if (strstr(de->d_name, part)) {
            snprintf(names[n], sizeof names[0], "%s", de->d_name);
            untag(names[n++]);
        }
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], (int (*)(const void *, const void *))strcmp);
    for (int i = 0; i < n; i++) {
        size_t l = strlen(buf);
        snprintf(buf + l, cap - l, "%s%s", i ? " " : "", names[i]);
    }
}

static int n_names_with(const char *dir, const char *part)
{
    char buf[16384];
    names_with(dir, part, buf, sizeof buf);
    if (!buf[0])
        return 0;
    int n = 1;
    for (const char *s = buf; *s; s++)
        n += *s == ' ';
    return n;
}

/* The path of the checkpoint that untag() names `name` in dir, or NULL. */
static char *find_ckpt(const char *dir, const char *name)
{
    DIR *d = opendir(dir);
    if (!d)
        return NULL;
    char *found = NULL, buf[256];
    struct dirent *de;
    while (!found && (de = readdir(d)) != NULL) {
        snprintf(buf, sizeof buf, "%s", de->d_name);
        untag(buf);
        if (strcmp(buf, name) == 0)
            found = path_in(dir, de->d_name);
    }
    closedir(d);
    return found;
}

/* The same, which must exist. */
static char *ckpt_in(const char *dir, const char *name)
{
    char *p = find_ckpt(dir, name);
    ck_assert_msg(p, "no checkpoint %s in %s", name, dir);
    return p;
}

/* dir/name exists under its final name (a checkpoint is renamed there only
 * once complete and fsynced). */
static int exists_in(const char *dir, const char *name)
{
    char *p = find_ckpt(dir, name);
    int ok = p && access(p, F_OK) == 0;
    free(p);
    return ok;
}

/* Starts job in cwd and lets it run until checkpoint `name` is durable in
 * ck (exists_in): from the end-of-epoch line `after` on, the job is
 * stopped and stepped 1 ms at a time, so it stops soon after the
 * checkpoint appears. The job is left stopped; w gets its workers. */
static void run_until_checkpoint(struct run_proc *p, const char *job, const char *cwd,
                                 const char *after, const char *ck, const char *name,
                                 pid_t w[2])
{
    start(p, job, cwd, NULL);
    wait_line(p, after);
    kill(-p->pid, SIGSTOP);
    workers_of(p, w);
    double t0 = tnow();
    while (!exists_in(ck, name)) {
        kill(-p->pid, SIGCONT);
        usleep(1000);
        kill(-p->pid, SIGSTOP);
        ck_assert_msg(tnow() - t0 < 30, "no checkpoint %s within 30 s", name);
    }
}

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f, "cannot open %s: %s", path, strerror(errno));
    size_t cap = 1 << 16, len = 0;
    unsigned char *b = malloc(cap);
    ck_assert_ptr_nonnull(b);
    size_t got;
    while ((got = fread(b + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) {
            cap *= 2;
            b = realloc(b, cap);
            ck_assert_ptr_nonnull(b);
        }
    }
    fclose(f);
    *n = len;
    return b;
}

/* Byte for byte. */
static void assert_same_file(const char *a, const char *b)
{
    size_t na, nb;
    unsigned char *x = slurp(a, &na), *y = slurp(b, &nb);
    ck_assert_msg(na == nb && memcmp(x, y, na) == 0, "%s (%zu bytes) and %s (%zu bytes) differ",
                  a, na, b, nb);
    free(x);
    free(y);
}

/* No partial file anywhere in checkpoint_dir, and the metrics CSV is whole:
 * the header, then complete rows of 7 cells. */
static void assert_no_partial_files(const char *cwd)
{
    char *ck = path_in(cwd, "ckpt"), *csv = path_in(cwd, "m.csv"), tmps[16384];
    names_with(ck, ".tmp.", tmps, sizeof tmps);
    if (tmps[0]) {
        const char *dot = strrchr(tmps, '.');
        long pid = dot ? strtol(dot + 1, NULL, 10) : 0;
        char st = pid > 0 ? proc_state((pid_t)pid) : 0;
        ck_assert_msg(0, "temp files left in checkpoint_dir %s: %s (writer pid %ld: state %c)",
                      ck, tmps, pid, st ? st : '-');
    }
    if (access(csv, R_OK) == 0) {
        size_t n;
        char *t = (char *)slurp(csv, &n);
        t = realloc(t, n + 1);
        t[n] = '\0';
        /* the run's identity line (outver.h), then the header */
        const char *id = "# ddpc job=", *hdr = "step,epoch,lr,loss,samples_per_s,eval_loss,"
                                               "eval_accuracy\n";
        ck_assert_msg(strncmp(t, id, strlen(id)) == 0, "CSV identity line:\n%s", t);
        size_t body = (size_t)(strchr(t, '\n') - t) + 1;
        ck_assert_msg(strncmp(t + body, hdr, strlen(hdr)) == 0, "CSV header:\n%s", t);
        ck_assert_msg(n > 0 && t[n - 1] == '\n', "CSV ends in a partial row:\n%s", t);
        int commas = 0;
        for (size_t i = body; i < n; i++) {
            if (t[i] == ',')
                commas++;
            else if (t[i] == '\n') {
                ck_assert_msg(commas == 6, "CSV row with %d commas:\n%s", commas, t);
                commas = 0;
            }
        }
        free(t);
    }
    free(ck);
    free(csv);
}

/* The step column of the CSV's rows (train and eval) in order, as
 * "64 128 ... ": after a resume the crashed attempt's rows past the
 * checkpoint are gone, so the file lists the steps an uninterrupted run's
 * does, each once. */
static void csv_steps(const char *cwd, char *buf, size_t cap)
{
    char *csv = path_in(cwd, "m.csv");
    size_t n;
    char *t = (char *)slurp(csv, &n);
    t = realloc(t, n + 1);
    t[n] = '\0';
    buf[0] = '\0';
    const char *q = strchr(t, '\n');
    while (q && q[1]) {
        long step = strtol(q + 1, NULL, 10);
        size_t l = strlen(buf);
        snprintf(buf + l, cap - l, "%ld ", step);
        q = strchr(q + 1, '\n');
    }
    free(t);
    free(csv);
}

/* The uninterrupted run everything else is compared with: in dir/ref. */
static char *reference_run_out(const char *dir, const char *job, char **out)
{
    char *ref = subdir(dir, "ref");
    struct run_result r;
    run_ok(job, ref, &r);
    ck_assert_ptr_null(strstr(r.out, "resumed from"));
    if (out)
        ck_assert_ptr_nonnull(*out = strdup(r.out));
    run_result_free(&r);
    return ref;
}

static char *reference_run(const char *dir, const char *job)
{
    return reference_run_out(dir, job, NULL);
}

/* The train_loss text of out's end-of-epoch line "epoch N/..." ("" if none). */
static void epoch_train_loss(const char *out, int epoch, char *buf, size_t cap)
{
    char needle[64];
    snprintf(needle, sizeof needle, "epoch %d/", epoch);
    buf[0] = '\0';
    for (const char *p = out; p; p = strchr(p, '\n')) {
        if (*p == '\n')
            p++;
        const char *tl = strstr(p, "train_loss=");
        const char *nl = strchr(p, '\n');
        if (strncmp(p, needle, strlen(needle)) == 0 && tl && (!nl || tl < nl)) {
            snprintf(buf, cap, "%.*s", (int)strcspn(tl, " \n"), tl);
            return;
        }
    }
}

static void assert_same_model(const char *ref, const char *cwd)
{
    char *a = path_in(ref, "model.safetensors"), *b = path_in(cwd, "model.safetensors");
    assert_same_file(a, b);
    free(a);
    free(b);
}

static void setup(void)
{
    adopt_orphans();
}

static void assert_nothing_left(const pid_t *w, int n)
{
    ck_assert_int_eq(wait_gone(w, n, 2.0), 0);
    ck_assert_int_eq(leftover_children(1.0), 0);
}

/* ===== supervision ===== */

START_TEST(worker_kill9_stops_all_and_names_it)
{
    char *dir = make_temp_dir("faults-kill9");
    struct fopts o = { 0 };
    char *job = build_job(dir, "job", &o);
    struct run_proc p;
    pid_t w[2];
    start(&p, job, dir, NULL);
    wait_line(&p, "epoch 2/");
    kill(-p.pid, SIGSTOP);
    workers_of(&p, w);
    ck_assert_int_eq(kill(w[1], SIGKILL), 0);
    double t_kill = tnow();
    kill(-p.pid, SIGCONT);
    struct run_result r;
    finish(&p, &r);
    double took = tnow() - t_kill;
    ck_assert_msg(r.exited && r.code != 0, "exit %d after a worker was killed", r.code);
    ck_assert_msg(strstr(r.err, "rank 1 (cpu worker 1) killed by signal 9"),
                  "stderr does not name rank, device and cause:\n%s", r.err);
    /* a SIGKILL the launcher did not send: the OOM killer's, or a kill -9 */
    ck_assert_msg(strstr(r.err, "SIGKILL from outside the job: the kernel's OOM killer") ||
                  strstr(r.err, "out of memory: the kernel's OOM killer killed it"),
                  "a SIGKILL from outside is not explained:\n%s", r.err);
    ck_assert_msg(took < 1.5, "the job took %.2f s to stop after a worker died", took);
    ck_assert_msg(!strstr(r.out, "\ndone "), "the job went on training:\n%s", r.out);
    printf("faults: kill -9 of rank 1: exit %d after %.2f s: %s", r.code, took, r.err);
    assert_nothing_left(w, 2);
    run_result_free(&r);
    free(job);
    rm_tree(dir);
    free(dir);
}
END_TEST

/* This process's memory cgroup directory (v2, or v1's memory hierarchy), in
 * buf; 0, or -1 when there is none this process can see. */
static int own_memory_cgroup(char *buf, size_t len, int *v2)
{
    FILE *f = fopen("/proc/self/cgroup", "re");
    char line[4096];
    int rc = -1;
    if (!f)
        return -1;
    while (rc < 0 && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        const char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        struct stat st;
        if (c2 - c1 - 1 == 6 && strncmp(c1 + 1, "memory", 6) == 0) {
            (void)snprintf(buf, len, "/sys/fs/cgroup/memory%s", c2 + 1);
            *v2 = 0;
        } else if (c2 == c1 + 1) {
            (void)snprintf(buf, len, "/sys/fs/cgroup%s", c2 + 1);
            char ctl[4200];
            (void)snprintf(ctl, sizeof ctl, "%s/memory.max", buf);
            *v2 = 1;
            if (stat(ctl, &st) != 0 && strcmp(c2 + 1, "/") != 0)
                continue;
        } else {
            continue;
        }
        if (stat(buf, &st) == 0 && S_ISDIR(st.st_mode))
            rc = 0;
    }
    (void)fclose(f);
    return rc;
}

static int put_text(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = write(fd, text, strlen(text));
    int saved = errno;
    (void)close(fd);
    errno = saved;
    return n == (ssize_t)strlen(text) ? 0 : -1;
}

/* A worker the kernel's OOM killer kills is named as such: the launcher said
 * only "rank 1 (cpu worker 1) killed by signal 9 (Killed)", and the OOM
 * killer itself prints nothing where the user looks. Rank 1 goes into a
 * cgroup of 32 MiB with oom_score_adj 1000, and a child of this test fills
 * that cgroup: the memcg OOM killer then picks rank 1, as it picks the
 * largest worker of a job over its container's limit. */
START_TEST(oom_killed_worker_is_named_out_of_memory)
{
    char own[4096], cg[4200], file[4300], pid[32];
    int v2 = 0;
    if (geteuid() != 0 || own_memory_cgroup(own, sizeof own, &v2) != 0) {
        test_skip("faults", "OOM-killed worker: %s", geteuid() != 0 ? "not root"
                  : "no memory cgroup visible");
        return;
    }
    (void)snprintf(cg, sizeof cg, "%s/ddpc-test-oom.%d", own, (int)getpid());
    if (mkdir(cg, 0755) != 0) {
        test_skip("faults", "OOM-killed worker: cannot create a memory cgroup %s: %s", cg,
                  strerror(errno));
        return;
    }
    (void)snprintf(file, sizeof file, "%s/%s", cg, v2 ? "memory.max" : "memory.limit_in_bytes");
    if (put_text(file, "33554432") != 0) {
        test_skip("faults", "OOM-killed worker: cannot set %s: %s", file, strerror(errno));
        (void)rmdir(cg);
        return;
    }
    char *dir = make_temp_dir("faults-oom");
    struct fopts o = { .epochs = 50 };
    char *job = build_job(dir, "job", &o);
    struct run_proc p;
    pid_t w[2];
    start(&p, job, dir, NULL);
    wait_line(&p, "epoch 1/");
    workers_of(&p, w);
    (void)snprintf(pid, sizeof pid, "%d", (int)w[1]);
    char adj[64];
    (void)snprintf(adj, sizeof adj, "/proc/%d/oom_score_adj", (int)w[1]);
    (void)snprintf(file, sizeof file, "%s/cgroup.procs", cg);
    ck_assert_int_eq(put_text(adj, "1000"), 0);
    ck_assert_msg(put_text(file, pid) == 0, "moving rank 1 into %s: %s", cg, strerror(errno));
    pid_t hog = fork();
    ck_assert_int_ge(hog, 0);
    if (hog == 0) {
        char me[32];
        (void)snprintf(me, sizeof me, "%d", (int)getpid());
        if (put_text(file, me) != 0)
            _exit(2);
        /* tail keeps /dev/zero's one endless line: memory without bound,
         * in a program of its own (this one's allocator may be ASan's,
         * whose memory the cgroup did not see fill; the job trained on) */
        execl("/usr/bin/timeout", "timeout", "20", "tail", "/dev/zero", (char *)NULL);
        _exit(3);
    }
    int hs = 0;
    ck_assert_int_eq(waitpid(hog, &hs, 0), hog);
    struct run_result r;
    finish(&p, &r);
    for (int i = 0; i < 50 && rmdir(cg) != 0; i++)   /* empty once both are gone */
        usleep(20000);
    ck_assert_msg(r.exited && r.code != 0, "exit %d after rank 1 was OOM-killed", r.code);
    ck_assert_msg(strstr(r.err, "rank 1 (cpu worker 1) killed by signal 9") &&
                  strstr(r.err, "out of memory: the kernel's OOM killer killed it"),
                  "an OOM-killed rank is not named as one (hog status 0x%x):\n%s", hs, r.err);
    printf("faults: OOM-killed rank 1: %s", r.err);
    assert_nothing_left(w, 2);
    run_result_free(&r);
    free(job);
    rm_tree(dir);
    free(dir);
}
END_TEST

START_TEST(worker_sigstop_times_out_with_the_key_step_and_ranks)
{
    char *dir = make_temp_dir("faults-stop");
    struct fopts o = { .extra = "rank_sync_timeout: 1s\nnccl_timeout: 1s\n" };
    char *job = build_job(dir, "job", &o);
    struct run_proc p;
    pid_t w[2];
    start(&p, job, dir, NULL);
    wait_line(&p, "epoch 2/");
    kill(-p.pid, SIGSTOP);
    workers_of(&p, w);
    /* rank 1 stays stopped; the launcher and rank 0 go on */
    kill(p.pid, SIGCONT);
    kill(w[0], SIGCONT);
    double t_stop = tnow();
    struct run_result r;
    finish(&p, &r);
    double took = tnow() - t_stop;
    ck_assert_msg(r.exited && r.code != 0, "exit %d with a stopped worker", r.code);
    /* the deadline is 1 s after rank 0 entered the collective; then at most
     * about a second of teardown */
    ck_assert_msg(took < 2.8, "took %.2f s after SIGSTOP (timeouts 1 s)", took);
    ck_assert_msg(strstr(r.err, "timed out after") &&
                  (strstr(r.err, "raise rank_sync_timeout") || strstr(r.err, "raise nccl_timeout")),
                  "the message does not name the timeout key:\n%s", r.err);
    ck_assert_msg(strstr(r.err, "step "), "the message does not name the step:\n%s", r.err);
    ck_assert_msg(strstr(r.err, "waiting for rank 1 (did not arrive)"),
                  "the message does not name the rank that did not arrive:\n%s", r.err);
    printf("faults: SIGSTOP of rank 1, timeouts 1 s: exit %d after %.2f s:\n%s", r.code, took,
           r.err);
    assert_nothing_left(w, 2);
    run_result_free(&r);
    free(job);
    rm_tree(dir);
    free(dir);
}
END_TEST

/* Rank 0 stopped, only rank_sync_timeout set (nccl_timeout at its 30-minute
 * default): rank 1 may be waiting in the gradient all-reduce, which
 * rank_sync_timeout does not bound, yet the job ends within about that
 * timeout, saying which rank is stopped. (First wave: it hung.) */
START_TEST(stopped_rank0_with_only_rank_sync_timeout_ends_the_job)
{
    char *dir = make_temp_dir("faults-stop0");
    struct fopts o = { .extra = "rank_sync_timeout: 1s\n" };
    char *job = build_job(dir, "job", &o);
    /* stopped at the epoch line, rank 1 waits in the next step's barrier;
     * stopped mid-step (most of a step), in the gradient all-reduce */
    const double delay_s[3] = { 0, 0.02, 0.045 };
    for (int k = 0; k < 3; k++) {
        char name[16];
        snprintf(name, sizeof name, "run%d", k);
        char *cwd = subdir(dir, name);
        struct run_proc p;
        pid_t w[2];
        start(&p, job, cwd, NULL);
        wait_line(&p, "epoch 2/");
        if (delay_s[k] > 0)
            usleep((useconds_t)(delay_s[k] * 1e6));
        kill(-p.pid, SIGSTOP);
        workers_of(&p, w);
        /* rank 0 stays stopped; the launcher and rank 1 go on */
        kill(p.pid, SIGCONT);
        kill(w[1], SIGCONT);
        double t_stop = tnow();
        struct run_result r;
        finish(&p, &r);
        double took = tnow() - t_stop;
        ck_assert_msg(r.exited && r.code != 0, "exit %d with a stopped rank 0", r.code);
        /* the launcher allows 1 s of rank_sync_timeout and as much again for
         * a collective's own timeout to report first; then at most about a
         * second of teardown */
        ck_assert_msg(took < 4.0, "took %.2f s after SIGSTOP of rank 0 (rank_sync_timeout 1 s)",
                      took);
        ck_assert_msg(strstr(r.err, "rank 0") && strstr(r.err, "rank_sync_timeout"),
                      "the message does not name rank 0 and the timeout:\n%s", r.err);
        printf("faults: SIGSTOP of rank 0 %.0f ms after the epoch line, rank_sync_timeout 1 s "
               "only: exit %d after %.2f s:\n%s", delay_s[k] * 1e3, r.code, took, r.err);
        assert_nothing_left(w, 2);
        run_result_free(&r);
        free(cwd);
    }
    free(job);
    rm_tree(dir);
    free(dir);
}
END_TEST

START_TEST(launcher_kill9_takes_the_workers_down)
{
    char *dir = make_temp_dir("faults-launcher");
    struct fopts o = { 0 };
    char *job = build_job(dir, "job", &o);
    struct run_proc p;
    pid_t w[2];
    start(&p, job, dir, NULL);
    wait_line(&p, "epoch 2/");
    kill(-p.pid, SIGSTOP);
    workers_of(&p, w);
    ck_assert_int_eq(kill(p.pid, SIGKILL), 0);
    double t_kill = tnow();
    kill(-p.pid, SIGCONT);
    int alive = wait_gone(w, 2, 1.0);
    double took = tnow() - t_kill;
    ck_assert_msg(alive == 0, "%d worker(s) outlived the launcher by 1 s", alive);
    struct run_result r;
    finish(&p, &r);
    ck_assert_msg(!r.exited && r.code == SIGKILL, "launcher status %d/%d:\n%s%s", r.exited, r.code,
                  r.out, r.err);
    printf("faults: kill -9 of the launcher: workers gone after %.3f s\n", took);
    assert_nothing_left(w, 2);
    run_result_free(&r);
    free(job);
    rm_tree(dir);
    free(dir);
}
END_TEST

/* SIGINT to the launcher alone, SIGINT to the whole process group (what a
 * terminal's Ctrl-C does), SIGTERM to the launcher, SIGHUP to the group (the
 * terminal closed); Ctrl-C while rank 0 is in the middle of writing a
 * checkpoint, SIGTERM while it writes the export. */
START_TEST(interrupt_and_term_exit_130_143_leaving_nothing)
{
    char *dir = make_temp_dir("faults-int");
    struct fopts o = { 0 };
    char *job = build_job(dir, "job", &o);
    struct fopts oe = { .ckdir = "" };
    char *job_export = build_job(dir, "jobe", &oe);
    struct { int sig, group, mid_write, want; const char *what; } cases[] = {
        { SIGINT, 0, 0, 130, "SIGINT to the launcher" },
        { SIGINT, 1, 0, 130, "SIGINT to the process group (Ctrl-C)" },
        { SIGTERM, 0, 0, 143, "SIGTERM to the launcher" },
        { SIGINT, 1, 1, 130, "Ctrl-C during a checkpoint write" },
        { SIGTERM, 0, 2, 143, "SIGTERM during the export write" },
        { SIGHUP, 1, 0, 129, "SIGHUP to the process group (terminal closed)" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[16];
        snprintf(name, sizeof name, "run%zu", i);
        char *cwd = subdir(dir, name);
        char *env[] = { "DDPC_TEST_CKPT_STOP_AFTER_BYTES=1000", NULL };
        struct run_proc p;
        pid_t w[2];
        start(&p, cases[i].mid_write == 2 ? job_export : job, cwd,
              cases[i].mid_write ? env : NULL);
        if (cases[i].mid_write) {
            /* rank 0 stops itself 1000 bytes into its first checkpoint */
            workers_of(&p, w);
            double t0 = tnow();
            while (proc_state(w[0]) != 'T') {
                ck_assert_msg(tnow() - t0 < RUN_LIMIT, "rank 0 never stopped mid-write");
                usleep(2000);
            }
            char *ck = path_in(cwd, "ckpt");
            ck_assert_int_eq(n_names_with(cases[i].mid_write == 2 ? cwd : ck, ".tmp."), 1);
            free(ck);
        } else {
            wait_line(&p, "epoch 2/");
            kill(-p.pid, SIGSTOP);
            workers_of(&p, w);
        }
        ck_assert_int_eq(kill(cases[i].group ? -p.pid : p.pid, cases[i].sig), 0);
        double t_sig = tnow();
        if (!cases[i].mid_write)
            kill(-p.pid, SIGCONT);
        struct run_result r;
        finish(&p, &r);
        double took = tnow() - t_sig;
        ck_assert_msg(r.exited && r.code == cases[i].want, "%s: exit %d/%d, want %d:\n%s",
                      cases[i].what, r.exited, r.code, cases[i].want, r.err);
        ck_assert_msg(took < 1.5, "%s: %.2f s to stop", cases[i].what, took);
        ck_assert_msg(strstr(r.err, cases[i].sig == SIGINT ? "SIGINT"
                                    : cases[i].sig == SIGTERM ? "SIGTERM" : "SIGHUP"),
                      "%s: stderr does not say why:\n%s", cases[i].what, r.err);
        printf("faults: %s: exit %d after %.2f s\n", cases[i].what, r.code, took);
        assert_nothing_left(w, 2);
        assert_no_partial_files(cwd);
        char tmps[4096];
        names_with(cwd, ".tmp.", tmps, sizeof tmps);
        ck_assert_msg(!tmps[0], "%s: temp files left: %s", cases[i].what, tmps);
        run_result_free(&r);
        free(cwd);
    }
    free(job_export);
    free(job);
    rm_tree(dir);
    free(dir);
}
END_TEST

/* SIGUSR1 / SIGUSR2 as Slurm sends them (sbatch --signal=USR1@90, the
 * Lightning habit, or scancel -s USR1): to every process of the step, the
 * workers too. Their default action killed the launcher without a word
 * (killed by signal 10; Slurm: FAILED) and its workers by
 * PR_SET_PDEATHSIG, a checkpoint being written left as a temp file; the job
 * now stops as it does on SIGTERM: 128 + the signal, the signal named, no
 * worker or partial file left. */
START_TEST(sigusr1_and_sigusr2_stop_like_sigterm)
{
    char *dir = make_temp_dir("faults-usr");
    struct fopts o = { 0 };
    char *job = build_job(dir, "job", &o);
    struct { int sig, mid_write, want; const char *name; } cases[] = {
        { SIGUSR1, 1, 138, "SIGUSR1" },
        { SIGUSR2, 0, 140, "SIGUSR2" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[16];
        snprintf(name, sizeof name, "run%zu", i);
        char *cwd = subdir(dir, name);
        char *env[] = { "DDPC_TEST_CKPT_STOP_AFTER_BYTES=1000", NULL };
        struct run_proc p;
        pid_t w[2];
        start(&p, job, cwd, cases[i].mid_write ? env : NULL);
        workers_of(&p, w);
        if (cases[i].mid_write) {
            double t0 = tnow();
            while (proc_state(w[0]) != 'T') {
                ck_assert_msg(tnow() - t0 < RUN_LIMIT, "rank 0 never stopped mid-write");
                usleep(2000);
            }
        } else {
            wait_line(&p, "epoch 2/");
        }
        ck_assert_int_eq(kill(-p.pid, cases[i].sig), 0);
        struct run_result r;
        finish(&p, &r);
        ck_assert_msg(r.exited && r.code == cases[i].want, "%s: exit %d/%d, want %d:\n%s",
                      cases[i].name, r.exited, r.code, cases[i].want, r.err);
        char want[64];
        snprintf(want, sizeof want, "interrupted by %s", cases[i].name);
        ck_assert_msg(strstr(r.err, want), "%s: stderr does not say why:\n%s", cases[i].name,
                      r.err);
        assert_nothing_left(w, 2);
        assert_no_partial_files(cwd);
        char tmps[4096];
        names_with(cwd, ".tmp.", tmps, sizeof tmps);
        ck_assert_msg(!tmps[0], "%s: temp files left: %s", cases[i].name, tmps);
        run_result_free(&r);
        free(cwd);
    }
    free(job);
    rm_tree(dir);
    free(dir);
}
END_TEST

/* SIGTERM again and again to the whole process group while the job stops,
 * as Slurm sends it at a time limit (slurmstepd to every process of the
 * step, then srun ending the step), with rank 0 in the middle of a
 * checkpoint write. The launcher restored the default disposition when its
 * workers were gone, so a later SIGTERM killed it in its cleanup: death by
 * signal 15 without "interrupted by SIGTERM" (5 runs in 6 by hand), the
 * temp file's removal at stake. It now exits 143 with its message. */
START_TEST(repeated_sigterm_still_exits_143_with_its_message)
{
    char *dir = make_temp_dir("faults-terms");
    struct fopts o = { 0 };
    char *job = build_job(dir, "job", &o);
    for (int i = 0; i < 3; i++) {
        char name[16];
        snprintf(name, sizeof name, "run%d", i);
        char *cwd = subdir(dir, name);
        char *env[] = { "DDPC_TEST_CKPT_STOP_AFTER_BYTES=1000", NULL };
        struct run_proc p;
        pid_t w[2];
        start(&p, job, cwd, env);
        workers_of(&p, w);
        double t0 = tnow();
        while (proc_state(w[0]) != 'T') {
            ck_assert_msg(tnow() - t0 < RUN_LIMIT, "rank 0 never stopped mid-write");
            usleep(2000);
        }
        t0 = tnow();
        for (char st = proc_state(p.pid); st && st != 'Z' && tnow() - t0 < 10;
             st = proc_state(p.pid)) {
            (void)kill(-p.pid, SIGTERM);
            usleep(200);
        }
        struct run_result r;
        finish(&p, &r);
        ck_assert_msg(r.exited && r.code == 143, "run %d: exit %d/%d, want 143:\n%s", i,
                      r.exited, r.code, r.err);
        ck_assert_msg(strstr(r.err, "interrupted by SIGTERM"), "run %d: stderr does not say "
                      "why:\n%s", i, r.err);
        assert_nothing_left(w, 2);
        char tmps[4096];
        names_with(cwd, ".tmp.", tmps, sizeof tmps);
        ck_assert_msg(!tmps[0], "run %d: temp files left: %s", i, tmps);
        run_result_free(&r);
        free(cwd);
    }
    free(job);
    rm_tree(dir);
    free(dir);
}
END_TEST

/* A job whose standard output is a pipe, and the reader goes away (`./job
 * | head -3`): it stops as a Unix tool does, without a word on stderr, with
 * 141 (128 + SIGPIPE), no worker left, no partial file, whether rank 0 was
 * between lines or in the middle of a checkpoint write (where it stops
 * itself: only the launcher, watching the pipe, can notice; a write would
 * never come). It said "ddpc: rank 0 (cpu worker 0) killed by signal 13
 * (Broken pipe)" and exited 1, and mid-write it waited for rank 0 forever. */
START_TEST(closed_stdout_pipe_stops_quietly)
{
    char *dir = make_temp_dir("faults-pipe");
    struct fopts o = { 0 };
    char *job = build_job(dir, "job", &o);
    for (int mid_write = 0; mid_write < 2; mid_write++) {
        char *cwd = subdir(dir, mid_write ? "mid" : "lines");
        char *env[] = { "DDPC_TEST_CKPT_STOP_AFTER_BYTES=1000", NULL };
        struct run_proc p;
        pid_t w[2];
        start(&p, job, cwd, mid_write ? env : NULL);
        workers_of(&p, w);
        if (mid_write) {
            double t0 = tnow();
            while (proc_state(w[0]) != 'T') {
                ck_assert_msg(tnow() - t0 < RUN_LIMIT, "rank 0 never stopped mid-write");
                usleep(2000);
            }
        } else {
            ck_assert_msg(run_wait_output(&p, "step ", RUN_LIMIT), "no progress line:\n%s%s",
                          p.out, p.err);
        }
        ck_assert_int_eq(close(p.fd_out), 0);      /* the reader is gone */
        p.fd_out = -1;
        double t_close = tnow();
        struct run_result r;
        finish(&p, &r);
        double took = tnow() - t_close;
        const char *what = mid_write ? "during a checkpoint write" : "between lines";
        printf("faults: stdout's reader gone %s: exit %d/%d after %.2f s\n", what, r.exited,
               r.code, took);
        ck_assert_msg(r.exited && r.code == 141, "%s: exit %d/%d, want 141:\n%s", what,
                      r.exited, r.code, r.err);
        ck_assert_msg(r.err[0] == '\0', "%s: stderr is not quiet:\n%s", what, r.err);
        ck_assert_msg(took < 3.0, "%s: %.2f s to stop", what, took);
        assert_nothing_left(w, 2);
        assert_no_partial_files(cwd);
        run_result_free(&r);
        free(cwd);
    }
    free(job);
    rm_tree(dir);
    free(dir);
}
END_TEST

/* ===== checkpoints and resume ===== */

/* keep_last 2 prunes; a kill -9 of the whole job mid-training and a second
 * start resume and end with the bytes of the uninterrupted run; a kill in
 * the middle of a checkpoint write too; the export loads into torch. */
START_TEST(kill9_then_resume_is_byte_identical)
{
    char *dir = make_temp_dir("faults-resume");
    struct fopts o = { .keep_last = 2 };
    char *job = build_job(dir, "job", &o);
    char *ref = reference_run(dir, job);
    char *refck = path_in(ref, "ckpt"), names[16384];
    names_with(refck, ".ckpt", names, sizeof names);
    ck_assert_str_eq(names, JOB_NAME "-e0007-s000001792.ckpt " JOB_NAME "-e0008-s000002048.ckpt");

    /* 1. kill -9 of the whole job right after epoch 3 */
    char *cwd = subdir(dir, "killed");
    struct run_proc p;
    pid_t w[2];
    start(&p, job, cwd, NULL);
    wait_line(&p, "epoch 3/");
    workers_of(&p, w);
    kill(-p.pid, SIGKILL);
    struct run_result r;
    finish(&p, &r);
    ck_assert_msg(!r.exited && r.code == SIGKILL, "status %d/%d", r.exited, r.code);
    assert_nothing_left(w, 2);
    run_result_free(&r);
    char *ck = path_in(cwd, "ckpt");
    names_with(ck, ".ckpt", names, sizeof names);
    ck_assert_msg(n_names_with(ck, ".ckpt") >= 1, "no checkpoint after 3 epochs: '%s'", names);
    printf("faults: after kill -9 at epoch 3: %s\n", names);

    run_ok(job, cwd, &r);
    ck_assert_msg(strstr(r.out, "resumed from ckpt/" JOB_NAME "-e000"),
                  "the second start does not say it resumed:\n%s", r.out);
    const char *res = strstr(r.out, "resumed from");
    printf("faults: second start: %.*s\n", (int)(strchr(res, '\n') - res), res);
    assert_same_model(ref, cwd);
    char *a = ckpt_in(refck, JOB_NAME "-e0008-s000002048.ckpt");
    char *b = ckpt_in(ck, JOB_NAME "-e0008-s000002048.ckpt");
    assert_same_file(a, b);
    free(a);
    free(b);
    assert_no_partial_files(cwd);
    run_result_free(&r);
    free(ck);
    free(cwd);

    /* 2. kill -9 while rank 0 is in the middle of writing a checkpoint:
     *    first a run stopped after epoch 2, then a start that resumes and
     *    freezes 4 KiB into the epoch-3 checkpoint, then the last start. */
    cwd = subdir(dir, "midwrite");
    ck = path_in(cwd, "ckpt");
    run_until_checkpoint(&p, job, cwd, "epoch 2/", ck, JOB_NAME "-e0002-s000000512.ckpt", w);
    kill(-p.pid, SIGKILL);
    finish(&p, &r);
    assert_nothing_left(w, 2);
    run_result_free(&r);
    char *env[] = { "DDPC_TEST_CKPT_STOP_AFTER_BYTES=4096", NULL };
    start(&p, job, cwd, env);
    workers_of(&p, w);
    double t0 = tnow();
    while (proc_state(w[0]) != 'T') {
        ck_assert_msg(tnow() - t0 < RUN_LIMIT, "rank 0 never stopped mid-write");
        usleep(2000);
    }
    ck_assert_int_eq(n_names_with(ck, ".tmp."), 1);
    kill(-p.pid, SIGKILL);
    finish(&p, &r);
    assert_nothing_left(w, 2);
    run_result_free(&r);
    run_ok(job, cwd, &r);
    ck_assert_msg(strstr(r.out, "resumed from ckpt/" JOB_NAME "-e0002-"),
                  "not resumed from the epoch-2 checkpoint:\n%s", r.out);
    assert_same_model(ref, cwd);
    assert_no_partial_files(cwd);
    run_result_free(&r);

    /* 3. the export, loaded the way a PyTorch user would */
    char *model = path_in(ref, "model.safetensors"), *expect = path_in(dir, "expect.f32");
    char *last = ckpt_in(refck, JOB_NAME "-e0008-s000002048.ckpt");
    struct ddpc_ckpt c;
    struct ddpc_err e = { 0 };
    ck_assert_msg(ckpt_read(last, &c, &e) == 0, "%s", e.msg);
    ck_assert_int_eq(write_file(expect, c.params, c.n_params * sizeof(float)), 0);
    ckpt_free(&c);
    char *script = path_in(test_top(), "tests/safetensors_load.py");
    char *argv[] = { "/usr/bin/python3", script, model, expect, LAYERS, NULL };
    ck_assert_int_eq(run_capture(argv, NULL, NULL, 120, &r), 0);
    if (r.exited && (r.code == 77 || r.code == 127)) {   /* no torch, no python */
        test_skip("faults", "safetensors load into torch: %s",
                  r.code == 77 ? "/usr/bin/python3 cannot import torch (apt-get install "
                                 "python3-torch)" : "no /usr/bin/python3");
    } else {
        ck_assert_msg(r.exited && r.code == 0, "safetensors_load.py failed:\n%s%s", r.out, r.err);
        printf("faults: export: %s", r.out);
    }
    run_result_free(&r);
    free(script);
    free(last);
    free(model);
    free(expect);
    free(ck);
    free(cwd);
    free(refck);
    free(ref);
    free(job);
    rm_tree(dir);
    free(dir);
}
END_TEST

/* every_n_epochs 3 over 8 epochs: after epochs 3, 6 and at the end; each
 * file's header carries this binary's spec hash, the world size, the
 * position and the seed. */
START_TEST(checkpoint_schedule_and_header)
{
    char *dir = make_temp_dir("faults-sched");
    struct fopts o = { .every = 3 };
    char *job = build_job(dir, "job", &o);
    struct run_result r;
    run_ok(job, dir, &r);
    run_result_free(&r);
    char *ck = path_in(dir, "ckpt"), names[4096];
    names_with(ck, ".ckpt", names, sizeof names);
    ck_assert_str_eq(names, JOB_NAME "-e0003-s000000768.ckpt " JOB_NAME "-e0006-s000001536.ckpt "
                     JOB_NAME "-e0008-s000002048.ckpt");

    char *argv[] = { job, "--version", NULL };
    ck_assert_int_eq(run_capture(argv, dir, NULL, 30, &r), 0);
    const char *h = strstr(r.out, "sha256 ");
    ck_assert_msg(h && strlen(h) > 7 + 64, "no hash in --version: %s", r.out);
    char hash[65];
    memcpy(hash, h + 7, 64);
    hash[64] = '\0';
    run_result_free(&r);
    int64_t epochs[3] = { 3, 6, 8 };
    const char *files[3] = { JOB_NAME "-e0003-s000000768.ckpt", JOB_NAME "-e0006-s000001536.ckpt",
                             JOB_NAME "-e0008-s000002048.ckpt" };
    for (int i = 0; i < 3; i++) {
        char *f = ckpt_in(ck, files[i]);
        struct ddpc_ckpt c;
        struct ddpc_err e = { 0 };
        ck_assert_msg(ckpt_read(f, &c, &e) == 0, "%s", e.msg);
        ck_assert_str_eq(c.spec_hash, hash);
        ck_assert_int_eq(c.world, 2);
        ck_assert_int_eq(c.epoch, epochs[i]);
        ck_assert_int_eq(c.step, epochs[i] * 256);
        ck_assert_int_eq(c.optim_step, epochs[i] * 256);
        ck_assert_int_eq(c.sampler_epoch, epochs[i]);
        ck_assert_int_eq(c.sampler_batches, 0);
        ck_assert_uint_eq(c.seed, 7);
        ck_assert_uint_eq(c.n_opt, 2 * c.n_params);   /* Adam: m and v */
        ckpt_free(&c);
        free(f);
    }
    ck_assert_int_eq(leftover_children(1.0), 0);
    free(ck);
    free(job);
    rm_tree(dir);
    free(dir);
}
END_TEST

/* A run started over (resume: never) in a checkpoint_dir holding a finished
 * run's e7, e8 keeps its own newest checkpoints, not the old higher-step
 * ones: killed after epoch 3 it has lost nothing. */
START_TEST(fresh_start_keeps_its_own_checkpoints)
{
    char *dir = make_temp_dir("faults-never");
    struct fopts o = { .keep_last = 2 };
    char *job = build_job(dir, "job", &o);
    struct run_result r;
    run_ok(job, dir, &r);
    run_result_free(&r);
    char *ck = path_in(dir, "ckpt"), names[4096];
    names_with(ck, ".ckpt", names, sizeof names);
    ck_assert_str_eq(names, JOB_NAME "-e0007-s000001792.ckpt " JOB_NAME "-e0008-s000002048.ckpt");

    struct fopts on = { .keep_last = 2, .resume = "never" };
    char *job_never = build_job(dir, "jobn", &on);
    struct run_proc p;
    pid_t w[2];
    run_until_checkpoint(&p, job_never, dir, "epoch 3/", ck, JOB_NAME "-e0003-s000000768.ckpt", w);
    kill(-p.pid, SIGKILL);
    finish(&p, &r);
    ck_assert_msg(!strstr(r.out, "resumed from"), "resume: never resumed:\n%s", r.out);
    run_result_free(&r);
    assert_nothing_left(w, 2);
    /* e2 and e3; e1 too when the kill fell between e3's rename and the
     * prune after it; never the old run's e7 and e8 instead of its own */
    names_with(ck, ".ckpt", names, sizeof names);
    ck_assert_msg(strstr(names, JOB_NAME "-e0002-s000000512.ckpt " JOB_NAME
                         "-e0003-s000000768.ckpt") && !strstr(names, "-e0007-") &&
                  !strstr(names, "-e0008-"),
                  "the run started over kept '%s', not its own epochs 2 and 3", names);
    free(ck);
    free(job_never);
    free(job);
    rm_tree(dir);
    free(dir);
}
END_TEST

/* kill -9 of the whole job at arbitrary moments (during an epoch, an
 * evaluation, a checkpoint write, the export), start after start: the run
 * that finally completes ends with the reference bytes. */
START_TEST(killed_at_random_moments_still_byte_identical)
{
    char *dir = make_temp_dir("faults-random");
    struct fopts o = { .keep_last = 2 };
    char *job = build_job(dir, "job", &o);
    char *ref = reference_run(dir, job);
    char *cwd = subdir(dir, "run");
    unsigned seed = 12345;
    int kills = 0, resumes = 0;
    useconds_t span = 150000;
    struct run_result r;
    for (int attempt = 0; attempt < 10; attempt++) {
        struct run_proc p;
        start(&p, job, cwd, NULL);
        /* wait until it trains, then a pseudo-random 0-150 ms more; a
         * kill that landed after the last checkpoint and before the exit
         * leaves nothing to train: that start prints no epoch and ends */
        if (!run_wait_output(&p, "epoch ", RUN_LIMIT))
            ck_assert_msg(strstr(p.out, "nothing to train: the checkpoint already completed"),
                          "no 'epoch ' from the job:\n%s%s", p.out, p.err);
        seed = seed * 1103515245u + 12345u;
        usleep((useconds_t)((seed >> 8) % span));
        kill(-p.pid, SIGKILL);
        finish(&p, &r);
        if (strstr(r.out, "resumed from"))
            resumes++;
        int done = r.exited && r.code == 0;
        run_result_free(&r);
        ck_assert_int_eq(leftover_children(1.0), 0);
        if (done && kills == 0 && span > 1000) {
            /* it finished before the first kill (the test's sleep ran long
             * on a busy machine, or the job was quick): start over from
             * nothing with shorter delays, so a kill lands */
            rm_tree(cwd);
            free(cwd);
            cwd = subdir(dir, "run");
            span /= 4;
            continue;
        }
        if (done)
            break;
        kills++;
    }
    run_ok(job, cwd, &r);
    run_result_free(&r);
    printf("faults: %d kill -9 at random moments (%d starts resumed), then the run completed\n",
           kills, resumes);
    ck_assert_int_ge(kills, 1);
    assert_same_model(ref, cwd);
    char *refck = path_in(ref, "ckpt"), *ck = path_in(cwd, "ckpt");
    char *a = ckpt_in(refck, JOB_NAME "-e0008-s000002048.ckpt");
    char *b = ckpt_in(ck, JOB_NAME "-e0008-s000002048.ckpt");
    free(refck);
    free(ck);
    assert_same_file(a, b);
    assert_no_partial_files(cwd);
    free(a);
    free(b);
    free(cwd);
    free(ref);
    free(job);
    rm_tree(dir);
    free(dir);
}
END_TEST

/* One flipped byte in the newest checkpoint: reported, the previous one is
 * used, and the run still ends with the reference bytes. */
START_TEST(flipped_byte_falls_back_to_the_previous_checkpoint)
{
    char *dir = make_temp_dir("faults-flip");
    struct fopts o = { .keep_last = 3 };
    char *job = build_job(dir, "job", &o);
    char *ref = reference_run(dir, job);
    char *cwd = subdir(dir, "run"), *ck = path_in(cwd, "ckpt");
    struct run_proc p;
    pid_t w[2];
    run_until_checkpoint(&p, job, cwd, "epoch 3/", ck, JOB_NAME "-e0003-s000000768.ckpt", w);
    kill(-p.pid, SIGKILL);
    struct run_result r;
    finish(&p, &r);
    assert_nothing_left(w, 2);
    run_result_free(&r);

    char *newest = ckpt_in(ck, JOB_NAME "-e0003-s000000768.ckpt");
    FILE *f = fopen(newest, "r+b");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fseek(f, 5000, SEEK_SET), 0);
    int ch = fgetc(f);
    ck_assert_int_ge(ch, 0);
    ck_assert_int_eq(fseek(f, 5000, SEEK_SET), 0);
    ck_assert_int_ne(fputc(ch ^ 0x10, f), EOF);
    ck_assert_int_eq(fclose(f), 0);

    run_ok(job, cwd, &r);
    char *all = NULL;
    ck_assert_int_ge(asprintf(&all, "%s%s", r.out, r.err), 0);
    ck_assert_msg(strstr(all, JOB_NAME "-e0003-s000000768-") && strstr(all, "checksum"),
                  "the corrupt checkpoint is not reported:\n%s", all);
    ck_assert_msg(strstr(r.out, "resumed from ckpt/" JOB_NAME "-e0002-s000000512-"),
                  "not resumed from the previous checkpoint:\n%s", all);
    printf("faults: flipped byte: %.*s", (int)(strstr(all, "\n") - all) + 1, all);
    assert_same_model(ref, cwd);
    free(all);
    run_result_free(&r);
    free(newest);
    free(ck);
    free(cwd);
    free(ref);
    free(job);
    rm_tree(dir);
    free(dir);
}
END_TEST

/* A checkpoint of a different spec is refused, unless checkpoint.resume
 * names the file. */
START_TEST(other_spec_refused_unless_named)
{
    char *dir = make_temp_dir("faults-spec");
    struct fopts o1 = { 0 };
    char *job1 = build_job(dir, "job1", &o1);
    struct run_result r;
    run_ok(job1, dir, &r);
    run_result_free(&r);

    struct fopts o2 = { .lr = "0.02" };
    char *job2 = build_job(dir, "job2", &o2);
    struct run_proc p;
    start(&p, job2, dir, NULL);
    finish(&p, &r);
    ck_assert_msg(r.exited && r.code != 0, "a checkpoint of another spec was used:\n%s%s",
                  r.out, r.err);
    ck_assert_msg(strstr(r.err, "different configuration") &&
                  strstr(r.err, "learning_rate changed: 0.01 -> 0.02") &&
                  strstr(r.err, "checkpoint.resume"),
                  "the refusal does not say what changed and what to do:\n%s", r.err);
    ck_assert_ptr_null(strstr(r.out, "epoch "));
    printf("faults: other spec: %s", r.err);
    run_result_free(&r);
    ck_assert_int_eq(leftover_children(1.0), 0);

    /* Following the advice (resume: never) with keep_last 2 in the same
     * checkpoint_dir: the first configuration's 8 checkpoints all stay. */
    char *ck = path_in(dir, "ckpt"), names[16384];
    names_with(ck, ".ckpt", names, sizeof names);
    ck_assert_int_eq(n_names_with(ck, ".ckpt"), 8);
    char *first8 = ckpt_in(ck, JOB_NAME "-e0008-s000002048.ckpt");
    size_t n8;
    unsigned char *bytes8 = slurp(first8, &n8);
    struct fopts o2n = { .lr = "0.02", .resume = "never", .keep_last = 2 };
    char *job2n = build_job(dir, "job2n", &o2n);
    run_ok(job2n, dir, &r);
    run_result_free(&r);
    names_with(ck, ".ckpt", names, sizeof names);
    ck_assert_msg(n_names_with(ck, ".ckpt") == 10, "after the second configuration's run: %s",
                  names);
    size_t n8b;
    unsigned char *bytes8b = slurp(first8, &n8b);     /* not overwritten */
    ck_assert(n8 == n8b && memcmp(bytes8, bytes8b, n8) == 0);
    free(bytes8);
    free(bytes8b);
    free(first8);
    free(job2n);
    free(ck);

    char *ck6 = NULL, *ckd = path_in(dir, "ckpt");
    {
        char *full = ckpt_in(ckd, JOB_NAME "-e0006-s000001536.ckpt");
        ck_assert_int_ge(asprintf(&ck6, "ckpt/%s", strrchr(full, '/') + 1), 0);
        free(full);
    }
    free(ckd);
    struct fopts o3 = { .lr = "0.02", .resume = ck6 };
    char *job3 = build_job(dir, "job3", &o3);
    free(ck6);
    run_ok(job3, dir, &r);
    char *all = NULL;
    ck_assert_int_ge(asprintf(&all, "%s%s", r.out, r.err), 0);
    ck_assert_msg(strstr(all, "different configuration") && strstr(all, "named explicitly") &&
                  strstr(all, "learning_rate changed: 0.01 -> 0.02"),
                  "no note that the named checkpoint is of another spec:\n%s", all);
    ck_assert_msg(strstr(r.out, "resumed from ckpt/" JOB_NAME "-e0006-s000001536-"),
                  "not resumed from the named checkpoint:\n%s", all);
    ck_assert_msg(strstr(r.out, "epoch 7/") && !strstr(r.out, "epoch 6/"), "%s", r.out);
    free(all);
    run_result_free(&r);
    ck_assert_int_eq(leftover_children(1.0), 0);
    free(job1);
    free(job2);
    free(job3);
    rm_tree(dir);
    free(dir);
}
END_TEST

/* Compatible edits resume (issue 12): a 2-epoch run, then the spec with
 * epochs 3, a comment and another logging cadence continues it with a
 * note naming the changes, and ends with the bytes of a straight 3-epoch
 * run (constant schedule). An incompatible edit is refused naming it. */
START_TEST(compatible_edit_resumes_and_matches_a_straight_run)
{
    char *dir = make_temp_dir("faults-compat");
    struct fopts o2 = { .epochs = 2 };
    struct fopts o3 = { .epochs = 3, .extra = "# a comment added later\n" };
    struct fopts o3ref = { .epochs = 3 };
    char *job2 = build_job(dir, "job2", &o2), *job3 = build_job(dir, "job3", &o3);
    char *job3ref = build_job(dir, "job3ref", &o3ref);
    char *ref = reference_run(dir, job3ref);
    char *cwd = subdir(dir, "run");
    struct run_result r;
    run_ok(job2, cwd, &r);
    ck_assert_ptr_nonnull(strstr(r.out, "epoch 2/2"));
    run_result_free(&r);
    run_ok(job3, cwd, &r);
    ck_assert_msg(strstr(r.out, "resumed from ckpt/" JOB_NAME "-e0002-s000000512-") &&
                  strstr(r.out, "note: the spec changed since that checkpoint in ways that keep "
                         "the training trajectory: epochs changed: 2 -> 3") &&
                  strstr(r.out, "epoch 3/3") && !strstr(r.out, "epoch 2/3"),
                  "no compatible resume:\n%s%s", r.out, r.err);
    printf("faults: compatible edit: %s", strstr(r.out, "note:"));
    run_result_free(&r);
    assert_same_model(ref, cwd);
    char *rck = path_in(ref, "ckpt"), *ck = path_in(cwd, "ckpt");
    char *a = ckpt_in(rck, JOB_NAME "-e0003-s000000768.ckpt");
    char *b = ckpt_in(ck, JOB_NAME "-e0003-s000000768.ckpt");
    struct ddpc_ckpt ca, cb;
    struct ddpc_err e = { 0 };
    ck_assert_msg(ckpt_read(a, &ca, &e) == 0 && ckpt_read(b, &cb, &e) == 0, "%s", e.msg);
    ck_assert_str_eq(ca.ident_hash, cb.ident_hash);
    ck_assert(ca.n_params == cb.n_params && ca.n_opt == cb.n_opt &&
              memcmp(ca.params, cb.params, 4 * ca.n_params) == 0 &&
              memcmp(ca.opt, cb.opt, 4 * ca.n_opt) == 0);
    ckpt_free(&ca);
    ckpt_free(&cb);
    free(a);
    free(b);

    /* only the comment changed: a note that no setting did */
    run_ok(job3ref, cwd, &r);
    ck_assert_msg(strstr(r.out, "note: the spec's text changed since that checkpoint") &&
                  strstr(r.out, "nothing to train"), "%s", r.out);
    run_result_free(&r);
    /* epochs lowered below the checkpoint's: said so (it claimed the
     * checkpoint 'completed all 2 epochs' of a model trained for 3) */
    run_ok(job2, cwd, &r);
    ck_assert_msg(strstr(r.out, "nothing to train: the checkpoint is at the end of epoch 3, "
                                "past this job's 2 epochs"), "%s", r.out);
    run_result_free(&r);

    /* an incompatible edit (the batch size) is refused, naming it */
    struct fopts ob = { .epochs = 4, .extra = "grad_accumulation: 2\n" };
    char *jobb = build_job(dir, "jobb", &ob);
    struct run_proc p;
    start(&p, jobb, cwd, NULL);
    finish(&p, &r);
    ck_assert_msg(r.exited && r.code != 0 && strstr(r.err, "grad_accumulation changed: 1 -> 2") &&
                  !strstr(r.err, "epochs changed"), "%s%s", r.out, r.err);
    run_result_free(&r);
    free(jobb);
    free(rck);
    free(ck);
    free(cwd);
    free(ref);
    free(job2);
    free(job3);
    free(job3ref);
    rm_tree(dir);
    free(dir);
}
END_TEST

/* checkpoint.every_n_steps writes mid-epoch with the sampler's position: a
 * run killed -9 after step 300 (epoch 2 of 8, 256 steps each) resumes at
 * batch 44 of epoch 2 and ends with the uninterrupted run's bytes. */
START_TEST(step_checkpoint_resumes_mid_epoch_byte_identical)
{
    char *dir = make_temp_dir("faults-steps");
    struct fopts o = { .keep_last = 3, .every = 100, .ckextra = ", every_n_steps: 100" };
    char *job = build_job(dir, "job", &o);
    char *ref_out = NULL;
    char *ref = reference_run_out(dir, job, &ref_out);
    char *refck = path_in(ref, "ckpt"), names[16384];
    names_with(refck, ".ckpt", names, sizeof names);
    ck_assert_str_eq(names, JOB_NAME "-e0007-s000001900.ckpt " JOB_NAME "-e0007-s000002000.ckpt "
                     JOB_NAME "-e0008-s000002048.ckpt");
    char *cwd = subdir(dir, "killed"), *ck = path_in(cwd, "ckpt");
    struct run_proc p;
    pid_t w[2];
    run_until_checkpoint(&p, job, cwd, "epoch 1/", ck, JOB_NAME "-e0001-s000000300.ckpt", w);
    kill(-p.pid, SIGKILL);
    struct run_result r;
    finish(&p, &r);
    assert_nothing_left(w, 2);
    /* killed inside epoch 2: its progress lines may be there, not its end */
    ck_assert_msg(!has_epoch_line(r.out, "epoch 2/"), "epoch 2 ended before the kill:\n%s",
                  r.out);
    run_result_free(&r);
    char *c300 = ckpt_in(ck, JOB_NAME "-e0001-s000000300.ckpt");
    struct ddpc_ckpt c;
    struct ddpc_err e = { 0 };
    ck_assert_msg(ckpt_read(c300, &c, &e) == 0, "%s", e.msg);
    ck_assert_int_eq(c.epoch, 1);
    ck_assert_int_eq(c.sampler_epoch, 1);
    ck_assert_int_eq(c.sampler_batches, 300 - 256);
    ckpt_free(&c);
    free(c300);
    /* the newest may be step 400 if the kill came late: either resumes mid-epoch */
    run_ok(job, cwd, &r);
    ck_assert_msg(strstr(r.out, "resumed from ckpt/" JOB_NAME "-e0001-s0000") &&
                  strstr(r.out, "mid-epoch)") && strstr(r.out, "epoch 2/") &&
                  !strstr(r.out, "epoch 1/"), "no mid-epoch resume:\n%s%s", r.out, r.err);
    /* the resumed epoch's train_loss is the whole epoch's, as uninterrupted,
     * not the mean of the batches after the resume */
    char want_loss[64], got_loss[64];
    epoch_train_loss(ref_out, 2, want_loss, sizeof want_loss);
    epoch_train_loss(r.out, 2, got_loss, sizeof got_loss);
    ck_assert_msg(want_loss[0] && strcmp(want_loss, got_loss) == 0,
                  "epoch 2 after the mid-epoch resume: %s, uninterrupted: %s", got_loss,
                  want_loss);
    free(ref_out);
    run_result_free(&r);
    assert_same_model(ref, cwd);
    char *a = ckpt_in(refck, JOB_NAME "-e0008-s000002048.ckpt");
    char *b = ckpt_in(ck, JOB_NAME "-e0008-s000002048.ckpt");
    assert_same_file(a, b);
    assert_no_partial_files(cwd);
    char want[8192], got[8192];
    csv_steps(ref, want, sizeof want);
    csv_steps(cwd, got, sizeof got);
    ck_assert_msg(strcmp(want, got) == 0, "metrics CSV steps after the mid-epoch resume:\n%s\n"
                  "uninterrupted:\n%s", got, want);
    free(a);
    free(b);
    free(ck);
    free(cwd);
    free(refck);
    free(ref);
    free(job);
    rm_tree(dir);
    free(dir);
}
END_TEST

/* A sequential CNN with batch norm and dropout (its 32 synthetic features
 * seen as [2, 4, 4]): two straight runs of the same seed and world give the
 * same bytes (bitwise determinism on CPU), and a run killed mid-training
 * (checkpoints every epoch and every 100 steps, so the resume may be
 * mid-epoch) ends byte-identical to them: the export holds the batch-norm
 * running statistics and num_batches_tracked, which equal the straight
 * run's only if the checkpoint carried them (and the dropout masks and the
 * sampler continued where they were). */
START_TEST(cnn_with_batchnorm_dropout_resumes_byte_identical)
{
    char *dir = make_temp_dir("faults-cnn");
    struct fopts o = {
        .keep_last = 3, .epochs = 4, .ckextra = ", every_n_steps: 100",
        .model = "model:\n  type: sequential\n  input: [2, 4, 4]\n  layers:\n"
                 "    - conv2d: {out_channels: 4, kernel_size: 3, padding: 1}\n"
                 "    - batchnorm2d\n    - relu\n    - maxpool2d: {kernel_size: 2}\n"
                 "    - flatten\n    - dropout: {p: 0.25}\n    - linear: {out_features: 4}\n",
    };
    char *job = build_job(dir, "job", &o);
    char *ref = reference_run(dir, job);
    char *refck = path_in(ref, "ckpt"), names[16384];
    names_with(refck, ".ckpt", names, sizeof names);
    ck_assert_str_eq(names, JOB_NAME "-e0003-s000000900.ckpt " JOB_NAME "-e0003-s000001000.ckpt "
                     JOB_NAME "-e0004-s000001024.ckpt");
    char *last_ref = ckpt_in(refck, JOB_NAME "-e0004-s000001024.ckpt");

    /* the export carries the batch norm's state, by PyTorch's names */
    size_t n;
    char *exp = path_in(ref, "model.safetensors");
    unsigned char *st = slurp(exp, &n);
    ck_assert_uint_gt(n, 8);
    ck_assert_ptr_nonnull(memmem(st, n, "\"layers.1.running_mean\"", 23));
    ck_assert_ptr_nonnull(memmem(st, n, "\"layers.1.running_var\"", 22));
    ck_assert_ptr_nonnull(memmem(st, n, "\"layers.1.num_batches_tracked\"", 30));
    free(st);
    free(exp);

    /* 1. the same seed and world again: the same bytes */
    char *again = subdir(dir, "again");
    struct run_result r;
    run_ok(job, again, &r);
    run_result_free(&r);
    assert_same_model(ref, again);
    char *againck = path_in(again, "ckpt");
    char *last_again = ckpt_in(againck, JOB_NAME "-e0004-s000001024.ckpt");
    assert_same_file(last_ref, last_again);

    /* 2. kill -9 in epoch 2 (after a durable step checkpoint), then resume */
    char *cwd = subdir(dir, "killed"), *ck = path_in(cwd, "ckpt");
    struct run_proc p;
    pid_t w[2];
    run_until_checkpoint(&p, job, cwd, "epoch 1/", ck, JOB_NAME "-e0001-s000000300.ckpt", w);
    kill(-p.pid, SIGKILL);
    finish(&p, &r);
    assert_nothing_left(w, 2);
    ck_assert_msg(!has_epoch_line(r.out, "epoch 4/"), "epoch 4 ended before the kill:\n%s",
                  r.out);
    run_result_free(&r);
    run_ok(job, cwd, &r);
    ck_assert_msg(strstr(r.out, "resumed from ckpt/" JOB_NAME "-e000") &&
                  !strstr(r.out, "\nepoch 1/"), "no resume:\n%s%s", r.out, r.err);
    const char *res = strstr(r.out, "resumed from");
    printf("faults: cnn second start: %.*s\n", (int)(strchr(res, '\n') - res), res);
    run_result_free(&r);
    assert_same_model(ref, cwd);
    char *last = ckpt_in(ck, JOB_NAME "-e0004-s000001024.ckpt");
    assert_same_file(last_ref, last);
    assert_no_partial_files(cwd);

    free(last);
    free(last_again);
    free(last_ref);
    free(ck);
    free(cwd);
    free(againck);
    free(again);
    free(refck);
    free(ref);
    free(job);
    rm_tree(dir);
    free(dir);
}
END_TEST

/* checkpoint.every_n_minutes: rank 0's clock decides, every rank follows
 * (a mid-epoch save needs them all); the saves land mid-epoch, and they do
 * not change the training: the export equals a run without them. */
START_TEST(time_checkpoints_are_written_and_change_nothing)
{
    char *dir = make_temp_dir("faults-minutes");
    struct fopts o = { .every = 100, .ckextra = ", every_n_minutes: 0.0005" };   /* 30 ms */
    struct fopts o0 = { .every = 100 };
    char *job = build_job(dir, "job", &o), *job0 = build_job(dir, "job0", &o0);
    char *ref = reference_run(dir, job0);
    char *cwd = subdir(dir, "run"), *ck = path_in(cwd, "ckpt"), names[16384];
    struct run_result r;
    run_ok(job, cwd, &r);
    run_result_free(&r);
    names_with(ck, ".ckpt", names, sizeof names);
    int n = n_names_with(ck, ".ckpt");
    printf("faults: every_n_minutes 0.0005: %d checkpoints: %s\n", n, names);
    ck_assert_msg(n >= 3, "only %d checkpoints: %s", n, names);
    /* one of them mid-epoch: a step number that is not a multiple of 256 */
    int mid = 0;
    for (const char *q = names; (q = strstr(q, "-s")) != NULL; q += 2)
        mid |= strtol(q + 2, NULL, 10) % 256 != 0;
    ck_assert_msg(mid, "no mid-epoch checkpoint: %s", names);
    assert_same_model(ref, cwd);
    free(ck);
    free(cwd);
    free(ref);
    free(job);
    free(job0);
    rm_tree(dir);
    free(dir);
}
END_TEST

/* A checkpoint write slower than rank_sync_timeout (test hook: 2.5 s per
 * write, timeout 1 s) is not data-loading skew: the run completes. */
START_TEST(slow_checkpoint_write_does_not_trip_rank_sync_timeout)
{
    char *dir = make_temp_dir("faults-slowck");
    struct fopts o = { .epochs = 3, .every = 1, .extra = "rank_sync_timeout: 1s\n" };
    char *job = build_job(dir, "job", &o);
    struct run_proc p;
    char *env[] = { "DDPC_TEST_CKPT_SLOW_S=2.5", NULL };
    start(&p, job, dir, env);
    struct run_result r;
    finish(&p, &r);
    ck_assert_msg(r.exited && r.code == 0, "a slow checkpoint write failed the run (%d):\n%s%s",
                  r.code, r.out, r.err);
    ck_assert_msg(r.seconds > 3 * 2.5, "the hook did not slow the writes: %.2f s", r.seconds);
    char *ck = path_in(dir, "ckpt");
    ck_assert_int_eq(n_names_with(ck, ".ckpt"), 3);
    run_result_free(&r);
    ck_assert_int_eq(leftover_children(1.0), 0);
    free(ck);
    free(job);
    rm_tree(dir);
    free(dir);
}
END_TEST

/* A checkpoint or export write slower than nccl_timeout, without
 * rank_sync_timeout: the other rank's error names the write ("rank 0 was
 * writing a checkpoint to ckpt"), not a rank 0 stuck in the next step's
 * all-reduce or at the exit. */
START_TEST(checkpoint_write_past_nccl_timeout_is_named)
{
    char *dir = make_temp_dir("faults-slowck-nccl");
    for (int last = 0; last < 2; last++) {
        /* last 0: the first epoch's checkpoint, with epochs to go; 1: the
         * last epoch's, before the export and the exit */
        struct fopts o = { .epochs = last ? 1 : 3, .every = 1, .extra = "nccl_timeout: 1s\n" };
        char *job = build_job(dir, last ? "job1" : "job3", &o);
        char *cwd = subdir(dir, last ? "last" : "first");
        struct run_proc p;
        char *env[] = { "DDPC_TEST_CKPT_SLOW_S=3", NULL };
        start(&p, job, cwd, env);
        struct run_result r;
        finish(&p, &r);
        ck_assert_msg(r.exited && r.code != 0, "exit %d:\n%s%s", r.code, r.out, r.err);
        ck_assert_msg(strstr(r.err, "[rank 1] error: ") &&
                      strstr(r.err, "rank 0 was writing a checkpoint to ckpt"),
                      "the timeout does not name the write:\n%s", r.err);
        /* the epoch's checkpoint runs after its last step: named so */
        ck_assert_msg(strstr(r.err, "[rank 1] error: epoch 1's end, after step "),
                      "the timeout does not say where the run was:\n%s", r.err);
        printf("faults: checkpoint write past nccl_timeout (%s epoch): %s",
               last ? "last" : "first", r.err);
        run_result_free(&r);
        ck_assert_int_eq(leftover_children(1.0), 0);
        free(cwd);
        free(job);
    }
    rm_tree(dir);
    free(dir);
}
END_TEST

/* `./job > /dev/full`: the summary cannot be written, so the job must not
 * exit 0; stderr says what failed. */
START_TEST(summary_on_a_full_stdout_exits_nonzero)
{
    if (access("/dev/full", W_OK) != 0) {
        test_skip("faults", "/dev/full: not on this machine");
        return;
    }
    char *dir = make_temp_dir("faults-full");
    struct fopts o = { .epochs = 1, .ckdir = "" };
    char *job = build_job(dir, "job", &o);
    char *errf = path_in(dir, "stderr.txt");
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int out = open("/dev/full", O_WRONLY);
        int err = open(errf, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (out < 0 || err < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0 || chdir(dir) != 0)
            _exit(127);
        execl(job, job, (char *)NULL);
        _exit(127);
    }
    int st = 0;
    double t0 = tnow();
    while (waitpid(pid, &st, WNOHANG) == 0) {
        if (tnow() - t0 > RUN_LIMIT) {
            kill(pid, SIGKILL);
            (void)waitpid(pid, &st, 0);
            ck_abort_msg("the job hung with stdout on /dev/full");
        }
        usleep(10000);
    }
    size_t n;
    char *err = (char *)slurp(errf, &n);
    err = realloc(err, n + 1);
    err[n] = '\0';
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) != 0 && WEXITSTATUS(st) != 127,
                  "exit status %d with stdout on /dev/full:\n%s", st, err);
    /* the first write that fails names itself: the report line, or the
     * plain progress lines a run without a terminal prints */
    ck_assert_msg((strstr(err, "standard output") || strstr(err, "progress line")) &&
                  strstr(err, "No space left"), "%s", err);
    printf("faults: stdout on /dev/full: exit %d: %s", WEXITSTATUS(st), err);
    free(err);
    ck_assert_int_eq(leftover_children(1.0), 0);
    free(errf);
    free(job);
    rm_tree(dir);
    free(dir);
}
END_TEST

/* ===== disk full, unwritable ===== */

START_TEST(checkpoint_dir_full_or_unwritable)
{
    char *dir = make_temp_dir("faults-disk");
    struct fopts o = { .ckdir = "mnt/ckpt" };
    char *job = build_job(dir, "job", &o);
    struct run_result r;
    struct run_proc p;

    /* Unwritable: checkpoint_dir under a regular file. */
    struct fopts ou = { .ckdir = "afile/ckpt" };
    char *jobu = build_job(dir, "jobu", &ou);
    char *afile = path_in(dir, "afile");
    ck_assert_int_eq(write_file(afile, "x", 1), 0);
    start(&p, jobu, dir, NULL);
    finish(&p, &r);
    ck_assert_msg(r.exited && r.code != 0, "exit %d with an unwritable checkpoint_dir", r.code);
    ck_assert_msg(strstr(r.err, "checkpoint_dir afile/ckpt") && strstr(r.err, "Not a directory"),
                  "unclear error:\n%s", r.err);
    ck_assert_msg(!strstr(r.out, "epoch 1/"), "trained before failing:\n%s", r.out);
    printf("faults: unwritable checkpoint_dir: %s", r.err);
    run_result_free(&r);
    ck_assert_int_eq(leftover_children(1.0), 0);
    free(jobu);

    /* An export path that cannot be written is refused before training,
     * not after the last epoch; a missing directory is created. */
    struct fopts oe = { .ckdir = "ck2", .export_path = "afile/model.safetensors" };
    jobu = build_job(dir, "jobe", &oe);
    start(&p, jobu, dir, NULL);
    finish(&p, &r);
    ck_assert_msg(r.exited && r.code != 0, "exit %d with an unwritable export", r.code);
    ck_assert_msg(strstr(r.err, "checkpoint.export afile/model.safetensors") &&
                  strstr(r.err, "not a directory"), "unclear error:\n%s", r.err);
    ck_assert_msg(!strstr(r.out, "epoch 1/"), "trained before failing:\n%s", r.out);
    printf("faults: unwritable export: %s", r.err);
    run_result_free(&r);
    free(jobu);
    struct fopts oe2 = { .ckdir = "ck3", .export_path = "out/sub/model.safetensors" };
    jobu = build_job(dir, "jobe2", &oe2);
    run_ok(jobu, dir, &r);
    run_result_free(&r);
    char *exported = path_in(dir, "out/sub/model.safetensors");
    ck_assert_int_eq(access(exported, R_OK), 0);
    free(exported);
    ck_assert_int_eq(leftover_children(1.0), 0);
    free(afile);
    free(jobu);

    char *mnt = path_in(dir, "mnt");
    ck_assert_int_eq(mkdir(mnt, 0755), 0);
    if (geteuid() != 0 || mount("tmpfs", mnt, "tmpfs", 0, "size=256k") != 0) {
        test_skip("faults", "checkpoint_dir on a full file system: cannot mount a tmpfs (%s)",
               geteuid() != 0 ? "not root" : strerror(errno));
        goto out;
    }
    /* 256 KiB: not room for two checkpoints of 882 KiB: refused before training */
    start(&p, job, dir, NULL);
    finish(&p, &r);
    ck_assert_msg(r.exited && r.code != 0, "exit %d on a too small checkpoint_dir", r.code);
    ck_assert_msg(strstr(r.err, "mnt/ckpt") && strstr(r.err, " free, checkpoints need "),
                  "preflight did not refuse clearly:\n%s", r.err);
    ck_assert_msg(!strstr(r.out, "epoch 1/"), "trained before failing:\n%s", r.out);
    printf("faults: small checkpoint_dir: %s", r.err);
    run_result_free(&r);
    ck_assert_int_eq(leftover_children(1.0), 0);
    ck_assert_int_eq(umount(mnt), 0);

    /* keep_last 2 holds 3 checkpoints at once (the new one is complete
     * before the oldest goes): 2 MiB is room for 2 of 882 KiB, not 3 */
    ck_assert_int_eq(mount("tmpfs", mnt, "tmpfs", 0, "size=2m"), 0);
    struct fopts ok2 = { .ckdir = "mnt/ckpt", .keep_last = 2 };
    char *job_k2 = build_job(dir, "jobk2", &ok2);
    start(&p, job_k2, dir, NULL);
    finish(&p, &r);
    ck_assert_msg(r.exited && r.code != 0, "exit %d: keep_last 2 on room for 2", r.code);
    ck_assert_msg(strstr(r.err, " free, checkpoints need ") && strstr(r.err, "(3 x "),
                  "preflight did not count keep_last + 1 checkpoints:\n%s", r.err);
    ck_assert_msg(!strstr(r.out, "epoch 1/"), "trained before failing:\n%s", r.out);
    printf("faults: keep_last 2 on a small checkpoint_dir: %s", r.err);
    run_result_free(&r);
    free(job_k2);
    ck_assert_int_eq(leftover_children(1.0), 0);

    /* Room at the start; the disk fills during the run (another writer):
     * the next checkpoint fails at write time, the first stays intact. */
    char *ck = path_in(dir, "mnt/ckpt"), *filler = path_in(dir, "mnt/filler");
    pid_t w[2];
    run_until_checkpoint(&p, job, dir, "epoch 1/", ck, JOB_NAME "-e0001-s000000256.ckpt", w);
    FILE *f = fopen(filler, "wb");
    ck_assert_ptr_nonnull(f);
    static char zero[4096];
    while (fwrite(zero, 1, sizeof zero, f) == sizeof zero && fflush(f) == 0)
        ;
    fclose(f);
    struct stat st;
    ck_assert_int_eq(stat(filler, &st), 0);
    ck_assert_int_eq(truncate(filler, st.st_size - 64 * 1024), 0);   /* 64 KiB left */
    kill(-p.pid, SIGCONT);
    finish(&p, &r);
    ck_assert_msg(r.exited && r.code != 0, "exit %d when the disk filled", r.code);
    ck_assert_msg(strstr(r.err, "no space left on device") &&
                  strstr(r.err, "earlier checkpoints are intact"), "unclear error:\n%s", r.err);
    printf("faults: disk full at write time: %s", r.err);
    char names[4096];
    names_with(ck, "", names, sizeof names);
    ck_assert_str_eq(names, ". .. " JOB_NAME "-e0001-s000000256.ckpt");
    char *first = ckpt_in(ck, JOB_NAME "-e0001-s000000256.ckpt");
    struct ddpc_ckpt c;
    struct ddpc_err e = { 0 };
    ck_assert_msg(ckpt_read(first, &c, &e) == 0, "%s", e.msg);
    ck_assert_int_eq(c.epoch, 1);
    ckpt_free(&c);
    free(first);
    run_result_free(&r);
    assert_nothing_left(w, 2);
    ck_assert_int_eq(umount(mnt), 0);
    free(ck);
    free(filler);
out:
    free(mnt);
    free(job);
    rm_tree(dir);
    free(dir);
}
END_TEST

/* ===== max_restarts ===== */

START_TEST(max_restarts_relaunches_then_gives_up_with_history)
{
    char *dir = make_temp_dir("faults-restart");
    struct fopts o = { .extra = "launch: {max_restarts: 1}\n" };
    char *job = build_job(dir, "job", &o);
    char *ref = reference_run(dir, job);

    /* one failure: relaunched from the newest checkpoint, and it finishes
     * with the reference bytes */
    char *cwd = subdir(dir, "once");
    struct run_proc p;
    pid_t w[2];
    start(&p, job, cwd, NULL);
    wait_line(&p, "epoch 2/");
    kill(-p.pid, SIGSTOP);
    workers_of(&p, w);
    ck_assert_int_eq(kill(w[1], SIGKILL), 0);
    kill(-p.pid, SIGCONT);
    struct run_result r;
    finish(&p, &r);
    ck_assert_msg(r.exited && r.code == 0, "exit %d after one failure, max_restarts 1:\n%s%s",
                  r.code, r.out, r.err);
    ck_assert_msg(strstr(r.err, "rank 1 (cpu worker 1) killed by signal 9") &&
                  strstr(r.err, "restarting (1 of 1)"), "%s", r.err);
    ck_assert_msg(strstr(r.out, "resumed from ckpt/" JOB_NAME "-e000"), "%s", r.out);
    assert_same_model(ref, cwd);
    printf("faults: max_restarts 1, one failure:\n%s", r.err);
    run_result_free(&r);
    ck_assert_int_eq(wait_gone(w, 2, 2.0), 0);
    ck_assert_int_eq(leftover_children(1.0), 0);
    free(cwd);

    /* two failures: gives up and prints every attempt with its cause */
    cwd = subdir(dir, "twice");
    start(&p, job, cwd, NULL);
    wait_line(&p, "epoch 2/");
    kill(-p.pid, SIGSTOP);
    workers_of(&p, w);
    ck_assert_int_eq(kill(w[1], SIGKILL), 0);
    kill(-p.pid, SIGCONT);
    ck_assert_int_eq(wait_gone(w, 2, 5.0), 0);
    wait_line(&p, "resumed from");
    pid_t w2[2];
    kill(-p.pid, SIGSTOP);
    workers_of(&p, w2);
    ck_assert_int_eq(kill(w2[0], SIGKILL), 0);
    kill(-p.pid, SIGCONT);
    finish(&p, &r);
    ck_assert_msg(r.exited && r.code != 0, "exit %d after two failures, max_restarts 1", r.code);
    ck_assert_msg(strstr(r.err, "giving up"), "no 'giving up':\n%s", r.err);
    const char *hist = strstr(r.err, "giving up");
    ck_assert_msg(strstr(hist, "attempt 1: rank 1 (cpu worker 1) killed by signal 9") &&
                  strstr(hist, "attempt 2: rank 0 (cpu worker 0) killed by signal 9"),
                  "the history does not list every attempt and its cause:\n%s", r.err);
    printf("faults: max_restarts 1, two failures:\n%s", r.err);
    run_result_free(&r);
    assert_nothing_left(w2, 2);
    free(cwd);
    free(ref);
    free(job);
    rm_tree(dir);
    free(dir);
}
END_TEST

/* A run started from a named checkpoint (checkpoint.resume: PATH, here of
 * another configuration, outside checkpoint_dir) that fails before writing
 * a checkpoint of its own restarts from the named one, not from scratch:
 * resume: auto found nothing in checkpoint_dir and trained from random
 * weights, under "restarting ... from the last checkpoint". */
START_TEST(max_restarts_after_a_named_resume_restarts_from_it)
{
    char *dir = make_temp_dir("faults-restart-named");
    struct fopts o1 = { .lr = "0.02", .ckdir = "pre", .epochs = 2 };
    char *job1 = build_job(dir, "job1", &o1);
    struct run_result r;
    run_ok(job1, dir, &r);
    run_result_free(&r);
    char *pre = path_in(dir, "pre"), *named = ckpt_in(pre, JOB_NAME "-e0002-s000000512.ckpt");
    /* checkpoints only at the end: the failure comes before any */
    struct fopts o = { .resume = named, .every = EPOCHS, .extra = "launch: {max_restarts: 1}\n" };
    char *job = build_job(dir, "job", &o);
    char *ref = subdir(dir, "ref");   /* uninterrupted, from the named checkpoint too */
    run_ok(job, ref, &r);
    ck_assert_msg(strstr(r.out, "resumed from "), "%s", r.out);
    run_result_free(&r);

    char *cwd = subdir(dir, "once");
    struct run_proc p;
    pid_t w[2];
    start(&p, job, cwd, NULL);
    wait_line(&p, "epoch 3/");
    kill(-p.pid, SIGSTOP);
    workers_of(&p, w);
    ck_assert_int_eq(kill(w[1], SIGKILL), 0);
    kill(-p.pid, SIGCONT);
    finish(&p, &r);
    ck_assert_msg(r.exited && r.code == 0, "exit %d after one failure, max_restarts 1:\n%s%s",
                  r.code, r.out, r.err);
    ck_assert_msg(strstr(r.err, "restarting (1 of 1) from ") &&
                  strstr(r.err, "the checkpoint it started from"), "%s", r.err);
    const char *again = strstr(r.out, "resumed from ");
    ck_assert_msg(again && strstr(again + 1, "resumed from "),
                  "the restart did not resume from the named checkpoint:\n%s", r.out);
    assert_same_model(ref, cwd);
    printf("faults: max_restarts 1 after a named resume:\n%s", r.err);
    run_result_free(&r);
    assert_nothing_left(w, 2);
    free(cwd);
    free(ref);
    free(job);
    free(named);
    free(pre);
    free(job1);
    rm_tree(dir);
    free(dir);
}
END_TEST

/* ===== the export, used the way a PyTorch user would ===== */

/* IDX images [n, 4, 4] and labels [n] of a 3-class problem with some noise,
 * so accuracy is high but not 1. */
static void write_idx(const char *images, const char *labels, int n, unsigned seed)
{
    unsigned char *im = calloc((size_t)n, 16), *lb = calloc((size_t)n, 1);
    ck_assert(im && lb);
    unsigned x = seed;
    for (int i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        int c = (int)((x >> 16) % 3u);
        lb[i] = (unsigned char)c;
        for (int j = 0; j < 16; j++) {
            x = x * 1103515245u + 12345u;
            im[(size_t)i * 16 + (size_t)j] =
                (unsigned char)(((j % 3) == c ? 120 : 60) + (x >> 16) % 120u);
        }
    }
    ck_assert_int_eq(write_idx_pair(images, labels, n, 4, 4, im, lb), 0);
    free(im);
    free(lb);
}

START_TEST(export_gives_the_reported_test_accuracy_in_torch)
{
    char *dir = make_temp_dir("faults-export");
    char *spec = path_in(dir, "idx.yaml"), *job = path_in(dir, "idxjob");
    char *tri = path_in(dir, "train-images.idx"), *trl = path_in(dir, "train-labels.idx");
    char *tei = path_in(dir, "test-images.idx"), *tel = path_in(dir, "test-labels.idx");
    write_idx(tri, trl, 960, 1);
    write_idx(tei, tel, 300, 2);
    const char *text =
        "version: 1\n"
        "name: idxjob\n"
        "devices: 2\n"
        "accelerator: cpu\n"
        "epochs: 3\n"
        "batch_size: 16\n"
        "learning_rate: 0.01\n"
        "lr_scaling: none\n"
        "model: {type: mlp, layers: [16, 32, 3], activation: relu}\n"
        "optimizer: {type: adam}\n"
        "checkpoint: {export: out/model.safetensors}\n"
        "data:\n"
        "  train: {format: idx, inputs: train-images.idx, labels: train-labels.idx}\n"
        "  test:  {format: idx, inputs: test-images.idx, labels: test-labels.idx}\n";
    ck_assert_int_eq(write_file(spec, text, strlen(text)), 0);
    char *ddpc = NULL;
    ck_assert_int_ge(asprintf(&ddpc, "%s/bin/ddpc", test_build()), 0);
    char *bargv[] = { ddpc, "build", spec, "-o", job, NULL };
    struct run_result r;
    ck_assert_int_eq(run_capture(bargv, dir, NULL, 120, &r), 0);
    ck_assert_msg(r.exited && r.code == 0, "build:\n%s%s", r.out, r.err);
    run_result_free(&r);
    run_ok(job, dir, &r);
    const char *done = strstr(r.out, "\ndone ");
    ck_assert_ptr_nonnull(done);
    double acc = find_kv(done, "test_accuracy"), loss = find_kv(done, "test_loss");
    run_result_free(&r);
    ck_assert_int_eq(leftover_children(1.0), 0);

    /* the shipped loader (python3 -m ddpc_torch): an mlp's sizes from the
     * file alone, then the spec's data.test scored */
    char *model = path_in(dir, "out/model.safetensors");
    ck_assert_int_eq(run_loader(model, NULL, 120, &r), 0);
    if (loader_lacks_torch(&r)) {
        test_skip("faults", "export accuracy in torch: %s", r.err);
        run_result_free(&r);
        goto done;
    }
    ck_assert_msg(r.exited && r.code == 0 &&
                  strstr(r.out, " (job idxjob): mlp (sizes [16, 32, 3], relu), 4 tensors, 643 "
                                "parameters, strict=True\n"), "ddpc_torch:\n%s%s", r.out, r.err);
    run_result_free(&r);
    ck_assert_int_eq(run_loader(model, spec, 120, &r), 0);
    {
        ck_assert_msg(r.exited && r.code == 0, "ddpc_torch:\n%s%s", r.out, r.err);
        double tacc = find_kv(r.out, "test_accuracy"), tloss = find_kv(r.out, "test_loss");
        /* the job prints 4 decimals; BLAS and torch may round one borderline
         * sample differently */
        ck_assert_msg(fabs(tacc - acc) <= 1.0 / 300 + 1e-4 &&
                      fabs(tloss - loss) <= 1e-3 + 1e-3 * loss,
                      "torch: accuracy %.4f loss %.4f, the job: accuracy %.4f loss %.4f",
                      tacc, tloss, acc, loss);
        ck_assert_msg(acc > 0.5 && acc < 1.0, "accuracy %.4f: the data should be neither "
                      "trivial nor unlearnable", acc);
        printf("faults: export in torch: accuracy %.4f loss %.4f; the job said %.4f %.4f\n",
               tacc, tloss, acc, loss);
    }
    run_result_free(&r);
done:
    free(model);
    free(ddpc);
    free(tri); free(trl); free(tei); free(tel);
    free(spec);
    free(job);
    rm_tree(dir);
    free(dir);
}
END_TEST

/* ===== metrics and output ===== */

START_TEST(metrics_files_and_plain_output)
{
    char *dir = make_temp_dir("faults-metrics");
    struct fopts o = { 0 };
    char *job = build_job(dir, "job", &o);
    char *ref = reference_run(dir, job);
    struct run_result r;
    char *csv = path_in(ref, "m.csv"), *tb = path_in(ref, "tb");
    size_t n;
    char *t = (char *)slurp(csv, &n);
    t = realloc(t, n + 1);
    t[n] = '\0';
    /* 256 steps per epoch, a row every 64 steps, one eval row per epoch */
    int lines = 0, train_rows = 0;
    for (const char *q = t; (q = strchr(q, '\n')) != NULL; q++)
        lines++;
    for (const char *q = t; (q = strstr(q, ",,\n")) != NULL; q++)
        train_rows++;
    /* the identity line and the header are no rows */
    ck_assert_msg(train_rows == EPOCHS * 256 / 64 && lines - 2 - train_rows == EPOCHS,
                  "%d train rows, %d eval rows:\n%s", train_rows, lines - 2 - train_rows, t);
    const char *head = "step,epoch,lr,loss,samples_per_s,eval_loss,eval_accuracy\n64,1,";
    ck_assert_msg(strncmp(t, "# ddpc job=" JOB_NAME " identity=", 21 + strlen(JOB_NAME)) == 0 &&
                  strncmp(strchr(t, '\n') + 1, head, strlen(head)) == 0, "CSV starts:\n%.300s",
                  t);
    ck_assert_msg(strstr(t, "\n2048,8,"), "no row for the last step:\n%s", t);
    assert_no_partial_files(ref);
    ck_assert_int_eq(n_names_with(tb, "events.out.tfevents."), 1);
    /* ".", "..", the one event file, and the (empty) lock file */
    ck_assert_int_eq(n_names_with(tb, ""), 4);
    ck_assert_int_eq(n_names_with(tb, ".ddpc.lock"), 1);

    /* TensorBoard's own reader finds in the event file exactly what the
     * CSV says: every scalar at every step */
    static const char *tags[5] = { "train/lr", "train/loss", "train/samples_per_s",
                                   "eval/loss", "eval/accuracy" };
    char *arg[5];
    size_t cap = n * 2 + 64;
    for (int k = 0; k < 5; k++) {
        arg[k] = malloc(cap);
        ck_assert_ptr_nonnull(arg[k]);
        snprintf(arg[k], cap, "%s=", tags[k]);
    }
    /* the rows: after the identity line and the header */
    for (char *line = strchr(strchr(t, '\n') + 1, '\n') + 1; *line;
         line = strchr(line, '\n') + 1) {
        char cell[7][40];
        int c = 0;
        size_t len = 0;
        for (char *q = line; *q != '\n'; q++) {
            if (*q == ',') {
                cell[c++][len] = '\0';
                len = 0;
            } else if (len + 1 < sizeof cell[0]) {
                cell[c][len++] = *q;
            }
        }
        cell[c][len] = '\0';
        ck_assert_int_eq(c, 6);
        for (int k = 0; k < 5; k++) {
            if (!cell[k + 2][0])
                continue;
            size_t l = strlen(arg[k]);
            snprintf(arg[k] + l, cap - l, "%s%s:%s", arg[k][l - 1] == '=' ? "" : ",", cell[0],
                     cell[k + 2]);
        }
    }
    char *script = path_in(test_top(), "tests/tb_read.py");
    /* the pythons test_metrics tries: $DDPC_PYTHON, python3 on PATH, the system one */
    const char *env_py = getenv("DDPC_PYTHON");
    const char *pythons[] = { env_py && *env_py ? env_py : "python3", "python3",
                              "/usr/bin/python3" };
    int ran = 0;
    for (size_t i = 0; i < sizeof pythons / sizeof pythons[0] && !ran; i++) {
        char *targv[] = { (char *)pythons[i], script, tb, arg[0], arg[1], arg[2], arg[3],
                          arg[4], NULL };
        ck_assert_int_eq(run_capture(targv, NULL, NULL, 120, &r), 0);
        /* 127: no such python */
        if (!(r.exited && r.code == 127)) {
            ck_assert_msg(r.exited && r.code == 0, "%s tb_read.py:\n%s%s", pythons[i], r.out,
                          r.err);
            printf("faults: real job's event file: %s", r.out);
            ran = 1;
        }
        run_result_free(&r);
    }
    if (!ran)
        test_skip("faults", "TensorBoard event file of a real job: no python3");
    for (int k = 0; k < 5; k++)
        free(arg[k]);
    free(script);
    free(t);

    /* stdout is a pipe here: plain lines, no progress display */
    char *cwd = subdir(dir, "plain");
    run_ok(job, cwd, &r);
    ck_assert_msg(!strchr(r.out, '\r') && !strchr(r.err, '\r'), "a progress line on a pipe:\n%s",
                  r.out);
    ck_assert_msg(strstr(r.out, "epoch 8/8"), "%s", r.out);
    run_result_free(&r);
    ck_assert_int_eq(leftover_children(1.0), 0);
    free(cwd);
    free(csv);
    free(tb);
    free(ref);
    free(job);
    rm_tree(dir);
    free(dir);
}
END_TEST

/* On a terminal: the one-line progress display, rewritten in place. */
START_TEST(progress_line_on_a_terminal)
{
    char *dir = make_temp_dir("faults-tty");
    struct fopts o = { 0 };
    char *job = build_job(dir, "job", &o);
    int master = -1;
    pid_t pid = forkpty(&master, NULL, NULL, NULL);
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (chdir(dir) != 0)
            _exit(126);
        execl(job, job, (char *)NULL);
        _exit(127);
    }
    char *out = calloc(1, 1 << 20);
    size_t n = 0;
    double t0 = tnow();
    for (;;) {
        ck_assert_msg(tnow() - t0 < RUN_LIMIT, "the job hung on a terminal:\n%s", out);
        struct pollfd pfd = { master, POLLIN, 0 };
        if (poll(&pfd, 1, 100) <= 0)
            continue;
        ssize_t got = read(master, out + n, (1 << 20) - 1 - n);
        if (got <= 0)
            break;   /* EIO: the job closed the terminal */
        n += (size_t)got;
    }
    close(master);
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "exit 0x%x:\n%s", st, out);
    ck_assert_msg(strstr(out, "\r\033[Kepoch 1/8  step ") && strstr(out, "samples/s  ETA "),
                  "no progress line on a terminal:\n%s", out);
    ck_assert_msg(strstr(out, "epoch 8/8  train_loss=") && strstr(out, "\ndone "),
                  "no epoch lines on a terminal:\n%s", out);
    /* the display is erased before each epoch's plain line (the terminal
     * turns every "\n" into "\r\n" itself, so '\r' alone proves nothing) */
    ck_assert_msg(strstr(out, "\r\033[Kepoch 8/8  train_loss="),
                  "the progress line is not cleared before the epoch line:\n%s", out);
    ck_assert_int_eq(leftover_children(1.0), 0);
    free(out);
    free(job);
    rm_tree(dir);
    free(dir);
}
END_TEST

Suite *faults_suite(void)
{
    Suite *s = suite_create("faults");
    TCase *t = tcase_create("faults");
    tcase_add_checked_fixture(t, setup, NULL);
    tcase_set_timeout(t, 300);
    tcase_add_test(t, worker_kill9_stops_all_and_names_it);
    tcase_add_test(t, oom_killed_worker_is_named_out_of_memory);
    tcase_add_test(t, worker_sigstop_times_out_with_the_key_step_and_ranks);
    tcase_add_test(t, stopped_rank0_with_only_rank_sync_timeout_ends_the_job);
    tcase_add_test(t, launcher_kill9_takes_the_workers_down);
    tcase_add_test(t, interrupt_and_term_exit_130_143_leaving_nothing);
    tcase_add_test(t, sigusr1_and_sigusr2_stop_like_sigterm);
    tcase_add_test(t, repeated_sigterm_still_exits_143_with_its_message);
    tcase_add_test(t, closed_stdout_pipe_stops_quietly);
    tcase_add_test(t, kill9_then_resume_is_byte_identical);
    tcase_add_test(t, checkpoint_schedule_and_header);
    tcase_add_test(t, fresh_start_keeps_its_own_checkpoints);
    tcase_add_test(t, killed_at_random_moments_still_byte_identical);
    tcase_add_test(t, flipped_byte_falls_back_to_the_previous_checkpoint);
    tcase_add_test(t, other_spec_refused_unless_named);
    tcase_add_test(t, compatible_edit_resumes_and_matches_a_straight_run);
    tcase_add_test(t, step_checkpoint_resumes_mid_epoch_byte_identical);
    tcase_add_test(t, cnn_with_batchnorm_dropout_resumes_byte_identical);
    tcase_add_test(t, slow_checkpoint_write_does_not_trip_rank_sync_timeout);
    tcase_add_test(t, checkpoint_write_past_nccl_timeout_is_named);
    tcase_add_test(t, time_checkpoints_are_written_and_change_nothing);
    tcase_add_test(t, summary_on_a_full_stdout_exits_nonzero);
    tcase_add_test(t, checkpoint_dir_full_or_unwritable);
    tcase_add_test(t, max_restarts_relaunches_then_gives_up_with_history);
    tcase_add_test(t, max_restarts_after_a_named_resume_restarts_from_it);
    tcase_add_test(t, export_gives_the_reported_test_accuracy_in_torch);
    tcase_add_test(t, metrics_files_and_plain_output);
    tcase_add_test(t, progress_line_on_a_terminal);
    suite_add_tcase(s, t);
    return s;
}
