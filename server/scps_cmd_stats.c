/* Stats and Health: what the process counts (SparseCores, stacks, methods,
 * stages, checkpoints, memory) and whether it serves or drains. */
#include "scps_cmd_stats.h"

#include <stdlib.h>
#include <string.h>

#include "scps_limits.h"

void scps__cmd_stats_health(scps_call *c) {
  scps_server *s = c->srv;
  if (!scps__call_read_request(c, &scps__v1__health_request__descriptor)) return;
  Scps__V1__HealthResponse r = SCPS__V1__HEALTH_RESPONSE__INIT;
  r.status = atomic_load(&s->draining) ? SCPS__V1__HEALTH_RESPONSE__STATUS__STATUS_DRAINING
                                       : SCPS__V1__HEALTH_RESPONSE__STATUS__STATUS_SERVING;
  r.process_index = s->opts.process_index;
  r.uptime_seconds = (double)scps__clock_ns() * 1e-9 - s->start_time;
  scps__call_finish_packed(c, &r.base);
}

void scps__cmd_stats_get(scps_call *c) {
  scps_server *s = c->srv;
  const scps_layout *l = s->layout;
  if (!scps__call_read_request(c, &scps__v1__stats_request__descriptor)) return;
  Scps__V1__StatsResponse r = SCPS__V1__STATS_RESPONSE__INIT;
  r.process_index = s->opts.process_index;
  r.uptime_seconds = (double)scps__clock_ns() * 1e-9 - s->start_time;
  int S = s->S, ns = l->n_stacks;
  Scps__V1__SparseCoreStats *scs = calloc((size_t)S, sizeof *scs), **scp = calloc((size_t)S, sizeof *scp);
  Scps__V1__StackStats *sts = calloc((size_t)ns, sizeof *sts), **stp = calloc((size_t)ns, sizeof *stp);
  int32_t *counts = calloc((size_t)ns * (size_t)S * 2, sizeof *counts);
  Scps__V1__MethodStats ms[SCPS_M_COUNT], *msp[SCPS_M_COUNT];
  scps_stage_stats stages[SCPS_MAX_SC_PER_PROCESS + 1];
  Scps__V1__StageStats sgs[SCPS_MAX_SC_PER_PROCESS + 2], *sgp[SCPS_MAX_SC_PER_PROCESS + 2];
  if (!scs || !scp || !sts || !stp || !counts) {
    scps__call_finish(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "Stats: out of memory", NULL, 0);
    goto out;
  }
  for (int k = 0; k < S; k++) {
    const scps_hbm *h = scps__engine_hbm(s->engine, k);
    scps__v1__sparse_core_stats__init(&scs[k]);
    scs[k].sparse_core = h->sc;
    scs[k].memory_used_bytes = h->used;
    scs[k].memory_capacity_bytes = h->capacity;
    scp[k] = &scs[k];
  }
  r.n_sparse_cores = (size_t)S;
  r.sparse_cores = scp;
  for (int st = 0; st < ns; st++) {
    Scps__V1__StackStats *x = &sts[st];
    scps__v1__stack_stats__init(x);
    x->stack = (char *)l->stacks[st].name;
    x->n_max_ids_per_partition = x->n_max_unique_ids_per_partition = (size_t)S;
    x->max_ids_per_partition = counts + (size_t)st * (size_t)S * 2;
    x->max_unique_ids_per_partition = x->max_ids_per_partition + S;
    for (int k = 0; k < S; k++) {
      scps_sc_stack_stats *q = &s->sc_stats[st * S + k];
      x->max_ids_per_partition[k] = atomic_load(&q->max_ids);
      x->max_unique_ids_per_partition[k] = atomic_load(&q->max_unique);
      x->ids_looked_up += atomic_load(&q->ids_looked_up);
      x->rows_updated += atomic_load(&q->rows_updated);
    }
    stp[st] = x;
  }
  r.n_stacks = (size_t)ns;
  r.stacks = stp;
  Scps__V1__CheckpointStats ck = SCPS__V1__CHECKPOINT_STATS__INIT;
  char last_path[sizeof s->saver.last_path];
  scps_saver *sv = &s->saver;
  pthread_mutex_lock(&sv->mu);
  for (int st = 0; st < ns; st++) {
    sts[st].max_ids_limit = sv->limits[st].max_ids_per_partition;
    sts[st].max_unique_ids_limit = sv->limits[st].max_unique_ids_per_partition;
  }
  ck.saves = sv->saves;
  ck.failures = sv->failures;
  ck.last_step = sv->last_saved_step;
  memcpy(last_path, sv->last_path, sizeof last_path);
  ck.last_bytes = sv->last_bytes;
  ck.last_seconds = sv->last_seconds;
  ck.saving = sv->saving;
  ck.bytes_total = sv->bytes_total;
  pthread_mutex_unlock(&sv->mu);
  ck.last_path = last_path;
  r.checkpoints = &ck;
  r.pushes_sums_checked = atomic_load(&s->pushes_sums_checked);
  Scps__V1__MemoryStats mem = SCPS__V1__MEMORY_STATS__INIT;
  scps__limits_stats(s, &mem);
  r.memory = &mem;
  r.pushes_updates_checked = atomic_load(&s->pushes_updates_checked);
  for (int m = 0; m < SCPS_M_COUNT; m++) {
    scps__v1__method_stats__init(&ms[m]);
    ms[m].method = (char *)scps__method_name(m);
    ms[m].calls = atomic_load(&s->methods[m].calls);
    ms[m].errors = atomic_load(&s->methods[m].errors);
    ms[m].bytes_received = atomic_load(&s->methods[m].bytes_in);
    ms[m].bytes_sent = atomic_load(&s->methods[m].bytes_out);
    ms[m].seconds = (double)atomic_load(&s->methods[m].ns) * 1e-9;
    msp[m] = &ms[m];
  }
  r.n_methods = SCPS_M_COUNT;
  r.methods = msp;
  int n = scps__pipeline_stats(s->pipeline, stages, SCPS_MAX_SC_PER_PROCESS + 1);
  for (int i = 0; i < n; i++) {
    scps__v1__stage_stats__init(&sgs[i]);
    sgs[i].stage = stages[i].name;
    sgs[i].queue_depth = stages[i].queue_depth;
    sgs[i].tasks = stages[i].tasks;
    sgs[i].busy_seconds = stages[i].busy_seconds;
    sgp[i] = &sgs[i];
  }
  scps__v1__stage_stats__init(&sgs[n]);
  sgs[n].stage = "inline";
  sgs[n].tasks = atomic_load(&s->inline_lookups);
  sgs[n].busy_seconds = (double)atomic_load(&s->inline_ns) * 1e-9;
  sgp[n] = &sgs[n];
  r.n_stages = (size_t)n + 1;
  r.stages = sgp;
  scps__call_finish_packed(c, &r.base);
out:
  free(scs);
  free(scp);
  free(sts);
  free(stp);
  free(counts);
}
