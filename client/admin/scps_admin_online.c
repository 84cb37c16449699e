#include "scps_admin_online.h"

#include <getopt.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "health.pb-c.h"
#include "scps.pb-c.h"
#include "scps_admin_json.h"
#include "scps_client.h"
#include "scps_security_flags.h"
#include "scps_client_rpc.h"
#include "scps_confine.h"
#include "scps_jsonw.h"
#include "scps_method.h"
#include "scps_units.h"

#define MAX_SERVERS 1024

const char scps_admin_health_usage[] =
    "usage: scps-admin health --servers HOST:PORT[,HOST:PORT...] [--grpc] [--deadline-ms N]\n"
    "                         [--json]\n"
    "Asks each server for its Health: SERVING, or DRAINING when it is shutting\n"
    "down, with its process index and uptime. Exit status 0 when every server\n"
    "answers SERVING, 1 otherwise.\n"
    "\n"
    "  --servers LIST     server addresses (any order, any subset of a cluster)\n"
    "  --grpc             ask the standard grpc.health.v1.Health/Check instead\n"
    "                     (service \"\"): SERVING, or NOT_SERVING when draining;\n"
    "                     it needs no token: a container's health probe\n"
    "  --deadline-ms N    how long to wait for each server (default 5000)\n"
    "  --json             print a JSON array instead, one object per server: its\n"
    "                     \"server\" address and the answer's fields under their\n"
    "                     scps.proto names (HealthResponse; with --grpc\n"
    "                     health.proto's HealthCheckResponse), or \"error\" for a\n"
    "                     server that did not answer\n" SCPS_SECURITY_USAGE;

const char scps_admin_stats_usage[] =
    "usage: scps-admin stats --servers HOST:PORT[,HOST:PORT...] [--deadline-ms N] [--json]\n"
    "Prints each server's Stats: the memory of each SparseCore, per stack the\n"
    "ids looked up, rows updated and the largest per-partition id counts seen\n"
    "against the limits in force (FDO's inputs), per RPC method the calls,\n"
    "errors, bytes and mean time, the SparseCore and TensorCore stages, the\n"
    "checkpoints saved, and the memory budget: in use, peak, calls that\n"
    "waited or were refused for memory, transfers timed out. Exit status 1 if\n"
    "a server did not answer.\n"
    "\n"
    "  --servers LIST     server addresses (any order, any subset of a cluster)\n"
    "  --deadline-ms N    how long to wait for each server (default 5000)\n"
    "  --json             print a JSON array instead, one object per server: its\n"
    "                     \"server\" address and the answer's fields under their\n"
    "                     scps.proto names (StatsResponse), or \"error\" for a\n"
    "                     server that did not answer\n" SCPS_SECURITY_USAGE;

const char scps_admin_config_usage[] =
    "usage: scps-admin config --servers HOST:PORT[,HOST:PORT...] [--deadline-ms N] [--json]\n"
    "Prints what each server serves (GetConfig): its place in the cluster, the\n"
    "SparseCores and their memory, the last step it holds and the checkpoint it\n"
    "restored, and per stack its width, rows per SparseCore, tables, features\n"
    "and limits in force. Exit status 1 if a server did not answer.\n"
    "\n"
    "  --servers LIST     server addresses (any order, any subset of a cluster)\n"
    "  --deadline-ms N    how long to wait for each server (default 5000)\n"
    "  --json             print a JSON array instead, one object per server: its\n"
    "                     \"server\" address and the answer's fields under their\n"
    "                     scps.proto names (GetConfigResponse), or \"error\" for a\n"
    "                     server that did not answer\n" SCPS_SECURITY_USAGE;

const char scps_admin_save_usage[] =
    "usage: scps-admin checkpoint save --servers HOST:PORT[,HOST:PORT...] [--step N]\n"
    "                                  [--dir DIR] [--deadline-ms N]\n"
    "Saves a cluster checkpoint through every server (the Checkpoint RPC, as a\n"
    "trainer's scps_client_checkpoint does), with the limits in force that\n"
    "server 0 reports. Run it while no trainer pushes: a server that has\n"
    "already applied a later step than --step refuses. Servers save at most\n"
    "once per --checkpoint-min-interval: sooner, they answer a repeat of the\n"
    "save just made with its result and refuse any other, saying when to\n"
    "retry.\n"
    "\n"
    "  --servers LIST     every server of the cluster, in process-index order\n"
    "  --step N           the step to save (default: the last step the servers\n"
    "                     hold, from GetConfig); not above it: the state saved\n"
    "                     is always the one they hold\n"
    "  --dir DIR          directory relative to each server's --checkpoint-dir\n"
    "                     (default: that directory itself); servers save\n"
    "                     nowhere else\n"
    "  --deadline-ms N    how long to wait for the save (default 600000); the\n"
    "                     servers are waited for up to 10 s first\n" SCPS_SECURITY_USAGE;

typedef struct target {
  char *list; /* owns the strings of addr */
  const char *addr[MAX_SERVERS];
  int n;
  long deadline_ms;
  long step; /* checkpoint save: -1 for the servers' */
  const char *dir;
  bool json;               /* --json: one JSON array on stdout */
  bool grpc;               /* health --grpc: grpc.health.v1 Check */
  scps_security_flags sec; /* TLS and the token */
} target;

static void target_free(target *t) {
  free(t->list);
  scps__security_flags_free(&t->sec);
}

int scps__admin_bad(const char *usage, const char *fmt, const char *arg) {
  fprintf(stderr, "scps-admin: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n%s", usage);
  return 2;
}

/* --servers, --deadline-ms, and for a save --step and --dir, for the
 * others --json and --grpc (which the command checks). */
static int parse_target(int argc, char **argv, const char *usage, bool save, target *t) {
  static const struct option opts[] = {{"servers", required_argument, 0, 's'},
                                       {"deadline-ms", required_argument, 0, 'd'},
                                       {"step", required_argument, 0, 'n'},
                                       {"dir", required_argument, 0, 'D'},
                                       {"json", no_argument, 0, 'j'},
                                       {"grpc", no_argument, 0, 'g'},
                                       SCPS_SECURITY_LONG_OPTIONS,
                                       {0, 0, 0, 0}};
  memset(t, 0, sizeof *t);
  t->deadline_ms = save ? 600000 : 5000;
  t->step = -1;
  const char *servers = NULL;
  scps_error e;
  int ch, rc;
  while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (ch) {
    case 's': servers = optarg; break;
    case 'd':
      if (scps__parse_long("--deadline-ms", optarg, 1, 86400000, &t->deadline_ms, &e))
        return scps__admin_bad(usage, "%s", e.msg);
      break;
    case 'n':
      if (!save) return scps__admin_bad(usage, "%s is for 'checkpoint save' only", "--step");
      if (scps__parse_long("--step", optarg, 0, LONG_MAX, &t->step, &e))
        return scps__admin_bad(usage, "%s", e.msg);
      break;
    case 'j':
      if (save) return scps__admin_bad(usage, "%s is not for 'checkpoint save'", "--json");
      t->json = true;
      break;
    case 'g':
      if (save) return scps__admin_bad(usage, "%s is for 'health' only", "--grpc");
      t->grpc = true;
      break;
    case 'D':
      if (!save) return scps__admin_bad(usage, "%s is for 'checkpoint save' only", "--dir");
      if (scps__confine_check("--dir", optarg, 4000, &e)) return scps__admin_bad(usage, "%s", e.msg);
      t->dir = optarg;
      break;
    default:
      rc = scps__security_flags_parse(&t->sec, "scps-admin", ch, optarg, &e);
      if (rc < 0) return scps__admin_bad(usage, "%s", e.msg);
      if (rc == 0) {
        fputs(usage, stderr);
        return 2;
      }
    }
  }
  if (optind < argc) return scps__admin_bad(usage, "unexpected argument '%s'", argv[optind]);
  if (!servers) return scps__admin_bad(usage, "%s is required", "--servers");
  t->list = strdup(servers);
  if (!t->list) return scps__admin_bad(usage, "%s", "out of memory");
  if (scps_address_list_split(t->list, t->addr, MAX_SERVERS, &t->n, &e))
    return scps__admin_bad(usage, "--servers: %s", e.msg);
  return 0;
}

/* One RPC to server i: its unpacked answer, or NULL and err saying why
 * (beginning with the server's address). */
static ProtobufCMessage *ask(const target *t, int i, const char *method, const ProtobufCMessageDescriptor *answer,
                             scps_error *err) {
  uint8_t *bytes = NULL;
  size_t len = 0;
  if (scps__client_rpc_call(t->addr[i], &t->sec.security, method, NULL, 0, t->deadline_ms, &bytes, &len, err))
    return NULL;
  ProtobufCMessage *m = protobuf_c_message_unpack(answer, NULL, len, bytes);
  free(bytes);
  if (!m)
    scps_error_set(err, SCPS_EIO, "%s: %s: the answer (%zu bytes) is not a valid %s", t->addr[i], method, len,
                   answer->name);
  return m;
}

static double mib(int64_t bytes) { return (double)bytes / (1024.0 * 1024.0); }

/* A question every server is asked: method's answer, unpacked as desc,
 * printed by show (or as JSON with --json); fails (NULL: none) says whether
 * an answer fails the command, e.g. a server not serving. */
typedef void (*show_fn)(const char *addr, const ProtobufCMessage *answer);
typedef int (*fails_fn)(const ProtobufCMessage *answer);

typedef struct question {
  const char *method;
  const ProtobufCMessageDescriptor *desc;
  show_fn show;
  fails_fn fails;
} question;

/* Runs a command that asks every server question q, or with --grpc the
 * question grpc (NULL: the command takes no --grpc). */
static int for_each_server(int argc, char **argv, const char *usage, const question *q, const question *grpc) {
  target t;
  int rc = parse_target(argc, argv, usage, false, &t);
  if (!rc && t.grpc && !grpc) rc = scps__admin_bad(usage, "%s is for 'health' only", "--grpc");
  if (rc) {
    target_free(&t);
    return rc;
  }
  if (t.grpc) q = grpc;
  const char *method = q->method;
  const ProtobufCMessageDescriptor *desc = q->desc;
  show_fn show = q->show;
  fails_fn fails = q->fails;
  int status = 0;
  scps_jsonw w;
  scps__jsonw_init(&w);
  scps__jsonw_printf(&w, "[");
  for (int i = 0; i < t.n; i++) {
    scps_error err;
    ProtobufCMessage *m = ask(&t, i, method, desc, &err);
    if (t.json) {
      scps__jsonw_printf(&w, "%s{\"server\": ", i ? ",\n " : "");
      scps__jsonw_string(&w, t.addr[i]);
      scps__jsonw_printf(&w, ", ");
      if (m) {
        scps__admin_json_fields(&w, m);
      } else {
        scps__jsonw_printf(&w, "\"error\": ");
        scps__jsonw_string(&w, err.msg);
      }
      scps__jsonw_printf(&w, "}");
    }
    if (!m) {
      if (!t.json) printf("server %s\n", err.msg);
      status = 1;
      continue;
    }
    if (!t.json) show(t.addr[i], m);
    if (fails) status |= fails(m);
    protobuf_c_message_free_unpacked(m, NULL);
  }
  scps__jsonw_printf(&w, "]\n");
  scps_error err;
  if (t.json && !scps__jsonw_finish(&w, "the JSON output", &err)) fputs(w.buf, stdout);
  else if (t.json) {
    fprintf(stderr, "scps-admin: %s\n", err.msg);
    status = 1;
  }
  scps__jsonw_free(&w);
  target_free(&t);
  return status;
}

static int health_fails(const ProtobufCMessage *m) {
  return ((const Scps__V1__HealthResponse *)m)->status != SCPS__V1__HEALTH_RESPONSE__STATUS__STATUS_SERVING;
}

static void show_health(const char *addr, const ProtobufCMessage *m) {
  const Scps__V1__HealthResponse *h = (const Scps__V1__HealthResponse *)m;
  const char *s = h->status == SCPS__V1__HEALTH_RESPONSE__STATUS__STATUS_SERVING    ? "SERVING"
                  : h->status == SCPS__V1__HEALTH_RESPONSE__STATUS__STATUS_DRAINING ? "DRAINING"
                                                                                    : "UNKNOWN";
  printf("server %s: %s, process %d, up %.1f s\n", addr, s, h->process_index, h->uptime_seconds);
}

static int grpc_health_fails(const ProtobufCMessage *m) {
  return ((const Grpc__Health__V1__HealthCheckResponse *)m)->status !=
         GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
}

static void show_grpc_health(const char *addr, const ProtobufCMessage *m) {
  const Grpc__Health__V1__HealthCheckResponse *h = (const Grpc__Health__V1__HealthCheckResponse *)m;
  const ProtobufCEnumValue *v =
      protobuf_c_enum_descriptor_get_value(&grpc__health__v1__health_check_response__serving_status__descriptor,
                                           (int)h->status);
  printf("server %s: %s (grpc.health.v1)\n", addr, v ? v->name : "UNKNOWN");
}

int scps__admin_health(int argc, char **argv) {
  static const question health = {"Health", &scps__v1__health_response__descriptor, show_health, health_fails};
  static const question check = {"/" SCPS_METHOD_SERVICE_GRPC_HEALTH "/Check",
                                 &grpc__health__v1__health_check_response__descriptor, show_grpc_health,
                                 grpc_health_fails};
  return for_each_server(argc, argv, scps_admin_health_usage, &health, &check);
}

static int32_t max_of(const int32_t *v, size_t n) {
  int32_t m = 0;
  for (size_t i = 0; i < n; i++)
    if (v[i] > m) m = v[i];
  return m;
}

/* Stats' memory section (absent from servers older than the budget). */
static void show_memory(const Scps__V1__MemoryStats *m) {
  if (!m) return;
  printf("  memory budget: %.1f of %.1f MiB in use (%.1f MiB idle scratch), peak %.1f MiB; calls waited %lld, "
         "refused %lld, waiting %lld; timed out: %lld requests, %lld answers; trims %lld\n",
         mib(m->in_use_bytes), mib(m->budget_bytes), mib(m->scratch_idle_bytes), mib(m->peak_bytes),
         (long long)m->calls_waited, (long long)m->calls_refused, (long long)m->calls_waiting,
         (long long)m->requests_timed_out, (long long)m->answers_timed_out, (long long)m->trims);
}

static void show_stats(const char *addr, const ProtobufCMessage *answer) {
  const Scps__V1__StatsResponse *s = (const Scps__V1__StatsResponse *)answer;
  printf("server %s: process %d, up %.1f s\n", addr, s->process_index, s->uptime_seconds);
  for (size_t k = 0; k < s->n_sparse_cores; k++) {
    const Scps__V1__SparseCoreStats *sc = s->sparse_cores[k];
    printf("  SparseCore %d: %.1f of %.1f MiB used (%.0f%%)\n", sc->sparse_core, mib(sc->memory_used_bytes),
           mib(sc->memory_capacity_bytes),
           sc->memory_capacity_bytes ? 100.0 * (double)sc->memory_used_bytes / (double)sc->memory_capacity_bytes : 0);
  }
  for (size_t k = 0; k < s->n_stacks; k++) {
    const Scps__V1__StackStats *st = s->stacks[k];
    printf("  stack %s: %lld ids looked up, %lld rows updated; most ids in a partition %d (limit %d), most "
           "unique %d (limit %d)\n",
           st->stack, (long long)st->ids_looked_up, (long long)st->rows_updated,
           max_of(st->max_ids_per_partition, st->n_max_ids_per_partition), st->max_ids_limit,
           max_of(st->max_unique_ids_per_partition, st->n_max_unique_ids_per_partition), st->max_unique_ids_limit);
  }
  for (size_t k = 0; k < s->n_methods; k++) {
    const Scps__V1__MethodStats *m = s->methods[k];
    if (!m->calls) continue;
    printf("  %s: %lld calls, %lld errors, %.1f MB in, %.1f MB out, %.3f ms mean\n", m->method, (long long)m->calls,
           (long long)m->errors, (double)m->bytes_received / 1e6, (double)m->bytes_sent / 1e6,
           1e3 * m->seconds / (double)m->calls);
  }
  for (size_t k = 0; k < s->n_stages; k++) {
    const Scps__V1__StageStats *g = s->stages[k];
    printf("  stage %s: %lld tasks, busy %.2f s, %lld waiting\n", g->stage, (long long)g->tasks, g->busy_seconds,
           (long long)g->queue_depth);
  }
  const Scps__V1__CheckpointStats *c = s->checkpoints;
  if (c) {
    printf("  checkpoints: %lld saved, %lld failed%s", (long long)c->saves, (long long)c->failures,
           c->saving ? ", one saving now" : "");
    if (c->last_step >= 0)
      printf("; last step %lld, %.1f MB in %.2f s, %s", (long long)c->last_step, (double)c->last_bytes / 1e6,
             c->last_seconds, c->last_path);
    printf("\n");
  }
  if (s->pushes_sums_checked)
    printf("  pushes whose sums were checked for float32 overflow: %lld\n", (long long)s->pushes_sums_checked);
  show_memory(s->memory);
  if (s->pushes_updates_checked)
    printf("  pushes whose updates were computed first to check them finite: %lld\n",
           (long long)s->pushes_updates_checked);
}

int scps__admin_stats(int argc, char **argv) {
  static const question q = {"Stats", &scps__v1__stats_response__descriptor, show_stats, NULL};
  return for_each_server(argc, argv, scps_admin_stats_usage, &q, NULL);
}

static void print_list(const char *what, char **names, size_t n) {
  printf("%s", what);
  for (size_t i = 0; i < n; i++) printf("%s%s", i ? ", " : " ", names[i]);
}

static void show_config(const char *addr, const ProtobufCMessage *answer) {
  const Scps__V1__GetConfigResponse *g = (const Scps__V1__GetConfigResponse *)answer;
  printf("server %s:\n", addr);
  const Scps__V1__Topology *tp = g->cluster ? g->cluster->topology : NULL;
  if (tp)
    printf("  process %d of %d, %d SparseCores of %.1f MiB each\n", g->process_index, tp->num_processes,
           tp->sc_per_process, mib(tp->sc_memory_bytes));
  printf("  version %s; ", g->version);
  if (g->last_step_present_case == SCPS__V1__GET_CONFIG_RESPONSE__LAST_STEP_PRESENT_LAST_STEP)
    printf("holds step %lld", (long long)g->last_step);
  else
    printf("has applied no step");
  printf("; %s%s; checkpoints %s%s\n", g->restored_from[0] ? "restored " : "started from the initializers",
         g->restored_from, g->checkpoint_dir[0] ? "to " : "only to a directory given (no --checkpoint-dir)",
         g->checkpoint_dir);
  for (size_t k = 0; k < g->n_stacks; k++) {
    const Scps__V1__StackInfo *s = g->stacks[k];
    printf("  stack %s: dim %d, %lld rows per SparseCore, %lld samples, limits %d ids / %d unique per partition;",
           s->name, s->dim, (long long)s->rows_per_sc, (long long)s->total_sample_count, s->max_ids_per_partition,
           s->max_unique_ids_per_partition);
    print_list(" tables", s->tables, s->n_tables);
    print_list("; features", s->features, s->n_features);
    printf("\n");
  }
}

int scps__admin_config(int argc, char **argv) {
  static const question q = {"GetConfig", &scps__v1__get_config_response__descriptor, show_config, NULL};
  return for_each_server(argc, argv, scps_admin_config_usage, &q, NULL);
}

int scps__admin_save(int argc, char **argv) {
  target t;
  int rc = parse_target(argc, argv, scps_admin_save_usage, true, &t);
  if (rc) {
    target_free(&t);
    return rc;
  }
  scps_client_options o;
  scps_client_options_init(&o);
  o.servers = t.addr;
  o.n_servers = t.n;
  o.connect_timeout_ms = 10000;
  o.security = t.sec.security;
  scps_client *c = NULL;
  scps_error err;
  rc = scps_client_create(&o, &c, &err);
  int64_t step = t.step;
  if (!rc) {
    int64_t held = scps_client_step(c);
    if (step < 0) step = held;
    if (held < 0)
      rc = scps_error_set(&err, SCPS_EINVAL, "the servers hold no step yet (nothing applied or restored)");
    else if (step > held)
      rc = scps_error_set(&err, SCPS_EINVAL,
                          "--step %lld: the servers hold step %lld; a checkpoint labelled %lld would hold step "
                          "%lld's state",
                          (long long)step, (long long)held, (long long)step, (long long)held);
  }
  scps_client_checkpoint_result res;
  if (!rc) rc = scps_client_checkpoint(c, step, t.dir, t.deadline_ms, &res, &err);
  scps_client_destroy(c);
  target_free(&t);
  if (rc) {
    fprintf(stderr, "scps-admin: %s\n", err.msg);
    return 1;
  }
  printf("checkpoint of step %lld saved: %lld bytes in %d files, %.2f s, %s\n", (long long)res.step,
         (long long)res.bytes, res.files, res.seconds, res.path);
  return 0;
}
