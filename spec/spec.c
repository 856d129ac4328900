/* spec.c - the front end as the compiler sees it (spec.h): file -> job.
 *
 * Owns reading the spec file (a regular file; standard input for "-", or a
 * pipe or character device named as a file, read the same way; size-capped) and the struct spec_doc that keeps the bytes, the tree and every string the job
 * points to. Parsing is load.c's, rules are validate.c's.
 */
#include "spec.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "load.h"
#include "probe.h"
#include "validate.h"

struct spec_doc {
    struct ddpc_arena arena;   /* tree nodes, strings, resolved paths */
    char *text;                /* the file's bytes + NUL; malloc'd */
    size_t len;
    struct ddpc_node *root;
};

/* Reads fd to its end into a malloc'd NUL-terminated buffer, at most
 * DDPC_LOAD_MAX_BYTES (a pipe, a terminal, /dev/zero: no size to ask
 * first). what names it in the too-large message ("standard input").
 * Returns 0, -1 with errno-style why (I/O), or -2 when it is too large. */
static int read_stream(int fd, const char *what, char **out, size_t *len, char *why,
                       size_t cap)
{
    size_t got = 0, have = 0;
    char *buf = NULL;
    for (;;) {
        if (got > DDPC_LOAD_MAX_BYTES) {
            free(buf);
            snprintf(why, cap, "%s holds more than %u MiB; not a job spec", what,
                     DDPC_LOAD_MAX_BYTES >> 20);
            return -2;
        }
        if (got + 1 >= have) {      /* room for a byte and the NUL */
            size_t more = have ? 2 * have : 65536;
            char *nb = realloc(buf, more);
            if (!nb) {
                free(buf);
                snprintf(why, cap, "out of memory");
                return -1;
            }
            buf = nb;
            have = more;
        }
        ssize_t r = read(fd, buf + got, have - 1 - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            snprintf(why, cap, "%s", strerror(errno));
            free(buf);
            return -1;
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    buf[got] = '\0';
    *out = buf;
    *len = got;
    return 0;
}

/* Reads the whole file into a malloc'd NUL-terminated buffer. A regular
 * file is read at its size; a pipe or a character device (/dev/stdin,
 * /dev/fd/N, a shell's <(...)) as standard input is, to its end, and
 * *stream says so. Returns 0, -1 with errno-style why (I/O), or -2 when
 * the file is too large. */
static int read_file(const char *path, char **out, size_t *len, int *stream, char *why,
                     size_t cap)
{
    int rc = -1;
    char *buf = NULL;
    struct stat st;
    *stream = 0;
    /* non-blocking: a FIFO without a writer must not hold the open */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        snprintf(why, cap, "%s", strerror(errno));
        return -1;
    }
    if (fstat(fd, &st) < 0) {
        snprintf(why, cap, "%s", strerror(errno));
        goto out;
    }
    if (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode) || S_ISSOCK(st.st_mode)) {
        int fl = fcntl(fd, F_GETFL);
        if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
            snprintf(why, cap, "%s", strerror(errno));
            goto out;
        }
        *stream = 1;
        rc = read_stream(fd, "it", out, len, why, cap);
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(why, cap, S_ISDIR(st.st_mode) ? "is a directory" : "not a regular file");
        goto out;
    }
    if ((unsigned long long)st.st_size > DDPC_LOAD_MAX_BYTES) {
        snprintf(why, cap, "file is larger than %u MiB; not a job spec", DDPC_LOAD_MAX_BYTES >> 20);
        rc = -2;
        goto out;
    }
    size_t want = (size_t)st.st_size, got = 0;
    buf = malloc(want + 1);
    if (!buf) {
        snprintf(why, cap, "out of memory");
        goto out;
    }
    while (got < want) {
        ssize_t r = read(fd, buf + got, want - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            snprintf(why, cap, "%s", strerror(errno));
            goto out;
        }
        if (r == 0)
            break;   /* the file shrank: take what is there */
        got += (size_t)r;
    }
    buf[got] = '\0';
    *out = buf;
    *len = got;
    buf = NULL;
    rc = 0;
out:
    free(buf);
    close(fd);
    return rc;
}

/* Applies opt's overrides to the tree and appends one comment line per
 * override to the doc's text (see spec_doc_text). */
static int apply_overrides(struct spec_doc *sd, const struct spec_options *opt,
                           struct ddpc_diag *d)
{
    int rc = 0;
    if (opt->n_overrides <= 0)
        return 0;
    size_t cap = sd->len + 2;
    for (int i = 0; i < opt->n_overrides; i++)
        cap += 16 + 4 * strlen(opt->overrides[i]);
    char *text = malloc(cap);
    if (!text) {
        diag_rule(d, DDPC_R_OOM, "ddpc", 0, 0, "", "out of memory");
        return -1;
    }
    memcpy(text, sd->text, sd->len);
    size_t o = sd->len;
    if (o && text[o - 1] != '\n')
        text[o++] = '\n';
    for (int i = 0; i < opt->n_overrides; i++) {
        const char *ov = opt->overrides[i];
        const char *eq = strchr(ov, '=');
        const char *origin = arena_printf(&sd->arena, "--set %s", ov);
        if (!origin) {
            diag_rule(d, DDPC_R_OOM, "ddpc", 0, 0, "", "out of memory");
            rc = -1;
            break;
        }
        if (!eq) {
            diag_rule(d, DDPC_R_SET, origin, 0, 0, "", "expected key.path=value");
            rc = -1;
            continue;
        }
        if (load_override(&sd->arena, &sd->root, origin, ov, (size_t)(eq - ov), eq + 1, d) < 0)
            rc = -1;
        o += (size_t)sprintf(text + o, "# ddpc --set ");
        for (const unsigned char *q = (const unsigned char *)ov; *q; q++)
            o += (size_t)(*q < 0x20 || *q == 0x7f ? sprintf(text + o, "\\x%02x", *q)
                                                 : sprintf(text + o, "%c", *q));
        text[o++] = '\n';
    }
    text[o] = '\0';
    free(sd->text);
    sd->text = text;
    sd->len = o;
    return rc;
}

int spec_load_job(const char *path, const struct spec_options *opt, struct ddpc_job *job,
                  struct spec_doc **doc, struct ddpc_diag *d)
{
    static const struct spec_options defaults = { .read_data_headers = 1 };
    char why[256];
    int from = d->n, errors = d->n_errors;
    struct spec_doc *sd = NULL;

    *doc = NULL;
    memset(job, 0, sizeof *job);
    sd = calloc(1, sizeof *sd);
    if (!sd) {
        diag_rule(d, DDPC_R_OOM, path, 0, 0, "", "out of memory");
        d->io_error = 1;
        return 2;
    }
    /* "-": standard input, named "<stdin>" in messages; its relative
     * paths resolve against the working directory (validate_job: a file
     * name without a directory) */
    int rrc, stream = 0;
    if (strcmp(path, "-") == 0) {
        path = DDPC_SPEC_STDIN;
        rrc = read_stream(STDIN_FILENO, "standard input", &sd->text, &sd->len, why,
                          sizeof why);
    } else {
        rrc = read_file(path, &sd->text, &sd->len, &stream, why, sizeof why);
    }
    if (rrc == -1) {
        diag_rule(d, DDPC_R_IO, path, 0, 0, "", "cannot read: %s", why);
        d->io_error = 1;
        free(sd);
        return 2;
    }
    *doc = sd;
    if (rrc == -2) {
        diag_rule(d, DDPC_R_IO, path, 0, 0, "", "%s", why);
        sd->text = calloc(1, 1);
        goto done;
    }
    if (!opt)
        opt = &defaults;
    /* a pipe's name (/dev/fd/63) is no directory of the spec's: its
     * relative paths resolve in the working directory, as "-"'s do */
    struct spec_options streamed;
    if (stream) {
        streamed = *opt;
        streamed.paths_from_cwd = 1;
        opt = &streamed;
    }
    if (load_yaml(path, sd->text, sd->len, &sd->arena, &sd->root, d) == 0 &&
        apply_overrides(sd, opt, d) == 0)
        validate_job(path, sd->root, opt, &sd->arena, job, d);
done:
    diag_sort_from(d, from);
    return d->n_errors == errors ? 0 : 1;
}

const char *spec_doc_text(const struct spec_doc *doc, size_t *len)
{
    if (len)
        *len = doc && doc->text ? doc->len : 0;
    return doc && doc->text ? doc->text : "";
}

void spec_doc_free(struct spec_doc *doc)
{
    if (!doc)
        return;
    arena_free(&doc->arena);
    free(doc->text);
    free(doc);
}
