#include "scps_ctr.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "scps_init.h"

#define CALIBRATION_BATCHES 8
#define PLANTED_BIAS (-1.0) /* about 30% clicks: an unbalanced but not rare label */
/* Planted tables up to this many floats are drawn once and kept; larger ones
 * are drawn per id as needed (the values are the same either way). */
#define PLANTED_CACHE_FLOATS ((int64_t)16 << 20)

struct scps_ctr {
  scps_workload_gen *gen;
  int n_features;
  int32_t batch;
  int32_t *dims;            /* per feature: embedding_dim of its table */
  scps_combiner *combiners; /* per feature */
  scps_initializer_spec planted_init;
  uint64_t *table_seeds;    /* per feature: planted seed of its table */
  float **planted;          /* per table: cached planted rows, or NULL */
  int *feature_table;       /* per feature: its table */
  int n_tables;
  float **weights;          /* per feature: planted output weights */
  double scale;             /* makes the logit's standard deviation logit_std */
  float *row, *pooled;
  float *labels, *probs;
  double *logits;
  uint64_t rng;
};

static uint64_t next64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static double unit(uint64_t *s) { return (double)(next64(s) >> 11) / 9007199254740992.0; }

void scps__ctr_destroy(scps_ctr *c) {
  if (!c) return;
  scps__workload_gen_destroy(c->gen);
  if (c->weights)
    for (int f = 0; f < c->n_features; f++) free(c->weights[f]);
  free(c->weights);
  free(c->dims);
  free(c->combiners);
  free(c->table_seeds);
  if (c->planted)
    for (int t = 0; t < c->n_tables; t++) free(c->planted[t]);
  free(c->planted);
  free(c->feature_table);
  free(c->row);
  free(c->pooled);
  free(c->labels);
  free(c->probs);
  free(c->logits);
  free(c);
}

/* Planted logit of every sample of the current batch, before scaling. */
static void raw_logits(scps_ctr *c, double *out) {
  const scps_feature_input *in = scps__workload_gen_inputs(c->gen);
  for (int32_t r = 0; r < c->batch; r++) out[r] = 0;
  for (int f = 0; f < c->n_features; f++) {
    const scps_feature_input *x = &in[f];
    int32_t dim = c->dims[f];
    for (int32_t r = 0; r < c->batch; r++) {
      int64_t a = x->row_offsets[r], b = x->row_offsets[r + 1];
      double wsum = 0, wsq = 0;
      for (int64_t k = a; k < b; k++) {
        double w = x->weights ? x->weights[k] : 1.0;
        wsum += w;
        wsq += w * w;
      }
      memset(c->pooled, 0, sizeof(float) * (size_t)dim);
      for (int64_t k = a; k < b; k++) {
        double w = x->weights ? x->weights[k] : 1.0;
        double gain = c->combiners[f] == SCPS_COMBINER_MEAN ? w / wsum
                      : c->combiners[f] == SCPS_COMBINER_SQRTN ? w / sqrt(wsq) : w;
        const float *row = c->planted[c->feature_table[f]];
        if (row) {
          row += x->ids[k] * dim;
        } else {
          scps__init_row(&c->planted_init, c->table_seeds[f], x->ids[k], dim, c->row);
          row = c->row;
        }
        for (int32_t d = 0; d < dim; d++) c->pooled[d] += (float)gain * row[d];
      }
      double dot = 0;
      for (int32_t d = 0; d < dim; d++) dot += (double)c->weights[f][d] * c->pooled[d];
      out[r] += dot;
    }
  }
}

int scps__ctr_create(const scps_workload *w, uint64_t stream, double logit_std, scps_ctr **out,
                    scps_error *err) {
  *out = NULL;
  scps_ctr *c = calloc(1, sizeof *c);
  if (!c) return scps_error_set(err, SCPS_ENOMEM, "ctr: out of memory");
  c->n_features = w->n_features;
  c->batch = w->batch_size;
  c->dims = calloc((size_t)w->n_features, sizeof *c->dims);
  c->combiners = calloc((size_t)w->n_features, sizeof *c->combiners);
  c->table_seeds = calloc((size_t)w->n_features, sizeof *c->table_seeds);
  c->weights = calloc((size_t)w->n_features, sizeof *c->weights);
  c->n_tables = w->n_tables;
  c->planted = calloc((size_t)w->n_tables, sizeof *c->planted);
  c->feature_table = calloc((size_t)w->n_features, sizeof *c->feature_table);
  c->labels = malloc(sizeof(float) * (size_t)c->batch);
  c->probs = malloc(sizeof(float) * (size_t)c->batch);
  int32_t widest = 1;
  for (int t = 0; t < w->n_tables; t++)
    if (w->tables[t].embedding_dim > widest) widest = w->tables[t].embedding_dim;
  c->row = malloc(sizeof(float) * (size_t)widest);
  c->pooled = malloc(sizeof(float) * (size_t)widest);
  double *logits = c->logits = malloc(sizeof(double) * (size_t)c->batch);
  int rc = c->dims && c->combiners && c->table_seeds && c->weights && c->labels && c->probs && c->row &&
                   c->pooled && logits && c->planted && c->feature_table
               ? 0
               : SCPS_ENOMEM;
  c->planted_init.type = SCPS_INIT_UNIFORM;
  c->planted_init.scale = 1.0;
  uint64_t ws = w->seed ^ 0x91a27ed0f1e1dull;
  for (int f = 0; !rc && f < w->n_features; f++) {
    int t = scps__find_table(w->tables, w->n_tables, w->features[f].table);
    c->dims[f] = w->tables[t].embedding_dim;
    c->combiners[f] = w->tables[t].combiner;
    c->table_seeds[f] = scps__init_seed(&w->tables[t]) ^ 0x7a5e11edull;
    c->feature_table[f] = t;
    int64_t n = w->tables[t].vocabulary_size * w->tables[t].embedding_dim;
    if (!c->planted[t] && n <= PLANTED_CACHE_FLOATS && (c->planted[t] = malloc(sizeof(float) * (size_t)n)))
      for (int64_t id = 0; id < w->tables[t].vocabulary_size; id++)
        scps__init_row(&c->planted_init, c->table_seeds[f], id, w->tables[t].embedding_dim,
                      c->planted[t] + id * w->tables[t].embedding_dim);
    c->weights[f] = malloc(sizeof(float) * (size_t)c->dims[f]);
    if (!c->weights[f]) {
      rc = SCPS_ENOMEM;
      break;
    }
    for (int32_t d = 0; d < c->dims[f]; d++) c->weights[f][d] = (float)(2.0 * unit(&ws) - 1.0);
  }
  /* Calibrate on a fixed stream so every stream of this workload shares the scale. */
  if (!rc) rc = scps__workload_gen_create(w, 0xca11b7a7eull, &c->gen, err);
  double sum = 0, sq = 0;
  for (int k = 0; !rc && k < CALIBRATION_BATCHES; k++) {
    scps__workload_gen_next(c->gen);
    raw_logits(c, logits);
    for (int32_t r = 0; r < c->batch; r++) {
      sum += logits[r];
      sq += logits[r] * logits[r];
    }
  }
  if (!rc) {
    double n = (double)CALIBRATION_BATCHES * c->batch, var = sq / n - (sum / n) * (sum / n);
    c->scale = var > 0 ? logit_std / sqrt(var) : 1.0;
    scps__workload_gen_destroy(c->gen);
    c->gen = NULL;
    rc = scps__workload_gen_create(w, stream, &c->gen, err);
  }
  c->rng = stream ^ 0x1abe15ull;
  if (rc) {
    scps__ctr_destroy(c);
    return rc == SCPS_ENOMEM ? scps_error_set(err, rc, "ctr: out of memory") : rc;
  }
  *out = c;
  return 0;
}

void scps__ctr_next(scps_ctr *c) {
  scps__workload_gen_next(c->gen);
  double *logits = c->logits;
  raw_logits(c, logits);
  for (int32_t r = 0; r < c->batch; r++) {
    double z = PLANTED_BIAS + c->scale * logits[r];
    double p = 1.0 / (1.0 + exp(-z));
    c->probs[r] = (float)p;
    c->labels[r] = unit(&c->rng) < p ? 1.0f : 0.0f;
  }
}

const scps_feature_input *scps__ctr_inputs(const scps_ctr *c) { return scps__workload_gen_inputs(c->gen); }
const float *scps__ctr_labels(const scps_ctr *c) { return c->labels; }
const float *scps__ctr_probs(const scps_ctr *c) { return c->probs; }
int32_t scps__ctr_batch_size(const scps_ctr *c) { return c->batch; }
