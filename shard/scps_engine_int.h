/* scps_engine_int: the engine's internal state (scps_engine.h), shared by the
 * files that implement it: shards, their storage and padding runs. */
#ifndef SCPS_ENGINE_INT_H
#define SCPS_ENGINE_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "scps_engine.h"
#include "scps_storage.h"

/* Local rows [lo, hi) of one SparseCore's shard of a stack that belong to
 * table `table` but hold no id of it: padding, never addressed. */
typedef struct pad_run {
  uint32_t lo, hi;
  int table;
} pad_run;

/* A shard's arrays: the rows (0), then each optimizer slot (1 + k). */
#define SCPS__ENGINE_ARRAYS (1 + SCPS_MAX_SLOTS)

/* One stack's rows and slots on one SparseCore, inside that SparseCore's arena. */
typedef struct shard {
  /* Array a in its storage format, row_bytes[a] a row (NULL: the optimizer
   * has no such slot), and where it is kept in float32 the same memory as
   * floats (rows, slots[k]; NULL otherwise). */
  uint8_t *codes[SCPS__ENGINE_ARRAYS];
  size_t row_bytes[SCPS__ENGINE_ARRAYS];
  float *rows;
  float *slots[SCPS_MAX_SLOTS];
  pad_run *pads; /* ascending, at most one per table of the stack */
  int n_pads;
  /* What is known of the values of the rows (0) and of each slot (1 + k),
   * for proving updates finite (scps__engine_value_bounds): the largest
   * magnitude's bits, folded from every value an update writes, and a lower
   * bound's bits as a signed integer (negative: none known), which an
   * update moves as scps__optimizer_slot_floor says; both exact after
   * initialization and after a scan; bounds_valid false after
   * scps__engine_values_written until the next scan of the shard. */
  uint32_t mag_bits[1 + SCPS_MAX_SLOTS];
  int32_t low_bits[1 + SCPS_MAX_SLOTS];
  bool bounds_valid;
} shard;

struct scps_engine {
  const scps_layout *layout;
  int32_t process_index;
  int32_t sc_per_process;
  scps_hbm *hbm;  /* [sc_per_process] */
  shard *shards;  /* [n_stacks * sc_per_process], stack-major */
  /* Per stack: each array's storage codec ([n_stacks * SCPS__ENGINE_ARRAYS],
   * array a of stack s at s * SCPS__ENGINE_ARRAYS + a), and the stack's
   * stochastic rounding seed (scps__engine_rounding). */
  scps_storage_codec *codecs;
  uint64_t *seeds;
};

static inline const scps_storage_codec *codec_of(const scps_engine *e, int stack, int array) {
  return &e->codecs[(size_t)stack * SCPS__ENGINE_ARRAYS + (size_t)array];
}

/* Whether the stack keeps its rows in a format other than float32. */
static inline bool encoded(const scps_engine *e, int stack) {
  return codec_of(e, stack, 0)->f.kind != SCPS_STORAGE_F32;
}

static inline shard *shard_of(const scps_engine *e, int stack, int32_t local_sc) {
  return &e->shards[(size_t)stack * (size_t)e->sc_per_process + (size_t)local_sc];
}

#endif
