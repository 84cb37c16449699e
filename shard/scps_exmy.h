/* scps_exmy: the eXmY number formats (1 sign, X exponent, Y mantissa bits,
 * 2 to 16 bits in all) and their packed codec to and from float32. */
#ifndef SCPS_EXMY_H
#define SCPS_EXMY_H

#include <stddef.h>
#include <stdint.h>

#include "scps_error.h"
#include "scps_version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* eXmY after Agrawal, Hedlund, Hechtman (arXiv 2405.13938), with the bit
 * rules the paper leaves open fixed as follows (the suggested spec of
 * shared/reference/exmy-and-knn.md section 1.3, except where noted).
 *
 * Code. B = 1 + X + Y bits, 2 <= B <= 16, 0 <= X <= 8: sign in bit B-1,
 * then the exponent field e (X bits), then the mantissa m (Y bits).
 * Sign-magnitude: the magnitude (the low B-1 bits) orders the values.
 *   X >= 1, e >= 1: (-1)^s 2^(e-b) (1 + m/2^Y)
 *   X >= 1, e == 0: (-1)^s 2^(1-b) m/2^Y        (subnormal; m == 0 is zero)
 *   X == 0:         (-1)^s m 2^-b               (a sign-magnitude integer
 *                                                scaled by a power of two)
 * Every code is finite: no Inf or NaN codes. The largest magnitude is
 * (2 - 2^-Y) 2^(2^X-1-b), or (2^Y - 1) 2^-b for X == 0.
 *
 * Bias b. Default 2^(X-1) - 1; 0 for X == 0 (plain integers); 128 rather
 * than 127 for X == 8, because without Inf codes e = 255 is a finite
 * binade, and with b = 127 it would be 2^128, past float32. Any b is
 * accepted for which every value of the format is a float32 exactly: the
 * largest below 2^128 and the smallest nonzero at least 2^-149.
 *
 * Rounding. Encoding rounds to the nearest value, ties to the even code
 * (low bit 0: the even mantissa, or for Y == 0 the even exponent field).
 * Magnitudes above the largest value saturate to it, with their sign; Inf
 * saturates too; NaN is an error (SCPS_EINVAL naming its index). Negative
 * zero, and a negative value that rounds to zero, keep the sign: they take
 * the code 1 << (B-1), which decodes to -0.0f.
 *
 * Stochastic rounding rounds a value between neighbouring codes lo < hi up
 * with probability (|x| - lo) / (hi - lo), so its expectation is x (before
 * saturation). The draw is a pure function of (seed, position): the
 * splitmix64 output for state seed at step position + 1, i.e.
 * mix64(seed + (position + 1) * 0x9e3779b97f4a7c15), compared against
 * the bits that rounding drops. position is the element's index in the
 * whole tensor, so encoding any sub-range gives the whole encoding's codes.
 *
 * Scale. Every call takes a shared exponent scale (the per-row scale of
 * the exponent-statistics technique): the values are x / 2^scale encoded in
 * the format, i.e. the format with bias b - scale, rounded once from x.
 * Decoding gives the format's value times 2^scale, rounded once to float32
 * (exact whenever the codes came from encoding float32 values). scale lies
 * in [-128, min(127, 127 - t)], t = floor(log2(largest magnitude)), so
 * that it fits an int8 and no code decodes past float32's range. scps_exmy_row_scale
 * picks it for a row; scale 0 is the plain format.
 *
 * Packing. Values go in blocks of 8; a block takes exactly B bytes and is
 * decodable alone, so block k starts at byte k*B and any run of whole
 * blocks (a row or shard of a multiple of 8 values) is an independent
 * encoding. Inside a block B is split into its binary digits, widest first
 * (the "power-of-two decomposition"): B = 16, or a sum of distinct widths
 * from 8, 4, 2, 1. The widest width holds the code's top bits, the next
 * the bits below, and so on; each width w is one plane of w bytes in the
 * block, planes in order of decreasing width. In the plane of width w,
 * element i's chunk is at byte (i*w)/8 of the plane, bit (i*w) % 8 (w = 16:
 * a little-endian uint16 per element), so no chunk crosses a byte. E.g.
 * B = 7: bytes 0-3 hold bits 6..3 (nibbles, element 2j low, 2j+1 high),
 * bytes 4-5 bits 2..1 (crumbs), byte 6 bit 0. Where reference section 1.3
 * lays the planes over a whole row, the planes here are per block (its
 * "alternative"), which gives the block addressability asked for. A last
 * block of fewer than 8 values is padded with the code 0 (+0).
 * B = 8 and B = 16 are therefore plain byte and uint16 arrays of codes. */

/* X and Y as parsed; bias as set by scps_exmy_format_init; bits = 1 + X + Y.
 * Fill it through scps_exmy_format_init or scps_exmy_parse, which check it. */
typedef struct scps_exmy_format {
  int32_t x, y;
  int32_t bias;
  int32_t bits;
} scps_exmy_format;

/* Passed as bias to scps_exmy_format_init for the default. */
#define SCPS_EXMY_DEFAULT_BIAS INT32_MIN

/* How to round; NULL means to nearest, ties to even. */
typedef struct scps_exmy_rounding {
  int stochastic;    /* 0: to nearest, ties to even; 1: stochastic */
  uint64_t seed;     /* stochastic only */
  uint64_t position; /* stochastic only: src[0]'s index in the whole tensor */
} scps_exmy_rounding;

/* Fills *f with 1 + x + y bits; bias SCPS_EXMY_DEFAULT_BIAS for the
 * default. SCPS_EINVAL naming x, y or bias when out of range. */
SCPS_EXTERN int scps_exmy_format_init(scps_exmy_format *f, int x, int y, int bias, scps_error *err);

/* "eXmY" ("e4m3", "e3m0", "e0m7"), optionally followed by "b" and a signed
 * bias ("e3m0b-2"). SCPS_EINVAL naming the text when it is not one. */
SCPS_EXTERN int scps_exmy_parse(const char *name, scps_exmy_format *f, scps_error *err);

/* Bytes n values take: ceil(n/8) * bits. */
SCPS_EXTERN size_t scps_exmy_packed_bytes(const scps_exmy_format *f, size_t n);

/* Encodes src[0..n) to scps_exmy_packed_bytes(f, n) bytes at dst. On
 * SCPS_EINVAL (NaN input, bad format or scale) dst is unspecified. */
SCPS_EXTERN int scps_exmy_encode(const scps_exmy_format *f, int scale, const float *src, size_t n,
                                 uint8_t *dst, const scps_exmy_rounding *r, scps_error *err);

/* Decodes n values from src (scps_exmy_packed_bytes(f, n) bytes). */
SCPS_EXTERN int scps_exmy_decode(const scps_exmy_format *f, int scale, const uint8_t *src, size_t n,
                                 float *dst, scps_error *err);

/* The row's scale: the smallest s with max|row| <= largest * 2^s, so that
 * no value of the row saturates, clamped to the range above (a row whose
 * values are all below 2^-128 times the format's range flushes more; one
 * near FLT_MAX may saturate). 0 for a row of zeros. SCPS_EINVAL on NaN. */
SCPS_EXTERN int scps_exmy_row_scale(const scps_exmy_format *f, const float *row, size_t n, int *scale,
                                    scps_error *err);

/* rows rows of dim values: row i's codes at dst + i * scps_exmy_packed_bytes
 * (f, dim), its scale (scps_exmy_row_scale) at scales[i], beside them.
 * Stochastic positions run over the whole matrix: row i, column j is
 * r->position + i * dim + j. */
SCPS_EXTERN int scps_exmy_encode_rows(const scps_exmy_format *f, const float *src, size_t rows, size_t dim,
                                      uint8_t *dst, int8_t *scales, const scps_exmy_rounding *r,
                                      scps_error *err);

/* The inverse; SCPS_EINVAL naming the row when a scale is out of range. */
SCPS_EXTERN int scps_exmy_decode_rows(const scps_exmy_format *f, const uint8_t *src, const int8_t *scales,
                                      size_t rows, size_t dim, float *dst, scps_error *err);

/* Rows laid out one after another, each its codes (scps_exmy_packed_bytes
 * (f, dim)) and then, with row_scale, its scale as one int8 byte: the
 * layout of eXmY values on scps's wire (scps.proto ExmyFormat). Without
 * row_scale every scale is 0. Bytes per row: */
SCPS_EXTERN size_t scps_exmy_row_bytes(const scps_exmy_format *f, size_t dim, int row_scale);

/* rows x dim values to rows x scps_exmy_row_bytes bytes at dst; with
 * row_scale each row's scale is scps_exmy_row_scale's. Stochastic positions
 * as for scps_exmy_encode_rows. SCPS_EINVAL naming row and column of a NaN. */
SCPS_EXTERN int scps_exmy_encode_interleaved(const scps_exmy_format *f, int row_scale, const float *src,
                                             size_t rows, size_t dim, uint8_t *dst, const scps_exmy_rounding *r,
                                             scps_error *err);

/* The inverse, into rows x dim floats at dst (add: added to them).
 * SCPS_ERANGE naming the row whose scale is out of range (nothing after it
 * is written). */
SCPS_EXTERN int scps_exmy_decode_interleaved(const scps_exmy_format *f, int row_scale, const uint8_t *src,
                                             size_t rows, size_t dim, float *dst, int add, scps_error *err);

#ifdef __cplusplus
}
#endif

#endif
