/* Groups a round's rows by cache and checks them (loom/round_plan.h): one
 * pass finds each row's stream through an open-addressing map keyed by the
 * cache pointer, a second lays the rows out stream by stream and checks
 * positions; both O(rows). Also the check of the views a forward writes. */
#include <loom/round_plan.h>

#include <stdlib.h>
#include <string.h>

void loom_round_plan_init(loom_round_plan *plan)
{
    memset(plan, 0, sizeof *plan);
}

void loom_round_plan_free(loom_round_plan *plan)
{
    free(plan->streams);
    free(plan->rows);
    free(plan->stream_of);
    free(plan->map);
    loom_round_plan_init(plan);
}

/* The map's size for n rows: a power of two at least 2n, so it stays at
 * most half full and a probe ends soon. */
static uint32_t plan_map_size(int32_t n)
{
    uint32_t size = 2;
    while (size < 2u * (uint32_t)n)
        size *= 2;
    return size;
}

static loom_status plan_reserve(loom_round_plan *p, int32_t n, const char *who,
                                loom_err *err)
{
    if (n <= p->cap)
        return LOOM_OK;
    size_t rows = (size_t)n;
    loom_plan_stream *streams = malloc(rows * sizeof *streams);
    int32_t *order = malloc(rows * sizeof *order);
    int32_t *stream_of = malloc(rows * sizeof *stream_of);
    int32_t *map = malloc(plan_map_size(n) * sizeof *map);
    if (!streams || !order || !stream_of || !map) {
        free(streams);
        free(order);
        free(stream_of);
        free(map);
        return loom_err_set(err, LOOM_ERR_NOMEM,
                            "%s: no memory to plan %d rows", who, n);
    }
    loom_round_plan_free(p);
    p->streams = streams;
    p->rows = order;
    p->stream_of = stream_of;
    p->map = map;
    p->cap = n;
    return LOOM_OK;
}

/* Fibonacci hashing of the pointer; the low bits of an allocation are
 * mostly zero, so they are mixed in from above. */
static uint32_t plan_hash(const loom_cache *c, uint32_t mask)
{
    uint64_t h = (uint64_t)(uintptr_t)c * 0x9e3779b97f4a7c15ull;
    return (uint32_t)(h >> 32) & mask;
}

/* The stream of `c`, added (with its current length) when it is new. */
static int32_t plan_stream(loom_round_plan *p, uint32_t mask, loom_cache *c,
                           const loom_plan_rules *rules)
{
    uint32_t h = plan_hash(c, mask);
    while (p->map[h] != 0) {
        int32_t s = p->map[h] - 1;
        if (p->streams[s].cache == c)
            return s;
        h = (h + 1) & mask;
    }
    int32_t s = p->n_streams++;
    p->streams[s] = (loom_plan_stream){c, rules->cache_len(c), 0, 0, -1};
    p->map[h] = s + 1;
    return s;
}

static const char *plan_flag_name(uint32_t flag)
{
    switch (flag) {
    case LOOM_ROW_LOGITS:
        return "logits";
    case LOOM_ROW_TAP:
        return "taps";
    case LOOM_ROW_SPECULATIVE:
        return "a speculative row";
    default:
        return "an unknown flag";
    }
}

/* The output views the rows ask for: logits [n_logits, vocab] and, when
 * the family taps layers, taps [n_taps rows, n_taps * hidden]. */
static loom_status plan_check_output(const loom_round_plan *p,
                                     const loom_output *out,
                                     const loom_plan_rules *rules,
                                     loom_err *err)
{
    const char *who = rules->who;
    int want_taps = p->n_taps > 0 && rules->n_taps > 0;
    if (p->n_logits == 0 && !want_taps)
        return LOOM_OK;
    if (!out)
        return loom_err_set(err, LOOM_ERR_INVALID,
                            "%s: %d rows ask for logits and %d for taps, but "
                            "there is no output",
                            who, p->n_logits, want_taps ? p->n_taps : 0);
    if (p->n_logits > 0) {
        if (!LOOM_HAS_FIELD(out->struct_size, loom_output, logits))
            return loom_err_set(err, LOOM_ERR_INVALID,
                                "%s: the output is %u bytes, too small to hold "
                                "a logits view",
                                who, (unsigned)out->struct_size);
        loom_status st =
            loom_view_check(&out->logits, rules->view_kind, p->n_logits,
                            rules->vocab, who, "logits", err);
        if (st != LOOM_OK)
            return st;
    }
    if (want_taps) {
        if (!LOOM_HAS_FIELD(out->struct_size, loom_output, taps))
            return loom_err_set(err, LOOM_ERR_INVALID,
                                "%s: %d rows ask for taps, but the output is "
                                "%u bytes, too small to hold a taps view",
                                who, p->n_taps, (unsigned)out->struct_size);
        loom_status st = loom_view_check(
            &out->taps, rules->view_kind, p->n_taps,
            (int64_t)rules->n_taps * rules->hidden, who, "taps", err);
        if (st != LOOM_OK)
            return st;
    }
    return LOOM_OK;
}

/* The checks of one row on its own, before it joins a stream. */
static loom_status plan_check_row(const loom_row *r, int32_t i,
                                  const loom_plan_rules *rules, loom_err *err)
{
    const char *who = rules->who;
    if (!r->cache)
        return loom_err_set(err, LOOM_ERR_INVALID, "%s: row %d has no cache",
                            who, i);
    if (r->token < 0 || r->token >= rules->vocab)
        return loom_err_set(err, LOOM_ERR_RANGE,
                            "%s: row %d (position %d): token %d is outside "
                            "the vocabulary of %lld",
                            who, i, r->position, r->token,
                            (long long)rules->vocab);
    if (r->parent != -1)
        return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                            "%s: row %d (position %d) has parent %d; trees "
                            "are not supported, chains only",
                            who, i, r->position, r->parent);
    uint32_t refused = r->flags & rules->refused_flags;
    if (refused) {
        uint32_t flag = refused & (~refused + 1u); /* the lowest one */
        return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                            "%s: row %d (position %d) asks for %s (flag "
                            "0x%x), which this family does not provide",
                            who, i, r->position, plan_flag_name(flag), flag);
    }
    return LOOM_OK;
}

loom_status loom_view_check(const loom_view *v, int32_t kind, int64_t rows,
                            int64_t cols, const char *who, const char *what,
                            loom_err *err)
{
    if (!v || v->ndim == 0)
        return loom_err_set(err, LOOM_ERR_INVALID, "%s: no %s view", who, what);
    if (v->struct_size < sizeof *v)
        return loom_err_set(err, LOOM_ERR_INVALID,
                            "%s: the %s view is %u bytes, ABI 2.0's is %zu",
                            who, what, (unsigned)v->struct_size, sizeof *v);
    if (v->kind != kind)
        return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                            "%s: the %s view is %s memory, but this model runs "
                            "on the %s (%s views only)",
                            who, what,
                            v->kind == LOOM_MEM_DEVICE ? "device" : "host",
                            kind == LOOM_MEM_DEVICE ? "device" : "CPU",
                            kind == LOOM_MEM_DEVICE ? "device" : "host");
    if (v->dtype != LOOM_DTYPE_F32)
        return loom_err_set(err, LOOM_ERR_INVALID,
                            "%s: the %s view has dtype %d, not float32", who,
                            what, (int)v->dtype);
    if (v->ndim != 2 || v->shape[0] < rows || v->shape[1] != cols)
        return loom_err_set(err, LOOM_ERR_INVALID,
                            "%s: the %s view has %d dims [%lld, %lld], but "
                            "[>= %lld, %lld] are needed",
                            who, what, (int)v->ndim, (long long)v->shape[0],
                            (long long)(v->ndim > 1 ? v->shape[1] : 0),
                            (long long)rows, (long long)cols);
    if (v->strides[1] != 1 || v->strides[0] < cols)
        return loom_err_set(err, LOOM_ERR_INVALID,
                            "%s: the %s view's strides [%lld, %lld] are not "
                            "dense rows of %lld",
                            who, what, (long long)v->strides[0],
                            (long long)v->strides[1], (long long)cols);
    if (kind == LOOM_MEM_HOST ? !v->data : !v->device_ptr)
        return loom_err_set(err, LOOM_ERR_INVALID,
                            "%s: the %s view has no "
                            "memory",
                            who, what);
    return LOOM_OK;
}

loom_status loom_round_plan_make(loom_round_plan *p, const loom_round *round,
                                 const loom_output *out,
                                 const loom_plan_rules *rules, loom_err *err)
{
    const char *who = rules->who;
    p->n_streams = p->n_rows = p->n_logits = p->n_taps = 0;
    p->max_len = 0;
    if (!LOOM_HAS_FIELD(round->struct_size, loom_round, n_rows))
        return loom_err_set(err, LOOM_ERR_INVALID,
                            "%s: the round is %u bytes, ABI 2.0's is %zu", who,
                            (unsigned)round->struct_size, sizeof *round);
    int32_t n = round->n_rows > 0 ? round->n_rows : 0;
    if (n > 0 && round->row_size < sizeof(loom_row))
        return loom_err_set(err, LOOM_ERR_INVALID,
                            "%s: rows are %u bytes, ABI 2.0's are %zu", who,
                            (unsigned)round->row_size, sizeof(loom_row));
    if (n > 0 && !round->rows)
        return loom_err_set(err, LOOM_ERR_INVALID,
                            "%s: %d rows but no row array", who, n);
    if (n > rules->max_rows)
        return loom_err_set(err, LOOM_ERR_RANGE,
                            "%s: %d rows, more than max_rows %d", who, n,
                            rules->max_rows);
    if (n == 0)
        return LOOM_OK;
    loom_status st = plan_reserve(p, n, who, err);
    if (st != LOOM_OK)
        return st;

    /* sized for this round, not the largest so far: clearing it is O(n) */
    uint32_t size = plan_map_size(n);
    uint32_t mask = size - 1;
    memset(p->map, 0, size * sizeof *p->map);

    for (int32_t i = 0; i < n; i++) {
        const loom_row *r = loom_round_row(round, i);
        st = plan_check_row(r, i, rules, err);
        if (st != LOOM_OK)
            return st;
        p->n_logits += (r->flags & LOOM_ROW_LOGITS) != 0;
        p->n_taps += (r->flags & LOOM_ROW_TAP) != 0;
        int32_t s = plan_stream(p, mask, r->cache, rules);
        p->stream_of[i] = s;
        p->streams[s].count++;
    }
    st = plan_check_output(p, out, rules, err);
    if (st != LOOM_OK)
        return st;

    /* lay the rows out stream by stream, each in round order */
    int32_t off = 0;
    for (int32_t s = 0; s < p->n_streams; s++) {
        loom_plan_stream *ps = &p->streams[s];
        ps->first = off;
        off += ps->count;
        ps->count = 0;
    }
    for (int32_t i = 0; i < n; i++) {
        const loom_row *r = loom_round_row(round, i);
        loom_plan_stream *ps = &p->streams[p->stream_of[i]];
        int32_t k = ps->count++;
        p->rows[ps->first + k] = i;
        int64_t want = ps->len0 + k;
        if (r->position != want)
            return loom_err_set(err, LOOM_ERR_INVALID,
                                "%s: row %d has position %d, but its cache "
                                "expects %lld (its length, then one more per "
                                "row of it in the round)",
                                who, i, r->position, (long long)want);
        if (r->position >= rules->max_context)
            return loom_err_set(err, LOOM_ERR_FULL,
                                "%s: row %d at position %d would pass the "
                                "context limit %lld",
                                who, i, r->position,
                                (long long)rules->max_context);
        int spec = (r->flags & LOOM_ROW_SPECULATIVE) != 0;
        if (spec && ps->first_spec < 0)
            ps->first_spec = k;
        else if (!spec && ps->first_spec >= 0)
            return loom_err_set(err, LOOM_ERR_INVALID,
                                "%s: row %d (position %d) is not speculative "
                                "but follows a speculative row of its cache",
                                who, i, r->position);
        if (spec && k - ps->first_spec >= LOOM_MAX_WINDOW)
            return loom_err_set(err, LOOM_ERR_RANGE,
                                "%s: row %d (position %d) would make its "
                                "cache's window longer than LOOM_MAX_WINDOW "
                                "(%d rows)",
                                who, i, r->position, LOOM_MAX_WINDOW);
    }
    for (int32_t s = 0; s < p->n_streams; s++) {
        int64_t len = p->streams[s].len0 + p->streams[s].count;
        if (len > p->max_len)
            p->max_len = len;
    }
    p->n_rows = n;
    return LOOM_OK;
}
