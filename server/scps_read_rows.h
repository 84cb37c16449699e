/* scps_read_rows: the ReadRows method: given ids' rows and optimizer slots
 * of one table, read from this process's SparseCores. */
#ifndef SCPS_READ_ROWS_H
#define SCPS_READ_ROWS_H

#include "scps_server_int.h"

/* Decodes, validates (scps.proto ReadRowsRequest) and answers the call on
 * this thread, under read locks of the SparseCores. */
void scps_handle_read_rows(scps_call *c);

#endif
