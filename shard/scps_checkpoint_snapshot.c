#include "scps_checkpoint_snapshot.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "scps_ckpt_file.h"
#include "scps_ckpt_manifest.h"

struct scps_checkpoint_snapshot {
  const scps_engine *e;
  char *base;      /* one anonymous mapping of `mapped` bytes */
  size_t mapped;
  int n_files;
  size_t *offset;  /* [n_files + 1]: file i's bytes at base + offset[i], in save order */
};

static size_t snapshot_file_bytes(const scps_layout *l, int stack) {
  const scps_stack_layout *st = &l->stacks[stack];
  return (size_t)scps__ckpt_manifest_layout_shard_bytes(st);
}

int64_t scps__checkpoint_snapshot_bytes(const scps_engine *e) {
  const scps_layout *l = scps__engine_layout(e);
  int64_t bytes = 0;
  for (int s = 0; s < l->n_stacks; s++) bytes += (int64_t)snapshot_file_bytes(l, s) * l->topology.sc_per_process;
  return bytes;
}

/* A new snapshot's mapping, for the files of the engine's process. */
static int snapshot_map(const scps_engine *e, scps_checkpoint_snapshot **out, scps_error *err) {
  const scps_layout *l = scps__engine_layout(e);
  const int32_t S = l->topology.sc_per_process;
  scps_checkpoint_snapshot *sn = calloc(1, sizeof *sn);
  const int n = l->n_stacks * S;
  if (sn) sn->offset = calloc((size_t)n + 1, sizeof *sn->offset);
  if (!sn || !sn->offset) {
    free(sn);
    return scps_error_set(err, SCPS_ENOMEM, "checkpoint snapshot: out of memory");
  }
  sn->e = e;
  sn->n_files = n;
  for (int i = 0; i < n; i++) sn->offset[i + 1] = sn->offset[i] + snapshot_file_bytes(l, i / S);
  sn->mapped = sn->offset[n] ? sn->offset[n] : 1;
  /* Its own mapping, so freeing it gives the memory back to the system
   * whatever malloc's thresholds are. */
  void *base = mmap(NULL, sn->mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) {
    int e2 = errno;
    size_t want = sn->mapped;
    free(sn->offset);
    free(sn);
    return scps_error_set(err, SCPS_ENOMEM, "checkpoint snapshot: cannot map %zu bytes: %s", want, strerror(e2));
  }
  sn->base = base;
  *out = sn;
  return 0;
}

/* Copies file i's regions (rows, then each slot) as a save writes them. */
static int snapshot_file(void *arg, int i, scps_error *err) {
  scps_checkpoint_snapshot *sn = arg;
  scps_engine *e = (scps_engine *)sn->e;
  const scps_layout *l = scps__engine_layout(e);
  const int32_t S = l->topology.sc_per_process;
  const int stack = i / S;
  const int32_t ls = i % S;
  char *dst = sn->base + sn->offset[i];
  for (int a = 0; a <= scps__optimizer_num_slots(l->stacks[stack].optimizer.type); a++) {
    const size_t region = (size_t)scps__ckpt_manifest_layout_region_bytes(&l->stacks[stack], a);
    memcpy(dst, scps__engine_codes(e, stack, ls, a), region);
    dst += region;
  }
  return 0;
}

int scps__checkpoint_snapshot_take(const scps_engine *e, scps_checkpoint_snapshot **s, scps_error *err) {
  scps_checkpoint_snapshot *sn = *s;
  if (sn && sn->e != e) {
    scps__checkpoint_snapshot_free(sn);
    *s = sn = NULL;
  }
  if (!sn) {
    int rc = snapshot_map(e, &sn, err);
    if (rc) return rc;
    *s = sn;
  }
  int rc = scps__ckpt_file_for_each(sn->n_files, snapshot_file, sn, err);
  if (rc) {
    scps__checkpoint_snapshot_free(sn);
    *s = NULL;
  }
  return rc;
}

void scps__checkpoint_snapshot_idle(scps_checkpoint_snapshot *s) {
#ifdef MADV_FREE
  if (s && s->base) (void)madvise(s->base, s->mapped, MADV_FREE);
#else
  if (s && s->base) (void)madvise(s->base, s->mapped, MADV_DONTNEED);
#endif
}

void scps__checkpoint_snapshot_free(scps_checkpoint_snapshot *s) {
  if (!s) return;
  if (s->base) munmap(s->base, s->mapped);
  free(s->offset);
  free(s);
}

const scps_engine *scps__checkpoint_snapshot_engine(const scps_checkpoint_snapshot *s) { return s->e; }

const void *scps__checkpoint_snapshot_file(const scps_checkpoint_snapshot *s, int i, size_t *len) {
  *len = s->offset[i + 1] - s->offset[i];
  return s->base + s->offset[i];
}
