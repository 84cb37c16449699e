#include "scps_client_rows.h"

#include <stdlib.h>
#include <string.h>

#include "scps_bf16.h"
#include "scps_error.h"
#include "scps_spec.h"

/* Grows *p to hold n elements of size sz (contents not kept). */
static int reserve(void **p, size_t *cap, size_t n, size_t sz) {
  if (n <= *cap && *p) return 0;
  void *q = malloc((n ? n : 1) * sz);
  if (!q) return SCPS_ENOMEM;
  free(*p);
  *p = q;
  *cap = n;
  return 0;
}

int scps_rows_answer_capture(scps_rows_answer *ra, const scps_coo *const *coo, int32_t n_sc) {
  size_t n = 0;
  for (int32_t k = 0; k < n_sc; k++) n += coo[k]->n;
  /* One block for the three per-entry arrays, each 4 bytes an entry. */
  if (reserve(&ra->entries_mem, &ra->entries_cap, n, 3 * sizeof(uint32_t))) return SCPS_ENOMEM;
  ra->urow = ra->entries_mem;
  ra->samples = ra->urow + n;
  ra->gains = (float *)(void *)(ra->samples + n);
  ra->n_sc = n_sc;
  ra->entry_start[0] = ra->row_start[0] = 0;
  for (int32_t k = 0; k < n_sc; k++) {
    const scps_coo *c = coo[k];
    size_t at = ra->entry_start[k];
    memcpy(ra->samples + at, c->samples, c->n * sizeof *ra->samples);
    memcpy(ra->gains + at, c->gains, c->n * sizeof *ra->gains);
    uint32_t u = ra->row_start[k];
    for (size_t i = 0; i < c->n; i++) {
      u += i > 0 && c->rows[i] != c->rows[i - 1];
      ra->urow[at + i] = u;
    }
    u -= ra->row_start[k];
    ra->entry_start[k + 1] = (uint32_t)(at + c->n);
    ra->row_start[k + 1] = ra->row_start[k] + (c->n ? u + 1 : 0);
  }
  return 0;
}

int scps_rows_answer_widen(scps_rows_answer *ra, const scps_slices *m, size_t off, size_t dim, size_t value_bytes,
                           size_t total_samples, bool pooled) {
  const size_t rows = scps_rows_answer_rows(ra), entries = ra->entry_start[ra->n_sc];
  if (reserve((void **)&ra->table, &ra->table_cap, rows * dim, sizeof(float)) ||
      (pooled && reserve((void **)&ra->pooled, &ra->pooled_cap, total_samples * dim, sizeof(float))) ||
      reserve(&ra->by_sample_mem, &ra->by_sample_cap, scps_pool_list_bytes(entries, 0, (uint32_t)total_samples), 1))
    return SCPS_ENOMEM;
  uint8_t tmp[SCPS_DIM_MAX * sizeof(float)];
  const size_t row_bytes = dim * value_bytes;
  for (size_t r = 0; r < rows; r++) {
    const uint8_t *s = scps_slices_span(m, off + r * row_bytes, row_bytes, tmp);
    if (value_bytes == 2) scps_bf16_decode(s, ra->table + r * dim, dim);
    else memcpy(ra->table + r * dim, s, row_bytes);
  }
  /* urow numbers the rows across partitions, so the entries, partition after
   * partition, are one partition of the widened table. */
  const float *table = ra->table;
  const scps_coo all = {entries, ra->urow, ra->samples, ra->gains};
  ra->by_sample = scps_pool_list_make(&table, dim, &all, 1, 0, (uint32_t)total_samples, ra->by_sample_mem);
  return 0;
}

void scps_rows_answer_pool(const scps_rows_answer *ra, size_t dim, uint32_t first, uint32_t end, float *out,
                           uint32_t out_first, bool add) {
  float *base = out ? out : ra->pooled;
  const uint32_t base_first = out ? out_first : 0;
  float tmp[SCPS_DIM_MAX];
  for (uint32_t s = first; s < end; s++) {
    float *o = base + (size_t)(s - base_first) * dim;
    if (!add) {
      scps_pool_sample(&ra->by_sample, s, dim, o);
      continue;
    }
    scps_pool_sample(&ra->by_sample, s, dim, tmp);
    for (size_t c = 0; c < dim; c++) o[c] += tmp[c];
  }
}

void scps_rows_answer_free(scps_rows_answer *ra) {
  free(ra->entries_mem);
  free(ra->by_sample_mem);
  free(ra->table);
  free(ra->pooled);
  memset(ra, 0, sizeof *ra);
}
