/* scps_storage: the number format a table's rows (or one optimizer slot) are
 * kept in, float32, bfloat16 or eXmY with a per-row scale, and its row codec. */
#ifndef SCPS_STORAGE_H
#define SCPS_STORAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "scps_error.h"
#include "scps_exmy.h"

/* Longest name scps__storage_name writes, with its terminator. */
#define SCPS_STORAGE_NAME_MAX 32

typedef enum scps_storage_kind {
  SCPS_STORAGE_F32 = 0,  /* float32, as computed: the engine's own arrays */
  SCPS_STORAGE_BF16 = 1, /* bfloat16, little-endian, 2 bytes a value */
  SCPS_STORAGE_EXMY = 2  /* eXmY (scps_exmy.h) codes, then the row's int8 scale */
} scps_storage_kind;

typedef struct scps_storage_format {
  scps_storage_kind kind;
  scps_exmy_format exmy; /* SCPS_STORAGE_EXMY only */
} scps_storage_format;

/* "" or "float32", "bfloat16", or an eXmY name as scps_exmy_parse reads it
 * ("e4m3", "e3m0b-2"). SCPS_EINVAL naming the text when it is none. */
int scps__storage_parse(const char *name, scps_storage_format *f, scps_error *err);

/* The canonical name: "float32", "bfloat16", or "eXmY" with "b<bias>" only
 * where the bias is not the format's default; scps__storage_parse reads it
 * back to the same format. len >= SCPS_STORAGE_NAME_MAX never truncates. */
void scps__storage_name(const scps_storage_format *f, char *out, size_t len);

bool scps__storage_equal(const scps_storage_format *a, const scps_storage_format *b);

/* Bytes one row of dim values takes: 4 dim, 2 dim, or for eXmY
 * scps_exmy_packed_bytes(dim) codes followed by one int8 scale byte. */
size_t scps__storage_row_bytes(const scps_storage_format *f, size_t dim);

/* A format bound to a row width, with what decoding reuses from row to row. */
typedef struct scps_storage_codec {
  scps_storage_format f;
  size_t dim, code_bytes, row_bytes;
  bool lut_valid;  /* eXmY of 8 bits: lut[code] is the code's value at scale 0 */
  float lut[256];
} scps_storage_codec;

void scps__storage_codec_init(scps_storage_codec *c, const scps_storage_format *f, size_t dim);

/* One row of c->dim values from its row_bytes at src: the values exactly as
 * the format (and, for eXmY, the row's scale) gives them, what
 * scps_exmy_decode or scps__bf16_decode give. */
void scps__storage_decode_row(const scps_storage_codec *c, const uint8_t *src, float *dst);

/* One row of c->dim finite values to row_bytes at dst, rounded as r says
 * (NULL: to nearest, ties to even); stochastic draws as scps_exmy.h
 * defines them, position r->position for src[0]. eXmY rows take the scale
 * scps_exmy_row_scale picks; bfloat16 magnitudes past its largest value
 * saturate to it, as eXmY's do. SCPS_EINVAL only for a value that is NaN. */
int scps__storage_encode_row(const scps_storage_codec *c, const float *src, uint8_t *dst,
                            const scps_exmy_rounding *r, scps_error *err);

#endif
