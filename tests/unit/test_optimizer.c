/* test_optimizer: the fused optimizer kernels against a double-precision
 * reference of the equations in sparsecore-semantics.md section 2. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "scps_optimizer.h"
#include "scps_spec.h"
#include "scps_test.h"

#define ROWS 3
#define DIM 21 /* two blocks of 8 plus a tail of 5 */
#define STEPS 8
#define TOL 1e-5

static uint64_t rng_state;

static double rnd_uniform(double lo, double hi) {
  /* splitmix64 */
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return lo + (hi - lo) * ((double)(z >> 11) / 9007199254740992.0);
}

/* Double-precision reference: one row update written straight from the
 * reference table, independent of the kernel's host/device split. */
typedef struct ref_row {
  double w[DIM], s0[DIM], s1[DIM];
} ref_row;

static double ref_sign(double x) { return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0); }

static void ref_update(const scps_optimizer_spec *o, int64_t step, double lr, ref_row *r,
                       const double *g) {
  for (int i = 0; i < DIM; i++) {
    double *w = &r->w[i], *a = &r->s0[i], *b = &r->s1[i];
    const double gi = g[i];
    switch (o->type) {
    case SCPS_OPT_SGD:
      *w -= lr * gi;
      break;
    case SCPS_OPT_ADAGRAD:
      *a += gi * gi;
      *w -= lr * gi / sqrt(*a);
      break;
    case SCPS_OPT_ADAGRAD_MOMENTUM: {
      double k = o->momentum, b2 = o->beta2;
      *a = (b2 == 1.0) ? *a + gi * gi : b2 * *a + (1.0 - b2) * gi * gi;
      double s = pow(*a + o->epsilon, -1.0 / o->exponent) * gi;
      *b = k * *b + s; /* momentum slot */
      double u = o->use_nesterov ? k * *b + s : *b;
      *w -= lr * u;
      break;
    }
    case SCPS_OPT_ADAM: {
      double t = (double)step + 1.0;
      double c = sqrt(1.0 - pow(o->beta2, t));
      double alpha = lr * c / (1.0 - pow(o->beta1, t));
      double eps_hat = o->epsilon * c;
      *a += (1.0 - o->beta1) * (gi - *a); /* momentum */
      *b += (1.0 - o->beta2) * (gi * gi - *b); /* velocity */
      *w -= alpha * *a / (sqrt(*b) + eps_hat);
      break;
    }
    case SCPS_OPT_FTRL: {
      double k = o->learning_rate_power;
      double a_new = *a + gi * gi;
      double p_new = pow(a_new, -k);
      double dp = p_new - pow(*a, -k);
      bool mult = o->multiply_linear_by_learning_rate;
      if (mult)
        *b += lr * gi - dp * *w;
      else
        *b += gi - (dp / lr) * *w;
      double l1s = mult ? o->l1 * lr : o->l1;
      double L = *b, n;
      if (o->l1 == 0.0)
        n = -L;
      else
        n = fmin(fmax(L, -l1s), l1s) - L;
      *w = mult ? n / (p_new + 2.0 * lr * o->l2 + o->beta) : n / ((p_new + o->beta) / lr + 2.0 * o->l2);
      *a = a_new;
      break;
    }
    case SCPS_OPT_LAPROP: {
      double b1 = o->beta1, b2 = o->beta2, d;
      if (step < 0)
        d = b2; /* the reference's step=None */
      else
        d = b2 * (1.0 - pow(b2, (double)step)) / (1.0 - pow(b2, (double)step + 1.0));
      *b = d * *b + (1.0 - d) * (gi * gi + o->epsilon); /* nu */
      *a = b1 * *a + sqrt(1.0 - b1 * b1) * gi / sqrt(*b); /* mu */
      *w -= lr * *a;
      break;
    }
    case SCPS_OPT_F2A: {
      *b += 1.0; /* local_step */
      double gs = step < 1 ? 1.0 : (double)step;
      double f = fmin(pow(gs / *b, o->rho), o->max_lr_multiplier);
      *a += gi * gi;
      *w -= lr * (f * gi / sqrt(*a) + o->l1 * ref_sign(*w) + o->l2 * *w);
      break;
    }
    }
  }
}

static double rel_err(float got, double want) {
  double den = fabs(want) > 1e-3 ? fabs(want) : 1e-3;
  return fabs((double)got - want) / den;
}

/* Runs STEPS updates on ROWS rows (row r skips the steps where (step + r) % 3
 * == 2, so local counts and global steps differ) with random gradients, from
 * first_step on; lr_override < 0 uses the spec's rate. Checks rows and slots
 * after every step against the reference and returns the largest error.
 *
 * A float kernel can only match a double reference to 1e-5 (with the 1e-3
 * floor) where no value is a cancellation of O(1) terms, so the inputs are
 * conditioned: each column keeps one random sign for its gradients (|g| in
 * [0.2, 1]) and its weights start on the side the updates move away from.
 * Momenta, linear terms and weights then never pass near zero, and both signs
 * (both FTRL clamp sides, both F2A sign(w) values) appear across columns. */
static double run_case(const char *name, const scps_optimizer_spec *o, int64_t first_step,
                       double lr_override, uint64_t seed) {
  float w[ROWS][DIM], s0[ROWS][DIM], s1[ROWS][DIM], g[DIM];
  ref_row ref[ROWS];
  double gd[DIM];
  const int nslots = scps__optimizer_num_slots(o->type);
  double col_sign[DIM];
  rng_state = seed;
  for (int i = 0; i < DIM; i++)
    col_sign[i] = rnd_uniform(-1.0, 1.0) < 0 ? -1.0 : 1.0;
  for (int r = 0; r < ROWS; r++)
    for (int i = 0; i < DIM; i++) {
      w[r][i] = (float)(-col_sign[i] * rnd_uniform(0.2, 1.0));
      s0[r][i] = (float)scps__optimizer_slot_init(o, 0);
      s1[r][i] = (float)scps__optimizer_slot_init(o, 1);
      ref[r].w[i] = w[r][i];
      ref[r].s0[i] = s0[r][i];
      ref[r].s1[i] = s1[r][i];
    }
  double worst = 0.0;
  for (int64_t step = first_step; step < first_step + STEPS; step++) {
    scps_step s = {.step = step, .learning_rate = lr_override};
    scps_opt_step st;
    scps__optimizer_prepare(o, &s, &st);
    double lr = lr_override >= 0 ? lr_override : o->learning_rate;
    for (int r = 0; r < ROWS; r++) {
      if ((step + r) % 3 == 2)
        continue;
      for (int i = 0; i < DIM; i++) {
        g[i] = (float)(col_sign[i] * rnd_uniform(0.2, 1.0));
        gd[i] = g[i];
      }
      scps__optimizer_apply(&st, DIM, w[r], nslots > 0 ? s0[r] : NULL,
                           nslots > 1 ? s1[r] : NULL, g);
      ref_update(o, step, lr, &ref[r], gd);
      for (int i = 0; i < DIM; i++) {
        double e = rel_err(w[r][i], ref[r].w[i]);
        if (nslots > 0 && rel_err(s0[r][i], ref[r].s0[i]) > e)
          e = rel_err(s0[r][i], ref[r].s0[i]);
        if (nslots > 1 && rel_err(s1[r][i], ref[r].s1[i]) > e)
          e = rel_err(s1[r][i], ref[r].s1[i]);
        if (!(e <= worst))
          worst = e; /* NaN sticks */
        CHECKF(e <= TOL, "%s step %lld row %d col %d: w %.9g ref %.9g, slots %.9g/%.9g ref %.9g/%.9g",
               name, (long long)step, r, i, w[r][i], ref[r].w[i], s0[r][i], s1[r][i],
               ref[r].s0[i], ref[r].s1[i]);
      }
    }
  }
  printf("%-32s max rel err %.3g\n", name, worst);
  return worst;
}

static void test_all_optimizers(void) {
  scps_optimizer_spec o;
  const uint64_t seed = 12345;

  scps__optimizer_spec_init(&o, SCPS_OPT_SGD);
  run_case("sgd", &o, 0, -1, seed);
  run_case("sgd lr override 0.05", &o, 0, 0.05, seed);

  scps__optimizer_spec_init(&o, SCPS_OPT_ADAGRAD);
  o.learning_rate = 0.05;
  run_case("adagrad", &o, 0, -1, seed);

  scps__optimizer_spec_init(&o, SCPS_OPT_ADAGRAD_MOMENTUM);
  o.learning_rate = 0.05;
  run_case("adagrad_momentum", &o, 0, -1, seed);
  o.use_nesterov = true;
  run_case("adagrad_momentum nesterov", &o, 0, -1, seed);
  o.beta2 = 0.95;
  run_case("adagrad_momentum nesterov b2", &o, 0, -1, seed);
  o.use_nesterov = false;
  run_case("adagrad_momentum b2", &o, 0, -1, seed);
  o.exponent = 3.0;
  run_case("adagrad_momentum b2 exp3", &o, 0, -1, seed);
  o.beta2 = 1.0;
  o.use_nesterov = true;
  run_case("adagrad_momentum nesterov exp3", &o, 0, -1, seed);

  scps__optimizer_spec_init(&o, SCPS_OPT_ADAM);
  o.learning_rate = 0.05;
  run_case("adam", &o, 0, -1, seed);
  run_case("adam from step 100", &o, 100, -1, seed);

  for (int mult = 0; mult < 2; mult++)
    for (int l1 = 0; l1 < 2; l1++)
      for (int gen = 0; gen < 2; gen++) {
        char name[64];
        scps__optimizer_spec_init(&o, SCPS_OPT_FTRL);
        o.learning_rate = 0.1;
        o.multiply_linear_by_learning_rate = mult;
        o.l1 = l1 ? 0.3 : 0.0;
        o.l2 = 0.05;
        o.beta = 0.2;
        o.learning_rate_power = gen ? -0.3 : -0.5;
        snprintf(name, sizeof name, "ftrl mult_lr=%d l1=%g power=%g", mult, o.l1,
                 o.learning_rate_power);
        run_case(name, &o, 0, -1, seed);
      }
  scps__optimizer_spec_init(&o, SCPS_OPT_FTRL);
  o.multiply_linear_by_learning_rate = true;
  o.l1 = 0.3;
  run_case("ftrl mult_lr l1 lr override", &o, 0, 0.2, seed);

  scps__optimizer_spec_init(&o, SCPS_OPT_LAPROP);
  o.learning_rate = 0.05;
  run_case("laprop", &o, 0, -1, seed);
  run_case("laprop from step 50", &o, 50, -1, seed);

  scps__optimizer_spec_init(&o, SCPS_OPT_F2A);
  run_case("f2a", &o, 0, -1, seed);
  o.l1 = 0.01;
  o.l2 = 0.02;
  run_case("f2a l1 l2", &o, 5, -1, seed);
  o.rho = 0.7;
  run_case("f2a rho 0.7", &o, 5, -1, seed);
  o.max_lr_multiplier = 1.2;
  run_case("f2a max_lr_multiplier 1.2", &o, 5, -1, seed);
}

/* Hand-derived values from the reference formulas for the host-side constants,
 * and the special cases of step and learning rate. */
static void test_prepare(void) {
  scps_optimizer_spec o;
  scps_opt_step st;
  scps_step s = {.step = 0, .learning_rate = NAN};

  scps__optimizer_spec_init(&o, SCPS_OPT_SGD);
  scps__optimizer_prepare(&o, &s, &st);
  CHECK(st.lr == 0.001f);
  s.learning_rate = -1.0;
  scps__optimizer_prepare(&o, &s, &st);
  CHECK(st.lr == 0.001f);
  s.learning_rate = 0.0;
  scps__optimizer_prepare(&o, &s, &st);
  CHECK(st.lr == 0.0f);
  scps__optimizer_prepare(&o, NULL, &st);
  CHECK(st.lr == 0.001f);

  /* LaProp at step 0: d = b2(1-1)/(1-b2) = 0, so nu = g^2 + eps and, with
   * mu = 0, mu = sqrt(1 - b1^2) * sign(g); without a step d = b2. */
  scps__optimizer_spec_init(&o, SCPS_OPT_LAPROP);
  float w[8], mu[8], nu[8], g[8];
  for (int i = 0; i < 8; i++) {
    w[i] = 1.0f;
    mu[i] = nu[i] = 0.0f;
    g[i] = (i % 2 ? -1.0f : 1.0f) * (float)(i + 1);
  }
  s.step = 0;
  s.learning_rate = -1.0;
  scps__optimizer_prepare(&o, &s, &st);
  scps__optimizer_apply(&st, 8, w, mu, nu, g);
  const double c = sqrt(1.0 - 0.81);
  for (int i = 0; i < 8; i++) {
    CHECKF(fabs(mu[i] - (i % 2 ? -c : c)) < 1e-6, "mu[%d] = %g", i, mu[i]);
    CHECKF(fabs(nu[i] - (double)g[i] * g[i]) < 1e-5 * g[i] * g[i], "nu[%d] = %g", i, nu[i]);
    CHECKF(fabs(w[i] - (1.0 - 0.001 * (i % 2 ? -c : c))) < 1e-6, "w[%d] = %g", i, w[i]);
  }
  for (int i = 0; i < 8; i++) {
    mu[i] = 0.0f;
    nu[i] = 1.0f;
    g[i] = 0.0f;
  }
  scps__optimizer_prepare(&o, NULL, &st);
  scps__optimizer_apply(&st, 8, w, mu, nu, g);
  /* nu = b2 * 1 + (1 - b2) * eps */
  for (int i = 0; i < 8; i++)
    CHECKF(fabsf(nu[i] - 0.95f) < 1e-7f, "nu[%d] = %g without a step", i, nu[i]);

  /* Adam, step 0 (t = 1): alpha_1 = lr * sqrt(1 - b2) / (1 - b1), and the
   * first update moves w by alpha_1 * (1-b1) g / (sqrt(1-b2)|g| + eps*sqrt(1-b2))
   * = lr * g / (|g| + eps), i.e. lr * sign(g) up to eps. */
  scps__optimizer_spec_init(&o, SCPS_OPT_ADAM);
  float m[8], v[8];
  for (int i = 0; i < 8; i++) {
    w[i] = 0.0f;
    m[i] = v[i] = 0.0f;
    g[i] = (i % 2 ? -0.5f : 2.0f);
  }
  s.step = 0;
  scps__optimizer_prepare(&o, &s, &st);
  scps__optimizer_apply(&st, 8, w, m, v, g);
  for (int i = 0; i < 8; i++)
    CHECKF(fabs(w[i] - (i % 2 ? 0.001 : -0.001)) < 1e-8, "adam w[%d] = %.9g", i, w[i]);

  /* F2A at step 4 on a fresh row: f = sqrt(4/1) = 2, a = 0.1 + 1, and sign(0)
   * = 0 drops the l1 term for a zero weight. */
  scps__optimizer_spec_init(&o, SCPS_OPT_F2A);
  o.l1 = 0.5;
  o.l2 = 0.25;
  float acc[8], ls[8];
  for (int i = 0; i < 8; i++) {
    w[i] = (float)(i % 3) - 1.0f; /* -1, 0, 1, ... */
    acc[i] = 0.1f;
    ls[i] = 0.0f;
    g[i] = 1.0f;
  }
  s.step = 4;
  scps__optimizer_prepare(&o, &s, &st);
  scps__optimizer_apply(&st, 8, w, acc, ls, g);
  for (int i = 0; i < 8; i++) {
    double w0 = (double)(i % 3) - 1.0;
    double want = w0 - 0.01 * (2.0 / sqrt(1.1) + 0.5 * w0 + 0.25 * w0);
    CHECKF(fabs(w[i] - want) < 1e-6, "f2a w[%d] = %.9g, want %.9g", i, w[i], want);
    CHECK(ls[i] == 1.0f);
  }
}

/* A zero gradient leaves SGD and Adagrad rows (and the accumulator) bit-exact;
 * optimizers without a slot never touch the NULL slot pointers. */
static void test_zero_gradient_and_null_slots(void) {
  float w[DIM], w0[DIM], acc[DIM], acc0[DIM], g[DIM];
  scps_optimizer_spec o;
  scps_opt_step st;
  scps_step s = {.step = 3, .learning_rate = -1};
  rng_state = 99;
  for (int i = 0; i < DIM; i++) {
    w[i] = w0[i] = (float)rnd_uniform(-1, 1);
    acc[i] = acc0[i] = 0.1f;
    g[i] = 0.0f;
  }
  scps__optimizer_spec_init(&o, SCPS_OPT_SGD);
  scps__optimizer_prepare(&o, &s, &st);
  scps__optimizer_apply(&st, DIM, w, NULL, NULL, g);
  CHECK(memcmp(w, w0, sizeof w) == 0);

  scps__optimizer_spec_init(&o, SCPS_OPT_ADAGRAD);
  scps__optimizer_prepare(&o, &s, &st);
  scps__optimizer_apply(&st, DIM, w, acc, NULL, g);
  CHECK(memcmp(w, w0, sizeof w) == 0);
  CHECK(memcmp(acc, acc0, sizeof acc) == 0);

  /* A non-zero gradient does move them (the checks above can fail). */
  g[DIM - 1] = 1.0f;
  scps__optimizer_apply(&st, DIM, w, acc, NULL, g);
  CHECK(w[DIM - 1] != w0[DIM - 1] && acc[DIM - 1] == 1.1f);
  CHECK(memcmp(w, w0, (DIM - 1) * sizeof(float)) == 0);

  /* dim 0 touches nothing even with a gradient. */
  scps__optimizer_spec_init(&o, SCPS_OPT_SGD);
  scps__optimizer_prepare(&o, &s, &st);
  memcpy(w0, w, sizeof w);
  g[0] = 1.0f;
  scps__optimizer_apply(&st, 0, w, NULL, NULL, g);
  CHECK(memcmp(w, w0, sizeof w) == 0);
}

/* One random value for the bounds test: within [lo, mag] (lo >= 0) or
 * [-mag, mag], often at an end, sometimes subnormal or 0. */
static float bounded_value(double mag, double lo) {
  const double u = rnd_uniform(0, 1);
  double v = u < 0.25 ? mag : u < 0.35 ? 1e-40 : u < 0.4 ? 0.0 : rnd_uniform(0, mag);
  if (lo >= 0) return (float)(v < lo ? lo : v);
  return (float)(rnd_uniform(0, 1) < 0.5 ? -v : v);
}

/* scps__optimizer_update_bounded is sound: wherever it proves an update
 * finite for random bounds (magnitudes from 2^-10 to 2^105, learning rates
 * up to float32's largest, gradients up to 2^60, hyper-parameters of every
 * kind), rows and slots drawn within those bounds, often at their ends,
 * update to finite values; and it proves ordinary training (values and
 * gradients near 1) for every optimizer, so that ordinary pushes are
 * never computed twice. */
static void test_update_bounds(void) {
  typedef struct variant {
    scps_optimizer_type type;
    const char *what;
    bool pos0, pos1; /* slot k must hold values >= 0 (accumulators, velocities, steps) */
  } variant;
  static const variant variants[] = {
      {SCPS_OPT_SGD, "sgd", false, false},
      {SCPS_OPT_ADAGRAD, "adagrad", true, false},
      {SCPS_OPT_ADAGRAD_MOMENTUM, "adagrad_momentum", true, false},
      {SCPS_OPT_ADAGRAD_MOMENTUM, "adagrad_momentum nesterov exponent 3 beta2 0.9", true, false},
      {SCPS_OPT_ADAM, "adam", false, true},
      {SCPS_OPT_FTRL, "ftrl", true, false},
      {SCPS_OPT_FTRL, "ftrl mult_lr l1 power -0.3", true, false},
      {SCPS_OPT_LAPROP, "laprop", false, true},
      {SCPS_OPT_F2A, "f2a", true, true},
      {SCPS_OPT_F2A, "f2a rho 0.7 l1 l2", true, true},
  };
  rng_state = 4242;
  for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
    const variant *x = &variants[v];
    scps_optimizer_spec o;
    scps__optimizer_spec_init(&o, x->type);
    if (strstr(x->what, "nesterov")) {
      o.use_nesterov = true;
      o.exponent = 3.0;
      o.beta2 = 0.9;
    }
    if (strstr(x->what, "mult_lr")) {
      o.multiply_linear_by_learning_rate = true;
      o.l1 = 0.01;
      o.l2 = 0.02;
      o.learning_rate_power = -0.3;
    }
    if (strstr(x->what, "rho")) {
      o.rho = 0.7;
      o.l1 = 0.001;
      o.l2 = 0.002;
    }
    const int slots = scps__optimizer_num_slots(x->type);
    /* Ordinary training is proven. */
    scps_opt_step st;
    scps_step step = {.step = 10, .learning_rate = 0.05};
    scps__optimizer_prepare(&o, &step, &st);
    scps_value_bounds ordinary[3] = {{1.0, -1}, {2.0, x->pos0 ? 0.1 : -1}, {3.0, x->pos1 ? 0.0 : -1}};
    CHECKF(scps__optimizer_update_bounded(&st, ordinary, 1e4), "%s: ordinary training not proven finite", x->what);
    int proven = 0, wrong = 0, trials = 3000, floors_bad = 0, floors_kept = 0;
    for (int trial = 0; trial < trials; trial++) {
      step.step = (int64_t)rnd_uniform(0, 1000);
      step.learning_rate = fmin(pow(2.0, rnd_uniform(-30, 128)), 3.4e38);
      scps__optimizer_prepare(&o, &step, &st);
      scps_value_bounds b[3];
      for (int k = 0; k < 3; k++) {
        b[k].mag = pow(2.0, rnd_uniform(-10, 105));
        const bool pos = (k == 1 && x->pos0) || (k == 2 && x->pos1);
        b[k].lo = pos ? b[k].mag * pow(2.0, rnd_uniform(-140, 0)) : -1;
        if (pos && rnd_uniform(0, 1) < 0.2) b[k].lo = 0;
        /* Bounds are float32 values, as the engine keeps them. */
        b[k].mag = (double)(float)b[k].mag;
        float lo = (float)b[k].lo;
        if ((double)lo > b[k].lo) lo = nextafterf(lo, 0.0f);
        b[k].lo = pos ? (double)lo : -1;
      }
      const double G = pow(2.0, rnd_uniform(-70, 60));
      if (!scps__optimizer_update_bounded(&st, b, G)) continue;
      proven++;
      float w[DIM], s0[DIM], s1[DIM], g[DIM];
      for (int i = 0; i < DIM; i++) {
        w[i] = bounded_value(b[0].mag, -1);
        s0[i] = bounded_value(b[1].mag, b[1].lo);
        s1[i] = bounded_value(b[2].mag, b[2].lo);
        g[i] = bounded_value(G, -1);
      }
      scps__optimizer_apply(&st, DIM, w, slots > 0 ? s0 : NULL, slots > 1 ? s1 : NULL, g);
      bool finite = true;
      for (int i = 0; i < DIM; i++)
        finite &= isfinite(w[i]) && (slots < 1 || isfinite(s0[i])) && (slots < 2 || isfinite(s1[i]));
      /* The lower bounds the engine keeps for the slots hold after it. */
      const double floor0 = scps__optimizer_slot_floor(&st, 0, b[1].lo), floor1 = scps__optimizer_slot_floor(&st, 1, b[2].lo);
      for (int i = 0; i < DIM; i++) {
        floors_bad += slots > 0 && floor0 >= 0 && !((double)s0[i] >= floor0);
        floors_bad += slots > 1 && floor1 >= 0 && !((double)s1[i] >= floor1);
        floors_kept += (slots > 0 && floor0 >= 0) + (slots > 1 && floor1 >= 0);
      }
      if (!finite && wrong++ < 3)
        fprintf(stderr, "%s: proven finite but not: lr %g, W %g, S0 %g (>= %g), S1 %g (>= %g), G %g\n", x->what,
                step.learning_rate, b[0].mag, b[1].mag, b[1].lo, b[2].mag, b[2].lo, G);
    }
    CHECKF(wrong == 0, "%s: %d of %d proven updates were not finite", x->what, wrong, proven);
    CHECKF(floors_bad == 0 && (floors_kept > 0) == (x->pos0 || x->pos1), "%s: %d of %d slot values below their floor",
           x->what, floors_bad, floors_kept);
    CHECKF(proven > trials / 20 && proven < trials, "%s: %d of %d random cases proven (both kinds needed)", x->what,
           proven, trials);
  }
}

int main(void) {
  test_update_bounds();
  test_prepare();
  test_zero_gradient_and_null_slots();
  test_all_optimizers();
  return scps_test_finish("test_optimizer");
}
