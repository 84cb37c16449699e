/* The gRPC front of a server: completion-queue threads, posted requests,
 * admission of each request to the memory budget, draining and shutdown.
 * Methods run through the dispatch table it is given; it names none. */
#include "scps_transport.h"

#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "scps_grpc_args.h"
#include "scps_limits.h"

/* Requests kept posted per completion queue: enough that a burst of calls
 * never waits for a re-arm. */
#define POSTED_DATA 16
#define POSTED_SMALL 2

/* Health and Stats requests up to this size are counted in the memory
 * budget without waiting for room. */
#define SCPS_FREE_PASS_BYTES ((size_t)4 << 20)

/* grpc.health.v1 Check, which any caller may make, only up to this many
 * bytes of request (a service name); a larger one waits for room like any
 * other request. */
#define SCPS_FREE_PASS_CHECK_BYTES ((size_t)4 << 10)

/* The methods that watch a server (Health, Stats, grpc.health.v1 Check):
 * served while it drains and not counted among the calls a drain waits for. */
static bool watches(int method) {
  return method == SCPS_M_HEALTH || method == SCPS_M_STATS || method == SCPS_M_GRPC_HEALTH_CHECK;
}

/* Whether a call's request of len bytes is counted in the budget without
 * waiting, so that a server out of memory can be watched. */
static bool free_pass(const scps_call *c, size_t len) {
  if (!watches(c->method) || c->wait.need > SCPS_FREE_PASS_BYTES) return false;
  return c->method != SCPS_M_GRPC_HEALTH_CHECK || len <= SCPS_FREE_PASS_CHECK_BYTES;
}

/* Hands the shutdown to gRPC: it closes the listeners, sends GOAWAY and
 * posts the shutdown tag once every call and connection is gone. Once only. */
static void stop_grpc(scps_server *s) {
  if (atomic_exchange(&s->grpc_stopping, 1)) return;
  grpc_server_shutdown_and_notify(s->server, s->cqs[0], &s->shutdown_tag);
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
    scps__call_free(c);
  }
}

/* Runs the method of a call admitted to the budget, through the dispatch
 * table the server was created with. */
static void dispatch(scps_call *c) {
  scps_call_handler h = c->method < SCPS_M_COUNT ? c->srv->handlers[c->method] : NULL;
  if (h) h(c);
  else scps__call_finish(c, GRPC_STATUS_UNIMPLEMENTED, "unknown method", NULL, 0);
}

/* A call admitted to the budget for its request (or refused): runs the
 * method, on the thread that admitted it. */
static void request_admitted(scps_budget_waiter *w, bool admitted, size_t in_use, size_t limit) {
  scps_call *c = scps__call_of_wait(w);
  if (admitted) {
    c->charged = w->need;
    dispatch(c);
  } else {
    char msg[512];
    scps__limits_refusal(c, "its request message and its decoding", w->need, in_use, limit, msg, sizeof msg);
    scps__call_finish(c, GRPC_STATUS_RESOURCE_EXHAUSTED, msg, NULL, 0);
  }
  scps__call_unref(c); /* the reference held while it waited */
}

/* The request has arrived (TAG_RECV): its bytes are counted in the budget
 * (waiting for room if need be) before the method runs. Health, Stats and
 * Check are counted without waiting, so a server out of memory can be
 * watched. */
static void on_recv(scps_call *c, int ok) {
  scps_server *s = c->srv;
  if (scps__call_unwatch(c) || !ok) {
    /* Cancelled, by the transfer deadline or the client: nothing to answer. */
    scps__call_unref(c); /* the send that is never started */
    scps__call_unref(c); /* this tag's */
    return;
  }
  const size_t len = c->payload ? grpc_byte_buffer_length(c->payload) : 0;
  c->wait.need = scps__call_request_memory(c, len);
  c->wait.deadline_ns = scps__limits_wait_deadline(c);
  c->wait.done = request_admitted;
  atomic_fetch_add(&c->refs, 1); /* until request_admitted */
  if (free_pass(c, len)) {
    scps__budget_charge(s->budget, c->wait.need);
    request_admitted(&c->wait, true, 0, 0);
  } else {
    scps__budget_wait(s->budget, &c->wait);
  }
  scps__call_unref(c);
}

/* Receives the request message, due within --transfer-timeout. */
static void receive_request(scps_call *c) {
  grpc_op op;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_RECV_MESSAGE;
  op.data.recv_message.recv_message = &c->payload;
  atomic_fetch_add(&c->refs, 1); /* the receive tag's */
  scps__call_watch(c, SCPS_WATCH_ARRIVING);
  if (grpc_call_start_batch(c->call, &op, 1, &c->t_recv, NULL) != GRPC_CALL_OK) {
    scps__call_unwatch(c);
    scps__call_unref(c);
    scps__call_finish(c, GRPC_STATUS_INTERNAL, "cannot receive the request message", NULL, 0);
  }
}

static void on_new_call(scps_call *c, int ok) {
  scps_server *s = c->srv;
  if (!ok) { /* server shutting down: the request was never matched */
    c->call = NULL;
    scps__call_free(c);
    return;
  }
  if (!atomic_load(&s->grpc_stopping)) post_request(s, c->cq, c->method);
  /* While draining, Health (which answers DRAINING), Check (NOT_SERVING)
   * and Stats are served; anything else is refused with the status clients
   * retry elsewhere. A call that slips in while the drain starts is simply
   * served. */
  const bool drain_push = c->method == SCPS_M_APPLY_GRADIENTS && atomic_load(&s->pushes_open);
  const bool watch = watches(c->method);
  bool refuse = atomic_load(&s->draining) && !watch && !drain_push;
  if (!refuse && !watch) {
    c->counted = 1;
    atomic_fetch_add(&s->active, 1);
  }
  c->t0_ns = scps__clock_ns();
  if (c->counted) scps__call_note_activity(s);
  atomic_store(&c->refs, 2);
  grpc_op op;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
  op.data.recv_close_on_server.cancelled = &c->cancelled;
  if (grpc_call_start_batch(c->call, &op, 1, &c->t_close, NULL) != GRPC_CALL_OK) scps__call_unref(c);
  if (!scps__call_authorize(c)) return;
  /* Only a push the caller may make keeps the drain's quiet period from
   * ending: a caller without a token cannot hold a stopping server. */
  if (drain_push) atomic_store(&s->last_push_ns, scps__clock_ns());
  if (refuse) {
    char msg[128];
    snprintf(msg, sizeof msg, "process %d is shutting down: finishing the calls in flight, taking no new ones",
             s->opts.process_index);
    scps__call_finish(c, GRPC_STATUS_UNAVAILABLE, msg, NULL, 0);
    return;
  }
  if (c->method == SCPS_M_UNKNOWN) {
    char msg[512];
    char *m = grpc_slice_to_c_string(c->details.method);
    snprintf(msg, sizeof msg, "method %s is not served here; scps-server serves %s and %s/Check", m,
             SCPS_METHOD_SERVICE_SCPS, SCPS_METHOD_SERVICE_GRPC_HEALTH);
    gpr_free(m);
    scps__call_finish(c, GRPC_STATUS_UNIMPLEMENTED, msg, NULL, 0);
    return;
  }
  receive_request(c);
}

static void *cq_main(void *arg) {
  scps_call *self = arg; /* a carrier for (server, cq index) */
  scps_server *s = self->srv;
  grpc_completion_queue *cq = s->cqs[self->cq];
  free(self);
  prctl(PR_SET_NAME, "scps-cq"); /* per-thread CPU time tells it from the main thread */
  for (;;) {
    grpc_event ev = grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
    if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
    if (ev.type != GRPC_OP_COMPLETE) continue;
    scps_tag *t = ev.tag;
    switch (t->kind) {
    case TAG_NEW: on_new_call(t->call, ev.success); break;
    case TAG_CLOSE: scps__call_unref(t->call); break;
    case TAG_SEND:
      scps__call_unwatch(t->call);
      scps__call_unref(t->call);
      break;
    case TAG_RECV: on_recv(t->call, ev.success); break;
    case TAG_SHUTDOWN:
      if (s->on_stopped) s->on_stopped(s->on_stopped_ud);
      break;
    }
  }
  return NULL;
}

/* Fails at once, before the tables are initialized (seconds to minutes for
 * large ones), when another process already listens on a host:port or
 * [v6]:port address; gRPC binds it only once they are ready. Anything this
 * cannot parse or resolve is left to gRPC. */
int scps__transport_probe(const char *listen, scps_error *err) {
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
int scps__transport_create(scps_server *s, const scps_call_handler *handlers, scps_error *err) {
  const scps_server_options *o = &s->opts;
  s->handlers = handlers;
  s->calls_done = stop_grpc;
  s->shutdown_tag = (scps_tag){NULL, TAG_SHUTDOWN};
  s->cqs = calloc((size_t)o->cq_threads, sizeof *s->cqs);
  s->threads = calloc((size_t)o->cq_threads, sizeof *s->threads);
  if (!s->cqs || !s->threads) return scps_error_set(err, SCPS_ENOMEM, "out of memory");
  grpc_init();
  grpc_arg args[7 + SCPS_LIMITS_ARGS];
  int n_args = 0;
  args[n_args++] = scps__grpc_args_int(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, (int)o->max_message_bytes);
  args[n_args++] = scps__grpc_args_int(GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, -1);
  /* gRPC lets a second server bind the same port by default; a typo in a
   * cluster's addresses must fail loudly instead. */
  args[n_args++] = scps__grpc_args_int(GRPC_ARG_ALLOW_REUSEPORT, 0);
  /* Gradient pushes are megabytes. */
  n_args += scps__grpc_args_bulk(args + n_args);
  /* Clients' keepalive pings (scps_grpc_args.h) are not abuse. */
  n_args += scps__grpc_args_keepalive_server(args + n_args);
  n_args += scps__limits_channel_args(s, args + n_args);
  grpc_channel_args ca = {(size_t)n_args, args};
  s->server = grpc_server_create(&ca, NULL);
  if (s->quota) grpc_resource_quota_unref(s->quota); /* the server holds its own */
  s->quota = NULL;
  for (int m = 0; m < SCPS_M_COUNT; m++)
    s->handles[m] = grpc_server_register_method(s->server, scps__method_path(m), NULL, GRPC_SRM_PAYLOAD_NONE, 0);
  for (int i = 0; i < o->cq_threads; i++) {
    s->cqs[i] = grpc_completion_queue_create_for_next(NULL);
    grpc_server_register_completion_queue(s->server, s->cqs[i], NULL);
  }
  grpc_server_credentials *creds = scps__auth_server_credentials(&s->auth);
  s->port = grpc_server_add_http2_port(s->server, o->listen, creds);
  grpc_server_credentials_release(creds);
  if (s->port == 0)
    return scps_error_set(err, SCPS_EIO, "cannot listen on '%s' (address in use or malformed?)", o->listen);
  return 0;
}

int scps__transport_start(scps_server *s, void (*on_stopped)(void *), void *ud, int *threads_started,
                         scps_error *err) {
  s->on_stopped = on_stopped;
  s->on_stopped_ud = ud;
  s->start_time = (double)scps__clock_ns() * 1e-9;
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
void scps__transport_shutdown(scps_server *s) {
  if (atomic_load(&s->draining)) return;
  /* Pushes stay open first (with somewhere to save to): set before draining,
   * so no push arriving meanwhile is refused. */
  if (s->opts.drain_quiet_ms > 0 && s->opts.checkpoint_dir) {
    atomic_store(&s->last_push_ns, scps__clock_ns());
    atomic_store(&s->pushes_open, 1);
  }
  if (atomic_exchange(&s->draining, 1)) return;
  if (atomic_load(&s->active) == 0 && !atomic_load(&s->pushes_open)) stop_grpc(s);
}

void scps__transport_cancel_all(scps_server *s) {
  atomic_store(&s->pushes_open, 0);
  atomic_store(&s->cancelling, 1);
  stop_grpc(s);
  grpc_server_cancel_all_calls(s->server);
  if (s->budget) scps__budget_refuse_waiting(s->budget);
}

int64_t scps__transport_push_quiet_ms(scps_server *s) {
  if (!atomic_load(&s->pushes_open)) return -1;
  return (scps__clock_ns() - atomic_load(&s->last_push_ns)) / 1000000;
}

void scps__transport_close_pushes(scps_server *s) {
  atomic_store(&s->pushes_open, 0);
  if (atomic_load(&s->draining) && atomic_load(&s->active) == 0) stop_grpc(s);
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
      scps__call_free(t->call);
    }
  }
}

void scps__transport_quiesce(scps_server *s) {
  if (!s->server || s->n_threads_started) return;
  /* Never served (bind or start failed): shut down here, no thread waits. */
  scps__transport_shutdown(s);
  scps__transport_close_pushes(s);
  grpc_server_cancel_all_calls(s->server);
}

void scps__transport_destroy(scps_server *s) {
  if (s->server) {
    for (int i = 0; i < s->opts.cq_threads; i++) grpc_completion_queue_shutdown(s->cqs[i]);
    for (int i = 0; i < s->n_threads_started; i++) pthread_join(s->threads[i], NULL);
    if (!s->n_threads_started)
      for (int i = 0; i < s->opts.cq_threads; i++) drain_queue(s->cqs[i]);
    grpc_server_destroy(s->server);
    for (int i = 0; i < s->opts.cq_threads; i++) grpc_completion_queue_destroy(s->cqs[i]);
    grpc_shutdown();
    s->server = NULL;
  }
  free(s->cqs);
  free(s->threads);
  s->cqs = NULL;
  s->threads = NULL;
}
