/* scps_bench: the order statistics and the plain file I/O every benchmark
 * program reports with (timed by scps_clock.h), so their figures are
 * computed one way. */
#ifndef SCPS_BENCH_H
#define SCPS_BENCH_H

#include <stddef.h>
#include <stdint.h>

/* Sorts v[0..n) ascending. */
void scps_bench_sort(double *v, size_t n);

/* The median of v[0..n) (the mean of the two middle values when n is even),
 * v left as it is; NAN when n is 0 or memory runs out. */
double scps_bench_median(const double *v, size_t n);

/* The yardstick of checkpoint figures: path created (truncated) and filled
 * with bytes bytes in write() calls of chunk_len from chunk, then fsynced;
 * read back with read() calls of chunk_len into chunk (one buffer, so the
 * reads cost only the page cache's side). 0, or -errno. */
int scps_bench_plain_write(const char *path, const void *chunk, size_t chunk_len, int64_t bytes);
int scps_bench_plain_read(const char *path, void *chunk, size_t chunk_len);

#endif
