/* scps_client_connect: a client's channels to its servers, their GetConfig
 * answers cross-checked (declaration, order, stacks, steps) and server 0's
 * declaration adopted as the client's layout and prep. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "scps.pb-c.h"
#include "scps_client_int.h"
#include "scps_grpc_args.h"
#include "scps_spec_pb.h"
#include "scps_step.h"

#define DEFAULT_CONNECT_TIMEOUT_MS 10000
/* Servers whose steps differ at connect are asked again this often, this
 * long apart (a push of another trainer in flight), before the client
 * refuses. */
#define STEP_AGREE_ROUNDS 10
#define STEP_AGREE_PAUSE_MS 100

int scps__client_connect_servers(scps_client *c, const scps_client_options *o, scps_error *err) {
  grpc_arg args[11];
  int n = 0;
  args[n++] = scps__grpc_args_int(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, -1);
  args[n++] = scps__grpc_args_int(GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, -1);
  /* A restarted server should be found within a lookup's retries, not after
   * gRPC's default reconnect backoff of up to two minutes. */
  args[n++] = scps__grpc_args_int(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args[n++] = scps__grpc_args_int(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args[n++] = scps__grpc_args_int(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  /* A server cut off (a partition) is found within seconds, and its calls
   * go on a new connection as soon as it is back. */
  n += scps__grpc_args_keepalive_client(args + n);
  /* Responses are megabytes of activations. */
  n += scps__grpc_args_bulk(args + n);
  if (c->own_connections) args[n++] = scps__grpc_args_int(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  grpc_channel_args ca = {(size_t)n, args};
  int rc = 0;
  for (int p = 0; p < c->n && !rc; p++) {
    server *s = &c->servers[p];
    scps_error e;
    if (scps_address_check(o->servers[p], &e)) {
      rc = scps_error_set(err, SCPS_EINVAL, "server %d: %s", p, e.msg);
      break;
    }
    s->addr = strdup(o->servers[p]);
    if (!s->addr) {
      rc = scps_error_set(err, SCPS_ENOMEM, "out of memory");
      break;
    }
    s->ch = scps__client_conn_channel(c->conn, s->addr, &ca);
    if (!s->ch) {
      rc = scps_error_set(err, SCPS_EINVAL, "server %d: cannot create a channel to '%s'", p, s->addr);
      break;
    }
    for (int m = 0; m < SCPS_M_COUNT; m++)
      s->methods[m] = grpc_channel_register_call(s->ch, scps__method_path(m), NULL, NULL);
  }
  return rc;
}

/* A packed GetConfigRequest. */
static grpc_slice config_request(Scps__V1__ClusterSpec *expected) {
  Scps__V1__GetConfigRequest req = SCPS__V1__GET_CONFIG_REQUEST__INIT;
  req.expected = expected;
  size_t n = scps__v1__get_config_request__get_packed_size(&req);
  if (!n) return grpc_empty_slice();
  grpc_slice s = grpc_slice_malloc_large(n);
  scps__v1__get_config_request__pack(&req, GRPC_SLICE_START_PTR(s));
  return s;
}

/* GetConfig on servers [from, to) with one request, in parallel; waits for
 * every answer. Each server's outcome is in (*out)->rpcs[p]. */
static int get_configs(scps_client *c, int from, int to, grpc_slice req, int64_t deadline_ns, op **out,
                       scps_error *err) {
  op *o = scps__client_op_create(c, SCPS_M_GET_CONFIG, c->n, 0);
  *out = o;
  if (!o) return scps_error_set(err, SCPS_ENOMEM, "out of memory");
  o->deadline_ns = deadline_ns;
  o->deadline = scps__client_op_ts(deadline_ns);
  o->wait_for_ready = true; /* a server still starting is waited for, up to the deadline */
  o->blocking = true;
  for (int p = from; p < to; p++) {
    rpc *r = &o->rpcs[p];
    r->req = malloc(sizeof *r->req);
    if (!r->req) return scps_error_set(err, SCPS_ENOMEM, "out of memory");
    r->req[0] = grpc_slice_ref(req);
    r->n_req = 1;
  }
  scps__client_op_start_range(o, from, to);
  scps__client_op_wait(o);
  return 0;
}

static int check_stacks(const scps_client *c, int p, const Scps__V1__GetConfigResponse *m, scps_error *err) {
  const scps_layout *l = c->layout;
  const char *a = scps__client_addr(c, p);
  if (m->n_stacks != (size_t)l->n_stacks)
    return scps_error_set(err, SCPS_EMISMATCH, "server %d (%s): lays the cluster out in %zu stacks, libscps in %d",
                          p, a, m->n_stacks, l->n_stacks);
  for (int st = 0; st < l->n_stacks; st++) {
    const Scps__V1__StackInfo *in = m->stacks[st];
    const scps_stack_layout *sl = &l->stacks[st];
    const char *what = NULL;
    long long sv = 0, cv = 0;
    if (!in->name || strcmp(in->name, sl->name))
      return scps_error_set(err, SCPS_EMISMATCH, "server %d (%s): stacks[%d] is '%s' on the server, '%s' in libscps",
                            p, a, st, in->name ? in->name : "", sl->name);
    if (in->dim != sl->dim) what = "dim", sv = in->dim, cv = sl->dim;
    else if (in->rows_per_sc != sl->rows_per_sc) what = "rows_per_sc", sv = in->rows_per_sc, cv = sl->rows_per_sc;
    else if (in->total_sample_count != sl->total_sample_count)
      what = "total_sample_count", sv = in->total_sample_count, cv = sl->total_sample_count;
    else if (in->n_tables != (size_t)sl->n_tables || in->n_row_offsets != (size_t)sl->n_tables ||
             in->n_rotations != (size_t)sl->n_tables)
      what = "table count", sv = (long long)in->n_tables, cv = sl->n_tables;
    else if (in->n_features != (size_t)sl->n_features || in->n_feature_sample_offsets != (size_t)sl->n_features)
      what = "feature count", sv = (long long)in->n_features, cv = sl->n_features;
    if (what)
      return scps_error_set(err, SCPS_EMISMATCH, "server %d (%s): stack '%s' %s: server %lld, libscps %lld", p, a,
                            sl->name, what, sv, cv);
    for (int k = 0; k < sl->n_tables; k++) {
      int t = sl->tables[k];
      if (strcmp(in->tables[k], l->table_specs[t].name) || in->row_offsets[k] != l->tables[t].row_offset_in_shard ||
          in->rotations[k] != l->tables[t].shard_rotation)
        return scps_error_set(err, SCPS_EMISMATCH,
                              "server %d (%s): stack '%s' table %d: server '%s' at row %lld rotation %d, "
                              "libscps '%s' at row %lld rotation %d",
                              p, a, sl->name, k, in->tables[k], (long long)in->row_offsets[k], in->rotations[k],
                              l->table_specs[t].name, (long long)l->tables[t].row_offset_in_shard,
                              l->tables[t].shard_rotation);
    }
    for (int k = 0; k < sl->n_features; k++) {
      int f = sl->features[k];
      if (strcmp(in->features[k], l->feature_specs[f].name) ||
          in->feature_sample_offsets[k] != l->features[f].sample_offset)
        return scps_error_set(err, SCPS_EMISMATCH,
                              "server %d (%s): stack '%s' feature %d: server '%s' at sample %lld, libscps '%s' "
                              "at sample %lld",
                              p, a, sl->name, k, in->features[k], (long long)in->feature_sample_offsets[k],
                              l->feature_specs[f].name, (long long)l->features[f].sample_offset);
    }
  }
  return 0;
}

/* The per-server checks of one GetConfig answer. */
static int check_config(scps_client *c, int p, const rpc *r, scps_error *err) {
  const Scps__V1__GetConfigResponse *m = (const Scps__V1__GetConfigResponse *)r->reply;
  const char *a = scps__client_addr(c, p);
  if (r->rc) return scps_error_set(err, r->rc, "%s", r->err.msg);
  if (m->process_index != p)
    return scps_error_set(err, SCPS_EMISMATCH,
                          "server %d (%s) is process %d of its cluster: list the servers in process-index "
                          "order (position %d needs process %d)",
                          p, a, m->process_index, p, p);
  if (!m->cluster || !m->cluster->topology)
    return scps_error_set(err, SCPS_EIO, "server %d (%s): GetConfig answer without a cluster declaration", p, a);
  if (m->cluster->topology->num_processes != c->n)
    return scps_error_set(err, SCPS_EMISMATCH,
                          "server %d (%s): the cluster has num_processes %d but %d server addresses were given", p,
                          a, m->cluster->topology->num_processes, c->n);
  if (m->config_fingerprint.len != SCPS_FINGERPRINT_BYTES)
    return scps_error_set(err, SCPS_EIO, "server %d (%s): config_fingerprint of %zu bytes, expected %d", p, a,
                          m->config_fingerprint.len, SCPS_FINGERPRINT_BYTES);
  if (p == 0)
    memcpy(c->fingerprint, m->config_fingerprint.data, SCPS_FINGERPRINT_BYTES);
  else if (memcmp(c->fingerprint, m->config_fingerprint.data, SCPS_FINGERPRINT_BYTES))
    return scps_error_set(err, SCPS_EMISMATCH,
                          "server %d (%s): config_fingerprint differs from server 0's (%s): the processes were "
                          "started with different declarations",
                          p, a, scps__client_addr(c, 0));
  const uint32_t rev = m->wire_revision < SCPS_WIRE_REVISION ? m->wire_revision : SCPS_WIRE_REVISION;
  if (rev < 1 && c->gradients == SCPS_GRADIENTS_BY_ROW)
    return scps_error_set(err, SCPS_EMISMATCH,
                          "server %d (%s) takes no gradients by row (its GetConfig wire_revision is %u, by row "
                          "needs 1): upgrade it, or push by sample or auto",
                          p, a, m->wire_revision);
  if (rev < 3 && (c->act_fmt.kind == SCPS_WIREFMT_EXMY || c->grad_fmt.kind == SCPS_WIREFMT_EXMY))
    return scps_error_set(err, SCPS_EMISMATCH,
                          "server %d (%s) takes no eXmY wire formats (its GetConfig wire_revision is %u, eXmY "
                          "needs 3): upgrade it, or use float32 or bfloat16",
                          p, a, m->wire_revision);
  if (p == 0 || rev < c->wire_revision) c->wire_revision = rev;
  c->servers[p].wire_revision = rev;
  if (rev < 1 && c->gradients == SCPS_GRADIENTS_AUTO) c->gradients = SCPS_GRADIENTS_BY_SAMPLE;
  if (m->max_message_bytes > 0 && (c->max_message_bytes == 0 || m->max_message_bytes < c->max_message_bytes))
    c->max_message_bytes = m->max_message_bytes;
  int64_t step = m->last_step_present_case == SCPS__V1__GET_CONFIG_RESPONSE__LAST_STEP_PRESENT_LAST_STEP
                     ? m->last_step
                     : -1;
  if (step < -1 || step >= SCPS_STEP_LIMIT)
    return scps_error_set(err, SCPS_EMISMATCH, "server %d (%s) holds step %lld, outside [0, 2^53)", p, a,
                          (long long)step);
  if (p == 0 || step < c->step) c->step = step;
  c->servers[p].step = step;
  c->servers[p].state_id = m->state_id;
  c->servers[p].has_checkpoint_dir = m->checkpoint_dir && m->checkpoint_dir[0];
  scps__client_shm_link(c, p, m->shm_socket, m->instance_id.data, m->instance_id.len);
  return 0;
}

static bool steps_agree(const scps_client *c) {
  for (int p = 1; p < c->n; p++)
    if (c->servers[p].step != c->servers[0].step) return false;
  return true;
}

/* The processes of a cluster must hold the same step: one that restarted
 * from an older checkpoint (or from none) beside others that went on would
 * otherwise be trained from mixed states, silently. Steps that differ only
 * by pushes in flight from other trainers agree a moment later, so the
 * servers are asked again for a while before the client refuses. */
static int check_steps(scps_client *c, int64_t deadline_ns, scps_error *err) {
  grpc_slice req = config_request(NULL);
  int rc = 0;
  for (int round = 0; !rc && !steps_agree(c) && round < STEP_AGREE_ROUNDS; round++) {
    if (scps__client_op_now_ns() + STEP_AGREE_PAUSE_MS * 1000000 > deadline_ns) break;
    struct timespec pause = {0, STEP_AGREE_PAUSE_MS * 1000000L};
    nanosleep(&pause, NULL);
    op *o = NULL;
    rc = get_configs(c, 0, c->n, req, deadline_ns, &o, err);
    for (int p = 0; p < c->n && !rc; p++) {
      const rpc *r = &o->rpcs[p];
      if (r->rc) rc = scps_error_set(err, r->rc, "%s", r->err.msg);
      const Scps__V1__GetConfigResponse *m = (const Scps__V1__GetConfigResponse *)r->reply;
      if (!rc) {
        c->servers[p].step = m->last_step_present_case == SCPS__V1__GET_CONFIG_RESPONSE__LAST_STEP_PRESENT_LAST_STEP
                                 ? m->last_step
                                 : -1;
        c->servers[p].state_id = m->state_id;
      }
    }
    if (o) scps__client_op_destroy(o);
  }
  grpc_slice_unref(req);
  if (rc) return rc;
  if (steps_agree(c)) {
    c->step = c->servers[0].step;
    return 0;
  }
  char held[SCPS_ERROR_MSG_MAX - 160];
  size_t at = 0;
  for (int p = 0; p < c->n && at + 64 < sizeof held; p++) {
    char step[32];
    if (c->servers[p].step < 0) snprintf(step, sizeof step, "none");
    else snprintf(step, sizeof step, "step %lld", (long long)c->servers[p].step);
    at += (size_t)snprintf(held + at, sizeof held - at, "%sserver %d (%.40s) %s", p ? ", " : "", p, scps__client_addr(c, p),
                           step);
  }
  if (at + 64 >= sizeof held) snprintf(held + at, sizeof held - at, ", ...");
  return scps_error_set(err, SCPS_EMISMATCH,
                        "the servers hold different steps (%s): training would mix their states. Bring every "
                        "process to one step: 'scps-admin checkpoint restore --servers LIST' restores the newest "
                        "step every process holds a checkpoint of, or restart them all from one checkpoint",
                        held);
}

/* Builds the layout and prep from server 0's answer. */
static int adopt_config(scps_client *c, const scps_client_options *o, const Scps__V1__GetConfigResponse *m,
                        scps_error *err) {
  scps_error e;
  int rc = scps__cluster_spec_from_pb(m->cluster, &c->spec, &e);
  if (rc) return scps_error_set(err, rc, "server 0 (%s): GetConfig declaration: %s", scps__client_addr(c, 0), e.msg);
  rc = scps__layout_create(c->spec.tables, c->spec.n_tables, c->spec.features, c->spec.n_features,
                          &c->spec.topology, NULL, &c->layout, &e);
  if (rc) return scps_error_set(err, rc, "server 0 (%s): cannot lay out its declaration: %s", scps__client_addr(c, 0), e.msg);
  if (c->layout->topology.sc_per_process > MAX_SC_PER_PROCESS)
    return scps_error_set(err, SCPS_EINVAL, "server 0 (%s): sc_per_process %d exceeds %d", scps__client_addr(c, 0),
                          c->layout->topology.sc_per_process, MAX_SC_PER_PROCESS);
  c->S = c->layout->topology.sc_per_process;
  c->sample_feature = calloc((size_t)c->layout->n_stacks, sizeof *c->sample_feature);
  if (!c->sample_feature) return scps_error_set(err, SCPS_ENOMEM, "out of memory");
  for (int st = 0; st < c->layout->n_stacks; st++) {
    const scps_stack_layout *sl = &c->layout->stacks[st];
    int32_t *map = malloc(sizeof *map * (size_t)(sl->total_sample_count ? sl->total_sample_count : 1));
    if (!map) return scps_error_set(err, SCPS_ENOMEM, "out of memory");
    c->sample_feature[st] = map;
    for (int k = 0; k < sl->n_features; k++) {
      const int f = sl->features[k];
      const int64_t off = c->layout->features[f].sample_offset;
      for (int64_t r = 0; r < c->layout->feature_specs[f].batch_size; r++) map[off + r] = k;
    }
  }
  scps_prep_options po = {.policy = o->policy, .threads = o->prep_threads};
  rc = scps__prep_create(c->layout, &po, &c->prep, err);
  if (rc) return rc;
  /* The servers report the limits in force, which FDO may have raised. */
  for (int st = 0; st < c->layout->n_stacks && (size_t)st < m->n_stacks; st++) {
    const Scps__V1__StackInfo *in = m->stacks[st];
    if (in->max_ids_per_partition > 0 && in->max_unique_ids_per_partition > 0 &&
        (in->max_ids_per_partition != c->layout->stacks[st].max_ids_per_partition ||
         in->max_unique_ids_per_partition != c->layout->stacks[st].max_unique_ids_per_partition)) {
      rc = scps__prep_set_limits(c->prep, st, in->max_ids_per_partition, in->max_unique_ids_per_partition, err);
      if (rc) return rc;
    }
  }
  return 0;
}

/* Tables and features the trainer declared without a topology, against
 * server 0's declaration. */
static int check_declared(const scps_client *c, const scps_client_expected *e, const Scps__V1__ClusterSpec *pb,
                          scps_error *err) {
  scps_cluster_spec cs;
  int rc = scps__cluster_spec_from_pb(pb, &cs, err);
  if (rc) return rc;
  char diff[512];
  if (scps__specs_diff(&cs.topology, e->tables, e->n_tables, e->features, e->n_features, &cs.topology, cs.tables,
                      cs.n_tables, cs.features, cs.n_features, "client", "server", diff, sizeof diff))
    rc = scps_error_set(err, SCPS_EMISMATCH, "server 0 (%s) serves another cluster configuration: %s", scps__client_addr(c, 0),
                        diff);
  scps__cluster_spec_free(&cs);
  return rc;
}

int scps__client_connect_configure(scps_client *c, const scps_client_options *o, const scps_client_expected *expected,
                                  scps_error *err) {
  int64_t timeout = o->connect_timeout_ms ? o->connect_timeout_ms : DEFAULT_CONNECT_TIMEOUT_MS;
  /* As op_create: a timeout too large to add (INT64_MAX for "forever")
   * must not wrap into the past. */
  int64_t deadline = timeout > INT64_MAX / 2000000 ? INT64_MAX / 2 : scps__client_op_now_ns() + timeout * 1000000;
  grpc_slice req = grpc_empty_slice();
  scps_cluster_pb *cpb = NULL;
  op *first = NULL, *rest = NULL;
  int rc = 0;
  if (expected && expected->topology) {
    /* Every server compares the trainer's declaration with its own. */
    rc = scps__cluster_pb_create(expected->topology, expected->tables, expected->n_tables, expected->features,
                                expected->n_features, &cpb, err);
    if (!rc) req = config_request(&cpb->msg);
    if (!rc) rc = get_configs(c, 0, c->n, req, deadline, &first, err);
    for (int p = 0; p < c->n && !rc; p++) rc = check_config(c, p, &first->rpcs[p], err);
  } else {
    /* Server 0's declaration is the reference the others must match. */
    req = config_request(NULL);
    rc = get_configs(c, 0, 1, req, deadline, &first, err);
    if (!rc) rc = check_config(c, 0, &first->rpcs[0], err);
    if (!rc && expected)
      rc = check_declared(c, expected, ((const Scps__V1__GetConfigResponse *)first->rpcs[0].reply)->cluster, err);
    if (!rc && c->n > 1) {
      grpc_slice_unref(req);
      req = config_request(((const Scps__V1__GetConfigResponse *)first->rpcs[0].reply)->cluster);
      rc = get_configs(c, 1, c->n, req, deadline, &rest, err);
      for (int p = 1; p < c->n && !rc; p++) {
        rc = check_config(c, p, &rest->rpcs[p], err);
        /* The server's own refusal (FAILED_PRECONDITION) compared server
         * 0's declaration, which it did not name. */
        if (rc == SCPS_EMISMATCH && rest->rpcs[p].rc == SCPS_EMISMATCH) {
          char m[sizeof err->msg];
          snprintf(m, sizeof m, "%s", err->msg);
          scps_error_set(err, rc,
                         "%s [the expected declaration is server 0's (%s): start every process with the same "
                         "--config and topology flags]",
                         m, scps__client_addr(c, 0));
        }
      }
    }
  }
  if (!rc) rc = adopt_config(c, o, (const Scps__V1__GetConfigResponse *)first->rpcs[0].reply, err);
  for (int p = 0; p < c->n && !rc; p++) {
    const op *from = rest && p > 0 ? rest : first;
    rc = check_stacks(c, p, (const Scps__V1__GetConfigResponse *)from->rpcs[p].reply, err);
  }
  if (!rc) rc = check_steps(c, deadline, err);
  if (first) scps__client_op_destroy(first);
  if (rest) scps__client_op_destroy(rest);
  grpc_slice_unref(req);
  scps__cluster_pb_destroy(cpb);
  return rc;
}
