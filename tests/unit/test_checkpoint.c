/* Checkpoints on real files: save and load bitwise on one topology;
 * 2x2 -> 3x1 -> 1x4 resharding (and convert) over all 7 optimizers with
 * stacked tables, row by row with slots; step and limits kept; incomplete
 * checkpoints skipped; every flipped byte, truncation, bad manifests,
 * the first of two damaged files named though files are read in parallel,
 * unwritable directories and a file-size limit refused with the file named;
 * retention. */
#define _XOPEN_SOURCE 700
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "scps_checkpoint.h"
#include "scps_checkpoint_export.h"
#include "scps_checkpoint_root.h"
#include "scps_hash64.h"
#include "scps_test.h"

#define MAX_P 8

static char base_dir[256];

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

static void rm_tree(const char *path) { nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

static const char *sub(const char *name) {
  static char buf[4][512];
  static int k;
  k = (k + 1) % 4;
  snprintf(buf[k], sizeof buf[k], "%s/%s", base_dir, name);
  return buf[k];
}

/* ---- specs: every optimizer, explicit two-table stacks and automatic ones ---- */

static const scps_optimizer_type all_types[] = {SCPS_OPT_SGD,  SCPS_OPT_ADAGRAD, SCPS_OPT_ADAGRAD_MOMENTUM,
                                                SCPS_OPT_ADAM, SCPS_OPT_FTRL,    SCPS_OPT_LAPROP,
                                                SCPS_OPT_F2A};
#define N_TYPES 7
#define N_TABLES (2 * N_TYPES + 1)

typedef struct specs {
  scps_table_spec t[N_TABLES];
  scps_feature_spec f[N_TABLES];
} specs;

static void make_specs(specs *s) {
  for (int i = 0; i < N_TABLES; i++) {
    scps_table_spec *t = &s->t[i];
    scps__table_spec_init(t);
    snprintf(t->name, sizeof t->name, "t%02d", i);
    t->vocabulary_size = 50 + 23 * i;
    t->embedding_dim = 3 + (i * 5) % 14;
    int type = i < 2 * N_TYPES ? i / 2 : 1;
    scps__optimizer_spec_init(&t->optimizer, all_types[type]);
    t->initializer.type = SCPS_INIT_UNIFORM;
    t->initializer.scale = 0.1;
    /* Pairs share an explicit stack; the last table is stacked automatically. */
    if (i < 2 * N_TYPES) snprintf(t->stack, sizeof t->stack, "s_%s", scps__optimizer_name(all_types[type]));
    scps_feature_spec *f = &s->f[i];
    scps__feature_spec_init(f);
    snprintf(f->name, sizeof f->name, "f%02d", i);
    snprintf(f->table, sizeof f->table, "%s", t->name);
    f->batch_size = 8;
    f->valency = 2;
    f->output_dim = t->embedding_dim;
  }
}

typedef struct cluster {
  scps_layout *layout;
  int P;
  scps_engine *e[MAX_P];
} cluster;

static int cluster_create(cluster *c, const specs *s, int P, int S) {
  memset(c, 0, sizeof *c);
  scps_topology topo = {P, S, 1 << 20};
  scps_error err_, *err = &err_;
  int rc = scps__layout_create(s->t, N_TABLES, s->f, N_TABLES, &topo, NULL, &c->layout, err);
  CHECK_OK(rc, err);
  for (int p = 0; !rc && p < P; p++) {
    rc = scps__engine_create(c->layout, p, &c->e[p], err);
    CHECK_OK(rc, err);
    c->P = p + 1;
  }
  return rc;
}

static void cluster_destroy(cluster *c) {
  for (int p = 0; p < c->P; p++) scps__engine_destroy(c->e[p]);
  scps__layout_destroy(c->layout);
  memset(c, 0, sizeof *c);
}

/* Overwrites every row and slot float (padding included) with distinct
 * values, so that any misplaced row or column shows. */
static void scramble(cluster *c, uint64_t seed) {
  const scps_layout *l = c->layout;
  for (int p = 0; p < c->P; p++)
    for (int s = 0; s < l->n_stacks; s++)
      for (int32_t ls = 0; ls < l->topology.sc_per_process; ls++) {
        size_t n = (size_t)l->stacks[s].rows_per_sc * (size_t)l->stacks[s].dim;
        int slots = scps__optimizer_num_slots(l->stacks[s].optimizer.type);
        for (int k = -1; k < slots; k++) {
          float *v = k < 0 ? scps__engine_shard(c->e[p], s, ls) : scps__engine_slot(c->e[p], s, ls, k);
          for (size_t i = 0; i < n; i++) {
            uint64_t x = seed ^ ((uint64_t)p << 56) ^ ((uint64_t)s << 48) ^ ((uint64_t)ls << 40) ^
                         ((uint64_t)(k + 1) << 36) ^ i;
            v[i] = (float)(scps__hash64(&x, sizeof x, 0) >> 40) * 0x1p-20f - 8.0f;
          }
        }
      }
}

/* Every (table, id) row and its slots equal in both clusters. */
static int compare_rows(const cluster *a, const cluster *b, const char *what) {
  const scps_layout *la = a->layout, *lb = b->layout;
  int bad = 0;
  float ra[32], rb[32], sa[64], sb[64];
  for (int t = 0; t < la->n_tables; t++) {
    int d = la->table_specs[t].embedding_dim, ns = scps__optimizer_num_slots(la->table_specs[t].optimizer.type);
    for (int64_t id = 0; id < la->table_specs[t].vocabulary_size; id++) {
      int pa = scps__layout_process_of_sc(la, scps__layout_sc_of(la, t, id));
      int pb = scps__layout_process_of_sc(lb, scps__layout_sc_of(lb, t, id));
      scps_error err;
      if (scps__engine_read_row(a->e[pa], t, id, ra, sa, &err) ||
          scps__engine_read_row(b->e[pb], t, id, rb, sb, &err)) {
        CHECKF(0, "%s: read_row: %s", what, err.msg);
        return 1;
      }
      if (memcmp(ra, rb, sizeof(float) * (size_t)d) || memcmp(sa, sb, sizeof(float) * (size_t)(d * ns))) {
        if (bad++ < 3) CHECKF(0, "%s: table %s id %lld differs", what, la->table_specs[t].name, (long long)id);
      }
    }
  }
  CHECKF(bad == 0, "%s: %d rows differ", what, bad);
  return bad;
}

static void save_all(const cluster *c, const char *root, int64_t step, const scps_checkpoint_limits *lim) {
  scps_error err_, *err = &err_;
  for (int p = 0; p < c->P; p++) {
    scps_checkpoint_stats st = {0};
    CHECK_OK(scps__checkpoint_save(c->e[p], root, step, lim, &st, err), err);
    CHECK(st.files == c->layout->n_stacks * c->layout->topology.sc_per_process && st.bytes > 0);
  }
}

static int load_all(cluster *c, const char *dir, scps_error *err) {
  scps_checkpoint *ck = NULL;
  int rc = scps__checkpoint_open(dir, &ck, err);
  for (int p = 0; !rc && p < c->P; p++) rc = scps__checkpoint_load(ck, c->e[p], NULL, err);
  scps__checkpoint_close(ck);
  return rc;
}

static const char *step_dir(const char *root, int64_t step) {
  static char buf[512];
  snprintf(buf, sizeof buf, "%s/step-%012lld", root, (long long)step);
  return buf;
}

/* ---- tests ---- */

static void test_same_topology_bitwise(const specs *s) {
  cluster a, b;
  if (cluster_create(&a, s, 2, 2) || cluster_create(&b, s, 2, 2)) goto out;
  scramble(&a, 1);
  const char *root = sub("same");
  save_all(&a, root, 7, NULL);
  scps_error err_, *err = &err_;
  CHECK_OK(load_all(&b, step_dir(root, 7), err), err);
  const scps_layout *l = a.layout;
  for (int p = 0; p < 2; p++)
    for (int st = 0; st < l->n_stacks; st++)
      for (int32_t ls = 0; ls < 2; ls++) {
        size_t n = (size_t)l->stacks[st].rows_per_sc * (size_t)l->stacks[st].dim * sizeof(float);
        CHECKF(!memcmp(scps__engine_shard(a.e[p], st, ls), scps__engine_shard(b.e[p], st, ls), n),
               "process %d stack %d sc %d rows", p, st, ls);
        for (int k = 0; k < scps__optimizer_num_slots(l->stacks[st].optimizer.type); k++)
          CHECKF(!memcmp(scps__engine_slot(a.e[p], st, ls, k), scps__engine_slot(b.e[p], st, ls, k), n),
                 "process %d stack %d sc %d slot %d", p, st, ls, k);
      }
out:
  cluster_destroy(&a);
  cluster_destroy(&b);
}

static void test_reshard_round_trip(const specs *s) {
  cluster a, b, c, d;
  memset(&b, 0, sizeof b), memset(&c, 0, sizeof c), memset(&d, 0, sizeof d);
  if (cluster_create(&a, s, 2, 2) || cluster_create(&b, s, 3, 1) || cluster_create(&c, s, 1, 4))
    goto out;
  scramble(&a, 2);
  scps_error err_, *err = &err_;
  const scps_layout *l = a.layout;
  scps_checkpoint_limits *lim = calloc((size_t)l->n_stacks, sizeof *lim);
  for (int st = 0; st < l->n_stacks; st++) {
    snprintf(lim[st].stack, sizeof lim[st].stack, "%s", l->stacks[st].name);
    lim[st].max_ids_per_partition = 1000 + st;
    lim[st].max_unique_ids_per_partition = 500 + st;
  }
  const char *ra = sub("r2x2"), *rb = sub("r3x1");
  save_all(&a, ra, 42, lim);
  CHECK_OK(load_all(&b, step_dir(ra, 42), err), err);
  compare_rows(&a, &b, "2x2 -> 3x1");
  save_all(&b, rb, 42, NULL);
  CHECK_OK(load_all(&c, step_dir(rb, 42), err), err);
  compare_rows(&a, &c, "2x2 -> 3x1 -> 1x4");

  /* Step, specs and the limits in force survive, by stack name. */
  scps_checkpoint *ck = NULL;
  CHECK_OK(scps__checkpoint_open(step_dir(ra, 42), &ck, err), err);
  if (ck) {
    CHECK(scps__checkpoint_step(ck) == 42);
    CHECK(scps__checkpoint_topology(ck)->num_processes == 2);
    for (int st = 0; st < l->n_stacks; st++) {
      int32_t m = 0, u = 0;
      CHECK_OK(scps__checkpoint_limits_of(ck, l->stacks[st].name, &m, &u), err);
      CHECKF(m == 1000 + st && u == 500 + st, "stack %s limits %d %d", l->stacks[st].name, m, u);
    }
    CHECK(scps__checkpoint_limits_of(ck, "no such stack", &(int32_t){0}, &(int32_t){0}) == SCPS_ENOENT);
    const scps_table_spec *t;
    const scps_feature_spec *f;
    int nt, nf;
    scps__checkpoint_specs(ck, &t, &nt, &f, &nf);
    char msg[512];
    CHECKF(!scps__specs_diff(&l->topology, s->t, N_TABLES, s->f, N_TABLES, &l->topology, t, nt, f, nf,
                            "test", "checkpoint", msg, sizeof msg), "%s", msg);
    CHECK_OK(scps__checkpoint_verify(ck, NULL, err), err);
    scps__checkpoint_close(ck);
  }
  /* Limits of the 3x1 save were the layout's own. */
  CHECK_OK(scps__checkpoint_open(step_dir(rb, 42), &ck, err), err);
  if (ck) {
    int32_t m = 0, u = 0;
    CHECK_OK(scps__checkpoint_limits_of(ck, b.layout->stacks[0].name, &m, &u), err);
    CHECK(m == b.layout->stacks[0].max_ids_per_partition);
    scps__checkpoint_close(ck);
  }

  /* The offline converter: 2x2 -> 1x4 under another root, same values and limits. */
  scps_topology to = {1, 4, 1 << 20};
  scps_checkpoint_stats cst = {0};
  CHECK_OK(scps__checkpoint_export_topology(step_dir(ra, 42), &to, sub("conv"), &cst, err), err);
  CHECK(cst.files > 0 && cst.bytes > 0);
  /* Into the source's own root it would overwrite what it reads: refused,
   * the source still whole. */
  int crc = scps__checkpoint_export_topology(step_dir(ra, 42), &to, ra, &cst, err);
  CHECKF(crc == SCPS_EEXIST && strstr(err->msg, "already exists"), "rc %d: %s", crc, err->msg);
  CHECK_OK(scps__checkpoint_open(step_dir(ra, 42), &ck, err), err);
  scps__checkpoint_close(ck);
  if (cluster_create(&d, s, 1, 4) == 0) {
    CHECK_OK(load_all(&d, step_dir(sub("conv"), 42), err), err);
    compare_rows(&a, &d, "convert 2x2 -> 1x4");
    CHECK_OK(scps__checkpoint_open(step_dir(sub("conv"), 42), &ck, err), err);
    if (ck) {
      int32_t m = 0, u = 0;
      CHECK_OK(scps__checkpoint_limits_of(ck, l->stacks[1].name, &m, &u), err);
      CHECK(m == 1001 && u == 501);
      scps__checkpoint_close(ck);
    }
  }
  /* Specs that differ are refused, naming the difference. */
  specs other = *s;
  other.t[14].optimizer.learning_rate *= 2;
  cluster x;
  if (cluster_create(&x, &other, 2, 2) == 0) {
    CHECK(load_all(&x, step_dir(ra, 42), err) == SCPS_EMISMATCH);
    CHECKF(strstr(err->msg, "t14") && strstr(err->msg, "learning_rate"), "%s", err->msg);
  }
  cluster_destroy(&x);
  free(lim);
out:
  cluster_destroy(&a);
  cluster_destroy(&b);
  cluster_destroy(&c);
  cluster_destroy(&d);
}

static void write_file(const char *path, const char *data, size_t len) {
  FILE *f = fopen(path, "wb");
  CHECK(f != NULL);
  if (!f) return;
  fwrite(data, 1, len, f);
  fclose(f);
}

static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  *len = fread(buf, 1, (size_t)n, f);
  buf[*len] = '\0';
  fclose(f);
  return buf;
}

/* Rewrites a manifest's checksum for its (edited) text, as a writer would. */
static void reseal(char *text, size_t len) {
  char *key = NULL, *p = text;
  while ((p = strstr(p, "\"checksum\": \""))) key = p++;
  if (!key) return;
  char *digits = key + strlen("\"checksum\": \"");
  memset(digits, '0', 16);
  char hex[17];
  snprintf(hex, sizeof hex, "%016" PRIx64, scps__hash64(text, len, 0));
  memcpy(digits, hex, 16);
}

static void test_corruption(const specs *s) {
  cluster a;
  if (cluster_create(&a, s, 2, 2)) return;
  scramble(&a, 3);
  const char *root = sub("corrupt");
  save_all(&a, root, 1, NULL);
  const char *dir = step_dir(root, 1);
  char dirc[512];
  snprintf(dirc, sizeof dirc, "%s", dir);
  scps_error err_, *err = &err_;
  DIR *d = opendir(dirc);
  CHECK(d != NULL);
  int n_files = 0;
  struct dirent *de;
  while (d && (de = readdir(d))) {
    if (de->d_name[0] == '.') continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dirc, de->d_name);
    size_t len;
    char *orig = read_file(path, &len);
    if (!orig) continue;
    n_files++;
    /* A byte near the end and one in the middle, in turn. */
    size_t where[2] = {len / 2, len - 3};
    for (int w = 0; w < 2; w++) {
      char *bad = malloc(len);
      memcpy(bad, orig, len);
      bad[where[w]] ^= 0x10;
      write_file(path, bad, len);
      free(bad);
      int rc = load_all(&a, dirc, err);
      CHECKF(rc == SCPS_ECORRUPT && strstr(err->msg, de->d_name), "flip in %s at %zu: rc %d: %s",
             de->d_name, where[w], rc, err->msg);
    }
    /* Truncated: open refuses, naming it. */
    write_file(path, orig, len - 1);
    scps_checkpoint *ck = NULL;
    int rc = scps__checkpoint_open(dirc, &ck, err);
    CHECKF(rc == SCPS_ECORRUPT && strstr(err->msg, de->d_name), "truncated %s: rc %d: %s", de->d_name,
           rc, err->msg);
    scps__checkpoint_close(ck);
    write_file(path, orig, len);
    free(orig);
  }
  if (d) closedir(d);
  CHECK(n_files == 2 + 2 * 2 * a.layout->n_stacks);
  CHECK_OK(load_all(&a, dirc, err), err);

  /* Files are read on several threads; with two damaged ones the error
   * names the first in stack-major order, every time. */
  char first[1024], later[1024];
  snprintf(first, sizeof first, "%s/0.sc3.bin", dirc);
  snprintf(later, sizeof later, "%s/1.sc0.bin", dirc);
  size_t flen, llen;
  char *forig = read_file(first, &flen), *lorig = read_file(later, &llen);
  CHECK(forig && lorig && a.layout->n_stacks >= 2);
  if (forig && lorig) {
    char *fbad = malloc(flen), *lbad = malloc(llen);
    memcpy(fbad, forig, flen);
    memcpy(lbad, lorig, llen);
    fbad[flen - 1] ^= 1;
    lbad[0] ^= 1;
    write_file(first, fbad, flen);
    write_file(later, lbad, llen);
    for (int rep = 0; rep < 5; rep++) {
      scps_checkpoint *ck = NULL;
      CHECK_OK(scps__checkpoint_open(dirc, &ck, err), err);
      int rc = ck ? scps__checkpoint_verify(ck, NULL, err) : SCPS_EINVAL;
      CHECKF(rc == SCPS_ECORRUPT && strstr(err->msg, "0.sc3.bin"), "verify %d: rc %d: %s", rep, rc, err->msg);
      scps__checkpoint_close(ck);
    }
    write_file(first, forig, flen);
    write_file(later, lorig, llen);
    free(fbad);
    free(lbad);
  }
  free(forig);
  free(lorig);

  /* Manifests that are not JSON, or whose content is off (with a valid
   * checksum), give clear errors and no huge allocation. */
  char mpath[1024];
  snprintf(mpath, sizeof mpath, "%s/manifest.p1.json", dirc);
  size_t len;
  char *orig = read_file(mpath, &len);
  static const struct {
    const char *from, *to;
    int code;
    const char *says;
  } edits[] = {
      {"{\"format\"", "[\"format\"", SCPS_EPARSE, "line 1"},
      {"\"rows_per_sc\": ", "\"rows_per_sc\": 9999999999999", SCPS_EPARSE, "rows_per_sc"},
      {"\"format\": 1", "\"format\": 7", SCPS_EPARSE, "format 7"},
      {"\"step\": 1,", "\"step\": 2,", SCPS_EMISMATCH, "step"},
      {".sc2.bin", ".sc0.bin", SCPS_EPARSE, "expected"},
      {"\"slots\": 0,", "\"slots\": 1,", SCPS_EPARSE, "needs 0"},
  };
  for (size_t i = 0; orig && i < sizeof edits / sizeof edits[0]; i++) {
    char *at = strstr(orig, edits[i].from);
    CHECKF(at != NULL, "edit %zu: '%s' not in the manifest", i, edits[i].from);
    if (!at) continue;
    size_t nlen = len - strlen(edits[i].from) + strlen(edits[i].to);
    char *ed = malloc(nlen + 1);
    size_t pre = (size_t)(at - orig);
    memcpy(ed, orig, pre);
    memcpy(ed + pre, edits[i].to, strlen(edits[i].to));
    memcpy(ed + pre + strlen(edits[i].to), at + strlen(edits[i].from), len - pre - strlen(edits[i].from));
    ed[nlen] = '\0';
    reseal(ed, nlen);
    write_file(mpath, ed, nlen);
    free(ed);
    scps_checkpoint *ck = NULL;
    int rc = scps__checkpoint_open(dirc, &ck, err);
    CHECKF(rc == edits[i].code && strstr(err->msg, edits[i].says), "edit %zu: rc %d: %s", i, rc, err->msg);
    scps__checkpoint_close(ck);
  }
  write_file(mpath, "not json", 8);
  CHECK(scps__checkpoint_open(dirc, &(scps_checkpoint *){NULL}, err) == SCPS_ECORRUPT);
  CHECKF(strstr(err->msg, "manifest.p1.json"), "%s", err->msg);
  if (orig) write_file(mpath, orig, len);
  free(orig);
  /* A data file that is missing. */
  char dpath[1024];
  snprintf(dpath, sizeof dpath, "%s/0.sc3.bin", dirc);
  char *data = read_file(dpath, &len);
  unlink(dpath);
  CHECK(scps__checkpoint_open(dirc, &(scps_checkpoint *){NULL}, err) == SCPS_ENOENT);
  CHECKF(strstr(err->msg, "0.sc3.bin"), "%s", err->msg);
  if (data) write_file(dpath, data, len);
  free(data);
  CHECK_OK(load_all(&a, dirc, err), err);
  cluster_destroy(&a);
}

/* Whether process 0's save of `step` under root, in a child with a 4 KiB
 * file-size limit (per process, hence the fork), fails with ENOSPC naming a
 * data file. */
static bool save_over_fsize_limit(const cluster *a, const char *root, int64_t step) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {4096, 4096};
    setrlimit(RLIMIT_FSIZE, &rl);
    scps_error e;
    int r = scps__checkpoint_save(a->e[0], root, step, NULL, NULL, &e);
    _exit(r == SCPS_ENOSPC && strstr(e.msg, ".bin") ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static void test_latest_and_errors(const specs *s) {
  cluster a;
  if (cluster_create(&a, s, 2, 2)) return;
  scramble(&a, 4);
  scps_error err_, *err = &err_;
  const char *root = sub("latest");
  char path[512];
  CHECK(scps__checkpoint_root_latest(root, path, sizeof path, err) == SCPS_ENOENT);
  save_all(&a, root, 10, NULL);
  scramble(&a, 5);
  save_all(&a, root, 20, NULL);
  CHECK_OK(scps__checkpoint_root_latest(root, path, sizeof path, err), err);
  CHECKF(!strcmp(path, step_dir(root, 20)), "%s", path);
  /* A crash before process 1's manifest: step 20 is incomplete. */
  char m[600];
  snprintf(m, sizeof m, "%s/manifest.p1.json", step_dir(root, 20));
  CHECK(unlink(m) == 0);
  CHECK_OK(scps__checkpoint_root_latest(root, path, sizeof path, err), err);
  CHECKF(!strcmp(path, step_dir(root, 10)), "%s", path);
  CHECK(scps__checkpoint_open(step_dir(root, 20), &(scps_checkpoint *){NULL}, err) == SCPS_ENOENT);
  CHECKF(strstr(err->msg, "manifest.p1.json"), "%s", err->msg);
  /* What --restore and 'scps-admin checkpoint verify' are given by mistake:
   * a step that is not there, the root itself, a file. */
  CHECK(scps__checkpoint_open(step_dir(root, 99), &(scps_checkpoint *){NULL}, err) == SCPS_ENOENT);
  CHECKF(strstr(err->msg, "does not exist"), "%s", err->msg);
  CHECK(scps__checkpoint_open(root, &(scps_checkpoint *){NULL}, err) == SCPS_ENOENT);
  CHECKF(strstr(err->msg, "is a checkpoint root") && strstr(err->msg, "step-"), "%s", err->msg);
  snprintf(m, sizeof m, "%s/manifest.p0.json", step_dir(root, 10));
  CHECK(scps__checkpoint_open(m, &(scps_checkpoint *){NULL}, err) == SCPS_EINVAL);
  CHECKF(strstr(err->msg, "not a directory"), "%s", err->msg);
  /* A newer one with every file present but one a byte short was damaged,
   * not cut short: named, not passed over for step 10. */
  save_all(&a, root, 30, NULL);
  char data[600];
  snprintf(data, sizeof data, "%s/0.sc0.bin", step_dir(root, 30));
  struct stat sb;
  CHECK(stat(data, &sb) == 0 && truncate(data, sb.st_size - 1) == 0);
  int lrc = scps__checkpoint_root_latest(root, path, sizeof path, err);
  CHECKF(lrc == SCPS_ECORRUPT && strstr(err->msg, "damaged") && strstr(err->msg, "0.sc0.bin"), "rc %d: %s", lrc,
         err->msg);

  /* An unwritable place: a path through a regular file. */
  write_file(sub("plainfile"), "x", 1);
  char bad_root[600];
  snprintf(bad_root, sizeof bad_root, "%s/ckpt", sub("plainfile"));
  int rc = scps__checkpoint_save(a.e[0], bad_root, 1, NULL, NULL, err);
  CHECKF(rc == SCPS_EIO && strstr(err->msg, sub("plainfile")), "rc %d: %s", rc, err->msg);

  /* A file-size limit: the save fails with ENOSPC, leaves no temporaries and
   * the previous checkpoint still loads. Forked: the limit is per process. */
  const char *froot = sub("fsize");
  save_all(&a, froot, 1, NULL);
  CHECK(save_over_fsize_limit(&a, froot, 2));
  DIR *d = opendir(step_dir(froot, 2));
  int leftovers = 0;
  struct dirent *de;
  while (d && (de = readdir(d)))
    if (de->d_name[0] != '.') leftovers++;
  if (d) closedir(d);
  CHECKF(leftovers == 0, "%d files left in the failed save's directory", leftovers);
  CHECK_OK(scps__checkpoint_root_latest(froot, path, sizeof path, err), err);
  CHECKF(!strcmp(path, step_dir(froot, 1)), "%s", path);
  CHECK_OK(load_all(&a, path, err), err);

  /* The same step saved again (a retry, a final save after a periodic one)
   * fails the same way: the complete checkpoint already there is kept, and
   * no temporary is left beside it. */
  CHECK(save_over_fsize_limit(&a, froot, 1));
  d = opendir(step_dir(froot, 1));
  leftovers = 0;
  while (d && (de = readdir(d)))
    if (strstr(de->d_name, ".tmp")) leftovers++;
  if (d) closedir(d);
  CHECKF(leftovers == 0, "%d temporaries left beside step 1", leftovers);
  CHECK_OK(scps__checkpoint_root_latest(froot, path, sizeof path, err), err);
  CHECKF(!strcmp(path, step_dir(froot, 1)), "the failed re-save of step 1 kept it: %s", path);
  CHECK_OK(load_all(&a, path, err), err);
  cluster_destroy(&a);
}

/* Retention as process 0 of the cluster: saved without a fingerprint, so
 * the declaration decides what is its own. */
static int retain_as_p0(const cluster *c, const char *root, int keep, int64_t saved, int in_progress,
                        scps_error *err) {
  scps_checkpoint_owner own = {.process_index = 0, .layout = c->layout};
  int fd = open(root, O_RDONLY | O_DIRECTORY);
  if (fd < 0) return scps_error_set(err, SCPS_EIO, "cannot open '%s'", root);
  int rc = scps__checkpoint_root_retain(fd, root, &own, keep, saved, in_progress, err);
  close(fd);
  return rc;
}

static bool has_manifest(const char *root, int64_t step, int p) {
  char m[600];
  struct stat st;
  snprintf(m, sizeof m, "%s/manifest.p%d.json", step_dir(root, step), p);
  return stat(m, &st) == 0;
}

static void drop_manifest(const char *root, int64_t step, int p) {
  char m[600];
  snprintf(m, sizeof m, "%s/manifest.p%d.json", step_dir(root, step), p);
  CHECKF(unlink(m) == 0, "unlink %s", m);
}

static void test_retain(const specs *s) {
  cluster a;
  if (cluster_create(&a, s, 2, 1)) return;
  scps_error err_, *err = &err_;
  const char *root = sub("retain");
  for (int step = 1; step <= 6; step++) save_all(&a, root, step, NULL);
  /* 3 and 6 incomplete (process 1 cut short): 3 is older than the newest
   * complete one and goes (process 1's files, which no manifest lists,
   * stay); 6 may be a save in progress and stays. */
  drop_manifest(root, 3, 1);
  drop_manifest(root, 6, 1);
  CHECK(retain_as_p0(&a, root, 0, 6, 1, err) == SCPS_EINVAL);
  CHECK_OK(retain_as_p0(&a, root, 2, 6, 1, err), err);
  struct stat st;
  for (int step = 1; step <= 6; step++) {
    bool want = step == 4 || step == 5 || step == 6;
    CHECKF(has_manifest(root, step, 0) == want, "step %d %s", step, want ? "missing" : "kept");
    if (step < 3) CHECKF(stat(step_dir(root, step), &st) != 0, "step %d's directory is still there", step);
  }
  char path[512];
  CHECK_OK(scps__checkpoint_root_latest(root, path, sizeof path, err), err);
  CHECKF(!strcmp(path, step_dir(root, 5)), "%s", path);

  /* Incomplete saves newer than every complete one: besides the one just
   * saved (5), the newest `in_progress` (4) stay, older ones (3) go. */
  const char *proot = sub("retain_pending");
  for (int step = 1; step <= 5; step++) save_all(&a, proot, step, NULL);
  for (int step = 3; step <= 5; step++) drop_manifest(proot, step, 1);
  CHECK_OK(retain_as_p0(&a, proot, 1, 5, 1, err), err);
  for (int step = 1; step <= 5; step++) {
    bool want = step == 2 || step == 4 || step == 5;
    CHECKF(has_manifest(proot, step, 0) == want, "pending: step %d %s", step, want ? "missing" : "kept");
  }

  /* After a restore of step 2 of 1..4, the save of step 3 is kept and the
   * checkpoints of the state left behind (3 is overwritten, 4 newer) go
   * aside: 4 is no longer the newest. */
  const char *rroot = sub("retain_rollback");
  for (int step = 1; step <= 4; step++) save_all(&a, rroot, step, NULL);
  CHECK_OK(retain_as_p0(&a, rroot, 1, 3, 1, err), err);
  CHECKF(stat(step_dir(rroot, 3), &st) == 0, "the step just saved was removed");
  CHECKF(stat(step_dir(rroot, 4), &st) != 0, "the newer step was left where it would be restored");
  char aside[600];
  snprintf(aside, sizeof aside, "%s/superseded-step-%012d", rroot, 4);
  CHECKF(stat(aside, &st) == 0, "%s missing", aside);
  CHECK_OK(scps__checkpoint_root_latest(rroot, path, sizeof path, err), err);
  CHECKF(!strcmp(path, step_dir(rroot, 3)), "%s", path);
  CHECKF(stat(step_dir(rroot, 2), &st) != 0, "keep 1: step 2 should go");
  cluster_destroy(&a);
}


static int open_dir(const char *path) { return open(path, O_RDONLY | O_DIRECTORY); }

/* Saves processes [p0, p1) of c at step under root as the owner with
 * fingerprint byte fp (0: none), through scps__checkpoint_save_at. */
static int save_owned_range(const cluster *c, int p0, int p1, const char *root, int64_t step, uint8_t fp,
                            scps_error *err) {
  mkdir(root, 0755);
  int fd = open_dir(root), rc = 0;
  if (fd < 0) return scps_error_set(err, SCPS_EIO, "cannot open '%s'", root);
  for (int p = p0; p < p1 && !rc; p++) {
    scps_checkpoint_owner own = {.process_index = p, .has_fingerprint = fp != 0, .layout = c->layout};
    memset(own.fingerprint, fp, sizeof own.fingerprint);
    scps_checkpoint_save_opts so = {.owner = &own};
    rc = scps__checkpoint_save_at(fd, root, c->e[p], step, NULL, &so, NULL, err);
  }
  close(fd);
  return rc;
}

/* Process p's part alone, as a process with a root of its own saves it. */
static int save_part(const cluster *c, const char *root, int64_t step, int p, uint8_t fp, scps_error *err) {
  return save_owned_range(c, p, p + 1, root, step, fp, err);
}

/* Every process of c. */
static int save_owned(const cluster *c, const char *root, int64_t step, uint8_t fp, scps_error *err) {
  return save_owned_range(c, 0, c->P, root, step, fp, err);
}

static bool same_file(const char *a, const char *b) {
  size_t la = 0, lb = 0;
  char *x = read_file(a, &la), *y = read_file(b, &lb);
  bool same = x && y && la == lb && !memcmp(x, y, la);
  free(x);
  free(y);
  return same;
}

/* A save from a snapshot writes the state at the snapshot, byte for byte
 * what a save from the engine then would, whatever the engine holds since. */
static void test_snapshot(const specs *s) {
  cluster a;
  if (cluster_create(&a, s, 1, 2)) return;
  scps_error err_, *err = &err_;
  scramble(&a, 7);
  const char *plain = sub("snap_plain");
  char copied[300];
  snprintf(copied, sizeof copied, "%s", sub("snap_copied"));
  save_all(&a, plain, 1, NULL);
  scps_checkpoint_snapshot *snap = NULL;
  CHECK_OK(scps__checkpoint_snapshot_take(a.e[0], &snap, err), err);
  scramble(&a, 8);
  mkdir(copied, 0755);
  int fd = open_dir(copied);
  scps_checkpoint_save_opts so = {.snapshot = snap};
  scps_checkpoint_stats st = {0};
  CHECK_OK(scps__checkpoint_save_at(fd, copied, a.e[0], 1, NULL, &so, &st, err), err);
  CHECK(st.bytes == scps__checkpoint_snapshot_bytes(a.e[0]));
  close(fd);
  /* Idle, then refilled in place from the engine as it is now. */
  scps__checkpoint_snapshot_idle(snap);
  scps_checkpoint_snapshot *same = snap;
  CHECK_OK(scps__checkpoint_snapshot_take(a.e[0], &snap, err), err);
  CHECK(snap == same);
  const char *refilled = sub("snap_refilled"), *now = sub("snap_now");
  save_all(&a, now, 1, NULL);
  mkdir(refilled, 0755);
  fd = open_dir(refilled);
  so.snapshot = snap;
  CHECK_OK(scps__checkpoint_save_at(fd, refilled, a.e[0], 1, NULL, &so, NULL, err), err);
  close(fd);
  scps__checkpoint_snapshot_free(snap);
  snap = NULL;
  char ra[600], rb[600];
  snprintf(ra, sizeof ra, "%s/0.sc1.bin", step_dir(now, 1));
  snprintf(rb, sizeof rb, "%s/0.sc1.bin", step_dir(refilled, 1));
  CHECKF(same_file(ra, rb), "the refilled snapshot's %s differs from the engine's %s", rb, ra);
  const scps_layout *l = a.layout;
  char pa[600], pb[600];
  for (int st_i = 0; st_i < l->n_stacks; st_i++)
    for (int sc = 0; sc < 2; sc++) {
      snprintf(pa, sizeof pa, "%s/%d.sc%d.bin", step_dir(plain, 1), st_i, sc);
      snprintf(pb, sizeof pb, "%s/%d.sc%d.bin", step_dir(copied, 1), st_i, sc);
      CHECKF(same_file(pa, pb), "%s and %s differ", pa, pb);
    }
  snprintf(pa, sizeof pa, "%s/manifest.p0.json", step_dir(plain, 1));
  snprintf(pb, sizeof pb, "%s/manifest.p0.json", step_dir(copied, 1));
  CHECKF(same_file(pa, pb), "%s and %s differ", pa, pb);
  /* Another engine's snapshot is refused. */
  cluster b;
  if (cluster_create(&b, s, 1, 2) == 0) {
    CHECK_OK(scps__checkpoint_snapshot_take(b.e[0], &snap, err), err);
    fd = open_dir(copied);
    so.snapshot = snap;
    CHECK(scps__checkpoint_save_at(fd, copied, a.e[0], 2, NULL, &so, NULL, err) == SCPS_EINVAL);
    close(fd);
    /* Taking from another engine replaces it. */
    CHECK_OK(scps__checkpoint_snapshot_take(a.e[0], &snap, err), err);
    so.snapshot = snap;
    fd = open_dir(copied);
    CHECK_OK(scps__checkpoint_save_at(fd, copied, a.e[0], 3, NULL, &so, NULL, err), err);
    close(fd);
    scps__checkpoint_snapshot_free(snap);
    cluster_destroy(&b);
  }
  cluster_destroy(&a);
}

/* Symlinks planted where a save's step directory or files go: the first
 * fails the save naming it, the others are replaced, never written
 * through. */
static void test_save_no_follow(const specs *s) {
  cluster a;
  if (cluster_create(&a, s, 1, 1)) return;
  scps_error err_, *err = &err_;
  char root[300], outside[300], victim[400], path[700];
  snprintf(root, sizeof root, "%s", sub("nofollow"));
  snprintf(outside, sizeof outside, "%s", sub("nofollow_outside"));
  mkdir(root, 0755);
  mkdir(outside, 0755);
  snprintf(victim, sizeof victim, "%s/victim", outside);
  write_file(victim, "keep", 4);
  CHECK(symlink(outside, step_dir(root, 1)) == 0);
  int rc = save_owned(&a, root, 1, 0, err);
  CHECKF(rc == SCPS_EIO && strstr(err->msg, "symbolic link") && strstr(err->msg, "step-000000000001"), "rc %d: %s",
         rc, err->msg);
  CHECK(mkdir(step_dir(root, 2), 0755) == 0);
  const char *names[] = {"0.sc0.bin", "0.sc0.bin.tmp", "manifest.p0.json", "manifest.p0.json.tmp"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    snprintf(path, sizeof path, "%s/%s", step_dir(root, 2), names[i]);
    CHECK(symlink(victim, path) == 0);
  }
  CHECK_OK(save_owned(&a, root, 2, 0, err), err);
  size_t len = 0;
  char *v = read_file(victim, &len);
  CHECKF(v && len == 4 && !memcmp(v, "keep", 4), "the save wrote through a planted symlink");
  free(v);
  DIR *d = opendir(outside);
  int n = 0;
  struct dirent *de;
  while (d && (de = readdir(d)))
    if (de->d_name[0] != '.') n++;
  if (d) closedir(d);
  CHECKF(n == 1, "%d entries outside the root, expected the victim alone", n);
  char found[512];
  CHECK_OK(scps__checkpoint_root_latest(root, found, sizeof found, err), err);
  CHECK_OK(load_all(&a, found, err), err);
  cluster_destroy(&a);
}

typedef struct notes {
  int n;
  char last[600];
} notes;

static void note_fn(void *ctx, const char *dir, const char *why) {
  notes *x = ctx;
  x->n++;
  snprintf(x->last, sizeof x->last, "%s: %s", dir, why);
}

/* Another cluster's checkpoints (another fingerprint, or none and another
 * declaration) in our root, far ahead: not restored, not counted, not
 * touched; a file nobody listed in one of ours survives its pruning; a
 * symlinked step directory is not followed; a save of a step whose
 * directory holds another cluster's checkpoint is refused. */
static void test_ownership(const specs *s) {
  cluster a, other;
  if (cluster_create(&a, s, 2, 1)) return;
  specs s2 = *s;
  s2.t[0].vocabulary_size += 8;
  if (cluster_create(&other, &s2, 1, 1)) {
    cluster_destroy(&a);
    return;
  }
  scps_error err_, *err = &err_;
  char root[300], outside[300], path[700];
  snprintf(root, sizeof root, "%s", sub("owned"));
  snprintf(outside, sizeof outside, "%s", sub("owned_outside"));
  notes seen = {0};
  scps_checkpoint_owner own = {.process_index = 0, .has_fingerprint = true, .layout = a.layout,
                               .note = note_fn, .note_ctx = &seen};
  memset(own.fingerprint, 0xaa, sizeof own.fingerprint);
  for (int step = 1; step <= 3; step++) CHECK_OK(save_owned(&a, root, step, 0xaa, err), err);
  /* Same declaration, another fingerprint: another cluster all the same. */
  CHECK_OK(save_owned(&a, root, 999999999999LL, 0xbb, err), err);
  /* No fingerprint, another declaration. */
  CHECK_OK(save_owned(&other, root, 999999999998LL, 0, err), err);
  /* No fingerprint, our declaration (written before manifests had one). */
  CHECK_OK(save_owned(&a, root, 4, 0, err), err);
  /* Our own checkpoint, copied outside and linked in as a step directory. */
  CHECK_OK(save_owned(&a, outside, 5, 0xaa, err), err);
  char linked[700];
  snprintf(linked, sizeof linked, "%s", step_dir(outside, 5));
  CHECK(symlink(linked, step_dir(root, 5)) == 0);
  snprintf(path, sizeof path, "%s/notes.txt", step_dir(root, 1));
  write_file(path, "mine", 4);

  char found[512];
  CHECK_OK(scps__checkpoint_root_latest(root, found, sizeof found, err), err);
  CHECKF(!strcmp(found, step_dir(root, 999999999999LL)), "%s", found);
  CHECK_OK(scps__checkpoint_root_latest_own(root, &own, found, sizeof found, err), err);
  /* Restoring reads through the link the operator's root holds (only
   * writing and pruning never follow one). */
  CHECKF(!strcmp(found, step_dir(root, 5)), "%s", found);
  CHECKF(seen.n >= 2 && strstr(seen.last, "another cluster"), "%d notes, last: %s", seen.n, seen.last);

  int fd = open_dir(root);
  seen.n = 0;
  CHECK_OK(scps__checkpoint_root_retain(fd, root, &own, 2, 4, 1, err), err);
  close(fd);
  struct stat st;
  CHECK(stat(step_dir(root, 999999999999LL), &st) == 0 && stat(step_dir(root, 999999999998LL), &st) == 0);
  CHECK(has_manifest(root, 999999999999LL, 0) && has_manifest(root, 999999999999LL, 1));
  CHECK(has_manifest(root, 4, 0) && has_manifest(root, 3, 0));
  CHECK(!has_manifest(root, 2, 0) && stat(step_dir(root, 2), &st) != 0);
  CHECK(!has_manifest(root, 1, 0) && !has_manifest(root, 1, 1));
  snprintf(path, sizeof path, "%s/notes.txt", step_dir(root, 1));
  CHECKF(stat(path, &st) == 0, "pruning removed %s, which no manifest lists", path);
  CHECK(has_manifest(outside, 5, 0) && has_manifest(outside, 5, 1));
  CHECKF(seen.n == 3, "%d step directories noted, expected the 2 foreign ones and the link; last %s", seen.n,
         seen.last);

  /* A save into a step directory that holds another cluster's checkpoint. */
  int rc = save_owned(&a, root, 999999999999LL, 0xaa, err);
  CHECKF(rc == SCPS_EMISMATCH && strstr(err->msg, "not this cluster's"), "rc %d: %s", rc, err->msg);
  CHECK(has_manifest(root, 999999999999LL, 0));
  scps_checkpoint *ck = NULL;
  CHECK_OK(scps__checkpoint_open(step_dir(root, 999999999999LL), &ck, err), err);
  CHECK(ck && !scps__checkpoint_is_owned(ck, &own, NULL, 0));
  scps__checkpoint_close(ck);
  cluster_destroy(&other);
  cluster_destroy(&a);
}

/* Processes with roots of their own (a container's volume each): no step
 * is complete anywhere, and each restores the newest part of its own; a
 * part cut short is passed over, another cluster's noted and passed over,
 * a damaged one named; a shared root offers no parts. */
static void test_own_part_roots(const specs *s) {
  cluster a, b;
  if (cluster_create(&a, s, 2, 2)) return;
  if (cluster_create(&b, s, 2, 2)) {
    cluster_destroy(&a);
    return;
  }
  scps_error err_, *err = &err_;
  const char *roots[2] = {sub("own_part0"), sub("own_part1")}; /* two of sub's four buffers */
  char found[512], path[700];
  int64_t step = -1;
  notes seen = {0};
  scps_checkpoint_owner own[2];
  for (int p = 0; p < 2; p++) {
    own[p] = (scps_checkpoint_owner){.process_index = p, .has_fingerprint = true, .layout = a.layout,
                                     .note = note_fn, .note_ctx = &seen};
    memset(own[p].fingerprint, 0xaa, sizeof own[p].fingerprint);
  }
  scramble(&a, 6);
  for (int p = 0; p < 2; p++) CHECK_OK(save_owned_range(&a, p, p + 1, roots[p], 10, 0xaa, err), err);
  scramble(&a, 7);
  for (int p = 0; p < 2; p++) CHECK_OK(save_owned_range(&a, p, p + 1, roots[p], 20, 0xaa, err), err);
  /* Another cluster's part, newer, in process 1's root. */
  CHECK_OK(save_owned_range(&a, 1, 2, roots[1], 30, 0xbb, err), err);
  for (int p = 0; p < 2; p++) {
    CHECK(scps__checkpoint_root_latest_own(roots[p], &own[p], found, sizeof found, err) == SCPS_ENOENT);
    CHECK_OK(scps__checkpoint_root_latest_part(roots[p], &own[p], found, sizeof found, &step, err), err);
    CHECKF(!strcmp(found, step_dir(roots[p], 20)) && step == 20, "process %d: %s", p, found);
    scps_checkpoint *ck = NULL;
    CHECK_OK(scps__checkpoint_open_part(found, p, &ck, err), err);
    if (ck) CHECK_OK(scps__checkpoint_load(ck, b.e[p], NULL, err), err);
    scps__checkpoint_close(ck);
  }
  compare_rows(&a, &b, "parts restored from roots of their own");
  CHECKF(seen.n == 1 && strstr(seen.last, "step-000000000030"), "%d notes, last: %s", seen.n, seen.last);
  /* Process 1's save of step 20 cut short: a data file missing. */
  snprintf(path, sizeof path, "%s/0.sc2.bin", step_dir(roots[1], 20));
  CHECK(unlink(path) == 0);
  CHECK_OK(scps__checkpoint_root_latest_part(roots[1], &own[1], found, sizeof found, &step, err), err);
  CHECKF(!strcmp(found, step_dir(roots[1], 10)), "%s", found);
  /* Process 0's step 20 with every file present, one a byte short. */
  struct stat sb;
  snprintf(path, sizeof path, "%s/0.sc0.bin", step_dir(roots[0], 20));
  CHECK(stat(path, &sb) == 0 && truncate(path, sb.st_size - 1) == 0);
  int rc = scps__checkpoint_root_latest_part(roots[0], &own[0], found, sizeof found, &step, err);
  CHECKF(rc == SCPS_ECORRUPT && strstr(err->msg, "damaged") && strstr(err->msg, "step-000000000020"), "rc %d: %s",
         rc, err->msg);
  /* A shared root whose only step lacks process 1's file: incomplete, and
   * process 0's part of it is not restored alone. */
  const char *shared = sub("own_part_shared");
  CHECK_OK(save_owned(&a, shared, 40, 0xaa, err), err);
  snprintf(path, sizeof path, "%s/0.sc2.bin", step_dir(shared, 40));
  CHECK(unlink(path) == 0);
  rc = scps__checkpoint_root_latest_part(shared, &own[0], found, sizeof found, &step, err);
  CHECKF(rc == SCPS_ENOENT && strstr(err->msg, "shared"), "rc %d: %s", rc, err->msg);
  cluster_destroy(&b);
  cluster_destroy(&a);
}

/* A root holding one process's parts alone (a container's volume): its
 * newest part of ours in full is found, passing over another cluster's and
 * one cut short, and failing on one of the wrong size; retention counts
 * parts in full as complete checkpoints; once another
 * process's part is in the root it is shared, and only complete checkpoints
 * count there. */
static void test_own_parts(const specs *s) {
  cluster a;
  if (cluster_create(&a, s, 2, 1)) return;
  scps_error err_, *err = &err_;
  char root[300], found[512], path[700];
  int64_t found_step = -1;
  snprintf(root, sizeof root, "%s", sub("parts"));
  notes seen = {0};
  scps_checkpoint_owner own = {.process_index = 1, .has_fingerprint = true, .layout = a.layout,
                               .note = note_fn, .note_ctx = &seen};
  memset(own.fingerprint, 0xaa, sizeof own.fingerprint);
  for (int step = 1; step <= 3; step++) CHECK_OK(save_part(&a, root, step, 1, 0xaa, err), err);
  CHECK_OK(save_part(&a, root, 9, 1, 0xbb, err), err); /* another cluster's */
  CHECK_OK(save_part(&a, root, 4, 1, 0xaa, err), err);
  snprintf(path, sizeof path, "%s/0.sc1.bin", step_dir(root, 4));
  CHECK(unlink(path) == 0); /* cut short */
  CHECK(scps__checkpoint_root_latest_own(root, &own, found, sizeof found, err) == SCPS_ENOENT);
  CHECK_OK(scps__checkpoint_root_latest_part(root, &own, found, sizeof found, &found_step, err), err);
  CHECKF(!strcmp(found, step_dir(root, 3)), "%s", found);
  CHECKF(seen.n >= 1 && strstr(seen.last, "another cluster"), "%d notes, last: %s", seen.n, seen.last);
  scps_checkpoint *ck = NULL;
  CHECK_OK(scps__checkpoint_open_part(found, 1, &ck, err), err);
  CHECK(ck && scps__checkpoint_step(ck) == 3);
  scps__checkpoint_close(ck);

  CHECK_OK(save_part(&a, root, 5, 1, 0xaa, err), err);
  snprintf(path, sizeof path, "%s/0.sc1.bin", step_dir(root, 5));
  CHECK(truncate(path, 8) == 0);
  int rc = scps__checkpoint_root_latest_part(root, &own, found, sizeof found, &found_step, err);
  CHECKF(rc == SCPS_ECORRUPT && strstr(err->msg, "0.sc1.bin"), "rc %d: %s", rc, err->msg);
  CHECK(unlink(path) == 0);

  /* A save of step 2 after a restore of it (a cluster brought back to it):
   * retention sets the newer part in full aside, keeps the older one, and
   * step 2 is the newest part from then on. */
  int fd = open_dir(root);
  CHECK_OK(scps__checkpoint_root_retain(fd, root, &own, 2, 2, 1, err), err);
  close(fd);
  struct stat st;
  snprintf(path, sizeof path, "%s/superseded-step-%012d", root, 3);
  CHECK(stat(path, &st) == 0 && stat(step_dir(root, 3), &st) != 0);
  CHECK(has_manifest(root, 1, 1) && has_manifest(root, 2, 1));
  CHECK_OK(scps__checkpoint_root_latest_part(root, &own, found, sizeof found, &found_step, err), err);
  CHECKF(!strcmp(found, step_dir(root, 2)), "%s", found);

  /* Process 0's part of step 2 beside ours: a shared root, whose newest
   * complete checkpoint is step 2. */
  CHECK_OK(save_part(&a, root, 2, 0, 0xaa, err), err);
  rc = scps__checkpoint_root_latest_part(root, &own, found, sizeof found, &found_step, err);
  CHECKF(rc == SCPS_ENOENT, "a shared root: rc %d: %s", rc, err->msg);
  CHECK_OK(scps__checkpoint_root_latest_own(root, &own, found, sizeof found, err), err);
  CHECKF(!strcmp(found, step_dir(root, 2)), "%s", found);
  cluster_destroy(&a);
}

int main(void) {
  snprintf(base_dir, sizeof base_dir, "%s/scps_ckpt_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (!mkdtemp(base_dir)) {
    perror("mkdtemp");
    return 1;
  }
  specs s;
  make_specs(&s);
  test_same_topology_bitwise(&s);
  test_reshard_round_trip(&s);
  test_corruption(&s);
  test_latest_and_errors(&s);
  test_retain(&s);
  test_snapshot(&s);
  test_save_no_follow(&s);
  test_ownership(&s);
  test_own_part_roots(&s);
  test_own_parts(&s);
  rm_tree(base_dir);
  return scps_test_finish("test_checkpoint");
}
