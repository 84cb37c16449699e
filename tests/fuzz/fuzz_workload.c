/* libFuzzer target for the configuration decoder scps-server --config and
 * the tools read (shard/scps_workload over shard/scps_json). */
#include <stdint.h>

#include "scps_workload.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  scps_workload *w = NULL;
  scps_error err;
  if (scps__workload_parse((const char *)data, size, &w, &err) == 0) scps__workload_destroy(w);
  return 0;
}
