/* scps_shm: shared-memory answers: the side channel's socket and thread
 * (ShmRequest), the segments clients attached, held by the Lookups that write them. */
#ifndef SCPS_SHM_H
#define SCPS_SHM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "scps_auth.h"
#include "scps_error.h"

/* Limits a client meets (scps.proto's ShmRequest says them too). */
#define SCPS_SHM_SEGMENT_MAX ((uint64_t)1 << 30)
#define SCPS_SHM_SEGMENTS_PER_CONN 64
#define SCPS_SHM_CONNS_MAX 64
#define SCPS_SHM_INSTANCE_BYTES 16

typedef struct scps_shm scps_shm;
typedef struct scps_shm_seg scps_shm_seg;

/* Binds the side channel's SOCK_SEQPACKET socket at path: "auto" makes a
 * directory of its own (mode 0700) under $TMPDIR or /tmp and the socket
 * in it; any other path is used as it is (a stale socket there, one no
 * process answers, is replaced; anything else there fails), mode 0600.
 * auth checks the tokens of attaches and must outlive m; instance is
 * GetConfigResponse.instance_id. A connection that sends nothing and whose
 * segments no Lookup takes for idle_timeout_s is closed, detaching them.
 * Nothing is served until scps__shm_start. */
int scps__shm_create(const char *path, const scps_auth *auth, const uint8_t instance[SCPS_SHM_INSTANCE_BYTES],
                    int32_t idle_timeout_s, scps_shm **out, scps_error *err);

/* Starts the thread (scps-shm) that accepts connections and answers them. */
int scps__shm_start(scps_shm *m, scps_error *err);

/* The socket's path, for GetConfigResponse.shm_socket. */
const char *scps__shm_path(const scps_shm *m);

/* The segment whose handle is handle (handle_len bytes) if one is attached
 * and [offset, offset + length) lies inside it: held until
 * scps__shm_release, even if its client detaches meanwhile, with *at its
 * byte offset. NULL when there is none. */
scps_shm_seg *scps__shm_acquire(scps_shm *m, const uint8_t *handle, size_t handle_len, uint64_t offset,
                               uint64_t length, uint8_t **at);
void scps__shm_release(scps_shm *m, scps_shm_seg *s);

/* Copies [offset, offset + length) of the segment whose handle is handle
 * to dst (a call reading what its client placed there, counted with that
 * call's answer, not as one more): 0, or -1 when no attached segment holds
 * the range. */
int scps__shm_copy_out(scps_shm *m, const uint8_t *handle, size_t handle_len, uint64_t offset, uint64_t length,
                       void *dst);

/* Segments attached now, the bytes they map, and the calls (Lookups
 * answered, pushes read) that took one since start. */
void scps__shm_counts(scps_shm *m, int64_t *segments, int64_t *bytes, int64_t *calls);

/* Stops the thread, closes every connection, unmaps every segment and
 * removes the socket (and the directory "auto" made). No segment may be
 * held. */
void scps__shm_destroy(scps_shm *m);

#endif
