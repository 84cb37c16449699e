#include "scps_engine_int.h"

#include <math.h>

/* Every entry's conditions of scps__engine_check_coo at once, without
 * branches, so that the loops vectorise: a valid request, the usual case,
 * costs two passes at memory speed (a third of a dlrm8 Lookup's handling
 * before the gather, one entry at a time), and the loop that names the
 * first offending entry only runs for an invalid one. A float is finite
 * unless its exponent bits are all ones. */
static bool coo_valid(const scps_coo *coo, uint64_t rows_per_sc, uint64_t total_samples) {
  const uint32_t *restrict rows = coo->rows, *restrict samples = coo->samples;
  const float *restrict gains = coo->gains;
  unsigned bad = 0;
  for (size_t i = 0; i < coo->n; i++)
    bad |= (unsigned)(rows[i] >= rows_per_sc) | (unsigned)(samples[i] >= total_samples);
  for (size_t i = 0; gains && i < coo->n; i++) {
    uint32_t g;
    memcpy(&g, &gains[i], sizeof g);
    bad |= (unsigned)((g & 0x7f800000u) == 0x7f800000u);
  }
  for (size_t i = 1; i < coo->n; i++) {
    uint64_t prev = (uint64_t)rows[i - 1] << 32 | samples[i - 1], cur = (uint64_t)rows[i] << 32 | samples[i];
    bad |= (unsigned)(cur <= prev);
  }
  return !bad;
}

/* A stack index and a process-local SparseCore that exist. */
static int check_place(const scps_engine *e, int stack, int32_t local_sc, scps_error *err) {
  const scps_layout *l = e->layout;
  if (stack < 0 || stack >= l->n_stacks)
    return scps_error_set(err, SCPS_ENOENT, "stack index %d not in [0, %d)", stack, l->n_stacks);
  if (local_sc < 0 || local_sc >= e->sc_per_process)
    return scps_error_set(err, SCPS_ERANGE, "stack '%s': local SparseCore %d not in [0, %d)",
                          l->stacks[stack].name, local_sc, e->sc_per_process);
  return 0;
}

/* Rows (ascending, as a valid partition's or by-row list's are) that fall
 * in a padding run: a binary search per run, so a valid request costs
 * nothing measurable. `what` names the list's elements in the message. */
static int check_padding(const scps_engine *e, int stack, int32_t local_sc, const uint32_t *rows, size_t n,
                         const char *what, scps_error *err) {
  const shard *sh = shard_of(e, stack, local_sc);
  const scps_layout *l = e->layout;
  for (int r = 0; r < sh->n_pads; r++) {
    const pad_run *p = &sh->pads[r];
    size_t a = 0, b = n;
    while (a < b) {
      size_t m = a + (b - a) / 2;
      if (rows[m] < p->lo) a = m + 1;
      else b = m;
    }
    if (a == n || rows[a] >= p->hi) continue;
    const int32_t sc = e->process_index * e->sc_per_process + local_sc;
    const scps_table_layout *tl = &l->tables[p->table];
    int64_t residue = ((int64_t)sc - tl->shard_rotation) % l->num_sc;
    if (residue < 0) residue += l->num_sc;
    const int64_t id = ((int64_t)rows[a] - tl->row_offset_in_shard) * l->num_sc + residue;
    return scps_error_set(err, SCPS_ERANGE,
                          "stack '%s' SparseCore %d %s %zu: local row %u is padding: it would hold id %lld of "
                          "table '%s', whose vocabulary_size is %lld (padding rows are never addressed)",
                          l->stacks[stack].name, sc, what, a, rows[a], (long long)id, l->table_specs[p->table].name,
                          (long long)l->table_specs[p->table].vocabulary_size);
  }
  return 0;
}

int scps__engine_check_coo(const scps_engine *e, int stack, int32_t local_sc, const scps_coo *coo,
                          scps_error *err) {
  int rc = check_place(e, stack, local_sc, err);
  if (rc) return rc;
  const scps_stack_layout *st = &e->layout->stacks[stack];
  if (coo_valid(coo, (uint64_t)st->rows_per_sc, (uint64_t)st->total_sample_count))
    return check_padding(e, stack, local_sc, coo->rows, coo->n, "entry", err);
  int32_t sc = e->process_index * e->sc_per_process + local_sc;
  for (size_t i = 0; i < coo->n; i++) {
    if (coo->rows[i] >= st->rows_per_sc)
      return scps_error_set(err, SCPS_ERANGE,
                            "stack '%s' SparseCore %d entry %zu: row %u not in [0, %lld)", st->name,
                            sc, i, coo->rows[i], (long long)st->rows_per_sc);
    if (coo->samples[i] >= st->total_sample_count)
      return scps_error_set(err, SCPS_ERANGE,
                            "stack '%s' SparseCore %d entry %zu: sample %u not in [0, %lld)",
                            st->name, sc, i, coo->samples[i], (long long)st->total_sample_count);
    if (coo->gains && !isfinite(coo->gains[i]))
      return scps_error_set(err, SCPS_EINVAL, "stack '%s' SparseCore %d entry %zu: gain %g is not finite",
                            st->name, sc, i, coo->gains[i]);
    if (i > 0 && (coo->rows[i] < coo->rows[i - 1] ||
                  (coo->rows[i] == coo->rows[i - 1] && coo->samples[i] <= coo->samples[i - 1])))
      return scps_error_set(err, SCPS_EINVAL,
                            "stack '%s' SparseCore %d entry %zu: (row %u, sample %u) after (row %u, "
                            "sample %u); entries must be sorted by (row, sample) without repeats",
                            st->name, sc, i, coo->rows[i], coo->samples[i], coo->rows[i - 1],
                            coo->samples[i - 1]);
  }
  return 0;
}

int scps__engine_check_rows(const scps_engine *e, int stack, int32_t local_sc, const uint32_t *rows, size_t n,
                           scps_error *err) {
  int rc = check_place(e, stack, local_sc, err);
  if (rc) return rc;
  const scps_stack_layout *st = &e->layout->stacks[stack];
  const uint64_t limit = (uint64_t)st->rows_per_sc;
  unsigned bad = 0;
  for (size_t i = 0; i < n; i++) bad |= (unsigned)(rows[i] >= limit);
  for (size_t i = 1; i < n; i++) bad |= (unsigned)(rows[i] <= rows[i - 1]);
  if (!bad) return check_padding(e, stack, local_sc, rows, n, "row entry", err);
  int32_t sc = e->process_index * e->sc_per_process + local_sc;
  for (size_t i = 0; i < n; i++) {
    if (rows[i] >= limit)
      return scps_error_set(err, SCPS_ERANGE, "stack '%s' SparseCore %d row entry %zu: row %u not in [0, %lld)",
                            st->name, sc, i, rows[i], (long long)st->rows_per_sc);
    if (i > 0 && rows[i] <= rows[i - 1])
      return scps_error_set(err, SCPS_EINVAL,
                            "stack '%s' SparseCore %d row entry %zu: row %u after row %u; rows must be strictly "
                            "ascending (each distinct row once)",
                            st->name, sc, i, rows[i], rows[i - 1]);
  }
  return 0;
}
