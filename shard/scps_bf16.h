/* scps_bf16: bfloat16, the wire format that halves activation and gradient
 * bytes (scps.proto FloatFormat); conversions only, arithmetic stays float32. */
#ifndef SCPS_BF16_H
#define SCPS_BF16_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Round to nearest, ties to even; NaN stays a (quiet) NaN instead of being
 * rounded into infinity. */
static inline uint16_t scps__bf16_from_f32(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

static inline float scps__bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* n values to little-endian bfloat16 at dst (2n bytes, any alignment). */
static inline void scps__bf16_encode(const float *restrict src, uint8_t *restrict dst, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint16_t h = scps__bf16_from_f32(src[i]);
    dst[2 * i] = (uint8_t)h;
    dst[2 * i + 1] = (uint8_t)(h >> 8);
  }
}

/* n little-endian bfloat16 values at src (any alignment), widened exactly. */
static inline void scps__bf16_decode(const uint8_t *restrict src, float *restrict dst, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = scps__bf16_to_f32((uint16_t)(src[2 * i] | src[2 * i + 1] << 8));
}

#endif
