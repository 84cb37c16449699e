/* scps_client_topk: TopK: the same queries to every server, each answering
 * its best rows, merged here with an exact top-k. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scps.pb-c.h"
#include "scps_client_int.h"
#include "scps_knn.h"

int scps_topk_score_from_name(const char *name, scps_topk_score *out) {
  if (name && !strcmp(name, "dot")) *out = SCPS_TOPK_DOT;
  else if (name && !strcmp(name, "cosine")) *out = SCPS_TOPK_COSINE;
  else if (name && !strcmp(name, "l2")) *out = SCPS_TOPK_NEG_SQUARED_L2;
  else return SCPS_EINVAL;
  return 0;
}

const char *scps_topk_score_name(scps_topk_score s) {
  return s == SCPS_TOPK_DOT ? "dot" : s == SCPS_TOPK_COSINE ? "cosine" : s == SCPS_TOPK_NEG_SQUARED_L2 ? "l2" : "unknown";
}

void scps_topk_options_init(scps_topk_options *o) {
  memset(o, 0, sizeof *o);
  o->k = 10;
  o->score = SCPS_TOPK_DOT;
  o->recall_target = 1.0;
}

/* What the merge needs once every server answered. */
typedef struct topk_state {
  size_t m;
  int32_t k;
  int64_t *ids;
  float *scores;
  scps_topk_info *info;
} topk_state;

/* Every server's candidates checked and merged query by query. */
static int topk_outcome(op *o, int first, int failures, scps_error *err) {
  int rc = scps__client_op_failure(o, first, failures, err);
  if (rc) return rc;
  scps_client *c = o->c;
  topk_state *ts = o->topk;
  const int n = o->n_rpcs;
  int32_t *len = malloc(sizeof *len * (size_t)n * 2);
  const float **sc = malloc(sizeof *sc * (size_t)n);
  const int64_t **id = malloc(sizeof *id * (size_t)n);
  if (!len || !sc || !id) {
    free(len);
    free(sc);
    free(id);
    return scps_error_set(err, SCPS_ENOMEM, "scps_client_topk: out of memory");
  }
  int32_t *cand = len + n;
  int64_t rows = 0, bins = 0;
  for (int p = 0; p < n && !rc; p++) {
    const Scps__V1__TopKResponse *m = (const Scps__V1__TopKResponse *)o->rpcs[p].reply;
    cand[p] = (int32_t)m->candidates;
    if (m->num_queries != ts->m || m->candidates > (uint32_t)ts->k || m->n_ids != ts->m * m->candidates ||
        m->scores.len != m->n_ids * sizeof(float))
      rc = scps_error_set(err, SCPS_EIO, "server %d (%s): TopK answered %u queries x %u candidates (%zu ids, %zu "
                          "score bytes) for %zu queries and k %d", p, scps__client_addr(c, p), m->num_queries,
                          m->candidates, m->n_ids, m->scores.len, ts->m, ts->k);
    rows += m->rows_scanned;
    if ((int64_t)m->bins > bins) bins = m->bins;
  }
  for (size_t i = 0; i < ts->m && !rc; i++) {
    for (int p = 0; p < n; p++) {
      const Scps__V1__TopKResponse *m = (const Scps__V1__TopKResponse *)o->rpcs[p].reply;
      id[p] = m->ids + i * (size_t)cand[p];
      sc[p] = (const float *)(const void *)(m->scores.data + i * (size_t)cand[p] * sizeof(float));
      /* A short answer ends with id -1 (rows whose scores were NaN). */
      len[p] = cand[p];
      while (len[p] > 0 && id[p][len[p] - 1] < 0) len[p]--;
    }
    float *os = ts->scores + i * (size_t)ts->k;
    int64_t *oi = ts->ids + i * (size_t)ts->k;
    int32_t got = scps__knn_merge(n, len, sc, id, ts->k, os, oi);
    if (got < 0) {
      rc = scps_error_set(err, SCPS_ENOMEM, "scps_client_topk: out of memory merging %d servers' answers", n);
      break;
    }
    for (; got < ts->k; got++) {
      os[got] = NAN;
      oi[got] = -1;
    }
  }
  free(len);
  free(sc);
  free(id);
  if (!rc && ts->info) {
    ts->info->bins = (int32_t)bins;
    ts->info->rows_scanned = rows;
    ts->info->expected_recall = scps__knn_expected_recall(bins, ts->k);
  }
  return rc;
}

/* Checks the call and builds every server's request; *out is the
 * operation, ready to launch. quiet: errors as codes only (the
 * asynchronous form). */
static int topk_start(scps_client *c, const char *table, const float *queries, size_t n_queries,
                      const scps_topk_options *o, int64_t *ids, float *scores, scps_topk_info *info,
                      int64_t deadline_ms, op **out, scps_error *err) {
  if (!c || !table || !o || !n_queries || !queries || !ids || !scores)
    return scps_error_set(err, SCPS_EINVAL, "scps_client_topk: client, table, queries, options, ids or scores is "
                          "NULL, or n_queries is 0");
  if (deadline_ms <= 0)
    return scps_error_set(err, SCPS_EINVAL, "scps_client_topk: deadline_ms %lld must be > 0", (long long)deadline_ms);
  const scps_layout *l = c->layout;
  const int t = scps__find_table(l->table_specs, l->n_tables, table);
  if (t < 0) return scps_error_set(err, SCPS_ENOENT, "scps_client_topk: unknown table '%.200s'", table);
  const scps_table_spec *spec = &l->table_specs[t];
  const size_t dim = (size_t)spec->embedding_dim;
  const int64_t vocab = spec->vocabulary_size;
  if (o->score != SCPS_TOPK_DOT && o->score != SCPS_TOPK_COSINE && o->score != SCPS_TOPK_NEG_SQUARED_L2)
    return scps_error_set(err, SCPS_EINVAL, "scps_client_topk: score %d is no scps_topk_score", (int)o->score);
  if (!(o->recall_target > 0 && o->recall_target <= 1))
    return scps_error_set(err, SCPS_EINVAL, "scps_client_topk: recall_target %g not in (0, 1] (1: exact)",
                          o->recall_target);
  if (o->count == 0 && o->first_id != 0)
    return scps_error_set(err, SCPS_EINVAL, "scps_client_topk: first_id %lld with count 0 (the whole table): "
                          "first_id must be 0", (long long)o->first_id);
  const int64_t count = o->count ? o->count : vocab;
  if (o->first_id < 0 || count < 0 || o->first_id > vocab - count)
    return scps_error_set(err, SCPS_EINVAL, "scps_client_topk: first_id %lld, count %lld: the range must lie in "
                          "[0, %lld), the vocabulary of table '%s'", (long long)o->first_id, (long long)o->count,
                          (long long)vocab, spec->name);
  if (o->k < 1 || o->k > count || o->k > (1 << 30))
    return scps_error_set(err, SCPS_EINVAL, "scps_client_topk: k %d not in [1, %lld], the rows searched of table "
                          "'%s' (and at most 2^30)", o->k, (long long)count, spec->name);
  scps_wirefmt fmt;
  if (scps__wirefmt_parse(o->query_format[0] ? o->query_format : "float32", &fmt, err)) {
    char why[sizeof err->msg];
    snprintf(why, sizeof why, "%s", err->msg);
    return scps_error_set(err, SCPS_EINVAL, "scps_client_topk: query_format: %s", why);
  }
  if (fmt.kind == SCPS_WIREFMT_EXMY && dim % 8)
    return scps_error_set(err, SCPS_EINVAL, "scps_client_topk: query_format '%s' needs an embedding_dim that is a "
                          "multiple of 8; table '%s' has %zu", o->query_format, spec->name, dim);
  for (size_t v = 0; v < n_queries * dim; v++)
    if (!isfinite(queries[v]))
      return scps_error_set(err, SCPS_EINVAL, "scps_client_topk: queries[%zu][%zu] = %g: every query value must "
                            "be finite", v / dim, v % dim, (double)queries[v]);
  for (int p = 0; p < c->n; p++)
    if (c->servers[p].wire_revision < 4)
      return scps_error_set(err, SCPS_EMISMATCH, "server %d (%s) serves no TopK (its GetConfig wire_revision is "
                            "%u, TopK needs 4): upgrade it", p, scps__client_addr(c, p),
                            c->servers[p].wire_revision);
  const size_t row_bytes = scps__wirefmt_row_bytes(&fmt, dim);
  const double request = (double)n_queries * (double)row_bytes + 4096.0,
               answer = (double)n_queries * (double)o->k * 12.0 + 4096.0;
  if (request > (double)c->max_message_bytes || answer > (double)c->max_message_bytes)
    return scps_error_set(err, SCPS_EINVAL, "scps_client_topk: %zu queries (%.0f bytes) with k %d (%.0f bytes of "
                          "answer): over the servers' message limit of %lld bytes; send fewer queries at a time",
                          n_queries, request, o->k, answer, (long long)c->max_message_bytes);

  uint8_t *encoded = malloc(n_queries * row_bytes);
  topk_state *ts = calloc(1, sizeof *ts);
  op *oper = encoded && ts ? scps__client_op_create(c, SCPS_M_TOPK, c->n, deadline_ms) : NULL;
  if (!oper) {
    free(encoded);
    free(ts);
    return scps_error_set(err, SCPS_ENOMEM, "scps_client_topk: out of memory");
  }
  oper->topk = ts;
  oper->outcome = topk_outcome;
  *ts = (topk_state){n_queries, o->k, ids, scores, info};
  int rc = scps__wirefmt_encode(&fmt, queries, n_queries, dim, encoded, 0, 0, err);
  Scps__V1__TopKRequest req = SCPS__V1__TOP_KREQUEST__INIT;
  Scps__V1__ExmyFormat x = SCPS__V1__EXMY_FORMAT__INIT;
  scps_req_exmy rx;
  int32_t format;
  scps__wirefmt_to_request(&fmt, &format, &rx);
  req.query_format = (Scps__V1__FloatFormat)format;
  if (rx.has) {
    x.exponent_bits = rx.exponent_bits;
    x.mantissa_bits = rx.mantissa_bits;
    if (rx.has_bias) {
      x.bias_present_case = SCPS__V1__EXMY_FORMAT__BIAS_PRESENT_BIAS;
      x.bias = (int32_t)rx.bias;
    }
    x.row_scale = rx.row_scale;
    req.query_exmy = &x;
  }
  req.config_fingerprint.data = c->fingerprint;
  req.config_fingerprint.len = sizeof c->fingerprint;
  req.table = (char *)spec->name;
  req.num_queries = (uint32_t)n_queries;
  req.queries.data = encoded;
  req.queries.len = n_queries * row_bytes;
  req.k = (uint32_t)o->k;
  req.score = (Scps__V1__TopKScore)o->score;
  req.recall_target = o->recall_target;
  req.first_id = o->first_id;
  req.count = o->count;
  for (int p = 0; !rc && p < c->n; p++) {
    rpc *r = &oper->rpcs[p];
    req.process_index = p;
    r->req = malloc(sizeof *r->req);
    if (!r->req) {
      rc = scps_error_set(err, SCPS_ENOMEM, "scps_client_topk: out of memory");
      break;
    }
    const size_t len = scps__v1__top_krequest__get_packed_size(&req);
    r->req[0] = grpc_slice_malloc(len);
    scps__v1__top_krequest__pack(&req, GRPC_SLICE_START_PTR(r->req[0]));
    r->n_req = 1;
  }
  free(encoded);
  if (rc) {
    scps__client_op_destroy(oper);
    return rc;
  }
  *out = oper;
  return 0;
}

int scps_client_topk(scps_client *c, const char *table, const float *queries, size_t n_queries,
                     const scps_topk_options *o, int64_t *ids, float *scores, scps_topk_info *info,
                     int64_t deadline_ms, scps_error *err) {
  op *oper;
  int rc = topk_start(c, table, queries, n_queries, o, ids, scores, info, deadline_ms, &oper, err);
  if (rc) return rc;
  scps__client_op_launch(oper, true, NULL, NULL, &oper);
  scps__client_op_wait(oper);
  return scps__client_op_finish(oper, err);
}

int scps_client_topk_async(scps_client *c, const char *table, const float *queries, size_t n_queries,
                           const scps_topk_options *o, int64_t *ids, float *scores, scps_topk_info *info,
                           int64_t deadline_ms, scps_client_done done, void *ud) {
  op *oper;
  scps_error err;
  int rc = topk_start(c, table, queries, n_queries, o, ids, scores, info, deadline_ms, &oper, &err);
  if (rc) return rc;
  scps__client_op_launch(oper, false, done, ud, &oper);
  return 0;
}
