#include "scps_client_conn.h"

#include <grpc/grpc_security.h>
#include <stdlib.h>
#include <string.h>

#include "scps_credfile.h"

struct scps_client_conn {
  grpc_channel_credentials *creds;
  bool tls;
  char *server_name;   /* GRPC_SSL_TARGET_NAME_OVERRIDE_ARG, or NULL */
  bool has_token;
  grpc_slice authorization; /* "Bearer <token>" */
};

/* TLS credentials from the files s names. */
static int tls_credentials(const scps_client_security *s, grpc_channel_credentials **out, scps_error *err) {
  *out = NULL;
  if (!s->tls_cert_file != !s->tls_key_file)
    return scps_error_set(err, SCPS_EINVAL, "tls_cert_file and tls_key_file go together (%s given alone)",
                          s->tls_cert_file ? "tls_cert_file" : "tls_key_file");
  char *ca = NULL, *cert = NULL, *key = NULL;
  int rc = s->tls_ca_file ? scps__credfile_read_certs("tls_ca_file", s->tls_ca_file, &ca, err) : 0;
  if (!rc && s->tls_cert_file)
    rc = scps__credfile_read_pair("tls_cert_file", s->tls_cert_file, "tls_key_file", s->tls_key_file, &cert, &key,
                                 err);
  if (!rc) {
    /* gRPC keeps copies of the PEM texts. */
    grpc_ssl_pem_key_cert_pair pair = {key, cert};
    *out = grpc_ssl_credentials_create(ca, cert ? &pair : NULL, NULL, NULL);
    if (!*out) rc = scps_error_set(err, SCPS_EINVAL, "gRPC refused the TLS settings (tls_ca_file, tls_cert_file)");
  }
  if (key) explicit_bzero(key, strlen(key));
  free(ca);
  free(cert);
  free(key);
  return rc;
}

int scps__client_conn_create(const scps_client_security *s, scps_client_conn **out, scps_error *err) {
  *out = NULL;
  scps_client_conn *c = calloc(1, sizeof *c);
  if (!c) return scps_error_set(err, SCPS_ENOMEM, "out of memory");
  c->tls = s && (s->tls || s->tls_ca_file || s->tls_cert_file || s->tls_key_file || s->tls_server_name);
  int rc = 0;
  if (c->tls) {
    rc = tls_credentials(s, &c->creds, err);
    if (!rc && s->tls_server_name && !(c->server_name = strdup(s->tls_server_name)))
      rc = scps_error_set(err, SCPS_ENOMEM, "out of memory");
  } else {
    c->creds = grpc_insecure_credentials_create();
  }
  if (!rc && s && s->token) {
    size_t n = strlen(s->token), bad;
    if (!scps__credfile_token_chars_ok(s->token, n, &bad)) {
      rc = scps_error_set(err, SCPS_EINVAL, n ? "token: character %zu is a space or not printable ASCII"
                                              : "token: empty (NULL for none)", bad + 1);
    } else {
      char *v = malloc(n + 8);
      if (!v) {
        rc = scps_error_set(err, SCPS_ENOMEM, "out of memory");
      } else {
        memcpy(v, "Bearer ", 7);
        memcpy(v + 7, s->token, n + 1);
        c->authorization = grpc_slice_from_copied_buffer(v, n + 7);
        c->has_token = true;
        explicit_bzero(v, n + 7);
        free(v);
      }
    }
  }
  if (rc) {
    scps__client_conn_destroy(c);
    return rc;
  }
  *out = c;
  return 0;
}

grpc_channel *scps__client_conn_channel(const scps_client_conn *c, const char *addr, const grpc_channel_args *args) {
  if (!c->server_name) return grpc_channel_create(addr, c->creds, args);
  size_t n = args ? args->num_args : 0;
  grpc_arg *all = calloc(n + 1, sizeof *all);
  if (!all) return NULL;
  if (n) memcpy(all, args->args, n * sizeof *all);
  all[n].type = GRPC_ARG_STRING;
  all[n].key = GRPC_SSL_TARGET_NAME_OVERRIDE_ARG;
  all[n].value.string = c->server_name;
  grpc_channel_args with = {n + 1, all};
  grpc_channel *ch = grpc_channel_create(addr, c->creds, &with);
  free(all);
  return ch;
}

const char *scps__client_conn_token(const scps_client_conn *c, size_t *len) {
  if (!c->has_token) {
    *len = 0;
    return "";
  }
  *len = GRPC_SLICE_LENGTH(c->authorization) - 7;
  return (const char *)GRPC_SLICE_START_PTR(c->authorization) + 7;
}

void scps__client_conn_metadata(const scps_client_conn *c, grpc_op *op, grpc_metadata *md) {
  if (!c->has_token) return;
  memset(md, 0, sizeof *md);
  md->key = grpc_slice_from_static_string("authorization");
  md->value = c->authorization; /* the call takes its own reference */
  op->data.send_initial_metadata.count = 1;
  op->data.send_initial_metadata.metadata = md;
}

const char *scps__client_conn_why_unconnected(const scps_client_conn *c) {
  return c->tls ? "nothing listens there, it is unreachable, or the TLS handshake failed (a server without TLS, "
                  "roots that do not verify its certificate, a name it was not issued to, no client certificate "
                  "where one is required)"
                : "nothing listens there, it is unreachable, or it serves TLS only (see the TLS settings)";
}

void scps__client_conn_destroy(scps_client_conn *c) {
  if (!c) return;
  if (c->creds) grpc_channel_credentials_release(c->creds);
  if (c->has_token) grpc_slice_unref(c->authorization);
  free(c->server_name);
  free(c);
}
