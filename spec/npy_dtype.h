/* npy_dtype.h - the NPY dtypes ddpc reads: one rule for `ddpc check`
 * (validate.c) and the loader (runtime/data.c), so that check never passes
 * a file the job then refuses (it once did, for float16).
 *
 * defines: struct npy_dtype, npy_dtype_parse, NPY_DTYPES_READ
 */
#ifndef DDPC_NPY_DTYPE_H
#define DDPC_NPY_DTYPE_H

#include <stddef.h>
#include <stdint.h>

struct npy_dtype {
    char kind;         /* 'u' unsigned (and bool), 'i' signed, 'f' float */
    int  size;         /* bytes: 1, 2, 4, 8 */
    int  big_endian;
    int  boolean;      /* numpy's bool ('b1'): kind 'u', size 1, values 0 and 1 */
};

/* What a refusal lists. */
#define NPY_DTYPES_READ "float16, float32, float64, or an integer or bool type"

/* descr: the header's dtype string without its quotes ("<f4", "|u1",
 * ">i8", "<f2", "|b1"), len its length. 0 with dt filled when ddpc reads
 * it: integers and bools of 1, 2, 4 or 8 bytes and floats of 2, 4 or 8, in
 * either byte order; -1 otherwise (complex, strings, records, float128). */
static inline int npy_dtype_parse(const char *descr, size_t len, struct npy_dtype *dt)
{
    if (len != 3)
        return -1;
    char order = descr[0], kind = descr[1];
    int size = descr[2] - '0';
    if (order != '<' && order != '>' && order != '|' && order != '=')
        return -1;
    if (size != 1 && size != 2 && size != 4 && size != 8)
        return -1;
    int boolean = kind == 'b';
    if (boolean)
        kind = 'u';   /* numpy's bool: one byte, 0 or 1 */
    else if (kind != 'u' && kind != 'i' && kind != 'f')
        return -1;
    if (kind == 'f' && size == 1)
        return -1;
    const uint16_t one = 1;
    dt->kind = kind;
    dt->size = size;
    dt->boolean = boolean;
    dt->big_endian = order == '>' || (order == '=' && *(const unsigned char *)&one == 0);
    return 0;
}

#endif /* DDPC_NPY_DTYPE_H */
