/* scps_lookup_reply: LookupResponse, both ends, written by hand: the server
 * frames each stack's values without copying them, libscps reads them in place. */
#ifndef SCPS_LOOKUP_REPLY_H
#define SCPS_LOOKUP_REPLY_H

#include <grpc/byte_buffer.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "scps_pbw.h"
#include "scps_slices.h"

/* Encoding (the server). A LookupResponse is, per stack, the head below
 * followed by that stack's len bytes of values (StackActivations.activations,
 * or .rows for distinct rows) as they are, so they can go out as a slice of
 * their own. */

/* Most bytes a head takes for a stack name of name_len bytes. */
#define SCPS_LOOKUP_REPLY_HEAD_MAX(name_len) ((name_len) + 3 + 3 * SCPS_PBW_VARINT_MAX)

/* Writes at p the head of one LookupResponse.stacks entry: its key and
 * length, StackActivations.stack (the name_len bytes of stack), then the key
 * and length of .rows (rows) or .activations holding len bytes. Returns
 * the head's length. */
size_t scps__lookup_reply_put_head(uint8_t *p, const char *stack, size_t name_len, bool rows, size_t len);

/* LookupResponse.placed = true (2 bytes), written after the stacks, whose
 * heads then say 0 bytes: the values went to LookupRequest.placement. */
#define SCPS_LOOKUP_REPLY_PLACED_LEN 2
size_t scps__lookup_reply_put_placed(uint8_t *p);

/* Decoding (libscps). */

/* One LookupResponse.stacks[i] (StackActivations): where its stack name
 * and values lie in the received message. */
typedef struct scps_lookup_reply_stack {
  size_t stack_off, stack_len;
  size_t off, len; /* the activations, or the distinct rows */
  bool rows;       /* StackActivations.rows came, not .activations */
} scps_lookup_reply_stack;

/* Parses a LookupResponse held as slices: fills out[0..max-1] and returns
 * the number of stacks it holds (which may exceed max), or -1 if the bytes
 * are not a valid encoding. Unknown fields are skipped, as protobuf
 * requires. */
int scps__lookup_reply_parse(scps_slices *m, scps_lookup_reply_stack *out, int max);

/* Takes the slices of bb into m (freeing what m held) and parses them into
 * out[0..max-1]. Returns 0 if they hold exactly `want` stacks, else
 * SCPS_ENOMEM or SCPS_EIO with msg saying what is wrong ("Lookup: ..."). */
int scps__lookup_reply_read(scps_slices *m, grpc_byte_buffer *bb, scps_lookup_reply_stack *out, int max, int want,
                           char *msg, size_t len);

/* Whether a LookupResponse that scps__lookup_reply_read accepted says
 * placed: its values are in the placement's bytes, its stacks hold none. */
bool scps__lookup_reply_placed(scps_slices *m);

/* Checks that a, the answer's stacks[k], is stack `name` and holds `want`
 * bytes of distinct rows (rows) or pooled activations, as the request asked.
 * Returns 0, or SCPS_EIO with msg naming the stack and what differs. */
int scps__lookup_reply_check(const scps_slices *m, const scps_lookup_reply_stack *a, int k, const char *name,
                            bool rows, size_t want, char *msg, size_t len);

#endif
