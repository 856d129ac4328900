/* finite.h - the one scan for NaN and infinity in float32 values.
 *
 * defines: ddpc_first_nonfinite
 *
 * A single NaN or infinity in training data or in initial weights trains
 * the model to nothing (or to NaN) without an error. The data loader
 * (runtime/data.c), check's reading of model.init_from
 * (spec/safetensors.c st_check_net) and the run's reading of it call this
 * one scan, so what check refuses and what the run refuses are the same
 * values.
 */
#ifndef DDPC_FINITE_H
#define DDPC_FINITE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Index of the first NaN or infinity in x[n], or -1. Float bits, not
 * isfinite(), so the loop vectorizes: an all-ones exponent is inf or nan.
 * The scan costs one read of the array (~10 ms per 100 MB). */
static inline int64_t ddpc_first_nonfinite(const float *x, int64_t n)
{
    const int64_t block = 4096;
    for (int64_t b = 0; b < n; b += block) {
        int64_t end = b + block < n ? b + block : n;
        uint32_t bad = 0;
        for (int64_t i = b; i < end; i++) {
            uint32_t u;
            memcpy(&u, &x[i], 4);
            bad |= (uint32_t)((u & 0x7f800000u) == 0x7f800000u);
        }
        if (bad)
            for (int64_t i = b; i < end; i++)
                if (!isfinite(x[i]))
                    return i;
    }
    return -1;
}

/* "NaN", "+infinity" or "-infinity" for a non-finite x. */
static inline const char *ddpc_nonfinite_name(float x)
{
    return isnan(x) ? "NaN" : x > 0 ? "+infinity" : "-infinity";
}

#endif /* DDPC_FINITE_H */
