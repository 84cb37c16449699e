/* scps_status: each SCPS_E* code answers with the status SCPS_ERRNO_MAP
 * lists; each status reports the first code naming it, SCPS_EIO where none
 * does; the status names are gRPC's. */
#include <stdbool.h>
#include <string.h>

#include "scps_error.h"
#include "scps_status.h"
#include "scps_test.h"

#define STATUS_LIST(S)                                                                                         \
  S(OK) S(CANCELLED) S(UNKNOWN) S(INVALID_ARGUMENT) S(DEADLINE_EXCEEDED) S(NOT_FOUND) S(ALREADY_EXISTS)         \
  S(PERMISSION_DENIED) S(RESOURCE_EXHAUSTED) S(FAILED_PRECONDITION) S(ABORTED) S(OUT_OF_RANGE) S(UNIMPLEMENTED) \
  S(INTERNAL) S(UNAVAILABLE) S(DATA_LOSS) S(UNAUTHENTICATED)

typedef struct listed {
  int code;
  grpc_status_code status;
  const char *name;
} listed;

static const listed codes[] = {
#define XX(name, value, status, text) {SCPS_##name, GRPC_STATUS_##status, "SCPS_" #name},
    SCPS_ERRNO_MAP(XX)
#undef XX
};
static const size_t n_codes = sizeof codes / sizeof *codes;

int main(void) {
  static const struct {
    grpc_status_code s;
    const char *name;
  } statuses[] = {
#define S(x) {GRPC_STATUS_##x, #x},
      STATUS_LIST(S)
#undef S
  };
  const size_t n_statuses = sizeof statuses / sizeof *statuses;
  for (size_t i = 0; i < n_statuses; i++)
    CHECKF(!strcmp(scps__status_name(statuses[i].s), statuses[i].name), "%d: %s", (int)statuses[i].s,
           scps__status_name(statuses[i].s));
  CHECK(!strcmp(scps__status_name((grpc_status_code)n_statuses), "UNKNOWN_STATUS"));
  CHECK(!strcmp(scps__status_name((grpc_status_code)-1), "UNKNOWN_STATUS"));

  /* Code to status: the listed one; 0 is OK; anything unlisted INTERNAL. */
  CHECK(scps__status_from_error(0) == GRPC_STATUS_OK);
  for (size_t i = 0; i < n_codes; i++)
    CHECKF(scps__status_from_error(codes[i].code) == codes[i].status, "%s: %s, listed %s", codes[i].name,
           scps__status_name(scps__status_from_error(codes[i].code)), scps__status_name(codes[i].status));
  CHECK(scps__status_from_error(1) == GRPC_STATUS_INTERNAL && scps__status_from_error(-1000) == GRPC_STATUS_INTERNAL);

  /* Status to code: the first listed code naming it, else SCPS_EIO. */
  CHECK(scps__status_to_error(GRPC_STATUS_OK) == 0);
  for (size_t i = 1; i < n_statuses; i++) {
    grpc_status_code s = statuses[i].s;
    int want = SCPS_EIO;
    for (size_t k = n_codes; k-- > 0;)
      if (codes[k].status == s) want = codes[k].code;
    CHECKF(scps__status_to_error(s) == want, "%s: %s, expected %s", statuses[i].name,
           scps_err_name(scps__status_to_error(s)), scps_err_name(want));
  }
  CHECK(scps__status_to_error((grpc_status_code)n_statuses) == SCPS_EIO);

  /* A round trip keeps every code that is the first to name its status. */
  for (size_t i = 0; i < n_codes; i++) {
    bool first = true;
    for (size_t k = 0; k < i; k++) first = first && codes[k].status != codes[i].status;
    if (first) CHECKF(scps__status_to_error(scps__status_from_error(codes[i].code)) == codes[i].code, "%s", codes[i].name);
  }
  return scps_test_finish("test_status");
}
