/* scps_status: gRPC status codes as scps uses them: their names, the status
 * a server answers an SCPS_E* code with, and the code a client reports. */
#ifndef SCPS_STATUS_H
#define SCPS_STATUS_H

#include <grpc/status.h>

/* "OK", "INVALID_ARGUMENT", ...; "UNKNOWN_STATUS" past the known ones. */
const char *scps__status_name(grpc_status_code s);

/* The status a server answers a call failing with `code` with (0: OK;
 * scps_error.h's SCPS_ERRNO_MAP); INTERNAL for a value not in the list. */
grpc_status_code scps__status_from_error(int code);

/* The SCPS_E* code a client reports for status s (0 for OK): the first
 * code of SCPS_ERRNO_MAP that names s, SCPS_EIO where none does. */
int scps__status_to_error(grpc_status_code s);

#endif
