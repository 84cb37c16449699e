/* Engine placement, initialization, partition checks, sparse-update isolation
 * and single-writer-per-SparseCore threading. Numerics against the reference
 * are in test_numerics.c. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scps_bf16.h"
#include "scps_engine.h"
#include "scps_test.h"

#define NT 5
static scps_table_spec tables[NT];
static scps_feature_spec features[2];

static void make_specs(void) {
  const char *names[NT] = {"zeros", "const", "unif", "norm", "trunc"};
  scps_initializer_type types[NT] = {SCPS_INIT_ZEROS, SCPS_INIT_CONSTANT, SCPS_INIT_UNIFORM,
                                     SCPS_INIT_NORMAL, SCPS_INIT_TRUNCATED_NORMAL};
  for (int i = 0; i < NT; i++) {
    scps__table_spec_init(&tables[i]);
    snprintf(tables[i].name, sizeof tables[i].name, "%s", names[i]);
    tables[i].vocabulary_size = 97 + 31 * i;
    tables[i].embedding_dim = 3 + 5 * i;
    tables[i].initializer.type = types[i];
    tables[i].initializer.value = 0.25;
    tables[i].initializer.scale = 0.5;
    tables[i].initializer.stddev = 0.1;
    scps__optimizer_spec_init(&tables[i].optimizer, i % 2 ? SCPS_OPT_ADAGRAD : SCPS_OPT_ADAM);
  }
  for (int f = 0; f < 2; f++) {
    scps__feature_spec_init(&features[f]);
    snprintf(features[f].name, sizeof features[f].name, "f%d", f);
    snprintf(features[f].table, sizeof features[f].table, "%s", names[2 + f]);
    features[f].batch_size = 16;
  }
}

typedef struct cluster {
  scps_layout *layout;
  int n;
  scps_engine *engines[8];
} cluster;

static int cluster_create(cluster *c, int p, int s, int64_t mem, scps_error *err) {
  memset(c, 0, sizeof *c);
  scps_topology t = {p, s, mem};
  int rc = scps__layout_create(tables, NT, features, 2, &t, NULL, &c->layout, err);
  for (int i = 0; !rc && i < p; i++) {
    rc = scps__engine_create(c->layout, i, &c->engines[i], err);
    c->n = i + 1;
  }
  return rc;
}

static void cluster_destroy(cluster *c) {
  for (int i = 0; i < c->n; i++) scps__engine_destroy(c->engines[i]);
  scps__layout_destroy(c->layout);
}

static int read_row(cluster *c, int t, int64_t id, float *row, float *slots) {
  int32_t p = scps__layout_process_of_sc(c->layout, scps__layout_sc_of(c->layout, t, id));
  return scps__engine_read_row(c->engines[p], t, id, row, slots, NULL);
}

static void test_init_same_on_every_topology(void) {
  int topo[][2] = {{1, 1}, {1, 4}, {3, 2}};
  cluster c[3];
  scps_error err;
  for (int k = 0; k < 3; k++) CHECK_OK(cluster_create(&c[k], topo[k][0], topo[k][1], 1 << 22, &err), &err);
  float a[64], b[64], sa[128], sb[128];
  int differ = 0, out_of_range = 0;
  double sum = 0, sumsq = 0;
  long count = 0;
  for (int t = 0; t < NT; t++) {
    const scps_table_spec *ts = &tables[t];
    for (int64_t id = 0; id < ts->vocabulary_size; id++) {
      CHECK(read_row(&c[0], t, id, a, sa) == 0);
      for (int k = 1; k < 3; k++) {
        CHECK(read_row(&c[k], t, id, b, sb) == 0);
        if (memcmp(a, b, sizeof(float) * (size_t)ts->embedding_dim) ||
            memcmp(sa, sb, sizeof(float) * (size_t)(scps__optimizer_num_slots(ts->optimizer.type) * ts->embedding_dim)))
          differ++;
      }
      for (int d = 0; d < ts->embedding_dim; d++) {
        float v = a[d];
        switch (ts->initializer.type) {
        case SCPS_INIT_ZEROS: out_of_range += v != 0.0f; break;
        case SCPS_INIT_CONSTANT: out_of_range += v != 0.25f; break;
        case SCPS_INIT_UNIFORM: out_of_range += !(v >= -0.5f && v <= 0.5f); break;
        case SCPS_INIT_TRUNCATED_NORMAL: out_of_range += !(fabsf(v) <= 0.2f); break;
        case SCPS_INIT_NORMAL:
          sum += v;
          sumsq += (double)v * v;
          count++;
          break;
        }
        /* Slots start at the optimizer's initial value (Adam 0, Adagrad 0.1). */
        float s0 = ts->optimizer.type == SCPS_OPT_ADAGRAD ? 0.1f : 0.0f;
        out_of_range += sa[d] != s0;
      }
    }
  }
  CHECKF(differ == 0, "%d rows differ between topologies", differ);
  CHECKF(out_of_range == 0, "%d values outside their initializer's range", out_of_range);
  double mean = sum / count, sd = sqrt(sumsq / count - mean * mean);
  CHECKF(fabs(mean) < 0.02 && fabs(sd - 0.1) < 0.02, "normal init mean %g stddev %g over %ld", mean, sd,
         count);
  for (int k = 0; k < 3; k++) cluster_destroy(&c[k]);
}

static void test_capacity(void) {
  cluster c;
  scps_error err;
  /* Ask exactly for what fits, then one byte less. */
  CHECK_OK(cluster_create(&c, 1, 2, 1 << 22, &err), &err);
  int64_t need = 0;
  for (int s = 0; s < c.layout->n_stacks; s++) need += scps__layout_stack_bytes_per_sc(c.layout, s);
  for (int sc = 0; sc < 2; sc++) {
    const scps_hbm *h = scps__engine_hbm(c.engines[0], sc);
    CHECK(h->used == need && h->capacity == 1 << 22);
  }
  cluster_destroy(&c);
  CHECK_OK(cluster_create(&c, 1, 2, need, &err), &err);
  cluster_destroy(&c);
  CHECK(cluster_create(&c, 1, 2, need - 1, &err) == SCPS_ENOSPC);
  CHECKF(strstr(err.msg, "stack '") && strstr(err.msg, "SparseCore 0") && strstr(err.msg, "bytes free"),
         "%s", err.msg);
  cluster_destroy(&c);
  /* The second process names its own first SparseCore. */
  CHECK(cluster_create(&c, 2, 2, 4096, &err) == SCPS_ENOSPC);
  CHECKF(strstr(err.msg, "SparseCore 0"), "%s", err.msg);
  cluster_destroy(&c);
}

static void test_check_coo(void) {
  cluster c;
  scps_error err;
  CHECK_OK(cluster_create(&c, 1, 1, 1 << 22, &err), &err);
  int s = c.layout->tables[2].stack;
  uint32_t rows[3] = {1, 1, 4}, samples[3] = {0, 3, 2};
  float gains[3] = {1, 0.5f, 2};
  scps_coo coo = {3, rows, samples, gains};
  CHECK_OK(scps__engine_check_coo(c.engines[0], s, 0, &coo, &err), &err);
  samples[1] = 0;
  CHECK(scps__engine_check_coo(c.engines[0], s, 0, &coo, &err) == SCPS_EINVAL && strstr(err.msg, "sorted"));
  samples[1] = 3;
  rows[2] = (uint32_t)c.layout->stacks[s].rows_per_sc;
  CHECK(scps__engine_check_coo(c.engines[0], s, 0, &coo, &err) == SCPS_ERANGE && strstr(err.msg, "row"));
  rows[2] = 4;
  samples[2] = (uint32_t)c.layout->stacks[s].total_sample_count;
  CHECK(scps__engine_check_coo(c.engines[0], s, 0, &coo, &err) == SCPS_ERANGE && strstr(err.msg, "sample"));
  samples[2] = 2;
  gains[0] = NAN;
  CHECK(scps__engine_check_coo(c.engines[0], s, 0, &coo, &err) == SCPS_EINVAL && strstr(err.msg, "gain"));
  CHECK(scps__engine_check_coo(c.engines[0], s, 1, &coo, &err) == SCPS_ERANGE);
  CHECK(scps__engine_check_coo(c.engines[0], 99, 0, &coo, &err) == SCPS_ENOENT);
  cluster_destroy(&c);
}

/* Padding rows (a table's rows on a SparseCore past its last id there) are
 * refused by both checks, naming the table, the id they would hold and the
 * vocabulary; the last row that holds an id passes. On 1 x 2 'unif' (159
 * ids, 160 padded) holds ids 0, 2, ..., 158 on SparseCore 0 (rows 0-79)
 * and 1, 3, ..., 157 on SparseCore 1 (rows 0-78): row 79 of SparseCore 1
 * would be id 159. */
static void test_padding_rows(void) {
  cluster c;
  scps_error err;
  CHECK_OK(cluster_create(&c, 1, 2, 1 << 22, &err), &err);
  const int t = 2, s = c.layout->tables[t].stack;
  CHECK(c.layout->table_specs[t].vocabulary_size == 159 && c.layout->tables[t].row_offset_in_shard == 0);
  CHECK(scps__layout_rows_held(c.layout, t, 0) == 80 && scps__layout_rows_held(c.layout, t, 1) == 79);
  uint32_t rows[2] = {3, 79}, samples[2] = {0, 1};
  scps_coo coo = {2, rows, samples, NULL};
  CHECK_OK(scps__engine_check_coo(c.engines[0], s, 0, &coo, &err), &err);
  CHECK_OK(scps__engine_check_rows(c.engines[0], s, 0, rows, 2, &err), &err);
  CHECK(scps__engine_check_coo(c.engines[0], s, 1, &coo, &err) == SCPS_ERANGE);
  CHECKF(strstr(err.msg, "SparseCore 1 entry 1:") && strstr(err.msg, "local row 79 is padding") &&
             strstr(err.msg, "id 159 of table 'unif'") && strstr(err.msg, "vocabulary_size is 159"),
         "%s", err.msg);
  CHECK(scps__engine_check_rows(c.engines[0], s, 1, rows, 2, &err) == SCPS_ERANGE);
  CHECKF(strstr(err.msg, "row entry 1:") && strstr(err.msg, "local row 79 is padding"), "%s", err.msg);
  rows[1] = 78;
  CHECK_OK(scps__engine_check_coo(c.engines[0], s, 1, &coo, &err), &err);
  CHECK_OK(scps__engine_check_rows(c.engines[0], s, 1, rows, 2, &err), &err);
  cluster_destroy(&c);
}

/* What the engine knows of a shard's values (scps__engine_value_bounds) is
 * exact after initialization and kept by updates; after a write through
 * scps__engine_shard and scps__engine_values_written a scan finds a value
 * that is not finite. scps__engine_update_finite finds an update that would
 * leave one (in the row, or in a slot), without writing, and a row that
 * already holds one. */
static void test_value_bounds(void) {
  cluster c;
  scps_error err;
  CHECK_OK(cluster_create(&c, 1, 2, 1 << 22, &err), &err);
  scps_engine *e = c.engines[0];
  const int s = c.layout->tables[1].stack; /* 'const': adagrad, every value 0.25 */
  const size_t dim = (size_t)c.layout->stacks[s].dim;
  scps_value_bounds b[3];
  scps__engine_value_bounds(e, s, 0, b);
  CHECKF(b[0].mag == 0.25 && b[1].mag == (double)0.1f && b[1].lo == (double)0.1f, "after init: %g, %g (>= %g)",
         b[0].mag, b[1].mag, b[1].lo);
  uint32_t rows[2] = {2, 5};
  float g[2 * 64];
  for (size_t i = 0; i < 2 * dim; i++) g[i] = 0.5f + (float)i;
  scps_step step = {1, -1};
  scps_coo by_row = {2, rows, NULL, NULL};
  scps_update_fault f;
  CHECK(scps__engine_update_finite(e, s, 0, &by_row, g, false, true, &step, &f));
  scps__engine_update_rows(e, s, 0, rows, 2, g, &step);
  scps__engine_value_bounds(e, s, 0, b);
  const float *acc = scps__engine_slot(e, s, 0, 0);
  float most = 0;
  for (size_t i = 0; i < (size_t)c.layout->stacks[s].rows_per_sc * dim; i++) most = acc[i] > most ? acc[i] : most;
  CHECKF(b[1].mag == (double)most && b[1].lo == (double)0.1f, "kept by the update: %g against %g", b[1].mag,
         (double)most);
  /* A learning rate of 3.4e38: the first push stays finite, a second would
   * reach -Inf in row 2, column 0. */
  step.learning_rate = 3.4e38;
  for (size_t i = 0; i < 2 * dim; i++) g[i] = 1.0f;
  CHECK(scps__engine_update_finite(e, s, 0, &by_row, g, false, true, &step, &f));
  scps__engine_update_rows(e, s, 0, rows, 2, g, &step);
  const float *w = scps__engine_shard(e, s, 0);
  const float before = w[2 * dim];
  CHECK(!scps__engine_update_finite(e, s, 0, &by_row, g, false, true, &step, &f));
  CHECKF(f.row == 2 && f.array == 0 && f.column == 0 && !f.already && f.before == before && f.after == -INFINITY,
         "fault row %u array %d column %d %g -> %g", f.row, f.array, f.column, (double)f.before, (double)f.after);
  CHECK(w[2 * dim] == before); /* nothing written */
  /* A value written that is not finite: found by the next scan, and a push
   * touching its row is refused as already not finite. */
  scps__engine_shard(e, s, 0)[5 * dim + 3] = NAN;
  scps__engine_values_written(e);
  scps__engine_value_bounds(e, s, 0, b);
  CHECK(!(b[0].mag <= 1e30));
  step.learning_rate = -1;
  CHECK(!scps__engine_update_finite(e, s, 0, &by_row, g, false, true, &step, &f));
  CHECKF(f.row == 5 && f.array == 0 && f.column == 3 && f.already && isnan(f.before), "fault row %u column %d",
         f.row, f.column);
  /* A slot: Adam's velocity of a gradient of 1e20 by sample overflows. */
  const int sa = c.layout->tables[2].stack; /* 'unif': adam, read by f0 */
  const size_t da = (size_t)c.layout->stacks[sa].dim, ns = (size_t)c.layout->stacks[sa].total_sample_count;
  float *ga = calloc(ns * da, sizeof *ga);
  uint32_t r1[1] = {4}, s1[1] = {3};
  scps_coo one = {1, r1, s1, NULL};
  ga[3 * da + 1] = 1e20f;
  CHECK(!scps__engine_update_finite(e, sa, 0, &one, ga, false, false, &step, &f));
  CHECKF(f.row == 4 && f.array == 2 && f.column == 1 && !f.already && f.after == INFINITY, "adam fault %u %d %d %g",
         f.row, f.array, f.column, (double)f.after);
  ga[3 * da + 1] = 1.0f;
  CHECK(scps__engine_update_finite(e, sa, 0, &one, ga, false, false, &step, &f));
  free(ga);
  cluster_destroy(&c);
}

/* A long partition, so that each defect also lands inside the vectorised
 * first pass rather than only in its scalar tail: every kind, at the first,
 * second, a middle and the last entry, is found and named by its index. */
static void test_check_coo_long(void) {
  cluster c;
  scps_error err;
  CHECK_OK(cluster_create(&c, 1, 1, 1 << 22, &err), &err);
  int s = c.layout->tables[2].stack;
  const scps_stack_layout *st = &c.layout->stacks[s];
  size_t per_row = st->total_sample_count < 4 ? (size_t)st->total_sample_count : 4;
  size_t n = 1000;
  /* Rows that hold an id: the table's last rows on the SparseCore are padding. */
  const size_t held = (size_t)scps__layout_rows_held(c.layout, 2, 0);
  if (held * per_row < n) n = held * per_row;
  CHECKF(n >= 100, "test layout too small: %zu entries", n);
  uint32_t *rows = malloc(n * sizeof *rows), *samples = malloc(n * sizeof *samples);
  float *gains = malloc(n * sizeof *gains);
  for (size_t i = 0; i < n; i++) {
    rows[i] = (uint32_t)(i / per_row);
    samples[i] = (uint32_t)(i % per_row);
    gains[i] = 1.0f + (float)(i % 3);
  }
  scps_coo coo = {n, rows, samples, gains};
  CHECK_OK(scps__engine_check_coo(c.engines[0], s, 0, &coo, &err), &err);
  const size_t at[] = {0, 1, n / 2 + 3, n - 1};
  for (size_t k = 0; k < sizeof at / sizeof at[0]; k++) {
    size_t i = at[k];
    char entry[48];
    snprintf(entry, sizeof entry, "entry %zu:", i);
    uint32_t r = rows[i], sm = samples[i];
    float g = gains[i];
    rows[i] = (uint32_t)st->rows_per_sc;
    CHECKF(scps__engine_check_coo(c.engines[0], s, 0, &coo, &err) == SCPS_ERANGE && strstr(err.msg, entry) &&
               strstr(err.msg, "row"), "row at %zu: %s", i, err.msg);
    rows[i] = r;
    samples[i] = (uint32_t)st->total_sample_count;
    CHECKF(scps__engine_check_coo(c.engines[0], s, 0, &coo, &err) == SCPS_ERANGE && strstr(err.msg, entry) &&
               strstr(err.msg, "sample"), "sample at %zu: %s", i, err.msg);
    samples[i] = sm;
    const float bad_gains[] = {NAN, INFINITY, -INFINITY};
    for (int b = 0; b < 3; b++) {
      gains[i] = bad_gains[b];
      CHECKF(scps__engine_check_coo(c.engines[0], s, 0, &coo, &err) == SCPS_EINVAL && strstr(err.msg, entry) &&
                 strstr(err.msg, "gain"), "gain %g at %zu: %s", (double)bad_gains[b], i, err.msg);
    }
    gains[i] = g;
    if (i > 0) {
      /* A repeat of the previous (row, sample), then a step back in rows. */
      rows[i] = rows[i - 1];
      samples[i] = samples[i - 1];
      CHECKF(scps__engine_check_coo(c.engines[0], s, 0, &coo, &err) == SCPS_EINVAL && strstr(err.msg, entry) &&
                 strstr(err.msg, "sorted"), "repeat at %zu: %s", i, err.msg);
      if (rows[i - 1] > 0) {
        rows[i] = rows[i - 1] - 1;
        samples[i] = (uint32_t)per_row - 1;
        CHECKF(scps__engine_check_coo(c.engines[0], s, 0, &coo, &err) == SCPS_EINVAL &&
                   strstr(err.msg, entry) && strstr(err.msg, "sorted"),
               "row step back at %zu: %s", i, err.msg);
      }
      rows[i] = r;
      samples[i] = sm;
    }
    CHECK_OK(scps__engine_check_coo(c.engines[0], s, 0, &coo, &err), &err);
  }
  free(rows);
  free(samples);
  free(gains);
  cluster_destroy(&c);
}

/* Rows and slots not named by a partition stay bit-identical. */
static void test_untouched_rows(void) {
  cluster c;
  scps_error err;
  CHECK_OK(cluster_create(&c, 1, 2, 1 << 22, &err), &err);
  for (int s = 0; s < c.layout->n_stacks; s++) {
    const scps_stack_layout *st = &c.layout->stacks[s];
    size_t n = (size_t)st->rows_per_sc * (size_t)st->dim;
    int nslots = scps__optimizer_num_slots(st->optimizer.type);
    float *before = malloc(sizeof(float) * n * 3), *grads = malloc(sizeof(float) * (size_t)(st->total_sample_count + 1) * (size_t)st->dim);
    for (int64_t i = 0; i < (st->total_sample_count + 1) * st->dim; i++) grads[i] = 0.01f * (float)(i % 7 + 1);
    memcpy(before, scps__engine_shard(c.engines[0], s, 1), sizeof(float) * n);
    for (int k = 0; k < nslots; k++) memcpy(before + n * (size_t)(k + 1), scps__engine_slot(c.engines[0], s, 1, k), sizeof(float) * n);
    uint32_t rows[2] = {2, 5}, samples[2] = {0, 0};
    float gains[2] = {1, 1};
    scps_coo coo = {st->total_sample_count ? 2 : 0, rows, samples, gains};
    scps_step step = {3, -1};
    scps__engine_update(c.engines[0], s, 1, &coo, grads, &step);
    const float *after = scps__engine_shard(c.engines[0], s, 1);
    int bad = 0, moved = 0;
    for (int64_t r = 0; r < st->rows_per_sc; r++) {
      size_t off = (size_t)r * (size_t)st->dim, len = sizeof(float) * (size_t)st->dim;
      bool touched = coo.n && (r == 2 || r == 5);
      int same = !memcmp(before + off, after + off, len);
      for (int k = 0; k < nslots; k++)
        same &= !memcmp(before + n * (size_t)(k + 1) + off, scps__engine_slot(c.engines[0], s, 1, k) + off, len);
      if (!touched && !same) bad++;
      if (touched && !same) moved++;
    }
    CHECKF(bad == 0, "stack %s: %d untouched rows changed", st->name, bad);
    CHECKF(!coo.n || moved == 2, "stack %s: %d touched rows changed", st->name, moved);
    free(before);
    free(grads);
  }
  cluster_destroy(&c);
}

/* A lookup restricted to a slice of the samples writes only that slice,
 * and slices gathered one by one (as a server's SparseCore workers do, each
 * taking one) equal the whole lookup bit for bit; so does scps__engine_gather
 * over the same slices into memory full of garbage, with samples no entry
 * reaches, gains of -0.0, and (with `batch` over 65536) slices of tens of
 * thousands of samples; so does scps__engine_gather_bf16 against gather and
 * encode. */
static void test_lookup_slices(int batch) {
  cluster c;
  scps_error err;
  for (int f = 0; f < 2; f++) features[f].batch_size = batch;
  CHECK_OK(cluster_create(&c, 1, 2, 1 << 24, &err), &err);
  for (int f = 0; f < 2; f++) features[f].batch_size = 16;
  int s = c.layout->tables[2].stack;
  const scps_stack_layout *st = &c.layout->stacks[s];
  const uint32_t total = (uint32_t)st->total_sample_count, dim = (uint32_t)st->dim;
  enum { E = 3000 };
  static uint32_t rows[2][E], samples[2][E];
  static float gains[2][E];
  const int e = batch > 16 ? E : 300;
  scps_coo coo[2];
  uint64_t x = 12345;
  for (int k = 0; k < 2; k++) {
    for (int i = 0; i < e; i++) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      rows[k][i] = (uint32_t)(i * (uint32_t)scps__layout_rows_held(c.layout, 2, k) / e);
      samples[k][i] = (uint32_t)((x >> 33) % total);
      gains[k][i] = i % 7 == 3 ? -0.0f : (float)((x >> 20) % 1000) * 1e-3f - 0.5f;
    }
    /* Equal rows need increasing samples: sort each run of one row. */
    for (int i = 1; i < e; i++)
      for (int j = i; j > 0 && rows[k][j] == rows[k][j - 1] && samples[k][j] < samples[k][j - 1]; j--) {
        uint32_t t = samples[k][j];
        samples[k][j] = samples[k][j - 1];
        samples[k][j - 1] = t;
      }
    /* Drop repeated (row, sample) pairs, and every entry of the sample
     * total / 2, which then has none. */
    int w = 0;
    for (int i = 0; i < e; i++)
      if (samples[k][i] != total / 2 &&
          (w == 0 || rows[k][i] != rows[k][w - 1] || samples[k][i] != samples[k][w - 1])) {
        rows[k][w] = rows[k][i];
        samples[k][w] = samples[k][i];
        gains[k][w++] = gains[k][i];
      }
    coo[k] = (scps_coo){(size_t)w, rows[k], samples[k], gains[k]};
    CHECK_OK(scps__engine_check_coo(c.engines[0], s, k, &coo[k], &err), &err);
  }
  size_t n = (size_t)total * dim;
  float *whole = calloc(n, sizeof(float)), *sliced = malloc(n * sizeof(float));
  float *gathered = malloc(n * sizeof(float));
  for (int k = 0; k < 2; k++) scps__engine_lookup(c.engines[0], s, k, &coo[k], 0, total, whole);
  for (size_t i = 0; i < n; i++) sliced[i] = -7.0f;
  for (size_t i = 0; i < n; i++) gathered[i] = i % 2 ? NAN : -7.0f;
  const uint32_t cut[4] = {0, total / 3, total / 3 + 1, total};
  int outside = 0, gathered_outside = 0;
  for (int part = 0; part < 3; part++) {
    memset(sliced + (size_t)cut[part] * dim, 0, sizeof(float) * (cut[part + 1] - cut[part]) * dim);
    for (int k = 0; k < 2; k++) scps__engine_lookup(c.engines[0], s, k, &coo[k], cut[part], cut[part + 1], sliced);
    void *scratch = malloc(scps__engine_gather_scratch(coo[0].n + coo[1].n, cut[part], cut[part + 1]));
    scps__engine_gather(c.engines[0], s, coo, 2, cut[part], cut[part + 1], gathered, scratch);
    free(scratch);
    for (size_t i = (size_t)cut[part + 1] * dim; i < n; i++) {
      outside += sliced[i] != -7.0f;
      gathered_outside += i % 2 ? !isnan(gathered[i]) : gathered[i] != -7.0f;
    }
  }
  CHECKF(outside == 0, "%d values beyond a slice were written", outside);
  CHECKF(gathered_outside == 0, "gather: %d values beyond a slice were written", gathered_outside);
  CHECK(memcmp(whole, sliced, n * sizeof(float)) == 0);
  CHECKF(memcmp(whole, gathered, n * sizeof(float)) == 0, "batch %d: gather differs from zero + lookup", batch);
  int nonzero = 0, negzero = 0;
  for (size_t i = 0; i < n; i++) {
    nonzero += whole[i] != 0.0f;
    negzero += whole[i] == 0.0f && signbit(whole[i]);
  }
  CHECK(nonzero > 0);
  CHECKF(negzero == 0, "%d activations are -0.0", negzero);
  int empty = 0;
  for (uint32_t smp = 0; smp < total; smp++) {
    int hit = 0;
    for (int k = 0; k < 2 && !hit; k++)
      for (size_t i = 0; i < coo[k].n && !hit; i++) hit = samples[k][i] == smp;
    empty += !hit;
  }
  CHECKF(empty > 0 && empty < (int)total, "batch %d: %d of %u samples without entries", batch, empty, total);

  /* In bfloat16, slice by slice, into memory full of garbage: the whole
   * lookup encoded, byte for byte, and nothing written beyond the slice. */
  uint8_t *want = malloc(n * 2), *enc = malloc(n * 2);
  scps__bf16_encode(whole, want, n);
  memset(enc, 0xab, n * 2);
  int enc_outside = 0;
  for (int part = 0; part < 3; part++) {
    size_t bytes = scps__engine_gather_scratch(coo[0].n + coo[1].n, cut[part], cut[part + 1]);
    float *scratch = malloc(bytes);
    memset(scratch, 0xcd, bytes);
    scps__engine_gather_bf16(c.engines[0], s, coo, 2, cut[part], cut[part + 1], enc, scratch);
    free(scratch);
    for (size_t i = (size_t)cut[part + 1] * dim * 2; i < n * 2; i++) enc_outside += enc[i] != 0xab;
  }
  CHECKF(enc_outside == 0, "gather_bf16: %d bytes beyond a slice were written", enc_outside);
  CHECKF(memcmp(want, enc, n * 2) == 0, "batch %d: gather_bf16 differs from gather + encode", batch);
  free(want);
  free(enc);

  /* The distinct rows in bfloat16: those of scps__engine_copy_rows, encoded. */
  for (int k = 0; k < 2; k++) {
    size_t rows_n = scps__coo_distinct_rows(&coo[k]) * dim;
    float *f32 = malloc(rows_n * sizeof(float));
    uint8_t *a = malloc(rows_n * 2), *b = malloc(rows_n * 2 + 1);
    scps__engine_copy_rows(c.engines[0], s, k, &coo[k], f32);
    scps__bf16_encode(f32, a, rows_n);
    b[rows_n * 2] = 0x5a;
    scps__engine_copy_rows_bf16(c.engines[0], s, k, &coo[k], b);
    CHECKF(memcmp(a, b, rows_n * 2) == 0 && b[rows_n * 2] == 0x5a, "copy_rows_bf16 of partition %d", k);
    free(f32);
    free(a);
    free(b);
  }
  free(whole);
  free(sliced);
  free(gathered);
  cluster_destroy(&c);
}

/* One worker per SparseCore, as the server runs them: no shared writes, so
 * results equal a sequential run bit for bit (and TSan sees no race). */
typedef struct worker {
  scps_engine *e;
  int stack;
  int32_t sc;
  scps_coo coo;
  const float *grads;
  float *out;
} worker;

static void *work(void *arg) {
  worker *w = arg;
  for (int it = 0; it < 20; it++) {
    scps_step step = {it, -1};
    scps__engine_update(w->e, w->stack, w->sc, &w->coo, w->grads, &step);
    scps__engine_lookup(w->e, w->stack, w->sc, &w->coo, 0, UINT32_MAX, w->out);
  }
  return NULL;
}

static void test_threads(void) {
  cluster a, b;
  scps_error err;
  CHECK_OK(cluster_create(&a, 1, 2, 1 << 22, &err), &err);
  CHECK_OK(cluster_create(&b, 1, 2, 1 << 22, &err), &err);
  int s = a.layout->tables[2].stack;
  const scps_stack_layout *st = &a.layout->stacks[s];
  size_t act = (size_t)st->total_sample_count * (size_t)st->dim;
  float *grads = malloc(sizeof(float) * act), *out[4];
  for (size_t i = 0; i < act; i++) grads[i] = sinf((float)i);
  for (int k = 0; k < 4; k++) out[k] = calloc(act, sizeof(float));
  uint32_t rows[6] = {0, 0, 3, 7, 7, 9}, samples[6] = {1, 4, 2, 0, 5, 3};
  float gains[6] = {1, 0.5f, 2, 1, 1, 0.25f};
  scps_coo coo = {6, rows, samples, gains};
  worker w[4] = {{a.engines[0], s, 0, coo, grads, out[0]}, {a.engines[0], s, 1, coo, grads, out[1]},
                 {b.engines[0], s, 0, coo, grads, out[2]}, {b.engines[0], s, 1, coo, grads, out[3]}};
  pthread_t th[2];
  for (int k = 0; k < 2; k++) pthread_create(&th[k], NULL, work, &w[k]);
  for (int k = 0; k < 2; k++) pthread_join(th[k], NULL);
  work(&w[2]);
  work(&w[3]);
  CHECK(!memcmp(out[0], out[2], sizeof(float) * act) && !memcmp(out[1], out[3], sizeof(float) * act));
  size_t n = (size_t)st->rows_per_sc * (size_t)st->dim * sizeof(float);
  for (int sc = 0; sc < 2; sc++)
    CHECK(!memcmp(scps__engine_shard(a.engines[0], s, sc), scps__engine_shard(b.engines[0], s, sc), n));
  for (int k = 0; k < 4; k++) free(out[k]);
  free(grads);
  cluster_destroy(&a);
  cluster_destroy(&b);
}

/* gains NULL (a request without gains) means every gain is 1.0: check,
 * lookup, gather (float32 and bfloat16) and update give what an array of
 * ones gives, bit for bit, on two engines started alike. */
static void test_null_gains(void) {
  cluster a, b;
  scps_error err;
  CHECK_OK(cluster_create(&a, 1, 2, 1 << 22, &err), &err);
  CHECK_OK(cluster_create(&b, 1, 2, 1 << 22, &err), &err);
  int s = a.layout->tables[3].stack;
  const scps_stack_layout *st = &a.layout->stacks[s];
  const uint32_t total = (uint32_t)st->total_sample_count, dim = (uint32_t)st->dim;
  const size_t act = (size_t)total * dim;
  uint32_t rows[2][7] = {{0, 0, 3, 7, 7, 9, 11}, {1, 2, 2, 5, 8, 8, 8}};
  uint32_t samples[2][7] = {{1, 4, 2, 0, 5, 3, 1}, {0, 1, 3, 1, 2, 4, 5}};
  float ones[7] = {1, 1, 1, 1, 1, 1, 1};
  scps_coo with[2], without[2];
  for (int k = 0; k < 2; k++) {
    with[k] = (scps_coo){7, rows[k], samples[k], ones};
    without[k] = (scps_coo){7, rows[k], samples[k], NULL};
    CHECK_OK(scps__engine_check_coo(b.engines[0], s, k, &without[k], &err), &err);
  }
  without[0].samples = (const uint32_t[7]){1, 4, 2, 0, 5, 3, total};
  CHECKF(scps__engine_check_coo(b.engines[0], s, 0, &without[0], &err) == SCPS_ERANGE && strstr(err.msg, "sample"),
         "NULL gains, sample out of range: %s", err.msg);
  without[0].samples = samples[0];
  float *grads = malloc(sizeof(float) * act), *out[4];
  uint8_t *enc[2] = {malloc(act * 2), malloc(act * 2)};
  for (size_t i = 0; i < act; i++) grads[i] = sinf((float)i);
  for (int k = 0; k < 4; k++) out[k] = calloc(act, sizeof(float));
  void *scratch = malloc(scps__engine_gather_scratch(14, 0, total));
  for (int step = 0; step < 3; step++) {
    scps_step sp = {step, -1};
    for (int k = 0; k < 2; k++) {
      scps__engine_update(a.engines[0], s, k, &with[k], grads, &sp);
      scps__engine_update(b.engines[0], s, k, &without[k], grads, &sp);
      scps__engine_lookup(a.engines[0], s, k, &with[k], 0, total, out[0]);
      scps__engine_lookup(b.engines[0], s, k, &without[k], 0, total, out[1]);
    }
    scps__engine_gather(a.engines[0], s, with, 2, 0, total, out[2], scratch);
    scps__engine_gather(b.engines[0], s, without, 2, 0, total, out[3], scratch);
    scps__engine_gather_bf16(a.engines[0], s, with, 2, 0, total, enc[0], scratch);
    scps__engine_gather_bf16(b.engines[0], s, without, 2, 0, total, enc[1], scratch);
    CHECKF(!memcmp(out[0], out[1], sizeof(float) * act), "step %d: lookup with NULL gains differs", step);
    CHECKF(!memcmp(out[2], out[3], sizeof(float) * act), "step %d: gather with NULL gains differs", step);
    CHECKF(!memcmp(enc[0], enc[1], act * 2), "step %d: bfloat16 gather with NULL gains differs", step);
  }
  size_t n = (size_t)st->rows_per_sc * (size_t)st->dim * sizeof(float);
  for (int sc = 0; sc < 2; sc++)
    CHECKF(!memcmp(scps__engine_shard(a.engines[0], s, sc), scps__engine_shard(b.engines[0], s, sc), n),
           "SparseCore %d: updates with NULL gains differ", sc);
  for (int k = 0; k < 4; k++) free(out[k]);
  free(enc[0]);
  free(enc[1]);
  free(scratch);
  free(grads);
  cluster_destroy(&a);
  cluster_destroy(&b);
}

int main(void) {
  make_specs();
  test_init_same_on_every_topology();
  test_capacity();
  test_check_coo();
  test_check_coo_long();
  test_padding_rows();
  test_value_bounds();
  test_untouched_rows();
  test_lookup_slices(16);
  test_lookup_slices(70000);
  test_threads();
  test_null_gains();
  return scps_test_finish("test_engine");
}
