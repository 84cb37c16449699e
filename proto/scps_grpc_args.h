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

#endif
