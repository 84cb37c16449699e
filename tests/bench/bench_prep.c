/* bench_prep: input preprocessing throughput (scps__prep_run) on a workload
 * file's batches.
 *
 *   scps-bench-prep [--workload FILE] [--threads T[,T...]] [--batches K]
 *                   [--topology PxS] [--policy error|drop] [--seed N]
 *
 * Defaults: dlrm8.json from the shared folder (SCPS_SHARED_DIR, else
 * ../shared), threads 1, 20 batches, topology 2x4, policy error. With policy
 * error the limits are raised to what a stack can receive in one batch (a
 * tuned FDO run: nothing dropped); with policy drop the layout's limits stay
 * and drops are counted. K batches are generated before anything is timed and
 * every thread count runs the same batches after 3 untimed warm-up runs. One
 * JSON line per thread count on stdout: ids/s (before dedup), batches/s and
 * ms per batch, all from the median batch time, plus the fastest batch. */
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scps_clock.h"
#include "scps_layout.h"
#include "scps_prep.h"
#include "scps_units.h"
#include "scps_workload.h"
#include "scps_bench.h"

#define MAX_RUNS 8
#define WARMUP 3

typedef struct options {
  char workload[4096];
  int threads[MAX_RUNS];
  int n_runs;
  int batches;
  int32_t processes, sc_per_process;
  scps_limit_policy policy;
  uint64_t seed;
} options;

/* A generated batch, copied out of the generator's buffers. */
typedef struct batch {
  scps_feature_input *in;
  int64_t **ids;
  int64_t **offsets;
  float **weights;
  int64_t n_ids;
} batch;

static void usage(FILE *fp) {
  fputs("usage: scps-bench-prep [--workload FILE] [--threads T[,T...]] [--batches K]\n"
        "                       [--topology PxS] [--policy error|drop] [--seed N]\n"
        "Times preprocessing (scps__prep_run) of K generated batches per thread\n"
        "count and prints one JSON line per count. Defaults: workload\n"
        "$SCPS_SHARED_DIR/workloads/dlrm8.json (../shared/... without it),\n"
        "threads 1, batches 20, topology 2x4, policy error, seed 1.\n",
        fp);
}

static bool parse_int(const char *s, long lo, long hi, long *out) {
  scps_error e;
  return scps__parse_long("", s, lo, hi, out, &e) == 0;
}

static int parse_args(int argc, char **argv, options *o) {
  const char *shared = getenv("SCPS_SHARED_DIR");
  snprintf(o->workload, sizeof o->workload, "%s/workloads/dlrm8.json",
           shared && *shared ? shared : "../shared");
  o->threads[0] = 1;
  o->n_runs = 1;
  o->batches = 20;
  o->processes = 2;
  o->sc_per_process = 4;
  o->policy = SCPS_LIMIT_ERROR;
  o->seed = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    long x;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      exit(0);
    }
    if (!v) {
      fprintf(stderr, "scps-bench-prep: %s needs a value\n", a);
      return 2;
    }
    i++;
    if (!strcmp(a, "--workload")) {
      snprintf(o->workload, sizeof o->workload, "%s", v);
    } else if (!strcmp(a, "--threads")) {
      char buf[256];
      snprintf(buf, sizeof buf, "%s", v);
      o->n_runs = 0;
      for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (o->n_runs == MAX_RUNS || !parse_int(tok, 1, SCPS_PREP_MAX_THREADS, &x)) {
          fprintf(stderr, "scps-bench-prep: --threads '%s': up to %d counts in [1, %d]\n", v,
                  MAX_RUNS, SCPS_PREP_MAX_THREADS);
          return 2;
        }
        o->threads[o->n_runs++] = (int)x;
      }
      if (o->n_runs == 0) {
        fprintf(stderr, "scps-bench-prep: --threads '%s' is empty\n", v);
        return 2;
      }
    } else if (!strcmp(a, "--batches")) {
      if (!parse_int(v, 1, 100000, &x)) {
        fprintf(stderr, "scps-bench-prep: --batches '%s' is not in [1, 100000]\n", v);
        return 2;
      }
      o->batches = (int)x;
    } else if (!strcmp(a, "--topology")) {
      int p = 0, s = 0;
      char tail;
      if (sscanf(v, "%dx%d%c", &p, &s, &tail) != 2 || p < 1 || s < 1 || p > 4096 || s > 4096) {
        fprintf(stderr, "scps-bench-prep: --topology '%s' is not PxS\n", v);
        return 2;
      }
      o->processes = p;
      o->sc_per_process = s;
    } else if (!strcmp(a, "--policy")) {
      if (!strcmp(v, "error"))
        o->policy = SCPS_LIMIT_ERROR;
      else if (!strcmp(v, "drop"))
        o->policy = SCPS_LIMIT_DROP;
      else {
        fprintf(stderr, "scps-bench-prep: --policy '%s' is not error or drop\n", v);
        return 2;
      }
    } else if (!strcmp(a, "--seed")) {
      if (!parse_int(v, 0, LONG_MAX, &x)) {
        fprintf(stderr, "scps-bench-prep: --seed '%s' is not a non-negative integer\n", v);
        return 2;
      }
      o->seed = (uint64_t)x;
    } else {
      fprintf(stderr, "scps-bench-prep: unknown option '%s'\n", a);
      usage(stderr);
      return 2;
    }
  }
  return 0;
}

static void batch_free(batch *b, int n_features) {
  for (int f = 0; f < n_features; f++) {
    if (b->ids)
      free(b->ids[f]);
    if (b->offsets)
      free(b->offsets[f]);
    if (b->weights)
      free(b->weights[f]);
  }
  free(b->ids);
  free(b->offsets);
  free(b->weights);
  free(b->in);
}

static int batch_copy(batch *b, const scps_workload *w, const scps_feature_input *src) {
  int nf = w->n_features;
  b->in = calloc((size_t)nf, sizeof *b->in);
  b->ids = calloc((size_t)nf, sizeof *b->ids);
  b->offsets = calloc((size_t)nf, sizeof *b->offsets);
  b->weights = calloc((size_t)nf, sizeof *b->weights);
  if (!b->in || !b->ids || !b->offsets || !b->weights)
    return -1;
  for (int f = 0; f < nf; f++) {
    size_t n = src[f].n_ids, rows = (size_t)w->batch_size + 1;
    b->in[f] = src[f];
    b->ids[f] = malloc((n ? n : 1) * sizeof **b->ids);
    b->offsets[f] = malloc(rows * sizeof **b->offsets);
    if (!b->ids[f] || !b->offsets[f])
      return -1;
    memcpy(b->ids[f], src[f].ids, n * sizeof **b->ids);
    memcpy(b->offsets[f], src[f].row_offsets, rows * sizeof **b->offsets);
    b->in[f].ids = b->ids[f];
    b->in[f].row_offsets = b->offsets[f];
    if (src[f].weights) {
      b->weights[f] = malloc((n ? n : 1) * sizeof **b->weights);
      if (!b->weights[f])
        return -1;
      memcpy(b->weights[f], src[f].weights, n * sizeof **b->weights);
      b->in[f].weights = b->weights[f];
    }
    b->n_ids += (int64_t)n;
  }
  return 0;
}

/* Times every batch on a prep with t threads; prints one JSON line. */
static int run(const options *o, const scps_workload *w, const scps_layout *l, batch *batches,
               int threads) {
  scps_error err;
  scps_prep *p = NULL;
  scps_prep_options po = {.policy = o->policy, .threads = threads};
  if (scps__prep_create(l, &po, &p, &err) != 0) {
    fprintf(stderr, "scps-bench-prep: %s\n", err.msg);
    return 1;
  }
  if (o->policy == SCPS_LIMIT_ERROR) {
    for (int s = 0; s < l->n_stacks; s++) {
      int64_t most = 0;
      for (int k = 0; k < l->stacks[s].n_features; k++) {
        int f = l->stacks[s].features[k];
        most += (int64_t)w->batch_size * w->draws[f].valency_max;
      }
      most = most < 1 ? 1 : most > INT32_MAX ? INT32_MAX : most;
      scps__prep_set_limits(p, s, (int32_t)most, (int32_t)most, NULL);
    }
  }
  double *ms = calloc((size_t)o->batches, sizeof *ms);
  double *rate = calloc((size_t)o->batches, sizeof *rate);
  int rc = ms && rate ? 0 : 1;
  int64_t drops = 0, ids = 0;
  for (int k = -WARMUP; k < o->batches && rc == 0; k++) {
    batch *b = &batches[(k + WARMUP) % o->batches];
    double t0 = scps__clock_s();
    rc = scps__prep_run(p, b->in, &err);
    double dt = scps__clock_s() - t0;
    if (rc != 0) {
      fprintf(stderr, "scps-bench-prep: batch %d: %s\n", k, err.msg);
      break;
    }
    if (k < 0)
      continue;
    ms[k] = dt * 1e3;
    rate[k] = (double)b->n_ids / dt;
    ids += b->n_ids;
    for (int s = 0; s < l->n_stacks; s++)
      drops += scps__prep_stats(p, s)->id_drop_counter;
  }
  if (rc == 0) {
    scps_bench_sort(ms, (size_t)o->batches);
    scps_bench_sort(rate, (size_t)o->batches);
    double med_ms = ms[o->batches / 2];
    printf("{\"bench\":\"prep\",\"workload\":\"%s\",\"topology\":\"%dx%d\",\"stacks\":%d,"
           "\"threads\":%d,\"policy\":\"%s\",\"batches\":%d,\"ids_per_batch\":%.0f,"
           "\"ids_per_s\":%.4g,\"ids_per_s_per_thread\":%.4g,\"batches_per_s\":%.4g,"
           "\"ms_per_batch\":%.4f,\"ms_per_batch_min\":%.4f,\"drops_per_batch\":%.1f}\n",
           w->name, o->processes, o->sc_per_process, l->n_stacks, threads,
           o->policy == SCPS_LIMIT_DROP ? "drop" : "error", o->batches,
           (double)ids / o->batches, rate[o->batches / 2], rate[o->batches / 2] / threads,
           1e3 / med_ms, med_ms, ms[0], (double)drops / o->batches);
    fflush(stdout);
  }
  free(ms);
  free(rate);
  scps__prep_destroy(p);
  return rc;
}

int main(int argc, char **argv) {
  options o;
  memset(&o, 0, sizeof o);
  int rc = parse_args(argc, argv, &o);
  if (rc != 0)
    return rc;
  scps_error err;
  scps_workload *w = NULL;
  scps_layout *l = NULL;
  scps_workload_gen *gen = NULL;
  batch *batches = NULL;
  if (scps__workload_load(o.workload, &w, &err) != 0) {
    fprintf(stderr, "scps-bench-prep: %s\n", err.msg);
    return 1;
  }
  scps_topology topo = {o.processes, o.sc_per_process, INT64_C(1) << 40};
  rc = scps__layout_create(w->tables, w->n_tables, w->features, w->n_features, &topo, NULL, &l, &err);
  if (rc == 0)
    rc = scps__workload_gen_create(w, o.seed, &gen, &err);
  if (rc != 0) {
    fprintf(stderr, "scps-bench-prep: %s\n", err.msg);
    goto out;
  }
  batches = calloc((size_t)o.batches, sizeof *batches);
  if (!batches) {
    rc = 1;
    goto out;
  }
  for (int k = 0; k < o.batches; k++) {
    scps__workload_gen_next(gen);
    if (batch_copy(&batches[k], w, scps__workload_gen_inputs(gen)) != 0) {
      fprintf(stderr, "scps-bench-prep: out of memory copying batch %d\n", k);
      rc = 1;
      goto out;
    }
  }
  for (int r = 0; r < o.n_runs && rc == 0; r++)
    rc = run(&o, w, l, batches, o.threads[r]);
out:
  if (batches)
    for (int k = 0; k < o.batches; k++)
      batch_free(&batches[k], w->n_features);
  free(batches);
  scps__workload_gen_destroy(gen);
  scps__layout_destroy(l);
  scps__workload_destroy(w);
  return rc;
}
