/* Checkpoints of a server process: restore at start, the save thread and the
 * ApplyGradients gate, the admission of Checkpoint calls and the timer. */
#include "scps_saver.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "scps_call.h"
#include "scps_checkpoint_root.h"
#include "scps_confine.h"
#include "scps_fdo.h"
#include "scps_log.h"
#include "scps_step.h"

static int bounds_init(scps_server *s, scps_error *err);
static void bound_restored_limits(scps_server *s);
static void owner_of(scps_server *s, scps_checkpoint_owner *own);
static void request_root(const scps_server *s, const char *rel, char *out, size_t cap);
/* A Checkpoint's fate decided under mu before it closes the gate. */
typedef enum { CK_QUEUE, CK_ANSWER, CK_REFUSE } ck_verdict;
static ck_verdict admit(scps_server *s, const Scps__V1__CheckpointRequest *req, grpc_status_code *st, char *msg,
                        size_t len, Scps__V1__CheckpointResponse *resp, char *path, size_t cap);
static bool interval_passed(const scps_server *s);
static bool limits_in_force(const scps_server *s, const Scps__V1__CheckpointRequest *req);
static grpc_status_code open_target(scps_server *s, const char *rel, int *fd, char *msg, size_t len);
static scps_checkpoint_snapshot *snapshot_or_log(scps_server *s, int64_t step);
static void noted_free(scps_saver *sv);

static int restore(scps_server *s, scps_error *err) {
  const char *dir = s->opts.restore_dir;
  char found[PATH_MAX];
  scps_error e;
  bool own_part = false;
  if (!dir && s->opts.checkpoint_dir) {
    /* Only this cluster's: a checkpoint of another configuration under the
     * root is never restored without --restore naming it. */
    scps_checkpoint_owner own;
    owner_of(s, &own);
    int rc = scps__checkpoint_root_latest_own(s->opts.checkpoint_dir, &own, found, sizeof found, &e);
    /* A root of this process's own (a volume per container) holds its parts
     * alone, never a complete checkpoint (a shared root offers no parts):
     * then its newest part. Processes restarted apart may hold different
     * steps; clients refuse such a cluster until a Restore brings it to one. */
    if (rc == SCPS_ENOENT) {
      int64_t part_step;
      rc = scps__checkpoint_root_latest_part(s->opts.checkpoint_dir, &own, found, sizeof found, &part_step, &e);
      own_part = !rc;
    }
    if (rc == SCPS_ENOENT) return 0;
    if (rc) return scps_error_set(err, rc, "--checkpoint-dir '%s': %s", s->opts.checkpoint_dir, e.msg);
    dir = found;
  }
  if (!dir) return 0;
  scps_checkpoint *ck = NULL;
  scps_checkpoint_stats st = {0};
  int rc = own_part ? scps__checkpoint_open_part(dir, s->opts.process_index, &ck, &e) : scps__checkpoint_open(dir, &ck, &e);
  if (!rc) rc = scps__checkpoint_load(ck, s->engine, &st, &e);
  if (rc) {
    scps__checkpoint_close(ck);
    return scps_error_set(err, rc, "cannot restore checkpoint '%s': %s", dir, e.msg);
  }
  scps__saver_adopt(s, ck, dir, &st);
  scps__checkpoint_close(ck);
  return 0;
}

void scps__saver_adopt(scps_server *s, const scps_checkpoint *ck, const char *dir, const scps_checkpoint_stats *st) {
  scps_saver *sv = &s->saver;
  /* A checkpoint written with another topology may stack the tables
   * differently; stacks it does not know keep the declaration's limits. */
  for (int st_i = 0; st_i < s->layout->n_stacks; st_i++) {
    int32_t a, b;
    if (!scps__checkpoint_limits_of(ck, sv->limits[st_i].stack, &a, &b) && a > 0 && b > 0) {
      sv->limits[st_i].max_ids_per_partition = a;
      sv->limits[st_i].max_unique_ids_per_partition = b;
    }
  }
  bound_restored_limits(s);
  sv->last_step = sv->restored_step = scps__checkpoint_step(ck);
  sv->restored_bytes = st->bytes;
  sv->restored_seconds = st->seconds;
  sv->restored_topology = *scps__checkpoint_topology(ck);
  snprintf(sv->restored_from, sizeof sv->restored_from, "%s", dir);
}

static void *saver_main(void *arg);

int scps__saver_init(scps_server *s, scps_saver_run_fn run_restore, scps_error *err) {
  scps_saver *sv = &s->saver;
  sv->run_restore = run_restore;
  const scps_layout *l = s->layout;
  pthread_mutex_init(&sv->mu, NULL);
  pthread_cond_init(&sv->cv, NULL);
  sv->inited = true;
  sv->last_step = sv->last_saved_step = sv->restored_step = -1;
  sv->solo_step = -1;
  sv->limits = calloc((size_t)(l->n_stacks ? l->n_stacks : 1), sizeof *sv->limits);
  if (!sv->limits) return scps_error_set(err, SCPS_ENOMEM, "out of memory");
  for (int st = 0; st < l->n_stacks; st++) {
    snprintf(sv->limits[st].stack, sizeof sv->limits[st].stack, "%s", l->stacks[st].name);
    sv->limits[st].max_ids_per_partition = l->stacks[st].max_ids_per_partition;
    sv->limits[st].max_unique_ids_per_partition = l->stacks[st].max_unique_ids_per_partition;
  }
  int rc = bounds_init(s, err);
  if (!rc) rc = restore(s, err);
  if (rc) return rc;
  if (pthread_create(&sv->thread, NULL, saver_main, s)) return scps_error_set(err, SCPS_ENOMEM, "cannot start the checkpoint thread");
  sv->started = true;
  return 0;
}

void scps__saver_free(scps_server *s) {
  scps_saver *sv = &s->saver;
  if (!sv->inited) return;
  pthread_mutex_lock(&sv->mu);
  sv->stop = true;
  /* A save runs to its end (a save cut short would leave its step
   * incomplete); say so, since it may take seconds past the drain. */
  if (sv->saving) scps__log(SCPS_LOG_INFO, "waiting for the checkpoint save in progress");
  pthread_cond_broadcast(&sv->cv);
  pthread_mutex_unlock(&sv->mu);
  if (sv->started) pthread_join(sv->thread, NULL);
  free(sv->limits);
  free(sv->bounds);
  noted_free(sv);
  scps__checkpoint_snapshot_free(sv->snapshot);
  pthread_cond_destroy(&sv->cv);
  pthread_mutex_destroy(&sv->mu);
  sv->inited = false;
}

/* ------------------------------------------------------------------ gate */

static void append(scps_call **head, scps_call **tail, scps_call *c) {
  c->next = NULL;
  if (*tail)
    (*tail)->next = c;
  else
    *head = c;
  *tail = c;
}

/* With mu held: the timer's next grid save is due when c, an
 * ApplyGradients of a step above it, is about to run. Then the gate closes
 * before c (the caller parks it) and the save is queued. */
static bool grid_cut(scps_server *s, const scps_call *c) {
  scps_saver *sv = &s->saver;
  if (sv->grid_left <= 0 || sv->solo_pending || c->step.step <= sv->grid_at) return false;
  sv->solo_pending = true;
  sv->solo_step = sv->grid_at;
  sv->solo_why = "no Checkpoint request within a --checkpoint-every period; saved alone (on the --checkpoint-grid)";
  sv->gate_closed = true;
  pthread_cond_broadcast(&sv->cv);
  return true;
}

void scps__saver_submit_apply(scps_server *s, scps_call *c) {
  scps_saver *sv = &s->saver;
  pthread_mutex_lock(&sv->mu);
  if (sv->gate_closed || grid_cut(s, c)) {
    append(&sv->parked, &sv->parked_tail, c);
  } else {
    sv->applies_running++;
    scps__pipeline_submit(s->pipeline, &c->job);
  }
  pthread_mutex_unlock(&sv->mu);
}

bool scps__saver_apply_done(scps_server *s, int64_t step) {
  scps_saver *sv = &s->saver;
  pthread_mutex_lock(&sv->mu);
  if (step > sv->last_step) sv->last_step = step;
  sv->dirty = true;
  if (--sv->applies_running == 0) pthread_cond_broadcast(&sv->cv);
  bool due = sv->due;
  pthread_mutex_unlock(&sv->mu);
  return due;
}

void scps__saver_apply_rejected(scps_server *s) {
  scps_saver *sv = &s->saver;
  pthread_mutex_lock(&sv->mu);
  if (--sv->applies_running == 0) pthread_cond_broadcast(&sv->cv);
  pthread_mutex_unlock(&sv->mu);
}

/* Called with mu held once no save is queued: the parked ApplyGradients go
 * to the pipeline in arrival order, before any that arrives later. */
static void open_gate(scps_server *s) {
  scps_saver *sv = &s->saver;
  sv->gate_closed = false;
  for (scps_call *c; (c = sv->parked);) {
    /* A parked push past the next grid step closes the gate again. */
    if (grid_cut(s, c)) return;
    sv->parked = c->next;
    c->next = NULL;
    sv->applies_running++;
    scps__pipeline_submit(s->pipeline, &c->job);
  }
  sv->parked = sv->parked_tail = NULL;
}

/* ------------------------------------------------------------- requests */

void scps__saver_checkpoint(scps_call *c) {
  scps_server *s = c->srv;
  scps_saver *sv = &s->saver;
  const Scps__V1__CheckpointRequest *req = (const Scps__V1__CheckpointRequest *)c->request;
  grpc_status_code st = GRPC_STATUS_OK;
  char msg[SCPS_ERROR_MSG_MAX + 128];
  Scps__V1__CheckpointResponse resp = SCPS__V1__CHECKPOINT_RESPONSE__INIT;
  char path[PATH_MAX];
  pthread_mutex_lock(&sv->mu);
  ck_verdict v = admit(s, req, &st, msg, sizeof msg, &resp, path, sizeof path);
  if (v == CK_QUEUE) {
    append(&sv->queue, &sv->queue_tail, c);
    sv->gate_closed = true;
    pthread_cond_broadcast(&sv->cv);
  }
  pthread_mutex_unlock(&sv->mu);
  if (v == CK_ANSWER) scps__call_finish_packed(c, &resp.base);
  if (v == CK_REFUSE) scps__call_finish(c, st, msg, NULL, 0);
}

void scps__saver_queue(scps_server *s, scps_call *c) {
  scps_saver *sv = &s->saver;
  pthread_mutex_lock(&sv->mu);
  append(&sv->queue, &sv->queue_tail, c);
  sv->gate_closed = true;
  pthread_cond_broadcast(&sv->cv);
  pthread_mutex_unlock(&sv->mu);
}

void scps__saver_tick(scps_server *s, int64_t tick) {
  scps_saver *sv = &s->saver;
  pthread_mutex_lock(&sv->mu);
  /* Asking and saving alone alternate by the tick's number, not by this
   * process's own history: a process whose grid save came after a tick
   * would otherwise fall a tick out of step with the others, and their
   * grid saves would no longer meet. */
  if (tick % 2 == 0 && sv->due) {
    /* A period went by with checkpoint_due set and no Checkpoint came (a
     * client that ignores the flag, or no trainer at all): save alone. Not
     * at the step held, which differs between processes by the pushes in
     * flight, but at the next two grid steps above it, which every process
     * of the cluster computes alike: if the processes' ticks straddle a
     * grid step (they are less than one grid step apart), the second
     * saves meet. */
    sv->due = false;
    if (sv->dirty && sv->last_step >= 0 && s->opts.checkpoint_dir && sv->grid_left <= 0) {
      const int64_t k = s->opts.checkpoint_grid;
      sv->grid_at = (sv->last_step / k + 1) * k;
      sv->grid_left = 2;
    }
  } else if (tick % 2 != 0 && sv->dirty) {
    sv->due = true;
  }
  pthread_mutex_unlock(&sv->mu);
}

grpc_status_code scps__saver_check_request(scps_call *c, const uint8_t *fingerprint, size_t fingerprint_len,
                                           int32_t process_index, int64_t step, char *msg, size_t len) {
  grpc_status_code st = scps__call_check_view(c, fingerprint, fingerprint_len, process_index, msg, len);
  if (st != GRPC_STATUS_OK) return st;
  if (step < 0) {
    snprintf(msg, len, "step %lld: must be >= 0", (long long)step);
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  scps_server *s = c->srv;
  scps_saver *sv = &s->saver;
  pthread_mutex_lock(&sv->mu);
  int64_t held = sv->last_step;
  pthread_mutex_unlock(&sv->mu);
  scps_error e;
  int rc = scps__step_check(step, held, s->opts.max_step_advance, &e);
  if (!rc) return GRPC_STATUS_OK;
  snprintf(msg, len, "process %d: %s", s->opts.process_index, e.msg);
  return rc == SCPS_EINVAL ? GRPC_STATUS_INVALID_ARGUMENT : GRPC_STATUS_FAILED_PRECONDITION;
}

/* ------------------------------------------------------------------ save */

static grpc_status_code errno_status(int e) {
  switch (e) {
  case EACCES: case EPERM: case EROFS: return GRPC_STATUS_PERMISSION_DENIED;
  case ENOSPC: case EFBIG: case EDQUOT: return GRPC_STATUS_RESOURCE_EXHAUSTED;
  default: return GRPC_STATUS_FAILED_PRECONDITION;
  }
}

typedef struct save_job {
  scps_call *call;         /* NULL: a solo save (the timer's, or the one at exit) */
  int64_t solo_step;       /* a solo save's step; -1: the step held, if anything was applied since */
  const char *why;         /* a solo save's log line */
  Scps__V1__RestoreResponse restore; /* a Restore call's answer */
  grpc_status_code status;
  char msg[SCPS_ERROR_MSG_MAX + 256];
  Scps__V1__CheckpointResponse resp;
  char path[PATH_MAX];
  char root[PATH_MAX];     /* --checkpoint-dir and the request's directory below it */
} save_job;

/* One save, entered with mu held and no ApplyGradients running, left with
 * mu held. They may run again once the state is copied (snapshot_or_log),
 * or after the whole save when it could not be. */
static void run_save(scps_server *s, save_job *j) {
  scps_saver *sv = &s->saver;
  const scps_layout *l = s->layout;
  const Scps__V1__CheckpointRequest *req = j->call ? (const Scps__V1__CheckpointRequest *)j->call->request : NULL;
  int64_t step = req ? req->step : j->solo_step >= 0 ? j->solo_step : sv->last_step;
  const char *rel = req ? req->directory : "";
  request_root(s, rel, j->root, sizeof j->root);
  j->status = GRPC_STATUS_OK;
  /* Nothing applied since the last save. A grid step is saved even so: the
   * other processes save it too, and only all of them make it complete. */
  if (!req && j->solo_step < 0 && (!sv->dirty || step < 0)) return;
  if (req && s->opts.checkpoint_min_interval > 0 && sv->last_attempt_ok && step == sv->last_attempt_step &&
      sv->last_save_end * 1e9 >= (double)j->call->t0_ns && !strcmp(j->root, sv->last_root)) {
    /* Admitted as a duplicate of the save of the same step and place that
     * was queued or running when it arrived: that save's result, unless it
     * asks for other limits, which would need a save of their own. */
    if (!limits_in_force(s, req)) {
      j->status = GRPC_STATUS_RESOURCE_EXHAUSTED;
      snprintf(j->msg, sizeof j->msg, "step %lld: process %d has just saved this step with other limits, and saves "
               "at most once per --checkpoint-min-interval (%g s): retry in %g s", (long long)step,
               s->opts.process_index, s->opts.checkpoint_min_interval, s->opts.checkpoint_min_interval);
      return;
    }
    snprintf(j->path, sizeof j->path, "%s", sv->last_path);
    j->resp.path = j->path;
    j->resp.bytes = sv->last_bytes;
    j->resp.files = sv->last_files;
    j->resp.seconds = sv->last_seconds;
    return;
  }
  if (sv->last_step > step) {
    j->status = GRPC_STATUS_FAILED_PRECONDITION;
    snprintf(j->msg, sizeof j->msg,
             "step %lld: process %d has already applied step %lld, so its state is no longer that of step %lld",
             (long long)step, s->opts.process_index, (long long)sv->last_step, (long long)step);
    return;
  }
  /* The request's limits go in force only with the checkpoint that saves
   * them: a save that fails changes nothing. */
  scps_checkpoint_limits *limits = malloc(sizeof *limits * (size_t)(l->n_stacks ? l->n_stacks : 1));
  if (!limits) {
    j->status = GRPC_STATUS_RESOURCE_EXHAUSTED;
    snprintf(j->msg, sizeof j->msg, "Checkpoint: out of memory");
    return;
  }
  memcpy(limits, sv->limits, sizeof *limits * (size_t)l->n_stacks);
  for (size_t i = 0; req && i < req->n_limits; i++) {
    int st = scps__layout_find_stack(l, req->limits[i]->stack);
    limits[st].max_ids_per_partition = req->limits[i]->max_ids_per_partition;
    limits[st].max_unique_ids_per_partition = req->limits[i]->max_unique_ids_per_partition;
  }
  bool was_dirty = sv->dirty;
  sv->dirty = false;
  sv->saving = true;
  sv->saving_step = step;
  snprintf(sv->saving_root, sizeof sv->saving_root, "%s", j->root);
  pthread_mutex_unlock(&sv->mu);

  double t0 = scps__clock_s(), held = 0;
  scps_checkpoint_stats cs = {0};
  scps_error e;
  scps_checkpoint_owner own;
  owner_of(s, &own);
  snprintf(j->path, sizeof j->path, "%.*s/step-%012lld", (int)sizeof j->path - 32, j->root, (long long)step);
  int fd = -1;
  j->status = open_target(s, rel, &fd, j->msg, sizeof j->msg);
  scps_checkpoint_snapshot *snap = j->status == GRPC_STATUS_OK ? snapshot_or_log(s, step) : NULL;
  if (snap) {
    /* The copy is the checkpoint: pushes may go on while it is written. */
    pthread_mutex_lock(&sv->mu);
    if (!sv->queue && !sv->solo_pending) open_gate(s);
    pthread_mutex_unlock(&sv->mu);
    held = scps__clock_s() - t0;
  }
  if (j->status == GRPC_STATUS_OK) {
    scps_checkpoint_save_opts so = {.snapshot = snap, .owner = &own};
    int rc = scps__checkpoint_save_at(fd, j->root, s->engine, step, limits, &so, &cs, &e);
    if (rc) {
      j->status = rc == SCPS_ENOSPC                        ? GRPC_STATUS_RESOURCE_EXHAUSTED
                  : rc == SCPS_EIO || rc == SCPS_EMISMATCH ? GRPC_STATUS_FAILED_PRECONDITION
                                                           : GRPC_STATUS_INTERNAL;
      snprintf(j->msg, sizeof j->msg, "process %d, checkpoint of step %lld: %s", s->opts.process_index,
               (long long)step, e.msg);
    }
  }
  /* Kept for the next save: refilling pages the system has not reclaimed
   * costs no page fault. */
  scps__checkpoint_snapshot_idle(snap);
  if (j->status == GRPC_STATUS_OK) {
    char how[64];
    if (snap)
      snprintf(how, sizeof how, "the %.3f s snapshot", held);
    else
      snprintf(how, sizeof how, "the whole save");
    scps_log_kv kv[] = {SCPS_LOG_INT("step", step), SCPS_LOG_STRING("path", j->path), SCPS_LOG_INT("bytes", cs.bytes),
                        SCPS_LOG_DOUBLE("seconds", cs.seconds)};
    scps__log_kv(SCPS_LOG_INFO, kv, 4, "%s step %lld to %s: %lld bytes in %d files, %.3f s (%.2f GB/s); "
                 "ApplyGradients held for %s",
                 req ? "checkpointed" : j->why,
                 (long long)step, j->path, (long long)cs.bytes, cs.files, cs.seconds,
                 cs.seconds > 0 ? (double)cs.bytes / cs.seconds * 1e-9 : 0.0, how);
    if (scps__checkpoint_root_retain(fd, j->root, &own, s->opts.checkpoint_keep, step, s->opts.topology.num_processes - 1,
                               &e))
      scps__log(SCPS_LOG_WARN, "keeping the last %d checkpoints under %s: %s", s->opts.checkpoint_keep,
                j->root, e.msg);
  } else {
    scps__log(SCPS_LOG_ERROR, "checkpoint of step %lld failed: %s", (long long)step, j->msg);
  }
  if (fd >= 0) close(fd);

  pthread_mutex_lock(&sv->mu);
  sv->saving = false;
  sv->last_save_end = scps__clock_s();
  sv->last_attempt_step = step;
  sv->last_attempt_ok = j->status == GRPC_STATUS_OK;
  snprintf(sv->last_root, sizeof sv->last_root, "%s", j->root);
  if (j->status == GRPC_STATUS_OK) {
    memcpy(sv->limits, limits, sizeof *limits * (size_t)l->n_stacks);
    sv->saves++;
    sv->bytes_total += cs.bytes;
    sv->last_saved_step = step;
    sv->last_bytes = cs.bytes;
    sv->last_files = cs.files;
    sv->last_seconds = cs.seconds;
    snprintf(sv->last_path, sizeof sv->last_path, "%s", j->path);
    sv->due = false;
    j->resp.path = j->path;
    j->resp.bytes = cs.bytes;
    j->resp.files = cs.files;
    j->resp.seconds = cs.seconds;
  } else {
    sv->failures++;
    sv->dirty = sv->dirty || was_dirty;
  }
  free(limits);
}

/* With mu held: the pending solo save's step and reason into j; a grid
 * save moves the grid on. */
static void take_solo(scps_server *s, save_job *j) {
  scps_saver *sv = &s->saver;
  j->solo_step = sv->solo_step;
  j->why = sv->solo_why;
  sv->solo_step = -1;
  if (j->solo_step >= 0 && --sv->grid_left > 0) sv->grid_at += s->opts.checkpoint_grid;
}

int scps__saver_save_held(scps_server *s, int64_t *step, char *path, size_t cap, scps_error *err) {
  scps_saver *sv = &s->saver;
  pthread_mutex_lock(&sv->mu);
  /* The save supersedes the timer's grid saves still to come. */
  sv->grid_left = 0;
  while (sv->saving || sv->restore_running || sv->queue || sv->solo_pending) pthread_cond_wait(&sv->cv, &sv->mu);
  *step = sv->last_step;
  int rc = 0;
  if (s->opts.checkpoint_dir && sv->dirty && sv->last_step >= 0) {
    save_job *j = calloc(1, sizeof *j);
    if (!j) {
      pthread_mutex_unlock(&sv->mu);
      return scps_error_set(err, SCPS_ENOMEM, "out of memory");
    }
    j->solo_step = -1;
    j->why = "shutting down; checkpointed";
    run_save(s, j);
    if (j->status == GRPC_STATUS_OK) {
      snprintf(path, cap, "%s", j->path);
      rc = 1;
    } else {
      rc = scps_error_set(err, SCPS_EIO, "%s", j->msg);
    }
    free(j);
  }
  pthread_mutex_unlock(&sv->mu);
  return rc;
}

static void *saver_main(void *arg) {
  scps_server *s = arg;
  scps_saver *sv = &s->saver;
  save_job job, *j = &job;
  pthread_mutex_lock(&sv->mu);
  for (;;) {
    while (!sv->queue && !sv->solo_pending && !sv->stop) pthread_cond_wait(&sv->cv, &sv->mu);
    if (!sv->queue && !sv->solo_pending) break;
    memset(j, 0, sizeof *j);
    scps__v1__checkpoint_response__init(&j->resp);
    scps__v1__restore_response__init(&j->restore);
    j->solo_step = -1;
    if (sv->queue) {
      j->call = sv->queue;
      sv->queue = j->call->next;
      if (!sv->queue) sv->queue_tail = NULL;
      j->call->next = NULL;
    } else {
      sv->solo_pending = false;
      take_solo(s, j);
    }
    while (sv->applies_running) pthread_cond_wait(&sv->cv, &sv->mu);
    bool restore = j->call && j->call->method == SCPS_M_RESTORE;
    if (restore)
      sv->run_restore(s, j->call, &j->status, j->msg, sizeof j->msg, j->path, sizeof j->path, &j->restore);
    else
      run_save(s, j);
    if (!sv->queue && !sv->solo_pending) open_gate(s);
    /* scps__saver_save_held waits for the thread to be idle. */
    pthread_cond_broadcast(&sv->cv);
    pthread_mutex_unlock(&sv->mu);
    if (j->call && j->status == GRPC_STATUS_OK)
      scps__call_finish_packed(j->call, restore ? &j->restore.base : &j->resp.base);
    else if (j->call)
      scps__call_finish(j->call, j->status, j->msg, NULL, 0);
    pthread_mutex_lock(&sv->mu);
  }
  pthread_mutex_unlock(&sv->mu);
  return NULL;
}

/* ---------------------------------------- places, rates, limits, snapshot
 * Issue 26: a Checkpoint may write only below --checkpoint-dir (a relative
 * directory, walked without following a symlink), saves come at most once
 * per --checkpoint-min-interval, the limits a request puts in force are
 * bounded, retention and restore touch only this cluster's checkpoints, and
 * ApplyGradients wait only while the state is copied, not while it is
 * written. */

/* A limit in force may not go below the declaration's (every batch the
 * declaration admits must still be admitted) nor above what FDO may raise
 * it to: the SparseCore memory left after rows and slots, shared by the
 * stacks, as COO entries of every destination (scps__fdo_limit_cap). */
static int bounds_init(scps_server *s, scps_error *err) {
  scps_saver *sv = &s->saver;
  const scps_layout *l = s->layout;
  sv->bounds = calloc((size_t)(l->n_stacks ? l->n_stacks : 1), sizeof *sv->bounds);
  if (!sv->bounds) return scps_error_set(err, SCPS_ENOMEM, "out of memory");
  scps_fdo *f = NULL;
  int rc = scps__fdo_create(l, NULL, &f, err);
  if (rc) return rc;
  for (int st = 0; st < l->n_stacks; st++) {
    scps_limit_bounds *b = &sv->bounds[st];
    int32_t cap = scps__fdo_limit_cap(f, st);
    b->lo_ids = l->stacks[st].max_ids_per_partition;
    b->lo_unique = l->stacks[st].max_unique_ids_per_partition;
    b->hi_ids = cap > b->lo_ids ? cap : b->lo_ids;
    b->hi_unique = cap > b->lo_unique ? cap : b->lo_unique;
  }
  scps__fdo_destroy(f);
  return 0;
}

static int32_t clamp_limit(int32_t v, int32_t lo, int32_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Limits a checkpoint brought that the bounds refuse (saved before they
 * were enforced) are brought within them, and the log says so. */
static void bound_restored_limits(scps_server *s) {
  scps_saver *sv = &s->saver;
  for (int st = 0; st < s->layout->n_stacks; st++) {
    scps_checkpoint_limits *lim = &sv->limits[st];
    const scps_limit_bounds *b = &sv->bounds[st];
    int32_t ids = clamp_limit(lim->max_ids_per_partition, b->lo_ids, b->hi_ids);
    int32_t uniq = clamp_limit(lim->max_unique_ids_per_partition, b->lo_unique, b->hi_unique);
    if (ids == lim->max_ids_per_partition && uniq == lim->max_unique_ids_per_partition) continue;
    scps__log(SCPS_LOG_WARN, "stack '%s': restored limits (%d, %d) outside [%d, %d] and [%d, %d]; in force: "
              "(%d, %d)", lim->stack, lim->max_ids_per_partition, lim->max_unique_ids_per_partition, b->lo_ids,
              b->hi_ids, b->lo_unique, b->hi_unique, ids, uniq);
    lim->max_ids_per_partition = ids;
    lim->max_unique_ids_per_partition = uniq;
  }
}

/* Each step directory left alone is logged once per process lifetime. */
static void note_left_alone(void *ctx, const char *step_dir, const char *why) {
  scps_saver *sv = ctx;
  for (int i = 0; i < sv->n_noted; i++)
    if (!strcmp(sv->noted[i], step_dir)) return;
  scps__log(SCPS_LOG_INFO, "left %s alone: %s", step_dir, why);
  if (sv->n_noted == sv->cap_noted) {
    int cap = sv->cap_noted ? 2 * sv->cap_noted : 16;
    char **nv = realloc(sv->noted, (size_t)cap * sizeof *nv);
    if (!nv) return;
    sv->noted = nv;
    sv->cap_noted = cap;
  }
  if ((sv->noted[sv->n_noted] = strdup(step_dir))) sv->n_noted++;
}

static void noted_free(scps_saver *sv) {
  for (int i = 0; i < sv->n_noted; i++) free(sv->noted[i]);
  free(sv->noted);
  sv->noted = NULL;
  sv->n_noted = sv->cap_noted = 0;
}

/* This process as the owner of checkpoints: its index, its cluster's
 * fingerprint and declaration. Notes come from the restore at start and the
 * save thread only, one at a time. */
static void owner_of(scps_server *s, scps_checkpoint_owner *own) {
  memset(own, 0, sizeof *own);
  own->process_index = s->opts.process_index;
  memcpy(own->fingerprint, s->fingerprint, sizeof own->fingerprint);
  own->has_fingerprint = true;
  own->layout = s->layout;
  own->note = note_left_alone;
  own->note_ctx = &s->saver;
}


/* --checkpoint-dir, and below it the request's directory: how logs, results
 * and the rate limit name the place. */
static void request_root(const scps_server *s, const char *rel, char *out, size_t cap) {
  const char *root = s->opts.checkpoint_dir ? s->opts.checkpoint_dir : "";
  snprintf(out, cap, "%s%s%s", root, rel[0] ? "/" : "", rel);
}

static bool interval_passed(const scps_server *s) {
  const scps_saver *sv = &s->saver;
  return s->opts.checkpoint_min_interval <= 0 || sv->last_save_end <= 0 ||
         scps__clock_s() - sv->last_save_end >= s->opts.checkpoint_min_interval;
}

/* Whether every limit the request lists is the one in force (the last
 * save's, when it succeeded). */
static bool limits_in_force(const scps_server *s, const Scps__V1__CheckpointRequest *req) {
  for (size_t i = 0; i < req->n_limits; i++) {
    const scps_checkpoint_limits *in_force = &s->saver.limits[scps__layout_find_stack(s->layout, req->limits[i]->stack)];
    if (in_force->max_ids_per_partition != req->limits[i]->max_ids_per_partition ||
        in_force->max_unique_ids_per_partition != req->limits[i]->max_unique_ids_per_partition)
      return false;
  }
  return true;
}

static bool same_request(const scps_call *c, int64_t step, const char *rel) {
  const Scps__V1__CheckpointRequest *q = (const Scps__V1__CheckpointRequest *)c->request;
  return q->step == step && !strcmp(q->directory, rel);
}

/* With mu held: whether the Checkpoint is queued (closing the gate),
 * answered at once (*resp, the save it repeats), or refused (*st, msg).
 * None but a queued one closes the gate, so a client calling Checkpoint in
 * a loop holds no push. */
static ck_verdict admit(scps_server *s, const Scps__V1__CheckpointRequest *req, grpc_status_code *st, char *msg,
                        size_t len, Scps__V1__CheckpointResponse *resp, char *path, size_t cap) {
  scps_saver *sv = &s->saver;
  const double interval = s->opts.checkpoint_min_interval;
  if (sv->last_step > req->step) {
    /* As the save would answer, without closing the gate first. */
    *st = GRPC_STATUS_FAILED_PRECONDITION;
    snprintf(msg, len,
             "step %lld: process %d has already applied step %lld, so its state is no longer that of step %lld",
             (long long)req->step, s->opts.process_index, (long long)sv->last_step, (long long)req->step);
    return CK_REFUSE;
  }
  if (interval <= 0) return CK_QUEUE;
  char root[PATH_MAX];
  request_root(s, req->directory, root, sizeof root);
  /* The same step and place as a save queued or running: it waits for that
   * save and gets its result (run_save). */
  if (sv->saving && sv->saving_step == req->step && !strcmp(sv->saving_root, root)) return CK_QUEUE;
  for (const scps_call *q = sv->queue; q; q = q->next)
    if (same_request(q, req->step, req->directory)) return CK_QUEUE;
  *st = GRPC_STATUS_RESOURCE_EXHAUSTED;
  if (sv->saving || sv->queue) {
    snprintf(msg, len, "step %lld: process %d is saving step %lld; it saves at most once per "
             "--checkpoint-min-interval (%g s): retry in %g s or more", (long long)req->step, s->opts.process_index,
             (long long)(sv->saving ? sv->saving_step : ((Scps__V1__CheckpointRequest *)sv->queue->request)->step),
             interval, interval);
    return CK_REFUSE;
  }
  if (interval_passed(s)) return CK_QUEUE;
  double since = scps__clock_s() - sv->last_save_end;
  if (sv->last_attempt_ok && req->step == sv->last_attempt_step && !sv->dirty && !strcmp(root, sv->last_root) &&
      limits_in_force(s, req)) {
    /* The save just made, asked again (a retry, a second client): its result. */
    snprintf(path, cap, "%s", sv->last_path);
    resp->path = path;
    resp->bytes = sv->last_bytes;
    resp->files = sv->last_files;
    resp->seconds = sv->last_seconds;
    return CK_ANSWER;
  }
  snprintf(msg, len, "step %lld: process %d %s %.1f s ago and saves at most once per --checkpoint-min-interval "
           "(%g s): retry in %.1f s", (long long)req->step, s->opts.process_index,
           sv->last_attempt_ok ? "saved" : "tried to save", since, interval, interval - since);
  return CK_REFUSE;
}

static grpc_status_code errno_status(int e);

/* Opens the save's directory below the root, creating what is missing. */
static grpc_status_code open_target(scps_server *s, const char *rel, int *fd, char *msg, size_t len) {
  scps_error e;
  int os_errno = 0;
  int rc = scps__confine_open(s->opts.checkpoint_dir, rel, true, fd, &os_errno, &e);
  if (rc) {
    snprintf(msg, len, "checkpoint directory: %s", e.msg);
    return rc == SCPS_EINVAL ? GRPC_STATUS_INVALID_ARGUMENT : errno_status(os_errno);
  }
  /* The common failure gets its own status before any file is written. */
  if (faccessat(*fd, ".", W_OK | X_OK, 0)) {
    int err = errno;
    char where[PATH_MAX];
    request_root(s, rel, where, sizeof where);
    snprintf(msg, len, "checkpoint directory '%.400s' is not writable: %s", where, strerror(err));
    close(*fd);
    *fd = -1;
    return errno_status(err);
  }
  return GRPC_STATUS_OK;
}

/* MemAvailable of /proc/meminfo in bytes, or -1. */
static int64_t mem_available(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return -1;
  char line[256];
  long long kb = -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
  fclose(f);
  return kb < 0 ? -1 : (int64_t)kb * 1024;
}

/* Copies the process's rows and slots into the save thread's snapshot
 * (ApplyGradients are held while it runs), or says in the log why the save
 * holds them to its end instead. Memory the snapshot keeps between saves
 * counts as available: the system reclaims it when it needs it. */
static scps_checkpoint_snapshot *snapshot_or_log(scps_server *s, int64_t step) {
  scps_saver *sv = &s->saver;
  if (s->opts.checkpoint_snapshot_max == 0) return NULL; /* the operator's choice: not worth a line per save */
  const int64_t bytes = scps__checkpoint_snapshot_bytes(s->engine);
  int64_t limit = s->opts.checkpoint_snapshot_max;
  const char *what = "--checkpoint-snapshot-max";
  if (limit < 0) {
    int64_t avail = mem_available();
    limit = avail < 0 ? 0 : avail / 2;
    what = "half the memory available";
  }
  scps_error e;
  if (bytes > limit) {
    scps__log(SCPS_LOG_WARN, "checkpoint of step %lld: a snapshot would take %lld bytes, more than %s (%lld); "
              "ApplyGradients wait for the whole save", (long long)step, (long long)bytes, what, (long long)limit);
    scps__checkpoint_snapshot_free(sv->snapshot);
    sv->snapshot = NULL;
  } else if (scps__checkpoint_snapshot_take(s->engine, &sv->snapshot, &e)) {
    scps__log(SCPS_LOG_WARN, "checkpoint of step %lld: %s; ApplyGradients wait for the whole save",
              (long long)step, e.msg);
  }
  return sv->snapshot;
}
