/* bench_engine: in-process engine throughput on a workload file: lookup
 * (each thread gathers its slice of the samples) and the fused update.
 *
 *   scps-bench-engine --workload FILE [--threads T] [--batches K] [--distinct D]
 *                     [--topology PxS] [--seed N] [--anchor-ids-per-s X]
 *   scps-bench-engine --workload FILE --anchor-args
 *
 * K batches are generated and preprocessed before anything is timed. Each
 * thread owns whole SparseCores (global SparseCore g belongs to thread g % T),
 * so every shard has a single writer and no phase takes a lock. Per batch:
 *   lookup = write the thread's slice of the samples of one [samples x dim]
 *            buffer per stack from every SparseCore's partition, process 0's
 *            with scps__engine_gather (as a server's SparseCore workers do
 *            together) and the other processes' added to it, barrier;
 *   update = every owned SparseCore aggregates its gradients per touched row
 *            and applies the stack's optimizer, barrier.
 * --distinct D generates D batches and times K by cycling through them (the
 * first D of the seed: scps-bench-client replays 4 of seed 1).
 * Figures are medians over the K timed batches; ids/s counts the ids of the
 * batch before dedup, as the gather-limit anchor does; cpu_ms_median is the
 * CPU time of a phase summed over the threads (each thread's clock around
 * its own part, barriers left out): the gather's share of the floor
 * tests/bench/cpu.sh sets networked lookups against. One JSON line per
 * phase on stdout. --anchor-args prints the gather_limit.c options that
 * match the workload instead. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scps_clock.h"
#include "scps_engine.h"
#include "scps_prep.h"
#include "scps_workload.h"
#include "scps_bench.h"

#define MAX_THREADS 64
/* Batches are kept in memory (dlrm8: about 1.5 MiB of partitions each). */
#define MAX_BATCHES 1000

typedef struct options {
  const char *workload;
  int threads;
  int batches;
  int distinct; /* 0: every timed batch its own */
  int32_t processes, sc_per_process; /* 0: 1 x threads */
  uint64_t seed;
  double anchor_ids_per_s; /* 0: no ratios */
  bool anchor_args;
} options;

/* One stack's partition on one global SparseCore, copied out of the prep. */
typedef struct part {
  scps_coo coo;
  uint32_t *rows, *samples;
  float *gains;
} part;

typedef struct batch {
  part *parts; /* [n_stacks * num_sc], stack-major */
  int64_t ids;     /* before dedup */
  int64_t entries; /* after merging repeated (sample, id) pairs */
  int64_t rows;    /* distinct rows touched, summed over SparseCores */
} batch;

typedef struct bench bench;

typedef struct worker {
  bench *b;
  int index;
  pthread_t thread;
  void *gather_scratch; /* scps__engine_gather's, for the largest of its slices */
} worker;

struct bench {
  options opt;
  scps_workload *w;
  scps_layout *layout;
  scps_engine **engines; /* [processes] */
  int32_t num_sc, sc_per_process;
  int n_stacks;
  int n_batches; /* generated */
  int n_timed;
  batch *batches;
  float **grads;  /* [n_stacks], each [total_sample_count x dim] */
  float **acts;   /* [n_stacks], each [total_sample_count x dim] */
  worker *workers;
  pthread_barrier_t barrier;
  /* Start gate: workers wait here until every thread exists, so a failed
   * pthread_create never leaves the others stuck in the barrier. */
  pthread_mutex_t gate_mu;
  pthread_cond_t gate_cv;
  int gate; /* 0 closed, 1 run, -1 quit */
  /* Written by worker 0 only, read after the join. */
  double *lookup_ms, *update_ms; /* [n_timed] */
  /* Each worker's own, [threads * n_timed]. */
  double *lookup_cpu_ms, *update_cpu_ms;
};

static void usage(FILE *f) {
  fprintf(f,
          "usage: scps-bench-engine --workload FILE [--threads T] [--batches K] [--distinct D]\n"
          "                         [--topology PxS] [--seed N] [--anchor-ids-per-s X]\n"
          "       scps-bench-engine --workload FILE --anchor-args\n"
          "defaults: 2 threads, 20 batches each generated (--distinct D: D generated, K timed\n"
          "cycling through them), topology 1xT, seed 1\n");
}

static int parse_long(const char *flag, const char *s, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) {
    fprintf(stderr, "scps-bench-engine: %s '%s' is not an integer in [%ld, %ld]\n", flag, s, lo,
            hi);
    return -1;
  }
  *out = v;
  return 0;
}

/* 0: run; 1: help was printed; -1: bad arguments (message printed). */
static int parse_args(int argc, char **argv, options *o) {
  memset(o, 0, sizeof *o);
  o->threads = 2;
  o->batches = 20;
  o->seed = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    long v;
    if (!strcmp(a, "--anchor-args")) {
      o->anchor_args = true;
      continue;
    }
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return 1;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "scps-bench-engine: %s needs a value\n", a);
      return -1;
    }
    const char *val = argv[++i];
    if (!strcmp(a, "--workload")) {
      o->workload = val;
    } else if (!strcmp(a, "--threads")) {
      if (parse_long(a, val, 1, MAX_THREADS, &v)) return -1;
      o->threads = (int)v;
    } else if (!strcmp(a, "--batches")) {
      if (parse_long(a, val, 1, MAX_BATCHES, &v)) return -1;
      o->batches = (int)v;
    } else if (!strcmp(a, "--distinct")) {
      if (parse_long(a, val, 1, MAX_BATCHES, &v)) return -1;
      o->distinct = (int)v;
    } else if (!strcmp(a, "--seed")) {
      if (parse_long(a, val, 0, LONG_MAX, &v)) return -1;
      o->seed = (uint64_t)v;
    } else if (!strcmp(a, "--topology")) {
      int p, s, n = 0;
      if (sscanf(val, "%dx%d%n", &p, &s, &n) != 2 || val[n] || p < 1 || s < 1) {
        fprintf(stderr, "scps-bench-engine: --topology '%s' is not PxS (e.g. 1x2)\n", val);
        return -1;
      }
      o->processes = p;
      o->sc_per_process = s;
    } else if (!strcmp(a, "--anchor-ids-per-s")) {
      char *end;
      o->anchor_ids_per_s = strtod(val, &end);
      if (end == val || *end || !(o->anchor_ids_per_s > 0)) {
        fprintf(stderr, "scps-bench-engine: --anchor-ids-per-s '%s' is not a positive number\n",
                val);
        return -1;
      }
    } else {
      fprintf(stderr, "scps-bench-engine: unknown option %s\n", a);
      usage(stderr);
      return -1;
    }
  }
  if (!o->workload) {
    fprintf(stderr, "scps-bench-engine: --workload FILE is required\n");
    usage(stderr);
    return -1;
  }
  if (!o->processes) {
    o->processes = 1;
    o->sc_per_process = o->threads;
  }
  return 0;
}

/* The loader has checked that every feature names a table. */
static const scps_table_spec *table_of(const scps_workload *w, int f) {
  return &w->tables[scps__find_table(w->tables, w->n_tables, w->features[f].table)];
}

/* Options for shared/anchors/gather_limit.c: one anchor table per feature,
 * ids = batch x valency per table. Workloads whose tables differ get the
 * means (rows, padded dim, valency) and are flagged as approximate. */
static void print_anchor_args(const scps_workload *w) {
  int n = w->n_features;
  if (n < 1) return;
  double rows = 0, dim = 0, valency = 0;
  bool uniform = true;
  const scps_table_spec *t0 = table_of(w, 0);
  for (int f = 0; f < n; f++) {
    const scps_table_spec *t = table_of(w, f);
    const scps_feature_draw *d = &w->draws[f];
    rows += (double)t->vocabulary_size;
    dim += (double)((t->embedding_dim + 7) / 8 * 8);
    valency += 0.5 * (d->valency_min + d->valency_max);
    if (t->vocabulary_size != t0->vocabulary_size || t->embedding_dim != t0->embedding_dim ||
        d->valency_min != d->valency_max || d->valency_max != w->draws[0].valency_max)
      uniform = false;
  }
  long long v = llround(valency / n);
  if (v < 1) v = 1;
  printf("--rows %lld --dim %lld --tables %d --ids %lld --valency %lld --zipf %g%s\n",
         llround(rows / n), llround(dim / n), n, (long long)w->batch_size * v, v,
         w->distribution == SCPS_IDS_ZIPF ? w->exponent : 0.0,
         uniform ? "" : " # approximate: the workload's features differ");
}

static void batch_free(batch *bt, int n_parts) {
  if (!bt->parts) return;
  for (int i = 0; i < n_parts; i++) {
    free(bt->parts[i].rows);
    free(bt->parts[i].samples);
    free(bt->parts[i].gains);
  }
  free(bt->parts);
  bt->parts = NULL;
}

/* Copies the prep's current partitions into bt and checks each against the
 * engine that will read it. */
static int batch_capture(bench *b, const scps_prep *prep, batch *bt, scps_error *err) {
  int n_parts = b->n_stacks * b->num_sc;
  bt->parts = calloc((size_t)n_parts, sizeof *bt->parts);
  if (!bt->parts) return scps_error_set(err, SCPS_ENOMEM, "out of memory for a batch");
  for (int s = 0; s < b->n_stacks; s++)
    for (int32_t sc = 0; sc < b->num_sc; sc++) {
      const scps_coo *c = scps__prep_coo(prep, s, sc);
      part *p = &bt->parts[s * b->num_sc + sc];
      size_t n = c->n ? c->n : 1;
      p->rows = malloc(n * sizeof *p->rows);
      p->samples = malloc(n * sizeof *p->samples);
      p->gains = malloc(n * sizeof *p->gains);
      if (!p->rows || !p->samples || !p->gains)
        return scps_error_set(err, SCPS_ENOMEM, "out of memory for a batch's partitions");
      memcpy(p->rows, c->rows, c->n * sizeof *p->rows);
      memcpy(p->samples, c->samples, c->n * sizeof *p->samples);
      memcpy(p->gains, c->gains, c->n * sizeof *p->gains);
      p->coo = (scps_coo){c->n, p->rows, p->samples, p->gains};
      bt->entries += (int64_t)c->n;
      for (size_t i = 0; i < c->n; i++) bt->rows += i == 0 || c->rows[i] != c->rows[i - 1];
      int rc = scps__engine_check_coo(b->engines[sc / b->sc_per_process], s, sc % b->sc_per_process,
                                     &p->coo, err);
      if (rc) return rc;
    }
  return 0;
}

/* Generates and preprocesses every batch; prep ids/s is reported from the
 * median scps__prep_run time. Limits are raised to the ids a stack can get
 * in one batch so that nothing is dropped (the policy is ERROR). */
static int prepare_batches(bench *b, double *prep_ms, scps_error *err) {
  scps_workload_gen *gen = NULL;
  scps_prep *prep = NULL;
  scps_prep_options po = {.policy = SCPS_LIMIT_ERROR, .threads = b->opt.threads};
  int rc = scps__workload_gen_create(b->w, b->opt.seed, &gen, err);
  if (!rc) rc = scps__prep_create(b->layout, &po, &prep, err);
  for (int s = 0; !rc && s < b->n_stacks; s++) {
    const scps_stack_layout *st = &b->layout->stacks[s];
    int64_t most = 0;
    for (int i = 0; i < st->n_features; i++) {
      int f = st->features[i];
      most += (int64_t)b->w->batch_size * b->w->draws[f].valency_max;
    }
    if (most < 1) most = 1;
    if (most > INT32_MAX) most = INT32_MAX;
    rc = scps__prep_set_limits(prep, s, (int32_t)most, (int32_t)most, err);
  }
  for (int k = 0; !rc && k < b->n_batches; k++) {
    scps__workload_gen_next(gen);
    const scps_feature_input *in = scps__workload_gen_inputs(gen);
    batch *bt = &b->batches[k];
    for (int f = 0; f < b->w->n_features; f++) bt->ids += (int64_t)in[f].n_ids;
    double t0 = scps__clock_s();
    rc = scps__prep_run(prep, in, err);
    prep_ms[k] = (scps__clock_s() - t0) * 1e3;
    if (!rc) rc = batch_capture(b, prep, bt, err);
  }
  scps__prep_destroy(prep);
  scps__workload_gen_destroy(gen);
  return rc;
}

static void lookup(worker *wk, const batch *bt) {
  bench *b = wk->b;
  const int T = b->opt.threads;
  for (int s = 0; s < b->n_stacks; s++) {
    const scps_stack_layout *st = &b->layout->stacks[s];
    uint32_t first = (uint32_t)(st->total_sample_count * wk->index / T);
    uint32_t end = (uint32_t)(st->total_sample_count * (wk->index + 1) / T);
    /* Process 0's SparseCores as a server gathers them (each row written
     * once), the other processes' added to it. */
    scps_coo local[SCPS_SC_PER_PROCESS_MAX];
    for (int32_t sc = 0; sc < b->sc_per_process; sc++) local[sc] = bt->parts[s * b->num_sc + sc].coo;
    scps__engine_gather(b->engines[0], s, local, b->sc_per_process, first, end, b->acts[s], wk->gather_scratch);
    for (int32_t sc = b->sc_per_process; sc < b->num_sc; sc++)
      scps__engine_lookup(b->engines[sc / b->sc_per_process], s, sc % b->sc_per_process,
                         &bt->parts[s * b->num_sc + sc].coo, first, end, b->acts[s]);
  }
}

static void update(worker *wk, const batch *bt, int64_t step) {
  bench *b = wk->b;
  scps_step st = {.step = step, .learning_rate = -1.0};
  for (int s = 0; s < b->n_stacks; s++)
    for (int32_t sc = wk->index; sc < b->num_sc; sc += b->opt.threads)
      scps__engine_update(b->engines[sc / b->sc_per_process], s, sc % b->sc_per_process,
                         &bt->parts[s * b->num_sc + sc].coo, b->grads[s], &st);
}

/* Round -1 is a warm-up on batch 0 and is not recorded. */
static void *worker_main(void *arg) {
  worker *wk = arg;
  bench *b = wk->b;
  pthread_mutex_lock(&b->gate_mu);
  while (!b->gate) pthread_cond_wait(&b->gate_cv, &b->gate_mu);
  int go = b->gate > 0;
  pthread_mutex_unlock(&b->gate_mu);
  if (!go) return NULL;
  for (int k = -1; k < b->n_timed; k++) {
    const batch *bt = &b->batches[k < 0 ? 0 : k % b->n_batches];
    pthread_barrier_wait(&b->barrier);
    double t0 = scps__clock_s(), c0 = scps_bench_thread_cpu_s();
    lookup(wk, bt);
    double c1 = scps_bench_thread_cpu_s();
    pthread_barrier_wait(&b->barrier);
    double t1 = scps__clock_s(), c2 = scps_bench_thread_cpu_s();
    update(wk, bt, k + 1);
    double c3 = scps_bench_thread_cpu_s();
    pthread_barrier_wait(&b->barrier);
    double t2 = scps__clock_s();
    if (k >= 0) {
      b->lookup_cpu_ms[wk->index * b->n_timed + k] = (c1 - c0) * 1e3;
      b->update_cpu_ms[wk->index * b->n_timed + k] = (c3 - c2) * 1e3;
    }
    if (wk->index == 0 && k >= 0) {
      b->lookup_ms[k] = (t1 - t0) * 1e3;
      b->update_ms[k] = (t2 - t1) * 1e3;
    }
  }
  return NULL;
}

static float *alloc_floats(size_t n) {
  size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
  return aligned_alloc(64, bytes ? bytes : 64);
}

/* Gradients are fixed small values so repeated updates keep rows finite. */
static int alloc_buffers(bench *b, scps_error *err) {
  b->grads = calloc((size_t)b->n_stacks, sizeof *b->grads);
  b->workers = calloc((size_t)b->opt.threads, sizeof *b->workers);
  if (!b->grads || !b->workers) return scps_error_set(err, SCPS_ENOMEM, "out of memory");
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (int s = 0; s < b->n_stacks; s++) {
    const scps_stack_layout *st = &b->layout->stacks[s];
    size_t n = (size_t)st->total_sample_count * (size_t)st->dim;
    b->grads[s] = alloc_floats(n);
    if (!b->grads[s]) return scps_error_set(err, SCPS_ENOMEM, "out of memory for gradients");
    for (size_t i = 0; i < n; i++) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      b->grads[s][i] = ((float)(x >> 40) * 0x1.0p-24f - 0.5f) * 1e-3f;
    }
  }
  b->acts = calloc((size_t)b->n_stacks, sizeof *b->acts);
  if (!b->acts) return scps_error_set(err, SCPS_ENOMEM, "out of memory");
  for (int s = 0; s < b->n_stacks; s++) {
    const scps_stack_layout *st = &b->layout->stacks[s];
    b->acts[s] = alloc_floats((size_t)st->total_sample_count * (size_t)st->dim);
    if (!b->acts[s]) return scps_error_set(err, SCPS_ENOMEM, "out of memory for activations");
  }
  const int T = b->opt.threads;
  for (int t = 0; t < T; t++) {
    size_t most = 0;
    for (int k = 0; k < b->n_batches; k++)
      for (int s = 0; s < b->n_stacks; s++) {
        const int64_t total = b->layout->stacks[s].total_sample_count;
        size_t entries = 0;
        for (int32_t sc = 0; sc < b->sc_per_process; sc++) entries += b->batches[k].parts[s * b->num_sc + sc].coo.n;
        size_t need = scps__engine_gather_scratch(entries, (uint32_t)(total * t / T), (uint32_t)(total * (t + 1) / T));
        if (need > most) most = need;
      }
    b->workers[t].b = b;
    b->workers[t].index = t;
    b->workers[t].gather_scratch = malloc(most);
    if (!b->workers[t].gather_scratch) return scps_error_set(err, SCPS_ENOMEM, "out of memory for gather scratch");
  }
  return 0;
}

/* The layout does not depend on the SparseCore memory size, so a first
 * layout tells what every SparseCore needs and the second one gets exactly
 * that plus an allocation granule per stack. */
static int make_layout(bench *b, scps_error *err) {
  scps_topology topo = {b->opt.processes, b->opt.sc_per_process, 1};
  scps_layout *probe = NULL;
  int rc = scps__layout_create(b->w->tables, b->w->n_tables, b->w->features, b->w->n_features,
                              &topo, NULL, &probe, err);
  if (rc) return rc;
  int64_t need = 0;
  for (int s = 0; s < probe->n_stacks; s++)
    need += scps__layout_stack_bytes_per_sc(probe, s) + SCPS_HBM_ALIGN;
  scps__layout_destroy(probe);
  topo.sc_memory_bytes = need > 0 ? need : SCPS_HBM_ALIGN;
  return scps__layout_create(b->w->tables, b->w->n_tables, b->w->features, b->w->n_features, &topo,
                            NULL, &b->layout, err);
}

static void bench_free(bench *b) {
  for (int t = 0; b->workers && t < b->opt.threads; t++) free(b->workers[t].gather_scratch);
  free(b->workers);
  for (int s = 0; b->grads && s < b->n_stacks; s++) free(b->grads[s]);
  free(b->grads);
  for (int s = 0; b->acts && s < b->n_stacks; s++) free(b->acts[s]);
  free(b->acts);
  for (int k = 0; b->batches && k < b->n_batches; k++)
    batch_free(&b->batches[k], b->n_stacks * b->num_sc);
  free(b->batches);
  for (int p = 0; b->engines && p < b->opt.processes; p++) scps__engine_destroy(b->engines[p]);
  free(b->engines);
  scps__layout_destroy(b->layout);
  scps__workload_destroy(b->w);
  free(b->lookup_ms);
  free(b->update_ms);
  free(b->lookup_cpu_ms);
  free(b->update_cpu_ms);
}

/* The median over the timed batches of per_thread's sums over the threads
 * (per_thread [threads * n_timed] is overwritten with them). */
static double cpu_median(const bench *b, double *per_thread) {
  for (int k = 0; k < b->n_timed; k++)
    for (int t = 1; t < b->opt.threads; t++) per_thread[k] += per_thread[t * b->n_timed + k];
  return scps_bench_median(per_thread, (size_t)b->n_timed);
}

/* The stacks' optimizers, distinct ones joined by '+' ("adagrad", "sgd+ftrl"). */
static const char *optimizer_names(const scps_layout *l, char names[128]) {
  names[0] = 0;
  for (int s = 0; s < l->n_stacks; s++) {
    const char *name = scps__optimizer_name(l->stacks[s].optimizer.type);
    bool seen = false;
    for (int u = 0; u < s; u++) seen |= l->stacks[u].optimizer.type == l->stacks[s].optimizer.type;
    size_t len = strlen(names);
    if (!seen && len + strlen(name) + 2 < 128)
      snprintf(names + len, 128 - len, "%s%s", len ? "+" : "", name);
  }
  return names;
}

static void print_phase(const bench *b, const char *phase, double ms, double ids_per_batch,
                        const char *extra) {
  double ids_per_s = ids_per_batch / (ms * 1e-3);
  printf("{\"bench\": \"engine\", \"phase\": \"%s\", \"workload\": \"%s\", \"threads\": %d, "
         "\"topology\": \"%dx%d\", \"batches\": %d, \"distinct\": %d, \"ids_per_batch\": %.0f, "
         "\"ms_median\": %.3f, \"ids_per_s\": %.0f",
         phase, b->w->name, b->opt.threads, b->opt.processes, b->opt.sc_per_process, b->n_timed, b->n_batches,
         ids_per_batch, ms, ids_per_s);
  if (b->opt.anchor_ids_per_s > 0)
    printf(", \"ratio_to_anchor\": %.3f", ids_per_s / b->opt.anchor_ids_per_s);
  printf("%s}\n", extra);
}

static int run(bench *b, scps_error *err) {
  const options *o = &b->opt;
  int rc = scps__workload_load(o->workload, &b->w, err);
  if (rc) return rc;
  if (o->anchor_args) {
    print_anchor_args(b->w);
    return 0;
  }
  int64_t num_sc = (int64_t)o->processes * o->sc_per_process;
  if (num_sc < o->threads)
    return scps_error_set(err, SCPS_EINVAL,
                          "topology %dx%d has %lld SparseCores, fewer than the %d threads; each "
                          "thread must own at least one",
                          o->processes, o->sc_per_process, (long long)num_sc, o->threads);
  rc = make_layout(b, err);
  if (rc) return rc;
  b->num_sc = b->layout->num_sc;
  b->sc_per_process = b->layout->topology.sc_per_process;
  b->n_stacks = b->layout->n_stacks;
  b->n_timed = o->batches;
  b->n_batches = o->distinct ? o->distinct : o->batches;

  double t0 = scps__clock_s();
  b->engines = calloc((size_t)o->processes, sizeof *b->engines);
  if (!b->engines) return scps_error_set(err, SCPS_ENOMEM, "out of memory");
  for (int32_t p = 0; p < o->processes && !rc; p++)
    rc = scps__engine_create(b->layout, p, &b->engines[p], err);
  if (rc) return rc;
  double init_s = scps__clock_s() - t0;

  b->batches = calloc((size_t)b->n_batches, sizeof *b->batches);
  b->lookup_ms = calloc((size_t)b->n_timed, sizeof(double));
  b->update_ms = calloc((size_t)b->n_timed, sizeof(double));
  b->lookup_cpu_ms = calloc((size_t)b->n_timed * (size_t)o->threads, sizeof(double));
  b->update_cpu_ms = calloc((size_t)b->n_timed * (size_t)o->threads, sizeof(double));
  double *prep_ms = calloc((size_t)b->n_batches, sizeof(double));
  if (!b->batches || !b->lookup_ms || !b->update_ms || !b->lookup_cpu_ms || !b->update_cpu_ms || !prep_ms) {
    free(prep_ms);
    return scps_error_set(err, SCPS_ENOMEM, "out of memory");
  }
  t0 = scps__clock_s();
  rc = prepare_batches(b, prep_ms, err);
  double prepare_s = scps__clock_s() - t0;
  double prep_median = scps_bench_median(prep_ms, (size_t)b->n_batches);
  free(prep_ms);
  if (!rc) rc = alloc_buffers(b, err);
  if (rc) return rc;

  double ids = 0, entries = 0, rows = 0;
  for (int k = 0; k < b->n_batches; k++) {
    ids += (double)b->batches[k].ids;
    entries += (double)b->batches[k].entries;
    rows += (double)b->batches[k].rows;
  }
  ids /= b->n_batches;
  entries /= b->n_batches;
  rows /= b->n_batches;

  if (pthread_barrier_init(&b->barrier, NULL, (unsigned)o->threads))
    return scps_error_set(err, SCPS_ENOMEM, "cannot create the phase barrier");
  pthread_mutex_init(&b->gate_mu, NULL);
  pthread_cond_init(&b->gate_cv, NULL);
  int started = 1;
  while (started < o->threads &&
         !pthread_create(&b->workers[started].thread, NULL, worker_main, &b->workers[started]))
    started++;
  pthread_mutex_lock(&b->gate_mu);
  b->gate = started == o->threads ? 1 : -1;
  pthread_cond_broadcast(&b->gate_cv);
  pthread_mutex_unlock(&b->gate_mu);
  worker_main(&b->workers[0]);
  for (int t = 1; t < started; t++) pthread_join(b->workers[t].thread, NULL);
  pthread_barrier_destroy(&b->barrier);
  pthread_cond_destroy(&b->gate_cv);
  pthread_mutex_destroy(&b->gate_mu);
  if (started < o->threads)
    return scps_error_set(err, SCPS_ENOMEM, "cannot start worker thread %d of %d", started,
                          o->threads);

  char extra[256], names[128];
  snprintf(extra, sizeof extra, ", \"coo_entries_per_batch\": %.0f, \"stacks\": %d, \"cpu_ms_median\": %.3f",
           entries, b->n_stacks, cpu_median(b, b->lookup_cpu_ms));
  print_phase(b, "lookup", scps_bench_median(b->lookup_ms, (size_t)b->n_timed), ids, extra);
  snprintf(extra, sizeof extra, ", \"optimizer\": \"%s\", \"rows_touched_per_batch\": %.0f, \"cpu_ms_median\": %.3f",
           optimizer_names(b->layout, names), rows, cpu_median(b, b->update_cpu_ms));
  print_phase(b, "update", scps_bench_median(b->update_ms, (size_t)b->n_timed), ids, extra);
  snprintf(extra, sizeof extra, ", \"engine_init_s\": %.2f, \"prepare_all_s\": %.2f", init_s,
           prepare_s);
  print_phase(b, "prep", prep_median, ids, extra);
  return 0;
}

int main(int argc, char **argv) {
  bench b;
  memset(&b, 0, sizeof b);
  int pa = parse_args(argc, argv, &b.opt);
  if (pa) return pa > 0 ? 0 : 2;
  scps_error err;
  scps_error_clear(&err);
  int rc = run(&b, &err);
  if (rc) fprintf(stderr, "scps-bench-engine: %s (%s)\n", err.msg, scps_strerror(rc));
  bench_free(&b);
  return rc ? 1 : 0;
}
