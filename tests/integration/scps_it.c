#include "scps_it.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define START_TIMEOUT_MS 60000.0 /* sanitizer builds start slowly on a busy machine */
#define STOP_TIMEOUT_MS 10000.0

extern char **environ;

double scps_it_now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static void sleep_ms(int ms) {
  struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

int scps_it_init(scps_it_cluster *cl, const char *config_json, int num_processes, int sc_per_process) {
  memset(cl, 0, sizeof *cl);
  if (num_processes < 1 || num_processes > SCPS_IT_MAX_PROCS) return -1;
  cl->num_processes = num_processes;
  cl->sc_per_process = sc_per_process;
  cl->sc_memory = "32M";
  snprintf(cl->dir, sizeof cl->dir, "/tmp/scps-it-XXXXXX");
  if (!mkdtemp(cl->dir)) {
    fprintf(stderr, "scps_it: mkdtemp: %s\n", strerror(errno));
    cl->dir[0] = '\0';
    return -1;
  }
  snprintf(cl->config, sizeof cl->config, "%s/config.json", cl->dir);
  FILE *f = fopen(cl->config, "w");
  if (!f || fputs(config_json, f) < 0 || fclose(f)) {
    fprintf(stderr, "scps_it: cannot write %s\n", cl->config);
    return -1;
  }
  for (int i = 0; i < num_processes; i++) cl->addr_list[i] = cl->addrs[i];
  return 0;
}

static void port_file(const scps_it_cluster *cl, int i, char *buf, size_t len) {
  snprintf(buf, len, "%s/port.%d", cl->dir, i);
}

static void print_log(const scps_it_cluster *cl, int i) {
  char path[320], line[512];
  snprintf(path, sizeof path, "%s/server.%d.log", cl->dir, i);
  FILE *f = fopen(path, "r");
  if (!f) return;
  while (fgets(line, sizeof line, f)) fprintf(stderr, "  [server %d] %s", i, line);
  fclose(f);
}

int scps_it_start_one(scps_it_cluster *cl, int i, int port, int wait) {
  const char *bin = getenv("SCPS_SERVER_BIN");
  if (!bin || !*bin) {
    fprintf(stderr, "scps_it: SCPS_SERVER_BIN is not set (ctest sets it to the scps-server binary)\n");
    return -1;
  }
  char pf[320], logp[320], listen[64], idx[16], np[16], sc[16];
  port_file(cl, i, pf, sizeof pf);
  unlink(pf);
  snprintf(logp, sizeof logp, "%s/server.%d.log", cl->dir, i);
  snprintf(listen, sizeof listen, "127.0.0.1:%d", port);
  snprintf(idx, sizeof idx, "%d", i);
  snprintf(np, sizeof np, "%d", cl->num_processes);
  snprintf(sc, sizeof sc, "%d", cl->sc_per_process);
  char *argv[40] = {(char *)bin, "--config", cl->config, "--listen", listen, "--port-file", pf,
                    "--process-index", idx, "--num-processes", np, "--sc-per-process", sc,
                    "--sc-memory", (char *)cl->sc_memory, "--drain-seconds", "2", NULL};
  int argc = 17;
  for (int k = 0; k < (int)(sizeof cl->extra / sizeof cl->extra[0]) && cl->extra[k]; k++) argv[argc++] = (char *)cl->extra[k];
  argv[argc] = NULL;
  struct rlimit fsize = {(rlim_t)cl->fsize_limit, (rlim_t)cl->fsize_limit};
  /* Under ThreadSanitizer these tests check libscps; a server's own reports
   * go to its log (see scps_it_stop) instead of stopping it mid-test. The
   * environment is built here: between fork and exec only async-signal-safe
   * calls are allowed. */
  const char *tsan = getenv("TSAN_OPTIONS");
  char tsan_entry[1024];
  snprintf(tsan_entry, sizeof tsan_entry, "TSAN_OPTIONS=%s%shalt_on_error=0:exitcode=0", tsan ? tsan : "",
           tsan && *tsan ? ":" : "");
  size_t n_env = 0;
  while (environ[n_env]) n_env++;
  char **env = calloc(n_env + 2, sizeof *env);
  if (!env) return -1;
  size_t k = 0;
  for (size_t e = 0; e < n_env; e++)
    if (strncmp(environ[e], "TSAN_OPTIONS=", 13)) env[k++] = environ[e];
  env[k] = tsan_entry;
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    free(env);
    fprintf(stderr, "scps_it: fork: %s\n", strerror(errno));
    return -1;
  }
  if (pid == 0) {
    /* The server must not outlive a test that crashed or was killed. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    if (cl->fsize_limit > 0 && setrlimit(RLIMIT_FSIZE, &fsize)) _exit(126);
    int fd = open(logp, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    execve(bin, argv, env);
    _exit(127);
  }
  free(env);
  cl->pids[i] = pid;
  cl->ports[i] = port;
  if (port) snprintf(cl->addrs[i], sizeof cl->addrs[i], "127.0.0.1:%d", port);
  return wait ? scps_it_wait_one(cl, i) : 0;
}

int scps_it_wait_one(scps_it_cluster *cl, int i) {
  char pf[320];
  port_file(cl, i, pf, sizeof pf);
  double t0 = scps_it_now_ms();
  while (scps_it_now_ms() - t0 < START_TIMEOUT_MS) {
    int status;
    if (waitpid(cl->pids[i], &status, WNOHANG) == cl->pids[i]) {
      fprintf(stderr, "scps_it: server %d exited during startup (status %d); its log:\n", i, status);
      cl->pids[i] = 0;
      print_log(cl, i);
      return -1;
    }
    FILE *f = fopen(pf, "r");
    if (f) {
      char buf[32] = "";
      size_t n = fread(buf, 1, sizeof buf - 1, f);
      fclose(f);
      buf[n] = '\0';
      if (n && buf[n - 1] == '\n') {
        cl->ports[i] = atoi(buf);
        snprintf(cl->addrs[i], sizeof cl->addrs[i], "127.0.0.1:%d", cl->ports[i]);
        return 0;
      }
    }
    sleep_ms(10);
  }
  fprintf(stderr, "scps_it: server %d did not start within %.0f ms; its log:\n", i, START_TIMEOUT_MS);
  print_log(cl, i);
  return -1;
}

int scps_it_start(scps_it_cluster *cl) {
  for (int i = 0; i < cl->num_processes; i++)
    if (scps_it_start_one(cl, i, 0, 0)) return -1;
  for (int i = 0; i < cl->num_processes; i++)
    if (scps_it_wait_one(cl, i)) return -1;
  return 0;
}

void scps_it_kill(scps_it_cluster *cl, int i) {
  if (!cl->pids[i]) return;
  kill(cl->pids[i], SIGKILL);
  waitpid(cl->pids[i], NULL, 0);
  cl->pids[i] = 0;
}

/* Counts ThreadSanitizer reports in server i's log and prints their
 * summaries, so they are seen without failing the client's tests. */
static void note_sanitizer_reports(const scps_it_cluster *cl, int i) {
  char path[320], line[512];
  snprintf(path, sizeof path, "%s/server.%d.log", cl->dir, i);
  FILE *f = fopen(path, "r");
  if (!f) return;
  int n = 0;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "SUMMARY: ThreadSanitizer", 24) && n++ < 3) fprintf(stderr, "scps_it: note: server %d: %s", i, line);
  if (n) fprintf(stderr, "scps_it: note: server %d logged %d ThreadSanitizer report%s\n", i, n, n == 1 ? "" : "s");
  fclose(f);
}

void scps_it_remove_tree(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) {
    unlink(dir);
    return;
  }
  struct dirent *e;
  char path[1024];
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      struct stat sb;
      if (!lstat(path, &sb) && S_ISDIR(sb.st_mode)) {
        chmod(path, 0755);
        scps_it_remove_tree(path);
      } else {
        unlink(path);
      }
    }
  closedir(d);
  rmdir(dir);
}

void scps_it_read_log(const scps_it_cluster *cl, int i, char *buf, size_t len) {
  char path[320];
  snprintf(path, sizeof path, "%s/server.%d.log", cl->dir, i);
  buf[0] = '\0';
  FILE *f = fopen(path, "r");
  if (!f) return;
  size_t n = fread(buf, 1, len - 1, f);
  buf[n] = '\0';
  fclose(f);
}

void scps_it_stop(scps_it_cluster *cl) {
  for (int i = 0; i < cl->num_processes; i++)
    if (cl->pids[i]) kill(cl->pids[i], SIGTERM);
  double t0 = scps_it_now_ms();
  for (int i = 0; i < cl->num_processes; i++) {
    while (cl->pids[i]) {
      int status;
      pid_t r = waitpid(cl->pids[i], &status, WNOHANG);
      if (r == cl->pids[i] || r < 0) {
        if (r == cl->pids[i] && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
          fprintf(stderr, "scps_it: note: server %d did not exit cleanly after SIGTERM (status %d); its log:\n", i,
                  status);
          print_log(cl, i);
        }
        cl->pids[i] = 0;
      } else if (scps_it_now_ms() - t0 > STOP_TIMEOUT_MS) {
        fprintf(stderr, "scps_it: server %d ignored SIGTERM for %.0f ms; killing it\n", i, STOP_TIMEOUT_MS);
        scps_it_kill(cl, i);
      } else {
        sleep_ms(10);
      }
    }
  }
  for (int i = 0; cl->dir[0] && i < cl->num_processes; i++) note_sanitizer_reports(cl, i);
  if (cl->dir[0]) scps_it_remove_tree(cl->dir);
  cl->dir[0] = '\0';
}

int scps_it_wait_exit(scps_it_cluster *cl, int i) {
  if (!cl->pids[i]) return -1;
  double t0 = scps_it_now_ms();
  for (;;) {
    int status;
    pid_t r = waitpid(cl->pids[i], &status, WNOHANG);
    if (r == cl->pids[i]) {
      cl->pids[i] = 0;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    }
    if (r < 0 || scps_it_now_ms() - t0 > STOP_TIMEOUT_MS * 3) {
      fprintf(stderr, "scps_it: server %d did not exit within %.0f ms; killing it\n", i,
              STOP_TIMEOUT_MS * 3);
      scps_it_kill(cl, i);
      return -1;
    }
    sleep_ms(10);
  }
}
