/* spec.h - the spec front end as the compiler sees it: file in, job out.
 *
 * spec_load_job reads a YAML file, validates it against spec/keys.def and the
 * cross-key rules, and fills a struct ddpc_job. All diagnostics go to d; the
 * function never prints and never exits. Strings in the job point into
 * memory owned by the returned struct spec_doc: free it with spec_doc_free
 * after the last use of the job.
 */
#ifndef DDPC_SPEC_H
#define DDPC_SPEC_H

#include <stddef.h>
#include "job.h"
#include "diag.h"

struct spec_doc;   /* opaque: the positioned tree, string arena, raw bytes */

struct spec_cache;  /* memo of data-file facts, see spec_cache_new */

struct spec_options {
    /* Read data headers (IDX/NPY/CSV) at check time for the cross-key rules on
     * layer sizes and dataset size. Off makes check independent of the data. */
    int read_data_headers;
    /* Optional (NULL: none). Remembers what was read from each data file,
     * keyed by path, device, inode, size and mtime, so checking many specs
     * that share data reads each file once. Not thread-safe. */
    struct spec_cache *cache;
    /* Overrides, "key.path=value" each (value: YAML text), applied in order
     * to the file's tree before validation (`ddpc check|plan|build --set`).
     * A diagnostic about an overridden value names "--set key.path=value"
     * instead of a line of the file. */
    const char *const *overrides;
    int n_overrides;
    /* The spec's relative paths resolve in the working directory, not in
     * its file's: set by spec_load_job for a spec read from a pipe or a
     * character device (/dev/stdin, /dev/fd/N, <(...)), as for "-". The
     * default job name is then "stdin". */
    int paths_from_cwd;
};

struct spec_cache *spec_cache_new(void);   /* NULL when out of memory (then run without) */
void spec_cache_free(struct spec_cache *cache);   /* NULL is fine */

/* The name of standard input in diagnostics: spec_load_job reads the spec
 * from standard input when path is "-" (`cat job.yaml | ddpc check -`), and
 * resolves its relative paths against the working directory. A path that
 * names a pipe or a character device (/dev/stdin, `ddpc check <(...)`) is
 * read the same way, to its end, and keeps its name in diagnostics. */
#define DDPC_SPEC_STDIN "<stdin>"

/* Returns 0 when the spec is valid (warnings allowed), 1 when it has errors,
 * 2 when the file could not be read. *doc is set in every case where the
 * file was read (free it); on 2 it is NULL. opt NULL: read data headers, no
 * cache. The file's diagnostics are appended to d in source order. */
int spec_load_job(const char *path, const struct spec_options *opt, struct ddpc_job *job,
                  struct spec_doc **doc, struct ddpc_diag *d);
/* The spec as it is built: the file's bytes exactly as read, then, when
 * there are overrides, one comment line per override
 * ("# ddpc --set epochs=2", control characters escaped), so the text baked
 * into a job, and the hash taken of it, differ from the file's whenever an
 * override makes a different job. NUL-terminated; len without the NUL. */
const char *spec_doc_text(const struct spec_doc *doc, size_t *len);
void spec_doc_free(struct spec_doc *doc);

/* Writes the JSON Schema (2020-12) of the language, generated from keys.def. */
void spec_write_schema(FILE *out);
/* Writes the reference document (Markdown), generated from keys.def. */
void spec_write_reference(FILE *out);
/* Writes docs/coming-from.md: other tools' names and values and ddpc's
 * (spec/aliases.def, keys.def), with the validator's own messages. */
void spec_write_coming_from(FILE *out);

/* Hex SHA-256 of len bytes into out[65]. Used for the spec hash that
 * checkpoints and the job_config.h banner carry. */
void spec_sha256_hex(const void *data, size_t len, char out[65]);

#endif /* DDPC_SPEC_H */
