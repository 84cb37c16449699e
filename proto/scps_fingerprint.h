/* scps__fingerprint: the configuration fingerprint every Lookup and
 * ApplyGradients carries: SHA-256 of the declaration in canonical form. */
#ifndef SCPS_FINGERPRINT_H
#define SCPS_FINGERPRINT_H

#include <stdint.h>

#include "scps_spec.h"

#define SCPS_FINGERPRINT_BYTES 32

/* SHA-256 of the ClusterSpec packed from copies of the specs made canonical
 * (scps__table_spec_canonical, scps__feature_spec_canonical), so declarations
 * that scps__specs_diff finds equal (output_dim 0 or explicit, fields the
 * table's optimizer or initializer ignores) have one fingerprint, and the
 * processes of a cluster started from such files agree. Fails only with
 * SCPS_ENOMEM or the counts scps__cluster_pb_create refuses. */
int scps__fingerprint(const scps_topology *topology, const scps_table_spec *tables, int n_tables,
                     const scps_feature_spec *features, int n_features, uint8_t out[SCPS_FINGERPRINT_BYTES],
                     scps_error *err);

#endif
