/* scps_server: one scps-server process: the engine, the SparseCore/TensorCore
 * pipeline, the gRPC front (completion-queue threads, the six methods) and
 * checkpoints (restore at start, saves on a dedicated thread). */
#ifndef SCPS_SERVER_H
#define SCPS_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "scps_error.h"
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
   * CPUs the process may use (scps_cpus_assign); ignored when n < 2. */
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
   * (scps_step_check); 0: SCPS_STEP_ADVANCE_DEFAULT. */
  int64_t max_step_advance;
  /* > 0 with a checkpoint_dir: a shutdown first goes on taking
   * ApplyGradients (but no other data calls) until none has arrived for
   * this many milliseconds (scps_server_push_quiet_ms, then
   * scps_server_close_pushes), so the pushes in flight reach every process
   * of a cluster stopped together before each saves the step it holds
   * (scps_server_save_held). 0: refused at once, like the other calls. */
  int32_t drain_quiet_ms;
  /* The timer's solo saves land on multiples of this many steps
   * (scps_server_checkpoint_tick); the processes of a cluster must agree.
   * 0: 100. */
  int64_t checkpoint_grid;
} scps_server_options;

typedef struct scps_server scps_server;

/* Builds the layout and engine (placing and initializing every stack),
 * restores the checkpoint if there is one (see restore_dir; a checkpoint
 * that fails to open, verify or load fails create with the message naming
 * the file, never a half-restored server) and binds the listen address;
 * nothing is served until scps_server_start. */
int scps_server_create(const scps_server_options *opts, scps_server **out, scps_error *err);

/* The memory budget in force (scps_server_options.memory_budget) and, in
 * words, how it was chosen; *grpc_quota: the quota of gRPC's own buffers,
 * on top of it. */
int64_t scps_server_memory_budget(const scps_server *s, const char **how, int64_t *grpc_quota);

/* The port actually bound (useful with port 0). */
int scps_server_port(const scps_server *s);

/* The CPU each SparseCore worker is pinned to ([sc_per_process]), or NULL
 * when they are not pinned. */
const int *scps_server_sc_cpus(const scps_server *s);

/* The step directory restored at create, or NULL; its step, what loading
 * it read and the topology that wrote it (resharded when it is not ours). */
const char *scps_server_restored(const scps_server *s, int64_t *step, int64_t *bytes, double *seconds,
                                 scps_topology *from);

/* The checkpoint timer's tick (scps-server --checkpoint-every), from any
 * thread; tick numbers the period that begins (scps-server: the wall
 * clock's time over the period, so every process of a cluster ticks with
 * the same numbers). At an odd tick, if steps were applied since the last
 * save, ApplyGradients responses start to carry checkpoint_due; if no
 * Checkpoint request has arrived by the next (even) tick, the server saves
 * alone under checkpoint_dir (and logs that it did) at the next two
 * multiples of checkpoint_grid above the step it holds, each once the first
 * ApplyGradients of a later step arrives (which waits for the save).
 * Processes ticking together thus save the same steps. */
void scps_server_checkpoint_tick(scps_server *s, int64_t tick);

/* Starts the completion-queue threads. on_stopped is called once, from a
 * server thread, when a shutdown has finished every call in flight. On
 * failure, *threads_started says whether any thread runs: if one does,
 * shut down and wait for on_stopped before scps_server_destroy; if none
 * does, nothing would call on_stopped, and destroy alone cleans up. */
int scps_server_start(scps_server *s, void (*on_stopped)(void *), void *ud, int *threads_started,
                      scps_error *err);

/* Starts draining: new calls are answered UNAVAILABLE (Health, answering
 * DRAINING, and Stats still work) while the calls in flight finish; then
 * gRPC closes the listeners and connections and on_stopped follows. Safe
 * from any thread, once. */
void scps_server_shutdown(scps_server *s);

/* Cancels calls still in flight after a shutdown that took too long, and
 * closes the connections. */
void scps_server_cancel_all(scps_server *s);

/* During a shutdown that still takes ApplyGradients (drain_quiet_ms):
 * milliseconds since the last one arrived, or since the shutdown began;
 * -1 when pushes are no longer taken. */
int64_t scps_server_push_quiet_ms(scps_server *s);

/* Ends the taking of ApplyGradients during a shutdown: from now on they
 * are refused like other calls, and once the calls in flight are done
 * gRPC shuts down (on_stopped). Safe from any thread, more than once. */
void scps_server_close_pushes(scps_server *s);

/* After a shutdown has finished every call (on_stopped), before
 * scps_server_destroy: with a checkpoint_dir, saves the step the process
 * holds there if anything was applied since its last save or restore.
 * Returns 1 with *step and path (cap bytes) when it saved; 0 when there was
 * nothing to save (*step: the step held, -1 for none); a negative SCPS_E*
 * code with err when the save failed. */
int scps_server_save_held(scps_server *s, int64_t *step, char *path, size_t cap, scps_error *err);

/* After on_stopped: joins the threads and frees everything. */
void scps_server_destroy(scps_server *s);

#endif
