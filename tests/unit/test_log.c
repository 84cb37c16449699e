/* scps_log: the text and JSON line formats, escaping (every JSON line must
 * pass the strict parser), fields, and lines of many threads written at
 * once never interleaving. stderr goes to a file while a case logs. */
#define _GNU_SOURCE /* strptime, timegm */
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "scps_json.h"
#include "scps_log.h"
#include "scps_test.h"

static char capture_path[256];
static int saved_stderr = -1;

static void capture_begin(void) {
  snprintf(capture_path, sizeof capture_path, "%s/scps_log_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  int fd = mkstemp(capture_path);
  fflush(stderr);
  saved_stderr = dup(2);
  dup2(fd, 2);
  close(fd);
}

/* What was written to stderr since capture_begin (malloc'd). */
static char *capture_end(size_t *len) {
  dup2(saved_stderr, 2);
  close(saved_stderr);
  FILE *f = fopen(capture_path, "rb");
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  *len = fread(buf, 1, (size_t)n, f);
  buf[*len] = '\0';
  fclose(f);
  unlink(capture_path);
  return buf;
}

/* "2026-11-26T20:15:03.123Z": the shape, and within a minute of now. */
static int timestamp_ok(const char *ts, size_t len) {
  static const char shape[] = "dddd-dd-ddTdd:dd:dd.dddZ";
  if (len != sizeof shape - 1) return 0;
  for (size_t i = 0; i < len; i++)
    if (shape[i] == 'd' ? ts[i] < '0' || ts[i] > '9' : ts[i] != shape[i]) return 0;
  struct tm tm = {0};
  if (!strptime(ts, "%Y-%m-%dT%H:%M:%S", &tm)) return 0;
  time_t t = timegm(&tm), now = time(NULL);
  return t > now - 60 && t < now + 60;
}

static void test_text(void) {
  scps__log_set_program("scps-test");
  scps__log_set_format(SCPS_LOG_TEXT);
  capture_begin();
  scps__log(SCPS_LOG_INFO, "process %d of %d serving", 1, 3);
  scps__log(SCPS_LOG_WARN, "two\nlines\tand a bell \a, a trailing newline dropped\n");
  scps__log(SCPS_LOG_ERROR, "%s", "");
  size_t len;
  char *out = capture_end(&len);
  const char *want[] = {" INFO scps-test: process 1 of 3 serving\n",
                        " WARN scps-test: two\\nlines\tand a bell \\x07, a trailing newline dropped\n",
                        " ERROR scps-test: \n"};
  const char *p = out;
  for (int i = 0; i < 3; i++) {
    CHECKF(timestamp_ok(p, 24), "line %d's timestamp: %.30s", i, p);
    CHECKF(!strncmp(p + 24, want[i], strlen(want[i])), "line %d: %s", i, p);
    const char *nl = strchr(p, '\n');
    p = nl ? nl + 1 : p + strlen(p);
  }
  CHECKF(!*p, "nothing more: %s", p);
  free(out);
}

/* Each line of text as a JSON object, or NULL (and a failed check). */
static scps_json *json_line(const char *line, size_t len) {
  scps_json *j = NULL;
  scps_error err;
  int rc = scps__json_parse(line, len, &j, &err);
  CHECKF(rc == 0 && scps__json_typeof(j) == SCPS_JSON_OBJECT, "not a JSON object: %.*s (%s)", (int)len, line,
         rc ? err.msg : "");
  if (rc == 0 && scps__json_typeof(j) == SCPS_JSON_OBJECT) return j;
  scps__json_destroy(j);
  return NULL;
}

static const char *str_of(const scps_json *j, const char *key) {
  const scps_json *v = scps__json_get(j, key);
  return v ? scps__json_string(v, NULL) : NULL;
}

static void test_json(void) {
  scps__log_set_format(SCPS_LOG_JSON);
  scps_error err;
  CHECK_OK(scps__log_set_int("process", 7), NULL);
  CHECK_OK(scps__log_set_int("process", 2), NULL); /* set again: the new value */
  capture_begin();
  const char *msg = "quote \" backslash \\ newline \n tab \t bell \a, caf\xc3\xa9, bad \xff\xc0\x80 and \xed\xa0\x80";
  scps__log(SCPS_LOG_INFO, "%s", msg);
  scps_log_kv kv[] = {SCPS_LOG_INT("step", 12), SCPS_LOG_DOUBLE("seconds", 0.25), SCPS_LOG_DOUBLE("bad", INFINITY),
                      SCPS_LOG_STRING("path", "/a \"b\""), SCPS_LOG_STRING("none", NULL)};
  scps__log_kv(SCPS_LOG_ERROR, kv, 5, "saved step %d", 12);
  scps__log(SCPS_LOG_DEBUG, "debug\n");
  size_t len;
  char *out = capture_end(&len);
  const char *line = out;
  int n = 0;
  for (const char *nl; (nl = strchr(line, '\n')); line = nl + 1, n++) {
    scps_json *j = json_line(line, (size_t)(nl - line));
    if (!j) continue;
    const char *ts = str_of(j, "ts");
    CHECKF(ts && timestamp_ok(ts, strlen(ts)), "line %d: ts %s", n, ts ? ts : "(none)");
    int64_t process = -1;
    CHECK(scps__json_get(j, "process") && !scps__json_int(scps__json_get(j, "process"), &process) && process == 2);
    const char *level = str_of(j, "level");
    if (n == 0) {
      CHECKF(level && !strcmp(level, "info"), "level %s", level ? level : "(none)");
      const char *got = str_of(j, "msg");
      const char *want = "quote \" backslash \\ newline \n tab \t bell \a, caf\xc3\xa9, bad \xef\xbf\xbd\xef\xbf\xbd"
                         "\xef\xbf\xbd and \xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd";
      CHECKF(got && !strcmp(got, want), "msg: %s", got ? got : "(none)");
      CHECK(scps__json_length(j) == 4);
    } else if (n == 1) {
      CHECKF(level && !strcmp(level, "error"), "level %s", level ? level : "(none)");
      CHECK(str_of(j, "msg") && !strcmp(str_of(j, "msg"), "saved step 12"));
      int64_t step = 0;
      double seconds = 0;
      CHECK(!scps__json_int(scps__json_get(j, "step"), &step) && step == 12);
      CHECK(!scps__json_number(scps__json_get(j, "seconds"), &seconds) && seconds == 0.25);
      CHECK(scps__json_typeof(scps__json_get(j, "bad")) == SCPS_JSON_NULL);
      CHECK(str_of(j, "path") && !strcmp(str_of(j, "path"), "/a \"b\""));
      CHECK(scps__json_typeof(scps__json_get(j, "none")) == SCPS_JSON_NULL);
      const char *key;
      scps__json_member(j, 0, &key, NULL);
      CHECKF(!strcmp(key, "ts"), "the first key is ts: %s", key);
    } else {
      CHECK(level && !strcmp(level, "debug") && !strcmp(str_of(j, "msg"), "debug"));
    }
    scps__json_destroy(j);
  }
  CHECKF(n == 3 && !*line, "3 lines, each ending in a newline: %s", out);
  free(out);
  /* A long message is one line too. */
  capture_begin();
  char *big = malloc(100001);
  memset(big, 'x', 100000);
  big[100000] = '\0';
  scps__log(SCPS_LOG_INFO, "%s", big);
  out = capture_end(&len);
  scps_json *j = json_line(out, len);
  CHECK(j && str_of(j, "msg") && strlen(str_of(j, "msg")) == 100000);
  scps__json_destroy(j);
  free(out);
  free(big);
  scps_log_format f;
  CHECK(scps__log_parse_format("--log-format", "json", &f, &err) == 0 && f == SCPS_LOG_JSON);
  CHECK(scps__log_parse_format("--log-format", "text", &f, &err) == 0 && f == SCPS_LOG_TEXT);
  CHECK(scps__log_parse_format("SCPS_LOG_FORMAT", "xml", &f, &err) == SCPS_EINVAL &&
        !strcmp(err.msg, "SCPS_LOG_FORMAT 'xml': expected text or json"));
  CHECK(scps__log_set_int("a", 1) == 0 && scps__log_set_int("b", 1) == 0 && scps__log_set_int("c", 1) == 0);
  CHECK(scps__log_set_int("d", 1) == SCPS_ENOSPC);
}

#define THREADS 8
#define LINES 2000

static void *writer(void *arg) {
  int t = (int)(intptr_t)arg;
  char pad[300];
  memset(pad, 'a' + t, sizeof pad - 1);
  pad[sizeof pad - 1] = '\0';
  for (int i = 0; i < LINES; i++) {
    scps_log_kv kv[] = {SCPS_LOG_INT("thread", t), SCPS_LOG_INT("i", i)};
    scps__log_kv(SCPS_LOG_INFO, kv, 2, "thread %d line %d %s", t, i, pad);
  }
  return NULL;
}

/* Lines of threads logging at once arrive whole, each thread's in order. */
static void test_threads(void) {
  capture_begin();
  pthread_t th[THREADS];
  for (int t = 0; t < THREADS; t++) pthread_create(&th[t], NULL, writer, (void *)(intptr_t)t);
  for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
  size_t len;
  char *out = capture_end(&len);
  int next[THREADS] = {0}, lines = 0, bad = 0;
  for (const char *line = out, *nl; (nl = strchr(line, '\n')); line = nl + 1) {
    lines++;
    scps_json *j = NULL;
    scps_error err;
    int64_t t = -1, i = -1;
    if (scps__json_parse(line, (size_t)(nl - line), &j, &err) || scps__json_int(scps__json_get(j, "thread"), &t) ||
        scps__json_int(scps__json_get(j, "i"), &i) || t < 0 || t >= THREADS || i != next[t]++) {
      if (bad++ < 3) fprintf(stderr, "bad line %d: %.*s\n", lines, (int)(nl - line), line);
    }
    scps__json_destroy(j);
  }
  CHECKF(bad == 0 && lines == THREADS * LINES, "%d lines, %d bad, expected %d", lines, bad, THREADS * LINES);
  free(out);
}

int main(void) {
  test_text();
  test_json();
  test_threads();
  scps__log_set_format(SCPS_LOG_TEXT);
  return scps_test_finish("test_log");
}
