/* scps_client_int: libscps's own structures (the client, its servers, batches,
 * operations and their calls) and the functions its files share. */
#ifndef SCPS_CLIENT_INT_H
#define SCPS_CLIENT_INT_H

#include <grpc/grpc.h>
#include <grpc/support/time.h>
#include <protobuf-c/protobuf-c.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "scps_client.h"
#include "scps_client_buf.h"
#include "scps_client_conn.h"
#include "scps_client_engine.h"
#include "scps_client_shm.h"
#include "scps_lookup_reply.h"
#include "scps_request.h"
#include "scps_method.h"
#include "scps_rows.h"
#include "scps_slices.h"
#include "scps_spec_pb.h"

/* Completion-queue threads: scps_client_options.cq_threads' default and limit. */
#define CQ_THREADS_DEFAULT 2
#define CQ_THREADS_MAX 16
#define MAX_SC_PER_PROCESS 64 /* scps.proto's Topology.sc_per_process bound */

typedef struct server {
  char *addr;
  grpc_channel *ch;
  void *methods[SCPS_M_COUNT];
  bool has_checkpoint_dir; /* GetConfig's checkpoint_dir is set */
  int64_t step;            /* GetConfig's last_step at connect; -1: none */
  uint64_t state_id;       /* GetConfig's state_id at connect, sent with every push */
  uint32_t wire_revision;  /* GetConfig's wire_revision at connect (at most this build's) */
  scps_shm_link shm;       /* shared-memory answers, when linked */
} server;

typedef struct rpc rpc;
typedef struct op op;

struct scps_client {
  int n;
  server *servers;
  int32_t S;
  scps_cluster_spec spec;
  scps_layout *layout;
  scps_prep *prep;
  pthread_mutex_t prep_mu;
  uint8_t fingerprint[SCPS_FINGERPRINT_BYTES];
  int64_t max_message_bytes; /* smallest of the servers' limits */
  scps_wirefmt act_fmt;       /* of activations on the wire */
  scps_wirefmt grad_fmt;      /* of gradients on the wire */
  scps_answer_mode answer;
  scps_gradient_mode gradients; /* AUTO becomes BY_SAMPLE with a server of wire_revision 0 */
  uint32_t wire_revision;       /* lowest of the servers' (and this build's) GetConfig wire_revision */
  int32_t **sample_feature; /* [stack][sample]: the sample's feature, as an index into the stack's features */
  int64_t step;              /* the servers' GetConfig last_step at connect (they agree); -1: none */
  bool ignore_checkpoint_due;
  int64_t checkpoint_timeout_ms;
  bool own_connections;
  scps_shm_mode shm_mode;
  atomic_uint_fast64_t bytes_placed;      /* answer bytes servers wrote into shared memory */
  atomic_uint_fast64_t bytes_placed_sent; /* Lookup request and gradient bytes sent through shared memory */
  atomic_uint_fast64_t bytes_sent, bytes_received; /* payloads, see scps_client_traffic */
  atomic_uint_fast64_t ids_dropped;                /* see scps_client_ids_dropped */

  bool grpc_started;
  grpc_completion_queue *cq;
  pthread_t threads[CQ_THREADS_MAX];
  int n_threads;

  pthread_mutex_t mu;
  pthread_cond_t cv; /* an operation finished (waiters and destroy re-check) */
  int in_flight;     /* operations started and not yet released */
  rpc *retries;      /* Lookup attempts waiting for their backoff, by due time */
  /* The latest automatic checkpoint (guarded by mu). */
  bool auto_any;
  int auto_rc;
  scps_error auto_err;
  scps_client_checkpoint_result auto_result;
  scps_client_conn *conn; /* credentials of the channels, the token of every call */
};

struct scps_batch {
  scps_client *c;
  atomic_bool busy; /* a prepare, lookup or apply owns the batch */
  bool prepared;
  grpc_slice *lookup;   /* [server] the packed LookupRequest */
  size_t *parts_off;    /* [server * n_stacks] StackPartitions body within lookup[server] */
  size_t *parts_len;
  int *slot;            /* [server * n_stacks] position in that request, -1: not sent */
  int *n_sent;          /* [server] stacks sent */
  bool *stack_used;     /* [n_stacks] entries on some server */
  /* Reused from batch to batch, so steady-state steps allocate nothing
   * large (see scps_client_buf.h). */
  scps_client_buf **lookup_buf; /* [server] backs lookup[server] */
  scps_client_buf **grad_buf;   /* [n_stacks] gradients sent by the last apply */
  /* A lookup's replies as gRPC received them, merged from there and let go
   * by the merge: copying them out first would cost a pass per byte. */
  scps_slices *reply;           /* [server] */
  scps_lookup_reply_stack *parsed; /* [server * n_stacks] reply's stacks, by slot */
  /* Stacks asked for distinct rows (the same for every server), and the
   * partitions kept by row where an answer is pooled or a push summed here. */
  bool *distinct;         /* [n_stacks] */
  scps_rows *rows; /* [server * n_stacks] */
  /* Pushes: per (server, stack) sent, by row or by sample
   * (scps_gradient_mode), and for by row the buffer that holds the stack's
   * partitions and summed gradients, reused from push to push. */
  bool *by_row;                /* [server * n_stacks] */
  size_t *n_rows;              /* [server * n_stacks] distinct rows, when some mode is AUTO */
  size_t *row_parts_len;       /* [server * n_stacks] */
  scps_client_buf **row_buf;   /* [server * n_stacks] */
  /* Shared-memory answers: each server's segment, and whether the lookup
   * in flight asked that server to place its answer there. */
  scps_shm_seg *shm;    /* [server] */
  bool *shm_asked;      /* [server] */
  float **view;         /* [n_features] scps_client_lookup_view's arrays, made at its first use */
};

struct rpc {
  op *op;
  int server;
  grpc_slice *req;  /* request pieces, one reference each, reused by retries */
  size_t n_req;
  /* When has_envelope: sent instead of req, a LookupRequest naming where
   * the same pieces lie in the batch's segment (request_placement),
   * envelope_bytes of them; a retry sends req on the connection. */
  grpc_slice envelope;
  bool has_envelope;
  size_t envelope_bytes;
  grpc_call *call;
  grpc_byte_buffer *sent, *response;
  grpc_metadata_array md_initial, md_trailing;
  grpc_status_code status;
  grpc_slice details;
  const char *error_string;
  int attempts;
  atomic_int handoff; /* see rpc_start */
  int64_t backoff_ms;
  int64_t due_ns;
  rpc *next_retry;
  int rc; /* this server's outcome */
  scps_error err;
  ProtobufCMessage *reply; /* GetConfig and Checkpoint */
  grpc_metadata auth_md;   /* the token sent with the call */
};

struct op {
  scps_client *c;
  int method;
  scps_batch *b;
  gpr_timespec deadline;
  int64_t deadline_ns;
  int64_t start_ns;
  bool wait_for_ready;
  bool blocking;
  bool finished;
  int64_t step;
  atomic_bool checkpoint_due; /* ApplyGradients: some server asked for a checkpoint */
  scps_client_checkpoint_result *result; /* Checkpoint: filled on success */
  float **acts;
  void *topk;             /* TopK: the merge's state (scps_client_topk.c), freed with o */
  const float **view_out; /* scps_client_lookup_view: where each feature's activations are */
  scps_client_done done;
  void *ud;
  /* The method's own steps, set by the file that starts the operation
   * (NULL: the call layer's generic step). read: an OK answer, generic:
   * unpacked into r->reply. outcome: once every server answered, the
   * operation's result (first: the lowest server that failed, -1: none),
   * generic: scps__client_op_failure. then: an asynchronous operation, after
   * its outcome and before done; true when it has handed done on to an
   * operation of its own (o is then destroyed without calling done). */
  int (*read)(rpc *r);
  int (*outcome)(op *o, int first, int failures, scps_error *err);
  bool (*then)(op *o, int *rc, scps_error *err);
  atomic_int pending;
  int n_rpcs;
  rpc rpcs[];
};

static inline const char *scps__client_addr(const scps_client *c, int p) { return c->servers[p].addr; }

/* ---- scps_client_op: operations fanned out to every server, one call each,
 * on the client's completion queue; retries; the queue threads. */

/* gRPC's monotonic clock, in ns, and a deadline on it as gRPC takes it. */
int64_t scps__client_op_now_ns(void);
gpr_timespec scps__client_op_ts(int64_t ns);

/* An operation of method with n_rpcs calls (rpcs[p] to server p), due
 * timeout_ms from now; counted in flight until destroyed. NULL: no memory. */
op *scps__client_op_create(scps_client *c, int method, int n_rpcs, int64_t timeout_ms);
void scps__client_op_destroy(op *o);

/* Starts every server's call of an operation whose requests are set;
 * servers whose call cannot start count as answered with that error. A
 * blocking one is then waited for (scps__client_op_wait), an asynchronous
 * one finishes on a queue thread: outcome, then, done, destroy. */
void scps__client_op_launch(op *o, bool blocking, scps_client_done done, void *ud, op **out);

/* Starts the calls of servers [from, to) only (a blocking operation). */
void scps__client_op_start_range(op *o, int from, int to);

/* Waits until every call of a blocking operation has answered. */
void scps__client_op_wait(op *o);

/* The operation's result once every server answered (its outcome hook, or
 * scps__client_op_failure). */
int scps__client_op_outcome(op *o, scps_error *err);

/* A blocking operation waited for: its outcome, its batch freed, o destroyed. */
int scps__client_op_finish(op *o, scps_error *err);

/* The generic result: 0 when no server failed (first < 0), else the lowest
 * failed server's error, listing the others that failed. */
int scps__client_op_failure(const op *o, int first, int failures, scps_error *err);

/* Lists the servers whose outcome is (failed ? an error : OK): "0, 2", "none". */
void scps__client_op_list_servers(const op *o, bool failed, char *buf, size_t len);

/* r's answer unpacked as its method's response message (*out, freed by the
 * caller), or SCPS_EIO naming the server. */
int scps__client_op_unpack(rpc *r, ProtobufCMessage **out);

/* The client's completion queue and n threads taking its completions;
 * stop shuts the queue down and waits for them (every operation must have
 * ended); the queue is destroyed after the channels. */
int scps__client_op_threads_start(scps_client *c, int n, scps_error *err);
void scps__client_op_threads_stop(scps_client *c);

/* ---- scps_client_connect: channels, GetConfig and its cross-checks. */

/* A channel to every server of o, each address checked. */
int scps__client_connect_servers(scps_client *c, const scps_client_options *o, scps_error *err);

/* Reads every server's configuration, checks them against each other and
 * against expected (NULL: none), adopts server 0's (layout, prep, limits in
 * force) and waits for the servers' steps to agree. */
int scps__client_connect_configure(scps_client *c, const scps_client_options *o, const scps_client_expected *expected,
                                  scps_error *err);

/* ---- scps_batch: batches' memory and their use by one operation at a time. */

/* Claims a prepared batch for one operation (fn names the caller in errors). */
int scps__batch_claim(scps_client *c, scps_batch *b, const char *fn, scps_error *err);

/* Lets go of the batch's requests: it must be prepared again. */
void scps__batch_release(scps_batch *b);

/* ---- scps_client_prepare */

/* Runs fn(ctx, i) for i in [0, items) on the preprocessing pool's threads
 * when no batch is being prepared, else on this thread alone rather than
 * waiting for it. */
void scps__client_prepare_parallel(scps_client *c, int items, void (*fn)(void *, int), void *ctx);

/* ---- scps_client_checkpoint: what a push asks of the checkpoint policy. */

/* A push of step that every server applied was answered with
 * checkpoint_due: saves the cluster checkpoint of step (unless the client
 * ignores those requests) and keeps its outcome for
 * scps_client_auto_checkpoint. Blocking. */
void scps__client_checkpoint_due(scps_client *c, int64_t step);

/* The same after an asynchronous push: true when a save was started, which
 * then runs done(ud, 0, ...) once it has finished; false when none was
 * (ignored, or it could not start, which is kept as its outcome): the
 * caller runs done itself. */
bool scps__client_checkpoint_due_async(scps_client *c, int64_t step, scps_client_done done, void *ud);

#endif
