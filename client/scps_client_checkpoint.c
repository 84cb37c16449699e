/* scps_client_checkpoint: cluster checkpoints through every server, asked for
 * by the trainer or, after a push a server answered with checkpoint_due, by
 * the servers (the automatic checkpoint and its recorded outcome). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scps.pb-c.h"
#include "scps_client_int.h"
#include "scps_confine.h"

#define MAX_DIRECTORY 4000 /* leaves room for the step directory and file names below PATH_MAX */

/* Totals of a Checkpoint every server saved. */
static void checkpoint_summary(const op *o, scps_client_checkpoint_result *res) {
  memset(res, 0, sizeof *res);
  res->step = o->step;
  for (int p = 0; p < o->n_rpcs; p++) {
    const Scps__V1__CheckpointResponse *m = (const Scps__V1__CheckpointResponse *)o->rpcs[p].reply;
    if (p == 0) snprintf(res->path, sizeof res->path, "%s", m->path);
    res->bytes += m->bytes;
    res->files += m->files;
    if (m->seconds > res->seconds) res->seconds = m->seconds;
  }
}

/* A checkpoint's result: the totals when every server saved, else which
 * servers failed and saved, and whether that settles the step. */
static int checkpoint_outcome(op *o, int first, int failures, scps_error *err) {
  if (first < 0) {
    if (o->result) checkpoint_summary(o, o->result);
    return 0;
  }
  const rpc *r = &o->rpcs[first];
  char bad[128], good[128];
  scps__client_op_list_servers(o, true, bad, sizeof bad);
  scps__client_op_list_servers(o, false, good, sizeof good);
  /* A deadline or a shutdown ends the call, not a save the server has
   * begun: that runs to completion, so only a refusal or a failed write
   * settles that the step is incomplete. */
  bool settled = false;
  for (int i = 0; i < o->n_rpcs; i++)
    settled |= o->rpcs[i].rc && o->rpcs[i].rc != SCPS_ETIMEDOUT && o->rpcs[i].rc != SCPS_EUNAVAIL &&
               o->rpcs[i].rc != SCPS_ECANCELLED;
  if (!settled)
    return scps_error_set(err, r->rc, "%s [checkpoint of step %lld: no answer from servers %s, saved by %s; if "
                          "they had begun the save it runs to completion there, so the step may yet be complete: "
                          "their Stats (checkpoints.last_step, .saving) or 'scps-admin checkpoint list' tells]",
                          r->err.msg, (long long)o->step, bad, good);
  return scps_error_set(err, r->rc, "%s [checkpoint of step %lld failed on servers %s, saved by %s: it is "
                        "incomplete and will not be restored]",
                        r->err.msg, (long long)o->step, bad, good);
}

/* Keeps the outcome of an automatic checkpoint for scps_client_auto_checkpoint. */
static void record_auto_checkpoint(scps_client *c, int rc, const scps_error *err,
                                   const scps_client_checkpoint_result *result) {
  pthread_mutex_lock(&c->mu);
  c->auto_any = true;
  c->auto_rc = rc;
  c->auto_err = *err;
  if (result) c->auto_result = *result;
  pthread_mutex_unlock(&c->mu);
}

/* The automatic checkpoint after an asynchronous push: its outcome is
 * kept, and the push's done is told the push's own, which succeeded. */
static bool checkpoint_due_then(op *o, int *rc, scps_error *err) {
  scps_client_checkpoint_result result;
  if (!*rc) checkpoint_summary(o, &result);
  record_auto_checkpoint(o->c, *rc, err, *rc ? NULL : &result);
  *rc = 0;
  scps_error_clear(err);
  return false;
}

static int checkpoint_start(scps_client *c, int64_t step, const char *directory, int64_t deadline_ms, bool blocking,
                            scps_client_done done, void *ud, op **out, scps_error *err) {
  if (step < 0) return scps_error_set(err, SCPS_EINVAL, "scps_client_checkpoint: step %lld must be >= 0", (long long)step);
  if (deadline_ms <= 0)
    return scps_error_set(err, SCPS_EINVAL, "scps_client_checkpoint: deadline_ms %lld must be > 0", (long long)deadline_ms);
  if (directory && strlen(directory) > MAX_DIRECTORY)
    return scps_error_set(err, SCPS_EINVAL, "scps_client_checkpoint: directory of %zu bytes, longer than %d",
                          strlen(directory), MAX_DIRECTORY);
  /* Servers save only below their --checkpoint-dir. */
  if (directory && scps__confine_check("scps_client_checkpoint: directory", directory, MAX_DIRECTORY, err))
    return err ? err->code : SCPS_EINVAL;
  const scps_layout *l = c->layout;
  int ns = l->n_stacks;
  Scps__V1__StackLimits *lim = calloc((size_t)(ns ? ns : 1), sizeof *lim);
  Scps__V1__StackLimits **limp = calloc((size_t)(ns ? ns : 1), sizeof *limp);
  op *o = lim && limp ? scps__client_op_create(c, SCPS_M_CHECKPOINT, c->n, deadline_ms) : NULL;
  int rc = o ? 0 : scps_error_set(err, SCPS_ENOMEM, "scps_client_checkpoint: out of memory");
  /* The limits in force are the prep's, which FDO may have raised. */
  pthread_mutex_lock(&c->prep_mu);
  for (int st = 0; !rc && st < ns; st++) {
    scps__v1__stack_limits__init(&lim[st]);
    lim[st].stack = (char *)l->stacks[st].name;
    scps__prep_get_limits(c->prep, st, &lim[st].max_ids_per_partition, &lim[st].max_unique_ids_per_partition);
    limp[st] = &lim[st];
  }
  pthread_mutex_unlock(&c->prep_mu);
  Scps__V1__CheckpointRequest req = SCPS__V1__CHECKPOINT_REQUEST__INIT;
  req.config_fingerprint.data = c->fingerprint;
  req.config_fingerprint.len = sizeof c->fingerprint;
  req.step = step;
  req.directory = (char *)(directory ? directory : "");
  req.n_limits = (size_t)ns;
  req.limits = limp;
  for (int p = 0; !rc && p < c->n; p++) {
    rpc *r = &o->rpcs[p];
    req.process_index = p;
    r->req = malloc(sizeof *r->req);
    if (!r->req) {
      rc = scps_error_set(err, SCPS_ENOMEM, "scps_client_checkpoint: out of memory");
      break;
    }
    size_t n = scps__v1__checkpoint_request__get_packed_size(&req);
    r->req[0] = grpc_slice_malloc(n);
    scps__v1__checkpoint_request__pack(&req, GRPC_SLICE_START_PTR(r->req[0]));
    r->n_req = 1;
  }
  free(lim);
  free(limp);
  if (rc) {
    if (o) scps__client_op_destroy(o);
    return rc;
  }
  o->step = step;
  o->outcome = checkpoint_outcome;
  if (!blocking) o->then = checkpoint_due_then; /* only automatic checkpoints are asynchronous */
  scps__client_op_launch(o, blocking, done, ud, out);
  return 0;
}

int scps_client_checkpoint(scps_client *c, int64_t step, const char *directory, int64_t deadline_ms,
                           scps_client_checkpoint_result *result, scps_error *err) {
  if (!c || !result) return scps_error_set(err, SCPS_EINVAL, "scps_client_checkpoint: client or result is NULL");
  op *o;
  int rc = checkpoint_start(c, step, directory, deadline_ms, true, NULL, NULL, &o, err);
  if (rc) return rc;
  o->result = result;
  scps__client_op_wait(o);
  return scps__client_op_finish(o, err);
}

int scps_client_auto_checkpoint(scps_client *c, scps_client_checkpoint_result *result, scps_error *err) {
  pthread_mutex_lock(&c->mu);
  int rc = !c->auto_any ? scps_error_set(err, SCPS_ENOENT, "no server has asked for a checkpoint yet")
           : c->auto_rc ? scps_error_set(err, c->auto_rc, "%s", c->auto_err.msg)
                        : 0;
  if (c->auto_any && !c->auto_rc && result) *result = c->auto_result;
  pthread_mutex_unlock(&c->mu);
  return rc;
}

void scps__client_checkpoint_due(scps_client *c, int64_t step) {
  if (c->ignore_checkpoint_due) return;
  scps_client_checkpoint_result result;
  scps_error e;
  scps_error_clear(&e);
  int ck = scps_client_checkpoint(c, step, NULL, c->checkpoint_timeout_ms, &result, &e);
  record_auto_checkpoint(c, ck, &e, ck ? NULL : &result);
}

bool scps__client_checkpoint_due_async(scps_client *c, int64_t step, scps_client_done done, void *ud) {
  if (c->ignore_checkpoint_due) return false;
  op *ck;
  scps_error err;
  scps_error_clear(&err);
  int e = checkpoint_start(c, step, NULL, c->checkpoint_timeout_ms, false, done, ud, &ck, &err);
  if (!e) return true;
  record_auto_checkpoint(c, e, &err, NULL);
  return false;
}
