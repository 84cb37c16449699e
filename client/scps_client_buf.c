/* scps_client_buf: reusable buffers lent to gRPC as slices. */
#include "scps_client_buf.h"

#include <stdatomic.h>
#include <stdlib.h>

#include <grpc/slice.h>

/* Owner and gRPC hand the buffer back and forth through state: only the
 * owner moves it out of IDLE, only gRPC's destroy callback out of LENT, and
 * whoever finds the other side gone frees it. */
enum { BUF_IDLE, BUF_LENT, BUF_ORPHAN };

struct scps_client_buf {
  atomic_int state;
  size_t cap;
  unsigned char *data;
};

static void buf_free(scps_client_buf *b) {
  free(b->data);
  free(b);
}

static void buf_returned(void *ud) {
  scps_client_buf *b = ud;
  int lent = BUF_LENT;
  if (!atomic_compare_exchange_strong_explicit(&b->state, &lent, BUF_IDLE, memory_order_acq_rel,
                                               memory_order_acquire))
    buf_free(b);
}

void scps__client_buf_release(scps_client_buf **slot) {
  scps_client_buf *b = *slot;
  *slot = NULL;
  if (!b) return;
  int lent = BUF_LENT;
  if (!atomic_compare_exchange_strong_explicit(&b->state, &lent, BUF_ORPHAN, memory_order_acq_rel,
                                               memory_order_acquire))
    buf_free(b);
}

static scps_client_buf *buf_create(size_t len) {
  scps_client_buf *b = malloc(sizeof *b);
  size_t cap = (len + 63) / 64 * 64;
  void *data = NULL;
  if (!b || posix_memalign(&data, 64, cap ? cap : 64)) {
    free(b);
    return NULL;
  }
  atomic_init(&b->state, BUF_IDLE);
  b->cap = cap;
  b->data = data;
  return b;
}

static scps_client_buf *buf_idle(scps_client_buf **slot, size_t len) {
  scps_client_buf *b = *slot;
  if (b && atomic_load_explicit(&b->state, memory_order_acquire) == BUF_IDLE && b->cap >= len) return b;
  b = buf_create(len);
  if (!b) return NULL;
  scps__client_buf_release(slot);
  *slot = b;
  return b;
}

void *scps__client_buf_lend(scps_client_buf **slot, size_t len, grpc_slice *out) {
  scps_client_buf *b = buf_idle(slot, len);
  if (!b) return NULL;
  atomic_store_explicit(&b->state, BUF_LENT, memory_order_relaxed);
  *out = grpc_slice_new_with_user_data(b->data, len, buf_returned, b);
  return b->data;
}
