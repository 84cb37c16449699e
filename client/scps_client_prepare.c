/* scps_client_prepare: a batch preprocessed on the client's prep and encoded
 * into each server's LookupRequest, choosing per stack how servers answer
 * and how pushes send gradients; the prep pool lent to the other files. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "scps_client_int.h"

void scps__client_prepare_parallel(scps_client *c, int items, void (*fn)(void *, int), void *ctx) {
  if (!pthread_mutex_trylock(&c->prep_mu)) {
    scps__prep_parallel(c->prep, items, fn, ctx);
    pthread_mutex_unlock(&c->prep_mu);
    return;
  }
  for (int i = 0; i < items; i++) fn(ctx, i);
}

/* Per stack, pooled activations or distinct rows (scps_answer_mode), and
 * each (server, stack)'s distinct rows for choose_gradients. In
 * AUTO, distinct rows where they take no more bytes than the pooled answer
 * summed over the servers: pooling a row the client holds costs about what
 * copying a pooled one out of the answer does, so the bytes decide. */
static void choose_answers(scps_client *c, scps_batch *b) {
  const int S = c->S, ns = c->layout->n_stacks;
  const bool count = c->answer == SCPS_ANSWER_AUTO || c->gradients == SCPS_GRADIENTS_AUTO;
  for (int st = 0; st < ns; st++) {
    size_t pooled = 0, rows = 0;
    for (int p = 0; p < c->n; p++) {
      bool sent = false;
      size_t *n_rows = &b->n_rows[(size_t)p * (size_t)ns + (size_t)st];
      *n_rows = 0;
      for (int k = 0; k < S && count; k++) {
        const scps_coo *coo = scps__prep_coo(c->prep, st, p * S + k);
        sent |= coo->n > 0;
        *n_rows += scps__coo_distinct_rows(coo);
      }
      rows += *n_rows;
      if (sent) pooled += (size_t)c->layout->stacks[st].total_sample_count;
    }
    b->distinct[st] = c->answer == SCPS_ANSWER_AUTO ? rows <= pooled : c->answer == SCPS_ANSWER_DISTINCT_ROWS;
  }
}

/* Whether a push sends stack st to server p by row (scps_gradient_mode). In
 * AUTO, by row where the distinct rows and their sums take at most 3/4 of
 * the bytes of the partitions and every sample's gradient. Summing here
 * reads the trainer's gradients, which are colder than the server's copy
 * of them, so a small saving of bytes is lost (BENCHMARKS.md). */
static void choose_gradients(const scps_client *c, scps_batch *b, int st, int p) {
  const size_t i = (size_t)p * (size_t)c->layout->n_stacks + (size_t)st;
  if (c->gradients != SCPS_GRADIENTS_AUTO) {
    b->by_row[i] = c->gradients == SCPS_GRADIENTS_BY_ROW;
    return;
  }
  const scps_stack_layout *sl = &c->layout->stacks[st];
  const size_t row_bytes = scps__wirefmt_row_bytes(&c->grad_fmt, (size_t)sl->dim);
  b->by_row[i] = 4 * b->n_rows[i] * (row_bytes + 4) <= 3 * (b->parts_len[i] + (size_t)sl->total_sample_count * row_bytes);
}

/* The partitions of stack on server p into coo[0..S); returns how many of
 * their gains are not 1.0, which decides how the request carries them. */
static size_t server_partitions(const scps_client *c, int st, int p, const scps_coo **coo) {
  size_t exceptions = 0;
  for (int k = 0; k < c->S; k++) {
    coo[k] = scps__prep_coo(c->prep, st, p * c->S + k);
    exceptions += scps__prep_gain_exceptions(c->prep, st, p * c->S + k);
  }
  return exceptions;
}

/* Whether stack st's samples go as uint16 (StackPartitions.samples_u16):
 * where every sample fits and every server takes the form. */
static bool narrow_samples(const scps_client *c, int st) {
  return c->wire_revision >= 1 && c->layout->stacks[st].total_sample_count <= 65536;
}

/* Writes every server's LookupRequest from the prep's partitions. Stacks
 * with no entry on a server are left out of its request; merging treats
 * their partials as zeros, which is what the server would have sent. */
static int encode_batch(scps_client *c, scps_batch *b, scps_error *err) {
  const scps_layout *l = c->layout;
  int ns = l->n_stacks, S = c->S;
  const scps_coo *coo[MAX_SC_PER_PROCESS];
  memset(b->stack_used, 0, sizeof *b->stack_used * (size_t)ns);
  choose_answers(c, b);
  int32_t format;
  scps_req_exmy exmy;
  scps__wirefmt_to_request(&c->act_fmt, &format, &exmy);
  for (int p = 0; p < c->n; p++) {
    size_t total = scps__request_view_size(p) + scps__request_format_size(format, &exmy);
    bool any_distinct = false;
    b->n_sent[p] = 0;
    for (int st = 0; st < ns; st++) {
      const size_t exceptions = server_partitions(c, st, p, coo);
      size_t entries = 0;
      for (int k = 0; k < S; k++) entries += coo[k]->n;
      size_t i = (size_t)p * (size_t)ns + (size_t)st;
      b->slot[i] = -1;
      b->parts_len[i] = 0;
      b->by_row[i] = false;
      if (!entries) continue;
      if (entries > UINT32_MAX)
        return scps_error_set(err, SCPS_ENOSPC, "stack '%s': %zu entries for server %d exceed the wire's 2^32 - 1",
                              l->stacks[st].name, entries, p);
      b->slot[i] = b->n_sent[p]++;
      b->parts_len[i] = scps__request_partitions_size(l->stacks[st].name, coo, S, exceptions, narrow_samples(c, st));
      b->stack_used[st] = true;
      total += scps__request_lookup_stack_prefix_size(b->parts_len[i]) + b->parts_len[i];
      choose_gradients(c, b, st, p);
      any_distinct |= b->distinct[st];
      if ((b->distinct[st] || b->by_row[i]) && scps__rows_capture(&b->rows[i], coo, S))
        return scps_error_set(err, SCPS_ENOMEM, "batch: no memory for the partitions of stack '%s' (server %d)",
                              l->stacks[st].name, p);
      if (b->by_row[i]) b->row_parts_len[i] = scps__request_row_partitions_size(l->stacks[st].name, b->rows[i].row_start, S);
    }
    if (any_distinct) total += scps__request_distinct_rows_size(b->n_sent[p]);
    if (c->max_message_bytes > 0 && total > (size_t)c->max_message_bytes)
      return scps_error_set(err, SCPS_ENOSPC,
                            "batch: the Lookup request for server %d (%s) would be %zu bytes, over the server's "
                            "limit of %lld (--max-message-mb)",
                            p, scps__client_addr(c, p), total, (long long)c->max_message_bytes);
    grpc_slice_unref(b->lookup[p]);
    b->lookup[p] = grpc_empty_slice();
    grpc_slice s;
    uint8_t *start = scps__client_buf_lend(&b->lookup_buf[p], total, &s);
    if (!start)
      return scps_error_set(err, SCPS_ENOMEM, "batch: no memory for the %zu-byte Lookup request of server %d", total,
                            p);
    uint8_t *w = scps__request_put_view(start, c->fingerprint, p);
    w = scps__request_put_lookup_format(w, format, &exmy);
    for (int st = 0; st < ns; st++) {
      size_t i = (size_t)p * (size_t)ns + (size_t)st;
      if (b->slot[i] < 0) continue;
      const size_t exceptions = server_partitions(c, st, p, coo);
      w = scps__request_put_lookup_stack_prefix(w, b->parts_len[i]);
      b->parts_off[i] = (size_t)(w - start);
      w = scps__request_put_partitions(w, l->stacks[st].name, coo, S, exceptions, narrow_samples(c, st));
    }
    if (any_distinct) w = scps__request_put_distinct_rows(w, b->distinct, &b->slot[(size_t)p * (size_t)ns], ns, b->n_sent[p]);
    b->lookup[p] = s;
  }
  return 0;
}

/* Adds the ids the last run dropped over the limits (policy DROP). */
static void count_dropped(scps_client *c) {
  int64_t dropped = 0;
  for (int st = 0; st < c->layout->n_stacks; st++) dropped += scps__prep_stats(c->prep, st)->id_drop_counter;
  if (dropped) atomic_fetch_add_explicit(&c->ids_dropped, (uint64_t)dropped, memory_order_relaxed);
}

int scps_client_prepare(scps_client *c, const scps_feature_input *inputs, scps_batch *b, scps_error *err) {
  if (!c || !inputs || !b || b->c != c)
    return scps_error_set(err, SCPS_EINVAL, "scps_client_prepare: client, inputs or batch is NULL or the batch "
                                            "belongs to another client");
  if (atomic_exchange(&b->busy, true))
    return scps_error_set(err, SCPS_ESTATE, "scps_client_prepare: the batch is in use by a lookup or apply in flight");
  scps__batch_release(b);
  pthread_mutex_lock(&c->prep_mu);
  int rc = scps__prep_run(c->prep, inputs, err);
  if (!rc) count_dropped(c);
  if (!rc) rc = encode_batch(c, b, err);
  pthread_mutex_unlock(&c->prep_mu);
  if (rc)
    scps__batch_release(b);
  else
    b->prepared = true;
  atomic_store(&b->busy, false);
  return rc;
}
