/* scps_init: table initializers (zeros, constant, uniform, normal, truncated
 * normal) as pure functions of (seed, global row id, column), topology-free. */
#ifndef SCPS_INIT_H
#define SCPS_INIT_H

#include <stdint.h>

#include "scps_spec.h"

/* The seed a table's initializer uses: its own, or one derived from the
 * table name so that unseeded tables still differ from each other. */
uint64_t scps__init_seed(const scps_table_spec *t);

/* Fills row (dim floats) with the values of logical row `id`. The values
 * depend only on the spec, the seed and (id, column), so every topology
 * starts from the same table. */
void scps__init_row(const scps_initializer_spec *in, uint64_t seed, int64_t id, int32_t dim,
                   float *row);

#endif
