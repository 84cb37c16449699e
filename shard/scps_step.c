/* The step rules every server applies to ApplyGradients and Checkpoint. */
#include "scps_step.h"

int scps__step_check(int64_t step, int64_t held, int64_t max_advance, scps_error *err) {
  if (step < 0 || step >= SCPS_STEP_LIMIT)
    return scps_error_set(err, SCPS_EINVAL, "step %lld: must be in [0, 2^53 = %lld)", (long long)step,
                          (long long)SCPS_STEP_LIMIT);
  /* held + max_advance cannot overflow: both are below 2^53 here. */
  int64_t most = (held < 0 ? 0 : held) + max_advance;
  if (step > most) {
    if (held < 0)
      return scps_error_set(err, SCPS_ESTATE,
                            "step %lld: this process holds no step yet, and a first step may be at most "
                            "--max-step-advance %lld",
                            (long long)step, (long long)max_advance);
    return scps_error_set(err, SCPS_ESTATE,
                          "step %lld: more than --max-step-advance %lld above the step this process holds, %lld "
                          "(at most %lld)",
                          (long long)step, (long long)max_advance, (long long)held, (long long)most);
  }
  return 0;
}
