#include "scps_shm_msg.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Room for a few descriptors, so a peer that passes more than one still
 * has every one of them closed rather than left open in this process. */
#define FDS_MAX 8

int scps__shm_msg_send(int fd, const ProtobufCMessage *msg, int fd_pass, scps_error *err) {
  uint8_t buf[SCPS_SHM_MSG_MAX];
  size_t n = protobuf_c_message_get_packed_size(msg);
  if (n > sizeof buf)
    return scps_error_set(err, SCPS_EINVAL, "%s: %zu bytes, more than the side channel's %d", msg->descriptor->name,
                          n, SCPS_SHM_MSG_MAX);
  protobuf_c_message_pack(msg, buf);
  struct iovec iov = {.iov_base = buf, .iov_len = n ? n : 1};
  /* A zero-length SOCK_SEQPACKET message cannot be told from the end of
   * the stream: an empty message goes as one zero byte, field 0, which no
   * decoder accepts, so neither end sends one (every message here has a
   * field set). */
  if (!n) buf[0] = 0;
  union {
    struct cmsghdr h;
    char b[CMSG_SPACE(sizeof(int))];
  } ctl;
  struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
  if (fd_pass >= 0) {
    memset(&ctl, 0, sizeof ctl);
    mh.msg_control = ctl.b;
    mh.msg_controllen = sizeof ctl.b;
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd_pass, sizeof fd_pass);
  }
  ssize_t w;
  do w = sendmsg(fd, &mh, MSG_NOSIGNAL);
  while (w < 0 && errno == EINTR);
  if (w < 0) return scps_error_set(err, SCPS_EIO, "side channel: sendmsg: %s", strerror(errno));
  return 0;
}

int scps__shm_msg_recv(int fd, const ProtobufCMessageDescriptor *desc, ProtobufCMessage **out, int *fd_got,
                      scps_error *err) {
  *out = NULL;
  *fd_got = -1;
  uint8_t buf[SCPS_SHM_MSG_MAX];
  union {
    struct cmsghdr h;
    char b[CMSG_SPACE(FDS_MAX * sizeof(int))];
  } ctl;
  struct iovec iov = {.iov_base = buf, .iov_len = sizeof buf};
  struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b, .msg_controllen = sizeof ctl.b};
  ssize_t r;
  do r = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
  while (r < 0 && errno == EINTR);
  if (r < 0) return scps_error_set(err, SCPS_EIO, "side channel: recvmsg: %s", strerror(errno));
  int got = -1;
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < k; i++) {
      int d;
      memcpy(&d, CMSG_DATA(c) + i * sizeof(int), sizeof d);
      if (got < 0) got = d;
      else close(d);
    }
  }
  if (r == 0) {
    if (got >= 0) close(got);
    return scps_error_set(err, SCPS_EUNAVAIL, "side channel: closed by the peer");
  }
  if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
    if (got >= 0) close(got);
    return scps_error_set(err, SCPS_EPARSE, "side channel: a message over %d bytes or with too many descriptors",
                          SCPS_SHM_MSG_MAX);
  }
  *out = protobuf_c_message_unpack(desc, NULL, (size_t)r, buf);
  if (!*out) {
    if (got >= 0) close(got);
    return scps_error_set(err, SCPS_EPARSE, "side channel: %zd bytes are not a valid %s", r, desc->name);
  }
  *fd_got = got;
  return 0;
}
