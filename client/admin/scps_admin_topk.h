/* scps__admin_topk: scps-admin topk: the rows of a table that score highest
 * against query vectors given on the command line, read from a table row
 * or from a file (the TopK RPC). */
#ifndef SCPS_ADMIN_TOPK_H
#define SCPS_ADMIN_TOPK_H

extern const char scps_admin_topk_usage[];

/* Takes its arguments after the command's name (argv[0] is the name) and
 * returns the exit status: 0, 1 when the servers refused or could not be
 * reached, 2 for bad arguments. */
int scps__admin_topk(int argc, char **argv);

#endif
