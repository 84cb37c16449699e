/* scps-bench-stall: how long this machine stops running a thread that is
 * due, the stalls a latency target on it cannot hide. */
#include <errno.h>
#include <getopt.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "scps_clock.h"

static const char usage[] =
    "usage: scps-bench-stall [--seconds S] [--period-us P]\n"
    "Sleeps P microseconds (default 1000) again and again for S seconds\n"
    "(default 20) under SCHED_FIFO when allowed, so no process of this machine\n"
    "can keep it from running once it is due: a wakeup late by milliseconds\n"
    "means the virtual machine itself did not run (or the kernel would not\n"
    "switch). Without the right to SCHED_FIFO it runs as a normal thread and\n"
    "says so (\"fifo\": false); its lateness then includes waiting for a core.\n"
    "Prints one JSON line: wakeups, how many were late by more than 2, 5 and\n"
    "10 ms, the latest, the milliseconds lost beyond 1 ms per late wakeup,\n"
    "and the five latest with their time from the start.\n";

#define WORST 5

typedef struct late {
  double t_s, late_ms;
} late;

/* Keeps the WORST latest wakeups, latest first. */
static void keep_worst(late *w, int *n, double t_s, double late_ms) {
  if (*n == WORST && w[WORST - 1].late_ms >= late_ms) return;
  int i = *n < WORST ? (*n)++ : WORST - 1;
  for (; i > 0 && w[i - 1].late_ms < late_ms; i--) w[i] = w[i - 1];
  w[i] = (late){t_s, late_ms};
}

int main(int argc, char **argv) {
  double seconds = 20;
  long period_us = 1000;
  static const struct option opts[] = {{"seconds", required_argument, NULL, 's'},
                                       {"period-us", required_argument, NULL, 'p'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  for (int ch; (ch = getopt_long(argc, argv, "h", opts, NULL)) != -1;) {
    char *end;
    switch (ch) {
    case 's':
      seconds = strtod(optarg, &end);
      if (*end || !(seconds > 0 && seconds <= 86400)) {
        fprintf(stderr, "scps-bench-stall: --seconds '%s' is not a number of seconds in (0, 86400]\n", optarg);
        return 2;
      }
      break;
    case 'p':
      period_us = strtol(optarg, &end, 10);
      if (*end || period_us < 100 || period_us > 1000000) {
        fprintf(stderr, "scps-bench-stall: --period-us '%s' is not a whole number in [100, 1000000]\n", optarg);
        return 2;
      }
      break;
    case 'h':
      fputs(usage, stdout);
      return 0;
    default:
      fputs(usage, stderr);
      return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "scps-bench-stall: unexpected argument '%s'\n%s", argv[optind], usage);
    return 2;
  }
  struct sched_param sp = {.sched_priority = sched_get_priority_min(SCHED_FIFO)};
  bool fifo = sched_setscheduler(0, SCHED_FIFO, &sp) == 0;
  if (!fifo && errno != EPERM) {
    fprintf(stderr, "scps-bench-stall: sched_setscheduler: %s\n", strerror(errno));
    return 1;
  }
  const int64_t period = period_us * 1000;
  const int64_t start = scps__clock_ns(), stop = start + (int64_t)(seconds * 1e9);
  long wakeups = 0, over2 = 0, over5 = 0, over10 = 0;
  double lost_ms = 0, max_ms = 0;
  late worst[WORST];
  int n_worst = 0;
  for (int64_t due = start + period; due < stop; due += period) {
    struct timespec d = {.tv_sec = due / 1000000000, .tv_nsec = due % 1000000000};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &d, NULL) == EINTR) {
    }
    const int64_t now = scps__clock_ns();
    const double late_ms = (double)(now - due) * 1e-6;
    wakeups++;
    over2 += late_ms > 2;
    over5 += late_ms > 5;
    over10 += late_ms > 10;
    if (late_ms > 1) lost_ms += late_ms - 1;
    if (late_ms > max_ms) max_ms = late_ms;
    if (late_ms > 2) keep_worst(worst, &n_worst, (double)(due - start) * 1e-9, late_ms);
    /* After a stall, the next due time is the first one still ahead: the
     * missed ones would only report the same stall again. */
    while (due + period < now) due += period;
  }
  printf("{\"bench\": \"stall\", \"fifo\": %s, \"seconds\": %.1f, \"period_us\": %ld, \"wakeups\": %ld, "
         "\"late_over_2ms\": %ld, \"late_over_5ms\": %ld, \"late_over_10ms\": %ld, \"max_late_ms\": %.2f, "
         "\"lost_ms\": %.1f, \"worst\": [",
         fifo ? "true" : "false", seconds, period_us, wakeups, over2, over5, over10, max_ms, lost_ms);
  for (int i = 0; i < n_worst; i++)
    printf("%s{\"t_s\": %.3f, \"late_ms\": %.2f}", i ? ", " : "", worst[i].t_s, worst[i].late_ms);
  printf("]}\n");
  return 0;
}
