/* scps_hbm: one simulated SparseCore's memory: a fixed-capacity arena from
 * which stacks take their rows and optimizer slots, with usage accounting. */
#ifndef SCPS_HBM_H
#define SCPS_HBM_H

#include <stddef.h>
#include <stdint.h>

#include "scps_error.h"

#define SCPS_HBM_ALIGN 64

/* The capacity is reserved as address space up front and backed by pages only
 * when touched, so a large configured capacity costs nothing until used. */
typedef struct scps_hbm {
  int32_t sc;        /* global SparseCore index, for messages */
  uint8_t *base;
  int64_t capacity;
  int64_t used;
} scps_hbm;

int scps__hbm_init(scps_hbm *h, int32_t sc, int64_t capacity, scps_error *err);
void scps__hbm_free(scps_hbm *h);

/* Bytes an allocation of n bytes consumes (n rounded up to SCPS_HBM_ALIGN). */
static inline int64_t scps__hbm_footprint(int64_t n) {
  return (n + SCPS_HBM_ALIGN - 1) / SCPS_HBM_ALIGN * SCPS_HBM_ALIGN;
}

/* Zero-filled, SCPS_HBM_ALIGN-aligned; SCPS_ENOSPC names the SparseCore, the
 * bytes asked for and the bytes free. what names the user for the message. */
int scps__hbm_alloc(scps_hbm *h, int64_t n, const char *what, void **out, scps_error *err);

static inline int64_t scps__hbm_free_bytes(const scps_hbm *h) { return h->capacity - h->used; }

#endif
