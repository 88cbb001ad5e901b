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

loom_status loom_model_resolve(const char *model, char *dir, size_t size,
                               loom_err *err)
{
    if (!model || !*model)
        return loom_err_set(err, LOOM_ERR_INVALID, "no model given");
    if (loom_dir_exists(model))
        return mid_copy(model, dir, size, err);
    if (!mid_is_repo_id(model))
        return loom_err_set(err, LOOM_ERR_NOT_FOUND,
                            "%s: no such directory (nor an org/name model "
                            "id)",
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
    for (const char *p = model; *p && r + 3 < sizeof repo; p++) {
        if (*p == '/') {
            repo[r++] = '-';
            repo[r++] = '-';
        } else {
            repo[r++] = *p;
        }
    }
    repo[r] = '\0';

    char refs[2600];
    snprintf(refs, sizeof refs, "%s/refs/main", repo);
    char *rev = NULL;
    size_t len = 0;
    loom_err ignored;
    if (!loom_file_exists(refs) ||
        loom_read_file(refs, &rev, &len, &ignored) != LOOM_OK)
        return loom_err_set(err, LOOM_ERR_NOT_FOUND,
                            "%s: not found: looked for the directory ./%s "
                            "and for %s (Hugging Face hub cache, from %s); "
                            "loom does not download models",
                            model, model, refs, from);
    /* refs/main is the commit hash, usually without a newline */
    while (len > 0 && (rev[len - 1] == '\n' || rev[len - 1] == '\r' ||
                       rev[len - 1] == ' ' || rev[len - 1] == '\t'))
        rev[--len] = '\0';
    if (strlen(rev) != len || !mid_is_revision(rev)) {
        free(rev);
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "%s: %s does not hold a revision", model, refs);
    }
    char snap[2900];
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
