/* scps_checkpoint_snapshot: a copy of one process's rows and optimizer slots
 * in memory, laid out as its checkpoint data files, for saving off the lock. */
#ifndef SCPS_CHECKPOINT_SNAPSHOT_H
#define SCPS_CHECKPOINT_SNAPSHOT_H

#include <stddef.h>
#include <stdint.h>

#include "scps_engine.h"
#include "scps_error.h"

/* A copy of this process's rows and optimizer slots in memory, taken while
 * nothing writes them, so that writing it to disk needs no such guarantee.
 * The copy is anonymous memory of its own, returned to the system when
 * freed, and reclaimable by it whenever the copy is idle. */
typedef struct scps_checkpoint_snapshot scps_checkpoint_snapshot;

/* Bytes a snapshot of the engine's process takes (what a save writes). */
int64_t scps__checkpoint_snapshot_bytes(const scps_engine *e);
/* Copies the engine's rows and slots: into *s when it is a snapshot of the
 * same engine (its memory reused: faulting fresh pages in costs more than
 * the copy), else into a new one (*s replaced, the old one freed).
 * SCPS_ENOMEM when the memory cannot be mapped (*s is then NULL). The
 * engine must outlive the snapshot; its rows and slots must not be written
 * during this call. */
int scps__checkpoint_snapshot_take(const scps_engine *e, scps_checkpoint_snapshot **s, scps_error *err);
/* The copy is written and not needed until the next take: the system may
 * reclaim its pages at any time without writing them anywhere (MADV_FREE);
 * those it has not reclaimed by then cost the next take no page fault. */
void scps__checkpoint_snapshot_idle(scps_checkpoint_snapshot *s);
void scps__checkpoint_snapshot_free(scps_checkpoint_snapshot *s);

/* The engine the snapshot is of. */
const scps_engine *scps__checkpoint_snapshot_engine(const scps_checkpoint_snapshot *s);
/* Data file i of the process (stack-major over its SparseCores, the order a
 * save writes them): its bytes as the file holds them (rows, then each
 * slot), *len of them. */
const void *scps__checkpoint_snapshot_file(const scps_checkpoint_snapshot *s, int i, size_t *len);

#endif
