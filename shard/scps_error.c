#include "scps_error.h"

#include <stdarg.h>
#include <stdio.h>

const char *scps_strerror(int code) {
  switch (code) {
  case SCPS_OK: return "success";
  case SCPS_EINVAL: return "invalid argument";
  case SCPS_ENOMEM: return "out of host memory";
  case SCPS_ENOSPC: return "does not fit in SparseCore memory";
  case SCPS_ENOENT: return "no such name";
  case SCPS_EEXIST: return "duplicate name";
  case SCPS_ERANGE: return "value out of range";
  case SCPS_ELIMIT: return "per-partition id limit exceeded";
  case SCPS_EIO: return "input/output error";
  case SCPS_ECORRUPT: return "stored data is corrupt";
  case SCPS_EPARSE: return "parse error";
  case SCPS_EMISMATCH: return "configuration mismatch";
  case SCPS_EUNAVAIL: return "peer unavailable";
  case SCPS_ETIMEDOUT: return "deadline exceeded";
  case SCPS_ESTATE: return "invalid state for this operation";
  case SCPS_EINTERNAL: return "internal error";
  case SCPS_EUNAUTH: return "not authenticated";
  case SCPS_EDENIED: return "permission denied";
  case SCPS_ECANCELLED: return "cancelled by the peer";
  default: return "unknown error";
  }
}

int scps_error_set(scps_error *err, int code, const char *fmt, ...) {
  if (err) {
    va_list ap;
    err->code = code;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
  }
  return code;
}

void scps_error_clear(scps_error *err) {
  if (err) {
    err->code = SCPS_OK;
    err->msg[0] = '\0';
  }
}
