#include "scps_lookup_reply.h"

#include <stdio.h>
#include <string.h>

#include "scps_error.h"
#include "scps_layout.h"

size_t scps__lookup_reply_put_head(uint8_t *p, const char *stack, size_t name_len, bool rows, size_t len) {
  /* LookupResponse.stacks = 1; StackActivations.stack = 1, .activations =
   * 2, .rows = 3. */
  const size_t inner = scps__pbw_len_size(name_len) + scps__pbw_len_size(len);
  uint8_t *w = scps__pbw_put_len(p, 1, inner);
  w = scps__pbw_put_bytes(w, 1, stack, name_len);
  w = scps__pbw_put_len(w, rows ? 3 : 2, len);
  return (size_t)(w - p);
}

size_t scps__lookup_reply_put_placed(uint8_t *p) {
  uint8_t *w = scps__pbw_put_key(p, 2, SCPS_WT_VARINT);
  *w++ = 1;
  return (size_t)(w - p);
}

bool scps__lookup_reply_placed(scps_slices *m) {
  bool placed = false;
  scps__slices_seek(m, 0);
  while (m->pos < m->total) {
    uint32_t field;
    int wt;
    uint64_t v;
    if (scps__slices_key(m, &field, &wt)) return false;
    if (field == 2 && wt == SCPS_WT_VARINT) {
      if (scps__slices_varint(m, &v)) return false;
      placed = v != 0;
    } else if (scps__slices_skip_field(m, wt, m->total)) {
      return false;
    }
  }
  return placed;
}

/* The extent of a length-delimited field whose key was just read. */
static int field_extent(scps_slices *m, size_t limit, size_t *off, size_t *len) {
  if (scps__slices_len(m, limit, len)) return -1;
  *off = m->pos;
  return scps__slices_read(m, NULL, *len) ? -1 : 0;
}

int scps__lookup_reply_parse(scps_slices *m, scps_lookup_reply_stack *out, int max) {
  int count = 0;
  scps__slices_seek(m, 0);
  while (m->pos < m->total) {
    uint32_t field;
    int wt;
    if (scps__slices_key(m, &field, &wt)) return -1;
    if (field != 1) {
      if (scps__slices_skip_field(m, wt, m->total)) return -1;
      continue;
    }
    size_t body, body_len;
    if (wt != SCPS_WT_LEN || count == INT32_MAX || field_extent(m, m->total, &body, &body_len)) return -1;
    scps_lookup_reply_stack a = {0, 0, 0, 0, false};
    const size_t end = body + body_len;
    scps__slices_seek(m, body);
    while (m->pos < end) {
      if (scps__slices_key(m, &field, &wt)) return -1;
      if ((field == 1 || field == 2 || field == 3) && wt != SCPS_WT_LEN) return -1;
      if (field == 1) {
        if (field_extent(m, end, &a.stack_off, &a.stack_len)) return -1;
      } else if (field == 2 || field == 3) {
        if (field_extent(m, end, &a.off, &a.len)) return -1;
        a.rows = field == 3;
      } else if (scps__slices_skip_field(m, wt, end)) {
        return -1;
      }
    }
    if (m->pos != end) return -1; /* a key or varint ran over the entry's end */
    if (count < max) out[count] = a;
    count++;
  }
  return count;
}

int scps__lookup_reply_read(scps_slices *m, grpc_byte_buffer *bb, scps_lookup_reply_stack *out, int max, int want,
                           char *msg, size_t len) {
  scps__slices_free(m);
  int rc = scps__slices_init(m, bb);
  if (rc) {
    snprintf(msg, len, "Lookup: cannot read a %zu-byte response", grpc_byte_buffer_length(bb));
    return rc == SCPS_ENOMEM ? SCPS_ENOMEM : SCPS_EIO;
  }
  int got = scps__lookup_reply_parse(m, out, max);
  if (got < 0) {
    snprintf(msg, len, "Lookup: response of %zu bytes is not a valid scps.v1.LookupResponse", m->total);
    return SCPS_EIO;
  }
  if (got != want) {
    snprintf(msg, len, "Lookup answered %d stacks for a request of %d", got, want);
    return SCPS_EIO;
  }
  return 0;
}

int scps__lookup_reply_check(const scps_slices *m, const scps_lookup_reply_stack *a, int k, const char *name,
                            bool rows, size_t want, char *msg, size_t len) {
  uint8_t got[SCPS_STACK_NAME_MAX];
  size_t shown = a->stack_len < sizeof got ? a->stack_len : sizeof got;
  const uint8_t *got_name = scps__slices_span(m, a->stack_off, shown, got);
  if (a->stack_len != strlen(name) || memcmp(got_name, name, a->stack_len)) {
    snprintf(msg, len, "Lookup answer stacks[%d] is '%.*s', requested '%s'", k, (int)shown,
             (const char *)got_name, name);
    return SCPS_EIO;
  }
  if (a->rows != rows) {
    snprintf(msg, len, "Lookup answer for stack '%s' holds %s, %s asked for", name,
             a->rows ? "distinct rows" : "pooled activations",
             rows ? "distinct rows were" : "pooled activations were");
    return SCPS_EIO;
  }
  if (a->len != want) {
    snprintf(msg, len, "Lookup answer for stack '%s' holds %zu bytes of %s, expected %zu", name, a->len,
             rows ? "distinct rows" : "activations", want);
    return SCPS_EIO;
  }
  return 0;
}
