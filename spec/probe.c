/* probe.c - IDX and NPY headers (probe.h). */
#include "probe.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

int probe_open(const char *p, struct stat *st, char *why, size_t cap)
{
    int fd = open(p, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        snprintf(why, cap, "%s", strerror(errno));
        return -1;
    }
    if (fstat(fd, st) < 0) {
        snprintf(why, cap, "%s", strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(st->st_mode)) {
        snprintf(why, cap, S_ISDIR(st->st_mode) ? "is a directory" : "not a regular file");
        close(fd);
        return -1;
    }
    return fd;
}

long probe_head(const char *p, unsigned char *buf, size_t cap, char *why, size_t whycap)
{
    struct stat st;
    int fd = probe_open(p, &st, why, whycap);
    if (fd < 0)
        return -1;
    /* gzread passes a file that is not gzip through as it is */
    gzFile gz = gzdopen(fd, "rb");
    if (!gz) {
        close(fd);
        snprintf(why, whycap, "cannot start gzip decompression");
        return -1;
    }
    long got = 0;
    while ((size_t)got < cap) {
        size_t want = cap - (size_t)got;
        int r = gzread(gz, buf + got, want > (1u << 30) ? 1u << 30 : (unsigned)want);
        if (r < 0) {
            int zerr;
            snprintf(why, whycap, "gzip: %s", gzerror(gz, &zerr));
            gzclose(gz);
            return -1;
        }
        if (r == 0)
            break;
        got += r;
    }
    gzclose(gz);
    return got;
}

/* IDX: 0 0 type ndims, then ndims big-endian u32 sizes. */
int probe_idx(const char *path, struct ddpc_probe *pr, char *why, size_t cap)
{
    unsigned char b[4 + 4 * 8];
    long got = probe_head(path, b, sizeof b, why, cap);
    if (got < 0)
        return -1;
    if (got < 4 || b[0] || b[1] || !(b[2] == 0x08 || b[2] == 0x09 || (b[2] >= 0x0B && b[2] <= 0x0E)) ||
        b[3] < 1 || b[3] > 8 || got < 4 + 4 * (long)b[3]) {
        snprintf(why, cap, "not an IDX file (bad header)");
        return -1;
    }
    memset(pr, 0, sizeof *pr);
    pr->nd = b[3];
    pr->idx_type = b[2];
    pr->header_bytes = 4 + 4 * (size_t)b[3];
    for (int i = 0; i < pr->nd; i++) {
        const unsigned char *q = b + 4 + 4 * i;
        pr->dims[i] = ((int64_t)q[0] << 24) | ((int64_t)q[1] << 16) | ((int64_t)q[2] << 8) | q[3];
    }
    return 0;
}

/* NPY: "\x93NUMPY" major minor, header length, then a Python dict literal
 * with 'descr', 'fortran_order' and 'shape'. */
int probe_npy(const char *path, struct ddpc_probe *pr, char *why, size_t cap)
{
    unsigned char b[4096 + 16];
    long got = probe_head(path, b, sizeof b - 1, why, cap);
    if (got < 0)
        return -1;
    if (got < 10 || memcmp(b, "\x93NUMPY", 6) != 0) {
        snprintf(why, cap, "not an NPY file (bad magic)");
        return -1;
    }
    size_t hl, off;
    if (b[6] == 1) {
        hl = (size_t)b[8] | (size_t)b[9] << 8;
        off = 10;
    } else {
        hl = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
        off = 12;
    }
    if (off + hl > (size_t)got) {
        snprintf(why, cap, "NPY header longer than 4096 bytes");
        return -1;
    }
    b[off + hl] = '\0';
    memset(pr, 0, sizeof *pr);
    pr->header_bytes = off + hl;
    const char *h = (const char *)b + off;
    if (strstr(h, "'fortran_order': True")) {
        snprintf(why, cap, "Fortran-order NPY arrays are not supported; save with C order");
        return -1;
    }
    const char *d = strstr(h, "'descr':");
    const char *s = strstr(h, "'shape':");
    if (!d || !s) {
        snprintf(why, cap, "NPY header lacks descr or shape");
        return -1;
    }
    d = strchr(d + 8, '\'');
    const char *de = d ? strchr(d + 1, '\'') : NULL;
    if (!d || !de || (size_t)(de - d - 1) >= sizeof pr->descr) {
        snprintf(why, cap, "NPY header has a malformed descr");
        return -1;
    }
    memcpy(pr->descr, d + 1, (size_t)(de - d - 1));
    pr->descr[de - d - 1] = '\0';
    s = strchr(s, '(');
    if (!s) {
        snprintf(why, cap, "NPY header has a malformed shape");
        return -1;
    }
    s++;
    while (pr->nd < 8) {
        while (*s == ' ')
            s++;
        if (*s == ')')
            break;
        char *end;
        errno = 0;
        long long v = strtoll(s, &end, 10);
        if (end == s || errno || v < 0) {
            snprintf(why, cap, "NPY header has a malformed shape");
            return -1;
        }
        pr->dims[pr->nd++] = v;
        s = end;
        while (*s == ' ')
            s++;
        if (*s == ',')
            s++;
    }
    return 0;
}
