/* scps_spec_pb: the one place that converts between the spec structs of
 * scps_spec.h and their scps.v1 protobuf messages (scps.proto), both ways. */
#ifndef SCPS_SPEC_PB_H
#define SCPS_SPEC_PB_H

#include "scps.pb-c.h"
#include "scps_spec.h"

/* GetConfigResponse.wire_revision of this build: the request forms its
 * scps-server takes and its libscps may send (scps.proto says which). */
#define SCPS_WIRE_REVISION 4

/* Most tables or features one ClusterSpec may carry. */
#define SCPS_CLUSTER_MAX_TABLES 65536
#define SCPS_CLUSTER_MAX_FEATURES 65536

/* Memory of messages built by the _to_pb functions:
 * - Nothing comes from protobuf-c's allocator; never pass these messages to
 *   a *__free_unpacked function.
 * - Strings point into the spec structs they were built from (no copy): the
 *   message is valid while those structs live unchanged.
 * - Sub-messages live in the holder the caller passes (scps_table_pb) or in
 *   the heap object (scps_cluster_pb) that scps__cluster_pb_destroy frees.
 * Every field, including every optimizer hyper-parameter, is written
 * explicitly, so _from_pb of a packed and unpacked _to_pb gives back equal
 * structs.
 *
 * The _from_pb functions copy into caller-owned structs and keep no pointer
 * into the message, which the caller frees as usual (for an unpacked one,
 * with its *__free_unpacked). They check what the wire can carry but the
 * structs cannot: enum values (0 and unknown ones are rejected), names too
 * long (>= SCPS_NAME_MAX bytes), missing sub-messages, non-finite floats, and
 * counts. They do not check semantic ranges (positive sizes, unique names,
 * features naming existing tables): scps__specs_validate and
 * scps__topology_validate (and scps__layout_create, which calls them) do.
 * Errors are SCPS_EINVAL with a message naming the table or feature, the
 * field and the value. */

/* Storage for one table's message tree; caller-owned, nothing to free. */
typedef struct scps_table_pb {
  Scps__V1__TableSpec msg;
  Scps__V1__InitializerSpec initializer;
  Scps__V1__OptimizerSpec optimizer;
  char *slot_formats[SCPS_MAX_SLOTS];
} scps_table_pb;

/* A whole ClusterSpec; msg is the message to pack. */
typedef struct scps_cluster_pb {
  Scps__V1__ClusterSpec msg;
  Scps__V1__Topology topology;
  scps_table_pb *tables;
  Scps__V1__TableSpec **table_ptrs;
  Scps__V1__FeatureSpec *features;
  Scps__V1__FeatureSpec **feature_ptrs;
} scps_cluster_pb;

/* Struct -> message; out->msg borrows t's strings. */
void scps__table_spec_to_pb(const scps_table_spec *t, scps_table_pb *out);
void scps__feature_spec_to_pb(const scps_feature_spec *f, Scps__V1__FeatureSpec *out);
void scps__topology_to_pb(const scps_topology *t, Scps__V1__Topology *out);
void scps__optimizer_spec_to_pb(const scps_optimizer_spec *o, Scps__V1__OptimizerSpec *out);
void scps__initializer_spec_to_pb(const scps_initializer_spec *in, Scps__V1__InitializerSpec *out);

/* Message -> struct. A table's unset optimizer hyper-parameters take the
 * defaults of scps__optimizer_spec_init for its type, and
 * max_ids_per_partition / max_unique_ids_per_partition of 0 take the
 * defaults of scps__table_spec_init. For the optimizer and initializer,
 * `table` is the owning table's name, used in error messages. */
int scps__table_spec_from_pb(const Scps__V1__TableSpec *pb, scps_table_spec *out, scps_error *err);
int scps__feature_spec_from_pb(const Scps__V1__FeatureSpec *pb, scps_feature_spec *out,
                              scps_error *err);
int scps__topology_from_pb(const Scps__V1__Topology *pb, scps_topology *out, scps_error *err);
int scps__optimizer_spec_from_pb(const Scps__V1__OptimizerSpec *pb, const char *table,
                                scps_optimizer_spec *out, scps_error *err);
int scps__initializer_spec_from_pb(const Scps__V1__InitializerSpec *pb, const char *table,
                                  scps_initializer_spec *out, scps_error *err);

/* Arrays -> one heap ClusterSpec (strings borrowed from the arrays, which
 * must outlive it). Fails only with SCPS_EINVAL for negative or too large
 * counts and SCPS_ENOMEM. */
int scps__cluster_pb_create(const scps_topology *topology, const scps_table_spec *tables,
                           int n_tables, const scps_feature_spec *features, int n_features,
                           scps_cluster_pb **out, scps_error *err);
void scps__cluster_pb_destroy(scps_cluster_pb *c);

/* A ClusterSpec as plain structs; the arrays are heap-allocated and released
 * by scps__cluster_spec_free. */
typedef struct scps_cluster_spec {
  scps_topology topology;
  int n_tables;
  scps_table_spec *tables;
  int n_features;
  scps_feature_spec *features;
} scps_cluster_spec;

/* Message -> structs. On failure out is left empty (nothing to free) and the
 * message names the list position too ("tables[3]: table 't3': ..."). */
int scps__cluster_spec_from_pb(const Scps__V1__ClusterSpec *pb, scps_cluster_spec *out,
                              scps_error *err);
void scps__cluster_spec_free(scps_cluster_spec *c);

/* Protobuf enum <-> spec enum. _from_pb returns SCPS_EINVAL (out untouched)
 * for values with no counterpart, the *_UNSPECIFIED zeros included; _to_pb
 * maps an out-of-range spec value to *_UNSPECIFIED, which the receiver
 * rejects. */
int scps__combiner_from_pb(Scps__V1__Combiner v, scps_combiner *out);
Scps__V1__Combiner scps__combiner_to_pb(scps_combiner c);
int scps__optimizer_type_from_pb(Scps__V1__OptimizerType v, scps_optimizer_type *out);
Scps__V1__OptimizerType scps__optimizer_type_to_pb(scps_optimizer_type t);
int scps__initializer_type_from_pb(Scps__V1__InitializerType v, scps_initializer_type *out);
Scps__V1__InitializerType scps__initializer_type_to_pb(scps_initializer_type t);

#endif
