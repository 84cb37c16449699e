#include "scps_fingerprint.h"

#include <stdlib.h>
#include <string.h>

#include "scps_sha256.h"
#include "scps_spec_pb.h"

int scps__fingerprint(const scps_topology *topology, const scps_table_spec *tables, int n_tables,
                     const scps_feature_spec *features, int n_features, uint8_t out[SCPS_FINGERPRINT_BYTES],
                     scps_error *err) {
  if (n_tables < 0 || n_features < 0)
    return scps_error_set(err, SCPS_EINVAL, "fingerprint: %d tables, %d features", n_tables, n_features);
  scps_table_spec *t = malloc(sizeof *t * (size_t)(n_tables ? n_tables : 1));
  scps_feature_spec *f = malloc(sizeof *f * (size_t)(n_features ? n_features : 1));
  scps_cluster_pb *c = NULL;
  uint8_t *packed = NULL;
  int rc = t && f ? 0 : scps_error_set(err, SCPS_ENOMEM, "fingerprint: out of memory");
  if (!rc) {
    if (n_tables) memcpy(t, tables, sizeof *t * (size_t)n_tables);
    if (n_features) memcpy(f, features, sizeof *f * (size_t)n_features);
    for (int i = 0; i < n_tables; i++) scps__table_spec_canonical(&t[i]);
    for (int i = 0; i < n_features; i++) scps__feature_spec_canonical(&f[i], tables, n_tables);
    rc = scps__cluster_pb_create(topology, t, n_tables, f, n_features, &c, err);
  }
  if (!rc) {
    size_t n = scps__v1__cluster_spec__get_packed_size(&c->msg);
    packed = malloc(n ? n : 1);
    if (!packed) rc = scps_error_set(err, SCPS_ENOMEM, "fingerprint: out of memory");
    else {
      scps__v1__cluster_spec__pack(&c->msg, packed);
      scps__sha256(packed, n, out);
    }
  }
  free(packed);
  scps__cluster_pb_destroy(c);
  free(f);
  free(t);
  return rc;
}
