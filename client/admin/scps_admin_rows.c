#include "scps_admin_rows.h"

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scps_client_engine.h"
#include "scps_admin_json.h"
#include "scps_admin_online.h"
#include "scps_jsonw.h"
#include "scps_security_flags.h"
#include "scps_units.h"

#define MAX_SERVERS 1024
#define MAX_IDS 1000000

const char scps_admin_rows_usage[] =
    "usage: scps-admin rows --servers HOST:PORT[,HOST:PORT...] --table NAME --ids LIST\n"
    "                       [--json] [--deadline-ms N]\n"
    "Prints the rows and optimizer slots of ids of a table as the servers hold\n"
    "them now (the ReadRows RPC), each id read from the server that holds it.\n"
    "Where the servers check roles, reading rows needs an admin caller. Exit\n"
    "status 1 if the servers could not be read, 2 for bad arguments.\n"
    "\n"
    "  --servers LIST     every server of the cluster, in process-index order\n"
    "  --table NAME       the table ('scps-admin config' lists them)\n"
    "  --ids LIST         ids and inclusive ranges, e.g. 3,5,10-20 (at most\n"
    "                     1000000 ids)\n"
    "  --json             one JSON object: table, embedding_dim, slot names and\n"
    "                     per id its row and slots (float32 values, exact)\n"
    "  --deadline-ms N    how long to wait for the servers (default 10000)\n" SCPS_SECURITY_USAGE;

static int bad(const char *fmt, const char *arg) { return scps__admin_bad(scps_admin_rows_usage, fmt, arg); }

/* "3,5,10-20" into *ids (malloc'd, *n of them); 0, or -1 after saying why. */
static int parse_ids(const char *list, int64_t **ids, size_t *n) {
  *ids = NULL;
  *n = 0;
  size_t cap = 0;
  const char *p = list;
  while (*p) {
    char *end;
    long long a = strtoll(p, &end, 10), b = a;
    if (end == p || a < 0) return -1;
    if (*end == '-') {
      const char *q = end + 1;
      b = strtoll(q, &end, 10);
      if (end == q || b < a) return -1;
    }
    if (*end && *end != ',') return -1;
    if ((unsigned long long)(b - a) >= (unsigned long long)(MAX_IDS - *n)) return -1;
    for (long long v = a; v <= b; v++) {
      if (*n == cap) {
        cap = cap ? 2 * cap : 64;
        int64_t *grown = realloc(*ids, sizeof *grown * cap);
        if (!grown) return -1;
        *ids = grown;
      }
      (*ids)[(*n)++] = v;
    }
    p = *end ? end + 1 : end;
  }
  return *n ? 0 : -1;
}

static void print_values(const float *v, size_t dim) {
  for (size_t c = 0; c < dim; c++) printf("%s%.9g", c ? " " : "", (double)v[c]);
}

static void json_values(scps_jsonw *w, const float *v, size_t dim) {
  scps__jsonw_printf(w, "[");
  for (size_t c = 0; c < dim; c++) {
    if (c) scps__jsonw_printf(w, ", ");
    scps__jsonw_double(w, (double)v[c]);
  }
  scps__jsonw_printf(w, "]");
}

static int print_json(const scps_table_spec *spec, const int64_t *ids, size_t n, const float *rows,
                      const float *slots) {
  const size_t dim = (size_t)spec->embedding_dim;
  const int ns = scps__optimizer_num_slots(spec->optimizer.type);
  scps_jsonw w;
  scps__jsonw_init(&w);
  scps__jsonw_printf(&w, "{\"table\": ");
  scps__jsonw_string(&w, spec->name);
  scps__jsonw_printf(&w, ", \"embedding_dim\": %zu, \"slots\": [", dim);
  for (int k = 0; k < ns; k++) {
    if (k) scps__jsonw_printf(&w, ", ");
    scps__jsonw_string(&w, scps__optimizer_slot_name(spec->optimizer.type, k));
  }
  scps__jsonw_printf(&w, "], \"rows\": [");
  for (size_t i = 0; i < n; i++) {
    scps__jsonw_printf(&w, "%s\n  {\"id\": %lld, \"row\": ", i ? "," : "", (long long)ids[i]);
    json_values(&w, rows + i * dim, dim);
    for (int k = 0; k < ns; k++) {
      scps__jsonw_printf(&w, ", ");
      scps__jsonw_string(&w, scps__optimizer_slot_name(spec->optimizer.type, k));
      scps__jsonw_printf(&w, ": ");
      json_values(&w, slots + (i * (size_t)ns + (size_t)k) * dim, dim);
    }
    scps__jsonw_printf(&w, "}");
  }
  scps__jsonw_printf(&w, "]}\n");
  return scps__admin_json_print(&w);
}

static void print_text(const scps_table_spec *spec, const int64_t *ids, size_t n, const float *rows,
                       const float *slots) {
  const size_t dim = (size_t)spec->embedding_dim;
  const int ns = scps__optimizer_num_slots(spec->optimizer.type);
  printf("table %s: embedding_dim %zu, optimizer %s\n", spec->name, dim, scps__optimizer_name(spec->optimizer.type));
  for (size_t i = 0; i < n; i++) {
    printf("  id %lld: row ", (long long)ids[i]);
    print_values(rows + i * dim, dim);
    for (int k = 0; k < ns; k++) {
      printf("; %s ", scps__optimizer_slot_name(spec->optimizer.type, k));
      print_values(slots + (i * (size_t)ns + (size_t)k) * dim, dim);
    }
    printf("\n");
  }
}

static int rows_run(const char *servers, const char *table, const char *id_list, bool json, long deadline_ms,
                    const scps_client_security *security) {
  scps_error err;
  if (!servers) return bad("%s is required", "--servers");
  if (!table) return bad("%s is required", "--table");
  if (!id_list) return bad("%s is required", "--ids");
  int64_t *ids = NULL;
  size_t n = 0;
  if (parse_ids(id_list, &ids, &n)) {
    free(ids);
    return bad("--ids '%s': expected ids >= 0 and ranges FIRST-LAST, comma-separated, at most 1000000 ids",
               id_list);
  }
  scps_client *c = NULL;
  float *rows = NULL, *slots = NULL;
  bool bad_list;
  int rc = scps__admin_connect(servers, security, deadline_ms, &c, &bad_list, &err);
  if (bad_list) {
    free(ids);
    return bad("%s", err.msg);
  }
  const scps_table_spec *spec = NULL;
  if (!rc) {
    const scps_layout *l = scps__client_layout(c);
    int t = scps__find_table(l->table_specs, l->n_tables, table);
    if (t < 0) rc = scps_error_set(&err, SCPS_ENOENT, "--table '%s': the servers serve no such table", table);
    else spec = &l->table_specs[t];
  }
  if (!rc) {
    const size_t dim = (size_t)spec->embedding_dim, ns = (size_t)scps__optimizer_num_slots(spec->optimizer.type);
    rows = malloc(sizeof *rows * n * dim);
    slots = malloc(sizeof *slots * (n * dim * ns + 1));
    if (!rows || !slots) rc = scps_error_set(&err, SCPS_ENOMEM, "out of memory for %zu rows", n);
  }
  if (!rc) rc = scps_client_read_rows(c, table, ids, n, rows, slots, deadline_ms, &err);
  int status = 0;
  if (rc) {
    fprintf(stderr, "scps-admin: %s\n", err.msg);
    status = 1;
  } else if (json) {
    status = print_json(spec, ids, n, rows, slots);
  } else {
    print_text(spec, ids, n, rows, slots);
  }
  scps_client_destroy(c);
  free(rows);
  free(slots);
  free(ids);
  return status;
}

int scps__admin_connect(const char *servers, const scps_client_security *security, long timeout_ms,
                        scps_client **c, bool *bad_list, scps_error *err) {
  *c = NULL;
  *bad_list = false;
  char *list = strdup(servers);
  const char *addr[MAX_SERVERS];
  int n_servers = 0;
  if (!list) return scps_error_set(err, SCPS_ENOMEM, "out of memory");
  int rc = scps_address_list_split(list, addr, MAX_SERVERS, &n_servers, err);
  if (rc) {
    char msg[sizeof err->msg];
    snprintf(msg, sizeof msg, "%s", err->msg);
    scps_error_set(err, rc, "--servers: %s", msg);
    *bad_list = true;
  } else {
    scps_client_options o;
    scps_client_options_init(&o);
    o.servers = addr;
    o.n_servers = n_servers;
    o.connect_timeout_ms = timeout_ms;
    o.security = *security;
    rc = scps_client_create(&o, c, err);
  }
  free(list); /* the client keeps copies of the addresses */
  return rc;
}

int scps__admin_rows(int argc, char **argv) {
  static const struct option opts[] = {{"servers", required_argument, 0, 's'},
                                       {"table", required_argument, 0, 't'},
                                       {"ids", required_argument, 0, 'i'},
                                       {"json", no_argument, 0, 'j'},
                                       {"deadline-ms", required_argument, 0, 'd'},
                                       SCPS_SECURITY_LONG_OPTIONS,
                                       {0, 0, 0, 0}};
  const char *servers = NULL, *table = NULL, *id_list = NULL;
  /* Rows are admin-only where the servers check roles: without these flags
   * a protected cluster could not be read at all. */
  scps_security_flags sec = {0};
  bool json = false;
  long deadline_ms = 10000;
  scps_error err;
  int ch;
  while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (ch) {
    case 's': servers = optarg; break;
    case 't': table = optarg; break;
    case 'i': id_list = optarg; break;
    case 'j': json = true; break;
    case 'd':
      if (scps__parse_long("--deadline-ms", optarg, 1, 86400000, &deadline_ms, &err)) {
        scps__security_flags_free(&sec);
        return bad("%s", err.msg);
      }
      break;
    default: {
      int rc = scps__security_flags_parse(&sec, "scps-admin", ch, optarg, &err);
      if (rc <= 0) {
        scps__security_flags_free(&sec);
        if (rc < 0) return bad("%s", err.msg);
        fputs(scps_admin_rows_usage, stderr);
        return 2;
      }
    }
    }
  }
  int status = optind < argc ? bad("unexpected argument '%s'", argv[optind])
                             : rows_run(servers, table, id_list, json, deadline_ms, &sec.security);
  scps__security_flags_free(&sec);
  return status;
}

