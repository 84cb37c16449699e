#include "scps_auth.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "scps_credfile.h"
#include "scps_log.h"
#include "scps_sha256.h"

/* Shorter tokens could be guessed by trying them. */
#define MIN_TOKEN_CHARS 16

struct scps_token {
  uint8_t sha[SCPS_SHA256_DIGEST_LEN];
  scps_role role;
  int line;
};

const char *scps__role_name(scps_role r) {
  return r == SCPS_ROLE_ADMIN ? "admin" : r == SCPS_ROLE_TRAINING ? "training" : "none";
}

/* One line of a token file (NUL-terminated, without its newline): a token
 * appended to a->tokens, or nothing for a comment or blank line. */
static int parse_token_line(scps_auth *a, const char *path, int line, char *text, scps_error *err) {
  char *save = NULL;
  char *role = strtok_r(text, " \t\r", &save);
  if (!role || role[0] == '#') return 0;
  char *token = strtok_r(NULL, " \t\r", &save);
  char *extra = token ? strtok_r(NULL, " \t\r", &save) : NULL;
  if (!token || extra)
    return scps_error_set(err, SCPS_EINVAL, "--token-file '%s' line %d: expected 'ROLE TOKEN' (two fields), found %s",
                          path, line, token ? "more" : "one");
  scps_role r = !strcmp(role, "admin") ? SCPS_ROLE_ADMIN : !strcmp(role, "training") ? SCPS_ROLE_TRAINING
                                                                                      : SCPS_ROLE_NONE;
  if (r == SCPS_ROLE_NONE)
    return scps_error_set(err, SCPS_EINVAL, "--token-file '%s' line %d: role '%.32s' is neither training nor admin",
                          path, line, role);
  size_t n = strlen(token), bad;
  if (!scps__credfile_token_chars_ok(token, n, &bad))
    return scps_error_set(err, SCPS_EINVAL,
                          "--token-file '%s' line %d: character %zu of the token is not printable ASCII", path, line,
                          bad + 1);
  if (n < MIN_TOKEN_CHARS)
    return scps_error_set(err, SCPS_EINVAL, "--token-file '%s' line %d: the token has %zu characters, at least %d "
                          "are needed", path, line, n, MIN_TOKEN_CHARS);
  scps_token *grown = realloc(a->tokens, sizeof *grown * (size_t)(a->n_tokens + 1));
  if (!grown) return scps_error_set(err, SCPS_ENOMEM, "out of memory");
  a->tokens = grown;
  scps_token *t = &a->tokens[a->n_tokens];
  scps__sha256(token, n, t->sha);
  t->role = r;
  t->line = line;
  for (int i = 0; i < a->n_tokens; i++)
    if (!memcmp(a->tokens[i].sha, t->sha, sizeof t->sha))
      return scps_error_set(err, SCPS_EINVAL, "--token-file '%s' line %d: the same token as line %d", path, line,
                            a->tokens[i].line);
  a->n_tokens++;
  return 0;
}

static int load_tokens(scps_auth *a, const char *path, scps_error *err) {
  char *text;
  int rc = scps__credfile_read("--token-file", path, &text, err);
  if (rc) return rc;
  int line = 0;
  for (char *p = text; *p && !rc;) {
    char *nl = strchr(p, '\n');
    if (nl) *nl = '\0';
    rc = parse_token_line(a, path, ++line, p, err);
    p = nl ? nl + 1 : p + strlen(p);
  }
  /* The file's text holds the tokens in the clear: gone once hashed. */
  explicit_bzero(text, strlen(text));
  free(text);
  if (!rc && !a->n_tokens)
    rc = scps_error_set(err, SCPS_EINVAL, "--token-file '%s': no token in it (lines 'training TOKEN' or 'admin "
                        "TOKEN')", path);
  unsigned mode;
  if (!rc && scps__credfile_exposed(path, &mode))
    scps__log(SCPS_LOG_WARN, "warning: --token-file '%s' is readable by group or others (mode %04o): "
              "chmod 600 it", path, mode);
  return rc;
}

int scps__auth_load(scps_auth *a, const char *cert_file, const char *key_file, const char *client_ca_file,
                   const char *token_file, scps_error *err) {
  memset(a, 0, sizeof *a);
  if (!cert_file != !key_file)
    return scps_error_set(err, SCPS_EINVAL, "--tls-cert and --tls-key go together (%s given alone)",
                          cert_file ? "--tls-cert" : "--tls-key");
  if (client_ca_file && !cert_file)
    return scps_error_set(err, SCPS_EINVAL, "--tls-client-ca needs --tls-cert and --tls-key (mutual TLS is TLS)");
  int rc = 0;
  if (cert_file)
    rc = scps__credfile_read_pair("--tls-cert", cert_file, "--tls-key", key_file, &a->cert_pem, &a->key_pem, err);
  if (!rc && client_ca_file) rc = scps__credfile_read_certs("--tls-client-ca", client_ca_file, &a->client_ca_pem, err);
  if (!rc && token_file) rc = load_tokens(a, token_file, err);
  if (rc) scps__auth_free(a);
  return rc;
}

grpc_server_credentials *scps__auth_server_credentials(const scps_auth *a) {
  if (!a->cert_pem) return grpc_insecure_server_credentials_create();
  grpc_ssl_pem_key_cert_pair pair = {a->key_pem, a->cert_pem};
  grpc_ssl_client_certificate_request_type ask = a->client_ca_pem
                                                     ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                                                     : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE;
  return grpc_ssl_server_credentials_create_ex(a->client_ca_pem, &pair, 1, ask, NULL);
}

/* The token of the first `authorization` entry of md if it reads
 * "Bearer <token>" (the scheme in any case, RFC 6750). */
static bool bearer_token(const grpc_metadata_array *md, const char **token, size_t *len) {
  for (size_t i = 0; i < md->count; i++) {
    const grpc_slice *k = &md->metadata[i].key, *v = &md->metadata[i].value;
    if (GRPC_SLICE_LENGTH(*k) != 13 || memcmp(GRPC_SLICE_START_PTR(*k), "authorization", 13)) continue;
    const char *s = (const char *)GRPC_SLICE_START_PTR(*v);
    size_t n = GRPC_SLICE_LENGTH(*v);
    if (n < 7 || strncasecmp(s, "bearer ", 7)) return false;
    size_t at = 7;
    while (at < n && s[at] == ' ') at++;
    *token = s + at;
    *len = n - at;
    return true;
  }
  return false;
}

scps_role scps__auth_role(const scps_auth *a, const grpc_metadata_array *md) {
  if (!a->tokens) return SCPS_ROLE_ADMIN;
  const char *token;
  size_t len;
  if (!bearer_token(md, &token, &len)) return SCPS_ROLE_NONE;
  return scps__auth_token_role(a, token, len);
}

scps_role scps__auth_token_role(const scps_auth *a, const char *token, size_t len) {
  if (!a->tokens) return SCPS_ROLE_ADMIN;
  uint8_t sha[SCPS_SHA256_DIGEST_LEN];
  scps__sha256(token, len, sha);
  /* Every stored digest is compared in full, with no branch on the bytes:
   * how long this takes says nothing about which token matched, or how
   * nearly. */
  unsigned role = SCPS_ROLE_NONE;
  for (int i = 0; i < a->n_tokens; i++) {
    unsigned diff = 0;
    for (size_t k = 0; k < sizeof sha; k++) diff |= (unsigned)(sha[k] ^ a->tokens[i].sha[k]);
    unsigned same = (diff - 1u) >> 31; /* 1 when diff is 0, else 0 (diff <= 255) */
    role |= (0u - same) & (unsigned)a->tokens[i].role;
  }
  return (scps_role)role;
}

void scps__auth_free(scps_auth *a) {
  free(a->cert_pem);
  if (a->key_pem) explicit_bzero(a->key_pem, strlen(a->key_pem));
  free(a->key_pem);
  free(a->client_ca_pem);
  free(a->tokens);
  memset(a, 0, sizeof *a);
}

static bool addr_is_loopback(const struct sockaddr *sa) {
  if (sa->sa_family == AF_INET)
    return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
  if (sa->sa_family == AF_INET6) {
    const struct in6_addr *a6 = &((const struct sockaddr_in6 *)sa)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(a6) || (IN6_IS_ADDR_V4MAPPED(a6) && a6->s6_addr[12] == 127);
  }
  return false;
}

bool scps__listen_is_loopback(const char *listen) {
  char host[256];
  size_t n;
  if (listen[0] == '[') {
    const char *close_br = strchr(listen, ']');
    if (!close_br) return false;
    n = (size_t)(close_br - listen - 1);
    listen++;
  } else {
    const char *colon = strrchr(listen, ':');
    n = colon ? (size_t)(colon - listen) : strlen(listen);
  }
  if (!n || n >= sizeof host) return false;
  memcpy(host, listen, n);
  host[n] = '\0';
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
  if (getaddrinfo(host, NULL, &hints, &ai)) return false;
  bool all = ai != NULL;
  for (struct addrinfo *p = ai; p; p = p->ai_next) all = all && addr_is_loopback(p->ai_addr);
  freeaddrinfo(ai);
  return all;
}
