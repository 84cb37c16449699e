/* scps_client_engine: libscps seen through the engine's structures, for the
 * programs and tests of this repository only (never installed). */
#ifndef SCPS_CLIENT_ENGINE_H
#define SCPS_CLIENT_ENGINE_H

#include "scps_client.h"
#include "scps_layout.h"
#include "scps_prep.h"
#include "scps_spec.h"

/* The declaration a client expects, as engine specs: each server compares
 * it with its own. topology may be NULL with tables given: then only tables
 * and features are compared, with server 0's declaration, and the others
 * are given server 0's to compare. */
typedef struct scps_client_expected {
  const scps_topology *topology;
  const scps_table_spec *tables;
  int n_tables;
  const scps_feature_spec *features;
  int n_features;
} scps_client_expected;

/* scps_client_create with an expected declaration as engine specs instead of
 * o->expected_config (giving both fails with SCPS_EINVAL); expected NULL:
 * none. A topology, and features whose output_dim is not their table's,
 * which the workload format cannot say, are declared this way. */
int scps__client_create_expecting(const scps_client_options *o, const scps_client_expected *expected,
                                 scps_client **out, scps_error *err);

/* The cluster's layout: tables, features, stacks and topology. */
const scps_layout *scps__client_layout(const scps_client *c);

/* The preprocessing state: limits in force, last batch's stats (FDO). Its
 * limits start as the servers report them (GetConfig). Do not change them
 * while another thread prepares a batch. */
scps_prep *scps__client_prep(scps_client *c);

#endif
