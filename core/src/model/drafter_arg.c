/* --drafter NAME[:key=value,...]: parsing a drafter named without a
 * checkpoint, and refusing the options it does not know. */
#include <loom/drafter_arg.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <loom/checkpoint.h>
#include <loom/platform.h>

#define MAX_KNOWN 32

int loom__drafter_arg_is_name(const char *arg)
{
    return arg && *arg && !strchr(arg, '/') && !strchr(arg, '\\') &&
           !loom_dir_exists(arg);
}

/* "3" an integer, "0.5" a real, true/false, anything else a string. */
static json_t *option_value(const char *v)
{
    char *end;
    errno = 0;
    long long i = strtoll(v, &end, 10);
    if (*v && !*end && errno == 0)
        return json_integer(i);
    double d = strtod(v, &end);
    if (*v && !*end && errno == 0)
        return json_real(d);
    if (!strcmp(v, "true") || !strcmp(v, "false"))
        return json_boolean(!strcmp(v, "true"));
    return json_string(v);
}

loom_status loom__drafter_arg_parse(const char *arg, char *name, size_t size,
                                    json_t **options, loom_err *err)
{
    const char *colon = strchr(arg, ':');
    size_t n = colon ? (size_t)(colon - arg) : strlen(arg);
    if (n == 0 || n >= size)
        return loom_err_set(err, LOOM_ERR_INVALID,
                            "--drafter %s: no drafter name before ':'", arg);
    memcpy(name, arg, n);
    name[n] = '\0';
    json_t *obj = json_object();
    if (!obj)
        return loom_err_set(err, LOOM_ERR_NOMEM, "out of memory");
    const char *p = colon ? colon + 1 : NULL;
    while (p) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char item[256];
        if (len >= sizeof item) {
            json_decref(obj);
            return loom_err_set(err, LOOM_ERR_INVALID,
                                "--drafter %s: an option of %zu characters",
                                arg, len);
        }
        memcpy(item, p, len);
        item[len] = '\0';
        char *eq = strchr(item, '=');
        if (!eq || eq == item) {
            json_decref(obj);
            return loom_err_set(err, LOOM_ERR_INVALID,
                                "--drafter %s: option '%s' is not key=value",
                                arg, item);
        }
        *eq = '\0';
        if (json_object_get(obj, item)) {
            json_decref(obj);
            return loom_err_set(err, LOOM_ERR_INVALID,
                                "--drafter %s: option '%s' given twice", arg,
                                item);
        }
        if (json_object_set_new(obj, item, option_value(eq + 1)) != 0) {
            json_decref(obj);
            return loom_err_set(err, LOOM_ERR_NOMEM, "out of memory");
        }
        p = comma ? comma + 1 : NULL;
    }
    *options = obj;
    return LOOM_OK;
}

/* The keys a drafter's geometry reported. */
struct known {
    const char *keys[MAX_KNOWN];
    char buf[MAX_KNOWN][64];
    int n;
};

static void LOOM_ABI note(void *ctx, const char *key)
{
    struct known *k = ctx;
    if (k->n < MAX_KNOWN && key) {
        snprintf(k->buf[k->n], sizeof k->buf[k->n], "%s", key);
        k->keys[k->n] = k->buf[k->n];
        k->n++;
    }
}

static void LOOM_ABI note_i64(void *ctx, const char *key, int64_t v)
{
    (void)v;
    note(ctx, key);
}

static void LOOM_ABI note_f64(void *ctx, const char *key, double v)
{
    (void)v;
    note(ctx, key);
}

static void LOOM_ABI note_str(void *ctx, const char *key, const char *v)
{
    (void)v;
    note(ctx, key);
}

loom_status loom__drafter_arg_check(const loom_drafter_ref *d,
                                    const loom_host *host,
                                    const loom_checkpoint *ckpt, loom_err *err)
{
    struct known k;
    memset(&k, 0, sizeof k);
    loom_fields f = {sizeof f, &k, note_i64, note_f64, note_str};
    loom_status rc = loom_drafter_geometry(d, host, ckpt, &f, err);
    if (rc != LOOM_OK)
        return rc;
    const char *key;
    json_t *v;
    json_object_foreach(loom_checkpoint_config(ckpt), key, v)
    {
        int found = 0;
        for (int i = 0; i < k.n && !found; i++)
            found = !strcmp(k.keys[i], key);
        if (found)
            continue;
        char list[512] = "";
        size_t used = 0;
        for (int i = 0; i < k.n; i++) {
            int w = snprintf(list + used, sizeof list - used, "%s%s",
                             i ? ", " : "", k.keys[i]);
            if (w > 0 && used + (size_t)w < sizeof list)
                used += (size_t)w;
        }
        return loom_err_set(err, LOOM_ERR_INVALID,
                            "drafter %s: unknown option '%s' (%s takes: %s)",
                            d->name, key, d->name, k.n ? list : "none");
    }
    return LOOM_OK;
}
