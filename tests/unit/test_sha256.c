/* SHA-256 against the FIPS 180-2 / NIST example vectors, padding boundary
 * lengths (expected values from coreutils sha256sum), and incremental
 * hashing in every split. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "scps_sha256.h"
#include "scps_test.h"

static void hex_of(const void *data, size_t len, char out[SCPS_SHA256_HEX_LEN + 1]) {
  uint8_t d[SCPS_SHA256_DIGEST_LEN];
  scps__sha256(data, len, d);
  scps__sha256_hex(d, SCPS_SHA256_HEX_LEN, out);
}

static void check_vector(const char *msg, const char *want) {
  char got[SCPS_SHA256_HEX_LEN + 1];
  hex_of(msg, strlen(msg), got);
  CHECKF(strcmp(got, want) == 0, "sha256(\"%s\") = %s, want %s", msg, got, want);
}

static void test_nist_vectors(void) {
  check_vector("", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  check_vector("abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  check_vector("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
               "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  check_vector("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmn"
               "opqrlmnopqrsmnopqrstnopqrstu",
               "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}

static void test_million_a(void) {
  /* Fed in 1000-byte chunks, as the FIPS example describes it, and in one go. */
  static const char want[] = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";
  char chunk[1000];
  memset(chunk, 'a', sizeof chunk);
  scps_sha256_ctx s;
  scps__sha256_init(&s);
  for (int i = 0; i < 1000; i++) scps__sha256_update(&s, chunk, sizeof chunk);
  uint8_t d[SCPS_SHA256_DIGEST_LEN];
  scps__sha256_final(&s, d);
  char got[SCPS_SHA256_HEX_LEN + 1];
  scps__sha256_hex(d, SCPS_SHA256_HEX_LEN, got);
  CHECKF(strcmp(got, want) == 0, "million a (chunked) = %s", got);

  char *big = malloc(1000000);
  CHECK(big != NULL);
  if (!big) return;
  memset(big, 'a', 1000000);
  hex_of(big, 1000000, got);
  CHECKF(strcmp(got, want) == 0, "million a (one shot) = %s", got);
  free(big);
}

/* Lengths around the 55/56-byte padding split and block edges. */
static void test_padding_boundaries(void) {
  static const struct {
    size_t n;
    const char *want;
  } cases[] = {
      {55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"},
      {56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"},
      {63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34"},
      {64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"},
      {65, "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0"},
      {119, "31eba51c313a5c08226adf18d4a359cfdfd8d2e816b13f4af952f7ea6584dcfb"},
      {120, "2f3d335432c70b580af0e8e1b3674a7c020d683aa5f73aaaedfdc55af904c21c"},
      {128, "6836cf13bac400e9105071cd6af47084dfacad4e5e302c94bfed24e013afb73e"},
  };
  char buf[128];
  memset(buf, 'a', sizeof buf);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char got[SCPS_SHA256_HEX_LEN + 1];
    hex_of(buf, cases[i].n, got);
    CHECKF(strcmp(got, cases[i].want) == 0, "%zu x 'a' = %s, want %s", cases[i].n, got,
           cases[i].want);
  }
}

/* Every two-way split of a 200-byte message, plus byte-at-a-time and
 * empty updates, gives the one-shot digest. */
static void test_incremental_splits(void) {
  uint8_t msg[200];
  for (size_t i = 0; i < sizeof msg; i++) msg[i] = (uint8_t)(i * 37 + 11);
  uint8_t want[SCPS_SHA256_DIGEST_LEN];
  scps__sha256(msg, sizeof msg, want);

  int bad_splits = 0;
  for (size_t cut = 0; cut <= sizeof msg; cut++) {
    scps_sha256_ctx s;
    uint8_t got[SCPS_SHA256_DIGEST_LEN];
    scps__sha256_init(&s);
    scps__sha256_update(&s, msg, cut);
    scps__sha256_update(&s, NULL, 0);
    scps__sha256_update(&s, msg + cut, sizeof msg - cut);
    scps__sha256_final(&s, got);
    if (memcmp(got, want, sizeof want) != 0) bad_splits++;
  }
  CHECKF(bad_splits == 0, "%d two-way splits differ from one shot", bad_splits);

  scps_sha256_ctx s;
  uint8_t got[SCPS_SHA256_DIGEST_LEN];
  scps__sha256_init(&s);
  for (size_t i = 0; i < sizeof msg; i++) scps__sha256_update(&s, msg + i, 1);
  scps__sha256_final(&s, got);
  CHECK(memcmp(got, want, sizeof want) == 0);

  /* A re-initialised state hashes from scratch. */
  scps__sha256_init(&s);
  scps__sha256_update(&s, "abc", 3);
  scps__sha256_final(&s, got);
  char hex[SCPS_SHA256_HEX_LEN + 1];
  scps__sha256_hex(got, SCPS_SHA256_HEX_LEN, hex);
  CHECK(strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") == 0);
}

static void test_hex_prefix(void) {
  uint8_t d[SCPS_SHA256_DIGEST_LEN];
  scps__sha256("abc", 3, d);
  char out[SCPS_SHA256_HEX_LEN + 8];
  memset(out, 'x', sizeof out);
  scps__sha256_hex(d, 12, out);
  CHECKF(strcmp(out, "ba7816bf8f01") == 0, "12-hex prefix %s", out);
  CHECK(out[13] == 'x'); /* nothing written past the NUL */
  scps__sha256_hex(d, 3, out);
  CHECKF(strcmp(out, "ba7") == 0, "odd prefix %s", out);
  scps__sha256_hex(d, 0, out);
  CHECK(out[0] == '\0');
  scps__sha256_hex(d, 1000, out); /* capped at the full digest */
  CHECK(strlen(out) == SCPS_SHA256_HEX_LEN);
}

int main(void) {
  test_nist_vectors();
  test_million_a();
  test_padding_boundaries();
  test_incremental_splits();
  test_hex_prefix();
  return scps_test_finish("test_sha256");
}
