/* Spec structs <-> scps.v1 messages: round trips through packed bytes for
 * every optimizer, initializer and combiner; the defaults scps.proto
 * documents for unset fields; and rejection of values the wire can carry
 * but the structs cannot, with messages naming the field. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "scps_fingerprint.h"
#include "scps_spec_pb.h"
#include "scps_test.h"

/* ---- field-by-field comparison (every field, read by the type or not) ---- */

static int opt_equal(const scps_optimizer_spec *a, const scps_optimizer_spec *b) {
  return a->type == b->type && a->learning_rate == b->learning_rate &&
         a->initial_accumulator == b->initial_accumulator && a->momentum == b->momentum &&
         a->beta1 == b->beta1 && a->beta2 == b->beta2 && a->epsilon == b->epsilon &&
         a->exponent == b->exponent && a->use_nesterov == b->use_nesterov &&
         a->learning_rate_power == b->learning_rate_power && a->l1 == b->l1 && a->l2 == b->l2 &&
         a->beta == b->beta &&
         a->multiply_linear_by_learning_rate == b->multiply_linear_by_learning_rate &&
         a->initial_linear == b->initial_linear && a->rho == b->rho &&
         a->max_lr_multiplier == b->max_lr_multiplier;
}

static int table_equal(const scps_table_spec *a, const scps_table_spec *b) {
  return !strcmp(a->name, b->name) && a->vocabulary_size == b->vocabulary_size &&
         a->embedding_dim == b->embedding_dim && a->initializer.type == b->initializer.type &&
         a->initializer.value == b->initializer.value &&
         a->initializer.scale == b->initializer.scale &&
         a->initializer.stddev == b->initializer.stddev &&
         a->initializer.seed == b->initializer.seed && opt_equal(&a->optimizer, &b->optimizer) &&
         a->combiner == b->combiner && a->max_ids_per_partition == b->max_ids_per_partition &&
         a->max_unique_ids_per_partition == b->max_unique_ids_per_partition &&
         a->clip == b->clip && a->clip_min == b->clip_min && a->clip_max == b->clip_max &&
         !strcmp(a->stack, b->stack);
}

static int feature_equal(const scps_feature_spec *a, const scps_feature_spec *b) {
  return !strcmp(a->name, b->name) && !strcmp(a->table, b->table) &&
         a->batch_size == b->batch_size && a->valency == b->valency &&
         a->output_dim == b->output_dim;
}

/* ---- fixtures ---- */

static const scps_optimizer_type all_optimizers[] = {
    SCPS_OPT_SGD,  SCPS_OPT_ADAGRAD, SCPS_OPT_ADAM,  SCPS_OPT_FTRL,
    SCPS_OPT_F2A, SCPS_OPT_ADAGRAD_MOMENTUM, SCPS_OPT_LAPROP};
#define N_OPT (int)(sizeof all_optimizers / sizeof all_optimizers[0])

static const scps_initializer_type all_initializers[] = {
    SCPS_INIT_ZEROS, SCPS_INIT_CONSTANT, SCPS_INIT_UNIFORM, SCPS_INIT_NORMAL,
    SCPS_INIT_TRUNCATED_NORMAL};
#define N_INIT (int)(sizeof all_initializers / sizeof all_initializers[0])

static const scps_combiner all_combiners[] = {SCPS_COMBINER_SUM, SCPS_COMBINER_MEAN,
                                              SCPS_COMBINER_SQRTN};

/* Table i: optimizer, initializer and combiner cycle through every value;
 * every hyper-parameter is set away from its default, and the ones whose
 * default is not 0 are set to 0 on some tables so that "explicitly 0" must
 * survive the trip. Odd tables clip, every third names a stack. */
static void make_table(int i, scps_table_spec *t) {
  scps__table_spec_init(t);
  snprintf(t->name, sizeof t->name, "table_%d", i);
  t->vocabulary_size = 1000003 + (int64_t)i * 7919;
  t->embedding_dim = 8 + 5 * i;
  t->initializer.type = all_initializers[i % N_INIT];
  t->initializer.value = 0.25 + i;
  t->initializer.scale = 0.0625 * (i + 1);
  t->initializer.stddev = 0.01 * (i + 3);
  t->initializer.seed = 0x9e3779b97f4a7c15ull + (uint64_t)i;
  scps_optimizer_spec *o = &t->optimizer;
  scps__optimizer_spec_init(o, all_optimizers[i % N_OPT]);
  int zero = (i / N_OPT) % 2; /* second pass over the types: zeros */
  o->learning_rate = zero ? 0.0 : 0.0371 + i;
  o->initial_accumulator = zero ? 0.0 : 0.33;
  o->momentum = zero ? 0.0 : 0.77;
  o->beta1 = zero ? 0.0 : 0.81;
  o->beta2 = zero ? 0.0 : 0.9876;
  o->epsilon = zero ? 0.0 : 3e-7;
  o->exponent = zero ? 0.0 : 3.5;
  o->use_nesterov = !zero;
  o->learning_rate_power = zero ? 0.0 : -0.25;
  o->l1 = 0.001 * (i + 1);
  o->l2 = 0.002 * (i + 1);
  o->beta = 0.5 + i;
  o->multiply_linear_by_learning_rate = !zero;
  o->initial_linear = -0.125;
  o->rho = zero ? 0.0 : 0.75;
  o->max_lr_multiplier = zero ? 0.0 : 12345.0;
  t->combiner = all_combiners[i % 3];
  t->max_ids_per_partition = 64 + i;
  t->max_unique_ids_per_partition = 32 + i;
  t->clip = i % 2;
  t->clip_min = i % 2 ? -0.5f - (float)i : 0.0f;
  t->clip_max = i % 2 ? 0.75f + (float)i : 0.0f;
  if (i % 3 == 0) snprintf(t->stack, sizeof t->stack, "stack_%d", i / 3);
}

static void make_feature(int i, int n_tables, scps_feature_spec *f) {
  scps__feature_spec_init(f);
  snprintf(f->name, sizeof f->name, "feature_%d", i);
  snprintf(f->table, sizeof f->table, "table_%d", i % n_tables);
  f->batch_size = 128 << (i % 4);
  f->valency = i % 3 == 0 ? 0 : i % 5 + 1;
  f->output_dim = i % 2 ? 8 + 5 * (i % n_tables) : 0;
}

/* ---- helpers: pack a message and unpack it again ---- */

static uint8_t *pack(const ProtobufCMessage *m, size_t *len) {
  *len = protobuf_c_message_get_packed_size(m);
  uint8_t *buf = malloc(*len ? *len : 1);
  CHECK(buf != NULL);
  if (buf) CHECK(protobuf_c_message_pack(m, buf) == *len);
  return buf;
}

static Scps__V1__TableSpec *table_wire_trip(const Scps__V1__TableSpec *m) {
  size_t len;
  uint8_t *buf = pack(&m->base, &len);
  Scps__V1__TableSpec *u = buf ? scps__v1__table_spec__unpack(NULL, len, buf) : NULL;
  CHECK(u != NULL);
  free(buf);
  return u;
}

static int contains(const char *msg, const char *want) { return strstr(msg, want) != NULL; }

/* ---- tests ---- */

static void test_cluster_round_trip(void) {
  enum { NT = 2 * N_OPT + 3, NF = 17 };
  scps_table_spec tables[NT];
  scps_feature_spec features[NF];
  for (int i = 0; i < NT; i++) make_table(i, &tables[i]);
  for (int i = 0; i < NF; i++) make_feature(i, NT, &features[i]);
  scps_topology topo = {.num_processes = 3, .sc_per_process = 4,
                        .sc_memory_bytes = (int64_t)5 << 33};

  scps_error err_store = {0}, *err = &err_store; /* CHECK_OK wants a pointer */
  scps_cluster_pb *c = NULL;
  CHECK_OK(scps__cluster_pb_create(&topo, tables, NT, features, NF, &c, err), err);
  if (!c) return;
  size_t len;
  uint8_t *buf = pack(&c->msg.base, &len);
  scps__cluster_pb_destroy(c);
  Scps__V1__ClusterSpec *u = buf ? scps__v1__cluster_spec__unpack(NULL, len, buf) : NULL;
  free(buf);
  CHECK(u != NULL);
  if (!u) return;

  scps_cluster_spec back;
  CHECK_OK(scps__cluster_spec_from_pb(u, &back, err), err);
  scps__v1__cluster_spec__free_unpacked(u, NULL);
  CHECK(back.n_tables == NT && back.n_features == NF);
  CHECK(back.topology.num_processes == 3 && back.topology.sc_per_process == 4 &&
        back.topology.sc_memory_bytes == (int64_t)5 << 33);
  for (int i = 0; i < NT && i < back.n_tables; i++)
    CHECKF(table_equal(&tables[i], &back.tables[i]), "table %d (%s, %s) differs after round trip",
           i, scps__optimizer_name(tables[i].optimizer.type),
           scps__initializer_name(tables[i].initializer.type));
  for (int i = 0; i < NF && i < back.n_features; i++)
    CHECKF(feature_equal(&features[i], &back.features[i]), "feature %d differs", i);
  scps__cluster_spec_free(&back);
  CHECK(back.tables == NULL && back.n_tables == 0);
}

/* Each table alone, through the per-table functions. */
static void test_table_round_trip(void) {
  for (int i = 0; i < 2 * N_OPT; i++) {
    scps_table_spec t, back;
    make_table(i, &t);
    scps_table_pb holder;
    scps__table_spec_to_pb(&t, &holder);
    Scps__V1__TableSpec *u = table_wire_trip(&holder.msg);
    if (!u) continue;
    scps_error err_store = {0}, *err = &err_store; /* CHECK_OK wants a pointer */
    CHECK_OK(scps__table_spec_from_pb(u, &back, err), err);
    CHECKF(table_equal(&t, &back), "table %d differs", i);
    /* The first pass is a realistic spec, so the trip covers values the
     * server would accept, not only odd ones. */
    if (i < N_OPT) CHECK_OK(scps__specs_validate(&back, 1, NULL, 0, err), err);
    scps__v1__table_spec__free_unpacked(u, NULL);
  }
}

/* Only the type set: every hyper-parameter takes the default scps.proto
 * documents for that type (values copied from the proto comment). */
static void test_documented_defaults(void) {
  static const struct {
    scps_optimizer_type type;
    double lr, acc, momentum, beta1, beta2, eps, exponent, lr_power, rho, max_mult;
  } want[] = {
      {SCPS_OPT_SGD, 0.001, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN},
      {SCPS_OPT_ADAGRAD, 0.001, 0.1, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN},
      {SCPS_OPT_ADAGRAD_MOMENTUM, 0.001, 0.1, 0.9, NAN, 1.0, 1e-10, 2.0, NAN, NAN, NAN},
      {SCPS_OPT_ADAM, 0.001, NAN, NAN, 0.9, 0.999, 1e-8, NAN, NAN, NAN, NAN},
      {SCPS_OPT_FTRL, 0.01, 0.1, NAN, NAN, NAN, NAN, NAN, -0.5, NAN, NAN},
      {SCPS_OPT_LAPROP, 0.001, NAN, NAN, 0.9, 0.95, 1e-30, NAN, NAN, NAN, NAN},
      {SCPS_OPT_F2A, 0.01, 0.1, NAN, NAN, NAN, NAN, NAN, NAN, 0.5, 1e6},
  };
  for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
    Scps__V1__OptimizerSpec m;
    scps__v1__optimizer_spec__init(&m);
    m.type = scps__optimizer_type_to_pb(want[k].type);
    scps_optimizer_spec o;
    scps_error err_store = {0}, *err = &err_store; /* CHECK_OK wants a pointer */
    CHECK_OK(scps__optimizer_spec_from_pb(&m, "t", &o, err), err);
    const char *name = scps__optimizer_name(want[k].type);
    CHECKF(o.type == want[k].type, "%s type", name);
#define DEFAULT_IS(field, v)                                                                  \
  if (!isnan(v)) CHECKF(o.field == (v), "%s default " #field " %g, documented %g", name, o.field, v)
    DEFAULT_IS(learning_rate, want[k].lr);
    DEFAULT_IS(initial_accumulator, want[k].acc);
    DEFAULT_IS(momentum, want[k].momentum);
    DEFAULT_IS(beta1, want[k].beta1);
    DEFAULT_IS(beta2, want[k].beta2);
    DEFAULT_IS(epsilon, want[k].eps);
    DEFAULT_IS(exponent, want[k].exponent);
    DEFAULT_IS(learning_rate_power, want[k].lr_power);
    DEFAULT_IS(rho, want[k].rho);
    DEFAULT_IS(max_lr_multiplier, want[k].max_mult);
#undef DEFAULT_IS
    CHECKF(o.l1 == 0 && o.l2 == 0 && o.beta == 0 && o.initial_linear == 0 && !o.use_nesterov &&
               !o.multiply_linear_by_learning_rate,
           "%s: documented zero/false defaults", name);
  }

  /* An explicit 0 where the default is not 0 is kept (presence). */
  Scps__V1__OptimizerSpec m;
  scps__v1__optimizer_spec__init(&m);
  m.type = SCPS__V1__OPTIMIZER_TYPE__OPTIMIZER_TYPE_ADAGRAD_MOMENTUM;
  m.momentum_present_case = SCPS__V1__OPTIMIZER_SPEC__MOMENTUM_PRESENT_MOMENTUM;
  m.momentum = 0.0;
  scps_optimizer_spec o;
  scps_error err_store = {0}, *err = &err_store; /* CHECK_OK wants a pointer */
  CHECK_OK(scps__optimizer_spec_from_pb(&m, "t", &o, err), err);
  CHECK(o.momentum == 0.0 && o.beta2 == 1.0);

  /* ...and is on the wire as field 2 (fixed64), the way a proto3
   * `optional double learning_rate = 2` would be. */
  scps__v1__optimizer_spec__init(&m);
  m.learning_rate_present_case = SCPS__V1__OPTIMIZER_SPEC__LEARNING_RATE_PRESENT_LEARNING_RATE;
  m.learning_rate = 0.0;
  uint8_t bytes[16];
  size_t n = protobuf_c_message_pack(&m.base, bytes);
  static const uint8_t lr0[9] = {0x11, 0, 0, 0, 0, 0, 0, 0, 0};
  CHECKF(n == 9 && memcmp(bytes, lr0, 9) == 0, "explicit learning_rate 0 packs to %zu bytes", n);

  /* Table-level 0 defaults. */
  Scps__V1__TableSpec t;
  Scps__V1__InitializerSpec init;
  scps__v1__table_spec__init(&t);
  scps__v1__initializer_spec__init(&init);
  scps__v1__optimizer_spec__init(&m);
  init.type = SCPS__V1__INITIALIZER_TYPE__INITIALIZER_TYPE_ZEROS;
  m.type = SCPS__V1__OPTIMIZER_TYPE__OPTIMIZER_TYPE_SGD;
  t.name = "t";
  t.initializer = &init;
  t.optimizer = &m;
  t.combiner = SCPS__V1__COMBINER__COMBINER_MEAN;
  scps_table_spec out;
  CHECK_OK(scps__table_spec_from_pb(&t, &out, err), err);
  CHECK(out.max_ids_per_partition == 256 && out.max_unique_ids_per_partition == 256);
  CHECK(out.stack[0] == '\0' && !out.clip && out.combiner == SCPS_COMBINER_MEAN);
}

/* A valid one-table message the rejection cases start from. */
typedef struct bad_case {
  Scps__V1__TableSpec t;
  Scps__V1__InitializerSpec init;
  Scps__V1__OptimizerSpec opt;
} bad_case;

static void bad_case_init(bad_case *b) {
  scps__v1__table_spec__init(&b->t);
  scps__v1__initializer_spec__init(&b->init);
  scps__v1__optimizer_spec__init(&b->opt);
  b->init.type = SCPS__V1__INITIALIZER_TYPE__INITIALIZER_TYPE_UNIFORM;
  b->init.scale = 0.05;
  b->opt.type = SCPS__V1__OPTIMIZER_TYPE__OPTIMIZER_TYPE_ADAGRAD;
  b->t.name = "bad_t";
  b->t.vocabulary_size = 100;
  b->t.embedding_dim = 16;
  b->t.initializer = &b->init;
  b->t.optimizer = &b->opt;
  b->t.combiner = SCPS__V1__COMBINER__COMBINER_SUM;
}

/* Packs, unpacks (so the value really crossed the wire) and expects
 * SCPS_EINVAL with every word of `want` in the message. */
static void expect_rejected(const char *what, const bad_case *b, const char *want1,
                            const char *want2) {
  Scps__V1__TableSpec *u = table_wire_trip(&b->t);
  if (!u) return;
  scps_table_spec out;
  scps_error err_store = {0}, *err = &err_store; /* CHECK_OK wants a pointer */
  int rc = scps__table_spec_from_pb(u, &out, err);
  CHECKF(rc == SCPS_EINVAL, "%s: rc %d", what, rc);
  CHECKF(contains(err->msg, want1) && contains(err->msg, want2),
         "%s: message '%s' should name '%s' and '%s'", what, err->msg, want1, want2);
  scps__v1__table_spec__free_unpacked(u, NULL);
}

static void test_rejections(void) {
  bad_case b;
  scps_error err_store = {0}, *err = &err_store; /* CHECK_OK wants a pointer */
  scps_table_spec out;

  bad_case_init(&b);
  CHECK_OK(scps__table_spec_from_pb(&b.t, &out, err), err); /* the base case is fine */

  bad_case_init(&b);
  b.t.combiner = (Scps__V1__Combiner)99;
  expect_rejected("unknown combiner", &b, "'bad_t': combiner", "99");
  bad_case_init(&b);
  b.t.combiner = SCPS__V1__COMBINER__COMBINER_UNSPECIFIED;
  expect_rejected("unspecified combiner", &b, "combiner 0", "unspecified");

  bad_case_init(&b);
  b.opt.type = (Scps__V1__OptimizerType)7; /* CUSTOM in the reference: reserved */
  expect_rejected("reserved optimizer 7", &b, "optimizer.type", "7");
  bad_case_init(&b);
  b.opt.type = (Scps__V1__OptimizerType)0;
  expect_rejected("unspecified optimizer", &b, "optimizer.type 0", "unspecified");
  bad_case_init(&b);
  b.opt.type = (Scps__V1__OptimizerType)-3;
  expect_rejected("negative optimizer", &b, "optimizer.type", "-3");

  bad_case_init(&b);
  b.init.type = (Scps__V1__InitializerType)6;
  expect_rejected("unknown initializer", &b, "initializer.type", "6");
  bad_case_init(&b);
  b.init.type = SCPS__V1__INITIALIZER_TYPE__INITIALIZER_TYPE_UNSPECIFIED;
  expect_rejected("unspecified initializer", &b, "initializer.type 0", "unspecified");

  bad_case_init(&b);
  b.opt.learning_rate_present_case = SCPS__V1__OPTIMIZER_SPEC__LEARNING_RATE_PRESENT_LEARNING_RATE;
  b.opt.learning_rate = NAN;
  expect_rejected("NaN learning_rate", &b, "'bad_t': optimizer.learning_rate", "nan");
  bad_case_init(&b);
  b.opt.max_lr_multiplier_present_case =
      SCPS__V1__OPTIMIZER_SPEC__MAX_LR_MULTIPLIER_PRESENT_MAX_LR_MULTIPLIER;
  b.opt.max_lr_multiplier = -INFINITY;
  expect_rejected("-inf in a field the type ignores", &b, "optimizer.max_lr_multiplier", "-inf");
  bad_case_init(&b);
  b.init.stddev = NAN;
  expect_rejected("NaN stddev", &b, "initializer.stddev", "nan");
  bad_case_init(&b);
  b.t.clip = 1;
  b.t.clip_max = INFINITY;
  expect_rejected("inf clip_max", &b, "'bad_t': clip_max", "inf");

  char long_name[SCPS_NAME_MAX + 1];
  memset(long_name, 'n', SCPS_NAME_MAX);
  long_name[SCPS_NAME_MAX] = '\0'; /* 128 bytes: one too many */
  bad_case_init(&b);
  b.t.name = long_name;
  expect_rejected("long table name", &b, "table name of 128 bytes", "127");
  bad_case_init(&b);
  b.t.stack = long_name;
  expect_rejected("long stack name", &b, "'bad_t': stack name", "128");
  /* 127 bytes fit. */
  long_name[SCPS_NAME_MAX - 1] = '\0';
  bad_case_init(&b);
  b.t.name = long_name;
  b.t.stack = long_name;
  CHECK_OK(scps__table_spec_from_pb(&b.t, &out, err), err);
  CHECK(strlen(out.name) == SCPS_NAME_MAX - 1 && !strcmp(out.stack, long_name));
  long_name[SCPS_NAME_MAX - 1] = 'n';

  bad_case_init(&b);
  b.t.optimizer = NULL;
  expect_rejected("missing optimizer", &b, "'bad_t': optimizer", "missing");
  bad_case_init(&b);
  b.t.initializer = NULL;
  expect_rejected("missing initializer", &b, "'bad_t': initializer", "missing");

  Scps__V1__FeatureSpec f;
  scps__v1__feature_spec__init(&f);
  f.name = "feat";
  f.table = long_name;
  scps_feature_spec fo;
  int rc = scps__feature_spec_from_pb(&f, &fo, err);
  CHECK(rc == SCPS_EINVAL && contains(err->msg, "feature 'feat': table name"));
}

/* Cluster-level failures carry the list position. */
static void test_cluster_rejections(void) {
  scps_table_spec tables[3];
  for (int i = 0; i < 3; i++) make_table(i, &tables[i]);
  scps_feature_spec feature;
  make_feature(0, 3, &feature);
  scps_topology topo = {.num_processes = 1, .sc_per_process = 2, .sc_memory_bytes = 1 << 30};
  scps_error err_store = {0}, *err = &err_store; /* CHECK_OK wants a pointer */
  scps_cluster_pb *c = NULL;
  CHECK_OK(scps__cluster_pb_create(&topo, tables, 3, &feature, 1, &c, err), err);
  if (!c) return;
  scps_cluster_spec back;

  c->tables[1].msg.combiner = (Scps__V1__Combiner)5;
  int rc = scps__cluster_spec_from_pb(&c->msg, &back, err);
  CHECKF(rc == SCPS_EINVAL && contains(err->msg, "tables[1]: table 'table_1': combiner 5"), "%s",
         err->msg);
  CHECK(back.tables == NULL && back.n_tables == 0);
  c->tables[1].msg.combiner = SCPS__V1__COMBINER__COMBINER_SUM;

  c->features[0].table = "";
  c->features[0].name = NULL; /* hand-built messages may leave strings NULL */
  CHECK_OK(scps__cluster_spec_from_pb(&c->msg, &back, err), err);
  CHECK(back.n_features == 1 && back.features && back.features[0].name[0] == '\0');
  scps__cluster_spec_free(&back);

  c->msg.topology = NULL;
  rc = scps__cluster_spec_from_pb(&c->msg, &back, err);
  CHECKF(rc == SCPS_EINVAL && contains(err->msg, "topology missing"), "%s", err->msg);
  scps__cluster_pb_destroy(c);

  c = NULL;
  rc = scps__cluster_pb_create(&topo, tables, -1, NULL, 0, &c, err);
  CHECK(rc == SCPS_EINVAL && c == NULL && contains(err->msg, "-1 tables"));
  rc = scps__cluster_pb_create(&topo, tables, 3, NULL, SCPS_CLUSTER_MAX_FEATURES + 1, &c, err);
  CHECK(rc == SCPS_EINVAL && c == NULL);

  /* An empty cluster converts both ways (validation rejects it later). */
  CHECK_OK(scps__cluster_pb_create(&topo, NULL, 0, NULL, 0, &c, err), err);
  if (c) {
    CHECK_OK(scps__cluster_spec_from_pb(&c->msg, &back, err), err);
    CHECK(back.n_tables == 0 && back.tables == NULL && back.topology.sc_per_process == 2);
    scps__cluster_spec_free(&back);
    scps__cluster_pb_destroy(c);
  }
}

/* The fingerprint is of what a declaration means: output_dim 0 or the
 * table's embedding_dim, and the optimizer's, initializer's and clipping's
 * fields their types do not read, changed, leave it as it was (and
 * scps__specs_diff finds no difference); a field that is read changes both. */
static void test_fingerprint(void) {
  enum { NT = 14, NF = 6 };
  scps_table_spec a[NT], b[NT];
  scps_feature_spec fa[NF], fb[NF];
  for (int i = 0; i < NT; i++) make_table(i, &a[i]);
  for (int i = 0; i < NF; i++) make_feature(i, NT, &fa[i]);
  scps_topology topo = {.num_processes = 2, .sc_per_process = 2, .sc_memory_bytes = 1 << 30};
  scps_error err_store = {0}, *err = &err_store;
  uint8_t fp_a[SCPS_FINGERPRINT_BYTES], fp_b[SCPS_FINGERPRINT_BYTES];
  char diff[512];
  CHECK_OK(scps__fingerprint(&topo, a, NT, fa, NF, fp_a, err), err);
  for (int variant = 0; variant < 4; variant++) {
    memcpy(b, a, sizeof b);
    memcpy(fb, fa, sizeof fb);
    for (int i = 0; i < NT; i++) {
      scps_table_spec *t = &b[i];
      scps_optimizer_spec *o = &t->optimizer;
      if (variant == 0) {
        /* Every output_dim explicit where it was 0, and 0 where explicit. */
        for (int f = 0; f < NF; f++) fb[f].output_dim = fa[f].output_dim ? 0 : a[f % NT].embedding_dim;
      } else if (variant == 1) {
        if (o->type == SCPS_OPT_SGD) o->initial_accumulator = o->beta1 = o->rho = 42;
        if (o->type == SCPS_OPT_ADAM || o->type == SCPS_OPT_LAPROP) o->l1 = o->momentum = 42;
        if (o->type == SCPS_OPT_ADAGRAD) o->epsilon = o->beta2 = 42;
        if (o->type == SCPS_OPT_FTRL || o->type == SCPS_OPT_F2A) o->exponent = o->beta1 = 42;
      } else if (variant == 2) {
        if (t->initializer.type != SCPS_INIT_CONSTANT) t->initializer.value = 42;
        if (t->initializer.type != SCPS_INIT_UNIFORM) t->initializer.scale = 42;
        if (t->initializer.type == SCPS_INIT_ZEROS || t->initializer.type == SCPS_INIT_CONSTANT)
          t->initializer.seed = 42;
      } else if (!t->clip) {
        t->clip_min = 42;
        t->clip_max = -42;
      }
    }
    CHECK_OK(scps__fingerprint(&topo, b, NT, fb, NF, fp_b, err), err);
    CHECKF(!memcmp(fp_a, fp_b, sizeof fp_a), "variant %d: the fingerprint changed", variant);
    CHECKF(!scps__specs_diff(&topo, a, NT, fa, NF, &topo, b, NT, fb, NF, "a", "b", diff, sizeof diff),
           "variant %d: %s", variant, diff);
  }
  /* A field the type reads: both see it. */
  memcpy(b, a, sizeof b);
  CHECK(b[1].optimizer.type == SCPS_OPT_ADAGRAD);
  b[1].optimizer.initial_accumulator += 1;
  CHECK_OK(scps__fingerprint(&topo, b, NT, fa, NF, fp_b, err), err);
  CHECK(memcmp(fp_a, fp_b, sizeof fp_a) != 0);
  CHECK(scps__specs_diff(&topo, a, NT, fa, NF, &topo, b, NT, fa, NF, "a", "b", diff, sizeof diff) &&
        contains(diff, "table 'table_1' optimizer initial_accumulator"));
}

int main(void) {
  test_fingerprint();
  test_cluster_round_trip();
  test_table_round_trip();
  test_documented_defaults();
  test_rejections();
  test_cluster_rejections();
  return scps_test_finish("test_spec_pb");
}
