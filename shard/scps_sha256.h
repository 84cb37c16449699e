/* scps__sha256: SHA-256 (FIPS 180-4) digests, incremental and one-shot, and
 * their lowercase hex form. Used for stack names and checkpoint checksums. */
#ifndef SCPS_SHA256_H
#define SCPS_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define SCPS_SHA256_DIGEST_LEN 32
#define SCPS_SHA256_BLOCK_LEN 64
#define SCPS_SHA256_HEX_LEN (2 * SCPS_SHA256_DIGEST_LEN) /* without the NUL */

/* Caller-owned state; nothing to free. */
typedef struct scps_sha256_ctx {
  uint32_t h[8];
  uint64_t total_len; /* bytes hashed so far */
  uint8_t buf[SCPS_SHA256_BLOCK_LEN];
  size_t buf_len;     /* bytes waiting in buf, always < SCPS_SHA256_BLOCK_LEN */
} scps_sha256_ctx;

void scps__sha256_init(scps_sha256_ctx *s);
/* Any split of the input into update calls gives the same digest. len 0 is
 * allowed (data may then be NULL). */
void scps__sha256_update(scps_sha256_ctx *s, const void *data, size_t len);
/* Writes the digest; s must be re-initialised before hashing again. */
void scps__sha256_final(scps_sha256_ctx *s, uint8_t out[SCPS_SHA256_DIGEST_LEN]);

void scps__sha256(const void *data, size_t len, uint8_t out[SCPS_SHA256_DIGEST_LEN]);

/* Writes the first n_hex lowercase hex digits of digest plus a NUL to out
 * (which must hold n_hex + 1 bytes); n_hex is capped at SCPS_SHA256_HEX_LEN.
 * Stack names use n_hex = 12. */
void scps__sha256_hex(const uint8_t digest[SCPS_SHA256_DIGEST_LEN], size_t n_hex, char *out);

#endif
