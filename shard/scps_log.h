/* scps_log: a program's log lines on stderr, each with an RFC 3339 UTC
 * timestamp and a level, as text or as one JSON object per line. */
#ifndef SCPS_LOG_H
#define SCPS_LOG_H

#include <stddef.h>
#include <stdint.h>

#include "scps_error.h"

typedef enum scps_log_level { SCPS_LOG_DEBUG, SCPS_LOG_INFO, SCPS_LOG_WARN, SCPS_LOG_ERROR } scps_log_level;

typedef enum scps_log_format {
  /* 2026-11-26T20:15:03.123Z INFO scps-server: MESSAGE */
  SCPS_LOG_TEXT,
  /* {"ts": "2026-11-26T20:15:03.123Z", "level": "info", "msg": "MESSAGE", FIELDS...} */
  SCPS_LOG_JSON,
} scps_log_format;

/* One field of a line: a JSON member in the JSON format; the text format
 * shows only the message, which should say the same. */
typedef enum scps_log_kind { SCPS_LOG_KV_INT, SCPS_LOG_KV_DOUBLE, SCPS_LOG_KV_STRING } scps_log_kind;
typedef struct scps_log_kv {
  const char *key;
  scps_log_kind kind;
  int64_t i;
  double d;     /* not finite: null */
  const char *s; /* NULL: null */
} scps_log_kv;
#define SCPS_LOG_INT(k, v) ((scps_log_kv){(k), SCPS_LOG_KV_INT, (int64_t)(v), 0, NULL})
#define SCPS_LOG_DOUBLE(k, v) ((scps_log_kv){(k), SCPS_LOG_KV_DOUBLE, 0, (double)(v), NULL})
#define SCPS_LOG_STRING(k, v) ((scps_log_kv){(k), SCPS_LOG_KV_STRING, 0, 0, (v)})

/* Process-wide settings, made before the program starts threads: the
 * program's name (the text format's "NAME: " before each message; default
 * "scps"), the format (default text), and integer fields every later JSON
 * line carries (e.g. "process"; a key set again gets the new value; up to 4
 * keys: SCPS_ENOSPC for a fifth). Keys and names must outlive their use. */
void scps__log_set_program(const char *name);
void scps__log_set_format(scps_log_format f);
scps_log_format scps__log_format(void);
int scps__log_set_int(const char *key, int64_t value);

/* "text" or "json" into *out: 0, or SCPS_EINVAL with "WHAT 'S': expected
 * text or json" (what names the option or variable). */
int scps__log_parse_format(const char *what, const char *s, scps_log_format *out, scps_error *err);

/* One line from printf-style fmt (a trailing newline is dropped; other
 * control characters are escaped, so a line stays one line), written with
 * one write() under a process-wide lock: lines of threads never interleave.
 * kv: n fields for the JSON format (NULL when n is 0). Never fails: a line
 * that cannot be built or written is lost. */
void scps__log(scps_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void scps__log_kv(scps_log_level level, const scps_log_kv *kv, int n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
