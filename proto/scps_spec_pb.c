#include "scps_spec_pb.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- enums ---- */

int scps__combiner_from_pb(Scps__V1__Combiner v, scps_combiner *out) {
  switch (v) {
  case SCPS__V1__COMBINER__COMBINER_SUM: *out = SCPS_COMBINER_SUM; return 0;
  case SCPS__V1__COMBINER__COMBINER_MEAN: *out = SCPS_COMBINER_MEAN; return 0;
  case SCPS__V1__COMBINER__COMBINER_SQRTN: *out = SCPS_COMBINER_SQRTN; return 0;
  default: return SCPS_EINVAL;
  }
}

Scps__V1__Combiner scps__combiner_to_pb(scps_combiner c) {
  switch (c) {
  case SCPS_COMBINER_SUM: return SCPS__V1__COMBINER__COMBINER_SUM;
  case SCPS_COMBINER_MEAN: return SCPS__V1__COMBINER__COMBINER_MEAN;
  case SCPS_COMBINER_SQRTN: return SCPS__V1__COMBINER__COMBINER_SQRTN;
  }
  return SCPS__V1__COMBINER__COMBINER_UNSPECIFIED;
}

int scps__optimizer_type_from_pb(Scps__V1__OptimizerType v, scps_optimizer_type *out) {
  switch (v) {
  case SCPS__V1__OPTIMIZER_TYPE__OPTIMIZER_TYPE_SGD: *out = SCPS_OPT_SGD; return 0;
  case SCPS__V1__OPTIMIZER_TYPE__OPTIMIZER_TYPE_ADAGRAD: *out = SCPS_OPT_ADAGRAD; return 0;
  case SCPS__V1__OPTIMIZER_TYPE__OPTIMIZER_TYPE_ADAM: *out = SCPS_OPT_ADAM; return 0;
  case SCPS__V1__OPTIMIZER_TYPE__OPTIMIZER_TYPE_FTRL: *out = SCPS_OPT_FTRL; return 0;
  case SCPS__V1__OPTIMIZER_TYPE__OPTIMIZER_TYPE_F2A: *out = SCPS_OPT_F2A; return 0;
  case SCPS__V1__OPTIMIZER_TYPE__OPTIMIZER_TYPE_ADAGRAD_MOMENTUM:
    *out = SCPS_OPT_ADAGRAD_MOMENTUM;
    return 0;
  case SCPS__V1__OPTIMIZER_TYPE__OPTIMIZER_TYPE_LAPROP: *out = SCPS_OPT_LAPROP; return 0;
  default: return SCPS_EINVAL;
  }
}

Scps__V1__OptimizerType scps__optimizer_type_to_pb(scps_optimizer_type t) {
  switch (t) {
  case SCPS_OPT_SGD: return SCPS__V1__OPTIMIZER_TYPE__OPTIMIZER_TYPE_SGD;
  case SCPS_OPT_ADAGRAD: return SCPS__V1__OPTIMIZER_TYPE__OPTIMIZER_TYPE_ADAGRAD;
  case SCPS_OPT_ADAM: return SCPS__V1__OPTIMIZER_TYPE__OPTIMIZER_TYPE_ADAM;
  case SCPS_OPT_FTRL: return SCPS__V1__OPTIMIZER_TYPE__OPTIMIZER_TYPE_FTRL;
  case SCPS_OPT_F2A: return SCPS__V1__OPTIMIZER_TYPE__OPTIMIZER_TYPE_F2A;
  case SCPS_OPT_ADAGRAD_MOMENTUM: return SCPS__V1__OPTIMIZER_TYPE__OPTIMIZER_TYPE_ADAGRAD_MOMENTUM;
  case SCPS_OPT_LAPROP: return SCPS__V1__OPTIMIZER_TYPE__OPTIMIZER_TYPE_LAPROP;
  }
  return SCPS__V1__OPTIMIZER_TYPE__OPTIMIZER_TYPE_UNSPECIFIED;
}

int scps__initializer_type_from_pb(Scps__V1__InitializerType v, scps_initializer_type *out) {
  switch (v) {
  case SCPS__V1__INITIALIZER_TYPE__INITIALIZER_TYPE_ZEROS: *out = SCPS_INIT_ZEROS; return 0;
  case SCPS__V1__INITIALIZER_TYPE__INITIALIZER_TYPE_CONSTANT: *out = SCPS_INIT_CONSTANT; return 0;
  case SCPS__V1__INITIALIZER_TYPE__INITIALIZER_TYPE_UNIFORM: *out = SCPS_INIT_UNIFORM; return 0;
  case SCPS__V1__INITIALIZER_TYPE__INITIALIZER_TYPE_NORMAL: *out = SCPS_INIT_NORMAL; return 0;
  case SCPS__V1__INITIALIZER_TYPE__INITIALIZER_TYPE_TRUNCATED_NORMAL:
    *out = SCPS_INIT_TRUNCATED_NORMAL;
    return 0;
  default: return SCPS_EINVAL;
  }
}

Scps__V1__InitializerType scps__initializer_type_to_pb(scps_initializer_type t) {
  switch (t) {
  case SCPS_INIT_ZEROS: return SCPS__V1__INITIALIZER_TYPE__INITIALIZER_TYPE_ZEROS;
  case SCPS_INIT_CONSTANT: return SCPS__V1__INITIALIZER_TYPE__INITIALIZER_TYPE_CONSTANT;
  case SCPS_INIT_UNIFORM: return SCPS__V1__INITIALIZER_TYPE__INITIALIZER_TYPE_UNIFORM;
  case SCPS_INIT_NORMAL: return SCPS__V1__INITIALIZER_TYPE__INITIALIZER_TYPE_NORMAL;
  case SCPS_INIT_TRUNCATED_NORMAL:
    return SCPS__V1__INITIALIZER_TYPE__INITIALIZER_TYPE_TRUNCATED_NORMAL;
  }
  return SCPS__V1__INITIALIZER_TYPE__INITIALIZER_TYPE_UNSPECIFIED;
}

/* ---- struct -> message ---- */

/* Sets a hyper-parameter and its presence; the oneof case value is the
 * field number, which protoc-c names <FIELD>_PRESENT_<FIELD>. */
#define HP_TO_PB(field, CASE)                                                                  \
  do {                                                                                         \
    out->field##_present_case = SCPS__V1__OPTIMIZER_SPEC__##CASE##_PRESENT_##CASE;             \
    out->field = o->field;                                                                     \
  } while (0)

void scps__optimizer_spec_to_pb(const scps_optimizer_spec *o, Scps__V1__OptimizerSpec *out) {
  scps__v1__optimizer_spec__init(out);
  out->type = scps__optimizer_type_to_pb(o->type);
  HP_TO_PB(learning_rate, LEARNING_RATE);
  HP_TO_PB(initial_accumulator, INITIAL_ACCUMULATOR);
  HP_TO_PB(momentum, MOMENTUM);
  HP_TO_PB(beta1, BETA1);
  HP_TO_PB(beta2, BETA2);
  HP_TO_PB(epsilon, EPSILON);
  HP_TO_PB(exponent, EXPONENT);
  out->use_nesterov = o->use_nesterov;
  HP_TO_PB(learning_rate_power, LEARNING_RATE_POWER);
  HP_TO_PB(l1, L1);
  HP_TO_PB(l2, L2);
  HP_TO_PB(beta, BETA);
  out->multiply_linear_by_learning_rate = o->multiply_linear_by_learning_rate;
  HP_TO_PB(initial_linear, INITIAL_LINEAR);
  HP_TO_PB(rho, RHO);
  HP_TO_PB(max_lr_multiplier, MAX_LR_MULTIPLIER);
}

void scps__initializer_spec_to_pb(const scps_initializer_spec *in, Scps__V1__InitializerSpec *out) {
  scps__v1__initializer_spec__init(out);
  out->type = scps__initializer_type_to_pb(in->type);
  out->value = in->value;
  out->scale = in->scale;
  out->stddev = in->stddev;
  out->seed = in->seed;
}

/* The messages only read these strings (pack); the casts drop const for
 * protoc-c's char * fields, they never lead to a write. */
void scps__table_spec_to_pb(const scps_table_spec *t, scps_table_pb *out) {
  scps__v1__table_spec__init(&out->msg);
  scps__initializer_spec_to_pb(&t->initializer, &out->initializer);
  scps__optimizer_spec_to_pb(&t->optimizer, &out->optimizer);
  out->msg.name = (char *)t->name;
  out->msg.vocabulary_size = t->vocabulary_size;
  out->msg.embedding_dim = t->embedding_dim;
  out->msg.initializer = &out->initializer;
  out->msg.optimizer = &out->optimizer;
  out->msg.combiner = scps__combiner_to_pb(t->combiner);
  out->msg.max_ids_per_partition = t->max_ids_per_partition;
  out->msg.max_unique_ids_per_partition = t->max_unique_ids_per_partition;
  out->msg.clip = t->clip;
  out->msg.clip_min = t->clip_min;
  out->msg.clip_max = t->clip_max;
  out->msg.stack = (char *)t->stack;
  out->msg.storage_format = (char *)t->storage_format;
  out->msg.storage_rounding = (Scps__V1__StorageRounding)t->storage_rounding;
  /* Up to the last slot with a format: the ones before it may be "". */
  size_t n = 0;
  for (int k = 0; k < SCPS_MAX_SLOTS; k++) {
    out->slot_formats[k] = (char *)t->slot_formats[k];
    if (t->slot_formats[k][0]) n = (size_t)k + 1;
  }
  out->msg.n_slot_formats = n;
  out->msg.slot_formats = out->slot_formats;
}

void scps__feature_spec_to_pb(const scps_feature_spec *f, Scps__V1__FeatureSpec *out) {
  scps__v1__feature_spec__init(out);
  out->name = (char *)f->name;
  out->table = (char *)f->table;
  out->batch_size = f->batch_size;
  out->valency = f->valency;
  out->output_dim = f->output_dim;
}

void scps__topology_to_pb(const scps_topology *t, Scps__V1__Topology *out) {
  scps__v1__topology__init(out);
  out->num_processes = t->num_processes;
  out->sc_per_process = t->sc_per_process;
  out->sc_memory_bytes = t->sc_memory_bytes;
}

int scps__cluster_pb_create(const scps_topology *topology, const scps_table_spec *tables,
                           int n_tables, const scps_feature_spec *features, int n_features,
                           scps_cluster_pb **out, scps_error *err) {
  *out = NULL;
  if (n_tables < 0 || n_tables > SCPS_CLUSTER_MAX_TABLES)
    return scps_error_set(err, SCPS_EINVAL, "cluster spec: %d tables not in [0, %d]", n_tables,
                          SCPS_CLUSTER_MAX_TABLES);
  if (n_features < 0 || n_features > SCPS_CLUSTER_MAX_FEATURES)
    return scps_error_set(err, SCPS_EINVAL, "cluster spec: %d features not in [0, %d]",
                          n_features, SCPS_CLUSTER_MAX_FEATURES);
  scps_cluster_pb *c = calloc(1, sizeof *c);
  if (!c) return scps_error_set(err, SCPS_ENOMEM, "cluster spec: out of memory");
  if (n_tables > 0) {
    c->tables = calloc((size_t)n_tables, sizeof *c->tables);
    c->table_ptrs = calloc((size_t)n_tables, sizeof *c->table_ptrs);
  }
  if (n_features > 0) {
    c->features = calloc((size_t)n_features, sizeof *c->features);
    c->feature_ptrs = calloc((size_t)n_features, sizeof *c->feature_ptrs);
  }
  if ((n_tables > 0 && (!c->tables || !c->table_ptrs)) ||
      (n_features > 0 && (!c->features || !c->feature_ptrs))) {
    scps__cluster_pb_destroy(c);
    return scps_error_set(err, SCPS_ENOMEM, "cluster spec: out of memory for %d tables, %d features",
                          n_tables, n_features);
  }
  scps__v1__cluster_spec__init(&c->msg);
  scps__topology_to_pb(topology, &c->topology);
  c->msg.topology = &c->topology;
  for (int i = 0; i < n_tables; i++) {
    scps__table_spec_to_pb(&tables[i], &c->tables[i]);
    c->table_ptrs[i] = &c->tables[i].msg;
  }
  for (int i = 0; i < n_features; i++) {
    scps__feature_spec_to_pb(&features[i], &c->features[i]);
    c->feature_ptrs[i] = &c->features[i];
  }
  c->msg.n_tables = (size_t)n_tables;
  c->msg.tables = c->table_ptrs;
  c->msg.n_features = (size_t)n_features;
  c->msg.features = c->feature_ptrs;
  *out = c;
  return 0;
}

void scps__cluster_pb_destroy(scps_cluster_pb *c) {
  if (!c) return;
  free(c->tables);
  free(c->table_ptrs);
  free(c->features);
  free(c->feature_ptrs);
  free(c);
}

/* ---- message -> struct ---- */

/* Copies a wire string into a fixed name buffer. `what` and `owner` say
 * whose field it is for the message ("table 't3': stack"). protobuf-c gives
 * "" rather than NULL for unset strings; NULL is accepted as "" anyway for
 * hand-built messages. */
static int copy_name(char dst[SCPS_NAME_MAX], const char *src, const char *what,
                     scps_error *err) {
  if (!src) src = "";
  size_t len = strlen(src);
  if (len >= SCPS_NAME_MAX)
    return scps_error_set(err, SCPS_EINVAL, "%s of %zu bytes ('%.32s...') exceeds %d bytes", what,
                          len, src, SCPS_NAME_MAX - 1);
  memcpy(dst, src, len + 1);
  return 0;
}

#define HP_FROM_PB(field)                                                                      \
  do {                                                                                         \
    if (pb->field##_present_case) {                                                            \
      if (!isfinite(pb->field))                                                                \
        return scps_error_set(err, SCPS_EINVAL, "table '%s': optimizer." #field " is %g", table, \
                              pb->field);                                                      \
      out->field = pb->field;                                                                  \
    }                                                                                          \
  } while (0)

int scps__optimizer_spec_from_pb(const Scps__V1__OptimizerSpec *pb, const char *table,
                                scps_optimizer_spec *out, scps_error *err) {
  if (!pb) return scps_error_set(err, SCPS_EINVAL, "table '%s': optimizer missing", table);
  scps_optimizer_type type;
  if (scps__optimizer_type_from_pb(pb->type, &type) != 0)
    return scps_error_set(err, SCPS_EINVAL, "table '%s': optimizer.type %d is %s", table,
                          (int)pb->type, pb->type == 0 ? "unspecified" : "not a known OptimizerType");
  scps__optimizer_spec_init(out, type);
  HP_FROM_PB(learning_rate);
  HP_FROM_PB(initial_accumulator);
  HP_FROM_PB(momentum);
  HP_FROM_PB(beta1);
  HP_FROM_PB(beta2);
  HP_FROM_PB(epsilon);
  HP_FROM_PB(exponent);
  out->use_nesterov = pb->use_nesterov;
  HP_FROM_PB(learning_rate_power);
  HP_FROM_PB(l1);
  HP_FROM_PB(l2);
  HP_FROM_PB(beta);
  out->multiply_linear_by_learning_rate = pb->multiply_linear_by_learning_rate;
  HP_FROM_PB(initial_linear);
  HP_FROM_PB(rho);
  HP_FROM_PB(max_lr_multiplier);
  return 0;
}

#define FINITE_FROM_PB(msgname, field)                                                         \
  do {                                                                                         \
    if (!isfinite(pb->field))                                                                  \
      return scps_error_set(err, SCPS_EINVAL, "table '%s': " msgname #field " is %g", table,     \
                            (double)pb->field);                                                \
    out->field = pb->field;                                                                    \
  } while (0)

int scps__initializer_spec_from_pb(const Scps__V1__InitializerSpec *pb, const char *table,
                                  scps_initializer_spec *out, scps_error *err) {
  if (!pb) return scps_error_set(err, SCPS_EINVAL, "table '%s': initializer missing", table);
  memset(out, 0, sizeof *out);
  if (scps__initializer_type_from_pb(pb->type, &out->type) != 0)
    return scps_error_set(err, SCPS_EINVAL, "table '%s': initializer.type %d is %s", table,
                          (int)pb->type,
                          pb->type == 0 ? "unspecified" : "not a known InitializerType");
  FINITE_FROM_PB("initializer.", value);
  FINITE_FROM_PB("initializer.", scale);
  FINITE_FROM_PB("initializer.", stddev);
  out->seed = pb->seed;
  return 0;
}

int scps__table_spec_from_pb(const Scps__V1__TableSpec *pb, scps_table_spec *out, scps_error *err) {
  scps__table_spec_init(out);
  if (!pb) return scps_error_set(err, SCPS_EINVAL, "table missing");
  int rc = copy_name(out->name, pb->name, "table name", err);
  if (rc) return rc;
  const char *table = out->name;
  char what[SCPS_NAME_MAX + 32];
  snprintf(what, sizeof what, "table '%s': stack name", table);
  rc = copy_name(out->stack, pb->stack, what, err);
  if (rc) return rc;
  out->vocabulary_size = pb->vocabulary_size;
  out->embedding_dim = pb->embedding_dim;
  rc = scps__initializer_spec_from_pb(pb->initializer, table, &out->initializer, err);
  if (rc) return rc;
  rc = scps__optimizer_spec_from_pb(pb->optimizer, table, &out->optimizer, err);
  if (rc) return rc;
  if (scps__combiner_from_pb(pb->combiner, &out->combiner) != 0)
    return scps_error_set(err, SCPS_EINVAL, "table '%s': combiner %d is %s", table,
                          (int)pb->combiner,
                          pb->combiner == 0 ? "unspecified" : "not a known Combiner");
  /* 0 keeps scps__table_spec_init's default, as the proto promises. */
  if (pb->max_ids_per_partition != 0) out->max_ids_per_partition = pb->max_ids_per_partition;
  if (pb->max_unique_ids_per_partition != 0)
    out->max_unique_ids_per_partition = pb->max_unique_ids_per_partition;
  out->clip = pb->clip;
  FINITE_FROM_PB("", clip_min);
  FINITE_FROM_PB("", clip_max);
  const char *storage = pb->storage_format ? pb->storage_format : "";
  if (strlen(storage) >= sizeof out->storage_format)
    return scps_error_set(err, SCPS_EINVAL, "table '%s': storage_format '%.32s...' is not a storage format name",
                          table, storage);
  snprintf(out->storage_format, sizeof out->storage_format, "%s", storage);
  out->storage_rounding = (scps_rounding)pb->storage_rounding;
  if (pb->n_slot_formats > SCPS_MAX_SLOTS)
    return scps_error_set(err, SCPS_EINVAL, "table '%s': slot_formats has %zu entries; no optimizer has more than %d slots",
                          table, pb->n_slot_formats, SCPS_MAX_SLOTS);
  for (size_t k = 0; k < pb->n_slot_formats; k++) {
    const char *f = pb->slot_formats[k] ? pb->slot_formats[k] : "";
    if (strlen(f) >= sizeof out->slot_formats[k])
      return scps_error_set(err, SCPS_EINVAL, "table '%s': slot_formats[%zu] '%.32s...' is not a storage format name",
                            table, k, f);
    snprintf(out->slot_formats[k], sizeof out->slot_formats[k], "%s", f);
  }
  return 0;
}

int scps__feature_spec_from_pb(const Scps__V1__FeatureSpec *pb, scps_feature_spec *out,
                              scps_error *err) {
  scps__feature_spec_init(out);
  if (!pb) return scps_error_set(err, SCPS_EINVAL, "feature missing");
  int rc = copy_name(out->name, pb->name, "feature name", err);
  if (rc) return rc;
  char what[SCPS_NAME_MAX + 32];
  snprintf(what, sizeof what, "feature '%s': table name", out->name);
  rc = copy_name(out->table, pb->table, what, err);
  if (rc) return rc;
  out->batch_size = pb->batch_size;
  out->valency = pb->valency;
  out->output_dim = pb->output_dim;
  return 0;
}

int scps__topology_from_pb(const Scps__V1__Topology *pb, scps_topology *out, scps_error *err) {
  if (!pb) return scps_error_set(err, SCPS_EINVAL, "topology missing");
  out->num_processes = pb->num_processes;
  out->sc_per_process = pb->sc_per_process;
  out->sc_memory_bytes = pb->sc_memory_bytes;
  return 0;
}

int scps__cluster_spec_from_pb(const Scps__V1__ClusterSpec *pb, scps_cluster_spec *out,
                              scps_error *err) {
  memset(out, 0, sizeof *out);
  if (pb->n_tables > SCPS_CLUSTER_MAX_TABLES)
    return scps_error_set(err, SCPS_EINVAL, "cluster spec: %zu tables exceed %d", pb->n_tables,
                          SCPS_CLUSTER_MAX_TABLES);
  if (pb->n_features > SCPS_CLUSTER_MAX_FEATURES)
    return scps_error_set(err, SCPS_EINVAL, "cluster spec: %zu features exceed %d",
                          pb->n_features, SCPS_CLUSTER_MAX_FEATURES);
  scps_cluster_spec c = {0};
  scps_error sub;
  int rc = scps__topology_from_pb(pb->topology, &c.topology, &sub);
  if (rc) return scps_error_set(err, rc, "cluster spec: %s", sub.msg);
  if (pb->n_tables > 0) {
    c.tables = calloc(pb->n_tables, sizeof *c.tables);
    if (!c.tables)
      return scps_error_set(err, SCPS_ENOMEM, "cluster spec: out of memory for %zu tables",
                            pb->n_tables);
  }
  c.n_tables = (int)pb->n_tables;
  for (int i = 0; i < c.n_tables; i++) {
    rc = scps__table_spec_from_pb(pb->tables[i], &c.tables[i], &sub);
    if (rc) {
      scps__cluster_spec_free(&c);
      return scps_error_set(err, rc, "tables[%d]: %s", i, sub.msg);
    }
  }
  if (pb->n_features > 0) {
    c.features = calloc(pb->n_features, sizeof *c.features);
    if (!c.features) {
      scps__cluster_spec_free(&c);
      return scps_error_set(err, SCPS_ENOMEM, "cluster spec: out of memory for %zu features",
                            pb->n_features);
    }
  }
  c.n_features = (int)pb->n_features;
  for (int i = 0; i < c.n_features; i++) {
    rc = scps__feature_spec_from_pb(pb->features[i], &c.features[i], &sub);
    if (rc) {
      scps__cluster_spec_free(&c);
      return scps_error_set(err, rc, "features[%d]: %s", i, sub.msg);
    }
  }
  *out = c;
  return 0;
}

void scps__cluster_spec_free(scps_cluster_spec *c) {
  if (!c) return;
  free(c->tables);
  free(c->features);
  memset(c, 0, sizeof *c);
}
