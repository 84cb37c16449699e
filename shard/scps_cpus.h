/* scps_cpus: the CPUs a process may run on and the one each SparseCore
 * worker of a server process is pinned to. */
#ifndef SCPS_CPUS_H
#define SCPS_CPUS_H

#include <stdint.h>

#include "scps_error.h"

/* CPUs an affinity mask can name (glibc's CPU_SETSIZE). */
#define SCPS_CPUS_MAX 1024

/* The CPUs the calling thread may run on (its affinity mask), ascending,
 * at most max of them into cpus; returns how many, or a negative SCPS_E*
 * code when the mask cannot be read. */
int scps__cpus_allowed(int *cpus, int max, scps_error *err);

/* CPU of SparseCore worker k of process process_index, for each k in
 * [0, sc_per_process), from the n allowed CPUs: worker k of process p gets
 * allowed[(p * sc_per_process + k) mod n], so the workers of one process
 * sit on distinct CPUs while there are enough of them and the processes of
 * a host started with the same set spread over it instead of stacking on
 * its first CPUs. n must be >= 1. */
void scps__cpus_assign(const int *allowed, int n, int32_t process_index, int32_t sc_per_process, int *out);

#endif
