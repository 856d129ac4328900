/* data.h - datasets in memory and the formats they are read from.
 *
 * The launcher loads each dataset once, before fork; workers read the same
 * pages (copy-on-write, never written), so W workers cost one copy.
 * Inputs stay in their stored type (uint8 pixels are 4x smaller than float;
 * token streams stay uint8 or uint16); data_gather converts a batch to
 * float on the fly.
 */
#ifndef DDPC_DATA_H
#define DDPC_DATA_H

#include <stddef.h>
#include <stdint.h>
#include "job.h"
#include "err.h"
#include "tokens.h"

/* U16: a `format: tokens` stream (llm.c's uint16 tokens) */
enum ddpc_dtype { DDPC_DTYPE_U8, DDPC_DTYPE_F32, DDPC_DTYPE_U16 };

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
    int64_t label_max_line;   /* CSV: the line of the first row holding the
                                 largest label; 0 for other formats */
    int32_t seq_len;        /* labels per sample: 0 or 1 (one label, as above);
                               T for token windows */
    /* Token streams (format text, tokens): x is the stream itself, [ntok]
     * uint8 (text) or uint16 (tokens), never copied per window. Samples are
     * windows of T + 1 tokens starting at i * stride (data_set_windows):
     * inputs d[s .. s+T), labels d[s+1 .. s+T+1). n and features are 0
     * until data_set_windows sets them. */
    int64_t ntok;           /* tokens loaded (the source's range) */
    int64_t stride;         /* 0: not a token stream, or no windows yet */
    int32_t max_token;      /* the largest token loaded; -1 if none */
    int64_t tok_first;      /* the stream index (all files) of x's token 0 */
    double  range_lo, range_hi;       /* the source's range, for messages */
    struct ddpc_token_files files;    /* where the stream came from; owned */
};

/* Reads one source (IDX .gz or plain, NPY, CSV, synthetic, text, tokens).
 * Errors name the file and say what is wrong (missing, bad magic, truncated,
 * mismatched counts, a NaN or infinity in float data with its sample and
 * feature or its CSV line). A token source is read whole (its range) and
 * has no samples until data_set_windows. data_free is safe after a failed
 * load. */
int  data_load(const struct ddpc_data_source *src, struct ddpc_dataset *ds,
               struct ddpc_err *e);
void data_free(struct ddpc_dataset *ds);

/* The memory data_load takes, estimated before it runs from the files'
 * sizes and headers (the launcher's memory preflight compares it with a
 * cgroup limit before loading: ddprt.c). Bytes of anonymous memory, which
 * a cgroup cannot reclaim: peak, while loading (for a gzip file read whole
 * by libdeflate, its compressed bytes and all it decompresses to at once);
 * held, the dataset after it; gz and raw, the gzip files' compressed bytes
 * and what they decompress to (for the message). A lower bound where the
 * files cannot tell (a CSV's parsed floats, a multi-member gzip's size). */
struct data_mem {
    uint64_t peak, held;
    uint64_t gz, raw;
};

/* One file of `bytes` on disk, arithmetic only: gzip says it is one, isize
 * is its trailer's ISIZE (the uncompressed size mod 2^32, of the last
 * member only), known the uncompressed size when its header told it (0
 * when not), whole whether the build decompresses a gzip file whole
 * (libdeflate). Sets m's peak and held (the uncompressed size), adds to
 * gz and raw. */
void data_file_mem(uint64_t bytes, int gzip, uint32_t isize, uint64_t known, int whole,
                   struct data_mem *m);
/* Two sources loaded at once (the test set on a second thread): the
 * larger of one's peak while the other is held. */
uint64_t data_mem_together(const struct data_mem *a, const struct data_mem *b);
/* src's estimate; -1 when its files cannot be read (data_load says why),
 * never blocking (a FIFO is not opened for reading). */
int  data_mem_estimate(const struct ddpc_data_source *src, struct data_mem *m);

/* Makes a loaded token stream a dataset of windows: T inputs and T labels
 * per sample (features = seq_len = T), window i starting at token
 * i * stride: stride T + 1 for training (non-overlapping windows of T + 1),
 * T for evaluation (every token but the first is a target exactly once).
 * Errors, naming the file: a token >= vocab (its file, position and value;
 * vocab 0 skips the check), fewer than T + 1 tokens, a source that is not
 * a token stream. */
int  data_set_windows(struct ddpc_dataset *ds, int32_t T, int64_t stride, int32_t vocab,
                      struct ddpc_err *e);

/* x_out[count, features] = inputs of samples idx[0..count) as float;
 * labels_out[count * max(seq_len, 1)] or y_out[count, targets] likewise
 * (either may be NULL). Token windows: x_out[i, t] = d[s + t] and
 * labels_out[i * T + t] = d[s + t + 1], s = idx[i] * stride. */
void data_gather(const struct ddpc_dataset *ds, const int64_t *idx, int count,
                 float *x_out, int32_t *labels_out, float *y_out);
/* n stored elements of an IDX or NPY array (kind 'u' 'i' 'f', size bytes
 * each, byte order, numpy bool) into out[n] as the floats a model reads:
 * exactly what data_load then data_gather make of them (uint8 pixels times
 * 1/255, bools 0 or 1, anything else its value as float32). For inputs
 * read in pieces (./job --predict, predict.c). */
void data_elements_to_float(const void *raw, size_t n, char kind, int size, int big_endian,
                            int boolean, float *out);
/* One CSV field as data_load reads it (blanks and quotes around it,
 * decimal only): 1 with *v set, 0 when it is not a number. */
int  data_csv_number(const char *s, double *v);

/* Hints the CPU to start loading the inputs of samples idx[0..count) (the
 * next batch) into cache, so the next data_gather does not wait on DRAM.
 * No effect on results. */
void data_prefetch(const struct ddpc_dataset *ds, const int64_t *idx, int count);

#endif /* DDPC_DATA_H */
