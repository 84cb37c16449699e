/* scps_server: one scps-server process: the engine, the SparseCore/TensorCore
 * pipeline, the gRPC front (completion-queue threads, the six methods) and
 * checkpoints (restore at start, saves on a dedicated thread). */
#ifndef SCPS_SERVER_H
#define SCPS_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "scps_error.h"
#include "scps_server_options.h"
#include "scps_spec.h"

/* Builds the layout and engine (placing and initializing every stack),
 * restores the checkpoint if there is one (see restore_dir; a checkpoint
 * that fails to open, verify or load fails create with the message naming
 * the file, never a half-restored server) and binds the listen address;
 * nothing is served until scps__server_start. */
int scps__server_create(const scps_server_options *opts, scps_server **out, scps_error *err);

/* The memory budget in force (scps_server_options.memory_budget) and, in
 * words, how it was chosen; *grpc_quota: the quota of gRPC's own buffers,
 * on top of it. */
int64_t scps__server_memory_budget(const scps_server *s, const char **how, int64_t *grpc_quota);

/* The shared-memory side channel's socket (--shm-socket), or NULL when off. */
const char *scps__server_shm_socket(const scps_server *s);

/* The port actually bound (useful with port 0). */
int scps__server_port(const scps_server *s);

/* The CPU each SparseCore worker is pinned to ([sc_per_process]), or NULL
 * when they are not pinned. */
const int *scps__server_sc_cpus(const scps_server *s);

/* The step directory restored at create, or NULL; its step, what loading
 * it read and the topology that wrote it (resharded when it is not ours). */
const char *scps__server_restored(const scps_server *s, int64_t *step, int64_t *bytes, double *seconds,
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
void scps__server_checkpoint_tick(scps_server *s, int64_t tick);

/* Starts the completion-queue threads. on_stopped is called once, from a
 * server thread, when a shutdown has finished every call in flight. On
 * failure, *threads_started says whether any thread runs: if one does,
 * shut down and wait for on_stopped before scps__server_destroy; if none
 * does, nothing would call on_stopped, and destroy alone cleans up. */
int scps__server_start(scps_server *s, void (*on_stopped)(void *), void *ud, int *threads_started,
                      scps_error *err);

/* Starts draining: new calls are answered UNAVAILABLE (Health, answering
 * DRAINING, and Stats still work) while the calls in flight finish; then
 * gRPC closes the listeners and connections and on_stopped follows. Safe
 * from any thread, once. */
void scps__server_shutdown(scps_server *s);

/* Cancels calls still in flight after a shutdown that took too long, and
 * closes the connections. */
void scps__server_cancel_all(scps_server *s);

/* During a shutdown that still takes ApplyGradients (drain_quiet_ms):
 * milliseconds since the last one arrived, or since the shutdown began;
 * -1 when pushes are no longer taken. */
int64_t scps__server_push_quiet_ms(scps_server *s);

/* Ends the taking of ApplyGradients during a shutdown: from now on they
 * are refused like other calls, and once the calls in flight are done
 * gRPC shuts down (on_stopped). Safe from any thread, more than once. */
void scps__server_close_pushes(scps_server *s);

/* After a shutdown has finished every call (on_stopped), before
 * scps__server_destroy: with a checkpoint_dir, saves the step the process
 * holds there if anything was applied since its last save or restore.
 * Returns 1 with *step and path (cap bytes) when it saved; 0 when there was
 * nothing to save (*step: the step held, -1 for none); a negative SCPS_E*
 * code with err when the save failed. */
int scps__server_save_held(scps_server *s, int64_t *step, char *path, size_t cap, scps_error *err);

/* After on_stopped: joins the threads and frees everything. */
void scps__server_destroy(scps_server *s);

#endif
