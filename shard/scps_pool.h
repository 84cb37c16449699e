/* scps_pool: pooling entries sample by sample, the one order of adds that the
 * engine's gathers and libscps's pooling of distinct rows share. */
#ifndef SCPS_POOL_H
#define SCPS_POOL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "scps_coo.h"

/* How many entries ahead scps__pool_sample prefetches a row: in sample order
 * the rows read are scattered over megabytes or gigabytes. */
#define SCPS_POOL_PREFETCH 16

/* Most tables (partitions) one list pools over: as many as one process's
 * SparseCores (SCPS_SC_PER_PROCESS_MAX). */
#define SCPS_POOL_TABLES_MAX 64

/* The entries of samples [first, end) listed by sample: sample first + b's
 * are row[start[b] .. start[b + 1]) with their gains, partition by partition
 * and in each partition's order, which is the order of the adds a
 * partition-at-a-time gather makes; pooling in it gives those sums bit for
 * bit. Points into the scratch it was made in. */
typedef struct scps_pool_list {
  uint32_t first, end;
  uint32_t *start; /* [end - first + 1] */
  const void **row; /* the entry's row: dim floats, or row_bytes of a stored format */
  float *gain;
} scps_pool_list;

/* Bytes of scratch scps__pool_list_make needs for the samples [first, end)
 * of partitions holding entries entries in all. */
size_t scps__pool_list_bytes(size_t entries, uint32_t first, uint32_t end);

/* Lists partitions coo[0 .. n)'s entries whose samples lie in [first, end);
 * partition k's entry i reads row coo[k].rows[i] of tables[k], dim floats a
 * row. scratch: scps__pool_list_bytes bytes, any alignment. */
scps_pool_list scps__pool_list_make(const float *const *tables, size_t dim, const scps_coo *coo, int32_t n,
                                   uint32_t first, uint32_t end, void *scratch);

/* The same list over tables of row_bytes a row in any format (the engine's
 * encoded shards): partition k's entry i reads tables[k] + coo[k].rows[i] *
 * row_bytes. */
scps_pool_list scps__pool_list_make_bytes(const uint8_t *const *tables, size_t row_bytes, const scps_coo *coo,
                                         int32_t n, uint32_t first, uint32_t end, void *scratch);

/* Sample s's entries (first <= s < end) summed into o, dim floats, every one
 * written: 0.0f + g * r for the first entry, which is what adding to a zeroed
 * row gives, -0.0 included, then += g * r; zeros for a sample without any. */
static inline void scps__pool_sample(const scps_pool_list *l, uint32_t s, size_t dim, float *restrict o) {
  const uint32_t b = s - l->first, a = l->start[b], z = l->start[b + 1], total = l->start[l->end - l->first];
  if (a == z) {
    memset(o, 0, dim * sizeof(float));
    return;
  }
  for (uint32_t j = a; j < z; j++) {
    if (j + SCPS_POOL_PREFETCH < total) {
      const float *ahead = (const float *)l->row[j + SCPS_POOL_PREFETCH];
      for (size_t c = 0; c < dim; c += 16) __builtin_prefetch(ahead + c, 0, 3);
    }
    const float *restrict r = (const float *)l->row[j];
    const float g = l->gain[j];
    if (j == a)
      for (size_t c = 0; c < dim; c++) o[c] = 0.0f + g * r[c];
    else
      for (size_t c = 0; c < dim; c++) o[c] += g * r[c];
  }
}

#endif
