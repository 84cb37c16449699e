/* scps_client_push: ApplyGradients: the trainer's gradients laid out per
 * stack and sent to every server by sample or by row (summed here), and
 * what a server's request for a checkpoint in its answer leads to. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "scps.pb-c.h"
#include "scps_bf16.h"
#include "scps_client_int.h"

/* A push's gradients laid out per stack, one feature per item of
 * scps__client_prepare_parallel: out[st] is stack st's [total_sample_count
 * x dim] values in the wire's format (NULL when the batch does not use the
 * stack), bad_at[f] the first NaN or infinity of feature f (once rounded,
 * in bfloat16) or -1. seed[st]: the stochastic rounding of stack st's
 * eXmY gradients. */
typedef struct grad_job {
  const scps_layout *l;
  const float *const *grads;
  void **out;
  const scps_wirefmt *fmt;
  const uint64_t *seed;
  int64_t *bad_at;
} grad_job;

/* The seed of stochastic rounding for a push's stack: a function of step
 * and stack (never 0, which would round to nearest). */
static uint64_t grad_seed(int64_t step, int st) {
  uint64_t z = (uint64_t)step * UINT64_C(0x9e3779b97f4a7c15) + (uint64_t)st + 1;
  z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
  return (z ^ (z >> 31)) | 1;
}

/* Rows of a feature encoded to eXmY per call: padded to the stack's dim in
 * a buffer of at most 4096 floats. */
#define GRAD_ROWS_FLOATS 4096

/* eXmY: rows [r0, r1) of feature f (width columns of dim) padded with
 * zeros and encoded as rows first + r0 ... of its stack. Non-finite values
 * were counted by the caller; the encoder saturates infinities. */
static void grad_encode_exmy(const grad_job *j, int f, size_t dim, size_t width, size_t first) {
  const scps_feature_layout *fl = &j->l->features[f];
  const size_t rows = (size_t)j->l->feature_specs[f].batch_size, step = dim <= GRAD_ROWS_FLOATS ? GRAD_ROWS_FLOATS / dim : 1;
  const size_t row_bytes = scps__wirefmt_row_bytes(j->fmt, dim);
  float tmp[GRAD_ROWS_FLOATS];
  for (size_t r0 = 0; r0 < rows; r0 += step) {
    const size_t n = rows - r0 < step ? rows - r0 : step;
    for (size_t r = 0; r < n; r++) {
      memcpy(tmp + r * dim, j->grads[f] + (r0 + r) * width, width * sizeof(float));
      memset(tmp + r * dim + width, 0, (dim - width) * sizeof(float));
    }
    uint8_t *d = (uint8_t *)j->out[fl->stack] + (first + r0) * row_bytes;
    if (scps__wirefmt_encode(j->fmt, tmp, n, dim, d, j->seed[fl->stack], (first + r0) * dim, NULL)) return;
  }
}

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
  const bool bf16 = j->fmt->kind == SCPS_WIREFMT_BFLOAT16, exmy = j->fmt->kind == SCPS_WIREFMT_EXMY;
  uint32_t nonfinite = 0;
  for (size_t r = 0; r < rows; r++) {
    const float *restrict s = src + r * width;
    if (bf16) {
      uint16_t *restrict d = (uint16_t *)j->out[fl->stack] + first + r * dim;
      for (size_t c = 0; c < width; c++) {
        uint16_t h = scps__bf16_from_f32(s[c]);
        nonfinite |= (uint32_t)((h & 0x7f80u) == 0x7f80u);
        d[c] = h;
      }
      for (size_t c = width; c < dim; c++) d[c] = 0;
      continue;
    }
    if (exmy) {
      for (size_t c = 0; c < width; c++) {
        uint32_t bits;
        memcpy(&bits, &s[c], sizeof bits);
        nonfinite |= (uint32_t)((bits & 0x7f800000u) == 0x7f800000u);
      }
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
  if (exmy && !nonfinite) grad_encode_exmy(j, f, dim, width, (size_t)fl->sample_offset);
  for (size_t i = 0; nonfinite && i < rows * width; i++)
    if (!isfinite(bf16 ? scps__bf16_to_f32(scps__bf16_from_f32(src[i])) : src[i])) {
      j->bad_at[f] = (int64_t)i;
      break;
    }
}

/* Entries summed per item of scps__client_prepare_parallel (whole rows, so about this many):
 * by entries, not rows, since a row of a small table may have thousands,
 * and items of equal work keep every thread busy to the end. */
#define ROW_ITEM_ENTRIES 8192

/* The end of the item of partition k of ra that starts at row r: the row
 * after the one holding entry ROW_ITEM_ENTRIES past r's first entry, or the
 * partition's end. */
static uint32_t row_item_end(const scps_rows *ra, int k, uint32_t r) {
  const uint32_t end = ra->row_start[k + 1];
  size_t e0, e1;
  scps__rows_entries(ra, r, &e0, &e1);
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
  int64_t step; /* seeds eXmY's stochastic rounding, with the pair */
} row_job;

static void row_item(void *ctx, int u) {
  row_job *j = ctx;
  const int ns = j->c->layout->n_stacks;
  const int st = (int)(j->pair[u] % (size_t)ns);
  j->bad[u] = scps__rows_sum_gradients(&j->b->rows[j->pair[u]], &j->src[st], j->r0[u], j->r1[u],
                                      (size_t)j->c->layout->stacks[st].dim, &j->c->grad_fmt,
                                      grad_seed(j->step, ns + (int)j->pair[u]), j->out[u]);
}

/* Why row r of pair i summed to a value that is not finite: a gradient that
 * is not (named), or the sum overflowed. */
static int bad_row_sum(const scps_client *c, const scps_batch *b, const float *const *grads, size_t i, uint32_t r,
                       const char *fn, scps_error *err) {
  const scps_layout *l = c->layout;
  const int ns = l->n_stacks, st = (int)(i % (size_t)ns), p = (int)(i / (size_t)ns);
  const scps_rows *ra = &b->rows[i];
  size_t e0, e1;
  scps__rows_entries(ra, r, &e0, &e1);
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
  char name[SCPS_WIREFMT_NAME_MAX];
  scps__wirefmt_name(&c->grad_fmt, name);
  return scps_error_set(err, SCPS_EINVAL, "%s: the gradients of stack '%s' row %u (SparseCore %d, server %d) sum to "
                        "a value that is not finite in %s (nothing was sent)",
                        fn, l->stacks[st].name, ra->local[r], p * c->S + k, p, name);
}

/* Sums the gradients of every (server, stack) pushed by row into that
 * pair's buffer, after its partitions and the row_gradients prefix, on
 * scps__client_prepare_parallel. rest[i] is where the sums go. */
static int sum_rows(scps_client *c, scps_batch *b, const float *const *grads, int64_t step, uint8_t **rest,
                    const char *fn, scps_error *err) {
  const scps_layout *l = c->layout;
  const size_t pairs = (size_t)c->n * (size_t)l->n_stacks;
  size_t items = 0;
  for (size_t i = 0; i < pairs; i++)
    if (b->slot[i] >= 0 && b->by_row[i])
      for (int k = 0; k < c->S; k++)
        for (uint32_t r = b->rows[i].row_start[k]; r < b->rows[i].row_start[k + 1]; items++)
          r = row_item_end(&b->rows[i], k, r);
  if (!items) return 0;
  row_job j = {c, b, NULL, NULL, NULL, NULL, NULL, NULL, step};
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
    const size_t row_bytes = scps__wirefmt_row_bytes(&c->grad_fmt, (size_t)l->stacks[i % (size_t)l->n_stacks].dim);
    for (int k = 0; k < c->S; k++)
      for (uint32_t r = b->rows[i].row_start[k]; r < b->rows[i].row_start[k + 1]; r = j.r1[u++]) {
        j.pair[u] = i;
        j.r0[u] = r;
        j.r1[u] = row_item_end(&b->rows[i], k, r);
        j.out[u] = rest[i] + (size_t)r * row_bytes;
      }
  }
  scps__client_prepare_parallel(c, (int)items, row_item, &j);
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
  return (size_t)scps__rows_count(&b->rows[i]) * scps__wirefmt_row_bytes(&c->grad_fmt, dim);
}

/* Bytes of stack st's gradients by sample. */
static size_t grad_bytes(const scps_client *c, int st) {
  const scps_stack_layout *sl = &c->layout->stacks[st];
  return (size_t)sl->total_sample_count * scps__wirefmt_row_bytes(&c->grad_fmt, (size_t)sl->dim);
}

/* Gradients by sample through shared memory: per server the segment they
 * go to (base[p]; NULL: over the connection) and its bytes (need[p]), and
 * each stack's offset there (off[p * n_stacks + st]; SIZE_MAX: the server
 * takes the stack by row, or not at all), stacks in request order. */
typedef struct placed_plan {
  uint8_t **base;
  size_t *need;
  size_t *off;
} placed_plan;

static int plan_placement(scps_client *c, scps_batch *b, placed_plan *pl) {
  const size_t n = (size_t)c->n, ns = (size_t)c->layout->n_stacks;
  pl->base = calloc(n, sizeof *pl->base);
  pl->need = calloc(n, sizeof *pl->need);
  pl->off = malloc(sizeof *pl->off * n * ns);
  if (!pl->base || !pl->need || !pl->off) return SCPS_ENOMEM;
  for (size_t p = 0; p < n; p++) {
    for (size_t st = 0; st < ns; st++) {
      const size_t i = p * ns + st;
      pl->off[i] = SIZE_MAX;
      if (b->slot[i] < 0 || b->by_row[i]) continue;
      pl->off[i] = pl->need[p];
      pl->need[p] += grad_bytes(c, (int)st);
    }
    if (pl->need[p]) pl->base[p] = scps__client_shm_ready(c, (int)p, &b->shm[p], pl->need[p]);
  }
  return 0;
}

/* Each stack's gradients, written once (bufs[st]), copied to every other
 * server that takes them by sample: into its segment, or into a buffer for
 * the connection (gs[st]) when the first copy went to a segment. */
static int spread_placed(scps_client *c, scps_batch *b, const placed_plan *pl, void **bufs, grpc_slice *gs,
                         const char *fn, scps_error *err) {
  const int ns = c->layout->n_stacks;
  for (int p = 0; p < c->n; p++)
    for (int st = 0; st < ns; st++) {
      const size_t i = (size_t)p * (size_t)ns + (size_t)st, len = grad_bytes(c, st);
      if (pl->off[i] == SIZE_MAX) continue;
      if (pl->base[p]) {
        uint8_t *dst = pl->base[p] + pl->off[i];
        if (dst != bufs[st]) memcpy(dst, bufs[st], len);
      } else if (!GRPC_SLICE_LENGTH(gs[st])) {
        void *w = scps__client_buf_lend(&b->grad_buf[st], len, &gs[st]);
        if (!w)
          return scps_error_set(err, SCPS_ENOMEM, "%s: no memory for stack '%s''s gradients", fn,
                                c->layout->stacks[st].name);
        memcpy(w, bufs[st], len);
      }
    }
  return 0;
}

/* A server's answer: whether it asks for a checkpoint (its
 * --checkpoint-every timer fired). */
static int push_read(rpc *r) {
  ProtobufCMessage *m;
  int rc = scps__client_op_unpack(r, &m);
  if (rc) return rc;
  if (((const Scps__V1__ApplyGradientsResponse *)m)->checkpoint_due) atomic_store(&r->op->checkpoint_due, true);
  protobuf_c_message_free_unpacked(m, NULL);
  return 0;
}

/* A push that failed somewhere may have been applied elsewhere: say where.
 * A server that failed may still read the segment its gradients lie in:
 * no later push or lookup writes there again. */
static int push_outcome(op *o, int first, int failures, scps_error *err) {
  for (int p = 0; p < o->n_rpcs; p++) {
    if (o->b->shm_asked[p] && o->rpcs[p].rc) scps__client_shm_drop(o->c, p, &o->b->shm[p]);
    o->b->shm_asked[p] = false;
  }
  if (first < 0) return 0;
  char bad[128], good[128];
  scps__client_op_list_servers(o, true, bad, sizeof bad);
  scps__client_op_list_servers(o, false, good, sizeof good);
  return scps_error_set(err, o->rpcs[first].rc, "%s [step %lld not confirmed by servers %s; applied on %s]",
                        o->rpcs[first].err.msg, (long long)o->step, bad, good);
}

/* An asynchronous push every server applied, that one asked for a
 * checkpoint: the checkpoint policy takes it from here. */
static bool push_then(op *o, int *rc, scps_error *err) {
  if (*rc || !atomic_load(&o->checkpoint_due)) return false;
  return scps__client_checkpoint_due_async(o->c, o->step, o->done, o->ud);
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
  int rc = scps__batch_claim(c, b, fn, err);
  if (rc) return rc;
  const scps_layout *l = c->layout;
  int ns = l->n_stacks;
  grpc_slice *gs = calloc((size_t)ns, sizeof *gs);
  op *o = gs ? scps__client_op_create(c, SCPS_M_APPLY_GRADIENTS, c->n, deadline_ms) : NULL;
  if (!o) {
    free(gs);
    atomic_store(&b->busy, false);
    return scps_error_set(err, SCPS_ENOMEM, "%s: out of memory", fn);
  }
  for (int st = 0; st < ns; st++) gs[st] = grpc_empty_slice();
  void **bufs = calloc((size_t)ns, sizeof *bufs);
  int64_t *bad_at = calloc((size_t)l->n_features, sizeof *bad_at);
  placed_plan pl = {0};
  if (!bufs || !bad_at || plan_placement(c, b, &pl)) rc = scps_error_set(err, SCPS_ENOMEM, "%s: out of memory", fn);
  for (int st = 0; st < ns && !rc; st++) {
    bool by_sample = false;
    for (int p = 0; p < c->n; p++) {
      const size_t i = (size_t)p * (size_t)ns + (size_t)st;
      by_sample |= b->slot[i] >= 0 && !b->by_row[i];
    }
    if (!by_sample) continue;
    const scps_stack_layout *sl = &l->stacks[st];
    /* Written straight into the first segment that takes the stack, when
     * one does; into a buffer for the connection otherwise. */
    for (int p = 0; p < c->n && !bufs[st]; p++)
      if (pl.base[p] && pl.off[(size_t)p * (size_t)ns + (size_t)st] != SIZE_MAX)
        bufs[st] = pl.base[p] + pl.off[(size_t)p * (size_t)ns + (size_t)st];
    if (bufs[st]) continue;
    bufs[st] = scps__client_buf_lend(&b->grad_buf[st], grad_bytes(c, st), &gs[st]);
    if (!bufs[st]) rc = scps_error_set(err, SCPS_ENOMEM, "%s: no memory for stack '%s''s gradients", fn, sl->name);
  }
  if (!rc) {
    uint64_t *seed = malloc(sizeof *seed * (size_t)ns);
    for (int st = 0; seed && st < ns; st++) seed[st] = grad_seed(step, st);
    grad_job gj = {l, grads, bufs, &c->grad_fmt, seed, bad_at};
    if (!seed) rc = scps_error_set(err, SCPS_ENOMEM, "%s: out of memory", fn);
    else scps__client_prepare_parallel(c, l->n_features, grad_item, &gj);
    free(seed);
  }
  if (!rc) rc = spread_placed(c, b, &pl, bufs, gs, fn, err);
  /* The first bad value in stack order, then feature order. */
  for (int st = 0; st < ns && !rc; st++)
    for (int k = 0; k < l->stacks[st].n_features && !rc; k++) {
      int f = l->stacks[st].features[k];
      int64_t at = bad_at[f], width = l->table_specs[l->features[f].table].embedding_dim;
      if (at >= 0)
        rc = scps_error_set(err, SCPS_EINVAL, "%s: grads[%d] (feature '%s') sample %lld column %lld is %g; gradients "
                            "must be finite%s (nothing was sent)",
                            fn, f, l->feature_specs[f].name, (long long)(at / width), (long long)(at % width),
                            grads[f][at], c->grad_fmt.kind == SCPS_WIREFMT_BFLOAT16 ? ", also once rounded to bfloat16" : "");
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
    const size_t len = b->row_parts_len[i] + 1 + scps__pbw_varint_size(glen) + glen;
    uint8_t *w = scps__client_buf_lend(&b->row_buf[i], len, &rs[i]);
    if (!w) {
      rc = scps_error_set(err, SCPS_ENOMEM, "%s: no memory for stack '%s''s gradients by row", fn, sl->name);
      break;
    }
    w = scps__request_put_row_partitions(w, sl->name, ra->row_start, ra->n_sc, ra->local);
    rest[i] = scps__request_put_row_gradients_prefix(w, glen);
  }
  if (!rc) rc = sum_rows(c, b, grads, step, rest, fn, err);
  free(rest);
  uint8_t head[128], pre[64];
  int32_t grad_format;
  scps_req_exmy grad_exmy;
  scps__wirefmt_to_request(&c->grad_fmt, &grad_format, &grad_exmy);
  for (int p = 0; p < c->n && !rc; p++) {
    rpc *r = &o->rpcs[p];
    r->req = malloc(sizeof *r->req * (size_t)(2 + 4 * b->n_sent[p]));
    if (!r->req) {
      rc = scps_error_set(err, SCPS_ENOMEM, "%s: out of memory", fn);
      break;
    }
    uint8_t *w = scps__request_put_view(head, c->fingerprint, p);
    w = scps__request_put_step(w, step, learning_rate);
    w = scps__request_put_state_id(w, c->servers[p].state_id);
    w = scps__request_put_apply_format(w, grad_format, &grad_exmy);
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
        w = scps__request_put_apply_stack_prefix(pre, b->row_parts_len[i], glen);
        r->req[r->n_req++] = grpc_slice_from_copied_buffer((const char *)pre, (size_t)(w - pre));
        r->req[r->n_req++] = grpc_slice_ref(rs[i]);
        total += (size_t)(w - pre) + GRPC_SLICE_LENGTH(rs[i]);
        continue;
      }
      size_t plen = b->parts_len[i];
      if (pl.base[p]) {
        /* Placed: the partitions, then how many bytes of the segment. */
        const size_t glen = grad_bytes(c, st);
        w = scps__request_put_placed_stack_prefix(pre, plen, glen);
        r->req[r->n_req++] = grpc_slice_from_copied_buffer((const char *)pre, (size_t)(w - pre));
        r->req[r->n_req++] = grpc_slice_sub(b->lookup[p], b->parts_off[i], b->parts_off[i] + plen);
        w = scps__request_put_placed_gradients(pre, glen);
        r->req[r->n_req++] = grpc_slice_from_copied_buffer((const char *)pre, (size_t)(w - pre));
        total += plen + 2 * (size_t)(w - pre);
        continue;
      }
      size_t glen = GRPC_SLICE_LENGTH(gs[st]);
      w = scps__request_put_apply_stack_prefix(pre, plen, glen);
      r->req[r->n_req++] = grpc_slice_from_copied_buffer((const char *)pre, (size_t)(w - pre));
      total += (size_t)(w - pre);
      r->req[r->n_req++] = grpc_slice_sub(b->lookup[p], b->parts_off[i], b->parts_off[i] + plen);
      w = scps__request_put_gradients_prefix(pre, glen);
      r->req[r->n_req++] = grpc_slice_from_copied_buffer((const char *)pre, (size_t)(w - pre));
      r->req[r->n_req++] = grpc_slice_ref(gs[st]);
      total += (size_t)(w - pre) + plen + glen;
    }
    if (pl.base[p]) {
      uint8_t place[SCPS_REQUEST_PLACEMENT_MAX];
      w = scps__request_put_placement(place, 8, b->shm[p].handle, 0, pl.need[p]);
      r->req[r->n_req++] = grpc_slice_from_copied_buffer((const char *)place, (size_t)(w - place));
      b->shm_asked[p] = true;
      atomic_fetch_add_explicit(&c->bytes_placed_sent, pl.need[p], memory_order_relaxed);
    }
    if (c->max_message_bytes > 0 && total > (size_t)c->max_message_bytes)
      rc = scps_error_set(err, SCPS_ENOSPC,
                          "%s: the ApplyGradients request for server %d (%s) would be %zu bytes, over the "
                          "server's limit of %lld (nothing was sent)",
                          fn, p, scps__client_addr(c, p), total, (long long)c->max_message_bytes);
  }
  for (int st = 0; st < ns; st++) grpc_slice_unref(gs[st]);
  free(gs);
  for (size_t i = 0; rs && i < pairs; i++) grpc_slice_unref(rs[i]);
  free(rs);
  free(pl.base);
  free(pl.need);
  free(pl.off);
  if (rc) {
    scps__client_op_destroy(o);
    atomic_store(&b->busy, false);
    return rc;
  }
  o->b = b;
  o->step = step;
  o->read = push_read;
  o->outcome = push_outcome;
  o->then = push_then;
  scps__client_op_launch(o, blocking, done, ud, out);
  return 0;
}

int scps_client_apply_gradients(scps_client *c, scps_batch *b, const float *const *grads, int64_t step,
                                double learning_rate, int64_t deadline_ms, scps_error *err) {
  op *o;
  int rc = apply_start(c, b, grads, step, learning_rate, deadline_ms, true, NULL, NULL, &o, err);
  if (rc) return rc;
  scps__client_op_wait(o);
  const bool due = atomic_load(&o->checkpoint_due);
  rc = scps__client_op_finish(o, err);
  if (!rc && due) scps__client_checkpoint_due(c, step);
  return rc;
}

int scps_client_apply_gradients_async(scps_client *c, scps_batch *b, const float *const *grads, int64_t step,
                                      double learning_rate, int64_t deadline_ms, scps_client_done done, void *ud) {
  if (!done) return SCPS_EINVAL;
  op *o;
  return apply_start(c, b, grads, step, learning_rate, deadline_ms, false, done, ud, &o, NULL);
}
