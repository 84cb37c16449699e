/* scps_client_op: the call layer of libscps: an operation is one unary call
 * to each server, fanned out on the client's completion queue, retried where
 * the method allows, and finished when the last server answered. */
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

#include "scps_client_int.h"
#include "scps_status.h"

#define RETRY_FIRST_MS 20
#define RETRY_MAX_MS 200

/* gRPC's monotonic clock, not scps_clock's: deadlines and retry times made
 * from it go back to gRPC as GPR_CLOCK_MONOTONIC timespecs. */
int64_t scps__client_op_now_ns(void) {
  gpr_timespec t = gpr_now(GPR_CLOCK_MONOTONIC);
  return t.tv_sec * 1000000000 + t.tv_nsec;
}

gpr_timespec scps__client_op_ts(int64_t ns) {
  gpr_timespec t;
  t.tv_sec = ns / 1000000000;
  t.tv_nsec = (int32_t)(ns % 1000000000);
  t.clock_type = GPR_CLOCK_MONOTONIC;
  return t;
}

op *scps__client_op_create(scps_client *c, int method, int n_rpcs, int64_t timeout_ms) {
  op *o = calloc(1, sizeof *o + sizeof(rpc) * (size_t)n_rpcs);
  if (!o) return NULL;
  o->c = c;
  o->method = method;
  o->n_rpcs = n_rpcs;
  o->start_ns = scps__client_op_now_ns();
  o->deadline_ns = timeout_ms > INT64_MAX / 2000000 ? INT64_MAX / 2 : o->start_ns + timeout_ms * 1000000;
  o->deadline = scps__client_op_ts(o->deadline_ns);
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

void scps__client_op_destroy(op *o) {
  scps_client *c = o->c;
  for (int i = 0; i < o->n_rpcs; i++) {
    rpc *r = &o->rpcs[i];
    for (size_t k = 0; k < r->n_req; k++) grpc_slice_unref(r->req[k]);
    free(r->req);
    if (r->has_envelope) grpc_slice_unref(r->envelope);
    if (r->reply) protobuf_c_message_free_unpacked(r->reply, NULL);
  }
  free(o->acts);
  free(o->topk);
  free(o);
  pthread_mutex_lock(&c->mu);
  c->in_flight--;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

/* The last server answered. Blocking callers are woken and finish on their
 * own thread; asynchronous operations finish here, on a queue thread: the
 * outcome, the method's then step (which may hand done on to an operation
 * of its own), done. */
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
  int rc = scps__client_op_outcome(o, &err);
  if (o->b) atomic_store(&o->b->busy, false);
  if (o->then && o->then(o, &rc, &err)) {
    scps__client_op_destroy(o);
    return;
  }
  o->done(o->ud, rc, &err);
  scps__client_op_destroy(o);
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
  r->sent = r->has_envelope ? grpc_raw_byte_buffer_create(&r->envelope, 1) : grpc_raw_byte_buffer_create(r->req, r->n_req);
  atomic_fetch_add_explicit(&c->bytes_sent, grpc_byte_buffer_length(r->sent), memory_order_relaxed);
  if (r->has_envelope) atomic_fetch_add_explicit(&c->bytes_placed_sent, r->envelope_bytes, memory_order_relaxed);
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
  scps__client_conn_metadata(c->conn, &ops[0], &r->auth_md);
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
                         r->server, scps__client_addr(c, r->server), scps__method_name(o->method), (int)e);
  return r->rc;
}

/* Starts an operation built by one of the *_start functions. */
void scps__client_op_launch(op *o, bool blocking, scps_client_done done, void *ud, op **out) {
  o->blocking = blocking;
  o->done = done;
  o->ud = ud;
  *out = o;
  scps__client_op_start_range(o, 0, o->n_rpcs);
}

/* Once the last call is started an asynchronous o may complete and be
 * freed on a queue thread: nothing here reads o after that. */
void scps__client_op_start_range(op *o, int from, int to) {
  atomic_store(&o->pending, to - from);
  for (int i = from; i < to; i++) {
    rpc *r = &o->rpcs[i];
    if (rpc_start(r)) rpc_finished(r);
  }
}

/* A Lookup's second piece is its placement (scps_client_lookup.c), its
 * envelope the request's own: a retry sends the request and takes the
 * answer over the connection, as the attempt that failed may still write
 * the segment. */
static void drop_shared_pieces(rpc *r) {
  if (r->n_req > 1) grpc_slice_unref(r->req[--r->n_req]);
  if (r->has_envelope) grpc_slice_unref(r->envelope);
  r->has_envelope = false;
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
    if (r && r->due_ns <= scps__client_op_now_ns())
      c->retries = r->next_retry;
    else
      r = NULL;
    pthread_mutex_unlock(&c->mu);
    if (!r) return;
    if (rpc_start(r)) rpc_finished(r);
  }
}

int scps__client_op_unpack(rpc *r, ProtobufCMessage **out) {
  op *o = r->op;
  scps_client *c = o->c;
  const ProtobufCMessageDescriptor *desc = scps__method_response(o->method);
  *out = NULL;
  grpc_byte_buffer_reader rd;
  if (!grpc_byte_buffer_reader_init(&rd, r->response))
    return scps_error_set(&r->err, SCPS_EIO, "server %d (%s): %s: unreadable response", r->server,
                          scps__client_addr(c, r->server), scps__method_name(o->method));
  grpc_slice all = grpc_byte_buffer_reader_readall(&rd);
  grpc_byte_buffer_reader_destroy(&rd);
  ProtobufCMessage *m = protobuf_c_message_unpack(desc, NULL, GRPC_SLICE_LENGTH(all), GRPC_SLICE_START_PTR(all));
  size_t len = GRPC_SLICE_LENGTH(all);
  grpc_slice_unref(all);
  if (!m)
    return scps_error_set(&r->err, SCPS_EIO, "server %d (%s): %s: response of %zu bytes is not a valid %s",
                          r->server, scps__client_addr(c, r->server), scps__method_name(o->method), len, desc->name);
  *out = m;
  return 0;
}

/* An OK answer: the method's read step, or the message kept in r->reply. */
static int read_reply(rpc *r) {
  op *o = r->op;
  scps_client *c = o->c;
  if (!r->response)
    return scps_error_set(&r->err, SCPS_EIO, "server %d (%s): %s: OK without a response message", r->server,
                          scps__client_addr(c, r->server), scps__method_name(o->method));
  if (o->read) return o->read(r);
  return scps__client_op_unpack(r, &r->reply);
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
  } else if (st == GRPC_STATUS_FAILED_PRECONDITION && r->has_envelope) {
    /* The server holds no segment the request lay in (it restarted, or
     * closed an idle side channel): nothing was looked up, and the same
     * request goes on the connection at once, its answer too. */
    if (r->response) grpc_byte_buffer_destroy(r->response);
    r->response = NULL;
    drop_shared_pieces(r);
    schedule_retry(r, scps__client_op_now_ns());
    return;
  } else if ((st == GRPC_STATUS_UNAVAILABLE || st == GRPC_STATUS_CANCELLED) &&
             (o->method == SCPS_M_LOOKUP || o->method == SCPS_M_TOPK) &&
             scps__client_op_now_ns() + r->backoff_ms * 1000000 < o->deadline_ns) {
    /* Lookups (and TopK) are idempotent: try again after a short backoff. CANCELLED
     * comes from a draining server cancelling calls that arrive after its
     * drain (this client cancels none), so it is retried like UNAVAILABLE. */
    if (r->response) grpc_byte_buffer_destroy(r->response);
    r->response = NULL;
    drop_shared_pieces(r);
    int64_t due = scps__client_op_now_ns() + r->backoff_ms * 1000000;
    r->backoff_ms = r->backoff_ms * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : r->backoff_ms * 2;
    schedule_retry(r, due);
    return;
  } else {
    /* CANCELLED keeps its own code (a server draining for shutdown; the
     * call may go to the process that replaces it): callers and scps-loadgen
     * tell it from UNAVAILABLE. */
    int code = scps__status_to_error(st);
    const char *why = "";
    char unconnected[320];
    if (o->method == SCPS_M_GET_CONFIG && st == GRPC_STATUS_DEADLINE_EXCEEDED) {
      code = SCPS_EUNAVAIL;
      snprintf(unconnected, sizeof unconnected, " (no connection within the connect timeout: %s; an scps-server "
               "listens once its tables are initialized)", scps__client_conn_why_unconnected(c->conn));
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
                           scps__client_addr(c, r->server), scps__method_name(o->method), scps__status_name(st), text, why,
                           r->attempts, r->attempts == 1 ? "" : "s",
                           (long long)((scps__client_op_now_ns() - o->start_ns) / 1000000));
  }
  if (r->response) grpc_byte_buffer_destroy(r->response);
  r->response = NULL;
  rpc_finished(r);
}

static void *cq_main(void *arg) {
  scps_client *c = arg;
  /* Named so that per-thread CPU time (/proc, top, perf) tells it from the
   * caller's threads; the kernel keeps 15 characters. */
  prctl(PR_SET_NAME, "scps-cq");
  for (;;) {
    pthread_mutex_lock(&c->mu);
    gpr_timespec until = c->retries ? scps__client_op_ts(c->retries->due_ns) : gpr_inf_future(GPR_CLOCK_MONOTONIC);
    pthread_mutex_unlock(&c->mu);
    grpc_event ev = grpc_completion_queue_next(c->cq, until, NULL);
    if (ev.type == GRPC_QUEUE_SHUTDOWN) return NULL;
    if (ev.type == GRPC_OP_COMPLETE) rpc_done(ev.tag);
    run_due_retries(c);
  }
}

void scps__client_op_wait(op *o) {
  scps_client *c = o->c;
  pthread_mutex_lock(&c->mu);
  while (!o->finished) pthread_cond_wait(&c->cv, &c->mu);
  pthread_mutex_unlock(&c->mu);
}

int scps__client_op_finish(op *o, scps_error *err) {
  int rc = scps__client_op_outcome(o, err);
  if (o->b) atomic_store(&o->b->busy, false);
  scps__client_op_destroy(o);
  return rc;
}

void scps__client_op_list_servers(const op *o, bool failed, char *buf, size_t len) {
  size_t used = 0;
  buf[0] = '\0';
  for (int p = 0; p < o->n_rpcs && used < len; p++)
    if ((o->rpcs[p].rc != 0) == failed)
      used += (size_t)snprintf(buf + used, len - used, "%s%d", used ? ", " : "", p);
  if (!used) snprintf(buf, len, "none");
}

int scps__client_op_outcome(op *o, scps_error *err) {
  int first = -1, failures = 0;
  for (int i = 0; i < o->n_rpcs; i++)
    if (o->rpcs[i].rc) {
      if (first < 0) first = i;
      failures++;
    }
  return o->outcome ? o->outcome(o, first, failures, err) : scps__client_op_failure(o, first, failures, err);
}

int scps__client_op_failure(const op *o, int first, int failures, scps_error *err) {
  if (first < 0) return 0;
  const rpc *r = &o->rpcs[first];
  if (failures > 1) {
    char bad[128];
    scps__client_op_list_servers(o, true, bad, sizeof bad);
    return scps_error_set(err, r->rc, "%s [servers %s failed]", r->err.msg, bad);
  }
  return scps_error_set(err, r->rc, "%s", r->err.msg);
}

int scps__client_op_threads_start(scps_client *c, int n, scps_error *err) {
  c->cq = grpc_completion_queue_create_for_next(NULL);
  for (int i = 0; i < n; i++) {
    if (pthread_create(&c->threads[i], NULL, cq_main, c))
      return scps_error_set(err, SCPS_ENOMEM, "cannot start completion-queue thread %d", i);
    c->n_threads++;
  }
  return 0;
}

void scps__client_op_threads_stop(scps_client *c) {
  if (!c->cq) return;
  grpc_completion_queue_shutdown(c->cq);
  for (int i = 0; i < c->n_threads; i++) pthread_join(c->threads[i], NULL);
  if (!c->n_threads)
    while (grpc_completion_queue_next(c->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type != GRPC_QUEUE_SHUTDOWN) {
    }
}
