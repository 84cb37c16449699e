#include "scps_jsonw.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void scps__jsonw_init(scps_jsonw *w) { memset(w, 0, sizeof *w); }

void scps__jsonw_free(scps_jsonw *w) {
  free(w->buf);
  memset(w, 0, sizeof *w);
}

static bool reserve(scps_jsonw *w, size_t extra) {
  if (w->failed) return false;
  if (w->len + extra + 1 <= w->cap) return true;
  size_t cap = w->cap ? w->cap : 1024;
  while (cap < w->len + extra + 1) cap *= 2;
  char *nb = realloc(w->buf, cap);
  if (!nb) {
    w->failed = true;
    return false;
  }
  w->buf = nb;
  w->cap = cap;
  return true;
}

void scps__jsonw_printf(scps_jsonw *w, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0 || !reserve(w, (size_t)n)) return;
  va_start(ap, fmt);
  vsnprintf(w->buf + w->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  w->len += (size_t)n;
}

void scps__jsonw_string(scps_jsonw *w, const char *s) {
  scps__jsonw_printf(w, "\"");
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\') scps__jsonw_printf(w, "\\%c", *p);
    else if (*p < 0x20) scps__jsonw_printf(w, "\\u%04x", *p);
    else scps__jsonw_printf(w, "%c", *p);
  }
  scps__jsonw_printf(w, "\"");
}

void scps__jsonw_double(scps_jsonw *w, double d) { scps__jsonw_printf(w, "%.17g", d); }

int scps__jsonw_finish(const scps_jsonw *w, const char *what, scps_error *err) {
  if (w->failed) return scps_error_set(err, SCPS_ENOMEM, "%s: out of memory writing JSON", what);
  return 0;
}
