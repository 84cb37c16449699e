/* scps-admin: operator commands, one table entry each: the offline
 * checkpoint tools on files here, those that ask servers in scps_admin_online. */
#include <dirent.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "scps_admin_online.h"
#include "scps_admin_rows.h"
#include "scps_admin_topk.h"
#include "scps_admin_restore.h"
#include "scps_checkpoint.h"
#include "scps_checkpoint_export.h"
#include "scps_units.h"
#include "scps_version.h"

typedef struct command {
  const char *name;  /* one or two words: "checkpoint list" */
  const char *summary;
  const char *usage; /* the --help text: usage line, then what it does and its options */
  int (*run)(int argc, char **argv);
} command;

static int parse_int(const char *flag, const char *s, long lo, long hi, long *out) {
  scps_error e;
  if (!scps__parse_long(flag, s, lo, hi, out, &e)) return 0;
  fprintf(stderr, "scps-admin: %s\n", e.msg);
  return -1;
}

static double gbps(const scps_checkpoint_stats *st) {
  return st->seconds > 0 ? (double)st->bytes / st->seconds / 1e9 : 0;
}

/* Options shared by every command: --help prints its usage. Returns 1 when
 * the command should stop with status *status. */
static int wants_help(const command *c, int argc, char **argv, int *status) {
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      fputs(c->usage, stdout);
      *status = 0;
      return 1;
    }
  return 0;
}

/* ---- checkpoint list ---- */

static const char list_usage[] =
    "usage: scps-admin checkpoint list ROOT\n"
    "Lists the checkpoints under ROOT (a --checkpoint-dir), oldest first: step,\n"
    "whether it is complete (all manifests present, every file of its listed\n"
    "size; checksums are not read, see 'checkpoint verify'), the bytes its\n"
    "directory holds and its path. The newest complete one is what a server\n"
    "restores.\n";

static int64_t dir_bytes(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  int64_t total = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    struct stat st;
    if (!fstatat(dirfd(d), de->d_name, &st, 0) && S_ISREG(st.st_mode)) total += st.st_size;
  }
  closedir(d);
  return total;
}

static int cmp_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int run_list(int argc, char **argv) {
  if (argc != 2) {
    fputs(list_usage, stderr);
    return 2;
  }
  const char *root = argv[1];
  DIR *d = opendir(root);
  if (!d) {
    perror(root);
    return 1;
  }
  char **names = NULL;
  size_t n = 0, cap = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (strncmp(de->d_name, "step-", 5)) continue;
    if (n == cap) {
      cap = cap ? cap * 2 : 16;
      char **nn = realloc(names, cap * sizeof *names);
      if (!nn) break;
      names = nn;
    }
    if (!(names[n] = strdup(de->d_name))) break;
    n++;
  }
  closedir(d);
  /* Zero-padded steps sort by name. */
  if (n) qsort(names, n, sizeof *names, cmp_names);
  printf("%-14s %-10s %14s  %s\n", "step", "state", "bytes", "directory");
  for (size_t i = 0; i < n; i++) {
    char dir[8192];
    snprintf(dir, sizeof dir, "%s/%s", root, names[i]);
    scps_checkpoint *c = NULL;
    scps_error err;
    int rc = scps__checkpoint_open(dir, &c, &err);
    printf("%-14s %-10s %14lld  %s\n", names[i] + 5, rc ? "incomplete" : "complete",
           (long long)dir_bytes(dir), dir);
    if (rc) printf("    %s\n", err.msg);
    scps__checkpoint_close(c);
    free(names[i]);
  }
  free(names);
  return 0;
}

/* ---- checkpoint verify ---- */

static const char verify_usage[] =
    "usage: scps-admin checkpoint verify DIR\n"
    "Opens the checkpoint in DIR (a step-... directory), cross-checks its\n"
    "manifests, then reads every data file and checks its size and XXH64\n"
    "checksum. Prints a summary and exits 0, or names the first bad file and\n"
    "exits 1.\n";

static int run_verify(int argc, char **argv) {
  if (argc != 2) {
    fputs(verify_usage, stderr);
    return 2;
  }
  scps_checkpoint *c;
  scps_error err;
  scps_checkpoint_stats st = {0};
  int rc = scps__checkpoint_open(argv[1], &c, &err);
  if (!rc) {
    rc = scps__checkpoint_verify(c, &st, &err);
    if (!rc) {
      const scps_topology *t = scps__checkpoint_topology(c);
      printf("%s: step %lld, %d x %d SparseCores, %d files, %lld bytes: OK (%.2f GB/s)\n", argv[1],
             (long long)scps__checkpoint_step(c), t->num_processes, t->sc_per_process, st.files,
             (long long)st.bytes, gbps(&st));
    }
    scps__checkpoint_close(c);
  }
  if (rc) fprintf(stderr, "scps-admin: %s\n", err.msg);
  return rc ? 1 : 0;
}

/* ---- checkpoint convert ---- */

static const char convert_usage[] =
    "usage: scps-admin checkpoint convert DIR [--to-processes P --to-sc-per-process S]\n"
    "                                     [--storage TABLE[.SLOT]=FORMAT ...]\n"
    "                                     [--sc-memory SIZE] --out ROOT\n"
    "Rewrites the checkpoint in DIR as ROOT/step-<same step>/ for a cluster of\n"
    "P processes x S SparseCores (default: the source's), with the storage\n"
    "formats --storage names (default: the source's): same specs but for\n"
    "those, same step and limits, every row and optimizer slot identical, or\n"
    "rounded to the nearest value of its new format. Servers started with\n"
    "that topology and those formats restore it (a restore converts formats\n"
    "too, so this is for moving or shrinking checkpoints offline).\n"
    "\n"
    "  --to-processes P         processes of the target cluster\n"
    "  --to-sc-per-process S    SparseCores per process of the target cluster\n"
    "  --storage TABLE=FORMAT   table TABLE's rows in FORMAT (float32, bfloat16\n"
    "                           or eXmY: e4m3, e5m2, e3m0b-2); TABLE.SLOT=FORMAT\n"
    "                           its optimizer slot SLOT (accumulator, momentum,\n"
    "                           velocity, linear, mu, nu, local_step); repeatable\n"
    "  --sc-memory SIZE         memory per SparseCore of the target (K, M, G\n"
    "                           suffixes); default: the source's, scaled up when\n"
    "                           there are fewer SparseCores or wider formats\n"
    "  --out ROOT               where the converted checkpoint goes; its step\n"
    "                           directory must not exist yet (never the source's\n"
    "                           own root)\n";

/* "TABLE=FORMAT" or "TABLE.SLOT=FORMAT" into *ch; nonzero (after a message)
 * when it is neither. */
static int parse_storage_change(const char *arg, scps_checkpoint_format_change *ch) {
  const char *eq = strchr(arg, '=');
  const size_t name_len = eq ? (size_t)(eq - arg) : 0;
  memset(ch, 0, sizeof *ch);
  if (!eq || !name_len || name_len >= sizeof ch->table || strlen(eq + 1) >= sizeof ch->format) {
    fprintf(stderr, "scps-admin: --storage '%s': expected TABLE=FORMAT or TABLE.SLOT=FORMAT\n", arg);
    return 1;
  }
  memcpy(ch->table, arg, name_len);
  snprintf(ch->format, sizeof ch->format, "%s", eq + 1);
  /* A table name may hold dots: the slot is what follows the last one, if
   * the whole name is not a table (scps__checkpoint_export_as says). */
  char *dot = strrchr(ch->table, '.');
  if (dot) {
    snprintf(ch->slot, sizeof ch->slot, "%s", dot + 1);
    *dot = '\0';
  }
  return 0;
}

#define CONVERT_CHANGES_MAX 256

static int run_convert(int argc, char **argv) {
  static const struct option opts[] = {{"to-processes", required_argument, 0, 'p'},
                                       {"to-sc-per-process", required_argument, 0, 's'},
                                       {"storage", required_argument, 0, 'f'},
                                       {"sc-memory", required_argument, 0, 'm'},
                                       {"out", required_argument, 0, 'o'},
                                       {0, 0, 0, 0}};
  long P = 0, S = 0;
  int64_t mem = 0;
  const char *out = NULL;
  static scps_checkpoint_format_change changes[CONVERT_CHANGES_MAX];
  int n_changes = 0, ch;
  bool mem_set = false;
  while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (ch) {
    case 'p': if (parse_int("--to-processes", optarg, 1, 1024, &P)) return 2; break;
    case 's': if (parse_int("--to-sc-per-process", optarg, 1, 64, &S)) return 2; break;
    case 'f':
      if (n_changes == CONVERT_CHANGES_MAX) {
        fprintf(stderr, "scps-admin: more than %d --storage options\n", CONVERT_CHANGES_MAX);
        return 2;
      }
      if (parse_storage_change(optarg, &changes[n_changes++])) return 2;
      break;
    case 'm':
      if (scps__parse_bytes(optarg, &mem)) {
        fprintf(stderr, "scps-admin: --sc-memory '%s': expected bytes like 512M or 4G\n", optarg);
        return 2;
      }
      mem_set = true;
      break;
    case 'o': out = optarg; break;
    default: fputs(convert_usage, stderr); return 2;
    }
  }
  if (optind != argc - 1 || !P != !S || !out) {
    fputs(convert_usage, stderr);
    return 2;
  }
  const char *dir = argv[optind];
  scps_error err;
  scps_checkpoint *c;
  if (scps__checkpoint_open(dir, &c, &err)) {
    fprintf(stderr, "scps-admin: %s\n", err.msg);
    return 1;
  }
  const scps_topology *t = scps__checkpoint_topology(c);
  const bool same = !P || (P == t->num_processes && S == t->sc_per_process);
  if (!P) {
    P = t->num_processes;
    S = t->sc_per_process;
  }
  if (!mem) {
    int64_t from = (int64_t)t->num_processes * t->sc_per_process, to = P * S;
    mem = t->sc_memory_bytes * ((from + to - 1) / to);
  }
  scps__checkpoint_close(c);
  scps_topology to = {(int32_t)P, (int32_t)S, mem};
  scps_checkpoint_stats st = {0};
  /* The source's topology (no --sc-memory): its SparseCores grown as the
   * new formats need. */
  const bool grow = same && !mem_set;
  if (scps__checkpoint_export_as(dir, grow ? NULL : &to, changes, n_changes, out, &st, &err)) {
    fprintf(stderr, "scps-admin: %s\n", err.msg);
    return 1;
  }
  printf("%s -> %s: %ld x %ld SparseCores, %d storage changes, %d files, %lld bytes in %.2f s\n", dir, out, P, S,
         n_changes, st.files, (long long)st.bytes, st.seconds);
  return 0;
}

/* ---- checkpoint export ---- */

static const char export_usage[] =
    "usage: scps-admin checkpoint export DIR --table NAME [--slot NAME] [--process P]\n"
    "                                    --out FILE.npy\n"
    "Writes table NAME of the checkpoint in DIR as one unstacked, unsharded\n"
    "array: a .npy file (float32, shape (vocabulary_size, embedding_dim), row\n"
    "i = id i) that numpy.load reads. Every file read is checksummed.\n"
    "\n"
    "  --table NAME    the table\n"
    "  --slot NAME     an optimizer slot instead of the rows: accumulator\n"
    "                  (adagrad, adagrad_momentum, ftrl, f2a), momentum\n"
    "                  (adagrad_momentum, adam), velocity (adam), linear\n"
    "                  (ftrl), mu and nu (laprop), local_step (f2a)\n"
    "  --process P     only process P's part (its manifest and data files),\n"
    "                  as a process keeps it on a volume of its own: the rows\n"
    "                  of ids its SparseCores do not hold are NaN\n"
    "  --out FILE      the .npy file to write\n";

static int run_export(int argc, char **argv) {
  static const struct option opts[] = {{"table", required_argument, 0, 't'},
                                       {"slot", required_argument, 0, 's'},
                                       {"process", required_argument, 0, 'p'},
                                       {"out", required_argument, 0, 'o'},
                                       {0, 0, 0, 0}};
  const char *table = NULL, *slot_name = NULL, *out = NULL;
  long process = -1;
  int ch;
  while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (ch) {
    case 't': table = optarg; break;
    case 's': slot_name = optarg; break;
    case 'o': out = optarg; break;
    case 'p': if (parse_int("--process", optarg, 0, 1023, &process)) return 2; break;
    default: fputs(export_usage, stderr); return 2;
    }
  }
  if (optind != argc - 1 || !table || !out) {
    fputs(export_usage, stderr);
    return 2;
  }
  scps_checkpoint *c;
  scps_error err;
  int rc = process >= 0 ? scps__checkpoint_open_part(argv[optind], (int32_t)process, &c, &err)
                        : scps__checkpoint_open(argv[optind], &c, &err);
  int slot = -1;
  if (!rc && slot_name) {
    const scps_table_spec *t;
    const scps_feature_spec *f;
    int nt, nf;
    scps__checkpoint_specs(c, &t, &nt, &f, &nf);
    int ti = scps__find_table(t, nt, table);
    scps_optimizer_type type = ti >= 0 ? t[ti].optimizer.type : SCPS_OPT_SGD;
    for (int k = 0; k < scps__optimizer_num_slots(type); k++)
      if (!strcmp(scps__optimizer_slot_name(type, k), slot_name)) slot = k;
    if (ti >= 0 && slot < 0) {
      char names[256] = "";
      for (int k = 0; k < scps__optimizer_num_slots(type); k++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", k ? ", " : "",
                 scps__optimizer_slot_name(type, k));
      rc = scps_error_set(&err, SCPS_EINVAL, "table '%s' (%s) has no slot '%s'; its slots: %s", table,
                          scps__optimizer_name(type), slot_name, names[0] ? names : "none");
    }
  }
  if (!rc) rc = scps__checkpoint_export_table(c, table, slot, out, &err);
  scps__checkpoint_close(c);
  if (rc) {
    fprintf(stderr, "scps-admin: %s\n", err.msg);
    return 1;
  }
  printf("%s: table '%s'%s%s written\n", out, table, slot_name ? " slot " : "", slot_name ? slot_name : "");
  return 0;
}

/* ---- the command table ---- */

static const command commands[] = {
    {"health", "ask servers whether they are serving", scps_admin_health_usage, scps__admin_health},
    {"stats", "print servers' memory, FDO, request and checkpoint statistics", scps_admin_stats_usage,
     scps__admin_stats},
    {"config", "print what servers serve: topology, stacks, limits, step", scps_admin_config_usage,
     scps__admin_config},
    {"checkpoint save", "save a cluster checkpoint through the servers", scps_admin_save_usage, scps__admin_save},
    {"checkpoint list", "list the checkpoints under a directory", list_usage, run_list},
    {"checkpoint verify", "check every file of a checkpoint against its checksum", verify_usage,
     run_verify},
    {"checkpoint convert", "reshard a checkpoint for another topology or storage formats", convert_usage,
     run_convert},
    {"checkpoint export", "write a table or slot as a .npy array", export_usage, run_export},
    {"rows", "print given ids' rows and optimizer slots as the servers hold them", scps_admin_rows_usage,
     scps__admin_rows},
    {"topk", "print the rows of a table that score highest against query vectors", scps_admin_topk_usage,
     scps__admin_topk},
    {"checkpoint restore", "bring every process of a cluster to one step it holds a checkpoint of",
     scps_admin_restore_usage, scps__admin_restore},
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *out) {
  fputs("usage: scps-admin COMMAND [ARGS]   (scps-admin COMMAND --help for its options)\n"
        "       scps-admin --version\n"
        "Operator commands for an scps cluster and its files:\n",
        out);
  for (size_t i = 0; i < N_COMMANDS; i++) fprintf(out, "  %-20s %s\n", commands[i].name, commands[i].summary);
}

/* How many leading words of argv (from argv[1]) name command c, or 0. */
static int matches(const command *c, int argc, char **argv) {
  const char *name = c->name;
  int words = 0;
  while (*name) {
    size_t len = strcspn(name, " ");
    if (words + 1 >= argc || strlen(argv[words + 1]) != len || strncmp(argv[words + 1], name, len))
      return 0;
    words++;
    name += len;
    if (*name == ' ') name++;
  }
  return words;
}

/* Whether word is the first of some commands' names ("checkpoint"). */
static bool is_group(const char *word) {
  size_t len = strlen(word);
  for (size_t i = 0; i < N_COMMANDS; i++)
    if (!strncmp(commands[i].name, word, len) && commands[i].name[len] == ' ') return true;
  return false;
}

/* The commands of group `word`, as usage() lists them all. */
static void group_usage(FILE *out, const char *word) {
  size_t len = strlen(word);
  fprintf(out, "usage: scps-admin %s COMMAND [ARGS]   (scps-admin %s COMMAND --help for its options)\n", word,
          word);
  for (size_t i = 0; i < N_COMMANDS; i++)
    if (!strncmp(commands[i].name, word, len) && commands[i].name[len] == ' ')
      fprintf(out, "  %-20s %s\n", commands[i].name, commands[i].summary);
}

static bool is_help(const char *arg) { return !strcmp(arg, "--help") || !strcmp(arg, "-h"); }

int main(int argc, char **argv) {
  if (argc < 2 || is_help(argv[1])) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!strcmp(argv[1], "--version")) {
    printf("scps-admin %s\n", scps_version());
    return 0;
  }
  for (size_t i = 0; i < N_COMMANDS; i++) {
    int words = matches(&commands[i], argc, argv);
    if (!words) continue;
    /* The command sees its own name as argv[0], then its arguments. */
    int sub_argc = argc - words;
    char **sub_argv = argv + words;
    int status;
    if (wants_help(&commands[i], sub_argc, sub_argv, &status)) return status;
    return commands[i].run(sub_argc, sub_argv);
  }
  /* A group's name alone or with --help ("checkpoint --help") lists its
   * commands; any other word after it is not one of them. */
  if (is_group(argv[1])) {
    if (argc == 2 || is_help(argv[2])) {
      group_usage(argc == 2 ? stderr : stdout, argv[1]);
      return argc == 2 ? 2 : 0;
    }
    fprintf(stderr, "scps-admin: unknown command '%s %s'\n", argv[1], argv[2]);
    group_usage(stderr, argv[1]);
    return 2;
  }
  fprintf(stderr, "scps-admin: unknown command '%s%s%s'\n", argv[1], argc > 2 ? " " : "",
          argc > 2 ? argv[2] : "");
  usage(stderr);
  return 2;
}
