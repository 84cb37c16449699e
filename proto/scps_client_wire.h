/* scps_client_wire: libscps's hand-written protobuf encoding of LookupRequest
 * and ApplyGradientsRequest and decoding of LookupResponse, so bulk arrays
 * are copied once on the way out and not at all on the way in. */
#ifndef SCPS_CLIENT_WIRE_H
#define SCPS_CLIENT_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "scps_coo.h"
#include "scps_slices.h"

/* The requests carry rows, samples, gains and gradients as raw
 * little-endian arrays (scps.proto), which the encoder copies as they are. */
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "libscps writes its requests with memcpy and needs a little-endian host"
#endif

#define SCPS_WIRE_FINGERPRINT_BYTES 32

/* Longest encoding of a 64-bit varint. */
#define SCPS_WIRE_VARINT_MAX 10

size_t scps_wire_varint_size(uint64_t v);
uint8_t *scps_wire_put_varint(uint8_t *p, uint64_t v);

/* Bytes of a StackPartitions message (without any enclosing tag and length)
 * for the n_sc partitions coo[0..n_sc-1] of one process. gain_exceptions
 * must be exactly how many of their gains are not 1.0: the message carries
 * no gains if none, the (entry, gain) pairs of those if that is smaller
 * (gain_exceptions), else every gain. samples_u16: the samples as uint16
 * (samples_u16), for a stack of at most 65536 samples. */
size_t scps_wire_partitions_size(const char *stack, const scps_coo *const *coo, int n_sc, size_t gain_exceptions,
                                 bool samples_u16);

/* Writes that message at p; returns the end. */
uint8_t *scps_wire_put_partitions(uint8_t *p, const char *stack, const scps_coo *const *coo,
                                  int n_sc, size_t gain_exceptions, bool samples_u16);

/* Size of the fields every data request starts with (config_fingerprint,
 * process_index), which are fields 1 and 2 of both requests. */
size_t scps_wire_view_size(int32_t process_index);
uint8_t *scps_wire_put_view(uint8_t *p, const uint8_t *fingerprint, int32_t process_index);

/* LookupRequest.activation_format (field 4) or
 * ApplyGradientsRequest.gradient_format (field 6): nothing for float32 (0,
 * the default), else 2 bytes. */
size_t scps_wire_format_size(int format);
uint8_t *scps_wire_put_lookup_format(uint8_t *p, int format);
uint8_t *scps_wire_put_apply_format(uint8_t *p, int format);

/* Prefix of LookupRequest.stacks[i] (field 3) whose body has len bytes;
 * at most 1 + SCPS_WIRE_VARINT_MAX bytes. */
uint8_t *scps_wire_put_lookup_stack_prefix(uint8_t *p, size_t len);
size_t scps_wire_lookup_stack_prefix_size(size_t len);

/* ApplyGradientsRequest fields 3 (step) and 4 (learning_rate, written only
 * when learning_rate >= 0); at most 2 + 2 * SCPS_WIRE_VARINT_MAX bytes. */
uint8_t *scps_wire_put_step(uint8_t *p, int64_t step, double learning_rate);

/* ApplyGradientsRequest field 7 (state_id), written only when not 0; at
 * most 9 bytes. */
uint8_t *scps_wire_put_state_id(uint8_t *p, uint64_t state_id);

/* One ApplyGradientsRequest.stacks[i] (field 5) is, in order: the prefix
 * below, the partitions body (parts_len bytes), then the gradients prefix
 * and grads_len bytes of gradients. Each prefix is at most
 * 2 + 2 * SCPS_WIRE_VARINT_MAX bytes. */
uint8_t *scps_wire_put_apply_stack_prefix(uint8_t *p, size_t parts_len, size_t grads_len);
uint8_t *scps_wire_put_gradients_prefix(uint8_t *p, size_t grads_len);

/* StackGradients.partitions of a stack pushed by row (StackGradients.
 * row_gradients): stack, the n_sc + 1 offsets row_start[0..n_sc] and the
 * row_start[n_sc] distinct rows. */
size_t scps_wire_row_partitions_size(const char *stack, const uint32_t *row_start, int n_sc);
uint8_t *scps_wire_put_row_partitions(uint8_t *p, const char *stack, const uint32_t *row_start, int n_sc,
                                      const uint32_t *rows);

/* The prefix of StackGradients.row_gradients (field 3), which takes the
 * place of the gradients prefix after a by-row stack's partitions; at most
 * 1 + SCPS_WIRE_VARINT_MAX bytes. */
uint8_t *scps_wire_put_row_gradients_prefix(uint8_t *p, size_t len);

/* One LookupResponse.stacks[i] (StackActivations): where its stack name
 * and activations lie in the received message. */
typedef struct scps_wire_activations {
  size_t stack_off, stack_len;
  size_t off, len; /* the activations, or the distinct rows */
  bool rows;       /* StackActivations.rows came, not .activations */
} scps_wire_activations;

/* LookupRequest.distinct_rows, packed: one flag per stack sent (n_sent of
 * them), in stack order, distinct[st] for each stack st whose slot[st] is
 * not negative. */
size_t scps_wire_distinct_rows_size(int n_sent);
uint8_t *scps_wire_put_distinct_rows(uint8_t *p, const bool *distinct, const int *slot, int n_stacks, int n_sent);

/* Parses a LookupResponse held as slices: fills out[0..max-1] and returns
 * the number of stacks it holds (which may exceed max), or -1 if the bytes
 * are not a valid encoding. Unknown fields are skipped, as protobuf
 * requires. */
int scps_wire_parse_lookup_response(scps_slices *m, scps_wire_activations *out, int max);

#endif
