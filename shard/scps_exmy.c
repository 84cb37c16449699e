#include "scps_exmy.h"

#include <float.h>
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

/* The largest scale: an int8, and no value past float32's range. */
static int32_t scale_max(const scps_exmy_format *f) {
  int32_t t = top_exponent(f);
  return t < 0 ? 127 : 127 - t;
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
  int32_t hi = scale_max(f);
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

/* One plane of width w (bits lo .. lo+w-1 of the codes) of one block. */
static ALWAYS_INLINE void plane(uint16_t *c, uint8_t *o, const int w, const int lo, const int to_bytes) {
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
}

/* One block of 8 codes to its B bytes (to_bytes), or back: the planes of
 * B's binary digits, widest first, each a call with constant width so that
 * every shift is a constant. */
static ALWAYS_INLINE void block(uint16_t *c, uint8_t *o, const int B, const int to_bytes) {
  if (!to_bytes)
    for (int i = 0; i < 8; i++)
      c[i] = 0;
  if (B & 16)
    plane(c, o, 16, 0, to_bytes);
  if (B & 8)
    plane(c, o + (B & 16), 8, B & 7, to_bytes);
  if (B & 4)
    plane(c, o + (B & 24), 4, B & 3, to_bytes);
  if (B & 2)
    plane(c, o + (B & 28), 2, B & 1, to_bytes);
  if (B & 1)
    plane(c, o + (B & 30), 1, 0, to_bytes);
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

/* What encoding needs of a format and scale; sb is sub_bias - scale, the
 * bias of x / 2^scale.
 *
 * To nearest even, in double (exact for every float32, no subnormals):
 * |x| is first clamped to the largest value, which makes saturation exact.
 * At or above the smallest normal 2^(1-sb), the double's bits, rounded at
 * bit 52-Y (half up, less one when the kept bit is even) and shifted,
 * are (E + sb) 2^Y + m: less (1023 << Y) the code. Below it, adding
 * magic = 2^(53-sb-Y), whose ulp is the subnormal step 2^(1-sb-Y), rounds
 * |x| to a multiple of the step (the FPU's default rounding, to nearest
 * even) and leaves the multiple in magic's low bits; one past the last
 * subnormal is the first normal code, so the two agree at the boundary.
 * e0mY is all subnormal (minnormal is Inf).
 *
 * Stochastic, in integers from the float32's bits: a float32 with
 * exponent field E (subnormals normalised first) and significand sig
 * (implicit bit included) is sig 2^(E-150) and lands in exponent field
 * et = E + ebias, i.e. its magnitude code is (et-1) 2^Y + sig / 2^(23-Y)
 * for et >= 1, and sig / 2^(24-Y-et) below: one right shift of one integer
 * t by k, which the draw's top k bits carry with probability
 * (dropped bits) / 2^k. */
typedef struct enc_params {
  int32_t y;
  uint32_t sbit;     /* B - 1 */
  uint32_t maxcode;  /* 2^(B-1) - 1 */
  double largest;    /* at this scale */
  double minnormal;  /* 2^(1-sb); Inf for X == 0 */
  double magic;      /* 2^(53-sb-Y) */
  uint64_t rebias;   /* (1023 - sb) << Y */
  int32_t ebias;     /* sb - 127 */
  int32_t ecap;      /* 2^X + 1: any et above saturates the same */
  /* The same to nearest in float32's bits, where both the smallest normal
   * 2^(1-sb) (X >= 1) and magic32 = 2^(24-sb-Y), whose ulp is the
   * subnormal step, are float32 normals: fast32 then, and codes_rne32
   * gives codes_rne's codes with 8 lanes to a vector instead of 4. */
  int fast32;
  uint32_t largest32, minnormal32, magic32, rebias32; /* float32 bits; (127 - sb) << Y */
} enc_params;

static enc_params enc_params_of(const scps_exmy_format *f, int scale) {
  int32_t sb = sub_bias(f) - scale;
  enc_params p = {.y = f->y,
                  .sbit = (uint32_t)(f->bits - 1),
                  .maxcode = (1u << (f->bits - 1)) - 1,
                  .largest = ldexp(largest(f), scale),
                  .minnormal = f->x ? ldexp(1.0, 1 - sb) : INFINITY,
                  .magic = ldexp(1.0, 53 - sb - f->y),
                  .rebias = (uint64_t)(1023 - sb) << f->y,
                  .ebias = sb - 127,
                  .ecap = (1 << f->x) + 1};
  const int32_t m = 24 - sb - f->y;
  p.fast32 = m >= -126 && m <= 127 && (!f->x || 1 - sb >= -126) && p.largest <= FLT_MAX;
  if (p.fast32) {
    float lf = (float)p.largest, mf = ldexpf(1.0f, m);
    memcpy(&p.largest32, &lf, sizeof lf);
    memcpy(&p.magic32, &mf, sizeof mf);
    p.minnormal32 = f->x ? (uint32_t)(1 - sb + 127) << 23 : UINT32_MAX;
    p.rebias32 = (uint32_t)(127 - sb) << f->y;
  }
  return p;
}

/* codes_rne for fast32 parameters, in float32 bits and one float add. */
static uint32_t codes_rne32(const float *restrict src, size_t n, uint16_t *restrict c, const enc_params *pp) {
  const enc_params p = *pp;
  const uint32_t sh = 23 - (uint32_t)p.y, half = (1u << (sh - 1)) - 1;
  float magic;
  memcpy(&magic, &p.magic32, sizeof magic);
  uint32_t nan = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &src[i], sizeof u);
    uint32_t a = u & 0x7fffffffu;
    nan |= a > 0x7f800000u;
    a = a < p.largest32 ? a : p.largest32;
    float ax, sum;
    memcpy(&ax, &a, sizeof ax);
    sum = ax + magic;
    uint32_t sbits;
    memcpy(&sbits, &sum, sizeof sbits);
    /* the code's low bit is that of the shifted bits less rebias32 (for
     * Y = 0 rebias32's own low bit counts) */
    const uint32_t normal = ((a + half + (((a >> sh) ^ p.rebias32) & 1)) >> sh) - p.rebias32;
    const uint32_t is_normal = 0u - (uint32_t)(a >= p.minnormal32);
    const uint32_t q = (normal & is_normal) | ((sbits - p.magic32) & ~is_normal);
    c[i] = (uint16_t)(q | (u >> 31) << p.sbit);
  }
  return nan;
}

/* Codes of n values to nearest even; nonzero if one was NaN. */
static uint32_t codes_rne(const float *restrict src, size_t n, uint16_t *restrict c, const enc_params *pp) {
  const enc_params p = *pp;
  const uint32_t sh = 52 - (uint32_t)p.y;
  const uint64_t half = (UINT64_C(1) << (sh - 1)) - 1;
  uint64_t magic_bits;
  memcpy(&magic_bits, &p.magic, sizeof magic_bits);
  uint32_t nan = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &src[i], sizeof u);
    nan |= (u & 0x7fffffffu) > 0x7f800000u;
    double ax = fabs((double)src[i]);
    ax = ax < p.largest ? ax : p.largest;
    uint64_t ab, sb;
    memcpy(&ab, &ax, sizeof ab);
    double sub = ax + p.magic;
    memcpy(&sb, &sub, sizeof sb);
    /* the code's low bit is that of the shifted bits less rebias */
    uint64_t normal = ((ab + half + (((ab >> sh) ^ p.rebias) & 1)) >> sh) - p.rebias;
    uint64_t is_normal = (uint64_t)0 - (uint64_t)(ax >= p.minnormal);
    uint64_t q = (normal & is_normal) | ((sb - magic_bits) & ~is_normal);
    c[i] = (uint16_t)(q | (u >> 31) << p.sbit);
  }
  return nan;
}

/* The integer t and shift k of stochastic rounding (t < 2^31 + 2^24);
 * k is at least 8 (Y <= 15). Branch-free: the values of a row fall on
 * either side of every test below at random, so branches would mispredict
 * about half the time. */
static ALWAYS_INLINE uint32_t to_fixed(uint32_t a, const enc_params *p, int32_t *k) {
  const uint32_t ef = a >> 23, frac = a & 0x7fffffu;
  /* A float32 subnormal frac 2^-149 is normalised through the exact
   * conversion of frac: (float)frac = frac' 2^(F-150), so E = F - 149. */
  float fs = (float)(int32_t)frac;
  uint32_t fb;
  memcpy(&fb, &fs, sizeof fb);
  const uint32_t normal = 0u - (uint32_t)(ef != 0);
  const int32_t e = (int32_t)((ef & normal) | (((fb >> 23) - 149u) & ~normal));
  const uint32_t sig = (frac & normal) | (fb & 0x7fffffu & ~normal) | 0x800000u;
  int32_t et = e + p->ebias;
  et = et < p->ecap ? et : p->ecap;
  const uint32_t above = 0u - (uint32_t)(et >= 1);
  *k = 23 - p->y + (int32_t)(~above & (uint32_t)(1 - et));
  const uint32_t t = (((uint32_t)(et - 1) << 23) & above) + sig;
  return t & (0u - (uint32_t)(a != 0));
}

static ALWAYS_INLINE uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
  return z ^ (z >> 31);
}

/* Codes of n values, stochastically rounded; nonzero if one was NaN. */
static uint32_t codes_sr(const float *restrict src, size_t n, uint16_t *restrict c, const enc_params *pp,
                         uint64_t seed, uint64_t position) {
  const enc_params p = *pp;
  uint32_t nan = 0;
  uint64_t state = seed + (position + 1) * UINT64_C(0x9e3779b97f4a7c15);
  for (size_t i = 0; i < n; i++, state += UINT64_C(0x9e3779b97f4a7c15)) {
    uint32_t u;
    memcpy(&u, &src[i], sizeof u);
    uint32_t a = u & 0x7fffffffu;
    nan |= a > 0x7f800000u;
    int32_t k;
    uint64_t t = to_fixed(a, &p, &k);
    k = k < 63 ? k : 63;
    uint64_t z = mix64(state);
    uint64_t q = (t + (z >> (64 - k))) >> k;
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

/* Encodes n values at one scale, enc_params p of it; nonzero if one was
 * NaN (dst then unspecified). Unchecked: the callers check f and scale. */
static uint32_t encode_run(const scps_exmy_format *f, const enc_params *p, const float *src, size_t n,
                           uint8_t *dst, const scps_exmy_rounding *r, uint64_t position) {
  const int sr = r && r->stochastic;
  uint16_t c[CHUNK];
  for (size_t base = 0; base < n; base += CHUNK) {
    size_t len = n - base < CHUNK ? n - base : CHUNK;
    uint32_t nan =
        sr ? codes_sr(src + base, len, c, p, r->seed, position + base)
        : p->fast32 ? codes_rne32(src + base, len, c, p) : codes_rne(src + base, len, c, p);
    if (nan)
      return nan;
    size_t whole = (len + 7) / 8 * 8;
    for (size_t i = len; i < whole; i++)
      c[i] = 0;
    convert(c, whole / 8, dst + base / 8 * (size_t)f->bits, f->bits, 1);
  }
  return 0;
}

int scps_exmy_encode(const scps_exmy_format *f, int scale, const float *src, size_t n, uint8_t *dst,
                     const scps_exmy_rounding *r, scps_error *err) {
  int rc = check(f, scale, err);
  if (rc)
    return rc;
  if (n && (!src || !dst))
    return scps_error_set(err, SCPS_EINVAL, "exmy encode: src or dst NULL");
  const enc_params p = enc_params_of(f, scale);
  const uint64_t position = r ? r->position : 0;
  size_t at = 0;
  /* a NaN: named from the chunk it was found in */
  for (; at < n; at += CHUNK)
    if (encode_run(f, &p, src + at, n - at < CHUNK ? n - at : CHUNK, dst + at / 8 * (size_t)f->bits, r,
                   position + at))
      return nan_error(src + at, n - at < CHUNK ? n - at : CHUNK, at, err);
  return 0;
}

/* Formats of up to this many bits decode through a table of their values
 * (at scale 0, times 2^scale: one rounding, as values() gives). */
#define LUT_BITS 8

static void lut_of(const scps_exmy_format *f, float *lut) {
  uint16_t all[1 << LUT_BITS];
  for (uint32_t i = 0; i < 1u << f->bits; i++)
    all[i] = (uint16_t)i;
  values(all, (size_t)1 << f->bits, lut, f, 0);
}

/* lut: lut_of's table when bits <= LUT_BITS. add: dst += the values. */
static ALWAYS_INLINE void decode_run(const scps_exmy_format *f, const float *lut, int scale, const uint8_t *src,
                                     size_t n, float *restrict dst, const int add) {
  const float mul = ldexpf(1.0f, scale);
  uint16_t c[CHUNK];
  float v[CHUNK];
  for (size_t base = 0; base < n; base += CHUNK) {
    size_t len = n - base < CHUNK ? n - base : CHUNK;
    /* read only: convert writes bytes only when packing */
    const uint8_t *bytes = src + base / 8 * (size_t)f->bits;
    float *out = add ? v : dst + base;
    /* 8 bits: a code per byte, 4 bits a code per nibble (the low one
     * first), looked up straight from the bytes */
    if (f->bits == 8 || (f->bits == 4 && len % 2 == 0)) {
      if (f->bits == 8)
        for (size_t i = 0; i < len; i++)
          out[i] = lut[bytes[i]] * mul;
      else
        for (size_t i = 0; i < len / 2; i++) {
          out[2 * i] = lut[bytes[i] & 15] * mul;
          out[2 * i + 1] = lut[bytes[i] >> 4] * mul;
        }
      if (add)
        for (size_t i = 0; i < len; i++)
          dst[base + i] += v[i];
      continue;
    }
    /* read only: convert writes bytes only when packing */
    convert(c, (len + 7) / 8, (uint8_t *)(uintptr_t)bytes, f->bits, 0);
    if (f->bits > LUT_BITS)
      values(c, len, out, f, scale);
    else if (scale == 0)
      for (size_t i = 0; i < len; i++)
        out[i] = lut[c[i]];
    else
      for (size_t i = 0; i < len; i++)
        out[i] = lut[c[i]] * mul;
    if (add)
      for (size_t i = 0; i < len; i++)
        dst[base + i] += v[i];
  }
}

static void decode_impl(const scps_exmy_format *f, const float *lut, int scale, const uint8_t *src, size_t n,
                        float *restrict dst) {
  decode_run(f, lut, scale, src, n, dst, 0);
}

static void decode_add(const scps_exmy_format *f, const float *lut, int scale, const uint8_t *src, size_t n,
                       float *restrict dst) {
  decode_run(f, lut, scale, src, n, dst, 1);
}

int scps_exmy_decode(const scps_exmy_format *f, int scale, const uint8_t *src, size_t n, float *dst,
                     scps_error *err) {
  int rc = check(f, scale, err);
  if (rc)
    return rc;
  if (n && (!src || !dst))
    return scps_error_set(err, SCPS_EINVAL, "exmy decode: src or dst NULL");
  float lut[1 << LUT_BITS];
  if (f->bits <= LUT_BITS)
    lut_of(f, lut);
  decode_impl(f, lut, scale, src, n, dst);
  return 0;
}

/* The row's scale (scps_exmy_row_scale) of a checked format; NO_SCALE
 * with *nan_at the index of a NaN when there is one. */
#define NO_SCALE INT32_MIN
static int32_t row_scale_of(const scps_exmy_format *f, const float *row, size_t n, size_t *nan_at) {
  uint32_t amax = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &row[i], sizeof u);
    u &= 0x7fffffffu;
    amax = u > amax ? u : amax;
  }
  if (amax > 0x7f800000u) {
    size_t i = 0;
    while (!isnan(row[i]))
      i++;
    *nan_at = i;
    return NO_SCALE;
  }
  int32_t top = top_exponent(f), hi = scale_max(f);
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
  return s;
}

int scps_exmy_row_scale(const scps_exmy_format *f, const float *row, size_t n, int *scale, scps_error *err) {
  int rc = check(f, 0, err);
  if (rc)
    return rc;
  if (!scale || (n && !row))
    return scps_error_set(err, SCPS_EINVAL, "exmy row scale: row or scale NULL");
  size_t nan_at;
  int32_t s = row_scale_of(f, row, n, &nan_at);
  if (s == NO_SCALE)
    return scps_error_set(err, SCPS_EINVAL, "exmy encode: value %zu is NaN", nan_at);
  *scale = (int)s;
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
  int32_t hi = scale_max(f);
  float lut[1 << LUT_BITS];
  if (f->bits <= LUT_BITS)
    lut_of(f, lut);
  for (size_t i = 0; i < rows; i++) {
    if (scales[i] > hi)
      return scps_error_set(err, SCPS_EINVAL, "exmy decode rows: row %zu's scale %d is over %d", i,
                            (int)scales[i], (int)hi);
    decode_impl(f, lut, scales[i], src + i * stride, dim, dst + i * dim);
  }
  return 0;
}

size_t scps_exmy_row_bytes(const scps_exmy_format *f, size_t dim, int row_scale) {
  return scps_exmy_packed_bytes(f, dim) + (row_scale != 0);
}

int scps_exmy_encode_interleaved(const scps_exmy_format *f, int row_scale, const float *src, size_t rows,
                                 size_t dim, uint8_t *dst, const scps_exmy_rounding *r, scps_error *err) {
  int rc = check(f, 0, err);
  if (rc)
    return rc;
  if (rows && dim && (!src || !dst))
    return scps_error_set(err, SCPS_EINVAL, "exmy encode interleaved: src or dst NULL");
  const size_t packed = scps_exmy_packed_bytes(f, dim), stride = packed + (row_scale != 0);
  const uint64_t position = r ? r->position : 0;
  /* Rows of whole blocks without scales are one run: the same codes. */
  const size_t run = !row_scale && dim % 8 == 0 ? rows : 1;
  int32_t last = 0;
  enc_params p = enc_params_of(f, 0);
  for (size_t i = 0; i < rows; i += run) {
    const float *row = src + i * dim;
    size_t nan_at;
    const int32_t s = row_scale ? row_scale_of(f, row, dim, &nan_at) : 0;
    if (s == NO_SCALE)
      return scps_error_set(err, SCPS_EINVAL, "exmy encode: row %zu value %zu is NaN", i, nan_at);
    if (s != last)
      p = enc_params_of(f, (int)s);
    last = s;
    if (encode_run(f, &p, row, dim * run, dst + i * stride, r, position + i * dim)) {
      size_t at = 0;
      while (!isnan(row[at]))
        at++;
      return scps_error_set(err, SCPS_EINVAL, "exmy encode: row %zu value %zu is NaN", i + at / dim, at % dim);
    }
    if (row_scale)
      dst[i * stride + packed] = (uint8_t)(int8_t)s;
  }
  return 0;
}

int scps_exmy_decode_interleaved(const scps_exmy_format *f, int row_scale, const uint8_t *src, size_t rows,
                                 size_t dim, float *dst, int add, scps_error *err) {
  int rc = check(f, 0, err);
  if (rc)
    return rc;
  if (rows && dim && (!src || !dst))
    return scps_error_set(err, SCPS_EINVAL, "exmy decode interleaved: src or dst NULL");
  const size_t packed = scps_exmy_packed_bytes(f, dim), stride = packed + (row_scale != 0);
  const int32_t hi = scale_max(f);
  float lut[1 << LUT_BITS];
  if (f->bits <= LUT_BITS)
    lut_of(f, lut);
  const size_t run = !row_scale && dim % 8 == 0 ? rows : 1;
  for (size_t i = 0; i < rows; i += run) {
    const int s = row_scale ? (int8_t)src[i * stride + packed] : 0;
    if (s > hi)
      return scps_error_set(err, SCPS_ERANGE, "exmy decode: row %zu's scale %d is over %d, the most for e%dm%d "
                            "bias %d", i, s, (int)hi, (int)f->x, (int)f->y, (int)f->bias);
    if (add)
      decode_add(f, lut, s, src + i * stride, dim * run, dst + i * dim);
    else
      decode_impl(f, lut, s, src + i * stride, dim * run, dst + i * dim);
  }
  return 0;
}
