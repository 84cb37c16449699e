/* scps_auth: who may connect to an scps-server and as whom: its TLS
 * credentials, the bearer tokens and their roles, the loopback rule. */
#ifndef SCPS_AUTH_H
#define SCPS_AUTH_H

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <stdbool.h>
#include <stdint.h>

#include "scps_error.h"

/* A caller's role, from its bearer token; each includes the ones below. */
typedef enum scps_role {
  SCPS_ROLE_NONE = 0,     /* no token, or an unknown one */
  SCPS_ROLE_TRAINING = 1, /* trainers: read the configuration, look up, push */
  SCPS_ROLE_ADMIN = 2     /* operators: everything */
} scps_role;

/* "none", "training" or "admin". */
const char *scps__role_name(scps_role r);

typedef struct scps_token scps_token;

/* What scps__auth_load read: NULL fields are not configured. */
typedef struct scps_auth {
  char *cert_pem, *key_pem; /* the server's certificate chain and key: TLS */
  char *client_ca_pem;      /* roots client certificates must chain to: mutual TLS */
  scps_token *tokens;       /* from the token file; NULL: every caller is admin */
  int n_tokens;
} scps_auth;

/* Reads and checks the files (any may be NULL; cert and key go together,
 * client_ca needs them), before anything slow happens at start, so a bad
 * file stops the start at once, named. A token file holds lines
 * `ROLE TOKEN` (ROLE training or admin, TOKEN 16 or more printable
 * characters, no spaces), blank lines and lines starting with `#`; a
 * malformed line fails naming the file and line; a token file readable by
 * group or others is loaded with a warning on stderr. */
int scps__auth_load(scps_auth *a, const char *cert_file, const char *key_file, const char *client_ca_file,
                   const char *token_file, scps_error *err);

/* The credentials of the listening port: TLS (mutual TLS with client_ca)
 * or plaintext. After grpc_init; the caller releases them. */
grpc_server_credentials *scps__auth_server_credentials(const scps_auth *a);

/* The role of a call's `authorization: Bearer <token>` metadata: the
 * token's, SCPS_ROLE_NONE when it is missing or unknown, SCPS_ROLE_ADMIN
 * without a token file. Takes the same time whichever stored token matches,
 * if any (each is compared through its SHA-256, all of them every time). */
scps_role scps__auth_role(const scps_auth *a, const grpc_metadata_array *md);

/* The role of a bare token (len bytes, as it follows "Bearer "), compared
 * as scps__auth_role compares it: the shared-memory side channel's check. */
scps_role scps__auth_token_role(const scps_auth *a, const char *token, size_t len);

void scps__auth_free(scps_auth *a);

/* Whether a --listen address (host:port, [v6]:port) reaches only this
 * machine: its host is a loopback address, or a name all of whose
 * addresses are. An empty host (every interface) is not. */
bool scps__listen_is_loopback(const char *listen);

#endif
