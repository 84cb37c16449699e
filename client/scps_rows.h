/* scps_rows: a (server, stack)'s partitions kept by distinct row, to
 * pool a Lookup answered in distinct rows and to sum a push's gradients per row. */
#ifndef SCPS_ROWS_H
#define SCPS_ROWS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "scps_coo.h"
#include "scps_pool.h"
#include "scps_slices.h"
#include "scps_wirefmt.h"

#define SCPS_ROWS_SC_MAX 64 /* scps.proto's Topology.sc_per_process bound */

/* Captured at prepare time from the partitions sent, so that the pooling
 * and the push need neither the preprocessor (busy with the next batch by
 * then) nor the request's unaligned bytes. Arrays are owned and reused
 * batch to batch. */
typedef struct scps_rows {
  int32_t n_sc;
  uint32_t entry_start[SCPS_ROWS_SC_MAX + 1]; /* entries before partition k */
  uint32_t row_start[SCPS_ROWS_SC_MAX + 1];   /* distinct rows before partition k */
  uint32_t *urow;    /* [entries] the entry's distinct row (numbered across partitions) */
  uint32_t *samples; /* [entries] */
  float *gains;      /* [entries] */
  uint32_t *local;   /* [distinct rows] each one's local row on its SparseCore */
  void *entries_mem; /* owns urow, samples, gains and local */
  size_t entries_cap;
  scps_pool_list by_sample; /* the entries by sample, pointing into table */
  void *by_sample_mem;      /* owns by_sample's arrays */
  size_t by_sample_cap;     /* bytes */
  float *table; /* [rows x dim]: the answer, widened to float32 */
  size_t table_cap;
  float *pooled; /* [total_sample_count x dim]: the server's partial, as a pooled answer holds it */
  size_t pooled_cap;
} scps_rows;

/* Takes the partitions coo[0 .. n_sc-1] of one server's stack. Returns 0 or
 * SCPS_ENOMEM. */
int scps__rows_capture(scps_rows *ra, const scps_coo *const *coo, int32_t n_sc);

/* Distinct rows the answer must hold. */
static inline size_t scps__rows_count(const scps_rows *ra) { return ra->row_start[ra->n_sc]; }

/* Widens the answer's rows (off, in m, scps__rows_count rows of dim
 * values in format fmt) into ra->table, lists the entries of the stack's
 * total_samples samples by sample and, with pooled, makes room in
 * ra->pooled for the partial. Returns 0, SCPS_ENOMEM, or SCPS_ERANGE (with
 * err) for an eXmY row whose scale is out of range. */
int scps__rows_widen(scps_rows *ra, const scps_slices *m, size_t off, size_t dim, const scps_wirefmt *fmt,
                    size_t total_samples, bool pooled, scps_error *err);

/* The samples [first, end) of the server's partial: bit for bit the pooled
 * answer it would have sent in float32 (scps__pool_sample, as the server's
 * gather sums), into ra->pooled (out NULL, laid out as the stack's samples)
 * or into out, whose row 0 is sample out_first's (a feature's own array);
 * with add, added to what out holds, as a merge adds a later server's
 * partial (a sample without entries adds 0.0f). A sample's row is written
 * once, in sample order: the rows read are the answer's few, the rows
 * written as many as the batch's samples. */
void scps__rows_pool(const scps_rows *ra, size_t dim, uint32_t first, uint32_t end, float *out,
                    uint32_t out_first, bool add);

/* Where a stack's samples' gradients lie in a trainer's arrays: stack
 * sample s belongs to the stack's feature k = feature_of[s], whose gradient
 * is width[k] floats at grads[k] + (s - first[k]) * width[k]. */
typedef struct scps_rows_source {
  const int32_t *feature_of; /* [total_sample_count] */
  const uint32_t *first;     /* [stack features] */
  const uint32_t *width;
  const float *const *grads;
} scps_rows_source;

/* The gradients of the distinct rows [r0, r1) summed as a server sums them
 * by sample: for each row, zero, then gain x the gradient of each entry's
 * sample added in entry order (scps__coo_add_scaled), the columns past a
 * feature's width staying zero. Row r is written at out + (r - r0) *
 * scps__wirefmt_row_bytes(fmt, dim) in format fmt (eXmY rounded
 * stochastically from seed, row r's values at positions r * dim on).
 * Returns the first row whose sum is not all finite (in bfloat16: once
 * rounded), or -1. */
int64_t scps__rows_sum_gradients(const scps_rows *ra, const scps_rows_source *src, uint32_t r0, uint32_t r1,
                                size_t dim, const scps_wirefmt *fmt, uint64_t seed, uint8_t *out);

/* The first entry of distinct row r, and one past its last. */
void scps__rows_entries(const scps_rows *ra, uint32_t r, size_t *begin, size_t *end);

void scps__rows_free(scps_rows *ra);

#endif
