/* scps_workload_gen: a deterministic generator of ragged batches for a
 * workload: one random stream per feature, ids drawn Zipf or uniform. */
#ifndef SCPS_WORKLOAD_GEN_H
#define SCPS_WORKLOAD_GEN_H

#include <stdint.h>

#include "scps_error.h"
#include "scps_prep.h"

typedef struct scps_workload scps_workload;

/* Generates batches for a workload. Each feature has its own random stream,
 * derived from the workload's seed, the seed given here and the feature's
 * index, so a (workload, seed) pair always yields the same batches. */
typedef struct scps_workload_gen scps_workload_gen;

/* Copies what it needs from w, which may be destroyed afterwards. Fails with
 * SCPS_EINVAL when w has no "ids" section (saying so) or one batch would need
 * more than SCPS_WORKLOAD_BATCH_IDS_MAX ids. */
int scps__workload_gen_create(const scps_workload *w, uint64_t seed, scps_workload_gen **out,
                             scps_error *err);
void scps__workload_gen_destroy(scps_workload_gen *g);

/* Draws the next batch for every feature, overwriting the previous one. */
void scps__workload_gen_next(scps_workload_gen *g);

/* n_features inputs of form SCPS_INPUT_RAGGED (row_offsets with batch_size + 1
 * entries, ids, and weights for weighted features, else NULL), in the order of
 * w->features, pointing into buffers the generator owns: valid until the next
 * scps__workload_gen_next or destroy. Before the first batch every feature is
 * empty (all offsets 0). */
const scps_feature_input *scps__workload_gen_inputs(const scps_workload_gen *g);

#endif
