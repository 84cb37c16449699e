/* scps_client_read_rows: ReadRows: given ids' rows and optimizer slots, each
 * read from the server that holds it, in pieces under the message limit. */
#include <stdlib.h>
#include <string.h>

#include "scps.pb-c.h"
#include "scps_client_int.h"

/* One piece of scps_client_read_rows: ids [0, n) of the caller's, each to
 * the server that holds it, every server's request in parallel (one with
 * none asks an empty range); each reply checked and scattered to the ids'
 * places in rows and slots. */
static int read_rows_piece(scps_client *c, int t, const int64_t *ids, size_t n, float *rows, float *slots,
                           int64_t deadline_ns, scps_error *err) {
  const scps_layout *l = c->layout;
  const scps_table_spec *spec = &l->table_specs[t];
  const size_t dim = (size_t)spec->embedding_dim;
  const int ns = scps__optimizer_num_slots(spec->optimizer.type);
  const int64_t left_ms = (deadline_ns - scps__client_op_now_ns()) / 1000000;
  if (left_ms <= 0) return scps_error_set(err, SCPS_ETIMEDOUT, "scps_client_read_rows: deadline passed");
  /* Per server, its ids and their places among the caller's. */
  size_t *place = malloc(sizeof *place * (n ? n : 1)), *start = calloc((size_t)c->n + 1, sizeof *start);
  int64_t *sorted = malloc(sizeof *sorted * (n ? n : 1));
  op *o = place && start && sorted ? scps__client_op_create(c, SCPS_M_READ_ROWS, c->n, left_ms) : NULL;
  int rc = o ? 0 : scps_error_set(err, SCPS_ENOMEM, "scps_client_read_rows: out of memory");
  for (size_t i = 0; !rc && i < n; i++) start[scps__layout_process_of_sc(l, scps__layout_sc_of(l, t, ids[i])) + 1]++;
  for (int p = 0; !rc && p < c->n; p++) start[p + 1] += start[p];
  for (size_t i = 0; !rc && i < n; i++) {
    const int p = scps__layout_process_of_sc(l, scps__layout_sc_of(l, t, ids[i]));
    size_t at = start[p]++;
    place[at] = i;
    sorted[at] = ids[i];
  }
  for (int p = c->n; !rc && p > 0; p--) start[p] = start[p - 1];
  if (!rc) start[0] = 0;
  Scps__V1__ReadRowsRequest req = SCPS__V1__READ_ROWS_REQUEST__INIT;
  req.config_fingerprint.data = c->fingerprint;
  req.config_fingerprint.len = sizeof c->fingerprint;
  req.table = (char *)spec->name;
  for (int p = 0; !rc && p < c->n; p++) {
    rpc *r = &o->rpcs[p];
    req.process_index = p;
    req.n_ids = start[p + 1] - start[p];
    req.ids = sorted + start[p];
    r->req = malloc(sizeof *r->req);
    if (!r->req) {
      rc = scps_error_set(err, SCPS_ENOMEM, "scps_client_read_rows: out of memory");
      break;
    }
    size_t len = scps__v1__read_rows_request__get_packed_size(&req);
    r->req[0] = grpc_slice_malloc(len);
    scps__v1__read_rows_request__pack(&req, GRPC_SLICE_START_PTR(r->req[0]));
    r->n_req = 1;
  }
  if (rc) {
    if (o) scps__client_op_destroy(o);
    free(place);
    free(start);
    free(sorted);
    return rc;
  }
  scps__client_op_launch(o, true, NULL, NULL, &o);
  scps__client_op_wait(o);
  rc = scps__client_op_outcome(o, err);
  for (int p = 0; !rc && p < c->n; p++) {
    const Scps__V1__ReadRowsResponse *m = (const Scps__V1__ReadRowsResponse *)o->rpcs[p].reply;
    const size_t k = start[p + 1] - start[p], bytes = k * dim * sizeof(float);
    bool ok = m->n_ids == k && m->embedding_dim == spec->embedding_dim && m->rows.len == bytes &&
              m->n_slots == (size_t)ns;
    for (size_t i = 0; ok && i < k; i++) ok = m->ids[i] == sorted[start[p] + i];
    for (int q = 0; ok && q < ns; q++)
      ok = m->slots[q]->values.len == bytes && !strcmp(m->slots[q]->name, scps__optimizer_slot_name(spec->optimizer.type, q));
    if (!ok) {
      rc = scps_error_set(err, SCPS_EIO, "server %d (%s): ReadRows answered %zu ids of dim %d with %zu slots for a "
                          "request of %zu ids of table '%s' (dim %zu, %d slots)", p, scps__client_addr(c, p), m->n_ids,
                          m->embedding_dim, m->n_slots, k, spec->name, dim, ns);
      break;
    }
    for (size_t i = 0; i < k; i++) {
      const size_t to = place[start[p] + i];
      memcpy(rows + to * dim, m->rows.data + i * dim * sizeof(float), dim * sizeof(float));
      for (int q = 0; slots && q < ns; q++)
        memcpy(slots + (to * (size_t)ns + (size_t)q) * dim, m->slots[q]->values.data + i * dim * sizeof(float),
               dim * sizeof(float));
    }
  }
  scps__client_op_destroy(o);
  free(place);
  free(start);
  free(sorted);
  return rc;
}

int scps_client_read_rows(scps_client *c, const char *table, const int64_t *ids, size_t n_ids, float *rows,
                          float *slots, int64_t deadline_ms, scps_error *err) {
  if (!c || !table || (n_ids && (!ids || !rows)))
    return scps_error_set(err, SCPS_EINVAL, "scps_client_read_rows: client, table, ids or rows is NULL");
  if (deadline_ms <= 0)
    return scps_error_set(err, SCPS_EINVAL, "scps_client_read_rows: deadline_ms %lld must be > 0",
                          (long long)deadline_ms);
  const scps_layout *l = c->layout;
  const int t = scps__find_table(l->table_specs, l->n_tables, table);
  if (t < 0) return scps_error_set(err, SCPS_ENOENT, "scps_client_read_rows: unknown table '%.200s'", table);
  const scps_table_spec *spec = &l->table_specs[t];
  for (size_t i = 0; i < n_ids; i++)
    if (ids[i] < 0 || ids[i] >= spec->vocabulary_size)
      return scps_error_set(err, SCPS_EINVAL, "scps_client_read_rows: ids[%zu] = %lld not in [0, %lld), the "
                            "vocabulary of table '%s'", i, (long long)ids[i], (long long)spec->vocabulary_size,
                            spec->name);
  /* Pieces whose answers stay well under the smallest server's message
   * limit, whichever server holds all of a piece's ids. */
  const int ns = scps__optimizer_num_slots(spec->optimizer.type);
  const int64_t per_id = (1 + ns) * (int64_t)spec->embedding_dim * 4 + 16;
  const int64_t room = c->max_message_bytes / 2 - 4096;
  const size_t piece = room > per_id ? (size_t)(room / per_id) : 1;
  const int64_t deadline_ns =
      deadline_ms > INT64_MAX / 2000000 ? INT64_MAX / 2 : scps__client_op_now_ns() + deadline_ms * 1000000;
  const size_t dim = (size_t)spec->embedding_dim;
  for (size_t at = 0; at < n_ids; at += piece) {
    size_t k = n_ids - at < piece ? n_ids - at : piece;
    int rc = read_rows_piece(c, t, ids + at, k, rows + at * dim, slots ? slots + at * (size_t)ns * dim : NULL,
                             deadline_ns, err);
    if (rc) return rc;
  }
  return 0;
}
