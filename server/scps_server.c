/* One scps-server process put together: its options checked, the layout,
 * engine and pipeline, the state every layer shares, the saver and limits,
 * and the transport, given the dispatch table of the methods' handlers. */
#include "scps_server.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "scps_cmd_checkpoint.h"
#include "scps_cmd_config.h"
#include "scps_cmd_grpc_health.h"
#include "scps_cmd_lookup.h"
#include "scps_cmd_push.h"
#include "scps_cmd_rows.h"
#include "scps_cmd_topk.h"
#include "scps_cmd_stats.h"
#include "scps_cpus.h"
#include "scps_fingerprint.h"
#include "scps_limits.h"
#include "scps_partlimits.h"
#include "scps_restore.h"
#include "scps_saver.h"
#include "scps_scratch.h"
#include "scps_server_int.h"
#include "scps_shm.h"
#include "scps_step.h"
#include "scps_transport.h"

/* The dispatch table: each method's handler, handed to the transport. */
static const scps_call_handler dispatch[SCPS_M_COUNT] = {
    [SCPS_M_GET_CONFIG] = scps__cmd_config_get,
    [SCPS_M_LOOKUP] = scps__cmd_lookup,
    [SCPS_M_APPLY_GRADIENTS] = scps__cmd_push,
    [SCPS_M_STATS] = scps__cmd_stats_get,
    [SCPS_M_HEALTH] = scps__cmd_stats_health,
    [SCPS_M_CHECKPOINT] = scps__cmd_checkpoint_save,
    [SCPS_M_READ_ROWS] = scps__cmd_rows_read,
    [SCPS_M_LIST_CHECKPOINTS] = scps__cmd_checkpoint_list,
    [SCPS_M_RESTORE] = scps__cmd_checkpoint_restore,
    [SCPS_M_TOPK] = scps__cmd_topk,
    [SCPS_M_GRPC_HEALTH_CHECK] = scps__cmd_grpc_health_check,
};

/* The CPUs of scps_server_options.pin_sparsecores, into s->sc_cpus. */
static int plan_sc_cpus(scps_server *s, scps_error *err) {
  int allowed[SCPS_CPUS_MAX];
  int n = scps__cpus_allowed(allowed, SCPS_CPUS_MAX, err);
  if (n < 0) return n;
  if (n < 2) return 0;
  scps__cpus_assign(allowed, n, s->opts.process_index, s->S, s->sc_cpus);
  s->sc_pinned = true;
  return 0;
}

/* The state every layer reads: the idle scratch pool, the fingerprint of
 * the cluster, each sample's source SparseCore and the SparseCore locks. */
static int state_init(scps_server *s, scps_error *err) {
  const scps_layout *l = s->layout;
  /* Idle blocks kept: two clients with two batches in flight each. */
  if (scps__scratch_create(4, &s->scratch)) return scps_error_set(err, SCPS_ENOMEM, "out of memory");
  /* Of the canonical declaration: processes started from files that differ
   * only in what they do not read serve one cluster. */
  int rc = scps__fingerprint(&s->opts.topology, s->tables, s->opts.n_tables, s->features, s->opts.n_features,
                            s->fingerprint, err);
  if (rc) return rc;
  /* Which source SparseCore each sample comes from (the reference's even
   * data-parallel split of every feature's batch), for the FDO counts. */
  s->sample_src = calloc((size_t)l->n_stacks, sizeof *s->sample_src);
  s->sc_stats = calloc((size_t)l->n_stacks * (size_t)s->S, sizeof *s->sc_stats);
  s->sc_locks = calloc((size_t)s->S, sizeof *s->sc_locks);
  if (!s->sample_src || !s->sc_stats || !s->sc_locks) return scps_error_set(err, SCPS_ENOMEM, "out of memory");
  /* A stream of small Lookups must not keep ApplyGradients waiting. */
  pthread_rwlockattr_t attr;
  pthread_rwlockattr_init(&attr);
  pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
  for (; s->n_sc_locks < s->S; s->n_sc_locks++)
    if (pthread_rwlock_init(&s->sc_locks[s->n_sc_locks], &attr)) break;
  pthread_rwlockattr_destroy(&attr);
  if (s->n_sc_locks < s->S) return scps_error_set(err, SCPS_ENOMEM, "cannot create the SparseCore locks");
  for (int st = 0; st < l->n_stacks; st++) {
    const scps_stack_layout *sl = &l->stacks[st];
    s->sample_src[st] = malloc(sizeof(int32_t) * (size_t)(sl->total_sample_count ? sl->total_sample_count : 1));
    if (!s->sample_src[st]) return scps_error_set(err, SCPS_ENOMEM, "out of memory");
    for (int k = 0; k < sl->n_features; k++) {
      int f = sl->features[k];
      int64_t b = l->feature_specs[f].batch_size, off = l->features[f].sample_offset;
      for (int64_t r = 0; r < b; r++) s->sample_src[st][off + r] = (int32_t)(r * l->num_sc / b);
    }
  }
  return 0;
}


static void state_free(scps_server *s) {
  if (s->sample_src && s->layout)
    for (int st = 0; st < s->layout->n_stacks; st++) free(s->sample_src[st]);
  free(s->sample_src);
  free(s->sc_stats);
  for (int k = 0; k < s->n_sc_locks; k++) pthread_rwlock_destroy(&s->sc_locks[k]);
  free(s->sc_locks);
  s->n_sc_locks = 0;
  scps__scratch_release(s->scratch);
  s->scratch = NULL;
}

/* Shared-memory answers (scps_shm.h), unless shm_socket is "off". */
static int shm_init(scps_server *s, scps_error *err) {
  if (getrandom(s->instance_id, sizeof s->instance_id, 0) != (ssize_t)sizeof s->instance_id)
    return scps_error_set(err, SCPS_EIO, "no random bytes for the instance id: %s", strerror(errno));
  const char *path = s->opts.shm_socket ? s->opts.shm_socket : "auto";
  if (!strcmp(path, "off")) return 0;
  return scps__shm_create(path, &s->auth, s->instance_id, s->opts.idle_timeout_s, &s->shm, err);
}

int scps__server_create(const scps_server_options *o, scps_server **out, scps_error *err) {
  *out = NULL;
  if (o->cq_threads < 1 || o->cq_threads > 64 || o->tc_threads < 1 || o->tc_threads > 64)
    return scps_error_set(err, SCPS_EINVAL, "--cq-threads %d and --tc-threads %d must be in [1, 64]",
                          o->cq_threads, o->tc_threads);
  if (o->topology.sc_per_process > SCPS_MAX_SC_PER_PROCESS)
    return scps_error_set(err, SCPS_EINVAL, "--sc-per-process %d exceeds %d", o->topology.sc_per_process,
                          SCPS_MAX_SC_PER_PROCESS);
  if (o->checkpoint_keep < 1)
    return scps_error_set(err, SCPS_EINVAL, "--checkpoint-keep %d must be >= 1", o->checkpoint_keep);
  if (o->max_step_advance < 0 || o->max_step_advance > SCPS_STEP_LIMIT)
    return scps_error_set(err, SCPS_EINVAL, "--max-step-advance %lld not in [1, 2^53]", (long long)o->max_step_advance);
  if (o->checkpoint_grid < 0 || o->checkpoint_grid > SCPS_STEP_LIMIT)
    return scps_error_set(err, SCPS_EINVAL, "--checkpoint-grid %lld not in [1, 2^53]", (long long)o->checkpoint_grid);
  if (o->max_message_bytes < 4096 || o->max_message_bytes > INT32_MAX)
    return scps_error_set(err, SCPS_EINVAL, "max message size %lld not in [4096, %d] bytes",
                          (long long)o->max_message_bytes, INT32_MAX);
  scps_server *s = calloc(1, sizeof *s);
  if (!s) return scps_error_set(err, SCPS_ENOMEM, "out of memory");
  s->opts = *o;
  if (!s->opts.max_step_advance) s->opts.max_step_advance = SCPS_STEP_ADVANCE_DEFAULT;
  if (!s->opts.checkpoint_grid) s->opts.checkpoint_grid = 100;
  s->S = o->topology.sc_per_process;
  s->tables = malloc(sizeof *s->tables * (size_t)o->n_tables);
  s->features = malloc(sizeof *s->features * (size_t)(o->n_features ? o->n_features : 1));
  int rc = s->tables && s->features ? 0 : scps_error_set(err, SCPS_ENOMEM, "out of memory");
  if (!rc) {
    memcpy(s->tables, o->tables, sizeof *s->tables * (size_t)o->n_tables);
    if (o->n_features) memcpy(s->features, o->features, sizeof *s->features * (size_t)o->n_features);
    s->opts.tables = s->tables;
    s->opts.features = s->features;
    rc = scps__layout_create(s->tables, o->n_tables, s->features, o->n_features, &o->topology, NULL, &s->layout,
                            err);
  }
  if (!rc) rc = scps__transport_probe(o->listen, err);
  if (!rc)
    rc = scps__auth_load(&s->auth, o->tls_cert_file, o->tls_key_file, o->tls_client_ca_file, o->token_file, err);
  if (!rc) rc = shm_init(s, err);
  if (!rc) rc = scps__engine_create(s->layout, o->process_index, &s->engine, err);
  if (!rc && o->pin_sparsecores) rc = plan_sc_cpus(s, err);
  if (!rc) rc = scps__pipeline_create(s->S, o->tc_threads, s->sc_pinned ? s->sc_cpus : NULL, &s->pipeline, err);
  if (!rc) rc = state_init(s, err);
  if (!rc) rc = scps__cmd_config_init(s, err);
  if (!rc) rc = scps__saver_init(s, scps__restore_run, err);
  if (!rc) rc = scps__limits_init(s, err);
  if (!rc && o->partition_limits[0] > 0) scps__partlimits_override(s);
  if (!rc) scps__restore_new_state(s);
  if (!rc) rc = scps__transport_create(s, dispatch, err);
  if (rc) {
    scps__server_destroy(s);
    return rc;
  }
  *out = s;
  return 0;
}

int scps__server_port(const scps_server *s) { return s->port; }

const char *scps__server_shm_socket(const scps_server *s) { return s->shm ? scps__shm_path(s->shm) : NULL; }

int64_t scps__server_memory_budget(const scps_server *s, const char **how, int64_t *grpc_quota) {
  *how = s->budget_how;
  *grpc_quota = scps__limits_quota(&s->opts);
  return s->opts.memory_budget;
}

const int *scps__server_sc_cpus(const scps_server *s) { return s->sc_pinned ? s->sc_cpus : NULL; }

void scps__server_checkpoint_tick(scps_server *s, int64_t tick) { scps__saver_tick(s, tick); }

const char *scps__server_restored(const scps_server *s, int64_t *step, int64_t *bytes, double *seconds,
                                 scps_topology *from) {
  const scps_saver *sv = &s->saver;
  if (from) *from = sv->restored_topology;
  if (step) *step = sv->restored_step;
  if (bytes) *bytes = sv->restored_bytes;
  if (seconds) *seconds = sv->restored_seconds;
  return sv->restored_from[0] ? sv->restored_from : NULL;
}


int scps__server_start(scps_server *s, void (*on_stopped)(void *), void *ud, int *threads_started,
                      scps_error *err) {
  if (s->shm && !s->shm_started) {
    int rc = scps__shm_start(s->shm, err);
    if (rc) {
      *threads_started = 0;
      return rc;
    }
    s->shm_started = true;
  }
  return scps__transport_start(s, on_stopped, ud, threads_started, err);
}

void scps__server_shutdown(scps_server *s) { scps__transport_shutdown(s); }

void scps__server_cancel_all(scps_server *s) { scps__transport_cancel_all(s); }

int64_t scps__server_push_quiet_ms(scps_server *s) { return scps__transport_push_quiet_ms(s); }

void scps__server_close_pushes(scps_server *s) { scps__transport_close_pushes(s); }

int scps__server_save_held(scps_server *s, int64_t *step, char *path, size_t cap, scps_error *err) {
  return scps__saver_save_held(s, step, path, cap, err);
}

void scps__server_destroy(scps_server *s) {
  if (!s) return;
  if (s->server) {
    scps__transport_quiesce(s);
    /* Every call has finished (the shutdown tag came), so no job is left in
     * the pipeline that could still start a batch on a call, and no
     * ApplyGradients is parked; a save of the timer's may still run. */
    scps__saver_free(s);
    scps__pipeline_destroy(s->pipeline);
    s->pipeline = NULL;
  }
  scps__transport_destroy(s);
  scps__shm_destroy(s->shm); /* no call holds a segment any more */
  scps__saver_free(s);
  scps__pipeline_destroy(s->pipeline);
  scps__limits_free(s);
  scps__cmd_config_free(s);
  state_free(s);
  scps__engine_destroy(s->engine);
  scps__layout_destroy(s->layout);
  free(s->tables);
  free(s->features);
  scps__auth_free(&s->auth);
  free(s);
}
