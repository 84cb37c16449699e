/* scps_lookup_reply, both ends of LookupResponse: the server's framing,
 * read back by protobuf-c and by libscps's decoder; the decoder fed by
 * protobuf-c's encoder, cut into slices, truncated and malformed; and the
 * checks libscps makes of each answer, with their messages. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/grpc.h>

#include "scps.pb-c.h"
#include "scps_error.h"
#include "scps_lookup_reply.h"
#include "scps_test.h"

/* The bytes cut into slices of `every` bytes (0: one slice). */
static grpc_byte_buffer *sliced(const uint8_t *buf, size_t len, size_t every) {
  grpc_slice s[64];
  size_t n = 0;
  for (size_t at = 0; at < len && n < 64; n++) {
    size_t k = every && n < 63 ? every : len - at;
    if (k > len - at) k = len - at;
    s[n] = grpc_slice_from_copied_buffer((const char *)buf + at, k);
    at += k;
  }
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(s, n);
  for (size_t i = 0; i < n; i++) grpc_slice_unref(s[i]);
  return bb;
}

/* Packs a LookupResponse with protobuf-c, stack 1 as distinct rows and the
 * others pooled, optionally with unknown fields that the decoder must skip. */
static size_t pack_response(uint8_t **out, int n, const float *data, size_t per, bool unknown) {
  Scps__V1__StackActivations sa[4], *psa[4];
  char names[4][16];
  for (int i = 0; i < n; i++) {
    scps__v1__stack_activations__init(&sa[i]);
    snprintf(names[i], sizeof names[i], "stack_%d", i);
    sa[i].stack = names[i];
    ProtobufCBinaryData *values = i == 1 ? &sa[i].rows : &sa[i].activations;
    values->data = (uint8_t *)(const void *)(data + (size_t)i * per);
    values->len = per * sizeof(float);
    psa[i] = &sa[i];
  }
  Scps__V1__LookupResponse m = SCPS__V1__LOOKUP_RESPONSE__INIT;
  m.n_stacks = (size_t)n;
  m.stacks = psa;
  size_t len = scps__v1__lookup_response__get_packed_size(&m);
  /* Unknown fields: a varint (field 7), a fixed64 (8), a string (9) and a
   * fixed32 (10) ahead of the message, as a newer server might send. */
  static const uint8_t extra[] = {7 << 3 | 0, 0x96, 0x01, 8 << 3 | 1, 1, 2, 3, 4, 5, 6, 7, 8,
                                  9 << 3 | 2, 3, 'a', 'b', 'c', 10 << 3 | 5, 1, 2, 3, 4};
  size_t pre = unknown ? sizeof extra : 0;
  *out = malloc(pre + len);
  if (unknown) memcpy(*out, extra, sizeof extra);
  scps__v1__lookup_response__pack(&m, *out + pre);
  return pre + len;
}

/* The response as gRPC may hand it over: cut into slices (a new cut every
 * `every` bytes, 0: one slice), parsed with the slices kept in *m. */
static int parse_sliced(const uint8_t *buf, size_t len, size_t every, scps_slices *m, scps_lookup_reply_stack *a,
                        int max) {
  grpc_byte_buffer *bb = sliced(buf, len, every);
  int rc = scps__slices_init(m, bb);
  grpc_byte_buffer_destroy(bb);
  return rc ? -2 : scps__lookup_reply_parse(m, a, max);
}

static int parse(const uint8_t *buf, size_t len, scps_lookup_reply_stack *a, int max) {
  scps_slices m;
  int n = parse_sliced(buf, len, 7, &m, a, max);
  scps__slices_free(&m);
  return n;
}

static void test_lookup_response(void) {
  float data[4 * 64];
  for (int i = 0; i < 4 * 64; i++) data[i] = (float)i * 0.5f - 3.0f;
  for (int unknown = 0; unknown < 2; unknown++) {
    uint8_t *buf;
    size_t len = pack_response(&buf, 3, data, 64, unknown);
    scps_lookup_reply_stack a[4];
    for (size_t every = 0; every < 100; every += 33) {
      scps_slices m;
      int n = parse_sliced(buf, len, every, &m, a, 4);
      CHECKF(n == 3, "%d stacks", n);
      for (int i = 0; i < n && i < 3; i++) {
        char want[16];
        uint8_t tmp[64 * sizeof(float)];
        snprintf(want, sizeof want, "stack_%d", i);
        CHECK(a[i].stack_len == strlen(want) && !memcmp(scps__slices_span(&m, a[i].stack_off, a[i].stack_len, tmp),
                                                        want, a[i].stack_len));
        CHECK(a[i].rows == (i == 1) && a[i].len == 64 * sizeof(float) &&
              !memcmp(scps__slices_span(&m, a[i].off, a[i].len, tmp), data + i * 64, a[i].len));
      }
      scps__slices_free(&m);
    }
    /* Fewer slots than stacks: the count still says how many there are. */
    CHECK(parse(buf, len, a, 1) == 3);
    /* Every truncation is malformed except at a field boundary of the top
     * level, which a decoder cannot tell from a shorter message. */
    int bad = 0;
    for (size_t cut = 1; cut < len; cut++)
      if (parse(buf, cut, a, 4) < 0) bad++;
    CHECKF(bad >= (int)len - 1 - 3 - (unknown ? 4 : 0), "%d of %zu truncations refused", bad, len - 1);
    free(buf);
  }
  /* A stacks entry that is not length-delimited, a field number 0, a
   * varint longer than 10 bytes and a length past the end. */
  static const uint8_t wrong_type[] = {1 << 3 | 0, 5};
  static const uint8_t field_zero[] = {0 << 3 | 0, 5};
  static const uint8_t long_varint[] = {7 << 3 | 0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 1};
  static const uint8_t past_end[] = {1 << 3 | 2, 9, 1 << 3 | 2, 0};
  static const uint8_t group[] = {1 << 3 | 3};
  scps_lookup_reply_stack a[1];
  CHECK(parse(wrong_type, sizeof wrong_type, a, 1) == -1);
  CHECK(parse(field_zero, sizeof field_zero, a, 1) == -1);
  CHECK(parse(long_varint, sizeof long_varint, a, 1) == -1);
  CHECK(parse(past_end, sizeof past_end, a, 1) == -1);
  CHECK(parse(group, sizeof group, a, 1) == -1);
  CHECK(parse(NULL, 0, a, 1) == 0);
}

/* One stack of a hand-framed response. */
typedef struct stack_in {
  const char *name;
  bool rows;
  size_t len; /* bytes of values */
} stack_in;

/* The response the server writes: per stack the head, then the values as
 * they are (pattern bytes from `values`). */
static size_t frame(uint8_t *out, const stack_in *st, int n, const uint8_t *values) {
  size_t at = 0, from = 0;
  for (int i = 0; i < n; i++) {
    uint8_t head[SCPS_LOOKUP_REPLY_HEAD_MAX(200)];
    size_t name_len = strlen(st[i].name);
    size_t h = scps__lookup_reply_put_head(head, st[i].name, name_len, st[i].rows, st[i].len);
    CHECK(h <= SCPS_LOOKUP_REPLY_HEAD_MAX(name_len));
    memcpy(out + at, head, h);
    memcpy(out + at + h, values + from, st[i].len);
    at += h + st[i].len;
    from += st[i].len;
  }
  return at;
}

/* Ours to protobuf-c and to ours: stacks of pooled activations and of
 * distinct rows, float32 (4 bytes a value) and bfloat16 (2) sizes, empty
 * ones, a long name and lengths across varint widths; every field compared. */
static void test_round_trip(void) {
  char long_name[200];
  memset(long_name, 'n', sizeof long_name - 1);
  long_name[sizeof long_name - 1] = '\0';
  const stack_in st[] = {{"pooled_f32", false, 4 * 8 * 3}, {"rows_bf16", true, 2 * 16 * 5},
                         {"", false, 0},                   {long_name, true, 4 * 64 * 129},
                         {"pooled_bf16", false, 2 * 7}};
  const int n = (int)(sizeof st / sizeof *st);
  size_t total_values = 0;
  for (int i = 0; i < n; i++) total_values += st[i].len;
  uint8_t *values = malloc(total_values), *buf = malloc(total_values + (size_t)n * 256);
  for (size_t i = 0; i < total_values; i++) values[i] = (uint8_t)(i * 31 + 7);
  size_t len = frame(buf, st, n, values);
  Scps__V1__LookupResponse *m = scps__v1__lookup_response__unpack(NULL, len, buf);
  CHECK(m != NULL && m->n_stacks == (size_t)n);
  size_t from = 0;
  for (int i = 0; m && i < n && (size_t)i < m->n_stacks; i++) {
    const Scps__V1__StackActivations *a = m->stacks[i];
    const ProtobufCBinaryData got = st[i].rows ? a->rows : a->activations, other = st[i].rows ? a->activations : a->rows;
    CHECKF(!strcmp(a->stack, st[i].name), "stack %d", i);
    CHECKF(got.len == st[i].len && !other.len && (!got.len || !memcmp(got.data, values + from, got.len)), "stack %d", i);
    from += st[i].len;
  }
  if (m) scps__v1__lookup_response__free_unpacked(m, NULL);
  for (size_t every = 0; every < 4000; every += 997) {
    scps_slices s = {0};
    scps_lookup_reply_stack a[8];
    char msg[SCPS_ERROR_MSG_MAX];
    grpc_byte_buffer *bb = sliced(buf, len, every);
    CHECKF(scps__lookup_reply_read(&s, bb, a, 8, n, msg, sizeof msg) == 0, "%s", msg);
    from = 0;
    for (int i = 0; i < n; i++) {
      uint8_t *tmp = malloc(st[i].len + 256);
      CHECKF(scps__lookup_reply_check(&s, &a[i], i, st[i].name, st[i].rows, st[i].len, msg, sizeof msg) == 0, "%s", msg);
      CHECK(a[i].rows == st[i].rows && a[i].len == st[i].len &&
            !memcmp(scps__slices_span(&s, a[i].off, a[i].len, tmp), values + from, a[i].len));
      from += st[i].len;
      free(tmp);
    }
    scps__slices_free(&s);
    grpc_byte_buffer_destroy(bb);
  }
  free(values);
  free(buf);
}

/* What libscps reports of a wrong answer: the count, a stack's name, its
 * form, its length; and bytes that are no LookupResponse. */
static void test_checks(void) {
  const stack_in st[] = {{"a", false, 8}, {"b", true, 4}};
  uint8_t values[12] = {0}, buf[256];
  size_t len = frame(buf, st, 2, values);
  scps_slices s = {0};
  scps_lookup_reply_stack a[2];
  char msg[SCPS_ERROR_MSG_MAX];
  grpc_byte_buffer *bb = sliced(buf, len, 3);
  CHECK(scps__lookup_reply_read(&s, bb, a, 2, 3, msg, sizeof msg) == SCPS_EIO &&
        !strcmp(msg, "Lookup answered 2 stacks for a request of 3"));
  CHECK(scps__lookup_reply_read(&s, bb, a, 1, 2, msg, sizeof msg) == 0); /* a second read replaces the first */
  CHECK(scps__lookup_reply_check(&s, &a[0], 0, "b", false, 8, msg, sizeof msg) == SCPS_EIO &&
        !strcmp(msg, "Lookup answer stacks[0] is 'a', requested 'b'"));
  CHECK(scps__lookup_reply_check(&s, &a[0], 0, "aa", false, 8, msg, sizeof msg) == SCPS_EIO &&
        !strcmp(msg, "Lookup answer stacks[0] is 'a', requested 'aa'"));
  CHECK(scps__lookup_reply_check(&s, &a[0], 0, "a", true, 8, msg, sizeof msg) == SCPS_EIO &&
        !strcmp(msg, "Lookup answer for stack 'a' holds pooled activations, distinct rows were asked for"));
  CHECK(scps__lookup_reply_check(&s, &a[0], 0, "a", false, 16, msg, sizeof msg) == SCPS_EIO &&
        !strcmp(msg, "Lookup answer for stack 'a' holds 8 bytes of activations, expected 16"));
  grpc_byte_buffer_destroy(bb);
  bb = sliced(buf, len, 0);
  CHECK(scps__lookup_reply_read(&s, bb, a, 2, 2, msg, sizeof msg) == 0);
  CHECK(scps__lookup_reply_check(&s, &a[1], 1, "b", false, 4, msg, sizeof msg) == SCPS_EIO &&
        !strcmp(msg, "Lookup answer for stack 'b' holds distinct rows, pooled activations were asked for"));
  CHECK(scps__lookup_reply_check(&s, &a[1], 1, "b", true, 2, msg, sizeof msg) == SCPS_EIO &&
        !strcmp(msg, "Lookup answer for stack 'b' holds 4 bytes of distinct rows, expected 2"));
  grpc_byte_buffer_destroy(bb);
  bb = sliced(buf, len - 1, 0);
  CHECK(scps__lookup_reply_read(&s, bb, a, 2, 2, msg, sizeof msg) == SCPS_EIO &&
        !strcmp(msg, "Lookup: response of 25 bytes is not a valid scps.v1.LookupResponse"));
  CHECKF(len == 26, "%zu bytes", len);
  grpc_byte_buffer_destroy(bb);
  scps__slices_free(&s);
}

int main(void) {
  grpc_init();
  test_lookup_response();
  test_round_trip();
  test_checks();
  grpc_shutdown();
  return scps_test_finish("test_lookup_reply");
}
