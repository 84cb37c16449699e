/* scps_server_int: what the server's call plumbing (scps_server.c) and its
 * method handlers (scps_handlers.c) share: the server and call structs. */
#ifndef SCPS_SERVER_INT_H
#define SCPS_SERVER_INT_H

#include <grpc/grpc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "scps.pb-c.h"
#include "scps_auth.h"
#include "scps_budget.h"
#include "scps_clock.h"
#include "scps_engine.h"
#include "scps_method.h"
#include "scps_pipeline.h"
#include "scps_request.h"
#include "scps_saver.h"
#include "scps_server.h"

enum { TAG_NEW, TAG_CLOSE, TAG_SEND, TAG_SHUTDOWN, TAG_RECV };

#define SCPS_MAX_SC_PER_PROCESS 64

enum { SCPS_WATCH_ARRIVING = 1, SCPS_WATCH_SENDING = 2 };

typedef struct scps_call scps_call;

typedef struct scps_tag {
  scps_call *call;
  int kind;
} scps_tag;

typedef struct scps_method_stats {
  atomic_llong calls, errors, bytes_in, bytes_out, ns;
} scps_method_stats;

/* FDO maxima one local SparseCore has seen for one stack; written by the
 * thread validating a request, read by Stats. */
typedef struct scps_sc_stack_stats {
  atomic_int max_ids, max_unique;
  atomic_llong ids_looked_up, rows_updated;
} scps_sc_stack_stats;

struct scps_server {
  scps_server_options opts;
  scps_table_spec *tables;
  scps_feature_spec *features;
  scps_layout *layout;
  scps_engine *engine;
  scps_pipeline *pipeline;
  int sc_cpus[SCPS_MAX_SC_PER_PROCESS]; /* each SparseCore worker's CPU */
  bool sc_pinned;
  struct scps_scratch *scratch; /* idle call scratch, reused call to call */
  int32_t S;
  uint8_t fingerprint[32];
  struct scps_config_pb *config; /* GetConfigResponse, packed per call with the limits in force */
  scps_saver saver;
  int32_t **sample_src;         /* [stack][sample]: source SparseCore of a sample */
  scps_sc_stack_stats *sc_stats;/* [stack * S + local sc] */
  /* [local sc]: ApplyGradients hold one for writing while they update that
   * SparseCore; inline Lookups hold all for reading (gang Lookups need none:
   * no worker writes while a gang job runs). */
  pthread_rwlock_t *sc_locks;
  int n_sc_locks;
  atomic_llong inline_lookups, inline_ns; /* the "inline" stage of Stats */
  atomic_llong pushes_sums_checked;       /* Stats: pushes whose row sums were checked one by one */
  atomic_llong pushes_updates_checked;    /* Stats: pushes whose updates were computed first to check them */
  scps_method_stats methods[SCPS_M_COUNT + 1];

  grpc_server *server;
  grpc_completion_queue **cqs;
  pthread_t *threads;
  int n_threads_started;
  void *handles[SCPS_M_COUNT];
  int port;
  double start_time;
  atomic_int draining;     /* shutdown asked: new calls are refused */
  atomic_int active;       /* calls taken and not yet freed, refused ones excluded */
  atomic_int grpc_stopping;/* grpc_server_shutdown_and_notify called */
  atomic_int cancelling;   /* drain timed out: queued Lookups are not run */
  scps_tag shutdown_tag;
  void (*on_stopped)(void *);
  void *on_stopped_ud;
  scps_auth auth; /* TLS files and tokens, read at create */

  /* Memory and transfer limits (scps_limits.c). */
  scps_budget *budget;
  char budget_how[160];          /* how the budget was chosen, for the log */
  pthread_mutex_t watch_mu;      /* the lists below */
  bool watch_mu_init;
  /* [SCPS_WATCH_ARRIVING]: calls whose request is still arriving;
   * [SCPS_WATCH_SENDING]: calls whose answer is being sent; oldest first. */
  struct { scps_call *head, *tail; } watch[3];
  atomic_llong requests_timed_out, answers_timed_out, trims;
  atomic_llong last_call_ns;     /* when the last call arrived or ended */
  atomic_bool trim_due;          /* calls ran since the last trim */
  int64_t trim_peak;             /* budget peak seen at the last periodic trim (budget thread) */
  int64_t next_periodic_trim_ns; /* budget thread */
  grpc_resource_quota *quota;    /* while the server is created */
  /* Draining with a checkpoint_dir and drain_quiet_ms: ApplyGradients are
   * still taken while pushes_open (scps_server_close_pushes ends it);
   * last_push_ns is when the last one arrived. */
  atomic_int pushes_open;
  atomic_llong last_push_ns;
  /* A Restore is loading (Lookups are refused), or one failed after
   * verification and left the tables undefined (scps_restore.h). */
  atomic_int restoring;
  atomic_int damaged;
  atomic_ullong state_id; /* GetConfigResponse.state_id (scps_restore_new_state) */
};

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
  float *scratch;           /* Lookup: each stack's activations (float32 or bfloat16), then
                             * one gather scratch per SparseCore worker;
                             * ApplyGradients: every stack's gradients as float32 */
  size_t scratch_cap;       /* floats of scratch, a block of srv->scratch */
  float *gather_scratch;    /* Lookup, pooled stacks: worker k's at gather_scratch + k * gather_stride */
  size_t gather_stride;     /* floats */
  int format;               /* FloatFormat of the activations or gradients */
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
  scps_role role;           /* the caller's, from its bearer token (scps_auth_role) */

  /* Memory and transfer limits (scps_limits.c). */
  scps_tag t_recv;
  scps_budget_waiter wait;    /* the call's wait for memory, when it waits */
  size_t charged;           /* bytes of the budget the call holds itself (its request) */
  int64_t watch_deadline_ns;/* in s->arriving or s->sending until then */
  scps_call *watch_prev, *watch_next;
  int watch_list;           /* 0: none, or SCPS_WATCH_ARRIVING or SCPS_WATCH_SENDING */
  bool watch_expired;       /* cancelled by the watch */
  /* Lookup and ApplyGradients: partitions dropped to the limits in force
   * (scps_partlimits_apply), which the stacks' coo views then point into. */
  void *limit_mem;
  /* ApplyGradients: the largest |gradient| of the stacks by row worker k
   * read, as float32 bits (grad_mag holds those by sample). */
  uint32_t row_mag[64];
  /* ApplyGradients: the first row whose update would not be finite, found
   * by worker 0 (stack index into stacks, local SparseCore); -1: none. */
  int fault_stack, fault_sc;
  scps_update_fault fault;
};

/* A validated stack of a Lookup or ApplyGradients request. */
typedef struct call_stack {
  int stack;
  scps_coo coo[64];         /* per local SparseCore; arrays point into the request */
  float *grads;             /* ApplyGradients: total_sample_count x dim float32, in the call's scratch */
  /* ApplyGradients by sample in bfloat16: grads holds the values as they
   * came, 2 bytes each (scps_engine_update_bf16 widens them as it reads). */
  bool grads_bf16;
  scps_req_span grad_src;   /* ApplyGradients: where they lie in the request */
  float *act;               /* Lookup in float32: total_sample_count x dim, the process's partial */
  uint8_t *encoded;         /* Lookup in bfloat16: the same values as sent, 2 bytes each */
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
   * shard before this update (scps_engine_value_bounds), taken by its
   * worker before the gang synchronises. */
  scps_value_bounds bounds[64][1 + SCPS_MAX_SLOTS];
} call_stack;

/* Finishes a call: status, optional message text, optional packed response
 * (copied). Safe from any thread, once per call. */
void scps_call_finish(scps_call *c, grpc_status_code status, const char *details,
                      const uint8_t *response, size_t len);

/* Finishes a call with OK and msg packed straight into the send buffer. */
void scps_call_finish_packed(scps_call *c, const ProtobufCMessage *msg);

/* Finishes a call with OK and a response the caller built (owned by the
 * call from now on); len is its size, for the counters. */
void scps_call_finish_buffer(scps_call *c, grpc_byte_buffer *response, size_t len);

/* The call whose wait for memory w is. */
static inline scps_call *scps_call_of_wait(scps_budget_waiter *w) {
  return (scps_call *)(void *)((char *)w - offsetof(scps_call, wait));
}

/* Drops a reference to a call (the last one frees it). */
void scps_call_unref(scps_call *c);

/* Health and Stats requests up to this size are counted in the memory
 * budget without waiting for room. */
#define SCPS_FREE_PASS_BYTES ((size_t)4 << 20)

/* What a call's request holds of the memory budget once it has arrived
 * (len bytes): the message and, for Lookup and ApplyGradients, its decoded
 * copy; for the other methods the most their decoding may take. */
size_t scps_request_memory(const scps_call *c, size_t len);

/* Reads the request into a single buffer; *data is malloc'd. */
int scps_call_read_payload(scps_call *c, uint8_t **data, size_t *len);

/* Builds the packed GetConfigResponse and per-stack tables handlers use. */
int scps_handlers_init(scps_server *s, scps_error *err);
void scps_handlers_free(scps_server *s);

/* Unpacks the call's request as `desc`; on failure answers the call and
 * returns NULL. The message is the call's (freed with it). */
ProtobufCMessage *scps_read_request(scps_call *c, const ProtobufCMessageDescriptor *desc);

/* Checks a data request's config_fingerprint and process_index; fills msg
 * and returns FAILED_PRECONDITION when the client's view differs. */
grpc_status_code scps_check_view(scps_call *c, const uint8_t *fp, size_t fp_len, int32_t process_index,
                                 char *msg, size_t len);

/* Runs the method of a newly arrived call (on its completion-queue thread). */
void scps_handle_call(scps_call *c);

/* Whether the caller of c may call method (the least role of each method is
 * scps_server.c's method_role table). */
bool scps_call_may(const scps_call *c, int method);

#endif
