/* GetConfig: the cluster this process serves, its view (fingerprint,
 * process index) and the limits in force and step held, packed per call. */
#include "scps_cmd_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scps_shm.h"
#include "scps_spec_pb.h"

#define SCPS_VERSION "0.1.0"

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
  scps__cluster_pb_destroy(g->cluster);
  free(g);
}

int scps__cmd_config_init(scps_server *s, scps_error *err) {
  const scps_layout *l = s->layout;
  struct scps_config_pb *g = calloc(1, sizeof *g);
  if (!g) return scps_error_set(err, SCPS_ENOMEM, "out of memory");
  s->config = g;
  int rc = scps__cluster_pb_create(&s->opts.topology, s->tables, s->opts.n_tables, s->features,
                                  s->opts.n_features, &g->cluster, err);
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
  resp->shm_socket = s->shm ? (char *)scps__shm_path(s->shm) : "";
  resp->instance_id.data = s->instance_id;
  resp->instance_id.len = sizeof s->instance_id;
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
  return 0;
}

void scps__cmd_config_free(scps_server *s) {
  config_pb_free(s->config);
  s->config = NULL;
}

void scps__cmd_config_get(scps_call *c) {
  scps_server *s = c->srv;
  Scps__V1__GetConfigRequest *req =
      (Scps__V1__GetConfigRequest *)scps__call_read_request(c, &scps__v1__get_config_request__descriptor);
  if (!req) return;
  if (req->expected) {
    scps_cluster_spec cs;
    scps_error err;
    char msg[SCPS_ERROR_MSG_MAX + 64];
    if (scps__cluster_spec_from_pb(req->expected, &cs, &err)) {
      snprintf(msg, sizeof msg, "expected: %s", err.msg);
      scps__call_finish(c, GRPC_STATUS_INVALID_ARGUMENT, msg, NULL, 0);
      return;
    }
    /* A configuration no server could serve is the client's mistake, not
     * another cluster's: say what is wrong with it. */
    if (scps__topology_validate(&cs.topology, &err) ||
        scps__specs_validate(cs.tables, cs.n_tables, cs.features, cs.n_features, &err)) {
      scps__cluster_spec_free(&cs);
      snprintf(msg, sizeof msg, "expected: %s", err.msg);
      scps__call_finish(c, GRPC_STATUS_INVALID_ARGUMENT, msg, NULL, 0);
      return;
    }
    char diff[512];
    int d = scps__specs_diff(&cs.topology, cs.tables, cs.n_tables, cs.features, cs.n_features,
                            &s->opts.topology, s->tables, s->opts.n_tables, s->features, s->opts.n_features,
                            "expected", "this process", diff, sizeof diff);
    scps__cluster_spec_free(&cs);
    if (d) {
      snprintf(msg, sizeof msg, "process %d serves another cluster configuration: %s", s->opts.process_index,
               diff);
      scps__call_finish(c, GRPC_STATUS_FAILED_PRECONDITION, msg, NULL, 0);
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
    scps__call_finish(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "GetConfig: out of memory", NULL, 0);
    return;
  }
  scps__call_finish(c, GRPC_STATUS_OK, NULL, buf, len);
  free(buf);
}
