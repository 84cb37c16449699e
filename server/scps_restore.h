/* scps_restore: a running process's checkpoint brought back: the load run on
 * the save thread, keeping data calls out meanwhile, the state it names. */
#ifndef SCPS_RESTORE_H
#define SCPS_RESTORE_H

#include <grpc/status.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "scps.pb-c.h"
#include "scps_checkpoint.h"

struct scps_server;
struct scps_call;

/* Whether a part of a checkpoint is of this process's cluster (same
 * topology and specs, what the config_fingerprint digests, but for the
 * storage formats, which a load converts); if not, diff says how it
 * differs. */
bool scps__restore_part_of_ours(const struct scps_server *s, const scps_checkpoint *ck, char *diff, size_t len);

/* Runs a queued Restore on the save thread, entered and left with the
 * saver's mu held, no ApplyGradients running and the gate closed: opens
 * and verifies this process's part of the step (every checksum), then, for
 * a load, keeps every Lookup out, loads it and takes its step; the
 * ApplyGradients parked meanwhile are refused. Fills *status and msg, or
 * path (the step directory) and resp. */
void scps__restore_run(struct scps_server *s, struct scps_call *c, grpc_status_code *status, char *msg, size_t len,
                      char *path, size_t path_cap, Scps__V1__RestoreResponse *resp);

/* Names the state the process now holds (at start, and after a Restore
 * loaded a checkpoint): a random state_id, not 0, for GetConfig. */
void scps__restore_new_state(struct scps_server *s);

/* An ApplyGradients' state_id (0: not given) against the process's: OK, or
 * FAILED_PRECONDITION with msg saying the state was replaced since the
 * client connected. */
grpc_status_code scps__restore_check_state(struct scps_call *c, uint64_t state_id, char *msg, size_t len);

/* For Lookup and ApplyGradients, before anything else: true when the call
 * was answered because a Restore is loading (Lookups: UNAVAILABLE, to be
 * retried) or a failed one left the tables undefined (FAILED_PRECONDITION). */
bool scps__restore_refused(struct scps_call *c);

#endif
