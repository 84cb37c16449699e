/* libFuzzer target for libscps's LookupResponse decoder
 * (proto/scps_lookup_reply), which reads what a server sends: read, then
 * check each stack as libscps does and touch the bytes it points at. */
#include <stdint.h>
#include <string.h>

#include "fuzz_bytes.h"
#include "scps_lookup_reply.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Byte 0: how many slices the rest is cut into (bits 0-2) and how many
 * stacks the request asked for (bits 3-4), so answers of the wrong count
 * and messages spanning slice boundaries are covered. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  size_t n_slices = 1 + (data[0] & 7);
  const int want = (data[0] >> 3) & 3;
  data++;
  size--;
  grpc_byte_buffer *bb = fuzz_bytes_sliced(data, size, n_slices);
  scps_slices m;
  memset(&m, 0, sizeof m);
  scps_lookup_reply_stack out[3];
  char msg[512];
  if (scps__lookup_reply_read(&m, bb, out, 3, want, msg, sizeof msg) == 0) {
    static const char *const names[3] = {"a", "b", "stack_c"};
    for (int k = 0; k < want; k++) {
      (void)scps__lookup_reply_check(&m, &out[k], k, names[k], k == 1, out[k].len, msg, sizeof msg);
      /* The values lie within the message: read the first and last byte. */
      uint8_t tmp[1];
      if (out[k].len) {
        (void)scps__slices_span(&m, out[k].off, 1, tmp);
        (void)scps__slices_span(&m, out[k].off + out[k].len - 1, 1, tmp);
      }
    }
  }
  scps__slices_free(&m);
  grpc_byte_buffer_destroy(bb);
  return 0;
}
