/* scps__cmd_lookup: the Lookup method: validate, gather on the SparseCore
 * workers (or inline), answer with the activations framed without a copy. */
#ifndef SCPS_CMD_LOOKUP_H
#define SCPS_CMD_LOOKUP_H

#include "scps_call.h"

/* The Lookup method (a dispatch table entry). */
void scps__cmd_lookup(scps_call *c);

#endif
