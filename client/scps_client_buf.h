/* scps_client_buf: reusable buffers lent to gRPC as slices. A buffer comes
 * back to its owner when gRPC drops the slice's last reference. */
#ifndef SCPS_CLIENT_BUF_H
#define SCPS_CLIENT_BUF_H

#include <grpc/slice.h>
#include <stddef.h>

/* Why: a fresh multi-megabyte malloc is a fresh mmap, and touching it costs
 * one page fault per 4 KiB, which on virtualised hosts dominates a lookup's
 * client time (BENCHMARKS.md). Reusing the same pages costs none. */
typedef struct scps_client_buf scps_client_buf;

/* Lends *slot's buffer as a slice of len bytes, or, if it is still held by
 * gRPC or too small, lets it go and puts a new one in *slot. Returns the
 * slice's first byte (64-byte aligned), or NULL when out of memory (then
 * *slot is unchanged). */
void *scps__client_buf_lend(scps_client_buf **slot, size_t len, grpc_slice *out);

/* The owner lets go of *slot (NULL is fine): freed now, or when gRPC drops
 * its last reference. *slot becomes NULL. */
void scps__client_buf_release(scps_client_buf **slot);

#endif
