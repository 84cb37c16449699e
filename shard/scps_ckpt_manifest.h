/* scps_ckpt_manifest: a checkpoint's manifests (what each process wrote and
 * where every row sits) and the names of step directories and their files. */
#ifndef SCPS_CKPT_MANIFEST_H
#define SCPS_CKPT_MANIFEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "scps_ckpt_file.h"
#include "scps_error.h"
#include "scps_jsonw.h"
#include "scps_layout.h"
#include "scps_spec.h"
#include "scps_workload.h"

#define SCPS_CHECKPOINT_FORMAT 1
#define SCPS_CHECKPOINT_FINGERPRINT_BYTES 32

/* Step directories are "step-<step, 12 to 18 digits>", manifests
 * "manifest.p<process>.json". */
#define SCPS_CKPT_STEP_PREFIX "step-"
#define SCPS_CKPT_MANIFEST_PREFIX "manifest.p"
/* The manifest member naming the cluster that wrote it (64 hex digits). */
#define SCPS_CKPT_FINGERPRINT_KEY "config_fingerprint"

/* Limits in force of one stack, by stack name (scps__prep_get_limits). */
typedef struct scps_checkpoint_limits {
  char stack[SCPS_STACK_NAME_MAX];
  int32_t max_ids_per_partition;
  int32_t max_unique_ids_per_partition;
} scps_checkpoint_limits;

/* ---- the checkpoint's own description of where rows live ---- */

typedef struct scps_ckpt_table {
  char name[SCPS_NAME_MAX];
  int spec;            /* index into the specs' tables */
  int64_t row_offset;  /* first row of the table in each shard of its stack */
  int64_t rows;        /* rows per shard = padded vocabulary / N */
  int32_t rotation;
} scps_ckpt_table;

typedef struct scps_ckpt_stack {
  char name[SCPS_STACK_NAME_MAX];
  int32_t dim;
  int64_t rows_per_sc;
  int32_t num_slots;
  /* The storage format of the rows (0) and of each slot (1 + k) in the
   * data files: the formats its tables declare in the specs. */
  scps_storage_format formats[1 + SCPS_MAX_SLOTS];
  int32_t max_ids, max_unique_ids;
  int n_tables;
  scps_ckpt_table *tables;
} scps_ckpt_stack;

/* One data file a manifest lists. */
typedef struct scps_ckpt_datafile {
  char name[SCPS_CKPT_NAME_CAP];
  int stack;
  int32_t sc;
  int64_t bytes;
  uint64_t xxh64;
} scps_ckpt_datafile;

/* One parsed manifest. */
typedef struct scps_ckpt_manifest {
  int64_t format, step, process;
  bool has_fingerprint;
  uint8_t fingerprint[SCPS_CHECKPOINT_FINGERPRINT_BYTES];
  scps_topology topology;
  scps_workload *specs;
  int n_stacks;
  scps_ckpt_stack *stacks;
  int n_files;
  scps_ckpt_datafile *files;
} scps_ckpt_manifest;

/* Bytes of one region of a shard of the stack in a data file: array 0
 * (the rows) or 1 + k (slot k), rows_per_sc rows in the array's storage
 * format (scps__storage_row_bytes); and of all its regions, the file. */
int64_t scps__ckpt_manifest_region_bytes(const scps_ckpt_stack *s, int array);
int64_t scps__ckpt_manifest_shard_bytes(const scps_ckpt_stack *s);
/* The same for a stack of a layout, whose formats its specs declare. */
int64_t scps__ckpt_manifest_layout_region_bytes(const scps_stack_layout *st, int array);
int64_t scps__ckpt_manifest_layout_shard_bytes(const scps_stack_layout *st);
/* "<stack>.sc<global sc>.bin". */
void scps__ckpt_manifest_data_name(int stack, int32_t sc, char out[SCPS_CKPT_NAME_CAP]);
/* "manifest.p<process>.json". */
void scps__ckpt_manifest_name(int32_t process, char out[SCPS_CKPT_NAME_CAP]);
/* "<root>/step-<step, 12 digits>". */
void scps__ckpt_manifest_step_dir(const char *root, int64_t step, char *out, size_t cap);
/* Whether a directory entry's name is a step directory's, and its step. */
bool scps__ckpt_manifest_step_of(const char *name, int64_t *step);

/* Writes process `process`'s manifest text into w: format, step, the
 * fingerprint (when not NULL), topology, stacks with their limits (limits
 * NULL: the layout's), files, the specs (specs_json, a workload object), and
 * last the "checksum" member, sealed: the XXH64 of the whole text with that
 * member's 16 digits as zeros, so a flipped byte anywhere is caught before
 * the content is believed. */
int scps__ckpt_manifest_write(scps_jsonw *w, const scps_layout *l, int32_t process, int64_t step,
                             const scps_checkpoint_limits *limits, const scps_ckpt_datafile *files, int n_files,
                             const uint8_t *fingerprint, const char *specs_json, scps_error *err);

/* Reads manifest `process` of the step directory dir, or of dirfd (dir
 * opened, read through no symlink) when that is not AT_FDCWD: its checksum,
 * then its content, every size bounded before it is used. SCPS_ENOENT
 * (checkpoint incomplete), SCPS_ECORRUPT (checksum), SCPS_EPARSE (content),
 * naming the file. */
int scps__ckpt_manifest_load_at(int dirfd, const char *dir, int32_t process, scps_ckpt_manifest *mf,
                               scps_error *err);
int scps__ckpt_manifest_load(const char *dir, int32_t process, scps_ckpt_manifest *mf, scps_error *err);
/* Frees what load allocated; mf is zeroed (free again is harmless). */
void scps__ckpt_manifest_free(scps_ckpt_manifest *mf);

/* Manifest p (p > 0) of dir must describe the same checkpoint as manifest 0:
 * step, fingerprint, topology, specs and stacks (SCPS_EMISMATCH otherwise). */
int scps__ckpt_manifest_cross_check(const char *dir, const scps_ckpt_manifest *m0, const scps_ckpt_manifest *mp,
                                   int32_t p, scps_error *err);

/* The process indices of the manifests in the directory dfd, at most cap. */
int scps__ckpt_manifest_indices(int dfd, const char *dir, int32_t *out, int cap, int *n, scps_error *err);

#endif
