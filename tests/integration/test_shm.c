/* Shared memory against real servers: answers the same bit for bit as
 * over the connection (both wire formats, pooled and distinct rows, two
 * processes), pushes that leave the same tables, the side channel's checks
 * of what a client attaches (descriptor, size, seals, token, limits), a
 * restarted server, which knows no segment and answers over the connection
 * again, and a trainer that pauses past the idle timeout. */
#define _GNU_SOURCE /* memfd_create, F_ADD_SEALS */
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "scps.pb-c.h"
#include "scps_client_engine.h"
#include "scps_client_int.h"
#include "scps_it.h"
#include "scps_shm_msg.h"
#include "scps_test.h"
#include "scps_workload.h"

/* Answer bytes that came through shared memory (scps_client_shared_traffic). */
static uint64_t placed_rx(const scps_client *c) {
  uint64_t sent, received;
  scps_client_shared_traffic(c, &sent, &received);
  return received;
}

static const char config_json[] =
    "{\"name\": \"shm\", \"batch_size\": 64,\n"
    " \"ids\": {\"distribution\": \"zipf\", \"exponent\": 1.1, \"seed\": 7},\n"
    " \"tables\": [\n"
    "  {\"name\": \"items\", \"vocabulary_size\": 900, \"embedding_dim\": 16, \"combiner\": \"mean\",\n"
    "   \"optimizer\": {\"type\": \"adagrad\", \"learning_rate\": 0.1}, \"initializer\": {\"type\": \"normal\", \"stddev\": 0.1}},\n"
    "  {\"name\": \"users\", \"vocabulary_size\": 300, \"embedding_dim\": 8, \"combiner\": \"sum\",\n"
    "   \"optimizer\": {\"type\": \"sgd\", \"learning_rate\": 0.1}, \"initializer\": {\"type\": \"uniform\", \"scale\": 0.1}}\n"
    " ],\n"
    " \"features\": [\n"
    "  {\"name\": \"clicked\", \"table\": \"items\", \"valency\": [0, 5], \"weighted\": true},\n"
    "  {\"name\": \"candidate\", \"table\": \"items\", \"valency\": 1},\n"
    "  {\"name\": \"user\", \"table\": \"users\", \"valency\": 1}\n"
    " ]}\n";

#define TOKEN "training-token-0123456789"

static scps_workload *w;

static bool contains(const char *s, const char *sub) { return strstr(s, sub) != NULL; }

/* Request and gradient bytes sent through shared memory. */
static uint64_t placed_tx(const scps_client *c) {
  uint64_t sent, received;
  scps_client_shared_traffic(c, &sent, &received);
  return sent;
}

static scps_client *connect_to(scps_it_cluster *cl, int n, scps_shm_mode shm, scps_float_format wire,
                               scps_answer_mode answer, const char *token) {
  scps_client_options o;
  scps_client_options_init(&o);
  o.servers = cl->addr_list;
  o.n_servers = n;
  o.shared_memory = shm;
  o.wire_format = wire;
  o.answer = answer;
  o.security.token = token;
  scps_client *c = NULL;
  scps_error err;
  CHECK_OK(scps_client_create(&o, &c, &err), &err);
  return c;
}

/* scps_client_lookup_view's activations equal acts (a lookup's of the same
 * batch), and stay so until the batch's next use. */
static void check_view(scps_client *c, scps_batch *b, float *const *acts, const char *what) {
  int nf = scps_client_n_features(c);
  const float **view = calloc((size_t)nf, sizeof *view);
  scps_error err;
  CHECK_OK(scps_client_lookup_view(c, b, view, 10000, &err), &err);
  for (int f = 0; f < nf && view[0]; f++) {
    size_t len = (size_t)scps_client_feature_batch_size(c, f) * (size_t)scps_client_feature_width(c, f);
    CHECKF(view[f] && !memcmp(view[f], acts[f], len * sizeof(float)), "%s: view of feature %d differs", what, f);
  }
  free(view);
}

static float **acts_alloc(const scps_client *c) {
  int nf = scps_client_n_features(c);
  float **a = calloc((size_t)nf, sizeof *a);
  for (int f = 0; f < nf; f++)
    a[f] = calloc((size_t)scps_client_feature_batch_size(c, f) * (size_t)scps_client_feature_width(c, f),
                  sizeof(float));
  return a;
}

static void acts_free(const scps_client *c, float **a) {
  for (int f = 0; f < scps_client_n_features(c); f++) free(a[f]);
  free(a);
}

/* The first feature whose activations differ between x and y (client c's
 * layout), or -1 when all are equal bit for bit. */
static int acts_differ(const scps_client *c, float *const *x, float *const *y) {
  for (int f = 0; f < scps_client_n_features(c); f++) {
    size_t len = (size_t)scps_client_feature_batch_size(c, f) * (size_t)scps_client_feature_width(c, f);
    if (memcmp(x[f], y[f], len * sizeof(float))) return f;
  }
  return -1;
}

/* Prepares the same inputs in batch ba of client a and bb of client b and
 * looks both up, into xa and xb. */
static void lookup_both(scps_client *a, scps_batch *ba, float **xa, scps_client *b, scps_batch *bb, float **xb,
                        const scps_feature_input *in) {
  scps_error err;
  CHECK_OK(scps_client_prepare(a, in, ba, &err), &err);
  CHECK_OK(scps_client_prepare(b, in, bb, &err), &err);
  CHECK_OK(scps_client_lookup(a, ba, xa, 10000, &err), &err);
  CHECK_OK(scps_client_lookup(b, bb, xb, 10000, &err), &err);
}

/* Lookups of the same batches through clients with and without shared
 * memory: equal bit for bit; the first had its answers placed. */
static void compare(scps_it_cluster *cl, int n, scps_float_format wire, scps_answer_mode answer) {
  scps_client *a = connect_to(cl, n, SCPS_SHM_AUTO, wire, answer, NULL);
  scps_client *b = connect_to(cl, n, SCPS_SHM_OFF, wire, answer, NULL);
  if (!a || !b) {
    scps_client_destroy(a);
    scps_client_destroy(b);
    return;
  }
  scps_error err;
  scps_batch *ba = NULL, *bb = NULL;
  scps_workload_gen *gen = NULL;
  CHECK_OK(scps_batch_create(a, &ba, &err), &err);
  CHECK_OK(scps_batch_create(b, &bb, &err), &err);
  CHECK_OK(scps__workload_gen_create(w, 11, &gen, &err), &err);
  float **xa = acts_alloc(a), **xb = acts_alloc(b);
  for (int i = 0; i < 4 && ba && bb && gen; i++) {
    scps__workload_gen_next(gen);
    lookup_both(a, ba, xa, b, bb, xb, scps__workload_gen_inputs(gen));
    int f = acts_differ(a, xa, xb);
    CHECKF(f < 0, "batch %d feature %d differs (%s, answer %d)", i, f,
           wire == SCPS_WIRE_BFLOAT16 ? "bfloat16" : "float32", (int)answer);
    check_view(a, ba, xb, "2 processes, shared memory");
    check_view(b, bb, xb, "2 processes, over the connection");
  }
  uint64_t sa, ra, sb, rb;
  scps_client_traffic(a, &sa, &ra);
  scps_client_traffic(b, &sb, &rb);
  CHECKF(placed_rx(a) > 0 && placed_rx(b) == 0, "placed %llu and %llu bytes",
         (unsigned long long)placed_rx(a), (unsigned long long)placed_rx(b));
  CHECKF(ra + placed_rx(a) + 256 >= rb && ra < rb / 2, "received %llu + placed %llu, over the wire %llu",
         (unsigned long long)ra, (unsigned long long)placed_rx(a), (unsigned long long)rb);
  /* The requests lay in the segments too (request_placement): over the
   * connection went only where. */
  CHECKF(placed_tx(a) + 256 >= sb && sa < sb / 4 && placed_tx(b) == 0, "sent %llu + placed %llu, over the wire %llu",
         (unsigned long long)sa, (unsigned long long)placed_tx(a), (unsigned long long)sb);
  printf("%s answer %d: placed %llu bytes, %llu received; without: %llu received\n",
         wire == SCPS_WIRE_BFLOAT16 ? "bfloat16" : "float32", (int)answer,
         (unsigned long long)placed_rx(a), (unsigned long long)ra, (unsigned long long)rb);
  acts_free(a, xa);
  acts_free(b, xb);
  scps__workload_gen_destroy(gen);
  scps_batch_destroy(ba);
  scps_batch_destroy(bb);
  scps_client_destroy(a);
  scps_client_destroy(b);
}

/* The socket server 0 names in GetConfig (GetConfigResponse.shm_socket),
 * as libscps read it at connect. */
static bool socket_path(scps_it_cluster *cl, const char *token, char *out, size_t len) {
  out[0] = '\0';
  scps_client *c = connect_to(cl, cl->num_processes, SCPS_SHM_AUTO, SCPS_WIRE_FLOAT32, SCPS_ANSWER_AUTO, token);
  bool ok = c && c->servers[0].shm.path && strlen(c->servers[0].shm.path) < len;
  if (ok) memcpy(out, c->servers[0].shm.path, strlen(c->servers[0].shm.path) + 1);
  scps_client_destroy(c);
  return ok;
}

static int side_connect(const char *path) {
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa)) {
    close(fd);
    fd = -1;
  }
  return fd;
}

/* One ShmRequest and its answer: the code, the message in msg, the handle
 * in seg (when given). */
static int side_ask(int fd, const char *token, uint64_t attach, const uint8_t *detach, int pass, char *msg,
                    size_t len, uint8_t *seg) {
  Scps__V1__ShmRequest req = SCPS__V1__SHM_REQUEST__INIT;
  req.token = (char *)token;
  req.attach_bytes = attach;
  if (detach) {
    req.detach.data = (uint8_t *)detach;
    req.detach.len = 16;
  }
  scps_error err;
  if (scps__shm_msg_send(fd, &req.base, pass, &err)) return -100;
  ProtobufCMessage *got;
  int fd_got;
  if (scps__shm_msg_recv(fd, &scps__v1__shm_response__descriptor, &got, &fd_got, &err)) return -101;
  const Scps__V1__ShmResponse *r = (const Scps__V1__ShmResponse *)got;
  int code = r->code;
  snprintf(msg, len, "%s", r->message);
  if (seg && r->segment.len == 16) memcpy(seg, r->segment.data, 16);
  if (r->instance_id.len != 16) code = -102;
  protobuf_c_message_free_unpacked(got, NULL);
  return code;
}

/* A memfd of size bytes with the given seals (0: none). */
static int memfd(size_t size, int seals) {
  int fd = memfd_create("test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0 || ftruncate(fd, (off_t)size) || (seals && fcntl(fd, F_ADD_SEALS, seals))) {
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}

#define GOOD_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

static void test_side_channel(scps_it_cluster *cl, const char *token) {
  char path[256], msg[600];
  CHECK(socket_path(cl, token, path, sizeof path));
  int fd = side_connect(path);
  CHECKF(fd >= 0, "cannot connect to %s", path);
  if (fd < 0) return;
  uint8_t seg[16] = {0}, other[16] = {0};
  int rc = side_ask(fd, token, 4096, NULL, -1, msg, sizeof msg, NULL);
  CHECKF(rc == 3 && contains(msg, "no descriptor"), "no fd: %d %s", rc, msg);
  int m = memfd(4096, 0);
  rc = side_ask(fd, token, 4096, NULL, m, msg, sizeof msg, NULL);
  CHECKF(rc == 3 && contains(msg, "F_SEAL_SHRINK"), "unsealed: %d %s", rc, msg);
  close(m);
  m = memfd(4096, GOOD_SEALS);
  rc = side_ask(fd, token, 8192, NULL, m, msg, sizeof msg, NULL);
  CHECKF(rc == 3 && contains(msg, "not a file of that size"), "size: %d %s", rc, msg);
  close(m);
  m = memfd(4096, GOOD_SEALS | F_SEAL_WRITE);
  rc = side_ask(fd, token, 4096, NULL, m, msg, sizeof msg, NULL);
  CHECKF(rc == 3 && contains(msg, "seals"), "write-sealed: %d %s", rc, msg);
  close(m);
  char file[300];
  snprintf(file, sizeof file, "%s/plain", cl->dir);
  m = open(file, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  CHECK(m >= 0 && ftruncate(m, 4096) == 0);
  rc = side_ask(fd, token, 4096, NULL, m, msg, sizeof msg, NULL);
  CHECKF(rc == 3 && contains(msg, "seals"), "plain file: %d %s", rc, msg);
  close(m);
  m = memfd((size_t)2 << 30, GOOD_SEALS);
  rc = side_ask(fd, token, (uint64_t)2 << 30, NULL, m, msg, sizeof msg, NULL);
  CHECKF(rc == 3 && contains(msg, "1 to 1073741824 bytes"), "too large: %d %s", rc, msg);
  close(m);
  if (token) {
    m = memfd(4096, GOOD_SEALS);
    rc = side_ask(fd, "", 4096, NULL, m, msg, sizeof msg, NULL);
    CHECKF(rc == 16 && contains(msg, "none given"), "no token: %d %s", rc, msg);
    rc = side_ask(fd, "not-a-token-of-the-server", 4096, NULL, m, msg, sizeof msg, NULL);
    CHECKF(rc == 7 && contains(msg, "not one of the server's tokens"), "bad token: %d %s", rc, msg);
    close(m);
  }
  /* Garbage is answered, and the connection still serves. */
  ssize_t wr = send(fd, "\xff\xff\xff", 3, 0);
  CHECK(wr == 3);
  ProtobufCMessage *got = NULL;
  int fd_got = -1;
  scps_error err;
  CHECK(scps__shm_msg_recv(fd, &scps__v1__shm_response__descriptor, &got, &fd_got, &err) == 0 && got &&
        ((Scps__V1__ShmResponse *)got)->code == 3);
  if (got) protobuf_c_message_free_unpacked(got, NULL);
  /* A good attach, detaches of unknown and known handles. */
  m = memfd(4096, GOOD_SEALS);
  rc = side_ask(fd, token, 4096, NULL, m, msg, sizeof msg, seg);
  CHECKF(rc == 0, "attach: %d %s", rc, msg);
  close(m);
  rc = side_ask(fd, token, 0, other, -1, msg, sizeof msg, NULL);
  CHECKF(rc == 5, "unknown detach: %d %s", rc, msg);
  rc = side_ask(fd, token, 0, seg, -1, msg, sizeof msg, NULL);
  CHECKF(rc == 0, "detach: %d %s", rc, msg);
  rc = side_ask(fd, token, 0, seg, -1, msg, sizeof msg, NULL);
  CHECKF(rc == 5, "second detach: %d %s", rc, msg);
  /* Another connection cannot detach this one's segment. */
  m = memfd(4096, GOOD_SEALS);
  CHECK(side_ask(fd, token, 4096, NULL, m, msg, sizeof msg, seg) == 0);
  close(m);
  int fd2 = side_connect(path);
  rc = side_ask(fd2, token, 0, seg, -1, msg, sizeof msg, NULL);
  CHECKF(rc == 5, "detach from another connection: %d %s", rc, msg);
  /* At most 64 segments per connection. */
  int ok = 0;
  for (int i = 0; i < 64; i++) {
    m = memfd(4096, GOOD_SEALS);
    rc = side_ask(fd2, token, 4096, NULL, m, msg, sizeof msg, NULL);
    ok += rc == 0;
    close(m);
  }
  CHECKF(ok == 64, "%d of 64 attaches", ok);
  m = memfd(4096, GOOD_SEALS);
  rc = side_ask(fd2, token, 4096, NULL, m, msg, sizeof msg, NULL);
  CHECKF(rc == 8 && contains(msg, "64 segments"), "65th: %d %s", rc, msg);
  close(m);
  close(fd2);
  close(fd);
}

/* A client of both processes with shared memory, its batch *b holding the
 * first batch of the generator of that seed (*gen), looked up into *x. */
static scps_client *first_lookup(scps_it_cluster *cl, uint64_t seed, scps_batch **b, scps_workload_gen **gen,
                                 float ***x) {
  scps_client *a = connect_to(cl, 2, SCPS_SHM_AUTO, SCPS_WIRE_FLOAT32, SCPS_ANSWER_AUTO, NULL);
  if (!a) return NULL;
  scps_error err;
  *x = acts_alloc(a);
  CHECK_OK(scps_batch_create(a, b, &err), &err);
  CHECK_OK(scps__workload_gen_create(w, seed, gen, &err), &err);
  if (!*b || !*gen) return a;
  scps__workload_gen_next(*gen);
  CHECK_OK(scps_client_prepare(a, scps__workload_gen_inputs(*gen), *b, &err), &err);
  CHECK_OK(scps_client_lookup(a, *b, *x, 10000, &err), &err);
  return a;
}

/* A segment the server let go while the client still names it (detached
 * here through the client's own side channel): the Lookup whose request
 * lay there is refused, sent again on the connection and answered there;
 * the one after places again. */
static void test_detached_request(scps_it_cluster *cl) {
  scps_batch *b = NULL;
  scps_workload_gen *gen = NULL;
  float **x = NULL;
  scps_client *a = first_lookup(cl, 7, &b, &gen, &x);
  if (!a) return;
  scps_error err;
  float **y = acts_alloc(a);
  char msg[600] = "no batch";
  CHECKF(b && gen && a->servers[0].shm.linked && side_ask(a->servers[0].shm.fd, NULL, 0, b->shm[0].handle, -1, msg, sizeof msg,
                                              NULL) == 0, "detach of the batch's segment: %s", msg);
  uint64_t sent0, recv0, sent1, recv1;
  if (!b || !gen) goto done;
  scps_client_traffic(a, &sent0, &recv0);
  uint64_t placed0 = placed_rx(a);
  CHECK_OK(scps_client_lookup(a, b, y, 10000, &err), &err);
  scps_client_traffic(a, &sent1, &recv1);
  int f = acts_differ(a, x, y);
  CHECKF(f < 0, "after the detach feature %d differs", f);
  CHECKF(sent1 - sent0 > GRPC_SLICE_LENGTH(b->lookup[0]) && recv1 - recv0 > 1000,
         "the refused request went again on the connection: %llu bytes sent, %llu received",
         (unsigned long long)(sent1 - sent0), (unsigned long long)(recv1 - recv0));
  CHECK_OK(scps_client_lookup(a, b, y, 10000, &err), &err);
  CHECKF(placed_rx(a) > placed0, "the lookup after placed again");
done:
  acts_free(a, x);
  acts_free(a, y);
  scps__workload_gen_destroy(gen);
  scps_batch_destroy(b);
  scps_client_destroy(a);
}

/* A restarted server knows no segment of the old one: lookups go on,
 * answered over the connection, with the values of a client without
 * shared memory. */
static void test_restart(scps_it_cluster *cl) {
  scps_batch *b = NULL;
  scps_workload_gen *gen = NULL;
  float **x = NULL;
  scps_client *a = first_lookup(cl, 3, &b, &gen, &x);
  if (!a) return;
  scps_error err;
  uint64_t placed = placed_rx(a);
  CHECK(placed > 0);
  scps_it_kill(cl, 1);
  CHECK(scps_it_start_one(cl, 1, cl->ports[1], 1) == 0);
  CHECK_OK(scps_client_lookup(a, b, x, 20000, &err), &err);
  scps_client *off = connect_to(cl, 2, SCPS_SHM_OFF, SCPS_WIRE_FLOAT32, SCPS_ANSWER_AUTO, NULL);
  scps_batch *bo = NULL;
  if (off) CHECK_OK(scps_batch_create(off, &bo, &err), &err);
  if (bo) {
    float **y = acts_alloc(off);
    CHECK_OK(scps_client_prepare(off, scps__workload_gen_inputs(gen), bo, &err), &err);
    CHECK_OK(scps_client_lookup(off, bo, y, 10000, &err), &err);
    int f = acts_differ(a, x, y);
    CHECKF(f < 0, "after the restart feature %d differs", f);
    acts_free(off, y);
  }
  /* Server 0 still places; server 1 is answered over the connection. */
  uint64_t before = placed_rx(a);
  CHECK_OK(scps_client_lookup(a, b, x, 10000, &err), &err);
  CHECKF(placed_rx(a) > before, "server 0 placed nothing after server 1's restart");
  scps_batch_destroy(bo);
  scps_client_destroy(off);
  acts_free(a, x);
  scps__workload_gen_destroy(gen);
  scps_batch_destroy(b);
  scps_client_destroy(a);
}

/* steps training steps of client c on its own batches: lookup, gradients
 * that depend on the activations, push. */
static void train(scps_client *c, scps_workload_gen *gen, int steps, int64_t first_step) {
  scps_error err;
  scps_batch *b = NULL;
  CHECK_OK(scps_batch_create(c, &b, &err), &err);
  float **x = acts_alloc(c), **g = acts_alloc(c);
  for (int i = 0; i < steps && b; i++) {
    scps__workload_gen_next(gen);
    CHECK_OK(scps_client_prepare(c, scps__workload_gen_inputs(gen), b, &err), &err);
    CHECK_OK(scps_client_lookup(c, b, x, 10000, &err), &err);
    for (int f = 0; f < scps_client_n_features(c); f++)
      for (size_t j = 0; j < (size_t)scps_client_feature_batch_size(c, f) * (size_t)scps_client_feature_width(c, f);
           j++)
        g[f][j] = 0.5f * x[f][j] + (float)(j % 7) * 0.01f - 0.03f;
    CHECK_OK(scps_client_apply_gradients(c, b, (const float *const *)g, first_step + i, -1, 10000, &err), &err);
  }
  acts_free(c, x);
  acts_free(c, g);
  scps_batch_destroy(b);
}

/* Pushes through shared memory leave the tables exactly as pushes over the
 * connection do: two clusters trained alike, one each way, then read back. */
static void test_push(scps_gradient_mode mode, scps_float_format wire) {
  scps_it_cluster x, y;
  CHECK(scps_it_init(&x, config_json, 2, 2) == 0 && scps_it_init(&y, config_json, 2, 2) == 0);
  CHECK(scps_it_start(&x) == 0 && scps_it_start(&y) == 0);
  scps_client_options o;
  scps_client_options_init(&o);
  o.n_servers = 2;
  o.gradients = mode;
  o.wire_format = wire;
  scps_client *a = NULL, *b = NULL, *ra = NULL, *rb = NULL;
  scps_error err;
  o.servers = x.addr_list;
  CHECK_OK(scps_client_create(&o, &a, &err), &err);
  o.servers = y.addr_list;
  o.shared_memory = SCPS_SHM_OFF;
  CHECK_OK(scps_client_create(&o, &b, &err), &err);
  scps_workload_gen *ga = NULL, *gb = NULL;
  CHECK_OK(scps__workload_gen_create(w, 21, &ga, &err), &err);
  CHECK_OK(scps__workload_gen_create(w, 21, &gb, &err), &err);
  if (a && b && ga && gb) {
    train(a, ga, 5, 0);
    train(b, gb, 5, 0);
    /* AUTO sends these small Zipf batches by row, which stays on the
     * connection (each server's sums differ). */
    CHECKF((placed_tx(a) > 0 || mode != SCPS_GRADIENTS_BY_SAMPLE) && placed_tx(b) == 0,
           "gradients placed: %llu and %llu bytes",
           (unsigned long long)placed_tx(a), (unsigned long long)placed_tx(b));
    printf("pushes (gradients mode %d, %s): %llu bytes of gradients placed\n", (int)mode,
           wire == SCPS_WIRE_BFLOAT16 ? "bfloat16" : "float32", (unsigned long long)placed_tx(a));
    /* Read back over the connection, in float32. */
    scps_client_options r;
    scps_client_options_init(&r);
    r.n_servers = 2;
    r.shared_memory = SCPS_SHM_OFF;
    r.servers = x.addr_list;
    CHECK_OK(scps_client_create(&r, &ra, &err), &err);
    r.servers = y.addr_list;
    CHECK_OK(scps_client_create(&r, &rb, &err), &err);
  }
  if (ra && rb) {
    scps_batch *ba = NULL, *bb = NULL;
    CHECK_OK(scps_batch_create(ra, &ba, &err), &err);
    CHECK_OK(scps_batch_create(rb, &bb, &err), &err);
    float **xa = acts_alloc(ra), **xb = acts_alloc(rb);
    for (int i = 0; i < 6 && ba && bb; i++) {
      scps__workload_gen_next(ga);
      lookup_both(ra, ba, xa, rb, bb, xb, scps__workload_gen_inputs(ga));
      int f = acts_differ(ra, xa, xb);
      CHECKF(f < 0, "after training, batch %d feature %d differs", i, f);
    }
    acts_free(ra, xa);
    acts_free(rb, xb);
    scps_batch_destroy(ba);
    scps_batch_destroy(bb);
  }
  scps__workload_gen_destroy(ga);
  scps__workload_gen_destroy(gb);
  scps_client_destroy(ra);
  scps_client_destroy(rb);
  scps_client_destroy(a);
  scps_client_destroy(b);
  scps_it_stop(&x);
  scps_it_stop(&y);
}

/* A trainer that pauses past the servers' --idle-timeout: the side channel
 * was closed and its segments detached; the next steps attach anew and
 * still go through shared memory. */
static void test_pause(void) {
  scps_it_cluster cl;
  CHECK(scps_it_init(&cl, config_json, 2, 2) == 0);
  cl.extra[0] = "--idle-timeout";
  cl.extra[1] = "1";
  CHECK(scps_it_start(&cl) == 0);
  scps_client_options o;
  scps_client_options_init(&o);
  o.servers = cl.addr_list;
  o.n_servers = 2;
  o.gradients = SCPS_GRADIENTS_BY_SAMPLE;
  scps_client *a = NULL;
  scps_workload_gen *gen = NULL;
  scps_error err;
  CHECK_OK(scps_client_create(&o, &a, &err), &err);
  CHECK_OK(scps__workload_gen_create(w, 9, &gen, &err), &err);
  if (a && gen) {
    train(a, gen, 2, 0);
    uint64_t tx = placed_tx(a), rx = placed_rx(a);
    struct timespec ts = {2, 500000000};
    nanosleep(&ts, NULL);
    train(a, gen, 2, 2);
    CHECKF(placed_tx(a) > tx && placed_rx(a) > rx, "after the pause: %llu -> %llu bytes pushed, %llu -> %llu received",
           (unsigned long long)tx, (unsigned long long)placed_tx(a), (unsigned long long)rx,
           (unsigned long long)placed_rx(a));
  }
  scps__workload_gen_destroy(gen);
  scps_client_destroy(a);
  scps_it_stop(&cl);
}

static void test_cluster(void) {
  scps_it_cluster cl;
  CHECK(scps_it_init(&cl, config_json, 2, 2) == 0);
  CHECK(scps_it_start(&cl) == 0);
  compare(&cl, 2, SCPS_WIRE_FLOAT32, SCPS_ANSWER_POOLED);
  compare(&cl, 2, SCPS_WIRE_FLOAT32, SCPS_ANSWER_DISTINCT_ROWS);
  compare(&cl, 2, SCPS_WIRE_BFLOAT16, SCPS_ANSWER_POOLED);
  compare(&cl, 2, SCPS_WIRE_BFLOAT16, SCPS_ANSWER_AUTO);
  test_side_channel(&cl, NULL);
  test_detached_request(&cl);
  test_restart(&cl);
  scps_it_stop(&cl);
}

/* With a token file the side channel checks the token as gRPC does. */
static void test_tokens(void) {
  scps_it_cluster cl;
  CHECK(scps_it_init(&cl, config_json, 1, 2) == 0);
  char tokens[300];
  snprintf(tokens, sizeof tokens, "%s/tokens", cl.dir);
  FILE *f = fopen(tokens, "w");
  CHECK(f != NULL);
  if (!f) return;
  fprintf(f, "training %s\n", TOKEN);
  fclose(f);
  chmod(tokens, 0600);
  cl.extra[0] = "--token-file";
  cl.extra[1] = tokens;
  CHECK(scps_it_start(&cl) == 0);
  test_side_channel(&cl, TOKEN);
  scps_client *a = connect_to(&cl, 1, SCPS_SHM_AUTO, SCPS_WIRE_FLOAT32, SCPS_ANSWER_POOLED, TOKEN);
  if (a) {
    scps_error err;
    scps_batch *b = NULL;
    scps_workload_gen *gen = NULL;
    CHECK_OK(scps_batch_create(a, &b, &err), &err);
    CHECK_OK(scps__workload_gen_create(w, 5, &gen, &err), &err);
    float **x = acts_alloc(a);
    scps__workload_gen_next(gen);
    CHECK_OK(scps_client_prepare(a, scps__workload_gen_inputs(gen), b, &err), &err);
    CHECK_OK(scps_client_lookup(a, b, x, 10000, &err), &err);
    CHECKF(placed_rx(a) > 0, "a client with the training token had nothing placed");
    /* One process in float32: pooled features are read where the server
     * wrote them. */
    check_view(a, b, x, "1 process, shared memory");
    scps_client *off = connect_to(&cl, 1, SCPS_SHM_OFF, SCPS_WIRE_FLOAT32, SCPS_ANSWER_POOLED, TOKEN);
    scps_batch *bo = NULL;
    if (off) CHECK_OK(scps_batch_create(off, &bo, &err), &err);
    if (bo) {
      CHECK_OK(scps_client_prepare(off, scps__workload_gen_inputs(gen), bo, &err), &err);
      check_view(off, bo, x, "1 process, over the connection");
    }
    scps_batch_destroy(bo);
    scps_client_destroy(off);
    acts_free(a, x);
    scps__workload_gen_destroy(gen);
    scps_batch_destroy(b);
    scps_client_destroy(a);
  }
  scps_it_stop(&cl);
}

int main(void) {
  scps_error err;
  CHECK_OK(scps__workload_parse(config_json, strlen(config_json), &w, &err), &err);
  if (w) {
    test_cluster();
    test_tokens();
    test_push(SCPS_GRADIENTS_BY_SAMPLE, SCPS_WIRE_FLOAT32);
    test_push(SCPS_GRADIENTS_AUTO, SCPS_WIRE_BFLOAT16);
    test_pause();
  }
  scps__workload_destroy(w);
  return scps_test_finish("test_shm");
}
