/* scps_client_lookup: a Lookup sent to every server and its answers merged:
 * partials summed in process order, answers in distinct rows pooled here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scps_bf16.h"
#include "scps_client_int.h"

/* read_lookup_reply's name for scps__client_addr. */
static const char *addr_of(const scps_client *c, int p) { return scps__client_addr(c, p); }

/* Bytes of server p's answer to stack st of batch b. */
static size_t answer_bytes(const scps_client *c, const scps_batch *b, int p, int st) {
  const scps_stack_layout *sl = &c->layout->stacks[st];
  size_t values = b->distinct[st] ? scps__rows_count(&b->rows[p * c->layout->n_stacks + st])
                                  : (size_t)sl->total_sample_count;
  return values * scps__wirefmt_row_bytes(&c->act_fmt, (size_t)sl->dim);
}

/* Where each of server p's answers lies in a placed answer (scps.proto's
 * SegmentRange: back to back in the request's order): off[k] for the
 * stack in slot k, and the total. */
static size_t placed_offsets(const scps_client *c, const scps_batch *b, int p, size_t *off) {
  int ns = c->layout->n_stacks;
  for (int k = 0; k < ns; k++) off[k] = 0;
  for (int st = 0; st < ns; st++)
    if (b->slot[p * ns + st] >= 0) off[b->slot[p * ns + st]] = answer_bytes(c, b, p, st);
  size_t total = 0;
  for (int k = 0; k < b->n_sent[p]; k++) {
    size_t n = off[k];
    off[k] = total;
    total += n;
  }
  return total;
}

/* A placed answer: the response named the stacks; their values are read
 * from the batch's segment, through the same slice view as an answer that
 * came over the connection. */
static int read_placed(op *o, int p, scps_lookup_reply_stack *acts, char *why, size_t len) {
  scps_client *c = o->c;
  scps_batch *b = o->b;
  const int ns = c->layout->n_stacks;
  size_t *off = malloc(sizeof *off * (size_t)ns);
  if (!off) return SCPS_ENOMEM;
  size_t total = placed_offsets(c, b, p, off);
  int rc = 0;
  for (int st = 0; st < ns && !rc; st++) {
    int k = b->slot[p * ns + st];
    if (k < 0) continue;
    rc = scps__lookup_reply_check(&b->reply[p], &acts[k], k, c->layout->stacks[st].name, b->distinct[st], 0, why,
                                 len);
    acts[k].off = off[k];
    acts[k].len = answer_bytes(c, b, p, st);
  }
  free(off);
  if (rc) return rc;
  grpc_slice sl = grpc_slice_from_static_buffer(b->shm[p].base, total);
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&sl, 1);
  scps__slices_free(&b->reply[p]);
  rc = bb ? scps__slices_init(&b->reply[p], bb) : SCPS_ENOMEM;
  if (bb) grpc_byte_buffer_destroy(bb);
  if (!rc) atomic_fetch_add_explicit(&c->bytes_placed, total, memory_order_relaxed);
  if (rc) snprintf(why, len, "out of memory reading a placed answer");
  return rc;
}

/* Keeps a LookupResponse's slices in the batch and checks its stacks
 * against those the request listed; the merge then reads the activations
 * where gRPC put them, or where the server placed them. */
static int read_lookup_reply(rpc *r) {
  op *o = r->op;
  scps_client *c = o->c;
  scps_batch *b = o->b;
  const scps_layout *l = c->layout;
  int p = r->server, ns = l->n_stacks;
  scps_lookup_reply_stack *acts = &b->parsed[(size_t)p * (size_t)ns];
  char why[SCPS_ERROR_MSG_MAX];
  int rc = scps__lookup_reply_read(&b->reply[p], r->response, acts, ns, b->n_sent[p], why, sizeof why);
  bool placed = !rc && scps__lookup_reply_placed(&b->reply[p]);
  if (placed && !b->shm_asked[p]) {
    snprintf(why, sizeof why, "Lookup answer says placed, but no placement was asked for");
    rc = SCPS_EIO;
  } else if (placed) {
    rc = read_placed(o, p, acts, why, sizeof why);
  } else if (b->shm_asked[p]) {
    /* The server answered over the connection (it no longer knows the
     * segment, or this was a retry without placement): the segment is let
     * go, so an earlier attempt still writing it can reach no later answer. */
    scps__client_shm_drop(c, p, &b->shm[p]);
    b->shm_asked[p] = false;
  }
  for (int st = 0; st < ns && !rc && !placed; st++) {
    int k = b->slot[p * ns + st];
    if (k < 0) continue;
    rc = scps__lookup_reply_check(&b->reply[p], &acts[k], k, l->stacks[st].name, b->distinct[st],
                                 answer_bytes(c, b, p, st), why, sizeof why);
  }
  return rc ? scps_error_set(&r->err, rc, "server %d (%s): %s", p, addr_of(c, p), why) : 0;
}

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
/* eXmY rows [r0, r1) of an answer (row r at at + (r - r0) x row_bytes in
 * m) decoded into dst (row r at dst + (r - r0) x width, width <= dim
 * columns kept), added unless first; as many whole rows at a time as lie in
 * one slice (a row split between two is gathered first). Returns 0 or
 * SCPS_ERANGE for a row whose scale is out of range. */
static int merge_exmy(const scps_wirefmt *fmt, const scps_slices *m, size_t at, size_t rows, size_t dim,
                      size_t width, float *dst, bool first) {
  enum { FLOATS = 4096 };
  const size_t row_bytes = scps__wirefmt_row_bytes(fmt, dim), most = dim <= FLOATS ? FLOATS / dim : 1;
  uint8_t span[SCPS_DIM_MAX * sizeof(float) + 1];
  float tmp[FLOATS > SCPS_DIM_MAX ? FLOATS : SCPS_DIM_MAX];
  for (size_t r = 0, n, avail; r < rows; r += n, at += n * row_bytes) {
    const uint8_t *s = scps__slices_at(m, at, &avail);
    n = avail / row_bytes < rows - r ? avail / row_bytes : rows - r;
    if (!n) {
      s = scps__slices_span(m, at, row_bytes, span);
      n = 1;
    }
    if (width == dim) {
      if (scps__wirefmt_decode(fmt, s, n, dim, dst + r * width, !first, NULL)) return SCPS_ERANGE;
      continue;
    }
    n = n < most ? n : most;
    if (scps__wirefmt_decode(fmt, s, n, dim, tmp, false, NULL)) return SCPS_ERANGE;
    for (size_t i = 0; i < n; i++) {
      float *restrict d = dst + (r + i) * width;
      const float *restrict t = tmp + i * dim;
      if (first) memcpy(d, t, width * sizeof(float));
      else
        for (size_t j = 0; j < width; j++) d[j] += t[j];
    }
  }
  return 0;
}

static int merge_rows(const op *o, int f, size_t r0, size_t r1) {
  const scps_client *c = o->c;
  const scps_layout *l = c->layout;
  const scps_batch *b = o->b;
  int ns = l->n_stacks;
  const size_t vb = c->act_fmt.kind == SCPS_WIREFMT_BFLOAT16 ? 2 : sizeof(float);
  const size_t row_bytes = scps__wirefmt_row_bytes(&c->act_fmt, (size_t)l->stacks[l->features[f].stack].dim);
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
    size_t at = b->parsed[p * ns + k].off + ((size_t)fl->sample_offset + r0) * row_bytes;
    if (c->act_fmt.kind == SCPS_WIREFMT_EXMY) {
      if (merge_exmy(&c->act_fmt, m, at, r1 - r0, dim, width, dst + r0 * width, first)) return SCPS_ERANGE;
      first = false;
      continue;
    }
    if (first && vb == sizeof(float) && width == dim) {
      uint8_t *d = (uint8_t *)(dst + r0 * width);
      for (size_t left = (r1 - r0) * dim * vb, avail; left > 0; left -= avail, at += avail, d += avail) {
        const uint8_t *s = scps__slices_at(m, at, &avail);
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
        const uint8_t *s = scps__slices_at(m, at, &avail);
        n = avail / 2 < left ? avail / 2 : left;
        if (!n) {
          s = scps__slices_span(m, at, 2, tmp);
          n = 1;
        }
        scps__bf16_decode(s, d, n);
      }
      first = false;
      continue;
    }
    /* Each row's first width values (float32 and bfloat16 decode value by
     * value), unaligned in the slices. */
    for (size_t r = r0; r < r1; r++, at += dim * vb)
      scps__wirefmt_decode(&c->act_fmt, scps__slices_span(m, at, width * vb, tmp), 1, width, dst + r * width, !first,
                          NULL);
    first = false;
  }
  if (first) memset(dst + r0 * width, 0, (r1 - r0) * width * sizeof(float));
  return 0;
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
  atomic_int failed; /* a server's eXmY row had a scale out of range */
} merge_job;

/* Whether a view lookup leaves feature f in the answer where the server
 * placed it: one server, float32, pooled, the feature as wide as its
 * stack, so the answer's rows are the feature's rows as they are. */
static bool view_in_place(const op *o, int f) {
  const scps_client *c = o->c;
  const scps_batch *b = o->b;
  const scps_layout *l = c->layout;
  const int st = l->features[f].stack;
  return o->view_out && c->n == 1 && b->shm_asked[0] && b->slot[st] >= 0 && !b->distinct[st] &&
         c->act_fmt.kind == SCPS_WIREFMT_FLOAT32 &&
         l->table_specs[l->features[f].table].embedding_dim == l->stacks[st].dim;
}

static void merge_item(void *ctx, int item) {
  const merge_job *m = ctx;
  const scps_layout *l = m->o->c->layout;
  size_t f = (size_t)item / m->chunks, r0 = (size_t)item % m->chunks * MERGE_ROWS;
  if (view_in_place(m->o, (int)f)) return;
  size_t rows = (size_t)l->feature_specs[f].batch_size, r1 = r0 + MERGE_ROWS < rows ? r0 + MERGE_ROWS : rows;
  if (r0 < r1 && merge_rows(m->o, (int)f, r0, r1)) atomic_store(&((merge_job *)ctx)->failed, 1);
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
  const scps_lookup_reply_stack *a = &b->parsed[(size_t)p * (size_t)ns + (size_t)b->slot[i]];
  int rc = scps__rows_widen(&b->rows[i], &b->reply[p], a->off, (size_t)sl->dim, &c->act_fmt,
                            (size_t)sl->total_sample_count, !rows_in_place(c, b, st), NULL);
  if (rc) atomic_store(&j->failed, rc);
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
      if (lo < hi) scps__rows_pool(ra, (size_t)sl->dim, lo, hi, o->acts[f], so, wrote);
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
    scps__rows_pool(&j->o->b->rows[j->server[u] * l->n_stacks + st], (size_t)sl->dim, first, end, NULL, 0,
                   false);
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
  scps__client_prepare_parallel(c, j.n_answers, widen_item, &j);
  if (atomic_load(&j.failed)) {
    rc = atomic_load(&j.failed) == SCPS_ENOMEM
             ? scps_error_set(err, SCPS_ENOMEM, "lookup: out of memory widening the distinct rows of an answer")
             : scps_error_set(err, SCPS_EIO, "lookup: a server's answer in distinct rows holds an eXmY row whose "
                              "scale is out of range");
    goto out;
  }
  scps__client_prepare_parallel(c, j.items[j.n_units], pool_item, &j);
out:
  free(j.answer);
  free(j.server);
  free(j.stack);
  free(j.items);
  return rc;
}

/* The merge is a pass over every activation byte, spread over the prep pool (scps__client_prepare_parallel). */
static int merge_activations(op *o, scps_error *err) {
  scps_client *c = o->c;
  merge_job m = {o, merge_chunks(c->layout), 0};
  atomic_init(&m.failed, 0);
  scps__client_prepare_parallel(c, (int)(m.chunks * (size_t)c->layout->n_features), merge_item, &m);
  if (!atomic_load(&m.failed)) return 0;
  return scps_error_set(err, SCPS_EIO, "lookup: a server's answer holds an eXmY row whose scale is out of range");
}


/* A view lookup's result: each feature's rows in the placed answer, or in
 * the batch's array the merge filled. */
static void fill_view(op *o) {
  const scps_client *c = o->c;
  const scps_batch *b = o->b;
  const scps_layout *l = c->layout;
  for (int f = 0; f < l->n_features; f++) {
    const scps_feature_layout *fl = &l->features[f];
    if (!view_in_place(o, f)) {
      o->view_out[f] = b->view[f];
      continue;
    }
    const size_t row = (size_t)l->stacks[fl->stack].dim * sizeof(float);
    const size_t at = b->parsed[b->slot[fl->stack]].off + (size_t)fl->sample_offset * row;
    o->view_out[f] = (const float *)(const void *)(b->shm[0].base + at);
  }
}

/* The lookup's result: when every server answered, their answers merged
 * into the caller's arrays; the answers are let go either way. */
static int lookup_outcome(op *o, int first, int failures, scps_error *err) {
  int rc = first < 0 ? pool_rows(o, err) : 0;
  if (first < 0 && !rc) rc = merge_activations(o, err);
  if (first < 0 && !rc && o->view_out) fill_view(o);
  for (int p = 0; p < o->n_rpcs; p++) {
    scps__slices_free(&o->b->reply[p]);
    /* A server that failed may still be writing the segment: it is never
     * asked to place into it again. */
    if (o->b->shm_asked[p] && o->rpcs[p].rc) scps__client_shm_drop(o->c, p, &o->b->shm[p]);
    o->b->shm_asked[p] = false;
  }
  if (rc) return rc;
  return scps__client_op_failure(o, first, failures, err);
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
  int rc = scps__batch_claim(c, b, fn, err);
  if (rc) return rc;
  op *o = scps__client_op_create(c, SCPS_M_LOOKUP, c->n, deadline_ms);
  if (o) o->acts = malloc(sizeof *o->acts * (size_t)c->layout->n_features);
  for (int p = 0; o && o->acts && p < c->n; p++) {
    rpc *r = &o->rpcs[p];
    r->req = malloc(sizeof *r->req * 2);
    if (!r->req) break;
    r->req[0] = grpc_slice_ref(b->lookup[p]);
    r->n_req = 1;
    b->shm_asked[p] = false;
    size_t need = 0;
    for (int st = 0; st < c->layout->n_stacks; st++)
      if (b->slot[p * c->layout->n_stacks + st] >= 0) need += answer_bytes(c, b, p, st);
    /* Servers of wire_revision 2 also read the request from the segment,
     * after the answer's room (request_placement). */
    const size_t req_at = (need + 63) & ~(size_t)63, req_len = GRPC_SLICE_LENGTH(b->lookup[p]);
    const bool place_req = need && c->wire_revision >= 2;
    uint8_t *base = scps__client_shm_ready(c, p, &b->shm[p], place_req ? req_at + req_len + SCPS_REQUEST_PLACEMENT_MAX : need);
    if (base) {
      uint8_t place[SCPS_REQUEST_PLACEMENT_MAX];
      size_t n = (size_t)(scps__request_put_placement(place, 6, b->shm[p].handle, 0, need) - place);
      r->req[r->n_req++] = grpc_slice_from_copied_buffer((const char *)place, n);
      b->shm_asked[p] = true;
      if (place_req) {
        memcpy(base + req_at, GRPC_SLICE_START_PTR(b->lookup[p]), req_len);
        memcpy(base + req_at + req_len, place, n);
        uint8_t env[SCPS_REQUEST_PLACEMENT_MAX];
        size_t en = (size_t)(scps__request_put_placement(env, 7, b->shm[p].handle, req_at, req_len + n) - env);
        r->envelope = grpc_slice_from_copied_buffer((const char *)env, en);
        r->has_envelope = true;
        r->envelope_bytes = req_len + n;
      }
    }
  }
  if (!o || !o->acts || !o->rpcs[c->n - 1].n_req) {
    if (o) scps__client_op_destroy(o);
    atomic_store(&b->busy, false);
    return scps_error_set(err, SCPS_ENOMEM, "%s: out of memory", fn);
  }
  memcpy(o->acts, acts, sizeof *o->acts * (size_t)c->layout->n_features);
  o->b = b;
  o->read = read_lookup_reply;
  o->outcome = lookup_outcome;
  scps__client_op_launch(o, blocking, done, ud, out);
  return 0;
}

int scps_client_lookup(scps_client *c, scps_batch *b, float *const *acts, int64_t deadline_ms, scps_error *err) {
  op *o;
  int rc = lookup_start(c, b, acts, deadline_ms, true, NULL, NULL, &o, err);
  if (rc) return rc;
  scps__client_op_wait(o);
  return scps__client_op_finish(o, err);
}

/* The batch's own arrays for scps_client_lookup_view, made once. */
static int view_arrays(scps_client *c, scps_batch *b, scps_error *err) {
  const scps_layout *l = c->layout;
  if (!b->view && !(b->view = calloc((size_t)l->n_features, sizeof *b->view)))
    return scps_error_set(err, SCPS_ENOMEM, "scps_client_lookup_view: out of memory");
  for (int f = 0; f < l->n_features; f++) {
    size_t n = (size_t)l->feature_specs[f].batch_size * (size_t)l->table_specs[l->features[f].table].embedding_dim;
    if (!b->view[f] && !(b->view[f] = malloc(sizeof(float) * (n ? n : 1))))
      return scps_error_set(err, SCPS_ENOMEM, "scps_client_lookup_view: out of memory for feature '%s'",
                            l->feature_specs[f].name);
  }
  return 0;
}

int scps_client_lookup_view(scps_client *c, scps_batch *b, const float **acts, int64_t deadline_ms, scps_error *err) {
  if (!c || !b || !acts)
    return scps_error_set(err, SCPS_EINVAL, "scps_client_lookup_view: client, batch or acts is NULL");
  int rc = view_arrays(c, b, err);
  op *o;
  if (!rc) rc = lookup_start(c, b, b->view, deadline_ms, true, NULL, NULL, &o, err);
  if (rc) return rc;
  o->view_out = acts;
  scps__client_op_wait(o);
  return scps__client_op_finish(o, err);
}

int scps_client_lookup_async(scps_client *c, scps_batch *b, float *const *acts, int64_t deadline_ms,
                             scps_client_done done, void *ud) {
  if (!done) return SCPS_EINVAL;
  op *o;
  return lookup_start(c, b, acts, deadline_ms, false, done, ud, &o, NULL);
}
