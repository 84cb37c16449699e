#include "scps_scan.h"

#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

/* A block's scores (m x block floats) are written by the sgemm and read
 * once by the reduction right after: about 512 KiB keeps them in cache. */
#define SCAN_TILE_FLOATS (1 << 17)

int32_t scps__scan_block_rows(int32_t m) {
  int32_t b = SCAN_TILE_FLOATS / (m > 0 ? m : 1);
  if (b > 2048) b = 2048;
  if (b < 64) b = 64;
  return b & ~15;
}

static size_t up64(size_t n) { return (n + 63) & ~(size_t)63; }

size_t scps__scan_bytes(const scps_scan_config *c) {
  const size_t m = (size_t)c->m, block = (size_t)scps__scan_block_rows(c->m);
  return up64(m * block * sizeof(float)) + up64(block * sizeof(float)) +
         up64(m * (size_t)c->bins * (sizeof(float) + sizeof(int32_t))) + up64(m * sizeof(scps_knn_best)) +
         m * up64(scps__knn_best_bytes(c->k));
}

/* Each SparseCore worker scans its own rows: OpenBLAS's own threads would
 * only contend with the other workers for the same cores. */
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static void blas_one_thread(void) { openblas_set_num_threads(1); }

void scps__scan_init(scps_scan *s, const scps_scan_config *c, void *mem) {
  pthread_once(&blas_once, blas_one_thread);
  uint8_t *p = mem;
  const size_t m = (size_t)c->m;
  s->c = *c;
  s->block = scps__scan_block_rows(c->m);
  s->next = 0;
  s->tile = (float *)(void *)p;
  p += up64(m * (size_t)s->block * sizeof(float));
  s->norm = (float *)(void *)p;
  p += up64((size_t)s->block * sizeof(float));
  s->bin_score = (float *)(void *)p;
  s->bin_row = (int32_t *)(void *)(p + m * (size_t)c->bins * sizeof(float));
  p += up64(m * (size_t)c->bins * (sizeof(float) + sizeof(int32_t)));
  for (size_t i = 0; i < m * (size_t)c->bins; i++) s->bin_row[i] = -1;
  s->best = (scps_knn_best *)(void *)p;
  p += up64(m * sizeof(scps_knn_best));
  for (size_t i = 0; i < m; i++) {
    scps__knn_best_init(&s->best[i], c->k, p);
    p += up64(scps__knn_best_bytes(c->k));
  }
}

/* Row j's squared norm, or for cosine 1/|r| (0 for a zero row, whose
 * scores are then 0). */
static void row_norms(scps_scan *s, const float *rows, size_t ld, int32_t n) {
  const size_t dim = (size_t)s->c.dim;
  for (int32_t j = 0; j < n; j++) {
    const float *r = rows + (size_t)j * ld;
    float q = 0;
    for (size_t c = 0; c < dim; c++) q += r[c] * r[c];
    s->norm[j] = s->c.score != SCPS_KNN_COSINE ? q : q > 0 ? 1.0f / sqrtf(q) : 0.0f;
  }
}

/* The block's scores of query i from its dot products, in place. */
static void finish_scores(const scps_scan *s, int32_t i, float *restrict t, int32_t n) {
  const float *restrict nr = s->norm;
  if (s->c.score == SCPS_KNN_COSINE) {
    for (int32_t j = 0; j < n; j++) t[j] *= nr[j];
  } else if (s->c.score == SCPS_KNN_NEG_SQUARED_L2) {
    const float qq = s->c.qsq[i];
    for (int32_t j = 0; j < n; j++) {
      const float d = qq + nr[j] - 2.0f * t[j];
      t[j] = d > 0 ? -d : 0.0f;
    }
  }
}

/* PartialReduce: ordinal o goes to bin o mod L, which keeps its best score
 * (the first of equal ones: the lower ordinal). The block is cut where the
 * bins wrap so each run is one straight, vectorisable loop. */
static void reduce_bins(scps_scan *s, int32_t i, const float *restrict t, int32_t n) {
  const int64_t L = s->c.bins;
  float *bs = s->bin_score + (size_t)i * (size_t)L;
  int32_t *br = s->bin_row + (size_t)i * (size_t)L;
  for (int32_t j = 0; j < n;) {
    const int64_t o = s->next + j, b0 = o % L;
    const int32_t run = (int32_t)(n - j < L - b0 ? n - j : L - b0);
    float *restrict vs = bs + b0;
    int32_t *restrict vr = br + b0;
    const float *restrict v = t + j;
    for (int32_t c = 0; c < run; c++) {
      const int take = v[c] > vs[c] || (vr[c] < 0 && v[c] == v[c]);
      vs[c] = take ? v[c] : vs[c];
      vr[c] = take ? (int32_t)o + c : vr[c];
    }
    j += run;
  }
}

void scps__scan_block(scps_scan *s, const float *rows, size_t ld, int32_t n) {
  if (n <= 0) return;
  const int32_t m = s->c.m;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, s->c.dim, 1.0f, s->c.queries, s->c.dim, rows, (int)ld,
              0.0f, s->tile, n);
  if (s->c.score != SCPS_KNN_DOT) row_norms(s, rows, ld, n);
  for (int32_t i = 0; i < m; i++) {
    float *t = s->tile + (size_t)i * (size_t)n;
    finish_scores(s, i, t, n);
    if (s->c.bins) {
      reduce_bins(s, i, t, n);
    } else {
      scps_knn_best *b = &s->best[i];
      for (int32_t j = 0; j < n; j++) scps__knn_best_add(b, t[j], s->next + j);
    }
  }
  s->next += n;
}

int32_t scps__scan_take(scps_scan *s, int32_t i, float *score, int64_t *ordinal) {
  scps_knn_best *b = &s->best[i];
  if (s->c.bins) {
    const int64_t L = s->c.bins;
    const float *bs = s->bin_score + (size_t)i * (size_t)L;
    const int32_t *br = s->bin_row + (size_t)i * (size_t)L;
    for (int64_t j = 0; j < L; j++)
      if (br[j] >= 0) scps__knn_best_add(b, bs[j], br[j]);
  }
  return scps__knn_best_take(b, score, ordinal);
}
