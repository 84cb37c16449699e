/* scps_client_status: gRPC status codes as libscps reports them: their
 * names for messages and the SCPS_E* code each maps to. */
#ifndef SCPS_CLIENT_STATUS_H
#define SCPS_CLIENT_STATUS_H

#include <grpc/status.h>

/* "OK", "INVALID_ARGUMENT", ...; "UNKNOWN_STATUS" past the known ones. */
const char *scps_status_name(grpc_status_code s);

/* 0 for OK, else the SCPS_E* code libscps returns for the status. */
int scps_status_code(grpc_status_code s);

#endif
