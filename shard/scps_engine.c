#include "scps_engine.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "scps_bf16.h"
#include "scps_engine_int.h"
#include "scps_hash64.h"
#include "scps_init.h"
#include "scps_pool.h"

/* Folds n values' magnitudes into a record of shard.mag_bits. */
static inline __attribute__((always_inline)) void fold_magnitudes(const float *v, size_t n, uint32_t *mag) {
  uint32_t m = *mag;
  for (size_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &v[i], sizeof u);
    u &= 0x7fffffffu;
    m = u > m ? u : m;
  }
  *mag = m;
}

/* Folds n values into a record of shard.mag_bits and low_bits: the
 * bits of a finite float's magnitude order as its values do, and as signed
 * integers its bits order non-negative values (negative ones fall below
 * 0). Branch-free, so it vectorises. */
static inline __attribute__((always_inline)) void fold_values(const float *v, size_t n, uint32_t *mag,
                                                              int32_t *low) {
  uint32_t m = *mag;
  int32_t lo = *low;
  for (size_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &v[i], sizeof u);
    const uint32_t a = u & 0x7fffffffu;
    const int32_t s = (int32_t)u;
    m = a > m ? a : m;
    lo = s < lo ? s : lo;
  }
  *mag = m;
  *low = lo;
}


void scps__engine_destroy(scps_engine *e) {
  if (!e) return;
  if (e->hbm)
    for (int32_t s = 0; s < e->sc_per_process; s++) scps__hbm_free(&e->hbm[s]);
  free(e->hbm);
  if (e->shards)
    for (size_t i = 0; i < (size_t)e->sc_per_process * (size_t)e->layout->n_stacks; i++) free(e->shards[i].pads);
  free(e->shards);
  free(e->codecs);
  free(e->seeds);
  free(e);
}

/* Every SparseCore of a process holds the same amount of every stack, so one
 * pass over the stacks tells whether the set fits before anything is placed. */
static int check_fits(const scps_layout *l, int32_t first_sc, scps_error *err) {
  int64_t capacity = l->topology.sc_memory_bytes, used = 0;
  for (int s = 0; s < l->n_stacks; s++) {
    int64_t need = scps__layout_stack_bytes_per_sc(l, s);
    if (need > capacity - used)
      return scps_error_set(err, SCPS_ENOSPC,
                            "stack '%s' needs %lld bytes (rows and %d optimizer slots) on "
                            "SparseCore %d, %lld bytes free of %lld; raise the SparseCore memory "
                            "or use more SparseCores",
                            l->stacks[s].name, (long long)need,
                            scps__optimizer_num_slots(l->stacks[s].optimizer.type), first_sc,
                            (long long)(capacity - used), (long long)capacity);
    used += need;
  }
  return 0;
}

/* An initial row into an encoded shard: rounded to nearest (the initial
 * values do not depend on the topology), and folded as decoded. */
static void init_encoded_row(const scps_storage_codec *c, const scps_table_spec *spec, uint64_t seed, int64_t id,
                             uint8_t *dst, shard *sh) {
  float v[SCPS_DIM_MAX];
  memset(v, 0, c->dim * sizeof(float));
  scps__init_row(&spec->initializer, seed, id, spec->embedding_dim, v);
  (void)scps__storage_encode_row(c, v, dst, NULL, NULL); /* initial values are finite */
  scps__storage_decode_row(c, dst, v);
  fold_values(v, c->dim, &sh->mag_bits[0], &sh->low_bits[0]);
}

static void init_shard(const scps_engine *e, int stack, int32_t sc, shard *sh) {
  const scps_layout *l = e->layout;
  const scps_stack_layout *st = &l->stacks[stack];
  const scps_storage_codec *codec = codec_of(e, stack, 0);
  for (int i = 0; i < st->n_tables; i++) {
    int t = st->tables[i];
    const scps_table_spec *spec = &l->table_specs[t];
    const scps_table_layout *tl = &l->tables[t];
    uint64_t seed = scps__init_seed(spec);
    int64_t rows = tl->padded_vocab / l->num_sc;
    int64_t residue = ((int64_t)sc - tl->shard_rotation) % l->num_sc;
    if (residue < 0) residue += l->num_sc;
    for (int64_t q = 0; q < rows; q++) {
      int64_t id = q * l->num_sc + residue;
      if (id >= spec->vocabulary_size) break;
      if (!sh->rows) {
        init_encoded_row(codec, spec, seed, id, sh->codes[0] + (size_t)(tl->row_offset_in_shard + q) * codec->row_bytes, sh);
        continue;
      }
      scps__init_row(&spec->initializer, seed, id, spec->embedding_dim,
                    sh->rows + (tl->row_offset_in_shard + q) * st->dim);
      fold_values(sh->rows + (tl->row_offset_in_shard + q) * st->dim, (size_t)spec->embedding_dim,
                  &sh->mag_bits[0], &sh->low_bits[0]);
    }
  }
  size_t n = (size_t)st->rows_per_sc * (size_t)st->dim;
  for (int k = 0; k < scps__optimizer_num_slots(st->optimizer.type); k++) {
    float v = (float)scps__optimizer_slot_init(&st->optimizer, k);
    if (!sh->slots[k]) {
      /* Every row the same: one encoded (to nearest), copied; v as decoded. */
      const scps_storage_codec *c = codec_of(e, stack, 1 + k);
      float row[SCPS_DIM_MAX];
      for (size_t i = 0; i < c->dim; i++) row[i] = v;
      (void)scps__storage_encode_row(c, row, sh->codes[1 + k], NULL, NULL); /* v is finite */
      for (int64_t r = 1; r < st->rows_per_sc; r++) memcpy(sh->codes[1 + k] + (size_t)r * c->row_bytes, sh->codes[1 + k], c->row_bytes);
      scps__storage_decode_row(c, sh->codes[1 + k], row);
      v = row[0];
    } else if (v != 0.0f) {
      for (size_t i = 0; i < n; i++) sh->slots[k][i] = v;
    }
    sh->mag_bits[1 + k] = sh->low_bits[1 + k] = 0;
    fold_values(&v, 1, &sh->mag_bits[1 + k], &sh->low_bits[1 + k]);
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    sh->low_bits[1 + k] = (int32_t)u; /* every value is v */
  }
  /* Rows start at 0 (those init writes are folded in above). */
  sh->bounds_valid = true;
}

/* Initialization writes every row and slot of the process's share, gigabytes
 * for large tables, so SparseCores are initialized in parallel: worker w of n
 * takes SparseCores w, w + n, ... and is the only writer of their shards.
 * Values depend only on (table, id, column), never on which thread wrote them. */
#define INIT_MAX_THREADS 64

typedef struct init_worker {
  scps_engine *e;
  int32_t first, step;
  pthread_t thread;
  bool started;
} init_worker;

static void init_scs(scps_engine *e, int32_t first, int32_t step) {
  const scps_layout *l = e->layout;
  for (int32_t s = first; s < e->sc_per_process; s += step)
    for (int stack = 0; stack < l->n_stacks; stack++)
      init_shard(e, stack, e->process_index * e->sc_per_process + s, shard_of(e, stack, s));
}

static void *init_main(void *arg) {
  init_worker *w = arg;
  init_scs(w->e, w->first, w->step);
  return NULL;
}

static void init_all(scps_engine *e) {
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  int32_t n = e->sc_per_process;
  if (cpus >= 1 && cpus < n) n = (int32_t)cpus;
  if (n > INIT_MAX_THREADS) n = INIT_MAX_THREADS;
  init_worker w[INIT_MAX_THREADS];
  for (int32_t i = 1; i < n; i++) {
    w[i] = (init_worker){.e = e, .first = i, .step = n};
    w[i].started = pthread_create(&w[i].thread, NULL, init_main, &w[i]) == 0;
  }
  init_scs(e, 0, n);
  /* A worker that could not start has its SparseCores done here instead. */
  for (int32_t i = 1; i < n; i++) {
    if (w[i].started) pthread_join(w[i].thread, NULL);
    else init_scs(e, i, n);
  }
}

/* Every shard's padding runs: a table's rows on a SparseCore past the
 * last that holds an id (scps__layout_rows_held). */
static int find_padding(scps_engine *e, scps_error *err) {
  const scps_layout *l = e->layout;
  for (int stack = 0; stack < l->n_stacks; stack++) {
    const scps_stack_layout *st = &l->stacks[stack];
    for (int32_t ls = 0; ls < e->sc_per_process; ls++) {
      shard *sh = shard_of(e, stack, ls);
      sh->pads = calloc((size_t)st->n_tables, sizeof *sh->pads);
      if (!sh->pads) return scps_error_set(err, SCPS_ENOMEM, "engine: out of memory");
      for (int i = 0; i < st->n_tables; i++) {
        const int t = st->tables[i];
        const scps_table_layout *tl = &l->tables[t];
        const int64_t held = scps__layout_rows_held(l, t, e->process_index * e->sc_per_process + ls);
        const int64_t rows = tl->padded_vocab / l->num_sc;
        if (held < rows)
          sh->pads[sh->n_pads++] = (pad_run){(uint32_t)(tl->row_offset_in_shard + held),
                                             (uint32_t)(tl->row_offset_in_shard + rows), t};
      }
    }
  }
  return 0;
}

int scps__engine_create(const scps_layout *l, int32_t process_index, scps_engine **out,
                       scps_error *err) {
  *out = NULL;
  if (process_index < 0 || process_index >= l->topology.num_processes)
    return scps_error_set(err, SCPS_EINVAL, "process index %d not in [0, %d)", process_index,
                          l->topology.num_processes);
  int32_t S = l->topology.sc_per_process;
  int rc = check_fits(l, process_index * S, err);
  if (rc) return rc;
  scps_engine *e = calloc(1, sizeof *e);
  if (!e) return scps_error_set(err, SCPS_ENOMEM, "engine: out of memory");
  e->layout = l;
  e->process_index = process_index;
  e->sc_per_process = S;
  e->hbm = calloc((size_t)S, sizeof *e->hbm);
  e->shards = calloc((size_t)S * (size_t)(l->n_stacks ? l->n_stacks : 1), sizeof *e->shards);
  e->codecs = calloc((size_t)(l->n_stacks ? l->n_stacks : 1) * SCPS__ENGINE_ARRAYS, sizeof *e->codecs);
  e->seeds = calloc((size_t)(l->n_stacks ? l->n_stacks : 1), sizeof *e->seeds);
  if (!e->hbm || !e->shards || !e->codecs || !e->seeds) {
    scps__engine_destroy(e);
    return scps_error_set(err, SCPS_ENOMEM, "engine: out of memory");
  }
  for (int32_t s = 0; s < S && !rc; s++) rc = scps__hbm_init(&e->hbm[s], process_index * S + s, l->topology.sc_memory_bytes, err);
  for (int stack = 0; stack < l->n_stacks && !rc; stack++) {
    const scps_stack_layout *st = &l->stacks[stack];
    const int arrays = 1 + scps__optimizer_num_slots(st->optimizer.type);
    for (int a = 0; a < arrays; a++)
      scps__storage_codec_init(&e->codecs[(size_t)stack * SCPS__ENGINE_ARRAYS + (size_t)a],
                              a ? &st->slot_storage[a - 1] : &st->storage, (size_t)st->dim);
    e->seeds[stack] = scps__hash64(st->name, strlen(st->name), 0);
    char what[SCPS_STACK_NAME_MAX + 32];
    for (int32_t s = 0; s < S && !rc; s++) {
      shard *sh = shard_of(e, stack, s);
      for (int a = 0; a < arrays && !rc; a++) {
        const scps_storage_codec *c = codec_of(e, stack, a);
        if (a) snprintf(what, sizeof what, "stack '%s' slot %s", st->name, scps__optimizer_slot_name(st->optimizer.type, a - 1));
        else snprintf(what, sizeof what, "stack '%s' rows", st->name);
        rc = scps__hbm_alloc(&e->hbm[s], st->rows_per_sc * (int64_t)c->row_bytes, what, (void **)&sh->codes[a], err);
        sh->row_bytes[a] = c->row_bytes;
        float *f = rc || c->f.kind != SCPS_STORAGE_F32 ? NULL : (float *)(void *)sh->codes[a];
        if (a) sh->slots[a - 1] = f;
        else sh->rows = f;
      }
    }
  }
  if (!rc) rc = find_padding(e, err);
  if (rc) {
    scps__engine_destroy(e);
    return rc;
  }
  init_all(e);
  *out = e;
  return 0;
}

const scps_layout *scps__engine_layout(const scps_engine *e) { return e->layout; }
int32_t scps__engine_process_index(const scps_engine *e) { return e->process_index; }

const scps_hbm *scps__engine_hbm(const scps_engine *e, int32_t local_sc) { return &e->hbm[local_sc]; }

float *scps__engine_shard(scps_engine *e, int stack, int32_t local_sc) {
  return shard_of(e, stack, local_sc)->rows;
}

uint8_t *scps__engine_codes(scps_engine *e, int stack, int32_t local_sc, int array) {
  return shard_of(e, stack, local_sc)->codes[array];
}

const scps_storage_codec *scps__engine_codec(const scps_engine *e, int stack, int array) {
  return codec_of(e, stack, array);
}

void scps__engine_rounding(const scps_engine *e, int stack, int32_t local_sc, uint32_t row, int array,
                          const scps_step *step, scps_exmy_rounding *r) {
  const scps_stack_layout *st = &e->layout->stacks[stack];
  const uint64_t sc = (uint64_t)(e->process_index * e->sc_per_process + local_sc);
  r->stochastic = st->storage_rounding == SCPS_ROUNDING_STOCHASTIC;
  r->seed = e->seeds[stack] ^ ((uint64_t)step->step * UINT64_C(0xd1b54a32d192ed03)) ^ ((uint64_t)array << 56);
  r->position = (sc * (uint64_t)st->rows_per_sc + row) * (uint64_t)st->dim;
}

float *scps__engine_slot(scps_engine *e, int stack, int32_t local_sc, int slot) {
  return shard_of(e, stack, local_sc)->slots[slot];
}


/* How many partition entries ahead the kernels prefetch. Rows live in
 * gigabytes of shard memory and samples are scattered, so without it each
 * entry waits for a DRAM (and often a TLB) miss; entries are sorted by row,
 * so the rows ahead are known exactly. */
#define PREFETCH_AHEAD 16

static inline __attribute__((always_inline)) void prefetch_row(const float *p, size_t dim, int write) {
  for (size_t c = 0; c < dim; c += 16) {
    if (write) __builtin_prefetch(p + c, 1, 3);
    else __builtin_prefetch(p + c, 0, 3);
  }
}

/* Entries are taken LOOKUP_CHUNK at a time: those in the sample range are
 * listed first (branch-free), so the gather below prefetches only rows it
 * will read; a caller whose range is a slice of the samples would otherwise
 * pull in the other slices' rows too. */
#define LOOKUP_CHUNK 1024

/* The entries idx[0..m) of one partition added into their samples' rows of
 * out. */
static void gather_list(const float *rows, size_t dim, const scps_coo *coo, const uint32_t *idx, size_t m,
                        float *out) {
  for (size_t j = 0; j < m; j++) {
    if (j + PREFETCH_AHEAD < m) {
      const uint32_t a = idx[j + PREFETCH_AHEAD];
      prefetch_row(rows + (size_t)coo->rows[a] * dim, dim, 0);
      prefetch_row(out + (size_t)coo->samples[a] * dim, dim, 1);
    }
    const uint32_t i = idx[j];
    const float *restrict r = rows + (size_t)coo->rows[i] * dim;
    float *restrict o = out + (size_t)coo->samples[i] * dim;
    const float g = coo->gains ? coo->gains[i] : 1.0f;
    for (size_t c = 0; c < dim; c++) o[c] += g * r[c];
  }
}

/* gather_list for an encoded shard: each entry's row decoded first, once
 * for a run of entries that read the same row (a partition's entries come
 * sorted by row), then added as gather_list adds it. */
static void gather_list_encoded(const scps_storage_codec *codec, const uint8_t *codes, const scps_coo *coo,
                                const uint32_t *idx, size_t m, float *out) {
  const size_t dim = codec->dim;
  float r[SCPS_DIM_MAX] __attribute__((aligned(64)));
  uint32_t have = UINT32_MAX;
  for (size_t j = 0; j < m; j++) {
    if (j + PREFETCH_AHEAD < m) {
      const uint32_t a = idx[j + PREFETCH_AHEAD];
      for (size_t c = 0; c < codec->row_bytes; c += 64)
        __builtin_prefetch(codes + (size_t)coo->rows[a] * codec->row_bytes + c, 0, 3);
      prefetch_row(out + (size_t)coo->samples[a] * dim, dim, 1);
    }
    const uint32_t i = idx[j];
    if (coo->rows[i] != have) {
      have = coo->rows[i];
      scps__storage_decode_row(codec, codes + (size_t)have * codec->row_bytes, r);
    }
    float *restrict o = out + (size_t)coo->samples[i] * dim;
    const float g = coo->gains ? coo->gains[i] : 1.0f;
    for (size_t c = 0; c < dim; c++) o[c] += g * r[c];
  }
}

void scps__engine_lookup(scps_engine *e, int stack, int32_t local_sc, const scps_coo *coo,
                        uint32_t first, uint32_t end, float *out) {
  const shard *sh = shard_of(e, stack, local_sc);
  const float *rows = sh->rows;
  const size_t dim = (size_t)e->layout->stacks[stack].dim;
  const uint32_t span = end > first ? end - first : 0;
  uint32_t idx[LOOKUP_CHUNK];
  for (size_t base = 0; base < coo->n; base += LOOKUP_CHUNK) {
    const size_t lim = coo->n - base < LOOKUP_CHUNK ? coo->n - base : LOOKUP_CHUNK;
    const uint32_t *samples = coo->samples + base;
    size_t m = 0;
    for (size_t i = 0; i < lim; i++) {
      idx[m] = (uint32_t)(base + i);
      m += samples[i] - first < span;
    }
    if (rows) gather_list(rows, dim, coo, idx, m, out);
    else gather_list_encoded(codec_of(e, stack, 0), sh->codes[0], coo, idx, m, out);
  }
}

size_t scps__engine_gather_scratch(size_t entries, uint32_t first, uint32_t end) {
  return scps__pool_list_bytes(entries, first, end);
}

static scps_pool_list list_by_sample(scps_engine *e, int stack, const scps_coo *coo, int32_t n_sc, uint32_t first,
                                     uint32_t end, void *scratch) {
  const uint8_t *tables[SCPS_SC_PER_PROCESS_MAX];
  for (int32_t k = 0; k < n_sc; k++) tables[k] = shard_of(e, stack, k)->codes[0];
  return scps__pool_list_make_bytes(tables, codec_of(e, stack, 0)->row_bytes, coo, n_sc, first, end, scratch);
}

/* scps__pool_sample over encoded rows: each entry's row decoded, then
 * added in the same order with the same operations, so a row stored in
 * float32 with the decoded values would pool to the same sums. */
static void pool_sample_encoded(const scps_pool_list *l, uint32_t s, const scps_storage_codec *codec,
                                float *restrict o) {
  const size_t dim = codec->dim;
  const uint32_t b = s - l->first, a = l->start[b], z = l->start[b + 1];
  float r[SCPS_DIM_MAX] __attribute__((aligned(64)));
  if (a == z) memset(o, 0, dim * sizeof(float));
  for (uint32_t j = a; j < z; j++) {
    if (j + SCPS_POOL_PREFETCH < z)
      for (size_t c = 0; c < codec->row_bytes; c += 64)
        __builtin_prefetch((const uint8_t *)l->row[j + SCPS_POOL_PREFETCH] + c, 0, 3);
    scps__storage_decode_row(codec, l->row[j], r);
    const float g = l->gain[j];
    if (j == a)
      for (size_t c = 0; c < dim; c++) o[c] = 0.0f + g * r[c];
    else
      for (size_t c = 0; c < dim; c++) o[c] += g * r[c];
  }
}

/* One sample of a gather, from float32 or encoded rows. */
static inline void gather_sample(const scps_engine *e, int stack, const scps_pool_list *l, uint32_t smp, float *o) {
  if (encoded(e, stack)) pool_sample_encoded(l, smp, codec_of(e, stack, 0), o);
  else scps__pool_sample(l, smp, codec_of(e, stack, 0)->dim, o);
}

/* Sample by sample (scps_pool): each row of out is written once and summed
 * while it sits in L1, where adding partition by partition read and wrote
 * every entry's row of out, megabytes scattered over the last-level cache. */
void scps__engine_gather(scps_engine *e, int stack, const scps_coo *coo, int32_t n_sc, uint32_t first,
                        uint32_t end, float *out, void *scratch) {
  const size_t dim = (size_t)e->layout->stacks[stack].dim;
  const scps_pool_list l = list_by_sample(e, stack, coo, n_sc, first, end, scratch);
  for (uint32_t smp = first; smp < l.end; smp++) gather_sample(e, stack, &l, smp, out + (size_t)smp * dim);
}

/* Each sample summed in float32 on the stack and rounded from there: the
 * float32 activations never reach memory. */
void scps__engine_gather_bf16(scps_engine *e, int stack, const scps_coo *coo, int32_t n_sc, uint32_t first,
                             uint32_t end, uint8_t *out, void *scratch) {
  const size_t dim = (size_t)e->layout->stacks[stack].dim;
  const scps_pool_list l = list_by_sample(e, stack, coo, n_sc, first, end, scratch);
  float tmp[SCPS_DIM_MAX];
  for (uint32_t smp = first; smp < l.end; smp++) {
    gather_sample(e, stack, &l, smp, tmp);
    scps__bf16_encode(tmp, out + (size_t)smp * dim * 2, dim);
  }
}

/* Runs of samples pooled into a buffer on the stack, each run handed to
 * the sink while it is still in L1. */
_Static_assert(SCPS_DIM_MAX <= SCPS_GATHER_SINK_FLOATS, "a run holds at least one sample");
void scps__engine_gather_each(scps_engine *e, int stack, const scps_coo *coo, int32_t n_sc, uint32_t first,
                             uint32_t end, scps_gather_sink sink, void *ctx, void *scratch) {
  const size_t dim = (size_t)e->layout->stacks[stack].dim;
  const scps_pool_list l = list_by_sample(e, stack, coo, n_sc, first, end, scratch);
  float buf[SCPS_GATHER_SINK_FLOATS];
  const uint32_t per = (uint32_t)(SCPS_GATHER_SINK_FLOATS / dim);
  for (uint32_t smp = first; smp < l.end;) {
    const uint32_t n = l.end - smp < per ? l.end - smp : per;
    for (uint32_t j = 0; j < n; j++) gather_sample(e, stack, &l, smp + j, buf + (size_t)j * dim);
    sink(ctx, smp, n, buf);
    smp += n;
  }
}

/* Each distinct row of the partition, in order, to out: as float32, or
 * rounded to bfloat16. */
static void copy_rows(scps_engine *e, int stack, int32_t local_sc, const scps_coo *coo, uint8_t *out, bool bf16) {
  const size_t dim = (size_t)e->layout->stacks[stack].dim, bytes = dim * (bf16 ? 2 : sizeof(float));
  const shard *sh = shard_of(e, stack, local_sc);
  const scps_storage_codec *codec = codec_of(e, stack, 0);
  float tmp[SCPS_DIM_MAX] __attribute__((aligned(64)));
  for (size_t i = 0; i < coo->n; i++) {
    if (i > 0 && coo->rows[i] == coo->rows[i - 1]) continue;
    if (i + PREFETCH_AHEAD < coo->n)
      for (size_t c = 0; c < codec->row_bytes; c += 64)
        __builtin_prefetch(sh->codes[0] + (size_t)coo->rows[i + PREFETCH_AHEAD] * codec->row_bytes + c, 0, 3);
    const float *r = sh->rows ? sh->rows + (size_t)coo->rows[i] * dim : tmp;
    if (!sh->rows) scps__storage_decode_row(codec, sh->codes[0] + (size_t)coo->rows[i] * codec->row_bytes, tmp);
    if (bf16) scps__bf16_encode(r, out, dim);
    else memcpy(out, r, bytes);
    out += bytes;
  }
}

void scps__engine_copy_rows(scps_engine *e, int stack, int32_t local_sc, const scps_coo *coo, float *out) {
  copy_rows(e, stack, local_sc, coo, (uint8_t *)out, false);
}

void scps__engine_copy_rows_bf16(scps_engine *e, int stack, int32_t local_sc, const scps_coo *coo, uint8_t *out) {
  copy_rows(e, stack, local_sc, coo, out, true);
}

/* What an update of one stack on one SparseCore needs per row: its shard,
 * dim, the optimizer's step and the clipping of its first table (a stack's
 * tables share both). */
typedef struct updater {
  shard *sh;
  size_t dim;
  /* For an encoded stack: where rows are read and written, and the
   * rounding's inputs (scps__engine_rounding). */
  const scps_engine *e;
  int stack;
  int32_t local_sc;
  const scps_step *step;
  const scps_table_spec *first;
  scps_opt_step ost;
  /* The magnitudes written so far, as shard.mag_bits. */
  uint32_t mag[1 + SCPS_MAX_SLOTS];
  bool wrote;
} updater;

static void updater_init(scps_engine *e, int stack, int32_t local_sc, const scps_step *step, updater *u) {
  const scps_stack_layout *st = &e->layout->stacks[stack];
  u->sh = shard_of(e, stack, local_sc);
  u->dim = (size_t)st->dim;
  u->e = e;
  u->stack = stack;
  u->local_sc = local_sc;
  u->step = step;
  u->first = &e->layout->table_specs[st->tables[0]];
  scps__optimizer_prepare(&st->optimizer, step, &u->ost);
  for (int k = 0; k < 1 + SCPS_MAX_SLOTS; k++) u->mag[k] = 0;
  u->wrote = false;
}

/* The updater's record of what it wrote, into its shard's: the magnitudes
 * folded, the lower bounds moved by the optimizer's rule (the rows' own is
 * not needed: none is kept). */
static void updater_finish(const updater *u) {
  shard *sh = u->sh;
  if (!u->wrote) return;
  sh->low_bits[0] = -1;
  for (int k = 0; k < 1 + SCPS_MAX_SLOTS; k++) {
    sh->mag_bits[k] = u->mag[k] > sh->mag_bits[k] ? u->mag[k] : sh->mag_bits[k];
    if (k == 0 || !sh->codes[k] || sh->low_bits[k] < 0) continue;
    if (!sh->slots[k - 1]) {
      /* Rounding into a format need not keep the optimizer's floor. */
      sh->low_bits[k] = -1;
      continue;
    }
    float low;
    const uint32_t bits = (uint32_t)sh->low_bits[k];
    memcpy(&low, &bits, sizeof low);
    const double floor = scps__optimizer_slot_floor(&u->ost, k - 1, (double)low);
    float f = (float)floor;
    if ((double)f > floor) f = nextafterf(f, 0.0f);
    uint32_t fb;
    memcpy(&fb, &f, sizeof fb);
    sh->low_bits[k] = floor < 0 ? -1 : (int32_t)fb < sh->low_bits[k] ? (int32_t)fb : sh->low_bits[k];
  }
}

/* The stack's clipping of a row. */
static inline void clip_row(const updater *u, float *w) {
  if (u->first->clip) {
    const float lo = u->first->clip_min, hi = u->first->clip_max;
    for (size_t c = 0; c < u->dim; c++) w[c] = w[c] < lo ? lo : (w[c] > hi ? hi : w[c]);
  }
}

/* Row `row` of every array of a shard as floats: a pointer into a float32
 * array, the row decoded into buf[a] for an encoded one, NULL for a slot
 * the optimizer does not have. */
static inline void row_arrays(const scps_engine *e, int stack, const shard *sh, uint32_t row, size_t dim,
                              float (*buf)[SCPS_DIM_MAX], float *v[SCPS__ENGINE_ARRAYS]) {
  for (int a = 0; a < SCPS__ENGINE_ARRAYS; a++) {
    float *f = a ? sh->slots[a - 1] : sh->rows;
    v[a] = f ? f + (size_t)row * dim : NULL;
    if (f || !sh->codes[a]) continue;
    v[a] = buf[a];
    scps__storage_decode_row(codec_of(e, stack, a), sh->codes[a] + (size_t)row * sh->row_bytes[a], buf[a]);
  }
}

/* An encoded array's row after the update, w, rounded into its storage,
 * and w replaced by what it now holds. */
static void store_row(const updater *u, int array, uint32_t row, float *w) {
  const scps_storage_codec *codec = codec_of(u->e, u->stack, array);
  uint8_t *dst = u->sh->codes[array] + (size_t)row * codec->row_bytes;
  scps_exmy_rounding r;
  scps__engine_rounding(u->e, u->stack, u->local_sc, row, array, u->step, &r);
  (void)scps__storage_encode_row(codec, w, dst, &r, NULL); /* updates are checked finite */
  scps__storage_decode_row(codec, dst, w);
}

/* The optimizer's step on one row with its summed gradient g, then the
 * stack's clipping; what it wrote goes into the updater's record. Encoded
 * rows and slots are decoded, updated in float32 and rounded back. */
static inline void update_row(updater *u, uint32_t row, const float *g) {
  const size_t dim = u->dim;
  float decoded[SCPS__ENGINE_ARRAYS][SCPS_DIM_MAX] __attribute__((aligned(64)));
  float *v[SCPS__ENGINE_ARRAYS];
  row_arrays(u->e, u->stack, u->sh, row, dim, decoded, v);
  scps__optimizer_apply(&u->ost, (int32_t)dim, v[0], v[1], v[2], g);
  clip_row(u, v[0]);
  for (int a = 0; a < SCPS__ENGINE_ARRAYS; a++) {
    if (!v[a]) continue;
    if (v[a] == decoded[a]) store_row(u, a, row, v[a]);
    fold_magnitudes(v[a], dim, &u->mag[a]);
  }
  u->wrote = true;
}

/* always_inline: GCC finds that a function which only prefetches has no
 * effect and, unless it is inlined first, deletes the calls (it did here:
 * BENCHMARKS.md's diary has what that cost the update). */
static inline __attribute__((always_inline)) void prefetch_state(const shard *sh, size_t row, size_t dim) {
  (void)dim;
  for (int a = 0; a < SCPS__ENGINE_ARRAYS; a++)
    if (sh->codes[a])
      for (size_t c = 0; c < sh->row_bytes[a]; c += 64) __builtin_prefetch(sh->codes[a] + row * sh->row_bytes[a] + c, 1, 3);
}

/* Sums into g (dim floats, zeroed first) gain x gradient over coo's entries
 * from *i on that share entry *i's row, entry by entry in the partition's
 * order, and moves *i past them. Gradients are float32 or (bf16) bfloat16;
 * sh, if not NULL, gets the state of the rows ahead prefetched for the
 * update. Callers pass constants for bf16 and sh, so each gets its own loop. */
static inline __attribute__((always_inline)) uint32_t sum_row(const scps_coo *coo, size_t *i, const void *grads,
                                                              bool bf16, size_t dim, const shard *sh, float *g) {
  const size_t width = bf16 ? 2 : sizeof(float);
  const uint8_t *gb = grads;
  const uint32_t row = coo->rows[*i];
  memset(g, 0, dim * sizeof(float));
  size_t j = *i;
  for (; j < coo->n && coo->rows[j] == row; j++) {
    if (j + PREFETCH_AHEAD < coo->n) {
      const uint8_t *ahead = gb + (size_t)coo->samples[j + PREFETCH_AHEAD] * dim * width;
      for (size_t c = 0; c < dim * width; c += 64) __builtin_prefetch(ahead + c, 0, 3);
      if (sh) prefetch_state(sh, coo->rows[j + PREFETCH_AHEAD], dim);
    }
    const float gain = coo->gains ? coo->gains[j] : 1.0f;
    const size_t at = (size_t)coo->samples[j] * dim;
    if (bf16) scps__coo_add_scaled_bf16(g, (const uint16_t *)grads + at, gain, dim);
    else scps__coo_add_scaled(g, (const float *)grads + at, gain, dim);
  }
  *i = j;
  return row;
}

/* The update by sample, for gradients in float32 or (bf16) bfloat16: the
 * two callers pass a constant, so each gets a loop of its own. */
static inline __attribute__((always_inline)) void update_by_sample(scps_engine *e, int stack, int32_t local_sc,
                                                                   const scps_coo *coo, const void *grads, bool bf16,
                                                                   const scps_step *step) {
  updater u;
  updater_init(e, stack, local_sc, step, &u);
  float g[SCPS_DIM_MAX] __attribute__((aligned(64))); /* a stack's dim: the largest table's, rounded to 8 */
  size_t i = 0;
  while (i < coo->n) {
    const uint32_t row = sum_row(coo, &i, grads, bf16, u.dim, u.sh, g);
    update_row(&u, row, g);
  }
  updater_finish(&u);
}

/* scps__engine_sums_finite's loop, float32 or (bf16) bfloat16. */
static inline __attribute__((always_inline)) bool sums_finite(const scps_engine *e, int stack, const scps_coo *coo,
                                                              const void *grads, bool bf16, uint32_t *bad_row) {
  const size_t dim = (size_t)e->layout->stacks[stack].dim;
  float g[SCPS_DIM_MAX] __attribute__((aligned(64)));
  size_t i = 0;
  while (i < coo->n) {
    const uint32_t row = sum_row(coo, &i, grads, bf16, dim, NULL, g);
    uint32_t nonfinite = 0;
    for (size_t c = 0; c < dim; c++) {
      uint32_t u;
      memcpy(&u, &g[c], sizeof u);
      nonfinite |= (uint32_t)((u & 0x7f800000u) == 0x7f800000u);
    }
    if (nonfinite) {
      *bad_row = row;
      return false;
    }
  }
  return true;
}

bool scps__engine_sums_finite(const scps_engine *e, int stack, const scps_coo *coo, const void *grads, bool bf16,
                             uint32_t *bad_row) {
  return bf16 ? sums_finite(e, stack, coo, grads, true, bad_row) : sums_finite(e, stack, coo, grads, false, bad_row);
}

void scps__engine_update(scps_engine *e, int stack, int32_t local_sc, const scps_coo *coo,
                        const float *grads, const scps_step *step) {
  update_by_sample(e, stack, local_sc, coo, grads, false, step);
}

void scps__engine_update_bf16(scps_engine *e, int stack, int32_t local_sc, const scps_coo *coo,
                             const uint16_t *grads, const scps_step *step) {
  update_by_sample(e, stack, local_sc, coo, grads, true, step);
}


void scps__engine_update_rows(scps_engine *e, int stack, int32_t local_sc, const uint32_t *rows, size_t n,
                             const float *grads, const scps_step *step) {
  updater u;
  updater_init(e, stack, local_sc, step, &u);
  for (size_t i = 0; i < n; i++) {
    if (i + PREFETCH_AHEAD < n) prefetch_state(u.sh, rows[i + PREFETCH_AHEAD], u.dim);
    update_row(&u, rows[i], grads + i * u.dim);
  }
  updater_finish(&u);
}

int scps__engine_read_row(const scps_engine *e, int table, int64_t id, float *row, float *slots,
                         scps_error *err) {
  const scps_layout *l = e->layout;
  if (table < 0 || table >= l->n_tables)
    return scps_error_set(err, SCPS_ENOENT, "table index %d not in [0, %d)", table, l->n_tables);
  const scps_table_spec *spec = &l->table_specs[table];
  if (id < 0 || id >= spec->vocabulary_size)
    return scps_error_set(err, SCPS_ERANGE, "table '%s': id %lld not in [0, %lld)", spec->name,
                          (long long)id, (long long)spec->vocabulary_size);
  int32_t sc = scps__layout_sc_of(l, table, id);
  int32_t p = scps__layout_process_of_sc(l, sc);
  if (p != e->process_index)
    return scps_error_set(err, SCPS_ERANGE, "table '%s': id %lld lives on process %d, not %d",
                          spec->name, (long long)id, p, e->process_index);
  const int stack = l->tables[table].stack;
  const size_t dim = (size_t)l->stacks[stack].dim;
  const shard *sh = shard_of(e, stack, sc - p * e->sc_per_process);
  float decoded[SCPS__ENGINE_ARRAYS][SCPS_DIM_MAX];
  float *v[SCPS__ENGINE_ARRAYS];
  row_arrays(e, stack, sh, (uint32_t)scps__layout_local_row(l, table, id), dim, decoded, v);
  memcpy(row, v[0], sizeof(float) * (size_t)spec->embedding_dim);
  if (slots)
    for (int k = 0; k < scps__optimizer_num_slots(spec->optimizer.type); k++)
      memcpy(slots + (size_t)k * (size_t)spec->embedding_dim, v[1 + k], sizeof(float) * (size_t)spec->embedding_dim);
  return 0;
}

void scps__engine_values_written(scps_engine *e) {
  for (size_t i = 0; i < (size_t)e->sc_per_process * (size_t)e->layout->n_stacks; i++) e->shards[i].bounds_valid = false;
}

void scps__engine_value_bounds(scps_engine *e, int stack, int32_t local_sc, scps_value_bounds *out) {
  shard *sh = shard_of(e, stack, local_sc);
  const scps_stack_layout *st = &e->layout->stacks[stack];
  const int slots = scps__optimizer_num_slots(st->optimizer.type);
  if (!sh->bounds_valid) {
    const size_t n = (size_t)st->rows_per_sc * (size_t)st->dim;
    for (int k = 0; k <= slots; k++) {
      sh->mag_bits[k] = 0;
      sh->low_bits[k] = INT32_MAX;
      if (!(k ? sh->slots[k - 1] : sh->rows)) {
        float decoded[SCPS_DIM_MAX];
        for (int64_t r = 0; r < st->rows_per_sc; r++) {
          scps__storage_decode_row(codec_of(e, stack, k), sh->codes[k] + (size_t)r * sh->row_bytes[k], decoded);
          fold_values(decoded, (size_t)st->dim, &sh->mag_bits[k], &sh->low_bits[k]);
        }
        continue;
      }
      fold_values(k ? sh->slots[k - 1] : sh->rows, n, &sh->mag_bits[k], &sh->low_bits[k]);
    }
    sh->bounds_valid = true;
  }
  for (int k = 0; k <= slots; k++) {
    float mag, low;
    const uint32_t low_bits = (uint32_t)sh->low_bits[k];
    memcpy(&mag, &sh->mag_bits[k], sizeof mag);
    memcpy(&low, &low_bits, sizeof low);
    out[k].mag = sh->mag_bits[k] >= 0x7f800000u ? INFINITY : (double)mag;
    out[k].lo = sh->low_bits[k] >= 0 && sh->low_bits[k] < 0x7f800000 ? (double)low : -1.0;
  }
}

/* Whether the n values are finite; if not, the first that is not goes to
 * *at. */
static bool all_finite(const float *v, size_t n, size_t *at) {
  uint32_t bad = 0;
  for (size_t c = 0; c < n; c++) {
    uint32_t u;
    memcpy(&u, &v[c], sizeof u);
    bad |= (uint32_t)((u & 0x7f800000u) == 0x7f800000u);
  }
  if (!bad) return true;
  for (*at = 0; isfinite(v[*at]); ++*at) {
  }
  return false;
}

/* One row's update with gradient g computed on copies of its values, as
 * update_row computes it: whether every value before and after is finite;
 * if not, the first that is not goes to *f. */
static bool row_stays_finite(const updater *u, uint32_t row, const float *g, scps_update_fault *f) {
  const size_t dim = u->dim;
  float v[1 + SCPS_MAX_SLOTS][SCPS_DIM_MAX] __attribute__((aligned(64)));
  float before[SCPS__ENGINE_ARRAYS][SCPS_DIM_MAX] __attribute__((aligned(64)));
  float *src[SCPS__ENGINE_ARRAYS];
  row_arrays(u->e, u->stack, u->sh, row, dim, before, src);
  int arrays = 0;
  for (int k = 0; k < 1 + SCPS_MAX_SLOTS && src[k]; k++, arrays++) memcpy(v[k], src[k], dim * sizeof(float));
  size_t at;
  for (int k = 0; k < arrays; k++)
    if (!all_finite(v[k], dim, &at)) {
      *f = (scps_update_fault){row, k, (int32_t)at, v[k][at], v[k][at], true};
      return false;
    }
  scps__optimizer_apply(&u->ost, (int32_t)dim, v[0], arrays > 1 ? v[1] : NULL, arrays > 2 ? v[2] : NULL, g);
  clip_row(u, v[0]);
  for (int k = 0; k < arrays; k++)
    if (!all_finite(v[k], dim, &at)) {
      *f = (scps_update_fault){row, k, (int32_t)at, src[k][at], v[k][at], false};
      return false;
    }
  return true;
}

bool scps__engine_update_finite(scps_engine *e, int stack, int32_t local_sc, const scps_coo *coo, const void *grads,
                               bool bf16, bool by_row, const scps_step *step, scps_update_fault *fault) {
  updater u;
  updater_init(e, stack, local_sc, step, &u);
  if (by_row) {
    for (size_t i = 0; i < coo->n; i++)
      if (!row_stays_finite(&u, coo->rows[i], (const float *)grads + i * u.dim, fault)) return false;
    return true;
  }
  float g[SCPS_DIM_MAX] __attribute__((aligned(64)));
  size_t i = 0;
  while (i < coo->n) {
    const uint32_t row = sum_row(coo, &i, grads, bf16, u.dim, NULL, g);
    if (!row_stays_finite(&u, row, g, fault)) return false;
  }
  return true;
}
