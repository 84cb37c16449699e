/* scps_radix: stable LSD radix sort of 64-bit keys that carry a float
 * payload, the sort on the preprocessing hot path. */
#ifndef SCPS_RADIX_H
#define SCPS_RADIX_H

#include <stddef.h>
#include <stdint.h>

#define SCPS_RADIX_MAX_DIGIT_BITS 11
#define SCPS_RADIX_MAX_PASSES 6 /* 64 bits / 11 rounded up */

/* Histograms for one sort; callers keep one per thread and reuse it. Keys
 * alternate between two copies while counting, so that runs of one digit
 * (hot rows) do not wait on the previous key's count. */
typedef struct scps_radix_scratch {
  uint32_t hist[2][SCPS_RADIX_MAX_PASSES][1u << SCPS_RADIX_MAX_DIGIT_BITS];
} scps_radix_scratch;

/* Sorts keys[0..n) stably by bits [lo_bit, hi_bit) of each key (bits outside
 * are ignored: they keep their input order), moving vals along. tmp_keys and
 * tmp_vals (n each) are the other half of the ping-pong. Digits whose value
 * is the same for every key are skipped. Returns 1 when the sorted data ended
 * in tmp_keys/tmp_vals, 0 when it is in keys/vals. n must be below 2^32. */
int scps__radix_sort_kv(uint64_t *keys, float *vals, uint64_t *tmp_keys, float *tmp_vals,
                       size_t n, unsigned lo_bit, unsigned hi_bit, scps_radix_scratch *s);

/* The same for keys without a payload. */
int scps__radix_sort_k(uint64_t *keys, uint64_t *tmp_keys, size_t n, unsigned lo_bit,
                      unsigned hi_bit, scps_radix_scratch *s);

#endif
