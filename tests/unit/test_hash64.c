/* XXH64 against the published vectors of the reference implementation's
 * sanity check (cli/xsum_sanity_check.c) and well-known strings, and
 * streaming in every split against one-shot hashing. */
#include <stdint.h>
#include <string.h>

#include "scps_hash64.h"
#include "scps_test.h"

#define PRIME32 UINT64_C(2654435761)

/* The reference's sanity buffer: top bytes of a multiplicative sequence. */
static void sanity_buffer(uint8_t *buf, size_t n) {
  uint64_t gen = PRIME32;
  for (size_t i = 0; i < n; i++) {
    buf[i] = (uint8_t)(gen >> 56);
    gen *= UINT64_C(11400714785074694797);
  }
}

static void test_sanity_vectors(void) {
  static const struct {
    size_t len;
    uint64_t seed, want;
  } cases[] = {
      {0, 0, UINT64_C(0xEF46DB3751D8E999)},   {0, PRIME32, UINT64_C(0xAC75FDA2929B17EF)},
      {1, 0, UINT64_C(0xE934A84ADB052768)},   {1, PRIME32, UINT64_C(0x5014607643A9B4C3)},
      {4, 0, UINT64_C(0x9136A0DCA57457EE)},   {14, 0, UINT64_C(0x8282DCC4994E35C8)},
      {14, PRIME32, UINT64_C(0xC3BD6BF63DEB6DF0)}, {222, 0, UINT64_C(0xB641AE8CB691C174)},
      {222, PRIME32, UINT64_C(0x20CB8AB7AE10C14A)},
  };
  uint8_t buf[222];
  sanity_buffer(buf, sizeof buf);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint64_t got = scps__hash64(buf, cases[i].len, cases[i].seed);
    CHECKF(got == cases[i].want, "len %zu seed %llu: %016llx, want %016llx", cases[i].len,
           (unsigned long long)cases[i].seed, (unsigned long long)got,
           (unsigned long long)cases[i].want);
  }
}

static void test_strings(void) {
  CHECK(scps__hash64("abc", 3, 0) == UINT64_C(0x44BC2CF5AD770999));
  const char *s = "Nobody inspects the spammish repetition";
  CHECK(scps__hash64(s, strlen(s), 0) == UINT64_C(0xFBCEA83C8A378BF1));
}

/* Every split point of every length up to 100 (stripe and tail edges),
 * and three-way splits of the sanity buffer. */
static void test_streaming(void) {
  uint8_t buf[222];
  sanity_buffer(buf, sizeof buf);
  for (size_t len = 0; len <= 100; len++) {
    uint64_t want = scps__hash64(buf, len, 7);
    for (size_t cut = 0; cut <= len; cut++) {
      scps_hash64_ctx h;
      scps__hash64_init(&h, 7);
      scps__hash64_update(&h, buf, cut);
      scps__hash64_update(&h, buf + cut, len - cut);
      CHECKF(scps__hash64_digest(&h) == want, "len %zu split at %zu", len, cut);
    }
  }
  uint64_t want = scps__hash64(buf, sizeof buf, 0);
  for (size_t a = 0; a < sizeof buf; a += 13)
    for (size_t b = a; b < sizeof buf; b += 17) {
      scps_hash64_ctx h;
      scps__hash64_init(&h, 0);
      scps__hash64_update(&h, buf, a);
      scps__hash64_update(&h, buf + a, b - a);
      /* digest mid-stream must not disturb the state */
      (void)scps__hash64_digest(&h);
      scps__hash64_update(&h, buf + b, sizeof buf - b);
      CHECKF(scps__hash64_digest(&h) == want, "splits at %zu and %zu", a, b);
    }
}

int main(void) {
  test_sanity_vectors();
  test_strings();
  test_streaming();
  return scps_test_finish("test_hash64");
}
