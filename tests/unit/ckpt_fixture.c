/* ckpt_fixture: writes a checkpoint of a workload's tables with every row and
 * slot float set to a distinct value, and the same values read back through
 * scps__engine_read_row as raw float32 files, for the scps-admin test:
 *   ckpt_fixture WORKLOAD ROOT PROCESSES SC_PER_PROCESS STEP DUMP_DIR
 * DUMP_DIR gets <table>.f32 ([vocabulary x dim]) and <table>.slot<k>.f32. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scps_checkpoint.h"
#include "scps_hash64.h"
#include "scps_workload.h"

#define MAX_P 16

static int fail(const scps_error *err) {
  fprintf(stderr, "ckpt_fixture: %s\n", err->msg);
  return 1;
}

static int dump(const scps_layout *l, scps_engine **e, const char *dir) {
  for (int t = 0; t < l->n_tables; t++) {
    const scps_table_spec *spec = &l->table_specs[t];
    int d = spec->embedding_dim, ns = scps__optimizer_num_slots(spec->optimizer.type);
    float *row = malloc(sizeof(float) * (size_t)d), *slots = malloc(sizeof(float) * (size_t)(d * 2));
    FILE *f[1 + SCPS_MAX_SLOTS] = {0};
    for (int k = -1; k < ns; k++) {
      char path[1024];
      if (k < 0) snprintf(path, sizeof path, "%s/%s.f32", dir, spec->name);
      else snprintf(path, sizeof path, "%s/%s.slot%d.f32", dir, spec->name, k);
      if (!(f[k + 1] = fopen(path, "wb"))) {
        perror(path);
        return 1;
      }
    }
    for (int64_t id = 0; id < spec->vocabulary_size; id++) {
      int p = scps__layout_process_of_sc(l, scps__layout_sc_of(l, t, id));
      scps_error err;
      if (scps__engine_read_row(e[p], t, id, row, slots, &err)) return fail(&err);
      fwrite(row, sizeof(float), (size_t)d, f[0]);
      for (int k = 0; k < ns; k++) fwrite(slots + (size_t)k * (size_t)d, sizeof(float), (size_t)d, f[k + 1]);
    }
    for (int k = 0; k <= ns; k++) fclose(f[k]);
    free(row);
    free(slots);
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 7) {
    fprintf(stderr, "usage: ckpt_fixture WORKLOAD ROOT PROCESSES SC_PER_PROCESS STEP DUMP_DIR\n");
    return 2;
  }
  scps_topology topo = {atoi(argv[3]), atoi(argv[4]), 64 << 20};
  if (topo.num_processes < 1 || topo.num_processes > MAX_P) return 2;
  scps_error err;
  scps_workload *w;
  scps_layout *l;
  if (scps__workload_load(argv[1], &w, &err)) return fail(&err);
  if (scps__layout_create(w->tables, w->n_tables, w->features, w->n_features, &topo, NULL, &l, &err))
    return fail(&err);
  scps_engine *e[MAX_P] = {0};
  for (int p = 0; p < topo.num_processes; p++) {
    if (scps__engine_create(l, p, &e[p], &err)) return fail(&err);
    for (int s = 0; s < l->n_stacks; s++)
      for (int32_t ls = 0; ls < topo.sc_per_process; ls++) {
        size_t n = (size_t)l->stacks[s].rows_per_sc * (size_t)l->stacks[s].dim;
        for (int k = -1; k < scps__optimizer_num_slots(l->stacks[s].optimizer.type); k++) {
          float *v = k < 0 ? scps__engine_shard(e[p], s, ls) : scps__engine_slot(e[p], s, ls, k);
          for (size_t i = 0; i < n; i++) {
            uint64_t x[4] = {(uint64_t)p, (uint64_t)s, (uint64_t)(ls * 8 + k + 1), i};
            v[i] = (float)(scps__hash64(x, sizeof x, 0) >> 40) * 0x1p-20f - 8.0f;
          }
        }
      }
    if (scps__checkpoint_save(e[p], argv[2], atoll(argv[5]), NULL, NULL, &err)) return fail(&err);
  }
  int rc = dump(l, e, argv[6]);
  for (int p = 0; p < topo.num_processes; p++) scps__engine_destroy(e[p]);
  scps__layout_destroy(l);
  scps__workload_destroy(w);
  return rc;
}
