/* scps_prep_pool: the preprocessor's worker threads: a phase's work items
 * claimed by the calling thread and the workers, spinning briefly between phases. */
#ifndef SCPS_PREP_POOL_H
#define SCPS_PREP_POOL_H

#include "scps_prep_int.h"

/* Starts p->n_threads - 1 workers (none for one thread); on failure the
 * workers started are counted in p->workers_started for scps__prep_pool_stop. */
int scps__prep_pool_start(scps_prep *p, scps_error *err);
/* Stops and joins the workers; safe after a failed or skipped start. */
void scps__prep_pool_stop(scps_prep *p);

/* job(p, i, thread) for every i in [0, n_items), on the workers and the
 * calling thread (threads[0]); returns once all are done. */
void scps__prep_pool_run(scps_prep *p, prep_job_fn job, int n_items);

#endif
