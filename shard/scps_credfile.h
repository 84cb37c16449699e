/* scps_credfile: the files that say who is who on the wire (PEM certificates
 * and keys, bearer tokens): read whole and checked, errors naming the file. */
#ifndef SCPS_CREDFILE_H
#define SCPS_CREDFILE_H

#include <stdbool.h>
#include <stddef.h>

#include "scps_error.h"

/* Larger files are refused: no certificate chain or token file comes near. */
#define SCPS_CREDFILE_MAX_BYTES (1 << 20)

/* Reads path whole into *text (malloc'ed, NUL-terminated; the caller frees
 * it). `what` names the setting in messages ("--tls-cert"). SCPS_EIO naming
 * the file and the system's reason when it cannot be read; SCPS_EINVAL
 * when it is empty, over SCPS_CREDFILE_MAX_BYTES or holds a NUL byte. */
int scps__credfile_read(const char *what, const char *path, char **text, scps_error *err);

/* Whether path, a file holding a secret, is readable by group or others;
 * *mode receives its permission bits. false when it cannot be stat'ed. */
bool scps__credfile_exposed(const char *path, unsigned *mode);

/* Reads a file of PEM certificates (a chain, or CA roots): at least one,
 * every one parsing. SCPS_EINVAL naming the file otherwise. */
int scps__credfile_read_certs(const char *what, const char *path, char **pem, scps_error *err);

/* Reads a PEM certificate chain and its unencrypted PEM private key and
 * checks that the key belongs to the chain's first certificate: SCPS_EINVAL
 * naming the file that does not parse, or both files when they do not
 * match. */
int scps__credfile_read_pair(const char *cert_what, const char *cert_path, const char *key_what,
                            const char *key_path, char **cert_pem, char **key_pem, scps_error *err);

/* Whether s[0 .. len) may be a bearer token: 1 or more printable ASCII
 * characters other than the space (what an HTTP/2 header value carries
 * unchanged). *bad receives the offset of the first that is not. */
bool scps__credfile_token_chars_ok(const char *s, size_t len, size_t *bad);

#endif
