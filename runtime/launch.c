/* launch.c - fork the workers of one host, supervise them, tear them down.
 *
 * Owns processes and signals: the shm communicators' lifetime (mapped before
 * fork, unmapped after the last worker is reaped), fork, PR_SET_PDEATHSIG,
 * the supervision loop, and turning a worker's death into one message that
 * names its rank, device and cause. Never trains, never parses flags (ddprt.c
 * does), never calls exit(): workers leave with _exit at their top level
 * here, the launcher returns a status to main.
 *
 * Signals: the only global state in the runtime lives here, because a signal
 * handler can reach nothing else. The handlers set a flag and write one byte
 * to a self-pipe; the supervision loop polls that pipe, so a SIGCHLD or
 * SIGINT wakes it at once. Handlers rather than sigwait: OpenBLAS starts
 * threads at load time whose masks we do not control, and a process-directed
 * signal may land on any of them.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include "comm.h"
#include "env.h"
#include "launch.h"

/* Provided by OpenBLAS when it is linked; weak so launch.c does not force
 * it on programs (tests, benchmarks) that never do math. */
extern void openblas_set_num_threads(int n) __attribute__((weak));

#define LAUNCH_STATUS_FAILED 1
#define LAUNCH_ECHO_DELAY_S  0.5   /* see launch_teardown */

/* ===== signals ===== */

static struct {
    int pipe_rd, pipe_wr;
    volatile sig_atomic_t stop_sig;     /* the first stop signal received, else 0 */
} launch_sig = { -1, -1, 0 };

static void launch_on_signal(int sig)
{
    int saved = errno;
    if (sig != SIGCHLD && launch_sig.stop_sig == 0)
        launch_sig.stop_sig = sig;
    char b = 0;
    /* Non-blocking: a full pipe already guarantees a wake-up. */
    ssize_t w = write(launch_sig.pipe_wr, &b, 1);
    (void)w;
    errno = saved;
}

/* SIGHUP: the terminal went away (an ssh session closed without nohup):
 * stop like SIGTERM, so the workers go too and no partial file is left.
 * SIGUSR1 / SIGUSR2: Slurm users send them (sbatch --signal=USR1@90, as
 * Lightning's auto-requeue asks, or scancel -s USR1), and Slurm delivers
 * them to every process of the step; by default they kill, so the
 * launcher died without a word and its workers by PR_SET_PDEATHSIG,
 * mid-checkpoint maybe: they stop the job like SIGTERM instead. */
static const int launch_signals[] = { SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGCHLD };

static const char *launch_sig_name(int sig)
{
    return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : sig == SIGHUP ? "SIGHUP"
         : sig == SIGUSR1 ? "SIGUSR1" : sig == SIGUSR2 ? "SIGUSR2" : "a signal";
}
#define N_LAUNCH_SIGNALS ((int)(sizeof launch_signals / sizeof launch_signals[0]))

int launch_exit_code(int err_code)
{
    if (err_code >= 0)
        return 0;
    int s = 10 - err_code;   /* -1 -> 11, ..., -11 -> 21 */
    return s < 10 || s > 99 ? 10 : s;
}

const char *launch_exit_name(int status)
{
    switch (status) {
    case 10 - DDPC_E_SYS:     return "system error";
    case 10 - DDPC_E_DATA:    return "data error";
    case 10 - DDPC_E_TIMEOUT: return "timeout";
    case 10 - DDPC_E_ABORTED: return "aborted by another rank";
    case 10 - DDPC_E_PEER:    return "a peer died";
    case 10 - DDPC_E_DEVICE:  return "device error";
    case 10 - DDPC_E_INVALID: return "internal error";
    case 10 - DDPC_E_NOMEM:   return "out of memory";
    case 10 - DDPC_E_DIVERGED: return "the run diverged";
    case 10 - DDPC_E_STOPPED: return "another node stopped";
    case 10 - DDPC_E_TAKEN:   return "another ./job runs as this node";
    default:                  return NULL;
    }
}

/* ===== the worker side ===== */

/* Is standard output a pipe whose reader has gone (`./job | head` after
 * head exits)? Its write end then reports POLLERR. */
static int launch_out_closed(void)
{
    struct stat st;
    struct pollfd p = { STDOUT_FILENO, 0, 0 };
    return fstat(STDOUT_FILENO, &st) == 0 && S_ISFIFO(st.st_mode) && poll(&p, 1, 0) == 1 &&
           (p.revents & POLLERR);
}

/* A worker that failed because standard output's reader went away (where
 * SIGPIPE is ignored, as gloo's workers ignore it, its write failed with
 * EPIPE) ends as if the write had killed it, so the launcher stops the job
 * quietly (launch_out_gone) instead of reporting a failed write. */
static void launch_child_end_if_out_closed(void)
{
    if (!launch_out_closed())
        return;
    (void)signal(SIGPIPE, SIG_DFL);
    (void)raise(SIGPIPE);
}

/* What a failed worker leaves for the launcher, in memory mapped before
 * fork: when it noticed the failure and why. Among workers that failed
 * only because another did (a dead peer), the first to notice is nearest
 * the cause: on a multi-node job that is the one whose message names the
 * node that went away, while its local peers only saw it exit. */
struct launch_note {
    double t;            /* ddpc_now() at failure; 0: none */
    char   msg[sizeof ((struct ddpc_err *)0)->msg];   /* the whole message */
};

struct launch_child {
    pid_t pid;
    int   alive;
    int   status;          /* from waitpid */
    int   reaped_order;    /* 0 while alive; 1, 2, ... in reap order */
    int   secondary;       /* died because of the teardown, not its cause */
    double stopped_since;  /* when the launcher first saw it stopped; 0: running */
    char  label[48];
};

/* Runs in the child right after fork; never returns. */
static void launch_child_main(const struct launch_opts *o, launch_worker_fn fn,
                              struct launch_worker *w, pid_t launcher,
                              const sigset_t *orig_mask, struct launch_note *note)
{
    /* A killed launcher must not leave workers behind. The getppid check
     * closes the race where it died before prctl took effect. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) == -1 || getppid() != launcher)
        _exit(launch_exit_code(DDPC_E_SYS));
    for (int i = 0; i < N_LAUNCH_SIGNALS; i++)
        (void)signal(launch_signals[i], SIG_DFL);
    /* SIGUSR1 / SIGUSR2 are the launcher's to act on. Slurm sends them to
     * every process of the step, and a worker they killed before the
     * launcher saw its own was reported as the cause ("rank 0 killed by
     * signal 10") instead of "interrupted by SIGUSR1". */
    (void)signal(SIGUSR1, SIG_IGN);
    (void)signal(SIGUSR2, SIG_IGN);
    (void)close(launch_sig.pipe_rd);
    (void)close(launch_sig.pipe_wr);
    if (sigprocmask(SIG_SETMASK, orig_mask, NULL) == -1)
        _exit(launch_exit_code(DDPC_E_SYS));
    /* W workers x N BLAS threads would oversubscribe the cores W-fold. */
    if (o->single_blas_thread && openblas_set_num_threads)
        openblas_set_num_threads(1);

    struct ddpc_err e = { 0 };
    int rc = fn(w, &e);
    if (rc < 0)
        launch_child_end_if_out_closed();
    if (rc < 0) {
        if (e.code == DDPC_OK)
            (void)DDPC_FAIL(&e, rc, "worker failed without a message");
        if (note) {
            note->t = ddpc_now();
            (void)snprintf(note->msg, sizeof note->msg, "%s", e.msg);
        }
        /* Peers blocked in a collective learn at once that this rank
         * failed; its message is this rank's to print (below), once */
        char why[128];
        (void)snprintf(why, sizeof why, "rank %d (%s) failed", w->rank, w->label);
        comm_shm_abort_all(w->grad_region, why);
        comm_shm_abort_all(w->sync_region, why);
        (void)fflush(stdout);
        /* a rank that stopped because another failed or went away says
         * so ("stopped:"), so that the one error reads as the cause */
        const char *how = e.code == DDPC_E_ABORTED || e.code == DDPC_E_PEER ? "stopped" : "error";
        if (e.file && env_get()->debug)   /* ddpc's own source: for bug reports only */
            fprintf(stderr, "[rank %d] %s: %s (%s:%d)\n", w->rank, how, e.msg, e.file, e.line);
        else
            fprintf(stderr, "[rank %d] %s: %s\n", w->rank, how, e.msg);
        (void)fflush(stderr);
        _exit(launch_exit_code(e.code < 0 ? e.code : rc));
    }
    if (fflush(stdout) == EOF) {
        launch_child_end_if_out_closed();
        fprintf(stderr, "[rank %d] error: writing stdout: %s\n", w->rank, strerror(errno));
        _exit(launch_exit_code(DDPC_E_SYS));
    }
    _exit(0);
}

/* ===== the launcher side ===== */

/* The kernel's count of OOM kills since boot (/proc/vmstat oom_kill, Linux
 * 4.13 on; the host's, also in a container), or -1 when it cannot be read. */
static long long launch_oom_kills(void)
{
    FILE *f = fopen("/proc/vmstat", "re");
    char key[64];
    long long v, n = -1;
    if (!f)
        return -1;
    while (fscanf(f, "%63s %lld", key, &v) == 2)
        if (strcmp(key, "oom_kill") == 0) {
            n = v;
            break;
        }
    (void)fclose(f);
    return n;
}

/* oom_before: launch_oom_kills() when the workers started. A worker the
 * launcher did not kill that died of SIGKILL was killed from outside, most
 * often by the kernel's OOM killer (a cgroup's memory.max, a container's
 * --memory, the machine's memory), which leaves no message of its own: the
 * user saw only "killed by signal 9". When the kernel's count of OOM kills
 * rose meanwhile it says so; else it names both usual senders. */
static void launch_describe(const struct launch_child *c, int rank, long long oom_before,
                            char *buf, size_t len)
{
    if (WIFSIGNALED(c->status)) {
        int s = WTERMSIG(c->status);
        const char *name = strsignal(s);
        long long oom_now = s == SIGKILL && oom_before >= 0 ? launch_oom_kills() : -1;
        const char *hint = s != SIGKILL ? ""
            : oom_now > oom_before ? ": out of memory: the kernel's OOM killer killed it "
                                     "(its count of OOM kills rose during the run; dmesg "
                                     "names the limit: a cgroup's memory.max, a container's "
                                     "--memory, or the machine's); lower batch_size or the "
                                     "devices, or raise the limit"
            : ": SIGKILL from outside the job: the kernel's OOM killer (out of memory? see "
              "dmesg) or a kill -9";
        (void)snprintf(buf, len, "rank %d (%s) killed by signal %d (%s)%s", rank, c->label, s,
                       name ? name : "unknown", hint);
    } else if (WIFEXITED(c->status)) {
        int s = WEXITSTATUS(c->status);
        const char *name = launch_exit_name(s);
        (void)snprintf(buf, len, "rank %d (%s) exited with status %d%s%s%s", rank, c->label, s,
                       name ? " (" : "", name ? name : "", name ? ")" : "");
    } else {
        (void)snprintf(buf, len, "rank %d (%s) stopped with wait status 0x%x", rank, c->label,
                       (unsigned)c->status);
    }
}

/* A stopped worker (SIGSTOP, a debugger's ^Z) would leave SIGTERM / SIGINT
 * pending until the SIGKILL a grace period later: SIGCONT after them, so it
 * acts on them now. */
static void launch_signal_alive(struct launch_child *ch, int n, int sig)
{
    for (int i = 0; i < n; i++) {
        if (!ch[i].alive || ch[i].pid <= 0)
            continue;
        (void)kill(ch[i].pid, sig);   /* ESRCH: it just died; reaped below */
        if (sig != SIGKILL)
            (void)kill(ch[i].pid, SIGCONT);
    }
}

static int launch_install(struct sigaction *old, struct ddpc_err *e)
{
    int fds[2];
    SYS_CHECK(e, pipe2(fds, O_CLOEXEC | O_NONBLOCK));
    launch_sig.pipe_rd = fds[0];
    launch_sig.pipe_wr = fds[1];
    launch_release_signals();   /* a caller that launches again after an interrupt */
    launch_sig.stop_sig = 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = launch_on_signal;
    sa.sa_flags = SA_NOCLDSTOP;   /* no SA_RESTART: poll returns EINTR at once */
    SYS_CHECK(e, sigemptyset(&sa.sa_mask));
    for (int i = 0; i < N_LAUNCH_SIGNALS; i++)
        SYS_CHECK(e, sigaction(launch_signals[i], &sa, &old[i]));
    return 0;
}

/* After a stop signal the job is ending, but its caller still has work to
 * do: remove a checkpoint temp file a killed worker left, stop the store,
 * say why it stopped and return 128 + the signal. Slurm sends SIGTERM more
 * than once (slurmstepd to every process of the step at the time limit,
 * then srun as it ends the step), and a second one under the restored
 * default disposition killed the launcher in the middle of that: no
 * message, death by signal instead of 143. So the stop signals stay
 * ignored until launch_release_signals. */
static struct {
    int held;
    struct sigaction old[N_LAUNCH_SIGNALS];
} launch_held;

void launch_release_signals(void)
{
    if (!launch_held.held)
        return;
    for (int i = 0; i < N_LAUNCH_SIGNALS; i++)
        if (launch_signals[i] != SIGCHLD)
            (void)sigaction(launch_signals[i], &launch_held.old[i], NULL);
    launch_held.held = 0;
}

static void launch_uninstall(const struct sigaction *old)
{
    struct sigaction ign;
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    (void)sigemptyset(&ign.sa_mask);
    for (int i = 0; i < N_LAUNCH_SIGNALS; i++) {
        if (launch_sig.stop_sig && launch_signals[i] != SIGCHLD) {
            launch_held.old[i] = old[i];
            (void)sigaction(launch_signals[i], &ign, NULL);
        } else {
            (void)sigaction(launch_signals[i], &old[i], NULL);
        }
    }
    if (launch_sig.stop_sig)
        launch_held.held = 1;
    if (launch_sig.pipe_rd >= 0)
        (void)close(launch_sig.pipe_rd);
    if (launch_sig.pipe_wr >= 0)
        (void)close(launch_sig.pipe_wr);
    launch_sig.pipe_rd = launch_sig.pipe_wr = -1;
}

struct launch_state {
    const struct launch_opts *o;
    struct launch_child ch[DDPC_MAX_DEVICES];
    struct comm_shm_region *grad, *sync;
    struct launch_note *notes;        /* [world], shared with the workers; may be NULL */
    int    n_alive;
    int    reaped;
    int    tearing_down;     /* communicators aborted */
    int    termed;           /* SIGTERM (or the user's signal) sent */
    int    killed;           /* SIGKILL sent */
    double term_at, kill_at;
    char   cause[320];       /* the launcher's own reason for a teardown, or "" */
    long long oom_kills;     /* launch_oom_kills() before the fork; -1: unknown */
    int    out_fifo;         /* standard output is a pipe: watched for its reader leaving */
    int    out_gone;         /* ... and it left (or a worker died of SIGPIPE) */
};

/* Aborts the communicators at once; SIGTERMs the workers after term_delay
 * seconds and SIGKILLs them grace_s later. The delay is for a failure that
 * is only an echo (a rank that exited "aborted by another rank"): the rank
 * that caused it is then usually still printing its own error, and killing
 * it would hide the real cause. */
static void launch_teardown(struct launch_state *s, const char *why, double term_delay)
{
    if (s->tearing_down)
        return;
    s->tearing_down = 1;
    comm_shm_abort_all(s->grad, why);
    comm_shm_abort_all(s->sync, why);
    s->term_at = ddpc_now() + term_delay;
    s->kill_at = s->term_at + (s->o->grace_s > 0 ? s->o->grace_s : 1.0);
    if (term_delay <= 0) {
        launch_signal_alive(s->ch, s->o->world, SIGTERM);
        s->termed = 1;
    }
}

/* Standard output's reader went away (`./job | head`): the job stops as a
 * Unix tool does at its next write, quietly. The workers are SIGTERMed
 * before the communicators are aborted, so that no rank wakes up in a
 * collective to print an error about a peer; a checkpoint being written
 * stays a temp file, which ddprt removes after the attempt. */
static void launch_out_gone(struct launch_state *s)
{
    s->out_gone = 1;
    if (s->tearing_down)
        return;
    launch_signal_alive(s->ch, s->o->world, SIGTERM);
    s->termed = 1;
    launch_teardown(s, "standard output closed", 0);
}

/* Reaps every worker that has exited; starts the teardown on a failure. */
static int launch_reap(struct launch_state *s, struct ddpc_err *e)
{
    for (int i = 0; i < s->o->world; i++) {
        struct launch_child *c = &s->ch[i];
        if (!c->alive)
            continue;
        int st;
        pid_t p = waitpid(c->pid, &st, WNOHANG);
        if (p == 0)
            continue;
        if (p == -1) {
            if (errno == EINTR) {
                i--;
                continue;
            }
            /* ECHILD: someone else reaped it (cannot happen unless the
             * embedding program reaps with -1); treat it as gone. */
            c->alive = 0;
            c->status = 0;
            s->n_alive--;
            return DDPC_FAIL(e, DDPC_E_SYS, "waitpid(rank %d, pid %d): %s",
                             s->o->rank_offset + i, (int)c->pid, strerror(errno));
        }
        c->alive = 0;
        c->status = st;
        c->reaped_order = ++s->reaped;
        s->n_alive--;
        int ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
        if (ok)
            continue;
        int code = WIFEXITED(st) ? WEXITSTATUS(st) : 0;
        /* Secondary: it failed because another rank did (abort / dead
         * peer), or it is one of ours killed by the teardown. A worker that
         * exits with its own error during the teardown may still be the
         * cause: another rank's abort can simply have been reaped first. */
        int sig = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
        if (sig == SIGPIPE && !s->tearing_down) {
            /* it wrote to standard output after the reader left */
            c->secondary = 1;
            launch_out_gone(s);
            continue;
        }
        c->secondary = code == launch_exit_code(DDPC_E_ABORTED) ||
                       code == launch_exit_code(DDPC_E_PEER) ||
                       (s->tearing_down && sig != 0 &&
                        (sig == SIGTERM || sig == SIGKILL || sig == launch_sig.stop_sig));
        if (!s->tearing_down) {
            char why[384];
            launch_describe(c, s->o->rank_offset + i, s->oom_kills, why, sizeof why);
            /* Peers blocked on this rank see DDPC_E_PEER with the cause
             * (unless the worker already recorded its own reason). */
            comm_shm_mark_dead(s->grad, i, why);
            comm_shm_mark_dead(s->sync, i, why);
            launch_teardown(s, why, c->secondary ? LAUNCH_ECHO_DELAY_S : 0);
        }
    }
    return 0;
}

/* The state letter of /proc/<pid>/stat ('R', 'S', 'T' stopped, 't' traced
 * stop), or 0 when it cannot be read. */
static char launch_proc_state(pid_t pid)
{
    char path[64], buf[512];
    (void)snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    (void)close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');   /* the name may hold spaces and ')' */
    return p && p[1] == ' ' ? p[2] : 0;
}

/* A stopped worker holds up every other rank, and only the collective it
 * happens to block decides how long: the gradient all-reduce waits out
 * nccl_timeout (30 minutes by default) even when the user asked for a
 * rank_sync_timeout of one second. The launcher sees the stop itself and
 * ends the job once it outlasts the limit plus a margin (the limit, at most
 * 5 s), so that a collective's own timeout, which names the step, reports
 * first when it applies, even on a loaded machine. */
static void launch_watch_stopped(struct launch_state *s)
{
    const struct launch_opts *o = s->o;
    if (!(o->stopped_limit_s > 0) || s->tearing_down)
        return;
    double now = ddpc_now();
    double limit = o->stopped_limit_s + (o->stopped_limit_s < 5 ? o->stopped_limit_s : 5);
    for (int i = 0; i < o->world; i++) {
        struct launch_child *c = &s->ch[i];
        if (!c->alive)
            continue;
        char st = launch_proc_state(c->pid);
        if (st != 'T' && st != 't') {
            c->stopped_since = 0;
            continue;
        }
        if (c->stopped_since == 0) {
            c->stopped_since = now;
            continue;
        }
        if (now - c->stopped_since < limit)
            continue;
        const char *key = o->stopped_key ? o->stopped_key : "the timeout";
        (void)snprintf(s->cause, sizeof s->cause,
                       "rank %d (%s) has been stopped (SIGSTOP, or a debugger) for %.1f s, "
                       "longer than %s (%g s): the other ranks cannot go on without it. "
                       "Send SIGCONT sooner, or raise %s", o->rank_offset + i, c->label,
                       now - c->stopped_since, key, o->stopped_limit_s, key);
        launch_teardown(s, s->cause, 0);
        return;
    }
}

/* The rank that caused the failure: the first that failed on its own, else
 * the first to notice a failure (launch_note), else the first reaped. */
static int launch_primary(const struct launch_state *s)
{
    int best = -1, best_sec = -1;
    for (int i = 0; i < s->o->world; i++) {
        const struct launch_child *c = &s->ch[i];
        if (c->reaped_order == 0 || (WIFEXITED(c->status) && WEXITSTATUS(c->status) == 0))
            continue;
        if (!c->secondary && (best < 0 || c->reaped_order < s->ch[best].reaped_order))
            best = i;
        double t = s->notes ? s->notes[i].t : 0;
        double tb = best_sec >= 0 && s->notes ? s->notes[best_sec].t : 0;
        int earlier = best_sec < 0 ||
                      (t > 0 && (tb == 0 || t < tb)) ||
                      (t == tb && c->reaped_order < s->ch[best_sec].reaped_order);
        if (earlier)
            best_sec = i;
    }
    return best >= 0 ? best : best_sec;
}

static int launch_supervise(struct launch_state *s, struct ddpc_err *e)
{
    int sys_rc = 0;
    while (s->n_alive > 0) {
        if (launch_reap(s, e) < 0)
            sys_rc = -1;
        if (s->n_alive == 0)
            break;
        if (launch_sig.stop_sig && !s->termed) {
            int sig = launch_sig.stop_sig;
            char why[64];
            (void)snprintf(why, sizeof why, "job interrupted by %s",
                           launch_sig_name(sig));
            comm_shm_abort_all(s->grad, why);
            comm_shm_abort_all(s->sync, why);
            /* Forward the signal itself: a worker may handle SIGINT (flush
             * a checkpoint) differently from SIGTERM. */
            launch_signal_alive(s->ch, s->o->world, sig);
            s->tearing_down = s->termed = 1;
            s->kill_at = ddpc_now() + (s->o->grace_s > 0 ? s->o->grace_s : 1.0);
        }
        launch_watch_stopped(s);
        int timeout_ms = 1000;   /* SIGCHLD wakes us; this is only a backstop */
        if (s->o->stopped_limit_s > 0 && !s->tearing_down) {
            /* a stop sends no SIGCHLD (SA_NOCLDSTOP): look 5 times per limit */
            double look = s->o->stopped_limit_s * 200;
            if (look < timeout_ms)
                timeout_ms = look < 10 ? 10 : (int)look;
        }
        if (s->tearing_down) {
            double now = ddpc_now();
            if (!s->termed && now >= s->term_at) {
                launch_signal_alive(s->ch, s->o->world, SIGTERM);
                s->termed = 1;
            }
            if (!s->killed && now >= s->kill_at) {
                launch_signal_alive(s->ch, s->o->world, SIGKILL);
                s->killed = 1;
            }
            double next = !s->termed ? s->term_at : s->kill_at;
            timeout_ms = next > now ? (int)((next - now) * 1000) + 1 : 50;
            if (timeout_ms > 100)
                timeout_ms = 100;
        }
        /* a pipe's write end reports POLLERR once its reader is gone:
         * rank 0 may not write again for minutes, or (gloo ignores
         * SIGPIPE) would only see EPIPE and train on */
        struct pollfd pfd[2] = { { launch_sig.pipe_rd, POLLIN, 0 },
                                 { STDOUT_FILENO, 0, 0 } };
        int watch_out = s->out_fifo && !s->out_gone;
        int pr = poll(pfd, watch_out ? 2 : 1, timeout_ms);
        if (pr > 0 && watch_out && (pfd[1].revents & (POLLERR | POLLHUP | POLLNVAL)))
            launch_out_gone(s);
        if (pr == -1 && errno != EINTR) {
            (void)DDPC_FAIL(e, DDPC_E_SYS, "poll on the launcher's signal pipe: %s",
                            strerror(errno));
            sys_rc = -1;
            launch_teardown(s, "launcher failure", 0);
        }
        char drain[64];
        while (read(launch_sig.pipe_rd, drain, sizeof drain) > 0)
            ;
    }
    return sys_rc;
}

/* Long on purpose (~130 lines): the fork sequence reads as one piece:
 * signals blocked across fork and the handlers installed, both undone on
 * every exit path (out:), so no step moves apart from its undo. */
int launch_run(const struct launch_opts *o, launch_worker_fn fn, void *user,
               struct ddpc_err *e)
{
    if (o->world < 1 || o->world > DDPC_MAX_DEVICES) {
        (void)DDPC_FAIL(e, DDPC_E_INVALID, "launch: %d workers; this host supports 1..%d",
                        o->world, DDPC_MAX_DEVICES);
        return LAUNCH_STATUS_FAILED;
    }
    struct launch_state *s = calloc(1, sizeof *s);
    if (!s) {
        (void)DDPC_FAIL(e, DDPC_E_NOMEM, "launch: out of memory");
        return LAUNCH_STATUS_FAILED;
    }
    s->o = o;
    int status = LAUNCH_STATUS_FAILED;
    struct sigaction old[N_LAUNCH_SIGNALS];
    int installed = 0, masked = 0;
    sigset_t block, orig;

    {
        void *m = mmap(NULL, (size_t)o->world * sizeof *s->notes, PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        s->notes = m == MAP_FAILED ? NULL : m;   /* without it, messages are only shorter */
    }
    if (o->use_shm) {
        if (comm_shm_create(&s->grad, o->world, o->grad_slot_floats, e) < 0 ||
            comm_shm_create(&s->sync, o->world, o->sync_slot_floats, e) < 0)
            goto out;
    }
    if (launch_install(old, e) < 0)
        goto out;
    installed = 1;
    /* Block our signals across fork so a child never runs the launcher's
     * handler before it resets them. */
    if (sigemptyset(&block) == -1 || sigaddset(&block, SIGINT) == -1 ||
        sigaddset(&block, SIGTERM) == -1 || sigaddset(&block, SIGHUP) == -1 ||
        sigaddset(&block, SIGUSR1) == -1 || sigaddset(&block, SIGUSR2) == -1 ||
        sigaddset(&block, SIGCHLD) == -1 ||
        sigprocmask(SIG_BLOCK, &block, &orig) == -1) {
        (void)DDPC_FAIL(e, DDPC_E_SYS, "launch: sigprocmask: %s", strerror(errno));
        goto out;
    }
    masked = 1;
    struct stat ost;
    s->out_fifo = fstat(STDOUT_FILENO, &ost) == 0 && S_ISFIFO(ost.st_mode);
    /* Buffered output would otherwise be written once per process. */
    (void)fflush(stdout);
    (void)fflush(stderr);

    pid_t self = getpid();
    s->oom_kills = launch_oom_kills();
    for (int i = 0; i < o->world; i++) {
        struct launch_child *c = &s->ch[i];
        (void)snprintf(c->label, sizeof c->label, "%s%s%d",
                       o->device_kind ? o->device_kind : "cpu worker",
                       o->device_kind && o->device_kind[0] &&
                       o->device_kind[strlen(o->device_kind) - 1] == ':' ? "" : " ",
                       o->devices[i]);
        pid_t pid = fork();
        if (pid == -1) {
            (void)DDPC_FAIL(e, DDPC_E_SYS, "launch: fork for rank %d: %s (%d workers "
                            "already started are stopped)", o->rank_offset + i,
                            strerror(errno), i);
            launch_teardown(s, "launcher could not fork every worker", 0);
            break;
        }
        if (pid == 0) {
            struct launch_worker w = {
                .rank = o->rank_offset + i,
                .world = o->global_world > 0 ? o->global_world : o->world,
                .device = o->devices[i],
                .label = c->label,
                .grad_region = s->grad,
                .sync_region = s->sync,
                .user = user,
            };
            launch_child_main(o, fn, &w, self, &orig, s->notes ? &s->notes[i] : NULL);
        }
        c->pid = pid;
        c->alive = 1;
        s->n_alive++;
    }
    int fork_failed = e && e->code != DDPC_OK;
    if (sigprocmask(SIG_SETMASK, &orig, NULL) == -1) {
        (void)DDPC_FAIL(e, DDPC_E_SYS, "launch: sigprocmask: %s", strerror(errno));
        launch_teardown(s, "launcher failure", 0);
    }
    masked = 0;

    int sup = launch_supervise(s, e);
    if (launch_sig.stop_sig) {
        int sig = launch_sig.stop_sig;
        (void)DDPC_FAIL(e, DDPC_E_ABORTED, "interrupted by %s; stopped %d worker%s",
                        launch_sig_name(sig), o->world,
                        o->world == 1 ? "" : "s");
        status = 128 + sig;
        goto out;
    }
    if (s->out_gone) {
        /* the caller says nothing of it: the reader asked for no more */
        (void)DDPC_FAIL(e, DDPC_E_ABORTED, "standard output was closed by its reader; stopped "
                        "%d worker%s", o->world, o->world == 1 ? "" : "s");
        status = 128 + SIGPIPE;
        goto out;
    }
    int p = launch_primary(s);
    if (s->cause[0]) {
        /* the launcher ended the job; the workers died of its teardown */
        (void)DDPC_FAIL(e, DDPC_E_TIMEOUT, "%s", s->cause);
        status = LAUNCH_STATUS_FAILED;
    } else if (p >= 0) {
        char why[384];
        launch_describe(&s->ch[p], o->rank_offset + p, s->oom_kills, why, sizeof why);
        /* on several nodes the cause may be another node: say what this
         * rank saw (its own line names it too, among the others') */
        const char *seen = o->global_world > o->world && s->notes && s->notes[p].t > 0
                         ? s->notes[p].msg : NULL;
        /* The worker's own code when it exited with one (so the caller can
         * tell a data error, which would recur, from a crash); else PEER. */
        int ws = s->ch[p].status;
        int code = WIFEXITED(ws) && launch_exit_name(WEXITSTATUS(ws))
                 ? 10 - WEXITSTATUS(ws) : DDPC_E_PEER;
        /* e holds 511 bytes, a note as many: a cut says so (the rank's
         * own line above has its message whole) */
        static const char cut[] = " [... cut: the rank's error line has it whole]";
        int room = (int)(sizeof e->msg - 1 - strlen(why) - 2);
        int fits = !seen || (int)strlen(seen) <= room;
        if (!fits)
            room -= (int)sizeof cut - 1;
        (void)DDPC_FAIL(e, code, "%s%s%.*s%s", why, seen ? ": " : "", room > 0 ? room : 0,
                        seen ? seen : "", fits ? "" : cut);
        status = LAUNCH_STATUS_FAILED;
    } else if (fork_failed || sup < 0) {
        status = LAUNCH_STATUS_FAILED;
    } else {
        status = 0;
    }
out:
    if (masked)
        (void)sigprocmask(SIG_SETMASK, &orig, NULL);
    if (installed)
        launch_uninstall(old);
    comm_shm_region_free(s->grad);
    comm_shm_region_free(s->sync);
    if (s->notes)
        (void)munmap(s->notes, (size_t)o->world * sizeof *s->notes);
    free(s);
    return status;
}
