/* pthread_setaffinity_np, pthread_setname_np, cpu_set_t */
#define _GNU_SOURCE
#include "scps_clock.h"
#include "scps_spin.h"
#include "scps_pipeline.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A growable ring of job pointers with its own lock: a job sits in every
 * SparseCore queue at once, so links cannot live in the job. */
typedef struct queue {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  scps_job **ring;
  size_t cap, head, len;
  bool stop;
  int64_t tasks;
  int64_t busy_ns;
} queue;

typedef struct worker {
  scps_pipeline *p;
  int32_t index; /* SparseCore index, or -1 for TensorCore workers */
  pthread_t thread;
} worker;

struct scps_pipeline {
  int32_t n_sc, n_tc;
  queue *sc;  /* [n_sc] */
  queue tc;   /* shared by the TensorCore workers */
  worker *workers;
  int32_t started;
  pthread_mutex_t submit_mu;
  pthread_mutex_t gang_mu; /* with gang_cv: workers waiting at a gang barrier */
  pthread_cond_t gang_cv;
  atomic_uint_fast64_t gang_gen; /* barriers passed; written under gang_mu */
};

static int queue_init(queue *q) {
  memset(q, 0, sizeof *q);
  q->cap = 64;
  q->ring = malloc(sizeof *q->ring * q->cap);
  if (!q->ring) return SCPS_ENOMEM;
  pthread_mutex_init(&q->mu, NULL);
  pthread_cond_init(&q->cv, NULL);
  return 0;
}

static void queue_free(queue *q) {
  if (!q->ring) return;
  pthread_mutex_destroy(&q->mu);
  pthread_cond_destroy(&q->cv);
  free(q->ring);
  q->ring = NULL;
}

/* Called with q->mu held. Growth doubles; an allocation failure keeps the old
 * ring and blocks until a worker makes room, so no job is ever lost. */
static void queue_push_locked(queue *q, scps_job *job) {
  while (q->len == q->cap) {
    scps_job **bigger = malloc(sizeof *bigger * q->cap * 2);
    if (!bigger) {
      pthread_cond_wait(&q->cv, &q->mu);
      continue;
    }
    for (size_t i = 0; i < q->len; i++) bigger[i] = q->ring[(q->head + i) % q->cap];
    free(q->ring);
    q->ring = bigger;
    q->head = 0;
    q->cap *= 2;
  }
  q->ring[(q->head + q->len) % q->cap] = job;
  q->len++;
  pthread_cond_broadcast(&q->cv);
}

static void queue_push(queue *q, scps_job *job) {
  pthread_mutex_lock(&q->mu);
  queue_push_locked(q, job);
  pthread_mutex_unlock(&q->mu);
}

/* Blocks for the next job; NULL once stopped and empty. */
static scps_job *queue_pop(queue *q) {
  pthread_mutex_lock(&q->mu);
  while (!q->len && !q->stop) pthread_cond_wait(&q->cv, &q->mu);
  scps_job *job = NULL;
  if (q->len) {
    job = q->ring[q->head];
    q->head = (q->head + 1) % q->cap;
    q->len--;
    pthread_cond_broadcast(&q->cv);
  }
  pthread_mutex_unlock(&q->mu);
  return job;
}

static void queue_account(queue *q, int64_t ns) {
  pthread_mutex_lock(&q->mu);
  q->tasks++;
  q->busy_ns += ns;
  pthread_mutex_unlock(&q->mu);
}

static void queue_stop(queue *q) {
  pthread_mutex_lock(&q->mu);
  q->stop = true;
  pthread_cond_broadcast(&q->cv);
  pthread_mutex_unlock(&q->mu);
}

/* How long a worker that reaches a gang job's start or sync point before
 * the others spins before it sleeps (at the end, where no one waits for it,
 * it sleeps at once). The others usually arrive within tens of microseconds,
 * while waking a sleeper whose core went idle can take milliseconds on a
 * virtual machine whose host runs other guests (seen: 3.9 ms from the last
 * worker of a dlrm8 lookup reaching the barrier to the first one running
 * again, its core idle meanwhile). */
#define GANG_SPIN_NS 100000

/* One barrier of a gang job; true for the last worker to arrive, which
 * wakes the others. Waiters watch the pipeline's barrier generation, not the
 * job: once the last worker of the closing barrier has handed the job on,
 * the TensorCore stage may free it while the others are still waking up.
 * Every worker passes the mutex after the barrier too, so it orders every
 * worker's reads before the barrier with every worker's writes after it;
 * the spin only watches the generation. */
static bool gang_wait(scps_pipeline *p, int *left, bool spin) {
  pthread_mutex_lock(&p->gang_mu);
  const uint64_t gen = atomic_load_explicit(&p->gang_gen, memory_order_relaxed);
  if (--*left == 0) {
    atomic_store_explicit(&p->gang_gen, gen + 1, memory_order_release);
    pthread_cond_broadcast(&p->gang_cv);
    pthread_mutex_unlock(&p->gang_mu);
    return true;
  }
  pthread_mutex_unlock(&p->gang_mu);
  if (spin) {
    const int64_t until = scps__clock_ns() + GANG_SPIN_NS;
    for (unsigned i = 1; atomic_load_explicit(&p->gang_gen, memory_order_acquire) == gen; i++) {
      scps__cpu_relax();
      if (!(i & 63) && scps__clock_ns() > until) break;
    }
  }
  pthread_mutex_lock(&p->gang_mu);
  while (atomic_load_explicit(&p->gang_gen, memory_order_relaxed) == gen) pthread_cond_wait(&p->gang_cv, &p->gang_mu);
  pthread_mutex_unlock(&p->gang_mu);
  return false;
}

/* A gang job goes to the TensorCore stage from the last worker to finish
 * it, as soon as it finishes, rather than after the others woke up to
 * count themselves done. */
static void *sc_main(void *arg) {
  worker *w = arg;
  queue *q = &w->p->sc[w->index];
  scps_job *job;
  while ((job = queue_pop(q))) {
    if (job->gang) gang_wait(w->p, &job->gang_in, true);
    int64_t t0 = scps__clock_ns();
    job->sc_fn(job, w->index);
    queue_account(q, scps__clock_ns() - t0);
    if (job->gang) {
      if (gang_wait(w->p, &job->gang_out, false)) queue_push(&w->p->tc, job);
    } else if (atomic_fetch_sub(&job->pending, 1) == 1) {
      queue_push(&w->p->tc, job);
    }
  }
  return NULL;
}

static void *tc_main(void *arg) {
  worker *w = arg;
  queue *q = &w->p->tc;
  scps_job *job;
  while ((job = queue_pop(q))) {
    int64_t t0 = scps__clock_ns();
    job->tc_fn(job);
    queue_account(q, scps__clock_ns() - t0);
  }
  return NULL;
}

void scps__pipeline_destroy(scps_pipeline *p) {
  if (!p) return;
  /* SparseCore workers first: their last jobs still feed the TensorCore queue. */
  for (int32_t i = 0; i < p->n_sc; i++) queue_stop(&p->sc[i]);
  for (int32_t i = 0; i < p->started && i < p->n_sc; i++) pthread_join(p->workers[i].thread, NULL);
  queue_stop(&p->tc);
  for (int32_t i = p->n_sc; i < p->started; i++) pthread_join(p->workers[i].thread, NULL);
  for (int32_t i = 0; i < p->n_sc; i++) queue_free(&p->sc[i]);
  queue_free(&p->tc);
  pthread_mutex_destroy(&p->submit_mu);
  pthread_mutex_destroy(&p->gang_mu);
  pthread_cond_destroy(&p->gang_cv);
  free(p->sc);
  free(p->workers);
  free(p);
}

/* A gang job's workers must run side by side. Woken together by one
 * submission, they were often queued on the same CPU while the other sat
 * idle, and the scheduler left them there: the gang ran one worker after
 * the other (dlrm8 on 2 CPUs: 9-27 lookups in 60, criteo26 11-42). */
static int pin(pthread_t t, int32_t k, int cpu, scps_error *err) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (cpu < 0 || cpu >= CPU_SETSIZE)
    return scps_error_set(err, SCPS_EINVAL, "pipeline: SparseCore worker %d: CPU %d out of range", k, cpu);
  CPU_SET(cpu, &set);
  int e = pthread_setaffinity_np(t, sizeof set, &set);
  return e ? scps_error_set(err, SCPS_EINVAL, "pipeline: cannot pin SparseCore worker %d to CPU %d: %s", k, cpu,
                            strerror(e))
           : 0;
}

int scps__pipeline_create(int32_t n_sc, int32_t n_tc, const int *sc_cpus, scps_pipeline **out, scps_error *err) {
  *out = NULL;
  if (n_sc < 1 || n_tc < 1)
    return scps_error_set(err, SCPS_EINVAL, "pipeline: %d SparseCore and %d TensorCore workers; need >= 1 each",
                          n_sc, n_tc);
  scps_pipeline *p = calloc(1, sizeof *p);
  if (!p) return scps_error_set(err, SCPS_ENOMEM, "pipeline: out of memory");
  p->n_sc = n_sc;
  p->n_tc = n_tc;
  pthread_mutex_init(&p->submit_mu, NULL);
  pthread_mutex_init(&p->gang_mu, NULL);
  atomic_init(&p->gang_gen, 0);
  pthread_cond_init(&p->gang_cv, NULL);
  p->sc = calloc((size_t)n_sc, sizeof *p->sc);
  p->workers = calloc((size_t)(n_sc + n_tc), sizeof *p->workers);
  int rc = p->sc && p->workers ? queue_init(&p->tc) : SCPS_ENOMEM;
  for (int32_t i = 0; !rc && i < n_sc; i++) rc = queue_init(&p->sc[i]);
  if (rc) rc = scps_error_set(err, rc, "pipeline: out of memory");
  for (int32_t i = 0; !rc && i < n_sc + n_tc; i++) {
    worker *w = &p->workers[i];
    w->p = p;
    w->index = i < n_sc ? i : -1;
    if (pthread_create(&w->thread, NULL, i < n_sc ? sc_main : tc_main, w)) {
      rc = scps_error_set(err, SCPS_ENOMEM, "pipeline: cannot start %d workers", n_sc + n_tc);
      break;
    }
    p->started++;
    char name[32];
    snprintf(name, sizeof name, i < n_sc ? "scps-sc%d" : "scps-tc%d", i < n_sc ? i : i - n_sc);
    name[15] = '\0'; /* the kernel's limit */
    pthread_setname_np(w->thread, name);
    if (i < n_sc && sc_cpus) rc = pin(w->thread, i, sc_cpus[i], err);
  }
  if (rc) {
    scps__pipeline_destroy(p);
    return rc;
  }
  *out = p;
  return 0;
}

void scps__pipeline_submit(scps_pipeline *p, scps_job *job) {
  if (!job->sc_fn) {
    atomic_store(&job->pending, 0);
    queue_push(&p->tc, job);
    return;
  }
  atomic_store(&job->pending, p->n_sc);
  job->gang_in = job->gang_sync = job->gang_out = p->n_sc;
  /* Holding every SparseCore lock while pushing keeps the per-SparseCore
   * orders consistent with one global submission order. */
  pthread_mutex_lock(&p->submit_mu);
  for (int32_t i = 0; i < p->n_sc; i++) pthread_mutex_lock(&p->sc[i].mu);
  for (int32_t i = 0; i < p->n_sc; i++) queue_push_locked(&p->sc[i], job);
  for (int32_t i = p->n_sc - 1; i >= 0; i--) pthread_mutex_unlock(&p->sc[i].mu);
  pthread_mutex_unlock(&p->submit_mu);
}

void scps__pipeline_gang_sync(scps_pipeline *p, scps_job *job) { gang_wait(p, &job->gang_sync, true); }

static void stage_stats(queue *q, const char *name, scps_stage_stats *s) {
  pthread_mutex_lock(&q->mu);
  snprintf(s->name, sizeof s->name, "%s", name);
  s->queue_depth = (int64_t)q->len;
  s->tasks = q->tasks;
  s->busy_seconds = (double)q->busy_ns * 1e-9;
  pthread_mutex_unlock(&q->mu);
}

int scps__pipeline_stats(scps_pipeline *p, scps_stage_stats *out, int max) {
  char name[SCPS_STAGE_NAME_MAX];
  int n = 0;
  for (int32_t i = 0; i < p->n_sc && n < max; i++, n++) {
    snprintf(name, sizeof name, "sc%d", i);
    stage_stats(&p->sc[i], name, &out[n]);
  }
  if (n < max) stage_stats(&p->tc, "tc", &out[n++]);
  return p->n_sc + 1;
}
