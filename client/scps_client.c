/* scps_client: the client object of libscps: its options checked, created
 * (channels, configuration, queue threads) and destroyed, and what it tells
 * a trainer about the cluster's features. The other scps_client_* files
 * hold its operations (scps_client_int.h). */
#include <stdlib.h>
#include <string.h>

#include "scps_client_int.h"
#include "scps_workload.h"

#define MAX_SERVERS 1024
#define DEFAULT_CONNECT_TIMEOUT_MS 10000
#define DEFAULT_CHECKPOINT_TIMEOUT_MS 600000

int scps_float_format_from_name(const char *name, scps_float_format *out) {
  if (name && !strcmp(name, "float32")) *out = SCPS_WIRE_FLOAT32;
  else if (name && !strcmp(name, "bfloat16")) *out = SCPS_WIRE_BFLOAT16;
  else return SCPS_EINVAL;
  return 0;
}

const char *scps_float_format_name(scps_float_format f) {
  return f == SCPS_WIRE_BFLOAT16 ? "bfloat16" : f == SCPS_WIRE_FLOAT32 ? "float32" : "unknown";
}

int scps_client_options_set_wire_format(scps_client_options *o, const char *spec, scps_error *err) {
  if (!o || !spec) return scps_error_set(err, SCPS_EINVAL, "wire format: options or text NULL");
  char act[sizeof o->activation_format], grad[sizeof o->gradient_format];
  const char *slash = strchr(spec, '/');
  const size_t a = slash ? (size_t)(slash - spec) : strlen(spec), g = slash ? strlen(slash + 1) : a;
  if (a >= sizeof act || g >= sizeof grad)
    return scps_error_set(err, SCPS_EINVAL, "wire format '%s': a name is over %zu bytes", spec, sizeof act - 1);
  memcpy(act, spec, a);
  act[a] = '\0';
  memcpy(grad, slash ? slash + 1 : spec, g);
  grad[g] = '\0';
  scps_wirefmt f;
  scps_error e;
  if (scps__wirefmt_parse(act, &f, &e) || scps__wirefmt_parse(grad, &f, &e))
    return scps_error_set(err, SCPS_EINVAL, "%s%s", e.msg,
                          slash ? " (NAME for both, or ACTIVATIONS/GRADIENTS)" : "");
  memcpy(o->activation_format, act, sizeof act);
  memcpy(o->gradient_format, grad, sizeof grad);
  return 0;
}

int scps_answer_mode_from_name(const char *name, scps_answer_mode *out) {
  if (name && !strcmp(name, "auto")) *out = SCPS_ANSWER_AUTO;
  else if (name && !strcmp(name, "pooled")) *out = SCPS_ANSWER_POOLED;
  else if (name && !strcmp(name, "rows")) *out = SCPS_ANSWER_DISTINCT_ROWS;
  else return SCPS_EINVAL;
  return 0;
}

const char *scps_answer_mode_name(scps_answer_mode m) {
  return m == SCPS_ANSWER_AUTO ? "auto" : m == SCPS_ANSWER_POOLED ? "pooled"
                                        : m == SCPS_ANSWER_DISTINCT_ROWS ? "rows" : "unknown";
}

int scps_gradient_mode_from_name(const char *name, scps_gradient_mode *out) {
  if (name && !strcmp(name, "auto")) *out = SCPS_GRADIENTS_AUTO;
  else if (name && !strcmp(name, "sample")) *out = SCPS_GRADIENTS_BY_SAMPLE;
  else if (name && !strcmp(name, "row")) *out = SCPS_GRADIENTS_BY_ROW;
  else return SCPS_EINVAL;
  return 0;
}

const char *scps_gradient_mode_name(scps_gradient_mode m) {
  return m == SCPS_GRADIENTS_AUTO ? "auto" : m == SCPS_GRADIENTS_BY_SAMPLE ? "sample"
                                           : m == SCPS_GRADIENTS_BY_ROW ? "row" : "unknown";
}

int scps_limit_policy_from_name(const char *name, scps_limit_policy *out) {
  if (name && !strcmp(name, "error")) *out = SCPS_LIMIT_ERROR;
  else if (name && !strcmp(name, "drop")) *out = SCPS_LIMIT_DROP;
  else return SCPS_EINVAL;
  return 0;
}

const char *scps_limit_policy_name(scps_limit_policy p) {
  return p == SCPS_LIMIT_ERROR ? "error" : p == SCPS_LIMIT_DROP ? "drop" : "unknown";
}

void scps_client_options_init(scps_client_options *o) {
  memset(o, 0, sizeof *o);
  o->size = sizeof *o;
  o->policy = SCPS_LIMIT_ERROR;
  o->connect_timeout_ms = DEFAULT_CONNECT_TIMEOUT_MS;
  o->wire_format = SCPS_WIRE_FLOAT32;
  o->answer = SCPS_ANSWER_AUTO;
  o->gradients = SCPS_GRADIENTS_AUTO;
  o->checkpoint_timeout_ms = DEFAULT_CHECKPOINT_TIMEOUT_MS;
  o->cq_threads = CQ_THREADS_DEFAULT;
}

/* The caller's options as this library's struct: the fields inside
 * in->size copied, the rest at their defaults. */
static int read_options(const scps_client_options *in, scps_client_options *o, scps_error *err) {
  const size_t least = offsetof(scps_client_options, n_servers) + sizeof in->n_servers;
  if (!in) return scps_error_set(err, SCPS_EINVAL, "options: NULL");
  if (in->size < least)
    return scps_error_set(err, SCPS_EINVAL, "options: size %zu, below the %zu bytes up to n_servers: initialise the "
                          "options with scps_client_options_init", in->size, least);
  scps_client_options_init(o);
  memcpy(o, in, in->size < sizeof *o ? in->size : sizeof *o);
  o->size = sizeof *o;
  return 0;
}

static int check_options(const scps_client_options *o, scps_error *err) {
  if (!o->servers || o->n_servers < 1 || o->n_servers > MAX_SERVERS)
    return scps_error_set(err, SCPS_EINVAL, "options: need 1 to %d server addresses (n_servers %d)", MAX_SERVERS,
                          o->n_servers);
  for (int p = 0; p < o->n_servers; p++)
    if (!o->servers[p] || !o->servers[p][0])
      return scps_error_set(err, SCPS_EINVAL, "options: servers[%d] is empty", p);
  if (o->policy != SCPS_LIMIT_ERROR && o->policy != SCPS_LIMIT_DROP)
    return scps_error_set(err, SCPS_EINVAL, "options: policy %d is neither SCPS_LIMIT_ERROR nor SCPS_LIMIT_DROP",
                          (int)o->policy);
  if (o->connect_timeout_ms < 0 || o->checkpoint_timeout_ms < 0)
    return scps_error_set(err, SCPS_EINVAL, "options: connect_timeout_ms %lld or checkpoint_timeout_ms %lld is negative",
                          (long long)o->connect_timeout_ms, (long long)o->checkpoint_timeout_ms);
  if (o->wire_format != SCPS_WIRE_FLOAT32 && o->wire_format != SCPS_WIRE_BFLOAT16)
    return scps_error_set(err, SCPS_EINVAL,
                          "options: wire_format %d is neither SCPS_WIRE_FLOAT32 nor SCPS_WIRE_BFLOAT16",
                          (int)o->wire_format);
  for (int g = 0; g < 2; g++) {
    const char *name = g ? o->gradient_format : o->activation_format;
    scps_wirefmt f;
    scps_error e;
    if (!memchr(name, '\0', sizeof o->activation_format))
      return scps_error_set(err, SCPS_EINVAL, "options: %s is not NUL-terminated",
                            g ? "gradient_format" : "activation_format");
    if (name[0] && scps__wirefmt_parse(name, &f, &e))
      return scps_error_set(err, SCPS_EINVAL, "options: %s: %s", g ? "gradient_format" : "activation_format", e.msg);
  }
  if (o->shared_memory != SCPS_SHM_AUTO && o->shared_memory != SCPS_SHM_OFF)
    return scps_error_set(err, SCPS_EINVAL, "options: shared_memory %d is neither SCPS_SHM_AUTO nor SCPS_SHM_OFF",
                          (int)o->shared_memory);
  if (o->answer != SCPS_ANSWER_AUTO && o->answer != SCPS_ANSWER_POOLED && o->answer != SCPS_ANSWER_DISTINCT_ROWS)
    return scps_error_set(err, SCPS_EINVAL,
                          "options: answer %d is not SCPS_ANSWER_AUTO, SCPS_ANSWER_POOLED or SCPS_ANSWER_DISTINCT_ROWS",
                          (int)o->answer);
  if (o->gradients != SCPS_GRADIENTS_AUTO && o->gradients != SCPS_GRADIENTS_BY_SAMPLE &&
      o->gradients != SCPS_GRADIENTS_BY_ROW)
    return scps_error_set(err, SCPS_EINVAL,
                          "options: gradients %d is not SCPS_GRADIENTS_AUTO, SCPS_GRADIENTS_BY_SAMPLE or "
                          "SCPS_GRADIENTS_BY_ROW",
                          (int)o->gradients);
  if (o->cq_threads < 0 || o->cq_threads > CQ_THREADS_MAX)
    return scps_error_set(err, SCPS_EINVAL, "options: cq_threads %d not in [0, %d] (0: %d)", o->cq_threads,
                          CQ_THREADS_MAX, CQ_THREADS_DEFAULT);
  return 0;
}

/* An expected declaration given in engine specs needs tables and features. */
static int check_expected(const scps_client_expected *e, scps_error *err) {
  if (!e->tables || e->n_tables < 1 || (e->n_features > 0 && !e->features) || e->n_features < 0)
    return scps_error_set(err, SCPS_EINVAL,
                          "options: an expected declaration needs tables (n_tables %d) and features "
                          "(n_features %d)",
                          e->n_tables, e->n_features);
  return 0;
}

int scps__client_create_expecting(const scps_client_options *options, const scps_client_expected *expected,
                                 scps_client **out, scps_error *err) {
  if (!out) return scps_error_set(err, SCPS_EINVAL, "out is NULL");
  *out = NULL;
  scps_client_options opts;
  const scps_client_options *o = &opts;
  int rc = read_options(options, &opts, err);
  if (!rc) rc = check_options(o, err);
  if (!rc && expected) rc = check_expected(expected, err);
  if (!rc && expected && o->expected_config)
    rc = scps_error_set(err, SCPS_EINVAL, "options: expected_config and an expected declaration in specs: give one");
  scps_workload *w = NULL;
  if (!rc && o->expected_config) {
    scps_error e;
    rc = scps__workload_parse(o->expected_config, strlen(o->expected_config), &w, &e);
    if (rc) scps_error_set(err, rc, "options: expected_config: %s", e.msg);
  }
  if (rc) return rc;
  scps_client_expected from_text = {NULL, w ? w->tables : NULL, w ? w->n_tables : 0, w ? w->features : NULL,
                                    w ? w->n_features : 0};
  if (w) expected = &from_text;
  scps_client *c = calloc(1, sizeof *c);
  if (!c) {
    scps__workload_destroy(w);
    return scps_error_set(err, SCPS_ENOMEM, "out of memory");
  }
  c->n = o->n_servers;
  scps__wirefmt_parse(o->activation_format[0] ? o->activation_format : scps_float_format_name(o->wire_format),
                     &c->act_fmt, NULL);
  scps__wirefmt_parse(o->gradient_format[0] ? o->gradient_format : scps_float_format_name(o->wire_format),
                     &c->grad_fmt, NULL);
  c->answer = o->answer;
  c->gradients = o->gradients;
  c->ignore_checkpoint_due = o->ignore_checkpoint_due;
  c->own_connections = o->own_connections;
  c->shm_mode = o->shared_memory;
  c->checkpoint_timeout_ms = o->checkpoint_timeout_ms ? o->checkpoint_timeout_ms : DEFAULT_CHECKPOINT_TIMEOUT_MS;
  pthread_mutex_init(&c->mu, NULL);
  pthread_mutex_init(&c->prep_mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  c->servers = calloc((size_t)c->n, sizeof *c->servers);
  if (!c->servers) {
    scps_client_destroy(c);
    scps__workload_destroy(w);
    return scps_error_set(err, SCPS_ENOMEM, "out of memory");
  }
  grpc_init();
  c->grpc_started = true;
  rc = scps__client_op_threads_start(c, o->cq_threads ? o->cq_threads : CQ_THREADS_DEFAULT, err);
  if (!rc) rc = scps__client_conn_create(&o->security, &c->conn, err);
  if (!rc) rc = scps__client_connect_servers(c, o, err);
  if (!rc) rc = scps__client_connect_configure(c, o, expected, err);
  scps__workload_destroy(w);
  if (rc) {
    scps_client_destroy(c);
    return rc;
  }
  *out = c;
  return 0;
}

int scps_client_create(const scps_client_options *o, scps_client **out, scps_error *err) {
  return scps__client_create_expecting(o, NULL, out, err);
}

void scps_client_destroy(scps_client *c) {
  if (!c) return;
  pthread_mutex_lock(&c->mu);
  while (c->in_flight) pthread_cond_wait(&c->cv, &c->mu);
  pthread_mutex_unlock(&c->mu);
  scps__client_op_threads_stop(c);
  for (int p = 0; c->servers && p < c->n; p++) {
    if (c->servers[p].ch) grpc_channel_destroy(c->servers[p].ch);
    free(c->servers[p].addr);
  }
  if (c->cq) grpc_completion_queue_destroy(c->cq);
  scps__client_shm_unlink_all(c);
  scps__client_conn_destroy(c->conn);
  scps__prep_destroy(c->prep);
  for (int st = 0; c->sample_feature && st < c->layout->n_stacks; st++) free(c->sample_feature[st]);
  free(c->sample_feature);
  scps__layout_destroy(c->layout);
  scps__cluster_spec_free(&c->spec);
  free(c->servers);
  if (c->grpc_started) grpc_shutdown();
  pthread_cond_destroy(&c->cv);
  pthread_mutex_destroy(&c->mu);
  pthread_mutex_destroy(&c->prep_mu);
  free(c);
}

const scps_layout *scps__client_layout(const scps_client *c) { return c->layout; }

scps_prep *scps__client_prep(scps_client *c) { return c->prep; }

int64_t scps_client_step(const scps_client *c) { return c->step; }

void scps_client_traffic(const scps_client *c, uint64_t *sent, uint64_t *received) {
  *sent = atomic_load_explicit(&c->bytes_sent, memory_order_relaxed);
  *received = atomic_load_explicit(&c->bytes_received, memory_order_relaxed);
}

void scps_client_shared_traffic(const scps_client *c, uint64_t *sent, uint64_t *received) {
  *sent = atomic_load_explicit(&c->bytes_placed_sent, memory_order_relaxed);
  *received = atomic_load_explicit(&c->bytes_placed, memory_order_relaxed);
}

int scps_client_n_servers(const scps_client *c) { return c->n; }

bool scps_client_server_has_checkpoint_dir(const scps_client *c, int p) {
  return p >= 0 && p < c->n && c->servers[p].has_checkpoint_dir;
}

/* Feature f of the layout, or NULL outside it. */
static const scps_feature_spec *feature(const scps_client *c, int f) {
  return c && f >= 0 && f < c->layout->n_features ? &c->layout->feature_specs[f] : NULL;
}

static const scps_table_spec *feature_table(const scps_client *c, int f) {
  return feature(c, f) ? &c->layout->table_specs[c->layout->features[f].table] : NULL;
}

int scps_client_n_features(const scps_client *c) { return c->layout->n_features; }

const char *scps_client_feature_name(const scps_client *c, int f) {
  return feature(c, f) ? feature(c, f)->name : NULL;
}

int scps_client_feature_index(const scps_client *c, const char *name) {
  int f = name ? scps__find_feature(c->layout->feature_specs, c->layout->n_features, name) : -1;
  return f >= 0 ? f : SCPS_ENOENT;
}

int scps_client_feature_width(const scps_client *c, int f) {
  return feature_table(c, f) ? feature_table(c, f)->embedding_dim : SCPS_ERANGE;
}

int scps_client_feature_batch_size(const scps_client *c, int f) {
  return feature(c, f) ? feature(c, f)->batch_size : SCPS_ERANGE;
}

const char *scps_client_feature_table(const scps_client *c, int f) {
  return feature_table(c, f) ? feature_table(c, f)->name : NULL;
}

int64_t scps_client_feature_vocabulary(const scps_client *c, int f) {
  return feature_table(c, f) ? feature_table(c, f)->vocabulary_size : SCPS_ERANGE;
}

int scps_client_batch_size(const scps_client *c) {
  int most = 0;
  for (int f = 0; f < c->layout->n_features; f++)
    if (c->layout->feature_specs[f].batch_size > most) most = c->layout->feature_specs[f].batch_size;
  return most;
}

int64_t scps_client_ids_dropped(const scps_client *c) {
  return (int64_t)atomic_load_explicit(&c->ids_dropped, memory_order_relaxed);
}
