/* cuda_bf16.h (stand-in) - __nv_bfloat16 and the conversions ops_cuda.cu's
 * kernels and the stand-in's cuBLAS use: the bits of a bfloat16, rounded
 * to nearest even from a float (a NaN stays a NaN), as the device does. */
#ifndef DDPC_STANDIN_CUDA_BF16_H
#define DDPC_STANDIN_CUDA_BF16_H

#include <stdint.h>
#include <string.h>

typedef struct {
    uint16_t x;
} __nv_bfloat16;

static inline __nv_bfloat16 __float2bfloat16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    __nv_bfloat16 b;
    if ((u & 0x7fffffffu) > 0x7f800000u)
        b.x = (uint16_t)((u >> 16) | 0x40);          /* a quiet NaN */
    else
        b.x = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    return b;
}

static inline float __bfloat162float(__nv_bfloat16 b)
{
    uint32_t u = (uint32_t)b.x << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

#endif
