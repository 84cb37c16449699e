/* Tests for scps_json: the DOM and its accessors, strings and escapes,
 * exact-integer detection, strict rejection with line and column, depth and
 * length limits, and robustness against truncated and mutated input. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "scps_json.h"
#include "scps_test.h"

/* Parses a copy without a terminating NUL so ASan catches any read past len. */
static int parse_exact(const char *text, size_t len, scps_json **root, scps_error *err) {
  char *copy = malloc(len ? len : 1);
  memcpy(copy, text, len);
  int rc = scps__json_parse(copy, len, root, err);
  free(copy);
  return rc;
}

static int parse(const char *text, scps_json **root, scps_error *err) {
  return parse_exact(text, strlen(text), root, err);
}

static void expect_error(const char *text, size_t len, const char *fragment) {
  scps_json *root = NULL;
  scps_error err_, *err = &err_;
  scps_error_clear(err);
  int rc = parse_exact(text, len, &root, err);
  CHECKF(rc == SCPS_EPARSE, "input \"%.*s\": rc %d", (int)len, text, rc);
  CHECKF(root == NULL, "input \"%.*s\": root set on failure", (int)len, text);
  CHECKF(err->code == SCPS_EPARSE, "input \"%.*s\": err->code %d", (int)len, text, err->code);
  CHECKF(strstr(err->msg, "line ") && strstr(err->msg, "column "),
         "input \"%.*s\": no position in \"%s\"", (int)len, text, err->msg);
  if (fragment)
    CHECKF(strstr(err->msg, fragment), "input \"%.*s\": \"%s\" lacks \"%s\"", (int)len, text,
           err->msg, fragment);
  scps__json_destroy(root);
}

static void bad(const char *text, const char *fragment) {
  expect_error(text, strlen(text), fragment);
}

static void test_document(void) {
  const char *text =
      "{\"name\": \"dlrm\", \"n\": 42, \"x\": -1.5e2, \"ok\": true, \"no\": false,\n"
      " \"nothing\": null, \"list\": [1, \"two\", [3], {}], \"empty\": [], \"obj\": {\"k\": 7}}";
  scps_json *root;
  scps_error err_, *err = &err_;
  CHECK_OK(parse(text, &root, err), err);
  if (!root) return;
  CHECK(scps__json_typeof(root) == SCPS_JSON_OBJECT);
  CHECK(scps__json_length(root) == 9);

  const char *expected_keys[] = {"name", "n", "x", "ok", "no", "nothing", "list", "empty", "obj"};
  for (size_t i = 0; i < 9; i++) {
    const char *key = NULL;
    size_t key_len = 0;
    const scps_json *v = scps__json_member(root, i, &key, &key_len);
    CHECKF(v && key && !strcmp(key, expected_keys[i]) && key_len == strlen(expected_keys[i]),
           "member %zu: %s", i, key ? key : "(null)");
    CHECK(v == scps__json_get(root, expected_keys[i]));
  }
  CHECK(scps__json_member(root, 9, NULL, NULL) == NULL);
  CHECK(scps__json_get(root, "missing") == NULL);
  CHECK(scps__json_get(root, "nam") == NULL);

  size_t len = 0;
  const char *s = scps__json_string(scps__json_get(root, "name"), &len);
  CHECK(s && !strcmp(s, "dlrm") && len == 4);
  CHECK(scps__json_string(scps__json_get(root, "n"), NULL) == NULL);

  int64_t i64 = 0;
  double d = 0;
  CHECK_OK(scps__json_int(scps__json_get(root, "n"), &i64), err);
  CHECK(i64 == 42);
  CHECK_OK(scps__json_number(scps__json_get(root, "x"), &d), err);
  CHECK(d == -150.0);
  CHECK(scps__json_is_int(scps__json_get(root, "x")));
  CHECK(scps__json_int(scps__json_get(root, "name"), &i64) == SCPS_EINVAL);
  CHECK(scps__json_number(scps__json_get(root, "ok"), &d) == SCPS_EINVAL);

  bool b = false;
  CHECK_OK(scps__json_bool(scps__json_get(root, "ok"), &b), err);
  CHECK(b);
  CHECK_OK(scps__json_bool(scps__json_get(root, "no"), &b), err);
  CHECK(!b);
  CHECK(scps__json_bool(scps__json_get(root, "nothing"), &b) == SCPS_EINVAL);
  CHECK(scps__json_typeof(scps__json_get(root, "nothing")) == SCPS_JSON_NULL);

  const scps_json *list = scps__json_get(root, "list");
  CHECK(scps__json_typeof(list) == SCPS_JSON_ARRAY && scps__json_length(list) == 4);
  CHECK(scps__json_typeof(scps__json_at(list, 0)) == SCPS_JSON_NUMBER);
  CHECK(!strcmp(scps__json_string(scps__json_at(list, 1), NULL), "two"));
  CHECK(scps__json_length(scps__json_at(list, 2)) == 1);
  CHECK(scps__json_typeof(scps__json_at(list, 3)) == SCPS_JSON_OBJECT);
  CHECK(scps__json_length(scps__json_at(list, 3)) == 0);
  CHECK(scps__json_at(list, 4) == NULL);
  CHECK(scps__json_at(root, 0) == NULL);
  CHECK(scps__json_get(list, "x") == NULL);
  CHECK(scps__json_length(scps__json_get(root, "empty")) == 0);
  CHECK(scps__json_length(scps__json_get(root, "n")) == 0);

  const scps_json *obj = scps__json_get(root, "obj");
  CHECK_OK(scps__json_int(scps__json_get(obj, "k"), &i64), err);
  CHECK(i64 == 7);

  /* Positions: "nothing" is on line 2, its value at column 13. */
  const scps_json *nothing = scps__json_get(root, "nothing");
  CHECK(scps__json_line(root) == 1 && scps__json_column(root) == 1);
  CHECKF(scps__json_line(nothing) == 2 && scps__json_column(nothing) == 13, "at %u:%u",
         scps__json_line(nothing), scps__json_column(nothing));

  CHECK(!strcmp(scps__json_type_name(SCPS_JSON_OBJECT), "object"));
  CHECK(!strcmp(scps__json_type_name(SCPS_JSON_BOOL), "boolean"));
  scps__json_destroy(root);

  /* Any value may be the top level; surrounding whitespace is fine. */
  CHECK_OK(parse(" \t\r\n 17 \n", &root, err), err);
  CHECK(scps__json_typeof(root) == SCPS_JSON_NUMBER);
  scps__json_destroy(root);
  CHECK_OK(parse("\"only\"", &root, err), err);
  CHECK(!strcmp(scps__json_string(root, NULL), "only"));
  scps__json_destroy(root);
  CHECK_OK(parse("\xEF\xBB\xBF[null]", &root, err), err);
  CHECK(scps__json_length(root) == 1);
  scps__json_destroy(root);
  scps__json_destroy(NULL);
}

static void check_string(const char *json, const char *bytes, size_t n) {
  scps_json *root;
  scps_error err_, *err = &err_;
  int rc = parse(json, &root, err);
  CHECKF(rc == 0, "%s: %s", json, err->msg);
  if (rc) return;
  size_t len = 0;
  const char *s = scps__json_string(root, &len);
  CHECKF(s && len == n && !memcmp(s, bytes, n) && s[n] == '\0', "%s: got %zu bytes", json, len);
  scps__json_destroy(root);
}

static void test_strings(void) {
  check_string("\"\"", "", 0);
  check_string("\"plain ascii\"", "plain ascii", 11);
  check_string("\"q\\\"b\\\\s\\/\"", "q\"b\\s/", 6);
  check_string("\"\\b\\f\\n\\r\\t\"", "\b\f\n\r\t", 5);
  check_string("\"\\u0041\\u00e9\\u20AC\"", "A\xC3\xA9\xE2\x82\xAC", 6);
  check_string("\"\\u07FF\\u0800\\uFFFF\"", "\xDF\xBF\xE0\xA0\x80\xEF\xBF\xBF", 8);
  /* U+1F600 as a surrogate pair, and the extremes U+10000 and U+10FFFF. */
  check_string("\"\\ud83d\\ude00\"", "\xF0\x9F\x98\x80", 4);
  check_string("\"\\uD800\\uDC00\\uDBFF\\uDFFF\"", "\xF0\x90\x80\x80\xF4\x8F\xBF\xBF", 8);
  check_string("\"a\\u0000b\"", "a\0b", 3);
  /* Raw UTF-8 passes through unchanged. */
  check_string("\"caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80\"", "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80", 14);
  check_string("\"\x7f\"", "\x7f", 1);

  /* A key holding NUL is kept whole and never matches a C string lookup. */
  scps_json *root;
  scps_error err_, *err = &err_;
  CHECK_OK(parse("{\"a\\u0000b\": 1, \"a\": 2}", &root, err), err);
  if (root) {
    const char *key;
    size_t key_len;
    scps__json_member(root, 0, &key, &key_len);
    CHECK(key_len == 3 && !memcmp(key, "a\0b", 3));
    int64_t v = 0;
    CHECK_OK(scps__json_int(scps__json_get(root, "a"), &v), err);
    CHECK(v == 2);
    scps__json_destroy(root);
  }
}

typedef struct number_case {
  const char *text;
  double value;
  bool is_int;
  int64_t int_value;
} number_case;

static void test_numbers(void) {
  static const number_case cases[] = {
      {"0", 0.0, true, 0},
      {"-0", -0.0, true, 0},
      {"7", 7.0, true, 7},
      {"-12", -12.0, true, -12},
      {"1.5", 1.5, false, 0},
      {"0.1", 0.1, false, 0},
      {"-0.0", -0.0, true, 0},
      {"1e3", 1000.0, true, 1000},
      {"1E+2", 100.0, true, 100},
      {"2.50e1", 25.0, true, 25},
      {"12.000", 12.0, true, 12},
      {"1200e-2", 12.0, true, 12},
      {"1201e-2", 12.01, false, 0},
      {"0e400", 0.0, true, 0},
      {"1e-400", 0.0, false, 0},
      {"9007199254740992", 9007199254740992.0, true, (int64_t)1 << 53},
      {"-9007199254740992", -9007199254740992.0, true, -((int64_t)1 << 53)},
      {"9007199254740993", 9007199254740992.0, false, 0},
      {"1.0000000000000000001", 1.0, false, 0},
      {"123456789012345678", 123456789012345678.0, false, 0},
      {"1e16", 1e16, false, 0},
      {"4503599627370496.5", 4503599627370496.5, false, 0},
      {"1.7976931348623157e308", 1.7976931348623157e308, false, 0},
      {"0.000001", 1e-6, false, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const number_case *c = &cases[i];
    scps_json *root;
    scps_error err_, *err = &err_;
    int rc = parse(c->text, &root, err);
    CHECKF(rc == 0, "%s: %s", c->text, err->msg);
    if (rc) continue;
    double d = -1;
    CHECK_OK(scps__json_number(root, &d), err);
    CHECKF(d == c->value && signbit(d) == signbit(c->value), "%s: %.17g", c->text, d);
    CHECKF(scps__json_is_int(root) == c->is_int, "%s: is_int %d", c->text, scps__json_is_int(root));
    int64_t v = -99;
    rc = scps__json_int(root, &v);
    if (c->is_int) CHECKF(rc == 0 && v == c->int_value, "%s: int %lld", c->text, (long long)v);
    else CHECKF(rc == SCPS_EINVAL, "%s: int accepted", c->text);
    scps__json_destroy(root);
  }
}

static void test_errors(void) {
  bad("", "expected a value");
  bad("   \n  ", "line 2, column 3");
  bad("[1,]", "expected a value");
  bad("{\"a\":1,}", "expected a string key");
  bad("[1 2]", "expected ',' or ']'");
  bad("{\"a\" 1}", "expected ':'");
  bad("{\"a\":1 \"b\":2}", "expected ',' or '}'");
  bad("{1:2}", "expected a string key");
  bad("[1] x", "expected end of input");
  bad("[", "found end of input");
  bad("{", "found end of input");
  bad("[[[]]", "expected ',' or ']'");
  bad("01", "leading zeros");
  bad("-01", "leading zeros");
  bad("00000000000000000001", "leading zeros");
  bad("1.", "after the decimal point");
  bad("1.e5", "after the decimal point");
  bad(".5", "expected a value");
  bad("+1", "expected a value");
  bad("-", "expected a digit");
  bad("-a", "expected a digit");
  bad("1e", "exponent");
  bad("1e+", "exponent");
  bad("1e400", "too large");
  bad("-1e400", "too large");
  bad("NaN", "expected a value");
  bad("Infinity", "expected a value");
  bad("tru", "expected 'true'");
  bad("trux", "expected 'true'");
  bad("nul", "expected 'null'");
  bad("False", "expected a value");
  bad("'a'", "expected a value");
  bad("[1] // comment", "expected end of input");
  bad("/* c */ 1", "expected a value");
  bad("\"abc", "close the string");
  bad("\"a\tb\"", "control characters");
  bad("\"a\nb\"", "control characters");
  bad("\"\\x\"", "after '\\'");
  bad("\"\\", "escape");
  bad("\"\\u12\"", "hex digits");
  bad("\"\\u12G4\"", "hex digits");
  bad("\"\\ud800\"", "low surrogate");
  bad("\"\\ud800\\u0041\"", "low surrogate");
  bad("\"\\ud800\\n\"", "low surrogate");
  bad("\"\\udc00\"", "lone low surrogate");
  bad("\"\xff\"", "UTF-8");
  bad("\"\xc0\xaf\"", "UTF-8");          /* overlong '/' */
  bad("\"\xe0\x80\xaf\"", "UTF-8");      /* overlong, 3 bytes */
  bad("\"\xed\xa0\x80\"", "UTF-8");      /* encoded surrogate */
  bad("\"\xf4\x90\x80\x80\"", "UTF-8");  /* above U+10FFFF */
  bad("\"\xe2\x82\"", "UTF-8");          /* truncated sequence */
  bad("\"\x80\"", "UTF-8");              /* stray continuation */
  bad("\xEF\xBB", "expected a value");
  bad("{\"a\":1,\"b\":2,\"a\":3}", "duplicate object key \"a\"");
  expect_error("[1]\0", 4, "byte 0x00");

  /* Line and column of the offending byte, counted from 1, in bytes. */
  bad("{\n  \"a\": 1,\n  \"b\": x\n}", "line 3, column 8");
  bad("[\n\n    1,\n    2\n    3]", "line 5, column 5");
  bad("{\"k\": 1,\n \"k\": 2}", "line 2, column 2");

  /* Duplicates are found in large objects too (sorted rather than pairwise). */
  char big[2048];
  size_t n = 0;
  n += (size_t)snprintf(big + n, sizeof big - n, "{");
  for (int i = 0; i < 40; i++)
    n += (size_t)snprintf(big + n, sizeof big - n, "%s\"key%d\": %d", i ? ", " : "", i == 33 ? 7 : i, i);
  snprintf(big + n, sizeof big - n, "}");
  bad(big, "duplicate object key \"key7\"");

  /* A NULL err is allowed. */
  scps_json *root = (scps_json *)&root;
  CHECK(scps__json_parse("[", 1, &root, NULL) == SCPS_EPARSE);
  CHECK(root == NULL);
}

static void test_limits(void) {
  char deep[2 * (SCPS_JSON_MAX_DEPTH + 1) + 1];
  scps_json *root;
  scps_error err_, *err = &err_;
  /* SCPS_JSON_MAX_DEPTH nested arrays parse, one more does not. */
  for (int depth = SCPS_JSON_MAX_DEPTH; depth <= SCPS_JSON_MAX_DEPTH + 1; depth++) {
    memset(deep, '[', (size_t)depth);
    memset(deep + depth, ']', (size_t)depth);
    int rc = parse_exact(deep, 2 * (size_t)depth, &root, err);
    if (depth == SCPS_JSON_MAX_DEPTH) {
      CHECKF(rc == 0, "depth %d: %s", depth, err->msg);
      const scps_json *v = root;
      int levels = 0;
      while (v && scps__json_typeof(v) == SCPS_JSON_ARRAY) {
        levels++;
        v = scps__json_at(v, 0);
      }
      CHECK(levels == depth);
      scps__json_destroy(root);
    } else {
      CHECKF(rc == SCPS_EPARSE && strstr(err->msg, "nesting"), "depth %d: rc %d %s", depth, rc,
             err->msg);
    }
  }
  /* Deep nesting of objects is limited the same way, without recursion blowing up. */
  size_t huge_depth = 100000;
  char *objs = malloc(huge_depth * 6);
  size_t n = 0;
  for (size_t i = 0; i < huge_depth; i++) {
    memcpy(objs + n, "{\"a\":", 5);
    n += 5;
  }
  CHECK(parse_exact(objs, n, &root, err) == SCPS_EPARSE);
  free(objs);

  /* Only len bytes are read. */
  CHECK_OK(parse_exact("[1,2]garbage", 5, &root, err), err);
  CHECK(scps__json_length(root) == 2);
  scps__json_destroy(root);
  CHECK(scps__json_parse(NULL, 0, &root, err) == SCPS_EPARSE);

  /* A large array and a large object (beyond one arena block). */
  size_t count = 200000;
  char *text = malloc(count * 24 + 16);
  n = 0;
  text[n++] = '[';
  for (size_t i = 0; i < count; i++) n += (size_t)sprintf(text + n, "%s%zu", i ? "," : "", i * 3);
  text[n++] = ']';
  CHECK_OK(parse_exact(text, n, &root, err), err);
  if (root) {
    CHECK(scps__json_length(root) == count);
    int64_t v = 0;
    CHECK_OK(scps__json_int(scps__json_at(root, count - 1), &v), err);
    CHECK(v == (int64_t)(count - 1) * 3);
    scps__json_destroy(root);
  }
  size_t keys = 5000;
  n = 0;
  text[n++] = '{';
  for (size_t i = 0; i < keys; i++)
    n += (size_t)sprintf(text + n, "%s\"k%zu\":\"v%zu\"", i ? "," : "", i, i);
  text[n++] = '}';
  CHECK_OK(parse_exact(text, n, &root, err), err);
  if (root) {
    CHECK(scps__json_length(root) == keys);
    const char *key;
    scps__json_member(root, 4321, &key, NULL);
    CHECK(!strcmp(key, "k4321"));
    const char *s = scps__json_string(scps__json_get(root, "k4999"), NULL);
    CHECK(s && !strcmp(s, "v4999"));
    scps__json_destroy(root);
  }
  free(text);
}

/* Every prefix and many single-byte mutations of a valid document must give
 * either a tree or SCPS_EPARSE, never a crash (ASan watches this test). */
static void test_robustness(void) {
  const char *doc =
      "{\"tables\": [{\"name\": \"t\\u00e9\", \"v\": 1e6, \"w\": [1, -2.5, true, null]}],\n"
      " \"s\": \"\\ud83d\\ude00 caf\xC3\xA9\", \"n\": -0.125e-3, \"o\": {\"a\": {}, \"b\": []}}";
  size_t len = strlen(doc);
  scps_json *root;
  scps_error err_, *err = &err_;
  CHECK_OK(parse(doc, &root, err), err);
  scps__json_destroy(root);
  int ok = 0, failed = 0, other = 0;
  for (size_t cut = 0; cut < len; cut++) {
    int rc = parse_exact(doc, cut, &root, err);
    if (rc == 0) ok++, scps__json_destroy(root);
    else if (rc == SCPS_EPARSE) failed++;
    else other++;
  }
  CHECK(ok == 0); /* no proper prefix of an object is a document */
  CHECK(other == 0);
  char *copy = malloc(len);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  static const char alphabet[] = "{}[]\",:\\u0123456789.eE+-tfnrl \n\x80\xC3\xff";
  for (int iter = 0; iter < 20000; iter++) {
    memcpy(copy, doc, len);
    for (int m = 0; m < 1 + iter % 3; m++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      copy[(x >> 8) % len] = alphabet[(x >> 40) % (sizeof alphabet - 1)];
    }
    int rc = scps__json_parse(copy, len, &root, err);
    if (rc == 0) scps__json_destroy(root);
    else if (rc != SCPS_EPARSE) other++;
  }
  free(copy);
  CHECK(other == 0);
}

int main(void) {
  test_document();
  test_strings();
  test_numbers();
  test_errors();
  test_limits();
  test_robustness();
  return scps_test_finish("test_json");
}
