/* scps_saver: a server process's checkpoints: restore at start, the save
 * thread, the gate that parks ApplyGradients during a save, the Checkpoint
 * method, the timer's checkpoint_due and solo saves, and their counters. */
#ifndef SCPS_SAVER_H
#define SCPS_SAVER_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <grpc/status.h>

#include "scps_checkpoint.h"
#include "scps_error.h"

struct scps_server;
struct scps_call;

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
  struct scps_limit_bounds *bounds; /* [n_stacks]: the range each limit in force may take */
  double last_save_end;             /* scps_clock_s() when the last save attempt ended; 0: none */
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
} scps_saver;

/* Sets up the saver, restores the checkpoint the options name (or the
 * newest under checkpoint_dir) into the engine and starts the save thread. */
int scps_saver_init(struct scps_server *s, scps_error *err);

/* Stops the save thread once its queue is done; then frees. */
void scps_saver_free(struct scps_server *s);

/* Submits a validated ApplyGradients call to the pipeline (its gradient
 * values are checked there, before any write), or parks it while the gate
 * is closed. */
void scps_saver_submit_apply(struct scps_server *s, struct scps_call *c);

/* An ApplyGradients finished on every SparseCore (from its tc_fn): records
 * its step; returns whether the response should carry checkpoint_due. */
bool scps_saver_apply_done(struct scps_server *s, int64_t step);

/* An ApplyGradients the workers rejected (a gradient not finite) before
 * writing anything: counted out like a finished one, leaving the step and
 * the tables' state as they were. */
void scps_saver_apply_rejected(struct scps_server *s);

/* The Checkpoint method (on a completion-queue thread): validates and queues. */
void scps_saver_handle(struct scps_call *c);

/* See scps_server_checkpoint_tick. */
void scps_saver_tick(struct scps_server *s, int64_t tick);

/* Whether an ApplyGradients or Checkpoint may name `step`
 * (scps_step_check against the step held and --max-step-advance): OK, or
 * INVALID_ARGUMENT / FAILED_PRECONDITION with msg naming the step, the step
 * held and the flag. */
grpc_status_code scps_saver_check_step(struct scps_server *s, int64_t step, char *msg, size_t len);

/* Takes an opened checkpoint's step, limits in force and place as the
 * process's own (its tables were loaded from it); with mu held, or before
 * the save thread runs. */
void scps_saver_adopt(struct scps_server *s, const scps_checkpoint *ck, const char *dir,
                      const scps_checkpoint_stats *st);

/* Queues a validated Checkpoint or Restore call for the save thread and
 * closes the gate: ApplyGradients park until it is done. */
void scps_saver_queue(struct scps_server *s, struct scps_call *c);

/* See scps_server_save_held. */
int scps_saver_save_held(struct scps_server *s, int64_t *step, char *path, size_t cap, scps_error *err);

#endif
