/* Runs a fuzz target's LLVMFuzzerTestOneInput over files and directories
 * (the committed corpus) without libFuzzer, so the ordinary and sanitizer
 * builds check every corpus input on each test run. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "fuzz_replay: cannot open '%s'\n", path);
    return -1;
  }
  uint8_t *buf = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (n == cap) {
      cap = cap ? cap * 2 : 4096;
      uint8_t *p = realloc(buf, cap);
      if (!p) {
        free(buf);
        fclose(f);
        return -1;
      }
      buf = p;
    }
    size_t k = fread(buf + n, 1, cap - n, f);
    if (!k) break;
    n += k;
  }
  fclose(f);
  LLVMFuzzerTestOneInput(buf, n);
  free(buf);
  return 0;
}

int main(int argc, char **argv) {
  int files = 0;
  for (int i = 1; i < argc; i++) {
    struct stat sb;
    if (stat(argv[i], &sb)) {
      fprintf(stderr, "fuzz_replay: no such file or directory '%s'\n", argv[i]);
      return 1;
    }
    if (!S_ISDIR(sb.st_mode)) {
      if (run_file(argv[i])) return 1;
      files++;
      continue;
    }
    DIR *d = opendir(argv[i]);
    if (!d) return 1;
    for (struct dirent *e; (e = readdir(d));) {
      if (e->d_name[0] == '.') continue;
      char path[4096];
      snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name);
      if (run_file(path)) {
        closedir(d);
        return 1;
      }
      files++;
    }
    closedir(d);
  }
  if (!files) {
    fprintf(stderr, "fuzz_replay: no input\n");
    return 1;
  }
  printf("fuzz_replay: %d inputs ran\n", files);
  return 0;
}
