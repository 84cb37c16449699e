#include "scps_scratch.h"

#include <pthread.h>
#include <stdlib.h>

#include "scps_budget.h"
#include "scps_error.h"

typedef struct block {
  float *mem;
  size_t cap;
} block;

struct scps_scratch {
  pthread_mutex_t mu;
  int max_idle, n_idle;
  block *idle;
  long refs; /* the creator's, and one per block taken */
  scps_budget *budget; /* counts every block, idle or taken; may be NULL */
};

/* Under s->mu, so the budget cannot go meanwhile (set_budget takes mu). */
static void release_locked(scps_scratch *s, size_t floats) {
  if (s->budget) scps__budget_release(s->budget, floats * sizeof(float));
}

int scps__scratch_create(int max_idle, scps_scratch **out) {
  *out = NULL;
  scps_scratch *s = calloc(1, sizeof *s);
  if (!s) return SCPS_ENOMEM;
  s->idle = calloc((size_t)(max_idle > 0 ? max_idle : 1), sizeof *s->idle);
  if (!s->idle) {
    free(s);
    return SCPS_ENOMEM;
  }
  pthread_mutex_init(&s->mu, NULL);
  s->max_idle = max_idle;
  s->refs = 1;
  *out = s;
  return 0;
}

static void destroy(scps_scratch *s) {
  for (int i = 0; i < s->n_idle; i++) free(s->idle[i].mem);
  pthread_mutex_destroy(&s->mu);
  free(s->idle);
  free(s);
}

/* Drops one reference, under s->mu; true when the pool is to go. */
static int unref_locked(scps_scratch *s) { return --s->refs == 0; }

void scps__scratch_release(scps_scratch *s) {
  if (!s) return;
  pthread_mutex_lock(&s->mu);
  int last = unref_locked(s);
  pthread_mutex_unlock(&s->mu);
  if (last) destroy(s);
}

float *scps__scratch_take(scps_scratch *s, size_t n, size_t *cap) {
  if (!n) n = 1;
  pthread_mutex_lock(&s->mu);
  int best = -1;
  for (int i = 0; i < s->n_idle; i++)
    if (s->idle[i].cap >= n && (best < 0 || s->idle[i].cap < s->idle[best].cap)) best = i;
  float *mem = NULL;
  if (best >= 0) {
    mem = s->idle[best].mem;
    *cap = s->idle[best].cap;
    s->idle[best] = s->idle[--s->n_idle];
    release_locked(s, n); /* the block is counted already */
  }
  s->refs++;
  pthread_mutex_unlock(&s->mu);
  if (!mem) {
    mem = malloc(n * sizeof *mem);
    *cap = n;
    if (!mem) {
      pthread_mutex_lock(&s->mu);
      release_locked(s, n);
      pthread_mutex_unlock(&s->mu);
      scps__scratch_release(s);
    }
  }
  return mem;
}

void scps__scratch_give(scps_scratch *s, float *mem, size_t cap) {
  float *drop = mem;
  size_t drop_cap = cap;
  pthread_mutex_lock(&s->mu);
  if (s->n_idle < s->max_idle) {
    s->idle[s->n_idle++] = (block){mem, cap};
    drop = NULL;
  } else if (s->max_idle > 0) {
    int small = 0;
    for (int i = 1; i < s->n_idle; i++)
      if (s->idle[i].cap < s->idle[small].cap) small = i;
    if (s->idle[small].cap < cap) {
      drop = s->idle[small].mem;
      drop_cap = s->idle[small].cap;
      s->idle[small] = (block){mem, cap};
    }
  }
  if (drop) release_locked(s, drop_cap);
  int last = unref_locked(s);
  pthread_mutex_unlock(&s->mu);
  free(drop);
  if (last) destroy(s);
}

void scps__scratch_set_budget(scps_scratch *s, scps_budget *budget) {
  pthread_mutex_lock(&s->mu);
  s->budget = budget;
  pthread_mutex_unlock(&s->mu);
}

size_t scps__scratch_drop_idle(scps_scratch *s, size_t want) {
  size_t freed = 0;
  pthread_mutex_lock(&s->mu);
  while (freed < want && s->n_idle > 0) {
    int big = 0;
    for (int i = 1; i < s->n_idle; i++)
      if (s->idle[i].cap > s->idle[big].cap) big = i;
    block b = s->idle[big];
    s->idle[big] = s->idle[--s->n_idle];
    free(b.mem);
    release_locked(s, b.cap);
    freed += b.cap * sizeof(float);
  }
  pthread_mutex_unlock(&s->mu);
  return freed;
}

size_t scps__scratch_idle_bytes(scps_scratch *s) {
  size_t n = 0;
  pthread_mutex_lock(&s->mu);
  for (int i = 0; i < s->n_idle; i++) n += s->idle[i].cap * sizeof(float);
  pthread_mutex_unlock(&s->mu);
  return n;
}
