/* scps-loadgen: drives an scps cluster with a workload's batches from many
 * concurrent clients and reports throughput, traffic, latency and errors. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scps_security_flags.h"
#include "scps_loadgen.h"
#include "scps_loadgen_report.h"
#include "scps_memtune.h"
#include "scps_version.h"

#define MAX_SERVERS 256
#define MAX_CONCURRENCY 1024

static const char usage[] =
    "usage: scps-loadgen --workload FILE --servers HOST:PORT[,HOST:PORT...] --mode lookup|train|mixed [options]\n"
    "       scps-loadgen [--workload FILE] --servers HOST:PORT[,HOST:PORT...] --mode topk --table NAME [options]\n"
    "Drives a running scps cluster with the workload's batches (a file in the\n"
    "format of shared/workloads/*.json), or with top-k queries, and reports what\n"
    "it sustained.\n"
    "\n"
    "  --workload FILE        tables, features, batch size and id distribution; the\n"
    "                         cluster must serve the same tables and features\n"
    "                         (optional in topk mode: then any cluster serving --table)\n"
    "  --servers LIST         every server process, in process-index order\n"
    "  --mode M               lookup: a request is one Lookup of a batch;\n"
    "                         train: a Lookup, then ApplyGradients of that batch\n"
    "                         (each client counts its own steps, from the one\n"
    "                         after the step the servers hold);\n"
    "                         mixed: train with probability --train-fraction, else lookup;\n"
    "                         topk: a request is one TopK call of --queries-per-call\n"
    "                         query vectors (standard Gaussian values, seeded by the\n"
    "                         client's index) against --table\n"
    "  --train-fraction F     mixed only: share of train requests, in [0, 1] (default 0.1)\n"
    "  --table NAME           topk: the table searched\n"
    "  --k N                  topk: results per query (default 10)\n"
    "  --score S              topk: dot (default), cosine or l2\n"
    "  --recall R             topk: expected recall in (0, 1] (default 1: exact)\n"
    "  --queries-per-call N   topk: queries in each TopK call (default 256)\n"
    "  --query-format F       topk: how queries travel: float32 (default), bfloat16\n"
    "                         or an eXmY format (embedding_dim a multiple of 8)\n"
    "  --recall-sample N      topk: one answered call in N of each client is sent\n"
    "                         again with --recall 1, outside its latency, and the\n"
    "                         overlap |approximate ids & exact ids| / k averaged over\n"
    "                         its queries: the measured recall (default 20; 0: none)\n"
    "  --concurrency C        clients, each with its own libscps client and\n"
    "                         connections, one request out at a time (default 1)\n"
    "  --rate R               open loop: R requests/s over all clients, each client\n"
    "                         sending on a fixed schedule; latency counts from when a\n"
    "                         request was due, so queueing behind a slow one shows.\n"
    "                         Without it: closed loop, each client sends its next\n"
    "                         request when the previous one is answered\n"
    "  --duration S           measure for S seconds (default 10)\n"
    "  --requests N           measure N requests instead of a duration\n"
    "  --warmup S             load for S seconds first, unmeasured (default 1)\n"
    "  --wire-format F        activations and gradients on the wire: float32 (default),\n"
    "                         bfloat16 (bf16) or eXmY (e4m3, e5m2, e3m0s: s a scale per\n"
    "                         row, e3m0b-2: a bias); ACTS/GRADS each its own (e4m3/e3m0s)\n"
    "  --answer A             auto, pooled or rows: how servers answer lookups, pooled\n"
    "                         activations or each partition's distinct rows pooled by\n"
    "                         the client (default auto: rows where they take no more bytes)\n"
    "  --gradients G          auto, sample or row: how pushes send gradients, every\n"
    "                         sample's with the partitions, or each server's distinct\n"
    "                         rows with their sums (default auto: by row where that takes\n"
    "                         at most 3/4 of the bytes by sample)\n"
    "  --shared-memory M      auto or off: answers and gradients by sample through\n"
    "                         memory shared with servers on this host that offer it\n"
    "                         (default auto; off: every byte over the connections)\n"
    "  --deadline-ms MS       deadline of each request from when it is sent; a lookup\n"
    "                         retries UNAVAILABLE servers (and CANCELLED, from a\n"
    "                         draining server) within it (default 5000)\n"
    "  --connect-timeout-ms MS  how long each client waits for the servers at the\n"
    "                         start (default 10000)\n"
    "  --cq-threads N         completion-queue threads per client, 1 to 16 (default 1:\n"
    "                         a client has one request out at a time; a second\n"
    "                         thread only adds wakeups to every answer)\n"
    "  --json FILE            also write the report as JSON\n"
    "  --plot FILE.png        draw latency p50/p99 and requests/s over time (needs gnuplot)\n"
    "  --quiet                no progress line on stderr (one per second otherwise)\n"
    "  --help                 this text\n"
    "  --version              print the version and exit\n"
    SCPS_SECURITY_USAGE
    "\n"
    "Each client preprocesses 4 batches of its own before the load and cycles\n"
    "through them (topk: 4 sets of queries). The report (stdout) gives\n"
    "requests/s (answered OK or not),\n"
    "samples/s and ids/s of requests answered OK, open loop the requests due\n"
    "before the end that were never sent (their clients still waiting for an\n"
    "answer: the run ends at --duration), payload MB/s sent and received (1 MB = 10^6 bytes),\n"
    "latency percentiles of OK requests (histogram, within 0.4%), errors by\n"
    "status (UNAVAILABLE, CANCELLED, DEADLINE_EXCEEDED, INVALID_ARGUMENT, ...) and\n"
    "the latency of failed requests (p50, p99, max from when each was sent, as\n"
    "--deadline-ms counts: open loop, the time it was due but waited for its\n"
    "client's previous request is send lag, not part of it). --json adds a\n"
    "per-second timeline: requests/s, OK and failed requests ended in that second,\n"
    "p50 and p99 of the OK ones. In topk mode the report gives calls/s and\n"
    "queries/s instead of samples and ids, and the recall measured beside the\n"
    "expected recall libscps reports for the bins the servers used. Exit status:\n"
    "0 after a run (even with errors), 1 when the run could not start, 2 for bad flags.\n"
    "SIGINT or SIGTERM ends the run early, as --duration running out would then\n"
    "(within a second): requests out are answered or time out, and the report\n"
    "covers the run so far.\n";

/* getopt_long values of the topk flags: above every character, below the
 * security flags'. */
enum {
  FLAG_TABLE = 1000,
  FLAG_K,
  FLAG_SCORE,
  FLAG_RECALL,
  FLAG_QUERIES_PER_CALL,
  FLAG_QUERY_FORMAT,
  FLAG_RECALL_SAMPLE
};

static void on_stop_signal(int sig) {
  (void)sig;
  scps__loadgen_stop();
}

static int bad_flag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int bad_flag(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("scps-loadgen: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputs(" (try --help)\n", stderr);
  va_end(ap);
  return 2;
}

/* A whole-string double in [lo, hi]. */
static int parse_double(const char *s, double lo, double hi, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

static int parse_int(const char *s, long long lo, long long hi, long long *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

static const char *base_name(const char *path) {
  const char *s = strrchr(path, '/');
  return s ? s + 1 : path;
}

int main(int argc, char **argv) {
  const char *workload_path = NULL, *json = NULL, *plot = NULL;
  char *servers_arg = NULL;
  bool have_mode = false, have_fraction = false, have_duration = false, quiet = false;
  scps_loadgen_options o = {.concurrency = 1,
                            .train_fraction = 0.1,
                            .duration_s = 10.0,
                            .warmup_s = 1.0,
                            .deadline_ms = 5000,
                            .connect_timeout_ms = 10000,
                            .cq_threads = 1,
                            .queries_per_call = 256,
                            .recall_sample = 20};
  scps_topk_options_init(&o.topk);
  /* The last flag given of each kind, for the check that it fits --mode. */
  const char *topk_flag = NULL, *batch_flag = NULL;
  static const struct option opts[] = {{"workload", required_argument, 0, 'w'},
                                       {"servers", required_argument, 0, 's'},
                                       {"mode", required_argument, 0, 'm'},
                                       {"train-fraction", required_argument, 0, 'f'},
                                       {"concurrency", required_argument, 0, 'c'},
                                       {"rate", required_argument, 0, 'r'},
                                       {"duration", required_argument, 0, 'd'},
                                       {"requests", required_argument, 0, 'n'},
                                       {"warmup", required_argument, 0, 'u'},
                                       {"wire-format", required_argument, 0, 'W'},
                                       {"answer", required_argument, 0, 'A'},
                                       {"gradients", required_argument, 0, 'G'},
                                       {"shared-memory", required_argument, 0, 'M'},
                                       {"deadline-ms", required_argument, 0, 'D'},
                                       {"connect-timeout-ms", required_argument, 0, 'T'},
                                       {"cq-threads", required_argument, 0, 'Q'},
                                       {"json", required_argument, 0, 'j'},
                                       {"plot", required_argument, 0, 'p'},
                                       {"quiet", no_argument, 0, 'q'},
                                       {"help", no_argument, 0, 'h'},
                                       {"version", no_argument, 0, 'V'},
                                       {"table", required_argument, 0, FLAG_TABLE},
                                       {"k", required_argument, 0, FLAG_K},
                                       {"score", required_argument, 0, FLAG_SCORE},
                                       {"recall", required_argument, 0, FLAG_RECALL},
                                       {"queries-per-call", required_argument, 0, FLAG_QUERIES_PER_CALL},
                                       {"query-format", required_argument, 0, FLAG_QUERY_FORMAT},
                                       {"recall-sample", required_argument, 0, FLAG_RECALL_SAMPLE},
                                       SCPS_SECURITY_LONG_OPTIONS,
                                       {0, 0, 0, 0}};
  static scps_security_flags sec; /* static: reachable whichever way main returns */
  opterr = 0;
  int c;
  long long n;
  while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
    switch (c) {
    case 'w': workload_path = optarg; break;
    case 's': servers_arg = optarg; break;
    case 'm':
      if (scps__loadgen_mode_from_name(optarg, &o.mode))
        return bad_flag("--mode '%s': expected lookup, train, mixed or topk", optarg);
      have_mode = true;
      break;
    case 'f':
      if (parse_double(optarg, 0.0, 1.0, &o.train_fraction))
        return bad_flag("--train-fraction '%s': expected a fraction in [0, 1]", optarg);
      have_fraction = true;
      break;
    case 'c':
      if (parse_int(optarg, 1, MAX_CONCURRENCY, &n))
        return bad_flag("--concurrency '%s': expected a number of clients from 1 to 1024", optarg);
      o.concurrency = (int)n;
      break;
    case 'r':
      if (parse_double(optarg, 1e-3, 1e9, &o.rate))
        return bad_flag("--rate '%s': expected requests per second in [0.001, 1e9]", optarg);
      break;
    case 'd':
      if (parse_double(optarg, 1e-3, 1e7, &o.duration_s))
        return bad_flag("--duration '%s': expected seconds in [0.001, 1e7]", optarg);
      have_duration = true;
      break;
    case 'n':
      if (parse_int(optarg, 1, (long long)1 << 50, &n))
        return bad_flag("--requests '%s': expected a number of requests in [1, 2^50]", optarg);
      o.requests = n;
      break;
    case 'u':
      if (parse_double(optarg, 0.0, 1e7, &o.warmup_s))
        return bad_flag("--warmup '%s': expected seconds in [0, 1e7]", optarg);
      break;
    case 'W':
      batch_flag = "--wire-format";
      {
        scps_client_options probe;
        scps_error e;
        scps_client_options_init(&probe);
        if (scps_client_options_set_wire_format(&probe, optarg, &e)) return bad_flag("--wire-format: %s", e.msg);
        o.wire_format = optarg;
      }
      break;
    case 'A':
      batch_flag = "--answer";
      if (scps_answer_mode_from_name(optarg, &o.answer))
        return bad_flag("--answer '%s': expected auto, pooled or rows", optarg);
      break;
    case 'G':
      batch_flag = "--gradients";
      if (scps_gradient_mode_from_name(optarg, &o.gradients))
        return bad_flag("--gradients '%s': expected auto, sample or row", optarg);
      break;
    case 'M':
      batch_flag = "--shared-memory";
      if (strcmp(optarg, "auto") && strcmp(optarg, "off"))
        return bad_flag("--shared-memory '%s': expected auto or off", optarg);
      o.shared_memory = strcmp(optarg, "off") ? SCPS_SHM_AUTO : SCPS_SHM_OFF;
      break;
    case 'D':
      if (parse_int(optarg, 1, 86400000, &n))
        return bad_flag("--deadline-ms '%s': expected milliseconds in [1, 86400000]", optarg);
      o.deadline_ms = n;
      break;
    case 'T':
      if (parse_int(optarg, 1, 86400000, &n))
        return bad_flag("--connect-timeout-ms '%s': expected milliseconds in [1, 86400000]", optarg);
      o.connect_timeout_ms = n;
      break;
    case 'Q':
      if (parse_int(optarg, 1, 16, &n))
        return bad_flag("--cq-threads '%s': expected a number of threads from 1 to 16", optarg);
      o.cq_threads = (int)n;
      break;
    case 'j': json = optarg; break;
    case 'p': plot = optarg; break;
    case 'q': quiet = true; break;
    case FLAG_TABLE: o.table = optarg; topk_flag = "--table"; break;
    case FLAG_K:
      if (parse_int(optarg, 1, INT32_MAX, &n)) return bad_flag("--k '%s': expected results per query >= 1", optarg);
      o.topk.k = (int32_t)n;
      topk_flag = "--k";
      break;
    case FLAG_SCORE:
      if (scps_topk_score_from_name(optarg, &o.topk.score))
        return bad_flag("--score '%s': expected dot, cosine or l2", optarg);
      topk_flag = "--score";
      break;
    case FLAG_RECALL:
      if (parse_double(optarg, 0.0, 1.0, &o.topk.recall_target) || !(o.topk.recall_target > 0))
        return bad_flag("--recall '%s': expected an expected recall in (0, 1] (1: exact)", optarg);
      topk_flag = "--recall";
      break;
    case FLAG_QUERIES_PER_CALL:
      if (parse_int(optarg, 1, 1 << 20, &n))
        return bad_flag("--queries-per-call '%s': expected a number of queries from 1 to 1048576", optarg);
      o.queries_per_call = (int)n;
      topk_flag = "--queries-per-call";
      break;
    case FLAG_QUERY_FORMAT: {
      scps_client_options probe;
      scps_error e;
      scps_client_options_init(&probe);
      if (strlen(optarg) >= sizeof o.topk.query_format || strchr(optarg, '/') ||
          scps_client_options_set_wire_format(&probe, optarg, &e))
        return bad_flag("--query-format '%s': expected float32, bfloat16 or an eXmY format (e4m3, e5m2, ...)",
                        optarg);
      snprintf(o.topk.query_format, sizeof o.topk.query_format, "%s", optarg);
      topk_flag = "--query-format";
      break;
    }
    case FLAG_RECALL_SAMPLE:
      if (parse_int(optarg, 0, INT32_MAX, &n))
        return bad_flag("--recall-sample '%s': expected a number of calls >= 0 (0: no recall measured)", optarg);
      o.recall_sample = (int)n;
      topk_flag = "--recall-sample";
      break;
    case 'h': fputs(usage, stdout); return 0;
    case 'V': printf("scps-loadgen %s\n", scps_version()); return 0;
    case ':': return bad_flag("%s needs a value", argv[optind - 1]);
    default: {
      scps_error fe;
      int handled = scps__security_flags_parse(&sec, "scps-loadgen", c, optarg, &fe);
      if (handled < 0) return bad_flag("%s", fe.msg);
      if (!handled) return bad_flag("unknown option '%s'", argv[optind - 1]);
    }
    }
  }
  if (optind < argc) return bad_flag("unexpected argument '%s'", argv[optind]);
  if (!have_mode) return bad_flag("--mode is required (lookup, train, mixed or topk)");
  const bool topk = o.mode == SCPS_LOADGEN_TOPK;
  if (!workload_path && !topk) return bad_flag("--workload is required");
  if (!servers_arg) return bad_flag("--servers is required");
  if (topk && !o.table) return bad_flag("--table is required with --mode topk");
  if (topk && batch_flag) return bad_flag("%s is not for --mode topk (--query-format is its queries')", batch_flag);
  if (!topk && topk_flag) return bad_flag("%s is for --mode topk only", topk_flag);
  if (have_fraction && o.mode != SCPS_LOADGEN_MIXED)
    return bad_flag("--train-fraction is for --mode mixed only");
  if (have_duration && o.requests > 0) return bad_flag("--duration and --requests: give one of them");
  if (o.requests > 0) o.duration_s = 0.0;

  const char *servers[MAX_SERVERS];
  int n_servers;
  scps_error e;
  if (scps_address_list_split(servers_arg, servers, MAX_SERVERS, &n_servers, &e))
    return bad_flag("--servers: %s", e.msg);
  o.servers = servers;
  o.n_servers = n_servers;
  o.progress = !quiet;
  o.security = sec.security;

  scps_error err;
  scps_error_clear(&err);
  /* Before loading anything: a missing gnuplot should not cost a whole run. */
  if (plot && scps__loadgen_plot_check(&err)) {
    fprintf(stderr, "scps-loadgen: %s\n", err.msg);
    return 1;
  }
  scps_memtune_apply();
  scps_workload *w = NULL;
  int rc = workload_path ? scps__workload_load(workload_path, &w, &err) : 0;
  if (rc) {
    fprintf(stderr, "scps-loadgen: %s\n", err.msg);
    return 1;
  }
  o.workload = w;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  scps_loadgen_result *res = NULL;
  rc = scps__loadgen_run(&o, &res, &err);
  if (rc) {
    fprintf(stderr, "scps-loadgen: %s\n", err.msg);
    scps__workload_destroy(w);
    return 1;
  }
  scps_loadgen_report rep = {.workload = !w ? o.table : w->name[0] ? w->name : base_name(workload_path),
                             .options = &o,
                             .result = res};
  scps__loadgen_report_text(&rep, stdout);
  int status = 0;
  if (json && scps__loadgen_report_write_json(&rep, json, &err)) {
    fprintf(stderr, "scps-loadgen: %s\n", err.msg);
    status = 1;
  }
  if (plot && scps__loadgen_plot(&rep, plot, &err)) {
    fprintf(stderr, "scps-loadgen: %s\n", err.msg);
    status = 1;
  }
  scps__loadgen_result_destroy(res);
  scps__workload_destroy(w);
  scps__security_flags_free(&sec);
  return status;
}
