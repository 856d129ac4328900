/* same_file.h - do two paths name one file, whether it exists yet or not:
 * one rule for `ddpc check` (validate.c) and the job's start (ddprt.c),
 * which refuse two outputs that would overwrite each other, and an output
 * that would overwrite one of the job's inputs.
 *
 * defines: same_file, job_input_at
 */
#ifndef DDPC_SAME_FILE_H
#define DDPC_SAME_FILE_H

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "job.h"
#include "tokens.h"

/* 1 when a and b are one file: the same device and inode when both exist,
 * else (neither exists) the same last component in the same directory
 * ("out" and "./out", "a/../out"); 0 otherwise, or when it cannot tell. */
static inline int same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    int ea = stat(a, &sa) == 0, eb = stat(b, &sb) == 0;
    if (ea || eb)
        return ea && eb && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    if (strcmp(a, b) == 0)
        return 1;
    const char *ba = strrchr(a, '/'), *bb = strrchr(b, '/');
    if (strcmp(ba ? ba + 1 : a, bb ? bb + 1 : b) != 0)
        return 0;
    char da[PATH_MAX], db[PATH_MAX], ra[PATH_MAX], rb[PATH_MAX];
    size_t la = ba ? (size_t)(ba - a) + (ba == a) : 1, lb = bb ? (size_t)(bb - b) + (bb == b) : 1;
    if (la >= sizeof da || lb >= sizeof db)
        return 0;
    memcpy(da, ba ? a : ".", la);
    da[la] = '\0';
    memcpy(db, bb ? b : ".", lb);
    db[lb] = '\0';
    return realpath(da, ra) && realpath(db, rb) && strcmp(ra, rb) == 0;
}

/* The path of the job's input that is the file *so (a data file, one of
 * the files a text or tokens source's pattern matches, model.init_from,
 * the checkpoint it resumes from), or NULL; *key names it, resume_key the
 * checkpoint (the job may have it from --resume). */
static inline const char *job_input_at(const struct ddpc_job *j, const struct stat *so,
                                       const char *resume_key, const char **key)
{
    const struct ddpc_data_source *tr = &j->data.train, *te = &j->data.test;
    int trs = tr->format == DDPC_DATA_TEXT || tr->format == DDPC_DATA_TOKENS;
    int tes = te->format == DDPC_DATA_TEXT || te->format == DDPC_DATA_TOKENS;
    const struct { const char *path, *what; const struct ddpc_data_source *stream; } in[] = {
        { tr->inputs, "data.train.inputs", NULL }, { tr->labels, "data.train.labels", NULL },
        { tr->path, "data.train.path", trs ? tr : NULL },
        { te->inputs, "data.test.inputs", NULL }, { te->labels, "data.test.labels", NULL },
        { te->path, "data.test.path", tes ? te : NULL },
        { j->model.init_from, "model.init_from", NULL },
        { j->checkpoint.resume == DDPC_RESUME_PATH ? j->checkpoint.resume_path : NULL,
          resume_key, NULL },
    };
    struct stat si;
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++) {
        if (!in[i].path || !in[i].path[0])
            continue;
        if (stat(in[i].path, &si) == 0 && si.st_dev == so->st_dev && si.st_ino == so->st_ino) {
            *key = in[i].what;
            return in[i].path;
        }
        /* a token source's path may be a pattern: each of its files */
        if (in[i].stream &&
            tokens_names_file(in[i].path, (size_t)in[i].stream->path_literal, so)) {
            *key = in[i].stream == tr ? "one of the files data.train.path matches"
                                      : "one of the files data.test.path matches";
            return in[i].path;
        }
    }
    return NULL;
}

/* The job's directory output (logging.tensorboard, checkpoint_dir) that
 * the file output path (logging.metrics_csv, checkpoint.export) is too, or
 * NULL: the job would make the one and fail on the other with part of its
 * output written. */
static inline const char *job_output_dir_at(const struct ddpc_job *j, const char *path)
{
    const struct { const char *path, *key; } dir[] = {
        { j->logging.tensorboard, "logging.tensorboard" },
        { j->checkpoint_dir, "checkpoint_dir" },
    };
    for (size_t d = 0; path && path[0] && d < sizeof dir / sizeof dir[0]; d++)
        if (dir[d].path && dir[d].path[0] && same_file(path, dir[d].path))
            return dir[d].key;
    return NULL;
}

#endif /* DDPC_SAME_FILE_H */
