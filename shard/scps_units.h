/* scps_units: numbers as command lines and configuration write them: byte
 * sizes (65536, 512M, 1.5G) and bounded integers. */
#ifndef SCPS_UNITS_H
#define SCPS_UNITS_H

#include <stdint.h>

#include "scps_error.h"

/* Decimal digits (a fraction allowed) with an optional K, M or G suffix
 * (powers of 1024), at least 1 byte and below 2^63: 0 into *out, or -1
 * for anything else (hex, exponents, signs, spaces, 0.5). */
int scps__parse_bytes(const char *s, int64_t *out);

/* The whole of s as a decimal integer in [lo, hi] into *out: 0, or
 * SCPS_EINVAL with "FLAG 'S': expected an integer in [LO, HI]" (flag names
 * the option or field) for anything else (spaces, '+', trailing text,
 * overflow). */
int scps__parse_long(const char *flag, const char *s, long lo, long hi, long *out, scps_error *err);

#endif
