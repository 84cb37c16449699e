/* Checkpoints of a server process: restore at start, the save thread and the
 * ApplyGradients gate, the Checkpoint method and the timer. */
#include "scps_saver.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "scps_restore.h"
#include "scps_server_int.h"
#include "scps_step.h"

/* Room left in a path for "/step-<12 digits>/<data file name>". */
#define PATH_RESERVE 128

static int restore(scps_server *s, scps_error *err) {
  const char *dir = s->opts.restore_dir;
  char found[PATH_MAX];
  scps_error e;
  if (!dir && s->opts.checkpoint_dir) {
    int rc = scps_checkpoint_find_latest(s->opts.checkpoint_dir, found, sizeof found, &e);
    if (rc == SCPS_ENOENT) return 0;
    if (rc) return scps_error_set(err, rc, "--checkpoint-dir '%s': %s", s->opts.checkpoint_dir, e.msg);
    dir = found;
  }
  if (!dir) return 0;
  scps_checkpoint *ck = NULL;
  scps_checkpoint_stats st = {0};
  int rc = scps_checkpoint_open(dir, &ck, &e);
  if (!rc) rc = scps_checkpoint_load(ck, s->engine, &st, &e);
  if (rc) {
    scps_checkpoint_close(ck);
    return scps_error_set(err, rc, "cannot restore checkpoint '%s': %s", dir, e.msg);
  }
  scps_saver_adopt(s, ck, dir, &st);
  scps_checkpoint_close(ck);
  return 0;
}

void scps_saver_adopt(scps_server *s, const scps_checkpoint *ck, const char *dir, const scps_checkpoint_stats *st) {
  scps_saver *sv = &s->saver;
  /* A checkpoint written with another topology may stack the tables
   * differently; stacks it does not know keep the declaration's limits. */
  for (int st_i = 0; st_i < s->layout->n_stacks; st_i++) {
    int32_t a, b;
    if (!scps_checkpoint_limits_of(ck, sv->limits[st_i].stack, &a, &b) && a > 0 && b > 0) {
      sv->limits[st_i].max_ids_per_partition = a;
      sv->limits[st_i].max_unique_ids_per_partition = b;
    }
  }
  sv->last_step = sv->restored_step = scps_checkpoint_step(ck);
  sv->restored_bytes = st->bytes;
  sv->restored_seconds = st->seconds;
  sv->restored_topology = *scps_checkpoint_topology(ck);
  snprintf(sv->restored_from, sizeof sv->restored_from, "%s", dir);
}

static void *saver_main(void *arg);

int scps_saver_init(scps_server *s, scps_error *err) {
  scps_saver *sv = &s->saver;
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
  int rc = restore(s, err);
  if (rc) return rc;
  if (pthread_create(&sv->thread, NULL, saver_main, s)) return scps_error_set(err, SCPS_ENOMEM, "cannot start the checkpoint thread");
  sv->started = true;
  return 0;
}

void scps_saver_free(scps_server *s) {
  scps_saver *sv = &s->saver;
  if (!sv->inited) return;
  pthread_mutex_lock(&sv->mu);
  sv->stop = true;
  /* A save runs to its end (a save cut short would leave its step
   * incomplete); say so, since it may take seconds past the drain. */
  if (sv->saving) fprintf(stderr, "scps-server: waiting for the checkpoint save in progress\n");
  pthread_cond_broadcast(&sv->cv);
  pthread_mutex_unlock(&sv->mu);
  if (sv->started) pthread_join(sv->thread, NULL);
  free(sv->limits);
  pthread_cond_destroy(&sv->cv);
  pthread_mutex_destroy(&sv->mu);
  sv->inited = false;
}

const char *scps_server_restored(const scps_server *s, int64_t *step, int64_t *bytes, double *seconds,
                                 scps_topology *from) {
  const scps_saver *sv = &s->saver;
  if (from) *from = sv->restored_topology;
  if (step) *step = sv->restored_step;
  if (bytes) *bytes = sv->restored_bytes;
  if (seconds) *seconds = sv->restored_seconds;
  return sv->restored_from[0] ? sv->restored_from : NULL;
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

void scps_saver_submit_apply(scps_server *s, scps_call *c) {
  scps_saver *sv = &s->saver;
  pthread_mutex_lock(&sv->mu);
  if (sv->gate_closed || grid_cut(s, c)) {
    append(&sv->parked, &sv->parked_tail, c);
  } else {
    sv->applies_running++;
    scps_pipeline_submit(s->pipeline, &c->job);
  }
  pthread_mutex_unlock(&sv->mu);
}

bool scps_saver_apply_done(scps_server *s, int64_t step) {
  scps_saver *sv = &s->saver;
  pthread_mutex_lock(&sv->mu);
  if (step > sv->last_step) sv->last_step = step;
  sv->dirty = true;
  if (--sv->applies_running == 0) pthread_cond_broadcast(&sv->cv);
  bool due = sv->due;
  pthread_mutex_unlock(&sv->mu);
  return due;
}

void scps_saver_apply_rejected(scps_server *s) {
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
    scps_pipeline_submit(s->pipeline, &c->job);
  }
  sv->parked = sv->parked_tail = NULL;
}

/* ------------------------------------------------------------- requests */

/* An absolute path without "." or ".." components, control characters or
 * empty components, short enough for the files below it. */
static int check_directory(const char *dir, char *msg, size_t len) {
  size_t n = strlen(dir);
  if (dir[0] != '/') {
    snprintf(msg, len, "directory '%.200s': must be an absolute path", dir);
    return -1;
  }
  if (n + PATH_RESERVE >= PATH_MAX) {
    snprintf(msg, len, "directory '%.200s...': %zu bytes, longer than %d", dir, n, PATH_MAX - PATH_RESERVE - 1);
    return -1;
  }
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)dir[i] < 0x20 || dir[i] == 0x7f) {
      snprintf(msg, len, "directory '%.200s': control character 0x%02x at byte %zu", dir, (unsigned char)dir[i], i);
      return -1;
    }
  for (const char *p = dir; *p;) {
    while (*p == '/') p++;
    const char *q = p;
    while (*q && *q != '/') q++;
    size_t k = (size_t)(q - p);
    if ((k == 1 && p[0] == '.') || (k == 2 && p[0] == '.' && p[1] == '.')) {
      snprintf(msg, len, "directory '%.200s': '.' and '..' components are not accepted", dir);
      return -1;
    }
    p = q;
  }
  return 0;
}

void scps_saver_handle(scps_call *c) {
  scps_server *s = c->srv;
  Scps__V1__CheckpointRequest *req =
      (Scps__V1__CheckpointRequest *)scps_read_request(c, &scps__v1__checkpoint_request__descriptor);
  if (!req) return;
  char msg[SCPS_ERROR_MSG_MAX + 128];
  grpc_status_code st = scps_check_view(c, req->config_fingerprint.data, req->config_fingerprint.len,
                                        req->process_index, msg, sizeof msg);
  if (st == GRPC_STATUS_OK && req->step < 0) {
    snprintf(msg, sizeof msg, "step %lld: must be >= 0", (long long)req->step);
    st = GRPC_STATUS_INVALID_ARGUMENT;
  }
  if (st == GRPC_STATUS_OK) st = scps_saver_check_step(s, req->step, msg, sizeof msg);
  if (st == GRPC_STATUS_OK && req->directory[0] && check_directory(req->directory, msg, sizeof msg))
    st = GRPC_STATUS_INVALID_ARGUMENT;
  if (st == GRPC_STATUS_OK && !req->directory[0] && !s->opts.checkpoint_dir) {
    snprintf(msg, sizeof msg, "directory: empty, and process %d has no --checkpoint-dir to use instead",
             s->opts.process_index);
    st = GRPC_STATUS_INVALID_ARGUMENT;
  }
  for (size_t i = 0; st == GRPC_STATUS_OK && i < req->n_limits; i++) {
    const Scps__V1__StackLimits *lim = req->limits[i];
    int stack = scps_layout_find_stack(s->layout, lim->stack);
    if (stack < 0) {
      snprintf(msg, sizeof msg, "limits[%zu].stack: unknown stack '%.200s' (GetConfig lists the stacks)", i,
               lim->stack);
      st = GRPC_STATUS_INVALID_ARGUMENT;
    } else if (lim->max_ids_per_partition <= 0 || lim->max_unique_ids_per_partition <= 0) {
      snprintf(msg, sizeof msg, "limits[%zu] (stack '%s'): max_ids_per_partition %d and "
               "max_unique_ids_per_partition %d must be > 0", i, lim->stack, lim->max_ids_per_partition,
               lim->max_unique_ids_per_partition);
      st = GRPC_STATUS_INVALID_ARGUMENT;
    }
    for (size_t k = 0; st == GRPC_STATUS_OK && k < i; k++)
      if (!strcmp(req->limits[k]->stack, lim->stack)) {
        snprintf(msg, sizeof msg, "limits[%zu].stack: stack '%s' listed twice", i, lim->stack);
        st = GRPC_STATUS_INVALID_ARGUMENT;
      }
  }
  if (st != GRPC_STATUS_OK) {
    scps_call_finish(c, st, msg, NULL, 0);
    return;
  }
  scps_saver_queue(s, c);
}

void scps_saver_queue(scps_server *s, scps_call *c) {
  scps_saver *sv = &s->saver;
  pthread_mutex_lock(&sv->mu);
  append(&sv->queue, &sv->queue_tail, c);
  sv->gate_closed = true;
  pthread_cond_broadcast(&sv->cv);
  pthread_mutex_unlock(&sv->mu);
}

void scps_saver_tick(scps_server *s, int64_t tick) {
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

grpc_status_code scps_saver_check_step(scps_server *s, int64_t step, char *msg, size_t len) {
  scps_saver *sv = &s->saver;
  pthread_mutex_lock(&sv->mu);
  int64_t held = sv->last_step;
  pthread_mutex_unlock(&sv->mu);
  scps_error e;
  int rc = scps_step_check(step, held, s->opts.max_step_advance, &e);
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

/* Creates root and its missing parents, then checks it is a writable
 * directory, so the common failures get their own status before any file is
 * written. */
static grpc_status_code prepare_root(const char *root, char *msg, size_t len) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s", root);
  for (char *p = path + 1;; p++) {
    if (*p != '/' && *p) continue;
    char saved = *p;
    *p = '\0';
    if (mkdir(path, 0755) && errno != EEXIST) {
      int e = errno;
      snprintf(msg, len, "cannot create checkpoint directory '%.400s': %s", path, strerror(e));
      return errno_status(e);
    }
    *p = saved;
    if (!saved) break;
  }
  struct stat sb;
  if (stat(root, &sb)) {
    int e = errno;
    snprintf(msg, len, "checkpoint directory '%.400s': %s", root, strerror(e));
    return errno_status(e);
  }
  if (!S_ISDIR(sb.st_mode)) {
    snprintf(msg, len, "checkpoint directory '%.400s': %s", root, strerror(ENOTDIR));
    return GRPC_STATUS_FAILED_PRECONDITION;
  }
  if (access(root, W_OK | X_OK)) {
    int e = errno;
    snprintf(msg, len, "checkpoint directory '%.400s' is not writable: %s", root, strerror(e));
    return errno_status(e);
  }
  return GRPC_STATUS_OK;
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
} save_job;

/* One save, entered and left with mu held and no ApplyGradients running. */
static void run_save(scps_server *s, save_job *j) {
  scps_saver *sv = &s->saver;
  const scps_layout *l = s->layout;
  const Scps__V1__CheckpointRequest *req = j->call ? (const Scps__V1__CheckpointRequest *)j->call->request : NULL;
  int64_t step = req ? req->step : j->solo_step >= 0 ? j->solo_step : sv->last_step;
  const char *root = req && req->directory[0] ? req->directory : s->opts.checkpoint_dir;
  j->status = GRPC_STATUS_OK;
  /* Nothing applied since the last save. A grid step is saved even so: the
   * other processes save it too, and only all of them make it complete. */
  if (!req && j->solo_step < 0 && (!sv->dirty || step < 0)) return;
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
    int st = scps_layout_find_stack(l, req->limits[i]->stack);
    limits[st].max_ids_per_partition = req->limits[i]->max_ids_per_partition;
    limits[st].max_unique_ids_per_partition = req->limits[i]->max_unique_ids_per_partition;
  }
  bool was_dirty = sv->dirty;
  sv->dirty = false;
  sv->saving = true;
  pthread_mutex_unlock(&sv->mu);

  scps_checkpoint_stats cs = {0};
  scps_error e;
  snprintf(j->path, sizeof j->path, "%s/step-%012lld", root, (long long)step);
  j->status = prepare_root(root, j->msg, sizeof j->msg);
  int rc = 0;
  if (j->status == GRPC_STATUS_OK) {
    rc = scps_checkpoint_save(s->engine, root, step, limits, &cs, &e);
    if (rc) {
      j->status = rc == SCPS_ENOSPC ? GRPC_STATUS_RESOURCE_EXHAUSTED
                  : rc == SCPS_EIO  ? GRPC_STATUS_FAILED_PRECONDITION
                                    : GRPC_STATUS_INTERNAL;
      snprintf(j->msg, sizeof j->msg, "process %d, checkpoint of step %lld: %s", s->opts.process_index,
               (long long)step, e.msg);
    }
  }
  if (j->status == GRPC_STATUS_OK) {
    fprintf(stderr, "scps-server: %s step %lld to %s: %lld bytes in %d files, %.3f s (%.2f GB/s)\n",
            req ? "checkpointed" : j->why,
            (long long)step, j->path, (long long)cs.bytes, cs.files, cs.seconds,
            cs.seconds > 0 ? (double)cs.bytes / cs.seconds * 1e-9 : 0.0);
    if (scps_checkpoint_retain(root, s->opts.checkpoint_keep, step, s->opts.topology.num_processes - 1, &e))
      fprintf(stderr, "scps-server: keeping the last %d checkpoints under %s: %s\n", s->opts.checkpoint_keep, root,
              e.msg);
  } else {
    fprintf(stderr, "scps-server: checkpoint of step %lld failed: %s\n", (long long)step, j->msg);
  }

  pthread_mutex_lock(&sv->mu);
  sv->saving = false;
  if (j->status == GRPC_STATUS_OK) {
    memcpy(sv->limits, limits, sizeof *limits * (size_t)l->n_stacks);
    sv->saves++;
    sv->bytes_total += cs.bytes;
    sv->last_saved_step = step;
    sv->last_bytes = cs.bytes;
    sv->last_seconds = cs.seconds;
    snprintf(sv->last_path, sizeof sv->last_path, "%s", j->path);
    sv->due = false;
    j->resp.path = j->path;
    j->resp.bytes = cs.bytes;
    j->resp.files = cs.files;
    j->resp.seconds = cs.seconds;
  } else {
    sv->failures++;
    sv->dirty = was_dirty;
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

int scps_saver_save_held(scps_server *s, int64_t *step, char *path, size_t cap, scps_error *err) {
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
      scps_restore_run(s, j->call, &j->status, j->msg, sizeof j->msg, j->path, sizeof j->path, &j->restore);
    else
      run_save(s, j);
    if (!sv->queue && !sv->solo_pending) open_gate(s);
    /* scps_saver_save_held waits for the thread to be idle. */
    pthread_cond_broadcast(&sv->cv);
    pthread_mutex_unlock(&sv->mu);
    if (j->call && j->status == GRPC_STATUS_OK)
      scps_call_finish_packed(j->call, restore ? &j->restore.base : &j->resp.base);
    else if (j->call)
      scps_call_finish(j->call, j->status, j->msg, NULL, 0);
    pthread_mutex_lock(&sv->mu);
  }
  pthread_mutex_unlock(&sv->mu);
  return NULL;
}
