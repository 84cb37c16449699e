/* libscps: channels and the configuration check, batches encoded per server,
 * fan-out of unary calls on one completion queue, retries, merging. */
#include "scps_client.h"

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "scps.pb-c.h"
#include "scps_bf16.h"
#include "scps_client_buf.h"
#include "scps_client_conn.h"
#include "scps_rows.h"
#include "scps_method.h"
#include "scps_status.h"
#include "scps_client_wire.h"
#include "scps_confine.h"
#include "scps_spec_pb.h"
#include "scps_step.h"

/* Completion-queue threads: scps_client_options.cq_threads' default and limit. */
#define CQ_THREADS_DEFAULT 2
#define CQ_THREADS_MAX 16
#define DEFAULT_CONNECT_TIMEOUT_MS 10000
#define RETRY_FIRST_MS 20
#define RETRY_MAX_MS 200
#define MAX_SERVERS 1024
#define MAX_SC_PER_PROCESS 64 /* scps.proto's Topology.sc_per_process bound */

#define DEFAULT_CHECKPOINT_TIMEOUT_MS 600000
/* Servers whose steps differ at connect are asked again this often, this
 * long apart (a push of another trainer in flight), before the client
 * refuses. */
#define STEP_AGREE_ROUNDS 10
#define STEP_AGREE_PAUSE_MS 100
#define MAX_DIRECTORY 4000 /* leaves room for the step directory and file names below PATH_MAX */

typedef struct server {
  char *addr;
  grpc_channel *ch;
  void *methods[SCPS_M_COUNT];
  bool has_checkpoint_dir; /* GetConfig's checkpoint_dir is set */
  int64_t step;            /* GetConfig's last_step at connect; -1: none */
  uint64_t state_id;       /* GetConfig's state_id at connect, sent with every push */
} server;

typedef struct rpc rpc;

struct scps_client {
  int n;
  server *servers;
  int32_t S;
  scps_cluster_spec spec;
  scps_layout *layout;
  scps_prep *prep;
  pthread_mutex_t prep_mu;
  uint8_t fingerprint[SCPS_WIRE_FINGERPRINT_BYTES];
  int64_t max_message_bytes; /* smallest of the servers' limits */
  scps_float_format format;   /* of activations and gradients on the wire */
  size_t value_bytes;         /* 4 or 2: bytes of one such value */
  scps_answer_mode answer;
  scps_gradient_mode gradients; /* AUTO becomes BY_SAMPLE with a server of wire_revision 0 */
  uint32_t wire_revision;       /* lowest of the servers' (and this build's) GetConfig wire_revision */
  int32_t **sample_feature; /* [stack][sample]: the sample's feature, as an index into the stack's features */
  int64_t step;              /* the servers' GetConfig last_step at connect (they agree); -1: none */
  bool ignore_checkpoint_due;
  int64_t checkpoint_timeout_ms;
  bool own_connections;
  atomic_uint_fast64_t bytes_sent, bytes_received; /* payloads, see scps_client_traffic */

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
  scps_wire_activations *parsed; /* [server * n_stacks] reply's stacks, by slot */
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
};

struct rpc {
  struct op *op;
  int server;
  grpc_slice *req;  /* request pieces, one reference each, reused by retries */
  size_t n_req;
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

typedef struct op {
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
  scps_client_done done;
  void *ud;
  atomic_int pending;
  int n_rpcs;
  rpc rpcs[];
} op;

/* ------------------------------------------------------------------ time */

/* gRPC's monotonic clock, not scps_clock's: deadlines and retry times made
 * from it go back to gRPC as GPR_CLOCK_MONOTONIC timespecs. */
static int64_t now_ns(void) {
  gpr_timespec t = gpr_now(GPR_CLOCK_MONOTONIC);
  return t.tv_sec * 1000000000 + t.tv_nsec;
}

static gpr_timespec ns_to_ts(int64_t ns) {
  gpr_timespec t;
  t.tv_sec = ns / 1000000000;
  t.tv_nsec = (int32_t)(ns % 1000000000);
  t.clock_type = GPR_CLOCK_MONOTONIC;
  return t;
}

/* ---------------------------------------------------------------- errors */

static const char *addr_of(const scps_client *c, int p) { return c->servers[p].addr; }

/* ------------------------------------------------------------ operations */

static op *op_create(scps_client *c, int method, int n_rpcs, int64_t timeout_ms) {
  op *o = calloc(1, sizeof *o + sizeof(rpc) * (size_t)n_rpcs);
  if (!o) return NULL;
  o->c = c;
  o->method = method;
  o->n_rpcs = n_rpcs;
  o->start_ns = now_ns();
  o->deadline_ns = timeout_ms > INT64_MAX / 2000000 ? INT64_MAX / 2 : o->start_ns + timeout_ms * 1000000;
  o->deadline = ns_to_ts(o->deadline_ns);
  for (int i = 0; i < n_rpcs; i++) {
    o->rpcs[i].op = o;
    o->rpcs[i].server = i;
    o->rpcs[i].backoff_ms = RETRY_FIRST_MS;
  }
  pthread_mutex_lock(&c->mu);
  c->in_flight++;
  pthread_mutex_unlock(&c->mu);
  return o;
}

static void op_destroy(op *o) {
  scps_client *c = o->c;
  for (int i = 0; i < o->n_rpcs; i++) {
    rpc *r = &o->rpcs[i];
    for (size_t k = 0; k < r->n_req; k++) grpc_slice_unref(r->req[k]);
    free(r->req);
    if (r->reply) protobuf_c_message_free_unpacked(r->reply, NULL);
  }
  free(o->acts);
  free(o);
  pthread_mutex_lock(&c->mu);
  c->in_flight--;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

static int op_result(op *o, scps_error *err);
static int checkpoint_start(scps_client *c, int64_t step, const char *directory, int64_t deadline_ms, bool blocking,
                            scps_client_done done, void *ud, op **out, scps_error *err);
static void record_auto_checkpoint(scps_client *c, int rc, const scps_error *err,
                                   const scps_client_checkpoint_result *result);

/* The last server answered. Blocking callers are woken and finish on their
 * own thread; asynchronous operations finish here, on a queue thread. An
 * asynchronous push that a server answered with checkpoint_due is followed
 * by the automatic checkpoint, and its done runs once that has finished
 * (asynchronous Checkpoint operations are only ever automatic ones). */
static void op_complete(op *o) {
  scps_client *c = o->c;
  if (o->blocking) {
    pthread_mutex_lock(&c->mu);
    o->finished = true;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return;
  }
  scps_error err;
  scps_error_clear(&err);
  scps_client_checkpoint_result result;
  memset(&result, 0, sizeof result);
  if (o->method == SCPS_M_CHECKPOINT) o->result = &result;
  int rc = op_result(o, &err);
  if (o->b) atomic_store(&o->b->busy, false);
  if (o->method == SCPS_M_APPLY_GRADIENTS && !rc && atomic_load(&o->checkpoint_due) && !c->ignore_checkpoint_due) {
    op *ck;
    int e = checkpoint_start(c, o->step, NULL, c->checkpoint_timeout_ms, false, o->done, o->ud, &ck, &err);
    if (!e) {
      op_destroy(o);
      return;
    }
    record_auto_checkpoint(c, e, &err, NULL);
    scps_error_clear(&err);
  }
  if (o->method == SCPS_M_CHECKPOINT) {
    record_auto_checkpoint(c, rc, &err, rc ? NULL : &result);
    rc = 0; /* the push this checkpoint followed succeeded */
    scps_error_clear(&err);
  }
  o->done(o->ud, rc, &err);
  op_destroy(o);
}

static void rpc_finished(rpc *r) {
  if (atomic_fetch_sub(&r->op->pending, 1) == 1) op_complete(r->op);
}

static int rpc_start(rpc *r) {
  op *o = r->op;
  scps_client *c = o->c;
  server *s = &c->servers[r->server];
  r->attempts++;
  r->call = grpc_channel_create_registered_call(s->ch, NULL, GRPC_PROPAGATE_DEFAULTS, c->cq,
                                                s->methods[o->method], o->deadline, NULL);
  r->sent = grpc_raw_byte_buffer_create(r->req, r->n_req);
  atomic_fetch_add_explicit(&c->bytes_sent, grpc_byte_buffer_length(r->sent), memory_order_relaxed);
  r->response = NULL;
  r->error_string = NULL;
  r->details = grpc_empty_slice();
  grpc_metadata_array_init(&r->md_initial);
  grpc_metadata_array_init(&r->md_trailing);
  grpc_op ops[6];
  memset(ops, 0, sizeof ops);
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  if (o->wait_for_ready)
    ops[0].flags = GRPC_INITIAL_METADATA_WAIT_FOR_READY | GRPC_INITIAL_METADATA_WAIT_FOR_READY_EXPLICITLY_SET;
  scps_client_conn_metadata(c->conn, &ops[0], &r->auth_md);
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = r->sent;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[3].data.recv_initial_metadata.recv_initial_metadata = &r->md_initial;
  ops[4].op = GRPC_OP_RECV_MESSAGE;
  ops[4].data.recv_message.recv_message = &r->response;
  ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[5].data.recv_status_on_client.trailing_metadata = &r->md_trailing;
  ops[5].data.recv_status_on_client.status = &r->status;
  ops[5].data.recv_status_on_client.status_details = &r->details;
  ops[5].data.recv_status_on_client.error_string = &r->error_string;
  /* The completion queue hands r to a queue thread inside gRPC, where
   * ThreadSanitizer cannot see it; this release (acquired in rpc_done) makes
   * the hand-off visible. */
  grpc_call *call = r->call;
  atomic_store_explicit(&r->handoff, r->attempts, memory_order_release);
  grpc_call_error e = call ? grpc_call_start_batch(call, ops, 6, r, NULL) : GRPC_CALL_ERROR;
  if (e == GRPC_CALL_OK) return 0;
  if (call) grpc_call_unref(call);
  r->call = NULL;
  grpc_byte_buffer_destroy(r->sent);
  r->sent = NULL;
  grpc_metadata_array_destroy(&r->md_initial);
  grpc_metadata_array_destroy(&r->md_trailing);
  r->rc = scps_error_set(&r->err, SCPS_EINTERNAL, "server %d (%s): %s: cannot start the call (grpc_call_error %d)",
                         r->server, addr_of(c, r->server), scps_method_name(o->method), (int)e);
  return r->rc;
}

static void op_start(op *o);

/* Starts an operation built by one of the *_start functions. */
static void op_launch(op *o, bool blocking, scps_client_done done, void *ud, op **out) {
  o->blocking = blocking;
  o->done = done;
  o->ud = ud;
  *out = o;
  op_start(o);
}

/* Starts every server's call; servers whose call cannot start count as
 * answered with that error. */
static void op_start(op *o) {
  int n = o->n_rpcs;
  atomic_store(&o->pending, n);
  /* Once the last call is started an asynchronous o may complete and be
   * freed on a queue thread: nothing here reads o after that. */
  for (int i = 0; i < n; i++) {
    rpc *r = &o->rpcs[i];
    if (rpc_start(r)) rpc_finished(r);
  }
}

static void schedule_retry(rpc *r, int64_t due) {
  scps_client *c = r->op->c;
  r->due_ns = due;
  pthread_mutex_lock(&c->mu);
  rpc **p = &c->retries;
  while (*p && (*p)->due_ns <= due) p = &(*p)->next_retry;
  r->next_retry = *p;
  *p = r;
  pthread_mutex_unlock(&c->mu);
}

static void run_due_retries(scps_client *c) {
  for (;;) {
    pthread_mutex_lock(&c->mu);
    rpc *r = c->retries;
    if (r && r->due_ns <= now_ns())
      c->retries = r->next_retry;
    else
      r = NULL;
    pthread_mutex_unlock(&c->mu);
    if (!r) return;
    if (rpc_start(r)) rpc_finished(r);
  }
}

/* Keeps a LookupResponse's slices in the batch and checks its stacks
 * against those the request listed; the merge then reads the activations
 * where gRPC put them. */
static int read_lookup_reply(rpc *r) {
  op *o = r->op;
  scps_client *c = o->c;
  scps_batch *b = o->b;
  const scps_layout *l = c->layout;
  int p = r->server, ns = l->n_stacks;
  scps_slices *m = &b->reply[p];
  scps_slices_free(m);
  int rc = scps_slices_init(m, r->response);
  if (rc)
    return scps_error_set(&r->err, rc == SCPS_ENOMEM ? SCPS_ENOMEM : SCPS_EIO,
                          "server %d (%s): Lookup: cannot read a %zu-byte response", p, addr_of(c, p),
                          grpc_byte_buffer_length(r->response));
  scps_wire_activations *acts = &b->parsed[(size_t)p * (size_t)ns];
  int got = scps_wire_parse_lookup_response(m, acts, ns);
  if (got < 0)
    return scps_error_set(&r->err, SCPS_EIO, "server %d (%s): Lookup: response of %zu bytes is not a valid "
                          "scps.v1.LookupResponse", p, addr_of(c, p), m->total);
  if (got != b->n_sent[p])
    return scps_error_set(&r->err, SCPS_EIO, "server %d (%s): Lookup answered %d stacks for a request of %d", p,
                          addr_of(c, p), got, b->n_sent[p]);
  for (int st = 0; st < ns; st++) {
    int k = b->slot[p * ns + st];
    if (k < 0) continue;
    const scps_wire_activations *a = &acts[k];
    const scps_stack_layout *sl = &l->stacks[st];
    bool rows = b->distinct[st];
    size_t values = rows ? scps_rows_count(&b->rows[p * ns + st]) : (size_t)sl->total_sample_count;
    size_t want = values * (size_t)sl->dim * c->value_bytes;
    uint8_t name[SCPS_STACK_NAME_MAX];
    size_t shown = a->stack_len < sizeof name ? a->stack_len : sizeof name;
    const uint8_t *got_name = scps_slices_span(m, a->stack_off, shown, name);
    if (a->stack_len != strlen(sl->name) || memcmp(got_name, sl->name, a->stack_len))
      return scps_error_set(&r->err, SCPS_EIO, "server %d (%s): Lookup answer stacks[%d] is '%.*s', requested '%s'",
                            p, addr_of(c, p), k, (int)shown, (const char *)got_name, sl->name);
    if (a->rows != rows)
      return scps_error_set(&r->err, SCPS_EIO, "server %d (%s): Lookup answer for stack '%s' holds %s, %s asked for",
                            p, addr_of(c, p), sl->name, a->rows ? "distinct rows" : "pooled activations",
                            rows ? "distinct rows were" : "pooled activations were");
    if (a->len != want)
      return scps_error_set(&r->err, SCPS_EIO,
                            "server %d (%s): Lookup answer for stack '%s' holds %zu bytes of %s, expected %zu", p,
                            addr_of(c, p), sl->name, a->len, rows ? "distinct rows" : "activations", want);
  }
  return 0;
}

static int read_reply(rpc *r) {
  op *o = r->op;
  scps_client *c = o->c;
  const ProtobufCMessageDescriptor *desc = scps_method_response(o->method);
  if (!r->response)
    return scps_error_set(&r->err, SCPS_EIO, "server %d (%s): %s: OK without a response message", r->server,
                          addr_of(c, r->server), scps_method_name(o->method));
  if (o->method == SCPS_M_LOOKUP) return read_lookup_reply(r);
  grpc_byte_buffer_reader rd;
  if (!grpc_byte_buffer_reader_init(&rd, r->response))
    return scps_error_set(&r->err, SCPS_EIO, "server %d (%s): %s: unreadable response", r->server,
                          addr_of(c, r->server), scps_method_name(o->method));
  grpc_slice all = grpc_byte_buffer_reader_readall(&rd);
  grpc_byte_buffer_reader_destroy(&rd);
  ProtobufCMessage *m = protobuf_c_message_unpack(desc, NULL, GRPC_SLICE_LENGTH(all), GRPC_SLICE_START_PTR(all));
  size_t len = GRPC_SLICE_LENGTH(all);
  grpc_slice_unref(all);
  if (!m)
    return scps_error_set(&r->err, SCPS_EIO, "server %d (%s): %s: response of %zu bytes is not a valid %s",
                          r->server, addr_of(c, r->server), scps_method_name(o->method), len, desc->name);
  if (o->method == SCPS_M_APPLY_GRADIENTS) {
    if (((const Scps__V1__ApplyGradientsResponse *)m)->checkpoint_due) atomic_store(&o->checkpoint_due, true);
    protobuf_c_message_free_unpacked(m, NULL);
    return 0;
  }
  r->reply = m;
  return 0;
}

/* One server's call completed (its tag came back on a queue thread). */
static void rpc_done(rpc *r) {
  (void)atomic_load_explicit(&r->handoff, memory_order_acquire);
  op *o = r->op;
  scps_client *c = o->c;
  grpc_status_code st = r->status;
  char text[SCPS_ERROR_MSG_MAX / 2];
  size_t n = GRPC_SLICE_LENGTH(r->details);
  if (n >= sizeof text) n = sizeof text - 1;
  memcpy(text, GRPC_SLICE_START_PTR(r->details), n);
  text[n] = '\0';
  grpc_slice_unref(r->details);
  gpr_free((void *)r->error_string);
  grpc_metadata_array_destroy(&r->md_initial);
  grpc_metadata_array_destroy(&r->md_trailing);
  grpc_call_unref(r->call);
  r->call = NULL;
  grpc_byte_buffer_destroy(r->sent);
  r->sent = NULL;
  if (r->response)
    atomic_fetch_add_explicit(&c->bytes_received, grpc_byte_buffer_length(r->response), memory_order_relaxed);

  if (st == GRPC_STATUS_OK) {
    r->rc = read_reply(r);
  } else if ((st == GRPC_STATUS_UNAVAILABLE || st == GRPC_STATUS_CANCELLED) && o->method == SCPS_M_LOOKUP &&
             now_ns() + r->backoff_ms * 1000000 < o->deadline_ns) {
    /* Lookups are idempotent: try again after a short backoff. CANCELLED
     * comes from a draining server cancelling calls that arrive after its
     * drain (this client cancels none), so it is retried like UNAVAILABLE. */
    if (r->response) grpc_byte_buffer_destroy(r->response);
    r->response = NULL;
    int64_t due = now_ns() + r->backoff_ms * 1000000;
    r->backoff_ms = r->backoff_ms * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : r->backoff_ms * 2;
    schedule_retry(r, due);
    return;
  } else {
    /* CANCELLED keeps its own code (a server draining for shutdown; the
     * call may go to the process that replaces it): callers and scps-loadgen
     * tell it from UNAVAILABLE. */
    int code = scps_status_to_error(st);
    const char *why = "";
    char unconnected[320];
    if (o->method == SCPS_M_GET_CONFIG && st == GRPC_STATUS_DEADLINE_EXCEEDED) {
      code = SCPS_EUNAVAIL;
      snprintf(unconnected, sizeof unconnected, " (no connection within the connect timeout: %s; an scps-server "
               "listens once its tables are initialized)", scps_client_conn_why_unconnected(c->conn));
      why = grpc_channel_check_connectivity_state(c->servers[r->server].ch, 0) == GRPC_CHANNEL_READY
                ? " (connected, but no answer within the connect timeout)"
                : unconnected;
    } else if (o->method == SCPS_M_LOOKUP && (st == GRPC_STATUS_UNAVAILABLE || st == GRPC_STATUS_CANCELLED)) {
      why = r->attempts > 1 ? " (retried until the deadline)"
                            : " (not retried: less of the deadline was left than the next backoff)";
    } else if (o->method == SCPS_M_LOOKUP && st == GRPC_STATUS_DEADLINE_EXCEEDED && r->attempts > 1) {
      why = " (after retries on UNAVAILABLE)";
    }
    r->rc = scps_error_set(&r->err, code, "server %d (%s): %s: %s: %s%s; %d attempt%s in %lld ms", r->server,
                           addr_of(c, r->server), scps_method_name(o->method), scps_status_name(st), text, why,
                           r->attempts, r->attempts == 1 ? "" : "s",
                           (long long)((now_ns() - o->start_ns) / 1000000));
  }
  if (r->response) grpc_byte_buffer_destroy(r->response);
  r->response = NULL;
  rpc_finished(r);
}

static void *cq_main(void *arg) {
  scps_client *c = arg;
  for (;;) {
    pthread_mutex_lock(&c->mu);
    gpr_timespec until = c->retries ? ns_to_ts(c->retries->due_ns) : gpr_inf_future(GPR_CLOCK_MONOTONIC);
    pthread_mutex_unlock(&c->mu);
    grpc_event ev = grpc_completion_queue_next(c->cq, until, NULL);
    if (ev.type == GRPC_QUEUE_SHUTDOWN) return NULL;
    if (ev.type == GRPC_OP_COMPLETE) rpc_done(ev.tag);
    run_due_retries(c);
  }
}

/* Waits for a blocking operation and finishes it on the caller's thread;
 * *checkpoint_due (may be NULL) tells whether a server asked for one. */
static int op_wait(op *o, bool *checkpoint_due, scps_error *err) {
  scps_client *c = o->c;
  pthread_mutex_lock(&c->mu);
  while (!o->finished) pthread_cond_wait(&c->cv, &c->mu);
  pthread_mutex_unlock(&c->mu);
  if (checkpoint_due) *checkpoint_due = atomic_load(&o->checkpoint_due);
  int rc = op_result(o, err);
  if (o->b) atomic_store(&o->b->busy, false);
  op_destroy(o);
  return rc;
}

/* ------------------------------------------------------------- results */

/* Whether pool_rows pools stack st's answers straight into the caller's
 * arrays, server after server in process order (the first written, each
 * later one's added, sample by sample), so the merge skips the stack: its answers came in distinct rows and every feature of the stack
 * is as wide as the stack. Otherwise each server's rows are pooled into its
 * rows buffer, laid out as a pooled answer, for the merge to read. */
static bool rows_in_place(const scps_client *c, const scps_batch *b, int st) {
  const scps_layout *l = c->layout;
  if (!b->distinct[st]) return false;
  const scps_stack_layout *sl = &l->stacks[st];
  for (int i = 0; i < sl->n_features; i++)
    if (l->table_specs[l->features[sl->features[i]].table].embedding_dim != sl->dim) return false;
  return true;
}

/* Rows of one feature a merge item covers: a few hundred KiB, so the pool's
 * threads share a lookup's features evenly. */
#define MERGE_ROWS 512

/* Rows [r0, r1) of feature f: the servers' partials summed in process order
 * (the first copied), each row read where it lies in the received slices (a
 * row split between two slices is gathered into tmp first). A feature as
 * wide as its stack is one contiguous range there, copied (float32) or
 * widened (bfloat16) run by run. */
static void merge_rows(const op *o, int f, size_t r0, size_t r1) {
  const scps_client *c = o->c;
  const scps_layout *l = c->layout;
  const scps_batch *b = o->b;
  int ns = l->n_stacks;
  const size_t vb = c->value_bytes;
  uint8_t tmp[SCPS_DIM_MAX * sizeof(float)];
  const scps_feature_layout *fl = &l->features[f];
  const scps_stack_layout *sl = &l->stacks[fl->stack];
  size_t width = (size_t)l->table_specs[fl->table].embedding_dim, dim = (size_t)sl->dim;
  float *restrict dst = o->acts[f];
  bool first = true;
  for (int p = 0; p < c->n; p++) {
    int k = b->slot[p * ns + fl->stack];
    if (k < 0) continue;
    if (rows_in_place(c, b, fl->stack)) {
      first = false;
      continue;
    }
    if (b->distinct[fl->stack]) {
      /* Pooled by pool_rows into float32, laid out as a pooled answer. */
      const float *src = b->rows[p * ns + fl->stack].pooled + ((size_t)fl->sample_offset + r0) * dim;
      for (size_t r = r0; r < r1; r++, src += dim) {
        float *restrict d = dst + r * width;
        if (first) memcpy(d, src, width * sizeof(float));
        else
          for (size_t j = 0; j < width; j++) d[j] += src[j];
      }
      first = false;
      continue;
    }
    const scps_slices *m = &b->reply[p];
    size_t at = b->parsed[p * ns + k].off + ((size_t)fl->sample_offset + r0) * dim * vb;
    if (first && vb == sizeof(float) && width == dim) {
      uint8_t *d = (uint8_t *)(dst + r0 * width);
      for (size_t left = (r1 - r0) * dim * vb, avail; left > 0; left -= avail, at += avail, d += avail) {
        const uint8_t *s = scps_slices_at(m, at, &avail);
        if (avail > left) avail = left;
        memcpy(d, s, avail);
      }
      first = false;
      continue;
    }
    if (first && width == dim) {
      /* bfloat16, widened slice by slice; a value split between two slices
       * is put together in tmp. */
      float *d = dst + r0 * width;
      for (size_t left = (r1 - r0) * dim, n, avail; left > 0; left -= n, at += 2 * n, d += n) {
        const uint8_t *s = scps_slices_at(m, at, &avail);
        n = avail / 2 < left ? avail / 2 : left;
        if (!n) {
          s = scps_slices_span(m, at, 2, tmp);
          n = 1;
        }
        scps_bf16_decode(s, d, n);
      }
      first = false;
      continue;
    }
    for (size_t r = r0; r < r1; r++, at += dim * vb) {
      float *restrict d = dst + r * width;
      /* Unaligned in the slices: read by memcpy, which compiles to plain
       * (vector) loads. */
      const uint8_t *restrict s = scps_slices_span(m, at, width * vb, tmp);
      if (vb == 2 && first) {
        scps_bf16_decode(s, d, width);
      } else if (vb == 2) {
        for (size_t j = 0; j < width; j++) d[j] += scps_bf16_to_f32((uint16_t)(s[2 * j] | s[2 * j + 1] << 8));
      } else if (first) {
        memcpy(d, s, width * sizeof(float));
      } else {
        for (size_t j = 0; j < width; j++) {
          float v;
          memcpy(&v, s + j * sizeof(float), sizeof v);
          d[j] += v;
        }
      }
    }
    first = false;
  }
  if (first) memset(dst + r0 * width, 0, (r1 - r0) * width * sizeof(float));
}

static size_t merge_chunks(const scps_layout *l) {
  int32_t most = 1;
  for (int f = 0; f < l->n_features; f++)
    if (l->feature_specs[f].batch_size > most) most = l->feature_specs[f].batch_size;
  return ((size_t)most + MERGE_ROWS - 1) / MERGE_ROWS;
}

typedef struct merge_job {
  const op *o;
  size_t chunks; /* items per feature */
} merge_job;

static void merge_item(void *ctx, int item) {
  const merge_job *m = ctx;
  const scps_layout *l = m->o->c->layout;
  size_t f = (size_t)item / m->chunks, r0 = (size_t)item % m->chunks * MERGE_ROWS;
  size_t rows = (size_t)l->feature_specs[f].batch_size, r1 = r0 + MERGE_ROWS < rows ? r0 + MERGE_ROWS : rows;
  if (r0 < r1) merge_rows(m->o, (int)f, r0, r1);
}

/* Samples a pooling item covers: 4096 x 64 floats is 1 MiB of output. */
#define POOL_SAMPLES 4096

/* The answers in distinct rows of one lookup (b->rows indices, server *
 * stacks + stack), each widened by an item of its own; then the pooling
 * units: one answer pooled into its rows buffer (server >= 0), or a stack
 * pooled in place from every server's answer (server -1), each in items of
 * POOL_SAMPLES samples, unit u's first item items[u] (items[n_units] = all). */
typedef struct pool_job {
  const op *o;
  int n_answers, n_units;
  size_t *answer;
  int *server, *stack, *items;
  atomic_int failed;
} pool_job;

static void widen_item(void *ctx, int item) {
  pool_job *j = ctx;
  const op *o = j->o;
  const scps_client *c = o->c;
  scps_batch *b = o->b;
  int ns = c->layout->n_stacks;
  size_t i = j->answer[item];
  int p = (int)(i / (size_t)ns), st = (int)(i % (size_t)ns);
  const scps_stack_layout *sl = &c->layout->stacks[st];
  const scps_wire_activations *a = &b->parsed[(size_t)p * (size_t)ns + (size_t)b->slot[i]];
  if (scps_rows_widen(&b->rows[i], &b->reply[p], a->off, (size_t)sl->dim, c->value_bytes,
                      (size_t)sl->total_sample_count, !rows_in_place(c, b, st)))
    atomic_store(&j->failed, 1);
}

/* Samples [first, end) of stack st from every server's distinct rows into
 * the caller's arrays, each feature's share into its own: the first
 * server's written, each later one's added, which is the merge's sum in
 * process order bit for bit. */
static void pool_in_place(const op *o, int st, uint32_t first, uint32_t end) {
  const scps_client *c = o->c;
  const scps_layout *l = c->layout;
  const scps_batch *b = o->b;
  const scps_stack_layout *sl = &l->stacks[st];
  bool wrote = false;
  for (int p = 0; p < c->n; p++) {
    if (b->slot[p * l->n_stacks + st] < 0) continue;
    const scps_rows *ra = &b->rows[p * l->n_stacks + st];
    for (int k = 0; k < sl->n_features; k++) {
      int f = sl->features[k];
      uint32_t so = (uint32_t)l->features[f].sample_offset, se = so + (uint32_t)l->feature_specs[f].batch_size;
      uint32_t lo = first > so ? first : so, hi = end < se ? end : se;
      if (lo < hi) scps_rows_pool(ra, (size_t)sl->dim, lo, hi, o->acts[f], so, wrote);
    }
    wrote = true;
  }
}

static void pool_item(void *ctx, int item) {
  pool_job *j = ctx;
  int u = 0;
  while (j->items[u + 1] <= item) u++;
  const scps_layout *l = j->o->c->layout;
  int st = j->stack[u];
  const scps_stack_layout *sl = &l->stacks[st];
  uint32_t first = (uint32_t)(item - j->items[u]) * POOL_SAMPLES;
  uint32_t end = first + POOL_SAMPLES < (uint64_t)sl->total_sample_count ? first + POOL_SAMPLES
                                                                         : (uint32_t)sl->total_sample_count;
  if (j->server[u] < 0)
    pool_in_place(j->o, st, first, end);
  else
    scps_rows_pool(&j->o->b->rows[j->server[u] * l->n_stacks + st], (size_t)sl->dim, first, end, NULL, 0,
                   false);
}

/* Runs items of fn on the preprocessing pool's threads when no batch is
 * being prepared, else on this thread alone rather than waiting for it. */
static void run_items(scps_client *c, int items, void (*fn)(void *, int), void *ctx) {
  if (!pthread_mutex_trylock(&c->prep_mu)) {
    scps_prep_parallel(c->prep, items, fn, ctx);
    pthread_mutex_unlock(&c->prep_mu);
    return;
  }
  for (int i = 0; i < items; i++) fn(ctx, i);
}

/* Answers in distinct rows become activations: each widened into a table of
 * rows, then pooled by stack into the caller's arrays (rows_in_place) or
 * into the float32 partial a pooled answer would have held, for the merge
 * to read. */
static int pool_rows(op *o, scps_error *err) {
  scps_client *c = o->c;
  scps_batch *b = o->b;
  const scps_layout *l = c->layout;
  int ns = l->n_stacks, n = 0;
  for (size_t i = 0; i < (size_t)c->n * (size_t)ns; i++) n += b->distinct[i % (size_t)ns] && b->slot[i] >= 0;
  if (!n) return 0;
  /* At most one unit per answer. */
  pool_job j = {.o = o,
                .answer = malloc(sizeof *j.answer * (size_t)n),
                .server = malloc(sizeof *j.server * (size_t)n),
                .stack = malloc(sizeof *j.stack * (size_t)n),
                .items = malloc(sizeof *j.items * ((size_t)n + 1))};
  int rc = 0;
  if (!j.answer || !j.server || !j.stack || !j.items) {
    rc = scps_error_set(err, SCPS_ENOMEM, "lookup: out of memory pooling distinct rows");
    goto out;
  }
  atomic_init(&j.failed, 0);
  j.items[0] = 0;
  for (int st = 0; st < ns; st++) {
    if (!b->distinct[st]) continue;
    const bool in_place = rows_in_place(c, b, st);
    int holders = 0;
    for (int p = 0; p < c->n; p++) {
      if (b->slot[p * ns + st] < 0) continue;
      j.answer[j.n_answers++] = (size_t)p * (size_t)ns + (size_t)st;
      holders++;
      if (in_place) continue;
      j.server[j.n_units] = p;
      j.stack[j.n_units++] = st;
    }
    if (!holders || !in_place) continue;
    j.server[j.n_units] = -1;
    j.stack[j.n_units++] = st;
  }
  for (int u = 0; u < j.n_units; u++)
    j.items[u + 1] =
        j.items[u] + (int)((l->stacks[j.stack[u]].total_sample_count + POOL_SAMPLES - 1) / POOL_SAMPLES);
  run_items(c, j.n_answers, widen_item, &j);
  if (atomic_load(&j.failed)) {
    rc = scps_error_set(err, SCPS_ENOMEM, "lookup: out of memory widening the distinct rows of an answer");
    goto out;
  }
  run_items(c, j.items[j.n_units], pool_item, &j);
out:
  free(j.answer);
  free(j.server);
  free(j.stack);
  free(j.items);
  return rc;
}

/* The merge is a pass over every activation byte, spread over run_items. */
static void merge_activations(op *o) {
  scps_client *c = o->c;
  merge_job m = {o, merge_chunks(c->layout)};
  run_items(c, (int)(m.chunks * (size_t)c->layout->n_features), merge_item, &m);
}

/* Totals of a Checkpoint every server saved. */
static void checkpoint_summary(const op *o, scps_client_checkpoint_result *res) {
  memset(res, 0, sizeof *res);
  res->step = o->step;
  for (int p = 0; p < o->n_rpcs; p++) {
    const Scps__V1__CheckpointResponse *m = (const Scps__V1__CheckpointResponse *)o->rpcs[p].reply;
    if (p == 0) snprintf(res->path, sizeof res->path, "%s", m->path);
    res->bytes += m->bytes;
    res->files += m->files;
    if (m->seconds > res->seconds) res->seconds = m->seconds;
  }
}

/* Lists the servers in [0, n) whose outcome is (failed ? an error : OK). */
static void list_servers(const op *o, bool failed, char *buf, size_t len) {
  size_t used = 0;
  buf[0] = '\0';
  for (int p = 0; p < o->n_rpcs && used < len; p++)
    if ((o->rpcs[p].rc != 0) == failed)
      used += (size_t)snprintf(buf + used, len - used, "%s%d", used ? ", " : "", p);
  if (!used) snprintf(buf, len, "none");
}

static int op_result(op *o, scps_error *err) {
  int first = -1, failures = 0;
  for (int i = 0; i < o->n_rpcs; i++)
    if (o->rpcs[i].rc) {
      if (first < 0) first = i;
      failures++;
    }
  if (o->method == SCPS_M_LOOKUP) {
    int rc = first < 0 ? pool_rows(o, err) : 0;
    if (first < 0 && !rc) merge_activations(o);
    for (int p = 0; p < o->n_rpcs; p++) scps_slices_free(&o->b->reply[p]);
    if (rc) return rc;
  }
  if (first < 0) {
    if (o->method == SCPS_M_CHECKPOINT && o->result) checkpoint_summary(o, o->result);
    return 0;
  }
  const rpc *r = &o->rpcs[first];
  if (o->method == SCPS_M_CHECKPOINT) {
    char bad[128], good[128];
    list_servers(o, true, bad, sizeof bad);
    list_servers(o, false, good, sizeof good);
    /* A deadline or a shutdown ends the call, not a save the server has
     * begun: that runs to completion, so only a refusal or a failed write
     * settles that the step is incomplete. */
    bool settled = false;
    for (int i = 0; i < o->n_rpcs; i++)
      settled |= o->rpcs[i].rc && o->rpcs[i].rc != SCPS_ETIMEDOUT && o->rpcs[i].rc != SCPS_EUNAVAIL &&
                 o->rpcs[i].rc != SCPS_ECANCELLED;
    if (!settled)
      return scps_error_set(err, r->rc, "%s [checkpoint of step %lld: no answer from servers %s, saved by %s; if "
                            "they had begun the save it runs to completion there, so the step may yet be complete: "
                            "their Stats (checkpoints.last_step, .saving) or 'scps-admin checkpoint list' tells]",
                            r->err.msg, (long long)o->step, bad, good);
    return scps_error_set(err, r->rc, "%s [checkpoint of step %lld failed on servers %s, saved by %s: it is "
                          "incomplete and will not be restored]",
                          r->err.msg, (long long)o->step, bad, good);
  }
  if (o->method == SCPS_M_APPLY_GRADIENTS) {
    char bad[128], good[128];
    list_servers(o, true, bad, sizeof bad);
    list_servers(o, false, good, sizeof good);
    return scps_error_set(err, r->rc, "%s [step %lld not confirmed by servers %s; applied on %s]", r->err.msg,
                          (long long)o->step, bad, good);
  }
  if (failures > 1) {
    char bad[128];
    list_servers(o, true, bad, sizeof bad);
    return scps_error_set(err, r->rc, "%s [servers %s failed]", r->err.msg, bad);
  }
  return scps_error_set(err, r->rc, "%s", r->err.msg);
}

/* ------------------------------------------------------ create / destroy */

int scps_address_check(const char *addr, scps_error *err) {
  static const char *const schemes[] = {"unix:", "unix-abstract:", "vsock:", "dns:", "ipv4:", "ipv6:"};
  for (size_t i = 0; i < sizeof schemes / sizeof *schemes; i++)
    if (!strncmp(addr, schemes[i], strlen(schemes[i]))) return 0;
  const char *port;
  if (addr[0] == '[') {
    const char *close_br = strchr(addr, ']');
    if (!close_br || close_br == addr + 1 || close_br[1] != ':')
      return scps_error_set(err, SCPS_EINVAL, "address '%s': expected [IPv6]:port", addr);
    port = close_br + 2;
  } else {
    const char *colon = strrchr(addr, ':');
    if (!colon) return scps_error_set(err, SCPS_EINVAL, "address '%s' has no port (expected host:port)", addr);
    if (colon == addr || memchr(addr, ':', (size_t)(colon - addr)))
      return scps_error_set(err, SCPS_EINVAL, "address '%s': expected host:port (an IPv6 host goes in brackets: "
                            "[::1]:50051)", addr);
    port = colon + 1;
  }
  size_t digits = strspn(port, "0123456789");
  long v = digits && digits <= 5 && !port[digits] ? strtol(port, NULL, 10) : 0;
  if (v < 1 || v > 65535)
    return scps_error_set(err, SCPS_EINVAL, "address '%s': port '%s' is not in 1..65535", addr, port);
  return 0;
}

int scps_address_list_split(char *list, const char **out, int max, int *n, scps_error *err) {
  *n = 0;
  char *save = NULL;
  for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    if (*n == max) return scps_error_set(err, SCPS_EINVAL, "more than %d servers", max);
    int rc = scps_address_check(tok, err);
    if (rc) return rc;
    out[(*n)++] = tok;
  }
  return *n ? 0 : scps_error_set(err, SCPS_EINVAL, "no server given");
}

static int connect_servers(scps_client *c, const scps_client_options *o, scps_error *err) {
  grpc_arg args[8];
  memset(args, 0, sizeof args);
  args[0].type = GRPC_ARG_INTEGER;
  args[0].key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
  args[0].value.integer = -1;
  args[1].type = GRPC_ARG_INTEGER;
  args[1].key = GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
  args[1].value.integer = -1;
  /* A restarted server should be found within a lookup's retries, not after
   * gRPC's default reconnect backoff of up to two minutes. */
  args[2].type = GRPC_ARG_INTEGER;
  args[2].key = GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS;
  args[2].value.integer = 100;
  args[3].type = GRPC_ARG_INTEGER;
  args[3].key = GRPC_ARG_MIN_RECONNECT_BACKOFF_MS;
  args[3].value.integer = 100;
  args[4].type = GRPC_ARG_INTEGER;
  args[4].key = GRPC_ARG_MAX_RECONNECT_BACKOFF_MS;
  args[4].value.integer = 1000;
  /* Responses are megabytes of activations: a 64 KiB stream window and
   * 16 KiB frames would cost a round trip per window of every response. */
  args[5].type = GRPC_ARG_INTEGER;
  args[5].key = GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES;
  args[5].value.integer = 64 << 20;
  args[6].type = GRPC_ARG_INTEGER;
  args[6].key = GRPC_ARG_HTTP2_MAX_FRAME_SIZE;
  args[6].value.integer = (1 << 24) - 1;
  args[7].type = GRPC_ARG_INTEGER;
  args[7].key = GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL;
  args[7].value.integer = 1;
  grpc_channel_args ca = {c->own_connections ? 8 : 7, args};
  int rc = 0;
  for (int p = 0; p < c->n && !rc; p++) {
    server *s = &c->servers[p];
    scps_error e;
    if (scps_address_check(o->servers[p], &e)) {
      rc = scps_error_set(err, SCPS_EINVAL, "server %d: %s", p, e.msg);
      break;
    }
    s->addr = strdup(o->servers[p]);
    if (!s->addr) {
      rc = scps_error_set(err, SCPS_ENOMEM, "out of memory");
      break;
    }
    s->ch = scps_client_conn_channel(c->conn, s->addr, &ca);
    if (!s->ch) {
      rc = scps_error_set(err, SCPS_EINVAL, "server %d: cannot create a channel to '%s'", p, s->addr);
      break;
    }
    for (int m = 0; m < SCPS_M_COUNT; m++)
      s->methods[m] = grpc_channel_register_call(s->ch, scps_method_path(m), NULL, NULL);
  }
  return rc;
}

/* A packed GetConfigRequest. */
static grpc_slice config_request(Scps__V1__ClusterSpec *expected) {
  Scps__V1__GetConfigRequest req = SCPS__V1__GET_CONFIG_REQUEST__INIT;
  req.expected = expected;
  size_t n = scps__v1__get_config_request__get_packed_size(&req);
  if (!n) return grpc_empty_slice();
  grpc_slice s = grpc_slice_malloc_large(n);
  scps__v1__get_config_request__pack(&req, GRPC_SLICE_START_PTR(s));
  return s;
}

/* GetConfig on servers [from, to) with one request, in parallel; waits for
 * every answer. Each server's outcome is in (*out)->rpcs[p]. */
static int get_configs(scps_client *c, int from, int to, grpc_slice req, int64_t deadline_ns, op **out,
                       scps_error *err) {
  op *o = op_create(c, SCPS_M_GET_CONFIG, c->n, 0);
  *out = o;
  if (!o) return scps_error_set(err, SCPS_ENOMEM, "out of memory");
  o->deadline_ns = deadline_ns;
  o->deadline = ns_to_ts(deadline_ns);
  o->wait_for_ready = true; /* a server still starting is waited for, up to the deadline */
  o->blocking = true;
  for (int p = from; p < to; p++) {
    rpc *r = &o->rpcs[p];
    r->req = malloc(sizeof *r->req);
    if (!r->req) return scps_error_set(err, SCPS_ENOMEM, "out of memory");
    r->req[0] = grpc_slice_ref(req);
    r->n_req = 1;
  }
  atomic_store(&o->pending, to - from);
  for (int p = from; p < to; p++)
    if (rpc_start(&o->rpcs[p])) rpc_finished(&o->rpcs[p]);
  pthread_mutex_lock(&c->mu);
  while (!o->finished) pthread_cond_wait(&c->cv, &c->mu);
  pthread_mutex_unlock(&c->mu);
  return 0;
}

static int check_stacks(const scps_client *c, int p, const Scps__V1__GetConfigResponse *m, scps_error *err) {
  const scps_layout *l = c->layout;
  const char *a = addr_of(c, p);
  if (m->n_stacks != (size_t)l->n_stacks)
    return scps_error_set(err, SCPS_EMISMATCH, "server %d (%s): lays the cluster out in %zu stacks, libscps in %d",
                          p, a, m->n_stacks, l->n_stacks);
  for (int st = 0; st < l->n_stacks; st++) {
    const Scps__V1__StackInfo *in = m->stacks[st];
    const scps_stack_layout *sl = &l->stacks[st];
    const char *what = NULL;
    long long sv = 0, cv = 0;
    if (!in->name || strcmp(in->name, sl->name))
      return scps_error_set(err, SCPS_EMISMATCH, "server %d (%s): stacks[%d] is '%s' on the server, '%s' in libscps",
                            p, a, st, in->name ? in->name : "", sl->name);
    if (in->dim != sl->dim) what = "dim", sv = in->dim, cv = sl->dim;
    else if (in->rows_per_sc != sl->rows_per_sc) what = "rows_per_sc", sv = in->rows_per_sc, cv = sl->rows_per_sc;
    else if (in->total_sample_count != sl->total_sample_count)
      what = "total_sample_count", sv = in->total_sample_count, cv = sl->total_sample_count;
    else if (in->n_tables != (size_t)sl->n_tables || in->n_row_offsets != (size_t)sl->n_tables ||
             in->n_rotations != (size_t)sl->n_tables)
      what = "table count", sv = (long long)in->n_tables, cv = sl->n_tables;
    else if (in->n_features != (size_t)sl->n_features || in->n_feature_sample_offsets != (size_t)sl->n_features)
      what = "feature count", sv = (long long)in->n_features, cv = sl->n_features;
    if (what)
      return scps_error_set(err, SCPS_EMISMATCH, "server %d (%s): stack '%s' %s: server %lld, libscps %lld", p, a,
                            sl->name, what, sv, cv);
    for (int k = 0; k < sl->n_tables; k++) {
      int t = sl->tables[k];
      if (strcmp(in->tables[k], l->table_specs[t].name) || in->row_offsets[k] != l->tables[t].row_offset_in_shard ||
          in->rotations[k] != l->tables[t].shard_rotation)
        return scps_error_set(err, SCPS_EMISMATCH,
                              "server %d (%s): stack '%s' table %d: server '%s' at row %lld rotation %d, "
                              "libscps '%s' at row %lld rotation %d",
                              p, a, sl->name, k, in->tables[k], (long long)in->row_offsets[k], in->rotations[k],
                              l->table_specs[t].name, (long long)l->tables[t].row_offset_in_shard,
                              l->tables[t].shard_rotation);
    }
    for (int k = 0; k < sl->n_features; k++) {
      int f = sl->features[k];
      if (strcmp(in->features[k], l->feature_specs[f].name) ||
          in->feature_sample_offsets[k] != l->features[f].sample_offset)
        return scps_error_set(err, SCPS_EMISMATCH,
                              "server %d (%s): stack '%s' feature %d: server '%s' at sample %lld, libscps '%s' "
                              "at sample %lld",
                              p, a, sl->name, k, in->features[k], (long long)in->feature_sample_offsets[k],
                              l->feature_specs[f].name, (long long)l->features[f].sample_offset);
    }
  }
  return 0;
}

/* The per-server checks of one GetConfig answer. */
static int check_config(scps_client *c, int p, const rpc *r, scps_error *err) {
  const Scps__V1__GetConfigResponse *m = (const Scps__V1__GetConfigResponse *)r->reply;
  const char *a = addr_of(c, p);
  if (r->rc) return scps_error_set(err, r->rc, "%s", r->err.msg);
  if (m->process_index != p)
    return scps_error_set(err, SCPS_EMISMATCH,
                          "server %d (%s) is process %d of its cluster: list the servers in process-index "
                          "order (position %d needs process %d)",
                          p, a, m->process_index, p, p);
  if (!m->cluster || !m->cluster->topology)
    return scps_error_set(err, SCPS_EIO, "server %d (%s): GetConfig answer without a cluster declaration", p, a);
  if (m->cluster->topology->num_processes != c->n)
    return scps_error_set(err, SCPS_EMISMATCH,
                          "server %d (%s): the cluster has num_processes %d but %d server addresses were given", p,
                          a, m->cluster->topology->num_processes, c->n);
  if (m->config_fingerprint.len != SCPS_WIRE_FINGERPRINT_BYTES)
    return scps_error_set(err, SCPS_EIO, "server %d (%s): config_fingerprint of %zu bytes, expected %d", p, a,
                          m->config_fingerprint.len, SCPS_WIRE_FINGERPRINT_BYTES);
  if (p == 0)
    memcpy(c->fingerprint, m->config_fingerprint.data, SCPS_WIRE_FINGERPRINT_BYTES);
  else if (memcmp(c->fingerprint, m->config_fingerprint.data, SCPS_WIRE_FINGERPRINT_BYTES))
    return scps_error_set(err, SCPS_EMISMATCH,
                          "server %d (%s): config_fingerprint differs from server 0's (%s): the processes were "
                          "started with different declarations",
                          p, a, addr_of(c, 0));
  const uint32_t rev = m->wire_revision < SCPS_WIRE_REVISION ? m->wire_revision : SCPS_WIRE_REVISION;
  if (rev < 1 && c->gradients == SCPS_GRADIENTS_BY_ROW)
    return scps_error_set(err, SCPS_EMISMATCH,
                          "server %d (%s) takes no gradients by row (its GetConfig wire_revision is %u, by row "
                          "needs 1): upgrade it, or push by sample or auto",
                          p, a, m->wire_revision);
  if (p == 0 || rev < c->wire_revision) c->wire_revision = rev;
  if (rev < 1 && c->gradients == SCPS_GRADIENTS_AUTO) c->gradients = SCPS_GRADIENTS_BY_SAMPLE;
  if (m->max_message_bytes > 0 && (c->max_message_bytes == 0 || m->max_message_bytes < c->max_message_bytes))
    c->max_message_bytes = m->max_message_bytes;
  int64_t step = m->last_step_present_case == SCPS__V1__GET_CONFIG_RESPONSE__LAST_STEP_PRESENT_LAST_STEP
                     ? m->last_step
                     : -1;
  if (step < -1 || step >= SCPS_STEP_LIMIT)
    return scps_error_set(err, SCPS_EMISMATCH, "server %d (%s) holds step %lld, outside [0, 2^53)", p, a,
                          (long long)step);
  if (p == 0 || step < c->step) c->step = step;
  c->servers[p].step = step;
  c->servers[p].state_id = m->state_id;
  c->servers[p].has_checkpoint_dir = m->checkpoint_dir && m->checkpoint_dir[0];
  return 0;
}

static bool steps_agree(const scps_client *c) {
  for (int p = 1; p < c->n; p++)
    if (c->servers[p].step != c->servers[0].step) return false;
  return true;
}

/* The processes of a cluster must hold the same step: one that restarted
 * from an older checkpoint (or from none) beside others that went on would
 * otherwise be trained from mixed states, silently. Steps that differ only
 * by pushes in flight from other trainers agree a moment later, so the
 * servers are asked again for a while before the client refuses. */
static int check_steps(scps_client *c, int64_t deadline_ns, scps_error *err) {
  grpc_slice req = config_request(NULL);
  int rc = 0;
  for (int round = 0; !rc && !steps_agree(c) && round < STEP_AGREE_ROUNDS; round++) {
    if (now_ns() + STEP_AGREE_PAUSE_MS * 1000000 > deadline_ns) break;
    struct timespec pause = {0, STEP_AGREE_PAUSE_MS * 1000000L};
    nanosleep(&pause, NULL);
    op *o = NULL;
    rc = get_configs(c, 0, c->n, req, deadline_ns, &o, err);
    for (int p = 0; p < c->n && !rc; p++) {
      const rpc *r = &o->rpcs[p];
      if (r->rc) rc = scps_error_set(err, r->rc, "%s", r->err.msg);
      const Scps__V1__GetConfigResponse *m = (const Scps__V1__GetConfigResponse *)r->reply;
      if (!rc) {
        c->servers[p].step = m->last_step_present_case == SCPS__V1__GET_CONFIG_RESPONSE__LAST_STEP_PRESENT_LAST_STEP
                                 ? m->last_step
                                 : -1;
        c->servers[p].state_id = m->state_id;
      }
    }
    if (o) op_destroy(o);
  }
  grpc_slice_unref(req);
  if (rc) return rc;
  if (steps_agree(c)) {
    c->step = c->servers[0].step;
    return 0;
  }
  char held[SCPS_ERROR_MSG_MAX - 160];
  size_t at = 0;
  for (int p = 0; p < c->n && at + 64 < sizeof held; p++) {
    char step[32];
    if (c->servers[p].step < 0) snprintf(step, sizeof step, "none");
    else snprintf(step, sizeof step, "step %lld", (long long)c->servers[p].step);
    at += (size_t)snprintf(held + at, sizeof held - at, "%sserver %d (%.40s) %s", p ? ", " : "", p, addr_of(c, p),
                           step);
  }
  if (at + 64 >= sizeof held) snprintf(held + at, sizeof held - at, ", ...");
  return scps_error_set(err, SCPS_EMISMATCH,
                        "the servers hold different steps (%s): training would mix their states. Bring every "
                        "process to one step: 'scps-admin checkpoint restore --servers LIST' restores the newest "
                        "step every process holds a checkpoint of, or restart them all from one checkpoint",
                        held);
}

/* Builds the layout and prep from server 0's answer. */
static int adopt_config(scps_client *c, const scps_client_options *o, const Scps__V1__GetConfigResponse *m,
                        scps_error *err) {
  scps_error e;
  int rc = scps_cluster_spec_from_pb(m->cluster, &c->spec, &e);
  if (rc) return scps_error_set(err, rc, "server 0 (%s): GetConfig declaration: %s", addr_of(c, 0), e.msg);
  rc = scps_layout_create(c->spec.tables, c->spec.n_tables, c->spec.features, c->spec.n_features,
                          &c->spec.topology, NULL, &c->layout, &e);
  if (rc) return scps_error_set(err, rc, "server 0 (%s): cannot lay out its declaration: %s", addr_of(c, 0), e.msg);
  if (c->layout->topology.sc_per_process > MAX_SC_PER_PROCESS)
    return scps_error_set(err, SCPS_EINVAL, "server 0 (%s): sc_per_process %d exceeds %d", addr_of(c, 0),
                          c->layout->topology.sc_per_process, MAX_SC_PER_PROCESS);
  c->S = c->layout->topology.sc_per_process;
  c->sample_feature = calloc((size_t)c->layout->n_stacks, sizeof *c->sample_feature);
  if (!c->sample_feature) return scps_error_set(err, SCPS_ENOMEM, "out of memory");
  for (int st = 0; st < c->layout->n_stacks; st++) {
    const scps_stack_layout *sl = &c->layout->stacks[st];
    int32_t *map = malloc(sizeof *map * (size_t)(sl->total_sample_count ? sl->total_sample_count : 1));
    if (!map) return scps_error_set(err, SCPS_ENOMEM, "out of memory");
    c->sample_feature[st] = map;
    for (int k = 0; k < sl->n_features; k++) {
      const int f = sl->features[k];
      const int64_t off = c->layout->features[f].sample_offset;
      for (int64_t r = 0; r < c->layout->feature_specs[f].batch_size; r++) map[off + r] = k;
    }
  }
  scps_prep_options po = {.policy = o->policy, .threads = o->prep_threads};
  rc = scps_prep_create(c->layout, &po, &c->prep, err);
  if (rc) return rc;
  /* The servers report the limits in force, which FDO may have raised. */
  for (int st = 0; st < c->layout->n_stacks && (size_t)st < m->n_stacks; st++) {
    const Scps__V1__StackInfo *in = m->stacks[st];
    if (in->max_ids_per_partition > 0 && in->max_unique_ids_per_partition > 0 &&
        (in->max_ids_per_partition != c->layout->stacks[st].max_ids_per_partition ||
         in->max_unique_ids_per_partition != c->layout->stacks[st].max_unique_ids_per_partition)) {
      rc = scps_prep_set_limits(c->prep, st, in->max_ids_per_partition, in->max_unique_ids_per_partition, err);
      if (rc) return rc;
    }
  }
  return 0;
}

int scps_float_format_from_name(const char *name, scps_float_format *out) {
  if (name && !strcmp(name, "float32")) *out = SCPS_WIRE_FLOAT32;
  else if (name && !strcmp(name, "bfloat16")) *out = SCPS_WIRE_BFLOAT16;
  else return SCPS_EINVAL;
  return 0;
}

const char *scps_float_format_name(scps_float_format f) {
  return f == SCPS_WIRE_BFLOAT16 ? "bfloat16" : f == SCPS_WIRE_FLOAT32 ? "float32" : "unknown";
}

int scps_answer_mode_from_name(const char *name, scps_answer_mode *out) {
  if (name && !strcmp(name, "auto")) *out = SCPS_ANSWER_AUTO;
  else if (name && !strcmp(name, "pooled")) *out = SCPS_ANSWER_POOLED;
  else if (name && !strcmp(name, "rows")) *out = SCPS_ANSWER_DISTINCT_ROWS;
  else return SCPS_EINVAL;
  return 0;
}

const char *scps_answer_mode_name(scps_answer_mode m) {
  return m == SCPS_ANSWER_AUTO ? "auto" : m == SCPS_ANSWER_POOLED ? "pooled"
                                        : m == SCPS_ANSWER_DISTINCT_ROWS ? "rows" : "unknown";
}

int scps_gradient_mode_from_name(const char *name, scps_gradient_mode *out) {
  if (name && !strcmp(name, "auto")) *out = SCPS_GRADIENTS_AUTO;
  else if (name && !strcmp(name, "sample")) *out = SCPS_GRADIENTS_BY_SAMPLE;
  else if (name && !strcmp(name, "row")) *out = SCPS_GRADIENTS_BY_ROW;
  else return SCPS_EINVAL;
  return 0;
}

const char *scps_gradient_mode_name(scps_gradient_mode m) {
  return m == SCPS_GRADIENTS_AUTO ? "auto" : m == SCPS_GRADIENTS_BY_SAMPLE ? "sample"
                                           : m == SCPS_GRADIENTS_BY_ROW ? "row" : "unknown";
}

static int check_options(const scps_client_options *o, scps_error *err) {
  if (!o || !o->servers || o->n_servers < 1 || o->n_servers > MAX_SERVERS)
    return scps_error_set(err, SCPS_EINVAL, "options: need 1 to %d server addresses (n_servers %d)", MAX_SERVERS,
                          o ? o->n_servers : 0);
  for (int p = 0; p < o->n_servers; p++)
    if (!o->servers[p] || !o->servers[p][0])
      return scps_error_set(err, SCPS_EINVAL, "options: servers[%d] is empty", p);
  bool any = o->topology || o->tables || o->features || o->n_tables || o->n_features;
  if (any && (!o->tables || o->n_tables < 1 || (o->n_features > 0 && !o->features) || o->n_features < 0))
    return scps_error_set(err, SCPS_EINVAL,
                          "options: an expected declaration needs tables (n_tables %d) and features "
                          "(n_features %d)",
                          o->n_tables, o->n_features);
  if (o->policy != SCPS_LIMIT_ERROR && o->policy != SCPS_LIMIT_DROP)
    return scps_error_set(err, SCPS_EINVAL, "options: policy %d is neither SCPS_LIMIT_ERROR nor SCPS_LIMIT_DROP",
                          (int)o->policy);
  if (o->connect_timeout_ms < 0 || o->checkpoint_timeout_ms < 0)
    return scps_error_set(err, SCPS_EINVAL, "options: connect_timeout_ms %lld or checkpoint_timeout_ms %lld is negative",
                          (long long)o->connect_timeout_ms, (long long)o->checkpoint_timeout_ms);
  if (o->wire_format != SCPS_WIRE_FLOAT32 && o->wire_format != SCPS_WIRE_BFLOAT16)
    return scps_error_set(err, SCPS_EINVAL,
                          "options: wire_format %d is neither SCPS_WIRE_FLOAT32 nor SCPS_WIRE_BFLOAT16",
                          (int)o->wire_format);
  if (o->answer != SCPS_ANSWER_AUTO && o->answer != SCPS_ANSWER_POOLED && o->answer != SCPS_ANSWER_DISTINCT_ROWS)
    return scps_error_set(err, SCPS_EINVAL,
                          "options: answer %d is not SCPS_ANSWER_AUTO, SCPS_ANSWER_POOLED or SCPS_ANSWER_DISTINCT_ROWS",
                          (int)o->answer);
  if (o->gradients != SCPS_GRADIENTS_AUTO && o->gradients != SCPS_GRADIENTS_BY_SAMPLE &&
      o->gradients != SCPS_GRADIENTS_BY_ROW)
    return scps_error_set(err, SCPS_EINVAL,
                          "options: gradients %d is not SCPS_GRADIENTS_AUTO, SCPS_GRADIENTS_BY_SAMPLE or "
                          "SCPS_GRADIENTS_BY_ROW",
                          (int)o->gradients);
  if (o->cq_threads < 0 || o->cq_threads > CQ_THREADS_MAX)
    return scps_error_set(err, SCPS_EINVAL, "options: cq_threads %d not in [0, %d] (0: %d)", o->cq_threads,
                          CQ_THREADS_MAX, CQ_THREADS_DEFAULT);
  return 0;
}

/* Tables and features the trainer declared without a topology, against
 * server 0's declaration. */
static int check_declared(const scps_client *c, const scps_client_options *o, const Scps__V1__ClusterSpec *pb,
                          scps_error *err) {
  scps_cluster_spec cs;
  int rc = scps_cluster_spec_from_pb(pb, &cs, err);
  if (rc) return rc;
  char diff[512];
  if (scps_specs_diff(&cs.topology, o->tables, o->n_tables, o->features, o->n_features, &cs.topology, cs.tables,
                      cs.n_tables, cs.features, cs.n_features, "client", "server", diff, sizeof diff))
    rc = scps_error_set(err, SCPS_EMISMATCH, "server 0 (%s) serves another cluster configuration: %s", addr_of(c, 0),
                        diff);
  scps_cluster_spec_free(&cs);
  return rc;
}

static int configure(scps_client *c, const scps_client_options *o, scps_error *err) {
  int64_t timeout = o->connect_timeout_ms ? o->connect_timeout_ms : DEFAULT_CONNECT_TIMEOUT_MS;
  /* As op_create: a timeout too large to add (INT64_MAX for "forever")
   * must not wrap into the past. */
  int64_t deadline = timeout > INT64_MAX / 2000000 ? INT64_MAX / 2 : now_ns() + timeout * 1000000;
  grpc_slice req = grpc_empty_slice();
  scps_cluster_pb *cpb = NULL;
  op *first = NULL, *rest = NULL;
  int rc = 0;
  if (o->tables && o->topology) {
    /* Every server compares the trainer's declaration with its own. */
    rc = scps_cluster_pb_create(o->topology, o->tables, o->n_tables, o->features, o->n_features, &cpb, err);
    if (!rc) req = config_request(&cpb->msg);
    if (!rc) rc = get_configs(c, 0, c->n, req, deadline, &first, err);
    for (int p = 0; p < c->n && !rc; p++) rc = check_config(c, p, &first->rpcs[p], err);
  } else {
    /* Server 0's declaration is the reference the others must match. */
    req = config_request(NULL);
    rc = get_configs(c, 0, 1, req, deadline, &first, err);
    if (!rc) rc = check_config(c, 0, &first->rpcs[0], err);
    if (!rc && o->tables)
      rc = check_declared(c, o, ((const Scps__V1__GetConfigResponse *)first->rpcs[0].reply)->cluster, err);
    if (!rc && c->n > 1) {
      grpc_slice_unref(req);
      req = config_request(((const Scps__V1__GetConfigResponse *)first->rpcs[0].reply)->cluster);
      rc = get_configs(c, 1, c->n, req, deadline, &rest, err);
      for (int p = 1; p < c->n && !rc; p++) {
        rc = check_config(c, p, &rest->rpcs[p], err);
        /* The server's own refusal (FAILED_PRECONDITION) compared server
         * 0's declaration, which it did not name. */
        if (rc == SCPS_EMISMATCH && rest->rpcs[p].rc == SCPS_EMISMATCH) {
          char m[sizeof err->msg];
          snprintf(m, sizeof m, "%s", err->msg);
          scps_error_set(err, rc,
                         "%s [the expected declaration is server 0's (%s): start every process with the same "
                         "--config and topology flags]",
                         m, addr_of(c, 0));
        }
      }
    }
  }
  if (!rc) rc = adopt_config(c, o, (const Scps__V1__GetConfigResponse *)first->rpcs[0].reply, err);
  for (int p = 0; p < c->n && !rc; p++) {
    const op *from = rest && p > 0 ? rest : first;
    rc = check_stacks(c, p, (const Scps__V1__GetConfigResponse *)from->rpcs[p].reply, err);
  }
  if (!rc) rc = check_steps(c, deadline, err);
  if (first) op_destroy(first);
  if (rest) op_destroy(rest);
  grpc_slice_unref(req);
  scps_cluster_pb_destroy(cpb);
  return rc;
}

int scps_client_create(const scps_client_options *o, scps_client **out, scps_error *err) {
  if (!out) return scps_error_set(err, SCPS_EINVAL, "out is NULL");
  *out = NULL;
  int rc = check_options(o, err);
  if (rc) return rc;
  scps_client *c = calloc(1, sizeof *c);
  if (!c) return scps_error_set(err, SCPS_ENOMEM, "out of memory");
  c->n = o->n_servers;
  c->format = o->wire_format;
  c->value_bytes = o->wire_format == SCPS_WIRE_BFLOAT16 ? 2 : sizeof(float);
  c->answer = o->answer;
  c->gradients = o->gradients;
  c->ignore_checkpoint_due = o->ignore_checkpoint_due;
  c->own_connections = o->own_connections;
  c->checkpoint_timeout_ms = o->checkpoint_timeout_ms ? o->checkpoint_timeout_ms : DEFAULT_CHECKPOINT_TIMEOUT_MS;
  pthread_mutex_init(&c->mu, NULL);
  pthread_mutex_init(&c->prep_mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  c->servers = calloc((size_t)c->n, sizeof *c->servers);
  if (!c->servers) {
    scps_client_destroy(c);
    return scps_error_set(err, SCPS_ENOMEM, "out of memory");
  }
  grpc_init();
  c->grpc_started = true;
  c->cq = grpc_completion_queue_create_for_next(NULL);
  const int cq_threads = o->cq_threads ? o->cq_threads : CQ_THREADS_DEFAULT;
  for (int i = 0; i < cq_threads && !rc; i++) {
    if (pthread_create(&c->threads[i], NULL, cq_main, c))
      rc = scps_error_set(err, SCPS_ENOMEM, "cannot start completion-queue thread %d", i);
    else
      c->n_threads++;
  }
  if (!rc) rc = scps_client_conn_create(&o->security, &c->conn, err);
  if (!rc) rc = connect_servers(c, o, err);
  if (!rc) rc = configure(c, o, err);
  if (rc) {
    scps_client_destroy(c);
    return rc;
  }
  *out = c;
  return 0;
}

void scps_client_destroy(scps_client *c) {
  if (!c) return;
  pthread_mutex_lock(&c->mu);
  while (c->in_flight) pthread_cond_wait(&c->cv, &c->mu);
  pthread_mutex_unlock(&c->mu);
  if (c->cq) {
    grpc_completion_queue_shutdown(c->cq);
    for (int i = 0; i < c->n_threads; i++) pthread_join(c->threads[i], NULL);
    if (!c->n_threads)
      while (grpc_completion_queue_next(c->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type != GRPC_QUEUE_SHUTDOWN) {
      }
  }
  for (int p = 0; c->servers && p < c->n; p++) {
    if (c->servers[p].ch) grpc_channel_destroy(c->servers[p].ch);
    free(c->servers[p].addr);
  }
  if (c->cq) grpc_completion_queue_destroy(c->cq);
  scps_client_conn_destroy(c->conn);
  scps_prep_destroy(c->prep);
  for (int st = 0; c->sample_feature && st < c->layout->n_stacks; st++) free(c->sample_feature[st]);
  free(c->sample_feature);
  scps_layout_destroy(c->layout);
  scps_cluster_spec_free(&c->spec);
  free(c->servers);
  if (c->grpc_started) grpc_shutdown();
  pthread_cond_destroy(&c->cv);
  pthread_mutex_destroy(&c->mu);
  pthread_mutex_destroy(&c->prep_mu);
  free(c);
}

const scps_layout *scps_client_layout(const scps_client *c) { return c->layout; }

scps_prep *scps_client_prep(scps_client *c) { return c->prep; }

int64_t scps_client_step(const scps_client *c) { return c->step; }

void scps_client_traffic(const scps_client *c, uint64_t *sent, uint64_t *received) {
  *sent = atomic_load_explicit(&c->bytes_sent, memory_order_relaxed);
  *received = atomic_load_explicit(&c->bytes_received, memory_order_relaxed);
}

int scps_client_n_servers(const scps_client *c) { return c->n; }

bool scps_client_server_has_checkpoint_dir(const scps_client *c, int p) {
  return p >= 0 && p < c->n && c->servers[p].has_checkpoint_dir;
}

/* --------------------------------------------------------------- batches */

int scps_batch_create(scps_client *c, scps_batch **out, scps_error *err) {
  if (!c || !out) return scps_error_set(err, SCPS_EINVAL, "scps_batch_create: client or out is NULL");
  *out = NULL;
  size_t n = (size_t)c->n, ns = (size_t)c->layout->n_stacks;
  scps_batch *b = calloc(1, sizeof *b);
  if (!b) return scps_error_set(err, SCPS_ENOMEM, "out of memory");
  b->c = c;
  atomic_init(&b->busy, false);
  b->lookup = calloc(n, sizeof *b->lookup);
  b->parts_off = calloc(n * ns, sizeof *b->parts_off);
  b->parts_len = calloc(n * ns, sizeof *b->parts_len);
  b->slot = calloc(n * ns, sizeof *b->slot);
  b->n_sent = calloc(n, sizeof *b->n_sent);
  b->stack_used = calloc(ns, sizeof *b->stack_used);
  b->lookup_buf = calloc(n, sizeof *b->lookup_buf);
  b->reply = calloc(n, sizeof *b->reply);
  b->grad_buf = calloc(ns, sizeof *b->grad_buf);
  b->parsed = calloc(n * ns, sizeof *b->parsed);
  b->distinct = calloc(ns, sizeof *b->distinct);
  b->rows = calloc(n * ns, sizeof *b->rows);
  b->by_row = calloc(n * ns, sizeof *b->by_row);
  b->n_rows = calloc(n * ns, sizeof *b->n_rows);
  b->row_parts_len = calloc(n * ns, sizeof *b->row_parts_len);
  b->row_buf = calloc(n * ns, sizeof *b->row_buf);
  if (!b->lookup || !b->parts_off || !b->parts_len || !b->slot || !b->n_sent || !b->stack_used || !b->lookup_buf ||
      !b->reply || !b->grad_buf || !b->parsed || !b->distinct || !b->rows || !b->by_row || !b->n_rows ||
      !b->row_parts_len || !b->row_buf) {
    scps_batch_destroy(b);
    return scps_error_set(err, SCPS_ENOMEM, "out of memory");
  }
  for (size_t p = 0; p < n; p++) b->lookup[p] = grpc_empty_slice();
  *out = b;
  return 0;
}

static void batch_release(scps_batch *b) {
  for (int p = 0; b->lookup && p < b->c->n; p++) {
    grpc_slice_unref(b->lookup[p]);
    b->lookup[p] = grpc_empty_slice();
  }
  b->prepared = false;
}

void scps_batch_destroy(scps_batch *b) {
  if (!b) return;
  batch_release(b);
  free(b->lookup);
  free(b->parts_off);
  free(b->parts_len);
  free(b->slot);
  free(b->n_sent);
  free(b->stack_used);
  for (int p = 0; b->lookup_buf && p < b->c->n; p++) scps_client_buf_release(&b->lookup_buf[p]);
  for (int p = 0; b->reply && p < b->c->n; p++) scps_slices_free(&b->reply[p]);
  for (int st = 0; b->grad_buf && st < b->c->layout->n_stacks; st++) scps_client_buf_release(&b->grad_buf[st]);
  free(b->lookup_buf);
  free(b->reply);
  free(b->grad_buf);
  free(b->parsed);
  for (size_t i = 0; b->rows && i < (size_t)b->c->n * (size_t)b->c->layout->n_stacks; i++)
    scps_rows_free(&b->rows[i]);
  free(b->rows);
  free(b->distinct);
  for (size_t i = 0; b->row_buf && i < (size_t)b->c->n * (size_t)b->c->layout->n_stacks; i++)
    scps_client_buf_release(&b->row_buf[i]);
  free(b->row_buf);
  free(b->by_row);
  free(b->n_rows);
  free(b->row_parts_len);
  free(b);
}

/* Per stack, pooled activations or distinct rows (scps_answer_mode), and
 * each (server, stack)'s distinct rows for choose_gradients. In
 * AUTO, distinct rows where they take no more bytes than the pooled answer
 * summed over the servers: pooling a row the client holds costs about what
 * copying a pooled one out of the answer does, so the bytes decide. */
static void choose_answers(scps_client *c, scps_batch *b) {
  const int S = c->S, ns = c->layout->n_stacks;
  const bool count = c->answer == SCPS_ANSWER_AUTO || c->gradients == SCPS_GRADIENTS_AUTO;
  for (int st = 0; st < ns; st++) {
    size_t pooled = 0, rows = 0;
    for (int p = 0; p < c->n; p++) {
      bool sent = false;
      size_t *n_rows = &b->n_rows[(size_t)p * (size_t)ns + (size_t)st];
      *n_rows = 0;
      for (int k = 0; k < S && count; k++) {
        const scps_coo *coo = scps_prep_coo(c->prep, st, p * S + k);
        sent |= coo->n > 0;
        *n_rows += scps_coo_distinct_rows(coo);
      }
      rows += *n_rows;
      if (sent) pooled += (size_t)c->layout->stacks[st].total_sample_count;
    }
    b->distinct[st] = c->answer == SCPS_ANSWER_AUTO ? rows <= pooled : c->answer == SCPS_ANSWER_DISTINCT_ROWS;
  }
}

/* Whether a push sends stack st to server p by row (scps_gradient_mode). In
 * AUTO, by row where the distinct rows and their sums take at most 3/4 of
 * the bytes of the partitions and every sample's gradient. Summing here
 * reads the trainer's gradients, which are colder than the server's copy
 * of them, so a small saving of bytes is lost: dlrm8 with 2 servers sends
 * 0.93 of the bytes by row, and its train step took 12.9-13.1 ms against
 * 12.4-12.6 ms by sample (bfloat16), while criteo26, whose stacks all
 * save more than a quarter, gains. */
static void choose_gradients(const scps_client *c, scps_batch *b, int st, int p) {
  const size_t i = (size_t)p * (size_t)c->layout->n_stacks + (size_t)st;
  if (c->gradients != SCPS_GRADIENTS_AUTO) {
    b->by_row[i] = c->gradients == SCPS_GRADIENTS_BY_ROW;
    return;
  }
  const scps_stack_layout *sl = &c->layout->stacks[st];
  const size_t row_bytes = (size_t)sl->dim * c->value_bytes;
  b->by_row[i] = 4 * b->n_rows[i] * (row_bytes + 4) <= 3 * (b->parts_len[i] + (size_t)sl->total_sample_count * row_bytes);
}

/* The partitions of stack on server p into coo[0..S); returns how many of
 * their gains are not 1.0, which decides how the request carries them. */
static size_t server_partitions(const scps_client *c, int st, int p, const scps_coo **coo) {
  size_t exceptions = 0;
  for (int k = 0; k < c->S; k++) {
    coo[k] = scps_prep_coo(c->prep, st, p * c->S + k);
    exceptions += scps_prep_gain_exceptions(c->prep, st, p * c->S + k);
  }
  return exceptions;
}

/* Whether stack st's samples go as uint16 (StackPartitions.samples_u16):
 * where every sample fits and every server takes the form. */
static bool narrow_samples(const scps_client *c, int st) {
  return c->wire_revision >= 1 && c->layout->stacks[st].total_sample_count <= 65536;
}

/* Writes every server's LookupRequest from the prep's partitions. Stacks
 * with no entry on a server are left out of its request; merging treats
 * their partials as zeros, which is what the server would have sent. */
static int encode_batch(scps_client *c, scps_batch *b, scps_error *err) {
  const scps_layout *l = c->layout;
  int ns = l->n_stacks, S = c->S;
  const scps_coo *coo[MAX_SC_PER_PROCESS];
  memset(b->stack_used, 0, sizeof *b->stack_used * (size_t)ns);
  choose_answers(c, b);
  for (int p = 0; p < c->n; p++) {
    size_t total = scps_wire_view_size(p) + scps_wire_format_size(c->format);
    bool any_distinct = false;
    b->n_sent[p] = 0;
    for (int st = 0; st < ns; st++) {
      const size_t exceptions = server_partitions(c, st, p, coo);
      size_t entries = 0;
      for (int k = 0; k < S; k++) entries += coo[k]->n;
      size_t i = (size_t)p * (size_t)ns + (size_t)st;
      b->slot[i] = -1;
      b->parts_len[i] = 0;
      b->by_row[i] = false;
      if (!entries) continue;
      if (entries > UINT32_MAX)
        return scps_error_set(err, SCPS_ENOSPC, "stack '%s': %zu entries for server %d exceed the wire's 2^32 - 1",
                              l->stacks[st].name, entries, p);
      b->slot[i] = b->n_sent[p]++;
      b->parts_len[i] = scps_wire_partitions_size(l->stacks[st].name, coo, S, exceptions, narrow_samples(c, st));
      b->stack_used[st] = true;
      total += scps_wire_lookup_stack_prefix_size(b->parts_len[i]) + b->parts_len[i];
      choose_gradients(c, b, st, p);
      any_distinct |= b->distinct[st];
      if ((b->distinct[st] || b->by_row[i]) && scps_rows_capture(&b->rows[i], coo, S))
        return scps_error_set(err, SCPS_ENOMEM, "batch: no memory for the partitions of stack '%s' (server %d)",
                              l->stacks[st].name, p);
      if (b->by_row[i]) b->row_parts_len[i] = scps_wire_row_partitions_size(l->stacks[st].name, b->rows[i].row_start, S);
    }
    if (any_distinct) total += scps_wire_distinct_rows_size(b->n_sent[p]);
    if (c->max_message_bytes > 0 && total > (size_t)c->max_message_bytes)
      return scps_error_set(err, SCPS_ENOSPC,
                            "batch: the Lookup request for server %d (%s) would be %zu bytes, over the server's "
                            "limit of %lld (--max-message-mb)",
                            p, addr_of(c, p), total, (long long)c->max_message_bytes);
    grpc_slice_unref(b->lookup[p]);
    b->lookup[p] = grpc_empty_slice();
    grpc_slice s;
    uint8_t *start = scps_client_buf_lend(&b->lookup_buf[p], total, &s);
    if (!start)
      return scps_error_set(err, SCPS_ENOMEM, "batch: no memory for the %zu-byte Lookup request of server %d", total,
                            p);
    uint8_t *w = scps_wire_put_view(start, c->fingerprint, p);
    w = scps_wire_put_lookup_format(w, c->format);
    for (int st = 0; st < ns; st++) {
      size_t i = (size_t)p * (size_t)ns + (size_t)st;
      if (b->slot[i] < 0) continue;
      const size_t exceptions = server_partitions(c, st, p, coo);
      w = scps_wire_put_lookup_stack_prefix(w, b->parts_len[i]);
      b->parts_off[i] = (size_t)(w - start);
      w = scps_wire_put_partitions(w, l->stacks[st].name, coo, S, exceptions, narrow_samples(c, st));
    }
    if (any_distinct) w = scps_wire_put_distinct_rows(w, b->distinct, &b->slot[(size_t)p * (size_t)ns], ns, b->n_sent[p]);
    b->lookup[p] = s;
  }
  return 0;
}

int scps_client_prepare(scps_client *c, const scps_feature_input *inputs, scps_batch *b, scps_error *err) {
  if (!c || !inputs || !b || b->c != c)
    return scps_error_set(err, SCPS_EINVAL, "scps_client_prepare: client, inputs or batch is NULL or the batch "
                                            "belongs to another client");
  if (atomic_exchange(&b->busy, true))
    return scps_error_set(err, SCPS_ESTATE, "scps_client_prepare: the batch is in use by a lookup or apply in flight");
  batch_release(b);
  pthread_mutex_lock(&c->prep_mu);
  int rc = scps_prep_run(c->prep, inputs, err);
  if (!rc) rc = encode_batch(c, b, err);
  pthread_mutex_unlock(&c->prep_mu);
  if (rc)
    batch_release(b);
  else
    b->prepared = true;
  atomic_store(&b->busy, false);
  return rc;
}

/* ------------------------------------------------------- lookup / apply */

/* Claims a prepared batch for one operation. */
static int claim_batch(scps_client *c, scps_batch *b, const char *fn, scps_error *err) {
  if (!c || !b || b->c != c)
    return scps_error_set(err, SCPS_EINVAL, "%s: client or batch is NULL or the batch belongs to another client", fn);
  if (atomic_exchange(&b->busy, true))
    return scps_error_set(err, SCPS_ESTATE, "%s: the batch is in use by another operation", fn);
  if (!b->prepared) {
    atomic_store(&b->busy, false);
    return scps_error_set(err, SCPS_ESTATE, "%s: the batch has not been prepared (scps_client_prepare)", fn);
  }
  return 0;
}

static int lookup_start(scps_client *c, scps_batch *b, float *const *acts, int64_t deadline_ms, bool blocking,
                        scps_client_done done, void *ud, op **out, scps_error *err) {
  const char *fn = blocking ? "scps_client_lookup" : "scps_client_lookup_async";
  if (!acts) return scps_error_set(err, SCPS_EINVAL, "%s: acts is NULL", fn);
  if (deadline_ms <= 0) return scps_error_set(err, SCPS_EINVAL, "%s: deadline_ms %lld must be > 0", fn, (long long)deadline_ms);
  if (c)
    for (int f = 0; f < c->layout->n_features; f++)
      if (!acts[f])
        return scps_error_set(err, SCPS_EINVAL, "%s: acts[%d] (feature '%s') is NULL", fn, f,
                              c->layout->feature_specs[f].name);
  int rc = claim_batch(c, b, fn, err);
  if (rc) return rc;
  op *o = op_create(c, SCPS_M_LOOKUP, c->n, deadline_ms);
  if (o) o->acts = malloc(sizeof *o->acts * (size_t)c->layout->n_features);
  for (int p = 0; o && o->acts && p < c->n; p++) {
    rpc *r = &o->rpcs[p];
    r->req = malloc(sizeof *r->req);
    if (!r->req) break;
    r->req[0] = grpc_slice_ref(b->lookup[p]);
    r->n_req = 1;
  }
  if (!o || !o->acts || !o->rpcs[c->n - 1].n_req) {
    if (o) op_destroy(o);
    atomic_store(&b->busy, false);
    return scps_error_set(err, SCPS_ENOMEM, "%s: out of memory", fn);
  }
  memcpy(o->acts, acts, sizeof *o->acts * (size_t)c->layout->n_features);
  o->b = b;
  op_launch(o, blocking, done, ud, out);
  return 0;
}

int scps_client_lookup(scps_client *c, scps_batch *b, float *const *acts, int64_t deadline_ms, scps_error *err) {
  op *o;
  int rc = lookup_start(c, b, acts, deadline_ms, true, NULL, NULL, &o, err);
  return rc ? rc : op_wait(o, NULL, err);
}

int scps_client_lookup_async(scps_client *c, scps_batch *b, float *const *acts, int64_t deadline_ms,
                             scps_client_done done, void *ud) {
  if (!done) return SCPS_EINVAL;
  op *o;
  return lookup_start(c, b, acts, deadline_ms, false, done, ud, &o, NULL);
}

/* A push's gradients laid out per stack, one feature per item of
 * run_items: out[st] is stack st's [total_sample_count x dim] buffer (NULL
 * when the batch does not use the stack), bad_at[f] the first NaN or
 * infinity of feature f (once rounded, in bfloat16) or -1. */
typedef struct grad_job {
  const scps_layout *l;
  const float *const *grads;
  void **out;
  bool bf16;
  int64_t *bad_at;
} grad_job;

/* Feature f's [batch x embedding_dim] gradients into its stack's rows,
 * padding columns zero. */
static void grad_item(void *ctx, int f) {
  grad_job *j = ctx;
  const scps_layout *l = j->l;
  const scps_feature_layout *fl = &l->features[f];
  j->bad_at[f] = -1;
  if (!j->out[fl->stack]) return;
  size_t dim = (size_t)l->stacks[fl->stack].dim;
  size_t rows = (size_t)l->feature_specs[f].batch_size;
  size_t width = (size_t)l->table_specs[fl->table].embedding_dim;
  size_t first = (size_t)fl->sample_offset * dim;
  const float *src = j->grads[f];
  uint32_t nonfinite = 0;
  for (size_t r = 0; r < rows; r++) {
    const float *restrict s = src + r * width;
    if (j->bf16) {
      uint16_t *restrict d = (uint16_t *)j->out[fl->stack] + first + r * dim;
      for (size_t c = 0; c < width; c++) {
        uint16_t h = scps_bf16_from_f32(s[c]);
        nonfinite |= (uint32_t)((h & 0x7f80u) == 0x7f80u);
        d[c] = h;
      }
      for (size_t c = width; c < dim; c++) d[c] = 0;
      continue;
    }
    float *restrict d = (float *)j->out[fl->stack] + first + r * dim;
    for (size_t c = 0; c < width; c++) {
      uint32_t bits;
      memcpy(&bits, &s[c], sizeof bits);
      nonfinite |= (uint32_t)((bits & 0x7f800000u) == 0x7f800000u);
      d[c] = s[c];
    }
    for (size_t c = width; c < dim; c++) d[c] = 0.0f;
  }
  for (size_t i = 0; nonfinite && i < rows * width; i++)
    if (!isfinite(j->bf16 ? scps_bf16_to_f32(scps_bf16_from_f32(src[i])) : src[i])) {
      j->bad_at[f] = (int64_t)i;
      break;
    }
}

/* Entries summed per item of run_items (whole rows, so about this many):
 * by entries, not rows, since a row of a small table may have thousands,
 * and items of equal work keep every thread busy to the end. */
#define ROW_ITEM_ENTRIES 8192

/* The end of the item of partition k of ra that starts at row r: the row
 * after the one holding entry ROW_ITEM_ENTRIES past r's first entry, or the
 * partition's end. */
static uint32_t row_item_end(const scps_rows *ra, int k, uint32_t r) {
  const uint32_t end = ra->row_start[k + 1];
  size_t e0, e1;
  scps_rows_entries(ra, r, &e0, &e1);
  const size_t at = e0 + ROW_ITEM_ENTRIES;
  if (at >= ra->entry_start[k + 1]) return end;
  const uint32_t next = ra->urow[at] + 1;
  return next < end ? next : end;
}

/* The by-row stacks of a push: item u sums the rows [r0[u], r1[u]) of
 * (server, stack) pair[u] into out[u]; bad[u] is the first row whose sum is
 * not finite, or -1. src[st] says where stack st's samples' gradients are. */
typedef struct row_job {
  const scps_client *c;
  const scps_batch *b;
  const scps_rows_source *src;
  size_t *pair;
  uint32_t *r0, *r1;
  uint8_t **out;
  int64_t *bad;
} row_job;

static void row_item(void *ctx, int u) {
  row_job *j = ctx;
  const int ns = j->c->layout->n_stacks;
  const int st = (int)(j->pair[u] % (size_t)ns);
  j->bad[u] = scps_rows_sum_gradients(&j->b->rows[j->pair[u]], &j->src[st], j->r0[u], j->r1[u],
                                      (size_t)j->c->layout->stacks[st].dim, j->c->value_bytes, j->out[u]);
}

/* Why row r of pair i summed to a value that is not finite: a gradient that
 * is not (named), or the sum overflowed. */
static int bad_row_sum(const scps_client *c, const scps_batch *b, const float *const *grads, size_t i, uint32_t r,
                       const char *fn, scps_error *err) {
  const scps_layout *l = c->layout;
  const int ns = l->n_stacks, st = (int)(i % (size_t)ns), p = (int)(i / (size_t)ns);
  const scps_rows *ra = &b->rows[i];
  size_t e0, e1;
  scps_rows_entries(ra, r, &e0, &e1);
  for (size_t e = e0; e < e1; e++) {
    const uint32_t sample = ra->samples[e];
    const int f = l->stacks[st].features[c->sample_feature[st][sample]];
    const int64_t width = l->table_specs[l->features[f].table].embedding_dim;
    const int64_t at = ((int64_t)sample - l->features[f].sample_offset) * width;
    for (int64_t col = 0; col < width; col++)
      if (!isfinite(grads[f][at + col]))
        return scps_error_set(err, SCPS_EINVAL, "%s: grads[%d] (feature '%s') sample %lld column %lld is %g; "
                              "gradients must be finite (nothing was sent)",
                              fn, f, l->feature_specs[f].name, (long long)(at / width), (long long)col,
                              grads[f][at + col]);
  }
  int k = 0;
  while (k + 1 < ra->n_sc && ra->row_start[k + 1] <= r) k++;
  return scps_error_set(err, SCPS_EINVAL, "%s: the gradients of stack '%s' row %u (SparseCore %d, server %d) sum to "
                        "a value that is not finite in %s (nothing was sent)",
                        fn, l->stacks[st].name, ra->local[r], p * c->S + k, p, scps_float_format_name(c->format));
}

/* Sums the gradients of every (server, stack) pushed by row into that
 * pair's buffer, after its partitions and the row_gradients prefix, on
 * run_items. rest[i] is where the sums go. */
static int sum_rows(scps_client *c, scps_batch *b, const float *const *grads, uint8_t **rest, const char *fn,
                    scps_error *err) {
  const scps_layout *l = c->layout;
  const size_t pairs = (size_t)c->n * (size_t)l->n_stacks;
  size_t items = 0;
  for (size_t i = 0; i < pairs; i++)
    if (b->slot[i] >= 0 && b->by_row[i])
      for (int k = 0; k < c->S; k++)
        for (uint32_t r = b->rows[i].row_start[k]; r < b->rows[i].row_start[k + 1]; items++)
          r = row_item_end(&b->rows[i], k, r);
  if (!items) return 0;
  row_job j = {c, b, NULL, NULL, NULL, NULL, NULL, NULL};
  scps_rows_source *src = calloc((size_t)l->n_stacks, sizeof *src);
  uint32_t *first = malloc(sizeof *first * (size_t)l->n_features);
  uint32_t *width = malloc(sizeof *width * (size_t)l->n_features);
  const float **by_feature = malloc(sizeof *by_feature * (size_t)l->n_features);
  j.pair = malloc(sizeof *j.pair * items);
  j.r0 = malloc(sizeof *j.r0 * items);
  j.r1 = malloc(sizeof *j.r1 * items);
  j.out = malloc(sizeof *j.out * items);
  j.bad = malloc(sizeof *j.bad * items);
  int rc = 0;
  if (!src || !first || !width || !by_feature || !j.pair || !j.r0 || !j.r1 || !j.out || !j.bad) {
    rc = scps_error_set(err, SCPS_ENOMEM, "%s: out of memory", fn);
    goto out;
  }
  for (int st = 0, at = 0; st < l->n_stacks; st++) {
    const scps_stack_layout *sl = &l->stacks[st];
    src[st] = (scps_rows_source){c->sample_feature[st], first + at, width + at, by_feature + at};
    for (int k = 0; k < sl->n_features; k++, at++) {
      const int f = sl->features[k];
      first[at] = (uint32_t)l->features[f].sample_offset;
      width[at] = (uint32_t)l->table_specs[l->features[f].table].embedding_dim;
      by_feature[at] = grads[f];
    }
  }
  j.src = src;
  size_t u = 0;
  for (size_t i = 0; i < pairs; i++) {
    if (b->slot[i] < 0 || !b->by_row[i]) continue;
    const size_t row_bytes = (size_t)l->stacks[i % (size_t)l->n_stacks].dim * c->value_bytes;
    for (int k = 0; k < c->S; k++)
      for (uint32_t r = b->rows[i].row_start[k]; r < b->rows[i].row_start[k + 1]; r = j.r1[u++]) {
        j.pair[u] = i;
        j.r0[u] = r;
        j.r1[u] = row_item_end(&b->rows[i], k, r);
        j.out[u] = rest[i] + (size_t)r * row_bytes;
      }
  }
  run_items(c, (int)items, row_item, &j);
  for (u = 0; u < items && !rc; u++)
    if (j.bad[u] >= 0) rc = bad_row_sum(c, b, grads, j.pair[u], (uint32_t)j.bad[u], fn, err);
out:
  free(src);
  free(first);
  free(width);
  free(by_feature);
  free(j.pair);
  free(j.r0);
  free(j.r1);
  free(j.out);
  free(j.bad);
  return rc;
}

/* Bytes of pair i's row_gradients field body: a vector per distinct row. */
static size_t row_gradients_len(const scps_client *c, const scps_batch *b, size_t i) {
  const size_t dim = (size_t)c->layout->stacks[i % (size_t)c->layout->n_stacks].dim;
  return (size_t)scps_rows_count(&b->rows[i]) * dim * c->value_bytes;
}

static int apply_start(scps_client *c, scps_batch *b, const float *const *grads, int64_t step, double learning_rate,
                       int64_t deadline_ms, bool blocking, scps_client_done done, void *ud, op **out,
                       scps_error *err) {
  const char *fn = blocking ? "scps_client_apply_gradients" : "scps_client_apply_gradients_async";
  if (!grads) return scps_error_set(err, SCPS_EINVAL, "%s: grads is NULL", fn);
  if (deadline_ms <= 0) return scps_error_set(err, SCPS_EINVAL, "%s: deadline_ms %lld must be > 0", fn, (long long)deadline_ms);
  if (step < 0) return scps_error_set(err, SCPS_EINVAL, "%s: step %lld must be >= 0", fn, (long long)step);
  if (isnan(learning_rate) || isinf(learning_rate))
    return scps_error_set(err, SCPS_EINVAL, "%s: learning_rate %g must be finite (negative: each stack's own)", fn,
                          learning_rate);
  if (c)
    for (int f = 0; f < c->layout->n_features; f++)
      if (!grads[f])
        return scps_error_set(err, SCPS_EINVAL, "%s: grads[%d] (feature '%s') is NULL", fn, f,
                              c->layout->feature_specs[f].name);
  int rc = claim_batch(c, b, fn, err);
  if (rc) return rc;
  const scps_layout *l = c->layout;
  int ns = l->n_stacks;
  grpc_slice *gs = calloc((size_t)ns, sizeof *gs);
  op *o = gs ? op_create(c, SCPS_M_APPLY_GRADIENTS, c->n, deadline_ms) : NULL;
  if (!o) {
    free(gs);
    atomic_store(&b->busy, false);
    return scps_error_set(err, SCPS_ENOMEM, "%s: out of memory", fn);
  }
  for (int st = 0; st < ns; st++) gs[st] = grpc_empty_slice();
  void **bufs = calloc((size_t)ns, sizeof *bufs);
  int64_t *bad_at = calloc((size_t)l->n_features, sizeof *bad_at);
  if (!bufs || !bad_at) rc = scps_error_set(err, SCPS_ENOMEM, "%s: out of memory", fn);
  for (int st = 0; st < ns && !rc; st++) {
    bool by_sample = false;
    for (int p = 0; p < c->n; p++) {
      const size_t i = (size_t)p * (size_t)ns + (size_t)st;
      by_sample |= b->slot[i] >= 0 && !b->by_row[i];
    }
    if (!by_sample) continue;
    const scps_stack_layout *sl = &l->stacks[st];
    bufs[st] = scps_client_buf_lend(&b->grad_buf[st], (size_t)sl->total_sample_count * (size_t)sl->dim * c->value_bytes,
                                    &gs[st]);
    if (!bufs[st]) rc = scps_error_set(err, SCPS_ENOMEM, "%s: no memory for stack '%s''s gradients", fn, sl->name);
  }
  if (!rc) {
    grad_job gj = {l, grads, bufs, c->format == SCPS_WIRE_BFLOAT16, bad_at};
    run_items(c, l->n_features, grad_item, &gj);
  }
  /* The first bad value in stack order, then feature order. */
  for (int st = 0; st < ns && !rc; st++)
    for (int k = 0; k < l->stacks[st].n_features && !rc; k++) {
      int f = l->stacks[st].features[k];
      int64_t at = bad_at[f], width = l->table_specs[l->features[f].table].embedding_dim;
      if (at >= 0)
        rc = scps_error_set(err, SCPS_EINVAL, "%s: grads[%d] (feature '%s') sample %lld column %lld is %g; gradients "
                            "must be finite%s (nothing was sent)",
                            fn, f, l->feature_specs[f].name, (long long)(at / width), (long long)(at % width),
                            grads[f][at], c->format == SCPS_WIRE_BFLOAT16 ? ", also once rounded to bfloat16" : "");
    }
  free(bufs);
  free(bad_at);
  /* By row: each (server, stack)'s buffer holds its partitions, the
   * row_gradients prefix and then the sums. */
  const size_t pairs = (size_t)c->n * (size_t)ns;
  grpc_slice *rs = calloc(pairs, sizeof *rs);
  uint8_t **rest = calloc(pairs, sizeof *rest);
  if (!rc && (!rs || !rest)) rc = scps_error_set(err, SCPS_ENOMEM, "%s: out of memory", fn);
  for (size_t i = 0; rs && i < pairs; i++) rs[i] = grpc_empty_slice();
  for (size_t i = 0; i < pairs && !rc; i++) {
    if (b->slot[i] < 0 || !b->by_row[i]) continue;
    const scps_stack_layout *sl = &l->stacks[i % (size_t)ns];
    const scps_rows *ra = &b->rows[i];
    const size_t glen = row_gradients_len(c, b, i);
    const size_t len = b->row_parts_len[i] + 1 + scps_wire_varint_size(glen) + glen;
    uint8_t *w = scps_client_buf_lend(&b->row_buf[i], len, &rs[i]);
    if (!w) {
      rc = scps_error_set(err, SCPS_ENOMEM, "%s: no memory for stack '%s''s gradients by row", fn, sl->name);
      break;
    }
    w = scps_wire_put_row_partitions(w, sl->name, ra->row_start, ra->n_sc, ra->local);
    rest[i] = scps_wire_put_row_gradients_prefix(w, glen);
  }
  if (!rc) rc = sum_rows(c, b, grads, rest, fn, err);
  free(rest);
  uint8_t head[96], pre[64];
  for (int p = 0; p < c->n && !rc; p++) {
    rpc *r = &o->rpcs[p];
    r->req = malloc(sizeof *r->req * (size_t)(1 + 4 * b->n_sent[p]));
    if (!r->req) {
      rc = scps_error_set(err, SCPS_ENOMEM, "%s: out of memory", fn);
      break;
    }
    uint8_t *w = scps_wire_put_view(head, c->fingerprint, p);
    w = scps_wire_put_step(w, step, learning_rate);
    w = scps_wire_put_state_id(w, c->servers[p].state_id);
    w = scps_wire_put_apply_format(w, c->format);
    r->req[r->n_req++] = grpc_slice_from_copied_buffer((const char *)head, (size_t)(w - head));
    size_t total = (size_t)(w - head);
    for (int st = 0; st < ns; st++) {
      size_t i = (size_t)p * (size_t)ns + (size_t)st;
      if (b->slot[i] < 0) continue;
      if (b->by_row[i]) {
        /* rs[i] is the partitions body and then the whole row_gradients
         * field, whose length the stack's prefix counts as a gradients
         * field of the same size would. */
        const size_t glen = row_gradients_len(c, b, i);
        w = scps_wire_put_apply_stack_prefix(pre, b->row_parts_len[i], glen);
        r->req[r->n_req++] = grpc_slice_from_copied_buffer((const char *)pre, (size_t)(w - pre));
        r->req[r->n_req++] = grpc_slice_ref(rs[i]);
        total += (size_t)(w - pre) + GRPC_SLICE_LENGTH(rs[i]);
        continue;
      }
      size_t glen = GRPC_SLICE_LENGTH(gs[st]), plen = b->parts_len[i];
      w = scps_wire_put_apply_stack_prefix(pre, plen, glen);
      r->req[r->n_req++] = grpc_slice_from_copied_buffer((const char *)pre, (size_t)(w - pre));
      total += (size_t)(w - pre);
      r->req[r->n_req++] = grpc_slice_sub(b->lookup[p], b->parts_off[i], b->parts_off[i] + plen);
      w = scps_wire_put_gradients_prefix(pre, glen);
      r->req[r->n_req++] = grpc_slice_from_copied_buffer((const char *)pre, (size_t)(w - pre));
      r->req[r->n_req++] = grpc_slice_ref(gs[st]);
      total += (size_t)(w - pre) + plen + glen;
    }
    if (c->max_message_bytes > 0 && total > (size_t)c->max_message_bytes)
      rc = scps_error_set(err, SCPS_ENOSPC,
                          "%s: the ApplyGradients request for server %d (%s) would be %zu bytes, over the "
                          "server's limit of %lld (nothing was sent)",
                          fn, p, addr_of(c, p), total, (long long)c->max_message_bytes);
  }
  for (int st = 0; st < ns; st++) grpc_slice_unref(gs[st]);
  free(gs);
  for (size_t i = 0; rs && i < pairs; i++) grpc_slice_unref(rs[i]);
  free(rs);
  if (rc) {
    op_destroy(o);
    atomic_store(&b->busy, false);
    return rc;
  }
  o->b = b;
  o->step = step;
  op_launch(o, blocking, done, ud, out);
  return 0;
}

int scps_client_apply_gradients(scps_client *c, scps_batch *b, const float *const *grads, int64_t step,
                                double learning_rate, int64_t deadline_ms, scps_error *err) {
  op *o;
  int rc = apply_start(c, b, grads, step, learning_rate, deadline_ms, true, NULL, NULL, &o, err);
  bool due = false;
  if (!rc) rc = op_wait(o, &due, err);
  if (!rc && due && !c->ignore_checkpoint_due) {
    scps_client_checkpoint_result result;
    scps_error e;
    scps_error_clear(&e);
    int ck = scps_client_checkpoint(c, step, NULL, c->checkpoint_timeout_ms, &result, &e);
    record_auto_checkpoint(c, ck, &e, ck ? NULL : &result);
  }
  return rc;
}

int scps_client_apply_gradients_async(scps_client *c, scps_batch *b, const float *const *grads, int64_t step,
                                      double learning_rate, int64_t deadline_ms, scps_client_done done, void *ud) {
  if (!done) return SCPS_EINVAL;
  op *o;
  return apply_start(c, b, grads, step, learning_rate, deadline_ms, false, done, ud, &o, NULL);
}

/* ----------------------------------------------------------- checkpoints */

static int checkpoint_start(scps_client *c, int64_t step, const char *directory, int64_t deadline_ms, bool blocking,
                            scps_client_done done, void *ud, op **out, scps_error *err) {
  if (step < 0) return scps_error_set(err, SCPS_EINVAL, "scps_client_checkpoint: step %lld must be >= 0", (long long)step);
  if (deadline_ms <= 0)
    return scps_error_set(err, SCPS_EINVAL, "scps_client_checkpoint: deadline_ms %lld must be > 0", (long long)deadline_ms);
  if (directory && strlen(directory) > MAX_DIRECTORY)
    return scps_error_set(err, SCPS_EINVAL, "scps_client_checkpoint: directory of %zu bytes, longer than %d",
                          strlen(directory), MAX_DIRECTORY);
  /* Servers save only below their --checkpoint-dir. */
  if (directory && scps_confine_check("scps_client_checkpoint: directory", directory, MAX_DIRECTORY, err))
    return err ? err->code : SCPS_EINVAL;
  const scps_layout *l = c->layout;
  int ns = l->n_stacks;
  Scps__V1__StackLimits *lim = calloc((size_t)(ns ? ns : 1), sizeof *lim);
  Scps__V1__StackLimits **limp = calloc((size_t)(ns ? ns : 1), sizeof *limp);
  op *o = lim && limp ? op_create(c, SCPS_M_CHECKPOINT, c->n, deadline_ms) : NULL;
  int rc = o ? 0 : scps_error_set(err, SCPS_ENOMEM, "scps_client_checkpoint: out of memory");
  /* The limits in force are the prep's, which FDO may have raised. */
  pthread_mutex_lock(&c->prep_mu);
  for (int st = 0; !rc && st < ns; st++) {
    scps__v1__stack_limits__init(&lim[st]);
    lim[st].stack = (char *)l->stacks[st].name;
    scps_prep_get_limits(c->prep, st, &lim[st].max_ids_per_partition, &lim[st].max_unique_ids_per_partition);
    limp[st] = &lim[st];
  }
  pthread_mutex_unlock(&c->prep_mu);
  Scps__V1__CheckpointRequest req = SCPS__V1__CHECKPOINT_REQUEST__INIT;
  req.config_fingerprint.data = c->fingerprint;
  req.config_fingerprint.len = sizeof c->fingerprint;
  req.step = step;
  req.directory = (char *)(directory ? directory : "");
  req.n_limits = (size_t)ns;
  req.limits = limp;
  for (int p = 0; !rc && p < c->n; p++) {
    rpc *r = &o->rpcs[p];
    req.process_index = p;
    r->req = malloc(sizeof *r->req);
    if (!r->req) {
      rc = scps_error_set(err, SCPS_ENOMEM, "scps_client_checkpoint: out of memory");
      break;
    }
    size_t n = scps__v1__checkpoint_request__get_packed_size(&req);
    r->req[0] = grpc_slice_malloc(n);
    scps__v1__checkpoint_request__pack(&req, GRPC_SLICE_START_PTR(r->req[0]));
    r->n_req = 1;
  }
  free(lim);
  free(limp);
  if (rc) {
    if (o) op_destroy(o);
    return rc;
  }
  o->step = step;
  op_launch(o, blocking, done, ud, out);
  return 0;
}

int scps_client_checkpoint(scps_client *c, int64_t step, const char *directory, int64_t deadline_ms,
                           scps_client_checkpoint_result *result, scps_error *err) {
  if (!c || !result) return scps_error_set(err, SCPS_EINVAL, "scps_client_checkpoint: client or result is NULL");
  op *o;
  int rc = checkpoint_start(c, step, directory, deadline_ms, true, NULL, NULL, &o, err);
  if (rc) return rc;
  o->result = result;
  return op_wait(o, NULL, err);
}

static void record_auto_checkpoint(scps_client *c, int rc, const scps_error *err,
                                   const scps_client_checkpoint_result *result) {
  pthread_mutex_lock(&c->mu);
  c->auto_any = true;
  c->auto_rc = rc;
  c->auto_err = *err;
  if (result) c->auto_result = *result;
  pthread_mutex_unlock(&c->mu);
}

int scps_client_auto_checkpoint(scps_client *c, scps_client_checkpoint_result *result, scps_error *err) {
  pthread_mutex_lock(&c->mu);
  int rc = !c->auto_any ? scps_error_set(err, SCPS_ENOENT, "no server has asked for a checkpoint yet")
           : c->auto_rc ? scps_error_set(err, c->auto_rc, "%s", c->auto_err.msg)
                        : 0;
  if (c->auto_any && !c->auto_rc && result) *result = c->auto_result;
  pthread_mutex_unlock(&c->mu);
  return rc;
}

/* ------------------------------------------------------------ ReadRows */

/* One piece of scps_client_read_rows: ids [0, n) of the caller's, each to
 * the server that holds it, every server's request in parallel (one with
 * none asks an empty range); each reply checked and scattered to the ids'
 * places in rows and slots. */
static int read_rows_piece(scps_client *c, int t, const int64_t *ids, size_t n, float *rows, float *slots,
                           int64_t deadline_ns, scps_error *err) {
  const scps_layout *l = c->layout;
  const scps_table_spec *spec = &l->table_specs[t];
  const size_t dim = (size_t)spec->embedding_dim;
  const int ns = scps_optimizer_num_slots(spec->optimizer.type);
  const int64_t left_ms = (deadline_ns - now_ns()) / 1000000;
  if (left_ms <= 0) return scps_error_set(err, SCPS_ETIMEDOUT, "scps_client_read_rows: deadline passed");
  /* Per server, its ids and their places among the caller's. */
  size_t *place = malloc(sizeof *place * (n ? n : 1)), *start = calloc((size_t)c->n + 1, sizeof *start);
  int64_t *sorted = malloc(sizeof *sorted * (n ? n : 1));
  op *o = place && start && sorted ? op_create(c, SCPS_M_READ_ROWS, c->n, left_ms) : NULL;
  int rc = o ? 0 : scps_error_set(err, SCPS_ENOMEM, "scps_client_read_rows: out of memory");
  for (size_t i = 0; !rc && i < n; i++) start[scps_layout_process_of_sc(l, scps_layout_sc_of(l, t, ids[i])) + 1]++;
  for (int p = 0; !rc && p < c->n; p++) start[p + 1] += start[p];
  for (size_t i = 0; !rc && i < n; i++) {
    const int p = scps_layout_process_of_sc(l, scps_layout_sc_of(l, t, ids[i]));
    size_t at = start[p]++;
    place[at] = i;
    sorted[at] = ids[i];
  }
  for (int p = c->n; !rc && p > 0; p--) start[p] = start[p - 1];
  if (!rc) start[0] = 0;
  Scps__V1__ReadRowsRequest req = SCPS__V1__READ_ROWS_REQUEST__INIT;
  req.config_fingerprint.data = c->fingerprint;
  req.config_fingerprint.len = sizeof c->fingerprint;
  req.table = (char *)spec->name;
  for (int p = 0; !rc && p < c->n; p++) {
    rpc *r = &o->rpcs[p];
    req.process_index = p;
    req.n_ids = start[p + 1] - start[p];
    req.ids = sorted + start[p];
    r->req = malloc(sizeof *r->req);
    if (!r->req) {
      rc = scps_error_set(err, SCPS_ENOMEM, "scps_client_read_rows: out of memory");
      break;
    }
    size_t len = scps__v1__read_rows_request__get_packed_size(&req);
    r->req[0] = grpc_slice_malloc(len);
    scps__v1__read_rows_request__pack(&req, GRPC_SLICE_START_PTR(r->req[0]));
    r->n_req = 1;
  }
  if (rc) {
    if (o) op_destroy(o);
    free(place);
    free(start);
    free(sorted);
    return rc;
  }
  op_launch(o, true, NULL, NULL, &o);
  pthread_mutex_lock(&c->mu);
  while (!o->finished) pthread_cond_wait(&c->cv, &c->mu);
  pthread_mutex_unlock(&c->mu);
  rc = op_result(o, err);
  for (int p = 0; !rc && p < c->n; p++) {
    const Scps__V1__ReadRowsResponse *m = (const Scps__V1__ReadRowsResponse *)o->rpcs[p].reply;
    const size_t k = start[p + 1] - start[p], bytes = k * dim * sizeof(float);
    bool ok = m->n_ids == k && m->embedding_dim == spec->embedding_dim && m->rows.len == bytes &&
              m->n_slots == (size_t)ns;
    for (size_t i = 0; ok && i < k; i++) ok = m->ids[i] == sorted[start[p] + i];
    for (int q = 0; ok && q < ns; q++)
      ok = m->slots[q]->values.len == bytes && !strcmp(m->slots[q]->name, scps_optimizer_slot_name(spec->optimizer.type, q));
    if (!ok) {
      rc = scps_error_set(err, SCPS_EIO, "server %d (%s): ReadRows answered %zu ids of dim %d with %zu slots for a "
                          "request of %zu ids of table '%s' (dim %zu, %d slots)", p, addr_of(c, p), m->n_ids,
                          m->embedding_dim, m->n_slots, k, spec->name, dim, ns);
      break;
    }
    for (size_t i = 0; i < k; i++) {
      const size_t to = place[start[p] + i];
      memcpy(rows + to * dim, m->rows.data + i * dim * sizeof(float), dim * sizeof(float));
      for (int q = 0; slots && q < ns; q++)
        memcpy(slots + (to * (size_t)ns + (size_t)q) * dim, m->slots[q]->values.data + i * dim * sizeof(float),
               dim * sizeof(float));
    }
  }
  op_destroy(o);
  free(place);
  free(start);
  free(sorted);
  return rc;
}

int scps_client_read_rows(scps_client *c, const char *table, const int64_t *ids, size_t n_ids, float *rows,
                          float *slots, int64_t deadline_ms, scps_error *err) {
  if (!c || !table || (n_ids && (!ids || !rows)))
    return scps_error_set(err, SCPS_EINVAL, "scps_client_read_rows: client, table, ids or rows is NULL");
  if (deadline_ms <= 0)
    return scps_error_set(err, SCPS_EINVAL, "scps_client_read_rows: deadline_ms %lld must be > 0",
                          (long long)deadline_ms);
  const scps_layout *l = c->layout;
  const int t = scps_find_table(l->table_specs, l->n_tables, table);
  if (t < 0) return scps_error_set(err, SCPS_ENOENT, "scps_client_read_rows: unknown table '%.200s'", table);
  const scps_table_spec *spec = &l->table_specs[t];
  for (size_t i = 0; i < n_ids; i++)
    if (ids[i] < 0 || ids[i] >= spec->vocabulary_size)
      return scps_error_set(err, SCPS_EINVAL, "scps_client_read_rows: ids[%zu] = %lld not in [0, %lld), the "
                            "vocabulary of table '%s'", i, (long long)ids[i], (long long)spec->vocabulary_size,
                            spec->name);
  /* Pieces whose answers stay well under the smallest server's message
   * limit, whichever server holds all of a piece's ids. */
  const int ns = scps_optimizer_num_slots(spec->optimizer.type);
  const int64_t per_id = (1 + ns) * (int64_t)spec->embedding_dim * 4 + 16;
  const int64_t room = c->max_message_bytes / 2 - 4096;
  const size_t piece = room > per_id ? (size_t)(room / per_id) : 1;
  const int64_t deadline_ns =
      deadline_ms > INT64_MAX / 2000000 ? INT64_MAX / 2 : now_ns() + deadline_ms * 1000000;
  const size_t dim = (size_t)spec->embedding_dim;
  for (size_t at = 0; at < n_ids; at += piece) {
    size_t k = n_ids - at < piece ? n_ids - at : piece;
    int rc = read_rows_piece(c, t, ids + at, k, rows + at * dim, slots ? slots + at * (size_t)ns * dim : NULL,
                             deadline_ns, err);
    if (rc) return rc;
  }
  return 0;
}
