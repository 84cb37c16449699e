/* scps_pyref: libscps driven from C, the reference the Python package's
 * results must equal bit for bit (tests/python/test_numerics.py). Only the
 * public API (scps_client.h), linked against libscps.so as the extension is.
 *
 *   scps_pyref SERVERS WIRE lookup IN OUT
 *   scps_pyref SERVERS WIRE push IN GRADS STEP
 *
 * IN: int64 n_features, then per feature (the servers' order) int64 batch,
 * n_ids, has_weights; int64 offsets[batch + 1]; int64 ids[n_ids]; float
 * weights[n_ids] if has_weights. OUT (written) and GRADS (read): per
 * feature batch x width floats. WIRE: float32 or bfloat16. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scps_client.h"

static int die(const char *what, const scps_error *err) {
  fprintf(stderr, "scps_pyref: %s: %s\n", what, err ? err->msg : "");
  return 1;
}

static void *read_n(FILE *f, size_t size, size_t n) {
  void *p = malloc(size * (n ? n : 1));
  if (!p || fread(p, size, n, f) != n) {
    free(p);
    return NULL;
  }
  return p;
}

int main(int argc, char **argv) {
  if (argc < 6 || (strcmp(argv[3], "lookup") && strcmp(argv[3], "push")) || (!strcmp(argv[3], "push") && argc != 7)) {
    fprintf(stderr, "usage: scps_pyref SERVERS WIRE lookup IN OUT | scps_pyref SERVERS WIRE push IN GRADS STEP\n");
    return 2;
  }
  bool push = !strcmp(argv[3], "push");
  scps_error err;
  const char *servers[16];
  int n_servers;
  scps_client_options o;
  scps_client_options_init(&o);
  if (scps_address_list_split(argv[1], servers, 16, &n_servers, &err)) return die("servers", &err);
  if (scps_client_options_set_wire_format(&o, argv[2], NULL)) return die("wire format", NULL);
  o.servers = servers;
  o.n_servers = n_servers;
  scps_client *c;
  scps_batch *b;
  if (scps_client_create(&o, &c, &err) || scps_batch_create(c, &b, &err)) return die("connect", &err);
  FILE *in = fopen(argv[4], "rb");
  int64_t nf = 0;
  if (!in || fread(&nf, 8, 1, in) != 1 || nf != scps_client_n_features(c)) return die("IN: feature count", NULL);
  scps_feature_input *inputs = calloc((size_t)nf, sizeof *inputs);
  float **arrays = calloc((size_t)nf, sizeof *arrays);
  for (int f = 0; f < nf; f++) {
    int64_t h[3];
    if (fread(h, 8, 3, in) != 3) return die("IN: header", NULL);
    inputs[f].form = SCPS_INPUT_RAGGED;
    inputs[f].batch_size = h[0];
    inputs[f].n_ids = (size_t)h[1];
    inputs[f].row_offsets = read_n(in, 8, (size_t)h[0] + 1);
    inputs[f].ids = read_n(in, 8, (size_t)h[1]);
    if (h[2]) inputs[f].weights = read_n(in, 4, (size_t)h[1]);
    if (!inputs[f].row_offsets || !inputs[f].ids || (h[2] && !inputs[f].weights)) return die("IN: arrays", NULL);
    arrays[f] = calloc((size_t)h[0] * (size_t)scps_client_feature_width(c, f), sizeof(float));
  }
  fclose(in);
  if (scps_client_prepare(c, inputs, b, &err)) return die("prepare", &err);
  FILE *io = fopen(argv[5], push ? "rb" : "wb");
  if (!io) return die(argv[5], NULL);
  for (int f = 0; push && f < nf; f++) {
    size_t n = (size_t)scps_client_feature_batch_size(c, f) * (size_t)scps_client_feature_width(c, f);
    if (fread(arrays[f], sizeof(float), n, io) != n) return die("GRADS: short", NULL);
  }
  if (push) {
    if (scps_client_apply_gradients(c, b, (const float *const *)arrays, atoll(argv[6]), -1, 30000, &err))
      return die("push", &err);
  } else {
    if (scps_client_lookup(c, b, arrays, 30000, &err)) return die("lookup", &err);
    for (int f = 0; f < nf; f++) {
      size_t n = (size_t)scps_client_feature_batch_size(c, f) * (size_t)scps_client_feature_width(c, f);
      if (fwrite(arrays[f], sizeof(float), n, io) != n) return die("OUT: write", NULL);
    }
  }
  if (fclose(io)) return die("close", NULL);
  for (int f = 0; f < nf; f++) {
    free((void *)inputs[f].row_offsets);
    free((void *)inputs[f].ids);
    free((void *)inputs[f].weights);
    free(arrays[f]);
  }
  free(inputs);
  free(arrays);
  scps_batch_destroy(b);
  scps_client_destroy(c);
  return 0;
}
