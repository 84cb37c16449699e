#include "scps_method.h"

#include <string.h>

#include "health.pb-c.h"
#include "scps.pb-c.h"

/* Each service's protobuf-c message prefix. */
#define DESC_SCPS(msg) &scps__v1__##msg##__descriptor
#define DESC_GRPC_HEALTH(msg) &grpc__health__v1__##msg##__descriptor

typedef struct method_row {
  const char *name, *path, *service;
  const ProtobufCMessageDescriptor *request, *response;
} method_row;

static const method_row methods[SCPS_M_COUNT] = {
#define XX(e, svc, name, req, resp)                                                                          \
  [SCPS_M_##e] = {#name, "/" SCPS_METHOD_SERVICE_##svc "/" #name, SCPS_METHOD_SERVICE_##svc, DESC_##svc(req), \
                  DESC_##svc(resp)},
    SCPS_METHOD_MAP(XX)
#undef XX
};

static const method_row *row_of(int m) { return m >= 0 && m < SCPS_M_COUNT ? &methods[m] : NULL; }

const char *scps__method_name(int m) { return row_of(m) ? row_of(m)->name : "unknown"; }

const char *scps__method_path(int m) { return row_of(m) ? row_of(m)->path : NULL; }

const char *scps__method_service(int m) { return row_of(m) ? row_of(m)->service : NULL; }

int scps__method_from_name(const char *name) {
  for (int m = 0; name && m < SCPS_M_COUNT; m++)
    if (!strcmp(methods[m].name, name)) return m;
  return SCPS_M_UNKNOWN;
}

int scps__method_from_path(const char *path) {
  for (int m = 0; path && m < SCPS_M_COUNT; m++)
    if (!strcmp(methods[m].path, path)) return m;
  return SCPS_M_UNKNOWN;
}

const ProtobufCMessageDescriptor *scps__method_request(int m) { return row_of(m) ? row_of(m)->request : NULL; }

const ProtobufCMessageDescriptor *scps__method_response(int m) { return row_of(m) ? row_of(m)->response : NULL; }
