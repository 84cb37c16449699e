/* grpc.health.v1.Health/Check: the serving state scps.v1 Health reports
 * (DRAINING is NOT_SERVING), for the services this server serves. */
#include "scps_cmd_grpc_health.h"

#include <stdio.h>
#include <string.h>

#include "health.pb-c.h"

void scps__cmd_grpc_health_check(scps_call *c) {
  scps_server *s = c->srv;
  const Grpc__Health__V1__HealthCheckRequest *q = (const Grpc__Health__V1__HealthCheckRequest *)scps__call_read_request(
      c, &grpc__health__v1__health_check_request__descriptor);
  if (!q) return;
  const char *service = q->service ? q->service : "";
  if (service[0] && strcmp(service, SCPS_METHOD_SERVICE_SCPS)) {
    char msg[256];
    snprintf(msg, sizeof msg, "service '%.128s' is not served here: ask for \"\" or \"%s\"", service,
             SCPS_METHOD_SERVICE_SCPS);
    scps__call_finish(c, GRPC_STATUS_NOT_FOUND, msg, NULL, 0);
    return;
  }
  Grpc__Health__V1__HealthCheckResponse r = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
  r.status = atomic_load(&s->draining) ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING
                                       : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
  scps__call_finish_packed(c, &r.base);
}
