/* scps_it: what the integration tests share: real scps-server processes on
 * loopback (start, kill, restart, stop), temporary directories and files. */
#ifndef SCPS_IT_H
#define SCPS_IT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define SCPS_IT_MAX_PROCS 8

typedef struct scps_it_cluster {
  char dir[256];    /* scratch directory: config, port files, server logs */
  char config[300]; /* workload JSON every process serves */
  int num_processes, sc_per_process;
  const char *sc_memory; /* --sc-memory of every process; scps_it_init sets "32M" */
  const char *extra[16]; /* more flags for every process, NULL-terminated (--restore DIR, ...) */
  long fsize_limit;      /* > 0: every process's RLIMIT_FSIZE in bytes (ulimit -f) */
  pid_t pids[SCPS_IT_MAX_PROCS]; /* 0: not running */
  int ports[SCPS_IT_MAX_PROCS];
  char addrs[SCPS_IT_MAX_PROCS][32];
  const char *addr_list[SCPS_IT_MAX_PROCS]; /* "127.0.0.1:port" in process order */
} scps_it_cluster;

/* Creates the scratch directory and writes config_json into it. */
int scps_it_init(scps_it_cluster *cl, const char *config_json, int num_processes, int sc_per_process);

/* Starts every process on a free port and waits until each serves. */
int scps_it_start(scps_it_cluster *cl);

/* Starts (or restarts) process i on port (0: any free one). With wait, returns
 * once it serves; otherwise right after it was spawned. */
int scps_it_start_one(scps_it_cluster *cl, int i, int port, int wait);

/* Waits until process i (started without waiting) serves. */
int scps_it_wait_one(scps_it_cluster *cl, int i);

/* SIGKILL to process i, then reaps it. */
void scps_it_kill(scps_it_cluster *cl, int i);

/* Waits for process i to exit (after a signal the caller sent; 30 s, then
 * SIGKILL): its exit status, 128 + the signal that ended it, or -1. */
int scps_it_wait_exit(scps_it_cluster *cl, int i);

/* Stops every running process (SIGTERM, then SIGKILL after 10 s), removes
 * the scratch directory and everything below it. Safe to call twice. */
void scps_it_stop(scps_it_cluster *cl);

/* Server i's log so far (stdout and stderr), NUL-terminated, in buf. */
void scps_it_read_log(const scps_it_cluster *cl, int i, char *buf, size_t len);

/* Removes path and, if it is a directory, everything below it. */
void scps_it_remove_tree(const char *path);

/* Milliseconds on the monotonic clock. */
double scps_it_now_ms(void);

#endif
