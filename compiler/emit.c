/* emit.c - job + plan -> m4 definitions -> generated files.
 *
 * Owns: the spelling of every job field and plan number in generated files
 * (through buf.c's escapers) and the m4 invocation. The templates own the
 * layout; this file owns the values.
 *
 * Safety argument, in order:
 *   1. every spec string is escaped by buf_c_str / buf_json_str /
 *      buf_sh_word into printable ASCII (def() re-checks each body and
 *      refuses anything else, so a bug here fails the build rather than
 *      leaking bytes);
 *   2. m4's quotes become QL/QR, made of bytes >= 0x80 that escaped text
 *      cannot hold, and each body is quoted twice: define strips one level,
 *      expansion's rescan strips the other, and quoted text is never
 *      expanded, so "m4_syscmd(...)" or "DDPC_X" in a value is just text;
 *   3. the C and JSON escapers never emit '$', and a shell word only as $'
 *      (def() checks), so m4's argument substitution ($1, $#, $* and $@)
 *      has nothing to act on;
 *   4. comments are disabled, so '#' cannot hide the rest of a line from m4;
 *   5. m4 runs with -P (builtins are m4_*), from an argv array, no shell.
 *
 * Never: starts a shell, writes a timestamp or a temporary path into an
 * output, prints, exits.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "buf.h"
#include "emit.h"
#include "interrupt.h"
#include "spawn.h"
#include "keytab.h"

#define QL "\xc2\xab"    /* U+00AB, m4's open quote while templates run */
#define QR "\xc2\xbb"    /* U+00BB, its close quote */

/* ======================= definitions ======================= */

struct defs {
    struct ddpc_buf  out;
    struct ddpc_diag *d;
    int bad;             /* a body failed the check: an internal error */
};

/* Appends m4_define(QL name QR, QL QL body QR QR). The body must be
 * printable ASCII (newlines allowed) with no '$' except "$'" (see the
 * safety argument); anything else is refused. */
static void def(struct defs *df, const char *name, const char *body)
{
    for (const unsigned char *c = (const unsigned char *)body; *c; c++) {
        int ok = (*c >= 0x20 && *c < 0x7f) || *c == '\n';
        if (*c == '$' && c[1] != '\'')
            ok = 0;
        if (!ok) {
            if (!df->bad)
                diag_add(df->d, DDPC_SEV_ERROR, "ddpc", 0, 0, "",
                         "internal error: unsafe byte 0x%02x in the value of %s; "
                         "please report this", *c, name);
            df->bad = 1;
            return;
        }
    }
    buf_printf(&df->out, "m4_define(" QL "%s" QR ", " QL QL "%s" QR QR ")\n", name, body);
}

/* An integer as a C constant of its own type: INT64_C beyond int32. */
static void c_i64(char *s, size_t n, int64_t v)
{
    if (v == INT64_MIN)
        snprintf(s, n, "(-INT64_C(9223372036854775807) - 1)");
    else if (v > INT32_MAX || v < INT32_MIN)
        snprintf(s, n, "INT64_C(%lld)", (long long)v);
    else
        snprintf(s, n, "%lld", (long long)v);
}

static void def_i64(struct defs *df, const char *name, int64_t v)
{
    char s[48];
    c_i64(s, sizeof s, v);
    def(df, name, s);
}

/* A double as a C constant that reads back to the same bits: %.17g, with
 * ".0" added where the result would otherwise be an integer constant. */
static void c_double(char *s, size_t n, double v)
{
    snprintf(s, n, "%.17g", v);
    if (!strpbrk(s, ".eE"))
        strncat(s, ".0", n - strlen(s) - 1);
}

static void def_f64(struct defs *df, const char *name, double v)
{
    char s[48];
    if (!isfinite(v)) {
        if (!df->bad)
            diag_add(df->d, DDPC_SEV_ERROR, "ddpc", 0, 0, "", "%s is not a finite number", name);
        df->bad = 1;
        return;
    }
    c_double(s, sizeof s, v);
    def(df, name, s);
}

/* Plan numbers that may be unknown: -1.0 stands for "unknown". */
static void def_f64_or_unknown(struct defs *df, const char *name, double v)
{
    def_f64(df, name, isfinite(v) ? v : -1.0);
}

static void def_cstr(struct defs *df, const char *name, const char *s)
{
    struct ddpc_buf b;
    buf_init(&b);
    buf_c_str_or_null(&b, s);
    if (b.oom)
        df->out.oom = 1;
    else
        def(df, name, b.s);
    buf_free(&b);
}

static void def_cbytes(struct defs *df, const char *name, const char *s, size_t n)
{
    struct ddpc_buf b;
    buf_init(&b);
    buf_c_str(&b, s, n);
    if (b.oom)
        df->out.oom = 1;
    else
        def(df, name, b.s);
    buf_free(&b);
}

/* ---- the job: one designated initializer per field, from the key table ---- */

struct job_init {
    struct defs *df;
    struct ddpc_buf b;
};

/* "    .data.train.format = DDPC_DATA_SYNTHETIC,\n" for one field (keytab.h's
 * walk; path is the field's C designator). */
static void init_field(void *ctx, const struct ddpc_field *f, const char *path, const char *p,
                       const char *blk)
{
    struct job_init *ji = ctx;
    struct ddpc_buf *b = &ji->b;
    char num[48];
    buf_printf(b, "    .%s = ", path);
    switch (f->type) {
    case DDPC_FT_I32:
    case DDPC_FT_BOOL:
    case DDPC_FT_I64:
        c_i64(num, sizeof num, ddpc_field_i64(f, p));
        buf_puts(b, num);
        break;
    case DDPC_FT_U64:
        buf_printf(b, "UINT64_C(%llu)", (unsigned long long)ddpc_field_u64(p));
        break;
    case DDPC_FT_F64: {
        double v = ddpc_field_f64(p);
        if (!isfinite(v)) {
            if (!ji->df->bad)
                diag_add(ji->df->d, DDPC_SEV_ERROR, "ddpc", 0, 0, "",
                         "%s is not a finite number", path);
            ji->df->bad = 1;
            return;
        }
        c_double(num, sizeof num, v);
        buf_puts(b, num);
        break;
    }
    case DDPC_FT_STR:
        buf_c_str_or_null(b, ddpc_field_str(p));
        break;
    case DDPC_FT_ENUM: {
        const struct ddpc_enum_value *v = ddpc_enum_find(f->e, (int)ddpc_field_i64(f, p));
        if (!v) {
            if (!ji->df->bad)
                diag_add(ji->df->d, DDPC_SEV_ERROR, "ddpc", 0, 0, "",
                         "internal error: %s has no enumerator %lld", path,
                         (long long)ddpc_field_i64(f, p));
            ji->df->bad = 1;
            return;
        }
        buf_puts(b, v->cname);
        break;
    }
    case DDPC_FT_I32_LIST: {
        /* "{ a, b, c }" of the used elements; at least one, so never empty */
        int n = ddpc_field_count(f, blk);
        buf_puts(b, "{ ");
        for (int i = 0; i < n; i++) {
            int32_t v;
            memcpy(&v, p + (size_t)i * sizeof v, sizeof v);
            buf_printf(b, "%s%d", i ? ", " : "", v);
        }
        buf_puts(b, n ? " }" : "0 }");
        break;
    }
    default:
        return;
    }
    buf_puts(b, ",\n");
}

/* M_JOB_FIELDS: the body of job_config.h's `static const struct ddpc_job`,
 * every field the key table reaches (a test checks that it reaches every
 * field of job.h). */
static void def_job(struct defs *df, const struct ddpc_job *j)
{
    struct job_init ji = { .df = df };
    buf_init(&ji.b);
    ddpc_job_walk(j, init_field, &ji);
    if (ji.b.oom)
        df->out.oom = 1;
    else
        def(df, "M_JOB_FIELDS", ji.b.s);
    buf_free(&ji.b);
    def_cstr(df, "M_NAME", j->name);
}

static void def_plan(struct defs *df, const struct ddpc_plan *p)
{
    def_i64(df, "M_P_WORLD_SIZE", p->world_known ? p->world_size : 0);
    def_i64(df, "M_P_NUM_NODES", p->num_nodes);
    def_i64(df, "M_P_DEVICES_PER_NODE", p->world_known ? p->devices_per_node : 0);
    def_i64(df, "M_P_TRAIN_SAMPLES", p->train_samples);
    def_i64(df, "M_P_SAMPLES_PER_RANK", p->samples_per_rank);
    def_i64(df, "M_P_BATCHES_PER_EPOCH", p->batches_per_epoch);
    def_i64(df, "M_P_OPTIMIZER_STEPS_PER_EPOCH", p->optimizer_steps_per_epoch);
    def_i64(df, "M_P_TOTAL_OPTIMIZER_STEPS", p->total_optimizer_steps);
    def_i64(df, "M_P_GLOBAL_BATCH", p->global_batch);
    def_f64_or_unknown(df, "M_P_LR_PEAK", p->lr_peak);
    def_i64(df, "M_P_N_PARAMS", p->total_params);
    def_i64(df, "M_P_N_BUCKETS", p->n_buckets);
    def_i64(df, "M_P_BUCKET_CAP_BYTES", p->bucket_cap_bytes);
    def_i64(df, "M_P_MEM_PER_DEVICE", p->mem_total);
}

/* What job.sbatch needs: shell words and numbers. The master address comes
 * from the allocation (the template asks scontrol) unless the spec names a
 * real host. */
static void def_sh(struct defs *df, const char *name, const char *s)
{
    struct ddpc_buf b;
    buf_init(&b);
    buf_sh_word(&b, s);
    if (b.oom)
        df->out.oom = 1;
    else
        def(df, name, b.s);
    buf_free(&b);
}

static void def_sbatch(struct defs *df, const struct ddpc_job *j, const struct ddpc_plan *p)
{
    def_sh(df, "M_SH_NAME", j->name ? j->name : "job");
    def_sh(df, "M_SH_PROGRAM", p->program);
    /* a loopback address cannot be the master of several nodes: it means
     * "not set", and the script asks Slurm for the allocation's first node */
    const char *m = j->launch.master_addr;
    int from_alloc = !m || !m[0] || strcmp(m, "localhost") == 0 || strcmp(m, "127.0.0.1") == 0;
    def_i64(df, "M_SH_MASTER_FROM_ALLOC", from_alloc);
    def_sh(df, "M_SH_MASTER", from_alloc ? "" : m);
    def_i64(df, "M_SH_PORT", j->launch.master_port);
    def_i64(df, "M_LAUNCH_NUM_NODES", j->launch.num_nodes);
    def_i64(df, "M_SH_GPUS",
            j->accelerator == DDPC_ACCEL_CPU || !p->world_known ? 0 : p->devices_per_node);
    /* devices: all: no count to ask for, so whole nodes; each node counts
     * its own GPUs or cores at launch */
    def_i64(df, "M_SH_EXCLUSIVE", !p->world_known);
    /* one core per worker: a CPU worker computes on one BLAS thread (its
     * comm thread mostly sleeps), a GPU worker's host thread feeds one GPU */
    def_i64(df, "M_SH_CPUS", p->world_known ? p->devices_per_node : 0);
    /* the names are checked (check_slurm_name): safe in #SBATCH lines,
     * which sbatch reads without a shell */
    def(df, "M_SH_PARTITION", j->launch.partition ? j->launch.partition : "");
    def(df, "M_SH_ACCOUNT", j->launch.account ? j->launch.account : "");
    char t[40] = "";
    if (j->launch.time_limit_s > 0) {
        /* D-HH:MM:SS, whole seconds rounded up (Slurm then rounds to minutes) */
        double s = j->launch.time_limit_s;
        long long secs = (long long)s + ((double)(long long)s < s);
        snprintf(t, sizeof t, "%lld-%02lld:%02lld:%02lld", secs / 86400, secs / 3600 % 24,
                 secs / 60 % 60, secs % 60);
    }
    def(df, "M_SH_TIME", t);
}

char *emit_prologue(const struct emit_input *in, const char *plan_json, struct ddpc_diag *d)
{
    struct defs df = { .d = d };
    buf_init(&df.out);
    /* Default quotes are still on for the first lines; the diversion keeps
     * the definitions' newlines out of the output. */
    buf_puts(&df.out, "m4_divert(-1)\nm4_changecom()\nm4_changequote(" QL "," QR ")\n");

    def_cstr(&df, "M_VERSION", in->version);
    def_cstr(&df, "M_SPEC_PATH", in->spec_path);
    def_cstr(&df, "M_SPEC_HASH", in->spec_hash);
    def_cstr(&df, "M_BUILT_FROM", in->built_from ? in->built_from : "");
    def_cbytes(&df, "M_SPEC_TEXT", in->spec_text, in->spec_len);
    def_i64(&df, "M_SPEC_LEN", (int64_t)in->spec_len);
    def_job(&df, in->job);
    def_plan(&df, in->plan);
    def_sbatch(&df, in->job, in->plan);
    if (plan_json) {
        size_t n = strlen(plan_json);
        def_cbytes(&df, "M_PLAN_JSON", plan_json, n);
        /* job.plan.json: the text itself, its final newline left to the template */
        char *raw = strndup(plan_json, n && plan_json[n - 1] == '\n' ? n - 1 : n);
        if (!raw)
            df.out.oom = 1;
        else
            def(&df, "M_PLAN_JSON_RAW", raw);
        free(raw);
    }
    buf_puts(&df.out, "m4_divert(0)m4_dnl\n");
    if (df.out.oom && !df.bad)
        diag_add(d, DDPC_SEV_ERROR, "ddpc", 0, 0, "", "out of memory while generating");
    if (df.bad || df.out.oom) {
        buf_free(&df.out);
        return NULL;
    }
    return buf_take(&df.out);
}


/* Creates out_path.tmp.PID for writing, tracked so that a signal removes
 * it (interrupt.h): *tmp is its name (NULL when nothing was created) and
 * *slot its tracking slot. Returns the descriptor, or -1 with an error in d. */
static int tmp_create(const char *out_path, char **tmp, int *slot, struct ddpc_diag *d)
{
    if (asprintf(tmp, "%s.tmp.%ld", out_path, (long)getpid()) < 0) {
        *tmp = NULL;
        diag_add(d, DDPC_SEV_ERROR, "ddpc", 0, 0, "", "out of memory");
        return -1;
    }
    *slot = intr_track(*tmp);     /* before it exists: a signal removes it */
    int fd = open(*tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        diag_add(d, DDPC_SEV_ERROR, *tmp, 0, 0, "", "cannot create: %s", strerror(errno));
        free(*tmp);
        *tmp = NULL;    /* nothing to remove */
    }
    return fd;
}

/* Puts the temporary file in place: fsync and close fd (always closed),
 * then rename *tmp onto out_path, after which *tmp is freed and NULL.
 * Returns 0, or -1 with an error in d (*tmp left for the caller to
 * unlink). */
static int tmp_commit(int fd, char **tmp, const char *out_path, struct ddpc_diag *d)
{
    int synced = fsync(fd) == 0;
    int err = errno;
    if (close(fd) != 0 || !synced) {
        diag_add(d, DDPC_SEV_ERROR, *tmp, 0, 0, "", "write failed: %s",
                 strerror(synced ? errno : err));
        return -1;
    }
    if (rename(*tmp, out_path) != 0) {
        diag_add(d, DDPC_SEV_ERROR, out_path, 0, 0, "", "cannot rename %s into place: %s", *tmp,
                 strerror(errno));
        return -1;
    }
    free(*tmp);
    *tmp = NULL;
    return 0;
}
/* ======================= running m4 ======================= */

int emit_m4(const char *m4, const char *prologue, const char *template_path,
            const char *out_path, FILE *log, struct ddpc_diag *d)
{
    int rc = -1, in_fd = -1, out_fd = -1, have_fa = 0, tmp_slot = -1;
    char *tmp = NULL;
    posix_spawn_file_actions_t fa;
    if (!m4)
        m4 = "m4";

    if (access(template_path, R_OK) != 0) {
        diag_add(d, DDPC_SEV_ERROR, template_path, 0, 0, "",
                 "template not readable (%s): is ddpc installed completely (make install)?",
                 strerror(errno));
        goto done;
    }
    /* the prologue travels on stdin from an anonymous file: no temp path to
     * clean up, and no pipe for m4 to break if it exits early */
    in_fd = memfd_create("ddpc-prologue", MFD_CLOEXEC);
    if (in_fd < 0) {
        diag_add(d, DDPC_SEV_ERROR, "ddpc", 0, 0, "", "memfd_create: %s", strerror(errno));
        goto done;
    }
    size_t len = strlen(prologue), off = 0;
    while (off < len) {
        ssize_t w = write(in_fd, prologue + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            diag_add(d, DDPC_SEV_ERROR, "ddpc", 0, 0, "", "writing the m4 prologue: %s",
                     strerror(errno));
            goto done;
        }
        off += (size_t)w;
    }
    if (lseek(in_fd, 0, SEEK_SET) != 0) {
        diag_add(d, DDPC_SEV_ERROR, "ddpc", 0, 0, "", "lseek: %s", strerror(errno));
        goto done;
    }
    if ((out_fd = tmp_create(out_path, &tmp, &tmp_slot, d)) < 0)
        goto done;
    if (posix_spawn_file_actions_init(&fa) != 0) {
        diag_add(d, DDPC_SEV_ERROR, "ddpc", 0, 0, "", "posix_spawn_file_actions_init failed");
        goto done;
    }
    have_fa = 1;
    if (posix_spawn_file_actions_adddup2(&fa, in_fd, 0) != 0 ||
        posix_spawn_file_actions_adddup2(&fa, out_fd, 1) != 0) {
        diag_add(d, DDPC_SEV_ERROR, "ddpc", 0, 0, "", "posix_spawn_file_actions_adddup2 failed");
        goto done;
    }
    char *argv[] = { (char *)m4, "-P", "-E", "-", (char *)template_path, NULL };
    if (log)
        fprintf(log, "%s -P -E - %s < (definitions) > %s\n", m4, template_path, tmp);
    int st;
    if (spawn_wait(argv, &fa, NULL, "", " (install GNU m4: apt-get install m4)", &st, d) != 0)
        goto done;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        diag_add(d, DDPC_SEV_ERROR, template_path, 0, 0, "",
                 "m4 failed (%s %d) on this template; its messages are above",
                 WIFEXITED(st) ? "exit status" : "signal",
                 WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
        goto done;
    }
    int committed = tmp_commit(out_fd, &tmp, out_path, d);
    out_fd = -1;
    if (committed != 0)
        goto done;
    rc = 0;
done:
    if (have_fa)
        posix_spawn_file_actions_destroy(&fa);
    if (out_fd >= 0)
        close(out_fd);
    if (in_fd >= 0)
        close(in_fd);
    if (tmp) {
        unlink(tmp);    /* a failed run leaves no partial file */
        free(tmp);
    }
    intr_untrack(tmp_slot);
    return rc;
}

int emit_install(const char *from, const char *to, unsigned mode, struct ddpc_diag *d)
{
    int rc = -1, in_fd = -1, out_fd = -1, slot = -1;
    char *tmp = NULL;
    in_fd = open(from, O_RDONLY | O_CLOEXEC);
    if (in_fd < 0) {
        diag_add(d, DDPC_SEV_ERROR, from, 0, 0, "", "cannot read: %s", strerror(errno));
        goto done;
    }
    if ((out_fd = tmp_create(to, &tmp, &slot, d)) < 0)
        goto done;
    char buf[8192];
    for (;;) {
        ssize_t n = read(in_fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            diag_add(d, DDPC_SEV_ERROR, from, 0, 0, "", "read failed: %s", strerror(errno));
            goto done;
        }
        if (n == 0)
            break;
        for (ssize_t off = 0; off < n;) {
            ssize_t w = write(out_fd, buf + off, (size_t)(n - off));
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0) {
                diag_add(d, DDPC_SEV_ERROR, tmp, 0, 0, "", "write failed: %s", strerror(errno));
                goto done;
            }
            off += w;
        }
    }
    if (fchmod(out_fd, (mode_t)mode) != 0) {
        diag_add(d, DDPC_SEV_ERROR, tmp, 0, 0, "", "chmod failed: %s", strerror(errno));
        goto done;
    }
    int committed = tmp_commit(out_fd, &tmp, to, d);
    out_fd = -1;
    if (committed != 0)
        goto done;
    rc = 0;
done:
    if (out_fd >= 0)
        close(out_fd);
    if (in_fd >= 0)
        close(in_fd);
    if (tmp) {
        unlink(tmp);
        free(tmp);
    }
    intr_untrack(slot);
    return rc;
}

/* ======================= all files ======================= */

static char *path_join(const char *dir, const char *name)
{
    char *p;
    if (asprintf(&p, "%s/%s", dir, name) < 0)
        return NULL;
    return p;
}

int emit_files(const struct emit_input *in, const char *out_dir, const char *sbatch_path,
               struct ddpc_diag *d)
{
    int rc = -1;
    char *json = NULL, *pro = NULL, *tpl = NULL, *out = NULL;

    json = plan_json(in->plan, in->job);
    if (!json) {
        diag_add(d, DDPC_SEV_ERROR, "ddpc", 0, 0, "", "out of memory while writing the plan");
        goto done;
    }
    pro = emit_prologue(in, json, d);
    if (!pro)
        goto done;

    static const char *const names[][2] = {
        { "job.plan.json.m4", "job.plan.json" },
        { "job_config.h.m4",  "job_config.h" },
        { "job.sbatch.m4",    "job.sbatch" },
    };
    int n = in->job->launch.launcher == DDPC_LAUNCHER_SLURM ? 3 : 2;
    for (int i = 0; i < n; i++) {
        free(tpl);
        free(out);
        tpl = path_join(in->templates_dir, names[i][0]);
        out = (i == 2 && sbatch_path) ? strdup(sbatch_path) : path_join(out_dir, names[i][1]);
        if (!tpl || !out) {
            diag_add(d, DDPC_SEV_ERROR, "ddpc", 0, 0, "", "out of memory");
            goto done;
        }
        if (emit_m4(in->m4, pro, tpl, out, in->log, d) != 0)
            goto done;
        if (i == 2 && chmod(out, 0755) != 0) {
            diag_add(d, DDPC_SEV_ERROR, out, 0, 0, "", "chmod: %s", strerror(errno));
            goto done;
        }
    }
    rc = 0;
done:
    free(json);
    free(pro);
    free(tpl);
    free(out);
    return rc;
}
