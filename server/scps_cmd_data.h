/* scps_cmd_data: what the data methods (Lookup, ApplyGradients) share: the
 * validated stack, request decoding, partition checks, scratch reservation. */
#ifndef SCPS_CMD_DATA_H
#define SCPS_CMD_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "scps_call.h"

/* A validated stack of a Lookup or ApplyGradients request. */
typedef struct call_stack {
  int stack;
  scps_coo coo[64];         /* per local SparseCore; arrays point into the request */
  float *grads;             /* ApplyGradients: total_sample_count x dim float32, in the call's scratch */
  /* ApplyGradients by sample in bfloat16: grads holds the values as they
   * came, 2 bytes each (scps__engine_update_bf16 widens them as it reads). */
  bool grads_bf16;
  scps_req_span grad_src;   /* ApplyGradients: where they lie in grad_msg */
  const scps_slices *grad_msg; /* the request's slices, or the call's shm_msg */
  float *act;               /* Lookup in float32: total_sample_count x dim, the process's partial; in eXmY
                             * the distinct rows before they are encoded (pooled eXmY: unused) */
  uint8_t *encoded;         /* Lookup in bfloat16 or eXmY: the same values as sent (scps_wirefmt rows) */
  /* Lookup answered with distinct rows (LookupRequest.distinct_rows): act
   * or encoded holds them instead, partition k's from row_start[k] on. */
  bool distinct;
  /* ApplyGradients by row (StackGradients.row_gradients): coo[k] lists only
   * rows, and grads holds one vector per row, coo[k]'s from row_start[k]. */
  bool by_row;
  uint32_t row_start[64 + 1];
  /* ApplyGradients by sample: the largest |gain| of coo[k]'s entries, as
   * float32 bits; times their count and the largest |gradient| it bounds
   * every row sum of coo[k]. */
  uint32_t gain_mag[64];
  /* The stack's limits in force when the request was validated. */
  int32_t max_ids, max_unique;
  /* ApplyGradients: what is known of the values of each local SparseCore's
   * shard before this update (scps__engine_value_bounds), taken by its
   * worker before the gang synchronises. */
  scps_value_bounds bounds[64][1 + SCPS_MAX_SLOTS];
} call_stack;

/* Decodes the call's Lookup or ApplyGradients request into c->req; on
 * failure answers the call and returns false. */
bool scps__cmd_data_read(scps_call *c, scps_request_kind kind);

/* A FloatFormat and its ExmyFormat (field names the former in msg) into
 * c->wire. */
grpc_status_code scps__cmd_data_check_format(scps_call *c, int format, const scps_req_exmy *x, const char *field,
                                            char *msg, size_t len);

/* c->stacks: n zeroed stacks. Returns 0 or SCPS_ENOMEM. */
int scps__cmd_data_alloc_stacks(scps_call *c, size_t n);

/* Whether one of the first `upto` stacks of the call is `stack`. */
static inline bool scps__cmd_data_duplicate(const scps_call *c, int upto, int stack) {
  for (int i = 0; i < upto; i++)
    if (c->stacks[i].stack == stack) return true;
  return false;
}

/* The stack a StackPartitions names (into cs->stack) and the number of
 * its sc_offsets. */
grpc_status_code scps__cmd_data_check_head(const scps_call *c, const scps_req_partitions *sp, const char *field,
                                          call_stack *cs, char *msg, size_t len);

/* sc_offsets: S + 1 of them, from 0 to n (of `what`: entries or rows),
 * never falling. */
grpc_status_code scps__cmd_data_check_offsets(const scps_call *c, const scps_req_partitions *sp, size_t n,
                                             const char *what, const char *field, char *msg, size_t len);

/* Checks one StackPartitions against the layout and turns it into per
 * SparseCore COO views, its gain_exceptions expanded into sp's gains.
 * Returns a gRPC status; msg names field and value. */
grpc_status_code scps__cmd_data_check_partitions(scps_call *c, scps_req_partitions *sp, const char *field,
                                                call_stack *cs, char *msg, size_t len);

/* The scratch a call needs (floats) is reserved in the memory budget
 * before it is taken (scps_scratch.h): done runs once it is, or once the
 * call is refused. */
void scps__cmd_data_wait_scratch(scps_call *c, size_t floats,
                                void (*done)(scps_budget_waiter *, bool, size_t, size_t));

/* Answers a call the budget refused: RESOURCE_EXHAUSTED naming `what`. */
void scps__cmd_data_refuse_memory(scps_call *c, const char *what, size_t in_use, size_t limit);

#endif
