/* A trainer outside the scps tree, built from the installed prefix only
 * (`cc prog.c $(pkg-config --cflags --libs scps)`, or find_package(scps)):
 *   prog --version              the header's and the library's versions agree
 *   prog HOST:PORT[,HOST:PORT]  against servers of tests/install/oot.sh's
 *                               config: looks a batch up, pushes SGD gradients
 *                               at the step after the servers' last, looks it
 *                               up again and checks every number against a
 *                               double-precision computation here. */
#include <scps/scps_client.h>
#include <scps/scps_version.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What oot.sh's config declares: per feature its table's initial value
 * (constant initializer), vocabulary, valency; sum combiners, SGD. */
#define N_FEATURES 2
static const char *const names[N_FEATURES] = {"fa", "fb"};
static const int widths[N_FEATURES] = {4, 8};
static const int valency[N_FEATURES] = {3, 2};
static const int vocab[N_FEATURES] = {64, 32};
static const double init[N_FEATURES] = {0.25, -0.5};
#define BATCH 8
/* Powers of two and multiples of 1/8: every float below is exact, so the
 * library's result must equal the double computation bit for bit. */
#define LEARNING_RATE 0.25

static int id_of(int f, int s, int j) { return f == 0 ? (s + 5 * j) % vocab[0] : (s + 3 * j) % vocab[1]; }
static float grad_of(int f, int s, int k) { return (float)((s * 7 + k * 3 + f) % 9 - 4) / 8.0f; }

static int fail(const char *what, int rc, const scps_error *err) {
  fprintf(stderr, "prog: %s: %s (%s)\n", what, err ? err->msg : "", scps_strerror(rc));
  return 1;
}

int main(int argc, char **argv) {
  if (argc == 2 && !strcmp(argv[1], "--version")) {
    printf("prog built with scps %s, running libscps %s\n", SCPS_VERSION_STRING, scps_version());
    return strcmp(SCPS_VERSION_STRING, scps_version()) != 0;
  }
  if (argc != 2) {
    fprintf(stderr, "usage: prog --version | prog HOST:PORT[,HOST:PORT...]\n");
    return 2;
  }
  scps_error err;
  const char *servers[8];
  int n_servers = 0, rc;
  if ((rc = scps_address_list_split(argv[1], servers, 8, &n_servers, &err))) return fail("--servers", rc, &err);

  scps_client_options o;
  scps_client_options_init(&o);
  o.servers = servers;
  o.n_servers = n_servers;
  o.connect_timeout_ms = 30000;
  scps_client *c = NULL;
  if ((rc = scps_client_create(&o, &c, &err))) return fail("scps_client_create", rc, &err);

  int bad = 0;
  if (scps_client_n_features(c) != N_FEATURES || scps_client_batch_size(c) != BATCH) {
    fprintf(stderr, "prog: %d features, batch %d; want %d, %d\n", scps_client_n_features(c),
            scps_client_batch_size(c), N_FEATURES, BATCH);
    bad = 1;
  }
  for (int f = 0; !bad && f < N_FEATURES; f++) {
    const char *name = scps_client_feature_name(c, f);
    if (!name || strcmp(name, names[f]) || scps_client_feature_width(c, f) != widths[f]) {
      fprintf(stderr, "prog: feature %d is '%s' of width %d; want '%s' of %d\n", f, name ? name : "(null)",
              scps_client_feature_width(c, f), names[f], widths[f]);
      bad = 1;
    }
  }
  if (bad) {
    scps_client_destroy(c);
    return 1;
  }

  int64_t ids[N_FEATURES][BATCH * 3];
  float before[N_FEATURES][BATCH * 8], after[N_FEATURES][BATCH * 8], grads[N_FEATURES][BATCH * 8];
  scps_feature_input in[N_FEATURES];
  float *acts_before[N_FEATURES], *acts_after[N_FEATURES];
  const float *grad_ptrs[N_FEATURES];
  memset(in, 0, sizeof in);
  for (int f = 0; f < N_FEATURES; f++) {
    for (int s = 0; s < BATCH; s++) {
      for (int j = 0; j < valency[f]; j++) ids[f][s * valency[f] + j] = id_of(f, s, j);
      for (int k = 0; k < widths[f]; k++) grads[f][s * widths[f] + k] = grad_of(f, s, k);
    }
    in[f].form = SCPS_INPUT_DENSE;
    in[f].n_ids = (size_t)BATCH * (size_t)valency[f];
    in[f].ids = ids[f];
    in[f].valency = valency[f];
    in[f].batch_size = BATCH;
    acts_before[f] = before[f];
    acts_after[f] = after[f];
    grad_ptrs[f] = grads[f];
  }

  scps_batch *b = NULL;
  int64_t step = scps_client_step(c) + 1;
  if ((rc = scps_batch_create(c, &b, &err)) || (rc = scps_client_prepare(c, in, b, &err)) ||
      (rc = scps_client_lookup(c, b, acts_before, 10000, &err)) ||
      (rc = scps_client_apply_gradients(c, b, grad_ptrs, step, LEARNING_RATE, 10000, &err)) ||
      (rc = scps_client_lookup(c, b, acts_after, 10000, &err))) {
    fail("a training step", rc, &err);
    bad = 1;
  }

  /* Expected: a sample's activation is the sum of its ids' rows (on fresh
   * servers, holding no step yet, valency x the initial value); SGD moves
   * each row by -rate x the sum of the gradients of the samples that hold it. */
  int checked = 0;
  for (int f = 0; !bad && f < N_FEATURES; f++) {
    for (int s = 0; s < BATCH; s++) {
      for (int k = 0; k < widths[f]; k++) {
        double got_before = before[f][s * widths[f] + k], got_after = after[f][s * widths[f] + k];
        double want_before = step == 0 ? valency[f] * init[f] : got_before, want_after = got_before;
        for (int j = 0; j < valency[f]; j++)
          for (int s2 = 0; s2 < BATCH; s2++)
            for (int j2 = 0; j2 < valency[f]; j2++)
              if (id_of(f, s2, j2) == id_of(f, s, j)) want_after -= LEARNING_RATE * grad_of(f, s2, k);
        if (got_before != want_before || got_after != want_after) {
          fprintf(stderr, "prog: feature %s sample %d column %d: %.9g then %.9g; want %.9g then %.9g\n",
                  names[f], s, k, got_before, got_after, want_before, want_after);
          bad = 1;
        }
        checked++;
      }
    }
  }
  scps_batch_destroy(b);
  scps_client_destroy(c);
  if (bad) return 1;
  printf("prog: libscps %s, %d servers, step %lld: %d activations before and after an SGD push as computed\n",
         scps_version(), n_servers, (long long)step, 2 * checked);
  return 0;
}
