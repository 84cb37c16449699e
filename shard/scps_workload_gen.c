#include "scps_workload_gen.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "scps_workload.h"

/* xoshiro256** (Blackman and Vigna): fast, 256 bits of state, passes BigCrush. */
typedef struct rng {
  uint64_t s[4];
} rng;

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t rng_next(rng *r) {
  uint64_t *s = r->s;
  uint64_t result = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

static inline uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* [0, 1) with 53 random bits. */
static inline double rng_u01(rng *r) { return (double)(rng_next(r) >> 11) * 0x1.0p-53; }

/* [0, n) by multiply-shift (Lemire); the bias, n / 2^64, is far below any
 * statistic a benchmark can see. */
static inline uint64_t rng_below(rng *r, uint64_t n) {
  return (uint64_t)(((unsigned __int128)rng_next(r) * n) >> 64);
}

/* Devroye's rejection sampler for Zipf(s) over 1, 2, 3, ... (Non-Uniform
 * Random Variate Generation, 1986, X.6.1): X = floor(U^(-1/a)) with a = s - 1,
 * T = (1 + 1/X)^a, accept when V X (T - 1) / (b - 1) <= T / b with b = 2^a,
 * that is when V <= acc(X) = (b - 1) / b * T / (X (T - 1)).
 * acc falls monotonically from acc(1) = 1 towards (b - 1) / (a b), so the
 * sampler looks acc up for small X, accepts any V below the limit (the
 * squeeze) and rejects any V above acc(ZIPF_TABLE) for large X, leaving the
 * exact test with its expm1/log1p to a band of width ~1/ZIPF_TABLE. */
#define ZIPF_TABLE 1024

typedef struct zipf_sampler {
  double neg_inv_a; /* -1 / a */
  double a, b;
  double squeeze;   /* (b - 1) / (a b) */
  double acc[ZIPF_TABLE + 2]; /* acc[x] for 1 <= x <= ZIPF_TABLE, then the squeeze */
} zipf_sampler;

static double zipf_acc(const zipf_sampler *z, double x) {
  /* T - 1 via expm1/log1p keeps X (T - 1) accurate for large X. */
  double tm1 = expm1(z->a * log1p(1.0 / x));
  return (z->b - 1.0) / z->b * (1.0 + tm1) / (x * tm1);
}

static void zipf_init(zipf_sampler *z, double s) {
  z->a = s - 1.0;
  z->neg_inv_a = -1.0 / z->a;
  z->b = exp2(z->a);
  z->squeeze = (z->b - 1.0) / (z->a * z->b);
  z->acc[0] = 0.0;
  for (int x = 1; x <= ZIPF_TABLE; x++) z->acc[x] = zipf_acc(z, x);
  z->acc[ZIPF_TABLE + 1] = z->squeeze;
}

/* From here on X is replaced by a uniform residue; see zipf_fill. */
#define ZIPF_HUGE_LOG2 50

/* Attempts are made in blocks: first the candidates of a whole block (the
 * libm calls, independent of each other so they overlap in the pipeline),
 * then their acceptance and folding. */
#define ZIPF_BLOCK 256

/* Fills ids[0, n) with Zipf draws folded into [0, vocab). Each attempt is
 * written to ids[i] and i advances only on acceptance; the outcome and the
 * fold are computed with selects and masks, not branches, because acceptance
 * is a coin flip the branch predictor cannot learn. */
static void zipf_fill(rng *rp, const zipf_sampler *z, int64_t vocab, int64_t *ids, size_t n) {
  rng r = *rp; /* a local copy stays in registers */
  const double huge = (double)((int64_t)1 << ZIPF_HUGE_LOG2);
  const double inv_vocab = 1.0 / (double)vocab;
  const double acc_last = z->acc[ZIPF_TABLE];
  double xs[ZIPF_BLOCK], vs[ZIPF_BLOCK];
  size_t i = 0;
  while (i < n) {
    /* About 1.4 attempts per id are needed; a short final block wastes less. */
    size_t left = n - i, m = left + left / 2 + 8;
    int block = m < ZIPF_BLOCK ? (int)m : ZIPF_BLOCK;
    for (int j = 0; j < block; j++) {
      double u = 1.0 - rng_u01(&r); /* (0, 1]: log(u) is finite */
      vs[j] = rng_u01(&r);
      xs[j] = exp(z->neg_inv_a * log(u));
    }
    for (int j = 0; j < block && i < n; j++) {
      double xr = xs[j], v = vs[j];
      /* For X >= 2^50 (up to +inf for tiny U) acc(X) equals its limit to
       * within 2^-50 and (X - 1) mod vocab is uniform to within vocab / 2^50
       * (vocabularies are at most 2^31), so a uniform residue stands in for
       * it rather than dropping that tail, which holds ~17% of the mass at
       * s = 1.05. Below 2^50 the quotient (X - 1) / vocab computed in double
       * has relative error under 2^-52, so it is never too large and at most
       * one too small (when vocab divides X - 1); one masked step corrects. */
      int64_t x = (int64_t)(xr < huge ? xr : huge); /* floor, as xr >= 1 */
      int is_huge = (int)(x >> ZIPF_HUGE_LOG2);
      double bound = z->acc[x <= ZIPF_TABLE ? x : ZIPF_TABLE + 1];
      if ((x > ZIPF_TABLE) & !is_huge & (v > bound) & (v <= acc_last))
        bound = zipf_acc(z, (double)x);
      int64_t k = x - 1;
      int64_t rem = k - (int64_t)((double)k * inv_vocab) * vocab;
      rem -= vocab;
      rem += vocab & (rem >> 63);
      if (is_huge) rem = (int64_t)rng_below(&r, (uint64_t)vocab);
      ids[i] = rem;
      i += v <= bound;
    }
  }
  *rp = r;
}

typedef struct gen_feature {
  rng r;
  uint64_t vocab;
  scps_feature_draw draw;
  int64_t *row_offsets; /* batch + 1 */
  int64_t *ids;         /* batch * valency_max */
  float *weights;       /* same, or NULL */
} gen_feature;

struct scps_workload_gen {
  int32_t batch_size;
  scps_id_distribution distribution;
  zipf_sampler zipf;
  int n_features;
  gen_feature *features;
  scps_feature_input *inputs;
};

int scps__workload_gen_create(const scps_workload *w, uint64_t seed, scps_workload_gen **out,
                             scps_error *err) {
  *out = NULL;
  if (w->batch_size <= 0 || w->n_features <= 0)
    return scps_error_set(err, SCPS_EINVAL, "workload '%s': batch_size %d, %d features", w->name,
                          w->batch_size, w->n_features);
  if (!w->has_ids)
    return scps_error_set(err, SCPS_EINVAL,
                          "workload '%s' has no \"ids\" section: generating batches needs one "
                          "(\"ids\": {\"distribution\": \"uniform\"} or \"zipf\" with an \"exponent\")",
                          w->name);
  /* Also bounds every vocabulary to 2^31, which the Zipf fold relies on. */
  int rc = scps__specs_validate(w->tables, w->n_tables, w->features, w->n_features, err);
  if (rc) return rc;
  if (w->distribution == SCPS_IDS_ZIPF &&
      !(w->exponent > 1.0 && w->exponent <= SCPS_WORKLOAD_ZIPF_EXPONENT_MAX))
    return scps_error_set(err, SCPS_EINVAL, "workload '%s': zipf exponent %g not in (1, %g]",
                          w->name, w->exponent, SCPS_WORKLOAD_ZIPF_EXPONENT_MAX);
  int64_t total = 0;
  for (int f = 0; f < w->n_features; f++) {
    const scps_feature_draw *d = &w->draws[f];
    if (d->valency_min < 0 || d->valency_min > d->valency_max ||
        d->valency_max > SCPS_WORKLOAD_VALENCY_MAX)
      return scps_error_set(err, SCPS_EINVAL, "feature '%s': valency range [%d, %d] is invalid",
                            w->features[f].name, d->valency_min, d->valency_max);
    total += (int64_t)w->batch_size * d->valency_max;
    if (total > SCPS_WORKLOAD_BATCH_IDS_MAX)
      return scps_error_set(err, SCPS_EINVAL,
                            "workload '%s': a batch may hold more than %lld ids (at feature '%s')",
                            w->name, (long long)SCPS_WORKLOAD_BATCH_IDS_MAX, w->features[f].name);
  }
  scps_workload_gen *g = calloc(1, sizeof *g);
  if (!g) return scps_error_set(err, SCPS_ENOMEM, "out of memory for a batch generator");
  g->batch_size = w->batch_size;
  g->distribution = w->distribution;
  if (w->distribution == SCPS_IDS_ZIPF) zipf_init(&g->zipf, w->exponent);
  g->n_features = w->n_features;
  g->features = calloc((size_t)w->n_features, sizeof *g->features);
  g->inputs = calloc((size_t)w->n_features, sizeof *g->inputs);
  if (!g->features || !g->inputs) goto nomem;
  for (int f = 0; f < w->n_features; f++) {
    gen_feature *gf = &g->features[f];
    int t = scps__find_table(w->tables, w->n_tables, w->features[f].table); /* validated */
    gf->vocab = (uint64_t)w->tables[t].vocabulary_size;
    gf->draw = w->draws[f];
    size_t cap = (size_t)w->batch_size * (size_t)gf->draw.valency_max;
    gf->row_offsets = calloc((size_t)w->batch_size + 1, sizeof *gf->row_offsets);
    gf->ids = malloc((cap ? cap : 1) * sizeof *gf->ids);
    if (gf->draw.weighted) gf->weights = malloc((cap ? cap : 1) * sizeof *gf->weights);
    if (!gf->row_offsets || !gf->ids || (gf->draw.weighted && !gf->weights)) goto nomem;
    /* Chain the three inputs through the splitmix64 finaliser so nearby
     * seeds and feature indices still give unrelated streams. */
    uint64_t x = w->seed;
    x = splitmix64(&x) ^ seed;
    x = splitmix64(&x) ^ (uint64_t)f;
    for (int i = 0; i < 4; i++) gf->r.s[i] = splitmix64(&x);
    scps_feature_input *in = &g->inputs[f];
    in->form = SCPS_INPUT_RAGGED;
    in->n_ids = 0;
    in->ids = gf->ids;
    in->weights = gf->weights;
    in->row_offsets = gf->row_offsets;
  }
  *out = g;
  return 0;
nomem:
  scps__workload_gen_destroy(g);
  return scps_error_set(err, SCPS_ENOMEM, "out of memory for batch buffers of workload '%s'",
                        w->name);
}

void scps__workload_gen_destroy(scps_workload_gen *g) {
  if (!g) return;
  for (int f = 0; g->features && f < g->n_features; f++) {
    free(g->features[f].row_offsets);
    free(g->features[f].ids);
    free(g->features[f].weights);
  }
  free(g->features);
  free(g->inputs);
  free(g);
}

static void gen_feature_next(gen_feature *gf, int32_t batch, scps_id_distribution dist,
                             const zipf_sampler *z) {
  rng r = gf->r;
  int64_t *off = gf->row_offsets;
  int32_t lo = gf->draw.valency_min;
  uint64_t span = (uint64_t)(gf->draw.valency_max - lo) + 1;
  off[0] = 0;
  if (span == 1) {
    for (int32_t s = 0; s < batch; s++) off[s + 1] = off[s] + lo;
  } else {
    for (int32_t s = 0; s < batch; s++) off[s + 1] = off[s] + lo + (int64_t)rng_below(&r, span);
  }
  size_t n = (size_t)off[batch];
  int64_t *ids = gf->ids;
  uint64_t vocab = gf->vocab;
  if (dist == SCPS_IDS_ZIPF) {
    zipf_fill(&r, z, (int64_t)vocab, ids, n);
  } else {
    for (size_t i = 0; i < n; i++) ids[i] = (int64_t)rng_below(&r, vocab);
  }
  if (gf->weights) {
    /* 24 random bits + 1 over 2^24: uniform on (0, 1], exact in a float. */
    for (size_t i = 0; i < n; i++)
      gf->weights[i] = (float)((rng_next(&r) >> 40) + 1) * 0x1.0p-24f;
  }
  gf->r = r;
}

void scps__workload_gen_next(scps_workload_gen *g) {
  for (int f = 0; f < g->n_features; f++) {
    gen_feature *gf = &g->features[f];
    gen_feature_next(gf, g->batch_size, g->distribution, &g->zipf);
    g->inputs[f].n_ids = (size_t)gf->row_offsets[g->batch_size];
  }
}

const scps_feature_input *scps__workload_gen_inputs(const scps_workload_gen *g) {
  return g->inputs;
}
