/* The example trainer's dense model: backward against finite differences,
 * Adam lowering the loss, BCE and AUC on hand-worked cases, and the planted
 * CTR data (labels follow the planted probabilities). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "scps_ctr.h"
#include "scps_mlp.h"
#include "scps_test.h"

#define B 6
#define IN 5

static double loss_of(scps_mlp *m, const float *x, const float *y) {
  float z[B];
  scps__mlp_forward(m, x, B, z);
  return scps__bce_with_logits(z, y, B, NULL);
}

static void test_gradients(void) {
  int32_t hidden[2] = {7, 4};
  scps_mlp *m;
  scps_error err;
  CHECK_OK(scps__mlp_create(IN, hidden, 2, B, 0.01, 3, &m, &err), &err);
  if (!m) return;
  float x[B * IN], y[B] = {1, 0, 1, 1, 0, 0}, z[B], dz[B], dx[B * IN];
  for (int i = 0; i < B * IN; i++) x[i] = sinf(1.7f * (float)i) * 0.8f;
  scps__mlp_forward(m, x, B, z);
  scps__bce_with_logits(z, y, B, dz);
  scps__mlp_backward(m, dz, B, dx);
  /* dLoss/dx by central differences in double-ish precision (float model). */
  double worst = 0;
  for (int i = 0; i < B * IN; i++) {
    float keep = x[i];
    const float h = 1e-2f;
    x[i] = keep + h;
    double up = loss_of(m, x, y);
    x[i] = keep - h;
    double down = loss_of(m, x, y);
    x[i] = keep;
    double fd = (up - down) / (2 * h);
    double e = fabs(fd - dx[i]) / fmax(fabs(fd), 1e-3);
    if (e > worst) worst = e;
  }
  CHECKF(worst < 2e-2, "dx differs from finite differences by %g (relative)", worst);
  /* A few Adam steps on one batch lower its loss. */
  double before = loss_of(m, x, y);
  for (int s = 0; s < 50; s++) {
    scps__mlp_forward(m, x, B, z);
    scps__bce_with_logits(z, y, B, dz);
    scps__mlp_backward(m, dz, B, dx);
    scps__mlp_step(m);
  }
  double after = loss_of(m, x, y);
  CHECKF(after < 0.5 * before, "loss %g -> %g after 50 steps", before, after);
  scps__mlp_destroy(m);
}

static void test_bce_auc(void) {
  float z[3] = {0, 2, -1}, y[3] = {1, 0, 0}, d[3];
  double l = scps__bce_with_logits(z, y, 3, d);
  double expect = (log(2.0) + (2 + log1p(exp(-2.0))) + log1p(exp(-1.0))) / 3;
  CHECKF(fabs(l - expect) < 1e-6, "bce %g expected %g", l, expect);
  CHECK(fabs(d[0] - (0.5 - 1) / 3) < 1e-6 && fabs(d[1] - (1 / (1 + exp(-2.0))) / 3) < 1e-6);
  float s[6] = {0.1f, 0.4f, 0.35f, 0.8f, 0.8f, 0.9f}, lab[6] = {0, 0, 1, 1, 0, 1};
  /* positives 0.35, 0.8, 0.9 vs negatives 0.1, 0.4, 0.8: pairs won 1 + 2.5 + 3 = 6.5 of 9 */
  CHECKF(fabs(scps__auc(s, lab, 6) - 6.5 / 9) < 1e-12, "auc %g", scps__auc(s, lab, 6));
  float one[2] = {1, 1};
  CHECK(scps__auc(s, one, 2) == 0.5);
  /* A diverged model's NaN score: NaN, not a scan that never ends. */
  s[2] = NAN;
  CHECK(isnan(scps__auc(s, lab, 6)));
}

static void test_ctr(void) {
  scps_workload *w;
  scps_error err;
  CHECK_OK(scps__workload_load(scps_test_shared_path("workloads/shared-tables.json"), &w, &err), &err);
  if (!w) return;
  scps_ctr *a, *b, *h;
  CHECK_OK(scps__ctr_create(w, 1, 1.5, &a, &err), &err);
  CHECK_OK(scps__ctr_create(w, 1, 1.5, &b, &err), &err);
  CHECK_OK(scps__ctr_create(w, 2, 1.5, &h, &err), &err);
  double clicks = 0, probs = 0, sq = 0, z_sum = 0, n = 0;
  int same = 1, differ = 0;
  for (int k = 0; k < 10; k++) {
    scps__ctr_next(a);
    scps__ctr_next(b);
    scps__ctr_next(h);
    int32_t bs = scps__ctr_batch_size(a);
    same &= !memcmp(scps__ctr_labels(a), scps__ctr_labels(b), sizeof(float) * (size_t)bs);
    differ += memcmp(scps__ctr_probs(a), scps__ctr_probs(h), sizeof(float) * (size_t)bs) != 0;
    for (int32_t r = 0; r < bs; r++) {
      double p = scps__ctr_probs(a)[r], z = log(p / (1 - p));
      clicks += scps__ctr_labels(a)[r];
      probs += p;
      z_sum += z;
      sq += z * z;
      n++;
    }
  }
  CHECK(same && differ == 10);
  /* Labels are Bernoulli(p): the click count stays within 5 sigma of sum p. */
  CHECKF(fabs(clicks - probs) < 5 * sqrt(probs), "%g clicks, expected %g", clicks, probs);
  double sd = sqrt(sq / n - (z_sum / n) * (z_sum / n));
  CHECKF(fabs(sd - 1.5) < 0.2, "planted logit stddev %g, asked 1.5", sd);
  scps__ctr_destroy(a);
  scps__ctr_destroy(b);
  scps__ctr_destroy(h);
  scps__workload_destroy(w);
}

int main(void) {
  test_gradients();
  test_bce_auc();
  test_ctr();
  return scps_test_finish("test_mlp");
}
