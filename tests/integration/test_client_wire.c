/* libscps's hand-written request encoding, decoded by protobuf-c (the
 * server's decoder): every field must come back as written; and its
 * LookupResponse decoder, fed by protobuf-c's encoder. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/grpc.h>

#include "scps.pb-c.h"
#include "scps_client_wire.h"
#include "scps_test.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next_u32(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng >> 11);
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

static void test_varints(void) {
  const uint64_t v[] = {0, 1, 127, 128, 300, 16383, 16384, (1ull << 32) - 1, (uint64_t)-1};
  const size_t sizes[] = {1, 1, 1, 2, 2, 2, 3, 5, 10};
  for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
    uint8_t buf[16];
    uint8_t *end = scps_wire_put_varint(buf, v[i]);
    CHECKF((size_t)(end - buf) == sizes[i] && scps_wire_varint_size(v[i]) == sizes[i], "varint %llu",
           (unsigned long long)v[i]);
    uint64_t back = 0;
    for (size_t k = 0; k < sizes[i]; k++) back |= (uint64_t)(buf[k] & 0x7f) << (7 * k);
    CHECK(back == v[i]);
  }
}

/* Three stacks for a process of three SparseCores, with an empty
 * partition each: the first's gains sent as they are, the second's (all
 * 1.0) left out and its samples as uint16, the third's (one in seven other
 * than 1.0) as exceptions. */
static void test_lookup_request(int32_t process_index) {
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
  uint8_t fp[SCPS_WIRE_FINGERPRINT_BYTES];
  for (int i = 0; i < SCPS_WIRE_FINGERPRINT_BYTES; i++) fp[i] = (uint8_t)(i * 37 + 1);
  char long_name[128];
  memset(long_name, 'x', 127);
  long_name[127] = '\0';
  size_t la = scps_wire_partitions_size("stack_a", ca, 3, ea, false),
         lb = scps_wire_partitions_size(long_name, cb, 3, 0, true), lx = scps_wire_partitions_size("x", cx, 3, ex, false);
  size_t total = scps_wire_view_size(process_index) + scps_wire_lookup_stack_prefix_size(la) + la +
                 scps_wire_lookup_stack_prefix_size(lb) + lb + scps_wire_lookup_stack_prefix_size(lx) + lx;
  uint8_t *buf = malloc(total), *w = scps_wire_put_view(buf, fp, process_index);
  w = scps_wire_put_lookup_stack_prefix(w, la);
  uint8_t *pa = w;
  w = scps_wire_put_partitions(w, "stack_a", ca, 3, ea, false);
  CHECK((size_t)(w - pa) == la);
  w = scps_wire_put_lookup_stack_prefix(w, lb);
  pa = w;
  w = scps_wire_put_partitions(w, long_name, cb, 3, 0, true);
  CHECK((size_t)(w - pa) == lb);
  w = scps_wire_put_lookup_stack_prefix(w, lx);
  pa = w;
  w = scps_wire_put_partitions(w, "x", cx, 3, ex, false);
  CHECK((size_t)(w - pa) == lx);
  CHECKF((size_t)(w - buf) == total, "wrote %zu of %zu", (size_t)(w - buf), total);
  Scps__V1__LookupRequest *m = scps__v1__lookup_request__unpack(NULL, total, buf);
  CHECK(m != NULL);
  if (m) {
    CHECK(m->config_fingerprint.len == sizeof fp && !memcmp(m->config_fingerprint.data, fp, sizeof fp));
    CHECK(m->process_index == process_index);
    CHECK(m->n_stacks == 3);
    if (m->n_stacks == 3) {
      check_partitions(m->stacks[0], "stack_a", ca, 3, 2, false);
      check_partitions(m->stacks[1], long_name, cb, 3, 0, true);
      check_partitions(m->stacks[2], "x", cx, 3, 1, false);
    }
    scps__v1__lookup_request__free_unpacked(m, NULL);
  }
  free(buf);
}

/* An ApplyGradientsRequest assembled from the same pieces libscps sends as
 * separate slices: head, per stack prefix, partitions, gradients; the
 * second stack's partitions with their gains all 1.0, so left out. */
static void test_apply_request(int64_t step, double lr) {
  static part a[2];
  fill(&a[0], 17);
  fill(&a[1], 3);
  const scps_coo *ca[2] = {&a[0].coo, &a[1].coo};
  float grads[48 * 8];
  for (int i = 0; i < 48 * 8; i++) grads[i] = (float)i * 0.25f - 7.0f;
  uint8_t fp[SCPS_WIRE_FINGERPRINT_BYTES] = {0};
  fp[31] = 9;
  size_t glen = sizeof grads;
  const size_t exceptions = gain_exceptions(ca, 2);
  float gains0[2][300];
  for (int k = 0; k < 2; k++) memcpy(gains0[k], a[k].gains, sizeof gains0[k]);
  uint8_t *buf = malloc(256 + 2 * (scps_wire_partitions_size("s", ca, 2, exceptions, false) + glen));
  uint8_t *w = scps_wire_put_view(buf, fp, 5);
  w = scps_wire_put_step(w, step, lr);
  for (int rep = 0; rep < 2; rep++) {
    if (rep == 1)
      for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < a[k].coo.n; i++) a[k].gains[i] = 1.0f;
    const size_t e = gain_exceptions(ca, 2), plen = scps_wire_partitions_size("s", ca, 2, e, false);
    CHECK(rep == 0 ? e == exceptions : e == 0);
    w = scps_wire_put_apply_stack_prefix(w, plen, glen);
    uint8_t *at = w;
    w = scps_wire_put_partitions(w, "s", ca, 2, e, false);
    CHECK((size_t)(w - at) == plen);
    w = scps_wire_put_gradients_prefix(w, glen);
    memcpy(w, grads, glen);
    w += glen;
  }
  size_t total = (size_t)(w - buf);
  Scps__V1__ApplyGradientsRequest *m = scps__v1__apply_gradients_request__unpack(NULL, total, buf);
  CHECK(m != NULL);
  if (m) {
    CHECK(m->process_index == 5 && m->config_fingerprint.len == 32 && m->config_fingerprint.data[31] == 9);
    CHECKF(m->step == step, "step %lld", (long long)m->step);
    bool has_lr = m->learning_rate_present_case ==
                  SCPS__V1__APPLY_GRADIENTS_REQUEST__LEARNING_RATE_PRESENT_LEARNING_RATE;
    CHECK(has_lr == (lr >= 0));
    if (has_lr) CHECK(m->learning_rate == lr);
    CHECK(m->n_stacks == 2);
    for (size_t s = 0; s < m->n_stacks; s++) {
      if (s == 0)
        for (int k = 0; k < 2; k++) memcpy(a[k].gains, gains0[k], sizeof gains0[k]);
      else
        for (int k = 0; k < 2; k++)
          for (size_t i = 0; i < a[k].coo.n; i++) a[k].gains[i] = 1.0f;
      check_partitions(m->stacks[s]->partitions, "s", ca, 2, s == 0 ? 2 : 0, false);
      CHECK(m->stacks[s]->gradients.len == glen && !memcmp(m->stacks[s]->gradients.data, grads, glen));
    }
    scps__v1__apply_gradients_request__free_unpacked(m, NULL);
  }
  free(buf);
}

/* Packs a LookupResponse with protobuf-c, optionally with unknown fields
 * that the decoder must skip. */
static size_t pack_response(uint8_t **out, int n, const float *data, size_t per, bool unknown) {
  Scps__V1__StackActivations sa[4], *psa[4];
  char names[4][16];
  for (int i = 0; i < n; i++) {
    scps__v1__stack_activations__init(&sa[i]);
    snprintf(names[i], sizeof names[i], "stack_%d", i);
    sa[i].stack = names[i];
    sa[i].activations.data = (uint8_t *)(const void *)(data + (size_t)i * per);
    sa[i].activations.len = per * sizeof(float);
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
static int parse_sliced(const uint8_t *buf, size_t len, size_t every, scps_slices *m, scps_wire_activations *a,
                        int max) {
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
  int rc = scps_slices_init(m, bb);
  grpc_byte_buffer_destroy(bb);
  return rc ? -2 : scps_wire_parse_lookup_response(m, a, max);
}

static int parse(const uint8_t *buf, size_t len, scps_wire_activations *a, int max) {
  scps_slices m;
  int n = parse_sliced(buf, len, 7, &m, a, max);
  scps_slices_free(&m);
  return n;
}

static void test_lookup_response(void) {
  float data[4 * 64];
  for (int i = 0; i < 4 * 64; i++) data[i] = (float)i * 0.5f - 3.0f;
  for (int unknown = 0; unknown < 2; unknown++) {
    uint8_t *buf;
    size_t len = pack_response(&buf, 3, data, 64, unknown);
    scps_wire_activations a[4];
    for (size_t every = 0; every < 100; every += 33) {
      scps_slices m;
      int n = parse_sliced(buf, len, every, &m, a, 4);
      CHECKF(n == 3, "%d stacks", n);
      for (int i = 0; i < n && i < 3; i++) {
        char want[16];
        uint8_t tmp[64 * sizeof(float)];
        snprintf(want, sizeof want, "stack_%d", i);
        CHECK(a[i].stack_len == strlen(want) && !memcmp(scps_slices_span(&m, a[i].stack_off, a[i].stack_len, tmp),
                                                        want, a[i].stack_len));
        CHECK(a[i].len == 64 * sizeof(float) &&
              !memcmp(scps_slices_span(&m, a[i].off, a[i].len, tmp), data + i * 64, a[i].len));
      }
      scps_slices_free(&m);
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
  scps_wire_activations a[1];
  CHECK(parse(wrong_type, sizeof wrong_type, a, 1) == -1);
  CHECK(parse(field_zero, sizeof field_zero, a, 1) == -1);
  CHECK(parse(long_varint, sizeof long_varint, a, 1) == -1);
  CHECK(parse(past_end, sizeof past_end, a, 1) == -1);
  CHECK(parse(group, sizeof group, a, 1) == -1);
  CHECK(parse(NULL, 0, a, 1) == 0);
}

int main(void) {
  grpc_init();
  test_varints();
  test_lookup_response();
  test_lookup_request(0);
  test_lookup_request(2);
  test_lookup_request(1023);
  test_apply_request(0, -1.0);
  test_apply_request(7, 0.0);
  test_apply_request((int64_t)1 << 40, 0.125);
  grpc_shutdown();
  return scps_test_finish("test_client_wire");
}
