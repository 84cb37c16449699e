/* Checkpoints through real scps-server processes and libscps: resume after
 * kill -9 equal bitwise to an uninterrupted run, 2x2 -> 3x1 -> 1x4 online
 * resharding, a flipped byte in any file refused, bad Checkpoint requests,
 * lookups served during a save, kill -9 during a save, the timer, two
 * processes pruning one root. Steps across processes: one restarted from an
 * older checkpoint is refused at connect and 'scps-admin checkpoint
 * restore' brings the cluster to a common step, equal to an uninterrupted
 * run; kill -9 at random moments never leaves a silently mixed cluster;
 * SIGTERM under a train load loses no acknowledged push; a trainer that
 * keeps running while a process restarts has its next push refused. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "scps_client_engine.h"
#include "scps_it.h"
#include "scps_test.h"

#define B 32
#define N_BEFORE 4 /* steps trained before the checkpoint */
#define M_AFTER 3  /* steps trained after the restore */
#define DEADLINE_MS 20000
#define MAX_F 2

/* Adagrad and Adam: resuming needs the slots (and Adam the step). Both
 * features ragged so probes can give every sample exactly one id. */
static const char config_json[] =
    "{\"name\": \"checkpoint-test\", \"batch_size\": 32, \"ids\": {\"distribution\": \"uniform\", \"seed\": 1},\n"
    " \"tables\": [\n"
    "  {\"name\": \"ta\", \"vocabulary_size\": 1000, \"embedding_dim\": 8, \"combiner\": \"sum\",\n"
    "   \"optimizer\": {\"type\": \"adagrad\", \"learning_rate\": 0.05}, \"initializer\": {\"type\": \"normal\", \"stddev\": 0.1}},\n"
    "  {\"name\": \"tb\", \"vocabulary_size\": 600, \"embedding_dim\": 16, \"combiner\": \"mean\",\n"
    "   \"optimizer\": {\"type\": \"adam\", \"learning_rate\": 0.01}, \"initializer\": {\"type\": \"uniform\", \"scale\": 0.1}}],\n"
    " \"features\": [{\"name\": \"fa\", \"table\": \"ta\", \"valency\": [0, 3]},\n"
    "              {\"name\": \"fb\", \"table\": \"tb\", \"valency\": [0, 3]}]}\n";

/* One big Adagrad table (about 90 MB of rows and slots) so a save takes long
 * enough to act during it. */
static const char big_json[] =
    "{\"name\": \"checkpoint-big\", \"batch_size\": 32, \"ids\": {\"distribution\": \"uniform\", \"seed\": 1},\n"
    " \"tables\": [{\"name\": \"big\", \"vocabulary_size\": 700000, \"embedding_dim\": 16, \"combiner\": \"sum\",\n"
    "   \"optimizer\": {\"type\": \"adagrad\", \"learning_rate\": 0.05}, \"initializer\": {\"type\": \"normal\", \"stddev\": 0.1}}],\n"
    " \"features\": [{\"name\": \"fbig\", \"table\": \"big\", \"valency\": [0, 3]}]}\n";

static const int64_t vocab_of[MAX_F] = {1000, 600};
static const int dim_of[MAX_F] = {8, 16};

typedef struct io {
  int nf;
  int64_t vocab[MAX_F];
  int dim[MAX_F];
  int64_t offsets[MAX_F][B + 1];
  int64_t ids[MAX_F][B * 3];
  scps_feature_input in[MAX_F];
  float *acts[MAX_F], *grads[MAX_F];
} io;

static void io_init(io *x, int nf, const int64_t *vocab, const int *dim) {
  memset(x, 0, sizeof *x);
  x->nf = nf;
  for (int f = 0; f < nf; f++) {
    x->vocab[f] = vocab[f];
    x->dim[f] = dim[f];
    x->acts[f] = calloc((size_t)B * (size_t)dim[f], sizeof(float));
    x->grads[f] = calloc((size_t)B * (size_t)dim[f], sizeof(float));
    x->in[f].form = SCPS_INPUT_RAGGED;
    x->in[f].row_offsets = x->offsets[f];
    x->in[f].ids = x->ids[f];
  }
}

static void io_free(io *x) {
  for (int f = 0; f < x->nf; f++) {
    free(x->acts[f]);
    free(x->grads[f]);
  }
}

static uint64_t mix(uint64_t a, uint64_t b, uint64_t c) {
  uint64_t h = a * 0x9e3779b97f4a7c15ull ^ (b + 0x632be59bd9b4e019ull) * 0xbf58476d1ce4e5b9ull ^ c * 0x94d049bb133111ebull;
  h ^= h >> 31;
  h *= 0xd6e8feb86659fd39ull;
  return h ^ (h >> 29);
}

/* The batch and gradients of a step: a pure function of the step. */
static void make_step(io *x, int64_t step) {
  for (int f = 0; f < x->nf; f++) {
    int64_t n = 0;
    for (int s = 0; s < B; s++) {
      x->offsets[f][s] = n;
      int k = 1 + (int)(mix((uint64_t)step, (uint64_t)f, (uint64_t)s) % 3);
      for (int j = 0; j < k; j++) x->ids[f][n++] = (int64_t)(mix((uint64_t)step, (uint64_t)f, (uint64_t)(s * 8 + j + 1000)) % (uint64_t)x->vocab[f]);
    }
    x->offsets[f][B] = n;
    x->in[f].n_ids = (size_t)n;
    for (int i = 0; i < B * x->dim[f]; i++)
      x->grads[f][i] = (float)((int)(mix((uint64_t)step, (uint64_t)f + 7, (uint64_t)i) % 2001) - 1000) * 1e-3f;
  }
}

/* One id per sample (the first of step `step`'s sample), so activations are
 * rows exactly, whatever the topology sums in which order. */
static void make_probe(io *x, int64_t step) {
  make_step(x, step);
  for (int f = 0; f < x->nf; f++) {
    for (int s = 0; s < B; s++) {
      x->ids[f][s] = x->ids[f][x->offsets[f][s]];
      x->offsets[f][s] = s;
    }
    x->offsets[f][B] = B;
    x->in[f].n_ids = B;
  }
}

static size_t acts_len(const io *x) {
  size_t n = 0;
  for (int f = 0; f < x->nf; f++) n += (size_t)B * (size_t)x->dim[f];
  return n;
}

static void acts_copy(const io *x, float *out) {
  for (int f = 0; f < x->nf; f++) {
    memcpy(out, x->acts[f], sizeof(float) * (size_t)B * (size_t)x->dim[f]);
    out += B * x->dim[f];
  }
}

static bool acts_equal(const io *x, const float *want) {
  for (int f = 0; f < x->nf; f++) {
    if (memcmp(x->acts[f], want, sizeof(float) * (size_t)B * (size_t)x->dim[f])) return false;
    want += B * x->dim[f];
  }
  return true;
}

static int connect_client(scps_it_cluster *cl, bool ignore_due, scps_client **c, scps_error *err) {
  scps_client_options o;
  scps_client_options_init(&o);
  o.servers = cl->addr_list;
  o.n_servers = cl->num_processes;
  o.ignore_checkpoint_due = ignore_due;
  o.connect_timeout_ms = 30000;
  return scps_client_create(&o, c, err);
}

/* Looks step `step` up into x->acts, then pushes its gradients, each call
 * within deadline_ms. */
static int train_step_within(scps_client *c, scps_batch *b, io *x, int64_t step, int64_t deadline_ms,
                             scps_error *err) {
  make_step(x, step);
  int rc = scps_client_prepare(c, x->in, b, err);
  if (!rc) rc = scps_client_lookup(c, b, x->acts, deadline_ms, err);
  if (!rc) rc = scps_client_apply_gradients(c, b, (const float *const *)x->grads, step, -1, deadline_ms, err);
  return rc;
}

static int train_step(scps_client *c, scps_batch *b, io *x, int64_t step, scps_error *err) {
  return train_step_within(c, b, x, step, DEADLINE_MS, err);
}

static int probe(scps_client *c, scps_batch *b, io *x, int64_t step, scps_error *err) {
  make_probe(x, step);
  int rc = scps_client_prepare(c, x->in, b, err);
  return rc ? rc : scps_client_lookup(c, b, x->acts, DEADLINE_MS, err);
}

static bool exists(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0;
}

static void sleep_ms(int ms) {
  struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

#define MUST(call)                                                  \
  do {                                                              \
    int must_rc_ = (call);                                          \
    CHECKF(must_rc_ == 0, "%s: %s", #call, err.msg);                \
    if (must_rc_) goto out;                                         \
  } while (0)

/* Results of the uninterrupted run. */
typedef struct reference {
  float *acts[N_BEFORE + M_AFTER]; /* lookups of every step, before its push */
  float *probe_before;             /* probe of step N_BEFORE-1 after N_BEFORE pushes */
  float *probe_after;              /* the same after one more push */
} reference;

static void reference_run(reference *ref) {
  scps_it_cluster cl;
  scps_client *c = NULL;
  scps_batch *b = NULL;
  scps_error err;
  io x;
  io_init(&x, 2, vocab_of, dim_of);
  size_t n = acts_len(&x);
  for (int i = 0; i < N_BEFORE + M_AFTER; i++) ref->acts[i] = calloc(n, sizeof(float));
  ref->probe_before = calloc(n, sizeof(float));
  ref->probe_after = calloc(n, sizeof(float));
  MUST(scps_it_init(&cl, config_json, 2, 2));
  MUST(scps_it_start(&cl));
  MUST(connect_client(&cl, false, &c, &err));
  CHECK(scps_client_step(c) == -1);
  MUST(scps_batch_create(c, &b, &err));
  for (int64_t s = 0; s < N_BEFORE + M_AFTER; s++) {
    if (s == N_BEFORE) {
      MUST(probe(c, b, &x, N_BEFORE - 1, &err));
      acts_copy(&x, ref->probe_before);
    }
    MUST(train_step(c, b, &x, s, &err));
    acts_copy(&x, ref->acts[s]);
    if (s == N_BEFORE) {
      MUST(probe(c, b, &x, N_BEFORE - 1, &err));
      acts_copy(&x, ref->probe_after);
    }
  }
out:
  scps_batch_destroy(b);
  scps_client_destroy(c);
  scps_it_stop(&cl);
  io_free(&x);
}

/* Bad Checkpoint requests: a clear error each, the server keeps serving.
 * Directories are relative to the servers' --checkpoint-dir (root). */
static void bad_requests(scps_it_cluster *cl, scps_client *c, scps_batch *b, io *x, const char *root) {
  scps_client_checkpoint_result res;
  scps_error err;
  char path[512];
  (void)cl;
  int rc = scps_client_checkpoint(c, N_BEFORE - 1, "/tmp/absolute", DEADLINE_MS, &res, &err);
  CHECKF(rc == SCPS_EINVAL && strstr(err.msg, "relative"), "absolute: %d %s", rc, err.msg);
  rc = scps_client_checkpoint(c, N_BEFORE - 1, "a/../../etc", DEADLINE_MS, &res, &err);
  CHECKF(rc == SCPS_EINVAL && strstr(err.msg, ".."), "dot-dot: %d %s", rc, err.msg);
  rc = scps_client_checkpoint(c, N_BEFORE - 1, "a\nb", DEADLINE_MS, &res, &err);
  CHECKF(rc == SCPS_EINVAL && strstr(err.msg, "control character"), "control: %d %s", rc, err.msg);
  /* A regular file where a directory should be. */
  snprintf(path, sizeof path, "%s/plainfile", root);
  FILE *f = fopen(path, "w");
  if (f) fclose(f);
  rc = scps_client_checkpoint(c, N_BEFORE - 1, "plainfile/ckpt", DEADLINE_MS, &res, &err);
  CHECKF(rc == SCPS_EMISMATCH && strstr(err.msg, "plainfile") && strstr(err.msg, "Not a directory"),
         "not a directory: %d %s", rc, err.msg);
  /* Unwritable: a read-only directory, for an ordinary user (root writes
   * there anyway, and cannot be sent outside the root to /sys any more). */
  if (geteuid() != 0) {
    snprintf(path, sizeof path, "%s/readonly", root);
    mkdir(path, 0555);
    rc = scps_client_checkpoint(c, N_BEFORE - 1, "readonly", DEADLINE_MS, &res, &err);
    CHECKF(rc == SCPS_EDENIED && strstr(err.msg, "PERMISSION_DENIED") && strstr(err.msg, path), "unwritable: %d %s", rc,
           err.msg);
  }
  /* A step already passed. */
  rc = scps_client_checkpoint(c, N_BEFORE - 2, NULL, DEADLINE_MS, &res, &err);
  CHECKF(rc == SCPS_EMISMATCH && strstr(err.msg, "already applied step"), "late step: %d %s", rc, err.msg);
  /* Still serving, and the good checkpoint is untouched. */
  rc = probe(c, b, x, 0, &err);
  CHECKF(rc == 0, "lookup after the bad requests: %s", err.msg);
  snprintf(path, sizeof path, "%s/step-%012d/manifest.p1.json", root, N_BEFORE - 1);
  CHECKF(exists(path), "%s is gone", path);
}

/* Train N_BEFORE steps on 2x2 with a checkpoint dir, checkpoint, bad
 * requests, kill -9 every server; restart (the newest checkpoint is found)
 * and train M_AFTER more: lookups bitwise equal to the reference. */
static void resume_run(const char *root, const reference *ref) {
  scps_it_cluster cl;
  scps_client *c = NULL;
  scps_batch *b = NULL;
  scps_error err;
  io x;
  io_init(&x, 2, vocab_of, dim_of);
  char flag_dir[600];
  snprintf(flag_dir, sizeof flag_dir, "%s", root);
  MUST(scps_it_init(&cl, config_json, 2, 2));
  cl.extra[0] = "--checkpoint-dir";
  cl.extra[1] = flag_dir;
  cl.extra[2] = "--checkpoint-min-interval"; /* the bad requests follow the save at once */
  cl.extra[3] = "0";
  MUST(scps_it_start(&cl));
  MUST(connect_client(&cl, false, &c, &err));
  MUST(scps_batch_create(c, &b, &err));
  for (int64_t s = 0; s < N_BEFORE; s++) MUST(train_step(c, b, &x, s, &err));
  /* Limits in force travel with the checkpoint. */
  MUST(scps__prep_set_limits(scps__client_prep(c), 0, 300, 290, &err));
  scps_client_checkpoint_result res;
  MUST(scps_client_checkpoint(c, N_BEFORE - 1, NULL, DEADLINE_MS, &res, &err));
  CHECK(res.step == N_BEFORE - 1 && res.bytes > 0 && res.files > 0 && strstr(res.path, "step-000000000003"));
  bad_requests(&cl, c, b, &x, root);
  scps_batch_destroy(b);
  b = NULL;
  scps_client_destroy(c);
  c = NULL;
  for (int i = 0; i < cl.num_processes; i++) scps_it_kill(&cl, i);
  MUST(scps_it_start(&cl));
  char log[8192];
  scps_it_read_log(&cl, 0, log, sizeof log);
  CHECKF(strstr(log, "restored step 3") && !strstr(log, "resharded"), "server 0 did not log its restore: %s", log);
  MUST(connect_client(&cl, false, &c, &err));
  CHECKF(scps_client_step(c) == N_BEFORE - 1, "servers' step %lld", (long long)scps_client_step(c));
  int32_t mi = 0, mu = 0;
  scps__prep_get_limits(scps__client_prep(c), 0, &mi, &mu);
  CHECKF(mi == 300 && mu == 290, "restored limits %d, %d", mi, mu);
  MUST(scps_batch_create(c, &b, &err));
  for (int64_t s = N_BEFORE; s < N_BEFORE + M_AFTER; s++) {
    MUST(train_step(c, b, &x, s, &err));
    CHECKF(acts_equal(&x, ref->acts[s]), "step %lld after the restore differs from the uninterrupted run",
           (long long)s);
  }
out:
  scps_batch_destroy(b);
  scps_client_destroy(c);
  scps_it_stop(&cl);
  io_free(&x);
}

/* Two processes saving under one root prune the same steps at about the
 * same moment: neither may report the other's removal as its failure, and
 * only the newest step is left (--checkpoint-keep 1). */
static void shared_root_run(const char *root) {
  scps_it_cluster cl;
  scps_client *c = NULL;
  scps_batch *b = NULL;
  scps_error err;
  io x;
  io_init(&x, 2, vocab_of, dim_of);
  MUST(scps_it_init(&cl, config_json, 2, 2));
  cl.extra[0] = "--checkpoint-dir";
  cl.extra[1] = root;
  cl.extra[2] = "--checkpoint-keep";
  cl.extra[3] = "1";
  cl.extra[4] = "--checkpoint-min-interval";
  cl.extra[5] = "0";
  MUST(scps_it_start(&cl));
  MUST(connect_client(&cl, false, &c, &err));
  MUST(scps_batch_create(c, &b, &err));
  enum { SAVES = 12 };
  for (int64_t s = 0; s < SAVES; s++) {
    MUST(train_step(c, b, &x, s, &err));
    scps_client_checkpoint_result res;
    MUST(scps_client_checkpoint(c, s, NULL, DEADLINE_MS, &res, &err));
  }
  for (int i = 0; i < cl.num_processes; i++) {
    char log[16384];
    scps_it_read_log(&cl, i, log, sizeof log);
    CHECKF(!strstr(log, "keeping the last"), "server %d reported a pruning failure: %s", i,
           strstr(log, "keeping the last"));
  }
  char path[700];
  for (int64_t s = 0; s < SAVES; s++) {
    snprintf(path, sizeof path, "%s/step-%012lld", root, (long long)s);
    CHECKF(exists(path) == (s == SAVES - 1), "%s %s", path, exists(path) ? "kept" : "missing");
  }
out:
  scps_batch_destroy(b);
  scps_client_destroy(c);
  scps_it_stop(&cl);
  io_free(&x);
}

/* 2x2's checkpoint restored into 3x1, saved again by it, restored into 1x4:
 * every row equal (probes), then one more step equal (slots, step). */
static void reshard_run(const char *root1, const char *root2, const reference *ref) {
  scps_it_cluster cl;
  scps_client *c = NULL;
  scps_batch *b = NULL;
  scps_error err;
  io x;
  io_init(&x, 2, vocab_of, dim_of);
  char restore1[700], restore2[700];
  snprintf(restore1, sizeof restore1, "%s/step-%012d", root1, N_BEFORE - 1);
  snprintf(restore2, sizeof restore2, "%s/step-%012d", root2, N_BEFORE - 1);
  MUST(scps_it_init(&cl, config_json, 3, 1));
  cl.extra[0] = "--restore";
  cl.extra[1] = restore1;
  cl.extra[2] = "--checkpoint-dir";
  cl.extra[3] = root2;
  MUST(scps_it_start(&cl));
  MUST(connect_client(&cl, false, &c, &err));
  MUST(scps_batch_create(c, &b, &err));
  MUST(probe(c, b, &x, N_BEFORE - 1, &err));
  CHECKF(acts_equal(&x, ref->probe_before), "3x1 restored from 2x2: rows differ");
  char log[8192];
  scps_it_read_log(&cl, 2, log, sizeof log);
  CHECKF(strstr(log, "written by 2 x 2 SparseCores, resharded into 3 x 1"), "server 2's restore log: %s", log);
  scps_client_checkpoint_result res;
  MUST(scps_client_checkpoint(c, N_BEFORE - 1, NULL, DEADLINE_MS, &res, &err));
  scps_batch_destroy(b);
  b = NULL;
  scps_client_destroy(c);
  c = NULL;
  for (int i = 0; i < cl.num_processes; i++) scps_it_kill(&cl, i);
  cl.num_processes = 1;
  cl.sc_per_process = 4;
  cl.extra[1] = restore2;
  MUST(scps_it_start(&cl));
  MUST(connect_client(&cl, false, &c, &err));
  MUST(scps_batch_create(c, &b, &err));
  MUST(probe(c, b, &x, N_BEFORE - 1, &err));
  CHECKF(acts_equal(&x, ref->probe_before), "1x4 restored from 3x1: rows differ");
  MUST(train_step(c, b, &x, N_BEFORE, &err));
  MUST(probe(c, b, &x, N_BEFORE - 1, &err));
  CHECKF(acts_equal(&x, ref->probe_after), "1x4 after one more step: rows differ (slots or step not restored)");
out:
  scps_batch_destroy(b);
  scps_client_destroy(c);
  scps_it_stop(&cl);
  io_free(&x);
}

/* One flipped byte in each file of the 2x2 checkpoint: a 1x4 process (which
 * reads every file to reshard) refuses to start, naming the file. */
static void corruption_run(const char *root) {
  char dir[700];
  snprintf(dir, sizeof dir, "%s/step-%012d", root, N_BEFORE - 1);
  char cmd[800];
  snprintf(cmd, sizeof cmd, "ls %s", dir);
  FILE *ls = popen(cmd, "r");
  char names[32][128];
  int n = 0;
  while (ls && n < 32 && fgets(names[n], sizeof names[n], ls)) {
    names[n][strcspn(names[n], "\n")] = '\0';
    n++;
  }
  if (ls) pclose(ls);
  CHECKF(n >= 3, "only %d files in %s", n, dir);
  for (int i = 0; i < n; i++) {
    char path[900];
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    FILE *f = fopen(path, "r+b");
    if (!f) continue;
    fseek(f, 0, SEEK_END);
    long size = ftell(f), at = size / 2;
    fseek(f, at, SEEK_SET);
    int byte = fgetc(f);
    fseek(f, at, SEEK_SET);
    fputc(byte ^ 0x20, f);
    fclose(f);
    scps_it_cluster cl;
    if (scps_it_init(&cl, config_json, 1, 4) == 0) {
      cl.extra[0] = "--restore";
      cl.extra[1] = dir;
      int rc = scps_it_start(&cl);
      CHECKF(rc != 0, "a server restored %s with a flipped byte at %ld", names[i], at);
      char log[8192];
      scps_it_read_log(&cl, 0, log, sizeof log);
      CHECKF(strstr(log, names[i]) != NULL, "the refusal does not name %s: %s", names[i], log);
      scps_it_stop(&cl);
    }
    f = fopen(path, "r+b");
    if (f) {
      fseek(f, at, SEEK_SET);
      fputc(byte, f);
      fclose(f);
    }
  }
}

typedef struct saver_arg {
  scps_client *c;
  int64_t step;
  atomic_bool done;
  int rc;
  scps_error err;
} saver_arg;

static void *checkpoint_thread(void *p) {
  saver_arg *a = p;
  scps_client_checkpoint_result res;
  a->rc = scps_client_checkpoint(a->c, a->step, NULL, 120000, &res, &a->err);
  atomic_store(&a->done, true);
  return NULL;
}

/* Waits until path exists (a save has begun), up to 20 s. */
static bool wait_for(const char *path) {
  for (int i = 0; i < 2000; i++) {
    if (exists(path)) return true;
    sleep_ms(10);
  }
  return false;
}

/* A big table on one process: a lookup issued during a save completes
 * before it; kill -9 during the next save leaves the previous checkpoint,
 * which the restarted server restores. */
static void during_save_run(const char *root) {
  scps_it_cluster cl;
  scps_client *c = NULL;
  scps_batch *b = NULL;
  scps_error err;
  static const int64_t big_vocab[1] = {700000};
  static const int big_dim[1] = {16};
  io x;
  io_init(&x, 1, big_vocab, big_dim);
  size_t n = acts_len(&x);
  float *after0 = calloc(n, sizeof(float)), *after0_next = calloc(n, sizeof(float));
  char flag_dir[600], step_dir[700];
  snprintf(flag_dir, sizeof flag_dir, "%s", root);
  MUST(scps_it_init(&cl, big_json, 1, 2));
  cl.sc_memory = "256M";
  cl.extra[0] = "--checkpoint-dir";
  cl.extra[1] = flag_dir;
  cl.extra[2] = "--checkpoint-min-interval";
  cl.extra[3] = "0";
  MUST(scps_it_start(&cl));
  MUST(connect_client(&cl, false, &c, &err));
  MUST(scps_batch_create(c, &b, &err));
  MUST(train_step(c, b, &x, 0, &err));
  MUST(probe(c, b, &x, 0, &err));
  acts_copy(&x, after0);
  MUST(probe(c, b, &x, 1, &err)); /* rows step 1 will move */
  acts_copy(&x, after0_next);

  saver_arg a = {.c = c, .step = 0};
  pthread_t th;
  snprintf(step_dir, sizeof step_dir, "%s/step-%012d", root, 0);
  pthread_create(&th, NULL, checkpoint_thread, &a);
  CHECKF(wait_for(step_dir), "no save of step 0 began");
  MUST(probe(c, b, &x, 0, &err));
  CHECKF(!atomic_load(&a.done), "the lookup issued during the save finished only after it");
  /* A push during the save waits for it: step 0's checkpoint must not hold
   * any of step 1 (checked by the restore below). */
  MUST(train_step(c, b, &x, 1, &err));
  pthread_join(th, NULL);
  CHECKF(a.rc == 0, "checkpoint of step 0: %s", a.err.msg);
  /* The push above waited only for the copy, not for the write. */
  char log[8192];
  scps_it_read_log(&cl, 0, log, sizeof log);
  CHECKF(strstr(log, "ApplyGradients held for the ") && strstr(log, " s snapshot"),
         "the save of step 0 took no snapshot: %s", log);
  saver_arg a2 = {.c = c, .step = 1};
  snprintf(step_dir, sizeof step_dir, "%s/step-%012d", root, 1);
  pthread_create(&th, NULL, checkpoint_thread, &a2);
  CHECKF(wait_for(step_dir), "no save of step 1 began");
  scps_it_kill(&cl, 0);
  pthread_join(th, NULL);
  CHECKF(a2.rc != 0, "the save of step 1 finished before the kill; make the table bigger");
  scps_batch_destroy(b);
  b = NULL;
  scps_client_destroy(c);
  c = NULL;
  MUST(scps_it_start(&cl));
  MUST(connect_client(&cl, false, &c, &err));
  CHECKF(scps_client_step(c) == 0, "restored step %lld after a kill during the save of step 1",
         (long long)scps_client_step(c));
  MUST(scps_batch_create(c, &b, &err));
  MUST(probe(c, b, &x, 0, &err));
  CHECKF(acts_equal(&x, after0), "rows restored after the kill differ from step 0's");
  MUST(probe(c, b, &x, 1, &err));
  CHECKF(acts_equal(&x, after0_next), "step 0's checkpoint holds updates of step 1, pushed during its save");
  /* A deadline ends the call, not the save: the error must not claim the
   * step incomplete. The next Checkpoint waits for that save. */
  scps_client_checkpoint_result res;
  int rc = scps_client_checkpoint(c, 0, NULL, 5, &res, &err);
  CHECKF(rc == SCPS_ETIMEDOUT && strstr(err.msg, "may yet be complete") && !strstr(err.msg, "incomplete"),
         "checkpoint with a 5 ms deadline: %d %s", rc, err.msg);
  MUST(scps_client_checkpoint(c, 0, NULL, DEADLINE_MS, &res, &err));
out:
  scps_batch_destroy(b);
  scps_client_destroy(c);
  scps_it_stop(&cl);
  io_free(&x);
  free(after0);
  free(after0_next);
}

/* --checkpoint-every 1: pushes carry checkpoint_due and libscps saves the
 * cluster checkpoint of the push's step; a client that ignores the flag
 * gets solo saves on the step grid (--checkpoint-grid 10). */
static void timer_run(const char *root, bool ignore_due) {
  scps_it_cluster cl;
  scps_client *c = NULL;
  scps_batch *b = NULL;
  scps_error err;
  io x;
  io_init(&x, 2, vocab_of, dim_of);
  char flag_dir[600], manifest[800];
  snprintf(flag_dir, sizeof flag_dir, "%s", root);
  MUST(scps_it_init(&cl, config_json, 2, 1));
  cl.extra[0] = "--checkpoint-dir";
  cl.extra[1] = flag_dir;
  cl.extra[2] = "--checkpoint-every";
  cl.extra[3] = "1";
  cl.extra[4] = "--checkpoint-grid";
  cl.extra[5] = "10";
  MUST(scps_it_start(&cl));
  MUST(connect_client(&cl, ignore_due, &c, &err));
  MUST(scps_batch_create(c, &b, &err));
  scps_client_checkpoint_result res;
  int64_t step = 0;
  bool saved = false;
  for (; step < 60 && !saved; step++) {
    MUST(train_step(c, b, &x, step, &err));
    if (!ignore_due) saved = scps_client_auto_checkpoint(c, &res, &err) == 0;
    if (ignore_due) {
      for (int64_t k = 0; k <= step && !saved; k++) {
        snprintf(manifest, sizeof manifest, "%s/step-%012lld/manifest.p1.json", root, (long long)k);
        saved = exists(manifest);
      }
    }
    sleep_ms(100);
  }
  CHECKF(saved, "%s: no checkpoint within 60 pushes at 10 per second", ignore_due ? "solo" : "checkpoint_due");
  if (saved && !ignore_due) CHECKF(res.step == step - 1 && res.files > 0, "auto checkpoint of step %lld after push %lld",
                                   (long long)res.step, (long long)step - 1);
  if (saved && ignore_due) {
    char log[8192];
    scps_it_read_log(&cl, 1, log, sizeof log);
    CHECKF(strstr(log, "saved alone") != NULL, "the solo save is not logged: %s", log);
  }
out:
  scps_batch_destroy(b);
  scps_client_destroy(c);
  scps_it_stop(&cl);
  io_free(&x);
}

/* Every row of config_json's two tables. */
#define SNAPSHOT_FLOATS (1000 * 8 + 600 * 16)

/* Every row of both tables into out[SNAPSHOT_FLOATS]: lookups of one id per
 * sample (a sum combiner's gain 1; mean of one id is the row too). */
static int snapshot(scps_client *c, scps_batch *b, io *x, float *out, scps_error *err) {
  size_t at = 0;
  for (int f = 0; f < x->nf; f++)
    for (int64_t first = 0; first < x->vocab[f]; first += B) {
      int n = (int)(x->vocab[f] - first < B ? x->vocab[f] - first : B);
      for (int g = 0; g < x->nf; g++) {
        for (int s = 0; s <= B; s++) x->offsets[g][s] = g == f ? (s < n ? s : n) : 0;
        x->in[g].n_ids = g == f ? (size_t)n : 0;
      }
      for (int s = 0; s < n; s++) x->ids[f][s] = first + s;
      int rc = scps_client_prepare(c, x->in, b, err);
      if (!rc) rc = scps_client_lookup(c, b, x->acts, DEADLINE_MS, err);
      if (rc) return rc;
      memcpy(out + at, x->acts[f], sizeof(float) * (size_t)n * (size_t)x->dim[f]);
      at += (size_t)n * (size_t)x->dim[f];
    }
  return 0;
}

/* The tables of a cluster that trained steps 0..last without a crash. */
static int reference_tables(int64_t last, float *out) {
  scps_it_cluster cl;
  scps_client *c = NULL;
  scps_batch *b = NULL;
  scps_error err;
  io x;
  io_init(&x, 2, vocab_of, dim_of);
  int rc = -1;
  MUST(scps_it_init(&cl, config_json, 2, 2));
  MUST(scps_it_start(&cl));
  MUST(connect_client(&cl, true, &c, &err));
  MUST(scps_batch_create(c, &b, &err));
  for (int64_t s = 0; s <= last; s++) MUST(train_step(c, b, &x, s, &err));
  MUST(snapshot(c, b, &x, out, &err));
  rc = 0;
out:
  scps_batch_destroy(b);
  scps_client_destroy(c);
  scps_it_stop(&cl);
  io_free(&x);
  return rc;
}

/* The cluster's tables equal those of an uninterrupted run to step `step`. */
static void check_equals_reference(scps_client *c, int64_t step, const char *what) {
  float *got = calloc(SNAPSHOT_FLOATS, sizeof(float)), *want = calloc(SNAPSHOT_FLOATS, sizeof(float));
  scps_batch *b = NULL;
  scps_error err;
  io x;
  io_init(&x, 2, vocab_of, dim_of);
  MUST(scps_batch_create(c, &b, &err));
  MUST(snapshot(c, b, &x, got, &err));
  CHECKF(reference_tables(step, want) == 0, "%s: reference run to step %lld", what, (long long)step);
  CHECKF(!memcmp(got, want, sizeof(float) * SNAPSHOT_FLOATS),
         "%s: the tables differ from those of a cluster that trained steps 0..%lld without a crash", what,
         (long long)step);
out:
  scps_batch_destroy(b);
  io_free(&x);
  free(got);
  free(want);
}

/* Runs 'scps-admin ARGS' with the cluster's servers; its exit status, and
 * its output in buf. */
static int admin(const scps_it_cluster *cl, const char *args, char *buf, size_t len) {
  const char *bin = getenv("SCPS_ADMIN_BIN");
  if (!bin || !*bin) {
    snprintf(buf, len, "SCPS_ADMIN_BIN is not set (ctest sets it to the scps-admin binary)");
    return -1;
  }
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "%s %s --servers %s,%s 2>&1", bin, args, cl->addrs[0], cl->addrs[1]);
  FILE *p = popen(cmd, "r");
  if (!p) return -1;
  size_t n = fread(buf, 1, len - 1, p);
  buf[n] = '\0';
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* A 2x2 cluster saving under root, a client connected to it, and steps
 * 0..last trained with a cluster checkpoint after each step s where
 * s + 1 is a multiple of every. */
static int start_trained(scps_it_cluster *cl, const char *root, int64_t last, int64_t every, scps_client **c,
                         scps_batch **b, io *x, scps_error *err) {
  int rc = scps_it_init(cl, config_json, 2, 2);
  cl->extra[0] = "--checkpoint-dir";
  cl->extra[1] = root;
  if (!rc) rc = scps_it_start(cl);
  if (!rc) rc = connect_client(cl, true, c, err);
  if (!rc) rc = scps_batch_create(*c, b, err);
  for (int64_t s = 0; s <= last && !rc; s++) {
    rc = train_step(*c, *b, x, s, err);
    scps_client_checkpoint_result res;
    if (!rc && (s + 1) % every == 0) rc = scps_client_checkpoint(*c, s, NULL, DEADLINE_MS, &res, err);
  }
  return rc;
}

/* The reproduction: train 15 steps with a checkpoint every 10, kill
 * -9 server 1 and restart it (it restores step 9, server 0 holds 14). A new
 * client refuses, naming both steps; 'scps-admin checkpoint restore' brings
 * both to step 9; training resumes at 10 and its tables equal those of a
 * cluster that never crashed. */
static void restart_run(const char *root) {
  scps_it_cluster cl;
  scps_client *c = NULL;
  scps_batch *b = NULL;
  scps_error err;
  io x;
  io_init(&x, 2, vocab_of, dim_of);
  char out_text[8192];
  MUST(start_trained(&cl, root, 14, 10, &c, &b, &x, &err));
  scps_batch_destroy(b);
  b = NULL;
  scps_client_destroy(c);
  c = NULL;
  scps_it_kill(&cl, 1);
  MUST(scps_it_start_one(&cl, 1, 0, 1));
  int rc = connect_client(&cl, true, &c, &err);
  CHECKF(rc == SCPS_EMISMATCH && strstr(err.msg, "step 14") && strstr(err.msg, "step 9") &&
             strstr(err.msg, "scps-admin checkpoint restore"),
         "a client of servers holding steps 14 and 9: %d %s", rc, err.msg);
  if (!rc) {
    scps_client_destroy(c);
    c = NULL;
  }
  rc = admin(&cl, "checkpoint restore", out_text, sizeof out_text);
  CHECKF(rc == 0 && strstr(out_text, "every process holds step 9"), "scps-admin checkpoint restore: %d\n%s", rc,
         out_text);
  MUST(connect_client(&cl, true, &c, &err));
  CHECKF(scps_client_step(c) == 9, "after the restore the servers hold step %lld", (long long)scps_client_step(c));
  MUST(scps_batch_create(c, &b, &err));
  for (int64_t s = scps_client_step(c) + 1; s < 15; s++) MUST(train_step(c, b, &x, s, &err));
  check_equals_reference(c, 14, "restart, restore to step 9, steps 10..14 again");
out:
  scps_batch_destroy(b);
  scps_client_destroy(c);
  scps_it_stop(&cl);
  io_free(&x);
}

/* A trainer that runs until told to stop or until a call fails, saving a
 * cluster checkpoint after steps 4, 9, 14, ... */
typedef struct trainer {
  scps_it_cluster *cl;
  int64_t deadline_ms;
  atomic_bool stop;
  atomic_llong acked; /* the last step every server acknowledged; -1: none */
  atomic_int rc;      /* read by the thread that waits for the trainer */
  scps_error err;
} trainer;

static void *trainer_main(void *arg) {
  trainer *t = arg;
  scps_client *c = NULL;
  scps_batch *b = NULL;
  io x;
  io_init(&x, 2, vocab_of, dim_of);
  t->rc = connect_client(t->cl, true, &c, &t->err);
  if (!t->rc) t->rc = scps_batch_create(c, &b, &t->err);
  for (int64_t s = t->rc ? 0 : scps_client_step(c) + 1; !t->rc && !atomic_load(&t->stop); s++) {
    t->rc = train_step_within(c, b, &x, s, t->deadline_ms, &t->err);
    if (!t->rc) atomic_store(&t->acked, s);
    scps_client_checkpoint_result res;
    if (!t->rc && (s + 1) % 5 == 0) t->rc = scps_client_checkpoint(c, s, NULL, t->deadline_ms, &res, &t->err);
  }
  scps_batch_destroy(b);
  scps_client_destroy(c);
  io_free(&x);
  return NULL;
}

/* Starts t's trainer thread and waits (up to 60 s) until it has had step
 * `after` acknowledged; returns the step acknowledged by then. */
static int64_t trainer_start(trainer *t, scps_it_cluster *cl, pthread_t *th, int64_t after) {
  memset(t, 0, sizeof *t);
  t->cl = cl;
  t->deadline_ms = 3000;
  atomic_init(&t->stop, false);
  atomic_init(&t->acked, -1);
  pthread_create(th, NULL, trainer_main, t);
  double t0 = scps_it_now_ms();
  int64_t acked;
  while ((acked = atomic_load(&t->acked)) < after && scps_it_now_ms() - t0 < 60000 && !t->rc) sleep_ms(5);
  return acked;
}

/* After a crash or a stop: a client either refuses (steps differ, and the
 * restore command then brings them together) or connects to servers whose
 * tables are exactly those of an uninterrupted run to the step they hold.
 * Returns that step, or -1. */
static int64_t reconnect_checked(scps_it_cluster *cl, const char *what, bool may_differ) {
  scps_client *c = NULL;
  scps_error err;
  char out_text[8192];
  int rc = connect_client(cl, true, &c, &err);
  if (rc == SCPS_EMISMATCH && may_differ && strstr(err.msg, "different steps")) {
    printf("  %s: the client refused: %s\n", what, err.msg);
    rc = admin(cl, "checkpoint restore", out_text, sizeof out_text);
    CHECKF(rc == 0, "%s: scps-admin checkpoint restore: %d\n%s", what, rc, out_text);
    rc = connect_client(cl, true, &c, &err);
  }
  CHECKF(rc == 0, "%s: connect: %d %s", what, rc, err.msg);
  if (rc) return -1;
  int64_t step = scps_client_step(c);
  printf("  %s: the servers agree on step %lld\n", what, (long long)step);
  if (step >= 0) check_equals_reference(c, step, what);
  scps_client_destroy(c);
  return step;
}

/* kill -9 of one server at random moments of a training run (a few trials,
 * the cluster going on from where the previous one left it). */
static void random_kill_run(const char *root) {
  scps_it_cluster cl;
  scps_error err;
  MUST(scps_it_init(&cl, config_json, 2, 2));
  cl.extra[0] = "--checkpoint-dir";
  cl.extra[1] = root;
  MUST(scps_it_start(&cl));
  unsigned seed = (unsigned)time(NULL);
  printf("random kills: seed %u\n", seed);
  srand(seed);
  for (int trial = 0; trial < 4; trial++) {
    trainer t;
    pthread_t th;
    /* After the first checkpoint of the run, so that there is a step to
     * come back to. */
    trainer_start(&t, &cl, &th, 5);
    sleep_ms(rand() % 400);
    int victim = rand() % 2;
    printf("trial %d: kill -9 server %d after step %lld\n", trial, victim, (long long)atomic_load(&t.acked));
    scps_it_kill(&cl, victim);
    pthread_join(th, NULL);
    MUST(scps_it_start_one(&cl, victim, 0, 1));
    char what[64];
    snprintf(what, sizeof what, "kill -9 trial %d", trial);
    if (reconnect_checked(&cl, what, true) < 0) break;
  }
out:
  scps_it_stop(&cl);
}

/* SIGTERM to both servers (together, then 300 ms apart) while a trainer
 * pushes: both save the step they hold before exiting, so after a restart
 * they agree on a step at or after the last one acknowledged, with the
 * tables of an uninterrupted run to it. */
static void sigterm_run(const char *root) {
  scps_it_cluster cl;
  scps_error err;
  MUST(scps_it_init(&cl, config_json, 2, 2));
  cl.extra[0] = "--checkpoint-dir";
  cl.extra[1] = root;
  MUST(scps_it_start(&cl));
  for (int trial = 0; trial < 2; trial++) {
    trainer t;
    pthread_t th;
    int64_t from = trainer_start(&t, &cl, &th, 0);
    /* Off the trainer's checkpoint steps (4, 9, ...) by a few pushes. */
    while (atomic_load(&t.acked) < from + 7 && !t.rc) sleep_ms(1);
    kill(cl.pids[0], SIGTERM);
    if (trial == 1) sleep_ms(300);
    kill(cl.pids[1], SIGTERM);
    int st0 = scps_it_wait_exit(&cl, 0);
    int st1 = scps_it_wait_exit(&cl, 1);
    atomic_store(&t.stop, true);
    pthread_join(th, NULL);
    int64_t acked = atomic_load(&t.acked);
    printf("trial %d: SIGTERM after step %lld; exit status %d and %d\n", trial, (long long)acked, st0, st1);
    CHECKF(st0 == 0 && st1 == 0, "exit status %d and %d after SIGTERM", st0, st1);
    for (int i = 0; i < 2; i++) {
      char log[65536];
      scps_it_read_log(&cl, i, log, sizeof log);
      CHECKF(strstr(log, "before exiting"), "server %d does not log its save at exit:\n%s", i, log);
    }
    MUST(scps_it_start(&cl));
    char what[64];
    snprintf(what, sizeof what, "SIGTERM trial %d", trial);
    int64_t step = reconnect_checked(&cl, what, false);
    CHECKF(step >= acked, "%s: the servers hold step %lld, but step %lld was acknowledged", what, (long long)step,
           (long long)acked);
  }
out:
  scps_it_stop(&cl);
}

/* A trainer that keeps running while server 1 is killed and restarted from
 * an older checkpoint on the same port (gRPC reconnects by itself, and the
 * Lookup is retried until the server is back): its next push is refused by
 * the restarted process, naming the replaced state, instead of applied on
 * top of step 4 there and step 7 on server 0. */
static void running_trainer_run(const char *root) {
  scps_it_cluster cl;
  scps_client *c = NULL, *fresh = NULL;
  scps_batch *b = NULL;
  scps_error err;
  io x;
  io_init(&x, 2, vocab_of, dim_of);
  MUST(start_trained(&cl, root, 7, 5, &c, &b, &x, &err));
  scps_it_kill(&cl, 1);
  MUST(scps_it_start_one(&cl, 1, cl.ports[1], 1));
  int rc = train_step(c, b, &x, 8, &err);
  CHECKF(rc == SCPS_EMISMATCH && strstr(err.msg, "no longer holds the state this client connected to") &&
             strstr(err.msg, "step 4"),
         "a push of step 8 after server 1 restarted from step 4: %d %s", rc, err.msg);
  rc = connect_client(&cl, true, &fresh, &err);
  CHECKF(rc == SCPS_EMISMATCH && strstr(err.msg, "step 4"), "a new client after the refused push: %d %s", rc,
         err.msg);
out:
  scps_client_destroy(fresh);
  scps_batch_destroy(b);
  scps_client_destroy(c);
  scps_it_stop(&cl);
  io_free(&x);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  char scratch[] = "/tmp/scps-ckpt-test-XXXXXX";
  if (!mkdtemp(scratch)) {
    fprintf(stderr, "mkdtemp: %s\n", strerror(errno));
    return 1;
  }
  char root1[256], root2[256], root3[256], root4[256], root5[256], root6[256];
  snprintf(root1, sizeof root1, "%s/a", scratch);
  snprintf(root2, sizeof root2, "%s/b", scratch);
  snprintf(root3, sizeof root3, "%s/big", scratch);
  snprintf(root4, sizeof root4, "%s/timer", scratch);
  snprintf(root5, sizeof root5, "%s/solo", scratch);
  snprintf(root6, sizeof root6, "%s/shared", scratch);
  reference ref;
  memset(&ref, 0, sizeof ref);
  reference_run(&ref);
  resume_run(root1, &ref);
  reshard_run(root1, root2, &ref);
  corruption_run(root1);
  during_save_run(root3);
  timer_run(root4, false);
  timer_run(root5, true);
  shared_root_run(root6);
  char root7[256], root8[256], root9[256];
  snprintf(root7, sizeof root7, "%s/restart", scratch);
  snprintf(root8, sizeof root8, "%s/kills", scratch);
  snprintf(root9, sizeof root9, "%s/sigterm", scratch);
  restart_run(root7);
  random_kill_run(root8);
  sigterm_run(root9);
  char root10[256];
  snprintf(root10, sizeof root10, "%s/running", scratch);
  running_trainer_run(root10);
  for (int i = 0; i < N_BEFORE + M_AFTER; i++) free(ref.acts[i]);
  free(ref.probe_before);
  free(ref.probe_after);
  scps_it_remove_tree(scratch);
  return scps_test_finish("test_checkpoint_rpc");
}
