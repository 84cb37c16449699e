/* scps_grpc_args: the gRPC channel arguments both ends set: one integer
 * argument at a time, and the HTTP/2 settings bulk messages need. */
#ifndef SCPS_GRPC_ARGS_H
#define SCPS_GRPC_ARGS_H

#include <grpc/grpc.h>

/* An integer channel argument: GRPC_ARG_* key and its value. */
static inline grpc_arg scps__grpc_args_int(const char *key, int value) {
  grpc_arg a = {.type = GRPC_ARG_INTEGER, .key = (char *)key, .value.integer = value};
  return a;
}

/* Writes the arguments a side that receives multi-megabyte messages
 * (activations, gradients) needs into out[0..1] and returns 2: with gRPC's
 * 64 KiB stream window and 16 KiB frames every window of a message would
 * cost a round trip. */
static inline int scps__grpc_args_bulk(grpc_arg *out) {
  out[0] = scps__grpc_args_int(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 64 << 20);
  out[1] = scps__grpc_args_int(GRPC_ARG_HTTP2_MAX_FRAME_SIZE, (1 << 24) - 1);
  return 2;
}

/* Keepalive, which finds a connection that went dead without a word (its
 * peer cut off by a partition, or gone with its host): a client with calls
 * out that has read nothing on a connection for SCPS_GRPC_KEEPALIVE_TIME_MS
 * pings it, and closes it when no ack came within
 * SCPS_GRPC_KEEPALIVE_TIMEOUT_MS; its calls fail UNAVAILABLE (lookups retry
 * within their deadlines) and the channel reconnects with its short backoff.
 * Without it the dead connection stays open: calls sent on it run into their
 * deadlines, and once the peer is back they wait for TCP's retransmission,
 * whose backoff doubles up to two minutes. The timeout is seconds, not the
 * milliseconds a round trip takes, so a busy server's late ack does not
 * close a live connection. */
#define SCPS_GRPC_KEEPALIVE_TIME_MS 2000
#define SCPS_GRPC_KEEPALIVE_TIMEOUT_MS 3000

/* Writes a client's keepalive arguments into out[0..2] and returns 3:
 * pings only while calls are out (an idle connection needs none, and
 * servers refuse frequent pings without calls), as many as it takes. */
static inline int scps__grpc_args_keepalive_client(grpc_arg *out) {
  out[0] = scps__grpc_args_int(GRPC_ARG_KEEPALIVE_TIME_MS, SCPS_GRPC_KEEPALIVE_TIME_MS);
  out[1] = scps__grpc_args_int(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, SCPS_GRPC_KEEPALIVE_TIMEOUT_MS);
  out[2] = scps__grpc_args_int(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  return 3;
}

/* Writes what a server needs to accept those pings into out[0..1] and
 * returns 2. By default gRPC counts a ping less than 5 minutes after the
 * previous one (2 hours, when the server holds no call of that client) as
 * a strike, and after two closes the connection with GOAWAY
 * ENHANCE_YOUR_CALM, failing the calls on it. Pings at half the clients'
 * interval are accepted, whether or not a call is open: a client's ping
 * may cross the answer to its last call. Faster ones are still refused. */
static inline int scps__grpc_args_keepalive_server(grpc_arg *out) {
  out[0] = scps__grpc_args_int(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, SCPS_GRPC_KEEPALIVE_TIME_MS / 2);
  out[1] = scps__grpc_args_int(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  return 2;
}

#endif
