/* The call object and how every method answers: reading and decoding the
 * request within its budget, the view and role checks, the final send with
 * its counters, a call's references, and the transfer watch. */
#include "scps_call.h"

#include <grpc/byte_buffer_reader.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scps_scratch.h"
#include "scps_shm.h"

/* A method any caller may call, with no token or an unknown one: the
 * standard health Check, as orchestrators' probes carry no token; it reads
 * only whether the server serves, and is answered at once. */
#define ROLE_ANYONE (-1)

/* The least role that may call each method when the server has a
 * --token-file (deploy/SECURITY.md). A method missing here is admin-only:
 * a new method is listed only if trainers (or anyone) need it. */
static const int method_role[SCPS_M_COUNT] = {
    [SCPS_M_GET_CONFIG] = SCPS_ROLE_TRAINING, [SCPS_M_LOOKUP] = SCPS_ROLE_TRAINING,
    [SCPS_M_APPLY_GRADIENTS] = SCPS_ROLE_TRAINING, [SCPS_M_STATS] = SCPS_ROLE_TRAINING,
    [SCPS_M_HEALTH] = SCPS_ROLE_TRAINING, [SCPS_M_CHECKPOINT] = SCPS_ROLE_ADMIN,
    [SCPS_M_TOPK] = SCPS_ROLE_TRAINING,
    [SCPS_M_GRPC_HEALTH_CHECK] = ROLE_ANYONE,
};

static scps_role least_role(int method) {
  if (method_role[method] == ROLE_ANYONE) return SCPS_ROLE_NONE;
  return method_role[method] != SCPS_ROLE_NONE ? (scps_role)method_role[method] : SCPS_ROLE_ADMIN;
}

bool scps__call_may(const scps_call *c, int method) { return c->role >= least_role(method); }

void scps__call_free(scps_call *c) {
  if (c->call) grpc_call_unref(c->call);
  grpc_metadata_array_destroy(&c->md);
  if (c->method == SCPS_M_UNKNOWN) grpc_call_details_destroy(&c->details);
  if (c->payload) grpc_byte_buffer_destroy(c->payload);
  if (c->response) grpc_byte_buffer_destroy(c->response);
  if (c->request) protobuf_c_message_free_unpacked(c->request, NULL);
  scps__request_free(&c->req);
  free(c->stacks);
  free(c->limit_mem);
  if (c->scratch) scps__scratch_give(c->srv->scratch, c->scratch, c->scratch_cap);
  if (c->charged) scps__budget_release(c->srv->budget, c->charged);
  scps__slices_free(&c->shm_msg);
  free(c->topk);
  if (c->shm_seg) scps__shm_release(c->srv->shm, c->shm_seg);
  free(c);
}

void scps__call_release(scps_call *c) {
  scps_server *s = c->srv;
  bool counted = c->counted;
  scps__call_free(c);
  if (counted) scps__call_note_activity(s);
  if (counted && atomic_fetch_sub(&s->active, 1) == 1 && atomic_load(&s->draining) && !atomic_load(&s->pushes_open))
    s->calls_done(s);
}

int scps__call_read_payload(scps_call *c, uint8_t **data, size_t *len) {
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

/* The latency buckets' upper bounds (the last bucket has none). */
static const int64_t latency_le_ns[SCPS_LATENCY_BUCKETS - 1] = {
    500000, 1000000, 2500000, 5000000, 10000000, 25000000, 50000000,
    100000000, 250000000, 500000000, 1000000000, 2500000000, 5000000000, 10000000000};

double scps__call_latency_bound(int i) { return (double)latency_le_ns[i] * 1e-9; }

static int latency_bucket(int64_t ns) {
  int i = 0;
  while (i < SCPS_LATENCY_BUCKETS - 1 && ns > latency_le_ns[i]) i++;
  return i;
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
    int64_t ns = scps__clock_ns() - c->t0_ns;
    atomic_fetch_add_explicit(&m->calls, 1, memory_order_relaxed);
    if (status != GRPC_STATUS_OK) atomic_fetch_add_explicit(&m->errors, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&m->codes[(unsigned)status < SCPS_STATUS_CODES ? status : GRPC_STATUS_UNKNOWN], 1,
                              memory_order_relaxed);
    atomic_fetch_add_explicit(&m->bytes_in, (long long)c->bytes_in, memory_order_relaxed);
    atomic_fetch_add_explicit(&m->bytes_out, (long long)(c->response ? len : 0), memory_order_relaxed);
    atomic_fetch_add_explicit(&m->ns, (long long)ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&m->latency[latency_bucket(ns)], 1, memory_order_relaxed);
  }
  /* The call is freed by its completion-queue thread after the send tag; a
   * release on refs pairs with that thread's acq_rel decrement, making the
   * hand-off through gRPC's (uninstrumented) queue visible to ThreadSanitizer.
   * Every read of c must come before it, c->call included. */
  grpc_call *call = c->call;
  if (c->response) scps__call_watch(c, SCPS_WATCH_SENDING);
  atomic_fetch_add_explicit(&c->refs, 0, memory_order_release);
  grpc_call_error e = grpc_call_start_batch(call, ops, (size_t)n, &c->t_send, NULL);
  grpc_slice_unref(msg);
  if (e != GRPC_CALL_OK) {
    scps__call_unwatch(c);
    scps__call_unref(c); /* the send tag will never come */
  }
}

void scps__call_finish(scps_call *c, grpc_status_code status, const char *details, const uint8_t *response,
                      size_t len) {
  if (status == GRPC_STATUS_OK && response) {
    grpc_slice sl = grpc_slice_malloc(len);
    memcpy(GRPC_SLICE_START_PTR(sl), response, len);
    c->response = grpc_raw_byte_buffer_create(&sl, 1);
    grpc_slice_unref(sl);
  }
  send_final(c, status, details, len);
}

void scps__call_finish_packed(scps_call *c, const ProtobufCMessage *msg) {
  size_t len = protobuf_c_message_get_packed_size(msg);
  grpc_slice sl = grpc_slice_malloc(len);
  protobuf_c_message_pack(msg, GRPC_SLICE_START_PTR(sl));
  c->response = grpc_raw_byte_buffer_create(&sl, 1);
  grpc_slice_unref(sl);
  send_final(c, GRPC_STATUS_OK, "", len);
}

void scps__call_finish_buffer(scps_call *c, grpc_byte_buffer *response, size_t len) {
  c->response = response;
  send_final(c, GRPC_STATUS_OK, "", len);
}

/* Checks the caller's bearer token (every call, before anything else
 * answers it) and records its role in c; answers the call and returns false
 * when it may not go on. Neither answer tells which tokens exist. */
bool scps__call_authorize(scps_call *c) {
  c->role = scps__auth_role(&c->srv->auth, &c->md);
  if (c->method != SCPS_M_UNKNOWN && scps__call_may(c, c->method)) return true;
  if (c->role == SCPS_ROLE_NONE) {
    scps__call_finish(c, GRPC_STATUS_UNAUTHENTICATED,
                     "no valid bearer token: send metadata 'authorization: Bearer TOKEN' with a token of the "
                     "server's --token-file", NULL, 0);
    return false;
  }
  if (c->method == SCPS_M_UNKNOWN) return true;
  char msg[256];
  snprintf(msg, sizeof msg, "%s needs the %s role; this caller's token has the %s role", scps__method_name(c->method),
           scps__role_name(least_role(c->method)), scps__role_name(c->role));
  scps__call_finish(c, GRPC_STATUS_PERMISSION_DENIED, msg, NULL, 0);
  return false;
}

/* protobuf-c's structs take about 10x a message's bytes (a ClusterSpec of
 * 65536 tables: 4.2 MB on the wire, 42.6 MB decoded), but empty
 * sub-messages or unknown fields 80x and more: decoding stops past this
 * many bytes per byte received (plus a floor), and past UNPACK_MAX. */
#define UNPACK_PER_BYTE 16
#define UNPACK_FLOOR ((size_t)1 << 20)
#define UNPACK_MAX ((size_t)256 << 20)

typedef struct unpack_budget {
  size_t left;
  bool exceeded;
} unpack_budget;

static void *budget_alloc(void *ud, size_t n) {
  unpack_budget *b = ud;
  if (n > b->left) {
    b->exceeded = true;
    return NULL;
  }
  b->left -= n;
  return malloc(n);
}

static void budget_free(void *ud, void *p) {
  (void)ud;
  free(p);
}

/* The most decoding a request of len bytes may allocate. */
static size_t unpack_limit(size_t len) {
  return len < (UNPACK_MAX - UNPACK_FLOOR) / UNPACK_PER_BYTE ? UNPACK_FLOOR + UNPACK_PER_BYTE * len : UNPACK_MAX;
}

size_t scps__call_request_memory(const scps_call *c, size_t len) {
  /* scps__request_decode copies every array but the gradients once. */
  if (c->method == SCPS_M_LOOKUP || c->method == SCPS_M_APPLY_GRADIENTS) return 2 * len;
  /* scps__call_read_payload's copy, then protobuf-c's structs. */
  return len + unpack_limit(len);
}

ProtobufCMessage *scps__call_read_request(scps_call *c, const ProtobufCMessageDescriptor *desc) {
  uint8_t *data;
  size_t len;
  char msg[256];
  int rc = scps__call_read_payload(c, &data, &len);
  if (rc) {
    snprintf(msg, sizeof msg, "%s: no request message received", scps__method_name(c->method));
    scps__call_finish(c, GRPC_STATUS_INVALID_ARGUMENT, msg, NULL, 0);
    return NULL;
  }
  size_t budget = unpack_limit(len);
  unpack_budget b = {budget, false};
  ProtobufCAllocator alloc = {budget_alloc, budget_free, &b};
  /* What it allocates is plain malloc memory: freed later with the default
   * allocator, as every other request. */
  ProtobufCMessage *m = protobuf_c_message_unpack(desc, &alloc, len, data);
  free(data);
  if (!m && b.exceeded) {
    snprintf(msg, sizeof msg, "%s: request of %zu bytes needs more than %zu bytes of memory to decode (at most %dx "
             "its size plus 1 MiB, and 256 MiB)", scps__method_name(c->method), len, budget, UNPACK_PER_BYTE);
    scps__call_finish(c, GRPC_STATUS_RESOURCE_EXHAUSTED, msg, NULL, 0);
  } else if (!m) {
    snprintf(msg, sizeof msg, "%s: request of %zu bytes is not a valid %s message", scps__method_name(c->method),
             len, desc->name);
    scps__call_finish(c, GRPC_STATUS_INVALID_ARGUMENT, msg, NULL, 0);
  }
  c->request = m;
  return m;
}

static void hex12(const uint8_t *d, size_t n, char out[13]) {
  static const char digits[] = "0123456789abcdef";
  size_t k = 0;
  for (size_t i = 0; i < n && k < 12; i++) {
    out[k++] = digits[d[i] >> 4];
    out[k++] = digits[d[i] & 15];
  }
  out[k] = '\0';
}

grpc_status_code scps__call_check_view(scps_call *c, const uint8_t *fp, size_t fp_len, int32_t process_index,
                                      char *msg, size_t len) {
  scps_server *s = c->srv;
  if (fp_len != sizeof s->fingerprint || memcmp(fp, s->fingerprint, sizeof s->fingerprint)) {
    char a[13], b[13];
    hex12(fp, fp_len, a);
    hex12(s->fingerprint, sizeof s->fingerprint, b);
    snprintf(msg, len,
             "config_fingerprint '%s' is not this cluster's '%s': the client was built for another "
             "configuration; call GetConfig and reconnect",
             a, b);
    return GRPC_STATUS_FAILED_PRECONDITION;
  }
  if (process_index != s->opts.process_index) {
    snprintf(msg, len, "process_index %d: this is process %d; list the servers in process-index order",
             process_index, s->opts.process_index);
    return GRPC_STATUS_FAILED_PRECONDITION;
  }
  return GRPC_STATUS_OK;
}

/* ------------------------------------------------------ transfer watch */

/* Cancels the calls of one watch list whose deadline has passed. */
static void sweep(scps_server *s, int list, int64_t now) {
  scps_call *due = NULL;
  pthread_mutex_lock(&s->watch_mu);
  while (s->watch[list].head && s->watch[list].head->watch_deadline_ns <= now) {
    scps_call *c = s->watch[list].head;
    s->watch[list].head = c->watch_next;
    if (c->watch_next) c->watch_next->watch_prev = NULL;
    else s->watch[list].tail = NULL;
    c->watch_list = 0;
    c->watch_expired = true;
    /* Kept alive past the lock: its pending tag's reference may go. */
    atomic_fetch_add(&c->refs, 1);
    c->watch_next = due;
    due = c;
  }
  pthread_mutex_unlock(&s->watch_mu);
  while (due) {
    scps_call *c = due;
    due = c->watch_next;
    c->watch_next = NULL;
    char msg[200];
    if (list == SCPS_WATCH_ARRIVING) {
      snprintf(msg, sizeof msg, "%s: request message not received within %d s of its headers (--transfer-timeout)",
               c->method < SCPS_M_COUNT ? scps__method_name(c->method) : "call", s->opts.transfer_timeout_s);
      atomic_fetch_add(&s->requests_timed_out, 1);
    } else {
      snprintf(msg, sizeof msg, "%s: answer not taken by the client within %d s (--transfer-timeout)",
               c->method < SCPS_M_COUNT ? scps__method_name(c->method) : "call", s->opts.transfer_timeout_s);
      atomic_fetch_add(&s->answers_timed_out, 1);
    }
    grpc_call_cancel_with_status(c->call, GRPC_STATUS_DEADLINE_EXCEEDED, msg, NULL);
    scps__call_unref(c);
  }
}


void scps__call_sweep(scps_server *s, int64_t now) {
  sweep(s, SCPS_WATCH_ARRIVING, now);
  sweep(s, SCPS_WATCH_SENDING, now);
}

void scps__call_watch(scps_call *c, int list) {
  scps_server *s = c->srv;
  c->watch_deadline_ns = scps__clock_ns() + (int64_t)s->opts.transfer_timeout_s * 1000000000;
  c->watch_expired = false;
  pthread_mutex_lock(&s->watch_mu);
  c->watch_list = list;
  c->watch_next = NULL;
  c->watch_prev = s->watch[list].tail;
  if (c->watch_prev) c->watch_prev->watch_next = c;
  else s->watch[list].head = c;
  s->watch[list].tail = c;
  pthread_mutex_unlock(&s->watch_mu);
}

bool scps__call_unwatch(scps_call *c) {
  scps_server *s = c->srv;
  pthread_mutex_lock(&s->watch_mu);
  int list = c->watch_list;
  if (list) {
    if (c->watch_prev) c->watch_prev->watch_next = c->watch_next;
    else s->watch[list].head = c->watch_next;
    if (c->watch_next) c->watch_next->watch_prev = c->watch_prev;
    else s->watch[list].tail = c->watch_prev;
    c->watch_prev = c->watch_next = NULL;
    c->watch_list = 0;
  }
  bool expired = c->watch_expired;
  pthread_mutex_unlock(&s->watch_mu);
  return expired;
}

void scps__call_note_activity(scps_server *s) {
  atomic_store(&s->last_call_ns, scps__clock_ns());
  atomic_store(&s->trim_due, true);
}
