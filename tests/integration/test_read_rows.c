/* scps_client_read_rows against a real 2 x 2 cluster whose message limit
 * (--max-message-mb 1) makes it read in pieces: every id of a table, in a
 * shuffled order with repeats, rows and slots bit for bit what in-process
 * engines of the same layout hold (the initializers are topology-free);
 * an unknown table and an id outside the vocabulary refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scps_client_engine.h"
#include "scps_engine.h"
#include "scps_it.h"
#include "scps_test.h"

#define VOCAB 20000
#define DIM 64
#define N_IDS (VOCAB + 3000)

static const char config_json[] =
    "{\"name\": \"read_rows\", \"batch_size\": 8, \"ids\": {\"distribution\": \"uniform\", \"seed\": 1},\n"
    " \"tables\": [{\"name\": \"big\", \"vocabulary_size\": 20000, \"embedding_dim\": 64, \"combiner\": \"sum\",\n"
    "   \"optimizer\": {\"type\": \"ftrl\", \"learning_rate\": 0.1, \"initial_accumulator\": 0.25,\n"
    "                 \"initial_linear\": -0.5},\n"
    "   \"initializer\": {\"type\": \"truncated_normal\", \"stddev\": 0.5}},\n"
    "  {\"name\": \"small\", \"vocabulary_size\": 37, \"embedding_dim\": 5, \"combiner\": \"sum\",\n"
    "   \"optimizer\": {\"type\": \"sgd\", \"learning_rate\": 0.1}, \"initializer\": {\"type\": \"uniform\", \"scale\": 1}}],\n"
    " \"features\": [{\"name\": \"f\", \"table\": \"big\", \"valency\": 1}, {\"name\": \"g\", \"table\": \"small\", \"valency\": 1}]}\n";

int main(void) {
  scps_it_cluster cl;
  scps_error err;
  scps_error_clear(&err);
  scps_client *c = NULL;
  scps_engine *e[2] = {NULL, NULL};
  int64_t *ids = malloc(sizeof *ids * N_IDS);
  float *rows = malloc(sizeof *rows * N_IDS * DIM), *slots = malloc(sizeof *slots * N_IDS * DIM * 2);
  float want[DIM], want_slots[2 * DIM];
  CHECK(scps_it_init(&cl, config_json, 2, 2) == 0);
  cl.extra[0] = "--max-message-mb";
  cl.extra[1] = "1";
  if (!ids || !rows || !slots || scps_it_start(&cl)) {
    CHECK(!"the cluster did not start");
    goto out;
  }
  scps_client_options o;
  scps_client_options_init(&o);
  o.servers = cl.addr_list;
  o.n_servers = 2;
  CHECK_OK(scps_client_create(&o, &c, &err), &err);
  if (!c) goto out;
  const scps_layout *l = scps__client_layout(c);
  for (int p = 0; p < 2; p++) CHECK_OK(scps__engine_create(l, p, &e[p], &err), &err);
  if (!e[0] || !e[1]) goto out;
  /* Every id once, shuffled, then 3000 repeats. */
  uint64_t x = 99;
  for (int64_t i = 0; i < VOCAB; i++) ids[i] = i;
  for (int64_t i = VOCAB - 1; i > 0; i--) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    int64_t j = (int64_t)((x >> 33) % (uint64_t)(i + 1)), t = ids[i];
    ids[i] = ids[j];
    ids[j] = t;
  }
  for (int64_t i = VOCAB; i < N_IDS; i++) ids[i] = ids[i - VOCAB] / 2;
  CHECK_OK(scps_client_read_rows(c, "big", ids, N_IDS, rows, slots, 30000, &err), &err);
  const int t = scps__find_table(l->table_specs, l->n_tables, "big");
  int wrong = 0;
  for (int64_t i = 0; i < N_IDS && t >= 0; i++) {
    int p = scps__layout_process_of_sc(l, scps__layout_sc_of(l, t, ids[i]));
    if (scps__engine_read_row(e[p], t, ids[i], want, want_slots, &err) ||
        memcmp(want, rows + i * DIM, sizeof want) || memcmp(want_slots, slots + i * 2 * DIM, sizeof want_slots))
      wrong++;
  }
  CHECKF(wrong == 0, "%d of %d ids read differ from the in-process engines", wrong, N_IDS);
  CHECK(slots[DIM] == -0.5f && slots[0] == 0.25f); /* linear and accumulator of the first id */
  /* Rows only, of a table with no slots. */
  int64_t few[3] = {36, 0, 36};
  float small[3 * 5];
  CHECK_OK(scps_client_read_rows(c, "small", few, 3, small, NULL, 30000, &err), &err);
  CHECK(!memcmp(small, small + 10, 5 * sizeof(float)) && memcmp(small, small + 5, 5 * sizeof(float)));
  int rc = scps_client_read_rows(c, "nope", few, 3, small, NULL, 30000, &err);
  CHECKF(rc == SCPS_ENOENT && strstr(err.msg, "'nope'"), "%d %s", rc, err.msg);
  few[1] = 37;
  rc = scps_client_read_rows(c, "small", few, 3, small, NULL, 30000, &err);
  CHECKF(rc == SCPS_EINVAL && strstr(err.msg, "ids[1] = 37") && strstr(err.msg, "[0, 37)"), "%d %s", rc, err.msg);
  printf("test_read_rows: %d ids of 2 x 64 slots and rows read in pieces under a 1 MiB limit\n", N_IDS);
out:
  scps__engine_destroy(e[0]);
  scps__engine_destroy(e[1]);
  scps_client_destroy(c);
  scps_it_stop(&cl);
  free(ids);
  free(rows);
  free(slots);
  return scps_test_finish("test_read_rows");
}
