/* scps_server_options: what one scps-server process is started with (the
 * options of scps__server_create), and the server's opaque type. */
#ifndef SCPS_SERVER_OPTIONS_H
#define SCPS_SERVER_OPTIONS_H

#include <stdbool.h>
#include <stdint.h>

#include "scps_prep.h"
#include "scps_spec.h"

typedef struct scps_server_options {
  const char *listen;         /* "host:port"; port 0 picks a free one */
  int32_t process_index;
  scps_topology topology;
  const scps_table_spec *tables;
  int n_tables;
  const scps_feature_spec *features;
  int n_features;
  int32_t cq_threads;         /* completion queues, one thread each */
  int32_t tc_threads;         /* TensorCore workers */
  int64_t max_message_bytes;  /* largest request accepted */
  /* Lookups with at most this many COO entries run whole on the
   * completion-queue thread that received them, under read locks of the
   * SparseCores, instead of as a gang job of every SparseCore worker; 0:
   * never. */
  int64_t inline_lookup_entries;
  /* Pin SparseCore worker k of process p to CPU (p * S + k) mod n of the n
   * CPUs the process may use (scps__cpus_assign); ignored when n < 2. */
  bool pin_sparsecores;
  /* Checkpoints. checkpoint_dir: the root every checkpoint is saved below:
   * Checkpoint requests name a directory relative to it (empty: the root
   * itself), and the timer's saves go to it (NULL: none, and Checkpoint
   * requests are refused). restore_dir: a step
   * directory restored at create; NULL: the newest complete checkpoint under
   * checkpoint_dir, if any. checkpoint_keep: complete checkpoints kept per
   * root after each save (>= 1). */
  const char *checkpoint_dir;
  const char *restore_dir;
  int32_t checkpoint_keep;
  /* Who may connect (scps_auth.h; deploy/SECURITY.md), PEM files, NULL
   * when not used. tls_cert_file and tls_key_file: TLS on the listening
   * port; tls_client_ca_file: clients must present a certificate that
   * chains to it (mutual TLS); token_file: callers must send a bearer
   * token of it and get its role (without one, every caller is admin). */
  const char *tls_cert_file;
  const char *tls_key_file;
  const char *tls_client_ca_file;
  const char *token_file;
  /* Memory and connection limits (deploy/SECURITY.md). memory_budget:
   * bytes the calls in flight may hold (requests, answers, scratch, idle
   * scratch kept for reuse); 0: a quarter of the memory available once the
   * tables are initialized. A call without room waits up to memory_wait_ms
   * (or its deadline) for it, then gets RESOURCE_EXHAUSTED. max_streams:
   * concurrent calls per connection. idle_timeout_s: a connection without
   * calls for this long is closed. transfer_timeout_s: a connection's
   * handshake, a request's message and the taking of an answer must each
   * finish within this. */
  int64_t memory_budget;
  int32_t memory_wait_ms;
  int32_t max_streams;
  int32_t idle_timeout_s;
  int32_t transfer_timeout_s;
  /* Seconds after a save (its end) before a Checkpoint of another step, or
   * a timer save, is taken; sooner ones are refused RESOURCE_EXHAUSTED.
   * 0: no limit. */
  double checkpoint_min_interval;
  /* A save copies this process's rows and slots to memory first and lets
   * ApplyGradients run again while the copy is written, when the copy takes
   * at most this many bytes; -1: at most half the memory available
   * (/proc/meminfo MemAvailable) at that moment; 0: never, ApplyGradients
   * wait for the whole save. The copy's memory is kept between saves as
   * memory the system may reclaim (MADV_FREE). */
  int64_t checkpoint_snapshot_max;
  /* Partitions of a Lookup or ApplyGradients over the limits in force:
   * refused (SCPS_LIMIT_ERROR, INVALID_ARGUMENT naming stack, partition,
   * count and limit) or their entries beyond the limits dropped as
   * libscps's preprocessing drops them (SCPS_LIMIT_DROP). */
  scps_limit_policy limit_policy;
  /* > 0: every stack's limits in force from the start (ids, unique ids),
   * instead of the declaration's or a restored checkpoint's; 0: those. */
  int32_t partition_limits[2];
  /* An ApplyGradients or Checkpoint step may be at most this far above the
   * step the process holds, or at most this when it holds none
   * (scps__step_check); 0: SCPS_STEP_ADVANCE_DEFAULT. */
  int64_t max_step_advance;
  /* > 0 with a checkpoint_dir: a shutdown first goes on taking
   * ApplyGradients (but no other data calls) until none has arrived for
   * this many milliseconds (scps__server_push_quiet_ms, then
   * scps__server_close_pushes), so the pushes in flight reach every process
   * of a cluster stopped together before each saves the step it holds
   * (scps__server_save_held). 0: refused at once, like the other calls. */
  int32_t drain_quiet_ms;
  /* The timer's solo saves land on multiples of this many steps
   * (scps__server_checkpoint_tick); the processes of a cluster must agree.
   * 0: 100. */
  int64_t checkpoint_grid;
  /* Shared-memory answers for clients on this host (scps_shm.h): "auto"
   * (or NULL), a socket in a private directory of its own; "off"; or the
   * socket's path. */
  const char *shm_socket;
} scps_server_options;

typedef struct scps_server scps_server;

#endif
