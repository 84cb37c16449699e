/* scps__cmd_push: the ApplyGradients method: validate, read and check the
 * gradients on the SparseCore workers, update every SparseCore or none. */
#ifndef SCPS_CMD_PUSH_H
#define SCPS_CMD_PUSH_H

#include "scps_call.h"

/* The ApplyGradients method (a dispatch table entry). */
void scps__cmd_push(scps_call *c);

#endif
