/* scps_prep_int: the preprocessor's state, shared by the files that implement
 * scps_prep.h (run and create, the thread pool, validation and messages). */
#ifndef SCPS_PREP_INT_H
#define SCPS_PREP_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "scps_error.h"
#include "scps_prep.h"
#include "scps_radix.h"

typedef struct prep_feature {
  int stack;
  int64_t batch;
  int32_t spec_valency;
  uint64_t vocab;
  uint64_t sample_offset;
  int32_t rotation;
  uint64_t row_offset;
  scps_combiner combiner;
  int64_t *offs_scratch; /* [batch+1]: offsets built from lengths, dense or sparse input */
  /* Per run. */
  size_t key_base; /* first of its entries in its stack's keys */
  const int64_t *offs;
  int rc;
  scps_error err;
} prep_feature;

typedef enum prep_gain_mode {
  PREP_GAIN_UNIT,       /* sum without weights: every gain is 1 */
  PREP_GAIN_PER_SAMPLE, /* mean/sqrtn without weights: sample_gain[sample] */
  PREP_GAIN_PER_ENTRY   /* weights: gains[] travel with the keys */
} prep_gain_mode;

typedef struct prep_stack {
  uint32_t total_samples;
  unsigned src_bits;         /* low key bits holding the source SparseCore */
  unsigned sample_bits;      /* key bits above them holding the sample */
  unsigned sort_lo, sort_hi; /* key bits of row, sample and source the radix sort looks at */
  unsigned dst_bits, dst_shift; /* the destination SparseCore, above them (shift 0 for one) */
  bool rows_by_run;          /* no two of its features read one table */
  uint32_t *sample_src;      /* [total_samples]: source SparseCore of each sample */
  float *sample_gain;        /* [total_samples], PREP_GAIN_PER_SAMPLE */
  prep_gain_mode gain_mode;  /* this run's */
  int32_t max_ids, max_unique;         /* limits in force */
  int32_t run_max_ids, run_max_unique; /* limits of the current run */
  size_t cap, n_keys;
  uint64_t *keys, *keys_tmp;
  const uint64_t *sorted_keys; /* keys or keys_tmp, where the sort left them */
  const float *sorted_gains;
  float *gains, *gains_tmp;
  uint32_t *out_rows, *out_samples;
  float *out_gains;
  uint32_t *out_src; /* policy DROP: source SparseCore of each output entry */
  size_t *bucket_off, *bucket_n; /* [N] */
  int64_t *part_ids, *part_unique; /* [N*N], index src*N + dst */
  int64_t *dst_drops;              /* [N] */
  size_t *gain_exceptions;         /* [N]: gains of coo[d] other than 1.0 */
  size_t *bad_gain;                /* [N]: first entry of coo[d] whose gain is not finite, or SIZE_MAX */
  scps_coo *coo;                   /* [N] */
  scps_stack_stats stats;
} prep_stack;

typedef struct prep_thread {
  scps_prep *p;
  pthread_t thread;
  uint64_t *cnt;      /* [N]: per-source counts of the partition being walked, */
                      /* kept here rather than in shared rows (false sharing) */
  int64_t *kept_ids;  /* [N] */
  int64_t *kept_uniq; /* [N] */
  int64_t *last_row;  /* [N], -1: nothing kept yet */
  scps_radix_scratch *radix;
} prep_thread;

typedef void (*prep_job_fn)(scps_prep *p, int item, prep_thread *t);

struct scps_prep {
  const scps_layout *layout;
  int32_t n;
  bool pow2;
  unsigned sc_shift;
  uint64_t sc_mask;
  scps_prep_options opts;
  int n_features, n_stacks;
  prep_feature *features;
  prep_stack *stacks;
  const scps_feature_input *inputs;

  int n_threads;
  prep_thread *threads; /* [n_threads]; threads[0] is the calling thread */
  int workers_started;
  pthread_mutex_t mu;
  pthread_cond_t cv_work, cv_done;
  bool sync_init;
  /* Written under mu; read without it while spinning. */
  atomic_uint_fast64_t generation;
  atomic_int pending;
  bool stop;
  prep_job_fn job;
  int n_items;
  atomic_int next_item;
  void (*lent_fn)(void *ctx, int item); /* scps__prep_parallel's work */
  void *lent_ctx;
};

#endif
