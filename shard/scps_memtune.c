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
#endif
}
