/* scps_ctr: synthetic click-through data from a planted model: a workload's
 * id streams, planted embedding rows and weights, labels drawn from the
 * planted click probability, so the best achievable log-loss is known. */
#ifndef SCPS_CTR_H
#define SCPS_CTR_H

#include <stdint.h>

#include "scps_prep.h"
#include "scps_workload.h"

typedef struct scps_ctr scps_ctr;

/* The planted model depends only on the workload (its seed, tables and
 * features) and logit_std; `stream` picks the sample stream, so a training
 * and a held-out stream share one planted model. The planted logit of a
 * sample is bias + sum over features of <w_f, pooled planted rows>, scaled so
 * its standard deviation is logit_std. */
int scps__ctr_create(const scps_workload *w, uint64_t stream, double logit_std, scps_ctr **out,
                    scps_error *err);
void scps__ctr_destroy(scps_ctr *c);

/* Draws the next batch, overwriting the previous one. */
void scps__ctr_next(scps_ctr *c);

/* Inputs of every feature (ragged), labels (0 or 1) and planted click
 * probabilities of the current batch; valid until the next call. */
const scps_feature_input *scps__ctr_inputs(const scps_ctr *c);
const float *scps__ctr_labels(const scps_ctr *c);
const float *scps__ctr_probs(const scps_ctr *c);
int32_t scps__ctr_batch_size(const scps_ctr *c);

#endif
