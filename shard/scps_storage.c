#include "scps_storage.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "scps_bf16.h"

int scps__storage_parse(const char *name, scps_storage_format *f, scps_error *err) {
  memset(f, 0, sizeof *f);
  if (!name[0] || !strcmp(name, "float32")) {
    f->kind = SCPS_STORAGE_F32;
    return 0;
  }
  if (!strcmp(name, "bfloat16")) {
    f->kind = SCPS_STORAGE_BF16;
    return 0;
  }
  f->kind = SCPS_STORAGE_EXMY;
  if (scps_exmy_parse(name, &f->exmy, NULL) == 0) return 0;
  return scps_error_set(err, SCPS_EINVAL,
                        "storage format '%s' is not float32, bfloat16 or an eXmY name (e4m3, e5m2, e3m0b-2: "
                        "1 + X + Y of 2 to 16 bits, X <= 8, an optional b and bias)",
                        name);
}

void scps__storage_name(const scps_storage_format *f, char *out, size_t len) {
  if (f->kind == SCPS_STORAGE_F32) {
    snprintf(out, len, "float32");
    return;
  }
  if (f->kind == SCPS_STORAGE_BF16) {
    snprintf(out, len, "bfloat16");
    return;
  }
  scps_exmy_format d;
  scps_exmy_format_init(&d, f->exmy.x, f->exmy.y, SCPS_EXMY_DEFAULT_BIAS, NULL);
  if (d.bias == f->exmy.bias) snprintf(out, len, "e%dm%d", (int)f->exmy.x, (int)f->exmy.y);
  else snprintf(out, len, "e%dm%db%d", (int)f->exmy.x, (int)f->exmy.y, (int)f->exmy.bias);
}

bool scps__storage_equal(const scps_storage_format *a, const scps_storage_format *b) {
  if (a->kind != b->kind) return false;
  return a->kind != SCPS_STORAGE_EXMY ||
         (a->exmy.x == b->exmy.x && a->exmy.y == b->exmy.y && a->exmy.bias == b->exmy.bias);
}

size_t scps__storage_row_bytes(const scps_storage_format *f, size_t dim) {
  switch (f->kind) {
  case SCPS_STORAGE_BF16:
    return 2 * dim;
  case SCPS_STORAGE_EXMY:
    return scps_exmy_packed_bytes(&f->exmy, dim) + 1;
  default:
    return sizeof(float) * dim;
  }
}

void scps__storage_codec_init(scps_storage_codec *c, const scps_storage_format *f, size_t dim) {
  memset(c, 0, sizeof *c);
  c->f = *f;
  c->dim = dim;
  c->row_bytes = scps__storage_row_bytes(f, dim);
  c->code_bytes = f->kind == SCPS_STORAGE_EXMY ? c->row_bytes - 1 : c->row_bytes;
  if (f->kind == SCPS_STORAGE_EXMY && f->exmy.bits == 8) {
    /* Eight-bit codes are plain bytes: every code, decoded once. */
    uint8_t all[256];
    for (int i = 0; i < 256; i++) all[i] = (uint8_t)i;
    c->lut_valid = scps_exmy_decode(&f->exmy, 0, all, 256, c->lut, NULL) == 0;
  }
}

void scps__storage_decode_row(const scps_storage_codec *c, const uint8_t *src, float *restrict dst) {
  const size_t dim = c->dim;
  if (c->f.kind == SCPS_STORAGE_F32) {
    memcpy(dst, src, dim * sizeof(float));
    return;
  }
  if (c->f.kind == SCPS_STORAGE_BF16) {
    scps__bf16_decode(src, dst, dim);
    return;
  }
  const int scale = (int8_t)src[c->code_bytes];
  if (c->lut_valid) {
    /* What scps_exmy_decode computes for eight bits: the value at scale 0
     * times 2^scale, in float. */
    const float mul = ldexpf(1.0f, scale);
    for (size_t i = 0; i < dim; i++) dst[i] = c->lut[src[i]] * mul;
    return;
  }
  /* The scale came from scps_exmy_row_scale, so it is in range. */
  scps_exmy_decode(&c->f.exmy, scale, src, dim, dst, NULL);
}

static inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
  return z ^ (z >> 31);
}

/* bfloat16 rounding of the magnitude's bits a: up by the draw's top 16 bits
 * (stochastic) or to nearest even, saturating below infinity. */
static void bf16_encode(const float *restrict src, size_t n, uint8_t *restrict dst, const scps_exmy_rounding *r) {
  for (size_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &src[i], sizeof u);
    const uint32_t a = u & 0x7fffffffu;
    uint32_t t;
    if (r && r->stochastic)
      t = a + (uint32_t)(mix64(r->seed + (r->position + i + 1) * UINT64_C(0x9e3779b97f4a7c15)) >> 48);
    else
      t = a + 0x7fffu + ((a >> 16) & 1u);
    uint32_t h = t >> 16;
    h = h < 0x7f80u ? h : 0x7f7fu;
    h |= (u >> 16) & 0x8000u;
    dst[2 * i] = (uint8_t)h;
    dst[2 * i + 1] = (uint8_t)(h >> 8);
  }
}

int scps__storage_encode_row(const scps_storage_codec *c, const float *src, uint8_t *dst,
                            const scps_exmy_rounding *r, scps_error *err) {
  const size_t dim = c->dim;
  for (size_t i = 0; i < dim; i++)
    if (isnan(src[i])) return scps_error_set(err, SCPS_EINVAL, "storage encode: value %zu is NaN", i);
  if (c->f.kind == SCPS_STORAGE_F32) {
    memcpy(dst, src, dim * sizeof(float));
    return 0;
  }
  if (c->f.kind == SCPS_STORAGE_BF16) {
    bf16_encode(src, dim, dst, r);
    return 0;
  }
  int scale;
  int rc = scps_exmy_row_scale(&c->f.exmy, src, dim, &scale, err);
  if (!rc) rc = scps_exmy_encode(&c->f.exmy, scale, src, dim, dst, r, err);
  if (!rc) dst[c->code_bytes] = (uint8_t)(int8_t)scale;
  return rc;
}
