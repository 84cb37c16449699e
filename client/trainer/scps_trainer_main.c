/* scps-trainer: the example trainer: a DLRM-style click model whose embeddings
 * live in an scps cluster and whose dense MLP (the TensorCore work) runs
 * here, trained on synthetic clicks from a planted model. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "scps_units.h"
#include "scps_clock.h"
#include "scps_security_flags.h"
#include "scps_confine.h"
#include "scps_ctr.h"
#include "scps_jsonw.h"
#include "scps_mlp.h"
#include "scps_memtune.h"
#include "scps_train.h"
#include "scps_version.h"

static const char usage[] =
    "usage: scps-trainer --servers HOST:PORT[,HOST:PORT...] --workload FILE [options]\n"
    "Trains a DLRM-style click model against an scps cluster: each feature's\n"
    "embedding comes from the servers, a ReLU MLP over their concatenation\n"
    "predicts the click, and sigmoid cross-entropy drives both. Data are\n"
    "synthetic clicks drawn from a planted model over the workload's ids\n"
    "(Zipf as the workload says), so the best achievable log-loss is known:\n"
    "the final line compares the trained model with it on held-out batches.\n"
    "The servers must serve the workload's tables and features. Training\n"
    "resumes at the step after the one the servers report (a restored\n"
    "checkpoint, or the last push they applied); the MLP and the data stream\n"
    "start afresh.\n"
    "\n"
    "  --servers LIST       scps-server addresses in process-index order\n"
    "  --workload FILE      workload JSON (tables, features, batch size, ids)\n"
    "  --steps N            training batches (default 2000)\n"
    "  --pipelined          one-step-stale pipeline: look up batch i and push\n"
    "                       batch i-2 while the MLP runs batch i-1 (default)\n"
    "  --sequential         look up, compute and push each batch in turn\n"
    "  --eval-batches N     held-out batches for the final evaluation (default 20)\n"
    "  --hidden LIST        MLP hidden widths (default 48,24)\n"
    "  --dense-lr X         Adam learning rate of the MLP (default 0.003)\n"
    "  --logit-std X        strength of the planted signal (default 1.5)\n"
    "  --deadline-ms N      deadline of every lookup and push (default 30000)\n"
    "  --connect-timeout-ms N  how long to wait for every server to answer\n"
    "                       GetConfig at start, retrying (default 10000)\n"
    "  --wire-format F      activations and gradients on the wire: float32\n"
    "                       (default), bfloat16 (bf16, half the bytes) or an\n"
    "                       eXmY format: e4m3, e5m2, e3m0s (s: a scale per\n"
    "                       row), e3m0b-2 (a bias); ACTS/GRADS gives each its\n"
    "                       own (e4m3/e3m0s)\n"
    "  --shared-memory M    auto (default): answers and gradients by sample\n"
    "                       through memory shared with servers on this host\n"
    "                       that offer it; off: all over the connections\n"
    "  --policy P           ids over a partition's limits (the servers' max_ids\n"
    "                       and max_unique_ids per partition): error (default)\n"
    "                       stops with a message naming the stack, partition and\n"
    "                       count; drop keeps the first ids of each partition and\n"
    "                       goes on, the final line counting the ids dropped\n"
    "  --json FILE          also write the final figures as JSON to FILE\n"
    "  --gradient-dump FILE write the embedding gradients of every 100th step to\n"
    "                       FILE (per feature: int32 width, int32 batch, then\n"
    "                       batch x width float32, little-endian), for\n"
    "                       scps-bench-exmy --stats --gradients FILE\n"
    "  --checkpoint-every-steps N  after the push of global steps N-1, 2N-1, ...\n"
    "                       (also when resumed), save a cluster checkpoint of the\n"
    "                       embeddings (tables, slots, limits), each reported on\n"
    "                       stderr; default 0: none\n"
    "  --checkpoint-dir DIR where, relative to the servers' --checkpoint-dir\n"
    "                       (default: that directory itself; servers without\n"
    "                       one refuse); saves sooner than the servers'\n"
    "                       --checkpoint-min-interval after the last are refused\n"
    "                       and stop the run\n"
    "  --help               this text\n"
    "  --version            print the version and exit\n"
    SCPS_SECURITY_USAGE
    "\n"
    "Exit status: 0 when training finished, 1 on an error from the cluster or\n"
    "the data (a token refused included), 2 for bad flags.\n";

#define MAX_HIDDEN 6

typedef struct trainer {
  int n_features;
  scps_ctr *data;
  scps_mlp *mlp;
  int32_t batch, width;    /* samples per batch, concatenated embedding width */
  int32_t *offsets;        /* per feature: first column in the concatenation */
  int32_t *dims;
  float *labels[SCPS_SCHEDULE_SLOTS];
  float *x, *logits, *dlogits, *dx;
  /* progress */
  int64_t steps, done;
  double loss_sum, window_loss;
  int64_t window_n;
  float *window_scores, *window_labels;
  int64_t window_fill, window_cap, window_pos;
  double t0, last_print;
  int tty;
  FILE *gradient_dump; /* --gradient-dump */
  int dump_failed;
} trainer;

/* Every 100th step's gradients, feature by feature (--gradient-dump). */
static void dump_gradients(trainer *t, float *const *grads) {
  if (!t->gradient_dump || t->done % 100 != 0) return;
  for (int f = 0; f < t->n_features && !t->dump_failed; f++) {
    const int32_t head[2] = {t->dims[f], t->batch};
    const size_t n = (size_t)t->dims[f] * (size_t)t->batch;
    t->dump_failed = fwrite(head, sizeof head, 1, t->gradient_dump) != 1 ||
                     fwrite(grads[f], sizeof(float), n, t->gradient_dump) != n;
  }
}

static int hook_inputs(void *ud, int64_t batch, const scps_feature_input **in, scps_error *err) {
  trainer *t = ud;
  scps__ctr_next(t->data);
  memcpy(t->labels[batch % SCPS_SCHEDULE_SLOTS], scps__ctr_labels(t->data), sizeof(float) * (size_t)t->batch);
  *in = scps__ctr_inputs(t->data);
  return 0;
}

/* Row r of the MLP input is the concatenation of every feature's embedding. */
static void gather_inputs(trainer *t, float *const *acts) {
  for (int f = 0; f < t->n_features; f++)
    for (int32_t r = 0; r < t->batch; r++)
      memcpy(t->x + (size_t)r * (size_t)t->width + (size_t)t->offsets[f], acts[f] + (size_t)r * (size_t)t->dims[f],
             sizeof(float) * (size_t)t->dims[f]);
}

static void progress(trainer *t, int final) {
  double tn = scps__clock_s();
  if (!final && tn - t->last_print < (t->tty ? 0.25 : 5.0)) return;
  t->last_print = tn;
  double auc = scps__auc(t->window_scores, t->window_labels, t->window_fill);
  double loss = t->window_n ? t->window_loss / (double)t->window_n : 0;
  double rate = (double)(t->done * t->batch) / (tn - t->t0);
  int width = 30, fill = (int)(width * t->done / (t->steps ? t->steps : 1));
  char bar[64];
  for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '-';
  bar[width] = '\0';
  fprintf(stderr, "%s[%s] step %lld/%lld  loss %.4f  auc %.4f  %.0f samples/s%s", t->tty ? "\r" : "", bar,
          (long long)t->done, (long long)t->steps, loss, auc, rate, t->tty && !final ? "" : "\n");
  t->window_loss = 0;
  t->window_n = 0;
}

/* On a terminal the progress line is being redrawn: start a line of our own. */
static void hook_checkpointed(void *ud, const scps_client_checkpoint_result *res) {
  const trainer *t = ud;
  fprintf(stderr, "%sscps-trainer: checkpoint of step %lld saved: %.1f MB in %d files, %.2f s, %s\n",
          t->tty ? "\n" : "", (long long)res->step, (double)res->bytes / 1e6, res->files, res->seconds, res->path);
}

static int hook_compute(void *ud, int64_t batch, float *const *acts, float *const *grads, scps_error *err) {
  trainer *t = ud;
  const float *labels = t->labels[batch % SCPS_SCHEDULE_SLOTS];
  gather_inputs(t, acts);
  scps__mlp_forward(t->mlp, t->x, t->batch, t->logits);
  double loss = scps__bce_with_logits(t->logits, labels, t->batch, t->dlogits);
  scps__mlp_backward(t->mlp, t->dlogits, t->batch, t->dx);
  scps__mlp_step(t->mlp);
  for (int f = 0; f < t->n_features; f++)
    for (int32_t r = 0; r < t->batch; r++)
      memcpy(grads[f] + (size_t)r * (size_t)t->dims[f], t->dx + (size_t)r * (size_t)t->width + (size_t)t->offsets[f],
             sizeof(float) * (size_t)t->dims[f]);
  dump_gradients(t, grads);
  /* A sliding window of recent predictions for the progress line's AUC. */
  for (int32_t r = 0; r < t->batch; r++) {
    int64_t k = t->window_pos++ % t->window_cap;
    t->window_scores[k] = t->logits[r];
    t->window_labels[k] = labels[r];
  }
  if (t->window_fill < t->window_cap) t->window_fill = t->window_pos < t->window_cap ? t->window_pos : t->window_cap;
  t->loss_sum += loss;
  t->window_loss += loss;
  t->window_n++;
  t->done++;
  progress(t, 0);
  return 0;
}

static int parse_hidden(const char *s, int32_t *out, int *n) {
  *n = 0;
  while (*s && *n < MAX_HIDDEN) {
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || v < 1 || v > 4096) return -1;
    out[(*n)++] = (int32_t)v;
    s = *end == ',' ? end + 1 : end;
    if (*end && *end != ',') return -1;
  }
  return *s ? -1 : 0;
}

/* Looks up held-out batches (no pushes) and scores them with the trained
 * and the planted model. */
static int evaluate(scps_client *c, trainer *t, const scps_workload *w, int batches, double logit_std,
                    int64_t deadline_ms, double *loss, double *auc, double *planted_loss, double *planted_auc,
                    scps_error *err) {
  scps_ctr *held = NULL;
  scps_batch *b = NULL;
  int64_t n = (int64_t)batches * t->batch;
  float *scores = malloc(sizeof(float) * (size_t)n), *pscores = malloc(sizeof(float) * (size_t)n);
  float *labels = malloc(sizeof(float) * (size_t)n);
  float **acts = calloc((size_t)t->n_features, sizeof *acts);
  int rc = scores && pscores && labels && acts ? 0 : scps_error_set(err, SCPS_ENOMEM, "out of memory");
  for (int f = 0; !rc && f < t->n_features; f++)
    if (!(acts[f] = malloc(sizeof(float) * (size_t)t->batch * (size_t)t->dims[f])))
      rc = scps_error_set(err, SCPS_ENOMEM, "out of memory");
  if (!rc) rc = scps__ctr_create(w, 0x4e1d07, logit_std, &held, err);
  if (!rc) rc = scps_batch_create(c, &b, err);
  double sum = 0, psum = 0;
  for (int k = 0; !rc && k < batches; k++) {
    scps__ctr_next(held);
    rc = scps_client_prepare(c, scps__ctr_inputs(held), b, err);
    if (!rc) rc = scps_client_lookup(c, b, acts, deadline_ms, err);
    if (rc) break;
    gather_inputs(t, acts);
    scps__mlp_forward(t->mlp, t->x, t->batch, t->logits);
    const float *y = scps__ctr_labels(held), *p = scps__ctr_probs(held);
    sum += scps__bce_with_logits(t->logits, y, t->batch, NULL) * t->batch;
    for (int32_t r = 0; r < t->batch; r++) {
      int64_t i = (int64_t)k * t->batch + r;
      scores[i] = t->logits[r];
      pscores[i] = p[r];
      labels[i] = y[r];
      psum -= y[r] > 0.5f ? log(p[r]) : log1p(-p[r]);
    }
  }
  if (!rc) {
    *loss = sum / (double)n;
    *planted_loss = psum / (double)n;
    *auc = scps__auc(scores, labels, n);
    *planted_auc = scps__auc(pscores, labels, n);
  }
  for (int f = 0; acts && f < t->n_features; f++) free(acts[f]);
  free(acts);
  free(scores);
  free(pscores);
  free(labels);
  scps_batch_destroy(b);
  scps__ctr_destroy(held);
  return rc;
}

/* Whole-string integer in [lo, hi], or a message naming the flag. */
static int parse_long(const char *flag, const char *s, long lo, long hi, long *out) {
  scps_error e;
  if (!scps__parse_long(flag, s, lo, hi, out, &e)) return 0;
  fprintf(stderr, "scps-trainer: %s\n", e.msg);
  return -1;
}

/* A --checkpoint-dir the servers may take: relative to theirs. */
static int check_checkpoint_dir(const char *s) {
  scps_error e;
  if (!scps__confine_check("--checkpoint-dir", s, 4000, &e)) return 0;
  fprintf(stderr, "scps-trainer: %s\n", e.msg);
  return -1;
}

/* Whole-string finite number > 0. */
static int parse_positive(const char *flag, const char *s, double *out) {
  char *end;
  double v = strtod(s, &end);
  if (end == s || *end || !isfinite(v) || !(v > 0)) {
    fprintf(stderr, "scps-trainer: %s '%s': expected a finite number > 0\n", flag, s);
    return -1;
  }
  *out = v;
  return 0;
}

int main(int argc, char **argv) {
  char *servers_arg = NULL;
  const char *workload = NULL, *json = NULL, *gradient_dump = NULL;
  long steps = 2000, eval_batches = 20, deadline = 30000, checkpoint_every = 0, connect_timeout = 10000;
  const char *checkpoint_dir = NULL;
  const char *wire = "float32";
  scps_shm_mode shm = SCPS_SHM_AUTO;
  scps_limit_policy policy = SCPS_LIMIT_ERROR;
  scps_memtune_apply();
  double dense_lr = 0.003, logit_std = 1.5;
  int32_t hidden[MAX_HIDDEN] = {48, 24};
  int n_hidden = 2;
  scps_schedule_mode mode = SCPS_SCHEDULE_PIPELINED;
  static const struct option opts[] = {
      {"servers", required_argument, 0, 's'},   {"workload", required_argument, 0, 'w'},
      {"steps", required_argument, 0, 'n'},     {"pipelined", no_argument, 0, 'p'},
      {"sequential", no_argument, 0, 'q'},      {"eval-batches", required_argument, 0, 'e'},
      {"hidden", required_argument, 0, 'H'},    {"dense-lr", required_argument, 0, 'l'},
      {"logit-std", required_argument, 0, 'z'}, {"deadline-ms", required_argument, 0, 'd'},
      {"json", required_argument, 0, 'j'},      {"checkpoint-every-steps", required_argument, 0, 'c'},
      {"checkpoint-dir", required_argument, 0, 'C'}, {"help", no_argument, 0, 'h'},
      {"version", no_argument, 0, 'V'},
      {"wire-format", required_argument, 0, 'W'}, {"connect-timeout-ms", required_argument, 0, 'T'},
      {"shared-memory", required_argument, 0, 'M'},
      {"policy", required_argument, 0, 'P'},     {"gradient-dump", required_argument, 0, 'G'},
      SCPS_SECURITY_LONG_OPTIONS,
      {0, 0, 0, 0}};
  static scps_security_flags sec; /* static: reachable whichever way main returns */
  int o;
  while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (o) {
    case 's': servers_arg = optarg; break;
    case 'w': workload = optarg; break;
    case 'n': if (parse_long("--steps", optarg, 1, LONG_MAX, &steps)) return 2; break;
    case 'p': mode = SCPS_SCHEDULE_PIPELINED; break;
    case 'q': mode = SCPS_SCHEDULE_SEQUENTIAL; break;
    case 'e': if (parse_long("--eval-batches", optarg, 1, 1000000, &eval_batches)) return 2; break;
    case 'H':
      if (parse_hidden(optarg, hidden, &n_hidden)) {
        fprintf(stderr, "scps-trainer: --hidden '%s': expected widths like 64,32\n", optarg);
        return 2;
      }
      break;
    case 'l': if (parse_positive("--dense-lr", optarg, &dense_lr)) return 2; break;
    case 'z': if (parse_positive("--logit-std", optarg, &logit_std)) return 2; break;
    case 'd': if (parse_long("--deadline-ms", optarg, 1, 86400000, &deadline)) return 2; break;
    case 'T': if (parse_long("--connect-timeout-ms", optarg, 1, 86400000, &connect_timeout)) return 2; break;
    case 'j': json = optarg; break;
    case 'G': gradient_dump = optarg; break;
    case 'M':
      if (strcmp(optarg, "auto") && strcmp(optarg, "off")) {
        fprintf(stderr, "scps-trainer: --shared-memory '%s': expected auto or off\n", optarg);
        return 2;
      }
      shm = strcmp(optarg, "off") ? SCPS_SHM_AUTO : SCPS_SHM_OFF;
      break;
    case 'W': {
      scps_client_options probe;
      scps_error e;
      scps_client_options_init(&probe);
      if (scps_client_options_set_wire_format(&probe, optarg, &e)) {
        fprintf(stderr, "scps-trainer: --wire-format: %s\n", e.msg);
        return 2;
      }
      wire = optarg;
      break;
    }
    case 'P':
      if (scps_limit_policy_from_name(optarg, &policy)) {
        fprintf(stderr, "scps-trainer: --policy '%s': expected error or drop\n", optarg);
        return 2;
      }
      break;
    case 'c': if (parse_long("--checkpoint-every-steps", optarg, 0, LONG_MAX, &checkpoint_every)) return 2; break;
    case 'C':
      /* Checked now, not at the first checkpoint after hundreds of steps. */
      if (check_checkpoint_dir(optarg)) return 2;
      checkpoint_dir = optarg;
      break;
    case 'h': fputs(usage, stdout); return 0;
    case 'V': printf("scps-trainer %s\n", scps_version()); return 0;
    default: {
      scps_error e;
      int handled = scps__security_flags_parse(&sec, "scps-trainer", o, optarg, &e);
      if (handled < 0) fprintf(stderr, "scps-trainer: %s\n", e.msg);
      if (handled <= 0) {
        if (!handled) fputs(usage, stderr);
        scps__security_flags_free(&sec);
        return 2;
      }
    }
    }
  }
  if (optind < argc) {
    fprintf(stderr, "scps-trainer: unexpected argument '%s' (options start with --; try --help)\n", argv[optind]);
    return 2;
  }
  if (!servers_arg || !workload) {
    fprintf(stderr, "scps-trainer: --servers and --workload are required\n%s", usage);
    return 2;
  }
  const char *servers[1024];
  int n_servers;
  scps_error err;
  if (scps_address_list_split(servers_arg, servers, 1024, &n_servers, &err)) {
    fprintf(stderr, "scps-trainer: --servers: %s\n", err.msg);
    return 2;
  }
  scps_workload *w = NULL;
  scps_client *c = NULL;
  trainer t;
  memset(&t, 0, sizeof t);
  scps_jsonw expected;
  scps__jsonw_init(&expected);
  int rc = scps__workload_load(workload, &w, &err);
  /* The servers must serve the workload's tables and features: libscps
   * compares them, in the workload format, with what the servers declare. */
  if (!rc) rc = scps__workload_write_specs(w->tables, w->n_tables, w->features, w->n_features, &expected, &err);
  if (!rc) rc = scps__jsonw_finish(&expected, "the expected declaration", &err);
  if (!rc) {
    scps_client_options co;
    scps_client_options_init(&co);
    co.servers = servers;
    co.n_servers = n_servers;
    co.expected_config = expected.buf;
    co.policy = policy;
    scps_client_options_set_wire_format(&co, wire, NULL);
    co.shared_memory = shm;
    co.connect_timeout_ms = connect_timeout;
    co.security = sec.security;
    rc = scps_client_create(&co, &c, &err);
  }
  if (!rc) {
    t.n_features = scps_client_n_features(c);
    t.batch = scps_client_batch_size(c);
    t.steps = steps;
    t.offsets = calloc((size_t)w->n_features, sizeof *t.offsets);
    t.dims = calloc((size_t)w->n_features, sizeof *t.dims);
    for (int f = 0; t.offsets && t.dims && f < w->n_features; f++) {
      t.dims[f] = scps_client_feature_width(c, f);
      t.offsets[f] = t.width;
      t.width += t.dims[f];
    }
    for (int k = 0; k < SCPS_SCHEDULE_SLOTS; k++) t.labels[k] = malloc(sizeof(float) * (size_t)t.batch);
    t.x = malloc(sizeof(float) * (size_t)t.batch * (size_t)t.width);
    t.dx = malloc(sizeof(float) * (size_t)t.batch * (size_t)t.width);
    t.logits = malloc(sizeof(float) * (size_t)t.batch);
    t.dlogits = malloc(sizeof(float) * (size_t)t.batch);
    t.window_cap = 16 * (int64_t)t.batch;
    t.window_scores = malloc(sizeof(float) * (size_t)t.window_cap);
    t.window_labels = malloc(sizeof(float) * (size_t)t.window_cap);
    if (!t.offsets || !t.dims || !t.labels[0] || !t.labels[1] || !t.labels[2] || !t.x || !t.dx || !t.logits ||
        !t.dlogits || !t.window_scores || !t.window_labels)
      rc = scps_error_set(&err, SCPS_ENOMEM, "out of memory");
  }
  if (!rc && gradient_dump && !(t.gradient_dump = fopen(gradient_dump, "wb")))
    rc = scps_error_set(&err, SCPS_EIO, "--gradient-dump '%s': %s", gradient_dump, strerror(errno));
  if (!rc) rc = scps__ctr_create(w, 1, logit_std, &t.data, &err);
  if (!rc) rc = scps__mlp_create(t.width, hidden, n_hidden, t.batch, dense_lr, 7, &t.mlp, &err);
  scps_schedule_stats st = {0};
  if (!rc) {
    fprintf(stderr, "scps-trainer: %s, %d features (%d embedding columns), batch %d, %d servers, %s\n", w->name,
            w->n_features, t.width, t.batch, n_servers, mode == SCPS_SCHEDULE_PIPELINED ? "pipelined" : "sequential");
    t.tty = isatty(2);
    t.t0 = t.last_print = scps__clock_s();
    int64_t first = scps_client_step(c) + 1;
    if (first > 0) fprintf(stderr, "scps-trainer: the servers hold step %lld; resuming at step %lld\n",
                           (long long)first - 1, (long long)first);
    scps_train_options to;
    scps__train_options_init(&to);
    to.mode = mode;
    to.steps = steps;
    to.first_step = first;
    to.deadline_ms = deadline;
    to.checkpoint_every_steps = checkpoint_every;
    to.checkpoint_dir = checkpoint_dir;
    scps_train_hooks hooks = {.inputs = hook_inputs, .compute = hook_compute, .checkpointed = hook_checkpointed};
    rc = scps__train_run(c, &to, &hooks, &t, &st, &err);
    progress(&t, 1);
  }
  double loss = 0, auc = 0, ploss = 0, pauc = 0;
  if (!rc) rc = evaluate(c, &t, w, (int)eval_batches, logit_std, deadline, &loss, &auc, &ploss, &pauc, &err);
  if (!rc && !(isfinite(loss) && isfinite(auc)))
    rc = scps_error_set(&err, SCPS_EINVAL, "training diverged: held-out log-loss %g, AUC %g (lower --dense-lr "
                        "%g?)", loss, auc, dense_lr);
  if (!rc) {
    double sps = (double)(st.steps * t.batch) / st.wall_seconds;
    printf("scps-trainer: %s %lld steps in %.2f s: %.0f samples/s (SparseCore lane busy %.2f s, TensorCore "
           "%.2f s); held-out log-loss %.4f vs planted %.4f (%+.2f%%), AUC %.4f vs planted %.4f\n",
           mode == SCPS_SCHEDULE_PIPELINED ? "pipelined" : "sequential", (long long)st.steps, st.wall_seconds, sps,
           st.sc_busy_seconds, st.tc_busy_seconds, loss, ploss, 100.0 * (loss - ploss) / ploss, auc, pauc);
    if (policy == SCPS_LIMIT_DROP)
      printf("scps-trainer: %lld ids dropped over the partition limits (--policy drop)\n",
             (long long)scps_client_ids_dropped(c));
    if (json) {
      FILE *f = fopen(json, "w");
      bool ok = f != NULL;
      if (f) {
        ok = fprintf(f,
                "{\"mode\": \"%s\", \"wire_format\": \"%s\", \"steps\": %lld, \"batch\": %d, \"wall_seconds\": %.4f, \"samples_per_s\": %.1f, "
                "\"sc_busy_seconds\": %.4f, \"tc_busy_seconds\": %.4f, \"heldout_logloss\": %.6f, "
                "\"planted_logloss\": %.6f, \"heldout_auc\": %.6f, \"planted_auc\": %.6f}\n",
                mode == SCPS_SCHEDULE_PIPELINED ? "pipelined" : "sequential", wire,
                (long long)st.steps, t.batch,
                st.wall_seconds, sps, st.sc_busy_seconds, st.tc_busy_seconds, loss, ploss, auc, pauc) > 0;
        ok = fclose(f) == 0 && ok;
      }
      if (!ok) {
        fprintf(stderr, "scps-trainer: cannot write --json '%s': %s\n", json, strerror(errno));
        rc = SCPS_EIO;
      }
    }
  } else {
    fprintf(stderr, "scps-trainer: %s: %s\n", scps_strerror(rc), err.msg);
  }
  if (t.gradient_dump && (fclose(t.gradient_dump) != 0 || t.dump_failed) && !rc) {
    fprintf(stderr, "scps-trainer: cannot write --gradient-dump '%s'\n", gradient_dump);
    rc = SCPS_EIO;
  }
  scps__mlp_destroy(t.mlp);
  scps__ctr_destroy(t.data);
  for (int k = 0; k < SCPS_SCHEDULE_SLOTS; k++) free(t.labels[k]);
  free(t.x);
  free(t.dx);
  free(t.logits);
  free(t.dlogits);
  free(t.window_scores);
  free(t.window_labels);
  free(t.offsets);
  free(t.dims);
  scps_client_destroy(c);
  scps__workload_destroy(w);
  scps__jsonw_free(&expected);
  scps__security_flags_free(&sec);
  return rc ? 1 : 0;
}
