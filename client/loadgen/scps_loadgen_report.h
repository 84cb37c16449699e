/* scps_loadgen_report: a load generator run's report as text, as JSON (keys
 * other tools read) and as a gnuplot chart of latency and throughput. */
#ifndef SCPS_LOADGEN_REPORT_H
#define SCPS_LOADGEN_REPORT_H

#include <stdio.h>

#include "scps_jsonw.h"
#include "scps_loadgen.h"

/* What the report says about the run besides its result. */
typedef struct scps_loadgen_report {
  const char *workload; /* the workload's name */
  const scps_loadgen_options *options;
  const scps_loadgen_result *result;
} scps_loadgen_report;

void scps__loadgen_report_text(const scps_loadgen_report *r, FILE *f);

/* The JSON object: workload, mode, concurrency, rate_target, duration_s,
 * requests, ok, errors {status: count}, requests_per_s, samples_per_s,
 * ids_per_s, mb_per_s_sent, mb_per_s_received, latency_ms {p50, p90, p99,
 * p99.9, max, mean} of OK requests, error_latency_ms {p50, p99, max} of
 * failed ones (0 without any), send_lag_ms {p50, p99, max}, timeline [{t,
 * requests_per_s, ok, errors, p50, p99}] (ok and errors: requests that
 * ended in that second), and the run's settings; in topk mode also table,
 * k, score, recall_target, queries_per_call, query_format, recall_sample,
 * queries (of the calls answered OK), calls_per_s, queries_per_s,
 * recall_measured (over recall_queries queries), recall_expected, bins and
 * rows_scanned (samples count queries, ids none). */
void scps__loadgen_report_json(const scps_loadgen_report *r, scps_jsonw *w);

/* Writes the JSON to path; SCPS_EIO naming the path on failure. */
int scps__loadgen_report_write_json(const scps_loadgen_report *r, const char *path, scps_error *err);

/* 0 when gnuplot is on PATH, else SCPS_ENOENT with a message saying so. */
int scps__loadgen_plot_check(scps_error *err);

/* Draws the timeline's p50 and p99 and its request rate into a PNG at path. */
int scps__loadgen_plot(const scps_loadgen_report *r, const char *path, scps_error *err);

#endif
