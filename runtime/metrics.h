/* metrics.h - rank 0's observability: progress line, metrics CSV, TensorBoard.
 *
 * defines: metrics_open, metrics_open_as, metrics_step, metrics_eval, metrics_clear_progress,
 *          metrics_close, metrics_format_eta, metrics_crc32c_masked
 *
 * Only rank 0 calls any of this: the files are written by one process, so
 * there is no rank in the file names (the locks are against other jobs). The caller guarantees it
 * (worker.c calls metrics_* only when rank == 0); nothing here checks.
 *
 * Lifecycle: metrics_open, then metrics_step after every optimizer step and
 * metrics_eval after every evaluation, then metrics_close. metrics_close is
 * safe after a failed (or no) metrics_open on a zeroed struct and after
 * another metrics_close. Every function returns 0 or a negative
 * enum ddpc_err_code and fills e; none prints errors or exits.
 *
 * Outputs, each only when the job asks for it:
 *   logging.metrics_csv  a CSV file (parent directories are created), columns
 *                        step,epoch,lr,loss,samples_per_s,eval_loss,eval_accuracy
 *                        (a gpt: tokens_per_s, its eval_accuracy cells empty)
 *                        with a header line first and empty cells where a
 *                        column does not apply (train rows have no eval_*).
 *   logging.tensorboard  a directory (created) holding one new event file
 *                        events.out.tfevents.<unix-time>.<hostname>.<pid>.ddpc
 *                        with scalars train/loss, train/lr, train/samples_per_s,
 *                        eval/loss, eval/accuracy (a gpt: train/tokens_per_s, no
 *                        eval/accuracy); readable by TensorBoard.
 *   logging.progress     on `out`: on a terminal (is_tty) one line rewritten in
 *                        place; elsewhere (CI, SLURM output, a pipe) a plain
 *                        line every logging.every_n_steps steps and at the last
 *                        step, with no escape codes. auto and on behave alike;
 *                        off writes nothing at all to `out` (the caller prints
 *                        its per-epoch lines either way).
 * CSV rows and TensorBoard scalars are written at steps that are multiples of
 * logging.every_n_steps; each row/record is flushed, so a killed job loses at
 * most the record being written. Evaluations are always written.
 */
#ifndef DDPC_METRICS_H
#define DDPC_METRICS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "job.h"
#include "err.h"

#define DDPC_METRICS_REDRAW_S 0.1   /* progress line: at most ~10 redraws per second */

/* struct ddpc_metrics.progress */
enum { DDPC_METRICS_QUIET, DDPC_METRICS_REDRAW, DDPC_METRICS_LINES };

struct ddpc_out_id;

struct ddpc_metrics {
    const struct ddpc_job *job;     /* not owned; outlives the metrics */
    const struct ddpc_out_id *id;   /* the run's identity (outver.h); NULL: none. Not owned */
    char     csv_path[4096];        /* the CSV written: metrics_csv or a version of it */
    char     tb_dir[4096];          /* the directory written: tensorboard or a version */
    FILE    *out;                   /* progress stream (stdout); not owned, never closed */
    FILE    *csv;                   /* owned; NULL: no CSV */
    FILE    *tb;                    /* owned; NULL: no TensorBoard */
    char     tb_path[4096];         /* the event file, for messages and tests */
    int      tb_lock;               /* fd + 1 of the directory's locked .ddpc.lock; 0: none */
    int      progress;              /* DDPC_METRICS_QUIET, _REDRAW (terminal), _LINES (logs) */
    int      line_shown;            /* a progress line is on screen and needs clearing */
    int      every_n_steps;         /* >= 1 */
    int64_t  total_steps;           /* optimizer steps in the whole run; 0: unknown */
    double   min_redraw_s;          /* throttle; tests set 0 to see every redraw */
    double   last_draw_s;           /* CLOCK_MONOTONIC of the last redraw; < 0: never */
};

/* Opens what job->logging asks for. m is overwritten (no need to zero it).
 *   total_steps: optimizer steps of the whole run (the plan knows), for
 *                "step s/total" in the progress line; 0 if unknown.
 *   resume_step: the checkpoint's step when the run continues from one, else
 *                -1. Resumed, an existing CSV with our header keeps its
 *                complete rows up to that step and is appended to (later
 *                rows, from the attempt that crashed, are dropped; anything
 *                else is started afresh), and the new TensorBoard event file
 *                begins with a SessionLog START at resume_step + 1, so
 *                TensorBoard drops the crashed attempt's later points.
 *   metrics_csv is locked (flock) and TensorBoard's directory holds a locked
 *   .ddpc.lock while open: a second job writing either at the same time is
 *   refused. metrics_csv as a symbolic link to a regular file is refused.
 *   out:         where the progress line goes (stdout); may be NULL when
 *                progress is off.
 *   is_tty:      isatty(fileno(out)), decided by the caller.
 * On failure everything opened so far is closed again; metrics_close is still
 * safe to call. */
int metrics_open(struct ddpc_metrics *m, const struct ddpc_job *job, int64_t total_steps,
                 int64_t resume_step, FILE *out, int is_tty, struct ddpc_err *e);

/* metrics_open for a run with an identity (outver.h): the CSV opens with
 * a line "# ddpc job=NAME identity=HASH" before its header, the
 * TensorBoard directory's lock file names it, and a path holding another
 * configuration's output is left alone for the next version of it
 * (metrics-v1.csv, <tensorboard>/version_1), or refused (id->refuse):
 * m->csv_path and m->tb_dir say what was opened; the caller says so
 * (outver_note). id is not copied and must outlive m. */
int metrics_open_as(struct ddpc_metrics *m, const struct ddpc_job *job,
                    const struct ddpc_out_id *id, int64_t total_steps, int64_t resume_step,
                    FILE *out, int is_tty, struct ddpc_err *e);

/* After optimizer step `step` (1-based count of steps taken) of epoch `epoch`
 * (1-based). lr is the rate just used, loss the (rank-reduced) training loss,
 * eta_s the estimated seconds left (< 0: unknown). Writes a CSV row and
 * TensorBoard scalars when step % every_n_steps == 0; redraws the progress
 * line at most every min_redraw_s seconds (always on the first and the last
 * step), so calling it every step costs a clock read. */
int metrics_step(struct ddpc_metrics *m, int64_t step, int epoch, double lr, double loss,
                 double samples_per_s, double eta_s, struct ddpc_err *e);

/* Whether metrics_step at `step` will use its loss (a CSV/TensorBoard row,
 * a progress line or redraw): the worker reads a device-side loss only
 * then, so other steps never wait for the GPU. A redraw decided here may
 * come a clock tick later in metrics_step (it then shows the last loss). */
int metrics_wants_loss(const struct ddpc_metrics *m, int64_t step);

/* After an evaluation at step `step`. eval_accuracy is a fraction in [0, 1],
 * or < 0 when there is none (regression): its CSV cell stays empty and no
 * eval/accuracy scalar is written. Clears the progress line first, so the
 * caller's epoch line prints on a clean line. */
int metrics_eval(struct ddpc_metrics *m, int64_t step, int epoch, double eval_loss,
                 double eval_accuracy, struct ddpc_err *e);

/* Erases the progress line ("\r" + clear to end of line) if one is shown.
 * Call before printing anything else to out. */
int metrics_clear_progress(struct ddpc_metrics *m, struct ddpc_err *e);

/* Clears the progress line, then flushes, fsyncs and closes the files. All
 * are closed even if one fails; the first failure is returned. */
int metrics_close(struct ddpc_metrics *m, struct ddpc_err *e);

/* eta_s as h:mm:ss ("0:01:05", "27:46:40"); "-:--:--" when negative, NaN or
 * absurd (> 100000 h). Rounds to the nearest second. Writes at most n bytes
 * (NUL included); 16 is always enough. Returns buf. */
char *metrics_format_eta(double eta_s, char *buf, size_t n);

/* TFRecord's masked CRC-32C (crc32c.h): ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
uint32_t metrics_crc32c_masked(const void *data, size_t n);

#endif /* DDPC_METRICS_H */
