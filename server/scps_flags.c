#include "scps_flags.h"

#include <ctype.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "scps_units.h"

/* getopt_long's code for table entry i: above every character. */
#define CODE(i) (256 + (i))
#define NAME_MAX_LEN 64

void scps__flags_env_name(const char *prefix, const char *name, char *out, size_t cap) {
  size_t k = 0;
  for (const char *p = prefix; *p && k + 1 < cap; p++) out[k++] = *p;
  for (const char *p = name; *p && k + 1 < cap; p++) out[k++] = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
  if (cap) out[k] = '\0';
}

/* "1M" for 1 << 20: the bound of a byte size in the words of its flag. */
static void bytes_text(int64_t v, char *out, size_t cap) {
  static const char units[] = "GMK";
  for (int u = 0; u < 3; u++) {
    int64_t scale = (int64_t)1 << (10 * (3 - u));
    if (v >= scale && v % scale == 0) {
      snprintf(out, cap, "%lld%c", (long long)(v / scale), units[u]);
      return;
    }
  }
  snprintf(out, cap, "%lld", (long long)v);
}

/* "on|off" -> "on or off"; "a|b|c" -> "a, b or c". */
static void choices_text(const char *choices, char *out, size_t cap) {
  size_t k = 0;
  for (const char *p = choices; *p && k + 4 < cap; p++) {
    if (*p != '|') {
      out[k++] = *p;
      continue;
    }
    const char *sep = strchr(p + 1, '|') ? ", " : " or ";
    for (const char *s = sep; *s && k + 1 < cap; s++) out[k++] = *s;
  }
  out[k] = '\0';
}

static int choice_index(const char *choices, const char *v) {
  size_t len = strlen(v);
  int i = 0;
  for (const char *p = choices;; i++) {
    const char *bar = strchr(p, '|');
    size_t n = bar ? (size_t)(bar - p) : strlen(p);
    if (n == len && !strncmp(p, v, n)) return i;
    if (!bar) return -1;
    p = bar + 1;
  }
}

/* One value of flag f, from the command line (from_env false: a SWITCH has
 * no value) or a variable, into dst. */
static int apply(const scps_flag *f, const char *value, const char *name, bool from_env, void *dst,
                 scps_error *err) {
  char *at = (char *)dst + f->offset;
  long v;
  int64_t bytes;
  switch (f->kind) {
  case SCPS_FLAG_STRING: *(const char **)at = value; return 0;
  case SCPS_FLAG_INT32:
  case SCPS_FLAG_INT64: {
    int rc = scps__parse_long(name, value, (long)f->lo, (long)f->hi, &v, err);
    if (rc) return rc;
    if (f->kind == SCPS_FLAG_INT32) *(int32_t *)at = (int32_t)v;
    else *(int64_t *)at = (int64_t)v;
    return 0;
  }
  case SCPS_FLAG_BYTES:
    if (scps__parse_bytes(value, &bytes) || bytes < f->lo) {
      char lo[32];
      bytes_text(f->lo, lo, sizeof lo);
      return f->lo > 1 ? scps_error_set(err, SCPS_EINVAL, "%s '%s': expected bytes of at least %s, like 512M or 4G",
                                        name, value, lo)
                       : scps_error_set(err, SCPS_EINVAL, "%s '%s': expected bytes like 512M or 4G", name, value);
    }
    *(int64_t *)at = bytes;
    return 0;
  case SCPS_FLAG_CHOICE: {
    int i = choice_index(f->choices, value);
    if (i < 0) {
      char text[128];
      choices_text(f->choices, text, sizeof text);
      return scps_error_set(err, SCPS_EINVAL, "%s '%s': expected %s", name, value, text);
    }
    *(int *)at = i;
    return 0;
  }
  case SCPS_FLAG_SWITCH:
    if (!from_env) *(bool *)at = true;
    else if (!strcmp(value, "1") || !strcasecmp(value, "true")) *(bool *)at = true;
    else if (!strcmp(value, "0") || !strcasecmp(value, "false")) *(bool *)at = false;
    else return scps_error_set(err, SCPS_EINVAL, "%s '%s': expected 1, 0, true or false", name, value);
    return 0;
  case SCPS_FLAG_CUSTOM: return f->set(dst, value, name, err);
  case SCPS_FLAG_COMMAND: return 0;
  }
  return scps_error_set(err, SCPS_EINTERNAL, "flag --%s: unknown kind %d", f->name, (int)f->kind);
}

/* The first thing wrong with argv's flags, noted while getopt goes on. */
static void note_usage(scps_error *usage, const char *fmt, const char *what) {
  if (usage->code) return;
  scps_error_set(usage, SCPS_EPARSE, fmt, what);
}

int scps__flags_parse(const scps_flag *flags, int n, int argc, char **argv, const char *prefix, void *dst,
                      const scps_flag **command, scps_error *err) {
  *command = NULL;
  struct option *opts = calloc((size_t)n + 1, sizeof *opts);
  /* (flag, value) of each flag on the command line, in order. */
  int *which = calloc((size_t)argc + 1, sizeof *which);
  char **values = calloc((size_t)argc + 1, sizeof *values);
  int rc = 0, given = 0;
  if (!opts || !which || !values) {
    rc = scps_error_set(err, SCPS_ENOMEM, "out of memory parsing %d flags", argc);
    goto out;
  }
  for (int i = 0; i < n; i++) {
    bool bare = flags[i].kind == SCPS_FLAG_SWITCH || flags[i].kind == SCPS_FLAG_COMMAND;
    opts[i] = (struct option){flags[i].name, bare ? no_argument : required_argument, NULL, CODE(i)};
  }
  scps_error usage = {0};
  opterr = 0;
  optind = 0; /* getopt starts afresh: every call parses the whole of argv */
  int c;
  while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
    if (c == ':') {
      note_usage(&usage, "%s needs a value", argv[optind - 1]);
    } else if (c == '?') {
      note_usage(&usage, optopt >= CODE(0) ? "%s takes no value" : "unrecognized option '%s'", argv[optind - 1]);
    } else {
      which[given] = c - CODE(0);
      values[given++] = optarg;
      if (flags[c - CODE(0)].kind == SCPS_FLAG_COMMAND && !*command) *command = &flags[c - CODE(0)];
    }
  }
  if (optind < argc) note_usage(&usage, "unexpected argument '%s'", argv[optind]);
  if (*command && !usage.code) goto out;
  *command = NULL;
  for (int i = 0; i < n && !rc; i++) {
    if (flags[i].kind == SCPS_FLAG_COMMAND) continue;
    bool on_line = false;
    char name[NAME_MAX_LEN];
    for (int k = 0; k < given && !rc; k++) {
      if (which[k] != i) continue;
      on_line = true;
      snprintf(name, sizeof name, "--%s", flags[i].name);
      rc = apply(&flags[i], values[k], name, false, dst, err);
    }
    if (on_line) continue;
    scps__flags_env_name(prefix, flags[i].name, name, sizeof name);
    const char *v = getenv(name);
    if (v && *v) rc = apply(&flags[i], v, name, true, dst, err);
  }
  if (!rc && usage.code) {
    *err = usage;
    rc = usage.code;
  }
out:
  free(opts);
  free(which);
  free(values);
  return rc;
}

int scps__flags_host_ordinal(int64_t max, int64_t *out, char *host, size_t cap, scps_error *err) {
  const char *env = getenv("SCPS_HOSTNAME");
  if (env && *env) {
    snprintf(host, cap, "%s", env);
  } else if (gethostname(host, cap) || !memchr(host, '\0', cap)) {
    return scps_error_set(err, SCPS_EIO, "cannot read this machine's host name (gethostname)");
  }
  size_t label = strcspn(host, ".");
  size_t digits = 0;
  while (digits < label && host[label - 1 - digits] >= '0' && host[label - 1 - digits] <= '9') digits++;
  if (!digits || digits == label || host[label - 1 - digits] != '-' || digits > 18)
    return scps_error_set(err, SCPS_EINVAL,
                          "host name '%s' does not end in -N, a StatefulSet pod's ordinal (scps-2 is 2)", host);
  int64_t v = 0;
  for (size_t k = label - digits; k < label; k++) v = v * 10 + (host[k] - '0');
  if (v > max)
    return scps_error_set(err, SCPS_EINVAL, "host name '%s': ordinal %lld is above %lld", host, (long long)v,
                          (long long)max);
  *out = v;
  return 0;
}
