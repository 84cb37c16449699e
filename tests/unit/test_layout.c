/* Stacking, padding, sharding and the spec validation errors. Expected values
 * are derived here from the rules in sparsecore-semantics.md section 5. */
#include <stdio.h>
#include <string.h>

#include "scps_layout.h"
#include "scps_sha256.h"
#include "scps_test.h"

static scps_table_spec table(const char *name, int64_t vocab, int32_t dim, scps_optimizer_type opt) {
  scps_table_spec t;
  scps__table_spec_init(&t);
  snprintf(t.name, sizeof t.name, "%s", name);
  t.vocabulary_size = vocab;
  t.embedding_dim = dim;
  scps__optimizer_spec_init(&t.optimizer, opt);
  return t;
}

static scps_feature_spec feature(const char *name, const char *tab, int32_t batch) {
  scps_feature_spec f;
  scps__feature_spec_init(&f);
  snprintf(f.name, sizeof f.name, "%s", name);
  snprintf(f.table, sizeof f.table, "%s", tab);
  f.batch_size = batch;
  f.valency = 4;
  return f;
}

/* dlrm8-like: 8 tables 1M x 64 adagrad, batch 4096. */
static void test_dlrm8_stacking(void) {
  scps_table_spec t[8];
  scps_feature_spec f[8];
  char n[16], fn[16];
  for (int i = 0; i < 8; i++) {
    snprintf(n, sizeof n, "t%d", i);
    snprintf(fn, sizeof fn, "f%d", i);
    t[i] = table(n, 1000000, 64, SCPS_OPT_ADAGRAD);
    f[i] = feature(fn, n, 4096);
  }
  scps_error err;
  scps_layout *l;
  /* 1x1: 64 * 4096 * 4 = 1 MiB per table, so two per 2 MiB stack. */
  CHECK_OK(scps__layout_create(t, 8, f, 8, &(scps_topology){1, 1, 1 << 30}, NULL, &l, &err), &err);
  if (!l) return;
  CHECK(l->n_stacks == 4);
  CHECK(!strcmp(l->stacks[0].name, "t0_t1"));
  CHECK(!strcmp(l->stacks[3].name, "t6_t7"));
  CHECK(l->stacks[0].dim == 64);
  CHECK(l->stacks[0].vocab == 2000000);
  CHECK(l->tables[1].row_offset_in_shard == 1000000);
  CHECK(l->stacks[1].total_sample_count == 8192);
  CHECK(l->features[3].sample_offset == 4096 && l->features[3].stack == 1);
  CHECK(l->stacks[0].max_ids_per_partition == 512);
  scps__layout_destroy(l);

  /* 3x2: N = 6, vocab padded to a multiple of 48, 683 samples per SC: one stack. */
  CHECK_OK(scps__layout_create(t, 8, f, 8, &(scps_topology){3, 2, 1 << 30}, NULL, &l, &err), &err);
  if (!l) return;
  CHECK(l->num_sc == 6);
  CHECK(l->n_stacks == 1);
  CHECK(!strcmp(l->stacks[0].name, "t0_t1_t2_t3_t4_t5_t6_t7"));
  CHECK(l->tables[0].padded_vocab == 1000032);
  CHECK(l->stacks[0].rows_per_sc == 8 * 1000032 / 6);
  for (int i = 0; i < 8; i++) {
    CHECKF(l->tables[i].shard_rotation == (2 * i) % 6, "table %d rotation %d", i,
           l->tables[i].shard_rotation);
    CHECK(l->tables[i].row_offset_in_shard == (int64_t)i * 1000032 / 6);
  }
  /* Id 7 of t1 (rotation 2): SC (7 % 6 + 2) % 6 = 3, row 7 / 6 + offset. */
  CHECK(scps__layout_sc_of(l, 1, 7) == 3);
  CHECK(scps__layout_local_row(l, 1, 7) == 1 + 1000032 / 6);
  CHECK(scps__layout_process_of_sc(l, 3) == 1);
  scps__layout_destroy(l);
}

static void test_mapping_bijective(void) {
  scps_table_spec t[3] = {table("a", 37, 5, SCPS_OPT_SGD), table("b", 100, 8, SCPS_OPT_SGD),
                          table("c", 9, 3, SCPS_OPT_SGD)};
  scps_feature_spec f[2] = {feature("fa", "a", 16), feature("fb", "b", 16)};
  int topologies[][2] = {{1, 1}, {1, 4}, {3, 2}, {2, 4}};
  for (size_t k = 0; k < sizeof topologies / sizeof topologies[0]; k++) {
    scps_error err;
    scps_layout *l;
    CHECK_OK(scps__layout_create(t, 3, f, 2, &(scps_topology){topologies[k][0], topologies[k][1], 1 << 20},
                                NULL, &l, &err), &err);
    if (!l) continue;
    CHECK(l->n_stacks == 1);
    const scps_stack_layout *st = &l->stacks[0];
    CHECK(st->dim == 8);
    CHECK(st->rows_per_sc % 8 == 0);
    static char seen[64][1024];
    memset(seen, 0, sizeof seen);
    int bad = 0;
    for (int tb = 0; tb < 3; tb++)
      for (int64_t id = 0; id < t[tb].vocabulary_size; id++) {
        int32_t sc = scps__layout_sc_of(l, tb, id);
        int64_t row = scps__layout_local_row(l, tb, id);
        if (sc < 0 || sc >= l->num_sc || row < 0 || row >= st->rows_per_sc || seen[sc][row]) {
          bad++;
          continue;
        }
        seen[sc][row] = 1;
        int t2;
        int64_t id2;
        if (scps__layout_row_to_id(l, 0, sc, row, &t2, &id2) != 0 || t2 != tb || id2 != id) bad++;
      }
    CHECKF(bad == 0, "topology %dx%d: %d ids map wrongly", topologies[k][0], topologies[k][1], bad);
    /* Rows not claimed by an id are padding. */
    int pad_ok = 1;
    for (int32_t sc = 0; sc < l->num_sc; sc++)
      for (int64_t row = 0; row < st->rows_per_sc; row++) {
        int t2;
        int64_t id2;
        if (!seen[sc][row] && scps__layout_row_to_id(l, 0, sc, row, &t2, &id2) != SCPS_ERANGE) pad_ok = 0;
      }
    CHECK(pad_ok);
    scps__layout_destroy(l);
  }
}

static void test_grouping_and_names(void) {
  /* 26 tables in two widths: automatic stacks split by padded dim, long names hashed. */
  scps_table_spec t[26];
  scps_feature_spec f[26];
  char n[16];
  for (int i = 0; i < 26; i++) {
    snprintf(n, sizeof n, "category%02d", i);
    t[i] = table(n, 1000 + i, i % 2 ? 16 : 64, SCPS_OPT_ADAGRAD);
    f[i] = feature(n, n, 64);
  }
  scps_error err;
  scps_layout *l;
  CHECK_OK(scps__layout_create(t, 26, f, 26, &(scps_topology){1, 2, 1 << 30}, NULL, &l, &err), &err);
  if (!l) return;
  CHECK(l->n_stacks == 2);
  for (int s = 0; s < l->n_stacks; s++) {
    const scps_stack_layout *st = &l->stacks[s];
    CHECK(st->n_tables == 13);
    char full[1024] = "";
    for (int i = 0; i < st->n_tables; i++) {
      if (i) strcat(full, "_");
      strcat(full, l->table_specs[st->tables[i]].name);
    }
    uint8_t d[32];
    char hex[13], expect[128];
    scps__sha256(full, strlen(full), d);
    scps__sha256_hex(d, 12, hex);
    snprintf(expect, sizeof expect, "%.50s...%s", full, hex);
    CHECKF(!strcmp(st->name, expect), "name %s, expected %s", st->name, expect);
    CHECK(strlen(st->name) == 65);
  }
  scps__layout_destroy(l);

  /* A different optimizer separates tables; an explicit stack joins widths. */
  scps_table_spec u[3] = {table("x", 10, 4, SCPS_OPT_SGD), table("y", 10, 12, SCPS_OPT_SGD),
                          table("z", 10, 4, SCPS_OPT_ADAM)};
  CHECK_OK(scps__layout_create(u, 3, NULL, 0, &(scps_topology){1, 1, 1 << 20}, NULL, &l, &err), &err);
  if (l) {
    CHECK(l->n_stacks == 3);
    scps__layout_destroy(l);
  }
  snprintf(u[0].stack, sizeof u[0].stack, "xy");
  snprintf(u[1].stack, sizeof u[1].stack, "xy");
  CHECK_OK(scps__layout_create(u, 3, NULL, 0, &(scps_topology){1, 1, 1 << 20}, NULL, &l, &err), &err);
  if (l) {
    int s = scps__layout_find_stack(l, "xy");
    CHECK(s >= 0 && l->stacks[s].dim == 16 && l->stacks[s].n_tables == 2);
    CHECK(l->tables[1].row_offset_in_shard == 16); /* x: 10 rows padded to 16 on 1 SC */
    scps__layout_destroy(l);
  }
  snprintf(u[2].stack, sizeof u[2].stack, "xy");
  CHECK(scps__layout_create(u, 3, NULL, 0, &(scps_topology){1, 1, 1 << 20}, NULL, &l, &err) ==
        SCPS_EINVAL);
  CHECKF(strstr(err.msg, "'z'") != NULL, "%s", err.msg);
}

static void expect_error(scps_table_spec *t, int nt, scps_feature_spec *f, int nf, int code,
                         const char *needle) {
  scps_error err;
  scps_layout *l = NULL;
  int rc = scps__layout_create(t, nt, f, nf, &(scps_topology){1, 1, 1 << 20}, NULL, &l, &err);
  CHECKF(rc == code, "expected %d (%s), got %d: %s", code, needle, rc, err.msg);
  CHECKF(rc == 0 || strstr(err.msg, needle), "message '%s' lacks '%s'", err.msg, needle);
  CHECK(rc != 0 || l != NULL);
  scps__layout_destroy(l);
}

static void test_spec_errors(void) {
  scps_table_spec t[2] = {table("a", 10, 4, SCPS_OPT_SGD), table("b", 10, 4, SCPS_OPT_SGD)};
  scps_feature_spec f[2] = {feature("fa", "a", 8), feature("fb", "b", 8)};
  expect_error(t, 2, f, 2, 0, "");
  snprintf(t[1].name, sizeof t[1].name, "a");
  expect_error(t, 2, f, 1, SCPS_EEXIST, "'a'");
  snprintf(t[1].name, sizeof t[1].name, "b");
  t[1].embedding_dim = 0;
  expect_error(t, 2, f, 2, SCPS_EINVAL, "embedding_dim 0");
  t[1].embedding_dim = 4;
  t[0].vocabulary_size = 0;
  expect_error(t, 2, f, 2, SCPS_EINVAL, "vocabulary_size 0");
  t[0].vocabulary_size = 10;
  t[0].optimizer.type = (scps_optimizer_type)42;
  expect_error(t, 2, f, 2, SCPS_EINVAL, "unknown optimizer type 42");
  t[0].optimizer.type = SCPS_OPT_SGD;
  t[1].combiner = (scps_combiner)7;
  expect_error(t, 2, f, 2, SCPS_EINVAL, "unknown combiner 7");
  t[1].combiner = SCPS_COMBINER_SUM;
  snprintf(f[1].name, sizeof f[1].name, "fa");
  expect_error(t, 2, f, 2, SCPS_EEXIST, "feature 'fa'");
  snprintf(f[1].name, sizeof f[1].name, "fb");
  snprintf(f[1].table, sizeof f[1].table, "nope");
  expect_error(t, 2, f, 2, SCPS_ENOENT, "unknown table 'nope'");
  snprintf(f[1].table, sizeof f[1].table, "b");
  t[0].optimizer.learning_rate = 0.0 / 0.0;
  expect_error(t, 2, f, 2, SCPS_EINVAL, "learning_rate");
  t[0].optimizer.learning_rate = 0.1;
  scps_error err;
  scps_layout *l;
  CHECK(scps__layout_create(t, 2, f, 2, &(scps_topology){0, 1, 1 << 20}, NULL, &l, &err) == SCPS_EINVAL);
  CHECK(strstr(err.msg, "num_processes 0") != NULL);
}

static void test_specs_diff(void) {
  scps_table_spec t[2] = {table("a", 10, 4, SCPS_OPT_SGD), table("b", 10, 4, SCPS_OPT_ADAM)};
  scps_table_spec u[2] = {t[0], t[1]};
  scps_feature_spec f[1] = {feature("fa", "a", 8)}, g[1] = {f[0]};
  scps_topology x = {2, 2, 1 << 20}, y = x;
  char msg[256];
  CHECK(scps__specs_diff(&x, t, 2, f, 1, &y, u, 2, g, 1, "client", "server", msg, sizeof msg) == 0);
  u[1].embedding_dim = 8;
  CHECK(scps__specs_diff(&x, t, 2, f, 1, &y, u, 2, g, 1, "client", "server", msg, sizeof msg) == 1);
  CHECKF(!strcmp(msg, "table 'b' embedding_dim: client 4, server 8"), "%s", msg);
  u[1] = t[1];
  u[1].optimizer.beta2 = 0.5;
  CHECK(scps__specs_diff(&x, t, 2, f, 1, &y, u, 2, g, 1, "client", "server", msg, sizeof msg) == 1);
  CHECKF(!strcmp(msg, "table 'b' optimizer beta2: client 0.999, server 0.5"), "%s", msg);
  u[1] = t[1];
  y.sc_per_process = 4;
  CHECK(scps__specs_diff(&x, t, 2, f, 1, &y, u, 2, g, 1, "client", "server", msg, sizeof msg) == 1);
  CHECKF(!strcmp(msg, "topology sc_per_process: client 2, server 4"), "%s", msg);
  y = x;
  g[0].batch_size = 16;
  CHECK(scps__specs_diff(&x, t, 2, f, 1, &y, u, 2, g, 1, "client", "server", msg, sizeof msg) == 1);
  CHECKF(!strcmp(msg, "feature 'fa' batch_size: client 8, server 16"), "%s", msg);
  CHECK(scps__specs_diff(&x, t, 2, f, 1, &y, u, 1, g, 1, "a", "b", msg, sizeof msg) == 1);
  CHECKF(!strcmp(msg, "number of tables: a 2, b 1"), "%s", msg);
}

int main(void) {
  test_specs_diff();
  test_dlrm8_stacking();
  test_mapping_bijective();
  test_grouping_and_names();
  test_spec_errors();
  return scps_test_finish("test_layout");
}
