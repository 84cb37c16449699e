/* scps_json: a strict RFC 8259 JSON parser building a read-only DOM whose
 * every node, key and string lives in one allocation owned by the root. */
#ifndef SCPS_JSON_H
#define SCPS_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "scps_error.h"

/* Nesting deeper than this (arrays and objects) is refused, so hostile input
 * cannot exhaust the stack of the recursive parser. */
#define SCPS_JSON_MAX_DEPTH 64

/* Largest magnitude an integer may have to count as exact: 2^53. */
#define SCPS_JSON_INT_MAX ((int64_t)1 << 53)

typedef enum scps_json_type {
  SCPS_JSON_NULL = 0,
  SCPS_JSON_BOOL = 1,
  SCPS_JSON_NUMBER = 2,
  SCPS_JSON_STRING = 3,
  SCPS_JSON_ARRAY = 4,
  SCPS_JSON_OBJECT = 5
} scps_json_type;

typedef struct scps_json scps_json;

/* Parses exactly len bytes of UTF-8 text (no NUL needed) holding one JSON
 * value with optional surrounding whitespace; a leading UTF-8 byte order mark
 * is skipped. Refuses invalid UTF-8, lone surrogates, duplicate object keys,
 * numbers that overflow a double and nesting deeper than SCPS_JSON_MAX_DEPTH,
 * with SCPS_EPARSE and a message giving line, column (in bytes, both from 1)
 * and what was expected. On success *root owns the whole tree. */
int scps__json_parse(const char *text, size_t len, scps_json **root, scps_error *err);

/* Frees the tree; only for the root returned by scps__json_parse (NULL is fine). */
void scps__json_destroy(scps_json *root);

scps_json_type scps__json_typeof(const scps_json *v);
/* "null", "boolean", "number", "string", "array", "object". */
const char *scps__json_type_name(scps_json_type t);

/* Where the value starts in the text, from 1, column in bytes. */
uint32_t scps__json_line(const scps_json *v);
uint32_t scps__json_column(const scps_json *v);

/* Elements of an array or members of an object; 0 for other types. */
size_t scps__json_length(const scps_json *v);

/* Element i of an array, or NULL when v is not an array or i is out of range. */
const scps_json *scps__json_at(const scps_json *v, size_t i);

/* Member with that key (compared bytewise, so a key holding \u0000 never
 * matches), or NULL when absent or v is not an object. Linear in the member
 * count. */
const scps_json *scps__json_get(const scps_json *v, const char *key);

/* Member i of an object in document order: its value, and its key in *key
 * (NUL-terminated; *key_len, if given, counts bytes up to a possible embedded
 * NUL). NULL when v is not an object or i is out of range. */
const scps_json *scps__json_member(const scps_json *v, size_t i, const char **key, size_t *key_len);

/* A string's bytes, NUL-terminated, and its length in *len (if given), which
 * differs from strlen when the string holds \u0000. NULL if v is not a string. */
const char *scps__json_string(const scps_json *v, size_t *len);

/* The value of a number, or SCPS_EINVAL when v is not one. */
int scps__json_number(const scps_json *v, double *out);

/* True when v is a number whose text denotes an integer of magnitude at most
 * 2^53 exactly ("12", "-0", "1e3" and "2.50e1" do; "1.5", "1e-400" and
 * "9007199254740993" do not). */
bool scps__json_is_int(const scps_json *v);

/* The value of an exact integer (see scps__json_is_int), or SCPS_EINVAL. */
int scps__json_int(const scps_json *v, int64_t *out);

/* The value of true/false, or SCPS_EINVAL when v is not a boolean. */
int scps__json_bool(const scps_json *v, bool *out);

#endif
