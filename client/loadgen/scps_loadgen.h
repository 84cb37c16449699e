/* scps_loadgen: drives a cluster with a workload's batches from concurrent
 * libscps clients, closed loop or at a target rate, and measures the result. */
#ifndef SCPS_LOADGEN_H
#define SCPS_LOADGEN_H

#include <stdbool.h>
#include <stdint.h>

#include "scps_client.h"
#include "scps_hist.h"
#include "scps_workload.h"

typedef enum scps_loadgen_mode {
  SCPS_LOADGEN_LOOKUP = 0, /* a request is one Lookup */
  SCPS_LOADGEN_TRAIN = 1,  /* Lookup, then ApplyGradients of the same batch */
  SCPS_LOADGEN_MIXED = 2,  /* train with probability train_fraction, else lookup */
  SCPS_LOADGEN_TOPK = 3    /* a request is one TopK of queries_per_call random queries */
} scps_loadgen_mode;

int scps__loadgen_mode_from_name(const char *name, scps_loadgen_mode *out);
const char *scps__loadgen_mode_name(scps_loadgen_mode m);

/* Errors are counted by libscps code (-code indexes the counts); each code
 * has a status name, gRPC's where one corresponds ("UNAVAILABLE"). */
#define SCPS_LOADGEN_CODES 19
const char *scps__loadgen_status_name(int code);

typedef struct scps_loadgen_options {
  const scps_workload *workload; /* may be NULL in topk mode: then any cluster serving the table */
  const char *const *servers;
  int n_servers;
  scps_loadgen_mode mode;
  double train_fraction; /* mixed only, in [0, 1] */
  int concurrency;       /* clients, each with its own connections */
  double rate;           /* requests/s over all clients; 0: closed loop */
  double duration_s;     /* > 0: measure this long; else requests */
  int64_t requests;      /* > 0: measure this many requests (duration_s 0) */
  double warmup_s;       /* load first, unmeasured */
  const char *wire_format; /* scps_client_options_set_wire_format's text; NULL: float32 */
  scps_answer_mode answer;    /* how servers answer lookups (0: auto) */
  scps_shm_mode shared_memory; /* answers and gradients through shared memory (0: auto) */
  scps_gradient_mode gradients; /* how pushes send gradients (0: auto) */
  int64_t deadline_ms;        /* of each request, from when it is sent */
  int64_t connect_timeout_ms; /* of each client's creation */
  int cq_threads;             /* each client's completion-queue threads (scps_client_options) */
  bool progress;              /* a line on stderr every second */
  scps_client_security security; /* every client's TLS and token (scps_client_options) */
  /* topk mode: each request is a TopK of table with these options
   * (first_id and count: the rows searched) over queries_per_call query
   * vectors, standard Gaussian values drawn from a seed of the client's
   * index; every recall_sample-th answered call of a client (0: none) is
   * sent again with recall 1, unmeasured, to measure the recall. */
  const char *table;
  scps_topk_options topk;
  int queries_per_call;
  int recall_sample;
} scps_loadgen_options;

/* One second of the measured run. */
typedef struct scps_loadgen_second {
  double t; /* end of the interval, seconds after the warm-up */
  double requests_per_s, p50_ms, p99_ms; /* p50 and p99 of the requests answered OK */
  int64_t ok, errors; /* requests that ended in the interval, answered OK or failed */
} scps_loadgen_second;

typedef struct scps_loadgen_result {
  double duration_s; /* from the end of the warm-up to the last answer */
  int64_t requests, ok, samples, ids;
  /* Open loop: measured requests due before the end of --duration that
   * were never sent, each client still waiting for its previous answer
   * when the time was up (the run stops at --duration, not when its
   * backlog is through). */
  int64_t not_sent;
  int64_t errors[SCPS_LOADGEN_CODES];
  char first_error[SCPS_LOADGEN_CODES][SCPS_ERROR_MSG_MAX]; /* one message of each code seen */
  uint64_t bytes_sent, bytes_received; /* payloads during the measured run */
  scps_hist latency;                   /* nanoseconds, requests answered OK */
  /* Nanoseconds from when each failed request was sent to its failure, on
   * latency's clock but without the send lag: what --deadline-ms bounds,
   * so it shows whether clients learn of a failure within their deadline
   * (open loop, a request due while its client waits for a failing one
   * also has that wait in its send lag). */
  scps_hist error_latency;
  /* Nanoseconds from when each request was due to when it was sent: open
   * loop, the part of latency spent waiting for the client's previous
   * request or for a CPU; closed loop, about 0. */
  scps_hist send_lag;
  scps_loadgen_second *timeline;
  int n_timeline;
  /* topk mode: samples counts the queries of the calls answered OK; the
   * recall measured is recall_sum / recall_queries, each sampled query's
   * |approximate ids ∩ exact ids| / k; bins, rows_scanned and
   * expected_recall are what libscps reported (scps_topk_info) for the
   * call each client made before the load. */
  double recall_sum;
  int64_t recall_queries;
  scps_topk_info topk_info;
} scps_loadgen_result;

/* Connects concurrency clients, generates and preprocesses each one's
 * batches, runs the warm-up and the measured load, and fills *out (free with
 * scps__loadgen_result_destroy). Requests that fail are counted, not fatal;
 * setup failures (connection, workload the cluster does not serve) are
 * returned with a message. */
int scps__loadgen_run(const scps_loadgen_options *o, scps_loadgen_result **out, scps_error *err);
void scps__loadgen_result_destroy(scps_loadgen_result *r);

/* Ends the run in progress (or the next one) as if its --duration ran out
 * at the next second's tick: no request is sent from then on, those out are
 * answered or time out, and the result covers what was measured. Safe in a
 * signal handler (scps-loadgen calls it on SIGINT and SIGTERM). */
void scps__loadgen_stop(void);

#endif
