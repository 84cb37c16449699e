/* scps_prep_check: what the preprocessor refuses and how it says so: input
 * shapes, ids and weights, merged gains, and partitions over their limits. */
#ifndef SCPS_PREP_CHECK_H
#define SCPS_PREP_CHECK_H

#include "scps_prep_int.h"

/* Checks input f's shape against its FeatureSpec and points pf->offs at its
 * row offsets (the input's, or built in pf->offs_scratch); SCPS_EINVAL or
 * SCPS_ERANGE naming the feature, field, position and value. */
int scps__prep_check_shape(const scps_prep *p, int f, const scps_feature_input *in, prep_feature *pf,
                          scps_error *err);
/* After a scan has seen an id outside [0, vocabulary): SCPS_ERANGE naming
 * the first one, its position and its sample. */
int scps__prep_check_bad_id(const scps_prep *p, int f, const scps_feature_input *in, const prep_feature *pf,
                           scps_error *err);
/* Weights finite, and > 0 for mean and sqrtn: SCPS_EINVAL naming the first
 * that is not. */
int scps__prep_check_weights(const scps_prep *p, int f, const scps_feature_input *in, const prep_feature *pf,
                            scps_error *err);
/* A merged gain that is not finite fails the run (SCPS_EINVAL), naming the
 * stack, the sample and the id's row. */
int scps__prep_check_gains(const scps_prep *p, scps_error *err);
/* Policy ERROR: the first partition of stack s, in (src, dst) order, over
 * the run's limits (ids before unique ids) as SCPS_ELIMIT (scps__prep_run). */
int scps__prep_check_limits(const scps_prep *p, int s, scps_error *err);

#endif
