#include "scps_client_rpc.h"

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scps_client_conn.h"
#include "scps_method.h"
#include "scps_status.h"

/* The answer's bytes, copied out of the byte buffer's slices. */
static int copy_answer(grpc_byte_buffer *bb, uint8_t **answer, size_t *answer_len, scps_error *err) {
  *answer = NULL;
  *answer_len = 0;
  if (!bb) return 0;
  grpc_byte_buffer_reader rd;
  if (!grpc_byte_buffer_reader_init(&rd, bb)) return scps_error_set(err, SCPS_EIO, "cannot read the answer");
  grpc_slice all = grpc_byte_buffer_reader_readall(&rd);
  grpc_byte_buffer_reader_destroy(&rd);
  size_t n = GRPC_SLICE_LENGTH(all);
  int rc = 0;
  if (n) {
    *answer = malloc(n);
    if (*answer) {
      memcpy(*answer, GRPC_SLICE_START_PTR(all), n);
      *answer_len = n;
    } else {
      rc = scps_error_set(err, SCPS_ENOMEM, "out of memory for a %zu-byte answer", n);
    }
  }
  grpc_slice_unref(all);
  return rc;
}

int scps__client_rpc_call(const char *address, const scps_client_security *security, const char *method,
                  const uint8_t *request, size_t request_len, int64_t deadline_ms, uint8_t **answer,
                  size_t *answer_len, scps_error *err) {
  *answer = NULL;
  *answer_len = 0;
  if (deadline_ms <= 0) return scps_error_set(err, SCPS_EINVAL, "deadline_ms %lld must be > 0", (long long)deadline_ms);
  const char *path =
      scps__method_path(method && method[0] == '/' ? scps__method_from_path(method) : scps__method_from_name(method));
  if (!path)
    return scps_error_set(err, SCPS_EINVAL, "method '%s' is not a method of %s or %s", method ? method : "(null)",
                          SCPS_METHOD_SERVICE_SCPS, SCPS_METHOD_SERVICE_GRPC_HEALTH);
  grpc_init();
  scps_client_conn *conn;
  int rc = scps__client_conn_create(security, &conn, err);
  if (rc) {
    grpc_shutdown();
    return rc;
  }
  /* Answers grow with the declaration (GetConfig) and the stacks (Stats):
   * past gRPC's default 4 MiB receive limit for large ones. */
  grpc_arg arg = {.type = GRPC_ARG_INTEGER, .key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, .value.integer = -1};
  grpc_channel_args args = {1, &arg};
  grpc_channel *ch = scps__client_conn_channel(conn, address, &args);
  if (!ch) {
    scps__client_conn_destroy(conn);
    grpc_shutdown();
    return scps_error_set(err, SCPS_EINVAL, "%s: cannot create a channel to it", address);
  }
  grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
  gpr_timespec deadline = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(deadline_ms, GPR_TIMESPAN));
  grpc_slice method_slice = grpc_slice_from_copied_string(path);
  grpc_call *call = grpc_channel_create_call(ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq, method_slice, NULL, deadline, NULL);
  grpc_slice_unref(method_slice);

  grpc_slice req = request_len ? grpc_slice_from_copied_buffer((const char *)request, request_len) : grpc_empty_slice();
  grpc_byte_buffer *sent = grpc_raw_byte_buffer_create(&req, 1);
  grpc_slice_unref(req);
  grpc_byte_buffer *got = NULL;
  grpc_metadata_array md_initial, md_trailing;
  grpc_metadata_array_init(&md_initial);
  grpc_metadata_array_init(&md_trailing);
  grpc_status_code status = GRPC_STATUS_UNKNOWN;
  grpc_slice details = grpc_empty_slice();
  grpc_op ops[6];
  memset(ops, 0, sizeof ops);
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  /* A server still starting is waited for, within the deadline. */
  ops[0].flags = GRPC_INITIAL_METADATA_WAIT_FOR_READY | GRPC_INITIAL_METADATA_WAIT_FOR_READY_EXPLICITLY_SET;
  grpc_metadata auth_md;
  scps__client_conn_metadata(conn, &ops[0], &auth_md);
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = sent;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[3].data.recv_initial_metadata.recv_initial_metadata = &md_initial;
  ops[4].op = GRPC_OP_RECV_MESSAGE;
  ops[4].data.recv_message.recv_message = &got;
  ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[5].data.recv_status_on_client.trailing_metadata = &md_trailing;
  ops[5].data.recv_status_on_client.status = &status;
  ops[5].data.recv_status_on_client.status_details = &details;
  if (grpc_call_start_batch(call, ops, 6, call, NULL) != GRPC_CALL_OK) {
    rc = scps_error_set(err, SCPS_EINTERNAL, "%s: %s: the call could not be started", address, method);
  } else {
    grpc_event ev = grpc_completion_queue_pluck(cq, call, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
    if (ev.type != GRPC_OP_COMPLETE || !ev.success) {
      rc = scps_error_set(err, SCPS_EIO, "%s: %s: the call did not complete", address, method);
    } else if (status != GRPC_STATUS_OK) {
      char *text = grpc_slice_to_c_string(details);
      char why[320] = "";
      if (status == GRPC_STATUS_DEADLINE_EXCEEDED && grpc_channel_check_connectivity_state(ch, 0) != GRPC_CHANNEL_READY)
        snprintf(why, sizeof why, " (no connection within the deadline: %s; an scps-server listens once its tables "
                 "are initialized)", scps__client_conn_why_unconnected(conn));
      rc = scps_error_set(err, scps__status_to_error(status), "%s: %s: %s: %s%s", address, method,
                          scps__status_name(status), text, why);
      gpr_free(text);
    } else {
      rc = copy_answer(got, answer, answer_len, err);
    }
  }
  grpc_slice_unref(details);
  grpc_metadata_array_destroy(&md_initial);
  grpc_metadata_array_destroy(&md_trailing);
  if (got) grpc_byte_buffer_destroy(got);
  grpc_byte_buffer_destroy(sent);
  grpc_call_unref(call);
  grpc_completion_queue_shutdown(cq);
  while (grpc_completion_queue_pluck(cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type != GRPC_QUEUE_SHUTDOWN) {
  }
  grpc_completion_queue_destroy(cq);
  grpc_channel_destroy(ch);
  scps__client_conn_destroy(conn);
  grpc_shutdown();
  return rc;
}
