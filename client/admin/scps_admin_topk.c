#include "scps_admin_topk.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scps_admin_json.h"
#include "scps_admin_online.h"
#include "scps_admin_rows.h"
#include "scps_client_engine.h"
#include "scps_jsonw.h"
#include "scps_security_flags.h"
#include "scps_units.h"
#include "scps_wirefmt.h"

const char scps_admin_topk_usage[] =
    "usage: scps-admin topk --servers HOST:PORT[,HOST:PORT...] --table NAME\n"
    "                       (--query V1,V2,... | --query-id ID | --queries FILE)\n"
    "                       [--k N] [--score dot|cosine|l2] [--recall R]\n"
    "                       [--range FIRST:COUNT] [--query-format F] [--json]\n"
    "                       [--deadline-ms N]\n"
    "Prints the rows of a table that score highest against query vectors (the\n"
    "TopK RPC, every server scoring its own rows as they are now): per query\n"
    "a table of rank, id and score, best first, then the bins each SparseCore\n"
    "kept, the rows scanned per query and the expected recall. Exit status 1\n"
    "if the servers refused or could not be reached, 2 for bad arguments\n"
    "(also those the table rules out: k above the rows searched, a range or\n"
    "--query-id outside its vocabulary, a value that is not finite).\n"
    "\n"
    "  --servers LIST       every server of the cluster, in process-index order\n"
    "  --table NAME         the table ('scps-admin config' lists them)\n"
    "  --query V1,V2,...    one query: embedding_dim comma-separated values\n"
    "  --query-id ID        one query: the row of id ID of the table as the\n"
    "                       servers hold it (read with ReadRows, which needs an\n"
    "                       admin caller where the servers check roles)\n"
    "  --queries FILE       queries from a file of raw little-endian float32,\n"
    "                       n x embedding_dim values, row-major (n >= 1)\n"
    "  --k N                results per query (default 10), at most the rows\n"
    "                       searched\n"
    "  --score S            dot (q . r, the default), cosine, or l2 (-|q - r|^2,\n"
    "                       nearest first)\n"
    "  --recall R           expected recall in (0, 1] (default 1: exact); below\n"
    "                       1 each SparseCore keeps the best row of each of L\n"
    "                       bins (TPU-KNN), L chosen so the expected recall is\n"
    "                       at least R\n"
    "  --range FIRST:COUNT  search ids [FIRST, FIRST + COUNT) only (default: the\n"
    "                       whole table)\n"
    "  --query-format F     how the queries travel: float32 (default), bfloat16\n"
    "                       or an eXmY format (e4m3, e5m2, ...; embedding_dim a\n"
    "                       multiple of 8)\n"
    "  --json               one JSON object: the call's settings, bins,\n"
    "                       rows_scanned, expected_recall and per query its ids\n"
    "                       and scores (float32 values, exact; a score that is\n"
    "                       NaN, after id -1, as null)\n"
    "  --deadline-ms N      how long to wait for the servers (default 10000)\n" SCPS_SECURITY_USAGE;

static int bad(const char *fmt, const char *arg) { return scps__admin_bad(scps_admin_topk_usage, fmt, arg); }

/* What the command line asks. */
typedef struct topk_args {
  const char *servers, *table, *query, *query_id, *queries_file;
  scps_topk_options o;
  bool json;
  long deadline_ms;
  scps_security_flags sec;
} topk_args;

/* "v1,v2,..." into a malloc'd array of *n floats; NULL after saying why. */
static float *parse_query(const char *text, size_t *n) {
  size_t cap = 1;
  for (const char *p = text; *p; p++) cap += *p == ',';
  float *v = malloc(sizeof *v * cap);
  if (!v) return NULL;
  *n = 0;
  const char *p = text;
  for (;;) {
    char *end;
    errno = 0;
    float x = strtof(p, &end);
    /* ERANGE: beyond float32 (inf), or below its normal range (kept). */
    if (end == p || (errno == ERANGE && isinf(x)) || (*end && *end != ',')) {
      fprintf(stderr, "scps-admin: --query '%s': value %zu ('%.*s') is not a %s\n", text, *n + 1,
              (int)strcspn(p, ","), p, end == p || (*end && *end != ',') ? "number" : "float32 (out of range)");
      free(v);
      return NULL;
    }
    v[(*n)++] = x;
    if (!*end) return v;
    p = end + 1;
  }
}

/* The whole of FILE as float32 queries of dim values each; NULL after
 * saying why. */
static float *read_queries(const char *path, size_t dim, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "scps-admin: --queries '%s': %s\n", path, strerror(errno));
    return NULL;
  }
  size_t cap = 1 << 16, len = 0;
  unsigned char *buf = malloc(cap);
  while (buf) {
    len += fread(buf + len, 1, cap - len, f);
    if (len < cap) break;
    unsigned char *grown = realloc(buf, cap * 2);
    if (!grown) {
      free(buf);
      buf = NULL;
      break;
    }
    buf = grown;
    cap *= 2;
  }
  const bool failed = ferror(f);
  fclose(f);
  const size_t row = dim * sizeof(float);
  if (!buf || failed || !len || len % row) {
    if (!buf) fprintf(stderr, "scps-admin: --queries '%s': out of memory\n", path);
    else if (failed) fprintf(stderr, "scps-admin: --queries '%s': read error\n", path);
    else
      fprintf(stderr, "scps-admin: --queries '%s': %zu bytes is not a whole number (>= 1) of queries of "
              "embedding_dim %zu float32 values (%zu bytes each)\n", path, len, dim, row);
    free(buf);
    return NULL;
  }
  *n = len / row;
  float *q = (float *)(void *)buf;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  for (size_t i = 0; i < len; i += 4) {
    unsigned char t = buf[i];
    buf[i] = buf[i + 3];
    buf[i + 3] = t;
    t = buf[i + 1];
    buf[i + 1] = buf[i + 2];
    buf[i + 2] = t;
  }
#endif
  return q;
}

/* The queries the arguments name, for a table of embedding_dim dim: one of
 * --query, --query-id (read from the servers) and --queries. NULL after
 * saying why (*status the exit status). */
static float *load_queries(const topk_args *a, scps_client *c, size_t dim, size_t *n, int *status) {
  *status = 2;
  if (a->queries_file) return read_queries(a->queries_file, dim, n);
  if (a->query) {
    float *q = parse_query(a->query, n);
    if (q && *n != dim) {
      fprintf(stderr, "scps-admin: --query '%s': %zu values; table '%s' has embedding_dim %zu\n", a->query, *n,
              a->table, dim);
      free(q);
      return NULL;
    }
    *n = 1;
    return q;
  }
  long id;
  scps_error err;
  if (scps__parse_long("--query-id", a->query_id, 0, LONG_MAX, &id, &err)) {
    fprintf(stderr, "scps-admin: %s\n", err.msg);
    return NULL;
  }
  float *q = malloc(sizeof *q * dim);
  const int64_t ids[1] = {id};
  int rc = q ? scps_client_read_rows(c, a->table, ids, 1, q, NULL, a->deadline_ms, &err) : SCPS_ENOMEM;
  if (rc) {
    fprintf(stderr, "scps-admin: --query-id %ld: %s\n", id, q ? err.msg : "out of memory");
    free(q);
    *status = rc == SCPS_EINVAL ? 2 : 1;
    return NULL;
  }
  *n = 1;
  return q;
}

static void print_text(const topk_args *a, size_t n, const int64_t *ids, const float *scores,
                       const scps_topk_info *info) {
  const int32_t k = a->o.k;
  printf("table %s: %zu quer%s, k %d, score %s, recall target %g", a->table, n, n == 1 ? "y" : "ies", k,
         scps_topk_score_name(a->o.score), a->o.recall_target);
  if (a->o.count) printf(", ids [%lld, %lld)", (long long)a->o.first_id, (long long)(a->o.first_id + a->o.count));
  printf("\n");
  for (size_t i = 0; i < n; i++) {
    printf("query %zu\n  %6s %14s %16s\n", i, "rank", "id", "score");
    for (int32_t r = 0; r < k; r++)
      printf("  %6d %14lld %16.9g\n", r + 1, (long long)ids[i * (size_t)k + (size_t)r],
             (double)scores[i * (size_t)k + (size_t)r]);
  }
  printf("bins %d%s, rows scanned %lld per query, expected recall %.6g\n", info->bins,
         info->bins ? "" : " (exact)", (long long)info->rows_scanned, info->expected_recall);
}

static int print_json(const topk_args *a, size_t n, const int64_t *ids, const float *scores,
                      const scps_topk_info *info) {
  const int32_t k = a->o.k;
  scps_jsonw w;
  scps__jsonw_init(&w);
  scps__jsonw_printf(&w, "{\"table\": ");
  scps__jsonw_string(&w, a->table);
  scps__jsonw_printf(&w, ", \"k\": %d, \"score\": \"%s\", \"recall_target\": ", k, scps_topk_score_name(a->o.score));
  scps__jsonw_double(&w, a->o.recall_target);
  scps__jsonw_printf(&w, ", \"first_id\": %lld, \"count\": %lld, \"query_format\": ", (long long)a->o.first_id,
                     (long long)a->o.count);
  scps__jsonw_string(&w, a->o.query_format[0] ? a->o.query_format : "float32");
  scps__jsonw_printf(&w, ", \"bins\": %d, \"rows_scanned\": %lld, \"expected_recall\": ", info->bins,
                     (long long)info->rows_scanned);
  scps__jsonw_double(&w, info->expected_recall);
  scps__jsonw_printf(&w, ", \"queries\": [");
  for (size_t i = 0; i < n; i++) {
    scps__jsonw_printf(&w, "%s\n  {\"ids\": [", i ? "," : "");
    for (int32_t r = 0; r < k; r++)
      scps__jsonw_printf(&w, "%s%lld", r ? ", " : "", (long long)ids[i * (size_t)k + (size_t)r]);
    scps__jsonw_printf(&w, "], \"scores\": [");
    for (int32_t r = 0; r < k; r++) {
      const float s = scores[i * (size_t)k + (size_t)r];
      if (r) scps__jsonw_printf(&w, ", ");
      if (isfinite(s)) scps__jsonw_double(&w, (double)s);
      else scps__jsonw_printf(&w, "null");
    }
    scps__jsonw_printf(&w, "]}");
  }
  scps__jsonw_printf(&w, "]}\n");
  return scps__admin_json_print(&w);
}

static int topk_run(topk_args *a) {
  if (!a->servers) return bad("%s is required", "--servers");
  if (!a->table) return bad("%s is required", "--table");
  if (!!a->query + !!a->query_id + !!a->queries_file != 1)
    return bad("%s", "give one of --query, --query-id and --queries");
  scps_error err;
  scps_client *c = NULL;
  int status = 1;
  float *queries = NULL, *scores = NULL;
  int64_t *ids = NULL;
  size_t n = 0;
  bool bad_list;
  if (scps__admin_connect(a->servers, &a->sec.security, a->deadline_ms, &c, &bad_list, &err)) {
    if (bad_list) return bad("%s", err.msg);
    fprintf(stderr, "scps-admin: %s\n", err.msg);
    goto out;
  }
  const scps_layout *l = scps__client_layout(c);
  const int t = scps__find_table(l->table_specs, l->n_tables, a->table);
  if (t < 0) {
    fprintf(stderr, "scps-admin: --table '%s': the servers serve no such table\n", a->table);
    goto out;
  }
  queries = load_queries(a, c, (size_t)l->table_specs[t].embedding_dim, &n, &status);
  if (!queries) goto out;
  status = 1;
  ids = malloc(sizeof *ids * n * (size_t)a->o.k);
  scores = malloc(sizeof *scores * n * (size_t)a->o.k);
  scps_topk_info info;
  int rc;
  if (!ids || !scores) {
    fprintf(stderr, "scps-admin: out of memory for %zu queries x k %d\n", n, a->o.k);
  } else if ((rc = scps_client_topk(c, a->table, queries, n, &a->o, ids, scores, &info, a->deadline_ms, &err))) {
    /* SCPS_EINVAL: libscps refused the options for this table, sending nothing. */
    fprintf(stderr, "scps-admin: %s\n", err.msg);
    if (rc == SCPS_EINVAL) status = 2;
  } else if (a->json) {
    status = print_json(a, n, ids, scores, &info);
  } else {
    print_text(a, n, ids, scores, &info);
    status = 0;
  }
out:
  scps_client_destroy(c);
  free(queries);
  free(ids);
  free(scores);
  return status;
}

/* "FIRST:COUNT" into o; -1 when it is not that. */
static int parse_range(const char *s, scps_topk_options *o) {
  char *end;
  errno = 0;
  long long first = strtoll(s, &end, 10);
  if (end == s || *end != ':' || errno || first < 0) return -1;
  const char *c = end + 1;
  long long count = strtoll(c, &end, 10);
  if (end == c || *end || errno || count < 1) return -1;
  o->first_id = first;
  o->count = count;
  return 0;
}

/* One option of the command into a; 0, or the exit status after saying why. */
static int parse_option(topk_args *a, int ch, const char *arg) {
  scps_error err;
  long v;
  char *end;
  switch (ch) {
  case 's': a->servers = arg; return 0;
  case 't': a->table = arg; return 0;
  case 'q': a->query = arg; return 0;
  case 'i': a->query_id = arg; return 0;
  case 'f': a->queries_file = arg; return 0;
  case 'j': a->json = true; return 0;
  case 'k':
    if (scps__parse_long("--k", arg, 1, INT32_MAX, &v, &err)) return bad("%s", err.msg);
    a->o.k = (int32_t)v;
    return 0;
  case 'S':
    if (scps_topk_score_from_name(arg, &a->o.score)) return bad("--score '%s': expected dot, cosine or l2", arg);
    return 0;
  case 'r':
    errno = 0;
    a->o.recall_target = strtod(arg, &end);
    if (end == arg || *end || errno || !(a->o.recall_target > 0 && a->o.recall_target <= 1))
      return bad("--recall '%s': expected an expected recall in (0, 1] (1: exact)", arg);
    return 0;
  case 'R':
    if (parse_range(arg, &a->o))
      return bad("--range '%s': expected FIRST:COUNT, ids [FIRST, FIRST + COUNT) with FIRST >= 0 and COUNT >= 1",
                 arg);
    return 0;
  case 'F': {
    scps_wirefmt fmt;
    if (strlen(arg) >= sizeof a->o.query_format || scps__wirefmt_parse(arg, &fmt, &err))
      return bad("--query-format '%s': expected float32, bfloat16 or an eXmY format (e4m3, e5m2, e3m0b-2, ...)",
                 arg);
    snprintf(a->o.query_format, sizeof a->o.query_format, "%s", arg);
    return 0;
  }
  case 'd':
    if (scps__parse_long("--deadline-ms", arg, 1, 86400000, &a->deadline_ms, &err)) return bad("%s", err.msg);
    return 0;
  default: {
    int rc = scps__security_flags_parse(&a->sec, "scps-admin", ch, arg, &err);
    if (rc < 0) return bad("%s", err.msg);
    if (rc == 0) {
      fputs(scps_admin_topk_usage, stderr);
      return 2;
    }
    return 0;
  }
  }
}

int scps__admin_topk(int argc, char **argv) {
  static const struct option opts[] = {{"servers", required_argument, 0, 's'},
                                       {"table", required_argument, 0, 't'},
                                       {"query", required_argument, 0, 'q'},
                                       {"query-id", required_argument, 0, 'i'},
                                       {"queries", required_argument, 0, 'f'},
                                       {"k", required_argument, 0, 'k'},
                                       {"score", required_argument, 0, 'S'},
                                       {"recall", required_argument, 0, 'r'},
                                       {"range", required_argument, 0, 'R'},
                                       {"query-format", required_argument, 0, 'F'},
                                       {"json", no_argument, 0, 'j'},
                                       {"deadline-ms", required_argument, 0, 'd'},
                                       SCPS_SECURITY_LONG_OPTIONS,
                                       {0, 0, 0, 0}};
  topk_args a = {.deadline_ms = 10000};
  scps_topk_options_init(&a.o);
  int ch, status = 0;
  while (!status && (ch = getopt_long(argc, argv, "", opts, NULL)) != -1) status = parse_option(&a, ch, optarg);
  if (!status) status = optind < argc ? bad("unexpected argument '%s'", argv[optind]) : topk_run(&a);
  scps__security_flags_free(&a.sec);
  return status;
}
