#include "scps_json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct json_member json_member;

struct scps_json {
  uint8_t type;
  bool is_int;
  uint32_t line, col;
  size_t len; /* string bytes, array elements or object members */
  union {
    bool b;
    struct {
      double d;
      int64_t i; /* meaningful when is_int */
    } num;
    const char *str;
    scps_json *items;
    json_member *members;
  } u;
};

struct json_member {
  const char *key;
  size_t key_len;
  uint32_t key_line, key_col;
  scps_json value;
};

/* Every node, key and string of one document is carved out of a chain of
 * blocks, so destroying the root is one walk over the chain. */
typedef struct arena_block {
  struct arena_block *next;
  size_t size, used;
  max_align_t data[];
} arena_block;

/* The root is the first member so the root pointer is the document pointer. */
typedef struct json_doc {
  scps_json root;
  arena_block *blocks;
} json_doc;

#define ARENA_MIN_BLOCK ((size_t)64 << 10)

/* Children of the containers being parsed wait here until their container
 * closes and they are copied to the arena with the exact count; strings are
 * decoded into bytes. All three grow geometrically and are reused. */
typedef struct parser {
  const char *p, *end;
  uint32_t line;
  const char *line_start;
  scps_error *err;
  json_doc *doc;
  scps_json *vals;
  size_t n_vals, cap_vals;
  json_member *mems;
  size_t n_mems, cap_mems;
  char *bytes;
  size_t n_bytes, cap_bytes;
} parser;

static void *arena_alloc(json_doc *doc, size_t n) {
  const size_t align = sizeof(max_align_t);
  n = (n + align - 1) / align * align;
  arena_block *b = doc->blocks;
  if (!b || b->size - b->used < n) {
    size_t size = n > ARENA_MIN_BLOCK ? n : ARENA_MIN_BLOCK;
    b = malloc(sizeof *b + size);
    if (!b) return NULL;
    b->size = size;
    b->used = 0;
    b->next = doc->blocks;
    doc->blocks = b;
  }
  void *ptr = (char *)b->data + b->used;
  b->used += n;
  return ptr;
}

static int grow(void **buf, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return 0;
  size_t c = *cap ? *cap : 16;
  while (c < need) c *= 2;
  void *nb = realloc(*buf, c * elem);
  if (!nb) return SCPS_ENOMEM;
  *buf = nb;
  *cap = c;
  return 0;
}

static int fail(parser *ps, const char *at, const char *what) {
  uint32_t col = (uint32_t)(at - ps->line_start) + 1;
  if (at >= ps->end)
    return scps_error_set(ps->err, SCPS_EPARSE, "line %u, column %u: %s, found end of input",
                          ps->line, col, what);
  unsigned char c = (unsigned char)*at;
  if (c >= 0x20 && c < 0x7f)
    return scps_error_set(ps->err, SCPS_EPARSE, "line %u, column %u: %s, found '%c'", ps->line,
                          col, what, c);
  return scps_error_set(ps->err, SCPS_EPARSE, "line %u, column %u: %s, found byte 0x%02x",
                        ps->line, col, what, c);
}

static int oom(parser *ps) {
  return scps_error_set(ps->err, SCPS_ENOMEM, "out of memory parsing JSON at line %u", ps->line);
}

static void skip_ws(parser *ps) {
  const char *p = ps->p;
  while (p < ps->end) {
    char c = *p;
    if (c == '\n') {
      ps->line++;
      ps->line_start = p + 1;
    } else if (c != ' ' && c != '\t' && c != '\r') {
      break;
    }
    p++;
  }
  ps->p = p;
}

static int push_byte(parser *ps, char c) {
  if (grow((void **)&ps->bytes, &ps->cap_bytes, ps->n_bytes + 1, 1)) return oom(ps);
  ps->bytes[ps->n_bytes++] = c;
  return 0;
}

static int push_utf8(parser *ps, uint32_t cp) {
  char buf[4];
  size_t n;
  if (cp < 0x80) {
    buf[0] = (char)cp;
    n = 1;
  } else if (cp < 0x800) {
    buf[0] = (char)(0xC0 | (cp >> 6));
    buf[1] = (char)(0x80 | (cp & 0x3F));
    n = 2;
  } else if (cp < 0x10000) {
    buf[0] = (char)(0xE0 | (cp >> 12));
    buf[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    buf[2] = (char)(0x80 | (cp & 0x3F));
    n = 3;
  } else {
    buf[0] = (char)(0xF0 | (cp >> 18));
    buf[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    buf[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    buf[3] = (char)(0x80 | (cp & 0x3F));
    n = 4;
  }
  if (grow((void **)&ps->bytes, &ps->cap_bytes, ps->n_bytes + n, 1)) return oom(ps);
  memcpy(ps->bytes + ps->n_bytes, buf, n);
  ps->n_bytes += n;
  return 0;
}

static int hex4(parser *ps, const char *p, uint32_t *out) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++, p++) {
    if (p >= ps->end) return fail(ps, p, "expected 4 hex digits after \\u");
    char c = *p;
    uint32_t d;
    if (c >= '0' && c <= '9') d = (uint32_t)(c - '0');
    else if (c >= 'a' && c <= 'f') d = (uint32_t)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') d = (uint32_t)(c - 'A' + 10);
    else return fail(ps, p, "expected 4 hex digits after \\u");
    v = v << 4 | d;
  }
  *out = v;
  return 0;
}

/* Length of the well-formed UTF-8 sequence at p (RFC 3629: no overlong forms,
 * no surrogates, nothing above U+10FFFF), or 0. */
static size_t utf8_len(const unsigned char *p, const unsigned char *end) {
  unsigned char c = p[0];
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if ((size_t)(end - p) < n) return 0;
  if (p[1] < lo || p[1] > hi) return 0;
  for (size_t i = 2; i < n; i++)
    if ((p[i] & 0xC0) != 0x80) return 0;
  return n;
}

/* Decodes the string starting at the opening quote into ps->bytes. */
static int scan_string(parser *ps) {
  const char *p = ps->p + 1;
  ps->n_bytes = 0;
  for (;;) {
    const char *run = p;
    while (p < ps->end && *p != '"' && *p != '\\' && (unsigned char)*p >= 0x20 &&
           (unsigned char)*p < 0x80)
      p++;
    if (p > run) {
      size_t n = (size_t)(p - run);
      if (grow((void **)&ps->bytes, &ps->cap_bytes, ps->n_bytes + n, 1)) return oom(ps);
      memcpy(ps->bytes + ps->n_bytes, run, n);
      ps->n_bytes += n;
    }
    if (p >= ps->end) return fail(ps, p, "expected '\"' to close the string");
    unsigned char c = (unsigned char)*p;
    if (c == '"') break;
    if (c < 0x20) return fail(ps, p, "control characters must be escaped in strings");
    if (c >= 0x80) {
      size_t n = utf8_len((const unsigned char *)p, (const unsigned char *)ps->end);
      if (!n) return fail(ps, p, "invalid UTF-8 in string");
      if (grow((void **)&ps->bytes, &ps->cap_bytes, ps->n_bytes + n, 1)) return oom(ps);
      memcpy(ps->bytes + ps->n_bytes, p, n);
      ps->n_bytes += n;
      p += n;
      continue;
    }
    /* backslash */
    const char *esc = p;
    if (++p >= ps->end) return fail(ps, p, "expected an escape character after '\\'");
    char e = *p++;
    char out;
    switch (e) {
    case '"': out = '"'; break;
    case '\\': out = '\\'; break;
    case '/': out = '/'; break;
    case 'b': out = '\b'; break;
    case 'f': out = '\f'; break;
    case 'n': out = '\n'; break;
    case 'r': out = '\r'; break;
    case 't': out = '\t'; break;
    case 'u': {
      uint32_t cp = 0;
      int rc = hex4(ps, p, &cp);
      if (rc) return rc;
      p += 4;
      if (cp >= 0xDC00 && cp <= 0xDFFF)
        return fail(ps, esc, "lone low surrogate; expected a high surrogate \\uD800-\\uDBFF first");
      if (cp >= 0xD800 && cp <= 0xDBFF) {
        uint32_t lo = 0;
        if (ps->end - p < 2 || p[0] != '\\' || p[1] != 'u')
          return fail(ps, p, "expected \\u low surrogate after high surrogate");
        rc = hex4(ps, p + 2, &lo);
        if (rc) return rc;
        if (lo < 0xDC00 || lo > 0xDFFF)
          return fail(ps, p, "expected a low surrogate \\uDC00-\\uDFFF after high surrogate");
        p += 6;
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
      }
      rc = push_utf8(ps, cp);
      if (rc) return rc;
      continue;
    }
    default: return fail(ps, esc + 1, "expected one of \"\\/bfnrtu after '\\'");
    }
    int rc = push_byte(ps, out);
    if (rc) return rc;
  }
  ps->p = p + 1;
  return 0;
}

static int arena_string(parser *ps, const char **out) {
  char *s = arena_alloc(ps->doc, ps->n_bytes + 1);
  if (!s) return oom(ps);
  if (ps->n_bytes) memcpy(s, ps->bytes, ps->n_bytes);
  s[ps->n_bytes] = '\0';
  *out = s;
  return 0;
}

/* Decides from the digits alone whether the number is an integer of
 * magnitude <= 2^53, so no rounding of strtod can make "9007199254740993"
 * or "1.0000000000000000001" look integral. */
static bool exact_int(const char *int_digits, size_t n_int, const char *frac_digits, size_t n_frac,
                      long exp10, bool neg, int64_t *out) {
  char digits[40];
  size_t nd = 0;
  size_t total = n_int + n_frac;
  size_t i = 0;
  /* Skip leading zeros; they never matter. */
  while (i < total && (i < n_int ? int_digits[i] : frac_digits[i - n_int]) == '0') i++;
  if (i == total) {
    *out = 0;
    return true;
  }
  size_t first = i, last = total;
  while ((last - 1 < n_int ? int_digits[last - 1] : frac_digits[last - 1 - n_int]) == '0') last--;
  /* Significand = digits[first, last); value = significand * 10^e. */
  long e = exp10 - (long)n_frac + (long)(total - last);
  if (e < 0) return false;
  if ((long)(last - first) + e > 16) return false; /* >= 10^16 > 2^53 */
  for (i = first; i < last; i++) digits[nd++] = i < n_int ? int_digits[i] : frac_digits[i - n_int];
  uint64_t v = 0;
  for (i = 0; i < nd; i++) v = v * 10 + (uint64_t)(digits[i] - '0');
  for (long k = 0; k < e; k++) v *= 10;
  if (v > (uint64_t)SCPS_JSON_INT_MAX) return false;
  *out = neg ? -(int64_t)v : (int64_t)v;
  return true;
}

static int parse_number(parser *ps, scps_json *v) {
  const char *s = ps->p, *p = s;
  bool neg = false;
  if (*p == '-') {
    neg = true;
    p++;
  }
  const char *int_digits = p;
  if (p >= ps->end || *p < '0' || *p > '9') return fail(ps, p, "expected a digit");
  if (*p == '0') {
    p++;
    if (p < ps->end && *p >= '0' && *p <= '9')
      return fail(ps, p, "leading zeros are not allowed; expected '.', 'e' or the end of the number");
  } else {
    while (p < ps->end && *p >= '0' && *p <= '9') p++;
  }
  size_t n_int = (size_t)(p - int_digits);
  const char *frac_digits = p;
  size_t n_frac = 0;
  if (p < ps->end && *p == '.') {
    p++;
    frac_digits = p;
    while (p < ps->end && *p >= '0' && *p <= '9') p++;
    n_frac = (size_t)(p - frac_digits);
    if (!n_frac) return fail(ps, p, "expected a digit after the decimal point");
  }
  long exp10 = 0;
  if (p < ps->end && (*p == 'e' || *p == 'E')) {
    p++;
    bool eneg = false;
    if (p < ps->end && (*p == '+' || *p == '-')) eneg = *p++ == '-';
    const char *ed = p;
    while (p < ps->end && *p >= '0' && *p <= '9') {
      /* Saturate: anything this large is far outside a double anyway. */
      if (exp10 < 1000000) exp10 = exp10 * 10 + (*p - '0');
      p++;
    }
    if (p == ed) return fail(ps, p, "expected a digit in the exponent");
    if (eneg) exp10 = -exp10;
  }
  /* strtod needs a NUL-terminated copy; the text itself may not have one.
   * The grammar above already accepted only '.' as decimal point, which is
   * what strtod expects under the "C" locale scps runs in. */
  size_t n = (size_t)(p - s);
  if (grow((void **)&ps->bytes, &ps->cap_bytes, n + 1, 1)) return oom(ps);
  memcpy(ps->bytes, s, n);
  ps->bytes[n] = '\0';
  double d = strtod(ps->bytes, NULL);
  if (!isfinite(d)) return fail(ps, s, "number too large for a double");
  v->type = SCPS_JSON_NUMBER;
  v->u.num.d = d;
  v->u.num.i = 0;
  v->is_int = exact_int(int_digits, n_int, frac_digits, n_frac, exp10, neg, &v->u.num.i);
  ps->p = p;
  return 0;
}

static int parse_literal(parser *ps, const char *word, scps_json *v) {
  size_t n = strlen(word);
  if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0) {
    /* Point at the first byte that differs. */
    const char *p = ps->p;
    size_t i = 0;
    while (p < ps->end && i < n && *p == word[i]) p++, i++;
    char what[32];
    snprintf(what, sizeof what, "expected '%s'", word);
    return fail(ps, p, what);
  }
  ps->p += n;
  if (word[0] == 'n') {
    v->type = SCPS_JSON_NULL;
  } else {
    v->type = SCPS_JSON_BOOL;
    v->u.b = word[0] == 't';
  }
  return 0;
}

static int parse_value(parser *ps, int depth, scps_json *v);

static int key_cmp(const void *a, const void *b) {
  const json_member *x = *(const json_member *const *)a, *y = *(const json_member *const *)b;
  size_t n = x->key_len < y->key_len ? x->key_len : y->key_len;
  int c = memcmp(x->key, y->key, n);
  if (c) return c;
  return (x->key_len > y->key_len) - (x->key_len < y->key_len);
}

/* Duplicate keys would let a later member silently override an earlier one
 * (a typo-shaped bug in config files), so they are refused. */
static int check_duplicates(parser *ps, const json_member *m, size_t n) {
  const json_member *dup = NULL;
  if (n <= 16) {
    for (size_t i = 1; i < n && !dup; i++)
      for (size_t j = 0; j < i; j++)
        if (m[i].key_len == m[j].key_len && !memcmp(m[i].key, m[j].key, m[i].key_len)) {
          dup = &m[i];
          break;
        }
  } else {
    const json_member **sorted = malloc(n * sizeof *sorted);
    if (!sorted) return oom(ps);
    for (size_t i = 0; i < n; i++) sorted[i] = &m[i];
    qsort(sorted, n, sizeof *sorted, key_cmp);
    for (size_t i = 1; i < n && !dup; i++)
      if (!key_cmp(&sorted[i - 1], &sorted[i])) dup = sorted[i] > sorted[i - 1] ? sorted[i] : sorted[i - 1];
    free(sorted);
  }
  if (dup)
    return scps_error_set(ps->err, SCPS_EPARSE, "line %u, column %u: duplicate object key \"%.*s\"",
                          dup->key_line, dup->key_col, dup->key_len > 64 ? 64 : (int)dup->key_len,
                          dup->key);
  return 0;
}

static int parse_array(parser *ps, int depth, scps_json *v) {
  size_t base = ps->n_vals;
  ps->p++;
  skip_ws(ps);
  if (ps->p < ps->end && *ps->p == ']') {
    ps->p++;
  } else {
    for (;;) {
      scps_json child;
      int rc = parse_value(ps, depth + 1, &child);
      if (rc) return rc;
      if (grow((void **)&ps->vals, &ps->cap_vals, ps->n_vals + 1, sizeof *ps->vals)) return oom(ps);
      ps->vals[ps->n_vals++] = child;
      skip_ws(ps);
      if (ps->p < ps->end && *ps->p == ',') {
        ps->p++;
        continue;
      }
      if (ps->p < ps->end && *ps->p == ']') {
        ps->p++;
        break;
      }
      return fail(ps, ps->p, "expected ',' or ']' after an array element");
    }
  }
  size_t n = ps->n_vals - base;
  v->type = SCPS_JSON_ARRAY;
  v->len = n;
  v->u.items = NULL;
  if (n) {
    v->u.items = arena_alloc(ps->doc, n * sizeof *v->u.items);
    if (!v->u.items) return oom(ps);
    memcpy(v->u.items, ps->vals + base, n * sizeof *v->u.items);
  }
  ps->n_vals = base;
  return 0;
}

static int parse_object(parser *ps, int depth, scps_json *v) {
  size_t base = ps->n_mems;
  ps->p++;
  skip_ws(ps);
  if (ps->p < ps->end && *ps->p == '}') {
    ps->p++;
  } else {
    for (;;) {
      json_member m;
      if (ps->p >= ps->end || *ps->p != '"')
        return fail(ps, ps->p, "expected a string key for an object member");
      m.key_line = ps->line;
      m.key_col = (uint32_t)(ps->p - ps->line_start) + 1;
      int rc = scan_string(ps);
      if (rc) return rc;
      m.key_len = ps->n_bytes;
      rc = arena_string(ps, &m.key);
      if (rc) return rc;
      skip_ws(ps);
      if (ps->p >= ps->end || *ps->p != ':') return fail(ps, ps->p, "expected ':' after an object key");
      ps->p++;
      rc = parse_value(ps, depth + 1, &m.value);
      if (rc) return rc;
      if (grow((void **)&ps->mems, &ps->cap_mems, ps->n_mems + 1, sizeof *ps->mems)) return oom(ps);
      ps->mems[ps->n_mems++] = m;
      skip_ws(ps);
      if (ps->p < ps->end && *ps->p == ',') {
        ps->p++;
        skip_ws(ps);
        continue;
      }
      if (ps->p < ps->end && *ps->p == '}') {
        ps->p++;
        break;
      }
      return fail(ps, ps->p, "expected ',' or '}' after an object member");
    }
  }
  size_t n = ps->n_mems - base;
  /* An empty object before any member was parsed leaves mems NULL. */
  int rc = n ? check_duplicates(ps, ps->mems + base, n) : 0;
  if (rc) return rc;
  v->type = SCPS_JSON_OBJECT;
  v->len = n;
  v->u.members = NULL;
  if (n) {
    v->u.members = arena_alloc(ps->doc, n * sizeof *v->u.members);
    if (!v->u.members) return oom(ps);
    memcpy(v->u.members, ps->mems + base, n * sizeof *v->u.members);
  }
  ps->n_mems = base;
  return 0;
}

static int parse_value(parser *ps, int depth, scps_json *v) {
  skip_ws(ps);
  memset(v, 0, sizeof *v);
  v->line = ps->line;
  v->col = (uint32_t)(ps->p - ps->line_start) + 1;
  if (ps->p >= ps->end) return fail(ps, ps->p, "expected a value");
  switch (*ps->p) {
  case '{':
  case '[':
    if (depth >= SCPS_JSON_MAX_DEPTH) {
      char what[64];
      snprintf(what, sizeof what, "nesting deeper than %d levels", SCPS_JSON_MAX_DEPTH);
      return fail(ps, ps->p, what);
    }
    return *ps->p == '{' ? parse_object(ps, depth, v) : parse_array(ps, depth, v);
  case '"': {
    int rc = scan_string(ps);
    if (rc) return rc;
    v->type = SCPS_JSON_STRING;
    v->len = ps->n_bytes;
    return arena_string(ps, &v->u.str);
  }
  case 't': return parse_literal(ps, "true", v);
  case 'f': return parse_literal(ps, "false", v);
  case 'n': return parse_literal(ps, "null", v);
  default:
    if (*ps->p == '-' || (*ps->p >= '0' && *ps->p <= '9')) return parse_number(ps, v);
    return fail(ps, ps->p, "expected a value (object, array, string, number, true, false or null)");
  }
}

int scps__json_parse(const char *text, size_t len, scps_json **root, scps_error *err) {
  *root = NULL;
  if (!text && len) return scps_error_set(err, SCPS_EINVAL, "JSON text is NULL but length is %zu", len);
  if (!text) text = "";
  json_doc *doc = calloc(1, sizeof *doc);
  if (!doc) return scps_error_set(err, SCPS_ENOMEM, "out of memory for a JSON document");
  parser ps = {0};
  ps.p = text;
  ps.end = text + len;
  ps.line = 1;
  ps.line_start = text;
  ps.err = err;
  ps.doc = doc;
  if (len >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3)) ps.p += 3;
  int rc = parse_value(&ps, 0, &doc->root);
  if (!rc) {
    skip_ws(&ps);
    if (ps.p < ps.end) rc = fail(&ps, ps.p, "expected end of input after the top-level value");
  }
  free(ps.vals);
  free(ps.mems);
  free(ps.bytes);
  if (rc) {
    scps__json_destroy(&doc->root);
    return rc;
  }
  *root = &doc->root;
  return 0;
}

void scps__json_destroy(scps_json *root) {
  if (!root) return;
  json_doc *doc = (json_doc *)root;
  arena_block *b = doc->blocks;
  while (b) {
    arena_block *next = b->next;
    free(b);
    b = next;
  }
  free(doc);
}

scps_json_type scps__json_typeof(const scps_json *v) { return (scps_json_type)v->type; }

const char *scps__json_type_name(scps_json_type t) {
  switch (t) {
  case SCPS_JSON_NULL: return "null";
  case SCPS_JSON_BOOL: return "boolean";
  case SCPS_JSON_NUMBER: return "number";
  case SCPS_JSON_STRING: return "string";
  case SCPS_JSON_ARRAY: return "array";
  case SCPS_JSON_OBJECT: return "object";
  }
  return "unknown";
}

uint32_t scps__json_line(const scps_json *v) { return v->line; }
uint32_t scps__json_column(const scps_json *v) { return v->col; }

size_t scps__json_length(const scps_json *v) {
  return v->type == SCPS_JSON_ARRAY || v->type == SCPS_JSON_OBJECT ? v->len : 0;
}

const scps_json *scps__json_at(const scps_json *v, size_t i) {
  if (v->type != SCPS_JSON_ARRAY || i >= v->len) return NULL;
  return &v->u.items[i];
}

const scps_json *scps__json_get(const scps_json *v, const char *key) {
  if (v->type != SCPS_JSON_OBJECT) return NULL;
  size_t n = strlen(key);
  for (size_t i = 0; i < v->len; i++) {
    const json_member *m = &v->u.members[i];
    if (m->key_len == n && !memcmp(m->key, key, n)) return &m->value;
  }
  return NULL;
}

const scps_json *scps__json_member(const scps_json *v, size_t i, const char **key, size_t *key_len) {
  if (v->type != SCPS_JSON_OBJECT || i >= v->len) return NULL;
  const json_member *m = &v->u.members[i];
  if (key) *key = m->key;
  if (key_len) *key_len = m->key_len;
  return &m->value;
}

const char *scps__json_string(const scps_json *v, size_t *len) {
  if (v->type != SCPS_JSON_STRING) return NULL;
  if (len) *len = v->len;
  return v->u.str;
}

int scps__json_number(const scps_json *v, double *out) {
  if (v->type != SCPS_JSON_NUMBER) return SCPS_EINVAL;
  *out = v->u.num.d;
  return 0;
}

bool scps__json_is_int(const scps_json *v) { return v->type == SCPS_JSON_NUMBER && v->is_int; }

int scps__json_int(const scps_json *v, int64_t *out) {
  if (!scps__json_is_int(v)) return SCPS_EINVAL;
  *out = v->u.num.i;
  return 0;
}

int scps__json_bool(const scps_json *v, bool *out) {
  if (v->type != SCPS_JSON_BOOL) return SCPS_EINVAL;
  *out = v->u.b;
  return 0;
}
