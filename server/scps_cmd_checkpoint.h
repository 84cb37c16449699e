/* scps_cmd_checkpoint: the Checkpoint, ListCheckpoints and Restore methods:
 * requests checked here, saves and restores run by the saver below. */
#ifndef SCPS_CMD_CHECKPOINT_H
#define SCPS_CMD_CHECKPOINT_H

#include "scps_call.h"

/* The Checkpoint method (a dispatch table entry): validates, then the
 * saver queues, answers or refuses it (scps__saver_checkpoint). */
void scps__cmd_checkpoint_save(scps_call *c);

/* The ListCheckpoints method (a dispatch table entry). */
void scps__cmd_checkpoint_list(scps_call *c);

/* The Restore method (a dispatch table entry): validates and queues the
 * call for the save thread, which runs scps__restore_run. */
void scps__cmd_checkpoint_restore(scps_call *c);

#endif
