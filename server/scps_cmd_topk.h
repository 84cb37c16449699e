/* scps_cmd_topk: the TopK method: each SparseCore worker scores its rows of
 * a table against the queries, and the best of them are answered by id. */
#ifndef SCPS_CMD_TOPK_H
#define SCPS_CMD_TOPK_H

#include "scps_call.h"

/* Decodes and validates a TopKRequest (scps.proto), waits for its scratch
 * in the memory budget, then scans on every SparseCore worker (after the
 * pushes queued before it) and answers from a TensorCore worker. */
void scps__cmd_topk(scps_call *c);

#endif
