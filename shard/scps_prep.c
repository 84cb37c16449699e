#include "scps_prep.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "scps_prep_check.h"
#include "scps_prep_int.h"
#include "scps_prep_pool.h"
#include "scps_radix.h"

/* A run goes through parallel phases, each a list of work items that the
 * calling thread and the pool's workers claim through an atomic counter:
 *   1. per feature: check the shape and build row offsets;
 *   2. per feature: check the ids, combiner gains, and write each entry's
 *      key (and gain) at the entry's own position in its stack's array
 *      (features in stack order, so the array is in sample order);
 *   3. per stack: one stable radix sort by destination and row, which
 *      leaves each destination's entries together and in (row, sample)
 *      order; the destinations' bounds by binary search;
 *   4. per (stack, destination): merge duplicate (row, sample) pairs, count
 *      per source, drop, write the COO arrays.
 * A key is dst | row | sample | src from high to low bits (src, the
 * sample's source SparseCore, is a function of the sample, so it does not
 * change the order), so sorted keys are in (row, sample) order within each
 * destination and the walk needs no per-sample lookup. Sorting by
 * destination in the radix passes replaces a separate scatter by
 * destination: the ids are read once. Without weights all ids of a sample
 * share one gain: 1 for sum (nothing stored), else one value per sample;
 * only weighted stacks carry a gain per entry through the sort. */

static unsigned bits_for(uint64_t max_value) {
  unsigned b = 0;
  while (b < 64 && (max_value >> b) != 0)
    b++;
  return b;
}

static int64_t roundup8(int64_t v) { return (v + 7) / 8 * 8; }

static void lent_job(scps_prep *p, int item, prep_thread *t) {
  (void)t;
  p->lent_fn(p->lent_ctx, item);
}

void scps__prep_parallel(scps_prep *p, int n_items, void (*fn)(void *ctx, int item), void *ctx) {
  p->lent_fn = fn;
  p->lent_ctx = ctx;
  scps__prep_pool_run(p, lent_job, n_items);
}

/* ---- phase 1: shapes ---- */


/* Mod sharding constants, copied into locals so the hot loops do not reload
 * them after every store (the build uses -fno-strict-aliasing). */
typedef struct prep_map {
  bool pow2;
  unsigned shift;
  uint64_t mask, n;
} prep_map;

static prep_map map_of(const scps_prep *p) {
  return (prep_map){.pow2 = p->pow2, .shift = p->sc_shift, .mask = p->sc_mask,
                    .n = (uint64_t)p->n};
}

/* Destination SparseCore (id % N + rotation) % N, and id / N in *q. */
static inline uint64_t shard_of(prep_map m, uint64_t id, uint64_t rotation, uint64_t *q) {
  if (m.pow2) {
    *q = id >> m.shift;
    return ((id & m.mask) + rotation) & m.mask;
  }
  uint64_t quo = id / m.n;
  uint64_t d = id - quo * m.n + rotation;
  *q = quo;
  return d >= m.n ? d - m.n : d;
}

static void job_shape(scps_prep *p, int f, prep_thread *t) {
  (void)t;
  prep_feature *pf = &p->features[f];
  scps_error_clear(&pf->err);
  pf->rc = scps__prep_check_shape(p, f, &p->inputs[f], pf, &pf->err);
}

/* Input f's ids and weights alone (its shape checked): for reporting, in
 * feature order, an error that an earlier check would otherwise hide. */
static int validate_ids(scps_prep *p, int f) {
  prep_feature *pf = &p->features[f];
  const scps_feature_input *in = &p->inputs[f];
  bool bad = false;
  for (size_t i = 0; i < in->n_ids; i++)
    bad |= (uint64_t)in->ids[i] >= pf->vocab;
  pf->rc = bad ? scps__prep_check_bad_id(p, f, in, pf, &pf->err)
               : scps__prep_check_weights(p, f, in, pf, &pf->err);
  return pf->rc;
}

/* ---- phase 2: ids, gains and keys ---- */

/* Keys of ids[0..n) without their low bits: destination and row, each id
 * checked against the vocabulary. Sample-blind and branch-free, so it
 * vectorises (for a power-of-two N: no division). Returns whether an id was
 * out of range: such an id still maps to some destination in [0, N), its key
 * is written where it belongs and the run then fails. */
static bool key_ids(const prep_feature *pf, const prep_stack *st, prep_map m, const int64_t *ids, size_t n,
                    uint64_t *keys) {
  unsigned row_shift = st->sample_bits + st->src_bits, dst_shift = st->dst_shift;
  uint64_t rot = (uint64_t)pf->rotation, vocab = pf->vocab, roff = pf->row_offset;
  uint64_t bad = 0; /* not bool: a bool reduction does not vectorise */
  if (m.pow2) {
    for (size_t i = 0; i < n; i++) {
      uint64_t id = (uint64_t)ids[i];
      bad |= (uint64_t)(id >= vocab);
      uint64_t dst = ((id & m.mask) + rot) & m.mask, q = id >> m.shift;
      keys[i] = (dst << dst_shift) | ((q + roff) << row_shift);
    }
    return bad != 0;
  }
  for (size_t i = 0; i < n; i++) {
    uint64_t q, id = (uint64_t)ids[i];
    bad |= (uint64_t)(id >= vocab);
    uint64_t dst = shard_of(m, id, rot, &q);
    keys[i] = (dst << dst_shift) | ((q + roff) << row_shift);
  }
  return bad != 0;
}

static void job_keys(scps_prep *p, int f, prep_thread *t) {
  (void)t;
  prep_feature *pf = &p->features[f];
  prep_stack *st = &p->stacks[pf->stack];
  const scps_feature_input *in = &p->inputs[f];
  const float *w = in->weights;
  const int64_t *o = pf->offs;
  uint64_t *keys = st->keys + pf->key_base;
  float *gains = st->gains + pf->key_base;
  const uint32_t *sample_src = st->sample_src;
  float *sample_gain = st->sample_gain;
  prep_gain_mode mode = st->gain_mode;
  unsigned src_bits = st->src_bits;
  bool bad = key_ids(pf, st, map_of(p), in->ids, in->n_ids, keys);
  /* Then sample by sample: the low bits, and the gains. */
  for (int64_t r = 0; r < pf->batch; r++) {
    int64_t b = o[r], e = o[r + 1];
    if (b == e)
      continue;
    uint64_t sample = pf->sample_offset + (uint64_t)r;
    uint64_t low = (sample << src_bits) | sample_src[sample];
    for (int64_t i = b; i < e; i++)
      keys[i] |= low;
    if (mode == PREP_GAIN_UNIT)
      continue;
    double inv = 1.0;
    if (pf->combiner != SCPS_COMBINER_SUM) {
      double sum = 0.0;
      if (!w)
        sum = (double)(e - b);
      else if (pf->combiner == SCPS_COMBINER_MEAN)
        for (int64_t i = b; i < e; i++)
          sum += w[i];
      else
        for (int64_t i = b; i < e; i++)
          sum += (double)w[i] * w[i];
      inv = pf->combiner == SCPS_COMBINER_MEAN ? 1.0 / sum : 1.0 / sqrt(sum);
    }
    if (mode == PREP_GAIN_PER_SAMPLE)
      sample_gain[sample] = (float)inv;
    else
      for (int64_t i = b; i < e; i++)
        gains[i] = w ? (float)(w[i] * inv) : (float)inv;
  }
  pf->rc = bad ? scps__prep_check_bad_id(p, f, in, pf, &pf->err) : scps__prep_check_weights(p, f, in, pf, &pf->err);
}

/* ---- phase 3: sort ---- */

static void job_sort(scps_prep *p, int s, prep_thread *t) {
  prep_stack *st = &p->stacks[s];
  size_t n = st->n_keys;
  st->sorted_keys = st->keys;
  st->sorted_gains = st->gains;
  unsigned hi = st->sort_hi + st->dst_bits;
  if (st->gain_mode == PREP_GAIN_PER_ENTRY) {
    if (scps__radix_sort_kv(st->keys, st->gains, st->keys_tmp, st->gains_tmp, n, st->sort_lo, hi, t->radix)) {
      st->sorted_keys = st->keys_tmp;
      st->sorted_gains = st->gains_tmp;
    }
  } else if (scps__radix_sort_k(st->keys, st->keys_tmp, n, st->sort_lo, hi, t->radix)) {
    st->sorted_keys = st->keys_tmp;
  }
  /* Destinations are the keys' top bits: each one's entries lie together. */
  const uint64_t *k = st->sorted_keys;
  size_t start = 0;
  for (int32_t d = 0; d < p->n; d++) {
    size_t lo = start, hi_i = n;
    if (d == p->n - 1)
      lo = n;
    while (lo < hi_i) {
      size_t mid = lo + (hi_i - lo) / 2;
      if (k[mid] >> st->dst_shift <= (uint64_t)d)
        lo = mid + 1;
      else
        hi_i = mid;
    }
    st->bucket_off[d] = start;
    st->bucket_n[d] = lo - start;
    start = lo;
  }
}

/* ---- phase 4: merge, count, drop ---- */

static size_t drop_partition(const scps_prep *p, const prep_stack *st, prep_thread *t,
                             uint32_t *rows, uint32_t *samples, float *g, const uint32_t *src_of,
                             size_t n) {
  int64_t *kept_ids = t->kept_ids, *kept_uniq = t->kept_uniq, *last_row = t->last_row;
  for (int32_t s = 0; s < p->n; s++) {
    kept_ids[s] = 0;
    kept_uniq[s] = 0;
    last_row[s] = -1;
  }
  int64_t max_ids = st->run_max_ids, max_unique = st->run_max_unique;
  size_t j = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t src = src_of[i];
    bool new_row = last_row[src] != (int64_t)rows[i];
    if (new_row && kept_uniq[src] >= max_unique)
      continue;
    if (kept_ids[src] >= max_ids)
      continue;
    kept_ids[src]++;
    if (new_row) {
      kept_uniq[src]++;
      last_row[src] = rows[i];
    }
    rows[j] = rows[i];
    samples[j] = samples[i];
    g[j] = g[i];
    j++;
  }
  return j;
}

/* The first gain that is not finite, or n: the weights of one id of a
 * sample, each finite, may sum past float32's range. */
static size_t first_not_finite(const float *g, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!isfinite(g[i])) return i;
  return n;
}

/* Gains other than exactly 1.0 (branch-free, so it vectorises). */
static size_t count_not_one(const float *g, size_t n) {
  size_t other = 0;
  for (size_t i = 0; i < n; i++) other += g[i] != 1.0f;
  return other;
}

/* Where the walk writes, and what it knows of the stack. */
typedef struct prep_walk {
  uint32_t *rows, *samples, *src; /* src: NULL unless policy DROP */
  float *g;
  const float *sample_gain;
  unsigned src_bits, row_shift;
  uint64_t src_mask, sample_mask, row_mask;
} prep_walk;

/* Walks n sorted keys: merges equal keys (a (row, sample) pair repeated in
 * a sample) by adding their gains in key order and writes the COO arrays;
 * cnt[src] gets the entries written in its low 32 bits and the distinct rows
 * in its high 32 (a partition holds fewer than 2^32 entries), one
 * read-modify-write per entry. A source's entry starts a new row when its
 * row differs from that source's last one. With by_run (no two features of
 * the stack share a table) a row's entries all come from one feature, in
 * sample order, so their sources never decrease: comparing the row and
 * source bits with the previous entry's suffices, and last_row goes unused.
 * mode, by_run and with_src are constants at every call, so each
 * combination gets its own loop. Returns the entries written. */
static inline __attribute__((always_inline)) size_t
walk_sorted(const prep_walk *w, const uint64_t *keys, const float *gains, size_t n, uint64_t *cnt,
            int64_t *last_row, const prep_gain_mode mode, const bool by_run, const bool with_src) {
  if (n == 0)
    return 0;
  uint32_t *rows = w->rows, *samples = w->samples, *out_src = w->src;
  float *g = w->g;
  const float *sample_gain = w->sample_gain;
  const unsigned src_bits = w->src_bits, row_shift = w->row_shift;
  const uint64_t src_mask = w->src_mask, sample_mask = w->sample_mask, row_mask = w->row_mask;
  const uint64_t run_mask = (row_mask << row_shift) | src_mask; /* row and source bits */
  size_t m = 0;
  uint64_t prev_key = ~keys[0]; /* differs from the first key */
  uint64_t prev_run = ~keys[0] & run_mask;
  for (size_t i = 0; i < n; i++) {
    uint64_t k = keys[i];
    uint32_t sample = (uint32_t)((k >> src_bits) & sample_mask);
    float gain = mode == PREP_GAIN_UNIT         ? 1.0f
                 : mode == PREP_GAIN_PER_SAMPLE ? sample_gain[sample]
                                                : gains[i];
    if (__builtin_expect(k == prev_key, 0)) {
      g[m - 1] += gain;
      continue;
    }
    uint32_t row = (uint32_t)((k >> row_shift) & row_mask), src = (uint32_t)(k & src_mask);
    uint64_t fresh;
    if (by_run) {
      uint64_t run = k & run_mask;
      fresh = run != prev_run;
      prev_run = run;
    } else {
      fresh = last_row[src] != (int64_t)row;
      last_row[src] = row;
    }
    cnt[src] += 1 + (fresh << 32);
    if (with_src)
      out_src[m] = src;
    rows[m] = row;
    samples[m] = sample;
    g[m] = gain;
    m++;
    prev_key = k;
  }
  return m;
}

/* walk_sorted with its constants picked from the run's. */
static size_t walk_partition(const prep_walk *w, const uint64_t *keys, const float *gains, size_t n,
                             uint64_t *cnt, int64_t *last_row, prep_gain_mode mode, bool by_run) {
#define SCPS_PREP_WALK(M, R, S) walk_sorted(w, keys, gains, n, cnt, last_row, M, R, S)
#define SCPS_PREP_WALK_MODES(R, S)                                                                 \
  (mode == PREP_GAIN_UNIT         ? SCPS_PREP_WALK(PREP_GAIN_UNIT, R, S)                            \
   : mode == PREP_GAIN_PER_SAMPLE ? SCPS_PREP_WALK(PREP_GAIN_PER_SAMPLE, R, S)                      \
                                  : SCPS_PREP_WALK(PREP_GAIN_PER_ENTRY, R, S))
  if (!w->src)
    return by_run ? SCPS_PREP_WALK_MODES(true, false) : SCPS_PREP_WALK_MODES(false, false);
  return by_run ? SCPS_PREP_WALK_MODES(true, true) : SCPS_PREP_WALK_MODES(false, true);
#undef SCPS_PREP_WALK_MODES
#undef SCPS_PREP_WALK
}

static void job_partition(scps_prep *p, int item, prep_thread *t) {
  int32_t nsc = p->n;
  prep_stack *st = &p->stacks[item / nsc];
  int32_t dst = item % nsc;
  size_t off = st->bucket_off[dst], n = st->bucket_n[dst];
  const uint64_t *keys = st->sorted_keys + off;
  const float *gains = st->sorted_gains + off;
  prep_gain_mode mode = st->gain_mode;

  uint64_t *cnt = t->cnt;
  memset(cnt, 0, (size_t)nsc * sizeof *cnt);
  int64_t *last_row = t->last_row;
  for (int32_t s = 0; s < nsc; s++)
    last_row[s] = -1;
  uint32_t *rows = st->out_rows + off, *samples = st->out_samples + off;
  float *g = st->out_gains + off;
  uint32_t *out_src = st->out_src ? st->out_src + off : NULL;
  prep_walk w = {.rows = rows, .samples = samples, .src = out_src, .g = g,
                 .sample_gain = st->sample_gain, .src_bits = st->src_bits,
                 .row_shift = st->sample_bits + st->src_bits,
                 .src_mask = (UINT64_C(1) << st->src_bits) - 1,
                 .sample_mask = (UINT64_C(1) << st->sample_bits) - 1,
                 .row_mask = (UINT64_C(1) << (st->sort_hi - st->sample_bits - st->src_bits)) - 1};
  size_t m = walk_partition(&w, keys, gains, n, cnt, last_row, mode, st->rows_by_run);

  bool over = false;
  for (int32_t s = 0; s < nsc; s++) {
    size_t cell = (size_t)s * (size_t)nsc + (size_t)dst;
    int64_t ids = (int64_t)(cnt[s] & UINT32_MAX), uniq = (int64_t)(cnt[s] >> 32);
    st->part_ids[cell] = ids;
    st->part_unique[cell] = uniq;
    over |= ids > st->run_max_ids || uniq > st->run_max_unique;
  }
  st->dst_drops[dst] = 0;
  if (over && p->opts.policy == SCPS_LIMIT_DROP) {
    size_t kept = drop_partition(p, st, t, rows, samples, g, out_src, m);
    st->dst_drops[dst] = (int64_t)(m - kept);
    m = kept;
  }
  st->coo[dst] = (scps_coo){.n = m, .rows = rows, .samples = samples, .gains = g};
  st->gain_exceptions[dst] = count_not_one(g, m);
  size_t bad = mode == PREP_GAIN_PER_ENTRY ? first_not_finite(g, m) : m;
  st->bad_gain[dst] = bad < m ? bad : SIZE_MAX;
}

/* ---- run ---- */

static void reset_outputs(scps_prep *p) {
  for (int s = 0; s < p->n_stacks; s++) {
    prep_stack *st = &p->stacks[s];
    for (int32_t d = 0; d < p->n; d++) {
      st->coo[d] = (scps_coo){0};
      st->gain_exceptions[d] = 0;
      st->stats.max_ids_per_partition[d] = 0;
      st->stats.max_unique_ids_per_partition[d] = 0;
      st->stats.required_buffer_size_per_sc[d] = 0;
    }
    st->stats.id_drop_counter = 0;
  }
}

static int reserve_stack(prep_stack *st, size_t need, bool with_src) {
  if (need <= st->cap)
    return 0;
  size_t cap = st->cap ? st->cap : 4096;
  while (cap < need)
    cap = cap > SIZE_MAX / 2 ? need : cap * 2;
  if (cap > SIZE_MAX / sizeof(uint64_t))
    return SCPS_ENOMEM;
  void *a;
#define SCPS_PREP_GROW(field)                                \
  a = realloc(st->field, cap * sizeof *st->field);           \
  if (!a)                                                    \
    return SCPS_ENOMEM;                                      \
  st->field = a;
  SCPS_PREP_GROW(keys)
  SCPS_PREP_GROW(keys_tmp)
  SCPS_PREP_GROW(gains)
  SCPS_PREP_GROW(gains_tmp)
  SCPS_PREP_GROW(out_rows)
  SCPS_PREP_GROW(out_samples)
  SCPS_PREP_GROW(out_gains)
  if (with_src) {
    SCPS_PREP_GROW(out_src)
  }
#undef SCPS_PREP_GROW
  st->cap = cap;
  return 0;
}

/* Per stack: gain mode, buffers, and where each feature's keys start (its
 * features in stack order, so the keys are in sample order). */
static int plan_stacks(scps_prep *p, scps_error *err) {
  const scps_layout *l = p->layout;
  for (int s = 0; s < p->n_stacks; s++) {
    const scps_stack_layout *sl = &l->stacks[s];
    prep_stack *st = &p->stacks[s];
    uint64_t total = 0;
    bool weighted = false, all_sum = true;
    for (int k = 0; k < sl->n_features; k++) {
      int f = sl->features[k];
      p->features[f].key_base = (size_t)total;
      total += p->inputs[f].n_ids;
      weighted |= p->inputs[f].weights != NULL;
      all_sum &= p->features[f].combiner == SCPS_COMBINER_SUM;
    }
    st->gain_mode = weighted  ? PREP_GAIN_PER_ENTRY
                    : all_sum ? PREP_GAIN_UNIT
                              : PREP_GAIN_PER_SAMPLE;
    if (total > UINT32_MAX)
      return scps_error_set(err, SCPS_EINVAL, "stack '%s': %llu ids in one batch exceed 2^32-1",
                            sl->name, (unsigned long long)total);
    if (reserve_stack(st, (size_t)total, p->opts.policy == SCPS_LIMIT_DROP) != 0)
      return scps_error_set(err, SCPS_ENOMEM, "stack '%s': cannot allocate buffers for %llu ids",
                            sl->name, (unsigned long long)total);
    st->n_keys = (size_t)total;
    st->run_max_ids = st->max_ids;
    st->run_max_unique = st->max_unique;
  }
  return 0;
}

static int finish_stats(scps_prep *p, scps_error *err) {
  size_t nsc = (size_t)p->n;
  int rc = 0;
  for (int s = 0; s < p->n_stacks; s++) {
    prep_stack *st = &p->stacks[s];
    scps_stack_stats *ss = &st->stats;
    for (size_t d = 0; d < nsc; d++) {
      int64_t mi = 0, mu = 0;
      for (size_t src = 0; src < nsc; src++) {
        int64_t a = st->part_ids[src * nsc + d], u = st->part_unique[src * nsc + d];
        mi = a > mi ? a : mi;
        mu = u > mu ? u : mu;
      }
      ss->max_ids_per_partition[d] = mi > INT32_MAX ? INT32_MAX : (int32_t)mi;
      ss->max_unique_ids_per_partition[d] = mu > INT32_MAX ? INT32_MAX : (int32_t)mu;
    }
    ss->id_drop_counter = 0;
    for (size_t src = 0; src < nsc; src++) {
      int64_t req = 0;
      for (size_t d = 0; d < nsc; d++)
        req += roundup8(st->part_ids[src * nsc + d]);
      ss->required_buffer_size_per_sc[src] = req;
      ss->id_drop_counter += st->dst_drops[src];
    }
    if (rc == 0 && p->opts.policy == SCPS_LIMIT_ERROR)
      rc = scps__prep_check_limits(p, s, err);
  }
  return rc;
}

/* Fails the run with feature f's error. */
static int fail_feature(scps_prep *p, int f, scps_error *err) {
  reset_outputs(p);
  if (err)
    *err = p->features[f].err;
  p->inputs = NULL;
  return p->features[f].rc;
}

/* Errors are reported as if each feature were checked whole, in feature
 * order, before the stacks are planned: a shape error or a plan error first
 * looks for an id or weight error in the features before it. */
int scps__prep_run(scps_prep *p, const scps_feature_input *inputs, scps_error *err) {
  if (!p || !inputs)
    return scps_error_set(err, SCPS_EINVAL, "scps__prep_run: %s is NULL", p ? "inputs" : "prep");
  p->inputs = inputs;
  scps__prep_pool_run(p, job_shape, p->n_features);
  for (int f = 0; f < p->n_features; f++) {
    if (p->features[f].rc != 0) {
      for (int e = 0; e < f; e++)
        if (validate_ids(p, e) != 0)
          return fail_feature(p, e, err);
      return fail_feature(p, f, err);
    }
  }
  int rc = plan_stacks(p, err);
  if (rc != 0) {
    for (int f = 0; f < p->n_features; f++)
      if (validate_ids(p, f) != 0)
        return fail_feature(p, f, err);
    reset_outputs(p);
    p->inputs = NULL;
    return rc;
  }
  scps__prep_pool_run(p, job_keys, p->n_features);
  for (int f = 0; f < p->n_features; f++)
    if (p->features[f].rc != 0)
      return fail_feature(p, f, err);
  scps__prep_pool_run(p, job_sort, p->n_stacks);
  scps__prep_pool_run(p, job_partition, p->n_stacks * p->n);
  p->inputs = NULL;
  rc = scps__prep_check_gains(p, err);
  if (rc != 0) {
    reset_outputs(p);
    return rc;
  }
  return finish_stats(p, err);
}

/* ---- create / destroy ---- */

static int thread_init(scps_prep *p, prep_thread *t) {
  size_t nsc = (size_t)p->n;
  t->p = p;
  t->cnt = calloc(nsc, sizeof *t->cnt);
  t->kept_ids = calloc(nsc, sizeof *t->kept_ids);
  t->kept_uniq = calloc(nsc, sizeof *t->kept_uniq);
  t->last_row = calloc(nsc, sizeof *t->last_row);
  t->radix = malloc(sizeof *t->radix);
  return t->cnt && t->kept_ids && t->kept_uniq && t->last_row && t->radix ? 0 : SCPS_ENOMEM;
}

static int stack_init(scps_prep *p, int s, scps_error *err) {
  const scps_layout *l = p->layout;
  const scps_stack_layout *sl = &l->stacks[s];
  prep_stack *st = &p->stacks[s];
  size_t nsc = (size_t)p->n;
  if (sl->total_sample_count <= 0 || sl->total_sample_count > (int64_t)UINT32_MAX)
    return scps_error_set(err, SCPS_ERANGE, "stack '%s': total_sample_count %lld outside [1, 2^32)",
                          sl->name, (long long)sl->total_sample_count);
  if (sl->rows_per_sc <= 0 || sl->rows_per_sc > (int64_t)UINT32_MAX)
    return scps_error_set(err, SCPS_ERANGE, "stack '%s': rows_per_sc %lld outside [1, 2^32)",
                          sl->name, (long long)sl->rows_per_sc);
  st->total_samples = (uint32_t)sl->total_sample_count;
  st->sample_bits = bits_for(st->total_samples - 1);
  st->src_bits = bits_for((uint64_t)p->n - 1);
  st->max_ids = sl->max_ids_per_partition;
  st->max_unique = sl->max_unique_ids_per_partition;
  st->sample_src = calloc(st->total_samples, sizeof *st->sample_src);
  st->sample_gain = calloc(st->total_samples, sizeof *st->sample_gain);
  st->bucket_off = calloc(nsc, sizeof *st->bucket_off);
  st->bucket_n = calloc(nsc, sizeof *st->bucket_n);
  st->part_ids = calloc(nsc * nsc, sizeof *st->part_ids);
  st->part_unique = calloc(nsc * nsc, sizeof *st->part_unique);
  st->dst_drops = calloc(nsc, sizeof *st->dst_drops);
  st->gain_exceptions = calloc(nsc, sizeof *st->gain_exceptions);
  st->bad_gain = calloc(nsc, sizeof *st->bad_gain);
  st->coo = calloc(nsc, sizeof *st->coo);
  st->stats.num_sc = p->n;
  st->stats.max_ids_per_partition = calloc(nsc, sizeof(int32_t));
  st->stats.max_unique_ids_per_partition = calloc(nsc, sizeof(int32_t));
  st->stats.required_buffer_size_per_sc = calloc(nsc, sizeof(int64_t));
  if (!st->sample_src || !st->sample_gain || !st->bucket_off || !st->bucket_n || !st->part_ids || !st->part_unique ||
      !st->dst_drops || !st->gain_exceptions || !st->bad_gain || !st->coo || !st->stats.max_ids_per_partition ||
      !st->stats.max_unique_ids_per_partition || !st->stats.required_buffer_size_per_sc)
    return scps_error_set(err, SCPS_ENOMEM, "stack '%s': out of memory", sl->name);

  /* Buckets come out sample-ordered only if the features tile the sample
   * space in stack order; otherwise the sort must look at the sample bits. */
  bool ordered = true;
  int64_t next = 0;
  for (int k = 0; k < sl->n_features; k++) {
    int f = sl->features[k];
    int64_t off = l->features[f].sample_offset, b = l->feature_specs[f].batch_size;
    if (off < 0 || b <= 0 || off + b > sl->total_sample_count)
      return scps_error_set(err, SCPS_EINTERNAL,
                            "stack '%s': feature '%s' samples [%lld, %lld) outside the stack's %lld",
                            sl->name, l->feature_specs[f].name, (long long)off,
                            (long long)(off + b), (long long)sl->total_sample_count);
    ordered &= off >= next;
    next = off + b;
    for (int64_t r = 0; r < b; r++)
      st->sample_src[off + r] = (uint32_t)(r * p->n / b);
  }
  st->rows_by_run = true;
  for (int k = 0; k < sl->n_features; k++)
    for (int j = 0; j < k; j++)
      st->rows_by_run &= l->features[sl->features[j]].table != l->features[sl->features[k]].table;
  unsigned row_bits = bits_for((uint64_t)sl->rows_per_sc - 1);
  st->sort_hi = row_bits + st->sample_bits + st->src_bits;
  st->sort_lo = ordered ? st->sample_bits + st->src_bits : 0;
  st->dst_bits = st->src_bits;
  st->dst_shift = p->n > 1 ? st->sort_hi : 0;
  if (st->sort_hi + st->dst_bits > 64)
    return scps_error_set(err, SCPS_ERANGE,
                          "stack '%s': %u row bits + %u sample bits + 2 x %u SparseCore bits "
                          "exceed a 64-bit sort key",
                          sl->name, row_bits, st->sample_bits, st->src_bits);
  return 0;
}

int scps__prep_create(const scps_layout *layout, const scps_prep_options *opts, scps_prep **out,
                     scps_error *err) {
  if (!layout || !out)
    return scps_error_set(err, SCPS_EINVAL, "scps__prep_create: %s is NULL",
                          layout ? "out" : "layout");
  *out = NULL;
  scps_prep_options o = {.policy = SCPS_LIMIT_ERROR, .threads = 1};
  if (opts)
    o = *opts;
  if (o.policy != SCPS_LIMIT_ERROR && o.policy != SCPS_LIMIT_DROP)
    return scps_error_set(err, SCPS_EINVAL, "prep options: unknown limit policy %d",
                          (int)o.policy);
  if (o.threads < 0 || o.threads > SCPS_PREP_MAX_THREADS)
    return scps_error_set(err, SCPS_EINVAL, "prep options: threads %d outside [0, %d]", o.threads,
                          SCPS_PREP_MAX_THREADS);
  if (o.threads == 0)
    o.threads = 1;
  if (layout->num_sc <= 0)
    return scps_error_set(err, SCPS_EINVAL, "layout: num_sc %d", layout->num_sc);

  scps_prep *p = calloc(1, sizeof *p);
  if (!p)
    return scps_error_set(err, SCPS_ENOMEM, "scps__prep_create: out of memory");
  p->layout = layout;
  p->n = layout->num_sc;
  p->pow2 = (p->n & (p->n - 1)) == 0;
  p->sc_mask = (uint64_t)p->n - 1;
  p->sc_shift = bits_for(p->sc_mask);
  p->opts = o;
  p->n_features = layout->n_features;
  p->n_stacks = layout->n_stacks;
  int rc = 0;
  p->features = calloc((size_t)p->n_features + 1, sizeof *p->features);
  p->stacks = calloc((size_t)p->n_stacks + 1, sizeof *p->stacks);
  p->threads = calloc((size_t)o.threads, sizeof *p->threads);
  if (!p->features || !p->stacks || !p->threads) {
    rc = scps_error_set(err, SCPS_ENOMEM, "scps__prep_create: out of memory");
    goto fail;
  }
  p->n_threads = o.threads;
  for (int f = 0; f < p->n_features; f++) {
    prep_feature *pf = &p->features[f];
    const scps_feature_spec *fs = &layout->feature_specs[f];
    int t = layout->features[f].table;
    pf->stack = layout->features[f].stack;
    pf->batch = fs->batch_size;
    pf->spec_valency = fs->valency;
    pf->vocab = (uint64_t)layout->table_specs[t].vocabulary_size;
    pf->sample_offset = (uint64_t)layout->features[f].sample_offset;
    pf->rotation = layout->tables[t].shard_rotation;
    pf->row_offset = (uint64_t)layout->tables[t].row_offset_in_shard;
    pf->combiner = layout->table_specs[t].combiner;
    if (pf->batch <= 0) {
      rc = scps_error_set(err, SCPS_EINVAL, "feature '%s': batch_size %lld", fs->name,
                          (long long)pf->batch);
      goto fail;
    }
    pf->offs_scratch = malloc((size_t)(pf->batch + 1) * sizeof *pf->offs_scratch);
    if (!pf->offs_scratch) {
      rc = scps_error_set(err, SCPS_ENOMEM, "feature '%s': out of memory", fs->name);
      goto fail;
    }
  }
  for (int s = 0; s < p->n_stacks; s++) {
    rc = stack_init(p, s, err);
    if (rc != 0)
      goto fail;
  }
  for (int i = 0; i < p->n_threads; i++) {
    if (thread_init(p, &p->threads[i]) != 0) {
      rc = scps_error_set(err, SCPS_ENOMEM, "scps__prep_create: out of memory");
      goto fail;
    }
  }
  if ((rc = scps__prep_pool_start(p, err)) != 0)
    goto fail;
  *out = p;
  return 0;
fail:
  scps__prep_destroy(p);
  return rc;
}

void scps__prep_destroy(scps_prep *p) {
  if (!p)
    return;
  scps__prep_pool_stop(p);
  if (p->threads) {
    for (int i = 0; i < p->n_threads; i++) {
      prep_thread *t = &p->threads[i];
      free(t->cnt);
      free(t->kept_ids);
      free(t->kept_uniq);
      free(t->last_row);
      free(t->radix);
    }
  }
  if (p->features)
    for (int f = 0; f < p->n_features; f++)
      free(p->features[f].offs_scratch);
  if (p->stacks) {
    for (int s = 0; s < p->n_stacks; s++) {
      prep_stack *st = &p->stacks[s];
      free(st->sample_src);
      free(st->sample_gain);
      free(st->keys);
      free(st->keys_tmp);
      free(st->gains);
      free(st->gains_tmp);
      free(st->out_rows);
      free(st->out_samples);
      free(st->out_gains);
      free(st->out_src);
      free(st->bucket_off);
      free(st->bucket_n);
      free(st->part_ids);
      free(st->part_unique);
      free(st->dst_drops);
      free(st->gain_exceptions);
      free(st->bad_gain);
      free(st->coo);
      free(st->stats.max_ids_per_partition);
      free(st->stats.max_unique_ids_per_partition);
      free(st->stats.required_buffer_size_per_sc);
    }
  }
  free(p->threads);
  free(p->features);
  free(p->stacks);
  free(p);
}

/* ---- accessors ---- */

const scps_coo *scps__prep_coo(const scps_prep *p, int stack, int32_t sc) {
  if (!p || stack < 0 || stack >= p->n_stacks || sc < 0 || sc >= p->n)
    return NULL;
  return &p->stacks[stack].coo[sc];
}

size_t scps__prep_gain_exceptions(const scps_prep *p, int stack, int32_t sc) {
  if (!p || stack < 0 || stack >= p->n_stacks || sc < 0 || sc >= p->n) return 0;
  return p->stacks[stack].gain_exceptions[sc];
}

const scps_stack_stats *scps__prep_stats(const scps_prep *p, int stack) {
  if (!p || stack < 0 || stack >= p->n_stacks)
    return NULL;
  return &p->stacks[stack].stats;
}

int scps__prep_set_limits(scps_prep *p, int stack, int32_t max_ids, int32_t max_unique_ids,
                         scps_error *err) {
  if (!p || stack < 0 || stack >= p->n_stacks)
    return scps_error_set(err, SCPS_ERANGE, "set_limits: stack index %d outside [0, %d)", stack,
                          p ? p->n_stacks : 0);
  const char *name = p->layout->stacks[stack].name;
  if (max_ids < 1)
    return scps_error_set(err, SCPS_EINVAL, "stack '%s': max_ids_per_partition %d must be >= 1",
                          name, max_ids);
  if (max_unique_ids < 1)
    return scps_error_set(err, SCPS_EINVAL,
                          "stack '%s': max_unique_ids_per_partition %d must be >= 1", name,
                          max_unique_ids);
  p->stacks[stack].max_ids = max_ids;
  p->stacks[stack].max_unique = max_unique_ids;
  return 0;
}

void scps__prep_get_limits(const scps_prep *p, int stack, int32_t *max_ids, int32_t *max_unique_ids) {
  int32_t a = 0, u = 0;
  if (p && stack >= 0 && stack < p->n_stacks) {
    a = p->stacks[stack].max_ids;
    u = p->stacks[stack].max_unique;
  }
  if (max_ids)
    *max_ids = a;
  if (max_unique_ids)
    *max_unique_ids = u;
}
