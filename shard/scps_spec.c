#include "scps_spec.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

void scps__optimizer_spec_init(scps_optimizer_spec *o, scps_optimizer_type type) {
  memset(o, 0, sizeof *o);
  o->type = type;
  o->learning_rate = 0.001;
  o->initial_accumulator = 0.1;
  switch (type) {
  case SCPS_OPT_ADAGRAD_MOMENTUM:
    o->momentum = 0.9;
    o->beta2 = 1.0;
    o->epsilon = 1e-10;
    o->exponent = 2.0;
    break;
  case SCPS_OPT_ADAM:
    o->beta1 = 0.9;
    o->beta2 = 0.999;
    o->epsilon = 1e-8;
    break;
  case SCPS_OPT_FTRL:
    o->learning_rate = 0.01;
    o->learning_rate_power = -0.5;
    break;
  case SCPS_OPT_LAPROP:
    o->beta1 = 0.9;
    o->beta2 = 0.95;
    o->epsilon = 1e-30;
    break;
  case SCPS_OPT_F2A:
    o->learning_rate = 0.01;
    o->rho = 0.5;
    o->max_lr_multiplier = 1e6;
    break;
  default:
    break;
  }
}

void scps__table_spec_init(scps_table_spec *t) {
  memset(t, 0, sizeof *t);
  t->initializer.type = SCPS_INIT_UNIFORM;
  t->initializer.scale = 0.05;
  scps__optimizer_spec_init(&t->optimizer, SCPS_OPT_SGD);
  t->combiner = SCPS_COMBINER_SUM;
  t->max_ids_per_partition = 256;
  t->max_unique_ids_per_partition = 256;
}

void scps__feature_spec_init(scps_feature_spec *f) { memset(f, 0, sizeof *f); }

int scps__optimizer_num_slots(scps_optimizer_type type) {
  switch (type) {
  case SCPS_OPT_SGD: return 0;
  case SCPS_OPT_ADAGRAD: return 1;
  case SCPS_OPT_ADAGRAD_MOMENTUM:
  case SCPS_OPT_ADAM:
  case SCPS_OPT_FTRL:
  case SCPS_OPT_LAPROP:
  case SCPS_OPT_F2A: return 2;
  }
  return 0;
}

const char *scps__optimizer_slot_name(scps_optimizer_type type, int slot) {
  static const char *const names[][2] = {
      [SCPS_OPT_ADAGRAD] = {"accumulator", NULL},
      [SCPS_OPT_ADAGRAD_MOMENTUM] = {"accumulator", "momentum"},
      [SCPS_OPT_ADAM] = {"momentum", "velocity"},
      [SCPS_OPT_FTRL] = {"accumulator", "linear"},
      [SCPS_OPT_LAPROP] = {"mu", "nu"},
      [SCPS_OPT_F2A] = {"accumulator", "local_step"},
  };
  if (slot < 0 || slot >= scps__optimizer_num_slots(type)) return NULL;
  return names[type][slot];
}

double scps__optimizer_slot_init(const scps_optimizer_spec *o, int slot) {
  switch (o->type) {
  case SCPS_OPT_ADAGRAD:
  case SCPS_OPT_ADAGRAD_MOMENTUM:
  case SCPS_OPT_F2A: return slot == 0 ? o->initial_accumulator : 0.0;
  case SCPS_OPT_FTRL: return slot == 0 ? o->initial_accumulator : o->initial_linear;
  default: return 0.0;
  }
}

typedef struct name_value {
  const char *name;
  int value;
} name_value;

static const name_value optimizer_names[] = {
    {"sgd", SCPS_OPT_SGD},   {"adagrad", SCPS_OPT_ADAGRAD}, {"adagrad_momentum", SCPS_OPT_ADAGRAD_MOMENTUM},
    {"adam", SCPS_OPT_ADAM}, {"ftrl", SCPS_OPT_FTRL},       {"laprop", SCPS_OPT_LAPROP},
    {"f2a", SCPS_OPT_F2A},
};
static const name_value combiner_names[] = {
    {"sum", SCPS_COMBINER_SUM}, {"mean", SCPS_COMBINER_MEAN}, {"sqrtn", SCPS_COMBINER_SQRTN}};
static const name_value initializer_names[] = {
    {"zeros", SCPS_INIT_ZEROS},   {"constant", SCPS_INIT_CONSTANT},
    {"uniform", SCPS_INIT_UNIFORM}, {"normal", SCPS_INIT_NORMAL},
    {"truncated_normal", SCPS_INIT_TRUNCATED_NORMAL}};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static const char *name_of(const name_value *t, size_t n, int v) {
  for (size_t i = 0; i < n; i++)
    if (t[i].value == v) return t[i].name;
  return NULL;
}

static int value_of(const name_value *t, size_t n, const char *name, int *out) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(t[i].name, name)) {
      *out = t[i].value;
      return 0;
    }
  return SCPS_ENOENT;
}

const char *scps__optimizer_name(scps_optimizer_type type) {
  return name_of(optimizer_names, COUNT(optimizer_names), type);
}
int scps__optimizer_from_name(const char *name, scps_optimizer_type *out) {
  int v, rc = value_of(optimizer_names, COUNT(optimizer_names), name, &v);
  if (!rc) *out = (scps_optimizer_type)v;
  return rc;
}
const char *scps__combiner_name(scps_combiner c) {
  return name_of(combiner_names, COUNT(combiner_names), c);
}
int scps__combiner_from_name(const char *name, scps_combiner *out) {
  int v, rc = value_of(combiner_names, COUNT(combiner_names), name, &v);
  if (!rc) *out = (scps_combiner)v;
  return rc;
}
const char *scps__initializer_name(scps_initializer_type t) {
  return name_of(initializer_names, COUNT(initializer_names), t);
}
int scps__initializer_from_name(const char *name, scps_initializer_type *out) {
  int v, rc = value_of(initializer_names, COUNT(initializer_names), name, &v);
  if (!rc) *out = (scps_initializer_type)v;
  return rc;
}

static void optimizer_canonical(scps_optimizer_spec *o);

/* Equal when the hyper-parameters the type reads are: the canonical forms
 * (optimizer_canonical, the one list of what each type reads) compared
 * field by field. */
bool scps__optimizer_spec_equal(const scps_optimizer_spec *a, const scps_optimizer_spec *b) {
  if (a->type != b->type || !name_of(optimizer_names, COUNT(optimizer_names), a->type)) return false;
  scps_optimizer_spec x = *a, y = *b;
  optimizer_canonical(&x);
  optimizer_canonical(&y);
  return x.learning_rate == y.learning_rate && x.initial_accumulator == y.initial_accumulator &&
         x.momentum == y.momentum && x.beta1 == y.beta1 && x.beta2 == y.beta2 && x.epsilon == y.epsilon &&
         x.exponent == y.exponent && x.use_nesterov == y.use_nesterov &&
         x.learning_rate_power == y.learning_rate_power && x.l1 == y.l1 && x.l2 == y.l2 && x.beta == y.beta &&
         x.multiply_linear_by_learning_rate == y.multiply_linear_by_learning_rate &&
         x.initial_linear == y.initial_linear && x.rho == y.rho && x.max_lr_multiplier == y.max_lr_multiplier;
}

int scps__find_table(const scps_table_spec *tables, int n_tables, const char *name) {
  for (int i = 0; i < n_tables; i++)
    if (!strcmp(tables[i].name, name)) return i;
  return -1;
}

int scps__find_feature(const scps_feature_spec *features, int n_features, const char *name) {
  for (int i = 0; i < n_features; i++)
    if (!strcmp(features[i].name, name)) return i;
  return -1;
}

static int check_name(const char *kind, int index, const char *name, scps_error *err) {
  size_t len = strnlen(name, SCPS_NAME_MAX);
  if (len == 0) return scps_error_set(err, SCPS_EINVAL, "%s #%d: empty name", kind, index);
  if (len == SCPS_NAME_MAX)
    return scps_error_set(err, SCPS_EINVAL, "%s #%d: name longer than %d bytes", kind, index,
                          SCPS_NAME_MAX - 1);
  return 0;
}

/* The optimizers compute in float32: a value beyond FLT_MAX would be
 * infinite there. */
#define CHECK_FINITE(t, field)                                                                 \
  if (!(fabs(o->field) <= FLT_MAX))                                                            \
    return scps_error_set(err, SCPS_EINVAL, "table '%s': optimizer %s " #field " is %g, not finite in float32", \
                          t, scps__optimizer_name(o->type), o->field);

static int check_optimizer(const char *t, const scps_optimizer_spec *o, scps_error *err) {
  if (!scps__optimizer_name(o->type))
    return scps_error_set(err, SCPS_EINVAL, "table '%s': unknown optimizer type %d", t, (int)o->type);
  CHECK_FINITE(t, learning_rate);
  CHECK_FINITE(t, initial_accumulator);
  CHECK_FINITE(t, momentum);
  CHECK_FINITE(t, beta1);
  CHECK_FINITE(t, beta2);
  CHECK_FINITE(t, epsilon);
  CHECK_FINITE(t, exponent);
  CHECK_FINITE(t, learning_rate_power);
  CHECK_FINITE(t, l1);
  CHECK_FINITE(t, l2);
  CHECK_FINITE(t, beta);
  CHECK_FINITE(t, initial_linear);
  CHECK_FINITE(t, rho);
  CHECK_FINITE(t, max_lr_multiplier);
  const char *name = scps__optimizer_name(o->type);
  if (o->learning_rate < 0)
    return scps_error_set(err, SCPS_EINVAL, "table '%s': %s learning_rate %g is negative", t, name,
                          o->learning_rate);
  if (o->l1 < 0 || o->l2 < 0)
    return scps_error_set(err, SCPS_EINVAL, "table '%s': %s l1 %g / l2 %g must be >= 0", t, name,
                          o->l1, o->l2);
  switch (o->type) {
  case SCPS_OPT_ADAGRAD:
  case SCPS_OPT_F2A:
    if (o->initial_accumulator <= 0)
      return scps_error_set(err, SCPS_EINVAL, "table '%s': %s initial_accumulator %g must be > 0",
                            t, name, o->initial_accumulator);
    if (o->type == SCPS_OPT_F2A && o->max_lr_multiplier <= 0)
      return scps_error_set(err, SCPS_EINVAL, "table '%s': f2a max_lr_multiplier %g must be > 0", t,
                            o->max_lr_multiplier);
    break;
  case SCPS_OPT_ADAGRAD_MOMENTUM:
    if (o->initial_accumulator < 0 || o->exponent <= 0 || o->epsilon < 0)
      return scps_error_set(err, SCPS_EINVAL,
                            "table '%s': adagrad_momentum needs initial_accumulator >= 0 (%g), "
                            "exponent > 0 (%g), epsilon >= 0 (%g)",
                            t, o->initial_accumulator, o->exponent, o->epsilon);
    if (o->initial_accumulator + o->epsilon <= 0)
      return scps_error_set(err, SCPS_EINVAL,
                            "table '%s': adagrad_momentum initial_accumulator + epsilon must be > 0",
                            t);
    if (o->beta2 <= 0 || o->beta2 > 1)
      return scps_error_set(err, SCPS_EINVAL, "table '%s': adagrad_momentum beta2 %g not in (0, 1]",
                            t, o->beta2);
    break;
  case SCPS_OPT_ADAM:
  case SCPS_OPT_LAPROP:
    if (o->beta1 < 0 || o->beta1 >= 1 || o->beta2 < 0 || o->beta2 >= 1)
      return scps_error_set(err, SCPS_EINVAL, "table '%s': %s betas (%g, %g) must be in [0, 1)", t,
                            name, o->beta1, o->beta2);
    if (o->epsilon <= 0)
      return scps_error_set(err, SCPS_EINVAL, "table '%s': %s epsilon %g must be > 0", t, name,
                            o->epsilon);
    break;
  case SCPS_OPT_FTRL:
    if (o->initial_accumulator <= 0)
      return scps_error_set(err, SCPS_EINVAL, "table '%s': ftrl initial_accumulator %g must be > 0",
                            t, o->initial_accumulator);
    if ((float)o->learning_rate <= 0)
      return scps_error_set(err, SCPS_EINVAL, "table '%s': ftrl learning_rate %g must be > 0 in float32", t,
                            o->learning_rate);
    if (o->learning_rate_power > 0)
      return scps_error_set(err, SCPS_EINVAL, "table '%s': ftrl learning_rate_power %g must be <= 0",
                            t, o->learning_rate_power);
    if (o->beta < 0)
      return scps_error_set(err, SCPS_EINVAL, "table '%s': ftrl beta %g must be >= 0", t, o->beta);
    break;
  default:
    break;
  }
  return 0;
}

static int check_initializer(const char *t, const scps_initializer_spec *in, scps_error *err) {
  if (!scps__initializer_name(in->type))
    return scps_error_set(err, SCPS_EINVAL, "table '%s': unknown initializer type %d", t,
                          (int)in->type);
  if (!isfinite(in->value) || !isfinite(in->scale) || !isfinite(in->stddev))
    return scps_error_set(err, SCPS_EINVAL, "table '%s': initializer parameters must be finite", t);
  if (in->type == SCPS_INIT_UNIFORM && in->scale < 0)
    return scps_error_set(err, SCPS_EINVAL, "table '%s': uniform initializer scale %g is negative",
                          t, in->scale);
  if ((in->type == SCPS_INIT_NORMAL || in->type == SCPS_INIT_TRUNCATED_NORMAL) && in->stddev < 0)
    return scps_error_set(err, SCPS_EINVAL, "table '%s': %s initializer stddev %g is negative", t,
                          scps__initializer_name(in->type), in->stddev);
  return 0;
}

/* Vocabularies are bounded so that any local row fits the 32-bit row field of
 * a COO partition even on a single SparseCore. */
#define SCPS_VOCAB_MAX ((int64_t)1 << 31)
#define SCPS_BATCH_MAX (1 << 26)

/* The storage format is a name scps__storage_parse reads and the rounding
 * one of scps_rounding's. */
static int check_storage(const scps_table_spec *t, scps_error *err) {
  scps_storage_format f;
  if (strnlen(t->storage_format, SCPS_STORAGE_NAME_MAX) == SCPS_STORAGE_NAME_MAX)
    return scps_error_set(err, SCPS_EINVAL, "table '%s': storage_format '%.*s...' is too long", t->name,
                          SCPS_STORAGE_NAME_MAX - 1, t->storage_format);
  if (scps__storage_parse(t->storage_format, &f, NULL) != 0)
    return scps_error_set(err, SCPS_EINVAL,
                          "table '%s': storage_format '%s' is not float32, bfloat16 or an eXmY format name "
                          "(e4m3, e5m2, e3m0b-2: 1 + X + Y of 2 to 16 bits, X <= 8, optional b and bias)",
                          t->name, t->storage_format);
  const int slots = scps__optimizer_num_slots(t->optimizer.type);
  for (int k = 0; k < SCPS_MAX_SLOTS; k++) {
    const char *name = t->slot_formats[k];
    if (strnlen(name, SCPS_STORAGE_NAME_MAX) == SCPS_STORAGE_NAME_MAX)
      return scps_error_set(err, SCPS_EINVAL, "table '%s': slot_formats[%d] '%.*s...' is too long", t->name, k,
                            SCPS_STORAGE_NAME_MAX - 1, name);
    if (name[0] && k >= slots)
      return scps_error_set(err, SCPS_EINVAL, "table '%s': slot_formats[%d] '%s' but optimizer %s has %d slot%s",
                            t->name, k, name, scps__optimizer_name(t->optimizer.type), slots, slots == 1 ? "" : "s");
    if (scps__storage_parse(name, &f, NULL) != 0)
      return scps_error_set(err, SCPS_EINVAL,
                            "table '%s': slot_formats[%d] (%s) '%s' is not float32, bfloat16 or an eXmY format name",
                            t->name, k, scps__optimizer_slot_name(t->optimizer.type, k), name);
  }
  if (t->storage_rounding != SCPS_ROUNDING_STOCHASTIC && t->storage_rounding != SCPS_ROUNDING_NEAREST)
    return scps_error_set(err, SCPS_EINVAL, "table '%s': storage_rounding %d is not stochastic (0) or nearest (1)",
                          t->name, (int)t->storage_rounding);
  return 0;
}

int scps__specs_validate(const scps_table_spec *tables, int n_tables,
                        const scps_feature_spec *features, int n_features, scps_error *err) {
  if (n_tables <= 0) return scps_error_set(err, SCPS_EINVAL, "no tables declared");
  for (int i = 0; i < n_tables; i++) {
    const scps_table_spec *t = &tables[i];
    int rc = check_name("table", i, t->name, err);
    if (rc) return rc;
    if (scps__find_table(tables, i, t->name) >= 0)
      return scps_error_set(err, SCPS_EEXIST, "table '%s' declared twice", t->name);
    if (t->vocabulary_size <= 0 || t->vocabulary_size > SCPS_VOCAB_MAX)
      return scps_error_set(err, SCPS_EINVAL, "table '%s': vocabulary_size %lld not in [1, %lld]",
                            t->name, (long long)t->vocabulary_size, (long long)SCPS_VOCAB_MAX);
    if (t->embedding_dim <= 0 || t->embedding_dim > SCPS_DIM_MAX)
      return scps_error_set(err, SCPS_EINVAL, "table '%s': embedding_dim %d not in [1, %d]", t->name,
                            t->embedding_dim, SCPS_DIM_MAX);
    if (t->combiner != SCPS_COMBINER_SUM && t->combiner != SCPS_COMBINER_MEAN &&
        t->combiner != SCPS_COMBINER_SQRTN)
      return scps_error_set(err, SCPS_EINVAL, "table '%s': unknown combiner %d", t->name,
                            (int)t->combiner);
    if (t->max_ids_per_partition <= 0 || t->max_unique_ids_per_partition <= 0)
      return scps_error_set(err, SCPS_EINVAL,
                            "table '%s': max_ids_per_partition %d and max_unique_ids_per_partition "
                            "%d must be > 0",
                            t->name, t->max_ids_per_partition, t->max_unique_ids_per_partition);
    if (t->clip && !(isfinite(t->clip_min) && isfinite(t->clip_max) && t->clip_min <= t->clip_max))
      return scps_error_set(err, SCPS_EINVAL, "table '%s': clip range [%g, %g] is not a finite range",
                            t->name, t->clip_min, t->clip_max);
    if (strnlen(t->stack, SCPS_NAME_MAX) == SCPS_NAME_MAX)
      return scps_error_set(err, SCPS_EINVAL, "table '%s': stack name too long", t->name);
    rc = check_optimizer(t->name, &t->optimizer, err);
    if (rc) return rc;
    rc = check_initializer(t->name, &t->initializer, err);
    if (rc) return rc;
    rc = check_storage(t, err);
    if (rc) return rc;
  }
  for (int i = 0; i < n_features; i++) {
    const scps_feature_spec *f = &features[i];
    int rc = check_name("feature", i, f->name, err);
    if (rc) return rc;
    if (scps__find_feature(features, i, f->name) >= 0)
      return scps_error_set(err, SCPS_EEXIST, "feature '%s' declared twice", f->name);
    int t = strnlen(f->table, SCPS_NAME_MAX) < SCPS_NAME_MAX
                ? scps__find_table(tables, n_tables, f->table)
                : -1;
    if (t < 0)
      return scps_error_set(err, SCPS_ENOENT, "feature '%s': unknown table '%.*s'", f->name,
                            SCPS_NAME_MAX - 1, f->table);
    if (f->batch_size <= 0 || f->batch_size > SCPS_BATCH_MAX)
      return scps_error_set(err, SCPS_EINVAL, "feature '%s': batch_size %d not in [1, %d]", f->name,
                            f->batch_size, SCPS_BATCH_MAX);
    if (f->valency < 0)
      return scps_error_set(err, SCPS_EINVAL, "feature '%s': valency %d is negative", f->name,
                            f->valency);
    if (f->output_dim != 0 && f->output_dim != tables[t].embedding_dim)
      return scps_error_set(err, SCPS_EINVAL,
                            "feature '%s': output_dim %d differs from table '%s' embedding_dim %d",
                            f->name, f->output_dim, tables[t].name, tables[t].embedding_dim);
  }
  return 0;
}

int scps__topology_validate(const scps_topology *t, scps_error *err) {
  if (t->num_processes <= 0 || t->num_processes > 1024)
    return scps_error_set(err, SCPS_EINVAL, "topology: num_processes %d not in [1, 1024]",
                          t->num_processes);
  if (t->sc_per_process <= 0 || t->sc_per_process > SCPS_SC_PER_PROCESS_MAX)
    return scps_error_set(err, SCPS_EINVAL, "topology: sc_per_process %d not in [1, %d]",
                          t->sc_per_process, SCPS_SC_PER_PROCESS_MAX);
  if (t->sc_memory_bytes <= 0)
    return scps_error_set(err, SCPS_EINVAL, "topology: sc_memory_bytes %lld must be > 0",
                          (long long)t->sc_memory_bytes);
  return 0;
}

#define DIFF_NUM(what, fmt, x, y)                                                              \
  if ((x) != (y)) {                                                                          \
    snprintf(msg, len, "%s: %s " fmt ", %s " fmt, what, name_a, x, name_b, y);                \
    return 1;                                                                                \
  }
#define DIFF_STR(what, x, y)                                                                   \
  if (strcmp(x, y)) {                                                                        \
    snprintf(msg, len, "%s: %s '%s', %s '%s'", what, name_a, x, name_b, y);                   \
    return 1;                                                                                \
  }

static int optimizer_diff(const char *t, const scps_optimizer_spec *x, const scps_optimizer_spec *y,
                          const char *name_a, const char *name_b, char *msg, size_t len) {
  char what[SCPS_NAME_MAX + 64];
#define OPT_FIELD(f, fmt)                                                                      \
  snprintf(what, sizeof what, "table '%s' optimizer " #f, t);                                \
  DIFF_NUM(what, fmt, x->f, y->f)
  snprintf(what, sizeof what, "table '%s' optimizer", t);
  DIFF_STR(what, scps__optimizer_name(x->type) ? scps__optimizer_name(x->type) : "?",
           scps__optimizer_name(y->type) ? scps__optimizer_name(y->type) : "?");
  OPT_FIELD(learning_rate, "%g");
  OPT_FIELD(initial_accumulator, "%g");
  OPT_FIELD(momentum, "%g");
  OPT_FIELD(beta1, "%g");
  OPT_FIELD(beta2, "%g");
  OPT_FIELD(epsilon, "%g");
  OPT_FIELD(exponent, "%g");
  OPT_FIELD(use_nesterov, "%d");
  OPT_FIELD(learning_rate_power, "%g");
  OPT_FIELD(l1, "%g");
  OPT_FIELD(l2, "%g");
  OPT_FIELD(beta, "%g");
  OPT_FIELD(multiply_linear_by_learning_rate, "%d");
  OPT_FIELD(initial_linear, "%g");
  OPT_FIELD(rho, "%g");
  OPT_FIELD(max_lr_multiplier, "%g");
#undef OPT_FIELD
  return 0;
}

int scps__specs_diff(const scps_topology *ta, const scps_table_spec *a, int na,
                    const scps_feature_spec *fa, int nfa, const scps_topology *tb,
                    const scps_table_spec *b, int nb, const scps_feature_spec *fb, int nfb,
                    const char *name_a, const char *name_b, char *msg, size_t len) {
  DIFF_NUM("topology num_processes", "%d", ta->num_processes, tb->num_processes);
  DIFF_NUM("topology sc_per_process", "%d", ta->sc_per_process, tb->sc_per_process);
  DIFF_NUM("topology sc_memory_bytes", "%lld", (long long)ta->sc_memory_bytes, (long long)tb->sc_memory_bytes);
  DIFF_NUM("number of tables", "%d", na, nb);
  DIFF_NUM("number of features", "%d", nfa, nfb);
  char what[SCPS_NAME_MAX + 64];
  for (int i = 0; i < na; i++) {
    const scps_table_spec *x = &a[i], *y = &b[i];
    scps_table_spec cx = *x, cy = *y;
    scps__table_spec_canonical(&cx);
    scps__table_spec_canonical(&cy);
    snprintf(what, sizeof what, "tables[%d] name", i);
    DIFF_STR(what, x->name, y->name);
#define TABLE_FIELD(f, fmt, cast)                                                              \
  snprintf(what, sizeof what, "table '%s' " #f, x->name);                                    \
  DIFF_NUM(what, fmt, (cast)cx.f, (cast)cy.f)
    TABLE_FIELD(vocabulary_size, "%lld", long long);
    TABLE_FIELD(embedding_dim, "%d", int);
    snprintf(what, sizeof what, "table '%s' combiner", x->name);
    DIFF_NUM(what, "%d", (int)x->combiner, (int)y->combiner);
    TABLE_FIELD(max_ids_per_partition, "%d", int);
    TABLE_FIELD(max_unique_ids_per_partition, "%d", int);
    TABLE_FIELD(clip, "%d", int);
    TABLE_FIELD(clip_min, "%g", double);
    TABLE_FIELD(clip_max, "%g", double);
    TABLE_FIELD(initializer.type, "%d", int);
    TABLE_FIELD(initializer.value, "%g", double);
    TABLE_FIELD(initializer.scale, "%g", double);
    TABLE_FIELD(initializer.stddev, "%g", double);
    TABLE_FIELD(initializer.seed, "%llu", unsigned long long);
#undef TABLE_FIELD
    snprintf(what, sizeof what, "table '%s' stack", x->name);
    DIFF_STR(what, x->stack, y->stack);
    snprintf(what, sizeof what, "table '%s' storage_format", x->name);
    DIFF_STR(what, cx.storage_format[0] ? cx.storage_format : "float32",
             cy.storage_format[0] ? cy.storage_format : "float32");
    snprintf(what, sizeof what, "table '%s' storage_rounding", x->name);
    DIFF_NUM(what, "%d", (int)cx.storage_rounding, (int)cy.storage_rounding);
    for (int k = 0; k < SCPS_MAX_SLOTS; k++) {
      snprintf(what, sizeof what, "table '%s' slot_formats[%d]", x->name, k);
      DIFF_STR(what, cx.slot_formats[k][0] ? cx.slot_formats[k] : "float32",
               cy.slot_formats[k][0] ? cy.slot_formats[k] : "float32");
    }
    if (optimizer_diff(x->name, &cx.optimizer, &cy.optimizer, name_a, name_b, msg, len)) return 1;
  }
  for (int i = 0; i < nfa; i++) {
    const scps_feature_spec *x = &fa[i], *y = &fb[i];
    scps_feature_spec cx = *x, cy = *y;
    scps__feature_spec_canonical(&cx, a, na);
    scps__feature_spec_canonical(&cy, b, nb);
    snprintf(what, sizeof what, "features[%d] name", i);
    DIFF_STR(what, x->name, y->name);
    snprintf(what, sizeof what, "feature '%s' table", x->name);
    DIFF_STR(what, x->table, y->table);
    snprintf(what, sizeof what, "feature '%s' batch_size", x->name);
    DIFF_NUM(what, "%d", x->batch_size, y->batch_size);
    snprintf(what, sizeof what, "feature '%s' valency", x->name);
    DIFF_NUM(what, "%d", x->valency, y->valency);
    snprintf(what, sizeof what, "feature '%s' output_dim", x->name);
    DIFF_NUM(what, "%d", cx.output_dim, cy.output_dim);
  }
  return 0;
}

/* The hyper-parameters of o's type (scps.proto OptimizerSpec's table, and
 * scps__optimizer_spec_equal) kept, every other one 0. */
static void optimizer_canonical(scps_optimizer_spec *o) {
  scps_optimizer_spec c;
  memset(&c, 0, sizeof c);
  c.type = o->type;
  c.learning_rate = o->learning_rate;
  switch (o->type) {
  case SCPS_OPT_SGD: break;
  case SCPS_OPT_ADAGRAD: c.initial_accumulator = o->initial_accumulator; break;
  case SCPS_OPT_ADAGRAD_MOMENTUM:
    c.initial_accumulator = o->initial_accumulator;
    c.momentum = o->momentum;
    c.beta2 = o->beta2;
    c.epsilon = o->epsilon;
    c.exponent = o->exponent;
    c.use_nesterov = o->use_nesterov;
    break;
  case SCPS_OPT_ADAM:
  case SCPS_OPT_LAPROP:
    c.beta1 = o->beta1;
    c.beta2 = o->beta2;
    c.epsilon = o->epsilon;
    break;
  case SCPS_OPT_FTRL:
    c.initial_accumulator = o->initial_accumulator;
    c.learning_rate_power = o->learning_rate_power;
    c.l1 = o->l1;
    c.l2 = o->l2;
    c.beta = o->beta;
    c.multiply_linear_by_learning_rate = o->multiply_linear_by_learning_rate;
    c.initial_linear = o->initial_linear;
    break;
  case SCPS_OPT_F2A:
    c.initial_accumulator = o->initial_accumulator;
    c.rho = o->rho;
    c.l1 = o->l1;
    c.l2 = o->l2;
    c.max_lr_multiplier = o->max_lr_multiplier;
    break;
  default: return; /* an unknown type: left as it is, for the checks to name */
  }
  *o = c;
}

/* A storage format name made canonical ("" for float32); whether it names
 * a format that rounds (a name that is none is left as it is). */
static bool storage_canonical(char name[SCPS_STORAGE_NAME_MAX]) {
  scps_storage_format f;
  if (strnlen(name, SCPS_STORAGE_NAME_MAX) == SCPS_STORAGE_NAME_MAX || scps__storage_parse(name, &f, NULL)) return true;
  if (f.kind == SCPS_STORAGE_F32) name[0] = '\0';
  else scps__storage_name(&f, name, SCPS_STORAGE_NAME_MAX);
  return f.kind != SCPS_STORAGE_F32;
}

void scps__table_spec_canonical(scps_table_spec *t) {
  optimizer_canonical(&t->optimizer);
  scps_initializer_spec *in = &t->initializer;
  const bool random = in->type == SCPS_INIT_UNIFORM || in->type == SCPS_INIT_NORMAL ||
                      in->type == SCPS_INIT_TRUNCATED_NORMAL;
  if (in->type != SCPS_INIT_CONSTANT) in->value = 0;
  if (in->type != SCPS_INIT_UNIFORM) in->scale = 0;
  if (in->type != SCPS_INIT_NORMAL && in->type != SCPS_INIT_TRUNCATED_NORMAL) in->stddev = 0;
  if (!random) in->seed = 0;
  if (!t->clip) t->clip_min = t->clip_max = 0;
  bool rounds = storage_canonical(t->storage_format);
  for (int k = 0; k < SCPS_MAX_SLOTS; k++) rounds |= storage_canonical(t->slot_formats[k]);
  if (!rounds) t->storage_rounding = SCPS_ROUNDING_STOCHASTIC;
}

void scps__feature_spec_canonical(scps_feature_spec *f, const scps_table_spec *tables, int n_tables) {
  if (f->output_dim) return;
  int t = strnlen(f->table, SCPS_NAME_MAX) < SCPS_NAME_MAX ? scps__find_table(tables, n_tables, f->table) : -1;
  if (t >= 0) f->output_dim = tables[t].embedding_dim;
}
