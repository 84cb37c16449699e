/* scps_address: server addresses as programs and libscps take them:
 * host:port, [IPv6]:port or a gRPC target, alone or in a comma-separated list. */
#include <stdlib.h>
#include <string.h>

#include "scps_client.h"

int scps_address_check(const char *addr, scps_error *err) {
  static const char *const schemes[] = {"unix:", "unix-abstract:", "vsock:", "dns:", "ipv4:", "ipv6:"};
  for (size_t i = 0; i < sizeof schemes / sizeof *schemes; i++)
    if (!strncmp(addr, schemes[i], strlen(schemes[i]))) return 0;
  const char *port;
  if (addr[0] == '[') {
    const char *close_br = strchr(addr, ']');
    if (!close_br || close_br == addr + 1 || close_br[1] != ':')
      return scps_error_set(err, SCPS_EINVAL, "address '%s': expected [IPv6]:port", addr);
    port = close_br + 2;
  } else {
    const char *colon = strrchr(addr, ':');
    if (!colon) return scps_error_set(err, SCPS_EINVAL, "address '%s' has no port (expected host:port)", addr);
    if (colon == addr || memchr(addr, ':', (size_t)(colon - addr)))
      return scps_error_set(err, SCPS_EINVAL, "address '%s': expected host:port (an IPv6 host goes in brackets: "
                            "[::1]:50051)", addr);
    port = colon + 1;
  }
  size_t digits = strspn(port, "0123456789");
  long v = digits && digits <= 5 && !port[digits] ? strtol(port, NULL, 10) : 0;
  if (v < 1 || v > 65535)
    return scps_error_set(err, SCPS_EINVAL, "address '%s': port '%s' is not in 1..65535", addr, port);
  return 0;
}

int scps_address_list_split(char *list, const char **out, int max, int *n, scps_error *err) {
  *n = 0;
  char *save = NULL;
  for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    if (*n == max) return scps_error_set(err, SCPS_EINVAL, "more than %d servers", max);
    int rc = scps_address_check(tok, err);
    if (rc) return rc;
    out[(*n)++] = tok;
  }
  return *n ? 0 : scps_error_set(err, SCPS_EINVAL, "no server given");
}
