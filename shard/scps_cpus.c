/* sched_getaffinity, cpu_set_t */
#define _GNU_SOURCE
#include "scps_cpus.h"

#include <errno.h>
#include <sched.h>
#include <string.h>

int scps__cpus_allowed(int *cpus, int max, scps_error *err) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0)
    return scps_error_set(err, SCPS_EIO, "cannot read this thread's CPU affinity: %s", strerror(errno));
  int n = 0;
  for (int c = 0; c < CPU_SETSIZE && n < max; c++)
    if (CPU_ISSET(c, &set)) cpus[n++] = c;
  return n;
}

void scps__cpus_assign(const int *allowed, int n, int32_t process_index, int32_t sc_per_process, int *out) {
  for (int32_t k = 0; k < sc_per_process; k++)
    out[k] = allowed[((int64_t)process_index * sc_per_process + k) % n];
}
