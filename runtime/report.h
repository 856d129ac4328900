/* report.h - the run report: one self-contained HTML page beside the
 * metrics CSV (metrics.csv -> metrics.html), written at the end of a run
 * and by `./job --report`.
 *
 * defines: struct report_input, report_write, report_path
 *
 * Inline SVG, no script, no style sheet or font from anywhere else: the
 * file opens offline, in a mail, in CI's artifacts. Drawn from what is
 * there, read generically by the CSV's header line (a line starting with
 * '#' is a comment: the identity line, outver.h):
 *   losses       every column whose name holds "loss" (train loss, eval_loss,
 *                val_loss, ...), over the step
 *   metrics      columns holding "acc", "perplexity", "mae", "mse", "top"
 *   learning rate  lr, with the plan's schedule points over it
 *   throughput   columns ending in _per_s
 *   other        each remaining numeric column (step and epoch aside)
 *   best epoch   the lowest val_loss (else eval_loss) and its epoch, marked
 *                on the loss chart (report.c report_best: where
 *                checkpoint.monitor and its mode will decide, once the job
 *                has them)
 *   confusion    a confusion-matrix CSV beside the metrics, when there is
 *                one (report.c report_confusion names where it looks)
 *   the plan     its predictions against what was measured: optimizer
 *                steps in all and per epoch, the learning rate at its
 *                schedule's points, and (report.c report_plan_time, the
 *                hook for issue 27's time plan) the times it predicts.
 */
#ifndef DDPC_REPORT_H
#define DDPC_REPORT_H

#include <stddef.h>
#include "err.h"
#include "job.h"

struct report_input {
    const struct ddpc_job *job;
    const char *csv;            /* the metrics CSV to draw */
    const char *plan_json;      /* job.plan.json as baked; may be NULL */
    const char *spec_path;      /* for the heading; may be NULL */
    const char *ddpc_version;   /* may be NULL */
};

/* The report's path for a metrics CSV: its name with the extension
 * replaced by .html (metrics-v1.csv -> metrics-v1.html), or .html added.
 * -1 when it does not fit. */
int report_path(const char *csv, char *out, size_t cap);

/* Reads in->csv and writes report_path(in->csv) atomically (ckpt.h's
 * writer: temp, fsync, rename). html (may be NULL) receives its path.
 * Errors name the file; a CSV without a header or rows is one. */
int report_write(const struct report_input *in, char *html, size_t cap, struct ddpc_err *e);

#endif /* DDPC_REPORT_H */
