#include "scps_pool.h"

size_t scps__pool_list_bytes(size_t entries, uint32_t first, uint32_t end) {
  const size_t span = end > first ? end - first : 0;
  /* The leading pointer's worth is room to align the row pointers. */
  return sizeof(const float *) + entries * (sizeof(const float *) + sizeof(float)) + (span + 1) * sizeof(uint32_t);
}

scps_pool_list scps__pool_list_make(const float *const *tables, size_t dim, const scps_coo *coo, int32_t n,
                                   uint32_t first, uint32_t end, void *scratch) {
  const uint8_t *bytes[SCPS_POOL_TABLES_MAX];
  for (int32_t k = 0; k < n; k++) bytes[k] = (const uint8_t *)tables[k];
  return scps__pool_list_make_bytes(bytes, dim * sizeof(float), coo, n, first, end, scratch);
}

scps_pool_list scps__pool_list_make_bytes(const uint8_t *const *tables, size_t row_bytes, const scps_coo *coo,
                                         int32_t n, uint32_t first, uint32_t end, void *scratch) {
  const uint32_t span = end > first ? end - first : 0;
  size_t entries = 0;
  for (int32_t k = 0; k < n; k++) entries += coo[k].n;
  scps_pool_list l = {.first = first, .end = first + span};
  const uintptr_t align = sizeof(const void *);
  l.row = (const void **)(((uintptr_t)scratch + align - 1) & ~(align - 1));
  l.gain = (float *)(l.row + entries);
  l.start = (uint32_t *)(l.gain + entries);
  uint32_t *start = l.start;
  memset(start, 0, ((size_t)span + 1) * sizeof *start);
  for (int32_t k = 0; k < n; k++) {
    const uint32_t *samples = coo[k].samples;
    for (size_t i = 0; i < coo[k].n; i++) {
      const uint32_t b = samples[i] - first;
      if (b < span) start[b + 1]++;
    }
  }
  for (uint32_t b = 0; b < span; b++) start[b + 1] += start[b];
  for (int32_t k = 0; k < n; k++) {
    const scps_coo *c = &coo[k];
    for (size_t i = 0; i < c->n; i++) {
      const uint32_t b = c->samples[i] - first;
      if (b >= span) continue;
      const uint32_t at = start[b]++;
      l.row[at] = tables[k] + (size_t)c->rows[i] * row_bytes;
      l.gain[at] = c->gains ? c->gains[i] : 1.0f;
    }
  }
  /* Each start now holds the next sample's: shift them back. */
  memmove(start + 1, start, (size_t)span * sizeof *start);
  start[0] = 0;
  return l;
}
