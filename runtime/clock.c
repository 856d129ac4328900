/* clock.c - monotonic time, deadlines, and the blocking all-reduce wrapper.
 *
 * Owns ddpc_now, ddpc_deadline_after, ddpc_wait_ms, comm_all_reduce and comm_leave
 * (comm.h). Deadlines
 * are absolute CLOCK_MONOTONIC seconds so that a chain of calls shares one
 * budget and wall-clock jumps (NTP) never fire or hide a timeout.
 * Never sleeps, never allocates.
 */
#include <time.h>
#include "comm.h"

double ddpc_now(void)
{
    struct timespec ts;
    /* CLOCK_MONOTONIC cannot fail on Linux with a valid pointer. */
    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double ddpc_deadline_after(double seconds)
{
    /* 0 (or a negative "unset") means no deadline, like nccl_timeout_s == 0. */
    if (!(seconds > 0.0))
        return 0.0;
    return ddpc_now() + seconds;
}

long long ddpc_wait_ms(double left, long long max_ms)
{
    if (!(left > 0.0))
        return 0;
    double ms = left * 1000.0 + 1.0;
    return ms >= (double)max_ms ? max_ms : (long long)ms;
}

int comm_all_reduce(struct ddpc_comm *c, const float *send, float *recv, size_t n,
                    enum ddpc_reduce op, double deadline, struct ddpc_err *e)
{
    DDPC_TRY(c->all_reduce_start(c, 0, send, recv, n, op, deadline, e));
    return c->all_reduce_wait(c, 0, deadline, e);
}

int comm_leave(struct ddpc_comm *c, double deadline, double linger_s, struct ddpc_err *e)
{
    DDPC_TRY(c->barrier(c, deadline, e));
    struct ddpc_err ignored = { 0 };
    (void)c->barrier(c, ddpc_deadline_after(linger_s), &ignored);
    return 0;
}
