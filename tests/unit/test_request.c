/* scps_request against protobuf-c's own decoder: random Lookup and
 * ApplyGradients requests, with unknown fields, repeated singular fields,
 * unpacked offsets and split partitions, cut into random slices, decode to
 * the same values; every prefix decodes exactly when protobuf-c accepts it. */
#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <stdlib.h>
#include <string.h>

#include "scps.pb-c.h"
#include "scps_request.h"
#include "scps_test.h"

static uint64_t rng = 88172645463325252ull;

static uint32_t rnd(uint32_t n) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return n ? (uint32_t)(rng % n) : 0;
}

/* A growable byte string. */
typedef struct buf {
  uint8_t *p;
  size_t n, cap;
} buf;

static void put(buf *b, const void *d, size_t n) {
  if (n == 0) return; /* empty fields come with d == NULL */
  if (b->n + n > b->cap) {
    b->cap = (b->n + n) * 2 + 64;
    b->p = realloc(b->p, b->cap);
  }
  memcpy(b->p + b->n, d, n);
  b->n += n;
}

static void put_varint(buf *b, uint64_t v) {
  uint8_t t[10];
  size_t n = 0;
  for (; v >= 0x80; v >>= 7) t[n++] = (uint8_t)(v | 0x80);
  t[n++] = (uint8_t)v;
  put(b, t, n);
}

static void put_key(buf *b, int field, int wt) { put_varint(b, (uint64_t)(field << 3 | wt)); }

static void put_len(buf *b, int field, const void *d, size_t n) {
  put_key(b, field, 2);
  put_varint(b, n);
  put(b, d, n);
}

/* Fields no scps message uses (30..33), which decoders must skip. */
static void put_unknown(buf *b) {
  uint8_t junk[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  switch (rnd(4)) {
  case 0: put_key(b, 30, 0); put_varint(b, rnd(1u << 31) * 3ull); break;
  case 1: put_len(b, 31, junk, rnd(9)); break;
  case 2: put_key(b, 32, 5); put(b, junk, 4); break;
  default: put_key(b, 33, 1); put(b, junk, 8); break;
  }
}

static void random_bytes(buf *b, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint8_t c = (uint8_t)rnd(256);
    put(b, &c, 1);
  }
}

/* A StackPartitions body: sometimes offsets one by one (unpacked), an
 * unknown field, or a bulk field written twice (the second value counts).
 * Halves of a split message get no empty bulk field: merging one, protobuf-c
 * keeps the earlier value where protobuf's reference parser (and
 * scps_request) take the last one on the wire. */
static void put_partitions(buf *b, bool split) {
  char name[12];
  snprintf(name, sizeof name, "stack%u", rnd(5));
  if (rnd(3)) put_len(b, 1, name, strlen(name));
  uint32_t n_off = rnd(5);
  if (rnd(2)) {
    buf packed = {0};
    for (uint32_t k = 0; k < n_off; k++) put_varint(&packed, rnd(1000));
    if (n_off) put_len(b, 2, packed.p, packed.n);
    free(packed.p);
  } else {
    for (uint32_t k = 0; k < n_off; k++) {
      put_key(b, 2, 0);
      put_varint(b, rnd(1000));
    }
  }
  for (int f = 3; f <= 6; f++) {
    int times = (int)rnd(3);
    for (int t = 0; t < times; t++) {
      buf v = {0};
      random_bytes(&v, 4 * (rnd(20) + split));
      put_len(b, f, v.p, v.n);
      free(v.p);
      if (!rnd(4)) put_unknown(b);
    }
  }
}

/* A whole request of the given kind. */
static void make_request(buf *b, scps_request_kind kind) {
  bool lookup = kind == SCPS_REQUEST_LOOKUP;
  uint8_t fp[40]; /* wrong lengths up to 39 bytes are drawn too */
  for (int i = 0; i < 40; i++) fp[i] = (uint8_t)rnd(256);
  if (rnd(4)) put_len(b, 1, fp, rnd(3) ? 32 : rnd(40));
  if (rnd(3)) {
    put_key(b, 2, 0);
    put_varint(b, (uint64_t)(int64_t)((int32_t)rnd(7) - 2)); /* negative int32: 10 bytes */
  }
  if (!lookup && rnd(2)) {
    put_key(b, 3, 0);
    put_varint(b, (uint64_t)(int64_t)((int64_t)rnd(1u << 30) - 5));
  }
  if (!lookup && rnd(2)) {
    double lr = rnd(1000) * 1e-3;
    put_key(b, 4, 1);
    put(b, &lr, 8);
  }
  uint32_t stacks = rnd(4);
  for (uint32_t s = 0; s < stacks; s++) {
    buf body = {0};
    if (lookup) {
      put_partitions(&body, false);
    } else {
      int parts = (int)rnd(3); /* 0, 1, or a message field split in two */
      for (int k = 0; k < parts; k++) {
        buf pb = {0};
        put_partitions(&pb, parts == 2);
        put_len(&body, 1, pb.p, pb.n);
        free(pb.p);
      }
      if (rnd(3)) {
        buf g = {0};
        random_bytes(&g, 4 * rnd(16));
        put_len(&body, 2, g.p, g.n);
        free(g.p);
      }
    }
    if (!rnd(3)) put_unknown(&body);
    put_len(b, lookup ? 3 : 5, body.p, body.n);
    free(body.p);
  }
  if (rnd(2)) {
    put_key(b, lookup ? 4 : 6, 0);
    put_varint(b, rnd(3));
  }
  if (!rnd(3)) put_unknown(b);
}

/* The bytes cut into 1 to 6 slices at random places. */
static grpc_byte_buffer *sliced(const uint8_t *p, size_t n) {
  grpc_slice s[6];
  int k = 1 + (int)rnd(6);
  size_t at = 0;
  for (int i = 0; i < k; i++) {
    size_t len = i == k - 1 ? n - at : rnd((uint32_t)(n - at + 1));
    s[i] = grpc_slice_from_copied_buffer((const char *)p + at, len);
    at += len;
  }
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(s, (size_t)k);
  for (int i = 0; i < k; i++) grpc_slice_unref(s[i]);
  return bb;
}

static bool same_bytes(const scps_req_bytes *a, ProtobufCBinaryData b) {
  return a->len == b.len && (!b.len || !memcmp(a->data, b.data, b.len));
}

static bool same_partitions(const scps_req_partitions *a, const Scps__V1__StackPartitions *b) {
  const char *as = a->stack ? a->stack : "";
  return !strcmp(as, b->stack) && a->n_sc_offsets == b->n_sc_offsets &&
         (!b->n_sc_offsets || !memcmp(a->sc_offsets, b->sc_offsets, 4 * b->n_sc_offsets)) &&
         same_bytes(&a->rows, b->rows) && same_bytes(&a->samples, b->samples) && same_bytes(&a->gains, b->gains) &&
         same_bytes(&a->gain_exceptions, b->gain_exceptions);
}

static bool same_lookup(const scps_request *r, const Scps__V1__LookupRequest *m) {
  if (!same_bytes(&r->config_fingerprint, m->config_fingerprint) || r->process_index != m->process_index ||
      r->format != (int32_t)m->activation_format || r->n_stacks != m->n_stacks)
    return false;
  for (size_t i = 0; i < m->n_stacks; i++)
    if (!r->stacks[i].has_partitions || !same_partitions(&r->stacks[i].partitions, m->stacks[i])) return false;
  return true;
}

/* A field left in the request's slices (its gradients), read back. */
static bool same_span(const scps_request *r, scps_req_span a, ProtobufCBinaryData b) {
  if (a.len != b.len) return false;
  if (!b.len) return true;
  uint8_t *tmp = malloc(a.len);
  bool same = tmp && a.off + a.len <= r->msg.total && !memcmp(scps_slices_span(&r->msg, a.off, a.len, tmp), b.data, b.len);
  free(tmp);
  return same;
}

static bool same_apply(const scps_request *r, const Scps__V1__ApplyGradientsRequest *m) {
  bool lr = m->learning_rate_present_case == SCPS__V1__APPLY_GRADIENTS_REQUEST__LEARNING_RATE_PRESENT_LEARNING_RATE;
  if (!same_bytes(&r->config_fingerprint, m->config_fingerprint) || r->process_index != m->process_index ||
      r->step != m->step || r->has_learning_rate != lr || (lr && r->learning_rate != m->learning_rate) ||
      r->format != (int32_t)m->gradient_format || r->n_stacks != m->n_stacks)
    return false;
  for (size_t i = 0; i < m->n_stacks; i++) {
    const scps_req_stack *s = &r->stacks[i];
    if (s->has_partitions != (m->stacks[i]->partitions != NULL) || !same_span(r, s->gradients, m->stacks[i]->gradients))
      return false;
    if (s->has_partitions && !same_partitions(&s->partitions, m->stacks[i]->partitions)) return false;
  }
  return true;
}

/* Decodes p[0..n) both ways; returns whether they agree. */
static bool agree(const uint8_t *p, size_t n, scps_request_kind kind, int *accepted) {
  const ProtobufCMessageDescriptor *d =
      kind == SCPS_REQUEST_LOOKUP ? &scps__v1__lookup_request__descriptor : &scps__v1__apply_gradients_request__descriptor;
  ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, n, p);
  grpc_byte_buffer *bb = sliced(p, n);
  scps_request r;
  char msg[512];
  int rc = scps_request_decode(bb, kind, SIZE_MAX, SIZE_MAX, &r, msg, sizeof msg);
  bool ok = (rc == 0) == (m != NULL);
  if (ok && m)
    ok = kind == SCPS_REQUEST_LOOKUP ? same_lookup(&r, (const Scps__V1__LookupRequest *)m)
                                     : same_apply(&r, (const Scps__V1__ApplyGradientsRequest *)m);
  if (rc) ok = ok && strstr(msg, "not a valid") && strstr(msg, "at byte");
  *accepted += rc == 0;
  scps_request_free(&r);
  grpc_byte_buffer_destroy(bb);
  if (m) protobuf_c_message_free_unpacked(m, NULL);
  return ok;
}

int main(void) {
  grpc_init();
  for (int kind = 0; kind < 2; kind++) {
    int whole_bad = 0, prefix_bad = 0, accepted = 0, prefixes = 0;
    for (int it = 0; it < 400; it++) {
      buf b = {0};
      make_request(&b, (scps_request_kind)kind);
      if (!agree(b.p, b.n, (scps_request_kind)kind, &accepted)) whole_bad++;
      if (it % 8 == 0)
        for (size_t cut = 0; cut < b.n; cut++, prefixes++)
          if (!agree(b.p, cut, (scps_request_kind)kind, &accepted)) prefix_bad++;
      free(b.p);
    }
    CHECKF(whole_bad == 0, "kind %d: %d of 400 requests decoded differently from protobuf-c", kind, whole_bad);
    CHECKF(prefix_bad == 0, "kind %d: %d of %d prefixes judged differently from protobuf-c", kind, prefix_bad,
           prefixes);
    CHECK(accepted >= 400);
  }
  /* Bulk arrays are copies the request owns, aligned for uint32 and float. */
  buf b = {0};
  put_len(&b, 1, "0123456789abcdef0123456789abcdef", 32);
  buf parts = {0};
  put_len(&parts, 1, "s", 1);
  uint8_t rows[13] = {0};
  put_len(&parts, 3, rows + 1, 12);
  put_len(&b, 3, parts.p, parts.n);
  grpc_byte_buffer *bb = sliced(b.p, b.n);
  scps_request r;
  char msg[256];
  CHECK(scps_request_decode(bb, SCPS_REQUEST_LOOKUP, 1, 3, &r, msg, sizeof msg) == 0);
  CHECK(r.n_stacks == 1 && r.stacks[0].partitions.rows.len == 12 &&
        (uintptr_t)r.stacks[0].partitions.rows.data % 4 == 0 && !strcmp(r.stacks[0].partitions.stack, "s"));
  scps_request_free(&r);
  grpc_byte_buffer_destroy(bb);
  /* A varint of 11 bytes and a group are refused, naming the byte. */
  uint8_t longv[] = {0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
  bb = sliced(longv, sizeof longv);
  CHECK(scps_request_decode(bb, SCPS_REQUEST_LOOKUP, 1, 3, &r, msg, sizeof msg) == SCPS_EPARSE &&
        strstr(msg, "varint"));
  scps_request_free(&r);
  grpc_byte_buffer_destroy(bb);
  uint8_t group[] = {0x0b, 0x0c};
  bb = sliced(group, sizeof group);
  CHECK(scps_request_decode(bb, SCPS_REQUEST_APPLY, 1, 3, &r, msg, sizeof msg) == SCPS_EPARSE &&
        strstr(msg, "byte 1"));
  scps_request_free(&r);
  grpc_byte_buffer_destroy(bb);
  /* A key that starts inside a stacks entry and ends in the request around
   * it belongs to neither: refused, as protobuf-c refuses it. Both the
   * Lookup's partitions and the ApplyGradients' StackGradients. */
  for (int kind = 0; kind < 2; kind++) {
    uint8_t over[] = {kind ? 0x2a : 0x1a, 0x01, 0x80, 0x01, 0x00};
    int accepted = 0;
    CHECK(agree(over, sizeof over, (scps_request_kind)kind, &accepted) && accepted == 0);
    bb = sliced(over, sizeof over);
    CHECKF(scps_request_decode(bb, (scps_request_kind)kind, 1, 3, &r, msg, sizeof msg) == SCPS_EPARSE &&
               strstr(msg, "runs past the end of its message"), "kind %d: %s", kind, msg);
    scps_request_free(&r);
    grpc_byte_buffer_destroy(bb);
  }
  /* More stacks entries than the server has stacks are refused while
   * decoding; sc_offsets beyond the kept ones are counted, not kept. */
  buf many = {0};
  buf offs = {0};
  put_len(&offs, 1, "s", 1);
  for (int k = 0; k < 5; k++) {
    put_varint(&offs, 2 << 3);
    put_varint(&offs, (uint64_t)k);
  }
  for (int k = 0; k < 3; k++) put_len(&many, 3, offs.p, offs.n);
  bb = sliced(many.p, many.n);
  CHECKF(scps_request_decode(bb, SCPS_REQUEST_LOOKUP, 2, 3, &r, msg, sizeof msg) == SCPS_EPARSE &&
             strstr(msg, "more than 2 entries"), "%s", msg);
  scps_request_free(&r);
  CHECK(scps_request_decode(bb, SCPS_REQUEST_LOOKUP, 3, 3, &r, msg, sizeof msg) == 0);
  CHECK(r.n_stacks == 3 && r.stacks[2].partitions.n_sc_offsets == 5 && r.stacks[2].partitions.sc_offsets[2] == 2);
  scps_request_free(&r);
  grpc_byte_buffer_destroy(bb);
  free(many.p);
  free(offs.p);
  free(b.p);
  free(parts.p);
  grpc_shutdown();
  return scps_test_finish("test_request");
}
