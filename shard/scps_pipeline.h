/* scps_pipeline: the SparseCore and TensorCore stages of a server process:
 * one worker per simulated SparseCore (sole writer of its memory), TensorCore
 * workers for dense work, and FIFO queues between them. */
#ifndef SCPS_PIPELINE_H
#define SCPS_PIPELINE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "scps_error.h"

typedef struct scps_job scps_job;

/* Runs on SparseCore worker local_sc; touches only that SparseCore's memory. */
typedef void (*scps_sc_fn)(scps_job *job, int32_t local_sc);
/* Runs on a TensorCore worker once every SparseCore part is done. The
 * pipeline does not touch the job afterwards, so it may free it. */
typedef void (*scps_tc_fn)(scps_job *job);

/* Caller-owned; fill sc_fn (NULL: no SparseCore part), tc_fn, data and
 * gang, then submit. The rest is the pipeline's.
 *
 * A gang job's sc_fn runs on every SparseCore worker at once: no worker
 * starts it before all have finished their earlier jobs, and none goes on
 * before all have finished it. So while it runs nothing writes any
 * SparseCore's memory, and it may read all of them (a lookup split by
 * samples rather than by SparseCore). Other jobs touch only their own
 * worker's SparseCore. */
struct scps_job {
  scps_sc_fn sc_fn;
  scps_tc_fn tc_fn;
  void *data;
  bool gang;
  atomic_int pending;
  int gang_in, gang_sync, gang_out; /* workers yet to arrive at each barrier; under the pipeline's lock */
};

typedef struct scps_pipeline scps_pipeline;

#define SCPS_STAGE_NAME_MAX 16

typedef struct scps_stage_stats {
  char name[SCPS_STAGE_NAME_MAX]; /* "sc0", "sc1", ..., "tc" */
  int64_t queue_depth;            /* jobs waiting now */
  int64_t tasks;                  /* jobs finished since start */
  double busy_seconds;            /* time spent running jobs since start */
} scps_stage_stats;

/* Starts n_sc SparseCore workers and n_tc TensorCore workers, named
 * "scps-sc<k>" and "scps-tc<k>". sc_cpus: NULL, or the CPU each SparseCore
 * worker is pinned to ([n_sc]; scps__cpus_assign); SCPS_EINVAL, naming the
 * worker and CPU, when the system refuses one. */
int scps__pipeline_create(int32_t n_sc, int32_t n_tc, const int *sc_cpus, scps_pipeline **out, scps_error *err);

/* Runs every job already submitted to completion, then stops the workers. */
void scps__pipeline_destroy(scps_pipeline *p);

/* Queues job on every SparseCore worker, atomically with respect to other
 * submissions: two jobs reach every SparseCore in the same order, so a job
 * submitted after another job's tc_fn ran sees all of that job's writes. */
void scps__pipeline_submit(scps_pipeline *p, scps_job *job);

/* Within a gang job's sc_fn, at most once per job: returns when every
 * SparseCore worker has called it, so each may rely on what all of them did
 * before (a barrier that spins briefly before it sleeps, as the gang's
 * own). */
void scps__pipeline_gang_sync(scps_pipeline *p, scps_job *job);

/* Fills up to max entries (n_sc SparseCore stages, then "tc"); returns the
 * number of stages. */
int scps__pipeline_stats(scps_pipeline *p, scps_stage_stats *out, int max);

#endif
