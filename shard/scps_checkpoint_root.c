#include "scps_checkpoint_root.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "scps_ckpt_file.h"
#include "scps_ckpt_manifest.h"
#include "scps_ckpt_owner.h"
#include "scps_confine.h"

#define PATH_CAP SCPS_CKPT_PATH_CAP
#define FILE_NAME_CAP SCPS_CKPT_NAME_CAP

typedef struct step_entry {
  int64_t step;
  int open_rc; /* scps__checkpoint_open's: 0 complete, SCPS_ENOENT incomplete, others damaged */
} step_entry;

static int cmp_step_desc(const void *a, const void *b) {
  int64_t x = ((const step_entry *)a)->step, y = ((const step_entry *)b)->step;
  return x < y ? 1 : x > y ? -1 : 0;
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
                           : scps__ckpt_file_error(err, errno, "cannot open directory", root);
  step_entry *v = NULL;
  int n = 0, cap = 0, rc = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    int64_t step;
    if (!scps__ckpt_manifest_step_of(de->d_name, &step)) continue;
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
    scps__ckpt_manifest_step_dir(root, v[i].step, dir, sizeof dir);
    v[i].open_rc = scps__checkpoint_open(dir, &c, NULL);
    scps__checkpoint_close(v[i].open_rc == 0 ? c : NULL);
  }
  *out = v;
  *n_out = n;
  return 0;
}

int scps__checkpoint_root_list(const char *root, scps_checkpoint_entry **out, int *n, scps_error *err) {
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
    scps__ckpt_manifest_step_dir(root, v[i].step, r[i].dir, sizeof r[i].dir);
  }
  free(v);
  *out = r;
  *n = count;
  return 0;
}

int scps__checkpoint_root_latest(const char *root, char *path, size_t cap, scps_error *err) {
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
      scps__ckpt_manifest_step_dir(root, v[i].step, dir, sizeof dir);
      scps_checkpoint *c = NULL;
      scps_error why;
      int orc = scps__checkpoint_open(dir, &c, &why);
      scps__checkpoint_close(c);
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
      scps__ckpt_manifest_step_dir(root, v[i].step, dir, sizeof dir);
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

/* ---- the owner's checkpoints ---- */

int scps__checkpoint_root_latest_own(const char *root, const scps_checkpoint_owner *own, char *path, size_t cap,
                                    scps_error *err) {
  step_entry *v;
  int n, rc = list_steps(root, &v, &n, err);
  if (rc) return rc;
  rc = scps_error_set(err, SCPS_ENOENT, "no complete checkpoint of this cluster under '%s'", root);
  for (int i = 0; i < n; i++) {
    /* Cut short (a file missing): skipped, as scps__checkpoint_root_latest does. */
    if (v[i].open_rc == SCPS_ENOENT) continue;
    char dir[PATH_CAP], why[700];
    scps__ckpt_manifest_step_dir(root, v[i].step, dir, sizeof dir);
    scps_checkpoint *c = NULL;
    scps_error e;
    int orc = scps__checkpoint_open(dir, &c, &e);
    if (orc == 0) {
      bool mine = scps__checkpoint_is_owned(c, own, why, sizeof why);
      scps__checkpoint_close(c);
      if (!mine) {
        scps__ckpt_owner_note(own, dir, why);
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
    bool foreign = dfd >= 0 && scps__ckpt_owner_foreign(dfd, dir, own, &p, why, sizeof why);
    if (dfd >= 0) close(dfd);
    if (foreign) {
      scps__ckpt_owner_note(own, dir, why);
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
  bool complete; /* every process's manifest and file present (scps__checkpoint_open) */
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
  if (scps__confine_subdir(root_fd, root, name, false, &sfd, &os_errno, &e)) {
    snprintf(why, len, "%s", e.msg);
    return false;
  }
  char dir[PATH_CAP];
  snprintf(dir, sizeof dir, "%s/%s", root, name);
  scps_ckpt_manifest mf = {0};
  int rc = scps__ckpt_manifest_load_at(sfd, dir, own->process_index, &mf, &e);
  bool mine = false;
  if (rc == SCPS_ENOENT)
    snprintf(why, len, "no manifest.p%d.json (a save cut short, or not this cluster's)", own->process_index);
  else if (rc)
    snprintf(why, len, "%s", e.msg);
  else
    mine = scps__ckpt_owner_test(mf.has_fingerprint, mf.fingerprint, &mf.topology, mf.specs, own, why, len);
  scps__ckpt_manifest_free(&mf);
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
  DIR *d = scps__ckpt_file_entries(root_fd, root, &rc, err);
  if (!d) return rc;
  own_step *v = NULL;
  int n = 0, cap = 0;
  struct dirent *de;
  while ((de = readdir(d)) && !rc) {
    int64_t step;
    if (!scps__ckpt_manifest_step_of(de->d_name, &step)) continue;
    char dir[PATH_CAP], why[700];
    snprintf(dir, sizeof dir, "%s/%s", root, de->d_name);
    if (!own_manifest(root_fd, root, de->d_name, own, why, sizeof why)) {
      scps__ckpt_owner_note(own, dir, why);
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
    v[n].complete = scps__checkpoint_open(dir, &c, NULL) == 0;
    snprintf(v[n].name, sizeof v[n].name, "%.*s", (int)sizeof v[n].name - 1, de->d_name);
    scps__checkpoint_close(c);
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

/* Whether step directory `name` below root_fd holds a manifest (or its
 * temporary) of a process other than `process`. */
static bool holds_others_manifest(int root_fd, const char *root, const char *name, int32_t process) {
  int sfd, os_errno;
  scps_error e;
  if (scps__confine_subdir(root_fd, root, name, false, &sfd, &os_errno, &e)) return false;
  DIR *d = fdopendir(sfd);
  if (!d) {
    close(sfd);
    return false;
  }
  bool found = false;
  struct dirent *de;
  const size_t prefix = strlen("manifest.p");
  while (!found && (de = readdir(d))) {
    if (strncmp(de->d_name, "manifest.p", prefix)) continue;
    char *end;
    long p = strtol(de->d_name + prefix, &end, 10);
    found = end != de->d_name + prefix && !strncmp(end, ".json", 5) && p != process;
  }
  closedir(d);
  return found;
}

/* Whether no step directory under root_fd holds a manifest of a process
 * other than `process`: a root of that process alone. */
static bool root_alone(int root_fd, const char *root, int32_t process) {
  int rc = 0;
  scps_error e;
  DIR *d = scps__ckpt_file_entries(root_fd, root, &rc, &e);
  if (!d) return false;
  bool alone = true;
  struct dirent *de;
  int64_t step;
  while (alone && (de = readdir(d)))
    alone = !scps__ckpt_manifest_step_of(de->d_name, &step) || !holds_others_manifest(root_fd, root, de->d_name, process);
  closedir(d);
  return alone;
}

/* Whether the step directory `name` below root holds process's part in
 * full (0), cut short (SCPS_ENOENT) or damaged (another code, in err). */
static int open_part_rc(const char *root, const char *name, int32_t process, char *dir, size_t cap,
                        scps_error *err) {
  snprintf(dir, cap, "%s/%s", root, name);
  scps_checkpoint *c = NULL;
  int rc = scps__checkpoint_open_part(dir, process, &c, err);
  scps__checkpoint_close(c);
  return rc;
}

int scps__checkpoint_root_latest_own_part(const char *root, const scps_checkpoint_owner *own, char *path, size_t cap,
                                         scps_error *err) {
  int root_fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (root_fd < 0)
    return errno == ENOENT ? scps_error_set(err, SCPS_ENOENT, "checkpoint directory '%s' does not exist", root)
                           : scps__ckpt_file_error(err, errno, "cannot open directory", root);
  own_step *v;
  int n, rc = list_own_steps(root_fd, root, own, &v, &n, err);
  if (rc) {
    close(root_fd);
    return rc;
  }
  rc = scps_error_set(err, SCPS_ENOENT, "no part of process %d of this cluster under '%s' alone", own->process_index,
                      root);
  bool alone = root_alone(root_fd, root, own->process_index);
  for (int i = 0; i < n && alone && rc == SCPS_ENOENT; i++) {
    char dir[PATH_CAP];
    scps_error e;
    int orc = open_part_rc(root, v[i].name, own->process_index, dir, sizeof dir, &e);
    if (orc == SCPS_ENOENT) continue; /* a save cut short: the part before it is the newest */
    if (orc)
      rc = scps_error_set(err, orc,
                          "the newest checkpoint '%s' is damaged: %s (move it aside to restore an older one, or "
                          "name one with --restore)",
                          dir, e.msg);
    else if (strlen(dir) >= cap)
      rc = scps_error_set(err, SCPS_EINVAL, "path '%s' does not fit %zu bytes", dir, cap);
    else {
      memcpy(path, dir, strlen(dir) + 1);
      rc = 0;
    }
  }
  free(v);
  close(root_fd);
  return rc;
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
  int rc = scps__confine_subdir(root_fd, root, name, false, &sfd, &os_errno, err);
  if (rc) return os_errno == ENOENT ? 0 : rc;
  int32_t idx[1024];
  int n = 0;
  rc = scps__ckpt_manifest_indices(sfd, dir, idx, 1024, &n, err);
  for (int i = 0; i < n && !rc; i++) {
    scps_ckpt_manifest mf = {0};
    if (scps__ckpt_manifest_load_at(sfd, dir, idx[i], &mf, NULL) == 0 &&
        scps__ckpt_owner_test(mf.has_fingerprint, mf.fingerprint, &mf.topology, mf.specs, own, why, sizeof why)) {
      char mname[FILE_NAME_CAP];
      snprintf(mname, sizeof mname, SCPS_CKPT_MANIFEST_PREFIX "%d.json", idx[i]);
      for (int f = 0; f <= mf.n_files && !rc; f++) {
        const char *victim = f < mf.n_files ? mf.files[f].name : mname;
        if (unlinkat(sfd, victim, 0) && errno != ENOENT) {
          char p[PATH_CAP + FILE_NAME_CAP];
          snprintf(p, sizeof p, "%s/%s", dir, victim);
          rc = scps__ckpt_file_error(err, errno, "cannot remove", p);
        }
      }
    }
    scps__ckpt_manifest_free(&mf);
  }
  close(sfd);
  if (!rc && unlinkat(root_fd, name, AT_REMOVEDIR) && errno != ENOENT && errno != ENOTEMPTY && errno != EEXIST)
    rc = scps__ckpt_file_error(err, errno, "cannot remove directory", dir);
  return rc;
}

int scps__checkpoint_root_retain(int root_fd, const char *root, const scps_checkpoint_owner *own, int keep,
                                int64_t saved, int in_progress, scps_error *err) {
  if (keep < 1) return scps_error_set(err, SCPS_EINVAL, "checkpoint retention %d must be >= 1", keep);
  if (!own) return scps_error_set(err, SCPS_EINVAL, "checkpoint retention: no owner to verify checkpoints by");
  own_step *v;
  int n, rc = list_own_steps(root_fd, root, own, &v, &n, err);
  if (rc) return rc;
  /* In a root of this process alone no checkpoint is ever complete: its
   * parts in full stand for complete ones (kept, counted, set aside when
   * newer), and one cut short is a save that failed, not another process's
   * in progress. */
  if (n && root_alone(root_fd, root, own->process_index))
    for (int i = 0; i < n; i++) {
      char dir[PATH_CAP];
      scps_error e;
      v[i].complete = open_part_rc(root, v[i].name, own->process_index, dir, sizeof dir, &e) == 0;
    }
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
        rc = scps__ckpt_file_error(err, errno, "cannot set aside", dir);
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
  if (!rc && n) rc = scps__ckpt_file_fsync_dir(root_fd, root, err);
  free(v);
  return rc;
}
