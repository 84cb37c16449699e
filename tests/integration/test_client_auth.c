/* libscps and the programs against servers that protect their port (TLS,
 * bearer tokens, mutual TLS): an admin token trains and saves, a training
 * token trains but is refused a checkpoint (SCPS_EDENIED), no token or an
 * unknown one is refused at connect (SCPS_EUNAUTH, never retried), TLS
 * settings that cannot work fail naming why, and scps-admin, scps-loadgen
 * and scps-trainer take --tls-ca and --token-file. Certificates are made at
 * run time by tests/make_test_pki.sh. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "scps_client.h"
#include "scps_it.h"
#include "scps_test.h"

#define BATCH 16
#define DIM 8
#define DEADLINE_MS 20000

static const char config_json[] =
    "{\"name\": \"auth\", \"batch_size\": 16, \"ids\": {\"distribution\": \"uniform\", \"seed\": 1},\n"
    " \"tables\": [{\"name\": \"t\", \"vocabulary_size\": 64, \"embedding_dim\": 8, \"combiner\": \"sum\",\n"
    "   \"optimizer\": {\"type\": \"sgd\", \"learning_rate\": 0.1},\n"
    "   \"initializer\": {\"type\": \"uniform\", \"scale\": 0.1}}],\n"
    " \"features\": [{\"name\": \"f\", \"table\": \"t\", \"valency\": 1}]}\n";

static const char admin_token[] = "admin-token-0123456789abcdef";
static const char training_token[] = "training-token-0123456789ab";

typedef struct files {
  char dir[300];
  char ca[340], other_ca[340], server[340], server_key[340], client[340], client_key[340];
  char tokens[340], admin_tok[340], training_tok[340];
} files;

static int write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f || fputs(text, f) < 0 || fclose(f)) return -1;
  return chmod(path, 0600);
}

/* Certificates (tests/make_test_pki.sh) and token files under dir. */
static int make_files(const char *dir, files *f) {
  memset(f, 0, sizeof *f);
  snprintf(f->dir, sizeof f->dir, "%s/pki", dir);
  const char *src = getenv("SCPS_SOURCE_DIR");
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "'%s/tests/make_test_pki.sh' '%s'", src ? src : ".", f->dir);
  if (system(cmd)) {
    fprintf(stderr, "test_client_auth: %s failed\n", cmd);
    return -1;
  }
#define PKI(field, name) snprintf(f->field, sizeof f->field, "%s/%s", f->dir, name)
  PKI(ca, "ca.pem");
  PKI(other_ca, "other-ca.pem");
  PKI(server, "server.pem");
  PKI(server_key, "server.key");
  PKI(client, "client.pem");
  PKI(client_key, "client.key");
  PKI(tokens, "tokens");
  PKI(admin_tok, "admin.tok");
  PKI(training_tok, "training.tok");
#undef PKI
  char text[256];
  snprintf(text, sizeof text, "# scps test tokens\nadmin %s\ntraining %s\n", admin_token, training_token);
  int rc = write_file(f->tokens, text);
  snprintf(text, sizeof text, "%s\n", admin_token);
  rc |= write_file(f->admin_tok, text);
  snprintf(text, sizeof text, "%s\n", training_token);
  rc |= write_file(f->training_tok, text);
  return rc;
}

/* A client of cl with TLS roots ca (NULL: no TLS) and token. */
static int connect_with(const scps_it_cluster *cl, const scps_client_security *sec, int64_t timeout_ms,
                        scps_client **c, scps_error *err) {
  scps_client_options o;
  scps_client_options_init(&o);
  o.servers = cl->addr_list;
  o.n_servers = cl->num_processes;
  o.connect_timeout_ms = timeout_ms;
  o.security = *sec;
  *c = NULL;
  return scps_client_create(&o, c, err);
}

/* One training step (prepare, lookup, push) of step `step`. */
static int train_step(scps_client *c, int64_t step, scps_error *err) {
  int64_t ids[BATCH];
  float acts[BATCH * DIM], grads[BATCH * DIM];
  for (int s = 0; s < BATCH; s++) ids[s] = (s * 5 + step) % 64;
  for (int i = 0; i < BATCH * DIM; i++) grads[i] = 0.01f * (float)(i % 7);
  scps_feature_input in = {.form = SCPS_INPUT_DENSE, .n_ids = BATCH, .ids = ids, .valency = 1};
  float *a[1] = {acts};
  const float *g[1] = {grads};
  scps_batch *b = NULL;
  int rc = scps_batch_create(c, &b, err);
  if (!rc) rc = scps_client_prepare(c, &in, b, err);
  if (!rc) rc = scps_client_lookup(c, b, a, DEADLINE_MS, err);
  if (!rc) rc = scps_client_apply_gradients(c, b, g, step, -1.0, DEADLINE_MS, err);
  scps_batch_destroy(b);
  return rc;
}

/* Runs a shell command line; its exit status and output (stdout and
 * stderr) in out. */
static int run(const char *cmd, char *out, size_t len) {
  char full[2048];
  snprintf(full, sizeof full, "%s 2>&1", cmd);
  out[0] = '\0';
  FILE *p = popen(full, "r");
  if (!p) return -1;
  size_t n = fread(out, 1, len - 1, p);
  out[n] = '\0';
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void libscps_roles(const scps_it_cluster *cl, const files *f) {
  scps_error err;
  scps_client *c;
  scps_client_security admin = {.tls_ca_file = f->ca, .token = admin_token};
  scps_client_security training = {.tls_ca_file = f->ca, .token = training_token};

  CHECK_OK(connect_with(cl, &admin, 10000, &c, &err), &err);
  if (c) {
    CHECK_OK(train_step(c, 0, &err), &err);
    scps_client_checkpoint_result res;
    CHECK_OK(scps_client_checkpoint(c, 0, NULL, DEADLINE_MS, &res, &err), &err);
    scps_client_destroy(c);
  }

  CHECK_OK(connect_with(cl, &training, 10000, &c, &err), &err);
  if (c) {
    CHECK_OK(train_step(c, 1, &err), &err);
    scps_client_checkpoint_result res;
    int rc = scps_client_checkpoint(c, 1, NULL, DEADLINE_MS, &res, &err);
    CHECKF(rc == SCPS_EDENIED && strstr(err.msg, "server 0") && strstr(err.msg, "Checkpoint: PERMISSION_DENIED") &&
               strstr(err.msg, "needs the admin role"),
           "checkpoint with a training token: %d %s", rc, err.msg);
    scps_client_destroy(c);
  }

  /* Refused at connect, and not retried: one attempt. */
  const char *bad_tokens[] = {NULL, "unknown-token-0123456789ab"};
  for (int i = 0; i < 2; i++) {
    scps_client_security s = {.tls_ca_file = f->ca, .token = bad_tokens[i]};
    int rc = connect_with(cl, &s, 10000, &c, &err);
    CHECKF(rc == SCPS_EUNAUTH && strstr(err.msg, "GetConfig: UNAUTHENTICATED") && strstr(err.msg, "1 attempt in"),
           "%s: %d %s", bad_tokens[i] ? "unknown token" : "no token", rc, err.msg);
    CHECK(c == NULL);
  }
}

static void libscps_tls_settings(const scps_it_cluster *cl, const files *f) {
  scps_error err;
  scps_client *c;
  /* Settings that reach the servers but cannot work: the message says TLS. */
  struct {
    scps_client_security s;
    const char *want;
  } fail[] = {
      {{.token = admin_token}, "serves TLS only"},
      {{.tls_ca_file = f->ca, .tls_server_name = "wrong.example", .token = admin_token}, "TLS handshake failed"},
      {{.tls_ca_file = f->other_ca, .token = admin_token}, "TLS handshake failed"},
  };
  for (size_t i = 0; i < sizeof fail / sizeof *fail; i++) {
    int rc = connect_with(cl, &fail[i].s, 1500, &c, &err);
    CHECKF(rc == SCPS_EUNAVAIL && strstr(err.msg, fail[i].want), "TLS case %zu: %d %s", i, rc, err.msg);
  }
  scps_client_security named = {.tls_ca_file = f->ca, .tls_server_name = "localhost", .token = admin_token};
  CHECK_OK(connect_with(cl, &named, 10000, &c, &err), &err);
  scps_client_destroy(c);

  /* Settings refused before any server is asked, naming the field. */
  char missing[400];
  snprintf(missing, sizeof missing, "%s/no-such.pem", f->dir);
  struct {
    scps_client_security s;
    int code;
    const char *want;
  } bad[] = {
      {{.tls_ca_file = missing}, SCPS_EIO, "tls_ca_file '"},
      {{.tls_ca_file = f->server_key}, SCPS_EINVAL, "tls_ca_file '"},
      {{.tls_cert_file = f->client}, SCPS_EINVAL, "go together"},
      {{.tls_cert_file = f->client, .tls_key_file = f->server_key}, SCPS_EINVAL, "is not the private key of"},
      {{.token = "two words"}, SCPS_EINVAL, "token: character 4"},
      {{.token = ""}, SCPS_EINVAL, "token: empty"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    int rc = connect_with(cl, &bad[i].s, 1500, &c, &err);
    CHECKF(rc == bad[i].code && strstr(err.msg, bad[i].want), "settings case %zu: %d %s", i, rc, err.msg);
  }
}

static void programs(const scps_it_cluster *cl, const files *f) {
  const char *admin = getenv("SCPS_ADMIN_BIN"), *loadgen = getenv("SCPS_LOADGEN_BIN"),
             *trainer = getenv("SCPS_TRAINER_BIN");
  if (!admin || !loadgen || !trainer) {
    CHECK(!"SCPS_ADMIN_BIN, SCPS_LOADGEN_BIN and SCPS_TRAINER_BIN must be set (ctest sets them)");
    return;
  }
  char servers[80], cmd[1600], out[8192];
  snprintf(servers, sizeof servers, "%s,%s", cl->addr_list[0], cl->addr_list[1]);
  snprintf(cmd, sizeof cmd, "%s health --servers %s --tls-ca %s --token-file %s", admin, servers, f->ca,
           f->training_tok);
  int rc = run(cmd, out, sizeof out);
  CHECKF(rc == 0 && strstr(out, "SERVING, process 0") && strstr(out, "SERVING, process 1"), "%s: %d %s", cmd, rc,
         out);
  snprintf(cmd, sizeof cmd, "%s health --servers %s --tls-ca %s", admin, servers, f->ca);
  rc = run(cmd, out, sizeof out);
  CHECKF(rc == 1 && strstr(out, "Health: UNAUTHENTICATED"), "%s: %d %s", cmd, rc, out);
  snprintf(cmd, sizeof cmd, "%s checkpoint save --servers %s --tls-ca %s --token-file %s", admin, servers, f->ca,
           f->training_tok);
  rc = run(cmd, out, sizeof out);
  CHECKF(rc == 1 && strstr(out, "Checkpoint: PERMISSION_DENIED"), "%s: %d %s", cmd, rc, out);
  snprintf(cmd, sizeof cmd, "%s checkpoint save --servers %s --tls-ca %s --token-file %s", admin, servers, f->ca,
           f->admin_tok);
  rc = run(cmd, out, sizeof out);
  CHECKF(rc == 0 && strstr(out, "checkpoint of step 1 saved"), "%s: %d %s", cmd, rc, out);
  snprintf(cmd, sizeof cmd, "%s stats --servers %s --tls-ca %s --token-file %s", admin, servers, f->ca, f->admin_tok);
  rc = run(cmd, out, sizeof out);
  CHECKF(rc == 0 && strstr(out, "Checkpoint: ") && strstr(out, "errors"), "%s: %d %s", cmd, rc, out);
  snprintf(cmd, sizeof cmd, "%s health --servers %s --tls-ca %s --token-file %s/no-such-file", admin, servers, f->ca,
           f->dir);
  rc = run(cmd, out, sizeof out);
  CHECKF(rc == 2 && strstr(out, "--token-file '"), "%s: %d %s", cmd, rc, out);

  snprintf(cmd, sizeof cmd,
           "%s --workload %s --servers %s --mode train --requests 4 --warmup 0 --quiet --deadline-ms 60000 --tls-ca %s "
           "--token-file %s",
           loadgen, cl->config, servers, f->ca, f->training_tok);
  rc = run(cmd, out, sizeof out);
  CHECKF(rc == 0 && strstr(out, "(4 ok, 0 errors)"), "%s: %d %s", cmd, rc, out);
  snprintf(cmd, sizeof cmd, "%s --workload %s --servers %s --mode lookup --requests 4 --warmup 0 --quiet --tls-ca %s",
           loadgen, cl->config, servers, f->ca);
  rc = run(cmd, out, sizeof out);
  CHECKF(rc == 1 && strstr(out, "UNAUTHENTICATED"), "%s: %d %s", cmd, rc, out);

  snprintf(cmd, sizeof cmd, "%s --servers %s --workload %s --steps 3 --eval-batches 2 --tls-ca %s --token-file %s",
           trainer, servers, cl->config, f->ca, f->training_tok);
  rc = run(cmd, out, sizeof out);
  CHECKF(rc == 0 && strstr(out, "3 steps in"), "%s: %d %s", cmd, rc, out);
}

/* A server that requires client certificates: libscps presents one. */
static void mutual_tls(const files *f) {
  scps_it_cluster cl;
  const char *extra[] = {"--tls-cert", f->server, "--tls-key", f->server_key, "--tls-client-ca", f->ca, NULL};
  if (scps_it_init(&cl, config_json, 1, 2)) {
    CHECK(!"scratch directory");
    return;
  }
  memcpy(cl.extra, extra, sizeof extra);
  if (scps_it_start(&cl)) {
    CHECK(!"mutual-TLS server did not start");
    scps_it_stop(&cl);
    return;
  }
  scps_error err;
  scps_client *c;
  scps_client_security with = {.tls_ca_file = f->ca, .tls_cert_file = f->client, .tls_key_file = f->client_key};
  CHECK_OK(connect_with(&cl, &with, 10000, &c, &err), &err);
  if (c) {
    CHECK_OK(train_step(c, 0, &err), &err);
    scps_client_destroy(c);
  }
  scps_client_security without = {.tls_ca_file = f->ca};
  int rc = connect_with(&cl, &without, 1500, &c, &err);
  CHECKF(rc == SCPS_EUNAVAIL && strstr(err.msg, "no client certificate where one is required"),
         "no client certificate: %d %s", rc, err.msg);
  scps_it_stop(&cl);
}

int main(void) {
  scps_it_cluster cl;
  files f;
  char ck[320];
  if (scps_it_init(&cl, config_json, 2, 2) || make_files(cl.dir, &f)) {
    CHECK(!"scratch directory or certificates");
    scps_it_stop(&cl);
    return scps_test_finish("test_client_auth");
  }
  snprintf(ck, sizeof ck, "%s/ck", cl.dir);
  const char *extra[] = {"--tls-cert", f.server, "--tls-key", f.server_key, "--token-file", f.tokens,
                         "--checkpoint-dir", ck, "--checkpoint-min-interval", "0"};
  memcpy(cl.extra, extra, sizeof extra);
  if (scps_it_start(&cl)) {
    CHECK(!"cluster did not start");
  } else {
    libscps_roles(&cl, &f);
    libscps_tls_settings(&cl, &f);
    programs(&cl, &f);
    mutual_tls(&f);
  }
  scps_it_stop(&cl);
  return scps_test_finish("test_client_auth");
}
