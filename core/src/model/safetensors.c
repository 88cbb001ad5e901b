/* Memory-mapped safetensors checkpoints: every header is parsed and validated
 * (length, dtypes, shapes, offsets, overlaps, duplicate names, index against
 * shards) before any tensor is handed out.
 *
 * Big-endian hosts are not a target: tensor bytes are handed out as they lie
 * in the file (little-endian). Only the 8-byte header length is decoded byte
 * by byte, which costs nothing and keeps the parser itself portable. */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include <loom/platform.h>
#include <loom/safetensors.h>

/* Headers longer than this are refused. The largest hub checkpoints list
 * ~100k tensors at ~150 bytes each (~15 MB); the bound keeps a corrupt length
 * field from making Jansson parse gigabytes of tensor data. */
#define ST_MAX_HEADER ((uint64_t)100 << 20)

typedef struct st_shard {
    char *path;   /* as given, for messages */
    loom_map map; /* owned when mapped is 1 */
    int mapped;
} st_shard;

typedef struct st_entry {
    loom_tensor t;       /* t.name is malloc'd and owned here */
    uint64_t begin, end; /* byte offsets within the shard's data section */
    size_t shard;
    void *aligned; /* an aligned copy of misaligned data (t.data), or NULL */
} st_entry;

struct loom_st {
    st_shard *shards;
    size_t n_shards;
    st_entry *ents; /* never reallocated once loading has finished */
    size_t n, cap;
    const st_entry **by_name; /* sorted by name, for loom_st_find */
};

static char *st_strdup(const char *s)
{
    size_t len = strlen(s) + 1;
    char *d = malloc(len);
    if (d)
        memcpy(d, s, len);
    return d;
}

static char *st_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p)
        return NULL;
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}

void loom_st_close(loom_st *st)
{
    if (!st)
        return;
    for (size_t i = 0; i < st->n; i++) {
        free((char *)st->ents[i].t.name);
        free(st->ents[i].aligned);
    }
    for (size_t i = 0; i < st->n_shards; i++) {
        if (st->shards[i].mapped)
            loom_unmap(&st->shards[i].map);
        free(st->shards[i].path);
    }
    free(st->shards);
    free(st->ents);
    free(st->by_name);
    free(st);
}

int loom_st_pin(loom_st *st, uint64_t *bytes, loom_err *err)
{
    loom_pin_kind kind = LOOM_PIN_NONE;
    *bytes = 0;
    for (size_t i = 0; i < st->n_shards; i++) {
        if (!st->shards[i].mapped || !st->shards[i].map.data)
            continue;
        loom_pin_kind k = loom_map_pin(&st->shards[i].map, err);
        if (k == LOOM_PIN_NONE)
            return LOOM_PIN_NONE;
        /* one shard copied makes the whole a copy */
        if (kind == LOOM_PIN_NONE || k == LOOM_PIN_HUGE_COPY)
            kind = k;
        *bytes += st->shards[i].map.size;
    }
    return kind;
}

static loom_status st_new(size_t n_shards, loom_st **out, loom_err *err)
{
    loom_st *st = calloc(1, sizeof *st);
    if (!st)
        return loom_err_set(err, LOOM_ERR_NOMEM, "safetensors: out of memory");
    st->shards = calloc(n_shards ? n_shards : 1, sizeof *st->shards);
    if (!st->shards) {
        free(st);
        return loom_err_set(err, LOOM_ERR_NOMEM, "safetensors: out of memory");
    }
    st->n_shards = n_shards;
    *out = st;
    return LOOM_OK;
}

static loom_status st_reserve(loom_st *st, size_t more, const char *label,
                              loom_err *err)
{
    if (more <= st->cap - st->n)
        return LOOM_OK;
    size_t cap = st->n + more;
    if (cap < st->cap * 2)
        cap = st->cap * 2;
    if (cap > SIZE_MAX / sizeof *st->ents)
        return loom_err_set(err, LOOM_ERR_NOMEM, "%s: too many tensors", label);
    st_entry *e = realloc(st->ents, cap * sizeof *e);
    if (!e)
        return loom_err_set(err, LOOM_ERR_NOMEM, "%s: out of memory", label);
    st->ents = e;
    st->cap = cap;
    return LOOM_OK;
}

/* "[2, 3, 4]" into buf, for messages. */
static const char *st_shape_str(const loom_tensor *t, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    used += (size_t)snprintf(buf, size, "[");
    for (int32_t i = 0; i < t->ndim && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%lld",
                                 i ? ", " : "", (long long)t->shape[i]);
    if (used < size)
        snprintf(buf + used, size - used, "]");
    return buf;
}

/* A JSON integer in [0, INT64_MAX], or -1 when v is anything else. */
static int64_t st_json_u63(const json_t *v)
{
    if (!json_is_integer(v))
        return -1;
    json_int_t x = json_integer_value(v);
    return x < 0 ? -1 : (int64_t)x;
}

/* Fills e from one header entry `name: {dtype, shape, data_offsets}`. The
 * caller appends e only when this succeeds. */
static loom_status st_entry_parse(st_entry *e, const char *name,
                                  const json_t *val, const uint8_t *base,
                                  uint64_t dsize, const char *label,
                                  loom_err *err)
{
    memset(e, 0, sizeof *e);
    if (!json_is_object(val))
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "%s: tensor '%s': header entry is not an object",
                            label, name);
    const char *dname = json_string_value(json_object_get(val, "dtype"));
    if (!dname)
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "%s: tensor '%s': no \"dtype\" string", label,
                            name);
    loom_dtype dt = loom_dtype_from_name(dname);
    if (dt == LOOM_DTYPE_COUNT)
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "%s: tensor '%s': unknown dtype '%s'", label, name,
                            dname);

    const json_t *shape = json_object_get(val, "shape");
    if (!json_is_array(shape))
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "%s: tensor '%s': no \"shape\" array", label, name);
    size_t ndim = json_array_size(shape);
    if (ndim > LOOM_MAX_DIMS)
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "%s: tensor '%s': %zu dimensions, at most %d",
                            label, name, ndim, LOOM_MAX_DIMS);
    /* The element count in 64 bits, checked for overflow: a hostile shape
     * must not wrap around to match a small byte span. */
    uint64_t count = 1;
    int overflow = 0, zero = 0;
    for (size_t i = 0; i < ndim; i++) {
        int64_t d = st_json_u63(json_array_get(shape, i));
        if (d < 0)
            return loom_err_set(
                err, LOOM_ERR_FORMAT,
                "%s: tensor '%s': shape[%zu] is not a non-negative integer",
                label, name, i);
        e->t.shape[i] = d;
        if (d == 0)
            zero = 1;
        else if (count > UINT64_MAX / (uint64_t)d)
            overflow = 1;
        else
            count *= (uint64_t)d;
    }
    e->t.ndim = (int32_t)ndim;
    if (zero) {
        count = 0;
        overflow = 0;
    }

    const json_t *offs = json_object_get(val, "data_offsets");
    if (!json_is_array(offs) || json_array_size(offs) != 2)
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "%s: tensor '%s': no \"data_offsets\" pair", label,
                            name);
    int64_t b = st_json_u63(json_array_get(offs, 0));
    int64_t en = st_json_u63(json_array_get(offs, 1));
    if (b < 0 || en < 0)
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "%s: tensor '%s': data_offsets are not "
                            "non-negative integers",
                            label, name);
    uint64_t begin = (uint64_t)b, end = (uint64_t)en;
    if (begin > end)
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "%s: tensor '%s': data_offsets [%llu, %llu] run "
                            "backwards",
                            label, name, (unsigned long long)begin,
                            (unsigned long long)end);
    if (end > dsize)
        return loom_err_set(err, LOOM_ERR_RANGE,
                            "%s: tensor '%s': data_offsets [%llu, %llu] run "
                            "past the data section (%llu bytes)",
                            label, name, (unsigned long long)begin,
                            (unsigned long long)end, (unsigned long long)dsize);
    uint64_t esize = loom_dtype_size(dt);
    char sbuf[160];
    if (overflow || count > UINT64_MAX / esize)
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "%s: tensor '%s': shape %s overflows", label, name,
                            st_shape_str(&e->t, sbuf, sizeof sbuf));
    if (count * esize != end - begin)
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "%s: tensor '%s': shape %s of %s needs %llu "
                            "bytes but data_offsets span %llu",
                            label, name, st_shape_str(&e->t, sbuf, sizeof sbuf),
                            dname, (unsigned long long)(count * esize),
                            (unsigned long long)(end - begin));

    char *copy = st_strdup(name);
    if (!copy)
        return loom_err_set(err, LOOM_ERR_NOMEM, "%s: out of memory", label);
    e->t.name = copy;
    e->t.dtype = dt;
    e->t.data = base + begin;
    /* Kernels read elements through typed pointers: data at an address
     * that is no multiple of the element size (a header length one short
     * puts every tensor there) is read from an aligned copy instead. */
    if (end > begin && (uintptr_t)(base + begin) % esize != 0) {
        e->aligned = malloc((size_t)(end - begin));
        if (!e->aligned) {
            free(copy);
            e->t.name = NULL;
            return loom_err_set(err, LOOM_ERR_NOMEM,
                                "%s: tensor '%s': out of memory for an "
                                "aligned copy of its misaligned data",
                                label, name);
        }
        memcpy(e->aligned, base + begin, (size_t)(end - begin));
        e->t.data = e->aligned;
    }
    e->t.nbytes = end - begin;
    e->begin = begin;
    e->end = end;
    return LOOM_OK;
}

static int st_cmp_offset(const void *a, const void *b)
{
    const st_entry *x = *(const st_entry *const *)a;
    const st_entry *y = *(const st_entry *const *)b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return 0;
}

/* No two tensors of one file may share a byte. Empty tensors hold no bytes
 * and cannot overlap anything. */
static loom_status st_check_overlap(const loom_st *st, size_t first,
                                    const char *label, loom_err *err)
{
    size_t n = st->n - first;
    if (n < 2)
        return LOOM_OK;
    const st_entry **v = malloc(n * sizeof *v);
    if (!v)
        return loom_err_set(err, LOOM_ERR_NOMEM, "%s: out of memory", label);
    size_t k = 0;
    for (size_t i = first; i < st->n; i++) {
        if (st->ents[i].end > st->ents[i].begin)
            v[k++] = &st->ents[i];
    }
    qsort(v, k, sizeof *v, st_cmp_offset);
    loom_status s = LOOM_OK;
    for (size_t i = 1; i < k; i++) {
        if (v[i]->begin < v[i - 1]->end) {
            s = loom_err_set(
                err, LOOM_ERR_FORMAT,
                "%s: tensors '%s' [%llu, %llu) and '%s' "
                "[%llu, %llu) overlap",
                label, v[i - 1]->t.name, (unsigned long long)v[i - 1]->begin,
                (unsigned long long)v[i - 1]->end, v[i]->t.name,
                (unsigned long long)v[i]->begin, (unsigned long long)v[i]->end);
            break;
        }
    }
    free(v);
    return s;
}

/* Parses and validates one file's bytes and appends its tensors. */
static loom_status st_parse(loom_st *st, size_t shard, const uint8_t *data,
                            uint64_t size, const char *label, loom_err *err)
{
    if (size < 8)
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "%s: truncated: %llu bytes, less than the 8-byte "
                            "header length",
                            label, (unsigned long long)size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | data[i];
    if (hlen > size - 8)
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "%s: truncated: header length %llu exceeds the "
                            "%llu bytes that follow it",
                            label, (unsigned long long)hlen,
                            (unsigned long long)(size - 8));
    if (hlen > ST_MAX_HEADER)
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "%s: header length %llu is over the %llu-byte "
                            "limit",
                            label, (unsigned long long)hlen,
                            (unsigned long long)ST_MAX_HEADER);

    json_error_t jerr;
    /* json_loadb reads exactly hlen bytes, never a terminator past them. */
    json_t *root = json_loadb((const char *)data + 8, (size_t)hlen,
                              JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "%s: header is not valid JSON: %s (line %d, "
                            "column %d)",
                            label, jerr.text, jerr.line, jerr.column);
    loom_status s = LOOM_OK;
    if (!json_is_object(root)) {
        s = loom_err_set(err, LOOM_ERR_FORMAT,
                         "%s: header is not a JSON object", label);
        goto done;
    }
    s = st_reserve(st, json_object_size(root), label, err);
    if (s != LOOM_OK)
        goto done;

    const uint8_t *base = data + 8 + hlen;
    uint64_t dsize = size - 8 - hlen;
    size_t first = st->n;
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val)
    {
        /* free-form metadata ({"format": "pt"}); nothing in it is used */
        if (strcmp(key, "__metadata__") == 0)
            continue;
        st_entry *e = &st->ents[st->n];
        s = st_entry_parse(e, key, val, base, dsize, label, err);
        if (s != LOOM_OK)
            goto done;
        e->shard = shard;
        st->n++;
    }
    s = st_check_overlap(st, first, label, err);
done:
    json_decref(root);
    return s;
}

static int st_cmp_name(const void *a, const void *b)
{
    const st_entry *x = *(const st_entry *const *)a;
    const st_entry *y = *(const st_entry *const *)b;
    return strcmp(x->t.name, y->t.name);
}

static int st_cmp_key(const void *key, const void *elem)
{
    const st_entry *y = *(const st_entry *const *)elem;
    return strcmp((const char *)key, y->t.name);
}

/* Builds the name index; a name in two shards is an error. */
static loom_status st_finish(loom_st *st, loom_err *err)
{
    st->by_name = malloc((st->n ? st->n : 1) * sizeof *st->by_name);
    if (!st->by_name)
        return loom_err_set(err, LOOM_ERR_NOMEM, "safetensors: out of memory");
    for (size_t i = 0; i < st->n; i++)
        st->by_name[i] = &st->ents[i];
    qsort(st->by_name, st->n, sizeof *st->by_name, st_cmp_name);
    for (size_t i = 1; i < st->n; i++) {
        const st_entry *a = st->by_name[i - 1], *b = st->by_name[i];
        if (strcmp(a->t.name, b->t.name) == 0) {
            const st_entry *lo = a->shard < b->shard ? a : b;
            const st_entry *hi = a->shard < b->shard ? b : a;
            return loom_err_set(err, LOOM_ERR_FORMAT,
                                "tensor '%s' appears in both %s and %s",
                                a->t.name, st->shards[lo->shard].path,
                                st->shards[hi->shard].path);
        }
    }
    return LOOM_OK;
}

static const st_entry *st_lookup(const loom_st *st, const char *name)
{
    if (!st || !name || !st->by_name)
        return NULL;
    const st_entry *const *hit =
        bsearch(name, st->by_name, st->n, sizeof *st->by_name, st_cmp_key);
    return hit ? *hit : NULL;
}

loom_status loom_st_open_memory(const void *data, uint64_t size,
                                const char *label, loom_st **out, loom_err *err)
{
    loom_st *st = NULL;
    loom_status s = st_new(1, &st, err);
    if (s != LOOM_OK)
        return s;
    st->shards[0].path = st_strdup(label ? label : "<memory>");
    if (!st->shards[0].path) {
        loom_st_close(st);
        return loom_err_set(err, LOOM_ERR_NOMEM, "safetensors: out of memory");
    }
    s = st_parse(st, 0, data, size, st->shards[0].path, err);
    if (s == LOOM_OK)
        s = st_finish(st, err);
    if (s != LOOM_OK) {
        loom_st_close(st);
        return s;
    }
    *out = st;
    return LOOM_OK;
}

/* Maps shard i of st from its path and parses it. */
static loom_status st_load_shard(loom_st *st, size_t i, loom_err *err)
{
    st_shard *sh = &st->shards[i];
    loom_status s = loom_map_file(sh->path, &sh->map, err);
    if (s != LOOM_OK)
        return s;
    sh->mapped = 1;
    return st_parse(st, i, sh->map.data, sh->map.size, sh->path, err);
}

loom_status loom_st_open_file(const char *path, loom_st **out, loom_err *err)
{
    loom_st *st = NULL;
    loom_status s = st_new(1, &st, err);
    if (s != LOOM_OK)
        return s;
    st->shards[0].path = st_strdup(path);
    if (!st->shards[0].path)
        s = loom_err_set(err, LOOM_ERR_NOMEM, "safetensors: out of memory");
    if (s == LOOM_OK)
        s = st_load_shard(st, 0, err);
    if (s == LOOM_OK)
        s = st_finish(st, err);
    if (s != LOOM_OK) {
        loom_st_close(st);
        return s;
    }
    *out = st;
    return LOOM_OK;
}

static int st_cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A shard must be a plain file name beside the index: an index must not
 * reach outside its checkpoint directory. */
static int st_plain_name(const char *f)
{
    if (!f[0] || strcmp(f, ".") == 0 || strcmp(f, "..") == 0)
        return 0;
    return strchr(f, '/') == NULL && strchr(f, '\\') == NULL &&
           strchr(f, ':') == NULL;
}

/* The first tensor the index assigns to `file`, for messages. */
static const char *st_first_for(json_t *wmap, const char *file)
{
    const char *key;
    json_t *val;
    json_object_foreach(wmap, key, val)
    {
        if (strcmp(json_string_value(val), file) == 0)
            return key;
    }
    return "?";
}

/* Opens every shard that dir/model.safetensors.index.json names, in the
 * sorted order of their file names (model-00001-of-... first), and checks
 * that each tensor the index lists is in the shard it names. Tensors a shard
 * holds that the index omits are kept: the shard's header is the authority
 * on what it contains. */
static loom_status st_open_index(const char *dir, const char *ipath,
                                 loom_st **out, loom_err *err)
{
    char *text = NULL;
    size_t len = 0;
    loom_status s = loom_read_file(ipath, &text, &len, err);
    if (s != LOOM_OK)
        return s;
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    free(text);
    if (!root)
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "%s: not valid JSON: %s (line %d, column %d)",
                            ipath, jerr.text, jerr.line, jerr.column);

    loom_st *st = NULL;
    const char **files = NULL;
    json_t *wmap = json_object_get(root, "weight_map");
    if (!json_is_object(wmap)) {
        s = loom_err_set(err, LOOM_ERR_FORMAT, "%s: no \"weight_map\" object",
                         ipath);
        goto fail;
    }
    size_t nmap = json_object_size(wmap);
    if (nmap == 0) {
        s = loom_err_set(err, LOOM_ERR_FORMAT, "%s: weight_map is empty",
                         ipath);
        goto fail;
    }
    files = malloc(nmap * sizeof *files);
    if (!files) {
        s = loom_err_set(err, LOOM_ERR_NOMEM, "%s: out of memory", ipath);
        goto fail;
    }
    size_t nf = 0;
    const char *key;
    json_t *val;
    json_object_foreach(wmap, key, val)
    {
        const char *f = json_string_value(val);
        if (!f || !st_plain_name(f)) {
            s = loom_err_set(err, LOOM_ERR_FORMAT,
                             "%s: tensor '%s': shard is not a plain file "
                             "name in this directory",
                             ipath, key);
            goto fail;
        }
        files[nf++] = f;
    }
    qsort(files, nf, sizeof *files, st_cmp_str);
    size_t nu = 0;
    for (size_t i = 0; i < nf; i++) {
        if (nu == 0 || strcmp(files[nu - 1], files[i]) != 0)
            files[nu++] = files[i];
    }

    s = st_new(nu, &st, err);
    if (s != LOOM_OK)
        goto fail;
    for (size_t i = 0; i < nu; i++) {
        st->shards[i].path = st_join(dir, files[i]);
        if (!st->shards[i].path) {
            s = loom_err_set(err, LOOM_ERR_NOMEM, "%s: out of memory", ipath);
            goto fail;
        }
    }
    for (size_t i = 0; i < nu; i++) {
        if (!loom_file_exists(st->shards[i].path)) {
            s = loom_err_set(err, LOOM_ERR_NOT_FOUND,
                             "%s: shard %s (listed for tensor '%s') is "
                             "missing",
                             ipath, st->shards[i].path,
                             st_first_for(wmap, files[i]));
            goto fail;
        }
        s = st_load_shard(st, i, err);
        if (s != LOOM_OK)
            goto fail;
    }
    s = st_finish(st, err);
    if (s != LOOM_OK)
        goto fail;

    json_object_foreach(wmap, key, val)
    {
        const char *f = json_string_value(val);
        const st_entry *e = st_lookup(st, key);
        if (!e) {
            s = loom_err_set(err, LOOM_ERR_FORMAT,
                             "%s: tensor '%s' is mapped to %s/%s, which "
                             "lacks it",
                             ipath, key, dir, f);
            goto fail;
        }
        /* shard i was opened from files[i] */
        if (strcmp(files[e->shard], f) != 0) {
            s = loom_err_set(err, LOOM_ERR_FORMAT,
                             "%s: tensor '%s' is mapped to %s/%s, which "
                             "lacks it (it is in %s)",
                             ipath, key, dir, f, st->shards[e->shard].path);
            goto fail;
        }
    }
    free(files);
    json_decref(root);
    *out = st;
    return LOOM_OK;

fail:
    loom_st_close(st);
    free(files);
    json_decref(root);
    return s;
}

loom_status loom_st_open_dir(const char *dir, loom_st **out, loom_err *err)
{
    char *single = st_join(dir, "model.safetensors");
    char *index = st_join(dir, "model.safetensors.index.json");
    loom_status s;
    if (!single || !index) {
        s = loom_err_set(err, LOOM_ERR_NOMEM, "safetensors: out of memory");
    } else if (loom_file_exists(single)) {
        /* Hugging Face loaders prefer the single file too. */
        s = loom_st_open_file(single, out, err);
    } else if (loom_file_exists(index)) {
        s = st_open_index(dir, index, out, err);
    } else {
        s = loom_err_set(err, LOOM_ERR_NOT_FOUND,
                         "%s: no model.safetensors or "
                         "model.safetensors.index.json",
                         dir);
    }
    free(single);
    free(index);
    return s;
}

size_t loom_st_count(const loom_st *st)
{
    return st ? st->n : 0;
}

const loom_tensor *loom_st_at(const loom_st *st, size_t i)
{
    if (!st || i >= st->n)
        return NULL;
    return &st->ents[i].t;
}

const loom_tensor *loom_st_find(const loom_st *st, const char *name)
{
    const st_entry *e = st_lookup(st, name);
    return e ? &e->t : NULL;
}

const char *loom_st_file_of(const loom_st *st, const loom_tensor *t)
{
    if (!st || !t || st->n == 0)
        return NULL;
    /* t is the first member of an entry of ents[] (checked by address) */
    uintptr_t a = (uintptr_t)(const void *)t;
    uintptr_t lo = (uintptr_t)(const void *)st->ents;
    if (a < lo || a >= lo + st->n * sizeof *st->ents ||
        (a - lo) % sizeof *st->ents != 0)
        return NULL;
    return st->shards[st->ents[(a - lo) / sizeof *st->ents].shard].path;
}
