/* A checkpoint directory: config.json (text fields possibly under
 * text_config), generation_config.json, and its tensors once loaded. */
#include <loom/checkpoint.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <loom/platform.h>
#include <loom/safetensors.h>

struct loom_checkpoint {
    char dir[1024];
    json_t *config;
    json_t *text_config; /* borrowed from config */
    json_t *generation;  /* NULL when absent */
    loom_st *tensors;    /* NULL until loaded */
    int bare;            /* made from a config alone: no directory */
};

loom_status loom_json_load_file(const char *path, json_t **out, loom_err *err)
{
    char *text = NULL;
    size_t size = 0;
    loom_status rc = loom_read_file(path, &text, &size, err);
    if (rc != LOOM_OK)
        return rc;
    json_error_t je;
    json_t *j = json_loadb(text, size, JSON_REJECT_DUPLICATES, &je);
    free(text);
    if (!j)
        return loom_err_set(err, LOOM_ERR_FORMAT, "%s:%d:%d: %s", path, je.line,
                            je.column, je.text);
    *out = j;
    return LOOM_OK;
}

loom_status loom_checkpoint_open(const char *model, loom_checkpoint **out,
                                 loom_err *err)
{
    loom_checkpoint *c = calloc(1, sizeof *c);
    if (!c)
        return loom_err_set(err, LOOM_ERR_NOMEM, "out of memory");
    loom_status rc = loom_model_resolve(model, c->dir, sizeof c->dir, err);
    if (rc != LOOM_OK)
        goto fail;

    char path[1200];
    snprintf(path, sizeof path, "%s/config.json", c->dir);
    if (!loom_file_exists(path)) {
        rc =
            loom_err_set(err, LOOM_ERR_NOT_FOUND, "%s: no config.json", c->dir);
        goto fail;
    }
    rc = loom_json_load_file(path, &c->config, err);
    if (rc != LOOM_OK)
        goto fail;
    if (!json_is_object(c->config)) {
        rc = loom_err_set(err, LOOM_ERR_FORMAT,
                          "%s: expected a JSON object at the top, found %s",
                          path,
                          json_is_array(c->config) ? "an array" : "a scalar");
        goto fail;
    }
    json_t *tc = json_object_get(c->config, "text_config");
    if (tc && !json_is_object(tc)) {
        rc = loom_err_set(err, LOOM_ERR_FORMAT,
                          "%s: text_config must be an object", path);
        goto fail;
    }
    c->text_config = tc ? tc : c->config;

    snprintf(path, sizeof path, "%s/generation_config.json", c->dir);
    if (loom_file_exists(path)) {
        rc = loom_json_load_file(path, &c->generation, err);
        if (rc != LOOM_OK)
            goto fail;
        if (!json_is_object(c->generation)) {
            rc = loom_err_set(err, LOOM_ERR_FORMAT,
                              "%s: expected a JSON object", path);
            goto fail;
        }
    }
    *out = c;
    return LOOM_OK;
fail:
    loom_checkpoint_close(c);
    return rc;
}

loom_status loom_checkpoint_from_config(const char *name, json_t *config,
                                        loom_checkpoint **out, loom_err *err)
{
    if (!json_is_object(config)) {
        json_decref(config);
        return loom_err_set(err, LOOM_ERR_INVALID,
                            "%s: config is not an object", name);
    }
    loom_checkpoint *c = calloc(1, sizeof *c);
    if (!c) {
        json_decref(config);
        return loom_err_set(err, LOOM_ERR_NOMEM, "out of memory");
    }
    snprintf(c->dir, sizeof c->dir, "%s", name);
    c->config = config;
    c->text_config = config;
    c->bare = 1;
    *out = c;
    return LOOM_OK;
}

loom_status loom_checkpoint_load_tensors(loom_checkpoint *ckpt, loom_err *err)
{
    if (ckpt->tensors || ckpt->bare)
        return LOOM_OK;
    return loom_st_open_dir(ckpt->dir, &ckpt->tensors, err);
}

void loom_checkpoint_close(loom_checkpoint *ckpt)
{
    if (!ckpt)
        return;
    json_decref(ckpt->config);
    json_decref(ckpt->generation);
    loom_st_close(ckpt->tensors);
    free(ckpt);
}

const char *loom_checkpoint_dir(const loom_checkpoint *ckpt)
{
    return ckpt->dir;
}

json_t *loom_checkpoint_config(const loom_checkpoint *ckpt)
{
    return ckpt->config;
}

json_t *loom_checkpoint_text_config(const loom_checkpoint *ckpt)
{
    return ckpt->text_config;
}

json_t *loom_checkpoint_generation_config(const loom_checkpoint *ckpt)
{
    return ckpt->generation;
}

int loom_checkpoint_pin(loom_checkpoint *ckpt, uint64_t *bytes, loom_err *err)
{
    *bytes = 0;
    return ckpt->tensors ? loom_st_pin(ckpt->tensors, bytes, err) : 0;
}

const loom_st *loom_checkpoint_tensors(const loom_checkpoint *ckpt)
{
    return ckpt->tensors;
}
