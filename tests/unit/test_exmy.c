/* eXmY codec against the double-precision reference (tests/ref/scps_ref_exmy)
 * and a bit-by-bit model of the packing layout: every code of every format
 * decodes exactly, a sweep of float32 (and every bfloat16) encodes as the
 * reference rounds, saturation, zeros, lengths, sub-ranges, stochastic
 * rounding's expectation and reproducibility, and per-row scales. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "scps_exmy.h"
#include "scps_ref_exmy.h"
#include "scps_test.h"

/* Float32 bit patterns stepped by this (odd, so every low bit varies). */
#define SWEEP_STRIDE 16411u

static float f32(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* The layout the header documents, one bit at a time: where bit b of
 * element i's code lies, as a bit index from the start (byte * 8 + bit).
 * Per block of 8, the binary digits of B widest first, each a
 * little-endian bit string of 8 chunks holding the code's next-lower bits. */
static size_t layout_bit(size_t i, int B, int b) {
  size_t off = i / 8 * (size_t)B * 8;
  int lo = B;
  for (int w = 16; w >= 1; w /= 2) {
    if (!(B & w))
      continue;
    lo -= w;
    if (b >= lo)
      return off + (i % 8) * (size_t)w + (size_t)(b - lo);
    off += 8 * (size_t)w;
  }
  return SIZE_MAX;
}

static void model_pack(const uint32_t *codes, size_t n, int B, uint8_t *out) {
  size_t blocks = (n + 7) / 8;
  memset(out, 0, blocks * (size_t)B);
  for (size_t i = 0; i < n; i++)
    for (int b = 0; b < B; b++)
      if (codes[i] >> b & 1)
        out[layout_bit(i, B, b) / 8] |= (uint8_t)(1u << layout_bit(i, B, b) % 8);
}

static void model_unpack(const uint8_t *in, size_t n, int B, uint32_t *codes) {
  for (size_t i = 0; i < n; i++) {
    codes[i] = 0;
    for (int b = 0; b < B; b++)
      codes[i] |= (uint32_t)(in[layout_bit(i, B, b) / 8] >> layout_bit(i, B, b) % 8 & 1) << b;
  }
}

static void fmt(scps_exmy_format *f, int x, int y, int bias) {
  scps_error err;
  CHECK_OK(scps_exmy_format_init(f, x, y, bias, &err), &err);
}

static void bias_range(int x, int y, int *lo, int *hi) {
  *lo = x ? (1 << x) - 128 : y - 128;
  *hi = x ? 150 - y : 149;
}

static void test_parse(void) {
  static const struct {
    const char *name;
    int x, y, bias;
  } ok[] = {{"e4m3", 4, 3, 7},   {"e5m2", 5, 2, 15},   {"e3m0", 3, 0, 3},   {"e2m1", 2, 1, 1},
            {"e1m0", 1, 0, 0},   {"e0m1", 0, 1, 0},    {"e0m7", 0, 7, 0},   {"e8m7", 8, 7, 128},
            {"e8m0", 8, 0, 128}, {"e7m8", 7, 8, 63},   {"e0m15", 0, 15, 0}, {"e3m0b-2", 3, 0, -2},
            {"e2m4b10", 2, 4, 10}};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    scps_exmy_format f = {0};
    scps_error err;
    CHECK_OK(scps_exmy_parse(ok[i].name, &f, &err), &err);
    CHECKF(f.x == ok[i].x && f.y == ok[i].y && f.bias == ok[i].bias && f.bits == 1 + ok[i].x + ok[i].y,
           "%s: e%dm%d bias %d bits %d", ok[i].name, f.x, f.y, f.bias, f.bits);
  }
  static const char *bad[] = {"", "e", "e4", "m3", "e4m", "e4m3x", "e4m3b", "e4m3b-", "E4M3", "e9m0",
                              "e0m0", "e8m8", "e0m16", "e4m3b200", "e3m0b-200", "e12345m1", " e4m3"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    scps_exmy_format f;
    scps_error err;
    scps_error_clear(&err);
    CHECKF(scps_exmy_parse(bad[i], &f, &err) == SCPS_EINVAL, "'%s' accepted", bad[i]);
    CHECKF(err.msg[0] != '\0', "'%s': no message", bad[i]);
  }
  scps_exmy_format f;
  scps_error err;
  CHECK(scps_exmy_parse("e9m0", &f, &err) == SCPS_EINVAL && strstr(err.msg, "x 9"));
  CHECK(scps_exmy_parse("e4m3b200", &f, &err) == SCPS_EINVAL && strstr(err.msg, "bias 200"));
  CHECK(scps_exmy_parse(NULL, &f, &err) == SCPS_EINVAL);
  /* the bias range is exactly the biases whose values are all float32 */
  for (int x = 0; x <= 8; x++)
    for (int y = x ? 0 : 1; 1 + x + y <= 16; y++) {
      int lo, hi;
      bias_range(x, y, &lo, &hi);
      CHECKF(scps_exmy_format_init(&f, x, y, lo, NULL) == 0 && scps_exmy_format_init(&f, x, y, hi, NULL) == 0 &&
                 scps_exmy_format_init(&f, x, y, lo - 1, NULL) == SCPS_EINVAL &&
                 scps_exmy_format_init(&f, x, y, hi + 1, NULL) == SCPS_EINVAL,
             "e%dm%d: bias range [%d, %d]", x, y, lo, hi);
    }
}

/* Every code of every format (2 to 16 bits) at the default and the extreme
 * biases, and at extreme scales, decodes to the reference value. */
static void test_decode_all_codes(void) {
  uint32_t *codes = malloc(sizeof *codes << 16);
  uint8_t *packed = malloc((size_t)2 << 16);
  float *out = malloc(sizeof *out << 16);
  for (int B = 2; B <= 16; B++)
    for (int x = 0; x <= 8 && x < B; x++) {
      int y = B - 1 - x, lo, hi;
      bias_range(x, y, &lo, &hi);
      scps_exmy_format f;
      fmt(&f, x, y, SCPS_EXMY_DEFAULT_BIAS);
      int biases[3] = {f.bias, lo, hi};
      size_t n = (size_t)1 << B;
      for (uint32_t c = 0; c < n; c++)
        codes[c] = c;
      model_pack(codes, n, B, packed);
      for (int bi = 0; bi < 3; bi++) {
        fmt(&f, x, y, biases[bi]);
        int top = (int)floor(log2(f.x ? ldexp(2.0 - ldexp(1.0, -y), (1 << x) - 1 - f.bias)
                                      : ldexp((double)((1 << y) - 1), -f.bias)));
        int scales[3] = {0, -128, top < 0 ? 127 : 127 - top};
        for (int si = 0; si < (B <= 12 ? 3 : 1); si++) {
          scps_ref_exmy ref;
          CHECK(scps_ref_exmy_init(&ref, x, y, f.bias, scales[si]) == 0);
          scps_error err;
          CHECK_OK(scps_exmy_decode(&f, scales[si], packed, n, out, &err), &err);
          size_t bad = 0, first = 0;
          for (uint32_t c = 0; c < n; c++) {
            double want = scps_ref_exmy_value(&ref, c);
            /* exact when a float32; else rounded once (tiny values at -128) */
            int okv = (double)out[c] == (double)(float)want && !signbit(out[c]) == !signbit(want);
            if (scales[si] == 0)
              okv = okv && (double)out[c] == want;
            if (!okv && bad++ == 0)
              first = c;
          }
          CHECKF(bad == 0, "e%dm%d bias %d scale %d: %zu codes wrong, first %#zx: %a, want %a", x, y,
                 f.bias, scales[si], bad, first, out[first], scps_ref_exmy_value(&ref, (uint32_t)first));
          scps_ref_exmy_free(&ref);
        }
      }
    }
  free(codes);
  free(packed);
  free(out);
}

/* Float32 inputs: every bfloat16, a strided sweep of bit patterns, and for
 * this format every midpoint between neighbouring values and the floats
 * beside it, both signs. NaN patterns are left out. */
static size_t sweep_inputs(const scps_ref_exmy *ref, int strided, float *in) {
  size_t n = 0;
  for (uint32_t h = 0; h < 65536; h++)
    if (!isnan(f32(h << 16)))
      in[n++] = f32(h << 16);
  for (uint64_t u = strided ? 0 : UINT64_MAX; u <= UINT32_MAX; u += SWEEP_STRIDE)
    if (!isnan(f32((uint32_t)u)))
      in[n++] = f32((uint32_t)u);
  for (uint32_t c = 0; c + 1 < ref->n; c++) {
    double mid = (ref->mag[c] + ref->mag[c + 1]) / 2;
    float m = (float)mid;
    float near[3] = {m, nextafterf(m, 0), nextafterf(m, INFINITY)};
    for (int k = 0; k < 3; k++)
      if (isfinite(near[k])) {
        in[n++] = near[k];
        in[n++] = -near[k];
      }
  }
  return n;
}

#define SWEEP_MAX (65536 + (size_t)(UINT32_MAX / SWEEP_STRIDE) + 2 + 6 * 32768 + 8)

/* Encodes in[] with f at scale and compares every code with the reference. */
static void check_encode(const scps_exmy_format *f, int scale, const float *in, size_t n, uint8_t *packed,
                         uint32_t *codes, const scps_ref_exmy *ref) {
  scps_error err;
  CHECK_OK(scps_exmy_encode(f, scale, in, n, packed, NULL, &err), &err);
  model_unpack(packed, n, f->bits, codes);
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < n; i++)
    if (codes[i] != scps_ref_exmy_round(ref, (double)in[i]) && bad++ == 0)
      first = i;
  CHECKF(bad == 0, "e%dm%d bias %d scale %d: %zu of %zu wrong, first %a -> %#x, want %#x", f->x, f->y,
         f->bias, scale, bad, n, in[first], codes[first], scps_ref_exmy_round(ref, (double)in[first]));
}

static void test_encode_sweep(void) {
  float *in = malloc(SWEEP_MAX * sizeof *in);
  uint8_t *packed = malloc(SWEEP_MAX * 2);
  uint32_t *codes = malloc(SWEEP_MAX * sizeof *codes);
  for (int B = 2; B <= 16; B++)
    for (int x = 0; x <= 8 && x < B; x++) {
      scps_exmy_format f;
      scps_ref_exmy ref;
      fmt(&f, x, B - 1 - x, SCPS_EXMY_DEFAULT_BIAS);
      CHECK(scps_ref_exmy_init(&ref, f.x, f.y, f.bias, 0) == 0);
      size_t n = sweep_inputs(&ref, B <= 12, in);
      check_encode(&f, 0, in, n, packed, codes, &ref);
      scps_ref_exmy_free(&ref);
    }
  /* other biases and scales, on narrow formats and wide ones */
  static const struct {
    int x, y, bias, scale;
  } more[] = {{3, 0, -5, 0},  {3, 0, 3, -40}, {3, 0, 3, 100}, {2, 1, 1, -128}, {3, 1, 20, 7},
              {4, 3, 7, -90}, {4, 3, -112, 0}, {5, 2, 15, 90}, {0, 3, 0, -10},  {0, 7, 149, 0},
              {0, 4, -100, 3}, {8, 3, 128, -128}, {1, 2, 0, 126}, {6, 5, -20, 30},
              /* Y = 0 with an even sub-bias (ties between exponents) */
              {3, 0, -2, 0},  {3, 0, 3, 1},   {2, 0, 1, 2}};
  for (size_t i = 0; i < sizeof more / sizeof more[0]; i++) {
    scps_exmy_format f;
    scps_ref_exmy ref;
    fmt(&f, more[i].x, more[i].y, more[i].bias);
    CHECK(scps_ref_exmy_init(&ref, f.x, f.y, f.bias, more[i].scale) == 0);
    size_t n = sweep_inputs(&ref, 1, in);
    check_encode(&f, more[i].scale, in, n, packed, codes, &ref);
    scps_ref_exmy_free(&ref);
  }
  free(in);
  free(packed);
  free(codes);
}

static void test_specials(void) {
  static const char *names[] = {"e4m3", "e3m0", "e0m3", "e8m7", "e1m0", "e5m10"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    scps_exmy_format f;
    scps_error err;
    CHECK_OK(scps_exmy_parse(names[i], &f, &err), &err);
    uint32_t s = 1u << (f.bits - 1), maxc = s - 1;
    float in[8] = {-0.0f, 0.0f, INFINITY, -INFINITY, FLT_MAX, -FLT_MAX, -FLT_TRUE_MIN, FLT_TRUE_MIN};
    uint32_t want[8] = {s, 0, maxc, s | maxc, maxc, s | maxc, s, 0};
    uint8_t packed[16];
    uint32_t codes[8];
    float out[8];
    CHECK_OK(scps_exmy_encode(&f, 0, in, 8, packed, NULL, &err), &err);
    model_unpack(packed, 8, f.bits, codes);
    for (int k = 0; k < 8; k++)
      CHECKF(codes[k] == want[k], "%s: %a -> %#x, want %#x", names[i], in[k], codes[k], want[k]);
    CHECK_OK(scps_exmy_decode(&f, 0, packed, 8, out, &err), &err);
    CHECKF(out[0] == 0 && signbit(out[0]) && !signbit(out[1]) && signbit(out[6]), "%s: zeros' signs", names[i]);
    CHECKF(out[2] == out[4] && out[3] == -out[2] && isfinite(out[2]) && out[2] > 0, "%s: saturation %a",
           names[i], out[2]);
    /* NaN is an error naming the index, under either rounding */
    float nan_in[20] = {0};
    nan_in[13] = NAN;
    scps_exmy_rounding sr = {.stochastic = 1, .seed = 1};
    uint8_t big[40];
    CHECK(scps_exmy_encode(&f, 0, nan_in, 20, big, NULL, &err) == SCPS_EINVAL && strstr(err.msg, "13"));
    CHECK(scps_exmy_encode(&f, 0, nan_in, 20, big, &sr, &err) == SCPS_EINVAL && strstr(err.msg, "13"));
    int scale;
    CHECK(scps_exmy_row_scale(&f, nan_in, 20, &scale, &err) == SCPS_EINVAL);
  }
  /* e8m7 keeps float32's top binade, and its subnormals reach below float32's normal range */
  scps_exmy_format f;
  fmt(&f, 8, 7, SCPS_EXMY_DEFAULT_BIAS);
  uint8_t packed[16];
  float in[8] = {0x1.fep127f, 0x1p-126f, 0x1p-127f, 0x1p-133f, 0x1p-134f, 0x1.8p-134f, 0x1p-135f, 3.0f};
  float out[8];
  scps_error err;
  CHECK_OK(scps_exmy_encode(&f, 0, in, 8, packed, NULL, &err), &err);
  CHECK_OK(scps_exmy_decode(&f, 0, packed, 8, out, &err), &err);
  CHECK(out[0] == 0x1.fep127f && out[1] == 0x1p-126f && out[2] == 0x1p-127f && out[3] == 0x1p-133f);
  CHECK(out[4] == 0x1p-134f && out[5] == 0x1p-133f && out[6] == 0 && out[7] == 3.0f);
  /* bad arguments */
  CHECK(scps_exmy_decode(&f, 1, packed, 8, out, &err) == SCPS_EINVAL && strstr(err.msg, "scale 1"));
  CHECK(scps_exmy_encode(&f, -129, in, 8, packed, NULL, &err) == SCPS_EINVAL);
  scps_exmy_format broken = f;
  broken.bits = 9;
  CHECK(scps_exmy_encode(&broken, 0, in, 8, packed, NULL, &err) == SCPS_EINVAL);
  broken = f;
  broken.bias = 127;
  CHECK(scps_exmy_decode(&broken, 0, packed, 8, out, &err) == SCPS_EINVAL && strstr(err.msg, "bias 127"));
}

/* A pseudo-normal value of magnitude around 2^spread (test data only). */
static float test_value(uint64_t *state, int spread) {
  *state = *state * UINT64_C(6364136223846793005) + UINT64_C(1442695040888963407);
  uint64_t z = *state >> 11;
  double u = (double)(z & 0xfffff) / 0xfffff - 0.5, e = (double)((z >> 20) % 2001) / 1000.0 - 1.0;
  return (float)ldexp(u, (int)(e * spread));
}

/* Lengths are whole blocks; encoding a sub-range at a block boundary (its
 * stochastic position shifted alike) gives the slice of the whole, and
 * decoding a slice the slice of the whole decoding. */
static void test_packing_and_ranges(void) {
  static const char *names[] = {"e1m1", "e2m1", "e3m0", "e2m2", "e3m2", "e3m3", "e4m3",
                                "e0m8", "e4m5", "e5m6", "e5m10", "e8m7", "e0m15"};
  enum { N = 1003 };
  float in[N], whole_dec[N], part_dec[N];
  uint8_t whole[N * 2 + 64], part[N * 2 + 64];
  uint64_t st = 7;
  for (int i = 0; i < N; i++)
    in[i] = test_value(&st, 12);
  for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
    scps_exmy_format f;
    scps_error err;
    CHECK_OK(scps_exmy_parse(names[k], &f, &err), &err);
    size_t B = (size_t)f.bits;
    for (size_t n = 0; n <= 40; n++) {
      CHECK(scps_exmy_packed_bytes(&f, n) == (n + 7) / 8 * B);
      memset(part, 0xa5, sizeof part);
      CHECK_OK(scps_exmy_encode(&f, 0, in, n, part, NULL, &err), &err);
      size_t len = scps_exmy_packed_bytes(&f, n), untouched = 0;
      for (size_t i = len; i < sizeof part; i++)
        untouched += part[i] == 0xa5;
      CHECKF(untouched == sizeof part - len, "%s n %zu: wrote past %zu bytes", names[k], n, len);
      uint32_t codes[48];
      model_unpack(part, (n + 7) / 8 * 8, f.bits, codes);
      for (size_t i = n; i < (n + 7) / 8 * 8; i++)
        CHECKF(codes[i] == 0, "%s n %zu: padding code %#x at %zu", names[k], n, codes[i], i);
    }
    for (int sr = 0; sr < 2; sr++) {
      scps_exmy_rounding r = {.stochastic = sr, .seed = 0x5eed, .position = 123457};
      CHECK_OK(scps_exmy_encode(&f, -3, in, N, whole, &r, &err), &err);
      CHECK_OK(scps_exmy_decode(&f, -3, whole, N, whole_dec, &err), &err);
      static const size_t offs[] = {0, 8, 64, 512, 520, 992, 1000};
      for (size_t oi = 0; oi < sizeof offs / sizeof offs[0]; oi++)
        for (size_t len = 1; offs[oi] + len <= N; len = len * 3 + 5) {
          size_t o = offs[oi];
          scps_exmy_rounding rp = r;
          rp.position = r.position + o;
          CHECK_OK(scps_exmy_encode(&f, -3, in + o, len, part, &rp, &err), &err);
          size_t cut = len / 8 * B; /* whole blocks; a last partial block has padding */
          CHECKF(memcmp(part, whole + o / 8 * B, cut) == 0, "%s sr %d: [%zu, +%zu) differs", names[k], sr, o,
                 len);
          CHECK_OK(scps_exmy_decode(&f, -3, whole + o / 8 * B, len, part_dec, &err), &err);
          CHECKF(memcmp(part_dec, whole_dec + o, len * sizeof *part_dec) == 0, "%s: decoding [%zu, +%zu)",
                 names[k], o, len);
        }
      /* the tail block is the same as well when the range ends where the whole does */
      scps_exmy_rounding rp = r;
      rp.position = r.position + 1000;
      CHECK_OK(scps_exmy_encode(&f, -3, in + 1000, N - 1000, part, &rp, &err), &err);
      CHECK(memcmp(part, whole + 1000 / 8 * B, B) == 0);
    }
  }
}

/* Stochastic rounding lands on the two neighbours of x, with mean x. */
static void test_stochastic(void) {
  static const struct {
    const char *name;
    int scale;
  } fs[] = {{"e3m0", 0}, {"e2m1", 0}, {"e3m1", -4}, {"e4m3", 0}, {"e0m3", 2}, {"e5m2", 0}, {"e2m9", 0}};
  enum { DRAWS = 4096 };
  static float in[DRAWS], out[DRAWS];
  static uint8_t packed[DRAWS * 2];
  uint64_t st = 99;
  for (size_t k = 0; k < sizeof fs / sizeof fs[0]; k++) {
    scps_exmy_format f;
    scps_ref_exmy ref;
    scps_error err;
    CHECK_OK(scps_exmy_parse(fs[k].name, &f, &err), &err);
    CHECK(scps_ref_exmy_init(&ref, f.x, f.y, f.bias, fs[k].scale) == 0);
    double minsub = ref.mag[1];
    for (int v = 0; v < 24; v++) {
      /* across the range, in the subnormals, and far below the smallest value */
      float x = v < 16 ? test_value(&st, 6) : v < 20 ? (float)(minsub * (v - 15) * 0.3) : (float)(minsub * 0.001);
      x = v % 2 ? -x : x;
      for (int i = 0; i < DRAWS; i++)
        in[i] = x;
      scps_exmy_rounding r = {.stochastic = 1, .seed = 1000 + (uint64_t)v, .position = (uint64_t)v << 40};
      CHECK_OK(scps_exmy_encode(&f, fs[k].scale, in, DRAWS, packed, &r, &err), &err);
      CHECK_OK(scps_exmy_decode(&f, fs[k].scale, packed, DRAWS, out, &err), &err);
      uint32_t lo, hi;
      scps_ref_exmy_bracket(&ref, x, &lo, &hi);
      double l = ref.mag[lo], h = ref.mag[hi], sum = 0, ax = fabs((double)x);
      size_t outside = 0;
      for (int i = 0; i < DRAWS; i++) {
        double a = fabs((double)out[i]);
        outside += a != l && a != h;
        sum += a;
      }
      CHECKF(outside == 0, "%s: %a: %zu draws not %a or %a", fs[k].name, x, outside, l, h);
      if (ax >= ref.mag[ref.n - 1])
        continue; /* saturated: always the largest */
      double p = h > l ? (ax - l) / (h - l) : 0, sd = (h - l) * sqrt(p * (1 - p) / DRAWS);
      double mean = sum / DRAWS;
      CHECKF(fabs(mean - ax) <= 5 * sd + 1e-12 * ax + (h - l) / (4.0 * DRAWS), "%s: %a: mean %a, sd %a",
             fs[k].name, x, mean, sd);
    }
    /* the same seed and positions give the same codes; another seed others */
    uint8_t again[DRAWS * 2];
    for (int i = 0; i < DRAWS; i++)
      in[i] = (float)((ref.mag[5] + ref.mag[6]) / 2);
    scps_exmy_rounding r = {.stochastic = 1, .seed = 5, .position = 77};
    size_t len = scps_exmy_packed_bytes(&f, DRAWS);
    CHECK_OK(scps_exmy_encode(&f, fs[k].scale, in, DRAWS, packed, &r, &err), &err);
    CHECK_OK(scps_exmy_encode(&f, fs[k].scale, in, DRAWS, again, &r, &err), &err);
    CHECK(memcmp(packed, again, len) == 0);
    r.seed = 6;
    CHECK_OK(scps_exmy_encode(&f, fs[k].scale, in, DRAWS, again, &r, &err), &err);
    CHECK(memcmp(packed, again, len) != 0);
    scps_ref_exmy_free(&ref);
  }
}

/* Per-row scales: the smallest that keeps the row's largest magnitude in
 * range, and every value rounded as the reference rounds it at that scale. */
static void test_rows(void) {
  static const char *names[] = {"e3m0", "e2m1", "e3m1", "e4m3", "e0m4", "e1m0", "e5m10"};
  enum { ROWS = 41, MAXDIM = 24 };
  static const size_t dims[] = {24, 13, 8, 1};
  float in[ROWS * MAXDIM], out[ROWS * MAXDIM];
  uint8_t packed[ROWS * MAXDIM * 2];
  int8_t scales[ROWS];
  uint64_t st = 3;
  for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
      size_t dim = dims[di];
      scps_exmy_format f;
      scps_error err;
      CHECK_OK(scps_exmy_parse(names[k], &f, &err), &err);
      for (size_t i = 0; i < ROWS; i++) {
        /* rows of very different magnitudes; row 0 zeros, row 1 with an infinity */
        int e = (int)(i * 11 % 250) - 125;
        for (size_t j = 0; j < dim; j++)
          in[i * dim + j] = i == 0 ? 0.0f : (float)ldexp(test_value(&st, 3), e);
      }
      in[dim] = -INFINITY;
      CHECK_OK(scps_exmy_encode_rows(&f, in, ROWS, dim, packed, scales, NULL, &err), &err);
      CHECK_OK(scps_exmy_decode_rows(&f, packed, scales, ROWS, dim, out, &err), &err);
      CHECK(scales[0] == 0);
      size_t bad = 0, saturated = 0;
      for (size_t i = 0; i < ROWS; i++) {
        scps_ref_exmy ref;
        CHECK(scps_ref_exmy_init(&ref, f.x, f.y, f.bias, scales[i]) == 0);
        double mx = 0, top = ref.mag[ref.n - 1];
        for (size_t j = 0; j < dim; j++)
          mx = fmax(mx, fabs((double)in[i * dim + j]));
        /* in range at s, not at s - 1; unless clamped at -128 or at float32's top */
        int fits = mx <= top, tight = mx > top / 2 || scales[i] == -128 || mx == 0;
        CHECKF((fits || isinf(mx)) && tight, "%s dim %zu row %zu: scale %d for max %a (top %a)", names[k],
               dim, i, scales[i], mx, top);
        for (size_t j = 0; j < dim; j++) {
          float x = in[i * dim + j];
          double want = scps_ref_exmy_value(&ref, scps_ref_exmy_round(&ref, (double)x));
          bad += (double)out[i * dim + j] != want;
          saturated += isfinite(x) && fabs((double)out[i * dim + j]) == top && fabs((double)x) > top;
        }
        scps_ref_exmy_free(&ref);
      }
      CHECKF(bad == 0, "%s dim %zu: %zu values differ from the reference", names[k], dim, bad);
      CHECKF(saturated == 0, "%s dim %zu: %zu values saturated", names[k], dim, saturated);
      /* a row with a NaN names it; a stored scale out of range is refused */
      in[5 * dim + dim - 1] = NAN;
      CHECK(scps_exmy_encode_rows(&f, in, ROWS, dim, packed, scales, NULL, &err) == SCPS_EINVAL &&
            strstr(err.msg, "row 5"));
      scales[7] = 127;
      CHECK(scps_exmy_decode_rows(&f, packed, scales, ROWS, dim, out, &err) == SCPS_EINVAL &&
            strstr(err.msg, "row 7"));
    }
}

/* The wire's interleaved rows: each row's codes as scps_exmy_encode (or
 * scps_exmy_encode_rows, with row scales) makes them, its scale after
 * them; decoding gives scps_exmy_decode_rows's values, or adds them. */
static void test_interleaved(void) {
  static const char *names[] = {"e3m0", "e2m1", "e4m3", "e5m2", "e3m4", "e5m10"};
  enum { ROWS = 37, MAXDIM = 24 };
  static const size_t dims[] = {24, 13, 8};
  float in[ROWS * MAXDIM], want[ROWS * MAXDIM], out[ROWS * MAXDIM];
  uint8_t rows_packed[ROWS * MAXDIM * 2], wire[ROWS * (MAXDIM * 2 + 1)], one[MAXDIM * 2];
  int8_t scales[ROWS];
  uint64_t st = 11;
  for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
      for (int rs = 0; rs < 2; rs++)
        for (int sr = 0; sr < 2; sr++) {
          const size_t dim = dims[di];
          scps_exmy_format f;
          scps_error err;
          CHECK_OK(scps_exmy_parse(names[k], &f, &err), &err);
          for (size_t i = 0; i < ROWS * dim; i++)
            in[i] = (float)ldexp(test_value(&st, 2), (int)(i / dim % 9) - 4);
          const scps_exmy_rounding r = {sr, 77 + k, 1000};
          const size_t packed = scps_exmy_packed_bytes(&f, dim), stride = scps_exmy_row_bytes(&f, dim, rs);
          CHECK(stride == packed + (size_t)rs);
          CHECK_OK(scps_exmy_encode_interleaved(&f, rs, in, ROWS, dim, wire, &r, &err), &err);
          CHECK_OK(scps_exmy_encode_rows(&f, in, ROWS, dim, rows_packed, scales, &r, &err), &err);
          size_t differ = 0;
          for (size_t i = 0; i < ROWS; i++) {
            scps_exmy_rounding ri = {sr, r.seed, r.position + i * dim};
            const int s = rs ? scales[i] : 0;
            CHECK_OK(scps_exmy_encode(&f, s, in + i * dim, dim, one, &ri, &err), &err);
            differ += memcmp(one, wire + i * stride, packed) != 0;
            differ += rs && (int8_t)wire[i * stride + packed] != scales[i];
            CHECK_OK(scps_exmy_decode(&f, s, one, dim, want + i * dim, &err), &err);
          }
          CHECKF(differ == 0, "%s dim %zu scale %d sr %d: %zu rows differ", names[k], dim, rs, sr, differ);
          for (size_t i = 0; i < ROWS * dim; i++)
            out[i] = 0.5f;
          CHECK_OK(scps_exmy_decode_interleaved(&f, rs, wire, ROWS, dim, out, 1, &err), &err);
          size_t bad = 0;
          for (size_t i = 0; i < ROWS * dim; i++)
            bad += out[i] != 0.5f + want[i];
          CHECK_OK(scps_exmy_decode_interleaved(&f, rs, wire, ROWS, dim, out, 0, &err), &err);
          for (size_t i = 0; i < ROWS * dim; i++)
            bad += out[i] != want[i];
          CHECKF(bad == 0, "%s dim %zu scale %d: %zu values decode wrong", names[k], dim, rs, bad);
          if (rs) {
            wire[9 * stride + packed] = 127;
            CHECK(scps_exmy_decode_interleaved(&f, rs, wire, ROWS, dim, out, 0, &err) == SCPS_ERANGE &&
                  strstr(err.msg, "row 9"));
          }
          in[6 * dim + 2] = NAN;
          CHECK(scps_exmy_encode_interleaved(&f, rs, in, ROWS, dim, wire, &r, &err) == SCPS_EINVAL &&
                strstr(err.msg, "row 6 value 2"));
        }
}

int main(void) {
  test_parse();
  test_decode_all_codes();
  test_encode_sweep();
  test_specials();
  test_packing_and_ranges();
  test_stochastic();
  test_rows();
  test_interleaved();
  return scps_test_finish("test_exmy");
}
