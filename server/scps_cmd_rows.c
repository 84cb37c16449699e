#include "scps_cmd_rows.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Ids of [first, first + count) that local SparseCore k of this process
 * holds of table t: those congruent to (sc - rotation) mod N. */
static int64_t held_in_range(const scps_server *s, int t, int32_t k, int64_t first, int64_t count, int64_t *start) {
  const scps_layout *l = s->layout;
  const int64_t N = l->num_sc, sc = (int64_t)s->opts.process_index * s->S + k;
  const int64_t residue = ((sc - l->tables[t].shard_rotation) % N + N) % N;
  const int64_t a = first + ((residue - first % N) % N + N) % N;
  *start = a;
  return a < first + count ? (first + count - a + N - 1) / N : 0;
}

static int cmp_id(const void *x, const void *y) {
  const int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
  return (a > b) - (a < b);
}

/* The ids to answer, into *out (malloc'd, *n of them), or a status and msg. */
static grpc_status_code ids_to_read(const scps_call *c, const Scps__V1__ReadRowsRequest *req, int t, int64_t **out,
                                    size_t *n, char *msg, size_t len) {
  const scps_server *s = c->srv;
  const scps_layout *l = s->layout;
  const scps_table_spec *spec = &l->table_specs[t];
  const int64_t vocab = spec->vocabulary_size;
  *out = NULL;
  *n = 0;
  if (req->n_ids && (req->first_id || req->count)) {
    snprintf(msg, len, "ids (%zu of them) and a range (first_id %lld, count %lld) both given; send one",
             req->n_ids, (long long)req->first_id, (long long)req->count);
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  if (req->n_ids) {
    for (size_t i = 0; i < req->n_ids; i++) {
      const int64_t id = req->ids[i];
      if (id < 0 || id >= vocab) {
        snprintf(msg, len, "ids[%zu] = %lld: not in [0, %lld), the vocabulary of table '%s'", i, (long long)id,
                 (long long)vocab, spec->name);
        return GRPC_STATUS_INVALID_ARGUMENT;
      }
      const int32_t sc = scps__layout_sc_of(l, t, id), p = scps__layout_process_of_sc(l, sc);
      if (p != s->opts.process_index) {
        snprintf(msg, len, "ids[%zu] = %lld of table '%s' lives on process %d (SparseCore %d), not on this process "
                 "%d: send each id to the process that holds it", i, (long long)id, spec->name, p, sc,
                 s->opts.process_index);
        return GRPC_STATUS_INVALID_ARGUMENT;
      }
    }
    *n = req->n_ids;
  } else {
    if (req->first_id < 0 || req->count < 0 || req->first_id > vocab - req->count) {
      snprintf(msg, len, "first_id %lld, count %lld: the range must lie in [0, %lld), the vocabulary of table '%s'",
               (long long)req->first_id, (long long)req->count, (long long)vocab, spec->name);
      return GRPC_STATUS_INVALID_ARGUMENT;
    }
    int64_t start;
    for (int32_t k = 0; k < s->S; k++) *n += (size_t)held_in_range(s, t, k, req->first_id, req->count, &start);
  }
  const int slots = scps__optimizer_num_slots(spec->optimizer.type);
  const double bytes = (double)*n * ((1.0 + slots) * spec->embedding_dim * 4.0 + 10.0);
  if (bytes > (double)s->opts.max_message_bytes) {
    snprintf(msg, len, "ReadRows: %zu ids x (1 + %d slots) x embedding_dim %d x 4 bytes: %.0f bytes, over this "
             "process's message limit %lld (max_message_bytes): ask for fewer ids at a time", *n, slots,
             spec->embedding_dim, bytes, (long long)s->opts.max_message_bytes);
    return GRPC_STATUS_RESOURCE_EXHAUSTED;
  }
  *out = malloc(sizeof **out * (*n ? *n : 1));
  if (!*out) {
    snprintf(msg, len, "ReadRows: out of memory for %zu ids", *n);
    return GRPC_STATUS_RESOURCE_EXHAUSTED;
  }
  if (req->n_ids) {
    memcpy(*out, req->ids, sizeof **out * *n);
    return GRPC_STATUS_OK;
  }
  size_t at = 0;
  for (int32_t k = 0; k < s->S; k++) {
    int64_t start, m = held_in_range(s, t, k, req->first_id, req->count, &start);
    for (int64_t j = 0; j < m; j++) (*out)[at++] = start + j * l->num_sc;
  }
  qsort(*out, *n, sizeof **out, cmp_id);
  return GRPC_STATUS_OK;
}

void scps__cmd_rows_read(scps_call *c) {
  scps_server *s = c->srv;
  const scps_layout *l = s->layout;
  Scps__V1__ReadRowsRequest *req =
      (Scps__V1__ReadRowsRequest *)scps__call_read_request(c, &scps__v1__read_rows_request__descriptor);
  if (!req) return;
  char msg[SCPS_ERROR_MSG_MAX];
  grpc_status_code st = scps__call_check_view(c, req->config_fingerprint.data, req->config_fingerprint.len,
                                             req->process_index, msg, sizeof msg);
  int t = -1;
  if (st == GRPC_STATUS_OK) {
    t = req->table ? scps__find_table(l->table_specs, l->n_tables, req->table) : -1;
    if (t < 0) {
      snprintf(msg, sizeof msg, "table: unknown table '%.200s' (GetConfig lists the tables)",
               req->table ? req->table : "");
      st = GRPC_STATUS_INVALID_ARGUMENT;
    }
  }
  int64_t *ids = NULL;
  size_t n = 0;
  if (st == GRPC_STATUS_OK) st = ids_to_read(c, req, t, &ids, &n, msg, sizeof msg);
  if (st != GRPC_STATUS_OK) {
    scps__call_finish(c, st, msg, NULL, 0);
    free(ids);
    return;
  }
  const scps_table_spec *spec = &l->table_specs[t];
  const size_t dim = (size_t)spec->embedding_dim;
  const int slots = scps__optimizer_num_slots(spec->optimizer.type);
  /* The rows, then each slot's values, then one id's slots as the engine
   * reads them. */
  float *values = malloc(sizeof *values * (n * dim * (size_t)(1 + slots) + (size_t)slots * dim + 1));
  if (!values) {
    scps__call_finish(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "ReadRows: out of memory for the answer", NULL, 0);
    free(ids);
    return;
  }
  float *one = values + n * dim * (size_t)(1 + slots);
  for (int k = 0; k < s->S; k++) pthread_rwlock_rdlock(&s->sc_locks[k]);
  for (size_t i = 0; i < n; i++) {
    scps_error err;
    /* Checked above: in range and held here, so it cannot fail. */
    if (scps__engine_read_row(s->engine, t, ids[i], values + i * dim, one, &err)) memset(one, 0, sizeof *one * dim);
    for (int k = 0; k < slots; k++)
      memcpy(values + ((size_t)(1 + k) * n + i) * dim, one + (size_t)k * dim, sizeof *one * dim);
  }
  for (int k = s->S - 1; k >= 0; k--) pthread_rwlock_unlock(&s->sc_locks[k]);
  Scps__V1__ReadRowsResponse r = SCPS__V1__READ_ROWS_RESPONSE__INIT;
  Scps__V1__SlotValues sv[SCPS_MAX_SLOTS], *svp[SCPS_MAX_SLOTS];
  r.n_ids = n;
  r.ids = ids;
  r.embedding_dim = spec->embedding_dim;
  r.rows.data = (uint8_t *)values;
  r.rows.len = n * dim * sizeof *values;
  for (int k = 0; k < slots; k++) {
    scps__v1__slot_values__init(&sv[k]);
    sv[k].name = (char *)scps__optimizer_slot_name(spec->optimizer.type, k);
    sv[k].values.data = (uint8_t *)(values + (size_t)(1 + k) * n * dim);
    sv[k].values.len = n * dim * sizeof *values;
    svp[k] = &sv[k];
  }
  r.n_slots = (size_t)slots;
  r.slots = svp;
  scps__call_finish_packed(c, &r.base);
  free(values);
  free(ids);
}
