#include "fuzz_bytes.h"

#include <grpc/grpc.h>

grpc_byte_buffer *fuzz_bytes_sliced(const uint8_t *data, size_t size, size_t n_slices) {
  if (n_slices > size) n_slices = size ? size : 1;
  grpc_slice slices[8];
  for (size_t i = 0; i < n_slices; i++) {
    size_t a = size * i / n_slices, b = size * (i + 1) / n_slices;
    slices[i] = grpc_slice_from_copied_buffer((const char *)data + a, b - a);
  }
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(slices, n_slices);
  for (size_t i = 0; i < n_slices; i++) grpc_slice_unref(slices[i]);
  return bb;
}
