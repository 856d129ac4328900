/* tokens.h - token streams on disk: `format: text` (a file's bytes) and
 * `format: tokens` (llm.c's shards), read the same way by `ddpc check`
 * (validate.c), `ddpc plan` (plan.c) and the job's loader (runtime/data.c).
 *
 * defines: tokens_list, tokens_list_free, tokens_shard_header, tokens_range,
 *          tokens_windows, tokens_file_part, tokens_locate, tokens_names_file
 *
 * A shard (llm.c's dev/data/data_common.py write_datafile): 256 little-endian
 * int32 (magic 20240520, version 1, token count n, the rest unused), then n
 * little-endian uint16 tokens; the file is exactly 1024 + 2n bytes.
 * A path is one file, or a glob(3) pattern: `*`, `?` and `[...]`, no braces,
 * no `~`, no shell (glob never runs anything); its matches are read in
 * strcmp order of their names, one stream (text files too: fortunes/ *.u8). Data files are untrusted: every count is
 * checked against the file's size before it is believed.
 * Files are opened read-only and non-blocking, regular files only. Nothing
 * here prints or exits; `why` gets the reason, naming the file.
 */
#ifndef DDPC_TOKENS_H
#define DDPC_TOKENS_H

#include <stddef.h>
#include <stdint.h>
#include "job.h"

#define DDPC_SHARD_MAGIC        20240520
#define DDPC_SHARD_VERSION      1
#define DDPC_SHARD_HEADER_BYTES 1024    /* 256 int32 */
#define DDPC_TOKENS_MAX_FILES   65536   /* shards one pattern may name */

struct ddpc_token_file {
    char   *path;       /* owned */
    int64_t count;      /* tokens in the file */
    int64_t first;      /* index of its first token in the stream */
    int64_t bytes;      /* the file's size when it was listed */
};

struct ddpc_token_files {
    struct ddpc_token_file *f;  /* [n], in stream order; owned */
    int     n;
    int64_t total;      /* tokens in all files */
    int     elem;       /* bytes per token: 1 (text), 2 (tokens) */
    size_t  header;     /* bytes before the first token: 0 (text), 1024 (tokens) */
};

/* The files of a text or tokens source (the path, or the pattern's
 * matches) and their token counts: text: a file's size; tokens: from each
 * header, checked (tokens_shard_header). The first `literal` bytes of path
 * (the directory ddpc joined a relative path on: the source's path_literal)
 * are taken as they are, never as pattern characters; 0: all of path is
 * the user's. 0, or -1 with why ("no file matches the pattern
 * 'd/train_*.bin'", "'d/a.bin' is not an llm.c token shard: ..."), which
 * names path unescaped. tokens_list_free is safe on a zeroed list; a failed
 * call frees what it made. */
int  tokens_list(const char *path, size_t literal, enum ddpc_data_format fmt,
                 struct ddpc_token_files *tf, char *why, size_t cap);
void tokens_list_free(struct ddpc_token_files *tf);

/* Checks one shard header (h: its first 1024 bytes, got of them read) of a
 * file of file_bytes bytes named name: magic, version, count >= 0 and
 * 1024 + 2 count == file_bytes. 0 with *count, or -1 with why. */
int  tokens_shard_header(const unsigned char *h, size_t got, int64_t file_bytes,
                         const char *name, int64_t *count, char *why, size_t cap);

/* The tokens [*a, *b) that range [lo, hi] keeps of a stream of n:
 * floor(lo n) and floor(hi n) (hi = 1 keeps the last token). */
void tokens_range(int64_t n, double lo, double hi, int64_t *a, int64_t *b);

/* Windows of T + 1 tokens at this stride (T + 1: training's non-overlapping
 * windows; T: test windows, whose targets overlap the next input by one)
 * in a stream of n tokens: floor((n - T - 1) / stride) + 1, 0 when n < T + 1. */
int64_t tokens_windows(int64_t n, int64_t T, int64_t stride);

/* The part of stream range [a, b) that file f holds, as stream indices
 * [*lo, *hi); 0 when it holds none of it. */
int  tokens_file_part(const struct ddpc_token_file *f, int64_t a, int64_t b, int64_t *lo,
                      int64_t *hi);

/* The file holding stream token g, and g's index in that file; NULL when g
 * is outside the list. */
const struct ddpc_token_file *tokens_locate(const struct ddpc_token_files *tf, int64_t g,
                                            int64_t *in_file);

/* 1 when one of the files path names (the file itself, or one of the
 * pattern's matches; literal as in tokens_list) has st_dev and st_ino of
 * *st; 0 when none does, or the pattern matches nothing or cannot be read.
 * For same_file.h: no output of the job may be one of its data files. */
struct stat;
int  tokens_names_file(const char *path, size_t literal, const struct stat *st);

#endif /* DDPC_TOKENS_H */
