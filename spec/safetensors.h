/* safetensors.h - reading a safetensors header, and checking a file
 * against a model as model.init_from reads it.
 *
 * defines: st_skip_ws, st_field, st_string_end, st_value_end, st_next,
 *          st_ints (the header's JSON, as safetensors writes it),
 *          st_check_net (check's model.init_from rule)
 *
 * The st_ helpers are the one reader of the header's JSON: the run's
 * ckpt_read_net (runtime/ckpt.c) and check's st_check_net both walk the
 * header with them, so check refuses what the run would. The file is
 * untrusted: every pointer stays inside [p, end), every offset is checked
 * against the file's size. No allocation beyond the header and one read
 * buffer; nothing is printed.
 */
#ifndef DDPC_SAFETENSORS_H
#define DDPC_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "layers.h"

/* A header larger than this is refused (PyTorch's own files of a few
 * thousand tensors have headers of a few hundred KiB). */
#define ST_MAX_HEADER ((uint64_t)64 << 20)

/* p past spaces, tabs and newlines (at most end). */
const char *st_skip_ws(const char *p, const char *end);
/* Inside one tensor's {...} (entry [p, end)): the value after "key":, or
 * NULL. */
const char *st_field(const char *p, const char *end, const char *key);
/* p at a string's opening quote: just past its closing one, or NULL. */
const char *st_string_end(const char *p, const char *end);
/* p at a JSON value: just past it (strings and nesting skipped), or NULL. */
const char *st_value_end(const char *p, const char *end);
/* The next entry of the header's top-level object, *pp just inside its
 * '{' or after the previous entry: its key [*k, *k + *kl) (quotes off,
 * escapes kept) and its value [*v, *ve). 1: an entry, 0: the object's
 * end, -1: not JSON as safetensors writes it. Only top-level keys are
 * tensor names: a name in __metadata__ or inside a value is not one. */
int st_next(const char **pp, const char *end, const char **k, size_t *kl, const char **v,
            const char **ve);
/* "[a, b, ...]" of non-negative integers at p; returns the count or -1. */
int st_ints(const char *p, const char *end, uint64_t *v, int max);

/* One problem st_check_net found (a whole sentence, no file name). */
typedef void (*st_report_fn)(void *ctx, const char *why);

/* Checks the safetensors file at file (named path in reports; NULL: file)
 * against net as model.init_from's
 * reader does: exactly net's tensors by name (and a tied weight's second
 * name, holding the same values), each F32 (num_batches_tracked I64 or
 * F32) of net's shape with data_offsets inside the file, and every float
 * finite (ddpc_first_nonfinite; the tensor and index are named). Reports
 * every problem in one pass: another model's file is one report listing
 * the names it lacks and holds, each wrong tensor one more. Returns the
 * number of reports (0: the run would load the file). */
int st_check_net(const char *file, const char *path, const struct ddpc_net *net,
                 st_report_fn report, void *ctx);

#endif /* DDPC_SAFETENSORS_H */
