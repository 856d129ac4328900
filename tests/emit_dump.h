/* emit_dump.h - every field of a struct ddpc_job as text, bit-exact.
 *
 * Included by test_emit.c and by the little programs it compiles against a
 * generated job_config.h: the same code prints the job ddpc was given and
 * the job the header baked, so any field the template drops or changes
 * shows up as a difference. The fields come from spec/keys.def through
 * keytab.h's walk (test_validate checks that the table reaches every field
 * of job.h), so a new key needs nothing here. Strings are hex (NULL is
 * "null"), doubles %a, lists every element up to their capacity. */
#ifndef DDPC_EMIT_DUMP_H
#define DDPC_EMIT_DUMP_H

#include <stdio.h>
#include "job.h"
#include "keytab.h"

static void dump_field(void *ctx, const struct ddpc_field *fd, const char *path, const char *p,
                       const char *blk)
{
    FILE *f = ctx;
    (void)blk;
    fprintf(f, "%s=", path);
    switch (fd->type) {
    case DDPC_FT_I32:
    case DDPC_FT_BOOL:
    case DDPC_FT_I64:
    case DDPC_FT_ENUM:
        fprintf(f, "%lld\n", (long long)ddpc_field_i64(fd, p));
        break;
    case DDPC_FT_U64:
        fprintf(f, "%llu\n", (unsigned long long)ddpc_field_u64(p));
        break;
    case DDPC_FT_F64:
        fprintf(f, "%a\n", ddpc_field_f64(p));
        break;
    case DDPC_FT_STR: {
        const char *s = ddpc_field_str(p);
        if (!s)
            fputs("null", f);
        for (const unsigned char *c = (const unsigned char *)s; c && *c; c++)
            fprintf(f, "%02x", *c);
        fputc('\n', f);
        break;
    }
    case DDPC_FT_I32_LIST:
        for (size_t i = 0; i < fd->size / sizeof(int32_t); i++) {
            int32_t v;
            memcpy(&v, p + i * sizeof v, sizeof v);
            fprintf(f, "%s%d", i ? "," : "", v);
        }
        fputc('\n', f);
        break;
    default:
        fputs("?\n", f);
    }
}

static void dump_job(FILE *f, const struct ddpc_job *j)
{
    ddpc_job_walk(j, dump_field, f);
}

#endif
