#include "scps_credfile.h"

#include <errno.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int scps__credfile_read(const char *what, const char *path, char **text, scps_error *err) {
  *text = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) return scps_error_set(err, SCPS_EIO, "%s '%s': cannot open: %s", what, path, strerror(errno));
  char *buf = malloc(SCPS_CREDFILE_MAX_BYTES + 1);
  if (!buf) {
    fclose(f);
    return scps_error_set(err, SCPS_ENOMEM, "%s '%s': out of memory", what, path);
  }
  size_t n = fread(buf, 1, SCPS_CREDFILE_MAX_BYTES + 1, f);
  int rc = 0;
  if (ferror(f))
    rc = scps_error_set(err, SCPS_EIO, "%s '%s': cannot read: %s", what, path, strerror(errno));
  else if (n > SCPS_CREDFILE_MAX_BYTES)
    rc = scps_error_set(err, SCPS_EINVAL, "%s '%s': larger than %d bytes", what, path, SCPS_CREDFILE_MAX_BYTES);
  else if (n == 0)
    rc = scps_error_set(err, SCPS_EINVAL, "%s '%s': the file is empty", what, path);
  else if (memchr(buf, '\0', n))
    rc = scps_error_set(err, SCPS_EINVAL, "%s '%s': holds a NUL byte (not a text file)", what, path);
  fclose(f);
  if (rc) {
    free(buf);
    return rc;
  }
  buf[n] = '\0';
  *text = buf;
  return 0;
}

bool scps__credfile_exposed(const char *path, unsigned *mode) {
  struct stat st;
  *mode = 0;
  if (stat(path, &st)) return false;
  *mode = (unsigned)(st.st_mode & 07777);
  return (st.st_mode & (S_IRGRP | S_IROTH)) != 0;
}

/* OpenSSL must never prompt on the terminal for a passphrase. */
static int no_passphrase(char *buf, int size, int rwflag, void *u) {
  (void)buf, (void)size, (void)rwflag, (void)u;
  return -1;
}

/* The first certificate of pem (NULL if none parses); *count: how many
 * parse before the text ends, -1 if something after them does not. */
static X509 *parse_certs(const char *pem, int *count) {
  BIO *b = BIO_new_mem_buf(pem, -1);
  X509 *first = NULL;
  *count = 0;
  if (!b) return NULL;
  for (;;) {
    X509 *x = PEM_read_bio_X509(b, NULL, no_passphrase, NULL);
    if (!x) break;
    if (!first)
      first = x;
    else
      X509_free(x);
    (*count)++;
  }
  /* The loop ends at the end of the text (no further PEM block) or at a
   * block that does not parse. */
  unsigned long e = ERR_peek_last_error();
  if (*count && !(ERR_GET_LIB(e) == ERR_LIB_PEM && ERR_GET_REASON(e) == PEM_R_NO_START_LINE)) *count = -1;
  ERR_clear_error();
  BIO_free(b);
  return first;
}

static int check_certs(const char *what, const char *path, const char *pem, X509 **first, scps_error *err) {
  int count;
  X509 *x = parse_certs(pem, &count);
  if (!x || count < 0) {
    X509_free(x);
    return scps_error_set(err, SCPS_EINVAL, "%s '%s': %s", what, path,
                          x ? "a block after the first certificate is not a PEM certificate"
                            : "no PEM certificate in it (expected -----BEGIN CERTIFICATE-----)");
  }
  if (first)
    *first = x;
  else
    X509_free(x);
  return 0;
}

int scps__credfile_read_certs(const char *what, const char *path, char **pem, scps_error *err) {
  int rc = scps__credfile_read(what, path, pem, err);
  if (!rc) rc = check_certs(what, path, *pem, NULL, err);
  if (rc) {
    free(*pem);
    *pem = NULL;
  }
  return rc;
}

int scps__credfile_read_pair(const char *cert_what, const char *cert_path, const char *key_what,
                            const char *key_path, char **cert_pem, char **key_pem, scps_error *err) {
  *key_pem = NULL;
  X509 *cert = NULL;
  EVP_PKEY *key = NULL;
  int rc = scps__credfile_read(cert_what, cert_path, cert_pem, err);
  if (!rc) rc = check_certs(cert_what, cert_path, *cert_pem, &cert, err);
  if (!rc) rc = scps__credfile_read(key_what, key_path, key_pem, err);
  if (!rc) {
    BIO *b = BIO_new_mem_buf(*key_pem, -1);
    key = b ? PEM_read_bio_PrivateKey(b, NULL, no_passphrase, NULL) : NULL;
    BIO_free(b);
    ERR_clear_error();
    if (!key)
      rc = scps_error_set(err, SCPS_EINVAL,
                          "%s '%s': not an unencrypted PEM private key (expected -----BEGIN PRIVATE KEY----- or "
                          "-----BEGIN RSA/EC PRIVATE KEY-----)",
                          key_what, key_path);
  }
  if (!rc && X509_check_private_key(cert, key) != 1)
    rc = scps_error_set(err, SCPS_EINVAL, "%s '%s' is not the private key of %s '%s' (they do not match)", key_what,
                        key_path, cert_what, cert_path);
  ERR_clear_error();
  X509_free(cert);
  EVP_PKEY_free(key);
  if (rc) {
    free(*cert_pem);
    free(*key_pem);
    *cert_pem = *key_pem = NULL;
  }
  return rc;
}

bool scps__credfile_token_chars_ok(const char *s, size_t len, size_t *bad) {
  *bad = 0;
  if (!len) return false;
  for (size_t i = 0; i < len; i++)
    if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f) {
      *bad = i;
      return false;
    }
  return true;
}
