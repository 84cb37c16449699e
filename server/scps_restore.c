/* Restore's load: a verified part of a checkpoint loaded while the process
 * serves, with data calls kept out meanwhile, and the state it names. */
#include "scps_restore.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "scps_call.h"
#include "scps_log.h"
#include "scps_saver.h"

/* The part's cluster is this process's: same topology and specs, which is
 * what the config_fingerprint digests, but for storage formats, which the
 * load converts. */
bool scps__restore_part_of_ours(const scps_server *s, const scps_checkpoint *ck, char *diff, size_t len) {
  return !scps__checkpoint_specs_diff(ck, &s->opts.topology, s->tables, s->opts.n_tables, s->features,
                                     s->opts.n_features, "this process", diff, len);
}

/* ------------------------------------------------------------ the load */

/* A gang job that holds every SparseCore worker until resumed: with it
 * running, no Lookup or ApplyGradients job runs, and the jobs submitted
 * meanwhile wait behind it. */
typedef struct pause_job {
  scps_job job;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int arrived;
  bool resume, done;
} pause_job;

static void pause_sc(scps_job *job, int32_t k) {
  (void)k;
  pause_job *p = job->data;
  pthread_mutex_lock(&p->mu);
  p->arrived++;
  pthread_cond_broadcast(&p->cv);
  while (!p->resume) pthread_cond_wait(&p->cv, &p->mu);
  pthread_mutex_unlock(&p->mu);
}

static void pause_tc(scps_job *job) {
  pause_job *p = job->data;
  pthread_mutex_lock(&p->mu);
  p->done = true;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
}

/* Loads ck into the engine with the SparseCore workers paused and every
 * SparseCore's lock held for writing (inline Lookups hold them for
 * reading): nothing reads or writes the tables meanwhile. */
static int load_paused(scps_server *s, const scps_checkpoint *ck, scps_checkpoint_stats *st, scps_error *err) {
  pause_job p;
  memset(&p, 0, sizeof p);
  pthread_mutex_init(&p.mu, NULL);
  pthread_cond_init(&p.cv, NULL);
  p.job.sc_fn = pause_sc;
  p.job.tc_fn = pause_tc;
  p.job.data = &p;
  p.job.gang = true;
  scps__pipeline_submit(s->pipeline, &p.job);
  pthread_mutex_lock(&p.mu);
  while (p.arrived < s->S) pthread_cond_wait(&p.cv, &p.mu);
  pthread_mutex_unlock(&p.mu);
  for (int k = 0; k < s->S; k++) pthread_rwlock_wrlock(&s->sc_locks[k]);
  int rc = scps__checkpoint_load(ck, s->engine, st, err);
  for (int k = s->S - 1; k >= 0; k--) pthread_rwlock_unlock(&s->sc_locks[k]);
  pthread_mutex_lock(&p.mu);
  p.resume = true;
  pthread_cond_broadcast(&p.cv);
  while (!p.done) pthread_cond_wait(&p.cv, &p.mu);
  pthread_mutex_unlock(&p.mu);
  pthread_cond_destroy(&p.cv);
  pthread_mutex_destroy(&p.mu);
  return rc;
}

/* Opens and verifies the part (mu released): the status, with msg. */
static grpc_status_code open_verified(scps_server *s, const char *dir, scps_checkpoint **ck,
                                      scps_checkpoint_stats *vs, char *msg, size_t len) {
  const int p = s->opts.process_index;
  scps_error e;
  int rc = scps__checkpoint_open_part(dir, p, ck, &e);
  if (rc == SCPS_ENOENT) {
    snprintf(msg, len, "process %d holds no part of this step under its --checkpoint-dir: %s", p, e.msg);
    return GRPC_STATUS_NOT_FOUND;
  }
  if (!rc && !scps__restore_part_of_ours(s, *ck, e.msg, sizeof e.msg)) {
    snprintf(msg, len, "'%s' was written by another cluster configuration: %s", dir, e.msg);
    return GRPC_STATUS_FAILED_PRECONDITION;
  }
  if (!rc) rc = scps__checkpoint_verify(*ck, vs, &e);
  if (rc) {
    snprintf(msg, len, "process %d, '%s': %s", p, dir, e.msg);
    return rc == SCPS_ECORRUPT ? GRPC_STATUS_DATA_LOSS : GRPC_STATUS_FAILED_PRECONDITION;
  }
  return GRPC_STATUS_OK;
}

/* With mu held: the ApplyGradients parked while the part loaded were
 * computed from the state before it, and are refused. */
static void refuse_parked(scps_server *s, int64_t step) {
  scps_saver *sv = &s->saver;
  char msg[256];
  snprintf(msg, sizeof msg,
           "process %d was restored to step %lld while this push waited: its gradients were computed from the "
           "state before; reconnect and resume from the step the cluster holds",
           s->opts.process_index, (long long)step);
  for (scps_call *c = sv->parked, *next; c; c = next) {
    next = c->next;
    c->next = NULL;
    scps__call_finish(c, GRPC_STATUS_FAILED_PRECONDITION, msg, NULL, 0);
  }
  sv->parked = sv->parked_tail = NULL;
}

void scps__restore_run(scps_server *s, scps_call *c, grpc_status_code *status, char *msg, size_t len, char *path,
                      size_t path_cap, Scps__V1__RestoreResponse *resp) {
  scps_saver *sv = &s->saver;
  const Scps__V1__RestoreRequest *req = (const Scps__V1__RestoreRequest *)c->request;
  const bool load = !req->verify_only;
  snprintf(path, path_cap, "%s/step-%012lld", s->opts.checkpoint_dir, (long long)req->step);
  sv->restore_running = true;
  pthread_mutex_unlock(&sv->mu);

  const double t0 = scps__clock_s();
  scps_checkpoint *ck = NULL;
  scps_checkpoint_stats vs = {0}, ls = {0};
  *status = open_verified(s, path, &ck, &vs, msg, len);
  if (*status == GRPC_STATUS_OK && load) {
    scps_error e;
    atomic_store(&s->restoring, 1);
    int rc = load_paused(s, ck, &ls, &e);
    if (rc) {
      /* The part verified, so a file changed or failed to read since: the
       * tables are part old, part new. */
      atomic_store(&s->damaged, 1);
      *status = GRPC_STATUS_INTERNAL;
      snprintf(msg, len,
               "process %d: loading '%s' failed after it verified (%s): its tables are undefined; it refuses "
               "Lookup and ApplyGradients until a Restore succeeds",
               s->opts.process_index, path, e.msg);
    }
    atomic_store(&s->restoring, 0);
  }
  const double seconds = scps__clock_s() - t0;

  pthread_mutex_lock(&sv->mu);
  sv->restore_running = false;
  if (*status == GRPC_STATUS_OK) {
    resp->path = path;
    resp->bytes = vs.bytes;
    resp->seconds = seconds;
    if (sv->last_step >= 0) {
      resp->previous_step_present_case = SCPS__V1__RESTORE_RESPONSE__PREVIOUS_STEP_PRESENT_PREVIOUS_STEP;
      resp->previous_step = sv->last_step;
    }
  }
  if (*status == GRPC_STATUS_OK && load) {
    scps__log(SCPS_LOG_INFO, "Restore: process %d now holds step %lld from %s (held %lld before): %lld bytes "
              "verified and loaded in %.3f s",
              s->opts.process_index, (long long)req->step, path, (long long)sv->last_step, (long long)vs.bytes,
              seconds);
    scps__saver_adopt(s, ck, path, &ls);
    sv->dirty = false;
    sv->due = false;
    sv->grid_left = 0;
    atomic_store(&s->damaged, 0);
    scps__restore_new_state(s);
  }
  if (load && *status != GRPC_STATUS_OK && *status != GRPC_STATUS_INTERNAL)
    scps__log(SCPS_LOG_WARN, "Restore of step %lld refused, nothing changed: %s", (long long)req->step, msg);
  else if (*status == GRPC_STATUS_INTERNAL)
    scps__log(SCPS_LOG_ERROR, "Restore of step %lld: %s", (long long)req->step, msg);
  if (load && (*status == GRPC_STATUS_OK || *status == GRPC_STATUS_INTERNAL)) refuse_parked(s, req->step);
  scps__checkpoint_close(ck);
}

void scps__restore_new_state(scps_server *s) {
  uint64_t id = 0;
  /* getrandom, else a mix of the clock and the process id: distinct across
   * restarts either way, which is all the id is for. */
  if (getrandom(&id, sizeof id, GRND_NONBLOCK) != (ssize_t)sizeof id)
    id = ((uint64_t)scps__clock_ns() * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)getpid() << 32) ^ atomic_load(&s->state_id);
  atomic_store(&s->state_id, id ? id : 1);
}

grpc_status_code scps__restore_check_state(scps_call *c, uint64_t state_id, char *msg, size_t len) {
  scps_server *s = c->srv;
  uint64_t now = atomic_load(&s->state_id);
  if (!state_id || state_id == now) return GRPC_STATUS_OK;
  int64_t held;
  pthread_mutex_lock(&s->saver.mu);
  held = s->saver.last_step;
  pthread_mutex_unlock(&s->saver.mu);
  snprintf(msg, len,
           "state_id %016llx: process %d no longer holds the state this client connected to (it restarted or "
           "restored a checkpoint since, and holds step %lld now, state %016llx); nothing applied. Reconnect: the "
           "client then compares the processes' steps",
           (unsigned long long)state_id, s->opts.process_index, (long long)held, (unsigned long long)now);
  return GRPC_STATUS_FAILED_PRECONDITION;
}

bool scps__restore_refused(scps_call *c) {
  scps_server *s = c->srv;
  char msg[256];
  if (atomic_load(&s->damaged)) {
    snprintf(msg, sizeof msg,
             "process %d: a Restore failed after verification and left its tables undefined; Restore a step "
             "('scps-admin checkpoint restore') or restart it",
             s->opts.process_index);
    scps__call_finish(c, GRPC_STATUS_FAILED_PRECONDITION, msg, NULL, 0);
    return true;
  }
  if ((c->method == SCPS_M_LOOKUP || c->method == SCPS_M_TOPK) && atomic_load(&s->restoring)) {
    snprintf(msg, sizeof msg, "process %d is loading a checkpoint (Restore); retry", s->opts.process_index);
    scps__call_finish(c, GRPC_STATUS_UNAVAILABLE, msg, NULL, 0);
    return true;
  }
  return false;
}
