/* scps_limits: what bounds a server's memory and connections: the memory budget
 * and its default, gRPC's transport limits, transfer deadlines, trimming. */
#ifndef SCPS_LIMITS_H
#define SCPS_LIMITS_H

#include "scps_call.h"

/* Channel args scps__limits_channel_args may append. */
#define SCPS_LIMITS_ARGS 6

/* Creates the budget (opts.memory_budget, or the default derived from the
 * memory available now, once the tables are initialized), counts the
 * scratch pool in it and starts its thread, which also sweeps the transfer
 * deadlines and trims memory after a spike. */
int scps__limits_init(scps_server *s, scps_error *err);

/* Stops the budget's thread and frees what scps__limits_init made; after
 * every call has finished. */
void scps__limits_free(scps_server *s);

/* Appends the transport limits (streams per connection, idle connections,
 * keepalive, handshake deadline, gRPC's resource quota) to args; returns
 * how many. The quota's reference is dropped with scps__limits_free. */
int scps__limits_channel_args(scps_server *s, grpc_arg *args);

/* gRPC's resource quota: half the budget, and at least the largest request
 * accepted (--max-message-mb). */
int64_t scps__limits_quota(const scps_server_options *o);

/* When a call's wait for memory ends, on scps__clock_ns: --memory-wait-ms
 * from now, or the call's own deadline if that comes first. */
int64_t scps__limits_wait_deadline(const scps_call *c);

/* The RESOURCE_EXHAUSTED message of a call refused for memory: what it
 * needed (`what` says for what), the budget, what was in use and the flag. */
void scps__limits_refusal(const scps_call *c, const char *what, size_t need, size_t in_use, size_t limit,
                         char *msg, size_t len);

/* Stats' memory section. */
void scps__limits_stats(scps_server *s, Scps__V1__MemoryStats *out);

#endif
