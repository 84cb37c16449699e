#include "scps_train.h"

#include <stdlib.h>
#include <string.h>

#include "scps_step.h"

typedef struct slot {
  scps_batch *batch;
  float **acts, **grads; /* per feature */
} slot;

typedef struct run {
  scps_client *client;
  int n_features;
  const scps_train_options *o;
  const scps_train_hooks *h;
  void *ud;
  int64_t deadline_ms;
  slot slots[SCPS_SCHEDULE_SLOTS];
} run;

static slot *slot_of(run *r, int64_t batch) { return &r->slots[batch % SCPS_SCHEDULE_SLOTS]; }

static int op_lookup(void *ud, int64_t batch, scps_error *err) {
  run *r = ud;
  slot *s = slot_of(r, batch);
  const scps_feature_input *in;
  int rc = r->h->inputs(r->ud, batch, &in, err);
  if (!rc) rc = scps_client_prepare(r->client, in, s->batch, err);
  if (!rc) rc = scps_client_lookup(r->client, s->batch, s->acts, r->deadline_ms, err);
  return rc;
}

static int op_compute(void *ud, int64_t batch, scps_error *err) {
  run *r = ud;
  slot *s = slot_of(r, batch);
  return r->h->compute(r->ud, batch, s->acts, s->grads, err);
}

#define CHECKPOINT_DEADLINE_MS 600000

static int op_push(void *ud, int64_t batch, scps_error *err) {
  run *r = ud;
  slot *s = slot_of(r, batch);
  int64_t step = r->o->first_step + batch;
  int rc = scps_client_apply_gradients(r->client, s->batch, (const float *const *)s->grads, step,
                                       r->o->learning_rate, r->deadline_ms, err);
  int64_t every = r->o->checkpoint_every_steps;
  /* On the global step's grid (steps every-1, 2*every-1, ...), so a run
   * resumed at any step checkpoints where an uninterrupted one would. */
  if (!rc && every > 0 && (step + 1) % every == 0) {
    scps_client_checkpoint_result res;
    rc = scps_client_checkpoint(r->client, step, r->o->checkpoint_dir, CHECKPOINT_DEADLINE_MS, &res, err);
    if (!rc && r->h->checkpointed) r->h->checkpointed(r->ud, &res);
  }
  return rc;
}

static void slots_free(run *r) {
  for (int k = 0; k < SCPS_SCHEDULE_SLOTS; k++) {
    slot *s = &r->slots[k];
    scps_batch_destroy(s->batch);
    for (int f = 0; f < r->n_features; f++) {
      if (s->acts) free(s->acts[f]);
      if (s->grads) free(s->grads[f]);
    }
    free(s->acts);
    free(s->grads);
  }
}

#define DEFAULT_DEADLINE_MS 30000

void scps__train_options_init(scps_train_options *o) {
  memset(o, 0, sizeof *o);
  o->size = sizeof *o;
  o->mode = SCPS_SCHEDULE_SEQUENTIAL;
  o->learning_rate = -1.0;
  o->deadline_ms = DEFAULT_DEADLINE_MS;
}

int scps__train_run(scps_client *c, const scps_train_options *options, const scps_train_hooks *h, void *ud,
                   scps_schedule_stats *stats, scps_error *err) {
  if (!options || options->size < offsetof(scps_train_options, mode) + sizeof options->mode)
    return scps_error_set(err, SCPS_EINVAL, "train options: size %zu: initialise them with scps__train_options_init",
                          options ? options->size : 0);
  /* The fields inside the caller's size; the rest keep their defaults. */
  scps_train_options opts;
  scps__train_options_init(&opts);
  memcpy(&opts, options, options->size < sizeof opts ? options->size : sizeof opts);
  const scps_train_options *o = &opts;
  run r;
  memset(&r, 0, sizeof r);
  r.client = c;
  r.n_features = scps_client_n_features(c);
  r.o = o;
  r.h = h;
  r.ud = ud;
  r.deadline_ms = o->deadline_ms > 0 ? o->deadline_ms : DEFAULT_DEADLINE_MS;
  int nf = r.n_features, rc = 0;
  /* Every step pushed stays below what servers take, and step + 1 never
   * overflows. */
  if (o->first_step < 0 || o->first_step >= SCPS_STEP_LIMIT || o->steps < 0 ||
      o->steps > SCPS_STEP_LIMIT - o->first_step)
    rc = scps_error_set(err, SCPS_EINVAL,
                        "first_step %lld and %lld steps: every step must be in [0, 2^53 = %lld), the steps servers "
                        "take",
                        (long long)o->first_step, (long long)o->steps, (long long)SCPS_STEP_LIMIT);
  /* Found now, not at the first checkpoint after hours of training. */
  for (int p = 0; o->checkpoint_every_steps > 0 && p < scps_client_n_servers(c) && !rc; p++)
    if (!scps_client_server_has_checkpoint_dir(c, p))
      rc = scps_error_set(err, SCPS_EINVAL,
                          "checkpoints every %lld steps, but server %d has no --checkpoint-dir: servers save "
                          "checkpoints only below theirs; start the servers with one",
                          (long long)o->checkpoint_every_steps, p);
  for (int k = 0; k < SCPS_SCHEDULE_SLOTS && !rc; k++) {
    slot *s = &r.slots[k];
    rc = scps_batch_create(c, &s->batch, err);
    s->acts = calloc((size_t)(nf ? nf : 1), sizeof *s->acts);
    s->grads = calloc((size_t)(nf ? nf : 1), sizeof *s->grads);
    if (!rc && (!s->acts || !s->grads)) rc = scps_error_set(err, SCPS_ENOMEM, "train: out of memory");
    for (int f = 0; f < nf && !rc; f++) {
      size_t n = (size_t)scps_client_feature_batch_size(c, f) * (size_t)scps_client_feature_width(c, f);
      s->acts[f] = malloc(sizeof(float) * (n ? n : 1));
      s->grads[f] = calloc(n ? n : 1, sizeof(float));
      if (!s->acts[f] || !s->grads[f]) rc = scps_error_set(err, SCPS_ENOMEM, "train: out of memory");
    }
  }
  if (!rc) {
    scps_schedule_ops ops = {op_lookup, op_compute, op_push};
    rc = scps__schedule_run(&ops, &r, o->steps, o->mode, stats, err);
  }
  slots_free(&r);
  return rc;
}
