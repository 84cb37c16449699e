/* scps_checkpoint: crash-safe checkpoint files of one process's SparseCores
 * (rows, optimizer slots, step, limits in force), restore with resharding,
 * verification and export of a table as a .npy array.
 *
 * On disk a checkpoint of step s is the directory ROOT/step-<s, 12 digits>/.
 * Process p writes one data file per (stack, global SparseCore) it owns,
 * "<stack index>.sc<global sc>.bin" = the shard's rows then each slot
 * ([rows_per_sc x dim] little-endian float32 each, padding included), and
 * last its manifest "manifest.p<p>.json": format version, step, topology,
 * the configuration fingerprint of the cluster that wrote it (when the
 * writer gave one: scps_checkpoint_save_at), the specs in the workload-file
 * format, the stacks (name, tables, limits in
 * force) and every file with its size and XXH64 checksum, and last a
 * "checksum" member: the XXH64 of the manifest's own text with that
 * member's digits as zeros (so a damaged manifest is caught too). Each file is
 * written as "<name>.tmp", fsynced, renamed, and the directory fsynced, so a
 * crash at any point leaves either a complete manifest or none. A checkpoint
 * is complete when the manifests of all its num_processes processes are
 * present and every file they list has the listed size. */
#ifndef SCPS_CHECKPOINT_H
#define SCPS_CHECKPOINT_H

#include <stdbool.h>
#include <stdint.h>

#include "scps_engine.h"
#include "scps_error.h"
#include "scps_spec.h"

#define SCPS_CHECKPOINT_FORMAT 1

/* Limits in force of one stack, by stack name (scps_prep_get_limits). */
typedef struct scps_checkpoint_limits {
  char stack[SCPS_STACK_NAME_MAX];
  int32_t max_ids_per_partition;
  int32_t max_unique_ids_per_partition;
} scps_checkpoint_limits;

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
int scps_checkpoint_save(const scps_engine *e, const char *root, int64_t step,
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
int scps_checkpoint_open(const char *dir, scps_checkpoint **out, scps_error *err);
void scps_checkpoint_close(scps_checkpoint *c);

/* Opens only process `process`'s part of the checkpoint in dir: its
 * manifest (checksum, content) and its data files (present, of the listed
 * sizes), whether or not the other processes' parts are there (a cluster
 * whose processes keep their checkpoints on volumes of their own). Errors
 * as scps_checkpoint_open. verify reads only this part's files; load puts it
 * only into that process of the same topology and stacking (SCPS_EMISMATCH
 * otherwise). */
int scps_checkpoint_open_part(const char *dir, int32_t process, scps_checkpoint **out, scps_error *err);

/* Data bytes of the files the checkpoint (or part) lists. */
int64_t scps_checkpoint_bytes(const scps_checkpoint *c);

int64_t scps_checkpoint_step(const scps_checkpoint *c);
const scps_topology *scps_checkpoint_topology(const scps_checkpoint *c);
/* The specs the checkpoint was written with; valid until close. */
void scps_checkpoint_specs(const scps_checkpoint *c, const scps_table_spec **tables, int *n_tables,
                           const scps_feature_spec **features, int *n_features);
/* Limits in force saved for the stack named `stack`; SCPS_ENOENT if the
 * checkpoint has no stack of that name (restoring into another stacking). */
int scps_checkpoint_limits_of(const scps_checkpoint *c, const char *stack, int32_t *max_ids,
                              int32_t *max_unique_ids);

/* Fills the engine's rows and slots from the checkpoint. The engine's specs
 * must equal the checkpoint's (SCPS_EMISMATCH naming the first difference,
 * scps_specs_diff); its topology may differ: every (table, id) row and its
 * slots land where the engine's layout puts them, so P x S -> P' x S' is
 * exact. Every file read is checked against its size and checksum; a
 * mismatch gives SCPS_ECORRUPT naming the file, and the engine's contents
 * are then unspecified (the caller must not serve from it). */
int scps_checkpoint_load(const scps_checkpoint *c, scps_engine *e, scps_checkpoint_stats *stats,
                         scps_error *err);

/* Reads every file of the checkpoint and checks sizes and checksums. */
int scps_checkpoint_verify(const scps_checkpoint *c, scps_checkpoint_stats *stats, scps_error *err);

/* Writes table `table` as an unstacked, unsharded .npy file (format 1.0,
 * '<f4', shape (vocabulary_size, embedding_dim), C order); slot >= 0 writes
 * that optimizer slot instead (scps_optimizer_slot_name) of the rows (-1). */
int scps_checkpoint_export_table(const scps_checkpoint *c, const char *table, int slot,
                                 const char *path, scps_error *err);

/* Rewrites the checkpoint at dir for another topology under dst_root, with
 * the same step, specs and limits: values and slots identical. */
int scps_checkpoint_convert(const char *dir, const scps_topology *to, const char *dst_root,
                            scps_checkpoint_stats *stats, scps_error *err);

/* Path of the step directory of the newest complete checkpoint under root
 * (cap bytes); SCPS_ENOENT when there is none. Incomplete ones (a file
 * missing: a crash during their save) are skipped; a newer one with every
 * file present that fails to open (checksum, size, parse, mismatch) fails
 * the call with its code, naming it, rather than being passed over. */
int scps_checkpoint_find_latest(const char *root, char *path, size_t cap, scps_error *err);

/* One step directory under a root, as scps_checkpoint_list finds it. */
typedef struct scps_checkpoint_entry {
  int64_t step;
  bool complete; /* scps_checkpoint_open succeeds: every process's manifest and file */
  char dir[4096];
} scps_checkpoint_entry;

/* The step directories under root (step-<12 to 18 digits>), newest first;
 * *out is malloc'ed (the caller frees it). SCPS_ENOENT when root does not
 * exist. */
int scps_checkpoint_list(const char *root, scps_checkpoint_entry **out, int *n, scps_error *err);

typedef struct scps_checkpoint_owner scps_checkpoint_owner; /* below */

/* After the save of step `saved` below root_fd (an open directory; root
 * names it in messages), among the step directories there that are the
 * owner's (its own manifest, manifest.p<process_index>.json, verifies and
 * is the owner's: scps_checkpoint_owner): keeps that one and the newest
 * complete checkpoints older than it up to `keep` in all, deletes older
 * ones, and incomplete ones older than the newest kept complete one or
 * beyond the newest `in_progress` (saves other processes may still be
 * writing). Deleting removes the files the owner's manifest lists, then
 * that manifest, then the directory once empty (the other processes remove
 * theirs). Complete checkpoints newer than `saved` come from a state left
 * behind by a restore of an older step: they are renamed
 * superseded-step-<N> (no longer restored as the newest; the files stay).
 * Any other step directory (another cluster's, unverifiable, a symlink) is
 * neither counted nor touched, only noted (own->note). Nothing is followed
 * through a symlink. */
int scps_checkpoint_retain(int root_fd, const char *root, const scps_checkpoint_owner *own, int keep, int64_t saved,
                           int in_progress, scps_error *err);

/* ---- ownership, snapshots, saving below a root that is already open ----
 * A server writes and prunes checkpoints below its --checkpoint-dir only:
 * the step directory and every file are created and removed relative to
 * directory descriptors, never through a symlink, and retention touches
 * only checkpoints whose manifest it can verify as its own cluster's. */

#define SCPS_CHECKPOINT_FINGERPRINT_BYTES 32

/* Who is asking: whose checkpoints retention may prune and a start may
 * restore without being told which. */
struct scps_checkpoint_owner {
  int32_t process_index; /* whose manifest (manifest.p<i>.json) decides */
  /* The cluster's configuration fingerprint (GetConfig's
   * config_fingerprint), written into every manifest this owner saves. */
  uint8_t fingerprint[SCPS_CHECKPOINT_FINGERPRINT_BYTES];
  bool has_fingerprint;
  /* This cluster's declaration, compared with manifests that carry no
   * fingerprint (written before manifests had one, or by `scps-admin
   * checkpoint convert`): such a one is this owner's when its topology and
   * specs equal these exactly. NULL: those are never this owner's. */
  const scps_layout *layout;
  /* Told of every step directory left alone because it could not be
   * verified as this owner's (why names the reason); may be NULL. */
  void (*note)(void *ctx, const char *step_dir, const char *why);
  void *note_ctx;
};

/* Whether the opened checkpoint is the owner's: its manifests carry the
 * owner's fingerprint, or none and the owner's exact declaration. When not,
 * why (if given) says what differs. */
bool scps_checkpoint_is_owned(const scps_checkpoint *c, const scps_checkpoint_owner *own, char *why, size_t len);

/* A copy of this process's rows and optimizer slots in memory, taken while
 * nothing writes them, so that writing it to disk needs no such guarantee.
 * The copy is anonymous memory of its own, returned to the system when
 * freed, and reclaimable by it whenever the copy is idle. */
typedef struct scps_checkpoint_snapshot scps_checkpoint_snapshot;

/* Bytes a snapshot of the engine's process takes (what a save writes). */
int64_t scps_checkpoint_snapshot_bytes(const scps_engine *e);
/* Copies the engine's rows and slots: into *s when it is a snapshot of the
 * same engine (its memory reused: faulting fresh pages in costs more than
 * the copy), else into a new one (*s replaced, the old one freed).
 * SCPS_ENOMEM when the memory cannot be mapped (*s is then NULL). The
 * engine must outlive the snapshot; its rows and slots must not be written
 * during this call. */
int scps_checkpoint_snapshot_take(const scps_engine *e, scps_checkpoint_snapshot **s, scps_error *err);
/* The copy is written and not needed until the next take: the system may
 * reclaim its pages at any time without writing them anywhere (MADV_FREE);
 * those it has not reclaimed by then cost the next take no page fault. */
void scps_checkpoint_snapshot_idle(scps_checkpoint_snapshot *s);
void scps_checkpoint_snapshot_free(scps_checkpoint_snapshot *s);

typedef struct scps_checkpoint_save_opts {
  /* Write this snapshot (of the same engine) instead of the engine's
   * memory; NULL: the engine's, which nothing may write meanwhile. */
  const scps_checkpoint_snapshot *snapshot;
  /* Writes the owner's fingerprint into the manifest and refuses
   * (SCPS_EMISMATCH, naming it) to write into a step directory holding a
   * manifest that is verifiably another cluster's. NULL: neither. */
  const scps_checkpoint_owner *owner;
} scps_checkpoint_save_opts;

/* scps_checkpoint_save below root_fd, an open directory (root names it in
 * messages): the step directory is created with mkdirat and opened with
 * O_NOFOLLOW, every file is created with O_EXCL | O_NOFOLLOW after removing
 * whatever had its temporary name, and renamed within that directory, so a
 * symlink planted where a step directory or file will be is never followed
 * (a symlinked step directory fails with SCPS_EIO naming it). opts may be
 * NULL. */
int scps_checkpoint_save_at(int root_fd, const char *root, const scps_engine *e, int64_t step,
                            const scps_checkpoint_limits *limits, const scps_checkpoint_save_opts *opts,
                            scps_checkpoint_stats *stats, scps_error *err);

/* scps_checkpoint_find_latest among the owner's checkpoints only: a step
 * directory that opens but is not the owner's (scps_checkpoint_is_owned) is
 * passed over and noted, however new; one that does not open (damaged) fails
 * the call as there, unless one of its manifests verifies as another
 * cluster's, when it too is passed over and noted. */
int scps_checkpoint_find_latest_own(const char *root, const scps_checkpoint_owner *own, char *path, size_t cap,
                                    scps_error *err);

#endif
