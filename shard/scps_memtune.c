/* scps_memtune: the process-wide allocator settings scps programs apply. */
#include "scps_memtune.h"

#include <stdlib.h> /* defines __GLIBC__ on glibc */
#ifdef __GLIBC__
#include <malloc.h>
#endif

void scps_memtune_apply(void) {
#ifdef __GLIBC__
  /* 32 MiB is glibc's largest mmap threshold: smaller blocks come from the
   * heap; a trim threshold of 1 GiB keeps the heap's freed top mapped. */
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  /* Threads other than the first get arenas of their own, made of 64 MiB
   * heaps that glibc unmaps as soon as one is empty, whatever the trim
   * threshold: gRPC's and the SparseCore workers' buffers then fault in
   * anew every request (dlrm8 train: 166 faults a step in the server, 112
   * in the client; with one arena 0 and 10). Small blocks still come from
   * each thread's cache without the arena lock. */
  mallopt(M_ARENA_MAX, 1);
#endif
}

void scps_memtune_trim(void) {
#ifdef __GLIBC__
  malloc_trim(0);
#endif
}
