/* _GNU_SOURCE: accept4, pthread_setname_np, F_GET_SEALS, struct ucred */
#define _GNU_SOURCE
#include "scps_shm.h"

#include <errno.h>
#include <fcntl.h>
#include <grpc/status.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "scps.pb-c.h"
#include "scps_clock.h"
#include "scps_log.h"
#include "scps_request.h"
#include "scps_shm_msg.h"

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

/* Segments of all connections together. */
#define SEGMENTS_MAX (SCPS_SHM_CONNS_MAX * SCPS_SHM_SEGMENTS_PER_CONN)

struct scps_shm_seg {
  uint8_t handle[SCPS_REQUEST_SEGMENT_BYTES];
  uint8_t *base;
  size_t size;
  uint64_t conn; /* the connection that attached it */
  int refs;      /* Lookups writing into it */
  int64_t used_ns; /* when a Lookup last took it */
  bool dead;     /* detached: unmapped when the last holder releases it */
};

typedef struct conn {
  int fd;
  uint64_t id;
  int segments;
  pid_t pid; /* the peer's, for the log */
  uid_t uid;
  int64_t last_ns; /* its last request */
} conn;

struct scps_shm {
  const scps_auth *auth;
  int64_t idle_ns; /* a connection neither asked nor used for this long is closed */
  uint8_t instance[SCPS_SHM_INSTANCE_BYTES];
  char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
  char dir[PATH_MAX]; /* the directory "auto" made; empty otherwise */
  int listen_fd;
  int wake[2]; /* written to stop the thread */
  pthread_t thread;
  bool started;
  conn conns[SCPS_SHM_CONNS_MAX];
  int n_conns;
  int64_t refused_logged_ns; /* when a refused connection was last logged */
  long refused;              /* connections refused since */
  uint64_t next_conn;

  pthread_mutex_t mu; /* the segment table */
  scps_shm_seg *segs[SEGMENTS_MAX];
  int n_segs;
  int64_t bytes;
  int64_t calls; /* segments taken by calls, since start */
};

/* Binds fd to path; a socket file there that no process answers is
 * removed first (left by a process that was killed). */
static int bind_at(int fd, const char *path, scps_error *err) {
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  memcpy(sa.sun_path, path, strlen(path) + 1);
  struct stat st;
  if (lstat(path, &st) == 0) {
    if (!S_ISSOCK(st.st_mode))
      return scps_error_set(err, SCPS_EEXIST, "--shm-socket %s: exists and is not a socket", path);
    int probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    bool live = probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof sa) == 0;
    if (probe >= 0) close(probe);
    if (live) return scps_error_set(err, SCPS_EEXIST, "--shm-socket %s: another process listens there", path);
    if (unlink(path) && errno != ENOENT)
      return scps_error_set(err, SCPS_EIO, "--shm-socket %s: removing the stale socket: %s", path, strerror(errno));
  }
  if (bind(fd, (struct sockaddr *)&sa, sizeof sa))
    return scps_error_set(err, SCPS_EIO, "--shm-socket %s: bind: %s", path, strerror(errno));
  if (chmod(path, 0600)) {
    int e = errno;
    unlink(path);
    return scps_error_set(err, SCPS_EIO, "--shm-socket %s: chmod: %s", path, strerror(e));
  }
  return 0;
}

int scps__shm_create(const char *path, const scps_auth *auth, const uint8_t instance[SCPS_SHM_INSTANCE_BYTES],
                    int32_t idle_timeout_s, scps_shm **out, scps_error *err) {
  *out = NULL;
  scps_shm *m = calloc(1, sizeof *m);
  if (!m) return scps_error_set(err, SCPS_ENOMEM, "out of memory");
  m->auth = auth;
  m->idle_ns = (int64_t)(idle_timeout_s > 0 ? idle_timeout_s : 3600) * 1000000000;
  memcpy(m->instance, instance, sizeof m->instance);
  m->listen_fd = m->wake[0] = m->wake[1] = -1;
  pthread_mutex_init(&m->mu, NULL);
  int rc = 0;
  if (!strcmp(path, "auto")) {
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp) tmp = "/tmp";
    int n = snprintf(m->dir, sizeof m->dir, "%s/scps-shm-XXXXXX", tmp);
    if (n < 0 || (size_t)n >= sizeof m->dir || !mkdtemp(m->dir)) {
      rc = scps_error_set(err, SCPS_EIO, "--shm-socket auto: cannot make a directory under %s: %s", tmp,
                          n < 0 || (size_t)n >= sizeof m->dir ? "path too long" : strerror(errno));
      m->dir[0] = '\0';
    } else {
      n = snprintf(m->path, sizeof m->path, "%s/sock", m->dir);
      if (n < 0 || (size_t)n >= sizeof m->path)
        rc = scps_error_set(err, SCPS_EINVAL, "--shm-socket auto: %s/sock is longer than a socket path may be (%zu)",
                            m->dir, sizeof m->path - 1);
    }
  } else if (strlen(path) >= sizeof m->path || !*path) {
    rc = scps_error_set(err, SCPS_EINVAL, "--shm-socket '%s': a socket path has 1 to %zu bytes", path,
                        sizeof m->path - 1);
  } else {
    memcpy(m->path, path, strlen(path) + 1);
  }
  if (!rc) {
    m->listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (m->listen_fd < 0) rc = scps_error_set(err, SCPS_EIO, "--shm-socket: socket: %s", strerror(errno));
  }
  if (!rc) rc = bind_at(m->listen_fd, m->path, err);
  if (!rc && listen(m->listen_fd, SCPS_SHM_CONNS_MAX)) {
    rc = scps_error_set(err, SCPS_EIO, "--shm-socket %s: listen: %s", m->path, strerror(errno));
    unlink(m->path);
  }
  if (!rc && pipe2(m->wake, O_CLOEXEC | O_NONBLOCK)) {
    rc = scps_error_set(err, SCPS_EIO, "--shm-socket: pipe: %s", strerror(errno));
    unlink(m->path);
  }
  if (rc) {
    m->path[0] = '\0'; /* not ours to remove */
    scps__shm_destroy(m);
    return rc;
  }
  *out = m;
  return 0;
}

const char *scps__shm_path(const scps_shm *m) { return m->path; }

static void seg_unmap(scps_shm_seg *s) {
  munmap(s->base, s->size);
  free(s);
}

/* Takes segment i out of the table (m->mu held); unmapped now, or by the
 * last Lookup that holds it. */
static void seg_remove(scps_shm *m, int i) {
  scps_shm_seg *s = m->segs[i];
  m->segs[i] = m->segs[--m->n_segs];
  m->bytes -= (int64_t)s->size;
  s->dead = true;
  if (!s->refs) seg_unmap(s);
}

/* Equal handles, in a time that does not depend on where they differ. */
static bool same_handle(const uint8_t *a, const uint8_t *b) {
  unsigned d = 0;
  for (size_t k = 0; k < SCPS_REQUEST_SEGMENT_BYTES; k++) d |= (unsigned)(a[k] ^ b[k]);
  return d == 0;
}

/* The segment holding [offset, offset + length) of handle, held, counted
 * as a call's when count. */
static scps_shm_seg *take(scps_shm *m, const uint8_t *handle, size_t handle_len, uint64_t offset, uint64_t length,
                          uint8_t **at, bool count) {
  if (!m || handle_len != SCPS_REQUEST_SEGMENT_BYTES) return NULL;
  scps_shm_seg *found = NULL;
  pthread_mutex_lock(&m->mu);
  for (int i = 0; i < m->n_segs; i++)
    if (same_handle(m->segs[i]->handle, handle)) found = m->segs[i];
  if (found && offset <= found->size && length <= found->size - offset) {
    found->refs++;
    found->used_ns = scps__clock_ns();
    if (count) m->calls++;
    *at = found->base + offset;
  } else {
    found = NULL;
  }
  pthread_mutex_unlock(&m->mu);
  return found;
}

scps_shm_seg *scps__shm_acquire(scps_shm *m, const uint8_t *handle, size_t handle_len, uint64_t offset,
                               uint64_t length, uint8_t **at) {
  return take(m, handle, handle_len, offset, length, at, true);
}

int scps__shm_copy_out(scps_shm *m, const uint8_t *handle, size_t handle_len, uint64_t offset, uint64_t length,
                       void *dst) {
  uint8_t *at;
  scps_shm_seg *s = take(m, handle, handle_len, offset, length, &at, false);
  if (!s) return -1;
  memcpy(dst, at, (size_t)length);
  scps__shm_release(m, s);
  return 0;
}

void scps__shm_release(scps_shm *m, scps_shm_seg *s) {
  if (!s) return;
  pthread_mutex_lock(&m->mu);
  bool last = --s->refs == 0 && s->dead;
  pthread_mutex_unlock(&m->mu);
  if (last) seg_unmap(s);
}

void scps__shm_counts(scps_shm *m, int64_t *segments, int64_t *bytes, int64_t *calls) {
  pthread_mutex_lock(&m->mu);
  *segments = m->n_segs;
  *bytes = m->bytes;
  *calls = m->calls;
  pthread_mutex_unlock(&m->mu);
}

/* The checks of an attach's descriptor: a memfd of exactly `bytes` that
 * can neither shrink (a write past its end would raise SIGBUS in this
 * process) nor grow, whose seals can no longer change, and that this
 * process may write. */
static grpc_status_code check_fd(int fd, uint64_t bytes, char *msg, size_t len) {
  struct stat st;
  if (fd < 0) {
    snprintf(msg, len, "attach_bytes %llu: no descriptor came with the message (SCM_RIGHTS)",
             (unsigned long long)bytes);
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  if (bytes == 0 || bytes > SCPS_SHM_SEGMENT_MAX) {
    snprintf(msg, len, "attach_bytes %llu: a segment holds 1 to %llu bytes", (unsigned long long)bytes,
             (unsigned long long)SCPS_SHM_SEGMENT_MAX);
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  if (fstat(fd, &st) || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != bytes) {
    snprintf(msg, len, "attach_bytes %llu: the descriptor is not a file of that size (%lld bytes)",
             (unsigned long long)bytes, (long long)st.st_size);
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  int seals = fcntl(fd, F_GET_SEALS);
  const int need = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL, refuse = F_SEAL_WRITE | F_SEAL_FUTURE_WRITE;
  if (seals < 0 || (seals & need) != need || (seals & refuse)) {
    snprintf(msg, len,
             "the descriptor's seals are %d: a memfd sealed with F_SEAL_SHRINK, F_SEAL_GROW and F_SEAL_SEAL "
             "(and not F_SEAL_WRITE) is needed",
             seals);
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  return GRPC_STATUS_OK;
}

static grpc_status_code attach(scps_shm *m, conn *k, uint64_t bytes, int fd, uint8_t *handle, char *msg,
                               size_t len) {
  grpc_status_code st = check_fd(fd, bytes, msg, len);
  if (st) return st;
  if (k->segments >= SCPS_SHM_SEGMENTS_PER_CONN) {
    snprintf(msg, len, "attach: this connection holds %d segments already, the most one may",
             SCPS_SHM_SEGMENTS_PER_CONN);
    return GRPC_STATUS_RESOURCE_EXHAUSTED;
  }
  if (getrandom(handle, SCPS_REQUEST_SEGMENT_BYTES, 0) != SCPS_REQUEST_SEGMENT_BYTES) {
    snprintf(msg, len, "attach: no random bytes for a handle: %s", strerror(errno));
    return GRPC_STATUS_INTERNAL;
  }
  void *base = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    snprintf(msg, len, "attach: mmap of %llu bytes: %s", (unsigned long long)bytes, strerror(errno));
    return GRPC_STATUS_RESOURCE_EXHAUSTED;
  }
  scps_shm_seg *s = calloc(1, sizeof *s);
  if (!s) {
    munmap(base, (size_t)bytes);
    snprintf(msg, len, "attach: out of memory");
    return GRPC_STATUS_RESOURCE_EXHAUSTED;
  }
  memcpy(s->handle, handle, SCPS_REQUEST_SEGMENT_BYTES);
  s->base = base;
  s->size = (size_t)bytes;
  s->conn = k->id;
  s->used_ns = scps__clock_ns();
  pthread_mutex_lock(&m->mu);
  m->segs[m->n_segs++] = s; /* room: segments per connection x connections */
  m->bytes += (int64_t)bytes;
  pthread_mutex_unlock(&m->mu);
  k->segments++;
  return GRPC_STATUS_OK;
}

static grpc_status_code detach(scps_shm *m, conn *k, const ProtobufCBinaryData *h, char *msg, size_t len) {
  grpc_status_code st = GRPC_STATUS_NOT_FOUND;
  pthread_mutex_lock(&m->mu);
  for (int i = 0; h->len == SCPS_REQUEST_SEGMENT_BYTES && i < m->n_segs; i++) {
    if (m->segs[i]->conn != k->id || !same_handle(m->segs[i]->handle, h->data)) continue;
    seg_remove(m, i);
    k->segments--;
    st = GRPC_STATUS_OK;
    break;
  }
  pthread_mutex_unlock(&m->mu);
  if (st) snprintf(msg, len, "detach: no segment of this connection has that handle (%zu bytes)", h->len);
  return st;
}

/* One request of connection k, answered; false: drop the connection. */
static bool serve(scps_shm *m, conn *k) {
  ProtobufCMessage *got;
  int fd;
  scps_error err = {0};
  int rc = scps__shm_msg_recv(k->fd, &scps__v1__shm_request__descriptor, &got, &fd, &err);
  /* Closed, or a socket error: nothing to answer. Only a message that
   * arrived malformed gets an answer, so the client's next request is
   * never answered by this one's. */
  if (rc == SCPS_EUNAVAIL || rc == SCPS_EIO) return false;
  k->last_ns = scps__clock_ns();
  char msg[SCPS_ERROR_MSG_MAX] = "";
  uint8_t handle[SCPS_REQUEST_SEGMENT_BYTES];
  Scps__V1__ShmResponse resp = SCPS__V1__SHM_RESPONSE__INIT;
  resp.instance_id.data = m->instance;
  resp.instance_id.len = sizeof m->instance;
  grpc_status_code st = GRPC_STATUS_OK;
  if (rc) {
    st = GRPC_STATUS_INVALID_ARGUMENT;
    snprintf(msg, sizeof msg, "%s", err.msg);
  } else {
    const Scps__V1__ShmRequest *req = (const Scps__V1__ShmRequest *)got;
    scps_role role = scps__auth_token_role(m->auth, req->token, strlen(req->token));
    if (role < SCPS_ROLE_TRAINING) {
      st = m->auth->tokens && !*req->token ? GRPC_STATUS_UNAUTHENTICATED : GRPC_STATUS_PERMISSION_DENIED;
      snprintf(msg, sizeof msg, "token: %s; attaching a segment takes the training role",
               *req->token ? "not one of the server's tokens" : "none given");
    } else if (req->detach.len) {
      st = detach(m, k, &req->detach, msg, sizeof msg);
    } else if (!req->attach_bytes && fd < 0) {
      st = GRPC_STATUS_OK; /* a ping: the connection is in use */
    } else {
      st = attach(m, k, req->attach_bytes, fd, handle, msg, sizeof msg);
      if (!st) {
        resp.segment.data = handle;
        resp.segment.len = sizeof handle;
        scps__log(SCPS_LOG_DEBUG, "shm: pid %d (uid %u) attached a segment of %llu bytes", (int)k->pid,
                  (unsigned)k->uid, (unsigned long long)req->attach_bytes);
      }
    }
    protobuf_c_message_free_unpacked(got, NULL);
  }
  if (fd >= 0) close(fd); /* mapped, or refused */
  resp.code = (int32_t)st;
  resp.message = msg;
  /* One request at a time is the protocol: a client that does not read
   * its answers fills the socket and is dropped, rather than stopping
   * this thread. */
  return scps__shm_msg_send(k->fd, &resp.base, -1, &err) == 0;
}

static void conn_close(scps_shm *m, int i) {
  conn *k = &m->conns[i];
  pthread_mutex_lock(&m->mu);
  for (int j = m->n_segs - 1; j >= 0; j--)
    if (m->segs[j]->conn == k->id) seg_remove(m, j);
  pthread_mutex_unlock(&m->mu);
  close(k->fd);
  m->conns[i] = m->conns[--m->n_conns];
}

static void take_conn(scps_shm *m) {
  int fd = accept4(m->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) return;
  if (m->n_conns == SCPS_SHM_CONNS_MAX) {
    /* Such a client answers over its connection and tries again every
     * second: one line a minute says so. */
    close(fd);
    m->refused++;
    int64_t now = scps__clock_ns();
    if (now - m->refused_logged_ns >= 60 * (int64_t)1000000000 || !m->refused_logged_ns) {
      scps__log(SCPS_LOG_WARN,
                "shm: %d side-channel connections open already; refused %ld more since the last such line (their "
                "clients are answered over their connections)",
                SCPS_SHM_CONNS_MAX, m->refused);
      m->refused_logged_ns = now;
      m->refused = 0;
    }
    return;
  }
  conn *k = &m->conns[m->n_conns++];
  memset(k, 0, sizeof *k);
  k->fd = fd;
  k->id = ++m->next_conn;
  k->last_ns = scps__clock_ns();
  struct ucred cr;
  socklen_t cl = sizeof cr;
  if (!getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl)) {
    k->pid = cr.pid;
    k->uid = cr.uid;
  }
}

/* Whether connection k has neither asked anything nor had a segment used
 * by a Lookup for the idle timeout (--idle-timeout, as for gRPC's
 * connections): a client that stopped looking up holds no slot. */
static bool conn_idle(scps_shm *m, const conn *k, int64_t now) {
  int64_t last = k->last_ns;
  pthread_mutex_lock(&m->mu);
  for (int i = 0; i < m->n_segs; i++) {
    const scps_shm_seg *s = m->segs[i];
    if (s->conn != k->id) continue;
    if (s->refs) last = now;
    else if (s->used_ns > last) last = s->used_ns;
  }
  pthread_mutex_unlock(&m->mu);
  return now - last > m->idle_ns;
}

static void *shm_thread(void *arg) {
  scps_shm *m = arg;
  struct pollfd p[2 + SCPS_SHM_CONNS_MAX];
  for (;;) {
    int n = 0;
    p[n++] = (struct pollfd){.fd = m->wake[0], .events = POLLIN};
    p[n++] = (struct pollfd){.fd = m->listen_fd, .events = POLLIN};
    for (int i = 0; i < m->n_conns; i++) p[n++] = (struct pollfd){.fd = m->conns[i].fd, .events = POLLIN};
    if (poll(p, (nfds_t)n, 1000) < 0) {
      if (errno == EINTR) continue;
      scps__log(SCPS_LOG_ERROR, "shm: poll: %s; shared-memory answers stop", strerror(errno));
      return NULL;
    }
    if (p[0].revents) return NULL;
    /* Connections from the last one down, so closing one (which moves the
     * last into its place) skips none of this round's. */
    for (int i = m->n_conns - 1; i >= 0; i--) {
      short ev = p[2 + i].revents;
      if (!ev) continue;
      if ((ev & POLLIN) ? !serve(m, &m->conns[i]) : true) conn_close(m, i);
    }
    if (p[1].revents & POLLIN) take_conn(m);
    int64_t now = scps__clock_ns();
    for (int i = m->n_conns - 1; i >= 0; i--)
      if (conn_idle(m, &m->conns[i], now)) conn_close(m, i);
  }
}

int scps__shm_start(scps_shm *m, scps_error *err) {
  int e = pthread_create(&m->thread, NULL, shm_thread, m);
  if (e) return scps_error_set(err, SCPS_EIO, "shm: cannot start its thread: %s", strerror(e));
  pthread_setname_np(m->thread, "scps-shm");
  m->started = true;
  return 0;
}

void scps__shm_destroy(scps_shm *m) {
  if (!m) return;
  if (m->started) {
    ssize_t w = write(m->wake[1], "x", 1);
    (void)w;
    pthread_join(m->thread, NULL);
  }
  while (m->n_conns) conn_close(m, m->n_conns - 1);
  for (int i = 0; i < m->n_segs; i++) seg_unmap(m->segs[i]);
  if (m->listen_fd >= 0) close(m->listen_fd);
  if (m->wake[0] >= 0) close(m->wake[0]);
  if (m->wake[1] >= 0) close(m->wake[1]);
  if (m->path[0]) unlink(m->path);
  if (m->dir[0]) rmdir(m->dir);
  pthread_mutex_destroy(&m->mu);
  free(m);
}
