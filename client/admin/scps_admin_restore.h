/* scps__admin_restore: 'scps-admin checkpoint restore': brings every process
 * of a running cluster to one step of which each holds a checkpoint part. */
#ifndef SCPS_ADMIN_RESTORE_H
#define SCPS_ADMIN_RESTORE_H

extern const char scps_admin_restore_usage[];

/* Takes its arguments after the command's name (argv[0] is the name) and
 * returns the exit status: 0 when every process holds the step restored, 1
 * otherwise, 2 for bad arguments. */
int scps__admin_restore(int argc, char **argv);

#endif
