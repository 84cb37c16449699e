/* scps_pbw: the protobuf writer every hand-written encoder uses: varints,
 * field keys and length-delimited fields, written forward into a buffer. */
#ifndef SCPS_PBW_H
#define SCPS_PBW_H

#include <stddef.h>
#include <stdint.h>

#include "scps_slices.h"

/* Longest encoding of a 64-bit varint. */
#define SCPS_PBW_VARINT_MAX 10

/* Bytes of v as a varint (1 to SCPS_PBW_VARINT_MAX). */
size_t scps__pbw_varint_size(uint64_t v);

/* Writes v as a varint at p; returns the end. */
uint8_t *scps__pbw_put_varint(uint8_t *p, uint64_t v);

/* Writes the key of field `field` (1 to 15, so one byte) with that wire type
 * (SCPS_WT_*); returns the end. */
uint8_t *scps__pbw_put_key(uint8_t *p, int field, int wire_type);

/* Bytes of a length-delimited field of field number 1 to 15 whose body has
 * len bytes: key, length, body. */
size_t scps__pbw_len_size(size_t len);

/* Writes the key and length of a length-delimited field whose body of len
 * bytes the caller writes next; returns the end. */
uint8_t *scps__pbw_put_len(uint8_t *p, int field, size_t len);

/* Writes a whole length-delimited field: key, length, then data's len bytes
 * (data may be NULL when len is 0); returns the end. */
uint8_t *scps__pbw_put_bytes(uint8_t *p, int field, const void *data, size_t len);

#endif
