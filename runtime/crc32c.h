/* crc32c.h - CRC-32C (Castagnoli), the one implementation in ddpc.
 *
 * Checkpoints (ckpt.c) check their header and payload with it; TensorBoard
 * event records (metrics.c) carry it masked, as TFRecord requires.
 */
#ifndef DDPC_CRC32C_H
#define DDPC_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* CRC-32C of buf[0..n), continuing from crc (0 to start; the result of an
 * earlier call to chain): crc32c(0, "123456789", 9) == 0xE3069283. Slicing
 * by 8 (~1.5 GB/s here; build/bench/crc32c measures it). Thread-safe. */
uint32_t crc32c(uint32_t crc, const void *buf, size_t n);

#endif /* DDPC_CRC32C_H */
