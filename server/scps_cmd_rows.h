/* scps_cmd_rows: the ReadRows method: given ids' rows and optimizer slots
 * of one table, read from this process's SparseCores. */
#ifndef SCPS_CMD_ROWS_H
#define SCPS_CMD_ROWS_H

#include "scps_call.h"

/* Decodes, validates (scps.proto ReadRowsRequest) and answers the call on
 * this thread, under read locks of the SparseCores. */
void scps__cmd_rows_read(scps_call *c);

#endif
