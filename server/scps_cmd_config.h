/* scps_cmd_config: the GetConfig method: the GetConfigResponse built once at
 * create, its limits in force and step filled in per call. */
#ifndef SCPS_CMD_CONFIG_H
#define SCPS_CMD_CONFIG_H

#include "scps_call.h"
#include "scps_error.h"

/* Builds the GetConfigResponse (after s->fingerprint is set). */
int scps__cmd_config_init(scps_server *s, scps_error *err);
void scps__cmd_config_free(scps_server *s);

/* The GetConfig method (a dispatch table entry). */
void scps__cmd_config_get(scps_call *c);

#endif
