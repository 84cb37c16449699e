/* scps__admin_rows: scps-admin rows: given ids' rows and optimizer slots of
 * a table, read from the running servers that hold them (ReadRows). */
#ifndef SCPS_ADMIN_ROWS_H
#define SCPS_ADMIN_ROWS_H

#include <stdbool.h>

#include "scps_client.h"

extern const char scps_admin_rows_usage[];

/* Takes its arguments after the command's name (argv[0] is the name) and
 * returns the exit status: 0, 1 when the servers could not be read, 2 for
 * bad arguments. */
int scps__admin_rows(int argc, char **argv);

/* A libscps client of every server of `servers` (HOST:PORT, comma-separated,
 * in process-index order) with that TLS and token, connected within
 * timeout_ms: 0 and *c, or a code and err saying why; *bad_list says the
 * list itself was at fault (exit status 2 rather than 1). */
int scps__admin_connect(const char *servers, const scps_client_security *security, long timeout_ms,
                        scps_client **c, bool *bad_list, scps_error *err);

#endif
