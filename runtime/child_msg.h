/* child_msg.h - one fixed-size answer from a forked helper child.
 *
 * The launcher's plugin probe (ddprt.c) and the CUDA plugin's own device
 * probe (backend_cuda.cu) both fork a child so that CUDA is never
 * initialised in the calling process, and read its answer over a pipe. The
 * plugin is dlopen()ed by a job whose runtime is linked statically, so it
 * cannot call into libddprt: the protocol lives here, as static inline
 * functions both compile (C11 and C++17).
 */
#ifndef DDPC_CHILD_MSG_H
#define DDPC_CHILD_MSG_H

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* Forks a helper child with a pipe for its answer, after flushing stdio
 * (the child must not inherit unflushed output). Returns the child's pid to
 * the parent, which keeps fds[0] (the read end); 0 in the child, which
 * keeps fds[1] (the write end); -1 with errno and nothing left open. */
static inline pid_t child_msg_fork(int fds[2])
{
    if (pipe2(fds, O_CLOEXEC) < 0)
        return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        int err = errno;
        close(fds[0]);
        close(fds[1]);
        errno = err;
        return -1;
    }
    close(fds[pid == 0 ? 0 : 1]);
    return pid;
}

/* Child side: writes all len bytes of msg to fd and _exit()s: 0 when the
 * whole answer went out, 3 when it could not. _exit, not exit: atexit
 * handlers and stdio buffers belong to the parent. */
static inline void child_msg_send_and_exit(int fd, const void *msg, size_t len)
{
    const char *p = (const char *)msg;
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            _exit(3);
        p += w;
        len -= (size_t)w;
    }
    _exit(0);
}

struct child_msg_result {
    size_t got;       /* bytes of the answer received */
    int    timed_out; /* no byte for timeout_ms: the child was killed */
    int    read_err;  /* errno of a failed poll/read (child killed), else 0 */
    int    status;    /* the child's wait status; it is always reaped */
};

/* Parent side: reads up to len bytes into msg from fd until EOF, waiting at
 * most timeout_ms for each chunk; closes fd; kills pid (our own child, by
 * pid) on timeout or error; reaps it. */
static inline struct child_msg_result child_msg_receive(int fd, pid_t pid, void *msg,
                                                        size_t len, int timeout_ms)
{
    struct child_msg_result r = { 0, 0, 0, 0 };
    struct pollfd pfd = { fd, POLLIN, 0 };
    while (r.got < len) {
        int pr = poll(&pfd, 1, timeout_ms);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr == 0) {
            r.timed_out = 1;
            break;
        }
        if (pr < 0) {
            r.read_err = errno;
            break;
        }
        ssize_t n = read(fd, (char *)msg + r.got, len - r.got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            r.read_err = errno;
            break;
        }
        if (n == 0)
            break;                /* EOF: the child exited */
        r.got += (size_t)n;
    }
    close(fd);
    if (r.timed_out || r.read_err)
        (void)kill(pid, SIGKILL);
    while (waitpid(pid, &r.status, 0) < 0 && errno == EINTR)
        ;
    return r;
}

#endif /* DDPC_CHILD_MSG_H */
