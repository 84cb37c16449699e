/* scps_optimizer: the fused per-row optimizer updates (SGD, Adagrad,
 * Adagrad-momentum, Adam, FTRL, LaProp, F2A) applied to one touched row. */
#ifndef SCPS_OPTIMIZER_H
#define SCPS_OPTIMIZER_H

#include <stdbool.h>
#include <stdint.h>

#include "scps_spec.h"

/* Per-step values of an update. learning_rate < 0 (or NaN) means the spec's
 * rate; step is the global training step (read by Adam, LaProp and F2A). */
typedef struct scps_step {
  int64_t step;
  double learning_rate;
} scps_step;

/* Everything a row update needs, computed once per step on the host side
 * (Adam's alpha_t and epsilon-hat, LaProp's decay, F2A's step), in float. */
typedef struct scps_opt_step {
  scps_optimizer_type type;
  float lr;
  float p[8]; /* type-specific constants, see scps_optimizer.c */
  int32_t flags;
} scps_opt_step;

/* Fills st from the spec and the step. */
void scps__optimizer_prepare(const scps_optimizer_spec *o, const scps_step *s, scps_opt_step *st);

/* Applies one update to a row of dim floats: w is the row, slot0/slot1 its
 * slots (NULL when the optimizer has fewer), g the aggregated gradient.
 * Plain loops over dim so the compiler vectorises them. */
void scps__optimizer_apply(const scps_opt_step *st, int32_t dim, float *restrict w,
                          float *restrict slot0, float *restrict slot1, const float *restrict g);

/* What is known of one array of values (a shard's rows, or one slot):
 * every |v| <= mag (+Inf or NaN when one is not finite), and every
 * v >= lo when lo >= 0 (lo < 0: nothing known below). */
typedef struct scps_value_bounds {
  double mag, lo;
} scps_value_bounds;

/* Whether one update by st, of a row and slots within b (b[0] the rows,
 * b[1 + k] slot k) with every |g| <= g_max, provably leaves every value it
 * writes finite, every intermediate of the kernel included, with room for
 * float32 rounding; the stack's clipping only narrows the rows. False
 * means only "not proven": the caller then computes the update without
 * writing to see. The bounds are loose (2^100) so that ordinary training
 * is always proven. */
bool scps__optimizer_update_bounded(const scps_opt_step *st, const scps_value_bounds *b, double g_max);

/* A lower bound on slot `slot`'s values after one update by st of values
 * that were all >= lo (lo >= 0), whatever the gradient; -1 when none is
 * kept (a signed slot, or lo < 0). Accumulators and steps only grow,
 * velocities stay >= 0, a decaying accumulator keeps decay x lo. */
double scps__optimizer_slot_floor(const scps_opt_step *st, int slot, double lo);

#endif
