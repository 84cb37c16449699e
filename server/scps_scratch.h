/* scps_scratch: the server's idle call scratch (a Lookup's answer, an
 * ApplyGradients' widened gradients), kept for the calls that follow. */
#ifndef SCPS_SCRATCH_H
#define SCPS_SCRATCH_H

#include <stddef.h>

struct scps_budget;

/* Why: glibc maps a block over 32 MiB (the ceiling of M_MMAP_THRESHOLD,
 * scps_memtune.h) anew on every malloc and unmaps it on free, so a server
 * whose calls need more faulted every page in again per call: 10.7 k page
 * faults per criteo26 Lookup answered in bfloat16 (44 MB of scratch), a
 * third of its time. Blocks taken from here come back to it instead. */
typedef struct scps_scratch scps_scratch;

/* A pool keeping up to max_idle blocks. Returns 0 or SCPS_ENOMEM. */
int scps__scratch_create(int max_idle, scps_scratch **out);

/* The creator lets go; the pool goes once every block taken is back (gRPC
 * may release a sent answer after the server has finished). */
void scps__scratch_release(scps_scratch *s);

/* A block of at least n floats, the smallest idle one that fits or a new
 * one; *cap receives its size in floats. NULL when out of memory. */
float *scps__scratch_take(scps_scratch *s, size_t n, size_t *cap);

/* Gives back a block taken from s (cap as take set it): kept idle, or the
 * smallest of the idle blocks and it freed when max_idle are kept. */
void scps__scratch_give(scps_scratch *s, float *mem, size_t cap);

/* Counts the pool's blocks in a memory budget (scps_budget.h), idle ones
 * included; NULL stops counting (the budget is going). A caller then
 * reserves n floats' bytes before scps__scratch_take(n): they become the
 * new block's, or are given back when an idle block is reused or the
 * allocation fails. */
void scps__scratch_set_budget(scps_scratch *s, struct scps_budget *budget);

/* Frees idle blocks, largest first, until at least `want` bytes are freed
 * or none is left; returns the bytes freed (given back to the budget). */
size_t scps__scratch_drop_idle(scps_scratch *s, size_t want);

/* Bytes of the idle blocks kept. */
size_t scps__scratch_idle_bytes(scps_scratch *s);

#endif
