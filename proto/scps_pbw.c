#include "scps_pbw.h"

#include <string.h>

size_t scps__pbw_varint_size(uint64_t v) {
  size_t n = 1;
  for (; v >= 0x80; v >>= 7) n++;
  return n;
}

uint8_t *scps__pbw_put_varint(uint8_t *p, uint64_t v) {
  for (; v >= 0x80; v >>= 7) *p++ = (uint8_t)(v | 0x80);
  *p++ = (uint8_t)v;
  return p;
}

uint8_t *scps__pbw_put_key(uint8_t *p, int field, int wire_type) {
  *p++ = (uint8_t)(field << 3 | wire_type);
  return p;
}

size_t scps__pbw_len_size(size_t len) { return 1 + scps__pbw_varint_size(len) + len; }

uint8_t *scps__pbw_put_len(uint8_t *p, int field, size_t len) {
  return scps__pbw_put_varint(scps__pbw_put_key(p, field, SCPS_WT_LEN), len);
}

uint8_t *scps__pbw_put_bytes(uint8_t *p, int field, const void *data, size_t len) {
  p = scps__pbw_put_len(p, field, len);
  if (len) memcpy(p, data, len);
  return p + len;
}
