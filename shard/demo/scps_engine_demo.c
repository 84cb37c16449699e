/* scps-engine-demo: the engine end to end in one process: a workload's tables
 * stacked and sharded over P x S simulated SparseCores, batches preprocessed
 * into COO partitions, looked up and trained towards a planted model. */
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scps_clock.h"
#include "scps_engine.h"
#include "scps_fdo.h"
#include "scps_init.h"
#include "scps_prep.h"
#include "scps_units.h"
#include "scps_workload.h"
#include "scps_version.h"

#define MAX_PROCESSES 64

static const char usage[] =
    "usage: scps-engine-demo [options]\n"
    "Trains a workload's embedding tables in-process towards a planted model:\n"
    "the target activation of every sample is the lookup of the same ids in a\n"
    "second set of tables drawn with other seeds, and the loss is half the\n"
    "squared error, averaged over samples. Prints loss, throughput and id drops as it goes,\n"
    "then the memory of every simulated SparseCore and each stack's limits and\n"
    "observed per-partition id counts. Limits adapt live to the observed counts\n"
    "(FDO) unless --drop or --fixed-limits is given.\n"
    "\n"
    "  --workload FILE        workload JSON (default ../shared/workloads/shared-tables.json,\n"
    "                         relative to the current directory: run from the checkout)\n"
    "  --processes P          simulated server processes, 1 to 64 (default 2)\n"
    "  --sc-per-process S     SparseCores per process, 1 to 64 (default 2)\n"
    "  --sc-memory BYTES      memory per SparseCore; K, M, G suffixes (default 256M)\n"
    "  --steps N              training steps, >= 1 (default 200)\n"
    "  --drop                 drop ids over the per-partition limits (no FDO)\n"
    "  --fixed-limits         refuse batches over the limits (no FDO)\n"
    "  --fdo-dir DIR          export the FDO statistics as CSV into DIR at the end\n"
    "  --help                 this text\n"
    "  --version              print the version and exit\n"
    "\n"
    "Exit status: 0 when the run finished, 1 on an error of the workload or\n"
    "the engine, 2 for bad flags.\n";

typedef struct cluster {
  scps_layout *layout;
  int P;
  scps_engine *engines[MAX_PROCESSES];
} cluster;

/* planted != 0 draws every table from another seed: same shapes and stacking,
 * so both clusters read the same COO partitions. */
static int cluster_create(cluster *c, const scps_workload *w, const scps_topology *t, int planted,
                          scps_error *err) {
  memset(c, 0, sizeof *c);
  scps_table_spec *tables = malloc(sizeof *tables * (size_t)w->n_tables);
  if (!tables) return scps_error_set(err, SCPS_ENOMEM, "out of memory");
  memcpy(tables, w->tables, sizeof *tables * (size_t)w->n_tables);
  if (planted)
    for (int i = 0; i < w->n_tables; i++) tables[i].initializer.seed = scps__init_seed(&tables[i]) ^ 0x5eedULL;
  int rc = scps__layout_create(tables, w->n_tables, w->features, w->n_features, t, NULL, &c->layout, err);
  free(tables);
  for (int p = 0; !rc && p < t->num_processes; p++) {
    rc = scps__engine_create(c->layout, p, &c->engines[p], err);
    c->P = p + 1;
  }
  return rc;
}

static void cluster_destroy(cluster *c) {
  for (int p = 0; p < c->P; p++) scps__engine_destroy(c->engines[p]);
  scps__layout_destroy(c->layout);
}

static void cluster_lookup(cluster *c, const scps_prep *prep, int st, float *out) {
  int32_t S = c->layout->topology.sc_per_process;
  const scps_stack_layout *sl = &c->layout->stacks[st];
  memset(out, 0, sizeof(float) * (size_t)(sl->total_sample_count * sl->dim));
  for (int32_t sc = 0; sc < c->layout->num_sc; sc++)
    scps__engine_lookup(c->engines[sc / S], st, sc % S, scps__prep_coo(prep, st, sc), 0, (uint32_t)sl->total_sample_count,
                       out);
}

static void log_change(void *ctx, const scps_fdo_change *c) {
  char line[512];
  scps__fdo_change_format(c, line, sizeof line);
  printf("FDO: %s\n", line);
}

static int parse_int(const char *flag, const char *s, long lo, long hi, long *out) {
  scps_error e;
  if (!scps__parse_long(flag, s, lo, hi, out, &e)) return 0;
  fprintf(stderr, "scps-engine-demo: %s\n", e.msg);
  return -1;
}

int main(int argc, char **argv) {
  const char *path = "../shared/workloads/shared-tables.json";
  scps_topology topo = {2, 2, (int64_t)256 << 20};
  long steps = 200;
  int adaptive = 1;
  const char *fdo_dir = NULL;
  scps_prep_options po = {SCPS_LIMIT_ERROR, 1};
  static const struct option opts[] = {{"workload", required_argument, 0, 'w'},
                                       {"processes", required_argument, 0, 'p'},
                                       {"sc-per-process", required_argument, 0, 's'},
                                       {"sc-memory", required_argument, 0, 'm'},
                                       {"steps", required_argument, 0, 'n'},
                                       {"drop", no_argument, 0, 'd'},
                                       {"fixed-limits", no_argument, 0, 'x'},
                                       {"fdo-dir", required_argument, 0, 'o'},
                                       {"help", no_argument, 0, 'h'},
                                       {"version", no_argument, 0, 'V'},
                                       {0, 0, 0, 0}};
  int o;
  long v;
  while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (o) {
    case 'w': path = optarg; break;
    case 'p':
      if (parse_int("--processes", optarg, 1, MAX_PROCESSES, &v)) return 2;
      topo.num_processes = (int32_t)v;
      break;
    case 's':
      if (parse_int("--sc-per-process", optarg, 1, SCPS_SC_PER_PROCESS_MAX, &v)) return 2;
      topo.sc_per_process = (int32_t)v;
      break;
    case 'm':
      if (scps__parse_bytes(optarg, &topo.sc_memory_bytes)) {
        fprintf(stderr, "scps-engine-demo: --sc-memory '%s': expected bytes like 512M or 4G\n", optarg);
        return 2;
      }
      break;
    case 'n': if (parse_int("--steps", optarg, 1, LONG_MAX, &steps)) return 2; break;
    case 'd': po.policy = SCPS_LIMIT_DROP; adaptive = 0; break;
    case 'x': adaptive = 0; break;
    case 'o': fdo_dir = optarg; break;
    case 'h': fputs(usage, stdout); return 0;
    case 'V': printf("scps-engine-demo %s\n", scps_version()); return 0;
    default: fputs(usage, stderr); return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "scps-engine-demo: unexpected argument '%s' (options start with --; try --help)\n", argv[optind]);
    return 2;
  }
  scps_error err;
  scps_workload *w = NULL;
  scps_workload_gen *gen = NULL;
  scps_prep *prep = NULL;
  scps_fdo *fdo = NULL;
  cluster train, planted;
  memset(&train, 0, sizeof train);
  memset(&planted, 0, sizeof planted);
  int rc = scps__workload_load(path, &w, &err);
  if (!rc) rc = cluster_create(&train, w, &topo, 0, &err);
  if (!rc) rc = cluster_create(&planted, w, &topo, 1, &err);
  if (!rc) rc = scps__prep_create(train.layout, &po, &prep, &err);
  if (!rc) rc = scps__workload_gen_create(w, 1, &gen, &err);
  scps_fdo_options fo = {.adaptive = adaptive, .headroom = 0.25, .log = log_change};
  if (!rc) rc = scps__fdo_create(train.layout, &fo, &fdo, &err);
  if (rc) {
    fprintf(stderr, "scps-engine-demo: %s: %s\n", scps_strerror(rc), err.msg);
    goto out;
  }
  const scps_layout *l = train.layout;
  printf("workload %s: %d tables, %d features, batch %d; %d processes x %d SparseCores; %d stacks\n", w->name,
         w->n_tables, w->n_features, w->batch_size, topo.num_processes, topo.sc_per_process, l->n_stacks);
  float *act[64] = {0}, *target[64] = {0};
  for (int st = 0; st < l->n_stacks && st < 64; st++) {
    size_t n = (size_t)(l->stacks[st].total_sample_count * l->stacks[st].dim);
    act[st] = malloc(sizeof(float) * n);
    target[st] = malloc(sizeof(float) * n);
  }
  double first_loss = -1, loss = 0, busy = 0;
  int64_t ids = 0, drops = 0;
  int32_t S = topo.sc_per_process;
  for (long step = 0; step < steps && !rc; step++) {
    scps__workload_gen_next(gen);
    const scps_feature_input *in = scps__workload_gen_inputs(gen);
    double t0 = scps__clock_s();
    rc = scps__prep_run(prep, in, &err);
    if (rc == SCPS_ELIMIT && adaptive) {
      /* The refused batch's counts raise the limits; then it fits. */
      rc = scps__fdo_step(fdo, prep, &err);
      if (!rc) rc = scps__prep_run(prep, in, &err);
    }
    if (!rc) rc = scps__fdo_step(fdo, prep, &err);
    if (rc) {
      fprintf(stderr, "scps-engine-demo: step %ld: %s: %s\n", step, scps_strerror(rc), err.msg);
      break;
    }
    double sq = 0;
    for (int st = 0; st < l->n_stacks; st++) {
      const scps_stack_layout *sl = &l->stacks[st];
      cluster_lookup(&train, prep, st, act[st]);
      cluster_lookup(&planted, prep, st, target[st]);
      size_t n = (size_t)(sl->total_sample_count * sl->dim);
      const float inv_batch = 1.0f / (float)w->batch_size;
      for (size_t i = 0; i < n; i++) {
        float d = act[st][i] - target[st][i];
        sq += 0.5 * (double)d * d;
        act[st][i] = d * inv_batch; /* d(loss)/d(act), loss = mean over samples of |act - target|^2 / 2 */
      }
      scps_step s = {step, -1};
      for (int32_t sc = 0; sc < l->num_sc; sc++)
        scps__engine_update(train.engines[sc / S], st, sc % S, scps__prep_coo(prep, st, sc), act[st], &s);
      drops += scps__prep_stats(prep, st)->id_drop_counter;
    }
    busy += scps__clock_s() - t0;
    for (int f = 0; f < w->n_features; f++) ids += (int64_t)in[f].n_ids;
    loss = sq / (double)w->batch_size;
    if (first_loss < 0) first_loss = loss;
    if (step % 10 == 0 || step == steps - 1)
      printf("step %4ld  loss %.6f  %.2f M ids/s  drops %lld\n", step, loss, (double)ids / busy / 1e6,
             (long long)drops);
  }
  if (!rc && fdo_dir) {
    char out[4096];
    rc = scps__fdo_export_csv(fdo, fdo_dir, out, sizeof out, &err);
    if (rc)
      fprintf(stderr, "scps-engine-demo: %s\n", err.msg);
    else
      printf("FDO statistics written to %s\n", out);
  }
  if (!rc) {
    printf("loss %.6f -> %.6f (%.1f%% of the first step)\n", first_loss, loss, 100.0 * loss / first_loss);
    for (int p = 0; p < train.P; p++)
      for (int32_t s = 0; s < S; s++) {
        const scps_hbm *h = scps__engine_hbm(train.engines[p], s);
        printf("process %d SparseCore %d: %lld of %lld bytes used\n", p, h->sc, (long long)h->used,
               (long long)h->capacity);
      }
    for (int st = 0; st < l->n_stacks; st++) {
      const scps_stack_layout *sl = &l->stacks[st];
      const scps_stack_stats *ss = scps__prep_stats(prep, st);
      int32_t max_ids = 0, max_unique = 0, limit_ids, limit_unique;
      scps__prep_get_limits(prep, st, &limit_ids, &limit_unique);
      for (int32_t sc = 0; sc < ss->num_sc; sc++) {
        if (ss->max_ids_per_partition[sc] > max_ids) max_ids = ss->max_ids_per_partition[sc];
        if (ss->max_unique_ids_per_partition[sc] > max_unique) max_unique = ss->max_unique_ids_per_partition[sc];
      }
      printf("stack %s: %d tables, dim %d, %lld rows per SparseCore, %s; last batch max ids/partition %d "
             "(limit %d), max unique %d (limit %d)\n",
             sl->name, sl->n_tables, sl->dim, (long long)sl->rows_per_sc, scps__optimizer_name(sl->optimizer.type),
             max_ids, limit_ids, max_unique, limit_unique);
    }
  }
  for (int st = 0; st < 64; st++) {
    free(act[st]);
    free(target[st]);
  }
out:
  scps__workload_gen_destroy(gen);
  scps__fdo_destroy(fdo);
  scps__prep_destroy(prep);
  cluster_destroy(&planted);
  cluster_destroy(&train);
  scps__workload_destroy(w);
  return rc ? 1 : 0;
}
