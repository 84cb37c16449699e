/* bench_checkpoint: in-process checkpoint save and load of one process's
 * engine, next to XXH64 over the same bytes in memory and a plain sequential
 * write + fsync and read of the same number of bytes:
 *
 *   scps-bench-checkpoint --workload FILE --dir DIR [--topology PxS] [--runs K]
 *
 * The engine of process 0 is created (its arena initialised, so every page is
 * resident), then K times: save to DIR (its files fsynced, as a server's),
 * open + load into a new engine of the same layout (created and initialised
 * untimed, as a server restoring at start; checksums verified), write a plain
 * file of the same size with 4 MiB write() calls and fsync it, read it back
 * with 4 MiB read() calls. Loads and plain reads both read files written
 * just before (page cache as the machine keeps it, nothing dropped). Figures
 * are medians over the K runs; one JSON line on stdout. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "scps_checkpoint.h"
#include "scps_checkpoint_root.h"
#include "scps_clock.h"
#include "scps_hash64.h"
#include "scps_workload.h"
#include "scps_bench.h"

#define MAX_RUNS 64
#define PLAIN_CHUNK ((size_t)4 << 20)

static int run(const char *workload, const char *dir, scps_topology topo, int runs, scps_error *err) {
  scps_workload *w = NULL;
  scps_layout *l = NULL;
  scps_engine *e = NULL;
  char *chunk = NULL;
  double t_save[MAX_RUNS], t_load[MAX_RUNS], t_write[MAX_RUNS], t_read[MAX_RUNS], t_hash[MAX_RUNS];
  scps_checkpoint_stats st = {0};
  char plain[4096];
  snprintf(plain, sizeof plain, "%s/plain.bin", dir);
  int rc = scps__workload_load(workload, &w, err);
  if (!rc) rc = scps__layout_create(w->tables, w->n_tables, w->features, w->n_features, &topo, NULL, &l, err);
  if (!rc) rc = scps__engine_create(l, 0, &e, err);
  if (!rc && !(chunk = malloc(PLAIN_CHUNK))) rc = scps_error_set(err, SCPS_ENOMEM, "out of memory");
  if (!rc) memset(chunk, 0x5a, PLAIN_CHUNK);
  for (int i = 0; i < runs && !rc; i++) {
    double t0 = scps__clock_s();
    rc = scps__checkpoint_save(e, dir, i, NULL, &st, err);
    t_save[i] = scps__clock_s() - t0;
    char step_dir[4096];
    snprintf(step_dir, sizeof step_dir, "%s/step-%012d", dir, i);
    scps_checkpoint *c = NULL;
    scps_engine *fresh = NULL;
    if (!rc) rc = scps__engine_create(l, 0, &fresh, err);
    t0 = scps__clock_s();
    if (!rc) rc = scps__checkpoint_open(step_dir, &c, err);
    if (!rc) rc = scps__checkpoint_load(c, fresh, NULL, err);
    t_load[i] = scps__clock_s() - t0;
    scps__checkpoint_close(c);
    scps__engine_destroy(fresh);
    if (!rc) {
      /* Saved without a fingerprint: this declaration's checkpoints are ours. */
      scps_checkpoint_owner own = {.process_index = 0, .layout = l};
      int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      rc = fd < 0 ? scps_error_set(err, SCPS_EIO, "cannot open '%s'", dir)
                  : scps__checkpoint_root_retain(fd, dir, &own, 1, i, 1, err);
      if (fd >= 0) close(fd);
    }
    t0 = scps__clock_s();
    uint64_t sum = 0;
    for (int s = 0; s < l->n_stacks; s++)
      for (int32_t sc = 0; sc < topo.sc_per_process; sc++) {
        size_t region = (size_t)l->stacks[s].rows_per_sc * (size_t)l->stacks[s].dim * sizeof(float);
        sum ^= scps__hash64(scps__engine_shard(e, s, sc), region, 0);
        for (int k = 0; k < scps__optimizer_num_slots(l->stacks[s].optimizer.type); k++)
          sum ^= scps__hash64(scps__engine_slot(e, s, sc, k), region, 0);
      }
    t_hash[i] = scps__clock_s() - t0 + (double)(sum & 1) * 1e-12;
    t0 = scps__clock_s();
    if (!rc && scps_bench_plain_write(plain, chunk, PLAIN_CHUNK, st.bytes))
      rc = scps_error_set(err, SCPS_EIO, "cannot write '%s'", plain);
    t_write[i] = scps__clock_s() - t0;
    t0 = scps__clock_s();
    if (!rc && scps_bench_plain_read(plain, chunk, PLAIN_CHUNK))
      rc = scps_error_set(err, SCPS_EIO, "cannot read '%s'", plain);
    t_read[i] = scps__clock_s() - t0;
    unlink(plain);
  }
  if (!rc) {
    double gb = (double)st.bytes * 1e-9;
    double save = scps_bench_median(t_save, (size_t)runs), load = scps_bench_median(t_load, (size_t)runs), write = scps_bench_median(t_write, (size_t)runs),
           read = scps_bench_median(t_read, (size_t)runs), hash = scps_bench_median(t_hash, (size_t)runs);
    printf("{\"bench\": \"checkpoint\", \"workload\": \"%s\", \"topology\": \"%dx%d\", \"bytes\": %lld, "
           "\"files\": %d, \"runs\": %d, \"save_gb_per_s\": %.3f, \"plain_write_fsync_gb_per_s\": %.3f, "
           "\"load_gb_per_s\": %.3f, \"plain_read_gb_per_s\": %.3f, \"xxh64_gb_per_s\": %.3f, "
           "\"save_ratio\": %.3f, \"load_ratio\": %.3f}\n",
           w->name, topo.num_processes, topo.sc_per_process, (long long)st.bytes, st.files, runs,
           gb / save, gb / write, gb / load, gb / read, gb / hash, write / save, read / load);
  }
  free(chunk);
  scps__engine_destroy(e);
  scps__layout_destroy(l);
  scps__workload_destroy(w);
  return rc;
}

int main(int argc, char **argv) {
  const char *workload = NULL, *dir = NULL;
  scps_topology topo = {1, 2, (int64_t)8 << 30};
  int runs = 3;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      printf("usage: scps-bench-checkpoint --workload FILE --dir DIR [--topology PxS] [--runs K]\n"
             "Saves process 0's engine to DIR and loads that into a new engine K times, next to\n"
             "XXH64 over the same bytes and a plain write + fsync and read of as many bytes;\n"
             "medians as JSON.\n"
             "  --workload FILE  workload file (tables and features)\n"
             "  --dir DIR        directory for the checkpoints and the plain file (must exist)\n"
             "  --topology PxS   processes x SparseCores per process (default 1x2; 8 GiB each)\n"
             "  --runs K         repetitions, 1 to %d (default 3)\n", MAX_RUNS);
      return 0;
    }
    if (!val) {
      fprintf(stderr, "scps-bench-checkpoint: '%s' needs a value or is unknown (try --help)\n", a);
      return 2;
    }
    if (!strcmp(a, "--workload")) workload = val;
    else if (!strcmp(a, "--dir")) dir = val;
    else if (!strcmp(a, "--topology")) {
      if (sscanf(val, "%dx%d", &topo.num_processes, &topo.sc_per_process) != 2 || topo.num_processes < 1 ||
          topo.sc_per_process < 1) {
        fprintf(stderr, "scps-bench-checkpoint: --topology '%s' is not PxS (e.g. 1x2)\n", val);
        return 2;
      }
    } else if (!strcmp(a, "--runs")) {
      runs = atoi(val);
      if (runs < 1 || runs > MAX_RUNS) {
        fprintf(stderr, "scps-bench-checkpoint: --runs '%s' not in [1, %d]\n", val, MAX_RUNS);
        return 2;
      }
    } else {
      fprintf(stderr, "scps-bench-checkpoint: unknown option '%s' (try --help)\n", a);
      return 2;
    }
    i++;
  }
  if (!workload || !dir) {
    fprintf(stderr, "scps-bench-checkpoint: --workload and --dir are required (try --help)\n");
    return 2;
  }
  scps_error err;
  int rc = run(workload, dir, topo, runs, &err);
  if (rc) {
    fprintf(stderr, "scps-bench-checkpoint: %s\n", err.msg);
    return 1;
  }
  return 0;
}
