/* scps_jsonw: a growing text buffer for writing JSON (checkpoint manifests,
 * specs in the workload format): escaped strings, exact doubles. */
#ifndef SCPS_JSONW_H
#define SCPS_JSONW_H

#include <stdbool.h>
#include <stddef.h>

#include "scps_error.h"

/* Appends never fail on the spot: an allocation failure sets `failed`, later
 * appends do nothing and scps__jsonw_finish reports it, so writers need no
 * check after every call. */
typedef struct scps_jsonw {
  char *buf; /* NUL-terminated text, owned */
  size_t len, cap;
  bool failed;
} scps_jsonw;

void scps__jsonw_init(scps_jsonw *w);
void scps__jsonw_free(scps_jsonw *w);

void scps__jsonw_printf(scps_jsonw *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* s as a quoted JSON string, with quotes, backslashes and control bytes escaped. */
void scps__jsonw_string(scps_jsonw *w, const char *s);
/* A finite double with 17 significant digits, so parsing gives it back exactly. */
void scps__jsonw_double(scps_jsonw *w, double d);

/* SCPS_ENOMEM (naming what) if an append failed, else 0. */
int scps__jsonw_finish(const scps_jsonw *w, const char *what, scps_error *err);

#endif
