/* The step schedules: order of lookups, computes and pushes per batch,
 * staleness (pipelined lookups miss exactly the previous batch's push),
 * true overlap of the two lanes, and error propagation. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "scps_schedule.h"
#include "scps_test.h"

#define STEPS 40

typedef struct fake {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int64_t pushed_count;      /* pushes applied so far */
  int64_t pushed_mask_seen[STEPS];
  int state[STEPS];          /* 0 none, 1 looked up, 2 computed, 3 pushed */
  int order_errors;
  int64_t lookups_started;   /* for the overlap rendezvous */
  int overlap_misses;
  int fail_push_at, fail_compute_at;
  scps_schedule_mode mode;
} fake;

static int fake_lookup(void *ud, int64_t i, scps_error *err) {
  fake *f = ud;
  pthread_mutex_lock(&f->mu);
  if (f->state[i] != 0) f->order_errors++;
  f->state[i] = 1;
  f->pushed_mask_seen[i] = f->pushed_count;
  f->lookups_started = i + 1;
  pthread_cond_broadcast(&f->cv);
  pthread_mutex_unlock(&f->mu);
  return 0;
}

static int fake_compute(void *ud, int64_t i, scps_error *err) {
  fake *f = ud;
  pthread_mutex_lock(&f->mu);
  if (f->state[i] != 1) f->order_errors++;
  f->state[i] = 2;
  /* Pipelined: batch i+1's lookup runs while batch i computes. Wait for it
   * (bounded): if the lanes did not overlap it would never come. */
  if (f->mode == SCPS_SCHEDULE_PIPELINED && i + 1 < STEPS) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 5;
    while (f->lookups_started < i + 2)
      if (pthread_cond_timedwait(&f->cv, &f->mu, &until)) {
        f->overlap_misses++;
        break;
      }
  }
  pthread_mutex_unlock(&f->mu);
  if (i == f->fail_compute_at) return scps_error_set(err, SCPS_EINVAL, "compute of batch %lld failed", (long long)i);
  return 0;
}

static int fake_push(void *ud, int64_t i, scps_error *err) {
  fake *f = ud;
  pthread_mutex_lock(&f->mu);
  if (f->state[i] != 2) f->order_errors++;
  f->state[i] = 3;
  f->pushed_count++;
  pthread_mutex_unlock(&f->mu);
  if (i == f->fail_push_at) return scps_error_set(err, SCPS_EUNAVAIL, "push of batch %lld failed", (long long)i);
  return 0;
}

static const scps_schedule_ops ops = {fake_lookup, fake_compute, fake_push};

static void run(scps_schedule_mode mode) {
  static fake f;
  memset(&f, 0, sizeof f);
  pthread_mutex_init(&f.mu, NULL);
  pthread_cond_init(&f.cv, NULL);
  f.fail_push_at = f.fail_compute_at = -1;
  f.mode = mode;
  scps_schedule_stats st;
  scps_error err;
  CHECK_OK(scps__schedule_run(&ops, &f, STEPS, mode, &st, &err), &err);
  CHECK(st.steps == STEPS && f.order_errors == 0 && f.overlap_misses == 0);
  int stale_errors = 0;
  for (int64_t i = 0; i < STEPS; i++) {
    CHECK(f.state[i] == 3);
    /* Sequential: batch i sees the pushes of 0..i-1. Pipelined: of 0..i-2. */
    int64_t expect = mode == SCPS_SCHEDULE_SEQUENTIAL ? i : (i ? i - 1 : 0);
    stale_errors += f.pushed_mask_seen[i] != expect;
  }
  CHECKF(stale_errors == 0, "mode %d: %d batches saw the wrong number of pushes", mode, stale_errors);

  /* An error stops the run and is returned; nothing after it is pushed. */
  memset(f.state, 0, sizeof f.state);
  f.pushed_count = 0;
  f.lookups_started = 0;
  f.fail_push_at = 5;
  f.mode = SCPS_SCHEDULE_SEQUENTIAL; /* no rendezvous: the run stops early */
  int rc = scps__schedule_run(&ops, &f, STEPS, mode, &st, &err);
  CHECK(rc == SCPS_EUNAVAIL && strstr(err.msg, "batch 5"));
  CHECK(st.steps == 5 && f.pushed_count == 6 && f.state[STEPS - 1] == 0);

  /* A compute that fails: steps counts every push that was applied (in the
   * pipelined schedule, batch 4's push runs beside batch 5's compute). */
  memset(f.state, 0, sizeof f.state);
  f.pushed_count = 0;
  f.lookups_started = 0;
  f.fail_push_at = -1;
  f.fail_compute_at = 5;
  rc = scps__schedule_run(&ops, &f, STEPS, mode, &st, &err);
  CHECK(rc == SCPS_EINVAL && strstr(err.msg, "batch 5"));
  CHECKF(st.steps == f.pushed_count && f.pushed_count == 5, "mode %d: steps %lld, pushes applied %lld", mode,
         (long long)st.steps, (long long)f.pushed_count);
  pthread_mutex_destroy(&f.mu);
  pthread_cond_destroy(&f.cv);
}

int main(void) {
  run(SCPS_SCHEDULE_SEQUENTIAL);
  run(SCPS_SCHEDULE_PIPELINED);
  scps_error err;
  CHECK(scps__schedule_run(&ops, NULL, -1, SCPS_SCHEDULE_SEQUENTIAL, NULL, &err) == SCPS_EINVAL);
  return scps_test_finish("test_schedule");
}
