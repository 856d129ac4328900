/* interrupt.h - an interrupted `ddpc build` leaves nothing behind.
 *
 * defines: intr_install, intr_hold, intr_release, intr_track, intr_untrack, intr_track_dir,
 *          intr_track_wipe, intr_spawnp, intr_spawnpe, intr_wait
 *
 * `ddpc build` writes temp files (OUT.tmp.PID, the generated files'
 * .tmp.PID, a mkdtemp directory) and runs m4 and the C compiler. SIGINT,
 * SIGTERM or SIGHUP in the middle must not leave any of it: the handler
 * stops the running child and its process group (SIGTERM, so the compiler
 * driver deletes its own temp files; SIGKILL after 2 s) and reaps it,
 * unlinks every tracked file, removes
 * the tracked directory, then dies of the same signal (so the shell sees
 * 130/143). Finished outputs are renamed into place atomically, so they are
 * either the old or the new file, never half of one.
 *
 * Paths are copied into fixed static slots while the signals are blocked,
 * so the handler only calls async-signal-safe functions on whole strings.
 * Children are spawned through intr_spawnp and waited for with intr_wait,
 * which keep "the child to kill" exact: recorded before any signal can be
 * handled, cleared only after the child is reaped.
 */
#ifndef DDPC_INTERRUPT_H
#define DDPC_INTERRUPT_H

#include <signal.h>
#include <spawn.h>
#include <sys/types.h>

/* Installs the handlers (idempotent). */
void intr_install(void);

/* Holds INT/TERM/HUP back (intr_release delivers them): for creating a
 * temp file or directory and tracking it as one step. */
void intr_hold(sigset_t *old);
void intr_release(const sigset_t *old);

/* Tracks path for removal on a signal; returns a slot for intr_untrack, or
 * -1 when there is no room (the path is then simply not cleaned up). */
int  intr_track(const char *path);
/* Stops tracking (the file was renamed into place or removed). -1: no-op. */
void intr_untrack(int slot);

/* Tracks a temporary directory: on a signal, dir/name for each of the n
 * names is unlinked, then dir is removed. NULL stops tracking it. */
void intr_track_dir(const char *dir, const char *const *names, int n);

/* Tracks a directory to empty (its plain files) and remove on a signal:
 * the C compiler's private TMPDIR. NULL stops tracking it. */
void intr_track_wipe(const char *dir);

/* posix_spawnp with INT/TERM/HUP blocked until the child is recorded; the
 * child starts with an empty signal mask in its own process group (a
 * terminal's Ctrl-C reaches it through ddpc's handler). Returns
 * posix_spawnp's result. */
int  intr_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
                 char *const argv[]);

/* The same with an environment of the caller's. */
int  intr_spawnpe(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
                  char *const argv[], char *const envp[]);

/* Empties and removes dir now, and stops tracking it (intr_track_wipe). */
void intr_wipe_now(const char *dir);

/* Waits for the child intr_spawnp started (EINTR retried) and reaps it;
 * returns waitpid's result with *status filled. */
pid_t intr_wait(pid_t pid, int *status);

#endif /* DDPC_INTERRUPT_H */
