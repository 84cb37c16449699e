/* scps_flags: every kind of flag from the command line and from the
 * environment, the command line's precedence, defaults kept, bad values
 * named by flag or variable, usage errors, and host name ordinals. */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "scps_flags.h"
#include "scps_test.h"

typedef struct opts {
  const char *name;
  int32_t count;
  int64_t big, bytes;
  int mode;
  bool verbose;
  char custom[64];
} opts;

static int set_custom(void *dst, const char *v, const char *name, scps_error *err) {
  if (!strcmp(v, "bad")) return scps_error_set(err, SCPS_EINVAL, "%s '%s': not that", name, v);
  snprintf(((opts *)dst)->custom, sizeof ((opts *)dst)->custom, "%s=%s", name, v);
  return 0;
}

static const scps_flag table[] = {
    {"name", SCPS_FLAG_STRING, offsetof(opts, name), 0, 0, NULL, NULL},
    {"count", SCPS_FLAG_INT32, offsetof(opts, count), 1, 100, NULL, NULL},
    {"big-number", SCPS_FLAG_INT64, offsetof(opts, big), 0, (int64_t)1 << 40, NULL, NULL},
    {"bytes", SCPS_FLAG_BYTES, offsetof(opts, bytes), 1 << 20, 0, NULL, NULL},
    {"mode", SCPS_FLAG_CHOICE, offsetof(opts, mode), 0, 0, "fast|safe|slow", NULL},
    {"verbose", SCPS_FLAG_SWITCH, offsetof(opts, verbose), 0, 0, NULL, NULL},
    {"custom", SCPS_FLAG_CUSTOM, 0, 0, 0, NULL, set_custom},
    {"help", SCPS_FLAG_COMMAND, 0, 0, 0, NULL, NULL},
};
#define N_TABLE ((int)(sizeof table / sizeof table[0]))

static const char *vars[] = {"TFL_NAME", "TFL_COUNT", "TFL_BIG_NUMBER", "TFL_BYTES", "TFL_MODE",
                             "TFL_VERBOSE", "TFL_CUSTOM", "TFL_HELP", "TFL_UNKNOWN"};

static void clear_env(void) {
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
}

static opts defaults(void) {
  opts o = {0};
  o.name = "default";
  o.count = 5;
  o.big = 7;
  o.bytes = 1 << 20;
  return o;
}

/* Parses a NULL-terminated argv (argv[0] added) into *o from its defaults. */
static int parse(opts *o, const scps_flag **command, scps_error *err, ...) {
  char *argv[32] = {"prog"};
  int argc = 1;
  va_list ap;
  va_start(ap, err);
  for (char *a; (a = va_arg(ap, char *));) argv[argc++] = a;
  va_end(ap);
  *o = defaults();
  err->code = 0;
  err->msg[0] = '\0';
  return scps__flags_parse(table, N_TABLE, argc, argv, "TFL_", o, command, err);
}

static void test_sources(void) {
  opts o;
  const scps_flag *cmd;
  scps_error err;
  clear_env();
  CHECK_OK(parse(&o, &cmd, &err, NULL), &err);
  CHECK(!cmd && !strcmp(o.name, "default") && o.count == 5 && o.big == 7 && o.mode == 0 && !o.verbose &&
        !o.custom[0]);
  /* Everything from the environment; a variable no flag names is ignored. */
  setenv("TFL_NAME", "from-env", 1);
  setenv("TFL_COUNT", "42", 1);
  setenv("TFL_BIG_NUMBER", "1099511627776", 1);
  setenv("TFL_BYTES", "2G", 1);
  setenv("TFL_MODE", "slow", 1);
  setenv("TFL_VERBOSE", "true", 1);
  setenv("TFL_CUSTOM", "x", 1);
  setenv("TFL_UNKNOWN", "whatever", 1);
  CHECK_OK(parse(&o, &cmd, &err, NULL), &err);
  CHECK(!strcmp(o.name, "from-env") && o.count == 42 && o.big == (int64_t)1 << 40 && o.bytes == (int64_t)2 << 30 &&
        o.mode == 2 && o.verbose);
  CHECKF(!strcmp(o.custom, "TFL_CUSTOM=x"), "the setter is told the variable: %s", o.custom);
  /* The command line wins, flag by flag; the rest still come from the
   * environment. Repeated flags: the last wins. */
  CHECK_OK(parse(&o, &cmd, &err, "--count", "3", "--name=flag", "--count", "4", "--custom", "y", NULL), &err);
  CHECK(!strcmp(o.name, "flag") && o.count == 4 && o.mode == 2 && o.verbose && !strcmp(o.custom, "--custom=y"));
  /* A bad variable under a flag is never read. */
  setenv("TFL_COUNT", "many", 1);
  CHECK_OK(parse(&o, &cmd, &err, "--count", "9", NULL), &err);
  CHECK(o.count == 9);
  /* An empty variable counts as unset. */
  setenv("TFL_COUNT", "", 1);
  CHECK_OK(parse(&o, &cmd, &err, NULL), &err);
  CHECK(o.count == 5);
  /* Switches from the environment. */
  const char *on[] = {"1", "true", "TRUE"}, *off[] = {"0", "false", "False"};
  for (int i = 0; i < 3; i++) {
    setenv("TFL_VERBOSE", on[i], 1);
    CHECK_OK(parse(&o, &cmd, &err, NULL), &err);
    CHECKF(o.verbose, "TFL_VERBOSE=%s", on[i]);
    setenv("TFL_VERBOSE", off[i], 1);
    CHECK_OK(parse(&o, &cmd, &err, NULL), &err);
    CHECKF(!o.verbose, "TFL_VERBOSE=%s", off[i]);
  }
  CHECK_OK(parse(&o, &cmd, &err, "--verbose", NULL), &err);
  CHECK(o.verbose);
  clear_env();
}

static void test_errors(void) {
  opts o;
  const scps_flag *cmd;
  scps_error err;
  clear_env();
  struct {
    const char *var, *value, *msg;
  } bad_env[] = {
      {"TFL_COUNT", "0", "TFL_COUNT '0': expected an integer in [1, 100]"},
      {"TFL_COUNT", " 5", "TFL_COUNT ' 5': expected an integer in [1, 100]"},
      {"TFL_BIG_NUMBER", "1099511627777", "TFL_BIG_NUMBER '1099511627777': expected an integer in [0, 1099511627776]"},
      {"TFL_BYTES", "512K", "TFL_BYTES '512K': expected bytes of at least 1M, like 512M or 4G"},
      {"TFL_BYTES", "lots", "TFL_BYTES 'lots': expected bytes of at least 1M, like 512M or 4G"},
      {"TFL_MODE", "quick", "TFL_MODE 'quick': expected fast, safe or slow"},
      {"TFL_VERBOSE", "yes", "TFL_VERBOSE 'yes': expected 1, 0, true or false"},
      {"TFL_CUSTOM", "bad", "TFL_CUSTOM 'bad': not that"},
  };
  for (size_t i = 0; i < sizeof bad_env / sizeof bad_env[0]; i++) {
    setenv(bad_env[i].var, bad_env[i].value, 1);
    int rc = parse(&o, &cmd, &err, NULL);
    CHECKF(rc == SCPS_EINVAL && !strcmp(err.msg, bad_env[i].msg), "%s=%s: %d %s", bad_env[i].var, bad_env[i].value,
           rc, err.msg);
    unsetenv(bad_env[i].var);
  }
  int rc = parse(&o, &cmd, &err, "--mode", "quick", NULL);
  CHECKF(rc == SCPS_EINVAL && !strcmp(err.msg, "--mode 'quick': expected fast, safe or slow"), "%d %s", rc, err.msg);
  struct {
    const char *arg, *msg;
  } usage[] = {
      {"--bogus", "unrecognized option '--bogus'"},
      {"--verbose=1", "--verbose=1 takes no value"},
      {"--count", "--count needs a value"},
      {"stray", "unexpected argument 'stray'"},
  };
  for (size_t i = 0; i < sizeof usage / sizeof usage[0]; i++) {
    rc = parse(&o, &cmd, &err, "--name", "n", usage[i].arg, NULL);
    CHECKF(rc == SCPS_EPARSE && !strcmp(err.msg, usage[i].msg), "%s: %d %s", usage[i].arg, rc, err.msg);
    /* The flags were applied all the same (a log format among them). */
    CHECKF(!strcmp(o.name, "n") || !strcmp(usage[i].arg, "--count"), "%s: name %s", usage[i].arg, o.name);
  }
  /* --help: nothing else applied, the environment not read. */
  setenv("TFL_COUNT", "many", 1);
  setenv("TFL_HELP", "1", 1);
  rc = parse(&o, &cmd, &err, "--name", "x", "--help", NULL);
  CHECKF(rc == 0 && cmd && !strcmp(cmd->name, "help") && !strcmp(o.name, "default"), "--help: %d %s", rc, err.msg);
  /* A command's variable is no command. */
  rc = parse(&o, &cmd, &err, "--count", "2", NULL);
  CHECK(rc == 0 && !cmd);
  clear_env();
}

static void test_names_and_ordinals(void) {
  char name[64];
  scps__flags_env_name("SCPS_", "checkpoint-min-interval", name, sizeof name);
  CHECK(!strcmp(name, "SCPS_CHECKPOINT_MIN_INTERVAL"));
  scps__flags_env_name("SCPS_", "process-index", name, 10);
  CHECK(!strcmp(name, "SCPS_PROC"));
  struct {
    const char *host;
    int64_t want; /* -1: refused */
  } cases[] = {
      {"scps-2", 2}, {"scps-0", 0}, {"scps-shard-17", 17}, {"scps-2.scps.default.svc.cluster.local", 2},
      {"scps-1023", 1023}, {"scps-1024", -1}, {"scps", -1}, {"scps-", -1}, {"scps2", -1}, {"scps-2a", -1},
      {"scps.svc-2", -1}, {"12", -1}, {"scps-99999999999999999999", -1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    setenv("SCPS_HOSTNAME", cases[i].host, 1);
    int64_t got = -1;
    char host[256];
    scps_error err = {0};
    int rc = scps__flags_host_ordinal(1023, &got, host, sizeof host, &err);
    if (cases[i].want >= 0)
      CHECKF(rc == 0 && got == cases[i].want && !strcmp(host, cases[i].host), "%s: %d %lld %s", cases[i].host, rc,
             (long long)got, err.msg);
    else
      CHECKF(rc == SCPS_EINVAL && strstr(err.msg, cases[i].host), "%s: %d %lld %s", cases[i].host, rc,
             (long long)got, err.msg);
  }
  /* Without SCPS_HOSTNAME (or with it empty), the machine's host name. */
  setenv("SCPS_HOSTNAME", "", 1);
  char real[256], host[256];
  gethostname(real, sizeof real);
  int64_t got;
  scps_error err = {0};
  int rc = scps__flags_host_ordinal(1023, &got, host, sizeof host, &err);
  CHECKF(!strcmp(host, real) && (rc == 0 || strstr(err.msg, real)), "gethostname: %d %s %s", rc, host, err.msg);
  unsetenv("SCPS_HOSTNAME");
}

int main(void) {
  test_sources();
  test_errors();
  test_names_and_ordinals();
  return scps_test_finish("test_flags");
}
