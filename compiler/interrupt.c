/* interrupt.c - cleanup of an interrupted `ddpc build` (see interrupt.h).
 *
 * One static registry: it is process-wide by nature (a signal handler has
 * no argument), written only with INT/TERM/HUP blocked, read only by the
 * handler. The handler uses kill, waitpid, unlink, rmdir, sigaction and
 * raise: all async-signal-safe.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "interrupt.h"

extern char **environ;

#define INTR_FILES 8
#define INTR_DIR_FILES 4

static struct {
    volatile pid_t child;                        /* 0: none */
    char file[INTR_FILES][PATH_MAX];             /* "" : free slot */
    char dir[PATH_MAX];                          /* "" : none */
    char dir_file[INTR_DIR_FILES][PATH_MAX];
    char wipe[PATH_MAX];                         /* emptied, then removed; "" : none */
} intr;

static const int intr_signals[] = { SIGINT, SIGTERM, SIGHUP };

static void intr_block(sigset_t *old);
static void intr_restore(const sigset_t *old);

/* Empties dir (plain files only, as a compiler's TMPDIR holds) and removes
 * it, with async-signal-safe calls only: open, getdents64, unlinkat. */
static void wipe_dir(const char *dir)
{
    static char buf[4096] __attribute__((aligned(8)));
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return;
    for (int round = 0; round < 64; round++) {
        long n = syscall(SYS_getdents64, fd, buf, sizeof buf);
        if (n <= 0)
            break;
        for (long off = 0; off < n;) {
            struct { uint64_t ino; int64_t off; unsigned short reclen; unsigned char type;
                     char name[]; } *de = (void *)(buf + off);
            if (strcmp(de->name, ".") != 0 && strcmp(de->name, "..") != 0)
                (void)unlinkat(fd, de->name, 0);
            off += de->reclen;
        }
    }
    (void)close(fd);
    (void)rmdir(dir);
}

void intr_hold(sigset_t *old)
{
    intr_block(old);
}

void intr_release(const sigset_t *old)
{
    intr_restore(old);
}

static void intr_block(sigset_t *old)
{
    sigset_t s;
    sigemptyset(&s);
    for (size_t i = 0; i < sizeof intr_signals / sizeof intr_signals[0]; i++)
        sigaddset(&s, intr_signals[i]);
    (void)sigprocmask(SIG_BLOCK, &s, old);     /* valid arguments: cannot fail */
}

static void intr_restore(const sigset_t *old)
{
    (void)sigprocmask(SIG_SETMASK, old, NULL);
}

static void intr_handler(int sig)
{
    pid_t c = intr.child;
    if (c > 0) {
        /* SIGTERM to the child's own process group first: the compiler
         * driver then removes its temp files (cc*.s in TMPDIR) and its
         * cc1/as/ld go too; SIGKILL after 2 s if it has not exited */
        (void)kill(-c, SIGTERM);
        int reaped = 0;
        for (int i = 0; i < 200 && !reaped; i++) {
            pid_t r = waitpid(c, NULL, WNOHANG);
            if (r == c || (r < 0 && errno != EINTR))
                reaped = 1;
            else {
                struct timespec ts = { 0, 10 * 1000 * 1000 };
                (void)nanosleep(&ts, NULL);
            }
        }
        (void)kill(-c, SIGKILL);        /* stragglers of the group, or the child */
        if (!reaped)
            while (waitpid(c, NULL, 0) < 0 && errno == EINTR)
                ;
        /* the driver's orphans (cc1 mid-write) are reparented elsewhere:
         * wait, 2 s at most, until the group is empty, so nothing creates
         * a file after the cleanup below */
        for (int i = 0; i < 200 && kill(-c, 0) == 0; i++) {
            struct timespec ts = { 0, 10 * 1000 * 1000 };
            (void)nanosleep(&ts, NULL);
        }
    }
    if (intr.wipe[0])
        wipe_dir(intr.wipe);
    for (int i = 0; i < INTR_FILES; i++)
        if (intr.file[i][0])
            (void)unlink(intr.file[i]);
    for (int i = 0; i < INTR_DIR_FILES; i++)
        if (intr.dir_file[i][0])
            (void)unlink(intr.dir_file[i]);
    if (intr.dir[0])
        (void)rmdir(intr.dir);
    /* die of the same signal, as if it had not been caught */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    (void)sigaction(sig, &sa, NULL);
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, sig);
    (void)sigprocmask(SIG_UNBLOCK, &s, NULL);
    (void)raise(sig);
    _exit(128 + sig);           /* not reached */
}

void intr_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = intr_handler;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof intr_signals / sizeof intr_signals[0]; i++)
        sigaddset(&sa.sa_mask, intr_signals[i]);
    for (size_t i = 0; i < sizeof intr_signals / sizeof intr_signals[0]; i++) {
        struct sigaction old;
        /* a signal the caller ignores (nohup) stays ignored */
        if (sigaction(intr_signals[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN)
            continue;
        (void)sigaction(intr_signals[i], &sa, NULL);
    }
}

int intr_track(const char *path)
{
    if (!path || strlen(path) >= PATH_MAX)
        return -1;
    sigset_t old;
    intr_block(&old);
    int slot = -1;
    for (int i = 0; i < INTR_FILES && slot < 0; i++)
        if (!intr.file[i][0]) {
            memcpy(intr.file[i], path, strlen(path) + 1);
            slot = i;
        }
    intr_restore(&old);
    return slot;
}

void intr_untrack(int slot)
{
    if (slot < 0 || slot >= INTR_FILES)
        return;
    sigset_t old;
    intr_block(&old);
    intr.file[slot][0] = '\0';
    intr_restore(&old);
}

void intr_track_dir(const char *dir, const char *const *names, int n)
{
    sigset_t old;
    intr_block(&old);
    intr.dir[0] = '\0';
    for (int i = 0; i < INTR_DIR_FILES; i++)
        intr.dir_file[i][0] = '\0';
    if (dir && strlen(dir) < PATH_MAX) {
        memcpy(intr.dir, dir, strlen(dir) + 1);
        for (int i = 0; i < n && i < INTR_DIR_FILES; i++) {
            int len = snprintf(intr.dir_file[i], PATH_MAX, "%s/%s", dir, names[i]);
            if (len < 0 || len >= PATH_MAX)
                intr.dir_file[i][0] = '\0';
        }
    }
    intr_restore(&old);
}

void intr_track_wipe(const char *dir)
{
    sigset_t old;
    intr_block(&old);
    intr.wipe[0] = '\0';
    if (dir && strlen(dir) < PATH_MAX)
        memcpy(intr.wipe, dir, strlen(dir) + 1);
    intr_restore(&old);
}

void intr_wipe_now(const char *dir)
{
    if (dir)
        wipe_dir(dir);
    intr_track_wipe(NULL);
}

int intr_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
                char *const argv[])
{
    return intr_spawnpe(pid, file, fa, argv, environ);
}

int intr_spawnpe(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
                 char *const argv[], char *const envp[])
{
    posix_spawnattr_t attr;
    int err = posix_spawnattr_init(&attr);
    if (err != 0)
        return err;
    sigset_t empty;
    sigemptyset(&empty);
    err = posix_spawnattr_setsigmask(&attr, &empty);
    /* its own process group, so the handler can stop it with everything
     * it started (the compiler driver's cc1, as, ld) */
    if (err == 0)
        err = posix_spawnattr_setpgroup(&attr, 0);
    if (err == 0)
        err = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETPGROUP);
    if (err != 0) {
        (void)posix_spawnattr_destroy(&attr);
        return err;
    }
    sigset_t old;
    intr_block(&old);
    err = posix_spawnp(pid, file, fa, &attr, argv, envp);
    if (err == 0)
        intr.child = *pid;
    intr_restore(&old);         /* a pending signal is handled here, child known */
    (void)posix_spawnattr_destroy(&attr);
    return err;
}

pid_t intr_wait(pid_t pid, int *status)
{
    /* wait for the exit without reaping, so the handler never kills a pid
     * that was already reaped and reused */
    siginfo_t si;
    while (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT) < 0)
        if (errno != EINTR)
            return -1;
    sigset_t old;
    intr_block(&old);
    pid_t r;
    while ((r = waitpid(pid, status, 0)) < 0 && errno == EINTR)
        ;
    if (intr.child == pid)
        intr.child = 0;
    intr_restore(&old);
    return r;
}
