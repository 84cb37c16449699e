#include "scps_workload.h"

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scps_json.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
#define PATH_MAX_LEN 192

/* ---- reading typed values with errors that name the JSON path ---- */

/* A short rendering of a value for messages: 1.5, "abc", true, an array. */
static const char *describe(const scps_json *v, char *buf, size_t cap) {
  switch (scps__json_typeof(v)) {
  case SCPS_JSON_NUMBER: {
    double d;
    scps__json_number(v, &d);
    snprintf(buf, cap, "%.15g", d);
    break;
  }
  case SCPS_JSON_STRING: {
    size_t n;
    const char *s = scps__json_string(v, &n);
    if (n > 48) snprintf(buf, cap, "\"%.45s...\"", s);
    else snprintf(buf, cap, "\"%s\"", s);
    break;
  }
  case SCPS_JSON_BOOL: {
    bool b;
    scps__json_bool(v, &b);
    snprintf(buf, cap, "%s", b ? "true" : "false");
    break;
  }
  case SCPS_JSON_NULL: snprintf(buf, cap, "null"); break;
  case SCPS_JSON_ARRAY: snprintf(buf, cap, "an array"); break;
  case SCPS_JSON_OBJECT: snprintf(buf, cap, "an object"); break;
  }
  return buf;
}

static int bad_value(scps_error *err, const char *path, const scps_json *v, const char *expected) {
  char buf[64];
  return scps_error_set(err, SCPS_EINVAL, "%s: expected %s, got %s (line %u)", path, expected,
                        describe(v, buf, sizeof buf), scps__json_line(v));
}

/* out = path.key, cut to PATH_MAX_LEN - 1 bytes (paths only label messages). */
static void join(char *out, const char *path, const char *key) {
  const size_t cap = PATH_MAX_LEN - 1;
  size_t n = strnlen(path, cap);
  memcpy(out, path, n);
  if (n && n < cap) out[n++] = '.';
  size_t k = strnlen(key, cap - n);
  memcpy(out + n, key, k);
  out[n + k] = '\0';
}

/* Fetches obj[key]; a missing required key is an error, a missing optional
 * one leaves *out NULL. */
static int member(const scps_json *obj, const char *path, const char *key, bool required,
                  const scps_json **out, scps_error *err) {
  *out = scps__json_get(obj, key);
  if (!*out && required)
    return scps_error_set(err, SCPS_EINVAL, "%s%smissing required key '%s'", path,
                          *path ? ": " : "", key);
  return 0;
}

static int check_keys(const scps_json *obj, const char *path, const char *const *allowed,
                      size_t n_allowed, scps_error *err) {
  for (size_t i = 0; i < scps__json_length(obj); i++) {
    const char *key;
    size_t key_len;
    const scps_json *v = scps__json_member(obj, i, &key, &key_len);
    bool ok = false;
    for (size_t k = 0; k < n_allowed && !ok; k++)
      ok = strlen(allowed[k]) == key_len && !memcmp(allowed[k], key, key_len);
    if (ok) continue;
    char list[256] = "";
    size_t used = 0;
    for (size_t k = 0; k < n_allowed && used < sizeof list; k++)
      used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", k ? ", " : "", allowed[k]);
    return scps_error_set(err, SCPS_EINVAL, "%s%sunknown key '%.64s' (line %u); allowed: %s", path,
                          *path ? ": " : "", key, scps__json_line(v), list);
  }
  return 0;
}

static int get_int(const scps_json *obj, const char *path, const char *key, bool required,
                   int64_t min, int64_t max, int64_t *out, bool *present, scps_error *err) {
  const scps_json *v;
  char p[PATH_MAX_LEN];
  int rc = member(obj, path, key, required, &v, err);
  if (present) *present = v != NULL;
  if (rc || !v) return rc;
  join(p, path, key);
  int64_t i;
  if (scps__json_int(v, &i) || i < min || i > max) {
    char expected[96];
    if (max == INT64_MAX) snprintf(expected, sizeof expected, "an integer >= %lld", (long long)min);
    else
      snprintf(expected, sizeof expected, "an integer in [%lld, %lld]", (long long)min,
               (long long)max);
    return bad_value(err, p, v, expected);
  }
  *out = i;
  return 0;
}

static int get_double(const scps_json *obj, const char *path, const char *key, bool required,
                      double *out, scps_error *err) {
  const scps_json *v;
  char p[PATH_MAX_LEN];
  int rc = member(obj, path, key, required, &v, err);
  if (rc || !v) return rc;
  join(p, path, key);
  if (scps__json_number(v, out)) return bad_value(err, p, v, "a number");
  return 0;
}

static int get_bool(const scps_json *obj, const char *path, const char *key, bool required,
                    bool *out, scps_error *err) {
  const scps_json *v;
  char p[PATH_MAX_LEN];
  int rc = member(obj, path, key, required, &v, err);
  if (rc || !v) return rc;
  join(p, path, key);
  if (scps__json_bool(v, out)) return bad_value(err, p, v, "true or false");
  return 0;
}

/* Copies a string of 1..cap-1 bytes without embedded NULs into buf. */
static int get_name(const scps_json *obj, const char *path, const char *key, bool required,
                    char *buf, size_t cap, scps_error *err) {
  const scps_json *v;
  char p[PATH_MAX_LEN];
  int rc = member(obj, path, key, required, &v, err);
  if (rc || !v) return rc;
  join(p, path, key);
  size_t n;
  const char *s = scps__json_string(v, &n);
  char expected[64];
  snprintf(expected, sizeof expected, "a non-empty string of at most %zu bytes", cap - 1);
  if (!s || n == 0 || n >= cap || strlen(s) != n) return bad_value(err, p, v, expected);
  memcpy(buf, s, n + 1);
  return 0;
}

static int get_object(const scps_json *obj, const char *path, const char *key, bool required,
                      const scps_json **out, scps_error *err) {
  char p[PATH_MAX_LEN];
  int rc = member(obj, path, key, required, out, err);
  if (rc || !*out) return rc;
  join(p, path, key);
  if (scps__json_typeof(*out) != SCPS_JSON_OBJECT) return bad_value(err, p, *out, "an object");
  return 0;
}

/* The string's bytes when v is a string without embedded NULs, else NULL. */
static const char *cstr(const scps_json *v) {
  size_t n;
  const char *s = scps__json_string(v, &n);
  return s && strlen(s) == n ? s : NULL;
}

/* ---- optimizers ---- */

enum { HP_DOUBLE, HP_BOOL };

#define OPT_BIT(t) (1u << (t))

/* Every hyper-parameter a file may give, by its reference name, with the
 * optimizers it belongs to and where it lands in scps_optimizer_spec. */
typedef struct hyper_param {
  const char *name;
  unsigned optimizers;
  int kind;
  size_t offset;
} hyper_param;

#define ADAGRAD_FAMILY (OPT_BIT(SCPS_OPT_ADAGRAD) | OPT_BIT(SCPS_OPT_ADAGRAD_MOMENTUM))
#define ALL_OPTIMIZERS                                                                         \
  (OPT_BIT(SCPS_OPT_SGD) | OPT_BIT(SCPS_OPT_ADAGRAD) | OPT_BIT(SCPS_OPT_ADAGRAD_MOMENTUM) |    \
   OPT_BIT(SCPS_OPT_ADAM) | OPT_BIT(SCPS_OPT_FTRL) | OPT_BIT(SCPS_OPT_LAPROP) |                 \
   OPT_BIT(SCPS_OPT_F2A))

static const hyper_param hyper_params[] = {
    {"learning_rate", ALL_OPTIMIZERS, HP_DOUBLE, offsetof(scps_optimizer_spec, learning_rate)},
    {"initial_accumulator", ADAGRAD_FAMILY | OPT_BIT(SCPS_OPT_FTRL) | OPT_BIT(SCPS_OPT_F2A),
     HP_DOUBLE, offsetof(scps_optimizer_spec, initial_accumulator)},
    {"momentum", OPT_BIT(SCPS_OPT_ADAGRAD_MOMENTUM), HP_DOUBLE,
     offsetof(scps_optimizer_spec, momentum)},
    {"beta2", OPT_BIT(SCPS_OPT_ADAGRAD_MOMENTUM), HP_DOUBLE, offsetof(scps_optimizer_spec, beta2)},
    {"epsilon", OPT_BIT(SCPS_OPT_ADAGRAD_MOMENTUM) | OPT_BIT(SCPS_OPT_ADAM), HP_DOUBLE,
     offsetof(scps_optimizer_spec, epsilon)},
    {"exponent", OPT_BIT(SCPS_OPT_ADAGRAD_MOMENTUM), HP_DOUBLE,
     offsetof(scps_optimizer_spec, exponent)},
    {"use_nesterov", OPT_BIT(SCPS_OPT_ADAGRAD_MOMENTUM), HP_BOOL,
     offsetof(scps_optimizer_spec, use_nesterov)},
    {"beta_1", OPT_BIT(SCPS_OPT_ADAM), HP_DOUBLE, offsetof(scps_optimizer_spec, beta1)},
    {"beta_2", OPT_BIT(SCPS_OPT_ADAM), HP_DOUBLE, offsetof(scps_optimizer_spec, beta2)},
    {"b1", OPT_BIT(SCPS_OPT_LAPROP), HP_DOUBLE, offsetof(scps_optimizer_spec, beta1)},
    {"b2", OPT_BIT(SCPS_OPT_LAPROP), HP_DOUBLE, offsetof(scps_optimizer_spec, beta2)},
    {"eps", OPT_BIT(SCPS_OPT_LAPROP), HP_DOUBLE, offsetof(scps_optimizer_spec, epsilon)},
    {"learning_rate_power", OPT_BIT(SCPS_OPT_FTRL), HP_DOUBLE,
     offsetof(scps_optimizer_spec, learning_rate_power)},
    {"l1", OPT_BIT(SCPS_OPT_FTRL) | OPT_BIT(SCPS_OPT_F2A), HP_DOUBLE,
     offsetof(scps_optimizer_spec, l1)},
    {"l2", OPT_BIT(SCPS_OPT_FTRL) | OPT_BIT(SCPS_OPT_F2A), HP_DOUBLE,
     offsetof(scps_optimizer_spec, l2)},
    {"beta", OPT_BIT(SCPS_OPT_FTRL), HP_DOUBLE, offsetof(scps_optimizer_spec, beta)},
    {"multiply_linear_by_learning_rate", OPT_BIT(SCPS_OPT_FTRL), HP_BOOL,
     offsetof(scps_optimizer_spec, multiply_linear_by_learning_rate)},
    {"initial_linear", OPT_BIT(SCPS_OPT_FTRL), HP_DOUBLE,
     offsetof(scps_optimizer_spec, initial_linear)},
    {"rho", OPT_BIT(SCPS_OPT_F2A), HP_DOUBLE, offsetof(scps_optimizer_spec, rho)},
    {"max_lr_multiplier", OPT_BIT(SCPS_OPT_F2A), HP_DOUBLE,
     offsetof(scps_optimizer_spec, max_lr_multiplier)},
};

static const hyper_param *find_hyper_param(const char *key, size_t key_len) {
  for (size_t i = 0; i < COUNT(hyper_params); i++)
    if (strlen(hyper_params[i].name) == key_len && !memcmp(hyper_params[i].name, key, key_len))
      return &hyper_params[i];
  return NULL;
}

static void list_hyper_params(scps_optimizer_type type, char *buf, size_t cap) {
  size_t used = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < COUNT(hyper_params) && used < cap; i++)
    if (hyper_params[i].optimizers & OPT_BIT(type))
      used += (size_t)snprintf(buf + used, cap - used, ", %s", hyper_params[i].name);
}

static int parse_optimizer(const scps_json *obj, const char *path, scps_optimizer_spec *o,
                           scps_error *err) {
  char name[32], p[PATH_MAX_LEN];
  const scps_json *tv;
  int rc = member(obj, path, "type", true, &tv, err);
  if (rc) return rc;
  join(p, path, "type");
  size_t n;
  const char *s = scps__json_string(tv, &n);
  scps_optimizer_type type;
  if (!s || n >= sizeof name || strlen(s) != n || scps__optimizer_from_name(s, &type))
    return bad_value(err, p, tv,
                     "an optimizer: sgd, adagrad, adagrad_momentum, adam, ftrl, laprop or f2a");
  memcpy(name, s, n + 1);
  scps__optimizer_spec_init(o, type);
  for (size_t i = 0; i < scps__json_length(obj); i++) {
    const char *key;
    size_t key_len;
    const scps_json *v = scps__json_member(obj, i, &key, &key_len);
    if (key_len == 4 && !memcmp(key, "type", 4)) continue;
    const hyper_param *hp = find_hyper_param(key, key_len);
    if (!hp || !(hp->optimizers & OPT_BIT(type))) {
      char list[256];
      list_hyper_params(type, list, sizeof list);
      return scps_error_set(err, SCPS_EINVAL,
                            "%s: '%.64s' is %s hyper-parameter of %s (line %u); it takes: type%s",
                            path, key, hp ? "not a" : "not a known", name, scps__json_line(v), list);
    }
    join(p, path, hp->name);
    char *field = (char *)o + hp->offset;
    if (hp->kind == HP_BOOL) {
      bool b;
      if (scps__json_bool(v, &b)) return bad_value(err, p, v, "true or false");
      memcpy(field, &b, sizeof b);
    } else {
      double d;
      if (scps__json_number(v, &d)) return bad_value(err, p, v, "a number");
      memcpy(field, &d, sizeof d);
    }
  }
  return 0;
}

/* ---- tables and features ---- */

static int parse_initializer(const scps_json *obj, const char *path, scps_initializer_spec *in,
                             scps_error *err) {
  char p[PATH_MAX_LEN];
  const scps_json *tv;
  int rc = member(obj, path, "type", true, &tv, err);
  if (rc) return rc;
  join(p, path, "type");
  size_t n;
  const char *s = scps__json_string(tv, &n);
  scps_initializer_type type;
  if (!s || strlen(s) != n || scps__initializer_from_name(s, &type))
    return bad_value(err, p, tv,
                     "an initializer: uniform, normal, truncated_normal, constant or zeros");
  memset(in, 0, sizeof *in);
  in->type = type;
  /* Each type takes exactly its one parameter (none for zeros), plus a seed. */
  const char *param = NULL;
  double *field = NULL;
  switch (type) {
  case SCPS_INIT_UNIFORM: param = "scale", field = &in->scale; break;
  case SCPS_INIT_NORMAL:
  case SCPS_INIT_TRUNCATED_NORMAL: param = "stddev", field = &in->stddev; break;
  case SCPS_INIT_CONSTANT: param = "value", field = &in->value; break;
  case SCPS_INIT_ZEROS: break;
  }
  const char *allowed[] = {"type", "seed", param};
  rc = check_keys(obj, path, allowed, param ? 3 : 2, err);
  if (rc) return rc;
  if (param) {
    rc = get_double(obj, path, param, true, field, err);
    if (rc) return rc;
  }
  int64_t seed = 0;
  rc = get_int(obj, path, "seed", false, 0, INT64_MAX, &seed, NULL, err);
  in->seed = (uint64_t)seed;
  return rc;
}

/* A storage format name at obj.key (optional) into buf. */
static int get_format(const scps_json *obj, const char *path, const char *key, char *buf, scps_error *err) {
  char p[PATH_MAX_LEN];
  int rc = get_name(obj, path, key, false, buf, SCPS_STORAGE_NAME_MAX, err);
  if (rc) return rc;
  scps_storage_format f;
  const scps_json *v;
  if ((rc = member(obj, path, key, false, &v, err))) return rc;
  join(p, path, key);
  if (v && scps__storage_parse(buf, &f, NULL))
    return bad_value(err, p, v, "a storage format: float32, bfloat16 or eXmY (e4m3, e5m2, e3m0b-2)");
  return 0;
}

/* "storage_format" (a name scps__storage_parse reads), "storage_rounding"
 * ("stochastic" or "nearest") and "slot_formats" (an object from the
 * optimizer's slot names to formats), all optional. */
static int parse_storage(const scps_json *obj, const char *path, scps_table_spec *t, scps_error *err) {
  char p[PATH_MAX_LEN];
  int rc = get_format(obj, path, "storage_format", t->storage_format, err);
  if (rc) return rc;
  const scps_json *v;
  if ((rc = get_object(obj, path, "slot_formats", false, &v, err))) return rc;
  if (v) {
    const char *names[SCPS_MAX_SLOTS];
    const int slots = scps__optimizer_num_slots(t->optimizer.type);
    for (int k = 0; k < slots; k++) names[k] = scps__optimizer_slot_name(t->optimizer.type, k);
    join(p, path, "slot_formats");
    if ((rc = check_keys(v, p, names, (size_t)slots, err))) return rc;
    for (int k = 0; k < slots; k++)
      if ((rc = get_format(v, p, names[k], t->slot_formats[k], err))) return rc;
  }
  if ((rc = member(obj, path, "storage_rounding", false, &v, err)) || !v) return rc;
  const char *s = cstr(v);
  join(p, path, "storage_rounding");
  if (s && !strcmp(s, "stochastic")) t->storage_rounding = SCPS_ROUNDING_STOCHASTIC;
  else if (s && !strcmp(s, "nearest")) t->storage_rounding = SCPS_ROUNDING_NEAREST;
  else return bad_value(err, p, v, "a storage rounding: stochastic or nearest");
  return 0;
}

/* given[0], given[1]: whether the table sets max_ids_per_partition,
 * max_unique_ids_per_partition. */
static int parse_table(const scps_json *obj, const char *path, scps_table_spec *t, bool given[2],
                       scps_error *err) {
  static const char *const allowed[] = {"name",  "vocabulary_size", "embedding_dim",
                                        "combiner", "optimizer",    "initializer",
                                        "max_ids_per_partition", "max_unique_ids_per_partition",
                                        "clip", "stack", "storage_format", "storage_rounding", "slot_formats"};
  char p[PATH_MAX_LEN];
  if (scps__json_typeof(obj) != SCPS_JSON_OBJECT) return bad_value(err, path, obj, "an object");
  int rc = check_keys(obj, path, allowed, COUNT(allowed), err);
  if (rc) return rc;
  scps__table_spec_init(t);
  if ((rc = get_name(obj, path, "name", true, t->name, sizeof t->name, err))) return rc;
  int64_t i;
  if ((rc = get_int(obj, path, "vocabulary_size", true, 1, INT64_MAX, &i, NULL, err))) return rc;
  t->vocabulary_size = i;
  if ((rc = get_int(obj, path, "embedding_dim", true, 1, INT32_MAX, &i, NULL, err))) return rc;
  t->embedding_dim = (int32_t)i;

  const scps_json *v;
  if ((rc = member(obj, path, "combiner", true, &v, err))) return rc;
  const char *s = cstr(v);
  join(p, path, "combiner");
  if (!s || scps__combiner_from_name(s, &t->combiner))
    return bad_value(err, p, v, "a combiner: sum, mean or sqrtn");

  if ((rc = get_object(obj, path, "optimizer", true, &v, err))) return rc;
  join(p, path, "optimizer");
  if ((rc = parse_optimizer(v, p, &t->optimizer, err))) return rc;

  if ((rc = get_object(obj, path, "initializer", true, &v, err))) return rc;
  join(p, path, "initializer");
  if ((rc = parse_initializer(v, p, &t->initializer, err))) return rc;

  bool present;
  if ((rc = get_int(obj, path, "max_ids_per_partition", false, 1, INT32_MAX, &i, &present, err)))
    return rc;
  if (present) t->max_ids_per_partition = (int32_t)i;
  given[0] = present;
  if ((rc = get_int(obj, path, "max_unique_ids_per_partition", false, 1, INT32_MAX, &i, &present,
                    err)))
    return rc;
  if (present) t->max_unique_ids_per_partition = (int32_t)i;
  given[1] = present;

  if ((rc = member(obj, path, "clip", false, &v, err))) return rc;
  if (v) {
    join(p, path, "clip");
    double lo, hi;
    if (scps__json_length(v) != 2 || scps__json_typeof(v) != SCPS_JSON_ARRAY ||
        scps__json_number(scps__json_at(v, 0), &lo) || scps__json_number(scps__json_at(v, 1), &hi))
      return bad_value(err, p, v, "[min, max] (two numbers)");
    if (lo > hi || fabs(lo) > FLT_MAX || fabs(hi) > FLT_MAX)
      return scps_error_set(err, SCPS_EINVAL,
                            "%s: [%g, %g] must have min <= max, both within float range", p, lo,
                            hi);
    t->clip = true;
    t->clip_min = (float)lo;
    t->clip_max = (float)hi;
  }
  if ((rc = get_name(obj, path, "stack", false, t->stack, sizeof t->stack, err))) return rc;
  return parse_storage(obj, path, t, err);
}

static int parse_feature(const scps_json *obj, const char *path, const scps_workload *w,
                         scps_feature_spec *f, scps_feature_draw *d, scps_error *err) {
  static const char *const allowed[] = {"name", "table", "valency", "weighted"};
  char p[PATH_MAX_LEN];
  if (scps__json_typeof(obj) != SCPS_JSON_OBJECT) return bad_value(err, path, obj, "an object");
  int rc = check_keys(obj, path, allowed, COUNT(allowed), err);
  if (rc) return rc;
  scps__feature_spec_init(f);
  memset(d, 0, sizeof *d);
  if ((rc = get_name(obj, path, "name", true, f->name, sizeof f->name, err))) return rc;
  if ((rc = get_name(obj, path, "table", true, f->table, sizeof f->table, err))) return rc;
  int t = scps__find_table(w->tables, w->n_tables, f->table);
  if (t < 0) {
    join(p, path, "table");
    return scps_error_set(err, SCPS_EINVAL, "%s: no table named \"%s\"", p, f->table);
  }
  f->batch_size = w->batch_size;
  f->output_dim = w->tables[t].embedding_dim;

  const scps_json *v;
  if ((rc = member(obj, path, "valency", true, &v, err))) return rc;
  join(p, path, "valency");
  int64_t lo, hi;
  if (scps__json_typeof(v) == SCPS_JSON_ARRAY) {
    if (scps__json_length(v) != 2 || scps__json_int(scps__json_at(v, 0), &lo) ||
        scps__json_int(scps__json_at(v, 1), &hi))
      return bad_value(err, p, v, "an integer or [min, max] (two integers)");
    if (lo < 0 || hi < 1 || lo > hi || hi > SCPS_WORKLOAD_VALENCY_MAX)
      return scps_error_set(err, SCPS_EINVAL,
                            "%s: [%lld, %lld] must satisfy 0 <= min <= max, 1 <= max <= %d", p,
                            (long long)lo, (long long)hi, SCPS_WORKLOAD_VALENCY_MAX);
    f->valency = 0;
  } else {
    if (scps__json_int(v, &lo) || lo < 1 || lo > SCPS_WORKLOAD_VALENCY_MAX) {
      char expected[96];
      snprintf(expected, sizeof expected, "an integer in [1, %d] or [min, max]",
               SCPS_WORKLOAD_VALENCY_MAX);
      return bad_value(err, p, v, expected);
    }
    hi = lo;
    f->valency = (int32_t)lo;
  }
  d->valency_min = (int32_t)lo;
  d->valency_max = (int32_t)hi;
  return get_bool(obj, path, "weighted", false, &d->weighted, err);
}

static int parse_ids(const scps_json *ids, scps_workload *w, scps_error *err) {
  const char *path = "ids";
  const scps_json *v;
  int rc = member(ids, path, "distribution", true, &v, err);
  if (rc) return rc;
  const char *s = cstr(v);
  if (s && !strcmp(s, "zipf")) w->distribution = SCPS_IDS_ZIPF;
  else if (s && !strcmp(s, "uniform")) w->distribution = SCPS_IDS_UNIFORM;
  else return bad_value(err, "ids.distribution", v, "a distribution: zipf or uniform");
  bool zipf = w->distribution == SCPS_IDS_ZIPF;
  static const char *const allowed[] = {"distribution", "seed", "exponent"};
  if ((rc = check_keys(ids, path, allowed, zipf ? 3 : 2, err))) return rc;
  if (zipf) {
    if ((rc = get_double(ids, path, "exponent", true, &w->exponent, err))) return rc;
    /* Zipf over 1, 2, 3, ... is only a distribution for exponent > 1. */
    if (!(w->exponent > 1.0) || w->exponent > SCPS_WORKLOAD_ZIPF_EXPONENT_MAX)
      return scps_error_set(err, SCPS_EINVAL, "ids.exponent: %g must be in (1, %g] for zipf",
                            w->exponent, SCPS_WORKLOAD_ZIPF_EXPONENT_MAX);
  }
  int64_t seed = 0;
  rc = get_int(ids, path, "seed", false, 0, INT64_MAX, &seed, NULL, err);
  w->seed = (uint64_t)seed;
  return rc;
}

/* The rule scps_workload.h states: limits a table leaves unset cover every
 * batch its declaration admits, and are never below the spec default. */
static void size_limits(scps_workload *w, const bool (*given)[2]) {
  for (int t = 0; t < w->n_tables; t++) {
    scps_table_spec *ts = &w->tables[t];
    int64_t ids = 0;
    for (int f = 0; f < w->n_features; f++)
      if (!strcmp(w->features[f].table, ts->name)) ids += (int64_t)w->batch_size * w->draws[f].valency_max;
    if (ids > INT32_MAX) ids = INT32_MAX;
    int64_t unique = ids < ts->vocabulary_size ? ids : ts->vocabulary_size;
    if (!given[t][0] && ids > ts->max_ids_per_partition) ts->max_ids_per_partition = (int32_t)ids;
    if (!given[t][1] && unique > ts->max_unique_ids_per_partition)
      ts->max_unique_ids_per_partition = (int32_t)unique;
  }
}

/* *given (allocated here, freed by the caller): which limits each table sets. */
static int parse_content(const scps_json *root, scps_workload *w, bool (**given_out)[2], scps_error *err) {
  static const char *const allowed[] = {"name",   "description", "batch_size",
                                        "ids",    "tables",      "features"};
  if (scps__json_typeof(root) != SCPS_JSON_OBJECT)
    return bad_value(err, "(top level)", root, "an object");
  int rc = check_keys(root, "", allowed, COUNT(allowed), err);
  if (rc) return rc;

  const scps_json *v;
  if ((rc = member(root, "", "name", false, &v, err))) return rc;
  if (v) {
    size_t n;
    const char *s = scps__json_string(v, &n);
    if (!s || n >= sizeof w->name || strlen(s) != n) {
      char expected[64];
      snprintf(expected, sizeof expected, "a string of at most %zu bytes", sizeof w->name - 1);
      return bad_value(err, "name", v, expected);
    }
    memcpy(w->name, s, n + 1);
  }
  if ((rc = member(root, "", "description", false, &v, err))) return rc;
  if (v) {
    size_t n;
    const char *s = scps__json_string(v, &n);
    if (!s) return bad_value(err, "description", v, "a string");
    char *copy = malloc(n + 1);
    if (!copy) return scps_error_set(err, SCPS_ENOMEM, "description: out of memory");
    memcpy(copy, s, n + 1);
    free(w->description);
    w->description = copy;
  }

  int64_t batch;
  if ((rc = get_int(root, "", "batch_size", true, 1, INT32_MAX, &batch, NULL, err))) return rc;
  w->batch_size = (int32_t)batch;

  /* Only programs that generate ids need it (scps__workload_gen_create). */
  if ((rc = get_object(root, "", "ids", false, &v, err))) return rc;
  w->has_ids = v != NULL;
  if (v && (rc = parse_ids(v, w, err))) return rc;

  if ((rc = member(root, "", "tables", true, &v, err))) return rc;
  if (scps__json_typeof(v) != SCPS_JSON_ARRAY || scps__json_length(v) == 0 ||
      scps__json_length(v) > INT_MAX)
    return bad_value(err, "tables", v, "a non-empty array of tables");
  size_t n_tables = scps__json_length(v);
  w->tables = calloc(n_tables, sizeof *w->tables);
  if (!w->tables) return scps_error_set(err, SCPS_ENOMEM, "tables: out of memory");
  bool(*given)[2] = *given_out = calloc(n_tables, sizeof *given);
  if (!given) return scps_error_set(err, SCPS_ENOMEM, "tables: out of memory");
  for (size_t i = 0; i < n_tables; i++) {
    char p[PATH_MAX_LEN];
    snprintf(p, sizeof p, "tables[%zu]", i);
    if ((rc = parse_table(scps__json_at(v, i), p, &w->tables[i], given[i], err))) return rc;
    int dup = scps__find_table(w->tables, (int)i, w->tables[i].name);
    if (dup >= 0)
      return scps_error_set(err, SCPS_EEXIST, "%s.name: \"%s\" already names tables[%d]", p,
                            w->tables[i].name, dup);
    w->n_tables = (int)i + 1;
  }

  if ((rc = member(root, "", "features", true, &v, err))) return rc;
  if (scps__json_typeof(v) != SCPS_JSON_ARRAY || scps__json_length(v) == 0 ||
      scps__json_length(v) > INT_MAX)
    return bad_value(err, "features", v, "a non-empty array of features");
  size_t n_features = scps__json_length(v);
  w->features = calloc(n_features, sizeof *w->features);
  w->draws = calloc(n_features, sizeof *w->draws);
  if (!w->features || !w->draws) return scps_error_set(err, SCPS_ENOMEM, "features: out of memory");
  for (size_t i = 0; i < n_features; i++) {
    char p[PATH_MAX_LEN];
    snprintf(p, sizeof p, "features[%zu]", i);
    if ((rc = parse_feature(scps__json_at(v, i), p, w, &w->features[i], &w->draws[i], err)))
      return rc;
    int dup = scps__find_feature(w->features, (int)i, w->features[i].name);
    if (dup >= 0)
      return scps_error_set(err, SCPS_EEXIST, "%s.name: \"%s\" already names features[%d]", p,
                            w->features[i].name, dup);
    w->n_features = (int)i + 1;
  }
  size_limits(w, (const bool(*)[2])*given_out);
  return scps__specs_validate(w->tables, w->n_tables, w->features, w->n_features, err);
}

static int parse_workload(const scps_json *root, scps_workload *w, scps_error *err) {
  bool(*given)[2] = NULL;
  int rc = parse_content(root, w, &given, err);
  free(given);
  return rc;
}

int scps__workload_from_json(const scps_json *root, scps_workload **out, scps_error *err) {
  *out = NULL;
  scps_workload *w = calloc(1, sizeof *w);
  if (w) w->description = calloc(1, 1);
  if (!w || !w->description) {
    free(w);
    return scps_error_set(err, SCPS_ENOMEM, "out of memory for a workload");
  }
  int rc = parse_workload(root, w, err);
  if (rc) {
    scps__workload_destroy(w);
    return rc;
  }
  *out = w;
  return 0;
}

int scps__workload_parse(const char *text, size_t len, scps_workload **out, scps_error *err) {
  *out = NULL;
  scps_json *root;
  int rc = scps__json_parse(text, len, &root, err);
  if (rc) return rc;
  rc = scps__workload_from_json(root, out, err);
  scps__json_destroy(root);
  return rc;
}

/* ---- writing specs back in the same format ---- */

static void write_optimizer(scps_jsonw *w, const scps_optimizer_spec *o) {
  scps__jsonw_printf(w, "{\"type\": \"%s\"", scps__optimizer_name(o->type));
  for (size_t i = 0; i < COUNT(hyper_params); i++) {
    const hyper_param *hp = &hyper_params[i];
    if (!(hp->optimizers & OPT_BIT(o->type))) continue;
    const char *field = (const char *)o + hp->offset;
    scps__jsonw_printf(w, ", \"%s\": ", hp->name);
    if (hp->kind == HP_BOOL) {
      bool b;
      memcpy(&b, field, sizeof b);
      scps__jsonw_printf(w, "%s", b ? "true" : "false");
    } else {
      double d;
      memcpy(&d, field, sizeof d);
      scps__jsonw_double(w, d);
    }
  }
  scps__jsonw_printf(w, "}");
}

static void write_initializer(scps_jsonw *w, const scps_initializer_spec *in) {
  scps__jsonw_printf(w, "{\"type\": \"%s\"", scps__initializer_name(in->type));
  switch (in->type) {
  case SCPS_INIT_UNIFORM: scps__jsonw_printf(w, ", \"scale\": "), scps__jsonw_double(w, in->scale); break;
  case SCPS_INIT_NORMAL:
  case SCPS_INIT_TRUNCATED_NORMAL:
    scps__jsonw_printf(w, ", \"stddev\": "), scps__jsonw_double(w, in->stddev);
    break;
  case SCPS_INIT_CONSTANT: scps__jsonw_printf(w, ", \"value\": "), scps__jsonw_double(w, in->value); break;
  case SCPS_INIT_ZEROS: break;
  }
  if (in->seed) scps__jsonw_printf(w, ", \"seed\": %llu", (unsigned long long)in->seed);
  scps__jsonw_printf(w, "}");
}

static void write_table(scps_jsonw *w, const scps_table_spec *t) {
  scps__jsonw_printf(w, "{\"name\": ");
  scps__jsonw_string(w, t->name);
  scps__jsonw_printf(w, ", \"vocabulary_size\": %lld, \"embedding_dim\": %d, \"combiner\": \"%s\",",
                    (long long)t->vocabulary_size, t->embedding_dim,
                    scps__combiner_name(t->combiner));
  scps__jsonw_printf(w, "\n     \"optimizer\": ");
  write_optimizer(w, &t->optimizer);
  scps__jsonw_printf(w, ",\n     \"initializer\": ");
  write_initializer(w, &t->initializer);
  scps__jsonw_printf(w, ",\n     \"max_ids_per_partition\": %d, \"max_unique_ids_per_partition\": %d",
                    t->max_ids_per_partition, t->max_unique_ids_per_partition);
  if (t->clip) {
    /* Floats widened to double print exactly and narrow back to themselves. */
    scps__jsonw_printf(w, ", \"clip\": [");
    scps__jsonw_double(w, t->clip_min);
    scps__jsonw_printf(w, ", ");
    scps__jsonw_double(w, t->clip_max);
    scps__jsonw_printf(w, "]");
  }
  if (t->stack[0]) {
    scps__jsonw_printf(w, ", \"stack\": ");
    scps__jsonw_string(w, t->stack);
  }
  if (t->storage_format[0]) {
    scps__jsonw_printf(w, ", \"storage_format\": ");
    scps__jsonw_string(w, t->storage_format);
  }
  bool slots = false;
  for (int k = 0; k < SCPS_MAX_SLOTS; k++) {
    if (!t->slot_formats[k][0]) continue;
    scps__jsonw_printf(w, slots ? ", " : ", \"slot_formats\": {");
    slots = true;
    scps__jsonw_string(w, scps__optimizer_slot_name(t->optimizer.type, k));
    scps__jsonw_printf(w, ": ");
    scps__jsonw_string(w, t->slot_formats[k]);
  }
  if (slots) scps__jsonw_printf(w, "}");
  if (t->storage_rounding == SCPS_ROUNDING_NEAREST) scps__jsonw_printf(w, ", \"storage_rounding\": \"nearest\"");
  scps__jsonw_printf(w, "}");
}

int scps__workload_write_specs(const scps_table_spec *tables, int n_tables,
                              const scps_feature_spec *features, int n_features, scps_jsonw *w,
                              scps_error *err) {
  if (n_tables < 1 || n_features < 1)
    return scps_error_set(err, SCPS_EINVAL, "specs: %d tables and %d features; a workload needs at least one of each",
                          n_tables, n_features);
  for (int i = 0; i < n_tables; i++)
    if (tables[i].initializer.seed > (uint64_t)SCPS_JSON_INT_MAX)
      return scps_error_set(err, SCPS_EINVAL,
                            "table '%s': initializer seed %llu is above 2^53 and not exact in JSON",
                            tables[i].name, (unsigned long long)tables[i].initializer.seed);
  const int32_t batch = features[0].batch_size;
  for (int i = 0; i < n_features; i++) {
    const scps_feature_spec *f = &features[i];
    int t = scps__find_table(tables, n_tables, f->table);
    if (t < 0)
      return scps_error_set(err, SCPS_EINVAL, "feature '%s': no table named '%s'", f->name, f->table);
    if (f->batch_size != batch)
      return scps_error_set(err, SCPS_EINVAL,
                            "feature '%s': batch_size %d differs from feature '%s' (%d); the "
                            "workload format has one batch size",
                            f->name, f->batch_size, features[0].name, batch);
    if (f->output_dim != tables[t].embedding_dim)
      return scps_error_set(err, SCPS_EINVAL,
                            "feature '%s': output_dim %d is not table '%s' embedding_dim %d, which "
                            "the workload format implies",
                            f->name, f->output_dim, tables[t].name, tables[t].embedding_dim);
  }
  scps__jsonw_printf(w, "{\"batch_size\": %d, \"ids\": {\"distribution\": \"uniform\", \"seed\": 0},\n  \"tables\": [",
                    batch);
  for (int i = 0; i < n_tables; i++) {
    scps__jsonw_printf(w, "%s\n    ", i ? "," : "");
    write_table(w, &tables[i]);
  }
  scps__jsonw_printf(w, "],\n  \"features\": [");
  for (int i = 0; i < n_features; i++) {
    const scps_feature_spec *f = &features[i];
    scps__jsonw_printf(w, "%s\n    {\"name\": ", i ? "," : "");
    scps__jsonw_string(w, f->name);
    scps__jsonw_printf(w, ", \"table\": ");
    scps__jsonw_string(w, f->table);
    if (f->valency > 0) scps__jsonw_printf(w, ", \"valency\": %d}", f->valency);
    else scps__jsonw_printf(w, ", \"valency\": [0, 1]}");
  }
  scps__jsonw_printf(w, "]}");
  return scps__jsonw_finish(w, "specs", err);
}

int scps__workload_load(const char *path, scps_workload **out, scps_error *err) {
  *out = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) return scps_error_set(err, SCPS_EIO, "%s: cannot open: %s", path, strerror(errno));
  char *buf = NULL;
  size_t len = 0, cap = 0;
  int rc = 0;
  for (;;) {
    if (len == cap) {
      if (cap >= SCPS_WORKLOAD_FILE_MAX) {
        rc = scps_error_set(err, SCPS_EINVAL, "%s: larger than %zu bytes", path,
                            SCPS_WORKLOAD_FILE_MAX);
        break;
      }
      size_t ncap = cap ? cap * 2 : 64 << 10;
      char *nb = realloc(buf, ncap);
      if (!nb) {
        rc = scps_error_set(err, SCPS_ENOMEM, "%s: out of memory reading", path);
        break;
      }
      buf = nb;
      cap = ncap;
    }
    size_t n = fread(buf + len, 1, cap - len, f);
    len += n;
    if (n == 0) {
      if (ferror(f)) rc = scps_error_set(err, SCPS_EIO, "%s: read error", path);
      break;
    }
  }
  fclose(f);
  if (!rc) {
    scps_error local;
    scps_error_clear(&local);
    rc = scps__workload_parse(buf, len, out, &local);
    if (rc) scps_error_set(err, rc, "%s: %s", path, local.msg);
  }
  free(buf);
  return rc;
}

void scps__workload_destroy(scps_workload *w) {
  if (!w) return;
  free(w->description);
  free(w->tables);
  free(w->features);
  free(w->draws);
  free(w);
}
