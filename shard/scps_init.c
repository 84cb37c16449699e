#include "scps_init.h"

#include <math.h>

/* splitmix64's finalizer: a bijective mixer, good enough to turn a counter
 * (seed, id, column, draw) into independent-looking 64-bit values. */
static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static uint64_t counter(uint64_t seed, int64_t id, int32_t col, uint32_t draw) {
  uint64_t z = mix64(seed + 0x9e3779b97f4a7c15ull);
  z = mix64(z ^ ((uint64_t)id * 0xd1b54a32d192ed03ull));
  return mix64(z ^ ((uint64_t)(uint32_t)col << 32 | draw));
}

/* Uniform in (0, 1), never 0, so log() below is safe. */
static double unit(uint64_t bits) { return ((double)(bits >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

static double normal(uint64_t seed, int64_t id, int32_t col, uint32_t draw) {
  double u1 = unit(counter(seed, id, col, 2 * draw));
  double u2 = unit(counter(seed, id, col, 2 * draw + 1));
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

uint64_t scps__init_seed(const scps_table_spec *t) {
  if (t->initializer.seed) return t->initializer.seed;
  uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a of the name */
  for (const char *p = t->name; *p; p++) h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
  return h;
}

void scps__init_row(const scps_initializer_spec *in, uint64_t seed, int64_t id, int32_t dim,
                   float *row) {
  for (int32_t c = 0; c < dim; c++) {
    double v = 0;
    switch (in->type) {
    case SCPS_INIT_ZEROS: v = 0; break;
    case SCPS_INIT_CONSTANT: v = in->value; break;
    case SCPS_INIT_UNIFORM: v = in->scale * (2.0 * unit(counter(seed, id, c, 0)) - 1.0); break;
    case SCPS_INIT_NORMAL: v = in->stddev * normal(seed, id, c, 0); break;
    case SCPS_INIT_TRUNCATED_NORMAL: {
      /* Redraw outside two standard deviations, as TensorFlow/JAX do. */
      uint32_t draw = 0;
      double z;
      do z = normal(seed, id, c, draw++);
      while (fabs(z) > 2.0);
      v = in->stddev * z;
      break;
    }
    }
    row[c] = (float)v;
  }
}
