/* libscps when things go wrong: declarations that differ, servers listed in
 * the wrong order or missing, a server killed, stopped or restarted mid-run;
 * and the asynchronous API's callbacks. Nothing may hang past a deadline. */
#include <pthread.h>
#include <stddef.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "scps_client_engine.h"
#include "scps_it.h"
#include "scps_test.h"
#include "scps_workload.h"

#define SC_MEMORY ((int64_t)32 << 20) /* scps_it starts servers with --sc-memory 32M */
#define LONG_DEADLINE_MS 10000

static const char config_json[] =
    "{\"name\": \"failures\", \"batch_size\": 32,\n"
    " \"ids\": {\"distribution\": \"uniform\", \"seed\": 3},\n"
    " \"tables\": [\n"
    "  {\"name\": \"items\", \"vocabulary_size\": 600, \"embedding_dim\": 16, \"combiner\": \"mean\",\n"
    "   \"optimizer\": {\"type\": \"adagrad\", \"learning_rate\": 0.1}, \"initializer\": {\"type\": \"normal\", \"stddev\": 0.1}},\n"
    "  {\"name\": \"users\", \"vocabulary_size\": 300, \"embedding_dim\": 8, \"combiner\": \"sum\",\n"
    "   \"optimizer\": {\"type\": \"sgd\", \"learning_rate\": 0.1}, \"initializer\": {\"type\": \"uniform\", \"scale\": 0.1}}\n"
    " ],\n"
    " \"features\": [\n"
    "  {\"name\": \"clicked\", \"table\": \"items\", \"valency\": [0, 5], \"weighted\": true},\n"
    "  {\"name\": \"candidate\", \"table\": \"items\", \"valency\": 1},\n"
    "  {\"name\": \"user\", \"table\": \"users\", \"valency\": 1}\n"
    " ]}\n";

static scps_workload *w;

static bool contains(const char *s, const char *sub) { return strstr(s, sub) != NULL; }

typedef struct bufs {
  int n;
  float **acts, **grads;
} bufs;

static void bufs_init(bufs *b, const scps_layout *l) {
  b->n = l->n_features;
  b->acts = calloc((size_t)b->n, sizeof(float *));
  b->grads = calloc((size_t)b->n, sizeof(float *));
  for (int f = 0; f < b->n; f++) {
    size_t len = (size_t)l->feature_specs[f].batch_size * (size_t)l->table_specs[l->features[f].table].embedding_dim;
    b->acts[f] = calloc(len, sizeof(float));
    b->grads[f] = malloc(len * sizeof(float));
    for (size_t i = 0; i < len; i++) b->grads[f][i] = (float)((i * 7) % 13) * 0.01f - 0.06f;
  }
}

static void bufs_free(bufs *b) {
  for (int f = 0; f < b->n; f++) {
    free(b->acts[f]);
    free(b->grads[f]);
  }
  free(b->acts);
  free(b->grads);
}

static void declare(scps_client_expected *o, const scps_topology *topo, const scps_table_spec *tables) {
  o->topology = topo;
  o->tables = tables;
  o->n_tables = w->n_tables;
  o->features = w->features;
  o->n_features = w->n_features;
}

/* The public declaration check (expected_config, the workload format) and
 * what a trainer reads of the features, against cl (config_json's). */
static void test_expected_config(const scps_it_cluster *cl) {
  scps_error err;
  scps_client *c = NULL;
  scps_client_options o;
  scps_client_options_init(&o);
  o.servers = cl->addr_list;
  o.n_servers = 2;
  o.expected_config = config_json;
  CHECK_OK(scps_client_create(&o, &c, &err), &err);
  if (c) {
    CHECK(scps_client_n_features(c) == 3 && scps_client_batch_size(c) == 32);
    CHECK(!strcmp(scps_client_feature_name(c, 0), "clicked") && !strcmp(scps_client_feature_name(c, 2), "user"));
    CHECK(scps_client_feature_width(c, 0) == 16 && scps_client_feature_width(c, 2) == 8);
    CHECK(scps_client_feature_batch_size(c, 1) == 32);
    CHECK(!strcmp(scps_client_feature_table(c, 1), "items") && scps_client_feature_vocabulary(c, 2) == 300);
    CHECK(scps_client_feature_index(c, "candidate") == 1 && scps_client_feature_index(c, "nope") == SCPS_ENOENT);
    CHECK(scps_client_feature_name(c, 3) == NULL && scps_client_feature_name(c, -1) == NULL);
    CHECK(scps_client_feature_width(c, 3) == SCPS_ERANGE && scps_client_feature_vocabulary(c, -1) == SCPS_ERANGE);
    CHECK(scps_client_feature_table(c, 3) == NULL && scps_client_feature_batch_size(c, 3) == SCPS_ERANGE);
    CHECK(scps_client_ids_dropped(c) == 0);
  }
  scps_client_destroy(c);
  c = NULL;

  /* Another learning rate: server 0's declaration differs. */
  char *other = strdup(config_json);
  char *lr = strstr(other, "\"learning_rate\": 0.1");
  memcpy(lr + strlen("\"learning_rate\": "), "0.2", 3);
  o.expected_config = other;
  int rc = scps_client_create(&o, &c, &err);
  CHECKF(rc == SCPS_EMISMATCH && !c && contains(err.msg, "table 'items' optimizer learning_rate") &&
             contains(err.msg, "server 0 ("),
         "%d %s", rc, err.msg);
  printf("expected_config, another learning rate: %s\n", err.msg);
  free(other);

  /* Text that is not a workload never reaches the network. */
  o.expected_config = "{\"tables\": [";
  rc = scps_client_create(&o, &c, &err);
  CHECKF(rc == SCPS_EPARSE && !c && contains(err.msg, "expected_config"), "%d %s", rc, err.msg);
  o.expected_config = "{\"name\": \"x\", \"batch_size\": 32, \"tables\": [], \"features\": []}";
  rc = scps_client_create(&o, &c, &err);
  CHECKF(rc != 0 && !c && contains(err.msg, "expected_config"), "%d %s", rc, err.msg);
}

/* Declarations, order and count checked by create. */
static void test_configuration(void) {
  scps_it_cluster cl;
  scps_error err;
  CHECK(scps_it_init(&cl, config_json, 2, 2) == 0);
  if (scps_it_start(&cl)) {
    CHECKF(0, "cannot start the servers");
    scps_it_stop(&cl);
    return;
  }
  scps_topology topo = {2, 2, SC_MEMORY};
  scps_client *c = NULL;
  scps_client_options o;
  scps_client_options_init(&o);
  o.servers = cl.addr_list;
  o.n_servers = 2;
  scps_client_expected e;

  /* The matching declaration is accepted. */
  declare(&e, &topo, w->tables);
  CHECK_OK(scps__client_create_expecting(&o, &e, &c, &err), &err);
  scps_client_destroy(c);
  c = NULL;

  /* A table of another width (its features' output width with it, or no
   * server could serve the declaration: INVALID_ARGUMENT). */
  scps_table_spec *t = malloc(sizeof *t * (size_t)w->n_tables);
  memcpy(t, w->tables, sizeof *t * (size_t)w->n_tables);
  t[1].embedding_dim = 24;
  scps_feature_spec *f = malloc(sizeof *f * (size_t)w->n_features);
  memcpy(f, w->features, sizeof *f * (size_t)w->n_features);
  for (int i = 0; i < w->n_features; i++)
    if (!strcmp(f[i].table, t[1].name) && f[i].output_dim) f[i].output_dim = 24;
  declare(&e, &topo, t);
  e.features = f;
  int rc = scps__client_create_expecting(&o, &e, &c, &err);
  CHECKF(rc == SCPS_EMISMATCH && !c, "rc %d", rc);
  CHECKF(contains(err.msg, "server 0 (") && contains(err.msg, "table 'users' embedding_dim") &&
             contains(err.msg, "24") && contains(err.msg, "FAILED_PRECONDITION"),
         "%s", err.msg);
  printf("declared dim 24: %s\n", err.msg);
  e.features = w->features;
  rc = scps__client_create_expecting(&o, &e, &c, &err);
  CHECKF(rc == SCPS_EINVAL && !c && contains(err.msg, "INVALID_ARGUMENT") && contains(err.msg, "expected:") &&
             contains(err.msg, "output_dim"),
         "declared dim 24, features left at 8: %d %s", rc, err.msg);
  free(f);

  /* Another optimizer hyper-parameter. */
  memcpy(t, w->tables, sizeof *t * (size_t)w->n_tables);
  t[0].optimizer.learning_rate = 0.2;
  rc = scps__client_create_expecting(&o, &e, &c, &err);
  CHECKF(rc == SCPS_EMISMATCH && contains(err.msg, "table 'items' optimizer learning_rate"), "%d %s", rc, err.msg);

  /* Another topology. */
  scps_topology topo4 = {2, 4, SC_MEMORY};
  declare(&e, &topo4, w->tables);
  rc = scps__client_create_expecting(&o, &e, &c, &err);
  CHECKF(rc == SCPS_EMISMATCH && contains(err.msg, "sc_per_process"), "%d %s", rc, err.msg);
  free(t);

  /* Servers in the wrong order, with and without a declaration. */
  const char *reversed[2] = {cl.addr_list[1], cl.addr_list[0]};
  scps_client_options r;
  scps_client_options_init(&r);
  r.servers = reversed;
  r.n_servers = 2;
  rc = scps_client_create(&r, &c, &err);
  CHECKF(rc == SCPS_EMISMATCH && contains(err.msg, "server 0 (") && contains(err.msg, "is process 1") &&
             contains(err.msg, "process-index order"),
         "%d %s", rc, err.msg);
  printf("reversed: %s\n", err.msg);
  declare(&e, &topo, w->tables);
  rc = scps__client_create_expecting(&r, &e, &c, &err);
  CHECKF(rc == SCPS_EMISMATCH && contains(err.msg, "is process 1"), "%d %s", rc, err.msg);

  /* One address of a two-process cluster. */
  scps_client_options one;
  scps_client_options_init(&one);
  one.servers = cl.addr_list;
  one.n_servers = 1;
  rc = scps_client_create(&one, &c, &err);
  CHECKF(rc == SCPS_EMISMATCH && contains(err.msg, "num_processes 2") && contains(err.msg, "1 server"), "%d %s", rc,
         err.msg);

  /* The same server twice: right count, wrong process at position 1. */
  const char *twice[2] = {cl.addr_list[0], cl.addr_list[0]};
  scps_client_options tw;
  scps_client_options_init(&tw);
  tw.servers = twice;
  tw.n_servers = 2;
  rc = scps_client_create(&tw, &c, &err);
  CHECKF(rc == SCPS_EMISMATCH && contains(err.msg, "server 1 (") && contains(err.msg, "is process 0"), "%d %s", rc,
         err.msg);

  /* Nobody listening: SCPS_EUNAVAIL within the connect timeout. */
  const char *nobody[2] = {cl.addr_list[0], "127.0.0.1:1"};
  scps_client_options nb;
  scps_client_options_init(&nb);
  nb.servers = nobody;
  nb.n_servers = 2;
  nb.connect_timeout_ms = 500;
  double t0 = scps_it_now_ms();
  rc = scps_client_create(&nb, &c, &err);
  double dt = scps_it_now_ms() - t0;
  CHECKF(rc == SCPS_EUNAVAIL && contains(err.msg, "server 1 (127.0.0.1:1)") && contains(err.msg, "no connection"),
         "%d %s", rc, err.msg);
  CHECKF(dt < 500 + 1000, "create took %.0f ms with a 500 ms connect timeout", dt);
  printf("nobody listening: %.0f ms: %s\n", dt, err.msg);

  /* Bad options never reach the network. */
  scps_client_options bad;
  scps_client_options_init(&bad);
  bad.servers = cl.addr_list;
  bad.n_servers = 0;
  CHECK(scps_client_create(&bad, &c, &err) == SCPS_EINVAL);
  const char *portless[1] = {"127.0.0.1"};
  scps_client_options_init(&bad);
  bad.servers = portless;
  bad.n_servers = 1;
  rc = scps_client_create(&bad, &c, &err);
  CHECKF(rc == SCPS_EINVAL && contains(err.msg, "'127.0.0.1' has no port"), "%d %s", rc, err.msg);
  /* What the address check lets through and what it refuses. */
  static const char *const good_addr[] = {"127.0.0.1:50051", "[::1]:1", "host.example:65535", "unix:/tmp/s",
                                          "dns:///h:5"};
  static const char *const bad_addr[] = {"[::1]", "127.0.0.1:", "::1:5", "h:0", "h:65536", "h:5x", ":5", "[]:5"};
  for (size_t i = 0; i < sizeof good_addr / sizeof *good_addr; i++)
    CHECKF(scps_address_check(good_addr[i], &err) == 0, "'%s' refused: %s", good_addr[i], err.msg);
  for (size_t i = 0; i < sizeof bad_addr / sizeof *bad_addr; i++)
    CHECKF(scps_address_check(bad_addr[i], &err) == SCPS_EINVAL && contains(err.msg, bad_addr[i]), "'%s' accepted",
           bad_addr[i]);
  scps_client_options_init(&bad);
  bad.servers = cl.addr_list;
  bad.n_servers = 2;
  bad.cq_threads = 17;
  rc = scps_client_create(&bad, &c, &err);
  CHECKF(rc == SCPS_EINVAL && contains(err.msg, "cq_threads 17"), "%d %s", rc, err.msg);
  scps_client_options_init(&bad);
  bad.servers = cl.addr_list;
  bad.n_servers = 2;
  bad.gradients = (scps_gradient_mode)3;
  rc = scps_client_create(&bad, &c, &err);
  CHECKF(rc == SCPS_EINVAL && contains(err.msg, "gradients 3"), "%d %s", rc, err.msg);

  /* Options not initialised, and options of an older, shorter struct:
   * libscps reads only the fields inside size (cq_threads 17 lies past it
   * and is not read). */
  memset(&bad, 0, sizeof bad);
  bad.servers = cl.addr_list;
  bad.n_servers = 2;
  rc = scps_client_create(&bad, &c, &err);
  CHECKF(rc == SCPS_EINVAL && !c && contains(err.msg, "size 0") && contains(err.msg, "scps_client_options_init"),
         "%d %s", rc, err.msg);
  scps_client_options_init(&bad);
  bad.servers = cl.addr_list;
  bad.n_servers = 2;
  bad.cq_threads = 17;
  bad.size = offsetof(scps_client_options, n_servers) + sizeof bad.n_servers;
  CHECK_OK(scps_client_create(&bad, &c, &err), &err);
  scps_client_destroy(c);
  c = NULL;
  test_expected_config(&cl);
  scps_it_stop(&cl);
}


typedef struct waiter {
  pthread_mutex_t mu;
  int calls, last_status, errors;
  char msg[SCPS_ERROR_MSG_MAX];
} waiter;

static void on_done(void *ud, int status, const scps_error *err) {
  waiter *wt = ud;
  pthread_mutex_lock(&wt->mu);
  wt->calls++;
  wt->last_status = status;
  if (status) {
    wt->errors++;
    snprintf(wt->msg, sizeof wt->msg, "%s", err ? err->msg : "(no error record)");
  }
  pthread_mutex_unlock(&wt->mu);
}

/* Waits for n callbacks in all; false after timeout_ms. */
static bool wait_calls(waiter *wt, int n, double timeout_ms) {
  double t0 = scps_it_now_ms();
  pthread_mutex_lock(&wt->mu);
  while (wt->calls < n && scps_it_now_ms() - t0 < timeout_ms) {
    pthread_mutex_unlock(&wt->mu);
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
    pthread_mutex_lock(&wt->mu);
  }
  bool ok = wt->calls >= n;
  pthread_mutex_unlock(&wt->mu);
  return ok;
}

/* Two batches in flight at once through the asynchronous API give what the
 * blocking API gives; misuse is refused without sending anything. */
static void test_async(void) {
  scps_it_cluster cl;
  scps_error err;
  CHECK(scps_it_init(&cl, config_json, 2, 2) == 0);
  if (scps_it_start(&cl)) {
    CHECKF(0, "cannot start the servers");
    scps_it_stop(&cl);
    return;
  }
  scps_client *c = NULL;
  scps_client_options o;
  scps_client_options_init(&o);
  o.servers = cl.addr_list;
  o.n_servers = 2;
  CHECK_OK(scps_client_create(&o, &c, &err), &err);
  if (!c) {
    scps_it_stop(&cl);
    return;
  }
  const scps_layout *l = scps__client_layout(c);
  scps_batch *b[2] = {NULL, NULL};
  scps_workload_gen *gen = NULL;
  bufs sync[2], async[2];
  CHECK_OK(scps__workload_gen_create(w, 5, &gen, &err), &err);
  for (int i = 0; i < 2; i++) {
    CHECK_OK(scps_batch_create(c, &b[i], &err), &err);
    bufs_init(&sync[i], l);
    bufs_init(&async[i], l);
  }

  /* Misuse: an unprepared batch, NaN gradients, a zero deadline. */
  CHECK(scps_client_lookup(c, b[0], sync[0].acts, 1000, &err) == SCPS_ESTATE && contains(err.msg, "prepared"));
  for (int i = 0; i < 2; i++) {
    scps__workload_gen_next(gen);
    CHECK_OK(scps_client_prepare(c, scps__workload_gen_inputs(gen), b[i], &err), &err);
  }
  CHECK(scps_client_lookup(c, b[0], sync[0].acts, 0, &err) == SCPS_EINVAL);
  sync[0].grads[2][5 * 8 + 3] = 0.0f / 0.0f;
  int rc = scps_client_apply_gradients(c, b[0], (const float *const *)sync[0].grads, 1, -1, 1000, &err);
  CHECKF(rc == SCPS_EINVAL && contains(err.msg, "(feature 'user') sample 5 column 3"), "%d %s", rc, err.msg);
  sync[0].grads[2][5 * 8 + 3] = 0.5f;
  /* By row the client checks the sums it sends: a NaN gradient is named as
   * by sample, a finite one whose row sum rounds past bfloat16's largest
   * value is refused as such. */
  scps_client *cr = NULL;
  scps_batch *br = NULL;
  scps_client_options ro;
  scps_client_options_init(&ro);
  ro.servers = cl.addr_list;
  ro.n_servers = 2;
  ro.wire_format = SCPS_WIRE_BFLOAT16;
  ro.gradients = SCPS_GRADIENTS_BY_ROW;
  CHECK_OK(scps_client_create(&ro, &cr, &err), &err);
  if (cr) CHECK_OK(scps_batch_create(cr, &br, &err), &err);
  if (br) {
    CHECK_OK(scps_client_prepare(cr, scps__workload_gen_inputs(gen), br, &err), &err);
    sync[0].grads[2][5 * 8 + 3] = 0.0f / 0.0f;
    rc = scps_client_apply_gradients(cr, br, (const float *const *)sync[0].grads, 1, -1, 1000, &err);
    CHECKF(rc == SCPS_EINVAL && contains(err.msg, "(feature 'user') sample 5 column 3") &&
               contains(err.msg, "nothing was sent"), "%d %s", rc, err.msg);
    sync[0].grads[2][5 * 8 + 3] = 3.4e38f;
    rc = scps_client_apply_gradients(cr, br, (const float *const *)sync[0].grads, 1, -1, 1000, &err);
    CHECKF(rc == SCPS_EINVAL && contains(err.msg, "stack 'users'") &&
               contains(err.msg, "not finite in bfloat16 (nothing was sent)"), "%d %s", rc, err.msg);
    sync[0].grads[2][5 * 8 + 3] = 0.5f;
  }
  scps_batch_destroy(br);
  scps_client_destroy(cr);

  for (int i = 0; i < 2; i++) CHECK_OK(scps_client_lookup(c, b[i], sync[i].acts, LONG_DEADLINE_MS, &err), &err);
  waiter wt = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, ""};
  for (int i = 0; i < 2; i++)
    CHECK(scps_client_lookup_async(c, b[i], async[i].acts, LONG_DEADLINE_MS, on_done, &wt) == 0);
  /* A batch owned by an operation in flight cannot be looked up again. */
  int busy = scps_client_lookup_async(c, b[0], async[0].acts, LONG_DEADLINE_MS, on_done, &wt);
  CHECK(wait_calls(&wt, 2, LONG_DEADLINE_MS + 1000));
  CHECKF(wt.errors == 0, "%s", wt.msg);
  if (busy == 0) CHECK(wait_calls(&wt, 3, LONG_DEADLINE_MS + 1000));
  else CHECK(busy == SCPS_ESTATE);
  for (int i = 0; i < 2; i++)
    for (int f = 0; f < l->n_features; f++) {
      size_t len = (size_t)l->feature_specs[f].batch_size * (size_t)l->table_specs[l->features[f].table].embedding_dim;
      CHECK(!memcmp(sync[i].acts[f], async[i].acts[f], len * sizeof(float)));
    }

  /* Async pushes for both batches, then the blocking lookup sees them. */
  int before = wt.calls;
  for (int i = 0; i < 2; i++)
    CHECK(scps_client_apply_gradients_async(c, b[i], (const float *const *)sync[i].grads, i + 1, -1,
                                            LONG_DEADLINE_MS, on_done, &wt) == 0);
  CHECK(wait_calls(&wt, before + 2, LONG_DEADLINE_MS + 1000));
  CHECKF(wt.errors == 0, "%s", wt.msg);
  CHECK_OK(scps_client_lookup(c, b[0], async[0].acts, LONG_DEADLINE_MS, &err), &err);
  CHECK(memcmp(sync[0].acts[0], async[0].acts[0], sizeof(float) * 32 * 16) != 0);

  for (int i = 0; i < 2; i++) {
    scps_batch_destroy(b[i]);
    bufs_free(&sync[i]);
    bufs_free(&async[i]);
  }
  scps__workload_gen_destroy(gen);
  scps_client_destroy(c);
  scps_it_stop(&cl);
}

/* One step's lookup and push, both blocking. */
static int step(scps_client *c, scps_batch *b, bufs *bf, scps_workload_gen *gen, int64_t s, scps_error *err) {
  scps__workload_gen_next(gen);
  int rc = scps_client_prepare(c, scps__workload_gen_inputs(gen), b, err);
  if (!rc) rc = scps_client_lookup(c, b, bf->acts, LONG_DEADLINE_MS, err);
  if (!rc) rc = scps_client_apply_gradients(c, b, (const float *const *)bf->grads, s, -1, LONG_DEADLINE_MS, err);
  return rc;
}

/* SIGSTOP is delivered asynchronously: a lookup sent right after kill()
 * could still be answered. Waits (bounded) until the kernel reports the
 * process stopped. */
static bool wait_stopped(pid_t pid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  for (int i = 0; i < 200; i++) {
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = '\0';
    const char *state = strrchr(buf, ')');
    if (state && state[1] == ' ' && state[2] == 'T') return true;
    usleep(10000);
  }
  return false;
}

/* A 3 x 1 cluster loses process 1 (SIGKILL), which then comes back on its
 * port; then process 2 stops answering (SIGSTOP). */
static void test_server_loss(void) {
  scps_it_cluster cl;
  scps_error err;
  CHECK(scps_it_init(&cl, config_json, 3, 1) == 0);
  if (scps_it_start(&cl)) {
    CHECKF(0, "cannot start the servers");
    scps_it_stop(&cl);
    return;
  }
  scps_client *c = NULL;
  scps_batch *b = NULL;
  scps_workload_gen *gen = NULL;
  scps_client_options o;
  scps_client_options_init(&o);
  o.servers = cl.addr_list;
  o.n_servers = 3;
  CHECK_OK(scps_client_create(&o, &c, &err), &err);
  if (!c) {
    scps_it_stop(&cl);
    return;
  }
  bufs bf;
  bufs_init(&bf, scps__client_layout(c));
  CHECK_OK(scps_batch_create(c, &b, &err), &err);
  CHECK_OK(scps__workload_gen_create(w, 11, &gen, &err), &err);
  for (int s = 0; s < 3; s++) CHECK_OK(step(c, b, &bf, gen, s, &err), &err);

  scps_it_kill(&cl, 1);
  const int64_t deadline = 1500;
  double t0 = scps_it_now_ms();
  int rc = scps_client_lookup(c, b, bf.acts, deadline, &err);
  double dt = scps_it_now_ms() - t0;
  CHECKF(rc == SCPS_EUNAVAIL || rc == SCPS_ETIMEDOUT, "rc %d", rc);
  CHECKF(contains(err.msg, "server 1 (") && contains(err.msg, cl.addr_list[1]), "%s", err.msg);
  CHECKF(dt <= (double)deadline + 1000, "lookup took %.0f ms with a %lld ms deadline", dt, (long long)deadline);
  printf("killed server, blocking lookup: %.0f ms (deadline %lld): %s\n", dt, (long long)deadline, err.msg);

  /* Pushes are not retried: the error comes at once and says who applied. */
  t0 = scps_it_now_ms();
  rc = scps_client_apply_gradients(c, b, (const float *const *)bf.grads, 3, -1, 5000, &err);
  dt = scps_it_now_ms() - t0;
  CHECKF(rc == SCPS_EUNAVAIL, "rc %d", rc);
  CHECKF(contains(err.msg, "server 1 (") && contains(err.msg, "applied on 0, 2"), "%s", err.msg);
  CHECKF(dt < 1000, "a push to a dead server took %.0f ms", dt);
  printf("killed server, push: %.0f ms: %s\n", dt, err.msg);

  /* The callback comes too, within the deadline. */
  waiter wt = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, ""};
  t0 = scps_it_now_ms();
  CHECK(scps_client_lookup_async(c, b, bf.acts, deadline, on_done, &wt) == 0);
  CHECK(wait_calls(&wt, 1, (double)deadline + 1000));
  dt = scps_it_now_ms() - t0;
  CHECKF(wt.last_status == SCPS_EUNAVAIL || wt.last_status == SCPS_ETIMEDOUT, "status %d", wt.last_status);
  CHECKF(contains(wt.msg, "server 1 ("), "%s", wt.msg);
  printf("killed server, async lookup: callback after %.0f ms\n", dt);

  /* Process 1 restarts on its port while a lookup retries: the lookup gets
   * through within its deadline. */
  CHECK(scps_it_start_one(&cl, 1, cl.ports[1], 0) == 0);
  t0 = scps_it_now_ms();
  rc = scps_client_lookup(c, b, bf.acts, LONG_DEADLINE_MS, &err);
  dt = scps_it_now_ms() - t0;
  CHECKF(rc == 0, "lookup after the restart: %s", err.msg);
  printf("restarted server: lookup succeeded after %.0f ms of retries\n", dt);
  /* It started from the initializers while 0 and 2 hold steps 0..2: a push
   * is refused there (its state is not the one this client connected to)
   * rather than mix the states, and the error says who applied it. */
  rc = step(c, b, &bf, gen, 4, &err);
  CHECKF(rc == SCPS_EMISMATCH && contains(err.msg, "server 1 (") &&
             contains(err.msg, "no longer holds the state this client connected to") &&
             contains(err.msg, "applied on 0, 2"),
         "a push to the restarted server: %d %s", rc, err.msg);

  /* A server that stops answering: the deadline ends the call. */
  kill(cl.pids[2], SIGSTOP);
  CHECKF(wait_stopped(cl.pids[2]), "process 2 did not stop");
  const int64_t short_deadline = 800;
  t0 = scps_it_now_ms();
  rc = scps_client_lookup(c, b, bf.acts, short_deadline, &err);
  dt = scps_it_now_ms() - t0;
  CHECKF(rc == SCPS_ETIMEDOUT, "rc %d", rc);
  CHECKF(contains(err.msg, "server 2 (") && contains(err.msg, "DEADLINE_EXCEEDED"), "%s", err.msg);
  CHECKF(dt <= (double)short_deadline + 1000, "lookup took %.0f ms with a %lld ms deadline", dt,
         (long long)short_deadline);
  printf("stopped server: %.0f ms (deadline %lld): %s\n", dt, (long long)short_deadline, err.msg);
  kill(cl.pids[2], SIGCONT);

  /* Destroy with nothing in flight returns promptly. */
  t0 = scps_it_now_ms();
  scps_batch_destroy(b);
  scps_client_destroy(c);
  dt = scps_it_now_ms() - t0;
  CHECKF(dt < 2000, "destroy took %.0f ms", dt);
  bufs_free(&bf);
  scps__workload_gen_destroy(gen);
  scps_it_stop(&cl);
}

int main(void) {
  scps_error err;
  CHECK_OK(scps__workload_parse(config_json, strlen(config_json), &w, &err), &err);
  if (w) {
    test_configuration();
    test_async();
    test_server_loss();
  }
  scps__workload_destroy(w);
  return scps_test_finish("test_client_failures");
}
