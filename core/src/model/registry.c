/* Plugin discovery along the search path, ABI checks, and selection of the
 * family or drafter for a checkpoint by the plugins' probe scores. */
#include <loom/registry.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <loom/checkpoint.h>
#include <loom/drafter.h>
#include <loom/family.h>
#include <loom/log.h>
#include <loom/platform.h>

/* The 2.0 descriptor, whole: every later minor only appends to it. */
#define PLUGIN_MIN_SIZE                                                        \
    (offsetof(loom_plugin, get_interface) +                                    \
     sizeof(((loom_plugin *)0)->get_interface))

struct loaded {
    loom_plugin_ref ref;
    loom_dl *dl;
    char *path;
    loom_host_state *host; /* lent to the plugin (its own address: stable) */
};

struct refused {
    loom_refusal r;
    char *path;
    char *reason;
};

struct loom_registry {
    struct loaded *plugins;
    int n_plugins, cap_plugins;
    struct refused *refused;
    int n_refused, cap_refused;
    char **dirs;
    int n_dirs, cap_dirs;
    loom_host_state *host;
};

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

static loom_status grow(void **arr, int *cap, int n, size_t elem)
{
    if (n < *cap)
        return LOOM_OK;
    int nc = *cap ? *cap * 2 : 8;
    void *na = realloc(*arr, (size_t)nc * elem);
    if (!na)
        return LOOM_ERR_NOMEM;
    *arr = na;
    *cap = nc;
    return LOOM_OK;
}

static loom_status add_refusal(loom_registry *reg, const char *path,
                               const char *reason)
{
    if (grow((void **)&reg->refused, &reg->cap_refused, reg->n_refused,
             sizeof *reg->refused) != LOOM_OK)
        return LOOM_ERR_NOMEM;
    struct refused *r = &reg->refused[reg->n_refused];
    r->path = dup_str(path);
    r->reason = dup_str(reason);
    if (!r->path || !r->reason) {
        free(r->path);
        free(r->reason);
        return LOOM_ERR_NOMEM;
    }
    r->r.path = r->path;
    r->r.reason = r->reason;
    reg->n_refused++;
    loom_log(LOOM_LOG_WARN, "plugin %s skipped: %s", path, reason);
    return LOOM_OK;
}

static const loom_plugin *find_by_name(const loom_registry *reg,
                                       const char *name)
{
    for (int i = 0; i < reg->n_plugins; i++)
        if (strcmp(reg->plugins[i].ref.plugin->name, name) == 0)
            return reg->plugins[i].ref.plugin;
    return NULL;
}

/* Opens one candidate file and checks its entry. Only the entry function
 * runs: no probe, no open, until a checkpoint is selected. */
static loom_status try_plugin(loom_registry *reg, const char *path)
{
    loom_dl *dl = NULL;
    loom_err e;
    char why[640];
    if (loom_dl_open(path, &dl, &e) != LOOM_OK)
        return add_refusal(reg, path, e.msg);

    loom_plugin_entry_fn entry =
        (loom_plugin_entry_fn)loom_dl_sym(dl, LOOM_ENTRY_SYMBOL);
    const loom_plugin *p = NULL;
    if (!entry) {
        snprintf(why, sizeof why, "no entry symbol '%s'", LOOM_ENTRY_SYMBOL);
        goto refuse;
    }
    p = entry();
    if (!p) {
        snprintf(why, sizeof why, "entry returned NULL");
        goto refuse;
    }
    if (p->abi_major != LOOM_ABI_MAJOR) {
        snprintf(why, sizeof why,
                 "incompatible ABI %u.%u (this loom speaks %d.%d; rebuild "
                 "the plugin against this SDK)",
                 p->abi_major, p->abi_minor, LOOM_ABI_MAJOR, LOOM_ABI_MINOR);
        goto refuse;
    }
    /* an older minor's descriptor may be smaller than ours, a newer one's
     * bigger (its extra fields unread): it must hold the 2.0 fields */
    if (p->struct_size < PLUGIN_MIN_SIZE) {
        /* the name, when the short descriptor holds it */
        const char *who =
            LOOM_HAS_FIELD(p->struct_size, loom_plugin, name) && p->name
                ? p->name
                : "(unnamed)";
        snprintf(why, sizeof why,
                 "%s: descriptor struct_size %u is smaller than ABI %d.0's "
                 "%zu",
                 who, p->struct_size, LOOM_ABI_MAJOR, (size_t)PLUGIN_MIN_SIZE);
        goto refuse;
    }
    if (!p->name || !*p->name || !p->probe || !p->get_interface ||
        (p->kind != LOOM_PLUGIN_FAMILY && p->kind != LOOM_PLUGIN_DRAFTER)) {
        snprintf(why, sizeof why,
                 "descriptor lacks a name, probe, get_interface or kind");
        goto refuse;
    }
    /* the interface's vtable passes its dispatcher's size checks */
    loom_status bound;
    if (p->kind == LOOM_PLUGIN_FAMILY) {
        loom_family f;
        bound = loom_family_bind(p, &f, &e);
    } else {
        loom_drafter_ref d;
        bound = loom_drafter_bind(p, &d, &e);
    }
    if (bound != LOOM_OK) {
        snprintf(why, sizeof why, "%s", e.msg);
        goto refuse;
    }
    if (find_by_name(reg, p->name)) {
        snprintf(why, sizeof why,
                 "a plugin named '%s' was already loaded earlier in the path",
                 p->name);
        goto refuse;
    }
    if (grow((void **)&reg->plugins, &reg->cap_plugins, reg->n_plugins,
             sizeof *reg->plugins) != LOOM_OK) {
        loom_dl_close(dl);
        return LOOM_ERR_NOMEM;
    }
    struct loaded *l = &reg->plugins[reg->n_plugins];
    l->path = dup_str(path);
    l->host = malloc(sizeof *l->host);
    if (!l->path || !l->host) {
        free(l->path);
        free(l->host);
        loom_dl_close(dl);
        return LOOM_ERR_NOMEM;
    }
    loom_host_lend(l->host, reg->host, p->name);
    l->dl = dl;
    l->ref.plugin = p;
    l->ref.path = l->path;
    l->ref.host = &l->host->host;
    reg->n_plugins++;
    return LOOM_OK;
refuse:
    loom_dl_close(dl);
    return add_refusal(reg, path, why);
}

struct scan_ctx {
    loom_registry *reg;
    const char *dir;
    loom_status rc;
};

static int has_suffix(const char *s, const char *suf)
{
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && strcmp(s + n - m, suf) == 0;
}

static void scan_entry(void *vctx, const char *name)
{
    struct scan_ctx *c = vctx;
    if (c->rc != LOOM_OK || !has_suffix(name, loom_dl_suffix()))
        return;
    char path[2048];
    snprintf(path, sizeof path, "%s%c%s", c->dir, loom_path_sep(), name);
    if (!loom_file_exists(path))
        return;
    c->rc = try_plugin(c->reg, path);
}

static loom_status add_dir(loom_registry *reg, const char *dir)
{
    if (!*dir)
        return LOOM_OK;
    for (int i = 0; i < reg->n_dirs; i++)
        if (strcmp(reg->dirs[i], dir) == 0)
            return LOOM_OK;
    if (grow((void **)&reg->dirs, &reg->cap_dirs, reg->n_dirs,
             sizeof *reg->dirs) != LOOM_OK)
        return LOOM_ERR_NOMEM;
    reg->dirs[reg->n_dirs] = dup_str(dir);
    if (!reg->dirs[reg->n_dirs])
        return LOOM_ERR_NOMEM;
    reg->n_dirs++;
    return LOOM_OK;
}

static loom_status scan_dir(loom_registry *reg, const char *dir, loom_err *err)
{
    if (!loom_dir_exists(dir))
        return LOOM_OK;
    struct scan_ctx c = {reg, dir, LOOM_OK};
    loom_err e;
    if (loom_dir_list(dir, scan_entry, &c, &e) != LOOM_OK) {
        loom_log(LOOM_LOG_WARN, "plugin directory %s: %s", dir, e.msg);
        return LOOM_OK;
    }
    if (c.rc != LOOM_OK)
        return loom_err_set(err, c.rc, "loading plugins from %s: %s", dir,
                            loom_strerror(c.rc));
    return LOOM_OK;
}

loom_status loom_registry_load(const char *const *extra_dirs, int n_extra,
                               loom_host_state *host, loom_registry **out,
                               loom_err *err)
{
    loom_registry *reg = calloc(1, sizeof *reg);
    if (!reg)
        return loom_err_set(err, LOOM_ERR_NOMEM, "out of memory");
    reg->host = host;
    loom_status rc = LOOM_OK;

    for (int i = 0; i < n_extra && rc == LOOM_OK; i++)
        rc = add_dir(reg, extra_dirs[i]);

    const char *env = loom_getenv("LOOM_PLUGIN_PATH");
    if (env && rc == LOOM_OK) {
        char *copy = dup_str(env);
        if (!copy) {
            rc = LOOM_ERR_NOMEM;
        } else {
            char *p = copy;
            for (;;) {
                char *sep = strchr(p, loom_path_list_sep());
                if (sep)
                    *sep = '\0';
                if (rc == LOOM_OK)
                    rc = add_dir(reg, p);
                if (!sep)
                    break;
                p = sep + 1;
            }
            free(copy);
        }
    }

    /* beside the executable: plugins/ in a build tree, then the install
     * layout's plugin directory relative to bin/, wherever the prefix is */
    char exe[1024];
    loom_err e;
    if (rc == LOOM_OK && loom_exe_dir(exe, sizeof exe, &e) == LOOM_OK) {
        char dir[1100];
        snprintf(dir, sizeof dir, "%s%cplugins", exe, loom_path_sep());
        rc = add_dir(reg, dir);
#ifdef LOOM_PLUGIN_RELDIR
        if (rc == LOOM_OK) {
            snprintf(dir, sizeof dir, "%s%c%s", exe, loom_path_sep(),
                     LOOM_PLUGIN_RELDIR);
            rc = add_dir(reg, dir);
        }
#endif
    }
    if (rc != LOOM_OK) {
        loom_registry_free(reg);
        return loom_err_set(err, rc, "plugin search path: %s",
                            loom_strerror(rc));
    }
    for (int i = 0; i < reg->n_dirs; i++) {
        rc = scan_dir(reg, reg->dirs[i], err);
        if (rc != LOOM_OK) {
            loom_registry_free(reg);
            return rc;
        }
    }
    *out = reg;
    return LOOM_OK;
}

void loom_registry_free(loom_registry *reg)
{
    if (!reg)
        return;
    for (int i = 0; i < reg->n_plugins; i++) {
        loom_dl_close(reg->plugins[i].dl);
        free(reg->plugins[i].path);
        free(reg->plugins[i].host);
    }
    for (int i = 0; i < reg->n_refused; i++) {
        free(reg->refused[i].path);
        free(reg->refused[i].reason);
    }
    for (int i = 0; i < reg->n_dirs; i++)
        free(reg->dirs[i]);
    free(reg->plugins);
    free(reg->refused);
    free(reg->dirs);
    free(reg);
}

int loom_registry_count(const loom_registry *reg)
{
    return reg->n_plugins;
}

const loom_plugin_ref *loom_registry_at(const loom_registry *reg, int i)
{
    return i >= 0 && i < reg->n_plugins ? &reg->plugins[i].ref : NULL;
}

int loom_registry_refused_count(const loom_registry *reg)
{
    return reg->n_refused;
}

const loom_refusal *loom_registry_refused_at(const loom_registry *reg, int i)
{
    return i >= 0 && i < reg->n_refused ? &reg->refused[i].r : NULL;
}

int loom_registry_dir_count(const loom_registry *reg)
{
    return reg->n_dirs;
}

const char *loom_registry_dir_at(const loom_registry *reg, int i)
{
    return i >= 0 && i < reg->n_dirs ? reg->dirs[i] : NULL;
}

loom_plugin_kind loom_registry_kind_of(const loom_registry *reg,
                                       const loom_checkpoint *ckpt)
{
    loom_plugin_kind kind = 0;
    int32_t best = 0;
    for (int i = 0; i < reg->n_plugins; i++) {
        const loom_plugin_ref *ref = &reg->plugins[i].ref;
        int32_t s = ref->plugin->probe(ref->host, ckpt);
        if (s > best ||
            (s == best && s > 0 && ref->plugin->kind == LOOM_PLUGIN_DRAFTER)) {
            best = s;
            kind = (loom_plugin_kind)ref->plugin->kind;
        }
    }
    return kind;
}

/* "architectures [A, B], model_type T" for error messages. */
static void describe_config(const loom_checkpoint *ckpt, char *buf, size_t size)
{
    json_t *cfg = loom_checkpoint_config(ckpt);
    json_t *tc = loom_checkpoint_text_config(ckpt);
    char *archs = json_dumps(json_object_get(cfg, "architectures"),
                             JSON_COMPACT | JSON_ENCODE_ANY);
    const char *mt = json_string_value(json_object_get(cfg, "model_type"));
    const char *tmt =
        tc != cfg ? json_string_value(json_object_get(tc, "model_type")) : NULL;
    snprintf(buf, size, "architectures %s, model_type %s%s%s",
             archs ? archs : "(none)", mt ? mt : "(none)",
             tmt ? ", text_config.model_type " : "", tmt ? tmt : "");
    free(archs);
}

loom_status loom_registry_select(const loom_registry *reg,
                                 const loom_checkpoint *ckpt,
                                 loom_plugin_kind kind, const char *force,
                                 const loom_plugin_ref **out, loom_err *err)
{
    const char *what = kind == LOOM_PLUGIN_FAMILY ? "family" : "drafter";
    char names[512] = "";
    size_t used = 0;
    for (int i = 0; i < reg->n_plugins; i++) {
        const loom_plugin *p = reg->plugins[i].ref.plugin;
        if (p->kind != (int32_t)kind)
            continue;
        int n = snprintf(names + used, sizeof names - used, "%s%s",
                         used ? ", " : "", p->name);
        if (n > 0 && used + (size_t)n < sizeof names)
            used += (size_t)n;
    }
    if (force) {
        for (int i = 0; i < reg->n_plugins; i++) {
            const loom_plugin *p = reg->plugins[i].ref.plugin;
            if (p->kind == (int32_t)kind && strcmp(p->name, force) == 0) {
                *out = &reg->plugins[i].ref;
                return LOOM_OK;
            }
        }
        return loom_err_set(err, LOOM_ERR_NOT_FOUND,
                            "no %s plugin named '%s' (found: %s)", what, force,
                            used ? names : "none");
    }
    int best = -1;
    int32_t best_score = 0;
    for (int i = 0; i < reg->n_plugins; i++) {
        const loom_plugin *p = reg->plugins[i].ref.plugin;
        if (p->kind != (int32_t)kind)
            continue;
        int32_t s = p->probe(reg->plugins[i].ref.host, ckpt);
        if (s > best_score) {
            best_score = s;
            best = i;
        }
    }
    if (best < 0) {
        char seen[512];
        describe_config(ckpt, seen, sizeof seen);
        return loom_err_set(err, LOOM_ERR_NOT_FOUND,
                            "%s: no %s plugin claims this checkpoint (%s); "
                            "%s plugins found: %s",
                            loom_checkpoint_dir(ckpt), what, seen, what,
                            used ? names : "none");
    }
    *out = &reg->plugins[best].ref;
    return LOOM_OK;
}
