#include "scps_limits.h"

#include <grpc/support/time.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scps_grpc_args.h"
#include "scps_memtune.h"
#include "scps_scratch.h"

/* The default budget: this share of the memory available at start. The
 * rest is left to gRPC's own buffers (a quota of half the budget), to the
 * other processes of the host, a second scps-server among them. */
#define DEFAULT_BUDGET_DIVISOR 4
#define MIN_DEFAULT_BUDGET ((int64_t)64 << 20)

/* Server keepalive: a peer that stops answering pings for this long is
 * gone, and its connection (and the calls on it) is closed. */
#define KEEPALIVE_TIME_MS 60000
#define KEEPALIVE_TIMEOUT_MS 20000

/* The budget's thread wakes at least this often: transfer deadlines are
 * enforced to within it. */
#define TICK_NS 250000000LL
/* Freed memory goes back to the system once no call has run for this
 * long, or, under load that never pauses, this often when the memory in
 * use has fallen well below what it was. */
#define IDLE_TRIM_NS 1000000000LL
#define PERIODIC_TRIM_NS 10000000000LL
#define PERIODIC_TRIM_SLACK ((int64_t)64 << 20)

/* A field of /proc/meminfo in bytes, or -1. */
static int64_t meminfo(const char *field) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return -1;
  char line[256];
  int64_t v = -1;
  size_t n = strlen(field);
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, field, n) && line[n] == ':') {
      long long kb;
      if (sscanf(line + n + 1, "%lld", &kb) == 1) v = (int64_t)kb * 1024;
      break;
    }
  fclose(f);
  return v;
}

/* A number in a file (cgroup limits), or -1 ("max" and absurd values, the
 * "no limit" of cgroup v1, included). */
static int64_t read_number(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  long long v = -1;
  if (fscanf(f, "%lld", &v) != 1 || v <= 0 || v >= ((long long)1 << 60)) v = -1;
  fclose(f);
  return v;
}

/* Room left under this process's cgroup memory limit (v2, else v1), or -1
 * when it has none. */
static int64_t cgroup_room(void) {
  FILE *f = fopen("/proc/self/cgroup", "r");
  if (!f) return -1;
  char line[1024], path[1200];
  int64_t room = -1;
  while (room < 0 && fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = '\0';
    char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c2) continue;
    const char *rel = c2 + 1;
    int64_t limit = -1, usage = -1;
    if (!strncmp(line, "0::", 3)) {
      snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.max", rel);
      limit = read_number(path);
      snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.current", rel);
      usage = read_number(path);
    } else if (strstr(c1, "memory")) {
      /* A container often sees its own group at the mount's root. */
      for (int k = 0; k < 2 && limit < 0; k++) {
        const char *r = k ? "" : rel;
        snprintf(path, sizeof path, "/sys/fs/cgroup/memory%s/memory.limit_in_bytes", r);
        limit = read_number(path);
        snprintf(path, sizeof path, "/sys/fs/cgroup/memory%s/memory.usage_in_bytes", r);
        usage = read_number(path);
      }
    }
    if (limit > 0) room = limit > usage ? limit - (usage > 0 ? usage : 0) : 0;
  }
  fclose(f);
  return room;
}

static void format_bytes(double b, char *out, size_t len) {
  if (b >= (double)(1 << 30)) snprintf(out, len, "%.2f GiB", b / (double)(1 << 30));
  else if (b >= (double)(1 << 20)) snprintf(out, len, "%.1f MiB", b / (double)(1 << 20));
  else snprintf(out, len, "%.0f KiB", b / 1024.0);
}

/* The default budget: a quarter of MemAvailable, or of the room under the
 * cgroup's limit where that is less, measured once the tables are
 * initialized (so their pages are not counted as available). */
static int64_t default_budget(char *how, size_t len) {
  int64_t avail = meminfo("MemAvailable"), room = cgroup_room();
  const char *src = "MemAvailable";
  if (room >= 0 && (avail < 0 || room < avail)) {
    avail = room;
    src = "the cgroup's memory limit less its usage";
  }
  if (avail < 0) {
    snprintf(how, len, "the floor of the default: the memory available could not be read");
    return MIN_DEFAULT_BUDGET;
  }
  int64_t b = avail / DEFAULT_BUDGET_DIVISOR;
  char a[32];
  format_bytes((double)avail, a, sizeof a);
  if (b < MIN_DEFAULT_BUDGET) {
    snprintf(how, len, "the floor of the default (1/%d of %s available, %s, is less)", DEFAULT_BUDGET_DIVISOR, a, src);
    return MIN_DEFAULT_BUDGET;
  }
  snprintf(how, len, "default: 1/%d of the %s available at start (%s)", DEFAULT_BUDGET_DIVISOR, a, src);
  return b;
}

/* Returns freed memory to the system after a spike: once no call has run
 * for IDLE_TRIM_NS (idle scratch blocks too), or every PERIODIC_TRIM_NS
 * when the memory in use fell well below its level since the last trim.
 * Never per call: faulting pages in again is what the allocator settings
 * (scps_memtune.h) avoid. */
static void trim(scps_server *s, int64_t now) {
  scps_budget_stats st;
  scps__budget_get_stats(s->budget, &st);
  if (st.in_use > s->trim_peak) s->trim_peak = st.in_use;
  bool idle = atomic_load(&s->active) == 0 && now - atomic_load(&s->last_call_ns) >= IDLE_TRIM_NS;
  if (idle && atomic_exchange(&s->trim_due, false)) {
    scps__scratch_drop_idle(s->scratch, SIZE_MAX);
    scps_memtune_trim();
    atomic_fetch_add(&s->trims, 1);
    s->trim_peak = 0;
    s->next_periodic_trim_ns = now + PERIODIC_TRIM_NS;
    return;
  }
  if (now < s->next_periodic_trim_ns) return;
  s->next_periodic_trim_ns = now + PERIODIC_TRIM_NS;
  if (s->trim_peak > st.in_use + PERIODIC_TRIM_SLACK) {
    scps_memtune_trim();
    atomic_fetch_add(&s->trims, 1);
  }
  s->trim_peak = st.in_use;
}

static void tick(void *ud, int64_t now) {
  scps_server *s = ud;
  scps__call_sweep(s, now);
  trim(s, now);
}

static size_t reclaim(void *ud, size_t want) { return scps__scratch_drop_idle(ud, want); }

int scps__limits_init(scps_server *s, scps_error *err) {
  const scps_server_options *o = &s->opts;
  if (o->memory_budget < 0 || o->memory_wait_ms < 0 || o->max_streams < 1 || o->idle_timeout_s < 1 ||
      o->transfer_timeout_s < 1)
    return scps_error_set(err, SCPS_EINVAL,
                          "memory budget %lld, memory wait %d ms, max streams %d, idle timeout %d s, transfer "
                          "timeout %d s: the budget and wait must be >= 0, the others >= 1",
                          (long long)o->memory_budget, o->memory_wait_ms, o->max_streams, o->idle_timeout_s,
                          o->transfer_timeout_s);
  if (pthread_mutex_init(&s->watch_mu, NULL)) return scps_error_set(err, SCPS_ENOMEM, "cannot create a mutex");
  s->watch_mu_init = true;
  int64_t budget = o->memory_budget;
  if (budget) snprintf(s->budget_how, sizeof s->budget_how, "--memory-budget");
  else budget = default_budget(s->budget_how, sizeof s->budget_how);
  s->opts.memory_budget = budget;
  if (scps__budget_create((size_t)budget, &s->budget))
    return scps_error_set(err, SCPS_ENOMEM, "cannot start the memory budget's thread");
  scps__scratch_set_budget(s->scratch, s->budget);
  scps__budget_set_reclaim(s->budget, reclaim, s->scratch);
  atomic_store(&s->last_call_ns, scps__clock_ns());
  s->next_periodic_trim_ns = scps__clock_ns() + PERIODIC_TRIM_NS;
  scps__budget_set_tick(s->budget, tick, s, TICK_NS);
  return 0;
}

void scps__limits_free(scps_server *s) {
  if (s->budget) {
    scps__budget_destroy(s->budget);
    if (s->scratch) scps__scratch_set_budget(s->scratch, NULL);
    s->budget = NULL;
  }
  if (s->quota) grpc_resource_quota_unref(s->quota);
  s->quota = NULL;
  if (s->watch_mu_init) pthread_mutex_destroy(&s->watch_mu);
  s->watch_mu_init = false;
}

int64_t scps__limits_quota(const scps_server_options *o) {
  /* At least one request of the largest size accepted may arrive whole:
   * a smaller quota would reset it instead of letting the budget refuse it
   * with a message. */
  return o->memory_budget / 2 > o->max_message_bytes ? o->memory_budget / 2 : o->max_message_bytes;
}

int scps__limits_channel_args(scps_server *s, grpc_arg *args) {
  const scps_server_options *o = &s->opts;
  int n = 0;
  args[n++] = scps__grpc_args_int(GRPC_ARG_MAX_CONCURRENT_STREAMS, o->max_streams);
  args[n++] = scps__grpc_args_int(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                                  o->idle_timeout_s < INT32_MAX / 1000 ? o->idle_timeout_s * 1000 : INT32_MAX);
  args[n++] = scps__grpc_args_int(GRPC_ARG_KEEPALIVE_TIME_MS, KEEPALIVE_TIME_MS);
  args[n++] = scps__grpc_args_int(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, KEEPALIVE_TIMEOUT_MS);
  args[n++] = scps__grpc_args_int(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                                  o->transfer_timeout_s < INT32_MAX / 1000 ? o->transfer_timeout_s * 1000 : INT32_MAX);
  /* gRPC's own buffers (bytes of requests still arriving, connections):
   * past its quota, it reads less, refuses new connections and, as a last
   * resort, resets streams. */
  s->quota = grpc_resource_quota_create("scps-server");
  if (s->quota) {
    grpc_resource_quota_resize(s->quota, (size_t)scps__limits_quota(o));
    args[n].type = GRPC_ARG_POINTER;
    args[n].key = (char *)GRPC_ARG_RESOURCE_QUOTA;
    args[n].value.pointer.p = s->quota;
    args[n].value.pointer.vtable = grpc_resource_quota_arg_vtable();
    n++;
  }
  return n;
}

int64_t scps__limits_wait_deadline(const scps_call *c) {
  int64_t now = scps__clock_ns(), d = now + (int64_t)c->srv->opts.memory_wait_ms * 1000000;
  gpr_timespec dl = gpr_convert_clock_type(c->deadline, GPR_CLOCK_MONOTONIC);
  if (gpr_time_cmp(dl, gpr_inf_future(GPR_CLOCK_MONOTONIC)) < 0) {
    gpr_timespec left = gpr_time_sub(dl, gpr_now(GPR_CLOCK_MONOTONIC));
    if (left.tv_sec < 0) return now;
    if (left.tv_sec < (d - now) / 1000000000 + 1 && now + left.tv_sec * 1000000000 + left.tv_nsec < d)
      d = now + left.tv_sec * 1000000000 + left.tv_nsec;
  }
  return d;
}

void scps__limits_refusal(const scps_call *c, const char *what, size_t need, size_t in_use, size_t limit, char *msg,
                         size_t len) {
  char n[32], u[32], l[32];
  format_bytes((double)need, n, sizeof n);
  format_bytes((double)in_use, u, sizeof u);
  format_bytes((double)limit, l, sizeof l);
  const char *m = c->method < SCPS_M_COUNT ? scps__method_name(c->method) : "call";
  if (need > limit)
    snprintf(msg, len, "%s: needs %s (%s), more than the server's whole memory budget of %s (--memory-budget); "
             "send smaller batches or raise the budget", m, n, what, l);
  else
    snprintf(msg, len, "%s: needs %s (%s) of the server's memory budget of %s (--memory-budget); other calls "
             "held %s in use throughout a wait of %.1f s (--memory-wait-ms or the call's deadline); retry later", m, n,
             what, l, u,
             c->wait.since_ns ? (double)(scps__clock_ns() - c->wait.since_ns) * 1e-9 : 0.0);
}

void scps__limits_stats(scps_server *s, Scps__V1__MemoryStats *out) {
  scps_budget_stats st;
  scps__budget_get_stats(s->budget, &st);
  out->budget_bytes = st.limit;
  out->in_use_bytes = st.in_use;
  out->peak_bytes = st.peak;
  out->scratch_idle_bytes = (int64_t)scps__scratch_idle_bytes(s->scratch);
  out->calls_waited = st.waited;
  out->calls_refused = st.refused;
  out->calls_waiting = st.waiting;
  out->requests_timed_out = atomic_load(&s->requests_timed_out);
  out->answers_timed_out = atomic_load(&s->answers_timed_out);
  out->trims = atomic_load(&s->trims);
}
