/* The /metrics endpoint: libmicrohttpd's daemon with its own polling thread,
 * and the exposition text built from the counters Stats reads (names and
 * meanings: deploy/OPERATING.md, "Metrics"). */
#include "scps_metrics.h"

#include <microhttpd.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "scps_call.h"
#include "scps_limits.h"
#include "scps_shm.h"
#include "scps_status.h"
#include "scps_version.h"

struct scps_metrics {
  struct MHD_Daemon *daemon;
  scps_server *srv;
  char url[300]; /* http://HOST:PORT/metrics, the port bound */
};

/* ------------------------------------------------------------ the text */

typedef struct text {
  char *buf;
  size_t len, cap;
  bool failed;
} text;

static void put(text *t, const char *fmt, ...) {
  if (t->failed) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    if (n < 0) {
      t->failed = true;
      return;
    }
    if ((size_t)n < t->cap - t->len) {
      t->len += (size_t)n;
      return;
    }
    size_t cap = t->cap * 2 > t->len + (size_t)n + 1 ? t->cap * 2 : t->len + (size_t)n + 1;
    char *b = realloc(t->buf, cap);
    if (!b) {
      t->failed = true;
      return;
    }
    t->buf = b;
    t->cap = cap;
  }
}

/* A label value as the format quotes it: backslash, double quote and line
 * feed escaped. */
static void put_label(text *t, const char *v) {
  for (; *v; v++) {
    if (*v == '\\') put(t, "\\\\");
    else if (*v == '"') put(t, "\\\"");
    else if (*v == '\n') put(t, "\\n");
    else put(t, "%c", *v);
  }
}

static void family(text *t, const char *name, const char *type, const char *help) {
  put(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One sample with one label (label NULL: none). */
static void sample1(text *t, const char *name, const char *label, const char *value, const char *num) {
  put(t, "%s", name);
  if (label) {
    put(t, "{%s=\"", label);
    put_label(t, value);
    put(t, "\"}");
  }
  put(t, " %s\n", num);
}

static void sample_i(text *t, const char *name, const char *label, const char *value, long long v) {
  char num[32];
  snprintf(num, sizeof num, "%lld", v);
  sample1(t, name, label, value, num);
}

static void sample_d(text *t, const char *name, const char *label, const char *value, double v) {
  char num[40];
  snprintf(num, sizeof num, "%.17g", v);
  sample1(t, name, label, value, num);
}

static void put_methods(text *t, scps_server *s) {
  family(t, "scps_requests_total", "counter", "Calls answered, by method and gRPC status code.");
  for (int m = 0; m < SCPS_M_COUNT; m++)
    for (int code = 0; code < SCPS_STATUS_CODES; code++) {
      long long n = atomic_load_explicit(&s->methods[m].codes[code], memory_order_relaxed);
      if (!n && code != GRPC_STATUS_OK) continue;
      put(t, "scps_requests_total{method=\"");
      put_label(t, scps__method_name(m));
      put(t, "\",code=\"");
      put_label(t, scps__status_name((grpc_status_code)code));
      put(t, "\"} %lld\n", n);
    }
  family(t, "scps_request_duration_seconds", "histogram",
         "Seconds from a call's arrival to its answer being sent, by method.");
  for (int m = 0; m < SCPS_M_COUNT; m++) {
    /* _count is the last cumulative bucket, so the two always agree. */
    long long cum = 0;
    for (int b = 0; b < SCPS_LATENCY_BUCKETS; b++) {
      cum += atomic_load_explicit(&s->methods[m].latency[b], memory_order_relaxed);
      put(t, "scps_request_duration_seconds_bucket{method=\"");
      put_label(t, scps__method_name(m));
      if (b < SCPS_LATENCY_BUCKETS - 1) put(t, "\",le=\"%g\"} %lld\n", scps__call_latency_bound(b), cum);
      else put(t, "\",le=\"+Inf\"} %lld\n", cum);
    }
    sample_d(t, "scps_request_duration_seconds_sum", "method", scps__method_name(m),
             (double)atomic_load_explicit(&s->methods[m].ns, memory_order_relaxed) * 1e-9);
    sample_i(t, "scps_request_duration_seconds_count", "method", scps__method_name(m), cum);
  }
  family(t, "scps_received_bytes_total", "counter", "Request message bytes received, by method.");
  for (int m = 0; m < SCPS_M_COUNT; m++)
    sample_i(t, "scps_received_bytes_total", "method", scps__method_name(m),
             atomic_load_explicit(&s->methods[m].bytes_in, memory_order_relaxed));
  family(t, "scps_sent_bytes_total", "counter", "Response message bytes sent, by method.");
  for (int m = 0; m < SCPS_M_COUNT; m++)
    sample_i(t, "scps_sent_bytes_total", "method", scps__method_name(m),
             atomic_load_explicit(&s->methods[m].bytes_out, memory_order_relaxed));
  family(t, "scps_pushes_applied_total", "counter", "ApplyGradients calls answered OK.");
  sample_i(t, "scps_pushes_applied_total", NULL, NULL,
           atomic_load_explicit(&s->methods[SCPS_M_APPLY_GRADIENTS].codes[GRPC_STATUS_OK], memory_order_relaxed));
}

/* A per-stack, per-local-SparseCore gauge of the FDO maxima. */
static void put_partition_max(text *t, scps_server *s, const char *name, bool unique) {
  for (int st = 0; st < s->layout->n_stacks; st++)
    for (int k = 0; k < s->S; k++) {
      scps_sc_stack_stats *q = &s->sc_stats[st * s->S + k];
      put(t, "%s{stack=\"", name);
      put_label(t, s->layout->stacks[st].name);
      put(t, "\",sparse_core=\"%d\"} %d\n", scps__engine_hbm(s->engine, k)->sc,
          unique ? atomic_load(&q->max_unique) : atomic_load(&q->max_ids));
    }
}

static void put_stacks(text *t, scps_server *s) {
  const scps_layout *l = s->layout;
  int S = s->S;
  static const struct {
    const char *name, *help;
    size_t off;
  } sums[] = {
      {"scps_stack_ids_looked_up_total", "Ids (COO entries) Lookups read on this process's SparseCores, by stack.",
       offsetof(scps_sc_stack_stats, ids_looked_up)},
      {"scps_stack_ids_dropped_total", "Ids (COO entries) dropped to the partition limits in force "
       "(--limit-policy drop), by stack.", offsetof(scps_sc_stack_stats, ids_dropped)},
      {"scps_stack_rows_updated_total", "Rows ApplyGradients updated, by stack.",
       offsetof(scps_sc_stack_stats, rows_updated)},
  };
  for (size_t i = 0; i < sizeof sums / sizeof *sums; i++) {
    family(t, sums[i].name, "counter", sums[i].help);
    for (int st = 0; st < l->n_stacks; st++) {
      long long n = 0;
      for (int k = 0; k < S; k++)
        n += atomic_load_explicit((atomic_llong *)(void *)((char *)&s->sc_stats[st * S + k] + sums[i].off),
                                  memory_order_relaxed);
      sample_i(t, sums[i].name, "stack", l->stacks[st].name, n);
    }
  }
  family(t, "scps_stack_partition_ids_max", "gauge",
         "Largest ids of one partition a Lookup sent to a SparseCore, by stack and SparseCore.");
  put_partition_max(t, s, "scps_stack_partition_ids_max", false);
  family(t, "scps_stack_partition_unique_ids_max", "gauge",
         "Largest unique ids of one partition a Lookup sent to a SparseCore, by stack and SparseCore.");
  put_partition_max(t, s, "scps_stack_partition_unique_ids_max", true);
}

static void put_saver(text *t, scps_server *s) {
  const scps_layout *l = s->layout;
  scps_saver *sv = &s->saver;
  int32_t *lim = malloc(sizeof *lim * 2 * (size_t)(l->n_stacks ? l->n_stacks : 1));
  if (!lim) {
    t->failed = true;
    return;
  }
  pthread_mutex_lock(&sv->mu);
  for (int st = 0; st < l->n_stacks; st++) {
    lim[2 * st] = sv->limits[st].max_ids_per_partition;
    lim[2 * st + 1] = sv->limits[st].max_unique_ids_per_partition;
  }
  int64_t step = sv->last_step, saves = sv->saves, failures = sv->failures, bytes = sv->bytes_total;
  double last_seconds = sv->last_seconds, last_end = sv->last_save_end;
  bool saving = sv->saving;
  pthread_mutex_unlock(&sv->mu);
  family(t, "scps_stack_partition_ids_limit", "gauge", "max_ids_per_partition in force, by stack.");
  for (int st = 0; st < l->n_stacks; st++)
    sample_i(t, "scps_stack_partition_ids_limit", "stack", l->stacks[st].name, lim[2 * st]);
  family(t, "scps_stack_partition_unique_ids_limit", "gauge", "max_unique_ids_per_partition in force, by stack.");
  for (int st = 0; st < l->n_stacks; st++)
    sample_i(t, "scps_stack_partition_unique_ids_limit", "stack", l->stacks[st].name, lim[2 * st + 1]);
  free(lim);
  family(t, "scps_step", "gauge", "Highest step applied or restored; -1: none.");
  sample_i(t, "scps_step", NULL, NULL, step);
  family(t, "scps_checkpoints_total", "counter", "Checkpoints saved by this process.");
  sample_i(t, "scps_checkpoints_total", NULL, NULL, saves);
  family(t, "scps_checkpoint_failures_total", "counter", "Checkpoint saves that failed.");
  sample_i(t, "scps_checkpoint_failures_total", NULL, NULL, failures);
  family(t, "scps_checkpoint_written_bytes_total", "counter", "Bytes written by checkpoint saves.");
  sample_i(t, "scps_checkpoint_written_bytes_total", NULL, NULL, bytes);
  family(t, "scps_checkpoint_saving", "gauge", "1 while a checkpoint is being saved.");
  sample_i(t, "scps_checkpoint_saving", NULL, NULL, saving);
  /* Only once a save was attempted: an absent series, not a made-up age. */
  if (last_end > 0) {
    family(t, "scps_checkpoint_last_duration_seconds", "gauge", "Seconds the last checkpoint save took.");
    sample_d(t, "scps_checkpoint_last_duration_seconds", NULL, NULL, last_seconds);
    family(t, "scps_checkpoint_last_age_seconds", "gauge", "Seconds since the last checkpoint save attempt ended.");
    sample_d(t, "scps_checkpoint_last_age_seconds", NULL, NULL, scps__clock_s() - last_end);
  }
}

static void put_memory(text *t, scps_server *s) {
  family(t, "scps_sparsecore_memory_used_bytes", "gauge", "Memory the tables take on a SparseCore.");
  for (int k = 0; k < s->S; k++) {
    char sc[16];
    snprintf(sc, sizeof sc, "%d", scps__engine_hbm(s->engine, k)->sc);
    sample_i(t, "scps_sparsecore_memory_used_bytes", "sparse_core", sc, scps__engine_hbm(s->engine, k)->used);
  }
  family(t, "scps_sparsecore_memory_capacity_bytes", "gauge", "A SparseCore's memory (--sc-memory).");
  for (int k = 0; k < s->S; k++) {
    char sc[16];
    snprintf(sc, sizeof sc, "%d", scps__engine_hbm(s->engine, k)->sc);
    sample_i(t, "scps_sparsecore_memory_capacity_bytes", "sparse_core", sc,
             scps__engine_hbm(s->engine, k)->capacity);
  }
  Scps__V1__MemoryStats mem = SCPS__V1__MEMORY_STATS__INIT;
  scps__limits_stats(s, &mem);
  family(t, "scps_memory_budget_bytes", "gauge", "The memory budget of the calls in flight (--memory-budget).");
  sample_i(t, "scps_memory_budget_bytes", NULL, NULL, mem.budget_bytes);
  family(t, "scps_memory_budget_in_use_bytes", "gauge", "Bytes of the memory budget the calls in flight hold.");
  sample_i(t, "scps_memory_budget_in_use_bytes", NULL, NULL, mem.in_use_bytes);
  family(t, "scps_memory_budget_peak_bytes", "gauge", "Most bytes of the memory budget held at once.");
  sample_i(t, "scps_memory_budget_peak_bytes", NULL, NULL, mem.peak_bytes);
  family(t, "scps_memory_calls_refused_total", "counter", "Calls refused for want of memory budget.");
  sample_i(t, "scps_memory_calls_refused_total", NULL, NULL, mem.calls_refused);
  int64_t segments = 0, mapped = 0, calls = 0;
  if (s->shm) scps__shm_counts(s->shm, &segments, &mapped, &calls);
  family(t, "scps_shm_segments", "gauge", "Shared-memory segments clients on this host attached (--shm-socket).");
  sample_i(t, "scps_shm_segments", NULL, NULL, segments);
  family(t, "scps_shm_mapped_bytes", "gauge", "Bytes those segments map (the clients' memory).");
  sample_i(t, "scps_shm_mapped_bytes", NULL, NULL, mapped);
  family(t, "scps_shm_calls_total", "counter", "Lookups answered and pushes read through shared memory.");
  sample_i(t, "scps_shm_calls_total", NULL, NULL, calls);
}

static void put_stages(text *t, scps_server *s) {
  scps_stage_stats st[SCPS_MAX_SC_PER_PROCESS + 1];
  int n = scps__pipeline_stats(s->pipeline, st, SCPS_MAX_SC_PER_PROCESS + 1);
  family(t, "scps_stage_queue_depth", "gauge", "Jobs waiting for a pipeline stage (scN: SparseCore, tc: TensorCore).");
  for (int i = 0; i < n; i++) sample_i(t, "scps_stage_queue_depth", "stage", st[i].name, st[i].queue_depth);
  family(t, "scps_stage_tasks_total", "counter", "Jobs a pipeline stage finished.");
  for (int i = 0; i < n; i++) sample_i(t, "scps_stage_tasks_total", "stage", st[i].name, st[i].tasks);
  family(t, "scps_stage_busy_seconds_total", "counter", "Seconds a pipeline stage spent running jobs.");
  for (int i = 0; i < n; i++) sample_d(t, "scps_stage_busy_seconds_total", "stage", st[i].name, st[i].busy_seconds);
}

char *scps__metrics_render(scps_server *s, size_t *len) {
  text t = {malloc(16384), 0, 16384, false};
  if (!t.buf) return NULL;
  t.buf[0] = '\0';
  family(&t, "scps_build_info", "gauge", "Always 1; the version of scps-server.");
  sample1(&t, "scps_build_info", "version", scps_version(), "1");
  family(&t, "scps_draining", "gauge", "1 once a shutdown began: new calls are refused.");
  sample_i(&t, "scps_draining", NULL, NULL, atomic_load(&s->draining) != 0);
  put_methods(&t, s);
  put_stacks(&t, s);
  put_saver(&t, s);
  put_memory(&t, s);
  put_stages(&t, s);
  if (t.failed) {
    free(t.buf);
    return NULL;
  }
  *len = t.len;
  return t.buf;
}

/* ------------------------------------------------------------ the daemon */

static enum MHD_Result answer(struct MHD_Connection *conn, unsigned status, const char *body, bool allow) {
  struct MHD_Response *r =
      MHD_create_response_from_buffer(strlen(body), (void *)(uintptr_t)body, MHD_RESPMEM_PERSISTENT);
  if (!r) return MHD_NO;
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
  if (allow) MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
  enum MHD_Result ret = MHD_queue_response(conn, status, r);
  MHD_destroy_response(r);
  return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
  (void)version;
  (void)upload_data;
  (void)upload_data_size;
  (void)con_cls;
  scps_metrics *m = cls;
  if (strcmp(url, "/metrics")) return answer(conn, MHD_HTTP_NOT_FOUND, "not found: scps-server serves /metrics\n", 0);
  if (strcmp(method, MHD_HTTP_METHOD_GET) && strcmp(method, MHD_HTTP_METHOD_HEAD))
    return answer(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "/metrics takes GET\n", 1);
  size_t len;
  char *body = scps__metrics_render(m->srv, &len);
  if (!body) return answer(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n", 0);
  struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
  if (!r) {
    free(body);
    return MHD_NO;
  }
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8");
  enum MHD_Result ret = MHD_queue_response(conn, MHD_HTTP_OK, r);
  MHD_destroy_response(r);
  return ret;
}

int scps__metrics_parse(const char *listen, char *host, size_t cap, int *port, scps_error *err) {
  const char *colon = strrchr(listen, ':');
  const char *p = colon ? colon + 1 : listen;
  size_t hl = colon ? (size_t)(colon - listen) : 0;
  long v = *p && !p[strspn(p, "0123456789")] && strspn(p, "0123456789") <= 5 ? strtol(p, NULL, 10) : -1;
  if (v < 0 || v > 65535)
    return scps_error_set(err, SCPS_EINVAL, "--metrics-listen '%s': expected HOST:PORT or PORT, with a port in "
                          "[0, 65535]", listen);
  if (hl >= 256 || (host && hl + 1 > cap))
    return scps_error_set(err, SCPS_EINVAL, "--metrics-listen '%s': host name too long", listen);
  if (host) {
    if (hl) {
      memcpy(host, listen, hl);
      host[hl] = '\0';
    } else {
      snprintf(host, cap, "127.0.0.1");
    }
  }
  if (port) *port = (int)v;
  return 0;
}

int scps__metrics_start(scps_server *s, const char *listen, scps_metrics **out, scps_error *err) {
  *out = NULL;
  char host[256], portstr[8];
  int port;
  int rc = scps__metrics_parse(listen, host, sizeof host, &port, err);
  if (rc) return rc;
  snprintf(portstr, sizeof portstr, "%d", port);
  size_t hl = strlen(host);
  char bare[256];
  snprintf(bare, sizeof bare, "%s", host);
  char *h = bare;
  if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') {
    bare[hl - 1] = '\0';
    h = bare + 1;
  }
  struct addrinfo hints = {0}, *ai = NULL;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | AI_PASSIVE;
  int gai = getaddrinfo(h, portstr, &hints, &ai);
  if (gai)
    return scps_error_set(err, SCPS_EINVAL, "--metrics-listen '%s': cannot resolve '%s': %s", listen, h,
                          gai_strerror(gai));
  scps_metrics *m = calloc(1, sizeof *m);
  if (!m) {
    freeaddrinfo(ai);
    return scps_error_set(err, SCPS_ENOMEM, "--metrics-listen: out of memory");
  }
  m->srv = s;
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
  if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
  /* The port argument is ignored when MHD_OPTION_SOCK_ADDR gives one. */
  m->daemon = MHD_start_daemon(flags, 0, NULL, NULL, on_request, m, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                               MHD_OPTION_CONNECTION_LIMIT, (unsigned)64, MHD_OPTION_CONNECTION_TIMEOUT,
                               (unsigned)30, MHD_OPTION_END);
  freeaddrinfo(ai);
  if (!m->daemon) {
    free(m);
    return scps_error_set(err, SCPS_EIO, "--metrics-listen '%s': cannot serve HTTP there (address in use or "
                          "not this machine's?)", listen);
  }
  const union MHD_DaemonInfo *info = MHD_get_daemon_info(m->daemon, MHD_DAEMON_INFO_BIND_PORT);
  snprintf(m->url, sizeof m->url, "http://%s:%d/metrics", host, info ? info->port : port);
  *out = m;
  return 0;
}

const char *scps__metrics_url(const scps_metrics *m) { return m->url; }

void scps__metrics_stop(scps_metrics *m) {
  if (!m) return;
  MHD_stop_daemon(m->daemon);
  free(m);
}
