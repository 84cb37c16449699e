#include "scps_bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double scps_bench_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

void scps_bench_sort(double *v, size_t n) { qsort(v, n, sizeof *v, cmp_double); }

double scps_bench_median(const double *v, size_t n) {
  double *s = n ? malloc(sizeof *s * n) : NULL;
  if (!s) return NAN;
  memcpy(s, v, sizeof *s * n);
  scps_bench_sort(s, n);
  double m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
  free(s);
  return m;
}
