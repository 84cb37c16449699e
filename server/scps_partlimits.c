#include "scps_partlimits.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scps_cmd_data.h"
#include "scps_fdo.h"

void scps__partlimits_override(scps_server *s) {
  scps_saver *sv = &s->saver;
  pthread_mutex_lock(&sv->mu);
  for (int st = 0; st < s->layout->n_stacks; st++) {
    sv->limits[st].max_ids_per_partition = s->opts.partition_limits[0];
    sv->limits[st].max_unique_ids_per_partition = s->opts.partition_limits[1];
  }
  pthread_mutex_unlock(&sv->mu);
}

static void fold_max(atomic_int *a, int32_t v) {
  int cur = atomic_load(a);
  while (v > cur && !atomic_compare_exchange_weak(a, &cur, v)) {
  }
}

/* The kept entries of one partition, in order, into rows/samples/gains: per
 * source, an entry of a row it has not kept yet goes once max_unique rows
 * are kept, any entry once max_ids are (scps_prep.h's drop rule, as
 * scps_prep's drop_partition applies it). kept and last: n_src scratch. */
static size_t drop_entries(const scps_coo *in, const int32_t *src_of, int32_t n_src, int32_t max_ids,
                           int32_t max_unique, uint32_t *rows, uint32_t *samples, float *gains, int64_t *kept,
                           int64_t *last) {
  int64_t *kept_uniq = kept + n_src;
  for (int32_t s = 0; s < n_src; s++) {
    kept[s] = kept_uniq[s] = 0;
    last[s] = -1;
  }
  size_t j = 0;
  for (size_t i = 0; i < in->n; i++) {
    const int32_t src = src_of[in->samples[i]];
    const bool new_row = last[src] != (int64_t)in->rows[i];
    if (new_row && kept_uniq[src] >= max_unique) continue;
    if (kept[src] >= max_ids) continue;
    kept[src]++;
    if (new_row) {
      kept_uniq[src]++;
      last[src] = in->rows[i];
    }
    rows[j] = in->rows[i];
    samples[j] = in->samples[i];
    if (gains) gains[j] = in->gains[i];
    j++;
  }
  return j;
}

/* The first partition of local SparseCore k's entries over the limits, in
 * source order, ids before unique ids: its source and count into *src and
 * *count, and whether unique ids are what is over; false when none is. */
static bool first_over(const int32_t *ids, const int32_t *uniq, int32_t n_src, int32_t max_ids, int32_t max_unique,
                       int32_t *src, int32_t *count, bool *unique) {
  for (int32_t s = 0; s < n_src; s++) {
    if (ids[s] > max_ids || uniq[s] > max_unique) {
      *src = s;
      *unique = ids[s] <= max_ids;
      *count = *unique ? uniq[s] : ids[s];
      return true;
    }
  }
  return false;
}

static grpc_status_code check_by_row(const scps_call *c, int i, char *msg, size_t len) {
  const scps_server *s = c->srv;
  const call_stack *cs = &c->stacks[i];
  const int64_t N = s->layout->num_sc;
  const int64_t most = N * (cs->max_unique < cs->max_ids ? cs->max_unique : cs->max_ids);
  for (int32_t k = 0; k < s->S; k++) {
    if ((int64_t)cs->coo[k].n <= most) continue;
    snprintf(msg, len,
             "stacks[%d]: stack '%s' SparseCore %d: %zu rows by row, more than any batch within the limits in force "
             "touches there (%lld source SparseCores x max_unique_ids_per_partition %d); rows by row carry no "
             "samples, so they are checked against that bound and never dropped",
             i, s->layout->stacks[cs->stack].name, s->opts.process_index * s->S + k, cs->coo[k].n, (long long)N,
             cs->max_unique < cs->max_ids ? cs->max_unique : cs->max_ids);
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  return GRPC_STATUS_OK;
}

grpc_status_code scps__partlimits_apply(scps_call *c, char *msg, size_t len) {
  scps_server *s = c->srv;
  const int32_t N = s->layout->num_sc, S = s->S;
  scps_saver *sv = &s->saver;
  pthread_mutex_lock(&sv->mu);
  for (int i = 0; i < c->n_stacks; i++) {
    c->stacks[i].max_ids = sv->limits[c->stacks[i].stack].max_ids_per_partition;
    c->stacks[i].max_unique = sv->limits[c->stacks[i].stack].max_unique_ids_per_partition;
  }
  pthread_mutex_unlock(&sv->mu);
  int32_t small[2 * 64];
  int32_t *ids = N <= 64 ? small : malloc(sizeof *ids * 2 * (size_t)N), *uniq = ids ? ids + N : NULL;
  uint64_t *over = NULL; /* [stack]: bit k, local SparseCore k's partition is dropped to the limits */
  size_t dropped = 0;    /* entries of those partitions */
  grpc_status_code st = ids ? GRPC_STATUS_OK : GRPC_STATUS_RESOURCE_EXHAUSTED;
  if (!ids) snprintf(msg, len, "%s: out of memory counting partitions", scps__method_name(c->method));
  for (int i = 0; st == GRPC_STATUS_OK && i < c->n_stacks; i++) {
    call_stack *cs = &c->stacks[i];
    if (cs->by_row) {
      st = check_by_row(c, i, msg, len);
      continue;
    }
    const char *name = s->layout->stacks[cs->stack].name;
    for (int32_t k = 0; st == GRPC_STATUS_OK && k < S; k++) {
      const scps_coo *coo = &cs->coo[k];
      /* A partition no larger than the smaller limit fits whatever its sources. */
      if (coo->n <= (size_t)(cs->max_ids < cs->max_unique ? cs->max_ids : cs->max_unique)) continue;
      if (scps__fdo_count_sources(coo, s->sample_src[cs->stack], N, ids, uniq)) {
        snprintf(msg, len, "%s: out of memory counting partitions", scps__method_name(c->method));
        st = GRPC_STATUS_RESOURCE_EXHAUSTED;
        break;
      }
      int32_t src, count;
      bool unique;
      if (!first_over(ids, uniq, N, cs->max_ids, cs->max_unique, &src, &count, &unique)) continue;
      const int32_t dst = s->opts.process_index * S + k;
      if (s->opts.limit_policy != SCPS_LIMIT_DROP || cs->distinct) {
        snprintf(msg, len,
                 "stacks[%d]: stack '%s': partition src %d -> dst %d has %d %s, above %s %d in force (GetConfig "
                 "reports the limits)%s",
                 i, name, src, dst, count, unique ? "unique ids" : "ids",
                 unique ? "max_unique_ids_per_partition" : "max_ids_per_partition",
                 unique ? cs->max_unique : cs->max_ids,
                 cs->distinct ? "; the server drops ids beyond the limits, but not from a stack answered in "
                                "distinct rows, which the client pools with the partitions it sent"
                              : "");
        st = GRPC_STATUS_INVALID_ARGUMENT;
        break;
      }
      if (!over && !(over = calloc((size_t)c->n_stacks, sizeof *over))) {
        snprintf(msg, len, "%s: out of memory dropping ids over the limits", scps__method_name(c->method));
        st = GRPC_STATUS_RESOURCE_EXHAUSTED;
        break;
      }
      over[i] |= (uint64_t)1 << k;
      dropped += coo->n;
      /* FDO statistics count a Lookup's partitions before dropping, as
       * libscps's preprocessing does. */
      if (c->method == SCPS_M_LOOKUP) {
        int32_t mx = 0, mu = 0;
        for (int32_t q = 0; q < N; q++) {
          mx = ids[q] > mx ? ids[q] : mx;
          mu = uniq[q] > mu ? uniq[q] : mu;
        }
        fold_max(&s->sc_stats[cs->stack * S + k].max_ids, mx);
        fold_max(&s->sc_stats[cs->stack * S + k].max_unique, mu);
      }
    }
  }
  if (st == GRPC_STATUS_OK && dropped) {
    /* The per-source scratch of the drop rule, then the rows, samples and
     * gains of every partition dropped. */
    c->limit_mem = malloc(sizeof(int64_t) * 3 * (size_t)N + dropped * 3 * sizeof(uint32_t));
    if (!c->limit_mem) {
      snprintf(msg, len, "%s: out of memory dropping ids over the limits", scps__method_name(c->method));
      st = GRPC_STATUS_RESOURCE_EXHAUSTED;
    }
    int64_t *scratch = c->limit_mem;
    uint32_t *at = (uint32_t *)(void *)(scratch + 3 * N);
    for (int i = 0; st == GRPC_STATUS_OK && i < c->n_stacks; i++) {
      call_stack *cs = &c->stacks[i];
      for (int32_t k = 0; k < S; k++) {
        if (!(over[i] >> k & 1)) continue;
        scps_coo *coo = &cs->coo[k];
        uint32_t *rows = at, *samples = at + coo->n;
        float *gains = coo->gains ? (float *)(void *)(at + 2 * coo->n) : NULL;
        at += 3 * coo->n;
        size_t n = drop_entries(coo, s->sample_src[cs->stack], N, cs->max_ids, cs->max_unique, rows, samples, gains,
                                scratch, scratch + 2 * N);
        atomic_fetch_add_explicit(&s->sc_stats[cs->stack * S + k].ids_dropped, (long long)(coo->n - n),
                                  memory_order_relaxed);
        *coo = (scps_coo){n, rows, samples, gains};
      }
    }
  }
  free(over);
  if (ids != small) free(ids);
  return st;
}
