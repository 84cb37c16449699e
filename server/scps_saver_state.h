/* scps_saver_state: what a server process keeps of its checkpoints (the
 * saver's state, in the server struct): gate, queue, steps, limits, counters. */
#ifndef SCPS_SAVER_STATE_H
#define SCPS_SAVER_STATE_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <grpc/status.h>

#include "scps.pb-c.h"
#include "scps_checkpoint.h"

struct scps_server;
struct scps_call;

/* Room left in a checkpoint path for "/step-<12 digits>/<data file name>". */
#define SCPS_SAVER_PATH_RESERVE 128

/* The range a stack's limit in force may take: not below the declaration's
 * nor above what FDO may raise it to (scps_saver.c's bounds_init). */
typedef struct scps_limit_bounds {
  int32_t lo_ids, hi_ids, lo_unique, hi_unique;
} scps_limit_bounds;

/* Runs a queued Restore call on the save thread (scps__restore_run is the
 * one): entered and left with mu held; fills *status and msg, or path and
 * resp. */
typedef void (*scps_saver_run_fn)(struct scps_server *s, struct scps_call *c, grpc_status_code *status, char *msg,
                                  size_t len, char *path, size_t path_cap, Scps__V1__RestoreResponse *resp);

/* Guarded by mu. A save is taken only while no ApplyGradients runs: from the
 * moment a save is queued the gate is closed, new ApplyGradients are parked
 * in arrival order, and the save thread waits for those already in the
 * pipeline to finish. When the queue is empty the parked ones are submitted,
 * still in order, before any newer one. Lookups never pass the gate. */
typedef struct scps_saver {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t thread;
  bool inited, started, stop;
  bool gate_closed;
  int applies_running;                    /* submitted, tc_fn not yet done */
  struct scps_call *parked, *parked_tail; /* ApplyGradients waiting for the gate */
  struct scps_call *queue, *queue_tail;   /* Checkpoint calls waiting for the thread */
  bool solo_pending;                      /* the timer asked for a save */
  bool due;                               /* checkpoint_due in ApplyGradients responses */
  int64_t last_step;                      /* highest step applied or restored; -1: none */
  bool dirty;                             /* applied since the last save or restore */
  scps_checkpoint_limits *limits;         /* [n_stacks] limits in force */

  /* Restored at create. */
  char restored_from[PATH_MAX];
  int64_t restored_step, restored_bytes;
  double restored_seconds;
  scps_topology restored_topology; /* the restored checkpoint's writers' */

  /* Counters for Stats. */
  bool saving;
  int64_t saves, failures, bytes_total;
  int64_t last_saved_step, last_bytes;
  double last_seconds;
  char last_path[PATH_MAX];

  /* Where saves may go, how often, and the limits they may carry (issue
   * 26; see scps_saver.c's last section). */
  scps_limit_bounds *bounds;       /* [n_stacks]: the range each limit in force may take */
  double last_save_end;             /* scps__clock_s() when the last save attempt ended; 0: none */
  int64_t last_attempt_step;
  bool last_attempt_ok;
  int32_t last_files;
  char last_root[PATH_MAX];         /* the directory the last attempt saved below */
  int64_t saving_step;              /* while saving: the step and directory being saved */
  char saving_root[PATH_MAX];
  char **noted;                     /* step directories already logged as left alone */
  int n_noted, cap_noted;
  struct scps_checkpoint_snapshot *snapshot; /* the save thread's copy, idle between saves */
  /* The timer's solo saves land on the step grid (checkpoint_grid): while
   * grid_left > 0 the first ApplyGradients of a step above grid_at closes
   * the gate, and a save of step grid_at follows (then grid_at moves one
   * grid step on). solo_step is the pending solo save's step (-1: the step
   * held) and solo_why its log line's reason. */
  int64_t grid_at;
  int grid_left;
  int64_t solo_step;
  const char *solo_why;
  bool restore_running; /* a Restore is verifying or loading, mu released */
  scps_saver_run_fn run_restore; /* runs a queued Restore call (scps__saver_init) */
} scps_saver;

#endif
