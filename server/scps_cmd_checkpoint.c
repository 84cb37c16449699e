/* Checkpoint, ListCheckpoints and Restore: the requests checked here, then
 * handed to the saver (saves and restores run on its thread) or answered
 * from this process's parts of the checkpoints under its --checkpoint-dir. */
#include "scps_cmd_checkpoint.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scps_checkpoint_root.h"
#include "scps_confine.h"
#include "scps_restore.h"
#include "scps_saver.h"
#include "scps_step.h"

/* ----------------------------------------------------------- Checkpoint */

/* The request's directory (below the root), and its limits, checked before
 * anything is queued. */
static grpc_status_code check_checkpoint(scps_server *s, const Scps__V1__CheckpointRequest *req, char *msg,
                                         size_t len) {
  scps_saver *sv = &s->saver;
  const char *root = s->opts.checkpoint_dir;
  scps_error e;
  if (!root) {
    snprintf(msg, len, "process %d has no --checkpoint-dir: checkpoints are saved only below it (start the server "
             "with --checkpoint-dir ROOT)", s->opts.process_index);
    return GRPC_STATUS_FAILED_PRECONDITION;
  }
  if (req->directory[0] == '/') {
    snprintf(msg, len, "directory '%.200s': must be relative to the server's --checkpoint-dir '%.200s' (empty: that "
             "directory itself)", req->directory, root);
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  size_t room = PATH_MAX - SCPS_SAVER_PATH_RESERVE - 1, used = strlen(root) + 1;
  if (scps__confine_check("directory", req->directory, used < room ? room - used : 0, &e)) {
    snprintf(msg, len, "%.300s (below --checkpoint-dir '%.200s')", e.msg, root);
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  for (size_t i = 0; i < req->n_limits; i++) {
    const Scps__V1__StackLimits *lim = req->limits[i];
    int stack = scps__layout_find_stack(s->layout, lim->stack);
    if (stack < 0) {
      snprintf(msg, len, "limits[%zu].stack: unknown stack '%.200s' (GetConfig lists the stacks)", i, lim->stack);
      return GRPC_STATUS_INVALID_ARGUMENT;
    }
    const scps_limit_bounds *b = &sv->bounds[stack];
    const char *field = NULL;
    int32_t v = 0, lo = 0, hi = 0;
    if (lim->max_ids_per_partition < b->lo_ids || lim->max_ids_per_partition > b->hi_ids)
      field = "max_ids_per_partition", v = lim->max_ids_per_partition, lo = b->lo_ids, hi = b->hi_ids;
    else if (lim->max_unique_ids_per_partition < b->lo_unique || lim->max_unique_ids_per_partition > b->hi_unique)
      field = "max_unique_ids_per_partition", v = lim->max_unique_ids_per_partition, lo = b->lo_unique,
      hi = b->hi_unique;
    if (field) {
      snprintf(msg, len, "limits[%zu] (stack '%s'): %s %d outside [%d, %d]: a limit in force may not go below the "
               "declaration's nor above what FDO may raise it to in the SparseCore memory left", i, lim->stack, field, v,
               lo, hi);
      return GRPC_STATUS_INVALID_ARGUMENT;
    }
    for (size_t k = 0; k < i; k++)
      if (!strcmp(req->limits[k]->stack, lim->stack)) {
        snprintf(msg, len, "limits[%zu].stack: stack '%s' listed twice", i, lim->stack);
        return GRPC_STATUS_INVALID_ARGUMENT;
      }
  }
  return GRPC_STATUS_OK;
}

void scps__cmd_checkpoint_save(scps_call *c) {
  scps_server *s = c->srv;
  Scps__V1__CheckpointRequest *req =
      (Scps__V1__CheckpointRequest *)scps__call_read_request(c, &scps__v1__checkpoint_request__descriptor);
  if (!req) return;
  char msg[SCPS_ERROR_MSG_MAX + 128];
  grpc_status_code st = scps__saver_check_request(c, req->config_fingerprint.data, req->config_fingerprint.len,
                                                 req->process_index, req->step, msg, sizeof msg);
  if (st == GRPC_STATUS_OK) st = check_checkpoint(s, req, msg, sizeof msg);
  if (st != GRPC_STATUS_OK) {
    scps__call_finish(c, st, msg, NULL, 0);
    return;
  }
  scps__saver_checkpoint(c);
}

/* ------------------------------------------- ListCheckpoints and Restore */

/* The view check every request of these methods starts with, and the
 * --checkpoint-dir they need. */
static grpc_status_code check_dir_view(scps_call *c, const ProtobufCBinaryData *fp, int32_t process_index,
                                       char *msg, size_t len) {
  scps_server *s = c->srv;
  grpc_status_code st = scps__call_check_view(c, fp->data, fp->len, process_index, msg, len);
  if (st == GRPC_STATUS_OK && !s->opts.checkpoint_dir) {
    snprintf(msg, len, "process %d has no --checkpoint-dir: it keeps no checkpoints to list or restore",
             s->opts.process_index);
    st = GRPC_STATUS_FAILED_PRECONDITION;
  }
  return st;
}

typedef struct part_list {
  Scps__V1__CheckpointPart *parts, **part_ptrs;
  char **skipped;
  size_t n_parts, n_skipped;
} part_list;

static void part_list_free(part_list *pl, size_t n) {
  for (size_t i = 0; pl->skipped && i < pl->n_skipped; i++) free(pl->skipped[i]);
  for (size_t i = 0; pl->parts && i < n; i++) free(pl->parts[i].path);
  free(pl->parts);
  free(pl->part_ptrs);
  free(pl->skipped);
}

/* Fills pl from the n step directories listed: each part of this process
 * that opens and is of this cluster, or why not. */
static int collect_parts(scps_server *s, const scps_checkpoint_entry *v, int n, part_list *pl) {
  pl->parts = calloc((size_t)(n ? n : 1), sizeof *pl->parts);
  pl->part_ptrs = calloc((size_t)(n ? n : 1), sizeof *pl->part_ptrs);
  pl->skipped = calloc((size_t)(n ? n : 1), sizeof *pl->skipped);
  if (!pl->parts || !pl->part_ptrs || !pl->skipped) return SCPS_ENOMEM;
  for (int i = 0; i < n; i++) {
    scps_checkpoint *ck = NULL;
    scps_error e;
    char why[SCPS_ERROR_MSG_MAX + 64] = "";
    if (scps__checkpoint_open_part(v[i].dir, s->opts.process_index, &ck, &e))
      snprintf(why, sizeof why, "step %lld: %s", (long long)v[i].step, e.msg);
    else if (scps__checkpoint_step(ck) != v[i].step)
      snprintf(why, sizeof why, "step %lld: its manifest says step %lld", (long long)v[i].step,
               (long long)scps__checkpoint_step(ck));
    else if (!scps__restore_part_of_ours(s, ck, e.msg, sizeof e.msg))
      snprintf(why, sizeof why, "step %lld: written by another cluster configuration: %s", (long long)v[i].step,
               e.msg);
    if (why[0]) {
      if (!(pl->skipped[pl->n_skipped] = strdup(why))) {
        scps__checkpoint_close(ck);
        return SCPS_ENOMEM;
      }
      pl->n_skipped++;
    } else {
      Scps__V1__CheckpointPart *p = &pl->parts[pl->n_parts];
      scps__v1__checkpoint_part__init(p);
      p->step = v[i].step;
      p->path = strdup(v[i].dir);
      p->bytes = scps__checkpoint_bytes(ck);
      p->complete = v[i].complete;
      pl->part_ptrs[pl->n_parts++] = p;
      if (!p->path) {
        scps__checkpoint_close(ck);
        return SCPS_ENOMEM;
      }
    }
    scps__checkpoint_close(ck);
  }
  return 0;
}

void scps__cmd_checkpoint_list(scps_call *c) {
  scps_server *s = c->srv;
  Scps__V1__ListCheckpointsRequest *req = (Scps__V1__ListCheckpointsRequest *)scps__call_read_request(
      c, &scps__v1__list_checkpoints_request__descriptor);
  if (!req) return;
  char msg[SCPS_ERROR_MSG_MAX + 128];
  grpc_status_code st = check_dir_view(c, &req->config_fingerprint, req->process_index, msg, sizeof msg);
  if (st != GRPC_STATUS_OK) {
    scps__call_finish(c, st, msg, NULL, 0);
    return;
  }
  scps_checkpoint_entry *v = NULL;
  int n = 0;
  scps_error e;
  int rc = scps__checkpoint_root_list(s->opts.checkpoint_dir, &v, &n, &e);
  if (rc == SCPS_ENOENT) rc = 0; /* no save yet: nothing to list */
  part_list pl = {0};
  if (!rc) rc = collect_parts(s, v, n, &pl);
  free(v);
  if (rc) {
    part_list_free(&pl, pl.n_parts + 1);
    snprintf(msg, sizeof msg, "process %d: cannot list its checkpoints: %s", s->opts.process_index,
             rc == SCPS_ENOMEM ? "out of memory" : e.msg);
    scps__call_finish(c, rc == SCPS_ENOMEM ? GRPC_STATUS_RESOURCE_EXHAUSTED : GRPC_STATUS_FAILED_PRECONDITION, msg,
                     NULL, 0);
    return;
  }
  Scps__V1__ListCheckpointsResponse r = SCPS__V1__LIST_CHECKPOINTS_RESPONSE__INIT;
  r.n_parts = pl.n_parts;
  r.parts = pl.part_ptrs;
  r.n_skipped = pl.n_skipped;
  r.skipped = pl.skipped;
  scps__call_finish_packed(c, &r.base);
  part_list_free(&pl, pl.n_parts);
}

void scps__cmd_checkpoint_restore(scps_call *c) {
  scps_server *s = c->srv;
  Scps__V1__RestoreRequest *req =
      (Scps__V1__RestoreRequest *)scps__call_read_request(c, &scps__v1__restore_request__descriptor);
  if (!req) return;
  char msg[SCPS_ERROR_MSG_MAX + 128];
  grpc_status_code st = check_dir_view(c, &req->config_fingerprint, req->process_index, msg, sizeof msg);
  if (st == GRPC_STATUS_OK && (req->step < 0 || req->step >= SCPS_STEP_LIMIT)) {
    snprintf(msg, sizeof msg, "step %lld: must be in [0, 2^53)", (long long)req->step);
    st = GRPC_STATUS_INVALID_ARGUMENT;
  }
  if (st != GRPC_STATUS_OK) {
    scps__call_finish(c, st, msg, NULL, 0);
    return;
  }
  scps__saver_queue(s, c);
}
