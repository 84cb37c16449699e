/* scps_confine: a directory named by a relative path below a root directory,
 * opened (and created) component by component without following a symlink. */
#ifndef SCPS_CONFINE_H
#define SCPS_CONFINE_H

#include <stdbool.h>
#include <stddef.h>

#include "scps_error.h"

/* Whether rel may name a place below a root: relative (no leading '/'),
 * components separated by single '/', none empty (no "a//b", no trailing
 * '/'), none "." or "..", no control character (bytes < 0x20 and 0x7f), at
 * most max_len bytes. The empty string names the root itself and passes.
 * SCPS_EINVAL with a message naming `what`, the path and the rule broken. */
int scps__confine_check(const char *what, const char *rel, size_t max_len, scps_error *err);

/* Opens root (symlinks in root itself are followed: it is the operator's),
 * then every component of rel (scps__confine_check'ed first) from the
 * directory before it with openat(O_NOFOLLOW | O_DIRECTORY), so a symlink
 * anywhere below the root, or one swapped in while this runs, is never
 * followed. With create, a missing root is created with its parents and a
 * missing component with mkdirat (mode 0755) before it is opened. On
 * success *fd is the last directory (O_RDONLY | O_DIRECTORY | O_CLOEXEC; the
 * caller closes it). On failure *os_errno is the system's errno (ELOOP for
 * a symlink, ENOTDIR for a file in the way, EACCES, ...; 0 when rel itself
 * was refused) and the message names the path that failed and why:
 * SCPS_EINVAL for rel, SCPS_ENOSPC for a full disk, SCPS_EIO otherwise. */
int scps__confine_open(const char *root, const char *rel, bool create, int *fd, int *os_errno, scps_error *err);

/* One step of that walk: the directory `name` (one component) in the open
 * directory dirfd (dir names it in messages), created first with create,
 * opened with O_NOFOLLOW. The same results. */
int scps__confine_subdir(int dirfd, const char *dir, const char *name, bool create, int *fd, int *os_errno,
                        scps_error *err);

#endif
