/* ApplyGradients: validation, the gang job whose workers read and check the
 * gradients and then update their SparseCores (or, if any update would not
 * be finite, none), and the answer. */
#include "scps_cmd_push.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scps_bf16.h"
#include "scps_cmd_data.h"
#include "scps_partlimits.h"
#include "scps_restore.h"
#include "scps_saver.h"
#include "scps_scratch.h"
#include "scps_shm.h"

/* Values of gradients read from the request per step of read_gradients:
 * 16 KiB of float32, so each block is checked while still in L1. */
#define GRAD_BLOCK 4096

/* eXmY rows one by one, a row whose scale is past float32's range read as
 * infinities: the gradient check then names its first value as one that
 * is not finite. */
static void decode_rows_apart(const scps_wirefmt *f, const uint8_t *src, size_t rows, size_t dim, float *dst) {
  const size_t row_bytes = scps__wirefmt_row_bytes(f, dim);
  for (size_t r = 0; r < rows; r++)
    if (scps__wirefmt_decode(f, src + r * row_bytes, 1, dim, dst + r * dim, false, NULL))
      for (size_t j = 0; j < dim; j++) dst[r * dim + j] = INFINITY;
}

/* Worker k's share of every stack's gradients (an equal run of values; in
 * eXmY of whole rows), out of the request's slices into the stack's buffer:
 * float32, bfloat16 or eXmY widened on the way, or bfloat16 as it came for
 * a stack by sample (grads_bf16), whose update widens them itself. Returns whether any value
 * is not finite: all exponent bits set, tested branch-free per block; the
 * largest magnitude of the stacks by sample goes to c->grad_mag[k]. */
static bool read_gradients(scps_call *c, int32_t k) {
  const int32_t S = c->srv->S;
  const bool exmy = c->wire.kind == SCPS_WIREFMT_EXMY;
  uint8_t tmp[GRAD_BLOCK * sizeof(float)];
  uint32_t nonfinite = 0, mag = 0, row_mag = 0;
  for (int i = 0; i < c->n_stacks; i++) {
    call_stack *cs = &c->stacks[i];
    /* Read in runs of whole rows (each eXmY row decodes alone), at most
     * GRAD_BLOCK values: a value is read as its row's dim-th part. */
    const size_t dim = (size_t)c->srv->layout->stacks[cs->stack].dim;
    const size_t row_bytes = scps__wirefmt_row_bytes(&c->wire, dim), rows = cs->grad_src.len / row_bytes;
    const size_t step = exmy ? (GRAD_BLOCK / dim ? GRAD_BLOCK / dim : 1) * dim : GRAD_BLOCK;
    const size_t n = rows * dim, end = exmy ? rows * (size_t)(k + 1) / (size_t)S * dim : n * (size_t)(k + 1) / (size_t)S;
    size_t at = exmy ? rows * (size_t)k / (size_t)S * dim : n * (size_t)k / (size_t)S;
    for (; at < end; at += step) {
      const size_t m = end - at < step ? end - at : step;
      const size_t off = at / dim * row_bytes + (exmy ? 0 : at % dim * (row_bytes / dim));
      const size_t len = exmy ? m / dim * row_bytes : m * (row_bytes / dim);
      const uint8_t *src = scps__slices_span(cs->grad_msg, cs->grad_src.off + off, len, tmp);
      uint32_t high = 0;
      if (cs->grads_bf16) {
        uint16_t *raw = (uint16_t *)(void *)cs->grads + at;
        memcpy(raw, src, m * 2);
        for (size_t j = 0; j < m; j++) {
          const uint32_t h = raw[j] & 0x7fffu;
          nonfinite |= (uint32_t)(h >= 0x7f80u);
          high = h > high ? h : high;
        }
        high <<= 16;
      } else {
        float *dst = cs->grads + at;
        if (scps__wirefmt_decode(&c->wire, src, exmy ? m / dim : 1, exmy ? dim : m, dst, false, NULL))
          decode_rows_apart(&c->wire, src, m / dim, dim, dst);
        for (size_t j = 0; j < m; j++) {
          uint32_t u;
          memcpy(&u, &dst[j], sizeof u);
          u &= 0x7fffffffu;
          nonfinite |= (uint32_t)(u >= 0x7f800000u);
          high = u > high ? u : high;
        }
      }
      /* Row sums pushed by row are applied as they are: no bound needed
       * on their sums, only on their size (updates_bounded). */
      if (!cs->by_row && high > mag) mag = high;
      if (cs->by_row && high > row_mag) row_mag = high;
    }
  }
  c->grad_mag[k] = mag;
  c->row_mag[k] = row_mag;
  return nonfinite != 0;
}

/* Whether no row sum of the call's stacks by sample can leave float32's
 * range: each is at most n x the largest |gain| x the largest |gradient|
 * for a partition of n entries, and float32 rounding adds at most a
 * relative n x 2^-24 to that over n adds. The same answer on every thread
 * once all workers have read their gradients. */
static bool sums_bounded(const scps_call *c) {
  uint32_t mag = 0;
  for (int k = 0; k < c->srv->S; k++) mag = c->grad_mag[k] > mag ? c->grad_mag[k] : mag;
  float gmax;
  memcpy(&gmax, &mag, sizeof gmax);
  for (int i = 0; i < c->n_stacks; i++) {
    const call_stack *cs = &c->stacks[i];
    if (cs->by_row) continue;
    for (int k = 0; k < c->srv->S; k++) {
      const double n = (double)cs->coo[k].n;
      float gain;
      memcpy(&gain, &cs->gain_mag[k], sizeof gain);
      if (!(n * (double)gain * (double)gmax * (1.0 + n * 0x1p-23) < 0x1p126)) return false;
    }
  }
  return true;
}

/* Every stack's updates on local SparseCore sc, under its lock; returns
 * the rows updated. */
static int64_t apply_updates(scps_call *c, int32_t sc) {
  scps_server *s = c->srv;
  int64_t rows = 0;
  pthread_rwlock_wrlock(&s->sc_locks[sc]);
  for (int i = 0; i < c->n_stacks; i++) {
    call_stack *cs = &c->stacks[i];
    const scps_coo *coo = &cs->coo[sc];
    int64_t distinct = 0;
    if (cs->by_row) {
      const size_t dim = (size_t)s->layout->stacks[cs->stack].dim;
      scps__engine_update_rows(s->engine, cs->stack, sc, coo->rows, coo->n, cs->grads + cs->row_start[sc] * dim,
                              &c->step);
      distinct = (int64_t)coo->n;
    } else {
      if (cs->grads_bf16)
        scps__engine_update_bf16(s->engine, cs->stack, sc, coo, (const uint16_t *)(void *)cs->grads, &c->step);
      else
        scps__engine_update(s->engine, cs->stack, sc, coo, cs->grads, &c->step);
      distinct = (int64_t)scps__coo_distinct_rows(coo);
    }
    atomic_fetch_add(&s->sc_stats[cs->stack * s->S + sc].rows_updated, (long long)distinct);
    rows += distinct;
  }
  pthread_rwlock_unlock(&s->sc_locks[sc]);
  return rows;
}

/* With the bound exceeded: whether every row sum of the stacks by sample
 * is finite, formed as the update forms it; if not, the first that is not
 * goes to c->sum_stack, sum_sc and sum_row. */
static bool sums_finite(scps_call *c) {
  const scps_server *s = c->srv;
  for (int i = 0; i < c->n_stacks; i++) {
    const call_stack *cs = &c->stacks[i];
    if (cs->by_row) continue;
    for (int k = 0; k < s->S; k++) {
      uint32_t row;
      if (scps__engine_sums_finite(s->engine, cs->stack, &cs->coo[k], cs->grads, cs->grads_bf16, &row)) continue;
      c->sum_stack = i;
      c->sum_sc = k;
      c->sum_row = row;
      return false;
    }
  }
  return true;
}

/* A bound on the magnitude of the gradient each row of coo[k] of stack cs
 * gets: by row, the largest value sent; by sample, as sums_bounded bounds
 * the sums. */
static double row_gradient_bound(const scps_call *c, const call_stack *cs, int32_t k) {
  uint32_t by_sample = 0, by_row = 0;
  for (int32_t w = 0; w < c->srv->S; w++) {
    by_sample = c->grad_mag[w] > by_sample ? c->grad_mag[w] : by_sample;
    by_row = c->row_mag[w] > by_row ? c->row_mag[w] : by_row;
  }
  float g, gain;
  if (cs->by_row) {
    memcpy(&g, &by_row, sizeof g);
    return (double)g;
  }
  memcpy(&g, &by_sample, sizeof g);
  memcpy(&gain, &cs->gain_mag[k], sizeof gain);
  const double n = (double)cs->coo[k].n;
  return n * (double)gain * (double)g * (1.0 + n * 0x1p-23);
}

/* Whether every row update of the call is proven finite
 * (scps__optimizer_update_bounded) from the shards' bounds the workers took
 * and the gradients' size. The same answer on every thread once all
 * workers have read their gradients. */
static bool updates_bounded(const scps_call *c) {
  const scps_server *s = c->srv;
  for (int i = 0; i < c->n_stacks; i++) {
    const call_stack *cs = &c->stacks[i];
    scps_opt_step ost;
    scps__optimizer_prepare(&s->layout->stacks[cs->stack].optimizer, &c->step, &ost);
    for (int32_t k = 0; k < s->S; k++)
      if (cs->coo[k].n && !scps__optimizer_update_bounded(&ost, cs->bounds[k], row_gradient_bound(c, cs, k)))
        return false;
  }
  return true;
}

/* With the bound not proving it: every row update computed without
 * writing (scps__engine_update_finite); the first that would leave a value
 * that is not finite goes to c->fault_stack, fault_sc and fault. */
static bool updates_finite(scps_call *c) {
  scps_server *s = c->srv;
  for (int i = 0; i < c->n_stacks; i++) {
    const call_stack *cs = &c->stacks[i];
    const size_t dim = (size_t)s->layout->stacks[cs->stack].dim;
    for (int32_t k = 0; k < s->S; k++) {
      const void *grads = cs->by_row ? (const void *)(cs->grads + cs->row_start[k] * dim) : (const void *)cs->grads;
      if (scps__engine_update_finite(s->engine, cs->stack, k, &cs->coo[k], grads, cs->grads_bf16, cs->by_row,
                                    &c->step, &c->fault))
        continue;
      c->fault_stack = i;
      c->fault_sc = k;
      return false;
    }
  }
  return true;
}

/* A gang job, so every worker is here at once: first each reads and checks
 * its share of the gradients (megabytes a single thread would copy while
 * the other cores wait) and finds its partitions' largest |gain|, then,
 * once all have, each updates its own SparseCore, unless any value was not
 * finite (apply_tc rejects the call). Where the bound on the row sums
 * leaves room for one to overflow, or the bounds on the values and the
 * gradients cannot prove every update finite (updates_bounded; rare:
 * values near float32's range), worker 0 alone sums every row, or
 * computes every row's update without writing (updates_finite), and then
 * updates every SparseCore or, if a value is not finite, nothing; the
 * others wait at the gang's closing barrier meanwhile, so no later job
 * (gang Lookups take no locks) runs until the tables are whole. */
static void apply_sc(scps_job *job, int32_t sc) {
  scps_call *c = job->data;
  scps_server *s = c->srv;
  if (read_gradients(c, sc)) atomic_store(&c->grads_bad, true);
  for (int i = 0; i < c->n_stacks; i++) {
    call_stack *cs = &c->stacks[i];
    const scps_coo *coo = &cs->coo[sc];
    if (cs->by_row) continue;
    /* A max of magnitude bits, not a sum of floats: it vectorises. */
    uint32_t mag = 0x3f800000u; /* 1.0f, every gain without gains */
    if (coo->gains) {
      mag = 0;
      for (size_t j = 0; j < coo->n; j++) {
        uint32_t u;
        memcpy(&u, &coo->gains[j], sizeof u);
        u &= 0x7fffffffu;
        mag = u > mag ? u : mag;
      }
    }
    cs->gain_mag[sc] = mag;
  }
  /* What this worker's SparseCore holds, before any worker writes. */
  for (int i = 0; i < c->n_stacks; i++) scps__engine_value_bounds(s->engine, c->stacks[i].stack, sc, c->stacks[i].bounds[sc]);
  scps__pipeline_gang_sync(s->pipeline, job);
  if (atomic_load(&c->grads_bad)) return;
  const bool sums_ok = sums_bounded(c), updates_ok = updates_bounded(c);
  if (sums_ok && updates_ok) {
    c->rows_updated[sc] = apply_updates(c, sc);
    return;
  }
  if (sc != 0) return;
  if (!sums_ok) {
    atomic_fetch_add(&s->pushes_sums_checked, 1);
    if (!sums_finite(c)) return;
  }
  if (!updates_ok) {
    atomic_fetch_add(&s->pushes_updates_checked, 1);
    if (!updates_finite(c)) return;
  }
  for (int k = 0; k < s->S; k++) c->rows_updated[k] = apply_updates(c, k);
}

/* Gradient j of a stack as the worker read it. */
static float grad_value(const call_stack *cs, size_t j) {
  return cs->grads_bf16 ? scps__bf16_to_f32(((const uint16_t *)(const void *)cs->grads)[j]) : cs->grads[j];
}

/* The first value that is not finite, in request order, named. */
static void name_bad_gradient(const scps_call *c, char *msg, size_t len) {
  const int32_t S = c->srv->S;
  for (int i = 0; i < c->n_stacks; i++) {
    const call_stack *cs = &c->stacks[i];
    const size_t dim = (size_t)c->srv->layout->stacks[cs->stack].dim;
    const size_t n = cs->by_row ? (size_t)cs->row_start[S] * dim
                                : (size_t)c->srv->layout->stacks[cs->stack].total_sample_count * dim;
    for (size_t j = 0; j < n; j++) {
      const float v = grad_value(cs, j);
      if (isfinite(v)) continue;
      if (!cs->by_row) {
        snprintf(msg, len, "stacks[%d].gradients: element %zu (sample %zu, column %zu) is %g; gradients must be finite",
                 i, j, j / dim, j % dim, v);
        return;
      }
      int32_t k = 0;
      while (k + 1 < S && cs->row_start[k + 1] <= j / dim) k++;
      snprintf(msg, len,
               "stacks[%d].row_gradients: element %zu (row %u of local SparseCore %d, column %zu) is %g; gradients "
               "must be finite",
               i, j, cs->coo[k].rows[j / dim - cs->row_start[k]], k, j % dim, v);
      return;
    }
  }
  snprintf(msg, len, "a gradient is not finite");
}

/* The row updates_finite found, named: INVALID_ARGUMENT for an update
 * that would leave a value not finite, FAILED_PRECONDITION for a row that
 * already holds one (only a checkpoint written before such updates were
 * refused can have put it there). */
static grpc_status_code name_fault(const scps_call *c, char *msg, size_t len) {
  const scps_server *s = c->srv;
  const scps_layout *l = s->layout;
  const call_stack *cs = &c->stacks[c->fault_stack];
  const scps_update_fault *f = &c->fault;
  const int32_t sc = s->opts.process_index * s->S + c->fault_sc;
  const scps_optimizer_type type = l->stacks[cs->stack].optimizer.type;
  char row[SCPS_NAME_MAX + 96];
  int t;
  int64_t id;
  if (scps__layout_row_to_id(l, cs->stack, sc, f->row, &t, &id))
    snprintf(row, sizeof row, "local row %u of SparseCore %d", f->row, sc);
  else
    snprintf(row, sizeof row, "local row %u of SparseCore %d (table '%s' id %lld)", f->row, sc, l->table_specs[t].name,
             (long long)id);
  const char *what = f->array ? scps__optimizer_slot_name(type, f->array - 1) : "row";
  if (f->already) {
    snprintf(msg, len,
             "stacks[%d] (stack '%s'): %s already holds a value that is not finite (%s column %d is %g), written "
             "before such updates were refused or restored from a checkpoint that held it; pushes to it are refused "
             "until a good checkpoint is restored (ReadRows shows it); nothing was applied",
             c->fault_stack, l->stacks[cs->stack].name, row, what, f->column, (double)f->before);
    return GRPC_STATUS_FAILED_PRECONDITION;
  }
  snprintf(msg, len,
           "stacks[%d] (stack '%s'): the update would make %s not finite (%s column %d: %g becomes %g); lower the "
           "learning rate or the gradients; nothing was applied",
           c->fault_stack, l->stacks[cs->stack].name, row, what, f->column, (double)f->before, (double)f->after);
  return GRPC_STATUS_INVALID_ARGUMENT;
}

static void apply_tc(scps_job *job) {
  scps_call *c = job->data;
  char msg[SCPS_ERROR_MSG_MAX + 512]; /* name_fault names a stack, a table and a slot */
  if (atomic_load(&c->grads_bad)) {
    name_bad_gradient(c, msg, sizeof msg);
    scps__saver_apply_rejected(c->srv);
    scps__call_finish(c, GRPC_STATUS_INVALID_ARGUMENT, msg, NULL, 0);
    return;
  }
  if (c->sum_stack >= 0) {
    snprintf(msg, sizeof msg,
             "stacks[%d].gradients: the sum of gain x gradient over the entries of row %u of local SparseCore %d "
             "overflows float32 (each gradient is finite, their sum is not); scale the loss or the gradients down",
             c->sum_stack, c->sum_row, c->sum_sc);
    scps__saver_apply_rejected(c->srv);
    scps__call_finish(c, GRPC_STATUS_INVALID_ARGUMENT, msg, NULL, 0);
    return;
  }
  if (c->fault_stack >= 0) {
    const grpc_status_code st = name_fault(c, msg, sizeof msg);
    scps__saver_apply_rejected(c->srv);
    scps__call_finish(c, st, msg, NULL, 0);
    return;
  }
  Scps__V1__ApplyGradientsResponse r = SCPS__V1__APPLY_GRADIENTS_RESPONSE__INIT;
  for (int k = 0; k < c->srv->S; k++) r.rows_updated += c->rows_updated[k];
  /* Asked only of callers that may answer with a Checkpoint; for the
   * others the server's solo save covers the period. */
  r.checkpoint_due = scps__saver_apply_done(c->srv, c->step.step) && scps__call_may(c, SCPS_M_CHECKPOINT);
  scps__call_finish_packed(c, &r.base);
}

/* A by-row stack's partitions (StackGradients.row_gradients): a known
 * stack, S + 1 offsets into rows, no samples or gains, and each
 * SparseCore's rows strictly ascending and in range. */
static grpc_status_code check_row_partitions(scps_call *c, scps_req_partitions *sp, const char *field,
                                             call_stack *cs, char *msg, size_t len) {
  scps_server *s = c->srv;
  grpc_status_code bad = scps__cmd_data_check_head(c, sp, field, cs, msg, len);
  if (bad != GRPC_STATUS_OK) return bad;
  const int st = cs->stack;
  cs->by_row = true;
  if (sp->samples.len || sp->samples_u16.len || sp->gains.len || sp->gain_exceptions.len) {
    snprintf(msg, len,
             "%s: the stack's gradients field is empty, so its gradients are read by row (row_gradients), and "
             "then samples, samples_u16, gains and gain_exceptions must be empty; they hold %zu, %zu, %zu and %zu "
             "bytes",
             field, sp->samples.len, sp->samples_u16.len, sp->gains.len, sp->gain_exceptions.len);
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  size_t n = sp->rows.len / 4;
  if (sp->rows.len % 4) {
    snprintf(msg, len, "%s.rows: %zu bytes, not 4 per row", field, sp->rows.len);
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  bad = scps__cmd_data_check_offsets(c, sp, n, "row", field, msg, len);
  if (bad != GRPC_STATUS_OK) return bad;
  const uint32_t *rows = (const uint32_t *)(const void *)sp->rows.data;
  for (int k = 0; k < s->S; k++) {
    uint32_t a = sp->sc_offsets[k], b = sp->sc_offsets[k + 1];
    cs->coo[k] = (scps_coo){b - a, rows + a, NULL, NULL};
    cs->row_start[k] = a;
    scps_error err;
    if (scps__engine_check_rows(s->engine, st, k, rows + a, b - a, &err)) {
      snprintf(msg, len, "%s: %s", field, err.msg);
      return GRPC_STATUS_INVALID_ARGUMENT;
    }
  }
  cs->row_start[s->S] = (uint32_t)n;
  return GRPC_STATUS_OK;
}

/* The gradients' size, by sample or by row; their values are checked as
 * the workers read them (apply_sc), into float32 room at grads (which a
 * stack by sample in bfloat16 half fills with the values as they came). */
static grpc_status_code check_gradients(scps_call *c, const scps_req_stack *sg, const char *field,
                                        call_stack *cs, float *grads, size_t *placed_at, char *msg, size_t len) {
  const scps_stack_layout *sl = &c->srv->layout->stacks[cs->stack];
  const size_t row_bytes = scps__wirefmt_row_bytes(&c->wire, (size_t)sl->dim);
  char name[SCPS_WIREFMT_NAME_MAX]; /* the format's, for the messages */
  if (cs->by_row) {
    size_t n = (size_t)cs->row_start[c->srv->S] * row_bytes;
    if (sg->row_gradients.len != n) {
      scps__wirefmt_name(&c->wire, name);
      snprintf(msg, len, "%s.row_gradients: %zu bytes; stack '%s' lists %u rows, which need %u x %zu bytes (dim %d "
               "in %s) = %zu", field, sg->row_gradients.len, sl->name, cs->row_start[c->srv->S],
               cs->row_start[c->srv->S], row_bytes, sl->dim, name, n);
      return GRPC_STATUS_INVALID_ARGUMENT;
    }
    cs->grads = grads;
    cs->grad_src = sg->row_gradients;
    cs->grad_msg = &c->req.msg;
    return GRPC_STATUS_OK;
  }
  size_t n = (size_t)sl->total_sample_count * row_bytes;
  const bool placed = sg->placed_gradients != 0;
  const uint64_t got = placed ? sg->placed_gradients : sg->gradients.len;
  if (got != n) {
    scps__wirefmt_name(&c->wire, name);
    snprintf(msg, len, "%s.%s: %llu bytes; stack '%s' needs total_sample_count %lld x %zu bytes (dim %d in %s) = %zu",
             field, placed ? "placed_gradients" : "gradients", (unsigned long long)got, sl->name,
             (long long)sl->total_sample_count, row_bytes, sl->dim, name, n);
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  cs->grads = grads;
  cs->grads_bf16 = c->wire.kind == SCPS_WIREFMT_BFLOAT16;
  cs->grad_src = placed ? (scps_req_span){*placed_at, (size_t)got} : sg->gradients;
  cs->grad_msg = placed ? &c->shm_msg : &c->req.msg;
  if (placed) *placed_at += (size_t)got;
  return GRPC_STATUS_OK;
}

/* The range of a segment the stacks by sample through shared memory take
 * (ApplyGradientsRequest.gradients_placement), held by the call and seen
 * as slices in c->shm_msg. */
static grpc_status_code take_placement(scps_call *c, uint64_t placed, char *msg, size_t len) {
  const scps_request *req = &c->req;
  if (!req->placement.has || req->placement.length != placed) {
    snprintf(msg, len,
             "gradients_placement: %s, for stacks whose placed_gradients sum to %llu bytes",
             req->placement.has ? "length differs" : "missing", (unsigned long long)placed);
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  uint8_t *at = NULL;
  if (req->placement.offset % 64 == 0)
    c->shm_seg = scps__shm_acquire(c->srv->shm, req->placement.segment, req->placement.segment_len,
                                  req->placement.offset, req->placement.length, &at);
  if (!c->shm_seg) {
    snprintf(msg, len,
             "gradients_placement: no segment attached to this process holds bytes [%llu, %llu) of that handle (the "
             "process restarted, or the client's side channel closed; the offset must be a multiple of 64); nothing "
             "was applied",
             (unsigned long long)req->placement.offset,
             (unsigned long long)(req->placement.offset + req->placement.length));
    return GRPC_STATUS_FAILED_PRECONDITION;
  }
  grpc_slice sl = grpc_slice_from_static_buffer(at, (size_t)placed);
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&sl, 1);
  int rc = bb ? scps__slices_init(&c->shm_msg, bb) : SCPS_ENOMEM;
  if (bb) grpc_byte_buffer_destroy(bb);
  if (rc) {
    snprintf(msg, len, "ApplyGradients: out of memory");
    return GRPC_STATUS_RESOURCE_EXHAUSTED;
  }
  return GRPC_STATUS_OK;
}

static void apply_admitted(scps_budget_waiter *w, bool admitted, size_t in_use, size_t limit);

/* Floats of scratch a stack's gradients take: at most what its bytes, with
 * placed of them in a segment, can decode to, and at most what the stack
 * it names can hold (total_sample_count x dim by sample, a vector per listed
 * row by row), so a narrow format's claimed bytes cannot reserve more than
 * a well-formed request needs (a stack the server does not hold: none; the
 * request is refused before anything is written). The same at admission
 * and when laid out. */
static size_t stack_values(const scps_call *c, const scps_req_stack *sg, uint64_t placed) {
  const size_t most = scps__wirefmt_values_max(&c->wire, sg->gradients.len + sg->row_gradients.len + (size_t)placed);
  const int st = sg->has_partitions && sg->partitions.stack
                     ? scps__layout_find_stack(c->srv->layout, sg->partitions.stack) : -1;
  if (st < 0) return 0;
  const scps_stack_layout *sl = &c->srv->layout->stacks[st];
  const size_t rows = sg->row_gradients.len ? sg->partitions.rows.len / sizeof(uint32_t)
                                            : (size_t)sl->total_sample_count;
  const size_t cap = rows * (size_t)sl->dim;
  return most < cap ? most : cap;
}

void scps__cmd_push(scps_call *c) {
  if (scps__restore_refused(c)) return;
  if (!scps__cmd_data_read(c, SCPS_REQUEST_APPLY)) return;
  const scps_request *req = &c->req;
  char msg[SCPS_ERROR_MSG_MAX + 128];
  grpc_status_code st = scps__saver_check_request(c, req->config_fingerprint.data, req->config_fingerprint.len,
                                                 req->process_index, req->step, msg, sizeof msg);
  if (st == GRPC_STATUS_OK) st = scps__restore_check_state(c, req->state_id, msg, sizeof msg);
  bool has_lr = req->has_learning_rate;
  /* The optimizers take the rate as float32: above FLT_MAX it would be
   * infinite there. */
  if (st == GRPC_STATUS_OK && has_lr && !(req->learning_rate >= 0 && req->learning_rate <= FLT_MAX)) {
    snprintf(msg, sizeof msg, "learning_rate %g: must be >= 0 and finite in float32 (<= %g)", req->learning_rate,
             (double)FLT_MAX);
    st = GRPC_STATUS_INVALID_ARGUMENT;
  }
  if (st == GRPC_STATUS_OK)
    st = scps__cmd_data_check_format(c, (int)req->format, &req->exmy, "gradient_format", msg, sizeof msg);
  if (st == GRPC_STATUS_OK && scps__cmd_data_alloc_stacks(c, req->n_stacks)) {
    scps__call_finish(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "ApplyGradients: out of memory", NULL, 0);
    return;
  }
  if (st != GRPC_STATUS_OK) {
    scps__call_finish(c, st, msg, NULL, 0);
    return;
  }
  /* The gradients as float32: bounded by what the request (or, placed,
   * the segment) holds, 2 or 4 bytes per value, or per eXmY row its codes,
   * so the room a client can make the server take is a fixed multiple of
   * its message's size, charged to the memory budget before it is taken. */
  size_t values = 0;
  uint64_t placed = 0;
  for (size_t i = 0; i < req->n_stacks; i++) {
    /* Placed gradients are bounded by the segment they lie in, so their
     * scratch is too (checked against the stacks' sizes once admitted). */
    const uint64_t p = req->stacks[i].placed_gradients > SCPS_SHM_SEGMENT_MAX ? SCPS_SHM_SEGMENT_MAX + 1
                                                                                : req->stacks[i].placed_gradients;
    placed += p;
    values += stack_values(c, &req->stacks[i], p);
  }
  if (placed > SCPS_SHM_SEGMENT_MAX) {
    snprintf(msg, sizeof msg, "placed_gradients: %llu bytes in all, more than a segment holds (%llu)",
             (unsigned long long)placed, (unsigned long long)SCPS_SHM_SEGMENT_MAX);
    scps__call_finish(c, GRPC_STATUS_INVALID_ARGUMENT, msg, NULL, 0);
    return;
  }
  scps__cmd_data_wait_scratch(c, values, apply_admitted);
}

/* An ApplyGradients once its gradients' scratch is reserved in the memory
 * budget (on the thread that admitted it), or refused. */
static void apply_admitted(scps_budget_waiter *w, bool admitted, size_t in_use, size_t limit) {
  scps_call *c = scps__call_of_wait(w);
  scps_server *s = c->srv;
  const scps_request *req = &c->req;
  char msg[SCPS_ERROR_MSG_MAX + 128], field[64];
  grpc_status_code st = GRPC_STATUS_OK;
  const bool has_lr = req->has_learning_rate;
  if (!admitted) {
    scps__cmd_data_refuse_memory(c, "its gradients' scratch", in_use, limit);
    return;
  }
  c->scratch = scps__scratch_take(s->scratch, w->need / sizeof(float), &c->scratch_cap);
  if (!c->scratch) {
    scps__call_finish(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "ApplyGradients: out of memory for gradients", NULL, 0);
    return;
  }
  size_t grads_at = 0, placed_at = 0;
  uint64_t placed = 0;
  for (size_t i = 0; i < req->n_stacks; i++) placed += req->stacks[i].placed_gradients;
  for (size_t i = 0; st == GRPC_STATUS_OK && i < req->n_stacks; i++) {
    snprintf(field, sizeof field, "stacks[%zu]", i);
    scps_req_stack *sg = &req->stacks[i];
    if (!sg->has_partitions) {
      snprintf(msg, sizeof msg, "%s.partitions: missing", field);
      st = GRPC_STATUS_INVALID_ARGUMENT;
      break;
    }
    if (sg->gradients.len && sg->row_gradients.len) {
      snprintf(msg, sizeof msg, "%s: gradients (%zu bytes) and row_gradients (%zu bytes) are both set; send a "
               "stack's gradients by sample or by row, not both", field, sg->gradients.len, sg->row_gradients.len);
      st = GRPC_STATUS_INVALID_ARGUMENT;
      break;
    }
    if (sg->placed_gradients && (sg->gradients.len || sg->row_gradients.len)) {
      snprintf(msg, sizeof msg, "%s: placed_gradients (%llu bytes) and %s (%zu bytes) are both set; placed "
               "gradients come through shared memory only", field, (unsigned long long)sg->placed_gradients,
               sg->gradients.len ? "gradients" : "row_gradients", sg->gradients.len + sg->row_gradients.len);
      st = GRPC_STATUS_INVALID_ARGUMENT;
      break;
    }
    snprintf(field, sizeof field, "stacks[%zu].partitions", i);
    const bool by_sample = sg->gradients.len || sg->placed_gradients;
    st = by_sample ? scps__cmd_data_check_partitions(c, &sg->partitions, field, &c->stacks[i], msg, sizeof msg)
                   : check_row_partitions(c, &sg->partitions, field, &c->stacks[i], msg, sizeof msg);
    snprintf(field, sizeof field, "stacks[%zu]", i);
    if (st == GRPC_STATUS_OK && scps__cmd_data_duplicate(c, (int)i, c->stacks[i].stack)) {
      snprintf(msg, sizeof msg, "%s: stack '%s' listed twice", field, sg->partitions.stack);
      st = GRPC_STATUS_INVALID_ARGUMENT;
    }
    /* FTRL divides by the rate: 0 (or a rate that rounds to 0 in float32)
     * would turn every row it touches into NaN. */
    if (st == GRPC_STATUS_OK && has_lr && (float)req->learning_rate == 0.0f &&
        s->layout->stacks[c->stacks[i].stack].optimizer.type == SCPS_OPT_FTRL) {
      snprintf(msg, sizeof msg, "learning_rate %g: is 0 in float32, and %s (stack '%s') uses ftrl, which divides by "
               "it; push ftrl stacks with a rate > 0", req->learning_rate, field, sg->partitions.stack);
      st = GRPC_STATUS_INVALID_ARGUMENT;
    }
    if (st == GRPC_STATUS_OK) {
      st = check_gradients(c, sg, field, &c->stacks[i], c->scratch + grads_at, &placed_at, msg, sizeof msg);
      grads_at += stack_values(c, sg, sg->placed_gradients);
    }
  }
  /* The stacks' placed gradients name the segment range they lie in only
   * once each is known to be well formed. */
  if (st == GRPC_STATUS_OK && placed) st = take_placement(c, placed, msg, sizeof msg);
  if (st == GRPC_STATUS_OK) st = scps__partlimits_apply(c, msg, sizeof msg);
  if (st != GRPC_STATUS_OK) {
    scps__call_finish(c, st, msg, NULL, 0);
    return;
  }
  c->step.step = req->step;
  c->step.learning_rate = has_lr ? req->learning_rate : -1.0;
  atomic_init(&c->grads_bad, false);
  c->sum_stack = -1;
  c->fault_stack = -1;
  c->job.sc_fn = apply_sc;
  c->job.tc_fn = apply_tc;
  c->job.data = c;
  c->job.gang = true;
  scps__saver_submit_apply(s, c);
}
