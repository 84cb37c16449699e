#include "scps_request.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scps_error.h"
#include "scps_pbw.h"
#include "scps_slices.h"

static uint8_t empty_bytes[1];

/* A request being decoded, and where an error is described. */
typedef struct reader {
  scps_slices m;
  char *msg;
  size_t msg_len;
  const char *what; /* "scps.v1.LookupRequest", for messages */
  size_t max_stacks, max_sc_offsets;
} reader;

static int fail(reader *rd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(reader *rd, const char *fmt, ...) {
  char why[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  snprintf(rd->msg, rd->msg_len, "request of %zu bytes is not a valid %s: %s at byte %zu", rd->m.total, rd->what,
           why, rd->m.pos);
  return SCPS_EPARSE;
}

static int nomem(reader *rd, size_t bytes) {
  snprintf(rd->msg, rd->msg_len, "out of memory decoding a %zu-byte request (%zu bytes wanted)", rd->m.total,
           bytes);
  return SCPS_ENOMEM;
}

/* The scps_slices reads, with their failure described in rd->msg. */
static int checked(reader *rd, int rc) { return rc ? fail(rd, "%s", rd->m.why) : 0; }
static int read_varint(reader *rd, uint64_t *v) { return checked(rd, scps__slices_varint(&rd->m, v)); }
static int read_key(reader *rd, uint32_t *field, int *wt) {
  return checked(rd, scps__slices_key(&rd->m, field, wt));
}
static int read_len(reader *rd, size_t limit, size_t *n) { return checked(rd, scps__slices_len(&rd->m, limit, n)); }
static int read_bytes(reader *rd, void *dst, size_t n) { return checked(rd, scps__slices_read(&rd->m, dst, n)); }
static int skip_field(reader *rd, int wt, size_t limit) {
  return checked(rd, scps__slices_skip_field(&rd->m, wt, limit));
}

static void bytes_free(scps_req_bytes *b) {
  if (b->data != empty_bytes) free(b->data);
  b->data = empty_bytes;
  b->len = 0;
}

/* A bytes field: replaces any earlier value (proto3: the last one wins). */
static int read_bytes_field(reader *rd, size_t limit, scps_req_bytes *out) {
  size_t n = 0;
  int rc = read_len(rd, limit, &n);
  if (rc) return rc;
  uint8_t *d = n ? malloc(n) : empty_bytes;
  if (!d) return nomem(rd, n);
  rc = read_bytes(rd, n ? d : NULL, n);
  if (rc) {
    if (n) free(d);
    return rc;
  }
  bytes_free(out);
  out->data = d;
  out->len = n;
  return 0;
}

static int read_string_field(reader *rd, size_t limit, char **out) {
  size_t n = 0;
  int rc = read_len(rd, limit, &n);
  if (rc) return rc;
  char *s = malloc(n + 1);
  if (!s) return nomem(rd, n + 1);
  rc = read_bytes(rd, (uint8_t *)s, n);
  if (!rc && memchr(s, '\0', n)) rc = fail(rd, "a string holds a NUL byte");
  if (rc) {
    free(s);
    return rc;
  }
  s[n] = '\0';
  free(*out);
  *out = s;
  return 0;
}

static int expect(reader *rd, uint32_t field, int wire_type, int want) {
  return wire_type == want ? 0 : fail(rd, "field %u has wire type %d, expected %d", field, wire_type, want);
}

static int append_offset(reader *rd, scps_req_partitions *p, uint64_t v, size_t *cap) {
  if (v > UINT32_MAX) return fail(rd, "sc_offsets value %llu exceeds uint32", (unsigned long long)v);
  if (p->n_sc_offsets >= rd->max_sc_offsets) {
    p->n_sc_offsets++;
    return 0;
  }
  if (p->n_sc_offsets == *cap) {
    size_t c = *cap ? 2 * *cap : 16;
    uint32_t *bigger = realloc(p->sc_offsets, c * sizeof *bigger);
    if (!bigger) return nomem(rd, c * sizeof *bigger);
    p->sc_offsets = bigger;
    *cap = c;
  }
  p->sc_offsets[p->n_sc_offsets++] = (uint32_t)v;
  return 0;
}

/* A sub-message's fields must end exactly where its length says: a key or
 * varint that runs over that end belongs to no field. */
static int ended(reader *rd, size_t limit) {
  return rd->m.pos == limit ? 0 : fail(rd, "a field runs past the end of its message at byte %zu", limit);
}

/* StackPartitions ending at `limit`, merged into p as protobuf merges a
 * message field that occurs twice. */
static int read_partitions(reader *rd, size_t limit, scps_req_partitions *p) {
  size_t cap = p->n_sc_offsets < rd->max_sc_offsets ? p->n_sc_offsets : rd->max_sc_offsets;
  while (rd->m.pos < limit) {
    uint64_t v = 0;
    uint32_t field = 0;
    int wt = 0;
    int rc = read_key(rd, &field, &wt);
    if (rc) return rc;
    switch (field) {
    case 1:
      rc = expect(rd, field, wt, SCPS_WT_LEN);
      if (!rc) rc = read_string_field(rd, limit, &p->stack);
      break;
    case 2: /* repeated uint32: packed, or one value per occurrence */
      if (wt == SCPS_WT_VARINT) {
        rc = read_varint(rd, &v);
        if (!rc) rc = append_offset(rd, p, v, &cap);
      } else {
        size_t n = 0;
        rc = expect(rd, field, wt, SCPS_WT_LEN);
        if (!rc) rc = read_len(rd, limit, &n);
        for (size_t end = rd->m.pos + n; !rc && rd->m.pos < end;) {
          rc = read_varint(rd, &v);
          if (!rc && rd->m.pos > end) rc = fail(rd, "packed sc_offsets overrun their field");
          if (!rc) rc = append_offset(rd, p, v, &cap);
        }
      }
      break;
    case 3:
    case 4:
    case 5:
    case 6:
    case 7:
      rc = expect(rd, field, wt, SCPS_WT_LEN);
      if (!rc)
        rc = read_bytes_field(rd, limit,
                              field == 3   ? &p->rows
                              : field == 4 ? &p->samples
                              : field == 5 ? &p->gains
                              : field == 6 ? &p->gain_exceptions
                                           : &p->samples_u16);
      break;
    default: rc = skip_field(rd, wt, limit); break;
    }
    if (rc) return rc;
  }
  return ended(rd, limit);
}

static void partitions_init(scps_req_partitions *p) {
  memset(p, 0, sizeof *p);
  p->rows.data = p->samples.data = p->gains.data = p->gain_exceptions.data = p->samples_u16.data = empty_bytes;
}

static void partitions_free(scps_req_partitions *p) {
  free(p->stack);
  free(p->sc_offsets);
  bytes_free(&p->rows);
  bytes_free(&p->samples);
  bytes_free(&p->gains);
  bytes_free(&p->gain_exceptions);
  bytes_free(&p->samples_u16);
}

int scps__request_expand_samples(scps_req_partitions *p, size_t entries, char *msg, size_t len) {
  const scps_req_bytes *x = &p->samples_u16;
  if (!x->len) return 0;
  if (p->samples.len) {
    snprintf(msg, len, "samples (%zu bytes) and samples_u16 (%zu bytes) are both set; send one", p->samples.len,
             x->len);
    return SCPS_EINVAL;
  }
  if (x->len != 2 * entries) {
    snprintf(msg, len, "samples_u16 holds %zu bytes; %zu entries need 2 each (%zu)", x->len, entries, 2 * entries);
    return SCPS_EINVAL;
  }
  /* 4 bytes per 2 of the request: bounded by twice its size (and entries
   * > 0, as x->len is). */
  uint32_t *samples = malloc(entries * sizeof *samples);
  if (!samples) {
    snprintf(msg, len, "out of memory widening %zu samples", entries);
    return SCPS_ENOMEM;
  }
  for (size_t i = 0; i < entries; i++) samples[i] = (uint32_t)x->data[2 * i] | (uint32_t)x->data[2 * i + 1] << 8;
  bytes_free(&p->samples);
  p->samples.data = (uint8_t *)samples;
  p->samples.len = entries * sizeof *samples;
  bytes_free(&p->samples_u16);
  return 0;
}

int scps__request_expand_gains(scps_req_partitions *p, size_t entries, char *msg, size_t len) {
  const scps_req_bytes *x = &p->gain_exceptions;
  if (!x->len) return 0;
  if (p->gains.len) {
    snprintf(msg, len, "gains (%zu bytes) and gain_exceptions (%zu bytes) are both set; send one", p->gains.len,
             x->len);
    return SCPS_EINVAL;
  }
  if (x->len % 8) {
    snprintf(msg, len, "gain_exceptions holds %zu bytes, not a multiple of 8 (uint32 entry, float32 gain)", x->len);
    return SCPS_EINVAL;
  }
  const size_t pairs = x->len / 8;
  for (size_t i = 0; i < pairs; i++) {
    uint32_t entry, prev = 0;
    float g;
    memcpy(&entry, x->data + 8 * i, 4);
    memcpy(&g, x->data + 8 * i + 4, 4);
    if (i) memcpy(&prev, x->data + 8 * (i - 1), 4);
    if (entry >= entries) {
      snprintf(msg, len, "gain_exceptions pair %zu: entry %u is not below the entry count %zu", i, entry, entries);
      return SCPS_EINVAL;
    }
    if (i && entry <= prev) {
      snprintf(msg, len, "gain_exceptions pair %zu: entry %u does not follow the previous pair's %u (entries must "
               "ascend)", i, entry, prev);
      return SCPS_EINVAL;
    }
    if (!isfinite(g)) {
      snprintf(msg, len, "gain_exceptions pair %zu: entry %u has gain %g, not finite", i, entry, (double)g);
      return SCPS_EINVAL;
    }
  }
  /* entries <= rows bytes / 4, so this is bounded by the request's size. */
  float *gains = malloc(entries * sizeof *gains);
  if (!gains) {
    snprintf(msg, len, "out of memory expanding %zu gains", entries);
    return SCPS_ENOMEM;
  }
  for (size_t i = 0; i < entries; i++) gains[i] = 1.0f;
  for (size_t i = 0; i < pairs; i++) {
    uint32_t entry;
    memcpy(&entry, x->data + 8 * i, 4);
    memcpy(&gains[entry], x->data + 8 * i + 4, 4);
  }
  bytes_free(&p->gains);
  p->gains.data = (uint8_t *)gains;
  p->gains.len = entries * sizeof *gains;
  return 0;
}

/* Room for element n of *arr (capacity *cap elements of size bytes),
 * doubling the array when full. */
static int grow(reader *rd, void **arr, size_t n, size_t *cap, size_t size) {
  if (n < *cap) return 0;
  size_t c = *cap ? 2 * *cap : 8;
  void *bigger = realloc(*arr, c * size);
  if (!bigger) return nomem(rd, c * size);
  *arr = bigger;
  *cap = c;
  return 0;
}

static int add_stack(reader *rd, scps_request *r, scps_req_stack **out) {
  /* Each entry costs the server far more than its 2 bytes on the wire. */
  if (r->n_stacks == rd->max_stacks)
    return fail(rd, "stacks: more than %zu entries, the server's stack count (each stack may be listed once)",
                rd->max_stacks);
  void *arr = r->stacks;
  int rc = grow(rd, &arr, r->n_stacks, &r->cap_stacks, sizeof *r->stacks);
  r->stacks = arr;
  if (rc) return rc;
  scps_req_stack *st = &r->stacks[r->n_stacks++];
  memset(st, 0, sizeof *st);
  partitions_init(&st->partitions);
  *out = st;
  return 0;
}

/* StackGradients ending at `limit`. */
static int read_stack_gradients(reader *rd, size_t limit, scps_req_stack *st) {
  while (rd->m.pos < limit) {
    size_t n = 0;
    uint32_t field = 0;
    int wt = 0;
    int rc = read_key(rd, &field, &wt);
    if (rc) return rc;
    if (field == 1) {
      rc = expect(rd, field, wt, SCPS_WT_LEN);
      if (!rc) rc = read_len(rd, limit, &n);
      if (!rc) rc = read_partitions(rd, rd->m.pos + n, &st->partitions);
      st->has_partitions = true;
    } else if (field == 2 || field == 3) {
      rc = expect(rd, field, wt, SCPS_WT_LEN);
      if (!rc) rc = read_len(rd, limit, &n);
      if (!rc) *(field == 2 ? &st->gradients : &st->row_gradients) = (scps_req_span){rd->m.pos, n};
      if (!rc) rc = read_bytes(rd, NULL, n);
    } else if (field == 4) {
      rc = expect(rd, field, wt, SCPS_WT_VARINT);
      if (!rc) rc = read_varint(rd, &st->placed_gradients);
    } else {
      rc = skip_field(rd, wt, limit);
    }
    if (rc) return rc;
  }
  return ended(rd, limit);
}

/* One more flag of LookupRequest.distinct_rows. */
static int add_flag(reader *rd, scps_request *r, uint64_t v) {
  void *arr = r->distinct_rows;
  int rc = grow(rd, &arr, r->n_distinct_rows, &r->cap_distinct_rows, sizeof *r->distinct_rows);
  r->distinct_rows = arr;
  if (rc) return rc;
  r->distinct_rows[r->n_distinct_rows++] = v != 0;
  return 0;
}

/* A repeated bool arrives packed (one length-delimited run of varints) or
 * one varint per element; parsers must take both. Each flag costs at least
 * a byte of the request, which bounds the memory. */
static int read_flags(reader *rd, int wt, size_t limit, scps_request *r) {
  uint64_t v = 0;
  size_t n = 0;
  if (wt == SCPS_WT_VARINT) {
    int rc = read_varint(rd, &v);
    return rc ? rc : add_flag(rd, r, v);
  }
  int rc = expect(rd, 5, wt, SCPS_WT_LEN);
  if (!rc) rc = read_len(rd, limit, &n);
  size_t end = rd->m.pos + n;
  while (!rc && rd->m.pos < end) {
    rc = read_varint(rd, &v);
    if (!rc && rd->m.pos > end) rc = fail(rd, "distinct_rows: a varint runs past its packed field");
    if (!rc) rc = add_flag(rd, r, v);
  }
  return rc;
}

/* A SegmentRange (LookupRequest.placement or request_placement,
 * ApplyGradientsRequest.gradients_placement) ending at limit, merged as
 * protobuf merges a message field that occurs twice. */
static int read_placement(reader *rd, size_t limit, scps_req_range *r) {
  r->has = true;
  while (rd->m.pos < limit) {
    uint64_t v = 0;
    size_t n = 0;
    uint32_t field = 0;
    int wt = 0;
    int rc = read_key(rd, &field, &wt);
    if (!rc && field == 1) {
      rc = expect(rd, field, wt, SCPS_WT_LEN);
      if (!rc) rc = read_len(rd, limit, &n);
      r->segment_len = n;
      if (!rc) rc = read_bytes(rd, n == sizeof r->segment ? r->segment : NULL, n);
    } else if (!rc && (field == 2 || field == 3)) {
      rc = expect(rd, field, wt, SCPS_WT_VARINT);
      if (!rc) rc = read_varint(rd, &v);
      *(field == 2 ? &r->offset : &r->length) = v;
    } else if (!rc) {
      rc = skip_field(rd, wt, limit);
    }
    if (rc) return rc;
  }
  return ended(rd, limit);
}

/* An ExmyFormat (LookupRequest.activation_exmy,
 * ApplyGradientsRequest.gradient_exmy) ending at limit, merged as protobuf
 * merges a message field that occurs twice. Values are kept as they came,
 * for the server to check and name. */
static int read_exmy(reader *rd, size_t limit, scps_req_exmy *x) {
  x->has = true;
  while (rd->m.pos < limit) {
    uint64_t v = 0;
    uint32_t field = 0;
    int wt = 0;
    int rc = read_key(rd, &field, &wt);
    if (!rc && field >= 1 && field <= 4) {
      rc = expect(rd, field, wt, SCPS_WT_VARINT);
      if (!rc) rc = read_varint(rd, &v);
      if (field == 1) x->exponent_bits = v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
      else if (field == 2) x->mantissa_bits = v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
      else if (field == 3) x->bias = (int64_t)(int32_t)(uint32_t)v, x->has_bias = true;
      else x->row_scale = v != 0;
    } else if (!rc) {
      rc = skip_field(rd, wt, limit);
    }
    if (rc) return rc;
  }
  return ended(rd, limit);
}

/* Field numbers the two requests share: 1 config_fingerprint,
 * 2 process_index. Lookup: 3 stacks, 4 activation_format, 5 distinct_rows,
 * 6 placement, 7 request_placement, 8 activation_exmy.
 * ApplyGradients: 3 step, 4 learning_rate, 5 stacks, 6 gradient_format,
 * 7 state_id, 8 gradients_placement, 9 gradient_exmy. */
/* ApplyGradientsRequest.state_id: fixed64, little-endian. */
static int read_state_id(reader *rd, int wt, size_t limit, scps_request *r) {
  uint8_t b[8];
  int rc = expect(rd, 7, wt, SCPS_WT_I64);
  if (!rc) rc = limit - rd->m.pos < 8 ? fail(rd, "truncated") : read_bytes(rd, b, 8);
  if (!rc) memcpy(&r->state_id, b, 8);
  return rc;
}

static int read_request(reader *rd, scps_request_kind kind, scps_request *r) {
  const size_t limit = rd->m.total;
  while (rd->m.pos < limit) {
    uint64_t v = 0;
    size_t n = 0;
    uint32_t field = 0;
    int wt = 0;
    int rc = read_key(rd, &field, &wt);
    if (rc) return rc;
    bool lookup = kind == SCPS_REQUEST_LOOKUP;
    if (!lookup || field != 7) r->other_fields = true;
    uint32_t stacks = lookup ? 3 : 5, format = lookup ? 4 : 6;
    scps_req_stack *st = NULL;
    if (field == 1) {
      rc = expect(rd, field, wt, SCPS_WT_LEN);
      if (!rc) rc = read_bytes_field(rd, limit, &r->config_fingerprint);
    } else if (field == 2 || field == format || (!lookup && field == 3)) {
      rc = expect(rd, field, wt, SCPS_WT_VARINT);
      if (!rc) rc = read_varint(rd, &v);
      if (field == 2) r->process_index = (int32_t)(int64_t)v;
      else if (field == format) r->format = (int32_t)(int64_t)v;
      else r->step = (int64_t)v;
    } else if (!lookup && field == 4) {
      uint8_t b[8];
      rc = expect(rd, field, wt, SCPS_WT_I64);
      if (!rc) rc = limit - rd->m.pos < 8 ? fail(rd, "truncated") : read_bytes(rd, b, 8);
      if (!rc) {
        memcpy(&r->learning_rate, b, 8); /* little-endian host, as libscps's encoder */
        r->has_learning_rate = true;
      }
    } else if (!lookup && field == 7) {
      rc = read_state_id(rd, wt, limit, r);
    } else if (lookup && field == 5) {
      rc = read_flags(rd, wt, limit, r);
    } else if ((lookup && (field == 6 || field == 7)) || (!lookup && field == 8)) {
      rc = expect(rd, field, wt, SCPS_WT_LEN);
      if (!rc) rc = read_len(rd, limit, &n);
      if (!rc) rc = read_placement(rd, rd->m.pos + n, lookup && field == 7 ? &r->request_placement : &r->placement);
    } else if (field == (lookup ? 8u : 9u)) {
      rc = expect(rd, field, wt, SCPS_WT_LEN);
      if (!rc) rc = read_len(rd, limit, &n);
      if (!rc) rc = read_exmy(rd, rd->m.pos + n, &r->exmy);
    } else if (field == stacks) {
      rc = expect(rd, field, wt, SCPS_WT_LEN);
      if (!rc) rc = read_len(rd, limit, &n);
      if (!rc) rc = add_stack(rd, r, &st);
      if (!rc && lookup) {
        st->has_partitions = true;
        rc = read_partitions(rd, rd->m.pos + n, &st->partitions);
      } else if (!rc) {
        rc = read_stack_gradients(rd, rd->m.pos + n, st);
      }
    } else {
      rc = skip_field(rd, wt, limit);
    }
    if (rc) return rc;
  }
  return 0;
}

int scps__request_decode(grpc_byte_buffer *bb, scps_request_kind kind, size_t max_stacks, size_t max_sc_offsets,
                        scps_request *r, char *msg, size_t len) {
  memset(r, 0, sizeof *r);
  r->config_fingerprint.data = empty_bytes;
  reader rd = {.msg = msg, .msg_len = len,
               .what = kind == SCPS_REQUEST_LOOKUP ? "scps.v1.LookupRequest" : "scps.v1.ApplyGradientsRequest",
               .max_stacks = max_stacks, .max_sc_offsets = max_sc_offsets};
  int rc = scps__slices_init(&rd.m, bb);
  r->bytes = rd.m.total;
  if (rc == SCPS_ENOMEM) rc = nomem(&rd, rd.m.cap * sizeof(grpc_slice));
  else if (rc) rc = fail(&rd, "unreadable (compressed?) payload");
  if (!rc) rc = read_request(&rd, kind, r);
  if (kind == SCPS_REQUEST_APPLY) r->msg = rd.m;
  else scps__slices_free(&rd.m);
  return rc;
}

void scps__request_free(scps_request *r) {
  for (size_t i = 0; i < r->n_stacks; i++) partitions_free(&r->stacks[i].partitions);
  free(r->stacks);
  free(r->distinct_rows);
  bytes_free(&r->config_fingerprint);
  scps__slices_free(&r->msg);
  memset(r, 0, sizeof *r);
}

/* Encoding. Field numbers as in the decoder's comments above and
 * scps.proto. */

static size_t offsets_body_size(const scps_coo *const *coo, int n_sc) {
  size_t n = 1, total = 0; /* the leading 0 */
  for (int k = 0; k < n_sc; k++) {
    total += coo[k]->n;
    n += scps__pbw_varint_size(total);
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
  return 8 * exceptions < 4 * n ? scps__pbw_len_size(8 * exceptions) : scps__pbw_len_size(4 * n);
}

size_t scps__request_partitions_size(const char *stack, const scps_coo *const *coo, int n_sc,
                                    size_t gain_exceptions, bool samples_u16) {
  size_t n = entry_count(coo, n_sc);
  return scps__pbw_len_size(strlen(stack)) + scps__pbw_len_size(offsets_body_size(coo, n_sc)) +
         scps__pbw_len_size(4 * n) + scps__pbw_len_size((samples_u16 ? 2 : 4) * n) + gains_size(n, gain_exceptions);
}

/* Field 7: the samples as little-endian uint16. */
static uint8_t *put_samples_u16(uint8_t *p, const scps_coo *const *coo, int n_sc, size_t n) {
  p = scps__pbw_put_len(p, 7, 2 * n);
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
  p = scps__pbw_put_len(p, field, 4 * n);
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
  p = scps__pbw_put_len(p, 6, 8 * count);
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

uint8_t *scps__request_put_partitions(uint8_t *p, const char *stack, const scps_coo *const *coo, int n_sc,
                                     size_t gain_exceptions, bool samples_u16) {
  size_t n = entry_count(coo, n_sc);
  p = scps__pbw_put_bytes(p, 1, stack, strlen(stack));
  p = scps__pbw_put_len(p, 2, offsets_body_size(coo, n_sc));
  size_t total = 0;
  p = scps__pbw_put_varint(p, 0);
  for (int k = 0; k < n_sc; k++) {
    total += coo[k]->n;
    p = scps__pbw_put_varint(p, total);
  }
  p = put_entries(p, 3, coo, n_sc, n, 0);
  p = samples_u16 ? put_samples_u16(p, coo, n_sc, n) : put_entries(p, 4, coo, n_sc, n, 1);
  if (!gain_exceptions) return p;
  if (8 * gain_exceptions < 4 * n) return put_gain_exceptions(p, coo, n_sc, gain_exceptions);
  return put_entries(p, 5, coo, n_sc, n, 2);
}

static size_t row_offsets_body_size(const uint32_t *row_start, int n_sc) {
  size_t n = 0;
  for (int k = 0; k <= n_sc; k++) n += scps__pbw_varint_size(row_start[k]);
  return n;
}

size_t scps__request_row_partitions_size(const char *stack, const uint32_t *row_start, int n_sc) {
  return scps__pbw_len_size(strlen(stack)) + scps__pbw_len_size(row_offsets_body_size(row_start, n_sc)) +
         scps__pbw_len_size(4 * (size_t)row_start[n_sc]);
}

uint8_t *scps__request_put_row_partitions(uint8_t *p, const char *stack, const uint32_t *row_start, int n_sc,
                                         const uint32_t *rows) {
  p = scps__pbw_put_bytes(p, 1, stack, strlen(stack));
  p = scps__pbw_put_len(p, 2, row_offsets_body_size(row_start, n_sc));
  for (int k = 0; k <= n_sc; k++) p = scps__pbw_put_varint(p, row_start[k]);
  return scps__pbw_put_bytes(p, 3, rows, 4 * (size_t)row_start[n_sc]);
}

/* int32 and int64 fields are varints of the sign-extended 64-bit value. */
static uint64_t int_varint(int64_t v) { return (uint64_t)v; }

size_t scps__request_view_size(int32_t process_index) {
  return scps__pbw_len_size(SCPS_FINGERPRINT_BYTES) + 1 + scps__pbw_varint_size(int_varint(process_index));
}

uint8_t *scps__request_put_view(uint8_t *p, const uint8_t *fingerprint, int32_t process_index) {
  p = scps__pbw_put_bytes(p, 1, fingerprint, SCPS_FINGERPRINT_BYTES);
  p = scps__pbw_put_key(p, 2, SCPS_WT_VARINT);
  return scps__pbw_put_varint(p, int_varint(process_index));
}

/* ExmyFormat's varint fields, 1 to 4, by number (0: absent). */
static void exmy_fields(const scps_req_exmy *x, uint64_t v[5], bool has[5]) {
  v[1] = x->exponent_bits, has[1] = x->exponent_bits != 0;
  v[2] = x->mantissa_bits, has[2] = x->mantissa_bits != 0;
  v[3] = (uint64_t)x->bias, has[3] = x->has_bias;
  v[4] = 1, has[4] = x->row_scale;
}

static size_t exmy_body_size(const scps_req_exmy *x) {
  uint64_t v[5];
  bool has[5];
  exmy_fields(x, v, has);
  size_t n = 0;
  for (int f = 1; f <= 4; f++)
    if (has[f]) n += 1 + scps__pbw_varint_size(v[f]);
  return n;
}

size_t scps__request_format_size(int format, const scps_req_exmy *x) {
  size_t n = format ? 1 + scps__pbw_varint_size((uint64_t)format) : 0;
  return x && x->has ? n + scps__pbw_len_size(exmy_body_size(x)) : n;
}

/* The format field and, with x->has, the ExmyFormat field after it. */
static uint8_t *put_format(uint8_t *p, int field, int exmy_field, int format, const scps_req_exmy *x) {
  if (format) p = scps__pbw_put_varint(scps__pbw_put_key(p, field, SCPS_WT_VARINT), (uint64_t)format);
  if (!x || !x->has) return p;
  uint64_t v[5];
  bool has[5];
  exmy_fields(x, v, has);
  p = scps__pbw_put_len(p, exmy_field, exmy_body_size(x));
  for (int f = 1; f <= 4; f++)
    if (has[f]) p = scps__pbw_put_varint(scps__pbw_put_key(p, f, SCPS_WT_VARINT), v[f]);
  return p;
}

uint8_t *scps__request_put_lookup_format(uint8_t *p, int format, const scps_req_exmy *x) {
  return put_format(p, 4, 8, format, x);
}

uint8_t *scps__request_put_apply_format(uint8_t *p, int format, const scps_req_exmy *x) {
  return put_format(p, 6, 9, format, x);
}

size_t scps__request_lookup_stack_prefix_size(size_t len) { return 1 + scps__pbw_varint_size(len); }

uint8_t *scps__request_put_lookup_stack_prefix(uint8_t *p, size_t len) { return scps__pbw_put_len(p, 3, len); }

uint8_t *scps__request_put_step(uint8_t *p, int64_t step, double learning_rate) {
  p = scps__pbw_put_key(p, 3, SCPS_WT_VARINT);
  p = scps__pbw_put_varint(p, int_varint(step));
  if (learning_rate >= 0) {
    p = scps__pbw_put_key(p, 4, SCPS_WT_I64);
    memcpy(p, &learning_rate, 8);
    p += 8;
  }
  return p;
}

uint8_t *scps__request_put_state_id(uint8_t *p, uint64_t state_id) {
  if (!state_id) return p;
  p = scps__pbw_put_key(p, 7, SCPS_WT_I64);
  memcpy(p, &state_id, 8); /* little-endian host, as the learning rate */
  return p + 8;
}

uint8_t *scps__request_put_apply_stack_prefix(uint8_t *p, size_t parts_len, size_t grads_len) {
  p = scps__pbw_put_len(p, 5, scps__pbw_len_size(parts_len) + scps__pbw_len_size(grads_len));
  return scps__pbw_put_len(p, 1, parts_len);
}

uint8_t *scps__request_put_placed_stack_prefix(uint8_t *p, size_t parts_len, uint64_t placed) {
  p = scps__pbw_put_len(p, 5, scps__pbw_len_size(parts_len) + 1 + scps__pbw_varint_size(placed));
  return scps__pbw_put_len(p, 1, parts_len);
}

uint8_t *scps__request_put_gradients_prefix(uint8_t *p, size_t grads_len) { return scps__pbw_put_len(p, 2, grads_len); }

uint8_t *scps__request_put_row_gradients_prefix(uint8_t *p, size_t len) { return scps__pbw_put_len(p, 3, len); }

size_t scps__request_distinct_rows_size(int n_sent) {
  return n_sent > 0 ? scps__pbw_len_size((size_t)n_sent) : 0;
}

uint8_t *scps__request_put_distinct_rows(uint8_t *p, const bool *distinct, const int *slot, int n_stacks,
                                        int n_sent) {
  if (n_sent <= 0) return p;
  p = scps__pbw_put_len(p, 5, (size_t)n_sent);
  for (int st = 0; st < n_stacks; st++)
    if (slot[st] >= 0) *p++ = distinct[st] ? 1 : 0;
  return p;
}

uint8_t *scps__request_put_placement(uint8_t *p, int field, const uint8_t *segment, uint64_t offset,
                                    uint64_t length) {
  size_t body = scps__pbw_len_size(SCPS_REQUEST_SEGMENT_BYTES) + 1 + scps__pbw_varint_size(offset) + 1 +
                scps__pbw_varint_size(length);
  p = scps__pbw_put_len(p, field, body);
  p = scps__pbw_put_bytes(p, 1, segment, SCPS_REQUEST_SEGMENT_BYTES);
  p = scps__pbw_put_key(p, 2, SCPS_WT_VARINT);
  p = scps__pbw_put_varint(p, offset);
  p = scps__pbw_put_key(p, 3, SCPS_WT_VARINT);
  return scps__pbw_put_varint(p, length);
}

uint8_t *scps__request_put_placed_gradients(uint8_t *p, uint64_t bytes) {
  p = scps__pbw_put_key(p, 4, SCPS_WT_VARINT);
  return scps__pbw_put_varint(p, bytes);
}
