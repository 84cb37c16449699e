/* scps_bench: the clock and the order statistics every benchmark program
 * reports with, so their figures are computed one way. */
#ifndef SCPS_BENCH_H
#define SCPS_BENCH_H

#include <stddef.h>

/* Seconds on the monotonic clock. */
double scps_bench_now(void);

/* Sorts v[0..n) ascending. */
void scps_bench_sort(double *v, size_t n);

/* The median of v[0..n) (the mean of the two middle values when n is even),
 * v left as it is; NAN when n is 0 or memory runs out. */
double scps_bench_median(const double *v, size_t n);

#endif
