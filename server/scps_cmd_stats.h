/* scps_cmd_stats: the Stats and Health methods: the process's counters, and
 * whether it serves or drains. */
#ifndef SCPS_CMD_STATS_H
#define SCPS_CMD_STATS_H

#include "scps_call.h"

/* The Health method (a dispatch table entry). */
void scps__cmd_stats_health(scps_call *c);

/* The Stats method (a dispatch table entry). */
void scps__cmd_stats_get(scps_call *c);

#endif
