/* testutil.c - see testutil.h. */
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

int run_capture(char *const argv[], const char *cwd, char *const env_extra[],
                double timeout_s, struct run_result *r)
{
    memset(r, 0, sizeof *r);
    int po[2], pe[2];
    if (pipe(po) == -1)
        return -1;
    if (pipe(pe) == -1) {
        close(po[0]);
        close(po[1]);
        return -1;
    }
    double t0 = now_s();
    pid_t pid = fork();
    if (pid == -1)
        return -1;
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
    struct buf out = {0}, err = {0};
    buf_append(&out, "", 0);
    buf_append(&err, "", 0);
    struct pollfd fds[2] = { { po[0], POLLIN, 0 }, { pe[0], POLLIN, 0 } };
    int open_fds = 2;
    while (open_fds > 0) {
        double left = timeout_s - (now_s() - t0);
        if (left <= 0) {
            r->timed_out = 1;
            kill(-pid, SIGKILL);
            break;
        }
        int rc = poll(fds, 2, (int)(left * 1000) + 1);
        if (rc < 0 && errno == EINTR)
            continue;
        for (int i = 0; i < 2; i++) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            char chunk[8192];
            ssize_t n = read(fds[i].fd, chunk, sizeof chunk);
            if (n > 0) {
                buf_append(i == 0 ? &out : &err, chunk, (size_t)n);
            } else if (n == 0 || errno != EINTR) {
                close(fds[i].fd);
                fds[i].fd = -1;
                open_fds--;
            }
        }
    }
    for (int i = 0; i < 2; i++)
        if (fds[i].fd >= 0)
            close(fds[i].fd);
    int status = 0;
    while (waitpid(pid, &status, 0) == -1 && errno == EINTR)
        ;
    r->seconds = now_s() - t0;
    r->exited = WIFEXITED(status);
    r->code = WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status);
    r->out = out.p;
    r->err = err.p;
    return 0;
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
    return n < 0 ? 0 : n;
}
