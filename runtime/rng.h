/* rng.h - the runtime's one seeded PRNG: splitmix64 seeding xoshiro256**.
 *
 * Owns: every random number the runtime draws (parameter init, sampler
 * shuffles, synthetic data). Same seed, same stream, on every platform: no
 * libc rand(), no global state, no floating point in the integer paths.
 * Header-only so tests and every module use the identical arithmetic.
 */
#ifndef DDPC_RNG_H
#define DDPC_RNG_H

#include <math.h>
#include <stdint.h>

struct ddpc_rng {
    uint64_t s[4];
};

/* splitmix64: expands one 64-bit seed into well-mixed state words. */
static inline uint64_t rng_splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline void rng_seed(struct ddpc_rng *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        r->s[i] = rng_splitmix64(&x);
}

/* Derives an independent stream for (seed, stream id), e.g. (seed, epoch). */
static inline void rng_seed2(struct ddpc_rng *r, uint64_t seed, uint64_t stream)
{
    uint64_t x = seed;
    uint64_t mixed = rng_splitmix64(&x) ^ (stream * 0xD1B54A32D192ED03ull);
    rng_seed(r, mixed);
}

static inline uint64_t rng_rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

/* xoshiro256** */
static inline uint64_t rng_next(struct ddpc_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rng_rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rng_rotl(s[3], 45);
    return result;
}

/* Uniform integer in [0, n), n >= 1, without modulo bias: reject the low
 * (2^64 mod n) values so every residue has the same number of preimages. */
static inline uint64_t rng_below(struct ddpc_rng *r, uint64_t n)
{
    uint64_t threshold = (0 - n) % n;
    for (;;) {
        uint64_t x = rng_next(r);
        if (x >= threshold)
            return x % n;
    }
}

/* Uniform double in [0, 1) with 53 random bits. */
static inline double rng_uniform(struct ddpc_rng *r)
{
    return (double)(rng_next(r) >> 11) * 0x1.0p-53;
}

/* Standard normal by Box-Muller (one value per call; the pair's second value
 * is dropped so the stream position never depends on call history). */
static inline double rng_normal(struct ddpc_rng *r)
{
    double u1 = 1.0 - rng_uniform(r);          /* (0, 1]: log is finite */
    double u2 = rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586476925 * u2);
}

#endif /* DDPC_RNG_H */
