/* scps_input: what a trainer hands preprocessing: one feature's ids of a
 * batch (ragged, dense or sparse), and what to do with ids over the limits. */
#ifndef SCPS_INPUT_H
#define SCPS_INPUT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum scps_input_form {
  SCPS_INPUT_RAGGED = 0, /* row_offsets[batch+1] or row_lengths[batch], ids[n], weights[n] */
  SCPS_INPUT_DENSE = 1,  /* ids[batch * valency], row-major; weights optional, same shape */
  SCPS_INPUT_SPARSE = 2  /* TF SparseTensor: indices[n*2] (sample, position), ids = values */
} scps_input_form;

/* One feature's part of a batch. Arrays are borrowed for the call. */
typedef struct scps_feature_input {
  scps_input_form form;
  size_t n_ids;
  const int64_t *ids;
  const float *weights;        /* NULL: every weight is 1 */
  const int64_t *row_offsets;  /* ragged, batch+1 entries, first 0, last n_ids */
  const int32_t *row_lengths;  /* ragged alternative to row_offsets (used when offsets are NULL) */
  int32_t valency;             /* dense */
  const int64_t *indices;      /* sparse, n_ids (sample, position) pairs, row-major order */
  int64_t dense_shape[2];      /* sparse: [batch, max valency] */
  int64_t batch_size;          /* ragged, dense: rows passed; 0 = the FeatureSpec's (unchecked) */
} scps_feature_input;

typedef enum scps_limit_policy {
  SCPS_LIMIT_ERROR = 0, /* refuse the batch, naming stack, partition, count and limit */
  SCPS_LIMIT_DROP = 1   /* keep the first ids of each partition in sorted order, count drops */
} scps_limit_policy;

#ifdef __cplusplus
}
#endif

#endif
