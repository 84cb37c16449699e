/* The training schedules through libscps against a real 2-process cluster:
 * every batch looks up one row that each push moves by exactly 1, so the
 * value a batch sees counts the pushes acknowledged before its lookup:
 * sequential batch i sees i of them, pipelined batch i sees i-1 (exactly one
 * step stale), and a push acknowledged before a lookup is always seen. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scps_it.h"
#include "scps_test.h"
#include "scps_train.h"

#define STEPS 12
#define BATCH 4

/* SGD with rate 1 on a constant-initialised row: a gradient of -1 on one
 * sample adds exactly 1 to it per push. */
static const char config_json[] =
    "{\"name\": \"staleness\", \"batch_size\": 4, \"ids\": {\"distribution\": \"uniform\", \"seed\": 1},\n"
    " \"tables\": [{\"name\": \"t\", \"vocabulary_size\": 64, \"embedding_dim\": 8, \"combiner\": \"sum\",\n"
    "   \"optimizer\": {\"type\": \"sgd\", \"learning_rate\": 1.0},\n"
    "   \"initializer\": {\"type\": \"constant\", \"value\": 0.5}}],\n"
    " \"features\": [{\"name\": \"f\", \"table\": \"t\", \"valency\": 1}]}\n";

typedef struct probe {
  int64_t offsets[BATCH + 1];
  int64_t ids[BATCH];
  scps_feature_input in;
  float seen[STEPS];
} probe;

static int probe_inputs(void *ud, int64_t batch, const scps_feature_input **in, scps_error *err) {
  probe *p = ud;
  *in = &p->in;
  return 0;
}

static int probe_compute(void *ud, int64_t batch, float *const *acts, float *const *grads, scps_error *err) {
  probe *p = ud;
  p->seen[batch] = acts[0][0];
  memset(grads[0], 0, sizeof(float) * BATCH * 8);
  grads[0][0] = -1.0f; /* sample 0, column 0 */
  return 0;
}

static void run(scps_client *c, scps_schedule_mode mode, float *start) {
  probe p;
  memset(&p, 0, sizeof p);
  /* Sample 0 reads id 3; the others read other ids, so only the push of
   * sample 0's gradient moves row 3. */
  for (int r = 0; r <= BATCH; r++) p.offsets[r] = r;
  for (int r = 0; r < BATCH; r++) p.ids[r] = r == 0 ? 3 : 10 + r;
  p.in.form = SCPS_INPUT_RAGGED;
  p.in.row_offsets = p.offsets;
  p.in.ids = p.ids;
  p.in.n_ids = BATCH;
  scps_train_options o;
  scps__train_options_init(&o);
  o.mode = mode;
  o.steps = STEPS;
  o.learning_rate = -1.0;
  o.deadline_ms = 10000;
  scps_train_hooks h = {.inputs = probe_inputs, .compute = probe_compute};
  scps_schedule_stats st;
  scps_error err;
  /* Options never initialised are refused before any step. */
  scps_train_options zero;
  memset(&zero, 0, sizeof zero);
  CHECKF(scps__train_run(c, &zero, &h, &p, &st, &err) == SCPS_EINVAL && strstr(err.msg, "scps__train_options_init"),
         "%s", err.msg);
  CHECK_OK(scps__train_run(c, &o, &h, &p, &st, &err), &err);
  CHECK(st.steps == STEPS);
  int wrong = 0;
  for (int64_t i = 0; i < STEPS; i++) {
    int64_t pushes_seen = mode == SCPS_SCHEDULE_SEQUENTIAL ? i : (i ? i - 1 : 0);
    float want = *start + (float)pushes_seen;
    if (p.seen[i] != want) {
      wrong++;
      fprintf(stderr, "mode %d batch %lld saw %g, expected %g\n", mode, (long long)i, p.seen[i], want);
    }
  }
  CHECKF(wrong == 0, "mode %d: %d batches saw the wrong number of pushes", mode, wrong);
  *start += STEPS; /* every batch was pushed by the end */
}

int main(void) {
  scps_it_cluster cl;
  if (scps_it_init(&cl, config_json, 2, 2) || scps_it_start(&cl)) {
    CHECK(!"cluster did not start");
    scps_it_stop(&cl);
    return scps_test_finish("test_training");
  }
  scps_client_options o;
  scps_client_options_init(&o);
  o.servers = cl.addr_list;
  o.n_servers = 2;
  scps_client *c = NULL;
  scps_error err;
  CHECK_OK(scps_client_create(&o, &c, &err), &err);
  if (c) {
    float start = 0.5f;
    run(c, SCPS_SCHEDULE_SEQUENTIAL, &start);
    run(c, SCPS_SCHEDULE_PIPELINED, &start);
    run(c, SCPS_SCHEDULE_SEQUENTIAL, &start);
    scps_client_destroy(c);
  }
  scps_it_stop(&cl);
  return scps_test_finish("test_training");
}
