/* crc32c.c - throughput of crc32c() (runtime/crc32c.c), the checksum of
 * every checkpoint byte, against a byte-at-a-time table loop.
 *
 *   make bench
 *   build/bench/crc32c [MiB]      default 64 MiB, best of 5
 *
 * Prints GB/s for both and checks they agree; exits non-zero if not. The
 * unit tests check values only: speed belongs here, where a busy machine
 * makes a slow number, not a failed test.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "crc32c.h"
#include "units.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint32_t bytewise(const unsigned char *p, size_t n)
{
    static uint32_t t[256];
    if (!t[1])
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++)
                c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
            t[i] = c;
        }
    uint32_t c = 0xffffffffu;
    while (n--)
        c = (c >> 8) ^ t[(c ^ *p++) & 0xff];
    return ~c;
}

int main(int argc, char **argv)
{
    int64_t mib = 64;   /* decimal, read as ./job reads its flags (units.h) */
    if (argc > 1 && units_flag_int(argv[1], 1, 4096, &mib) < 0) {
        fprintf(stderr, "usage: %s [MiB, 1..4096]\n", argv[0]);
        return 2;
    }
    size_t n = (size_t)mib << 20;
    unsigned char *buf = malloc(n);
    if (!buf) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        buf[i] = (unsigned char)x;
    }
    double best8 = 1e9, best1 = 1e9;
    uint32_t c8 = 0, c1 = 0;
    for (int r = 0; r < 5; r++) {
        double t0 = now_s();
        c8 = crc32c(0, buf, n);
        double t1 = now_s();
        c1 = bytewise(buf, n);
        double t2 = now_s();
        best8 = t1 - t0 < best8 ? t1 - t0 : best8;
        best1 = t2 - t1 < best1 ? t2 - t1 : best1;
    }
    printf("crc32c over %ld MiB, best of 5: slicing-by-8 %.2f GB/s, bytewise %.2f GB/s (%.1fx)\n",
           (long)mib, (double)n / best8 * 1e-9, (double)n / best1 * 1e-9, best1 / best8);
    free(buf);
    if (c8 != c1) {
        fprintf(stderr, "MISMATCH: %08x vs %08x\n", c8, c1);
        return 1;
    }
    return 0;
}
