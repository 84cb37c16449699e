/* scps_client_rpc: one unary call to one server, by method name or path,
 * request and answer as packed bytes: for tools that ask servers one by one
 * (scps-admin), where a cluster client (scps_client.h) would need them all. */
#ifndef SCPS_CLIENT_RPC_H
#define SCPS_CLIENT_RPC_H

#include <stddef.h>
#include <stdint.h>

#include "scps_client.h"
#include "scps_error.h"

/* Calls method on address (host:port): a name in the method table
 * (scps_method.h: "Lookup", "Check") or a full path in it
 * ("/grpc.health.v1.Health/Check"), with the packed request, waiting up to
 * deadline_ms (> 0) for the server to be reachable and to answer, over TLS
 * and with a token as security says (NULL: plaintext, no token; as
 * scps_client_options.security). On OK: 0 and
 * *answer (malloc'ed, the caller frees it; NULL with *answer_len 0 for an
 * empty message). Otherwise the status's SCPS_E* code (scps__status_to_error:
 * SCPS_EUNAUTH, SCPS_EDENIED for a token refused) and a message naming the
 * address, the method, the status and the server's details; security's
 * errors as scps_client_create's. */
int scps__client_rpc_call(const char *address, const scps_client_security *security, const char *method,
                  const uint8_t *request, size_t request_len, int64_t deadline_ms, uint8_t **answer,
                  size_t *answer_len, scps_error *err);

#endif
