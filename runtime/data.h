/* data.h - datasets in memory and the formats they are read from.
 *
 * The launcher loads each dataset once, before fork; workers read the same
 * pages (copy-on-write, never written), so W workers cost one copy.
 * Inputs stay in their stored type (uint8 pixels are 4x smaller than float);
 * data_gather converts a batch to float on the fly.
 */
#ifndef DDPC_DATA_H
#define DDPC_DATA_H

#include <stddef.h>
#include <stdint.h>
#include "job.h"
#include "err.h"

enum ddpc_dtype { DDPC_DTYPE_U8, DDPC_DTYPE_F32 };

struct ddpc_dataset {
    int64_t n;              /* samples */
    int32_t features;       /* floats per sample after conversion */
    int32_t classes;        /* > 0: labels are class indices; 0: regression */
    int32_t targets;        /* regression: floats per target (0 for classes) */
    enum ddpc_dtype dtype;  /* of x */
    float   u8_scale;       /* uint8 x is multiplied by this (1/255) */
    void   *x;              /* [n, features], dtype; owned */
    int32_t *labels;        /* [n] when classes > 0; owned */
    float   *y;             /* [n, targets] when regression; owned */
    char    source[256];    /* what it was loaded from, for messages */
    /* CSV: another column than label_column whose values are all whole
     * numbers >= 0 (it may be the labels the spec missed), -1 if none, and
     * its largest value; label_ok says whether label_column's were too */
    int32_t label_hint;
    int32_t label_hint_max;
    int32_t label_ok;
    char    labels_source[256]; /* the file the labels came from (IDX/NPY: the
                                   labels file; CSV: the file itself) */
    char    label_note[320];  /* CSV without class labels: which line's label
                                 made them targets ("" if none did) */
};

/* Reads one source (IDX .gz or plain, NPY, CSV, synthetic). Errors name the
 * file and say what is wrong (missing, bad magic, truncated, mismatched
 * counts, a NaN or infinity in float data with its sample and feature or
 * its CSV line). data_free is safe after a failed load. */
int  data_load(const struct ddpc_data_source *src, struct ddpc_dataset *ds,
               struct ddpc_err *e);
void data_free(struct ddpc_dataset *ds);

/* x_out[count, features] = inputs of samples idx[0..count) as float;
 * labels_out[count] or y_out[count, targets] likewise (either may be NULL). */
void data_gather(const struct ddpc_dataset *ds, const int64_t *idx, int count,
                 float *x_out, int32_t *labels_out, float *y_out);
/* Hints the CPU to start loading the inputs of samples idx[0..count) (the
 * next batch) into cache, so the next data_gather does not wait on DRAM.
 * No effect on results. */
void data_prefetch(const struct ddpc_dataset *ds, const int64_t *idx, int count);

#endif /* DDPC_DATA_H */
