/* scps_optimizer: host-side constants of each fused optimizer (prepare) and the
 * per-row float kernels that apply them (apply). */
#include "scps_optimizer.h"

#include <math.h>
#include <string.h>

/* Layout of scps_opt_step.p[] per type. Every constant the reference computes
 * on the host (or that is a pure function of hyper-parameters) is computed here
 * once in double and stored as float, so the element loops only do the
 * per-element float operations of the reference's row functions.
 *
 *   sgd, adagrad      lr only
 *   adagrad_momentum  p0 k, p1 accumulator decay, p2 weight of g^2, p3 epsilon,
 *                     p4 -1/exponent. beta2 == 1 stores (1, 1) in p1/p2 so the
 *                     one loop computes a + g^2 exactly.
 *   adam              p0 alpha_t, p1 1-beta_1, p2 1-beta_2, p3 epsilon-hat
 *   ftrl              p0 -learning_rate_power, p1 l1 scaled (l1 or l1*lr),
 *                     p2 2*l2 (or 2*lr*l2 with mult_lr), p3 beta
 *   laprop            p0 b1, p1 d, p2 1-d, p3 eps, p4 sqrt(1-b1^2)
 *   f2a               p0 rho, p1 l1, p2 l2, p3 max_lr_multiplier,
 *                     p4 max(step, 1)
 */
enum {
  OPT_FLAG_NESTEROV = 1 << 0, /* adagrad_momentum: use_nesterov */
  OPT_FLAG_SQRT = 1 << 1,     /* exponent 2, learning_rate_power -0.5 or rho 0.5 */
  OPT_FLAG_MULT_LR = 1 << 2,  /* ftrl: multiply_linear_by_learning_rate */
  OPT_FLAG_L1 = 1 << 3        /* ftrl: l1 != 0 */
};

#define OPT_INLINE static inline __attribute__((always_inline))

void scps__optimizer_prepare(const scps_optimizer_spec *o, const scps_step *s,
                            scps_opt_step *st) {
  memset(st, 0, sizeof(*st));
  st->type = o->type;
  /* NaN fails the comparison too, so it also selects the spec's rate. */
  double lr = (s && s->learning_rate >= 0.0) ? s->learning_rate : o->learning_rate;
  /* A negative step stands for the reference's step=None. */
  int64_t step = s ? s->step : -1;
  st->lr = (float)lr;

  switch (o->type) {
  case SCPS_OPT_SGD:
  case SCPS_OPT_ADAGRAD:
    break;
  case SCPS_OPT_ADAGRAD_MOMENTUM:
    st->p[0] = (float)o->momentum;
    if (o->beta2 == 1.0) {
      st->p[1] = 1.0f;
      st->p[2] = 1.0f;
    } else {
      st->p[1] = (float)o->beta2;
      st->p[2] = (float)(1.0 - o->beta2);
    }
    st->p[3] = (float)o->epsilon;
    st->p[4] = (float)(-1.0 / o->exponent);
    if (o->use_nesterov)
      st->flags |= OPT_FLAG_NESTEROV;
    if (o->exponent == 2.0)
      st->flags |= OPT_FLAG_SQRT;
    break;
  case SCPS_OPT_ADAM: {
    /* The reference treats step=None as step 0, so t is at least 1. */
    double t = (double)(step < 0 ? 0 : step) + 1.0;
    double c = sqrt(1.0 - pow(o->beta2, t));
    st->p[0] = (float)(lr * c / (1.0 - pow(o->beta1, t)));
    st->p[1] = (float)(1.0 - o->beta1);
    st->p[2] = (float)(1.0 - o->beta2);
    st->p[3] = (float)(o->epsilon * c);
    break;
  }
  case SCPS_OPT_FTRL:
    st->p[0] = (float)(-o->learning_rate_power);
    st->p[1] = (float)(o->multiply_linear_by_learning_rate ? o->l1 * lr : o->l1);
    st->p[2] = (float)(o->multiply_linear_by_learning_rate ? 2.0 * lr * o->l2 : 2.0 * o->l2);
    st->p[3] = (float)o->beta;
    if (o->learning_rate_power == -0.5)
      st->flags |= OPT_FLAG_SQRT;
    if (o->multiply_linear_by_learning_rate)
      st->flags |= OPT_FLAG_MULT_LR;
    if (o->l1 != 0.0)
      st->flags |= OPT_FLAG_L1;
    break;
  case SCPS_OPT_LAPROP: {
    /* t is the step itself (0-based): LaPropOptimizerSpec.get_decay_rate(step)
     * computes b2(1-b2^step)/(1-b2^(step+1)), so the first update (step 0) has
     * d = 0 and nu starts at g^2+eps, the bias-corrected average. */
    double b2 = o->beta2;
    double d = b2;
    if (step >= 0) {
      double t = (double)step;
      d = b2 * (1.0 - pow(b2, t)) / (1.0 - pow(b2, t + 1.0));
    }
    st->p[0] = (float)o->beta1;
    st->p[1] = (float)d;
    st->p[2] = (float)(1.0 - d);
    st->p[3] = (float)o->epsilon;
    st->p[4] = (float)sqrt(1.0 - o->beta1 * o->beta1);
    break;
  }
  case SCPS_OPT_F2A:
    st->p[0] = (float)o->rho;
    st->p[1] = (float)o->l1;
    st->p[2] = (float)o->l2;
    st->p[3] = (float)o->max_lr_multiplier;
    st->p[4] = (float)(step < 1 ? 1 : step);
    if (o->rho == 0.5)
      st->flags |= OPT_FLAG_SQRT;
    break;
  }
}

/* The rows the engine updates have padded dims (multiples of 8), so each kernel
 * runs over fixed blocks of OPT_BLOCK elements, which GCC vectorises even under
 * -O2's very-cheap cost model (it will not vectorise a loop of unknown trip
 * count there), plus one scalar tail for other dims. SPAN(i0, n, args...)
 * updates elements [i0, i0+n); it is always_inline so n is a constant in the
 * block loop and any flag arguments are constants in each specialisation.
 * Loops calling sqrtf vectorise only when the build has -fno-math-errno (with
 * errno semantics GCC keeps a guarded libm call per element); powf loops never
 * do, which is why the common exponents take the sqrtf paths. */
#define OPT_BLOCK 8
#define OPT_FOR_BLOCKS(dim, SPAN, ...)                                                   \
  do {                                                                                   \
    int32_t i0_ = 0;                                                                     \
    for (; i0_ + OPT_BLOCK <= (dim); i0_ += OPT_BLOCK)                                   \
      SPAN(i0_, OPT_BLOCK, __VA_ARGS__);                                                 \
    SPAN(i0_, (dim) - i0_, __VA_ARGS__);                                                 \
  } while (0)

OPT_INLINE void sgd_span(int32_t i0, int32_t n, const scps_opt_step *st, float *restrict w,
                         const float *restrict g) {
  const float lr = st->lr;
  for (int32_t i = i0; i < i0 + n; i++)
    w[i] -= lr * g[i];
}

OPT_INLINE void adagrad_span(int32_t i0, int32_t n, const scps_opt_step *st,
                             float *restrict w, float *restrict acc,
                             const float *restrict g) {
  const float lr = st->lr;
  for (int32_t i = i0; i < i0 + n; i++) {
    float a = acc[i] + g[i] * g[i];
    acc[i] = a;
    w[i] -= lr * g[i] / sqrtf(a);
  }
}

OPT_INLINE void adagrad_momentum_span(int32_t i0, int32_t n, const scps_opt_step *st,
                                      float *restrict w, float *restrict acc,
                                      float *restrict mom, const float *restrict g,
                                      const int nesterov, const int use_sqrt) {
  const float lr = st->lr, k = st->p[0], decay = st->p[1], gw = st->p[2];
  const float eps = st->p[3], neg_inv_exp = st->p[4];
  for (int32_t i = i0; i < i0 + n; i++) {
    float a = decay * acc[i] + gw * (g[i] * g[i]);
    float s = use_sqrt ? g[i] / sqrtf(a + eps) : powf(a + eps, neg_inv_exp) * g[i];
    float m = k * mom[i] + s;
    float u = nesterov ? k * m + s : m;
    acc[i] = a;
    mom[i] = m;
    w[i] -= lr * u;
  }
}

static void apply_adagrad_momentum(const scps_opt_step *st, int32_t dim, float *restrict w,
                                   float *restrict acc, float *restrict mom,
                                   const float *restrict g) {
  switch (st->flags & (OPT_FLAG_NESTEROV | OPT_FLAG_SQRT)) {
  case OPT_FLAG_SQRT:
    OPT_FOR_BLOCKS(dim, adagrad_momentum_span, st, w, acc, mom, g, 0, 1);
    break;
  case OPT_FLAG_SQRT | OPT_FLAG_NESTEROV:
    OPT_FOR_BLOCKS(dim, adagrad_momentum_span, st, w, acc, mom, g, 1, 1);
    break;
  case OPT_FLAG_NESTEROV:
    OPT_FOR_BLOCKS(dim, adagrad_momentum_span, st, w, acc, mom, g, 1, 0);
    break;
  default:
    OPT_FOR_BLOCKS(dim, adagrad_momentum_span, st, w, acc, mom, g, 0, 0);
    break;
  }
}

OPT_INLINE void adam_span(int32_t i0, int32_t n, const scps_opt_step *st, float *restrict w,
                          float *restrict mom, float *restrict vel, const float *restrict g) {
  const float alpha = st->p[0], omb1 = st->p[1], omb2 = st->p[2], eps_hat = st->p[3];
  for (int32_t i = i0; i < i0 + n; i++) {
    float m = mom[i] + omb1 * (g[i] - mom[i]);
    float v = vel[i] + omb2 * (g[i] * g[i] - vel[i]);
    mom[i] = m;
    vel[i] = v;
    w[i] -= alpha * m / (sqrtf(v) + eps_hat);
  }
}

OPT_INLINE void ftrl_span(int32_t i0, int32_t n, const scps_opt_step *st, float *restrict w,
                          float *restrict acc, float *restrict lin, const float *restrict g,
                          const int mult_lr, const int l1, const int use_sqrt) {
  const float lr = st->lr, neg_pow = st->p[0], l1s = st->p[1], l2s = st->p[2];
  const float beta = st->p[3];
  for (int32_t i = i0; i < i0 + n; i++) {
    float a_old = acc[i];
    float a_new = a_old + g[i] * g[i];
    float p_old = use_sqrt ? sqrtf(a_old) : powf(a_old, neg_pow);
    float p_new = use_sqrt ? sqrtf(a_new) : powf(a_new, neg_pow);
    float dp = p_new - p_old;
    float L = mult_lr ? (lin[i] + lr * g[i]) - dp * w[i] : (lin[i] + g[i]) - (dp / lr) * w[i];
    float clamped = L < -l1s ? -l1s : (L > l1s ? l1s : L);
    float num = l1 ? clamped - L : -L;
    float den = mult_lr ? (p_new + l2s) + beta : (p_new + beta) / lr + l2s;
    acc[i] = a_new;
    lin[i] = L;
    w[i] = num / den;
  }
}

static void apply_ftrl(const scps_opt_step *st, int32_t dim, float *restrict w,
                       float *restrict acc, float *restrict lin, const float *restrict g) {
  switch (st->flags & (OPT_FLAG_MULT_LR | OPT_FLAG_L1 | OPT_FLAG_SQRT)) {
  case OPT_FLAG_SQRT:
    OPT_FOR_BLOCKS(dim, ftrl_span, st, w, acc, lin, g, 0, 0, 1);
    break;
  case OPT_FLAG_SQRT | OPT_FLAG_L1:
    OPT_FOR_BLOCKS(dim, ftrl_span, st, w, acc, lin, g, 0, 1, 1);
    break;
  case OPT_FLAG_SQRT | OPT_FLAG_MULT_LR:
    OPT_FOR_BLOCKS(dim, ftrl_span, st, w, acc, lin, g, 1, 0, 1);
    break;
  case OPT_FLAG_SQRT | OPT_FLAG_MULT_LR | OPT_FLAG_L1:
    OPT_FOR_BLOCKS(dim, ftrl_span, st, w, acc, lin, g, 1, 1, 1);
    break;
  case OPT_FLAG_L1:
    OPT_FOR_BLOCKS(dim, ftrl_span, st, w, acc, lin, g, 0, 1, 0);
    break;
  case OPT_FLAG_MULT_LR:
    OPT_FOR_BLOCKS(dim, ftrl_span, st, w, acc, lin, g, 1, 0, 0);
    break;
  case OPT_FLAG_MULT_LR | OPT_FLAG_L1:
    OPT_FOR_BLOCKS(dim, ftrl_span, st, w, acc, lin, g, 1, 1, 0);
    break;
  default:
    OPT_FOR_BLOCKS(dim, ftrl_span, st, w, acc, lin, g, 0, 0, 0);
    break;
  }
}

OPT_INLINE void laprop_span(int32_t i0, int32_t n, const scps_opt_step *st,
                            float *restrict w, float *restrict mu, float *restrict nu,
                            const float *restrict g) {
  const float lr = st->lr, b1 = st->p[0], d = st->p[1], omd = st->p[2];
  const float eps = st->p[3], c = st->p[4];
  for (int32_t i = i0; i < i0 + n; i++) {
    float nv = nu[i] * d + omd * (g[i] * g[i] + eps);
    float m = b1 * mu[i] + c * (g[i] / sqrtf(nv));
    nu[i] = nv;
    mu[i] = m;
    w[i] -= lr * m;
  }
}

OPT_INLINE void f2a_span(int32_t i0, int32_t n, const scps_opt_step *st, float *restrict w,
                         float *restrict acc, float *restrict lstep, const float *restrict g,
                         const int use_sqrt) {
  const float lr = st->lr, rho = st->p[0], l1 = st->p[1], l2 = st->p[2];
  const float max_mult = st->p[3], gstep = st->p[4];
  for (int32_t i = i0; i < i0 + n; i++) {
    float ls = lstep[i] + 1.0f;
    float ratio = gstep / ls;
    float f = use_sqrt ? sqrtf(ratio) : powf(ratio, rho);
    f = f < max_mult ? f : max_mult;
    float a = acc[i] + g[i] * g[i];
    /* stablehlo.sign: +-1, and +-0 for +-0 (this form vectorises at -O2). */
    float sgn = copysignf((float)(w[i] != 0.0f), w[i]);
    float upd = g[i] * f / sqrtf(a) + (l1 * sgn + l2 * w[i]);
    lstep[i] = ls;
    acc[i] = a;
    w[i] -= lr * upd;
  }
}

void scps__optimizer_apply(const scps_opt_step *st, int32_t dim, float *restrict w,
                          float *restrict slot0, float *restrict slot1, const float *restrict g) {
  switch (st->type) {
  case SCPS_OPT_SGD:
    OPT_FOR_BLOCKS(dim, sgd_span, st, w, g);
    break;
  case SCPS_OPT_ADAGRAD:
    OPT_FOR_BLOCKS(dim, adagrad_span, st, w, slot0, g);
    break;
  case SCPS_OPT_ADAGRAD_MOMENTUM:
    apply_adagrad_momentum(st, dim, w, slot0, slot1, g);
    break;
  case SCPS_OPT_ADAM:
    OPT_FOR_BLOCKS(dim, adam_span, st, w, slot0, slot1, g);
    break;
  case SCPS_OPT_FTRL:
    apply_ftrl(st, dim, w, slot0, slot1, g);
    break;
  case SCPS_OPT_LAPROP:
    OPT_FOR_BLOCKS(dim, laprop_span, st, w, slot0, slot1, g);
    break;
  case SCPS_OPT_F2A:
    if (st->flags & OPT_FLAG_SQRT)
      OPT_FOR_BLOCKS(dim, f2a_span, st, w, slot0, slot1, g, 1);
    else
      OPT_FOR_BLOCKS(dim, f2a_span, st, w, slot0, slot1, g, 0);
    break;
  }
}

/* ---- bounds (scps__optimizer_update_bounded) ----
 * Each kernel above, operation by operation, with every operand replaced by
 * a bound on its magnitude, in double. A quantity at most BOUND_MAX stays
 * far from float32's range whatever rounding does to it (each float32
 * operation changes a value by at most a relative 2^-24, and these bounds
 * are products of a few of them); RND is that rounding, generously. */
#define BOUND_MAX 0x1p100
#define RND 1.01
/* Below this |g|, g * g may lose precision to float32's subnormals: a
 * ratio g / sqrt(a + g * g) is then bounded through a's lower bound
 * instead. */
#define G_TINY 1e-18

static bool small(double x) { return x <= BOUND_MAX; } /* false for NaN */

/* |g| / sqrtf(x) over the kernels' x >= c * g * g + lo (c > 0, lo > 0):
 * at most 1 / sqrt(c) where g * g is a normal float, else G_TINY / sqrt(lo). */
static double ratio_bound(double c, double lo) { return RND * (RND / sqrt(c) + G_TINY / sqrt(lo)); }

bool scps__optimizer_update_bounded(const scps_opt_step *st, const scps_value_bounds *b, double g_max) {
  const double G = g_max, W = b[0].mag, lr = st->lr;
  bool ok = small(G) && small(W) && small(lr) && lr >= 0 && small(G * G) && small(lr * G);
  for (int k = 0; k < 8; k++) ok &= small(fabs((double)st->p[k]));
  if (!ok) return false;
  switch (st->type) {
  case SCPS_OPT_SGD: return small(W + RND * lr * G);
  case SCPS_OPT_ADAGRAD: {
    /* a = acc + g^2 >= acc >= lo0 > 0 and >= g^2. */
    const double S0 = b[1].mag, lo0 = b[1].lo;
    if (!(lo0 > 0) || !small(S0 + G * G)) return false;
    return small(W + RND * lr * ratio_bound(1.0, lo0));
  }
  case SCPS_OPT_ADAGRAD_MOMENTUM: {
    const double S0 = b[1].mag, S1 = b[2].mag, lo0 = b[1].lo, k = fabs((double)st->p[0]);
    const double decay = st->p[1], eps = st->p[3], neg_inv_exp = st->p[4];
    /* a + eps >= eps + decay * acc, acc >= 0, and a <= acc + g^2. */
    const double low = (eps + decay * (lo0 > 0 ? lo0 : 0)) / RND;
    if (!(lo0 >= 0) || !(low > 0) || !small(S0 + G * G + eps)) return false;
    const bool use_sqrt = st->flags & OPT_FLAG_SQRT;
    const double s = RND * G * (use_sqrt ? 1.0 / sqrt(low) : pow(low, neg_inv_exp)) * RND;
    const double m = k * S1 + s, u = (st->flags & OPT_FLAG_NESTEROV) ? k * m + s : m;
    return small(s) && small(m) && small(u) && small(W + RND * lr * u);
  }
  case SCPS_OPT_ADAM: {
    /* v >= 0 while velocity >= 0; the division is by at least eps_hat. */
    const double S0 = b[1].mag, S1 = b[2].mag, lo1 = b[2].lo;
    const double alpha = fabs((double)st->p[0]), omb1 = fabs((double)st->p[1]), omb2 = fabs((double)st->p[2]);
    const double eps_hat = st->p[3];
    if (!(lo1 >= 0) || !(eps_hat > 0)) return false;
    const double m = S0 + omb1 * (G + S0), v = S1 + omb2 * (G * G + S1);
    return small(RND * m) && small(RND * v) && small(alpha * m) && small(W + RND * alpha * m / eps_hat);
  }
  case SCPS_OPT_FTRL: {
    /* a >= acc >= lo0 > 0, so p = a^-lrp lies in [lo0^-lrp, max(a, 1)^-lrp]
     * and the denominator is at least p (/ lr). */
    const double S0 = b[1].mag, S1 = b[2].mag, lo0 = b[1].lo, neg_pow = st->p[0];
    const double l1s = fabs((double)st->p[1]);
    if (!(lo0 > 0) || !(neg_pow >= 0) || !(lr > 0)) return false;
    const double A = S0 + G * G, P = RND * pow(A > 1 ? A : 1, neg_pow), P_min = pow(lo0, neg_pow) / RND;
    const bool mult_lr = st->flags & OPT_FLAG_MULT_LR;
    const double L = mult_lr ? S1 + lr * G + P * W : S1 + G + (P / lr) * W;
    const double den = mult_lr ? P_min : P_min / lr;
    return small(A) && small(P) && small(P / lr) && small(RND * L) && den > 0 && small(RND * (L + l1s) / den);
  }
  case SCPS_OPT_LAPROP: {
    /* nv >= omd * (g^2 + eps) while nu >= 0. */
    const double S0 = b[1].mag, S1 = b[2].mag, lo1 = b[2].lo;
    const double b1 = fabs((double)st->p[0]), d = fabs((double)st->p[1]), omd = st->p[2], eps = st->p[3];
    const double c = fabs((double)st->p[4]), low = omd * eps / RND;
    if (!(lo1 >= 0) || !(omd > 0) || !(low > 0)) return false;
    const double nv = d * S1 + omd * (G * G + eps), m = b1 * S0 + c * ratio_bound(omd, low);
    return small(RND * nv) && small(RND * m) && small(W + RND * lr * m);
  }
  case SCPS_OPT_F2A: {
    /* local_step >= 0, so the multiplier f lies in [0, max_lr_multiplier]. */
    const double S0 = b[1].mag, S1 = b[2].mag, lo0 = b[1].lo, lo1 = b[2].lo;
    const double l1 = fabs((double)st->p[1]), l2 = fabs((double)st->p[2]), mm = fabs((double)st->p[3]);
    if (!(lo0 > 0) || !(lo1 >= 0)) return false;
    const double upd = RND * mm * ratio_bound(1.0, lo0) + l1 + l2 * W;
    return small(S0 + G * G) && small(S1 + 1) && small(G * mm) && small(RND * upd) && small(W + RND * lr * upd);
  }
  }
  return false;
}

double scps__optimizer_slot_floor(const scps_opt_step *st, int slot, double lo) {
  if (!(lo >= 0)) return -1;
  switch (st->type) {
  case SCPS_OPT_ADAGRAD:
  case SCPS_OPT_FTRL: return slot == 0 ? lo : -1;   /* a + g^2 >= a; FTRL's linear is signed */
  case SCPS_OPT_F2A: return lo;                       /* a + g^2 >= a, local_step + 1 >= local_step */
  case SCPS_OPT_ADAGRAD_MOMENTUM:                     /* decay * a + gw * g^2 >= decay * a, rounded */
    return slot == 0 ? (double)st->p[1] * lo * (1.0 - 0x1p-22) : -1;
  case SCPS_OPT_ADAM:
  case SCPS_OPT_LAPROP: return slot == 1 ? 0.0 : -1; /* velocity and nu stay >= 0; moments are signed */
  default: return -1;
  }
}
