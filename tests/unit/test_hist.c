/* scps_hist against sorting: quantiles of several distributions within 1%
 * of the exact order statistics, merge equal to recording into one. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "scps_hist.h"
#include "scps_test.h"

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

static uint64_t rng_state = 88172645463325252ull;
static uint64_t next_u64(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}
static double next_unit(void) { return (double)(next_u64() >> 11) * 0x1p-53; }

/* The exact q-quantile: the value of rank ceil(q * n), as scps__hist_quantile defines it. */
static uint64_t exact(const uint64_t *sorted, size_t n, double q) {
  double r = ceil(q * (double)n);
  size_t rank = r < 1.0 ? 1 : (size_t)r;
  return sorted[rank - 1];
}

static void check_against_sort(const char *what, uint64_t *v, size_t n) {
  static scps_hist h;
  scps__hist_clear(&h);
  double sum = 0.0;
  for (size_t i = 0; i < n; i++) {
    scps__hist_record(&h, v[i]);
    sum += (double)v[i];
  }
  qsort(v, n, sizeof *v, cmp_u64);
  static const double qs[] = {0.0, 0.001, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999, 0.9999, 1.0};
  for (size_t k = 0; k < sizeof qs / sizeof *qs; k++) {
    uint64_t want = exact(v, n, qs[k]), got = scps__hist_quantile(&h, qs[k]);
    double rel = want ? fabs((double)got - (double)want) / (double)want : (double)got;
    CHECKF(rel <= 0.01, "%s: q=%g: histogram %llu, sorted %llu (relative error %.4f)", what, qs[k],
           (unsigned long long)got, (unsigned long long)want, rel);
  }
  CHECK(h.n == n);
  CHECK(h.min == v[0] && h.max == v[n - 1]);
  CHECK(fabs(scps__hist_mean(&h) - sum / (double)n) <= 1e-9 * sum / (double)n);
}

int main(void) {
  enum { N = 200000 };
  uint64_t *v = malloc(sizeof *v * N);
  if (!v) return 1;

  /* Log-uniform over 1 ns .. 10 s: every bucket scale gets values. */
  for (size_t i = 0; i < N; i++) v[i] = (uint64_t)exp(next_unit() * log(1e10));
  check_against_sort("log-uniform", v, N);

  /* A latency-like body with a heavy tail (lognormal around 1 ms). */
  for (size_t i = 0; i < N; i++) {
    double z = sqrt(-2.0 * log(1.0 - next_unit())) * cos(6.283185307179586 * next_unit());
    v[i] = (uint64_t)(1e6 * exp(0.8 * z));
  }
  check_against_sort("lognormal", v, N);

  /* Small integers are exact. */
  for (size_t i = 0; i < N; i++) v[i] = next_u64() % 100;
  check_against_sort("small", v, N);

  /* Huge values near the top of the range. */
  for (size_t i = 0; i < N; i++) v[i] = UINT64_MAX - (next_u64() >> 4);
  check_against_sort("huge", v, N);

  /* Merging two halves equals recording everything into one. */
  static scps_hist a, b, all;
  scps__hist_clear(&a);
  scps__hist_clear(&b);
  scps__hist_clear(&all);
  for (size_t i = 0; i < N; i++) {
    uint64_t x = 1000 + next_u64() % 5000000;
    scps__hist_record(i % 2 ? &a : &b, x);
    scps__hist_record(&all, x);
  }
  scps__hist_merge(&a, &b);
  CHECK(a.n == all.n && a.min == all.min && a.max == all.max);
  CHECK(!memcmp(a.counts, all.counts, sizeof a.counts));

  /* Empty: zeros, not garbage. */
  scps__hist_clear(&a);
  CHECK(scps__hist_quantile(&a, 0.5) == 0 && scps__hist_mean(&a) == 0.0);

  free(v);
  return scps_test_finish("test_hist");
}
