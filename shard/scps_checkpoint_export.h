/* scps_checkpoint_export: offline rewrites of a checkpoint (scps-admin's):
 * one table as a .npy array, or the whole checkpoint for another topology. */
#ifndef SCPS_CHECKPOINT_EXPORT_H
#define SCPS_CHECKPOINT_EXPORT_H

#include "scps_checkpoint.h"

/* Writes table `table` as an unstacked, unsharded .npy file (format 1.0,
 * '<f4', shape (vocabulary_size, embedding_dim), C order); slot >= 0 writes
 * that optimizer slot instead (scps__optimizer_slot_name) of the rows (-1).
 * Of a part (scps__checkpoint_open_part), the rows of ids the part's
 * SparseCores do not hold are NaN. */
int scps__checkpoint_export_table(const scps_checkpoint *c, const char *table, int slot,
                                 const char *path, scps_error *err);

/* Rewrites the checkpoint at dir for another topology under dst_root, with
 * the same step, specs and limits: values and slots identical. SCPS_EEXIST
 * when dst_root already holds that step's directory. */
int scps__checkpoint_export_topology(const char *dir, const scps_topology *to, const char *dst_root,
                                    scps_checkpoint_stats *stats, scps_error *err);

/* One storage format change: table `table`'s rows (slot "") or its
 * optimizer slot named `slot` to storage format `format`. */
typedef struct scps_checkpoint_format_change {
  char table[SCPS_NAME_MAX];
  char slot[SCPS_NAME_MAX];
  char format[SCPS_STORAGE_NAME_MAX];
} scps_checkpoint_format_change;

/* scps__checkpoint_export_topology for topology `to` (NULL: the
 * checkpoint's) with the storage formats changed as listed, later changes
 * of the same array winning: the specs written declare the new formats
 * and the data is converted as a restore converts it (scps__checkpoint_load).
 * Tables whose storage no longer matches their stack's other tables are
 * stacked anew. A change naming no table or slot of the checkpoint, or no
 * format, gives SCPS_EINVAL naming it. */
int scps__checkpoint_export_as(const char *dir, const scps_topology *to, const scps_checkpoint_format_change *changes,
                              int n_changes, const char *dst_root, scps_checkpoint_stats *stats, scps_error *err);

#endif
