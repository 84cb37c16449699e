/* scps_security_flags: the security flags of every program that talks to
 * servers (--tls-ca, --tls-cert, ..., --token-file), parsed the same way. */
#ifndef SCPS_SECURITY_FLAGS_H
#define SCPS_SECURITY_FLAGS_H

#include <getopt.h>

#include "scps_client.h"

/* getopt_long values of the flags: above every character a program uses. */
enum {
  SCPS_FLAG_TLS = 0x5c00,
  SCPS_FLAG_TLS_CA,
  SCPS_FLAG_TLS_CERT,
  SCPS_FLAG_TLS_KEY,
  SCPS_FLAG_TLS_SERVER_NAME,
  SCPS_FLAG_TOKEN_FILE
};

/* Entries for a program's struct option array. */
#define SCPS_SECURITY_LONG_OPTIONS                                                                                \
  {"tls", no_argument, 0, SCPS_FLAG_TLS}, {"tls-ca", required_argument, 0, SCPS_FLAG_TLS_CA},                      \
      {"tls-cert", required_argument, 0, SCPS_FLAG_TLS_CERT}, {"tls-key", required_argument, 0, SCPS_FLAG_TLS_KEY}, \
      {"tls-server-name", required_argument, 0, SCPS_FLAG_TLS_SERVER_NAME},                                        \
      {"token-file", required_argument, 0, SCPS_FLAG_TOKEN_FILE}

/* Their --help text, a block of its own after a program's options. */
#define SCPS_SECURITY_USAGE                                                                  \
  "\n"                                                                                       \
  "Servers that protect their port (scps-server --tls-*, --token-file;\n"                    \
  "deploy/SECURITY.md):\n"                                                                   \
  "  --tls                  TLS, verifying the servers with the system's roots\n"          \
  "                         (implied by every --tls-* flag)\n"                              \
  "  --tls-ca FILE          PEM roots that verify the servers' certificates\n"            \
  "  --tls-cert FILE        PEM certificate this client presents (servers with\n"         \
  "                         --tls-client-ca require one), with --tls-key\n"               \
  "  --tls-key FILE         its PEM private key\n"                                          \
  "  --tls-server-name NAME the name the servers' certificates are issued to,\n"          \
  "                         when it is not the host in --servers\n"                       \
  "  --token-file FILE      a file holding the bearer token sent with every call\n"      \
  "                         (a file, so that the token does not show in ps); its\n"       \
  "                         role on the servers says what this may call\n"

/* The flags as read: security for scps_client_options or scps__client_rpc_call. */
typedef struct scps_security_flags {
  scps_client_security security;
  char *token; /* read from --token-file; security.token points here */
} scps_security_flags;

/* Applies getopt_long's opt with arg to f: 1 if opt is one of these flags
 * (--token-file's file is read now: SCPS_EIO unreadable, SCPS_EINVAL not a
 * single token; a file readable by group or others gets a warning on
 * stderr, naming `program`), 0 if it is not one of them, or a negative
 * SCPS_E* code with err naming the flag. */
int scps__security_flags_parse(scps_security_flags *f, const char *program, int opt, const char *arg, scps_error *err);

/* Frees the token read, if any; f is zero afterwards. */
void scps__security_flags_free(scps_security_flags *f);

#endif
