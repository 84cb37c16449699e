/* scps_hist: a log-bucketed histogram of non-negative integers (latencies in
 * nanoseconds): fixed size, quantiles within 0.4% of the exact ones. */
#ifndef SCPS_HIST_H
#define SCPS_HIST_H

#include <stdint.h>

/* Values below 2^SCPS_HIST_SUB_BITS get a bucket each; above, every power of
 * two is cut into 2^SCPS_HIST_SUB_BITS buckets, so a bucket spans at most
 * 1/128 of its lower bound and its midpoint is within 1/256 of any value in it. */
#define SCPS_HIST_SUB_BITS 7
#define SCPS_HIST_SUB (1 << SCPS_HIST_SUB_BITS)
#define SCPS_HIST_BUCKETS (SCPS_HIST_SUB + (64 - SCPS_HIST_SUB_BITS) * SCPS_HIST_SUB)

typedef struct scps_hist {
  uint64_t n, min, max;
  double sum;
  uint64_t counts[SCPS_HIST_BUCKETS];
} scps_hist;

void scps__hist_clear(scps_hist *h);
void scps__hist_record(scps_hist *h, uint64_t v);
/* Adds src's values to dst. */
void scps__hist_merge(scps_hist *dst, const scps_hist *src);

/* The q-quantile (q in [0, 1]) as sorting would give it: the value of rank
 * ceil(q * n) (the first for q = 0), here the midpoint of its bucket clamped
 * to [min, max]; exact for q = 1 (the max). 0 when the histogram is empty. */
uint64_t scps__hist_quantile(const scps_hist *h, double q);
double scps__hist_mean(const scps_hist *h);

#endif
