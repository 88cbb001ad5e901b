/* Chat templates: parsing (chat_template_lex.c, chat_template_parse.c),
 * loading from tokenizer_config.json, and rendering with HF's variables
 * (the interpreter is chat_template_eval.c). */
#include <stdlib.h>
#include <string.h>

#include <loom/platform.h>

#include "chat_template_impl.h"
#include "tokenizer_impl.h"

loom_status loom_chat_template_parse(const char *source,
                                     loom_chat_template **out, loom_err *err)
{
    /* Jinja reads the source with universal newlines and drops one final
     * newline (keep_trailing_newline is off in HF's environment). */
    size_t len = strlen(source);
    char *src = malloc(len + 1);
    if (!src)
        return loom_err_set(err, LOOM_ERR_NOMEM, "out of memory");
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (source[i] == '\r') {
            src[n++] = '\n';
            if (i + 1 < len && source[i + 1] == '\n')
                i++;
        } else {
            src[n++] = source[i];
        }
    }
    if (n && src[n - 1] == '\n')
        n--;
    src[n] = '\0';

    tk *toks = NULL;
    size_t n_toks = 0;
    loom_status st = loom__ct_lex(src, n, &toks, &n_toks, err);
    free(src);
    loom_chat_template *t = NULL;
    if (st == LOOM_OK) {
        t = calloc(1, sizeof *t);
        if (!t)
            st = loom_err_set(err, LOOM_ERR_NOMEM, "out of memory");
        else
            st = loom__ct_parse(toks, n_toks, &t->body, err);
        if (st != LOOM_OK) {
            loom_chat_template_free(t);
            t = NULL;
        }
        loom__ct_tokens_free(toks, n_toks);
    }
    if (st == LOOM_OK)
        *out = t;
    return st;
}

void loom_chat_template_free(loom_chat_template *t)
{
    if (!t)
        return;
    loom__ct_free_list(&t->body);
    free(t->bos);
    free(t->eos);
    free(t);
}

const char *loom_chat_template_bos(const loom_chat_template *t)
{
    return t->bos ? t->bos : "";
}

const char *loom_chat_template_eos(const loom_chat_template *t)
{
    return t->eos ? t->eos : "";
}

/* A special token in tokenizer_config.json: a string, or an object with
 * "content" (the AddedToken form). */
static char *token_string(json_t *v)
{
    if (json_is_object(v))
        v = json_object_get(v, "content");
    return json_is_string(v) ? loom__ct_strdup(json_string_value(v)) : NULL;
}

/* tokenizer_config.json's chat_template: a string, or a list of named
 * templates of which "default" is used. NULL when none. */
static const char *config_template(json_t *cfg)
{
    json_t *tpl = json_object_get(cfg, "chat_template");
    if (json_is_array(tpl)) {
        size_t i;
        json_t *v, *found = NULL;
        json_array_foreach(tpl, i, v)
        {
            const char *name = json_string_value(json_object_get(v, "name"));
            if (name && !strcmp(name, "default"))
                found = json_object_get(v, "template");
        }
        tpl = found;
    }
    return json_string_value(tpl);
}

loom_status loom_chat_template_load_file(const char *dir, const char *file,
                                         loom_chat_template **out,
                                         loom_err *err)
{
    char path[4096], jinja[4096];
    json_t *cfg = NULL;
    loom_status st = loom__tok_read_json(dir, "tokenizer_config.json", 0, path,
                                         sizeof path, &cfg, err);
    /* newer uploads keep the template in chat_template.jinja, which
     * transformers prefers to tokenizer_config.json's */
    if (!file && loom_dir_exists(dir)) {
        snprintf(jinja, sizeof jinja, "%s%cchat_template.jinja", dir,
                 loom_path_sep());
        if (loom_file_exists(jinja))
            file = jinja;
    }
    if (st != LOOM_OK && !(file && st == LOOM_ERR_NOT_FOUND))
        return st;
    char *src = NULL;
    const char *source = NULL, *from = path;
    if (file) {
        size_t size = 0;
        st = loom_read_file(file, &src, &size, err);
        if (st != LOOM_OK) {
            json_decref(cfg);
            return st;
        }
        source = src;
        from = file;
    } else {
        source = config_template(cfg);
    }
    if (!source) {
        json_decref(cfg);
        return loom_err_set(err, LOOM_ERR_NOT_FOUND, "%s: no chat_template",
                            path);
    }
    st = loom_chat_template_parse(source, out, err);
    if (st == LOOM_OK) {
        (*out)->bos = token_string(json_object_get(cfg, "bos_token"));
        (*out)->eos = token_string(json_object_get(cfg, "eos_token"));
    } else {
        loom_err_prefix(err, "%s", from);
    }
    free(src);
    json_decref(cfg);
    return st;
}

loom_status loom_chat_template_load(const char *dir, loom_chat_template **out,
                                    loom_err *err)
{
    return loom_chat_template_load_file(dir, NULL, out, err);
}

loom_status loom_chat_render(const char *tmpl, json_t *messages,
                             int add_generation_prompt, json_t *extra,
                             char **out, loom_err *err)
{
    loom_chat_template *t = NULL;
    loom_status st = loom_chat_template_parse(tmpl, &t, err);
    if (st != LOOM_OK)
        return st;
    st = loom_chat_template_render(t, messages, add_generation_prompt, extra,
                                   out, err);
    loom_chat_template_free(t);
    return st;
}

loom_status loom_chat_template_render(const loom_chat_template *t,
                                      json_t *messages,
                                      int add_generation_prompt, json_t *extra,
                                      char **out, loom_err *err)
{
    if (!json_is_array(messages))
        return loom_err_set(err, LOOM_ERR_INVALID,
                            "chat template: messages is not an array");
    json_t *vars = json_object();
    if (!vars)
        return loom_err_set(err, LOOM_ERR_NOMEM, "out of memory");
    /* What HF's apply_chat_template passes: tools and documents default to
     * None, the special tokens that the config names, then the extras. */
    json_object_set(vars, "messages", messages);
    json_object_set_new(vars, "add_generation_prompt",
                        json_boolean(add_generation_prompt));
    json_object_set_new(vars, "tools", json_null());
    json_object_set_new(vars, "documents", json_null());
    if (t->bos)
        json_object_set_new(vars, "bos_token", json_string(t->bos));
    if (t->eos)
        json_object_set_new(vars, "eos_token", json_string(t->eos));
    if (json_is_object(extra))
        json_object_update(vars, extra);
    loom_status st = loom__ct_render(t, vars, out, err);
    json_decref(vars);
    return st;
}
