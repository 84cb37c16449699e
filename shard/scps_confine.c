/* A directory below a root, reached without following symlinks: see
 * scps_confine.h. */
#include "scps_confine.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int scps__confine_check(const char *what, const char *rel, size_t max_len, scps_error *err) {
  size_t n = strlen(rel);
  if (n > max_len)
    return scps_error_set(err, SCPS_EINVAL, "%s '%.200s...': %zu bytes, longer than %zu", what, rel, n, max_len);
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)rel[i] < 0x20 || rel[i] == 0x7f)
      return scps_error_set(err, SCPS_EINVAL, "%s '%.200s': control character 0x%02x at byte %zu", what, rel,
                            (unsigned char)rel[i], i);
  if (rel[0] == '/')
    return scps_error_set(err, SCPS_EINVAL, "%s '%.200s': must be a relative path", what, rel);
  for (const char *p = rel; n && *p;) {
    const char *q = strchr(p, '/');
    size_t k = q ? (size_t)(q - p) : strlen(p);
    if (k == 0 || (q && !q[1]))
      return scps_error_set(err, SCPS_EINVAL, "%s '%.200s': empty path component at byte %zu ('//' or a trailing '/')",
                            what, rel, (size_t)(p - rel) + (k == 0 ? 0 : k));
    if ((k == 1 && p[0] == '.') || (k == 2 && p[0] == '.' && p[1] == '.'))
      return scps_error_set(err, SCPS_EINVAL, "%s '%.200s': '.' and '..' components are not accepted", what, rel);
    p = q ? q + 1 : p + k;
  }
  return 0;
}

static int fail(scps_error *err, int e, int *os_errno, const char *what, const char *path) {
  *os_errno = e;
  const char *why = e == ELOOP ? "is a symbolic link, and none is followed below the root" : strerror(e);
  return scps_error_set(err, e == ENOSPC || e == EDQUOT ? SCPS_ENOSPC : SCPS_EIO, "%s '%.400s': %s", what, path,
                        why);
}

/* mkdir -p root, following symlinks (the root's path is the operator's). */
static int make_root(const char *root, int *os_errno, scps_error *err) {
  char path[PATH_MAX];
  if (snprintf(path, sizeof path, "%s", root) >= (int)sizeof path) return fail(err, ENAMETOOLONG, os_errno, "root", root);
  for (char *p = path + 1;; p++) {
    if (*p != '/' && *p) continue;
    char saved = *p;
    *p = '\0';
    if (mkdir(path, 0755) && errno != EEXIST) return fail(err, errno, os_errno, "cannot create directory", path);
    *p = saved;
    if (!saved) return 0;
  }
}

int scps__confine_subdir(int dirfd, const char *dir, const char *name, bool create, int *fd, int *os_errno,
                        scps_error *err) {
  *fd = -1;
  *os_errno = 0;
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  if (create && mkdirat(dirfd, name, 0755) && errno != EEXIST) return fail(err, errno, os_errno, "cannot create directory", path);
  int next = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (next < 0) {
    int e = errno;
    /* O_NOFOLLOW | O_DIRECTORY on a symlink may say ENOTDIR: tell the two apart. */
    struct stat sb;
    if (e == ENOTDIR && fstatat(dirfd, name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(sb.st_mode)) e = ELOOP;
    return fail(err, e, os_errno, "cannot open directory", path);
  }
  *fd = next;
  return 0;
}

int scps__confine_open(const char *root, const char *rel, bool create, int *fd, int *os_errno, scps_error *err) {
  *fd = -1;
  *os_errno = 0;
  int rc = scps__confine_check("directory", rel, PATH_MAX / 2, err);
  if (rc) return rc;
  if (!root[0]) return scps_error_set(err, SCPS_EINVAL, "root directory: empty");
  if (create && (rc = make_root(root, os_errno, err))) return rc;
  int dir = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return fail(err, errno, os_errno, "cannot open directory", root);
  /* The path walked so far, for messages. */
  char walked[PATH_MAX];
  snprintf(walked, sizeof walked, "%s", root);
  for (const char *p = rel; *p;) {
    const char *q = strchr(p, '/');
    size_t k = q ? (size_t)(q - p) : strlen(p);
    char name[NAME_MAX + 1];
    if (k > NAME_MAX) {
      close(dir);
      return fail(err, ENAMETOOLONG, os_errno, "cannot open directory", rel);
    }
    memcpy(name, p, k);
    name[k] = '\0';
    int next;
    rc = scps__confine_subdir(dir, walked, name, create, &next, os_errno, err);
    close(dir);
    if (rc) return rc;
    dir = next;
    size_t at = strlen(walked);
    snprintf(walked + at, sizeof walked - at, "/%s", name);
    p = q ? q + 1 : p + k;
  }
  *fd = dir;
  return 0;
}
