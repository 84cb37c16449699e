/* Input preprocessing: the fast path (scps_prep) against the plain-loops
 * reference (tests/ref/scps_ref_prep) on random batches of every input form,
 * combiner, id pattern and topology; hand-derived drop cases; the errors of
 * every malformed input; the two-thread path against the one-thread path. */
#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scps_layout.h"
#include "scps_prep.h"
#include "scps_radix.h"
#include "scps_ref_prep.h"
#include "scps_test.h"

/* ---- random numbers (splitmix64) ---- */

static uint64_t rnd(uint64_t *s) {
  uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
  z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
  return z ^ (z >> 31);
}

static int64_t rnd_below(uint64_t *s, int64_t n) { return (int64_t)(rnd(s) % (uint64_t)n); }

static double rnd_unit(uint64_t *s) { return (double)(rnd(s) >> 11) / 9007199254740992.0; }

/* ---- specs and layouts ---- */

static scps_table_spec table(const char *name, int64_t vocab, int32_t dim, scps_combiner c,
                             const char *stack) {
  scps_table_spec t;
  scps__table_spec_init(&t);
  snprintf(t.name, sizeof t.name, "%s", name);
  snprintf(t.stack, sizeof t.stack, "%s", stack);
  t.vocabulary_size = vocab;
  t.embedding_dim = dim;
  t.combiner = c;
  return t;
}

static scps_feature_spec feature(const char *name, const char *tab, int32_t batch,
                                 int32_t valency) {
  scps_feature_spec f;
  scps__feature_spec_init(&f);
  snprintf(f.name, sizeof f.name, "%s", name);
  snprintf(f.table, sizeof f.table, "%s", tab);
  f.batch_size = batch;
  f.valency = valency;
  return f;
}

/* Two explicit stacks (S1: ta+tb, S2: tc), one automatic stack (td+te, te
 * large enough for three radix digits), several features per table, batch
 * sizes that N does not divide and one smaller than N. */
static scps_layout *mixed_layout(scps_combiner c, scps_topology topo) {
  scps_table_spec t[5] = {
      table("ta", 1000, 16, c, "S1"), table("tb", 37, 8, c, "S1"),
      table("tc", 5000, 32, c, "S2"), table("td", 3, 4, c, ""),
      table("te", 3000000, 8, c, ""),
  };
  scps_feature_spec f[7] = {
      feature("fa1", "ta", 16, 0), feature("fa2", "ta", 24, 0), feature("fb", "tb", 13, 0),
      feature("fc1", "tc", 7, 0),  feature("fc2", "tc", 32, 0), feature("fd", "td", 16, 0),
      feature("fe", "te", 40, 0),
  };
  scps_layout *l = NULL;
  scps_error err;
  CHECK_OK(scps__layout_create(t, 5, f, 7, &topo, NULL, &l, &err), &err);
  return l;
}

/* ---- batch generation ---- */

typedef enum id_mode { IDS_UNIFORM, IDS_FEW, IDS_SAME, IDS_EDGE, IDS_MODES } id_mode;

typedef struct gen_feature {
  int64_t *ids;
  float *weights;
  int64_t *offsets;
  int32_t *lengths;
  int64_t *indices;
} gen_feature;

typedef struct gen_batch {
  int n;
  gen_feature *g;
  scps_feature_input *in;
} gen_batch;

static void batch_free(gen_batch *b) {
  for (int f = 0; f < b->n; f++) {
    free(b->g[f].ids);
    free(b->g[f].weights);
    free(b->g[f].offsets);
    free(b->g[f].lengths);
    free(b->g[f].indices);
  }
  free(b->g);
  free(b->in);
  memset(b, 0, sizeof *b);
}

/* form < 0: a random form per feature. */
/* weights: 0 none, 1 every feature, 2 a random half of the features. */
static void gen(uint64_t *rng, const scps_layout *l, int form, id_mode mode, int weights,
                int max_len, gen_batch *b) {
  b->n = l->n_features;
  b->g = calloc((size_t)b->n, sizeof *b->g);
  b->in = calloc((size_t)b->n, sizeof *b->in);
  int64_t same_id = -1;
  for (int f = 0; f < l->n_features; f++) {
    const scps_feature_spec *fs = &l->feature_specs[f];
    int t = l->features[f].table;
    int64_t vocab = l->table_specs[t].vocabulary_size;
    bool signed_w = l->table_specs[t].combiner == SCPS_COMBINER_SUM;
    int64_t batch = fs->batch_size;
    scps_input_form fm = form >= 0 ? (scps_input_form)form : (scps_input_form)rnd_below(rng, 3);
    gen_feature *g = &b->g[f];
    scps_feature_input *in = &b->in[f];
    in->form = fm;
    int32_t valency = fs->valency > 0 ? fs->valency : (int32_t)(1 + rnd_below(rng, 5));
    g->lengths = calloc((size_t)batch + 1, sizeof *g->lengths);
    size_t n = 0;
    for (int64_t r = 0; r < batch; r++) {
      g->lengths[r] = fm == SCPS_INPUT_DENSE ? valency : (int32_t)rnd_below(rng, max_len + 1);
      n += (size_t)g->lengths[r];
    }
    g->ids = calloc(n + 1, sizeof *g->ids);
    if (same_id < 0 || same_id >= vocab)
      same_id = vocab - 1 - rnd_below(rng, vocab < 3 ? vocab : 3);
    for (size_t i = 0; i < n; i++) {
      switch (mode) {
      case IDS_UNIFORM: g->ids[i] = rnd_below(rng, vocab); break;
      case IDS_FEW: g->ids[i] = rnd_below(rng, vocab < 4 ? vocab : 4) * (vocab / 4 + 1) % vocab; break;
      case IDS_SAME: g->ids[i] = same_id; break;
      default: {
        int64_t k = rnd_below(rng, 3);
        g->ids[i] = k == 0 ? vocab - 1 : k == 1 ? 0 : rnd_below(rng, vocab);
      }
      }
    }
    if (weights == 1 || (weights == 2 && rnd_below(rng, 2))) {
      g->weights = calloc(n + 1, sizeof *g->weights);
      for (size_t i = 0; i < n; i++) {
        double w = 0.01 + 2.0 * rnd_unit(rng);
        g->weights[i] = (float)(signed_w && rnd_below(rng, 4) == 0 ? -w : w);
      }
    }
    in->n_ids = n;
    in->ids = g->ids;
    in->weights = g->weights;
    switch (fm) {
    case SCPS_INPUT_RAGGED:
      if (rnd_below(rng, 2)) {
        g->offsets = calloc((size_t)batch + 1, sizeof *g->offsets);
        for (int64_t r = 0; r < batch; r++)
          g->offsets[r + 1] = g->offsets[r] + g->lengths[r];
        in->row_offsets = g->offsets;
        in->batch_size = batch;
      } else {
        in->row_lengths = g->lengths;
      }
      break;
    case SCPS_INPUT_DENSE:
      in->valency = valency;
      break;
    case SCPS_INPUT_SPARSE: {
      g->indices = calloc(2 * n + 1, sizeof *g->indices);
      size_t i = 0;
      for (int64_t r = 0; r < batch; r++)
        for (int32_t k = 0; k < g->lengths[r]; k++) {
          g->indices[2 * i] = r;
          g->indices[2 * i + 1] = k;
          i++;
        }
      in->indices = g->indices;
      in->dense_shape[0] = batch;
      in->dense_shape[1] = max_len;
      break;
    }
    }
  }
}

/* ---- comparison ---- */

static bool gain_close(float a, float b) {
  return fabsf(a - b) <= 1e-6f * (fabsf(b) > 1.0f ? fabsf(b) : 1.0f);
}

/* Partitions compared whose gains were all 1.0, and with some not. */
static int unit_gain_partitions, other_gain_partitions;

/* Fast path vs reference: every partition and every stat. */
static void compare_ref(const scps_prep *p, const scps_ref_prep_result *r, const scps_layout *l,
                        bool check_coo, const char *ctx) {
  int32_t n = l->num_sc;
  for (int s = 0; s < l->n_stacks; s++) {
    const scps_stack_stats *st = scps__prep_stats(p, s);
    CHECKF(st->num_sc == n, "%s: num_sc %d", ctx, st->num_sc);
    for (int32_t d = 0; d < n; d++) {
      size_t cell = (size_t)s * n + d;
      CHECKF(st->max_ids_per_partition[d] == r->max_ids[cell], "%s: stack %d dst %d max_ids %d, ref %d",
             ctx, s, d, st->max_ids_per_partition[d], r->max_ids[cell]);
      CHECKF(st->max_unique_ids_per_partition[d] == r->max_unique[cell],
             "%s: stack %d dst %d max_unique %d, ref %d", ctx, s, d,
             st->max_unique_ids_per_partition[d], r->max_unique[cell]);
      CHECKF(st->required_buffer_size_per_sc[d] == r->required_buffer[cell],
             "%s: stack %d src %d required buffer %lld, ref %lld", ctx, s, d,
             (long long)st->required_buffer_size_per_sc[d], (long long)r->required_buffer[cell]);
      if (!check_coo)
        continue;
      const scps_coo *c = scps__prep_coo(p, s, d);
      CHECKF(c->n == r->n_coo[cell], "%s: stack %d sc %d: %zu entries, ref %zu", ctx, s, d, c->n,
             r->n_coo[cell]);
      if (c->n != r->n_coo[cell])
        continue;
      size_t not_one = 0;
      for (size_t i = 0; i < c->n; i++) not_one += c->gains[i] != 1.0f;
      CHECKF(scps__prep_gain_exceptions(p, s, d) == not_one, "%s: stack %d sc %d: %zu gain exceptions, %zu gains "
             "not 1.0", ctx, s, d, scps__prep_gain_exceptions(p, s, d), not_one);
      if (c->n) ++*(not_one ? &other_gain_partitions : &unit_gain_partitions);
      for (size_t i = 0; i < c->n; i++) {
        const scps_ref_entry *e = &r->coo[cell][i];
        if (c->rows[i] != e->row || c->samples[i] != e->sample || !gain_close(c->gains[i], e->gain)) {
          CHECKF(false, "%s: stack %d sc %d entry %zu: (%u, %u, %g), ref (%u, %u, %g)", ctx, s, d,
                 i, c->rows[i], c->samples[i], (double)c->gains[i], e->row, e->sample,
                 (double)e->gain);
          break;
        }
      }
    }
    CHECKF(st->id_drop_counter == r->drops[s], "%s: stack %d drops %lld, ref %lld", ctx, s,
           (long long)st->id_drop_counter, (long long)r->drops[s]);
  }
}

/* Two fast-path runs must agree bit for bit. */
static void compare_preps(const scps_prep *a, const scps_prep *b, const scps_layout *l,
                          const char *ctx) {
  for (int s = 0; s < l->n_stacks; s++) {
    const scps_stack_stats *x = scps__prep_stats(a, s), *y = scps__prep_stats(b, s);
    CHECKF(x->id_drop_counter == y->id_drop_counter, "%s: stack %d drops differ", ctx, s);
    for (int32_t d = 0; d < l->num_sc; d++) {
      CHECKF(x->max_ids_per_partition[d] == y->max_ids_per_partition[d] &&
                 x->max_unique_ids_per_partition[d] == y->max_unique_ids_per_partition[d] &&
                 x->required_buffer_size_per_sc[d] == y->required_buffer_size_per_sc[d],
             "%s: stack %d sc %d stats differ", ctx, s, d);
      const scps_coo *c = scps__prep_coo(a, s, d), *e = scps__prep_coo(b, s, d);
      bool same = c->n == e->n;
      if (same && c->n > 0)
        same = !memcmp(c->rows, e->rows, c->n * sizeof *c->rows) &&
               !memcmp(c->samples, e->samples, c->n * sizeof *c->samples) &&
               !memcmp(c->gains, e->gains, c->n * sizeof *c->gains);
      CHECKF(same, "%s: stack %d sc %d partitions differ", ctx, s, d);
    }
  }
}

static scps_prep *make_prep(const scps_layout *l, scps_limit_policy policy, int threads) {
  scps_prep_options o = {.policy = policy, .threads = threads};
  scps_prep *p = NULL;
  scps_error err;
  CHECK_OK(scps__prep_create(l, &o, &p, &err), &err);
  return p;
}

/* ---- random batches vs the reference ---- */

static void random_against_ref(const scps_layout *l, uint64_t *rng, int batches, int max_len,
                               const char *name) {
  int ns = l->n_stacks;
  scps_prep *big = make_prep(l, SCPS_LIMIT_ERROR, 1);
  scps_prep *drop1 = make_prep(l, SCPS_LIMIT_DROP, 1);
  scps_prep *drop2 = make_prep(l, SCPS_LIMIT_DROP, 2);
  scps_prep *strict = make_prep(l, SCPS_LIMIT_ERROR, 1);
  int32_t *lim_ids = calloc((size_t)ns, sizeof *lim_ids);
  int32_t *lim_uniq = calloc((size_t)ns, sizeof *lim_uniq);
  if (!big || !drop1 || !drop2 || !strict || !lim_ids || !lim_uniq)
    goto out;
  scps_error err;
  for (int s = 0; s < ns; s++)
    CHECK_OK(scps__prep_set_limits(big, s, INT32_MAX, INT32_MAX, &err), &err);
  for (int k = 0; k < batches; k++) {
    int form = (int)(k % 4) - 1;
    id_mode mode = (id_mode)((k / 4) % IDS_MODES);
    int weighted = (k / (4 * IDS_MODES)) % 3;
    char ctx[160];
    snprintf(ctx, sizeof ctx, "%s batch %d (form %d, ids %d, weights %d)", name, k, form,
             (int)mode, (int)weighted);
    gen_batch b;
    gen(rng, l, form, mode, weighted, max_len, &b);
    for (int s = 0; s < ns; s++) {
      lim_ids[s] = (int32_t)(1 + rnd_below(rng, 40));
      lim_uniq[s] = (int32_t)(1 + rnd_below(rng, 12));
      CHECK_OK(scps__prep_set_limits(drop1, s, lim_ids[s], lim_uniq[s], &err), &err);
      CHECK_OK(scps__prep_set_limits(drop2, s, lim_ids[s], lim_uniq[s], &err), &err);
      CHECK_OK(scps__prep_set_limits(strict, s, lim_ids[s], lim_uniq[s], &err), &err);
    }

    /* Policy ERROR with small limits: the reference's COO is undropped, so it
     * also describes the run with unlimited limits. */
    scps_ref_prep_result ref_all, ref_drop;
    int ref_rc = scps_ref_prep_run(l, b.in, lim_ids, lim_uniq, SCPS_LIMIT_ERROR, &ref_all);
    CHECKF(ref_rc == 0 || ref_rc == SCPS_ELIMIT, "%s: reference failed %d", ctx, ref_rc);
    if (ref_rc != 0 && ref_rc != SCPS_ELIMIT) {
      batch_free(&b);
      continue;
    }
    CHECK_OK(scps__prep_run(big, b.in, &err), &err);
    compare_ref(big, &ref_all, l, true, ctx);

    int rc = scps__prep_run(strict, b.in, &err);
    CHECKF(rc == ref_rc, "%s: strict run %d, reference %d (%s)", ctx, rc, ref_rc, err.msg);
    if (rc == SCPS_ELIMIT && ref_rc == SCPS_ELIMIT) {
      char want[256];
      snprintf(want, sizeof want, "stack '%s': partition src %d -> dst %d",
               l->stacks[ref_all.limit_stack].name, ref_all.limit_src, ref_all.limit_dst);
      CHECKF(strstr(err.msg, want) != NULL, "%s: message '%s' lacks '%s'", ctx, err.msg, want);
      CHECKF(strstr(err.msg, ref_all.limit_is_unique ? "unique ids" : " ids, above max_ids") != NULL,
             "%s: message '%s' names the wrong limit", ctx, err.msg);
      /* Stats of a refused batch are still reported. */
      compare_ref(strict, &ref_all, l, false, ctx);
    }
    scps_ref_prep_result_free(&ref_all);

    CHECK(scps_ref_prep_run(l, b.in, lim_ids, lim_uniq, SCPS_LIMIT_DROP, &ref_drop) == 0);
    CHECK_OK(scps__prep_run(drop1, b.in, &err), &err);
    compare_ref(drop1, &ref_drop, l, true, ctx);
    CHECK_OK(scps__prep_run(drop2, b.in, &err), &err);
    compare_preps(drop1, drop2, l, ctx);
    scps_ref_prep_result_free(&ref_drop);
    batch_free(&b);
  }
out:
  free(lim_ids);
  free(lim_uniq);
  scps__prep_destroy(big);
  scps__prep_destroy(drop1);
  scps__prep_destroy(drop2);
  scps__prep_destroy(strict);
}

static void test_random(void) {
  const scps_topology topos[4] = {{1, 1, 1 << 30}, {1, 4, 1 << 30}, {3, 2, 1 << 30}, {2, 4, 1 << 30}};
  const scps_combiner combs[3] = {SCPS_COMBINER_SUM, SCPS_COMBINER_MEAN, SCPS_COMBINER_SQRTN};
  uint64_t rng = 12345;
  for (int t = 0; t < 4; t++)
    for (int c = 0; c < 3; c++) {
      scps_layout *l = mixed_layout(combs[c], topos[t]);
      if (!l)
        continue;
      char name[64];
      snprintf(name, sizeof name, "%dx%d %s", topos[t].num_processes, topos[t].sc_per_process,
               scps__combiner_name(combs[c]));
      random_against_ref(l, &rng, 4 * IDS_MODES * 3, 50, name);
      scps__layout_destroy(l);
    }
}

/* Features placed against stacking order, so buckets are not sample-ordered
 * and the sort must look at the sample bits too. */
static void test_unordered_samples(void) {
  uint64_t rng = 777;
  scps_layout *l = mixed_layout(SCPS_COMBINER_MEAN, (scps_topology){1, 4, 1 << 30});
  if (!l)
    return;
  int a = scps__find_feature(l->feature_specs, l->n_features, "fa1");
  int b = scps__find_feature(l->feature_specs, l->n_features, "fa2");
  CHECK(l->features[a].stack == l->features[b].stack);
  int64_t base = l->features[a].sample_offset < l->features[b].sample_offset
                     ? l->features[a].sample_offset
                     : l->features[b].sample_offset;
  /* fa1 after fa2 in sample space, while the stack still lists fa1 first. */
  l->features[b].sample_offset = base;
  l->features[a].sample_offset = base + l->feature_specs[b].batch_size;
  random_against_ref(l, &rng, 4 * IDS_MODES * 3, 30, "unordered");
  scps__layout_destroy(l);
}

/* ---- hand-derived cases ---- */

static scps_layout *single_layout(int64_t vocab, int32_t batch, scps_combiner c,
                                  scps_topology topo, int32_t valency) {
  scps_table_spec t = table("t", vocab, 8, c, "");
  scps_feature_spec f = feature("f", "t", batch, valency);
  scps_layout *l = NULL;
  scps_error err;
  CHECK_OK(scps__layout_create(&t, 1, &f, 1, &topo, NULL, &l, &err), &err);
  return l;
}

/* N = 1, so rows are ids. Sample 0: ids 5 3 3 9; sample 1: ids 3 7.
 * (row, sample) order: (3,0) twice merged, (3,1), (5,0), (7,1), (9,0). */
static void test_drop_by_hand(void) {
  scps_layout *l = single_layout(16, 2, SCPS_COMBINER_SUM, (scps_topology){1, 1, 1 << 30}, 0);
  if (!l)
    return;
  int64_t ids[6] = {5, 3, 3, 9, 3, 7};
  float w[6] = {1, 2, 0.5f, 1, 4, 1};
  int64_t offs[3] = {0, 4, 6};
  scps_feature_input in = {.form = SCPS_INPUT_RAGGED, .n_ids = 6, .ids = ids, .weights = w,
                           .row_offsets = offs};
  scps_prep *p = make_prep(l, SCPS_LIMIT_DROP, 1);
  scps_error err;
  if (!p) {
    scps__layout_destroy(l);
    return;
  }
  /* Unlimited: 5 entries, the duplicate's gains summed 2 + 0.5. */
  CHECK_OK(scps__prep_set_limits(p, 0, 100, 100, &err), &err);
  CHECK_OK(scps__prep_run(p, &in, &err), &err);
  const scps_coo *c = scps__prep_coo(p, 0, 0);
  const uint32_t er[5] = {3, 3, 5, 7, 9}, es[5] = {0, 1, 0, 1, 0};
  const float eg[5] = {2.5f, 4, 1, 1, 1};
  CHECK(c->n == 5);
  for (size_t i = 0; i < 5 && c->n == 5; i++)
    CHECKF(c->rows[i] == er[i] && c->samples[i] == es[i] && c->gains[i] == eg[i],
           "entry %zu: (%u, %u, %g)", i, c->rows[i], c->samples[i], (double)c->gains[i]);
  const scps_stack_stats *st = scps__prep_stats(p, 0);
  CHECK(st->max_ids_per_partition[0] == 5 && st->max_unique_ids_per_partition[0] == 4);
  CHECK(st->required_buffer_size_per_sc[0] == 8 && st->id_drop_counter == 0);

  /* Two unique rows: rows 3 and 5 stay, (7,1) and (9,0) go. */
  CHECK_OK(scps__prep_set_limits(p, 0, 100, 2, &err), &err);
  CHECK_OK(scps__prep_run(p, &in, &err), &err);
  c = scps__prep_coo(p, 0, 0);
  CHECK(c->n == 3 && c->rows[2] == 5 && st->id_drop_counter == 2);
  CHECK(st->max_ids_per_partition[0] == 5 && st->max_unique_ids_per_partition[0] == 4);

  /* Two ids: both entries of row 3 stay. */
  CHECK_OK(scps__prep_set_limits(p, 0, 2, 100, &err), &err);
  CHECK_OK(scps__prep_run(p, &in, &err), &err);
  c = scps__prep_coo(p, 0, 0);
  CHECK(c->n == 2 && c->rows[0] == 3 && c->rows[1] == 3 && c->samples[1] == 1);
  CHECK(st->id_drop_counter == 3);
  int32_t a = 0, u = 0;
  scps__prep_get_limits(p, 0, &a, &u);
  CHECK(a == 2 && u == 100);
  scps__prep_destroy(p);

  /* Policy ERROR names stack, partition, count and limit. */
  p = make_prep(l, SCPS_LIMIT_ERROR, 1);
  CHECK_OK(scps__prep_set_limits(p, 0, 4, 100, &err), &err);
  CHECK(scps__prep_run(p, &in, &err) == SCPS_ELIMIT);
  CHECKF(strstr(err.msg, "stack 't': partition src 0 -> dst 0 has 5 ids, above "
                         "max_ids_per_partition 4") != NULL,
         "%s", err.msg);
  /* ... and the spec key that sets the limit, a value that admits this
   * batch, and the policy that drops instead. */
  CHECKF(strstr(err.msg, "set tables[0].max_ids_per_partition (table 't') to 5 or more") != NULL &&
             strstr(err.msg, "SCPS_LIMIT_DROP") != NULL && strstr(err.msg, "--policy drop") != NULL,
         "%s", err.msg);
  CHECK_OK(scps__prep_set_limits(p, 0, 100, 3, &err), &err);
  CHECK(scps__prep_run(p, &in, &err) == SCPS_ELIMIT);
  CHECKF(strstr(err.msg, "has 4 unique ids, above max_unique_ids_per_partition 3") != NULL, "%s",
         err.msg);
  CHECKF(strstr(err.msg, "set tables[0].max_unique_ids_per_partition (table 't') to 4 or more") != NULL, "%s",
         err.msg);
  CHECK(scps__prep_set_limits(p, 1, 8, 8, &err) == SCPS_ERANGE);
  CHECK(scps__prep_set_limits(p, 0, 0, 8, &err) == SCPS_EINVAL);
  CHECK(strstr(err.msg, "max_ids_per_partition 0") != NULL);
  scps__prep_destroy(p);
  scps__layout_destroy(l);
}

/* Combiner gains computed by hand, and sources: with N = 4 and batch 6,
 * samples 0..5 belong to sources floor(r*4/6) = 0 0 1 2 2 3. */
static void test_gains_and_sources(void) {
  scps_layout *l = single_layout(64, 6, SCPS_COMBINER_SQRTN, (scps_topology){1, 4, 1 << 30}, 0);
  if (!l)
    return;
  /* Every id is 4k + 1: same destination, row k. One id per sample except
   * sample 0 (ids 1 and 1 with weights 3 and 4: norm 5, gains 0.6 + 0.8). */
  int64_t ids[7] = {1, 1, 5, 9, 13, 17, 21};
  float w[7] = {3, 4, 2, 2, 2, 2, 2};
  int32_t lens[6] = {2, 1, 1, 1, 1, 1};
  scps_feature_input in = {.form = SCPS_INPUT_RAGGED, .n_ids = 7, .ids = ids, .weights = w,
                           .row_lengths = lens};
  scps_prep *p = make_prep(l, SCPS_LIMIT_ERROR, 1);
  scps_error err;
  if (p) {
    CHECK_OK(scps__prep_run(p, &in, &err), &err);
    int32_t dst = (int32_t)((1 % 4 + l->tables[0].shard_rotation) % 4);
    const scps_coo *c = scps__prep_coo(p, 0, dst);
    CHECK(c->n == 6);
    if (c->n == 6) {
      CHECK(c->rows[0] == 0 && c->samples[0] == 0 && gain_close(c->gains[0], 1.4f));
      for (int i = 1; i < 6; i++)
        CHECKF(c->rows[i] == (uint32_t)i && c->samples[i] == (uint32_t)i && c->gains[i] == 1.0f,
               "entry %d", i);
    }
    const scps_stack_stats *st = scps__prep_stats(p, 0);
    /* Sources 0..3 hold samples {0,1}, {2}, {3,4}, {5}. */
    const int64_t req[4] = {8, 8, 8, 8};
    for (int s = 0; s < 4; s++)
      CHECK(st->required_buffer_size_per_sc[s] == req[s]);
    CHECK(st->max_ids_per_partition[dst] == 2 && st->max_unique_ids_per_partition[dst] == 2);
    scps__prep_destroy(p);
  }
  scps__layout_destroy(l);

  /* Mean: gain w / sum(w); empty rows add nothing. */
  l = single_layout(64, 3, SCPS_COMBINER_MEAN, (scps_topology){1, 1, 1 << 30}, 0);
  if (!l)
    return;
  int64_t ids2[3] = {7, 8, 9};
  float w2[3] = {1, 3, 2};
  int64_t offs2[4] = {0, 0, 2, 3};
  scps_feature_input in2 = {.form = SCPS_INPUT_RAGGED, .n_ids = 3, .ids = ids2, .weights = w2,
                            .row_offsets = offs2, .batch_size = 3};
  p = make_prep(l, SCPS_LIMIT_ERROR, 1);
  if (p) {
    CHECK_OK(scps__prep_run(p, &in2, &err), &err);
    const scps_coo *c = scps__prep_coo(p, 0, 0);
    CHECK(c->n == 3);
    if (c->n == 3)
      CHECK(c->samples[0] == 1 && gain_close(c->gains[0], 0.25f) && gain_close(c->gains[1], 0.75f) &&
            c->samples[2] == 2 && c->gains[2] == 1.0f);
    scps__prep_destroy(p);
  }
  scps__layout_destroy(l);
}

/* ---- malformed inputs ---- */

typedef struct bad_case {
  const char *what;
  int code;
  const char *msg;
} bad_case;

static void expect_fail(scps_prep *p, const scps_layout *l, const scps_feature_input *in,
                        bad_case bc) {
  scps_error err;
  scps_error_clear(&err);
  int rc = scps__prep_run(p, in, &err);
  CHECKF(rc == bc.code, "%s: code %d, expected %d (%s)", bc.what, rc, bc.code, err.msg);
  CHECKF(strstr(err.msg, bc.msg) != NULL, "%s: message '%s' lacks '%s'", bc.what, err.msg, bc.msg);
  /* Nothing downstream ran: no partitions, no stats. */
  for (int s = 0; s < l->n_stacks; s++)
    for (int32_t d = 0; d < l->num_sc; d++) {
      CHECKF(scps__prep_coo(p, s, d)->n == 0, "%s: partition left behind", bc.what);
      CHECKF(scps__prep_stats(p, s)->max_ids_per_partition[d] == 0, "%s: stats left behind",
             bc.what);
    }
}

static void test_malformed(void) {
  scps_table_spec t[2] = {table("tm", 100, 8, SCPS_COMBINER_MEAN, ""),
                          table("ts", 50, 8, SCPS_COMBINER_SUM, "")};
  scps_feature_spec f[3] = {feature("fr", "tm", 4, 0), feature("fd", "ts", 4, 3),
                            feature("fs", "ts", 4, 0)};
  scps_layout *l = NULL;
  scps_error err;
  CHECK_OK(scps__layout_create(t, 2, f, 3, &(scps_topology){1, 2, 1 << 30}, NULL, &l, &err), &err);
  if (!l)
    return;
  scps_prep *p = make_prep(l, SCPS_LIMIT_ERROR, 2);
  if (!p) {
    scps__layout_destroy(l);
    return;
  }
  int fr = scps__find_feature(l->feature_specs, 3, "fr");
  int fd = scps__find_feature(l->feature_specs, 3, "fd");
  int fs = scps__find_feature(l->feature_specs, 3, "fs");

  int64_t r_ids[6] = {1, 2, 3, 4, 5, 99};
  float r_w[6] = {1, 1, 1, 1, 1, 1};
  int64_t r_offs[5] = {0, 2, 2, 5, 6};
  int32_t r_lens[4] = {2, 0, 3, 1};
  int64_t d_ids[12] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 49};
  int64_t s_ids[3] = {7, 8, 9};
  float s_w[3] = {-1, 0, 2}; /* sum accepts any finite weight */
  int64_t s_ind[6] = {0, 0, 0, 1, 3, 0};
  scps_feature_input good[3] = {0};
  good[fr] = (scps_feature_input){.form = SCPS_INPUT_RAGGED, .n_ids = 6, .ids = r_ids,
                                  .weights = r_w, .row_offsets = r_offs, .batch_size = 4};
  good[fd] = (scps_feature_input){.form = SCPS_INPUT_DENSE, .n_ids = 12, .ids = d_ids, .valency = 3};
  good[fs] = (scps_feature_input){.form = SCPS_INPUT_SPARSE, .n_ids = 3, .ids = s_ids, .weights = s_w,
                                  .indices = s_ind, .dense_shape = {4, 2}};
  CHECK_OK(scps__prep_run(p, good, &err), &err);

  scps_feature_input in[3];
  int64_t ids_bad[12];
  float w_bad[6];
  int64_t offs_bad[5];
  int32_t lens_bad[4];
  int64_t ind_bad[6];

#define RESET() memcpy(in, good, sizeof in)
  RESET();
  memcpy(offs_bad, r_offs, sizeof offs_bad);
  offs_bad[2] = 1;
  in[fr].row_offsets = offs_bad;
  expect_fail(p, l, in, (bad_case){"offsets not monotonic", SCPS_EINVAL,
                                   "feature 'fr': row_offsets[2] = 1 is below row_offsets[1] = 2"});
  offs_bad[2] = 2;
  offs_bad[0] = 1;
  expect_fail(p, l, in, (bad_case){"offsets start", SCPS_EINVAL, "feature 'fr': row_offsets[0] = 1"});
  offs_bad[0] = 0;
  offs_bad[4] = 5;
  expect_fail(p, l, in, (bad_case){"offsets end", SCPS_EINVAL,
                                   "feature 'fr': row_offsets[4] = 5 does not match n_ids 6"});

  RESET();
  in[fr].row_offsets = NULL;
  in[fr].row_lengths = r_lens;
  CHECK_OK(scps__prep_run(p, in, &err), &err);
  memcpy(lens_bad, r_lens, sizeof lens_bad);
  lens_bad[3] = 2;
  in[fr].row_lengths = lens_bad;
  expect_fail(p, l, in, (bad_case){"lengths sum", SCPS_EINVAL,
                                   "feature 'fr': row_lengths sum to 7, n_ids is 6"});
  lens_bad[3] = 1;
  lens_bad[1] = -1;
  expect_fail(p, l, in, (bad_case){"negative length", SCPS_EINVAL,
                                   "feature 'fr': row_lengths[1] = -1 is negative"});
  in[fr].row_lengths = NULL;
  expect_fail(p, l, in, (bad_case){"no rows", SCPS_EINVAL, "needs row_offsets or row_lengths"});

  RESET();
  in[fr].batch_size = 5;
  expect_fail(p, l, in, (bad_case){"ragged batch", SCPS_EINVAL,
                                   "feature 'fr': batch_size 5 does not match the FeatureSpec "
                                   "batch_size 4"});

  RESET();
  memcpy(ids_bad, r_ids, sizeof r_ids);
  ids_bad[3] = -1;
  in[fr].ids = ids_bad;
  expect_fail(p, l, in, (bad_case){"negative id", SCPS_ERANGE,
                                   "feature 'fr': id -1 at position 3 (sample 2) out of range [0, 100)"});
  ids_bad[3] = 4;
  ids_bad[5] = 100;
  expect_fail(p, l, in, (bad_case){"id = vocabulary", SCPS_ERANGE,
                                   "feature 'fr': id 100 at position 5 (sample 3)"});
  in[fr].ids = NULL;
  expect_fail(p, l, in, (bad_case){"NULL ids", SCPS_EINVAL, "feature 'fr': ids is NULL"});

  RESET();
  memcpy(w_bad, r_w, sizeof w_bad);
  w_bad[4] = NAN;
  in[fr].weights = w_bad;
  expect_fail(p, l, in, (bad_case){"NaN weight", SCPS_EINVAL,
                                   "feature 'fr': weight nan at position 4 (sample 2) is not finite"});
  w_bad[4] = INFINITY;
  expect_fail(p, l, in, (bad_case){"Inf weight", SCPS_EINVAL, "weight inf at position 4"});
  w_bad[4] = 1;
  w_bad[0] = 0;
  expect_fail(p, l, in, (bad_case){"zero weight for mean", SCPS_EINVAL,
                                   "feature 'fr': weight 0 at position 0 (sample 0) must be > 0 "
                                   "for combiner mean"});

  RESET();
  in[fd].valency = 4;
  expect_fail(p, l, in, (bad_case){"dense valency", SCPS_EINVAL,
                                   "feature 'fd': dense valency 4 does not match the FeatureSpec "
                                   "valency 3"});
  in[fd].valency = 3;
  in[fd].n_ids = 9;
  expect_fail(p, l, in, (bad_case){"dense batch", SCPS_EINVAL,
                                   "feature 'fd': dense input has n_ids 9, expected batch_size 4 x "
                                   "valency 3 = 12"});
  in[fd].n_ids = 12;
  memcpy(ids_bad, d_ids, sizeof d_ids);
  ids_bad[11] = 50;
  in[fd].ids = ids_bad;
  expect_fail(p, l, in, (bad_case){"dense id", SCPS_ERANGE, "feature 'fd': id 50 at position 11 (sample 3)"});

  RESET();
  in[fs].dense_shape[0] = 8;
  expect_fail(p, l, in, (bad_case){"sparse batch", SCPS_EINVAL,
                                   "feature 'fs': dense_shape[0] = 8 does not match the FeatureSpec "
                                   "batch_size 4"});
  in[fs].dense_shape[0] = 4;
  memcpy(ind_bad, s_ind, sizeof ind_bad);
  ind_bad[2] = 2;
  ind_bad[4] = 1;
  in[fs].indices = ind_bad;
  expect_fail(p, l, in, (bad_case){"sparse order", SCPS_EINVAL,
                                   "feature 'fs': indices[2] sample 1 follows sample 2"});
  memcpy(ind_bad, s_ind, sizeof ind_bad);
  ind_bad[4] = 4;
  expect_fail(p, l, in, (bad_case){"sparse sample", SCPS_ERANGE,
                                   "feature 'fs': indices[2] sample 4 out of range [0, 4)"});
  memcpy(ind_bad, s_ind, sizeof ind_bad);
  ind_bad[3] = 2;
  expect_fail(p, l, in, (bad_case){"sparse position", SCPS_ERANGE,
                                   "feature 'fs': indices[1] position 2 out of range [0, 2)"});

  RESET();
  float w_sum_bad[3] = {1, -INFINITY, 1};
  in[fs].weights = w_sum_bad;
  expect_fail(p, l, in, (bad_case){"sum weight", SCPS_EINVAL, "feature 'fs': weight -inf at position 1"});
  /* Finite weights of one id, repeated in a sample, summing past float32. */
  RESET();
  int64_t s_ids_dup[3] = {7, 7, 9};
  float w_huge[3] = {3e38f, 3e38f, 2};
  in[fs].ids = s_ids_dup;
  in[fs].weights = w_huge;
  expect_fail(p, l, in, (bad_case){"weights of a repeated id overflow", SCPS_EINVAL,
                                   "stack 'ts': sample 4 (of the stack's samples), local row 3 of SparseCore 1"});
  expect_fail(p, l, in, (bad_case){"weights of a repeated id overflow", SCPS_EINVAL,
                                   "the weights of its repeated id sum to inf, not finite in float32"});

  RESET();
  in[fd].form = (scps_input_form)7;
  expect_fail(p, l, in, (bad_case){"form", SCPS_EINVAL, "feature 'fd': unknown input form 7"});
  CHECK(scps__prep_run(p, NULL, &err) == SCPS_EINVAL);
  /* Errors come in feature order whatever the check that finds them: an
   * earlier feature's bad id before a later one's bad shape, and the other
   * way round. */
  CHECK(fr < fd);
  RESET();
  memcpy(ids_bad, r_ids, sizeof r_ids);
  ids_bad[5] = 100;
  in[fr].ids = ids_bad;
  in[fd].valency = 2;
  expect_fail(p, l, in, (bad_case){"bad id before a bad shape", SCPS_ERANGE, "feature 'fr': id 100 at position 5"});
  RESET();
  memcpy(offs_bad, r_offs, sizeof offs_bad);
  offs_bad[0] = 1;
  in[fr].row_offsets = offs_bad;
  memcpy(ids_bad, d_ids, sizeof d_ids);
  ids_bad[0] = 50;
  in[fd].ids = ids_bad;
  expect_fail(p, l, in, (bad_case){"bad shape before a bad id", SCPS_EINVAL, "feature 'fr': row_offsets[0] = 1"});
#undef RESET

  /* A good batch still goes through afterwards. */
  CHECK_OK(scps__prep_run(p, good, &err), &err);
  scps__prep_destroy(p);
  scps__layout_destroy(l);
}

/* ---- a larger batch: radix passes, two threads, reuse ---- */

static void test_large_threads(void) {
  scps_table_spec t[8];
  scps_feature_spec f[8];
  for (int i = 0; i < 8; i++) {
    char n[16], fn[16];
    snprintf(n, sizeof n, "t%d", i);
    snprintf(fn, sizeof fn, "f%d", i);
    t[i] = table(n, 100000 + 1000 * i, 64, SCPS_COMBINER_SUM, "");
    f[i] = feature(fn, n, 2048, 4);
  }
  scps_layout *l = NULL;
  scps_error err;
  CHECK_OK(scps__layout_create(t, 8, f, 8, &(scps_topology){2, 4, 1 << 30}, NULL, &l, &err), &err);
  if (!l)
    return;
  scps_prep *p1 = make_prep(l, SCPS_LIMIT_DROP, 1), *p2 = make_prep(l, SCPS_LIMIT_DROP, 2);
  int32_t *lim = calloc((size_t)l->n_stacks, sizeof *lim);
  uint64_t rng = 99;
  for (int k = 0; k < 6 && p1 && p2 && lim; k++) {
    gen_batch b;
    gen(&rng, l, SCPS_INPUT_DENSE, k % 2 ? IDS_FEW : IDS_UNIFORM, k >= 3 ? 1 : 0, 0, &b);
    for (int s = 0; s < l->n_stacks; s++) {
      lim[s] = k < 2 ? INT32_MAX : 64;
      CHECK_OK(scps__prep_set_limits(p1, s, lim[s], lim[s], &err), &err);
      CHECK_OK(scps__prep_set_limits(p2, s, lim[s], lim[s], &err), &err);
    }
    CHECK_OK(scps__prep_run(p1, b.in, &err), &err);
    CHECK_OK(scps__prep_run(p2, b.in, &err), &err);
    char ctx[64];
    snprintf(ctx, sizeof ctx, "large batch %d", k);
    compare_preps(p1, p2, l, ctx);
    scps_ref_prep_result r;
    CHECK(scps_ref_prep_run(l, b.in, lim, lim, SCPS_LIMIT_DROP, &r) == 0);
    compare_ref(p2, &r, l, true, ctx);
    scps_ref_prep_result_free(&r);
    batch_free(&b);
  }
  free(lim);
  scps__prep_destroy(p1);
  scps__prep_destroy(p2);
  scps__layout_destroy(l);
}

/* ---- the radix sort alone: keys up to 64 bits wide, runs of one digit ---- */

/* The stable order by bits [lo, hi) the radix sort must produce. */
static void ref_sort(uint64_t *k, float *v, size_t n, unsigned lo, uint64_t mask) {
  for (size_t i = 1; i < n; i++) {
    uint64_t x = k[i], d = (x >> lo) & mask;
    float y = v[i];
    size_t j = i;
    for (; j > 0 && ((k[j - 1] >> lo) & mask) > d; j--) {
      k[j] = k[j - 1];
      v[j] = v[j - 1];
    }
    k[j] = x;
    v[j] = y;
  }
}

static void test_radix(void) {
  enum { MAXN = 1500, PATTERNS = 4 };
  static uint64_t keys[MAXN], tmp[MAXN], ref[MAXN], hot[5];
  static float vals[MAXN], tvals[MAXN], rvals[MAXN];
  const unsigned ranges[][2] = {{0, 64}, {13, 64}, {0, 1}, {5, 27}, {40, 63}, {0, 33}};
  const size_t sizes[] = {2, 48, 49, 700, MAXN};
  scps_radix_scratch *s = malloc(sizeof *s);
  uint64_t rng = 4242;
  for (size_t r = 0; s && r < sizeof ranges / sizeof ranges[0]; r++)
    for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++)
      for (int pat = 0; pat < PATTERNS; pat++) {
        unsigned lo = ranges[r][0], hi = ranges[r][1];
        uint64_t mask = hi - lo == 64 ? ~UINT64_C(0) : (UINT64_C(1) << (hi - lo)) - 1;
        size_t n = sizes[z];
        for (int h = 0; h < 5; h++) hot[h] = rnd(&rng);
        uint64_t base = rnd(&rng);
        /* Uniform; a few hot keys (runs after the first pass); all equal;
         * only the top four bits of the range vary (constant digits; the
         * low four for a range under four bits wide). */
        for (size_t i = 0; i < n; i++) {
          uint64_t x = rnd(&rng);
          keys[i] = pat == 0 ? x : pat == 1 ? hot[x % 5] ^ (x >> 60) : pat == 2 ? base
                  : base ^ ((x & 15) << (hi >= 4 ? hi - 4 : 0));
          vals[i] = (float)i;
        }
        memcpy(ref, keys, n * sizeof *keys);
        memcpy(rvals, vals, n * sizeof *vals);
        ref_sort(ref, rvals, n, lo, mask);
        char ctx[96];
        snprintf(ctx, sizeof ctx, "radix bits [%u, %u), n %zu, pattern %d", lo, hi, n, pat);
        int in_tmp = scps__radix_sort_kv(keys, vals, tmp, tvals, n, lo, hi, s);
        CHECKF(!memcmp(in_tmp ? tmp : keys, ref, n * sizeof *keys), "%s: keys out of order", ctx);
        CHECKF(!memcmp(in_tmp ? tvals : vals, rvals, n * sizeof *vals), "%s: values not carried stably", ctx);
        /* Keys alone, in another order (7919 is prime to every n here); keys
         * equal in the range differ outside it, so the order checks stability. */
        for (size_t i = 0; i < n; i++) keys[i] = ref[(i * 7919) % n];
        memcpy(ref, keys, n * sizeof *keys);
        ref_sort(ref, rvals, n, lo, mask);
        in_tmp = scps__radix_sort_k(keys, tmp, n, lo, hi, s);
        CHECKF(!memcmp(in_tmp ? tmp : keys, ref, n * sizeof *keys), "%s: keys alone out of order", ctx);
      }
  free(s);
}

/* scps__prep_parallel: every item exactly once, on one thread or a pool,
 * and a run afterwards still matches the one-thread prep. */
static void mark_item(void *ctx, int item) { atomic_fetch_add(&((atomic_int *)ctx)[item], 1); }

static void test_parallel(void) {
  scps_table_spec t[1] = {table("t", 1000, 8, SCPS_COMBINER_SUM, "")};
  scps_feature_spec f[1] = {feature("f", "t", 64, 2)};
  scps_layout *l = NULL;
  scps_error err;
  CHECK_OK(scps__layout_create(t, 1, f, 1, &(scps_topology){1, 2, 1 << 20}, NULL, &l, &err), &err);
  if (!l) return;
  enum { ITEMS = 1000 };
  for (int threads = 1; threads <= 3; threads += 2) {
    scps_prep *p = make_prep(l, SCPS_LIMIT_DROP, threads), *one = make_prep(l, SCPS_LIMIT_DROP, 1);
    static atomic_int seen[ITEMS];
    for (int round = 0; p && one && round < 20; round++) {
      for (int i = 0; i < ITEMS; i++) atomic_store(&seen[i], 0);
      scps__prep_parallel(p, ITEMS - round, mark_item, seen);
      int wrong = 0;
      for (int i = 0; i < ITEMS; i++) wrong += atomic_load(&seen[i]) != (i < ITEMS - round);
      CHECKF(wrong == 0, "%d threads, round %d: %d items not run exactly once", threads, round, wrong);
    }
    uint64_t rng = 7;
    gen_batch b;
    if (p && one) {
      gen(&rng, l, SCPS_INPUT_DENSE, IDS_UNIFORM, 0, 0, &b);
      CHECK_OK(scps__prep_run(p, b.in, &err), &err);
      CHECK_OK(scps__prep_run(one, b.in, &err), &err);
      compare_preps(one, p, l, "after scps__prep_parallel");
      batch_free(&b);
    }
    scps__prep_destroy(p);
    scps__prep_destroy(one);
  }
  scps__layout_destroy(l);
}

int main(void) {
  test_drop_by_hand();
  test_gains_and_sources();
  test_malformed();
  test_random();
  CHECKF(unit_gain_partitions > 0 && other_gain_partitions > 0,
         "random batches: %d partitions with every gain 1.0, %d with others", unit_gain_partitions,
         other_gain_partitions);
  test_unordered_samples();
  test_large_threads();
  test_parallel();
  test_radix();
  return scps_test_finish("test_prep");
}
