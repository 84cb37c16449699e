/* scps_transport: a server's gRPC front: the completion-queue threads, the
 * requests kept posted, admission to the memory budget, draining, shutdown. */
#ifndef SCPS_TRANSPORT_H
#define SCPS_TRANSPORT_H

#include <stdint.h>

#include "scps_call.h"
#include "scps_error.h"

/* Fails at once, before the tables are initialized (seconds to minutes for
 * large ones), when another process already listens on a host:port or
 * [v6]:port address; gRPC binds it only once they are ready. Anything this
 * cannot parse or resolve is left to gRPC. */
int scps__transport_probe(const char *listen, scps_error *err);

/* The gRPC server, its methods and queues, bound to s->opts.listen: last,
 * once the tables are ready. handlers ([SCPS_M_COUNT], kept) is the
 * dispatch table: a call admitted to the budget runs handlers[method]. */
int scps__transport_create(scps_server *s, const scps_call_handler *handlers, scps_error *err);

/* See scps__server_start, scps__server_shutdown, scps__server_cancel_all,
 * scps__server_push_quiet_ms and scps__server_close_pushes. */
int scps__transport_start(scps_server *s, void (*on_stopped)(void *), void *ud, int *threads_started,
                         scps_error *err);
void scps__transport_shutdown(scps_server *s);
void scps__transport_cancel_all(scps_server *s);
int64_t scps__transport_push_quiet_ms(scps_server *s);
void scps__transport_close_pushes(scps_server *s);

/* For a server that never started its threads: shuts gRPC down and
 * cancels what it holds, as the threads would have. */
void scps__transport_quiesce(scps_server *s);

/* Once every call has finished: joins the threads, destroys the gRPC
 * server and queues (what is left on them is completed), frees. */
void scps__transport_destroy(scps_server *s);

#endif
