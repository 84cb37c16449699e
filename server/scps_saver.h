/* scps_saver: a server process's checkpoints: restore at start, the save
 * thread, the gate that parks ApplyGradients during a save, the admission of
 * Checkpoint calls, the timer's checkpoint_due and solo saves. */
#ifndef SCPS_SAVER_H
#define SCPS_SAVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <grpc/status.h>

#include "scps.pb-c.h"
#include "scps_checkpoint.h"
#include "scps_error.h"
#include "scps_saver_state.h"

struct scps_server;
struct scps_call;

/* Sets up the saver, restores the checkpoint the options name (or the
 * newest under checkpoint_dir) into the engine and starts the save thread;
 * run_restore runs the Restore calls queued with scps__saver_queue. */
int scps__saver_init(struct scps_server *s, scps_saver_run_fn run_restore, scps_error *err);

/* Stops the save thread once its queue is done; then frees. */
void scps__saver_free(struct scps_server *s);

/* Submits a validated ApplyGradients call to the pipeline (its gradient
 * values are checked there, before any write), or parks it while the gate
 * is closed. */
void scps__saver_submit_apply(struct scps_server *s, struct scps_call *c);

/* An ApplyGradients finished on every SparseCore (from its tc_fn): records
 * its step; returns whether the response should carry checkpoint_due. */
bool scps__saver_apply_done(struct scps_server *s, int64_t step);

/* An ApplyGradients the workers rejected (a gradient not finite) before
 * writing anything: counted out like a finished one, leaving the step and
 * the tables' state as they were. */
void scps__saver_apply_rejected(struct scps_server *s);

/* Takes a validated Checkpoint call (its request is c->request): under the
 * saver's lock decides whether it is queued for the save thread (closing
 * the gate), answered at once with the save it repeats, or refused (the
 * step already passed, --checkpoint-min-interval); answers it in the last
 * two cases. */
void scps__saver_checkpoint(struct scps_call *c);

/* See scps__server_checkpoint_tick. */
void scps__saver_tick(struct scps_server *s, int64_t tick);

/* What an ApplyGradients or Checkpoint is checked for first: the caller's
 * view (scps__call_check_view of its fingerprint and process index), a
 * step >= 0, and one it may name (scps__step_check against the step held
 * and --max-step-advance). OK, or the status with msg naming the field,
 * the step, the step held and the flag. */
grpc_status_code scps__saver_check_request(struct scps_call *c, const uint8_t *fingerprint, size_t fingerprint_len,
                                           int32_t process_index, int64_t step, char *msg, size_t len);

/* Takes an opened checkpoint's step, limits in force and place as the
 * process's own (its tables were loaded from it); with mu held, or before
 * the save thread runs. */
void scps__saver_adopt(struct scps_server *s, const scps_checkpoint *ck, const char *dir,
                      const scps_checkpoint_stats *st);

/* Queues a validated Checkpoint or Restore call for the save thread and
 * closes the gate: ApplyGradients park until it is done. */
void scps__saver_queue(struct scps_server *s, struct scps_call *c);

/* See scps__server_save_held. */
int scps__saver_save_held(struct scps_server *s, int64_t *step, char *path, size_t cap, scps_error *err);

#endif
