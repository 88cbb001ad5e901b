/* MODEL arguments to directories: a directory as is, or an `org/name` id
 * resolved through the local Hugging Face hub cache (never downloaded). */
#include <loom/model_id.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <loom/platform.h>

/* A hub repo id: `name` or `org/name`, each part of [A-Za-z0-9._-], not
 * starting with '.', so an id can never climb out of the cache directory. */
static int mid_is_repo_id(const char *id)
{
    int slashes = 0;
    const char *part = id;
    for (const char *p = id;; p++) {
        if (*p == '/' || *p == '\0') {
            if (p == part || part[0] == '.')
                return 0;
            if (*p == '\0')
                break;
            if (++slashes > 1)
                return 0;
            part = p + 1;
            continue;
        }
        char c = *p;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.'))
            return 0;
    }
    return 1;
}

/* A commit hash or branch name as refs/main holds it: one path component. */
static int mid_is_revision(const char *rev)
{
    if (!rev[0] || strcmp(rev, ".") == 0 || strcmp(rev, "..") == 0)
        return 0;
    return strpbrk(rev, "/\\:") == NULL;
}

static loom_status mid_copy(const char *path, char *dir, size_t size,
                            loom_err *err)
{
    size_t len = strlen(path);
    if (len >= size)
        return loom_err_set(err, LOOM_ERR_RANGE,
                            "%s: path longer than %zu bytes", path, size - 1);
    memcpy(dir, path, len + 1);
    return LOOM_OK;
}

/* The hub cache directory into buf, and where it came from (for messages),
 * in the order huggingface_hub itself uses. NULL when there is none. */
static const char *mid_cache_dir(char *buf, size_t size)
{
    const char *v = loom_getenv("HF_HUB_CACHE");
    int n;
    if (v && *v) {
        n = snprintf(buf, size, "%s", v);
        return n >= 0 && (size_t)n < size ? "$HF_HUB_CACHE" : NULL;
    }
    v = loom_getenv("HF_HOME");
    if (v && *v) {
        n = snprintf(buf, size, "%s/hub", v);
        return n >= 0 && (size_t)n < size ? "$HF_HOME/hub" : NULL;
    }
    v = loom_home_dir();
    if (v && *v) {
        n = snprintf(buf, size, "%s/.cache/huggingface/hub", v);
        return n >= 0 && (size_t)n < size ? "the home directory" : NULL;
    }
    return NULL;
}

/* A revision after '@': a branch or tag name as refs/ holds it (one or more
 * components of [A-Za-z0-9._-], none "." or "..", as in refs/pr/1) or a
 * snapshot hash. */
static int mid_is_ref_name(const char *rev)
{
    const char *part = rev;
    for (const char *p = rev;; p++) {
        if (*p == '/' || *p == '\0') {
            size_t n = (size_t)(p - part);
            if (n == 0 || (n == 1 && part[0] == '.') ||
                (n == 2 && part[0] == '.' && part[1] == '.'))
                return 0;
            if (*p == '\0')
                return 1;
            part = p + 1;
            continue;
        }
        char c = *p;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.'))
            return 0;
    }
}

/* Snapshot names starting with a prefix, for a short hash. */
typedef struct mid_match {
    const char *prefix;
    char found[256];
    int n;
    char names[512]; /* every snapshot, for the message */
} mid_match;

static void mid_on_snapshot(void *ctx, const char *name)
{
    mid_match *m = ctx;
    size_t k = strlen(m->names);
    if (k + strlen(name) + 3 < sizeof m->names)
        snprintf(m->names + k, sizeof m->names - k, "%s%s", k ? ", " : "",
                 name);
    if (strncmp(name, m->prefix, strlen(m->prefix)) == 0 &&
        strlen(name) < sizeof m->found) {
        snprintf(m->found, sizeof m->found, "%s", name);
        m->n++;
    }
}

/* Reads refs/REF of REPO into a malloc'd revision; NULL when there is no
 * such ref, with *bad set when the file holds no revision. */
static char *mid_read_ref(const char *refs, int *bad)
{
    char *rev = NULL;
    size_t len = 0;
    loom_err ignored;
    *bad = 0;
    if (!loom_file_exists(refs) ||
        loom_read_file(refs, &rev, &len, &ignored) != LOOM_OK)
        return NULL;
    /* the commit hash, usually without a newline */
    while (len > 0 && (rev[len - 1] == '\n' || rev[len - 1] == '\r' ||
                       rev[len - 1] == ' ' || rev[len - 1] == '\t'))
        rev[--len] = '\0';
    if (strlen(rev) != len || !mid_is_revision(rev)) {
        free(rev);
        *bad = 1;
        return NULL;
    }
    return rev;
}

loom_status loom_model_resolve(const char *model, char *dir, size_t size,
                               loom_err *err)
{
    if (!model || !*model)
        return loom_err_set(err, LOOM_ERR_INVALID, "no model given");
    if (loom_dir_exists(model))
        return mid_copy(model, dir, size, err);
    /* org/name@REV: a branch, tag or snapshot hash */
    char id[512];
    const char *at = strchr(model, '@');
    const char *want = at ? at + 1 : "main";
    int n_id = snprintf(id, sizeof id, "%.*s",
                        at ? (int)(at - model) : (int)strlen(model), model);
    if (n_id < 0 || (size_t)n_id >= sizeof id || !mid_is_repo_id(id) ||
        (at && !mid_is_ref_name(want)))
        return loom_err_set(err, LOOM_ERR_NOT_FOUND,
                            "%s: no such directory (nor an org/name[@REV] "
                            "model id)",
                            model);

    char cache[2048];
    const char *from = mid_cache_dir(cache, sizeof cache);
    if (!from)
        return loom_err_set(err, LOOM_ERR_NOT_FOUND,
                            "%s: no such directory, and no Hugging Face hub "
                            "cache to look in ($HF_HUB_CACHE, $HF_HOME and "
                            "the home directory are all unset)",
                            model);

    /* models--org--name: the hub cache spells '/' as "--" */
    char repo[2400];
    size_t r = (size_t)snprintf(repo, sizeof repo, "%s/models--", cache);
    for (const char *p = id; *p && r + 3 < sizeof repo; p++) {
        if (*p == '/') {
            repo[r++] = '-';
            repo[r++] = '-';
        } else {
            repo[r++] = *p;
        }
    }
    repo[r] = '\0';

    char refs[2600];
    snprintf(refs, sizeof refs, "%s/refs/%s", repo, want);
    int bad = 0;
    char *rev = mid_read_ref(refs, &bad);
    if (bad)
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "%s: %s does not hold a revision", model, refs);
    char snap[2900];
    if (!rev && at) {
        /* not a ref: a snapshot hash, whole or a unique prefix of it */
        char snaps[2600];
        snprintf(snaps, sizeof snaps, "%s/snapshots", repo);
        mid_match m;
        memset(&m, 0, sizeof m);
        m.prefix = want;
        loom_err ignored;
        if (loom_dir_exists(snaps))
            loom_dir_list(snaps, mid_on_snapshot, &m, &ignored);
        if (m.n == 1 && (strlen(want) >= 7 || !strcmp(m.found, want))) {
            snprintf(snap, sizeof snap, "%s/%s", snaps, m.found);
            return mid_copy(snap, dir, size, err);
        }
        char why[600];
        if (m.n > 1)
            snprintf(why, sizeof why,
                     "it starts more than one snapshot hash (%s)", m.names);
        else if (m.names[0])
            snprintf(why, sizeof why,
                     "no snapshot hash starts with it (snapshots: %s)",
                     m.names);
        else
            snprintf(why, sizeof why, "there are no snapshots");
        return loom_err_set(err, LOOM_ERR_NOT_FOUND,
                            "%s: revision %s not found in the Hugging Face "
                            "hub cache %s (from %s): no %s, and %s; loom "
                            "does not download models",
                            model, want, cache, from, refs, why);
    }
    if (!rev)
        return loom_err_set(err, LOOM_ERR_NOT_FOUND,
                            "%s: not found: looked for the directory ./%s "
                            "and for %s (Hugging Face hub cache, from %s); "
                            "loom does not download models",
                            model, model, refs, from);
    int n = snprintf(snap, sizeof snap, "%s/snapshots/%s", repo, rev);
    free(rev);
    if (n < 0 || (size_t)n >= sizeof snap)
        return loom_err_set(err, LOOM_ERR_RANGE, "%s: revision too long", refs);
    if (!loom_dir_exists(snap))
        return loom_err_set(err, LOOM_ERR_NOT_FOUND,
                            "%s: not found: looked for the directory ./%s "
                            "and in the Hugging Face hub cache (from %s), "
                            "whose %s names snapshot %s, which is missing",
                            model, model, from, refs, snap);
    return mid_copy(snap, dir, size, err);
}
