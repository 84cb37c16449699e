#include "scps_client_wire.h"

#include <string.h>


static inline uint8_t tag(int field, int wire_type) { return (uint8_t)(field << 3 | wire_type); }

size_t scps_wire_varint_size(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    n++;
  }
  return n;
}

uint8_t *scps_wire_put_varint(uint8_t *p, uint64_t v) {
  while (v >= 0x80) {
    *p++ = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  *p++ = (uint8_t)v;
  return p;
}

static size_t len_field_size(size_t len) { return 1 + scps_wire_varint_size(len) + len; }

static uint8_t *put_len_field(uint8_t *p, int field, const void *data, size_t len) {
  *p++ = tag(field, SCPS_WT_LEN);
  p = scps_wire_put_varint(p, len);
  if (len) memcpy(p, data, len);
  return p + len;
}

static size_t offsets_body_size(const scps_coo *const *coo, int n_sc) {
  size_t n = 1, total = 0; /* the leading 0 */
  for (int k = 0; k < n_sc; k++) {
    total += coo[k]->n;
    n += scps_wire_varint_size(total);
  }
  return n;
}

static size_t entry_count(const scps_coo *const *coo, int n_sc) {
  size_t n = 0;
  for (int k = 0; k < n_sc; k++) n += coo[k]->n;
  return n;
}

/* Bytes of the gains in whichever form is smaller: none when all are 1.0,
 * else (entry, gain) pairs of the others or every gain. */
static size_t gains_size(size_t n, size_t exceptions) {
  if (!exceptions) return 0;
  return 8 * exceptions < 4 * n ? len_field_size(8 * exceptions) : len_field_size(4 * n);
}

size_t scps_wire_partitions_size(const char *stack, const scps_coo *const *coo, int n_sc, size_t gain_exceptions,
                                 bool samples_u16) {
  size_t n = entry_count(coo, n_sc);
  return len_field_size(strlen(stack)) + len_field_size(offsets_body_size(coo, n_sc)) + len_field_size(4 * n) +
         len_field_size((samples_u16 ? 2 : 4) * n) + gains_size(n, gain_exceptions);
}

/* Field 7: the samples as little-endian uint16. */
static uint8_t *put_samples_u16(uint8_t *p, const scps_coo *const *coo, int n_sc, size_t n) {
  *p++ = tag(7, SCPS_WT_LEN);
  p = scps_wire_put_varint(p, 2 * n);
  for (int k = 0; k < n_sc; k++) {
    const uint32_t *restrict s = coo[k]->samples;
    for (size_t i = 0; i < coo[k]->n; i++) {
      p[2 * i] = (uint8_t)s[i];
      p[2 * i + 1] = (uint8_t)(s[i] >> 8);
    }
    p += 2 * coo[k]->n;
  }
  return p;
}

/* One of rows, samples, gains: the S partitions' arrays back to back. */
static uint8_t *put_entries(uint8_t *p, int field, const scps_coo *const *coo, int n_sc, size_t n,
                            int which) {
  *p++ = tag(field, SCPS_WT_LEN);
  p = scps_wire_put_varint(p, 4 * n);
  for (int k = 0; k < n_sc; k++) {
    const void *src = which == 0 ? (const void *)coo[k]->rows
                      : which == 1 ? (const void *)coo[k]->samples
                                   : (const void *)coo[k]->gains;
    if (coo[k]->n) memcpy(p, src, 4 * coo[k]->n);
    p += 4 * coo[k]->n;
  }
  return p;
}

/* Field 6: the (entry, gain) pair of each gain other than 1.0, at most
 * count of them. Blocks of 16 gains are tested at once, since nearly all
 * are 1.0. */
static uint8_t *put_gain_exceptions(uint8_t *p, const scps_coo *const *coo, int n_sc, size_t count) {
  *p++ = tag(6, SCPS_WT_LEN);
  p = scps_wire_put_varint(p, 8 * count);
  size_t base = 0, left = count;
  for (int k = 0; k < n_sc && left; k++) {
    const float *g = coo[k]->gains;
    const size_t n = coo[k]->n;
    for (size_t i = 0; i < n && left; i += 16) {
      const size_t lim = n - i < 16 ? n - i : 16;
      unsigned other = 0;
      for (size_t j = 0; j < lim; j++) other |= g[i + j] != 1.0f;
      for (size_t j = 0; other && j < lim && left; j++) {
        if (g[i + j] == 1.0f) continue;
        const uint32_t entry = (uint32_t)(base + i + j);
        memcpy(p, &entry, 4);
        memcpy(p + 4, &g[i + j], 4);
        p += 8;
        left--;
      }
    }
    base += n;
  }
  return p;
}

uint8_t *scps_wire_put_partitions(uint8_t *p, const char *stack, const scps_coo *const *coo,
                                  int n_sc, size_t gain_exceptions, bool samples_u16) {
  size_t n = entry_count(coo, n_sc);
  p = put_len_field(p, 1, stack, strlen(stack));
  *p++ = tag(2, SCPS_WT_LEN);
  p = scps_wire_put_varint(p, offsets_body_size(coo, n_sc));
  size_t total = 0;
  p = scps_wire_put_varint(p, 0);
  for (int k = 0; k < n_sc; k++) {
    total += coo[k]->n;
    p = scps_wire_put_varint(p, total);
  }
  p = put_entries(p, 3, coo, n_sc, n, 0);
  p = samples_u16 ? put_samples_u16(p, coo, n_sc, n) : put_entries(p, 4, coo, n_sc, n, 1);
  if (!gain_exceptions) return p;
  if (8 * gain_exceptions < 4 * n) return put_gain_exceptions(p, coo, n_sc, gain_exceptions);
  return put_entries(p, 5, coo, n_sc, n, 2);
}

static size_t row_offsets_body_size(const uint32_t *row_start, int n_sc) {
  size_t n = 0;
  for (int k = 0; k <= n_sc; k++) n += scps_wire_varint_size(row_start[k]);
  return n;
}

size_t scps_wire_row_partitions_size(const char *stack, const uint32_t *row_start, int n_sc) {
  return len_field_size(strlen(stack)) + len_field_size(row_offsets_body_size(row_start, n_sc)) +
         len_field_size(4 * (size_t)row_start[n_sc]);
}

uint8_t *scps_wire_put_row_partitions(uint8_t *p, const char *stack, const uint32_t *row_start, int n_sc,
                                      const uint32_t *rows) {
  p = put_len_field(p, 1, stack, strlen(stack));
  *p++ = tag(2, SCPS_WT_LEN);
  p = scps_wire_put_varint(p, row_offsets_body_size(row_start, n_sc));
  for (int k = 0; k <= n_sc; k++) p = scps_wire_put_varint(p, row_start[k]);
  return put_len_field(p, 3, rows, 4 * (size_t)row_start[n_sc]);
}

/* int32 fields are varints of the sign-extended 64-bit value. */
static uint64_t int_varint(int64_t v) { return (uint64_t)v; }

size_t scps_wire_view_size(int32_t process_index) {
  return len_field_size(SCPS_WIRE_FINGERPRINT_BYTES) + 1 +
         scps_wire_varint_size(int_varint(process_index));
}

uint8_t *scps_wire_put_view(uint8_t *p, const uint8_t *fingerprint, int32_t process_index) {
  p = put_len_field(p, 1, fingerprint, SCPS_WIRE_FINGERPRINT_BYTES);
  *p++ = tag(2, SCPS_WT_VARINT);
  return scps_wire_put_varint(p, int_varint(process_index));
}

size_t scps_wire_format_size(int format) { return format ? 1 + scps_wire_varint_size((uint64_t)format) : 0; }

static uint8_t *put_format(uint8_t *p, int field, int format) {
  if (!format) return p;
  *p++ = tag(field, SCPS_WT_VARINT);
  return scps_wire_put_varint(p, (uint64_t)format);
}

uint8_t *scps_wire_put_lookup_format(uint8_t *p, int format) { return put_format(p, 4, format); }
uint8_t *scps_wire_put_apply_format(uint8_t *p, int format) { return put_format(p, 6, format); }

size_t scps_wire_lookup_stack_prefix_size(size_t len) { return 1 + scps_wire_varint_size(len); }

uint8_t *scps_wire_put_lookup_stack_prefix(uint8_t *p, size_t len) {
  *p++ = tag(3, SCPS_WT_LEN);
  return scps_wire_put_varint(p, len);
}

uint8_t *scps_wire_put_step(uint8_t *p, int64_t step, double learning_rate) {
  *p++ = tag(3, SCPS_WT_VARINT);
  p = scps_wire_put_varint(p, int_varint(step));
  if (learning_rate >= 0) {
    *p++ = tag(4, SCPS_WT_I64);
    memcpy(p, &learning_rate, 8);
    p += 8;
  }
  return p;
}

uint8_t *scps_wire_put_state_id(uint8_t *p, uint64_t state_id) {
  if (!state_id) return p;
  *p++ = tag(7, SCPS_WT_I64);
  memcpy(p, &state_id, 8); /* little-endian host, as the learning rate */
  return p + 8;
}

uint8_t *scps_wire_put_apply_stack_prefix(uint8_t *p, size_t parts_len, size_t grads_len) {
  size_t body = len_field_size(parts_len) + len_field_size(grads_len);
  *p++ = tag(5, SCPS_WT_LEN);
  p = scps_wire_put_varint(p, body);
  *p++ = tag(1, SCPS_WT_LEN);
  return scps_wire_put_varint(p, parts_len);
}

uint8_t *scps_wire_put_gradients_prefix(uint8_t *p, size_t grads_len) {
  *p++ = tag(2, SCPS_WT_LEN);
  return scps_wire_put_varint(p, grads_len);
}

uint8_t *scps_wire_put_row_gradients_prefix(uint8_t *p, size_t len) {
  *p++ = tag(3, SCPS_WT_LEN);
  return scps_wire_put_varint(p, len);
}

size_t scps_wire_distinct_rows_size(int n_sent) {
  return n_sent > 0 ? 1 + scps_wire_varint_size((uint64_t)n_sent) + (size_t)n_sent : 0;
}

uint8_t *scps_wire_put_distinct_rows(uint8_t *p, const bool *distinct, const int *slot, int n_stacks, int n_sent) {
  if (n_sent <= 0) return p;
  *p++ = tag(5, SCPS_WT_LEN);
  p = scps_wire_put_varint(p, (uint64_t)n_sent);
  for (int st = 0; st < n_stacks; st++)
    if (slot[st] >= 0) *p++ = distinct[st] ? 1 : 0;
  return p;
}

/* The extent of a length-delimited field whose key was just read. */
static int field_extent(scps_slices *m, size_t limit, size_t *off, size_t *len) {
  if (scps_slices_len(m, limit, len)) return -1;
  *off = m->pos;
  return scps_slices_read(m, NULL, *len) ? -1 : 0;
}

int scps_wire_parse_lookup_response(scps_slices *m, scps_wire_activations *out, int max) {
  int count = 0;
  scps_slices_seek(m, 0);
  while (m->pos < m->total) {
    uint32_t field;
    int wt;
    if (scps_slices_key(m, &field, &wt)) return -1;
    if (field != 1) {
      if (scps_slices_skip_field(m, wt, m->total)) return -1;
      continue;
    }
    size_t body, body_len;
    if (wt != SCPS_WT_LEN || count == INT32_MAX || field_extent(m, m->total, &body, &body_len)) return -1;
    scps_wire_activations a = {0, 0, 0, 0, false};
    const size_t end = body + body_len;
    scps_slices_seek(m, body);
    while (m->pos < end) {
      if (scps_slices_key(m, &field, &wt)) return -1;
      if ((field == 1 || field == 2 || field == 3) && wt != SCPS_WT_LEN) return -1;
      if (field == 1) {
        if (field_extent(m, end, &a.stack_off, &a.stack_len)) return -1;
      } else if (field == 2 || field == 3) {
        if (field_extent(m, end, &a.off, &a.len)) return -1;
        a.rows = field == 3;
      } else if (scps_slices_skip_field(m, wt, end)) {
        return -1;
      }
    }
    if (m->pos != end) return -1; /* a key or varint ran over the entry's end */
    if (count < max) out[count] = a;
    count++;
  }
  return count;
}
