/* scps-server: flags, configuration file, and the libuv loop that owns
 * signals, the drain timer and the checkpoint timer while the server threads
 * serve. */
#include <errno.h>
#include <grpc/support/log.h>
#include <stddef.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "scps_auth.h"
#include "scps_flags.h"
#include "scps_log.h"
#include "scps_metrics.h"
#include "scps_server.h"
#include "scps_memtune.h"
#include "scps_units.h"
#include "scps_workload.h"
#include "scps_version.h"

static const char usage[] =
    "usage: scps-server --config FILE --process-index I --num-processes P [options]\n"
    "Serves scps.v1.EmbeddingService for process I of a cluster of P processes,\n"
    "each simulating S SparseCores. Every process of a cluster must get the same\n"
    "--config, --num-processes, --sc-per-process and --sc-memory; clients check.\n"
    "\n"
    "  --config FILE          tables and features, in the workload JSON format\n"
    "                         (deploy/workloads/README.md; its batch_size is every\n"
    "                         feature's batch size; the ids section is ignored and\n"
    "                         may be left out)\n"
    "  --listen ADDR          host:port to serve on (default 127.0.0.1:50051: this\n"
    "                         machine only; port 0 picks a free port, see\n"
    "                         --port-file). An address other machines can reach\n"
    "                         needs TLS and tokens or client certificates, or\n"
    "                         --insecure (see below)\n"
    "  --process-index I      this process's index in [0, P) (default 0); auto:\n"
    "                         the trailing -N of the host name, a Kubernetes\n"
    "                         StatefulSet pod's ordinal (pod scps-2 is 2;\n"
    "                         SCPS_HOSTNAME, when set, stands for the host name)\n"
    "  --num-processes P      processes in the cluster (default 1)\n"
    "  --sc-per-process S     simulated SparseCores in this process (default 2)\n"
    "  --sc-memory BYTES      memory per SparseCore; K, M, G suffixes (default 4G);\n"
    "                         the tables must fit (rows counted in their\n"
    "                         storage_format) or the server refuses to start\n"
    "  --cq-threads N         gRPC completion-queue threads (default 2)\n"
    "  --tc-threads N         TensorCore-stage workers: merging partials, encoding\n"
    "                         (default 1)\n"
    "  --max-message-mb N     largest request accepted, MiB (default 256)\n"
    "  --inline-lookup-entries N\n"
    "                         Lookups of at most N ids (COO entries, summed over\n"
    "                         stacks) run whole on the thread that received them,\n"
    "                         without waking every SparseCore worker: more small\n"
    "                         batches served per second; 0 sends every Lookup\n"
    "                         through the SparseCore workers (default 16384)\n"
    "  --pin-sparsecores on|off\n"
    "                         pin SparseCore worker k of process p to CPU\n"
    "                         (p * S + k) mod n of the n CPUs the process may\n"
    "                         use, so a lookup's workers run side by side; off\n"
    "                         leaves them to the scheduler, which may queue\n"
    "                         them on one CPU (default on; nothing is pinned\n"
    "                         when n < 2)\n"
    "  --drain-seconds N      on SIGTERM/SIGINT, wait this long for calls in\n"
    "                         flight before cancelling them (default 10); a\n"
    "                         second signal cancels them at once. With\n"
    "                         --checkpoint-dir the step held is then saved\n"
    "                         (if anything was applied since the last save)\n"
    "                         before the process exits\n"
    "  --port-file FILE       write the bound port to FILE once serving (exit 1\n"
    "                         if it cannot be written)\n"
    "  --checkpoint-dir ROOT  checkpoints go to ROOT/step-<step>/ (Checkpoint\n"
    "                         requests without a directory, the timer's saves)\n"
    "                         or below ROOT: a Checkpoint's directory is relative\n"
    "                         to it (no '..', no symlink below ROOT followed);\n"
    "                         without it Checkpoint requests are refused. Without\n"
    "                         --restore, the newest complete checkpoint of this\n"
    "                         cluster (same configuration fingerprint) under ROOT\n"
    "                         is restored at start, or, in a root of this\n"
    "                         process's own (a volume per container), its newest\n"
    "                         part; retention deletes only this cluster's\n"
    "                         checkpoints and the files they list\n"
    "  --restore DIR          restore this step directory at start (any topology:\n"
    "                         the tables are resharded); a missing or corrupt\n"
    "                         file stops the start, naming the file\n"
    "  --checkpoint-every S   with steps applied, ask clients for a cluster\n"
    "                         checkpoint (checkpoint_due in ApplyGradients\n"
    "                         responses) at odd multiples of S seconds of the\n"
    "                         wall clock; without a Checkpoint request by the\n"
    "                         next multiple, save alone at the next two\n"
    "                         --checkpoint-grid steps above the step held\n"
    "                         (needs --checkpoint-dir). Every process of a\n"
    "                         cluster ticks at the same moments\n"
    "  --checkpoint-keep K    complete checkpoints (in a root of this process's\n"
    "                         own: parts) kept per root after a save:\n"
    "                         the one saved and the newest before it (default\n"
    "                         3); newer ones, left behind by a --restore of an\n"
    "                         older step, are renamed superseded-step-...\n"
    "  --tls-cert FILE        PEM certificate chain of this server: TLS on the port\n"
    "  --tls-key FILE         its PEM private key (unencrypted; keep it 0600)\n"
    "  --tls-client-ca FILE   PEM roots: clients must present a certificate that\n"
    "                         chains to one of them (mutual TLS)\n"
    "  --token-file FILE      bearer tokens, one 'ROLE TOKEN' line each (ROLE\n"
    "                         training or admin, TOKEN 16+ printable characters;\n"
    "                         # comments); every call must carry 'authorization:\n"
    "                         Bearer TOKEN' of one of them. training may call\n"
    "                         GetConfig, Lookup, ApplyGradients, Stats, Health;\n"
    "                         admin may call everything; grpc.health.v1 Check\n"
    "                         needs no token. Without it every caller is admin\n"
    "  --insecure             serve a non-loopback --listen address without TLS\n"
    "                         and tokens or client certificates (loud warning)\n"
    "  --shm-socket auto|off|PATH\n"
    "                         shared-memory answers for trainers on this host:\n"
    "                         a Unix socket (mode 0600: this user only) where\n"
    "                         libscps attaches memory the Lookup answers are\n"
    "                         written into, so they skip the network stack;\n"
    "                         tokens are checked as on --listen. auto (default):\n"
    "                         in a new private directory under $TMPDIR or /tmp;\n"
    "                         off: none; GetConfig tells clients the path"
    "  --memory-budget BYTES  memory the calls in flight may hold: requests (about\n"
    "                         twice their bytes), answers until sent, scratch,\n"
    "                         idle scratch kept for reuse; K, M, G suffixes\n"
    "                         (default: 1/4 of the memory available once the\n"
    "                         tables are initialized, MemAvailable or the\n"
    "                         cgroup's limit less its usage if less, at least\n"
    "                         64M; logged at start). gRPC's own buffers get a\n"
    "                         quota of half the budget (at least\n"
    "                         --max-message-mb) on top\n"
    "  --memory-wait-ms MS    a call without room in the budget waits this long\n"
    "                         (or until its deadline) for it, then gets\n"
    "                         RESOURCE_EXHAUSTED; one that needs more than the\n"
    "                         whole budget is refused at once (default 2000)\n"
    "  --max-streams N        concurrent calls per connection (default 100)\n"
    "  --idle-timeout S       close connections without calls for S seconds;\n"
    "                         clients reconnect when they next call (default 300)\n"
    "  --transfer-timeout S   cancel a call whose request message has not\n"
    "                         arrived, or whose answer the client has not taken,\n"
    "                         S seconds after it began (DEADLINE_EXCEEDED); also\n"
    "                         the deadline of a connection's handshake (default 60)\n"
    "  --checkpoint-min-interval S\n"
    "                         a Checkpoint of another step sooner than S seconds\n"
    "                         after the last save is refused (RESOURCE_EXHAUSTED,\n"
    "                         saying when to retry; one for the step just saved\n"
    "                         gets that save's result); the timer's own saves\n"
    "                         (--checkpoint-every) are not limited by it, so every\n"
    "                         process saves the same steps; 0: no limit\n"
    "                         (default 10)\n"
    "  --checkpoint-snapshot-max BYTES\n"
    "                         a save first copies the process's tables and slots\n"
    "                         to memory (ApplyGradients wait only for the copy)\n"
    "                         when the copy takes at most BYTES; K, M, G\n"
    "                         suffixes; auto: half the memory available at the\n"
    "                         save; 0: never (default auto). The copy's memory\n"
    "                         is kept for the next save, and the system may\n"
    "                         reclaim it meanwhile\n"
    "  --limit-policy refuse|drop\n"
    "                         a Lookup or ApplyGradients whose partition (source\n"
    "                         SparseCore -> destination SparseCore) holds more ids\n"
    "                         or distinct ids than the limits in force (GetConfig\n"
    "                         reports them): refuse it (INVALID_ARGUMENT naming\n"
    "                         stack, partition, count and limit), or drop the ids\n"
    "                         beyond the limits as libscps's preprocessing drops\n"
    "                         them (default refuse)\n"
    "  --partition-limits IDS,UNIQUE\n"
    "                         every stack's limits in force from the start, instead\n"
    "                         of the declaration's or a restored checkpoint's (for\n"
    "                         loads whose batches the declared limits do not fit;\n"
    "                         libscps adopts them at connect)\n"
    "  --max-step-advance N   an ApplyGradients or Checkpoint step may be at most\n"
    "                         N above the step this process holds (at most N\n"
    "                         when it holds none), and below 2^53; others are\n"
    "                         refused and change nothing (default 1000000)\n"
    "  --drain-quiet-ms MS    with --checkpoint-dir, a draining process still\n"
    "                         takes ApplyGradients (no Lookups) until none has\n"
    "                         arrived for MS milliseconds, so pushes in flight\n"
    "                         reach every process of a cluster stopped together;\n"
    "                         0 refuses them at once (default 1000)\n"
    "  --checkpoint-grid N    solo saves of --checkpoint-every land on multiples\n"
    "                         of N steps; give every process the same N, at most\n"
    "                         the steps a period takes (default 100)\n"
    "  --metrics-listen ADDR  serve Prometheus metrics over HTTP at\n"
    "                         http://ADDR/metrics (text format 0.0.4; names in\n"
    "                         deploy/OPERATING.md); ADDR is HOST:PORT, or PORT\n"
    "                         alone for 127.0.0.1:PORT; port 0 picks a free one\n"
    "                         (logged). Plain HTTP without tokens: a non-loopback\n"
    "                         HOST shows the counters to anyone who can reach it\n"
    "                         (default: no metrics endpoint)\n"
    "  --log-format text|json log lines on stderr: text (default), each line\n"
    "                         '2026-11-26T20:15:03.123Z INFO scps-server: ...', or\n"
    "                         one JSON object per line with \"ts\", \"level\"\n"
    "                         (debug, info, warn, error), \"msg\", \"process\" and\n"
    "                         the line's own fields (\"step\", \"path\", ...);\n"
    "                         timestamps are RFC 3339, UTC, with milliseconds\n"
    "  --help                 this text\n"
    "  --version              print the version and exit\n"
    "\n"
    "Every option can also come from the environment: --foo-bar from\n"
    "SCPS_FOO_BAR (SCPS_CONFIG, SCPS_LISTEN, SCPS_PROCESS_INDEX,\n"
    "SCPS_NUM_PROCESSES, SCPS_CHECKPOINT_DIR, SCPS_LOG_FORMAT, ...; --insecure\n"
    "from SCPS_INSECURE=1, true, 0 or false), so one container definition can\n"
    "run every process of a cluster. A flag on the command line wins over its\n"
    "variable, which wins over the default; an empty variable counts as unset,\n"
    "and SCPS_* variables that name no option are ignored. A bad value is\n"
    "refused as the flag's would be (exit 2), naming the variable. --help and\n"
    "--version are read from the command line only.\n"
    "\n"
    "Who may connect: a server listening on an address other than loopback\n"
    "refuses to start (exit 2) unless it has TLS (--tls-cert, --tls-key) and\n"
    "a way to tell its callers (--token-file or --tls-client-ca), or\n"
    "--insecure: without them anyone who reaches the port can read and change\n"
    "every table and save checkpoints. deploy/SECURITY.md has the details.\n"
    "\n"
    "While a checkpoint is saved, Lookups are served and ApplyGradients wait until\n"
    "the state is copied (or, without a copy, saved), then run in arrival order;\n"
    "one save runs at a time.\n"
    "\n"
    "Exit status: 0 after a clean shutdown on SIGTERM or SIGINT; 1 when the\n"
    "configuration is invalid, the tables do not fit, the checkpoint to restore\n"
    "is missing or corrupt, a TLS or token file is unreadable or malformed, the\n"
    "address is in use, or the save of the step held at exit failed; 2 for bad\n"
    "flags or variables, and for a non-loopback --listen without TLS and tokens\n"
    "or client certificates (or --insecure).\n";

typedef struct app {
  uv_loop_t *loop;
  uv_signal_t sigterm, sigint;
  uv_timer_t drain, checkpoint;
  uv_async_t stopped;
  scps_server *server;
  double drain_seconds;
  int shutting_down;
  uint64_t signalled_at; /* uv_hrtime() of the first SIGTERM/SIGINT */
  uv_timer_t quiet;      /* while draining takes pushes: watches for the quiet period */
  long drain_quiet_ms;
  uint64_t checkpoint_every_ms;
} app;

/* Each step of a shutdown is logged with its time since the signal, so a
 * slow exit shows which step took the time. */
static double since(uint64_t t0) { return (double)(uv_hrtime() - t0) * 1e-9; }

static void on_stopped_async(uv_async_t *a) {
  app *ap = a->data;
  if (ap->shutting_down)
    scps__log(SCPS_LOG_INFO, "every call finished %.3f s after the signal", since(ap->signalled_at));
  uv_timer_stop(&ap->drain);
  uv_timer_stop(&ap->checkpoint);
  uv_timer_stop(&ap->quiet);
  uv_close((uv_handle_t *)&ap->quiet, NULL);
  uv_close((uv_handle_t *)&ap->checkpoint, NULL);
  uv_close((uv_handle_t *)&ap->sigterm, NULL);
  uv_close((uv_handle_t *)&ap->sigint, NULL);
  uv_close((uv_handle_t *)&ap->drain, NULL);
  uv_close((uv_handle_t *)&ap->stopped, NULL);
}

/* Called on a server thread; only uv_async_send may cross into the loop. */
static void on_stopped(void *ud) {
  app *ap = ud;
  uv_async_send(&ap->stopped);
}

static void on_drain_timeout(uv_timer_t *t) {
  app *ap = t->data;
  scps__log(SCPS_LOG_WARN, "calls still in flight after %.3f s; cancelling them", since(ap->signalled_at));
  uv_timer_stop(&ap->quiet);
  scps__server_cancel_all(ap->server);
}

/* Milliseconds to the next multiple of period_ms of the wall clock: every
 * process of a cluster (on hosts whose clocks agree) ticks at the same
 * moment, whenever it started. A timer that fired a little early has had
 * its tick: the next one is a period on. */
static uint64_t ms_to_next_tick(uint64_t period_ms) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t now = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
  uint64_t d = period_ms - now % period_ms;
  return d < period_ms / 4 ? d + period_ms : d;
}

/* The number of the wall clock's period of period_ms that begins about now
 * (the timer may fire a little early or late). */
static int64_t tick_number(uint64_t period_ms) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t now = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
  return (int64_t)((now + period_ms / 2) / period_ms);
}

static void on_checkpoint_timer(uv_timer_t *t) {
  app *ap = t->data;
  scps__server_checkpoint_tick(ap->server, tick_number(ap->checkpoint_every_ms));
  uv_timer_start(&ap->checkpoint, on_checkpoint_timer, ms_to_next_tick(ap->checkpoint_every_ms), 0);
}

/* While a draining process still takes ApplyGradients: once none has come
 * for --drain-quiet-ms, it takes no more, and the drain goes on. */
static void on_quiet_timer(uv_timer_t *t) {
  app *ap = t->data;
  int64_t quiet = scps__server_push_quiet_ms(ap->server);
  if (quiet >= 0 && quiet < ap->drain_quiet_ms) return;
  uv_timer_stop(&ap->quiet);
  if (quiet < 0) return;
  scps__log(SCPS_LOG_INFO, "no ApplyGradients for %lld ms, %.3f s after the signal; taking no more",
            (long long)quiet, since(ap->signalled_at));
  scps__server_close_pushes(ap->server);
}

/* The first SIGTERM/SIGINT drains; a second one cancels what is left at
 * once, as the drain timeout would. */
static void on_signal(uv_signal_t *h, int signum) {
  app *ap = h->data;
  if (ap->shutting_down) {
    scps__log(SCPS_LOG_INFO, "%s again %.3f s after the first signal; cancelling calls in flight",
              signum == SIGTERM ? "SIGTERM" : "SIGINT", since(ap->signalled_at));
    uv_timer_stop(&ap->drain);
    uv_timer_stop(&ap->quiet);
    scps__server_cancel_all(ap->server);
    return;
  }
  ap->shutting_down = 1;
  ap->signalled_at = uv_hrtime();
  scps__log(SCPS_LOG_INFO, "%s: finishing calls in flight", signum == SIGTERM ? "SIGTERM" : "SIGINT");
  uv_timer_stop(&ap->checkpoint);
  scps__server_shutdown(ap->server);
  if (scps__server_push_quiet_ms(ap->server) >= 0) {
    scps__log(SCPS_LOG_INFO, "taking ApplyGradients (no Lookups) until none arrives for %ld ms, so pushes in "
              "flight reach every process; then saving the step held", ap->drain_quiet_ms);
    uint64_t poll = ap->drain_quiet_ms >= 200 ? 50 : (uint64_t)(ap->drain_quiet_ms / 4 + 1);
    uv_timer_start(&ap->quiet, on_quiet_timer, poll, poll);
  }
  uv_timer_start(&ap->drain, on_drain_timeout, (uint64_t)(ap->drain_seconds * 1000), 0);
}

/* With --checkpoint-dir, after every call finished: the step held is saved
 * (scps__server_save_held), and the log says so. */
static int save_at_exit(app *ap) {
  int64_t step;
  char path[4096];
  scps_error err;
  int rc = scps__server_save_held(ap->server, &step, path, sizeof path, &err);
  if (rc < 0) {
    scps__log(SCPS_LOG_ERROR, "the save of the step held before exiting failed: %s", err.msg);
    return 1;
  }
  if (rc > 0) {
    scps_log_kv kv[] = {SCPS_LOG_INT("step", step), SCPS_LOG_STRING("path", path)};
    scps__log_kv(SCPS_LOG_INFO, kv, 2, "saved step %lld to %s before exiting, %.3f s after the signal",
                 (long long)step, path, since(ap->signalled_at));
  } else if (step >= 0)
    scps__log(SCPS_LOG_INFO, "nothing applied since the last save or restore of step %lld; no save at exit",
              (long long)step);
  else
    scps__log(SCPS_LOG_INFO, "no step applied or restored; nothing to save at exit");
  return 0;
}

/* HOST:PORT with a port in [0, 65535] (0: any free port). */
static int check_listen(const char *s) {
  const char *colon = strrchr(s, ':');
  if (!colon || !colon[1] || colon[1 + strspn(colon + 1, "0123456789")]) return -1;
  char *end;
  long port = strtol(colon + 1, &end, 10);
  return port >= 0 && port <= 65535 ? 0 : -1;
}

/* The bound port to path, whole or not at all (written beside it, then
 * renamed), for scripts that wait for the file to appear. */
static int write_port_file(const char *path, int port) {
  char tmp[4096];
  if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) return -1;
  FILE *f = fopen(tmp, "w");
  if (!f) return -1;
  bool ok = fprintf(f, "%d\n", port) > 0;
  ok = fclose(f) == 0 && ok;
  if (ok && rename(tmp, path) == 0) return 0;
  unlink(tmp);
  return -1;
}

/* The flags of who may connect, together, and the loopback rule: an address
 * other machines can reach gets TLS and a way to tell callers apart
 * (tokens or client certificates), or --insecure says the network is
 * trusted. Prints why and returns -1 when the server must not start. */
static int check_exposure(const scps_server_options *o, bool insecure) {
  if (!o->tls_cert_file != !o->tls_key_file) {
    scps__log(SCPS_LOG_ERROR, "--tls-cert and --tls-key go together (%s given alone)",
              o->tls_cert_file ? "--tls-cert" : "--tls-key");
    return -1;
  }
  if (o->tls_client_ca_file && !o->tls_cert_file) {
    scps__log(SCPS_LOG_ERROR, "--tls-client-ca needs --tls-cert and --tls-key (mutual TLS is TLS)");
    return -1;
  }
  bool tls = o->tls_cert_file != NULL, callers_known = o->token_file || o->tls_client_ca_file;
  if ((tls && callers_known) || scps__listen_is_loopback(o->listen)) return 0;
  if (insecure) {
    scps__log(SCPS_LOG_WARN,
              "WARNING: --insecure: serving %s %s: anyone who can reach this port can read and "
              "change every table, push gradients and save checkpoints",
              o->listen, tls ? "with TLS but without tokens or client certificates"
                             : callers_known ? "with tokens but without TLS (tokens travel in the clear)"
                                             : "without TLS and without tokens");
    return 0;
  }
  scps__log(SCPS_LOG_ERROR,
            "--listen %s is not a loopback address, and %s: anyone who can reach it could read and "
            "change every table and save checkpoints. Give it --tls-cert and --tls-key with --token-file or "
            "--tls-client-ca (deploy/SECURITY.md), listen on 127.0.0.1, or pass --insecure on a network you "
            "trust",
            o->listen, !tls && !callers_known ? "it has neither TLS nor tokens or client certificates"
                       : !tls                 ? "it has no TLS (--tls-cert, --tls-key): tokens would travel in the clear"
                                              : "it has TLS but no tokens (--token-file) or client certificates "
                                                "(--tls-client-ca)");
  return -1;
}

/* The memory budget and the connection limits in force, once at start. */
static void log_limits(const scps_server *s, const scps_server_options *o) {
  const char *how;
  int64_t quota;
  double budget = (double)scps__server_memory_budget(s, &how, &quota);
  scps__log(SCPS_LOG_INFO,
            "memory budget %.1f MiB (%s), gRPC buffers up to %.1f MiB more; %d streams per "
            "connection, idle connections closed after %d s, transfers cancelled after %d s",
            budget / (1 << 20), how, (double)quota / (1 << 20), o->max_streams, o->idle_timeout_s,
            o->transfer_timeout_s);
  const char *shm = scps__server_shm_socket(s);
  if (shm) scps__log(SCPS_LOG_INFO, "shared-memory answers for clients on this host at %s", shm);
  else scps__log(SCPS_LOG_INFO, "shared-memory answers off (--shm-socket off)");
}

/* What the flags and variables fill: the server's options and the
 * program's own. Fields that are not the options' own type are converted
 * after parsing. */
typedef struct args {
  scps_server_options o;
  const char *config, *port_file, *metrics_listen;
  int64_t max_message_mb, drain_seconds, checkpoint_every, checkpoint_min_interval, drain_quiet_ms;
  int pin_off;    /* --pin-sparsecores: 0 on, 1 off */
  int limit_drop; /* --limit-policy: 0 refuse, 1 drop */
  bool insecure;
  char index_host[256]; /* --process-index auto: the host name it came from */
} args;

#define MAX_PROCESSES 1024

/* Applied first (the table's first row), so the errors of every other
 * flag are logged in the format asked for. */
static int set_log_format(void *dst, const char *v, const char *name, scps_error *err) {
  (void)dst;
  scps_log_format f;
  int rc = scps__log_parse_format(name, v, &f, err);
  if (!rc) scps__log_set_format(f);
  return rc;
}

static int set_listen(void *dst, const char *v, const char *name, scps_error *err) {
  if (check_listen(v))
    return scps_error_set(err, SCPS_EINVAL, "%s '%s': expected HOST:PORT with a port in [0, 65535]", name, v);
  ((args *)dst)->o.listen = v;
  return 0;
}

/* HOST:PORT or PORT (scps_metrics.h). */
static int set_metrics_listen(void *dst, const char *v, const char *name, scps_error *err) {
  scps_error e;
  if (scps__metrics_parse(v, NULL, 0, NULL, &e)) return scps_error_set(err, SCPS_EINVAL, "%s: %s", name, e.msg);
  ((args *)dst)->metrics_listen = v;
  return 0;
}

/* An index, or auto: the host name's StatefulSet ordinal. */
static int set_process_index(void *dst, const char *v, const char *name, scps_error *err) {
  args *a = dst;
  a->index_host[0] = '\0';
  if (strcmp(v, "auto")) {
    long i;
    scps_error e;
    if (scps__parse_long(name, v, 0, MAX_PROCESSES - 1, &i, &e))
      return scps_error_set(err, SCPS_EINVAL, "%s '%s': expected an integer in [0, %d] or auto", name, v,
                            MAX_PROCESSES - 1);
    a->o.process_index = (int32_t)i;
    return 0;
  }
  int64_t i;
  scps_error e;
  int rc = scps__flags_host_ordinal(MAX_PROCESSES - 1, &i, a->index_host, sizeof a->index_host, &e);
  if (rc) return scps_error_set(err, rc, "%s 'auto': %s", name, e.msg);
  a->o.process_index = (int32_t)i;
  return 0;
}

static int set_snapshot_max(void *dst, const char *v, const char *name, scps_error *err) {
  int64_t *max = &((args *)dst)->o.checkpoint_snapshot_max;
  if (!strcmp(v, "auto"))
    *max = -1;
  else if (!strcmp(v, "0"))
    *max = 0;
  else if (scps__parse_bytes(v, max))
    return scps_error_set(err, SCPS_EINVAL, "%s '%s': expected auto, 0 or bytes like 512M or 4G", name, v);
  return 0;
}

/* IDS,UNIQUE: two limits in [1, 2^31 - 1]. */
static int set_partition_limits(void *dst, const char *v, const char *name, scps_error *err) {
  int32_t *out = ((args *)dst)->o.partition_limits;
  const char *comma = strchr(v, ',');
  char ids[32], what[80];
  long x;
  if (!comma || (size_t)(comma - v) >= sizeof ids)
    return scps_error_set(err, SCPS_EINVAL, "%s '%s': expected IDS,UNIQUE (e.g. 4096,1024)", name, v);
  memcpy(ids, v, (size_t)(comma - v));
  ids[comma - v] = '\0';
  snprintf(what, sizeof what, "%s IDS", name);
  int rc = scps__parse_long(what, ids, 1, INT32_MAX, &x, err);
  if (rc) return rc;
  out[0] = (int32_t)x;
  snprintf(what, sizeof what, "%s UNIQUE", name);
  rc = scps__parse_long(what, comma + 1, 1, INT32_MAX, &x, err);
  if (rc) return rc;
  out[1] = (int32_t)x;
  return 0;
}

/* One row of the table per kind (scps_flags.h). */
#define AT(field) offsetof(args, field)
#define F_STRING(name, field) {name, SCPS_FLAG_STRING, AT(field), 0, 0, NULL, NULL}
#define F_INT32(name, field, lo, hi) {name, SCPS_FLAG_INT32, AT(field), lo, hi, NULL, NULL}
#define F_INT64(name, field, lo, hi) {name, SCPS_FLAG_INT64, AT(field), lo, hi, NULL, NULL}
#define F_BYTES(name, field, lo) {name, SCPS_FLAG_BYTES, AT(field), lo, 0, NULL, NULL}
#define F_CHOICE(name, field, choices) {name, SCPS_FLAG_CHOICE, AT(field), 0, 0, choices, NULL}
#define F_SWITCH(name, field) {name, SCPS_FLAG_SWITCH, AT(field), 0, 0, NULL, NULL}
#define F_CUSTOM(name, set) {name, SCPS_FLAG_CUSTOM, 0, 0, 0, NULL, set}
#define F_COMMAND(name) {name, SCPS_FLAG_COMMAND, 0, 0, 0, NULL, NULL}

/* Every flag, one row each: --NAME on the command line, or SCPS_NAME in the
 * environment (scps_flags.h), applied in this order. */
static const scps_flag flags[] = {
    F_CUSTOM("log-format", set_log_format),
    F_STRING("config", config),
    F_CUSTOM("listen", set_listen),
    F_CUSTOM("process-index", set_process_index),
    F_INT32("num-processes", o.topology.num_processes, 1, MAX_PROCESSES),
    F_INT32("sc-per-process", o.topology.sc_per_process, 1, 64),
    F_BYTES("sc-memory", o.topology.sc_memory_bytes, 1),
    F_INT32("cq-threads", o.cq_threads, 1, 64),
    F_INT32("tc-threads", o.tc_threads, 1, 64),
    F_INT64("max-message-mb", max_message_mb, 1, 2047),
    F_INT64("inline-lookup-entries", o.inline_lookup_entries, 0, (int64_t)1 << 40),
    F_CHOICE("pin-sparsecores", pin_off, "on|off"),
    F_INT64("drain-seconds", drain_seconds, 0, 3600),
    F_STRING("port-file", port_file),
    F_STRING("checkpoint-dir", o.checkpoint_dir),
    F_STRING("restore", o.restore_dir),
    F_INT64("checkpoint-every", checkpoint_every, 1, 30L * 86400),
    F_INT32("checkpoint-keep", o.checkpoint_keep, 1, 1000000),
    F_STRING("tls-cert", o.tls_cert_file),
    F_STRING("tls-key", o.tls_key_file),
    F_STRING("tls-client-ca", o.tls_client_ca_file),
    F_STRING("token-file", o.token_file),
    F_SWITCH("insecure", insecure),
    F_STRING("shm-socket", o.shm_socket),
    F_BYTES("memory-budget", o.memory_budget, 1 << 20),
    F_INT32("memory-wait-ms", o.memory_wait_ms, 0, 3600000),
    F_INT32("max-streams", o.max_streams, 1, 1000000),
    F_INT32("idle-timeout", o.idle_timeout_s, 1, 30L * 86400),
    F_INT32("transfer-timeout", o.transfer_timeout_s, 1, 86400),
    F_INT64("checkpoint-min-interval", checkpoint_min_interval, 0, 86400),
    F_CUSTOM("checkpoint-snapshot-max", set_snapshot_max),
    F_CHOICE("limit-policy", limit_drop, "refuse|drop"),
    F_CUSTOM("partition-limits", set_partition_limits),
    F_INT64("max-step-advance", o.max_step_advance, 1, (int64_t)1 << 53),
    F_INT64("drain-quiet-ms", drain_quiet_ms, 0, 3600000),
    F_INT64("checkpoint-grid", o.checkpoint_grid, 1, (int64_t)1 << 53),
    F_CUSTOM("metrics-listen", set_metrics_listen),
    F_COMMAND("help"),
    F_COMMAND("version"),
};

/* gRPC's own log lines (GRPC_VERBOSITY), in this program's format. */
static void on_grpc_log(gpr_log_func_args *g) {
  scps_log_level level = g->severity == GPR_LOG_SEVERITY_ERROR  ? SCPS_LOG_ERROR
                         : g->severity == GPR_LOG_SEVERITY_INFO ? SCPS_LOG_INFO
                                                                : SCPS_LOG_DEBUG;
  scps_log_kv kv[] = {SCPS_LOG_STRING("file", g->file), SCPS_LOG_INT("line", g->line)};
  scps__log_kv(level, kv, 2, "gRPC %s:%d: %s", g->file, g->line, g->message);
}

int main(int argc, char **argv) {
  scps__log_set_program("scps-server");
  args a = {0};
  a.o.listen = "127.0.0.1:50051";
  a.o.shm_socket = "auto";
  scps_memtune_apply();
  a.o.topology = (scps_topology){1, 2, (int64_t)4 << 30};
  a.o.cq_threads = 2;
  a.o.tc_threads = 1;
  a.max_message_mb = 256;
  a.o.checkpoint_keep = 3;
  a.checkpoint_min_interval = 10;
  a.o.checkpoint_snapshot_max = -1;
  a.o.inline_lookup_entries = 16384;
  a.o.memory_wait_ms = 2000;
  a.o.max_streams = 100;
  a.o.idle_timeout_s = 300;
  a.o.transfer_timeout_s = 60;
  a.drain_seconds = 10;
  a.drain_quiet_ms = 1000;
  const scps_flag *command;
  scps_error err;
  int prc = scps__flags_parse(flags, (int)(sizeof flags / sizeof flags[0]), argc, argv, "SCPS_", &a, &command, &err);
  if (command && !strcmp(command->name, "help")) {
    fputs(usage, stdout);
    return 0;
  }
  if (command) {
    printf("scps-server %s\n", scps_version());
    return 0;
  }
  if (prc) {
    scps__log(SCPS_LOG_ERROR, "%s", err.msg);
    if (prc == SCPS_EPARSE) fputs(usage, stderr);
    return 2;
  }
  if (!a.config) {
    scps__log(SCPS_LOG_ERROR, "--config is required (or SCPS_CONFIG in the environment)");
    fputs(usage, stderr);
    return 2;
  }
  scps_server_options o = a.o;
  o.max_message_bytes = a.max_message_mb << 20;
  o.pin_sparsecores = !a.pin_off;
  o.limit_policy = a.limit_drop ? SCPS_LIMIT_DROP : SCPS_LIMIT_ERROR;
  o.checkpoint_min_interval = (double)a.checkpoint_min_interval;
  const char *config = a.config, *port_file = a.port_file;
  if (o.process_index >= o.topology.num_processes) {
    scps__log(SCPS_LOG_ERROR, "--process-index %d%s%s%s must be below --num-processes %d", o.process_index,
              a.index_host[0] ? " (the ordinal of host name '" : "", a.index_host, a.index_host[0] ? "')" : "",
              o.topology.num_processes);
    return 2;
  }
  scps__log_set_int("process", o.process_index);
  gpr_set_log_function(on_grpc_log);
  if (a.checkpoint_every && !o.checkpoint_dir) {
    scps__log(SCPS_LOG_ERROR, "--checkpoint-every needs --checkpoint-dir");
    return 2;
  }
  if (check_exposure(&o, a.insecure)) return 2;
  /* Logs and GetConfig name the checkpoint root as a path that means
   * something away from this process's working directory. */
  static char checkpoint_root[PATH_MAX];
  if (o.checkpoint_dir && o.checkpoint_dir[0] != '/') {
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd) ||
        snprintf(checkpoint_root, sizeof checkpoint_root, "%s/%s", cwd, o.checkpoint_dir) >= (int)sizeof checkpoint_root) {
      scps__log(SCPS_LOG_ERROR, "--checkpoint-dir '%s': cannot make it an absolute path", o.checkpoint_dir);
      return 2;
    }
    o.checkpoint_dir = checkpoint_root;
  }
  /* A file size limit must fail a checkpoint write with EFBIG (reported as
   * RESOURCE_EXHAUSTED), not kill the server. */
  signal(SIGXFSZ, SIG_IGN);
  scps_workload *w = NULL;
  if (scps__workload_load(config, &w, &err)) {
    scps__log(SCPS_LOG_ERROR, "%s", err.msg);
    return 1;
  }
  o.tables = w->tables;
  o.n_tables = w->n_tables;
  o.features = w->features;
  o.n_features = w->n_features;
  o.drain_quiet_ms = (int32_t)a.drain_quiet_ms;
  app ap = {0};
  ap.drain_seconds = (double)a.drain_seconds;
  ap.drain_quiet_ms = a.drain_quiet_ms;
  /* The loop and its signal watchers come first: a SIGTERM or SIGINT while
   * the tables are initialized or restored (seconds to minutes) is noted
   * and handled as soon as the loop runs, instead of killing the process. */
  ap.loop = uv_default_loop();
  uv_signal_init(ap.loop, &ap.sigterm);
  uv_signal_init(ap.loop, &ap.sigint);
  uv_timer_init(ap.loop, &ap.drain);
  uv_timer_init(ap.loop, &ap.checkpoint);
  uv_timer_init(ap.loop, &ap.quiet);
  uv_async_init(ap.loop, &ap.stopped, on_stopped_async);
  ap.sigterm.data = ap.sigint.data = ap.drain.data = ap.checkpoint.data = ap.stopped.data = &ap;
  ap.quiet.data = &ap;
  uv_signal_start(&ap.sigterm, on_signal, SIGTERM);
  uv_signal_start(&ap.sigint, on_signal, SIGINT);
  int rc = scps__server_create(&o, &ap.server, &err);
  scps__workload_destroy(w);
  if (rc) {
    scps__log(SCPS_LOG_ERROR, "%s", err.msg);
    return 1;
  }
  int64_t restored_step, restored_bytes;
  double restored_seconds;
  scps_topology written_by;
  const char *restored =
      scps__server_restored(ap.server, &restored_step, &restored_bytes, &restored_seconds, &written_by);
  if (restored) {
    char resharded[128] = "";
    if (written_by.num_processes != o.topology.num_processes || written_by.sc_per_process != o.topology.sc_per_process)
      snprintf(resharded, sizeof resharded, "; written by %d x %d SparseCores, resharded into %d x %d",
               written_by.num_processes, written_by.sc_per_process, o.topology.num_processes,
               o.topology.sc_per_process);
    scps_log_kv kv[] = {SCPS_LOG_INT("step", restored_step), SCPS_LOG_STRING("path", restored)};
    scps__log_kv(SCPS_LOG_INFO, kv, 2, "restored step %lld from %s: %lld bytes in %.3f s (%.2f GB/s)%s",
                 (long long)restored_step, restored, (long long)restored_bytes, restored_seconds,
                 restored_seconds > 0 ? (double)restored_bytes / restored_seconds * 1e-9 : 0.0, resharded);
  }
  else if (o.checkpoint_dir)
    scps__log(SCPS_LOG_INFO, "no complete checkpoint under %s%s; starting from the initializers",
              o.checkpoint_dir,
              access(o.checkpoint_dir, F_OK) ? " (no such directory yet: check the path if you meant to resume; "
                                               "it is created at the first save)"
                                             : "");
  if (a.checkpoint_every) {
    ap.checkpoint_every_ms = (uint64_t)a.checkpoint_every * 1000;
    uv_timer_start(&ap.checkpoint, on_checkpoint_timer, ms_to_next_tick(ap.checkpoint_every_ms), 0);
  }
  int threads = 0;
  bool failed = scps__server_start(ap.server, on_stopped, &ap, &threads, &err) != 0;
  if (failed) scps__log(SCPS_LOG_ERROR, "%s", err.msg);
  scps_metrics *metrics = NULL;
  if (!failed && a.metrics_listen) {
    failed = scps__metrics_start(ap.server, a.metrics_listen, &metrics, &err) != 0;
    if (failed) scps__log(SCPS_LOG_ERROR, "%s", err.msg);
    else scps__log(SCPS_LOG_INFO, "metrics on %s", scps__metrics_url(metrics));
  }
  /* A port nobody can find serves no one. */
  if (!failed && port_file && write_port_file(port_file, scps__server_port(ap.server))) {
    scps__log(SCPS_LOG_ERROR, "cannot write --port-file '%s': %s", port_file, strerror(errno));
    failed = true;
  }
  if (failed) {
    scps__server_shutdown(ap.server);
    scps__server_close_pushes(ap.server);
    /* With no completion-queue thread nothing calls on_stopped: close the
     * loop's handles here. */
    if (!threads) on_stopped_async(&ap.stopped);
    uv_run(ap.loop, UV_RUN_DEFAULT);
    scps__metrics_stop(metrics);
    scps__server_destroy(ap.server);
    return 1;
  }
  char pinned[400] = ""; /* up to 64 CPUs of 5 digits */
  const int *cpus = scps__server_sc_cpus(ap.server);
  for (int k = 0, at = 0; cpus && k < o.topology.sc_per_process && at < (int)sizeof pinned; k++)
    at += snprintf(pinned + at, sizeof pinned - (size_t)at, "%s%d", k ? "," : " on CPUs ", cpus[k]);
  scps_log_kv serving[] = {SCPS_LOG_INT("port", scps__server_port(ap.server)),
                           SCPS_LOG_INT("num_processes", o.topology.num_processes)};
  scps__log_kv(SCPS_LOG_INFO, serving, 2, "process %d of %d serving on port %d (%d SparseCores%s)", o.process_index,
               o.topology.num_processes, scps__server_port(ap.server), o.topology.sc_per_process, pinned);
  log_limits(ap.server, &o);
  uv_run(ap.loop, UV_RUN_DEFAULT);
  int status = ap.shutting_down && o.checkpoint_dir ? save_at_exit(&ap) : 0;
  scps__metrics_stop(metrics);
  scps__server_destroy(ap.server);
  uv_loop_close(ap.loop);
  if (ap.shutting_down)
    scps__log(SCPS_LOG_INFO, "process %d stopped %.3f s after the signal", o.process_index,
              since(ap.signalled_at));
  else
    scps__log(SCPS_LOG_INFO, "process %d stopped", o.process_index);
  return status;
}
