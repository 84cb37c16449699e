/* scps_request: LookupRequest and ApplyGradientsRequest, both ends: libscps's
 * encoder and the server's decoder, which reads straight from gRPC's slices. */
#ifndef SCPS_REQUEST_H
#define SCPS_REQUEST_H

#include <grpc/byte_buffer.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "scps_coo.h"
#include "scps_fingerprint.h"
#include "scps_pbw.h"
#include "scps_slices.h"

/* The requests carry rows, samples, gains and gradients as raw
 * little-endian arrays (scps.proto), which the encoder copies out of memory
 * and the decoder keeps as they arrived. */
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "scps_request copies the wire's little-endian arrays as they are and needs a little-endian host"
#endif

/* Decoding (the server): each bulk array copied once into memory of its
 * own. */

/* A bytes field: owned by the request (malloc'd, so aligned for uint32 and
 * float arrays), or pointing at the empty string when absent. */
typedef struct scps_req_bytes {
  uint8_t *data;
  size_t len;
} scps_req_bytes;

/* scps.v1.StackPartitions. */
typedef struct scps_req_partitions {
  char *stack; /* NUL-terminated; NULL when absent */
  /* The first max_sc_offsets values of the field (scps__request_decode):
   * n_sc_offsets counts them all, so a request can be told it has too
   * many without the server keeping them. */
  uint32_t *sc_offsets;
  size_t n_sc_offsets;
  scps_req_bytes rows, samples, gains, gain_exceptions, samples_u16;
} scps_req_partitions;

/* A bytes field left where it arrived: bytes [off, off + len) of the
 * request's slices (scps_request.msg). */
typedef struct scps_req_span {
  size_t off, len;
} scps_req_span;

/* A LookupRequest's StackPartitions, or an ApplyGradientsRequest's
 * StackGradients (partitions present or not, and the gradients by sample
 * or by row, which the SparseCore workers copy out of the slices
 * themselves). */
typedef struct scps_req_stack {
  scps_req_partitions partitions;
  bool has_partitions;
  scps_req_span gradients, row_gradients;
  uint64_t placed_gradients; /* StackGradients.placed_gradients */
} scps_req_stack;

/* A SegmentRange, when has: a segment handle of another length than
 * SCPS_REQUEST_SEGMENT_BYTES names no segment (segment_len says how long
 * it was, its bytes are not kept). */
typedef struct scps_req_range {
  bool has;
  uint8_t segment[16];
  size_t segment_len;
  uint64_t offset, length;
} scps_req_range;

/* An ExmyFormat (LookupRequest.activation_exmy or
 * ApplyGradientsRequest.gradient_exmy), when has: its fields as they came
 * (the encoder writes those set). */
typedef struct scps_req_exmy {
  bool has;
  uint32_t exponent_bits, mantissa_bits;
  bool has_bias;
  int64_t bias;
  bool row_scale;
} scps_req_exmy;

/* scps.v1.LookupRequest or ApplyGradientsRequest (step, learning rate and
 * gradients only in the latter). Fields follow proto3: absent scalars are
 * 0, a repeated singular field keeps its last value. */
typedef struct scps_request {
  scps_req_bytes config_fingerprint;
  int32_t process_index;
  int64_t step;
  bool has_learning_rate;
  double learning_rate;
  int32_t format; /* activation_format or gradient_format */
  scps_req_exmy exmy; /* activation_exmy or gradient_exmy */
  bool *distinct_rows; /* Lookup: one flag per entry of stacks, or none */
  size_t n_distinct_rows, cap_distinct_rows;
  size_t n_stacks;
  scps_req_stack *stacks;
  size_t cap_stacks;
  size_t bytes; /* the encoded request's size */
  scps_slices msg; /* ApplyGradients: the request's slices, kept for its gradients */
  uint64_t state_id; /* ApplyGradients: the state the client connected to; 0: not given */
  scps_req_range placement;         /* LookupRequest.placement or ApplyGradientsRequest.gradients_placement */
  scps_req_range request_placement; /* LookupRequest.request_placement */
  bool other_fields; /* a field other than request_placement was present */
} scps_request;

/* Bytes of a SegmentRange.segment handle (ShmResponse.segment). */
#define SCPS_REQUEST_SEGMENT_BYTES 16

typedef enum scps_request_kind { SCPS_REQUEST_LOOKUP, SCPS_REQUEST_APPLY } scps_request_kind;

/* Decodes bb as a request of that kind into r (zeroed first). Returns 0, or
 * SCPS_EPARSE with msg saying what is malformed and at which byte (also
 * for more than max_stacks entries of stacks: each stack may be listed
 * once), or SCPS_ENOMEM. Memory taken is bounded by the request's size (a
 * repeated field frees its earlier value; at most max_sc_offsets values of
 * each sc_offsets are kept). r must be freed either way. */
int scps__request_decode(grpc_byte_buffer *bb, scps_request_kind kind, size_t max_stacks, size_t max_sc_offsets,
                        scps_request *r, char *msg, size_t len);

void scps__request_free(scps_request *r);

/* Replaces p's samples_u16, if any, by the uint32 samples they stand for.
 * Returns 0, SCPS_EINVAL with msg if samples is set too or the length is
 * not 2 per entry, or SCPS_ENOMEM. */
int scps__request_expand_samples(scps_req_partitions *p, size_t entries, char *msg, size_t len);

/* Replaces p's gain_exceptions, if any, by the dense gains they stand for:
 * entries values, 1.0 where no pair names the entry. Returns 0, SCPS_EINVAL
 * with msg naming the first bad pair (entry not ascending or not below
 * entries, gain not finite), a length not a multiple of 8 or gains set too,
 * or SCPS_ENOMEM. */
int scps__request_expand_gains(scps_req_partitions *p, size_t entries, char *msg, size_t len);

/* Encoding (libscps): each request is written by the caller as a sequence
 * of the pieces below, sized first; bulk arrays are copied once. */

/* Bytes of a StackPartitions message (without any enclosing tag and length)
 * for the n_sc partitions coo[0..n_sc-1] of one process. gain_exceptions
 * must be exactly how many of their gains are not 1.0: the message carries
 * no gains if none, the (entry, gain) pairs of those if that is smaller
 * (gain_exceptions), else every gain. samples_u16: the samples as uint16
 * (samples_u16), for a stack of at most 65536 samples. */
size_t scps__request_partitions_size(const char *stack, const scps_coo *const *coo, int n_sc,
                                    size_t gain_exceptions, bool samples_u16);

/* Writes that message at p; returns the end. */
uint8_t *scps__request_put_partitions(uint8_t *p, const char *stack, const scps_coo *const *coo, int n_sc,
                                     size_t gain_exceptions, bool samples_u16);

/* Size of the fields every data request starts with (config_fingerprint,
 * SCPS_FINGERPRINT_BYTES long, and process_index), which are fields 1 and
 * 2 of both requests. */
size_t scps__request_view_size(int32_t process_index);
uint8_t *scps__request_put_view(uint8_t *p, const uint8_t *fingerprint, int32_t process_index);

/* LookupRequest.activation_format (field 4) or
 * ApplyGradientsRequest.gradient_format (field 6): nothing for float32 (0,
 * the default), else 2 bytes; then, when x is given and x->has, the
 * ExmyFormat (activation_exmy, field 8, or gradient_exmy, field 9). */
size_t scps__request_format_size(int format, const scps_req_exmy *x);
uint8_t *scps__request_put_lookup_format(uint8_t *p, int format, const scps_req_exmy *x);
uint8_t *scps__request_put_apply_format(uint8_t *p, int format, const scps_req_exmy *x);

/* LookupRequest.placement (field 6) or, with field 8,
 * ApplyGradientsRequest.gradients_placement: segment
 * (SCPS_REQUEST_SEGMENT_BYTES), offset and length; at most
 * SCPS_REQUEST_PLACEMENT_MAX bytes, to be sent after the rest of the
 * request (protobuf takes fields in any order). */
#define SCPS_REQUEST_PLACEMENT_MAX (2 + 2 + SCPS_REQUEST_SEGMENT_BYTES + 2 * (1 + SCPS_PBW_VARINT_MAX))
uint8_t *scps__request_put_placement(uint8_t *p, int field, const uint8_t *segment, uint64_t offset,
                                    uint64_t length);

/* StackGradients.placed_gradients (field 4), at most 1 + SCPS_PBW_VARINT_MAX
 * bytes, inside the stack's message (after its partitions). */
uint8_t *scps__request_put_placed_gradients(uint8_t *p, uint64_t bytes);

/* Prefix of LookupRequest.stacks[i] (field 3) whose body has len bytes;
 * at most 1 + SCPS_PBW_VARINT_MAX bytes. */
uint8_t *scps__request_put_lookup_stack_prefix(uint8_t *p, size_t len);
size_t scps__request_lookup_stack_prefix_size(size_t len);

/* ApplyGradientsRequest fields 3 (step) and 4 (learning_rate, written only
 * when learning_rate >= 0); at most 2 + 2 * SCPS_PBW_VARINT_MAX bytes. */
uint8_t *scps__request_put_step(uint8_t *p, int64_t step, double learning_rate);

/* ApplyGradientsRequest field 7 (state_id), written only when not 0; at
 * most 9 bytes. */
uint8_t *scps__request_put_state_id(uint8_t *p, uint64_t state_id);

/* One ApplyGradientsRequest.stacks[i] (field 5) is, in order: the prefix
 * below, the partitions body (parts_len bytes), then the gradients prefix
 * and grads_len bytes of gradients. Each prefix is at most
 * 2 + 2 * SCPS_PBW_VARINT_MAX bytes. */
uint8_t *scps__request_put_apply_stack_prefix(uint8_t *p, size_t parts_len, size_t grads_len);

/* The same for a stack whose gradients are placed: the prefix, the
 * partitions body, then scps__request_put_placed_gradients(placed). */
uint8_t *scps__request_put_placed_stack_prefix(uint8_t *p, size_t parts_len, uint64_t placed);
uint8_t *scps__request_put_gradients_prefix(uint8_t *p, size_t grads_len);

/* StackGradients.partitions of a stack pushed by row (StackGradients.
 * row_gradients): stack, the n_sc + 1 offsets row_start[0..n_sc] and the
 * row_start[n_sc] distinct rows. */
size_t scps__request_row_partitions_size(const char *stack, const uint32_t *row_start, int n_sc);
uint8_t *scps__request_put_row_partitions(uint8_t *p, const char *stack, const uint32_t *row_start, int n_sc,
                                         const uint32_t *rows);

/* The prefix of StackGradients.row_gradients (field 3), which takes the
 * place of the gradients prefix after a by-row stack's partitions; at most
 * 1 + SCPS_PBW_VARINT_MAX bytes. */
uint8_t *scps__request_put_row_gradients_prefix(uint8_t *p, size_t len);

/* LookupRequest.distinct_rows, packed: one flag per stack sent (n_sent of
 * them), in stack order, distinct[st] for each stack st whose slot[st] is
 * not negative. */
size_t scps__request_distinct_rows_size(int n_sent);
uint8_t *scps__request_put_distinct_rows(uint8_t *p, const bool *distinct, const int *slot, int n_stacks, int n_sent);

#endif
