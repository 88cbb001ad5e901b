/* The config.json readers declared in loom/config.h. */
#include <loom/config.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include <loom/checked.h>

/* c->file and c->prefix for messages; either may be left NULL. */
static const char *cfg_file(const loom_cfg *c)
{
    return c->file ? c->file : "config.json";
}

static const char *cfg_prefix(const loom_cfg *c)
{
    return c->prefix ? c->prefix : "";
}

static int cfg_missing(loom_json_type t)
{
    return t == LOOM_JSON_MISSING || t == LOOM_JSON_NULL;
}

const char *loom_cfg_type_name(loom_json_type t)
{
    switch (t) {
    case LOOM_JSON_MISSING:
        return "missing";
    case LOOM_JSON_NULL:
        return "null";
    case LOOM_JSON_BOOL:
        return "a boolean";
    case LOOM_JSON_INT:
        return "an integer";
    case LOOM_JSON_REAL:
        return "a real";
    case LOOM_JSON_STRING:
        return "a string";
    case LOOM_JSON_ARRAY:
        return "an array";
    default:
        return "an object";
    }
}

int loom_cfg_has(const loom_cfg *c, const char *key)
{
    return !cfg_missing(c->host->json_type(c->host->json_get(c->obj, key)));
}

loom_status loom_cfg_int(const loom_cfg *c, const char *key, int required,
                         int64_t def, int64_t min, int64_t max, int64_t *out)
{
    const loom_host *h = c->host;
    const loom_json *v = h->json_get(c->obj, key);
    loom_json_type t = h->json_type(v);
    int64_t x = def;
    if (cfg_missing(t)) {
        if (required)
            return loom_err_set(c->err, LOOM_ERR_FORMAT,
                                "%s: %s%s is required but %s", cfg_file(c),
                                cfg_prefix(c), key, loom_cfg_type_name(t));
    } else if (t == LOOM_JSON_REAL && c->integral_reals) {
        double d = h->json_real(v);
        if (d != floor(d))
            return loom_err_set(c->err, LOOM_ERR_FORMAT,
                                "%s: %s%s = %g must be an integer", cfg_file(c),
                                cfg_prefix(c), key, d);
        /* a cast of a real past int64 is undefined (and printed wrong) */
        if (loom_f64_to_i64(d, &x))
            return loom_err_set(c->err, LOOM_ERR_FORMAT,
                                "%s: %s%s = %g is out of range", cfg_file(c),
                                cfg_prefix(c), key, d);
    } else if (t == LOOM_JSON_INT) {
        x = h->json_int(v);
    } else {
        return loom_err_set(c->err, LOOM_ERR_FORMAT,
                            "%s: %s%s must be an integer, not %s", cfg_file(c),
                            cfg_prefix(c), key, loom_cfg_type_name(t));
    }
    if (x < min && (min == 0 || min == 1))
        return loom_err_set(c->err, LOOM_ERR_FORMAT,
                            "%s: %s%s = %lld must be %s", cfg_file(c),
                            cfg_prefix(c), key, (long long)x,
                            min ? "positive" : "non-negative");
    if (x < min)
        return loom_err_set(c->err, LOOM_ERR_FORMAT,
                            "%s: %s%s = %lld must be >= %lld", cfg_file(c),
                            cfg_prefix(c), key, (long long)x, (long long)min);
    if (x > max)
        return loom_err_set(c->err, LOOM_ERR_FORMAT,
                            "%s: %s%s = %lld exceeds %lld", cfg_file(c),
                            cfg_prefix(c), key, (long long)x, (long long)max);
    *out = x;
    return LOOM_OK;
}

loom_status loom_cfg_real(const loom_cfg *c, const char *key, double def,
                          double *out)
{
    const loom_json *v = c->host->json_get(c->obj, key);
    loom_json_type t = c->host->json_type(v);
    if (cfg_missing(t)) {
        *out = def;
        return LOOM_OK;
    }
    if (t != LOOM_JSON_INT && t != LOOM_JSON_REAL)
        return loom_err_set(c->err, LOOM_ERR_FORMAT,
                            "%s: %s%s must be a number, not %s", cfg_file(c),
                            cfg_prefix(c), key, loom_cfg_type_name(t));
    *out = c->host->json_real(v);
    return LOOM_OK;
}

loom_status loom_cfg_pos_real(const loom_cfg *c, const char *key, double def,
                              double *out)
{
    if (!loom_cfg_has(c, key)) {
        *out = def;
        return LOOM_OK;
    }
    double x;
    loom_status st = loom_cfg_real(c, key, def, &x);
    if (st != LOOM_OK)
        return st;
    if (!(x > 0.0))
        return loom_err_set(c->err, LOOM_ERR_FORMAT,
                            "%s: %s%s = %g must be positive", cfg_file(c),
                            cfg_prefix(c), key, x);
    *out = x;
    return LOOM_OK;
}

loom_status loom_cfg_bool(const loom_cfg *c, const char *key, int def, int *out)
{
    const loom_json *v = c->host->json_get(c->obj, key);
    loom_json_type t = c->host->json_type(v);
    if (cfg_missing(t)) {
        *out = def;
        return LOOM_OK;
    }
    if (t != LOOM_JSON_BOOL)
        return loom_err_set(c->err, LOOM_ERR_FORMAT,
                            "%s: %s%s must be a boolean, not %s", cfg_file(c),
                            cfg_prefix(c), key, loom_cfg_type_name(t));
    *out = c->host->json_bool(v);
    return LOOM_OK;
}

/* Adds the integer ids of `v` (an integer or a list) not already there. */
static void cfg_add_eos(const loom_host *h, const loom_json *v, int64_t vocab,
                        int32_t *eos, int32_t *n_eos)
{
    int list = h->json_type(v) == LOOM_JSON_ARRAY;
    size_t n = list ? h->json_len(v) : 1;
    for (size_t i = 0; i < n; i++) {
        const loom_json *e = list ? h->json_at(v, i) : v;
        if (h->json_type(e) != LOOM_JSON_INT)
            continue;
        int64_t id = h->json_int(e);
        if (vocab > 0 && (id < 0 || id >= vocab))
            continue;
        if (id < INT32_MIN || id > INT32_MAX)
            continue; /* never truncated into another id */
        int dup = 0;
        for (int32_t j = 0; j < *n_eos; j++)
            dup |= eos[j] == (int32_t)id;
        if (!dup && *n_eos < LOOM_MAX_EOS)
            eos[(*n_eos)++] = (int32_t)id;
    }
}

void loom_cfg_eos_ids(const loom_host *host, const loom_checkpoint *ckpt,
                      int64_t vocab, int32_t eos[LOOM_MAX_EOS], int32_t *n_eos)
{
    const loom_json *root = host->config(ckpt);
    const loom_json *tc = host->text_config(ckpt);
    *n_eos = 0;
    if (tc && tc != root)
        cfg_add_eos(host, host->json_get(tc, "eos_token_id"), vocab, eos,
                    n_eos);
    cfg_add_eos(host, host->json_get(root, "eos_token_id"), vocab, eos, n_eos);
    cfg_add_eos(host,
                host->json_get(host->generation_config(ckpt), "eos_token_id"),
                vocab, eos, n_eos);
}

/* Refuses the eos ids of V (FIELD of FILE) that are not integers in
 * [0, vocab). */
static loom_status cfg_check_eos(const loom_host *h, const loom_json *v,
                                 int64_t vocab, const char *file,
                                 const char *field, loom_err *err)
{
    loom_json_type t = h->json_type(v);
    if (cfg_missing(t))
        return LOOM_OK;
    int list = t == LOOM_JSON_ARRAY;
    size_t n = list ? h->json_len(v) : 1;
    for (size_t i = 0; i < n; i++) {
        const loom_json *e = list ? h->json_at(v, i) : v;
        char at[24] = "";
        if (list)
            snprintf(at, sizeof at, "[%zu]", i);
        loom_json_type et = h->json_type(e);
        if (et != LOOM_JSON_INT)
            return loom_err_set(err, LOOM_ERR_FORMAT,
                                "%s: %s%s must be a token id, not %s", file,
                                field, at, loom_cfg_type_name(et));
        int64_t id = h->json_int(e);
        if (id < 0 || id >= vocab)
            return loom_err_set(err, LOOM_ERR_FORMAT,
                                "%s: %s%s = %lld is outside the vocabulary "
                                "[0, %lld)",
                                file, field, at, (long long)id,
                                (long long)vocab);
    }
    return LOOM_OK;
}

loom_status loom_cfg_eos_ids_check(const loom_host *host,
                                   const loom_checkpoint *ckpt, int64_t vocab,
                                   loom_err *err)
{
    const loom_json *root = host->config(ckpt);
    const loom_json *tc = host->text_config(ckpt);
    loom_status st = LOOM_OK;
    if (tc && tc != root)
        st = cfg_check_eos(host, host->json_get(tc, "eos_token_id"), vocab,
                           "config.json", "text_config.eos_token_id", err);
    if (st == LOOM_OK)
        st = cfg_check_eos(host, host->json_get(root, "eos_token_id"), vocab,
                           "config.json", "eos_token_id", err);
    if (st == LOOM_OK)
        st = cfg_check_eos(
            host, host->json_get(host->generation_config(ckpt), "eos_token_id"),
            vocab, "generation_config.json", "eos_token_id", err);
    return st;
}

static int cfg_in(const char *s, const char *const *list, size_t n)
{
    for (size_t i = 0; s && i < n; i++)
        if (strcmp(s, list[i]) == 0)
            return 1;
    return 0;
}

int32_t loom_cfg_probe(const loom_host *host, const loom_checkpoint *ckpt,
                       const char *const *archs, size_t n_archs,
                       const char *const *types, size_t n_types)
{
    const loom_json *cfg = host->config(ckpt);
    const loom_json *list = host->json_get(cfg, "architectures");
    for (size_t i = 0; i < host->json_len(list); i++)
        if (cfg_in(host->json_str(host->json_at(list, i)), archs, n_archs))
            return 100;
    const char *mt = host->json_str(host->json_get(cfg, "model_type"));
    const char *tmt =
        host->json_str(host->json_get(host->text_config(ckpt), "model_type"));
    if (cfg_in(mt, types, n_types) || cfg_in(tmt, types, n_types))
        return 50;
    return 0;
}

void loom_cfg_report_ids(const loom_fields *out, const char *key,
                         const int32_t *ids, int32_t n)
{
    char buf[1024] = "";
    size_t used = 0;
    for (int32_t i = 0; i < n; i++) {
        int w = snprintf(buf + used, sizeof buf - used, "%s%d", i ? "," : "",
                         ids[i]);
        if (w < 0 || (size_t)w >= sizeof buf - used) {
            buf[used] = '\0'; /* drop the id that did not fit whole */
            break;
        }
        used += (size_t)w;
    }
    out->str(out->ctx, key, buf);
}
