/* scps_server_int: the server struct every layer of server/ shares, and the
 * small types it holds (call tags, per-method and per-SparseCore counters). */
#ifndef SCPS_SERVER_INT_H
#define SCPS_SERVER_INT_H

#include <grpc/grpc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "scps.pb-c.h"
#include "scps_auth.h"
#include "scps_budget.h"
#include "scps_clock.h"
#include "scps_engine.h"
#include "scps_method.h"
#include "scps_pipeline.h"
#include "scps_saver_state.h"
#include "scps_server_options.h"

enum { TAG_NEW, TAG_CLOSE, TAG_SEND, TAG_SHUTDOWN, TAG_RECV };

#define SCPS_MAX_SC_PER_PROCESS 64

enum { SCPS_WATCH_ARRIVING = 1, SCPS_WATCH_SENDING = 2 };

typedef struct scps_call scps_call; /* scps_call.h */

/* A method's handler (the dispatch table maps each SCPS_M_* to one): answers
 * the call through scps_call.h, now or later, exactly once. */
typedef void (*scps_call_handler)(scps_call *c);

typedef struct scps_tag {
  scps_call *call;
  int kind;
} scps_tag;

/* The latency histogram's buckets (upper bounds: scps__call_latency_bound),
 * the last one unbounded; gRPC's status codes 0..16. */
#define SCPS_LATENCY_BUCKETS 15
#define SCPS_STATUS_CODES 17

/* One method's counters, bumped by the call layer as a call finishes:
 * codes[status] and latency[bucket] (calls per bucket, not cumulative)
 * besides the totals. */
typedef struct scps_method_stats {
  atomic_llong calls, errors, bytes_in, bytes_out, ns;
  atomic_llong codes[SCPS_STATUS_CODES];
  atomic_llong latency[SCPS_LATENCY_BUCKETS];
} scps_method_stats;

/* FDO maxima one local SparseCore has seen for one stack; written by the
 * thread validating a request, read by Stats. */
typedef struct scps_sc_stack_stats {
  atomic_int max_ids, max_unique;
  atomic_llong ids_looked_up, rows_updated;
  atomic_llong ids_dropped; /* entries dropped to the limits (--limit-policy drop) */
} scps_sc_stack_stats;

struct scps_server {
  scps_server_options opts;
  scps_table_spec *tables;
  scps_feature_spec *features;
  scps_layout *layout;
  scps_engine *engine;
  scps_pipeline *pipeline;
  int sc_cpus[SCPS_MAX_SC_PER_PROCESS]; /* each SparseCore worker's CPU */
  bool sc_pinned;
  struct scps_scratch *scratch; /* idle call scratch, reused call to call */
  int32_t S;
  uint8_t fingerprint[32];
  /* GetConfigResponse (scps_cmd_config.c), packed per call with the limits in force. */
  struct scps_config_pb *config;
  scps_saver saver;
  int32_t **sample_src;         /* [stack][sample]: source SparseCore of a sample */
  scps_sc_stack_stats *sc_stats;/* [stack * S + local sc] */
  /* [local sc]: ApplyGradients hold one for writing while they update that
   * SparseCore; inline Lookups hold all for reading (gang Lookups need none:
   * no worker writes while a gang job runs). */
  pthread_rwlock_t *sc_locks;
  int n_sc_locks;
  atomic_llong inline_lookups, inline_ns; /* the "inline" stage of Stats */
  atomic_llong pushes_sums_checked;       /* Stats: pushes whose row sums were checked one by one */
  atomic_llong pushes_updates_checked;    /* Stats: pushes whose updates were computed first to check them */
  scps_method_stats methods[SCPS_M_COUNT + 1];

  grpc_server *server;
  grpc_completion_queue **cqs;
  pthread_t *threads;
  int n_threads_started;
  void *handles[SCPS_M_COUNT];
  const scps_call_handler *handlers; /* [SCPS_M_COUNT]: the dispatch table the transport was given */
  /* Called by the call layer when the last call in flight ends while
   * draining with pushes closed: the transport then stops gRPC. */
  void (*calls_done)(scps_server *s);
  int port;
  double start_time;
  atomic_int draining;     /* shutdown asked: new calls are refused */
  atomic_int active;       /* calls taken and not yet freed, refused ones excluded */
  atomic_int grpc_stopping;/* grpc_server_shutdown_and_notify called */
  atomic_int cancelling;   /* drain timed out: queued Lookups are not run */
  scps_tag shutdown_tag;
  void (*on_stopped)(void *);
  void *on_stopped_ud;
  scps_auth auth; /* TLS files and tokens, read at create */

  /* Memory and transfer limits (scps_limits.c; the transfer watch lists are
   * scps_call.c's). */
  scps_budget *budget;
  char budget_how[160];          /* how the budget was chosen, for the log */
  pthread_mutex_t watch_mu;      /* the lists below */
  bool watch_mu_init;
  /* [SCPS_WATCH_ARRIVING]: calls whose request is still arriving;
   * [SCPS_WATCH_SENDING]: calls whose answer is being sent; oldest first. */
  struct { scps_call *head, *tail; } watch[3];
  atomic_llong requests_timed_out, answers_timed_out, trims;
  atomic_llong last_call_ns;     /* when the last call arrived or ended */
  atomic_bool trim_due;          /* calls ran since the last trim */
  int64_t trim_peak;             /* budget peak seen at the last periodic trim (budget thread) */
  int64_t next_periodic_trim_ns; /* budget thread */
  grpc_resource_quota *quota;    /* while the server is created */
  /* Draining with a checkpoint_dir and drain_quiet_ms: ApplyGradients are
   * still taken while pushes_open (scps__server_close_pushes ends it);
   * last_push_ns is when the last one arrived. */
  atomic_int pushes_open;
  atomic_llong last_push_ns;
  /* A Restore is loading (Lookups are refused), or one failed after
   * verification and left the tables undefined (scps_restore.h). */
  atomic_int restoring;
  atomic_int damaged;
  atomic_ullong state_id; /* GetConfigResponse.state_id (scps__restore_new_state) */
  /* Shared-memory answers (scps_shm.h); NULL with shm_socket "off". */
  struct scps_shm *shm;
  bool shm_started;
  uint8_t instance_id[16]; /* GetConfigResponse.instance_id */
};

#endif
