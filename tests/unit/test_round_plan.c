/* The SDK's round planning (loom/round_plan.h) and window bookkeeping
 * (loom/window.h), driven by a toy family: its cache folds tokens into one
 * order-sensitive number, so a window committed to `kept` rows must leave
 * exactly the number a plain feed of those rows gives (computed here
 * independently). Groupings are checked against a quadratic reference;
 * the one window rule (a forward on a cache with an open window is
 * LOOM_ERR_STATE, as is a commit without one), the sizes of rounds and
 * rows, and the checks of output views are checked by their refusals. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <loom/round_plan.h>
#include <loom/window.h>

#include "testutil.h"

/* The toy family's cache: its length, the folded state, the tokens by
 * position (its "K/V rows") and its window. */
struct loom_cache {
    int64_t len;
    uint64_t state;
    int32_t tokens[256];
    loom_window win;
};

static int64_t toy_len(const loom_cache *c)
{
    return c->len;
}

/* One step of the toy recurrence; not commutative, so order counts. */
static uint64_t toy_step(uint64_t s, int32_t token)
{
    return (s ^ (uint64_t)(token + 1)) * 0x100000001b3ull;
}

static uint64_t toy_fold(const int32_t *tokens, int32_t n)
{
    uint64_t s = 0;
    for (int32_t i = 0; i < n; i++)
        s = toy_step(s, tokens[i]);
    return s;
}

static loom_plan_rules toy_rules(void)
{
    return (loom_plan_rules){.who = "toy forward",
                             .vocab = 100,
                             .max_context = 200,
                             .max_rows = 256,
                             .hidden = 4,
                             .view_kind = LOOM_MEM_HOST,
                             .cache_len = toy_len};
}

static void toy_cache_init(loom_cache *c)
{
    memset(c, 0, sizeof *c);
    loom_window_init(&c->win, "toy", sizeof c->state, sizeof(int32_t));
}

/* A round of rows[0..n) with the 2.0 sizes. */
static loom_round toy_round(const loom_row *rows, int32_t n)
{
    return (loom_round){sizeof(loom_round), sizeof(loom_row), rows, n};
}

/* Room for the logits of 8 rows of the toy vocabulary. */
static float toy_logits[8 * 100];

/* An output with a logits view of `rows` rows over toy_logits. */
static loom_output toy_output(int64_t rows)
{
    loom_output o;
    memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    o.logits = loom_view_host_f32(toy_logits, rows, 100);
    return o;
}

/* ---------------------------------------------------------------- plans */

/* Checks a plan against a plain quadratic grouping of the same round:
 * streams in order of first appearance, each one's rows in round order. */
static void check_grouping(const loom_round_plan *p, const loom_round *r)
{
    loom_cache *seen[256];
    int32_t n_seen = 0, k = 0;
    for (int32_t i = 0; i < r->n_rows; i++) {
        int32_t s = 0;
        while (s < n_seen && seen[s] != loom_round_row(r, i)->cache)
            s++;
        if (s == n_seen)
            seen[n_seen++] = loom_round_row(r, i)->cache;
    }
    ck_assert_int_eq(p->n_streams, n_seen);
    ck_assert_int_eq(p->n_rows, r->n_rows);
    for (int32_t s = 0; s < n_seen; s++) {
        const loom_plan_stream *ps = &p->streams[s];
        ck_assert_ptr_eq(ps->cache, seen[s]);
        ck_assert_int_eq(ps->first, k);
        ck_assert_int_eq(ps->len0, seen[s]->len);
        int32_t j = 0;
        for (int32_t i = 0; i < r->n_rows; i++)
            if (loom_round_row(r, i)->cache == seen[s]) {
                ck_assert_int_lt(j, ps->count);
                ck_assert_int_eq(loom_plan_row(p, ps, j), i);
                j++;
            }
        ck_assert_int_eq(j, ps->count);
        k += ps->count;
    }
}

START_TEST(contiguous_rows)
{
    loom_cache a, b;
    toy_cache_init(&a);
    toy_cache_init(&b);
    a.len = 3;
    loom_row rows[5] = {{&a, 1, 3, -1, LOOM_ROW_LOGITS},
                        {&a, 2, 4, -1, 0},
                        {&a, 3, 5, -1, LOOM_ROW_LOGITS},
                        {&b, 4, 0, -1, 0},
                        {&b, 5, 1, -1, LOOM_ROW_TAP | LOOM_ROW_LOGITS}};
    loom_round r = toy_round(rows, 5);
    loom_output out = toy_output(3);
    loom_plan_rules rules = toy_rules();
    loom_round_plan p;
    loom_round_plan_init(&p);
    loom_err err = {{0}};
    ck_assert_int_eq(loom_round_plan_make(&p, &r, &out, &rules, &err), LOOM_OK);
    check_grouping(&p, &r);
    ck_assert_int_eq(p.streams[0].len0, 3);
    ck_assert_int_eq(p.streams[0].count, 3);
    ck_assert_int_eq(p.streams[1].first, 3);
    ck_assert_int_eq(p.streams[1].count, 2);
    ck_assert_int_eq(p.streams[0].first_spec, -1);
    ck_assert_int_eq(p.n_logits, 3);
    ck_assert_int_eq(p.n_taps, 1);
    ck_assert_int_eq(p.max_len, 6);
    loom_round_plan_free(&p);
}
END_TEST

START_TEST(interleaved_rows)
{
    loom_cache a, b, c;
    toy_cache_init(&a);
    toy_cache_init(&b);
    toy_cache_init(&c);
    b.len = 7;
    /* a b a c b a: a's third row and b's second are speculative */
    loom_row rows[6] = {{&a, 1, 0, -1, 0},
                        {&b, 1, 7, -1, 0},
                        {&a, 1, 1, -1, 0},
                        {&c, 1, 0, -1, 0},
                        {&b, 1, 8, -1, LOOM_ROW_SPECULATIVE},
                        {&a, 1, 2, -1, LOOM_ROW_SPECULATIVE}};
    loom_round r = toy_round(rows, 6);
    loom_plan_rules rules = toy_rules();
    loom_round_plan p;
    loom_round_plan_init(&p);
    loom_err err = {{0}};
    ck_assert_int_eq(loom_round_plan_make(&p, &r, NULL, &rules, &err), LOOM_OK);
    check_grouping(&p, &r);
    ck_assert_int_eq(p.streams[0].count, 3);
    ck_assert_int_eq(p.streams[0].first_spec, 2);
    ck_assert_int_eq(loom_plan_n_spec(&p.streams[0]), 1);
    ck_assert_int_eq(p.streams[1].first_spec, 1);
    ck_assert_int_eq(p.streams[2].first_spec, -1);
    ck_assert_int_eq(loom_plan_n_spec(&p.streams[2]), 0);
    ck_assert_int_eq(p.max_len, 9);
    loom_round_plan_free(&p);
}
END_TEST

/* Many caches, rows dealt round-robin (hash collisions and probing), then a
 * smaller round with the same plan: the grown storage is reused and the
 * map starts empty. */
START_TEST(many_caches_and_reuse)
{
    enum { N = 120, PER = 2 };
    loom_cache *caches = calloc(N, sizeof *caches);
    loom_row *rows = calloc(N * PER, sizeof *rows);
    for (int i = 0; i < N; i++) {
        toy_cache_init(&caches[i]);
        caches[i].len = i % 5;
    }
    int n = 0;
    for (int j = 0; j < PER; j++)
        for (int i = 0; i < N; i++) {
            int c = (i * 7) % N; /* a permutation of the caches */
            rows[n++] = (loom_row){&caches[c], 1, (int32_t)(c % 5 + j), -1, 0};
        }
    loom_round r = toy_round(rows, n);
    loom_plan_rules rules = toy_rules();
    loom_round_plan p;
    loom_round_plan_init(&p);
    loom_err err = {{0}};
    ck_assert_msg(loom_round_plan_make(&p, &r, NULL, &rules, &err) == LOOM_OK,
                  "%s", err.msg);
    check_grouping(&p, &r);
    loom_round small = toy_round(rows + N - 3, 3);
    ck_assert_int_eq(loom_round_plan_make(&p, &small, NULL, &rules, &err),
                     LOOM_OK);
    check_grouping(&p, &small);
    loom_round empty = toy_round(NULL, 0);
    ck_assert_int_eq(loom_round_plan_make(&p, &empty, NULL, &rules, &err),
                     LOOM_OK);
    ck_assert_int_eq(p.n_streams, 0);
    loom_round_plan_free(&p);
    free(rows);
    free(caches);
}
END_TEST

/* A refused round: the status, every needle in the message. */
static void refused_round(const loom_round *r, const loom_output *out,
                          const loom_plan_rules *rules, loom_status code,
                          const char *needle1, const char *needle2)
{
    loom_round_plan p;
    loom_round_plan_init(&p);
    loom_err err = {{0}};
    loom_status st = loom_round_plan_make(&p, r, out, rules, &err);
    ck_assert_msg(st == code, "status %d, want %d (%s)", st, code, err.msg);
    ck_assert_msg(strstr(err.msg, needle1) != NULL, "'%s' lacks '%s'", err.msg,
                  needle1);
    if (needle2)
        ck_assert_msg(strstr(err.msg, needle2) != NULL, "'%s' lacks '%s'",
                      err.msg, needle2);
    ck_assert_msg(strncmp(err.msg, "toy forward: ", 13) == 0,
                  "'%s' does not say who refused", err.msg);
    loom_round_plan_free(&p);
}

/* Rows as a newer lane might make them: a loom_row and a field after it
 * that this ABI does not know. */
typedef struct wide_row {
    loom_row row;
    uint64_t later;
} wide_row;

/* The same grouping, whatever the size of the lane's rows. */
START_TEST(wider_rows)
{
    loom_cache a, b;
    toy_cache_init(&a);
    toy_cache_init(&b);
    a.len = 2;
    wide_row rows[4] = {{{&b, 1, 0, -1, 0}, ~0ull},
                        {{&a, 2, 2, -1, LOOM_ROW_LOGITS}, ~0ull},
                        {{&b, 3, 1, -1, LOOM_ROW_SPECULATIVE}, ~0ull},
                        {{&a, 4, 3, -1, LOOM_ROW_LOGITS}, ~0ull}};
    loom_round r = {sizeof r, sizeof *rows, &rows[0].row, 4};
    loom_output out = toy_output(2);
    loom_plan_rules rules = toy_rules();
    loom_round_plan p;
    loom_round_plan_init(&p);
    loom_err err = {{0}};
    ck_assert_msg(loom_round_plan_make(&p, &r, &out, &rules, &err) == LOOM_OK,
                  "%s", err.msg);
    check_grouping(&p, &r);
    ck_assert_int_eq(p.n_streams, 2);
    ck_assert_ptr_eq(p.streams[0].cache, &b);
    ck_assert_int_eq(p.streams[0].first_spec, 1);
    ck_assert_int_eq(loom_plan_row(&p, &p.streams[1], 1), 3);
    ck_assert_int_eq(p.n_logits, 2);
    loom_round_plan_free(&p);
}
END_TEST

/* refused_round over rows[0..n) with the 2.0 sizes. */
static void refused(loom_row *rows, int32_t n, const loom_output *out,
                    const loom_plan_rules *rules, loom_status code,
                    const char *needle1, const char *needle2)
{
    loom_round r = toy_round(rows, n);
    refused_round(&r, out, rules, code, needle1, needle2);
}

START_TEST(bad_rounds)
{
    loom_cache a, b;
    toy_cache_init(&a);
    toy_cache_init(&b);
    a.len = 3;
    loom_plan_rules rules = toy_rules();
    loom_output none = {.struct_size = sizeof none};
    /* the first row of a cache is not at its length */
    loom_row wrong_first[2] = {{&b, 1, 0, -1, 0}, {&a, 1, 4, -1, 0}};
    refused(wrong_first, 2, &none, &rules, LOOM_ERR_INVALID,
            "row 1 has position 4", "expects 3");
    /* a cache's rows skip a position, or run backwards */
    loom_row gap[3] = {{&a, 1, 3, -1, 0}, {&b, 1, 0, -1, 0}, {&a, 1, 5, -1, 0}};
    refused(gap, 3, &none, &rules, LOOM_ERR_INVALID, "row 2 has position 5",
            "expects 4");
    loom_row back[2] = {{&a, 1, 4, -1, 0}, {&a, 1, 3, -1, 0}};
    refused(back, 2, &none, &rules, LOOM_ERR_INVALID, "row 0 has position 4",
            "expects 3");
    /* one row appearing twice is a repeated position */
    loom_row twice[2] = {{&a, 1, 3, -1, 0}, {&a, 1, 3, -1, 0}};
    refused(twice, 2, &none, &rules, LOOM_ERR_INVALID, "row 1 has position 3",
            "expects 4");
    /* a plain row after a speculative one of its cache */
    loom_row order[3] = {{&a, 1, 3, -1, LOOM_ROW_SPECULATIVE},
                         {&b, 1, 0, -1, 0},
                         {&a, 1, 4, -1, 0}};
    refused(order, 3, &none, &rules, LOOM_ERR_INVALID, "row 2 (position 4)",
            "speculative");
    loom_row no_cache[2] = {{&a, 1, 3, -1, 0}, {NULL, 1, 0, -1, 0}};
    refused(no_cache, 2, &none, &rules, LOOM_ERR_INVALID, "row 1 has no cache",
            NULL);
    loom_row token[1] = {{&a, 100, 3, -1, 0}};
    refused(token, 1, &none, &rules, LOOM_ERR_RANGE, "token 100",
            "vocabulary of 100");
    token[0].token = -1;
    refused(token, 1, &none, &rules, LOOM_ERR_RANGE, "token -1", "row 0");
    loom_row tree[1] = {{&a, 1, 3, 0, 0}};
    refused(tree, 1, &none, &rules, LOOM_ERR_UNSUPPORTED, "parent 0",
            "row 0 (position 3)");
    /* a flag the family refuses */
    loom_plan_rules no_taps = rules;
    no_taps.refused_flags = LOOM_ROW_TAP;
    loom_row tap[1] = {{&a, 1, 3, -1, LOOM_ROW_TAP | LOOM_ROW_LOGITS}};
    loom_output only_logits = toy_output(1);
    refused(tap, 1, &only_logits, &no_taps, LOOM_ERR_UNSUPPORTED, "taps",
            "row 0");
    /* outputs asked with no buffer; taps only matter with tapped layers */
    refused(tap, 1, &none, &rules, LOOM_ERR_INVALID, "logits", NULL);
    refused(tap, 1, NULL, &rules, LOOM_ERR_INVALID, "logits", NULL);
    loom_plan_rules tapped = rules;
    tapped.n_taps = 2;
    refused(tap, 1, &only_logits, &tapped, LOOM_ERR_INVALID, "no taps view",
            NULL);
    /* the context limit: positions 0 .. max_context - 1 */
    loom_plan_rules short_ctx = rules;
    short_ctx.max_context = 5;
    loom_row ctx[3] = {{&a, 1, 3, -1, 0}, {&a, 1, 4, -1, 0}, {&a, 1, 5, -1, 0}};
    refused(ctx, 3, &none, &short_ctx, LOOM_ERR_FULL, "row 2 at position 5",
            "context limit 5");
    /* the row limit, checked before any row is read */
    loom_plan_rules two_rows = rules;
    two_rows.max_rows = 2;
    refused(ctx, 3, &none, &two_rows, LOOM_ERR_RANGE, "3 rows", "max_rows 2");
    refused(NULL, 1, &none, &rules, LOOM_ERR_INVALID, "no row array", NULL);

    /* the same rows, fixed, pass */
    loom_round ok = toy_round(ctx, 2);
    loom_round_plan p;
    loom_round_plan_init(&p);
    loom_err err = {{0}};
    ck_assert_int_eq(loom_round_plan_make(&p, &ok, &none, &short_ctx, &err),
                     LOOM_OK);
    loom_round_plan_free(&p);
}
END_TEST

/* The sizes of rounds and rows, the window's length, and the output views
 * the rows ask for. */
START_TEST(bad_sizes_and_views)
{
    loom_cache a;
    toy_cache_init(&a);
    loom_plan_rules rules = toy_rules();
    loom_output none = {.struct_size = sizeof none};
    loom_row rows[LOOM_MAX_WINDOW + 1];
    for (int32_t i = 0; i <= LOOM_MAX_WINDOW; i++)
        rows[i] = (loom_row){&a, 1, i, -1, LOOM_ROW_SPECULATIVE};
    /* a round or rows smaller than ABI 2.0's */
    loom_round r = toy_round(rows, 1);
    r.struct_size = (uint32_t)offsetof(loom_round, n_rows);
    refused_round(&r, &none, &rules, LOOM_ERR_INVALID, "round is", "bytes");
    r = toy_round(rows, 1);
    r.row_size = sizeof(loom_row) - 4;
    refused_round(&r, &none, &rules, LOOM_ERR_INVALID, "rows are", "bytes");
    /* one window holds at most LOOM_MAX_WINDOW rows */
    refused(rows, LOOM_MAX_WINDOW + 1, &none, &rules, LOOM_ERR_RANGE,
            "row 16 (position 16)", "LOOM_MAX_WINDOW");
    r = toy_round(rows, LOOM_MAX_WINDOW);
    loom_round_plan p;
    loom_round_plan_init(&p);
    loom_err err = {{0}};
    ck_assert_int_eq(loom_round_plan_make(&p, &r, &none, &rules, &err),
                     LOOM_OK);
    ck_assert_int_eq(loom_plan_n_spec(&p.streams[0]), LOOM_MAX_WINDOW);

    /* logits views: two rows ask, [2, 100] host float32 is needed */
    loom_row two[2] = {{&a, 1, 0, -1, LOOM_ROW_LOGITS},
                       {&a, 2, 1, -1, LOOM_ROW_LOGITS}};
    loom_output o = toy_output(1);
    refused(two, 2, &o, &rules, LOOM_ERR_INVALID, "logits view", "[>= 2, 100]");
    o = toy_output(2);
    o.logits.shape[1] = 99;
    refused(two, 2, &o, &rules, LOOM_ERR_INVALID, "logits view", "[2, 99]");
    o = toy_output(2);
    o.logits.dtype = LOOM_DTYPE_BF16;
    refused(two, 2, &o, &rules, LOOM_ERR_INVALID, "not float32", NULL);
    o = toy_output(2);
    o.logits.strides[1] = 2;
    refused(two, 2, &o, &rules, LOOM_ERR_INVALID, "strides", NULL);
    o = toy_output(2);
    o.logits.strides[0] = 50;
    refused(two, 2, &o, &rules, LOOM_ERR_INVALID, "strides", NULL);
    o = toy_output(2);
    o.logits.struct_size = 8;
    refused(two, 2, &o, &rules, LOOM_ERR_INVALID, "logits view is 8 bytes",
            NULL);
    o = toy_output(2);
    o.struct_size = (uint32_t)offsetof(loom_output, logits);
    refused(two, 2, &o, &rules, LOOM_ERR_INVALID, "output is", "logits");
    /* device memory, to a family that writes host memory */
    o = toy_output(2);
    o.logits.kind = LOOM_MEM_DEVICE;
    o.logits.data = NULL;
    o.logits.device_ptr = 0x1000;
    refused(two, 2, &o, &rules, LOOM_ERR_UNSUPPORTED, "device memory",
            "host views only");
    /* rows 100 floats apart (wider than the vocabulary) pass */
    o = toy_output(2);
    o.logits.shape[1] = 60;
    o.logits.strides[0] = 100;
    loom_plan_rules narrow = rules;
    narrow.vocab = 60;
    loom_round rt = toy_round(two, 2);
    ck_assert_msg(loom_round_plan_make(&p, &rt, &o, &narrow, &err) == LOOM_OK,
                  "%s", err.msg);

    /* taps views: [n_tap rows, n_taps * hidden] */
    loom_row tap[1] = {{&a, 1, 0, -1, LOOM_ROW_TAP}};
    loom_plan_rules tapped = rules;
    tapped.n_taps = 2;
    float taps[8];
    o = toy_output(0);
    o.logits.ndim = 0;
    o.taps = loom_view_host_f32(taps, 1, 4);
    refused(tap, 1, &o, &tapped, LOOM_ERR_INVALID, "taps view", "[>= 1, 8]");
    o.taps = loom_view_host_f32(taps, 1, 8);
    o.struct_size = (uint32_t)offsetof(loom_output, taps);
    refused(tap, 1, &o, &tapped, LOOM_ERR_INVALID, "taps", "too small");
    o.struct_size = sizeof o;
    loom_round rtap = toy_round(tap, 1);
    ck_assert_msg(loom_round_plan_make(&p, &rtap, &o, &tapped, &err) == LOOM_OK,
                  "%s", err.msg);
    ck_assert_int_eq(p.n_taps, 1);
    loom_round_plan_free(&p);
}
END_TEST

/* ---------------------------------------------------------------- windows */

/* The toy family's forward, in the order loom/window.h asks for. */
static loom_status toy_forward(loom_round_plan *p, const loom_round *r,
                               loom_err *err)
{
    loom_plan_rules rules = toy_rules();
    loom_status st = loom_round_plan_make(p, r, NULL, &rules, err);
    for (int32_t s = 0; st == LOOM_OK && s < p->n_streams; s++)
        st =
            loom_window_reserve(&p->streams[s].cache->win, &p->streams[s], err);
    if (st != LOOM_OK)
        return st;
    for (int32_t s = 0; s < p->n_streams; s++) {
        const loom_plan_stream *ps = &p->streams[s];
        loom_cache *c = ps->cache;
        for (int32_t k = 0; k < ps->count; k++) {
            const loom_row *row = loom_round_row(r, loom_plan_row(p, ps, k));
            int32_t i = loom_window_index(ps, k);
            if (i == 0)
                memcpy(c->win.snapshot, &c->state, sizeof c->state);
            if (i >= 0)
                memcpy(loom_window_row(&c->win, i), &row->token,
                       sizeof row->token);
            c->state = toy_step(c->state, row->token);
            c->tokens[row->position] = row->token;
        }
    }
    for (int32_t s = 0; s < p->n_streams; s++) {
        const loom_plan_stream *ps = &p->streams[s];
        loom_window_end(&ps->cache->win, ps);
        ps->cache->len = ps->len0 + ps->count;
    }
    return LOOM_OK;
}

static loom_status toy_commit(loom_cache *c, int32_t kept, loom_err *err)
{
    loom_window_keep keep;
    loom_status st = loom_window_commit(&c->win, kept, &keep, err);
    if (st != LOOM_OK || !keep.rollback)
        return st;
    memcpy(&c->state, c->win.snapshot, sizeof c->state);
    for (int32_t i = 0; i < keep.kept; i++) {
        int32_t token;
        memcpy(&token, loom_window_row(&c->win, i), sizeof token);
        c->state = toy_step(c->state, token);
    }
    c->len = keep.len;
    return LOOM_OK;
}

/* Feeds tokens[0..n) to c in one forward, the last n_spec speculative;
 * returns its status. */
static loom_status try_feed(loom_round_plan *p, loom_cache *c,
                            const int32_t *tokens, int32_t n, int32_t n_spec,
                            loom_err *err)
{
    loom_row rows[64];
    for (int32_t i = 0; i < n; i++)
        rows[i] = (loom_row){c, tokens[i], (int32_t)c->len + i, -1,
                             i >= n - n_spec ? LOOM_ROW_SPECULATIVE : 0u};
    loom_round r = toy_round(rows, n);
    return toy_forward(p, &r, err);
}

static void feed(loom_round_plan *p, loom_cache *c, const int32_t *tokens,
                 int32_t n, int32_t n_spec)
{
    loom_err err = {{0}};
    ck_assert_msg(try_feed(p, c, tokens, n, n_spec, &err) == LOOM_OK, "%s",
                  err.msg);
}

/* The cache holds exactly tokens[0..n) fed plainly, and no window. */
static void holds(const loom_cache *c, const int32_t *tokens, int32_t n)
{
    ck_assert_int_eq(c->len, n);
    ck_assert_uint_eq(c->state, toy_fold(tokens, n));
    ck_assert_mem_eq(c->tokens, tokens, (size_t)n * sizeof *tokens);
    ck_assert_int_eq(c->win.pending, 0);
}

static const int32_t text[64] = {
    5,  17, 3,  42, 8,  99, 0,  61, 23, 7,  14, 88, 31, 2,  76, 50,
    9,  11, 64, 27, 38, 1,  93, 46, 12, 70, 55, 4,  81, 19, 33, 6,
    58, 21, 97, 40, 13, 67, 29, 84, 10, 52, 36, 15, 73, 44, 26, 90,
    18, 62, 35, 79, 48, 24, 86, 57, 16, 69, 30, 95, 41, 20, 77, 39};

/* A window of `spec` rows after `plain` rows of the same forward (and a
 * 3-row prompt before it), then commit(kept). */
static void check_window(int32_t plain, int32_t spec, int32_t kept)
{
    loom_cache c;
    toy_cache_init(&c);
    loom_round_plan p;
    loom_round_plan_init(&p);
    loom_err err = {{0}};
    feed(&p, &c, text, 3, 0);
    feed(&p, &c, text + 3, plain + spec, spec);
    ck_assert_int_eq(c.win.pending, spec);
    ck_assert_int_eq(c.len, 3 + plain + spec);
    loom_window_keep keep;
    ck_assert_int_eq(loom_window_commit(&c.win, spec + 1, &keep, &err),
                     LOOM_ERR_RANGE);
    ck_assert_int_eq(c.win.pending, spec); /* a refusal changes nothing */
    ck_assert_msg(toy_commit(&c, kept, &err) == LOOM_OK, "%s", err.msg);
    holds(&c, text, 3 + plain + kept);
    /* and the cache goes on as if only those rows had been fed */
    feed(&p, &c, text + 3 + plain + kept, 2, 0);
    holds(&c, text, 5 + plain + kept);
    loom_window_free(&c.win);
    loom_round_plan_free(&p);
}

START_TEST(commit_none_some_all)
{
    check_window(0, 4, 0);
    check_window(0, 4, 2);
    check_window(0, 4, 4);
    check_window(2, 3, 0);
    check_window(2, 3, 1);
    check_window(2, 3, 3);
    /* the longest window */
    check_window(1, LOOM_MAX_WINDOW, LOOM_MAX_WINDOW - 3);
}
END_TEST

START_TEST(commit_results)
{
    loom_cache c;
    toy_cache_init(&c);
    loom_round_plan p;
    loom_round_plan_init(&p);
    loom_err err = {{0}};
    loom_window_keep keep;
    /* no window: every commit is out of turn, commit(0) too */
    ck_assert_int_eq(loom_window_commit(&c.win, 0, &keep, &err),
                     LOOM_ERR_STATE);
    ck_assert_ptr_nonnull(strstr(err.msg, "toy commit: the cache has no "
                                          "window"));
    ck_assert_int_eq(loom_window_commit(&c.win, 1, &keep, &err),
                     LOOM_ERR_STATE);
    feed(&p, &c, text, 3, 0);
    ck_assert_int_eq(toy_commit(&c, 0, &err), LOOM_ERR_STATE);
    holds(&c, text, 3);
    /* four rows of a window after six positions */
    loom_window_reset(&c.win);
    c.len = 0;
    c.state = 0;
    feed(&p, &c, text, 6, 4);
    ck_assert_int_eq(c.win.start, 2);
    ck_assert_int_eq(loom_window_commit(&c.win, 5, &keep, &err),
                     LOOM_ERR_RANGE);
    ck_assert_ptr_nonnull(strstr(err.msg, "kept = 5"));
    ck_assert_ptr_nonnull(strstr(err.msg, "window holds 4 rows"));
    ck_assert_int_eq(loom_window_commit(&c.win, -1, &keep, &err),
                     LOOM_ERR_RANGE);
    ck_assert_int_eq(loom_window_commit(&c.win, 1, &keep, &err), LOOM_OK);
    ck_assert_int_eq(keep.rollback, 1);
    ck_assert_int_eq(keep.kept, 1);
    ck_assert_int_eq(keep.len, 3);
    ck_assert_int_eq(c.win.pending, 0);
    ck_assert_int_eq(c.win.start, -1);
    /* a second commit of the same window is out of turn */
    ck_assert_int_eq(loom_window_commit(&c.win, 0, &keep, &err),
                     LOOM_ERR_STATE);
    /* all kept: nothing to restore */
    feed(&p, &c, text, 2, 2);
    ck_assert_int_eq(loom_window_commit(&c.win, 2, &keep, &err), LOOM_OK);
    ck_assert_int_eq(keep.rollback, 0);
    loom_window_free(&c.win);
    loom_round_plan_free(&p);
}
END_TEST

/* The one window rule: after a forward that gave a cache a window, a
 * forward on that cache, speculative or plain, is refused and changes
 * nothing, until commit. */
START_TEST(one_window_rule)
{
    loom_round_plan p;
    loom_round_plan_init(&p);
    loom_err err = {{0}};
    loom_cache c;
    toy_cache_init(&c);
    feed(&p, &c, text, 4, 0);
    feed(&p, &c, text + 4, 2, 2);
    uint64_t state = c.state;
    ck_assert_int_eq(try_feed(&p, &c, text + 6, 3, 3, &err), LOOM_ERR_STATE);
    ck_assert_ptr_nonnull(strstr(err.msg, "toy forward: the cache's window "
                                          "of 2 speculative rows"));
    ck_assert_ptr_nonnull(strstr(err.msg, "position 4"));
    ck_assert_int_eq(try_feed(&p, &c, text + 6, 1, 0, &err), LOOM_ERR_STATE);
    ck_assert_ptr_nonnull(strstr(err.msg, "commit"));
    ck_assert_int_eq(c.len, 6);
    ck_assert_uint_eq(c.state, state);
    ck_assert_int_eq(c.win.pending, 2);
    ck_assert_int_eq(toy_commit(&c, 1, &err), LOOM_OK);
    holds(&c, text, 5);
    /* after the commit: plain rows, then a forward of plain then
     * speculative rows opens a new window */
    feed(&p, &c, text + 5, 2, 0);
    feed(&p, &c, text + 7, 3, 1);
    ck_assert_int_eq(c.win.pending, 1);
    ck_assert_int_eq(c.win.start, 9);
    ck_assert_int_eq(toy_commit(&c, 0, &err), LOOM_OK);
    holds(&c, text, 9);
    /* a reset closes a window without a commit */
    feed(&p, &c, text + 9, 2, 2);
    loom_window_reset(&c.win);
    ck_assert_int_eq(toy_commit(&c, 0, &err), LOOM_ERR_STATE);
    loom_window_free(&c.win);
    loom_round_plan_free(&p);
}
END_TEST

/* Two caches' windows in one round, committed separately; a round that
 * also holds a cache with an open window is refused whole; and a family
 * with nothing to snapshot or log (attention only) still counts rows. */
START_TEST(windows_of_two_caches)
{
    loom_cache a, b;
    toy_cache_init(&a);
    toy_cache_init(&b);
    loom_round_plan p;
    loom_round_plan_init(&p);
    loom_err err = {{0}};
    const int32_t *ta = text, *tb = text + 20;
    feed(&p, &a, ta, 2, 0);
    /* a: 3 speculative after 2; b: 1 plain then 2 speculative; interleaved */
    loom_row rows[6] = {{&a, ta[2], 2, -1, LOOM_ROW_SPECULATIVE},
                        {&b, tb[0], 0, -1, 0},
                        {&b, tb[1], 1, -1, LOOM_ROW_SPECULATIVE},
                        {&a, ta[3], 3, -1, LOOM_ROW_SPECULATIVE},
                        {&b, tb[2], 2, -1, LOOM_ROW_SPECULATIVE},
                        {&a, ta[4], 4, -1, LOOM_ROW_SPECULATIVE}};
    loom_round r = toy_round(rows, 6);
    ck_assert_int_eq(toy_forward(&p, &r, &err), LOOM_OK);
    ck_assert_int_eq(a.win.pending, 3);
    ck_assert_int_eq(b.win.pending, 2);
    ck_assert_int_eq(toy_commit(&a, 2, &err), LOOM_OK);
    /* a is free again, b is not: a round of both changes neither */
    loom_row next[2] = {{&a, ta[4], 4, -1, 0}, {&b, tb[3], 3, -1, 0}};
    loom_round rn = toy_round(next, 2);
    ck_assert_int_eq(toy_forward(&p, &rn, &err), LOOM_ERR_STATE);
    holds(&a, ta, 4);
    ck_assert_int_eq(b.len, 3);
    ck_assert_int_eq(toy_commit(&b, 0, &err), LOOM_OK);
    holds(&b, tb, 1);
    loom_window_free(&a.win);
    loom_window_free(&b.win);

    loom_cache kv;
    memset(&kv, 0, sizeof kv);
    loom_window_init(&kv.win, "toy", 0, 0);
    loom_row one[3] = {{&kv, 1, 0, -1, 0},
                       {&kv, 2, 1, -1, LOOM_ROW_SPECULATIVE},
                       {&kv, 3, 2, -1, LOOM_ROW_SPECULATIVE}};
    loom_round three = toy_round(one, 3);
    loom_plan_rules rules = toy_rules();
    ck_assert_int_eq(loom_round_plan_make(&p, &three, NULL, &rules, &err),
                     LOOM_OK);
    ck_assert_int_eq(loom_window_reserve(&kv.win, &p.streams[0], &err),
                     LOOM_OK);
    ck_assert_ptr_null(kv.win.snapshot);
    loom_window_end(&kv.win, &p.streams[0]);
    ck_assert_int_eq(kv.win.pending, 2);
    ck_assert_int_eq(loom_window_reserve(&kv.win, &p.streams[0], &err),
                     LOOM_ERR_STATE);
    loom_window_keep keep;
    ck_assert_int_eq(loom_window_commit(&kv.win, 1, &keep, &err), LOOM_OK);
    ck_assert_int_eq(keep.rollback, 1);
    ck_assert_int_eq(keep.len, 2);
    loom_window_free(&kv.win);
    loom_round_plan_free(&p);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("round_plan");
    TCase *t = tcase_create("plan");
    tcase_add_test(t, contiguous_rows);
    tcase_add_test(t, interleaved_rows);
    tcase_add_test(t, many_caches_and_reuse);
    tcase_add_test(t, wider_rows);
    tcase_add_test(t, bad_rounds);
    tcase_add_test(t, bad_sizes_and_views);
    suite_add_tcase(s, t);
    TCase *w = tcase_create("window");
    tcase_add_test(w, commit_none_some_all);
    tcase_add_test(w, commit_results);
    tcase_add_test(w, one_window_rule);
    tcase_add_test(w, windows_of_two_caches);
    suite_add_tcase(s, w);
    return s;
}

int main(void)
{
    return run_suite(suite());
}
