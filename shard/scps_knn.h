/* scps_knn: the arithmetic of TPU-KNN top-k that every side shares: the bin
 * count rule, the ranking of candidates, a running exact top-k and merges. */
#ifndef SCPS_KNN_H
#define SCPS_KNN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* scps.proto TopKScore. */
typedef enum scps_knn_score { SCPS_KNN_DOT = 0, SCPS_KNN_COSINE = 1, SCPS_KNN_NEG_SQUARED_L2 = 2 } scps_knn_score;

/* XLA's approx_top_k output size for n scores, top k, recall target r
 * (T = 128 lanes; n stands for the whole cluster's rows, as
 * reduction_input_size_override does): the bins L each SparseCore keeps
 * the best of, or 0 for no reduction (r = 1, n <= 128, or a reduction
 * factor of 1). */
int64_t scps__knn_bins(int64_t n, int64_t k, double r);

/* The expected recall of keeping the best of each of `bins` bins when the
 * true top k fall into bins at random: (L/k)(1 - (1 - 1/L)^k); 1 for 0
 * bins (exact). */
double scps__knn_expected_recall(int64_t bins, int64_t k);

/* The ranking everywhere: a higher score first, then a lower id; a score
 * that is NaN ranks below every other (the scan never keeps one). */
static inline bool scps__knn_before(float sa, int64_t ia, float sb, int64_t ib) {
  if (sa > sb) return true;
  if (sa < sb) return false;
  if (sa == sb) return ia < ib;
  return sb != sb && (sa == sa || ia < ib);
}

/* The best k of a stream of (score, row) candidates, in any order: a
 * buffer of up to 2k entries that drops everything not above the k-th best
 * once it is full, so most candidates cost one compare. Memory: callers'
 * (scps__knn_best_bytes), one per query.
 *
 * Binned (bins = L), it answers the best k of the bins' bests, where a
 * stream that leaves out only rows below the k-th best at the time they
 * come loses nothing: such a row can be neither in the answer nor the
 * best of a bin that is (the row above it in its bin, or in k other
 * bins, stays). */
typedef struct scps_knn_best {
  int32_t k, cap, n;
  bool full;        /* k kept once: th_score, th_row is the k-th best */
  float th_score;
  int64_t th_row;
  float *score;     /* [cap] */
  int64_t *row;     /* [cap] */
  /* 0, or L: the rows fall into bins (row mod L) and the buffer keeps the
   * best of each bin only, the others dropped before it selects
   * (PartialReduce). slot: scps__knn_bins_bytes(k) of scratch, which every
   * buffer of one thread may share. */
  int64_t bins;
  int32_t *slot;
} scps_knn_best;

size_t scps__knn_best_bytes(int32_t k);
void scps__knn_best_init(scps_knn_best *b, int32_t k, void *mem);

/* Scratch a binned buffer of k needs while it selects. */
size_t scps__knn_bins_bytes(int32_t k);

void scps__knn_best_compact(scps_knn_best *b);

static inline void scps__knn_best_add(scps_knn_best *b, float score, int64_t row) {
  if (b->full && !scps__knn_before(score, row, b->th_score, b->th_row)) return;
  if (score != score) return;
  b->score[b->n] = score;
  b->row[b->n] = row;
  if (++b->n == b->cap) scps__knn_best_compact(b);
}

/* The best min(k, added) in order into score and row; returns how many. The
 * buffer stays usable (it holds exactly those). */
int32_t scps__knn_best_take(scps_knn_best *b, float *score, int64_t *row);

/* Merges n lists, each sorted by scps__knn_before (list j: len[j] entries
 * at score[j], id[j]), into the best min(k, all) in order; returns how
 * many, or -1 without memory (more than 256 lists). Ids equal across
 * lists are distinct candidates (the lists come from disjoint rows). */
int32_t scps__knn_merge(int n, const int32_t *len, const float *const *score, const int64_t *const *id, int32_t k,
                       float *out_score, int64_t *out_id);

/* Queries prepared for the sgemm, in place (m x dim floats): cosine
 * divides each by its norm (a zero query stays zero); qsq[i] gets the
 * prepared query's |q_i|^2 (may be NULL). */
void scps__knn_prepare_queries(scps_knn_score score, float *q, size_t m, size_t dim, float *qsq);

#endif
