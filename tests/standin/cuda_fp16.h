/* cuda_fp16.h (stand-in) - __half and its conversions, by the host
 * compiler's _Float16 (IEEE binary16, round to nearest even, overflow to
 * infinity, as __float2half does). */
#ifndef DDPC_STANDIN_CUDA_FP16_H
#define DDPC_STANDIN_CUDA_FP16_H

#include <stdint.h>
#include <string.h>

typedef struct {
    uint16_t x;
} __half;

static inline __half __float2half(float f)
{
    _Float16 h = (_Float16)f;
    __half r;
    memcpy(&r.x, &h, sizeof r.x);
    return r;
}

static inline float __half2float(__half b)
{
    _Float16 h;
    memcpy(&h, &b.x, sizeof h);
    return (float)h;
}

#endif
