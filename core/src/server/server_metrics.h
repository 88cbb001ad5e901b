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
/* A finished generation: token counts, times in seconds (ttft_s < 0: no
 * token came) and its finish reason ("stop", "length", ...). */
typedef struct srv_gen_stats {
    int32_t prompt_tokens, completion_tokens;
    double ttft_s;  /* arrival -> first token */
    double e2e_s;   /* arrival -> the end */
    double queue_s; /* arrival -> a cache for it */
    const char *finish;
} srv_gen_stats;
void srv_metrics_generation(srv_metrics *m, const srv_gen_stats *g);
/* Prometheus text exposition (format 0.0.4) of the counters plus the lane's
 * live numbers (lane may be NULL while loading). Malloc'd. */
char *srv_metrics_render(srv_metrics *m, loom_lane *lane, int ready);

#endif
