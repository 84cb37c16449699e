/* scps_client_shm: shared-memory answers, libscps's end: the side channel
 * to each server on this host (ShmRequest) and each batch's segments. */
#ifndef SCPS_CLIENT_SHM_H
#define SCPS_CLIENT_SHM_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "scps_request.h"

typedef struct scps_client scps_client;

/* A server's side channel: open (linked) once GetConfig named a socket that
 * this host has and that belongs to that server. */
typedef struct scps_shm_link {
  bool linked;
  int fd;
  char *path;          /* GetConfigResponse.shm_socket; NULL: none offered */
  int64_t retry_ns;    /* no new connection before then */
  int64_t used_ns;     /* last request, or last segment handed out */
  uint64_t generation; /* connections opened: segments of an older one are gone */
  pthread_mutex_t mu; /* one request at a time on fd */
  bool mu_init;
  uint8_t instance[16]; /* GetConfigResponse.instance_id */
} scps_shm_link;

/* One batch's segment for one server: a sealed memfd mapped here and
 * attached there. */
typedef struct scps_shm_seg {
  uint8_t *base;
  size_t size;
  uint8_t handle[SCPS_REQUEST_SEGMENT_BYTES];
  uint64_t generation; /* the link's when attached */
} scps_shm_seg;

/* Opens server p's side channel at path (GetConfigResponse.shm_socket)
 * when the client's shared_memory option allows, the path is not empty
 * and a socket answers there; instance (instance_len bytes) is what the
 * attach must echo. Failing that, the server's answers come over its
 * connection, as before: nothing here is an error. A channel the server
 * closed (idle, or restarted) is opened again at the next attach, at most
 * once a second. */
void scps__client_shm_link(scps_client *c, int p, const char *path, const uint8_t *instance, size_t instance_len);

/* Closes every server's side channel (the servers detach their segments). */
void scps__client_shm_unlink_all(scps_client *c);

/* g attached at server p with at least need bytes, making and attaching a
 * new one if it has none, too few, or one of a connection the server has
 * since closed: its base, or NULL when server p takes no placement (no side
 * channel, or the attach failed, which also closes the side channel so
 * later lookups do not try again). A link unused for a while is pinged
 * first, so the server cannot close it as idle while the call that uses
 * the segment is on its way. */
uint8_t *scps__client_shm_ready(scps_client *c, int p, scps_shm_seg *g, size_t need);

/* Detaches g from server p (if its side channel is still open) and lets it
 * go. Used when a placed answer failed, so that a late write of that
 * lookup can never land in a later answer. */
void scps__client_shm_drop(scps_client *c, int p, scps_shm_seg *g);

#endif
