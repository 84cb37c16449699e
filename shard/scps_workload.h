/* scps_workload: workload files (tables, features, batch, id distribution) as
 * engine specs, and those specs written back in the same format. */
#ifndef SCPS_WORKLOAD_H
#define SCPS_WORKLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "scps_error.h"
#include "scps_json.h"
#include "scps_jsonw.h"
#include "scps_prep.h"
#include "scps_spec.h"

/* Workload files larger than this are refused before being read. */
#define SCPS_WORKLOAD_FILE_MAX ((size_t)64 << 20)
/* Largest valency (fixed, or the upper bound of a ragged range). */
#define SCPS_WORKLOAD_VALENCY_MAX (1 << 16)
/* Largest Zipf exponent; above it essentially every id is 0 anyway, and the
 * sampler's constants (2^(s-1)) must stay finite. */
#define SCPS_WORKLOAD_ZIPF_EXPONENT_MAX 100.0
/* Largest number of ids one generated batch may need (sum over features of
 * batch_size * valency_max), which bounds the generator's buffers. */
#define SCPS_WORKLOAD_BATCH_IDS_MAX ((int64_t)1 << 27)

typedef enum scps_id_distribution {
  SCPS_IDS_ZIPF = 0,   /* Zipf(exponent) over 1, 2, 3, ..., then (x - 1) mod vocabulary_size */
  SCPS_IDS_UNIFORM = 1 /* uniform over [0, vocabulary_size) */
} scps_id_distribution;

/* How one feature's samples are drawn. */
typedef struct scps_feature_draw {
  int32_t valency_min, valency_max; /* equal for a fixed valency */
  bool weighted;                    /* weights uniform in (0, 1]; otherwise none (all 1) */
} scps_feature_draw;

/* A loaded workload; read-only for users. features[f].valency is the fixed
 * valency, or 0 when the file gave a [min, max] range (ragged input);
 * batch_size of every feature is the workload's and output_dim its table's
 * embedding_dim. */
typedef struct scps_workload {
  char name[SCPS_NAME_MAX];   /* "" when the file has none */
  char *description;          /* never NULL; "" when the file has none */
  int32_t batch_size;
  bool has_ids;               /* the file has an "ids" section; else distribution and seed are 0 */
  scps_id_distribution distribution;
  double exponent;            /* zipf only, in (1, SCPS_WORKLOAD_ZIPF_EXPONENT_MAX] */
  uint64_t seed;
  int n_tables;
  scps_table_spec *tables;
  int n_features;
  scps_feature_spec *features;
  scps_feature_draw *draws;   /* [n_features] */
} scps_workload;

/* Parses a workload (format: shared/workloads/README.md) and validates the
 * specs with scps__specs_validate. JSON syntax errors (duplicate keys
 * included) give SCPS_EPARSE with line and column; errors in content
 * (missing, unknown or mistyped keys, unknown names, out-of-range values,
 * hyper-parameters of another optimizer) give SCPS_EINVAL naming the JSON
 * path ("tables[2].optimizer.beta_1") and the value; a table or feature name
 * used twice gives SCPS_EEXIST. Besides the README's keys a table may set
 * max_ids_per_partition, max_unique_ids_per_partition, clip ([min, max]),
 * stack (an explicit stack name), an initializer seed, storage_format,
 * storage_rounding and slot_formats (an object by slot name). Optimizer
 * hyper-parameters left out take the reference defaults. The "ids" section
 * is optional here (a server does not draw ids); scps__workload_gen_create
 * requires it.
 *
 * Limits a table leaves unset are sized from the declaration, so that no
 * batch it admits can exceed them: max_ids_per_partition is the sum, over
 * the features reading the table, of batch_size x valency (the max of a
 * [min, max] range), which is what one source SparseCore sends one
 * destination when every sample and id falls there;
 * max_unique_ids_per_partition is that or vocabulary_size, whichever is
 * smaller. Neither is set below the spec default (scps__table_spec_init),
 * nor above INT32_MAX. */
int scps__workload_parse(const char *text, size_t len, scps_workload **out, scps_error *err);

/* The same from a document parsed already (the object a workload file holds),
 * e.g. one member of a larger file such as a checkpoint manifest. */
int scps__workload_from_json(const scps_json *root, scps_workload **out, scps_error *err);

/* Writes a spec set as a workload object that scps__workload_parse reads back
 * into equal specs (scps__specs_diff): every table field, hyper-parameter,
 * initializer, clip, stack and limit, doubles with 17 digits. The format has
 * one batch size and no per-feature output_dim, so specs whose features
 * differ in batch_size or whose output_dim is not the table's embedding_dim,
 * and seeds above 2^53 (not exact in JSON), give SCPS_EINVAL naming the
 * feature or table. "ids" is a placeholder (uniform, seed 0) and a ragged
 * feature gets valency [0, 1]: id distributions are not part of the specs. */
int scps__workload_write_specs(const scps_table_spec *tables, int n_tables,
                              const scps_feature_spec *features, int n_features, scps_jsonw *w,
                              scps_error *err);

/* Reads and parses a file; messages are prefixed with the path. */
int scps__workload_load(const char *path, scps_workload **out, scps_error *err);

void scps__workload_destroy(scps_workload *w);

/* The batch generator (scps_workload_gen.h), declared here too for the
 * programs that load a workload to draw batches from it. */
#include "scps_workload_gen.h"

#endif
