/* scps_request against protobuf-c. Decoder: random Lookup and
 * ApplyGradients requests, with unknown fields, repeated singular fields,
 * unpacked offsets and split partitions, cut into random slices, decode to
 * the same values; every prefix decodes exactly when protobuf-c accepts it.
 * Round trips: each form of request libscps encodes (by sample, by row,
 * float32, bfloat16) reads back field by field with protobuf-c, and what
 * protobuf-c packs of it decodes with scps_request to the same values. */
#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "scps.pb-c.h"
#include "scps_pbw.h"
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
  uint8_t t[SCPS_PBW_VARINT_MAX];
  put(b, t, (size_t)(scps__pbw_put_varint(t, v) - t));
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
  if (!rnd(3)) {
    /* an ExmyFormat: each varint field or not, a negative bias among them */
    buf x = {0};
    for (uint32_t f = 1; f <= 4; f++)
      if (rnd(2)) {
        put_key(&x, f, 0);
        put_varint(&x, f == 3 ? (uint64_t)(int64_t)((int32_t)rnd(40) - 20) : rnd(10));
      }
    if (!rnd(4)) put_unknown(&x);
    put_len(b, lookup ? 8 : 9, x.p, x.n);
    free(x.p);
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
         same_bytes(&a->gain_exceptions, b->gain_exceptions) && same_bytes(&a->samples_u16, b->samples_u16);
}

static bool same_exmy(const scps_req_exmy *a, const Scps__V1__ExmyFormat *b) {
  if (!b) return !a->has;
  const bool bias = b->bias_present_case == SCPS__V1__EXMY_FORMAT__BIAS_PRESENT_BIAS;
  return a->has && a->exponent_bits == b->exponent_bits && a->mantissa_bits == b->mantissa_bits &&
         a->has_bias == bias && (!bias || a->bias == b->bias) && a->row_scale == (b->row_scale != 0);
}

static bool same_lookup(const scps_request *r, const Scps__V1__LookupRequest *m) {
  if (!same_exmy(&r->exmy, m->activation_exmy)) return false;
  if (!same_bytes(&r->config_fingerprint, m->config_fingerprint) || r->process_index != m->process_index ||
      r->format != (int32_t)m->activation_format || r->n_stacks != m->n_stacks ||
      r->n_distinct_rows != m->n_distinct_rows)
    return false;
  for (size_t i = 0; i < m->n_distinct_rows; i++)
    if (r->distinct_rows[i] != (m->distinct_rows[i] != 0)) return false;
  for (size_t i = 0; i < m->n_stacks; i++)
    if (!r->stacks[i].has_partitions || !same_partitions(&r->stacks[i].partitions, m->stacks[i])) return false;
  return true;
}

/* A field left in the request's slices (its gradients), read back. */
static bool same_span(const scps_request *r, scps_req_span a, ProtobufCBinaryData b) {
  if (a.len != b.len) return false;
  if (!b.len) return true;
  uint8_t *tmp = malloc(a.len);
  bool same = tmp && a.off + a.len <= r->msg.total && !memcmp(scps__slices_span(&r->msg, a.off, a.len, tmp), b.data, b.len);
  free(tmp);
  return same;
}

static bool same_apply(const scps_request *r, const Scps__V1__ApplyGradientsRequest *m) {
  bool lr = m->learning_rate_present_case == SCPS__V1__APPLY_GRADIENTS_REQUEST__LEARNING_RATE_PRESENT_LEARNING_RATE;
  if (!same_exmy(&r->exmy, m->gradient_exmy)) return false;
  if (!same_bytes(&r->config_fingerprint, m->config_fingerprint) || r->process_index != m->process_index ||
      r->step != m->step || r->has_learning_rate != lr || (lr && r->learning_rate != m->learning_rate) ||
      r->format != (int32_t)m->gradient_format || r->n_stacks != m->n_stacks || r->state_id != m->state_id)
    return false;
  for (size_t i = 0; i < m->n_stacks; i++) {
    const scps_req_stack *s = &r->stacks[i];
    if (s->has_partitions != (m->stacks[i]->partitions != NULL) || !same_span(r, s->gradients, m->stacks[i]->gradients) ||
        !same_span(r, s->row_gradients, m->stacks[i]->row_gradients))
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
  int rc = scps__request_decode(bb, kind, SIZE_MAX, SIZE_MAX, &r, msg, sizeof msg);
  bool ok = (rc == 0) == (m != NULL);
  if (ok && m)
    ok = kind == SCPS_REQUEST_LOOKUP ? same_lookup(&r, (const Scps__V1__LookupRequest *)m)
                                     : same_apply(&r, (const Scps__V1__ApplyGradientsRequest *)m);
  if (rc) ok = ok && strstr(msg, "not a valid") && strstr(msg, "at byte");
  *accepted += rc == 0;
  scps__request_free(&r);
  grpc_byte_buffer_destroy(bb);
  if (m) protobuf_c_message_free_unpacked(m, NULL);
  return ok;
}

/* Round trips of the encoder. */

static uint64_t rng2 = 0x9e3779b97f4a7c15ull;
static uint32_t next_u32(void) {
  rng2 ^= rng2 << 13;
  rng2 ^= rng2 >> 7;
  rng2 ^= rng2 << 17;
  return (uint32_t)(rng2 >> 11);
}

typedef struct part {
  uint32_t rows[300], samples[300];
  float gains[300];
  scps_coo coo;
} part;

static void fill(part *p, size_t n) {
  for (size_t i = 0; i < n; i++) {
    p->rows[i] = next_u32() % 100000;
    p->samples[i] = next_u32();
    p->gains[i] = (float)(next_u32() % 1000) / 7.0f - 50.0f;
  }
  p->coo = (scps_coo){n, p->rows, p->samples, p->gains};
}

static size_t gain_exceptions(const scps_coo *const *coo, int n_sc) {
  size_t n = 0;
  for (int k = 0; k < n_sc; k++)
    for (size_t i = 0; i < coo[k]->n; i++) n += coo[k]->gains[i] != 1.0f;
  return n;
}

/* The gains a StackPartitions stands for, whichever way it sent them (form:
 * 0 none, 1 exceptions, 2 all); -1 if not the expected form. */
static int decoded_gains(const Scps__V1__StackPartitions *sp, size_t total, int form, float *out) {
  const bool has[3] = {!sp->gains.len && !sp->gain_exceptions.len, sp->gain_exceptions.len && !sp->gains.len,
                       sp->gains.len && !sp->gain_exceptions.len};
  if (!has[form]) return -1;
  for (size_t i = 0; i < total; i++) out[i] = 1.0f;
  if (form == 2) {
    if (sp->gains.len != 4 * total) return -1;
    memcpy(out, sp->gains.data, 4 * total);
  }
  for (size_t i = 0; form == 1 && i < sp->gain_exceptions.len / 8; i++) {
    uint32_t e;
    memcpy(&e, sp->gain_exceptions.data + 8 * i, 4);
    if (e >= total || sp->gain_exceptions.len % 8) return -1;
    memcpy(&out[e], sp->gain_exceptions.data + 8 * i + 4, 4);
  }
  return 0;
}

/* form: how the encoder was to send the gains (decoded_gains); u16: the
 * samples as uint16 (samples_u16) instead of uint32. */
static void check_partitions(const Scps__V1__StackPartitions *sp, const char *name, const scps_coo *const *coo,
                             int n_sc, int form, bool u16) {
  CHECK(sp && sp->stack && !strcmp(sp->stack, name));
  if (!sp) return;
  CHECKF(sp->n_sc_offsets == (size_t)n_sc + 1, "%zu offsets", sp->n_sc_offsets);
  size_t total = 0, entries = 0;
  for (int k = 0; k < n_sc; k++) entries += coo[k]->n;
  float *gains = malloc(entries * sizeof *gains + 1);
  CHECKF(decoded_gains(sp, entries, form, gains) == 0, "stack %s: gains not in form %d", name, form);
  for (int k = 0; k < n_sc && sp->n_sc_offsets == (size_t)n_sc + 1; k++) {
    CHECK(sp->sc_offsets[k] == total);
    for (size_t i = 0; i < coo[k]->n; i++) {
      uint32_t r, s;
      float g;
      memcpy(&r, sp->rows.data + 4 * (total + i), 4);
      if (u16) s = (uint32_t)sp->samples_u16.data[2 * (total + i)] | (uint32_t)sp->samples_u16.data[2 * (total + i) + 1] << 8;
      else memcpy(&s, sp->samples.data + 4 * (total + i), 4);
      g = gains[total + i];
      CHECK(r == coo[k]->rows[i] && s == coo[k]->samples[i] && g == coo[k]->gains[i]);
    }
    total += coo[k]->n;
  }
  CHECK(sp->sc_offsets[n_sc] == total);
  CHECK(sp->rows.len == 4 * total);
  CHECK(u16 ? sp->samples_u16.len == 2 * total && !sp->samples.len : sp->samples.len == 4 * total && !sp->samples_u16.len);
  free(gains);
}


/* Decodes the bytes with scps_request, and again what protobuf-c packs of
 * m (its own reading of them): both must equal m field by field. */
static void decode_both_ways(const uint8_t *p, size_t n, scps_request_kind kind, const ProtobufCMessage *m) {
  uint8_t *repacked = malloc(protobuf_c_message_get_packed_size(m) + 1);
  size_t rn = protobuf_c_message_pack(m, repacked);
  for (int way = 0; way < 2; way++) {
    grpc_byte_buffer *bb = way ? sliced(repacked, rn) : sliced(p, n);
    scps_request r;
    char msg[512];
    int rc = scps__request_decode(bb, kind, SIZE_MAX, SIZE_MAX, &r, msg, sizeof msg);
    CHECKF(rc == 0, "%s", msg);
    CHECKF(!rc && (kind == SCPS_REQUEST_LOOKUP ? same_lookup(&r, (const Scps__V1__LookupRequest *)m)
                                                : same_apply(&r, (const Scps__V1__ApplyGradientsRequest *)m)),
           "kind %d, %s", (int)kind, way ? "packed by protobuf-c" : "ours");
    scps__request_free(&r);
    grpc_byte_buffer_destroy(bb);
  }
  free(repacked);
}

/* Three stacks for a process of three SparseCores, with an empty
 * partition each: the first's gains sent as they are, the second's (all
 * 1.0) left out and its samples as uint16, the third's (one in seven other
 * than 1.0) as exceptions; the answer asked for in float32 or bfloat16,
 * the second stack in distinct rows. */
/* The ExmyFormat the round trips send with format 2: e3m0 with a negative
 * bias and row scales (every field set). */
static const scps_req_exmy *round_trip_exmy(int format) {
  static const scps_req_exmy x = {true, 3, 0, true, -2, true};
  return format == 2 ? &x : NULL;
}

static void test_lookup_request(int32_t process_index, int format) {
  static part a[3], b[3], x[3];
  fill(&a[0], 5);
  fill(&a[1], 0);
  fill(&a[2], 300);
  fill(&b[0], 1);
  fill(&b[1], 40);
  fill(&b[2], 0);
  fill(&x[0], 300);
  fill(&x[1], 0);
  fill(&x[2], 123);
  for (int k = 0; k < 3; k++) {
    for (size_t i = 0; i < b[k].coo.n; i++) {
      b[k].gains[i] = 1.0f;
      b[k].samples[i] &= 0xffffu; /* sent as uint16 */
    }
    for (size_t i = 0; i < x[k].coo.n; i++)
      if ((i + (size_t)k) % 7) x[k].gains[i] = 1.0f;
  }
  const scps_coo *ca[3] = {&a[0].coo, &a[1].coo, &a[2].coo}, *cb[3] = {&b[0].coo, &b[1].coo, &b[2].coo},
                 *cx[3] = {&x[0].coo, &x[1].coo, &x[2].coo};
  const size_t ea = gain_exceptions(ca, 3), ex = gain_exceptions(cx, 3);
  CHECK(ea > 0 && ex > 0 && 8 * ex < 4 * 423 && gain_exceptions(cb, 3) == 0);
  uint8_t fp[SCPS_FINGERPRINT_BYTES];
  for (int i = 0; i < SCPS_FINGERPRINT_BYTES; i++) fp[i] = (uint8_t)(i * 37 + 1);
  char long_name[128];
  memset(long_name, 'x', 127);
  long_name[127] = '\0';
  /* Four stacks of the layout, the fourth (slot -1) not sent. */
  const bool distinct[4] = {false, true, false, true};
  const int slot[4] = {0, 1, 2, -1};
  size_t la = scps__request_partitions_size("stack_a", ca, 3, ea, false),
         lb = scps__request_partitions_size(long_name, cb, 3, 0, true),
         lx = scps__request_partitions_size("x", cx, 3, ex, false);
  size_t total = scps__request_view_size(process_index) + scps__request_format_size(format, round_trip_exmy(format)) +
                 scps__request_lookup_stack_prefix_size(la) + la + scps__request_lookup_stack_prefix_size(lb) + lb +
                 scps__request_lookup_stack_prefix_size(lx) + lx + scps__request_distinct_rows_size(3);
  uint8_t *out = malloc(total), *w = scps__request_put_view(out, fp, process_index);
  w = scps__request_put_lookup_format(w, format, round_trip_exmy(format));
  w = scps__request_put_lookup_stack_prefix(w, la);
  uint8_t *pa = w;
  w = scps__request_put_partitions(w, "stack_a", ca, 3, ea, false);
  CHECK((size_t)(w - pa) == la);
  w = scps__request_put_lookup_stack_prefix(w, lb);
  pa = w;
  w = scps__request_put_partitions(w, long_name, cb, 3, 0, true);
  CHECK((size_t)(w - pa) == lb);
  w = scps__request_put_lookup_stack_prefix(w, lx);
  pa = w;
  w = scps__request_put_partitions(w, "x", cx, 3, ex, false);
  CHECK((size_t)(w - pa) == lx);
  w = scps__request_put_distinct_rows(w, distinct, slot, 4, 3);
  CHECKF((size_t)(w - out) == total, "wrote %zu of %zu", (size_t)(w - out), total);
  Scps__V1__LookupRequest *m = scps__v1__lookup_request__unpack(NULL, total, out);
  CHECK(m != NULL);
  if (m) {
    CHECK(m->config_fingerprint.len == sizeof fp && !memcmp(m->config_fingerprint.data, fp, sizeof fp));
    CHECK(m->process_index == process_index);
    CHECK((int)m->activation_format == format);
    CHECK(format != 2 || (m->activation_exmy && m->activation_exmy->exponent_bits == 3 &&
                          m->activation_exmy->bias == -2 && m->activation_exmy->row_scale));
    CHECK(m->n_distinct_rows == 3 && !m->distinct_rows[0] && m->distinct_rows[1] && !m->distinct_rows[2]);
    CHECK(m->n_stacks == 3);
    if (m->n_stacks == 3) {
      check_partitions(m->stacks[0], "stack_a", ca, 3, 2, false);
      check_partitions(m->stacks[1], long_name, cb, 3, 0, true);
      check_partitions(m->stacks[2], "x", cx, 3, 1, false);
    }
    decode_both_ways(out, total, SCPS_REQUEST_LOOKUP, &m->base);
    scps__v1__lookup_request__free_unpacked(m, NULL);
  }
  free(out);
}

/* An ApplyGradientsRequest assembled from the same pieces libscps sends as
 * separate slices: head, then per stack its prefix, partitions and
 * gradients. Two stacks by sample (the second's gains all 1.0, so left
 * out) and one by row; gradients in float32 or bfloat16 (format), which the
 * encoder copies as bytes either way. */
static void test_apply_request(int64_t step, double lr, int format, uint64_t state_id) {
  static part a[2];
  fill(&a[0], 17);
  fill(&a[1], 3);
  const scps_coo *ca[2] = {&a[0].coo, &a[1].coo};
  const size_t vb = format ? 2 : 4;
  uint8_t grads[48 * 8 * 4];
  for (size_t i = 0; i < sizeof grads; i++) grads[i] = (uint8_t)(i * 13 + 5);
  uint8_t fp[SCPS_FINGERPRINT_BYTES] = {0};
  fp[31] = 9;
  size_t glen = 20 * 8 * vb; /* 20 samples of width 8 */
  const size_t exceptions = gain_exceptions(ca, 2);
  float gains0[2][300];
  for (int k = 0; k < 2; k++) memcpy(gains0[k], a[k].gains, sizeof gains0[k]);
  const uint32_t row_start[4] = {0, 2, 2, 5}, rows[5] = {7, 900000, 3, 4, 1u << 31};
  const size_t rlen = 5 * 8 * vb, row_plen = scps__request_row_partitions_size("by_row", row_start, 3);
  uint8_t *out = malloc(256 + 2 * (scps__request_partitions_size("s", ca, 2, exceptions, false) + glen) + row_plen + rlen);
  uint8_t *w = scps__request_put_view(out, fp, 5);
  w = scps__request_put_step(w, step, lr);
  w = scps__request_put_state_id(w, state_id);
  w = scps__request_put_apply_format(w, format, round_trip_exmy(format));
  for (int rep = 0; rep < 2; rep++) {
    if (rep == 1)
      for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < a[k].coo.n; i++) a[k].gains[i] = 1.0f;
    const size_t e = gain_exceptions(ca, 2), plen = scps__request_partitions_size("s", ca, 2, e, false);
    CHECK(rep == 0 ? e == exceptions : e == 0);
    w = scps__request_put_apply_stack_prefix(w, plen, glen);
    uint8_t *at = w;
    w = scps__request_put_partitions(w, "s", ca, 2, e, false);
    CHECK((size_t)(w - at) == plen);
    w = scps__request_put_gradients_prefix(w, glen);
    memcpy(w, grads, glen);
    w += glen;
  }
  /* By row: the stack's prefix counts the row_gradients as it would a
   * gradients field of the same size. */
  w = scps__request_put_apply_stack_prefix(w, row_plen, rlen);
  uint8_t *at = w;
  w = scps__request_put_row_partitions(w, "by_row", row_start, 3, rows);
  CHECK((size_t)(w - at) == row_plen);
  w = scps__request_put_row_gradients_prefix(w, rlen);
  memcpy(w, grads + glen, rlen);
  w += rlen;
  size_t total = (size_t)(w - out);
  Scps__V1__ApplyGradientsRequest *m = scps__v1__apply_gradients_request__unpack(NULL, total, out);
  CHECK(m != NULL);
  if (m) {
    CHECK(m->process_index == 5 && m->config_fingerprint.len == 32 && m->config_fingerprint.data[31] == 9);
    CHECKF(m->step == step, "step %lld", (long long)m->step);
    bool has_lr = m->learning_rate_present_case ==
                  SCPS__V1__APPLY_GRADIENTS_REQUEST__LEARNING_RATE_PRESENT_LEARNING_RATE;
    CHECK(has_lr == (lr >= 0));
    if (has_lr) CHECK(m->learning_rate == lr);
    CHECK(m->state_id == state_id && (int)m->gradient_format == format);
    CHECK(m->n_stacks == 3);
    for (size_t s = 0; s < m->n_stacks && s < 2; s++) {
      if (s == 0)
        for (int k = 0; k < 2; k++) memcpy(a[k].gains, gains0[k], sizeof gains0[k]);
      else
        for (int k = 0; k < 2; k++)
          for (size_t i = 0; i < a[k].coo.n; i++) a[k].gains[i] = 1.0f;
      check_partitions(m->stacks[s]->partitions, "s", ca, 2, s == 0 ? 2 : 0, false);
      CHECK(m->stacks[s]->gradients.len == glen && !memcmp(m->stacks[s]->gradients.data, grads, glen));
      CHECK(!m->stacks[s]->row_gradients.len);
    }
    if (m->n_stacks == 3) {
      const Scps__V1__StackGradients *g = m->stacks[2];
      const Scps__V1__StackPartitions *sp = g->partitions;
      CHECK(sp && !strcmp(sp->stack, "by_row") && sp->n_sc_offsets == 4 &&
            !memcmp(sp->sc_offsets, row_start, sizeof row_start) && sp->rows.len == sizeof rows &&
            !memcmp(sp->rows.data, rows, sizeof rows) && !sp->samples.len && !sp->gains.len &&
            !sp->gain_exceptions.len && !sp->samples_u16.len);
      CHECK(!g->gradients.len && g->row_gradients.len == rlen && !memcmp(g->row_gradients.data, grads + glen, rlen));
    }
    decode_both_ways(out, total, SCPS_REQUEST_APPLY, &m->base);
    scps__v1__apply_gradients_request__free_unpacked(m, NULL);
  }
  free(out);
}

static void test_round_trips(void) {
  const int32_t processes[] = {0, 2, 1023, -1};
  for (int f = 0; f < 3; f++)
    for (size_t i = 0; i < sizeof processes / sizeof *processes; i++) test_lookup_request(processes[i], f);
  for (int f = 0; f < 3; f++) {
    test_apply_request(0, -1.0, f, 0);
    test_apply_request(7, 0.0, f, 0x0123456789abcdefull);
    test_apply_request((int64_t)1 << 40, 0.125, f, 1);
    test_apply_request(-3, HUGE_VAL, f, UINT64_MAX);
  }
}

int main(void) {
  grpc_init();
  test_round_trips();
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
  CHECK(scps__request_decode(bb, SCPS_REQUEST_LOOKUP, 1, 3, &r, msg, sizeof msg) == 0);
  CHECK(r.n_stacks == 1 && r.stacks[0].partitions.rows.len == 12 &&
        (uintptr_t)r.stacks[0].partitions.rows.data % 4 == 0 && !strcmp(r.stacks[0].partitions.stack, "s"));
  scps__request_free(&r);
  grpc_byte_buffer_destroy(bb);
  /* A varint of 11 bytes and a group are refused, naming the byte. */
  uint8_t longv[] = {0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
  bb = sliced(longv, sizeof longv);
  CHECK(scps__request_decode(bb, SCPS_REQUEST_LOOKUP, 1, 3, &r, msg, sizeof msg) == SCPS_EPARSE &&
        strstr(msg, "varint"));
  scps__request_free(&r);
  grpc_byte_buffer_destroy(bb);
  uint8_t group[] = {0x0b, 0x0c};
  bb = sliced(group, sizeof group);
  CHECK(scps__request_decode(bb, SCPS_REQUEST_APPLY, 1, 3, &r, msg, sizeof msg) == SCPS_EPARSE &&
        strstr(msg, "byte 1"));
  scps__request_free(&r);
  grpc_byte_buffer_destroy(bb);
  /* A key that starts inside a stacks entry and ends in the request around
   * it belongs to neither: refused, as protobuf-c refuses it. Both the
   * Lookup's partitions and the ApplyGradients' StackGradients. */
  for (int kind = 0; kind < 2; kind++) {
    uint8_t over[] = {kind ? 0x2a : 0x1a, 0x01, 0x80, 0x01, 0x00};
    int accepted = 0;
    CHECK(agree(over, sizeof over, (scps_request_kind)kind, &accepted) && accepted == 0);
    bb = sliced(over, sizeof over);
    CHECKF(scps__request_decode(bb, (scps_request_kind)kind, 1, 3, &r, msg, sizeof msg) == SCPS_EPARSE &&
               strstr(msg, "runs past the end of its message"), "kind %d: %s", kind, msg);
    scps__request_free(&r);
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
  CHECKF(scps__request_decode(bb, SCPS_REQUEST_LOOKUP, 2, 3, &r, msg, sizeof msg) == SCPS_EPARSE &&
             strstr(msg, "more than 2 entries"), "%s", msg);
  scps__request_free(&r);
  CHECK(scps__request_decode(bb, SCPS_REQUEST_LOOKUP, 3, 3, &r, msg, sizeof msg) == 0);
  CHECK(r.n_stacks == 3 && r.stacks[2].partitions.n_sc_offsets == 5 && r.stacks[2].partitions.sc_offsets[2] == 2);
  scps__request_free(&r);
  grpc_byte_buffer_destroy(bb);
  free(many.p);
  free(offs.p);
  free(b.p);
  free(parts.p);
  grpc_shutdown();
  return scps_test_finish("test_request");
}
