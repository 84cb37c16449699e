/* scps_slices: a received gRPC message kept as the slices it arrived in:
 * protobuf wire-format reads front to back, and reads from any offset. */
#ifndef SCPS_SLICES_H
#define SCPS_SLICES_H

#include <grpc/byte_buffer.h>
#include <stddef.h>
#include <stdint.h>

/* Protobuf wire types. */
enum { SCPS_WT_VARINT = 0, SCPS_WT_I64 = 1, SCPS_WT_LEN = 2, SCPS_WT_I32 = 5 };

/* Why: a multi-megabyte message arrives as hundreds of slices, and copying
 * it into one buffer before decoding costs a pass over every byte. */
typedef struct scps_slices {
  grpc_slice *s;
  size_t *start;   /* [n + 1]: offset of each slice in the message, then total */
  size_t n, cap;
  size_t total;    /* message bytes */
  size_t pos;      /* read position */
  size_t cur;      /* slice holding pos (== n at the end) */
  const char *why; /* set by a failed read: what was wrong at pos */
} scps_slices;

/* Takes a reference to every slice of bb (bb may be destroyed afterwards).
 * SCPS_EINVAL if the payload cannot be read (compressed with an unknown
 * algorithm), SCPS_ENOMEM. m must be freed either way. */
int scps__slices_init(scps_slices *m, grpc_byte_buffer *bb);
void scps__slices_free(scps_slices *m);

/* Reads at pos and moves past what was read. Each returns 0, or
 * SCPS_EPARSE with m->why set ("truncated", ...) and pos where it failed. */
int scps__slices_varint(scps_slices *m, uint64_t *v);
/* A field's key: its number (never 0) and wire type. */
int scps__slices_key(scps_slices *m, uint32_t *field, int *wire_type);
/* A length prefix whose field must end by limit (fails if pos has already
 * passed limit: a key or varint that ran over its message's end). */
int scps__slices_len(scps_slices *m, size_t limit, size_t *len);
/* n bytes into dst, or skipped when dst is NULL. */
int scps__slices_read(scps_slices *m, void *dst, size_t n);
/* The rest of a field of that wire type whose key was just read. */
int scps__slices_skip_field(scps_slices *m, int wire_type, size_t limit);

/* Moves the read position to off (<= total). */
void scps__slices_seek(scps_slices *m, size_t off);

/* The message's bytes from offset off on, as far as they are contiguous:
 * returns a pointer and sets *avail (0 and NULL at or beyond the end). */
const uint8_t *scps__slices_at(const scps_slices *m, size_t off, size_t *avail);

/* Bytes [off, off + n) of the message, which must lie within it: a pointer
 * into a slice when they are contiguous there, else copied into tmp. */
const uint8_t *scps__slices_span(const scps_slices *m, size_t off, size_t n, uint8_t *tmp);

#endif
