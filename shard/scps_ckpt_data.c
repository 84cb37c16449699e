#include "scps_ckpt_data.h"

#include <stdlib.h>
#include <string.h>

const scps_ckpt_datafile *scps__ckpt_data_file_of(const scps_checkpoint *c, int stack, int32_t sc) {
  return &c->files[(size_t)stack * (size_t)c->num_sc + (size_t)sc];
}

int scps__ckpt_data_open(const scps_checkpoint *c, int stack, int32_t sc, scps_ckpt_file_reader *r,
                        scps_error *err) {
  const scps_ckpt_datafile *f = scps__ckpt_data_file_of(c, stack, sc);
  return scps__ckpt_file_open(r, c->dir, f->name, f->bytes, f->xxh64, err);
}

int scps__ckpt_data_stream(const scps_checkpoint *c, int stack, int32_t sc, float *buf, size_t buf_rows,
                          scps_ckpt_data_rows_fn visit, void *ctx, scps_error *err) {
  const scps_ckpt_stack *st = &c->stacks[stack];
  scps_ckpt_file_reader r;
  int rc = scps__ckpt_data_open(c, stack, sc, &r, err);
  if (rc) return rc;
  /* An encoded region's rows (never more bytes than as floats) are read
   * into the buffer's end and decoded forward: row k's floats end before
   * row k + 1's codes begin, and each row passes through one row aside. */
  const size_t dim = (size_t)st->dim;
  float *row_buf = malloc(dim * sizeof(float));
  if (!row_buf) rc = scps_error_set(err, SCPS_ENOMEM, "checkpoint '%s': out of memory", c->dir);
  for (int region = 0; region <= st->num_slots && !rc; region++) {
    scps_storage_codec codec;
    scps__storage_codec_init(&codec, &st->formats[region], dim);
    for (int64_t row = 0; row < st->rows_per_sc && !rc; row += (int64_t)buf_rows) {
      const size_t n = (size_t)(st->rows_per_sc - row < (int64_t)buf_rows ? st->rows_per_sc - row : (int64_t)buf_rows);
      uint8_t *codes = (uint8_t *)(buf + n * dim) - n * codec.row_bytes;
      rc = scps__ckpt_file_next(&r, codes, n * codec.row_bytes, err);
      for (size_t k = 0; !rc && codec.f.kind != SCPS_STORAGE_F32 && k < n; k++) {
        scps__storage_decode_row(&codec, codes + k * codec.row_bytes, row_buf);
        memcpy(buf + k * dim, row_buf, dim * sizeof(float));
      }
      if (!rc && visit) rc = visit(ctx, c, stack, sc, region, row, (int64_t)n, buf, err);
    }
  }
  free(row_buf);
  return scps__ckpt_file_close(&r, rc, err);
}

size_t scps__ckpt_data_buffer_rows(const scps_ckpt_stack *st) {
  size_t row_bytes = (size_t)st->dim * sizeof(float);
  size_t n = SCPS_CKPT_FILE_CHUNK / row_bytes;
  return n ? n : 1;
}

int scps__ckpt_data_stream_one(const scps_checkpoint *c, int i, scps_ckpt_data_rows_fn visit, void *ctx,
                              scps_error *err) {
  const int stack = i / c->num_sc;
  const int32_t sc = i % c->num_sc;
  size_t buf_rows = scps__ckpt_data_buffer_rows(&c->stacks[stack]);
  float *buf = malloc(buf_rows * (size_t)c->stacks[stack].dim * sizeof(float));
  if (!buf) return scps_error_set(err, SCPS_ENOMEM, "checkpoint '%s': out of memory", c->dir);
  int rc = scps__ckpt_data_stream(c, stack, sc, buf, buf_rows, visit, ctx, err);
  free(buf);
  return rc;
}

void scps__ckpt_data_ids(const scps_checkpoint *c, int stack, int32_t sc, int64_t first, int64_t n, const float *data,
                        scps_ckpt_data_id_fn visit, void *ctx) {
  const scps_ckpt_stack *st = &c->stacks[stack];
  const int32_t N = c->num_sc;
  for (int i = 0; i < st->n_tables; i++) {
    const scps_ckpt_table *t = &st->tables[i];
    const int64_t vocab = c->specs->tables[t->spec].vocabulary_size;
    int64_t lo = first > t->row_offset ? first : t->row_offset;
    int64_t hi = first + n < t->row_offset + t->rows ? first + n : t->row_offset + t->rows;
    int64_t residue = ((int64_t)sc - t->rotation) % N;
    if (residue < 0) residue += N;
    for (int64_t r = lo; r < hi; r++) {
      int64_t id = (r - t->row_offset) * N + residue;
      if (id >= vocab) break;
      visit(ctx, t, id, data + (size_t)(r - first) * (size_t)st->dim);
    }
  }
}
