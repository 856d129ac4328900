/* probe.h - the headers of IDX and NPY data files, read without reading the
 * data: the one prober of `ddpc check` (validate.c) and `ddpc plan`
 * (plan.c's sample count).
 *
 * Files are opened read-only and non-blocking, and only regular files are
 * read (a FIFO named as data must not hang check). gzip is transparent, as
 * in the runtime (data.c reads .gz and plain files alike through zlib).
 * Nothing here prints or exits; why gets the reason.
 */
#ifndef DDPC_PROBE_H
#define DDPC_PROBE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

struct ddpc_probe {
    int64_t dims[8];        /* sizes, outermost (the sample count) first */
    int nd;
    int idx_type;           /* IDX: the type byte (0x08 ubyte ... 0x0E double) */
    char descr[32];         /* NPY: the dtype, e.g. "<f4" */
    size_t header_bytes;    /* bytes before the first element */
};

/* 0 with p filled, -1 with why: "No such file or directory", "not a regular
 * file", "not an IDX file (bad header)", ... */
int probe_idx(const char *path, struct ddpc_probe *pr, char *why, size_t cap);
int probe_npy(const char *path, struct ddpc_probe *pr, char *why, size_t cap);

/* Opens path read-only and non-blocking, and only if it is a regular file
 * (st gets its stat). Returns the fd, or -1 with why ("is a directory",
 * "not a regular file", strerror). The spec reader (spec.c) opens specs
 * this way too. */
int probe_open(const char *path, struct stat *st, char *why, size_t cap);

/* Up to cap bytes of the file's start, inflated if it is gzipped. Returns
 * bytes read or -1 with why. */
long probe_head(const char *path, unsigned char *buf, size_t cap, char *why, size_t whycap);

#endif /* DDPC_PROBE_H */
