#include "scps_prep_check.h"

#include <stdio.h>
#include <string.h>

/* Sample holding position i, for messages: the last r with offs[r] <= i. */
static int64_t sample_of_position(const int64_t *offs, int64_t batch, size_t i) {
  int64_t lo = 0, hi = batch;
  while (hi - lo > 1) {
    int64_t mid = lo + (hi - lo) / 2;
    if (offs[mid] <= (int64_t)i)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

int scps__prep_check_shape(const scps_prep *p, int f, const scps_feature_input *in, prep_feature *pf,
                          scps_error *err) {
  const char *name = p->layout->feature_specs[f].name;
  int64_t b = pf->batch;
  size_t n = in->n_ids;
  if (n > 0 && !in->ids)
    return scps_error_set(err, SCPS_EINVAL, "feature '%s': ids is NULL with n_ids %zu", name, n);
  if (n > UINT32_MAX)
    return scps_error_set(err, SCPS_EINVAL, "feature '%s': n_ids %zu exceeds 2^32-1", name, n);
  if (in->form != SCPS_INPUT_SPARSE && in->batch_size != 0 && in->batch_size != b)
    return scps_error_set(err, SCPS_EINVAL,
                          "feature '%s': batch_size %lld does not match the FeatureSpec "
                          "batch_size %lld",
                          name, (long long)in->batch_size, (long long)b);
  int64_t *o = pf->offs_scratch;
  switch (in->form) {
  case SCPS_INPUT_RAGGED:
    if (in->row_offsets) {
      const int64_t *ro = in->row_offsets;
      if (ro[0] != 0)
        return scps_error_set(err, SCPS_EINVAL, "feature '%s': row_offsets[0] = %lld, expected 0",
                              name, (long long)ro[0]);
      for (int64_t r = 1; r <= b; r++)
        if (ro[r] < ro[r - 1])
          return scps_error_set(err, SCPS_EINVAL,
                                "feature '%s': row_offsets[%lld] = %lld is below row_offsets[%lld] "
                                "= %lld (offsets must be monotonic)",
                                name, (long long)r, (long long)ro[r], (long long)(r - 1),
                                (long long)ro[r - 1]);
      if (ro[b] != (int64_t)n)
        return scps_error_set(err, SCPS_EINVAL,
                              "feature '%s': row_offsets[%lld] = %lld does not match n_ids %zu",
                              name, (long long)b, (long long)ro[b], n);
      pf->offs = ro;
      return 0;
    }
    if (in->row_lengths) {
      o[0] = 0;
      for (int64_t r = 0; r < b; r++) {
        int32_t len = in->row_lengths[r];
        if (len < 0)
          return scps_error_set(err, SCPS_EINVAL, "feature '%s': row_lengths[%lld] = %d is negative",
                                name, (long long)r, len);
        o[r + 1] = o[r] + len;
      }
      if (o[b] != (int64_t)n)
        return scps_error_set(err, SCPS_EINVAL,
                              "feature '%s': row_lengths sum to %lld, n_ids is %zu", name,
                              (long long)o[b], n);
      pf->offs = o;
      return 0;
    }
    return scps_error_set(err, SCPS_EINVAL,
                          "feature '%s': ragged input needs row_offsets or row_lengths", name);
  case SCPS_INPUT_DENSE: {
    int32_t v = in->valency;
    if (v < 0 || (pf->spec_valency > 0 && v != pf->spec_valency))
      return scps_error_set(err, SCPS_EINVAL,
                            "feature '%s': dense valency %d does not match the FeatureSpec "
                            "valency %d",
                            name, v, pf->spec_valency);
    if ((int64_t)n != b * v)
      return scps_error_set(err, SCPS_EINVAL,
                            "feature '%s': dense input has n_ids %zu, expected batch_size %lld x "
                            "valency %d = %lld",
                            name, n, (long long)b, v, (long long)(b * v));
    for (int64_t r = 0; r <= b; r++)
      o[r] = r * v;
    pf->offs = o;
    return 0;
  }
  case SCPS_INPUT_SPARSE: {
    if (in->dense_shape[0] != b)
      return scps_error_set(err, SCPS_EINVAL,
                            "feature '%s': dense_shape[0] = %lld does not match the FeatureSpec "
                            "batch_size %lld",
                            name, (long long)in->dense_shape[0], (long long)b);
    int64_t width = in->dense_shape[1];
    if (width < 0)
      return scps_error_set(err, SCPS_EINVAL, "feature '%s': dense_shape[1] = %lld is negative",
                            name, (long long)width);
    if (n > 0 && !in->indices)
      return scps_error_set(err, SCPS_EINVAL, "feature '%s': indices is NULL with n_ids %zu",
                            name, n);
    memset(o, 0, (size_t)(b + 1) * sizeof *o);
    int64_t prev = 0;
    for (size_t i = 0; i < n; i++) {
      int64_t s = in->indices[2 * i], c = in->indices[2 * i + 1];
      if (s < 0 || s >= b)
        return scps_error_set(err, SCPS_ERANGE,
                              "feature '%s': indices[%zu] sample %lld out of range [0, %lld)", name,
                              i, (long long)s, (long long)b);
      if (s < prev)
        return scps_error_set(err, SCPS_EINVAL,
                              "feature '%s': indices[%zu] sample %lld follows sample %lld "
                              "(indices must be sorted by sample)",
                              name, i, (long long)s, (long long)prev);
      if (c < 0 || c >= width)
        return scps_error_set(err, SCPS_ERANGE,
                              "feature '%s': indices[%zu] position %lld out of range [0, %lld)",
                              name, i, (long long)c, (long long)width);
      o[s + 1]++;
      prev = s;
    }
    for (int64_t r = 0; r < b; r++)
      o[r + 1] += o[r];
    pf->offs = o;
    return 0;
  }
  }
  return scps_error_set(err, SCPS_EINVAL, "feature '%s': unknown input form %d", name,
                        (int)in->form);
}

static bool weight_ok(float w, bool positive) {
  uint32_t bits;
  memcpy(&bits, &w, sizeof bits);
  bool finite = (bits & UINT32_C(0x7f800000)) != UINT32_C(0x7f800000);
  return finite && (!positive || w > 0.0f);
}

int scps__prep_check_bad_id(const scps_prep *p, int f, const scps_feature_input *in, const prep_feature *pf,
                           scps_error *err) {
  for (size_t i = 0; i < in->n_ids; i++)
    if ((uint64_t)in->ids[i] >= pf->vocab)
      return scps_error_set(err, SCPS_ERANGE,
                            "feature '%s': id %lld at position %zu (sample %lld) out of range "
                            "[0, %llu)",
                            p->layout->feature_specs[f].name, (long long)in->ids[i], i,
                            (long long)sample_of_position(pf->offs, pf->batch, i),
                            (unsigned long long)pf->vocab);
  return scps_error_set(err, SCPS_EINTERNAL, "feature '%s': bad id not found again",
                        p->layout->feature_specs[f].name);
}

int scps__prep_check_weights(const scps_prep *p, int f, const scps_feature_input *in, const prep_feature *pf,
                            scps_error *err) {
  const char *name = p->layout->feature_specs[f].name;
  size_t n = in->n_ids;
  const float *w = in->weights;
  if (!w)
    return 0;
  bool positive = pf->combiner != SCPS_COMBINER_SUM;
  bool bad = false;
  for (size_t i = 0; i < n; i++)
    bad |= !weight_ok(w[i], positive);
  if (!bad)
    return 0;
  for (size_t i = 0; i < n; i++) {
    if (weight_ok(w[i], positive))
      continue;
    long long s = (long long)sample_of_position(pf->offs, pf->batch, i);
    if (!weight_ok(w[i], false))
      return scps_error_set(err, SCPS_EINVAL,
                            "feature '%s': weight %g at position %zu (sample %lld) is not finite",
                            name, (double)w[i], i, s);
    return scps_error_set(err, SCPS_EINVAL,
                          "feature '%s': weight %g at position %zu (sample %lld) must be > 0 for "
                          "combiner %s",
                          name, (double)w[i], i, s, scps__combiner_name(pf->combiner));
  }
  return 0;
}

int scps__prep_check_gains(const scps_prep *p, scps_error *err) {
  for (int s = 0; s < p->n_stacks; s++) {
    const prep_stack *st = &p->stacks[s];
    for (int32_t d = 0; d < p->n; d++) {
      size_t i = st->bad_gain[d];
      if (i == SIZE_MAX) continue;
      const scps_coo *c = &st->coo[d];
      return scps_error_set(err, SCPS_EINVAL,
                            "stack '%s': sample %u (of the stack's samples), local row %u of SparseCore %d: the weights "
                            "of its repeated id sum to %g, not finite in float32",
                            p->layout->stacks[s].name, c->samples[i], c->rows[i], (int)d, (double)c->gains[i]);
    }
  }
  return 0;
}

/* SCPS_ELIMIT for partition src -> dst of stack s holding count ids (unique
 * ones when unique): names the limit and the spec key that sets it (per
 * table, as workload files and scps_table_spec spell it), a value that
 * would have admitted this batch, and the policy that drops instead. */
static int limit_error(const scps_prep *p, int s, size_t src, size_t dst, int64_t count, bool unique,
                       scps_error *err) {
  const scps_layout *l = p->layout;
  const scps_stack_layout *sl = &l->stacks[s];
  const prep_stack *st = &p->stacks[s];
  const char *key = unique ? "max_unique_ids_per_partition" : "max_ids_per_partition";
  char where[SCPS_NAME_MAX + 160];
  if (sl->n_tables == 1)
    snprintf(where, sizeof where, "tables[%d].%s (table '%s') to %lld or more", sl->tables[0], key,
             l->table_specs[sl->tables[0]].name, (long long)count);
  else
    snprintf(where, sizeof where, "%s of the stack's %d tables (tables[%d].%s, ...) to sum to %lld or more", key,
             sl->n_tables, sl->tables[0], key, (long long)count);
  return scps_error_set(err, SCPS_ELIMIT,
                        "stack '%s': partition src %zu -> dst %zu has %lld %s, above %s %d: set %s, or "
                        "drop the ids over the limits instead (policy SCPS_LIMIT_DROP: "
                        "scps_client_options.policy, scps-trainer --policy drop)",
                        sl->name, src, dst, (long long)count, unique ? "unique ids" : "ids", key,
                        unique ? st->run_max_unique : st->run_max_ids, where);
}

int scps__prep_check_limits(const scps_prep *p, int s, scps_error *err) {
  const prep_stack *st = &p->stacks[s];
  size_t nsc = (size_t)p->n;
  for (size_t src = 0; src < nsc; src++)
    for (size_t d = 0; d < nsc; d++) {
      int64_t a = st->part_ids[src * nsc + d], u = st->part_unique[src * nsc + d];
      if (a > st->run_max_ids || u > st->run_max_unique)
        return limit_error(p, s, src, d, a > st->run_max_ids ? a : u, a <= st->run_max_ids, err);
    }
  return 0;
}
