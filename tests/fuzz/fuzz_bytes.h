/* fuzz_bytes: a fuzz input as gRPC would deliver it: a byte buffer of
 * slices, so decoders meet messages that span slice boundaries. */
#ifndef FUZZ_BYTES_H
#define FUZZ_BYTES_H

#include <grpc/byte_buffer.h>
#include <stddef.h>
#include <stdint.h>

/* data[0..size) cut into n_slices (1 to 8) slices of near-equal size, at
 * most one per byte (one empty slice for no bytes). */
grpc_byte_buffer *fuzz_bytes_sliced(const uint8_t *data, size_t size, size_t n_slices);

#endif
