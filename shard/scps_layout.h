/* scps_layout: table and feature stacking, padding, mod sharding with
 * rotation: where every table row and every feature sample lives in a cluster. */
#ifndef SCPS_LAYOUT_H
#define SCPS_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "scps_spec.h"

#define SCPS_STACK_NAME_MAX SCPS_NAME_MAX /* explicit names; automatic ones stay within 65 */
#define SCPS_DEFAULT_ACTIVATION_MEM_LIMIT (2 << 20)

typedef struct scps_layout_options {
  int64_t activation_mem_bytes_limit; /* auto stacking splits groups above this; 0 = 2 MiB */
  int32_t rotation;                   /* shard rotation step between stacked tables; -1 = sc_per_process */
} scps_layout_options;

typedef struct scps_table_layout {
  int stack;                  /* index into layout->stacks */
  int64_t padded_vocab;       /* vocabulary rounded up to a multiple of 8*N */
  int32_t padded_dim;         /* embedding_dim rounded up to a multiple of 8 */
  int64_t row_offset_in_shard;/* first row of this table in every shard of its stack */
  int32_t shard_rotation;     /* id i lives on SparseCore (i % N + rotation) % N */
} scps_table_layout;

typedef struct scps_feature_layout {
  int table;             /* index into layout->tables */
  int stack;             /* index into layout->stacks */
  int64_t sample_offset; /* first sample of this feature in its stack's sample space */
} scps_feature_layout;

typedef struct scps_stack_layout {
  char name[SCPS_STACK_NAME_MAX];
  int32_t dim;                 /* stack_embedding_dim: the largest padded dim of its tables */
  int64_t vocab;               /* stack_vocab_size: sum of padded vocabularies */
  int64_t rows_per_sc;         /* vocab / N, a multiple of 8 */
  int64_t total_sample_count;  /* sum of the batch sizes of its features */
  scps_optimizer_spec optimizer;
  scps_combiner combiner;
  scps_storage_format storage;     /* its tables' storage_format */
  scps_storage_format slot_storage[SCPS_MAX_SLOTS]; /* slot_formats */
  scps_rounding storage_rounding;  /* and storage_rounding */
  int32_t max_ids_per_partition;
  int32_t max_unique_ids_per_partition;
  int n_tables;
  int *tables;   /* table indices in stacking order (rotation order) */
  int n_features;
  int *features; /* feature indices in sample order */
} scps_stack_layout;

/* Everything derived from specs + topology. Read-only after creation; it owns
 * copies of the specs so callers may free theirs. */
typedef struct scps_layout {
  scps_topology topology;
  int32_t num_sc;            /* N = num_processes * sc_per_process */
  int32_t rotation_step;     /* rotation added per table within a stack */
  int n_tables;
  scps_table_spec *table_specs;
  scps_table_layout *tables;
  int n_features;
  scps_feature_spec *feature_specs;
  scps_feature_layout *features;
  int n_stacks;
  scps_stack_layout *stacks;
} scps_layout;

/* Validates specs and topology, then stacks: tables with an explicit `stack`
 * go to that stack; the rest are grouped automatically by (padded dim,
 * optimizer, combiner, clipping, storage) and split so that a stack's activations per
 * SparseCore stay under the activation memory limit. opts may be NULL. */
int scps__layout_create(const scps_table_spec *tables, int n_tables,
                       const scps_feature_spec *features, int n_features,
                       const scps_topology *topology, const scps_layout_options *opts,
                       scps_layout **out, scps_error *err);
void scps__layout_destroy(scps_layout *layout);

int scps__layout_find_stack(const scps_layout *layout, const char *name);

/* Global SparseCore holding id of table t: (id % N + rotation) % N. */
static inline int32_t scps__layout_sc_of(const scps_layout *l, int t, int64_t id) {
  return (int32_t)(((id % l->num_sc) + l->tables[t].shard_rotation) % l->num_sc);
}

/* Row of id of table t inside its stack's shard on that SparseCore. */
static inline int64_t scps__layout_local_row(const scps_layout *l, int t, int64_t id) {
  return id / l->num_sc + l->tables[t].row_offset_in_shard;
}

/* Process that owns a global SparseCore. */
static inline int32_t scps__layout_process_of_sc(const scps_layout *l, int32_t sc) {
  return sc / l->topology.sc_per_process;
}

/* Inverse mapping: which table and global id a (stack, global SC, local row)
 * holds; returns SCPS_ERANGE for padding rows. */
int scps__layout_row_to_id(const scps_layout *l, int stack, int32_t sc, int64_t local_row,
                          int *table, int64_t *id);

/* Local rows of table t on global SparseCore sc that hold an id: the
 * table's rows there are [row_offset_in_shard, + padded_vocab / N), and the
 * ones past this count are padding (its vocabulary ends first). */
int64_t scps__layout_rows_held(const scps_layout *l, int t, int32_t sc);

/* Bytes one SparseCore needs for a stack's rows plus optimizer slots. */
int64_t scps__layout_stack_bytes_per_sc(const scps_layout *l, int stack);

/* Bytes one row of the stack takes in its storage format
 * (scps__storage_row_bytes of its dim). */
int64_t scps__layout_row_bytes(const scps_layout *l, int stack);

/* The same for slot k's format. */
int64_t scps__layout_slot_row_bytes(const scps_layout *l, int stack, int slot);

#endif
