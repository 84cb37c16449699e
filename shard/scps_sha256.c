#include "scps_sha256.h"

#include <string.h>

static const uint32_t scps_sha256_k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
    0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
    0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
    0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
    0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
    0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
    0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2};

static uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static uint32_t load_be32(const uint8_t *p) {
  return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static void store_be32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
}

static void scps_sha256_block(uint32_t h[8], const uint8_t *block) {
  uint32_t w[64];
  for (int i = 0; i < 16; i++) w[i] = load_be32(block + 4 * i);
  for (int i = 16; i < 64; i++) {
    uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
  for (int i = 0; i < 64; i++) {
    uint32_t t1 = hh + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) +
                  scps_sha256_k[i] + w[i];
    uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    hh = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h[0] += a;
  h[1] += b;
  h[2] += c;
  h[3] += d;
  h[4] += e;
  h[5] += f;
  h[6] += g;
  h[7] += hh;
}

void scps__sha256_init(scps_sha256_ctx *s) {
  static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  memcpy(s->h, iv, sizeof iv);
  s->total_len = 0;
  s->buf_len = 0;
}

void scps__sha256_update(scps_sha256_ctx *s, const void *data, size_t len) {
  const uint8_t *p = data;
  if (len == 0) return;
  s->total_len += len;
  if (s->buf_len > 0) {
    size_t take = SCPS_SHA256_BLOCK_LEN - s->buf_len;
    if (take > len) take = len;
    memcpy(s->buf + s->buf_len, p, take);
    s->buf_len += take;
    p += take;
    len -= take;
    if (s->buf_len < SCPS_SHA256_BLOCK_LEN) return;
    scps_sha256_block(s->h, s->buf);
    s->buf_len = 0;
  }
  for (; len >= SCPS_SHA256_BLOCK_LEN; p += SCPS_SHA256_BLOCK_LEN, len -= SCPS_SHA256_BLOCK_LEN)
    scps_sha256_block(s->h, p);
  if (len > 0) {
    memcpy(s->buf, p, len);
    s->buf_len = len;
  }
}

void scps__sha256_final(scps_sha256_ctx *s, uint8_t out[SCPS_SHA256_DIGEST_LEN]) {
  uint64_t bits = s->total_len * 8;
  s->buf[s->buf_len++] = 0x80;
  /* The 8-byte length must end a block; if it no longer fits, pad this
   * block out and put the length in a fresh one. */
  if (s->buf_len > SCPS_SHA256_BLOCK_LEN - 8) {
    memset(s->buf + s->buf_len, 0, SCPS_SHA256_BLOCK_LEN - s->buf_len);
    scps_sha256_block(s->h, s->buf);
    s->buf_len = 0;
  }
  memset(s->buf + s->buf_len, 0, SCPS_SHA256_BLOCK_LEN - 8 - s->buf_len);
  store_be32(s->buf + 56, (uint32_t)(bits >> 32));
  store_be32(s->buf + 60, (uint32_t)bits);
  scps_sha256_block(s->h, s->buf);
  s->buf_len = 0;
  for (int i = 0; i < 8; i++) store_be32(out + 4 * i, s->h[i]);
}

void scps__sha256(const void *data, size_t len, uint8_t out[SCPS_SHA256_DIGEST_LEN]) {
  scps_sha256_ctx s;
  scps__sha256_init(&s);
  scps__sha256_update(&s, data, len);
  scps__sha256_final(&s, out);
}

void scps__sha256_hex(const uint8_t digest[SCPS_SHA256_DIGEST_LEN], size_t n_hex, char *out) {
  static const char digits[] = "0123456789abcdef";
  if (n_hex > SCPS_SHA256_HEX_LEN) n_hex = SCPS_SHA256_HEX_LEN;
  for (size_t i = 0; i < n_hex; i++) {
    uint8_t byte = digest[i / 2];
    out[i] = digits[(i % 2 == 0) ? (byte >> 4) : (byte & 0xf)];
  }
  out[n_hex] = '\0';
}
