/* scps_coo: the COO partition, the unit of SparseCore work: for one stack on
 * one SparseCore, which local rows feed which samples with which gain. */
#ifndef SCPS_COO_H
#define SCPS_COO_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Entries are sorted by (row, sample) and each (row, sample) pair occurs once
 * (duplicates were merged by summing gains). rows index the stack's shard on
 * that SparseCore (0 .. rows_per_sc-1); samples index the stack's sample space
 * (0 .. total_sample_count-1). gains NULL means every gain is 1.0 (a request
 * that left them out, scps.proto). The arrays are borrowed, never owned. */
typedef struct scps_coo {
  size_t n;
  const uint32_t *rows;
  const uint32_t *samples;
  const float *gains;
} scps_coo;

/* Rows the partition reads, each counted once: its entries are sorted by
 * row, so a row's entries are adjacent. */
static inline size_t scps__coo_distinct_rows(const scps_coo *coo) {
  size_t n = coo->n ? 1 : 0;
  for (size_t i = 1; i < coo->n; i++) n += coo->rows[i] != coo->rows[i - 1];
  return n;
}

/* g[c] += gain * a[c]: one entry's share of its row's gradient. The
 * engine's by-sample update and libscps's by-row sums both use this, so a
 * row's float32 sum is formed by the same operations on either side. */
static inline void scps__coo_add_scaled(float *restrict g, const float *restrict a, float gain, size_t n) {
  for (size_t c = 0; c < n; c++) g[c] += gain * a[c];
}

/* The same with a bfloat16 gradient (scps_bf16), widened exactly on the
 * way: bit for bit what widening it first and then scps__coo_add_scaled
 * give. */
static inline void scps__coo_add_scaled_bf16(float *restrict g, const uint16_t *restrict a, float gain, size_t n) {
  for (size_t c = 0; c < n; c++) {
    const uint32_t u = (uint32_t)a[c] << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    g[c] += gain * x;
  }
}

#endif
