#include "scps_cmd_topk.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scps_cmd_data.h"
#include "scps_knn.h"
#include "scps_restore.h"
#include "scps_scan.h"
#include "scps_scratch.h"
#include "scps_storage.h"

/* One local SparseCore's part: the table's ids it holds in the range are
 * first_id, first_id + N, ... (n of them) at consecutive local rows from
 * local_row, scanned in that order, so a row's ordinal maps back to its
 * id and a lower ordinal is a lower id. */
typedef struct topk_sc {
  int64_t first_id, n, local_row, bins;
  int32_t kept;    /* candidates per query it keeps: min(k, n) */
  int32_t got;     /* the same, fewer only where scores were NaN */
  int32_t *count;  /* m: candidates of each query */
  float *score;    /* m x kept */
  int64_t *id;     /* m x kept */
  void *scan_mem;  /* scps__scan_bytes */
  float *decode;   /* block x stack dim: rows decoded from their storage format, or NULL */
} topk_sc;

typedef struct scps_topk_call {
  int table, stack;
  int32_t m, dim, k, answer_k;
  scps_knn_score score;
  int64_t bins;           /* L for the cluster's rows searched; 0: exact */
  int64_t rows;           /* rows this process scans */
  float *queries, *prepared, *qsq; /* m x dim as sent, and prepared for the sgemm; m */
  float *answer_score;    /* m x answer_k */
  int64_t *answer_id;     /* m x answer_k */
  size_t bytes;           /* scratch the call needs */
  topk_sc sc[];
} scps_topk_call;

static size_t up64(size_t n) { return (n + 63) & ~(size_t)63; }

static void topk_reply(scps_call *c, grpc_status_code st, const char *msg) { scps__call_finish(c, st, msg, NULL, 0); }

/* The ids of [first, first + count) local SparseCore k holds: those
 * congruent to (sc - rotation) mod N, from *start on. */
static int64_t held_in_range(const scps_server *s, int t, int32_t k, int64_t first, int64_t count, int64_t *start) {
  const scps_layout *l = s->layout;
  const int64_t N = l->num_sc, sc = (int64_t)s->opts.process_index * s->S + k;
  const int64_t residue = ((sc - l->tables[t].shard_rotation) % N + N) % N;
  const int64_t a = first + ((residue - first % N) % N + N) % N;
  *start = a;
  return a < first + count ? (first + count - a + N - 1) / N : 0;
}

static grpc_status_code query_format(const Scps__V1__TopKRequest *req, scps_wirefmt *f, char *msg, size_t len) {
  scps_req_exmy x = {0};
  if (req->query_exmy) {
    x.has = true;
    x.exponent_bits = req->query_exmy->exponent_bits;
    x.mantissa_bits = req->query_exmy->mantissa_bits;
    x.has_bias = req->query_exmy->bias_present_case == SCPS__V1__EXMY_FORMAT__BIAS_PRESENT_BIAS;
    x.bias = req->query_exmy->bias;
    x.row_scale = req->query_exmy->row_scale;
  }
  scps_error err;
  if (scps__wirefmt_from_request((int32_t)req->query_format, &x, "query_format", f, &err)) {
    snprintf(msg, len, "%s", err.msg);
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  return GRPC_STATUS_OK;
}

/* Everything a request can be refused for before any memory is taken:
 * fills tk's sizes (allocated by the caller for S SparseCores). */
static grpc_status_code topk_check(scps_call *c, const Scps__V1__TopKRequest *req, scps_wirefmt *fmt,
                                   scps_topk_call **out, char *msg, size_t len) {
  scps_server *s = c->srv;
  const scps_layout *l = s->layout;
  grpc_status_code st = scps__call_check_view(c, req->config_fingerprint.data, req->config_fingerprint.len,
                                             req->process_index, msg, len);
  if (st != GRPC_STATUS_OK) return st;
  const int t = req->table ? scps__find_table(l->table_specs, l->n_tables, req->table) : -1;
  if (t < 0) {
    snprintf(msg, len, "table: unknown table '%.200s' (GetConfig lists the tables)", req->table ? req->table : "");
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  const scps_table_spec *spec = &l->table_specs[t];
  const int64_t vocab = spec->vocabulary_size, dim = spec->embedding_dim;
  if (req->num_queries < 1) {
    snprintf(msg, len, "num_queries: %u; send at least one query", req->num_queries);
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  if (req->score != SCPS__V1__TOP_KSCORE__TOPK_SCORE_DOT && req->score != SCPS__V1__TOP_KSCORE__TOPK_SCORE_COSINE &&
      req->score != SCPS__V1__TOP_KSCORE__TOPK_SCORE_NEG_SQUARED_L2) {
    snprintf(msg, len, "score: %d is no TopKScore (0 dot, 1 cosine, 2 negative squared L2)", (int)req->score);
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  if (!(req->recall_target > 0 && req->recall_target <= 1)) {
    snprintf(msg, len, "recall_target: %g not in (0, 1] (1 asks for the exact top k)", req->recall_target);
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  int64_t first = req->first_id, count = req->count;
  if (count == 0 && first != 0) {
    snprintf(msg, len, "first_id %lld with count 0: count 0 searches the whole table, so first_id must be 0",
             (long long)first);
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  if (count == 0) count = vocab;
  if (first < 0 || count < 0 || first > vocab - count) {
    snprintf(msg, len, "first_id %lld, count %lld: the range must lie in [0, %lld), the vocabulary of table '%s'",
             (long long)req->first_id, (long long)req->count, (long long)vocab, spec->name);
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  /* Beyond 2^30 the running top-k's 2k entries would not fit an int32
   * (and no message could carry such an answer). */
  if (req->k < 1 || (int64_t)req->k > count || req->k > (1u << 30)) {
    snprintf(msg, len, "k: %u not in [1, %lld], the rows searched of table '%s'", req->k, (long long)count,
             spec->name);
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  st = query_format(req, fmt, msg, len);
  if (st != GRPC_STATUS_OK) return st;
  if (fmt->kind == SCPS_WIREFMT_EXMY && dim % 8) {
    snprintf(msg, len, "query_format: eXmY queries need an embedding_dim that is a multiple of 8 (whole blocks of "
             "codes); table '%s' has %lld: send float32 or bfloat16", spec->name, (long long)dim);
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  const size_t row_bytes = scps__wirefmt_row_bytes(fmt, (size_t)dim);
  if (req->queries.len != (size_t)req->num_queries * row_bytes) {
    snprintf(msg, len, "queries: %zu bytes for num_queries %u x embedding_dim %lld of table '%s' (%zu bytes a "
             "query in this format, %zu in all)", req->queries.len, req->num_queries, (long long)dim, spec->name,
             row_bytes, (size_t)req->num_queries * row_bytes);
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  const int64_t answer_k = req->k;

  scps_topk_call *tk = calloc(1, sizeof *tk + sizeof tk->sc[0] * (size_t)s->S);
  if (!tk) {
    snprintf(msg, len, "TopK: out of memory");
    return GRPC_STATUS_RESOURCE_EXHAUSTED;
  }
  *out = tk;
  tk->table = t;
  tk->stack = l->tables[t].stack;
  tk->m = (int32_t)req->num_queries;
  tk->dim = (int32_t)dim;
  tk->k = (int32_t)req->k;
  tk->score = (scps_knn_score)req->score;
  tk->bins = scps__knn_bins(count, req->k, req->recall_target);
  const size_t m = (size_t)tk->m, sdim = (size_t)l->stacks[tk->stack].dim;
  size_t bytes = 2 * up64(m * (size_t)dim * sizeof(float)) + up64(m * sizeof(float));
  int64_t all = 0;
  for (int32_t k = 0; k < s->S; k++) {
    topk_sc *ts = &tk->sc[k];
    ts->n = held_in_range(s, t, k, first, count, &ts->first_id);
    ts->local_row = ts->n ? scps__layout_local_row(l, t, ts->first_id) : 0;
    /* A SparseCore with no more rows than bins keeps every row: exact. */
    ts->bins = tk->bins && ts->n > tk->bins ? tk->bins : 0;
    ts->kept = (int32_t)(ts->n < answer_k ? ts->n : answer_k);
    all += ts->kept;
    tk->rows += ts->n;
    const scps_scan_config cfg = {.score = tk->score, .m = tk->m, .dim = tk->dim, .k = tk->k, .bins = ts->bins};
    bytes += up64(m * sizeof(int32_t)) + up64(m * (size_t)ts->kept * (sizeof(float) + sizeof(int64_t)));
    if (ts->n) {
      bytes += up64(scps__scan_bytes(&cfg));
      if (l->stacks[tk->stack].storage.kind != SCPS_STORAGE_F32)
        bytes += up64((size_t)scps__scan_block_rows(tk->m) * sdim * sizeof(float));
    }
  }
  tk->answer_k = (int32_t)(all < answer_k ? all : answer_k);
  bytes += up64(m * (size_t)tk->answer_k * (sizeof(float) + sizeof(int64_t)));
  tk->bytes = bytes;
  /* What this process answers: its candidates, at most k a query. */
  const double answer = (double)req->num_queries * (double)tk->answer_k * 12.0 + 64.0;
  if (answer > (double)s->opts.max_message_bytes) {
    snprintf(msg, len, "num_queries %u x %d candidates (k %u) x 12 bytes: %.0f bytes of answer, over this "
             "process's message limit %lld (max_message_bytes): send fewer queries at a time", req->num_queries,
             tk->answer_k, req->k, answer, (long long)s->opts.max_message_bytes);
    return GRPC_STATUS_RESOURCE_EXHAUSTED;
  }
  return GRPC_STATUS_OK;
}

/* Carves the call's scratch (tk->bytes at base) into its arrays. */
static void topk_lay_out(scps_topk_call *tk, const scps_server *s, uint8_t *base) {
  const size_t m = (size_t)tk->m;
  const size_t sdim = (size_t)s->layout->stacks[tk->stack].dim;
  const bool f32 = s->layout->stacks[tk->stack].storage.kind == SCPS_STORAGE_F32;
  uint8_t *p = base;
  tk->queries = (float *)(void *)p;
  p += up64(m * (size_t)tk->dim * sizeof(float));
  tk->prepared = (float *)(void *)p;
  p += up64(m * (size_t)tk->dim * sizeof(float));
  tk->qsq = (float *)(void *)p;
  p += up64(m * sizeof(float));
  for (int32_t k = 0; k < s->S; k++) {
    topk_sc *ts = &tk->sc[k];
    ts->count = (int32_t *)(void *)p;
    p += up64(m * sizeof(int32_t));
    ts->id = (int64_t *)(void *)p;
    ts->score = (float *)(void *)(p + m * (size_t)ts->kept * sizeof(int64_t));
    p += up64(m * (size_t)ts->kept * (sizeof(float) + sizeof(int64_t)));
    if (ts->n) {
      const scps_scan_config cfg = {.score = tk->score, .m = tk->m, .dim = tk->dim, .k = tk->k, .bins = ts->bins};
      ts->scan_mem = p;
      p += up64(scps__scan_bytes(&cfg));
      if (!f32) {
        ts->decode = (float *)(void *)p;
        p += up64((size_t)scps__scan_block_rows(tk->m) * sdim * sizeof(float));
      }
    }
  }
  tk->answer_id = (int64_t *)(void *)p;
  tk->answer_score = (float *)(void *)(p + m * (size_t)tk->answer_k * sizeof(int64_t));
}

/* On SparseCore worker k: its rows as they are now (every push queued
 * before this job has been applied), block by block. */
static void topk_sc_run(scps_job *job, int32_t k) {
  scps_call *c = job->data;
  scps_server *s = c->srv;
  scps_topk_call *tk = c->topk;
  topk_sc *ts = &tk->sc[k];
  const int64_t N = s->layout->num_sc;
  if (!ts->n) {
    memset(ts->count, 0, sizeof *ts->count * (size_t)tk->m);
    return;
  }
  const scps_storage_codec *codec = scps__engine_codec(s->engine, tk->stack, 0);
  const size_t sdim = (size_t)s->layout->stacks[tk->stack].dim;
  pthread_rwlock_rdlock(&s->sc_locks[k]);
  const float *shard = scps__engine_shard(s->engine, tk->stack, k);
  const uint8_t *codes = scps__engine_codes(s->engine, tk->stack, k, 0);
  const scps_scan_config cfg = {.score = tk->score, .m = tk->m, .dim = tk->dim, .k = tk->k, .bins = ts->bins,
                                .queries = tk->queries, .prepared = tk->prepared, .qsq = tk->qsq};
  scps_scan scan;
  scps__scan_init(&scan, &cfg, ts->scan_mem);
  for (int64_t o = 0; o < ts->n; o += scan.block) {
    const int32_t nb = (int32_t)(ts->n - o < scan.block ? ts->n - o : scan.block);
    const int64_t row = ts->local_row + o;
    if (shard) {
      scps__scan_block(&scan, shard + (size_t)row * sdim, sdim, nb);
    } else {
      for (int32_t j = 0; j < nb; j++)
        scps__storage_decode_row(codec, codes + (size_t)(row + j) * codec->row_bytes, ts->decode + (size_t)j * sdim);
      scps__scan_block(&scan, ts->decode, sdim, nb);
    }
  }
  for (int32_t i = 0; i < tk->m; i++) {
    float *sc = ts->score + (size_t)i * (size_t)ts->kept;
    int64_t *id = ts->id + (size_t)i * (size_t)ts->kept;
    ts->count[i] = scps__scan_take(&scan, i, sc, id);
    for (int32_t j = 0; j < ts->count[i]; j++) id[j] = ts->first_id + id[j] * N;
  }
  pthread_rwlock_unlock(&s->sc_locks[k]);
}

/* On a TensorCore worker: every SparseCore's candidates merged per query
 * into the answer, short answers (rows whose scores were NaN) padded with
 * id -1. */
static void topk_tc_run(scps_job *job) {
  scps_call *c = job->data;
  scps_server *s = c->srv;
  scps_topk_call *tk = c->topk;
  const int S = s->S;
  int32_t len[SCPS_MAX_SC_PER_PROCESS];
  const float *sc[SCPS_MAX_SC_PER_PROCESS];
  const int64_t *id[SCPS_MAX_SC_PER_PROCESS];
  for (int32_t i = 0; i < tk->m; i++) {
    for (int k = 0; k < S; k++) {
      len[k] = tk->sc[k].count[i];
      sc[k] = tk->sc[k].score + (size_t)i * (size_t)tk->sc[k].kept;
      id[k] = tk->sc[k].id + (size_t)i * (size_t)tk->sc[k].kept;
    }
    float *os = tk->answer_score + (size_t)i * (size_t)tk->answer_k;
    int64_t *oi = tk->answer_id + (size_t)i * (size_t)tk->answer_k;
    int32_t got = scps__knn_merge(S, len, sc, id, tk->answer_k, os, oi); /* S <= 64: never -1 */
    for (; got < tk->answer_k; got++) {
      os[got] = NAN;
      oi[got] = -1;
    }
  }
  Scps__V1__TopKResponse r = SCPS__V1__TOP_KRESPONSE__INIT;
  r.num_queries = (uint32_t)tk->m;
  r.candidates = (uint32_t)tk->answer_k;
  r.n_ids = (size_t)tk->m * (size_t)tk->answer_k;
  r.ids = tk->answer_id;
  r.scores.data = (uint8_t *)tk->answer_score;
  r.scores.len = r.n_ids * sizeof(float);
  /* The bins some SparseCore used: 0 where every one held no more rows
   * than L and answered exactly. */
  int64_t used = 0;
  for (int k = 0; k < S; k++)
    if (tk->sc[k].bins > used) used = tk->sc[k].bins;
  r.bins = (uint32_t)used;
  r.rows_scanned = tk->rows;
  scps__call_finish_packed(c, &r.base);
}

static void topk_admitted(scps_budget_waiter *w, bool admitted, size_t in_use, size_t limit) {
  scps_call *c = scps__call_of_wait(w);
  scps_server *s = c->srv;
  scps_topk_call *tk = c->topk;
  if (!admitted) {
    scps__cmd_data_refuse_memory(c, "its scan scratch", in_use, limit);
    return;
  }
  c->scratch = scps__scratch_take(s->scratch, w->need / sizeof(float), &c->scratch_cap);
  if (!c->scratch) {
    topk_reply(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "TopK: out of memory for the scan");
    return;
  }
  topk_lay_out(tk, s, (uint8_t *)c->scratch);
  const Scps__V1__TopKRequest *req = (const Scps__V1__TopKRequest *)c->request;
  char msg[SCPS_ERROR_MSG_MAX + 128];
  scps_wirefmt fmt;
  scps_error err;
  if (query_format(req, &fmt, msg, sizeof msg) != GRPC_STATUS_OK) { /* checked before: cannot fail */
    topk_reply(c, GRPC_STATUS_INVALID_ARGUMENT, msg);
    return;
  }
  if (scps__wirefmt_decode(&fmt, req->queries.data, (size_t)tk->m, (size_t)tk->dim, tk->queries, false, &err)) {
    snprintf(msg, sizeof msg, "queries: %s", err.msg);
    topk_reply(c, GRPC_STATUS_INVALID_ARGUMENT, msg);
    return;
  }
  const size_t values = (size_t)tk->m * (size_t)tk->dim;
  for (size_t v = 0; v < values; v++)
    if (!isfinite(tk->queries[v])) {
      snprintf(msg, sizeof msg, "queries[%zu][%zu] = %g: every query value must be finite", v / (size_t)tk->dim,
               v % (size_t)tk->dim, (double)tk->queries[v]);
      topk_reply(c, GRPC_STATUS_INVALID_ARGUMENT, msg);
      return;
    }
  memcpy(tk->prepared, tk->queries, sizeof *tk->queries * values);
  scps__knn_prepare_queries(tk->score, tk->prepared, (size_t)tk->m, (size_t)tk->dim, tk->qsq);
  c->job.sc_fn = topk_sc_run;
  c->job.tc_fn = topk_tc_run;
  c->job.data = c;
  c->job.gang = false;
  scps__pipeline_submit(s->pipeline, &c->job);
}

void scps__cmd_topk(scps_call *c) {
  if (scps__restore_refused(c)) return;
  Scps__V1__TopKRequest *req =
      (Scps__V1__TopKRequest *)scps__call_read_request(c, &scps__v1__top_krequest__descriptor);
  if (!req) return;
  char msg[SCPS_ERROR_MSG_MAX + 128];
  scps_wirefmt fmt;
  grpc_status_code st = topk_check(c, req, &fmt, &c->topk, msg, sizeof msg);
  if (st != GRPC_STATUS_OK) {
    topk_reply(c, st, msg);
    return;
  }
  scps__cmd_data_wait_scratch(c, (c->topk->bytes + sizeof(float) - 1) / sizeof(float), topk_admitted);
}
