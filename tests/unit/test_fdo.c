/* FDO: accumulation over steps, the reference's CSV layout (export bytes,
 * load of the latest file per process with elementwise max, errors), the
 * adaptive mode raising limits live on a prep (headroom, rounding, never
 * lowering, SparseCore budget cap, log of every change), and a server's
 * per-source counts of a partition against a plain count. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "scps_fdo.h"
#include "scps_layout.h"
#include "scps_prep.h"
#include "scps_test.h"

static scps_layout *make_layout(int32_t sc_per_process, int64_t memory) {
  scps_table_spec t[2];
  scps_feature_spec f[2];
  const char *names[2] = {"t_one", "t_two"};
  for (int i = 0; i < 2; i++) {
    scps__table_spec_init(&t[i]);
    snprintf(t[i].name, sizeof t[i].name, "tab%d", i);
    snprintf(t[i].stack, sizeof t[i].stack, "%s", names[i]);
    t[i].vocabulary_size = 1000;
    t[i].embedding_dim = 8;
    scps__feature_spec_init(&f[i]);
    snprintf(f[i].name, sizeof f[i].name, "f%d", i);
    snprintf(f[i].table, sizeof f[i].table, "tab%d", i);
    f[i].batch_size = 4;
  }
  scps_layout *l = NULL;
  scps_error err;
  CHECK_OK(scps__layout_create(t, 2, f, 2, &(scps_topology){1, sc_per_process, memory}, NULL, &l,
                              &err),
           &err);
  return l;
}

static char *make_dir(void) {
  char tmpl[] = "/tmp/scps_fdo_XXXXXX";
  char *d = mkdtemp(tmpl);
  return d ? strdup(d) : NULL;
}

static void remove_dir(const char *dir) {
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  CHECK(system(cmd) == 0);
}

static void write_text(const char *dir, const char *name, const char *text) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *fp = fopen(path, "w");
  CHECK(fp != NULL);
  if (!fp)
    return;
  fputs(text, fp);
  fclose(fp);
}

static char *read_text(const char *path) {
  FILE *fp = fopen(path, "rb");
  if (!fp)
    return NULL;
  static char buf[8192];
  size_t n = fread(buf, 1, sizeof buf - 1, fp);
  buf[n] = '\0';
  fclose(fp);
  return buf;
}

static void set_stats(scps_stack_stats *s, int32_t n, int32_t *ids, int32_t *uniq, int64_t *req,
                      const int32_t *a, const int32_t *u, const int64_t *r, int64_t drops) {
  s->num_sc = n;
  s->max_ids_per_partition = ids;
  s->max_unique_ids_per_partition = uniq;
  s->required_buffer_size_per_sc = req;
  memcpy(ids, a, (size_t)n * sizeof *ids);
  memcpy(uniq, u, (size_t)n * sizeof *uniq);
  memcpy(req, r, (size_t)n * sizeof *req);
  s->id_drop_counter = drops;
}

static void test_record_and_export(void) {
  scps_layout *l = make_layout(4, 1 << 30);
  if (!l)
    return;
  scps_fdo *f = NULL;
  scps_error err;
  CHECK_OK(scps__fdo_create(l, &(scps_fdo_options){.process_index = 3}, &f, &err), &err);
  if (!f) {
    scps__layout_destroy(l);
    return;
  }
  int one = scps__layout_find_stack(l, "t_one"), two = scps__layout_find_stack(l, "t_two");
  CHECK(one >= 0 && two >= 0);
  int32_t ids[4], uniq[4];
  int64_t req[4];
  scps_stack_stats s;
  set_stats(&s, 4, ids, uniq, req, (int32_t[]){10, 20, 30, 40}, (int32_t[]){1, 2, 3, 4},
            (int64_t[]){64, 0, 8, 16}, 5);
  CHECK_OK(scps__fdo_record(f, one, &s, &err), &err);
  set_stats(&s, 4, ids, uniq, req, (int32_t[]){5, 25, 15, 45}, (int32_t[]){0, 3, 2, 5},
            (int64_t[]){32, 8, 8, 8}, 2);
  CHECK_OK(scps__fdo_record(f, one, &s, &err), &err);
  const scps_stack_stats *a = scps__fdo_stats(f, one);
  const int32_t e_ids[4] = {10, 25, 30, 45}, e_uniq[4] = {1, 3, 3, 5};
  const int64_t e_req[4] = {64, 8, 8, 16};
  for (int i = 0; i < 4; i++)
    CHECKF(a->max_ids_per_partition[i] == e_ids[i] && a->max_unique_ids_per_partition[i] == e_uniq[i] &&
               a->required_buffer_size_per_sc[i] == e_req[i],
           "accumulated sc %d", i);
  CHECK(a->id_drop_counter == 7);
  CHECK(scps__fdo_stats(f, two)->max_ids_per_partition[0] == 0);
  CHECK(scps__fdo_stats(f, 2) == NULL);

  scps_stack_stats wrong = s;
  wrong.num_sc = 2;
  CHECK(scps__fdo_record(f, one, &wrong, &err) == SCPS_EMISMATCH);
  CHECK(scps__fdo_record(f, 5, &s, &err) == SCPS_ERANGE);

  char *dir = make_dir();
  CHECK(dir != NULL);
  if (dir) {
    char path[512];
    CHECK_OK(scps__fdo_export_csv(f, dir, path, sizeof path, &err), &err);
    const char *base = strrchr(path, '/') + 1;
    long long ts = 0;
    char tail[8] = "";
    CHECKF(sscanf(base, "fdo_stats_3_%lld%7s", &ts, tail) == 2 && !strcmp(tail, ".csv") && ts > 0,
           "file name %s", base);
    /* The rows the reference's csv.writer produces: suffix groups in field
     * order, stacks in layout order, CRLF, no quotes around "v0 v1 ...". */
    char want[2048];
    const char *n0 = l->stacks[0].name, *n1 = l->stacks[1].name;
    const scps_stack_stats *s0 = scps__fdo_stats(f, 0), *s1 = scps__fdo_stats(f, 1);
    snprintf(want, sizeof want,
             "key,values\r\n"
             "%s_max_ids,%d %d %d %d\r\n%s_max_ids,%d %d %d %d\r\n"
             "%s_max_unique_ids,%d %d %d %d\r\n%s_max_unique_ids,%d %d %d %d\r\n"
             "%s_required_buffer_size,%lld %lld %lld %lld\r\n"
             "%s_required_buffer_size,%lld %lld %lld %lld\r\n"
             "%s_id_drop_counters,%lld\r\n%s_id_drop_counters,%lld\r\n",
             n0, s0->max_ids_per_partition[0], s0->max_ids_per_partition[1],
             s0->max_ids_per_partition[2], s0->max_ids_per_partition[3], n1,
             s1->max_ids_per_partition[0], s1->max_ids_per_partition[1],
             s1->max_ids_per_partition[2], s1->max_ids_per_partition[3], n0,
             s0->max_unique_ids_per_partition[0], s0->max_unique_ids_per_partition[1],
             s0->max_unique_ids_per_partition[2], s0->max_unique_ids_per_partition[3], n1,
             s1->max_unique_ids_per_partition[0], s1->max_unique_ids_per_partition[1],
             s1->max_unique_ids_per_partition[2], s1->max_unique_ids_per_partition[3], n0,
             (long long)s0->required_buffer_size_per_sc[0], (long long)s0->required_buffer_size_per_sc[1],
             (long long)s0->required_buffer_size_per_sc[2], (long long)s0->required_buffer_size_per_sc[3],
             n1, (long long)s1->required_buffer_size_per_sc[0],
             (long long)s1->required_buffer_size_per_sc[1], (long long)s1->required_buffer_size_per_sc[2],
             (long long)s1->required_buffer_size_per_sc[3], n0, (long long)s0->id_drop_counter, n1,
             (long long)s1->id_drop_counter);
    const char *got = read_text(path);
    CHECKF(got && !strcmp(got, want), "exported file:\n%s\nexpected:\n%s", got ? got : "(none)", want);
    CHECK(strstr(want, "t_one_max_ids,10 25 30 45\r\n") != NULL);

    /* Round trip: a fresh fdo loads what was exported. */
    scps_fdo *g = NULL;
    CHECK_OK(scps__fdo_create(l, NULL, &g, &err), &err);
    if (g) {
      CHECK_OK(scps__fdo_load_csv(g, dir, &err), &err);
      const scps_stack_stats *b = scps__fdo_stats(g, one);
      for (int i = 0; i < 4; i++)
        CHECK(b->max_ids_per_partition[i] == e_ids[i] && b->max_unique_ids_per_partition[i] == e_uniq[i] &&
              b->required_buffer_size_per_sc[i] == e_req[i]);
      CHECK(b->id_drop_counter == 7);
      scps__fdo_destroy(g);
    }
    /* A second export sorts later. */
    char path2[512];
    CHECK_OK(scps__fdo_export_csv(f, dir, path2, sizeof path2, &err), &err);
    CHECK(strcmp(path, path2) != 0);
    remove_dir(dir);
    free(dir);
  }
  scps__fdo_reset(f);
  CHECK(scps__fdo_stats(f, one)->max_ids_per_partition[3] == 0 && scps__fdo_stats(f, one)->id_drop_counter == 0);
  scps__fdo_destroy(f);
  scps__layout_destroy(l);
}

/* The reference's test_load_multiple_files, with N = 4 buffer sizes, plus an
 * older file of process 0 that must be ignored. */
static void test_load(void) {
  scps_layout *l = make_layout(4, 1 << 30);
  char *dir = make_dir();
  if (!l || !dir) {
    scps__layout_destroy(l);
    free(dir);
    return;
  }
  scps_fdo *f = NULL;
  scps_error err;
  CHECK_OK(scps__fdo_create(l, NULL, &f, &err), &err);
  CHECK(scps__fdo_load_csv(f, dir, &err) == SCPS_ENOENT);
  CHECK(strstr(err.msg, "no fdo_stats_*.csv files") != NULL);

  write_text(dir, "fdo_stats_0_9.csv", "key,values\r\nt_one_max_ids,900 900 900 900\r\n");
  write_text(dir, "fdo_stats_0_10.csv",
             "key,values\r\n"
             "t_one_max_ids,10 20 30 40\r\n"
             "t_two_max_ids,50 60 70 80\r\n"
             "t_one_max_unique_ids,1 2 3 4\r\n"
             "t_two_max_unique_ids,5 6 7 8\r\n"
             "t_one_required_buffer_size,64 0 0 0\r\n"
             "t_two_required_buffer_size,128 0 0 8\r\n");
  /* LF endings, quoted values and a history of two rows for one key. */
  write_text(dir, "fdo_stats_1_11.csv",
             "key,values\n"
             "t_one_max_ids,\"20 10 40 30\"\n"
             "t_two_max_ids,60 60 80 70\n"
             "t_two_max_ids,1 1 1 90\n"
             "t_one_max_unique_ids,2 1 4 3\n"
             "\"t_two_max_unique_ids\",6 5 8 7\n"
             "t_one_required_buffer_size,128 0 0 0\n"
             "t_two_required_buffer_size,256 0 0 0\n"
             "t_two_id_drop_counters,4\n");
  write_text(dir, "other.csv", "garbage");
  write_text(dir, "fdo_stats_x_1.csv", "garbage");
  CHECK_OK(scps__fdo_load_csv(f, dir, &err), &err);
  int one = scps__layout_find_stack(l, "t_one"), two = scps__layout_find_stack(l, "t_two");
  const scps_stack_stats *a = scps__fdo_stats(f, one), *b = scps__fdo_stats(f, two);
  const int32_t a_ids[4] = {20, 20, 40, 40}, b_ids[4] = {60, 60, 80, 90};
  const int32_t a_u[4] = {2, 2, 4, 4}, b_u[4] = {6, 6, 8, 8};
  for (int i = 0; i < 4; i++) {
    CHECKF(a->max_ids_per_partition[i] == a_ids[i], "t_one max_ids[%d] = %d", i, a->max_ids_per_partition[i]);
    CHECKF(b->max_ids_per_partition[i] == b_ids[i], "t_two max_ids[%d] = %d", i, b->max_ids_per_partition[i]);
    CHECK(a->max_unique_ids_per_partition[i] == a_u[i] && b->max_unique_ids_per_partition[i] == b_u[i]);
  }
  CHECK(a->required_buffer_size_per_sc[0] == 128 && b->required_buffer_size_per_sc[0] == 256 &&
        b->required_buffer_size_per_sc[3] == 8);
  CHECK(b->id_drop_counter == 4 && a->id_drop_counter == 0);

  /* Failures name file, line and key, and change nothing. */
  write_text(dir, "fdo_stats_2_5.csv", "key,values\r\nt_one_max_ids,1 2 3\r\n");
  CHECK(scps__fdo_load_csv(f, dir, &err) == SCPS_EMISMATCH);
  CHECKF(strstr(err.msg, "fdo_stats_2_5.csv' line 2: stack 't_one' max_ids has 3 values, expected 4"),
         "%s", err.msg);
  CHECK(scps__fdo_stats(f, one)->max_ids_per_partition[0] == 20);
  write_text(dir, "fdo_stats_2_6.csv", "key,values\r\nnope_max_ids,1 2 3 4\r\n");
  CHECK(scps__fdo_load_csv(f, dir, &err) == SCPS_ENOENT);
  CHECKF(strstr(err.msg, "unknown stack 'nope'") != NULL, "%s", err.msg);
  write_text(dir, "fdo_stats_2_7.csv", "key,values\r\nt_one_max_ids,1 2 x 4\r\n");
  CHECK(scps__fdo_load_csv(f, dir, &err) == SCPS_EPARSE);
  write_text(dir, "fdo_stats_2_8.csv", "key,values\r\nt_one_bogus,1 2 3 4\r\n");
  CHECK(scps__fdo_load_csv(f, dir, &err) == SCPS_EPARSE);
  CHECKF(strstr(err.msg, "key 't_one_bogus' does not end with a known suffix") != NULL, "%s", err.msg);
  write_text(dir, "fdo_stats_2_9.csv", "key,values\r\nt_one_max_ids,\"1 2 3 4\r\n");
  CHECK(scps__fdo_load_csv(f, dir, &err) == SCPS_EPARSE);
  write_text(dir, "fdo_stats_2_10.csv", "key,values\r\nt_one_max_ids,1 2 3 4\r\n");
  CHECK_OK(scps__fdo_load_csv(f, dir, &err), &err);
  CHECK(scps__fdo_stats(f, one)->max_ids_per_partition[0] == 20);
  CHECK(scps__fdo_load_csv(f, "/nonexistent/scps", &err) == SCPS_ENOENT);
  scps__fdo_destroy(f);
  remove_dir(dir);
  free(dir);
  scps__layout_destroy(l);
}

typedef struct change_log {
  int n;
  scps_fdo_change last;
  char text[256];
} change_log;

static void on_change(void *ctx, const scps_fdo_change *c) {
  change_log *log = ctx;
  log->n++;
  log->last = *c;
  scps__fdo_change_format(c, log->text, sizeof log->text);
}

static int32_t expect_raise(int32_t old, int32_t obs, double h, int32_t cap) {
  double want = obs * (1.0 + h);
  int32_t w = (int32_t)want;
  if (w < want)
    w++;
  if (w <= old)
    return old;
  int32_t t = (w + 7) / 8 * 8;
  if (t > cap)
    t = cap;
  return t > old ? t : old;
}

/* Feature f0 (stack t_one) gets `per_sample` distinct ids in each of its 4
 * samples; N = 1, so one partition holds 4 * per_sample ids. */
static void run_batch(scps_prep *p, int per_sample, int expect_rc) {
  int64_t ids0[400], ids1[4] = {1, 2, 3, 4};
  int64_t offs0[5], offs1[5] = {0, 1, 2, 3, 4};
  for (int i = 0; i < 4 * per_sample; i++)
    ids0[i] = i;
  for (int r = 0; r <= 4; r++)
    offs0[r] = r * per_sample;
  scps_feature_input in[2] = {
      {.form = SCPS_INPUT_RAGGED, .n_ids = (size_t)(4 * per_sample), .ids = ids0, .row_offsets = offs0},
      {.form = SCPS_INPUT_RAGGED, .n_ids = 4, .ids = ids1, .row_offsets = offs1},
  };
  scps_error err;
  int rc = scps__prep_run(p, in, &err);
  CHECKF(rc == expect_rc, "run with %d ids per sample: %d (%s), expected %d", per_sample, rc,
         err.msg, expect_rc);
}

static void test_adaptive(void) {
  scps_layout *l = make_layout(1, 1 << 30);
  if (!l)
    return;
  int one = scps__layout_find_stack(l, "t_one"), two = scps__layout_find_stack(l, "t_two");
  scps_prep *p = NULL;
  scps_fdo *f = NULL;
  scps_error err;
  CHECK_OK(scps__prep_create(l, NULL, &p, &err), &err);
  change_log log = {0};
  double h = 0.25;
  CHECK_OK(scps__fdo_create(l,
                           &(scps_fdo_options){.adaptive = true, .headroom = h, .log = on_change,
                                               .log_ctx = &log},
                           &f, &err),
           &err);
  if (!p || !f)
    goto out;
  /* Default budget: the memory left after both stacks' rows, split in two,
   * over 12-byte entries times N = 1 destination, rounded down to 8. */
  int64_t left = ((int64_t)1 << 30) - scps__layout_stack_bytes_per_sc(l, 0) -
                 scps__layout_stack_bytes_per_sc(l, 1);
  int32_t cap = (int32_t)(left / 2 / 12 / 8 * 8);
  CHECK(scps__fdo_limit_cap(f, one) == cap);

  CHECK_OK(scps__prep_set_limits(p, one, 16, 16, &err), &err);
  CHECK_OK(scps__prep_set_limits(p, two, 16, 16, &err), &err);
  run_batch(p, 10, SCPS_ELIMIT); /* 40 ids > 16 */
  CHECK_OK(scps__fdo_step(f, p, &err), &err);
  int32_t a, u;
  scps__prep_get_limits(p, one, &a, &u);
  int32_t want = expect_raise(16, 40, h, cap);
  CHECKF(a == want && u == want && want == 56, "limits %d/%d, expected %d", a, u, want);
  CHECK(log.n == 1 && log.last.stack == one && log.last.old_max_ids == 16 && log.last.new_max_ids == 56 &&
        log.last.old_max_unique_ids == 16 && log.last.new_max_unique_ids == 56 &&
        log.last.observed_max_ids == 40 && !log.last.capped);
  CHECKF(!strcmp(log.text, "stack 't_one': max_ids_per_partition 16 -> 56, "
                           "max_unique_ids_per_partition 16 -> 56 (observed 40 ids, 40 unique)"),
         "%s", log.text);
  scps__prep_get_limits(p, two, &a, &u);
  CHECK(a == 16 && u == 16); /* 1 id per partition: far from the limit */
  run_batch(p, 10, 0);       /* the same batch now passes without a restart */
  CHECK_OK(scps__fdo_step(f, p, &err), &err);
  CHECK(log.n == 1);

  /* 12 * 4 = 48 ids; 48 * 1.25 = 60 > 56: raised again (within the headroom). */
  run_batch(p, 12, 0);
  CHECK_OK(scps__fdo_step(f, p, &err), &err);
  scps__prep_get_limits(p, one, &a, &u);
  CHECK(a == expect_raise(56, 48, h, cap) && a == 64 && log.n == 2);
  /* Smaller batches never lower a limit. */
  run_batch(p, 1, 0);
  CHECK_OK(scps__fdo_step(f, p, &err), &err);
  scps__prep_get_limits(p, one, &a, &u);
  CHECK(a == 64 && log.n == 2);
  CHECK(scps__fdo_steps(f) == 4);
  scps__fdo_destroy(f);
  f = NULL;

  /* A budget of 12 * 1 * 72 bytes caps both limits at 72. */
  log = (change_log){0};
  CHECK_OK(scps__fdo_create(l,
                           &(scps_fdo_options){.adaptive = false, .headroom = 0.5,
                                               .coo_budget_bytes_per_sc = 12 * 72 + 11,
                                               .log = on_change, .log_ctx = &log},
                           &f, &err),
           &err);
  if (!f)
    goto out;
  CHECK(scps__fdo_limit_cap(f, one) == 72);
  run_batch(p, 25, SCPS_ELIMIT); /* 100 ids > 64 */
  CHECK_OK(scps__fdo_step(f, p, &err), &err);
  scps__prep_get_limits(p, one, &a, &u);
  CHECK(a == 64 && log.n == 0); /* not adaptive: only recorded */
  int changed = -1;
  CHECK_OK(scps__fdo_adapt(f, p, &changed, &err), &err);
  scps__prep_get_limits(p, one, &a, &u);
  CHECK(changed == 1 && a == 72 && u == 72 && a == expect_raise(64, 100, 0.5, 72));
  CHECK(log.n == 1 && log.last.capped && strstr(log.text, "capped by the SparseCore budget"));
  run_batch(p, 25, SCPS_ELIMIT); /* still too many for the budget */

out:
  scps__fdo_destroy(f);
  scps__prep_destroy(p);
  scps__layout_destroy(l);
}

static void test_options(void) {
  scps_layout *l = make_layout(2, 1 << 30);
  if (!l)
    return;
  scps_fdo *f = NULL;
  scps_error err;
  CHECK(scps__fdo_create(l, &(scps_fdo_options){.headroom = -1}, &f, &err) == SCPS_EINVAL);
  CHECK(strstr(err.msg, "headroom -1") != NULL);
  CHECK(scps__fdo_create(l, &(scps_fdo_options){.process_index = -2}, &f, &err) == SCPS_EINVAL);
  CHECK(scps__fdo_create(l, &(scps_fdo_options){.coo_budget_bytes_per_sc = -5}, &f, &err) == SCPS_EINVAL);
  CHECK(f == NULL);
  scps__layout_destroy(l);
}

/* Per source, distinct (row, source) pairs and entries, counted by brute force. */
static void count_plain(const scps_coo *coo, const int32_t *src_of, int32_t n_src, int32_t *ids, int32_t *unique) {
  for (int32_t s = 0; s < n_src; s++) ids[s] = unique[s] = 0;
  for (size_t i = 0; i < coo->n; i++) {
    int32_t s = src_of[coo->samples[i]];
    ids[s]++;
    bool seen = false;
    for (size_t j = 0; j < i && !seen; j++) seen = coo->rows[j] == coo->rows[i] && src_of[coo->samples[j]] == s;
    unique[s] += !seen;
  }
}

static void test_count_sources(void) {
  enum { SAMPLES = 300, MAX_N = 700 };
  static const int32_t n_srcs[] = {1, 2, 3, 7, 64, 65, 200};
  int32_t src_of[SAMPLES];
  uint32_t rows[MAX_N], samples[MAX_N];
  float gains[MAX_N];
  int32_t ids[200], unique[200], want_ids[200], want_unique[200];
  uint64_t rng = 12345;
  for (size_t t = 0; t < sizeof n_srcs / sizeof n_srcs[0]; t++) {
    int32_t n_src = n_srcs[t];
    for (int trial = 0; trial < 20; trial++) {
      for (int s = 0; s < SAMPLES; s++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        src_of[s] = (int32_t)((rng >> 33) % (uint64_t)n_src);
      }
      /* Rows ascending with runs of 1 to 40 entries, samples ascending in a run. */
      size_t n = 0;
      uint32_t row = 0;
      size_t target = (size_t)(trial * 37) % MAX_N;
      while (n < target) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        row += 1 + (uint32_t)((rng >> 40) % 5);
        size_t run = 1 + (size_t)((rng >> 20) % 40);
        uint32_t sample = (uint32_t)((rng >> 45) % 8);
        for (size_t k = 0; k < run && n < target && sample < SAMPLES; k++) {
          rows[n] = row;
          samples[n] = sample;
          gains[n++] = 1.0f;
          sample += 1 + (uint32_t)((rng >> (k % 30)) % 9);
        }
      }
      scps_coo coo = {.n = n, .rows = rows, .samples = samples, .gains = gains};
      for (int32_t s = 0; s < n_src; s++) ids[s] = unique[s] = -7;
      CHECK(scps__fdo_count_sources(&coo, src_of, n_src, ids, unique) == 0);
      count_plain(&coo, src_of, n_src, want_ids, want_unique);
      for (int32_t s = 0; s < n_src; s++)
        if (ids[s] != want_ids[s] || unique[s] != want_unique[s]) {
          fprintf(stderr, "count_sources: %d sources, %zu entries, source %d: %d ids %d unique, want %d %d\n",
                  n_src, n, s, ids[s], unique[s], want_ids[s], want_unique[s]);
          CHECK(0);
          break;
        }
    }
  }
}

int main(void) {
  test_count_sources();
  test_record_and_export();
  test_load();
  test_adaptive();
  test_options();
  return scps_test_finish("test_fdo");
}
