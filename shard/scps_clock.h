/* scps_clock: the monotonic clock every scps module times itself and its
 * deadlines with, in nanoseconds or seconds. */
#ifndef SCPS_CLOCK_H
#define SCPS_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline int64_t scps__clock_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static inline double scps__clock_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#endif
