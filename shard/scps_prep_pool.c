#include "scps_prep_pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/prctl.h>

#include "scps_clock.h"
#include "scps_spin.h"

static void run_items(scps_prep *p, prep_thread *t) {
  for (;;) {
    int i = atomic_fetch_add_explicit(&p->next_item, 1, memory_order_relaxed);
    if (i >= p->n_items)
      return;
    p->job(p, i, t);
  }
}

/* A phase's hand-off waits this long spinning before it sleeps: the phases
 * of one run follow each other closely, while waking a thread that slept
 * costs far more (on a virtual machine especially). */
#define SPIN_NS 20000

/* Spin up to SPIN_NS while *v equals old (is positive); the caller then
 * checks again under the mutex and sleeps if it must. */
static void spin_while_equal(atomic_uint_fast64_t *v, uint64_t old) {
  int64_t until = scps__clock_ns() + SPIN_NS;
  for (unsigned i = 1; atomic_load_explicit(v, memory_order_acquire) == old; i++) {
    scps__cpu_relax();
    if (!(i & 63) && scps__clock_ns() > until) return;
  }
}

static void spin_while_positive(atomic_int *v) {
  int64_t until = scps__clock_ns() + SPIN_NS;
  for (unsigned i = 1; atomic_load_explicit(v, memory_order_acquire) > 0; i++) {
    scps__cpu_relax();
    if (!(i & 63) && scps__clock_ns() > until) return;
  }
}

static void *worker_main(void *arg) {
  prep_thread *t = arg;
  scps_prep *p = t->p;
  uint64_t seen = 0;
  prctl(PR_SET_NAME, "scps-prep"); /* per-thread CPU time tells it from its caller's */
  for (;;) {
    spin_while_equal(&p->generation, seen);
    pthread_mutex_lock(&p->mu);
    while (!p->stop && atomic_load(&p->generation) == seen)
      pthread_cond_wait(&p->cv_work, &p->mu);
    if (p->stop) {
      pthread_mutex_unlock(&p->mu);
      return NULL;
    }
    seen = atomic_load(&p->generation);
    pthread_mutex_unlock(&p->mu);
    run_items(p, t);
    pthread_mutex_lock(&p->mu);
    if (atomic_fetch_sub(&p->pending, 1) == 1)
      pthread_cond_signal(&p->cv_done);
    pthread_mutex_unlock(&p->mu);
  }
}

void scps__prep_pool_run(scps_prep *p, prep_job_fn job, int n_items) {
  if (p->workers_started == 0 || n_items <= 1) {
    for (int i = 0; i < n_items; i++)
      job(p, i, &p->threads[0]);
    return;
  }
  pthread_mutex_lock(&p->mu);
  p->job = job;
  p->n_items = n_items;
  atomic_store_explicit(&p->next_item, 0, memory_order_relaxed);
  atomic_store(&p->pending, p->workers_started);
  atomic_fetch_add(&p->generation, 1);
  pthread_cond_broadcast(&p->cv_work);
  pthread_mutex_unlock(&p->mu);
  run_items(p, &p->threads[0]);
  spin_while_positive(&p->pending);
  pthread_mutex_lock(&p->mu);
  while (atomic_load(&p->pending) > 0)
    pthread_cond_wait(&p->cv_done, &p->mu);
  pthread_mutex_unlock(&p->mu);
}

int scps__prep_pool_start(scps_prep *p, scps_error *err) {
  if (p->n_threads <= 1)
    return 0;
  if (pthread_mutex_init(&p->mu, NULL) != 0)
    return scps_error_set(err, SCPS_ENOMEM, "scps__prep_create: pthread_mutex_init failed");
  if (pthread_cond_init(&p->cv_work, NULL) != 0) {
    pthread_mutex_destroy(&p->mu);
    return scps_error_set(err, SCPS_ENOMEM, "scps__prep_create: pthread_cond_init failed");
  }
  if (pthread_cond_init(&p->cv_done, NULL) != 0) {
    pthread_cond_destroy(&p->cv_work);
    pthread_mutex_destroy(&p->mu);
    return scps_error_set(err, SCPS_ENOMEM, "scps__prep_create: pthread_cond_init failed");
  }
  p->sync_init = true;
  for (int i = 1; i < p->n_threads; i++) {
    if (pthread_create(&p->threads[i].thread, NULL, worker_main, &p->threads[i]) != 0)
      return scps_error_set(err, SCPS_ENOMEM, "scps__prep_create: cannot start thread %d", i);
    p->workers_started++;
  }
  return 0;
}

void scps__prep_pool_stop(scps_prep *p) {
  if (!p->sync_init)
    return;
  pthread_mutex_lock(&p->mu);
  p->stop = true;
  pthread_cond_broadcast(&p->cv_work);
  pthread_mutex_unlock(&p->mu);
  for (int i = 1; i <= p->workers_started; i++)
    pthread_join(p->threads[i].thread, NULL);
  pthread_cond_destroy(&p->cv_done);
  pthread_cond_destroy(&p->cv_work);
  pthread_mutex_destroy(&p->mu);
}
