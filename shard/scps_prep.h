/* scps_prep: input preprocessing: user batches (ragged, dense, sparse) to
 * sorted, deduplicated per-SparseCore COO partitions, with limits and stats. */
#ifndef SCPS_PREP_H
#define SCPS_PREP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "scps_coo.h"
#include "scps_input.h"
#include "scps_layout.h"

typedef struct scps_prep_options {
  scps_limit_policy policy;
  int threads; /* 0 or 1: the calling thread only; more: a pool started by create */
} scps_prep_options;

#define SCPS_PREP_MAX_THREADS 64

/* Statistics of the last batch for one stack. Partition (src, dst) holds the
 * entries that source SparseCore src (a slice of every feature's samples)
 * sends to destination dst. Counts are taken before dropping. */
typedef struct scps_stack_stats {
  int32_t num_sc;
  int32_t *max_ids_per_partition;         /* [N], per destination, max over sources */
  int32_t *max_unique_ids_per_partition;  /* [N], per destination, max over sources */
  int64_t *required_buffer_size_per_sc;   /* [N], per source: sum over dst of roundup8(ids) */
  int64_t id_drop_counter;                /* entries dropped in this batch */
} scps_stack_stats;

/* Definitions (they follow sparsecore-semantics.md sections 3 and 4):
 * - Feature f's sample r (0..batch-1) is stack sample
 *   layout->features[f].sample_offset + r; id goes to global SparseCore
 *   scps__layout_sc_of() at row scps__layout_local_row().
 * - Gains per combiner over the sample's whole row, before dedup and
 *   dropping: sum w; mean w/sum(w); sqrtn w/sqrt(sum(w^2)); an empty row has
 *   no entries. Weights must be finite, and > 0 for mean and sqrtn (so the
 *   divisor is never 0); with sum, the weights of an id repeated in a
 *   sample add up (see merging below) and must stay finite in float32.
 * - Source SparseCores (the reference's data-parallel split): sample r of a
 *   feature with batch B belongs to source floor(r * N / B).
 * - ids of a partition = its entries after merging duplicate (sample, id)
 *   pairs; unique ids = its distinct rows.
 * - Drop rule (policy DROP), per partition in (row, sample) order: an entry
 *   whose row differs from the last kept row is dropped when
 *   max_unique_ids rows are already kept (so every occurrence of that row
 *   goes); otherwise an entry is dropped once max_ids entries are kept.
 * - With policy ERROR the first overflowing partition in (stack, src, dst)
 *   order is reported, ids checked before unique ids.
 * - required_buffer_size_per_sc[src] = sum over dst of roundup8(ids(src, dst)). */
typedef struct scps_prep scps_prep;

/* The layout is borrowed and must outlive the prep. opts may be NULL
 * (policy ERROR, one thread). Worker threads start here, buffers grow on
 * demand and are reused by later runs. */
int scps__prep_create(const scps_layout *layout, const scps_prep_options *opts, scps_prep **out,
                     scps_error *err);
void scps__prep_destroy(scps_prep *p);

/* Preprocesses one batch: inputs[f] is feature f of the layout. Validates
 * everything first (shapes, batch size, ids in [0, vocabulary), finite
 * weights) and fails naming feature, position and value (a repeated id's
 * merged weight that overflows float32: naming stack, sample and row,
 * SCPS_EINVAL); with policy ERROR a
 * limit overflow fails (SCPS_ELIMIT) naming stack, partition, observed
 * count and limit, the spec key that sets the limit (tables[i].<limit>, as
 * workload files spell it) with the observed count as a value that admits
 * the batch, and policy DROP as the alternative.
 * On success the partitions and stats below describe this batch until the
 * next call. On SCPS_ELIMIT the stats describe the refused batch (so FDO can
 * learn from it) but the partitions must not be used; after any other
 * failure every partition is empty and every stat is 0. Not thread-safe:
 * one run at a time per prep, and no set_limits during a run. */
int scps__prep_run(scps_prep *p, const scps_feature_input *inputs, scps_error *err);

/* Lends the pool to other work between runs: fn(ctx, i) for every i in
 * [0, n_items), on the pool's threads and the caller's, in no set order;
 * returns once all are done. The same rule as scps__prep_run: one at a time
 * per prep, never during a run. */
void scps__prep_parallel(scps_prep *p, int n_items, void (*fn)(void *ctx, int item), void *ctx);

/* Partition for stack on global SparseCore sc, valid until the next run. */
const scps_coo *scps__prep_coo(const scps_prep *p, int stack, int32_t sc);
/* Entries of that partition whose gain is not exactly 1.0. With a sum
 * combiner and no weights, those of ids repeated within a sample (a few
 * percent): a request then lists only them (scps.proto gain_exceptions). */
size_t scps__prep_gain_exceptions(const scps_prep *p, int stack, int32_t sc);
const scps_stack_stats *scps__prep_stats(const scps_prep *p, int stack);

/* Limits in force (initially the layout's); changed live by FDO, used from
 * the next run on. Both must be >= 1; SCPS_ERANGE for an unknown stack. */
int scps__prep_set_limits(scps_prep *p, int stack, int32_t max_ids, int32_t max_unique_ids,
                         scps_error *err);
void scps__prep_get_limits(const scps_prep *p, int stack, int32_t *max_ids, int32_t *max_unique_ids);

#endif
