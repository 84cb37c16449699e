/* scps__hash64: XXH64, the fast non-cryptographic 64-bit checksum of
 * checkpoint files, written from its public specification; streaming. */
#ifndef SCPS_HASH64_H
#define SCPS_HASH64_H

#include <stddef.h>
#include <stdint.h>

/* Streaming state: feed any split of the input to update, the digest is the
 * same as for one call over all of it. */
typedef struct scps_hash64_ctx {
  uint64_t v[4];
  uint64_t total;
  uint64_t seed;
  uint8_t buf[32];
  uint32_t buffered;
} scps_hash64_ctx;

void scps__hash64_init(scps_hash64_ctx *h, uint64_t seed);
void scps__hash64_update(scps_hash64_ctx *h, const void *data, size_t len);
/* The digest of everything fed so far; the state stays usable. */
uint64_t scps__hash64_digest(const scps_hash64_ctx *h);

/* One-shot XXH64 of a buffer. */
uint64_t scps__hash64(const void *data, size_t len, uint64_t seed);

#endif
