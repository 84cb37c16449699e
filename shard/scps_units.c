#include "scps_units.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

int scps__parse_bytes(const char *s, int64_t *out) {
  size_t digits = strspn(s, "0123456789.");
  if (s[0] < '0' || s[0] > '9') return -1;
  if (s[digits] && (!strchr("KkMmGg", s[digits]) || s[digits + 1])) return -1;
  char *end;
  double v = strtod(s, &end);
  switch (*end) {
  case 'K': case 'k': v *= 1024.0; end++; break;
  case 'M': case 'm': v *= 1024.0 * 1024; end++; break;
  case 'G': case 'g': v *= 1024.0 * 1024 * 1024; end++; break;
  default: break;
  }
  if (end == s || *end || !(v >= 1) || v > 9.2e18) return -1;
  *out = (int64_t)v;
  return 0;
}

int scps__parse_long(const char *flag, const char *s, long lo, long hi, long *out, scps_error *err) {
  char *end;
  errno = 0;
  /* strtol would also take leading spaces and a '+'. */
  const bool digit_first = (s[0] >= '0' && s[0] <= '9') || (s[0] == '-' && s[1] >= '0' && s[1] <= '9');
  long v = digit_first ? strtol(s, &end, 10) : 0;
  if (!digit_first || *end || errno || v < lo || v > hi)
    return scps_error_set(err, SCPS_EINVAL, "%s '%s': expected an integer in [%ld, %ld]", flag, s, lo, hi);
  *out = v;
  return 0;
}
