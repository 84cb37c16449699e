/* scps-server: flags, configuration file, and the libuv loop that owns
 * signals, the drain timer and the checkpoint timer while the server threads
 * serve. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "scps_auth.h"
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
    "  --process-index I      this process's index in [0, P) (default 0)\n"
    "  --num-processes P      processes in the cluster (default 1)\n"
    "  --sc-per-process S     simulated SparseCores in this process (default 2)\n"
    "  --sc-memory BYTES      memory per SparseCore; K, M, G suffixes (default 4G);\n"
    "                         the tables must fit or the server refuses to start\n"
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
    "                         is restored at start; retention deletes only this\n"
    "                         cluster's checkpoints and the files they list\n"
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
    "  --checkpoint-keep K    complete checkpoints kept per root after a save:\n"
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
    "  --help                 this text\n"
    "  --version              print the version and exit\n"
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
    "flags, and for a non-loopback --listen without TLS and tokens or client\n"
    "certificates (or --insecure).\n";

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
    fprintf(stderr, "scps-server: every call finished %.3f s after the signal\n", since(ap->signalled_at));
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
  fprintf(stderr, "scps-server: calls still in flight after %.3f s; cancelling them\n", since(ap->signalled_at));
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
  fprintf(stderr, "scps-server: no ApplyGradients for %lld ms, %.3f s after the signal; taking no more\n",
          (long long)quiet, since(ap->signalled_at));
  scps__server_close_pushes(ap->server);
}

/* The first SIGTERM/SIGINT drains; a second one cancels what is left at
 * once, as the drain timeout would. */
static void on_signal(uv_signal_t *h, int signum) {
  app *ap = h->data;
  if (ap->shutting_down) {
    fprintf(stderr, "scps-server: %s again %.3f s after the first signal; cancelling calls in flight\n",
            signum == SIGTERM ? "SIGTERM" : "SIGINT", since(ap->signalled_at));
    uv_timer_stop(&ap->drain);
    uv_timer_stop(&ap->quiet);
    scps__server_cancel_all(ap->server);
    return;
  }
  ap->shutting_down = 1;
  ap->signalled_at = uv_hrtime();
  fprintf(stderr, "scps-server: %s: finishing calls in flight\n", signum == SIGTERM ? "SIGTERM" : "SIGINT");
  uv_timer_stop(&ap->checkpoint);
  scps__server_shutdown(ap->server);
  if (scps__server_push_quiet_ms(ap->server) >= 0) {
    fprintf(stderr, "scps-server: taking ApplyGradients (no Lookups) until none arrives for %ld ms, so pushes in "
            "flight reach every process; then saving the step held\n", ap->drain_quiet_ms);
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
    fprintf(stderr, "scps-server: the save of the step held before exiting failed: %s\n", err.msg);
    return 1;
  }
  if (rc > 0)
    fprintf(stderr, "scps-server: saved step %lld to %s before exiting, %.3f s after the signal\n", (long long)step,
            path, since(ap->signalled_at));
  else if (step >= 0)
    fprintf(stderr, "scps-server: nothing applied since the last save or restore of step %lld; no save at exit\n",
            (long long)step);
  else
    fprintf(stderr, "scps-server: no step applied or restored; nothing to save at exit\n");
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
    fprintf(stderr, "scps-server: --tls-cert and --tls-key go together (%s given alone)\n",
            o->tls_cert_file ? "--tls-cert" : "--tls-key");
    return -1;
  }
  if (o->tls_client_ca_file && !o->tls_cert_file) {
    fprintf(stderr, "scps-server: --tls-client-ca needs --tls-cert and --tls-key (mutual TLS is TLS)\n");
    return -1;
  }
  bool tls = o->tls_cert_file != NULL, callers_known = o->token_file || o->tls_client_ca_file;
  if ((tls && callers_known) || scps__listen_is_loopback(o->listen)) return 0;
  if (insecure) {
    fprintf(stderr,
            "scps-server: WARNING: --insecure: serving %s %s: anyone who can reach this port can read and "
            "change every table, push gradients and save checkpoints\n",
            o->listen, tls ? "with TLS but without tokens or client certificates"
                           : callers_known ? "with tokens but without TLS (tokens travel in the clear)"
                                           : "without TLS and without tokens");
    return 0;
  }
  fprintf(stderr,
          "scps-server: --listen %s is not a loopback address, and %s: anyone who can reach it could read and "
          "change every table and save checkpoints. Give it --tls-cert and --tls-key with --token-file or "
          "--tls-client-ca (deploy/SECURITY.md), listen on 127.0.0.1, or pass --insecure on a network you "
          "trust\n",
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
  fprintf(stderr,
          "scps-server: memory budget %.1f MiB (%s), gRPC buffers up to %.1f MiB more; %d streams per "
          "connection, idle connections closed after %d s, transfers cancelled after %d s\n",
          budget / (1 << 20), how, (double)quota / (1 << 20), o->max_streams, o->idle_timeout_s,
          o->transfer_timeout_s);
}

static int parse_int(const char *flag, const char *s, long lo, long hi, long *out) {
  scps_error e;
  if (!scps__parse_long(flag, s, lo, hi, out, &e)) return 0;
  fprintf(stderr, "scps-server: %s\n", e.msg);
  return -1;
}

/* --partition-limits IDS,UNIQUE: two limits in [1, 2^31 - 1]. */
static int parse_partition_limits(const char *s, int32_t out[2]) {
  const char *comma = strchr(s, ',');
  char ids[32];
  long v;
  if (!comma || (size_t)(comma - s) >= sizeof ids) {
    fprintf(stderr, "scps-server: --partition-limits '%s': expected IDS,UNIQUE (e.g. 4096,1024)\n", s);
    return -1;
  }
  memcpy(ids, s, (size_t)(comma - s));
  ids[comma - s] = '\0';
  if (parse_int("--partition-limits IDS", ids, 1, INT32_MAX, &v)) return -1;
  out[0] = (int32_t)v;
  if (parse_int("--partition-limits UNIQUE", comma + 1, 1, INT32_MAX, &v)) return -1;
  out[1] = (int32_t)v;
  return 0;
}

int main(int argc, char **argv) {
  const char *config = NULL, *port_file = NULL, *metrics_listen = NULL;
  scps_server_options o = {0};
  o.listen = "127.0.0.1:50051";
  scps_memtune_apply();
  o.topology = (scps_topology){1, 2, (int64_t)4 << 30};
  o.cq_threads = 2;
  o.tc_threads = 1;
  o.max_message_bytes = (int64_t)256 << 20;
  o.checkpoint_keep = 3;
  o.checkpoint_min_interval = 10;
  o.checkpoint_snapshot_max = -1;
  o.inline_lookup_entries = 16384;
  o.pin_sparsecores = true;
  o.memory_wait_ms = 2000;
  o.max_streams = 100;
  o.idle_timeout_s = 300;
  o.transfer_timeout_s = 60;
  double drain = 10;
  long checkpoint_every = 0, drain_quiet_ms = 1000;
  static const struct option opts[] = {
      {"config", required_argument, 0, 'c'},        {"listen", required_argument, 0, 'l'},
      {"process-index", required_argument, 0, 'i'}, {"num-processes", required_argument, 0, 'p'},
      {"sc-per-process", required_argument, 0, 's'}, {"sc-memory", required_argument, 0, 'm'},
      {"cq-threads", required_argument, 0, 'q'},    {"tc-threads", required_argument, 0, 't'},
      {"max-message-mb", required_argument, 0, 'M'}, {"drain-seconds", required_argument, 0, 'd'},
      {"port-file", required_argument, 0, 'f'},     {"checkpoint-dir", required_argument, 0, 'C'},
      {"restore", required_argument, 0, 'R'},       {"checkpoint-every", required_argument, 0, 'E'},
      {"checkpoint-keep", required_argument, 0, 'K'}, {"help", no_argument, 0, 'h'},
      {"version", no_argument, 0, 'V'},
      {"inline-lookup-entries", required_argument, 0, 'I'}, {"pin-sparsecores", required_argument, 0, 'P'},
      {"tls-cert", required_argument, 0, 1001},     {"tls-key", required_argument, 0, 1002},
      {"tls-client-ca", required_argument, 0, 1003}, {"token-file", required_argument, 0, 1004},
      {"insecure", no_argument, 0, 1005},
      {"memory-budget", required_argument, 0, 'B'}, {"memory-wait-ms", required_argument, 0, 'W'},
      {"max-streams", required_argument, 0, 'S'},   {"idle-timeout", required_argument, 0, 'T'},
      {"transfer-timeout", required_argument, 0, 'X'},
      {"checkpoint-min-interval", required_argument, 0, 2001},
      {"checkpoint-snapshot-max", required_argument, 0, 2002},
      {"limit-policy", required_argument, 0, 3001},  {"partition-limits", required_argument, 0, 3002},
      {"max-step-advance", required_argument, 0, 'A'}, {"drain-quiet-ms", required_argument, 0, 'Q'},
      {"checkpoint-grid", required_argument, 0, 'G'},
      {"metrics-listen", required_argument, 0, 4001},
      {0, 0, 0, 0}};
  bool insecure = false;
  int c;
  long v;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 'c': config = optarg; break;
    case 'l':
      if (check_listen(optarg)) {
        fprintf(stderr, "scps-server: --listen '%s': expected HOST:PORT with a port in [0, 65535]\n", optarg);
        return 2;
      }
      o.listen = optarg;
      break;
    case 'i': if (parse_int("--process-index", optarg, 0, 1023, &v)) return 2; o.process_index = (int32_t)v; break;
    case 'p': if (parse_int("--num-processes", optarg, 1, 1024, &v)) return 2; o.topology.num_processes = (int32_t)v; break;
    case 's': if (parse_int("--sc-per-process", optarg, 1, 64, &v)) return 2; o.topology.sc_per_process = (int32_t)v; break;
    case 'q': if (parse_int("--cq-threads", optarg, 1, 64, &v)) return 2; o.cq_threads = (int32_t)v; break;
    case 't': if (parse_int("--tc-threads", optarg, 1, 64, &v)) return 2; o.tc_threads = (int32_t)v; break;
    case 'M': if (parse_int("--max-message-mb", optarg, 1, 2047, &v)) return 2; o.max_message_bytes = (int64_t)v << 20; break;
    case 'd': if (parse_int("--drain-seconds", optarg, 0, 3600, &v)) return 2; drain = (double)v; break;
    case 'm':
      if (scps__parse_bytes(optarg, &o.topology.sc_memory_bytes)) {
        fprintf(stderr, "scps-server: --sc-memory '%s': expected bytes like 512M or 4G\n", optarg);
        return 2;
      }
      break;
    case 'f': port_file = optarg; break;
    case 'C': o.checkpoint_dir = optarg; break;
    case 'R': o.restore_dir = optarg; break;
    case 'E': if (parse_int("--checkpoint-every", optarg, 1, 30L * 86400, &checkpoint_every)) return 2; break;
    case 'K': if (parse_int("--checkpoint-keep", optarg, 1, 1000000, &v)) return 2; o.checkpoint_keep = (int32_t)v; break;
    case 'I': if (parse_int("--inline-lookup-entries", optarg, 0, 1L << 40, &v)) return 2; o.inline_lookup_entries = v; break;
    case 'P':
      if (strcmp(optarg, "on") && strcmp(optarg, "off")) {
        fprintf(stderr, "scps-server: --pin-sparsecores '%s': expected on or off\n", optarg);
        return 2;
      }
      o.pin_sparsecores = !strcmp(optarg, "on");
      break;
    case 1001: o.tls_cert_file = optarg; break;
    case 1002: o.tls_key_file = optarg; break;
    case 1003: o.tls_client_ca_file = optarg; break;
    case 1004: o.token_file = optarg; break;
    case 1005: insecure = true; break;
    case 'B':
      if (scps__parse_bytes(optarg, &o.memory_budget) || o.memory_budget < (1 << 20)) {
        fprintf(stderr, "scps-server: --memory-budget '%s': expected bytes of at least 1M, like 512M or 4G\n", optarg);
        return 2;
      }
      break;
    case 'W': if (parse_int("--memory-wait-ms", optarg, 0, 3600000, &v)) return 2; o.memory_wait_ms = (int32_t)v; break;
    case 'S': if (parse_int("--max-streams", optarg, 1, 1000000, &v)) return 2; o.max_streams = (int32_t)v; break;
    case 'T': if (parse_int("--idle-timeout", optarg, 1, 30L * 86400, &v)) return 2; o.idle_timeout_s = (int32_t)v; break;
    case 'X': if (parse_int("--transfer-timeout", optarg, 1, 86400, &v)) return 2; o.transfer_timeout_s = (int32_t)v; break;
    case 2001: if (parse_int("--checkpoint-min-interval", optarg, 0, 86400, &v)) return 2; o.checkpoint_min_interval = (double)v; break;
    case 2002:
      if (!strcmp(optarg, "auto"))
        o.checkpoint_snapshot_max = -1;
      else if (!strcmp(optarg, "0"))
        o.checkpoint_snapshot_max = 0;
      else if (scps__parse_bytes(optarg, &o.checkpoint_snapshot_max)) {
        fprintf(stderr, "scps-server: --checkpoint-snapshot-max '%s': expected auto, 0 or bytes like 512M or 4G\n",
                optarg);
        return 2;
      }
      break;
    case 3001:
      if (strcmp(optarg, "refuse") && strcmp(optarg, "drop")) {
        fprintf(stderr, "scps-server: --limit-policy '%s': expected refuse or drop\n", optarg);
        return 2;
      }
      o.limit_policy = strcmp(optarg, "drop") ? SCPS_LIMIT_ERROR : SCPS_LIMIT_DROP;
      break;
    case 3002: if (parse_partition_limits(optarg, o.partition_limits)) return 2; break;
    case 'A': if (parse_int("--max-step-advance", optarg, 1, 1L << 53, &v)) return 2; o.max_step_advance = v; break;
    case 'Q': if (parse_int("--drain-quiet-ms", optarg, 0, 3600000, &drain_quiet_ms)) return 2; break;
    case 'G': if (parse_int("--checkpoint-grid", optarg, 1, 1L << 53, &v)) return 2; o.checkpoint_grid = v; break;
    case 4001: {
      scps_error e;
      if (scps__metrics_parse(optarg, NULL, 0, NULL, &e)) {
        fprintf(stderr, "scps-server: %s\n", e.msg);
        return 2;
      }
      metrics_listen = optarg;
      break;
    }
    case 'h': fputs(usage, stdout); return 0;
    case 'V': printf("scps-server %s\n", scps_version()); return 0;
    default: fputs(usage, stderr); return 2;
    }
  }
  if (!config || optind != argc) {
    fprintf(stderr, "scps-server: %s\n%s", config ? "unexpected argument" : "--config is required", usage);
    return 2;
  }
  if (o.process_index >= o.topology.num_processes) {
    fprintf(stderr, "scps-server: --process-index %d must be below --num-processes %d\n", o.process_index,
            o.topology.num_processes);
    return 2;
  }
  if (checkpoint_every && !o.checkpoint_dir) {
    fprintf(stderr, "scps-server: --checkpoint-every needs --checkpoint-dir\n");
    return 2;
  }
  if (check_exposure(&o, insecure)) return 2;
  /* Logs and GetConfig name the checkpoint root as a path that means
   * something away from this process's working directory. */
  static char checkpoint_root[PATH_MAX];
  if (o.checkpoint_dir && o.checkpoint_dir[0] != '/') {
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd) ||
        snprintf(checkpoint_root, sizeof checkpoint_root, "%s/%s", cwd, o.checkpoint_dir) >= (int)sizeof checkpoint_root) {
      fprintf(stderr, "scps-server: --checkpoint-dir '%s': cannot make it an absolute path\n", o.checkpoint_dir);
      return 2;
    }
    o.checkpoint_dir = checkpoint_root;
  }
  /* A file size limit must fail a checkpoint write with EFBIG (reported as
   * RESOURCE_EXHAUSTED), not kill the server. */
  signal(SIGXFSZ, SIG_IGN);
  scps_error err;
  scps_workload *w = NULL;
  if (scps__workload_load(config, &w, &err)) {
    fprintf(stderr, "scps-server: %s\n", err.msg);
    return 1;
  }
  o.tables = w->tables;
  o.n_tables = w->n_tables;
  o.features = w->features;
  o.n_features = w->n_features;
  o.drain_quiet_ms = (int32_t)drain_quiet_ms;
  app ap = {0};
  ap.drain_seconds = drain;
  ap.drain_quiet_ms = drain_quiet_ms;
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
    fprintf(stderr, "scps-server: %s\n", err.msg);
    return 1;
  }
  int64_t restored_step, restored_bytes;
  double restored_seconds;
  scps_topology written_by;
  const char *restored =
      scps__server_restored(ap.server, &restored_step, &restored_bytes, &restored_seconds, &written_by);
  if (restored) {
    fprintf(stderr, "scps-server: restored step %lld from %s: %lld bytes in %.3f s (%.2f GB/s)",
            (long long)restored_step, restored, (long long)restored_bytes, restored_seconds,
            restored_seconds > 0 ? (double)restored_bytes / restored_seconds * 1e-9 : 0.0);
    if (written_by.num_processes != o.topology.num_processes || written_by.sc_per_process != o.topology.sc_per_process)
      fprintf(stderr, "; written by %d x %d SparseCores, resharded into %d x %d", written_by.num_processes,
              written_by.sc_per_process, o.topology.num_processes, o.topology.sc_per_process);
    fputc('\n', stderr);
  }
  else if (o.checkpoint_dir)
    fprintf(stderr, "scps-server: no complete checkpoint under %s%s; starting from the initializers\n",
            o.checkpoint_dir,
            access(o.checkpoint_dir, F_OK) ? " (no such directory yet: check the path if you meant to resume; "
                                             "it is created at the first save)"
                                           : "");
  if (checkpoint_every) {
    ap.checkpoint_every_ms = (uint64_t)checkpoint_every * 1000;
    uv_timer_start(&ap.checkpoint, on_checkpoint_timer, ms_to_next_tick(ap.checkpoint_every_ms), 0);
  }
  int threads = 0;
  bool failed = scps__server_start(ap.server, on_stopped, &ap, &threads, &err) != 0;
  if (failed) fprintf(stderr, "scps-server: %s\n", err.msg);
  scps_metrics *metrics = NULL;
  if (!failed && metrics_listen) {
    failed = scps__metrics_start(ap.server, metrics_listen, &metrics, &err) != 0;
    if (failed) fprintf(stderr, "scps-server: %s\n", err.msg);
    else fprintf(stderr, "scps-server: metrics on %s\n", scps__metrics_url(metrics));
  }
  /* A port nobody can find serves no one. */
  if (!failed && port_file && write_port_file(port_file, scps__server_port(ap.server))) {
    fprintf(stderr, "scps-server: cannot write --port-file '%s': %s\n", port_file, strerror(errno));
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
  fprintf(stderr, "scps-server: process %d of %d serving on port %d (%d SparseCores%s)\n", o.process_index,
          o.topology.num_processes, scps__server_port(ap.server), o.topology.sc_per_process, pinned);
  log_limits(ap.server, &o);
  uv_run(ap.loop, UV_RUN_DEFAULT);
  int status = ap.shutting_down && o.checkpoint_dir ? save_at_exit(&ap) : 0;
  scps__metrics_stop(metrics);
  scps__server_destroy(ap.server);
  uv_loop_close(ap.loop);
  if (ap.shutting_down)
    fprintf(stderr, "scps-server: process %d stopped %.3f s after the signal\n", o.process_index,
            since(ap.signalled_at));
  else
    fprintf(stderr, "scps-server: process %d stopped\n", o.process_index);
  return status;
}
