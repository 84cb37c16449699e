/* The SparseCore/TensorCore pipeline: every SparseCore sees jobs in one
 * global order even with concurrent submitters, the TensorCore part runs
 * after all SparseCore parts, gang jobs see no SparseCore written while they
 * run, a gang job's sync point holds every worker until all reached it,
 * destroy drains, the counters add up, and pinned SparseCore workers run on
 * their CPU alone. */
/* cpu_set_t, pthread_getaffinity_np */
#define _GNU_SOURCE
#include <sched.h>
#include <time.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "scps_pipeline.h"
#include "scps_test.h"

#define NSC 4
#define JOBS 2000

typedef struct rec {
  scps_job job;
  int id;
  atomic_int sc_done;
  int tc_saw; /* SparseCore parts finished when the TensorCore part ran */
} rec;

static int order[NSC][2 * JOBS];
static int order_len[NSC];
static atomic_int tc_runs;

static void sc_part(scps_job *job, int32_t sc) {
  rec *r = job->data;
  order[sc][order_len[sc]++] = r->id; /* only worker sc writes row sc */
  atomic_fetch_add(&r->sc_done, 1);
}

static void tc_part(scps_job *job) {
  rec *r = job->data;
  r->tc_saw = atomic_load(&r->sc_done);
  atomic_fetch_add(&tc_runs, 1);
}

typedef struct submitter {
  scps_pipeline *p;
  rec *recs;
  int n;
} submitter;

static void *submit_all(void *arg) {
  submitter *s = arg;
  for (int i = 0; i < s->n; i++) scps__pipeline_submit(s->p, &s->recs[i].job);
  return NULL;
}

/* Gang jobs against ordinary ones: worker k's ordinary jobs write cell k
 * (plain ints: ThreadSanitizer reports any overlap too); a gang job reads
 * every cell before and after yielding, and must find them unchanged. */
static int cells[NSC];
static atomic_int gang_torn, gang_parts;

static void write_cell(scps_job *job, int32_t sc) {
  for (int i = 0; i < 50; i++) cells[sc]++;
}

static void read_cells(scps_job *job, int32_t sc) {
  int before[NSC];
  memcpy(before, cells, sizeof before);
  for (int i = 0; i < 3; i++) sched_yield();
  if (memcmp(before, cells, sizeof before)) atomic_fetch_add(&gang_torn, 1);
  atomic_fetch_add(&gang_parts, 1);
}

static void nothing(scps_job *job) {}

static void test_gang(void) {
  scps_pipeline *p;
  scps_error err;
  CHECK_OK(scps__pipeline_create(NSC, 1, NULL, &p, &err), &err);
  if (!p) return;
  enum { N = 3000 };
  scps_job *jobs = calloc(N, sizeof *jobs);
  int gangs = 0;
  for (int i = 0; i < N; i++) {
    jobs[i].gang = i % 3 == 0;
    gangs += jobs[i].gang;
    jobs[i].sc_fn = jobs[i].gang ? read_cells : write_cell;
    jobs[i].tc_fn = nothing;
    scps__pipeline_submit(p, &jobs[i]);
  }
  scps__pipeline_destroy(p);
  CHECKF(atomic_load(&gang_torn) == 0, "%d gang parts saw a SparseCore written while they ran",
         atomic_load(&gang_torn));
  CHECK(atomic_load(&gang_parts) == gangs * NSC);
  for (int k = 0; k < NSC; k++) CHECK(cells[k] == 50 * (N - gangs));
  free(jobs);
}

/* Gang jobs freed by their TensorCore part, as the server frees a call:
 * no worker may touch a job once the last one has handed it on
 * (AddressSanitizer reports a use after free), and the TensorCore part must
 * find every SparseCore part done. */
typedef struct owned {
  scps_job job;
  atomic_int parts;
} owned;

static atomic_int owned_early, owned_done;

static void count_part(scps_job *job, int32_t sc) {
  atomic_fetch_add(&((owned *)job->data)->parts, 1);
}

static void free_owned(scps_job *job) {
  owned *o = job->data;
  if (atomic_load(&o->parts) != NSC) atomic_fetch_add(&owned_early, 1);
  atomic_fetch_add(&owned_done, 1);
  free(o);
}

static void test_gang_freed(void) {
  scps_pipeline *p;
  scps_error err;
  CHECK_OK(scps__pipeline_create(NSC, 2, NULL, &p, &err), &err);
  if (!p) return;
  enum { N = 2000 };
  int submitted = 0;
  for (int i = 0; i < N; i++) {
    owned *o = calloc(1, sizeof *o);
    if (!o) break;
    o->job.gang = true;
    o->job.sc_fn = count_part;
    o->job.tc_fn = free_owned;
    o->job.data = o;
    scps__pipeline_submit(p, &o->job);
    submitted++;
  }
  scps__pipeline_destroy(p);
  CHECK(submitted == N && atomic_load(&owned_done) == N);
  CHECKF(atomic_load(&owned_early) == 0, "%d TensorCore parts ran before every SparseCore part",
         atomic_load(&owned_early));
}

/* scps__pipeline_gang_sync: each worker writes its slot (a plain int, so
 * ThreadSanitizer reports a read that is not ordered after the write), syncs,
 * then reads every slot; in every third job one worker is late by 2 ms, past
 * the barrier's spin, so the others also go through its sleeping path. */
static scps_pipeline *sync_p;
static int sync_slot[NSC];
static atomic_int sync_missed, sync_parts;

static void sync_part(scps_job *job, int32_t sc) {
  const int id = (int)(intptr_t)job->data;
  if (id % 3 == 0 && sc == id % NSC) {
    struct timespec late = {0, 2000000};
    nanosleep(&late, NULL);
  }
  sync_slot[sc] = id;
  scps__pipeline_gang_sync(sync_p, job);
  for (int k = 0; k < NSC; k++)
    if (sync_slot[k] != id) atomic_fetch_add(&sync_missed, 1);
  atomic_fetch_add(&sync_parts, 1);
}

static void test_gang_sync(void) {
  scps_error err;
  CHECK_OK(scps__pipeline_create(NSC, 1, NULL, &sync_p, &err), &err);
  if (!sync_p) return;
  enum { N = 300 };
  scps_job *jobs = calloc(N, sizeof *jobs);
  CHECK(jobs != NULL);
  for (int i = 0; jobs && i < N; i++) {
    jobs[i].gang = true;
    jobs[i].sc_fn = sync_part;
    jobs[i].tc_fn = nothing;
    jobs[i].data = (void *)(intptr_t)(i + 1);
    scps__pipeline_submit(sync_p, &jobs[i]);
  }
  scps__pipeline_destroy(sync_p);
  CHECK(atomic_load(&sync_parts) == N * NSC);
  CHECKF(atomic_load(&sync_missed) == 0, "%d reads after the sync point missed another worker's write",
         atomic_load(&sync_missed));
  free(jobs);
}

/* Per SparseCore worker: the CPUs its thread may use, as a job saw them. */
static cpu_set_t seen_cpus[2];

static void sc_affinity(scps_job *job, int32_t sc) {
  (void)job;
  pthread_getaffinity_np(pthread_self(), sizeof seen_cpus[sc], &seen_cpus[sc]);
}

static void tc_none(scps_job *job) { (void)job; }

/* Workers pinned to the last two CPUs this process may use (one, twice, on
 * a single CPU), each allowed only its own; a CPU the system refuses fails
 * create, naming the worker and the CPU. */
static void test_pinned(void) {
  scps_error err;
  cpu_set_t mine;
  CHECK(sched_getaffinity(0, sizeof mine, &mine) == 0);
  int cpus[2] = {-1, -1};
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &mine)) {
      cpus[0] = cpus[1];
      cpus[1] = c;
    }
  if (cpus[0] < 0) cpus[0] = cpus[1];
  scps_pipeline *p;
  CHECK_OK(scps__pipeline_create(2, 1, cpus, &p, &err), &err);
  scps_job job = {.sc_fn = sc_affinity, .tc_fn = tc_none};
  scps__pipeline_submit(p, &job);
  scps__pipeline_destroy(p);
  for (int k = 0; k < 2; k++)
    CHECKF(CPU_COUNT(&seen_cpus[k]) == 1 && CPU_ISSET(cpus[k], &seen_cpus[k]),
           "worker %d: %d CPUs allowed, expected CPU %d alone", k, CPU_COUNT(&seen_cpus[k]), cpus[k]);
  int bad[2] = {cpus[0], CPU_SETSIZE + 5};
  CHECK(scps__pipeline_create(2, 1, bad, &p, &err) == SCPS_EINVAL);
  CHECKF(strstr(err.msg, "worker 1") && strstr(err.msg, "1029"), "message: %s", err.msg);
}

int main(void) {
  test_gang();
  test_gang_freed();
  test_gang_sync();
  scps_pipeline *p;
  scps_error err;
  CHECK_OK(scps__pipeline_create(NSC, 2, NULL, &p, &err), &err);
  if (!p) return scps_test_finish("test_pipeline");
  rec *recs = calloc(2 * JOBS, sizeof *recs);
  for (int i = 0; i < 2 * JOBS; i++) {
    recs[i].id = i;
    recs[i].job.sc_fn = sc_part;
    recs[i].job.tc_fn = tc_part;
    recs[i].job.data = &recs[i];
  }
  submitter s[2] = {{p, recs, JOBS}, {p, recs + JOBS, JOBS}};
  pthread_t th[2];
  for (int k = 0; k < 2; k++) pthread_create(&th[k], NULL, submit_all, &s[k]);
  for (int k = 0; k < 2; k++) pthread_join(th[k], NULL);
  scps_stage_stats st[NSC + 1];
  int n = scps__pipeline_stats(p, st, NSC + 1);
  CHECK(n == NSC + 1 && !strcmp(st[0].name, "sc0") && !strcmp(st[NSC].name, "tc"));
  scps__pipeline_destroy(p); /* drains */
  CHECK(atomic_load(&tc_runs) == 2 * JOBS);
  int late = 0, mismatch = 0;
  for (int i = 0; i < 2 * JOBS; i++) late += recs[i].tc_saw != NSC;
  CHECKF(late == 0, "%d TensorCore parts ran before all SparseCore parts", late);
  for (int sc = 0; sc < NSC; sc++) {
    CHECK(order_len[sc] == 2 * JOBS);
    mismatch += memcmp(order[sc], order[0], sizeof(int) * 2 * JOBS) != 0;
  }
  CHECKF(mismatch == 0, "%d SparseCores saw another job order", mismatch);
  /* Each submitter's own jobs keep their order. */
  int last[2] = {-1, JOBS - 1}, out_of_order = 0;
  for (int i = 0; i < 2 * JOBS; i++) {
    int id = order[0][i], k = id >= JOBS;
    out_of_order += id <= last[k];
    last[k] = id;
  }
  CHECK(out_of_order == 0);

  /* Counters: a job with no SparseCore part goes straight to the TensorCore. */
  CHECK_OK(scps__pipeline_create(2, 1, NULL, &p, &err), &err);
  rec solo = {.id = 0};
  solo.job.tc_fn = tc_part;
  solo.job.data = &solo;
  atomic_store(&tc_runs, 0);
  scps__pipeline_submit(p, &solo.job);
  scps__pipeline_destroy(p);
  CHECK(atomic_load(&tc_runs) == 1 && solo.tc_saw == 0);
  CHECK(scps__pipeline_create(0, 1, NULL, &p, &err) == SCPS_EINVAL);
  test_pinned();
  free(recs);
  return scps_test_finish("test_pipeline");
}
