/* scps_engine: one server process's share of every stack: the SparseCores it
 * simulates, their rows and slots, and the gather/scatter/optimizer kernels. */
#ifndef SCPS_ENGINE_H
#define SCPS_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "scps_coo.h"
#include "scps_hbm.h"
#include "scps_layout.h"
#include "scps_optimizer.h"

typedef struct scps_engine scps_engine;

/* Places every stack's rows and slots for SparseCores process_index*S ..
 * process_index*S+S-1 and initializes them. If the stacks do not fit, fails
 * with SCPS_ENOSPC before allocating anything, naming the stack, the
 * SparseCore, the bytes needed and the bytes free. The layout must outlive
 * the engine. */
int scps__engine_create(const scps_layout *layout, int32_t process_index, scps_engine **out,
                       scps_error *err);
void scps__engine_destroy(scps_engine *e);

const scps_layout *scps__engine_layout(const scps_engine *e);
int32_t scps__engine_process_index(const scps_engine *e);

/* Checks a partition for stack on the process-local SparseCore local_sc: rows
 * and samples in range, finite gains, sorted by (row, sample) without
 * repeats, and no padding row (one that holds no id of its table). Returns
 * SCPS_ERANGE/SCPS_EINVAL naming position and value (for a padding row, the
 * table and id it would hold). */
int scps__engine_check_coo(const scps_engine *e, int stack, int32_t local_sc, const scps_coo *coo,
                          scps_error *err);

/* out[sample * dim + c] += gain * row[c] for every entry whose sample lies
 * in [first, end); out is the stack's [total_sample_count x dim] activation
 * buffer (indexed by sample, so callers splitting the samples share one).
 * Accumulating several SparseCores' partitions into the same out, in
 * SparseCore order, gives the process's partial activations. The partition
 * must have passed scps__engine_check_coo. Only reads the SparseCore's
 * memory. */
void scps__engine_lookup(scps_engine *e, int stack, int32_t local_sc, const scps_coo *coo,
                        uint32_t first, uint32_t end, float *out);

/* Bytes of scratch scps__engine_gather and scps__engine_gather_bf16 need for
 * the samples [first, end) of a stack whose partitions hold entries entries
 * in all. */
size_t scps__engine_gather_scratch(size_t entries, uint32_t first, uint32_t end);

/* The process's partial activations of the samples [first, end): the same
 * values, bit for bit, as zeroing those rows of out and calling
 * scps__engine_lookup for local SparseCores 0 .. n_sc-1 in order, but each
 * row is written once (a sample's entries are summed in that order, the
 * first stored, and rows no entry reaches are zeroed), not zeroed and then
 * written again. coo[k] is local SparseCore k's partition, checked as for
 * lookup. scratch: of scps__engine_gather_scratch bytes, one per concurrent
 * caller. */
void scps__engine_gather(scps_engine *e, int stack, const scps_coo *coo, int32_t n_sc, uint32_t first,
                        uint32_t end, float *out, void *scratch);

/* Each row the partition reads, once, in the partition's (ascending) row
 * order, dim floats each, into out (scps__coo_distinct_rows(coo) x dim): a
 * Lookup's answer in distinct rows. The partition must have passed
 * scps__engine_check_coo. Only reads the SparseCore's memory. */
void scps__engine_copy_rows(scps_engine *e, int stack, int32_t local_sc, const scps_coo *coo, float *out);

/* scps__engine_gather's values for the samples [first, end), rounded to
 * little-endian bfloat16 (scps__bf16_encode) at out + first * dim * 2 (out
 * holds total_sample_count x dim x 2 bytes): bit for bit what gathering and
 * then encoding gives, but each sample's float32 values only pass through
 * the stack. scratch: as for scps__engine_gather. */
void scps__engine_gather_bf16(scps_engine *e, int stack, const scps_coo *coo, int32_t n_sc, uint32_t first,
                             uint32_t end, uint8_t *out, void *scratch);

/* scps__engine_gather's values for the samples [first, end) handed to sink
 * in runs of whole samples in sample order, at most SCPS_GATHER_SINK_FLOATS
 * values (and at least one sample) a run: sink(ctx, first sample of the
 * run, samples, values) may encode them however it likes; the float32
 * values live only in a buffer on the stack, valid during the call.
 * scratch: as for scps__engine_gather. */
#define SCPS_GATHER_SINK_FLOATS 4096
typedef void (*scps_gather_sink)(void *ctx, uint32_t sample, uint32_t n, const float *values);
void scps__engine_gather_each(scps_engine *e, int stack, const scps_coo *coo, int32_t n_sc, uint32_t first,
                             uint32_t end, scps_gather_sink sink, void *ctx, void *scratch);

/* scps__engine_copy_rows with each value as little-endian bfloat16 (2 bytes
 * per value, scps__bf16_encode): the same rows, never written as float32. */
void scps__engine_copy_rows_bf16(scps_engine *e, int stack, int32_t local_sc, const scps_coo *coo, uint8_t *out);

/* For each distinct row of the partition: g = sum of gain * grads[sample],
 * then the stack's optimizer applied once; untouched rows and slots are not
 * written. grads is [total_sample_count x dim] and must be finite. Rows not
 * kept in float32 are decoded, updated in float32 and rounded back
 * (scps__engine_rounding), and so are slots not kept in float32; every
 * lookup decodes the rows it reads. */
void scps__engine_update(scps_engine *e, int stack, int32_t local_sc, const scps_coo *coo,
                        const float *grads, const scps_step *step);

/* Whether every row sum scps__engine_update (bf16: scps__engine_update_bf16)
 * would form from coo and grads is finite, each formed the same way; if
 * not, *bad_row is the partition's first row whose sum is not. Finite
 * gradients can still sum past float32's range (or a large gain take one
 * there); a caller that must reject such a push before writing anything
 * asks this first, where a bound on the sums does not already rule it out. */
bool scps__engine_sums_finite(const scps_engine *e, int stack, const scps_coo *coo, const void *grads, bool bf16,
                             uint32_t *bad_row);

/* scps__engine_update with grads in bfloat16 ([total_sample_count x dim]
 * values as scps.proto sends them, exponents checked by the caller): the
 * same tables bit for bit as widening them first, without writing the
 * float32 copy or reading twice its bytes. */
void scps__engine_update_bf16(scps_engine *e, int stack, int32_t local_sc, const scps_coo *coo,
                             const uint16_t *grads, const scps_step *step);

/* Checks a by-row list (scps.proto StackGradients.row_gradients) for stack
 * on the process-local SparseCore local_sc: every row below rows_per_sc and
 * no padding row, and the rows strictly ascending. Returns
 * SCPS_ERANGE/SCPS_EINVAL naming the position and the value. */
int scps__engine_check_rows(const scps_engine *e, int stack, int32_t local_sc, const uint32_t *rows, size_t n,
                           scps_error *err);

/* For each rows[i] (checked by scps__engine_check_rows): the stack's optimizer
 * applied once with gradient grads[i * dim .. i * dim + dim), which must be
 * finite. What scps__engine_update does after summing a row's gradient. */
void scps__engine_update_rows(scps_engine *e, int stack, int32_t local_sc, const uint32_t *rows, size_t n,
                             const float *grads, const scps_step *step);

/* Direct access to a shard: the stack's rows on local_sc ([rows_per_sc x dim])
 * and slot k of the same shape. For checkpoints, tests and export. Rows or
 * a slot not kept in float32 (scps_stack_layout.storage, slot_storage)
 * have no float32 array: NULL; their values are scps__engine_codes'. */
float *scps__engine_shard(scps_engine *e, int stack, int32_t local_sc);
float *scps__engine_slot(scps_engine *e, int stack, int32_t local_sc, int slot);

/* Array `array` (0: the rows, 1 + k: slot k, which the optimizer must
 * have) of the stack on local_sc in its storage format: rows_per_sc rows
 * of the codec's row_bytes each, as scps__engine_codec encodes them (for
 * float32, scps__engine_shard's or scps__engine_slot's floats). */
uint8_t *scps__engine_codes(scps_engine *e, int stack, int32_t local_sc, int array);
const scps_storage_codec *scps__engine_codec(const scps_engine *e, int stack, int array);

/* How an update rounds row `row` of the stack's shard on local_sc into its
 * storage (array 0: the row, 1 + k: slot k) at step->step: to nearest, or
 * stochastically with a seed made from the stack's name, the step and the
 * array, and the position (global SparseCore * rows_per_sc + row) * dim of
 * the row's first value, so the draws repeat for the same update. */
void scps__engine_rounding(const scps_engine *e, int stack, int32_t local_sc, uint32_t row, int array,
                          const scps_step *step, scps_exmy_rounding *r);

/* Logical row `id` of table `table` (embedding_dim floats) and its slots
 * (num_slots * embedding_dim floats, may be NULL). SCPS_ERANGE if the id is
 * outside the vocabulary or lives on another process. */
int scps__engine_read_row(const scps_engine *e, int table, int64_t id, float *row, float *slots,
                         scps_error *err);

/* Simulated memory of the process-local SparseCore local_sc. */
const scps_hbm *scps__engine_hbm(const scps_engine *e, int32_t local_sc);

/* Values written through scps__engine_shard / scps__engine_slot (a checkpoint
 * loaded): what the engine knew of every shard's values is forgotten, and
 * scps__engine_value_bounds scans each shard again when next asked. */
void scps__engine_values_written(scps_engine *e);

/* What is known of the values of a stack's shard on local_sc: out[0] its
 * rows, out[1 + k] slot k (scps_value_bounds; 1 + num_slots entries): kept
 * by every update, exact after initialization, and after
 * scps__engine_values_written found by one scan of the shard (its rows and
 * slots, bytes of memory once). Writes the engine's record: call it from
 * the thread that updates that SparseCore, never beside an update of it. */
void scps__engine_value_bounds(scps_engine *e, int stack, int32_t local_sc, scps_value_bounds *out);

/* A row whose update would leave a value that is not finite. */
typedef struct scps_update_fault {
  uint32_t row;   /* local row */
  int array;      /* 0: the row, 1 + k: slot k */
  int32_t column;
  float before, after;
  bool already;   /* the value was not finite before the update */
} scps_update_fault;

/* The update scps__engine_update (bf16: _bf16; by_row: scps__engine_update_rows,
 * with grads one float32 vector per coo->rows entry) would make, computed
 * row by row on copies without writing: whether every value of every row it
 * touches is finite before and after; if not, the first row's fault goes
 * to *fault. A caller that must refuse such a push before writing anything
 * asks this where scps__optimizer_update_bounded cannot prove it. Only
 * reads the engine. */
bool scps__engine_update_finite(scps_engine *e, int stack, int32_t local_sc, const scps_coo *coo, const void *grads,
                               bool bf16, bool by_row, const scps_step *step, scps_update_fault *fault);

#endif
