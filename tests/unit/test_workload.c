/* Tests for scps_workload: the shared workload files load into the expected
 * specs, malformed workloads are refused naming the JSON path, and the batch
 * generator is deterministic, in range and draws the documented distributions. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "scps_json.h"
#include "scps_layout.h"
#include "scps_prep.h"
#include "scps_test.h"
#include "scps_workload.h"

static scps_workload *load_shared(const char *name) {
  char rel[256];
  snprintf(rel, sizeof rel, "workloads/%s.json", name);
  scps_workload *w = NULL;
  scps_error err_, *err = &err_;
  CHECK_OK(scps__workload_load(scps_test_shared_path(rel), &w, err), err);
  return w;
}

static scps_workload *parse_text(const char *text) {
  scps_workload *w = NULL;
  scps_error err_, *err = &err_;
  CHECK_OK(scps__workload_parse(text, strlen(text), &w, err), err);
  return w;
}

/* ---- the shared workload files ---- */

/* Limits the files leave unset, sized as scps_workload.h says: batch x
 * valency ids, that or the vocabulary unique ids, neither below 256. */
static int32_t sized(int64_t v) { return v < 256 ? 256 : (int32_t)v; }

static void check_adagrad_table(const scps_table_spec *t, const char *name, int64_t vocab, int dim,
                                int64_t batch_ids) {
  CHECKF(!strcmp(t->name, name), "table %s: name %s", name, t->name);
  CHECKF(t->vocabulary_size == vocab, "table %s: vocab %lld", name, (long long)t->vocabulary_size);
  CHECKF(t->embedding_dim == dim, "table %s: dim %d", name, t->embedding_dim);
  CHECK(t->combiner == SCPS_COMBINER_SUM);
  CHECK(t->optimizer.type == SCPS_OPT_ADAGRAD);
  CHECK(t->optimizer.learning_rate == 0.01);
  CHECK(t->optimizer.initial_accumulator == 0.1);
  CHECK(t->initializer.type == SCPS_INIT_UNIFORM);
  CHECK(t->initializer.scale == 0.05);
  CHECK(!t->clip && t->stack[0] == '\0');
  CHECKF(t->max_ids_per_partition == sized(batch_ids), "table %s: max_ids_per_partition %d", name,
         t->max_ids_per_partition);
  CHECKF(t->max_unique_ids_per_partition == sized(batch_ids < vocab ? batch_ids : vocab),
         "table %s: max_unique_ids_per_partition %d", name, t->max_unique_ids_per_partition);
}

static void test_dlrm8_and_serving(void) {
  const char *files[] = {"dlrm8", "serving-small-batch"};
  const int batches[] = {4096, 256};
  for (int k = 0; k < 2; k++) {
    scps_workload *w = load_shared(files[k]);
    if (!w) continue;
    CHECK(!strcmp(w->name, files[k]));
    CHECK(strlen(w->description) > 10);
    CHECK(w->batch_size == batches[k]);
    CHECK(w->distribution == SCPS_IDS_ZIPF && w->exponent == 1.1 && w->seed == 1);
    CHECK(w->n_tables == 8 && w->n_features == 8);
    for (int i = 0; i < w->n_tables && i < 8; i++) {
      char name[8];
      snprintf(name, sizeof name, "t%d", i);
      check_adagrad_table(&w->tables[i], name, 1000000, 64, (int64_t)batches[k] * 4);
      const scps_feature_spec *f = &w->features[i];
      snprintf(name, sizeof name, "f%d", i);
      CHECK(!strcmp(f->name, name));
      CHECK(!strcmp(f->table, w->tables[i].name));
      CHECK(f->valency == 4 && f->batch_size == batches[k] && f->output_dim == 64);
      CHECK(w->draws[i].valency_min == 4 && w->draws[i].valency_max == 4 && !w->draws[i].weighted);
    }
    scps__workload_destroy(w);
  }
}

static void test_criteo26(void) {
  scps_workload *w = load_shared("criteo26");
  if (!w) return;
  CHECK(!strcmp(w->name, "criteo26"));
  CHECK(w->batch_size == 8192 && w->exponent == 1.05 && w->seed == 2);
  CHECK(w->n_tables == 26 && w->n_features == 26);
  /* Criteo cardinalities capped at 1M; dim 16 up to 10k rows, 64 above. */
  static const int64_t vocab[26] = {1460,  583,     1000000, 1000000, 305,     24,    12517,
                                    633,   3,       93145,   5683,    1000000, 3194,  27,
                                    14992, 1000000, 10,      5652,    2173,    4,     1000000,
                                    18,    15,      286181,  105,     142572};
  for (int i = 0; i < w->n_tables && i < 26; i++) {
    char name[8];
    snprintf(name, sizeof name, "c%d", i);
    check_adagrad_table(&w->tables[i], name, vocab[i], vocab[i] <= 10000 ? 16 : 64, 8192);
    CHECK(!strcmp(w->features[i].table, name));
    CHECK(w->features[i].valency == 1 && w->features[i].output_dim == w->tables[i].embedding_dim);
  }
  scps__workload_destroy(w);
}

static void test_shared_tables(void) {
  scps_workload *w = load_shared("shared-tables");
  if (!w) return;
  CHECK(w->batch_size == 512 && w->exponent == 1.2 && w->seed == 3);
  CHECK(w->n_tables == 2 && w->n_features == 6);
  const scps_table_spec *items = &w->tables[0], *users = &w->tables[1];
  CHECK(!strcmp(items->name, "items") && items->vocabulary_size == 50000 &&
        items->embedding_dim == 32);
  CHECK(items->combiner == SCPS_COMBINER_MEAN);
  CHECK(items->optimizer.type == SCPS_OPT_SGD && items->optimizer.learning_rate == 0.05);
  CHECK(items->initializer.type == SCPS_INIT_NORMAL && items->initializer.stddev == 0.02);
  CHECK(!strcmp(users->name, "users") && users->vocabulary_size == 20000 &&
        users->embedding_dim == 24);
  CHECK(users->combiner == SCPS_COMBINER_SQRTN);
  CHECK(users->optimizer.type == SCPS_OPT_FTRL);
  CHECK(users->optimizer.learning_rate == 0.05 && users->optimizer.learning_rate_power == -0.5);
  CHECK(users->optimizer.l1 == 0.001 && users->optimizer.l2 == 0.001);
  CHECK(users->optimizer.initial_accumulator == 0.1);
  /* Not in the file: the reference defaults (beta 0, linear slot 0, no lr scaling). */
  CHECK(users->optimizer.beta == 0 && users->optimizer.initial_linear == 0 &&
        !users->optimizer.multiply_linear_by_learning_rate);

  static const struct {
    const char *name, *table;
    int valency, lo, hi;
    bool weighted;
  } expect[6] = {{"clicked_items", "items", 0, 1, 20, true}, {"viewed_items", "items", 0, 1, 20, false},
                 {"candidate_item", "items", 1, 1, 1, false}, {"user_id", "users", 1, 1, 1, false},
                 {"friends", "users", 0, 0, 10, false},       {"followers", "users", 0, 0, 10, false}};
  for (int i = 0; i < 6 && i < w->n_features; i++) {
    const scps_feature_spec *f = &w->features[i];
    CHECKF(!strcmp(f->name, expect[i].name) && !strcmp(f->table, expect[i].table), "feature %d: %s",
           i, f->name);
    CHECKF(f->valency == expect[i].valency, "feature %s: valency %d", f->name, f->valency);
    CHECK(w->draws[i].valency_min == expect[i].lo && w->draws[i].valency_max == expect[i].hi);
    CHECK(w->draws[i].weighted == expect[i].weighted);
    CHECK(f->batch_size == 512);
    CHECK(f->output_dim == (!strcmp(expect[i].table, "items") ? 32 : 24));
  }
  scps__workload_destroy(w);
}

static double json_num(const scps_json *obj, const char *key) {
  double d = NAN;
  const scps_json *v = scps__json_get(obj, key);
  if (v) scps__json_number(v, &d);
  return d;
}

static double json_at_num(const scps_json *arr, size_t i) {
  double d = NAN;
  const scps_json *v = scps__json_at(arr, i);
  if (v) scps__json_number(v, &d);
  return d;
}

static const char *json_str(const scps_json *obj, const char *key) {
  const scps_json *v = scps__json_get(obj, key);
  return v ? scps__json_string(v, NULL) : NULL;
}

/* Every table and feature of every shared file against the file's own DOM. */
static void test_files_match_dom(void) {
  const char *files[] = {"dlrm8", "criteo26", "shared-tables", "serving-small-batch"};
  for (int k = 0; k < 4; k++) {
    scps_workload *w = load_shared(files[k]);
    if (!w) continue;
    char rel[64];
    snprintf(rel, sizeof rel, "workloads/%s.json", files[k]);
    FILE *f = fopen(scps_test_shared_path(rel), "rb");
    CHECK(f != NULL);
    if (!f) continue;
    char *text = malloc(1 << 20);
    size_t len = fread(text, 1, 1 << 20, f);
    fclose(f);
    scps_json *root;
    scps_error err_, *err = &err_;
    CHECK_OK(scps__json_parse(text, len, &root, err), err);
    free(text);
    if (!root) continue;
    CHECK_OK(scps__specs_validate(w->tables, w->n_tables, w->features, w->n_features, err), err);
    CHECK(w->batch_size == (int32_t)json_num(root, "batch_size"));
    const scps_json *tables = scps__json_get(root, "tables");
    CHECK((size_t)w->n_tables == scps__json_length(tables));
    for (int i = 0; i < w->n_tables; i++) {
      const scps_json *jt = scps__json_at(tables, (size_t)i);
      const scps_table_spec *t = &w->tables[i];
      const scps_json *opt = scps__json_get(jt, "optimizer"), *init = scps__json_get(jt, "initializer");
      CHECKF(!strcmp(t->name, json_str(jt, "name")), "%s table %d", files[k], i);
      CHECK(t->vocabulary_size == (int64_t)json_num(jt, "vocabulary_size"));
      CHECK(t->embedding_dim == (int32_t)json_num(jt, "embedding_dim"));
      CHECK(!strcmp(scps__combiner_name(t->combiner), json_str(jt, "combiner")));
      CHECK(!strcmp(scps__optimizer_name(t->optimizer.type), json_str(opt, "type")));
      CHECK(t->optimizer.learning_rate == json_num(opt, "learning_rate"));
      CHECK(!strcmp(scps__initializer_name(t->initializer.type), json_str(init, "type")));
      if (scps__json_get(init, "scale")) CHECK(t->initializer.scale == json_num(init, "scale"));
      if (scps__json_get(init, "stddev")) CHECK(t->initializer.stddev == json_num(init, "stddev"));
    }
    const scps_json *features = scps__json_get(root, "features");
    CHECK((size_t)w->n_features == scps__json_length(features));
    for (int i = 0; i < w->n_features; i++) {
      const scps_json *jf = scps__json_at(features, (size_t)i);
      const scps_feature_spec *fs = &w->features[i];
      CHECKF(!strcmp(fs->name, json_str(jf, "name")), "%s feature %d", files[k], i);
      CHECK(!strcmp(fs->table, json_str(jf, "table")));
      const scps_json *val = scps__json_get(jf, "valency");
      if (scps__json_typeof(val) == SCPS_JSON_ARRAY) {
        CHECK(fs->valency == 0);
        CHECK(w->draws[i].valency_min == (int32_t)json_at_num(val, 0));
        CHECK(w->draws[i].valency_max == (int32_t)json_at_num(val, 1));
      } else {
        CHECK(fs->valency == (int32_t)json_num(jf, "valency"));
        CHECK(w->draws[i].valency_min == fs->valency && w->draws[i].valency_max == fs->valency);
      }
      const scps_json *weighted = scps__json_get(jf, "weighted");
      bool wb = false;
      if (weighted) scps__json_bool(weighted, &wb);
      CHECK(w->draws[i].weighted == wb);
    }
    scps__json_destroy(root);
    scps__workload_destroy(w);
  }
}

/* ---- rejection of malformed workloads ---- */

static const char *base_text =
    "{\"name\": \"t\", \"description\": \"d\", \"batch_size\": 8,\n"
    " \"ids\": {\"distribution\": \"zipf\", \"exponent\": 1.2, \"seed\": 5},\n"
    " \"tables\": [\n"
    "  {\"name\": \"a\", \"vocabulary_size\": 100, \"embedding_dim\": 8, \"combiner\": \"sum\",\n"
    "   \"optimizer\": {\"type\": \"adagrad\", \"learning_rate\": 0.5, \"initial_accumulator\": 0.2},\n"
    "   \"initializer\": {\"type\": \"uniform\", \"scale\": 0.1}},\n"
    "  {\"name\": \"b\", \"vocabulary_size\": 50, \"embedding_dim\": 4, \"combiner\": \"mean\",\n"
    "   \"optimizer\": {\"type\": \"sgd\"},\n"
    "   \"initializer\": {\"type\": \"zeros\"}}\n"
    " ],\n"
    " \"features\": [\n"
    "  {\"name\": \"fa\", \"table\": \"a\", \"valency\": 3},\n"
    "  {\"name\": \"fb\", \"table\": \"b\", \"valency\": [0, 5], \"weighted\": true}\n"
    " ]}";

/* base_text with its only occurrence of `from` replaced by `to`, in a static buffer. */
static const char *edit(const char *from, const char *to) {
  static char buf[8192];
  const char *at = strstr(base_text, from);
  CHECKF(at && !strstr(at + 1, from), "'%s' must occur exactly once in the base workload", from);
  if (!at) return base_text;
  snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - base_text), base_text, to, at + strlen(from));
  return buf;
}

/* Expects text to be refused with code and a message holding every fragment. */
static void refuse(const char *text, int code, const char *frag1, const char *frag2) {
  scps_workload *w = (scps_workload *)&w;
  scps_error err_, *err = &err_;
  scps_error_clear(err);
  int rc = scps__workload_parse(text, strlen(text), &w, err);
  CHECKF(rc == code, "rc %d (want %d): %s", rc, code, err->msg);
  CHECK(w == NULL);
  CHECKF(!frag1 || strstr(err->msg, frag1), "message \"%s\" lacks \"%s\"", err->msg, frag1);
  CHECKF(!frag2 || strstr(err->msg, frag2), "message \"%s\" lacks \"%s\"", err->msg, frag2);
  if (rc == 0) scps__workload_destroy(w);
}

static void test_rejections(void) {
  scps_workload *w = parse_text(base_text);
  CHECK(w != NULL);
  scps__workload_destroy(w);

  const int E = SCPS_EINVAL;
  /* Top level. */
  refuse(edit("\"batch_size\": 8,", ""), E, "missing required key 'batch_size'", NULL);
  refuse(edit("\"batch_size\": 8", "\"batch_sise\": 8"), E, "unknown key 'batch_sise'", "allowed");
  refuse(edit("\"batch_size\": 8", "\"batch_size\": 0"), E, "batch_size", "got 0");
  refuse(edit("\"batch_size\": 8", "\"batch_size\": -3"), E, "batch_size", "got -3");
  refuse(edit("\"batch_size\": 8", "\"batch_size\": 8.5"), E, "batch_size", "got 8.5");
  refuse(edit("\"batch_size\": 8", "\"batch_size\": \"8\""), E, "batch_size", "got \"8\"");
  refuse(edit("\"description\": \"d\"", "\"description\": 5"), E, "description", "got 5");
  refuse(edit("\"name\": \"t\"", "\"name\": [\"t\"]"), E, "name", "an array");
  refuse("[]", E, "top level", "an object");
  refuse("{\"batch_size\": 8,", SCPS_EPARSE, "line 1", "end of input");
  refuse(edit("\"batch_size\": 8,", "\"batch_size\": 8,,"), SCPS_EPARSE, "line 1, column 51",
         "expected a string key");
  refuse(edit("\"batch_size\": 8,", "\"batch_size\": 8, \"batch_size\": 9,"), SCPS_EPARSE,
         "duplicate object key \"batch_size\"", NULL);

  /* ids. */
  refuse(edit("\"distribution\": \"zipf\"", "\"distribution\": \"pareto\""), E, "ids.distribution",
         "\"pareto\"");
  refuse(edit("\"exponent\": 1.2", "\"exponent\": 1.0"), E, "ids.exponent", "must be in (1");
  refuse(edit("\"exponent\": 1.2", "\"exponent\": 1"), E, "ids.exponent", NULL);
  refuse(edit("\"exponent\": 1.2", "\"exponent\": 0.5"), E, "ids.exponent", NULL);
  refuse(edit("\"exponent\": 1.2", "\"exponent\": 1000"), E, "ids.exponent", NULL);
  refuse(edit("\"exponent\": 1.2, ", ""), E, "ids", "missing required key 'exponent'");
  refuse(edit("\"distribution\": \"zipf\"", "\"distribution\": \"uniform\""), E, "ids",
         "unknown key 'exponent'");
  refuse(edit("\"seed\": 5", "\"seed\": -1"), E, "ids.seed", NULL);
  refuse(edit("\"seed\": 5", "\"seed\": 1.5"), E, "ids.seed", NULL);
  refuse(edit("\"seed\": 5", "\"sed\": 5"), E, "ids", "unknown key 'sed'");

  /* Tables. */
  refuse(edit("\"vocabulary_size\": 100", "\"vocab_size\": 100"), E, "tables[0]",
         "unknown key 'vocab_size'");
  refuse(edit("\"vocabulary_size\": 100", "\"vocabulary_size\": -5"), E,
         "tables[0].vocabulary_size", "got -5");
  refuse(edit("\"vocabulary_size\": 100", "\"vocabulary_size\": 0"), E, "tables[0].vocabulary_size",
         "got 0");
  refuse(edit("\"vocabulary_size\": 50", "\"vocabulary_size\": 1e12"), E, "table 'b'",
         "vocabulary_size");
  refuse(edit("\"embedding_dim\": 8", "\"embedding_dim\": 0"), E, "tables[0].embedding_dim",
         "got 0");
  refuse(edit("\"embedding_dim\": 4, ", ""), E, "tables[1]", "missing required key 'embedding_dim'");
  refuse(edit("\"combiner\": \"mean\"", "\"combiner\": \"avg\""), E, "tables[1].combiner",
         "\"avg\"");
  refuse(edit(", \"combiner\": \"mean\"", ""), E, "tables[1]", "missing required key 'combiner'");
  refuse(edit("\"name\": \"b\"", "\"name\": \"a\""), SCPS_EEXIST, "tables[1].name",
         "\"a\" already names tables[0]");
  refuse(edit("\"name\": \"b\"", "\"name\": \"\""), E, "tables[1].name", NULL);
  char long_name[300];
  snprintf(long_name, sizeof long_name, "\"name\": \"%0200d\"", 7);
  refuse(edit("\"name\": \"b\"", long_name), E, "tables[1].name", NULL);
  refuse(edit("\"combiner\": \"mean\"", "\"combiner\": \"mean\", \"clip\": [2, 1]"), E,
         "tables[1].clip", NULL);
  refuse(edit("\"combiner\": \"mean\"", "\"combiner\": \"mean\", \"clip\": [1]"), E,
         "tables[1].clip", NULL);
  refuse(edit("\"combiner\": \"mean\"", "\"combiner\": \"mean\", \"clip\": [0, \"x\"]"), E,
         "tables[1].clip", NULL);
  refuse(edit("\"combiner\": \"mean\"", "\"combiner\": \"mean\", \"max_ids_per_partition\": 0"), E,
         "tables[1].max_ids_per_partition", NULL);
  refuse(edit("\"combiner\": \"mean\"",
              "\"combiner\": \"mean\", \"max_unique_ids_per_partition\": 3000000000"),
         E, "tables[1].max_unique_ids_per_partition", NULL);
  refuse(edit("\"combiner\": \"mean\"", "\"combiner\": \"mean\", \"stack\": \"\""), E,
         "tables[1].stack", NULL);

  /* Optimizers. */
  refuse(edit("\"learning_rate\": 0.5", "\"learning_rate\": 0.5, \"beta_1\": 0.9"), E,
         "tables[0].optimizer", "'beta_1' is not a hyper-parameter of adagrad");
  refuse(edit("{\"type\": \"sgd\"}", "{\"type\": \"sgd\", \"initial_accumulator\": 1}"), E,
         "tables[1].optimizer", "'initial_accumulator' is not a hyper-parameter of sgd");
  refuse(edit("{\"type\": \"sgd\"}", "{\"type\": \"sgd\", \"learnin_rate\": 1}"), E,
         "tables[1].optimizer", "'learnin_rate' is not a known hyper-parameter");
  refuse(edit("{\"type\": \"sgd\"}", "{\"type\": \"ftrl\", \"rho\": 0.5}"), E, "'rho'", "ftrl");
  refuse(edit("{\"type\": \"sgd\"}", "{\"type\": \"adam\", \"b1\": 0.5}"), E, "'b1'", "adam");
  refuse(edit("{\"type\": \"sgd\"}", "{\"type\": \"laprop\", \"beta_1\": 0.5}"), E, "'beta_1'",
         "laprop");
  refuse(edit("{\"type\": \"sgd\"}", "{\"type\": \"adagrad\", \"momentum\": 0.5}"), E, "'momentum'",
         "adagrad");
  refuse(edit("\"type\": \"adagrad\"", "\"type\": \"adagrd\""), E, "tables[0].optimizer.type",
         "\"adagrd\"");
  refuse(edit("{\"type\": \"sgd\"}", "{\"learning_rate\": 1}"), E, "tables[1].optimizer",
         "missing required key 'type'");
  refuse(edit("{\"type\": \"sgd\"}", "\"sgd\""), E, "tables[1].optimizer", "an object");
  refuse(edit("\"learning_rate\": 0.5", "\"learning_rate\": \"fast\""), E,
         "tables[0].optimizer.learning_rate", "\"fast\"");
  /* The optimizers compute in float32: beyond FLT_MAX is infinite there. */
  refuse(edit("\"learning_rate\": 0.5", "\"learning_rate\": 1e39"), E, "table 'a'",
         "learning_rate is 1e+39, not finite in float32");
  refuse(edit("{\"type\": \"sgd\"}", "{\"type\": \"adagrad_momentum\", \"use_nesterov\": 1}"), E,
         "tables[1].optimizer.use_nesterov", "true or false");
  refuse(edit("\"learning_rate\": 0.5", "\"learning_rate\": -0.5"), E, "table 'a'",
         "learning_rate");

  /* Initializers. */
  refuse(edit("{\"type\": \"zeros\"}", "{\"type\": \"glorot\"}"), E, "tables[1].initializer.type",
         "\"glorot\"");
  refuse(edit("{\"type\": \"zeros\"}", "{\"type\": \"zeros\", \"scale\": 1}"), E,
         "tables[1].initializer", "unknown key 'scale'");
  refuse(edit("\"scale\": 0.1", "\"stddev\": 0.1"), E, "tables[0].initializer",
         "unknown key 'stddev'");
  refuse(edit("{\"type\": \"uniform\", \"scale\": 0.1}", "{\"type\": \"uniform\"}"), E,
         "tables[0].initializer", "missing required key 'scale'");
  refuse(edit("{\"type\": \"zeros\"}", "{\"type\": \"constant\"}"), E, "tables[1].initializer",
         "missing required key 'value'");
  refuse(edit("{\"type\": \"zeros\"}", "{\"type\": \"zeros\", \"seed\": -2}"), E,
         "tables[1].initializer.seed", NULL);
  refuse(edit("\"scale\": 0.1", "\"scale\": true"), E, "tables[0].initializer.scale", "true");

  /* Features. */
  refuse(edit("\"valency\": 3", "\"valency\": 0"), E, "features[0].valency", "got 0");
  refuse(edit("\"valency\": 3", "\"valency\": 70000"), E, "features[0].valency", "got 70000");
  refuse(edit("\"valency\": 3", "\"valency\": 1.5"), E, "features[0].valency", "got 1.5");
  refuse(edit("\"valency\": 3", "\"valency\": \"3\""), E, "features[0].valency", NULL);
  refuse(edit("\"valency\": 3", "\"valency\": [5, 2]"), E, "features[0].valency", "[5, 2]");
  refuse(edit("\"valency\": 3", "\"valency\": [-1, 2]"), E, "features[0].valency", NULL);
  refuse(edit("\"valency\": 3", "\"valency\": [1]"), E, "features[0].valency", NULL);
  refuse(edit("\"valency\": 3", "\"valency\": [1, 2, 3]"), E, "features[0].valency", NULL);
  refuse(edit("\"valency\": [0, 5]", "\"valency\": [0, 0]"), E, "features[1].valency", NULL);
  refuse(edit("\"valency\": 3", "\"valency\": 3, \"valence\": 3"), E, "features[0]",
         "unknown key 'valence'");
  refuse(edit("\"table\": \"a\"", "\"table\": \"zz\""), E, "features[0].table", "\"zz\"");
  refuse(edit("\"table\": \"a\", ", ""), E, "features[0]", "missing required key 'table'");
  refuse(edit("\"weighted\": true", "\"weighted\": \"yes\""), E, "features[1].weighted",
         "\"yes\"");
  refuse(edit("\"name\": \"fb\"", "\"name\": \"fa\""), SCPS_EEXIST, "features[1].name",
         "\"fa\" already names features[0]");
  refuse(edit("{\"name\": \"fa\", \"table\": \"a\", \"valency\": 3}", "7"), E, "features[0]",
         "an object");

  /* Empty lists. */
  refuse(edit("\"features\": [\n"
              "  {\"name\": \"fa\", \"table\": \"a\", \"valency\": 3},\n"
              "  {\"name\": \"fb\", \"table\": \"b\", \"valency\": [0, 5], \"weighted\": true}\n"
              " ]",
              "\"features\": []"),
         E, "features", "non-empty array");
  refuse("{\"batch_size\": 1, \"ids\": {\"distribution\": \"uniform\"}, \"tables\": [], "
         "\"features\": []}",
         E, "tables", "non-empty array");

  /* The file loader names the path and reports missing files. */
  scps_error err_, *err = &err_;
  w = (scps_workload *)&w;
  CHECK(scps__workload_load("/nonexistent/dir/w.json", &w, err) == SCPS_EIO);
  CHECK(w == NULL && strstr(err->msg, "/nonexistent/dir/w.json"));
}

static void test_accepted_variants(void) {
  scps_workload *w = parse_text(base_text);
  if (w) {
    CHECK(!strcmp(w->name, "t") && !strcmp(w->description, "d"));
    CHECK(w->batch_size == 8 && w->distribution == SCPS_IDS_ZIPF && w->exponent == 1.2 &&
          w->seed == 5);
    CHECK(w->tables[0].optimizer.type == SCPS_OPT_ADAGRAD &&
          w->tables[0].optimizer.learning_rate == 0.5 &&
          w->tables[0].optimizer.initial_accumulator == 0.2);
    CHECK(w->tables[1].initializer.type == SCPS_INIT_ZEROS);
    /* SGD without hyper-parameters gets the reference default learning rate. */
    CHECK(w->tables[1].optimizer.type == SCPS_OPT_SGD);
    CHECK(w->features[0].valency == 3 && w->features[1].valency == 0);
    CHECK(w->features[0].output_dim == 8 && w->features[1].output_dim == 4);
    CHECK(w->draws[1].valency_min == 0 && w->draws[1].valency_max == 5 && w->draws[1].weighted);
    scps__workload_destroy(w);
  }

  /* Every optimizer with all of its hyper-parameters by their reference names. */
  w = parse_text(edit("{\"type\": \"sgd\"}",
                      "{\"type\": \"adam\", \"learning_rate\": 0.25, \"beta_1\": 0.8, "
                      "\"beta_2\": 0.99, \"epsilon\": 1e-7}"));
  if (w) {
    const scps_optimizer_spec *o = &w->tables[1].optimizer;
    CHECK(o->type == SCPS_OPT_ADAM && o->learning_rate == 0.25 && o->beta1 == 0.8 &&
          o->beta2 == 0.99 && o->epsilon == 1e-7);
    scps__workload_destroy(w);
  }
  w = parse_text(edit("{\"type\": \"sgd\"}", "{\"type\": \"adam\"}"));
  if (w) {
    /* Reference defaults: beta_1 0.9, beta_2 0.999, epsilon 1e-8, lr 0.001. */
    const scps_optimizer_spec *o = &w->tables[1].optimizer;
    CHECK(o->beta1 == 0.9 && o->beta2 == 0.999 && o->epsilon == 1e-8 && o->learning_rate == 0.001);
    scps__workload_destroy(w);
  }
  w = parse_text(edit("{\"type\": \"sgd\"}",
                      "{\"type\": \"laprop\", \"b1\": 0.7, \"b2\": 0.9, \"eps\": 1e-20}"));
  if (w) {
    const scps_optimizer_spec *o = &w->tables[1].optimizer;
    CHECK(o->type == SCPS_OPT_LAPROP && o->beta1 == 0.7 && o->beta2 == 0.9 && o->epsilon == 1e-20);
    scps__workload_destroy(w);
  }
  w = parse_text(edit("{\"type\": \"sgd\"}",
                      "{\"type\": \"adagrad_momentum\", \"initial_accumulator\": 0.3, "
                      "\"momentum\": 0.5, \"beta2\": 0.9, \"epsilon\": 1e-9, \"exponent\": 3, "
                      "\"use_nesterov\": true}"));
  if (w) {
    const scps_optimizer_spec *o = &w->tables[1].optimizer;
    CHECK(o->type == SCPS_OPT_ADAGRAD_MOMENTUM && o->initial_accumulator == 0.3 &&
          o->momentum == 0.5 && o->beta2 == 0.9 && o->epsilon == 1e-9 && o->exponent == 3 &&
          o->use_nesterov);
    scps__workload_destroy(w);
  }
  w = parse_text(edit("{\"type\": \"sgd\"}",
                      "{\"type\": \"ftrl\", \"learning_rate_power\": -0.7, \"l1\": 0.1, "
                      "\"l2\": 0.2, \"beta\": 0.3, \"multiply_linear_by_learning_rate\": true, "
                      "\"initial_linear\": 0.4, \"initial_accumulator\": 0.5}"));
  if (w) {
    const scps_optimizer_spec *o = &w->tables[1].optimizer;
    CHECK(o->type == SCPS_OPT_FTRL && o->learning_rate_power == -0.7 && o->l1 == 0.1 &&
          o->l2 == 0.2 && o->beta == 0.3 && o->multiply_linear_by_learning_rate &&
          o->initial_linear == 0.4 && o->initial_accumulator == 0.5);
    scps__workload_destroy(w);
  }
  w = parse_text(edit("{\"type\": \"sgd\"}",
                      "{\"type\": \"f2a\", \"rho\": 0.6, \"l1\": 0.01, \"l2\": 0.02, "
                      "\"max_lr_multiplier\": 100, \"initial_accumulator\": 0.7}"));
  if (w) {
    const scps_optimizer_spec *o = &w->tables[1].optimizer;
    CHECK(o->type == SCPS_OPT_F2A && o->rho == 0.6 && o->l1 == 0.01 && o->l2 == 0.02 &&
          o->max_lr_multiplier == 100 && o->initial_accumulator == 0.7);
    scps__workload_destroy(w);
  }

  /* Initializers and the optional table extras. */
  w = parse_text(edit("{\"type\": \"zeros\"}",
                      "{\"type\": \"truncated_normal\", \"stddev\": 0.3, \"seed\": 42}, "
                      "\"clip\": [-1, 0.5], \"max_ids_per_partition\": 512, "
                      "\"max_unique_ids_per_partition\": 64, \"stack\": \"s1\""));
  if (w) {
    const scps_table_spec *t = &w->tables[1];
    CHECK(t->initializer.type == SCPS_INIT_TRUNCATED_NORMAL && t->initializer.stddev == 0.3 &&
          t->initializer.seed == 42);
    CHECK(t->clip && t->clip_min == -1.0f && t->clip_max == 0.5f);
    CHECK(t->max_ids_per_partition == 512 && t->max_unique_ids_per_partition == 64);
    CHECK(!strcmp(t->stack, "s1"));
    scps__workload_destroy(w);
  }
  w = parse_text(edit("{\"type\": \"zeros\"}", "{\"type\": \"constant\", \"value\": -2.5}"));
  if (w) {
    CHECK(w->tables[1].initializer.type == SCPS_INIT_CONSTANT &&
          w->tables[1].initializer.value == -2.5);
    scps__workload_destroy(w);
  }
  w = parse_text(edit("{\"type\": \"zeros\"}", "{\"type\": \"normal\", \"stddev\": 1e-3}"));
  if (w) {
    CHECK(w->tables[1].initializer.type == SCPS_INIT_NORMAL &&
          w->tables[1].initializer.stddev == 1e-3);
    scps__workload_destroy(w);
  }

  /* Uniform ids without exponent; no name or description; no seed. */
  w = parse_text(edit("\"distribution\": \"zipf\", \"exponent\": 1.2, \"seed\": 5",
                      "\"distribution\": \"uniform\""));
  if (w) {
    CHECK(w->distribution == SCPS_IDS_UNIFORM && w->seed == 0);
    scps__workload_destroy(w);
  }
  w = parse_text(edit("\"name\": \"t\", \"description\": \"d\", ", ""));
  if (w) {
    CHECK(w->name[0] == '\0' && w->description && w->description[0] == '\0');
    scps__workload_destroy(w);
  }
  /* Whole-number values may be written with a fraction or exponent. */
  w = parse_text(edit("\"vocabulary_size\": 100", "\"vocabulary_size\": 1e2"));
  if (w) {
    CHECK(w->tables[0].vocabulary_size == 100);
    scps__workload_destroy(w);
  }
}

/* ---- generator ---- */

/* A one-table, one-feature workload for distribution checks. */
static scps_workload *single(const char *dist, double exponent, long long vocab, int batch,
                             const char *valency, bool weighted) {
  char text[2048], ids[128];
  if (!strcmp(dist, "zipf"))
    snprintf(ids, sizeof ids, "{\"distribution\": \"zipf\", \"exponent\": %.17g, \"seed\": 11}",
             exponent);
  else snprintf(ids, sizeof ids, "{\"distribution\": \"uniform\", \"seed\": 11}");
  snprintf(text, sizeof text,
           "{\"batch_size\": %d, \"ids\": %s, \"tables\": [{\"name\": \"t\", "
           "\"vocabulary_size\": %lld, \"embedding_dim\": 8, \"combiner\": \"sum\", "
           "\"optimizer\": {\"type\": \"sgd\"}, \"initializer\": {\"type\": \"zeros\"}}], "
           "\"features\": [{\"name\": \"f\", \"table\": \"t\", \"valency\": %s, \"weighted\": %s}]}",
           batch, ids, vocab, valency, weighted ? "true" : "false");
  return parse_text(text);
}

static bool same_batch(const scps_feature_input *a, const scps_feature_input *b, int n_features,
                       int32_t batch) {
  for (int f = 0; f < n_features; f++) {
    if (a[f].n_ids != b[f].n_ids) return false;
    if (memcmp(a[f].row_offsets, b[f].row_offsets, ((size_t)batch + 1) * sizeof(int64_t))) return false;
    if (memcmp(a[f].ids, b[f].ids, a[f].n_ids * sizeof(int64_t))) return false;
    if ((a[f].weights == NULL) != (b[f].weights == NULL)) return false;
    if (a[f].weights && memcmp(a[f].weights, b[f].weights, a[f].n_ids * sizeof(float))) return false;
  }
  return true;
}

static void test_determinism_and_ranges(void) {
  scps_workload *w = load_shared("shared-tables");
  if (!w) return;
  scps_error err_, *err = &err_;
  scps_workload_gen *g1 = NULL, *g2 = NULL, *g3 = NULL;
  CHECK_OK(scps__workload_gen_create(w, 7, &g1, err), err);
  CHECK_OK(scps__workload_gen_create(w, 7, &g2, err), err);
  CHECK_OK(scps__workload_gen_create(w, 8, &g3, err), err);
  if (!g1 || !g2 || !g3) return;

  /* Before the first batch every feature is empty. */
  const scps_feature_input *in = scps__workload_gen_inputs(g1);
  for (int f = 0; f < w->n_features; f++) {
    CHECK(in[f].form == SCPS_INPUT_RAGGED && in[f].n_ids == 0);
    CHECK(in[f].row_offsets[0] == 0 && in[f].row_offsets[w->batch_size] == 0);
  }

  int64_t length_seen[6][21] = {{0}};
  double weight_sum = 0;
  size_t weight_n = 0;
  for (int b = 0; b < 4; b++) {
    scps__workload_gen_next(g1);
    scps__workload_gen_next(g2);
    scps__workload_gen_next(g3);
    const scps_feature_input *a = scps__workload_gen_inputs(g1);
    CHECKF(same_batch(a, scps__workload_gen_inputs(g2), w->n_features, w->batch_size),
           "batch %d differs between equal seeds", b);
    CHECKF(!same_batch(a, scps__workload_gen_inputs(g3), w->n_features, w->batch_size),
           "batch %d equal for different seeds", b);
    for (int f = 0; f < w->n_features; f++) {
      const scps_feature_input *x = &a[f];
      const scps_feature_draw *d = &w->draws[f];
      int64_t vocab = w->tables[scps__find_table(w->tables, w->n_tables, w->features[f].table)]
                          .vocabulary_size;
      CHECK(x->form == SCPS_INPUT_RAGGED && x->row_lengths == NULL);
      CHECK(x->row_offsets[0] == 0 && (size_t)x->row_offsets[w->batch_size] == x->n_ids);
      int bad_len = 0, bad_id = 0, bad_weight = 0;
      for (int s = 0; s < w->batch_size; s++) {
        int64_t len = x->row_offsets[s + 1] - x->row_offsets[s];
        if (len < d->valency_min || len > d->valency_max) bad_len++;
        else length_seen[f][len]++;
      }
      for (size_t i = 0; i < x->n_ids; i++) {
        if (x->ids[i] < 0 || x->ids[i] >= vocab) bad_id++;
        if (x->weights) {
          if (!(x->weights[i] > 0.0f && x->weights[i] <= 1.0f)) bad_weight++;
          weight_sum += x->weights[i];
          weight_n++;
        }
      }
      CHECKF(bad_len == 0, "feature %s: %d lengths outside [%d, %d]", w->features[f].name, bad_len,
             d->valency_min, d->valency_max);
      CHECKF(bad_id == 0, "feature %s: %d ids outside [0, %lld)", w->features[f].name, bad_id,
             (long long)vocab);
      CHECKF(bad_weight == 0, "feature %s: %d weights outside (0, 1]", w->features[f].name,
             bad_weight);
      CHECK((x->weights != NULL) == d->weighted);
    }
  }
  /* Every length in each ragged range shows up in 4 x 512 samples (missing
   * one has probability below 1e-80), and fixed valencies are exact. */
  for (int f = 0; f < w->n_features; f++)
    for (int len = w->draws[f].valency_min; len <= w->draws[f].valency_max; len++)
      CHECKF(length_seen[f][len] > 0, "feature %s never has length %d", w->features[f].name, len);
  /* Weights are uniform on (0, 1]: mean 1/2 within 6 standard deviations. */
  double sd = sqrt(1.0 / 12.0 / (double)weight_n);
  CHECKF(weight_n > 0 && fabs(weight_sum / (double)weight_n - 0.5) < 6 * sd, "weight mean %g",
         weight_sum / (double)weight_n);

  /* Features drawing from one table still get their own streams. */
  const scps_feature_input *a = scps__workload_gen_inputs(g1);
  CHECK(a[4].n_ids != a[5].n_ids || memcmp(a[4].ids, a[5].ids, a[4].n_ids * sizeof(int64_t)));

  /* A changed workload seed changes the batches too. */
  scps_workload_gen *g4 = NULL;
  w->seed += 1;
  CHECK_OK(scps__workload_gen_create(w, 7, &g4, err), err);
  /* The generator keeps no reference to the workload. */
  scps__workload_destroy(w);
  if (g4) {
    scps_workload_gen *g5 = NULL;
    scps_workload *w2 = load_shared("shared-tables");
    CHECK_OK(scps__workload_gen_create(w2, 7, &g5, err), err);
    scps__workload_gen_next(g4);
    scps__workload_gen_next(g5);
    CHECK(!same_batch(scps__workload_gen_inputs(g4), scps__workload_gen_inputs(g5), w2->n_features,
                      w2->batch_size));
    scps__workload_gen_destroy(g5);
    scps__workload_destroy(w2);
  }
  scps__workload_gen_destroy(g1);
  scps__workload_gen_destroy(g2);
  scps__workload_gen_destroy(g3);
  scps__workload_gen_destroy(g4);
}

/* zeta(s) = sum 1/n^s by direct summation to N plus the Euler-Maclaurin
 * tail, accurate to ~1e-15 for s > 1; written here independently of the
 * sampler. Hurwitz form: sum over k >= 0 of (k + q)^-s. */
static double hurwitz_zeta(double s, double q) {
  const int n = 100000;
  double sum = 0;
  for (int k = n - 1; k >= 0; k--) sum += pow(k + q, -s);
  double x = n + q;
  sum += pow(x, 1 - s) / (s - 1) + 0.5 * pow(x, -s) + s / 12.0 * pow(x, -s - 1);
  return sum;
}

/* Draws total ids of the single feature, counts each id in [0, track) and
 * how many fall outside. */
static void draw_counts(scps_workload *w, int64_t track, int64_t *counts, int64_t *beyond,
                        size_t total) {
  scps_error err_, *err = &err_;
  scps_workload_gen *g = NULL;
  CHECK_OK(scps__workload_gen_create(w, 3, &g, err), err);
  if (!g) return;
  size_t drawn = 0;
  while (drawn < total) {
    scps__workload_gen_next(g);
    const scps_feature_input *in = scps__workload_gen_inputs(g);
    for (size_t i = 0; i < in[0].n_ids; i++) {
      int64_t id = in[0].ids[i];
      if (id >= 0 && id < track) counts[id]++;
      else (*beyond)++;
    }
    drawn += in[0].n_ids;
  }
  scps__workload_gen_destroy(g);
}

/* |observed - p| within 6 binomial standard deviations. */
static bool near(int64_t count, size_t n, double p) {
  double sd = sqrt(p * (1 - p) / (double)n);
  return fabs((double)count / (double)n - p) <= 6 * sd + 1e-12;
}

static void test_zipf_shape(void) {
  /* A vocabulary of 2^31 is far beyond what these samples reach, so folding
   * is invisible and P(id = k) = (k + 1)^-s / zeta(s). s = 1.05 puts ~17% of
   * the mass beyond X = 2^50, exercising the sampler's far tail. */
  const double exponents[] = {1.05, 1.1, 1.5};
  for (int e = 0; e < 3; e++) {
    double s = exponents[e];
    scps_workload *w = single("zipf", s, 1LL << 31, 65536, "8", false);
    if (!w) continue;
    int64_t counts[1000] = {0}, beyond = 0;
    size_t n = 4 * 65536 * 8;
    draw_counts(w, 1000, counts, &beyond, n);
    double zeta = hurwitz_zeta(s, 1.0);
    double head = 0;
    for (int k = 1; k <= 1000; k++) head += pow(k, -s) / zeta;
    CHECKF(near(counts[0], n, 1 / zeta), "s %g: P(0) %g, expected %g", s, counts[0] / (double)n,
           1 / zeta);
    CHECKF(near(counts[1], n, pow(2, -s) / zeta), "s %g: P(1) %g, expected %g", s,
           counts[1] / (double)n, pow(2, -s) / zeta);
    CHECKF(near(counts[9], n, pow(10, -s) / zeta), "s %g: P(9) %g, expected %g", s,
           counts[9] / (double)n, pow(10, -s) / zeta);
    CHECKF(near(beyond, n, 1 - head), "s %g: P(id >= 1000) %g, expected %g", s,
           beyond / (double)n, 1 - head);
    /* count(0) / count(1) = 2^s, within 6 standard deviations of the ratio. */
    double ratio = (double)counts[0] / (double)counts[1];
    double rsd = pow(2, s) * sqrt(1.0 / (double)counts[0] + 1.0 / (double)counts[1]);
    CHECKF(fabs(ratio - pow(2, s)) < 6 * rsd, "s %g: count(0)/count(1) %g, expected %g", s, ratio,
           pow(2, s));
    scps__workload_destroy(w);
  }
}

static void test_zipf_folding(void) {
  /* Small vocabularies: id r collects X = r + 1, r + 1 + V, ... so
   * P(id = r) = V^-s zeta(s, (r + 1) / V) / zeta(s). */
  const struct {
    double s;
    int vocab;
  } cases[] = {{2.0, 3}, {1.05, 1000}, {1.3, 7}};
  for (int c = 0; c < 3; c++) {
    double s = cases[c].s;
    int vocab = cases[c].vocab;
    scps_workload *w = single("zipf", s, vocab, 65536, "4", false);
    if (!w) continue;
    int64_t *counts = calloc((size_t)vocab, sizeof *counts), beyond = 0;
    size_t n = 8 * 65536 * 4;
    draw_counts(w, vocab, counts, &beyond, n);
    CHECK(beyond == 0);
    double zeta = hurwitz_zeta(s, 1.0);
    int probes[3] = {0, vocab / 2, vocab - 1};
    for (int k = 0; k < 3; k++) {
      int r = probes[k];
      double p = pow(vocab, -s) * hurwitz_zeta(s, (r + 1.0) / vocab) / zeta;
      CHECKF(near(counts[r], n, p), "s %g vocab %d: P(%d) %g, expected %g", s, vocab, r,
             counts[r] / (double)n, p);
    }
    free(counts);
    scps__workload_destroy(w);
  }
}

static void test_uniform(void) {
  scps_workload *w = single("uniform", 0, 10, 100000, "[1, 3]", true);
  if (!w) return;
  int64_t counts[10] = {0}, beyond = 0;
  size_t n = 0;
  scps_error err_, *err = &err_;
  scps_workload_gen *g = NULL;
  CHECK_OK(scps__workload_gen_create(w, 1, &g, err), err);
  if (g) {
    scps__workload_gen_next(g);
    const scps_feature_input *in = scps__workload_gen_inputs(g);
    n = in[0].n_ids;
    for (size_t i = 0; i < n; i++) {
      if (in[0].ids[i] >= 0 && in[0].ids[i] < 10) counts[in[0].ids[i]]++;
      else beyond++;
    }
    CHECK(in[0].weights != NULL);
    /* Mean length 2 over 100000 samples (sd of one length is sqrt(2/3)). */
    double mean_len = (double)n / 100000.0;
    CHECKF(fabs(mean_len - 2.0) < 6 * sqrt(2.0 / 3.0 / 100000.0), "mean length %g", mean_len);
    scps__workload_gen_destroy(g);
  }
  CHECK(beyond == 0);
  for (int k = 0; k < 10; k++)
    CHECKF(near(counts[k], n, 0.1), "uniform: P(%d) %g", k, counts[k] / (double)n);
  scps__workload_destroy(w);
}

static void test_generator_limits(void) {
  /* 2^16 samples of up to 2^16 ids is beyond SCPS_WORKLOAD_BATCH_IDS_MAX. */
  scps_workload *w = single("uniform", 0, 100, 1 << 16, "[0, 65536]", false);
  if (!w) return;
  scps_error err_, *err = &err_;
  scps_workload_gen *g = (scps_workload_gen *)&g;
  CHECK(scps__workload_gen_create(w, 0, &g, err) == SCPS_EINVAL);
  CHECK(g == NULL && strstr(err->msg, "ids"));
  scps__workload_destroy(w);
}

/* Not a pass/fail check (machines and sanitizers differ): reports the rate
 * benchmarks can expect when generating dlrm8 batches. */
static void report_throughput(void) {
  scps_workload *w = load_shared("dlrm8");
  if (!w) return;
  scps_error err_, *err = &err_;
  scps_workload_gen *g = NULL;
  CHECK_OK(scps__workload_gen_create(w, 0, &g, err), err);
  if (g) {
    struct timespec t0, t1;
    size_t ids = 0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int b = 0; b < 10; b++) {
      scps__workload_gen_next(g);
      for (int f = 0; f < w->n_features; f++) ids += scps__workload_gen_inputs(g)[f].n_ids;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double dt = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    printf("dlrm8 generation: %.1f M ids/s\n", (double)ids / dt / 1e6);
    CHECK(ids == 10u * 8u * 4096u * 4u);
    scps__workload_gen_destroy(g);
  }
  scps__workload_destroy(w);
}

/* ---- writing specs back ---- */

/* Every optimizer with every hyper-parameter moved off its default to a value
 * that needs all 17 digits, every initializer, clip, explicit stacks, limits,
 * seeds up to 2^53 and names that need escaping: written, parsed back, equal. */
static void test_write_specs_round_trip(void) {
  static const scps_optimizer_type types[] = {SCPS_OPT_SGD,  SCPS_OPT_ADAGRAD, SCPS_OPT_ADAGRAD_MOMENTUM,
                                              SCPS_OPT_ADAM, SCPS_OPT_FTRL,    SCPS_OPT_LAPROP,
                                              SCPS_OPT_F2A};
  enum { NT = 7 };
  scps_table_spec t[NT];
  scps_feature_spec f[NT + 1];
  for (int i = 0; i < NT; i++) {
    scps__table_spec_init(&t[i]);
    snprintf(t[i].name, sizeof t[i].name, i == 2 ? "t\"%d\\x\x01" : "t%d", i);
    t[i].vocabulary_size = 1000 + 37 * i;
    t[i].embedding_dim = 3 + i;
    t[i].combiner = (scps_combiner)(i % 3);
    t[i].max_ids_per_partition = 100 + i;
    t[i].max_unique_ids_per_partition = 50 + i;
    scps_optimizer_spec *o = &t[i].optimizer;
    scps__optimizer_spec_init(o, types[i]);
    o->learning_rate = 0.1 / 3;
    switch (types[i]) {
    case SCPS_OPT_SGD: break;
    case SCPS_OPT_ADAGRAD: o->initial_accumulator = 0.2 / 3; break;
    case SCPS_OPT_ADAGRAD_MOMENTUM:
      o->initial_accumulator = 0.2 / 7;
      o->momentum = 2.0 / 3;
      o->beta2 = 0.999 / 1.0001;
      o->epsilon = 1e-7 / 3;
      o->exponent = 2.0 + 1.0 / 3;
      o->use_nesterov = !o->use_nesterov;
      break;
    case SCPS_OPT_ADAM:
    case SCPS_OPT_LAPROP:
      o->beta1 = 0.9 / 1.01;
      o->beta2 = 0.999 / 1.0001;
      o->epsilon = 1e-8 / 3;
      break;
    case SCPS_OPT_FTRL:
      o->initial_accumulator = 0.1 / 7;
      o->learning_rate_power = -0.5 / 1.1;
      o->l1 = 1e-3 / 7;
      o->l2 = 1e-4 / 9;
      o->beta = 0.1 / 3;
      o->multiply_linear_by_learning_rate = !o->multiply_linear_by_learning_rate;
      o->initial_linear = 0.01 / 3;
      break;
    case SCPS_OPT_F2A:
      o->initial_accumulator = 0.1 / 9;
      o->l1 = 1e-3 / 11;
      o->l2 = 1e-4 / 13;
      o->rho = 0.1 / 3;
      o->max_lr_multiplier = 10.0 / 3;
      break;
    }
    scps_initializer_spec *in = &t[i].initializer;
    in->type = (scps_initializer_type)(i % 5);
    in->value = in->type == SCPS_INIT_CONSTANT ? -1.0 / 3 : 0;
    in->scale = in->type == SCPS_INIT_UNIFORM ? 0.05 / 3 : 0;
    in->stddev = in->type == SCPS_INIT_NORMAL || in->type == SCPS_INIT_TRUNCATED_NORMAL ? 0.02 / 3 : 0;
    in->seed = i == 3 ? (uint64_t)1 << 53 : (uint64_t)i * 12345;
    if (i % 2) {
      t[i].clip = true;
      t[i].clip_min = -0.1f / 3;
      t[i].clip_max = 0.7f / 3;
    }
    if (i >= 5) snprintf(t[i].stack, sizeof t[i].stack, "explicit \"stack\"");
  }
  for (int i = 0; i <= NT; i++) {
    int ti = i % NT;
    scps__feature_spec_init(&f[i]);
    snprintf(f[i].name, sizeof f[i].name, "f%d", i);
    snprintf(f[i].table, sizeof f[i].table, "%s", t[ti].name);
    f[i].batch_size = 17;
    f[i].valency = i % 3;
    f[i].output_dim = t[ti].embedding_dim;
  }
  scps_error err_, *err = &err_;
  CHECK_OK(scps__specs_validate(t, NT, f, NT + 1, err), err);

  scps_jsonw w;
  scps__jsonw_init(&w);
  CHECK_OK(scps__workload_write_specs(t, NT, f, NT + 1, &w, err), err);
  scps_workload *back = NULL;
  if (!w.failed) CHECK_OK(scps__workload_parse(w.buf, w.len, &back, err), err);
  if (back) {
    scps_topology topo = {1, 1, 1 << 20};
    char msg[512] = "";
    int diff = scps__specs_diff(&topo, t, NT, f, NT + 1, &topo, back->tables, back->n_tables,
                               back->features, back->n_features, "written", "read", msg, sizeof msg);
    CHECKF(diff == 0, "%s\n%s", msg, w.buf);
    for (int i = 0; i < NT && i < back->n_tables; i++)
      CHECKF(!memcmp(&t[i].optimizer, &back->tables[i].optimizer, sizeof t[i].optimizer),
             "table %d optimizer not bitwise equal", i);
    scps__workload_destroy(back);
  }
  scps__jsonw_free(&w);

  /* What the format cannot carry is refused, naming it. */
  f[3].batch_size = 18;
  scps__jsonw_init(&w);
  CHECK(scps__workload_write_specs(t, NT, f, NT + 1, &w, err) == SCPS_EINVAL);
  CHECKF(strstr(err->msg, "'f3'") && strstr(err->msg, "batch_size"), "%s", err->msg);
  scps__jsonw_free(&w);
  f[3].batch_size = 17;
  f[4].output_dim = 1;
  scps__jsonw_init(&w);
  CHECK(scps__workload_write_specs(t, NT, f, NT + 1, &w, err) == SCPS_EINVAL);
  CHECKF(strstr(err->msg, "'f4'") && strstr(err->msg, "output_dim"), "%s", err->msg);
  scps__jsonw_free(&w);
  f[4].output_dim = t[4].embedding_dim;
  t[1].initializer.seed = ((uint64_t)1 << 53) + 1;
  scps__jsonw_init(&w);
  CHECK(scps__workload_write_specs(t, NT, f, NT + 1, &w, err) == SCPS_EINVAL);
  CHECKF(strstr(err->msg, "'t1'") && strstr(err->msg, "seed"), "%s", err->msg);
  scps__jsonw_free(&w);
}

/* The shared files' specs survive a write and a parse unchanged. */
static void test_write_specs_shared_files(void) {
  static const char *const names[] = {"dlrm8", "criteo26", "shared-tables", "serving-small-batch"};
  for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
    scps_workload *w = load_shared(names[k]), *back = NULL;
    if (!w) continue;
    scps_error err_, *err = &err_;
    scps_jsonw out;
    scps__jsonw_init(&out);
    CHECK_OK(scps__workload_write_specs(w->tables, w->n_tables, w->features, w->n_features, &out, err), err);
    if (!out.failed) CHECK_OK(scps__workload_parse(out.buf, out.len, &back, err), err);
    if (back) {
      scps_topology topo = {1, 1, 1 << 20};
      char msg[512] = "";
      CHECKF(!scps__specs_diff(&topo, w->tables, w->n_tables, w->features, w->n_features, &topo,
                              back->tables, back->n_tables, back->features, back->n_features,
                              "file", "written", msg, sizeof msg),
             "%s: %s", names[k], msg);
    }
    scps__workload_destroy(back);
    scps__workload_destroy(w);
    scps__jsonw_free(&out);
  }
}

/* The first-use config of issue 27: one table, valency 20, batch 1024, no
 * limits. Its defaults are sized from the declaration, so on 4 SparseCores
 * the worst batch it admits (every sample's ids on one destination, all
 * from source 0's samples: 256 x 20 = 5120 ids) passes policy ERROR; an
 * explicit limit is kept as given. */
static void test_limits_sized_from_declaration(void) {
  static const char *base =
      "{\"batch_size\": 1024, \"ids\": {\"distribution\": \"uniform\"},\n"
      " \"tables\": [{\"name\": \"t\", \"vocabulary_size\": 1000000, \"embedding_dim\": 16,\n"
      "   \"combiner\": \"sum\", \"optimizer\": {\"type\": \"sgd\", \"learning_rate\": 0.1},\n"
      "   \"initializer\": {\"type\": \"zeros\"}%s}],\n"
      " \"features\": [{\"name\": \"f\", \"table\": \"t\", \"valency\": 20}]}";
  char text[1024];
  snprintf(text, sizeof text, base, "");
  scps_workload *w = parse_text(text);
  if (!w) return;
  CHECKF(w->tables[0].max_ids_per_partition == 1024 * 20 && w->tables[0].max_unique_ids_per_partition == 1024 * 20,
         "limits (%d, %d)", w->tables[0].max_ids_per_partition, w->tables[0].max_unique_ids_per_partition);
  scps_error err;
  scps_layout *l = NULL;
  scps_prep *p = NULL;
  const scps_topology topo = {1, 4, (int64_t)1 << 30};
  CHECK_OK(scps__layout_create(w->tables, w->n_tables, w->features, w->n_features, &topo, NULL, &l, &err), &err);
  if (l) CHECK_OK(scps__prep_create(l, NULL, &p, &err), &err);
  if (p) {
    /* Samples 0..255 are source 0's; ids 4k all live on SparseCore 0. */
    int64_t *ids = calloc(1024 * 20, sizeof *ids);
    for (int64_t i = 0; ids && i < 1024 * 20; i++) ids[i] = i < 256 * 20 ? 4 * i : 4 * i + 1;
    scps_feature_input in = {.form = SCPS_INPUT_DENSE, .n_ids = 1024 * 20, .ids = ids, .valency = 20,
                             .batch_size = 1024};
    if (ids) CHECK_OK(scps__prep_run(p, &in, &err), &err);
    CHECK(scps__prep_stats(p, 0)->max_ids_per_partition[0] == 5120);
    free(ids);
  }
  scps__prep_destroy(p);
  scps__layout_destroy(l);
  scps__workload_destroy(w);

  /* Ragged features count the top of their range; a small vocabulary caps
   * unique ids, never below 256; explicit limits stay. */
  snprintf(text, sizeof text, base, ", \"max_unique_ids_per_partition\": 300");
  if ((w = parse_text(text))) {
    CHECK(w->tables[0].max_ids_per_partition == 20480 && w->tables[0].max_unique_ids_per_partition == 300);
    scps__workload_destroy(w);
  }
  static const char *small =
      "{\"batch_size\": 64, \"tables\": [{\"name\": \"t\", \"vocabulary_size\": 1000, \"embedding_dim\": 8,\n"
      "   \"combiner\": \"sum\", \"optimizer\": {\"type\": \"sgd\", \"learning_rate\": 0.1},\n"
      "   \"initializer\": {\"type\": \"zeros\"}}, {\"name\": \"u\", \"vocabulary_size\": 10, \"embedding_dim\": 8,\n"
      "   \"combiner\": \"sum\", \"optimizer\": {\"type\": \"sgd\", \"learning_rate\": 0.1},\n"
      "   \"initializer\": {\"type\": \"zeros\"}}],\n"
      " \"features\": [{\"name\": \"f\", \"table\": \"t\", \"valency\": [0, 30]},\n"
      "              {\"name\": \"g\", \"table\": \"t\", \"valency\": 2},\n"
      "              {\"name\": \"h\", \"table\": \"u\", \"valency\": 1}]}";
  if ((w = parse_text(small))) {
    CHECKF(w->tables[0].max_ids_per_partition == 64 * 32 && w->tables[0].max_unique_ids_per_partition == 1000,
           "t: (%d, %d)", w->tables[0].max_ids_per_partition, w->tables[0].max_unique_ids_per_partition);
    CHECKF(w->tables[1].max_ids_per_partition == 256 && w->tables[1].max_unique_ids_per_partition == 256,
           "u: (%d, %d)", w->tables[1].max_ids_per_partition, w->tables[1].max_unique_ids_per_partition);
    scps__workload_destroy(w);
  }
}

/* A config without "ids" (what scps-server --config needs) parses; the
 * batch generator then refuses it, saying what is missing. */
static void test_ids_section_optional(void) {
  static const char *text =
      "{\"batch_size\": 8, \"tables\": [{\"name\": \"t\", \"vocabulary_size\": 100, \"embedding_dim\": 8,\n"
      "   \"combiner\": \"sum\", \"optimizer\": {\"type\": \"sgd\", \"learning_rate\": 0.1},\n"
      "   \"initializer\": {\"type\": \"zeros\"}}],\n"
      " \"features\": [{\"name\": \"f\", \"table\": \"t\", \"valency\": 1}]}";
  scps_workload *w = parse_text(text);
  if (!w) return;
  CHECK(!w->has_ids && w->n_tables == 1 && w->n_features == 1);
  scps_error err;
  scps_workload_gen *g = NULL;
  CHECK(scps__workload_gen_create(w, 1, &g, &err) == SCPS_EINVAL && g == NULL);
  CHECKF(strstr(err.msg, "no \"ids\" section") != NULL, "%s", err.msg);
  scps__workload_destroy(w);
}

int main(void) {
  test_dlrm8_and_serving();
  test_criteo26();
  test_shared_tables();
  test_files_match_dom();
  test_rejections();
  test_accepted_variants();
  test_determinism_and_ranges();
  test_zipf_shape();
  test_zipf_folding();
  test_uniform();
  test_generator_limits();
  test_write_specs_round_trip();
  test_write_specs_shared_files();
  test_limits_sized_from_declaration();
  test_ids_section_optional();
  report_throughput();
  return scps_test_finish("test_workload");
}
