/* scps_flags: a program's options from a table, taken from its command line
 * (--foo-bar) or else from the environment (SCPS_FOO_BAR); host ordinals. */
#ifndef SCPS_FLAGS_H
#define SCPS_FLAGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "scps_error.h"

typedef enum scps_flag_kind {
  SCPS_FLAG_STRING,  /* const char * at offset */
  SCPS_FLAG_INT32,   /* int32_t at offset, an integer in [lo, hi] */
  SCPS_FLAG_INT64,   /* int64_t at offset, an integer in [lo, hi] */
  SCPS_FLAG_BYTES,   /* int64_t at offset: 512M, 4G, ... (scps__parse_bytes), at least lo */
  SCPS_FLAG_CHOICE,  /* int at offset: the index of the value in choices ("on|off") */
  SCPS_FLAG_SWITCH,  /* bool at offset: the flag takes no value; a variable is 1, 0, true or false */
  SCPS_FLAG_CUSTOM,  /* set(dst, value, name, err) */
  SCPS_FLAG_COMMAND, /* --help, --version: command line only; parsing stops there */
} scps_flag_kind;

typedef struct scps_flag {
  const char *name; /* "process-index": --process-index and SCPS_PROCESS_INDEX */
  scps_flag_kind kind;
  size_t offset; /* into the caller's struct dst */
  int64_t lo, hi;
  const char *choices;
  /* name is the flag ("--listen") or the variable ("SCPS_LISTEN") the value
   * came from, for messages: "NAME 'VALUE': expected ...". */
  int (*set)(void *dst, const char *value, const char *name, scps_error *err);
} scps_flag;

/* Fills dst from argv and the environment, one flag of the table at a time
 * in the table's order (a flag that must act first, like a log format,
 * comes first): each of its occurrences on the command line in turn (the
 * last wins), or, when it has none, the variable prefix + its name in upper
 * case with '-' as '_' (prefix "SCPS_": SCPS_PROCESS_INDEX), unless that is
 * unset or empty. Variables that name no flag are ignored.
 *
 * *command: a COMMAND flag on the command line (then nothing is applied
 * and the environment is not read), else NULL. Returns 0; SCPS_EPARSE for
 * an unknown flag, a missing or unwanted value, or an argument that is no
 * flag (callers show their usage), after the flags were applied; or the
 * first bad value's error, naming the flag or variable and the value. */
int scps__flags_parse(const scps_flag *flags, int n, int argc, char **argv, const char *prefix, void *dst,
                      const scps_flag **command, scps_error *err);

/* The variable of flag name: prefix + name in upper case, '-' as '_'. */
void scps__flags_env_name(const char *prefix, const char *name, char *out, size_t cap);

/* A Kubernetes StatefulSet's pod ordinal: the trailing "-N" of the host
 * name's first label (pod scps-2, or scps-2.scps.default.svc, is 2), N in
 * [0, max]. The host name is $SCPS_HOSTNAME when set and not empty, else
 * gethostname(); it goes to host (cap bytes) for messages. SCPS_EINVAL
 * naming the host name when it has no such ordinal. */
int scps__flags_host_ordinal(int64_t max, int64_t *out, char *host, size_t cap, scps_error *err);

#endif
