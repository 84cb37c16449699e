/* scps_units: byte sizes and bounded integers as command lines write them;
 * everything else refused. */
#include <limits.h>
#include <stdint.h>
#include <string.h>

#include "scps_test.h"
#include "scps_units.h"

static void test_parse_long(void) {
  static const struct {
    const char *s;
    long want;
  } good[] = {{"0", 0}, {"5", 5}, {"-3", -3}, {"65535", 65535}, {"9223372036854775807", LONG_MAX}};
  scps_error err;
  for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
    long v = 42;
    CHECKF(scps__parse_long("--n", good[i].s, LONG_MIN, LONG_MAX, &v, &err) == 0 && v == good[i].want,
           "'%s' -> %ld", good[i].s, v);
  }
  static const char *const bad[] = {"", " 5", "+2", "5 ", "5abc", "0x10", "1e3", "-", "--1",
                                    "99999999999999999999", "- 1"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    long v = 42;
    CHECKF(scps__parse_long("--n", bad[i], LONG_MIN, LONG_MAX, &v, &err) == SCPS_EINVAL && v == 42 &&
               strstr(err.msg, "--n '") && strstr(err.msg, "expected an integer"),
           "'%s' accepted (%ld): %s", bad[i], v, err.msg);
  }
  long v;
  CHECK(scps__parse_long("--n", "0", 1, 10, &v, &err) == SCPS_EINVAL && strstr(err.msg, "[1, 10]"));
  CHECK(scps__parse_long("--n", "11", 1, 10, &v, &err) == SCPS_EINVAL);
  CHECK(scps__parse_long("--n", "10", 1, 10, &v, &err) == 0 && v == 10);
}

static void test_parse_bytes(void) {
  int64_t v;
  CHECK(scps__parse_bytes("65536", &v) == 0 && v == 65536);
  CHECK(scps__parse_bytes("512M", &v) == 0 && v == (int64_t)512 << 20);
  CHECK(scps__parse_bytes("1.5G", &v) == 0 && v == (int64_t)3 << 29);
  CHECK(scps__parse_bytes("4k", &v) == 0 && v == 4096);
  static const char *const bad[] = {"", "0", "0.5", "-1", "1e9", "0x10", " 1", "1 ", "1T", "1MB", "M"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) CHECKF(scps__parse_bytes(bad[i], &v) == -1, "'%s' accepted", bad[i]);
}

int main(void) {
  test_parse_long();
  test_parse_bytes();
  return scps_test_finish("test_units");
}
