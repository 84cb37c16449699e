/* scps_metrics: the Prometheus text-format /metrics endpoint (scps-server
 * --metrics-listen): libmicrohttpd's thread rendering the server's counters. */
#ifndef SCPS_METRICS_H
#define SCPS_METRICS_H

#include "scps_error.h"
#include "scps_server_options.h"

typedef struct scps_metrics scps_metrics;

/* Checks --metrics-listen: "HOST:PORT" (HOST a numeric IPv4 or [IPv6]
 * address or a name that resolves to one) or "PORT" alone (HOST
 * 127.0.0.1: this machine only), port 0: any free port. host (cap bytes)
 * and port may be NULL. */
int scps__metrics_parse(const char *listen, char *host, size_t cap, int *port, scps_error *err);

/* Serves GET /metrics (text exposition format 0.0.4) for s on listen (as
 * scps__metrics_parse reads it) from its own thread; any other
 * path is answered 404, another method on /metrics 405. Fails with err
 * naming the address when it cannot be bound. */
int scps__metrics_start(scps_server *s, const char *listen, scps_metrics **out, scps_error *err);

/* "http://HOST:PORT/metrics" with the port actually bound. */
const char *scps__metrics_url(const scps_metrics *m);

/* Stops the thread (a scrape in progress finishes first) and frees m;
 * before scps__server_destroy. NULL is ignored. */
void scps__metrics_stop(scps_metrics *m);

/* Renders the exposition text of s into a malloc'd, NUL-terminated buffer
 * (*len bytes without the NUL); NULL when out of memory. */
char *scps__metrics_render(scps_server *s, size_t *len);

#endif
