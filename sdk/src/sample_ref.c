/* The sampler's reference pieces (see loom/sample_ref.h): Philox-4x32-10,
 * the keyed Gumbel-max draw and the top-k / top-p / min-p masks. */
#include <loom/sample_ref.h>

#include <math.h>

#include <loom/cpu_math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- noise */

void loom_philox4x32(const uint32_t ctr[4], const uint32_t key[2],
                     uint32_t out[4])
{
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0;
        uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
        k0 += 0x9E3779B9u; /* the key schedule's Weyl constants */
        k1 += 0xBB67AE85u;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

uint64_t loom_sample_bits(uint64_t seed, int32_t position, int32_t token)
{
    const uint32_t ctr[4] = {(uint32_t)position, (uint32_t)token, 0, 0};
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t out[4];
    loom_philox4x32(ctr, key, out);
    return ((uint64_t)out[0] << 32) | out[1];
}

/* Gumbel noise from the generator's 53 bits (see loom_sample_gumbel). */
static double gumbel_of_bits(uint64_t b53)
{
    double u = ((double)b53 + 0.5) * (1.0 / 9007199254740992.0);
    return -loom_cpu_log(-loom_cpu_log(u));
}

double loom_sample_gumbel(uint64_t seed, int32_t position, int32_t token)
{
    /* 53 bits, offset by half a step so u is never 0 or 1 */
    uint64_t b = loom_sample_bits(seed, position, token) >> 11;
    return gumbel_of_bits(b);
}

/* ---------------------------------------------------------------- steps */

int32_t loom_sample_argmax(const float *logits, int32_t vocab)
{
    int32_t best = 0;
    for (int32_t t = 1; t < vocab; t++)
        if (logits[t] > logits[best])
            best = t;
    return best;
}

#define N_PRUNE 12

int32_t loom_sample_draw(const float *logits, int32_t vocab, uint64_t seed,
                         int32_t position)
{
    /* Exact pruning: the noise a token needs to win is d = best - logit;
     * noise below d_k comes from bits below U_k = 2^53 exp(-exp(-d_k))
     * (less a margin far above rounding), so such tokens are skipped
     * without the two logarithms. Starting from the best logit's token
     * makes d large for most of the vocabulary. */
    static const double dk[N_PRUNE] = {0.5, 1, 1.5, 2,  3,  4,
                                       6,   8, 12,  16, 24, 36};
    uint64_t uk[N_PRUNE];
    for (int i = 0; i < N_PRUNE; i++)
        uk[i] = (uint64_t)(loom_cpu_exp(-loom_cpu_exp(-dk[i])) *
                           9007199254740992.0) -
                ((uint64_t)1 << 20);
    int32_t a = -1;
    for (int32_t t = 0; t < vocab; t++)
        if (logits[t] > -INFINITY && (a < 0 || logits[t] > logits[a]))
            a = t;
    if (a < 0) /* all masked (or NaN): cannot come from the chain */
        return loom_sample_argmax(logits, vocab);
    int32_t best = a;
    double best_v = (double)logits[a] +
                    gumbel_of_bits(loom_sample_bits(seed, position, a) >> 11);
    for (int32_t t = 0; t < vocab; t++) {
        if (t == a || !(logits[t] > -INFINITY))
            continue; /* masked (or NaN): never drawn */
        uint64_t b = loom_sample_bits(seed, position, t) >> 11;
        double d = best_v - (double)logits[t];
        if (d >= dk[0]) {
            int k = 0;
            while (k + 1 < N_PRUNE && d >= dk[k + 1])
                k++;
            if (b < uk[k])
                continue; /* its noise is below d_k <= d: cannot win */
        }
        double v = (double)logits[t] + gumbel_of_bits(b);
        if (v > best_v || (v == best_v && t < best)) {
            best = t;
            best_v = v;
        }
    }
    return best;
}

/* ---------------------------------------------------------------- masks */

typedef struct scored {
    float v;
    int32_t id;
} scored;

/* best first, the lower id on ties */
static int scored_cmp(const void *a, const void *b)
{
    const scored *x = a, *y = b;
    if (x->v != y->v)
        return x->v > y->v ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static float max_finite(const float *logits, int32_t vocab)
{
    float m = -INFINITY;
    for (int32_t t = 0; t < vocab; t++)
        if (logits[t] > m)
            m = logits[t];
    return m;
}

/* Masks every token that comes after `last` in best-first order (value
 * descending, the lower id first on ties). */
static void mask_after(float *logits, int32_t vocab, scored last)
{
    for (int32_t t = 0; t < vocab; t++)
        if (!(logits[t] > last.v || (logits[t] == last.v && t <= last.id)))
            logits[t] = -INFINITY;
}

/* Bucketed selection: tokens go into buckets by their distance below the
 * best logit (NB_WIDTH per unit, the far tail in the last bucket), so the
 * best-first prefix that top-k / top-p keep is every bucket before the one
 * where the count or mass crosses the limit, plus a sorted prefix of that
 * one bucket. One pass instead of a sort of the vocabulary. */
#define NB       2048
#define NB_WIDTH 32.0

typedef struct buckets {
    int32_t count[NB];
    double mass[NB];
} buckets;

static int bucket_of(float mx, float v)
{
    double d = ((double)mx - (double)v) * NB_WIDTH;
    return d >= NB - 1 ? NB - 1 : (int)d;
}

/* Fills the buckets (mass = exp(v - mx) when want_mass); returns the total
 * mass. */
static double bucket_fill(const float *logits, int32_t vocab, float mx,
                          buckets *bk, int want_mass)
{
    memset(bk, 0, sizeof *bk);
    double z = 0.0;
    for (int32_t t = 0; t < vocab; t++) {
        if (!(logits[t] > -INFINITY))
            continue;
        int b = bucket_of(mx, logits[t]);
        bk->count[b]++;
        if (want_mass) {
            double e = loom_cpu_exp((double)logits[t] - mx);
            bk->mass[b] += e;
            z += e;
        }
    }
    return z;
}

/* The members of bucket b into buf, sorted best first; returns how many. */
static int32_t bucket_sorted(const float *logits, int32_t vocab, float mx,
                             int b, scored *buf)
{
    int32_t m = 0;
    for (int32_t t = 0; t < vocab; t++)
        if (logits[t] > -INFINITY && bucket_of(mx, logits[t]) == b)
            buf[m++] = (scored){logits[t], t};
    qsort(buf, (size_t)m, sizeof *buf, scored_cmp);
    return m;
}

/* Keeps the k best (ties to the lower id). */
static void mask_top_k(float *logits, int32_t vocab, int32_t k, scored *buf,
                       buckets *bk)
{
    float mx = max_finite(logits, vocab);
    bucket_fill(logits, vocab, mx, bk, 0);
    int32_t before = 0;
    for (int b = 0; b < NB; b++) {
        if (before + bk->count[b] >= k) {
            bucket_sorted(logits, vocab, mx, b, buf);
            mask_after(logits, vocab, buf[k - 1 - before]);
            return;
        }
        before += bk->count[b];
    }
    /* fewer than k finite tokens: all stay */
}

/* Keeps the smallest best-first set whose softmax mass reaches p. */
static void mask_top_p(float *logits, int32_t vocab, float p, scored *buf,
                       buckets *bk)
{
    float mx = max_finite(logits, vocab);
    double z = bucket_fill(logits, vocab, mx, bk, 1);
    double cum = 0.0, want = (double)p * z;
    for (int b = 0; b < NB; b++) {
        if (bk->count[b] == 0)
            continue;
        if (cum + bk->mass[b] < want && b < NB - 1) {
            cum += bk->mass[b];
            continue;
        }
        int32_t m = bucket_sorted(logits, vocab, mx, b, buf);
        for (int32_t i = 0; i < m; i++) {
            cum += loom_cpu_exp((double)buf[i].v - mx);
            if (cum >= want || i == m - 1) {
                /* rounding may leave the last bucket short: keep it all */
                mask_after(logits, vocab, buf[i]);
                return;
            }
        }
    }
}

/* The scratch is the buckets, then one scored entry per token. */
size_t loom_sample_mask_scratch_size(int32_t vocab)
{
    return sizeof(buckets) + sizeof(scored) * (size_t)(vocab > 0 ? vocab : 0);
}

/* Runs `fn` with the caller's scratch or one of its own. */
static loom_status with_scratch(void *scratch, int32_t vocab, scored **buf,
                                buckets **bk, void **owned)
{
    *owned = NULL;
    if (!scratch) {
        scratch = *owned = malloc(loom_sample_mask_scratch_size(vocab));
        if (!scratch)
            return LOOM_ERR_NOMEM;
    }
    *bk = (buckets *)scratch;
    *buf = (scored *)((char *)scratch + sizeof(buckets));
    return LOOM_OK;
}

loom_status loom_sample_mask_top_k(float *logits, int32_t vocab, int32_t k,
                                   void *scratch)
{
    if (k <= 0 || k >= vocab)
        return LOOM_OK;
    scored *buf;
    buckets *bk;
    void *owned;
    if (with_scratch(scratch, vocab, &buf, &bk, &owned) != LOOM_OK)
        return LOOM_ERR_NOMEM;
    mask_top_k(logits, vocab, k, buf, bk);
    free(owned);
    return LOOM_OK;
}

loom_status loom_sample_mask_top_p(float *logits, int32_t vocab, float p,
                                   void *scratch)
{
    if (!(p < 1.0f))
        return LOOM_OK;
    scored *buf;
    buckets *bk;
    void *owned;
    if (with_scratch(scratch, vocab, &buf, &bk, &owned) != LOOM_OK)
        return LOOM_ERR_NOMEM;
    mask_top_p(logits, vocab, p, buf, bk);
    free(owned);
    return LOOM_OK;
}

/* Keeps tokens whose probability is at least min_p times the best one's. */
void loom_sample_mask_min_p(float *logits, int32_t vocab, float min_p)
{
    if (!(min_p > 0.0f))
        return;
    float mx = max_finite(logits, vocab);
    double thr = (double)mx + loom_cpu_log((double)min_p);
    for (int32_t t = 0; t < vocab; t++)
        if (logits[t] > -INFINITY && (double)logits[t] < thr)
            logits[t] = -INFINITY;
}
