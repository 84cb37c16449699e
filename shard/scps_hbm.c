#include "scps_hbm.h"

#include <string.h>
#include <sys/mman.h>

int scps__hbm_init(scps_hbm *h, int32_t sc, int64_t capacity, scps_error *err) {
  memset(h, 0, sizeof *h);
  h->sc = sc;
  if (capacity <= 0)
    return scps_error_set(err, SCPS_EINVAL, "SparseCore %d: memory capacity %lld must be > 0", sc,
                          (long long)capacity);
  /* Address space only: pages are committed when a stack first writes them. */
  void *p = mmap(NULL, (size_t)capacity, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    return scps_error_set(err, SCPS_ENOMEM, "SparseCore %d: cannot reserve %lld bytes of memory", sc,
                          (long long)capacity);
#ifdef MADV_HUGEPAGE
  /* Lookups and updates touch rows at random across gigabytes of shard
   * memory; with 4 KiB pages nearly every row costs a TLB miss and a page
   * walk, a large share of the kernels' time. A hint only: where
   * transparent huge pages are off, the call fails and nothing changes. */
  (void)madvise(p, (size_t)capacity, MADV_HUGEPAGE);
#endif
  h->base = p;
  h->capacity = capacity;
  return 0;
}

void scps__hbm_free(scps_hbm *h) {
  if (h->base) munmap(h->base, (size_t)h->capacity);
  h->base = NULL;
  h->capacity = h->used = 0;
}

int scps__hbm_alloc(scps_hbm *h, int64_t n, const char *what, void **out, scps_error *err) {
  int64_t need = scps__hbm_footprint(n);
  if (n < 0 || need > scps__hbm_free_bytes(h))
    return scps_error_set(err, SCPS_ENOSPC,
                          "%s needs %lld bytes on SparseCore %d, %lld bytes free of %lld", what,
                          (long long)need, h->sc, (long long)scps__hbm_free_bytes(h),
                          (long long)h->capacity);
  *out = h->base + h->used;
  h->used += need;
  return 0;
}
