/* std_fds.h - standard input, output and error are open before anything
 * else is: one rule for ddpc (compiler/main.c) and every job (ddprt.c).
 *
 * defines: std_fds_open
 *
 * A program started with one of them closed (`./job >&-`, a daemon's
 * child) hands that number to the first file it opens, and what it then
 * prints goes into that file: a job's progress lines into its metrics CSV
 * or a checkpoint, ddpc's messages into a generated file. SQLite keeps its
 * database files off these numbers the same way.
 */
#ifndef DDPC_STD_FDS_H
#define DDPC_STD_FDS_H

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

/* Opens /dev/null on each of 0, 1 and 2 that is closed (the lowest free
 * number is the closed one). 0, or -1 with errno when /dev/null cannot be
 * opened (then write nothing: the caller exits with a status only). */
static inline int std_fds_open(void)
{
    for (int fd = 0; fd < 3; fd++) {
        if (fcntl(fd, F_GETFD) != -1 || errno != EBADF)
            continue;
        int got = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
        if (got < 0)
            return -1;
        if (got != fd) {   /* cannot happen: fd was the lowest closed */
            (void)close(got);
            errno = EBADF;
            return -1;
        }
    }
    return 0;
}

#endif /* DDPC_STD_FDS_H */
