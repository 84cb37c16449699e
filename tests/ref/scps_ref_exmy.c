#include "scps_ref_exmy.h"

#include <math.h>
#include <stdlib.h>

int scps_ref_exmy_init(scps_ref_exmy *r, int x, int y, int bias, int scale) {
  r->x = x;
  r->y = y;
  r->bias = bias;
  r->scale = scale;
  r->n = 1u << (x + y);
  r->mag = malloc(r->n * sizeof *r->mag);
  if (!r->mag)
    return -1;
  for (uint32_t c = 0; c < r->n; c++) {
    double v;
    if (x == 0) {
      v = ldexp((double)c, -bias);
    } else {
      uint32_t e = c >> y, m = c & ((1u << y) - 1);
      v = e == 0 ? ldexp((double)m, 1 - bias - y) : ldexp(1.0 + ldexp((double)m, -y), (int)e - bias);
    }
    r->mag[c] = ldexp(v, scale);
  }
  return 0;
}

void scps_ref_exmy_free(scps_ref_exmy *r) {
  free(r->mag);
  r->mag = NULL;
}

double scps_ref_exmy_value(const scps_ref_exmy *r, uint32_t code) {
  double v = r->mag[code & (r->n - 1)];
  return code & r->n ? -v : v;
}

void scps_ref_exmy_bracket(const scps_ref_exmy *r, double v, uint32_t *lo, uint32_t *hi) {
  double a = fabs(v);
  if (a >= r->mag[r->n - 1]) {
    *lo = *hi = r->n - 1;
    return;
  }
  /* the largest code whose magnitude is at most a: mag[0] = 0 <= a */
  uint32_t l = 0, h = r->n - 1;
  while (h - l > 1) {
    uint32_t mid = l + (h - l) / 2;
    if (r->mag[mid] <= a)
      l = mid;
    else
      h = mid;
  }
  *lo = l;
  *hi = r->mag[l] == a ? l : l + 1;
}

uint32_t scps_ref_exmy_round(const scps_ref_exmy *r, double v) {
  uint32_t lo, hi, c;
  scps_ref_exmy_bracket(r, v, &lo, &hi);
  double a = fabs(v), mid = (r->mag[lo] + r->mag[hi]) / 2;
  if (a < mid)
    c = lo;
  else if (a > mid)
    c = hi;
  else
    c = lo % 2 == 0 ? lo : hi;
  return signbit(v) ? c | r->n : c;
}
