#include "scps_ckpt_owner.h"

#include <stdio.h>
#include <string.h>

#define FINGERPRINT_KEY SCPS_CKPT_FINGERPRINT_KEY

static void hex_prefix(const uint8_t *fp, char out[13]) {
  for (int i = 0; i < 6; i++) snprintf(out + 2 * i, 3, "%02x", fp[i]);
}

bool scps__ckpt_owner_test(bool has_fp, const uint8_t *fp, const scps_topology *t, const scps_workload *w,
                          const scps_checkpoint_owner *own, char *why, size_t len) {
  if (has_fp && own->has_fingerprint) {
    if (!memcmp(fp, own->fingerprint, SCPS_CHECKPOINT_FINGERPRINT_BYTES)) return true;
    char theirs[13], ours[13];
    hex_prefix(fp, theirs);
    hex_prefix(own->fingerprint, ours);
    snprintf(why, len, "another cluster's (" FINGERPRINT_KEY " %s..., this cluster's %s...)", theirs, ours);
    return false;
  }
  const scps_layout *l = own->layout;
  if (!l) {
    snprintf(why, len, "its manifest carries no " FINGERPRINT_KEY " to verify it by");
    return false;
  }
  char msg[400];
  if (scps__specs_diff(t, w->tables, w->n_tables, w->features, w->n_features, &l->topology, l->table_specs,
                      l->n_tables, l->feature_specs, l->n_features, "checkpoint", "this cluster", msg, sizeof msg)) {
    snprintf(why, len, "another cluster's (%sdeclaration differs: %s)", has_fp ? "" : "no " FINGERPRINT_KEY "; its ",
             msg);
    return false;
  }
  return true;
}

void scps__ckpt_owner_note(const scps_checkpoint_owner *own, const char *dir, const char *why) {
  if (own->note) own->note(own->note_ctx, dir, why);
}

bool scps__ckpt_owner_foreign(int dfd, const char *dir, const scps_checkpoint_owner *own, int32_t *which, char *why,
                             size_t len) {
  int32_t idx[1024];
  int n = 0;
  if (scps__ckpt_manifest_indices(dfd, dir, idx, 1024, &n, NULL)) return false;
  bool foreign = false;
  for (int i = 0; i < n && !foreign; i++) {
    scps_ckpt_manifest mf = {0};
    if (scps__ckpt_manifest_load_at(dfd, dir, idx[i], &mf, NULL) == 0 &&
        !scps__ckpt_owner_test(mf.has_fingerprint, mf.fingerprint, &mf.topology, mf.specs, own, why, len)) {
      foreign = true;
      *which = idx[i];
    }
    scps__ckpt_manifest_free(&mf);
  }
  return foreign;
}

int scps__ckpt_owner_refuse_foreign(int dfd, const char *dir, const scps_checkpoint_owner *own, scps_error *err) {
  char why[700];
  int32_t p;
  if (!scps__ckpt_owner_foreign(dfd, dir, own, &p, why, sizeof why)) return 0;
  return scps_error_set(err, SCPS_EMISMATCH, "'%s' holds a checkpoint that is not this cluster's (manifest.p%d.json: %s); "
                        "it is not overwritten", dir, p, why);
}
