/* The server's counters and their Prometheus text (server_metrics.c). */
#ifndef LOOM_SERVER_METRICS_H
#define LOOM_SERVER_METRICS_H

#include <stdint.h>

#include <loom/lane.h>

typedef struct srv_metrics srv_metrics;

srv_metrics *srv_metrics_new(void);
void srv_metrics_free(srv_metrics *m);
/* A finished request: counted by (route, status). Unknown routes are counted
 * under route="other" so a scanner cannot grow the table. */
void srv_metrics_request(srv_metrics *m, const char *route, int status);
/* A finished generation: its token counts and time to first token (< 0: no
 * token came). */
void srv_metrics_generation(srv_metrics *m, int32_t prompt_tokens,
                            int32_t completion_tokens, double ttft_s);
/* Prometheus text exposition (format 0.0.4) of the counters plus the lane's
 * live numbers (lane may be NULL while loading). Malloc'd. */
char *srv_metrics_render(srv_metrics *m, loom_lane *lane, int ready);

#endif
