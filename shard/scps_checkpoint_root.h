/* scps_checkpoint_root: the step directories below a checkpoint root: listing
 * them, finding the newest complete one (the owner's), retention. */
#ifndef SCPS_CHECKPOINT_ROOT_H
#define SCPS_CHECKPOINT_ROOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "scps_checkpoint.h"

/* Path of the step directory of the newest complete checkpoint under root
 * (cap bytes); SCPS_ENOENT when there is none. Incomplete ones (a file
 * missing: a crash during their save) are skipped; a newer one with every
 * file present that fails to open (checksum, size, parse, mismatch) fails
 * the call with its code, naming it, rather than being passed over. */
int scps__checkpoint_root_latest(const char *root, char *path, size_t cap, scps_error *err);

/* scps__checkpoint_root_latest among the owner's checkpoints only: a step
 * directory that opens but is not the owner's (scps__checkpoint_is_owned) is
 * passed over and noted, however new; one that does not open (damaged) fails
 * the call as there, unless one of its manifests verifies as another
 * cluster's, when it too is passed over and noted. */
int scps__checkpoint_root_latest_own(const char *root, const scps_checkpoint_owner *own, char *path, size_t cap,
                                    scps_error *err);

/* For a root that holds only the owner's process's parts (no step directory
 * there has another process's manifest: a process keeping its checkpoints
 * on a volume of its own, where no checkpoint is ever complete): the newest
 * step directory whose owner's part is present in full and is the owner's
 * (scps__checkpoint_open_part). A part cut short is skipped; a newer one
 * present in full that does not open fails the call, naming it. SCPS_ENOENT
 * when there is none, or when the root is shared with other processes (their
 * parts restore together: scps__checkpoint_root_latest_own). */
int scps__checkpoint_root_latest_own_part(const char *root, const scps_checkpoint_owner *own, char *path, size_t cap,
                                         scps_error *err);

/* One step directory under a root, as scps__checkpoint_root_list finds it. */
typedef struct scps_checkpoint_entry {
  int64_t step;
  bool complete; /* scps__checkpoint_open succeeds: every process's manifest and file */
  char dir[4096];
} scps_checkpoint_entry;

/* The step directories under root (step-<12 to 18 digits>), newest first;
 * *out is malloc'ed (the caller frees it). SCPS_ENOENT when root does not
 * exist. */
int scps__checkpoint_root_list(const char *root, scps_checkpoint_entry **out, int *n, scps_error *err);

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
 * through a symlink. In a root of the owner's process alone
 * (scps__checkpoint_root_latest_own_part), that process's parts in full
 * count as complete checkpoints. */
int scps__checkpoint_root_retain(int root_fd, const char *root, const scps_checkpoint_owner *own, int keep,
                                int64_t saved, int in_progress, scps_error *err);

#endif
