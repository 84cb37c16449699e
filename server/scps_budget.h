/* scps_budget: the server's memory budget: the bytes its calls hold (requests,
 * answers, scratch, idle scratch kept for reuse) and the calls waiting for room. */
#ifndef SCPS_BUDGET_H
#define SCPS_BUDGET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct scps_budget scps_budget;

/* A call waiting for `need` bytes. done runs exactly once: admitted (the
 * bytes are reserved for it and must be released) or refused (in_use and
 * limit are the figures at the time, for the message). It runs on the
 * thread of scps__budget_wait when that decides at once, else on the
 * budget's own thread, never under the budget's lock. */
typedef struct scps_budget_waiter {
  size_t need;
  int64_t deadline_ns; /* scps__clock_ns() time after which it is refused */
  void (*done)(struct scps_budget_waiter *w, bool admitted, size_t in_use, size_t limit);
  int64_t since_ns;    /* set by scps__budget_wait: when it began to wait */
  struct scps_budget_waiter *next;
} scps_budget_waiter;

typedef struct scps_budget_stats {
  int64_t limit, in_use, peak;
  int64_t waited;  /* calls that had to wait for room (admitted or not) */
  int64_t refused; /* calls refused: too large, or no room by their deadline */
  int64_t waiting; /* calls waiting now */
} scps_budget_stats;

/* A budget of `limit` bytes and the thread that admits waiting calls and
 * runs the tick. Returns 0 or SCPS_ENOMEM. */
int scps__budget_create(size_t limit, scps_budget **out);

/* Refuses the calls still waiting, stops the thread and frees the budget. */
void scps__budget_destroy(scps_budget *b);

/* reclaim(ud, want) frees up to `want` bytes of memory kept for reuse
 * (releasing them from the budget) and returns how many it freed; called
 * without the budget's lock when a reservation does not fit. */
void scps__budget_set_reclaim(scps_budget *b, size_t (*reclaim)(void *ud, size_t want), void *ud);

/* tick(ud, now_ns) runs on the budget's thread at least every period_ns
 * and whenever the budget wakes; set before calls start. */
void scps__budget_set_tick(scps_budget *b, void (*tick)(void *ud, int64_t now_ns), void *ud, int64_t period_ns);

/* Reserves n bytes if they fit now (after reclaiming memory kept for
 * reuse if need be). */
bool scps__budget_reserve(scps_budget *b, size_t n);

/* Counts n bytes that are already allocated (a request that has arrived),
 * whether they fit or not: later reservations wait for them. */
void scps__budget_charge(scps_budget *b, size_t n);

/* Gives back n bytes reserved or charged; waiting calls that now fit are
 * admitted on the budget's thread. */
void scps__budget_release(scps_budget *b, size_t n);

/* Reserves w->need for a call: at once if it fits (done runs here,
 * admitted), refused at once if it exceeds the whole limit, otherwise
 * the call waits, first come first served among those that fit, until
 * w->deadline_ns. */
void scps__budget_wait(scps_budget *b, scps_budget_waiter *w);

/* Refuses every call waiting now (a shutdown that stopped waiting). */
void scps__budget_refuse_waiting(scps_budget *b);

size_t scps__budget_limit(const scps_budget *b);
void scps__budget_get_stats(scps_budget *b, scps_budget_stats *out);

#endif
