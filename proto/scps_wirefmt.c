#include "scps_wirefmt.h"

#include <stdio.h>
#include <string.h>

#include "scps_bf16.h"

int scps__wirefmt_parse(const char *name, scps_wirefmt *f, scps_error *err) {
  memset(f, 0, sizeof *f);
  if (!name) return scps_error_set(err, SCPS_EINVAL, "wire format: NULL");
  if (!strcmp(name, "float32")) return 0;
  if (!strcmp(name, "bfloat16") || !strcmp(name, "bf16")) {
    f->kind = SCPS_WIREFMT_BFLOAT16;
    return 0;
  }
  char text[SCPS_WIREFMT_NAME_MAX];
  size_t n = strlen(name);
  if (n < 2 || n >= sizeof text || name[0] != 'e')
    return scps_error_set(err, SCPS_EINVAL, "wire format '%s': not float32, bfloat16 (bf16) or eXmY[bN][s] "
                          "(e4m3, e5m2, e3m0b-2, e2m1s)", name);
  memcpy(text, name, n + 1);
  f->row_scale = text[n - 1] == 's';
  if (f->row_scale) text[n - 1] = '\0';
  scps_error e;
  if (scps_exmy_parse(text, &f->exmy, &e))
    return scps_error_set(err, SCPS_EINVAL, "wire format '%s': %s; expected float32, bfloat16 (bf16) or "
                          "eXmY[bN][s] (e4m3, e5m2, e3m0b-2, e2m1s)", name, e.msg);
  f->kind = SCPS_WIREFMT_EXMY;
  return 0;
}

void scps__wirefmt_name(const scps_wirefmt *f, char buf[SCPS_WIREFMT_NAME_MAX]) {
  if (f->kind != SCPS_WIREFMT_EXMY) {
    snprintf(buf, SCPS_WIREFMT_NAME_MAX, "%s", f->kind == SCPS_WIREFMT_BFLOAT16 ? "bfloat16" : "float32");
    return;
  }
  scps_exmy_format d;
  const bool plain = !scps_exmy_format_init(&d, f->exmy.x, f->exmy.y, SCPS_EXMY_DEFAULT_BIAS, NULL) &&
                     d.bias == f->exmy.bias;
  if (plain)
    snprintf(buf, SCPS_WIREFMT_NAME_MAX, "e%dm%d%s", (int)f->exmy.x, (int)f->exmy.y, f->row_scale ? "s" : "");
  else
    snprintf(buf, SCPS_WIREFMT_NAME_MAX, "e%dm%db%d%s", (int)f->exmy.x, (int)f->exmy.y, (int)f->exmy.bias,
             f->row_scale ? "s" : "");
}

size_t scps__wirefmt_row_bytes(const scps_wirefmt *f, size_t dim) {
  if (f->kind == SCPS_WIREFMT_EXMY) return scps_exmy_row_bytes(&f->exmy, dim, f->row_scale);
  return dim * (f->kind == SCPS_WIREFMT_BFLOAT16 ? 2 : sizeof(float));
}

size_t scps__wirefmt_values_max(const scps_wirefmt *f, size_t bytes) {
  if (f->kind == SCPS_WIREFMT_EXMY) return bytes / (size_t)f->exmy.bits * 8 + 8;
  return bytes / (f->kind == SCPS_WIREFMT_BFLOAT16 ? 2 : sizeof(float));
}

int scps__wirefmt_encode(const scps_wirefmt *f, const float *src, size_t rows, size_t dim, uint8_t *dst,
                        uint64_t seed, uint64_t position, scps_error *err) {
  if (f->kind == SCPS_WIREFMT_FLOAT32) {
    memcpy(dst, src, rows * dim * sizeof(float));
    return 0;
  }
  if (f->kind == SCPS_WIREFMT_BFLOAT16) {
    scps__bf16_encode(src, dst, rows * dim);
    return 0;
  }
  const scps_exmy_rounding r = {seed != 0, seed, position};
  return scps_exmy_encode_interleaved(&f->exmy, f->row_scale, src, rows, dim, dst, &r, err);
}

int scps__wirefmt_decode(const scps_wirefmt *f, const uint8_t *src, size_t rows, size_t dim, float *dst, bool add,
                        scps_error *err) {
  const size_t n = rows * dim;
  if (f->kind == SCPS_WIREFMT_EXMY)
    return scps_exmy_decode_interleaved(&f->exmy, f->row_scale, src, rows, dim, dst, add, err);
  if (f->kind == SCPS_WIREFMT_BFLOAT16 && !add) {
    scps__bf16_decode(src, dst, n);
  } else if (f->kind == SCPS_WIREFMT_BFLOAT16) {
    for (size_t j = 0; j < n; j++) dst[j] += scps__bf16_to_f32((uint16_t)(src[2 * j] | src[2 * j + 1] << 8));
  } else if (!add) {
    memcpy(dst, src, n * sizeof(float));
  } else {
    for (size_t j = 0; j < n; j++) {
      float v;
      memcpy(&v, src + j * sizeof(float), sizeof v);
      dst[j] += v;
    }
  }
  return 0;
}

void scps__wirefmt_to_request(const scps_wirefmt *f, int32_t *format, scps_req_exmy *x) {
  memset(x, 0, sizeof *x);
  *format = f->kind;
  if (f->kind != SCPS_WIREFMT_EXMY) return;
  scps_exmy_format d;
  x->has = true;
  x->exponent_bits = (uint32_t)f->exmy.x;
  x->mantissa_bits = (uint32_t)f->exmy.y;
  x->has_bias = scps_exmy_format_init(&d, f->exmy.x, f->exmy.y, SCPS_EXMY_DEFAULT_BIAS, NULL) != 0 ||
                d.bias != f->exmy.bias;
  x->bias = f->exmy.bias;
  x->row_scale = f->row_scale;
}

int scps__wirefmt_from_request(int32_t format, const scps_req_exmy *x, const char *field, scps_wirefmt *f,
                              scps_error *err) {
  memset(f, 0, sizeof *f);
  if (format < SCPS_WIREFMT_FLOAT32 || format > SCPS_WIREFMT_EXMY)
    return scps_error_set(err, SCPS_EINVAL, "%s %d: unknown FloatFormat (0 float32, 1 bfloat16, 2 eXmY)", field,
                          (int)format);
  f->kind = format;
  if (format != SCPS_WIREFMT_EXMY) {
    if (x->has)
      return scps_error_set(err, SCPS_EINVAL, "%s %d: an ExmyFormat is set too; it goes only with "
                            "FLOAT_FORMAT_EXMY (2)", field, (int)format);
    return 0;
  }
  if (!x->has)
    return scps_error_set(err, SCPS_EINVAL, "%s 2 (eXmY): the request's ExmyFormat is missing", field);
  scps_error e;
  char bias[32] = "";
  if (x->has_bias) snprintf(bias, sizeof bias, " bias %lld", (long long)x->bias);
  if (x->exponent_bits > 8 || x->mantissa_bits > 15 || (x->has_bias && (x->bias < -4096 || x->bias > 4096)) ||
      scps_exmy_format_init(&f->exmy, (int)x->exponent_bits, (int)x->mantissa_bits,
                            x->has_bias ? (int)x->bias : SCPS_EXMY_DEFAULT_BIAS, &e))
    return scps_error_set(err, SCPS_EINVAL, "%s 2 (eXmY): ExmyFormat exponent_bits %u mantissa_bits %u%s: not a "
                          "format (1 + X + Y from 2 to 16 bits, X at most 8, a bias that keeps every value a float32)",
                          field, x->exponent_bits, x->mantissa_bits, bias);
  f->row_scale = x->row_scale;
  return 0;
}
