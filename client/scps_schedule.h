/* scps_schedule: the training step schedules: sequential, and the SparseCore
 * API's one-step-stale pipeline that overlaps SparseCore and TensorCore work. */
#ifndef SCPS_SCHEDULE_H
#define SCPS_SCHEDULE_H

#include <stdint.h>

#include "scps_error.h"

typedef enum scps_schedule_mode {
  /* Step i: look up i, compute i, push i. Every lookup sees every earlier push. */
  SCPS_SCHEDULE_SEQUENTIAL = 0,
  /* Iteration t (0 .. steps+1): on the SparseCore lane push t-2 and then
   * look up t, while the TensorCore lane (the caller's thread) computes t-1.
   * Batch t is looked up with the pushes of batches up to t-2: it misses
   * only t-1's, exactly one step stale. The first iteration has no
   * TensorCore work and the last two no lookups, as the reference's
   * fake_tc_step and dummy inputs. */
  SCPS_SCHEDULE_PIPELINED = 1
} scps_schedule_mode;

/* The work of one batch. Each returns 0 or an SCPS_E* code (with err). In the
 * pipelined mode sc_push and sc_lookup run on the schedule's own thread and
 * tc_compute on the caller's, concurrently; batch i's three calls never
 * overlap each other and come in the order lookup, compute, push. */
typedef struct scps_schedule_ops {
  int (*sc_lookup)(void *ud, int64_t batch, scps_error *err);
  int (*tc_compute)(void *ud, int64_t batch, scps_error *err);
  int (*sc_push)(void *ud, int64_t batch, scps_error *err);
} scps_schedule_ops;

typedef struct scps_schedule_stats {
  int64_t steps;          /* batches computed and pushed */
  double wall_seconds;
  double sc_busy_seconds; /* time inside sc_lookup + sc_push */
  double tc_busy_seconds; /* time inside tc_compute */
} scps_schedule_stats;

/* Slots a caller needs for per-batch buffers: batch i may use slot i % n. */
#define SCPS_SCHEDULE_SLOTS 3

/* Runs `steps` batches. Stops at the first error (after the other lane has
 * finished its current call) and returns it; stats may be NULL. */
int scps__schedule_run(const scps_schedule_ops *ops, void *ud, int64_t steps, scps_schedule_mode mode,
                      scps_schedule_stats *stats, scps_error *err);

#endif
