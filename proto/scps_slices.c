#include "scps_slices.h"

#include <grpc/byte_buffer_reader.h>
#include <stdlib.h>
#include <string.h>

#include "scps_error.h"

static int failed(scps_slices *m, const char *why) {
  m->why = why;
  return SCPS_EPARSE;
}

int scps__slices_init(scps_slices *m, grpc_byte_buffer *bb) {
  memset(m, 0, sizeof *m);
  grpc_byte_buffer_reader br;
  if (!grpc_byte_buffer_reader_init(&br, bb)) return SCPS_EINVAL;
  grpc_slice s;
  int rc = 0;
  while (grpc_byte_buffer_reader_next(&br, &s)) {
    if (!GRPC_SLICE_LENGTH(s)) {
      grpc_slice_unref(s);
      continue;
    }
    if (m->n + 1 >= m->cap) {
      size_t c = m->cap ? 2 * m->cap : 64;
      grpc_slice *bigger = realloc(m->s, c * sizeof *bigger);
      if (bigger) m->s = bigger;
      size_t *starts = bigger ? realloc(m->start, c * sizeof *starts) : NULL;
      if (!starts) {
        grpc_slice_unref(s);
        rc = SCPS_ENOMEM;
        break;
      }
      m->start = starts;
      m->cap = c;
    }
    m->start[m->n] = m->total;
    m->s[m->n++] = s;
    m->total += GRPC_SLICE_LENGTH(s);
  }
  grpc_byte_buffer_reader_destroy(&br);
  if (m->start) m->start[m->n] = m->total;
  return rc;
}

void scps__slices_free(scps_slices *m) {
  for (size_t i = 0; i < m->n; i++) grpc_slice_unref(m->s[i]);
  free(m->s);
  free(m->start);
  memset(m, 0, sizeof *m);
}

const uint8_t *scps__slices_at(const scps_slices *m, size_t off, size_t *avail) {
  if (off >= m->total) {
    *avail = 0;
    return NULL;
  }
  size_t lo = 0, hi = m->n; /* the slice k with start[k] <= off < start[k + 1] */
  while (hi - lo > 1) {
    size_t mid = (lo + hi) / 2;
    if (m->start[mid] <= off) lo = mid;
    else hi = mid;
  }
  *avail = m->start[lo + 1] - off;
  return GRPC_SLICE_START_PTR(m->s[lo]) + (off - m->start[lo]);
}

void scps__slices_seek(scps_slices *m, size_t off) {
  m->pos = off < m->total ? off : m->total;
  m->cur = 0;
  while (m->cur < m->n && m->start[m->cur + 1] <= m->pos) m->cur++;
}

const uint8_t *scps__slices_span(const scps_slices *m, size_t off, size_t n, uint8_t *tmp) {
  size_t avail;
  const uint8_t *p = scps__slices_at(m, off, &avail);
  if (avail >= n) return p;
  for (size_t done = 0; done < n; done += avail) {
    p = scps__slices_at(m, off + done, &avail);
    if (avail > n - done) avail = n - done;
    memcpy(tmp + done, p, avail);
  }
  return tmp;
}

int scps__slices_read(scps_slices *m, void *dst, size_t n) {
  if (n > m->total - m->pos) return failed(m, "truncated");
  uint8_t *d = dst;
  while (n > 0) {
    while (m->start[m->cur + 1] <= m->pos) m->cur++;
    size_t in = m->pos - m->start[m->cur], k = m->start[m->cur + 1] - m->pos;
    if (k > n) k = n;
    if (d) {
      memcpy(d, GRPC_SLICE_START_PTR(m->s[m->cur]) + in, k);
      d += k;
    }
    m->pos += k;
    n -= k;
  }
  return 0;
}

int scps__slices_varint(scps_slices *m, uint64_t *v) {
  uint64_t x = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    uint8_t b = 0;
    int rc = scps__slices_read(m, &b, 1);
    if (rc) return rc;
    x |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *v = x;
      return 0;
    }
  }
  return failed(m, "varint longer than 10 bytes");
}

int scps__slices_key(scps_slices *m, uint32_t *field, int *wire_type) {
  uint64_t key = 0;
  int rc = scps__slices_varint(m, &key);
  if (rc) return rc;
  if (key >> 3 == 0 || key >> 3 > 0x1fffffff) return failed(m, "field number 0 or above 2^29 - 1");
  *field = (uint32_t)(key >> 3);
  *wire_type = (int)(key & 7);
  return 0;
}

int scps__slices_len(scps_slices *m, size_t limit, size_t *len) {
  uint64_t v = 0;
  int rc = scps__slices_varint(m, &v);
  if (rc) return rc;
  if (m->pos > limit || v > limit - m->pos) return failed(m, "field runs past its message");
  *len = (size_t)v;
  return 0;
}

int scps__slices_skip_field(scps_slices *m, int wire_type, size_t limit) {
  uint64_t v = 0;
  size_t n = 0;
  int rc;
  switch (wire_type) {
  case SCPS_WT_VARINT: return scps__slices_varint(m, &v);
  case SCPS_WT_I64:
    return m->pos > limit || limit - m->pos < 8 ? failed(m, "truncated") : scps__slices_read(m, NULL, 8);
  case SCPS_WT_I32:
    return m->pos > limit || limit - m->pos < 4 ? failed(m, "truncated") : scps__slices_read(m, NULL, 4);
  case SCPS_WT_LEN:
    rc = scps__slices_len(m, limit, &n);
    return rc ? rc : scps__slices_read(m, NULL, n);
  default: return failed(m, "wire type 3, 4, 6 or 7 (groups are not used by scps.proto)");
  }
}
