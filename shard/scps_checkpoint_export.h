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

#endif
