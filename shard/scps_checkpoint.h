/* scps_checkpoint: crash-safe checkpoints of one process's SparseCores (rows,
 * optimizer slots, step, limits in force): save, open, load with resharding, verify. */

/* On disk a checkpoint of step s is the directory ROOT/step-<s, 12 digits>/.
 * Process p writes one data file per (stack, global SparseCore) it owns,
 * "<stack index>.sc<global sc>.bin" = the shard's rows then each slot
 * (rows_per_sc rows of dim values each, padding included, in the storage
 * format its tables declare: little-endian float32 by default), and
 * last its manifest "manifest.p<p>.json": format version, step, topology,
 * the configuration fingerprint of the cluster that wrote it (when the
 * writer gave one: scps__checkpoint_save_at), the specs in the workload-file
 * format, the stacks (name, tables, limits in
 * force) and every file with its size and XXH64 checksum, and last a
 * "checksum" member: the XXH64 of the manifest's own text with that
 * member's digits as zeros (so a damaged manifest is caught too). Each file is
 * written as "<name>.tmp", fsynced, renamed, and the directory fsynced, so a
 * crash at any point leaves either a complete manifest or none. A checkpoint
 * is complete when the manifests of all its num_processes processes are
 * present and every file they list has the listed size.
 *
 * Beside this file: scps_checkpoint_snapshot (an in-memory copy to save
 * from), scps_checkpoint_export (offline rewrites: a table as .npy, another
 * topology) and scps_checkpoint_root (the step directories below a root:
 * listing, the newest, retention). Below them, the checkpoint's internals:
 * scps_ckpt_file (durable and checksummed file I/O), scps_ckpt_manifest,
 * scps_ckpt_owner (whose a checkpoint is) and scps_ckpt_data (an opened
 * checkpoint's rows). */
#ifndef SCPS_CHECKPOINT_H
#define SCPS_CHECKPOINT_H

#include <stdbool.h>
#include <stdint.h>

#include "scps_checkpoint_snapshot.h"
#include "scps_ckpt_manifest.h"
#include "scps_ckpt_owner.h"
#include "scps_engine.h"
#include "scps_error.h"
#include "scps_spec.h"

/* What a save or load did, for logs, Stats and benchmarks. */
typedef struct scps_checkpoint_stats {
  int64_t bytes;    /* data bytes written or read */
  int32_t files;    /* data files written or read */
  double seconds;   /* wall time of the whole call */
} scps_checkpoint_stats;

/* Writes this process's part of the checkpoint of `step` under root (created
 * if missing; the step directory too). limits has one entry per stack of the
 * engine's layout, in stack order, or is NULL for the layout's own limits.
 * The caller guarantees that nothing writes the engine's rows or slots during
 * the call (lookups may go on). An existing manifest of this process for the
 * same step is removed first, so a repeated save never leaves a manifest that
 * describes half-rewritten files. On failure (SCPS_EIO naming the path and
 * errno text; SCPS_ENOSPC for ENOSPC/EFBIG) the temporaries are removed and
 * any other checkpoint is untouched. */
int scps__checkpoint_save(const scps_engine *e, const char *root, int64_t step,
                         const scps_checkpoint_limits *limits, scps_checkpoint_stats *stats,
                         scps_error *err);

/* An opened checkpoint: its manifests read and cross-checked (same step,
 * topology, specs in every one; every file present with its size). Data is
 * not read until load, verify or export. */
typedef struct scps_checkpoint scps_checkpoint;

/* dir is a step directory. Refuses a missing directory or one without a
 * first manifest with SCPS_ENOENT (saying so when dir is a checkpoint root,
 * holding step directories), a path that is not a directory with
 * SCPS_EINVAL, an incomplete or inconsistent checkpoint
 * with SCPS_ENOENT / SCPS_EPARSE / SCPS_EMISMATCH naming the file, and a
 * manifest whose checksum fails or a data file of another size than listed
 * with SCPS_ECORRUPT naming it. Every size read from a manifest is bounded
 * before it is used. */
int scps__checkpoint_open(const char *dir, scps_checkpoint **out, scps_error *err);
void scps__checkpoint_close(scps_checkpoint *c);

/* Opens only process `process`'s part of the checkpoint in dir: its
 * manifest (checksum, content) and its data files (present, of the listed
 * sizes), whether or not the other processes' parts are there (a cluster
 * whose processes keep their checkpoints on volumes of their own). Errors
 * as scps__checkpoint_open. verify reads only this part's files; load puts it
 * only into that process of the same topology and stacking (SCPS_EMISMATCH
 * otherwise). */
int scps__checkpoint_open_part(const char *dir, int32_t process, scps_checkpoint **out, scps_error *err);

/* Data bytes of the files the checkpoint (or part) lists. */
int64_t scps__checkpoint_bytes(const scps_checkpoint *c);

int64_t scps__checkpoint_step(const scps_checkpoint *c);
const scps_topology *scps__checkpoint_topology(const scps_checkpoint *c);
/* The specs the checkpoint was written with; valid until close. */
void scps__checkpoint_specs(const scps_checkpoint *c, const scps_table_spec **tables, int *n_tables,
                           const scps_feature_spec **features, int *n_features);
/* Limits in force saved for the stack named `stack`; SCPS_ENOENT if the
 * checkpoint has no stack of that name (restoring into another stacking). */
int scps__checkpoint_limits_of(const scps_checkpoint *c, const char *stack, int32_t *max_ids,
                              int32_t *max_unique_ids);

/* scps__specs_diff of the checkpoint's specs and the given ones (labelled
 * "checkpoint" and name), but for the tables' storage formats, which a load
 * converts: 0 when they are one declaration. topology: compared with the
 * checkpoint's, or NULL to leave topologies aside. */
int scps__checkpoint_specs_diff(const scps_checkpoint *c, const scps_topology *topology,
                               const scps_table_spec *tables, int n_tables, const scps_feature_spec *features,
                               int n_features, const char *name, char *msg, size_t len);

/* Fills the engine's rows and slots from the checkpoint. The engine's specs
 * must equal the checkpoint's but for storage formats (SCPS_EMISMATCH naming
 * the first difference, scps__specs_diff); its topology may differ: every
 * (table, id) row and its slots land where the engine's layout puts them, so
 * P x S -> P' x S' is exact. Rows and slots saved in another storage format
 * than the engine's are decoded and rounded to the nearest value of the
 * engine's (exact when the engine's format holds every value of the
 * checkpoint's; a NaN that the engine's format cannot hold gives
 * SCPS_EINVAL naming the table and id). Every file read is checked against its size and checksum; a
 * mismatch gives SCPS_ECORRUPT naming the file, and the engine's contents
 * are then unspecified (the caller must not serve from it). */
int scps__checkpoint_load(const scps_checkpoint *c, scps_engine *e, scps_checkpoint_stats *stats,
                         scps_error *err);

/* Reads every file of the checkpoint and checks sizes and checksums. */
int scps__checkpoint_verify(const scps_checkpoint *c, scps_checkpoint_stats *stats, scps_error *err);

/* ---- ownership, saving below a root that is already open ----
 * A server writes and prunes checkpoints below its --checkpoint-dir only:
 * the step directory and every file are created and removed relative to
 * directory descriptors, never through a symlink (scps_checkpoint_owner:
 * scps_ckpt_owner.h). */

/* Whether the opened checkpoint is the owner's: its manifests carry the
 * owner's fingerprint, or none and the owner's exact declaration. When not,
 * why (if given) says what differs. */
bool scps__checkpoint_is_owned(const scps_checkpoint *c, const scps_checkpoint_owner *own, char *why, size_t len);

typedef struct scps_checkpoint_save_opts {
  /* Write this snapshot (of the same engine) instead of the engine's
   * memory; NULL: the engine's, which nothing may write meanwhile. */
  const scps_checkpoint_snapshot *snapshot;
  /* Writes the owner's fingerprint into the manifest and refuses
   * (SCPS_EMISMATCH, naming it) to write into a step directory holding a
   * manifest that is verifiably another cluster's. NULL: neither. */
  const scps_checkpoint_owner *owner;
} scps_checkpoint_save_opts;

/* scps__checkpoint_save below root_fd, an open directory (root names it in
 * messages): the step directory is created with mkdirat and opened with
 * O_NOFOLLOW, every file is created with O_EXCL | O_NOFOLLOW after removing
 * whatever had its temporary name, and renamed within that directory, so a
 * symlink planted where a step directory or file will be is never followed
 * (a symlinked step directory fails with SCPS_EIO naming it). opts may be
 * NULL. */
int scps__checkpoint_save_at(int root_fd, const char *root, const scps_engine *e, int64_t step,
                            const scps_checkpoint_limits *limits, const scps_checkpoint_save_opts *opts,
                            scps_checkpoint_stats *stats, scps_error *err);

#endif
