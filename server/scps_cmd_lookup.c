/* Lookup: validation, the SparseCore stage (each worker gathers its slice
 * of every stack, or inline on the receiving thread for small ones) and the
 * TensorCore stage that frames the activations into the answer. */
#include "scps_cmd_lookup.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scps_cmd_data.h"
#include "scps_fdo.h"
#include "scps_lookup_reply.h"
#include "scps_partlimits.h"
#include "scps_restore.h"
#include "scps_scratch.h"
#include "scps_shm.h"

/* Per (source, destination) partition counts of the request's partition
 * for local SparseCore k, folded into the server's FDO maxima; run by the
 * worker that gathers for k, so the partitions are counted side by side. */
static void record_partition_stats(scps_server *s, const call_stack *cs, int32_t k) {
  int32_t N = s->layout->num_sc;
  int32_t small[2 * 64];
  int32_t *ids = N <= 64 ? small : malloc(sizeof *ids * 2 * (size_t)N);
  if (!ids || scps__fdo_count_sources(&cs->coo[k], s->sample_src[cs->stack], N, ids, ids + N)) goto out;
  int32_t mx = 0, mu = 0;
  for (int32_t i = 0; i < N; i++) {
    if (ids[i] > mx) mx = ids[i];
    if (ids[N + i] > mu) mu = ids[N + i];
  }
  scps_sc_stack_stats *q = &s->sc_stats[cs->stack * s->S + k];
  int cur = atomic_load(&q->max_ids);
  while (mx > cur && !atomic_compare_exchange_weak(&q->max_ids, &cur, mx)) {
  }
  cur = atomic_load(&q->max_unique);
  while (mu > cur && !atomic_compare_exchange_weak(&q->max_unique, &cur, mu)) {
  }
out:
  if (ids != small) free(ids);
}

/* The samples [*first, *end) of a stack that SparseCore worker k gathers. */
static void sample_slice(int64_t total, int32_t S, int32_t k, uint32_t *first, uint32_t *end) {
  *first = (uint32_t)(total * k / S);
  *end = (uint32_t)(total * (k + 1) / S);
}

/* Where a worker's runs of pooled samples go in eXmY (gather_encode). */
typedef struct encode_sink {
  const scps_wirefmt *fmt;
  uint8_t *out; /* the stack's encoded answer */
  size_t dim, row_bytes;
  bool failed;
} encode_sink;

static void gather_encode(void *ctx, uint32_t sample, uint32_t n, const float *values) {
  encode_sink *k = ctx;
  if (scps__wirefmt_encode(k->fmt, values, n, k->dim, k->out + (size_t)sample * k->row_bytes, 0, 0, NULL))
    k->failed = true;
}

/* A gang job (scps_pipeline.h): worker k writes only its slice of every
 * stack's activations, reading all local SparseCores' rows for it, so the
 * process's partial is built once, without a block per SparseCore to zero
 * and sum. Per sample the SparseCores are accumulated in order, as an
 * in-process engine does.
 *
 * Once the drain has timed out, the calls are cancelled: queued Lookups
 * are answered without being computed, so the process exits after the drain
 * time, not after the backlog. Queued ApplyGradients still run whole. */
static void lookup_sc(scps_job *job, int32_t k) {
  scps_call *c = job->data;
  scps_server *s = c->srv;
  if (atomic_load(&s->cancelling)) return;
  const bool bf16 = c->wire.kind == SCPS_WIREFMT_BFLOAT16, exmy = c->wire.kind == SCPS_WIREFMT_EXMY;
  for (int i = 0; i < c->n_stacks; i++) {
    call_stack *cs = &c->stacks[i];
    const scps_stack_layout *sl = &s->layout->stacks[cs->stack];
    const size_t dim = (size_t)sl->dim;
    uint32_t first, end;
    if (cs->distinct) {
      first = cs->row_start[k];
      end = cs->row_start[k + 1];
      if (bf16) scps__engine_copy_rows_bf16(s->engine, cs->stack, k, &cs->coo[k], cs->encoded + first * dim * 2);
      else scps__engine_copy_rows(s->engine, cs->stack, k, &cs->coo[k], cs->act + first * dim);
    } else {
      sample_slice(sl->total_sample_count, s->S, k, &first, &end);
      if (exmy) {
        /* Each run of samples encoded while it is in L1: the float32 sums
         * never reach memory. */
        encode_sink sink = {&c->wire, cs->encoded, dim, scps__wirefmt_row_bytes(&c->wire, dim), false};
        scps__engine_gather_each(s->engine, cs->stack, cs->coo, s->S, first, end, gather_encode, &sink,
                                c->gather_scratch + (size_t)k * c->gather_stride);
        if (sink.failed) atomic_store(&c->encode_failed, i + 1);
      } else if (bf16)
        scps__engine_gather_bf16(s->engine, cs->stack, cs->coo, s->S, first, end, cs->encoded,
                                c->gather_scratch + (size_t)k * c->gather_stride);
      else
        scps__engine_gather(s->engine, cs->stack, cs->coo, s->S, first, end, cs->act,
                           c->gather_scratch + (size_t)k * c->gather_stride);
    }
    /* eXmY distinct rows: the worker's rows, rounded to nearest. */
    if (exmy && cs->distinct && scps__wirefmt_encode(&c->wire, cs->act + (size_t)first * dim, end - first, dim,
                                    cs->encoded + (size_t)first * scps__wirefmt_row_bytes(&c->wire, dim), 0, 0,
                                    NULL))
      atomic_store(&c->encode_failed, i + 1);
    atomic_fetch_add(&s->sc_stats[cs->stack * s->S + k].ids_looked_up, (long long)cs->coo[k].n);
    record_partition_stats(s, cs, k);
  }
}

static size_t lookup_answer_bytes(const scps_call *c, const call_stack *cs);

/* Activation memory shared by the slices of one response; freed by the last
 * slice gRPC releases, which may be after the call is gone. */
typedef struct scratch_owner {
  atomic_int refs;
  float *mem;
  size_t cap;
  scps_scratch *pool;
} scratch_owner;

static void scratch_release(void *p) {
  scratch_owner *o = p;
  if (atomic_fetch_sub(&o->refs, 1) == 1) {
    scps__scratch_give(o->pool, o->mem, o->cap);
    free(o);
  }
}

/* The answer already lies in the client's segment, written by the
 * SparseCore workers: the response names the stacks and says placed. */
static void lookup_tc_placed(scps_call *c) {
  const scps_server *s = c->srv;
  size_t cap = SCPS_LOOKUP_REPLY_PLACED_LEN;
  for (int i = 0; i < c->n_stacks; i++)
    cap += SCPS_LOOKUP_REPLY_HEAD_MAX(strlen(s->layout->stacks[c->stacks[i].stack].name));
  uint8_t small[1024];
  uint8_t *buf = cap <= sizeof small ? small : malloc(cap);
  if (!buf) {
    scps__call_finish(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "Lookup: out of memory encoding the response", NULL, 0);
    return;
  }
  size_t n = 0;
  for (int i = 0; i < c->n_stacks; i++) {
    const char *name = s->layout->stacks[c->stacks[i].stack].name;
    n += scps__lookup_reply_put_head(buf + n, name, strlen(name), c->stacks[i].distinct, 0);
  }
  n += scps__lookup_reply_put_placed(buf + n);
  scps__call_finish(c, GRPC_STATUS_OK, NULL, buf, n);
  if (buf != small) free(buf);
}

/* The LookupResponse goes out without a copy of the activations: per stack
 * a small slice with its framing (scps__lookup_reply_put_head) and a slice
 * that points at the activations themselves. */
static void lookup_tc(scps_job *job) {
  scps_call *c = job->data;
  scps_server *s = c->srv;
  if (atomic_load(&s->cancelling)) {
    scps__call_finish(c, GRPC_STATUS_CANCELLED, "Lookup: cancelled by the server's shutdown", NULL, 0);
    return;
  }
  const int failed = atomic_load(&c->encode_failed);
  if (failed) {
    /* A NaN: a row that is not finite (restored from a checkpoint written
     * before such updates were refused), or products past float32 summed
     * to one; eXmY has no code for it. */
    const call_stack *cs = &c->stacks[failed - 1];
    char name[SCPS_WIREFMT_NAME_MAX], msg[SCPS_STACK_NAME_MAX + 320];
    scps__wirefmt_name(&c->wire, name);
    snprintf(msg, sizeof msg, "Lookup: stack '%s' gave a NaN %s, which %s cannot carry: a row of it is not finite "
             "(restore a good checkpoint), or its gains times its rows overflow float32; nothing was sent",
             s->layout->stacks[cs->stack].name, cs->distinct ? "row" : "activation", name);
    scps__call_finish(c, GRPC_STATUS_FAILED_PRECONDITION, msg, NULL, 0);
    return;
  }
  if (c->shm_at) {
    lookup_tc_placed(c);
    return;
  }
  grpc_slice *slices = malloc(sizeof *slices * 2 * (size_t)(c->n_stacks ? c->n_stacks : 1));
  scratch_owner *owner = malloc(sizeof *owner);
  if (!slices || !owner) {
    free(slices);
    free(owner);
    scps__call_finish(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "Lookup: out of memory encoding the response", NULL, 0);
    return;
  }
  owner->mem = c->scratch;
  owner->cap = c->scratch_cap;
  owner->pool = s->scratch;
  c->scratch = NULL;
  atomic_store(&owner->refs, c->n_stacks + 1);
  size_t total = 0;
  for (int i = 0; i < c->n_stacks; i++) {
    call_stack *cs = &c->stacks[i];
    const scps_stack_layout *sl = &s->layout->stacks[cs->stack];
    size_t name_len = strlen(sl->name), act_len = lookup_answer_bytes(c, cs);
    void *act = c->wire.kind == SCPS_WIREFMT_FLOAT32 ? (void *)cs->act : (void *)cs->encoded;
    uint8_t head[SCPS_LOOKUP_REPLY_HEAD_MAX(SCPS_STACK_NAME_MAX)];
    size_t h = scps__lookup_reply_put_head(head, sl->name, name_len, cs->distinct, act_len);
    slices[2 * i] = grpc_slice_from_copied_buffer((const char *)head, h);
    slices[2 * i + 1] = grpc_slice_new_with_user_data(act, act_len, scratch_release, owner);
    total += h + act_len;
  }
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(slices, 2 * (size_t)c->n_stacks);
  for (int i = 0; i < 2 * c->n_stacks; i++) grpc_slice_unref(slices[i]);
  free(slices);
  scratch_release(owner);
  scps__call_finish_buffer(c, bb, total);
}

/* Values of a stack's answer: pooled activations or distinct rows. */
static size_t lookup_values(const scps_call *c, const call_stack *cs) {
  const scps_stack_layout *sl = &c->srv->layout->stacks[cs->stack];
  return (cs->distinct ? (size_t)cs->row_start[c->srv->S] : (size_t)sl->total_sample_count) * (size_t)sl->dim;
}

/* Bytes of a stack's answer: its rows in the call's format. */
static size_t lookup_answer_bytes(const scps_call *c, const call_stack *cs) {
  const size_t dim = (size_t)c->srv->layout->stacks[cs->stack].dim;
  return lookup_values(c, cs) / dim * scps__wirefmt_row_bytes(&c->wire, dim);
}

/* Floats of scratch a stack's answer takes: room for the answer unless it
 * is placed in the client's segment, and in eXmY the float32 distinct rows
 * it encodes (pooled sums are encoded as they are made). */
static size_t lookup_scratch(const scps_call *c, const call_stack *cs, bool placed) {
  const size_t encoded = placed ? 0 : (lookup_answer_bytes(c, cs) + sizeof(float) - 1) / sizeof(float);
  return encoded + (c->wire.kind == SCPS_WIREFMT_EXMY && cs->distinct ? lookup_values(c, cs) : 0);
}

/* Takes the request's placement when it can be honoured: a segment
 * attached here, an offset aligned for any value (a multiple of 64) and a
 * length that is exactly the answer's. Otherwise the answer goes in the
 * response, as for a client that asked for none. */
static void lookup_place(scps_call *c) {
  const scps_request *req = &c->req;
  if (!req->placement.has || !c->srv->shm || req->placement.offset % 64) return;
  uint64_t bytes = 0;
  for (int i = 0; i < c->n_stacks; i++) bytes += lookup_answer_bytes(c, &c->stacks[i]);
  if (bytes != req->placement.length) return;
  c->shm_seg = scps__shm_acquire(c->srv->shm, req->placement.segment, req->placement.segment_len,
                                req->placement.offset, req->placement.length, &c->shm_at);
  if (!c->shm_seg) c->shm_at = NULL;
}

/* Floats of gather scratch (scps__engine_gather, scps__engine_gather_bf16,
 * scps__engine_gather_each)
 * one SparseCore worker needs for its slice of each stack answered pooled,
 * one stack after another: the largest. */
static size_t lookup_gather_scratch(const scps_call *c) {
  const scps_server *s = c->srv;
  size_t most = 0;
  for (int i = 0; i < c->n_stacks; i++) {
    const call_stack *cs = &c->stacks[i];
    if (cs->distinct) continue;
    const scps_stack_layout *sl = &s->layout->stacks[cs->stack];
    size_t entries = 0;
    for (int k = 0; k < s->S; k++) entries += cs->coo[k].n;
    for (int k = 0; k < s->S; k++) {
      uint32_t first, end;
      sample_slice(sl->total_sample_count, s->S, k, &first, &end);
      size_t b = scps__engine_gather_scratch(entries, first, end);
      if (b > most) most = b;
    }
  }
  return (most + sizeof(float) - 1) / sizeof(float);
}

/* A small Lookup, whole on this thread: waking every SparseCore worker
 * across two barriers and then a TensorCore worker would cost more than the
 * gather itself, and a serving load of many small batches keeps the workers
 * busy handing work to each other. */
static void lookup_inline(scps_call *c) {
  scps_server *s = c->srv;
  int64_t t0 = scps__clock_ns();
  for (int k = 0; k < s->S; k++) pthread_rwlock_rdlock(&s->sc_locks[k]);
  for (int k = 0; k < s->S; k++) lookup_sc(&c->job, k);
  for (int k = s->S - 1; k >= 0; k--) pthread_rwlock_unlock(&s->sc_locks[k]);
  atomic_fetch_add(&s->inline_lookups, 1);
  atomic_fetch_add(&s->inline_ns, (long long)(scps__clock_ns() - t0));
  lookup_tc(&c->job);
}

static void lookup_admitted(scps_budget_waiter *w, bool admitted, size_t in_use, size_t limit);

void scps__cmd_lookup(scps_call *c) {
  scps_server *s = c->srv;
  if (scps__restore_refused(c)) return;
  if (!scps__cmd_data_read(c, SCPS_REQUEST_LOOKUP)) return;
  const scps_request *req = &c->req;
  char msg[SCPS_ERROR_MSG_MAX + 128], field[64];
  grpc_status_code st = scps__call_check_view(c, req->config_fingerprint.data, req->config_fingerprint.len,
                                             req->process_index, msg, sizeof msg);
  if (st == GRPC_STATUS_OK)
    st = scps__cmd_data_check_format(c, (int)req->format, &req->exmy, "activation_format", msg, sizeof msg);
  if (st == GRPC_STATUS_OK && scps__cmd_data_alloc_stacks(c, req->n_stacks)) {
    scps__call_finish(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "Lookup: out of memory", NULL, 0);
    return;
  }
  if (st == GRPC_STATUS_OK && req->n_distinct_rows && req->n_distinct_rows != req->n_stacks) {
    snprintf(msg, sizeof msg, "distinct_rows: %zu flags for %zu stacks; send none or one per stack",
             req->n_distinct_rows, req->n_stacks);
    st = GRPC_STATUS_INVALID_ARGUMENT;
  }
  for (size_t i = 0; st == GRPC_STATUS_OK && i < req->n_stacks; i++) {
    snprintf(field, sizeof field, "stacks[%zu]", i);
    call_stack *cs = &c->stacks[i];
    st = scps__cmd_data_check_partitions(c, &req->stacks[i].partitions, field, cs, msg, sizeof msg);
    if (st == GRPC_STATUS_OK && scps__cmd_data_duplicate(c, (int)i, cs->stack)) {
      snprintf(msg, sizeof msg, "%s.stack: stack '%s' listed twice", field, req->stacks[i].partitions.stack);
      st = GRPC_STATUS_INVALID_ARGUMENT;
    }
    if (st != GRPC_STATUS_OK) break;
    cs->distinct = req->n_distinct_rows && req->distinct_rows[i];
    if (cs->distinct) {
      cs->row_start[0] = 0;
      for (int k = 0; k < s->S; k++)
        cs->row_start[k + 1] = cs->row_start[k] + (uint32_t)scps__coo_distinct_rows(&cs->coo[k]);
    }
  }
  if (st == GRPC_STATUS_OK) st = scps__partlimits_apply(c, msg, sizeof msg);
  if (st != GRPC_STATUS_OK) {
    scps__call_finish(c, st, msg, NULL, 0);
    return;
  }
  lookup_place(c);
  atomic_init(&c->encode_failed, 0);
  size_t scratch = 0;
  for (int i = 0; i < c->n_stacks; i++) scratch += lookup_scratch(c, &c->stacks[i], c->shm_at != NULL);
  c->gather_stride = lookup_gather_scratch(c);
  scps__cmd_data_wait_scratch(c, scratch + (size_t)s->S * c->gather_stride, lookup_admitted);
}

/* A Lookup once its answer and scratch are reserved in the memory budget
 * (on the thread that admitted it), or refused. */
static void lookup_admitted(scps_budget_waiter *w, bool admitted, size_t in_use, size_t limit) {
  scps_call *c = scps__call_of_wait(w);
  scps_server *s = c->srv;
  if (!admitted) {
    scps__cmd_data_refuse_memory(c, "its answer and scratch", in_use, limit);
    return;
  }
  c->scratch = scps__scratch_take(s->scratch, w->need / sizeof(float), &c->scratch_cap);
  if (!c->scratch) {
    scps__call_finish(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "Lookup: out of memory for activations", NULL, 0);
    return;
  }
  size_t off = 0, at = 0;
  for (int i = 0; i < c->n_stacks; i++) {
    call_stack *cs = &c->stacks[i];
    /* Placed answers are aligned for floats: the offset is a multiple of
     * 64 (lookup_place) and each stack's bytes a multiple of 4 in float32. */
    uint8_t *placed = c->shm_at ? c->shm_at + at : NULL;
    float *mine = c->scratch + off;
    if (c->wire.kind == SCPS_WIREFMT_FLOAT32) {
      cs->act = placed ? (float *)(void *)placed : mine;
    } else if (c->wire.kind == SCPS_WIREFMT_BFLOAT16) {
      cs->encoded = placed ? placed : (uint8_t *)mine;
    } else {
      const size_t rows = cs->distinct ? lookup_values(c, cs) : 0;
      cs->act = mine;
      cs->encoded = placed ? placed : (uint8_t *)(mine + rows);
    }
    off += lookup_scratch(c, cs, placed != NULL);
    at += lookup_answer_bytes(c, cs);
  }
  c->gather_scratch = c->scratch + off;
  c->job.sc_fn = lookup_sc;
  c->job.tc_fn = lookup_tc;
  c->job.data = c;
  c->job.gang = true;
  int64_t entries = 0;
  for (int i = 0; i < c->n_stacks; i++)
    for (int k = 0; k < s->S; k++) entries += (int64_t)c->stacks[i].coo[k].n;
  if (entries <= s->opts.inline_lookup_entries) {
    lookup_inline(c);
    return;
  }
  scps__pipeline_submit(s->pipeline, &c->job);
}
