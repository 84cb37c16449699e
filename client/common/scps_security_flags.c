#include "scps_security_flags.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scps_credfile.h"

/* The token of a --token-file: the file's text with the whitespace around
 * it removed, one word. */
static int read_token(const char *path, const char *program, char **out, scps_error *err) {
  char *text;
  int rc = scps__credfile_read("--token-file", path, &text, err);
  if (rc) return rc;
  size_t start = strspn(text, " \t\r\n"), end = strlen(text);
  while (end > start && strchr(" \t\r\n", text[end - 1])) end--;
  size_t bad;
  if (!scps__credfile_token_chars_ok(text + start, end - start, &bad))
    rc = scps_error_set(err, SCPS_EINVAL,
                        end == start ? "--token-file '%s': holds no token"
                                     : "--token-file '%s': expected the token alone, printable ASCII without spaces, "
                                       "on one line (character %zu is not)",
                        path, start + bad + 1);
  if (!rc) {
    memmove(text, text + start, end - start);
    explicit_bzero(text + (end - start), strlen(text + (end - start)));
    *out = text;
    unsigned mode;
    if (scps__credfile_exposed(path, &mode))
      fprintf(stderr, "%s: warning: --token-file '%s' is readable by group or others (mode %04o): chmod 600 it\n",
              program, path, mode);
  } else {
    explicit_bzero(text, strlen(text));
    free(text);
  }
  return rc;
}

int scps__security_flags_parse(scps_security_flags *f, const char *program, int opt, const char *arg, scps_error *err) {
  scps_client_security *s = &f->security;
  switch (opt) {
  case SCPS_FLAG_TLS: s->tls = true; return 1;
  case SCPS_FLAG_TLS_CA: s->tls_ca_file = arg; return 1;
  case SCPS_FLAG_TLS_CERT: s->tls_cert_file = arg; return 1;
  case SCPS_FLAG_TLS_KEY: s->tls_key_file = arg; return 1;
  case SCPS_FLAG_TLS_SERVER_NAME: s->tls_server_name = arg; return 1;
  case SCPS_FLAG_TOKEN_FILE: {
    char *token;
    int rc = read_token(arg, program, &token, err);
    if (rc) return rc;
    if (f->token) explicit_bzero(f->token, strlen(f->token));
    free(f->token);
    f->token = token;
    s->token = token;
    return 1;
  }
  default: return 0;
  }
}

void scps__security_flags_free(scps_security_flags *f) {
  if (f->token) explicit_bzero(f->token, strlen(f->token));
  free(f->token);
  memset(f, 0, sizeof *f);
}
