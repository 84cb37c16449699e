#include "scps_hash64.h"

#include <string.h>

#define P1 UINT64_C(0x9E3779B185EBCA87)
#define P2 UINT64_C(0xC2B2AE3D27D4EB4F)
#define P3 UINT64_C(0x165667B19E3779F9)
#define P4 UINT64_C(0x85EBCA77C2B2AE63)
#define P5 UINT64_C(0x27D4EB2F165667C5)

static inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

/* The specification reads lanes as little-endian; memcpy keeps unaligned
 * reads defined, and the checkpoint module refuses big-endian hosts. */
static inline uint64_t read64(const uint8_t *p) {
  uint64_t v;
  memcpy(&v, p, sizeof v);
  return v;
}

static inline uint32_t read32(const uint8_t *p) {
  uint32_t v;
  memcpy(&v, p, sizeof v);
  return v;
}

static inline uint64_t round64(uint64_t acc, uint64_t lane) {
  acc += lane * P2;
  acc = rotl(acc, 31);
  return acc * P1;
}

static inline uint64_t merge(uint64_t acc, uint64_t v) {
  acc ^= round64(0, v);
  return acc * P1 + P4;
}

void scps__hash64_init(scps_hash64_ctx *h, uint64_t seed) {
  memset(h, 0, sizeof *h);
  h->seed = seed;
  h->v[0] = seed + P1 + P2;
  h->v[1] = seed + P2;
  h->v[2] = seed;
  h->v[3] = seed - P1;
}

/* Consumes whole 32-byte stripes; returns the bytes used. The four lanes
 * are independent 64-bit multiply chains that scalar imul (3 cycles) runs
 * side by side; GCC otherwise packs them into one vector whose 64-bit
 * multiply (vpmullq, about 15 cycles) makes the loop several times slower
 * (BENCHMARKS.md's diary has the figures). The empty asm keeps each
 * lane in a general register, as the reference implementation does. */
#if defined(__GNUC__)
#define SCALAR_LANE(x) __asm__("" : "+r"(x))
#else
#define SCALAR_LANE(x) (void)0
#endif

static size_t stripes(uint64_t v[4], const uint8_t *p, size_t len) {
  uint64_t a = v[0], b = v[1], c = v[2], d = v[3];
  size_t i = 0;
  for (; i + 32 <= len; i += 32) {
    a = round64(a, read64(p + i));
    b = round64(b, read64(p + i + 8));
    c = round64(c, read64(p + i + 16));
    d = round64(d, read64(p + i + 24));
    SCALAR_LANE(a);
    SCALAR_LANE(b);
    SCALAR_LANE(c);
    SCALAR_LANE(d);
  }
  v[0] = a, v[1] = b, v[2] = c, v[3] = d;
  return i;
}

void scps__hash64_update(scps_hash64_ctx *h, const void *data, size_t len) {
  if (len == 0) return;
  const uint8_t *p = data;
  h->total += len;
  if (h->buffered) {
    size_t take = 32 - h->buffered;
    if (take > len) take = len;
    memcpy(h->buf + h->buffered, p, take);
    h->buffered += (uint32_t)take;
    p += take;
    len -= take;
    if (h->buffered < 32) return;
    stripes(h->v, h->buf, 32);
    h->buffered = 0;
  }
  size_t used = stripes(h->v, p, len);
  memcpy(h->buf, p + used, len - used);
  h->buffered = (uint32_t)(len - used);
}

uint64_t scps__hash64_digest(const scps_hash64_ctx *h) {
  uint64_t acc;
  if (h->total >= 32) {
    const uint64_t *v = h->v;
    acc = rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18);
    for (int i = 0; i < 4; i++) acc = merge(acc, v[i]);
  } else {
    acc = h->seed + P5;
  }
  acc += h->total;
  const uint8_t *p = h->buf;
  size_t n = h->buffered;
  for (; n >= 8; p += 8, n -= 8) {
    acc ^= round64(0, read64(p));
    acc = rotl(acc, 27) * P1 + P4;
  }
  if (n >= 4) {
    acc ^= (uint64_t)read32(p) * P1;
    acc = rotl(acc, 23) * P2 + P3;
    p += 4;
    n -= 4;
  }
  for (; n > 0; p++, n--) {
    acc ^= (uint64_t)*p * P5;
    acc = rotl(acc, 11) * P1;
  }
  acc ^= acc >> 33;
  acc *= P2;
  acc ^= acc >> 29;
  acc *= P3;
  acc ^= acc >> 32;
  return acc;
}

uint64_t scps__hash64(const void *data, size_t len, uint64_t seed) {
  scps_hash64_ctx h;
  scps__hash64_init(&h, seed);
  scps__hash64_update(&h, data, len);
  return scps__hash64_digest(&h);
}
