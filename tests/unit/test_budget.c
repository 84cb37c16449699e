/* The server's memory budget (scps_budget): reservations within the limit,
 * charges past it, a call that fits admitted at once, one larger than the
 * whole budget refused at once, waiting calls admitted first fit in arrival
 * order when memory is released or refused at their deadline, idle memory
 * reclaimed before a call is made to wait, and the scratch pool counted. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "scps_budget.h"
#include "scps_clock.h"
#include "scps_scratch.h"
#include "scps_test.h"

#define MiB ((size_t)1 << 20)

typedef struct rec {
  scps_budget_waiter w;
  atomic_int state; /* 0 waiting, 1 admitted, 2 refused */
  size_t in_use, limit;
  int order;
} rec;

static atomic_int decided;

static void done(scps_budget_waiter *w, bool admitted, size_t in_use, size_t limit) {
  rec *r = (rec *)(void *)w;
  r->in_use = in_use;
  r->limit = limit;
  r->order = atomic_fetch_add(&decided, 1);
  atomic_store(&r->state, admitted ? 1 : 2);
}

static void start(scps_budget *b, rec *r, size_t need, double wait_s) {
  memset(r, 0, sizeof *r);
  r->w.need = need;
  r->w.deadline_ns = scps__clock_ns() + (int64_t)(wait_s * 1e9);
  r->w.done = done;
  scps__budget_wait(b, &r->w);
}

/* Waits (up to 10 s) until r is decided; returns its state. */
static int settle(rec *r) {
  for (int i = 0; i < 10000 && !atomic_load(&r->state); i++) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  return atomic_load(&r->state);
}

static void test_reserve_charge(void) {
  scps_budget *b;
  CHECK(scps__budget_create(10 * MiB, &b) == 0);
  CHECK(scps__budget_reserve(b, 6 * MiB));
  CHECK(!scps__budget_reserve(b, 5 * MiB));
  CHECK(scps__budget_reserve(b, 4 * MiB));
  scps__budget_charge(b, 3 * MiB); /* already allocated: counted past the limit */
  scps_budget_stats st;
  scps__budget_get_stats(b, &st);
  CHECKF(st.in_use == (int64_t)(13 * MiB) && st.peak == st.in_use && st.limit == (int64_t)(10 * MiB),
         "in use %lld peak %lld", (long long)st.in_use, (long long)st.peak);
  scps__budget_release(b, 13 * MiB);
  CHECK(!scps__budget_reserve(b, 11 * MiB));
  CHECK(scps__budget_reserve(b, 10 * MiB));
  scps__budget_release(b, 10 * MiB);
  scps__budget_get_stats(b, &st);
  CHECK(st.in_use == 0 && st.waited == 0 && st.refused == 0);
  scps__budget_destroy(b);
}

static void test_wait(void) {
  scps_budget *b;
  CHECK(scps__budget_create(10 * MiB, &b) == 0);
  rec now, huge, big, small, late;
  start(b, &now, 8 * MiB, 5);
  CHECK(atomic_load(&now.state) == 1); /* decided on this thread */
  start(b, &huge, 11 * MiB, 5);
  CHECKF(atomic_load(&huge.state) == 2 && huge.limit == 10 * MiB, "state %d", atomic_load(&huge.state));
  /* 2 MiB free: big waits; small, arriving after it, fits and goes first. */
  start(b, &big, 6 * MiB, 10);
  start(b, &small, 2 * MiB, 10);
  CHECK(atomic_load(&small.state) == 1 && atomic_load(&big.state) == 0);
  start(b, &late, 5 * MiB, 0.2);
  CHECKF(settle(&late) == 2 && late.in_use == 10 * MiB, "late: state %d in use %zu", atomic_load(&late.state),
         late.in_use);
  CHECK(atomic_load(&big.state) == 0);
  scps_budget_stats st;
  scps__budget_get_stats(b, &st);
  CHECKF(st.waiting == 1 && st.waited == 2 && st.refused == 2, "waiting %lld waited %lld refused %lld",
         (long long)st.waiting, (long long)st.waited, (long long)st.refused);
  scps__budget_release(b, 8 * MiB); /* now's */
  CHECK(settle(&big) == 1);
  scps__budget_get_stats(b, &st);
  CHECKF(st.in_use == (int64_t)(8 * MiB) && st.waiting == 0, "in use %lld", (long long)st.in_use);
  scps__budget_release(b, 8 * MiB);
  scps__budget_destroy(b);
}

static void test_refuse_waiting(void) {
  scps_budget *b;
  CHECK(scps__budget_create(4 * MiB, &b) == 0);
  CHECK(scps__budget_reserve(b, 4 * MiB));
  rec r[3];
  for (int i = 0; i < 3; i++) start(b, &r[i], MiB, 60);
  scps__budget_refuse_waiting(b);
  for (int i = 0; i < 3; i++) CHECK(atomic_load(&r[i].state) == 2);
  /* And the destroy of a budget with calls waiting refuses them too. */
  rec last;
  start(b, &last, MiB, 60);
  scps__budget_destroy(b);
  CHECK(atomic_load(&last.state) == 2);
}

static size_t reclaim(void *pool, size_t want) { return scps__scratch_drop_idle(pool, want); }

/* The scratch pool's blocks are counted while taken and while idle, and
 * idle ones are freed when a call would otherwise wait. */
static void test_scratch(void) {
  scps_budget *b;
  scps_scratch *pool;
  CHECK(scps__budget_create(16 * MiB, &b) == 0);
  CHECK(scps__scratch_create(4, &pool) == 0);
  scps__scratch_set_budget(pool, b);
  scps__budget_set_reclaim(b, reclaim, pool);
  size_t n = 2 * MiB / sizeof(float), cap;
  CHECK(scps__budget_reserve(b, n * sizeof(float)));
  float *m1 = scps__scratch_take(pool, n, &cap);
  CHECK(m1 && cap == n);
  CHECK(scps__budget_reserve(b, n * sizeof(float)));
  float *m2 = scps__scratch_take(pool, n, &cap);
  scps_budget_stats st;
  scps__budget_get_stats(b, &st);
  CHECK(st.in_use == (int64_t)(4 * MiB));
  scps__scratch_give(pool, m1, n);
  scps__scratch_give(pool, m2, n);
  scps__budget_get_stats(b, &st);
  CHECKF(st.in_use == (int64_t)(4 * MiB) && scps__scratch_idle_bytes(pool) == 4 * MiB, "idle blocks counted: %lld",
         (long long)st.in_use);
  /* Reusing an idle block takes nothing more. */
  CHECK(scps__budget_reserve(b, n * sizeof(float)));
  m1 = scps__scratch_take(pool, n, &cap);
  scps__budget_get_stats(b, &st);
  CHECK(st.in_use == (int64_t)(4 * MiB) && scps__scratch_idle_bytes(pool) == 2 * MiB);
  /* 13 MiB do not fit beside 4 MiB counted, but do once the idle block goes. */
  rec r;
  start(b, &r, 13 * MiB, 5);
  CHECK(atomic_load(&r.state) == 1 && scps__scratch_idle_bytes(pool) == 0);
  scps__budget_get_stats(b, &st);
  CHECK(st.in_use == (int64_t)(15 * MiB));
  scps__budget_release(b, 13 * MiB);
  scps__scratch_give(pool, m1, cap);
  CHECK(scps__scratch_drop_idle(pool, SIZE_MAX) == 2 * MiB);
  scps__budget_get_stats(b, &st);
  CHECK(st.in_use == 0);
  scps__scratch_set_budget(pool, NULL);
  scps__budget_destroy(b);
  scps__scratch_release(pool);
}

int main(void) {
  test_reserve_charge();
  test_wait();
  test_refuse_waiting();
  test_scratch();
  return scps_test_finish("test_budget");
}
