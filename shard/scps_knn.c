#include "scps_knn.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define KNN_LANES 128

int64_t scps__knn_bins(int64_t n, int64_t k, double r) {
  const int64_t t = KNN_LANES;
  if (n <= t || !(r < 1.0)) return 0;
  if (k == 1) return t;
  /* XLA's rule, step by step: the bins the recall target asks for, at
   * least one lane's worth and at most n; a power-of-two reduction of n
   * down to about that, at most down to one lane per 128; whole lanes. */
  double want = (1.0 - (double)k) / log(r);
  int64_t m = want >= (double)n ? n : (int64_t)want;
  if (m < t) m = t;
  if (m > n) m = n;
  int red = 0;
  while ((n / m) >> (red + 1)) red++;
  if (red == 0) return 0;
  int cap = 0;
  while ((int64_t)1 << cap < n / t) cap++;
  if (red > cap) red = cap;
  const int64_t lanes = (n + t - 1) / t, f = (int64_t)1 << red;
  int64_t bins = (lanes + f - 1) / f * t;
  /* Fewer bins than k (a very low target) could leave a SparseCore with
   * fewer than k candidates; k bins keep the answer whole. */
  return bins < k ? k : bins;
}

double scps__knn_expected_recall(int64_t bins, int64_t k) {
  if (bins <= 0) return 1.0;
  const double l = (double)bins;
  return l / (double)k * -expm1((double)k * log1p(-1.0 / l));
}

size_t scps__knn_best_bytes(int32_t k) { return (size_t)2 * (size_t)k * (sizeof(float) + sizeof(int64_t)); }

void scps__knn_best_init(scps_knn_best *b, int32_t k, void *mem) {
  b->k = k;
  b->cap = 2 * k;
  b->n = 0;
  b->full = false;
  b->th_score = 0;
  b->th_row = 0;
  b->row = mem;
  b->score = (float *)(b->row + b->cap);
  b->bins = 0;
  b->slot = NULL;
}

/* Open addressing over at least twice the entries: a power of two. */
static int32_t slots_for(int32_t n) {
  int32_t size = 16;
  while (size < 2 * n) size *= 2;
  return size;
}

size_t scps__knn_bins_bytes(int32_t k) { return ((size_t)slots_for(2 * k) + 2 * (size_t)k) * sizeof(int32_t); }

/* The slot of row's bin: the one holding an entry of that bin, or the
 * empty one where it would go. */
static int32_t bin_slot(const scps_knn_best *b, int64_t bin, int32_t mask) {
  uint64_t h = (uint64_t)bin * 0x9e3779b97f4a7c15ull;
  int32_t at = (int32_t)(h >> 40) & mask;
  while (b->slot[at] && b->row[b->slot[at] - 1] % b->bins != bin) at = (at + 1) & mask;
  return at;
}

/* Binned: keeps only the best entry of each bin. */
static void drop_binmates(scps_knn_best *b) {
  if (!b->bins || b->n < 2) return;
  const int32_t size = slots_for(b->n), mask = size - 1;
  memset(b->slot, 0, sizeof *b->slot * (size_t)size);
  for (int32_t i = 0; i < b->n; i++) {
    const int32_t at = bin_slot(b, b->row[i] % b->bins, mask), j = b->slot[at] - 1;
    if (j < 0 || scps__knn_before(b->score[i], b->row[i], b->score[j], b->row[j])) b->slot[at] = i + 1;
  }
  /* Which to keep, all found before any entry moves (the probes read rows). */
  int32_t *keep = b->slot + size;
  for (int32_t i = 0; i < b->n; i++) keep[i] = b->slot[bin_slot(b, b->row[i] % b->bins, mask)] == i + 1;
  int32_t n = 0;
  for (int32_t i = 0; i < b->n; i++)
    if (keep[i]) {
      b->score[n] = b->score[i];
      b->row[n++] = b->row[i];
    }
  b->n = n;
}

/* Sorts entries [lo, hi) of b by scps__knn_before: insertion sort below a
 * few dozen, else a quicksort step that recurses only into the part the
 * caller needs (the first `need` entries). */
static void swap_at(scps_knn_best *b, int32_t i, int32_t j) {
  float s = b->score[i];
  int64_t r = b->row[i];
  b->score[i] = b->score[j];
  b->row[i] = b->row[j];
  b->score[j] = s;
  b->row[j] = r;
}

static void select_sorted(scps_knn_best *b, int32_t lo, int32_t hi, int32_t need) {
  while (hi - lo > 24) {
    const int32_t mid = lo + (hi - lo) / 2;
    /* Median of three as the pivot, moved to lo. */
    if (scps__knn_before(b->score[mid], b->row[mid], b->score[lo], b->row[lo])) swap_at(b, mid, lo);
    if (scps__knn_before(b->score[hi - 1], b->row[hi - 1], b->score[lo], b->row[lo])) swap_at(b, hi - 1, lo);
    if (scps__knn_before(b->score[hi - 1], b->row[hi - 1], b->score[mid], b->row[mid])) swap_at(b, hi - 1, mid);
    swap_at(b, lo, mid);
    const float ps = b->score[lo];
    const int64_t pr = b->row[lo];
    int32_t i = lo + 1, j = hi - 1;
    for (;;) {
      while (i <= j && scps__knn_before(b->score[i], b->row[i], ps, pr)) i++;
      while (i <= j && scps__knn_before(ps, pr, b->score[j], b->row[j])) j--;
      if (i >= j) break;
      swap_at(b, i++, j--);
    }
    swap_at(b, lo, i - 1);
    const int32_t p = i - 1; /* the pivot's place: before it all better, after it all worse */
    if (need > p + 1) select_sorted(b, p + 1, hi, need);
    hi = p;
  }
  for (int32_t i = lo + 1; i < hi; i++) {
    const float s = b->score[i];
    const int64_t r = b->row[i];
    int32_t j = i;
    for (; j > lo && scps__knn_before(s, r, b->score[j - 1], b->row[j - 1]); j--) {
      b->score[j] = b->score[j - 1];
      b->row[j] = b->row[j - 1];
    }
    b->score[j] = s;
    b->row[j] = r;
  }
}

void scps__knn_best_compact(scps_knn_best *b) {
  drop_binmates(b);
  /* Binned, k entries may be all that stay (one a bin, L = k): they still
   * set the threshold, or the sieve would never start. */
  if (b->n < b->k) return;
  select_sorted(b, 0, b->n, b->k);
  b->n = b->k;
  b->full = true;
  b->th_score = b->score[b->k - 1];
  b->th_row = b->row[b->k - 1];
}

int32_t scps__knn_best_take(scps_knn_best *b, float *score, int64_t *row) {
  drop_binmates(b);
  const int32_t n = b->n < b->k ? b->n : b->k;
  select_sorted(b, 0, b->n, n);
  b->n = n;
  if (n == b->k) {
    b->full = true;
    b->th_score = b->score[n - 1];
    b->th_row = b->row[n - 1];
  }
  memcpy(score, b->score, sizeof *score * (size_t)n);
  memcpy(row, b->row, sizeof *row * (size_t)n);
  return n;
}

int32_t scps__knn_merge(int n, const int32_t *len, const float *const *score, const int64_t *const *id, int32_t k,
                       float *out_score, int64_t *out_id) {
  /* Few lists (SparseCores, servers): a linear pick of the best head. */
  int32_t on_stack[256] = {0}, *at = n <= 256 ? on_stack : calloc((size_t)n, sizeof *at), got = 0;
  if (!at) return -1;
  while (got < k) {
    int best = -1;
    for (int j = 0; j < n; j++)
      if (at[j] < len[j] &&
          (best < 0 || scps__knn_before(score[j][at[j]], id[j][at[j]], score[best][at[best]], id[best][at[best]])))
        best = j;
    if (best < 0) break;
    out_score[got] = score[best][at[best]];
    out_id[got++] = id[best][at[best]++];
  }
  if (at != on_stack) free(at);
  return got;
}

void scps__knn_prepare_queries(scps_knn_score score, float *q, size_t m, size_t dim, float *qsq) {
  for (size_t i = 0; i < m; i++) {
    /* The norm in double: a finite query's float32 sum of squares
     * overflows to inf above |q| ~ 1.8e19 (1 / inf zeroes the query) and
     * underflows to 0 below ~1e-23 (left unnormalised), either way scoring
     * every row alike. */
    float *v = q + i * dim;
    double d = 0;
    for (size_t c = 0; c < dim; c++) d += (double)v[c] * (double)v[c];
    if (score == SCPS_KNN_COSINE) {
      if (d > 0) {
        const double inv = 1.0 / sqrt(d);
        for (size_t c = 0; c < dim; c++) v[c] = (float)(v[c] * inv);
      }
      d = d > 0 ? 1.0 : 0.0;
    }
    if (qsq) qsq[i] = (float)d;
  }
}
