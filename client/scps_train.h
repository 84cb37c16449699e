/* scps_train: training loops over libscps: the client prepares, looks up and
 * pushes batches on a step schedule (scps_schedule) while the trainer's hooks
 * supply each batch's inputs and turn its activations into gradients. */
#ifndef SCPS_TRAIN_H
#define SCPS_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "scps_client.h"
#include "scps_schedule.h"

typedef struct scps_train_hooks {
  /* Batch i's inputs, one per feature (scps_client_feature_name's order);
   * they need to stay valid
   * only until the call returns to the library (it preprocesses them at
   * once). Runs on the SparseCore lane, in batch order. */
  int (*inputs)(void *ud, int64_t batch, const scps_feature_input **inputs, scps_error *err);
  /* The TensorCore work of batch i: read acts[f] (batch size x width of
   * feature f), write grads[f] (the loss gradient, same shape). Runs on
   * the caller's thread, in batch order. */
  int (*compute)(void *ud, int64_t batch, float *const *acts, float *const *grads, scps_error *err);
  /* Optional (NULL: none): told of each checkpoint the run saved
   * (checkpoint_every_steps), on the thread that pushes. */
  void (*checkpointed)(void *ud, const scps_client_checkpoint_result *res);
} scps_train_hooks;

/* Options of scps__train_run, initialised by scps__train_options_init and
 * extended the way scps_client_options is (scps_client.h): size tells the
 * library which fields the caller knows; later ones are only appended. */
typedef struct scps_train_options {
  size_t size; /* set by scps__train_options_init; 0 fails scps__train_run */
  scps_schedule_mode mode;
  int64_t steps;
  int64_t first_step;   /* global step of batch 0, for the optimizers; first_step + steps <= 2^53 */
  double learning_rate; /* < 0 (the default): each stack's configured rate */
  int64_t deadline_ms;  /* per lookup and per push; default (0) 30 s */
  /* > 0: after the push of each global step s with s + 1 a multiple of
   * checkpoint_every_steps is acknowledged (a grid that holds across
   * resumes), save the cluster checkpoint of s (scps_client_checkpoint) under
   * checkpoint_dir, relative to the servers' --checkpoint-dir (NULL: that
   * directory itself; the run is refused at once, SCPS_EINVAL, if a server
   * has none) before the next push; a failed checkpoint stops the run (so
   * does one the servers refuse as sooner than their
   * --checkpoint-min-interval after the last). */
  int64_t checkpoint_every_steps;
  const char *checkpoint_dir;
} scps_train_options;

/* Zeroes o and sets its size and defaults: sequential, no steps, from step
 * 0, each stack's learning rate, 30 s deadlines, no checkpoints. */
void scps__train_options_init(scps_train_options *o);

/* Runs o->steps batches. At most SCPS_SCHEDULE_SLOTS batches (partitions,
 * activations, gradients) are held at any time. */
int scps__train_run(scps_client *c, const scps_train_options *o, const scps_train_hooks *h, void *ud,
                   scps_schedule_stats *stats, scps_error *err);

#endif
