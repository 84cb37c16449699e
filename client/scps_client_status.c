#include "scps_client_status.h"

#include "scps_error.h"

const char *scps_status_name(grpc_status_code s) {
  static const char *const names[] = {
      "OK",        "CANCELLED",         "UNKNOWN",           "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
      "NOT_FOUND", "ALREADY_EXISTS",    "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
      "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",      "UNIMPLEMENTED",    "INTERNAL",
      "UNAVAILABLE", "DATA_LOSS",       "UNAUTHENTICATED"};
  return (unsigned)s < sizeof names / sizeof *names ? names[s] : "UNKNOWN_STATUS";
}

int scps_status_code(grpc_status_code s) {
  switch (s) {
  case GRPC_STATUS_OK: return 0;
  case GRPC_STATUS_INVALID_ARGUMENT: return SCPS_EINVAL;
  case GRPC_STATUS_FAILED_PRECONDITION: return SCPS_EMISMATCH;
  case GRPC_STATUS_RESOURCE_EXHAUSTED: return SCPS_ENOSPC;
  case GRPC_STATUS_UNAVAILABLE: return SCPS_EUNAVAIL;
  case GRPC_STATUS_DEADLINE_EXCEEDED: return SCPS_ETIMEDOUT;
  case GRPC_STATUS_INTERNAL: return SCPS_EINTERNAL;
  case GRPC_STATUS_UNAUTHENTICATED: return SCPS_EUNAUTH;
  case GRPC_STATUS_PERMISSION_DENIED: return SCPS_EDENIED;
  case GRPC_STATUS_CANCELLED: return SCPS_ECANCELLED;
  default: return SCPS_EIO;
  }
}
