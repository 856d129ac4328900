/* testutil.c - see testutil.h. */
#include "testutil.h"
#include "spec.h"
#include <check.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct buf { char *p; size_t n, cap; };

static void buf_append(struct buf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
            abort();
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

int run_start(char *const argv[], const char *cwd, char *const env_extra[],
              struct run_proc *p)
{
    memset(p, 0, sizeof *p);
    p->fd_out = p->fd_err = -1;
    int po[2], pe[2];
    if (pipe(po) == -1)
        return -1;
    if (pipe(pe) == -1) {
        close(po[0]);
        close(po[1]);
        return -1;
    }
    p->t0 = now_s();
    pid_t pid = fork();
    if (pid == -1) {
        close(po[0]); close(po[1]); close(pe[0]); close(pe[1]);
        return -1;
    }
    if (pid == 0) {
        setpgid(0, 0);
        dup2(po[1], 1);
        dup2(pe[1], 2);
        close(po[0]); close(po[1]); close(pe[0]); close(pe[1]);
        if (cwd && chdir(cwd) == -1)
            _exit(126);
        for (char *const *e = env_extra; e && *e; e++)
            putenv(*e);
        execvp(argv[0], argv);
        fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    setpgid(pid, pid);
    close(po[1]);
    close(pe[1]);
    p->pid = pid;
    p->fd_out = po[0];
    p->fd_err = pe[0];
    struct buf o = {0}, e = {0};
    buf_append(&o, "", 0);
    buf_append(&e, "", 0);
    p->out = o.p; p->out_n = o.n; p->out_cap = o.cap;
    p->err = e.p; p->err_n = e.n; p->err_cap = e.cap;
    return 0;
}

/* Reads what is there (waiting at most wait_s for something); returns the
 * number of pipes still open. */
static int run_pump(struct run_proc *p, double wait_s)
{
    struct pollfd fds[2] = { { p->fd_out, POLLIN, 0 }, { p->fd_err, POLLIN, 0 } };
    int open_fds = (p->fd_out >= 0) + (p->fd_err >= 0);
    if (open_fds == 0)
        return 0;
    int rc = poll(fds, 2, wait_s > 0 ? (int)(wait_s * 1000) + 1 : 0);
    if (rc <= 0)
        return open_fds;
    for (int i = 0; i < 2; i++) {
        if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
            continue;
        char chunk[8192];
        ssize_t n = read(fds[i].fd, chunk, sizeof chunk);
        struct buf b = i == 0 ? (struct buf){ p->out, p->out_n, p->out_cap }
                              : (struct buf){ p->err, p->err_n, p->err_cap };
        if (n > 0) {
            buf_append(&b, chunk, (size_t)n);
        } else if (n == 0 || errno != EINTR) {
            close(fds[i].fd);
            if (i == 0)
                p->fd_out = -1;
            else
                p->fd_err = -1;
            open_fds--;
        }
        if (i == 0) {
            p->out = b.p; p->out_n = b.n; p->out_cap = b.cap;
        } else {
            p->err = b.p; p->err_n = b.n; p->err_cap = b.cap;
        }
    }
    return open_fds;
}

static int count_in(const char *s, const char *needle)
{
    int n = 0;
    size_t l = strlen(needle);
    for (const char *q = s; (q = strstr(q, needle)) != NULL; q += l)
        n++;
    return n;
}

int run_wait_count(struct run_proc *p, const char *needle, int count, double timeout_s)
{
    double t0 = now_s();
    for (;;) {
        if (count_in(p->out, needle) + count_in(p->err, needle) >= count)
            return 1;
        double left = timeout_s - (now_s() - t0);
        if (left <= 0)
            return 0;
        if (run_pump(p, left > 0.05 ? 0.05 : left) == 0)
            return count_in(p->out, needle) + count_in(p->err, needle) >= count;
    }
}

int run_wait_output(struct run_proc *p, const char *needle, double timeout_s)
{
    return run_wait_count(p, needle, 1, timeout_s);
}

int run_finish(struct run_proc *p, double timeout_s, struct run_result *r)
{
    memset(r, 0, sizeof *r);
    double t0 = now_s();
    for (;;) {
        double left = timeout_s - (now_s() - t0);
        if (left <= 0) {
            r->timed_out = 1;
            kill(-p->pid, SIGKILL);
            break;
        }
        if (run_pump(p, left) == 0)
            break;
    }
    if (p->fd_out >= 0)
        close(p->fd_out);
    if (p->fd_err >= 0)
        close(p->fd_err);
    p->fd_out = p->fd_err = -1;
    int status = 0;
    pid_t got;
    while ((got = waitpid(p->pid, &status, 0)) == -1 && errno == EINTR)
        ;
    r->seconds = now_s() - p->t0;
    if (got == -1) {            /* reaped elsewhere: the status is lost */
        r->exited = 0;
        r->code = -1;
    } else {
        r->exited = WIFEXITED(status);
        r->code = WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status);
    }
    r->out = p->out;
    r->err = p->err;
    p->out = p->err = NULL;
    return 0;
}

int run_capture(char *const argv[], const char *cwd, char *const env_extra[],
                double timeout_s, struct run_result *r)
{
    struct run_proc p;
    if (run_start(argv, cwd, env_extra, &p) < 0) {
        memset(r, 0, sizeof *r);
        return -1;
    }
    return run_finish(&p, timeout_s, r);
}

int run_loader(const char *model, const char *spec, double timeout_s, struct run_result *r)
{
    char *pp = NULL;
    if (asprintf(&pp, "PYTHONPATH=%s/share/ddpc/python", test_build()) < 0)
        return -1;
    char *env[] = { pp, NULL };
    char *with_spec[] = { "/usr/bin/python3", "-m", "ddpc_torch", (char *)model, "--spec",
                          (char *)spec, "--score", NULL };
    char *alone[] = { "/usr/bin/python3", "-m", "ddpc_torch", (char *)model, NULL };
    int rc = run_capture(spec ? with_spec : alone, "/", env, timeout_s, r);
    free(pp);
    return rc;
}

int loader_lacks_torch(const struct run_result *r)
{
    return r->exited && r->code == 1 && r->err && strstr(r->err, "cannot import torch");
}

/* Field `n` (1-based, after the ")" of comm) of /proc/pid/stat as a
 * number, or -1. */
static long long proc_stat_field(pid_t pid, int n, char *state)
{
    char path[64], line[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t len = fread(line, 1, sizeof line - 1, f);
    fclose(f);
    line[len] = '\0';
    char *rp = strrchr(line, ')');
    if (!rp)
        return -1;
    /* fields after ')': 3 state, 4 ppid, ... 22 starttime */
    char *s = rp + 2;
    if (state)
        *state = *s;
    for (int field = 3; field < n; field++) {
        s = strchr(s, ' ');
        if (!s)
            return -1;
        s++;
    }
    return strtoll(s, NULL, 10);
}

char proc_state(pid_t pid)
{
    char st = 0;
    if (proc_stat_field(pid, 3, &st) < 0 && st == 0)
        return 0;
    return st;
}

int child_pids(pid_t parent, pid_t *out, int max)
{
    DIR *d = opendir("/proc");
    if (!d)
        return -1;
    int n = 0;
    long long start[256];
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        char *end;
        long pid = strtol(de->d_name, &end, 10);
        if (*end || pid <= 0)
            continue;
        char st = 0;
        if (proc_stat_field((pid_t)pid, 4, &st) != parent || st == 'Z' || st == 0)
            continue;
        if (n < max && n < 256) {
            long long t = proc_stat_field((pid_t)pid, 22, NULL);
            int i = n++;
            /* insertion sort by (start time, pid): fork order */
            while (i > 0 && (start[i - 1] > t || (start[i - 1] == t && out[i - 1] > pid))) {
                out[i] = out[i - 1];
                start[i] = start[i - 1];
                i--;
            }
            out[i] = (pid_t)pid;
            start[i] = t;
        }
    }
    closedir(d);
    return n;
}

int wait_gone(const pid_t *pids, int n, double timeout_s)
{
    double t0 = now_s();
    for (;;) {
        /* reap those of them we adopted, so zombies do not linger; only
         * them: waitpid(-1) could take a launcher run_finish still waits for */
        for (int i = 0; i < n; i++)
            (void)waitpid(pids[i], NULL, WNOHANG);
        int alive = 0;
        for (int i = 0; i < n; i++) {
            char st = proc_state(pids[i]);
            if (st != 0 && st != 'Z')
                alive++;
        }
        if (alive == 0) {
            for (int i = 0; i < n; i++)   /* died since the first pass */
                (void)waitpid(pids[i], NULL, WNOHANG);
            return 0;
        }
        if (now_s() - t0 > timeout_s)
            return alive;
        usleep(5000);
    }
}

void run_result_free(struct run_result *r)
{
    free(r->out);
    free(r->err);
    r->out = r->err = NULL;
}

const char *test_top(void)
{
    const char *s = getenv("DDPC_TOP");
    return s && *s ? s : ".";
}

const char *test_build(void)
{
    const char *s = getenv("DDPC_BUILD");
    return s && *s ? s : "build";
}

char *make_temp_dir(const char *tag)
{
    const char *tmp = getenv("TMPDIR");
    char *path = NULL;
    if (asprintf(&path, "%s/ddpc-%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", tag) < 0)
        return NULL;
    if (!mkdtemp(path)) {
        free(path);
        return NULL;
    }
    return path;
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb; (void)flag; (void)ftw;
    return remove(p);
}

int rm_tree(const char *path)
{
    return nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = fwrite(data, 1, len, f);
    int rc = fclose(f);
    return (w == len && rc == 0) ? 0 : -1;
}

char *read_whole(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
    char *s = NULL;
    size_t n = 0, cap = 0, got;
    do {
        if (n + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 65536;
            ck_assert_ptr_nonnull(s = realloc(s, cap));
        }
        n += got = fread(s + n, 1, cap - n - 1, f);
    } while (got > 0);
    ck_assert_msg(!ferror(f), "%s: read error", path);
    ck_assert_int_eq(fclose(f), 0);
    s[n] = '\0';
    if (len)
        *len = n;
    return s;
}

static void put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

void ddpc_build_ok(const char *spec, const char *out)
{
    char *ddpc = NULL;
    ck_assert_int_ge(asprintf(&ddpc, "%s/bin/ddpc", test_build()), 0);
    char *argv[] = { ddpc, "build", (char *)spec, "-o", (char *)out, NULL };
    struct run_result r;
    ck_assert_int_eq(run_capture(argv, NULL, NULL, 120, &r), 0);
    ck_assert_msg(r.exited && r.code == 0, "ddpc build %s failed (%d):\n%s%s", spec, r.code,
                  r.out, r.err);
    ck_assert_int_eq(access(out, X_OK), 0);
    run_result_free(&r);
    free(ddpc);
}

int write_llmc_shard(const char *path, int32_t magic, int32_t version, int32_t count,
                     const uint16_t *tok, size_t ntok)
{
    size_t n = 1024 + 2 * ntok;
    unsigned char *b = calloc(1, n);
    if (!b)
        return -1;
    const int32_t h[3] = { magic, version, count };
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 4; k++)
            b[4 * i + k] = (unsigned char)((uint32_t)h[i] >> (8 * k));
    for (size_t i = 0; i < ntok; i++) {
        b[1024 + 2 * i] = (unsigned char)(tok[i] & 0xff);
        b[1024 + 2 * i + 1] = (unsigned char)(tok[i] >> 8);
    }
    int rc = write_file(path, b, n);
    free(b);
    return rc;
}

int write_idx_pair(const char *images, const char *labels, int n, int rows, int cols,
                   const unsigned char *pixels, const unsigned char *label_bytes)
{
    size_t npix = (size_t)n * (size_t)rows * (size_t)cols;
    unsigned char *im = malloc(16 + npix), *lb = malloc(8 + (size_t)n);
    int rc = -1;
    if (!im || !lb)
        goto done;
    put_be32(im, 0x00000803);
    put_be32(im + 4, (uint32_t)n);
    put_be32(im + 8, (uint32_t)rows);
    put_be32(im + 12, (uint32_t)cols);
    memcpy(im + 16, pixels, npix);
    put_be32(lb, 0x00000801);
    put_be32(lb + 4, (uint32_t)n);
    memcpy(lb + 8, label_bytes, (size_t)n);
    if (write_file(images, im, 16 + npix) == 0 && write_file(labels, lb, 8 + (size_t)n) == 0)
        rc = 0;
done:
    free(im);
    free(lb);
    return rc;
}

double find_kv(const char *text, const char *key)
{
    size_t kl = strlen(key);
    for (const char *p = text; (p = strstr(p, key)) != NULL; p += kl) {
        if ((p == text || p[-1] == ' ' || p[-1] == '\n' || p[-1] == '\t') && p[kl] == '=')
            return strtod(p + kl + 1, NULL);
    }
    return NAN;
}

void adopt_orphans(void)
{
    prctl(PR_SET_CHILD_SUBREAPER, 1);
}

/* Children of this process, found in /proc; with kill_them they are
 * SIGKILLed. */
static int scan_children(int kill_them)
{
    DIR *d = opendir("/proc");
    if (!d)
        return -1;
    int n = 0;
    pid_t self = getpid();
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        char *end;
        long pid = strtol(de->d_name, &end, 10);
        if (*end || pid <= 0)
            continue;
        char path[64], line[512];
        snprintf(path, sizeof path, "/proc/%ld/stat", pid);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t len = fread(line, 1, sizeof line - 1, f);
        fclose(f);
        line[len] = '\0';
        /* pid (comm) state ppid ...: comm may hold spaces, so parse after ')' */
        char *rp = strrchr(line, ')');
        char state;
        long ppid;
        if (!rp || sscanf(rp + 1, " %c %ld", &state, &ppid) != 2)
            continue;
        if (ppid != self || state == 'Z')
            continue;
        n++;
        if (kill_them)
            kill((pid_t)pid, SIGKILL);
    }
    closedir(d);
    return n;
}

int leftover_children(double grace_s)
{
    double t0 = now_s();
    int n;
    for (;;) {
        while (waitpid(-1, NULL, WNOHANG) > 0)
            ;
        n = scan_children(0);
        if (n <= 0 || now_s() - t0 > grace_s)
            break;
        usleep(10000);
    }
    if (n > 0) {
        scan_children(1);
        while (waitpid(-1, NULL, 0) > 0)
            ;
    }
    /* a child that turned zombie between the reap and the scan */
    while (waitpid(-1, NULL, WNOHANG) > 0)
        ;
    return n < 0 ? 0 : n;
}

/* ---- skips, counted across Check's forked tests ---- */

struct skip_count {
    _Atomic int tests;      /* tests (processes) that printed a SKIP */
    _Atomic int last_pid;   /* the process counted last */
};
static struct skip_count *skips;

void test_skip_init(void)
{
    void *m = mmap(NULL, sizeof *skips, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        perror("test_skip_init: mmap");
        exit(2);
    }
    skips = m;
    atomic_init(&skips->tests, 0);
    atomic_init(&skips->last_pid, 0);
}

void test_skip(const char *what, const char *why_fmt, ...)
{
    va_list ap;
    printf("SKIP %s: ", what);
    va_start(ap, why_fmt);
    vprintf(why_fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
    if (!skips)
        return;
    /* Check forks each test: count a process once, however many parts of
     * its test it skips (CK_FORK=no runs every test in one process and
     * counts each SKIP) */
    int pid = (int)getpid();
    if (atomic_exchange(&skips->last_pid, pid) != pid || getenv("CK_FORK"))
        atomic_fetch_add(&skips->tests, 1);
}

int test_skipped(void)
{
    return skips ? atomic_load(&skips->tests) : 0;
}

/* ---- allocation counting (the Makefile's -Wl,--wrap=... for run_tests) ---- */

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
int   __real_posix_memalign(void **p, size_t align, size_t n);
void *__real_aligned_alloc(size_t align, size_t n);

static atomic_int alloc_counting;
static atomic_long alloc_counted;

static void alloc_note(void)
{
    if (atomic_load_explicit(&alloc_counting, memory_order_relaxed))
        atomic_fetch_add_explicit(&alloc_counted, 1, memory_order_relaxed);
}

void *__wrap_malloc(size_t n)
{
    alloc_note();
    return __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t size)
{
    alloc_note();
    return __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t n)
{
    alloc_note();
    return __real_realloc(p, n);
}

int __wrap_posix_memalign(void **p, size_t align, size_t n)
{
    alloc_note();
    return __real_posix_memalign(p, align, n);
}

void *__wrap_aligned_alloc(size_t align, size_t n)
{
    alloc_note();
    return __real_aligned_alloc(align, n);
}

void alloc_count_start(void)
{
    atomic_store(&alloc_counted, 0);
    atomic_store(&alloc_counting, 1);
}

long alloc_count_stop(void)
{
    atomic_store(&alloc_counting, 0);
    return atomic_load(&alloc_counted);
}

/* ---- a tiny safetensors writer (F32 only) ---- */

void st_add(struct st_file *f, const char *name, int nd, const int64_t *shape,
            const float *data)
{
    ck_assert_int_lt(f->n, 256);
    struct st_entry *t = &f->e[f->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->nd = nd;
    t->n = 1;
    for (int i = 0; i < nd; i++) {
        t->shape[i] = shape[i];
        t->n *= (size_t)shape[i];
    }
    t->data = malloc(t->n * sizeof(float) + 1);
    ck_assert_ptr_nonnull(t->data);
    memcpy(t->data, data, t->n * sizeof(float));
}

void st_write(struct st_file *f, const char *path)
{
    char *hdr = NULL;
    size_t hl = 0;
    FILE *h = open_memstream(&hdr, &hl);
    ck_assert_ptr_nonnull(h);
    fputc('{', h);
    size_t off = 0;
    for (int i = 0; i < f->n; i++) {
        struct st_entry *t = &f->e[i];
        fprintf(h, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[", i ? "," : "", t->name);
        for (int d = 0; d < t->nd; d++)
            fprintf(h, "%s%lld", d ? "," : "", (long long)t->shape[d]);
        fprintf(h, "],\"data_offsets\":[%zu,%zu]}", off, off + 4 * t->n);
        off += 4 * t->n;
    }
    fputc('}', h);
    while ((ftell(h) % 8) != 0)
        fputc(' ', h);
    fclose(h);
    FILE *o = fopen(path, "wb");
    ck_assert_ptr_nonnull(o);
    uint64_t len = hl;
    unsigned char lb[8];
    for (int i = 0; i < 8; i++)
        lb[i] = (unsigned char)(len >> (8 * i));
    ck_assert_int_eq(fwrite(lb, 1, 8, o), 8);
    ck_assert_uint_eq(fwrite(hdr, 1, hl, o), hl);
    for (int i = 0; i < f->n; i++) {
        ck_assert_uint_eq(fwrite(f->e[i].data, 4, f->e[i].n, o), f->e[i].n);
        free(f->e[i].data);
    }
    ck_assert_int_eq(fclose(o), 0);
    free(hdr);
    f->n = 0;
}

float test_urand(uint64_t *state)
{
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*state >> 40) * (1.0 / 8388608.0) - 1.0);
}

void test_load_job(const char *path, struct ddpc_job *job, struct spec_doc **doc)
{
    struct ddpc_diag d;
    diag_init(&d);
    struct spec_options opt = { .read_data_headers = 1 };
    int rc = spec_load_job(path, &opt, job, doc, &d);
    if (rc != 0)
        diag_print(&d, 0, DDPC_FMT_TEXT, stdout);
    ck_assert_msg(rc == 0, "%s: spec_load_job returned %d: %s", path, rc,
                  d.n ? d.v[0].message : "?");
    diag_free(&d);
}
