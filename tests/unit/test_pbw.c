/* scps_pbw, the one protobuf writer: varints of every length, keys and
 * length-delimited fields, read back with scps_slices and protobuf-c. */
#include <grpc/grpc.h>
#include <string.h>

#include "scps.pb-c.h"
#include "scps_pbw.h"
#include "scps_slices.h"
#include "scps_test.h"

/* The bytes as a one-slice message for scps_slices. */
static int slices_of(scps_slices *m, const uint8_t *p, size_t n) {
  grpc_slice s = grpc_slice_from_copied_buffer((const char *)p, n);
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
  grpc_slice_unref(s);
  int rc = scps__slices_init(m, bb);
  grpc_byte_buffer_destroy(bb);
  return rc;
}

static void test_varints(void) {
  const uint64_t v[] = {0, 1, 127, 128, 300, 16383, 16384, (1ull << 32) - 1, (uint64_t)-1};
  const size_t sizes[] = {1, 1, 1, 2, 2, 2, 3, 5, 10};
  for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
    uint8_t buf[16];
    uint8_t *end = scps__pbw_put_varint(buf, v[i]);
    CHECKF((size_t)(end - buf) == sizes[i] && scps__pbw_varint_size(v[i]) == sizes[i], "varint %llu",
           (unsigned long long)v[i]);
    CHECK(sizes[i] <= SCPS_PBW_VARINT_MAX);
    uint64_t back = 0;
    for (size_t k = 0; k < sizes[i]; k++) back |= (uint64_t)(buf[k] & 0x7f) << (7 * k);
    CHECK(back == v[i]);
    scps_slices m;
    CHECK(slices_of(&m, buf, sizes[i]) == 0);
    back = ~v[i];
    CHECK(scps__slices_varint(&m, &back) == 0 && back == v[i] && m.pos == sizes[i]);
    scps__slices_free(&m);
  }
}

/* A StackActivations written with the writer's three calls: protobuf-c
 * reads the same fields, and each size is what was written. */
static void test_fields(void) {
  static uint8_t body[300], buf[400];
  for (size_t i = 0; i < sizeof body; i++) body[i] = (uint8_t)(i * 7);
  const size_t lens[] = {0, 1, 127, 128, 300};
  for (size_t i = 0; i < sizeof lens / sizeof *lens; i++) {
    uint8_t *w = scps__pbw_put_bytes(buf, 1, "name", 4);
    CHECK((size_t)(w - buf) == scps__pbw_len_size(4));
    uint8_t *at = w;
    w = scps__pbw_put_len(w, 3, lens[i]);
    CHECK((size_t)(w - at) + lens[i] == scps__pbw_len_size(lens[i]));
    memcpy(w, body, lens[i]);
    w += lens[i];
    at = w;
    w = scps__pbw_put_key(w, 9, SCPS_WT_VARINT); /* an unknown field */
    w = scps__pbw_put_varint(w, 5);
    CHECK(w - at == 2 && at[0] == (9 << 3 | SCPS_WT_VARINT));
    Scps__V1__StackActivations *m = scps__v1__stack_activations__unpack(NULL, (size_t)(w - buf), buf);
    CHECKF(m != NULL, "length %zu", lens[i]);
    if (!m) continue;
    CHECK(!strcmp(m->stack, "name") && m->rows.len == lens[i] && !m->activations.len);
    CHECK(!lens[i] || !memcmp(m->rows.data, body, lens[i]));
    scps__v1__stack_activations__free_unpacked(m, NULL);
  }
}

int main(void) {
  grpc_init();
  test_varints();
  test_fields();
  grpc_shutdown();
  return scps_test_finish("test_pbw");
}
