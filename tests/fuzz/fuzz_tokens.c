/* fuzz_tokens.c - libFuzzer target for token data (spec/tokens.c and
 * runtime/data.c's text/tokens loader and windows): data files are
 * untrusted, so any bytes as a shard or a text file must give a dataset
 * whose every window is inside the stream with labels below vocab, or a
 * clean error, never a crash or a read out of bounds.
 *
 * The input's first 4 bytes choose the format, T, the vocab and the range;
 * the rest is the file. Build and run: `make fuzz` (ASan + UBSan).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data.h"

static char path[64];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4)
        return 0;
    if (!path[0])
        snprintf(path, sizeof path, "/tmp/ddpc-fuzz-tokens-%ld", (long)getpid());
    FILE *f = fopen(path, "wb");
    if (!f)
        return 0;
    if (size > 4 && fwrite(data + 4, 1, size - 4, f) != size - 4) {
        fclose(f);
        return 0;
    }
    if (fclose(f) != 0)
        return 0;
    struct ddpc_data_source src;
    memset(&src, 0, sizeof src);
    src.format = data[0] & 1 ? DDPC_DATA_TOKENS : DDPC_DATA_TEXT;
    src.path = path;
    src.range_lo = (data[0] >> 1 & 7) / 10.0;          /* 0 .. 0.7 */
    src.range_hi = src.range_lo + 0.1 + (data[0] >> 4) / 20.0;
    if (src.range_hi > 1)
        src.range_hi = 1;
    int32_t T = 1 + data[1] % 32;
    int32_t vocab = 1 + (data[2] << 8 | data[3]);
    struct ddpc_dataset ds;
    struct ddpc_err e;
    memset(&e, 0, sizeof e);
    if (data_load(&src, &ds, &e) == 0) {
        int64_t stride = data[1] & 0x80 ? T : (int64_t)T + 1;
        if (data_set_windows(&ds, T, stride, vocab, &e) == 0) {
            float x[32];
            int32_t lab[32];
            for (int64_t i = 0; i < ds.n; i++) {
                data_gather(&ds, &i, 1, x, lab, NULL);
                for (int t = 0; t < T; t++)
                    if (lab[t] < 0 || lab[t] >= vocab || x[t] < 0 || x[t] >= (float)vocab)
                        abort();
                if (i * stride + T + 1 > ds.ntok)
                    abort();   /* a window past the stream */
            }
        }
    }
    data_free(&ds);
    unlink(path);
    return 0;
}
