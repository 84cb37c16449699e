#include "scps_loadgen_report.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static double per_s(double n, const scps_loadgen_result *res) {
  return res->duration_s > 0 ? n / res->duration_s : 0.0;
}

static double ms(uint64_t ns) { return (double)ns * 1e-6; }

static const char *query_format(const scps_loadgen_options *o) {
  return o->topk.query_format[0] ? o->topk.query_format : "float32";
}

/* topk mode: the recall measured against exact answers (0 without any sample). */
static double measured_recall(const scps_loadgen_result *res) {
  return res->recall_queries ? res->recall_sum / (double)res->recall_queries : 0.0;
}

static void latencies(const scps_hist *h, double out[6]) {
  out[0] = ms(scps__hist_quantile(h, 0.5));
  out[1] = ms(scps__hist_quantile(h, 0.9));
  out[2] = ms(scps__hist_quantile(h, 0.99));
  out[3] = ms(scps__hist_quantile(h, 0.999));
  out[4] = ms(h->max);
  out[5] = scps__hist_mean(h) * 1e-6;
}

void scps__loadgen_report_text(const scps_loadgen_report *r, FILE *f) {
  const scps_loadgen_options *o = r->options;
  const scps_loadgen_result *res = r->result;
  char loop[64];
  if (o->rate > 0)
    snprintf(loop, sizeof loop, "open loop at %.6g req/s", o->rate);
  else
    snprintf(loop, sizeof loop, "closed loop");
  const bool topk = o->mode == SCPS_LOADGEN_TOPK;
  fprintf(f, "scps-loadgen: %s, %s", r->workload, scps__loadgen_mode_name(o->mode));
  if (o->mode == SCPS_LOADGEN_MIXED) fprintf(f, " (train fraction %.3g)", o->train_fraction);
  if (topk)
    fprintf(f, " (table %s, k %d, %s, recall target %.6g, %d queries a call, %s queries)", o->table, o->topk.k,
            scps_topk_score_name(o->topk.score), o->topk.recall_target, o->queries_per_call, query_format(o));
  fprintf(f, ", %d client%s, %s", o->concurrency, o->concurrency == 1 ? "" : "s", loop);
  if (!topk)
    fprintf(f, ", %s wire, %s answers, %s gradients", (o->wire_format ? o->wire_format : "float32"),
            scps_answer_mode_name(o->answer), scps_gradient_mode_name(o->gradients));
  fprintf(f, "\n  duration    %.3f s\n", res->duration_s);
  fprintf(f, "  requests    %lld (%lld ok, %lld errors)\n", (long long)res->requests, (long long)res->ok,
          (long long)(res->requests - res->ok));
  if (topk) {
    fprintf(f, "  throughput  %.1f calls/s, %.0f queries/s\n", per_s((double)res->requests, res),
            per_s((double)res->samples, res));
    fprintf(f, "  recall      measured %.4f over %lld queries (one call in %d also sent exact), expected %.4f "
            "(%d bins, %lld rows scanned a query)\n", measured_recall(res), (long long)res->recall_queries,
            o->recall_sample, res->topk_info.expected_recall, res->topk_info.bins,
            (long long)res->topk_info.rows_scanned);
  } else {
    fprintf(f, "  throughput  %.1f req/s, %.0f samples/s, %.0f ids/s\n", per_s((double)res->requests, res),
            per_s((double)res->samples, res), per_s((double)res->ids, res));
  }
  fprintf(f, "  traffic     sent %.2f MB/s, received %.2f MB/s\n", per_s((double)res->bytes_sent, res) * 1e-6,
          per_s((double)res->bytes_received, res) * 1e-6);
  double l[6];
  latencies(&res->latency, l);
  fprintf(f, "  latency ms  p50 %.3f  p90 %.3f  p99 %.3f  p99.9 %.3f  max %.3f  mean %.3f\n", l[0], l[1], l[2], l[3],
          l[4], l[5]);
  if (res->error_latency.n)
    fprintf(f, "  failed ms   p50 %.3f  p99 %.3f  max %.3f (failed requests, from when sent)\n",
            ms(scps__hist_quantile(&res->error_latency, 0.5)), ms(scps__hist_quantile(&res->error_latency, 0.99)),
            ms(res->error_latency.max));
  if (o->rate > 0)
    fprintf(f, "  send lag ms p50 %.3f  p99 %.3f  max %.3f (due to sent, part of the latency)\n",
            ms(scps__hist_quantile(&res->send_lag, 0.5)), ms(scps__hist_quantile(&res->send_lag, 0.99)),
            ms(res->send_lag.max));
  if (res->not_sent)
    fprintf(f, "  not sent    %lld requests due before the end, their clients still waiting for answers\n",
            (long long)res->not_sent);
  for (int k = 1; k < SCPS_LOADGEN_CODES; k++)
    if (res->errors[k])
      fprintf(f, "  error       %s x %lld, e.g. %s\n", scps__loadgen_status_name(-k), (long long)res->errors[k],
              res->first_error[k]);
}

void scps__loadgen_report_json(const scps_loadgen_report *r, scps_jsonw *w) {
  const scps_loadgen_options *o = r->options;
  const scps_loadgen_result *res = r->result;
  scps__jsonw_printf(w, "{\n \"workload\": ");
  scps__jsonw_string(w, r->workload);
  scps__jsonw_printf(w, ",\n \"mode\": \"%s\",\n \"train_fraction\": %.6g,\n \"concurrency\": %d,\n"
                       " \"rate_target\": %.6g,\n \"wire_format\": \"%s\",\n \"answer\": \"%s\",\n \"gradients\": \"%s\",\n"
                       " \"servers\": %d,\n"
                       " \"warmup_s\": %.6g,\n \"deadline_ms\": %lld,\n \"duration_s\": %.6f,\n"
                       " \"requests\": %lld,\n \"ok\": %lld,\n \"not_sent\": %lld,\n \"errors\": {",
                    scps__loadgen_mode_name(o->mode),
                    o->mode == SCPS_LOADGEN_TRAIN   ? 1.0
                    : o->mode == SCPS_LOADGEN_MIXED ? o->train_fraction
                                                    : 0.0,
                    o->concurrency, o->rate, (o->wire_format ? o->wire_format : "float32"), scps_answer_mode_name(o->answer),
                    scps_gradient_mode_name(o->gradients), o->n_servers, o->warmup_s,
                    (long long)o->deadline_ms, res->duration_s, (long long)res->requests, (long long)res->ok,
                    (long long)res->not_sent);
  const char *sep = "";
  for (int k = 1; k < SCPS_LOADGEN_CODES; k++)
    if (res->errors[k]) {
      scps__jsonw_printf(w, "%s\"%s\": %lld", sep, scps__loadgen_status_name(-k), (long long)res->errors[k]);
      sep = ", ";
    }
  double l[6];
  latencies(&res->latency, l);
  scps__jsonw_printf(w, "},\n \"requests_per_s\": %.3f,\n \"samples_per_s\": %.3f,\n \"ids_per_s\": %.3f,\n"
                       " \"bytes_sent\": %llu,\n \"bytes_received\": %llu,\n"
                       " \"mb_per_s_sent\": %.6f,\n \"mb_per_s_received\": %.6f,\n"
                       " \"latency_ms\": {\"p50\": %.6f, \"p90\": %.6f, \"p99\": %.6f, \"p99.9\": %.6f, \"max\": %.6f, "
                       "\"mean\": %.6f},\n \"error_latency_ms\": {\"p50\": %.6f, \"p99\": %.6f, \"max\": %.6f},\n"
                       " \"send_lag_ms\": {\"p50\": %.6f, \"p99\": %.6f, \"max\": %.6f},",
                    per_s((double)res->requests, res), per_s((double)res->samples, res), per_s((double)res->ids, res),
                    (unsigned long long)res->bytes_sent, (unsigned long long)res->bytes_received,
                    per_s((double)res->bytes_sent, res) * 1e-6, per_s((double)res->bytes_received, res) * 1e-6, l[0],
                    l[1], l[2], l[3], l[4], l[5], ms(scps__hist_quantile(&res->error_latency, 0.5)),
                    ms(scps__hist_quantile(&res->error_latency, 0.99)), ms(res->error_latency.max),
                    ms(scps__hist_quantile(&res->send_lag, 0.5)),
                    ms(scps__hist_quantile(&res->send_lag, 0.99)), ms(res->send_lag.max));
  if (o->mode == SCPS_LOADGEN_TOPK) {
    scps__jsonw_printf(w, "\n \"table\": ");
    scps__jsonw_string(w, o->table);
    scps__jsonw_printf(w, ",\n \"k\": %d,\n \"score\": \"%s\",\n \"recall_target\": %.6g,\n \"queries_per_call\": %d,\n"
                          " \"query_format\": \"%s\",\n \"recall_sample\": %d,\n \"queries\": %lld,\n"
                          " \"calls_per_s\": %.3f,\n \"queries_per_s\": %.3f,\n \"recall_measured\": %.6f,\n"
                          " \"recall_queries\": %lld,\n \"recall_expected\": %.6f,\n \"bins\": %d,\n"
                          " \"rows_scanned\": %lld,\n \"timeline\": [",
                       o->topk.k, scps_topk_score_name(o->topk.score), o->topk.recall_target, o->queries_per_call,
                       query_format(o), o->recall_sample, (long long)res->samples, per_s((double)res->requests, res),
                       per_s((double)res->samples, res), measured_recall(res), (long long)res->recall_queries,
                       res->topk_info.expected_recall, res->topk_info.bins, (long long)res->topk_info.rows_scanned);
  } else {
    scps__jsonw_printf(w, "\n \"timeline\": [");
  }
  for (int i = 0; i < res->n_timeline; i++) {
    const scps_loadgen_second *s = &res->timeline[i];
    scps__jsonw_printf(w,
                       "%s\n  {\"t\": %.3f, \"requests_per_s\": %.3f, \"ok\": %lld, \"errors\": %lld, \"p50\": %.6f, "
                       "\"p99\": %.6f}",
                       i ? "," : "", s->t, s->requests_per_s, (long long)s->ok, (long long)s->errors, s->p50_ms,
                       s->p99_ms);
  }
  scps__jsonw_printf(w, "%s]\n}\n", res->n_timeline ? "\n " : "");
}

static int write_file(const char *path, const char *text, size_t len, const char *what, scps_error *err) {
  FILE *f = fopen(path, "w");
  if (!f) return scps_error_set(err, SCPS_EIO, "%s '%s': %s", what, path, strerror(errno));
  size_t n = fwrite(text, 1, len, f);
  int e = ferror(f) ? errno : 0;
  if (fclose(f) && !e) e = errno;
  if (n != len || e) return scps_error_set(err, SCPS_EIO, "%s '%s': %s", what, path, strerror(e ? e : EIO));
  return 0;
}

int scps__loadgen_report_write_json(const scps_loadgen_report *r, const char *path, scps_error *err) {
  scps_jsonw w;
  scps__jsonw_init(&w);
  scps__loadgen_report_json(r, &w);
  int rc = scps__jsonw_finish(&w, "the JSON report", err);
  if (!rc) rc = write_file(path, w.buf, w.len, "--json", err);
  scps__jsonw_free(&w);
  return rc;
}

int scps__loadgen_plot_check(scps_error *err) {
  const char *path = getenv("PATH");
  if (!path) path = "/usr/bin:/bin";
  char dir[4096];
  for (const char *p = path; *p;) {
    size_t n = strcspn(p, ":");
    if (n > 0 && n < sizeof dir - 16) {
      snprintf(dir, sizeof dir, "%.*s/gnuplot", (int)n, p);
      if (!access(dir, X_OK)) return 0;
    }
    p += n;
    if (*p == ':') p++;
  }
  return scps_error_set(err, SCPS_ENOENT,
                        "--plot needs gnuplot, which is not on PATH (%s): install it (Debian: apt-get install "
                        "gnuplot-nox, as deploy/install-deps.sh does) or leave --plot out",
                        path);
}

/* s inside gnuplot's single quotes, where a quote is written twice. */
static void gnuplot_quoted(scps_jsonw *w, const char *s) {
  for (const char *c = s; *c; c++) {
    if (*c == '\'')
      scps__jsonw_printf(w, "''");
    else
      scps__jsonw_printf(w, "%c", *c);
  }
}

int scps__loadgen_plot(const scps_loadgen_report *r, const char *path, scps_error *err) {
  const scps_loadgen_result *res = r->result;
  if (!res->n_timeline)
    return scps_error_set(err, SCPS_EINVAL, "--plot '%s': the run was shorter than a second: no timeline to draw", path);
  scps_jsonw s; /* the script, with the timeline inline as a data block */
  scps__jsonw_init(&s);
  scps__jsonw_printf(&s, "$d << EOD\n");
  for (int i = 0; i < res->n_timeline; i++)
    scps__jsonw_printf(&s, "%.3f %.3f %.6f %.6f\n", res->timeline[i].t, res->timeline[i].requests_per_s,
                      res->timeline[i].p50_ms, res->timeline[i].p99_ms);
  scps__jsonw_printf(&s, "EOD\nset terminal png size 1000,700\nset output '");
  gnuplot_quoted(&s, path);
  scps__jsonw_printf(&s, "'\nset multiplot layout 2,1 title '");
  gnuplot_quoted(&s, r->workload);
  scps__jsonw_printf(&s, ", %s, %d clients, %s'\nset grid\nset key below\nset xrange [0:*]\nset xlabel 'seconds'\n"
                        "set ylabel 'latency (ms)'\nset yrange [0:*]\n"
                        "plot $d using 1:3 with linespoints title 'p50', $d using 1:4 with linespoints title 'p99'\n"
                        "set ylabel 'requests/s'\nplot $d using 1:2 with linespoints title 'requests/s'\n"
                        "unset multiplot\n",
                    scps__loadgen_mode_name(r->options->mode), r->options->concurrency,
                    r->options->rate > 0 ? "open loop" : "closed loop");
  int rc = scps__jsonw_finish(&s, "the gnuplot script", err);
  if (rc) {
    scps__jsonw_free(&s);
    return rc;
  }
  FILE *g = popen("gnuplot", "w");
  if (!g) {
    scps__jsonw_free(&s);
    return scps_error_set(err, SCPS_EIO, "--plot: cannot run gnuplot: %s", strerror(errno));
  }
  fwrite(s.buf, 1, s.len, g);
  scps__jsonw_free(&s);
  int st = pclose(g);
  if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
    return scps_error_set(err, SCPS_EIO, "--plot '%s': gnuplot failed (exit status %d; its messages are above)", path,
                          st == -1 || !WIFEXITED(st) ? -1 : WEXITSTATUS(st));
  return 0;
}
