/* scps_spec: what a user declares: tables (TableSpec), the features that read
 * them (FeatureSpec), optimizers, initializers, combiners and the topology. */
#ifndef SCPS_SPEC_H
#define SCPS_SPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "scps_error.h"
#include "scps_storage.h"

#define SCPS_NAME_MAX 128
/* Largest embedding_dim a table may declare (stack dims round it up to 8). */
#define SCPS_DIM_MAX 4096
/* Most SparseCores one process may model. */
#define SCPS_SC_PER_PROCESS_MAX 64

typedef enum scps_combiner {
  SCPS_COMBINER_SUM = 0,
  SCPS_COMBINER_MEAN = 1,
  SCPS_COMBINER_SQRTN = 2
} scps_combiner;

/* Values follow jax-tpu-embedding's embedding_spec.proto where it has one;
 * LaProp has no entry there (it maps to CUSTOM) and gets 8 here. */
typedef enum scps_optimizer_type {
  SCPS_OPT_SGD = 1,
  SCPS_OPT_ADAGRAD = 2,
  SCPS_OPT_ADAM = 3,
  SCPS_OPT_FTRL = 4,
  SCPS_OPT_F2A = 5,
  SCPS_OPT_ADAGRAD_MOMENTUM = 6,
  SCPS_OPT_LAPROP = 8
} scps_optimizer_type;

#define SCPS_MAX_SLOTS 2

/* One flat record for every optimizer; scps__optimizer_spec_init() fills the
 * reference defaults of the chosen type and only that type's fields are read.
 * Field names are the reference's hyper-parameter names. */
typedef struct scps_optimizer_spec {
  scps_optimizer_type type;
  double learning_rate;
  double initial_accumulator;  /* adagrad, adagrad_momentum, ftrl, f2a */
  double momentum;             /* adagrad_momentum: k */
  double beta1;                /* adam beta_1, laprop b1 */
  double beta2;                /* adagrad_momentum beta2, adam beta_2, laprop b2 */
  double epsilon;              /* adagrad_momentum, adam, laprop eps */
  double exponent;             /* adagrad_momentum */
  bool use_nesterov;           /* adagrad_momentum */
  double learning_rate_power;  /* ftrl */
  double l1, l2;               /* ftrl, f2a */
  double beta;                 /* ftrl */
  bool multiply_linear_by_learning_rate; /* ftrl */
  double initial_linear;       /* ftrl linear slot */
  double rho;                  /* f2a */
  double max_lr_multiplier;    /* f2a */
} scps_optimizer_spec;

typedef enum scps_initializer_type {
  SCPS_INIT_ZEROS = 0,
  SCPS_INIT_CONSTANT = 1,
  SCPS_INIT_UNIFORM = 2,          /* U(-scale, scale) */
  SCPS_INIT_NORMAL = 3,           /* N(0, stddev^2) */
  SCPS_INIT_TRUNCATED_NORMAL = 4  /* N(0, stddev^2) redrawn outside 2 stddev */
} scps_initializer_type;

typedef struct scps_initializer_spec {
  scps_initializer_type type;
  double value;   /* constant */
  double scale;   /* uniform */
  double stddev;  /* normal, truncated_normal */
  uint64_t seed;  /* 0: derived from the table name */
} scps_initializer_spec;

/* How an update rounds a value into a storage format narrower than
 * float32 (scps.proto StorageRounding). */
typedef enum scps_rounding {
  SCPS_ROUNDING_STOCHASTIC = 0, /* unbiased: up with probability the fraction dropped */
  SCPS_ROUNDING_NEAREST = 1     /* to nearest, ties to even */
} scps_rounding;

typedef struct scps_table_spec {
  char name[SCPS_NAME_MAX];
  int64_t vocabulary_size;
  int32_t embedding_dim;
  scps_initializer_spec initializer;
  scps_optimizer_spec optimizer;
  scps_combiner combiner;
  /* Per-partition limits; scps__table_spec_init sets 256 each, a workload
   * file that leaves them out gets them sized from its declaration
   * (scps__workload_parse). */
  int32_t max_ids_per_partition;
  int32_t max_unique_ids_per_partition;
  bool clip;                            /* clamp rows to [clip_min, clip_max] after updates */
  float clip_min, clip_max;
  char stack[SCPS_NAME_MAX];            /* explicit stack name; "" = automatic stacking */
  /* Format the rows are kept in (scps__storage_parse; "" = float32) and the
   * rounding of updates into it. */
  char storage_format[SCPS_STORAGE_NAME_MAX];
  scps_rounding storage_rounding;
  /* Format of each optimizer slot k, in scps__optimizer_slot_name order
   * ("" = float32; "" past the optimizer's slots); updates round into them
   * as into storage_format. */
  char slot_formats[SCPS_MAX_SLOTS][SCPS_STORAGE_NAME_MAX];
} scps_table_spec;

typedef struct scps_feature_spec {
  char name[SCPS_NAME_MAX];
  char table[SCPS_NAME_MAX];
  int32_t batch_size; /* input_shape[0]; also the sample count of the output */
  int32_t valency;    /* input_shape[1]; 0 = ragged (any number of ids per sample) */
  int32_t output_dim; /* output_shape[1]; 0 = the table's embedding_dim */
} scps_feature_spec;

/* A cluster of num_processes scps-server processes, each simulating
 * sc_per_process SparseCores of sc_memory_bytes each. */
typedef struct scps_topology {
  int32_t num_processes;
  int32_t sc_per_process;
  int64_t sc_memory_bytes;
} scps_topology;

void scps__optimizer_spec_init(scps_optimizer_spec *o, scps_optimizer_type type);
void scps__table_spec_init(scps_table_spec *t);
void scps__feature_spec_init(scps_feature_spec *f);

/* Slots per row for an optimizer (0..SCPS_MAX_SLOTS), their names in the
 * reference's order, and their initial values. */
int scps__optimizer_num_slots(scps_optimizer_type type);
const char *scps__optimizer_slot_name(scps_optimizer_type type, int slot);
double scps__optimizer_slot_init(const scps_optimizer_spec *o, int slot);

/* Names used in workload files, flags and messages ("adagrad", "sqrtn", ...). */
const char *scps__optimizer_name(scps_optimizer_type type);
int scps__optimizer_from_name(const char *name, scps_optimizer_type *out);
const char *scps__combiner_name(scps_combiner c);
int scps__combiner_from_name(const char *name, scps_combiner *out);
const char *scps__initializer_name(scps_initializer_type t);
int scps__initializer_from_name(const char *name, scps_initializer_type *out);

/* True when two optimizer specs update rows identically (same type and the
 * hyper-parameters that type reads). */
bool scps__optimizer_spec_equal(const scps_optimizer_spec *a, const scps_optimizer_spec *b);

/* Checks one spec set: non-empty unique names, positive sizes, known enums,
 * finite hyper-parameters, features naming existing tables. Errors name the
 * table or feature and the offending value. */
int scps__specs_validate(const scps_table_spec *tables, int n_tables,
                        const scps_feature_spec *features, int n_features, scps_error *err);
int scps__topology_validate(const scps_topology *t, scps_error *err);

/* Index of the table/feature with that name, or -1. */
int scps__find_table(const scps_table_spec *tables, int n_tables, const char *name);
int scps__find_feature(const scps_feature_spec *features, int n_features, const char *name);


/* A table spec reduced to what it means: the optimizer hyper-parameters its
 * type does not read (scps.proto OptimizerSpec), the initializer fields its
 * type does not read and clip_min/clip_max without clip are set to 0, the
 * storage formats named canonically ("" for float32; the rounding is 0
 * when rows and slots are all float32: nothing is rounded), so
 * two declarations that serve the same tables compare (and fingerprint)
 * equal. */
void scps__table_spec_canonical(scps_table_spec *t);

/* A feature spec reduced likewise: output_dim 0 ("the table's
 * embedding_dim") becomes that embedding_dim; tables are the declaration's
 * (a feature naming no table is left as it is). */
void scps__feature_spec_canonical(scps_feature_spec *f, const scps_table_spec *tables, int n_tables);

#endif

/* Compares two declarations (topology, tables, features, in order) field by
 * field, each in its canonical form (scps__table_spec_canonical,
 * scps__feature_spec_canonical: what a field left at its meaningful default
 * means, and the fields the table's optimizer, initializer or clipping do
 * not read left out). Returns 0 when equal; otherwise 1 and writes the
 * first difference to msg, labelled with name_a and name_b ("table 't3'
 * embedding_dim: client 32, server 64"). */
int scps__specs_diff(const scps_topology *ta, const scps_table_spec *a, int na,
                    const scps_feature_spec *fa, int nfa, const scps_topology *tb,
                    const scps_table_spec *b, int nb, const scps_feature_spec *fb, int nfb,
                    const char *name_a, const char *name_b, char *msg, size_t len);
