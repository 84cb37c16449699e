/* scps_method, the method table: every method's name, path and message
 * descriptors agree with the service protoc-c generated from scps.proto,
 * and the table names each of the service's methods once. */
#include <string.h>

#include "scps.pb-c.h"
#include "scps_method.h"
#include "scps_test.h"

int main(void) {
  const ProtobufCServiceDescriptor *svc = &scps__v1__embedding_service__descriptor;
  CHECK(!strcmp(svc->name, SCPS_METHOD_SERVICE));
  CHECKF(svc->n_methods == SCPS_M_COUNT, "%u methods in scps.proto, %d in the table", svc->n_methods,
         (int)SCPS_M_COUNT);
  for (int m = 0; m < SCPS_M_COUNT; m++) {
    const char *name = scps__method_name(m), *path = scps__method_path(m);
    char want[128];
    snprintf(want, sizeof want, "/scps.v1.EmbeddingService/%s", name);
    CHECKF(path && !strcmp(path, want), "method %d: path %s, expected %s", m, path ? path : "NULL", want);
    CHECKF(scps__method_from_name(name) == m, "method %d (%s)", m, name);
    const ProtobufCMethodDescriptor *d = NULL;
    for (unsigned i = 0; i < svc->n_methods; i++)
      if (!strcmp(svc->methods[i].name, name)) d = &svc->methods[i];
    CHECKF(d != NULL, "method %s is not in scps.proto's service", name);
    if (!d) continue;
    CHECKF(scps__method_request(m) == d->input && scps__method_response(m) == d->output,
           "method %s: the table's messages are %s and %s, the service's %s and %s", name,
           scps__method_request(m)->name, scps__method_response(m)->name, d->input->name, d->output->name);
  }
  /* Every method of the service is in the table. */
  for (unsigned i = 0; i < svc->n_methods; i++)
    CHECKF(scps__method_from_name(svc->methods[i].name) != SCPS_M_UNKNOWN, "%s", svc->methods[i].name);
  /* Outside the table. */
  const int outside[] = {-1, SCPS_M_UNKNOWN, SCPS_M_COUNT + 1};
  for (size_t i = 0; i < sizeof outside / sizeof *outside; i++) {
    int m = outside[i];
    CHECK(!strcmp(scps__method_name(m), "unknown") && !scps__method_path(m) && !scps__method_request(m) &&
          !scps__method_response(m));
  }
  CHECK(scps__method_from_name(NULL) == SCPS_M_UNKNOWN && scps__method_from_name("lookup") == SCPS_M_UNKNOWN &&
        scps__method_from_name("") == SCPS_M_UNKNOWN &&
        scps__method_from_name("/scps.v1.EmbeddingService/Lookup") == SCPS_M_UNKNOWN);
  return scps_test_finish("test_method");
}
