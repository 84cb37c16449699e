/* scps_admin_online: scps-admin's commands against running servers: health,
 * stats, config (one server after another) and a cluster checkpoint save. */
#ifndef SCPS_ADMIN_ONLINE_H
#define SCPS_ADMIN_ONLINE_H

extern const char scps_admin_health_usage[];
extern const char scps_admin_stats_usage[];
extern const char scps_admin_config_usage[];
extern const char scps_admin_save_usage[];

/* Each takes its arguments after the command's name (argv[0] is the name)
 * and returns the exit status: 0, 1 when a server failed or is not
 * serving, 2 for bad arguments. */
int scps__admin_health(int argc, char **argv);
int scps__admin_stats(int argc, char **argv);
int scps__admin_config(int argc, char **argv);
int scps__admin_save(int argc, char **argv);

/* "scps-admin: " and fmt with arg on stderr, then the command's usage:
 * returns 2, the exit status for bad arguments. */
int scps__admin_bad(const char *usage, const char *fmt, const char *arg);

#endif
