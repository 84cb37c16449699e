/* scps-bench-knn: TopK (TPU-KNN retrieval) throughput and recall of a running
 * cluster, exact and approximate, on one batch of Gaussian queries: what
 * tests/bench/knn.sh sets next to FAISS on the same vectors. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scps_client.h"
#include "scps_clock.h"
#include "scps_error.h"
#include "scps_memtune.h"
#include "scps_bench.h"

static const char usage[] =
    "usage: scps-bench-knn --servers LIST [--table NAME] [--queries N] [--seed S]\n"
    "                      [--k LIST] [--recall R] [--rounds R] [--score dot|cosine|l2]\n"
    "                      [--dump-table FILE] [--dump-queries FILE] [--check N]\n"
    "                      [--piece IDS] [--deadline-ms MS]\n"
    "Times scps_client_topk on one batch of N query vectors (default 256, each\n"
    "value drawn from N(0, 1) with seed S, default 1) against table NAME\n"
    "(default: the table of the servers' first feature), whole: for each k of\n"
    "LIST (default 10,100), first exact (recall target 1), then approximate\n"
    "(recall target R, default 0.95), each one warm-up call and R timed calls\n"
    "(--rounds, default 10) of the whole batch. Prints one JSON line per k and\n"
    "mode: the median and p90 latency, queries/s (N / median), the recall of\n"
    "the approximate answer against scps's own exact one (mean over queries of\n"
    "|approximate ids & exact ids| / k; 1 for exact), the bins L and expected\n"
    "recall the servers reported (scps_topk_info), and the table's rows and dim;\n"
    "a summary goes to stderr.\n"
    "--dump-queries FILE writes the queries, --dump-table FILE the table as the\n"
    "servers hold it (scps_client_read_rows in pieces of IDS ids, default\n"
    "65536), both raw little-endian float32, row-major, for knn_faiss.py.\n"
    "--check N (default 4, 0: none) recomputes the exact top k of the first N\n"
    "queries here in double precision from the table read back and fails when\n"
    "scps's exact answer holds a row that does not belong (beyond float32\n"
    "rounding) or a score that is not the row's.\n";

#define MAX_K 16
#define MAX_ROUNDS 1000

/* A fixed, portable stream: splitmix64, then Box-Muller. */
static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static double uniform01(uint64_t *s) { return ((double)(splitmix64(s) >> 11) + 0.5) * 0x1.0p-53; }

static void gaussian_fill(float *v, size_t n, uint64_t seed) {
  uint64_t s = seed;
  for (size_t i = 0; i < n; i += 2) {
    double r = sqrt(-2.0 * log(uniform01(&s))), t = 2.0 * M_PI * uniform01(&s);
    v[i] = (float)(r * cos(t));
    if (i + 1 < n) v[i + 1] = (float)(r * sin(t));
  }
}

static int write_raw(const char *path, const void *data, size_t bytes, const char *what) {
  FILE *f = fopen(path, "wb");
  if (!f) {
    fprintf(stderr, "scps-bench-knn: %s '%s': %s\n", what, path, strerror(errno));
    return SCPS_EIO;
  }
  size_t put = fwrite(data, 1, bytes, f);
  int bad = put != bytes || fflush(f) != 0;
  if (fclose(f) || bad) {
    fprintf(stderr, "scps-bench-knn: %s '%s': short write\n", what, path);
    return SCPS_EIO;
  }
  return 0;
}

/* The whole table, n_rows x dim floats, read in pieces of `piece` ids. */
static int read_table(scps_client *c, const char *table, int64_t n_rows, int dim, int64_t piece, float *rows,
                      int64_t deadline_ms, scps_error *err) {
  int64_t *ids = malloc(sizeof(int64_t) * (size_t)piece);
  if (!ids) return scps_error_set(err, SCPS_ENOMEM, "--piece %lld: no memory for the ids", (long long)piece);
  int rc = 0;
  for (int64_t first = 0; !rc && first < n_rows; first += piece) {
    int64_t n = n_rows - first < piece ? n_rows - first : piece;
    for (int64_t i = 0; i < n; i++) ids[i] = first + i;
    rc = scps_client_read_rows(c, table, ids, (size_t)n, rows + (size_t)first * (size_t)dim, NULL, deadline_ms, err);
  }
  free(ids);
  return rc;
}

static double score_of(scps_topk_score s, const float *q, const float *r, int dim) {
  double dot = 0, qq = 0, rr = 0;
  for (int j = 0; j < dim; j++) {
    dot += (double)q[j] * r[j];
    qq += (double)q[j] * q[j];
    rr += (double)r[j] * r[j];
  }
  if (s == SCPS_TOPK_DOT) return dot;
  if (s == SCPS_TOPK_COSINE) return qq > 0 && rr > 0 ? dot / sqrt(qq * rr) : 0.0;
  return -(qq + rr - 2.0 * dot);
}

/* How far a float32 score of q and r may stray from the double one: a
 * generous multiple of float32's rounding over dim products. */
static double score_tolerance(scps_topk_score s, const float *q, const float *r, int dim) {
  double qq = 0, rr = 0;
  for (int j = 0; j < dim; j++) {
    qq += (double)q[j] * q[j];
    rr += (double)r[j] * r[j];
  }
  double scale = s == SCPS_TOPK_COSINE ? 1.0 : s == SCPS_TOPK_DOT ? sqrt(qq * rr) : qq + rr + 2.0 * sqrt(qq * rr);
  return 1e-5 * (double)dim * scale + 1e-30;
}

/* Checks scps's exact answer for query q (ids, scores: k each) against the
 * k-th best double-precision score over every row: every id must score
 * within rounding of at least that, and its float32 score must be its own.
 * Returns the number of faults, the first described in msg. */
static int check_exact(scps_topk_score s, const float *table, int64_t n_rows, int dim, const float *q, int k,
                       const int64_t *ids, const float *scores, char *msg, size_t msg_len) {
  /* The k best scores, ascending, kept by insertion: k is small. */
  double *best = malloc(sizeof(double) * (size_t)k);
  if (!best) {
    snprintf(msg, msg_len, "no memory for the check");
    return 1;
  }
  int have = 0;
  for (int64_t r = 0; r < n_rows; r++) {
    double v = score_of(s, q, table + (size_t)r * (size_t)dim, dim);
    if (have < k) { /* fill: insert from the top down */
      int i = have++;
      for (; i > 0 && best[i - 1] > v; i--) best[i] = best[i - 1];
      best[i] = v;
    } else if (v > best[0]) { /* replace the worst, moving up */
      int i = 0;
      for (; i + 1 < k && best[i + 1] < v; i++) best[i] = best[i + 1];
      best[i] = v;
    }
  }
  double kth = best[0];
  free(best);
  int faults = 0;
  for (int i = 0; i < k; i++) {
    if (ids[i] < 0 || ids[i] >= n_rows) {
      if (!faults++) snprintf(msg, msg_len, "result %d: id %lld outside [0, %lld)", i, (long long)ids[i], (long long)n_rows);
      continue;
    }
    const float *row = table + (size_t)ids[i] * (size_t)dim;
    double v = score_of(s, q, row, dim), tol = score_tolerance(s, q, row, dim);
    if (fabs((double)scores[i] - v) > tol) {
      if (!faults++)
        snprintf(msg, msg_len, "result %d: id %lld scored %.9g, its score is %.9g", i, (long long)ids[i], scores[i], v);
    } else if (v < kth - 2 * tol) {
      if (!faults++)
        snprintf(msg, msg_len, "result %d: id %lld scores %.9g, below the k-th best %.9g", i, (long long)ids[i], v, kth);
    }
  }
  return faults;
}

/* Mean over queries of |a's ids & b's ids| / k (each query's k ids distinct). */
static double recall_of(const int64_t *a, const int64_t *b, int64_t n_queries, int k) {
  double sum = 0;
  for (int64_t q = 0; q < n_queries; q++) {
    const int64_t *x = a + q * k, *y = b + q * k;
    int hit = 0;
    for (int i = 0; i < k; i++)
      for (int j = 0; j < k; j++)
        if (x[i] == y[j]) {
          hit++;
          break;
        }
    sum += (double)hit / k;
  }
  return n_queries ? sum / (double)n_queries : 0.0;
}

static int parse_long(const char *opt, const char *s, long long lo, long long hi, long long *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) {
    fprintf(stderr, "scps-bench-knn: %s: '%s' is not an integer in [%lld, %lld]\n", opt, s, lo, hi);
    return SCPS_EINVAL;
  }
  *out = v;
  return 0;
}

typedef struct timing {
  double median_ms, p90_ms, min_ms;
} timing;

static timing timing_of(double *ms, int n) {
  timing t;
  scps_bench_sort(ms, (size_t)n);
  t.median_ms = scps_bench_median(ms, (size_t)n);
  int i90 = (int)ceil(0.9 * n) - 1;
  t.p90_ms = ms[i90 < 0 ? 0 : i90];
  t.min_ms = ms[0];
  return t;
}

int main(int argc, char **argv) {
  char *servers_arg = NULL, *k_arg = NULL;
  const char *table = NULL, *dump_table = NULL, *dump_queries = NULL, *score_name = "dot";
  long long n_queries = 256, seed = 1, rounds = 10, check = 4, piece = 65536, deadline_ms = 600000;
  double recall = 0.95;
  scps_memtune_apply();
  static const struct option opts[] = {
      {"servers", required_argument, 0, 's'},      {"table", required_argument, 0, 't'},
      {"queries", required_argument, 0, 'q'},      {"seed", required_argument, 0, 'S'},
      {"k", required_argument, 0, 'k'},            {"recall", required_argument, 0, 'r'},
      {"rounds", required_argument, 0, 'R'},       {"score", required_argument, 0, 'c'},
      {"dump-table", required_argument, 0, 'T'},   {"dump-queries", required_argument, 0, 'Q'},
      {"check", required_argument, 0, 'C'},        {"piece", required_argument, 0, 'p'},
      {"deadline-ms", required_argument, 0, 'd'},  {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  scps_topk_score score = SCPS_TOPK_DOT;
  int o;
  while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    int bad = 0;
    switch (o) {
    case 's': servers_arg = optarg; break;
    case 't': table = optarg; break;
    case 'q': bad = parse_long("--queries", optarg, 1, 1 << 20, &n_queries); break;
    case 'S': bad = parse_long("--seed", optarg, 0, INT64_MAX, &seed); break;
    case 'k': k_arg = optarg; break;
    case 'r': {
      char *end;
      recall = strtod(optarg, &end);
      if (end == optarg || *end || !(recall > 0 && recall <= 1)) {
        fprintf(stderr, "scps-bench-knn: --recall: '%s' is not in (0, 1]\n", optarg);
        bad = 1;
      }
      break;
    }
    case 'R': bad = parse_long("--rounds", optarg, 1, MAX_ROUNDS, &rounds); break;
    case 'c':
      score_name = optarg;
      if (scps_topk_score_from_name(optarg, &score)) {
        fprintf(stderr, "scps-bench-knn: --score: '%s' is not dot, cosine or l2\n", optarg);
        bad = 1;
      }
      break;
    case 'T': dump_table = optarg; break;
    case 'Q': dump_queries = optarg; break;
    case 'C': bad = parse_long("--check", optarg, 0, 1 << 20, &check); break;
    case 'p': bad = parse_long("--piece", optarg, 1, 1 << 24, &piece); break;
    case 'd': bad = parse_long("--deadline-ms", optarg, 1, INT64_MAX / 2, &deadline_ms); break;
    case 'h': fputs(usage, stdout); return 0;
    default: bad = 1;
    }
    if (bad) {
      fputs(usage, stderr);
      return 2;
    }
  }
  if (!servers_arg || optind != argc) {
    fprintf(stderr, "scps-bench-knn: %s\n%s", servers_arg ? "unexpected argument" : "--servers is required", usage);
    return 2;
  }
  long long ks[MAX_K];
  int n_k = 0;
  {
    char *list = k_arg ? k_arg : (char[]){"10,100"};
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
      if (n_k == MAX_K) {
        fprintf(stderr, "scps-bench-knn: --k: more than %d values\n", MAX_K);
        return 2;
      }
      if (parse_long("--k", tok, 1, INT32_MAX, &ks[n_k])) return 2;
      n_k++;
    }
    if (!n_k) {
      fprintf(stderr, "scps-bench-knn: --k: no value\n");
      return 2;
    }
  }
  const char *servers[256];
  int n_servers = 0;
  scps_error err;
  scps_client *c = NULL;
  int rc = scps_address_list_split(servers_arg, servers, 256, &n_servers, &err);
  if (!rc) {
    scps_client_options co;
    scps_client_options_init(&co);
    co.servers = servers;
    co.n_servers = n_servers;
    rc = scps_client_create(&co, &c, &err);
  }
  if (rc) {
    fprintf(stderr, "scps-bench-knn: %s\n", err.msg);
    return 1;
  }
  /* The table's shape comes from a feature that reads it. */
  int feature = -1;
  for (int f = 0; f < scps_client_n_features(c) && feature < 0; f++)
    if (!table || !strcmp(scps_client_feature_table(c, f), table)) feature = f;
  if (feature < 0) {
    fprintf(stderr, "scps-bench-knn: --table '%s': no feature of the servers reads it\n", table ? table : "");
    scps_client_destroy(c);
    return 1;
  }
  if (!table) table = scps_client_feature_table(c, feature);
  int64_t n_rows = scps_client_feature_vocabulary(c, feature);
  int dim = scps_client_feature_width(c, feature);
  for (int i = 0; i < n_k; i++)
    if (ks[i] > n_rows) {
      fprintf(stderr, "scps-bench-knn: --k: %lld is above table '%s''s %lld rows\n", ks[i], table, (long long)n_rows);
      scps_client_destroy(c);
      return 2;
    }
  if (check > n_queries) check = n_queries;
  size_t qn = (size_t)n_queries * (size_t)dim;
  float *queries = malloc(sizeof(float) * qn);
  if (!queries) {
    fprintf(stderr, "scps-bench-knn: --queries %lld: no memory\n", n_queries);
    return 1;
  }
  gaussian_fill(queries, qn, (uint64_t)seed);
  if (dump_queries && write_raw(dump_queries, queries, sizeof(float) * qn, "--dump-queries")) return 1;

  float *rows = NULL;
  if (dump_table || check) {
    rows = malloc(sizeof(float) * (size_t)n_rows * (size_t)dim);
    if (!rows) {
      fprintf(stderr, "scps-bench-knn: table '%s': no memory for %lld rows x %d\n", table, (long long)n_rows, dim);
      return 1;
    }
    double t0 = scps__clock_s();
    rc = read_table(c, table, n_rows, dim, piece, rows, deadline_ms, &err);
    if (rc) {
      fprintf(stderr, "scps-bench-knn: reading table '%s': %s\n", table, err.msg);
      return 1;
    }
    fprintf(stderr, "scps-bench-knn: read table '%s' (%lld x %d) in %.2f s\n", table, (long long)n_rows, dim,
            scps__clock_s() - t0);
    if (dump_table && write_raw(dump_table, rows, sizeof(float) * (size_t)n_rows * (size_t)dim, "--dump-table"))
      return 1;
  }

  fprintf(stderr, "scps-bench-knn: table '%s' %lld x %d, %lld queries, score %s, %d server(s), %lld rounds\n", table,
          (long long)n_rows, dim, n_queries, score_name, n_servers, rounds);
  int failed = 0;
  double ms[MAX_ROUNDS];
  for (int ki = 0; ki < n_k && !failed; ki++) {
    int k = (int)ks[ki];
    size_t out_n = (size_t)n_queries * (size_t)k;
    int64_t *exact_ids = malloc(sizeof(int64_t) * out_n), *ids = malloc(sizeof(int64_t) * out_n);
    float *exact_scores = malloc(sizeof(float) * out_n), *scores = malloc(sizeof(float) * out_n);
    if (!exact_ids || !ids || !exact_scores || !scores) {
      fprintf(stderr, "scps-bench-knn: --k %d: no memory for the answers\n", k);
      return 1;
    }
    /* Exact first: its answer is the approximate one's ground truth. */
    for (int approx = 0; approx < 2 && !failed; approx++) {
      scps_topk_options to;
      scps_topk_options_init(&to);
      to.k = k;
      to.score = score;
      to.recall_target = approx ? recall : 1.0;
      int64_t *out_ids = approx ? ids : exact_ids;
      float *out_scores = approx ? scores : exact_scores;
      scps_topk_info info = {0};
      for (long long r = -1; r < rounds; r++) { /* round -1: the warm-up */
        double t0 = scps__clock_s();
        rc = scps_client_topk(c, table, queries, (size_t)n_queries, &to, out_ids, out_scores, &info, deadline_ms, &err);
        double t1 = scps__clock_s();
        if (rc) {
          fprintf(stderr, "scps-bench-knn: TopK k %d, recall target %g: %s\n", k, to.recall_target, err.msg);
          failed = 1;
          break;
        }
        if (r >= 0) ms[r] = (t1 - t0) * 1e3;
      }
      if (failed) break;
      double rec = approx ? recall_of(ids, exact_ids, n_queries, k) : 1.0;
      if (!approx && check) {
        char msg[320];
        int faults = 0;
        for (long long q = 0; q < check; q++) {
          char one[256];
          int f = check_exact(score, rows, n_rows, dim, queries + (size_t)q * (size_t)dim, k,
                              exact_ids + (size_t)q * (size_t)k, exact_scores + (size_t)q * (size_t)k, one, sizeof one);
          if (f && !faults) snprintf(msg, sizeof msg, "query %lld: %s", q, one);
          faults += f;
        }
        if (faults) {
          fprintf(stderr, "scps-bench-knn: exact TopK k %d is wrong on %d results of the first %lld queries; %s\n", k,
                  faults, check, msg);
          failed = 1;
          break;
        }
      }
      timing t = timing_of(ms, (int)rounds);
      double qps = (double)n_queries / (t.median_ms * 1e-3);
      printf("{\"bench\": \"knn\", \"mode\": \"%s\", \"k\": %d, \"recall_target\": %g, \"processes\": %d, "
             "\"table\": \"%s\", \"score\": \"%s\", \"rows\": %lld, \"dim\": %d, \"queries\": %lld, \"rounds\": %lld, "
             "\"median_ms\": %.3f, \"p90_ms\": %.3f, \"min_ms\": %.3f, \"qps\": %.1f, \"recall\": %.4f, "
             "\"bins\": %d, \"expected_recall\": %.4f, \"rows_scanned\": %lld, \"checked_queries\": %lld}\n",
             approx ? "approx" : "exact", k, to.recall_target, n_servers, table, score_name, (long long)n_rows, dim,
             n_queries, rounds, t.median_ms, t.p90_ms, t.min_ms, qps, rec, info.bins, info.expected_recall,
             (long long)info.rows_scanned, approx ? 0LL : check);
      fflush(stdout);
      fprintf(stderr, "  k %3d %-6s median %8.2f ms  p90 %8.2f ms  %9.0f queries/s  recall %.4f  bins %d (expected %.4f)\n",
              k, approx ? "approx" : "exact", t.median_ms, t.p90_ms, qps, rec, info.bins, info.expected_recall);
      if (approx && rec < recall)
        fprintf(stderr, "scps-bench-knn: k %d: recall %.4f is below the target %g (expected %.4f for L %d)\n", k, rec,
                recall, info.expected_recall, info.bins);
    }
    free(exact_ids);
    free(ids);
    free(exact_scores);
    free(scores);
  }
  free(rows);
  free(queries);
  scps_client_destroy(c);
  return failed ? 1 : 0;
}
