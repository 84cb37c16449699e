/* libFuzzer target for the declaration decoder a GetConfig request's
 * `expected` goes through on the server: protobuf-c's unpack, then
 * scps_spec_pb's conversion, validation and the diff against a served one. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "scps.pb-c.h"
#include "scps_spec_pb.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* What the server compares a valid declaration with: one table, one feature. */
static void served(scps_topology *topo, scps_table_spec *t, scps_feature_spec *f) {
  *topo = (scps_topology){2, 2, (int64_t)1 << 30};
  scps__table_spec_init(t);
  snprintf(t->name, sizeof t->name, "t");
  t->vocabulary_size = 1000;
  t->embedding_dim = 8;
  t->combiner = SCPS_COMBINER_SUM;
  scps__optimizer_spec_init(&t->optimizer, SCPS_OPT_SGD);
  scps__feature_spec_init(f);
  snprintf(f->name, sizeof f->name, "f");
  snprintf(f->table, sizeof f->table, "t");
  f->batch_size = 16;
  f->valency = 2;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Scps__V1__GetConfigRequest *req = scps__v1__get_config_request__unpack(NULL, size, data);
  if (!req) return 0;
  if (req->expected) {
    scps_cluster_spec cs;
    scps_error err;
    if (scps__cluster_spec_from_pb(req->expected, &cs, &err) == 0) {
      if (scps__topology_validate(&cs.topology, &err) == 0 &&
          scps__specs_validate(cs.tables, cs.n_tables, cs.features, cs.n_features, &err) == 0) {
        scps_topology topo;
        scps_table_spec t;
        scps_feature_spec f;
        served(&topo, &t, &f);
        char diff[512];
        (void)scps__specs_diff(&cs.topology, cs.tables, cs.n_tables, cs.features, cs.n_features, &topo, &t, 1, &f,
                              1, "expected", "this process", diff, sizeof diff);
      }
      scps__cluster_spec_free(&cs);
    }
  }
  scps__v1__get_config_request__free_unpacked(req, NULL);
  return 0;
}
