/* scps_cmd_grpc_health: the standard grpc.health.v1 Check (health.proto),
 * the probe orchestrators speak: whether this server serves or drains. */
#ifndef SCPS_CMD_GRPC_HEALTH_H
#define SCPS_CMD_GRPC_HEALTH_H

#include "scps_call.h"

/* grpc.health.v1.Health/Check (a dispatch table entry): for the service ""
 * or scps.v1.EmbeddingService, SERVING while the server serves and
 * NOT_SERVING while it drains; status NOT_FOUND for any other service. */
void scps__cmd_grpc_health_check(scps_call *c);

#endif
