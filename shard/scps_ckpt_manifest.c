#include "scps_ckpt_manifest.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "scps_hash64.h"
#include "scps_json.h"

/* A manifest is a few KiB per stack; anything larger is not one of ours. */
#define MANIFEST_MAX ((size_t)64 << 20)
#define MAX_STACKS 65536
#define PATH_CAP SCPS_CKPT_PATH_CAP
#define FILE_NAME_CAP SCPS_CKPT_NAME_CAP
#define FINGERPRINT_KEY SCPS_CKPT_FINGERPRINT_KEY

int64_t scps__ckpt_manifest_region_bytes(const scps_ckpt_stack *s, int array) {
  return s->rows_per_sc * (int64_t)scps__storage_row_bytes(&s->formats[array], (size_t)s->dim);
}

int64_t scps__ckpt_manifest_shard_bytes(const scps_ckpt_stack *s) {
  int64_t bytes = 0;
  for (int a = 0; a <= s->num_slots; a++) bytes += scps__ckpt_manifest_region_bytes(s, a);
  return bytes;
}

int64_t scps__ckpt_manifest_layout_region_bytes(const scps_stack_layout *st, int array) {
  const scps_storage_format *f = array ? &st->slot_storage[array - 1] : &st->storage;
  return st->rows_per_sc * (int64_t)scps__storage_row_bytes(f, (size_t)st->dim);
}

int64_t scps__ckpt_manifest_layout_shard_bytes(const scps_stack_layout *st) {
  int64_t bytes = 0;
  for (int a = 0; a <= scps__optimizer_num_slots(st->optimizer.type); a++)
    bytes += scps__ckpt_manifest_layout_region_bytes(st, a);
  return bytes;
}

void scps__ckpt_manifest_data_name(int stack, int32_t sc, char out[SCPS_CKPT_NAME_CAP]) {
  snprintf(out, SCPS_CKPT_NAME_CAP, "%d.sc%d.bin", stack, sc);
}

void scps__ckpt_manifest_name(int32_t process, char out[SCPS_CKPT_NAME_CAP]) {
  snprintf(out, SCPS_CKPT_NAME_CAP, SCPS_CKPT_MANIFEST_PREFIX "%d.json", process);
}

void scps__ckpt_manifest_step_dir(const char *root, int64_t step, char *out, size_t cap) {
  snprintf(out, cap, "%s/" SCPS_CKPT_STEP_PREFIX "%012lld", root, (long long)step);
}

bool scps__ckpt_manifest_step_of(const char *name, int64_t *step) {
  if (strncmp(name, SCPS_CKPT_STEP_PREFIX, strlen(SCPS_CKPT_STEP_PREFIX))) return false;
  name += strlen(SCPS_CKPT_STEP_PREFIX);
  size_t digits = strspn(name, "0123456789");
  if (digits < 12 || digits > 18 || name[digits]) return false;
  *step = strtoll(name, NULL, 10);
  return true;
}

/* ---- manifest checksum ---- */

/* A manifest ends with "checksum": "<16 hex digits>"}: the XXH64 of the whole
 * text with those digits as zeros. A flipped byte anywhere in it is caught
 * before its content is believed. */
#define CHECKSUM_KEY "\"checksum\": \""
#define CHECKSUM_HEX 16

static const char *find_checksum(const char *text, size_t len) {
  const size_t key = strlen(CHECKSUM_KEY);
  for (size_t i = len >= key + CHECKSUM_HEX ? len - key - CHECKSUM_HEX + 1 : 0; i-- > 0;)
    if (!memcmp(text + i, CHECKSUM_KEY, key)) return text + i + key;
  return NULL;
}

static void seal_manifest(char *text, size_t len) {
  char *digits = (char *)find_checksum(text, len);
  char hex[CHECKSUM_HEX + 1];
  snprintf(hex, sizeof hex, "%016" PRIx64, scps__hash64(text, len, 0));
  memcpy(digits, hex, CHECKSUM_HEX);
}

static int check_manifest_sum(const char *path, char *text, size_t len, scps_error *err) {
  char *digits = (char *)find_checksum(text, len);
  if (!digits)
    return scps_error_set(err, SCPS_ECORRUPT, "'%s': no \"checksum\" member at its end", path);
  char want[CHECKSUM_HEX + 1], *end;
  memcpy(want, digits, CHECKSUM_HEX);
  want[CHECKSUM_HEX] = '\0';
  uint64_t w = strtoull(want, &end, 16);
  memset(digits, '0', CHECKSUM_HEX);
  uint64_t got = scps__hash64(text, len, 0);
  memcpy(digits, want, CHECKSUM_HEX);
  if (*end || strspn(want, "0123456789abcdef") != CHECKSUM_HEX)
    return scps_error_set(err, SCPS_ECORRUPT, "'%s': checksum '%s' is not 16 hex digits", path, want);
  if (got != w)
    return scps_error_set(err, SCPS_ECORRUPT, "'%s': checksum %016" PRIx64 ", its text hashes to %016" PRIx64,
                          path, w, got);
  return 0;
}

/* ---- writing ---- */

static void write_manifest(scps_jsonw *w, const scps_layout *l, int32_t process, int64_t step,
                           const scps_checkpoint_limits *limits, const scps_ckpt_datafile *files,
                           int n_files, const uint8_t *fingerprint) {
  const scps_topology *t = &l->topology;
  scps__jsonw_printf(w, "{\"format\": %d, \"step\": %lld, \"process_index\": %d,\n",
                    SCPS_CHECKPOINT_FORMAT, (long long)step, process);
  if (fingerprint) {
    scps__jsonw_printf(w, " \"" FINGERPRINT_KEY "\": \"");
    for (int i = 0; i < SCPS_CHECKPOINT_FINGERPRINT_BYTES; i++) scps__jsonw_printf(w, "%02x", fingerprint[i]);
    scps__jsonw_printf(w, "\",\n");
  }
  scps__jsonw_printf(w,
                    " \"topology\": {\"num_processes\": %d, \"sc_per_process\": %d, "
                    "\"sc_memory_bytes\": %lld},\n \"stacks\": [",
                    t->num_processes, t->sc_per_process, (long long)t->sc_memory_bytes);
  for (int s = 0; s < l->n_stacks; s++) {
    const scps_stack_layout *st = &l->stacks[s];
    scps__jsonw_printf(w, "%s\n  {\"name\": ", s ? "," : "");
    scps__jsonw_string(w, st->name);
    scps__jsonw_printf(w,
                      ", \"dim\": %d, \"rows_per_sc\": %lld, \"slots\": %d, "
                      "\"max_ids_per_partition\": %d, \"max_unique_ids_per_partition\": %d,\n"
                      "   \"tables\": [",
                      st->dim, (long long)st->rows_per_sc, scps__optimizer_num_slots(st->optimizer.type),
                      limits ? limits[s].max_ids_per_partition : st->max_ids_per_partition,
                      limits ? limits[s].max_unique_ids_per_partition
                             : st->max_unique_ids_per_partition);
    for (int i = 0; i < st->n_tables; i++) {
      const scps_table_layout *tl = &l->tables[st->tables[i]];
      scps__jsonw_printf(w, "%s{\"name\": ", i ? ", " : "");
      scps__jsonw_string(w, l->table_specs[st->tables[i]].name);
      scps__jsonw_printf(w, ", \"row_offset\": %lld, \"rows\": %lld, \"rotation\": %d}",
                        (long long)tl->row_offset_in_shard, (long long)(tl->padded_vocab / l->num_sc),
                        tl->shard_rotation);
    }
    scps__jsonw_printf(w, "]}");
  }
  scps__jsonw_printf(w, "],\n \"files\": [");
  for (int i = 0; i < n_files; i++)
    scps__jsonw_printf(w, "%s\n  {\"name\": \"%s\", \"stack\": %d, \"sc\": %d, \"bytes\": %lld, "
                         "\"xxh64\": \"%016" PRIx64 "\"}",
                      i ? "," : "", files[i].name, files[i].stack, files[i].sc,
                      (long long)files[i].bytes, files[i].xxh64);
  scps__jsonw_printf(w, "],\n \"specs\": ");
}

int scps__ckpt_manifest_write(scps_jsonw *w, const scps_layout *l, int32_t process, int64_t step,
                             const scps_checkpoint_limits *limits, const scps_ckpt_datafile *files, int n_files,
                             const uint8_t *fingerprint, const char *specs_json, scps_error *err) {
  write_manifest(w, l, process, step, limits, files, n_files, fingerprint);
  scps__jsonw_printf(w, "%s,\n " CHECKSUM_KEY "0000000000000000\"}\n", specs_json);
  int rc = scps__jsonw_finish(w, "checkpoint manifest", err);
  if (!rc) seal_manifest(w->buf, w->len);
  return rc;
}

/* ---- reading ---- */

/* name in dirfd (path names it in messages); through no symlink unless
 * dirfd is AT_FDCWD, where name is path. */
static int read_text_at(int dirfd, const char *name, const char *path, char **out, size_t *len, scps_error *err) {
  int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | (dirfd == AT_FDCWD ? 0 : O_NOFOLLOW));
  if (fd < 0)
    return errno == ENOENT ? scps_error_set(err, SCPS_ENOENT, "'%s' is missing", path)
                           : scps__ckpt_file_error(err, errno, "cannot open", path);
  struct stat st;
  int rc = 0;
  if (fstat(fd, &st)) rc = scps__ckpt_file_error(err, errno, "cannot stat", path);
  else if (st.st_size < 0 || (uint64_t)st.st_size > MANIFEST_MAX)
    rc = scps_error_set(err, SCPS_EPARSE, "'%s': %lld bytes, more than a manifest may have (%zu)",
                        path, (long long)st.st_size, MANIFEST_MAX);
  char *buf = NULL;
  if (!rc && !(buf = malloc((size_t)st.st_size + 1))) rc = scps_error_set(err, SCPS_ENOMEM, "'%s': out of memory", path);
  if (!rc) rc = scps__ckpt_file_read(fd, buf, (size_t)st.st_size, NULL, path, err);
  close(fd);
  if (rc) {
    free(buf);
    return rc;
  }
  buf[st.st_size] = '\0';
  *out = buf;
  *len = (size_t)st.st_size;
  return 0;
}

/* Typed members of a manifest; anything off is SCPS_EPARSE naming the file. */
typedef struct mreader {
  const char *path;
  scps_error *err;
} mreader;

static int bad(const mreader *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int bad(const mreader *m, const char *fmt, ...) {
  char what[SCPS_ERROR_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  return scps_error_set(m->err, SCPS_EPARSE, "'%s': %s", m->path, what);
}

static int m_int(const mreader *m, const scps_json *obj, const char *key, int64_t min, int64_t max,
                 int64_t *out) {
  int64_t v;
  if (scps__json_int(scps__json_get(obj, key), &v) || v < min || v > max)
    return bad(m, "'%s' must be an integer in [%lld, %lld]", key, (long long)min,
             (long long)max);
  *out = v;
  return 0;
}

static int m_name(const mreader *m, const scps_json *obj, const char *key, char *out, size_t cap) {
  size_t n;
  const char *s = scps__json_string(scps__json_get(obj, key), &n);
  if (!s || n == 0 || n >= cap || strlen(s) != n)
    return bad(m, "'%s' must be a non-empty string", key);
  memcpy(out, s, n + 1);
  return 0;
}

static const scps_json *m_array(const mreader *m, const scps_json *obj, const char *key,
                                size_t max) {
  const scps_json *v = scps__json_get(obj, key);
  if (scps__json_typeof(v) != SCPS_JSON_ARRAY || scps__json_length(v) == 0 ||
      scps__json_length(v) > max) {
    bad(m, "'%s' must be an array of 1 to %zu entries", key, max);
    return NULL;
  }
  return v;
}

/* Optional: manifests written before it existed, or without an owner, lack it. */
static int m_fingerprint(const mreader *m, const scps_json *obj, scps_ckpt_manifest *mf) {
  const scps_json *v = scps__json_get(obj, FINGERPRINT_KEY);
  if (!v) return 0;
  size_t n = 0;
  const char *hex = scps__json_string(v, &n);
  if (!hex || n != 2 * SCPS_CHECKPOINT_FINGERPRINT_BYTES || strspn(hex, "0123456789abcdef") != n)
    return bad(m, "'" FINGERPRINT_KEY "' must be %d lowercase hex digits", 2 * SCPS_CHECKPOINT_FINGERPRINT_BYTES);
  for (int i = 0; i < SCPS_CHECKPOINT_FINGERPRINT_BYTES; i++) {
    char byte[3] = {hex[2 * i], hex[2 * i + 1], '\0'};
    mf->fingerprint[i] = (uint8_t)strtoul(byte, NULL, 16);
  }
  mf->has_fingerprint = true;
  return 0;
}

void scps__ckpt_manifest_free(scps_ckpt_manifest *mf) {
  scps__workload_destroy(mf->specs);
  for (int s = 0; s < mf->n_stacks; s++) free(mf->stacks[s].tables);
  free(mf->stacks);
  free(mf->files);
  memset(mf, 0, sizeof *mf);
}

static int parse_stack(const mreader *m, const scps_json *js, const scps_ckpt_manifest *mf, int32_t num_sc,
                       scps_ckpt_stack *st) {
  int64_t v = 0;
  int rc;
  if ((rc = m_name(m, js, "name", st->name, sizeof st->name))) return rc;
  if ((rc = m_int(m, js, "dim", 1, 1 << 16, &v))) return rc;
  st->dim = (int32_t)v;
  if ((rc = m_int(m, js, "slots", 0, SCPS_MAX_SLOTS, &v))) return rc;
  st->num_slots = (int32_t)v;
  /* Bounded so that a shard's bytes fit an exact JSON integer. */
  if ((rc = m_int(m, js, "rows_per_sc", 1, SCPS_JSON_INT_MAX / (4 * st->dim * (1 + st->num_slots)), &v)))
    return rc;
  st->rows_per_sc = v;
  if ((rc = m_int(m, js, "max_ids_per_partition", 1, INT32_MAX, &v))) return rc;
  st->max_ids = (int32_t)v;
  if ((rc = m_int(m, js, "max_unique_ids_per_partition", 1, INT32_MAX, &v))) return rc;
  st->max_unique_ids = (int32_t)v;
  const scps_json *jt = m_array(m, js, "tables", (size_t)mf->specs->n_tables);
  if (!jt) return SCPS_EPARSE;
  st->n_tables = (int)scps__json_length(jt);
  st->tables = calloc((size_t)st->n_tables, sizeof *st->tables);
  if (!st->tables) return scps_error_set(m->err, SCPS_ENOMEM, "'%s': out of memory", m->path);
  for (int i = 0; i < st->n_tables; i++) {
    const scps_json *x = scps__json_at(jt, (size_t)i);
    scps_ckpt_table *t = &st->tables[i];
    if ((rc = m_name(m, x, "name", t->name, sizeof t->name))) return rc;
    t->spec = scps__find_table(mf->specs->tables, mf->specs->n_tables, t->name);
    if (t->spec < 0)
      return bad(m, "stack '%s' lists table '%s', which its specs lack", st->name, t->name);
    if ((rc = m_int(m, x, "row_offset", 0, st->rows_per_sc - 1, &v))) return rc;
    t->row_offset = v;
    if ((rc = m_int(m, x, "rows", 1, st->rows_per_sc - t->row_offset, &v))) return rc;
    t->rows = v;
    if ((rc = m_int(m, x, "rotation", 0, num_sc - 1, &v))) return rc;
    t->rotation = (int32_t)v;
    const scps_table_spec *spec = &mf->specs->tables[t->spec];
    if (t->rows * num_sc < spec->vocabulary_size || spec->embedding_dim > st->dim)
      return bad(m, "table '%s' does not fit its place in stack '%s'", t->name, st->name);
    /* Loading writes every slot region the file holds into the engine's
     * slots, which are as many as the optimizer's. */
    int want = scps__optimizer_num_slots(spec->optimizer.type);
    if (st->num_slots != want)
      return bad(m, "stack '%s' has %d slots, but table '%s' (%s) needs %d", st->name, st->num_slots, t->name,
                 scps__optimizer_name(spec->optimizer.type), want);
    /* The data is in the storage formats the tables declare (validated
     * with the specs), which a stack's tables share. */
    for (int a = 0; a <= SCPS_MAX_SLOTS; a++) {
      scps_storage_format f;
      if (scps__storage_parse(a ? spec->slot_formats[a - 1] : spec->storage_format, &f, NULL))
        f.kind = SCPS_STORAGE_F32;
      if (i == 0) st->formats[a] = f;
      else if (!scps__storage_equal(&f, &st->formats[a]))
        return bad(m, "stack '%s': table '%s' declares another storage format than table '%s'", st->name, t->name,
                   st->tables[0].name);
    }
  }
  return 0;
}

static int parse_manifest(const char *path, const scps_json *root, scps_ckpt_manifest *mf, scps_error *err) {
  mreader m = {path, err};
  int64_t v;
  int rc;
  if (scps__json_typeof(root) != SCPS_JSON_OBJECT) return bad(&m, "not a JSON object");
  if ((rc = m_int(&m, root, "format", 1, INT32_MAX, &mf->format))) return rc;
  if (mf->format != SCPS_CHECKPOINT_FORMAT)
    return scps_error_set(err, SCPS_EPARSE, "'%s': format %lld, this build reads format %d", path,
                          (long long)mf->format, SCPS_CHECKPOINT_FORMAT);
  if ((rc = m_int(&m, root, "step", 0, SCPS_JSON_INT_MAX, &mf->step))) return rc;
  if ((rc = m_fingerprint(&m, root, mf))) return rc;
  const scps_json *jt = scps__json_get(root, "topology");
  if (scps__json_typeof(jt) != SCPS_JSON_OBJECT) return bad(&m, "'topology' must be an object");
  if ((rc = m_int(&m, jt, "num_processes", 1, 1024, &v))) return rc;
  mf->topology.num_processes = (int32_t)v;
  if ((rc = m_int(&m, jt, "sc_per_process", 1, 64, &v))) return rc;
  mf->topology.sc_per_process = (int32_t)v;
  if ((rc = m_int(&m, jt, "sc_memory_bytes", 1, SCPS_JSON_INT_MAX, &v))) return rc;
  mf->topology.sc_memory_bytes = v;
  if ((rc = m_int(&m, root, "process_index", 0, mf->topology.num_processes - 1, &mf->process)))
    return rc;
  const int32_t num_sc = mf->topology.num_processes * mf->topology.sc_per_process;

  scps_error local;
  if (scps__json_typeof(scps__json_get(root, "specs")) != SCPS_JSON_OBJECT)
    return bad(&m, "'specs' must be an object");
  if ((rc = scps__workload_from_json(scps__json_get(root, "specs"), &mf->specs, &local)))
    return scps_error_set(err, SCPS_EPARSE, "'%s': specs: %s", path, local.msg);

  const scps_json *js = m_array(&m, root, "stacks", MAX_STACKS);
  if (!js) return SCPS_EPARSE;
  mf->n_stacks = (int)scps__json_length(js);
  mf->stacks = calloc((size_t)mf->n_stacks, sizeof *mf->stacks);
  if (!mf->stacks) return scps_error_set(err, SCPS_ENOMEM, "'%s': out of memory", path);
  for (int s = 0; s < mf->n_stacks; s++)
    if ((rc = parse_stack(&m, scps__json_at(js, (size_t)s), mf, num_sc, &mf->stacks[s]))) return rc;
  /* Every table in exactly one stack, or rows would be loaded twice or not at all. */
  int *seen = calloc((size_t)mf->specs->n_tables, sizeof *seen);
  if (!seen) return scps_error_set(err, SCPS_ENOMEM, "'%s': out of memory", path);
  for (int s = 0; s < mf->n_stacks; s++)
    for (int i = 0; i < mf->stacks[s].n_tables; i++) seen[mf->stacks[s].tables[i].spec]++;
  for (int t = 0; t < mf->specs->n_tables && !rc; t++)
    if (seen[t] != 1)
      rc = scps_error_set(err, SCPS_EPARSE, "'%s': table '%s' is in %d stacks, not 1", path,
                          mf->specs->tables[t].name, seen[t]);
  free(seen);
  if (rc) return rc;

  /* Exactly one file per (stack, SparseCore of this process). */
  const size_t want = (size_t)mf->n_stacks * (size_t)mf->topology.sc_per_process;
  const scps_json *jf = m_array(&m, root, "files", want);
  if (!jf) return SCPS_EPARSE;
  if (scps__json_length(jf) != want)
    return bad(&m, "'files' lists %zu files, expected %zu", scps__json_length(jf), want);
  mf->n_files = (int)want;
  mf->files = calloc(want, sizeof *mf->files);
  if (!mf->files) return scps_error_set(err, SCPS_ENOMEM, "'%s': out of memory", path);
  const int32_t first_sc = (int32_t)mf->process * mf->topology.sc_per_process;
  for (int i = 0; i < mf->n_files; i++) {
    const scps_json *x = scps__json_at(jf, (size_t)i);
    scps_ckpt_datafile *f = &mf->files[i];
    if ((rc = m_int(&m, x, "stack", 0, mf->n_stacks - 1, &v))) return rc;
    f->stack = (int)v;
    if ((rc = m_int(&m, x, "sc", first_sc, first_sc + mf->topology.sc_per_process - 1, &v))) return rc;
    f->sc = (int32_t)v;
    const scps_ckpt_stack *st = &mf->stacks[f->stack];
    if ((rc = m_int(&m, x, "bytes", 0, SCPS_JSON_INT_MAX, &f->bytes))) return rc;
    if (f->bytes != scps__ckpt_manifest_shard_bytes(st))
      return bad(&m, "file %d: %lld bytes, stack '%s' needs %lld", i,
               (long long)f->bytes, st->name, (long long)scps__ckpt_manifest_shard_bytes(st));
    /* Names are derived, never taken from the file: a manifest cannot point outside its directory. */
    char name[FILE_NAME_CAP];
    scps__ckpt_manifest_data_name(f->stack, f->sc, f->name);
    if ((rc = m_name(&m, x, "name", name, sizeof name))) return rc;
    if (strcmp(name, f->name))
      return bad(&m, "file %d is named '%s', expected '%s'", i, name, f->name);
    const char *hex = scps__json_string(scps__json_get(x, "xxh64"), NULL);
    char *end = NULL;
    if (hex && strlen(hex) == 16) f->xxh64 = strtoull(hex, &end, 16);
    if (!hex || strlen(hex) != 16 || !end || *end)
      return bad(&m, "file '%s': 'xxh64' must be 16 hex digits", f->name);
  }
  return 0;
}

int scps__ckpt_manifest_load_at(int dirfd, const char *dir, int32_t process, scps_ckpt_manifest *mf,
                               scps_error *err) {
  char path[PATH_CAP], name[FILE_NAME_CAP];
  scps__ckpt_manifest_name(process, name);
  int rc = scps__ckpt_file_join(path, sizeof path, dir, name, err);
  if (rc) return rc;
  char *text = NULL;
  size_t len = 0;
  if ((rc = read_text_at(dirfd, dirfd == AT_FDCWD ? path : name, path, &text, &len, err))) {
    if (rc == SCPS_ENOENT)
      scps_error_set(err, SCPS_ENOENT, "checkpoint '%s' is incomplete: '%s' is missing", dir, path);
    return rc;
  }
  if ((rc = check_manifest_sum(path, text, len, err))) {
    free(text);
    return rc;
  }
  scps_json *root;
  scps_error local;
  rc = scps__json_parse(text, len, &root, &local);
  free(text);
  if (rc) return scps_error_set(err, SCPS_EPARSE, "'%s': %s", path, local.msg);
  rc = parse_manifest(path, root, mf, err);
  scps__json_destroy(root);
  if (!rc && mf->process != process)
    rc = scps_error_set(err, SCPS_EPARSE, "'%s' says it is process %lld's", path, (long long)mf->process);
  return rc;
}

int scps__ckpt_manifest_load(const char *dir, int32_t process, scps_ckpt_manifest *mf, scps_error *err) {
  return scps__ckpt_manifest_load_at(AT_FDCWD, dir, process, mf, err);
}

static int stacks_equal(const scps_ckpt_manifest *a, const scps_ckpt_manifest *b) {
  if (a->n_stacks != b->n_stacks) return 0;
  for (int s = 0; s < a->n_stacks; s++) {
    const scps_ckpt_stack *x = &a->stacks[s], *y = &b->stacks[s];
    if (strcmp(x->name, y->name) || x->dim != y->dim || x->rows_per_sc != y->rows_per_sc ||
        x->num_slots != y->num_slots || x->max_ids != y->max_ids ||
        x->max_unique_ids != y->max_unique_ids || x->n_tables != y->n_tables)
      return 0;
    for (int i = 0; i < x->n_tables; i++)
      if (strcmp(x->tables[i].name, y->tables[i].name) ||
          x->tables[i].row_offset != y->tables[i].row_offset ||
          x->tables[i].rows != y->tables[i].rows || x->tables[i].rotation != y->tables[i].rotation)
        return 0;
  }
  return 1;
}

int scps__ckpt_manifest_cross_check(const char *dir, const scps_ckpt_manifest *m0, const scps_ckpt_manifest *mp,
                                   int32_t p, scps_error *err) {
  char msg[512];
  if (mp->step != m0->step)
    return scps_error_set(err, SCPS_EMISMATCH, "'%s': manifest.p%d.json is of step %lld, manifest.p0.json of %lld",
                          dir, p, (long long)mp->step, (long long)m0->step);
  if (mp->has_fingerprint != m0->has_fingerprint ||
      memcmp(mp->fingerprint, m0->fingerprint, sizeof mp->fingerprint))
    return scps_error_set(err, SCPS_EMISMATCH, "'%s': manifest.p%d.json and manifest.p0.json name different "
                          "clusters (" FINGERPRINT_KEY ")", dir, p);
  const scps_workload *a = m0->specs, *b = mp->specs;
  if (scps__specs_diff(&m0->topology, a->tables, a->n_tables, a->features, a->n_features,
                      &mp->topology, b->tables, b->n_tables, b->features, b->n_features,
                      "manifest.p0.json", "other", msg, sizeof msg))
    return scps_error_set(err, SCPS_EMISMATCH, "'%s': manifest.p%d.json differs: %s", dir, p, msg);
  if (!stacks_equal(m0, mp))
    return scps_error_set(err, SCPS_EMISMATCH, "'%s': manifest.p%d.json and manifest.p0.json describe different stacks",
                          dir, p);
  return 0;
}

int scps__ckpt_manifest_indices(int dfd, const char *dir, int32_t *out, int cap, int *n, scps_error *err) {
  *n = 0;
  int rc = 0;
  DIR *d = scps__ckpt_file_entries(dfd, dir, &rc, err);
  if (!d) return rc;
  struct dirent *de;
  const size_t plen = strlen(SCPS_CKPT_MANIFEST_PREFIX);
  while ((de = readdir(d)) && *n < cap) {
    const char *x = de->d_name;
    if (strncmp(x, SCPS_CKPT_MANIFEST_PREFIX, plen)) continue;
    size_t digits = strspn(x + plen, "0123456789");
    if (digits < 1 || digits > 4 || strcmp(x + plen + digits, ".json")) continue;
    out[(*n)++] = (int32_t)atoi(x + plen);
  }
  closedir(d);
  return 0;
}
