/* bench_exmy: eXmY codec throughput (scps_exmy_encode / scps_exmy_decode)
 * on one thread beside memcpy, and the share of values a format flushes to
 * zero or saturates on a workload's initial tables or on real gradients.
 *
 *   scps-bench-exmy [--formats F[,F...]] [--n N] [--reps R]
 *   scps-bench-exmy --stats [--workload FILE] [--rows R] [--formats F[,F...]]
 *   scps-bench-exmy --stats --gradients FILE [--formats F[,F...]]
 *
 * Throughput: N float32 values (default 4M, 16 MB: past the caches), of a
 * pseudo-normal spread, are encoded and decoded R times each (default 9)
 * after one untimed run; the median time gives GB/s of float32 (4N bytes
 * per time) for encode (to nearest even), stochastic encode and decode. A
 * memcpy of the same 4N bytes, timed the same way just before each format,
 * is the yardstick; the ratios are codec / memcpy. One JSON line per format.
 *
 * Stats: the first R rows (default 4096) of every table of the workload
 * (dlrm8.json from $SCPS_SHARED_DIR, else ../shared, by default), made by
 * the engine's initializers (scps__init_row), encoded per format with a
 * per-row scale (scps_exmy_encode_rows) and without one (scale 0). One JSON
 * line per table and format: the fractions of the nonzero values that
 * decode to zero (flushed) and that lie past the largest value
 * (saturated), and the RMS error relative to the RMS value. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scps_clock.h"
#include "scps_exmy.h"
#include "scps_init.h"
#include "scps_units.h"
#include "scps_workload.h"
#include "scps_bench.h"

#define MAX_FORMATS 32
#define MAX_REPS 101

static const char *const default_speed = "e1m1,e2m1,e3m0,e2m2,e3m2,e3m3,e4m3,e5m2,e5m10,e8m7";
static const char *const default_stats = "e3m0,e2m1,e3m1,e2m2,e4m3,e5m2,e0m7";

typedef struct options {
  int stats;
  char formats[512];
  char workload[4096];
  char gradients[4096];
  long n, reps, rows;
} options;

static void usage(FILE *fp) {
  fputs("usage: scps-bench-exmy [--formats F[,F...]] [--n N] [--reps R]\n"
        "       scps-bench-exmy --stats [--workload FILE] [--rows R] [--formats F[,F...]]\n"
        "       scps-bench-exmy --stats --gradients FILE [--formats F[,F...]]\n"
        "Times eXmY encode and decode of N float32 (default 4194304) on one thread\n"
        "beside memcpy, median of R runs (default 9); one JSON line per format.\n"
        "--stats: fractions flushed to zero and saturated on the first R rows\n"
        "(default 4096) of every table of a workload as initialised (default\n"
        "$SCPS_SHARED_DIR/workloads/dlrm8.json), with and without per-row scales;\n"
        "with --gradients, of the gradients scps-trainer --gradient-dump wrote\n"
        "(rows of every feature's width: dim 0). Rounding to nearest: stochastic\n"
        "rounding (libscps's gradients) sends a value below a format's smallest\n"
        "step to 0 or to that step at random, its mean kept.\n",
        fp);
}

static int parse_args(int argc, char **argv, options *o) {
  const char *shared = getenv("SCPS_SHARED_DIR");
  snprintf(o->workload, sizeof o->workload, "%s/workloads/dlrm8.json", shared && *shared ? shared : "../shared");
  o->n = 1 << 22;
  o->reps = 9;
  o->rows = 4096;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    scps_error e;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      exit(0);
    }
    if (!strcmp(a, "--stats")) {
      o->stats = 1;
      continue;
    }
    if (!v) {
      fprintf(stderr, "scps-bench-exmy: %s needs a value\n", a);
      return 2;
    }
    i++;
    int rc = 0;
    if (!strcmp(a, "--formats"))
      snprintf(o->formats, sizeof o->formats, "%s", v);
    else if (!strcmp(a, "--workload"))
      snprintf(o->workload, sizeof o->workload, "%s", v);
    else if (!strcmp(a, "--gradients"))
      snprintf(o->gradients, sizeof o->gradients, "%s", v);
    else if (!strcmp(a, "--n"))
      rc = scps__parse_long("--n", v, 8, (long)1 << 30, &o->n, &e);
    else if (!strcmp(a, "--reps"))
      rc = scps__parse_long("--reps", v, 1, MAX_REPS, &o->reps, &e);
    else if (!strcmp(a, "--rows"))
      rc = scps__parse_long("--rows", v, 1, INT32_MAX, &o->rows, &e);
    else {
      fprintf(stderr, "scps-bench-exmy: unknown option '%s'\n", a);
      usage(stderr);
      return 2;
    }
    if (rc) {
      fprintf(stderr, "scps-bench-exmy: %s\n", e.msg);
      return 2;
    }
  }
  if (!o->formats[0])
    snprintf(o->formats, sizeof o->formats, "%s", o->stats ? default_stats : default_speed);
  return 0;
}

/* The formats of a comma-separated list; their count, or -1. */
static int parse_formats(const char *list, scps_exmy_format *f, char names[][16]) {
  char buf[512];
  snprintf(buf, sizeof buf, "%s", list);
  int n = 0;
  for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
    scps_error err;
    if (n == MAX_FORMATS || scps_exmy_parse(tok, &f[n], &err) != 0) {
      fprintf(stderr, "scps-bench-exmy: --formats '%s': %s\n", tok, n == MAX_FORMATS ? "too many" : err.msg);
      return -1;
    }
    snprintf(names[n++], 16, "%s", tok);
  }
  return n;
}

/* Median seconds of reps runs of one of the three operations (after one
 * untimed run): 0 memcpy, 1 encode, 2 stochastic encode, 3 decode. */
static double time_op(int op, const scps_exmy_format *f, const float *x, size_t n, uint8_t *packed, float *y,
                      long reps) {
  double t[MAX_REPS];
  scps_exmy_rounding sr = {.stochastic = 1, .seed = 1};
  for (long r = -1; r < reps; r++) {
    double t0 = scps__clock_s();
    int rc = 0;
    if (op == 0)
      memcpy(y, x, n * sizeof *x);
    else if (op == 1 || op == 2)
      rc = scps_exmy_encode(f, 0, x, n, packed, op == 2 ? &sr : NULL, NULL);
    else
      rc = scps_exmy_decode(f, 0, packed, n, y, NULL);
    double dt = scps__clock_s() - t0;
    if (rc)
      return NAN;
    if (r >= 0)
      t[r] = dt;
  }
  return scps_bench_median(t, (size_t)reps);
}

static int run_speed(const options *o) {
  scps_exmy_format f[MAX_FORMATS];
  char names[MAX_FORMATS][16];
  int nf = parse_formats(o->formats, f, names);
  if (nf < 0)
    return 2;
  size_t n = (size_t)o->n;
  float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
  uint8_t *packed = malloc(n * 2);
  if (!x || !y || !packed) {
    fprintf(stderr, "scps-bench-exmy: out of memory for %zu values\n", n);
    return 1;
  }
  uint64_t s = 1;
  for (size_t i = 0; i < n; i++) {
    s = s * UINT64_C(6364136223846793005) + UINT64_C(1442695040888963407);
    /* a sum of two uniforms: triangular on [-0.1, 0.1], like an initialised table */
    double u = (double)(s >> 40 & 0xfff) + (double)(s >> 52) - 4096.0;
    x[i] = (float)(u / 4096.0 * 0.1);
  }
  memset(y, 0, n * sizeof *y);
  memset(packed, 0, n * 2);
  for (int k = 0; k < nf; k++) {
    double gb = (double)n * sizeof(float) / 1e9;
    double cp = gb / time_op(0, &f[k], x, n, packed, y, o->reps);
    double enc = gb / time_op(1, &f[k], x, n, packed, y, o->reps);
    double sr = gb / time_op(2, &f[k], x, n, packed, y, o->reps);
    double dec = gb / time_op(3, &f[k], x, n, packed, y, o->reps);
    printf("{\"bench\":\"exmy\",\"format\":\"%s\",\"bits\":%d,\"n\":%zu,\"threads\":1,"
           "\"encode_gbs\":%.3f,\"encode_sr_gbs\":%.3f,\"decode_gbs\":%.3f,\"memcpy_gbs\":%.3f,"
           "\"encode_ratio\":%.3f,\"encode_sr_ratio\":%.3f,\"decode_ratio\":%.3f}\n",
           names[k], f[k].bits, n, enc, sr, dec, cp, enc / cp, sr / cp, dec / cp);
    fflush(stdout);
  }
  free(x);
  free(y);
  free(packed);
  return 0;
}

typedef struct tally {
  size_t values, nonzero, flushed, saturated;
  double err2, val2;
} tally;

/* Adds rows (rows x dim at x, decoded y, scales or NULL for 0) to t;
 * largest is the format's largest value at scale 0. */
static void count(tally *t, const float *x, const float *y, const int8_t *scales, size_t rows, size_t dim,
                  double largest) {
  for (size_t i = 0; i < rows; i++) {
    double top = ldexp(largest, scales ? scales[i] : 0);
    for (size_t j = 0; j < dim; j++) {
      double a = x[i * dim + j], b = y[i * dim + j];
      t->values++;
      t->nonzero += a != 0;
      t->flushed += a != 0 && b == 0;
      t->saturated += fabs(a) > top;
      t->err2 += (a - b) * (a - b);
      t->val2 += a * a;
    }
  }
}

static void print_tally(const char *key, const tally *t) {
  double nz = t->nonzero ? (double)t->nonzero : 1;
  printf("\"%s\":{\"flushed\":%.6g,\"saturated\":%.6g,\"rel_rms_error\":%.4g}", key, (double)t->flushed / nz,
         (double)t->saturated / nz, t->val2 > 0 ? sqrt(t->err2 / t->val2) : 0.0);
}

/* Tallies blocks of rows x dim values (a table's rows, a step's
 * gradients) in format f, with per-row scales and without, into the two
 * tallies. */
static int stats_block(const scps_exmy_format *f, const float *x, size_t rows, size_t dim, tally *scaled,
                       tally *plain, scps_error *err) {
  float *y = malloc(rows * dim * sizeof *y);
  uint8_t *packed = malloc(rows * dim * 2 + 16);
  int8_t *scales = malloc(rows ? rows : 1);
  float inf = INFINITY, largest;
  uint8_t one[2];
  int rc = !y || !packed || !scales ? scps_error_set(err, SCPS_ENOMEM, "out of memory") : 0;
  rc = rc ? rc : scps_exmy_encode(f, 0, &inf, 1, one, NULL, err);
  rc = rc ? rc : scps_exmy_decode(f, 0, one, 1, &largest, err);
  rc = rc ? rc : scps_exmy_encode_rows(f, x, rows, dim, packed, scales, NULL, err);
  rc = rc ? rc : scps_exmy_decode_rows(f, packed, scales, rows, dim, y, err);
  if (rc == 0)
    count(scaled, x, y, scales, rows, dim, largest);
  rc = rc ? rc : scps_exmy_encode(f, 0, x, rows * dim, packed, NULL, err);
  rc = rc ? rc : scps_exmy_decode(f, 0, packed, rows * dim, y, err);
  if (rc == 0)
    count(plain, x, y, NULL, rows, dim, largest);
  free(y);
  free(packed);
  free(scales);
  return rc;
}

static void print_stats(const char *workload, const char *source, const char *name, const char *format,
                        size_t rows, size_t dim, const tally *scaled, const tally *plain) {
  printf("{\"bench\":\"exmy_stats\",\"workload\":\"%s\",\"%s\":\"%s\",\"format\":\"%s\",\"rows\":%zu,"
         "\"dim\":%zu,\"values\":%zu,\"nonzero\":%zu,",
         workload, source, name, format, rows, dim, plain->values, plain->nonzero);
  print_tally("row_scale", scaled);
  putchar(',');
  print_tally("plain", plain);
  puts("}");
}

static int stats_table(const scps_table_spec *t, const scps_exmy_format *f, char names[][16], int nf,
                       long max_rows, const char *workload) {
  size_t rows = (size_t)(t->vocabulary_size < max_rows ? t->vocabulary_size : max_rows);
  size_t dim = (size_t)t->embedding_dim;
  float *x = malloc(rows * dim * sizeof *x);
  if (!x) {
    fprintf(stderr, "scps-bench-exmy: out of memory for table '%s'\n", t->name);
    return 1;
  }
  uint64_t seed = scps__init_seed(t);
  for (size_t i = 0; i < rows; i++)
    scps__init_row(&t->initializer, seed, (int64_t)i, t->embedding_dim, x + i * dim);
  int rc = 0;
  for (int k = 0; k < nf && rc == 0; k++) {
    scps_error err;
    tally scaled = {0}, plain = {0};
    rc = stats_block(&f[k], x, rows, dim, &scaled, &plain, &err);
    if (rc)
      fprintf(stderr, "scps-bench-exmy: table '%s', %s: %s\n", t->name, names[k], err.msg);
    else
      print_stats(workload, "table", t->name, names[k], rows, dim, &scaled, &plain);
  }
  fflush(stdout);
  free(x);
  return rc;
}

/* Gradients as scps-trainer --gradient-dump writes them: blocks of int32
 * dim, int32 rows, then rows x dim float32, all little-endian. One line
 * per format over every block. */
static int stats_gradients(const char *path, const scps_exmy_format *f, char names[][16], int nf) {
  FILE *in = fopen(path, "rb");
  if (!in) {
    fprintf(stderr, "scps-bench-exmy: --gradients '%s': %s\n", path, strerror(errno));
    return 1;
  }
  tally scaled[MAX_FORMATS] = {{0}}, plain[MAX_FORMATS] = {{0}};
  size_t blocks = 0, values = 0, rows = 0;
  int32_t head[2];
  int rc = 0;
  while (rc == 0 && fread(head, sizeof head, 1, in) == 1) {
    if (head[0] < 1 || head[0] > 4096 || head[1] < 0) {
      fprintf(stderr, "scps-bench-exmy: --gradients '%s': block %zu: dim %d rows %d\n", path, blocks, head[0],
              head[1]);
      rc = 1;
      break;
    }
    size_t n = (size_t)head[0] * (size_t)head[1];
    float *x = malloc((n ? n : 1) * sizeof *x);
    if (!x || fread(x, sizeof *x, n, in) != n) {
      fprintf(stderr, "scps-bench-exmy: --gradients '%s': block %zu is short\n", path, blocks);
      rc = 1;
    }
    for (int k = 0; k < nf && rc == 0; k++) {
      scps_error err;
      rc = stats_block(&f[k], x, (size_t)head[1], (size_t)head[0], &scaled[k], &plain[k], &err);
      if (rc)
        fprintf(stderr, "scps-bench-exmy: --gradients block %zu, %s: %s\n", blocks, names[k], err.msg);
    }
    free(x);
    blocks++;
    values += n;
    rows += (size_t)head[1];
  }
  fclose(in);
  for (int k = 0; k < nf && rc == 0; k++)
    print_stats("trainer", "gradients", path, names[k], rows, 0, &scaled[k], &plain[k]);
  if (rc == 0)
    fprintf(stderr, "scps-bench-exmy: %zu gradient values in %zu blocks\n", values, blocks);
  return rc;
}

static int run_stats(const options *o) {
  scps_exmy_format f[MAX_FORMATS];
  char names[MAX_FORMATS][16];
  int nf = parse_formats(o->formats, f, names);
  if (nf < 0)
    return 2;
  if (o->gradients[0])
    return stats_gradients(o->gradients, f, names, nf);
  scps_workload *w = NULL;
  scps_error err;
  if (scps__workload_load(o->workload, &w, &err) != 0) {
    fprintf(stderr, "scps-bench-exmy: %s\n", err.msg);
    return 1;
  }
  int rc = 0;
  for (int i = 0; i < w->n_tables && rc == 0; i++)
    rc = stats_table(&w->tables[i], f, names, nf, o->rows, w->name);
  scps__workload_destroy(w);
  return rc;
}

int main(int argc, char **argv) {
  options o;
  memset(&o, 0, sizeof o);
  int rc = parse_args(argc, argv, &o);
  if (rc)
    return rc;
  return o.stats ? run_stats(&o) : run_speed(&o);
}
