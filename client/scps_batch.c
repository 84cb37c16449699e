/* scps_batch: a batch's memory (each server's request, the answers, the
 * partitions kept by row, the push buffers) and its use by one operation at a time. */
#include <stdlib.h>

#include "scps_client_int.h"

int scps_batch_create(scps_client *c, scps_batch **out, scps_error *err) {
  if (!c || !out) return scps_error_set(err, SCPS_EINVAL, "scps_batch_create: client or out is NULL");
  *out = NULL;
  size_t n = (size_t)c->n, ns = (size_t)c->layout->n_stacks;
  scps_batch *b = calloc(1, sizeof *b);
  if (!b) return scps_error_set(err, SCPS_ENOMEM, "out of memory");
  b->c = c;
  atomic_init(&b->busy, false);
  b->lookup = calloc(n, sizeof *b->lookup);
  b->parts_off = calloc(n * ns, sizeof *b->parts_off);
  b->parts_len = calloc(n * ns, sizeof *b->parts_len);
  b->slot = calloc(n * ns, sizeof *b->slot);
  b->n_sent = calloc(n, sizeof *b->n_sent);
  b->stack_used = calloc(ns, sizeof *b->stack_used);
  b->lookup_buf = calloc(n, sizeof *b->lookup_buf);
  b->reply = calloc(n, sizeof *b->reply);
  b->grad_buf = calloc(ns, sizeof *b->grad_buf);
  b->parsed = calloc(n * ns, sizeof *b->parsed);
  b->distinct = calloc(ns, sizeof *b->distinct);
  b->rows = calloc(n * ns, sizeof *b->rows);
  b->by_row = calloc(n * ns, sizeof *b->by_row);
  b->n_rows = calloc(n * ns, sizeof *b->n_rows);
  b->row_parts_len = calloc(n * ns, sizeof *b->row_parts_len);
  b->row_buf = calloc(n * ns, sizeof *b->row_buf);
  b->shm = calloc(n, sizeof *b->shm);
  b->shm_asked = calloc(n, sizeof *b->shm_asked);
  if (!b->shm || !b->shm_asked || !b->lookup || !b->parts_off || !b->parts_len || !b->slot || !b->n_sent || !b->stack_used || !b->lookup_buf ||
      !b->reply || !b->grad_buf || !b->parsed || !b->distinct || !b->rows || !b->by_row || !b->n_rows ||
      !b->row_parts_len || !b->row_buf) {
    scps_batch_destroy(b);
    return scps_error_set(err, SCPS_ENOMEM, "out of memory");
  }
  for (size_t p = 0; p < n; p++) b->lookup[p] = grpc_empty_slice();
  *out = b;
  return 0;
}

void scps__batch_release(scps_batch *b) {
  for (int p = 0; b->lookup && p < b->c->n; p++) {
    grpc_slice_unref(b->lookup[p]);
    b->lookup[p] = grpc_empty_slice();
  }
  b->prepared = false;
}

void scps_batch_destroy(scps_batch *b) {
  if (!b) return;
  scps__batch_release(b);
  free(b->lookup);
  free(b->parts_off);
  free(b->parts_len);
  free(b->slot);
  free(b->n_sent);
  free(b->stack_used);
  for (int p = 0; b->lookup_buf && p < b->c->n; p++) scps__client_buf_release(&b->lookup_buf[p]);
  for (int p = 0; b->reply && p < b->c->n; p++) scps__slices_free(&b->reply[p]);
  for (int st = 0; b->grad_buf && st < b->c->layout->n_stacks; st++) scps__client_buf_release(&b->grad_buf[st]);
  free(b->lookup_buf);
  free(b->reply);
  free(b->grad_buf);
  free(b->parsed);
  for (size_t i = 0; b->rows && i < (size_t)b->c->n * (size_t)b->c->layout->n_stacks; i++)
    scps__rows_free(&b->rows[i]);
  free(b->rows);
  free(b->distinct);
  for (size_t i = 0; b->row_buf && i < (size_t)b->c->n * (size_t)b->c->layout->n_stacks; i++)
    scps__client_buf_release(&b->row_buf[i]);
  free(b->row_buf);
  free(b->by_row);
  free(b->n_rows);
  free(b->row_parts_len);
  for (int p = 0; b->shm && p < b->c->n; p++) scps__client_shm_drop(b->c, p, &b->shm[p]);
  for (int f = 0; b->view && f < b->c->layout->n_features; f++) free(b->view[f]);
  free(b->view);
  free(b->shm);
  free(b->shm_asked);
  free(b);
}


int scps__batch_claim(scps_client *c, scps_batch *b, const char *fn, scps_error *err) {
  if (!c || !b || b->c != c)
    return scps_error_set(err, SCPS_EINVAL, "%s: client or batch is NULL or the batch belongs to another client", fn);
  if (atomic_exchange(&b->busy, true))
    return scps_error_set(err, SCPS_ESTATE, "%s: the batch is in use by another operation", fn);
  if (!b->prepared) {
    atomic_store(&b->busy, false);
    return scps_error_set(err, SCPS_ESTATE, "%s: the batch has not been prepared (scps_client_prepare)", fn);
  }
  return 0;
}
