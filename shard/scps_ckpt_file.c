/* sync_file_range (Linux) */
#define _GNU_SOURCE
#include "scps_ckpt_file.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_FILE_THREADS 16

int scps__ckpt_file_error(scps_error *err, int e, const char *what, const char *path) {
  int code = (e == ENOSPC || e == EFBIG || e == EDQUOT) ? SCPS_ENOSPC : SCPS_EIO;
  return scps_error_set(err, code, "%s '%s': %s", what, path, strerror(e));
}

int scps__ckpt_file_join(char *out, size_t cap, const char *dir, const char *name, scps_error *err) {
  int n = snprintf(out, cap, "%s/%s", dir, name);
  if (n < 0 || (size_t)n >= cap)
    return scps_error_set(err, SCPS_EINVAL, "path '%s/%s' is longer than %zu bytes", dir, name,
                          cap - 1);
  return 0;
}

int scps__ckpt_file_fsync_dir(int fd, const char *dir, scps_error *err) {
  return fsync(fd) ? scps__ckpt_file_error(err, errno, "cannot fsync directory", dir) : 0;
}

int scps__ckpt_file_make_dirs(const char *path, scps_error *err) {
  char buf[SCPS_CKPT_PATH_CAP];
  size_t n = strlen(path);
  if (n == 0 || n >= sizeof buf)
    return scps_error_set(err, SCPS_EINVAL, "checkpoint directory '%s': empty or too long", path);
  memcpy(buf, path, n + 1);
  for (size_t i = 1; i <= n; i++) {
    if (buf[i] != '/' && buf[i] != '\0') continue;
    char c = buf[i];
    buf[i] = '\0';
    if (mkdir(buf, 0755) && errno != EEXIST) return scps__ckpt_file_error(err, errno, "cannot create directory", buf);
    struct stat st;
    if (stat(buf, &st)) return scps__ckpt_file_error(err, errno, "cannot stat", buf);
    if (!S_ISDIR(st.st_mode)) return scps__ckpt_file_error(err, ENOTDIR, "cannot create directory", buf);
    buf[i] = c;
  }
  return 0;
}

int scps__ckpt_file_read(int fd, void *data, size_t len, scps_hash64_ctx *h, const char *path, scps_error *err) {
  char *p = data;
  while (len > 0) {
    size_t chunk = len < SCPS_CKPT_FILE_CHUNK ? len : SCPS_CKPT_FILE_CHUNK;
    size_t done = 0;
    while (done < chunk) {
      ssize_t r = read(fd, p + done, chunk - done);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return scps__ckpt_file_error(err, errno, "cannot read", path);
      if (r == 0) return scps_error_set(err, SCPS_ECORRUPT, "'%s' is truncated", path);
      done += (size_t)r;
    }
    if (h) scps__hash64_update(h, p, chunk);
    p += chunk;
    len -= chunk;
  }
  return 0;
}

DIR *scps__ckpt_file_entries(int dfd, const char *dir, int *rc, scps_error *err) {
  int fd = dup(dfd);
  DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
  if (!d) {
    *rc = scps__ckpt_file_error(err, errno, "cannot read directory", dir);
    if (fd >= 0) close(fd);
    return NULL;
  }
  rewinddir(d);
  return d;
}

/* ---- writing ---- */

int scps__ckpt_file_write(scps_ckpt_file_writer *o, const void *data, size_t len, scps_hash64_ctx *h,
                         scps_error *err) {
  const char *p = data;
  while (len > 0) {
    size_t chunk = len < SCPS_CKPT_FILE_CHUNK ? len : SCPS_CKPT_FILE_CHUNK;
    if (h) scps__hash64_update(h, p, chunk);
    size_t done = 0;
    while (done < chunk) {
      ssize_t w = write(o->fd, p + done, chunk - done);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return scps__ckpt_file_error(err, errno, "cannot write", o->tmp);
      done += (size_t)w;
    }
    /* Dirty pages would otherwise sit until the kernel's background
     * threshold, and fsync would then wait for the whole file. */
#ifdef SYNC_FILE_RANGE_WRITE
    (void)sync_file_range(o->fd, o->written, (off_t)chunk, SYNC_FILE_RANGE_WRITE);
#endif
    o->written += (off_t)chunk;
    p += chunk;
    len -= chunk;
  }
  return 0;
}

int scps__ckpt_file_create_at(scps_ckpt_file_writer *o, int dirfd, const char *dir, const char *name,
                             scps_error *err) {
  int rc = scps__ckpt_file_join(o->path, sizeof o->path, dir, name, err);
  if (rc) return rc;
  snprintf(o->tmp, sizeof o->tmp, "%s.tmp", o->path);
  snprintf(o->name, sizeof o->name, "%s", name);
  snprintf(o->name_tmp, sizeof o->name_tmp, "%s.tmp", name);
  o->dirfd = dirfd;
  o->at_path = dirfd == AT_FDCWD ? o->path : o->name;
  o->at_tmp = dirfd == AT_FDCWD ? o->tmp : o->name_tmp;
  o->written = 0;
  if (unlinkat(dirfd, o->at_tmp, 0) && errno != ENOENT)
    return scps__ckpt_file_error(err, errno, "cannot remove", o->tmp);
  o->fd = openat(dirfd, o->at_tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (o->fd < 0) return scps__ckpt_file_error(err, errno, "cannot create", o->tmp);
  return 0;
}

int scps__ckpt_file_create(scps_ckpt_file_writer *o, const char *dir, const char *name, scps_error *err) {
  return scps__ckpt_file_create_at(o, AT_FDCWD, dir, name, err);
}

int scps__ckpt_file_sync(scps_ckpt_file_writer *o, scps_error *err) {
  int rc = 0;
  if (fsync(o->fd)) rc = scps__ckpt_file_error(err, errno, "cannot fsync", o->tmp);
  if (close(o->fd) && !rc) rc = scps__ckpt_file_error(err, errno, "cannot close", o->tmp);
  o->fd = -1;
  if (rc) unlinkat(o->dirfd, o->at_tmp, 0);
  return rc;
}

int scps__ckpt_file_commit(scps_ckpt_file_writer *o, scps_error *err) {
  int rc = scps__ckpt_file_sync(o, err);
  if (!rc && renameat(o->dirfd, o->at_tmp, o->dirfd, o->at_path)) {
    rc = scps__ckpt_file_error(err, errno, "cannot rename to", o->path);
    unlinkat(o->dirfd, o->at_tmp, 0);
  }
  return rc;
}

void scps__ckpt_file_abort(scps_ckpt_file_writer *o) {
  if (o->fd >= 0) close(o->fd);
  o->fd = -1;
  if (o->at_tmp) unlinkat(o->dirfd, o->at_tmp, 0);
}

/* ---- reading ---- */

int scps__ckpt_file_open(scps_ckpt_file_reader *r, const char *dir, const char *name, int64_t bytes,
                        uint64_t xxh64, scps_error *err) {
  r->fd = -1;
  r->want_xxh64 = xxh64;
  scps__hash64_init(&r->h, 0);
  int rc = scps__ckpt_file_join(r->path, sizeof r->path, dir, name, err);
  if (rc) return rc;
  int fd = open(r->path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return errno == ENOENT ? scps_error_set(err, SCPS_ENOENT, "checkpoint file '%s' is missing", r->path)
                           : scps__ckpt_file_error(err, errno, "cannot open", r->path);
  struct stat st;
  if (fstat(fd, &st)) {
    rc = scps__ckpt_file_error(err, errno, "cannot stat", r->path);
    close(fd);
    return rc;
  }
  if (st.st_size != bytes) {
    close(fd);
    return scps_error_set(err, SCPS_ECORRUPT, "'%s' has %lld bytes, its manifest says %lld", r->path,
                          (long long)st.st_size, (long long)bytes);
  }
  (void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  r->fd = fd;
  return 0;
}

int scps__ckpt_file_next(scps_ckpt_file_reader *r, void *dst, size_t len, scps_error *err) {
  return scps__ckpt_file_read(r->fd, dst, len, &r->h, r->path, err);
}

int scps__ckpt_file_close(scps_ckpt_file_reader *r, int rc, scps_error *err) {
  close(r->fd);
  r->fd = -1;
  uint64_t got = scps__hash64_digest(&r->h);
  if (!rc && got != r->want_xxh64)
    rc = scps_error_set(err, SCPS_ECORRUPT, "'%s': checksum %016" PRIx64 ", manifest says %016" PRIx64, r->path,
                        got, r->want_xxh64);
  return rc;
}

/* ---- one file per core ---- */

typedef struct file_pool {
  scps_ckpt_file_fn fn;
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

int scps__ckpt_file_for_each(int n, scps_ckpt_file_fn fn, void *ctx, scps_error *err) {
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
