/* The loom_host table: the services a plugin gets from the core (config
 * JSON, tensors, thread pool, CPU kernels, accounting, its own log name). */
#include <loom/host.h>

#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <loom/checked.h>
#include <loom/checkpoint.h>
#include <loom/log.h>
#include <loom/platform.h>
#include <loom/safetensors.h>
#include <loom/weights.h>

/* loom_json is a Jansson json_t seen through the ABI. */
#define J(v) ((json_t *)(v))

static const loom_json *LOOM_ABI h_config(const loom_checkpoint *c)
{
    return (const loom_json *)loom_checkpoint_config(c);
}

static const loom_json *LOOM_ABI h_text_config(const loom_checkpoint *c)
{
    return (const loom_json *)loom_checkpoint_text_config(c);
}

static const loom_json *LOOM_ABI h_generation_config(const loom_checkpoint *c)
{
    return (const loom_json *)loom_checkpoint_generation_config(c);
}

static const char *LOOM_ABI h_checkpoint_path(const loom_checkpoint *c)
{
    return loom_checkpoint_dir(c);
}

static loom_json_type LOOM_ABI h_json_type(const loom_json *v)
{
    if (!v)
        return LOOM_JSON_MISSING;
    switch (json_typeof(J(v))) {
    case JSON_OBJECT:
        return LOOM_JSON_OBJECT;
    case JSON_ARRAY:
        return LOOM_JSON_ARRAY;
    case JSON_STRING:
        return LOOM_JSON_STRING;
    case JSON_INTEGER:
        return LOOM_JSON_INT;
    case JSON_REAL:
        return LOOM_JSON_REAL;
    case JSON_TRUE:
    case JSON_FALSE:
        return LOOM_JSON_BOOL;
    default:
        return LOOM_JSON_NULL;
    }
}

static const loom_json *LOOM_ABI h_json_get(const loom_json *o, const char *k)
{
    if (!o || !json_is_object(J(o)))
        return NULL;
    return (const loom_json *)json_object_get(J(o), k);
}

static size_t LOOM_ABI h_json_len(const loom_json *a)
{
    return a && json_is_array(J(a)) ? json_array_size(J(a)) : 0;
}

static const loom_json *LOOM_ABI h_json_at(const loom_json *a, size_t i)
{
    if (!a || !json_is_array(J(a)))
        return NULL;
    return (const loom_json *)json_array_get(J(a), i);
}

static int64_t LOOM_ABI h_json_int(const loom_json *v)
{
    if (!v)
        return 0;
    if (json_is_integer(J(v)))
        return (int64_t)json_integer_value(J(v));
    if (json_is_real(J(v))) {
        /* saturated: a cast of a real past int64 is undefined */
        double d = json_real_value(J(v));
        int64_t i = 0;
        if (loom_f64_to_i64(d, &i))
            i = d > 0 ? INT64_MAX : d < 0 ? INT64_MIN : 0;
        return i;
    }
    return 0;
}

static double LOOM_ABI h_json_real(const loom_json *v)
{
    return v ? json_number_value(J(v)) : 0.0;
}

static int LOOM_ABI h_json_bool(const loom_json *v)
{
    return v && json_is_true(J(v));
}

static const char *LOOM_ABI h_json_str(const loom_json *v)
{
    return v && json_is_string(J(v)) ? json_string_value(J(v)) : NULL;
}

/* The 2.0 structs, whole: a caller's struct must hold at least these. */
#define TENSOR_MIN_SIZE                                                        \
    (offsetof(loom_tensor, nbytes) + sizeof(((loom_tensor *)0)->nbytes))
#define WEIGHT_MIN_SIZE                                                        \
    (offsetof(loom_weight, biases) + sizeof(((loom_weight *)0)->biases))

/* Copies the core's struct `src` (`size` bytes) into a caller's struct whose
 * leading struct_size says how much it holds: only what both hold is
 * written, and out's struct_size then says how much that was. */
static void fill_sized(void *out, const void *src, size_t size)
{
    uint32_t want;
    memcpy(&want, out, sizeof want);
    size_t n = want < size ? want : size;
    memcpy(out, src, n);
    uint32_t got = (uint32_t)n;
    memcpy(out, &got, sizeof got);
}

static loom_status check_size(uint32_t have, size_t need, const char *what,
                              const char *name, loom_err *err)
{
    if (have >= need)
        return LOOM_OK;
    return loom_err_set(err, LOOM_ERR_ABI,
                        "%s '%s': the caller's %s is %u bytes, ABI %d.0 "
                        "needs %zu",
                        what, name, what, (unsigned)have, LOOM_ABI_MAJOR, need);
}

static loom_status LOOM_ABI h_tensor_find(const loom_checkpoint *c,
                                          const char *name, loom_tensor *out,
                                          loom_err *err)
{
    loom_status rc =
        check_size(out->struct_size, TENSOR_MIN_SIZE, "loom_tensor", name, err);
    if (rc != LOOM_OK)
        return rc;
    const loom_st *st = loom_checkpoint_tensors(c);
    if (!st)
        return loom_err_set(err, LOOM_ERR_STATE, "%s: tensors are not loaded",
                            loom_checkpoint_dir(c));
    const loom_tensor *t = loom_st_find(st, name);
    if (!t)
        return loom_err_set(err, LOOM_ERR_NOT_FOUND,
                            "%s: checkpoint has no tensor '%s'",
                            loom_checkpoint_dir(c), name);
    fill_sized(out, t, sizeof *t);
    return LOOM_OK;
}

static int LOOM_ABI h_tensor_next(const loom_checkpoint *c, const char *prefix,
                                  size_t *cursor, loom_tensor *out)
{
    if (out->struct_size < TENSOR_MIN_SIZE) {
        /* no err to fill: say it once in the log, and end the iteration */
        loom_log(LOOM_LOG_ERROR,
                 "tensor_next: the caller's loom_tensor is %u bytes, ABI "
                 "%d.0 needs %zu",
                 (unsigned)out->struct_size, LOOM_ABI_MAJOR,
                 (size_t)TENSOR_MIN_SIZE);
        return 0;
    }
    const loom_st *st = loom_checkpoint_tensors(c);
    if (!st)
        return 0;
    size_t plen = prefix ? strlen(prefix) : 0;
    size_t n = loom_st_count(st);
    while (*cursor < n) {
        const loom_tensor *t = loom_st_at(st, (*cursor)++);
        if (plen == 0 || strncmp(t->name, prefix, plen) == 0) {
            fill_sized(out, t, sizeof *t);
            return 1;
        }
    }
    return 0;
}

static loom_status LOOM_ABI h_weight_find(const loom_checkpoint *c,
                                          const char *base, int64_t rows,
                                          int64_t cols, loom_weight *out,
                                          loom_err *err)
{
    loom_status rc =
        check_size(out->struct_size, WEIGHT_MIN_SIZE, "loom_weight", base, err);
    if (rc != LOOM_OK)
        return rc;
    loom_weight w;
    memset(&w, 0, sizeof w);
    rc = loom_weight_find(c, base, rows, cols, &w, err);
    if (rc != LOOM_OK)
        return rc;
    w.struct_size = sizeof w;
    fill_sized(out, &w, sizeof w);
    return LOOM_OK;
}

/* The state that owns the pool and the accounting behind a table. */
static loom_host_state *state_of(const loom_host *h)
{
    /* host is the first member of loom_host_state */
    return ((loom_host_state *)h)->root;
}

static void LOOM_ABI h_log(const loom_host *h, loom_log_level level,
                           const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    loom_log_v(((const loom_host_state *)h)->who, level, fmt, ap);
    va_end(ap);
}

static int LOOM_ABI h_n_threads(const loom_host *h)
{
    return loom_pool_size(state_of(h)->pool);
}

static void LOOM_ABI h_parallel_for(const loom_host *h, int64_t n,
                                    loom_range_fn fn, void *ctx)
{
    loom_pool_run(state_of(h)->pool, n, fn, ctx);
}

static void LOOM_ABI h_matmul(const loom_host *h, const loom_weight *w,
                              const float *x, float *y, int64_t n_tok)
{
    const loom_host_state *s = state_of(h);
    loom__matmul_run(s->pool, (loom_mm_isa)s->mm_isa, w, x, y, n_tok);
}

static void LOOM_ABI h_matmul_prompt(const loom_host *h, const loom_weight *w,
                                     const float *x, float *y, int64_t n_tok)
{
    const loom_host_state *s = state_of(h);
    loom__matmul_prompt_run(s->pool, (loom_mm_isa)s->mm_prompt_isa, w, x, y,
                            n_tok);
}

static void LOOM_ABI h_weight_row(const loom_weight *w, int64_t row, float *out)
{
    loom_weight_row(w, row, out);
}

static const char *const use_names[LOOM_MEM_USE_COUNT] = {
    "weights", "cache", "scratch", "graphs", "drafter"};

/* Counts delta against the kind's budget: a positive delta that would pass
 * it is refused and not counted (a compare-and-swap, as plugins may report
 * from several threads). */
static loom_status LOOM_ABI h_account(const loom_host *h, loom_mem_kind kind,
                                      loom_mem_use use, int64_t delta,
                                      loom_err *err)
{
    loom_host_state *s = state_of(h);
    if ((int)kind < 0 || (int)kind > 1 || (int)use < 0 ||
        (int)use >= LOOM_MEM_USE_COUNT)
        return loom_err_set(err, LOOM_ERR_INVALID,
                            "account: memory kind %d, use %d", (int)kind,
                            (int)use);
    int64_t cur = atomic_load(&s->accounted_total[kind]);
    for (;;) {
        if (delta > 0 && cur > s->budget[kind] - delta)
            return loom_err_set(
                err, LOOM_ERR_FULL,
                "%s memory for %s: %lld bytes more would pass the budget of "
                "%lld (%lld in use)",
                kind == LOOM_MEM_HOST ? "host" : "device", use_names[use],
                (long long)delta, (long long)s->budget[kind], (long long)cur);
        if (atomic_compare_exchange_weak(&s->accounted_total[kind], &cur,
                                         cur + delta))
            break;
    }
    atomic_fetch_add(&s->accounted[kind][use], delta);
    return LOOM_OK;
}

static void *LOOM_ABI h_alloc_resident(const loom_host *h, size_t bytes)
{
    (void)h;
    return loom_resident_alloc(bytes);
}

static void LOOM_ABI h_free_resident(const loom_host *h, void *p, size_t bytes)
{
    (void)h;
    loom_resident_free(p, bytes);
}

static const struct loom_cuda *LOOM_ABI h_cuda(const loom_host *h)
{
    /* lent tables answer from the root, where the engine set it */
    return state_of(h)->cuda;
}

void loom_host_init(loom_host_state *s, loom_pool *pool)
{
    memset(s, 0, sizeof *s);
    s->pool = pool;
    s->root = s;
    s->mm_isa = (int)loom_matmul_isa();
    s->mm_prompt_isa = (int)loom_matmul_prompt_default();
    s->budget[LOOM_MEM_HOST] = INT64_MAX;
    s->budget[LOOM_MEM_DEVICE] = INT64_MAX;
    loom_host *h = &s->host;
    h->struct_size = sizeof *h;
    h->abi_major = LOOM_ABI_MAJOR;
    h->abi_minor = LOOM_ABI_MINOR;
    h->log = h_log;
    h->config = h_config;
    h->text_config = h_text_config;
    h->generation_config = h_generation_config;
    h->checkpoint_path = h_checkpoint_path;
    h->json_type = h_json_type;
    h->json_get = h_json_get;
    h->json_len = h_json_len;
    h->json_at = h_json_at;
    h->json_int = h_json_int;
    h->json_real = h_json_real;
    h->json_bool = h_json_bool;
    h->json_str = h_json_str;
    h->tensor_find = h_tensor_find;
    h->tensor_next = h_tensor_next;
    h->weight_find = h_weight_find;
    h->n_threads = h_n_threads;
    h->parallel_for = h_parallel_for;
    h->matmul = h_matmul;
    h->weight_row = h_weight_row;
    h->account = h_account;
    h->cuda = h_cuda;
    h->matmul_prompt = h_matmul_prompt;
    h->alloc_resident = h_alloc_resident;
    h->free_resident = h_free_resident;
}

void loom_host_lend(loom_host_state *out, loom_host_state *base,
                    const char *who)
{
    loom_host_state *root = base->root;
    loom_host_init(out, root->pool);
    out->who = who;
    out->root = root;
}

void loom_host_set_budget(loom_host_state *state, loom_mem_kind kind,
                          int64_t bytes)
{
    state->root->budget[kind] = bytes;
}

int64_t loom_host_accounted(const loom_host_state *state, loom_mem_kind kind,
                            int use)
{
    const loom_host_state *r = state->root;
    if (use < 0)
        return atomic_load(&((loom_host_state *)r)->accounted_total[kind]);
    return atomic_load(&((loom_host_state *)r)->accounted[kind][use]);
}
