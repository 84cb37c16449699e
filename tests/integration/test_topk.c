/* scps_client_topk against real clusters (1 process x 1 SparseCore, 1 x 2, 3 x 2):
 * exact answers equal a double-precision brute force (integer-valued rows
 * written by pushes, so dot products and squared distances are exact in
 * float32, with rows repeated four times so every score ties; all-equal
 * rows; k = N; a range; fewer rows per SparseCore than k; a table stored
 * in e4m3), approximate answers' recall against the analytical
 * expectation, a row pushed just before a TopK found by it, the
 * asynchronous form, and refusals. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scps_client.h"
#include "scps_it.h"
#include "scps_knn.h"
#include "scps_test.h"

#define ITEMS 1000 /* not a multiple of any bin count */
#define ITEMS_DIM 16
#define VECS 40000
#define VECS_DIM 32
#define FLAT 300
#define E4 3000
#define E4_DIM 16
#define BATCH 250

static const char config_json[] =
    "{\"name\": \"topk\", \"batch_size\": 250, \"ids\": {\"distribution\": \"uniform\", \"seed\": 1},\n"
    " \"tables\": [{\"name\": \"items\", \"vocabulary_size\": 1000, \"embedding_dim\": 16, \"combiner\": \"sum\",\n"
    "   \"optimizer\": {\"type\": \"sgd\", \"learning_rate\": 1}, \"initializer\": {\"type\": \"zeros\"}},\n"
    "  {\"name\": \"vecs\", \"vocabulary_size\": 40000, \"embedding_dim\": 32, \"combiner\": \"sum\",\n"
    "   \"optimizer\": {\"type\": \"sgd\", \"learning_rate\": 1},\n"
    "   \"initializer\": {\"type\": \"truncated_normal\", \"stddev\": 1}},\n"
    "  {\"name\": \"flat\", \"vocabulary_size\": 300, \"embedding_dim\": 8, \"combiner\": \"sum\",\n"
    "   \"optimizer\": {\"type\": \"sgd\", \"learning_rate\": 1}, \"initializer\": {\"type\": \"constant\", \"value\": 0.5}},\n"
    "  {\"name\": \"e4\", \"vocabulary_size\": 3000, \"embedding_dim\": 16, \"combiner\": \"sum\",\n"
    "   \"storage_format\": \"e4m3\",\n"
    "   \"optimizer\": {\"type\": \"sgd\", \"learning_rate\": 1}, \"initializer\": {\"type\": \"normal\", \"stddev\": 1}}],\n"
    " \"features\": [{\"name\": \"fi\", \"table\": \"items\", \"valency\": 1},\n"
    "   {\"name\": \"fv\", \"table\": \"vecs\", \"valency\": 1}, {\"name\": \"ff\", \"table\": \"flat\", \"valency\": 1},\n"
    "   {\"name\": \"fe\", \"table\": \"e4\", \"valency\": 1}]}\n";

static uint64_t rng = 12345;
static double uniform01(void) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(rng >> 11) / 9007199254740992.0;
}
static float gauss(void) {
  double u = uniform01(), v = uniform01();
  return (float)(sqrt(-2.0 * log(u + 1e-300)) * cos(6.283185307179586 * v));
}

/* Row i of "items": small integers, ids i, i + 250, i + 500, i + 750 equal. */
static float item_value(int64_t i, int c) { return (float)((((i % 250) * 7 + c * 3) % 5) - 2); }

static double score_of(scps_topk_score s, const float *q, const float *r, int dim) {
  double d = 0, qq = 0, rr = 0;
  for (int c = 0; c < dim; c++) {
    d += (double)q[c] * r[c];
    qq += (double)q[c] * q[c];
    rr += (double)r[c] * r[c];
  }
  if (s == SCPS_TOPK_DOT) return d;
  if (s == SCPS_TOPK_COSINE) return qq > 0 && rr > 0 ? d / sqrt(qq * rr) : 0;
  return -(qq + rr - 2 * d);
}

/* The brute force: every id's score in double, the best k by (score, id). */
typedef struct ref_entry {
  double s;
  int64_t id;
} ref_entry;

static int ref_cmp(const void *a, const void *b) {
  const ref_entry *x = a, *y = b;
  if (x->s != y->s) return x->s > y->s ? -1 : 1;
  return (x->id > y->id) - (x->id < y->id);
}

static ref_entry *brute_force(scps_topk_score s, const float *q, const float *rows, int dim, int64_t first,
                              int64_t count, double *by_id) {
  ref_entry *e = malloc(sizeof *e * (size_t)count);
  for (int64_t j = 0; j < count; j++) {
    e[j].id = first + j;
    e[j].s = score_of(s, q, rows + (size_t)(first + j) * (size_t)dim, dim);
    if (by_id) by_id[first + j] = e[j].s;
  }
  qsort(e, (size_t)count, sizeof *e, ref_cmp);
  return e;
}

/* Exact answers equal the brute force id for id (integer rows: every score
 * exact in float32, so ties are true ties). */
static void check_exact_equal(const char *what, scps_topk_score s, const float *q, int m, const float *rows, int dim,
                              int64_t first, int64_t count, int k, const int64_t *ids, const float *scores) {
  for (int i = 0; i < m; i++) {
    ref_entry *e = brute_force(s, q + (size_t)i * (size_t)dim, rows, dim, first, count, NULL);
    int bad = 0;
    for (int j = 0; j < k && !bad; j++)
      if (ids[(size_t)i * (size_t)k + (size_t)j] != e[j].id || scores[(size_t)i * (size_t)k + (size_t)j] != (float)e[j].s)
        bad = j + 1;
    CHECKF(!bad, "%s: query %d rank %d: id %lld score %g, brute force id %lld score %g", what, i, bad - 1,
           (long long)ids[(size_t)i * (size_t)k + (size_t)(bad ? bad - 1 : 0)],
           (double)scores[(size_t)i * (size_t)k + (size_t)(bad ? bad - 1 : 0)], (long long)e[bad ? bad - 1 : 0].id,
           e[bad ? bad - 1 : 0].s);
    free(e);
  }
}

/* Exact answers of real-valued rows: each score within float32 rounding of
 * the double one, in order, and nothing left out that scores clearly
 * better than the worst one returned. */
static void check_exact_close(const char *what, scps_topk_score s, const float *q, int m, const float *rows, int dim,
                              int64_t first, int64_t count, int k, const int64_t *ids, const float *scores) {
  double *by_id = malloc(sizeof *by_id * (size_t)(first + count));
  char *in = malloc((size_t)(first + count));
  for (int i = 0; i < m; i++) {
    ref_entry *e = brute_force(s, q + (size_t)i * (size_t)dim, rows, dim, first, count, by_id);
    memset(in, 0, (size_t)(first + count));
    const int64_t *id = ids + (size_t)i * (size_t)k;
    const float *sc = scores + (size_t)i * (size_t)k;
    double worst = INFINITY, scale = fabs(e[0].s) + 1;
    int bad = 0;
    for (int j = 0; j < k && !bad; j++) {
      if (id[j] < first || id[j] >= first + count || in[id[j]]) {
        bad = 1;
        break;
      }
      in[id[j]] = 1;
      if (fabs(sc[j] - by_id[id[j]]) > 1e-5 * scale || (j && sc[j] > sc[j - 1])) bad = 2;
      if (by_id[id[j]] < worst) worst = by_id[id[j]];
    }
    for (int64_t j = 0; j < count && !bad; j++)
      if (!in[first + j] && by_id[first + j] > worst + 2e-5 * scale) bad = 3;
    CHECKF(!bad, "%s: query %d: answer not a top %d (%s)", what, i, k,
           bad == 1 ? "an id repeated or outside the range" : bad == 2 ? "a score off or out of order"
                                                            : "a better row left out");
    free(e);
  }
  free(by_id);
  free(in);
}

/* Mean |approx ∩ exact| / k over the queries. */
static double recall_of(const int64_t *approx, const int64_t *exact, int m, int k) {
  int64_t hit = 0;
  for (int i = 0; i < m; i++)
    for (int a = 0; a < k; a++)
      for (int b = 0; b < k; b++)
        if (approx[(size_t)i * (size_t)k + (size_t)a] == exact[(size_t)i * (size_t)k + (size_t)b]) {
          hit++;
          break;
        }
  return (double)hit / ((double)m * k);
}

/* Writes the "items" rows with pushes (SGD, rate 1, from zeros: the row
 * becomes minus the gradient) and leaves every other table as it is
 * (gradient 0). */
static int write_items(scps_client *c) {
  scps_error err;
  scps_batch *b = NULL;
  int rc = scps_batch_create(c, &b, &err);
  int64_t ids[4][BATCH];
  float *g[4];
  for (int f = 0; f < 4; f++) g[f] = calloc((size_t)BATCH * 32, sizeof(float));
  for (int step = 0; !rc && step < ITEMS / BATCH; step++) {
    scps_feature_input in[4];
    memset(in, 0, sizeof in);
    for (int f = 0; f < 4; f++) {
      for (int j = 0; j < BATCH; j++) ids[f][j] = f == 0 ? step * BATCH + j : j;
      in[f].form = SCPS_INPUT_DENSE;
      in[f].n_ids = BATCH;
      in[f].ids = ids[f];
      in[f].valency = 1;
      in[f].batch_size = BATCH;
    }
    for (int j = 0; j < BATCH; j++)
      for (int col = 0; col < ITEMS_DIM; col++) g[0][j * ITEMS_DIM + col] = -item_value(step * BATCH + j, col);
    rc = scps_client_prepare(c, in, b, &err);
    if (!rc) rc = scps_client_apply_gradients(c, b, (const float *const *)g, step, -1, 10000, &err);
    if (rc) fprintf(stderr, "write_items: %s\n", err.msg);
  }
  for (int f = 0; f < 4; f++) free(g[f]);
  scps_batch_destroy(b);
  return rc;
}

typedef struct async_wait {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int done, status;
} async_wait;

static void async_done(void *ud, int status, const scps_error *err) {
  (void)err;
  async_wait *w = ud;
  pthread_mutex_lock(&w->mu);
  w->status = status;
  w->done = 1;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

static void run_cluster(int procs, int sc) {
  scps_it_cluster cl;
  scps_error err;
  scps_error_clear(&err);
  scps_client *c = NULL;
  char what[128];
  const int M = 60, KMAX = ITEMS;
  float *q = malloc(sizeof *q * (size_t)M * 64);
  float *items = malloc(sizeof *items * ITEMS * ITEMS_DIM), *vecs = malloc(sizeof *vecs * (size_t)VECS * VECS_DIM);
  float *flat = malloc(sizeof *flat * FLAT * 8), *e4 = malloc(sizeof *e4 * E4 * E4_DIM);
  int64_t *ids = malloc(sizeof *ids * (size_t)M * KMAX), *ids2 = malloc(sizeof *ids2 * (size_t)M * KMAX);
  float *scores = malloc(sizeof *scores * (size_t)M * KMAX), *scores2 = malloc(sizeof *scores2 * (size_t)M * KMAX);
  int64_t *all = malloc(sizeof *all * VECS);
  CHECK(scps_it_init(&cl, config_json, procs, sc) == 0);
  cl.extra[0] = "--partition-limits";
  cl.extra[1] = "1073741824,1073741824";
  if (scps_it_start(&cl)) {
    CHECK(!"the cluster did not start");
    goto out;
  }
  scps_client_options o;
  scps_client_options_init(&o);
  o.servers = cl.addr_list;
  o.n_servers = procs;
  CHECK_OK(scps_client_create(&o, &c, &err), &err);
  if (!c) goto out;
  CHECK(write_items(c) == 0);
  for (int64_t i = 0; i < ITEMS; i++)
    for (int col = 0; col < ITEMS_DIM; col++) items[i * ITEMS_DIM + col] = item_value(i, col);
  for (int64_t i = 0; i < VECS; i++) all[i] = i;
  CHECK_OK(scps_client_read_rows(c, "vecs", all, VECS, vecs, NULL, 30000, &err), &err);
  CHECK_OK(scps_client_read_rows(c, "flat", all, FLAT, flat, NULL, 30000, &err), &err);
  CHECK_OK(scps_client_read_rows(c, "e4", all, E4, e4, NULL, 30000, &err), &err);

  scps_topk_options t;
  scps_topk_info info;
  /* Integer rows and queries: every score exact, ties everywhere. */
  for (int i = 0; i < M * ITEMS_DIM; i++) q[i] = (float)((int)(uniform01() * 7) - 3);
  const scps_topk_score kinds[3] = {SCPS_TOPK_DOT, SCPS_TOPK_NEG_SQUARED_L2, SCPS_TOPK_COSINE};
  const int ks[4] = {1, 5, 37, ITEMS};
  for (int si = 0; si < 3; si++)
    for (int ki = 0; ki < 4; ki++) {
      scps_topk_options_init(&t);
      t.k = ks[ki];
      t.score = kinds[si];
      snprintf(what, sizeof what, "%dx%d items exact %s k %d", procs, sc, scps_topk_score_name(kinds[si]), t.k);
      CHECK_OK(scps_client_topk(c, "items", q, (size_t)M, &t, ids, scores, &info, 30000, &err), &err);
      CHECKF(info.bins == 0 && info.rows_scanned == ITEMS && info.expected_recall == 1.0, "%s: bins %d rows %lld",
             what, info.bins, (long long)info.rows_scanned);
      if (kinds[si] == SCPS_TOPK_COSINE)
        check_exact_close(what, t.score, q, M, items, ITEMS_DIM, 0, ITEMS, t.k, ids, scores);
      else
        check_exact_equal(what, t.score, q, M, items, ITEMS_DIM, 0, ITEMS, t.k, ids, scores);
    }
  /* A range; then one so short that each SparseCore holds fewer rows than k. */
  const int64_t ranges[2][3] = {{100, 333, 10}, {500, 9, 7}};
  for (int r = 0; r < 2; r++)
    for (int approx = 0; approx < 2; approx++) {
      scps_topk_options_init(&t);
      t.first_id = ranges[r][0];
      t.count = ranges[r][1];
      t.k = (int32_t)ranges[r][2];
      t.recall_target = approx ? 0.5 : 1.0;
      snprintf(what, sizeof what, "%dx%d items [%lld, +%lld) k %d recall %g", procs, sc, (long long)t.first_id,
               (long long)t.count, t.k, t.recall_target);
      CHECK_OK(scps_client_topk(c, "items", q, (size_t)M, &t, ids, scores, &info, 30000, &err), &err);
      CHECKF(info.rows_scanned == t.count, "%s: rows %lld", what, (long long)info.rows_scanned);
      /* 333 rows at recall 0.5 and k 10 make L 256, 9 rows none. A
       * SparseCore holding no more rows than L answers exactly, and the
       * answer says no bins were used when none did. */
      const int64_t L = scps__knn_bins(t.count, t.k, t.recall_target),
                    most = (t.count + procs * sc - 1) / (procs * sc) + 1;
      if (!L || most <= L) {
        CHECKF(info.bins == 0 && info.expected_recall == 1.0, "%s: bins %d", what, info.bins);
        check_exact_equal(what, SCPS_TOPK_DOT, q, M, items, ITEMS_DIM, t.first_id, t.count, t.k, ids, scores);
      } else {
        CHECKF(info.bins == L, "%s: bins %d, L %lld", what, info.bins, (long long)L);
      }
    }
  /* All rows equal: every score ties, so the lowest ids win, binned or not. */
  for (int approx = 0; approx < 2; approx++) {
    scps_topk_options_init(&t);
    t.k = approx ? 20 : FLAT;
    t.recall_target = approx ? 0.8 : 1.0;
    for (int i = 0; i < M * 8; i++) q[i] = gauss();
    snprintf(what, sizeof what, "%dx%d flat k %d recall %g", procs, sc, t.k, t.recall_target);
    CHECK_OK(scps_client_topk(c, "flat", q, (size_t)M, &t, ids, scores, &info, 30000, &err), &err);
    int bad = 0;
    for (int i = 0; i < M && !bad; i++)
      for (int j = 0; j < t.k; j++)
        if (ids[(size_t)i * (size_t)t.k + (size_t)j] != j) bad = 1;
    CHECKF(!bad, "%s: tied rows not answered by ascending id", what);
    if (bad) for (int j = 0; j < 12; j++) fprintf(stderr, "  %lld %.9g\n", (long long)ids[j], (double)scores[j]);
  }
  /* Rows stored in e4m3 are scored as they decode (ReadRows's values). */
  for (int i = 0; i < M * E4_DIM; i++) q[i] = gauss();
  scps_topk_options_init(&t);
  t.k = 25;
  snprintf(what, sizeof what, "%dx%d e4 exact", procs, sc);
  CHECK_OK(scps_client_topk(c, "e4", q, (size_t)M, &t, ids, scores, &info, 30000, &err), &err);
  check_exact_close(what, SCPS_TOPK_DOT, q, M, e4, E4_DIM, 0, E4, t.k, ids, scores);

  /* Real-valued rows: exact against the brute force, then recall. */
  for (int i = 0; i < M * VECS_DIM; i++) q[i] = gauss();
  for (int si = 0; si < 3; si++) {
    scps_topk_options_init(&t);
    t.k = 10;
    t.score = kinds[si];
    snprintf(what, sizeof what, "%dx%d vecs exact %s", procs, sc, scps_topk_score_name(kinds[si]));
    CHECK_OK(scps_client_topk(c, "vecs", q, (size_t)M, &t, ids, scores, NULL, 30000, &err), &err);
    check_exact_close(what, t.score, q, M, vecs, VECS_DIM, 0, VECS, t.k, ids, scores);
  }
  /* (N, k, target) triples: the whole table, and a range of it. */
  const struct { int k; double r; int64_t first, count; } cases[6] = {
      {10, 0.9, 0, 0}, {10, 0.95, 0, 0}, {50, 0.9, 0, 0}, {1, 0.9, 0, 0}, {20, 0.85, 5000, 10000}, {100, 0.95, 0, 0}};
  for (int ci = 0; ci < 6; ci++) {
    const int64_t rows_searched = cases[ci].count ? cases[ci].count : VECS;
    double hits = 0, expect = 0;
    int64_t bins = 0;
    const int rounds = 5;
    for (int round = 0; round < rounds; round++) {
      for (int i = 0; i < M * VECS_DIM; i++) q[i] = gauss();
      scps_topk_options_init(&t);
      t.k = cases[ci].k;
      t.first_id = cases[ci].first;
      t.count = cases[ci].count;
      CHECK_OK(scps_client_topk(c, "vecs", q, (size_t)M, &t, ids2, scores2, NULL, 30000, &err), &err);
      t.recall_target = cases[ci].r;
      CHECK_OK(scps_client_topk(c, "vecs", q, (size_t)M, &t, ids, scores, &info, 30000, &err), &err);
      hits += recall_of(ids, ids2, M, t.k);
      expect = info.expected_recall;
      bins = info.bins;
    }
    const double recall = hits / rounds, n = (double)rounds * M * cases[ci].k;
    /* Three standard errors of a mean of n Bernoulli draws at the expectation. */
    const double margin = 3 * sqrt(expect * (1 - expect) / n) + 1e-9;
    CHECKF(bins == scps__knn_bins(rows_searched, cases[ci].k, cases[ci].r), "k %d r %g: bins %lld", cases[ci].k,
           cases[ci].r, (long long)bins);
    CHECKF(recall >= expect - margin && recall >= cases[ci].r,
           "%dx%d vecs k %d target %g: recall %.4f, expected %.4f (L %lld), margin %.4f", procs, sc, cases[ci].k,
           cases[ci].r, recall, expect, (long long)bins, margin);
    printf("%dx%d vecs N %lld k %d target %.2f: L %lld, expected recall %.4f, measured %.4f over %.0f\n", procs, sc,
           (long long)rows_searched, cases[ci].k, cases[ci].r, (long long)bins, expect, recall, n);
  }

  /* A row pushed just before a TopK is found by it: row 12345 moves far
   * along query 0, which then ranks it first, binned or not. */
  {
    scps_batch *b = NULL;
    CHECK_OK(scps_batch_create(c, &b, &err), &err);
    int64_t bid[4][BATCH];
    float *g[4];
    scps_feature_input in[4];
    memset(in, 0, sizeof in);
    for (int f = 0; f < 4; f++) {
      g[f] = calloc((size_t)BATCH * 32, sizeof(float));
      for (int j = 0; j < BATCH; j++) bid[f][j] = j;
      in[f] = (scps_feature_input){.form = SCPS_INPUT_DENSE, .n_ids = BATCH, .ids = bid[f], .valency = 1,
                                   .batch_size = BATCH};
    }
    bid[1][0] = 12345;
    for (int col = 0; col < VECS_DIM; col++) g[1][col] = -50.0f * q[col];
    CHECK_OK(scps_client_prepare(c, in, b, &err), &err);
    CHECK_OK(scps_client_apply_gradients(c, b, (const float *const *)g, 100, -1, 10000, &err), &err);
    for (int approx = 0; approx < 2; approx++) {
      scps_topk_options_init(&t);
      t.k = 10;
      t.recall_target = approx ? 0.9 : 1.0;
      CHECK_OK(scps_client_topk(c, "vecs", q, 1, &t, ids, scores, NULL, 30000, &err), &err);
      CHECKF(ids[0] == 12345, "%dx%d: the row pushed just before is not first (id %lld, recall %g)", procs, sc,
             (long long)ids[0], t.recall_target);
    }
    for (int f = 0; f < 4; f++) free(g[f]);
    scps_batch_destroy(b);
  }

  /* The asynchronous form answers what the blocking one does. */
  {
    async_wait w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
    scps_topk_options_init(&t);
    t.k = 16;
    t.recall_target = 0.9;
    t.score = SCPS_TOPK_COSINE;
    CHECK_OK(scps_client_topk(c, "vecs", q, (size_t)M, &t, ids2, scores2, NULL, 30000, &err), &err);
    CHECK(scps_client_topk_async(c, "vecs", q, (size_t)M, &t, ids, scores, &info, 30000, async_done, &w) == 0);
    pthread_mutex_lock(&w.mu);
    while (!w.done) pthread_cond_wait(&w.cv, &w.mu);
    pthread_mutex_unlock(&w.mu);
    CHECK(w.status == 0);
    CHECK(!memcmp(ids, ids2, sizeof *ids * (size_t)M * 16) && !memcmp(scores, scores2, sizeof *scores * (size_t)M * 16));
  }

  /* Refusals, before anything is sent. */
  scps_topk_options_init(&t);
  CHECK(scps_client_topk(c, "nope", q, 1, &t, ids, scores, NULL, 1000, &err) == SCPS_ENOENT);
  t.k = 0;
  CHECK(scps_client_topk(c, "items", q, 1, &t, ids, scores, NULL, 1000, &err) == SCPS_EINVAL);
  t.k = ITEMS + 1;
  CHECK(scps_client_topk(c, "items", q, 1, &t, ids, scores, NULL, 1000, &err) == SCPS_EINVAL);
  CHECK(strstr(err.msg, "k 1001 not in [1, 1000]") != NULL);
  scps_topk_options_init(&t);
  t.recall_target = 0;
  CHECK(scps_client_topk(c, "items", q, 1, &t, ids, scores, NULL, 1000, &err) == SCPS_EINVAL);
  t.recall_target = 1.5;
  CHECK(scps_client_topk(c, "items", q, 1, &t, ids, scores, NULL, 1000, &err) == SCPS_EINVAL);
  scps_topk_options_init(&t);
  t.first_id = 900;
  t.count = 101;
  CHECK(scps_client_topk(c, "items", q, 1, &t, ids, scores, NULL, 1000, &err) == SCPS_EINVAL);
  scps_topk_options_init(&t);
  snprintf(t.query_format, sizeof t.query_format, "e9m9");
  CHECK(scps_client_topk(c, "items", q, 1, &t, ids, scores, NULL, 1000, &err) == SCPS_EINVAL);
  scps_topk_options_init(&t);
  q[3] = NAN;
  CHECK(scps_client_topk(c, "items", q, 1, &t, ids, scores, NULL, 1000, &err) == SCPS_EINVAL);
  CHECK(strstr(err.msg, "queries[0][3] = nan") != NULL);
out:
  if (c) scps_client_destroy(c);
  scps_it_stop(&cl);
  free(q);
  free(items);
  free(vecs);
  free(flat);
  free(e4);
  free(ids);
  free(ids2);
  free(scores);
  free(scores2);
  free(all);
}

int main(void) {
  /* One SparseCore keeps exactly L bins: recall near the formula itself. */
  run_cluster(1, 1);
  run_cluster(1, 2);
  run_cluster(3, 2);
  return scps_test_finish("test_topk");
}
