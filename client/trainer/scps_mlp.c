#include "scps_mlp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LAYERS 8

typedef struct layer {
  int32_t n_in, n_out;
  float *w, *b;       /* w: n_out x n_in */
  float *gw, *gb;     /* accumulated gradients */
  float *mw, *vw, *mb, *vb; /* Adam moments */
  float *out;         /* max_batch x n_out, after ReLU for hidden layers */
} layer;

struct scps_mlp {
  int n_layers;
  layer layers[MAX_LAYERS];
  int32_t max_batch;
  const float *x;     /* input of the last forward (borrowed) */
  float *delta[2];    /* backward scratch, max_batch x widest layer */
  double lr;
  int64_t t;
};

static uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void scps__mlp_destroy(scps_mlp *m) {
  if (!m) return;
  for (int i = 0; i < m->n_layers; i++) {
    layer *l = &m->layers[i];
    free(l->w); free(l->b); free(l->gw); free(l->gb);
    free(l->mw); free(l->vw); free(l->mb); free(l->vb); free(l->out);
  }
  free(m->delta[0]);
  free(m->delta[1]);
  free(m);
}

int scps__mlp_create(int32_t n_in, const int32_t *hidden, int n_hidden, int32_t max_batch, double lr,
                    uint64_t seed, scps_mlp **out, scps_error *err) {
  *out = NULL;
  if (n_in < 1 || n_hidden < 0 || n_hidden >= MAX_LAYERS || max_batch < 1)
    return scps_error_set(err, SCPS_EINVAL, "mlp: %d inputs, %d hidden layers (at most %d), batch %d", n_in,
                          n_hidden, MAX_LAYERS - 1, max_batch);
  scps_mlp *m = calloc(1, sizeof *m);
  if (!m) return scps_error_set(err, SCPS_ENOMEM, "mlp: out of memory");
  m->n_layers = n_hidden + 1;
  m->max_batch = max_batch;
  m->lr = lr;
  int32_t widest = n_in, prev = n_in;
  uint64_t s = seed;
  for (int i = 0; i < m->n_layers; i++) {
    layer *l = &m->layers[i];
    l->n_in = prev;
    l->n_out = i < n_hidden ? hidden[i] : 1;
    if (l->n_out < 1) {
      scps__mlp_destroy(m);
      return scps_error_set(err, SCPS_EINVAL, "mlp: hidden layer %d has width %d", i, l->n_out);
    }
    size_t nw = (size_t)l->n_in * (size_t)l->n_out, nb = (size_t)l->n_out;
    l->w = malloc(nw * sizeof(float));
    l->gw = calloc(nw, sizeof(float));
    l->mw = calloc(nw, sizeof(float));
    l->vw = calloc(nw, sizeof(float));
    l->b = calloc(nb, sizeof(float));
    l->gb = calloc(nb, sizeof(float));
    l->mb = calloc(nb, sizeof(float));
    l->vb = calloc(nb, sizeof(float));
    l->out = malloc((size_t)max_batch * nb * sizeof(float));
    if (!l->w || !l->gw || !l->mw || !l->vw || !l->b || !l->gb || !l->mb || !l->vb || !l->out) {
      scps__mlp_destroy(m);
      return scps_error_set(err, SCPS_ENOMEM, "mlp: out of memory");
    }
    /* He initialisation: uniform with the variance 2 / fan_in. */
    float a = sqrtf(6.0f / (float)l->n_in);
    for (size_t k = 0; k < nw; k++) {
      s = mix(s + 0x9e3779b97f4a7c15ull);
      l->w[k] = a * (float)(2.0 * ((double)(s >> 11) / 9007199254740992.0) - 1.0);
    }
    if (l->n_out > widest) widest = l->n_out;
    prev = l->n_out;
  }
  m->delta[0] = malloc((size_t)max_batch * (size_t)widest * sizeof(float));
  m->delta[1] = malloc((size_t)max_batch * (size_t)widest * sizeof(float));
  if (!m->delta[0] || !m->delta[1]) {
    scps__mlp_destroy(m);
    return scps_error_set(err, SCPS_ENOMEM, "mlp: out of memory");
  }
  *out = m;
  return 0;
}

void scps__mlp_forward(scps_mlp *m, const float *x, int32_t batch, float *logits) {
  m->x = x;
  const float *in = x;
  for (int i = 0; i < m->n_layers; i++) {
    layer *l = &m->layers[i];
    const int relu = i + 1 < m->n_layers;
    for (int32_t r = 0; r < batch; r++) {
      const float *restrict xi = in + (size_t)r * (size_t)l->n_in;
      float *restrict o = l->out + (size_t)r * (size_t)l->n_out;
      for (int32_t j = 0; j < l->n_out; j++) {
        const float *restrict wj = l->w + (size_t)j * (size_t)l->n_in;
        float acc = l->b[j];
        for (int32_t k = 0; k < l->n_in; k++) acc += wj[k] * xi[k];
        o[j] = relu && acc < 0 ? 0 : acc;
      }
    }
    in = l->out;
  }
  for (int32_t r = 0; r < batch; r++) logits[r] = m->layers[m->n_layers - 1].out[r];
}

void scps__mlp_backward(scps_mlp *m, const float *dlogits, int32_t batch, float *dx) {
  float *d = m->delta[0], *dn = m->delta[1];
  memcpy(d, dlogits, sizeof(float) * (size_t)batch);
  for (int i = m->n_layers - 1; i >= 0; i--) {
    layer *l = &m->layers[i];
    const float *in = i ? m->layers[i - 1].out : m->x;
    float *dprev = i ? dn : dx;
    memset(dprev, 0, sizeof(float) * (size_t)batch * (size_t)l->n_in);
    for (int32_t r = 0; r < batch; r++) {
      const float *restrict xi = in + (size_t)r * (size_t)l->n_in;
      float *restrict dp = dprev + (size_t)r * (size_t)l->n_in;
      for (int32_t j = 0; j < l->n_out; j++) {
        const float g = d[(size_t)r * (size_t)l->n_out + (size_t)j];
        if (g == 0) continue;
        float *restrict gw = l->gw + (size_t)j * (size_t)l->n_in;
        const float *restrict w = l->w + (size_t)j * (size_t)l->n_in;
        l->gb[j] += g;
        for (int32_t k = 0; k < l->n_in; k++) {
          gw[k] += g * xi[k];
          dp[k] += g * w[k];
        }
      }
    }
    if (i) {
      /* Through the previous layer's ReLU: zero where its output was zero. */
      const float *prev_out = m->layers[i - 1].out;
      size_t n = (size_t)batch * (size_t)l->n_in;
      for (size_t k = 0; k < n; k++) dprev[k] = prev_out[k] > 0 ? dprev[k] : 0;
      float *t = d;
      d = dn;
      dn = t;
    }
  }
}

static void adam(float *w, float *g, float *mo, float *v, size_t n, float alpha) {
  const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
  for (size_t k = 0; k < n; k++) {
    mo[k] = b1 * mo[k] + (1 - b1) * g[k];
    v[k] = b2 * v[k] + (1 - b2) * g[k] * g[k];
    w[k] -= alpha * mo[k] / (sqrtf(v[k]) + eps);
    g[k] = 0;
  }
}

void scps__mlp_step(scps_mlp *m) {
  m->t++;
  double c = sqrt(1 - pow(0.999, (double)m->t)) / (1 - pow(0.9, (double)m->t));
  float alpha = (float)(m->lr * c);
  for (int i = 0; i < m->n_layers; i++) {
    layer *l = &m->layers[i];
    adam(l->w, l->gw, l->mw, l->vw, (size_t)l->n_in * (size_t)l->n_out, alpha);
    adam(l->b, l->gb, l->mb, l->vb, (size_t)l->n_out, alpha);
  }
}

double scps__bce_with_logits(const float *logits, const float *labels, int32_t batch, float *dlogits) {
  double loss = 0;
  for (int32_t r = 0; r < batch; r++) {
    double z = logits[r], y = labels[r];
    /* softplus(z) - y z, stable for large |z| */
    loss += (z > 0 ? z + log1p(exp(-z)) : log1p(exp(z))) - y * z;
    if (dlogits) dlogits[r] = (float)((1.0 / (1.0 + exp(-z)) - y) / batch);
  }
  return batch ? loss / batch : 0;
}

typedef struct scored {
  float score, label;
} scored;

static int by_score(const void *a, const void *b) {
  float x = ((const scored *)a)->score, y = ((const scored *)b)->score;
  return (x > y) - (x < y);
}

double scps__auc(const float *scores, const float *labels, int64_t n) {
  /* A NaN score has no rank (and would keep the tie scan below from
   * moving): the AUC of a diverged model is NaN. */
  for (int64_t i = 0; i < n; i++)
    if (isnan(scores[i])) return NAN;
  scored *s = malloc(sizeof *s * (size_t)(n ? n : 1));
  if (!s) return NAN;
  for (int64_t i = 0; i < n; i++) s[i] = (scored){scores[i], labels[i]};
  qsort(s, (size_t)n, sizeof *s, by_score);
  /* Mann-Whitney: sum of positive ranks, ties get their average rank. */
  double pos = 0, rank_sum = 0;
  for (int64_t i = 0; i < n;) {
    int64_t j = i;
    double p = 0;
    while (j < n && s[j].score == s[i].score) p += s[j++].label > 0.5f;
    rank_sum += p * (double)(i + j + 1) / 2.0;
    pos += p;
    i = j;
  }
  free(s);
  double neg = (double)n - pos;
  if (pos == 0 || neg == 0) return 0.5;
  return (rank_sum - pos * (pos + 1) / 2.0) / (pos * neg);
}
