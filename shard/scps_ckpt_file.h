/* scps_ckpt_file: the file I/O under checkpoints: durable writes (temporary,
 * fsync, rename), hashed reads of a listed size, one thread per file. */
#ifndef SCPS_CKPT_FILE_H
#define SCPS_CKPT_FILE_H

#include <dirent.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "scps_error.h"
#include "scps_hash64.h"

/* Every read and write moves this much per call: large enough that syscall
 * cost vanishes, small enough that the chunk just hashed is still in cache
 * when write() copies it (or read() has just put it there). */
#define SCPS_CKPT_FILE_CHUNK ((size_t)4 << 20)
/* Longest path, and longest name of a file within a step directory. */
#define SCPS_CKPT_PATH_CAP 4096
#define SCPS_CKPT_NAME_CAP 64

/* SCPS_ENOSPC for errno ENOSPC, EFBIG or EDQUOT, else SCPS_EIO: "<what>
 * '<path>': <errno text>". */
int scps__ckpt_file_error(scps_error *err, int os_errno, const char *what, const char *path);
/* out = dir/name; SCPS_EINVAL when it does not fit cap bytes. */
int scps__ckpt_file_join(char *out, size_t cap, const char *dir, const char *name, scps_error *err);
/* fsync of an open directory (dir names it in messages). */
int scps__ckpt_file_fsync_dir(int fd, const char *dir, scps_error *err);
/* mkdir -p: every missing component of path. */
int scps__ckpt_file_make_dirs(const char *path, scps_error *err);
/* Reads exactly len bytes, hashing them into h (may be NULL); a short file is
 * SCPS_ECORRUPT (its size was checked when it was opened, so it changed). */
int scps__ckpt_file_read(int fd, void *data, size_t len, scps_hash64_ctx *h, const char *path, scps_error *err);
/* A stream of the entries of the open directory dfd (dir names it), from
 * the first; NULL and *rc on failure. */
DIR *scps__ckpt_file_entries(int dfd, const char *dir, int *rc, scps_error *err);

/* One file written durably: created as "<name>.tmp", written, fsynced, then
 * renamed (commit) or removed (abort). */
typedef struct scps_ckpt_file_writer {
  char path[SCPS_CKPT_PATH_CAP];
  char tmp[SCPS_CKPT_PATH_CAP + 8];
  int fd;
  off_t written;
  /* The names the *at calls use, relative to dirfd: path and tmp when dirfd
   * is AT_FDCWD, the bare file names when it is a directory descriptor. */
  int dirfd;
  const char *at_path, *at_tmp;
  char name[SCPS_CKPT_NAME_CAP], name_tmp[SCPS_CKPT_NAME_CAP + 8];
} scps_ckpt_file_writer;

/* Creates dir/name.tmp; dirfd is dir opened, or AT_FDCWD. Whatever had
 * the temporary's name is removed first and the file created with O_EXCL |
 * O_NOFOLLOW: a symlink or hard link planted there is never written
 * through. Initialise o with fd -1 before the first call. */
int scps__ckpt_file_create_at(scps_ckpt_file_writer *o, int dirfd, const char *dir, const char *name,
                             scps_error *err);
/* The same relative to the working directory. */
int scps__ckpt_file_create(scps_ckpt_file_writer *o, const char *dir, const char *name, scps_error *err);
/* Writes len bytes in SCPS_CKPT_FILE_CHUNK pieces, hashing each into h (may
 * be NULL) just before write() copies it, and asks the kernel to start
 * writing each piece back at once, so fsync waits only for the last ones. */
int scps__ckpt_file_write(scps_ckpt_file_writer *o, const void *data, size_t len, scps_hash64_ctx *h,
                         scps_error *err);
/* Makes the temporary file durable and closes it; it keeps its .tmp name
 * (removed on failure). */
int scps__ckpt_file_sync(scps_ckpt_file_writer *o, scps_error *err);
/* sync, then rename to the final name. */
int scps__ckpt_file_commit(scps_ckpt_file_writer *o, scps_error *err);
/* Closes and removes the temporary, whatever state it is in. */
void scps__ckpt_file_abort(scps_ckpt_file_writer *o);

/* One file of a listed size and XXH64 read front to back, hashed as it goes. */
typedef struct scps_ckpt_file_reader {
  char path[SCPS_CKPT_PATH_CAP];
  int fd;
  uint64_t want_xxh64;
  scps_hash64_ctx h;
} scps_ckpt_file_reader;

/* Opens dir/name: SCPS_ENOENT when missing, SCPS_ECORRUPT when its size is
 * not bytes. */
int scps__ckpt_file_open(scps_ckpt_file_reader *r, const char *dir, const char *name, int64_t bytes,
                        uint64_t xxh64, scps_error *err);
int scps__ckpt_file_next(scps_ckpt_file_reader *r, void *dst, size_t len, scps_error *err);
/* Closes the file; after a clean read (rc 0) the checksum must match
 * (SCPS_ECORRUPT naming the file otherwise). Returns the outcome. */
int scps__ckpt_file_close(scps_ckpt_file_reader *r, int rc, scps_error *err);

/* Data files are independent (each is one SparseCore's regions, and no two
 * files fill the same engine row), so saving and loading run one file per
 * thread: a single thread alone can neither hash nor copy at the memory
 * bandwidth of a machine, nor keep the disk busy while it hashes.
 * Runs fn(ctx, i) for i in [0, n) on up to one thread per online CPU (the
 * caller's among them); after a failure no further file starts. The error
 * is that of the lowest failed index. */
typedef int (*scps_ckpt_file_fn)(void *ctx, int index, scps_error *err);
int scps__ckpt_file_for_each(int n, scps_ckpt_file_fn fn, void *ctx, scps_error *err);

#endif
