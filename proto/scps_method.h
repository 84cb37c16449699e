/* scps_method: every method scps-server serves (scps.proto's EmbeddingService,
 * health.proto's Check): name, full path, messages; the table both ends use. */
#ifndef SCPS_METHOD_H
#define SCPS_METHOD_H

#include <protobuf-c/protobuf-c.h>

/* XX(ENUM, SVC, Name, request_type, response_type): the enum suffix, the
 * service (SCPS: scps.v1.EmbeddingService, GRPC_HEALTH: grpc.health.v1.Health),
 * the method's name in that service, and the protobuf-c names of its
 * messages without their package prefix. Names are unique across the
 * table. The order is the enum's; it is not on the wire. */
#define SCPS_METHOD_MAP(XX)                                                                     \
  XX(GET_CONFIG, SCPS, GetConfig, get_config_request, get_config_response)                      \
  XX(LOOKUP, SCPS, Lookup, lookup_request, lookup_response)                                     \
  XX(APPLY_GRADIENTS, SCPS, ApplyGradients, apply_gradients_request, apply_gradients_response) \
  XX(STATS, SCPS, Stats, stats_request, stats_response)                                         \
  XX(HEALTH, SCPS, Health, health_request, health_response)                                     \
  XX(CHECKPOINT, SCPS, Checkpoint, checkpoint_request, checkpoint_response)                     \
  XX(READ_ROWS, SCPS, ReadRows, read_rows_request, read_rows_response)                          \
  XX(LIST_CHECKPOINTS, SCPS, ListCheckpoints, list_checkpoints_request, list_checkpoints_response) \
  XX(RESTORE, SCPS, Restore, restore_request, restore_response)                                 \
  XX(TOPK, SCPS, TopK, top_krequest, top_kresponse)                                             \
  XX(GRPC_HEALTH_CHECK, GRPC_HEALTH, Check, health_check_request, health_check_response)

typedef enum scps_method {
#define XX(e, svc, name, req, resp) SCPS_M_##e,
  SCPS_METHOD_MAP(XX)
#undef XX
  SCPS_M_COUNT,
  SCPS_M_UNKNOWN = SCPS_M_COUNT /* a path no entry names */
} scps_method;

/* Each service's full name, the prefix of its methods' paths. */
#define SCPS_METHOD_SERVICE_SCPS "scps.v1.EmbeddingService"
#define SCPS_METHOD_SERVICE_GRPC_HEALTH "grpc.health.v1.Health"
#define SCPS_METHOD_SERVICE SCPS_METHOD_SERVICE_SCPS

/* "GetConfig", ..., "Check"; "unknown" for SCPS_M_UNKNOWN and anything else. */
const char *scps__method_name(int m);

/* "/scps.v1.EmbeddingService/GetConfig", ..., "/grpc.health.v1.Health/Check";
 * NULL outside the table. */
const char *scps__method_path(int m);

/* "scps.v1.EmbeddingService" or "grpc.health.v1.Health"; NULL outside the
 * table. */
const char *scps__method_service(int m);

/* The method called `name` ("Lookup", "Check"), or SCPS_M_UNKNOWN. */
int scps__method_from_name(const char *name);

/* The method whose full path is `path` ("/scps.v1.EmbeddingService/Lookup"),
 * or SCPS_M_UNKNOWN. */
int scps__method_from_path(const char *path);

/* The descriptors of m's request and response messages; NULL outside the
 * table. */
const ProtobufCMessageDescriptor *scps__method_request(int m);
const ProtobufCMessageDescriptor *scps__method_response(int m);

#endif
