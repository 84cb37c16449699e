/* scps_step: what a training step is, for servers and clients alike: the
 * largest step a cluster takes and how far one push may move the step held. */
#ifndef SCPS_STEP_H
#define SCPS_STEP_H

#include <stddef.h>
#include <stdint.h>

#include "scps_error.h"

/* Steps are below 2^53: exact as a double (JSON, Python), and far enough
 * below INT64_MAX that step + 1 and step + steps never overflow. */
#define SCPS_STEP_LIMIT ((int64_t)1 << 53)

/* A server's --max-step-advance default: a push may name a step at most
 * this far above the step the process holds. */
#define SCPS_STEP_ADVANCE_DEFAULT 1000000

/* The step held by a process is the highest step it has applied (or the
 * step of the checkpoint it restored): with one trainer, the last step
 * pushed; with several, each pushing its own counter, the highest any of
 * them pushed (the others may push steps below it, which are applied as
 * they come). A step may not poison it: returns 0 when `step` is in
 * [0, SCPS_STEP_LIMIT) and at most max_advance above held (held < 0: the
 * process holds no step, and then step <= max_advance); otherwise
 * SCPS_EINVAL (outside [0, SCPS_STEP_LIMIT)) or SCPS_ESTATE (too far
 * ahead), with err naming the step, the step held and the advance. */
int scps__step_check(int64_t step, int64_t held, int64_t max_advance, scps_error *err);

#endif
