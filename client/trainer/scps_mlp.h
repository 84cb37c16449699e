/* scps_mlp: the example trainer's dense model (the TensorCore work): a ReLU
 * MLP to one logit, its backward pass and its own Adam optimizer. */
#ifndef SCPS_MLP_H
#define SCPS_MLP_H

#include <stdint.h>

#include "scps_error.h"

typedef struct scps_mlp scps_mlp;

/* n_in inputs, hidden layer widths, one output logit; He-initialised from
 * seed. max_batch bounds the rows of one forward/backward pair. */
int scps__mlp_create(int32_t n_in, const int32_t *hidden, int n_hidden, int32_t max_batch, double lr,
                    uint64_t seed, scps_mlp **out, scps_error *err);
void scps__mlp_destroy(scps_mlp *m);

/* logits[b] for rows x[b * n_in ..]; keeps what backward needs. */
void scps__mlp_forward(scps_mlp *m, const float *x, int32_t batch, float *logits);

/* Given dlogits (dLoss/dlogit per row) of the last forward, writes dx
 * (dLoss/dx, batch x n_in) and accumulates the weight gradients. */
void scps__mlp_backward(scps_mlp *m, const float *dlogits, int32_t batch, float *dx);

/* Applies Adam to the accumulated weight gradients and clears them. */
void scps__mlp_step(scps_mlp *m);

/* Mean binary cross-entropy of logits against labels (0/1) and, when
 * dlogits is not NULL, its gradient (sigmoid(z) - y) / batch. */
double scps__bce_with_logits(const float *logits, const float *labels, int32_t batch, float *dlogits);

/* Area under the ROC curve of scores against 0/1 labels (ties count half);
 * 0.5 when one class is missing. */
double scps__auc(const float *scores, const float *labels, int64_t n);

#endif
