/* scps_ref_exmy: eXmY values and rounding computed the obvious way in double
 * (ldexp, a table of every magnitude, a binary search), for test_exmy. */
#ifndef SCPS_REF_EXMY_H
#define SCPS_REF_EXMY_H

#include <stddef.h>
#include <stdint.h>

/* One format (1 sign, x exponent, y mantissa bits, bias) with a shared
 * exponent scale: code c stands for value(c) 2^scale, where for X >= 1
 * value is 2^(e-bias) (1 + m/2^y), or 2^(1-bias) m/2^y when e = 0, and
 * for X = 0 it is m 2^-bias; the sign bit on top. mag[c] is the magnitude
 * of code c, for every c below 2^(x+y). */
typedef struct scps_ref_exmy {
  int x, y, bias, scale;
  uint32_t n; /* 2^(x+y) */
  double *mag;
} scps_ref_exmy;

/* 0, or -1 when out of memory. */
int scps_ref_exmy_init(scps_ref_exmy *r, int x, int y, int bias, int scale);
void scps_ref_exmy_free(scps_ref_exmy *r);

/* The exact value of a code (sign bit included). */
double scps_ref_exmy_value(const scps_ref_exmy *r, uint32_t code);

/* The magnitude codes lo <= hi whose values enclose |v| most tightly
 * (lo == hi when |v| is a value, or at or past the largest). v finite. */
void scps_ref_exmy_bracket(const scps_ref_exmy *r, double v, uint32_t *lo, uint32_t *hi);

/* The code nearest v: ties to the even code, past the largest the largest,
 * the sign bit set when v's sign is (-0 included). */
uint32_t scps_ref_exmy_round(const scps_ref_exmy *r, double v);

#endif
