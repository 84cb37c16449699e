/* A trainer idle longer than the servers' --idle-timeout keeps working: the
 * servers close its connections (their sockets go), and its next lookups and
 * pushes, which libscps never retries, succeed over new connections. */
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "scps_it.h"
#include "scps_test.h"
#include "scps_train.h"

#define BATCH 4
#define IDLE_TIMEOUT_S 1

static const char config_json[] =
    "{\"name\": \"idle\", \"batch_size\": 4, \"ids\": {\"distribution\": \"uniform\", \"seed\": 1},\n"
    " \"tables\": [{\"name\": \"t\", \"vocabulary_size\": 64, \"embedding_dim\": 8, \"combiner\": \"sum\",\n"
    "   \"optimizer\": {\"type\": \"sgd\", \"learning_rate\": 1.0},\n"
    "   \"initializer\": {\"type\": \"constant\", \"value\": 0.5}}],\n"
    " \"features\": [{\"name\": \"f\", \"table\": \"t\", \"valency\": 1}]}\n";

typedef struct probe {
  int64_t offsets[BATCH + 1], ids[BATCH];
  scps_feature_input in;
  float last;
} probe;

static int probe_inputs(void *ud, int64_t batch, const scps_feature_input **in, scps_error *err) {
  probe *p = ud;
  *in = &p->in;
  return 0;
}

/* Every push adds exactly 1 to row 3 (SGD, rate 1, gradient -1). */
static int probe_compute(void *ud, int64_t batch, float *const *acts, float *const *grads, scps_error *err) {
  probe *p = ud;
  p->last = acts[0][0];
  memset(grads[0], 0, sizeof(float) * BATCH * 8);
  grads[0][0] = -1.0f;
  return 0;
}

/* Sockets process pid has open: its listener and its connections. */
static int sockets_of(pid_t pid) {
  char dir[64], path[320], target[64];
  snprintf(dir, sizeof dir, "/proc/%d/fd", (int)pid);
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    ssize_t k = readlink(path, target, sizeof target - 1);
    if (k > 0) {
      target[k] = '\0';
      n += !strncmp(target, "socket:", 7);
    }
  }
  closedir(d);
  return n;
}

/* Waits up to timeout_ms for process pid to have at most `most` sockets. */
static int wait_sockets(pid_t pid, int most, double timeout_ms) {
  double end = scps_it_now_ms() + timeout_ms;
  int n;
  while ((n = sockets_of(pid)) > most && scps_it_now_ms() < end) {
    struct timespec ts = {0, 50000000};
    nanosleep(&ts, NULL);
  }
  return n;
}

int main(void) {
  scps_it_cluster cl;
  char idle[16];
  snprintf(idle, sizeof idle, "%d", IDLE_TIMEOUT_S);
  int ok = !scps_it_init(&cl, config_json, 2, 2);
  cl.extra[0] = "--idle-timeout";
  cl.extra[1] = idle;
  cl.extra[2] = NULL;
  if (!ok || scps_it_start(&cl)) {
    CHECK(!"cluster did not start");
    scps_it_stop(&cl);
    return scps_test_finish("test_idle_reconnect");
  }
  int idle_sockets[2] = {sockets_of(cl.pids[0]), sockets_of(cl.pids[1])};
  scps_client_options o;
  scps_client_options_init(&o);
  o.servers = cl.addr_list;
  o.n_servers = 2;
  scps_client *c = NULL;
  scps_error err;
  CHECK_OK(scps_client_create(&o, &c, &err), &err);
  if (!c) {
    scps_it_stop(&cl);
    return scps_test_finish("test_idle_reconnect");
  }
  probe p;
  memset(&p, 0, sizeof p);
  for (int r = 0; r <= BATCH; r++) p.offsets[r] = r;
  for (int r = 0; r < BATCH; r++) p.ids[r] = r == 0 ? 3 : 10 + r;
  p.in.form = SCPS_INPUT_RAGGED;
  p.in.row_offsets = p.offsets;
  p.in.ids = p.ids;
  p.in.n_ids = BATCH;
  scps_train_hooks h = {.inputs = probe_inputs, .compute = probe_compute};
  for (int round = 0; round < 3; round++) {
    scps_train_options to;
    scps__train_options_init(&to);
    to.mode = SCPS_SCHEDULE_SEQUENTIAL;
    to.steps = 3;
    to.first_step = 3 * round;
    to.learning_rate = -1.0;
    to.deadline_ms = 10000;
    scps_schedule_stats st;
    CHECK_OK(scps__train_run(c, &to, &h, &p, &st, &err), &err);
    /* Batch 2 of the round saw the 3 * round + 2 pushes before it. */
    CHECKF(p.last == 0.5f + (float)(3 * round + 2), "round %d: the last batch saw %g", round, p.last);
    for (int i = 0; i < 2; i++)
      CHECKF(sockets_of(cl.pids[i]) > idle_sockets[i], "round %d: server %d has no connection from the trainer",
             round, i);
    /* Idle past the limit: each server closes the trainer's connection. */
    for (int i = 0; i < 2; i++) {
      int n = wait_sockets(cl.pids[i], idle_sockets[i], 1000.0 * (IDLE_TIMEOUT_S + 10));
      CHECKF(n == idle_sockets[i], "round %d: server %d still has %d sockets (%d when idle) after the idle timeout",
             round, i, n, idle_sockets[i]);
    }
  }
  scps_client_destroy(c);
  scps_it_stop(&cl);
  return scps_test_finish("test_idle_reconnect");
}
