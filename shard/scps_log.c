#include "scps_log.h"

#include <errno.h>
#include <stdbool.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "scps_jsonw.h"

#define MAX_CONTEXT 4

/* Process-wide: set before the program starts threads, read by every line. */
static const char *program = "scps";
static atomic_int format = SCPS_LOG_TEXT;
static struct {
  const char *key;
  int64_t value;
} context[MAX_CONTEXT];
static int n_context;
/* Held around each line's write(s), so a line cut short by a signal or a
 * full pipe is finished before another begins. */
static pthread_mutex_t write_mu = PTHREAD_MUTEX_INITIALIZER;

void scps__log_set_program(const char *name) { program = name; }
void scps__log_set_format(scps_log_format f) { atomic_store(&format, (int)f); }
scps_log_format scps__log_format(void) { return (scps_log_format)atomic_load(&format); }

int scps__log_set_int(const char *key, int64_t value) {
  for (int i = 0; i < n_context; i++)
    if (!strcmp(context[i].key, key)) {
      context[i].value = value;
      return 0;
    }
  if (n_context == MAX_CONTEXT) return SCPS_ENOSPC;
  context[n_context].key = key;
  context[n_context++].value = value;
  return 0;
}

int scps__log_parse_format(const char *what, const char *s, scps_log_format *out, scps_error *err) {
  if (!strcmp(s, "text"))
    *out = SCPS_LOG_TEXT;
  else if (!strcmp(s, "json"))
    *out = SCPS_LOG_JSON;
  else
    return scps_error_set(err, SCPS_EINVAL, "%s '%s': expected text or json", what, s);
  return 0;
}

static const char *level_name(scps_log_level level, bool upper) {
  static const char *const names[][2] = {{"debug", "DEBUG"}, {"info", "INFO"}, {"warn", "WARN"}, {"error", "ERROR"}};
  int i = level < SCPS_LOG_DEBUG || level > SCPS_LOG_ERROR ? SCPS_LOG_ERROR : (int)level;
  return names[i][upper];
}

/* 2026-11-26T20:15:03.123Z: RFC 3339, UTC, milliseconds. */
static void timestamp(char out[64]) {
  struct timespec ts;
  struct tm tm;
  clock_gettime(CLOCK_REALTIME, &ts);
  gmtime_r(&ts.tv_sec, &tm);
  snprintf(out, 64, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
           tm.tm_min, tm.tm_sec, (int)(ts.tv_nsec / 1000000));
}

/* The message for the text format: control characters but tabs escaped, so
 * that one line stays one line. */
static void text_message(scps_jsonw *w, const char *msg) {
  for (const unsigned char *p = (const unsigned char *)msg; *p; p++) {
    if (*p == '\n') scps__jsonw_printf(w, "\\n");
    else if (*p == '\r') scps__jsonw_printf(w, "\\r");
    else if (*p < 0x20 && *p != '\t') scps__jsonw_printf(w, "\\x%02x", *p);
    else scps__jsonw_printf(w, "%c", *p);
  }
}

/* Bytes of the UTF-8 sequence at p (1 to 4), or 0 when it is not one:
 * overlong forms, surrogates and code points above U+10FFFF included. */
static int utf8_length(const unsigned char *p) {
  int n = p[0] < 0x80 ? 1 : p[0] >= 0xc2 && p[0] <= 0xdf ? 2 : p[0] >= 0xe0 && p[0] <= 0xef ? 3
                              : p[0] >= 0xf0 && p[0] <= 0xf4 ? 4 : 0;
  for (int k = 1; k < n; k++)
    if ((p[k] & 0xc0) != 0x80) return 0;
  if (n == 3 && ((p[0] == 0xe0 && p[1] < 0xa0) || (p[0] == 0xed && p[1] >= 0xa0))) return 0;
  if (n == 4 && ((p[0] == 0xf0 && p[1] < 0x90) || (p[0] == 0xf4 && p[1] >= 0x90))) return 0;
  return n;
}

/* s as a JSON string that any strict parser takes: quotes, backslashes
 * and control characters escaped, and each byte that is not part of valid
 * UTF-8 (a path in another encoding) written as U+FFFD. */
static void json_string(scps_jsonw *w, const char *s) {
  scps__jsonw_printf(w, "\"");
  for (const unsigned char *p = (const unsigned char *)s; *p;) {
    int n = utf8_length(p);
    if (*p == '"' || *p == '\\') scps__jsonw_printf(w, "\\%c", *p);
    else if (*p == '\n') scps__jsonw_printf(w, "\\n");
    else if (*p == '\t') scps__jsonw_printf(w, "\\t");
    else if (*p < 0x20) scps__jsonw_printf(w, "\\u%04x", *p);
    else if (!n) scps__jsonw_printf(w, "\\ufffd");
    else scps__jsonw_printf(w, "%.*s", n, (const char *)p);
    p += n ? n : 1;
  }
  scps__jsonw_printf(w, "\"");
}

static void json_field(scps_jsonw *w, const scps_log_kv *f) {
  scps__jsonw_printf(w, ", ");
  json_string(w, f->key);
  scps__jsonw_printf(w, ": ");
  switch (f->kind) {
  case SCPS_LOG_KV_INT: scps__jsonw_printf(w, "%lld", (long long)f->i); break;
  case SCPS_LOG_KV_DOUBLE:
    if (isfinite(f->d)) scps__jsonw_printf(w, "%.6g", f->d);
    else scps__jsonw_printf(w, "null");
    break;
  case SCPS_LOG_KV_STRING:
    if (f->s) json_string(w, f->s);
    else scps__jsonw_printf(w, "null");
    break;
  }
}

static void write_all(const char *p, size_t n) {
  pthread_mutex_lock(&write_mu);
  while (n > 0) {
    ssize_t k = write(STDERR_FILENO, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    p += k;
    n -= (size_t)k;
  }
  pthread_mutex_unlock(&write_mu);
}

static void emit(scps_log_level level, const scps_log_kv *kv, int n, const char *msg) {
  char ts[64];
  timestamp(ts);
  scps_jsonw w;
  scps__jsonw_init(&w);
  if (scps__log_format() == SCPS_LOG_JSON) {
    scps__jsonw_printf(&w, "{\"ts\": \"%s\", \"level\": \"%s\", \"msg\": ", ts, level_name(level, false));
    json_string(&w, msg);
    for (int i = 0; i < n_context; i++) json_field(&w, &SCPS_LOG_INT(context[i].key, context[i].value));
    for (int i = 0; i < n; i++) json_field(&w, &kv[i]);
    scps__jsonw_printf(&w, "}\n");
  } else {
    scps__jsonw_printf(&w, "%s %s %s: ", ts, level_name(level, true), program);
    text_message(&w, msg);
    scps__jsonw_printf(&w, "\n");
  }
  if (!w.failed) {
    write_all(w.buf, w.len);
  } else {
    char lost[256];
    int k = snprintf(lost, sizeof lost,
                     scps__log_format() == SCPS_LOG_JSON
                         ? "{\"ts\": \"%s\", \"level\": \"%s\", \"msg\": \"a log line was lost: out of memory\"}\n"
                         : "%s %s %s: a log line was lost: out of memory\n",
                     ts, level_name(SCPS_LOG_ERROR, scps__log_format() != SCPS_LOG_JSON), program);
    if (k > 0) write_all(lost, (size_t)k < sizeof lost ? (size_t)k : sizeof lost - 1);
  }
  scps__jsonw_free(&w);
}

static void vlog(scps_log_level level, const scps_log_kv *kv, int n, const char *fmt, va_list ap) {
  char small[1024];
  va_list again;
  va_copy(again, ap);
  int len = vsnprintf(small, sizeof small, fmt, ap);
  char *msg = small;
  if (len >= (int)sizeof small) {
    msg = malloc((size_t)len + 1);
    if (msg)
      vsnprintf(msg, (size_t)len + 1, fmt, again);
    else
      msg = small; /* cut, rather than lost */
  }
  va_end(again);
  if (len < 0) snprintf(small, sizeof small, "(a log message could not be formatted: %s)", fmt);
  size_t end = strlen(msg);
  if (end && msg[end - 1] == '\n') msg[end - 1] = '\0';
  emit(level, kv, n, msg);
  if (msg != small) free(msg);
}

void scps__log(scps_log_level level, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vlog(level, NULL, 0, fmt, ap);
  va_end(ap);
}

void scps__log_kv(scps_log_level level, const scps_log_kv *kv, int n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vlog(level, kv, n, fmt, ap);
  va_end(ap);
}
