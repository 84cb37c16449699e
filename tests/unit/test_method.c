/* scps_method, the method table: every method's name, path and message
 * descriptors agree with the services protoc-c generated from scps.proto
 * and health.proto, and the table names each of their served methods once. */
#include <stdbool.h>
#include <string.h>

#include "health.pb-c.h"
#include "scps.pb-c.h"
#include "scps_method.h"
#include "scps_test.h"

/* The services the table serves; health.proto's Watch is not served. */
static const ProtobufCServiceDescriptor *const services[] = {&scps__v1__embedding_service__descriptor,
                                                             &grpc__health__v1__health__descriptor};

static bool served(const ProtobufCServiceDescriptor *svc, const char *name) {
  return svc != &grpc__health__v1__health__descriptor || strcmp(name, "Watch");
}

int main(void) {
  CHECK(!strcmp(services[0]->name, SCPS_METHOD_SERVICE) && !strcmp(services[0]->name, SCPS_METHOD_SERVICE_SCPS));
  CHECK(!strcmp(services[1]->name, SCPS_METHOD_SERVICE_GRPC_HEALTH));
  unsigned n_served = 0;
  for (size_t v = 0; v < sizeof services / sizeof *services; v++)
    for (unsigned i = 0; i < services[v]->n_methods; i++) n_served += served(services[v], services[v]->methods[i].name);
  CHECKF(n_served == SCPS_M_COUNT, "%u methods served by scps.proto and health.proto, %d in the table", n_served,
         (int)SCPS_M_COUNT);
  for (int m = 0; m < SCPS_M_COUNT; m++) {
    const char *name = scps__method_name(m), *path = scps__method_path(m), *service = scps__method_service(m);
    const ProtobufCServiceDescriptor *svc = NULL;
    for (size_t v = 0; v < sizeof services / sizeof *services; v++)
      if (service && !strcmp(services[v]->name, service)) svc = services[v];
    CHECKF(svc != NULL, "method %d (%s): service %s is neither proto's", m, name, service ? service : "NULL");
    if (!svc) continue;
    char want[128];
    snprintf(want, sizeof want, "/%s/%s", svc->name, name);
    CHECKF(path && !strcmp(path, want), "method %d: path %s, expected %s", m, path ? path : "NULL", want);
    CHECKF(scps__method_from_name(name) == m, "method %d (%s)", m, name);
    CHECKF(scps__method_from_path(want) == m, "method %d (%s)", m, want);
    const ProtobufCMethodDescriptor *d = NULL;
    for (unsigned i = 0; i < svc->n_methods; i++)
      if (!strcmp(svc->methods[i].name, name)) d = &svc->methods[i];
    CHECKF(d != NULL, "method %s is not in %s", name, svc->name);
    if (!d) continue;
    CHECKF(scps__method_request(m) == d->input && scps__method_response(m) == d->output,
           "method %s: the table's messages are %s and %s, the service's %s and %s", name,
           scps__method_request(m)->name, scps__method_response(m)->name, d->input->name, d->output->name);
  }
  /* Every served method of both services is in the table, under its path. */
  for (size_t v = 0; v < sizeof services / sizeof *services; v++)
    for (unsigned i = 0; i < services[v]->n_methods; i++) {
      const char *name = services[v]->methods[i].name;
      char path[128];
      snprintf(path, sizeof path, "/%s/%s", services[v]->name, name);
      CHECKF((scps__method_from_path(path) != SCPS_M_UNKNOWN) == served(services[v], name), "%s", path);
    }
  /* Outside the table. */
  const int outside[] = {-1, SCPS_M_UNKNOWN, SCPS_M_COUNT + 1};
  for (size_t i = 0; i < sizeof outside / sizeof *outside; i++) {
    int m = outside[i];
    CHECK(!strcmp(scps__method_name(m), "unknown") && !scps__method_path(m) && !scps__method_service(m) &&
          !scps__method_request(m) && !scps__method_response(m));
  }
  CHECK(scps__method_from_name(NULL) == SCPS_M_UNKNOWN && scps__method_from_name("lookup") == SCPS_M_UNKNOWN &&
        scps__method_from_name("") == SCPS_M_UNKNOWN &&
        scps__method_from_name("/scps.v1.EmbeddingService/Lookup") == SCPS_M_UNKNOWN);
  CHECK(scps__method_from_path(NULL) == SCPS_M_UNKNOWN && scps__method_from_path("Lookup") == SCPS_M_UNKNOWN &&
        scps__method_from_path("/grpc.health.v1.Health/Lookup") == SCPS_M_UNKNOWN &&
        scps__method_from_path("/scps.v1.EmbeddingService/Check") == SCPS_M_UNKNOWN);
  return scps_test_finish("test_method");
}
