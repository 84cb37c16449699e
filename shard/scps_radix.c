#include "scps_radix.h"

#include <stdbool.h>
#include <string.h>

/* Below this many keys the histogram setup costs more than it saves. */
#define SCPS_RADIX_SMALL 48

static void insertion_sort_kv(uint64_t *keys, float *vals, size_t n, unsigned lo_bit,
                              uint64_t mask) {
  for (size_t i = 1; i < n; i++) {
    uint64_t k = keys[i];
    float v = vals[i];
    uint64_t d = (k >> lo_bit) & mask;
    size_t j = i;
    while (j > 0 && ((keys[j - 1] >> lo_bit) & mask) > d) {
      keys[j] = keys[j - 1];
      vals[j] = vals[j - 1];
      j--;
    }
    keys[j] = k;
    vals[j] = v;
  }
}

static void insertion_sort_k(uint64_t *keys, size_t n, unsigned lo_bit, uint64_t mask) {
  for (size_t i = 1; i < n; i++) {
    uint64_t k = keys[i];
    uint64_t d = (k >> lo_bit) & mask;
    size_t j = i;
    while (j > 0 && ((keys[j - 1] >> lo_bit) & mask) > d) {
      keys[j] = keys[j - 1];
      j--;
    }
    keys[j] = k;
  }
}

/* with_vals is a constant at both call sites, so each gets its own loops. */
static inline __attribute__((always_inline)) int
radix_sort(uint64_t *keys, float *vals, uint64_t *tmp_keys, float *tmp_vals, size_t n,
           unsigned lo_bit, unsigned hi_bit, scps_radix_scratch *s, const bool with_vals) {
  if (hi_bit > 64)
    hi_bit = 64;
  if (n < 2 || hi_bit <= lo_bit)
    return 0;
  unsigned bits = hi_bit - lo_bit;
  uint64_t mask = bits == 64 ? ~UINT64_C(0) : (UINT64_C(1) << bits) - 1;
  if (n <= SCPS_RADIX_SMALL) {
    if (with_vals)
      insertion_sort_kv(keys, vals, n, lo_bit, mask);
    else
      insertion_sort_k(keys, n, lo_bit, mask);
    return 0;
  }

  /* Equal-width digits: 17 bits sort in two 9-bit passes rather than 11 + 6. */
  unsigned passes = (bits + SCPS_RADIX_MAX_DIGIT_BITS - 1) / SCPS_RADIX_MAX_DIGIT_BITS;
  unsigned dbits = (bits + passes - 1) / passes;
  uint32_t radix = UINT32_C(1) << dbits;
  uint64_t dmask = radix - 1;
  for (unsigned p = 0; p < passes; p++)
    memset(s->hist[p], 0, radix * sizeof s->hist[p][0]);
  for (size_t i = 0; i < n; i++) {
    uint64_t k = (keys[i] >> lo_bit) & mask;
    for (unsigned p = 0; p < passes; p++)
      s->hist[p][(k >> (p * dbits)) & dmask]++;
  }

  uint64_t *src_k = keys, *dst_k = tmp_keys;
  float *src_v = vals, *dst_v = tmp_vals;
  int in_tmp = 0;
  for (unsigned p = 0; p < passes; p++) {
    uint32_t *h = s->hist[p];
    unsigned shift = lo_bit + p * dbits;
    uint64_t pmask = (mask >> (p * dbits)) & dmask;
    if (h[(src_k[0] >> shift) & pmask] == n)
      continue; /* every key has this digit: the pass would be the identity */
    uint32_t sum = 0;
    for (uint32_t b = 0; b < radix; b++) {
      uint32_t c = h[b];
      h[b] = sum;
      sum += c;
    }
    for (size_t i = 0; i < n; i++) {
      uint64_t k = src_k[i];
      uint32_t pos = h[(k >> shift) & pmask]++;
      dst_k[pos] = k;
      if (with_vals)
        dst_v[pos] = src_v[i];
    }
    uint64_t *tk = src_k;
    src_k = dst_k;
    dst_k = tk;
    float *tv = src_v;
    src_v = dst_v;
    dst_v = tv;
    in_tmp ^= 1;
  }
  return in_tmp;
}

int scps__radix_sort_kv(uint64_t *keys, float *vals, uint64_t *tmp_keys, float *tmp_vals,
                       size_t n, unsigned lo_bit, unsigned hi_bit, scps_radix_scratch *s) {
  return radix_sort(keys, vals, tmp_keys, tmp_vals, n, lo_bit, hi_bit, s, true);
}

int scps__radix_sort_k(uint64_t *keys, uint64_t *tmp_keys, size_t n, unsigned lo_bit,
                      unsigned hi_bit, scps_radix_scratch *s) {
  return radix_sort(keys, NULL, tmp_keys, NULL, n, lo_bit, hi_bit, s, false);
}
