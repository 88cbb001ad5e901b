/* The server's counters and their Prometheus text exposition (/metrics):
 * requests by route and status, tokens, live streams from the lane, decode
 * speed, histograms of latency, time to first token, time per output token
 * and queue time, and finished generations by reason. */
#include "server_metrics.h"

#include <stdlib.h>
#include <string.h>

#include <loom/platform.h>

#include "server_http.h"

/* The routes that get their own label value; anything else is "other". */
static const char *const ROUTES[] = {"/v1/completions",
                                     "/v1/chat/completions",
                                     "/v1/models",
                                     "/health",
                                     "/metrics",
                                     "/tokenize",
                                     "/detokenize",
                                     "/version",
                                     "other"};
#define N_ROUTES (int)(sizeof ROUTES / sizeof ROUTES[0])
/* Statuses the server sends; anything else lands in the last slot. */
static const int STATUSES[] = {200, 204, 400, 401, 404, 405, 413,
                               429, 499, 500, 503, 504, 0};
#define N_STATUSES (int)(sizeof STATUSES / sizeof STATUSES[0])

/* Upper bounds (seconds) of the buckets of the latency histograms. */
static const double BOUNDS[] = {0.005, 0.01, 0.025, 0.05, 0.1,  0.25, 0.5,
                                1.0,   2.5,  5.0,   10.0, 30.0, 60.0};
#define N_BOUNDS (int)(sizeof BOUNDS / sizeof BOUNDS[0])
/* Per-token times are shorter. */
static const double TPOT_BOUNDS[] = {0.001, 0.0025, 0.005, 0.01, 0.025,
                                     0.05,  0.1,    0.25,  0.5,  1.0};
#define N_TPOT      (int)(sizeof TPOT_BOUNDS / sizeof TPOT_BOUNDS[0])
#define MAX_BUCKETS 16

typedef struct histogram {
    uint64_t buckets[MAX_BUCKETS]; /* non-cumulative counts */
    uint64_t count;
    double sum;
} histogram;

static const char *const REASONS[] = {"stop", "length", "cancelled", "error",
                                      "timeout"};
#define N_REASONS (int)(sizeof REASONS / sizeof REASONS[0])

struct srv_metrics {
    loom_mutex *mu;
    uint64_t requests[N_ROUTES][N_STATUSES];
    uint64_t other_status[N_ROUTES]; /* status codes not in STATUSES */
    uint64_t prompt_tokens, completion_tokens, generations;
    histogram ttft, e2e, tpot, queue;
    uint64_t finished[N_REASONS];
};

srv_metrics *srv_metrics_new(void)
{
    srv_metrics *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->mu = loom_mutex_new();
    if (!m->mu) {
        free(m);
        return NULL;
    }
    return m;
}

void srv_metrics_free(srv_metrics *m)
{
    if (!m)
        return;
    loom_mutex_free(m->mu);
    free(m);
}

static int route_index(const char *route)
{
    for (int i = 0; i < N_ROUTES - 1; i++)
        if (route && strcmp(route, ROUTES[i]) == 0)
            return i;
    return N_ROUTES - 1;
}

void srv_metrics_request(srv_metrics *m, const char *route, int status)
{
    int r = route_index(route);
    loom_mutex_lock(m->mu);
    int s = 0;
    while (s < N_STATUSES - 1 && STATUSES[s] != status)
        s++;
    if (s == N_STATUSES - 1)
        m->other_status[r]++;
    else
        m->requests[r][s]++;
    loom_mutex_unlock(m->mu);
}

static void observe(histogram *h, const double *bounds, int n, double v)
{
    int b = 0;
    while (b < n && v > bounds[b])
        b++;
    if (b < n)
        h->buckets[b]++;
    h->count++;
    h->sum += v;
}

void srv_metrics_generation(srv_metrics *m, const srv_gen_stats *g)
{
    loom_mutex_lock(m->mu);
    m->generations++;
    m->prompt_tokens += (uint64_t)(g->prompt_tokens > 0 ? g->prompt_tokens : 0);
    m->completion_tokens +=
        (uint64_t)(g->completion_tokens > 0 ? g->completion_tokens : 0);
    if (g->ttft_s >= 0)
        observe(&m->ttft, BOUNDS, N_BOUNDS, g->ttft_s);
    observe(&m->e2e, BOUNDS, N_BOUNDS, g->e2e_s);
    observe(&m->queue, BOUNDS, N_BOUNDS, g->queue_s);
    /* the tokens after the first, over the time after it (vLLM's TPOT) */
    if (g->ttft_s >= 0 && g->completion_tokens > 1)
        observe(&m->tpot, TPOT_BOUNDS, N_TPOT,
                (g->e2e_s - g->ttft_s) / (g->completion_tokens - 1));
    for (int r = 0; g->finish && r < N_REASONS; r++)
        if (!strcmp(g->finish, REASONS[r]))
            m->finished[r]++;
    loom_mutex_unlock(m->mu);
}

static void render_histogram(srv_buf *b, const char *name, const char *help,
                             const histogram *h, const double *bounds, int n)
{
    srv_buf_addf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < n; i++) {
        cum += h->buckets[i];
        srv_buf_addf(b, "%s_bucket{le=\"%g\"} %llu\n", name, bounds[i],
                     (unsigned long long)cum);
    }
    srv_buf_addf(b,
                 "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count "
                 "%llu\n",
                 name, (unsigned long long)h->count, name, h->sum, name,
                 (unsigned long long)h->count);
}

char *srv_metrics_render(srv_metrics *m, loom_lane *lane, int ready)
{
    srv_buf b = {0};
    loom_lane_stats ls;
    memset(&ls, 0, sizeof ls);
    if (lane)
        loom_lane_get_stats(lane, &ls);

    loom_mutex_lock(m->mu);
    srv_buf_addf(&b, "# HELP loom_requests_total HTTP requests answered, by "
                     "route and status.\n"
                     "# TYPE loom_requests_total counter\n");
    for (int r = 0; r < N_ROUTES; r++) {
        for (int s = 0; s < N_STATUSES - 1; s++)
            if (m->requests[r][s])
                srv_buf_addf(&b,
                             "loom_requests_total{route=\"%s\",status=\"%d\"} "
                             "%llu\n",
                             ROUTES[r], STATUSES[s],
                             (unsigned long long)m->requests[r][s]);
        if (m->other_status[r])
            srv_buf_addf(&b,
                         "loom_requests_total{route=\"%s\",status=\"other\"} "
                         "%llu\n",
                         ROUTES[r], (unsigned long long)m->other_status[r]);
    }
    srv_buf_addf(&b,
                 "# HELP loom_prompt_tokens_total Prompt tokens of finished "
                 "generations.\n"
                 "# TYPE loom_prompt_tokens_total counter\n"
                 "loom_prompt_tokens_total %llu\n"
                 "# HELP loom_generation_tokens_total Tokens generated by "
                 "finished generations.\n"
                 "# TYPE loom_generation_tokens_total counter\n"
                 "loom_generation_tokens_total %llu\n"
                 "# HELP loom_generations_total Finished generations.\n"
                 "# TYPE loom_generations_total counter\n"
                 "loom_generations_total %llu\n",
                 (unsigned long long)m->prompt_tokens,
                 (unsigned long long)m->completion_tokens,
                 (unsigned long long)m->generations);
    render_histogram(&b, "loom_time_to_first_token_seconds",
                     "Request arrival to first generated token.", &m->ttft,
                     BOUNDS, N_BOUNDS);
    render_histogram(&b, "loom_e2e_request_latency_seconds",
                     "Request arrival to the generation's end.", &m->e2e,
                     BOUNDS, N_BOUNDS);
    render_histogram(&b, "loom_time_per_output_token_seconds",
                     "Time per generated token after the first.", &m->tpot,
                     TPOT_BOUNDS, N_TPOT);
    render_histogram(&b, "loom_request_queue_time_seconds",
                     "Request arrival to a stream cache for it.", &m->queue,
                     BOUNDS, N_BOUNDS);
    srv_buf_addf(&b, "# HELP loom_request_success_total Finished "
                     "generations, by finish reason.\n"
                     "# TYPE loom_request_success_total counter\n");
    for (int r = 0; r < N_REASONS; r++)
        srv_buf_addf(&b,
                     "loom_request_success_total{finished_reason=\"%s\"} "
                     "%llu\n",
                     REASONS[r], (unsigned long long)m->finished[r]);
    loom_mutex_unlock(m->mu);

    srv_buf_addf(&b,
                 "# HELP loom_ready 1 once the model is loaded.\n"
                 "# TYPE loom_ready gauge\n"
                 "loom_ready %d\n"
                 "# HELP loom_streams_active Streams holding a cache.\n"
                 "# TYPE loom_streams_active gauge\n"
                 "loom_streams_active %d\n"
                 "# HELP loom_streams_queued Streams waiting for a cache.\n"
                 "# TYPE loom_streams_queued gauge\n"
                 "loom_streams_queued %d\n"
                 "# HELP loom_decode_tokens_per_second Tokens sampled per "
                 "second over the last few seconds of rounds.\n"
                 "# TYPE loom_decode_tokens_per_second gauge\n"
                 "loom_decode_tokens_per_second %.3f\n"
                 "# HELP loom_prefill_tokens_per_second Prompt rows "
                 "forwarded per second over the last few seconds.\n"
                 "# TYPE loom_prefill_tokens_per_second gauge\n"
                 "loom_prefill_tokens_per_second %.3f\n"
                 "# HELP loom_rounds_total Forward rounds run by the lane.\n"
                 "# TYPE loom_rounds_total counter\n"
                 "loom_rounds_total %llu\n"
                 "# HELP loom_forward_seconds_total Time inside forward.\n"
                 "# TYPE loom_forward_seconds_total counter\n"
                 "loom_forward_seconds_total %.6f\n"
                 "# HELP loom_cache_pool Stream caches made and idle.\n"
                 "# TYPE loom_cache_pool gauge\n"
                 "loom_cache_pool{state=\"total\"} %d\n"
                 "loom_cache_pool{state=\"free\"} %d\n"
                 "# HELP loom_resident_bytes Resident set size of the "
                 "server process.\n"
                 "# TYPE loom_resident_bytes gauge\n"
                 "loom_resident_bytes %llu\n",
                 ready, ls.active, ls.queued, ls.decode_tok_s, ls.prefill_tok_s,
                 (unsigned long long)ls.rounds, ls.forward_s, ls.pool_total,
                 ls.pool_free, (unsigned long long)loom_rss_bytes());
    srv_buf_addf(
        &b,
        "# HELP loom_spec_windows_total Speculative verify windows.\n"
        "# TYPE loom_spec_windows_total counter\n"
        "loom_spec_windows_total %llu\n"
        "# HELP loom_spec_draft_tokens_total Drafted tokens verified.\n"
        "# TYPE loom_spec_draft_tokens_total counter\n"
        "loom_spec_draft_tokens_total %llu\n"
        "# HELP loom_spec_accepted_tokens_total Drafted tokens "
        "accepted.\n"
        "# TYPE loom_spec_accepted_tokens_total counter\n"
        "loom_spec_accepted_tokens_total %llu\n"
        "# HELP loom_spec_acceptance_length Tokens kept per window "
        "(accepted drafts + 1).\n"
        "# TYPE loom_spec_acceptance_length histogram\n",
        (unsigned long long)ls.spec_windows,
        (unsigned long long)ls.spec_drafted,
        (unsigned long long)ls.spec_accepted);
    uint64_t kept = 0, windows = 0;
    for (int k = 1; k <= LOOM_MAX_WINDOW; k++) {
        windows += ls.spec_hist[k];
        kept += (uint64_t)k * ls.spec_hist[k];
        srv_buf_addf(&b, "loom_spec_acceptance_length_bucket{le=\"%d\"} %llu\n",
                     k, (unsigned long long)windows);
    }
    srv_buf_addf(&b,
                 "loom_spec_acceptance_length_bucket{le=\"+Inf\"} %llu\n"
                 "loom_spec_acceptance_length_sum %llu\n"
                 "loom_spec_acceptance_length_count %llu\n",
                 (unsigned long long)windows, (unsigned long long)kept,
                 (unsigned long long)windows);
    if (!b.data) {
        srv_buf_free(&b);
        return NULL;
    }
    return b.data;
}
