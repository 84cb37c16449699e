#include "scps_bench.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

void scps_bench_sort(double *v, size_t n) { qsort(v, n, sizeof *v, cmp_double); }

double scps_bench_median(const double *v, size_t n) {
  double *s = n ? malloc(sizeof *s * n) : NULL;
  if (!s) return NAN;
  memcpy(s, v, sizeof *s * n);
  scps_bench_sort(s, n);
  double m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
  free(s);
  return m;
}

int scps_bench_plain_write(const char *path, const void *chunk, size_t chunk_len, int64_t bytes) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return -errno;
  int rc = 0;
  for (int64_t left = bytes; left > 0 && !rc;) {
    ssize_t w = write(fd, chunk, left < (int64_t)chunk_len ? (size_t)left : chunk_len);
    if (w > 0) left -= w;
    else if (w < 0 && errno != EINTR) rc = -errno;
    else if (w == 0) rc = -EIO;
  }
  if (!rc && fsync(fd)) rc = -errno;
  close(fd);
  return rc;
}

int scps_bench_plain_read(const char *path, void *chunk, size_t chunk_len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  ssize_t r;
  while ((r = read(fd, chunk, chunk_len)) != 0)
    if (r < 0 && errno != EINTR) break;
  int rc = r < 0 ? -errno : 0;
  close(fd);
  return rc;
}

/* stat's fields after the comm, which may hold spaces and parentheses: the
 * last ')' ends it. utime and stime are fields 14 and 15. */
static int read_thread(const char *dir, int tid, scps_bench_thread *t) {
  char path[96], buf[1024];
  snprintf(path, sizeof path, "%s/%d/stat", dir, tid);
  FILE *f = fopen(path, "r");
  if (!f) return -errno;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  char *open = strchr(buf, '('), *close = strrchr(buf, ')');
  if (!open || !close || close < open) return -EINVAL;
  size_t len = (size_t)(close - open - 1);
  if (len >= sizeof t->name) len = sizeof t->name - 1;
  memcpy(t->name, open + 1, len);
  t->name[len] = 0;
  unsigned long utime = 0, stime = 0;
  if (sscanf(close + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime, &stime) != 2) return -EINVAL;
  const double tick = 1.0 / (double)sysconf(_SC_CLK_TCK);
  t->tid = tid;
  t->user_s = (double)utime * tick;
  t->sys_s = (double)stime * tick;
  snprintf(path, sizeof path, "%s/%d/schedstat", dir, tid);
  unsigned long long run = 0;
  f = fopen(path, "r");
  int ok = f && fscanf(f, "%llu", &run) == 1;
  if (f) fclose(f);
  /* Without schedstat (a kernel built without it) the ticks are all there is. */
  t->cpu_s = ok ? (double)run * 1e-9 : t->user_s + t->sys_s;
  return 0;
}

int scps_bench_threads(int pid, scps_bench_thread *t, int max) {
  char dir[64];
  if (pid) snprintf(dir, sizeof dir, "/proc/%d/task", pid);
  else snprintf(dir, sizeof dir, "/proc/self/task");
  DIR *d = opendir(dir);
  if (!d) return -errno;
  int n = 0;
  for (struct dirent *e; n < max && (e = readdir(d));) {
    int tid = atoi(e->d_name);
    if (tid > 0 && !read_thread(dir, tid, &t[n])) n++; /* one that just exited is skipped */
  }
  closedir(d);
  return n;
}

double scps_bench_process_cpu_s(int pid) {
  clockid_t id = CLOCK_PROCESS_CPUTIME_ID;
  struct timespec ts;
  if (pid && clock_getcpuclockid(pid, &id)) return NAN;
  if (clock_gettime(id, &ts)) return NAN;
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double scps_bench_thread_cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int scps_bench_cpu_take(int pid, scps_bench_cpu *s) {
  s->process_s = scps_bench_process_cpu_s(pid);
  int n = scps_bench_threads(pid, s->t, SCPS_BENCH_MAX_THREADS);
  s->n = n < 0 ? 0 : n;
  return n < 0 ? n : isnan(s->process_s) ? -ESRCH : 0;
}

void scps_bench_cpu_print(FILE *f, const scps_bench_cpu *before, const scps_bench_cpu *after, double batches) {
  const double k = 1e3 / batches;
  double named = 0.0;
  bool done[SCPS_BENCH_MAX_THREADS] = {false};
  fprintf(f, "{\"process_ms\": %.3f", (after->process_s - before->process_s) * k);
  for (int i = 0; i < after->n; i++) {
    if (done[i]) continue;
    int threads = 0;
    double cpu = 0.0, user = 0.0, sys = 0.0;
    for (int j = i; j < after->n; j++) {
      const scps_bench_thread *a = &after->t[j];
      if (strcmp(a->name, after->t[i].name)) continue;
      done[j] = true;
      threads++;
      scps_bench_thread b = {0};
      for (int m = 0; m < before->n; m++)
        if (before->t[m].tid == a->tid) b = before->t[m];
      cpu += a->cpu_s - b.cpu_s;
      user += a->user_s - b.user_s;
      sys += a->sys_s - b.sys_s;
    }
    named += cpu;
    fprintf(f, ", \"%s\": {\"threads\": %d, \"cpu_ms\": %.3f, \"user_ms\": %.3f, \"sys_ms\": %.3f}",
            after->t[i].name, threads, cpu * k, user * k, sys * k);
  }
  fprintf(f, ", \"exited_ms\": %.3f}", (after->process_s - before->process_s - named) * k);
}
