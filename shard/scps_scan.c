#include "scps_scan.h"

#include <cblas.h>
#include <float.h>
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
  return up64(m * block * sizeof(float)) + 2 * up64(block * sizeof(float)) + up64(block) + 2 * up64(m * sizeof(float)) + up64(scps__knn_bins_bytes(c->k)) +
         up64(m * sizeof(scps_knn_best)) + m * up64(scps__knn_best_bytes(c->k));
}

float scps__scan_score(scps_knn_score score, const float *q, const float *r, int32_t dim) {
  /* Four interleaved partial sums (column c into sum c mod 4, the tail
   * into the first), added pairwise: one fixed order, four times shorter
   * chains of dependent adds than a running sum. */
  double d4[4] = {0}, q4[4] = {0}, r4[4] = {0};
  int32_t c = 0;
  for (; c + 4 <= dim; c += 4)
    for (int l = 0; l < 4; l++) {
      const double x = q[c + l], y = r[c + l];
      d4[l] += x * y;
      q4[l] += x * x;
      r4[l] += y * y;
    }
  for (; c < dim; c++) {
    const double x = q[c], y = r[c];
    d4[0] += x * y;
    q4[0] += x * x;
    r4[0] += y * y;
  }
  const double d = (d4[0] + d4[1]) + (d4[2] + d4[3]), qq = (q4[0] + q4[1]) + (q4[2] + q4[3]),
               rr = (r4[0] + r4[1]) + (r4[2] + r4[3]);
  /* A NaN (only from a row that is not finite) is never answered. */
  if (d != d || qq != qq || rr != rr) return NAN;
  if (score == SCPS_KNN_DOT) return (float)d;
  if (score == SCPS_KNN_COSINE) return qq > 0 && rr > 0 ? (float)(d / sqrt(qq * rr)) : 0.0f;
  const double v = qq + rr - 2 * d;
  return v != v ? NAN : v > 0 ? (float)-v : 0.0f;
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
  s->max_rnorm = 0;
  s->tile = (float *)(void *)p;
  p += up64(m * (size_t)s->block * sizeof(float));
  s->norm = (float *)(void *)p;
  p += up64((size_t)s->block * sizeof(float));
  s->rnorm = (float *)(void *)p;
  p += up64((size_t)s->block * sizeof(float));
  s->hit = p;
  p += up64((size_t)s->block);
  s->slack = (float *)(void *)p;
  p += up64(m * sizeof(float));
  s->qnorm = (float *)(void *)p;
  p += up64(m * sizeof(float));
  /* Products and sums below float32's normal range lose absolute, not
   * relative, precision: at most a few units of FLT_MIN a value. */
  s->floor = (float)(c->dim + 8) * FLT_MIN;
  int32_t *slot = (int32_t *)(void *)p;
  p += up64(scps__knn_bins_bytes(c->k));
  s->best = (scps_knn_best *)(void *)p;
  p += up64(m * sizeof(scps_knn_best));
  for (size_t i = 0; i < m; i++) {
    scps__knn_best_init(&s->best[i], c->k, p);
    p += up64(scps__knn_best_bytes(c->k));
    s->best[i].bins = c->bins;
    s->best[i].slot = slot;
    /* A float32 sum of dim products, in any order, lies within about
     * dim x 2^-24 x |q| |r| of the exact one; twice that and a few units
     * more cover the norms and the score's own steps. */
    double qq = 0;
    for (int32_t col = 0; col < c->dim; col++) {
      const double x = c->prepared[i * (size_t)c->dim + (size_t)col];
      qq += x * x;
    }
    s->qnorm[i] = (float)sqrt(qq);
    s->slack[i] = (float)((2.0 * c->dim + 8.0) * 0x1p-23 * sqrt(qq));
  }
}

/* How far query i's sgemm score of a row of norm rn may be from its exact
 * score. */
static inline float bound(const scps_scan *s, int32_t i, float rn) {
  if (s->c.score == SCPS_KNN_DOT) return s->slack[i] * rn + s->floor;
  if (s->c.score == SCPS_KNN_COSINE) return s->slack[i] + s->floor;
  const float qn = s->qnorm[i], e = (float)((2.0 * s->c.dim + 8.0) * 0x1p-23);
  return e * (qn + rn) * (qn + rn) + s->floor;
}

/* Summed in double: a float32 sum of squares overflows for rows longer
 * than about 1.8e19 (and loses rows shorter than about 1e-23), where |r|
 * itself is still a float. */
static void row_norms(scps_scan *s, const float *rows, size_t ld, int32_t n) {
  const size_t dim = (size_t)s->c.dim;
  for (int32_t j = 0; j < n; j++) {
    const float *r = rows + (size_t)j * ld;
    double q = 0;
    for (size_t c = 0; c < dim; c++) q += (double)r[c] * (double)r[c];
    s->norm[j] = (float)q;
    s->rnorm[j] = (float)sqrt(q);
    if (s->rnorm[j] > s->max_rnorm) s->max_rnorm = s->rnorm[j];
  }
}

/* The block's float32 scores of query i from its dot products, in place. */
static void finish_scores(const scps_scan *s, int32_t i, float *restrict t, int32_t n) {
  const float *restrict nr = s->norm, *restrict rn = s->rnorm;
  if (s->c.score == SCPS_KNN_COSINE) {
    /* A row longer than FLT_MAX (finite values) has rn inf: NaN, a hit. */
    for (int32_t j = 0; j < n; j++) t[j] = rn[j] > 0 ? (rn[j] <= FLT_MAX ? t[j] / rn[j] : NAN) : 0.0f;
  } else if (s->c.score == SCPS_KNN_NEG_SQUARED_L2) {
    const float qq = s->c.qsq[i];
    for (int32_t j = 0; j < n; j++) {
      const float d = qq + nr[j] - 2.0f * t[j];
      t[j] = d > 0 ? -d : 0.0f;
    }
  }
}

/* Offers row o to query i's k best, scored exactly. */
static void offer(scps_scan *s, int32_t i, const float *row, int64_t o) {
  scps__knn_best_add(&s->best[i], scps__scan_score(s->c.score, s->c.queries + (size_t)i * (size_t)s->c.dim, row,
                                                  s->c.dim), o);
}

/* Query i's rows of the block: a row whose sgemm value, give or take its
 * rounding bound, may still reach the k best is offered (scored exactly);
 * the others cannot change the answer, binned or not (scps_knn_best). */
static void keep_best(scps_scan *s, int32_t i, const float *restrict t, const float *rows, size_t ld, int32_t n) {
  scps_knn_best *b = &s->best[i];
  int32_t j = 0;
  /* Until k rows are kept every row is offered; then the block is first
   * sieved in one straight loop against the threshold as it stood, which
   * can only have risen since (the loop after it checks again). */
  for (; j < n && !b->full; j++) offer(s, i, rows + (size_t)j * ld, s->next + j);
  if (j == n) return;
  const float th = b->th_score, *restrict rn = s->rnorm;
  uint8_t *restrict hit = s->hit;
  int32_t hits = 0;
  /* Written as "not below", so a value that is NaN (an overflow in float
   * somewhere) counts as a hit and the exact score decides. */
  const float fl = s->floor;
  if (s->c.score == SCPS_KNN_DOT) {
    const float e = s->slack[i];
    for (int32_t x = j; x < n; x++) hits += hit[x] = !(t[x] + (e * rn[x] + fl) < th);
  } else if (s->c.score == SCPS_KNN_COSINE) {
    const float e = s->slack[i] + fl;
    for (int32_t x = j; x < n; x++) hits += hit[x] = !(t[x] + e < th);
  } else {
    const float qn = s->qnorm[i], e = (float)((2.0 * s->c.dim + 8.0) * 0x1p-23);
    for (int32_t x = j; x < n; x++) hits += hit[x] = !(t[x] + (e * (qn + rn[x]) * (qn + rn[x]) + fl) < th);
  }
  for (int32_t x = j; hits && x < n; x++) {
    if (!hit[x]) continue;
    hits--;
    if (t[x] + bound(s, i, rn[x]) < b->th_score) continue;
    offer(s, i, rows + (size_t)x * ld, s->next + x);
  }
}

void scps__scan_block(scps_scan *s, const float *rows, size_t ld, int32_t n) {
  if (n <= 0) return;
  const int32_t m = s->c.m;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, s->c.dim, 1.0f, s->c.prepared, s->c.dim, rows,
              (int)ld, 0.0f, s->tile, n);
  row_norms(s, rows, ld, n);
  for (int32_t i = 0; i < m; i++) {
    float *t = s->tile + (size_t)i * (size_t)n;
    finish_scores(s, i, t, n);
    keep_best(s, i, t, rows, ld, n);
  }
  s->next += n;
}

int32_t scps__scan_take(scps_scan *s, int32_t i, float *score, int64_t *ordinal) {
  return scps__knn_best_take(&s->best[i], score, ordinal);
}
