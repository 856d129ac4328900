/* report.c - the run report (report.h): the metrics CSV drawn as inline
 * SVG in one HTML file.
 *
 * Owns: reading a metrics CSV by its header, the charts, and the page.
 * Writes only the report (through ckpt.h's atomic writer); never reads
 * anything but the CSV, a confusion matrix beside it and the baked plan;
 * no script, no external reference in the page. Never exits.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "ckpt.h"
#include "report.h"

#define REPORT_MAX_COLS   64
#define REPORT_MAX_POINTS 2000     /* per polyline: a longer series is thinned */
#define REPORT_MAX_OTHER  12       /* charts of unclassified columns */

/* ===== the CSV ===== */

struct column {
    char    name[64];
    int64_t n, cap;
    double *x, *y;          /* step, value of each row with a number here */
    double *epoch;          /* that row's epoch (NAN without an epoch column) */
};

struct table {
    int    ncol;
    struct column col[REPORT_MAX_COLS];
    int    step_col, epoch_col;
    int64_t rows;
    char   job[80], identity[80];   /* from the "# ddpc job=... identity=..." line */
};

static void table_free(struct table *t)
{
    for (int i = 0; i < t->ncol; i++) {
        free(t->col[i].x);
        free(t->col[i].y);
        free(t->col[i].epoch);
    }
}

static int col_push(struct column *c, double x, double y, double ep)
{
    if (c->n == c->cap) {
        int64_t nc = c->cap ? 2 * c->cap : 256;
        double *nx = realloc(c->x, (size_t)nc * sizeof *nx);
        if (nx)
            c->x = nx;
        double *ny = realloc(c->y, (size_t)nc * sizeof *ny);
        if (ny)
            c->y = ny;
        double *ne = realloc(c->epoch, (size_t)nc * sizeof *ne);
        if (ne)
            c->epoch = ne;
        if (!nx || !ny || !ne)
            return -1;
        c->cap = nc;
    }
    c->x[c->n] = x;
    c->y[c->n] = y;
    c->epoch[c->n] = ep;
    c->n++;
    return 0;
}

/* A cell as a finite number: 1, or 0 (empty, text, nan). */
static int cell_number(const char *s, size_t len, double *v)
{
    char buf[64];
    while (len && isspace((unsigned char)*s)) {
        s++;
        len--;
    }
    if (!len || len >= sizeof buf)
        return 0;
    memcpy(buf, s, len);
    buf[len] = '\0';
    char *end;
    errno = 0;
    *v = strtod(buf, &end);
    while (isspace((unsigned char)*end))
        end++;
    return end != buf && !*end && errno == 0 && isfinite(*v);
}

static void line_value(const char *line, const char *key, char *out, size_t cap)
{
    const char *p = strstr(line, key);
    out[0] = '\0';
    if (p) {
        p += strlen(key);
        size_t n = strcspn(p, " \r\n");
        (void)snprintf(out, cap, "%.*s", (int)(n < cap ? n : cap - 1), p);
    }
}

static int table_read(struct table *t, const char *path, struct ddpc_err *e)
{
    memset(t, 0, sizeof *t);
    t->step_col = t->epoch_col = -1;
    FILE *f = fopen(path, "re");
    if (!f)
        return DDPC_FAIL(e, DDPC_E_DATA, "report: metrics CSV %s: %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int header = 0, rc = 0;
    while ((len = getline(&line, &cap, f)) > 0) {
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        if (line[0] == '#') {
            if (strstr(line, "identity=")) {
                line_value(line, "job=", t->job, sizeof t->job);
                line_value(line, "identity=", t->identity, sizeof t->identity);
            }
            continue;
        }
        if (!len)
            continue;
        if (!header) {
            header = 1;
            for (char *p = line; p && t->ncol < REPORT_MAX_COLS;) {
                char *c = strchr(p, ',');
                size_t n = c ? (size_t)(c - p) : strlen(p);
                struct column *col = &t->col[t->ncol];
                (void)snprintf(col->name, sizeof col->name, "%.*s",
                               (int)(n < sizeof col->name ? n : sizeof col->name - 1), p);
                if (strcmp(col->name, "step") == 0)
                    t->step_col = t->ncol;
                else if (strcmp(col->name, "epoch") == 0)
                    t->epoch_col = t->ncol;
                t->ncol++;
                p = c ? c + 1 : NULL;
            }
            continue;
        }
        /* a data row: its cells by column */
        const char *cell[REPORT_MAX_COLS];
        size_t cl[REPORT_MAX_COLS];
        int nc = 0;
        for (const char *p = line; p && nc < REPORT_MAX_COLS;) {
            const char *c = strchr(p, ',');
            cell[nc] = p;
            cl[nc] = c ? (size_t)(c - p) : strlen(p);
            nc++;
            p = c ? c + 1 : NULL;
        }
        double step = (double)t->rows, ep = NAN, v;
        if (t->step_col >= 0 && t->step_col < nc &&
            cell_number(cell[t->step_col], cl[t->step_col], &v))
            step = v;
        if (t->epoch_col >= 0 && t->epoch_col < nc &&
            cell_number(cell[t->epoch_col], cl[t->epoch_col], &v))
            ep = v;
        for (int i = 0; i < nc && i < t->ncol; i++)
            if (i != t->step_col && i != t->epoch_col && cell_number(cell[i], cl[i], &v) &&
                col_push(&t->col[i], step, v, ep) < 0) {
                rc = DDPC_FAIL(e, DDPC_E_NOMEM, "report: %s: out of memory", path);
                goto out;
            }
        t->rows++;
    }
    if (ferror(f))
        rc = DDPC_FAIL(e, DDPC_E_DATA, "report: reading %s: %s", path, strerror(errno));
    else if (!header)
        rc = DDPC_FAIL(e, DDPC_E_DATA, "report: %s holds no header line: not a metrics CSV",
                       path);
out:
    free(line);
    (void)fclose(f);   /* read-only */
    return rc;
}

/* ===== HTML and SVG ===== */

static void html_text(FILE *o, const char *s)
{
    for (; s && *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", o); break;
        case '>': fputs("&gt;", o); break;
        case '&': fputs("&amp;", o); break;
        case '"': fputs("&quot;", o); break;
        default: fputc(*s, o);
        }
    }
}

static const char *const palette[] = {
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
};

struct series {
    const char *name;
    const double *x, *y;
    int64_t n;
    int dashed;             /* the plan's, drawn over the measured */
};

struct mark {
    double x, y;
    const char *label;
};

/* Round numbers for an axis from lo to hi: the step (1, 2 or 5 x 10^k). */
static double nice_step(double lo, double hi)
{
    double span = hi - lo, raw = span / 5, p = pow(10, floor(log10(raw))), m = raw / p;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

enum { SVG_W = 720, SVG_H = 300, M_L = 70, M_R = 20, M_T = 34, M_B = 44 };

static void svg_chart(FILE *o, const char *title, const char *ylabel, const struct series *s,
                      int ns, const struct mark *mk)
{
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    for (int i = 0; i < ns; i++)
        for (int64_t k = 0; k < s[i].n; k++) {
            x0 = fmin(x0, s[i].x[k]);
            x1 = fmax(x1, s[i].x[k]);
            y0 = fmin(y0, s[i].y[k]);
            y1 = fmax(y1, s[i].y[k]);
        }
    if (!(x0 <= x1) || !(y0 <= y1))
        return;
    if (x1 == x0) {
        x0 -= 1;
        x1 += 1;
    }
    if (y1 == y0) {
        double d = fabs(y0) > 0 ? fabs(y0) * 0.1 : 1;
        y0 -= d;
        y1 += d;
    }
    double pad = (y1 - y0) * 0.05;
    y0 -= pad;
    y1 += pad;
    const double pw = SVG_W - M_L - M_R, ph = SVG_H - M_T - M_B;
#define PX(v) (M_L + ((v) - x0) / (x1 - x0) * pw)
#define PY(v) (M_T + (1 - ((v) - y0) / (y1 - y0)) * ph)
    fprintf(o, "<figure><svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" role=\"img\"><title>", SVG_W, SVG_H, SVG_W, SVG_H);
    html_text(o, title);
    fprintf(o, "</title><rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#fff\"/>",
            SVG_W, SVG_H);
    fprintf(o, "<text x=\"%d\" y=\"20\" font-size=\"15\" font-weight=\"bold\">", M_L);
    html_text(o, title);
    fputs("</text>", o);
    /* grid and ticks */
    double ys = nice_step(y0, y1), xs = nice_step(x0, x1);
    for (double v = ceil(y0 / ys) * ys; v <= y1 + ys * 1e-9; v += ys) {
        double py = PY(v);
        fprintf(o, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                "<text x=\"%d\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%.4g</text>",
                M_L, py, SVG_W - M_R, py, M_L - 6, py + 4, fabs(v) < ys * 1e-9 ? 0.0 : v);
    }
    for (double v = ceil(x0 / xs) * xs; v <= x1 + xs * 1e-9; v += xs) {
        double px = PX(v);
        fprintf(o, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#eee\"/>"
                "<text x=\"%.1f\" y=\"%d\" font-size=\"11\" text-anchor=\"middle\">%.6g</text>",
                px, M_T, px, SVG_H - M_B, px, SVG_H - M_B + 16, v);
    }
    fprintf(o, "<rect x=\"%d\" y=\"%d\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" "
            "stroke=\"#444\"/>", M_L, M_T, pw, ph);
    fprintf(o, "<text x=\"%.0f\" y=\"%d\" font-size=\"12\" text-anchor=\"middle\">step</text>",
            M_L + pw / 2, SVG_H - 8);
    fprintf(o, "<text x=\"14\" y=\"%.0f\" font-size=\"12\" text-anchor=\"middle\" "
            "transform=\"rotate(-90 14 %.0f)\">", M_T + ph / 2, M_T + ph / 2);
    html_text(o, ylabel);
    fputs("</text>", o);
    for (int i = 0; i < ns; i++) {
        const char *color = palette[i % (int)(sizeof palette / sizeof palette[0])];
        int64_t every = s[i].n > REPORT_MAX_POINTS ? (s[i].n + REPORT_MAX_POINTS - 1) /
                                                    REPORT_MAX_POINTS : 1;
        fprintf(o, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%s\"%s points=\"",
                color, s[i].dashed ? "1.5" : "2",
                s[i].dashed ? " stroke-dasharray=\"6 4\"" : "");
        for (int64_t k = 0; k < s[i].n; k += every)
            fprintf(o, "%.1f,%.1f ", PX(s[i].x[k]), PY(s[i].y[k]));
        if ((s[i].n - 1) % every)
            fprintf(o, "%.1f,%.1f", PX(s[i].x[s[i].n - 1]), PY(s[i].y[s[i].n - 1]));
        fputs("\"/>", o);
        if (s[i].n <= 60)
            for (int64_t k = 0; k < s[i].n; k++)
                fprintf(o, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>",
                        PX(s[i].x[k]), PY(s[i].y[k]), color);
        /* legend, top right */
        double ly = M_T + 14 + 16 * i;
        fprintf(o, "<line x1=\"%d\" y1=\"%.0f\" x2=\"%d\" y2=\"%.0f\" stroke=\"%s\" "
                "stroke-width=\"3\"%s/><text x=\"%d\" y=\"%.0f\" font-size=\"12\">",
                SVG_W - M_R - 170, ly, SVG_W - M_R - 148, ly, color,
                s[i].dashed ? " stroke-dasharray=\"6 4\"" : "", SVG_W - M_R - 142, ly + 4);
        html_text(o, s[i].name);
        fputs("</text>", o);
    }
    if (mk && isfinite(mk->x) && isfinite(mk->y)) {
        /* the label on the side with room: left of a mark in the right half */
        int left = PX(mk->x) > M_L + pw / 2;
        fprintf(o, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"7\" fill=\"none\" stroke=\"#000\" "
                "stroke-width=\"2\"/><text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" "
                "text-anchor=\"%s\">", PX(mk->x), PY(mk->y), PX(mk->x) + (left ? -10 : 10),
                PY(mk->y) - 10, left ? "end" : "start");
        html_text(o, mk->label);
        fputs("</text>", o);
    }
    fputs("</svg></figure>\n", o);
#undef PX
#undef PY
}

/* ===== what the page shows ===== */

static int has(const char *name, const char *part)
{
    return strstr(name, part) != NULL;
}

static int is_loss(const char *n) { return has(n, "loss"); }
static int is_lr(const char *n) { return strcmp(n, "lr") == 0 || has(n, "learning_rate"); }
static int is_speed(const char *n)
{
    size_t l = strlen(n);
    return l > 6 && strcmp(n + l - 6, "_per_s") == 0;
}
static int is_metric(const char *n)
{
    return !is_loss(n) && (has(n, "acc") || has(n, "perplexity") || has(n, "mae") ||
                           has(n, "mse") || has(n, "top"));
}

/* The column the best epoch is read from and whether lower is better:
 * val_loss, else eval_loss (the lowest). The hook for model selection:
 * once the job has checkpoint.monitor and its mode, they decide here. */
static int report_best(const struct table *t, int *lower)
{
    static const char *const prefer[] = { "val_loss", "eval_loss", "test_loss" };
    *lower = 1;
    for (size_t p = 0; p < sizeof prefer / sizeof prefer[0]; p++)
        for (int i = 0; i < t->ncol; i++)
            if (strcmp(t->col[i].name, prefer[p]) == 0 && t->col[i].n > 0)
                return i;
    return -1;
}

/* A number after "key": in the plan JSON (the first), or NAN. */
static double plan_number(const char *plan, const char *key)
{
    char pat[80];
    (void)snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = plan ? strstr(plan, pat) : NULL;
    if (!p)
        return NAN;
    char *end;
    double v = strtod(p + strlen(pat), &end);
    return end == p + strlen(pat) ? NAN : v;
}

/* The plan's learning-rate points (step, lr) into x, y (at most cap). */
static int plan_lr_points(const char *plan, double *x, double *y, int cap)
{
    const char *p = plan ? strstr(plan, "\"points\": [") : NULL;
    const char *end = p ? strchr(p, ']') : NULL;
    int n = 0;
    while (p && end && n < cap && (p = strstr(p, "{\"step\": ")) && p < end) {
        char *q;
        x[n] = strtod(p + 9, &q);
        const char *l = strstr(q, "\"lr\": ");
        if (!l || l > end)
            break;
        y[n] = strtod(l + 6, NULL);
        /* the plan counts steps from 0 (the rate of the first step); the
         * CSV's step is the count of steps taken: step k used point k - 1 */
        x[n] += 1;
        n++;
        p = l;
    }
    return n;
}

/* The value of column c at the row whose step is closest to x. */
static double at_step(const struct column *c, double x)
{
    double best = NAN, d = INFINITY;
    for (int64_t k = 0; k < c->n; k++)
        if (fabs(c->x[k] - x) < d) {
            d = fabs(c->x[k] - x);
            best = c->y[k];
        }
    return d <= 0.5 ? best : NAN;
}

static void plan_row(FILE *o, const char *what, double planned, double measured, const char *fmt)
{
    fputs("<tr><td>", o);
    html_text(o, what);
    fputs("</td><td>", o);
    if (isfinite(planned))
        fprintf(o, fmt, planned);
    else
        fputs("&mdash;", o);
    fputs("</td><td>", o);
    if (isfinite(measured))
        fprintf(o, fmt, measured);
    else
        fputs("&mdash;", o);
    fputs("</td></tr>\n", o);
}

/* Issue 27's hook: a time plan's predictions (an object "time" in the
 * plan JSON, each number a prediction; samples_per_s / tokens_per_s
 * compared with the median measured). Without one, the page says so. */
static void report_plan_time(FILE *o, const char *plan, const struct table *t)
{
    const char *tp = plan ? strstr(plan, "\"time\": {") : NULL;
    if (!tp) {
        fputs("<p class=\"note\">This plan predicts no times yet (the time plan of issue 27 "
              "adds them; they will be compared here with the measured throughput).</p>\n", o);
        return;
    }
    const char *end = strchr(tp, '}');
    fputs("<table><tr><th>time plan</th><th>predicted</th><th>measured (median)</th></tr>\n", o);
    for (const char *p = tp + 9; end && p < end;) {
        const char *k = strchr(p, '"');
        if (!k || k > end)
            break;
        const char *ke = strchr(k + 1, '"');
        if (!ke || ke > end)
            break;
        char key[64];
        (void)snprintf(key, sizeof key, "%.*s", (int)(ke - k - 1 < 63 ? ke - k - 1 : 63), k + 1);
        char *q;
        double v = strtod(ke + 2, &q);
        double meas = NAN;
        for (int i = 0; i < t->ncol; i++)
            if (strcmp(t->col[i].name, key) == 0 && t->col[i].n > 0) {
                double *tmp = malloc((size_t)t->col[i].n * sizeof *tmp);
                if (tmp) {
                    memcpy(tmp, t->col[i].y, (size_t)t->col[i].n * sizeof *tmp);
                    for (int64_t a = 1; a < t->col[i].n; a++)   /* insertion: small */
                        for (int64_t b = a; b > 0 && tmp[b - 1] > tmp[b]; b--) {
                            double s = tmp[b]; tmp[b] = tmp[b - 1]; tmp[b - 1] = s;
                        }
                    meas = tmp[t->col[i].n / 2];
                    free(tmp);
                }
            }
        plan_row(o, key, q == ke + 2 ? NAN : v, meas, "%.6g");
        p = q > ke ? q : ke + 1;
    }
    fputs("</table>\n", o);
}

/* A confusion-matrix CSV beside the metrics, for a classifier: where it
 * is looked for. The hook for the evaluation that writes one (issue 33's
 * exact metrics): its file goes first in this list. Rows are true classes,
 * columns predicted ones; a header row and a first column of labels are
 * skipped; with a first column "step" or "epoch", the rows of the last
 * one are shown. */
static int report_confusion(const char *csv, char *out, size_t cap)
{
    /* after the metrics' stem (metrics-confusion.csv), or in its directory */
    static const char *const forms[] = { "-confusion.csv", ".confusion.csv", "confusion.csv",
                                         "confusion_matrix.csv" };
    const char *slash = strrchr(csv, '/'), *dot = strrchr(csv, '.');
    int stem = dot && (!slash || dot > slash) ? (int)(dot - csv) : (int)strlen(csv);
    int dir = slash ? (int)(slash - csv + 1) : 0;
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        (void)snprintf(out, cap, "%.*s%s", i < 2 ? stem : dir, csv, forms[i]);
        FILE *f = fopen(out, "re");
        if (f) {
            (void)fclose(f);
            return 1;
        }
    }
    return 0;
}

static void confusion_table(FILE *o, const char *path)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return;
    char *line = NULL;
    size_t cap = 0;
    enum { MAXC = 64 };
    static double m[MAXC][MAXC];
    int rows = 0, cols = 0, keyed = 0;
    double last_key = NAN;
    ssize_t len;
    while ((len = getline(&line, &cap, f)) > 0) {
        if (line[0] == '#')
            continue;
        if (!keyed && (strncmp(line, "step", 4) == 0 || strncmp(line, "epoch", 5) == 0)) {
            keyed = 1;
            continue;
        }
        double v[MAXC + 1] = { 0 };
        int n = 0, numeric = 1;
        for (char *p = line; p && n <= MAXC;) {
            char *c = strchr(p, ',');
            size_t l = c ? (size_t)(c - p) : strcspn(p, "\r\n");
            if (!cell_number(p, l, &v[n]))
                numeric = 0;
            n++;
            p = c ? c + 1 : NULL;
        }
        if (!numeric) {
            if (rows == 0)
                continue;   /* a header */
            break;
        }
        int off = keyed ? 1 : 0;
        if (keyed && v[0] != last_key) {   /* a later matrix: start over */
            last_key = v[0];
            rows = 0;
        }
        if (rows < MAXC) {
            for (int c = off; c < n && c - off < MAXC; c++)
                m[rows][c - off] = v[c];
            cols = n - off < MAXC ? n - off : MAXC;
            rows++;
        }
    }
    free(line);
    (void)fclose(f);
    if (!rows || !cols)
        return;
    fputs("<table class=\"cm\"><tr><th>true \\ predicted</th>", o);
    for (int c = 0; c < cols; c++)
        fprintf(o, "<th>%d</th>", c);
    fputs("</tr>\n", o);
    for (int r = 0; r < rows; r++) {
        double mx = 0;
        for (int c = 0; c < cols; c++)
            mx = fmax(mx, m[r][c]);
        fprintf(o, "<tr><th>%d</th>", r);
        for (int c = 0; c < cols; c++)
            fprintf(o, "<td style=\"background:rgba(31,119,180,%.2f)\">%.6g</td>",
                    mx > 0 ? 0.85 * m[r][c] / mx : 0.0, m[r][c]);
        fputs("</tr>\n", o);
    }
    fputs("</table>\n", o);
}

/* ===== the page ===== */

static void page(FILE *o, const struct report_input *in, const struct table *t)
{
    const struct ddpc_job *j = in->job;
    char when[64] = "";
    time_t now = time(NULL);
    struct tm tmv;
    if (gmtime_r(&now, &tmv))
        (void)strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", &tmv);
    fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>", o);
    html_text(o, j->name);
    fputs(" &mdash; ddpc run report</title>\n<style>\n"
          "body{font-family:sans-serif;margin:24px;color:#222;background:#fff;max-width:780px}\n"
          "h1{font-size:22px;margin-bottom:4px}h2{font-size:17px;margin-top:28px;"
          "border-bottom:1px solid #ccc}\n"
          "table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;"
          "padding:3px 8px;text-align:right;font-size:13px}\n"
          "figure{margin:10px 0}.note{color:#555;font-size:13px}code{font-size:12px}\n"
          "</style></head><body>\n<h1>", o);
    html_text(o, j->name);
    fputs(" &mdash; run report</h1>\n<p class=\"note\">metrics <code>", o);
    html_text(o, in->csv);
    fputs("</code>", o);
    if (t->identity[0]) {
        fputs(", configuration identity <code>", o);
        html_text(o, t->identity);
        fputs("</code>", o);
    }
    if (in->spec_path) {
        fputs("<br>spec <code>", o);
        html_text(o, in->spec_path);
        fputs("</code>", o);
    }
    if (in->ddpc_version) {
        fputs(", ddpc ", o);
        html_text(o, in->ddpc_version);
    }
    fprintf(o, "<br>written %s from %lld row%s</p>\n", when, (long long)t->rows,
            t->rows == 1 ? "" : "s");

    /* summary: last values, best epoch */
    int lower, b = report_best(t, &lower);
    struct mark best = { NAN, NAN, NULL };
    char best_label[160] = "";
    fputs("<h2>Summary</h2>\n<table><tr><th>column</th><th>last</th><th>at step</th>"
          "<th>rows</th></tr>\n", o);
    for (int i = 0; i < t->ncol; i++) {
        const struct column *c = &t->col[i];
        if (!c->n)
            continue;
        fputs("<tr><td>", o);
        html_text(o, c->name);
        fprintf(o, "</td><td>%.6g</td><td>%.0f</td><td>%lld</td></tr>\n", c->y[c->n - 1],
                c->x[c->n - 1], (long long)c->n);
    }
    fputs("</table>\n", o);
    if (b >= 0) {
        const struct column *c = &t->col[b];
        int64_t k = 0;
        for (int64_t i = 1; i < c->n; i++)
            if (lower ? c->y[i] < c->y[k] : c->y[i] > c->y[k])
                k = i;
        best.x = c->x[k];
        best.y = c->y[k];
        if (isfinite(c->epoch[k]))
            (void)snprintf(best_label, sizeof best_label, "best epoch %.0f: %s %.4g",
                           c->epoch[k], c->name, c->y[k]);
        else
            (void)snprintf(best_label, sizeof best_label, "best: %s %.4g at step %.0f",
                           c->name, c->y[k], c->x[k]);
        best.label = best_label;
        fputs("<p>", o);
        html_text(o, best_label);
        fprintf(o, " (step %.0f; the %s %s)</p>\n", c->x[k], lower ? "lowest" : "highest",
                c->name);
    } else {
        fputs("<p class=\"note\">No evaluation column (val_loss, eval_loss): no best epoch.</p>\n",
              o);
    }

    /* charts */
    struct series s[REPORT_MAX_COLS + 1];
    int ns = 0, shown[REPORT_MAX_COLS] = { 0 };
    struct { const char *title, *ylabel; int (*pick)(const char *); } groups[] = {
        { "Loss", "loss", is_loss },
        { "Metrics", "value", is_metric },
        { "Learning rate", "learning rate", is_lr },
        { "Throughput", "per second", is_speed },
    };
    double px[64], py[64];
    int np = plan_lr_points(in->plan_json, px, py, 64);
    fputs("<h2>Curves</h2>\n", o);
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++) {
        ns = 0;
        for (int i = 0; i < t->ncol; i++)
            if (t->col[i].n && !shown[i] && groups[g].pick(t->col[i].name)) {
                s[ns++] = (struct series){ t->col[i].name, t->col[i].x, t->col[i].y,
                                           t->col[i].n, 0 };
                shown[i] = 1;
            }
        if (groups[g].pick == is_lr && ns && np > 0)
            s[ns++] = (struct series){ "the plan's schedule points", px, py, np, 1 };
        if (ns)
            svg_chart(o, groups[g].title, groups[g].ylabel, s, ns,
                      groups[g].pick == is_loss && b >= 0 && shown[b] ? &best : NULL);
    }
    int others = 0;
    for (int i = 0; i < t->ncol; i++) {
        if (!t->col[i].n || shown[i])
            continue;
        if (others++ >= REPORT_MAX_OTHER)
            continue;
        s[0] = (struct series){ t->col[i].name, t->col[i].x, t->col[i].y, t->col[i].n, 0 };
        svg_chart(o, t->col[i].name, t->col[i].name, s, 1, NULL);
    }
    if (others > REPORT_MAX_OTHER)
        fprintf(o, "<p class=\"note\">%d more columns are not drawn.</p>\n",
                others - REPORT_MAX_OTHER);

    /* confusion matrix */
    if (j->loss == DDPC_LOSS_CROSS_ENTROPY && j->model.type != DDPC_MODEL_GPT) {
        char cm[4200];
        fputs("<h2>Confusion matrix</h2>\n", o);
        if (report_confusion(in->csv, cm, sizeof cm)) {
            fputs("<p class=\"note\">from <code>", o);
            html_text(o, cm);
            fputs("</code></p>\n", o);
            confusion_table(o, cm);
        } else {
            fputs("<p class=\"note\">No confusion matrix beside the metrics (a classifier's "
                  "evaluation that writes one: see report.h).</p>\n", o);
        }
    }

    /* the plan against the run */
    fputs("<h2>The plan against the run</h2>\n<table><tr><th></th><th>planned</th>"
          "<th>measured</th></tr>\n", o);
    double last_step = -INFINITY, last_epoch = NAN;
    for (int i = 0; i < t->ncol; i++)
        if (t->col[i].n && t->col[i].x[t->col[i].n - 1] > last_step) {
            last_step = t->col[i].x[t->col[i].n - 1];
            last_epoch = t->col[i].epoch[t->col[i].n - 1];
        }
    plan_row(o, "optimizer steps in all", plan_number(in->plan_json, "total_optimizer_steps"),
             isfinite(last_step) ? last_step : NAN, "%.0f");
    plan_row(o, "epochs", plan_number(in->plan_json, "epochs"), last_epoch, "%.0f");
    plan_row(o, "optimizer steps per epoch",
             plan_number(in->plan_json, "optimizer_steps_per_epoch"),
             isfinite(last_epoch) && last_epoch > 0 ? last_step / last_epoch : NAN, "%.6g");
    int lr_col = -1;
    for (int i = 0; i < t->ncol; i++)
        if (is_lr(t->col[i].name) && t->col[i].n)
            lr_col = i;
    for (int k = 0; k < np && lr_col >= 0; k++) {
        char what[64];
        (void)snprintf(what, sizeof what, "learning rate at step %.0f", px[k]);
        plan_row(o, what, py[k], at_step(&t->col[lr_col], px[k]), "%.6g");
    }
    fputs("</table>\n", o);
    report_plan_time(o, in->plan_json, t);
    fputs("<p class=\"note\">Steps are counted as the CSV counts them: the optimizer steps "
          "taken; rows are written every logging.every_n_steps steps, so a measured value the "
          "CSV does not hold shows &mdash;.</p>\n</body></html>\n", o);
}

int report_path(const char *csv, char *out, size_t cap)
{
    const char *slash = strrchr(csv, '/'), *dot = strrchr(csv, '.');
    int stem = dot && (!slash || dot > slash + 1) ? (int)(dot - csv) : (int)strlen(csv);
    int n = snprintf(out, cap, "%.*s.html", stem, csv);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

int report_write(const struct report_input *in, char *html, size_t cap, struct ddpc_err *e)
{
    char path[4200];
    if (report_path(in->csv, path, sizeof path) < 0)
        return DDPC_FAIL(e, DDPC_E_INVALID, "report: %s: path too long", in->csv);
    struct table t;
    int rc = table_read(&t, in->csv, e);
    char *text = NULL;
    size_t len = 0;
    FILE *o = rc == 0 ? open_memstream(&text, &len) : NULL;
    if (rc == 0 && !o)
        rc = DDPC_FAIL(e, DDPC_E_NOMEM, "report: out of memory");
    if (o) {
        page(o, in, &t);
        if (fclose(o) != 0 || !text)
            rc = DDPC_FAIL(e, DDPC_E_NOMEM, "report: out of memory");
    }
    struct ckpt_afile f;
    int opened = 0;
    if (rc == 0 && (rc = ckpt_out_open(&f, path, "report", "logging.metrics_csv",
                                       "any earlier report is intact", e)) == 0) {
        opened = 1;
        if ((rc = ckpt_out_write(&f, text, len, e)) == 0)
            rc = ckpt_out_commit(&f, e);
    }
    if (opened)
        ckpt_out_abort(&f);
    free(text);
    table_free(&t);
    if (rc == 0 && html && cap)
        (void)snprintf(html, cap, "%s", path);
    return rc;
}
