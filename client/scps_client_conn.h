/* scps_client_conn: the one place libscps turns scps_client_security into
 * gRPC channels (TLS credentials, server name) and per-call token metadata. */
#ifndef SCPS_CLIENT_CONN_H
#define SCPS_CLIENT_CONN_H

#include <grpc/grpc.h>
#include <stdbool.h>

#include "scps_client.h"

typedef struct scps_client_conn scps_client_conn;

/* Reads and checks the files s names (NULL s: plaintext, no token) and
 * builds the credentials every channel of this conn shares. Call after
 * grpc_init and destroy before grpc_shutdown. Errors name the field and
 * file: SCPS_EIO unreadable, SCPS_EINVAL malformed or mismatched. */
int scps__client_conn_create(const scps_client_security *s, scps_client_conn **out, scps_error *err);

/* A channel to addr with args, and those TLS adds (the server name); NULL
 * if gRPC makes none. */
grpc_channel *scps__client_conn_channel(const scps_client_conn *c, const char *addr, const grpc_channel_args *args);

/* Makes op, a GRPC_OP_SEND_INITIAL_METADATA, send the token, if any, using
 * md (which must stay valid until the batch has been started). */
void scps__client_conn_metadata(const scps_client_conn *c, grpc_op *op, grpc_metadata *md);

/* The bearer token (*len bytes, not NUL-terminated), or "" without one:
 * what the shared-memory side channel sends in ShmRequest.token. */
const char *scps__client_conn_token(const scps_client_conn *c, size_t *len);

/* Why a channel may find no connection, for messages: nothing listens
 * there, it is unreachable, and with TLS a handshake that failed (without,
 * a server that wants TLS). */
const char *scps__client_conn_why_unconnected(const scps_client_conn *c);

void scps__client_conn_destroy(scps_client_conn *c);

#endif
