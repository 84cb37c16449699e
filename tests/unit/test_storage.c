/* Storage formats of table rows (TableSpec.storage_format): names, spec
 * validation and fingerprints, stacking, the engine's rows in eXmY and
 * bfloat16 against the double-precision reference codec, updates as decode,
 * float32 optimizer and stochastic re-encode, and the SparseCore memory
 * check counting the smaller rows; checkpoints in and between the formats. */
#define _XOPEN_SOURCE 700
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ftw.h>
#include <sys/stat.h>

#include "scps_bf16.h"
#include "scps_checkpoint.h"
#include "scps_checkpoint_export.h"
#include "scps_engine.h"
#include "scps_fingerprint.h"
#include "scps_jsonw.h"
#include "scps_ref_exmy.h"
#include "scps_storage.h"
#include "scps_test.h"
#include "scps_workload.h"

static void test_names(void) {
  static const struct {
    const char *in, *canonical;
    scps_storage_kind kind;
    size_t row_bytes_16; /* a row of 16 values */
  } ok[] = {
      {"", "float32", SCPS_STORAGE_F32, 64},       {"float32", "float32", SCPS_STORAGE_F32, 64},
      {"bfloat16", "bfloat16", SCPS_STORAGE_BF16, 32}, {"e4m3", "e4m3", SCPS_STORAGE_EXMY, 17},
      {"e4m3b7", "e4m3", SCPS_STORAGE_EXMY, 17},   {"e5m2", "e5m2", SCPS_STORAGE_EXMY, 17},
      {"e2m1", "e2m1", SCPS_STORAGE_EXMY, 9},      {"e3m0b-2", "e3m0b-2", SCPS_STORAGE_EXMY, 9},
      {"e8m7", "e8m7", SCPS_STORAGE_EXMY, 33},
  };
  scps_error err;
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    scps_storage_format f, g;
    char name[SCPS_STORAGE_NAME_MAX];
    CHECK_OK(scps__storage_parse(ok[i].in, &f, &err), &err);
    scps__storage_name(&f, name, sizeof name);
    CHECKF(f.kind == ok[i].kind && !strcmp(name, ok[i].canonical), "'%s': kind %d name %s", ok[i].in, (int)f.kind,
           name);
    CHECKF(scps__storage_row_bytes(&f, 16) == ok[i].row_bytes_16, "'%s': %zu bytes a row of 16", ok[i].in,
           scps__storage_row_bytes(&f, 16));
    CHECK_OK(scps__storage_parse(name, &g, &err), &err);
    CHECK(scps__storage_equal(&f, &g));
  }
  const char *bad[] = {"fp8", "e9m2", "e4m3x", "float", "E4M3"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    scps_storage_format f;
    CHECK(scps__storage_parse(bad[i], &f, &err) == SCPS_EINVAL);
    CHECKF(strstr(err.msg, bad[i]) != NULL, "the message names '%s': %s", bad[i], err.msg);
  }
}

/* Tables q (e4m3) and f (float32) of the same shape, initial values and
 * optimizer, so automatic stacking would otherwise put them together. */
#define VOCAB 203
#define DIM 16
#define BATCH 8
static scps_table_spec tables[2];
static scps_feature_spec features[2];

static void make_specs(scps_optimizer_type opt, const char *format, scps_rounding rounding) {
  const char *names[2] = {"q", "f"};
  for (int i = 0; i < 2; i++) {
    scps__table_spec_init(&tables[i]);
    snprintf(tables[i].name, sizeof tables[i].name, "%s", names[i]);
    tables[i].vocabulary_size = VOCAB;
    tables[i].embedding_dim = DIM;
    tables[i].initializer.type = SCPS_INIT_UNIFORM;
    tables[i].initializer.scale = 0.5;
    tables[i].initializer.seed = 42;
    scps__optimizer_spec_init(&tables[i].optimizer, opt);
    tables[i].optimizer.learning_rate = 0.05;
    scps__feature_spec_init(&features[i]);
    snprintf(features[i].name, sizeof features[i].name, "x%s", names[i]);
    snprintf(features[i].table, sizeof features[i].table, "%s", names[i]);
    features[i].batch_size = BATCH;
    features[i].output_dim = DIM;
  }
  snprintf(tables[0].storage_format, sizeof tables[0].storage_format, "%s", format);
  tables[0].storage_rounding = rounding;
}

static void test_spec_checks(void) {
  scps_error err;
  make_specs(SCPS_OPT_SGD, "e4m3", SCPS_ROUNDING_STOCHASTIC);
  CHECK_OK(scps__specs_validate(tables, 2, features, 2, &err), &err);
  snprintf(tables[0].storage_format, sizeof tables[0].storage_format, "e9m9");
  CHECK(scps__specs_validate(tables, 2, features, 2, &err) == SCPS_EINVAL);
  CHECKF(strstr(err.msg, "'q'") && strstr(err.msg, "storage_format") && strstr(err.msg, "'e9m9'"),
         "names table, field and value: %s", err.msg);
  make_specs(SCPS_OPT_SGD, "e4m3", (scps_rounding)7);
  CHECK(scps__specs_validate(tables, 2, features, 2, &err) == SCPS_EINVAL);
  CHECKF(strstr(err.msg, "'q'") && strstr(err.msg, "storage_rounding") && strstr(err.msg, "7"),
         "names table, field and value: %s", err.msg);

  /* Fingerprints: float32 written out or left empty is one declaration,
   * as is a default bias written out; another format or rounding is not. */
  scps_topology topo = {1, 2, 1 << 22};
  uint8_t base[SCPS_FINGERPRINT_BYTES], fp[SCPS_FINGERPRINT_BYTES];
  char msg[256];
  make_specs(SCPS_OPT_SGD, "", SCPS_ROUNDING_STOCHASTIC);
  CHECK_OK(scps__fingerprint(&topo, tables, 2, features, 2, base, &err), &err);
  scps_table_spec plain[2] = {tables[0], tables[1]};
  make_specs(SCPS_OPT_SGD, "float32", SCPS_ROUNDING_NEAREST);
  CHECK_OK(scps__fingerprint(&topo, tables, 2, features, 2, fp, &err), &err);
  CHECK(!memcmp(base, fp, sizeof fp));
  CHECK(!scps__specs_diff(&topo, plain, 2, features, 2, &topo, tables, 2, features, 2, "a", "b", msg, sizeof msg));
  make_specs(SCPS_OPT_SGD, "e4m3", SCPS_ROUNDING_STOCHASTIC);
  CHECK_OK(scps__fingerprint(&topo, tables, 2, features, 2, base, &err), &err);
  CHECK(memcmp(base, fp, sizeof fp) != 0);
  CHECK(scps__specs_diff(&topo, plain, 2, features, 2, &topo, tables, 2, features, 2, "a", "b", msg, sizeof msg));
  CHECKF(strstr(msg, "storage_format") && strstr(msg, "e4m3") && strstr(msg, "float32"), "%s", msg);
  make_specs(SCPS_OPT_SGD, "e4m3b7", SCPS_ROUNDING_STOCHASTIC);
  CHECK_OK(scps__fingerprint(&topo, tables, 2, features, 2, fp, &err), &err);
  CHECK(!memcmp(base, fp, sizeof fp));
  make_specs(SCPS_OPT_SGD, "e4m3", SCPS_ROUNDING_NEAREST);
  CHECK_OK(scps__fingerprint(&topo, tables, 2, features, 2, fp, &err), &err);
  CHECK(memcmp(base, fp, sizeof fp) != 0);
}

static void test_workload_keys(void) {
  const char *text =
      "{\"batch_size\": 8, \"tables\": [{\"name\": \"t\", \"vocabulary_size\": 100, \"embedding_dim\": 8,"
      " \"combiner\": \"sum\", \"optimizer\": {\"type\": \"sgd\", \"learning_rate\": 0.1},"
      " \"initializer\": {\"type\": \"zeros\"}, \"storage_format\": \"e5m2\", \"storage_rounding\": \"nearest\"}],"
      " \"features\": [{\"name\": \"x\", \"table\": \"t\", \"valency\": 1}]}";
  scps_workload *w = NULL, *back = NULL;
  scps_error err;
  CHECK_OK(scps__workload_parse(text, strlen(text), &w, &err), &err);
  if (!w) return;
  CHECK(!strcmp(w->tables[0].storage_format, "e5m2") && w->tables[0].storage_rounding == SCPS_ROUNDING_NEAREST);
  scps_jsonw jw;
  scps__jsonw_init(&jw);
  CHECK_OK(scps__workload_write_specs(w->tables, w->n_tables, w->features, w->n_features, &jw, &err), &err);
  CHECK(!jw.failed);
  if (!jw.failed) CHECK_OK(scps__workload_parse(jw.buf, jw.len, &back, &err), &err);
  if (back) {
    char msg[256];
    const scps_topology topo = {1, 1, 1 << 20};
    CHECKF(!scps__specs_diff(&topo, w->tables, 1, w->features, 1, &topo, back->tables, 1, back->features, 1, "a",
                            "b", msg, sizeof msg),
           "%s", msg);
    CHECK(!strcmp(back->tables[0].storage_format, "e5m2") &&
          back->tables[0].storage_rounding == SCPS_ROUNDING_NEAREST);
  }
  scps__jsonw_free(&jw);
  scps__workload_destroy(back);
  scps__workload_destroy(w);
  const struct {
    const char *from, *to, *says;
  } bad[] = {{"\"e5m2\"", "\"e5m9x\"", "tables[0].storage_format"},
             {"\"nearest\"", "\"up\"", "tables[0].storage_rounding"}};
  for (int i = 0; i < 2; i++) {
    char b[1024];
    const char *at = strstr(text, bad[i].from);
    snprintf(b, sizeof b, "%.*s%s%s", (int)(at - text), text, bad[i].to, at + strlen(bad[i].from));
    CHECK(scps__workload_parse(b, strlen(b), &w, &err) == SCPS_EINVAL);
    CHECKF(strstr(err.msg, bad[i].says) && strstr(err.msg, bad[i].to), "%s", err.msg);
  }
}

static void test_stacking(void) {
  scps_error err;
  scps_topology topo = {1, 2, 1 << 22};
  scps_layout *l = NULL;
  make_specs(SCPS_OPT_SGD, "", SCPS_ROUNDING_STOCHASTIC);
  CHECK_OK(scps__layout_create(tables, 2, features, 2, &topo, NULL, &l, &err), &err);
  CHECK(l && l->n_stacks == 1);
  scps__layout_destroy(l);
  make_specs(SCPS_OPT_SGD, "bfloat16", SCPS_ROUNDING_STOCHASTIC);
  CHECK_OK(scps__layout_create(tables, 2, features, 2, &topo, NULL, &l, &err), &err);
  CHECK(l && l->n_stacks == 2);
  if (l) {
    const scps_stack_layout *q = &l->stacks[l->tables[0].stack], *f = &l->stacks[l->tables[1].stack];
    CHECK(q->storage.kind == SCPS_STORAGE_BF16 && f->storage.kind == SCPS_STORAGE_F32);
    CHECK(scps__layout_row_bytes(l, l->tables[0].stack) == 2 * DIM);
    CHECK(scps__layout_row_bytes(l, l->tables[1].stack) == 4 * DIM);
  }
  scps__layout_destroy(l);
  make_specs(SCPS_OPT_SGD, "bfloat16", SCPS_ROUNDING_STOCHASTIC);
  snprintf(tables[0].stack, sizeof tables[0].stack, "both");
  snprintf(tables[1].stack, sizeof tables[1].stack, "both");
  CHECK(scps__layout_create(tables, 2, features, 2, &topo, NULL, &l, &err) == SCPS_EINVAL);
  CHECKF(strstr(err.msg, "'both'") && strstr(err.msg, "bfloat16") && strstr(err.msg, "float32"), "%s", err.msg);
}

typedef struct engine1 {
  scps_layout *l;
  scps_engine *e;
  int qs, fs; /* the stacks of q and f */
} engine1;

static void engine1_destroy(engine1 *x);

/* The engine of process 0 of topology topo for the specs. */
static int engine1_create_on(engine1 *x, const scps_topology *topo, scps_error *err) {
  memset(x, 0, sizeof *x);
  int rc = scps__layout_create(tables, 2, features, 2, topo, NULL, &x->l, err);
  if (!rc) rc = scps__engine_create(x->l, 0, &x->e, err);
  if (!rc) {
    x->qs = x->l->tables[0].stack;
    x->fs = x->l->tables[1].stack;
  }
  return rc;
}

static int engine1_create(engine1 *x, int64_t mem, scps_error *err) {
  const scps_topology topo = {1, 2, mem};
  return engine1_create_on(x, &topo, err);
}

/* make_specs, then the engine of one process of two SparseCores; false
 * (a check failed) when it could not be made. */
static bool engine1_open(engine1 *x, scps_optimizer_type opt, const char *format, scps_rounding rounding) {
  scps_error err;
  make_specs(opt, format, rounding);
  CHECK_OK(engine1_create(x, 1 << 22, &err), &err);
  if (x->e) return true;
  engine1_destroy(x);
  return false;
}

static void engine1_destroy(engine1 *x) {
  scps__engine_destroy(x->e);
  scps__layout_destroy(x->l);
}

/* The reference: the row's scale as the exponent-statistics rule picks it
 * (the smallest s with max |v| <= largest 2^s), then each value rounded to
 * the nearest code of the format at that scale, in double. */
static void reference_row(int x, int y, int bias, const float *v, size_t n, float *out) {
  double amax = 0;
  for (size_t i = 0; i < n; i++) amax = fabs(v[i]) > amax ? fabs(v[i]) : amax;
  scps_ref_exmy r0;
  CHECK(scps_ref_exmy_init(&r0, x, y, bias, 0) == 0);
  const double largest = scps_ref_exmy_value(&r0, r0.n - 1);
  scps_ref_exmy_free(&r0);
  int s = 0;
  if (amax > 0) {
    s = -128;
    while (amax > ldexp(largest, s)) s++;
  }
  scps_ref_exmy r;
  CHECK(scps_ref_exmy_init(&r, x, y, bias, s) == 0);
  for (size_t i = 0; i < n; i++) out[i] = (float)scps_ref_exmy_value(&r, scps_ref_exmy_round(&r, v[i]));
  scps_ref_exmy_free(&r);
}

/* Every row of q, stored in e4m3, decodes to the reference rounding of f's
 * float32 row (the same initial values). */
static void test_e4m3_rows_match_reference(void) {
  scps_error err;
  engine1 x;
  if (!engine1_open(&x, SCPS_OPT_ADAGRAD, "e4m3", SCPS_ROUNDING_STOCHASTIC)) return;
  int wrong = 0, changed = 0;
  for (int64_t id = 0; id < VOCAB; id++) {
    float q[DIM], f[DIM], want[DIM];
    CHECK_OK(scps__engine_read_row(x.e, 0, id, q, NULL, &err), &err);
    CHECK_OK(scps__engine_read_row(x.e, 1, id, f, NULL, &err), &err);
    reference_row(4, 3, 7, f, DIM, want);
    wrong += memcmp(q, want, sizeof q) != 0;
    changed += memcmp(q, f, sizeof q) != 0;
  }
  CHECKF(wrong == 0, "%d rows differ from the reference", wrong);
  CHECKF(changed > VOCAB / 2, "only %d rows lost precision: is the table stored in e4m3?", changed);
  const scps_hbm *h = scps__engine_hbm(x.e, 0);
  const int64_t rows = x.l->stacks[x.qs].rows_per_sc;
  CHECK(scps__layout_row_bytes(x.l, x.qs) == DIM + 1);
  CHECKF(h->used == scps__layout_stack_bytes_per_sc(x.l, x.qs) + scps__layout_stack_bytes_per_sc(x.l, x.fs),
         "used %lld", (long long)h->used);
  CHECK(scps__layout_stack_bytes_per_sc(x.l, x.qs) < scps__layout_stack_bytes_per_sc(x.l, x.fs));
  (void)rows;
  engine1_destroy(&x);
}

/* A partition over both SparseCores' rows of a stack and its expected
 * pooled sums: every entry's row as read back decoded, added in the
 * partitions' order into zeroed samples. */
#define ENTRIES 12
typedef struct parts {
  uint32_t rows[2][ENTRIES], samples[2][ENTRIES];
  float gains[2][ENTRIES];
  scps_coo coo[2];
} parts;

static void make_parts(const scps_engine *e, int stack, parts *p) {
  const scps_stack_layout *st = &scps__engine_layout(e)->stacks[stack];
  for (int k = 0; k < 2; k++) {
    for (int i = 0; i < ENTRIES; i++) {
      p->rows[k][i] = (uint32_t)((i / 2) * 7 + k) % (uint32_t)(VOCAB / 2 - 1);
      p->samples[k][i] = (uint32_t)(i % 2 ? (i * 3 + k) % BATCH : (i + k) % BATCH);
      p->gains[k][i] = 0.5f + 0.25f * (float)i;
    }
    /* sorted by (row, sample), no repeats */
    for (int i = 1; i < ENTRIES; i++)
      for (int j = i; j > 0; j--) {
        uint64_t a = (uint64_t)p->rows[k][j - 1] << 32 | p->samples[k][j - 1];
        uint64_t b = (uint64_t)p->rows[k][j] << 32 | p->samples[k][j];
        if (a <= b) break;
        uint32_t t = p->rows[k][j];
        p->rows[k][j] = p->rows[k][j - 1];
        p->rows[k][j - 1] = t;
        t = p->samples[k][j];
        p->samples[k][j] = p->samples[k][j - 1];
        p->samples[k][j - 1] = t;
      }
    size_t m = 0;
    for (int i = 0; i < ENTRIES; i++)
      if (m == 0 || p->rows[k][i] != p->rows[k][m - 1] || p->samples[k][i] != p->samples[k][m - 1]) {
        p->rows[k][m] = p->rows[k][i];
        p->samples[k][m] = p->samples[k][i];
        m++;
      }
    p->coo[k] = (scps_coo){m, p->rows[k], p->samples[k], p->gains[k]};
  }
  (void)st;
}

/* Row r of the stack's shard on local SparseCore k, decoded. */
static void shard_row(scps_engine *e, int stack, int k, uint32_t r, float *out) {
  const scps_storage_codec *c = scps__engine_codec(e, stack, 0);
  scps__storage_decode_row(c, scps__engine_codes(e, stack, k, 0) + (size_t)r * c->row_bytes, out);
}

/* Every gather path of an encoded stack against sums of the decoded rows. */
static void check_lookups(scps_engine *e, int stack, const char *what) {
  const scps_stack_layout *st = &scps__engine_layout(e)->stacks[stack];
  const size_t dim = (size_t)st->dim, total = (size_t)st->total_sample_count;
  parts p;
  make_parts(e, stack, &p);
  scps_error err;
  for (int k = 0; k < 2; k++) CHECK_OK(scps__engine_check_coo(e, stack, k, &p.coo[k], &err), &err);
  float *want = calloc(total * dim, sizeof(float)), *got = calloc(total * dim, sizeof(float));
  uint8_t *bf = calloc(total * dim, 2), *bf_want = calloc(total * dim, 2);
  float *rows = calloc(ENTRIES * dim, sizeof(float)), *rows_want = calloc(ENTRIES * dim, sizeof(float));
  void *scratch = malloc(scps__engine_gather_scratch(2 * ENTRIES, 0, (uint32_t)total));
  for (int k = 0; k < 2; k++)
    for (size_t i = 0; i < p.coo[k].n; i++) {
      float r[SCPS_DIM_MAX];
      shard_row(e, stack, k, p.coo[k].rows[i], r);
      for (size_t c = 0; c < dim; c++) want[p.coo[k].samples[i] * dim + c] += p.coo[k].gains[i] * r[c];
    }
  for (int k = 0; k < 2; k++) scps__engine_lookup(e, stack, k, &p.coo[k], 0, (uint32_t)total, got);
  CHECKF(!memcmp(got, want, total * dim * sizeof(float)), "%s: lookup", what);
  memset(got, 0xff, total * dim * sizeof(float));
  scps__engine_gather(e, stack, p.coo, 2, 0, (uint32_t)total, got, scratch);
  CHECKF(!memcmp(got, want, total * dim * sizeof(float)), "%s: gather", what);
  scps__engine_gather_bf16(e, stack, p.coo, 2, 0, (uint32_t)total, bf, scratch);
  scps__bf16_encode(want, bf_want, total * dim);
  CHECKF(!memcmp(bf, bf_want, total * dim * 2), "%s: gather_bf16", what);
  size_t n = 0;
  for (size_t i = 0; i < p.coo[1].n; i++)
    if (i == 0 || p.coo[1].rows[i] != p.coo[1].rows[i - 1]) shard_row(e, stack, 1, p.coo[1].rows[i], rows_want + dim * n++);
  scps__engine_copy_rows(e, stack, 1, &p.coo[1], rows);
  CHECKF(!memcmp(rows, rows_want, n * dim * sizeof(float)), "%s: copy_rows", what);
  scps__engine_copy_rows_bf16(e, stack, 1, &p.coo[1], bf);
  scps__bf16_encode(rows_want, bf_want, n * dim);
  CHECKF(!memcmp(bf, bf_want, n * dim * 2), "%s: copy_rows_bf16", what);
  float nonzero = 0;
  for (size_t i = 0; i < total * dim; i++) nonzero += fabsf(want[i]);
  CHECKF(nonzero > 0, "%s: the lookups summed nothing", what);
  free(want);
  free(got);
  free(bf);
  free(bf_want);
  free(rows);
  free(rows_want);
  free(scratch);
}

static void test_lookups(void) {
  const char *formats[] = {"e4m3", "bfloat16", "e2m1", "e3m0b-2", "e5m10"};
  for (int i = 0; i < 5; i++) {
    engine1 x;
    if (!engine1_open(&x, SCPS_OPT_SGD, formats[i], SCPS_ROUNDING_STOCHASTIC)) continue;
    check_lookups(x.e, x.qs, formats[i]);
    engine1_destroy(&x);
  }
}

/* One update of q by sample: each touched row's arrays (the row and each
 * slot) equal the arrays before, decoded, updated by the optimizer in
 * float32 and encoded with the draws scps__engine_rounding names for each;
 * untouched rows keep their codes. slot_formats: q's, one per slot. */
static void check_update(const char *format, scps_optimizer_type opt, const char *const *slot_formats) {
  scps_error err;
  engine1 x;
  make_specs(opt, format, SCPS_ROUNDING_STOCHASTIC);
  for (int k = 0; k < scps__optimizer_num_slots(opt); k++)
    snprintf(tables[0].slot_formats[k], sizeof tables[0].slot_formats[k], "%s", slot_formats[k]);
  CHECK_OK(engine1_create(&x, 1 << 22, &err), &err);
  if (!x.e) {
    engine1_destroy(&x);
    return;
  }
  const int s = x.qs, arrays = 1 + scps__optimizer_num_slots(opt);
  const scps_stack_layout *st = &x.l->stacks[s];
  const size_t dim = (size_t)st->dim, nrows = (size_t)st->rows_per_sc, total = (size_t)st->total_sample_count;
  parts p;
  make_parts(x.e, s, &p);
  float *grads = malloc(total * dim * sizeof(float));
  for (size_t i = 0; i < total * dim; i++) grads[i] = (float)((int)(i * 37 % 23) - 11) * 0.03125f;
  const scps_storage_codec *codec[1 + SCPS_MAX_SLOTS];
  uint8_t *before[1 + SCPS_MAX_SLOTS];
  for (int a = 0; a < arrays; a++) {
    codec[a] = scps__engine_codec(x.e, s, a);
    before[a] = malloc(nrows * codec[a]->row_bytes);
    memcpy(before[a], scps__engine_codes(x.e, s, 1, a), nrows * codec[a]->row_bytes);
  }
  const scps_step step = {.step = 17, .learning_rate = -1};
  CHECK_OK(scps__engine_check_coo(x.e, s, 1, &p.coo[1], &err), &err);
  scps__engine_update(x.e, s, 1, &p.coo[1], grads, &step);
  scps_opt_step ost;
  scps__optimizer_prepare(&st->optimizer, &step, &ost);
  int wrong = 0, touched = 0, moved = 0, untouched_changed = 0;
  for (size_t r = 0; r < nrows; r++) {
    size_t i = 0;
    while (i < p.coo[1].n && p.coo[1].rows[i] != r) i++;
    if (i == p.coo[1].n) {
      for (int a = 0; a < arrays; a++)
        untouched_changed += memcmp(before[a] + r * codec[a]->row_bytes,
                                    scps__engine_codes(x.e, s, 1, a) + r * codec[a]->row_bytes, codec[a]->row_bytes) != 0;
      continue;
    }
    touched++;
    float g[SCPS_DIM_MAX] = {0}, v[1 + SCPS_MAX_SLOTS][SCPS_DIM_MAX];
    for (; i < p.coo[1].n && p.coo[1].rows[i] == r; i++)
      for (size_t c = 0; c < dim; c++) g[c] += p.coo[1].gains[i] * grads[p.coo[1].samples[i] * dim + c];
    for (int a = 0; a < arrays; a++) scps__storage_decode_row(codec[a], before[a] + r * codec[a]->row_bytes, v[a]);
    scps__optimizer_apply(&ost, (int32_t)dim, v[0], arrays > 1 ? v[1] : NULL, arrays > 2 ? v[2] : NULL, g);
    for (int a = 0; a < arrays; a++) {
      scps_exmy_rounding rnd;
      scps__engine_rounding(x.e, s, 1, (uint32_t)r, a, &step, &rnd);
      CHECK(rnd.stochastic);
      uint8_t want[SCPS_DIM_MAX * 4 + 1];
      const uint8_t *got = scps__engine_codes(x.e, s, 1, a) + r * codec[a]->row_bytes;
      CHECK_OK(scps__storage_encode_row(codec[a], v[a], want, &rnd, &err), &err);
      wrong += memcmp(want, got, codec[a]->row_bytes) != 0;
      moved += memcmp(before[a] + r * codec[a]->row_bytes, got, codec[a]->row_bytes) != 0;
    }
  }
  CHECKF(wrong == 0 && touched > 4 && moved >= touched && untouched_changed == 0,
         "%s/%s: %d of %d touched rows' arrays differ from decode, optimizer, encode; %d moved; %d untouched "
         "changed",
         format, scps__optimizer_name(opt), wrong, touched, moved, untouched_changed);
  free(grads);
  for (int a = 0; a < arrays; a++) free(before[a]);
  engine1_destroy(&x);
}

static void test_updates(void) {
  const char *f32[2] = {"", ""}, *e4m3_bf16[2] = {"e4m3", "bfloat16"}, *e5m2_e4m3[2] = {"e5m2", "e4m3"};
  check_update("e4m3", SCPS_OPT_ADAGRAD, f32);
  check_update("bfloat16", SCPS_OPT_SGD, f32);
  check_update("e2m1", SCPS_OPT_ADAM, f32);
  check_update("e5m10", SCPS_OPT_SGD, f32);
  check_update("e4m3", SCPS_OPT_ADAGRAD, e5m2_e4m3);
  check_update("", SCPS_OPT_ADAM, e4m3_bf16);
  check_update("e4m3", SCPS_OPT_FTRL, e5m2_e4m3);
  check_update("bfloat16", SCPS_OPT_LAPROP, e4m3_bf16);
}

/* Updates far below a step of the format: rounding to nearest never moves
 * the row, stochastic rounding moves it by the updates' sum on average. */
static void test_stochastic_vs_nearest(void) {
  const scps_rounding how[2] = {SCPS_ROUNDING_NEAREST, SCPS_ROUNDING_STOCHASTIC};
  double moved[2] = {0, 0};
  const int steps = 200;
  for (int h = 0; h < 2; h++) {
    scps_error err;
    engine1 x;
    make_specs(SCPS_OPT_SGD, "e4m3", how[h]);
    tables[0].initializer.type = SCPS_INIT_CONSTANT;
    tables[0].initializer.value = 1.0;
    tables[0].optimizer.learning_rate = 1e-3;
    CHECK_OK(engine1_create(&x, 1 << 22, &err), &err);
    if (!x.e) continue;
    const int s = x.qs;
    const size_t dim = (size_t)x.l->stacks[s].dim, total = (size_t)x.l->stacks[s].total_sample_count;
    float *grads = calloc(total * dim, sizeof(float));
    for (size_t c = 0; c < (size_t)DIM; c++) grads[c] = -1.0f; /* sample 0: w += lr */
    const uint32_t row = 3, sample = 0;
    const scps_coo coo = {1, &row, &sample, NULL};
    for (int t = 0; t < steps; t++) scps__engine_update(x.e, s, 0, &coo, grads, &(scps_step){.step = t, .learning_rate = -1});
    float w[SCPS_DIM_MAX];
    shard_row(x.e, s, 0, row, w);
    for (int c = 0; c < DIM; c++) moved[h] += w[c] - 1.0;
    free(grads);
    engine1_destroy(&x);
  }
  CHECKF(moved[0] == 0, "nearest: the row moved by %g", moved[0]);
  const double expect = DIM * steps * 1e-3;
  CHECKF(fabs(moved[1] - expect) < 0.35 * expect, "stochastic: the row moved by %g in all, expected about %g",
         moved[1], expect);
}

/* Slot formats: validated against the optimizer's slots, in the workload
 * file by slot name, in the fingerprint, and read back decoded. */
static void test_slot_formats(void) {
  scps_error err;
  scps_topology topo = {1, 2, 1 << 22};
  make_specs(SCPS_OPT_SGD, "", SCPS_ROUNDING_STOCHASTIC);
  snprintf(tables[0].slot_formats[0], sizeof tables[0].slot_formats[0], "e4m3");
  CHECK(scps__specs_validate(tables, 2, features, 2, &err) == SCPS_EINVAL);
  CHECKF(strstr(err.msg, "'q'") && strstr(err.msg, "slot_formats[0]") && strstr(err.msg, "e4m3") &&
             strstr(err.msg, "sgd"),
         "%s", err.msg);
  make_specs(SCPS_OPT_ADAM, "", SCPS_ROUNDING_STOCHASTIC);
  snprintf(tables[0].slot_formats[1], sizeof tables[0].slot_formats[1], "e4m3x");
  CHECK(scps__specs_validate(tables, 2, features, 2, &err) == SCPS_EINVAL);
  CHECKF(strstr(err.msg, "'q'") && strstr(err.msg, "slot_formats[1]") && strstr(err.msg, "'e4m3x'"), "%s",
         err.msg);

  uint8_t a[SCPS_FINGERPRINT_BYTES], b[SCPS_FINGERPRINT_BYTES];
  char msg[256];
  make_specs(SCPS_OPT_ADAM, "", SCPS_ROUNDING_STOCHASTIC);
  CHECK_OK(scps__fingerprint(&topo, tables, 2, features, 2, a, &err), &err);
  scps_table_spec plain[2] = {tables[0], tables[1]};
  snprintf(tables[0].slot_formats[1], sizeof tables[0].slot_formats[1], "bfloat16");
  CHECK_OK(scps__fingerprint(&topo, tables, 2, features, 2, b, &err), &err);
  CHECK(memcmp(a, b, sizeof a) != 0);
  CHECK(scps__specs_diff(&topo, plain, 2, features, 2, &topo, tables, 2, features, 2, "a", "b", msg, sizeof msg));
  CHECKF(strstr(msg, "slot_formats[1]") && strstr(msg, "bfloat16"), "%s", msg);
  snprintf(tables[0].slot_formats[1], sizeof tables[0].slot_formats[1], "float32");
  CHECK_OK(scps__fingerprint(&topo, tables, 2, features, 2, b, &err), &err);
  CHECK(!memcmp(a, b, sizeof a));

  const char *text =
      "{\"batch_size\": 8, \"tables\": [{\"name\": \"t\", \"vocabulary_size\": 100, \"embedding_dim\": 8,"
      " \"combiner\": \"sum\", \"optimizer\": {\"type\": \"adam\"}, \"initializer\": {\"type\": \"zeros\"},"
      " \"slot_formats\": {\"velocity\": \"e5m2\"}}],"
      " \"features\": [{\"name\": \"x\", \"table\": \"t\", \"valency\": 1}]}";
  scps_workload *w = NULL, *back = NULL;
  CHECK_OK(scps__workload_parse(text, strlen(text), &w, &err), &err);
  if (w) {
    CHECK(!w->tables[0].slot_formats[0][0] && !strcmp(w->tables[0].slot_formats[1], "e5m2"));
    scps_jsonw jw;
    scps__jsonw_init(&jw);
    CHECK_OK(scps__workload_write_specs(w->tables, 1, w->features, 1, &jw, &err), &err);
    if (!jw.failed) CHECK_OK(scps__workload_parse(jw.buf, jw.len, &back, &err), &err);
    CHECK(back && !strcmp(back->tables[0].slot_formats[1], "e5m2"));
    scps__jsonw_free(&jw);
  }
  scps__workload_destroy(back);
  scps__workload_destroy(w);
  char bad[1024];
  const char *at = strstr(text, "velocity");
  snprintf(bad, sizeof bad, "%.*saccumulator%s", (int)(at - text), text, at + strlen("velocity"));
  CHECK(scps__workload_parse(bad, strlen(bad), &w, &err) == SCPS_EINVAL);
  CHECKF(strstr(err.msg, "slot_formats") && strstr(err.msg, "accumulator") && strstr(err.msg, "velocity"), "%s",
         err.msg);

  /* read_row gives the slots decoded. */
  engine1 x;
  make_specs(SCPS_OPT_ADAGRAD, "e4m3", SCPS_ROUNDING_STOCHASTIC);
  snprintf(tables[0].slot_formats[0], sizeof tables[0].slot_formats[0], "e3m4");
  CHECK_OK(engine1_create(&x, 1 << 22, &err), &err);
  if (x.e) {
    const scps_storage_codec *c = scps__engine_codec(x.e, x.qs, 1);
    float row[DIM], slot[DIM], want[SCPS_DIM_MAX];
    const int64_t id = 5; /* SparseCore 1, row 2 */
    CHECK_OK(scps__engine_read_row(x.e, 0, id, row, slot, &err), &err);
    scps__storage_decode_row(c, scps__engine_codes(x.e, x.qs, 1, 1) + 2 * c->row_bytes, want);
    CHECK(!memcmp(slot, want, sizeof slot));
    CHECKF(slot[0] > 0.09f && slot[0] < 0.11f, "the accumulator starts near 0.1 in e3m4: %g", slot[0]);
  }
  engine1_destroy(&x);
}

/* A table refused for lack of SparseCore memory in float32 fits in an
 * 8-bit format, and the memory used counts its smaller rows and slots. */
static void test_capacity(void) {
  static const struct {
    scps_optimizer_type opt;
    const char *rows, *slot0, *slot1;
    int64_t row_bytes; /* rows and slots, a row of 64 values */
    int64_t mem;
    bool fits;
  } cases[] = {
      {SCPS_OPT_SGD, "", "", "", 256, 100 << 10, false},
      {SCPS_OPT_SGD, "bfloat16", "", "", 128, 100 << 10, false},
      {SCPS_OPT_SGD, "e4m3", "", "", 65, 100 << 10, true},
      {SCPS_OPT_SGD, "e2m1", "", "", 33, 100 << 10, true},
      {SCPS_OPT_ADAM, "", "", "", 768, 300 << 10, false},
      {SCPS_OPT_ADAM, "e4m3", "", "", 65 + 512, 300 << 10, false},
      {SCPS_OPT_ADAM, "e4m3", "bfloat16", "e4m3", 65 + 128 + 65, 300 << 10, true},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    scps_table_spec t;
    scps_feature_spec f;
    scps__table_spec_init(&t);
    snprintf(t.name, sizeof t.name, "big");
    t.vocabulary_size = 1000;
    t.embedding_dim = 64;
    scps__optimizer_spec_init(&t.optimizer, cases[i].opt);
    snprintf(t.storage_format, sizeof t.storage_format, "%s", cases[i].rows);
    snprintf(t.slot_formats[0], sizeof t.slot_formats[0], "%s", cases[i].slot0);
    snprintf(t.slot_formats[1], sizeof t.slot_formats[1], "%s", cases[i].slot1);
    scps__feature_spec_init(&f);
    snprintf(f.name, sizeof f.name, "x");
    snprintf(f.table, sizeof f.table, "big");
    f.batch_size = 4;
    scps_topology topo = {1, 1, cases[i].mem};
    scps_layout *l = NULL;
    scps_engine *e = NULL;
    scps_error err;
    CHECK_OK(scps__layout_create(&t, 1, &f, 1, &topo, NULL, &l, &err), &err);
    if (!l) continue;
    int64_t per_row = scps__layout_row_bytes(l, 0);
    for (int k = 0; k < scps__optimizer_num_slots(cases[i].opt); k++) per_row += scps__layout_slot_row_bytes(l, 0, k);
    CHECKF(per_row == cases[i].row_bytes, "case %zu: %lld bytes a row", i, (long long)per_row);
    const int rc = scps__engine_create(l, 0, &e, &err);
    if (!cases[i].fits) {
      CHECKF(rc == SCPS_ENOSPC && strstr(err.msg, "'big'"), "case %zu: %d %s", i, rc, rc ? err.msg : "");
    } else {
      CHECKF(rc == 0, "case %zu does not fit: %s", i, rc ? err.msg : "");
      if (e)
        CHECK(scps__engine_hbm(e, 0)->used == scps__layout_stack_bytes_per_sc(l, 0) &&
              scps__engine_hbm(e, 0)->used < 1000 * per_row + 3 * SCPS_HBM_ALIGN);
    }
    printf("%s rows '%s' slots '%s' '%s': %lld bytes a row of 64, %lld bytes on the SparseCore, %s in %lld\n",
           scps__optimizer_name(cases[i].opt), cases[i].rows, cases[i].slot0, cases[i].slot1, (long long)per_row,
           (long long)scps__layout_stack_bytes_per_sc(l, 0), rc ? "refused" : "fits", (long long)cases[i].mem);
    scps__engine_destroy(e);
    scps__layout_destroy(l);
  }
}

/* ---- checkpoints in the storage formats ---- */

static char tmp_root[256];

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

/* q (Adagrad) with its rows in `rows` and its accumulator in `slot`; f as
 * made (float32). */
static bool engine_as(engine1 *x, const char *rows, const char *slot, int32_t scs) {
  scps_error err;
  make_specs(SCPS_OPT_ADAGRAD, rows, SCPS_ROUNDING_STOCHASTIC);
  snprintf(tables[0].slot_formats[0], sizeof tables[0].slot_formats[0], "%s", slot);
  const scps_topology topo = {1, scs, 1 << 22};
  CHECK_OK(engine1_create_on(x, &topo, &err), &err);
  if (x->e) return true;
  engine1_destroy(x);
  return false;
}

/* Every id's row and accumulator of both tables, as read_row gives them. */
static float *read_all(const engine1 *x) {
  float *v = malloc(sizeof(float) * 2 * VOCAB * 2 * DIM);
  scps_error err;
  for (int t = 0; t < 2; t++)
    for (int64_t id = 0; id < VOCAB; id++) {
      float *at = v + ((size_t)t * VOCAB + (size_t)id) * 2 * DIM;
      CHECK_OK(scps__engine_read_row(x->e, t, id, at, at + DIM, &err), &err);
    }
  return v;
}

/* Whether two engines of the same layout hold the same codes in every array. */
static bool same_codes(engine1 *a, engine1 *b) {
  bool same = true;
  for (int s = 0; s < a->l->n_stacks; s++)
    for (int a_ = 0; a_ <= scps__optimizer_num_slots(a->l->stacks[s].optimizer.type); a_++)
      for (int32_t k = 0; k < 2; k++)
        same &= !memcmp(scps__engine_codes(a->e, s, k, a_), scps__engine_codes(b->e, s, k, a_),
                        (size_t)a->l->stacks[s].rows_per_sc * scps__engine_codec(a->e, s, a_)->row_bytes);
  return same;
}

static int load_into(const char *dir, engine1 *x) {
  scps_checkpoint *c = NULL;
  scps_error err;
  int rc = scps__checkpoint_open(dir, &c, &err);
  if (!rc) rc = scps__checkpoint_load(c, x->e, NULL, &err);
  CHECKF(rc == 0, "load of %s: %s", dir, rc ? err.msg : "");
  scps__checkpoint_close(c);
  return rc;
}

/* dir restored into an engine with q's arrays in rows and slot on scs
 * SparseCores holds `want` (read_all's); it is then saved under save_root
 * when that is not NULL. */
static void check_restore(const char *dir, const char *rows, const char *slot, int32_t scs, const float *want,
                          const char *save_root) {
  engine1 x;
  if (!engine_as(&x, rows, slot, scs)) return;
  if (!load_into(dir, &x)) {
    float *got = read_all(&x);
    CHECKF(!memcmp(got, want, sizeof(float) * 2 * VOCAB * 2 * DIM), "%s into '%s'/'%s' on %d SparseCores", dir, rows,
           slot, (int)scs);
    free(got);
    scps_error err;
    if (save_root) CHECK_OK(scps__checkpoint_save(x.e, save_root, 5, NULL, NULL, &err), &err);
  }
  engine1_destroy(&x);
}

static void test_checkpoints(void) {
  snprintf(tmp_root, sizeof tmp_root, "%s/scps_storage_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (!mkdtemp(tmp_root)) {
    CHECK(!"mkdtemp");
    return;
  }
  char root[300], dir1[400], dir2[400], dir3[400];
  snprintf(root, sizeof root, "%s/r1", tmp_root);
  scps_error err;
  engine1 a, b, e5;
  if (!engine_as(&a, "e4m3", "bfloat16", 2)) return;
  /* Rows and slots away from their initial values. */
  for (int t = 0; t < 3; t++)
    for (int32_t k = 0; k < 2; k++) {
      parts p;
      make_parts(a.e, a.qs, &p);
      const size_t n = (size_t)a.l->stacks[a.qs].total_sample_count * DIM;
      float *g = malloc(n * sizeof(float));
      for (size_t i = 0; i < n; i++) g[i] = (float)((int)((i * 7 + (size_t)t) % 13) - 6) * 0.1f;
      scps__engine_update(a.e, a.qs, k, &p.coo[k], g, &(scps_step){.step = t, .learning_rate = -1});
      free(g);
    }
  float *want = read_all(&a);
  CHECK_OK(scps__checkpoint_save(a.e, root, 5, NULL, NULL, &err), &err);
  scps__ckpt_manifest_step_dir(root, 5, dir1, sizeof dir1);
  char name[SCPS_CKPT_NAME_CAP], path[600];
  struct stat sb;
  scps__ckpt_manifest_data_name(a.qs, 1, name);
  snprintf(path, sizeof path, "%s/%s", dir1, name);
  const int64_t rows = a.l->stacks[a.qs].rows_per_sc;
  CHECKF(stat(path, &sb) == 0 && sb.st_size == rows * (DIM + 1 + 2 * DIM), "%s: %lld bytes, expected %lld", path,
         (long long)sb.st_size, (long long)(rows * (DIM + 1 + 2 * DIM)));

  /* The same formats: byte for byte. */
  if (engine_as(&b, "e4m3", "bfloat16", 2)) {
    if (!load_into(dir1, &b)) CHECK(same_codes(&a, &b));
    engine1_destroy(&b);
  }
  /* float32: the decoded values; saved, and restored into e4m3 and
   * bfloat16 again, a's values (rounding to nearest is exact; a row's
   * scale may come out smaller for the same values). */
  snprintf(root, sizeof root, "%s/r2", tmp_root);
  check_restore(dir1, "", "", 2, want, root);
  scps__ckpt_manifest_step_dir(root, 5, dir2, sizeof dir2);
  check_restore(dir2, "e4m3", "bfloat16", 2, want, NULL);
  /* A narrower format: each row rounded to nearest from the decoded one. */
  if (engine_as(&e5, "e5m2", "e4m3", 2)) {
    if (!load_into(dir1, &e5)) {
      float *got = read_all(&e5);
      int wrong = 0;
      for (int64_t id = 0; id < VOCAB; id++)
        for (int a_ = 0; a_ < 2; a_++) {
          const scps_storage_codec *cd = scps__engine_codec(e5.e, e5.qs, a_);
          uint8_t codes[4 * DIM + 1];
          float r[DIM];
          CHECK_OK(scps__storage_encode_row(cd, want + (size_t)id * 2 * DIM + (size_t)a_ * DIM, codes, NULL, &err),
                   &err);
          scps__storage_decode_row(cd, codes, r);
          wrong += memcmp(r, got + (size_t)id * 2 * DIM + (size_t)a_ * DIM, sizeof r) != 0;
        }
      CHECKF(wrong == 0, "%d rows differ from rounding to e5m2/e4m3", wrong);
      free(got);
    }
    engine1_destroy(&e5);
  }
  /* Another topology, the same formats: the same values. */
  check_restore(dir1, "e4m3", "bfloat16", 3, want, NULL);
  /* Converted offline to float32: declares it and holds the decoded values. */
  scps_checkpoint_format_change ch[2] = {{"q", "", "float32"}, {"q", "accumulator", "float32"}};
  snprintf(root, sizeof root, "%s/r3", tmp_root);
  CHECK_OK(scps__checkpoint_export_as(dir1, NULL, ch, 2, root, NULL, &err), &err);
  scps__ckpt_manifest_step_dir(root, 5, dir3, sizeof dir3);
  scps_checkpoint *ck = NULL;
  CHECK_OK(scps__checkpoint_open(dir3, &ck, &err), &err);
  if (ck) {
    const scps_table_spec *ts;
    const scps_feature_spec *fs;
    int nt, nf;
    scps__checkpoint_specs(ck, &ts, &nt, &fs, &nf);
    CHECK(nt == 2 && !ts[0].storage_format[0] && !ts[0].slot_formats[0][0]);
    scps__checkpoint_close(ck);
  }
  check_restore(dir3, "", "", 2, want, NULL);
  ch[0] = (scps_checkpoint_format_change){"q", "velocity", "e4m3"};
  snprintf(root, sizeof root, "%s/r4", tmp_root);
  CHECK(scps__checkpoint_export_as(dir1, NULL, ch, 1, root, NULL, &err) == SCPS_EINVAL);
  CHECKF(strstr(err.msg, "'q'") && strstr(err.msg, "'velocity'"), "%s", err.msg);
  free(want);
  engine1_destroy(&a);
  nftw(tmp_root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int main(void) {
  test_names();
  test_spec_checks();
  test_workload_keys();
  test_stacking();
  test_e4m3_rows_match_reference();
  test_lookups();
  test_updates();
  test_slot_formats();
  test_stochastic_vs_nearest();
  test_capacity();
  test_checkpoints();
  return scps_test_finish("test_storage");
}
