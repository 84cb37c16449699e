#include "scps_exmy.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Codes are made and used CHUNK at a time in a small buffer, so that the
 * arithmetic and the (bit-plane) packing are separate plain loops. A
 * multiple of 8, so that chunks are whole blocks. */
#define CHUNK 512

#define ALWAYS_INLINE inline __attribute__((always_inline))

/* The bias as the encoder and decoder use it: the subnormal exponent of
 * X >= 1, where e0mY (m 2^-b = 2^(1-b') m/2^Y) is the subnormal binade of
 * a format with b' = b + 1 - Y and no normal ones. */
static int32_t sub_bias(const scps_exmy_format *f) {
  return f->x ? f->bias : f->bias + 1 - f->y;
}

/* floor(log2(largest magnitude)). */
static int32_t top_exponent(const scps_exmy_format *f) {
  return f->x ? (1 << f->x) - 1 - f->bias : f->y - 1 - f->bias;
}

static double largest(const scps_exmy_format *f) {
  return f->x ? ldexp(2.0 - ldexp(1.0, -f->y), top_exponent(f)) : ldexp((double)((1 << f->y) - 1), -f->bias);
}

/* Biases for which every value is a float32: largest below 2^128, smallest
 * nonzero (2^(1-b-Y), or 2^-b for X == 0) at least 2^-149. */
static void bias_range(int x, int y, int32_t *lo, int32_t *hi) {
  *lo = x ? (1 << x) - 128 : y - 128;
  *hi = x ? 150 - y : 149;
}

int scps_exmy_format_init(scps_exmy_format *f, int x, int y, int bias, scps_error *err) {
  if (!f)
    return scps_error_set(err, SCPS_EINVAL, "exmy format: NULL");
  if (x < 0 || x > 8)
    return scps_error_set(err, SCPS_EINVAL, "exmy format: x %d is not in [0, 8]", x);
  if (y < 0 || 1 + x + y < 2 || 1 + x + y > 16)
    return scps_error_set(err, SCPS_EINVAL, "exmy format: e%dm%d has %d bits, not 2 to 16", x, y, 1 + x + y);
  if (bias == SCPS_EXMY_DEFAULT_BIAS)
    bias = x == 0 ? 0 : x == 8 ? 128 : (1 << (x - 1)) - 1;
  int32_t lo, hi;
  bias_range(x, y, &lo, &hi);
  if (bias < lo || bias > hi)
    return scps_error_set(err, SCPS_EINVAL,
                          "exmy format: bias %d of e%dm%d is not in [%d, %d] (values must be float32)", bias,
                          x, y, (int)lo, (int)hi);
  f->x = x;
  f->y = y;
  f->bias = bias;
  f->bits = 1 + x + y;
  return 0;
}

/* A decimal integer of at most 4 digits at *p, advancing *p; -1 if none. */
static int small_int(const char **p) {
  int v = 0, digits = 0;
  while (**p >= '0' && **p <= '9' && digits < 5) {
    v = v * 10 + (**p - '0');
    (*p)++;
    digits++;
  }
  return digits == 0 || digits > 4 ? -1 : v;
}

int scps_exmy_parse(const char *name, scps_exmy_format *f, scps_error *err) {
  if (!name)
    return scps_error_set(err, SCPS_EINVAL, "exmy format: name NULL");
  const char *p = name;
  int x = -1, y = -1, bias = SCPS_EXMY_DEFAULT_BIAS;
  if (*p == 'e') {
    p++;
    x = small_int(&p);
  }
  if (x >= 0 && *p == 'm') {
    p++;
    y = small_int(&p);
  }
  if (y >= 0 && *p == 'b') {
    p++;
    int neg = *p == '-';
    p += neg;
    int v = small_int(&p);
    bias = v < 0 ? (y = -1) : neg ? -v : v;
  }
  if (x < 0 || y < 0 || *p)
    return scps_error_set(err, SCPS_EINVAL, "exmy format '%s': not eXmY or eXmYbN (e4m3, e3m0b-2)", name);
  return scps_exmy_format_init(f, x, y, bias, err);
}

size_t scps_exmy_packed_bytes(const scps_exmy_format *f, size_t n) {
  return (n / 8 + (n % 8 != 0)) * (size_t)f->bits;
}

static int check(const scps_exmy_format *f, int scale, scps_error *err) {
  scps_exmy_format g;
  if (!f)
    return scps_error_set(err, SCPS_EINVAL, "exmy format: NULL");
  int rc = scps_exmy_format_init(&g, f->x, f->y, f->bias, err);
  if (rc)
    return rc;
  if (f->bits != g.bits)
    return scps_error_set(err, SCPS_EINVAL, "exmy format: bits %d, not 1 + %d + %d", (int)f->bits, (int)f->x,
                          (int)f->y);
  int32_t hi = 127 - top_exponent(f);
  if (scale < -128 || scale > hi)
    return scps_error_set(err, SCPS_EINVAL, "exmy scale %d is not in [-128, %d] for e%dm%d bias %d", scale,
                          (int)hi, (int)f->x, (int)f->y, (int)f->bias);
  return 0;
}

static int nan_error(const float *src, size_t n, size_t base, scps_error *err) {
  size_t i = 0;
  while (i < n && !isnan(src[i]))
    i++;
  return scps_error_set(err, SCPS_EINVAL, "exmy encode: value %zu is NaN", base + i);
}

/* ---- packing: one block of 8 codes <-> B bytes (layout in the header) ---- */

/* One block of 8 codes to its B bytes (to_bytes), or back, plane by plane. */
static ALWAYS_INLINE void block(uint16_t *c, uint8_t *o, const int B, const int to_bytes) {
  if (!to_bytes)
    for (int i = 0; i < 8; i++)
      c[i] = 0;
  int lo = B;
  for (int w = 16; w >= 1; w >>= 1) {
    if (!(B & w))
      continue;
    lo -= w;
    const int per = w == 16 ? 1 : 8 / w;
    const uint32_t mask = (1u << w) - 1;
    if (w == 16 && to_bytes) {
      for (int i = 0; i < 8; i++) {
        o[2 * i] = (uint8_t)c[i];
        o[2 * i + 1] = (uint8_t)(c[i] >> 8);
      }
    } else if (w == 16) {
      for (int i = 0; i < 8; i++)
        c[i] = (uint16_t)(o[2 * i] | o[2 * i + 1] << 8);
    } else if (to_bytes) {
      for (int j = 0; j < w; j++) {
        uint32_t v = 0;
        for (int k = 0; k < per; k++)
          v |= ((uint32_t)(c[j * per + k] >> lo) & mask) << (k * w);
        o[j] = (uint8_t)v;
      }
    } else {
      for (int i = 0; i < 8; i++)
        c[i] |= (uint16_t)(((uint32_t)o[i / per] >> ((i % per) * w) & mask) << lo);
    }
    o += w;
  }
}

/* Blocks of codes to bytes (to_bytes) or back; bytes is only read when
 * !to_bytes. */
static ALWAYS_INLINE void blocks_n(uint16_t *c, size_t blocks, uint8_t *bytes, const int B, const int to_bytes) {
  for (size_t b = 0; b < blocks; b++)
    block(c + 8 * b, bytes + b * (size_t)B, B, to_bytes);
}

/* One copy of each loop per width, so that every plane's shifts are
 * constants. */
static void convert(uint16_t *c, size_t blocks, uint8_t *bytes, int B, int to_bytes) {
  switch (B) {
#define XX(k)                              \
  case k:                                  \
    if (to_bytes)                          \
      blocks_n(c, blocks, bytes, k, 1);    \
    else                                   \
      blocks_n(c, blocks, bytes, k, 0);    \
    break;
    XX(2) XX(3) XX(4) XX(5) XX(6) XX(7) XX(8) XX(9) XX(10) XX(11) XX(12) XX(13) XX(14) XX(15) XX(16)
#undef XX
  }
}

/* ---- values <-> codes ---- */

/* What encoding needs of a format and scale. A float32 with exponent field
 * E (1 for subnormals) and significand sig (implicit bit included) is
 * sig 2^(E-150) (subnormals normalised first); in the format it lands in
 * exponent field et = E + ebias,
 * i.e. the magnitude code is (et-1) 2^Y + sig / 2^(23-Y) for et >= 1, and
 * sig / 2^(24-Y-et) below, both rounded: one right shift of one integer. */
typedef struct enc_params {
  int32_t y;
  int32_t ebias;    /* sub_bias - scale - 127 */
  int32_t ecap;     /* 2^X + 1: any et above saturates the same */
  uint32_t maxcode; /* 2^(B-1) - 1 */
  uint32_t sbit;    /* B - 1 */
} enc_params;

static enc_params enc_params_of(const scps_exmy_format *f, int scale) {
  enc_params p = {.y = f->y,
                  .ebias = sub_bias(f) - scale - 127,
                  .ecap = (1 << f->x) + 1,
                  .maxcode = (1u << (f->bits - 1)) - 1,
                  .sbit = (uint32_t)(f->bits - 1)};
  return p;
}

/* The integer whose low k bits rounding drops (t < 2^31 + 2^24), and k;
 * k is at least 8 (Y <= 15). */
static ALWAYS_INLINE uint32_t to_fixed(uint32_t a, const enc_params *p, int32_t *k) {
  int32_t e = (int32_t)(a >> 23);
  uint32_t sig = a & 0x7fffffu;
  /* A float32 subnormal sig 2^-149 is normalised through the exact
   * conversion of sig: (float)sig = sig' 2^(F-150), so E = F - 149. */
  float fs = (float)(int32_t)sig;
  uint32_t fb;
  memcpy(&fb, &fs, sizeof fb);
  e = e ? e : (int32_t)(fb >> 23) - 149;
  sig = (a >> 23 ? sig : fb & 0x7fffffu) | 0x800000u;
  int32_t et = e + p->ebias;
  et = et < p->ecap ? et : p->ecap;
  *k = et >= 1 ? 23 - p->y : 24 - p->y - et;
  uint32_t t = et >= 1 ? ((uint32_t)(et - 1) << 23) + sig : sig;
  return a ? t : 0;
}

static ALWAYS_INLINE uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
  return z ^ (z >> 31);
}

/* Codes of n values; nonzero if one was NaN. To nearest even: the shift
 * rounds half up, less one when the kept bit is even. Stochastic: the
 * dropped bits plus the draw's top k bits carry into the code with
 * probability (dropped bits) / 2^k. */
static ALWAYS_INLINE uint32_t codes(const float *restrict src, size_t n, uint16_t *restrict c,
                                    const enc_params *pp, const int sr, uint64_t seed, uint64_t position) {
  const enc_params p = *pp;
  uint32_t nan = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &src[i], sizeof u);
    uint32_t a = u & 0x7fffffffu;
    nan |= a > 0x7f800000u;
    int32_t k;
    uint32_t t = to_fixed(a, &p, &k), q;
    if (sr) {
      k = k < 63 ? k : 63;
      uint64_t z = mix64(seed + (position + i + 1) * UINT64_C(0x9e3779b97f4a7c15));
      q = (uint32_t)(((uint64_t)t + (z >> (64 - k))) >> k);
    } else {
      k = k < 31 ? k : 31; /* t < 2^25 there: rounds to 0 all the same */
      q = (t + (1u << (k - 1)) - 1 + ((t >> k) & 1)) >> k;
    }
    q = q < p.maxcode ? q : p.maxcode;
    c[i] = (uint16_t)(q | (u >> 31) << p.sbit);
  }
  return nan;
}

/* Decoding: the magnitude is sig 2^(max(e,1) - sub_bias + scale - Y), made
 * exactly in double (a power of two built from its bits) and rounded once
 * to float32. */
static void values(const uint16_t *restrict c, size_t n, float *restrict dst, const scps_exmy_format *f,
                   int scale) {
  const uint32_t y = (uint32_t)f->y, sbit = (uint32_t)(f->bits - 1);
  const uint32_t mmask = (1u << y) - 1, vmask = (1u << sbit) - 1;
  const int64_t off = 1023 - (int64_t)sub_bias(f) + scale - f->y;
  for (size_t i = 0; i < n; i++) {
    uint32_t code = c[i], mag = code & vmask, e = mag >> y;
    uint32_t sig = e ? (mag & mmask) | (1u << y) : mag;
    uint64_t pw = (uint64_t)((e ? (int64_t)e : 1) + off) << 52;
    double d;
    memcpy(&d, &pw, sizeof d);
    float v = (float)((double)sig * d);
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    bits |= (code >> sbit) << 31;
    memcpy(&dst[i], &bits, sizeof bits);
  }
}

/* ---- the calls ---- */

int scps_exmy_encode(const scps_exmy_format *f, int scale, const float *src, size_t n, uint8_t *dst,
                     const scps_exmy_rounding *r, scps_error *err) {
  int rc = check(f, scale, err);
  if (rc)
    return rc;
  if (n && (!src || !dst))
    return scps_error_set(err, SCPS_EINVAL, "exmy encode: src or dst NULL");
  const enc_params p = enc_params_of(f, scale);
  const int sr = r && r->stochastic;
  uint16_t c[CHUNK];
  for (size_t base = 0; base < n; base += CHUNK) {
    size_t len = n - base < CHUNK ? n - base : CHUNK;
    uint32_t nan = sr ? codes(src + base, len, c, &p, 1, r->seed, r->position + base)
                      : codes(src + base, len, c, &p, 0, 0, 0);
    if (nan)
      return nan_error(src + base, len, base, err);
    size_t whole = (len + 7) / 8 * 8;
    for (size_t i = len; i < whole; i++)
      c[i] = 0;
    convert(c, whole / 8, dst + base / 8 * (size_t)f->bits, f->bits, 1);
  }
  return 0;
}

int scps_exmy_decode(const scps_exmy_format *f, int scale, const uint8_t *src, size_t n, float *dst,
                     scps_error *err) {
  int rc = check(f, scale, err);
  if (rc)
    return rc;
  if (n && (!src || !dst))
    return scps_error_set(err, SCPS_EINVAL, "exmy decode: src or dst NULL");
  uint16_t c[CHUNK];
  for (size_t base = 0; base < n; base += CHUNK) {
    size_t len = n - base < CHUNK ? n - base : CHUNK;
    /* read only: convert writes bytes only when packing */
    convert(c, (len + 7) / 8, (uint8_t *)(uintptr_t)(src + base / 8 * (size_t)f->bits), f->bits, 0);
    values(c, len, dst + base, f, scale);
  }
  return 0;
}

int scps_exmy_row_scale(const scps_exmy_format *f, const float *row, size_t n, int *scale, scps_error *err) {
  int rc = check(f, 0, err);
  if (rc)
    return rc;
  if (!scale || (n && !row))
    return scps_error_set(err, SCPS_EINVAL, "exmy row scale: row or scale NULL");
  uint32_t amax = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &row[i], sizeof u);
    u &= 0x7fffffffu;
    amax = u > amax ? u : amax;
  }
  if (amax > 0x7f800000u)
    return nan_error(row, n, 0, err);
  int32_t top = top_exponent(f), hi = 127 - top;
  int s = 0;
  if (amax == 0x7f800000u) {
    s = hi;
  } else if (amax) {
    float mf;
    memcpy(&mf, &amax, sizeof mf);
    int e2;
    frexp((double)mf, &e2); /* mf = frac 2^e2, frac in [0.5, 1) */
    s = e2 - 1 - top;
    /* largest 2^(s-1) < 2^e2-1 <= max, so s - 1 never suffices */
    if ((double)mf > ldexp(largest(f), s))
      s++;
    s = s < -128 ? -128 : s > hi ? hi : s;
  }
  *scale = s;
  return 0;
}

int scps_exmy_encode_rows(const scps_exmy_format *f, const float *src, size_t rows, size_t dim, uint8_t *dst,
                          int8_t *scales, const scps_exmy_rounding *r, scps_error *err) {
  int rc = check(f, 0, err);
  if (rc)
    return rc;
  if (rows && dim && (!src || !dst || !scales))
    return scps_error_set(err, SCPS_EINVAL, "exmy encode rows: src, dst or scales NULL");
  size_t stride = scps_exmy_packed_bytes(f, dim);
  scps_exmy_rounding rr = r ? *r : (scps_exmy_rounding){0};
  for (size_t i = 0; i < rows; i++) {
    int s;
    const float *row = src + i * dim;
    rr.position = (r ? r->position : 0) + i * dim;
    if ((rc = scps_exmy_row_scale(f, row, dim, &s, err)) != 0 ||
        (rc = scps_exmy_encode(f, s, row, dim, dst + i * stride, &rr, err)) != 0) {
      if (!err)
        return rc;
      char msg[SCPS_ERROR_MSG_MAX];
      snprintf(msg, sizeof msg, "%s", err->msg);
      return scps_error_set(err, rc, "row %zu: %s", i, msg);
    }
    scales[i] = (int8_t)s;
  }
  return 0;
}

int scps_exmy_decode_rows(const scps_exmy_format *f, const uint8_t *src, const int8_t *scales, size_t rows,
                          size_t dim, float *dst, scps_error *err) {
  int rc = check(f, 0, err);
  if (rc)
    return rc;
  if (rows && dim && (!src || !dst || !scales))
    return scps_error_set(err, SCPS_EINVAL, "exmy decode rows: src, dst or scales NULL");
  size_t stride = scps_exmy_packed_bytes(f, dim);
  int32_t hi = 127 - top_exponent(f);
  for (size_t i = 0; i < rows; i++) {
    if (scales[i] > hi)
      return scps_error_set(err, SCPS_EINVAL, "exmy decode rows: row %zu's scale %d is over %d", i,
                            (int)scales[i], (int)hi);
    rc = scps_exmy_decode(f, scales[i], src + i * stride, dim, dst + i * dim, err);
    if (rc)
      return rc;
  }
  return 0;
}
