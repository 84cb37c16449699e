/* scps_ckpt_data: an opened checkpoint (its manifests merged: where every row
 * sits, which files hold it) and the reading of its data files, checksummed. */
#ifndef SCPS_CKPT_DATA_H
#define SCPS_CKPT_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "scps_ckpt_file.h"
#include "scps_ckpt_manifest.h"
#include "scps_error.h"

/* Data files are the shards' memory as it is: each array in its storage
 * format, float32 and bfloat16 in host order. */
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "scps checkpoint files are little-endian; this host is not"
#endif

typedef struct scps_checkpoint scps_checkpoint;

struct scps_checkpoint {
  char dir[SCPS_CKPT_PATH_CAP];
  int64_t step;
  bool has_fingerprint;
  uint8_t fingerprint[SCPS_CHECKPOINT_FINGERPRINT_BYTES];
  scps_topology topology;
  int32_t num_sc;
  scps_workload *specs;
  int n_stacks;
  scps_ckpt_stack *stacks;
  scps_ckpt_datafile *files; /* [n_stacks * num_sc], index stack * num_sc + sc */
  /* Opened by scps__checkpoint_open_part: only process part_process's
   * manifest was read, and only its files are in files. */
  bool is_part;
  int32_t part_process;
};

const scps_ckpt_datafile *scps__ckpt_data_file_of(const scps_checkpoint *c, int stack, int32_t sc);

/* Opens the data file of (stack, global SparseCore sc) for reading front to
 * back (scps__ckpt_file_next, then scps__ckpt_file_close checks its XXH64). */
int scps__ckpt_data_open(const scps_checkpoint *c, int stack, int32_t sc, scps_ckpt_file_reader *r,
                        scps_error *err);

/* Sees each buffer-full of whole rows of one region (0 = rows, 1 + k = slot
 * k) of a data file as it is streamed. */
typedef int (*scps_ckpt_data_rows_fn)(void *ctx, const scps_checkpoint *c, int stack, int32_t sc, int region,
                                      int64_t first_row, int64_t n_rows, const float *data, scps_error *err);

/* Rows of the stack that one streaming buffer holds (a read chunk's worth). */
size_t scps__ckpt_data_buffer_rows(const scps_ckpt_stack *st);
/* Streams the data file of (stack, sc) through buf (buf_rows rows), checking
 * its checksum; visit may be NULL (verification only). */
int scps__ckpt_data_stream(const scps_checkpoint *c, int stack, int32_t sc, float *buf, size_t buf_rows,
                          scps_ckpt_data_rows_fn visit, void *ctx, scps_error *err);
/* The same for file i of the checkpoint (stack-major) through a buffer of
 * its own. */
int scps__ckpt_data_stream_one(const scps_checkpoint *c, int i, scps_ckpt_data_rows_fn visit, void *ctx,
                              scps_error *err);

/* For every table of the stack whose rows intersect [first, first + n) of
 * SparseCore sc: the logical ids there, and where they sit in data. */
typedef void (*scps_ckpt_data_id_fn)(void *ctx, const scps_ckpt_table *t, int64_t id, const float *row);
void scps__ckpt_data_ids(const scps_checkpoint *c, int stack, int32_t sc, int64_t first, int64_t n, const float *data,
                        scps_ckpt_data_id_fn visit, void *ctx);

#endif
