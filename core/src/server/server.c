/* The HTTP side of `loom serve` on libmicrohttpd: routing, limits, keys,
 * the request lifecycle (one lane stream per generation request, answered
 * as JSON or as server-sent events), graceful stop.
 *
 * Threads: libmicrohttpd runs one thread per connection, so a handler may
 * block while its stream generates; the lane thread delivers tokens through
 * job_event into the job, and the connection's thread turns them into the
 * response. A job is shared by the lane, the connection and (streaming) the
 * response body; it is freed when the last of them lets go. */
#include <loom/server.h>

#include "server_auth.h"
#include "server_deadline.h"
#include "server_gate.h"
#include "server_http.h"
#include "server_log.h"
#include "server_metrics.h"
#include "server_openai.h"
#include "server_prompt.h"
#include "server_reply.h"
#include "server_tokenize.h"
#include "webui.h"

#include <microhttpd.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <loom/checkpoint.h>
#include <loom/log.h>
#include <loom/platform.h>
#include <loom/tokenizer.h>

#define SRV_DEFAULT_BODY  (8u << 20)
#define SRV_DEFAULT_QUEUE 64
/* How often a waiting handler looks whether its client is still there. */
#define SRV_POLL_MS 50
/* Request read deadlines (server_deadline.c) */
#define SRV_READ_TIMEOUT_MS 30000
#define SRV_MIN_BODY_RATE   (16u << 10)
/* libmicrohttpd's connection slots, and how many of them connections
 * waiting on their clients (handshake, head, body, idle) may hold. */
#define SRV_CONN_LIMIT  1024u
#define SRV_WAITING_MAX (SRV_CONN_LIMIT - 64u)

typedef struct srv_job srv_job;

struct loom_server {
    loom_server_params p;
    char *host, *key_file, *log_path, *model_name;
    struct MHD_Daemon *mhd;
    loom_socket listen_sock;
    int port;
    size_t max_body;

    loom_mutex *mu; /* guards everything below and job refcounts */
    loom_cond *cv;  /* signalled when a job is freed */
    srv_keyring *keys;
    /* --api-key / $LOOM_API_KEY, kept as a digest like the file's keys */
    uint8_t key_digest[SRV_KEY_DIGEST_SIZE];
    int has_key;
    char **cors; /* allowed origins */
    int n_cors;
    char *tpl_file;           /* --chat-template */
    char *tls_cert, *tls_key; /* PEM text, kept while the daemon runs */
    size_t tls_key_len;
    int ready, stopping, stopped;
    srv_job *jobs; /* live jobs, for cancelling at stop */
    int n_jobs;
    uint64_t next_id;

    srv_log *log;
    srv_metrics *metrics;
    srv_deadlines *deadlines; /* request read deadlines */
    srv_gate *gate;           /* accepts, checks first heads */

    /* the model, once loaded; read-only after ready is set */
    loom_engine *engine;
    loom_tokenizer *tok;
    loom_chat_template *tpl;
    loom_lane *lane;
    int64_t ctx;
    int64_t created;
    srv_defaults defaults; /* generation_config.json's, unless turned off */
};

/* One choice of a request: one lane stream. Fields under "delivered" are
 * guarded by the job's mu; the rest belongs to the response's thread. */
typedef struct srv_choice {
    srv_job *job;
    int32_t index;
    uint64_t id; /* lane stream id */

    /* delivered */
    srv_buf text;
    srv_token_lp *lp;
    int32_t n_lp, cap_lp;
    int done;
    loom_finish finish;
    char error[256];
    int32_t n_prompt, n_gen;
    uint64_t seed;

    /* echo with logprobs: the prompt's tokens, the first without one */
    srv_token_lp *plp;
    int32_t n_plp, cap_plp;

    /* the response's side */
    srv_reply reply; /* chat: reasoning, content, tool calls */
    char *echo;      /* completions with echo: the prompt's text */
    size_t echo_len;
    int sent_start, sent_finish;
} srv_choice;

/* One generation request: its choices, what the lane delivered, and
 * (streaming) what is still to be sent. */
struct srv_job {
    loom_server *srv;
    srv_job *prev, *next; /* in srv->jobs, under srv->mu */
    int refs;             /* under srv->mu */
    loom_mutex *mu;
    loom_cond *cv;
    srv_request rq;
    char rid[48];
    int64_t created;
    loom_socket fd;   /* the client's socket, for peer checks */
    uint64_t t0;      /* request arrival (monotonic ns) */
    double add_delay; /* arrival -> loom_lane_add, seconds */
    srv_choice *ch;
    int32_t n_ch;    /* choices made */
    int32_t n_added; /* ... of them given to the lane */
    int think_open;  /* the prompt ends inside an opened think block */

    /* delivered */
    int32_t n_done; /* choices finished */
    double ttft;
    int cancel;        /* the HTTP side asked the lane to stop */
    int client_gone;   /* ... because the client left */
    int timed_out;     /* ... because --timeout passed */
    uint64_t deadline; /* monotonic ns; 0: none */

    /* streaming, owned by the response's thread */
    srv_buf out;
    size_t out_off;
    int sent_done;
};

/* One HTTP request (MHD's per-request pointer). */
typedef struct srv_conn {
    loom_server *srv;
    struct MHD_Connection *c;
    double t_wall;
    uint64_t t0;
    char method[16];
    char *route;
    srv_buf body;
    int too_big;
    int status;
    char key[64];
    int has_key;
    char error[512];
    const char *cors; /* the Access-Control-Allow-Origin to send, or NULL */
    srv_job *job;
    srv_peer *peer; /* its connection's read deadline */
} srv_conn;

/* strdup is POSIX, not C11. */
static char *str_dup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

/* ---------------------------------------------------------------- jobs */

static void job_free(srv_job *j)
{
    for (int32_t i = 0; i < j->n_ch; i++) {
        srv_choice *c = &j->ch[i];
        srv_buf_free(&c->text);
        free(c->lp);
        free(c->plp);
        free(c->echo);
        srv_reply_free(&c->reply);
    }
    free(j->ch);
    srv_request_free(&j->rq);
    srv_buf_free(&j->out);
    loom_cond_free(j->cv);
    loom_mutex_free(j->mu);
    free(j);
}

static void job_unref(srv_job *j)
{
    loom_server *srv = j->srv;
    loom_mutex_lock(srv->mu);
    int last = --j->refs == 0;
    if (last) {
        if (j->prev)
            j->prev->next = j->next;
        else
            srv->jobs = j->next;
        if (j->next)
            j->next->prev = j->prev;
        srv->n_jobs--;
        loom_cond_broadcast(srv->cv);
    }
    loom_mutex_unlock(srv->mu);
    if (last)
        job_free(j);
}

static srv_job *job_new(loom_server *srv, int refs, const char *prefix)
{
    srv_job *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    j->mu = loom_mutex_new();
    j->cv = loom_cond_new();
    if (!j->mu || !j->cv) {
        loom_cond_free(j->cv);
        loom_mutex_free(j->mu);
        free(j);
        return NULL;
    }
    j->srv = srv;
    j->refs = refs;
    j->ttft = -1;
    loom_mutex_lock(srv->mu);
    j->next = srv->jobs;
    if (srv->jobs)
        srv->jobs->prev = j;
    srv->jobs = j;
    srv->n_jobs++;
    uint64_t n = ++srv->next_id;
    loom_mutex_unlock(srv->mu);
    /* unique per server run; the time part keeps ids apart across runs */
    snprintf(j->rid, sizeof j->rid, "%s%016llx%08llx", prefix,
             (unsigned long long)(loom_wall_time() * 1e6),
             (unsigned long long)n);
    return j;
}

/* The lane's delivery, on the lane thread. */
static int job_event(void *user, const loom_lane_event *ev)
{
    srv_choice *c = user;
    srv_job *j = c->job;
    loom_mutex_lock(j->mu);
    if (ev->prompt_index > 0) {
        /* a prompt token's logprobs (echo), after the first's entry */
        if (c->n_plp == c->cap_plp) {
            int32_t cap = c->cap_plp ? c->cap_plp * 2 : 16;
            srv_token_lp *lp = realloc(c->plp, (size_t)cap * sizeof *lp);
            if (lp) {
                c->plp = lp;
                c->cap_plp = cap;
            }
        }
        if (c->n_plp < c->cap_plp && c->n_plp == ev->prompt_index) {
            srv_token_lp *t = &c->plp[c->n_plp++];
            memset(t, 0, sizeof *t);
            t->token = ev->token;
            t->logprob = ev->logprob;
            t->n_top = ev->n_top < 0 ? 0
                       : ev->n_top > LOOM_MAX_TOP_LOGPROBS
                           ? LOOM_MAX_TOP_LOGPROBS
                           : ev->n_top;
            if (t->n_top)
                memcpy(t->top, ev->top, (size_t)t->n_top * sizeof *t->top);
        }
        int cancel = j->cancel;
        loom_mutex_unlock(j->mu);
        return cancel;
    }
    if (ev->text && ev->text_len)
        srv_buf_add(&c->text, ev->text, ev->text_len);
    if (ev->token >= 0 && j->rq.logprobs) {
        if (c->n_lp == c->cap_lp) {
            int32_t cap = c->cap_lp ? c->cap_lp * 2 : 16;
            srv_token_lp *lp = realloc(c->lp, (size_t)cap * sizeof *lp);
            if (lp) {
                c->lp = lp;
                c->cap_lp = cap;
            }
        }
        if (c->n_lp < c->cap_lp) {
            srv_token_lp *t = &c->lp[c->n_lp++];
            t->none = 0;
            t->token = ev->token;
            t->logprob = ev->logprob;
            t->n_top = ev->n_top < 0 ? 0
                       : ev->n_top > LOOM_MAX_TOP_LOGPROBS
                           ? LOOM_MAX_TOP_LOGPROBS
                           : ev->n_top;
            if (t->n_top)
                memcpy(t->top, ev->top, (size_t)t->n_top * sizeof *t->top);
        }
    }
    c->n_prompt = ev->n_prompt;
    c->n_gen = ev->n_generated;
    c->seed = ev->seed;
    if (j->ttft < 0 && ev->token >= 0)
        j->ttft = j->add_delay + ev->ttft_s;
    int final = ev->finish != LOOM_FINISH_NONE;
    if (final) {
        c->done = 1;
        c->finish = ev->finish;
        j->n_done++;
        if (ev->error)
            snprintf(c->error, sizeof c->error, "%s", ev->error);
    }
    int cancel = j->cancel;
    /* counted before anyone is woken, so a response never runs ahead of
     * the metrics it implies */
    if (final) {
        srv_gen_stats g = {ev->n_prompt,
                           ev->n_generated,
                           j->ttft,
                           (double)(loom_now_ns() - j->t0) / 1e9,
                           j->add_delay + ev->queue_s,
                           j->timed_out ? "timeout"
                                        : srv_finish_reason(ev->finish)};
        srv_metrics_generation(j->srv->metrics, &g);
    }
    loom_cond_broadcast(j->cv);
    loom_mutex_unlock(j->mu);
    if (final)
        job_unref(j); /* this stream's reference */
    return cancel;
}

/* Asks the lane to end the job's streams (idempotent). */
static void job_cancel(srv_job *j, int client_gone)
{
    loom_mutex_lock(j->mu);
    int all_done = j->n_done == j->n_added;
    int was = j->cancel || all_done;
    j->cancel = 1;
    if (client_gone && !all_done)
        j->client_gone = 1;
    int32_t n = j->n_added;
    loom_mutex_unlock(j->mu);
    /* a finished id is ignored by the lane */
    if (!was)
        for (int32_t i = 0; i < n; i++)
            loom_lane_cancel(j->srv->lane, j->ch[i].id);
}

/* Something for the response to send; j->mu held. */
static int job_news(const srv_job *j)
{
    if (j->n_done == j->n_added)
        return 1;
    for (int32_t i = 0; i < j->n_added; i++) {
        const srv_choice *c = &j->ch[i];
        if (c->text.len || c->n_lp || (c->done && !c->sent_finish))
            return 1;
    }
    return 0;
}

/* Past --timeout: ends the streams (their final events follow); j->mu
 * held. */
static void job_check_deadline(srv_job *j, uint64_t now)
{
    if (!j->deadline || now < j->deadline || j->cancel ||
        j->n_done == j->n_added)
        return;
    j->timed_out = 1;
    j->cancel = 1;
    int32_t n = j->n_added;
    loom_mutex_unlock(j->mu);
    for (int32_t i = 0; i < n; i++)
        loom_lane_cancel(j->srv->lane, j->ch[i].id);
    loom_mutex_lock(j->mu);
}

/* Waits until the job has news (text, logprobs, an end) or the client is
 * gone; returns with j->mu held. */
static void job_wait(srv_job *j, int *gone)
{
    *gone = 0;
    loom_mutex_lock(j->mu);
    uint64_t next_check = loom_now_ns() + SRV_POLL_MS * 1000000ull;
    while (!job_news(j)) {
        loom_cond_timedwait(j->cv, j->mu, SRV_POLL_MS);
        /* by the clock: empty-text tokens signal without news */
        uint64_t now = loom_now_ns();
        job_check_deadline(j, now);
        if (j->cancel || now < next_check)
            continue;
        next_check = now + SRV_POLL_MS * 1000000ull;
        if (loom_socket_peer_gone(j->fd)) {
            *gone = 1;
            return;
        }
    }
}

/* ---------------------------------------------------------------- replies */

/* A logprob's token bytes: the lane's, the source of the stream's text. */
static const char *piece_of(void *ctx, int32_t token, size_t *len)
{
    return loom_lane_token_bytes(ctx, token, len);
}

/* Access-Control-Allow-Origin for an allowed origin (see cors_of). */
static void add_cors(const srv_conn *cn, struct MHD_Response *r)
{
    if (!cn->cors)
        return;
    MHD_add_response_header(r, "Access-Control-Allow-Origin", cn->cors);
    if (strcmp(cn->cors, "*") != 0)
        MHD_add_response_header(r, "Vary", "Origin");
}

static enum MHD_Result reply(srv_conn *cn, int status, const char *type,
                             char *body /* malloc'd, taken */)
{
    if (!body)
        body = str_dup("");
    struct MHD_Response *r = MHD_create_response_from_buffer(
        strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", type);
    add_cors(cn, r);
    if (status == 429 || status == 503)
        MHD_add_response_header(r, "Retry-After", "1");
    if (status == 401)
        MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    cn->status = status;
    enum MHD_Result ok = MHD_queue_response(cn->c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result reply_error(srv_conn *cn, const srv_error *e)
{
    snprintf(cn->error, sizeof cn->error, "%s", e->message);
    return reply(cn, e->status, "application/json", srv_error_json(e));
}

static enum MHD_Result fail(srv_conn *cn, int status, const char *type,
                            const char *code, const char *param,
                            const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 6, 7)))
#endif
    ;
static enum MHD_Result fail(srv_conn *cn, int status, const char *type,
                            const char *code, const char *param,
                            const char *fmt, ...)
{
    srv_error e;
    e.status = status;
    e.type = type;
    e.code = code;
    snprintf(e.param, sizeof e.param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e.message, sizeof e.message, fmt, ap);
    va_end(ap);
    return reply_error(cn, &e);
}

/* ---------------------------------------------------------------- streams */

static void result_of(const srv_job *j, const srv_choice *c, srv_result *r)
{
    memset(r, 0, sizeof *r);
    r->kind = j->rq.kind;
    r->id = j->rid;
    r->model = j->srv->model_name;
    r->created = j->created;
    r->index = c ? c->index : 0;
    r->prompt_tokens = c ? c->n_prompt : 0;
    r->completion_tokens = c ? c->n_gen : 0;
    r->seed = c ? c->seed : 0;
}

/* Usage over all choices: each prompt counted once, every completion;
 * j->mu held. */
static void job_usage(const srv_job *j, int32_t *prompt, int32_t *completion)
{
    *prompt = *completion = 0;
    int32_t n = j->rq.n > 0 ? j->rq.n : 1;
    for (int32_t i = 0; i < j->n_added; i++) {
        if (i % n == 0)
            *prompt += j->ch[i].n_prompt;
        *completion += j->ch[i].n_gen;
    }
}

/* The finish_reason of a choice: "tool_calls" when the model stopped after
 * calling tools. */
static const char *choice_finish(const srv_choice *c, loom_finish f)
{
    if (f == LOOM_FINISH_STOP && c->reply.n_calls > 0)
        return "tool_calls";
    return srv_finish_reason(f);
}

/* Chat: a choice's text through its reply parser into r. */
static void reply_result(srv_choice *c, srv_result *r)
{
    srv_reply *p = &c->reply;
    r->text = p->content.data ? p->content.data : "";
    r->text_len = p->content.len;
    r->reasoning = p->reasoning.len ? p->reasoning.data : NULL;
    r->reasoning_len = p->reasoning.len;
    r->tool_calls = json_array_size(p->calls) ? p->calls : NULL;
    r->first_call = p->n_calls - (int32_t)json_array_size(p->calls);
}

/* Builds the next SSE events from what the lane delivered. Returns 0, or -1
 * when the client is gone. */
static int sse_fill(srv_job *j)
{
    int gone;
    job_wait(j, &gone);
    if (gone) {
        loom_mutex_unlock(j->mu);
        job_cancel(j, 1);
        return -1;
    }
    /* take what was delivered; the lane may go on adding meanwhile */
    typedef struct {
        srv_buf text;
        srv_token_lp *lp;
        int32_t n_lp;
        int done;
        loom_finish finish;
    } taken;
    taken tk[SRV_MAX_CHOICES];
    int32_t n = j->n_added;
    int timed_out = j->timed_out;
    char error[256] = "";
    for (int32_t i = 0; i < n; i++) {
        srv_choice *c = &j->ch[i];
        tk[i].text = c->text;
        memset(&c->text, 0, sizeof c->text);
        tk[i].lp = c->lp;
        tk[i].n_lp = c->n_lp;
        c->lp = NULL;
        c->n_lp = c->cap_lp = 0;
        tk[i].done = c->done && !c->sent_finish;
        tk[i].finish = c->finish;
        if (tk[i].done && c->finish == LOOM_FINISH_ERROR && !error[0])
            snprintf(error, sizeof error, "%s", c->error[0] ? c->error : "?");
    }
    int32_t usage_prompt, usage_gen;
    job_usage(j, &usage_prompt, &usage_gen);
    loom_mutex_unlock(j->mu);

    const srv_request *rq = &j->rq;
    void *pc = j->srv->lane;
    int chat = rq->kind == SRV_CHAT;
    int finished = 1;
    for (int32_t i = 0; i < n && !error[0]; i++) {
        srv_choice *c = &j->ch[i];
        srv_result r;
        result_of(j, c, &r);
        if (!c->sent_start) {
            if (chat) {
                srv_chunk_sse(&j->out, &r, 0, NULL, NULL, 1, 0);
            } else if (c->echo) {
                r.text = c->echo;
                r.text_len = c->echo_len;
                srv_chunk_sse(&j->out, &r, 0, NULL, NULL, 0, 0);
            }
            c->sent_start = 1;
        }
        srv_result d = r;
        if (chat) {
            srv_reply_feed(&c->reply, tk[i].text.data ? tk[i].text.data : "",
                           tk[i].text.len);
            if (tk[i].done)
                srv_reply_finish(&c->reply);
            reply_result(c, &d);
        } else {
            d.text = tk[i].text.data;
            d.text_len = tk[i].text.len;
        }
        d.lp = tk[i].lp;
        d.n_lp = tk[i].n_lp;
        if (d.text_len || d.reasoning_len || d.tool_calls || d.n_lp)
            srv_chunk_sse(&j->out, &d, rq->logprobs, piece_of, pc, 0, 0);
        if (chat)
            srv_reply_clear(&c->reply);
        if (tk[i].done) {
            /* past --timeout the streams end with the error below */
            r.finish = choice_finish(c, tk[i].finish);
            if (!timed_out)
                srv_chunk_sse(&j->out, &r, 0, NULL, NULL, 0, 0);
            c->sent_finish = 1;
        }
        finished &= c->sent_finish;
    }
    if (!error[0] && timed_out && finished) {
        srv_error e;
        srv_error_set(&e, 504, "server_error", "timeout", NULL,
                      "the request ran past the server's limit of %g s",
                      j->srv->p.request_timeout_s);
        char *s = srv_error_json(&e);
        srv_buf_addf(&j->out, "data: %s\n\n", s ? s : "{}");
        free(s);
    } else if (error[0]) {
        srv_error e;
        srv_error_set(&e, 500, "server_error", NULL, NULL,
                      "generation failed: %s", error);
        char *s = srv_error_json(&e);
        srv_buf_addf(&j->out, "data: %s\n\n", s ? s : "{}");
        free(s);
        job_cancel(j, 0);
    } else if (finished && rq->include_usage) {
        srv_result r;
        result_of(j, NULL, &r);
        r.prompt_tokens = usage_prompt;
        r.completion_tokens = usage_gen;
        srv_chunk_sse(&j->out, &r, 0, NULL, NULL, 0, 1);
    }
    if (error[0] || finished) {
        srv_buf_add(&j->out, "data: [DONE]\n\n", 14);
        j->sent_done = 1;
    }
    for (int32_t i = 0; i < n; i++) {
        srv_buf_free(&tk[i].text);
        free(tk[i].lp);
    }
    return 0;
}

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    srv_job *j = cls;
    while (j->out_off == j->out.len) {
        j->out.len = j->out_off = 0;
        if (j->sent_done)
            return MHD_CONTENT_READER_END_OF_STREAM;
        if (sse_fill(j) != 0)
            return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    size_t n = j->out.len - j->out_off;
    if (n > max)
        n = max;
    memcpy(buf, j->out.data + j->out_off, n);
    j->out_off += n;
    return (ssize_t)n;
}

static void sse_free(void *cls)
{
    srv_job *j = cls;
    /* the response ended before the streams did: the client went away */
    loom_mutex_lock(j->mu);
    int done = j->n_done == j->n_added;
    loom_mutex_unlock(j->mu);
    if (!done)
        job_cancel(j, 1);
    job_unref(j);
}

/* ---------------------------------------------------------------- handlers */

static int is_ready(loom_server *srv, int *stopping)
{
    loom_mutex_lock(srv->mu);
    int r = srv->ready;
    *stopping = srv->stopping;
    loom_mutex_unlock(srv->mu);
    return r;
}

static enum MHD_Result handle_health(srv_conn *cn)
{
    int stopping;
    int ready = is_ready(cn->srv, &stopping);
    if (stopping)
        return reply(cn, 503, "application/json",
                     str_dup("{\"status\":\"stopping\"}"));
    if (!ready)
        return reply(cn, 503, "application/json",
                     str_dup("{\"status\":\"loading\"}"));
    /* the device, for the chat page's header */
    int cuda = cn->srv->engine->info.device == LOOM_DEVICE_CUDA;
    return reply(cn, 200, "application/json",
                 str_dup(cuda ? "{\"status\":\"ok\",\"device\":\"cuda\"}"
                              : "{\"status\":\"ok\",\"device\":\"cpu\"}"));
}

static enum MHD_Result handle_metrics(srv_conn *cn)
{
    loom_server *srv = cn->srv;
    int stopping;
    int ready = is_ready(srv, &stopping);
    char *text = srv_metrics_render(srv->metrics, ready ? srv->lane : NULL,
                                    ready && !stopping);
    return reply(cn, text ? 200 : 500, "text/plain; version=0.0.4", text);
}

static enum MHD_Result handle_models(srv_conn *cn)
{
    loom_server *srv = cn->srv;
    int stopping;
    if (!is_ready(srv, &stopping))
        return fail(cn, 503, "server_error", "model_loading", NULL,
                    "the model is still loading");
    return reply(cn, 200, "application/json",
                 srv_models_json(srv->model_name, srv->created, srv->ctx));
}

/* GET /v1/models/{id}: the model when the id is the one served. */
static enum MHD_Result handle_model(srv_conn *cn, const char *id)
{
    loom_server *srv = cn->srv;
    int stopping;
    if (!is_ready(srv, &stopping))
        return fail(cn, 503, "server_error", "model_loading", NULL,
                    "the model is still loading");
    if (strcmp(id, srv->model_name) != 0)
        return fail(cn, 404, "invalid_request_error", "model_not_found",
                    "model", "no model '%s' here; this server has '%s'", id,
                    srv->model_name);
    return reply(cn, 200, "application/json",
                 srv_model_json(srv->model_name, srv->created, srv->ctx));
}

/* POST /tokenize and /detokenize (server_tokenize.c). */
static enum MHD_Result handle_tok(srv_conn *cn, int detok)
{
    loom_server *srv = cn->srv;
    int stopping;
    if (!is_ready(srv, &stopping))
        return fail(cn, 503, "server_error", "model_loading", NULL,
                    "the model is still loading");
    srv_tok_ctx c = {srv->tok, srv->tpl, srv->lane, srv->ctx};
    srv_error e;
    const char *body = cn->body.data ? cn->body.data : "";
    char *out = detok ? srv_detokenize_json(&c, body, cn->body.len, &e)
                      : srv_tokenize_json(&c, body, cn->body.len, &e);
    if (!out)
        return reply_error(cn, &e);
    return reply(cn, 200, "application/json", out);
}

static enum MHD_Result handle_tokenize(srv_conn *cn)
{
    return handle_tok(cn, 0);
}

static enum MHD_Result handle_detokenize(srv_conn *cn)
{
    return handle_tok(cn, 1);
}

/* The ids of a completions prompt. Returns 0 or -1 with e filled. */
static int completion_ids(loom_server *srv, const srv_prompt_in *p,
                          const char *param, int32_t **ids, int32_t *n,
                          srv_error *e)
{
    if (p->ids) {
        *ids = malloc((size_t)p->n_ids * sizeof **ids);
        if (!*ids)
            return srv_error_set(e, 500, "server_error", NULL, NULL,
                                 "out of memory");
        memcpy(*ids, p->ids, (size_t)p->n_ids * sizeof **ids);
        *n = p->n_ids;
        return 0;
    }
    /* A raw completion prompt is the model's input as written: special
     * tokens typed in it are meant. */
    loom_err err;
    size_t count = 0;
    if (loom_tokenizer_encode(srv->tok, p->text, p->len, 1, ids, &count,
                              &err) != LOOM_OK)
        return srv_error_set(e, 400, "invalid_request_error", "invalid_value",
                             param, "%s: %s", param, err.msg);
    if (count == 0 || count > INT32_MAX) {
        free(*ids);
        *ids = NULL;
        return srv_error_set(e, 400, "invalid_request_error", "invalid_value",
                             param, "the prompt encodes to %zu tokens", count);
    }
    *n = (int32_t)count;
    return 0;
}

/* A prompt's text for echo: as given, or its ids decoded. */
static int echo_text(loom_server *srv, const srv_prompt_in *p, char **out,
                     size_t *len)
{
    if (!p->ids) {
        *out = malloc(p->len + 1);
        if (!*out)
            return -1;
        memcpy(*out, p->text, p->len);
        (*out)[p->len] = 0;
        *len = p->len;
        return 0;
    }
    loom_err err;
    return loom_tokenizer_decode(srv->tok, p->ids, (size_t)p->n_ids, 0, out,
                                 len, &err) == LOOM_OK
               ? 0
               : -1;
}

/* Whether TEXT ends inside an opened <think> block (white space aside). */
static int ends_in_think(const char *text)
{
    if (!text)
        return 0;
    size_t n = strlen(text);
    while (n && (text[n - 1] == '\n' || text[n - 1] == ' '))
        n--;
    return n >= 7 && memcmp(text + n - 7, "<think>", 7) == 0;
}

static enum MHD_Result lane_refused(srv_conn *cn, loom_status st,
                                    const loom_err *err)
{
    if (st == LOOM_ERR_FULL)
        return fail(cn, 429, "rate_limit_error", "queue_full", NULL,
                    "too many requests waiting (%s); retry later", err->msg);
    if (st == LOOM_ERR_STATE)
        return fail(cn, 503, "server_error", "shutting_down", NULL,
                    "the server is shutting down");
    if (st == LOOM_ERR_NOMEM || st == LOOM_ERR_DEVICE)
        return fail(cn, 500, "server_error", NULL, NULL, "%s", err->msg);
    return fail(cn, 400, "invalid_request_error", "invalid_value", NULL, "%s",
                err->msg);
}

static enum MHD_Result handle_generate(srv_conn *cn, srv_kind kind)
{
    loom_server *srv = cn->srv;
    int stopping;
    int ready = is_ready(srv, &stopping);
    if (stopping)
        return fail(cn, 503, "server_error", "shutting_down", NULL,
                    "the server is shutting down");
    if (!ready)
        return fail(cn, 503, "server_error", "model_loading", NULL,
                    "the model is still loading");

    srv_job *j = job_new(srv, 1, kind == SRV_CHAT ? "chatcmpl-" : "cmpl-");
    if (!j)
        return fail(cn, 500, "server_error", NULL, NULL, "out of memory");
    j->t0 = cn->t0;
    j->created = (int64_t)cn->t_wall;
    cn->job = j; /* the connection's reference */
    srv_error e;
    if (srv_request_parse(kind, cn->body.data ? cn->body.data : "",
                          cn->body.len, &j->rq, &e) != 0)
        return reply_error(cn, &e);
    srv_request *rq = &j->rq;
    srv_request_defaults(rq, &srv->defaults);

    /* the prompts' ids: one for chat, one per prompt for completions */
    int32_t n_prompts = kind == SRV_CHAT ? 1 : rq->n_prompts;
    int32_t *pids[SRV_MAX_CHOICES] = {0};
    int32_t pn[SRV_MAX_CHOICES] = {0};
    enum MHD_Result res = MHD_NO;
    int failed = 0;
    for (int32_t p = 0; p < n_prompts && !failed; p++) {
        char param[32];
        snprintf(param, sizeof param, n_prompts > 1 ? "prompt[%d]" : "prompt",
                 (int)p);
        if (kind == SRV_CHAT) {
            char *rendered = NULL;
            failed = srv_chat_prompt(srv->tok, srv->tpl, rq, &pids[p], &pn[p],
                                     &rendered, &e) != 0;
            j->think_open = ends_in_think(rendered);
            free(rendered);
        } else {
            failed = completion_ids(srv, &rq->prompts[p], param, &pids[p],
                                    &pn[p], &e) != 0;
        }
        if (failed) {
            res = reply_error(cn, &e);
            break;
        }
        const char *what = kind == SRV_CHAT ? "messages" : param;
        if (pn[p] >= srv->ctx) {
            failed = 1;
            res =
                fail(cn, 400, "invalid_request_error",
                     "context_length_exceeded", what,
                     "the prompt is %d tokens; this server's context is "
                     "%lld tokens, so at most %lld fit with one to generate",
                     (int)pn[p], (long long)srv->ctx, (long long)srv->ctx - 1);
        } else if (rq->max_tokens > 0 &&
                   (int64_t)pn[p] + rq->max_tokens > srv->ctx) {
            failed = 1;
            res = fail(cn, 400, "invalid_request_error",
                       "context_length_exceeded", "max_tokens",
                       "'max_tokens' is %d, but the prompt's %d tokens leave "
                       "%lld of this server's %lld-token context",
                       (int)rq->max_tokens, (int)pn[p],
                       (long long)(srv->ctx - pn[p]), (long long)srv->ctx);
        }
    }
    /* the default length: generation_config.json's max_new_tokens, else
     * OpenAI's 16 for completions, else what the context leaves */
    int32_t max_tokens = rq->max_tokens;
    if (max_tokens <= 0)
        max_tokens = srv->defaults.max_tokens > 0 ? srv->defaults.max_tokens
                     : kind == SRV_COMPLETION     ? 16
                                                  : 0;

    int32_t n_per = rq->n > 0 ? rq->n : 1;
    int32_t n_ch = n_prompts * n_per;
    if (n_ch < 1 || n_ch > SRV_MAX_CHOICES)
        n_ch = 1; /* not reached: srv_request_parse bounds both */
    if (!failed) {
        j->ch = calloc(SRV_MAX_CHOICES, sizeof *j->ch);
        if (!j->ch) {
            failed = 1;
            res = fail(cn, 500, "server_error", NULL, NULL, "out of memory");
        }
    }
    for (int32_t i = 0; i < n_ch && !failed; i++) {
        srv_choice *c = &j->ch[i];
        c->job = j;
        c->index = i;
        j->n_ch = i + 1;
        if (kind == SRV_CHAT) {
            char base[48];
            snprintf(base, sizeof base, "call_%.12s%d",
                     j->rid + strlen(j->rid) - 12, (int)i);
            srv_reply_init(&c->reply, !srv->p.no_reasoning_split, j->think_open,
                           rq->tools && rq->tool_choice != SRV_TOOLS_NONE,
                           base);
        } else if (rq->echo && echo_text(srv, &rq->prompts[i / n_per], &c->echo,
                                         &c->echo_len) != 0) {
            failed = 1;
            res = fail(cn, 500, "server_error", NULL, NULL,
                       "could not decode the prompt for echo");
        }
    }

    /* The vocabulary checks the lane makes again, here so that the error
     * names the parameter at fault. */
    int32_t vocab = srv->engine->info.vocab;
    for (int32_t p = 0; p < n_prompts && !failed && kind == SRV_COMPLETION;
         p++) {
        for (int32_t i = 0; i < pn[p]; i++) {
            if (pids[p][i] >= vocab) {
                failed = 1;
                res = fail(cn, 400, "invalid_request_error", "invalid_value",
                           "prompt",
                           "'prompt'[%d] = %d is outside the vocabulary of %d",
                           (int)i, (int)pids[p][i], (int)vocab);
                break;
            }
        }
    }
    if (!failed) {
        const char *bad_field = NULL;
        loom_err verr;
        if (loom_sample_params_check_field(&rq->sample, vocab, &bad_field,
                                           &verr) != LOOM_OK) {
            failed = 1;
            res = fail(cn, 400, "invalid_request_error", "invalid_value",
                       bad_field, "%s", verr.msg);
        }
    }
    if (!failed) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(cn->c, MHD_CONNECTION_INFO_CONNECTION_FD);
        j->fd = ci ? (loom_socket)ci->connect_fd : (loom_socket)-1;
        j->add_delay = (double)(loom_now_ns() - cn->t0) / 1e9;
        if (srv->p.request_timeout_s > 0)
            j->deadline = cn->t0 + (uint64_t)(srv->p.request_timeout_s * 1e9);
    }
    loom_stream_params *sps =
        failed ? NULL : (loom_stream_params *)calloc((size_t)n_ch, sizeof *sps);
    if (!failed && !sps) {
        failed = 1;
        res = fail(cn, 500, "server_error", NULL, NULL, "out of memory");
    }
    for (int32_t i = 0; i < n_ch && !failed; i++) {
        srv_choice *c = &j->ch[i];
        loom_stream_params sp;
        memset(&sp, 0, sizeof sp);
        sp.prompt = pids[i / n_per];
        sp.n_prompt = pn[i / n_per];
        sp.sample = rq->sample;
        /* choices of one request: seeds derived from the request's, the
         * first one the request's own */
        if (sp.sample.has_seed)
            sp.sample.seed += (uint64_t)i * 0x9E3779B97F4A7C15ull;
        sp.max_tokens = max_tokens;
        if (max_tokens > 0 && sp.n_prompt + (int64_t)max_tokens > srv->ctx)
            sp.max_tokens = (int32_t)(srv->ctx - sp.n_prompt);
        sp.stop = rq->n_stop ? rq->stop : NULL;
        sp.n_stop = rq->n_stop;
        sp.ignore_eos = rq->ignore_eos;
        sp.no_speculation = rq->no_speculation;
        if (rq->echo && rq->logprobs) {
            /* the prompt's first token has no logprob: a null entry */
            c->plp = calloc(16, sizeof *c->plp);
            if (!c->plp) {
                failed = 1;
                res =
                    fail(cn, 500, "server_error", NULL, NULL, "out of memory");
                break;
            }
            c->cap_plp = 16;
            c->n_plp = 1;
            c->plp[0].none = 1;
            c->plp[0].token = sp.prompt[0];
            sp.prompt_logprobs = 1;
        }
        sp.cb = job_event;
        sp.user = c;
        sps[i] = sp;
    }
    /* a prompt's n choices go to the lane as one group, which prefills the
     * prompt once (issue 16) */
    for (int32_t p = 0; p < n_prompts && !failed; p++) {
        int32_t first = p * n_per;
        uint64_t ids[SRV_MAX_CHOICES];
        /* the streams' references, taken before their first event can
         * drop them */
        loom_mutex_lock(srv->mu);
        j->refs += n_per;
        loom_mutex_unlock(srv->mu);
        loom_err err;
        /* The ids and n_added are written under mu before any event of the
         * streams can be seen: the lane delivers on its own thread only
         * after add returns. */
        loom_mutex_lock(j->mu);
        loom_status st =
            loom_lane_add_group(srv->lane, sps + first, n_per, ids, &err);
        if (st == LOOM_OK) {
            for (int32_t k = 0; k < n_per; k++)
                j->ch[first + k].id = ids[k];
            j->n_added = first + n_per;
        }
        loom_mutex_unlock(j->mu);
        if (st != LOOM_OK) {
            for (int32_t k = 0; k < n_per; k++)
                job_unref(j); /* no lane reference after all */
            failed = 1;
            job_cancel(j, 0); /* the choices already added */
            res = lane_refused(cn, st, &err);
        }
    }
    free(sps);
    for (int32_t p = 0; p < n_prompts; p++)
        free(pids[p]);
    if (failed)
        return res;

    if (rq->stream) {
        loom_mutex_lock(srv->mu);
        j->refs++; /* the response body's reference */
        loom_mutex_unlock(srv->mu);
        struct MHD_Response *r = MHD_create_response_from_callback(
            MHD_SIZE_UNKNOWN, 16384, sse_read, j, sse_free);
        if (!r) {
            job_cancel(j, 0);
            job_unref(j);
            return MHD_NO;
        }
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        add_cors(cn, r);
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        MHD_add_response_header(r, "X-Accel-Buffering", "no");
        cn->status = 200;
        enum MHD_Result ok = MHD_queue_response(cn->c, 200, r);
        MHD_destroy_response(r);
        return ok;
    }

    /* not streaming: wait here (one thread per connection) for the end,
     * looking now and then whether the client is still there */
    loom_mutex_lock(j->mu);
    uint64_t next_check = loom_now_ns();
    while (j->n_done < j->n_added) {
        loom_cond_timedwait(j->cv, j->mu, SRV_POLL_MS);
        /* by the clock: tokens keep signalling, so timeouts may never come */
        uint64_t now = loom_now_ns();
        job_check_deadline(j, now);
        if (j->cancel || now < next_check)
            continue;
        next_check = now + SRV_POLL_MS * 1000000ull;
        if (loom_socket_peer_gone(j->fd)) {
            loom_mutex_unlock(j->mu);
            job_cancel(j, 1);
            loom_mutex_lock(j->mu);
        }
    }
    int client_gone = j->client_gone, timed_out = j->timed_out;
    int32_t usage_prompt, usage_gen;
    job_usage(j, &usage_prompt, &usage_gen);
    loom_mutex_unlock(j->mu);
    if (client_gone)
        return MHD_NO; /* nobody to answer */
    if (timed_out) {
        int32_t n_gen = 0;
        for (int32_t i = 0; i < n_ch; i++)
            n_gen += j->ch[i].n_gen;
        return fail(cn, 504, "server_error", "timeout", NULL,
                    "the request ran past the server's limit of %g s; its "
                    "streams were ended after %d tokens",
                    srv->p.request_timeout_s, (int)n_gen);
    }
    for (int32_t i = 0; i < n_ch; i++) {
        if (j->ch[i].finish == LOOM_FINISH_ERROR)
            return fail(cn, 500, "server_error", NULL, NULL,
                        "generation failed: %s", j->ch[i].error);
        if (j->ch[i].finish == LOOM_FINISH_CANCELLED)
            return fail(cn, 503, "server_error", "shutting_down", NULL,
                        "the server stopped before the request finished");
    }
    /* n_ch is in [1, SRV_MAX_CHOICES] (checked at parse) */
    srv_result rs[SRV_MAX_CHOICES];
    srv_buf texts[SRV_MAX_CHOICES];
    memset(rs, 0, sizeof rs);
    memset(texts, 0, sizeof texts);
    char *body = NULL;
    {
        for (int32_t i = 0; i < n_ch; i++) {
            srv_choice *c = &j->ch[i];
            srv_result *r = &rs[i];
            result_of(j, c, r);
            if (kind == SRV_CHAT) {
                srv_reply_feed(&c->reply, c->text.data ? c->text.data : "",
                               c->text.len);
                srv_reply_finish(&c->reply);
                reply_result(c, r);
            } else {
                srv_buf_add(&texts[i], c->echo ? c->echo : "", c->echo_len);
                srv_buf_add(&texts[i], c->text.data ? c->text.data : "",
                            c->text.len);
                r->text = texts[i].data ? texts[i].data : "";
                r->text_len = texts[i].len;
            }
            r->lp = c->lp;
            r->n_lp = c->n_lp;
            if (c->plp) {
                /* echo: the prompt's entries, then the completion's */
                srv_token_lp *all =
                    realloc(c->plp, (size_t)(c->n_plp + c->n_lp) * sizeof *all);
                if (all) {
                    if (c->n_lp)
                        memcpy(all + c->n_plp, c->lp,
                               (size_t)c->n_lp * sizeof *all);
                    c->plp = all;
                    c->cap_plp = c->n_plp + c->n_lp;
                    r->lp = all;
                    r->n_lp = c->n_plp + c->n_lp;
                }
            }
            r->finish = choice_finish(c, c->finish);
        }
        body = srv_response_json(rs, n_ch, rq->logprobs, piece_of, srv->lane,
                                 usage_prompt, usage_gen);
    }
    for (int32_t i = 0; i < n_ch; i++)
        srv_buf_free(&texts[i]);
    if (!body)
        return fail(cn, 500, "server_error", NULL, NULL, "out of memory");
    return reply(cn, 200, "application/json", body);
}

/* Constant-time comparison of two digests. */
static int digest_eq(const uint8_t *a, const uint8_t *b)
{
    uint8_t d = 0;
    for (int i = 0; i < SRV_KEY_DIGEST_SIZE; i++)
        d |= (uint8_t)(a[i] ^ b[i]);
    return d == 0;
}

/* Checks the key of a request ('Authorization: Bearer KEY' or
 * 'x-api-key: KEY'); 0 when it may proceed. */
static int authorize(srv_conn *cn)
{
    loom_server *srv = cn->srv;
    const char *h =
        MHD_lookup_connection_value(cn->c, MHD_HEADER_KIND, "Authorization");
    size_t len = 0;
    const char *token = srv_bearer_token(h, &len);
    if (!token) {
        token =
            MHD_lookup_connection_value(cn->c, MHD_HEADER_KIND, "x-api-key");
        len = token ? strlen(token) : 0;
    }
    loom_mutex_lock(srv->mu);
    if (!srv->keys && !srv->has_key) {
        loom_mutex_unlock(srv->mu);
        return 0;
    }
    const char *label =
        token && srv->keys ? srv_keyring_check(srv->keys, token, len) : NULL;
    if (!label && token && srv->has_key) {
        uint8_t d[SRV_KEY_DIGEST_SIZE];
        srv_key_digest(token, len, d);
        if (digest_eq(d, srv->key_digest))
            label = "api-key";
    }
    if (label) {
        snprintf(cn->key, sizeof cn->key, "%s", label);
        cn->has_key = 1;
    }
    loom_mutex_unlock(srv->mu);
    if (label)
        return 0;
    fail(cn, 401, "invalid_request_error", "invalid_api_key", NULL,
         token ? "incorrect API key provided"
               : "no API key: send 'Authorization: Bearer <key>' or "
                 "'x-api-key: <key>'");
    return -1;
}

/* The Access-Control-Allow-Origin value for the request's Origin: "*" or
 * the origin itself when allowed, else NULL. */
static const char *cors_of(loom_server *srv, struct MHD_Connection *c)
{
    const char *origin =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (!origin)
        return NULL;
    for (int i = 0; i < srv->n_cors; i++) {
        if (!strcmp(srv->cors[i], "*"))
            return "*";
        if (!strcmp(srv->cors[i], origin))
            return origin;
    }
    return NULL;
}

/* A CORS preflight from an allowed origin: 204 with what may follow. */
static enum MHD_Result reply_preflight(srv_conn *cn)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    add_cors(cn, r);
    MHD_add_response_header(r, "Access-Control-Allow-Methods",
                            "GET, POST, OPTIONS");
    const char *want = MHD_lookup_connection_value(
        cn->c, MHD_HEADER_KIND, "Access-Control-Request-Headers");
    MHD_add_response_header(r, "Access-Control-Allow-Headers",
                            want ? want
                                 : "Authorization, Content-Type, x-api-key");
    MHD_add_response_header(r, "Access-Control-Max-Age", "600");
    cn->status = 204;
    enum MHD_Result ok = MHD_queue_response(cn->c, 204, r);
    MHD_destroy_response(r);
    return ok;
}

typedef struct srv_route {
    const char *path;
    const char *method; /* GET routes answer HEAD as well */
} srv_route;

/* /v1/models/{id} */
static const srv_route MODEL_ROUTE = {"/v1/models/", "GET"};

static const srv_route ROUTES[] = {
    {"/v1/completions", "POST"}, {"/v1/chat/completions", "POST"},
    {"/v1/models", "GET"},       {"/health", "GET"},
    {"/metrics", "GET"},         {"/tokenize", "POST"},
    {"/detokenize", "POST"},     {"/version", "GET"},
};

static enum MHD_Result dispatch(srv_conn *cn)
{
    const char *url = cn->route;
    /* a preflight carries no key; it only asks what may follow */
    if (cn->cors && !strcmp(cn->method, "OPTIONS"))
        return reply_preflight(cn);
    if (!cn->srv->p.no_webui && srv_webui_has(url))
        return srv_webui_reply(cn->c, url, cn->method, &cn->status);
    int v1 = strncmp(url, "/v1/", 4) == 0 || strcmp(url, "/v1") == 0 ||
             !strcmp(url, "/tokenize") || !strcmp(url, "/detokenize");
    if (v1 && authorize(cn) != 0)
        return MHD_YES; /* 401 queued */
    const srv_route *route = NULL;
    for (size_t i = 0; i < sizeof ROUTES / sizeof ROUTES[0]; i++)
        if (strcmp(url, ROUTES[i].path) == 0)
            route = &ROUTES[i];
    if (strncmp(url, MODEL_ROUTE.path, strlen(MODEL_ROUTE.path)) == 0 &&
        url[strlen(MODEL_ROUTE.path)])
        route = &MODEL_ROUTE;
    if (!route)
        return fail(cn, 404, "invalid_request_error", "not_found", NULL,
                    "no route %s %s", cn->method, url);
    int get = strcmp(route->method, "GET") == 0;
    if (strcmp(cn->method, route->method) != 0 &&
        !(get && strcmp(cn->method, "HEAD") == 0)) {
        srv_error e;
        srv_error_set(&e, 405, "invalid_request_error", "method_not_allowed",
                      NULL, "%s takes %s, not %s", url, route->method,
                      cn->method);
        snprintf(cn->error, sizeof cn->error, "%s", e.message);
        char *body = srv_error_json(&e);
        struct MHD_Response *r = MHD_create_response_from_buffer(
            strlen(body), body, MHD_RESPMEM_MUST_FREE);
        if (!r) {
            free(body);
            return MHD_NO;
        }
        MHD_add_response_header(r, "Content-Type", "application/json");
        add_cors(cn, r);
        MHD_add_response_header(r, "Allow", get ? "GET, HEAD" : route->method);
        cn->status = 405;
        enum MHD_Result ok = MHD_queue_response(cn->c, 405, r);
        MHD_destroy_response(r);
        return ok;
    }
    if (cn->too_big)
        return fail(cn, 413, "invalid_request_error", "body_too_large", NULL,
                    "the request body is over the %zu byte limit",
                    cn->srv->max_body);
    if (route == &ROUTES[0])
        return handle_generate(cn, SRV_COMPLETION);
    if (route == &ROUTES[1])
        return handle_generate(cn, SRV_CHAT);
    if (route == &ROUTES[2])
        return handle_models(cn);
    if (route == &MODEL_ROUTE)
        return handle_model(cn, url + strlen(MODEL_ROUTE.path));
    if (route == &ROUTES[3])
        return handle_health(cn);
    if (route == &ROUTES[5])
        return handle_tokenize(cn);
    if (route == &ROUTES[6])
        return handle_detokenize(cn);
    if (route == &ROUTES[7])
        return reply(cn, 200, "application/json",
                     str_dup("{\"version\":\"" LOOM_VERSION "\"}"));
    return handle_metrics(cn);
}

/* Counts the Content-Length headers (names are case-insensitive). */
static enum MHD_Result count_length(void *cls, enum MHD_ValueKind kind,
                                    const char *key, const char *value)
{
    (void)kind;
    (void)value;
    static const char name[] = "content-length";
    size_t i = 0;
    for (; key[i] && name[i]; i++)
        if ((key[i] | 0x20) != name[i] && !(key[i] == '-' && name[i] == '-'))
            break;
    if (!key[i] && !name[i])
        ++*(int *)cls;
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c,
                                  const char *url, const char *method,
                                  const char *version, const char *data,
                                  size_t *data_size, void **con_cls)
{
    (void)version;
    loom_server *srv = cls;
    srv_conn *cn = *con_cls;
    if (!cn) {
        cn = calloc(1, sizeof *cn);
        if (!cn)
            return MHD_NO;
        cn->srv = srv;
        cn->c = c;
        cn->t0 = loom_now_ns();
        cn->t_wall = loom_wall_time();
        snprintf(cn->method, sizeof cn->method, "%s", method);
        cn->cors = cors_of(srv, c);
        cn->route = str_dup(url ? url : "");
        *con_cls = cn;
        if (!cn->route)
            return MHD_NO;
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        cn->peer = ci ? ci->socket_context : NULL;
        /* One request a connection (behind the gate): a later request's
         * head would reach libmicrohttpd unchecked, and it answers a
         * malformed one with an HTML page. Keeping a connection alive saves
         * a connect, which is small beside a generation; libmicrohttpd
         * reads this as the client's "Connection: close". Under TLS the
         * gate cannot read heads, so nothing is gained there. */
        if (!srv->tls_cert)
            MHD_set_connection_value(c, MHD_HEADER_KIND, "Connection", "close");
        /* A declared length over the limit is refused before reading it. */
        const char *cl =
            MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        uint64_t declared = cl ? strtoull(cl, NULL, 10) : 0;
        int chunked = !cl && MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                         "Transfer-Encoding");
        srv_peer_headers_done(srv->deadlines, cn->peer,
                              chunked ? (int64_t)srv->max_body
                              : declared > srv->max_body ? 0
                                                         : (int64_t)declared);
        /* two lengths could be read two ways by a proxy and by us */
        int n_lengths = 0;
        MHD_get_connection_values(c, MHD_HEADER_KIND, count_length, &n_lengths);
        if (n_lengths > 1) {
            cn->too_big = 1; /* what is sent is read and dropped */
            return fail(cn, 400, "invalid_request_error", "invalid_request",
                        NULL, "the request has %d Content-Length headers",
                        n_lengths);
        }
        if (cl && declared > srv->max_body) {
            cn->too_big = 1;
            return fail(cn, 413, "invalid_request_error", "body_too_large",
                        NULL, "the request body is over the %zu byte limit",
                        srv->max_body);
        }
        return MHD_YES;
    }
    if (*data_size) {
        /* Past the limit the rest is read and dropped, so the 413 still
         * reaches a client that sends without a length (chunked). */
        if (!cn->too_big) {
            if (cn->body.len + *data_size > srv->max_body) {
                cn->too_big = 1;
                srv_buf_free(&cn->body);
            } else if (srv_buf_add(&cn->body, data, *data_size) != 0) {
                return MHD_NO;
            }
        }
        *data_size = 0;
        return MHD_YES;
    }
    srv_peer_request_done(srv->deadlines, cn->peer);
    if (cn->status)
        return MHD_YES; /* answered already (early 413) */
    return dispatch(cn);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)c;
    loom_server *srv = cls;
    srv_conn *cn = *con_cls;
    if (!cn)
        return;
    *con_cls = NULL;
    srv_peer_answered(srv->deadlines, cn->peer);
    srv_job *j = cn->job;
    int gone = toe != MHD_REQUEST_TERMINATED_COMPLETED_OK;
    srv_log_entry e;
    memset(&e, 0, sizeof e);
    e.time = cn->t_wall;
    e.method = cn->method;
    e.route = cn->route;
    e.status = cn->status;
    e.key = cn->has_key ? cn->key : NULL;
    e.error = cn->error[0] ? cn->error : NULL;
    e.duration_s = (double)(loom_now_ns() - cn->t0) / 1e9;
    e.ttft_s = -1;
    if (j) {
        if (gone)
            job_cancel(j, 1);
        loom_mutex_lock(j->mu);
        /* a cancelled stream ends at the lane's next round: wait for it
         * briefly so the log line says how it ended */
        if (j->cancel) {
            uint64_t end = loom_now_ns() + 2000000000ull;
            while (j->n_done < j->n_added && loom_now_ns() < end)
                loom_cond_timedwait(j->cv, j->mu, SRV_POLL_MS);
        }
        e.stream = j->rq.stream;
        job_usage(j, &e.prompt_tokens, &e.completion_tokens);
        e.finish = j->n_added > 0 && j->n_done == j->n_added
                       ? srv_finish_reason(j->ch[0].finish)
                       : NULL;
        e.ttft_s = j->ttft;
        e.client_gone = j->client_gone || gone;
        loom_mutex_unlock(j->mu);
    } else {
        e.client_gone = gone;
    }
    if (e.status == 0)
        e.status = 499; /* closed before an answer, as nginx logs it */
    srv_metrics_request(srv->metrics, cn->route, e.status);
    if (srv->log) {
        loom_err err;
        if (srv_log_write(srv->log, &e, &err) != LOOM_OK)
            loom_log(LOOM_LOG_WARN, "request log: %s", err.msg);
    }
    if (j)
        job_unref(j);
    srv_buf_free(&cn->body);
    free(cn->route);
    free(cn);
}

/* Lists each connection with its read deadline while it is open. */
static void on_connection(void *cls, struct MHD_Connection *c,
                          void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    loom_server *srv = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        *socket_context =
            ci ? srv_peer_add(srv->deadlines, (loom_socket)ci->connect_fd)
               : NULL;
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        srv_peer_remove(srv->deadlines, *socket_context);
        *socket_context = NULL;
    }
}

/* A connection past the gate: libmicrohttpd takes it (and closes it if it
 * cannot). */
static void gate_pass(void *ctx, loom_socket fd, const void *addr,
                      size_t addr_len)
{
    loom_server *srv = ctx;
    if (MHD_add_connection(srv->mhd, (MHD_socket)fd,
                           (const struct sockaddr *)addr,
                           (socklen_t)addr_len) != MHD_YES)
        loom_log(LOOM_LOG_DEBUG, "http: a connection could not be added");
}

static void gate_refused(void *ctx, int status)
{
    loom_server *srv = ctx;
    srv_metrics_request(srv->metrics, "", status);
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = 0;
    loom_log(LOOM_LOG_DEBUG, "http: %s", msg);
}

/* ---------------------------------------------------------------- life */

static char *dup_or_null(const char *s)
{
    return s ? str_dup(s) : NULL;
}

/* Reads --tls-cert and --tls-key (PEM) for libmicrohttpd's GnuTLS. */
static loom_status tls_load(loom_server *srv, const loom_server_params *p,
                            loom_err *err)
{
    if (!p->tls_cert || !p->tls_key)
        return loom_err_set(err, LOOM_ERR_INVALID,
                            "TLS needs both a certificate and a key");
    if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES)
        return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                            "this libmicrohttpd was built without TLS");
    size_t n = 0;
    loom_status st = loom_read_file(p->tls_cert, &srv->tls_cert, &n, err);
    if (st == LOOM_OK)
        st = loom_read_file(p->tls_key, &srv->tls_key, &srv->tls_key_len, err);
    if (st != LOOM_OK)
        return st;
    if (!strstr(srv->tls_cert, "-----BEGIN CERTIFICATE-----"))
        return loom_err_set(err, LOOM_ERR_FORMAT, "%s: not a PEM certificate",
                            p->tls_cert);
    if (!strstr(srv->tls_key, "PRIVATE KEY-----"))
        return loom_err_set(err, LOOM_ERR_FORMAT, "%s: not a PEM private key",
                            p->tls_key);
    return LOOM_OK;
}

loom_status loom_server_start(const loom_server_params *params,
                              loom_server **out, loom_err *err)
{
    loom_server *srv = calloc(1, sizeof *srv);
    if (!srv)
        return loom_err_set(err, LOOM_ERR_NOMEM, "server: out of memory");
    srv->p = *params;
    srv->listen_sock = -1;
    srv->host = str_dup(params->host ? params->host : "127.0.0.1");
    srv->key_file = dup_or_null(params->api_key_file);
    srv->log_path = dup_or_null(params->request_log);
    srv->model_name = dup_or_null(params->model_name);
    srv->max_body = params->max_body ? params->max_body : SRV_DEFAULT_BODY;
    srv->tpl_file = dup_or_null(params->chat_template_file);
    if (params->api_key) {
        srv_key_digest(params->api_key, strlen(params->api_key),
                       srv->key_digest);
        srv->has_key = 1;
    }
    if (params->n_cors_origins > 0) {
        srv->cors = calloc((size_t)params->n_cors_origins, sizeof *srv->cors);
        for (int i = 0; srv->cors && i < params->n_cors_origins; i++)
            if ((srv->cors[i] = str_dup(params->cors_origins[i])))
                srv->n_cors = i + 1;
    }
    /* the caller's arrays are not kept */
    srv->p.cors_origins = NULL;
    srv->p.api_key = NULL;
    srv->mu = loom_mutex_new();
    srv->cv = loom_cond_new();
    srv->metrics = srv_metrics_new();
    loom_status st = LOOM_OK;
    if (!srv->host || !srv->mu || !srv->cv || !srv->metrics ||
        (params->api_key_file && !srv->key_file) ||
        (params->request_log && !srv->log_path) ||
        (params->chat_template_file && !srv->tpl_file) ||
        srv->n_cors !=
            (params->n_cors_origins > 0 ? params->n_cors_origins : 0)) {
        st = loom_err_set(err, LOOM_ERR_NOMEM, "server: out of memory");
        goto fail;
    }
    if (params->port < 0 || params->port > 65535) {
        st = loom_err_set(err, LOOM_ERR_INVALID, "--port %d is not a port",
                          params->port);
        goto fail;
    }
    if (srv->key_file) {
        st = srv_keyring_load(srv->key_file, &srv->keys, err);
        if (st != LOOM_OK)
            goto fail;
    }
    if (srv->log_path) {
        st = srv_log_open(srv->log_path, &srv->log, err);
        if (st != LOOM_OK)
            goto fail;
    }
    st = loom_tcp_listen(srv->host, params->port, &srv->listen_sock, &srv->port,
                         err);
    if (st != LOOM_OK)
        goto fail;
    unsigned timeout =
        params->idle_timeout_s > 0 ? (unsigned)params->idle_timeout_s : 60u;
    uint32_t read_ms = params->read_timeout_ms > 0
                           ? (uint32_t)params->read_timeout_ms
                           : SRV_READ_TIMEOUT_MS;
    st = srv_deadlines_new(read_ms, read_ms, SRV_MIN_BODY_RATE, timeout * 1000u,
                           SRV_WAITING_MAX, &srv->deadlines, err);
    if (st != LOOM_OK)
        goto fail;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION |
                     MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
                     MHD_USE_ITC | MHD_USE_ERROR_LOG;
    if (params->tls_cert || params->tls_key) {
        st = tls_load(srv, params, err);
        if (st != LOOM_OK)
            goto fail;
        flags |= MHD_USE_TLS;
    }
    /* The gate reads plain request heads; under TLS they are encrypted, so
     * libmicrohttpd accepts on the socket itself (the read deadlines still
     * hold through on_connection). */
    struct MHD_OptionItem listen[] = {
        {MHD_OPTION_LISTEN_SOCKET, (intptr_t)srv->listen_sock, NULL},
        {MHD_OPTION_END, 0, NULL},
    };
    if (!srv->tls_cert)
        flags |= MHD_USE_NO_LISTEN_SOCKET;
    /* the PEM options only with TLS: MHD complains of them otherwise */
    struct MHD_OptionItem tls[] = {
        {MHD_OPTION_HTTPS_MEM_KEY, 0, srv->tls_key},
        {MHD_OPTION_HTTPS_MEM_CERT, 0, srv->tls_cert},
        {MHD_OPTION_END, 0, NULL},
    };
    srv->mhd = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, srv, MHD_OPTION_EXTERNAL_LOGGER,
        mhd_log, srv, MHD_OPTION_ARRAY, srv->tls_cert ? tls : tls + 2,
        MHD_OPTION_ARRAY, srv->tls_cert ? listen : listen + 1,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, srv,
        MHD_OPTION_CONNECTION_TIMEOUT, timeout, MHD_OPTION_CONNECTION_LIMIT,
        SRV_CONN_LIMIT, MHD_OPTION_END);
    if (!srv->mhd) {
        st = loom_err_set(err, LOOM_ERR_IO,
                          "could not start the HTTP%s server on %s:%d%s",
                          srv->tls_cert ? "S" : "", srv->host, srv->port,
                          srv->tls_cert ? " (is the key the certificate's, "
                                          "both PEM?)"
                                        : "");
        goto fail;
    }
    if (!srv->tls_cert) {
        st = srv_gate_start(srv->listen_sock, read_ms, srv->max_body, gate_pass,
                            gate_refused, srv, &srv->gate, err);
        if (st != LOOM_OK)
            goto fail;
    }
    *out = srv;
    return LOOM_OK;
fail:
    loom_server_free(srv);
    return st;
}

int loom_server_port(const loom_server *srv)
{
    return srv->port;
}

/* The last path component of a directory, for the model's name. */
static char *base_name(const char *dir)
{
    size_t n = strlen(dir);
    while (n > 1 && (dir[n - 1] == '/' || dir[n - 1] == '\\'))
        n--;
    size_t s = n;
    while (s > 0 && dir[s - 1] != '/' && dir[s - 1] != '\\')
        s--;
    char *b = malloc(n - s + 1);
    if (b) {
        memcpy(b, dir + s, n - s);
        b[n - s] = 0;
    }
    return b;
}

/* generation_config.json's sampling defaults and max_new_tokens, as vLLM
 * applies them to requests that leave them unset (do_sample is not read,
 * as vLLM does not). */
static void generation_defaults(json_t *gc, srv_defaults *d)
{
    memset(d, 0, sizeof *d);
    loom_sample_params_default(&d->sample);
    if (!json_is_object(gc))
        return;
    json_t *v = json_object_get(gc, "temperature");
    if (json_is_number(v)) {
        d->sample.temperature = (float)json_number_value(v);
        d->set |= SRV_SET_TEMPERATURE;
    }
    v = json_object_get(gc, "top_p");
    if (json_is_number(v)) {
        d->sample.top_p = (float)json_number_value(v);
        d->set |= SRV_SET_TOP_P;
    }
    v = json_object_get(gc, "top_k");
    if (json_is_integer(v) && json_integer_value(v) >= 0 &&
        json_integer_value(v) <= INT32_MAX) {
        d->sample.top_k = (int32_t)json_integer_value(v);
        d->set |= SRV_SET_TOP_K;
    }
    v = json_object_get(gc, "min_p");
    if (json_is_number(v)) {
        d->sample.min_p = (float)json_number_value(v);
        d->set |= SRV_SET_MIN_P;
    }
    v = json_object_get(gc, "repetition_penalty");
    if (json_is_number(v) && json_number_value(v) > 0) {
        d->sample.repeat_penalty = (float)json_number_value(v);
        d->set |= SRV_SET_REPETITION;
    }
    v = json_object_get(gc, "max_new_tokens");
    if (json_is_integer(v) && json_integer_value(v) > 0 &&
        json_integer_value(v) <= INT32_MAX)
        d->max_tokens = (int32_t)json_integer_value(v);
}

loom_status loom_server_load(loom_server *srv, const loom_engine_params *ep,
                             loom_err *err)
{
    loom_engine *engine = NULL;
    loom_tokenizer *tok = NULL;
    loom_chat_template *tpl = NULL;
    loom_lane *lane = NULL;
    loom_status st = loom_engine_open(ep, &engine, err);
    if (st != LOOM_OK)
        return st;
    const char *dir = loom_checkpoint_dir(engine->ckpt);
    st = loom_tokenizer_open(dir, &tok, err);
    if (st != LOOM_OK)
        goto fail;
    st = srv->tpl_file
             ? loom_chat_template_load_file(dir, srv->tpl_file, &tpl, err)
             : srv_chat_template_open(engine->ckpt, tok, &tpl, err);
    if (st != LOOM_OK)
        goto fail;
    int64_t ctx =
        srv->p.max_context > 0 ? srv->p.max_context : engine->info.max_context;
    if (engine->info.max_context > 0 && ctx > engine->info.max_context) {
        st = loom_err_set(err, LOOM_ERR_RANGE,
                          "--ctx %lld is over the model's context %lld",
                          (long long)ctx, (long long)engine->info.max_context);
        goto fail;
    }
    loom_lane_params lp;
    memset(&lp, 0, sizeof lp);
    lp.engine = engine;
    lp.tokenizer = tok;
    lp.max_streams = srv->p.parallel;
    lp.max_queued =
        srv->p.max_queued > 0 ? srv->p.max_queued : SRV_DEFAULT_QUEUE;
    lp.max_context = ctx;
    st = loom_lane_new(&lp, &lane, err);
    if (st != LOOM_OK)
        goto fail;
    st = loom_lane_start(lane, err);
    if (st != LOOM_OK)
        goto fail;
    if (!srv->model_name) {
        /* a hub id is served under that id, not the snapshot's hash */
        srv->model_name =
            loom_dir_exists(ep->model) ? base_name(dir) : str_dup(ep->model);
        if (!srv->model_name) {
            st = loom_err_set(err, LOOM_ERR_NOMEM, "server: out of memory");
            goto fail;
        }
    }
    if (!srv->p.no_generation_config)
        generation_defaults(loom_checkpoint_generation_config(engine->ckpt),
                            &srv->defaults);
    srv->engine = engine;
    srv->tok = tok;
    srv->tpl = tpl;
    srv->lane = lane;
    srv->ctx = ctx;
    srv->created = (int64_t)loom_wall_time();
    loom_mutex_lock(srv->mu);
    srv->ready = !srv->stopping;
    loom_mutex_unlock(srv->mu);
    return LOOM_OK;
fail:
    loom_lane_free(lane);
    srv_chat_template_free(tpl);
    loom_tokenizer_free(tok);
    loom_engine_close(engine);
    return st;
}

void loom_server_describe(const loom_server *srv, loom_server_info *out)
{
    memset(out, 0, sizeof *out);
    out->tls = srv->p.tls_cert != NULL;
    if (!srv->engine)
        return;
    out->model_dir = loom_checkpoint_dir(srv->engine->ckpt);
    out->model_name = srv->model_name;
    out->family = srv->engine->plugin->plugin->name;
    out->device = srv->engine->info.device == LOOM_DEVICE_CUDA ? "cuda" : "cpu";
    out->ctx = srv->ctx;
    out->streams = loom_lane_max_streams(srv->lane);
    out->threads = loom_pool_size(srv->engine->pool);
}

loom_status loom_server_reload_keys(loom_server *srv, loom_err *err)
{
    if (!srv->key_file)
        return LOOM_OK;
    srv_keyring *k = NULL;
    loom_status st = srv_keyring_load(srv->key_file, &k, err);
    if (st != LOOM_OK)
        return st;
    loom_mutex_lock(srv->mu);
    srv_keyring *old = srv->keys;
    srv->keys = k;
    loom_mutex_unlock(srv->mu);
    srv_keyring_free(old);
    return LOOM_OK;
}

/* Waits until no job is left or ms have passed; srv->mu held. */
static void wait_jobs(loom_server *srv, uint32_t ms)
{
    uint64_t end = loom_now_ns() + (uint64_t)ms * 1000000u;
    while (srv->n_jobs > 0) {
        uint64_t now = loom_now_ns();
        if (now >= end)
            break;
        uint64_t left = (end - now) / 1000000u + 1;
        loom_cond_timedwait(srv->cv, srv->mu,
                            left > 1000 ? 1000 : (uint32_t)left);
    }
}

void loom_server_stop(loom_server *srv, uint32_t drain_ms)
{
    loom_mutex_lock(srv->mu);
    if (srv->stopped) {
        loom_mutex_unlock(srv->mu);
        return;
    }
    srv->stopping = 1;
    srv->stopped = 1;
    srv->ready = 0;
    loom_mutex_unlock(srv->mu);

    /* no new connections; those open get 503 for new requests */
    srv_gate_stop(srv->gate);
    srv->gate = NULL;
    if (srv->tls_cert && srv->mhd) {
        /* under TLS libmicrohttpd listens: it hands the socket back */
        MHD_socket sock = MHD_quiesce_daemon(srv->mhd);
        if (sock != MHD_INVALID_SOCKET)
            loom_socket_close((loom_socket)sock);
        srv->listen_sock = -1;
    }
    if (srv->listen_sock != (loom_socket)-1) {
        loom_socket_close(srv->listen_sock);
        srv->listen_sock = -1;
    }
    loom_mutex_lock(srv->mu);
    wait_jobs(srv, drain_ms);
    /* what did not finish in time is cancelled; the streams end with their
     * finish events and their responses complete */
    for (srv_job *j = srv->jobs; j; j = j->next) {
        loom_mutex_lock(j->mu);
        int was = j->cancel || j->n_done == j->n_added;
        j->cancel = 1;
        int32_t n = j->n_added;
        loom_mutex_unlock(j->mu);
        for (int32_t i = 0; !was && srv->lane && i < n; i++)
            loom_lane_cancel(srv->lane, j->ch[i].id);
    }
    wait_jobs(srv, 5000);
    loom_mutex_unlock(srv->mu);

    if (srv->mhd) {
        MHD_stop_daemon(srv->mhd);
        srv->mhd = NULL;
    }
    /* ends what is left with final events on this thread */
    loom_lane_free(srv->lane);
    srv->lane = NULL;
}

void loom_server_free(loom_server *srv)
{
    if (!srv)
        return;
    if (srv->mu)
        loom_server_stop(srv, 0);
    if (srv->listen_sock != (loom_socket)-1)
        loom_socket_close(srv->listen_sock);
    srv_chat_template_free(srv->tpl);
    loom_tokenizer_free(srv->tok);
    loom_engine_close(srv->engine);
    srv_keyring_free(srv->keys);
    srv_log_close(srv->log);
    srv_metrics_free(srv->metrics);
    srv_deadlines_free(srv->deadlines);
    loom_cond_free(srv->cv);
    loom_mutex_free(srv->mu);
    free(srv->host);
    free(srv->key_file);
    free(srv->log_path);
    free(srv->model_name);
    free(srv->tpl_file);
    free(srv->tls_cert);
    if (srv->tls_key) /* the key's text does not outlive the server */
        memset(srv->tls_key, 0, srv->tls_key_len);
    free(srv->tls_key);
    for (int i = 0; i < srv->n_cors; i++)
        free(srv->cors[i]);
    free(srv->cors);
    free(srv);
}
