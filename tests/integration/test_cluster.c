/* libscps against real scps-server processes (1 x 4 and 3 x 2 SparseCores):
 * every step's activations, and at the end every row of every table, must
 * equal in-process engines fed the same specs, batches and gradients, with
 * what the wire rounds (bfloat16, eXmY) rounded here by independent
 * references (tests/ref for eXmY). */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scps_client_engine.h"
#include "scps_engine.h"
#include "scps_it.h"
#include "scps_ref_exmy.h"
#include "scps_test.h"
#include "scps_wirefmt.h"
#include "scps_workload.h"

/* Answer bytes that came through shared memory (scps_client_shared_traffic). */
static uint64_t placed_rx(const scps_client *c) {
  uint64_t sent, received;
  scps_client_shared_traffic(c, &sent, &received);
  return received;
}

#define SC_MEMORY ((int64_t)32 << 20) /* scps_it starts servers with --sc-memory 32M */
#define DEADLINE_MS 10000
#define STEPS 6

/* Every optimizer and combiner; t_sgd_a and t_sgd_b are stacked
 * automatically (same padded dim, optimizer, combiner), t_stack_x and
 * t_stack_y explicitly with different widths; several features read t_sgd_a
 * and t_adam (feature stacking). Dims that are not multiples of 8 exercise
 * the padding columns. */
static const char config_json[] =
    "{\"name\": \"cluster-test\", \"batch_size\": 48,\n"
    " \"ids\": {\"distribution\": \"zipf\", \"exponent\": 1.3, \"seed\": 7},\n"
    " \"tables\": [\n"
    "  {\"name\": \"t_sgd_a\", \"vocabulary_size\": 1000, \"embedding_dim\": 12, \"combiner\": \"sum\",\n"
    "   \"optimizer\": {\"type\": \"sgd\", \"learning_rate\": 0.1}, \"initializer\": {\"type\": \"normal\", \"stddev\": 0.1}},\n"
    "  {\"name\": \"t_sgd_b\", \"vocabulary_size\": 500, \"embedding_dim\": 16, \"combiner\": \"sum\",\n"
    "   \"optimizer\": {\"type\": \"sgd\", \"learning_rate\": 0.1}, \"initializer\": {\"type\": \"uniform\", \"scale\": 0.1}},\n"
    "  {\"name\": \"t_adagrad\", \"vocabulary_size\": 777, \"embedding_dim\": 8, \"combiner\": \"mean\",\n"
    "   \"optimizer\": {\"type\": \"adagrad\", \"learning_rate\": 0.05, \"initial_accumulator\": 0.1},\n"
    "   \"initializer\": {\"type\": \"normal\", \"stddev\": 0.1}},\n"
    "  {\"name\": \"t_adagrad_momentum\", \"vocabulary_size\": 300, \"embedding_dim\": 20, \"combiner\": \"sqrtn\",\n"
    "   \"optimizer\": {\"type\": \"adagrad_momentum\", \"learning_rate\": 0.05, \"momentum\": 0.9, \"beta2\": 0.99,\n"
    "                 \"use_nesterov\": true},\n"
    "   \"initializer\": {\"type\": \"truncated_normal\", \"stddev\": 0.1}},\n"
    "  {\"name\": \"t_adam\", \"vocabulary_size\": 2000, \"embedding_dim\": 32, \"combiner\": \"mean\",\n"
    "   \"optimizer\": {\"type\": \"adam\", \"learning_rate\": 0.01}, \"initializer\": {\"type\": \"normal\", \"stddev\": 0.1}},\n"
    "  {\"name\": \"t_ftrl\", \"vocabulary_size\": 1500, \"embedding_dim\": 8, \"combiner\": \"sqrtn\",\n"
    "   \"optimizer\": {\"type\": \"ftrl\", \"learning_rate\": 0.05, \"l1\": 0.001, \"l2\": 0.001},\n"
    "   \"initializer\": {\"type\": \"normal\", \"stddev\": 0.1}, \"clip\": [-0.15, 0.15]},\n"
    "  {\"name\": \"t_laprop\", \"vocabulary_size\": 640, \"embedding_dim\": 24, \"combiner\": \"sum\",\n"
    "   \"optimizer\": {\"type\": \"laprop\", \"learning_rate\": 0.01}, \"initializer\": {\"type\": \"constant\", \"value\": 0.05}},\n"
    "  {\"name\": \"t_f2a\", \"vocabulary_size\": 900, \"embedding_dim\": 16, \"combiner\": \"mean\",\n"
    "   \"optimizer\": {\"type\": \"f2a\", \"learning_rate\": 0.02, \"rho\": 0.5}, \"initializer\": {\"type\": \"normal\", \"stddev\": 0.1}},\n"
    "  {\"name\": \"t_stack_x\", \"vocabulary_size\": 400, \"embedding_dim\": 8, \"combiner\": \"sum\",\n"
    "   \"optimizer\": {\"type\": \"adagrad\", \"learning_rate\": 0.1}, \"initializer\": {\"type\": \"normal\", \"stddev\": 0.1},\n"
    "   \"stack\": \"explicit\"},\n"
    "  {\"name\": \"t_stack_y\", \"vocabulary_size\": 250, \"embedding_dim\": 16, \"combiner\": \"sum\",\n"
    "   \"optimizer\": {\"type\": \"adagrad\", \"learning_rate\": 0.1}, \"initializer\": {\"type\": \"normal\", \"stddev\": 0.1},\n"
    "   \"stack\": \"explicit\"}\n"
    " ],\n"
    " \"features\": [\n"
    "  {\"name\": \"f_sgd_a1\", \"table\": \"t_sgd_a\", \"valency\": [0, 6], \"weighted\": true},\n"
    "  {\"name\": \"f_sgd_a2\", \"table\": \"t_sgd_a\", \"valency\": 2},\n"
    "  {\"name\": \"f_sgd_b\", \"table\": \"t_sgd_b\", \"valency\": [1, 4]},\n"
    "  {\"name\": \"f_adagrad\", \"table\": \"t_adagrad\", \"valency\": [1, 5], \"weighted\": true},\n"
    "  {\"name\": \"f_agm\", \"table\": \"t_adagrad_momentum\", \"valency\": [0, 4]},\n"
    "  {\"name\": \"f_adam1\", \"table\": \"t_adam\", \"valency\": 3},\n"
    "  {\"name\": \"f_adam2\", \"table\": \"t_adam\", \"valency\": [0, 8], \"weighted\": true},\n"
    "  {\"name\": \"f_ftrl\", \"table\": \"t_ftrl\", \"valency\": [1, 6], \"weighted\": true},\n"
    "  {\"name\": \"f_laprop\", \"table\": \"t_laprop\", \"valency\": 1},\n"
    "  {\"name\": \"f_f2a\", \"table\": \"t_f2a\", \"valency\": [0, 5]},\n"
    "  {\"name\": \"f_sx\", \"table\": \"t_stack_x\", \"valency\": [1, 3]},\n"
    "  {\"name\": \"f_sy\", \"table\": \"t_stack_y\", \"valency\": 2}\n"
    " ]}\n";

/* The same cluster in this process: one engine per server process. */
typedef struct ref {
  scps_layout *layout;
  scps_engine *eng[SCPS_IT_MAX_PROCS];
  scps_prep *prep;
  int P, S;
  scps_wirefmt act, grad; /* the wire's formats */
  bool rows; /* answers in distinct rows: the wire rounds the rows, not the sums */
  bool grad_rows; /* pushes by row: the wire rounds each row's sum, not each sample's gradient */
} ref;

static int ref_init(ref *r, const scps_workload *w, int P, int S, scps_error *err) {
  memset(r, 0, sizeof *r);
  r->P = P;
  r->S = S;
  scps_topology topo = {P, S, SC_MEMORY};
  int rc = scps__layout_create(w->tables, w->n_tables, w->features, w->n_features, &topo, NULL, &r->layout, err);
  for (int p = 0; p < P && !rc; p++) rc = scps__engine_create(r->layout, p, &r->eng[p], err);
  if (!rc) rc = scps__prep_create(r->layout, NULL, &r->prep, err);
  return rc;
}

static void ref_free(ref *r) {
  scps__prep_destroy(r->prep);
  for (int p = 0; p < r->P; p++) scps__engine_destroy(r->eng[p]);
  scps__layout_destroy(r->layout);
}

/* Rounds through bfloat16 by its definition (nearest, ties to even, on the
 * float's bits), written apart from scps_bf16.h. */
static float bf16_round(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  uint32_t lower = u & 0xffffu, upper = u & 0xffff0000u;
  if (lower > 0x8000u || (lower == 0x8000u && (upper & 0x10000u))) upper += 0x10000u;
  memcpy(&f, &upper, sizeof f);
  return f;
}

/* splitmix64's output function, from its definition. */
static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* The seed of libscps's stochastic rounding of a push's gradients (its
 * documented function of step and stack; by row, stack n_stacks + the
 * (server, stack) pair's index). */
static uint64_t grad_seed(int64_t step, int st) { return mix64((uint64_t)step * 0x9e3779b97f4a7c15ull + (uint64_t)st + 1) | 1; }

/* A row of dim values as the wire carries it in eXmY format f: with a row
 * scale, the smallest s (in [-128, 127 - floor(log2(largest))]) that puts
 * the row's largest magnitude within the format's largest times 2^s; then
 * each value rounded at that scale: to nearest, ties to even (seed 0), or
 * up with probability (|x| - lo) / (hi - lo) by the draw mix64(seed +
 * (pos0 + j + 1) * 0x9e3779b97f4a7c15) >= (1 - that) * 2^64 (the codec's
 * rule: its dropped bits against the draw's top bits). */
static void ref_exmy_row(const scps_wirefmt *f, const float *in, size_t dim, uint64_t seed, uint64_t pos0,
                         float *out) {
  scps_ref_exmy at0, fr;
  int s = 0;
  if (scps_ref_exmy_init(&at0, f->exmy.x, f->exmy.y, f->exmy.bias, 0)) return;
  const double top = at0.mag[at0.n - 1];
  scps_ref_exmy_free(&at0);
  if (f->row_scale) {
    double mx = 0;
    for (size_t j = 0; j < dim; j++) mx = fmax(mx, fabs((double)in[j]));
    int hi = 127 - (int)floor(log2(top));
    hi = hi < 127 ? hi : 127;
    s = -128;
    while (s < hi && mx > ldexp(top, s)) s++;
    if (mx == 0) s = 0;
  }
  if (scps_ref_exmy_init(&fr, f->exmy.x, f->exmy.y, f->exmy.bias, s)) return;
  for (size_t j = 0; j < dim; j++) {
    const double x = (double)in[j];
    uint32_t code = scps_ref_exmy_round(&fr, x);
    if (seed) {
      uint32_t lo, hi;
      scps_ref_exmy_bracket(&fr, x, &lo, &hi);
      code = lo;
      if (hi != lo) {
        const double p = (fabs(x) - fr.mag[lo]) / (fr.mag[hi] - fr.mag[lo]);
        const uint64_t z = mix64(seed + (pos0 + j + 1) * 0x9e3779b97f4a7c15ull);
        if (p > 0 && z >= (uint64_t)ldexp(1.0 - p, 64)) code = hi;
      }
      if (signbit(x)) code |= 1u << (f->exmy.x + f->exmy.y);
    }
    out[j] = (float)scps_ref_exmy_value(&fr, code);
  }
  scps_ref_exmy_free(&fr);
}

/* rows x dim values rounded as format f carries them (float32 as they are). */
static void ref_wire(const scps_wirefmt *f, float *v, size_t rows, size_t dim, uint64_t seed, uint64_t pos0) {
  if (f->kind == SCPS_WIREFMT_BFLOAT16)
    for (size_t j = 0; j < rows * dim; j++) v[j] = bf16_round(v[j]);
  else if (f->kind == SCPS_WIREFMT_EXMY)
    for (size_t i = 0; i < rows; i++) ref_exmy_row(f, v + i * dim, dim, seed, pos0 + i * dim, v + i * dim);
}

/* One process's partial of a stack when its answer is distinct rows in a
 * format that rounds: each row rounded, then pooled by the entries in
 * order, written here from the shards and the partitions alone. */
static void ref_rows_rounded(ref *r, int p, int st, float *blk) {
  const size_t dim = (size_t)r->layout->stacks[st].dim;
  for (int k = 0; k < r->S; k++) {
    const scps_coo *coo = scps__prep_coo(r->prep, st, p * r->S + k);
    /* The partition's distinct rows, in its order, as the engine reads
     * them (decoded from a table's storage format), then rounded. */
    float *rows = malloc(sizeof(float) * (coo->n + 1) * dim);
    if (!rows) return;
    scps__engine_copy_rows(r->eng[p], st, k, coo, rows);
    size_t d = 0;
    for (size_t i = 0; i < coo->n; i++) {
      d += i > 0 && coo->rows[i] != coo->rows[i - 1];
      if (i == 0 || coo->rows[i] != coo->rows[i - 1]) ref_wire(&r->act, rows + d * dim, 1, dim, 0, 0);
      for (size_t c = 0; c < dim; c++) blk[(size_t)coo->samples[i] * dim + c] += coo->gains[i] * rows[d * dim + c];
    }
    free(rows);
  }
}

/* What a server computes for a stack (its SparseCores' entries accumulated
 * in order, rounded to bfloat16 if that is the wire format) and what a
 * client makes of it (processes summed in order). */
static int ref_lookup(ref *r, const scps_feature_input *in, float **acts, scps_error *err) {
  int rc = scps__prep_run(r->prep, in, err);
  if (rc) return rc;
  const scps_layout *l = r->layout;
  for (int st = 0; st < l->n_stacks; st++) {
    const scps_stack_layout *sl = &l->stacks[st];
    size_t block = (size_t)sl->total_sample_count * (size_t)sl->dim;
    float *sum = calloc(block, sizeof(float)), *blk = malloc(sizeof(float) * block);
    for (int p = 0; p < r->P; p++) {
      memset(blk, 0, block * sizeof(float));
      if (r->act.kind != SCPS_WIREFMT_FLOAT32 && r->rows) {
        ref_rows_rounded(r, p, st, blk);
      } else {
        for (int k = 0; k < r->S; k++)
          scps__engine_lookup(r->eng[p], st, k, scps__prep_coo(r->prep, st, p * r->S + k), 0,
                             (uint32_t)sl->total_sample_count, blk);
        ref_wire(&r->act, blk, (size_t)sl->total_sample_count, (size_t)sl->dim, 0, 0);
      }
      for (size_t j = 0; j < block; j++) sum[j] = p == 0 ? blk[j] : sum[j] + blk[j];
    }
    for (int i = 0; i < sl->n_features; i++) {
      int f = sl->features[i];
      int64_t b = l->feature_specs[f].batch_size, off = l->features[f].sample_offset;
      int32_t width = l->table_specs[l->features[f].table].embedding_dim;
      for (int64_t s = 0; s < b; s++)
        for (int32_t c = 0; c < width; c++) acts[f][s * width + c] = sum[(off + s) * sl->dim + c];
    }
    free(sum);
    free(blk);
  }
  return 0;
}

/* A push by row in a format that rounds: each distinct row's gradient
 * summed in float32 from the samples' unrounded gradients g, in entry
 * order, then rounded as the wire carries it (eXmY: seeded by step and the
 * (server, stack) pair, row r0 + i of the pair at position (r0 + i) x dim).
 * Returns the rows it applied. */
static size_t ref_apply_rows(ref *r, int p, int st, int k, const scps_coo *coo, const float *g, const scps_step *s,
                             size_t r0) {
  const size_t dim = (size_t)r->layout->stacks[st].dim;
  uint32_t *rows = malloc(sizeof *rows * (coo->n + 1));
  float *sums = calloc((coo->n + 1) * dim, sizeof *sums);
  size_t n = 0;
  for (size_t i = 0; i < coo->n; i++) {
    if (i == 0 || coo->rows[i] != coo->rows[i - 1]) rows[n++] = coo->rows[i];
    float *sum = sums + (n - 1) * dim;
    for (size_t c = 0; c < dim; c++) sum[c] += coo->gains[i] * g[(size_t)coo->samples[i] * dim + c];
  }
  const int ns = r->layout->n_stacks;
  ref_wire(&r->grad, sums, n, dim, grad_seed(s->step, ns + p * ns + st), r0 * dim);
  scps__engine_update_rows(r->eng[p], st, k, rows, n, sums, s);
  free(rows);
  free(sums);
  return n;
}

/* Applies grads for the partitions of the last ref_lookup. */
static void ref_apply(ref *r, float *const *grads, int64_t step, double lr) {
  const scps_layout *l = r->layout;
  scps_step s = {step, lr};
  for (int st = 0; st < l->n_stacks; st++) {
    const scps_stack_layout *sl = &l->stacks[st];
    float *g = calloc((size_t)sl->total_sample_count * (size_t)sl->dim, sizeof(float));
    for (int i = 0; i < sl->n_features; i++) {
      int f = sl->features[i];
      int64_t b = l->feature_specs[f].batch_size, off = l->features[f].sample_offset;
      int32_t width = l->table_specs[l->features[f].table].embedding_dim;
      for (int64_t q = 0; q < b; q++)
        for (int32_t c = 0; c < width; c++) g[(off + q) * sl->dim + c] = grads[f][q * width + c];
    }
    const bool rounded_rows = r->grad.kind != SCPS_WIREFMT_FLOAT32 && r->grad_rows;
    if (!rounded_rows) ref_wire(&r->grad, g, (size_t)sl->total_sample_count, (size_t)sl->dim, grad_seed(step, st), 0);
    for (int p = 0; p < r->P; p++)
      for (int k = 0, r0 = 0; k < r->S; k++) {
        const scps_coo *coo = scps__prep_coo(r->prep, st, p * r->S + k);
        if (rounded_rows) r0 += (int)ref_apply_rows(r, p, st, k, coo, g, &s, (size_t)r0);
        else scps__engine_update(r->eng[p], st, k, coo, g, &s);
      }
    free(g);
  }
}

static uint64_t rng = 12345;
static float uniform_pm1(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (float)((double)(rng >> 11) / (double)(1ull << 53) * 2.0 - 1.0);
}

typedef struct counts {
  long values, exact, bad;
} counts;

/* Client activations against the reference's, to 1e-6 relative. */
static void compare(const scps_layout *l, float **got, float **want, const char *what, counts *n) {
  int reported = 0;
  for (int f = 0; f < l->n_features; f++) {
    int32_t width = l->table_specs[l->features[f].table].embedding_dim;
    size_t len = (size_t)l->feature_specs[f].batch_size * (size_t)width;
    for (size_t i = 0; i < len; i++) {
      float a = got[f][i], b = want[f][i];
      n->values++;
      if (a == b) {
        n->exact++;
      } else if (!(fabsf(a - b) <= 1e-6f * fmaxf(fabsf(a), fabsf(b)))) {
        n->bad++;
        if (reported++ < 5)
          fprintf(stderr, "%s: feature '%s' sample %zu column %zu: libscps %.9g, in-process %.9g\n", what,
                  l->feature_specs[f].name, i / (size_t)width, i % (size_t)width, a, b);
      }
    }
  }
}

typedef struct bufs {
  float **acts, **want, **grads;
} bufs;

static void bufs_init(bufs *b, const scps_layout *l) {
  b->acts = calloc((size_t)l->n_features, sizeof(float *));
  b->want = calloc((size_t)l->n_features, sizeof(float *));
  b->grads = calloc((size_t)l->n_features, sizeof(float *));
  for (int f = 0; f < l->n_features; f++) {
    size_t len = (size_t)l->feature_specs[f].batch_size * (size_t)l->table_specs[l->features[f].table].embedding_dim;
    b->acts[f] = malloc(len * sizeof(float));
    b->want[f] = malloc(len * sizeof(float));
    b->grads[f] = malloc(len * sizeof(float));
  }
}

static void bufs_free(bufs *b, const scps_layout *l) {
  for (int f = 0; f < l->n_features; f++) {
    free(b->acts[f]);
    free(b->want[f]);
    free(b->grads[f]);
  }
  free(b->acts);
  free(b->want);
  free(b->grads);
}

/* Ragged inputs with at most max_per_row ids per sample, caller-filled. */
typedef struct manual {
  scps_feature_input *in;
  int64_t **offsets, **ids;
} manual;

static void manual_init(manual *m, const scps_layout *l, int max_per_row) {
  m->in = calloc((size_t)l->n_features, sizeof *m->in);
  m->offsets = calloc((size_t)l->n_features, sizeof *m->offsets);
  m->ids = calloc((size_t)l->n_features, sizeof *m->ids);
  for (int f = 0; f < l->n_features; f++) {
    size_t b = (size_t)l->feature_specs[f].batch_size;
    m->offsets[f] = calloc(b + 1, sizeof(int64_t));
    m->ids[f] = calloc(b * (size_t)max_per_row + 1, sizeof(int64_t));
    m->in[f].form = SCPS_INPUT_RAGGED;
    m->in[f].row_offsets = m->offsets[f];
    m->in[f].ids = m->ids[f];
  }
}

static void manual_free(manual *m, const scps_layout *l) {
  for (int f = 0; f < l->n_features; f++) {
    free(m->offsets[f]);
    free(m->ids[f]);
  }
  free(m->in);
  free(m->offsets);
  free(m->ids);
}

/* Fills feature f: sample s gets ids[s] (repeated `rep` times) when
 * ids[s] >= 0, nothing otherwise. */
static void manual_set(manual *m, const scps_layout *l, int f, const int64_t *ids, int rep) {
  int64_t b = l->feature_specs[f].batch_size, n = 0;
  for (int64_t s = 0; s < b; s++) {
    m->offsets[f][s] = n;
    if (ids && ids[s] >= 0)
      for (int k = 0; k < rep; k++) m->ids[f][n++] = ids[s];
  }
  m->offsets[f][b] = n;
  m->in[f].n_ids = (size_t)n;
}

/* A client call that must succeed. After a failure (a server gone, say)
 * every further step would wait out its deadline, so the run stops. */
#define MUST(call)                                                 \
  do {                                                             \
    int must_rc_ = (call);                                         \
    CHECKF(must_rc_ == 0, "%s: %s: %s", what, #call, err.msg);     \
    if (must_rc_) goto out;                                        \
  } while (0)

static void random_grads(const scps_layout *l, float **grads) {
  for (int f = 0; f < l->n_features; f++) {
    size_t len = (size_t)l->feature_specs[f].batch_size * (size_t)l->table_specs[l->features[f].table].embedding_dim;
    for (size_t i = 0; i < len; i++) grads[f][i] = uniform_pm1();
  }
}

static int feature_index(const scps_layout *l, const char *name) {
  for (int f = 0; f < l->n_features; f++)
    if (!strcmp(l->feature_specs[f].name, name)) return f;
  return -1;
}

/* The "explicit" stack's features alone, every other feature empty. With
 * same every id is 7; otherwise f_sx gets x_per ids per sample, none shared
 * between samples, and f_sy (valency 2) two ids per sample, or with y_pairs
 * one id twice, the same for samples 2k and 2k + 1. */
static void explicit_only(manual *m, const scps_layout *l, int x_per, bool y_pairs, bool same) {
  for (int f = 0; f < l->n_features; f++) manual_set(m, l, f, NULL, 1);
  int fx = feature_index(l, "f_sx"), fy = feature_index(l, "f_sy");
  for (int k = 0; k < 2; k++) {
    int f = k ? fy : fx, per = k ? 2 : x_per;
    int64_t b = l->feature_specs[f].batch_size, n = 0;
    for (int64_t s = 0; s < b; s++) {
      m->offsets[f][s] = n;
      for (int j = 0; j < per; j++) m->ids[f][n++] = same ? 7 : k && y_pairs ? s / 2 : s * per + j;
    }
    m->offsets[f][b] = n;
    m->in[f].n_ids = (size_t)n;
  }
}

/* AUTO asks for a stack's distinct rows when they take no more bytes than
 * its pooled activations. The explicit stack pools 96 samples: with 240
 * distinct rows it must come back pooled; with 72 and with 2 as rows.
 * Payload bytes received tell which; in float32 either way the activations
 * are bit-identical. */
static void check_auto_answers(const char *what, const scps_client_options *base, scps_client *c_auto,
                               scps_batch *b_auto, const scps_layout *l, manual *m, bufs *bf) {
  static const struct {
    int x_per;
    bool y_pairs, same, rows;
    const char *name;
  } cases[] = {{3, false, false, false, "240 rows"}, {1, true, false, true, "72 rows"}, {1, false, true, true, "2 rows"}};
  scps_error err;
  scps_error_clear(&err);
  scps_client *forced[2] = {NULL, NULL};
  scps_batch *fb[2] = {NULL, NULL};
  float **acts[2] = {NULL, NULL};
  for (int k = 0; k < 2; k++) {
    scps_client_options o = *base;
    o.answer = k ? SCPS_ANSWER_DISTINCT_ROWS : SCPS_ANSWER_POOLED;
    o.gradients = k ? SCPS_GRADIENTS_BY_ROW : SCPS_GRADIENTS_BY_SAMPLE;
    MUST(scps_client_create(&o, &forced[k], &err));
    MUST(scps_batch_create(forced[k], &fb[k], &err));
    acts[k] = calloc((size_t)l->n_features, sizeof(float *));
    for (int f = 0; f < l->n_features; f++)
      acts[k][f] = malloc(sizeof(float) * (size_t)l->feature_specs[f].batch_size *
                          (size_t)l->table_specs[l->features[f].table].embedding_dim);
  }
  for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
    explicit_only(m, l, cases[t].x_per, cases[t].y_pairs, cases[t].same);
    uint64_t got[3], s0, r0, s1, r1;
    scps_client *cs[3] = {c_auto, forced[0], forced[1]};
    scps_batch *bs[3] = {b_auto, fb[0], fb[1]};
    float **out[3] = {bf->acts, acts[0], acts[1]};
    for (int k = 0; k < 3; k++) {
      MUST(scps_client_prepare(cs[k], m->in, bs[k], &err));
      /* The answer's bytes, over the connection or through shared memory. */
      scps_client_traffic(cs[k], &s0, &r0);
      r0 += placed_rx(cs[k]);
      MUST(scps_client_lookup(cs[k], bs[k], out[k], DEADLINE_MS, &err));
      scps_client_traffic(cs[k], &s1, &r1);
      r1 += placed_rx(cs[k]);
      got[k] = r1 - r0;
    }
    uint64_t want = got[cases[t].rows ? 2 : 1], other = got[cases[t].rows ? 1 : 2];
    CHECKF(got[0] == want && want != other, "%s: auto answer with %s: %llu bytes, pooled %llu, rows %llu", what,
           cases[t].name, (unsigned long long)got[0], (unsigned long long)got[1], (unsigned long long)got[2]);
    for (int f = 0; f < l->n_features; f++) {
      size_t len = (size_t)l->feature_specs[f].batch_size * (size_t)l->table_specs[l->features[f].table].embedding_dim;
      CHECKF(!memcmp(bf->acts[f], acts[0][f], len * sizeof(float)) &&
                 !memcmp(bf->acts[f], acts[1][f], len * sizeof(float)),
             "%s: %s, feature %d: auto, pooled and rows answers differ", what, cases[t].name, f);
    }
    /* The same choice for pushes: by row where that is at most 3/4 of the
     * bytes by sample. */
    random_grads(l, bf->grads);
    for (int k = 0; k < 3; k++) {
      /* The gradients' bytes, over the connection or through shared memory. */
      uint64_t p0, p1, q;
      scps_client_traffic(cs[k], &s0, &r0);
      scps_client_shared_traffic(cs[k], &p0, &q);
      MUST(scps_client_apply_gradients(cs[k], bs[k], (const float *const *)bf->grads, 1000 + (int64_t)t, -1,
                                       DEADLINE_MS, &err));
      scps_client_traffic(cs[k], &s1, &r1);
      scps_client_shared_traffic(cs[k], &p1, &q);
      got[k] = s1 - s0 + p1 - p0;
    }
    want = got[cases[t].rows ? 2 : 1];
    other = got[cases[t].rows ? 1 : 2];
    CHECKF(got[0] == want && want < other, "%s: auto push with %s: %llu bytes, by sample %llu, by row %llu", what,
           cases[t].name, (unsigned long long)got[0], (unsigned long long)got[1], (unsigned long long)got[2]);
  }
out:
  for (int k = 0; k < 2; k++) {
    for (int f = 0; acts[k] && f < l->n_features; f++) free(acts[k][f]);
    free(acts[k]);
    scps_batch_destroy(fb[k]);
    scps_client_destroy(forced[k]);
  }
}

/* workers: every Lookup through the SparseCore workers (gang jobs) instead
 * of these small ones on the receiving thread (--inline-lookup-entries).
 * answer: how the servers answer lookups (distinct rows are pooled by the
 * client; in float32 bit for bit as pooled answers). */
static void run_topology(const scps_workload *w, const char *w_json, int P, int S, bool declare, const char *wire,
                         bool workers, scps_answer_mode answer, scps_gradient_mode gradients) {
  char what[128];
  const bool f32 = !strcmp(wire, "float32");
  snprintf(what, sizeof what, "%dx%d%s%s%s, %s answers, pushes by %s", P, S, f32 ? "" : " ", f32 ? "" : wire,
           workers ? " gang lookups" : "", scps_answer_mode_name(answer), scps_gradient_mode_name(gradients));
  scps_it_cluster cl;
  scps_error err;
  scps_error_clear(&err);
  ref r;
  scps_client *c = NULL;
  scps_batch *b = NULL;
  scps_workload_gen *gen = NULL;
  const scps_layout *l = NULL;
  bufs bf = {NULL, NULL, NULL};
  manual m = {NULL, NULL, NULL};
  int64_t one[48];
  memset(&r, 0, sizeof r);
  CHECK(scps_it_init(&cl, w_json, P, S) == 0);
  if (workers) {
    cl.extra[0] = "--inline-lookup-entries";
    cl.extra[1] = "0";
  }
  if (scps_it_start(&cl)) {
    CHECKF(0, "%s: cannot start the servers", what);
    goto out;
  }
  MUST(ref_init(&r, w, P, S, &err));
  r.rows = answer == SCPS_ANSWER_DISTINCT_ROWS;
  r.grad_rows = gradients == SCPS_GRADIENTS_BY_ROW;
  scps_topology topo = {P, S, SC_MEMORY};
  scps_client_options o;
  scps_client_options_init(&o);
  o.servers = cl.addr_list;
  o.n_servers = P;
  o.prep_threads = declare ? 1 : 2;
  MUST(scps_client_options_set_wire_format(&o, wire, &err));
  scps__wirefmt_parse(o.activation_format, &r.act, NULL);
  scps__wirefmt_parse(o.gradient_format, &r.grad, NULL);
  o.answer = answer;
  o.gradients = gradients;
  const scps_client_expected e = {&topo, w->tables, w->n_tables, w->features, w->n_features};
  MUST(scps__client_create_expecting(&o, declare ? &e : NULL, &c, &err));
  l = scps__client_layout(c);
  CHECK(l->n_stacks == r.layout->n_stacks && l->n_features == w->n_features);
  CHECK(scps__layout_find_stack(l, "explicit") >= 0);
  MUST(scps_batch_create(c, &b, &err));
  MUST(scps__workload_gen_create(w, 99, &gen, &err));
  bufs_init(&bf, l);
  manual_init(&m, l, 8);
  counts n = {0, 0, 0};
  double t_lookup = 0, t_apply = 0, t_min = 1e30;
  for (int step = 0; step < STEPS; step++) {
    scps__workload_gen_next(gen);
    const scps_feature_input *in = scps__workload_gen_inputs(gen);
    MUST(scps_client_prepare(c, in, b, &err));
    double t0 = scps_it_now_ms();
    MUST(scps_client_lookup(c, b, bf.acts, DEADLINE_MS, &err));
    double dt = scps_it_now_ms() - t0;
    t_lookup += dt;
    if (dt < t_min) t_min = dt;
    MUST(ref_lookup(&r, in, bf.want, &err));
    compare(l, bf.acts, bf.want, what, &n);
    random_grads(l, bf.grads);
    /* Step 3 overrides every stack's learning rate; the others keep theirs. */
    double lr = step == 3 ? 0.03 : -1.0;
    t0 = scps_it_now_ms();
    MUST(scps_client_apply_gradients(c, b, (const float *const *)bf.grads, step + 1, lr, DEADLINE_MS, &err));
    t_apply += scps_it_now_ms() - t0;
    ref_apply(&r, bf.grads, step + 1, lr);
  }
  printf("%s: %d steps of %d features: lookup %.2f ms mean (%.2f min), apply %.2f ms mean\n", what, STEPS,
         l->n_features, t_lookup / STEPS, t_min, t_apply / STEPS);

  /* A nearly empty batch: most stacks have no entry on most servers. */
  for (int s = 0; s < 48; s++) one[s] = -1;
  for (int f = 0; f < l->n_features; f++) manual_set(&m, l, f, NULL, 1);
  one[3] = 5;
  manual_set(&m, l, 0, one, 1);
  one[3] = -1;
  one[47] = 1;
  manual_set(&m, l, l->n_features - 1, one, 2);
  MUST(scps_client_prepare(c, m.in, b, &err));
  for (int f = 0; f < l->n_features; f++) bf.acts[f][0] = 1234.0f; /* must be overwritten */
  MUST(scps_client_lookup(c, b, bf.acts, DEADLINE_MS, &err));
  MUST(ref_lookup(&r, m.in, bf.want, &err));
  compare(l, bf.acts, bf.want, what, &n);
  CHECK(bf.acts[1][0] == 0.0f && bf.acts[0][3 * 12] != 0.0f);
  random_grads(l, bf.grads);
  MUST(scps_client_apply_gradients(c, b, (const float *const *)bf.grads, STEPS + 1, -1, DEADLINE_MS, &err));
  ref_apply(&r, bf.grads, STEPS + 1, -1);

  /* Every row of every table: sample s of a table's first feature reads id
   * j * 48 + s (a fixed-valency feature repeats it), the rest stay empty. */
  int64_t max_vocab = 0;
  for (int t = 0; t < l->n_tables; t++)
    if (l->table_specs[t].vocabulary_size > max_vocab) max_vocab = l->table_specs[t].vocabulary_size;
  counts sweep = {0, 0, 0};
  for (int64_t j = 0; j * 48 < max_vocab; j++) {
    for (int f = 0; f < l->n_features; f++) {
      int t = l->features[f].table, first = f;
      for (int g = 0; g < f; g++)
        if (l->features[g].table == t && first == f) first = g;
      for (int s = 0; s < 48; s++)
        one[s] = j * 48 + s < l->table_specs[t].vocabulary_size && first == f ? j * 48 + s : -1;
      int v = l->feature_specs[f].valency;
      manual_set(&m, l, f, one, v > 0 ? v : 1);
    }
    MUST(scps_client_prepare(c, m.in, b, &err));
    MUST(scps_client_lookup(c, b, bf.acts, DEADLINE_MS, &err));
    MUST(ref_lookup(&r, m.in, bf.want, &err));
    compare(l, bf.acts, bf.want, what, &sweep);
  }
  printf("%s: activations: %ld values, %ld bitwise equal, %ld off by more than 1e-6; table sweep: %ld values, "
         "%ld bitwise equal, %ld off\n",
         what, n.values, n.exact, n.bad, sweep.values, sweep.exact, sweep.bad);
  CHECK(n.bad == 0 && sweep.bad == 0);
  CHECK(n.values > 0 && sweep.values > 0);
  if (answer == SCPS_ANSWER_AUTO && f32) check_auto_answers(what, &o, c, b, l, &m, &bf);
out:
  if (m.in) manual_free(&m, l);
  if (bf.acts) bufs_free(&bf, l);
  scps__workload_gen_destroy(gen);
  scps_batch_destroy(b);
  scps_client_destroy(c);
  ref_free(&r);
  scps_it_stop(&cl);
}

/* One stack that 3 servers answer in distinct rows, which the client pools
 * straight into the features' arrays, each later server's partial added:
 * its 4200 samples take two pooling items of 4096 samples, the second
 * feature across both. Pooled answers (checked against in-process engines
 * above) must come out bit for bit the same. */
static const char in_place_json[] =
    "{\"name\": \"rows-in-place\", \"batch_size\": 2100,\n"
    " \"ids\": {\"distribution\": \"zipf\", \"exponent\": 1.05, \"seed\": 11},\n"
    " \"tables\": [{\"name\": \"t_rows\", \"vocabulary_size\": 3000, \"embedding_dim\": 64, \"combiner\": \"mean\",\n"
    "   \"optimizer\": {\"type\": \"sgd\", \"learning_rate\": 0.1}, \"initializer\": {\"type\": \"normal\", \"stddev\": 0.1}}],\n"
    " \"features\": [{\"name\": \"f_one\", \"table\": \"t_rows\", \"valency\": 1},\n"
    "              {\"name\": \"f_few\", \"table\": \"t_rows\", \"valency\": [1, 3], \"weighted\": true}]}\n";

/* Pushes by row split into items of about 8192 entries on the client's
 * threads, a row never across two: a small table read twice by every
 * sample, stacked with a large one, gives partitions of over 16384 entries
 * with hundreds per row of the small table. Two clusters started alike,
 * one pushed by sample and one by row, must answer the same lookups bit
 * for bit after every push. */
static const char split_json[] =
    "{\"name\": \"row-items\", \"batch_size\": 10000,\n"
    " \"ids\": {\"distribution\": \"zipf\", \"exponent\": 1.2, \"seed\": 3},\n"
    " \"tables\": [{\"name\": \"t_small\", \"vocabulary_size\": 40, \"embedding_dim\": 16, \"combiner\": \"sum\",\n"
    "   \"max_ids_per_partition\": 40000, \"max_unique_ids_per_partition\": 40000,\n"
    "   \"optimizer\": {\"type\": \"adagrad\", \"learning_rate\": 0.1, \"initial_accumulator\": 0.1},\n"
    "   \"initializer\": {\"type\": \"uniform\", \"scale\": 0.5}},\n"
    "  {\"name\": \"t_large\", \"vocabulary_size\": 50000, \"embedding_dim\": 16, \"combiner\": \"sum\",\n"
    "   \"max_ids_per_partition\": 40000, \"max_unique_ids_per_partition\": 40000,\n"
    "   \"optimizer\": {\"type\": \"adagrad\", \"learning_rate\": 0.1, \"initial_accumulator\": 0.1},\n"
    "   \"initializer\": {\"type\": \"uniform\", \"scale\": 0.5}}],\n"
    " \"features\": [{\"name\": \"f_small\", \"table\": \"t_small\", \"valency\": 2},\n"
    "              {\"name\": \"f_large\", \"table\": \"t_large\", \"valency\": [1, 3], \"weighted\": true}]}\n";

/* Two clients that must see bit-identical activations, step by step: on
 * one cluster, or with push, each pushing the same gradients to a cluster
 * of its own started alike. */
typedef struct twin_case {
  const char *what, *json, *than;
  int P, seed;
  bool push;
  scps_answer_mode answer[2];
  scps_gradient_mode gradients[2];
  size_t min_entries; /* stack 0's partition on SparseCore 0 must hold more */
} twin_case;

static void run_twins(const twin_case *tc) {
  const char *what = tc->what;
  const int n_cl = tc->push ? 2 : 1;
  scps_it_cluster cl[2];
  scps_error err;
  scps_error_clear(&err);
  scps_workload *w = NULL;
  scps_workload_gen *gen = NULL;
  scps_client *c[2] = {NULL, NULL};
  scps_batch *b[2] = {NULL, NULL};
  bufs bf[2] = {{NULL, NULL, NULL}, {NULL, NULL, NULL}};
  const scps_layout *l = NULL;
  bool started = true;
  for (int k = 0; k < n_cl; k++) {
    CHECK(scps_it_init(&cl[k], tc->json, tc->P, 2) == 0);
    started &= scps_it_start(&cl[k]) == 0;
  }
  if (!started) {
    CHECKF(0, "%s: cannot start the servers", what);
    goto out;
  }
  MUST(scps__workload_parse(tc->json, strlen(tc->json), &w, &err));
  for (int k = 0; k < 2; k++) {
    scps_client_options o;
    scps_client_options_init(&o);
    o.servers = cl[k % n_cl].addr_list;
    o.n_servers = tc->P;
    o.prep_threads = 2;
    o.answer = tc->answer[k];
    o.gradients = tc->gradients[k];
    MUST(scps_client_create(&o, &c[k], &err));
    MUST(scps_batch_create(c[k], &b[k], &err));
    l = scps__client_layout(c[k]);
    bufs_init(&bf[k], l);
  }
  MUST(scps__workload_gen_create(w, (uint64_t)tc->seed, &gen, &err));
  counts n = {0, 0, 0};
  for (int step = 0; step < 4; step++) {
    scps__workload_gen_next(gen);
    const scps_feature_input *in = scps__workload_gen_inputs(gen);
    random_grads(l, bf[0].grads);
    for (int k = 0; k < 2; k++) {
      MUST(scps_client_prepare(c[k], in, b[k], &err));
      MUST(scps_client_lookup(c[k], b[k], bf[k].acts, DEADLINE_MS, &err));
      if (!tc->push) continue;
      MUST(scps_client_apply_gradients(c[k], b[k], (const float *const *)bf[0].grads, step + 1, -1, DEADLINE_MS,
                                       &err));
      MUST(scps_client_lookup(c[k], b[k], bf[k].acts, DEADLINE_MS, &err));
    }
    compare(l, bf[1].acts, bf[0].acts, what, &n);
  }
  const scps_coo *sc0 = scps__prep_coo(scps__client_prep(c[1]), 0, 0);
  printf("%s: %ld values, %ld bitwise equal to %s (%zu entries on SparseCore 0)\n", what, n.values, n.exact,
         tc->than, sc0->n);
  CHECK(sc0->n > tc->min_entries);
  CHECK(n.values > 0 && n.exact == n.values);
out:
  for (int k = 0; k < 2; k++) {
    if (bf[k].acts) bufs_free(&bf[k], scps__client_layout(c[k]));
    scps_batch_destroy(b[k]);
    scps_client_destroy(c[k]);
  }
  for (int k = 0; k < n_cl; k++) scps_it_stop(&cl[k]);
  scps__workload_gen_destroy(gen);
  scps__workload_destroy(w);
}

/* config_json with t_sgd_a in bfloat16, t_adam in e4m3 with its slots
 * in bfloat16 and e5m2, t_ftrl in e3m4 rounded to nearest (malloc'd). */
static char *with_storage(const char *json) {
  static const struct {
    const char *at, *add;
  } edits[] = {{"{\"name\": \"t_sgd_a\", ", "\"storage_format\": \"bfloat16\", "},
               {"{\"name\": \"t_adam\", ", "\"storage_format\": \"e4m3\", \"slot_formats\": "
                                          "{\"momentum\": \"bfloat16\", \"velocity\": \"e5m2\"}, "},
               {"{\"name\": \"t_ftrl\", ", "\"storage_format\": \"e3m4\", \"storage_rounding\": \"nearest\", "}};
  char *out = malloc(strlen(json) + 512), *w = out;
  const char *r = json;
  if (!out) return NULL;
  for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
    const char *at = strstr(r, edits[i].at);
    if (!at) {
      free(out);
      return NULL;
    }
    at += strlen(edits[i].at);
    memcpy(w, r, (size_t)(at - r));
    w += at - r;
    w += sprintf(w, "%s", edits[i].add);
    r = at;
  }
  strcpy(w, r);
  return out;
}

int main(void) {
  scps_error err;
  scps_workload *w = NULL;
  CHECK_OK(scps__workload_parse(config_json, strlen(config_json), &w, &err), &err);
  if (w) {
    /* Pushes by sample and by row give bit-identical tables in float32, so
     * every float32 run checks against the same by-sample reference. */
    run_topology(w, config_json, 1, 4, true, "float32", false, SCPS_ANSWER_POOLED, SCPS_GRADIENTS_BY_SAMPLE);
    run_topology(w, config_json, 1, 4, false, "float32", true, SCPS_ANSWER_DISTINCT_ROWS, SCPS_GRADIENTS_BY_ROW);
    run_topology(w, config_json, 1, 4, false, "float32", false, SCPS_ANSWER_AUTO, SCPS_GRADIENTS_AUTO);
    run_topology(w, config_json, 3, 2, false, "float32", false, SCPS_ANSWER_POOLED, SCPS_GRADIENTS_BY_ROW);
    run_topology(w, config_json, 3, 2, false, "float32", true, SCPS_ANSWER_DISTINCT_ROWS, SCPS_GRADIENTS_AUTO);
    run_topology(w, config_json, 3, 2, false, "bfloat16", true, SCPS_ANSWER_POOLED, SCPS_GRADIENTS_BY_ROW);
    run_topology(w, config_json, 3, 2, false, "bfloat16", false, SCPS_ANSWER_DISTINCT_ROWS, SCPS_GRADIENTS_BY_SAMPLE);
    /* eXmY: the servers' activations rounded to nearest, the client's
     * gradients stochastically, each against the references above. */
    run_topology(w, config_json, 3, 2, false, "e4m3/e3m0s", true, SCPS_ANSWER_POOLED, SCPS_GRADIENTS_BY_SAMPLE);
    run_topology(w, config_json, 3, 2, false, "e2m1s/e5m2", false, SCPS_ANSWER_DISTINCT_ROWS, SCPS_GRADIENTS_BY_ROW);
    run_topology(w, config_json, 1, 4, false, "e3m4b5", false, SCPS_ANSWER_POOLED, SCPS_GRADIENTS_BY_ROW);
  }
  /* Tables stored in bfloat16 and eXmY (t_adam's slots too), served and
   * checked in float32 and over an eXmY wire: the engines on both sides
   * keep the same encoded rows and round updates with the same draws. */
  scps_workload *ws = NULL;
  char *stored = with_storage(config_json);
  CHECK(stored != NULL);
  if (stored) CHECK_OK(scps__workload_parse(stored, strlen(stored), &ws, &err), &err);
  if (ws) {
    run_topology(ws, stored, 3, 2, false, "float32", true, SCPS_ANSWER_POOLED, SCPS_GRADIENTS_BY_SAMPLE);
    run_topology(ws, stored, 3, 2, false, "e4m3/e3m0s", true, SCPS_ANSWER_POOLED, SCPS_GRADIENTS_BY_ROW);
    run_topology(ws, stored, 1, 4, false, "e5m2s", false, SCPS_ANSWER_DISTINCT_ROWS, SCPS_GRADIENTS_BY_SAMPLE);
  }
  scps__workload_destroy(ws);
  free(stored);
  run_twins(&(twin_case){"3x2 rows pooled in place", in_place_json, "pooled answers", 3, 5, false,
                         {SCPS_ANSWER_POOLED, SCPS_ANSWER_DISTINCT_ROWS}, {0, 0}, 0});
  run_twins(&(twin_case){"1x2 pushes by row in items", split_json, "pushes by sample", 1, 8, true,
                         {0, 0}, {SCPS_GRADIENTS_BY_SAMPLE, SCPS_GRADIENTS_BY_ROW}, 2 * 8192});
  scps__workload_destroy(w);
  return scps_test_finish("test_cluster");
}
