/* scps_ckpt_owner: whose a checkpoint is: the owner (fingerprint, declaration)
 * and whether a manifest, or any manifest of a step directory, is the owner's. */
#ifndef SCPS_CKPT_OWNER_H
#define SCPS_CKPT_OWNER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "scps_ckpt_manifest.h"
#include "scps_error.h"
#include "scps_layout.h"

/* A server writes and prunes checkpoints below its --checkpoint-dir only,
 * and retention touches only checkpoints whose manifest it can verify as
 * its own cluster's. Who is asking: whose checkpoints retention may prune
 * and a start may restore without being told which. */
typedef struct scps_checkpoint_owner {
  int32_t process_index; /* whose manifest (manifest.p<i>.json) decides */
  /* The cluster's configuration fingerprint (GetConfig's
   * config_fingerprint), written into every manifest this owner saves. */
  uint8_t fingerprint[SCPS_CHECKPOINT_FINGERPRINT_BYTES];
  bool has_fingerprint;
  /* This cluster's declaration, compared with manifests that carry no
   * fingerprint (written before manifests had one, or by `scps-admin
   * checkpoint convert`): such a one is this owner's when its topology and
   * specs equal these exactly. NULL: those are never this owner's. */
  const scps_layout *layout;
  /* Told of every step directory left alone because it could not be
   * verified as this owner's (why names the reason); may be NULL. */
  void (*note)(void *ctx, const char *step_dir, const char *why);
  void *note_ctx;
} scps_checkpoint_owner;

/* Whether a checkpoint of this fingerprint (has_fp; fp), topology and specs
 * is the owner's: the owner's fingerprint, or none and the owner's exact
 * declaration. When not, why says what differs. */
bool scps__ckpt_owner_test(bool has_fp, const uint8_t *fp, const scps_topology *t, const scps_workload *w,
                          const scps_checkpoint_owner *own, char *why, size_t len);
/* Tells the owner's note callback (if any) that dir was left alone. */
void scps__ckpt_owner_note(const scps_checkpoint_owner *own, const char *dir, const char *why);
/* Whether one of the manifests in the step directory dfd (dir names it)
 * verifies and is not the owner's (*which, why); unverifiable ones prove
 * nothing. */
bool scps__ckpt_owner_foreign(int dfd, const char *dir, const scps_checkpoint_owner *own, int32_t *which, char *why,
                             size_t len);
/* SCPS_EMISMATCH naming it when scps__ckpt_owner_foreign finds one, else 0. */
int scps__ckpt_owner_refuse_foreign(int dfd, const char *dir, const scps_checkpoint_owner *own, scps_error *err);

#endif
