/* The engine path (layout, preprocessing, per-SparseCore lookup and fused
 * updates) against the independent double-precision reference, over every
 * optimizer x combiner x weighted/unweighted x stacked/unstacked on the
 * topologies 1x1, 1x4 and 3x2; the topologies must agree with each other and
 * a fixed topology must repeat itself bit for bit. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scps_engine.h"
#include "scps_prep.h"
#include "scps_ref.h"
#include "scps_test.h"

/* Relative error of a tensor (one feature's activations, a table's rows, one
 * slot of a table): max |engine - ref| / max |ref| over its elements, so
 * values that cancel to near zero are judged at the tensor's own scale. */
#define TOL 1e-5
#define BATCH 24
#define STEPS 3
#define MAXF 3

static const scps_optimizer_type optimizers[] = {SCPS_OPT_SGD,  SCPS_OPT_ADAGRAD, SCPS_OPT_ADAGRAD_MOMENTUM,
                                                 SCPS_OPT_ADAM, SCPS_OPT_FTRL,    SCPS_OPT_LAPROP,
                                                 SCPS_OPT_F2A};
static const int topologies[][2] = {{1, 1}, {1, 4}, {3, 2}};

typedef struct config {
  scps_optimizer_type opt;
  scps_combiner combiner;
  int weighted, stacked;
  int n_tables, n_features;
  scps_table_spec tables[2];
  scps_feature_spec features[MAXF];
} config;

static void make_config(config *c, scps_optimizer_type opt, scps_combiner comb, int weighted, int stacked) {
  memset(c, 0, sizeof *c);
  c->opt = opt;
  c->combiner = comb;
  c->weighted = weighted;
  c->stacked = stacked;
  c->n_tables = 2;
  const char *tn[2] = {"ta", "tb"};
  int64_t vocab[2] = {150, 70};
  int32_t dim[2] = {5, stacked ? 7 : 13}; /* 8/8 share a stack; 8/16 do not */
  for (int t = 0; t < 2; t++) {
    scps_table_spec *s = &c->tables[t];
    scps__table_spec_init(s);
    snprintf(s->name, sizeof s->name, "%s", tn[t]);
    s->vocabulary_size = vocab[t];
    s->embedding_dim = dim[t];
    s->combiner = comb;
    s->initializer.type = SCPS_INIT_UNIFORM;
    s->initializer.scale = 0.05;
    s->initializer.seed = 11 + (uint64_t)t;
    scps_optimizer_spec *o = &s->optimizer;
    scps__optimizer_spec_init(o, opt);
    o->learning_rate = 0.05;
    switch (opt) {
    case SCPS_OPT_ADAGRAD_MOMENTUM:
      o->use_nesterov = comb != SCPS_COMBINER_SUM;
      o->beta2 = weighted ? 0.9 : 1.0;
      o->exponent = stacked ? 2.0 : 3.0;
      break;
    case SCPS_OPT_ADAM:
    case SCPS_OPT_LAPROP:
      o->beta1 = weighted ? 0.8 : o->beta1;
      break;
    case SCPS_OPT_FTRL:
      o->l1 = weighted ? 0.002 : 0.0;
      o->l2 = 0.01;
      o->beta = 0.1;
      o->multiply_linear_by_learning_rate = stacked;
      break;
    case SCPS_OPT_F2A:
      o->l1 = 0.001;
      o->l2 = 0.001;
      break;
    default:
      break;
    }
    if (weighted && comb == SCPS_COMBINER_SUM) {
      s->clip = true;
      s->clip_min = -0.06f;
      s->clip_max = 0.06f;
    }
  }
  const char *fn[MAXF] = {"fa1", "fb", "fa2"};
  const char *ft[MAXF] = {"ta", "tb", "ta"};
  c->n_features = stacked ? 3 : 2;
  for (int f = 0; f < c->n_features; f++) {
    scps__feature_spec_init(&c->features[f]);
    snprintf(c->features[f].name, sizeof c->features[f].name, "%s", fn[f]);
    snprintf(c->features[f].table, sizeof c->features[f].table, "%s", ft[f]);
    c->features[f].batch_size = BATCH;
  }
}

static uint64_t rng_next(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static double rng_unit(uint64_t *s) { return (double)(rng_next(s) >> 11) / 9007199254740992.0; }

/* One step's inputs: ragged ids with duplicates within and across samples
 * (a hot set including id 0 and vocabulary-1), and random activation grads. */
typedef struct batch {
  int64_t offsets[MAXF][BATCH + 1];
  int64_t ids[MAXF][BATCH * 6];
  float weights[MAXF][BATCH * 6];
  float grads[MAXF][BATCH * 16];
  double dgrads[MAXF][BATCH * 16];
} batch;

static void make_batch(const config *c, uint64_t seed, batch *b) {
  uint64_t s = seed;
  for (int f = 0; f < c->n_features; f++) {
    int t = scps__find_table(c->tables, c->n_tables, c->features[f].table);
    int64_t vocab = c->tables[t].vocabulary_size;
    int64_t hot[4] = {0, 1, 7, vocab - 1};
    int64_t n = 0;
    b->offsets[f][0] = 0;
    for (int r = 0; r < BATCH; r++) {
      int len = (int)(rng_next(&s) % 7);
      for (int k = 0; k < len; k++, n++) {
        b->ids[f][n] = rng_next(&s) % 2 ? hot[rng_next(&s) % 4] : (int64_t)(rng_next(&s) % (uint64_t)vocab);
        b->weights[f][n] = (float)(0.1 + 1.9 * rng_unit(&s));
      }
      b->offsets[f][r + 1] = n;
    }
    int dim = c->tables[t].embedding_dim;
    for (int i = 0; i < BATCH * dim; i++) {
      b->grads[f][i] = (float)(2.0 * rng_unit(&s) - 1.0);
      b->dgrads[f][i] = b->grads[f][i];
    }
  }
}

typedef struct tensor_err {
  double diff, scale;
} tensor_err;

static void err_add(tensor_err *t, double e, double r) {
  t->diff = fmax(t->diff, fabs(e - r));
  t->scale = fmax(t->scale, fabs(r));
}

static double err_of(const tensor_err *t) { return t->scale > 0 ? t->diff / t->scale : t->diff; }

typedef struct sim {
  scps_layout *layout;
  int P;
  scps_engine *engines[4];
  scps_prep *prep;
  float *buf[4]; /* per stack, total_sample_count x dim */
} sim;

static int sim_create(sim *m, const config *c, int p, int s, scps_error *err) {
  memset(m, 0, sizeof *m);
  scps_topology t = {p, s, 1 << 22};
  int rc = scps__layout_create(c->tables, c->n_tables, c->features, c->n_features, &t, NULL, &m->layout, err);
  for (int i = 0; !rc && i < p; i++) {
    rc = scps__engine_create(m->layout, i, &m->engines[i], err);
    m->P = i + 1;
  }
  scps_prep_options po = {SCPS_LIMIT_ERROR, 1};
  if (!rc) rc = scps__prep_create(m->layout, &po, &m->prep, err);
  for (int st = 0; !rc && st < m->layout->n_stacks; st++)
    m->buf[st] = malloc(sizeof(float) * (size_t)(m->layout->stacks[st].total_sample_count * m->layout->stacks[st].dim));
  return rc;
}

static void sim_destroy(sim *m) {
  for (int i = 0; i < m->P; i++) scps__engine_destroy(m->engines[i]);
  for (int st = 0; st < 4; st++) free(m->buf[st]);
  scps__prep_destroy(m->prep);
  scps__layout_destroy(m->layout);
}

static void sim_for_each_sc(sim *m, int st, const float *grads, const scps_step *step, float *out) {
  const scps_layout *l = m->layout;
  int32_t S = l->topology.sc_per_process;
  for (int32_t sc = 0; sc < l->num_sc; sc++) {
    const scps_coo *coo = scps__prep_coo(m->prep, st, sc);
    scps_error err;
    CHECK_OK(scps__engine_check_coo(m->engines[sc / S], st, sc % S, coo, &err), &err);
    if (out)
      scps__engine_lookup(m->engines[sc / S], st, sc % S, coo, 0, (uint32_t)l->stacks[st].total_sample_count, out);
    else
      scps__engine_update(m->engines[sc / S], st, sc % S, coo, grads, step);
  }
}

/* Runs one step through the engine: lookup (acts per feature, unstacked and
 * trimmed), then the update with the batch's grads. */
static int sim_step(sim *m, const config *c, batch *b, const scps_step *step, float acts[MAXF][BATCH * 16],
                    scps_error *err) {
  scps_feature_input in[MAXF];
  memset(in, 0, sizeof in);
  for (int f = 0; f < c->n_features; f++) {
    in[f].form = SCPS_INPUT_RAGGED;
    in[f].row_offsets = b->offsets[f];
    in[f].ids = b->ids[f];
    in[f].n_ids = (size_t)b->offsets[f][BATCH];
    in[f].weights = c->weighted ? b->weights[f] : NULL;
  }
  int rc = scps__prep_run(m->prep, in, err);
  if (rc) return rc;
  const scps_layout *l = m->layout;
  for (int st = 0; st < l->n_stacks; st++) {
    memset(m->buf[st], 0, sizeof(float) * (size_t)(l->stacks[st].total_sample_count * l->stacks[st].dim));
    sim_for_each_sc(m, st, NULL, NULL, m->buf[st]);
  }
  for (int f = 0; f < c->n_features; f++) {
    const scps_feature_layout *fl = &l->features[f];
    int dim = l->table_specs[fl->table].embedding_dim, sd = l->stacks[fl->stack].dim;
    for (int r = 0; r < BATCH; r++)
      memcpy(&acts[f][r * dim], m->buf[fl->stack] + (fl->sample_offset + r) * sd, sizeof(float) * (size_t)dim);
  }
  for (int st = 0; st < l->n_stacks; st++)
    memset(m->buf[st], 0, sizeof(float) * (size_t)(l->stacks[st].total_sample_count * l->stacks[st].dim));
  for (int f = 0; f < c->n_features; f++) {
    const scps_feature_layout *fl = &l->features[f];
    int dim = l->table_specs[fl->table].embedding_dim, sd = l->stacks[fl->stack].dim;
    for (int r = 0; r < BATCH; r++)
      memcpy(m->buf[fl->stack] + (fl->sample_offset + r) * sd, &b->grads[f][r * dim], sizeof(float) * (size_t)dim);
  }
  for (int st = 0; st < l->n_stacks; st++) sim_for_each_sc(m, st, m->buf[st], step, NULL);
  return 0;
}

static int sim_read(sim *m, int t, int64_t id, float *row, float *slots) {
  int32_t p = scps__layout_process_of_sc(m->layout, scps__layout_sc_of(m->layout, t, id));
  return scps__engine_read_row(m->engines[p], t, id, row, slots, NULL);
}

/* Every row and slot of every table, in (table, id) order. */
static float *sim_snapshot(sim *m, const config *c, size_t *len) {
  size_t n = 0;
  for (int t = 0; t < c->n_tables; t++) n += (size_t)(c->tables[t].vocabulary_size * c->tables[t].embedding_dim) * 3;
  float *out = calloc(n, sizeof(float)), *p = out;
  for (int t = 0; t < c->n_tables; t++)
    for (int64_t id = 0; id < c->tables[t].vocabulary_size; id++, p += 3 * c->tables[t].embedding_dim)
      sim_read(m, t, id, p, p + c->tables[t].embedding_dim);
  *len = n;
  return out;
}

static double worst;

static void run_config(const config *c) {
  char label[128];
  snprintf(label, sizeof label, "%s/%s/%s/%s", scps__optimizer_name(c->opt), scps__combiner_name(c->combiner),
           c->weighted ? "weighted" : "unweighted", c->stacked ? "stacked" : "unstacked");
  float *snap[4] = {0};
  size_t len = 0;
  for (int k = 0; k < 4; k++) {
    const int *tp = topologies[k < 3 ? k : 1];
    sim m;
    scps_ref *ref = NULL;
    scps_error err;
    int rc = sim_create(&m, c, tp[0], tp[1], &err);
    CHECKF(rc == 0, "%s %dx%d: %s", label, tp[0], tp[1], err.msg);
    if (!rc) rc = scps_ref_create(c->tables, c->n_tables, c->features, c->n_features, &ref, &err);
    CHECKF(rc == 0, "%s: ref: %s", label, err.msg);
    if (rc) {
      sim_destroy(&m);
      scps_ref_destroy(ref);
      continue;
    }
    float row[16];
    for (int t = 0; t < c->n_tables; t++)
      for (int64_t id = 0; id < c->tables[t].vocabulary_size; id++) {
        sim_read(&m, t, id, row, NULL);
        scps_ref_set_row(ref, t, id, row, NULL);
      }
    double err_act = 0, err_row = 0;
    for (int step = 0; step < STEPS; step++) {
      static batch b;
      static float acts[MAXF][BATCH * 16];
      static double racts_buf[MAXF][BATCH * 16];
      make_batch(c, 1000 * (uint64_t)step + (uint64_t)c->opt * 31 + (uint64_t)c->combiner * 7, &b);
      double lr = step == 2 ? 0.025 : -1.0;
      scps_step st = {step, lr};
      CHECK_OK(sim_step(&m, c, &b, &st, acts, &err), &err);
      scps_ref_input rin[MAXF];
      double *racts[MAXF];
      const double *rgrads[MAXF];
      for (int f = 0; f < c->n_features; f++) {
        rin[f].row_offsets = b.offsets[f];
        rin[f].ids = b.ids[f];
        rin[f].weights = c->weighted ? b.weights[f] : NULL;
        racts[f] = racts_buf[f];
        rgrads[f] = b.dgrads[f];
      }
      CHECK_OK(scps_ref_lookup(ref, rin, racts, &err), &err);
      CHECK_OK(scps_ref_apply_gradients(ref, rin, rgrads, step, lr, &err), &err);
      for (int f = 0; f < c->n_features; f++) {
        int dim = c->tables[scps__find_table(c->tables, c->n_tables, c->features[f].table)].embedding_dim;
        tensor_err te = {0, 0};
        for (int i = 0; i < BATCH * dim; i++) err_add(&te, acts[f][i], racts[f][i]);
        err_act = fmax(err_act, err_of(&te));
      }
    }
    float slots[32];
    for (int t = 0; t < c->n_tables; t++) {
      int dim = c->tables[t].embedding_dim, ns = scps__optimizer_num_slots(c->opt);
      tensor_err te[3] = {{0, 0}, {0, 0}, {0, 0}};
      for (int64_t id = 0; id < c->tables[t].vocabulary_size; id++) {
        sim_read(&m, t, id, row, slots);
        const double *r = scps_ref_row(ref, t, id);
        for (int d = 0; d < dim; d++) err_add(&te[0], row[d], r[d]);
        for (int s = 0; s < ns; s++) {
          const double *rs = scps_ref_slot(ref, t, s, id);
          for (int d = 0; d < dim; d++) err_add(&te[1 + s], slots[s * dim + d], rs[d]);
        }
      }
      for (int e = 0; e < 3; e++) err_row = fmax(err_row, err_of(&te[e]));
    }
    CHECKF(err_act <= TOL && err_row <= TOL, "%s on %dx%d: activation error %.3g, row/slot error %.3g", label,
           tp[0], tp[1], err_act, err_row);
    worst = fmax(worst, fmax(err_act, err_row));
    snap[k] = sim_snapshot(&m, c, &len);
    scps_ref_destroy(ref);
    sim_destroy(&m);
  }
  if (!snap[0] || !snap[1] || !snap[2] || !snap[3]) {
    for (int k = 0; k < 4; k++) free(snap[k]);
    return;
  }
  double cross = 0;
  for (int k = 1; k < 3; k++) {
    tensor_err te = {0, 0};
    for (size_t i = 0; i < len; i++) err_add(&te, snap[k][i], snap[0][i]);
    cross = fmax(cross, err_of(&te));
  }
  CHECKF(cross <= TOL, "%s: topologies disagree by %.3g", label, cross);
  CHECKF(!memcmp(snap[1], snap[3], len * sizeof(float)), "%s: 1x4 is not bitwise repeatable", label);
  for (int k = 0; k < 4; k++) free(snap[k]);
}

int main(void) {
  config c;
  for (size_t o = 0; o < sizeof optimizers / sizeof optimizers[0]; o++)
    for (int comb = 0; comb < 3; comb++)
      for (int w = 0; w < 2; w++)
        for (int s = 0; s < 2; s++) {
          make_config(&c, optimizers[o], (scps_combiner)comb, w, s);
          run_config(&c);
        }
  printf("worst relative error against the reference: %.3g (tolerance %g)\n", worst, TOL);
  return scps_test_finish("test_numerics");
}
