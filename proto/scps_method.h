/* scps_method: the EmbeddingService's methods (scps.proto): each one's
 * name, gRPC path and message types, the one table both ends take them from. */
#ifndef SCPS_METHOD_H
#define SCPS_METHOD_H

#include <protobuf-c/protobuf-c.h>

/* XX(ENUM, Name, request_type, response_type): the enum suffix, the name in
 * scps.proto's service, and the protobuf-c names of its messages. The order
 * is the enum's; it is not on the wire. */
#define SCPS_METHOD_MAP(XX)                                                               \
  XX(GET_CONFIG, GetConfig, get_config_request, get_config_response)                      \
  XX(LOOKUP, Lookup, lookup_request, lookup_response)                                     \
  XX(APPLY_GRADIENTS, ApplyGradients, apply_gradients_request, apply_gradients_response) \
  XX(STATS, Stats, stats_request, stats_response)                                         \
  XX(HEALTH, Health, health_request, health_response)                                     \
  XX(CHECKPOINT, Checkpoint, checkpoint_request, checkpoint_response)                     \
  XX(READ_ROWS, ReadRows, read_rows_request, read_rows_response)                          \
  XX(LIST_CHECKPOINTS, ListCheckpoints, list_checkpoints_request, list_checkpoints_response) \
  XX(RESTORE, Restore, restore_request, restore_response)

typedef enum scps_method {
#define XX(e, name, req, resp) SCPS_M_##e,
  SCPS_METHOD_MAP(XX)
#undef XX
  SCPS_M_COUNT,
  SCPS_M_UNKNOWN = SCPS_M_COUNT /* a path no entry names */
} scps_method;

/* The service's full name, the prefix of every path. */
#define SCPS_METHOD_SERVICE "scps.v1.EmbeddingService"

/* "GetConfig", ...; "unknown" for SCPS_M_UNKNOWN and anything else. */
const char *scps__method_name(int m);

/* "/scps.v1.EmbeddingService/GetConfig", ...; NULL outside the table. */
const char *scps__method_path(int m);

/* The method called `name` ("Lookup"), or SCPS_M_UNKNOWN. */
int scps__method_from_name(const char *name);

/* The descriptors of m's request and response messages; NULL outside the
 * table. */
const ProtobufCMessageDescriptor *scps__method_request(int m);
const ProtobufCMessageDescriptor *scps__method_response(int m);

#endif
