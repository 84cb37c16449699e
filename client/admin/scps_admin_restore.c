/* scps-admin checkpoint restore: the steps each process holds a checkpoint
 * part of (ListCheckpoints), the newest they all hold verified everywhere
 * first (Restore verify_only), then loaded by every process (Restore). */
#include "scps_admin_restore.h"

#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scps.pb-c.h"
#include "scps_client.h"
#include "scps_security_flags.h"
#include "scps_client_rpc.h"
#include "scps_step.h"
#include "scps_units.h"

#define MAX_SERVERS 1024
#define CONFIG_DEADLINE_MS 10000

const char scps_admin_restore_usage[] =
    "usage: scps-admin checkpoint restore --servers HOST:PORT[,HOST:PORT...] [--step N]\n"
    "                                     [--deadline-ms N]\n"
    "Brings every process of a running cluster to one step: the newest step of\n"
    "which every process holds a checkpoint part under its --checkpoint-dir\n"
    "(ListCheckpoints; a root the processes share or one each), or --step N.\n"
    "Every process first verifies its part (every checksum); a step some part\n"
    "of which fails is passed over for the next older one. Then each process\n"
    "loads its part while it serves (Lookups meanwhile are answered\n"
    "UNAVAILABLE, which libscps retries; pushes are refused) and holds that\n"
    "step. Use it when clients refuse to connect because the\n"
    "processes hold different steps (one restarted from an older checkpoint);\n"
    "stop the trainers first, and restart them after: they resume at the step\n"
    "after the one restored.\n"
    "\n"
    "  --servers LIST     every server of the cluster, in process-index order\n"
    "  --step N           restore this step (every process must hold a part)\n"
    "  --deadline-ms N    how long each verify and load may take (default\n"
    "                     600000); the servers are waited for up to 10 s first\n"
    "\n"
    "Exit status: 0 when every process holds the step; 1 when none could be\n"
    "restored (nothing changed) or a load failed (the output says which\n"
    "processes hold which step); 2 for bad arguments.\n" SCPS_SECURITY_USAGE;

/* What the command knows of one process. */
typedef struct proc {
  const char *addr;
  const scps_client_security *security; /* TLS and the token, the same for every process */
  Scps__V1__GetConfigResponse *config;
  Scps__V1__ListCheckpointsResponse *list;
  /* One call's outcome (filled by the call's thread). */
  const char *method;
  uint8_t *request;
  size_t request_len;
  int rc;
  scps_error err;
  uint8_t *answer;
  size_t answer_len;
  int64_t deadline_ms;
} proc;

static void *call_main(void *arg) {
  proc *p = arg;
  p->rc = scps__client_rpc_call(p->addr, p->security, p->method, p->request, p->request_len, p->deadline_ms, &p->answer,
                        &p->answer_len, &p->err);
  return NULL;
}

/* Calls method on every process at once, with each one's request (set
 * beforehand); returns how many failed. */
static int call_all(proc *ps, int n, const char *method, int64_t deadline_ms) {
  pthread_t *th = calloc((size_t)n, sizeof *th);
  bool *started = calloc((size_t)n, sizeof *started);
  int failed = 0;
  for (int i = 0; i < n; i++) {
    ps[i].method = method;
    ps[i].deadline_ms = deadline_ms;
    free(ps[i].answer);
    ps[i].answer = NULL;
    ps[i].answer_len = 0;
    started[i] = th && started && pthread_create(&th[i], NULL, call_main, &ps[i]) == 0;
    if (!started[i]) call_main(&ps[i]);
  }
  for (int i = 0; i < n; i++) {
    if (started[i]) pthread_join(th[i], NULL);
    failed += ps[i].rc != 0;
  }
  free(th);
  free(started);
  return failed;
}

static void set_request(proc *p, const ProtobufCMessage *m) {
  free(p->request);
  p->request_len = protobuf_c_message_get_packed_size(m);
  p->request = malloc(p->request_len ? p->request_len : 1);
  if (p->request) protobuf_c_message_pack(m, p->request);
  else p->request_len = 0;
}

static void restore_request(proc *p, int i, int64_t step, bool verify_only) {
  Scps__V1__RestoreRequest r = SCPS__V1__RESTORE_REQUEST__INIT;
  r.config_fingerprint = p->config->config_fingerprint;
  r.process_index = i;
  r.step = step;
  r.verify_only = verify_only;
  set_request(p, &r.base);
}

/* The configurations: one cluster, listed in process-index order. */
static int read_configs(proc *ps, int n) {
  if (call_all(ps, n, "GetConfig", CONFIG_DEADLINE_MS)) {
    for (int i = 0; i < n; i++)
      if (ps[i].rc) fprintf(stderr, "scps-admin: server %s\n", ps[i].err.msg);
    return 1;
  }
  for (int i = 0; i < n; i++) {
    ps[i].config = scps__v1__get_config_response__unpack(NULL, ps[i].answer_len, ps[i].answer);
    const Scps__V1__GetConfigResponse *g = ps[i].config, *g0 = ps[0].config;
    const char *why = NULL;
    if (!g || !g->cluster || !g->cluster->topology) why = "its GetConfig answer is not a valid GetConfigResponse";
    else if (g->cluster->topology->num_processes != n) why = "its cluster has another number of processes than --servers lists";
    else if (g->process_index != i) why = "it is not the process at this position of --servers (list them in process-index order)";
    else if (g0 && (g->config_fingerprint.len != g0->config_fingerprint.len ||
                    memcmp(g->config_fingerprint.data, g0->config_fingerprint.data, g->config_fingerprint.len)))
      why = "its config_fingerprint differs from the first server's: not one cluster";
    else if (!g->checkpoint_dir[0]) why = "it has no --checkpoint-dir, so no checkpoints to restore";
    if (why) {
      fprintf(stderr, "scps-admin: server %d (%s): %s\n", i, ps[i].addr, why);
      return 1;
    }
  }
  return 0;
}

static void print_step(const Scps__V1__GetConfigResponse *g) {
  if (g->last_step_present_case == SCPS__V1__GET_CONFIG_RESPONSE__LAST_STEP_PRESENT_LAST_STEP)
    printf("holds step %lld", (long long)g->last_step);
  else
    printf("holds no step");
}

static bool holds_part(const proc *p, int64_t step) {
  for (size_t k = 0; k < p->list->n_parts; k++)
    if (p->list->parts[k]->step == step) return true;
  return false;
}

/* Every process's parts, printed; 1 after printing why when one failed. */
static int read_lists(proc *ps, int n) {
  for (int i = 0; i < n; i++) {
    Scps__V1__ListCheckpointsRequest r = SCPS__V1__LIST_CHECKPOINTS_REQUEST__INIT;
    r.config_fingerprint = ps[i].config->config_fingerprint;
    r.process_index = i;
    set_request(&ps[i], &r.base);
  }
  int failed = call_all(ps, n, "ListCheckpoints", CONFIG_DEADLINE_MS);
  for (int i = 0; i < n; i++) {
    if (ps[i].rc) {
      fprintf(stderr, "scps-admin: server %s\n", ps[i].err.msg);
      continue;
    }
    ps[i].list = scps__v1__list_checkpoints_response__unpack(NULL, ps[i].answer_len, ps[i].answer);
    if (!ps[i].list) {
      fprintf(stderr, "scps-admin: server %d (%s): its ListCheckpoints answer is not valid\n", i, ps[i].addr);
      failed++;
      continue;
    }
    printf("process %d (%s): ", i, ps[i].addr);
    print_step(ps[i].config);
    printf("; checkpoint parts of %s", ps[i].list->n_parts ? "steps" : "no step");
    for (size_t k = 0; k < ps[i].list->n_parts; k++)
      printf("%s %lld", k ? "," : "", (long long)ps[i].list->parts[k]->step);
    printf(" under %s\n", ps[i].config->checkpoint_dir);
    for (size_t k = 0; k < ps[i].list->n_skipped; k++) printf("    passed over: %s\n", ps[i].list->skipped[k]);
  }
  return failed ? 1 : 0;
}

/* Every process verifies its part of step: true when all did. */
static bool verify_everywhere(proc *ps, int n, int64_t step, int64_t deadline_ms) {
  for (int i = 0; i < n; i++) restore_request(&ps[i], i, step, true);
  if (!call_all(ps, n, "Restore", deadline_ms)) return true;
  for (int i = 0; i < n; i++)
    if (ps[i].rc) printf("step %lld does not verify on process %d: %s\n", (long long)step, i, ps[i].err.msg);
  return false;
}

/* The step to restore: --step (every process must hold it), or the newest
 * every process holds that verifies everywhere; -1 after saying why not. */
static int64_t choose(proc *ps, int n, int64_t want, int64_t deadline_ms) {
  if (want >= 0) {
    bool all = true;
    for (int i = 0; i < n; i++)
      if (!holds_part(&ps[i], want)) {
        fprintf(stderr, "scps-admin: --step %lld: process %d (%s) holds no checkpoint part of it\n", (long long)want,
                i, ps[i].addr);
        all = false;
      }
    return all && verify_everywhere(ps, n, want, deadline_ms) ? want : -1;
  }
  /* Process 0's steps come newest first; a step is a candidate when every
   * other process holds it too. */
  for (size_t k = 0; k < ps[0].list->n_parts; k++) {
    int64_t step = ps[0].list->parts[k]->step;
    bool all = true;
    for (int i = 1; i < n && all; i++) all = holds_part(&ps[i], step);
    if (all && verify_everywhere(ps, n, step, deadline_ms)) return step;
  }
  fprintf(stderr, "scps-admin: no step of which every process holds a checkpoint part that verifies: nothing "
                  "restored\n");
  return -1;
}

static int parse(int argc, char **argv, char **list, const char **addr, int *n, long *step, long *deadline_ms,
                 scps_security_flags *sec) {
  static const struct option opts[] = {{"servers", required_argument, 0, 's'},
                                       {"step", required_argument, 0, 'n'},
                                       {"deadline-ms", required_argument, 0, 'd'},
                                       SCPS_SECURITY_LONG_OPTIONS,
                                       {0, 0, 0, 0}};
  const char *servers = NULL;
  scps_error e;
  int ch;
  while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (ch) {
    case 's': servers = optarg; break;
    case 'n':
      if (scps__parse_long("--step", optarg, 0, SCPS_STEP_LIMIT - 1, step, &e)) goto bad;
      break;
    case 'd':
      if (scps__parse_long("--deadline-ms", optarg, 1, 86400000, deadline_ms, &e)) goto bad;
      break;
    default: {
      int rc = scps__security_flags_parse(sec, "scps-admin", ch, optarg, &e);
      if (rc < 0) goto bad;
      if (rc == 0) {
        fputs(scps_admin_restore_usage, stderr);
        return 2;
      }
    }
    }
  }
  if (optind < argc) {
    snprintf(e.msg, sizeof e.msg, "unexpected argument '%s'", argv[optind]);
    goto bad;
  }
  if (!servers) {
    snprintf(e.msg, sizeof e.msg, "--servers is required");
    goto bad;
  }
  *list = strdup(servers);
  if (!*list) {
    snprintf(e.msg, sizeof e.msg, "out of memory");
    goto bad;
  }
  if (scps_address_list_split(*list, addr, MAX_SERVERS, n, &e)) goto bad;
  return 0;
bad:
  fprintf(stderr, "scps-admin: %s\n%s", e.msg, scps_admin_restore_usage);
  return 2;
}

/* Every process loads its part; prints each outcome. */
static int load_everywhere(proc *ps, int n, int64_t step, int64_t deadline_ms) {
  for (int i = 0; i < n; i++) restore_request(&ps[i], i, step, false);
  int failed = call_all(ps, n, "Restore", deadline_ms);
  for (int i = 0; i < n; i++) {
    if (ps[i].rc) {
      printf("process %d (%s): FAILED: %s\n", i, ps[i].addr, ps[i].err.msg);
      continue;
    }
    Scps__V1__RestoreResponse *r = scps__v1__restore_response__unpack(NULL, ps[i].answer_len, ps[i].answer);
    printf("process %d (%s): holds step %lld", i, ps[i].addr, (long long)step);
    if (r && r->previous_step_present_case == SCPS__V1__RESTORE_RESPONSE__PREVIOUS_STEP_PRESENT_PREVIOUS_STEP)
      printf(" (held %lld)", (long long)r->previous_step);
    if (r) printf(": %.1f MB verified and loaded in %.3f s from %s", (double)r->bytes / 1e6, r->seconds, r->path);
    printf("\n");
    if (r) scps__v1__restore_response__free_unpacked(r, NULL);
  }
  if (failed) {
    fprintf(stderr, "scps-admin: %d of %d processes did not restore step %lld: the cluster's steps may differ; "
                    "fix what the messages name and run the command again\n",
            failed, n, (long long)step);
    return 1;
  }
  printf("every process holds step %lld: trainers resume at step %lld\n", (long long)step, (long long)step + 1);
  return 0;
}

int scps__admin_restore(int argc, char **argv) {
  char *list = NULL;
  const char *addr[MAX_SERVERS];
  int n = 0;
  long step = -1, deadline_ms = 600000;
  scps_security_flags sec = {0};
  int status = parse(argc, argv, &list, addr, &n, &step, &deadline_ms, &sec);
  if (status) {
    scps__security_flags_free(&sec);
    free(list);
    return status;
  }
  proc *ps = calloc((size_t)n, sizeof *ps);
  if (!ps) {
    scps__security_flags_free(&sec);
    free(list);
    fprintf(stderr, "scps-admin: out of memory\n");
    return 1;
  }
  for (int i = 0; i < n; i++) {
    ps[i].addr = addr[i];
    ps[i].security = &sec.security;
  }
  status = read_configs(ps, n);
  if (!status) status = read_lists(ps, n);
  int64_t chosen = -1;
  if (!status) {
    chosen = choose(ps, n, step, deadline_ms);
    status = chosen < 0;
  }
  if (!status) {
    printf("restoring step %lld%s\n", (long long)chosen,
           step >= 0 ? "" : ": the newest step every process holds a verified checkpoint part of");
    status = load_everywhere(ps, n, chosen, deadline_ms);
  }
  for (int i = 0; i < n; i++) {
    if (ps[i].config) scps__v1__get_config_response__free_unpacked(ps[i].config, NULL);
    if (ps[i].list) scps__v1__list_checkpoints_response__free_unpacked(ps[i].list, NULL);
    free(ps[i].request);
    free(ps[i].answer);
  }
  free(ps);
  scps__security_flags_free(&sec);
  free(list);
  return status;
}
