/* scps_units: byte sizes as command lines and configuration write them
 * (65536, 512M, 1.5G). */
#ifndef SCPS_UNITS_H
#define SCPS_UNITS_H

#include <stdint.h>

/* Decimal digits (a fraction allowed) with an optional K, M or G suffix
 * (powers of 1024), at least 1 byte and below 2^63: 0 into *out, or -1
 * for anything else (hex, exponents, signs, spaces, 0.5). */
int scps_parse_bytes(const char *s, int64_t *out);

#endif
