#include "scps_checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "scps_ckpt_data.h"
#include "scps_ckpt_file.h"
#include "scps_clock.h"
#include "scps_confine.h"
#include "scps_jsonw.h"
#include "scps_workload.h"

#define PATH_CAP SCPS_CKPT_PATH_CAP
#define FILE_NAME_CAP SCPS_CKPT_NAME_CAP

/* ---- save ---- */

static int check_limits(const scps_layout *l, const scps_checkpoint_limits *limits,
                        scps_error *err) {
  if (!limits) return 0;
  for (int s = 0; s < l->n_stacks; s++) {
    if (strcmp(limits[s].stack, l->stacks[s].name))
      return scps_error_set(err, SCPS_EINVAL, "checkpoint limits[%d] names stack '%s', expected '%s'",
                            s, limits[s].stack, l->stacks[s].name);
    if (limits[s].max_ids_per_partition < 1 || limits[s].max_unique_ids_per_partition < 1)
      return scps_error_set(err, SCPS_EINVAL, "checkpoint limits of stack '%s': (%d, %d) must be >= 1",
                            l->stacks[s].name, limits[s].max_ids_per_partition,
                            limits[s].max_unique_ids_per_partition);
  }
  return 0;
}

typedef struct save_ctx {
  scps_engine *e;
  const char *dir;
  int dirfd;                             /* dir, opened */
  const scps_checkpoint_snapshot *snap;  /* NULL: write from the engine */
  scps_ckpt_datafile *files;
} save_ctx;

/* Writes files[i] (its stack and SparseCore set) under its .tmp name and
 * records its size and checksum; scps__checkpoint_save renames it. */
static int save_file(void *arg, int i, scps_error *err) {
  save_ctx *x = arg;
  scps_ckpt_datafile *f = &x->files[i];
  const scps_layout *l = scps__engine_layout(x->e);
  const scps_stack_layout *st = &l->stacks[f->stack];
  const int32_t ls = f->sc - scps__engine_process_index(x->e) * l->topology.sc_per_process;
  const int slots = scps__optimizer_num_slots(st->optimizer.type);
  scps_ckpt_file_writer o = {.fd = -1};
  int rc = scps__ckpt_file_create_at(&o, x->dirfd, x->dir, f->name, err);
  if (rc) return rc;
  scps_hash64_ctx h;
  scps__hash64_init(&h, 0);
  if (x->snap) {
    size_t len;
    const void *data = scps__checkpoint_snapshot_file(x->snap, i, &len);
    rc = scps__ckpt_file_write(&o, data, len, &h, err);
  } else {
    /* Each array as the engine keeps it, in its storage format. */
    for (int a = 0; a <= slots && !rc; a++)
      rc = scps__ckpt_file_write(&o, scps__engine_codes(x->e, f->stack, ls, a),
                                (size_t)scps__ckpt_manifest_layout_region_bytes(st, a), &h, err);
  }
  if (!rc) rc = scps__ckpt_file_sync(&o, err);
  if (rc) {
    scps__ckpt_file_abort(&o);
    return rc;
  }
  f->bytes = scps__ckpt_manifest_layout_shard_bytes(st);
  f->xxh64 = scps__hash64_digest(&h);
  return 0;
}

int scps__checkpoint_save(const scps_engine *e, const char *root, int64_t step,
                         const scps_checkpoint_limits *limits, scps_checkpoint_stats *stats,
                         scps_error *err) {
  if (step < 0) return scps_error_set(err, SCPS_EINVAL, "checkpoint step %lld is negative", (long long)step);
  int rc = check_limits(scps__engine_layout(e), limits, err);
  if (!rc) rc = scps__ckpt_file_make_dirs(root, err);
  if (rc) return rc;
  int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return scps__ckpt_file_error(err, errno, "cannot open directory", root);
  rc = scps__checkpoint_save_at(fd, root, e, step, limits, NULL, stats, err);
  close(fd);
  return rc;
}

int scps__checkpoint_save_at(int root_fd, const char *root, const scps_engine *e, int64_t step,
                            const scps_checkpoint_limits *limits, const scps_checkpoint_save_opts *opts,
                            scps_checkpoint_stats *stats, scps_error *err) {
  double t0 = scps__clock_s();
  const scps_layout *l = scps__engine_layout(e);
  const int32_t S = l->topology.sc_per_process, p = scps__engine_process_index(e);
  /* The engine's accessors hand out writable pointers; save only reads them. */
  scps_engine *me = (scps_engine *)e;
  const scps_checkpoint_snapshot *snap = opts ? opts->snapshot : NULL;
  const scps_checkpoint_owner *own = opts ? opts->owner : NULL;
  if (step < 0) return scps_error_set(err, SCPS_EINVAL, "checkpoint step %lld is negative", (long long)step);
  if (snap && scps__checkpoint_snapshot_engine(snap) != e)
    return scps_error_set(err, SCPS_EINVAL, "checkpoint: the snapshot is of another engine");
  int rc = check_limits(l, limits, err);
  if (rc) return rc;
  char dir[PATH_CAP], manifest_name[FILE_NAME_CAP], step_name[FILE_NAME_CAP];
  scps__ckpt_manifest_step_dir(root, step, dir, sizeof dir);
  if (strlen(dir) >= sizeof dir - FILE_NAME_CAP - 8)
    return scps_error_set(err, SCPS_EINVAL, "checkpoint directory '%s' is too long", root);
  scps__ckpt_manifest_name(p, manifest_name);
  snprintf(step_name, sizeof step_name, SCPS_CKPT_STEP_PREFIX "%012lld", (long long)step);
  int dfd = -1, os_errno;

  scps_jsonw w;
  scps__jsonw_init(&w);
  const int n_files = l->n_stacks * S;
  scps_ckpt_datafile *files = calloc((size_t)(n_files ? n_files : 1), sizeof *files);
  char *specs = NULL;
  scps_ckpt_file_writer o = {.fd = -1};
  bool attempted = false, replacing = false;
  int64_t bytes = 0;
  if (!files) return scps_error_set(err, SCPS_ENOMEM, "checkpoint: out of memory");
  /* Specs first: a set the manifest cannot describe fails before any I/O. */
  if ((rc = scps__workload_write_specs(l->table_specs, l->n_tables, l->feature_specs, l->n_features,
                                      &w, err)))
    goto out;
  specs = w.buf;
  w.buf = NULL;
  scps__jsonw_free(&w);
  if ((rc = scps__confine_subdir(root_fd, root, step_name, true, &dfd, &os_errno, err))) goto out;
  if (own && (rc = scps__ckpt_owner_refuse_foreign(dfd, dir, own, err))) goto out;
  for (int s = 0, i = 0; s < l->n_stacks; s++)
    for (int32_t ls = 0; ls < S; ls++, i++) {
      files[i].stack = s;
      files[i].sc = p * S + ls;
      scps__ckpt_manifest_data_name(s, files[i].sc, files[i].name);
    }
  save_ctx x = {.e = me, .dir = dir, .dirfd = dfd, .snap = snap, .files = files};
  attempted = true;
  /* Every data file is written in full under a temporary name before
   * anything of an earlier save of this step is touched: a save that fails
   * there (a full disk, a size limit, a crash) leaves that one as it was. */
  if ((rc = scps__ckpt_file_for_each(n_files, save_file, &x, err))) goto out;
  for (int i = 0; i < n_files; i++) bytes += files[i].bytes;
  {
    /* An earlier manifest of this step would describe the files about to
     * be replaced: it goes first, durably. */
    char old[PATH_CAP];
    if ((rc = scps__ckpt_file_join(old, sizeof old, dir, manifest_name, err))) goto out;
    if (unlinkat(dfd, manifest_name, 0) == 0) {
      if ((rc = scps__ckpt_file_fsync_dir(dfd, dir, err))) goto out;
    } else if (errno != ENOENT) {
      rc = scps__ckpt_file_error(err, errno, "cannot remove", old);
      goto out;
    }
  }
  replacing = true;
  for (int i = 0; i < n_files; i++) {
    char path[PATH_CAP], tmp[FILE_NAME_CAP + 8];
    if ((rc = scps__ckpt_file_join(path, sizeof path, dir, files[i].name, err))) goto out;
    snprintf(tmp, sizeof tmp, "%s.tmp", files[i].name);
    if (renameat(dfd, tmp, dfd, files[i].name)) {
      rc = scps__ckpt_file_error(err, errno, "cannot rename to", path);
      goto out;
    }
  }
  if ((rc = scps__ckpt_file_fsync_dir(dfd, dir, err))) goto out;
  if ((rc = scps__ckpt_manifest_write(&w, l, p, step, limits, files, n_files,
                                     own && own->has_fingerprint ? own->fingerprint : NULL, specs, err)))
    goto out;
  if ((rc = scps__ckpt_file_create_at(&o, dfd, dir, manifest_name, err))) goto out;
  if ((rc = scps__ckpt_file_write(&o, w.buf, w.len, NULL, err))) goto out;
  if ((rc = scps__ckpt_file_commit(&o, err))) goto out;
  rc = scps__ckpt_file_fsync_dir(dfd, dir, err);
out:
  if (rc) {
    scps__ckpt_file_abort(&o);
    /* Before the swap only the temporary files are this save's; after it,
     * data files without their manifest are useless: give the space back. */
    for (int i = 0; attempted && i < n_files; i++) {
      char tmp[FILE_NAME_CAP + 8];
      snprintf(tmp, sizeof tmp, "%s.tmp", files[i].name);
      if (replacing) unlinkat(dfd, files[i].name, 0);
      unlinkat(dfd, tmp, 0);
    }
  } else if (stats) {
    stats->bytes = bytes;
    stats->files = n_files;
    stats->seconds = scps__clock_s() - t0;
  }
  if (dfd >= 0) close(dfd);
  free(specs);
  free(files);
  scps__jsonw_free(&w);
  return rc;
}

/* ---- open ---- */

void scps__checkpoint_close(scps_checkpoint *c) {
  if (!c) return;
  scps__workload_destroy(c->specs);
  for (int s = 0; s < c->n_stacks; s++) free(c->stacks[s].tables);
  free(c->stacks);
  free(c->files);
  free(c);
}

/* Whether dir holds step directories: a checkpoint root given where one
 * step's directory was expected. */
static bool holds_steps(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return false;
  bool found = false;
  struct dirent *de;
  while (!found && (de = readdir(d))) found = !strncmp(de->d_name, SCPS_CKPT_STEP_PREFIX, strlen(SCPS_CKPT_STEP_PREFIX));
  closedir(d);
  return found;
}

/* The files manifest mf of process p lists, into c->files: each present
 * with the size listed. */
static int take_files(scps_checkpoint *c, const char *dir, const scps_ckpt_manifest *mf, int32_t p, int32_t N,
                      scps_error *err) {
  int rc = 0;
  for (int i = 0; i < mf->n_files && !rc; i++) {
    const scps_ckpt_datafile *f = &mf->files[i];
    scps_ckpt_datafile *slot = &c->files[(size_t)f->stack * (size_t)N + (size_t)f->sc];
    if (slot->name[0])
      rc = scps_error_set(err, SCPS_EPARSE, "'%s': manifest.p%d.json lists '%s' twice", dir, p, f->name);
    *slot = *f;
    char path[PATH_CAP];
    struct stat st;
    if (!rc) rc = scps__ckpt_file_join(path, sizeof path, dir, f->name, err);
    if (!rc && stat(path, &st))
      rc = errno == ENOENT ? scps_error_set(err, SCPS_ENOENT, "checkpoint file '%s' is missing", path)
                           : scps__ckpt_file_error(err, errno, "cannot stat", path);
    if (!rc && st.st_size != f->bytes)
      rc = scps_error_set(err, SCPS_ECORRUPT, "'%s' has %lld bytes, its manifest says %lld", path,
                          (long long)st.st_size, (long long)f->bytes);
  }
  return rc;
}

/* Ends an open: on success c takes the manifest's description (mf's
 * files are in c->files already), otherwise both are freed. */
static int finish_open(scps_checkpoint *c, scps_ckpt_manifest *mf, int32_t N, int rc, scps_checkpoint **out) {
  if (rc) {
    scps__ckpt_manifest_free(mf);
    scps__checkpoint_close(c);
    return rc;
  }
  c->step = mf->step;
  c->has_fingerprint = mf->has_fingerprint;
  memcpy(c->fingerprint, mf->fingerprint, sizeof c->fingerprint);
  c->topology = mf->topology;
  c->num_sc = N;
  c->specs = mf->specs;
  c->n_stacks = mf->n_stacks;
  c->stacks = mf->stacks;
  free(mf->files);
  *out = c;
  return 0;
}

int scps__checkpoint_open(const char *dir, scps_checkpoint **out, scps_error *err) {
  *out = NULL;
  if (strlen(dir) >= PATH_CAP - FILE_NAME_CAP - 8)
    return scps_error_set(err, SCPS_EINVAL, "checkpoint directory '%s' is too long", dir);
  struct stat sb;
  if (stat(dir, &sb))
    return errno == ENOENT ? scps_error_set(err, SCPS_ENOENT, "checkpoint directory '%s' does not exist", dir)
                           : scps__ckpt_file_error(err, errno, "cannot open checkpoint directory", dir);
  if (!S_ISDIR(sb.st_mode)) return scps_error_set(err, SCPS_EINVAL, "checkpoint '%s' is not a directory", dir);
  scps_ckpt_manifest m0 = {0};
  int rc = scps__ckpt_manifest_load(dir, 0, &m0, err);
  if (rc == SCPS_ENOENT && holds_steps(dir))
    scps_error_set(err, SCPS_ENOENT,
                   "'%s' is a checkpoint root, not a checkpoint: give one of its step-... directories "
                   "('scps-admin checkpoint list %s' lists them)",
                   dir, dir);
  if (rc) return rc;
  scps_checkpoint *c = calloc(1, sizeof *c);
  const int32_t P = m0.topology.num_processes, N = P * m0.topology.sc_per_process;
  if (c) c->files = calloc((size_t)m0.n_stacks * (size_t)N, sizeof *c->files);
  if (!c || !c->files) {
    scps__ckpt_manifest_free(&m0);
    scps__checkpoint_close(c);
    return scps_error_set(err, SCPS_ENOMEM, "checkpoint '%s': out of memory", dir);
  }
  snprintf(c->dir, sizeof c->dir, "%s", dir);
  for (int32_t p = 0; p < P && !rc; p++) {
    scps_ckpt_manifest mp = {0};
    const scps_ckpt_manifest *cur = &m0;
    if (p > 0) {
      rc = scps__ckpt_manifest_load(dir, p, &mp, err);
      if (!rc) rc = scps__ckpt_manifest_cross_check(dir, &m0, &mp, p, err);
      cur = &mp;
    }
    if (!rc) rc = take_files(c, dir, cur, p, N, err);
    if (p > 0) scps__ckpt_manifest_free(&mp);
  }
  return finish_open(c, &m0, N, rc, out);
}

int scps__checkpoint_open_part(const char *dir, int32_t process, scps_checkpoint **out, scps_error *err) {
  *out = NULL;
  if (strlen(dir) >= PATH_CAP - FILE_NAME_CAP - 8)
    return scps_error_set(err, SCPS_EINVAL, "checkpoint directory '%s' is too long", dir);
  if (process < 0) return scps_error_set(err, SCPS_EINVAL, "process %d: must be >= 0", process);
  scps_ckpt_manifest mp = {0};
  int rc = scps__ckpt_manifest_load(dir, process, &mp, err);
  if (rc) return rc;
  scps_checkpoint *c = calloc(1, sizeof *c);
  const int32_t N = mp.topology.num_processes * mp.topology.sc_per_process;
  if (c) c->files = calloc((size_t)mp.n_stacks * (size_t)N, sizeof *c->files);
  if (!c || !c->files) {
    scps__ckpt_manifest_free(&mp);
    scps__checkpoint_close(c);
    return scps_error_set(err, SCPS_ENOMEM, "checkpoint '%s': out of memory", dir);
  }
  snprintf(c->dir, sizeof c->dir, "%s", dir);
  c->is_part = true;
  c->part_process = process;
  rc = take_files(c, dir, &mp, process, N, err);
  return finish_open(c, &mp, N, rc, out);
}

int64_t scps__checkpoint_bytes(const scps_checkpoint *c) {
  int64_t bytes = 0;
  for (size_t i = 0; i < (size_t)c->n_stacks * (size_t)c->num_sc; i++) bytes += c->files[i].bytes;
  return bytes;
}

int64_t scps__checkpoint_step(const scps_checkpoint *c) { return c->step; }
const scps_topology *scps__checkpoint_topology(const scps_checkpoint *c) { return &c->topology; }

void scps__checkpoint_specs(const scps_checkpoint *c, const scps_table_spec **tables, int *n_tables,
                           const scps_feature_spec **features, int *n_features) {
  *tables = c->specs->tables;
  *n_tables = c->specs->n_tables;
  *features = c->specs->features;
  *n_features = c->specs->n_features;
}

int scps__checkpoint_limits_of(const scps_checkpoint *c, const char *stack, int32_t *max_ids,
                              int32_t *max_unique_ids) {
  for (int s = 0; s < c->n_stacks; s++)
    if (!strcmp(c->stacks[s].name, stack)) {
      *max_ids = c->stacks[s].max_ids;
      *max_unique_ids = c->stacks[s].max_unique_ids;
      return 0;
    }
  return SCPS_ENOENT;
}

bool scps__checkpoint_is_owned(const scps_checkpoint *c, const scps_checkpoint_owner *own, char *why, size_t len) {
  char local[8];
  if (!why) {
    why = local;
    len = sizeof local;
  }
  return scps__ckpt_owner_test(c->has_fingerprint, c->fingerprint, &c->topology, c->specs, own, why, len);
}

/* ---- load ---- */

typedef struct load_ctx {
  scps_engine *e;
  const scps_layout *l;
  int32_t p, S;
  int region;
  const int *engine_table; /* [specs->n_tables]: checkpoint spec index -> engine table */
  const char *nan_table;   /* a row that holds NaN, which no narrower format encodes */
  int64_t nan_id;
  char nan_format[SCPS_STORAGE_NAME_MAX];
} load_ctx;

/* Row `id` of a table (decoded from the checkpoint's format) into the
 * engine's array, encoded in the engine's format where that is not float32:
 * rounded to nearest, which gives back the same codes when the formats
 * are the same. */
static void load_row(void *arg, const scps_ckpt_table *t, int64_t id, const float *row) {
  load_ctx *x = arg;
  const scps_layout *l = x->l;
  int te = x->engine_table[t->spec];
  int32_t sc = scps__layout_sc_of(l, te, id);
  if (scps__layout_process_of_sc(l, sc) != x->p) return;
  int stack = l->tables[te].stack;
  int32_t ls = sc - x->p * x->S;
  const size_t local = (size_t)scps__layout_local_row(l, te, id), width = (size_t)l->table_specs[te].embedding_dim;
  const scps_storage_codec *c = scps__engine_codec(x->e, stack, x->region);
  uint8_t *dst = scps__engine_codes(x->e, stack, ls, x->region) + local * c->row_bytes;
  if (c->f.kind == SCPS_STORAGE_F32) {
    memcpy(dst, row, sizeof(float) * width);
    return;
  }
  float v[SCPS_DIM_MAX];
  scps__storage_decode_row(c, dst, v); /* the engine row's other columns, kept */
  memcpy(v, row, sizeof(float) * width);
  if (scps__storage_encode_row(c, v, dst, NULL, NULL) && !x->nan_table) {
    x->nan_table = l->table_specs[te].name;
    x->nan_id = id;
    scps__storage_name(&c->f, x->nan_format, sizeof x->nan_format);
  }
}

static int load_rows(void *arg, const scps_checkpoint *c, int stack, int32_t sc, int region,
                     int64_t first, int64_t n, const float *data, scps_error *err) {
  load_ctx *x = arg;
  x->region = region;
  scps__ckpt_data_ids(c, stack, sc, first, n, data, load_row, x);
  if (x->nan_table)
    return scps_error_set(err, SCPS_EINVAL,
                          "checkpoint '%s': table '%s' id %lld holds NaN in %s, which storage format '%s' cannot hold",
                          c->dir, x->nan_table, (long long)x->nan_id, region ? "a slot" : "its row", x->nan_format);
  return 0;
}

int scps__checkpoint_specs_diff(const scps_checkpoint *c, const scps_topology *topology,
                               const scps_table_spec *tables, int n_tables, const scps_feature_spec *features,
                               int n_features, const char *name, char *msg, size_t len) {
  const scps_workload *w = c->specs;
  scps_table_spec *t = malloc(sizeof *t * (size_t)(w->n_tables ? w->n_tables : 1));
  if (!t) {
    snprintf(msg, len, "out of memory");
    return 1;
  }
  for (int i = 0; i < w->n_tables; i++) {
    t[i] = w->tables[i];
    const int k = scps__find_table(tables, n_tables, t[i].name);
    if (k < 0) continue;
    memcpy(t[i].storage_format, tables[k].storage_format, sizeof t[i].storage_format);
    memcpy(t[i].slot_formats, tables[k].slot_formats, sizeof t[i].slot_formats);
    t[i].storage_rounding = tables[k].storage_rounding;
  }
  const int differ = scps__specs_diff(&c->topology, t, w->n_tables, w->features, w->n_features,
                                     topology ? topology : &c->topology, tables, n_tables, features, n_features,
                                     "checkpoint", name, msg, len);
  free(t);
  return differ;
}

/* The checkpoint's specs and the engine's are the same declaration but for
 * the storage formats (a restore converts between those); otherwise
 * SCPS_EMISMATCH naming the first difference. */
static int specs_match(const scps_checkpoint *c, const scps_layout *l, scps_error *err) {
  char msg[512];
  if (scps__checkpoint_specs_diff(c, NULL, l->table_specs, l->n_tables, l->feature_specs, l->n_features, "engine",
                                 msg, sizeof msg))
    return scps_error_set(err, SCPS_EMISMATCH, "checkpoint '%s' does not match the engine's specs: %s", c->dir, msg);
  return 0;
}

/* Same number of SparseCores and the same stacks, tables, offsets and
 * rotations: every file is one of the engine's shards byte for byte. */
static bool same_placement(const scps_checkpoint *c, const scps_layout *l) {
  if (c->num_sc != l->num_sc || c->n_stacks != l->n_stacks) return false;
  for (int s = 0; s < c->n_stacks; s++) {
    const scps_ckpt_stack *cs = &c->stacks[s];
    const scps_stack_layout *ls = &l->stacks[s];
    if (strcmp(cs->name, ls->name) || cs->dim != ls->dim || cs->rows_per_sc != ls->rows_per_sc ||
        cs->n_tables != ls->n_tables || cs->num_slots != scps__optimizer_num_slots(ls->optimizer.type))
      return false;
    for (int i = 0; i < cs->n_tables; i++) {
      const scps_table_layout *tl = &l->tables[ls->tables[i]];
      if (strcmp(cs->tables[i].name, l->table_specs[ls->tables[i]].name) ||
          cs->tables[i].row_offset != tl->row_offset_in_shard ||
          cs->tables[i].rotation != tl->shard_rotation ||
          cs->tables[i].rows * l->num_sc != tl->padded_vocab)
        return false;
    }
  }
  return true;
}

static int load_direct(const scps_checkpoint *c, scps_engine *e, int stack, int32_t ls, scps_error *err) {
  const int32_t sc = scps__engine_process_index(e) * scps__engine_layout(e)->topology.sc_per_process + ls;
  const scps_ckpt_stack *st = &c->stacks[stack];
  scps_ckpt_file_reader r;
  int rc = scps__ckpt_data_open(c, stack, sc, &r, err);
  if (rc) return rc;
  for (int a = 0; a <= st->num_slots && !rc; a++)
    rc = scps__ckpt_file_next(&r, scps__engine_codes(e, stack, ls, a), (size_t)scps__ckpt_manifest_region_bytes(st, a),
                             err);
  return scps__ckpt_file_close(&r, rc, err);
}

/* Whether stack's shards are stored in the checkpoint in the formats the
 * engine keeps them in, so that its files load byte for byte. */
static bool same_formats(const scps_checkpoint *c, const scps_engine *e, int stack) {
  for (int a = 0; a <= c->stacks[stack].num_slots; a++)
    if (!scps__storage_equal(&c->stacks[stack].formats[a], &scps__engine_codec(e, stack, a)->f)) return false;
  return true;
}

typedef struct load_job {
  const scps_checkpoint *c;
  scps_engine *e;
  int32_t S;
  const int *engine_table;
} load_job;

static int load_resharded_one(void *arg, int i, scps_error *err) {
  load_job *j = arg;
  const scps_layout *l = scps__engine_layout(j->e);
  load_ctx x = {.e = j->e, .l = l, .p = scps__engine_process_index(j->e), .S = j->S,
                .engine_table = j->engine_table};
  return scps__ckpt_data_stream_one(j->c, i, load_rows, &x, err);
}

/* The engine's shard i (stack i / S, local SparseCore i % S) from its file:
 * byte for byte, or row by row where the formats differ. */
static int load_direct_one(void *arg, int i, scps_error *err) {
  load_job *j = arg;
  const int stack = i / j->S;
  const int32_t ls = i % j->S;
  if (same_formats(j->c, j->e, stack)) return load_direct(j->c, j->e, stack, ls, err);
  return load_resharded_one(arg, stack * j->c->num_sc + scps__engine_process_index(j->e) * j->S + ls, err);
}

/* A part's checkpoint has only its own process's files: the others are
 * not there to verify. */
static int verify_one(void *arg, int i, scps_error *err) {
  const scps_checkpoint *c = arg;
  if (!c->files[i].name[0]) return 0;
  return scps__ckpt_data_stream_one(arg, i, NULL, NULL, err);
}

int scps__checkpoint_load(const scps_checkpoint *c, scps_engine *e, scps_checkpoint_stats *stats,
                         scps_error *err) {
  double t0 = scps__clock_s();
  const scps_layout *l = scps__engine_layout(e);
  const scps_workload *w = c->specs;
  int rc = specs_match(c, l, err);
  if (rc) return rc;
  const int32_t S = l->topology.sc_per_process, p = scps__engine_process_index(e);
  if (c->is_part && (c->part_process != p || !same_placement(c, l)))
    return scps_error_set(err, SCPS_EMISMATCH,
                          "checkpoint '%s': only process %d's part was opened; it loads only into process %d of "
                          "the same topology and stacking",
                          c->dir, c->part_process, c->part_process);
  int *engine_table = calloc((size_t)w->n_tables, sizeof *engine_table);
  if (!engine_table) return scps_error_set(err, SCPS_ENOMEM, "checkpoint load: out of memory");
  for (int i = 0; i < w->n_tables; i++) engine_table[i] = scps__find_table(l->table_specs, l->n_tables, w->tables[i].name);
  load_job j = {.c = c, .e = e, .S = S, .engine_table = engine_table};
  int64_t bytes = 0;
  int files = 0;
  if (same_placement(c, l)) {
    files = c->n_stacks * S;
    rc = scps__ckpt_file_for_each(files, load_direct_one, &j, err);
    for (int s = 0; s < c->n_stacks; s++)
      for (int32_t ls = 0; ls < S; ls++) bytes += scps__ckpt_data_file_of(c, s, p * S + ls)->bytes;
  } else {
    files = c->n_stacks * c->num_sc;
    rc = scps__ckpt_file_for_each(files, load_resharded_one, &j, err);
    for (int i = 0; i < files; i++) bytes += c->files[i].bytes;
  }
  free(engine_table);
  /* What the engine knew of its values (to prove updates finite) is stale. */
  scps__engine_values_written(e);
  if (!rc && stats) {
    stats->bytes = bytes;
    stats->files = files;
    stats->seconds = scps__clock_s() - t0;
  }
  return rc;
}

int scps__checkpoint_verify(const scps_checkpoint *c, scps_checkpoint_stats *stats, scps_error *err) {
  double t0 = scps__clock_s();
  const int files = c->n_stacks * c->num_sc;
  int rc = scps__ckpt_file_for_each(files, verify_one, (void *)c, err);
  if (!rc && stats) {
    int present = 0;
    for (int i = 0; i < files; i++) present += c->files[i].name[0] != '\0';
    stats->bytes = scps__checkpoint_bytes(c);
    stats->files = present;
    stats->seconds = scps__clock_s() - t0;
  }
  return rc;
}

