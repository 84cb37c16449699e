/* libFuzzer target for the Lookup and ApplyGradients decoder
 * (proto/scps_request): decode, then expand samples and gains as the
 * server's validation does, check the value format (scps_wirefmt) and
 * decode every stack's gradients in it as rows of 8 values. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_bytes.h"
#include "scps_request.h"
#include "scps_wirefmt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Byte 0 chooses the request kind (bit 0) and how many slices the rest is
 * cut into (bits 1-3), so messages spanning slice boundaries are covered as
 * gRPC delivers them. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const scps_request_kind kind = data[0] & 1 ? SCPS_REQUEST_APPLY : SCPS_REQUEST_LOOKUP;
  size_t n_slices = 1 + ((data[0] >> 1) & 7);
  data++;
  size--;
  grpc_byte_buffer *bb = fuzz_bytes_sliced(data, size, n_slices);
  scps_request r;
  char msg[256];
  /* A server of 4 stacks and 4 SparseCores per process. */
  if (scps__request_decode(bb, kind, 4, 5, &r, msg, sizeof msg) == 0) {
    for (size_t i = 0; i < r.n_stacks; i++) {
      scps_req_partitions *p = &r.stacks[i].partitions;
      size_t entries = p->rows.len / 4;
      if (scps__request_expand_samples(p, entries, msg, sizeof msg) == 0)
        (void)scps__request_expand_gains(p, entries, msg, sizeof msg);
    }
    scps_wirefmt f;
    if (scps__wirefmt_from_request(r.format, &r.exmy, "gradient_format", &f, NULL) == 0) {
      const size_t row = scps__wirefmt_row_bytes(&f, 8);
      for (size_t i = 0; i < r.n_stacks && kind == SCPS_REQUEST_APPLY; i++) {
        const scps_req_span g = r.stacks[i].gradients.len ? r.stacks[i].gradients : r.stacks[i].row_gradients;
        const size_t rows = g.len / row;
        uint8_t *bytes = malloc(g.len + 1);
        float *values = malloc((rows ? rows : 1) * 8 * sizeof *values);
        if (bytes && values) {
          const uint8_t *src = scps__slices_span(&r.msg, g.off, g.len, bytes);
          (void)scps__wirefmt_decode(&f, src, rows, 8, values, i % 2 == 1, NULL);
        }
        free(bytes);
        free(values);
      }
    }
  }
  scps__request_free(&r);
  grpc_byte_buffer_destroy(bb);
  return 0;
}
