/* sync_file_range (Linux) */
#define _GNU_SOURCE
#include "scps_checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "scps_clock.h"
#include "scps_confine.h"
#include "scps_hash64.h"
#include "scps_json.h"
#include "scps_jsonw.h"
#include "scps_workload.h"

/* Data files are the shards' memory as it is: float32 in host order. */
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "scps checkpoint files are little-endian; this host is not"
#endif

/* Every read and write moves this much per call: large enough that syscall
 * cost vanishes, small enough that the chunk just hashed is still in cache
 * when write() copies it (or read() has just put it there). */
#define IO_CHUNK ((size_t)4 << 20)
/* A manifest is a few KiB per stack; anything larger is not one of ours. */
#define MANIFEST_MAX ((size_t)64 << 20)
#define MAX_STACKS 65536
#define PATH_CAP 4096
#define FILE_NAME_CAP 64
#define STEP_PREFIX "step-"
#define MANIFEST_PREFIX "manifest.p"
/* The manifest member naming the cluster that wrote it (64 hex digits). */
#define FINGERPRINT_KEY "config_fingerprint"

/* ---- the checkpoint's own description of where rows live ---- */

typedef struct ck_table {
  char name[SCPS_NAME_MAX];
  int spec;            /* index into specs->tables */
  int64_t row_offset;  /* first row of the table in each shard of its stack */
  int64_t rows;        /* rows per shard = padded vocabulary / N */
  int32_t rotation;
} ck_table;

typedef struct ck_stack {
  char name[SCPS_STACK_NAME_MAX];
  int32_t dim;
  int64_t rows_per_sc;
  int32_t num_slots;
  int32_t max_ids, max_unique_ids;
  int n_tables;
  ck_table *tables;
} ck_stack;

typedef struct ck_file {
  char name[FILE_NAME_CAP];
  int stack;
  int32_t sc;
  int64_t bytes;
  uint64_t xxh64;
} ck_file;

struct scps_checkpoint {
  char dir[PATH_CAP];
  int64_t step;
  bool has_fingerprint;
  uint8_t fingerprint[SCPS_CHECKPOINT_FINGERPRINT_BYTES];
  scps_topology topology;
  int32_t num_sc;
  scps_workload *specs;
  int n_stacks;
  ck_stack *stacks;
  ck_file *files; /* [n_stacks * num_sc], index stack * num_sc + sc */
  /* Opened by scps_checkpoint_open_part: only process part_process's
   * manifest was read, and only its files are in files. */
  bool is_part;
  int32_t part_process;
};

static int64_t region_bytes(const ck_stack *s) {
  return s->rows_per_sc * s->dim * (int64_t)sizeof(float);
}

static void data_file_name(int stack, int32_t sc, char out[FILE_NAME_CAP]) {
  snprintf(out, FILE_NAME_CAP, "%d.sc%d.bin", stack, sc);
}

static void step_dir_name(const char *root, int64_t step, char *out, size_t cap) {
  snprintf(out, cap, "%s/" STEP_PREFIX "%012lld", root, (long long)step);
}

static int path_join(char *out, size_t cap, const char *dir, const char *name, scps_error *err) {
  int n = snprintf(out, cap, "%s/%s", dir, name);
  if (n < 0 || (size_t)n >= cap)
    return scps_error_set(err, SCPS_EINVAL, "path '%s/%s' is longer than %zu bytes", dir, name,
                          cap - 1);
  return 0;
}

static int io_error(scps_error *err, int e, const char *what, const char *path) {
  int code = (e == ENOSPC || e == EFBIG || e == EDQUOT) ? SCPS_ENOSPC : SCPS_EIO;
  return scps_error_set(err, code, "%s '%s': %s", what, path, strerror(e));
}

/* ---- file system helpers ---- */

static int fsync_fd(int fd, const char *dir, scps_error *err) {
  return fsync(fd) ? io_error(err, errno, "cannot fsync directory", dir) : 0;
}

/* mkdir -p: every missing component of path. */
static int make_dirs(const char *path, scps_error *err) {
  char buf[PATH_CAP];
  size_t n = strlen(path);
  if (n == 0 || n >= sizeof buf)
    return scps_error_set(err, SCPS_EINVAL, "checkpoint directory '%s': empty or too long", path);
  memcpy(buf, path, n + 1);
  for (size_t i = 1; i <= n; i++) {
    if (buf[i] != '/' && buf[i] != '\0') continue;
    char c = buf[i];
    buf[i] = '\0';
    if (mkdir(buf, 0755) && errno != EEXIST) return io_error(err, errno, "cannot create directory", buf);
    struct stat st;
    if (stat(buf, &st)) return io_error(err, errno, "cannot stat", buf);
    if (!S_ISDIR(st.st_mode)) return io_error(err, ENOTDIR, "cannot create directory", buf);
    buf[i] = c;
  }
  return 0;
}

/* Reads exactly len bytes; a short file is corruption (its size was checked
 * when the checkpoint was opened, so it changed since). */
static int read_all(int fd, void *data, size_t len, scps_hash64_ctx *h, const char *path,
                    scps_error *err) {
  char *p = data;
  while (len > 0) {
    size_t chunk = len < IO_CHUNK ? len : IO_CHUNK;
    size_t done = 0;
    while (done < chunk) {
      ssize_t r = read(fd, p + done, chunk - done);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return io_error(err, errno, "cannot read", path);
      if (r == 0) return scps_error_set(err, SCPS_ECORRUPT, "'%s' is truncated", path);
      done += (size_t)r;
    }
    if (h) scps_hash64_update(h, p, chunk);
    p += chunk;
    len -= chunk;
  }
  return 0;
}

static int open_read(const char *path, int64_t want_bytes, int *fd_out, scps_error *err) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return errno == ENOENT ? scps_error_set(err, SCPS_ENOENT, "checkpoint file '%s' is missing", path)
                           : io_error(err, errno, "cannot open", path);
  struct stat st;
  if (fstat(fd, &st)) {
    int rc = io_error(err, errno, "cannot stat", path);
    close(fd);
    return rc;
  }
  if (st.st_size != want_bytes) {
    close(fd);
    return scps_error_set(err, SCPS_ECORRUPT, "'%s' has %lld bytes, its manifest says %lld", path,
                          (long long)st.st_size, (long long)want_bytes);
  }
  (void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  *fd_out = fd;
  return 0;
}

static int checksum_error(scps_error *err, const char *path, uint64_t got, uint64_t want) {
  return scps_error_set(err, SCPS_ECORRUPT, "'%s': checksum %016" PRIx64 ", manifest says %016" PRIx64,
                        path, got, want);
}

/* ---- one file per core ---- */

/* Data files are independent (each is one SparseCore's regions, and no two
 * files fill the same engine row), so saving and loading run one file per
 * thread: a single thread alone can neither hash nor copy at the memory
 * bandwidth the machine has, nor keep the disk busy while it hashes. */
#define MAX_FILE_THREADS 16

typedef int (*file_fn)(void *ctx, int index, scps_error *err);

typedef struct file_pool {
  file_fn fn;
  void *ctx;
  int n;
  atomic_int next;
  atomic_bool failed;
  int *rcs;
  scps_error *errs;
} file_pool;

static void *file_pool_main(void *arg) {
  file_pool *fp = arg;
  for (int i; !atomic_load(&fp->failed) && (i = atomic_fetch_add(&fp->next, 1)) < fp->n;)
    if ((fp->rcs[i] = fp->fn(fp->ctx, i, &fp->errs[i]))) atomic_store(&fp->failed, true);
  return NULL;
}

/* Runs fn(ctx, i) for i in [0, n) on up to one thread per online CPU (the
 * caller's among them); after a failure no further file starts. The error
 * is that of the lowest failed index. */
static int for_each_file(int n, file_fn fn, void *ctx, scps_error *err) {
  file_pool fp = {.fn = fn, .ctx = ctx, .n = n};
  atomic_init(&fp.next, 0);
  atomic_init(&fp.failed, false);
  fp.rcs = calloc((size_t)(n ? n : 1), sizeof *fp.rcs);
  fp.errs = calloc((size_t)(n ? n : 1), sizeof *fp.errs);
  if (!fp.rcs || !fp.errs) {
    free(fp.rcs);
    free(fp.errs);
    return scps_error_set(err, SCPS_ENOMEM, "checkpoint: out of memory for %d files", n);
  }
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  int threads = cpus < 1 ? 1 : cpus > MAX_FILE_THREADS ? MAX_FILE_THREADS : (int)cpus;
  if (threads > n) threads = n;
  pthread_t th[MAX_FILE_THREADS];
  bool started[MAX_FILE_THREADS] = {false};
  for (int t = 1; t < threads; t++) started[t] = pthread_create(&th[t], NULL, file_pool_main, &fp) == 0;
  file_pool_main(&fp);
  for (int t = 1; t < threads; t++)
    if (started[t]) pthread_join(th[t], NULL);
  int rc = 0;
  for (int i = 0; i < n && !rc; i++)
    if ((rc = fp.rcs[i]) && err) *err = fp.errs[i];
  free(fp.rcs);
  free(fp.errs);
  return rc;
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
  snprintf(hex, sizeof hex, "%016" PRIx64, scps_hash64(text, len, 0));
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
  uint64_t got = scps_hash64(text, len, 0);
  memcpy(digits, want, CHECKSUM_HEX);
  if (*end || strspn(want, "0123456789abcdef") != CHECKSUM_HEX)
    return scps_error_set(err, SCPS_ECORRUPT, "'%s': checksum '%s' is not 16 hex digits", path, want);
  if (got != w)
    return scps_error_set(err, SCPS_ECORRUPT, "'%s': checksum %016" PRIx64 ", its text hashes to %016" PRIx64,
                          path, w, got);
  return 0;
}

/* ---- save ---- */

/* Writes one file as <path>.tmp, fsyncs and renames it. The tmp is removed
 * on failure. */
typedef struct out_file {
  char path[PATH_CAP];
  char tmp[PATH_CAP + 8];
  int fd;
  off_t written;
  /* The names the *at calls use, relative to dirfd: path and tmp when dirfd
   * is AT_FDCWD, the bare file names when it is a directory descriptor. */
  int dirfd;
  const char *at_path, *at_tmp;
  char name[FILE_NAME_CAP], name_tmp[FILE_NAME_CAP + 8];
} out_file;

/* Writes len bytes in IO_CHUNK pieces, hashing each just before write()
 * copies it (while it is still in cache), and asks the kernel to start
 * writing each piece back at once: the disk then works while the next
 * pieces are hashed and copied, and fsync waits only for the last ones
 * instead of for the whole file (dirty pages otherwise sit until the
 * kernel's background threshold, ~2 GB here). */
static int write_all(out_file *o, const void *data, size_t len, scps_hash64_ctx *h, scps_error *err) {
  const char *p = data;
  while (len > 0) {
    size_t chunk = len < IO_CHUNK ? len : IO_CHUNK;
    if (h) scps_hash64_update(h, p, chunk);
    size_t done = 0;
    while (done < chunk) {
      ssize_t w = write(o->fd, p + done, chunk - done);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return io_error(err, errno, "cannot write", o->tmp);
      done += (size_t)w;
    }
#ifdef SYNC_FILE_RANGE_WRITE
    (void)sync_file_range(o->fd, o->written, (off_t)chunk, SYNC_FILE_RANGE_WRITE);
#endif
    o->written += (off_t)chunk;
    p += chunk;
    len -= chunk;
  }
  return 0;
}

/* Creates dir/name.tmp; dirfd is dir opened, or AT_FDCWD. Whatever had
 * the temporary's name is removed first and the file created with O_EXCL |
 * O_NOFOLLOW: a symlink or hard link planted there is never written
 * through. */
static int out_open_at(out_file *o, int dirfd, const char *dir, const char *name, scps_error *err) {
  int rc = path_join(o->path, sizeof o->path, dir, name, err);
  if (rc) return rc;
  snprintf(o->tmp, sizeof o->tmp, "%s.tmp", o->path);
  snprintf(o->name, sizeof o->name, "%s", name);
  snprintf(o->name_tmp, sizeof o->name_tmp, "%s.tmp", name);
  o->dirfd = dirfd;
  o->at_path = dirfd == AT_FDCWD ? o->path : o->name;
  o->at_tmp = dirfd == AT_FDCWD ? o->tmp : o->name_tmp;
  o->written = 0;
  if (unlinkat(dirfd, o->at_tmp, 0) && errno != ENOENT) return io_error(err, errno, "cannot remove", o->tmp);
  o->fd = openat(dirfd, o->at_tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (o->fd < 0) return io_error(err, errno, "cannot create", o->tmp);
  return 0;
}

static int out_open(out_file *o, const char *dir, const char *name, scps_error *err) {
  return out_open_at(o, AT_FDCWD, dir, name, err);
}

/* Makes the temporary file durable and closes it; it keeps its .tmp name. */
static int out_sync(out_file *o, scps_error *err) {
  int rc = 0;
  if (fsync(o->fd)) rc = io_error(err, errno, "cannot fsync", o->tmp);
  if (close(o->fd) && !rc) rc = io_error(err, errno, "cannot close", o->tmp);
  o->fd = -1;
  if (rc) unlinkat(o->dirfd, o->at_tmp, 0);
  return rc;
}

static int out_commit(out_file *o, scps_error *err) {
  int rc = out_sync(o, err);
  if (!rc && renameat(o->dirfd, o->at_tmp, o->dirfd, o->at_path)) {
    rc = io_error(err, errno, "cannot rename to", o->path);
    unlinkat(o->dirfd, o->at_tmp, 0);
  }
  return rc;
}

static void out_abort(out_file *o) {
  if (o->fd >= 0) close(o->fd);
  o->fd = -1;
  if (o->at_tmp) unlinkat(o->dirfd, o->at_tmp, 0);
}

static void write_manifest(scps_jsonw *w, const scps_layout *l, int32_t process, int64_t step,
                           const scps_checkpoint_limits *limits, const ck_file *files,
                           int n_files, const scps_checkpoint_owner *own) {
  const scps_topology *t = &l->topology;
  scps_jsonw_printf(w, "{\"format\": %d, \"step\": %lld, \"process_index\": %d,\n",
                    SCPS_CHECKPOINT_FORMAT, (long long)step, process);
  if (own && own->has_fingerprint) {
    scps_jsonw_printf(w, " \"" FINGERPRINT_KEY "\": \"");
    for (int i = 0; i < SCPS_CHECKPOINT_FINGERPRINT_BYTES; i++) scps_jsonw_printf(w, "%02x", own->fingerprint[i]);
    scps_jsonw_printf(w, "\",\n");
  }
  scps_jsonw_printf(w,
                    " \"topology\": {\"num_processes\": %d, \"sc_per_process\": %d, "
                    "\"sc_memory_bytes\": %lld},\n \"stacks\": [",
                    t->num_processes, t->sc_per_process, (long long)t->sc_memory_bytes);
  for (int s = 0; s < l->n_stacks; s++) {
    const scps_stack_layout *st = &l->stacks[s];
    scps_jsonw_printf(w, "%s\n  {\"name\": ", s ? "," : "");
    scps_jsonw_string(w, st->name);
    scps_jsonw_printf(w,
                      ", \"dim\": %d, \"rows_per_sc\": %lld, \"slots\": %d, "
                      "\"max_ids_per_partition\": %d, \"max_unique_ids_per_partition\": %d,\n"
                      "   \"tables\": [",
                      st->dim, (long long)st->rows_per_sc, scps_optimizer_num_slots(st->optimizer.type),
                      limits ? limits[s].max_ids_per_partition : st->max_ids_per_partition,
                      limits ? limits[s].max_unique_ids_per_partition
                             : st->max_unique_ids_per_partition);
    for (int i = 0; i < st->n_tables; i++) {
      const scps_table_layout *tl = &l->tables[st->tables[i]];
      scps_jsonw_printf(w, "%s{\"name\": ", i ? ", " : "");
      scps_jsonw_string(w, l->table_specs[st->tables[i]].name);
      scps_jsonw_printf(w, ", \"row_offset\": %lld, \"rows\": %lld, \"rotation\": %d}",
                        (long long)tl->row_offset_in_shard, (long long)(tl->padded_vocab / l->num_sc),
                        tl->shard_rotation);
    }
    scps_jsonw_printf(w, "]}");
  }
  scps_jsonw_printf(w, "],\n \"files\": [");
  for (int i = 0; i < n_files; i++)
    scps_jsonw_printf(w, "%s\n  {\"name\": \"%s\", \"stack\": %d, \"sc\": %d, \"bytes\": %lld, "
                         "\"xxh64\": \"%016" PRIx64 "\"}",
                      i ? "," : "", files[i].name, files[i].stack, files[i].sc,
                      (long long)files[i].bytes, files[i].xxh64);
  scps_jsonw_printf(w, "],\n \"specs\": ");
}

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

static int64_t region_bytes_of(const scps_stack_layout *st) {
  return st->rows_per_sc * st->dim * (int64_t)sizeof(float);
}

struct scps_checkpoint_snapshot {
  const scps_engine *e;
  char *base;      /* one anonymous mapping of `mapped` bytes */
  size_t mapped;
  int n_files;
  size_t *offset;  /* [n_files + 1]: file i's bytes at base + offset[i], in save order */
};

typedef struct save_ctx {
  scps_engine *e;
  const char *dir;
  int dirfd;                             /* dir, opened */
  const scps_checkpoint_snapshot *snap;  /* NULL: write from the engine */
  ck_file *files;
} save_ctx;

/* Writes files[i] (its stack and SparseCore set) under its .tmp name and
 * records its size and checksum; scps_checkpoint_save renames it. */
static int save_file(void *arg, int i, scps_error *err) {
  save_ctx *x = arg;
  ck_file *f = &x->files[i];
  const scps_layout *l = scps_engine_layout(x->e);
  const scps_stack_layout *st = &l->stacks[f->stack];
  const int32_t ls = f->sc - scps_engine_process_index(x->e) * l->topology.sc_per_process;
  const size_t region = (size_t)region_bytes_of(st);
  const int slots = scps_optimizer_num_slots(st->optimizer.type);
  out_file o = {.fd = -1};
  int rc = out_open_at(&o, x->dirfd, x->dir, f->name, err);
  if (rc) return rc;
  scps_hash64_ctx h;
  scps_hash64_init(&h, 0);
  if (x->snap) {
    rc = write_all(&o, x->snap->base + x->snap->offset[i], x->snap->offset[i + 1] - x->snap->offset[i], &h, err);
  } else {
    rc = write_all(&o, scps_engine_shard(x->e, f->stack, ls), region, &h, err);
    for (int k = 0; k < slots && !rc; k++)
      rc = write_all(&o, scps_engine_slot(x->e, f->stack, ls, k), region, &h, err);
  }
  if (!rc) rc = out_sync(&o, err);
  if (rc) {
    out_abort(&o);
    return rc;
  }
  f->bytes = (int64_t)region * (1 + slots);
  f->xxh64 = scps_hash64_digest(&h);
  return 0;
}

int scps_checkpoint_save(const scps_engine *e, const char *root, int64_t step,
                         const scps_checkpoint_limits *limits, scps_checkpoint_stats *stats,
                         scps_error *err) {
  if (step < 0) return scps_error_set(err, SCPS_EINVAL, "checkpoint step %lld is negative", (long long)step);
  int rc = check_limits(scps_engine_layout(e), limits, err);
  if (!rc) rc = make_dirs(root, err);
  if (rc) return rc;
  int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return io_error(err, errno, "cannot open directory", root);
  rc = scps_checkpoint_save_at(fd, root, e, step, limits, NULL, stats, err);
  close(fd);
  return rc;
}

/* SCPS_EMISMATCH when the step directory dfd holds a manifest that verifies
 * as another cluster's (see "ownership" below). */
static int refuse_foreign(int dfd, const char *dir, const scps_checkpoint_owner *own, scps_error *err);

int scps_checkpoint_save_at(int root_fd, const char *root, const scps_engine *e, int64_t step,
                            const scps_checkpoint_limits *limits, const scps_checkpoint_save_opts *opts,
                            scps_checkpoint_stats *stats, scps_error *err) {
  double t0 = scps_clock_s();
  const scps_layout *l = scps_engine_layout(e);
  const int32_t S = l->topology.sc_per_process, p = scps_engine_process_index(e);
  /* The engine's accessors hand out writable pointers; save only reads them. */
  scps_engine *me = (scps_engine *)e;
  const scps_checkpoint_snapshot *snap = opts ? opts->snapshot : NULL;
  const scps_checkpoint_owner *own = opts ? opts->owner : NULL;
  if (step < 0) return scps_error_set(err, SCPS_EINVAL, "checkpoint step %lld is negative", (long long)step);
  if (snap && snap->e != e) return scps_error_set(err, SCPS_EINVAL, "checkpoint: the snapshot is of another engine");
  int rc = check_limits(l, limits, err);
  if (rc) return rc;
  char dir[PATH_CAP], manifest_name[FILE_NAME_CAP], step_name[FILE_NAME_CAP];
  step_dir_name(root, step, dir, sizeof dir);
  if (strlen(dir) >= sizeof dir - FILE_NAME_CAP - 8)
    return scps_error_set(err, SCPS_EINVAL, "checkpoint directory '%s' is too long", root);
  snprintf(manifest_name, sizeof manifest_name, MANIFEST_PREFIX "%d.json", p);
  snprintf(step_name, sizeof step_name, STEP_PREFIX "%012lld", (long long)step);
  int dfd = -1, os_errno;

  scps_jsonw w;
  scps_jsonw_init(&w);
  const int n_files = l->n_stacks * S;
  ck_file *files = calloc((size_t)(n_files ? n_files : 1), sizeof *files);
  char *specs = NULL;
  out_file o = {.fd = -1};
  bool attempted = false, replacing = false;
  int64_t bytes = 0;
  if (!files) return scps_error_set(err, SCPS_ENOMEM, "checkpoint: out of memory");
  /* Specs first: a set the manifest cannot describe fails before any I/O. */
  if ((rc = scps_workload_write_specs(l->table_specs, l->n_tables, l->feature_specs, l->n_features,
                                      &w, err)))
    goto out;
  specs = w.buf;
  w.buf = NULL;
  scps_jsonw_free(&w);
  if ((rc = scps_confine_subdir(root_fd, root, step_name, true, &dfd, &os_errno, err))) goto out;
  if (own && (rc = refuse_foreign(dfd, dir, own, err))) goto out;
  for (int s = 0, i = 0; s < l->n_stacks; s++)
    for (int32_t ls = 0; ls < S; ls++, i++) {
      files[i].stack = s;
      files[i].sc = p * S + ls;
      data_file_name(s, files[i].sc, files[i].name);
    }
  save_ctx x = {.e = me, .dir = dir, .dirfd = dfd, .snap = snap, .files = files};
  attempted = true;
  /* Every data file is written in full under a temporary name before
   * anything of an earlier save of this step is touched: a save that fails
   * there (a full disk, a size limit, a crash) leaves that one as it was. */
  if ((rc = for_each_file(n_files, save_file, &x, err))) goto out;
  for (int i = 0; i < n_files; i++) bytes += files[i].bytes;
  {
    /* An earlier manifest of this step would describe the files about to
     * be replaced: it goes first, durably. */
    char old[PATH_CAP];
    if ((rc = path_join(old, sizeof old, dir, manifest_name, err))) goto out;
    if (unlinkat(dfd, manifest_name, 0) == 0) {
      if ((rc = fsync_fd(dfd, dir, err))) goto out;
    } else if (errno != ENOENT) {
      rc = io_error(err, errno, "cannot remove", old);
      goto out;
    }
  }
  replacing = true;
  for (int i = 0; i < n_files; i++) {
    char path[PATH_CAP], tmp[FILE_NAME_CAP + 8];
    if ((rc = path_join(path, sizeof path, dir, files[i].name, err))) goto out;
    snprintf(tmp, sizeof tmp, "%s.tmp", files[i].name);
    if (renameat(dfd, tmp, dfd, files[i].name)) {
      rc = io_error(err, errno, "cannot rename to", path);
      goto out;
    }
  }
  if ((rc = fsync_fd(dfd, dir, err))) goto out;
  write_manifest(&w, l, p, step, limits, files, n_files, own);
  scps_jsonw_printf(&w, "%s,\n " CHECKSUM_KEY "0000000000000000\"}\n", specs);
  if ((rc = scps_jsonw_finish(&w, "checkpoint manifest", err))) goto out;
  seal_manifest(w.buf, w.len);
  if ((rc = out_open_at(&o, dfd, dir, manifest_name, err))) goto out;
  if ((rc = write_all(&o, w.buf, w.len, NULL, err))) goto out;
  if ((rc = out_commit(&o, err))) goto out;
  rc = fsync_fd(dfd, dir, err);
out:
  if (rc) {
    out_abort(&o);
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
    stats->seconds = scps_clock_s() - t0;
  }
  if (dfd >= 0) close(dfd);
  free(specs);
  free(files);
  scps_jsonw_free(&w);
  return rc;
}

/* ---- open: reading and cross-checking manifests ---- */

/* name in dirfd (path names it in messages); through no symlink unless
 * dirfd is AT_FDCWD, where name is path. */
static int read_text_at(int dirfd, const char *name, const char *path, char **out, size_t *len, scps_error *err) {
  int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | (dirfd == AT_FDCWD ? 0 : O_NOFOLLOW));
  if (fd < 0)
    return errno == ENOENT ? scps_error_set(err, SCPS_ENOENT, "'%s' is missing", path)
                           : io_error(err, errno, "cannot open", path);
  struct stat st;
  int rc = 0;
  if (fstat(fd, &st)) rc = io_error(err, errno, "cannot stat", path);
  else if (st.st_size < 0 || (uint64_t)st.st_size > MANIFEST_MAX)
    rc = scps_error_set(err, SCPS_EPARSE, "'%s': %lld bytes, more than a manifest may have (%zu)",
                        path, (long long)st.st_size, MANIFEST_MAX);
  char *buf = NULL;
  if (!rc && !(buf = malloc((size_t)st.st_size + 1))) rc = scps_error_set(err, SCPS_ENOMEM, "'%s': out of memory", path);
  if (!rc) rc = read_all(fd, buf, (size_t)st.st_size, NULL, path, err);
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
  if (scps_json_int(scps_json_get(obj, key), &v) || v < min || v > max)
    return bad(m, "'%s' must be an integer in [%lld, %lld]", key, (long long)min,
             (long long)max);
  *out = v;
  return 0;
}

static int m_name(const mreader *m, const scps_json *obj, const char *key, char *out, size_t cap) {
  size_t n;
  const char *s = scps_json_string(scps_json_get(obj, key), &n);
  if (!s || n == 0 || n >= cap || strlen(s) != n)
    return bad(m, "'%s' must be a non-empty string", key);
  memcpy(out, s, n + 1);
  return 0;
}

static const scps_json *m_array(const mreader *m, const scps_json *obj, const char *key,
                                size_t max) {
  const scps_json *v = scps_json_get(obj, key);
  if (scps_json_typeof(v) != SCPS_JSON_ARRAY || scps_json_length(v) == 0 ||
      scps_json_length(v) > max) {
    bad(m, "'%s' must be an array of 1 to %zu entries", key, max);
    return NULL;
  }
  return v;
}

/* One parsed manifest, before it is merged into the checkpoint. */
typedef struct manifest {
  int64_t format, step, process;
  bool has_fingerprint;
  uint8_t fingerprint[SCPS_CHECKPOINT_FINGERPRINT_BYTES];
  scps_topology topology;
  scps_workload *specs;
  int n_stacks;
  ck_stack *stacks;
  int n_files;
  ck_file *files;
} manifest;

/* Optional: manifests written before it existed, or without an owner, lack it. */
static int m_fingerprint(const mreader *m, const scps_json *obj, manifest *mf) {
  const scps_json *v = scps_json_get(obj, FINGERPRINT_KEY);
  if (!v) return 0;
  size_t n = 0;
  const char *hex = scps_json_string(v, &n);
  if (!hex || n != 2 * SCPS_CHECKPOINT_FINGERPRINT_BYTES || strspn(hex, "0123456789abcdef") != n)
    return bad(m, "'" FINGERPRINT_KEY "' must be %d lowercase hex digits", 2 * SCPS_CHECKPOINT_FINGERPRINT_BYTES);
  for (int i = 0; i < SCPS_CHECKPOINT_FINGERPRINT_BYTES; i++) {
    char byte[3] = {hex[2 * i], hex[2 * i + 1], '\0'};
    mf->fingerprint[i] = (uint8_t)strtoul(byte, NULL, 16);
  }
  mf->has_fingerprint = true;
  return 0;
}

static void manifest_free(manifest *mf) {
  scps_workload_destroy(mf->specs);
  for (int s = 0; s < mf->n_stacks; s++) free(mf->stacks[s].tables);
  free(mf->stacks);
  free(mf->files);
  memset(mf, 0, sizeof *mf);
}

static int parse_stack(const mreader *m, const scps_json *js, const manifest *mf, int32_t num_sc,
                       ck_stack *st) {
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
  st->n_tables = (int)scps_json_length(jt);
  st->tables = calloc((size_t)st->n_tables, sizeof *st->tables);
  if (!st->tables) return scps_error_set(m->err, SCPS_ENOMEM, "'%s': out of memory", m->path);
  for (int i = 0; i < st->n_tables; i++) {
    const scps_json *x = scps_json_at(jt, (size_t)i);
    ck_table *t = &st->tables[i];
    if ((rc = m_name(m, x, "name", t->name, sizeof t->name))) return rc;
    t->spec = scps_find_table(mf->specs->tables, mf->specs->n_tables, t->name);
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
    int want = scps_optimizer_num_slots(spec->optimizer.type);
    if (st->num_slots != want)
      return bad(m, "stack '%s' has %d slots, but table '%s' (%s) needs %d", st->name, st->num_slots, t->name,
                 scps_optimizer_name(spec->optimizer.type), want);
  }
  return 0;
}

static int parse_manifest(const char *path, const scps_json *root, manifest *mf, scps_error *err) {
  mreader m = {path, err};
  int64_t v;
  int rc;
  if (scps_json_typeof(root) != SCPS_JSON_OBJECT) return bad(&m, "not a JSON object");
  if ((rc = m_int(&m, root, "format", 1, INT32_MAX, &mf->format))) return rc;
  if (mf->format != SCPS_CHECKPOINT_FORMAT)
    return scps_error_set(err, SCPS_EPARSE, "'%s': format %lld, this build reads format %d", path,
                          (long long)mf->format, SCPS_CHECKPOINT_FORMAT);
  if ((rc = m_int(&m, root, "step", 0, SCPS_JSON_INT_MAX, &mf->step))) return rc;
  if ((rc = m_fingerprint(&m, root, mf))) return rc;
  const scps_json *jt = scps_json_get(root, "topology");
  if (scps_json_typeof(jt) != SCPS_JSON_OBJECT) return bad(&m, "'topology' must be an object");
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
  if (scps_json_typeof(scps_json_get(root, "specs")) != SCPS_JSON_OBJECT)
    return bad(&m, "'specs' must be an object");
  if ((rc = scps_workload_from_json(scps_json_get(root, "specs"), &mf->specs, &local)))
    return scps_error_set(err, SCPS_EPARSE, "'%s': specs: %s", path, local.msg);

  const scps_json *js = m_array(&m, root, "stacks", MAX_STACKS);
  if (!js) return SCPS_EPARSE;
  mf->n_stacks = (int)scps_json_length(js);
  mf->stacks = calloc((size_t)mf->n_stacks, sizeof *mf->stacks);
  if (!mf->stacks) return scps_error_set(err, SCPS_ENOMEM, "'%s': out of memory", path);
  for (int s = 0; s < mf->n_stacks; s++)
    if ((rc = parse_stack(&m, scps_json_at(js, (size_t)s), mf, num_sc, &mf->stacks[s]))) return rc;
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
  if (scps_json_length(jf) != want)
    return bad(&m, "'files' lists %zu files, expected %zu", scps_json_length(jf), want);
  mf->n_files = (int)want;
  mf->files = calloc(want, sizeof *mf->files);
  if (!mf->files) return scps_error_set(err, SCPS_ENOMEM, "'%s': out of memory", path);
  const int32_t first_sc = (int32_t)mf->process * mf->topology.sc_per_process;
  for (int i = 0; i < mf->n_files; i++) {
    const scps_json *x = scps_json_at(jf, (size_t)i);
    ck_file *f = &mf->files[i];
    if ((rc = m_int(&m, x, "stack", 0, mf->n_stacks - 1, &v))) return rc;
    f->stack = (int)v;
    if ((rc = m_int(&m, x, "sc", first_sc, first_sc + mf->topology.sc_per_process - 1, &v))) return rc;
    f->sc = (int32_t)v;
    const ck_stack *st = &mf->stacks[f->stack];
    if ((rc = m_int(&m, x, "bytes", 0, SCPS_JSON_INT_MAX, &f->bytes))) return rc;
    if (f->bytes != region_bytes(st) * (1 + st->num_slots))
      return bad(&m, "file %d: %lld bytes, stack '%s' needs %lld", i,
               (long long)f->bytes, st->name, (long long)(region_bytes(st) * (1 + st->num_slots)));
    /* Names are derived, never taken from the file: a manifest cannot point outside its directory. */
    char name[FILE_NAME_CAP];
    data_file_name(f->stack, f->sc, f->name);
    if ((rc = m_name(&m, x, "name", name, sizeof name))) return rc;
    if (strcmp(name, f->name))
      return bad(&m, "file %d is named '%s', expected '%s'", i, name, f->name);
    const char *hex = scps_json_string(scps_json_get(x, "xxh64"), NULL);
    char *end = NULL;
    if (hex && strlen(hex) == 16) f->xxh64 = strtoull(hex, &end, 16);
    if (!hex || strlen(hex) != 16 || !end || *end)
      return bad(&m, "file '%s': 'xxh64' must be 16 hex digits", f->name);
  }
  return 0;
}

/* Manifest `process` of the step directory dir, or of dirfd (dir opened)
 * when that is not AT_FDCWD. */
static int load_manifest_at(int dirfd, const char *dir, int32_t process, manifest *mf, scps_error *err) {
  char path[PATH_CAP], name[FILE_NAME_CAP];
  snprintf(name, sizeof name, MANIFEST_PREFIX "%d.json", process);
  int rc = path_join(path, sizeof path, dir, name, err);
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
  rc = scps_json_parse(text, len, &root, &local);
  free(text);
  if (rc) return scps_error_set(err, SCPS_EPARSE, "'%s': %s", path, local.msg);
  rc = parse_manifest(path, root, mf, err);
  scps_json_destroy(root);
  if (!rc && mf->process != process)
    rc = scps_error_set(err, SCPS_EPARSE, "'%s' says it is process %lld's", path, (long long)mf->process);
  return rc;
}

static int load_manifest(const char *dir, int32_t process, manifest *mf, scps_error *err) {
  return load_manifest_at(AT_FDCWD, dir, process, mf, err);
}

static int stacks_equal(const manifest *a, const manifest *b) {
  if (a->n_stacks != b->n_stacks) return 0;
  for (int s = 0; s < a->n_stacks; s++) {
    const ck_stack *x = &a->stacks[s], *y = &b->stacks[s];
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

/* Manifest p (p > 0) must describe the same checkpoint as manifest 0. */
static int cross_check(const char *dir, const manifest *m0, const manifest *mp, int32_t p,
                       scps_error *err) {
  char msg[512];
  if (mp->step != m0->step)
    return scps_error_set(err, SCPS_EMISMATCH, "'%s': manifest.p%d.json is of step %lld, manifest.p0.json of %lld",
                          dir, p, (long long)mp->step, (long long)m0->step);
  if (mp->has_fingerprint != m0->has_fingerprint ||
      memcmp(mp->fingerprint, m0->fingerprint, sizeof mp->fingerprint))
    return scps_error_set(err, SCPS_EMISMATCH, "'%s': manifest.p%d.json and manifest.p0.json name different "
                          "clusters (" FINGERPRINT_KEY ")", dir, p);
  const scps_workload *a = m0->specs, *b = mp->specs;
  if (scps_specs_diff(&m0->topology, a->tables, a->n_tables, a->features, a->n_features,
                      &mp->topology, b->tables, b->n_tables, b->features, b->n_features,
                      "manifest.p0.json", "other", msg, sizeof msg))
    return scps_error_set(err, SCPS_EMISMATCH, "'%s': manifest.p%d.json differs: %s", dir, p, msg);
  if (!stacks_equal(m0, mp))
    return scps_error_set(err, SCPS_EMISMATCH, "'%s': manifest.p%d.json and manifest.p0.json describe different stacks",
                          dir, p);
  return 0;
}

void scps_checkpoint_close(scps_checkpoint *c) {
  if (!c) return;
  scps_workload_destroy(c->specs);
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
  while (!found && (de = readdir(d))) found = !strncmp(de->d_name, STEP_PREFIX, strlen(STEP_PREFIX));
  closedir(d);
  return found;
}

/* The files manifest mf of process p lists, into c->files: each present
 * with the size listed. */
static int take_files(scps_checkpoint *c, const char *dir, const manifest *mf, int32_t p, int32_t N,
                      scps_error *err) {
  int rc = 0;
  for (int i = 0; i < mf->n_files && !rc; i++) {
    const ck_file *f = &mf->files[i];
    ck_file *slot = &c->files[(size_t)f->stack * (size_t)N + (size_t)f->sc];
    if (slot->name[0])
      rc = scps_error_set(err, SCPS_EPARSE, "'%s': manifest.p%d.json lists '%s' twice", dir, p, f->name);
    *slot = *f;
    char path[PATH_CAP];
    struct stat st;
    if (!rc) rc = path_join(path, sizeof path, dir, f->name, err);
    if (!rc && stat(path, &st))
      rc = errno == ENOENT ? scps_error_set(err, SCPS_ENOENT, "checkpoint file '%s' is missing", path)
                           : io_error(err, errno, "cannot stat", path);
    if (!rc && st.st_size != f->bytes)
      rc = scps_error_set(err, SCPS_ECORRUPT, "'%s' has %lld bytes, its manifest says %lld", path,
                          (long long)st.st_size, (long long)f->bytes);
  }
  return rc;
}

/* Ends an open: on success c takes the manifest's description (mf's
 * files are in c->files already), otherwise both are freed. */
static int finish_open(scps_checkpoint *c, manifest *mf, int32_t N, int rc, scps_checkpoint **out) {
  if (rc) {
    manifest_free(mf);
    scps_checkpoint_close(c);
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

int scps_checkpoint_open(const char *dir, scps_checkpoint **out, scps_error *err) {
  *out = NULL;
  if (strlen(dir) >= PATH_CAP - FILE_NAME_CAP - 8)
    return scps_error_set(err, SCPS_EINVAL, "checkpoint directory '%s' is too long", dir);
  struct stat sb;
  if (stat(dir, &sb))
    return errno == ENOENT ? scps_error_set(err, SCPS_ENOENT, "checkpoint directory '%s' does not exist", dir)
                           : io_error(err, errno, "cannot open checkpoint directory", dir);
  if (!S_ISDIR(sb.st_mode)) return scps_error_set(err, SCPS_EINVAL, "checkpoint '%s' is not a directory", dir);
  manifest m0 = {0};
  int rc = load_manifest(dir, 0, &m0, err);
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
    manifest_free(&m0);
    scps_checkpoint_close(c);
    return scps_error_set(err, SCPS_ENOMEM, "checkpoint '%s': out of memory", dir);
  }
  snprintf(c->dir, sizeof c->dir, "%s", dir);
  for (int32_t p = 0; p < P && !rc; p++) {
    manifest mp = {0};
    const manifest *cur = &m0;
    if (p > 0) {
      rc = load_manifest(dir, p, &mp, err);
      if (!rc) rc = cross_check(dir, &m0, &mp, p, err);
      cur = &mp;
    }
    if (!rc) rc = take_files(c, dir, cur, p, N, err);
    if (p > 0) manifest_free(&mp);
  }
  return finish_open(c, &m0, N, rc, out);
}

int scps_checkpoint_open_part(const char *dir, int32_t process, scps_checkpoint **out, scps_error *err) {
  *out = NULL;
  if (strlen(dir) >= PATH_CAP - FILE_NAME_CAP - 8)
    return scps_error_set(err, SCPS_EINVAL, "checkpoint directory '%s' is too long", dir);
  if (process < 0) return scps_error_set(err, SCPS_EINVAL, "process %d: must be >= 0", process);
  manifest mp = {0};
  int rc = load_manifest(dir, process, &mp, err);
  if (rc) return rc;
  scps_checkpoint *c = calloc(1, sizeof *c);
  const int32_t N = mp.topology.num_processes * mp.topology.sc_per_process;
  if (c) c->files = calloc((size_t)mp.n_stacks * (size_t)N, sizeof *c->files);
  if (!c || !c->files) {
    manifest_free(&mp);
    scps_checkpoint_close(c);
    return scps_error_set(err, SCPS_ENOMEM, "checkpoint '%s': out of memory", dir);
  }
  snprintf(c->dir, sizeof c->dir, "%s", dir);
  c->is_part = true;
  c->part_process = process;
  rc = take_files(c, dir, &mp, process, N, err);
  return finish_open(c, &mp, N, rc, out);
}

int64_t scps_checkpoint_bytes(const scps_checkpoint *c) {
  int64_t bytes = 0;
  for (size_t i = 0; i < (size_t)c->n_stacks * (size_t)c->num_sc; i++) bytes += c->files[i].bytes;
  return bytes;
}

int64_t scps_checkpoint_step(const scps_checkpoint *c) { return c->step; }
const scps_topology *scps_checkpoint_topology(const scps_checkpoint *c) { return &c->topology; }

void scps_checkpoint_specs(const scps_checkpoint *c, const scps_table_spec **tables, int *n_tables,
                           const scps_feature_spec **features, int *n_features) {
  *tables = c->specs->tables;
  *n_tables = c->specs->n_tables;
  *features = c->specs->features;
  *n_features = c->specs->n_features;
}

int scps_checkpoint_limits_of(const scps_checkpoint *c, const char *stack, int32_t *max_ids,
                              int32_t *max_unique_ids) {
  for (int s = 0; s < c->n_stacks; s++)
    if (!strcmp(c->stacks[s].name, stack)) {
      *max_ids = c->stacks[s].max_ids;
      *max_unique_ids = c->stacks[s].max_unique_ids;
      return 0;
    }
  return SCPS_ENOENT;
}

/* ---- reading data files ---- */

static const ck_file *file_of(const scps_checkpoint *c, int stack, int32_t sc) {
  return &c->files[(size_t)stack * (size_t)c->num_sc + (size_t)sc];
}

/* Streams one data file through a buffer, checking its checksum; visit sees
 * each buffer-full of whole rows of one region (0 = rows, 1 + k = slot k). */
typedef int (*row_visitor)(void *ctx, const scps_checkpoint *c, int stack, int32_t sc, int region,
                           int64_t first_row, int64_t n_rows, const float *data, scps_error *err);

/* One data file being read front to back, hashed as it goes. */
typedef struct data_reader {
  const ck_file *f;
  char path[PATH_CAP];
  int fd;
  scps_hash64_ctx h;
} data_reader;

static int data_open(const scps_checkpoint *c, int stack, int32_t sc, data_reader *r, scps_error *err) {
  r->f = file_of(c, stack, sc);
  scps_hash64_init(&r->h, 0);
  int rc = path_join(r->path, sizeof r->path, c->dir, r->f->name, err);
  return rc ? rc : open_read(r->path, r->f->bytes, &r->fd, err);
}

static int data_read(data_reader *r, void *dst, size_t len, scps_error *err) {
  return read_all(r->fd, dst, len, &r->h, r->path, err);
}

/* Closes the file; after a clean read the checksum must match. */
static int data_close(data_reader *r, int rc, scps_error *err) {
  close(r->fd);
  uint64_t got = scps_hash64_digest(&r->h);
  if (!rc && got != r->f->xxh64) rc = checksum_error(err, r->path, got, r->f->xxh64);
  return rc;
}

static int stream_file(const scps_checkpoint *c, int stack, int32_t sc, float *buf, size_t buf_rows,
                       row_visitor visit, void *ctx, scps_error *err) {
  const ck_stack *st = &c->stacks[stack];
  data_reader r;
  int rc = data_open(c, stack, sc, &r, err);
  if (rc) return rc;
  const size_t row_bytes = (size_t)st->dim * sizeof(float);
  for (int region = 0; region <= st->num_slots && !rc; region++)
    for (int64_t row = 0; row < st->rows_per_sc && !rc; row += (int64_t)buf_rows) {
      int64_t n = st->rows_per_sc - row < (int64_t)buf_rows ? st->rows_per_sc - row : (int64_t)buf_rows;
      rc = data_read(&r, buf, (size_t)n * row_bytes, err);
      if (!rc && visit) rc = visit(ctx, c, stack, sc, region, row, n, buf, err);
    }
  return data_close(&r, rc, err);
}

static size_t rows_per_buffer(const ck_stack *st) {
  size_t row_bytes = (size_t)st->dim * sizeof(float);
  size_t n = IO_CHUNK / row_bytes;
  return n ? n : 1;
}

/* For every table of the stack whose rows intersect [first, first + n): the
 * logical ids there, and where they sit in data. */
typedef void (*id_visitor)(void *ctx, const ck_table *t, int64_t id, const float *row);

static void for_each_id(const scps_checkpoint *c, int stack, int32_t sc, int64_t first, int64_t n,
                        const float *data, id_visitor visit, void *ctx) {
  const ck_stack *st = &c->stacks[stack];
  const int32_t N = c->num_sc;
  for (int i = 0; i < st->n_tables; i++) {
    const ck_table *t = &st->tables[i];
    const int64_t vocab = c->specs->tables[t->spec].vocabulary_size;
    int64_t lo = first > t->row_offset ? first : t->row_offset;
    int64_t hi = first + n < t->row_offset + t->rows ? first + n : t->row_offset + t->rows;
    int64_t residue = ((int64_t)sc - t->rotation) % N;
    if (residue < 0) residue += N;
    for (int64_t r = lo; r < hi; r++) {
      int64_t id = (r - t->row_offset) * N + residue;
      if (id >= vocab) break;
      visit(ctx, t, id, data + (size_t)(r - first) * (size_t)st->dim);
    }
  }
}

/* ---- load ---- */

typedef struct load_ctx {
  scps_engine *e;
  const scps_layout *l;
  int32_t p, S;
  int region;
  const int *engine_table; /* [specs->n_tables]: checkpoint spec index -> engine table */
} load_ctx;

static void load_row(void *arg, const ck_table *t, int64_t id, const float *row) {
  load_ctx *x = arg;
  const scps_layout *l = x->l;
  int te = x->engine_table[t->spec];
  int32_t sc = scps_layout_sc_of(l, te, id);
  if (scps_layout_process_of_sc(l, sc) != x->p) return;
  int stack = l->tables[te].stack;
  int32_t ls = sc - x->p * x->S;
  float *base = x->region == 0 ? scps_engine_shard(x->e, stack, ls)
                               : scps_engine_slot(x->e, stack, ls, x->region - 1);
  size_t off = (size_t)scps_layout_local_row(l, te, id) * (size_t)l->stacks[stack].dim;
  memcpy(base + off, row, sizeof(float) * (size_t)l->table_specs[te].embedding_dim);
}

static int load_rows(void *arg, const scps_checkpoint *c, int stack, int32_t sc, int region,
                     int64_t first, int64_t n, const float *data, scps_error *err) {
  load_ctx *x = arg;
  x->region = region;
  for_each_id(c, stack, sc, first, n, data, load_row, x);
  return 0;
}

/* Same number of SparseCores and the same stacks, tables, offsets and
 * rotations: every file is one of the engine's shards byte for byte. */
static bool same_placement(const scps_checkpoint *c, const scps_layout *l) {
  if (c->num_sc != l->num_sc || c->n_stacks != l->n_stacks) return false;
  for (int s = 0; s < c->n_stacks; s++) {
    const ck_stack *cs = &c->stacks[s];
    const scps_stack_layout *ls = &l->stacks[s];
    if (strcmp(cs->name, ls->name) || cs->dim != ls->dim || cs->rows_per_sc != ls->rows_per_sc ||
        cs->n_tables != ls->n_tables || cs->num_slots != scps_optimizer_num_slots(ls->optimizer.type))
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
  const int32_t sc = scps_engine_process_index(e) * scps_engine_layout(e)->topology.sc_per_process + ls;
  const ck_stack *st = &c->stacks[stack];
  data_reader r;
  int rc = data_open(c, stack, sc, &r, err);
  if (rc) return rc;
  rc = data_read(&r, scps_engine_shard(e, stack, ls), (size_t)region_bytes(st), err);
  for (int k = 0; k < st->num_slots && !rc; k++)
    rc = data_read(&r, scps_engine_slot(e, stack, ls, k), (size_t)region_bytes(st), err);
  return data_close(&r, rc, err);
}

/* Streams file i of the checkpoint (stack-major) through a buffer of its
 * own; visit may be NULL (verification only). */
static int stream_one(const scps_checkpoint *c, int i, row_visitor visit, void *ctx, scps_error *err) {
  const int stack = i / c->num_sc;
  const int32_t sc = i % c->num_sc;
  size_t buf_rows = rows_per_buffer(&c->stacks[stack]);
  float *buf = malloc(buf_rows * (size_t)c->stacks[stack].dim * sizeof(float));
  if (!buf) return scps_error_set(err, SCPS_ENOMEM, "checkpoint '%s': out of memory", c->dir);
  int rc = stream_file(c, stack, sc, buf, buf_rows, visit, ctx, err);
  free(buf);
  return rc;
}

typedef struct load_job {
  const scps_checkpoint *c;
  scps_engine *e;
  int32_t S;
  const int *engine_table;
} load_job;

static int load_direct_one(void *arg, int i, scps_error *err) {
  load_job *j = arg;
  return load_direct(j->c, j->e, i / j->S, i % j->S, err);
}

static int load_resharded_one(void *arg, int i, scps_error *err) {
  load_job *j = arg;
  const scps_layout *l = scps_engine_layout(j->e);
  load_ctx x = {.e = j->e, .l = l, .p = scps_engine_process_index(j->e), .S = j->S,
                .engine_table = j->engine_table};
  return stream_one(j->c, i, load_rows, &x, err);
}

/* A part's checkpoint has only its own process's files: the others are
 * not there to verify. */
static int verify_one(void *arg, int i, scps_error *err) {
  const scps_checkpoint *c = arg;
  if (!c->files[i].name[0]) return 0;
  return stream_one(arg, i, NULL, NULL, err);
}

int scps_checkpoint_load(const scps_checkpoint *c, scps_engine *e, scps_checkpoint_stats *stats,
                         scps_error *err) {
  double t0 = scps_clock_s();
  const scps_layout *l = scps_engine_layout(e);
  char msg[512];
  const scps_workload *w = c->specs;
  if (scps_specs_diff(&l->topology, w->tables, w->n_tables, w->features, w->n_features,
                      &l->topology, l->table_specs, l->n_tables, l->feature_specs, l->n_features,
                      "checkpoint", "engine", msg, sizeof msg))
    return scps_error_set(err, SCPS_EMISMATCH, "checkpoint '%s' does not match the engine's specs: %s",
                          c->dir, msg);
  const int32_t S = l->topology.sc_per_process, p = scps_engine_process_index(e);
  if (c->is_part && (c->part_process != p || !same_placement(c, l)))
    return scps_error_set(err, SCPS_EMISMATCH,
                          "checkpoint '%s': only process %d's part was opened; it loads only into process %d of "
                          "the same topology and stacking",
                          c->dir, c->part_process, c->part_process);
  load_job j = {.c = c, .e = e, .S = S};
  int64_t bytes = 0;
  int files = 0, rc = 0;
  if (same_placement(c, l)) {
    files = c->n_stacks * S;
    rc = for_each_file(files, load_direct_one, &j, err);
    for (int s = 0; s < c->n_stacks; s++)
      for (int32_t ls = 0; ls < S; ls++) bytes += file_of(c, s, p * S + ls)->bytes;
  } else {
    int *engine_table = calloc((size_t)w->n_tables, sizeof *engine_table);
    if (!engine_table) return scps_error_set(err, SCPS_ENOMEM, "checkpoint load: out of memory");
    for (int i = 0; i < w->n_tables; i++) engine_table[i] = scps_find_table(l->table_specs, l->n_tables, w->tables[i].name);
    j.engine_table = engine_table;
    files = c->n_stacks * c->num_sc;
    rc = for_each_file(files, load_resharded_one, &j, err);
    for (int i = 0; i < files; i++) bytes += c->files[i].bytes;
    free(engine_table);
  }
  /* What the engine knew of its values (to prove updates finite) is stale. */
  scps_engine_values_written(e);
  if (!rc && stats) {
    stats->bytes = bytes;
    stats->files = files;
    stats->seconds = scps_clock_s() - t0;
  }
  return rc;
}

int scps_checkpoint_verify(const scps_checkpoint *c, scps_checkpoint_stats *stats, scps_error *err) {
  double t0 = scps_clock_s();
  const int files = c->n_stacks * c->num_sc;
  int rc = for_each_file(files, verify_one, (void *)c, err);
  if (!rc && stats) {
    int present = 0;
    for (int i = 0; i < files; i++) present += c->files[i].name[0] != '\0';
    stats->bytes = scps_checkpoint_bytes(c);
    stats->files = present;
    stats->seconds = scps_clock_s() - t0;
  }
  return rc;
}

/* ---- export ---- */

typedef struct export_ctx {
  const char *table;
  int region;
  int32_t dim; /* embedding_dim */
  float *out;  /* [vocabulary_size x dim] */
} export_ctx;

static void export_row(void *arg, const ck_table *t, int64_t id, const float *row) {
  export_ctx *x = arg;
  if (strcmp(t->name, x->table)) return;
  memcpy(x->out + (size_t)id * (size_t)x->dim, row, sizeof(float) * (size_t)x->dim);
}

static int export_rows(void *arg, const scps_checkpoint *c, int stack, int32_t sc, int region,
                       int64_t first, int64_t n, const float *data, scps_error *err) {
  export_ctx *x = arg;
  if (region == x->region) for_each_id(c, stack, sc, first, n, data, export_row, x);
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
  char dir[PATH_CAP];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  const char *name = slash ? slash + 1 : dir;
  if (slash) *slash = '\0';
  out_file o = {.fd = -1};
  int rc = out_open(&o, slash ? (dir[0] ? dir : "/") : ".", name, err);
  if (!rc) rc = write_all(&o, header, total, NULL, err);
  if (!rc) rc = write_all(&o, data, (size_t)rows * (size_t)cols * sizeof(float), NULL, err);
  if (!rc) rc = out_commit(&o, err);
  if (rc) out_abort(&o);
  return rc;
}

int scps_checkpoint_export_table(const scps_checkpoint *c, const char *table, int slot,
                                 const char *path, scps_error *err) {
  int stack = -1;
  const ck_table *t = NULL;
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
  const ck_stack *st = &c->stacks[stack];
  const scps_table_spec *spec = &c->specs->tables[t->spec];
  if (slot < -1 || slot >= st->num_slots)
    return scps_error_set(err, SCPS_EINVAL, "table '%s' (%s) has %d optimizer slots; slot %d does not exist",
                          table, scps_optimizer_name(spec->optimizer.type), st->num_slots, slot);
  /* vocabulary x dim is at most what the table's files hold, sizes checked at open. */
  export_ctx x = {.table = table, .region = slot + 1, .dim = spec->embedding_dim};
  x.out = calloc((size_t)spec->vocabulary_size * (size_t)spec->embedding_dim, sizeof(float));
  size_t buf_rows = rows_per_buffer(st);
  float *buf = malloc(buf_rows * (size_t)st->dim * sizeof(float));
  int rc = 0;
  if (!x.out || !buf) rc = scps_error_set(err, SCPS_ENOMEM, "export of table '%s': out of memory", table);
  for (int32_t sc = 0; sc < c->num_sc && !rc; sc++)
    rc = stream_file(c, stack, sc, buf, buf_rows, export_rows, &x, err);
  if (!rc) rc = write_npy(path, x.out, spec->vocabulary_size, spec->embedding_dim, err);
  free(buf);
  free(x.out);
  return rc;
}

/* ---- convert ---- */

int scps_checkpoint_convert(const char *dir, const scps_topology *to, const char *dst_root,
                            scps_checkpoint_stats *stats, scps_error *err) {
  double t0 = scps_clock_s();
  int rc = scps_topology_validate(to, err);
  if (rc) return rc;
  scps_checkpoint *c;
  if ((rc = scps_checkpoint_open(dir, &c, err))) return rc;
  /* The conversion writes its step's directory under dst_root process by
   * process while it reads the source: into an existing one (the source's
   * own, when dst_root is its root) it would overwrite what it reads. */
  char dst[PATH_CAP];
  struct stat sb;
  step_dir_name(dst_root, c->step, dst, sizeof dst);
  if (stat(dst, &sb) == 0) {
    scps_checkpoint_close(c);
    return scps_error_set(err, SCPS_EEXIST, "convert: '%s' already exists; choose another --out root", dst);
  }
  const scps_workload *w = c->specs;
  scps_layout *l = NULL;
  scps_checkpoint_limits *limits = NULL;
  scps_checkpoint_stats total = {0};
  rc = scps_layout_create(w->tables, w->n_tables, w->features, w->n_features, to, NULL, &l, err);
  if (!rc && !(limits = calloc((size_t)l->n_stacks, sizeof *limits)))
    rc = scps_error_set(err, SCPS_ENOMEM, "convert: out of memory");
  for (int s = 0; !rc && s < l->n_stacks; s++) {
    /* A stack the source did not have (another stacking) keeps its declared limits. */
    snprintf(limits[s].stack, sizeof limits[s].stack, "%s", l->stacks[s].name);
    limits[s].max_ids_per_partition = l->stacks[s].max_ids_per_partition;
    limits[s].max_unique_ids_per_partition = l->stacks[s].max_unique_ids_per_partition;
    scps_checkpoint_limits_of(c, l->stacks[s].name, &limits[s].max_ids_per_partition,
                              &limits[s].max_unique_ids_per_partition);
  }
  for (int32_t p = 0; !rc && p < to->num_processes; p++) {
    scps_engine *e;
    scps_checkpoint_stats one;
    if ((rc = scps_engine_create(l, p, &e, err))) break;
    rc = scps_checkpoint_load(c, e, NULL, err);
    if (!rc) rc = scps_checkpoint_save(e, dst_root, c->step, limits, &one, err);
    if (!rc) {
      total.bytes += one.bytes;
      total.files += one.files;
    }
    scps_engine_destroy(e);
  }
  if (!rc && stats) {
    *stats = total;
    stats->seconds = scps_clock_s() - t0;
  }
  free(limits);
  scps_layout_destroy(l);
  scps_checkpoint_close(c);
  return rc;
}

/* ---- finding and retiring checkpoints ---- */

typedef struct step_entry {
  int64_t step;
  int open_rc; /* scps_checkpoint_open's: 0 complete, SCPS_ENOENT incomplete, others damaged */
} step_entry;

static int cmp_step_desc(const void *a, const void *b) {
  int64_t x = ((const step_entry *)a)->step, y = ((const step_entry *)b)->step;
  return x < y ? 1 : x > y ? -1 : 0;
}

/* Whether a directory entry's name is a step directory's, and its step. */
static bool parse_step_name(const char *name, int64_t *step) {
  if (strncmp(name, STEP_PREFIX, strlen(STEP_PREFIX))) return false;
  name += strlen(STEP_PREFIX);
  size_t digits = strspn(name, "0123456789");
  if (digits < 12 || digits > 18 || name[digits]) return false;
  *step = strtoll(name, NULL, 10);
  return true;
}

/* The step directories under root, newest first, each with what opening it
 * gave: 0 when complete (all manifests present, every listed file of its
 * listed size), SCPS_ENOENT when a file is missing, another code when
 * damaged. */
static int list_steps(const char *root, step_entry **out, int *n_out, scps_error *err) {
  *out = NULL;
  *n_out = 0;
  DIR *d = opendir(root);
  if (!d)
    return errno == ENOENT ? scps_error_set(err, SCPS_ENOENT, "checkpoint directory '%s' does not exist", root)
                           : io_error(err, errno, "cannot open directory", root);
  step_entry *v = NULL;
  int n = 0, cap = 0, rc = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    int64_t step;
    if (!parse_step_name(de->d_name, &step)) continue;
    if (n == cap) {
      cap = cap ? cap * 2 : 16;
      step_entry *nv = realloc(v, (size_t)cap * sizeof *v);
      if (!nv) {
        rc = scps_error_set(err, SCPS_ENOMEM, "'%s': out of memory listing checkpoints", root);
        break;
      }
      v = nv;
    }
    v[n++] = (step_entry){.step = step};
  }
  closedir(d);
  if (rc) {
    free(v);
    return rc;
  }
  if (n) qsort(v, (size_t)n, sizeof *v, cmp_step_desc);
  for (int i = 0; i < n; i++) {
    char dir[PATH_CAP];
    scps_checkpoint *c;
    step_dir_name(root, v[i].step, dir, sizeof dir);
    v[i].open_rc = scps_checkpoint_open(dir, &c, NULL);
    scps_checkpoint_close(v[i].open_rc == 0 ? c : NULL);
  }
  *out = v;
  *n_out = n;
  return 0;
}

int scps_checkpoint_list(const char *root, scps_checkpoint_entry **out, int *n, scps_error *err) {
  *out = NULL;
  *n = 0;
  step_entry *v;
  int count, rc = list_steps(root, &v, &count, err);
  if (rc) return rc;
  scps_checkpoint_entry *r = calloc((size_t)(count ? count : 1), sizeof *r);
  if (!r) {
    free(v);
    return scps_error_set(err, SCPS_ENOMEM, "'%s': out of memory listing checkpoints", root);
  }
  for (int i = 0; i < count; i++) {
    r[i].step = v[i].step;
    r[i].complete = v[i].open_rc == 0;
    step_dir_name(root, v[i].step, r[i].dir, sizeof r[i].dir);
  }
  free(v);
  *out = r;
  *n = count;
  return 0;
}

int scps_checkpoint_find_latest(const char *root, char *path, size_t cap, scps_error *err) {
  step_entry *v;
  int n, rc = list_steps(root, &v, &n, err);
  if (rc) return rc;
  rc = scps_error_set(err, SCPS_ENOENT, "no complete checkpoint under '%s'", root);
  for (int i = 0; i < n; i++) {
    /* A save cut short lacks files (skipped: the one before it is the
     * newest); a checkpoint with every file present that does not verify
     * was damaged, and restoring an older one instead would hide that. */
    if (v[i].open_rc != 0 && v[i].open_rc != SCPS_ENOENT) {
      char dir[PATH_CAP];
      step_dir_name(root, v[i].step, dir, sizeof dir);
      scps_checkpoint *c = NULL;
      scps_error why;
      int orc = scps_checkpoint_open(dir, &c, &why);
      scps_checkpoint_close(c);
      if (orc && orc != SCPS_ENOENT) {
        rc = scps_error_set(err, orc,
                            "the newest checkpoint '%s' is damaged: %s (move it aside to restore an older "
                            "one, or name one with --restore)",
                            dir, why.msg);
        break;
      }
      continue;
    }
    if (v[i].open_rc == 0) {
      char dir[PATH_CAP];
      step_dir_name(root, v[i].step, dir, sizeof dir);
      if (strlen(dir) >= cap) rc = scps_error_set(err, SCPS_EINVAL, "path '%s' does not fit %zu bytes", dir, cap);
      else {
        memcpy(path, dir, strlen(dir) + 1);
        rc = 0;
      }
      break;
    }
  }
  free(v);
  return rc;
}

/* ---- ownership ---- */

static void hex_prefix(const uint8_t *fp, char out[13]) {
  for (int i = 0; i < 6; i++) snprintf(out + 2 * i, 3, "%02x", fp[i]);
}

/* Whether a checkpoint of this fingerprint (if any), topology and specs is
 * the owner's; why says what differs when not. */
static bool owned_by(bool has_fp, const uint8_t *fp, const scps_topology *t, const scps_workload *w,
                     const scps_checkpoint_owner *own, char *why, size_t len) {
  if (has_fp && own->has_fingerprint) {
    if (!memcmp(fp, own->fingerprint, SCPS_CHECKPOINT_FINGERPRINT_BYTES)) return true;
    char theirs[13], ours[13];
    hex_prefix(fp, theirs);
    hex_prefix(own->fingerprint, ours);
    snprintf(why, len, "another cluster's (" FINGERPRINT_KEY " %s..., this cluster's %s...)", theirs, ours);
    return false;
  }
  const scps_layout *l = own->layout;
  if (!l) {
    snprintf(why, len, "its manifest carries no " FINGERPRINT_KEY " to verify it by");
    return false;
  }
  char msg[400];
  if (scps_specs_diff(t, w->tables, w->n_tables, w->features, w->n_features, &l->topology, l->table_specs,
                      l->n_tables, l->feature_specs, l->n_features, "checkpoint", "this cluster", msg, sizeof msg)) {
    snprintf(why, len, "another cluster's (%sdeclaration differs: %s)", has_fp ? "" : "no " FINGERPRINT_KEY "; its ",
             msg);
    return false;
  }
  return true;
}

bool scps_checkpoint_is_owned(const scps_checkpoint *c, const scps_checkpoint_owner *own, char *why, size_t len) {
  char local[8];
  if (!why) {
    why = local;
    len = sizeof local;
  }
  return owned_by(c->has_fingerprint, c->fingerprint, &c->topology, c->specs, own, why, len);
}

static void note(const scps_checkpoint_owner *own, const char *dir, const char *why) {
  if (own->note) own->note(own->note_ctx, dir, why);
}

/* A stream of the entries of the open directory dfd (dir names it), from
 * the first; NULL and *rc on failure. */
static DIR *entries_of(int dfd, const char *dir, int *rc, scps_error *err) {
  int fd = dup(dfd);
  DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
  if (!d) {
    *rc = io_error(err, errno, "cannot read directory", dir);
    if (fd >= 0) close(fd);
    return NULL;
  }
  rewinddir(d);
  return d;
}

/* The process indices of the manifests in the directory dfd, at most cap. */
static int manifest_indices(int dfd, const char *dir, int32_t *out, int cap, int *n, scps_error *err) {
  *n = 0;
  int rc = 0;
  DIR *d = entries_of(dfd, dir, &rc, err);
  if (!d) return rc;
  struct dirent *de;
  const size_t plen = strlen(MANIFEST_PREFIX);
  while ((de = readdir(d)) && *n < cap) {
    const char *x = de->d_name;
    if (strncmp(x, MANIFEST_PREFIX, plen)) continue;
    size_t digits = strspn(x + plen, "0123456789");
    if (digits < 1 || digits > 4 || strcmp(x + plen + digits, ".json")) continue;
    out[(*n)++] = (int32_t)atoi(x + plen);
  }
  closedir(d);
  return 0;
}

/* Whether one of the manifests in the step directory dfd verifies and is
 * not the owner's (*which, why); unverifiable ones prove nothing. */
static bool holds_foreign(int dfd, const char *dir, const scps_checkpoint_owner *own, int32_t *which, char *why,
                          size_t len) {
  int32_t idx[1024];
  int n = 0;
  if (manifest_indices(dfd, dir, idx, 1024, &n, NULL)) return false;
  bool foreign = false;
  for (int i = 0; i < n && !foreign; i++) {
    manifest mf = {0};
    if (load_manifest_at(dfd, dir, idx[i], &mf, NULL) == 0 &&
        !owned_by(mf.has_fingerprint, mf.fingerprint, &mf.topology, mf.specs, own, why, len)) {
      foreign = true;
      *which = idx[i];
    }
    manifest_free(&mf);
  }
  return foreign;
}

static int refuse_foreign(int dfd, const char *dir, const scps_checkpoint_owner *own, scps_error *err) {
  char why[700];
  int32_t p;
  if (!holds_foreign(dfd, dir, own, &p, why, sizeof why)) return 0;
  return scps_error_set(err, SCPS_EMISMATCH, "'%s' holds a checkpoint that is not this cluster's (manifest.p%d.json: %s); "
                        "it is not overwritten", dir, p, why);
}

/* ---- snapshots ---- */

static size_t snapshot_file_bytes(const scps_layout *l, int stack) {
  const scps_stack_layout *st = &l->stacks[stack];
  return (size_t)region_bytes_of(st) * (size_t)(1 + scps_optimizer_num_slots(st->optimizer.type));
}

int64_t scps_checkpoint_snapshot_bytes(const scps_engine *e) {
  const scps_layout *l = scps_engine_layout(e);
  int64_t bytes = 0;
  for (int s = 0; s < l->n_stacks; s++) bytes += (int64_t)snapshot_file_bytes(l, s) * l->topology.sc_per_process;
  return bytes;
}

/* A new snapshot's mapping, for the files of the engine's process. */
static int snapshot_map(const scps_engine *e, scps_checkpoint_snapshot **out, scps_error *err) {
  const scps_layout *l = scps_engine_layout(e);
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

/* Copies file i's regions (rows, then each slot) as save_file writes them. */
static int snapshot_file(void *arg, int i, scps_error *err) {
  scps_checkpoint_snapshot *sn = arg;
  scps_engine *e = (scps_engine *)sn->e;
  const scps_layout *l = scps_engine_layout(e);
  const int32_t S = l->topology.sc_per_process;
  const int stack = i / S;
  const int32_t ls = i % S;
  const size_t region = (size_t)region_bytes_of(&l->stacks[stack]);
  char *dst = sn->base + sn->offset[i];
  memcpy(dst, scps_engine_shard(e, stack, ls), region);
  for (int k = 0; k < scps_optimizer_num_slots(l->stacks[stack].optimizer.type); k++)
    memcpy(dst + region * (size_t)(k + 1), scps_engine_slot(e, stack, ls, k), region);
  return 0;
}

int scps_checkpoint_snapshot_take(const scps_engine *e, scps_checkpoint_snapshot **s, scps_error *err) {
  scps_checkpoint_snapshot *sn = *s;
  if (sn && sn->e != e) {
    scps_checkpoint_snapshot_free(sn);
    *s = sn = NULL;
  }
  if (!sn) {
    int rc = snapshot_map(e, &sn, err);
    if (rc) return rc;
    *s = sn;
  }
  int rc = for_each_file(sn->n_files, snapshot_file, sn, err);
  if (rc) {
    scps_checkpoint_snapshot_free(sn);
    *s = NULL;
  }
  return rc;
}

void scps_checkpoint_snapshot_idle(scps_checkpoint_snapshot *s) {
#ifdef MADV_FREE
  if (s && s->base) (void)madvise(s->base, s->mapped, MADV_FREE);
#else
  if (s && s->base) (void)madvise(s->base, s->mapped, MADV_DONTNEED);
#endif
}

void scps_checkpoint_snapshot_free(scps_checkpoint_snapshot *s) {
  if (!s) return;
  if (s->base) munmap(s->base, s->mapped);
  free(s->offset);
  free(s);
}

/* ---- the owner's checkpoints ---- */

int scps_checkpoint_find_latest_own(const char *root, const scps_checkpoint_owner *own, char *path, size_t cap,
                                    scps_error *err) {
  step_entry *v;
  int n, rc = list_steps(root, &v, &n, err);
  if (rc) return rc;
  rc = scps_error_set(err, SCPS_ENOENT, "no complete checkpoint of this cluster under '%s'", root);
  for (int i = 0; i < n; i++) {
    /* Cut short (a file missing): skipped, as scps_checkpoint_find_latest does. */
    if (v[i].open_rc == SCPS_ENOENT) continue;
    char dir[PATH_CAP], why[700];
    step_dir_name(root, v[i].step, dir, sizeof dir);
    scps_checkpoint *c = NULL;
    scps_error e;
    int orc = scps_checkpoint_open(dir, &c, &e);
    if (orc == 0) {
      bool mine = scps_checkpoint_is_owned(c, own, why, sizeof why);
      scps_checkpoint_close(c);
      if (!mine) {
        note(own, dir, why);
        continue;
      }
      if (strlen(dir) >= cap) {
        rc = scps_error_set(err, SCPS_EINVAL, "path '%s' does not fit %zu bytes", dir, cap);
      } else {
        memcpy(path, dir, strlen(dir) + 1);
        rc = 0;
      }
      break;
    }
    if (orc == SCPS_ENOENT) continue;
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int32_t p;
    bool foreign = dfd >= 0 && holds_foreign(dfd, dir, own, &p, why, sizeof why);
    if (dfd >= 0) close(dfd);
    if (foreign) {
      note(own, dir, why);
      continue;
    }
    /* Not provably another cluster's: damage to ours must not be hidden by
     * restoring an older one. */
    rc = scps_error_set(err, orc,
                        "the newest checkpoint '%s' is damaged: %s (move it aside to restore an older one, or "
                        "name one with --restore)",
                        dir, e.msg);
    break;
  }
  free(v);
  return rc;
}

/* A step directory of the owner's below a root. */
typedef struct own_step {
  int64_t step;
  bool complete; /* every process's manifest and file present (scps_checkpoint_open) */
  char name[FILE_NAME_CAP];
} own_step;

static int cmp_own_desc(const void *a, const void *b) {
  int64_t x = ((const own_step *)a)->step, y = ((const own_step *)b)->step;
  return x < y ? 1 : x > y ? -1 : 0;
}

/* Whether step directory `name` below root_fd is a directory (not a link)
 * whose manifest of the owner's process verifies and is the owner's. */
static bool own_manifest(int root_fd, const char *root, const char *name, const scps_checkpoint_owner *own, char *why,
                         size_t len) {
  int sfd, os_errno;
  scps_error e;
  if (scps_confine_subdir(root_fd, root, name, false, &sfd, &os_errno, &e)) {
    snprintf(why, len, "%s", e.msg);
    return false;
  }
  char dir[PATH_CAP];
  snprintf(dir, sizeof dir, "%s/%s", root, name);
  manifest mf = {0};
  int rc = load_manifest_at(sfd, dir, own->process_index, &mf, &e);
  bool mine = false;
  if (rc == SCPS_ENOENT)
    snprintf(why, len, "no manifest.p%d.json (a save cut short, or not this cluster's)", own->process_index);
  else if (rc)
    snprintf(why, len, "%s", e.msg);
  else
    mine = owned_by(mf.has_fingerprint, mf.fingerprint, &mf.topology, mf.specs, own, why, len);
  manifest_free(&mf);
  close(sfd);
  return mine;
}

/* The owner's step directories below root_fd, newest first; every other
 * step directory is noted. */
static int list_own_steps(int root_fd, const char *root, const scps_checkpoint_owner *own, own_step **out, int *n_out,
                          scps_error *err) {
  *out = NULL;
  *n_out = 0;
  int rc = 0;
  DIR *d = entries_of(root_fd, root, &rc, err);
  if (!d) return rc;
  own_step *v = NULL;
  int n = 0, cap = 0;
  struct dirent *de;
  while ((de = readdir(d)) && !rc) {
    int64_t step;
    if (!parse_step_name(de->d_name, &step)) continue;
    char dir[PATH_CAP], why[700];
    snprintf(dir, sizeof dir, "%s/%s", root, de->d_name);
    if (!own_manifest(root_fd, root, de->d_name, own, why, sizeof why)) {
      note(own, dir, why);
      continue;
    }
    if (n == cap) {
      cap = cap ? cap * 2 : 16;
      own_step *nv = realloc(v, (size_t)cap * sizeof *v);
      if (!nv) {
        rc = scps_error_set(err, SCPS_ENOMEM, "'%s': out of memory listing checkpoints", root);
        break;
      }
      v = nv;
    }
    scps_checkpoint *c = NULL;
    v[n].step = step;
    v[n].complete = scps_checkpoint_open(dir, &c, NULL) == 0;
    snprintf(v[n].name, sizeof v[n].name, "%.*s", (int)sizeof v[n].name - 1, de->d_name);
    scps_checkpoint_close(c);
    n++;
  }
  closedir(d);
  if (rc) {
    free(v);
    return rc;
  }
  if (n) qsort(v, (size_t)n, sizeof *v, cmp_own_desc);
  *out = v;
  *n_out = n;
  return 0;
}

/* Removes the owner's checkpoint `name` below root_fd: for each manifest in
 * it that verifies as the owner's, the files it lists, then the manifest;
 * then the directory, if nothing else is left in it. Processes sharing a
 * root prune the same steps: what a peer removed first counts as removed. */
static int remove_own(int root_fd, const char *root, const char *name, const scps_checkpoint_owner *own,
                      scps_error *err) {
  char dir[PATH_CAP], why[700];
  snprintf(dir, sizeof dir, "%s/%s", root, name);
  int sfd, os_errno;
  int rc = scps_confine_subdir(root_fd, root, name, false, &sfd, &os_errno, err);
  if (rc) return os_errno == ENOENT ? 0 : rc;
  int32_t idx[1024];
  int n = 0;
  rc = manifest_indices(sfd, dir, idx, 1024, &n, err);
  for (int i = 0; i < n && !rc; i++) {
    manifest mf = {0};
    if (load_manifest_at(sfd, dir, idx[i], &mf, NULL) == 0 &&
        owned_by(mf.has_fingerprint, mf.fingerprint, &mf.topology, mf.specs, own, why, sizeof why)) {
      char mname[FILE_NAME_CAP];
      snprintf(mname, sizeof mname, MANIFEST_PREFIX "%d.json", idx[i]);
      for (int f = 0; f <= mf.n_files && !rc; f++) {
        const char *victim = f < mf.n_files ? mf.files[f].name : mname;
        if (unlinkat(sfd, victim, 0) && errno != ENOENT) {
          char p[PATH_CAP + FILE_NAME_CAP];
          snprintf(p, sizeof p, "%s/%s", dir, victim);
          rc = io_error(err, errno, "cannot remove", p);
        }
      }
    }
    manifest_free(&mf);
  }
  close(sfd);
  if (!rc && unlinkat(root_fd, name, AT_REMOVEDIR) && errno != ENOENT && errno != ENOTEMPTY && errno != EEXIST)
    rc = io_error(err, errno, "cannot remove directory", dir);
  return rc;
}

int scps_checkpoint_retain(int root_fd, const char *root, const scps_checkpoint_owner *own, int keep, int64_t saved,
                           int in_progress, scps_error *err) {
  if (keep < 1) return scps_error_set(err, SCPS_EINVAL, "checkpoint retention %d must be >= 1", keep);
  if (!own) return scps_error_set(err, SCPS_EINVAL, "checkpoint retention: no owner to verify checkpoints by");
  own_step *v;
  int n, rc = list_own_steps(root_fd, root, own, &v, &n, err);
  if (rc) return rc;
  int complete_seen = 0, pending_seen = 0;
  for (int i = 0; i < n && !rc; i++) {
    if (v[i].complete && v[i].step > saved) {
      /* Newer than the step just saved: the state it holds was left behind
       * (a restore of an older step), and as the newest it would be
       * restored next. Set aside, not deleted. */
      char aside[FILE_NAME_CAP + 16];
      snprintf(aside, sizeof aside, "superseded-%s", v[i].name);
      /* Another process of the cluster may have set it aside first. */
      if (renameat(root_fd, v[i].name, root_fd, aside) && errno != ENOENT) {
        char dir[PATH_CAP];
        snprintf(dir, sizeof dir, "%s/%s", root, v[i].name);
        rc = io_error(err, errno, "cannot set aside", dir);
      }
      continue;
    }
    bool drop;
    if (v[i].step == saved) {
      drop = false;
      complete_seen += v[i].complete;
    } else if (v[i].complete) {
      drop = ++complete_seen > keep;
    } else {
      /* Incomplete ones newer than every complete one may be saves in
       * progress, one per process at most. */
      drop = complete_seen > 0 || ++pending_seen > in_progress;
    }
    if (drop) rc = remove_own(root_fd, root, v[i].name, own, err);
  }
  if (!rc && n) rc = fsync_fd(root_fd, root, err);
  free(v);
  return rc;
}
