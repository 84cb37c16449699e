/* scps_call: one RPC's call object and the one way a method answers it:
 * read the request, finish, the decode budget, the view and role checks. */
#ifndef SCPS_CALL_H
#define SCPS_CALL_H

#include <grpc/grpc.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "scps.pb-c.h"
#include "scps_budget.h"
#include "scps_engine.h"
#include "scps_pipeline.h"
#include "scps_request.h"
#include "scps_wirefmt.h"
#include "scps_server_int.h"

/* One RPC from request to final send. refs counts the tags still to come
 * (receive-close and send); the last one frees the call. */
struct scps_call {
  scps_server *srv;
  int cq;
  int method;
  grpc_call *call;
  gpr_timespec deadline;
  grpc_metadata_array md;
  grpc_byte_buffer *payload;
  grpc_call_details details;
  int cancelled;
  int counted;              /* included in srv->active */
  atomic_int refs;
  grpc_byte_buffer *response;
  scps_tag t_new, t_close, t_send;
  int64_t t0_ns;
  size_t bytes_in;

  /* Set by handlers; released with the call. */
  ProtobufCMessage *request; /* small requests, protobuf-c's */
  scps_request req;          /* Lookup and ApplyGradients */
  scps_job job;
  int n_stacks;
  struct call_stack *stacks;
  float *scratch;           /* Lookup: each stack's activations (float32, and/or as encoded), then
                             * one gather scratch per SparseCore worker;
                             * ApplyGradients: every stack's gradients as float32 */
  size_t scratch_cap;       /* floats of scratch, a block of srv->scratch */
  float *gather_scratch;    /* Lookup, pooled stacks: worker k's at gather_scratch + k * gather_stride */
  size_t gather_stride;     /* floats */
  scps_wirefmt wire;        /* format of the activations or gradients */
  atomic_int encode_failed; /* Lookup: 1 + the index in stacks of one with a value eXmY cannot encode (NaN) */
  int64_t rows_updated[64]; /* per local SparseCore */
  atomic_bool grads_bad;    /* ApplyGradients: one of them is not finite */
  /* ApplyGradients: the first row sum that overflowed, found by worker 0
   * (stack index into stacks, local SparseCore, row); sum_stack -1: none. */
  int sum_stack, sum_sc;
  uint32_t sum_row;
  /* ApplyGradients: the largest |gradient| worker k read, as float32 bits
   * (the bits of a finite float's magnitude order as its values do). */
  uint32_t grad_mag[64];
  scps_step step;
  scps_call *next;          /* in the saver's parked or checkpoint queue */
  scps_role role;           /* the caller's, from its bearer token (scps__auth_role) */

  /* Memory and transfer limits (scps_limits.c; the transfer watch is
   * scps_call.c's). */
  scps_tag t_recv;
  scps_budget_waiter wait;    /* the call's wait for memory, when it waits */
  size_t charged;           /* bytes of the budget the call holds itself (its request) */
  int64_t watch_deadline_ns;/* on its watch list (srv->watch) until then */
  scps_call *watch_prev, *watch_next;
  int watch_list;           /* 0: none, or SCPS_WATCH_ARRIVING or SCPS_WATCH_SENDING */
  bool watch_expired;       /* cancelled by the watch */
  /* Lookup and ApplyGradients: partitions dropped to the limits in force
   * (scps__partlimits_apply), which the stacks' coo views then point into. */
  void *limit_mem;
  /* ApplyGradients: the largest |gradient| of the stacks by row worker k
   * read, as float32 bits (grad_mag holds those by sample). */
  uint32_t row_mag[64];
  /* ApplyGradients: the first row whose update would not be finite, found
   * by worker 0 (stack index into stacks, local SparseCore); -1: none. */
  int fault_stack, fault_sc;
  scps_update_fault fault;
  /* Lookup answered into shared memory (LookupRequest.placement): the
   * segment, held until the call is freed, and where the answer starts. */
  struct scps_shm_seg *shm_seg;
  uint8_t *shm_at;
  /* ApplyGradients by sample through shared memory: its range of the
   * segment as slices, where those stacks' grad_src lie. */
  scps_slices shm_msg;
  /* TopK: the call's scan state (scps_cmd_topk.c), freed with the call. */
  struct scps_topk_call *topk;
};

/* Finishes a call: status, optional message text, optional packed response
 * (copied). Safe from any thread, once per call. */
void scps__call_finish(scps_call *c, grpc_status_code status, const char *details,
                      const uint8_t *response, size_t len);

/* Finishes a call with OK and msg packed straight into the send buffer. */
void scps__call_finish_packed(scps_call *c, const ProtobufCMessage *msg);

/* Finishes a call with OK and a response the caller built (owned by the
 * call from now on); len is its size, for the counters. */
void scps__call_finish_buffer(scps_call *c, grpc_byte_buffer *response, size_t len);

/* Upper bound, in seconds, of latency bucket i < SCPS_LATENCY_BUCKETS - 1
 * of scps_method_stats. */
double scps__call_latency_bound(int i);

/* The call whose wait for memory w is. */
static inline scps_call *scps__call_of_wait(scps_budget_waiter *w) {
  return (scps_call *)(void *)((char *)w - offsetof(scps_call, wait));
}

/* Frees a call and what it holds, now; for a call that never counted
 * (a posted request gRPC never matched). */
void scps__call_free(scps_call *c);

/* The last reference to c is gone: frees it and, when it was the last call
 * in flight of a drain with pushes closed, tells the transport (calls_done). */
void scps__call_release(scps_call *c);

/* Drops a reference to a call (the last one frees it). */
static inline void scps__call_unref(scps_call *c) {
  if (atomic_fetch_sub(&c->refs, 1) == 1) scps__call_release(c);
}

/* What a call's request holds of the memory budget once it has arrived
 * (len bytes): the message and, for Lookup and ApplyGradients, its decoded
 * copy; for the other methods the most their decoding may take. */
size_t scps__call_request_memory(const scps_call *c, size_t len);

/* Reads the request into a single buffer; *data is malloc'd. */
int scps__call_read_payload(scps_call *c, uint8_t **data, size_t *len);

/* Unpacks the call's request as `desc` within the decode budget; on
 * failure answers the call and returns NULL. The message is the call's
 * (freed with it). */
ProtobufCMessage *scps__call_read_request(scps_call *c, const ProtobufCMessageDescriptor *desc);

/* Checks a data request's config_fingerprint and process_index; fills msg
 * and returns FAILED_PRECONDITION when the client's view differs. */
grpc_status_code scps__call_check_view(scps_call *c, const uint8_t *fp, size_t fp_len, int32_t process_index,
                                      char *msg, size_t len);

/* Whether the caller of c may call method (the least role of each method is
 * scps_call.c's method_role table). */
bool scps__call_may(const scps_call *c, int method);

/* Checks the caller's bearer token (every call, before anything else
 * answers it) and records its role in c; answers the call and returns false
 * when it may not go on. */
bool scps__call_authorize(scps_call *c);

/* Puts a call on a transfer watch (SCPS_WATCH_ARRIVING: its request must
 * arrive; SCPS_WATCH_SENDING: its answer must be taken), due in
 * --transfer-timeout seconds; past that, scps__call_sweep cancels it. */
void scps__call_watch(scps_call *c, int list);

/* Takes the call off its watch, if any; returns whether the watch expired
 * (the call was cancelled, or is being). */
bool scps__call_unwatch(scps_call *c);

/* Cancels the watched calls whose deadline has passed (the budget's thread,
 * scps_limits.c, runs it on its tick). */
void scps__call_sweep(scps_server *s, int64_t now);

/* A call arrived or ended: the server is not idle. */
void scps__call_note_activity(scps_server *s);

#endif
