#include "scps_clock.h"
#include "scps_schedule.h"

#include <pthread.h>
#include <stdbool.h>
#include <string.h>

/* The SparseCore lane: a thread that runs one iteration's SparseCore work
 * each time the caller hands it one, so the caller can compute meanwhile. */
typedef struct lane {
  const scps_schedule_ops *ops;
  void *ud;
  int64_t steps;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int64_t iteration; /* next iteration to run; -1: quit */
  bool busy;
  int rc;
  scps_error err;
  double busy_seconds;
  /* Pushes that succeeded: batch t-2's counts even when batch t-1's compute
   * or batch t's lookup fails in the same iteration. */
  int64_t pushed;
} lane;

static int sc_iteration(lane *l, int64_t t, scps_error *err) {
  int rc = 0;
  double t0 = scps__clock_s();
  if (t >= 2 && t - 2 < l->steps) {
    rc = l->ops->sc_push(l->ud, t - 2, err);
    l->pushed += !rc;
  }
  if (!rc && t < l->steps) rc = l->ops->sc_lookup(l->ud, t, err);
  l->busy_seconds += scps__clock_s() - t0;
  return rc;
}

static void *lane_main(void *arg) {
  lane *l = arg;
  pthread_mutex_lock(&l->mu);
  for (;;) {
    while (!l->busy && l->iteration >= 0) pthread_cond_wait(&l->cv, &l->mu);
    if (l->iteration < 0) break;
    int64_t t = l->iteration;
    pthread_mutex_unlock(&l->mu);
    scps_error err;
    scps_error_clear(&err);
    int rc = sc_iteration(l, t, &err);
    pthread_mutex_lock(&l->mu);
    if (rc && !l->rc) {
      l->rc = rc;
      l->err = err;
    }
    l->busy = false;
    pthread_cond_broadcast(&l->cv);
  }
  pthread_mutex_unlock(&l->mu);
  return NULL;
}

static int run_sequential(const scps_schedule_ops *ops, void *ud, int64_t steps, scps_schedule_stats *st,
                          scps_error *err) {
  for (int64_t i = 0; i < steps; i++) {
    double t0 = scps__clock_s();
    int rc = ops->sc_lookup(ud, i, err);
    double t1 = scps__clock_s();
    if (!rc) rc = ops->tc_compute(ud, i, err);
    double t2 = scps__clock_s();
    if (!rc) rc = ops->sc_push(ud, i, err);
    st->sc_busy_seconds += (t1 - t0) + (scps__clock_s() - t2);
    st->tc_busy_seconds += t2 - t1;
    if (rc) return rc;
    st->steps++;
  }
  return 0;
}

static int run_pipelined(const scps_schedule_ops *ops, void *ud, int64_t steps, scps_schedule_stats *st,
                         scps_error *err) {
  lane l;
  memset(&l, 0, sizeof l);
  l.ops = ops;
  l.ud = ud;
  l.steps = steps;
  pthread_mutex_init(&l.mu, NULL);
  pthread_cond_init(&l.cv, NULL);
  pthread_t th;
  if (pthread_create(&th, NULL, lane_main, &l)) {
    pthread_mutex_destroy(&l.mu);
    pthread_cond_destroy(&l.cv);
    return scps_error_set(err, SCPS_ENOMEM, "schedule: cannot start the SparseCore lane");
  }
  int rc = 0;
  for (int64_t t = 0; t < steps + 2 && !rc; t++) {
    pthread_mutex_lock(&l.mu);
    l.iteration = t;
    l.busy = true;
    pthread_cond_broadcast(&l.cv);
    pthread_mutex_unlock(&l.mu);
    if (t >= 1 && t - 1 < steps) {
      double t0 = scps__clock_s();
      rc = ops->tc_compute(ud, t - 1, err);
      st->tc_busy_seconds += scps__clock_s() - t0;
    }
    pthread_mutex_lock(&l.mu);
    while (l.busy) pthread_cond_wait(&l.cv, &l.mu);
    if (!rc && l.rc) {
      rc = l.rc;
      if (err) *err = l.err;
    }
    pthread_mutex_unlock(&l.mu);
  }
  pthread_mutex_lock(&l.mu);
  l.iteration = -1;
  pthread_cond_broadcast(&l.cv);
  pthread_mutex_unlock(&l.mu);
  pthread_join(th, NULL);
  st->steps = l.pushed;
  st->sc_busy_seconds += l.busy_seconds;
  pthread_mutex_destroy(&l.mu);
  pthread_cond_destroy(&l.cv);
  return rc;
}

int scps__schedule_run(const scps_schedule_ops *ops, void *ud, int64_t steps, scps_schedule_mode mode,
                      scps_schedule_stats *stats, scps_error *err) {
  scps_schedule_stats local;
  scps_schedule_stats *st = stats ? stats : &local;
  memset(st, 0, sizeof *st);
  if (steps < 0) return scps_error_set(err, SCPS_EINVAL, "schedule: %lld steps", (long long)steps);
  double t0 = scps__clock_s();
  int rc = mode == SCPS_SCHEDULE_PIPELINED ? run_pipelined(ops, ud, steps, st, err)
                                           : run_sequential(ops, ud, steps, st, err);
  st->wall_seconds = scps__clock_s() - t0;
  return rc;
}
