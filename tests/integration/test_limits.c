/* The servers enforce the per-partition limits in force (scps-server
 * --limit-policy): on two 2 x 2 clusters of small limits, a client that
 * raises its own limits (so sends every id) gets refused by the default
 * server, and a --limit-policy drop server answers and updates exactly as
 * the other cluster does for a client whose preprocessing drops the same
 * ids itself (scps_prep's drop rule), bit for bit, lookups and tables, over
 * several batches of Zipf ids with stacked, weighted and ragged features.
 * Distinct-row answers and pushes by row over the limits are refused under
 * drop too; --partition-limits raises every stack's limits in force and
 * libscps adopts them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scps_client_engine.h"
#include "scps_it.h"
#include "scps_test.h"
#include "scps_workload.h"

#define STEPS 5
#define DEADLINE_MS 20000

static const char config_json[] =
    "{\"name\": \"limits\", \"batch_size\": 32, \"ids\": {\"distribution\": \"zipf\", \"exponent\": 1.1, \"seed\": 5},\n"
    " \"tables\": [\n"
    "  {\"name\": \"u\", \"vocabulary_size\": 400, \"embedding_dim\": 8, \"combiner\": \"sum\", \"stack\": \"s\",\n"
    "   \"optimizer\": {\"type\": \"adagrad\", \"learning_rate\": 0.1, \"initial_accumulator\": 0.1},\n"
    "   \"initializer\": {\"type\": \"uniform\", \"scale\": 0.5},\n"
    "   \"max_ids_per_partition\": 3, \"max_unique_ids_per_partition\": 2},\n"
    "  {\"name\": \"w\", \"vocabulary_size\": 200, \"embedding_dim\": 8, \"combiner\": \"sum\", \"stack\": \"s\",\n"
    "   \"optimizer\": {\"type\": \"adagrad\", \"learning_rate\": 0.1, \"initial_accumulator\": 0.1},\n"
    "   \"initializer\": {\"type\": \"uniform\", \"scale\": 0.5},\n"
    "   \"max_ids_per_partition\": 2, \"max_unique_ids_per_partition\": 1},\n"
    "  {\"name\": \"v\", \"vocabulary_size\": 300, \"embedding_dim\": 12, \"combiner\": \"mean\",\n"
    "   \"optimizer\": {\"type\": \"sgd\", \"learning_rate\": 0.5}, \"initializer\": {\"type\": \"uniform\", \"scale\": 0.5},\n"
    "   \"max_ids_per_partition\": 4, \"max_unique_ids_per_partition\": 3}],\n"
    " \"features\": [{\"name\": \"fu\", \"table\": \"u\", \"valency\": [0, 6]},\n"
    "              {\"name\": \"fw\", \"table\": \"w\", \"valency\": 2},\n"
    "              {\"name\": \"fv\", \"table\": \"v\", \"valency\": 3, \"weighted\": true}]}\n";

static const char *err_msg(const scps_error *e) { return e->msg; }

#define MUST(call)                                                   \
  do {                                                               \
    int must_rc_ = (call);                                           \
    CHECKF(must_rc_ == 0, "%s: %s", #call, err_msg(&err));           \
    if (must_rc_) goto out;                                          \
  } while (0)

/* Limits no batch reaches, as a client that bypassed the servers' would set. */
static int raise_limits(scps_client *c, scps_error *err) {
  const scps_layout *l = scps__client_layout(c);
  for (int s = 0; s < l->n_stacks; s++) {
    int rc = scps__prep_set_limits(scps__client_prep(c), s, 1 << 30, 1 << 30, err);
    if (rc) return rc;
  }
  return 0;
}

static float **alloc_acts(const scps_layout *l) {
  float **a = calloc((size_t)l->n_features, sizeof *a);
  for (int f = 0; a && f < l->n_features; f++)
    a[f] = calloc((size_t)l->feature_specs[f].batch_size * (size_t)l->table_specs[l->features[f].table].embedding_dim,
                  sizeof(float));
  return a;
}

static void free_acts(const scps_layout *l, float **a) {
  for (int f = 0; a && l && f < l->n_features; f++) free(a[f]);
  free(a);
}

static size_t acts_len(const scps_layout *l, int f) {
  return (size_t)l->feature_specs[f].batch_size * (size_t)l->table_specs[l->features[f].table].embedding_dim;
}

static scps_client *connect_to(const scps_it_cluster *cl, scps_limit_policy policy, scps_answer_mode answer,
                               scps_gradient_mode gradients, scps_error *err) {
  scps_client_options o;
  scps_client_options_init(&o);
  o.servers = cl->addr_list;
  o.n_servers = cl->num_processes;
  o.policy = policy;
  o.answer = answer;
  o.gradients = gradients;
  scps_client *c = NULL;
  return scps_client_create(&o, &c, err) ? NULL : c;
}

int main(void) {
  scps_it_cluster drop_cl, refuse_cl, raised_cl;
  scps_error err;
  scps_error_clear(&err);
  scps_workload *w = NULL;
  scps_workload_gen *gen = NULL;
  scps_client *sender = NULL, *dropper = NULL, *bypass = NULL, *rows = NULL, *by_row = NULL, *adopter = NULL;
  scps_batch *bs = NULL, *bd = NULL, *bb = NULL, *br = NULL, *bw = NULL;
  const scps_layout *l = NULL;
  float **acts_s = NULL, **acts_d = NULL, **grads = NULL;
  memset(&drop_cl, 0, sizeof drop_cl);
  memset(&refuse_cl, 0, sizeof refuse_cl);
  memset(&raised_cl, 0, sizeof raised_cl);
  CHECK(scps_it_init(&drop_cl, config_json, 2, 2) == 0);
  CHECK(scps_it_init(&refuse_cl, config_json, 2, 2) == 0);
  CHECK(scps_it_init(&raised_cl, config_json, 2, 2) == 0);
  drop_cl.extra[0] = "--limit-policy";
  drop_cl.extra[1] = "drop";
  raised_cl.extra[0] = "--partition-limits";
  raised_cl.extra[1] = "5000,4000";
  if (scps_it_start(&drop_cl) || scps_it_start(&refuse_cl) || scps_it_start(&raised_cl)) {
    CHECK(!"the clusters did not start");
    goto out;
  }
  MUST(scps__workload_parse(config_json, strlen(config_json), &w, &err));
  MUST(scps__workload_gen_create(w, 17, &gen, &err));
  /* sender: every id to the drop servers; dropper: drops them itself, to the
   * refusing servers; bypass: every id to the refusing servers. */
  sender = connect_to(&drop_cl, SCPS_LIMIT_ERROR, SCPS_ANSWER_POOLED, SCPS_GRADIENTS_BY_SAMPLE, &err);
  CHECKF(sender, "%s", err.msg);
  dropper = connect_to(&refuse_cl, SCPS_LIMIT_DROP, SCPS_ANSWER_POOLED, SCPS_GRADIENTS_BY_SAMPLE, &err);
  CHECKF(dropper, "%s", err.msg);
  bypass = connect_to(&refuse_cl, SCPS_LIMIT_ERROR, SCPS_ANSWER_POOLED, SCPS_GRADIENTS_BY_SAMPLE, &err);
  CHECKF(bypass, "%s", err.msg);
  rows = connect_to(&drop_cl, SCPS_LIMIT_ERROR, SCPS_ANSWER_DISTINCT_ROWS, SCPS_GRADIENTS_BY_SAMPLE, &err);
  CHECKF(rows, "%s", err.msg);
  by_row = connect_to(&drop_cl, SCPS_LIMIT_ERROR, SCPS_ANSWER_POOLED, SCPS_GRADIENTS_BY_ROW, &err);
  CHECKF(by_row, "%s", err.msg);
  if (!sender || !dropper || !bypass || !rows || !by_row) goto out;
  MUST(raise_limits(sender, &err));
  MUST(raise_limits(bypass, &err));
  MUST(raise_limits(rows, &err));
  MUST(raise_limits(by_row, &err));
  l = scps__client_layout(sender);
  MUST(scps_batch_create(sender, &bs, &err));
  MUST(scps_batch_create(dropper, &bd, &err));
  MUST(scps_batch_create(bypass, &bb, &err));
  MUST(scps_batch_create(rows, &br, &err));
  MUST(scps_batch_create(by_row, &bw, &err));
  acts_s = alloc_acts(l);
  acts_d = alloc_acts(l);
  grads = alloc_acts(l);
  uint64_t x = 7;
  int64_t drops = 0;
  int refused = 0;
  for (int step = 0; step < STEPS; step++) {
    scps__workload_gen_next(gen);
    const scps_feature_input *in = scps__workload_gen_inputs(gen);
    MUST(scps_client_prepare(sender, in, bs, &err));
    MUST(scps_client_prepare(dropper, in, bd, &err));
    for (int s = 0; s < l->n_stacks; s++) drops += scps__prep_stats(scps__client_prep(dropper), s)->id_drop_counter;
    MUST(scps_client_lookup(sender, bs, acts_s, DEADLINE_MS, &err));
    MUST(scps_client_lookup(dropper, bd, acts_d, DEADLINE_MS, &err));
    for (int f = 0; f < l->n_features; f++)
      CHECKF(!memcmp(acts_s[f], acts_d[f], acts_len(l, f) * sizeof(float)),
             "step %d feature %d: the drop server's activations differ from the dropping client's", step, f);
    for (int f = 0; f < l->n_features; f++)
      for (size_t i = 0; i < acts_len(l, f); i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        grads[f][i] = (float)((int64_t)(x >> 40) % 2001 - 1000) * 1e-3f;
      }
    MUST(scps_client_apply_gradients(sender, bs, (const float *const *)grads, step, -1, DEADLINE_MS, &err));
    MUST(scps_client_apply_gradients(dropper, bd, (const float *const *)grads, step, -1, DEADLINE_MS, &err));

    /* Every id to the refusing servers: refused, naming the partition. */
    MUST(scps_client_prepare(bypass, in, bb, &err));
    int rc = scps_client_lookup(bypass, bb, acts_s, DEADLINE_MS, &err);
    CHECKF(rc == SCPS_EINVAL && strstr(err.msg, "partition src ") && strstr(err.msg, "in force") &&
               (strstr(err.msg, "above max_ids_per_partition") || strstr(err.msg, "above max_unique_ids_per_partition")),
           "step %d: a lookup over the limits: %d %s", step, rc, err.msg);
    refused += rc == SCPS_EINVAL;
    rc = scps_client_apply_gradients(bypass, bb, (const float *const *)grads, step, -1, DEADLINE_MS, &err);
    CHECKF(rc == SCPS_EINVAL && strstr(err.msg, "partition src "), "step %d: a push over the limits: %d %s", step,
           rc, err.msg);
    /* Distinct rows and pushes by row are not dropped: refused. */
    MUST(scps_client_prepare(rows, in, br, &err));
    rc = scps_client_lookup(rows, br, acts_s, DEADLINE_MS, &err);
    CHECKF(rc == SCPS_EINVAL && strstr(err.msg, "distinct rows"), "step %d: distinct rows over the limits: %d %s",
           step, rc, err.msg);
    MUST(scps_client_prepare(by_row, in, bw, &err));
    rc = scps_client_apply_gradients(by_row, bw, (const float *const *)grads, step, -1, DEADLINE_MS, &err);
    CHECKF(rc == SCPS_EINVAL && strstr(err.msg, "rows by row"), "step %d: a push by row over the limits: %d %s",
           step, rc, err.msg);
  }
  CHECKF(drops > 0, "the batches must exceed the limits (%lld ids dropped by the client)", (long long)drops);
  printf("test_limits: %d steps, %lld ids dropped (server and client alike), %d bypassing lookups refused\n", STEPS,
         (long long)drops, refused);
  /* The tables after the pushes: the same on both clusters. */
  MUST(scps_client_lookup(sender, bs, acts_s, DEADLINE_MS, &err));
  MUST(scps_client_lookup(dropper, bd, acts_d, DEADLINE_MS, &err));
  for (int f = 0; f < l->n_features; f++)
    CHECKF(!memcmp(acts_s[f], acts_d[f], acts_len(l, f) * sizeof(float)), "after the pushes, feature %d differs", f);

  /* --partition-limits: GetConfig's limits in force, which libscps adopts. */
  adopter = connect_to(&raised_cl, SCPS_LIMIT_ERROR, SCPS_ANSWER_AUTO, SCPS_GRADIENTS_AUTO, &err);
  CHECKF(adopter, "%s", err.msg);
  for (int s = 0; adopter && s < scps__client_layout(adopter)->n_stacks; s++) {
    int32_t mi = 0, mu = 0;
    scps__prep_get_limits(scps__client_prep(adopter), s, &mi, &mu);
    CHECKF(mi == 5000 && mu == 4000, "stack %d: limits adopted from --partition-limits: %d, %d", s, mi, mu);
  }
out:
  free_acts(l, acts_s);
  free_acts(l, acts_d);
  free_acts(l, grads);
  scps_batch_destroy(bs);
  scps_batch_destroy(bd);
  scps_batch_destroy(bb);
  scps_batch_destroy(br);
  scps_batch_destroy(bw);
  scps_client_destroy(sender);
  scps_client_destroy(dropper);
  scps_client_destroy(bypass);
  scps_client_destroy(rows);
  scps_client_destroy(by_row);
  scps_client_destroy(adopter);
  scps__workload_gen_destroy(gen);
  scps__workload_destroy(w);
  scps_it_stop(&drop_cl);
  scps_it_stop(&refuse_cl);
  scps_it_stop(&raised_cl);
  return scps_test_finish("test_limits");
}
