/* scps_memtune: the process-wide allocator settings scps programs apply at
 * start; libraries never call it, a trainer linking libscps may. */
#ifndef SCPS_MEMTUNE_H
#define SCPS_MEMTUNE_H

#include "scps_version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Keeps freed memory mapped so that the multi-megabyte buffers every RPC
 * needs (gRPC's receive slices, messages, activations) reuse pages instead
 * of faulting fresh ones in: by default glibc maps buffers over 128 KiB
 * anew and unmaps them on free, gives freed heap tops back, and unmaps
 * the heaps of other threads' arenas once empty; on
 * virtualised hosts the page faults that follow can take most of a step
 * (BENCHMARKS.md, "glibc allocator tuning"). The cost: a process keeps
 * about the peak of its transient buffers resident. Call it first thing
 * in main, before other threads start. No-op on C libraries other than
 * glibc. */
SCPS_EXTERN void scps_memtune_apply(void);

/* Returns the allocator's free memory to the system (malloc_trim): for a
 * process that is idle after a spike, never per call. No-op on C
 * libraries other than glibc. */
SCPS_EXTERN void scps_memtune_trim(void);

#ifdef __cplusplus
}
#endif

#endif
