#include "scps_client_engine.h"
#include "scps_clock.h"
#include "scps_loadgen.h"
#include "scps_step.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Distinct batches each client cycles through, preprocessed before the load
 * starts so requests measure the cluster, not the generator. */
#define BATCHES_PER_CLIENT 4
/* A last interval shorter than this (the drain after the end) is counted in
 * the totals but left out of the timeline, where its rate would be noise. */
#define MIN_LAST_INTERVAL_NS 250000000LL

static const char *const status_names[SCPS_LOADGEN_CODES] = {
    "OK",          "INVALID_ARGUMENT", "OUT_OF_MEMORY",     "RESOURCE_EXHAUSTED", "NOT_FOUND",
    "ALREADY_EXISTS", "OUT_OF_RANGE",  "LIMIT_EXCEEDED",    "IO_ERROR",           "DATA_LOSS",
    "PARSE_ERROR", "FAILED_PRECONDITION", "UNAVAILABLE",    "DEADLINE_EXCEEDED",  "BAD_STATE",
    "INTERNAL",    "UNAUTHENTICATED",  "PERMISSION_DENIED", "CANCELLED"};

const char *scps__loadgen_status_name(int code) {
  return code <= 0 && -code < SCPS_LOADGEN_CODES ? status_names[-code] : "UNKNOWN";
}

static const char *const mode_names[] = {"lookup", "train", "mixed", "topk"};

int scps__loadgen_mode_from_name(const char *name, scps_loadgen_mode *out) {
  for (int m = 0; m < 4; m++)
    if (!strcmp(name, mode_names[m])) {
      *out = (scps_loadgen_mode)m;
      return 0;
    }
  return SCPS_EINVAL;
}

const char *scps__loadgen_mode_name(scps_loadgen_mode m) { return mode_names[m]; }

static struct timespec to_ts(int64_t ns) {
  struct timespec t = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
  return t;
}

/* What requests of one phase (warm-up or measured) amounted to. */
typedef struct lg_stats {
  int64_t ok, samples, ids;
  double recall_sum;     /* topk: sampled queries' recall, summed */
  int64_t recall_queries; /* topk: queries sampled */
  int64_t errors[SCPS_LOADGEN_CODES];
  scps_hist hist;     /* latency of OK requests */
  scps_hist err_hist; /* latency of failed requests */
  scps_hist lag;      /* send time - due time, every request */
} lg_stats;

static void stats_add(lg_stats *dst, const lg_stats *src) {
  dst->ok += src->ok;
  dst->samples += src->samples;
  dst->ids += src->ids;
  dst->recall_sum += src->recall_sum;
  dst->recall_queries += src->recall_queries;
  for (int k = 0; k < SCPS_LOADGEN_CODES; k++) dst->errors[k] += src->errors[k];
  scps__hist_merge(&dst->hist, &src->hist);
  scps__hist_merge(&dst->err_hist, &src->err_hist);
  scps__hist_merge(&dst->lag, &src->lag);
}

static int64_t stats_errors(const lg_stats *s) {
  int64_t n = 0;
  for (int k = 0; k < SCPS_LOADGEN_CODES; k++) n += s->errors[k];
  return n;
}

typedef struct lg lg;

typedef struct lg_client {
  lg *g;
  int index;
  scps_client *c;
  scps_batch *b[BATCHES_PER_CLIENT];
  int64_t ids[BATCHES_PER_CLIENT];
  float **acts, **grads;
  /* topk mode: each batch's queries (queries_per_call x dim), the answer
   * and the exact answer of a recall sample (queries_per_call x k). */
  float *queries[BATCHES_PER_CLIENT];
  int64_t *answer_ids, *exact_ids, *sorted;
  float *scores, *exact_scores;
  scps_topk_info info;
  int64_t calls; /* topk: measured calls answered OK */
  uint64_t rng;
  int64_t step;
  pthread_mutex_t mu; /* guards warm and meas, which the ticker drains */
  lg_stats warm, meas;
} lg_client;

struct lg {
  const scps_loadgen_options *o;
  int n_features;
  scps_jsonw expected; /* the workload's tables and features, as each client expects them */
  lg_client *clients;
  int64_t t0, warm_end;
  atomic_int_fast64_t end; /* no request is sent from then on; INT64_MAX with a request count */
  atomic_int_fast64_t tickets;
  atomic_int_fast64_t not_sent; /* open loop: measured requests due before end, never sent */
  pthread_mutex_t mu;
  pthread_cond_t cv; /* a client finished */
  int running;
  int64_t last_done;
  /* Every client's traffic counters summed when the first measured request
   * was about to be sent (guarded by mu; based says they were taken). */
  atomic_bool based;
  uint64_t base_sent, base_recv;
  /* The first message of each error code (guarded by mu). */
  char first_error[SCPS_LOADGEN_CODES][SCPS_ERROR_MSG_MAX];
};

/* ------------------------------------------------------------- clients */

static void client_free(lg_client *cl) {
  for (int k = 0; k < BATCHES_PER_CLIENT; k++) scps_batch_destroy(cl->b[k]);
  if (cl->c) scps_client_destroy(cl->c);
  for (int f = 0; f < cl->g->n_features; f++) {
    if (cl->acts) free(cl->acts[f]);
    if (cl->grads) free(cl->grads[f]);
  }
  free(cl->acts);
  free(cl->grads);
  for (int k = 0; k < BATCHES_PER_CLIENT; k++) free(cl->queries[k]);
  free(cl->answer_ids);
  free(cl->exact_ids);
  free(cl->sorted);
  free(cl->scores);
  free(cl->exact_scores);
  pthread_mutex_destroy(&cl->mu);
}

static double next_unit(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return (double)(*s >> 11) * 0x1p-53;
}

/* A standard Gaussian (Box-Muller) from the client's generator. */
static float next_gaussian(uint64_t *s) {
  double u = next_unit(s), v = next_unit(s);
  return (float)(sqrt(-2.0 * log(1.0 - u)) * cos(2.0 * M_PI * v));
}

/* topk mode: the client's queries and answers, and one exact call before
 * the load, which fails the setup (not every request) for options the
 * table rules out and gives what libscps reports of the call. */
static int topk_init(lg_client *cl, scps_error *err) {
  const scps_loadgen_options *o = cl->g->o;
  const scps_layout *l = scps__client_layout(cl->c);
  const int t = scps__find_table(l->table_specs, l->n_tables, o->table);
  if (t < 0) return scps_error_set(err, SCPS_ENOENT, "--table '%s': the servers serve no such table", o->table);
  const size_t m = (size_t)o->queries_per_call, dim = (size_t)l->table_specs[t].embedding_dim,
               answer = m * (size_t)o->topk.k;
  for (int k = 0; k < BATCHES_PER_CLIENT; k++) {
    if (!(cl->queries[k] = malloc(sizeof(float) * m * dim))) return scps_error_set(err, SCPS_ENOMEM, "out of memory");
    for (size_t v = 0; v < m * dim; v++) cl->queries[k][v] = next_gaussian(&cl->rng);
  }
  cl->answer_ids = malloc(sizeof *cl->answer_ids * answer);
  cl->exact_ids = malloc(sizeof *cl->exact_ids * answer);
  cl->sorted = malloc(sizeof *cl->sorted * (size_t)o->topk.k);
  cl->scores = malloc(sizeof *cl->scores * answer);
  cl->exact_scores = malloc(sizeof *cl->exact_scores * answer);
  if (!cl->answer_ids || !cl->exact_ids || !cl->sorted || !cl->scores || !cl->exact_scores)
    return scps_error_set(err, SCPS_ENOMEM, "out of memory");
  return scps_client_topk(cl->c, o->table, cl->queries[0], m, &o->topk, cl->answer_ids, cl->scores, &cl->info,
                          o->connect_timeout_ms, err);
}

static int cmp_id(const void *a, const void *b) {
  const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* topk mode: batch k's queries sent again with recall 1; the sum over
 * its queries of |ids ∩ exact ids| / k (ids -1, places a query's NaN
 * scores left empty, never count) into *sum. */
static int topk_recall(lg_client *cl, int k, double *sum, scps_error *err) {
  const scps_loadgen_options *o = cl->g->o;
  scps_topk_options exact = o->topk;
  exact.recall_target = 1.0;
  int rc = scps_client_topk(cl->c, o->table, cl->queries[k], (size_t)o->queries_per_call, &exact, cl->exact_ids,
                            cl->exact_scores, NULL, o->deadline_ms, err);
  if (rc) return rc;
  const size_t K = (size_t)o->topk.k;
  *sum = 0;
  for (size_t i = 0; i < (size_t)o->queries_per_call; i++) {
    memcpy(cl->sorted, cl->exact_ids + i * K, sizeof *cl->sorted * K);
    qsort(cl->sorted, K, sizeof *cl->sorted, cmp_id);
    size_t found = 0;
    for (size_t j = 0; j < K; j++) {
      const int64_t id = cl->answer_ids[i * K + j];
      found += id >= 0 && bsearch(&id, cl->sorted, K, sizeof *cl->sorted, cmp_id);
    }
    *sum += (double)found / (double)K;
  }
  return 0;
}

/* Connects client i and preprocesses its batches (its own generator seed,
 * so clients do not all send the same ids). */
static int client_init(lg *g, int i, scps_error *err) {
  const scps_loadgen_options *o = g->o;
  const scps_workload *w = o->workload;
  lg_client *cl = &g->clients[i];
  cl->g = g;
  cl->index = i;
  cl->rng = 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1);
  pthread_mutex_init(&cl->mu, NULL);
  scps_client_options co;
  scps_client_options_init(&co);
  co.servers = o->servers;
  co.n_servers = o->n_servers;
  co.expected_config = w ? g->expected.buf : NULL;
  co.policy = SCPS_LIMIT_ERROR;
  co.connect_timeout_ms = o->connect_timeout_ms;
  if (o->wire_format) scps_client_options_set_wire_format(&co, o->wire_format, NULL);
  co.answer = o->answer;
  co.gradients = o->gradients;
  co.shared_memory = o->shared_memory;
  co.ignore_checkpoint_due = true;
  co.own_connections = true;
  co.cq_threads = o->cq_threads;
  co.security = o->security;
  int rc = scps_client_create(&co, &cl->c, err);
  if (rc) return rc;
  if (o->mode == SCPS_LOADGEN_TOPK) return topk_init(cl, err);
  /* Training resumes after the step the servers hold (they agree), as a
   * trainer does. */
  cl->step = scps_client_step(cl->c) + 1;
  /* The limits in force are the servers' (libscps adopts them at connect),
   * which enforce them: batches over them fail here, before the load,
   * rather than as refused requests. The benchmark workloads keep the
   * declared defaults, which their batches exceed: their servers run with
   * --partition-limits. */
  cl->acts = calloc((size_t)w->n_features, sizeof *cl->acts);
  cl->grads = calloc((size_t)w->n_features, sizeof *cl->grads);
  if (!rc && (!cl->acts || !cl->grads)) rc = scps_error_set(err, SCPS_ENOMEM, "out of memory");
  for (int f = 0; !rc && f < w->n_features; f++) {
    size_t n = (size_t)w->batch_size * (size_t)scps_client_feature_width(cl->c, f);
    cl->acts[f] = malloc(sizeof(float) * n);
    cl->grads[f] = malloc(sizeof(float) * n);
    if (!cl->acts[f] || !cl->grads[f]) {
      rc = scps_error_set(err, SCPS_ENOMEM, "out of memory");
      break;
    }
    /* Small, so a long run does not push the embeddings anywhere extreme. */
    for (size_t j = 0; j < n; j++) cl->grads[f][j] = 1e-4f * (float)((int)(j % 7) - 3);
  }
  scps_workload_gen *gen = NULL;
  if (!rc) rc = scps__workload_gen_create(w, (uint64_t)i + 1, &gen, err);
  for (int k = 0; !rc && k < BATCHES_PER_CLIENT; k++) {
    rc = scps_batch_create(cl->c, &cl->b[k], err);
    if (rc) break;
    scps__workload_gen_next(gen);
    const scps_feature_input *in = scps__workload_gen_inputs(gen);
    for (int f = 0; f < w->n_features; f++) cl->ids[k] += (int64_t)in[f].n_ids;
    rc = scps_client_prepare(cl->c, in, cl->b[k], err);
  }
  scps__workload_gen_destroy(gen);
  return rc;
}

/* One request: a lookup and, when training, the push of its gradients, both
 * within deadline_ms of the send. */
static int request(lg_client *cl, int k, bool train, int64_t sent, scps_error *err) {
  const scps_loadgen_options *o = cl->g->o;
  if (o->mode == SCPS_LOADGEN_TOPK)
    return scps_client_topk(cl->c, o->table, cl->queries[k], (size_t)o->queries_per_call, &o->topk,
                            cl->answer_ids, cl->scores, NULL, o->deadline_ms, err);
  int rc = scps_client_lookup(cl->c, cl->b[k], cl->acts, o->deadline_ms, err);
  if (rc || !train) return rc;
  int64_t left = o->deadline_ms - (scps__clock_ns() - sent) / 1000000;
  if (cl->step >= SCPS_STEP_LIMIT)
    return scps_error_set(err, SCPS_EINVAL, "client %d: step %lld reached 2^53, the steps servers take", cl->index,
                          (long long)cl->step);
  return scps_client_apply_gradients(cl->c, cl->b[k], (const float *const *)cl->grads, cl->step++, -1.0,
                                     left > 1 ? left : 1, err);
}

static void record(lg_client *cl, int k, bool measured, int rc, int64_t latency, int64_t lag,
                   const scps_error *err) {
  lg *g = cl->g;
  pthread_mutex_lock(&cl->mu);
  lg_stats *s = measured ? &cl->meas : &cl->warm;
  scps__hist_record(&s->lag, (uint64_t)(lag > 0 ? lag : 0));
  if (!rc) {
    s->ok++;
    s->samples += g->o->mode == SCPS_LOADGEN_TOPK ? g->o->queries_per_call : g->o->workload->batch_size;
    s->ids += cl->ids[k];
    scps__hist_record(&s->hist, (uint64_t)latency);
  } else {
    s->errors[rc <= 0 && -rc < SCPS_LOADGEN_CODES ? -rc : -SCPS_EIO]++;
    scps__hist_record(&s->err_hist, (uint64_t)(latency - lag)); /* from the send, as the deadline counts */
  }
  pthread_mutex_unlock(&cl->mu);
  if (rc) {
    int code = rc <= 0 && -rc < SCPS_LOADGEN_CODES ? -rc : -SCPS_EIO;
    pthread_mutex_lock(&g->mu);
    if (!g->first_error[code][0]) snprintf(g->first_error[code], SCPS_ERROR_MSG_MAX, "%s", err->msg);
    pthread_mutex_unlock(&g->mu);
  }
}

static void sleep_until(int64_t t) {
  struct timespec ts = to_ts(t);
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
  }
}

static void traffic(const lg *g, uint64_t *sent, uint64_t *recv) {
  *sent = *recv = 0;
  for (int i = 0; i < g->o->concurrency; i++) {
    uint64_t s, r;
    scps_client_traffic(g->clients[i].c, &s, &r);
    *sent += s;
    *recv += r;
  }
}

/* The traffic base of the measured part, taken by the first measured
 * request before it is sent: the ticker may notice the end of the warm-up
 * only after a short --requests run has finished. */
static void mark_base(lg *g) {
  pthread_mutex_lock(&g->mu);
  if (!atomic_load(&g->based)) {
    traffic(g, &g->base_sent, &g->base_recv);
    atomic_store(&g->based, true);
  }
  pthread_mutex_unlock(&g->mu);
}

/* A client's loop. Closed loop: each request starts when the previous one
 * ends. Open loop: request j of client i is due at t0 + (j * C + i) / rate;
 * one still due while the previous is out is sent as soon as that returns,
 * and its latency counts from when it was due, so a slow cluster shows as
 * latency instead of silently lowering the rate (coordinated omission). */
static void *client_main(void *arg) {
  lg_client *cl = arg;
  lg *g = cl->g;
  const scps_loadgen_options *o = g->o;
  double p_train = o->mode == SCPS_LOADGEN_TRAIN ? 1.0 : o->mode == SCPS_LOADGEN_MIXED ? o->train_fraction : 0.0;
  scps_error err;
  for (int64_t j = 0;; j++) {
    int64_t due;
    if (o->rate > 0) {
      due = g->t0 + (int64_t)((double)(j * o->concurrency + cl->index) * 1e9 / o->rate);
      int64_t end = atomic_load(&g->end);
      if (due >= end) break;
      /* Behind a slow cluster the backlog would keep the run going long past
       * its --duration: what is still due at the end is counted instead. */
      if (scps__clock_ns() >= end) {
        int64_t left = 0;
        for (int64_t k = j;; k++) {
          int64_t d = g->t0 + (int64_t)((double)(k * o->concurrency + cl->index) * 1e9 / o->rate);
          if (d >= end) break;
          left += d >= g->warm_end;
        }
        atomic_fetch_add(&g->not_sent, left);
        break;
      }
      sleep_until(due);
    } else {
      due = scps__clock_ns();
      if (due >= atomic_load(&g->end)) break;
    }
    bool measured = due >= g->warm_end;
    if (measured && o->requests > 0 && atomic_fetch_add(&g->tickets, 1) >= o->requests) break;
    if (measured && !atomic_load(&g->based)) mark_base(g);
    bool train = p_train > 0 && next_unit(&cl->rng) < p_train;
    int k = (int)(j % BATCHES_PER_CLIENT);
    scps_error_clear(&err);
    int64_t sent = scps__clock_ns();
    int rc = request(cl, k, train, sent, &err);
    record(cl, k, measured, rc, scps__clock_ns() - due, sent - due, &err);
    /* A recall sample, after the measured call and outside its latency
     * (closed loop, it delays the client's next call; open loop, it shows
     * as that call's send lag). A sample that fails is left out. */
    double sum;
    if (!rc && measured && o->mode == SCPS_LOADGEN_TOPK && o->recall_sample > 0 &&
        cl->calls++ % o->recall_sample == 0 && !topk_recall(cl, k, &sum, &err)) {
      pthread_mutex_lock(&cl->mu);
      cl->meas.recall_sum += sum;
      cl->meas.recall_queries += o->queries_per_call;
      pthread_mutex_unlock(&cl->mu);
    }
  }
  pthread_mutex_lock(&g->mu);
  if (--g->running == 0) g->last_done = scps__clock_ns();
  pthread_cond_broadcast(&g->cv);
  pthread_mutex_unlock(&g->mu);
  return NULL;
}

/* -------------------------------------------------------------- ticker */

typedef struct ticker {
  int64_t prev;          /* end of the previous interval */
  uint64_t sent, recv;   /* traffic at prev */
  bool measuring;
  lg_stats interval, warm, total;
  int cap;
} ticker;


/* Drains every client's counts of the interval ending at t into tk, adds
 * its second to the timeline and prints the progress line. */
static int tick(lg *g, ticker *tk, int64_t t, bool last, scps_loadgen_result *res, scps_error *err) {
  const scps_loadgen_options *o = g->o;
  memset(&tk->interval, 0, sizeof tk->interval);
  memset(&tk->warm, 0, sizeof tk->warm);
  for (int i = 0; i < o->concurrency; i++) {
    lg_client *cl = &g->clients[i];
    pthread_mutex_lock(&cl->mu);
    stats_add(&tk->interval, &cl->meas);
    stats_add(&tk->warm, &cl->warm);
    memset(&cl->meas, 0, sizeof cl->meas);
    memset(&cl->warm, 0, sizeof cl->warm);
    pthread_mutex_unlock(&cl->mu);
  }
  stats_add(&tk->total, &tk->interval);
  uint64_t sent, recv;
  traffic(g, &sent, &recv);
  double secs = (double)(t - tk->prev) * 1e-9;
  bool was_measuring = tk->measuring;
  if (!tk->measuring && t >= g->warm_end) tk->measuring = true;
  bool shown = secs > 0 && (!last || t - tk->prev >= MIN_LAST_INTERVAL_NS);
  if (was_measuring && shown) {
    if (res->n_timeline == tk->cap) {
      int cap = tk->cap ? 2 * tk->cap : 64;
      scps_loadgen_second *p = realloc(res->timeline, sizeof *p * (size_t)cap);
      if (!p) return scps_error_set(err, SCPS_ENOMEM, "out of memory");
      res->timeline = p;
      tk->cap = cap;
    }
    res->timeline[res->n_timeline++] = (scps_loadgen_second){
        .t = (double)(t - g->warm_end) * 1e-9,
        .requests_per_s = (double)(tk->interval.ok + stats_errors(&tk->interval)) / secs,
        .p50_ms = (double)scps__hist_quantile(&tk->interval.hist, 0.5) * 1e-6,
        .p99_ms = (double)scps__hist_quantile(&tk->interval.hist, 0.99) * 1e-6,
        .ok = tk->interval.ok,
        .errors = stats_errors(&tk->interval)};
  }
  if (o->progress && shown) {
    stats_add(&tk->warm, &tk->interval);
    fprintf(stderr,
            "scps-loadgen: %6.1fs%s %9.0f req/s  p50 %8.3f ms  p99 %8.3f ms  %lld errors  sent %8.2f MB/s  "
            "received %8.2f MB/s\n",
            (double)(t - g->t0) * 1e-9, was_measuring ? "          " : " (warm-up)",
            (double)(tk->warm.ok + stats_errors(&tk->warm)) / secs,
            (double)scps__hist_quantile(&tk->warm.hist, 0.5) * 1e-6,
            (double)scps__hist_quantile(&tk->warm.hist, 0.99) * 1e-6, (long long)stats_errors(&tk->warm),
            (double)(sent - tk->sent) / secs * 1e-6, (double)(recv - tk->recv) / secs * 1e-6);
  }
  tk->prev = t;
  tk->sent = sent;
  tk->recv = recv;
  return 0;
}

/* Ticks every second (and at the end of the warm-up) until every client has
 * finished, then once more for what the last ones did. */
/* Lock-free, so that a signal handler may set it. */
static atomic_bool stop_requested;

void scps__loadgen_stop(void) { atomic_store(&stop_requested, true); }

/* A stop asked for: the run ends now, or with the warm-up if that is not
 * over (so that the measured span never starts after its end). */
static void end_if_stopped(lg *g) {
  if (!atomic_load(&stop_requested)) return;
  int64_t now = scps__clock_ns(), at = now > g->warm_end ? now : g->warm_end;
  if (at < atomic_load(&g->end)) atomic_store(&g->end, at);
}

static int run_ticker(lg *g, ticker *tk, scps_loadgen_result *res, scps_error *err) {
  int64_t next = g->t0 + 1000000000;
  if (g->warm_end > g->t0 && g->warm_end < next) next = g->warm_end;
  int rc = 0;
  pthread_mutex_lock(&g->mu);
  while (g->running > 0) {
    struct timespec ts = to_ts(next);
    pthread_cond_timedwait(&g->cv, &g->mu, &ts);
    end_if_stopped(g);
    if (g->running == 0 || scps__clock_ns() < next) continue;
    pthread_mutex_unlock(&g->mu);
    if (!rc) rc = tick(g, tk, next, false, res, err);
    int64_t after = next + 1000000000;
    if (next < g->warm_end && g->warm_end < after) after = g->warm_end;
    next = after;
    pthread_mutex_lock(&g->mu);
  }
  int64_t done = g->last_done;
  pthread_mutex_unlock(&g->mu);
  if (!rc) rc = tick(g, tk, done, true, res, err);
  return rc;
}

/* ----------------------------------------------------------------- run */

int scps__loadgen_run(const scps_loadgen_options *o, scps_loadgen_result **out, scps_error *err) {
  *out = NULL;
  lg *g = calloc(1, sizeof *g);
  scps_loadgen_result *res = calloc(1, sizeof *res);
  ticker *tk = calloc(1, sizeof *tk);
  lg_client *clients = calloc((size_t)o->concurrency, sizeof *clients);
  pthread_t *threads = calloc((size_t)o->concurrency, sizeof *threads);
  if (!g || !res || !tk || !clients || !threads) {
    free(g);
    free(res);
    free(tk);
    free(clients);
    free(threads);
    return scps_error_set(err, SCPS_ENOMEM, "out of memory");
  }
  g->o = o;
  g->n_features = o->workload ? o->workload->n_features : 0;
  g->clients = clients;
  pthread_mutex_init(&g->mu, NULL);
  atomic_init(&g->based, false);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&g->cv, &ca);
  pthread_condattr_destroy(&ca);

  int rc = 0, inited = 0, started = 0;
  scps__jsonw_init(&g->expected);
  if (o->workload) {
    rc = scps__workload_write_specs(o->workload->tables, o->workload->n_tables, o->workload->features,
                                   o->workload->n_features, &g->expected, err);
    if (!rc) rc = scps__jsonw_finish(&g->expected, "the expected declaration", err);
  }
  for (; !rc && inited < o->concurrency; inited++) {
    scps_error e;
    scps_error_clear(&e);
    rc = client_init(g, inited, &e);
    if (rc) {
      scps_error_set(err, rc, "client %d: %s%s", inited, e.msg,
                     rc == SCPS_ELIMIT ? " (the servers' limits in force, which they enforce: raise them with "
                                         "scps-server --partition-limits, or declare higher ones)"
                                       : "");
      inited++;
      break;
    }
  }
  if (!rc) {
    g->t0 = scps__clock_ns();
    g->warm_end = g->t0 + (int64_t)(o->warmup_s * 1e9);
    atomic_store(&g->end, o->requests > 0 ? INT64_MAX : g->warm_end + (int64_t)(o->duration_s * 1e9));
    tk->prev = g->t0;
    traffic(g, &tk->sent, &tk->recv);
    tk->measuring = g->warm_end <= g->t0;
    g->running = o->concurrency;
    for (; started < o->concurrency; started++)
      if (pthread_create(&threads[started], NULL, client_main, &clients[started])) break;
    if (started < o->concurrency) {
      /* The clients already running stop at once; none is measured. */
      atomic_store(&g->end, g->t0);
      pthread_mutex_lock(&g->mu);
      g->running -= o->concurrency - started;
      pthread_mutex_unlock(&g->mu);
      rc = scps_error_set(err, SCPS_ENOMEM, "cannot start client thread %d of %d", started, o->concurrency);
    }
  }
  if (started) {
    int trc = run_ticker(g, tk, res, err);
    if (!rc) rc = trc;
  }
  for (int i = 0; i < started; i++) pthread_join(threads[i], NULL);
  if (!rc) {
    uint64_t sent, recv;
    traffic(g, &sent, &recv);
    res->bytes_sent = atomic_load(&g->based) ? sent - g->base_sent : 0;
    res->bytes_received = atomic_load(&g->based) ? recv - g->base_recv : 0;
    /* A --duration run lasts its duration even when its last request
     * finished early (an open loop at a low rate sends its last one
     * 1/rate before the end): rates over the shorter span would be high. */
    int64_t stop = g->last_done, end = atomic_load(&g->end);
    if (g->o->requests == 0 && end > stop) stop = end;
    res->duration_s = (double)(stop - g->warm_end) * 1e-9;
    res->ok = tk->total.ok;
    res->samples = tk->total.samples;
    res->ids = tk->total.ids;
    memcpy(res->errors, tk->total.errors, sizeof res->errors);
    memcpy(res->first_error, g->first_error, sizeof res->first_error);
    res->requests = res->ok + stats_errors(&tk->total);
    res->not_sent = atomic_load(&g->not_sent);
    res->latency = tk->total.hist;
    res->error_latency = tk->total.err_hist;
    res->send_lag = tk->total.lag;
    res->recall_sum = tk->total.recall_sum;
    res->recall_queries = tk->total.recall_queries;
    res->topk_info = clients[0].info;
  }
  for (int i = 0; i < inited; i++) client_free(&clients[i]);
  pthread_cond_destroy(&g->cv);
  scps__jsonw_free(&g->expected);
  pthread_mutex_destroy(&g->mu);
  free(threads);
  free(clients);
  free(tk);
  free(g);
  if (rc) {
    scps__loadgen_result_destroy(res);
    return rc;
  }
  *out = res;
  return 0;
}

void scps__loadgen_result_destroy(scps_loadgen_result *r) {
  if (!r) return;
  free(r->timeline);
  free(r);
}
