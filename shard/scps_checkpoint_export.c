#include "scps_checkpoint_export.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "scps_ckpt_data.h"
#include "scps_ckpt_file.h"
#include "scps_clock.h"
#include "scps_hbm.h"
#include "scps_layout.h"

typedef struct export_ctx {
  const char *table;
  int region;
  int32_t dim; /* embedding_dim */
  float *out;  /* [vocabulary_size x dim] */
} export_ctx;

static void export_row(void *arg, const scps_ckpt_table *t, int64_t id, const float *row) {
  export_ctx *x = arg;
  if (strcmp(t->name, x->table)) return;
  memcpy(x->out + (size_t)id * (size_t)x->dim, row, sizeof(float) * (size_t)x->dim);
}

static int export_rows(void *arg, const scps_checkpoint *c, int stack, int32_t sc, int region,
                       int64_t first, int64_t n, const float *data, scps_error *err) {
  export_ctx *x = arg;
  if (region == x->region) scps__ckpt_data_ids(c, stack, sc, first, n, data, export_row, x);
  return 0;
}

/* .npy format 1.0: magic, version, header length, a Python dict literal
 * padded with spaces to a multiple of 64 bytes ending in '\n'. */
static int write_npy(const char *path, const float *data, int64_t rows, int32_t cols, scps_error *err) {
  char header[256];
  int n = snprintf(header + 10, sizeof header - 10,
                   "{'descr': '<f4', 'fortran_order': False, 'shape': (%lld, %d), }",
                   (long long)rows, cols);
  size_t total = (10 + (size_t)n + 1 + 63) / 64 * 64;
  memset(header + 10 + n, ' ', total - 10 - (size_t)n);
  header[total - 1] = '\n';
  memcpy(header, "\x93NUMPY\x01\x00", 8);
  header[8] = (char)((total - 10) & 0xff);
  header[9] = (char)((total - 10) >> 8);
  char dir[SCPS_CKPT_PATH_CAP];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  const char *name = slash ? slash + 1 : dir;
  if (slash) *slash = '\0';
  scps_ckpt_file_writer o = {.fd = -1};
  int rc = scps__ckpt_file_create(&o, slash ? (dir[0] ? dir : "/") : ".", name, err);
  if (!rc) rc = scps__ckpt_file_write(&o, header, total, NULL, err);
  if (!rc) rc = scps__ckpt_file_write(&o, data, (size_t)rows * (size_t)cols * sizeof(float), NULL, err);
  if (!rc) rc = scps__ckpt_file_commit(&o, err);
  if (rc) scps__ckpt_file_abort(&o);
  return rc;
}

int scps__checkpoint_export_table(const scps_checkpoint *c, const char *table, int slot,
                                 const char *path, scps_error *err) {
  int stack = -1;
  const scps_ckpt_table *t = NULL;
  for (int s = 0; s < c->n_stacks && !t; s++)
    for (int i = 0; i < c->stacks[s].n_tables; i++)
      if (!strcmp(c->stacks[s].tables[i].name, table)) {
        stack = s;
        t = &c->stacks[s].tables[i];
        break;
      }
  if (!t) {
    char names[768];
    size_t used = 0;
    names[0] = '\0';
    for (int s = 0; s < c->n_stacks; s++)
      for (int i = 0; i < c->stacks[s].n_tables && used < sizeof names; i++)
        used += (size_t)snprintf(names + used, sizeof names - used, "%s'%s'", used ? ", " : "",
                                 c->stacks[s].tables[i].name);
    return scps_error_set(err, SCPS_ENOENT, "checkpoint '%s' has no table '%s' (its tables: %s)", c->dir, table,
                          names);
  }
  const scps_ckpt_stack *st = &c->stacks[stack];
  const scps_table_spec *spec = &c->specs->tables[t->spec];
  if (slot < -1 || slot >= st->num_slots)
    return scps_error_set(err, SCPS_EINVAL, "table '%s' (%s) has %d optimizer slots; slot %d does not exist",
                          table, scps__optimizer_name(spec->optimizer.type), st->num_slots, slot);
  /* vocabulary x dim is at most what the table's files hold, sizes checked at open. */
  export_ctx x = {.table = table, .region = slot + 1, .dim = spec->embedding_dim};
  const size_t values = (size_t)spec->vocabulary_size * (size_t)spec->embedding_dim;
  x.out = calloc(values, sizeof(float));
  size_t buf_rows = scps__ckpt_data_buffer_rows(st);
  float *buf = malloc(buf_rows * (size_t)st->dim * sizeof(float));
  int rc = 0;
  if (!x.out || !buf) rc = scps_error_set(err, SCPS_ENOMEM, "export of table '%s': out of memory", table);
  /* A part holds only its process's SparseCores: the rows it does not hold
   * are NaN, where zeros would pass for values. */
  if (!rc && c->is_part)
    for (size_t i = 0; i < values; i++) x.out[i] = NAN;
  for (int32_t sc = 0; sc < c->num_sc && !rc; sc++)
    if (scps__ckpt_data_file_of(c, stack, sc)->name[0])
      rc = scps__ckpt_data_stream(c, stack, sc, buf, buf_rows, export_rows, &x, err);
  if (!rc) rc = write_npy(path, x.out, spec->vocabulary_size, spec->embedding_dim, err);
  free(buf);
  free(x.out);
  return rc;
}

/* ---- another topology ---- */

/* The checkpoint's table specs with the changes applied, into *out (the
 * caller frees it). */
static int changed_specs(const scps_checkpoint *c, const scps_checkpoint_format_change *changes, int n_changes,
                         scps_table_spec **out, scps_error *err) {
  const scps_workload *w = c->specs;
  scps_table_spec *t = malloc(sizeof *t * (size_t)w->n_tables);
  if (!t) return scps_error_set(err, SCPS_ENOMEM, "convert: out of memory");
  memcpy(t, w->tables, sizeof *t * (size_t)w->n_tables);
  *out = t;
  for (int i = 0; i < n_changes; i++) {
    const scps_checkpoint_format_change *ch = &changes[i];
    const int k = scps__find_table(t, w->n_tables, ch->table);
    scps_storage_format f;
    if (k < 0) return scps_error_set(err, SCPS_EINVAL, "convert: checkpoint '%s' has no table '%s'", c->dir, ch->table);
    if (scps__storage_parse(ch->format, &f, err)) return SCPS_EINVAL;
    char *dst = t[k].storage_format;
    if (ch->slot[0]) {
      const scps_optimizer_type type = t[k].optimizer.type;
      int s = 0;
      while (s < scps__optimizer_num_slots(type) && strcmp(scps__optimizer_slot_name(type, s), ch->slot)) s++;
      if (s == scps__optimizer_num_slots(type))
        return scps_error_set(err, SCPS_EINVAL, "convert: table '%s' (%s) has no optimizer slot '%s'", ch->table,
                              scps__optimizer_name(type), ch->slot);
      dst = t[k].slot_formats[s];
    }
    if (f.kind == SCPS_STORAGE_F32) dst[0] = '\0';
    else scps__storage_name(&f, dst, SCPS_STORAGE_NAME_MAX);
  }
  return 0;
}

int scps__checkpoint_export_topology(const char *dir, const scps_topology *to, const char *dst_root,
                                    scps_checkpoint_stats *stats, scps_error *err) {
  return scps__checkpoint_export_as(dir, to, NULL, 0, dst_root, stats, err);
}

int scps__checkpoint_export_as(const char *dir, const scps_topology *to_or_null,
                              const scps_checkpoint_format_change *changes, int n_changes, const char *dst_root,
                              scps_checkpoint_stats *stats, scps_error *err) {
  double t0 = scps__clock_s();
  int rc = to_or_null ? scps__topology_validate(to_or_null, err) : 0;
  if (rc) return rc;
  scps_checkpoint *c;
  if ((rc = scps__checkpoint_open(dir, &c, err))) return rc;
  scps_topology same = c->topology;
  const scps_topology *to = to_or_null ? to_or_null : &same;
  /* The conversion writes its step's directory under dst_root process by
   * process while it reads the source: into an existing one (the source's
   * own, when dst_root is its root) it would overwrite what it reads. */
  char dst[SCPS_CKPT_PATH_CAP];
  struct stat sb;
  scps__ckpt_manifest_step_dir(dst_root, c->step, dst, sizeof dst);
  if (stat(dst, &sb) == 0) {
    scps__checkpoint_close(c);
    return scps_error_set(err, SCPS_EEXIST, "convert: '%s' already exists; choose another --out root", dst);
  }
  const scps_workload *w = c->specs;
  scps_layout *l = NULL;
  scps_checkpoint_limits *limits = NULL;
  scps_checkpoint_stats total = {0};
  scps_table_spec *tables = NULL;
  rc = changed_specs(c, changes, n_changes, &tables, err);
  if (!rc) rc = scps__layout_create(tables, w->n_tables, w->features, w->n_features, to, NULL, &l, err);
  if (!rc && !to_or_null) {
    /* The same topology, with SparseCores as large as wider formats need. */
    int64_t need = 0;
    for (int s = 0; s < l->n_stacks; s++) need += scps__layout_stack_bytes_per_sc(l, s) + SCPS_HBM_ALIGN;
    if (need > same.sc_memory_bytes) {
      same.sc_memory_bytes = need;
      scps__layout_destroy(l);
      l = NULL;
      rc = scps__layout_create(tables, w->n_tables, w->features, w->n_features, to, NULL, &l, err);
    }
  }
  if (!rc && !(limits = calloc((size_t)l->n_stacks, sizeof *limits)))
    rc = scps_error_set(err, SCPS_ENOMEM, "convert: out of memory");
  for (int s = 0; !rc && s < l->n_stacks; s++) {
    /* A stack the source did not have (another stacking) keeps its declared limits. */
    snprintf(limits[s].stack, sizeof limits[s].stack, "%s", l->stacks[s].name);
    limits[s].max_ids_per_partition = l->stacks[s].max_ids_per_partition;
    limits[s].max_unique_ids_per_partition = l->stacks[s].max_unique_ids_per_partition;
    scps__checkpoint_limits_of(c, l->stacks[s].name, &limits[s].max_ids_per_partition,
                              &limits[s].max_unique_ids_per_partition);
  }
  for (int32_t p = 0; !rc && p < to->num_processes; p++) {
    scps_engine *e;
    scps_checkpoint_stats one;
    if ((rc = scps__engine_create(l, p, &e, err))) break;
    rc = scps__checkpoint_load(c, e, NULL, err);
    if (!rc) rc = scps__checkpoint_save(e, dst_root, c->step, limits, &one, err);
    if (!rc) {
      total.bytes += one.bytes;
      total.files += one.files;
    }
    scps__engine_destroy(e);
  }
  if (!rc && stats) {
    *stats = total;
    stats->seconds = scps__clock_s() - t0;
  }
  free(limits);
  free(tables);
  scps__layout_destroy(l);
  scps__checkpoint_close(c);
  return rc;
}
