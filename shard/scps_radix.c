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

/* Every pass's histogram in one read of the keys, even and odd keys into
 * separate copies that are summed afterwards. passes is a constant where it
 * is called with the common counts, so the inner loop unrolls. */
static inline __attribute__((always_inline)) void histogram(scps_radix_scratch *s, const uint64_t *keys,
                                                            size_t n, unsigned lo_bit, uint64_t mask,
                                                            unsigned dbits, uint64_t dmask,
                                                            const unsigned passes) {
  uint32_t(*h0)[1u << SCPS_RADIX_MAX_DIGIT_BITS] = s->hist[0];
  uint32_t(*h1)[1u << SCPS_RADIX_MAX_DIGIT_BITS] = s->hist[1];
  size_t i = 0;
  for (; i + 1 < n; i += 2) {
    uint64_t a = (keys[i] >> lo_bit) & mask, b = (keys[i + 1] >> lo_bit) & mask;
    for (unsigned p = 0; p < passes; p++) {
      h0[p][(a >> (p * dbits)) & dmask]++;
      h1[p][(b >> (p * dbits)) & dmask]++;
    }
  }
  if (i < n) {
    uint64_t a = (keys[i] >> lo_bit) & mask;
    for (unsigned p = 0; p < passes; p++)
      h0[p][(a >> (p * dbits)) & dmask]++;
  }
}

/* One stable counting pass by the digit (k >> shift) & pmask, h holding
 * each digit's first position. After an earlier pass, keys of one row (and
 * so of one digit) come in runs: runs keeps the run's position in a register
 * and writes it back when the digit changes, rather than loading and
 * storing the digit's count for every key. */
static inline __attribute__((always_inline)) void
scatter(const uint64_t *src_k, const float *src_v, uint64_t *dst_k, float *dst_v, size_t n,
        uint32_t *h, unsigned shift, uint64_t pmask, const bool with_vals, const bool runs) {
  if (!runs) {
    for (size_t i = 0; i < n; i++) {
      uint64_t k = src_k[i];
      uint32_t pos = h[(k >> shift) & pmask]++;
      dst_k[pos] = k;
      if (with_vals)
        dst_v[pos] = src_v[i];
    }
    return;
  }
  uint64_t d = (src_k[0] >> shift) & pmask;
  uint32_t pos = h[d];
  for (size_t i = 0; i < n; i++) {
    uint64_t k = src_k[i], e = (k >> shift) & pmask;
    if (e != d) {
      h[d] = pos;
      pos = h[e];
      d = e;
    }
    dst_k[pos] = k;
    if (with_vals)
      dst_v[pos] = src_v[i];
    pos++;
  }
  h[d] = pos;
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
  for (int c = 0; c < 2; c++)
    for (unsigned p = 0; p < passes; p++)
      memset(s->hist[c][p], 0, radix * sizeof s->hist[c][p][0]);
  if (passes == 2)
    histogram(s, keys, n, lo_bit, mask, dbits, dmask, 2);
  else if (passes == 3)
    histogram(s, keys, n, lo_bit, mask, dbits, dmask, 3);
  else
    histogram(s, keys, n, lo_bit, mask, dbits, dmask, passes);

  uint64_t *src_k = keys, *dst_k = tmp_keys;
  float *src_v = vals, *dst_v = tmp_vals;
  int in_tmp = 0;
  bool sorted_before = false;
  for (unsigned p = 0; p < passes; p++) {
    uint32_t *h = s->hist[0][p];
    const uint32_t *h1 = s->hist[1][p];
    unsigned shift = lo_bit + p * dbits;
    uint64_t pmask = (mask >> (p * dbits)) & dmask;
    uint64_t first = (src_k[0] >> shift) & pmask;
    if (h[first] + h1[first] == n)
      continue; /* every key has this digit: the pass would be the identity */
    uint32_t sum = 0;
    for (uint32_t b = 0; b < radix; b++) {
      uint32_t c = h[b] + h1[b];
      h[b] = sum;
      sum += c;
    }
    if (sorted_before)
      scatter(src_k, src_v, dst_k, dst_v, n, h, shift, pmask, with_vals, true);
    else
      scatter(src_k, src_v, dst_k, dst_v, n, h, shift, pmask, with_vals, false);
    sorted_before = true;
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
