/* scps_fdo: feedback-directed optimization: per-stack preprocessing stats
 * accumulated over steps, their CSV files, and live adaptation of limits. */
#ifndef SCPS_FDO_H
#define SCPS_FDO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "scps_coo.h"
#include "scps_layout.h"
#include "scps_prep.h"

/* One limit change made by the adaptive mode, as passed to the log callback. */
typedef struct scps_fdo_change {
  int stack;
  const char *stack_name;
  int32_t old_max_ids, new_max_ids;
  int32_t old_max_unique_ids, new_max_unique_ids;
  int32_t observed_max_ids, observed_max_unique_ids; /* over all destinations */
  bool capped; /* the SparseCore budget stopped a raise short of its target */
} scps_fdo_change;

typedef void (*scps_fdo_log_fn)(void *ctx, const scps_fdo_change *change);

typedef struct scps_fdo_options {
  int32_t process_index; /* names exported files: fdo_stats_<process_index>_<time_ns>.csv */
  bool adaptive;         /* scps__fdo_step() also adapts the limits */
  double headroom;       /* adaptive target = observed * (1 + headroom); must be >= 0 */
  /* Bytes one SparseCore may give one stack's COO buffer. A source SparseCore
   * holds, for each of the N destinations, up to roundup8(max_ids) entries of
   * 12 bytes (row, sample: int32; gain: f32), so the adaptive mode keeps
   * roundup8(max_ids) * N * 12 <= budget, and max_unique_ids under the same
   * cap (a partition never has more unique ids than ids). 0: the SparseCore
   * memory left after every stack's rows and slots, shared equally by the
   * stacks. */
  int64_t coo_budget_bytes_per_sc;
  scps_fdo_log_fn log; /* may be NULL */
  void *log_ctx;
} scps_fdo_options;

typedef struct scps_fdo scps_fdo;

/* The layout is borrowed and must outlive the fdo. opts may be NULL
 * (process 0, not adaptive). Not thread-safe: one caller at a time. */
int scps__fdo_create(const scps_layout *layout, const scps_fdo_options *opts, scps_fdo **out,
                    scps_error *err);
void scps__fdo_destroy(scps_fdo *f);

/* Accumulates one step's stats of one stack: elementwise max of
 * max_ids_per_partition, max_unique_ids_per_partition and
 * required_buffer_size_per_sc, sum of id_drop_counter. */
int scps__fdo_record(scps_fdo *f, int stack, const scps_stack_stats *s, scps_error *err);

/* Records every stack of the prep's last run (which must have succeeded or
 * failed with SCPS_ELIMIT) and, in adaptive mode, adapts the prep's limits. */
int scps__fdo_step(scps_fdo *f, scps_prep *p, scps_error *err);

/* Accumulated stats of a stack (zeros before any record), or NULL. */
const scps_stack_stats *scps__fdo_stats(const scps_fdo *f, int stack);
int64_t scps__fdo_steps(const scps_fdo *f);
void scps__fdo_reset(scps_fdo *f);

/* Writes the accumulated stats to dir/fdo_stats_<process_index>_<time_ns>.csv
 * in the layout of the reference's CSVFileFDOClient (Python csv module
 * output): header "key,values", then rows "<stack>_max_ids,<v0 v1 ...>" for
 * every stack, then _max_unique_ids, _required_buffer_size and
 * _id_drop_counters rows; CRLF line ends, a field quoted only when it holds
 * a comma, quote or line break. The file appears atomically (rename). The
 * path written is copied to path_out when given. */
int scps__fdo_export_csv(scps_fdo *f, const char *dir, char *path_out, size_t path_cap,
                        scps_error *err);

/* Reads the latest file of every process in dir, takes the elementwise max
 * over all rows of a key (drop counters too, as the reference does) and
 * replaces the accumulated stats with it; stacks absent from the files read
 * as zeros. Errors: SCPS_ENOENT (no file, unknown stack), SCPS_EPARSE,
 * SCPS_EMISMATCH (a row's length is not N, or 1 for drop counters),
 * SCPS_EIO. Nothing changes on failure. */
int scps__fdo_load_csv(scps_fdo *f, const char *dir, scps_error *err);

/* The adaptive rule, on the accumulated stats: for each stack, with observed
 * = max over destinations, a limit below observed * (1 + headroom) is raised
 * to roundup8(ceil(observed * (1 + headroom))), capped by the budget (see
 * coo_budget_bytes_per_sc) and never lowered; the prep uses it from its next
 * run. Every change goes to the log callback. n_changed (may be NULL) counts
 * the stacks changed. */
int scps__fdo_adapt(scps_fdo *f, scps_prep *p, int *n_changed, scps_error *err);

/* Largest max_ids / max_unique_ids the budget allows for a stack. */
int32_t scps__fdo_limit_cap(const scps_fdo *f, int stack);

/* "stack 's': max_ids_per_partition 256 -> 512, max_unique_ids_per_partition
 * 256 -> 256 (observed 430 ids, 200 unique)". Returns snprintf's count. */
int scps__fdo_change_format(const scps_fdo_change *c, char *buf, size_t cap);

/* A server's view of the partition counts: of coo's entries (sorted by row,
 * as scps__engine_check_coo requires), ids[s] come from source SparseCore s
 * and unique[s] distinct rows among them, where src_of[sample] names the
 * source of each sample. ids and unique hold n_src counters each and are
 * overwritten. Returns SCPS_ENOMEM (counts untouched) only when n_src is
 * above 64 and its scratch cannot be allocated. */
int scps__fdo_count_sources(const scps_coo *coo, const int32_t *src_of, int32_t n_src, int32_t *ids,
                           int32_t *unique);

#endif
