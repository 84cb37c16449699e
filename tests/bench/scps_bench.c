#include "scps_bench.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

int scps_bench_plain_write(const char *path, const void *chunk, size_t chunk_len, int64_t bytes) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return -errno;
  int rc = 0;
  for (int64_t left = bytes; left > 0 && !rc;) {
    ssize_t w = write(fd, chunk, left < (int64_t)chunk_len ? (size_t)left : chunk_len);
    if (w > 0) left -= w;
    else if (w < 0 && errno != EINTR) rc = -errno;
    else if (w == 0) rc = -EIO;
  }
  if (!rc && fsync(fd)) rc = -errno;
  close(fd);
  return rc;
}

int scps_bench_plain_read(const char *path, void *chunk, size_t chunk_len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  ssize_t r;
  while ((r = read(fd, chunk, chunk_len)) != 0)
    if (r < 0 && errno != EINTR) break;
  int rc = r < 0 ? -errno : 0;
  close(fd);
  return rc;
}
