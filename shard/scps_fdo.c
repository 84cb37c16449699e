#include "scps_fdo.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FDO_FILE_PREFIX "fdo_stats_"
#define FDO_FILE_SUFFIX ".csv"
#define FDO_MAX_FILE_BYTES (64 << 20) /* stats files are tiny; refuse anything absurd */
#define FDO_ENTRY_BYTES 12            /* row int32 + sample int32 + gain f32 */
#define FDO_LIMIT_MAX (INT32_MAX / 8 * 8)

enum { KEY_MAX_IDS, KEY_MAX_UNIQUE, KEY_REQUIRED_BUFFER, KEY_DROPS, KEY_COUNT };
/* Field order of the reference's SparseDenseMatmulInputStats. */
static const char *const key_suffix[KEY_COUNT] = {"_max_ids", "_max_unique_ids",
                                                  "_required_buffer_size", "_id_drop_counters"};

struct scps_fdo {
  const scps_layout *layout;
  int32_t n;
  int n_stacks;
  scps_fdo_options opts;
  scps_stack_stats *acc; /* [n_stacks] */
  int32_t *cap;          /* [n_stacks] */
  int64_t steps;
  int64_t last_file_ns;
};

static int stats_alloc(scps_stack_stats *s, int32_t n) {
  s->num_sc = n;
  s->max_ids_per_partition = calloc((size_t)n, sizeof(int32_t));
  s->max_unique_ids_per_partition = calloc((size_t)n, sizeof(int32_t));
  s->required_buffer_size_per_sc = calloc((size_t)n, sizeof(int64_t));
  s->id_drop_counter = 0;
  return s->max_ids_per_partition && s->max_unique_ids_per_partition &&
                 s->required_buffer_size_per_sc
             ? 0
             : SCPS_ENOMEM;
}

static void stats_free(scps_stack_stats *s) {
  free(s->max_ids_per_partition);
  free(s->max_unique_ids_per_partition);
  free(s->required_buffer_size_per_sc);
}

static void stats_zero(scps_stack_stats *s) {
  memset(s->max_ids_per_partition, 0, (size_t)s->num_sc * sizeof(int32_t));
  memset(s->max_unique_ids_per_partition, 0, (size_t)s->num_sc * sizeof(int32_t));
  memset(s->required_buffer_size_per_sc, 0, (size_t)s->num_sc * sizeof(int64_t));
  s->id_drop_counter = 0;
}

static void stats_array_free(scps_stack_stats *a, int n) {
  if (!a)
    return;
  for (int i = 0; i < n; i++)
    stats_free(&a[i]);
  free(a);
}

static scps_stack_stats *stats_array_alloc(int n_stacks, int32_t n) {
  scps_stack_stats *a = calloc((size_t)n_stacks + 1, sizeof *a);
  if (!a)
    return NULL;
  for (int i = 0; i < n_stacks; i++) {
    if (stats_alloc(&a[i], n) != 0) {
      stats_array_free(a, i + 1);
      return NULL;
    }
  }
  return a;
}

static int32_t budget_cap(int64_t budget, int32_t n) {
  int64_t c = budget / ((int64_t)FDO_ENTRY_BYTES * n) / 8 * 8;
  if (c < 0)
    return 0;
  return c > FDO_LIMIT_MAX ? FDO_LIMIT_MAX : (int32_t)c;
}

int scps__fdo_create(const scps_layout *layout, const scps_fdo_options *opts, scps_fdo **out,
                    scps_error *err) {
  if (!layout || !out)
    return scps_error_set(err, SCPS_EINVAL, "scps__fdo_create: %s is NULL",
                          layout ? "out" : "layout");
  *out = NULL;
  scps_fdo_options o = {0};
  if (opts)
    o = *opts;
  if (o.process_index < 0)
    return scps_error_set(err, SCPS_EINVAL, "fdo options: process_index %d is negative",
                          o.process_index);
  if (!isfinite(o.headroom) || o.headroom < 0)
    return scps_error_set(err, SCPS_EINVAL, "fdo options: headroom %g must be finite and >= 0",
                          o.headroom);
  if (o.coo_budget_bytes_per_sc < 0)
    return scps_error_set(err, SCPS_EINVAL, "fdo options: coo_budget_bytes_per_sc %lld is negative",
                          (long long)o.coo_budget_bytes_per_sc);
  scps_fdo *f = calloc(1, sizeof *f);
  if (!f)
    return scps_error_set(err, SCPS_ENOMEM, "scps__fdo_create: out of memory");
  f->layout = layout;
  f->n = layout->num_sc;
  f->n_stacks = layout->n_stacks;
  f->opts = o;
  f->acc = stats_array_alloc(f->n_stacks, f->n);
  f->cap = calloc((size_t)f->n_stacks + 1, sizeof *f->cap);
  if (!f->acc || !f->cap) {
    scps__fdo_destroy(f);
    return scps_error_set(err, SCPS_ENOMEM, "scps__fdo_create: out of memory");
  }
  int64_t budget = o.coo_budget_bytes_per_sc;
  if (budget == 0 && f->n_stacks > 0) {
    int64_t free_bytes = layout->topology.sc_memory_bytes;
    for (int s = 0; s < f->n_stacks; s++)
      free_bytes -= scps__layout_stack_bytes_per_sc(layout, s);
    budget = free_bytes > 0 ? free_bytes / f->n_stacks : 0;
  }
  for (int s = 0; s < f->n_stacks; s++)
    f->cap[s] = budget_cap(budget, f->n);
  *out = f;
  return 0;
}

void scps__fdo_destroy(scps_fdo *f) {
  if (!f)
    return;
  stats_array_free(f->acc, f->n_stacks);
  free(f->cap);
  free(f);
}

static void merge_stats(scps_stack_stats *acc, const scps_stack_stats *s, bool sum_drops) {
  for (int32_t i = 0; i < acc->num_sc; i++) {
    if (s->max_ids_per_partition[i] > acc->max_ids_per_partition[i])
      acc->max_ids_per_partition[i] = s->max_ids_per_partition[i];
    if (s->max_unique_ids_per_partition[i] > acc->max_unique_ids_per_partition[i])
      acc->max_unique_ids_per_partition[i] = s->max_unique_ids_per_partition[i];
    if (s->required_buffer_size_per_sc[i] > acc->required_buffer_size_per_sc[i])
      acc->required_buffer_size_per_sc[i] = s->required_buffer_size_per_sc[i];
  }
  if (sum_drops)
    acc->id_drop_counter += s->id_drop_counter;
  else if (s->id_drop_counter > acc->id_drop_counter)
    acc->id_drop_counter = s->id_drop_counter;
}

int scps__fdo_record(scps_fdo *f, int stack, const scps_stack_stats *s, scps_error *err) {
  if (!f || !s)
    return scps_error_set(err, SCPS_EINVAL, "scps__fdo_record: %s is NULL", f ? "stats" : "fdo");
  if (stack < 0 || stack >= f->n_stacks)
    return scps_error_set(err, SCPS_ERANGE, "fdo: stack index %d outside [0, %d)", stack,
                          f->n_stacks);
  if (s->num_sc != f->n)
    return scps_error_set(err, SCPS_EMISMATCH, "fdo: stack '%s': stats for %d SparseCores, layout has %d",
                          f->layout->stacks[stack].name, s->num_sc, f->n);
  merge_stats(&f->acc[stack], s, true);
  return 0;
}

int scps__fdo_step(scps_fdo *f, scps_prep *p, scps_error *err) {
  if (!f || !p)
    return scps_error_set(err, SCPS_EINVAL, "scps__fdo_step: %s is NULL", f ? "prep" : "fdo");
  for (int s = 0; s < f->n_stacks; s++) {
    const scps_stack_stats *st = scps__prep_stats(p, s);
    if (!st)
      return scps_error_set(err, SCPS_EMISMATCH, "fdo: the prep has no stack %d ('%s')", s,
                            f->layout->stacks[s].name);
    int rc = scps__fdo_record(f, s, st, err);
    if (rc != 0)
      return rc;
  }
  f->steps++;
  return f->opts.adaptive ? scps__fdo_adapt(f, p, NULL, err) : 0;
}

const scps_stack_stats *scps__fdo_stats(const scps_fdo *f, int stack) {
  if (!f || stack < 0 || stack >= f->n_stacks)
    return NULL;
  return &f->acc[stack];
}

int64_t scps__fdo_steps(const scps_fdo *f) { return f ? f->steps : 0; }

void scps__fdo_reset(scps_fdo *f) {
  if (!f)
    return;
  for (int s = 0; s < f->n_stacks; s++)
    stats_zero(&f->acc[s]);
  f->steps = 0;
}

int32_t scps__fdo_limit_cap(const scps_fdo *f, int stack) {
  if (!f || stack < 0 || stack >= f->n_stacks)
    return 0;
  return f->cap[stack];
}

/* ---- adaptive limits ---- */

static int32_t raised_limit(int32_t old, int32_t observed, double headroom, int32_t cap,
                            bool *capped) {
  double want = ceil((double)observed * (1.0 + headroom));
  if (want <= (double)old)
    return old;
  int64_t target = want >= (double)FDO_LIMIT_MAX ? FDO_LIMIT_MAX : ((int64_t)want + 7) / 8 * 8;
  if (target > cap) {
    target = cap;
    *capped = true;
  }
  return target > old ? (int32_t)target : old;
}

int scps__fdo_adapt(scps_fdo *f, scps_prep *p, int *n_changed, scps_error *err) {
  if (n_changed)
    *n_changed = 0;
  if (!f || !p)
    return scps_error_set(err, SCPS_EINVAL, "scps__fdo_adapt: %s is NULL", f ? "prep" : "fdo");
  for (int s = 0; s < f->n_stacks; s++) {
    const scps_stack_stats *a = &f->acc[s];
    int32_t obs_ids = 0, obs_unique = 0;
    for (int32_t d = 0; d < f->n; d++) {
      if (a->max_ids_per_partition[d] > obs_ids)
        obs_ids = a->max_ids_per_partition[d];
      if (a->max_unique_ids_per_partition[d] > obs_unique)
        obs_unique = a->max_unique_ids_per_partition[d];
    }
    scps_fdo_change c = {.stack = s, .stack_name = f->layout->stacks[s].name,
                         .observed_max_ids = obs_ids, .observed_max_unique_ids = obs_unique};
    scps__prep_get_limits(p, s, &c.old_max_ids, &c.old_max_unique_ids);
    c.new_max_ids = raised_limit(c.old_max_ids, obs_ids, f->opts.headroom, f->cap[s], &c.capped);
    c.new_max_unique_ids =
        raised_limit(c.old_max_unique_ids, obs_unique, f->opts.headroom, f->cap[s], &c.capped);
    if (c.new_max_ids == c.old_max_ids && c.new_max_unique_ids == c.old_max_unique_ids)
      continue;
    int rc = scps__prep_set_limits(p, s, c.new_max_ids, c.new_max_unique_ids, err);
    if (rc != 0)
      return rc;
    if (n_changed)
      (*n_changed)++;
    if (f->opts.log)
      f->opts.log(f->opts.log_ctx, &c);
  }
  return 0;
}

int scps__fdo_change_format(const scps_fdo_change *c, char *buf, size_t cap) {
  return snprintf(buf, cap,
                  "stack '%s': max_ids_per_partition %d -> %d, max_unique_ids_per_partition %d -> "
                  "%d (observed %d ids, %d unique)%s",
                  c->stack_name, c->old_max_ids, c->new_max_ids, c->old_max_unique_ids,
                  c->new_max_unique_ids, c->observed_max_ids, c->observed_max_unique_ids,
                  c->capped ? ", capped by the SparseCore budget" : "");
}

/* ---- CSV export ---- */

static void write_field(FILE *fp, const char *s) {
  if (!strpbrk(s, ",\"\r\n")) {
    fputs(s, fp);
    return;
  }
  fputc('"', fp);
  for (; *s; s++) {
    if (*s == '"')
      fputc('"', fp);
    fputc(*s, fp);
  }
  fputc('"', fp);
}

static void write_key(FILE *fp, const char *stack, int key) {
  char k[SCPS_STACK_NAME_MAX + 32];
  snprintf(k, sizeof k, "%s%s", stack, key_suffix[key]);
  write_field(fp, k);
  fputc(',', fp);
}

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int scps__fdo_export_csv(scps_fdo *f, const char *dir, char *path_out, size_t path_cap,
                        scps_error *err) {
  if (!f || !dir)
    return scps_error_set(err, SCPS_EINVAL, "scps__fdo_export_csv: %s is NULL", f ? "dir" : "fdo");
  /* Later exports must sort later even within one clock tick. */
  int64_t ns = now_ns();
  if (ns <= f->last_file_ns)
    ns = f->last_file_ns + 1;
  char path[4096], tmp[4096];
  int a = snprintf(path, sizeof path, "%s/" FDO_FILE_PREFIX "%d_%lld" FDO_FILE_SUFFIX, dir,
                   f->opts.process_index, (long long)ns);
  int b = snprintf(tmp, sizeof tmp, "%s/.tmp." FDO_FILE_PREFIX "%d_%lld.part", dir,
                   f->opts.process_index, (long long)ns);
  if (a < 0 || b < 0 || (size_t)a >= sizeof path || (size_t)b >= sizeof tmp)
    return scps_error_set(err, SCPS_EINVAL, "fdo export: directory name too long: '%.200s'", dir);
  FILE *fp = fopen(tmp, "w");
  if (!fp)
    return scps_error_set(err, SCPS_EIO, "fdo export: cannot create '%s': %s", tmp,
                          strerror(errno));
  fputs("key,values\r\n", fp);
  for (int key = 0; key < KEY_COUNT; key++) {
    for (int s = 0; s < f->n_stacks; s++) {
      const scps_stack_stats *st = &f->acc[s];
      write_key(fp, f->layout->stacks[s].name, key);
      if (key == KEY_DROPS) {
        fprintf(fp, "%lld", (long long)st->id_drop_counter);
      } else {
        for (int32_t i = 0; i < f->n; i++) {
          long long v = key == KEY_MAX_IDS      ? st->max_ids_per_partition[i]
                        : key == KEY_MAX_UNIQUE ? st->max_unique_ids_per_partition[i]
                                                : st->required_buffer_size_per_sc[i];
          fprintf(fp, i ? " %lld" : "%lld", v);
        }
      }
      fputs("\r\n", fp);
    }
  }
  bool bad = ferror(fp) != 0;
  if (fclose(fp) != 0 || bad) {
    remove(tmp);
    return scps_error_set(err, SCPS_EIO, "fdo export: cannot write '%s'", tmp);
  }
  if (rename(tmp, path) != 0) {
    int e = errno;
    remove(tmp);
    return scps_error_set(err, SCPS_EIO, "fdo export: cannot rename to '%s': %s", path,
                          strerror(e));
  }
  f->last_file_ns = ns;
  if (path_out && path_cap > 0)
    snprintf(path_out, path_cap, "%s", path);
  return 0;
}

/* ---- CSV load ---- */

/* fdo_stats_<digits>_<digits>.csv, as the reference's file-name pattern. */
static bool parse_file_name(const char *name, int64_t *proc, int64_t *ns) {
  size_t lp = strlen(FDO_FILE_PREFIX), ls = strlen(FDO_FILE_SUFFIX), len = strlen(name);
  if (len <= lp + ls || strncmp(name, FDO_FILE_PREFIX, lp) != 0 ||
      strcmp(name + len - ls, FDO_FILE_SUFFIX) != 0)
    return false;
  const char *p = name + lp, *end = name + len - ls;
  int64_t v[2] = {0, 0};
  for (int k = 0; k < 2; k++) {
    int digits = 0;
    while (p < end && *p >= '0' && *p <= '9') {
      int dig = *p++ - '0';
      if (v[k] > (INT64_MAX - dig) / 10)
        return false;
      v[k] = v[k] * 10 + dig;
      digits++;
    }
    if (digits == 0 || (k == 0 && (p >= end || *p++ != '_')))
      return false;
  }
  if (p != end)
    return false;
  *proc = v[0];
  *ns = v[1];
  return true;
}

typedef struct fdo_file {
  int64_t proc, ns;
  char name[256];
} fdo_file;

/* Latest file per process: the files of dir matching the name pattern. */
static int latest_files(const char *dir, fdo_file **out, int *n_out, scps_error *err) {
  DIR *d = opendir(dir);
  if (!d)
    return scps_error_set(err, errno == ENOENT ? SCPS_ENOENT : SCPS_EIO,
                          "fdo load: cannot open directory '%s': %s", dir, strerror(errno));
  fdo_file *files = NULL;
  int n = 0, cap = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    int64_t proc, ns;
    if (strlen(e->d_name) >= sizeof files->name || !parse_file_name(e->d_name, &proc, &ns))
      continue;
    int i = 0;
    while (i < n && files[i].proc != proc)
      i++;
    if (i == n) {
      if (n == cap) {
        int nc = cap ? cap * 2 : 8;
        fdo_file *g = realloc(files, (size_t)nc * sizeof *g);
        if (!g) {
          free(files);
          closedir(d);
          return scps_error_set(err, SCPS_ENOMEM, "fdo load: out of memory");
        }
        files = g;
        cap = nc;
      }
      files[n].proc = proc;
      files[n].ns = -1;
      n++;
    }
    if (ns > files[i].ns) {
      files[i].ns = ns;
      snprintf(files[i].name, sizeof files[i].name, "%s", e->d_name);
    }
  }
  closedir(d);
  if (n == 0) {
    free(files);
    return scps_error_set(err, SCPS_ENOENT, "fdo load: no " FDO_FILE_PREFIX "*" FDO_FILE_SUFFIX
                                            " files in '%s'", dir);
  }
  *out = files;
  *n_out = n;
  return 0;
}

static int read_file(const char *path, char **out, size_t *len, scps_error *err) {
  FILE *fp = fopen(path, "rb");
  if (!fp)
    return scps_error_set(err, SCPS_EIO, "fdo load: cannot open '%s': %s", path, strerror(errno));
  char *buf = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (n == cap) {
      if (cap >= FDO_MAX_FILE_BYTES) {
        free(buf);
        fclose(fp);
        return scps_error_set(err, SCPS_EPARSE, "fdo load: '%s' is larger than %d bytes", path,
                              FDO_MAX_FILE_BYTES);
      }
      cap = cap ? cap * 2 : 4096;
      char *g = realloc(buf, cap + 1);
      if (!g) {
        free(buf);
        fclose(fp);
        return scps_error_set(err, SCPS_ENOMEM, "fdo load: out of memory");
      }
      buf = g;
    }
    size_t r = fread(buf + n, 1, cap - n, fp);
    n += r;
    if (r == 0)
      break;
  }
  bool bad = ferror(fp) != 0;
  fclose(fp);
  if (bad) {
    free(buf);
    return scps_error_set(err, SCPS_EIO, "fdo load: cannot read '%s'", path);
  }
  buf[n] = '\0';
  *out = buf;
  *len = n;
  return 0;
}

typedef struct csv_cursor {
  const char *p, *end;
  int line;
} csv_cursor;

/* Reads one field into out (NUL-terminated). Returns 1 when another field of
 * the same record follows, 0 at the end of the record, or a negative code. */
static int csv_field(csv_cursor *c, char *out, size_t cap) {
  size_t n = 0;
  bool quoted = c->p < c->end && *c->p == '"';
  if (quoted)
    c->p++;
  for (;;) {
    if (c->p >= c->end) {
      if (quoted)
        return SCPS_EPARSE;
      break;
    }
    char ch = *c->p;
    if (quoted) {
      if (ch == '"') {
        if (c->p + 1 < c->end && c->p[1] == '"') {
          c->p++;
        } else {
          c->p++;
          quoted = false;
          continue;
        }
      }
    } else if (ch == ',' || ch == '\n' || ch == '\r') {
      break;
    }
    if (ch == '\n')
      c->line++;
    if (n + 1 >= cap)
      return SCPS_EPARSE;
    out[n++] = ch;
    c->p++;
  }
  out[n] = '\0';
  if (c->p < c->end && *c->p == ',') {
    c->p++;
    return 1;
  }
  if (c->p < c->end && *c->p == '\r')
    c->p++;
  if (c->p < c->end && *c->p == '\n') {
    c->p++;
    c->line++;
  }
  return 0;
}

static int parse_values(const char *s, int64_t *v, int max, int *count) {
  int n = 0;
  const char *p = s;
  for (;;) {
    while (*p == ' ' || *p == '\t')
      p++;
    if (!*p)
      break;
    char *end;
    errno = 0;
    long long x = strtoll(p, &end, 10);
    if (end == p || errno != 0 || (*end && *end != ' ' && *end != '\t') || n >= max)
      return SCPS_EPARSE;
    v[n++] = x;
    p = end;
  }
  *count = n;
  return 0;
}

static int load_one(scps_fdo *f, const char *path, const char *text, size_t len,
                    scps_stack_stats *tmp, scps_error *err) {
  csv_cursor c = {text, text + len, 1};
  size_t vcap = (size_t)f->n * 24 + 64;
  char key[SCPS_STACK_NAME_MAX + 64];
  char *vals = malloc(vcap);
  int64_t *v = malloc(((size_t)f->n + 1) * sizeof *v);
  int rc = 0;
  if (!vals || !v) {
    rc = scps_error_set(err, SCPS_ENOMEM, "fdo load: out of memory");
    goto out;
  }
  bool header = true;
  while (c.p < c.end) {
    int line = c.line;
    if (*c.p == '\n' || *c.p == '\r') { /* blank line */
      csv_field(&c, key, sizeof key);
      continue;
    }
    int more = csv_field(&c, key, sizeof key);
    if (more < 0) {
      rc = scps_error_set(err, SCPS_EPARSE, "fdo load: '%s' line %d: malformed key field", path,
                          line);
      goto out;
    }
    if (header) { /* the reference skips its first row unread */
      while (more == 1)
        more = csv_field(&c, vals, vcap);
      header = false;
      continue;
    }
    if (more != 1 || csv_field(&c, vals, vcap) != 0) {
      rc = scps_error_set(err, SCPS_EPARSE,
                          "fdo load: '%s' line %d: expected two fields <key>,<values>", path, line);
      goto out;
    }
    int kind = -1;
    size_t klen = strlen(key);
    for (int k = 0; k < KEY_COUNT && kind < 0; k++) {
      size_t sl = strlen(key_suffix[k]);
      if (klen > sl && !strcmp(key + klen - sl, key_suffix[k]))
        kind = k;
    }
    if (kind < 0) {
      rc = scps_error_set(err, SCPS_EPARSE,
                          "fdo load: '%s' line %d: key '%s' does not end with a known suffix",
                          path, line, key);
      goto out;
    }
    key[klen - strlen(key_suffix[kind])] = '\0';
    int s = scps__layout_find_stack(f->layout, key);
    if (s < 0) {
      rc = scps_error_set(err, SCPS_ENOENT, "fdo load: '%s' line %d: unknown stack '%s'", path,
                          line, key);
      goto out;
    }
    int count = 0;
    int want = kind == KEY_DROPS ? 1 : f->n;
    if (parse_values(vals, v, f->n + 1, &count) != 0) {
      rc = scps_error_set(err, SCPS_EPARSE, "fdo load: '%s' line %d: bad values '%.64s'", path,
                          line, vals);
      goto out;
    }
    if (count != want) {
      rc = scps_error_set(err, SCPS_EMISMATCH,
                          "fdo load: '%s' line %d: stack '%s' %s has %d values, expected %d", path,
                          line, key, key_suffix[kind] + 1, count, want);
      goto out;
    }
    scps_stack_stats *t = &tmp[s];
    for (int i = 0; i < count; i++) {
      if (v[i] < 0 || (kind <= KEY_MAX_UNIQUE && v[i] > INT32_MAX)) {
        rc = scps_error_set(err, SCPS_ERANGE, "fdo load: '%s' line %d: stack '%s' value %lld out of range",
                            path, line, key, (long long)v[i]);
        goto out;
      }
      switch (kind) {
      case KEY_MAX_IDS:
        if (v[i] > t->max_ids_per_partition[i])
          t->max_ids_per_partition[i] = (int32_t)v[i];
        break;
      case KEY_MAX_UNIQUE:
        if (v[i] > t->max_unique_ids_per_partition[i])
          t->max_unique_ids_per_partition[i] = (int32_t)v[i];
        break;
      case KEY_REQUIRED_BUFFER:
        if (v[i] > t->required_buffer_size_per_sc[i])
          t->required_buffer_size_per_sc[i] = v[i];
        break;
      default:
        if (v[i] > t->id_drop_counter)
          t->id_drop_counter = v[i];
      }
    }
  }
out:
  free(vals);
  free(v);
  return rc;
}

int scps__fdo_load_csv(scps_fdo *f, const char *dir, scps_error *err) {
  if (!f || !dir)
    return scps_error_set(err, SCPS_EINVAL, "scps__fdo_load_csv: %s is NULL", f ? "dir" : "fdo");
  fdo_file *files = NULL;
  int n_files = 0;
  int rc = latest_files(dir, &files, &n_files, err);
  if (rc != 0)
    return rc;
  scps_stack_stats *tmp = stats_array_alloc(f->n_stacks, f->n);
  if (!tmp) {
    free(files);
    return scps_error_set(err, SCPS_ENOMEM, "fdo load: out of memory");
  }
  for (int i = 0; i < n_files && rc == 0; i++) {
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, files[i].name) >= sizeof path) {
      rc = scps_error_set(err, SCPS_EINVAL, "fdo load: path too long in '%.200s'", dir);
      break;
    }
    char *text = NULL;
    size_t len = 0;
    rc = read_file(path, &text, &len, err);
    if (rc == 0)
      rc = load_one(f, path, text, len, tmp, err);
    free(text);
  }
  free(files);
  if (rc == 0) {
    scps_stack_stats *old = f->acc;
    f->acc = tmp;
    tmp = old;
  }
  stats_array_free(tmp, f->n_stacks);
  return rc;
}

/* Entries take the counter sets in turn: with one set, an entry whose source
 * repeats the previous entry's waits for that entry's increment to reach
 * memory and come back. */
#define COUNT_LANES 4

int scps__fdo_count_sources(const scps_coo *coo, const int32_t *src_of, int32_t n_src, int32_t *ids,
                           int32_t *unique) {
  const size_t n = coo->n;
  if (n_src > 64) {
    /* No bitmask of a row's sources fits a register: remember each source's
     * last row instead (rows ascend, so a different row is a new one). */
    int64_t *last = malloc(sizeof *last * (size_t)n_src);
    if (!last) return SCPS_ENOMEM;
    for (int32_t s = 0; s < n_src; s++) {
      ids[s] = unique[s] = 0;
      last[s] = -1;
    }
    for (size_t i = 0; i < n; i++) {
      const int32_t s = src_of[coo->samples[i]];
      ids[s]++;
      unique[s] += last[s] != (int64_t)coo->rows[i];
      last[s] = coo->rows[i];
    }
    free(last);
    return 0;
  }
  int32_t lane_ids[COUNT_LANES][64] = {{0}}, lane_unique[COUNT_LANES][64] = {{0}};
  uint64_t run = 0; /* sources seen among the current row's entries */
  uint32_t prev = n ? coo->rows[0] : 0;
  for (size_t i = 0; i < n; i++) {
    const uint32_t row = coo->rows[i];
    const int32_t s = src_of[coo->samples[i]];
    const uint64_t bit = (uint64_t)1 << s;
    run = row == prev ? run : 0;
    prev = row;
    lane_ids[i % COUNT_LANES][s]++;
    lane_unique[i % COUNT_LANES][s] += !(run & bit);
    run |= bit;
  }
  for (int32_t s = 0; s < n_src; s++) {
    ids[s] = unique[s] = 0;
    for (int k = 0; k < COUNT_LANES; k++) {
      ids[s] += lane_ids[k][s];
      unique[s] += lane_unique[k][s];
    }
  }
  return 0;
}
