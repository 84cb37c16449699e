/* scps__admin_rows: scps-admin rows: given ids' rows and optimizer slots of
 * a table, read from the running servers that hold them (ReadRows). */
#ifndef SCPS_ADMIN_ROWS_H
#define SCPS_ADMIN_ROWS_H

extern const char scps_admin_rows_usage[];

/* Takes its arguments after the command's name (argv[0] is the name) and
 * returns the exit status: 0, 1 when the servers could not be read, 2 for
 * bad arguments. */
int scps__admin_rows(int argc, char **argv);

#endif
