/* scps_wirefmt: the formats of activations and gradients on the wire
 * (scps.proto FloatFormat and ExmyFormat): their names, row sizes and rows. */
#ifndef SCPS_WIREFMT_H
#define SCPS_WIREFMT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "scps_error.h"
#include "scps_exmy.h"
#include "scps_request.h"

/* FloatFormat's values. */
enum { SCPS_WIREFMT_FLOAT32 = 0, SCPS_WIREFMT_BFLOAT16 = 1, SCPS_WIREFMT_EXMY = 2 };

/* Longest name scps__wirefmt_name writes, NUL included. */
#define SCPS_WIREFMT_NAME_MAX 24

typedef struct scps_wirefmt {
  int32_t kind;          /* SCPS_WIREFMT_* */
  scps_exmy_format exmy; /* kind EXMY */
  bool row_scale;        /* kind EXMY: a scale byte after each row's codes */
} scps_wirefmt;

/* "float32", "bfloat16" (or "bf16"), or "eXmY" with an optional bias
 * "bN" and an optional "s" for a per-row scale ("e4m3", "e3m0b-2",
 * "e2m1s"). SCPS_EINVAL naming the text otherwise. */
int scps__wirefmt_parse(const char *name, scps_wirefmt *f, scps_error *err);

/* The name scps__wirefmt_parse reads back (the bias written only when it is
 * not the default), in buf of SCPS_WIREFMT_NAME_MAX bytes. */
void scps__wirefmt_name(const scps_wirefmt *f, char buf[SCPS_WIREFMT_NAME_MAX]);

/* Bytes of one row of dim values (a multiple of 8 for eXmY rows to be
 * independent blocks, as every stack's dim is). */
size_t scps__wirefmt_row_bytes(const scps_wirefmt *f, size_t dim);

/* Values a message of `bytes` bytes of this format can carry at most:
 * what room its float32 decoding may take. */
size_t scps__wirefmt_values_max(const scps_wirefmt *f, size_t bytes);

/* rows x dim float32 to rows x scps__wirefmt_row_bytes bytes at dst.
 * seed 0 rounds to nearest (ties to even); otherwise eXmY rounds
 * stochastically from (seed, position + the value's index). Returns 0, or
 * SCPS_EINVAL naming a NaN's row and column for eXmY (NaN stays NaN in
 * bfloat16 and float32, for the caller's own check). */
int scps__wirefmt_encode(const scps_wirefmt *f, const float *src, size_t rows, size_t dim, uint8_t *dst,
                        uint64_t seed, uint64_t position, scps_error *err);

/* The inverse into rows x dim floats (add: added to them); src may have
 * any alignment. Returns 0, or SCPS_ERANGE naming a row whose scale is out
 * of the format's range. */
int scps__wirefmt_decode(const scps_wirefmt *f, const uint8_t *src, size_t rows, size_t dim, float *dst, bool add,
                        scps_error *err);

/* The request's fields for f: its FloatFormat, and x (has only for eXmY). */
void scps__wirefmt_to_request(const scps_wirefmt *f, int32_t *format, scps_req_exmy *x);

/* The format a request names (format and its ExmyFormat x): 0, or
 * SCPS_EINVAL naming the field (prefix field, e.g. "activation_format")
 * and value: an unknown FloatFormat, EXMY without x or x without EXMY, or
 * an ExmyFormat scps_exmy_format_init refuses. */
int scps__wirefmt_from_request(int32_t format, const scps_req_exmy *x, const char *field, scps_wirefmt *f,
                              scps_error *err);

#endif
