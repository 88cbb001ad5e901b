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
};

/* One generation request: what the lane delivered, and (streaming) what is
 * still to be sent. Fields under "delivered" are guarded by mu. */
struct srv_job {
    loom_server *srv;
    srv_job *prev, *next; /* in srv->jobs, under srv->mu */
    int refs;             /* under srv->mu */
    loom_mutex *mu;
    loom_cond *cv;
    uint64_t id; /* lane stream id */
    srv_request rq;
    char rid[48];
    int64_t created;
    loom_socket fd;   /* the client's socket, for peer checks */
    uint64_t t0;      /* request arrival (monotonic ns) */
    double add_delay; /* arrival -> loom_lane_add, seconds */

    /* delivered */
    srv_buf text;
    srv_token_lp *lp;
    int32_t n_lp, cap_lp;
    int done;
    loom_finish finish;
    char error[256];
    int32_t n_prompt, n_gen;
    double ttft;
    uint64_t seed;
    int cancel;      /* the HTTP side asked the lane to stop */
    int client_gone; /* ... because the client left */

    /* streaming, owned by the response's thread */
    srv_buf out;
    size_t out_off;
    int sent_role, sent_done;
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
    srv_request_free(&j->rq);
    srv_buf_free(&j->text);
    srv_buf_free(&j->out);
    free(j->lp);
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
    srv_job *j = user;
    loom_mutex_lock(j->mu);
    if (ev->text && ev->text_len)
        srv_buf_add(&j->text, ev->text, ev->text_len);
    if (ev->token >= 0 && j->rq.logprobs) {
        if (j->n_lp == j->cap_lp) {
            int32_t cap = j->cap_lp ? j->cap_lp * 2 : 16;
            srv_token_lp *lp = realloc(j->lp, (size_t)cap * sizeof *lp);
            if (lp) {
                j->lp = lp;
                j->cap_lp = cap;
            }
        }
        if (j->n_lp < j->cap_lp) {
            srv_token_lp *t = &j->lp[j->n_lp++];
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
    j->n_prompt = ev->n_prompt;
    j->n_gen = ev->n_generated;
    j->seed = ev->seed;
    if (j->ttft < 0 && ev->token >= 0)
        j->ttft = j->add_delay + ev->ttft_s;
    int final = ev->finish != LOOM_FINISH_NONE;
    if (final) {
        j->done = 1;
        j->finish = ev->finish;
        if (ev->error)
            snprintf(j->error, sizeof j->error, "%s", ev->error);
    }
    int cancel = j->cancel;
    /* counted before anyone is woken, so a response never runs ahead of
     * the metrics it implies */
    if (final)
        srv_metrics_generation(j->srv->metrics, ev->n_prompt, ev->n_generated,
                               j->ttft);
    loom_cond_broadcast(j->cv);
    loom_mutex_unlock(j->mu);
    if (final)
        job_unref(j); /* the lane's reference */
    return cancel;
}

/* Asks the lane to end the job's stream (idempotent). */
static void job_cancel(srv_job *j, int client_gone)
{
    loom_mutex_lock(j->mu);
    int was = j->cancel || j->done;
    j->cancel = 1;
    if (client_gone && !j->done)
        j->client_gone = 1;
    loom_mutex_unlock(j->mu);
    if (!was)
        loom_lane_cancel(j->srv->lane, j->id);
}

/* Waits until the job has news (text, logprobs, the end) or the client is
 * gone; returns with j->mu held. */
static void job_wait(srv_job *j, int *gone)
{
    *gone = 0;
    loom_mutex_lock(j->mu);
    uint64_t next_check = loom_now_ns() + SRV_POLL_MS * 1000000ull;
    while (!j->done && j->text.len == 0 && j->n_lp == 0) {
        loom_cond_timedwait(j->cv, j->mu, SRV_POLL_MS);
        /* by the clock: empty-text tokens signal without news */
        uint64_t now = loom_now_ns();
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

static void result_of(const srv_job *j, srv_result *r)
{
    memset(r, 0, sizeof *r);
    r->kind = j->rq.kind;
    r->id = j->rid;
    r->model = j->srv->model_name;
    r->created = j->created;
    r->prompt_tokens = j->n_prompt;
    r->completion_tokens = j->n_gen;
    r->seed = j->seed;
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
    srv_buf text = j->text;
    memset(&j->text, 0, sizeof j->text);
    srv_token_lp *lp = j->lp;
    int32_t n_lp = j->n_lp;
    j->lp = NULL;
    j->n_lp = j->cap_lp = 0;
    int done = j->done;
    srv_result r;
    result_of(j, &r);
    loom_finish finish = j->finish;
    char error[256];
    snprintf(error, sizeof error, "%s", j->error);
    loom_mutex_unlock(j->mu);

    const srv_request *rq = &j->rq;
    void *pc = j->srv->lane;
    if (rq->kind == SRV_CHAT && !j->sent_role) {
        srv_chunk_sse(&j->out, &r, 0, NULL, NULL, 1, 0);
        j->sent_role = 1;
    }
    if (text.len || n_lp) {
        r.text = text.data;
        r.text_len = text.len;
        r.lp = lp;
        r.n_lp = n_lp;
        srv_chunk_sse(&j->out, &r, rq->logprobs, piece_of, pc, 0, 0);
        r.text = NULL;
        r.text_len = 0;
        r.lp = NULL;
        r.n_lp = 0;
    }
    if (done) {
        if (finish == LOOM_FINISH_ERROR) {
            srv_error e;
            srv_error_set(&e, 500, "server_error", NULL, NULL,
                          "generation failed: %s", error);
            char *s = srv_error_json(&e);
            srv_buf_addf(&j->out, "data: %s\n\n", s ? s : "{}");
            free(s);
        } else {
            r.finish = srv_finish_reason(finish);
            srv_chunk_sse(&j->out, &r, 0, NULL, NULL, 0, 0);
            if (rq->include_usage)
                srv_chunk_sse(&j->out, &r, 0, NULL, NULL, 0, 1);
        }
        srv_buf_add(&j->out, "data: [DONE]\n\n", 14);
        j->sent_done = 1;
    }
    srv_buf_free(&text);
    free(lp);
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
    /* the response ended before the stream did: the client went away */
    loom_mutex_lock(j->mu);
    int done = j->done;
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
                 srv_models_json(srv->model_name, srv->created));
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
                 srv_model_json(srv->model_name, srv->created));
}

/* Token ids of a request's prompt. Returns 0 or -1 with e filled. */
static int prompt_ids(loom_server *srv, const srv_request *rq, int32_t **ids,
                      int32_t *n, srv_error *e)
{
    if (rq->kind == SRV_CHAT)
        return srv_chat_prompt(srv->tok, srv->tpl, rq->messages, ids, n, e);
    if (rq->prompt_ids) {
        *ids = malloc((size_t)rq->n_prompt_ids * sizeof **ids);
        if (!*ids)
            return srv_error_set(e, 500, "server_error", NULL, NULL,
                                 "out of memory");
        memcpy(*ids, rq->prompt_ids, (size_t)rq->n_prompt_ids * sizeof **ids);
        *n = rq->n_prompt_ids;
        return 0;
    }
    /* A raw completion prompt is the model's input as written: special
     * tokens typed in it are meant (chat content is another matter). */
    loom_err err;
    size_t count = 0;
    if (loom_tokenizer_encode(srv->tok, rq->prompt, rq->prompt_len, 1, ids,
                              &count, &err) != LOOM_OK)
        return srv_error_set(e, 400, "invalid_request_error", "invalid_value",
                             "prompt", "prompt: %s", err.msg);
    if (count == 0 || count > INT32_MAX) {
        free(*ids);
        *ids = NULL;
        return srv_error_set(e, 400, "invalid_request_error", "invalid_value",
                             "prompt", "the prompt encodes to %zu tokens",
                             count);
    }
    *n = (int32_t)count;
    return 0;
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
    const srv_request *rq = &j->rq;

    int32_t *ids = NULL, n_ids = 0;
    if (prompt_ids(srv, rq, &ids, &n_ids, &e) != 0)
        return reply_error(cn, &e);
    j->n_prompt = n_ids;
    if (n_ids >= srv->ctx) {
        free(ids);
        return fail(cn, 400, "invalid_request_error", "context_length_exceeded",
                    kind == SRV_CHAT ? "messages" : "prompt",
                    "the prompt is %d tokens; this server's context is %lld "
                    "tokens, so at most %lld fit with one to generate",
                    (int)n_ids, (long long)srv->ctx, (long long)srv->ctx - 1);
    }

    /* The vocabulary checks the lane makes again, here so that the error
     * names the parameter at fault. */
    int32_t vocab = srv->engine->info.vocab;
    for (int32_t i = 0; i < n_ids && kind == SRV_COMPLETION; i++) {
        if (ids[i] >= vocab) {
            int32_t bad = ids[i];
            free(ids);
            return fail(cn, 400, "invalid_request_error", "invalid_value",
                        "prompt",
                        "'prompt'[%d] = %d is outside the vocabulary of %d",
                        (int)i, (int)bad, (int)vocab);
        }
    }
    const char *bad_field = NULL;
    loom_err verr;
    if (loom_sample_params_check_field(&rq->sample, vocab, &bad_field, &verr) !=
        LOOM_OK) {
        free(ids);
        return fail(cn, 400, "invalid_request_error", "invalid_value",
                    bad_field, "%s", verr.msg);
    }

    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(cn->c, MHD_CONNECTION_INFO_CONNECTION_FD);
    j->fd = ci ? (loom_socket)ci->connect_fd : (loom_socket)-1;

    loom_stream_params sp;
    memset(&sp, 0, sizeof sp);
    sp.prompt = ids;
    sp.n_prompt = n_ids;
    sp.sample = rq->sample;
    sp.max_tokens = rq->max_tokens > 0 ? rq->max_tokens : 0;
    sp.stop = rq->n_stop ? rq->stop : NULL;
    sp.n_stop = rq->n_stop;
    sp.ignore_eos = rq->ignore_eos;
    sp.no_speculation = rq->no_speculation;
    sp.cb = job_event;
    sp.user = j;
    /* the lane's reference, taken before the first event can drop it */
    loom_mutex_lock(srv->mu);
    j->refs++;
    loom_mutex_unlock(srv->mu);
    j->add_delay = (double)(loom_now_ns() - cn->t0) / 1e9;
    loom_err err;
    /* The id is written before any event can arrive: the lane delivers on
     * its own thread only after add returns the stream to its queue, and the
     * callback never reads j->id. */
    loom_status st = loom_lane_add(srv->lane, &sp, &j->id, &err);
    free(ids);
    if (st != LOOM_OK) {
        job_unref(j); /* no lane reference after all */
        if (st == LOOM_ERR_FULL)
            return fail(cn, 429, "rate_limit_error", "queue_full", NULL,
                        "too many requests waiting (%s); retry later", err.msg);
        if (st == LOOM_ERR_STATE)
            return fail(cn, 503, "server_error", "shutting_down", NULL,
                        "the server is shutting down");
        if (st == LOOM_ERR_NOMEM || st == LOOM_ERR_DEVICE)
            return fail(cn, 500, "server_error", NULL, NULL, "%s", err.msg);
        return fail(cn, 400, "invalid_request_error", "invalid_value", NULL,
                    "%s", err.msg);
    }

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
    while (!j->done) {
        loom_cond_timedwait(j->cv, j->mu, SRV_POLL_MS);
        /* by the clock: tokens keep signalling, so timeouts may never come */
        uint64_t now = loom_now_ns();
        if (j->cancel || now < next_check)
            continue;
        next_check = now + SRV_POLL_MS * 1000000ull;
        if (loom_socket_peer_gone(j->fd)) {
            loom_mutex_unlock(j->mu);
            job_cancel(j, 1);
            loom_mutex_lock(j->mu);
        }
    }
    loom_finish finish = j->finish;
    int client_gone = j->client_gone;
    loom_mutex_unlock(j->mu);
    if (client_gone)
        return MHD_NO; /* nobody to answer */
    if (finish == LOOM_FINISH_ERROR)
        return fail(cn, 500, "server_error", NULL, NULL,
                    "generation failed: %s", j->error);
    if (finish == LOOM_FINISH_CANCELLED)
        return fail(cn, 503, "server_error", "shutting_down", NULL,
                    "the server stopped before the request finished");
    srv_result r;
    result_of(j, &r);
    r.text = j->text.data ? j->text.data : "";
    r.text_len = j->text.len;
    r.lp = j->lp;
    r.n_lp = j->n_lp;
    r.finish = srv_finish_reason(finish);
    return reply(cn, 200, "application/json",
                 srv_response_json(&r, rq->logprobs, piece_of, srv->lane));
}

/* Checks the bearer key of a /v1 request; 0 when it may proceed. */
static int authorize(srv_conn *cn)
{
    loom_server *srv = cn->srv;
    const char *h =
        MHD_lookup_connection_value(cn->c, MHD_HEADER_KIND, "Authorization");
    size_t len = 0;
    const char *token = srv_bearer_token(h, &len);
    loom_mutex_lock(srv->mu);
    if (!srv->keys) {
        loom_mutex_unlock(srv->mu);
        return 0;
    }
    const char *label = token ? srv_keyring_check(srv->keys, token, len) : NULL;
    if (label) {
        snprintf(cn->key, sizeof cn->key, "%s", label);
        cn->has_key = 1;
    }
    loom_mutex_unlock(srv->mu);
    if (label)
        return 0;
    fail(cn, 401, "invalid_request_error", "invalid_api_key", NULL,
         token ? "incorrect API key provided"
               : "no API key: send 'Authorization: Bearer <key>'");
    return -1;
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
    {"/metrics", "GET"},
};

static enum MHD_Result dispatch(srv_conn *cn)
{
    const char *url = cn->route;
    if (!cn->srv->p.no_webui && srv_webui_has(url))
        return srv_webui_reply(cn->c, url, cn->method, &cn->status);
    int v1 = strncmp(url, "/v1/", 4) == 0 || strcmp(url, "/v1") == 0;
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
        cn->route = str_dup(url ? url : "");
        *con_cls = cn;
        if (!cn->route)
            return MHD_NO;
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        cn->peer = ci ? ci->socket_context : NULL;
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
            while (!j->done && loom_now_ns() < end)
                loom_cond_timedwait(j->cv, j->mu, SRV_POLL_MS);
        }
        e.stream = j->rq.stream;
        e.prompt_tokens = j->n_prompt;
        e.completion_tokens = j->n_gen;
        e.finish = j->done ? srv_finish_reason(j->finish) : NULL;
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
    srv->mu = loom_mutex_new();
    srv->cv = loom_cond_new();
    srv->metrics = srv_metrics_new();
    loom_status st = LOOM_OK;
    if (!srv->host || !srv->mu || !srv->cv || !srv->metrics ||
        (params->api_key_file && !srv->key_file) ||
        (params->request_log && !srv->log_path)) {
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
                           &srv->deadlines, err);
    if (st != LOOM_OK)
        goto fail;
    srv->mhd = MHD_start_daemon(
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
            MHD_USE_POLL | MHD_USE_ITC | MHD_USE_ERROR_LOG |
            MHD_USE_NO_LISTEN_SOCKET,
        0, NULL, NULL, on_request, srv, MHD_OPTION_NOTIFY_COMPLETED,
        on_completed, srv, MHD_OPTION_NOTIFY_CONNECTION, on_connection, srv,
        MHD_OPTION_CONNECTION_TIMEOUT, timeout, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)1024, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, srv,
        MHD_OPTION_END);
    if (!srv->mhd) {
        st = loom_err_set(err, LOOM_ERR_IO,
                          "could not start the HTTP server on %s:%d", srv->host,
                          srv->port);
        goto fail;
    }
    st = srv_gate_start(srv->listen_sock, read_ms, gate_pass, gate_refused, srv,
                        &srv->gate, err);
    if (st != LOOM_OK)
        goto fail;
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
    st = srv_chat_template_open(engine->ckpt, tok, &tpl, err);
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
        srv->model_name = base_name(dir);
        if (!srv->model_name) {
            st = loom_err_set(err, LOOM_ERR_NOMEM, "server: out of memory");
            goto fail;
        }
    }
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
        int was = j->cancel || j->done;
        j->cancel = 1;
        loom_mutex_unlock(j->mu);
        if (!was && srv->lane)
            loom_lane_cancel(srv->lane, j->id);
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
    free(srv);
}
