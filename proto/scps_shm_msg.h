/* scps_shm_msg: the shared-memory side channel's messages (ShmRequest,
 * ShmResponse), both ends: one per SOCK_SEQPACKET message, an attach's fd beside it. */
#ifndef SCPS_SHM_MSG_H
#define SCPS_SHM_MSG_H

#include <protobuf-c/protobuf-c.h>

#include "scps_error.h"

/* Largest message either end sends or takes: a token, a size or a handle. */
#define SCPS_SHM_MSG_MAX 4096

/* Packs msg and sends it on the connected SOCK_SEQPACKET socket fd, with
 * fd_pass beside it (SCM_RIGHTS) unless it is -1. Returns 0, SCPS_EINVAL
 * if it packs to more than SCPS_SHM_MSG_MAX bytes, or SCPS_EIO naming the
 * errno. */
int scps__shm_msg_send(int fd, const ProtobufCMessage *msg, int fd_pass, scps_error *err);

/* Receives one message on fd and unpacks it as desc into *out (freed with
 * protobuf_c_message_free_unpacked). *fd_got: a descriptor passed with it,
 * or -1; the caller owns it, and any further ones are closed. Returns 0;
 * SCPS_EUNAVAIL when the peer closed the connection; SCPS_EIO naming the
 * errno; SCPS_EPARSE for a truncated or malformed message (nothing kept,
 * no descriptor left open). */
int scps__shm_msg_recv(int fd, const ProtobufCMessageDescriptor *desc, ProtobufCMessage **out, int *fd_got,
                      scps_error *err);

#endif
