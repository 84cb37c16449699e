#include "scps_error.h"

#include <stdarg.h>
#include <stdio.h>

const char *scps_strerror(int code) {
  switch (code) {
  case SCPS_OK: return "success";
#define XX(name, value, status, text) \
  case SCPS_##name: return text;
    SCPS_ERRNO_MAP(XX)
#undef XX
  default: return "unknown error";
  }
}

const char *scps_err_name(int code) {
  switch (code) {
  case SCPS_OK: return "SCPS_OK";
#define XX(name, value, status, text) \
  case SCPS_##name: return "SCPS_" #name;
    SCPS_ERRNO_MAP(XX)
#undef XX
  default: return "SCPS_UNKNOWN";
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
