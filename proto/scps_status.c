#include "scps_status.h"

#include "scps_error.h"

const char *scps__status_name(grpc_status_code s) {
  static const char *const names[] = {
      "OK",        "CANCELLED",         "UNKNOWN",           "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
      "NOT_FOUND", "ALREADY_EXISTS",    "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
      "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",      "UNIMPLEMENTED",    "INTERNAL",
      "UNAVAILABLE", "DATA_LOSS",       "UNAUTHENTICATED"};
  return (unsigned)s < sizeof names / sizeof *names ? names[s] : "UNKNOWN_STATUS";
}

typedef struct code_status {
  int code;
  grpc_status_code status;
} code_status;

static const code_status table[] = {
#define XX(name, value, status, text) {SCPS_##name, GRPC_STATUS_##status},
    SCPS_ERRNO_MAP(XX)
#undef XX
};

grpc_status_code scps__status_from_error(int code) {
  if (code == 0) return GRPC_STATUS_OK;
  for (size_t i = 0; i < sizeof table / sizeof *table; i++)
    if (table[i].code == code) return table[i].status;
  return GRPC_STATUS_INTERNAL;
}

int scps__status_to_error(grpc_status_code s) {
  if (s == GRPC_STATUS_OK) return 0;
  for (size_t i = 0; i < sizeof table / sizeof *table; i++)
    if (table[i].status == s) return table[i].code;
  return SCPS_EIO;
}
