/* scps_error: status codes shared by every scps module, and the error record
 * that carries a human-readable message naming the offending field and value. */
#ifndef SCPS_ERROR_H
#define SCPS_ERROR_H

#include <stddef.h>

#include "scps_version.h"

enum {
  SCPS_OK = 0,
  SCPS_EINVAL = -1,     /* malformed argument or input */
  SCPS_ENOMEM = -2,     /* host allocation failed */
  SCPS_ENOSPC = -3,     /* does not fit (SparseCore memory, disk, file size limit) */
  SCPS_ENOENT = -4,     /* unknown name (table, feature, stack, file) */
  SCPS_EEXIST = -5,     /* duplicate name */
  SCPS_ERANGE = -6,     /* id, row or sample out of range */
  SCPS_ELIMIT = -7,     /* per-partition id limit exceeded */
  SCPS_EIO = -8,        /* file system or socket error */
  SCPS_ECORRUPT = -9,   /* checksum or format mismatch in stored data */
  SCPS_EPARSE = -10,    /* text (JSON, flags) could not be parsed */
  SCPS_EMISMATCH = -11, /* two views of the cluster configuration differ */
  SCPS_EUNAVAIL = -12,  /* peer not reachable */
  SCPS_ETIMEDOUT = -13, /* deadline passed */
  SCPS_ESTATE = -14,    /* operation not valid in the current state */
  SCPS_EINTERNAL = -15, /* invariant violated inside scps: a bug */
  SCPS_EUNAUTH = -16,   /* a server does not know the caller (no bearer token, or an unknown one) */
  SCPS_EDENIED = -17,   /* permission denied: the caller's role, or a file's permissions */
  SCPS_ECANCELLED = -18 /* the peer cancelled the call (a server draining for shutdown) */
};

#define SCPS_ERROR_MSG_MAX 512

/* Filled by a failing call when the caller passes one; msg is always
 * NUL-terminated and names what was wrong ("table 't3': embedding_dim 0"). */
typedef struct scps_error {
  int code;
  char msg[SCPS_ERROR_MSG_MAX];
} scps_error;

/* Short constant description of a code ("invalid argument"). */
SCPS_EXTERN const char *scps_strerror(int code);

/* Records code and a printf-style message in err (which may be NULL) and
 * returns code, so failures read `return scps_error_set(err, SCPS_EINVAL, ...)`. */
SCPS_EXTERN int scps_error_set(scps_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Resets err to "no error". */
SCPS_EXTERN void scps_error_clear(scps_error *err);

#endif
