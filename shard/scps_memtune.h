/* scps_memtune: the process-wide allocator settings scps programs apply at
 * start; libraries never call it, a trainer linking libscps may. */
#ifndef SCPS_MEMTUNE_H
#define SCPS_MEMTUNE_H

/* Keeps freed memory mapped so that the multi-megabyte buffers every RPC
 * needs (gRPC's receive slices, messages, activations) reuse pages instead
 * of faulting fresh ones in: by default glibc maps buffers over 128 KiB
 * anew and unmaps them on free, gives freed heap tops back, and unmaps
 * the heaps of other threads' arenas once empty; on
 * virtualised hosts the page faults that follow took most of a dlrm8 step
 * (lookup 50 ms against 10 ms, train step 60 ms against 26 ms, both ends
 * tuned). The cost: a process keeps about the peak of its transient
 * buffers resident. No-op on C libraries other than glibc. */
void scps__memtune_apply(void);

/* Returns the allocator's free memory to the system (malloc_trim): for a
 * process that is idle after a spike, never per call. No-op on C
 * libraries other than glibc. */
void scps__memtune_trim(void);

#endif
