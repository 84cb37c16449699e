/* scps-bench-client: lookup and train-step throughput of libscps against a
 * running cluster, on a workload's batches: what tests/bench/network.sh sets
 * next to PyTorch's in-process EmbeddingBag. */
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "scps_client_engine.h"
#include "scps_clock.h"
#include "scps_fdo.h"
#include "scps_memtune.h"
#include "scps_train.h"
#include "scps_workload.h"
#include "scps_bench.h"

/* Answer bytes that came through shared memory (scps_client_shared_traffic). */
static uint64_t placed_rx(const scps_client *c) {
  uint64_t sent, received;
  scps_client_shared_traffic(c, &sent, &received);
  return received;
}

static const char usage[] =
    "usage: scps-bench-client --servers LIST --workload FILE [--mode lookup|train|pipelined|checkpoint]\n"
    "                         [--batches K] [--warmup W] [--wire-format F]\n"
    "                         [--prep-threads T] [--depth D] [--rounds R] [--plain-file PATH]\n"
    "                         [--answer auto|pooled|rows] [--gradients auto|sample|row]\n"
    "                         [--server-pid PID[,PID...]] [--shared-memory auto|off] [--view]\n"
    "Times K batches one after another (the median is reported) through\n"
    "libscps: lookup = prepare + Lookup; train = prepare + Lookup +\n"
    "ApplyGradients; pipelined = train steps on the one-step-stale schedule of\n"
    "scps_train.h (batch i looked up while batch i-1 is pushed; the figure is\n"
    "the mean over K batches). Batches are generated before timing; preprocessing is\n"
    "timed, as a trainer pays it, on T threads (default: every online CPU, as\n"
    "the PyTorch anchor uses). Prints one JSON line with the medians of the\n"
    "whole step and of its parts, and the payload bytes sent and received per\n"
    "timed batch (scps_client_traffic). checkpoint = one push, K lookups timed idle,\n"
    "a Checkpoint (to the servers' --checkpoint-dir) with nothing else running\n"
    "(the first save of a process, reported apart), R more (default 4), each\n"
    "paired with a plain write + fsync of as many bytes to --plain-file PATH\n"
    "(16 MiB write() calls; the last file is kept), the save first in even\n"
    "rounds and second in odd ones, then one more with lookups\n"
    "timed back to back until it returns: the medians of the R saves and\n"
    "writes, and lookup p50/max idle and during the save; then K pushes\n"
    "timed idle and pushes back to back during one more save (of the step\n"
    "they reached, sent 20 ms before them): push p50/max idle and during that\n"
    "save. Checkpoints carry the highest limits the servers allow. The\n"
    "servers need --checkpoint-min-interval 0 (the saves come back to back).\n"
    "--depth D (lookup, train) keeps D batches in flight from D threads, each\n"
    "with its own batch and buffers, so one batch's preprocessing and merge\n"
    "overlap another's server work; samples_per_s is then K batches over the\n"
    "wall time and ms_per_batch_median stays the median latency of one batch.\n"
    "--answer: how servers answer lookups (scps_answer_mode; default auto:\n"
    "distinct rows for stacks where they take no more bytes, pooled elsewhere).\n"
    "--gradients: how pushes send gradients (scps_gradient_mode; default auto:\n"
    "by row for each server's stacks where that takes at most 3/4 of the bytes\n"
    "by sample, by sample elsewhere).\n"
    "--shared-memory: answers from servers on this host through shared memory\n"
    "(scps_client_options.shared_memory; default auto: wherever a server offers\n"
    "it); placed_bytes_per_batch counts what came that way.\n"
    "--view: lookups through scps_client_lookup_view, which leaves the\n"
    "activations where they landed (in the answer itself with one server\n"
    "through shared memory) instead of copying them to the caller.\n"
    "--server-pid (lookup, train at depth 1; the servers' processes on this\n"
    "host): adds \"cpu\", CPU time per timed batch (ms, from the processes'\n"
    "CPU-time clocks around each part and /proc/PID/task/*/schedstat around\n"
    "all K): the client's whole and per part (prepare, lookup, push: medians),\n"
    "the servers' together, each process's per thread name, and\n"
    "memcpy_answer_ms, the median CPU time of one memcpy of the bytes a\n"
    "batch received: the floor's copy (tests/bench/cpu.sh).\n";

typedef struct replay {
  const scps_feature_input *const *inputs; /* per distinct batch */
  int distinct;
  const float *const *grads;
  int nf;
  size_t *sizes;
} replay;

static int replay_inputs(void *ud, int64_t batch, const scps_feature_input **in, scps_error *err) {
  replay *r = ud;
  *in = r->inputs[batch % r->distinct];
  return 0;
}

static int replay_compute(void *ud, int64_t batch, float *const *acts, float *const *grads, scps_error *err) {
  replay *r = ud;
  for (int f = 0; f < r->nf; f++) memcpy(grads[f], r->grads[f], r->sizes[f]);
  return 0;
}

/* Every generated batch, copied out of the generator's reused buffers. */
typedef struct stored {
  scps_feature_input *in;
  int64_t **offsets, **ids;
  float **weights;
} stored;

static int store(const scps_feature_input *src, int nf, int32_t batch, stored *s) {
  s->in = calloc((size_t)nf, sizeof *s->in);
  s->offsets = calloc((size_t)nf, sizeof *s->offsets);
  s->ids = calloc((size_t)nf, sizeof *s->ids);
  s->weights = calloc((size_t)nf, sizeof *s->weights);
  if (!s->in || !s->offsets || !s->ids || !s->weights) return -1;
  for (int f = 0; f < nf; f++) {
    s->in[f] = src[f];
    s->offsets[f] = malloc(sizeof(int64_t) * (size_t)(batch + 1));
    s->ids[f] = malloc(sizeof(int64_t) * (src[f].n_ids ? src[f].n_ids : 1));
    if (!s->offsets[f] || !s->ids[f]) return -1;
    memcpy(s->offsets[f], src[f].row_offsets, sizeof(int64_t) * (size_t)(batch + 1));
    memcpy(s->ids[f], src[f].ids, sizeof(int64_t) * src[f].n_ids);
    s->in[f].row_offsets = s->offsets[f];
    s->in[f].ids = s->ids[f];
    if (src[f].weights) {
      s->weights[f] = malloc(sizeof(float) * (src[f].n_ids ? src[f].n_ids : 1));
      if (!s->weights[f]) return -1;
      memcpy(s->weights[f], src[f].weights, sizeof(float) * src[f].n_ids);
      s->in[f].weights = s->weights[f];
    }
  }
  return 0;
}

#define MAX_BATCHES 10000
static double t_step[MAX_BATCHES], t_prep[MAX_BATCHES], t_look[MAX_BATCHES], t_push[MAX_BATCHES];

/* --server-pid: CPU time per timed batch (seconds), the client's by part
 * and the servers' whole, and the readings around all K batches. */
#define MAX_PIDS 16
static int server_pids[MAX_PIDS], n_server_pids;
static double c_prep[MAX_BATCHES], c_look[MAX_BATCHES], c_push[MAX_BATCHES], s_step[MAX_BATCHES];
static scps_bench_cpu cpu_before[MAX_PIDS + 1], cpu_after[MAX_PIDS + 1]; /* [0]: the client */

static double servers_cpu_s(void) {
  double sum = 0.0;
  for (int i = 0; i < n_server_pids; i++) sum += scps_bench_process_cpu_s(server_pids[i]);
  return sum;
}

static double servers_cpu_s_of(const scps_bench_cpu *readings) {
  double sum = 0.0;
  for (int i = 0; i < n_server_pids; i++) sum += readings[1 + i].process_s;
  return sum;
}

/* Readings of the client (pid 0) and every server; the first error. */
static int take_cpu(scps_bench_cpu *into) {
  int rc = scps_bench_cpu_take(0, &into[0]);
  for (int i = 0; i < n_server_pids; i++) {
    int r = scps_bench_cpu_take(server_pids[i], &into[1 + i]);
    if (!rc) rc = r;
  }
  return rc;
}

/* The median CPU time of one memcpy of bytes (both buffers touched first). */
static double memcpy_cpu_s(size_t bytes) {
  char *src = malloc(bytes ? bytes : 1), *dst = malloc(bytes ? bytes : 1);
  double t[21];
  if (!src || !dst) {
    free(src);
    free(dst);
    return NAN;
  }
  memset(src, 1, bytes);
  memset(dst, 2, bytes);
  for (int i = 0; i < 21; i++) {
    double t0 = scps_bench_thread_cpu_s();
    memcpy(dst, src, bytes);
    t[i] = scps_bench_thread_cpu_s() - t0;
    src[i % (bytes ? bytes : 1)] ^= dst[bytes / 2]; /* keeps the copies from being elided */
  }
  free(src);
  free(dst);
  return scps_bench_median(t, 21);
}

static void print_cpu(long batches, uint64_t received) {
  printf(", \"cpu\": {\"batches\": %ld, \"client_ms\": %.3f, \"servers_ms\": %.3f, "
         "\"client_prepare_ms_median\": %.3f, \"client_lookup_ms_median\": %.3f, \"client_push_ms_median\": %.3f, "
         "\"servers_ms_median\": %.3f, \"memcpy_answer_ms\": %.3f, \"client\": ",
         batches, (cpu_after[0].process_s - cpu_before[0].process_s) * 1e3 / (double)batches,
         (servers_cpu_s_of(cpu_after) - servers_cpu_s_of(cpu_before)) * 1e3 / (double)batches,
         scps_bench_median(c_prep, (size_t)batches) * 1e3, scps_bench_median(c_look, (size_t)batches) * 1e3,
         scps_bench_median(c_push, (size_t)batches) * 1e3, scps_bench_median(s_step, (size_t)batches) * 1e3,
         memcpy_cpu_s((size_t)((double)received / (double)batches)) * 1e3);
  scps_bench_cpu_print(stdout, &cpu_before[0], &cpu_after[0], (double)batches);
  printf(", \"servers\": [");
  for (int i = 0; i < n_server_pids; i++) {
    printf("%s", i ? ", " : "");
    scps_bench_cpu_print(stdout, &cpu_before[1 + i], &cpu_after[1 + i], (double)batches);
  }
  printf("]}");
}

static void sort_times(long batches) {
  scps_bench_sort(t_step, (size_t)batches);
  scps_bench_sort(t_prep, (size_t)batches);
  scps_bench_sort(t_look, (size_t)batches);
  scps_bench_sort(t_push, (size_t)batches);
}

/* --view: lookups through scps_client_lookup_view, the activations left
 * where they are (the arrays given are then not written). */
static bool use_view;

static int lookup(scps_client *c, scps_batch *b, float *const *acts, scps_error *err) {
  if (!use_view) return scps_client_lookup(c, b, acts, 60000, err);
  static _Thread_local const float **view;
  if (!view && !(view = calloc((size_t)scps_client_n_features(c), sizeof *view)))
    return scps_error_set(err, SCPS_ENOMEM, "out of memory");
  return scps_client_lookup_view(c, b, view, 60000, err);
}

/* Placed answer bytes (scps_client_placed_bytes) when the timed batches
 * began: answers through shared memory cross no connection. */
static uint64_t placed0;

static void traffic_start(scps_client *c, uint64_t *sent, uint64_t *received) {
  scps_client_traffic(c, sent, received);
  placed0 = placed_rx(c);
}

/* Batch after batch: prepare, lookup and (train) push, each part timed;
 * leaves the sorted times in t_* and the client's traffic counters as the
 * timed batches began in *sent, *received. */
static int time_steps(scps_client *c, scps_batch *b, const stored *st, int distinct, float *const *acts,
                      float *const *grads, long warmup, long batches, int train, uint64_t *sent, uint64_t *received,
                      scps_error *err) {
  int rc = 0;
  for (long i = 0; i < warmup + batches; i++) {
    if (i == warmup) {
      traffic_start(c, sent, received);
      if (n_server_pids && (rc = take_cpu(cpu_before)))
        return scps_error_set(err, SCPS_EINVAL, "cannot read the CPU time of a --server-pid: %s", strerror(-rc));
    }
    double s0 = n_server_pids ? servers_cpu_s() : 0.0, c0 = scps_bench_process_cpu_s(0);
    double t0 = scps__clock_s();
    rc = scps_client_prepare(c, st[i % distinct].in, b, err);
    double t1 = scps__clock_s(), c1 = scps_bench_process_cpu_s(0);
    if (!rc) rc = lookup(c, b, acts, err);
    double t2 = scps__clock_s(), c2 = scps_bench_process_cpu_s(0);
    if (!rc && train) rc = scps_client_apply_gradients(c, b, (const float *const *)grads, i, -1, 60000, err);
    double t3 = scps__clock_s(), c3 = scps_bench_process_cpu_s(0);
    double s3 = n_server_pids ? servers_cpu_s() : 0.0;
    if (rc) return rc;
    if (i >= warmup) {
      t_step[i - warmup] = t3 - t0;
      t_prep[i - warmup] = t1 - t0;
      t_look[i - warmup] = t2 - t1;
      t_push[i - warmup] = t3 - t2;
      c_prep[i - warmup] = c1 - c0;
      c_look[i - warmup] = c2 - c1;
      c_push[i - warmup] = c3 - c2;
      s_step[i - warmup] = s3 - s0;
    }
  }
  if (n_server_pids && (rc = take_cpu(cpu_after)))
    return scps_error_set(err, SCPS_EINVAL, "cannot read the CPU time of a --server-pid: %s", strerror(-rc));
  sort_times(batches);
  return 0;
}

/* --depth: D threads share K batches; each claims the next index. */
typedef struct depth_run {
  scps_client *c;
  const stored *st;
  int distinct, nf, train;
  long warmup, batches;
  size_t *sizes;
  atomic_long next;
  atomic_int warmed; /* threads done with their warmup */
  atomic_bool go;    /* set once all are: the timed part starts */
  atomic_int rc;
  scps_error err;
  pthread_mutex_t err_mu;
} depth_run;

static void depth_fail(depth_run *d, int rc, const scps_error *err) {
  pthread_mutex_lock(&d->err_mu);
  if (!atomic_load(&d->rc)) {
    d->err = *err;
    atomic_store(&d->rc, rc);
  }
  pthread_mutex_unlock(&d->err_mu);
}

static void *depth_thread(void *p) {
  depth_run *d = p;
  scps_error err;
  scps_batch *b = NULL;
  float **acts = calloc((size_t)d->nf, sizeof *acts), **grads = calloc((size_t)d->nf, sizeof *grads);
  int rc = acts && grads ? scps_batch_create(d->c, &b, &err) : scps_error_set(&err, SCPS_ENOMEM, "out of memory");
  for (int f = 0; !rc && f < d->nf; f++) {
    acts[f] = malloc(d->sizes[f]);
    grads[f] = malloc(d->sizes[f]);
    if (!acts[f] || !grads[f]) rc = scps_error_set(&err, SCPS_ENOMEM, "out of memory");
    for (size_t i = 0; !rc && i < d->sizes[f] / sizeof(float); i++) grads[f][i] = 1e-3f * (float)((int)(i % 7) - 3);
  }
  for (long i = 0; !rc && i < d->warmup; i++) {
    rc = scps_client_prepare(d->c, d->st[i % d->distinct].in, b, &err);
    if (!rc) rc = scps_client_lookup(d->c, b, acts, 60000, &err);
  }
  if (rc) depth_fail(d, rc, &err);
  atomic_fetch_add(&d->warmed, 1);
  while (!atomic_load(&d->go)) sched_yield();
  for (long i; !rc && !atomic_load(&d->rc) && (i = atomic_fetch_add(&d->next, 1)) < d->batches;) {
    double t0 = scps__clock_s();
    rc = scps_client_prepare(d->c, d->st[i % d->distinct].in, b, &err);
    double t1 = scps__clock_s();
    if (!rc) rc = scps_client_lookup(d->c, b, acts, 60000, &err);
    double t2 = scps__clock_s();
    if (!rc && d->train) rc = scps_client_apply_gradients(d->c, b, (const float *const *)grads, i, -1, 60000, &err);
    double t3 = scps__clock_s();
    t_step[i] = t3 - t0;
    t_prep[i] = t1 - t0;
    t_look[i] = t2 - t1;
    t_push[i] = t3 - t2;
    if (rc) depth_fail(d, rc, &err);
  }
  for (int f = 0; f < d->nf; f++) {
    free(acts[f]);
    free(grads[f]);
  }
  free(acts);
  free(grads);
  scps_batch_destroy(b);
  return NULL;
}

/* Runs K batches D at a time; returns the wall time of the K batches
 * through *wall, leaves the sorted per-batch times in t_* and the traffic
 * counters as the K batches began in *sent, *received. */
static int time_depth(scps_client *c, const stored *st, int distinct, int nf, size_t *sizes, long warmup, long batches,
                      int train, int depth, double *wall, uint64_t *sent, uint64_t *received, scps_error *err) {
  depth_run d = {.c = c, .st = st, .distinct = distinct, .nf = nf, .train = train, .warmup = warmup,
                 .batches = batches, .sizes = sizes};
  pthread_t th[64];
  pthread_mutex_init(&d.err_mu, NULL);
  int started = 0;
  for (; started < depth; started++)
    if (pthread_create(&th[started], NULL, depth_thread, &d)) break;
  if (started < depth) {
    scps_error e;
    depth_fail(&d, scps_error_set(&e, SCPS_ENOMEM, "cannot start %d threads", depth), &e);
  }
  while (atomic_load(&d.warmed) < started) sched_yield();
  traffic_start(c, sent, received);
  double t0 = scps__clock_s();
  atomic_store(&d.go, true);
  for (int k = 0; k < started; k++) pthread_join(th[k], NULL);
  *wall = scps__clock_s() - t0;
  pthread_mutex_destroy(&d.err_mu);
  if (atomic_load(&d.rc)) {
    *err = d.err;
    return atomic_load(&d.rc);
  }
  sort_times(batches);
  return 0;
}

typedef struct saving {
  scps_client *c;
  int64_t step;
  atomic_bool done;
  int rc;
  scps_error err;
  scps_client_checkpoint_result res;
} saving;

static void *save_thread(void *p) {
  saving *sv = p;
  sv->rc = scps_client_checkpoint(sv->c, sv->step, NULL, 3600000, &sv->res, &sv->err);
  atomic_store(&sv->done, true);
  return NULL;
}

#define MAX_ROUNDS 16
#define PLAIN_CHUNK ((size_t)16 << 20)

/* Lookups idle; the process's first save, apart (its page cache may come
 * from memory the virtual machine has not touched since boot, which costs it
 * 2-3x); rounds of a save and a plain write of as many bytes to plain (when
 * given); then lookups back to back during one more save. The last plain
 * file stays for the caller's reads. */
/* A Checkpoint carries the client's limits, which the servers take only up
 * to what FDO may raise them to (scps.proto StackLimits): the highest
 * allowed, instead of limits no batch reaches. */
static int highest_allowed_limits(scps_client *c, scps_error *err) {
  const scps_layout *l = scps__client_layout(c);
  scps_fdo *f = NULL;
  int rc = scps__fdo_create(l, NULL, &f, err);
  for (int s = 0; !rc && s < l->n_stacks; s++) {
    int32_t cap = scps__fdo_limit_cap(f, s);
    int32_t ids = cap > l->stacks[s].max_ids_per_partition ? cap : l->stacks[s].max_ids_per_partition;
    int32_t uniq = cap > l->stacks[s].max_unique_ids_per_partition ? cap : l->stacks[s].max_unique_ids_per_partition;
    rc = scps__prep_set_limits(scps__client_prep(c), s, ids, uniq, err);
  }
  scps__fdo_destroy(f);
  return rc;
}

static int bench_checkpoint(scps_client *c, scps_batch *b, const stored *st, float *const *acts,
                            float *const *grads, long batches, int rounds, const char *plain, const char *name,
                            scps_error *err) {
  int rc = highest_allowed_limits(c, err);
  if (!rc) rc = scps_client_prepare(c, st[0].in, b, err);
  if (!rc) rc = lookup(c, b, acts, err);
  if (!rc) rc = scps_client_apply_gradients(c, b, (const float *const *)grads, 0, -1, 60000, err);
  uint64_t sent, received;
  if (!rc) rc = time_steps(c, b, st, 4, acts, grads, 2, batches, 0, &sent, &received, err);
  if (rc) return rc;
  double idle_p50 = t_look[batches / 2], idle_max = t_look[batches - 1];
  char *chunk = plain ? malloc(PLAIN_CHUNK) : NULL;
  if (plain && !chunk) return scps_error_set(err, SCPS_ENOMEM, "out of memory");
  if (chunk) memset(chunk, 0x5a, PLAIN_CHUNK);
  saving first = {.c = c}, quiet = {.c = c};
  double t_save[MAX_ROUNDS], t_write[MAX_ROUNDS];
  save_thread(&first);
  if (first.rc) rc = scps_error_set(err, first.rc, "%s", first.err.msg);
  /* Rounds alternate which side goes first (save, write; write, save; ...):
   * whichever follows the other meets the disk still flushing what the
   * other wrote and the page cache it just gave back. */
  for (int i = 0; i < rounds && !rc; i++) {
    for (int side = 0; side < 2 && !rc; side++) {
      if (side == i % 2) {
        quiet = (saving){.c = c};
        save_thread(&quiet);
        if (quiet.rc) rc = scps_error_set(err, quiet.rc, "%s", quiet.err.msg);
        t_save[i] = quiet.res.seconds;
      } else if (plain) {
        unlink(plain);
        double t0 = scps__clock_s();
        int e = scps_bench_plain_write(plain, chunk, PLAIN_CHUNK, first.res.bytes);
        t_write[i] = scps__clock_s() - t0;
        if (e) rc = scps_error_set(err, SCPS_EIO, "cannot write '%s': %s", plain, strerror(-e));
      }
    }
  }
  free(chunk);
  if (rc) return rc;
  saving sv = {.c = c};
  pthread_t th;
  if (pthread_create(&th, NULL, save_thread, &sv)) return scps_error_set(err, SCPS_ENOMEM, "cannot start a thread");
  long n = 0;
  while (!atomic_load(&sv.done) && n < MAX_BATCHES && !rc) {
    rc = scps_client_prepare(c, st[n % 4].in, b, err);
    double t0 = scps__clock_s();
    if (!rc) rc = lookup(c, b, acts, err);
    t_look[n++] = scps__clock_s() - t0;
  }
  pthread_join(th, NULL);
  if (rc) return rc;
  if (sv.rc) return scps_error_set(err, sv.rc, "%s", sv.err.msg);
  scps_bench_sort(t_look, (size_t)n);
  /* Pushes idle (steps 1..K), then back to back during a save of step K:
   * what a trainer waits for while a checkpoint is taken. */
  for (long i = 0; i < batches && !rc; i++) {
    rc = scps_client_prepare(c, st[i % 4].in, b, err);
    double t0 = scps__clock_s();
    if (!rc) rc = scps_client_apply_gradients(c, b, (const float *const *)grads, 1 + i, -1, 60000, err);
    t_push[i] = scps__clock_s() - t0;
  }
  if (rc) return rc;
  scps_bench_sort(t_push, (size_t)batches);
  double idle_push_p50 = t_push[batches / 2], idle_push_max = t_push[batches - 1];
  saving pv = {.c = c, .step = batches};
  if (pthread_create(&th, NULL, save_thread, &pv)) return scps_error_set(err, SCPS_ENOMEM, "cannot start a thread");
  /* The Checkpoint must be in before the first push of a later step, or
   * the server would refuse it as overtaken. */
  nanosleep(&(struct timespec){0, 20 * 1000000L}, NULL);
  long np = 0;
  while (!atomic_load(&pv.done) && np < MAX_BATCHES && !rc) {
    rc = scps_client_prepare(c, st[np % 4].in, b, err);
    double t0 = scps__clock_s();
    if (!rc) rc = scps_client_apply_gradients(c, b, (const float *const *)grads, batches + 1 + np, -1, 60000, err);
    t_push[np++] = scps__clock_s() - t0;
  }
  pthread_join(th, NULL);
  if (rc) return rc;
  if (pv.rc) return scps_error_set(err, pv.rc, "%s", pv.err.msg);
  scps_bench_sort(t_push, (size_t)np);
  const double gb = (double)quiet.res.bytes * 1e-9, save = scps_bench_median(t_save, (size_t)rounds);
  printf("{\"bench\": \"scps-client\", \"workload\": \"%s\", \"mode\": \"checkpoint\", \"path\": \"%s\", "
         "\"bytes\": %lld, \"files\": %d, \"rounds\": %d, \"save_seconds\": %.4f, \"save_gb_per_s\": %.3f, ",
         name, quiet.res.path, (long long)quiet.res.bytes, quiet.res.files, rounds, save, gb / save);
  if (plain) {
    const double write = scps_bench_median(t_write, (size_t)rounds);
    printf("\"plain_write_fsync_seconds\": %.4f, \"plain_write_fsync_gb_per_s\": %.3f, ", write, gb / write);
  }
  printf("\"save_gb_per_s_rounds\": [");
  for (int i = 0; i < rounds; i++) printf("%s%.3f", i ? ", " : "", gb / t_save[i]);
  printf("], \"plain_write_fsync_gb_per_s_rounds\": [");
  for (int i = 0; plain && i < rounds; i++) printf("%s%.3f", i ? ", " : "", gb / t_write[i]);
  printf("], \"first_save_seconds\": %.4f, \"first_save_gb_per_s\": %.3f, "
         "\"loaded_save_seconds\": %.4f, \"loaded_save_gb_per_s\": %.3f, "
         "\"idle_lookup_ms_p50\": %.3f, \"idle_lookup_ms_max\": %.3f, \"save_lookups\": %ld, "
         "\"save_lookup_ms_p50\": %.3f, \"save_lookup_ms_max\": %.3f, \"idle_push_ms_p50\": %.3f, "
         "\"idle_push_ms_max\": %.3f, \"push_save_seconds\": %.4f, \"save_pushes\": %ld, \"save_push_ms_p50\": %.3f, "
         "\"save_push_ms_max\": %.3f}\n",
         first.res.seconds, (double)first.res.bytes / first.res.seconds * 1e-9, sv.res.seconds,
         (double)sv.res.bytes / sv.res.seconds * 1e-9, idle_p50 * 1e3, idle_max * 1e3, n,
         n ? t_look[n / 2] * 1e3 : 0.0, n ? t_look[n - 1] * 1e3 : 0.0, idle_push_p50 * 1e3, idle_push_max * 1e3,
         pv.res.seconds, np, np ? t_push[np / 2] * 1e3 : 0.0, np ? t_push[np - 1] * 1e3 : 0.0);
  return 0;
}

int main(int argc, char **argv) {
  char *servers_arg = NULL;
  const char *workload = NULL, *mode = "lookup";
  long batches = 20, warmup = 3, prep_threads = sysconf(_SC_NPROCESSORS_ONLN), depth = 1;
  int rounds = 4;
  const char *plain = NULL;
  const char *wire = "float32";
  scps_answer_mode answer = SCPS_ANSWER_AUTO;
  scps_gradient_mode gradients = SCPS_GRADIENTS_AUTO;
  scps_shm_mode shm = SCPS_SHM_AUTO;
  scps_memtune_apply();
  static const struct option opts[] = {{"servers", required_argument, 0, 's'}, {"workload", required_argument, 0, 'w'},
                                       {"mode", required_argument, 0, 'm'},    {"batches", required_argument, 0, 'n'},
                                       {"warmup", required_argument, 0, 'u'},  {"help", no_argument, 0, 'h'},
                                       {"wire-format", required_argument, 0, 'W'},
                                       {"prep-threads", required_argument, 0, 'T'},
                                       {"depth", required_argument, 0, 'D'},
                                       {"rounds", required_argument, 0, 'R'},
                                       {"plain-file", required_argument, 0, 'P'},
                                       {"answer", required_argument, 0, 'A'},
                                       {"gradients", required_argument, 0, 'G'},
                                       {"server-pid", required_argument, 0, 'p'},
                                       {"shared-memory", required_argument, 0, 'S'},
                                       {"view", no_argument, 0, 'V'},
                                       {0, 0, 0, 0}};
  int o;
  while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (o) {
    case 's': servers_arg = optarg; break;
    case 'w': workload = optarg; break;
    case 'm': mode = optarg; break;
    case 'n': batches = atol(optarg); break;
    case 'u': warmup = atol(optarg); break;
    case 'T': prep_threads = atol(optarg); break;
    case 'D': depth = atol(optarg); break;
    case 'R': rounds = atoi(optarg); break;
    case 'P': plain = optarg; break;
    case 'p':
      for (char *tok = strtok(optarg, ","); tok; tok = strtok(NULL, ",")) {
        if (n_server_pids == MAX_PIDS || atoi(tok) <= 0) {
          fputs(usage, stderr);
          return 2;
        }
        server_pids[n_server_pids++] = atoi(tok);
      }
      break;
    case 'W': {
      scps_client_options probe;
      scps_error werr;
      scps_client_options_init(&probe);
      if (scps_client_options_set_wire_format(&probe, optarg, &werr)) {
        fprintf(stderr, "scps-bench-client: --wire-format: %s\n%s", werr.msg, usage);
        return 2;
      }
      wire = optarg;
      break;
    }
    case 'A':
      if (scps_answer_mode_from_name(optarg, &answer)) {
        fputs(usage, stderr);
        return 2;
      }
      break;
    case 'G':
      if (scps_gradient_mode_from_name(optarg, &gradients)) {
        fputs(usage, stderr);
        return 2;
      }
      break;
    case 'S':
      if (strcmp(optarg, "auto") && strcmp(optarg, "off")) {
        fputs(usage, stderr);
        return 2;
      }
      shm = strcmp(optarg, "off") ? SCPS_SHM_AUTO : SCPS_SHM_OFF;
      break;
    case 'V': use_view = true; break;
    case 'h': fputs(usage, stdout); return 0;
    default: fputs(usage, stderr); return 2;
    }
  }
  int train = !strcmp(mode, "train"), pipelined = !strcmp(mode, "pipelined"), ckpt = !strcmp(mode, "checkpoint");
  if (!servers_arg || !workload || batches < 1 || batches > MAX_BATCHES || warmup < 0 || prep_threads < 1 ||
      prep_threads > SCPS_PREP_MAX_THREADS || depth < 1 || depth > 64 || rounds < 1 || rounds > MAX_ROUNDS || (depth > 1 && (pipelined || ckpt)) ||
      (n_server_pids && (depth > 1 || pipelined || ckpt)) ||
      (!train && !pipelined && !ckpt && strcmp(mode, "lookup"))) {
    fputs(usage, stderr);
    return 2;
  }
  const char *servers[256];
  int n_servers = 0;
  for (char *tok = strtok(servers_arg, ","); tok && n_servers < 256; tok = strtok(NULL, ",")) servers[n_servers++] = tok;
  scps_error err;
  scps_workload *w = NULL;
  scps_client *c = NULL;
  scps_workload_gen *gen = NULL;
  scps_batch *b = NULL;
  int rc = scps__workload_load(workload, &w, &err);
  if (!rc) {
    scps_client_options co;
    scps_client_options_init(&co);
    co.servers = servers;
    co.n_servers = n_servers;
    co.policy = SCPS_LIMIT_ERROR;
    co.prep_threads = (int)prep_threads;
    scps_client_options_set_wire_format(&co, wire, NULL);
    co.answer = answer;
    co.gradients = gradients;
    co.shared_memory = shm;
    rc = scps_client_create(&co, &c, &err);
  }
  if (!rc) rc = scps__workload_gen_create(w, 1, &gen, &err);
  if (!rc) rc = scps_batch_create(c, &b, &err);
  if (rc) {
    fprintf(stderr, "scps-bench-client: %s\n", err.msg);
    return 1;
  }
  const scps_layout *l = scps__client_layout(c);
  /* The workloads keep the default limits (256 per table), far below what a
   * dlrm8 batch sends one partition; like the engine benchmark, measure with
   * limits no batch reaches rather than with dropped ids: the servers'
   * (adopted at connect, and enforced), which the benchmark scripts start
   * with --partition-limits. */
  int nf = l->n_features, distinct = 4;
  stored st[4];
  memset(st, 0, sizeof st);
  for (int k = 0; k < distinct; k++) {
    scps__workload_gen_next(gen);
    if (store(scps__workload_gen_inputs(gen), nf, w->batch_size, &st[k])) {
      fprintf(stderr, "scps-bench-client: out of memory\n");
      return 1;
    }
  }
  float **acts = calloc((size_t)nf, sizeof *acts), **grads = calloc((size_t)nf, sizeof *grads);
  int64_t ids = 0;
  for (int f = 0; f < nf; f++) {
    size_t n = (size_t)w->batch_size * (size_t)l->table_specs[l->features[f].table].embedding_dim;
    acts[f] = malloc(sizeof(float) * n);
    grads[f] = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) grads[f][i] = 1e-3f * (float)((int)(i % 7) - 3);
    ids += (int64_t)st[0].in[f].n_ids;
  }
  if (ckpt) {
    rc = bench_checkpoint(c, b, st, acts, grads, batches, rounds, plain, w->name, &err);
    if (rc) {
      fprintf(stderr, "scps-bench-client: %s\n", err.msg);
      return 1;
    }
  } else if (pipelined) {
    const scps_feature_input *ins[4];
    size_t *sizes = calloc((size_t)nf, sizeof *sizes);
    for (int k = 0; k < distinct; k++) ins[k] = st[k].in;
    for (int f = 0; sizes && f < nf; f++)
      sizes[f] = sizeof(float) * (size_t)w->batch_size * (size_t)l->table_specs[l->features[f].table].embedding_dim;
    replay r = {ins, distinct, (const float *const *)grads, nf, sizes};
    scps_train_hooks h = {.inputs = replay_inputs, .compute = replay_compute};
    scps_schedule_stats ss;
    scps_train_options to;
    scps__train_options_init(&to);
    to.mode = SCPS_SCHEDULE_PIPELINED;
    to.steps = warmup;
    to.learning_rate = -1.0;
    to.deadline_ms = 60000;
    rc = scps__train_run(c, &to, &h, &r, &ss, &err);
    to.steps = batches;
    to.first_step = warmup;
    if (!rc) rc = scps__train_run(c, &to, &h, &r, &ss, &err);
    free(sizes);
    if (rc) {
      fprintf(stderr, "scps-bench-client: %s\n", err.msg);
      return 1;
    }
    double per = ss.wall_seconds / (double)batches;
    printf("{\"bench\": \"scps-client\", \"workload\": \"%s\", \"mode\": \"pipelined\", \"wire_format\": \"%s\", "
           "\"servers\": %d, \"batches\": %ld, \"ms_per_batch_median\": %.3f, \"samples_per_s\": %.0f, \"ids_per_s\": %.0f}\n",
           w->name, wire, n_servers, batches, per * 1e3, w->batch_size / per, (double)ids / per);
  } else {
    double wall = 0.0;
    uint64_t sent0 = 0, recv0 = 0, sent1, recv1;
    if (depth > 1) {
      size_t *sizes = calloc((size_t)nf, sizeof *sizes);
      for (int f = 0; sizes && f < nf; f++)
        sizes[f] = sizeof(float) * (size_t)w->batch_size * (size_t)l->table_specs[l->features[f].table].embedding_dim;
      rc = sizes ? time_depth(c, st, distinct, nf, sizes, warmup, batches, train, (int)depth, &wall, &sent0, &recv0, &err)
                 : scps_error_set(&err, SCPS_ENOMEM, "out of memory");
      free(sizes);
    } else {
      rc = time_steps(c, b, st, distinct, acts, grads, warmup, batches, train, &sent0, &recv0, &err);
    }
    if (rc) {
      fprintf(stderr, "scps-bench-client: %s\n", err.msg);
      return 1;
    }
    scps_client_traffic(c, &sent1, &recv1);
    uint64_t placed = placed_rx(c) - placed0;
    double med = t_step[batches / 2], per = depth > 1 ? wall / (double)batches : med;
    printf("{\"bench\": \"scps-client\", \"workload\": \"%s\", \"mode\": \"%s\", \"wire_format\": \"%s\", "
           "\"answer\": \"%s\", \"gradients\": \"%s\", \"servers\": %d, \"batches\": %ld, \"prep_threads\": %ld, \"depth\": %ld, "
           "\"ms_per_batch_median\": %.3f, \"samples_per_s\": %.0f, \"ids_per_s\": %.0f, \"prepare_ms_median\": %.3f, "
           "\"lookup_ms_median\": %.3f, \"push_ms_median\": %.3f, \"sent_bytes_per_batch\": %.0f, "
           "\"received_bytes_per_batch\": %.0f, \"placed_bytes_per_batch\": %.0f, \"shared_memory\": \"%s\", \"view\": %s",
           w->name, mode, wire, scps_answer_mode_name(answer),
           scps_gradient_mode_name(gradients), n_servers, batches, prep_threads,
           depth, med * 1e3,
           w->batch_size / per, (double)ids / per,
           t_prep[batches / 2] * 1e3, t_look[batches / 2] * 1e3, t_push[batches / 2] * 1e3,
           (double)(sent1 - sent0) / (double)batches, (double)(recv1 - recv0) / (double)batches,
           (double)placed / (double)batches, shm == SCPS_SHM_OFF ? "off" : "auto", use_view ? "true" : "false");
    if (n_server_pids) print_cpu(batches, recv1 - recv0 + placed);
    printf("}\n");
  }
  for (int f = 0; f < nf; f++) {
    free(acts[f]);
    free(grads[f]);
  }
  free(acts);
  free(grads);
  for (int k = 0; k < distinct; k++) {
    for (int f = 0; f < nf; f++) {
      free(st[k].offsets[f]);
      free(st[k].ids[f]);
      free(st[k].weights[f]);
    }
    free(st[k].in);
    free(st[k].offsets);
    free(st[k].ids);
    free(st[k].weights);
  }
  scps_batch_destroy(b);
  scps__workload_gen_destroy(gen);
  scps_client_destroy(c);
  scps__workload_destroy(w);
  return 0;
}
