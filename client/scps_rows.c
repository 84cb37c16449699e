#include "scps_rows.h"

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

int scps__rows_capture(scps_rows *ra, const scps_coo *const *coo, int32_t n_sc) {
  size_t n = 0;
  for (int32_t k = 0; k < n_sc; k++) n += coo[k]->n;
  /* One block for the three per-entry arrays and the distinct rows (no
   * more than the entries), each 4 bytes an element. */
  if (reserve(&ra->entries_mem, &ra->entries_cap, n, 4 * sizeof(uint32_t))) return SCPS_ENOMEM;
  ra->urow = ra->entries_mem;
  ra->samples = ra->urow + n;
  ra->gains = (float *)(void *)(ra->samples + n);
  ra->local = ra->samples + 2 * n;
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
      ra->local[u] = c->rows[i];
    }
    u -= ra->row_start[k];
    ra->entry_start[k + 1] = (uint32_t)(at + c->n);
    ra->row_start[k + 1] = ra->row_start[k] + (c->n ? u + 1 : 0);
  }
  return 0;
}

int scps__rows_widen(scps_rows *ra, const scps_slices *m, size_t off, size_t dim, const scps_wirefmt *fmt,
                    size_t total_samples, bool pooled, scps_error *err) {
  const size_t rows = scps__rows_count(ra), entries = ra->entry_start[ra->n_sc];
  if (reserve((void **)&ra->table, &ra->table_cap, rows * dim, sizeof(float)) ||
      (pooled && reserve((void **)&ra->pooled, &ra->pooled_cap, total_samples * dim, sizeof(float))) ||
      reserve(&ra->by_sample_mem, &ra->by_sample_cap, scps__pool_list_bytes(entries, 0, (uint32_t)total_samples), 1))
    return SCPS_ENOMEM;
  uint8_t tmp[SCPS_DIM_MAX * sizeof(float) + 1];
  const size_t row_bytes = scps__wirefmt_row_bytes(fmt, dim);
  /* As many whole rows a call as lie in one slice (a row split between two
   * gathered first): a call sets up its format's tables once. */
  for (size_t r = 0, n, avail; r < rows; r += n) {
    const uint8_t *s = scps__slices_at(m, off + r * row_bytes, &avail);
    n = avail / row_bytes < rows - r ? avail / row_bytes : rows - r;
    if (!n) {
      s = scps__slices_span(m, off + r * row_bytes, row_bytes, tmp);
      n = 1;
    }
    int rc = scps__wirefmt_decode(fmt, s, n, dim, ra->table + r * dim, false, err);
    if (rc) return rc;
  }
  /* urow numbers the rows across partitions, so the entries, partition after
   * partition, are one partition of the widened table. */
  const float *table = ra->table;
  const scps_coo all = {entries, ra->urow, ra->samples, ra->gains};
  ra->by_sample = scps__pool_list_make(&table, dim, &all, 1, 0, (uint32_t)total_samples, ra->by_sample_mem);
  return 0;
}

void scps__rows_pool(const scps_rows *ra, size_t dim, uint32_t first, uint32_t end, float *out,
                    uint32_t out_first, bool add) {
  float *base = out ? out : ra->pooled;
  const uint32_t base_first = out ? out_first : 0;
  float tmp[SCPS_DIM_MAX];
  for (uint32_t s = first; s < end; s++) {
    float *o = base + (size_t)(s - base_first) * dim;
    if (!add) {
      scps__pool_sample(&ra->by_sample, s, dim, o);
      continue;
    }
    scps__pool_sample(&ra->by_sample, s, dim, tmp);
    for (size_t c = 0; c < dim; c++) o[c] += tmp[c];
  }
}

void scps__rows_entries(const scps_rows *ra, uint32_t r, size_t *begin, size_t *end) {
  const size_t n = ra->entry_start[ra->n_sc];
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (ra->urow[mid] < r) lo = mid + 1;
    else hi = mid;
  }
  *begin = lo;
  while (hi < n && ra->urow[hi] == r) hi++;
  *end = hi;
}

/* Entries ahead whose gradients are prefetched: the samples of a row's
 * entries are scattered over the trainer's arrays. */
#define SUM_PREFETCH_AHEAD 16

int64_t scps__rows_sum_gradients(const scps_rows *ra, const scps_rows_source *src, uint32_t r0, uint32_t r1,
                                size_t dim, const scps_wirefmt *fmt, uint64_t seed, uint8_t *out) {
  const size_t n = ra->entry_start[ra->n_sc], row_bytes = scps__wirefmt_row_bytes(fmt, dim);
  size_t e, unused;
  scps__rows_entries(ra, r0, &e, &unused);
  /* eXmY rows are encoded a run at a time, up to SCPS_DIM_MAX values (a
   * call sets up its format's tables once); the others row by row. */
  float g[SCPS_DIM_MAX] __attribute__((aligned(64)));
  const bool exmy = fmt->kind == SCPS_WIREFMT_EXMY;
  const uint32_t per = exmy ? (uint32_t)(SCPS_DIM_MAX / dim) : 1;
  for (uint32_t r = r0, c0 = r0; r < r1; r++) {
    float *row = exmy ? g + (size_t)(r - c0) * dim : g;
    memset(row, 0, dim * sizeof(float));
    for (; e < n && ra->urow[e] == r; e++) {
      if (e + SUM_PREFETCH_AHEAD < n) {
        const uint32_t s = ra->samples[e + SUM_PREFETCH_AHEAD];
        const int32_t k = src->feature_of[s];
        const float *a = src->grads[k] + (size_t)(s - src->first[k]) * src->width[k];
        for (uint32_t c = 0; c < src->width[k]; c += 16) __builtin_prefetch(a + c);
      }
      const uint32_t s = ra->samples[e];
      const int32_t k = src->feature_of[s];
      scps__coo_add_scaled(row, src->grads[k] + (size_t)(s - src->first[k]) * src->width[k], ra->gains[e],
                          src->width[k]);
    }
    uint32_t nonfinite = 0;
    uint8_t *o = out + (size_t)(r - r0) * row_bytes;
    if (fmt->kind == SCPS_WIREFMT_BFLOAT16) {
      scps__bf16_encode(row, o, dim);
      for (size_t c = 0; c < dim; c++) {
        uint16_t h;
        memcpy(&h, o + 2 * c, sizeof h);
        nonfinite |= (uint32_t)((h & 0x7f80u) == 0x7f80u);
      }
    } else {
      /* eXmY would saturate an infinity: the sum is checked first */
      for (size_t c = 0; c < dim; c++) {
        uint32_t bits;
        memcpy(&bits, &row[c], sizeof bits);
        nonfinite |= (uint32_t)((bits & 0x7f800000u) == 0x7f800000u);
      }
      if (!exmy) memcpy(o, row, dim * sizeof(float));
    }
    if (nonfinite) return (int64_t)r;
    if (exmy && (r + 1 - c0 == per || r + 1 == r1)) {
      scps__wirefmt_encode(fmt, g, r + 1 - c0, dim, out + (size_t)(c0 - r0) * row_bytes, seed, (uint64_t)c0 * dim,
                          NULL);
      c0 = r + 1;
    }
  }
  return -1;
}

void scps__rows_free(scps_rows *ra) {
  free(ra->entries_mem);
  free(ra->by_sample_mem);
  free(ra->table);
  free(ra->pooled);
  memset(ra, 0, sizeof *ra);
}
