#include "scps_budget.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "scps_clock.h"
#include "scps_error.h"

struct scps_budget {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  size_t limit, in_use, peak;
  int64_t waited, refused, waiting;
  scps_budget_waiter *head, *tail; /* in arrival order */
  size_t (*reclaim)(void *ud, size_t want);
  void *reclaim_ud;
  void (*tick)(void *ud, int64_t now_ns);
  void *tick_ud;
  int64_t period_ns;
  bool kick; /* something changed since the thread last looked */
  bool stop;
  pthread_t thread;
};

static void take_locked(scps_budget *b, size_t n) {
  b->in_use += n;
  if (b->in_use > b->peak) b->peak = b->in_use;
}

static bool fits_locked(const scps_budget *b, size_t n) { return n <= b->limit && b->in_use <= b->limit - n; }

/* The bytes missing for n to fit, under mu. */
static size_t deficit_locked(const scps_budget *b, size_t n) { return b->in_use + n - b->limit; }

typedef struct wait_list {
  scps_budget_waiter *head, *tail;
} wait_list;

static void push(wait_list *l, scps_budget_waiter *w) {
  w->next = NULL;
  if (l->tail) l->tail->next = w;
  else l->head = w;
  l->tail = w;
}

/* One pass over the waiting calls, under mu: those that fit are admitted
 * (their bytes reserved) in arrival order, those past their deadline
 * refused. */
static void decide_locked(scps_budget *b, int64_t now, wait_list *admitted, wait_list *refused) {
  scps_budget_waiter **at = &b->head, *prev = NULL;
  while (*at) {
    scps_budget_waiter *w = *at;
    bool admit = fits_locked(b, w->need);
    if (!admit && w->deadline_ns > now) {
      prev = w;
      at = &w->next;
      continue;
    }
    *at = w->next;
    if (b->tail == w) b->tail = prev;
    b->waiting--;
    if (admit) take_locked(b, w->need);
    else b->refused++;
    push(admit ? admitted : refused, w);
  }
}

/* Runs the done callbacks of a list, without the lock. */
static void run_list(scps_budget_waiter *w, bool admitted, size_t in_use, size_t limit) {
  while (w) {
    scps_budget_waiter *next = w->next;
    w->next = NULL;
    w->done(w, admitted, in_use, limit);
    w = next;
  }
}

static void *budget_main(void *arg) {
  scps_budget *b = arg;
  pthread_mutex_lock(&b->mu);
  int64_t next_tick = scps__clock_ns() + b->period_ns;
  while (!b->stop) {
    b->kick = false;
    int64_t now = scps__clock_ns();
    wait_list admitted = {0}, refused = {0};
    decide_locked(b, now, &admitted, &refused);
    size_t in_use = b->in_use;
    /* The first call still waiting may fit once idle memory is freed. */
    size_t want = b->head && b->reclaim ? deficit_locked(b, b->head->need) : 0;
    size_t limit = b->limit;
    /* Read under mu: the setters may run while the thread does. */
    size_t (*reclaim)(void *, size_t) = b->reclaim;
    void (*tick)(void *, int64_t) = b->tick;
    void *reclaim_ud = b->reclaim_ud, *tick_ud = b->tick_ud;
    int64_t period = b->period_ns;
    pthread_mutex_unlock(&b->mu);
    bool reclaimed = want && reclaim(reclaim_ud, want) > 0;
    run_list(admitted.head, true, in_use, limit);
    run_list(refused.head, false, in_use, limit);
    if (tick && now >= next_tick) {
      tick(tick_ud, now);
      next_tick = now + period;
    }
    pthread_mutex_lock(&b->mu);
    if (reclaimed || b->kick || b->stop) continue;
    int64_t wake = next_tick;
    for (scps_budget_waiter *w = b->head; w; w = w->next)
      if (w->deadline_ns < wake) wake = w->deadline_ns;
    struct timespec ts = {(time_t)(wake / 1000000000), (long)(wake % 1000000000)};
    if (wake > scps__clock_ns()) pthread_cond_timedwait(&b->cv, &b->mu, &ts);
  }
  pthread_mutex_unlock(&b->mu);
  return NULL;
}

int scps__budget_create(size_t limit, scps_budget **out) {
  *out = NULL;
  scps_budget *b = calloc(1, sizeof *b);
  if (!b) return SCPS_ENOMEM;
  b->limit = limit;
  b->period_ns = 1000000000;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_mutex_init(&b->mu, NULL);
  pthread_cond_init(&b->cv, &ca);
  pthread_condattr_destroy(&ca);
  if (pthread_create(&b->thread, NULL, budget_main, b)) {
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
    free(b);
    return SCPS_ENOMEM;
  }
  *out = b;
  return 0;
}

/* Wakes the thread: a call to decide, or a setting changed. */
static void kick_locked(scps_budget *b) {
  b->kick = true;
  pthread_cond_signal(&b->cv);
}

void scps__budget_refuse_waiting(scps_budget *b) {
  pthread_mutex_lock(&b->mu);
  scps_budget_waiter *run = b->head;
  size_t in_use = b->in_use;
  for (scps_budget_waiter *w = run; w; w = w->next) b->refused++;
  b->head = b->tail = NULL;
  b->waiting = 0;
  pthread_mutex_unlock(&b->mu);
  run_list(run, false, in_use, b->limit);
}

void scps__budget_destroy(scps_budget *b) {
  if (!b) return;
  scps__budget_refuse_waiting(b);
  pthread_mutex_lock(&b->mu);
  b->stop = true;
  kick_locked(b);
  pthread_mutex_unlock(&b->mu);
  pthread_join(b->thread, NULL);
  pthread_cond_destroy(&b->cv);
  pthread_mutex_destroy(&b->mu);
  free(b);
}

void scps__budget_set_reclaim(scps_budget *b, size_t (*reclaim)(void *ud, size_t want), void *ud) {
  pthread_mutex_lock(&b->mu);
  b->reclaim = reclaim;
  b->reclaim_ud = ud;
  pthread_mutex_unlock(&b->mu);
}

void scps__budget_set_tick(scps_budget *b, void (*tick)(void *ud, int64_t now_ns), void *ud, int64_t period_ns) {
  pthread_mutex_lock(&b->mu);
  b->tick = tick;
  b->tick_ud = ud;
  b->period_ns = period_ns > 0 ? period_ns : 1000000000;
  kick_locked(b);
  pthread_mutex_unlock(&b->mu);
}

bool scps__budget_reserve(scps_budget *b, size_t n) {
  for (int attempt = 0;; attempt++) {
    pthread_mutex_lock(&b->mu);
    if (fits_locked(b, n)) {
      take_locked(b, n);
      pthread_mutex_unlock(&b->mu);
      return true;
    }
    size_t want = n <= b->limit ? deficit_locked(b, n) : 0;
    size_t (*reclaim)(void *, size_t) = b->reclaim;
    pthread_mutex_unlock(&b->mu);
    if (attempt || !want || !reclaim || reclaim(b->reclaim_ud, want) == 0) return false;
  }
}

void scps__budget_charge(scps_budget *b, size_t n) {
  pthread_mutex_lock(&b->mu);
  take_locked(b, n);
  pthread_mutex_unlock(&b->mu);
}

void scps__budget_release(scps_budget *b, size_t n) {
  if (!n) return;
  pthread_mutex_lock(&b->mu);
  b->in_use = n < b->in_use ? b->in_use - n : 0;
  if (b->head) kick_locked(b);
  pthread_mutex_unlock(&b->mu);
}

void scps__budget_wait(scps_budget *b, scps_budget_waiter *w) {
  w->next = NULL;
  w->since_ns = 0;
  if (w->need <= b->limit && scps__budget_reserve(b, w->need)) {
    w->done(w, true, 0, b->limit);
    return;
  }
  pthread_mutex_lock(&b->mu);
  if (w->need > b->limit) {
    b->refused++;
    size_t in_use = b->in_use;
    pthread_mutex_unlock(&b->mu);
    w->done(w, false, in_use, b->limit);
    return;
  }
  w->since_ns = scps__clock_ns();
  if (b->tail) b->tail->next = w;
  else b->head = w;
  b->tail = w;
  b->waited++;
  b->waiting++;
  kick_locked(b);
  pthread_mutex_unlock(&b->mu);
}

size_t scps__budget_limit(const scps_budget *b) { return b->limit; }

void scps__budget_get_stats(scps_budget *b, scps_budget_stats *out) {
  pthread_mutex_lock(&b->mu);
  out->limit = (int64_t)b->limit;
  out->in_use = (int64_t)b->in_use;
  out->peak = (int64_t)b->peak;
  out->waited = b->waited;
  out->refused = b->refused;
  out->waiting = b->waiting;
  pthread_mutex_unlock(&b->mu);
}
