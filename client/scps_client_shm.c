/* _GNU_SOURCE: memfd_create, F_ADD_SEALS */
#define _GNU_SOURCE
#include "scps_client_shm.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "scps.pb-c.h"
#include "scps_client_int.h"
#include "scps_shm_msg.h"

/* How long one side-channel request may take: a server answers in
 * microseconds; one that is stopped or stuck must not hold a lookup (or a
 * completion-queue thread letting a segment go) longer than this, after
 * which the call goes over the connection. */
#define ASK_TIMEOUT_MS 250

/* Connects k to its path (k->mu held). */
static void reconnect(scps_shm_link *k) {
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  k->retry_ns = scps__client_op_now_ns() + 1000000000;
  memcpy(sa.sun_path, k->path, strlen(k->path) + 1);
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  struct timeval tv = {0, ASK_TIMEOUT_MS * 1000};
  if (fd >= 0 && setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0 &&
      setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) == 0 &&
      connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) {
    k->fd = fd;
    k->linked = true;
    k->generation++;
    k->used_ns = scps__client_op_now_ns();
  } else if (fd >= 0) {
    close(fd);
  }
}

void scps__client_shm_link(scps_client *c, int p, const char *path, const uint8_t *instance, size_t instance_len) {
  scps_shm_link *k = &c->servers[p].shm;
  if (!k->mu_init) {
    pthread_mutex_init(&k->mu, NULL);
    k->mu_init = true;
  }
  pthread_mutex_lock(&k->mu);
  if (k->linked) close(k->fd);
  k->linked = false;
  free(k->path);
  k->path = NULL;
  if (c->shm_mode == SCPS_SHM_AUTO && path && *path &&
      strlen(path) < sizeof(((struct sockaddr_un *)0)->sun_path) && instance_len == sizeof k->instance) {
    k->path = strdup(path);
    memcpy(k->instance, instance, sizeof k->instance);
    if (k->path) reconnect(k);
  }
  pthread_mutex_unlock(&k->mu);
}

void scps__client_shm_unlink_all(scps_client *c) {
  for (int p = 0; c->servers && p < c->n; p++) {
    scps_shm_link *k = &c->servers[p].shm;
    if (!k->mu_init) continue;
    if (k->linked) close(k->fd);
    k->linked = false;
    free(k->path);
    k->path = NULL;
    pthread_mutex_destroy(&k->mu);
    k->mu_init = false;
  }
}

/* One request on a server's side channel and its answer (k->mu held). An
 * answer that fails, or says another process answered, closes the channel. */
static int ask(scps_shm_link *k, const Scps__V1__ShmRequest *req, int fd_pass, uint8_t *segment) {
  scps_error err;
  ProtobufCMessage *got = NULL;
  int fd_got = -1;
  int rc = scps__shm_msg_send(k->fd, &req->base, fd_pass, &err);
  if (!rc) rc = scps__shm_msg_recv(k->fd, &scps__v1__shm_response__descriptor, &got, &fd_got, &err);
  if (fd_got >= 0) close(fd_got);
  const Scps__V1__ShmResponse *r = (const Scps__V1__ShmResponse *)got;
  if (!rc && (r->code != 0 || r->instance_id.len != sizeof k->instance ||
              memcmp(r->instance_id.data, k->instance, sizeof k->instance)))
    rc = SCPS_EIO;
  if (!rc && segment) {
    if (r->segment.len != SCPS_REQUEST_SEGMENT_BYTES) rc = SCPS_EIO;
    else memcpy(segment, r->segment.data, SCPS_REQUEST_SEGMENT_BYTES);
  }
  if (got) protobuf_c_message_free_unpacked(got, NULL);
  if (rc) {
    close(k->fd);
    k->linked = false;
  } else {
    k->used_ns = scps__client_op_now_ns();
  }
  return rc;
}

/* The token as ShmRequest.token takes it: NUL-terminated (tokens are
 * printable ASCII without spaces, so no NUL inside). */
static char *token_copy(const scps_client *c) {
  size_t n;
  const char *t = scps__client_conn_token(c->conn, &n);
  char *s = malloc(n + 1);
  if (s) {
    memcpy(s, t, n);
    s[n] = '\0';
  }
  return s;
}

static void token_free(char *t) {
  if (!t) return;
  explicit_bzero(t, strlen(t));
  free(t);
}

void scps__client_shm_drop(scps_client *c, int p, scps_shm_seg *g) {
  if (!g->base) return;
  scps_shm_link *k = &c->servers[p].shm;
  if (k->mu_init) {
    pthread_mutex_lock(&k->mu);
    /* A segment of a closed connection is gone from the server already. */
    char *token = k->linked && g->generation == k->generation ? token_copy(c) : NULL;
    if (token) {
      Scps__V1__ShmRequest req = SCPS__V1__SHM_REQUEST__INIT;
      req.token = token;
      req.detach.data = g->handle;
      req.detach.len = sizeof g->handle;
      ask(k, &req, -1, NULL);
    }
    token_free(token);
    pthread_mutex_unlock(&k->mu);
  }
  munmap(g->base, g->size);
  memset(g, 0, sizeof *g);
}

/* A new memfd of size bytes, its pages touched here (so they are this
 * process's, and the server's writes allocate nothing), sealed as the
 * server requires; mapped at *base. -1 on any failure. */
static int make_segment(size_t size, uint8_t **base) {
  int fd = memfd_create("scps-answers", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return -1;
  void *m = MAP_FAILED;
  if (ftruncate(fd, (off_t)size) == 0)
    m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (m == MAP_FAILED || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) {
    if (m != MAP_FAILED) munmap(m, size);
    close(fd);
    return -1;
  }
  *base = m;
  return fd;
}

/* Half a second unused before a ping: far below any --idle-timeout (at
 * least 1 s), and a trainer that looks up every step never pings. */
#define PING_AFTER_NS 500000000

/* Whether g is still attached (k->mu held): its connection is the one
 * open now, pinged first when it has been quiet. */
static bool still_attached(scps_client *c, scps_shm_link *k, const scps_shm_seg *g) {
  if (!k->linked || g->generation != k->generation) return false;
  int64_t now = scps__client_op_now_ns();
  if (now - k->used_ns > PING_AFTER_NS) {
    char *token = token_copy(c);
    Scps__V1__ShmRequest req = SCPS__V1__SHM_REQUEST__INIT;
    req.token = token ? token : (char *)"";
    int rc = ask(k, &req, -1, NULL);
    token_free(token);
    if (rc) return false;
  }
  k->used_ns = now;
  return true;
}

uint8_t *scps__client_shm_ready(scps_client *c, int p, scps_shm_seg *g, size_t need) {
  scps_shm_link *k = &c->servers[p].shm;
  if (!k->path || !need) return NULL;
  if (g->base && g->size >= need) {
    pthread_mutex_lock(&k->mu);
    bool ok = still_attached(c, k, g);
    pthread_mutex_unlock(&k->mu);
    if (ok) return g->base;
  }
  scps__client_shm_drop(c, p, g);
  /* Room for a somewhat larger answer (distinct rows vary from batch to
   * batch) without a new segment, in whole 64 KiB. */
  size_t size = (need + need / 8 + 65535) & ~(size_t)65535;
  if (size > ((size_t)1 << 30)) {
    if (need > ((size_t)1 << 30)) return NULL; /* above the server's limit per segment */
    size = (size_t)1 << 30;
  }
  uint8_t *base;
  int fd = make_segment(size, &base);
  if (fd < 0) return NULL;
  char *token = token_copy(c);
  pthread_mutex_lock(&k->mu);
  int rc = -1;
  if (!k->linked && scps__client_op_now_ns() >= k->retry_ns) reconnect(k);
  if (k->linked && token) {
    Scps__V1__ShmRequest req = SCPS__V1__SHM_REQUEST__INIT;
    req.token = token;
    req.attach_bytes = size;
    rc = ask(k, &req, fd, g->handle);
  }
  pthread_mutex_unlock(&k->mu);
  token_free(token);
  close(fd); /* the mapping keeps the memory; the server holds its own */
  if (rc) {
    munmap(base, size);
    return NULL;
  }
  g->base = base;
  g->size = size;
  g->generation = k->generation;
  return base;
}
