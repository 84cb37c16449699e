/* scps_scan: one SparseCore's scan for TopK: its rows scored block by block
 * against a batch of queries (BLAS sgemm), reduced into bins or a top-k. */
#ifndef SCPS_SCAN_H
#define SCPS_SCAN_H

#include <stddef.h>
#include <stdint.h>

#include "scps_knn.h"

typedef struct scps_scan_config {
  scps_knn_score score;
  int32_t m, dim, k;     /* queries, their values, results wanted */
  int64_t bins;          /* L (scps__knn_bins), or 0: an exact top-k */
  const float *queries;  /* m x dim as asked (finite) */
  const float *prepared; /* m x dim, prepared for the sgemm (scps__knn_prepare_queries) */
  const float *qsq;      /* m: |q|^2 of the prepared queries */
} scps_scan_config;

/* A row's score as the answer gives it: q . r, |q|^2 and |r|^2 summed in
 * double in one fixed order (products of floats are exact there), the
 * score formed in double and rounded once to float32, so equal rows score
 * equal wherever they lie and whatever BLAS did. */
float scps__scan_score(scps_knn_score score, const float *q, const float *r, int32_t dim);

/* Rows a block may hold: a block's scores stay near the cache. */
int32_t scps__scan_block_rows(int32_t m);

/* Bytes of memory a scan of c needs (any alignment of 64 is enough). */
size_t scps__scan_bytes(const scps_scan_config *c);

typedef struct scps_scan {
  scps_scan_config c;
  int32_t block;       /* scps__scan_block_rows */
  int64_t next;        /* ordinal of the next row scanned */
  float *tile;         /* m x block scores */
  float *norm;         /* block: |r|^2 */
  float *rnorm;        /* block: |r| */
  float max_rnorm;     /* the largest |r| scanned */
  uint8_t *hit;        /* block: the rows an exact top-k scores again */
  float *slack;        /* m: how far an sgemm score of query i may lie from the exact one, per unit of row norm */
  float *qnorm;        /* m: |q| of the prepared queries, from a double sum */
  float floor;         /* the bound's absolute part, for values below float32's normal range */
  scps_knn_best *best; /* m, binned with bins */
} scps_scan;

/* Lays the scan out in mem (scps__scan_bytes of it); nothing scanned yet. */
void scps__scan_init(scps_scan *s, const scps_scan_config *c, void *mem);

/* Scores the scan's next n rows (n <= s->block): row j's dim values at
 * rows + j * ld; their ordinals are s->next .. s->next + n - 1, which rank
 * ties (a lower ordinal first) and, with bins, place row o in bin o mod L. */
void scps__scan_block(scps_scan *s, const float *rows, size_t ld, int32_t n);

/* Query i's best min(k, kept) candidates in order (score descending, then
 * ordinal ascending) into score and ordinal; returns how many. The sgemm's
 * float32 values only choose candidates (with a bound on their rounding
 * error, rows that may reach the top k); each candidate is scored again by
 * scps__scan_score, which alone ranks and is answered. With bins, the
 * answer is the k best of the bins' bests (row o in bin o mod L), ranked
 * by that score: PartialReduce, bin by bin as if every row were scored
 * exactly. */
int32_t scps__scan_take(scps_scan *s, int32_t i, float *score, int64_t *ordinal);

#endif
