/* tokens.c - token streams on disk (tokens.h): listing a source's files and
 * checking shard headers. Reads headers only; never the tokens. */
#include "tokens.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int32_t le32(const unsigned char *p)
{
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                     (uint32_t)p[3] << 24);
}

int tokens_shard_header(const unsigned char *h, size_t got, int64_t file_bytes,
                        const char *name, int64_t *count, char *why, size_t cap)
{
    if (got < DDPC_SHARD_HEADER_BYTES) {
        snprintf(why, cap, "'%s' has %lld bytes, less than the 1024-byte header of an llm.c "
                 "token shard", name, (long long)file_bytes);
        return -1;
    }
    int32_t magic = le32(h), version = le32(h + 4), n = le32(h + 8);
    if (magic != DDPC_SHARD_MAGIC) {
        snprintf(why, cap, "'%s' is not an llm.c token shard: its magic is %ld, not %d (for "
                 "raw text use format: text)", name, (long)magic, DDPC_SHARD_MAGIC);
        return -1;
    }
    if (version != DDPC_SHARD_VERSION) {
        snprintf(why, cap, "'%s' is a version %ld token shard%s; only version 1 (uint16 "
                 "tokens, GPT-2's) is supported", name, (long)version,
                 version == 2 ? " (uint32 tokens, llm.c's Llama 3 format)" : "");
        return -1;
    }
    if (n < 0) {
        snprintf(why, cap, "'%s': its header's token count is negative (%ld)", name, (long)n);
        return -1;
    }
    int64_t want = DDPC_SHARD_HEADER_BYTES + 2 * (int64_t)n;
    if (want != file_bytes) {
        snprintf(why, cap, "'%s': its header says %ld tokens (%lld bytes after the 1024-byte "
                 "header) but the file has %lld bytes after it: %s", name, (long)n,
                 (long long)(2 * (int64_t)n), (long long)(file_bytes - DDPC_SHARD_HEADER_BYTES),
                 want > file_bytes ? "truncated (an interrupted copy or download?)"
                                   : "extra bytes after the tokens");
        return -1;
    }
    *count = n;
    return 0;
}

/* Opens p read-only without blocking; regular files only. fd or -1. */
static int open_regular(const char *p, struct stat *st, char *why, size_t cap)
{
    int fd = open(p, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        snprintf(why, cap, "cannot open '%s': %s", p, strerror(errno));
        return -1;
    }
    if (fstat(fd, st) < 0) {
        snprintf(why, cap, "cannot stat '%s': %s", p, strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(st->st_mode)) {
        snprintf(why, cap, "'%s' %s", p, S_ISDIR(st->st_mode) ? "is a directory"
                                         : "is not a regular file");
        close(fd);
        return -1;
    }
    return fd;
}

/* One file's count (and its size) into f. */
static int file_count(struct ddpc_token_file *f, enum ddpc_data_format fmt, char *why,
                      size_t cap)
{
    struct stat st;
    memset(&st, 0, sizeof st);
    int fd = open_regular(f->path, &st, why, cap);
    if (fd < 0)
        return -1;
    f->bytes = (int64_t)st.st_size;
    if (fmt == DDPC_DATA_TEXT) {
        f->count = f->bytes;
        close(fd);
        return 0;
    }
    unsigned char h[DDPC_SHARD_HEADER_BYTES];
    size_t got = 0;
    while (got < sizeof h) {
        ssize_t r = pread(fd, h + got, sizeof h - got, (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            snprintf(why, cap, "cannot read '%s': %s", f->path, strerror(errno));
            close(fd);
            return -1;
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    return tokens_shard_header(h, got, f->bytes, f->path, &f->count, why, cap);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names a path stands for, sorted: *names[n], owned by the caller
 * (free each and the array). Its first `literal` bytes are no pattern. */
static int expand(const char *path, size_t literal, char ***names, int *n,
                  char *why, size_t cap)
{
    *names = NULL;
    *n = 0;
    int pattern = strpbrk(path + literal, "*?[") != NULL;
    struct stat st;
    if (!pattern || (stat(path, &st) == 0 && S_ISREG(st.st_mode))) {
        /* one file (a name with [ ] in it that exists is that file) */
        char **v = malloc(sizeof *v);
        if (!v || !(v[0] = strdup(path))) {
            free(v);
            snprintf(why, cap, "out of memory");
            return -1;
        }
        *names = v;
        *n = 1;
        return 0;
    }
    /* the literal part's \ * ? [ escaped with a backslash (glob without
     * GLOB_NOESCAPE matches an escaped character as itself); messages keep
     * the path as it is */
    size_t len = strlen(path), esc = 0;
    for (size_t i = 0; i < literal; i++)
        esc += strchr("\\*?[", path[i]) != NULL;
    char *pat = malloc(len + esc + 1);
    if (!pat) {
        snprintf(why, cap, "out of memory");
        return -1;
    }
    char *o = pat;
    for (size_t i = 0; i < literal; i++) {
        if (strchr("\\*?[", path[i]))
            *o++ = '\\';
        *o++ = path[i];
    }
    memcpy(o, path + literal, len - literal + 1);
    glob_t g;
    memset(&g, 0, sizeof g);
    /* no GLOB_BRACE, GLOB_TILDE, GLOB_NOCHECK: only *, ? and [...] */
    int rc = glob(pat, GLOB_ERR | GLOB_NOSORT, NULL, &g);
    free(pat);
    if (rc == GLOB_NOMATCH || (rc == 0 && g.gl_pathc == 0)) {
        globfree(&g);
        snprintf(why, cap, "no file matches the pattern '%s'", path);
        return -1;
    }
    if (rc != 0) {
        globfree(&g);
        snprintf(why, cap, "cannot expand the pattern '%s': %s", path,
                 rc == GLOB_NOSPACE ? "out of memory" : "a directory could not be read");
        return -1;
    }
    if (g.gl_pathc > DDPC_TOKENS_MAX_FILES) {
        snprintf(why, cap, "the pattern '%s' matches %zu files, more than %d", path,
                 (size_t)g.gl_pathc, DDPC_TOKENS_MAX_FILES);
        globfree(&g);
        return -1;
    }
    char **v = calloc(g.gl_pathc, sizeof *v);
    for (size_t i = 0; v && i < g.gl_pathc; i++)
        if (!(v[i] = strdup(g.gl_pathv[i]))) {
            for (size_t k = 0; k < i; k++)
                free(v[k]);
            free(v);
            v = NULL;
        }
    int cnt = (int)g.gl_pathc;
    globfree(&g);
    if (!v) {
        snprintf(why, cap, "out of memory");
        return -1;
    }
    /* byte order, whatever the locale (glob's own sort follows LC_COLLATE) */
    qsort(v, (size_t)cnt, sizeof *v, cmp_str);
    *names = v;
    *n = cnt;
    return 0;
}

int tokens_list(const char *path, size_t literal, enum ddpc_data_format fmt,
                struct ddpc_token_files *tf, char *why, size_t cap)
{
    memset(tf, 0, sizeof *tf);
    tf->elem = fmt == DDPC_DATA_TOKENS ? 2 : 1;
    tf->header = fmt == DDPC_DATA_TOKENS ? DDPC_SHARD_HEADER_BYTES : 0;
    if (!path || !*path) {
        snprintf(why, cap, "no path given");
        return -1;
    }
    if (fmt != DDPC_DATA_TEXT && fmt != DDPC_DATA_TOKENS) {
        snprintf(why, cap, "not a token format");
        return -1;
    }
    char **names;
    int n;
    size_t len = strlen(path);
    if (expand(path, literal < len ? literal : len, &names, &n, why, cap) < 0)
        return -1;
    tf->f = calloc((size_t)n, sizeof *tf->f);
    if (!tf->f) {
        for (int i = 0; i < n; i++)
            free(names[i]);
        free(names);
        snprintf(why, cap, "out of memory");
        return -1;
    }
    for (int i = 0; i < n; i++)
        tf->f[i].path = names[i];   /* owned by tf from here */
    tf->n = n;
    free(names);
    for (int i = 0; i < n; i++) {
        if (file_count(&tf->f[i], fmt, why, cap) < 0) {
            tokens_list_free(tf);
            return -1;
        }
        tf->f[i].first = tf->total;
        tf->total += tf->f[i].count;
    }
    return 0;
}

int tokens_names_file(const char *path, size_t literal, const struct stat *st)
{
    char **names, why[64];
    int n, found = 0;
    if (!path || !*path)
        return 0;
    size_t len = strlen(path);
    if (expand(path, literal < len ? literal : len, &names, &n, why, sizeof why) < 0)
        return 0;
    for (int i = 0; i < n; i++) {
        struct stat si;
        found |= stat(names[i], &si) == 0 && si.st_dev == st->st_dev &&
                 si.st_ino == st->st_ino;
        free(names[i]);
    }
    free(names);
    return found;
}

void tokens_list_free(struct ddpc_token_files *tf)
{
    for (int i = 0; tf->f && i < tf->n; i++)
        free(tf->f[i].path);
    free(tf->f);
    tf->f = NULL;
    tf->n = 0;
    tf->total = 0;
}

void tokens_range(int64_t n, double lo, double hi, int64_t *a, int64_t *b)
{
    double fa = floor(lo * (double)n), fb = floor(hi * (double)n);
    *a = fa < 0 ? 0 : fa > (double)n ? n : (int64_t)fa;
    *b = fb < (double)*a ? *a : fb > (double)n ? n : (int64_t)fb;
}

int64_t tokens_windows(int64_t n, int64_t T, int64_t stride)
{
    if (T < 1 || stride < 1 || n < T + 1)
        return 0;
    return (n - T - 1) / stride + 1;
}

int tokens_file_part(const struct ddpc_token_file *f, int64_t a, int64_t b, int64_t *lo,
                     int64_t *hi)
{
    *lo = f->first > a ? f->first : a;
    *hi = f->first + f->count < b ? f->first + f->count : b;
    return *lo < *hi;
}

const struct ddpc_token_file *tokens_locate(const struct ddpc_token_files *tf, int64_t g,
                                            int64_t *in_file)
{
    int lo = 0, hi = tf->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const struct ddpc_token_file *f = &tf->f[mid];
        if (g < f->first)
            hi = mid - 1;
        else if (g >= f->first + f->count)
            lo = mid + 1;
        else {
            *in_file = g - f->first;
            return f;
        }
    }
    return NULL;
}
