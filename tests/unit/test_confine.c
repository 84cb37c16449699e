/* scps_confine: which relative paths pass, and that opening one never
 * follows a symlink below the root (nothing is created through one), while
 * the root itself may be a symlink. */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "scps_confine.h"
#include "scps_test.h"

static char base[256];

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

static const char *at(const char *name) {
  static char buf[4][512];
  static int k;
  k = (k + 1) % 4;
  snprintf(buf[k], sizeof buf[k], "%s/%s", base, name);
  return buf[k];
}

static bool exists(const char *path) {
  struct stat sb;
  return lstat(path, &sb) == 0;
}

static void test_check(void) {
  scps_error err;
  const char *good[] = {"", "a", "a/b", "run-1/step.dir", "..a", "a..", ".hidden"};
  for (size_t i = 0; i < sizeof good / sizeof *good; i++)
    CHECKF(scps__confine_check("directory", good[i], 100, &err) == 0, "'%s' refused: %s", good[i], err.msg);
  struct {
    const char *rel, *says;
  } bad[] = {{"/abs", "relative"},   {"a//b", "empty"},       {"a/", "empty"},       {"/", "relative"},
             {".", "'.' and '..'"},  {"..", "'.' and '..'"},  {"a/./b", "'.' and '..'"},
             {"a/../b", "'.' and '..'"}, {"../x", "'.' and '..'"}, {"a\nb", "control character 0x0a"},
             {"a\x7f", "control character 0x7f"}};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    int rc = scps__confine_check("directory", bad[i].rel, 100, &err);
    CHECKF(rc == SCPS_EINVAL && strstr(err.msg, bad[i].says) && strstr(err.msg, "directory"), "'%s': %d %s",
           bad[i].rel, rc, err.msg);
  }
  CHECK(scps__confine_check("directory", "abcdef", 5, &err) == SCPS_EINVAL && strstr(err.msg, "longer than 5"));
}

static void test_open(void) {
  scps_error err;
  int fd = -1, e = 0;
  char root[512];
  snprintf(root, sizeof root, "%s", at("root"));
  /* A missing root is created with its parents; missing components too. */
  CHECK_OK(scps__confine_open(root, "x/y", true, &fd, &e, &err), &err);
  CHECK(fd >= 0 && exists(at("root/x/y")));
  /* The descriptor is that directory. */
  int f = openat(fd, "here", O_WRONLY | O_CREAT | O_EXCL, 0644);
  CHECK(f >= 0);
  if (f >= 0) close(f);
  CHECK(exists(at("root/x/y/here")));
  close(fd);
  /* Without create, a missing one is ENOENT. */
  CHECK(scps__confine_open(root, "nope", false, &fd, &e, &err) == SCPS_EIO && e == ENOENT && fd == -1);
  CHECK(!exists(at("root/nope")));
  /* A symlink below the root, to a directory outside: never followed,
   * nothing created through it. */
  mkdir(at("outside"), 0755);
  CHECK(symlink(at("outside"), at("root/link")) == 0);
  CHECK(scps__confine_open(root, "link", true, &fd, &e, &err) == SCPS_EIO && e == ELOOP);
  CHECKF(strstr(err.msg, "symbolic link") && strstr(err.msg, "root/link"), "%s", err.msg);
  CHECK(scps__confine_open(root, "link/z", true, &fd, &e, &err) == SCPS_EIO && e == ELOOP);
  CHECK(symlink(at("outside"), at("root/x/deep")) == 0);
  CHECK(scps__confine_open(root, "x/deep/z", true, &fd, &e, &err) == SCPS_EIO && e == ELOOP);
  CHECKF(strstr(err.msg, "x/deep"), "%s", err.msg);
  CHECK(!exists(at("outside/z")));
  /* A file in the way. */
  f = open(at("root/file"), O_WRONLY | O_CREAT, 0644);
  if (f >= 0) close(f);
  CHECK(scps__confine_open(root, "file/z", true, &fd, &e, &err) == SCPS_EIO && e == ENOTDIR);
  CHECKF(strstr(err.msg, "Not a directory"), "%s", err.msg);
  /* The refused paths, refused before anything is touched. */
  CHECK(scps__confine_open(root, "../outside", true, &fd, &e, &err) == SCPS_EINVAL && e == 0);
  CHECK(scps__confine_open(root, "/tmp", true, &fd, &e, &err) == SCPS_EINVAL);
  /* The root itself may be a symlink (the operator's). */
  CHECK(symlink(root, at("root-link")) == 0);
  CHECK_OK(scps__confine_open(at("root-link"), "x", false, &fd, &e, &err), &err);
  if (fd >= 0) close(fd);
  /* One step from an open directory. */
  int rfd = open(root, O_RDONLY | O_DIRECTORY);
  CHECK_OK(scps__confine_subdir(rfd, root, "made", true, &fd, &e, &err), &err);
  if (fd >= 0) close(fd);
  CHECK(scps__confine_subdir(rfd, root, "link", true, &fd, &e, &err) == SCPS_EIO && e == ELOOP);
  close(rfd);
}

int main(void) {
  snprintf(base, sizeof base, "%s/scps_confine_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (!mkdtemp(base)) {
    perror("mkdtemp");
    return 1;
  }
  test_check();
  test_open();
  nftw(base, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  return scps_test_finish("test_confine");
}
