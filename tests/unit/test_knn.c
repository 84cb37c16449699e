/* scps_knn and scps_scan in process: the bin count rule against the values
 * ../shared/reference/knn_recall.py computes with XLA's rule, the expected
 * recall formula against a Monte-Carlo of random bins, the running top-k
 * and the merge against a full sort (ties and NaN included), and scans of
 * random rows with repeated rows, exact against a double brute force and
 * binned against the bins' own definition. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "scps_knn.h"
#include "scps_scan.h"
#include "scps_test.h"

static uint64_t rng = 7;
static uint64_t next_u64(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}
static double uniform01(void) { return (double)(next_u64() >> 11) / 9007199254740992.0; }

static void test_bins(void) {
  /* knn_recall.py's xla_bins (N, K, r) -> L; its "no reduction" is 0 here. */
  static const struct { int64_t n, k; double r; int64_t bins; } cases[] = {
      {1000000, 10, 0.95, 256},    {1000000, 100, 0.95, 2048}, {1000000, 100, 0.99, 15744},
      {1000000, 1000, 0.95, 31360}, {10000000, 100, 0.9, 1280}, {12000, 256, 0.95, 6016},
      {262144, 64, 0.95, 2048},    {1000, 5, 0.9, 256},         {40000, 10, 0.9, 256},
      {40000, 10, 0.95, 384},      {40000, 50, 0.9, 640},       {300, 20, 0.8, 256},
      {129, 2, 0.5, 0},            {1048576, 10, 0.95, 256},    {5000, 3, 0.99, 384},
      {100000, 1000, 0.5, 1664},   {128, 5, 0.5, 0},            {1000000, 1, 0.9, 128},
      {1000000, 10, 1.0, 0}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    CHECKF(scps__knn_bins(cases[i].n, cases[i].k, cases[i].r) == cases[i].bins, "n %lld k %lld r %g: %lld, want %lld",
           (long long)cases[i].n, (long long)cases[i].k, cases[i].r,
           (long long)scps__knn_bins(cases[i].n, cases[i].k, cases[i].r), (long long)cases[i].bins);
  /* The reference table's expectations (exact_E[recall]). */
  CHECK(fabs(scps__knn_expected_recall(256, 10) - 0.9826) < 5e-5);
  CHECK(fabs(scps__knn_expected_recall(2048, 100) - 0.9762) < 5e-5);
  CHECK(fabs(scps__knn_expected_recall(15744, 100) - 0.9969) < 5e-5);
  CHECK(scps__knn_expected_recall(0, 10) == 1.0);
  /* Whatever the rule reduces to meets its target, in expectation. */
  for (int64_t n = 100; n <= 100000000; n = n * 3 + 1)
    for (int64_t k = 1; k <= 4096 && k <= n; k *= 4)
      for (double r = 0.5; r < 1; r += 0.07) {
        const int64_t L = scps__knn_bins(n, k, r);
        CHECKF(L == 0 || (L >= k && scps__knn_expected_recall(L, k) >= r), "n %lld k %lld r %g: L %lld",
               (long long)n, (long long)k, r, (long long)L);
      }
  /* Monte-Carlo of the formula: the top k dropped into L random bins; one
   * survives when no better one shares its bin. */
  const int L = 64, K = 20, trials = 20000;
  int64_t hit = 0;
  for (int t = 0; t < trials; t++) {
    char used[64] = {0};
    for (int i = 0; i < K; i++) {
      const int b = (int)(next_u64() % L);
      if (!used[b]) hit++;
      used[b] = 1;
    }
  }
  const double mc = (double)hit / ((double)trials * K), want = scps__knn_expected_recall(L, K);
  CHECKF(fabs(mc - want) < 0.005, "Monte-Carlo recall %.4f, formula %.4f", mc, want);
}

typedef struct cand {
  float s;
  int64_t id;
} cand;

/* The ranking written out on its own (not scps__knn_before): NaN last,
 * higher scores first, then lower ids. */
static int cand_cmp(const void *a, const void *b) {
  const cand *x = a, *y = b;
  const int xn = x->s != x->s, yn = y->s != y->s;
  if (xn != yn) return xn - yn;
  if (!xn && x->s != y->s) return x->s > y->s ? -1 : 1;
  return (x->id > y->id) - (x->id < y->id);
}

static void test_best_and_merge(void) {
  enum { N = 5000 };
  cand *all = malloc(sizeof *all * N);
  float *score = malloc(sizeof *score * N);
  int64_t *id = malloc(sizeof *id * N);
  void *mem = malloc(scps__knn_best_bytes(N));
  const int ks[] = {1, 2, 7, 100, N};
  for (int round = 0; round < 20; round++)
    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
      const int k = ks[ki];
      scps_knn_best b;
      scps__knn_best_init(&b, k, mem);
      /* Few distinct scores (ties everywhere), some NaN, ids shuffled. */
      for (int i = 0; i < N; i++) {
        all[i].s = (next_u64() % 50 == 0) ? NAN : (float)(next_u64() % (round % 2 ? 7 : 1000));
        all[i].id = i;
      }
      for (int i = N - 1; i > 0; i--) {
        const int j = (int)(next_u64() % (uint64_t)(i + 1));
        cand t = all[i];
        all[i] = all[j];
        all[j] = t;
      }
      for (int i = 0; i < N; i++) scps__knn_best_add(&b, all[i].s, all[i].id);
      int got = scps__knn_best_take(&b, score, id);
      qsort(all, N, sizeof *all, cand_cmp);
      int nonnan = 0;
      while (nonnan < N && all[nonnan].s == all[nonnan].s) nonnan++;
      const int want = k < nonnan ? k : nonnan;
      int bad = got != want;
      for (int i = 0; !bad && i < got; i++) bad = id[i] != all[i].id || score[i] != all[i].s;
      CHECKF(!bad, "round %d k %d: the running top k differs from a sort (got %d, want %d)", round, k, got, want);
    }
  /* Merge: three sorted lists of disjoint ids against a sort of all. */
  float ls[3][300];
  int64_t li[3][300];
  int32_t len[3] = {300, 17, 0};
  int n = 0;
  for (int j = 0; j < 3; j++) {
    for (int i = 0; i < len[j]; i++) {
      all[n].s = ls[j][i] = (float)(next_u64() % 20);
      all[n].id = li[j][i] = n;
      n++;
    }
  }
  for (int j = 0; j < 3; j++) {
    cand tmp[300];
    for (int i = 0; i < len[j]; i++) tmp[i] = (cand){ls[j][i], li[j][i]};
    qsort(tmp, (size_t)len[j], sizeof tmp[0], cand_cmp);
    for (int i = 0; i < len[j]; i++) {
      ls[j][i] = tmp[i].s;
      li[j][i] = tmp[i].id;
    }
  }
  qsort(all, (size_t)n, sizeof *all, cand_cmp);
  const float *sp[3] = {ls[0], ls[1], ls[2]};
  const int64_t *ip[3] = {li[0], li[1], li[2]};
  const int32_t got = scps__knn_merge(3, len, sp, ip, 50, score, id);
  int bad = got != 50;
  for (int i = 0; !bad && i < got; i++) bad = id[i] != all[i].id;
  CHECK(!bad);
  CHECK(scps__knn_merge(3, len, sp, ip, 1000, score, id) == 317);
  /* More lists than fit on the stack (a cluster of 300 servers). */
  enum { LISTS = 300 };
  static float one_s[LISTS];
  static int64_t one_i[LISTS];
  static int32_t one_len[LISTS];
  static const float *lsp[LISTS];
  static const int64_t *lip[LISTS];
  for (int j = 0; j < LISTS; j++) {
    one_s[j] = (float)j;
    one_i[j] = j;
    one_len[j] = 1;
    lsp[j] = &one_s[j];
    lip[j] = &one_i[j];
  }
  CHECK(scps__knn_merge(LISTS, one_len, lsp, lip, 3, score, id) == 3 && id[0] == 299 && id[1] == 298 && id[2] == 297);
  free(all);
  free(score);
  free(id);
  free(mem);
}

/* Rows for the scan: random, with every 7th a copy of an earlier one. */
enum { ROWS = 3000, DIM = 24, M = 9 };
static float rows[ROWS * DIM];

static void test_scan(void) {
  float q[M * DIM], prepared[M * DIM], qsq[M];
  for (int i = 0; i < ROWS; i++)
    for (int c = 0; c < DIM; c++)
      rows[i * DIM + c] = i % 7 == 6 ? rows[(i / 2) * DIM + c] : (float)(uniform01() * 2 - 1);
  memset(rows + 10 * DIM, 0, sizeof(float) * DIM); /* a zero row */
  for (int i = 0; i < M * DIM; i++) q[i] = (float)(uniform01() * 2 - 1);
  const scps_knn_score kinds[3] = {SCPS_KNN_DOT, SCPS_KNN_COSINE, SCPS_KNN_NEG_SQUARED_L2};
  cand *want = malloc(sizeof *want * ROWS);
  /* (the last check below reuses want, score and ord) */
  float score[ROWS];
  int64_t ord[ROWS];
  for (int si = 0; si < 3; si++)
    for (int mode = 0; mode < 2; mode++) {
      const int k = mode ? 10 : 40;
      memcpy(prepared, q, sizeof q);
      scps__knn_prepare_queries(kinds[si], prepared, M, DIM, qsq);
      const scps_scan_config cfg = {.score = kinds[si], .m = M, .dim = DIM, .k = k, .bins = mode ? 256 : 0,
                                    .queries = q, .prepared = prepared, .qsq = qsq};
      void *mem = malloc(scps__scan_bytes(&cfg));
      scps_scan s;
      scps__scan_init(&s, &cfg, mem);
      /* Blocks of uneven sizes, the last one partial. */
      for (int o = 0; o < ROWS;) {
        int n = 1 + (int)(next_u64() % (uint64_t)s.block);
        if (n > ROWS - o) n = ROWS - o;
        scps__scan_block(&s, rows + o * DIM, DIM, n);
        o += n;
      }
      for (int i = 0; i < M; i++) {
        const int got = scps__scan_take(&s, i, score, ord);
        int n = 0;
        for (int r = 0; r < ROWS; r++)
          /* Binned: the candidates are each bin's best; exact: every row. */
          want[n++] = (cand){scps__scan_score(kinds[si], q + i * DIM, rows + r * DIM, DIM), r};
        if (mode) {
          cand best[256];
          for (int b = 0; b < 256; b++) best[b] = (cand){-INFINITY, -1};
          for (int r = 0; r < n; r++)
            if (best[r % 256].id < 0 || cand_cmp(&want[r], &best[r % 256]) < 0)
              best[r % 256] = want[r];
          memcpy(want, best, sizeof best);
          n = 256;
        }
        qsort(want, (size_t)n, sizeof *want, cand_cmp);
        int bad = got != k;
        for (int j = 0; !bad && j < got; j++) bad = ord[j] != want[j].id || score[j] != want[j].s;
        CHECKF(!bad, "score %d bins %d query %d: the scan's top %d differs from the brute force", si, mode, i, k);
        /* A double brute force of the dot product, independent of the scan. */
        if (kinds[si] == SCPS_KNN_DOT && !mode) {
          double d = 0;
          for (int c = 0; c < DIM; c++) d += (double)q[i * DIM + c] * rows[ord[0] * DIM + c];
          CHECK((float)d == score[0]);
        }
      }
      free(mem);
    }
  /* Rows past 1.8e19 in length, whose float32 sum of squares overflows:
   * cosine still ranks them by angle. */
  static float huge[200 * DIM];
  for (int i = 0; i < 200 * DIM; i++) huge[i] = rows[i] * 3e19f;
  memcpy(prepared, q, sizeof q);
  scps__knn_prepare_queries(SCPS_KNN_COSINE, prepared, M, DIM, qsq);
  const scps_scan_config cfg = {.score = SCPS_KNN_COSINE, .m = M, .dim = DIM, .k = 5, .queries = q,
                                .prepared = prepared, .qsq = qsq};
  void *mem = malloc(scps__scan_bytes(&cfg));
  scps_scan s;
  scps__scan_init(&s, &cfg, mem);
  scps__scan_block(&s, huge, DIM, 200);
  for (int i = 0; i < M; i++) {
    const int got = scps__scan_take(&s, i, score, ord);
    int n = 0;
    for (int r = 0; r < 200; r++) want[n++] = (cand){scps__scan_score(SCPS_KNN_COSINE, q + i * DIM, rows + r * DIM, DIM), r};
    qsort(want, (size_t)n, sizeof *want, cand_cmp);
    int bad = got != 5;
    for (int j = 0; !bad && j < got; j++) bad = ord[j] != want[j].id;
    CHECKF(!bad, "query %d: cosine over rows of length 1e20 ranks differently from the same rows unscaled", i);
  }
  free(mem);
  free(want);
}

/* One scan of rows r (n x dim) for query q, k 1: the ordinal answered. */
static int64_t scan_one(scps_knn_score score, const float *q, int dim, const float *r, int n, int64_t bins,
                        bool *full) {
  float prepared[8], qsq[1], sc[4];
  int64_t ord[4];
  memcpy(prepared, q, sizeof(float) * (size_t)dim);
  scps__knn_prepare_queries(score, prepared, 1, (size_t)dim, qsq);
  const scps_scan_config cfg = {.score = score, .m = 1, .dim = dim, .k = 1, .bins = bins, .queries = q,
                                .prepared = prepared, .qsq = qsq};
  void *mem = malloc(scps__scan_bytes(&cfg));
  scps_scan s;
  scps__scan_init(&s, &cfg, mem);
  for (int o = 0; o < n; o += s.block) scps__scan_block(&s, r + (size_t)o * (size_t)dim, (size_t)dim, n - o < s.block ? n - o : s.block);
  if (full) *full = s.best[0].full;
  const int got = scps__scan_take(&s, 0, sc, ord);
  free(mem);
  return got ? ord[0] : -1;
}

/* Values at the edges of float32, where the sgemm's values or the norms
 * overflow or underflow: the exact score still decides (the reviewer's
 * cases). */
static void test_extremes(void) {
  enum { N = 8 };
  float r[N * 2];
  /* Dot, |q| 2.8e19: a zero row (score 0) beats rows of negative score,
   * though the sieve's bound (inf x 0) is NaN for it. */
  const float qd[2] = {2e19f, 2e19f};
  for (int i = 0; i < N; i++) r[2 * i] = r[2 * i + 1] = -(float)(i + 1);
  r[2 * 5] = r[2 * 5 + 1] = 0;
  CHECK(scan_one(SCPS_KNN_DOT, qd, 2, r, N, 0, NULL) == 5);
  /* L2 with a query of 2e19: the row equal to it is nearest. */
  const float ql[2] = {2e19f, 0};
  for (int i = 0; i < N; i++) r[2 * i] = (float)i, r[2 * i + 1] = (float)i;
  r[2 * 6] = 2e19f, r[2 * 6 + 1] = 0;
  CHECK(scan_one(SCPS_KNN_NEG_SQUARED_L2, ql, 2, r, N, 0, NULL) == 6);
  /* Cosine with a row longer than FLT_MAX (finite values): its angle wins. */
  const float qc[2] = {1, 0};
  for (int i = 0; i < N; i++) r[2 * i] = 1, r[2 * i + 1] = (float)(i + 2);
  r[2 * 4] = 3e38f, r[2 * 4 + 1] = 3e38f;
  CHECK(scan_one(SCPS_KNN_COSINE, qc, 2, r, N, 0, NULL) == 4);
  /* Dot with a query of 1e-30: products far below float32's normal range. */
  const float qt[2] = {1e-30f, 1e-30f};
  for (int i = 0; i < N; i++) r[2 * i] = (float)i * 1e-9f, r[2 * i + 1] = 1e-9f;
  CHECK(scan_one(SCPS_KNN_DOT, qt, 2, r, N, 0, NULL) == N - 1);
  /* Binned with L = k (a low recall target clamps L to k): the running
   * top-k still fills, so the sieve starts. */
  float big[4096 * 2];
  for (int i = 0; i < 4096; i++) big[2 * i] = (float)((i * 37) % 1000), big[2 * i + 1] = 0;
  bool full = false;
  CHECK(scan_one(SCPS_KNN_DOT, qc, 2, big, 4096, 1, &full) >= 0);
  CHECK(full);
}

int main(void) {
  test_extremes();
  test_bins();
  test_best_and_merge();
  test_scan();
  return scps_test_finish("test_knn");
}
