#include "scps_admin_json.h"

#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>

/* Bytes one value of type t takes in a message struct. */
static size_t value_size(ProtobufCType t) {
  switch (t) {
  case PROTOBUF_C_TYPE_INT64:
  case PROTOBUF_C_TYPE_SINT64:
  case PROTOBUF_C_TYPE_SFIXED64:
  case PROTOBUF_C_TYPE_UINT64:
  case PROTOBUF_C_TYPE_FIXED64: return sizeof(int64_t);
  case PROTOBUF_C_TYPE_DOUBLE: return sizeof(double);
  case PROTOBUF_C_TYPE_FLOAT: return sizeof(float);
  case PROTOBUF_C_TYPE_BOOL: return sizeof(protobuf_c_boolean);
  case PROTOBUF_C_TYPE_STRING: return sizeof(char *);
  case PROTOBUF_C_TYPE_BYTES: return sizeof(ProtobufCBinaryData);
  case PROTOBUF_C_TYPE_MESSAGE: return sizeof(ProtobufCMessage *);
  default: return sizeof(int32_t); /* the 32-bit integers and enums */
  }
}

static void write_double(scps_jsonw *w, double d) {
  if (isfinite(d))
    scps__jsonw_double(w, d);
  else
    scps__jsonw_printf(w, "null");
}

/* One value of field f, stored at p. */
static void write_value(scps_jsonw *w, const ProtobufCFieldDescriptor *f, const void *p) {
  switch (f->type) {
  case PROTOBUF_C_TYPE_INT32:
  case PROTOBUF_C_TYPE_SINT32:
  case PROTOBUF_C_TYPE_SFIXED32: scps__jsonw_printf(w, "%d", (int)*(const int32_t *)p); break;
  case PROTOBUF_C_TYPE_UINT32:
  case PROTOBUF_C_TYPE_FIXED32: scps__jsonw_printf(w, "%u", (unsigned)*(const uint32_t *)p); break;
  case PROTOBUF_C_TYPE_INT64:
  case PROTOBUF_C_TYPE_SINT64:
  case PROTOBUF_C_TYPE_SFIXED64: scps__jsonw_printf(w, "%lld", (long long)*(const int64_t *)p); break;
  case PROTOBUF_C_TYPE_UINT64:
  case PROTOBUF_C_TYPE_FIXED64: scps__jsonw_printf(w, "%llu", (unsigned long long)*(const uint64_t *)p); break;
  case PROTOBUF_C_TYPE_FLOAT: write_double(w, *(const float *)p); break;
  case PROTOBUF_C_TYPE_DOUBLE: write_double(w, *(const double *)p); break;
  case PROTOBUF_C_TYPE_BOOL: scps__jsonw_printf(w, "%s", *(const protobuf_c_boolean *)p ? "true" : "false"); break;
  case PROTOBUF_C_TYPE_ENUM: {
    const int v = *(const int *)p;
    const ProtobufCEnumValue *e = protobuf_c_enum_descriptor_get_value(f->descriptor, v);
    if (e)
      scps__jsonw_string(w, e->name);
    else
      scps__jsonw_printf(w, "%d", v);
    break;
  }
  case PROTOBUF_C_TYPE_STRING: {
    const char *s = *(char *const *)p;
    scps__jsonw_string(w, s ? s : "");
    break;
  }
  case PROTOBUF_C_TYPE_BYTES: {
    const ProtobufCBinaryData *b = p;
    scps__jsonw_printf(w, "\"");
    for (size_t i = 0; i < b->len; i++) scps__jsonw_printf(w, "%02x", b->data[i]);
    scps__jsonw_printf(w, "\"");
    break;
  }
  case PROTOBUF_C_TYPE_MESSAGE: {
    const ProtobufCMessage *m = *(ProtobufCMessage *const *)p;
    if (!m) {
      scps__jsonw_printf(w, "null");
      break;
    }
    scps__jsonw_printf(w, "{");
    scps__admin_json_fields(w, m);
    scps__jsonw_printf(w, "}");
    break;
  }
  }
}

/* Whether a field that is not repeated has a value to show. */
static int present(const ProtobufCMessage *m, const ProtobufCFieldDescriptor *f) {
  const char *base = (const char *)m;
  if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) return *(const uint32_t *)(base + f->quantifier_offset) == f->id;
  if (f->label != PROTOBUF_C_LABEL_OPTIONAL) return 1;
  if (f->type == PROTOBUF_C_TYPE_MESSAGE || f->type == PROTOBUF_C_TYPE_STRING)
    return *(void *const *)(base + f->offset) != NULL;
  return *(const protobuf_c_boolean *)(base + f->quantifier_offset);
}

void scps__admin_json_fields(scps_jsonw *w, const ProtobufCMessage *m) {
  const ProtobufCMessageDescriptor *d = m->descriptor;
  const char *base = (const char *)m;
  int written = 0;
  for (unsigned i = 0; i < d->n_fields; i++) {
    const ProtobufCFieldDescriptor *f = &d->fields[i];
    if (f->label != PROTOBUF_C_LABEL_REPEATED && !present(m, f)) continue;
    scps__jsonw_printf(w, "%s", written++ ? ", " : "");
    scps__jsonw_string(w, f->name);
    scps__jsonw_printf(w, ": ");
    if (f->label != PROTOBUF_C_LABEL_REPEATED) {
      write_value(w, f, base + f->offset);
      continue;
    }
    const size_t n = *(const size_t *)(base + f->quantifier_offset), size = value_size(f->type);
    const char *values = *(char *const *)(base + f->offset);
    scps__jsonw_printf(w, "[");
    for (size_t k = 0; k < n; k++) {
      scps__jsonw_printf(w, "%s", k ? ", " : "");
      write_value(w, f, values + k * size);
    }
    scps__jsonw_printf(w, "]");
  }
}

int scps__admin_json_print(scps_jsonw *w) {
  scps_error err;
  int rc = scps__jsonw_finish(w, "the JSON answer", &err);
  if (rc) fprintf(stderr, "scps-admin: %s\n", err.msg);
  else fputs(w->buf, stdout);
  scps__jsonw_free(w);
  return rc ? 1 : 0;
}
