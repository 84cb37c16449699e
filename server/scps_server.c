#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "scps_cpus.h"
#include "scps_limits.h"
#include "scps_partlimits.h"
#include "scps_restore.h"
#include "scps_scratch.h"
#include "scps_server_int.h"
#include "scps_step.h"

/* Requests kept posted per completion queue: enough that a burst of calls
 * never waits for a re-arm. */
#define POSTED_DATA 16
#define POSTED_SMALL 2

/* The least role that may call each method when the server has a
 * --token-file (deploy/SECURITY.md). A method missing here is admin-only:
 * a new method is listed only if trainers need it. */
static const scps_role method_role[SCPS_M_COUNT] = {
    [SCPS_M_GET_CONFIG] = SCPS_ROLE_TRAINING, [SCPS_M_LOOKUP] = SCPS_ROLE_TRAINING,
    [SCPS_M_APPLY_GRADIENTS] = SCPS_ROLE_TRAINING, [SCPS_M_STATS] = SCPS_ROLE_TRAINING,
    [SCPS_M_HEALTH] = SCPS_ROLE_TRAINING, [SCPS_M_CHECKPOINT] = SCPS_ROLE_ADMIN,
};

static scps_role least_role(int method) {
  return method_role[method] != SCPS_ROLE_NONE ? method_role[method] : SCPS_ROLE_ADMIN;
}

bool scps_call_may(const scps_call *c, int method) { return c->role >= least_role(method); }

static void call_free(scps_call *c) {
  if (c->call) grpc_call_unref(c->call);
  grpc_metadata_array_destroy(&c->md);
  if (c->method == SCPS_M_UNKNOWN) grpc_call_details_destroy(&c->details);
  if (c->payload) grpc_byte_buffer_destroy(c->payload);
  if (c->response) grpc_byte_buffer_destroy(c->response);
  if (c->request) protobuf_c_message_free_unpacked(c->request, NULL);
  scps_request_free(&c->req);
  free(c->stacks);
  free(c->limit_mem);
  if (c->scratch) scps_scratch_give(c->srv->scratch, c->scratch, c->scratch_cap);
  if (c->charged) scps_budget_release(c->srv->budget, c->charged);
  free(c);
}

/* Hands the shutdown to gRPC: it closes the listeners, sends GOAWAY and
 * posts the shutdown tag once every call and connection is gone. Once only. */
static void stop_grpc(scps_server *s) {
  if (atomic_exchange(&s->grpc_stopping, 1)) return;
  grpc_server_shutdown_and_notify(s->server, s->cqs[0], &s->shutdown_tag);
}

static void call_release(scps_call *c) {
  scps_server *s = c->srv;
  bool counted = c->counted;
  call_free(c);
  if (counted) scps_limits_note_call(s);
  if (counted && atomic_fetch_sub(&s->active, 1) == 1 && atomic_load(&s->draining) && !atomic_load(&s->pushes_open))
    stop_grpc(s);
}

static void call_unref(scps_call *c) {
  if (atomic_fetch_sub(&c->refs, 1) == 1) call_release(c);
}

static void post_request(scps_server *s, int cq, int method) {
  scps_call *c = calloc(1, sizeof *c);
  if (!c) return; /* one fewer posted request; the others keep serving */
  c->srv = s;
  c->cq = cq;
  c->method = method;
  c->t_new = (scps_tag){c, TAG_NEW};
  c->t_close = (scps_tag){c, TAG_CLOSE};
  c->t_send = (scps_tag){c, TAG_SEND};
  c->t_recv = (scps_tag){c, TAG_RECV};
  grpc_metadata_array_init(&c->md);
  grpc_call_error e;
  if (method == SCPS_M_UNKNOWN) {
    grpc_call_details_init(&c->details);
    e = grpc_server_request_call(s->server, &c->call, &c->details, &c->md, s->cqs[cq], s->cqs[cq], &c->t_new);
  } else {
    /* The message is received by the call itself (receive_request), so
     * that it can be given a deadline. */
    e = grpc_server_request_registered_call(s->server, s->handles[method], &c->call, &c->deadline, &c->md, NULL,
                                            s->cqs[cq], s->cqs[cq], &c->t_new);
  }
  if (e != GRPC_CALL_OK) {
    c->call = NULL;
    call_free(c);
  }
}

int scps_call_read_payload(scps_call *c, uint8_t **data, size_t *len) {
  *data = NULL;
  *len = 0;
  if (!c->payload) return SCPS_EINVAL;
  grpc_byte_buffer_reader r;
  if (!grpc_byte_buffer_reader_init(&r, c->payload)) return SCPS_EINVAL;
  size_t n = grpc_byte_buffer_length(c->payload);
  uint8_t *buf = malloc(n ? n : 1);
  if (!buf) {
    grpc_byte_buffer_reader_destroy(&r);
    return SCPS_ENOMEM;
  }
  size_t off = 0;
  grpc_slice sl;
  while (grpc_byte_buffer_reader_next(&r, &sl)) {
    size_t k = GRPC_SLICE_LENGTH(sl);
    if (off + k > n) k = n - off;
    memcpy(buf + off, GRPC_SLICE_START_PTR(sl), k);
    off += k;
    grpc_slice_unref(sl);
  }
  grpc_byte_buffer_reader_destroy(&r);
  *data = buf;
  *len = off;
  c->bytes_in = off;
  return 0;
}

/* One batch with the initial metadata, the response if any (c->response)
 * and the status. */
static void send_final(scps_call *c, grpc_status_code status, const char *details, size_t len) {
  scps_server *s = c->srv;
  grpc_op ops[3];
  memset(ops, 0, sizeof ops);
  int n = 0;
  ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[n++].data.send_initial_metadata.count = 0;
  if (c->response) {
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n++].data.send_message.send_message = c->response;
  }
  grpc_slice msg = grpc_slice_from_copied_string(details ? details : "");
  ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
  ops[n].data.send_status_from_server.status = status;
  ops[n].data.send_status_from_server.status_details = &msg;
  n++;
  if (c->method < SCPS_M_COUNT || c->method == SCPS_M_UNKNOWN) {
    scps_method_stats *m = &s->methods[c->method];
    atomic_fetch_add(&m->calls, 1);
    if (status != GRPC_STATUS_OK) atomic_fetch_add(&m->errors, 1);
    atomic_fetch_add(&m->bytes_in, (long long)c->bytes_in);
    atomic_fetch_add(&m->bytes_out, (long long)(c->response ? len : 0));
    atomic_fetch_add(&m->ns, (long long)(scps_clock_ns() - c->t0_ns));
  }
  /* The call is freed by its completion-queue thread after the send tag; a
   * release on refs pairs with that thread's acq_rel decrement, making the
   * hand-off through gRPC's (uninstrumented) queue visible to ThreadSanitizer.
   * Every read of c must come before it, c->call included. */
  grpc_call *call = c->call;
  if (c->response) scps_limits_watch(c, SCPS_WATCH_SENDING);
  atomic_fetch_add_explicit(&c->refs, 0, memory_order_release);
  grpc_call_error e = grpc_call_start_batch(call, ops, (size_t)n, &c->t_send, NULL);
  grpc_slice_unref(msg);
  if (e != GRPC_CALL_OK) {
    scps_limits_unwatch(c);
    call_unref(c); /* the send tag will never come */
  }
}

void scps_call_finish(scps_call *c, grpc_status_code status, const char *details, const uint8_t *response,
                      size_t len) {
  if (status == GRPC_STATUS_OK && response) {
    grpc_slice sl = grpc_slice_malloc(len);
    memcpy(GRPC_SLICE_START_PTR(sl), response, len);
    c->response = grpc_raw_byte_buffer_create(&sl, 1);
    grpc_slice_unref(sl);
  }
  send_final(c, status, details, len);
}

void scps_call_finish_packed(scps_call *c, const ProtobufCMessage *msg) {
  size_t len = protobuf_c_message_get_packed_size(msg);
  grpc_slice sl = grpc_slice_malloc(len);
  protobuf_c_message_pack(msg, GRPC_SLICE_START_PTR(sl));
  c->response = grpc_raw_byte_buffer_create(&sl, 1);
  grpc_slice_unref(sl);
  send_final(c, GRPC_STATUS_OK, "", len);
}

void scps_call_finish_buffer(scps_call *c, grpc_byte_buffer *response, size_t len) {
  c->response = response;
  send_final(c, GRPC_STATUS_OK, "", len);
}

/* Checks the caller's bearer token (every call, before anything else
 * answers it) and records its role in c; answers the call and returns false
 * when it may not go on. Neither answer tells which tokens exist. */
static bool authorize(scps_call *c) {
  c->role = scps_auth_role(&c->srv->auth, &c->md);
  if (c->role == SCPS_ROLE_NONE) {
    scps_call_finish(c, GRPC_STATUS_UNAUTHENTICATED,
                     "no valid bearer token: send metadata 'authorization: Bearer TOKEN' with a token of the "
                     "server's --token-file", NULL, 0);
    return false;
  }
  if (c->method == SCPS_M_UNKNOWN || scps_call_may(c, c->method)) return true;
  char msg[256];
  snprintf(msg, sizeof msg, "%s needs the %s role; this caller's token has the %s role", scps_method_name(c->method),
           scps_role_name(least_role(c->method)), scps_role_name(c->role));
  scps_call_finish(c, GRPC_STATUS_PERMISSION_DENIED, msg, NULL, 0);
  return false;
}

/* A call admitted to the budget for its request (or refused): runs the
 * method, on the thread that admitted it. */
static void request_admitted(scps_budget_waiter *w, bool admitted, size_t in_use, size_t limit) {
  scps_call *c = scps_call_of_wait(w);
  if (admitted) {
    c->charged = w->need;
    scps_handle_call(c);
  } else {
    char msg[512];
    scps_limits_refusal(c, "its request message and its decoding", w->need, in_use, limit, msg, sizeof msg);
    scps_call_finish(c, GRPC_STATUS_RESOURCE_EXHAUSTED, msg, NULL, 0);
  }
  call_unref(c); /* the reference held while it waited */
}

/* The request has arrived (TAG_RECV): its bytes are counted in the budget
 * (waiting for room if need be) before the method runs. Health and Stats
 * are counted without waiting, so a server out of memory can be watched. */
static void on_recv(scps_call *c, int ok) {
  scps_server *s = c->srv;
  if (scps_limits_unwatch(c) || !ok) {
    /* Cancelled, by the transfer deadline or the client: nothing to answer. */
    call_unref(c); /* the send that is never started */
    call_unref(c); /* this tag's */
    return;
  }
  c->wait.need = scps_request_memory(c, c->payload ? grpc_byte_buffer_length(c->payload) : 0);
  c->wait.deadline_ns = scps_limits_wait_deadline(c);
  c->wait.done = request_admitted;
  atomic_fetch_add(&c->refs, 1); /* until request_admitted */
  if ((c->method == SCPS_M_HEALTH || c->method == SCPS_M_STATS) && c->wait.need <= SCPS_FREE_PASS_BYTES) {
    scps_budget_charge(s->budget, c->wait.need);
    request_admitted(&c->wait, true, 0, 0);
  } else {
    scps_budget_wait(s->budget, &c->wait);
  }
  call_unref(c);
}

/* Receives the request message, due within --transfer-timeout. */
static void receive_request(scps_call *c) {
  grpc_op op;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_RECV_MESSAGE;
  op.data.recv_message.recv_message = &c->payload;
  atomic_fetch_add(&c->refs, 1); /* the receive tag's */
  scps_limits_watch(c, SCPS_WATCH_ARRIVING);
  if (grpc_call_start_batch(c->call, &op, 1, &c->t_recv, NULL) != GRPC_CALL_OK) {
    scps_limits_unwatch(c);
    call_unref(c);
    scps_call_finish(c, GRPC_STATUS_INTERNAL, "cannot receive the request message", NULL, 0);
  }
}

static void on_new_call(scps_call *c, int ok) {
  scps_server *s = c->srv;
  if (!ok) { /* server shutting down: the request was never matched */
    c->call = NULL;
    call_free(c);
    return;
  }
  if (!atomic_load(&s->grpc_stopping)) post_request(s, c->cq, c->method);
  /* While draining, Health (which answers DRAINING) and Stats are served;
   * anything else is refused with the status clients retry elsewhere. A
   * call that slips in while the drain starts is simply served. */
  const bool drain_push = c->method == SCPS_M_APPLY_GRADIENTS && atomic_load(&s->pushes_open);
  bool refuse = atomic_load(&s->draining) && c->method != SCPS_M_HEALTH && c->method != SCPS_M_STATS && !drain_push;
  if (!refuse && c->method != SCPS_M_HEALTH && c->method != SCPS_M_STATS) {
    c->counted = 1;
    atomic_fetch_add(&s->active, 1);
  }
  c->t0_ns = scps_clock_ns();
  if (c->counted) scps_limits_note_call(s);
  atomic_store(&c->refs, 2);
  grpc_op op;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
  op.data.recv_close_on_server.cancelled = &c->cancelled;
  if (grpc_call_start_batch(c->call, &op, 1, &c->t_close, NULL) != GRPC_CALL_OK) call_unref(c);
  if (!authorize(c)) return;
  /* Only a push the caller may make keeps the drain's quiet period from
   * ending: a caller without a token cannot hold a stopping server. */
  if (drain_push) atomic_store(&s->last_push_ns, scps_clock_ns());
  if (refuse) {
    char msg[128];
    snprintf(msg, sizeof msg, "process %d is shutting down: finishing the calls in flight, taking no new ones",
             s->opts.process_index);
    scps_call_finish(c, GRPC_STATUS_UNAVAILABLE, msg, NULL, 0);
    return;
  }
  if (c->method == SCPS_M_UNKNOWN) {
    char msg[512];
    char *m = grpc_slice_to_c_string(c->details.method);
    snprintf(msg, sizeof msg, "method %s is not served here; scps-server serves scps.v1.EmbeddingService", m);
    gpr_free(m);
    scps_call_finish(c, GRPC_STATUS_UNIMPLEMENTED, msg, NULL, 0);
    return;
  }
  receive_request(c);
}

static void *cq_main(void *arg) {
  scps_call *self = arg; /* a carrier for (server, cq index) */
  scps_server *s = self->srv;
  grpc_completion_queue *cq = s->cqs[self->cq];
  free(self);
  for (;;) {
    grpc_event ev = grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
    if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
    if (ev.type != GRPC_OP_COMPLETE) continue;
    scps_tag *t = ev.tag;
    switch (t->kind) {
    case TAG_NEW: on_new_call(t->call, ev.success); break;
    case TAG_CLOSE: call_unref(t->call); break;
    case TAG_SEND:
      scps_limits_unwatch(t->call);
      call_unref(t->call);
      break;
    case TAG_RECV: on_recv(t->call, ev.success); break;
    case TAG_SHUTDOWN:
      if (s->on_stopped) s->on_stopped(s->on_stopped_ud);
      break;
    }
  }
  return NULL;
}

/* The CPUs of scps_server_options.pin_sparsecores, into s->sc_cpus. */
static int plan_sc_cpus(scps_server *s, scps_error *err) {
  int allowed[SCPS_CPUS_MAX];
  int n = scps_cpus_allowed(allowed, SCPS_CPUS_MAX, err);
  if (n < 0) return n;
  if (n < 2) return 0;
  scps_cpus_assign(allowed, n, s->opts.process_index, s->S, s->sc_cpus);
  s->sc_pinned = true;
  return 0;
}

/* Fails at once, before the tables are initialized (seconds to minutes for
 * large ones), when another process already listens on a host:port or
 * [v6]:port address; gRPC binds it only once they are ready. Anything this
 * cannot parse or resolve is left to gRPC. */
static int probe_listen(const char *listen, scps_error *err) {
  char host[256];
  const char *port;
  if (listen[0] == '[') {
    const char *close_br = strchr(listen, ']');
    if (!close_br || close_br[1] != ':' || (size_t)(close_br - listen - 1) >= sizeof host) return 0;
    memcpy(host, listen + 1, (size_t)(close_br - listen - 1));
    host[close_br - listen - 1] = '\0';
    port = close_br + 2;
  } else {
    const char *colon = strrchr(listen, ':');
    if (!colon || (size_t)(colon - listen) >= sizeof host || strchr(listen, '/')) return 0;
    memcpy(host, listen, (size_t)(colon - listen));
    host[colon - listen] = '\0';
    port = colon + 1;
  }
  if (!strcmp(port, "0") || !strncmp(listen, "unix", 4)) return 0;
  struct addrinfo hints = {.ai_flags = AI_PASSIVE, .ai_socktype = SOCK_STREAM}, *ai = NULL;
  if (getaddrinfo(host[0] ? host : NULL, port, &hints, &ai)) return 0;
  int rc = 0;
  for (struct addrinfo *a = ai; a && !rc; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, a->ai_addr, a->ai_addrlen) && errno == EADDRINUSE)
      rc = scps_error_set(err, SCPS_EIO, "cannot listen on '%s': address already in use", listen);
    close(fd);
  }
  freeaddrinfo(ai);
  return rc;
}

/* The gRPC server, its methods and queues, bound to o->listen: last, once
 * the tables are ready, so a client never connects to a server that cannot
 * answer yet (it is refused and retries instead). */
static int grpc_setup(scps_server *s, const scps_server_options *o, scps_error *err) {
  s->shutdown_tag = (scps_tag){NULL, TAG_SHUTDOWN};
  s->cqs = calloc((size_t)o->cq_threads, sizeof *s->cqs);
  s->threads = calloc((size_t)o->cq_threads, sizeof *s->threads);
  if (!s->cqs || !s->threads) return scps_error_set(err, SCPS_ENOMEM, "out of memory");
  grpc_init();
  grpc_arg args[5 + SCPS_LIMITS_ARGS];
  args[0].type = GRPC_ARG_INTEGER;
  args[0].key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
  args[0].value.integer = (int)o->max_message_bytes;
  args[1].type = GRPC_ARG_INTEGER;
  args[1].key = GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
  args[1].value.integer = -1;
  /* gRPC lets a second server bind the same port by default; a typo in a
   * cluster's addresses must fail loudly instead. */
  args[2].type = GRPC_ARG_INTEGER;
  args[2].key = GRPC_ARG_ALLOW_REUSEPORT;
  args[2].value.integer = 0;
  /* Gradient pushes are megabytes: a 64 KiB stream window and 16 KiB frames
   * would cost a round trip per window of every request. */
  args[3].type = GRPC_ARG_INTEGER;
  args[3].key = GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES;
  args[3].value.integer = 64 << 20;
  args[4].type = GRPC_ARG_INTEGER;
  args[4].key = GRPC_ARG_HTTP2_MAX_FRAME_SIZE;
  args[4].value.integer = (1 << 24) - 1;
  int n_args = 5 + scps_limits_channel_args(s, args + 5);
  grpc_channel_args ca = {(size_t)n_args, args};
  s->server = grpc_server_create(&ca, NULL);
  if (s->quota) grpc_resource_quota_unref(s->quota); /* the server holds its own */
  s->quota = NULL;
  for (int m = 0; m < SCPS_M_COUNT; m++)
    s->handles[m] = grpc_server_register_method(s->server, scps_method_path(m), NULL, GRPC_SRM_PAYLOAD_NONE, 0);
  for (int i = 0; i < o->cq_threads; i++) {
    s->cqs[i] = grpc_completion_queue_create_for_next(NULL);
    grpc_server_register_completion_queue(s->server, s->cqs[i], NULL);
  }
  grpc_server_credentials *creds = scps_auth_server_credentials(&s->auth);
  s->port = grpc_server_add_http2_port(s->server, o->listen, creds);
  grpc_server_credentials_release(creds);
  if (s->port == 0)
    return scps_error_set(err, SCPS_EIO, "cannot listen on '%s' (address in use or malformed?)", o->listen);
  return 0;
}

int scps_server_create(const scps_server_options *o, scps_server **out, scps_error *err) {
  *out = NULL;
  if (o->cq_threads < 1 || o->cq_threads > 64 || o->tc_threads < 1 || o->tc_threads > 64)
    return scps_error_set(err, SCPS_EINVAL, "--cq-threads %d and --tc-threads %d must be in [1, 64]",
                          o->cq_threads, o->tc_threads);
  if (o->topology.sc_per_process > SCPS_MAX_SC_PER_PROCESS)
    return scps_error_set(err, SCPS_EINVAL, "--sc-per-process %d exceeds %d", o->topology.sc_per_process,
                          SCPS_MAX_SC_PER_PROCESS);
  if (o->checkpoint_keep < 1)
    return scps_error_set(err, SCPS_EINVAL, "--checkpoint-keep %d must be >= 1", o->checkpoint_keep);
  if (o->max_step_advance < 0 || o->max_step_advance > SCPS_STEP_LIMIT)
    return scps_error_set(err, SCPS_EINVAL, "--max-step-advance %lld not in [1, 2^53]", (long long)o->max_step_advance);
  if (o->checkpoint_grid < 0 || o->checkpoint_grid > SCPS_STEP_LIMIT)
    return scps_error_set(err, SCPS_EINVAL, "--checkpoint-grid %lld not in [1, 2^53]", (long long)o->checkpoint_grid);
  if (o->max_message_bytes < 4096 || o->max_message_bytes > INT32_MAX)
    return scps_error_set(err, SCPS_EINVAL, "max message size %lld not in [4096, %d] bytes",
                          (long long)o->max_message_bytes, INT32_MAX);
  scps_server *s = calloc(1, sizeof *s);
  if (!s) return scps_error_set(err, SCPS_ENOMEM, "out of memory");
  s->opts = *o;
  if (!s->opts.max_step_advance) s->opts.max_step_advance = SCPS_STEP_ADVANCE_DEFAULT;
  if (!s->opts.checkpoint_grid) s->opts.checkpoint_grid = 100;
  s->S = o->topology.sc_per_process;
  s->tables = malloc(sizeof *s->tables * (size_t)o->n_tables);
  s->features = malloc(sizeof *s->features * (size_t)(o->n_features ? o->n_features : 1));
  int rc = s->tables && s->features ? 0 : scps_error_set(err, SCPS_ENOMEM, "out of memory");
  if (!rc) {
    memcpy(s->tables, o->tables, sizeof *s->tables * (size_t)o->n_tables);
    if (o->n_features) memcpy(s->features, o->features, sizeof *s->features * (size_t)o->n_features);
    s->opts.tables = s->tables;
    s->opts.features = s->features;
    rc = scps_layout_create(s->tables, o->n_tables, s->features, o->n_features, &o->topology, NULL, &s->layout,
                            err);
  }
  if (!rc) rc = probe_listen(o->listen, err);
  if (!rc)
    rc = scps_auth_load(&s->auth, o->tls_cert_file, o->tls_key_file, o->tls_client_ca_file, o->token_file, err);
  if (!rc) rc = scps_engine_create(s->layout, o->process_index, &s->engine, err);
  if (!rc && o->pin_sparsecores) rc = plan_sc_cpus(s, err);
  if (!rc) rc = scps_pipeline_create(s->S, o->tc_threads, s->sc_pinned ? s->sc_cpus : NULL, &s->pipeline, err);
  if (!rc) rc = scps_handlers_init(s, err);
  if (!rc) rc = scps_saver_init(s, err);
  if (!rc) rc = scps_limits_init(s, err);
  if (!rc && o->partition_limits[0] > 0) scps_partlimits_override(s);
  if (!rc) scps_restore_new_state(s);
  if (!rc) rc = grpc_setup(s, o, err);
  if (rc) {
    scps_server_destroy(s);
    return rc;
  }
  *out = s;
  return 0;
}

int scps_server_port(const scps_server *s) { return s->port; }

int64_t scps_server_memory_budget(const scps_server *s, const char **how, int64_t *grpc_quota) {
  *how = s->budget_how;
  *grpc_quota = scps_limits_quota(&s->opts);
  return s->opts.memory_budget;
}

void scps_call_unref(scps_call *c) { call_unref(c); }

const int *scps_server_sc_cpus(const scps_server *s) { return s->sc_pinned ? s->sc_cpus : NULL; }

void scps_server_checkpoint_tick(scps_server *s, int64_t tick) { scps_saver_tick(s, tick); }

int scps_server_start(scps_server *s, void (*on_stopped)(void *), void *ud, int *threads_started,
                      scps_error *err) {
  s->on_stopped = on_stopped;
  s->on_stopped_ud = ud;
  s->start_time = (double)scps_clock_ns() * 1e-9;
  grpc_server_start(s->server);
  for (int i = 0; i < s->opts.cq_threads; i++) {
    for (int m = 0; m < SCPS_M_COUNT; m++)
      for (int k = 0; k < (m == SCPS_M_LOOKUP || m == SCPS_M_APPLY_GRADIENTS ? POSTED_DATA : POSTED_SMALL); k++)
        post_request(s, i, m);
    post_request(s, i, SCPS_M_UNKNOWN);
    post_request(s, i, SCPS_M_UNKNOWN);
  }
  for (int i = 0; i < s->opts.cq_threads; i++) {
    scps_call *carrier = calloc(1, sizeof *carrier);
    if (!carrier) {
      *threads_started = s->n_threads_started;
      return scps_error_set(err, SCPS_ENOMEM, "out of memory");
    }
    carrier->srv = s;
    carrier->cq = i;
    if (pthread_create(&s->threads[i], NULL, cq_main, carrier)) {
      free(carrier);
      *threads_started = s->n_threads_started;
      return scps_error_set(err, SCPS_ENOMEM, "cannot start completion-queue thread %d", i);
    }
    s->n_threads_started++;
  }
  *threads_started = s->n_threads_started;
  return 0;
}

/* gRPC's own shutdown is deferred until the calls in flight are done: from
 * the moment it starts, calls arriving on open connections are cancelled
 * (CANCELLED, which clients do not retry) rather than refused. */
void scps_server_shutdown(scps_server *s) {
  if (atomic_load(&s->draining)) return;
  /* Pushes stay open first (with somewhere to save to): set before draining,
   * so no push arriving meanwhile is refused. */
  if (s->opts.drain_quiet_ms > 0 && s->opts.checkpoint_dir) {
    atomic_store(&s->last_push_ns, scps_clock_ns());
    atomic_store(&s->pushes_open, 1);
  }
  if (atomic_exchange(&s->draining, 1)) return;
  if (atomic_load(&s->active) == 0 && !atomic_load(&s->pushes_open)) stop_grpc(s);
}

void scps_server_cancel_all(scps_server *s) {
  atomic_store(&s->pushes_open, 0);
  atomic_store(&s->cancelling, 1);
  stop_grpc(s);
  grpc_server_cancel_all_calls(s->server);
  if (s->budget) scps_budget_refuse_waiting(s->budget);
}

int64_t scps_server_push_quiet_ms(scps_server *s) {
  if (!atomic_load(&s->pushes_open)) return -1;
  return (scps_clock_ns() - atomic_load(&s->last_push_ns)) / 1000000;
}

void scps_server_close_pushes(scps_server *s) {
  atomic_store(&s->pushes_open, 0);
  if (atomic_load(&s->draining) && atomic_load(&s->active) == 0) stop_grpc(s);
}

int scps_server_save_held(scps_server *s, int64_t *step, char *path, size_t cap, scps_error *err) {
  return scps_saver_save_held(s, step, path, cap, err);
}

/* Completes what is left on a queue without a thread: requests the server
 * never matched and the shutdown tag. Returns once the queue is shut down. */
static void drain_queue(grpc_completion_queue *cq) {
  for (;;) {
    grpc_event ev = grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
    if (ev.type == GRPC_QUEUE_SHUTDOWN) return;
    scps_tag *t = ev.tag;
    if (ev.type == GRPC_OP_COMPLETE && t->kind == TAG_NEW && !ev.success) {
      t->call->call = NULL;
      call_free(t->call);
    }
  }
}

void scps_server_destroy(scps_server *s) {
  if (!s) return;
  if (s->server) {
    if (!s->n_threads_started) {
      /* Never served (bind or start failed): shut down here, no thread waits. */
      scps_server_shutdown(s);
      scps_server_close_pushes(s);
      grpc_server_cancel_all_calls(s->server);
    }
    /* Every call has finished (the shutdown tag came), so no job is left in
     * the pipeline that could still start a batch on a call, and no
     * ApplyGradients is parked; a save of the timer's may still run. */
    scps_saver_free(s);
    scps_pipeline_destroy(s->pipeline);
    s->pipeline = NULL;
    for (int i = 0; i < s->opts.cq_threads; i++) grpc_completion_queue_shutdown(s->cqs[i]);
    for (int i = 0; i < s->n_threads_started; i++) pthread_join(s->threads[i], NULL);
    if (!s->n_threads_started)
      for (int i = 0; i < s->opts.cq_threads; i++) drain_queue(s->cqs[i]);
    grpc_server_destroy(s->server);
    for (int i = 0; i < s->opts.cq_threads; i++) grpc_completion_queue_destroy(s->cqs[i]);
    grpc_shutdown();
  }
  free(s->cqs);
  free(s->threads);
  scps_saver_free(s);
  scps_pipeline_destroy(s->pipeline);
  scps_limits_free(s);
  scps_handlers_free(s);
  scps_engine_destroy(s->engine);
  scps_layout_destroy(s->layout);
  free(s->tables);
  free(s->features);
  scps_auth_free(&s->auth);
  free(s);
}
