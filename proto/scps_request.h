/* scps_request: Lookup and ApplyGradients requests decoded straight from the
 * slices gRPC received, each bulk array copied once into memory of its own. */
#ifndef SCPS_REQUEST_H
#define SCPS_REQUEST_H

#include <grpc/byte_buffer.h>

#include "scps_slices.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A bytes field: owned by the request (malloc'd, so aligned for uint32 and
 * float arrays), or pointing at the empty string when absent. */
typedef struct scps_req_bytes {
  uint8_t *data;
  size_t len;
} scps_req_bytes;

/* scps.v1.StackPartitions. */
typedef struct scps_req_partitions {
  char *stack; /* NUL-terminated; "" when absent */
  /* The first max_sc_offsets values of the field (scps_request_decode):
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
} scps_req_stack;

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
  bool *distinct_rows; /* Lookup: one flag per entry of stacks, or none */
  size_t n_distinct_rows, cap_distinct_rows;
  size_t n_stacks;
  scps_req_stack *stacks;
  size_t cap_stacks;
  size_t bytes; /* the encoded request's size */
  scps_slices msg; /* ApplyGradients: the request's slices, kept for its gradients */
  uint64_t state_id; /* ApplyGradients: the state the client connected to; 0: not given */
} scps_request;

typedef enum scps_request_kind { SCPS_REQUEST_LOOKUP, SCPS_REQUEST_APPLY } scps_request_kind;

/* Decodes bb as a request of that kind into r (zeroed first). Returns 0, or
 * SCPS_EPARSE with msg saying what is malformed and at which byte (also
 * for more than max_stacks entries of stacks: each stack may be listed
 * once), or SCPS_ENOMEM. Memory taken is bounded by the request's size (a
 * repeated field frees its earlier value; at most max_sc_offsets values of
 * each sc_offsets are kept). r must be freed either way. */
int scps_request_decode(grpc_byte_buffer *bb, scps_request_kind kind, size_t max_stacks, size_t max_sc_offsets,
                        scps_request *r, char *msg, size_t len);

void scps_request_free(scps_request *r);

/* Replaces p's samples_u16, if any, by the uint32 samples they stand for.
 * Returns 0, SCPS_EINVAL with msg if samples is set too or the length is
 * not 2 per entry, or SCPS_ENOMEM. */
int scps_request_expand_samples(scps_req_partitions *p, size_t entries, char *msg, size_t len);

/* Replaces p's gain_exceptions, if any, by the dense gains they stand for:
 * entries values, 1.0 where no pair names the entry. Returns 0, SCPS_EINVAL
 * with msg naming the first bad pair (entry not ascending or not below
 * entries, gain not finite), a length not a multiple of 8 or gains set too,
 * or SCPS_ENOMEM. */
int scps_request_expand_gains(scps_req_partitions *p, size_t entries, char *msg, size_t len);

#endif
