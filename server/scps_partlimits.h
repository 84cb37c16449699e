/* scps_partlimits: the per-partition limits in force (the saver's), enforced on
 * Lookup and ApplyGradients as scps-server --limit-policy says. */
#ifndef SCPS_PARTLIMITS_H
#define SCPS_PARTLIMITS_H

#include <grpc/status.h>
#include <stddef.h>

#include "scps_call.h"

/* --partition-limits: every stack's limits in force set to the options'
 * (after a restore, before serving). */
void scps__partlimits_override(scps_server *s);

/* The call's stacks, validated: each (source, destination) partition of the
 * local SparseCores against the limits in force, read once under the
 * saver's lock. A stack by sample over them is refused (INVALID_ARGUMENT:
 * it is the client's data) naming stack, partition, count and limit, or,
 * with --limit-policy drop, keeps only the entries libscps's preprocessing
 * would keep (scps_prep.h's drop rule; the kept partitions go to call
 * memory), except that a Lookup asking a stack for distinct rows is refused
 * rather than dropped (its client pools the rows with the partitions it
 * sent). A stack by row carries no samples, so no sources: each
 * SparseCore's rows are checked against the most a batch within the limits
 * can touch, num_sc x max_unique_ids_per_partition, under either policy.
 * Returns OK or the status, msg naming the field. */
grpc_status_code scps__partlimits_apply(scps_call *c, char *msg, size_t len);

#endif
