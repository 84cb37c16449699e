#include "scps_hist.h"

#include <math.h>
#include <string.h>

static int bucket_of(uint64_t v) {
  if (v < SCPS_HIST_SUB) return (int)v;
  int e = 63 - __builtin_clzll(v); /* >= SCPS_HIST_SUB_BITS */
  int shift = e - SCPS_HIST_SUB_BITS;
  return SCPS_HIST_SUB + shift * SCPS_HIST_SUB + (int)((v >> shift) & (SCPS_HIST_SUB - 1));
}

/* The smallest and largest value of bucket i. */
static void bucket_range(int i, uint64_t *lo, uint64_t *hi) {
  if (i < SCPS_HIST_SUB) {
    *lo = *hi = (uint64_t)i;
    return;
  }
  int shift = (i - SCPS_HIST_SUB) / SCPS_HIST_SUB, sub = (i - SCPS_HIST_SUB) % SCPS_HIST_SUB;
  *lo = ((uint64_t)(SCPS_HIST_SUB + sub)) << shift;
  *hi = *lo + ((uint64_t)1 << shift) - 1;
}

void scps__hist_clear(scps_hist *h) { memset(h, 0, sizeof *h); }

void scps__hist_record(scps_hist *h, uint64_t v) {
  if (!h->n || v < h->min) h->min = v;
  if (v > h->max) h->max = v;
  h->n++;
  h->sum += (double)v;
  h->counts[bucket_of(v)]++;
}

void scps__hist_merge(scps_hist *dst, const scps_hist *src) {
  if (!src->n) return;
  if (!dst->n || src->min < dst->min) dst->min = src->min;
  if (src->max > dst->max) dst->max = src->max;
  dst->n += src->n;
  dst->sum += src->sum;
  for (int i = 0; i < SCPS_HIST_BUCKETS; i++) dst->counts[i] += src->counts[i];
}

uint64_t scps__hist_quantile(const scps_hist *h, double q) {
  if (!h->n) return 0;
  if (q >= 1.0) return h->max;
  double r = ceil(q * (double)h->n);
  uint64_t rank = r < 1.0 ? 1 : (uint64_t)r, seen = 0;
  for (int i = 0; i < SCPS_HIST_BUCKETS; i++) {
    seen += h->counts[i];
    if (seen < rank) continue;
    uint64_t lo, hi;
    bucket_range(i, &lo, &hi);
    uint64_t mid = lo + (hi - lo) / 2;
    return mid < h->min ? h->min : mid > h->max ? h->max : mid;
  }
  return h->max;
}

double scps__hist_mean(const scps_hist *h) { return h->n ? h->sum / (double)h->n : 0.0; }
