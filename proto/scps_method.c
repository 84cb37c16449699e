#include "scps_method.h"

#include <string.h>

#include "scps.pb-c.h"

typedef struct method_row {
  const char *name, *path;
  const ProtobufCMessageDescriptor *request, *response;
} method_row;

static const method_row methods[SCPS_M_COUNT] = {
#define XX(e, name, req, resp)                                                                          \
  [SCPS_M_##e] = {#name, "/" SCPS_METHOD_SERVICE "/" #name, &scps__v1__##req##__descriptor, \
                  &scps__v1__##resp##__descriptor},
    SCPS_METHOD_MAP(XX)
#undef XX
};

static const method_row *row_of(int m) { return m >= 0 && m < SCPS_M_COUNT ? &methods[m] : NULL; }

const char *scps__method_name(int m) { return row_of(m) ? row_of(m)->name : "unknown"; }

const char *scps__method_path(int m) { return row_of(m) ? row_of(m)->path : NULL; }

int scps__method_from_name(const char *name) {
  for (int m = 0; name && m < SCPS_M_COUNT; m++)
    if (!strcmp(methods[m].name, name)) return m;
  return SCPS_M_UNKNOWN;
}

const ProtobufCMessageDescriptor *scps__method_request(int m) { return row_of(m) ? row_of(m)->request : NULL; }

const ProtobufCMessageDescriptor *scps__method_response(int m) { return row_of(m) ? row_of(m)->response : NULL; }
