/* Byte-pair encoding of one pre-tokenized piece: the vocabulary and merge
 * hash maps, a per-call cache of repeated words, and the heap-driven merge
 * loop (O(n log n) in the piece length, never quadratic). */
#include <stdlib.h>
#include <string.h>

#include "tokenizer_impl.h"

loom_status loom__tok_ids_push(tok_ids *a, int32_t id, loom_err *err)
{
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 64;
        int32_t *v = realloc(a->v, cap * sizeof *v);
        if (!v)
            return loom_err_set(err, LOOM_ERR_NOMEM,
                                "tokenizer: out of memory");
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = id;
    return LOOM_OK;
}

/* A fast 64-bit hash of short strings (8 bytes a step, then a mix). */
uint64_t loom__tok_hash(const void *data, size_t len)
{
    const uint8_t *p = data;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (len * 0xff51afd7ed558ccdull);
    while (len >= 8) {
        uint64_t k;
        memcpy(&k, p, 8);
        h = (h ^ (k * 0x87c37b91114253d5ull)) * 0x4cf5ad432745937full;
        h ^= h >> 29;
        p += 8;
        len -= 8;
    }
    uint64_t k = 0;
    for (size_t i = 0; i < len; i++)
        k |= (uint64_t)p[i] << (8 * i);
    h = (h ^ (k * 0x87c37b91114253d5ull)) * 0x4cf5ad432745937full;
    h ^= h >> 32;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 29;
    return h;
}

/* ------------------------------------------------------------ string map */

/* The string map and the word cache probe the same way: open addressing
 * with linear probing over CAP (a power of two) slots, NULL keys free. */

/* The slot that holds KEY, or the free slot where it would go. */
static size_t str_slot(const char *const *keys, const uint32_t *klen,
                       size_t cap, const char *key, size_t len)
{
    size_t j = loom__tok_hash(key, len) & (cap - 1);
    while (keys[j] && !(klen[j] == len && memcmp(keys[j], key, len) == 0))
        j = (j + 1) & (cap - 1);
    return j;
}

/* The free slot for KEY, known to be absent (rehashing, inserting). */
static size_t free_slot(const char *const *keys, size_t cap, const char *key,
                        size_t len)
{
    size_t j = loom__tok_hash(key, len) & (cap - 1);
    while (keys[j])
        j = (j + 1) & (cap - 1);
    return j;
}

static loom_status strmap_grow_to(tok_strmap *m, size_t cap, loom_err *err)
{
    tok_strmap n = {0};
    n.key = calloc(cap, sizeof *n.key);
    n.klen = calloc(cap, sizeof *n.klen);
    n.val = calloc(cap, sizeof *n.val);
    n.cap = cap;
    if (!n.key || !n.klen || !n.val) {
        loom__tok_strmap_free(&n);
        return loom_err_set(err, LOOM_ERR_NOMEM, "tokenizer: out of memory");
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->key[i])
            continue;
        size_t j = free_slot(n.key, cap, m->key[i], m->klen[i]);
        n.key[j] = m->key[i];
        n.klen[j] = m->klen[i];
        n.val[j] = m->val[i];
    }
    n.n = m->n;
    loom__tok_strmap_free(m);
    *m = n;
    return LOOM_OK;
}

static loom_status strmap_grow(tok_strmap *m, loom_err *err)
{
    return strmap_grow_to(m, m->cap ? m->cap * 2 : 64, err);
}

loom_status loom__tok_strmap_reserve(tok_strmap *m, size_t n, loom_err *err)
{
    size_t cap = m->cap ? m->cap : 64;
    while (cap < n * 2 + 2)
        cap *= 2;
    return cap > m->cap ? strmap_grow_to(m, cap, err) : LOOM_OK;
}

loom_status loom__tok_strmap_put(tok_strmap *m, const char *key, size_t len,
                                 int32_t val, loom_err *err)
{
    if ((m->n + 1) * 2 > m->cap) {
        loom_status st = strmap_grow(m, err);
        if (st != LOOM_OK)
            return st;
    }
    size_t j = str_slot(m->key, m->klen, m->cap, key, len);
    if (m->key[j]) {
        m->val[j] = val;
        return LOOM_OK;
    }
    m->key[j] = key;
    m->klen[j] = (uint32_t)len;
    m->val[j] = val;
    m->n++;
    return LOOM_OK;
}

int32_t loom__tok_strmap_get(const tok_strmap *m, const char *key, size_t len)
{
    if (!m->cap)
        return -1;
    size_t j = str_slot(m->key, m->klen, m->cap, key, len);
    return m->key[j] ? m->val[j] : -1;
}

void loom__tok_strmap_free(tok_strmap *m)
{
    free(m->key);
    free(m->klen);
    free(m->val);
    memset(m, 0, sizeof *m);
}

/* ------------------------------------------------------------- merge map */

static uint64_t pair_key(int32_t a, int32_t b)
{
    return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
}

static size_t pair_slot(uint64_t key, size_t cap)
{
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    return (size_t)(h ^ (h >> 31)) & (cap - 1);
}

loom_status loom__tok_mergemap_init(tok_mergemap *m, size_t expect,
                                    loom_err *err)
{
    size_t cap = 64;
    while (cap < expect * 2 + 2)
        cap *= 2;
    m->slot = malloc(cap * sizeof *m->slot);
    if (!m->slot)
        return loom_err_set(err, LOOM_ERR_NOMEM, "tokenizer: out of memory");
    for (size_t i = 0; i < cap; i++)
        m->slot[i].key = UINT64_MAX;
    m->cap = cap;
    m->n = 0;
    return LOOM_OK;
}

/* The caller sized the map for every merge it puts (see init). */
void loom__tok_mergemap_put(tok_mergemap *m, int32_t a, int32_t b,
                            uint32_t rank, int32_t id)
{
    uint64_t key = pair_key(a, b);
    size_t j = pair_slot(key, m->cap);
    while (m->slot[j].key != UINT64_MAX && m->slot[j].key != key)
        j = (j + 1) & (m->cap - 1);
    if (m->slot[j].key == UINT64_MAX)
        m->n++;
    m->slot[j].key = key;
    m->slot[j].rank = rank;
    m->slot[j].id = id;
}

const tok_merge *loom__tok_mergemap_get(const tok_mergemap *m, int32_t a,
                                        int32_t b)
{
    uint64_t key = pair_key(a, b);
    size_t j = pair_slot(key, m->cap);
    while (m->slot[j].key != UINT64_MAX) {
        if (m->slot[j].key == key)
            return &m->slot[j];
        j = (j + 1) & (m->cap - 1);
    }
    return NULL;
}

void loom__tok_mergemap_free(tok_mergemap *m)
{
    free(m->slot);
    memset(m, 0, sizeof *m);
}

/* ----------------------------------------------------------------- cache */

/* Words already encoded in this call: key bytes point into the text being
 * encoded (alive for the whole call), values are runs of the `ids` pool. A
 * per-call cache keeps the tokenizer immutable and so free of locks. */
struct tok_cache {
    const char **key;
    uint32_t *klen, *off, *cnt;
    size_t cap, n;
    tok_ids pool;
};

/* Words longer than this are rare enough not to repeat. */
#define TOK_CACHE_MAX_WORD 64
/* Bounds the memory of one call on huge inputs. */
#define TOK_CACHE_MAX_ENTRIES (1u << 20)

tok_cache *loom__tok_cache_new(void)
{
    return calloc(1, sizeof(tok_cache));
}

/* The cache's four slot arrays (parallel, one entry a slot). */
static void free_slots(const char **key, uint32_t *klen, uint32_t *off,
                       uint32_t *cnt)
{
    free(key);
    free(klen);
    free(off);
    free(cnt);
}

void loom__tok_cache_free(tok_cache *c)
{
    if (!c)
        return;
    free_slots(c->key, c->klen, c->off, c->cnt);
    free(c->pool.v);
    free(c);
}

static int cache_grow(tok_cache *c)
{
    size_t cap = c->cap ? c->cap * 2 : 1024;
    const char **key = calloc(cap, sizeof *key);
    uint32_t *klen = malloc(cap * sizeof *klen);
    uint32_t *off = malloc(cap * sizeof *off);
    uint32_t *cnt = malloc(cap * sizeof *cnt);
    if (!key || !klen || !off || !cnt) {
        free_slots(key, klen, off, cnt);
        return 0;
    }
    for (size_t i = 0; i < c->cap; i++) {
        if (!c->key[i])
            continue;
        size_t j = free_slot(key, cap, c->key[i], c->klen[i]);
        key[j] = c->key[i];
        klen[j] = c->klen[i];
        off[j] = c->off[i];
        cnt[j] = c->cnt[i];
    }
    free_slots(c->key, c->klen, c->off, c->cnt);
    c->key = key;
    c->klen = klen;
    c->off = off;
    c->cnt = cnt;
    c->cap = cap;
    return 1;
}

/* ------------------------------------------------------------------- BPE */

typedef struct sym {
    int32_t id;
    int32_t prev, next; /* -1 at the ends */
    int32_t alive;
} sym;

/* Min-heap of (rank << 32 | left position): lowest rank first, leftmost
 * first among equal ranks, as the reference orders its merges. */
typedef struct heap {
    uint64_t *v;
    size_t n;
} heap;

static void heap_push(heap *h, uint64_t x)
{
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h->v[p] <= x)
            break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = x;
}

static uint64_t heap_pop(heap *h)
{
    uint64_t top = h->v[0];
    uint64_t x = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1;
        if (l >= h->n)
            break;
        size_t c = (l + 1 < h->n && h->v[l + 1] < h->v[l]) ? l + 1 : l;
        if (h->v[c] >= x)
            break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n)
        h->v[i] = x;
    return top;
}

static void push_pair(const loom_tokenizer *tok, heap *h, const sym *s,
                      int32_t pos)
{
    if (pos < 0 || s[pos].next < 0)
        return;
    const tok_merge *m =
        loom__tok_mergemap_get(&tok->merges, s[pos].id, s[s[pos].next].id);
    if (m)
        heap_push(h, ((uint64_t)m->rank << 32) | (uint32_t)pos);
}

/* Merges the bytes of one piece by rank; appends the ids to OUT. */
static loom_status bpe_merge(const loom_tokenizer *tok, const char *s,
                             size_t len, tok_ids *out, loom_err *err)
{
    sym stack_syms[128];
    uint64_t stack_heap[3 * 128 + 2];
    sym *syms = stack_syms;
    heap h = {stack_heap, 0};
    loom_status st = LOOM_OK;
    if (len > 128) {
        syms = malloc(len * sizeof *syms);
        /* Each merge pushes at most two pairs onto the heap. */
        h.v = malloc((3 * len + 2) * sizeof *h.v);
        if (!syms || !h.v) {
            st = loom_err_set(err, LOOM_ERR_NOMEM, "tokenizer: out of memory");
            goto done;
        }
    }
    /* A byte without a token of its own becomes unk_token, or is dropped
     * when the model has none, as the reference does. */
    int32_t n = 0;
    for (size_t i = 0; i < len; i++) {
        int32_t id = tok->byte_id[(uint8_t)s[i]];
        if (id < 0)
            id = tok->unk_id;
        if (id < 0)
            continue;
        syms[n] = (sym){id, n - 1, -1, 1};
        if (n > 0)
            syms[n - 1].next = n;
        n++;
    }
    for (int32_t i = 0; i + 1 < n; i++)
        push_pair(tok, &h, syms, i);
    while (h.n) {
        uint64_t top = heap_pop(&h);
        int32_t pos = (int32_t)(uint32_t)top;
        uint32_t rank = (uint32_t)(top >> 32);
        if (!syms[pos].alive || syms[pos].next < 0)
            continue;
        int32_t nx = syms[pos].next;
        const tok_merge *m =
            loom__tok_mergemap_get(&tok->merges, syms[pos].id, syms[nx].id);
        /* A stale entry: the pair at pos changed since it was pushed. */
        if (!m || m->rank != rank)
            continue;
        syms[pos].id = m->id;
        syms[nx].alive = 0;
        syms[pos].next = syms[nx].next;
        if (syms[nx].next >= 0)
            syms[syms[nx].next].prev = pos;
        push_pair(tok, &h, syms, syms[pos].prev);
        push_pair(tok, &h, syms, pos);
    }
    for (int32_t i = n ? 0 : -1; i >= 0; i = syms[i].next) {
        st = loom__tok_ids_push(out, syms[i].id, err);
        if (st != LOOM_OK)
            break;
    }
done:
    if (syms != stack_syms)
        free(syms);
    if (h.v != stack_heap)
        free(h.v);
    return st;
}

/* The byte-level spelling of raw bytes, for whole-word vocabulary lookups. */
static int32_t vocab_lookup_bytes(const loom_tokenizer *tok, const char *s,
                                  size_t len)
{
    char buf[4 * TOK_CACHE_MAX_WORD];
    size_t o = 0;
    if (len > TOK_CACHE_MAX_WORD * 2)
        return -1;
    for (size_t i = 0; i < len; i++)
        o += loom__utf8_encode(loom__tok_byte_char((uint8_t)s[i]), buf + o);
    return loom__tok_strmap_get(&tok->vocab, buf, o);
}

loom_status loom__tok_bpe_word(tok_enc *e, const char *s, size_t len)
{
    const loom_tokenizer *tok = e->tok;
    if (len == 0)
        return LOOM_OK;
    if (len == 1 && tok->byte_id[(uint8_t)s[0]] >= 0)
        return loom__tok_ids_push(&e->out, tok->byte_id[(uint8_t)s[0]], e->err);
    if (tok->ignore_merges) {
        int32_t id = vocab_lookup_bytes(tok, s, len);
        if (id >= 0)
            return loom__tok_ids_push(&e->out, id, e->err);
    }
    tok_cache *c = e->cache;
    if (!c || len > TOK_CACHE_MAX_WORD)
        return bpe_merge(tok, s, len, &e->out, e->err);

    size_t j = c->cap ? str_slot(c->key, c->klen, c->cap, s, len) : 0;
    if (c->cap && c->key[j]) {
        for (uint32_t k = 0; k < c->cnt[j]; k++) {
            loom_status st =
                loom__tok_ids_push(&e->out, c->pool.v[c->off[j] + k], e->err);
            if (st != LOOM_OK)
                return st;
        }
        return LOOM_OK;
    }
    size_t before = e->out.n;
    loom_status st = bpe_merge(tok, s, len, &e->out, e->err);
    if (st != LOOM_OK || c->n >= TOK_CACHE_MAX_ENTRIES)
        return st;
    if ((c->n + 1) * 2 > c->cap) {
        if (!cache_grow(c))
            return LOOM_OK; /* the cache is an optimization only */
    }
    j = free_slot(c->key, c->cap, s, len);
    size_t off = c->pool.n;
    for (size_t k = before; k < e->out.n; k++) {
        if (loom__tok_ids_push(&c->pool, e->out.v[k], NULL) != LOOM_OK) {
            c->pool.n = off;
            return LOOM_OK;
        }
    }
    c->key[j] = s;
    c->klen[j] = (uint32_t)len;
    c->off[j] = (uint32_t)off;
    c->cnt[j] = (uint32_t)(e->out.n - before);
    c->n++;
    return LOOM_OK;
}
