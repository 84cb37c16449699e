/* TEMPORARY (branch h-lib): the client engineer's accessors land in their own
 * files; this file goes at merge. */
#include <string.h>

#include "scps_client.h"

int scps_client_n_features(const scps_client *c) { return scps_client_layout(c)->n_features; }

const char *scps_client_feature_name(const scps_client *c, int f) {
  const scps_layout *l = scps_client_layout(c);
  return f >= 0 && f < l->n_features ? l->feature_specs[f].name : NULL;
}

int scps_client_feature_width(const scps_client *c, int f) {
  const scps_layout *l = scps_client_layout(c);
  if (f < 0 || f >= l->n_features) return 0;
  return l->table_specs[l->features[f].table].embedding_dim;
}

int scps_client_batch_size(const scps_client *c) {
  const scps_layout *l = scps_client_layout(c);
  return l->n_features > 0 ? l->feature_specs[0].batch_size : 0;
}

void scps_client_options_init(scps_client_options *o) { memset(o, 0, sizeof *o); }
