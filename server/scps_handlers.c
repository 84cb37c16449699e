/* The EmbeddingService methods but Checkpoint (scps_saver): decode, validate everything before
 * anything is applied, run Lookup/ApplyGradients through the SparseCore and
 * TensorCore stages, encode. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scps_bf16.h"
#include "scps_fdo.h"
#include "scps_fingerprint.h"
#include "scps_limits.h"
#include "scps_partlimits.h"
#include "scps_read_rows.h"
#include "scps_restore.h"
#include "scps_scratch.h"
#include "scps_server_int.h"
#include "scps_spec_pb.h"

#define SCPS_VERSION "0.1.0"

static void hex12(const uint8_t *d, size_t n, char out[13]) {
  static const char digits[] = "0123456789abcdef";
  size_t k = 0;
  for (size_t i = 0; i < n && k < 12; i++) {
    out[k++] = digits[d[i] >> 4];
    out[k++] = digits[d[i] & 15];
  }
  out[k] = '\0';
}

/* The GetConfigResponse: built once, its limits in force and step filled
 * in per call. */
struct scps_config_pb {
  scps_cluster_pb *cluster;
  Scps__V1__GetConfigResponse resp;
  Scps__V1__StackInfo *infos;
  Scps__V1__StackInfo **ptrs;
  char ***names;
  int n_stacks;
};

static void config_pb_free(struct scps_config_pb *g) {
  if (!g) return;
  for (int st = 0; g->infos && st < g->n_stacks; st++) {
    free(g->infos[st].row_offsets);
    free(g->infos[st].rotations);
    free(g->infos[st].feature_sample_offsets);
    if (g->names) free(g->names[st]);
  }
  free(g->infos);
  free(g->ptrs);
  free(g->names);
  scps_cluster_pb_destroy(g->cluster);
  free(g);
}

int scps_handlers_init(scps_server *s, scps_error *err) {
  const scps_layout *l = s->layout;
  struct scps_config_pb *g = calloc(1, sizeof *g);
  if (!g) return scps_error_set(err, SCPS_ENOMEM, "out of memory");
  s->config = g;
  /* Idle blocks kept: two clients with two batches in flight each. */
  if (scps_scratch_create(4, &s->scratch)) return scps_error_set(err, SCPS_ENOMEM, "out of memory");
  int rc = scps_cluster_pb_create(&s->opts.topology, s->tables, s->opts.n_tables, s->features,
                                  s->opts.n_features, &g->cluster, err);
  if (rc) return rc;
  /* Of the canonical declaration: processes started from files that differ
   * only in what they do not read serve one cluster. */
  rc = scps_fingerprint(&s->opts.topology, s->tables, s->opts.n_tables, s->features, s->opts.n_features,
                        s->fingerprint, err);
  if (rc) return rc;

  Scps__V1__GetConfigResponse *resp = &g->resp;
  scps__v1__get_config_response__init(resp);
  resp->cluster = &g->cluster->msg;
  resp->process_index = s->opts.process_index;
  resp->config_fingerprint.data = s->fingerprint;
  resp->config_fingerprint.len = sizeof s->fingerprint;
  resp->max_message_bytes = s->opts.max_message_bytes;
  resp->version = SCPS_VERSION;
  resp->wire_revision = SCPS_WIRE_REVISION;
  resp->limit_policy = s->opts.limit_policy == SCPS_LIMIT_DROP ? SCPS__V1__LIMIT_POLICY__LIMIT_POLICY_DROP
                                                               : SCPS__V1__LIMIT_POLICY__LIMIT_POLICY_REFUSE;
  resp->n_stacks = (size_t)l->n_stacks;
  g->n_stacks = l->n_stacks;
  g->infos = calloc((size_t)l->n_stacks, sizeof *g->infos);
  g->ptrs = calloc((size_t)l->n_stacks, sizeof *g->ptrs);
  g->names = calloc((size_t)l->n_stacks, sizeof *g->names);
  if (!g->infos || !g->ptrs || !g->names) return scps_error_set(err, SCPS_ENOMEM, "out of memory");
  for (int st = 0; st < l->n_stacks; st++) {
    const scps_stack_layout *sl = &l->stacks[st];
    Scps__V1__StackInfo *in = &g->infos[st];
    scps__v1__stack_info__init(in);
    g->ptrs[st] = in;
    in->name = (char *)sl->name;
    in->dim = sl->dim;
    in->rows_per_sc = sl->rows_per_sc;
    in->total_sample_count = sl->total_sample_count;
    in->n_tables = in->n_row_offsets = in->n_rotations = (size_t)sl->n_tables;
    in->n_features = in->n_feature_sample_offsets = (size_t)sl->n_features;
    g->names[st] = calloc((size_t)(sl->n_tables + sl->n_features + 1), sizeof(char *));
    in->row_offsets = calloc((size_t)sl->n_tables + 1, sizeof(int64_t));
    in->rotations = calloc((size_t)sl->n_tables + 1, sizeof(int32_t));
    in->feature_sample_offsets = calloc((size_t)sl->n_features + 1, sizeof(int64_t));
    if (!g->names[st] || !in->row_offsets || !in->rotations || !in->feature_sample_offsets)
      return scps_error_set(err, SCPS_ENOMEM, "out of memory building the configuration response");
    in->tables = g->names[st];
    in->features = g->names[st] + sl->n_tables;
    for (int k = 0; k < sl->n_tables; k++) {
      int t = sl->tables[k];
      in->tables[k] = l->table_specs[t].name;
      in->row_offsets[k] = l->tables[t].row_offset_in_shard;
      in->rotations[k] = l->tables[t].shard_rotation;
    }
    for (int k = 0; k < sl->n_features; k++) {
      int f = sl->features[k];
      in->features[k] = l->feature_specs[f].name;
      in->feature_sample_offsets[k] = l->features[f].sample_offset;
    }
  }
  resp->stacks = g->ptrs;

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

void scps_handlers_free(scps_server *s) {
  if (s->sample_src && s->layout)
    for (int st = 0; st < s->layout->n_stacks; st++) free(s->sample_src[st]);
  free(s->sample_src);
  free(s->sc_stats);
  for (int k = 0; k < s->n_sc_locks; k++) pthread_rwlock_destroy(&s->sc_locks[k]);
  free(s->sc_locks);
  s->n_sc_locks = 0;
  config_pb_free(s->config);
  s->config = NULL;
  scps_scratch_release(s->scratch);
  s->scratch = NULL;
}

/* protobuf-c's structs take about 10x a message's bytes (a ClusterSpec of
 * 65536 tables: 4.2 MB on the wire, 42.6 MB decoded), but empty
 * sub-messages or unknown fields 80x and more: decoding stops past this
 * many bytes per byte received (plus a floor), and past UNPACK_MAX. */
#define UNPACK_PER_BYTE 16
#define UNPACK_FLOOR ((size_t)1 << 20)
#define UNPACK_MAX ((size_t)256 << 20)

typedef struct unpack_budget {
  size_t left;
  bool exceeded;
} unpack_budget;

static void *budget_alloc(void *ud, size_t n) {
  unpack_budget *b = ud;
  if (n > b->left) {
    b->exceeded = true;
    return NULL;
  }
  b->left -= n;
  return malloc(n);
}

static void budget_free(void *ud, void *p) {
  (void)ud;
  free(p);
}

/* The most decoding a request of len bytes may allocate. */
static size_t unpack_limit(size_t len) {
  return len < (UNPACK_MAX - UNPACK_FLOOR) / UNPACK_PER_BYTE ? UNPACK_FLOOR + UNPACK_PER_BYTE * len : UNPACK_MAX;
}

size_t scps_request_memory(const scps_call *c, size_t len) {
  /* scps_request_decode copies every array but the gradients once. */
  if (c->method == SCPS_M_LOOKUP || c->method == SCPS_M_APPLY_GRADIENTS) return 2 * len;
  /* scps_call_read_payload's copy, then protobuf-c's structs. */
  return len + unpack_limit(len);
}

ProtobufCMessage *scps_read_request(scps_call *c, const ProtobufCMessageDescriptor *desc) {
  uint8_t *data;
  size_t len;
  char msg[256];
  int rc = scps_call_read_payload(c, &data, &len);
  if (rc) {
    snprintf(msg, sizeof msg, "%s: no request message received", scps_method_name(c->method));
    scps_call_finish(c, GRPC_STATUS_INVALID_ARGUMENT, msg, NULL, 0);
    return NULL;
  }
  size_t budget = unpack_limit(len);
  unpack_budget b = {budget, false};
  ProtobufCAllocator alloc = {budget_alloc, budget_free, &b};
  /* What it allocates is plain malloc memory: freed later with the default
   * allocator, as every other request. */
  ProtobufCMessage *m = protobuf_c_message_unpack(desc, &alloc, len, data);
  free(data);
  if (!m && b.exceeded) {
    snprintf(msg, sizeof msg, "%s: request of %zu bytes needs more than %zu bytes of memory to decode (at most %dx "
             "its size plus 1 MiB, and 256 MiB)", scps_method_name(c->method), len, budget, UNPACK_PER_BYTE);
    scps_call_finish(c, GRPC_STATUS_RESOURCE_EXHAUSTED, msg, NULL, 0);
  } else if (!m) {
    snprintf(msg, sizeof msg, "%s: request of %zu bytes is not a valid %s message", scps_method_name(c->method),
             len, desc->name);
    scps_call_finish(c, GRPC_STATUS_INVALID_ARGUMENT, msg, NULL, 0);
  }
  c->request = m;
  return m;
}

static void handle_get_config(scps_call *c) {
  scps_server *s = c->srv;
  Scps__V1__GetConfigRequest *req =
      (Scps__V1__GetConfigRequest *)scps_read_request(c, &scps__v1__get_config_request__descriptor);
  if (!req) return;
  if (req->expected) {
    scps_cluster_spec cs;
    scps_error err;
    char msg[SCPS_ERROR_MSG_MAX + 64];
    if (scps_cluster_spec_from_pb(req->expected, &cs, &err)) {
      snprintf(msg, sizeof msg, "expected: %s", err.msg);
      scps_call_finish(c, GRPC_STATUS_INVALID_ARGUMENT, msg, NULL, 0);
      return;
    }
    /* A configuration no server could serve is the client's mistake, not
     * another cluster's: say what is wrong with it. */
    if (scps_topology_validate(&cs.topology, &err) ||
        scps_specs_validate(cs.tables, cs.n_tables, cs.features, cs.n_features, &err)) {
      scps_cluster_spec_free(&cs);
      snprintf(msg, sizeof msg, "expected: %s", err.msg);
      scps_call_finish(c, GRPC_STATUS_INVALID_ARGUMENT, msg, NULL, 0);
      return;
    }
    char diff[512];
    int d = scps_specs_diff(&cs.topology, cs.tables, cs.n_tables, cs.features, cs.n_features,
                            &s->opts.topology, s->tables, s->opts.n_tables, s->features, s->opts.n_features,
                            "expected", "this process", diff, sizeof diff);
    scps_cluster_spec_free(&cs);
    if (d) {
      snprintf(msg, sizeof msg, "process %d serves another cluster configuration: %s", s->opts.process_index,
               diff);
      scps_call_finish(c, GRPC_STATUS_FAILED_PRECONDITION, msg, NULL, 0);
      return;
    }
  }
  /* Packed under the saver's lock: the limits in force and the step change
   * with Checkpoint requests, and two threads may answer GetConfig at once. */
  struct scps_config_pb *g = s->config;
  scps_saver *sv = &s->saver;
  pthread_mutex_lock(&sv->mu);
  for (int st = 0; st < g->n_stacks; st++) {
    g->infos[st].max_ids_per_partition = sv->limits[st].max_ids_per_partition;
    g->infos[st].max_unique_ids_per_partition = sv->limits[st].max_unique_ids_per_partition;
  }
  g->resp.last_step_present_case = sv->last_step >= 0 ? SCPS__V1__GET_CONFIG_RESPONSE__LAST_STEP_PRESENT_LAST_STEP
                                                      : SCPS__V1__GET_CONFIG_RESPONSE__LAST_STEP_PRESENT__NOT_SET;
  g->resp.last_step = sv->last_step;
  g->resp.restored_from = sv->restored_from;
  g->resp.checkpoint_dir = s->opts.checkpoint_dir ? (char *)s->opts.checkpoint_dir : (char *)"";
  g->resp.state_id = atomic_load(&s->state_id);
  size_t len = scps__v1__get_config_response__get_packed_size(&g->resp);
  uint8_t *buf = malloc(len ? len : 1);
  if (buf) scps__v1__get_config_response__pack(&g->resp, buf);
  pthread_mutex_unlock(&sv->mu);
  if (!buf) {
    scps_call_finish(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "GetConfig: out of memory", NULL, 0);
    return;
  }
  scps_call_finish(c, GRPC_STATUS_OK, NULL, buf, len);
  free(buf);
}

static void handle_health(scps_call *c) {
  scps_server *s = c->srv;
  if (!scps_read_request(c, &scps__v1__health_request__descriptor)) return;
  Scps__V1__HealthResponse r = SCPS__V1__HEALTH_RESPONSE__INIT;
  r.status = atomic_load(&s->draining) ? SCPS__V1__HEALTH_RESPONSE__STATUS__STATUS_DRAINING
                                       : SCPS__V1__HEALTH_RESPONSE__STATUS__STATUS_SERVING;
  r.process_index = s->opts.process_index;
  r.uptime_seconds = (double)scps_clock_ns() * 1e-9 - s->start_time;
  scps_call_finish_packed(c, &r.base);
}

static void handle_stats(scps_call *c) {
  scps_server *s = c->srv;
  const scps_layout *l = s->layout;
  if (!scps_read_request(c, &scps__v1__stats_request__descriptor)) return;
  Scps__V1__StatsResponse r = SCPS__V1__STATS_RESPONSE__INIT;
  r.process_index = s->opts.process_index;
  r.uptime_seconds = (double)scps_clock_ns() * 1e-9 - s->start_time;
  int S = s->S, ns = l->n_stacks;
  Scps__V1__SparseCoreStats *scs = calloc((size_t)S, sizeof *scs), **scp = calloc((size_t)S, sizeof *scp);
  Scps__V1__StackStats *sts = calloc((size_t)ns, sizeof *sts), **stp = calloc((size_t)ns, sizeof *stp);
  int32_t *counts = calloc((size_t)ns * (size_t)S * 2, sizeof *counts);
  Scps__V1__MethodStats ms[SCPS_M_COUNT], *msp[SCPS_M_COUNT];
  scps_stage_stats stages[SCPS_MAX_SC_PER_PROCESS + 1];
  Scps__V1__StageStats sgs[SCPS_MAX_SC_PER_PROCESS + 2], *sgp[SCPS_MAX_SC_PER_PROCESS + 2];
  if (!scs || !scp || !sts || !stp || !counts) {
    scps_call_finish(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "Stats: out of memory", NULL, 0);
    goto out;
  }
  for (int k = 0; k < S; k++) {
    const scps_hbm *h = scps_engine_hbm(s->engine, k);
    scps__v1__sparse_core_stats__init(&scs[k]);
    scs[k].sparse_core = h->sc;
    scs[k].memory_used_bytes = h->used;
    scs[k].memory_capacity_bytes = h->capacity;
    scp[k] = &scs[k];
  }
  r.n_sparse_cores = (size_t)S;
  r.sparse_cores = scp;
  for (int st = 0; st < ns; st++) {
    Scps__V1__StackStats *x = &sts[st];
    scps__v1__stack_stats__init(x);
    x->stack = (char *)l->stacks[st].name;
    x->n_max_ids_per_partition = x->n_max_unique_ids_per_partition = (size_t)S;
    x->max_ids_per_partition = counts + (size_t)st * (size_t)S * 2;
    x->max_unique_ids_per_partition = x->max_ids_per_partition + S;
    for (int k = 0; k < S; k++) {
      scps_sc_stack_stats *q = &s->sc_stats[st * S + k];
      x->max_ids_per_partition[k] = atomic_load(&q->max_ids);
      x->max_unique_ids_per_partition[k] = atomic_load(&q->max_unique);
      x->ids_looked_up += atomic_load(&q->ids_looked_up);
      x->rows_updated += atomic_load(&q->rows_updated);
    }
    stp[st] = x;
  }
  r.n_stacks = (size_t)ns;
  r.stacks = stp;
  Scps__V1__CheckpointStats ck = SCPS__V1__CHECKPOINT_STATS__INIT;
  char last_path[sizeof s->saver.last_path];
  scps_saver *sv = &s->saver;
  pthread_mutex_lock(&sv->mu);
  for (int st = 0; st < ns; st++) {
    sts[st].max_ids_limit = sv->limits[st].max_ids_per_partition;
    sts[st].max_unique_ids_limit = sv->limits[st].max_unique_ids_per_partition;
  }
  ck.saves = sv->saves;
  ck.failures = sv->failures;
  ck.last_step = sv->last_saved_step;
  memcpy(last_path, sv->last_path, sizeof last_path);
  ck.last_bytes = sv->last_bytes;
  ck.last_seconds = sv->last_seconds;
  ck.saving = sv->saving;
  ck.bytes_total = sv->bytes_total;
  pthread_mutex_unlock(&sv->mu);
  ck.last_path = last_path;
  r.checkpoints = &ck;
  r.pushes_sums_checked = atomic_load(&s->pushes_sums_checked);
  Scps__V1__MemoryStats mem = SCPS__V1__MEMORY_STATS__INIT;
  scps_limits_stats(s, &mem);
  r.memory = &mem;
  r.pushes_updates_checked = atomic_load(&s->pushes_updates_checked);
  for (int m = 0; m < SCPS_M_COUNT; m++) {
    scps__v1__method_stats__init(&ms[m]);
    ms[m].method = (char *)scps_method_name(m);
    ms[m].calls = atomic_load(&s->methods[m].calls);
    ms[m].errors = atomic_load(&s->methods[m].errors);
    ms[m].bytes_received = atomic_load(&s->methods[m].bytes_in);
    ms[m].bytes_sent = atomic_load(&s->methods[m].bytes_out);
    ms[m].seconds = (double)atomic_load(&s->methods[m].ns) * 1e-9;
    msp[m] = &ms[m];
  }
  r.n_methods = SCPS_M_COUNT;
  r.methods = msp;
  int n = scps_pipeline_stats(s->pipeline, stages, SCPS_MAX_SC_PER_PROCESS + 1);
  for (int i = 0; i < n; i++) {
    scps__v1__stage_stats__init(&sgs[i]);
    sgs[i].stage = stages[i].name;
    sgs[i].queue_depth = stages[i].queue_depth;
    sgs[i].tasks = stages[i].tasks;
    sgs[i].busy_seconds = stages[i].busy_seconds;
    sgp[i] = &sgs[i];
  }
  scps__v1__stage_stats__init(&sgs[n]);
  sgs[n].stage = "inline";
  sgs[n].tasks = atomic_load(&s->inline_lookups);
  sgs[n].busy_seconds = (double)atomic_load(&s->inline_ns) * 1e-9;
  sgp[n] = &sgs[n];
  r.n_stages = (size_t)n + 1;
  r.stages = sgp;
  scps_call_finish_packed(c, &r.base);
out:
  free(scs);
  free(scp);
  free(sts);
  free(stp);
  free(counts);
}

/* The stack a StackPartitions names (into cs->stack) and the number of
 * its sc_offsets. */
static grpc_status_code check_head(const scps_call *c, const scps_req_partitions *sp, const char *field,
                                   call_stack *cs, char *msg, size_t len) {
  int st = sp->stack ? scps_layout_find_stack(c->srv->layout, sp->stack) : -1;
  if (st < 0) {
    snprintf(msg, len, "%s.stack: unknown stack '%s' (GetConfig lists the stacks)", field, sp->stack ? sp->stack : "");
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  cs->stack = st;
  if (sp->n_sc_offsets != (size_t)c->srv->S + 1) {
    snprintf(msg, len, "%s.sc_offsets: %zu entries, need sc_per_process + 1 = %d", field, sp->n_sc_offsets,
             c->srv->S + 1);
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  return GRPC_STATUS_OK;
}

/* sc_offsets: S + 1 of them, from 0 to n (of `what`: entries or rows),
 * never falling. All are checked before any SparseCore's view is built: an
 * offset beyond n followed by a smaller one would otherwise let that view
 * run past the arrays. */
static grpc_status_code check_offsets(const scps_call *c, const scps_req_partitions *sp, size_t n, const char *what,
                                      const char *field, char *msg, size_t len) {
  const int32_t S = c->srv->S;
  if (sp->sc_offsets[0] != 0 || sp->sc_offsets[S] != n) {
    snprintf(msg, len, "%s.sc_offsets: must start at 0 and end at the %s count %zu (got %u .. %u)", field, what, n,
             sp->sc_offsets[0], sp->sc_offsets[S]);
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  for (int k = 0; k < S; k++)
    if (sp->sc_offsets[k + 1] < sp->sc_offsets[k]) {
      snprintf(msg, len, "%s.sc_offsets[%d] = %u is below sc_offsets[%d] = %u", field, k + 1,
               sp->sc_offsets[k + 1], k, sp->sc_offsets[k]);
      return GRPC_STATUS_INVALID_ARGUMENT;
    }
  return GRPC_STATUS_OK;
}

/* Checks one StackPartitions against the layout and turns it into per
 * SparseCore COO views, its gain_exceptions expanded into sp's gains.
 * Returns a gRPC status; msg names field and value. */
static grpc_status_code check_partitions(scps_call *c, scps_req_partitions *sp, const char *field,
                                         call_stack *cs, char *msg, size_t len) {
  scps_server *s = c->srv;
  grpc_status_code bad = check_head(c, sp, field, cs, msg, len);
  if (bad != GRPC_STATUS_OK) return bad;
  const int st = cs->stack;
  size_t n = sp->rows.len / 4;
  if (sp->rows.len % 4) {
    snprintf(msg, len, "%s.rows: %zu bytes, not 4 bytes per entry", field, sp->rows.len);
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  char why[160];
  int rc = scps_request_expand_samples(sp, n, why, sizeof why);
  if (rc) {
    snprintf(msg, len, "%s: %s", field, why);
    return rc == SCPS_ENOMEM ? GRPC_STATUS_RESOURCE_EXHAUSTED : GRPC_STATUS_INVALID_ARGUMENT;
  }
  if (sp->samples.len != sp->rows.len || (sp->gains.len && sp->gains.len != sp->rows.len)) {
    snprintf(msg, len,
             "%s: rows, samples and gains hold %zu, %zu and %zu bytes; each needs 4 bytes per entry and all must "
             "match (or gains empty: every gain 1.0 but those in gain_exceptions)",
             field, sp->rows.len, sp->samples.len, sp->gains.len);
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  rc = scps_request_expand_gains(sp, n, why, sizeof why);
  if (rc) {
    snprintf(msg, len, "%s: %s", field, why);
    return rc == SCPS_ENOMEM ? GRPC_STATUS_RESOURCE_EXHAUSTED : GRPC_STATUS_INVALID_ARGUMENT;
  }
  bad = check_offsets(c, sp, n, "entry", field, msg, len);
  if (bad != GRPC_STATUS_OK) return bad;
  const uint32_t *rows = (const uint32_t *)(const void *)sp->rows.data;
  const uint32_t *samples = (const uint32_t *)(const void *)sp->samples.data;
  const float *gains = sp->gains.len ? (const float *)(const void *)sp->gains.data : NULL;
  for (int k = 0; k < s->S; k++) {
    uint32_t a = sp->sc_offsets[k], b = sp->sc_offsets[k + 1];
    cs->coo[k] = (scps_coo){b - a, rows + a, samples + a, gains ? gains + a : NULL};
    scps_error err;
    if (scps_engine_check_coo(s->engine, st, k, &cs->coo[k], &err)) {
      snprintf(msg, len, "%s: %s", field, err.msg);
      return GRPC_STATUS_INVALID_ARGUMENT;
    }
  }
  return GRPC_STATUS_OK;
}

/* Per (source, destination) partition counts of the request's partition
 * for local SparseCore k, folded into the server's FDO maxima; run by the
 * worker that gathers for k, so the partitions are counted side by side. */
static void record_partition_stats(scps_server *s, const call_stack *cs, int32_t k) {
  int32_t N = s->layout->num_sc;
  int32_t small[2 * 64];
  int32_t *ids = N <= 64 ? small : malloc(sizeof *ids * 2 * (size_t)N);
  if (!ids || scps_fdo_count_sources(&cs->coo[k], s->sample_src[cs->stack], N, ids, ids + N)) goto out;
  int32_t mx = 0, mu = 0;
  for (int32_t i = 0; i < N; i++) {
    if (ids[i] > mx) mx = ids[i];
    if (ids[N + i] > mu) mu = ids[N + i];
  }
  scps_sc_stack_stats *q = &s->sc_stats[cs->stack * s->S + k];
  int cur = atomic_load(&q->max_ids);
  while (mx > cur && !atomic_compare_exchange_weak(&q->max_ids, &cur, mx)) {
  }
  cur = atomic_load(&q->max_unique);
  while (mu > cur && !atomic_compare_exchange_weak(&q->max_unique, &cur, mu)) {
  }
out:
  if (ids != small) free(ids);
}

grpc_status_code scps_check_view(scps_call *c, const uint8_t *fp, size_t fp_len, int32_t process_index,
                                 char *msg, size_t len) {
  scps_server *s = c->srv;
  if (fp_len != sizeof s->fingerprint || memcmp(fp, s->fingerprint, sizeof s->fingerprint)) {
    char a[13], b[13];
    hex12(fp, fp_len, a);
    hex12(s->fingerprint, sizeof s->fingerprint, b);
    snprintf(msg, len,
             "config_fingerprint '%s' is not this cluster's '%s': the client was built for another "
             "configuration; call GetConfig and reconnect",
             a, b);
    return GRPC_STATUS_FAILED_PRECONDITION;
  }
  if (process_index != s->opts.process_index) {
    snprintf(msg, len, "process_index %d: this is process %d; list the servers in process-index order",
             process_index, s->opts.process_index);
    return GRPC_STATUS_FAILED_PRECONDITION;
  }
  return GRPC_STATUS_OK;
}

static int alloc_stacks(scps_call *c, size_t n) {
  c->n_stacks = (int)n;
  c->stacks = calloc(n ? n : 1, sizeof *c->stacks);
  return c->stacks ? 0 : SCPS_ENOMEM;
}

static bool duplicate_stack(const scps_call *c, int upto, int stack) {
  for (int i = 0; i < upto; i++)
    if (c->stacks[i].stack == stack) return true;
  return false;
}

/* The samples [*first, *end) of a stack that SparseCore worker k gathers. */
static void sample_slice(int64_t total, int32_t S, int32_t k, uint32_t *first, uint32_t *end) {
  *first = (uint32_t)(total * k / S);
  *end = (uint32_t)(total * (k + 1) / S);
}

/* A gang job (scps_pipeline.h): worker k writes only its slice of every
 * stack's activations, reading all local SparseCores' rows for it, so the
 * process's partial is built once, without a block per SparseCore to zero
 * and sum. Per sample the SparseCores are accumulated in order, as an
 * in-process engine does.
 *
 * Once the drain has timed out, the calls are cancelled: queued Lookups
 * are answered without being computed, so the process exits after the drain
 * time, not after the backlog. Queued ApplyGradients still run whole. */
static void lookup_sc(scps_job *job, int32_t k) {
  scps_call *c = job->data;
  scps_server *s = c->srv;
  if (atomic_load(&s->cancelling)) return;
  for (int i = 0; i < c->n_stacks; i++) {
    call_stack *cs = &c->stacks[i];
    const scps_stack_layout *sl = &s->layout->stacks[cs->stack];
    const size_t dim = (size_t)sl->dim;
    const bool bf16 = c->format == SCPS__V1__FLOAT_FORMAT__FLOAT_FORMAT_BFLOAT16;
    if (cs->distinct) {
      const uint32_t first = cs->row_start[k];
      if (bf16) scps_engine_copy_rows_bf16(s->engine, cs->stack, k, &cs->coo[k], cs->encoded + first * dim * 2);
      else scps_engine_copy_rows(s->engine, cs->stack, k, &cs->coo[k], cs->act + first * dim);
    } else {
      uint32_t first, end;
      sample_slice(sl->total_sample_count, s->S, k, &first, &end);
      if (bf16)
        scps_engine_gather_bf16(s->engine, cs->stack, cs->coo, s->S, first, end, cs->encoded,
                                c->gather_scratch + (size_t)k * c->gather_stride);
      else
        scps_engine_gather(s->engine, cs->stack, cs->coo, s->S, first, end, cs->act,
                           c->gather_scratch + (size_t)k * c->gather_stride);
    }
    atomic_fetch_add(&s->sc_stats[cs->stack * s->S + k].ids_looked_up, (long long)cs->coo[k].n);
    record_partition_stats(s, cs, k);
  }
}

/* Activation memory shared by the slices of one response; freed by the last
 * slice gRPC releases, which may be after the call is gone. */
typedef struct scratch_owner {
  atomic_int refs;
  float *mem;
  size_t cap;
  scps_scratch *pool;
} scratch_owner;

static void scratch_release(void *p) {
  scratch_owner *o = p;
  if (atomic_fetch_sub(&o->refs, 1) == 1) {
    scps_scratch_give(o->pool, o->mem, o->cap);
    free(o);
  }
}

static size_t put_varint(uint8_t *p, uint64_t v) {
  size_t n = 0;
  for (; v >= 0x80; v >>= 7) p[n++] = (uint8_t)(v | 0x80);
  p[n++] = (uint8_t)v;
  return n;
}

static size_t varint_len(uint64_t v) {
  size_t n = 1;
  for (; v >= 0x80; v >>= 7) n++;
  return n;
}

/* LookupResponse written by hand so the activations go out without a copy:
 * per stack a small slice with the protobuf framing (stacks = 1,
 * StackActivations.stack = 1, .activations = 2) and a slice that points at
 * the activations themselves. */
static void lookup_tc(scps_job *job) {
  scps_call *c = job->data;
  scps_server *s = c->srv;
  if (atomic_load(&s->cancelling)) {
    scps_call_finish(c, GRPC_STATUS_CANCELLED, "Lookup: cancelled by the server's shutdown", NULL, 0);
    return;
  }
  grpc_slice *slices = malloc(sizeof *slices * 2 * (size_t)(c->n_stacks ? c->n_stacks : 1));
  scratch_owner *owner = malloc(sizeof *owner);
  if (!slices || !owner) {
    free(slices);
    free(owner);
    scps_call_finish(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "Lookup: out of memory encoding the response", NULL, 0);
    return;
  }
  owner->mem = c->scratch;
  owner->cap = c->scratch_cap;
  owner->pool = s->scratch;
  c->scratch = NULL;
  atomic_store(&owner->refs, c->n_stacks + 1);
  size_t total = 0;
  for (int i = 0; i < c->n_stacks; i++) {
    call_stack *cs = &c->stacks[i];
    const scps_stack_layout *sl = &s->layout->stacks[cs->stack];
    size_t block = (cs->distinct ? (size_t)cs->row_start[s->S] : (size_t)sl->total_sample_count) * (size_t)sl->dim;
    size_t name_len = strlen(sl->name), act_len = block * sizeof(float);
    void *act = cs->act;
    if (c->format == SCPS__V1__FLOAT_FORMAT__FLOAT_FORMAT_BFLOAT16) {
      act = cs->encoded;
      act_len = block * 2;
    }
    size_t inner = 1 + varint_len(name_len) + name_len + 1 + varint_len(act_len) + act_len;
    uint8_t head[SCPS_STACK_NAME_MAX + 48];
    size_t h = 0;
    head[h++] = 0x0a; /* LookupResponse.stacks, length-delimited */
    h += put_varint(head + h, inner);
    head[h++] = 0x0a; /* StackActivations.stack */
    h += put_varint(head + h, name_len);
    memcpy(head + h, sl->name, name_len);
    h += name_len;
    head[h++] = cs->distinct ? 0x1a : 0x12; /* StackActivations.rows or .activations */
    h += put_varint(head + h, act_len);
    slices[2 * i] = grpc_slice_from_copied_buffer((const char *)head, h);
    slices[2 * i + 1] = grpc_slice_new_with_user_data(act, act_len, scratch_release, owner);
    total += h + act_len;
  }
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(slices, 2 * (size_t)c->n_stacks);
  for (int i = 0; i < 2 * c->n_stacks; i++) grpc_slice_unref(slices[i]);
  free(slices);
  scratch_release(owner);
  scps_call_finish_buffer(c, bb, total);
}

static grpc_status_code check_format(scps_call *c, int format, const char *field, char *msg, size_t len) {
  if (format != SCPS__V1__FLOAT_FORMAT__FLOAT_FORMAT_FLOAT32 && format != SCPS__V1__FLOAT_FORMAT__FLOAT_FORMAT_BFLOAT16) {
    snprintf(msg, len, "%s %d: unknown FloatFormat (0 float32, 1 bfloat16)", field, format);
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  c->format = format;
  return GRPC_STATUS_OK;
}

/* Floats of scratch a stack's answer takes: its values, 4 or 2 bytes each. */
static size_t lookup_scratch(const scps_call *c, const call_stack *cs) {
  const scps_stack_layout *sl = &c->srv->layout->stacks[cs->stack];
  size_t values = cs->distinct ? (size_t)cs->row_start[c->srv->S] : (size_t)sl->total_sample_count;
  size_t block = values * (size_t)sl->dim;
  return c->format == SCPS__V1__FLOAT_FORMAT__FLOAT_FORMAT_BFLOAT16 ? (block + 1) / 2 : block;
}

/* Floats of gather scratch (scps_engine_gather, scps_engine_gather_bf16)
 * one SparseCore worker needs for its slice of each stack answered pooled,
 * one stack after another: the largest. */
static size_t lookup_gather_scratch(const scps_call *c) {
  const scps_server *s = c->srv;
  size_t most = 0;
  for (int i = 0; i < c->n_stacks; i++) {
    const call_stack *cs = &c->stacks[i];
    if (cs->distinct) continue;
    const scps_stack_layout *sl = &s->layout->stacks[cs->stack];
    size_t entries = 0;
    for (int k = 0; k < s->S; k++) entries += cs->coo[k].n;
    for (int k = 0; k < s->S; k++) {
      uint32_t first, end;
      sample_slice(sl->total_sample_count, s->S, k, &first, &end);
      size_t b = scps_engine_gather_scratch(entries, first, end);
      if (b > most) most = b;
    }
  }
  return (most + sizeof(float) - 1) / sizeof(float);
}

/* Decodes the call's Lookup or ApplyGradients request into c->req; on
 * failure answers the call and returns false. */
static bool read_data_request(scps_call *c, scps_request_kind kind) {
  char msg[512];
  if (!c->payload) {
    snprintf(msg, sizeof msg, "%s: no request message received", scps_method_name(c->method));
    scps_call_finish(c, GRPC_STATUS_INVALID_ARGUMENT, msg, NULL, 0);
    return false;
  }
  scps_server *s = c->srv;
  int rc = scps_request_decode(c->payload, kind, (size_t)s->layout->n_stacks, (size_t)s->S + 1, &c->req, msg,
                               sizeof msg);
  c->bytes_in = c->req.bytes;
  if (rc) {
    char full[600];
    snprintf(full, sizeof full, "%s: %s", scps_method_name(c->method), msg);
    scps_call_finish(c, rc == SCPS_ENOMEM ? GRPC_STATUS_RESOURCE_EXHAUSTED : GRPC_STATUS_INVALID_ARGUMENT, full,
                     NULL, 0);
    return false;
  }
  return true;
}

/* A small Lookup, whole on this thread: waking every SparseCore worker
 * across two barriers and then a TensorCore worker would cost more than the
 * gather itself, and a serving load of many small batches keeps the workers
 * busy handing work to each other. */
static void lookup_inline(scps_call *c) {
  scps_server *s = c->srv;
  int64_t t0 = scps_clock_ns();
  for (int k = 0; k < s->S; k++) pthread_rwlock_rdlock(&s->sc_locks[k]);
  for (int k = 0; k < s->S; k++) lookup_sc(&c->job, k);
  for (int k = s->S - 1; k >= 0; k--) pthread_rwlock_unlock(&s->sc_locks[k]);
  atomic_fetch_add(&s->inline_lookups, 1);
  atomic_fetch_add(&s->inline_ns, (long long)(scps_clock_ns() - t0));
  lookup_tc(&c->job);
}

/* The scratch a call needs (floats) is reserved in the memory budget
 * before it is taken (scps_scratch.h): done runs once it is, or once the
 * call is refused. */
static void wait_for_scratch(scps_call *c, size_t floats, void (*done)(scps_budget_waiter *, bool, size_t, size_t)) {
  c->wait.need = (floats ? floats : 1) * sizeof(float);
  c->wait.deadline_ns = scps_limits_wait_deadline(c);
  c->wait.done = done;
  scps_budget_wait(c->srv->budget, &c->wait);
}

static void refuse_for_memory(scps_call *c, const char *what, size_t in_use, size_t limit) {
  char msg[512];
  scps_limits_refusal(c, what, c->wait.need, in_use, limit, msg, sizeof msg);
  scps_call_finish(c, GRPC_STATUS_RESOURCE_EXHAUSTED, msg, NULL, 0);
}

static void lookup_admitted(scps_budget_waiter *w, bool admitted, size_t in_use, size_t limit);

static void handle_lookup(scps_call *c) {
  scps_server *s = c->srv;
  if (scps_restore_refused(c)) return;
  if (!read_data_request(c, SCPS_REQUEST_LOOKUP)) return;
  const scps_request *req = &c->req;
  char msg[SCPS_ERROR_MSG_MAX + 128], field[64];
  grpc_status_code st = scps_check_view(c, req->config_fingerprint.data, req->config_fingerprint.len,
                                        req->process_index, msg, sizeof msg);
  if (st == GRPC_STATUS_OK) st = check_format(c, (int)req->format, "activation_format", msg, sizeof msg);
  if (st == GRPC_STATUS_OK && alloc_stacks(c, req->n_stacks)) {
    scps_call_finish(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "Lookup: out of memory", NULL, 0);
    return;
  }
  if (st == GRPC_STATUS_OK && req->n_distinct_rows && req->n_distinct_rows != req->n_stacks) {
    snprintf(msg, sizeof msg, "distinct_rows: %zu flags for %zu stacks; send none or one per stack",
             req->n_distinct_rows, req->n_stacks);
    st = GRPC_STATUS_INVALID_ARGUMENT;
  }
  size_t scratch = 0;
  for (size_t i = 0; st == GRPC_STATUS_OK && i < req->n_stacks; i++) {
    snprintf(field, sizeof field, "stacks[%zu]", i);
    call_stack *cs = &c->stacks[i];
    st = check_partitions(c, &req->stacks[i].partitions, field, cs, msg, sizeof msg);
    if (st == GRPC_STATUS_OK && duplicate_stack(c, (int)i, cs->stack)) {
      snprintf(msg, sizeof msg, "%s.stack: stack '%s' listed twice", field, req->stacks[i].partitions.stack);
      st = GRPC_STATUS_INVALID_ARGUMENT;
    }
    if (st != GRPC_STATUS_OK) break;
    cs->distinct = req->n_distinct_rows && req->distinct_rows[i];
    if (cs->distinct) {
      cs->row_start[0] = 0;
      for (int k = 0; k < s->S; k++)
        cs->row_start[k + 1] = cs->row_start[k] + (uint32_t)scps_coo_distinct_rows(&cs->coo[k]);
    }
    scratch += lookup_scratch(c, cs);
  }
  if (st == GRPC_STATUS_OK) st = scps_partlimits_apply(c, msg, sizeof msg);
  if (st != GRPC_STATUS_OK) {
    scps_call_finish(c, st, msg, NULL, 0);
    return;
  }
  c->gather_stride = lookup_gather_scratch(c);
  wait_for_scratch(c, scratch + (size_t)s->S * c->gather_stride, lookup_admitted);
}

/* A Lookup once its answer and scratch are reserved in the memory budget
 * (on the thread that admitted it), or refused. */
static void lookup_admitted(scps_budget_waiter *w, bool admitted, size_t in_use, size_t limit) {
  scps_call *c = scps_call_of_wait(w);
  scps_server *s = c->srv;
  if (!admitted) {
    refuse_for_memory(c, "its answer and scratch", in_use, limit);
    return;
  }
  c->scratch = scps_scratch_take(s->scratch, w->need / sizeof(float), &c->scratch_cap);
  if (!c->scratch) {
    scps_call_finish(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "Lookup: out of memory for activations", NULL, 0);
    return;
  }
  size_t off = 0;
  for (int i = 0; i < c->n_stacks; i++) {
    if (c->format == SCPS__V1__FLOAT_FORMAT__FLOAT_FORMAT_BFLOAT16) c->stacks[i].encoded = (uint8_t *)(c->scratch + off);
    else c->stacks[i].act = c->scratch + off;
    off += lookup_scratch(c, &c->stacks[i]);
  }
  c->gather_scratch = c->scratch + off;
  c->job.sc_fn = lookup_sc;
  c->job.tc_fn = lookup_tc;
  c->job.data = c;
  c->job.gang = true;
  int64_t entries = 0;
  for (int i = 0; i < c->n_stacks; i++)
    for (int k = 0; k < s->S; k++) entries += (int64_t)c->stacks[i].coo[k].n;
  if (entries <= s->opts.inline_lookup_entries) {
    lookup_inline(c);
    return;
  }
  scps_pipeline_submit(s->pipeline, &c->job);
}

/* Values of gradients read from the request per step of read_gradients:
 * 16 KiB of float32, so each block is checked while still in L1. */
#define GRAD_BLOCK 4096

/* Worker k's share of every stack's gradients (an equal run of values),
 * out of the request's slices into the stack's buffer: float32, bfloat16
 * widened on the way, or bfloat16 as it came for a stack by sample
 * (grads_bf16), whose update widens them itself. Returns whether any value
 * is not finite: all exponent bits set, tested branch-free per block; the
 * largest magnitude of the stacks by sample goes to c->grad_mag[k]. */
static bool read_gradients(scps_call *c, int32_t k) {
  const int32_t S = c->srv->S;
  const bool bf16 = c->format == SCPS__V1__FLOAT_FORMAT__FLOAT_FORMAT_BFLOAT16;
  const size_t width = bf16 ? 2 : sizeof(float);
  uint8_t tmp[GRAD_BLOCK * sizeof(float)];
  uint32_t nonfinite = 0, mag = 0, row_mag = 0;
  for (int i = 0; i < c->n_stacks; i++) {
    call_stack *cs = &c->stacks[i];
    const size_t n = cs->grad_src.len / width, end = n * (size_t)(k + 1) / (size_t)S;
    for (size_t at = n * (size_t)k / (size_t)S; at < end; at += GRAD_BLOCK) {
      const size_t m = end - at < GRAD_BLOCK ? end - at : GRAD_BLOCK;
      const uint8_t *src = scps_slices_span(&c->req.msg, cs->grad_src.off + at * width, m * width, tmp);
      uint32_t high = 0;
      if (cs->grads_bf16) {
        uint16_t *raw = (uint16_t *)(void *)cs->grads + at;
        memcpy(raw, src, m * 2);
        for (size_t j = 0; j < m; j++) {
          const uint32_t h = raw[j] & 0x7fffu;
          nonfinite |= (uint32_t)(h >= 0x7f80u);
          high = h > high ? h : high;
        }
        high <<= 16;
      } else {
        float *dst = cs->grads + at;
        if (bf16) scps_bf16_decode(src, dst, m);
        else memcpy(dst, src, m * sizeof(float));
        for (size_t j = 0; j < m; j++) {
          uint32_t u;
          memcpy(&u, &dst[j], sizeof u);
          u &= 0x7fffffffu;
          nonfinite |= (uint32_t)(u >= 0x7f800000u);
          high = u > high ? u : high;
        }
      }
      /* Row sums pushed by row are applied as they are: no bound needed
       * on their sums, only on their size (updates_bounded). */
      if (!cs->by_row && high > mag) mag = high;
      if (cs->by_row && high > row_mag) row_mag = high;
    }
  }
  c->grad_mag[k] = mag;
  c->row_mag[k] = row_mag;
  return nonfinite != 0;
}

/* Whether no row sum of the call's stacks by sample can leave float32's
 * range: each is at most n x the largest |gain| x the largest |gradient|
 * for a partition of n entries, and float32 rounding adds at most a
 * relative n x 2^-24 to that over n adds. The same answer on every thread
 * once all workers have read their gradients. */
static bool sums_bounded(const scps_call *c) {
  uint32_t mag = 0;
  for (int k = 0; k < c->srv->S; k++) mag = c->grad_mag[k] > mag ? c->grad_mag[k] : mag;
  float gmax;
  memcpy(&gmax, &mag, sizeof gmax);
  for (int i = 0; i < c->n_stacks; i++) {
    const call_stack *cs = &c->stacks[i];
    if (cs->by_row) continue;
    for (int k = 0; k < c->srv->S; k++) {
      const double n = (double)cs->coo[k].n;
      float gain;
      memcpy(&gain, &cs->gain_mag[k], sizeof gain);
      if (!(n * (double)gain * (double)gmax * (1.0 + n * 0x1p-23) < 0x1p126)) return false;
    }
  }
  return true;
}

/* Every stack's updates on local SparseCore sc, under its lock; returns
 * the rows updated. */
static int64_t apply_updates(scps_call *c, int32_t sc) {
  scps_server *s = c->srv;
  int64_t rows = 0;
  pthread_rwlock_wrlock(&s->sc_locks[sc]);
  for (int i = 0; i < c->n_stacks; i++) {
    call_stack *cs = &c->stacks[i];
    const scps_coo *coo = &cs->coo[sc];
    int64_t distinct = 0;
    if (cs->by_row) {
      const size_t dim = (size_t)s->layout->stacks[cs->stack].dim;
      scps_engine_update_rows(s->engine, cs->stack, sc, coo->rows, coo->n, cs->grads + cs->row_start[sc] * dim,
                              &c->step);
      distinct = (int64_t)coo->n;
    } else {
      if (cs->grads_bf16)
        scps_engine_update_bf16(s->engine, cs->stack, sc, coo, (const uint16_t *)(void *)cs->grads, &c->step);
      else
        scps_engine_update(s->engine, cs->stack, sc, coo, cs->grads, &c->step);
      distinct = (int64_t)scps_coo_distinct_rows(coo);
    }
    atomic_fetch_add(&s->sc_stats[cs->stack * s->S + sc].rows_updated, (long long)distinct);
    rows += distinct;
  }
  pthread_rwlock_unlock(&s->sc_locks[sc]);
  return rows;
}

/* With the bound exceeded: whether every row sum of the stacks by sample
 * is finite, formed as the update forms it; if not, the first that is not
 * goes to c->sum_stack, sum_sc and sum_row. */
static bool sums_finite(scps_call *c) {
  const scps_server *s = c->srv;
  for (int i = 0; i < c->n_stacks; i++) {
    const call_stack *cs = &c->stacks[i];
    if (cs->by_row) continue;
    for (int k = 0; k < s->S; k++) {
      uint32_t row;
      if (scps_engine_sums_finite(s->engine, cs->stack, &cs->coo[k], cs->grads, cs->grads_bf16, &row)) continue;
      c->sum_stack = i;
      c->sum_sc = k;
      c->sum_row = row;
      return false;
    }
  }
  return true;
}

/* A bound on the magnitude of the gradient each row of coo[k] of stack cs
 * gets: by row, the largest value sent; by sample, as sums_bounded bounds
 * the sums. */
static double row_gradient_bound(const scps_call *c, const call_stack *cs, int32_t k) {
  uint32_t by_sample = 0, by_row = 0;
  for (int32_t w = 0; w < c->srv->S; w++) {
    by_sample = c->grad_mag[w] > by_sample ? c->grad_mag[w] : by_sample;
    by_row = c->row_mag[w] > by_row ? c->row_mag[w] : by_row;
  }
  float g, gain;
  if (cs->by_row) {
    memcpy(&g, &by_row, sizeof g);
    return (double)g;
  }
  memcpy(&g, &by_sample, sizeof g);
  memcpy(&gain, &cs->gain_mag[k], sizeof gain);
  const double n = (double)cs->coo[k].n;
  return n * (double)gain * (double)g * (1.0 + n * 0x1p-23);
}

/* Whether every row update of the call is proven finite
 * (scps_optimizer_update_bounded) from the shards' bounds the workers took
 * and the gradients' size. The same answer on every thread once all
 * workers have read their gradients. */
static bool updates_bounded(const scps_call *c) {
  const scps_server *s = c->srv;
  for (int i = 0; i < c->n_stacks; i++) {
    const call_stack *cs = &c->stacks[i];
    scps_opt_step ost;
    scps_optimizer_prepare(&s->layout->stacks[cs->stack].optimizer, &c->step, &ost);
    for (int32_t k = 0; k < s->S; k++)
      if (cs->coo[k].n && !scps_optimizer_update_bounded(&ost, cs->bounds[k], row_gradient_bound(c, cs, k)))
        return false;
  }
  return true;
}

/* With the bound not proving it: every row update computed without
 * writing (scps_engine_update_finite); the first that would leave a value
 * that is not finite goes to c->fault_stack, fault_sc and fault. */
static bool updates_finite(scps_call *c) {
  scps_server *s = c->srv;
  for (int i = 0; i < c->n_stacks; i++) {
    const call_stack *cs = &c->stacks[i];
    const size_t dim = (size_t)s->layout->stacks[cs->stack].dim;
    for (int32_t k = 0; k < s->S; k++) {
      const void *grads = cs->by_row ? (const void *)(cs->grads + cs->row_start[k] * dim) : (const void *)cs->grads;
      if (scps_engine_update_finite(s->engine, cs->stack, k, &cs->coo[k], grads, cs->grads_bf16, cs->by_row,
                                    &c->step, &c->fault))
        continue;
      c->fault_stack = i;
      c->fault_sc = k;
      return false;
    }
  }
  return true;
}

/* A gang job, so every worker is here at once: first each reads and checks
 * its share of the gradients (megabytes a single thread would copy while
 * the other cores wait) and finds its partitions' largest |gain|, then,
 * once all have, each updates its own SparseCore, unless any value was not
 * finite (apply_tc rejects the call). Where the bound on the row sums
 * leaves room for one to overflow, or the bounds on the values and the
 * gradients cannot prove every update finite (updates_bounded; rare:
 * values near float32's range), worker 0 alone sums every row, or
 * computes every row's update without writing (updates_finite), and then
 * updates every SparseCore or, if a value is not finite, nothing; the
 * others wait at the gang's closing barrier meanwhile, so no later job
 * (gang Lookups take no locks) runs until the tables are whole. */
static void apply_sc(scps_job *job, int32_t sc) {
  scps_call *c = job->data;
  scps_server *s = c->srv;
  if (read_gradients(c, sc)) atomic_store(&c->grads_bad, true);
  for (int i = 0; i < c->n_stacks; i++) {
    call_stack *cs = &c->stacks[i];
    const scps_coo *coo = &cs->coo[sc];
    if (cs->by_row) continue;
    /* A max of magnitude bits, not a sum of floats: it vectorises. */
    uint32_t mag = 0x3f800000u; /* 1.0f, every gain without gains */
    if (coo->gains) {
      mag = 0;
      for (size_t j = 0; j < coo->n; j++) {
        uint32_t u;
        memcpy(&u, &coo->gains[j], sizeof u);
        u &= 0x7fffffffu;
        mag = u > mag ? u : mag;
      }
    }
    cs->gain_mag[sc] = mag;
  }
  /* What this worker's SparseCore holds, before any worker writes. */
  for (int i = 0; i < c->n_stacks; i++) scps_engine_value_bounds(s->engine, c->stacks[i].stack, sc, c->stacks[i].bounds[sc]);
  scps_pipeline_gang_sync(s->pipeline, job);
  if (atomic_load(&c->grads_bad)) return;
  const bool sums_ok = sums_bounded(c), updates_ok = updates_bounded(c);
  if (sums_ok && updates_ok) {
    c->rows_updated[sc] = apply_updates(c, sc);
    return;
  }
  if (sc != 0) return;
  if (!sums_ok) {
    atomic_fetch_add(&s->pushes_sums_checked, 1);
    if (!sums_finite(c)) return;
  }
  if (!updates_ok) {
    atomic_fetch_add(&s->pushes_updates_checked, 1);
    if (!updates_finite(c)) return;
  }
  for (int k = 0; k < s->S; k++) c->rows_updated[k] = apply_updates(c, k);
}

/* Gradient j of a stack as the worker read it. */
static float grad_value(const call_stack *cs, size_t j) {
  return cs->grads_bf16 ? scps_bf16_to_f32(((const uint16_t *)(const void *)cs->grads)[j]) : cs->grads[j];
}

/* The first value that is not finite, in request order, named. */
static void name_bad_gradient(const scps_call *c, char *msg, size_t len) {
  const int32_t S = c->srv->S;
  for (int i = 0; i < c->n_stacks; i++) {
    const call_stack *cs = &c->stacks[i];
    const size_t dim = (size_t)c->srv->layout->stacks[cs->stack].dim;
    const size_t n = cs->by_row ? (size_t)cs->row_start[S] * dim
                                : (size_t)c->srv->layout->stacks[cs->stack].total_sample_count * dim;
    for (size_t j = 0; j < n; j++) {
      const float v = grad_value(cs, j);
      if (isfinite(v)) continue;
      if (!cs->by_row) {
        snprintf(msg, len, "stacks[%d].gradients: element %zu (sample %zu, column %zu) is %g; gradients must be finite",
                 i, j, j / dim, j % dim, v);
        return;
      }
      int32_t k = 0;
      while (k + 1 < S && cs->row_start[k + 1] <= j / dim) k++;
      snprintf(msg, len,
               "stacks[%d].row_gradients: element %zu (row %u of local SparseCore %d, column %zu) is %g; gradients "
               "must be finite",
               i, j, cs->coo[k].rows[j / dim - cs->row_start[k]], k, j % dim, v);
      return;
    }
  }
  snprintf(msg, len, "a gradient is not finite");
}

/* The row updates_finite found, named: INVALID_ARGUMENT for an update
 * that would leave a value not finite, FAILED_PRECONDITION for a row that
 * already holds one (only a checkpoint written before such updates were
 * refused can have put it there). */
static grpc_status_code name_fault(const scps_call *c, char *msg, size_t len) {
  const scps_server *s = c->srv;
  const scps_layout *l = s->layout;
  const call_stack *cs = &c->stacks[c->fault_stack];
  const scps_update_fault *f = &c->fault;
  const int32_t sc = s->opts.process_index * s->S + c->fault_sc;
  const scps_optimizer_type type = l->stacks[cs->stack].optimizer.type;
  char row[SCPS_NAME_MAX + 96];
  int t;
  int64_t id;
  if (scps_layout_row_to_id(l, cs->stack, sc, f->row, &t, &id))
    snprintf(row, sizeof row, "local row %u of SparseCore %d", f->row, sc);
  else
    snprintf(row, sizeof row, "local row %u of SparseCore %d (table '%s' id %lld)", f->row, sc, l->table_specs[t].name,
             (long long)id);
  const char *what = f->array ? scps_optimizer_slot_name(type, f->array - 1) : "row";
  if (f->already) {
    snprintf(msg, len,
             "stacks[%d] (stack '%s'): %s already holds a value that is not finite (%s column %d is %g), written "
             "before such updates were refused or restored from a checkpoint that held it; pushes to it are refused "
             "until a good checkpoint is restored (ReadRows shows it); nothing was applied",
             c->fault_stack, l->stacks[cs->stack].name, row, what, f->column, (double)f->before);
    return GRPC_STATUS_FAILED_PRECONDITION;
  }
  snprintf(msg, len,
           "stacks[%d] (stack '%s'): the update would make %s not finite (%s column %d: %g becomes %g); lower the "
           "learning rate or the gradients; nothing was applied",
           c->fault_stack, l->stacks[cs->stack].name, row, what, f->column, (double)f->before, (double)f->after);
  return GRPC_STATUS_INVALID_ARGUMENT;
}

static void apply_tc(scps_job *job) {
  scps_call *c = job->data;
  char msg[SCPS_ERROR_MSG_MAX + 512]; /* name_fault names a stack, a table and a slot */
  if (atomic_load(&c->grads_bad)) {
    name_bad_gradient(c, msg, sizeof msg);
    scps_saver_apply_rejected(c->srv);
    scps_call_finish(c, GRPC_STATUS_INVALID_ARGUMENT, msg, NULL, 0);
    return;
  }
  if (c->sum_stack >= 0) {
    snprintf(msg, sizeof msg,
             "stacks[%d].gradients: the sum of gain x gradient over the entries of row %u of local SparseCore %d "
             "overflows float32 (each gradient is finite, their sum is not); scale the loss or the gradients down",
             c->sum_stack, c->sum_row, c->sum_sc);
    scps_saver_apply_rejected(c->srv);
    scps_call_finish(c, GRPC_STATUS_INVALID_ARGUMENT, msg, NULL, 0);
    return;
  }
  if (c->fault_stack >= 0) {
    const grpc_status_code st = name_fault(c, msg, sizeof msg);
    scps_saver_apply_rejected(c->srv);
    scps_call_finish(c, st, msg, NULL, 0);
    return;
  }
  Scps__V1__ApplyGradientsResponse r = SCPS__V1__APPLY_GRADIENTS_RESPONSE__INIT;
  for (int k = 0; k < c->srv->S; k++) r.rows_updated += c->rows_updated[k];
  /* Asked only of callers that may answer with a Checkpoint; for the
   * others the server's solo save covers the period. */
  r.checkpoint_due = scps_saver_apply_done(c->srv, c->step.step) && scps_call_may(c, SCPS_M_CHECKPOINT);
  scps_call_finish_packed(c, &r.base);
}

/* A by-row stack's partitions (StackGradients.row_gradients): a known
 * stack, S + 1 offsets into rows, no samples or gains, and each
 * SparseCore's rows strictly ascending and in range. */
static grpc_status_code check_row_partitions(scps_call *c, scps_req_partitions *sp, const char *field,
                                             call_stack *cs, char *msg, size_t len) {
  scps_server *s = c->srv;
  grpc_status_code bad = check_head(c, sp, field, cs, msg, len);
  if (bad != GRPC_STATUS_OK) return bad;
  const int st = cs->stack;
  cs->by_row = true;
  if (sp->samples.len || sp->samples_u16.len || sp->gains.len || sp->gain_exceptions.len) {
    snprintf(msg, len,
             "%s: the stack's gradients field is empty, so its gradients are read by row (row_gradients), and "
             "then samples, samples_u16, gains and gain_exceptions must be empty; they hold %zu, %zu, %zu and %zu "
             "bytes",
             field, sp->samples.len, sp->samples_u16.len, sp->gains.len, sp->gain_exceptions.len);
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  size_t n = sp->rows.len / 4;
  if (sp->rows.len % 4) {
    snprintf(msg, len, "%s.rows: %zu bytes, not 4 per row", field, sp->rows.len);
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  bad = check_offsets(c, sp, n, "row", field, msg, len);
  if (bad != GRPC_STATUS_OK) return bad;
  const uint32_t *rows = (const uint32_t *)(const void *)sp->rows.data;
  for (int k = 0; k < s->S; k++) {
    uint32_t a = sp->sc_offsets[k], b = sp->sc_offsets[k + 1];
    cs->coo[k] = (scps_coo){b - a, rows + a, NULL, NULL};
    cs->row_start[k] = a;
    scps_error err;
    if (scps_engine_check_rows(s->engine, st, k, rows + a, b - a, &err)) {
      snprintf(msg, len, "%s: %s", field, err.msg);
      return GRPC_STATUS_INVALID_ARGUMENT;
    }
  }
  cs->row_start[s->S] = (uint32_t)n;
  return GRPC_STATUS_OK;
}

/* The gradients' size, by sample or by row; their values are checked as
 * the workers read them (apply_sc), into float32 room at grads (which a
 * stack by sample in bfloat16 half fills with the values as they came). */
static grpc_status_code check_gradients(scps_call *c, const scps_req_stack *sg, const char *field,
                                        call_stack *cs, float *grads, char *msg, size_t len) {
  const scps_stack_layout *sl = &c->srv->layout->stacks[cs->stack];
  bool bf16 = c->format == SCPS__V1__FLOAT_FORMAT__FLOAT_FORMAT_BFLOAT16;
  size_t width = bf16 ? 2 : sizeof(float);
  if (cs->by_row) {
    size_t n = (size_t)cs->row_start[c->srv->S] * (size_t)sl->dim;
    if (sg->row_gradients.len != n * width) {
      snprintf(msg, len, "%s.row_gradients: %zu bytes; stack '%s' lists %u rows, which need %u x dim %d x %zu (%s) = %zu",
               field, sg->row_gradients.len, sl->name, cs->row_start[c->srv->S], cs->row_start[c->srv->S], sl->dim,
               width, bf16 ? "bfloat16" : "float32", n * width);
      return GRPC_STATUS_INVALID_ARGUMENT;
    }
    cs->grads = grads;
    cs->grad_src = sg->row_gradients;
    return GRPC_STATUS_OK;
  }
  size_t n = (size_t)sl->total_sample_count * (size_t)sl->dim;
  if (sg->gradients.len != n * width) {
    snprintf(msg, len, "%s.gradients: %zu bytes; stack '%s' needs total_sample_count %lld x dim %d x %zu (%s) = %zu",
             field, sg->gradients.len, sl->name, (long long)sl->total_sample_count, sl->dim, width,
             bf16 ? "bfloat16" : "float32", n * width);
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  cs->grads = grads;
  cs->grads_bf16 = bf16;
  cs->grad_src = sg->gradients;
  return GRPC_STATUS_OK;
}

static void apply_admitted(scps_budget_waiter *w, bool admitted, size_t in_use, size_t limit);

static void handle_apply(scps_call *c) {
  scps_server *s = c->srv;
  if (scps_restore_refused(c)) return;
  if (!read_data_request(c, SCPS_REQUEST_APPLY)) return;
  const scps_request *req = &c->req;
  char msg[SCPS_ERROR_MSG_MAX + 128];
  grpc_status_code st = scps_check_view(c, req->config_fingerprint.data, req->config_fingerprint.len,
                                        req->process_index, msg, sizeof msg);
  if (st == GRPC_STATUS_OK && req->step < 0) {
    snprintf(msg, sizeof msg, "step %lld: must be >= 0", (long long)req->step);
    st = GRPC_STATUS_INVALID_ARGUMENT;
  }
  if (st == GRPC_STATUS_OK) st = scps_saver_check_step(s, req->step, msg, sizeof msg);
  if (st == GRPC_STATUS_OK) st = scps_restore_check_state(c, req->state_id, msg, sizeof msg);
  bool has_lr = req->has_learning_rate;
  /* The optimizers take the rate as float32: above FLT_MAX it would be
   * infinite there. */
  if (st == GRPC_STATUS_OK && has_lr && !(req->learning_rate >= 0 && req->learning_rate <= FLT_MAX)) {
    snprintf(msg, sizeof msg, "learning_rate %g: must be >= 0 and finite in float32 (<= %g)", req->learning_rate,
             (double)FLT_MAX);
    st = GRPC_STATUS_INVALID_ARGUMENT;
  }
  if (st == GRPC_STATUS_OK) st = check_format(c, (int)req->format, "gradient_format", msg, sizeof msg);
  if (st == GRPC_STATUS_OK && alloc_stacks(c, req->n_stacks)) {
    scps_call_finish(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "ApplyGradients: out of memory", NULL, 0);
    return;
  }
  /* The gradients as float32: bounded by what the request itself holds
   * (2 or 4 bytes per value), so no client can make the server allocate
   * more than twice its message. */
  const size_t width = c->format == SCPS__V1__FLOAT_FORMAT__FLOAT_FORMAT_BFLOAT16 ? 2 : sizeof(float);
  if (st != GRPC_STATUS_OK) {
    scps_call_finish(c, st, msg, NULL, 0);
    return;
  }
  size_t values = 0;
  for (size_t i = 0; i < req->n_stacks; i++)
    values += (req->stacks[i].gradients.len + req->stacks[i].row_gradients.len) / width;
  wait_for_scratch(c, values, apply_admitted);
}

/* An ApplyGradients once its gradients' scratch is reserved in the memory
 * budget (on the thread that admitted it), or refused. */
static void apply_admitted(scps_budget_waiter *w, bool admitted, size_t in_use, size_t limit) {
  scps_call *c = scps_call_of_wait(w);
  scps_server *s = c->srv;
  const scps_request *req = &c->req;
  char msg[SCPS_ERROR_MSG_MAX + 128], field[64];
  grpc_status_code st = GRPC_STATUS_OK;
  const bool has_lr = req->has_learning_rate;
  const size_t width = c->format == SCPS__V1__FLOAT_FORMAT__FLOAT_FORMAT_BFLOAT16 ? 2 : sizeof(float);
  if (!admitted) {
    refuse_for_memory(c, "its gradients' scratch", in_use, limit);
    return;
  }
  c->scratch = scps_scratch_take(s->scratch, w->need / sizeof(float), &c->scratch_cap);
  if (!c->scratch) {
    scps_call_finish(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "ApplyGradients: out of memory for gradients", NULL, 0);
    return;
  }
  size_t grads_at = 0;
  for (size_t i = 0; st == GRPC_STATUS_OK && i < req->n_stacks; i++) {
    snprintf(field, sizeof field, "stacks[%zu]", i);
    scps_req_stack *sg = &req->stacks[i];
    if (!sg->has_partitions) {
      snprintf(msg, sizeof msg, "%s.partitions: missing", field);
      st = GRPC_STATUS_INVALID_ARGUMENT;
      break;
    }
    if (sg->gradients.len && sg->row_gradients.len) {
      snprintf(msg, sizeof msg, "%s: gradients (%zu bytes) and row_gradients (%zu bytes) are both set; send a "
               "stack's gradients by sample or by row, not both", field, sg->gradients.len, sg->row_gradients.len);
      st = GRPC_STATUS_INVALID_ARGUMENT;
      break;
    }
    snprintf(field, sizeof field, "stacks[%zu].partitions", i);
    st = sg->gradients.len ? check_partitions(c, &sg->partitions, field, &c->stacks[i], msg, sizeof msg)
                           : check_row_partitions(c, &sg->partitions, field, &c->stacks[i], msg, sizeof msg);
    snprintf(field, sizeof field, "stacks[%zu]", i);
    if (st == GRPC_STATUS_OK && duplicate_stack(c, (int)i, c->stacks[i].stack)) {
      snprintf(msg, sizeof msg, "%s: stack '%s' listed twice", field, sg->partitions.stack);
      st = GRPC_STATUS_INVALID_ARGUMENT;
    }
    /* FTRL divides by the rate: 0 (or a rate that rounds to 0 in float32)
     * would turn every row it touches into NaN. */
    if (st == GRPC_STATUS_OK && has_lr && (float)req->learning_rate == 0.0f &&
        s->layout->stacks[c->stacks[i].stack].optimizer.type == SCPS_OPT_FTRL) {
      snprintf(msg, sizeof msg, "learning_rate %g: is 0 in float32, and %s (stack '%s') uses ftrl, which divides by "
               "it; push ftrl stacks with a rate > 0", req->learning_rate, field, sg->partitions.stack);
      st = GRPC_STATUS_INVALID_ARGUMENT;
    }
    if (st == GRPC_STATUS_OK) {
      st = check_gradients(c, sg, field, &c->stacks[i], c->scratch + grads_at, msg, sizeof msg);
      grads_at += (sg->gradients.len + sg->row_gradients.len) / width;
    }
  }
  if (st == GRPC_STATUS_OK) st = scps_partlimits_apply(c, msg, sizeof msg);
  if (st != GRPC_STATUS_OK) {
    scps_call_finish(c, st, msg, NULL, 0);
    return;
  }
  c->step.step = req->step;
  c->step.learning_rate = has_lr ? req->learning_rate : -1.0;
  atomic_init(&c->grads_bad, false);
  c->sum_stack = -1;
  c->fault_stack = -1;
  c->job.sc_fn = apply_sc;
  c->job.tc_fn = apply_tc;
  c->job.data = c;
  c->job.gang = true;
  scps_saver_submit_apply(s, c);
}

void scps_handle_call(scps_call *c) {
  switch (c->method) {
  case SCPS_M_GET_CONFIG: handle_get_config(c); break;
  case SCPS_M_LOOKUP: handle_lookup(c); break;
  case SCPS_M_APPLY_GRADIENTS: handle_apply(c); break;
  case SCPS_M_STATS: handle_stats(c); break;
  case SCPS_M_HEALTH: handle_health(c); break;
  case SCPS_M_CHECKPOINT: scps_saver_handle(c); break;
  case SCPS_M_READ_ROWS: scps_handle_read_rows(c); break;
  case SCPS_M_LIST_CHECKPOINTS: scps_restore_handle_list(c); break;
  case SCPS_M_RESTORE: scps_restore_handle(c); break;
  default: scps_call_finish(c, GRPC_STATUS_UNIMPLEMENTED, "unknown method", NULL, 0); break;
  }
}
