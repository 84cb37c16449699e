/* scps_admin_json: any protobuf-c message as JSON, field by field under its
 * scps.proto names, for scps-admin's --json output. */
#ifndef SCPS_ADMIN_JSON_H
#define SCPS_ADMIN_JSON_H

#include <protobuf-c/protobuf-c.h>

#include "scps_jsonw.h"

/* Appends m's fields as `"name": value` members separated by ", " (no
 * braces, so a caller can add members of its own): every field that is
 * present (a oneof's only when set; proto3 scalars always), int64s as
 * numbers, enums by name, bytes as lowercase hex, non-finite floats as
 * null, messages as objects and repeated fields as arrays. */
void scps__admin_json_fields(scps_jsonw *w, const ProtobufCMessage *m);

/* Prints w's text on stdout, or on stderr why it could not be written,
 * and frees w: the exit status, 0 or 1. */
int scps__admin_json_print(scps_jsonw *w);

#endif
