/* What Lookup and ApplyGradients share before their own work: decoding the
 * request, checking each stack's partitions against the layout into per
 * SparseCore COO views, and reserving scratch in the memory budget. */
#include "scps_cmd_data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scps_budget.h"
#include "scps_limits.h"
#include "scps_shm.h"
#include "scps_status.h"

/* The stack a StackPartitions names (into cs->stack) and the number of
 * its sc_offsets. */
grpc_status_code scps__cmd_data_check_head(const scps_call *c, const scps_req_partitions *sp, const char *field,
                                          call_stack *cs, char *msg, size_t len) {
  int st = sp->stack ? scps__layout_find_stack(c->srv->layout, sp->stack) : -1;
  if (st < 0) {
    snprintf(msg, len, "%s.stack: unknown stack '%s' (GetConfig lists the stacks)", field, sp->stack ? sp->stack : "");
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  cs->stack = st;
  if (sp->n_sc_offsets != (size_t)c->srv->S + 1) {
    snprintf(msg, len, "%s.sc_offsets: %zu entries, need sc_per_process + 1 = %d", field, sp->n_sc_offsets,
             c->srv->S + 1);
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  return GRPC_STATUS_OK;
}

/* sc_offsets: S + 1 of them, from 0 to n (of `what`: entries or rows),
 * never falling. All are checked before any SparseCore's view is built: an
 * offset beyond n followed by a smaller one would otherwise let that view
 * run past the arrays. */
grpc_status_code scps__cmd_data_check_offsets(const scps_call *c, const scps_req_partitions *sp, size_t n,
                                             const char *what, const char *field, char *msg, size_t len) {
  const int32_t S = c->srv->S;
  if (sp->sc_offsets[0] != 0 || sp->sc_offsets[S] != n) {
    snprintf(msg, len, "%s.sc_offsets: must start at 0 and end at the %s count %zu (got %u .. %u)", field, what, n,
             sp->sc_offsets[0], sp->sc_offsets[S]);
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  for (int k = 0; k < S; k++)
    if (sp->sc_offsets[k + 1] < sp->sc_offsets[k]) {
      snprintf(msg, len, "%s.sc_offsets[%d] = %u is below sc_offsets[%d] = %u", field, k + 1,
               sp->sc_offsets[k + 1], k, sp->sc_offsets[k]);
      return GRPC_STATUS_INVALID_ARGUMENT;
    }
  return GRPC_STATUS_OK;
}

/* Checks one StackPartitions against the layout and turns it into per
 * SparseCore COO views, its gain_exceptions expanded into sp's gains.
 * Returns a gRPC status; msg names field and value. */
grpc_status_code scps__cmd_data_check_partitions(scps_call *c, scps_req_partitions *sp, const char *field,
                                                call_stack *cs, char *msg, size_t len) {
  scps_server *s = c->srv;
  grpc_status_code bad = scps__cmd_data_check_head(c, sp, field, cs, msg, len);
  if (bad != GRPC_STATUS_OK) return bad;
  const int st = cs->stack;
  size_t n = sp->rows.len / 4;
  if (sp->rows.len % 4) {
    snprintf(msg, len, "%s.rows: %zu bytes, not 4 bytes per entry", field, sp->rows.len);
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  char why[160];
  int rc = scps__request_expand_samples(sp, n, why, sizeof why);
  if (rc) {
    snprintf(msg, len, "%s: %s", field, why);
    return scps__status_from_error(rc);
  }
  if (sp->samples.len != sp->rows.len || (sp->gains.len && sp->gains.len != sp->rows.len)) {
    snprintf(msg, len,
             "%s: rows, samples and gains hold %zu, %zu and %zu bytes; each needs 4 bytes per entry and all must "
             "match (or gains empty: every gain 1.0 but those in gain_exceptions)",
             field, sp->rows.len, sp->samples.len, sp->gains.len);
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  rc = scps__request_expand_gains(sp, n, why, sizeof why);
  if (rc) {
    snprintf(msg, len, "%s: %s", field, why);
    return scps__status_from_error(rc);
  }
  bad = scps__cmd_data_check_offsets(c, sp, n, "entry", field, msg, len);
  if (bad != GRPC_STATUS_OK) return bad;
  const uint32_t *rows = (const uint32_t *)(const void *)sp->rows.data;
  const uint32_t *samples = (const uint32_t *)(const void *)sp->samples.data;
  const float *gains = sp->gains.len ? (const float *)(const void *)sp->gains.data : NULL;
  for (int k = 0; k < s->S; k++) {
    uint32_t a = sp->sc_offsets[k], b = sp->sc_offsets[k + 1];
    cs->coo[k] = (scps_coo){b - a, rows + a, samples + a, gains ? gains + a : NULL};
    scps_error err;
    if (scps__engine_check_coo(s->engine, st, k, &cs->coo[k], &err)) {
      snprintf(msg, len, "%s: %s", field, err.msg);
      return GRPC_STATUS_INVALID_ARGUMENT;
    }
  }
  return GRPC_STATUS_OK;
}

int scps__cmd_data_alloc_stacks(scps_call *c, size_t n) {
  c->n_stacks = (int)n;
  c->stacks = calloc(n ? n : 1, sizeof *c->stacks);
  return c->stacks ? 0 : SCPS_ENOMEM;
}

grpc_status_code scps__cmd_data_check_format(scps_call *c, int format, const scps_req_exmy *x, const char *field,
                                            char *msg, size_t len) {
  scps_error err;
  if (scps__wirefmt_from_request(format, x, field, &c->wire, &err)) {
    snprintf(msg, len, "%s", err.msg);
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  return GRPC_STATUS_OK;
}

/* A LookupRequest that only names where the request lies
 * (request_placement): the request copied out of the client's segment
 * (so a client rewriting it meanwhile changes only its own request) and
 * decoded into c->req in place of the envelope. Returns OK, or the status
 * with msg. */
static grpc_status_code read_placed_request(scps_call *c, scps_request_kind kind, char *msg, size_t len) {
  scps_server *s = c->srv;
  const scps_req_range rp = c->req.request_placement;
  if (c->req.other_fields) {
    snprintf(msg, len, "request_placement: set together with other fields of the request (the request's fields "
             "all lie in the segment)");
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  if (rp.length > (uint64_t)s->opts.max_message_bytes) {
    snprintf(msg, len, "request_placement: length %llu over the largest request this process takes, %lld bytes "
             "(--max-message-mb)", (unsigned long long)rp.length, (long long)s->opts.max_message_bytes);
    return GRPC_STATUS_RESOURCE_EXHAUSTED;
  }
  /* What the same request would have been charged on the connection (its
   * copy and its decoding), reserved now or not at all: on the connection
   * it waits its turn for room, so that is where it goes instead. */
  const size_t need = scps__call_request_memory(c, (size_t)rp.length);
  if (!scps__budget_reserve(s->budget, need)) {
    snprintf(msg, len, "request_placement: no room in the memory budget now for a %llu-byte request; nothing was "
             "looked up: send it on the connection, where it waits for room", (unsigned long long)rp.length);
    return GRPC_STATUS_FAILED_PRECONDITION;
  }
  c->charged += need; /* released with the call's */
  uint8_t *copy = malloc(rp.length ? (size_t)rp.length : 1);
  if (!copy) {
    snprintf(msg, len, "request_placement: out of memory for a %llu-byte request", (unsigned long long)rp.length);
    return GRPC_STATUS_RESOURCE_EXHAUSTED;
  }
  if (!s->shm || !rp.length ||
      scps__shm_copy_out(s->shm, rp.segment, rp.segment_len, rp.offset, rp.length, copy)) {
    free(copy);
    snprintf(msg, len, "request_placement: no segment attached to this process holds bytes [%llu, %llu) of that "
             "handle (%s); nothing was looked up: send the request on the connection",
             (unsigned long long)rp.offset, (unsigned long long)(rp.offset + rp.length),
             s->shm ? "detached, or never attached here" : "this process has no shared-memory side channel");
    return GRPC_STATUS_FAILED_PRECONDITION;
  }
  grpc_slice sl = grpc_slice_new(copy, (size_t)rp.length, free);
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&sl, 1);
  grpc_slice_unref(sl);
  scps__request_free(&c->req);
  char why[400];
  int rc = scps__request_decode(bb, kind, (size_t)s->layout->n_stacks, (size_t)s->S + 1, &c->req, why, sizeof why);
  grpc_byte_buffer_destroy(bb);
  if (rc) {
    snprintf(msg, len, "request_placement: the placed request: %s", why);
    return scps__status_from_error(rc);
  }
  if (c->req.request_placement.has) {
    snprintf(msg, len, "request_placement: the placed request sets request_placement itself");
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  return GRPC_STATUS_OK;
}

/* Decodes the call's Lookup or ApplyGradients request into c->req (out of
 * the client's segment when the Lookup names one); on failure answers the
 * call and returns false. */
bool scps__cmd_data_read(scps_call *c, scps_request_kind kind) {
  char msg[512];
  if (!c->payload) {
    snprintf(msg, sizeof msg, "%s: no request message received", scps__method_name(c->method));
    scps__call_finish(c, GRPC_STATUS_INVALID_ARGUMENT, msg, NULL, 0);
    return false;
  }
  scps_server *s = c->srv;
  int rc = scps__request_decode(c->payload, kind, (size_t)s->layout->n_stacks, (size_t)s->S + 1, &c->req, msg,
                               sizeof msg);
  c->bytes_in = c->req.bytes; /* what came over the connection */
  grpc_status_code st = rc ? scps__status_from_error(rc) : GRPC_STATUS_OK;
  if (!rc && c->req.request_placement.has) st = read_placed_request(c, kind, msg, sizeof msg);
  if (st != GRPC_STATUS_OK) {
    char full[600];
    snprintf(full, sizeof full, "%s: %s", scps__method_name(c->method), msg);
    scps__call_finish(c, st, full, NULL, 0);
    return false;
  }
  return true;
}

/* The scratch a call needs (floats) is reserved in the memory budget
 * before it is taken (scps_scratch.h): done runs once it is, or once the
 * call is refused. */
void scps__cmd_data_wait_scratch(scps_call *c, size_t floats,
                                void (*done)(scps_budget_waiter *, bool, size_t, size_t)) {
  c->wait.need = (floats ? floats : 1) * sizeof(float);
  c->wait.deadline_ns = scps__limits_wait_deadline(c);
  c->wait.done = done;
  scps__budget_wait(c->srv->budget, &c->wait);
}

void scps__cmd_data_refuse_memory(scps_call *c, const char *what, size_t in_use, size_t limit) {
  char msg[512];
  scps__limits_refusal(c, what, c->wait.need, in_use, limit, msg, sizeof msg);
  scps__call_finish(c, GRPC_STATUS_RESOURCE_EXHAUSTED, msg, NULL, 0);
}
