#include "scps_layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scps_hbm.h"
#include "scps_sha256.h"

#define STACK_NAME_KEEP 50

static int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

void scps__layout_destroy(scps_layout *l) {
  if (!l) return;
  for (int s = 0; s < l->n_stacks; s++) {
    free(l->stacks[s].tables);
    free(l->stacks[s].features);
  }
  free(l->stacks);
  free(l->tables);
  free(l->table_specs);
  free(l->features);
  free(l->feature_specs);
  free(l);
}

int scps__layout_find_stack(const scps_layout *l, const char *name) {
  for (int s = 0; s < l->n_stacks; s++)
    if (!strcmp(l->stacks[s].name, name)) return s;
  return -1;
}

/* A storage format name as validated (scps__specs_validate). */
static scps_storage_format storage_of(const char *name) {
  scps_storage_format f;
  if (scps__storage_parse(name, &f, NULL)) f.kind = SCPS_STORAGE_F32;
  return f;
}

/* Same formats of rows and slots and, where one rounds, the same rounding. */
static bool same_storage(const scps_table_spec *x, const scps_table_spec *y) {
  bool rounds = false;
  for (int a = 0; a <= SCPS_MAX_SLOTS; a++) {
    const scps_storage_format fx = storage_of(a ? x->slot_formats[a - 1] : x->storage_format);
    const scps_storage_format fy = storage_of(a ? y->slot_formats[a - 1] : y->storage_format);
    if (!scps__storage_equal(&fx, &fy)) return false;
    rounds |= fx.kind != SCPS_STORAGE_F32;
  }
  return !rounds || x->storage_rounding == y->storage_rounding;
}

/* Two tables may share an automatic stack when the device could run them as
 * one table: same padded width, optimizer, combiner, clipping and storage. */
static bool same_group(const scps_layout *l, int a, int b) {
  const scps_table_spec *x = &l->table_specs[a], *y = &l->table_specs[b];
  return l->tables[a].padded_dim == l->tables[b].padded_dim && x->combiner == y->combiner && same_storage(x, y) &&
         scps__optimizer_spec_equal(&x->optimizer, &y->optimizer) && x->clip == y->clip &&
         (!x->clip || (x->clip_min == y->clip_min && x->clip_max == y->clip_max));
}

/* Orders idx by the name found at base + idx * stride; stacking follows name
 * order as the reference does. Spec counts are small, so insertion sort. */
static void sort_by_name(int *idx, int n, const char *base, size_t stride) {
  for (int i = 1; i < n; i++) {
    int v = idx[i], j = i;
    while (j > 0 && strcmp(base + (size_t)idx[j - 1] * stride, base + (size_t)v * stride) > 0) {
      idx[j] = idx[j - 1];
      j--;
    }
    idx[j] = v;
  }
}

/* Stack name as the reference makes it: table names joined with '_', cut to
 * 50 characters plus "..." and a 12-hex SHA-256 prefix of the full name. */
static void make_stack_name(const scps_layout *l, const int *tables, int n, char *out) {
  size_t len = 0;
  for (int i = 0; i < n; i++) len += strlen(l->table_specs[tables[i]].name) + 1;
  char *full = malloc(len + 1);
  if (!full) {
    snprintf(out, SCPS_STACK_NAME_MAX, "%s", l->table_specs[tables[0]].name);
    return;
  }
  full[0] = '\0';
  for (int i = 0; i < n; i++) {
    if (i) strcat(full, "_");
    strcat(full, l->table_specs[tables[i]].name);
  }
  if (strlen(full) <= STACK_NAME_KEEP) {
    snprintf(out, SCPS_STACK_NAME_MAX, "%s", full);
  } else {
    uint8_t digest[SCPS_SHA256_DIGEST_LEN];
    char hex[13];
    scps__sha256(full, strlen(full), digest);
    scps__sha256_hex(digest, 12, hex);
    snprintf(out, SCPS_STACK_NAME_MAX, "%.*s...%s", STACK_NAME_KEEP, full, hex);
  }
  free(full);
}

static int add_stack(scps_layout *l, const int *tables, int n, const char *explicit_name,
                     scps_error *err) {
  scps_stack_layout *st = &l->stacks[l->n_stacks];
  memset(st, 0, sizeof *st);
  st->tables = malloc(sizeof(int) * (size_t)n);
  if (!st->tables) return scps_error_set(err, SCPS_ENOMEM, "layout: out of memory");
  memcpy(st->tables, tables, sizeof(int) * (size_t)n);
  st->n_tables = n;
  l->n_stacks++;
  if (explicit_name)
    snprintf(st->name, sizeof st->name, "%s", explicit_name);
  else
    make_stack_name(l, tables, n, st->name);
  const scps_table_spec *first = &l->table_specs[tables[0]];
  st->optimizer = first->optimizer;
  st->combiner = first->combiner;
  st->storage = storage_of(first->storage_format);
  for (int k = 0; k < SCPS_MAX_SLOTS; k++) st->slot_storage[k] = storage_of(first->slot_formats[k]);
  st->storage_rounding = first->storage_rounding;
  int64_t max_ids = 0, max_unique = 0;
  int32_t rotation = 0;
  int32_t step = l->rotation_step;
  for (int i = 0; i < n; i++) {
    scps_table_layout *t = &l->tables[tables[i]];
    const scps_table_spec *spec = &l->table_specs[tables[i]];
    if (t->padded_dim > st->dim) st->dim = t->padded_dim;
    t->stack = l->n_stacks - 1;
    t->row_offset_in_shard = st->vocab / l->num_sc;
    t->shard_rotation = rotation;
    rotation = (rotation + step) % l->num_sc;
    st->vocab += t->padded_vocab;
    max_ids += spec->max_ids_per_partition;
    max_unique += spec->max_unique_ids_per_partition;
  }
  /* The reference replaces per-table limits of multi-table stacks by a flat
   * default (keras-rs #166); the sum keeps every table's budget. */
  st->max_ids_per_partition = max_ids > INT32_MAX ? INT32_MAX : (int32_t)max_ids;
  st->max_unique_ids_per_partition = max_unique > INT32_MAX ? INT32_MAX : (int32_t)max_unique;
  st->rows_per_sc = st->vocab / l->num_sc;
  if (st->rows_per_sc > UINT32_MAX)
    return scps_error_set(err, SCPS_EINVAL,
                          "stack '%s': %lld rows per SparseCore exceed the 32-bit row index; "
                          "use more SparseCores or smaller tables",
                          st->name, (long long)st->rows_per_sc);
  return 0;
}

static int stack_explicit(scps_layout *l, int *order, scps_error *err) {
  int *members = malloc(sizeof(int) * (size_t)l->n_tables);
  bool *done = calloc((size_t)l->n_tables, sizeof(bool));
  int rc = 0;
  if (!members || !done) {
    rc = scps_error_set(err, SCPS_ENOMEM, "layout: out of memory");
    goto out;
  }
  for (int i = 0; i < l->n_tables && !rc; i++) {
    int a = order[i];
    const scps_table_spec *sa = &l->table_specs[a];
    if (!sa->stack[0] || done[a]) continue;
    int n = 0;
    for (int j = i; j < l->n_tables; j++) {
      int b = order[j];
      const scps_table_spec *sb = &l->table_specs[b];
      if (done[b] || strcmp(sb->stack, sa->stack)) continue;
      if (sb->combiner != sa->combiner || !scps__optimizer_spec_equal(&sb->optimizer, &sa->optimizer) ||
          sb->clip != sa->clip || (sa->clip && (sa->clip_min != sb->clip_min || sa->clip_max != sb->clip_max)) ||
          !same_storage(sa, sb)) {
        rc = scps_error_set(err, SCPS_EINVAL,
                            "stack '%s': table '%s' differs from table '%s' in optimizer, "
                            "combiner, clipping or storage (storage_format '%s' and '%s', storage_rounding, "
                            "slot_formats); a stack's tables must share them",
                            sa->stack, sb->name, sa->name, sb->storage_format[0] ? sb->storage_format : "float32",
                            sa->storage_format[0] ? sa->storage_format : "float32");
        break;
      }
      done[b] = true;
      members[n++] = b;
    }
    if (!rc) rc = add_stack(l, members, n, sa->stack, err);
  }
out:
  free(members);
  free(done);
  return rc;
}

static int stack_auto(scps_layout *l, const int *order, const int64_t *samples, int64_t limit,
                      scps_error *err) {
  int *members = malloc(sizeof(int) * (size_t)l->n_tables);
  bool *done = calloc((size_t)l->n_tables, sizeof(bool));
  int rc = 0;
  if (!members || !done) {
    rc = scps_error_set(err, SCPS_ENOMEM, "layout: out of memory");
    goto out;
  }
  for (int i = 0; i < l->n_tables && !rc; i++) {
    int a = order[i];
    if (l->table_specs[a].stack[0] || done[a]) continue;
    int n = 0;
    int64_t bytes = 0;
    for (int j = i; j < l->n_tables && !rc; j++) {
      int b = order[j];
      if (l->table_specs[b].stack[0] || done[b] || !same_group(l, a, b)) continue;
      int64_t per_sc = (samples[b] + l->num_sc - 1) / l->num_sc;
      int64_t need = (int64_t)l->tables[b].padded_dim * per_sc * 4;
      if (n > 0 && bytes + need > limit) {
        rc = add_stack(l, members, n, NULL, err);
        n = 0;
        bytes = 0;
      }
      done[b] = true;
      members[n++] = b;
      bytes += need;
    }
    if (!rc && n > 0) rc = add_stack(l, members, n, NULL, err);
  }
out:
  free(members);
  free(done);
  return rc;
}

static int place_features(scps_layout *l, scps_error *err) {
  int *order = malloc(sizeof(int) * (size_t)(l->n_features ? l->n_features : 1));
  if (!order) return scps_error_set(err, SCPS_ENOMEM, "layout: out of memory");
  for (int f = 0; f < l->n_features; f++) order[f] = f;
  sort_by_name(order, l->n_features, l->feature_specs->name, sizeof *l->feature_specs);
  for (int s = 0; s < l->n_stacks; s++) {
    scps_stack_layout *st = &l->stacks[s];
    st->features = malloc(sizeof(int) * (size_t)(l->n_features ? l->n_features : 1));
    if (!st->features) {
      free(order);
      return scps_error_set(err, SCPS_ENOMEM, "layout: out of memory");
    }
    for (int i = 0; i < st->n_tables; i++)
      for (int k = 0; k < l->n_features; k++) {
        int f = order[k];
        if (l->features[f].table != st->tables[i]) continue;
        l->features[f].stack = s;
        l->features[f].sample_offset = st->total_sample_count;
        st->total_sample_count += l->feature_specs[f].batch_size;
        st->features[st->n_features++] = f;
      }
    if (st->total_sample_count > UINT32_MAX) {
      free(order);
      return scps_error_set(err, SCPS_EINVAL, "stack '%s': %lld samples exceed the 32-bit sample index",
                            st->name, (long long)st->total_sample_count);
    }
  }
  free(order);
  return 0;
}

int scps__layout_create(const scps_table_spec *tables, int n_tables,
                       const scps_feature_spec *features, int n_features,
                       const scps_topology *topology, const scps_layout_options *opts,
                       scps_layout **out, scps_error *err) {
  *out = NULL;
  int rc = scps__specs_validate(tables, n_tables, features, n_features, err);
  if (rc) return rc;
  rc = scps__topology_validate(topology, err);
  if (rc) return rc;
  int64_t limit = opts && opts->activation_mem_bytes_limit > 0 ? opts->activation_mem_bytes_limit
                                                               : SCPS_DEFAULT_ACTIVATION_MEM_LIMIT;
  scps_layout *l = calloc(1, sizeof *l);
  if (!l) return scps_error_set(err, SCPS_ENOMEM, "layout: out of memory");
  l->topology = *topology;
  l->num_sc = topology->num_processes * topology->sc_per_process;
  l->rotation_step = opts && opts->rotation >= 0 ? opts->rotation : topology->sc_per_process;
  l->n_tables = n_tables;
  l->n_features = n_features;
  l->table_specs = malloc(sizeof *tables * (size_t)n_tables);
  l->tables = calloc((size_t)n_tables, sizeof *l->tables);
  l->feature_specs = malloc(sizeof *features * (size_t)(n_features ? n_features : 1));
  l->features = calloc((size_t)(n_features ? n_features : 1), sizeof *l->features);
  l->stacks = calloc((size_t)n_tables, sizeof *l->stacks);
  int64_t *samples = calloc((size_t)n_tables, sizeof *samples);
  int *order = malloc(sizeof(int) * (size_t)n_tables);
  if (!l->table_specs || !l->tables || !l->feature_specs || !l->features || !l->stacks || !samples ||
      !order) {
    rc = scps_error_set(err, SCPS_ENOMEM, "layout: out of memory");
    goto fail;
  }
  memcpy(l->table_specs, tables, sizeof *tables * (size_t)n_tables);
  if (n_features) memcpy(l->feature_specs, features, sizeof *features * (size_t)n_features);
  for (int t = 0; t < n_tables; t++) {
    l->tables[t].padded_dim = (int32_t)round_up(tables[t].embedding_dim, 8);
    l->tables[t].padded_vocab = round_up(tables[t].vocabulary_size, 8 * (int64_t)l->num_sc);
    l->tables[t].stack = -1;
    order[t] = t;
  }
  for (int f = 0; f < n_features; f++) {
    int t = scps__find_table(tables, n_tables, features[f].table);
    l->features[f].table = t;
    l->features[f].stack = -1;
    samples[t] += features[f].batch_size;
  }
  sort_by_name(order, n_tables, l->table_specs->name, sizeof *l->table_specs);

  rc = stack_explicit(l, order, err);
  if (!rc) rc = stack_auto(l, order, samples, limit, err);
  if (!rc) rc = place_features(l, err);
  for (int s = 0; !rc && s < l->n_stacks; s++)
    for (int u = 0; u < s; u++)
      if (!strcmp(l->stacks[s].name, l->stacks[u].name)) {
        rc = scps_error_set(err, SCPS_EEXIST,
                            "stack name '%s' is used twice (an explicit stack name equals an "
                            "automatic one); rename the explicit stack",
                            l->stacks[s].name);
        break;
      }
  if (rc) goto fail;
  free(samples);
  free(order);
  *out = l;
  return 0;
fail:
  free(samples);
  free(order);
  scps__layout_destroy(l);
  return rc;
}

int scps__layout_row_to_id(const scps_layout *l, int stack, int32_t sc, int64_t local_row, int *table,
                          int64_t *id) {
  const scps_stack_layout *st = &l->stacks[stack];
  for (int i = 0; i < st->n_tables; i++) {
    int t = st->tables[i];
    const scps_table_layout *tl = &l->tables[t];
    int64_t rows = tl->padded_vocab / l->num_sc;
    if (local_row < tl->row_offset_in_shard || local_row >= tl->row_offset_in_shard + rows) continue;
    int64_t residue = ((int64_t)sc - tl->shard_rotation) % l->num_sc;
    if (residue < 0) residue += l->num_sc;
    int64_t i_id = (local_row - tl->row_offset_in_shard) * l->num_sc + residue;
    if (i_id >= l->table_specs[t].vocabulary_size) return SCPS_ERANGE;
    *table = t;
    *id = i_id;
    return 0;
  }
  return SCPS_ERANGE;
}

int64_t scps__layout_rows_held(const scps_layout *l, int t, int32_t sc) {
  const scps_table_layout *tl = &l->tables[t];
  int64_t residue = ((int64_t)sc - tl->shard_rotation) % l->num_sc;
  if (residue < 0) residue += l->num_sc;
  const int64_t vocab = l->table_specs[t].vocabulary_size;
  return residue < vocab ? (vocab - residue + l->num_sc - 1) / l->num_sc : 0;
}

int64_t scps__layout_stack_bytes_per_sc(const scps_layout *l, int stack) {
  const scps_stack_layout *st = &l->stacks[stack];
  int64_t bytes = scps__hbm_footprint(st->rows_per_sc * scps__layout_row_bytes(l, stack));
  for (int k = 0; k < scps__optimizer_num_slots(st->optimizer.type); k++)
    bytes += scps__hbm_footprint(st->rows_per_sc * scps__layout_slot_row_bytes(l, stack, k));
  return bytes;
}

int64_t scps__layout_slot_row_bytes(const scps_layout *l, int stack, int slot) {
  const scps_stack_layout *st = &l->stacks[stack];
  return (int64_t)scps__storage_row_bytes(&st->slot_storage[slot], (size_t)st->dim);
}

int64_t scps__layout_row_bytes(const scps_layout *l, int stack) {
  const scps_stack_layout *st = &l->stacks[stack];
  return (int64_t)scps__storage_row_bytes(&st->storage, (size_t)st->dim);
}
