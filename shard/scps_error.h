/* scps_error: status codes shared by every scps module, and the error record
 * that carries a human-readable message naming the offending field and value. */
#ifndef SCPS_ERROR_H
#define SCPS_ERROR_H

#include <stddef.h>

#include "scps_version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* XX(NAME, value, gRPC status, description): every code once. The gRPC
 * status is the one a server answers a call failing with the code with
 * (scps_status.h expands it to GRPC_STATUS_*). A client maps a status back
 * to the first code in this list that names it, so the order decides that
 * (RESOURCE_EXHAUSTED: ENOSPC, FAILED_PRECONDITION: EMISMATCH); a status no
 * code names maps to SCPS_EIO. */
#define SCPS_ERRNO_MAP(XX)                                                                              \
  XX(EINVAL, -1, INVALID_ARGUMENT, "invalid argument")       /* malformed argument or input */          \
  XX(ENOSPC, -3, RESOURCE_EXHAUSTED, "does not fit: memory, disk or a size limit") /* SparseCore memory, \
                                   disk, file size, message size, save interval */ \
  XX(ENOMEM, -2, RESOURCE_EXHAUSTED, "out of host memory")   /* host allocation failed */               \
  XX(ENOENT, -4, NOT_FOUND, "no such name")                  /* unknown table, feature, stack, file */  \
  XX(EEXIST, -5, ALREADY_EXISTS, "duplicate name")                                                      \
  XX(ERANGE, -6, INVALID_ARGUMENT, "value out of range")     /* id, row or sample out of range */       \
  XX(ELIMIT, -7, RESOURCE_EXHAUSTED, "per-partition id limit exceeded")                                 \
  XX(EIO, -8, UNKNOWN, "input/output error")                 /* file system or socket error */          \
  XX(ECORRUPT, -9, DATA_LOSS, "stored data is corrupt")      /* checksum or format mismatch */          \
  XX(EPARSE, -10, INVALID_ARGUMENT, "parse error")           /* text (JSON, flags) */                   \
  XX(EMISMATCH, -11, FAILED_PRECONDITION, "configuration mismatch") /* two views of the cluster differ */ \
  XX(EUNAVAIL, -12, UNAVAILABLE, "peer unavailable")         /* peer not reachable */                   \
  XX(ETIMEDOUT, -13, DEADLINE_EXCEEDED, "deadline exceeded")                                            \
  XX(ESTATE, -14, FAILED_PRECONDITION, "invalid state for this operation")                              \
  XX(EINTERNAL, -15, INTERNAL, "internal error")             /* invariant violated inside scps: a bug */ \
  XX(EUNAUTH, -16, UNAUTHENTICATED, "not authenticated")     /* no bearer token, or an unknown one */   \
  XX(EDENIED, -17, PERMISSION_DENIED, "permission denied")   /* the caller's role, or a file's mode */  \
  XX(ECANCELLED, -18, CANCELLED, "cancelled by the peer")    /* a server draining for shutdown */

enum {
  SCPS_OK = 0,
#define XX(name, value, status, text) SCPS_##name = value,
  SCPS_ERRNO_MAP(XX)
#undef XX
};

#define SCPS_ERROR_MSG_MAX 512

/* Filled by a failing call when the caller passes one; msg is always
 * NUL-terminated and names what was wrong ("table 't3': embedding_dim 0"). */
typedef struct scps_error {
  int code;
  char msg[SCPS_ERROR_MSG_MAX];
} scps_error;

/* Short constant description of a code ("invalid argument"); "unknown
 * error" for a value not in the list. */
SCPS_EXTERN const char *scps_strerror(int code);

/* The code's name ("SCPS_EINVAL"); "SCPS_UNKNOWN" for a value not in the
 * list. */
SCPS_EXTERN const char *scps_err_name(int code);

/* Records code and a printf-style message in err (which may be NULL) and
 * returns code, so failures read `return scps_error_set(err, SCPS_EINVAL, ...)`. */
SCPS_EXTERN int scps_error_set(scps_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Resets err to "no error". */
SCPS_EXTERN void scps_error_clear(scps_error *err);

#ifdef __cplusplus
}
#endif

#endif
