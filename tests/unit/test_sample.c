/* The sampling chain against hand-computed values: Philox known answers,
 * a chi-square test of keyed Gumbel-max draws against the softmax, exactly
 * which tokens top-k/top-p/min-p keep, exactly how penalties move logits,
 * argmax ties, determinism of keyed draws, logprobs and parameter checks. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <loom/sample.h>

#include "testutil.h"

#define NINF (-INFINITY)
#define PI   3.14159265358979323846

/* ---------------------------------------------------------------- noise */

START_TEST(philox_known_answers)
{
    /* Random123's kat_vectors for philox4x32-10 */
    static const uint32_t ctr[3][4] = {
        {0, 0, 0, 0},
        {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
        {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}};
    static const uint32_t key[3][2] = {
        {0, 0}, {0xffffffffu, 0xffffffffu}, {0xa4093822u, 0x299f31d0u}};
    static const uint32_t want[3][4] = {
        {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u},
        {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu},
        {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}};
    for (int i = 0; i < 3; i++) {
        uint32_t out[4];
        loom_philox4x32(ctr[i], key[i], out);
        for (int j = 0; j < 4; j++)
            ck_assert_uint_eq(out[j], want[i][j]);
    }
}
END_TEST

START_TEST(keyed_noise_is_a_pure_function_of_the_key)
{
    ck_assert_uint_eq(loom_sample_bits(7, 100, 3), loom_sample_bits(7, 100, 3));
    ck_assert_uint_ne(loom_sample_bits(7, 100, 3), loom_sample_bits(8, 100, 3));
    ck_assert_uint_ne(loom_sample_bits(7, 100, 3), loom_sample_bits(7, 101, 3));
    ck_assert_uint_ne(loom_sample_bits(7, 100, 3), loom_sample_bits(7, 100, 4));
    /* the high half of the seed matters too */
    ck_assert_uint_ne(loom_sample_bits(7, 100, 3),
                      loom_sample_bits(7 | (1ull << 40), 100, 3));
    /* Gumbel(0,1): mean is the Euler-Mascheroni constant, variance pi^2/6 */
    double sum = 0, sq = 0;
    const int n = 200000;
    for (int i = 0; i < n; i++) {
        double g = loom_sample_gumbel(99, i / 16, i % 16);
        ck_assert(isfinite(g));
        sum += g;
        sq += g * g;
    }
    double mean = sum / n, var = sq / n - mean * mean;
    ck_assert_msg(fabs(mean - 0.5772156649) < 0.01, "mean %g", mean);
    ck_assert_msg(fabs(var - PI * PI / 6) < 0.03, "var %g", var);
}
END_TEST

/* Pearson's chi-square of counts against probabilities. */
static double chi_square(const long *count, const double *p, int k, long n)
{
    double c = 0;
    for (int i = 0; i < k; i++) {
        double e = p[i] * (double)n;
        c += (count[i] - e) * (count[i] - e) / e;
    }
    return c;
}

static void softmax(const float *l, int k, double T, double *p)
{
    double z = 0, mx = -INFINITY;
    for (int i = 0; i < k; i++)
        if (l[i] > mx)
            mx = l[i];
    for (int i = 0; i < k; i++)
        z += exp((l[i] - mx) / T);
    for (int i = 0; i < k; i++)
        p[i] = exp((l[i] - mx) / T) / z;
}

START_TEST(draws_follow_the_softmax)
{
    static const float logits[6] = {1.0f, 0.5f, 0.0f, -0.5f, -1.0f, 2.0f};
    double p[6];
    softmax(logits, 6, 1.0, p);
    /* chi-square critical value, 5 degrees of freedom, p = 0.001 */
    const double crit = 20.515;
    static const uint64_t seeds[3] = {1, 0xdeadbeefcafeull, 42};
    for (int si = 0; si < 3; si++) {
        long count[6] = {0};
        const long n = 60000;
        for (long i = 0; i < n; i++)
            count[loom_sample_draw(logits, 6, seeds[si], (int32_t)i)]++;
        double c = chi_square(count, p, 6, n);
        ck_assert_msg(c < crit, "seed %d: chi-square %g", si, c);
    }
    /* through the sampler, at temperature 0.5, one draw per (seed, pos) */
    loom_sample_params sp;
    loom_sample_params_default(&sp);
    sp.temperature = 0.5f;
    softmax(logits, 6, 0.5, p);
    long count[6] = {0};
    long n = 0;
    for (uint64_t seed = 1; seed <= 300; seed++) {
        sp.seed = seed;
        sp.has_seed = 1;
        loom_sampler *s = NULL;
        loom_err err;
        ck_assert_int_eq(loom_sampler_new(&sp, 6, 0, &s, &err), LOOM_OK);
        for (int32_t pos = 0; pos < 200; pos++, n++) {
            loom_sample_result r;
            loom_sampler_sample(s, logits, pos * 7 + 3, &r);
            count[r.token]++;
        }
        loom_sampler_free(s);
    }
    double c = chi_square(count, p, 6, n);
    ck_assert_msg(c < crit, "temperature 0.5: chi-square %g", c);
}
END_TEST

/* The draw skips tokens that cannot win; it must pick exactly what the
 * plain argmax of logit + gumbel picks. */
START_TEST(draw_equals_the_plain_gumbel_argmax)
{
    enum { V = 3000 };
    static float l[V];
    for (int trial = 0; trial < 60; trial++) {
        /* spreads from flat to peaked, with ties and masked tokens */
        double spread = 0.05 * (1 << (trial % 10));
        for (int t = 0; t < V; t++) {
            uint64_t b = loom_sample_bits(999, trial, t);
            l[t] = (float)((double)(b >> 40) / 16777216.0 * spread);
            if (t % 97 == 5)
                l[t] = -INFINITY;
            if (t % 7 == 3)
                l[t] = l[t - 1];
        }
        for (int32_t pos = 0; pos < 20; pos++) {
            uint64_t seed = 17 + (uint64_t)trial;
            int32_t best = -1;
            double bv = 0;
            for (int t = 0; t < V; t++) {
                if (!(l[t] > -INFINITY))
                    continue;
                double v = (double)l[t] + loom_sample_gumbel(seed, pos, t);
                if (best < 0 || v > bv) {
                    best = t;
                    bv = v;
                }
            }
            ck_assert_int_eq(loom_sample_draw(l, V, seed, pos), best);
        }
    }
}
END_TEST

START_TEST(draw_never_picks_a_masked_token)
{
    float l[8];
    for (int i = 0; i < 8; i++)
        l[i] = NINF;
    l[2] = 0.3f;
    l[5] = 0.3f;
    int seen2 = 0, seen5 = 0;
    for (int32_t pos = 0; pos < 2000; pos++) {
        int32_t t = loom_sample_draw(l, 8, 5, pos);
        ck_assert(t == 2 || t == 5);
        seen2 += t == 2;
        seen5 += t == 5;
    }
    ck_assert(seen2 > 800 && seen5 > 800);
}
END_TEST

START_TEST(argmax_takes_the_lower_id_on_ties)
{
    static const float l[5] = {1, 3, 3, 2, 3};
    ck_assert_int_eq(loom_sample_argmax(l, 5), 1);
    loom_sample_params sp;
    loom_sample_params_default(&sp);
    sp.temperature = 0;
    loom_sampler *s = NULL;
    ck_assert_int_eq(loom_sampler_new(&sp, 5, 0, &s, NULL), LOOM_OK);
    loom_sample_result r;
    for (int32_t pos = 0; pos < 50; pos++) {
        loom_sampler_sample(s, l, pos, &r);
        ck_assert_int_eq(r.token, 1);
    }
    loom_sampler_free(s);
}
END_TEST

/* ---------------------------------------------------------------- masks */

static void masks(loom_sample_params *sp, float *l, int n)
{
    loom_sample_apply_masks(sp, l, n);
}

static void assert_kept(const float *got, const float *orig, int n,
                        const int *keep)
{
    for (int i = 0; i < n; i++) {
        if (keep[i])
            ck_assert_msg(got[i] == orig[i], "token %d: %g, want %g", i,
                          (double)got[i], (double)orig[i]);
        else
            ck_assert_msg(isinf(got[i]) && got[i] < 0,
                          "token %d should be masked: %g", i, (double)got[i]);
    }
}

START_TEST(top_k_keeps_the_k_best_ties_to_lower_id)
{
    static const float orig[6] = {3, 1, 3, 2, 0, 2};
    loom_sample_params sp;
    loom_sample_params_default(&sp);
    float l[6];
    struct {
        int k;
        int keep[6];
    } cases[] = {{1, {1, 0, 0, 0, 0, 0}}, {2, {1, 0, 1, 0, 0, 0}},
                 {3, {1, 0, 1, 1, 0, 0}}, {4, {1, 0, 1, 1, 0, 1}},
                 {5, {1, 1, 1, 1, 0, 1}}, {6, {1, 1, 1, 1, 1, 1}},
                 {0, {1, 1, 1, 1, 1, 1}}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        memcpy(l, orig, sizeof l);
        sp.top_k = cases[c].k;
        masks(&sp, l, 6);
        assert_kept(l, orig, 6, cases[c].keep);
    }
}
END_TEST

START_TEST(top_p_keeps_the_smallest_nucleus)
{
    /* probabilities 0.15, 0.5, 0.05, 0.3 in that id order */
    float orig[4] = {logf(0.15f), logf(0.5f), logf(0.05f), logf(0.3f)};
    loom_sample_params sp;
    loom_sample_params_default(&sp);
    float l[4];
    struct {
        float p;
        int keep[4];
    } cases[] = {{0.45f, {0, 1, 0, 0}},
                 {0.75f, {0, 1, 0, 1}},
                 {0.85f, {1, 1, 0, 1}},
                 {0.97f, {1, 1, 1, 1}},
                 {1.0f, {1, 1, 1, 1}}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        memcpy(l, orig, sizeof l);
        sp.top_p = cases[c].p;
        masks(&sp, l, 4);
        assert_kept(l, orig, 4, cases[c].keep);
    }
}
END_TEST

/* A plain reference for top-p on a large vocabulary: selection order by
 * (value desc, id asc), cumulative softmax until it reaches p. */
START_TEST(top_p_on_a_large_vocabulary_matches_a_plain_reference)
{
    enum { V = 2000 };
    static float orig[V], l[V];
    static int keep[V], used[V];
    for (int i = 0; i < V; i++) /* spread, with repeats (ties) */
        orig[i] = (float)((i * 7919) % 600) * -0.02f;
    loom_sample_params sp;
    loom_sample_params_default(&sp);
    static const float ps[] = {0.1f, 0.5f, 0.9f, 0.99f};
    for (size_t c = 0; c < sizeof ps / sizeof *ps; c++) {
        double z = 0;
        for (int i = 0; i < V; i++)
            z += exp(orig[i]);
        memset(keep, 0, sizeof keep);
        memset(used, 0, sizeof used);
        double cum = 0;
        while (cum < ps[c]) {
            int best = -1;
            for (int i = 0; i < V; i++)
                if (!used[i] && (best < 0 || orig[i] > orig[best]))
                    best = i;
            used[best] = keep[best] = 1;
            cum += exp(orig[best]) / z;
        }
        memcpy(l, orig, sizeof l);
        sp.top_p = ps[c];
        masks(&sp, l, V);
        assert_kept(l, orig, V, keep);
    }
}
END_TEST

START_TEST(min_p_keeps_tokens_above_the_scaled_best)
{
    float orig[4] = {logf(0.15f), logf(0.5f), logf(0.05f), logf(0.3f)};
    loom_sample_params sp;
    loom_sample_params_default(&sp);
    float l[4];
    struct {
        float m;
        int keep[4];
    } cases[] = {{0.35f, {0, 1, 0, 1}}, /* >= 0.175 */
                 {0.2f, {1, 1, 0, 1}},  /* >= 0.1 */
                 {0.05f, {1, 1, 1, 1}}, /* >= 0.025 */
                 {0.9f, {0, 1, 0, 0}}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        memcpy(l, orig, sizeof l);
        sp.min_p = cases[c].m;
        masks(&sp, l, 4);
        assert_kept(l, orig, 4, cases[c].keep);
    }
}
END_TEST

START_TEST(masks_apply_after_temperature_and_in_order)
{
    /* temperature divides exactly */
    float l[4] = {1, -2, 0.5f, 4};
    loom_sample_params sp;
    loom_sample_params_default(&sp);
    sp.temperature = 2.0f;
    masks(&sp, l, 4);
    ck_assert(l[0] == 0.5f && l[1] == -1.0f && l[2] == 0.25f && l[3] == 2.0f);

    /* top-p sees the top-k survivors renormalized: probs .4 .3 .2 .1;
     * top-p .5 alone keeps {0, 1} (.7); after top-k 2 the survivors are
     * 4/7 and 3/7, so top-p .5 keeps only {0} */
    float orig[4] = {logf(0.4f), logf(0.3f), logf(0.2f), logf(0.1f)};
    memcpy(l, orig, sizeof l);
    loom_sample_params_default(&sp);
    sp.top_p = 0.5f;
    masks(&sp, l, 4);
    assert_kept(l, orig, 4, (int[]){1, 1, 0, 0});
    memcpy(l, orig, sizeof l);
    sp.top_k = 2;
    masks(&sp, l, 4);
    assert_kept(l, orig, 4, (int[]){1, 0, 0, 0});

    /* temperature changes what top-p keeps: at T = 4 the probabilities
     * flatten to about .29 .27 .24 .20, so top-p .5 keeps two; at T = .25
     * the best one holds .72 and stays alone */
    loom_sample_params_default(&sp);
    sp.top_p = 0.5f;
    sp.temperature = 4.0f;
    memcpy(l, orig, sizeof l);
    masks(&sp, l, 4);
    ck_assert(isfinite(l[0]) && isfinite(l[1]) && isinf(l[2]) && isinf(l[3]));
    sp.temperature = 0.25f;
    memcpy(l, orig, sizeof l);
    masks(&sp, l, 4);
    ck_assert(isfinite(l[0]) && isinf(l[1]) && isinf(l[2]) && isinf(l[3]));
}
END_TEST

/* ---------------------------------------------------------------- penalties */

START_TEST(penalties_change_exactly_the_right_logits)
{
    float l[6] = {1.0f, -1.0f, 2.0f, -2.0f, 0.5f, 3.0f};
    static const int32_t prompt[6] = {1, 1, 0, 0, 0, 0};
    static const int32_t gen[6] = {0, 0, 2, 1, 0, 0};
    static const loom_logit_bias bias[2] = {{4, 1.0f}, {0, 1.0f}};
    loom_sample_params sp;
    loom_sample_params_default(&sp);
    sp.repeat_penalty = 2.0f;
    sp.presence_penalty = 0.5f;
    sp.frequency_penalty = 0.25f;
    sp.bias = bias;
    sp.n_bias = 2;
    loom_sample_apply_penalties(&sp, l, 6, prompt, gen);
    /* 0: (1 + 1 bias) / 2, prompt only: no presence/frequency */
    ck_assert_float_eq(l[0], 1.0f);
    ck_assert_float_eq(l[1], -2.0f);  /* -1 * 2 */
    ck_assert_float_eq(l[2], 0.0f);   /* 2/2 - .5 - 2*.25 */
    ck_assert_float_eq(l[3], -4.75f); /* -2*2 - .5 - .25 */
    ck_assert_float_eq(l[4], 1.5f);   /* bias only */
    ck_assert_float_eq(l[5], 3.0f);   /* untouched */

    /* each step alone */
    float m[3] = {1.0f, -1.0f, 2.0f};
    static const int32_t g1[3] = {0, 3, 0};
    loom_sample_params_default(&sp);
    sp.frequency_penalty = -0.5f; /* negative encourages */
    loom_sample_apply_penalties(&sp, m, 3, NULL, g1);
    ck_assert_float_eq(m[0], 1.0f);
    ck_assert_float_eq(m[1], 0.5f);
    ck_assert_float_eq(m[2], 2.0f);
}
END_TEST

START_TEST(penalty_window_counts_only_the_last_n)
{
    /* frequency 1 over logits {0, .5, .9}; generated 2, 1, 1 */
    static const float l[3] = {0.0f, 0.5f, 0.9f};
    static const int32_t gen[3] = {2, 1, 1};
    struct {
        int32_t last_n;
        int32_t want;
    } cases[] = {{0, 0}, /* all: {2:1, 1:2} -> {0, -1.5, -.1} */
                 {2, 2}, /* {1:2} -> {0, -1.5, .9} */
                 {3, 0}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        loom_sample_params sp;
        loom_sample_params_default(&sp);
        sp.temperature = 0;
        sp.frequency_penalty = 1.0f;
        sp.penalty_last_n = cases[c].last_n;
        loom_sampler *s = NULL;
        ck_assert_int_eq(loom_sampler_new(&sp, 3, 0, &s, NULL), LOOM_OK);
        loom_sampler_accept(s, 0, 0); /* prompt tokens do not count */
        for (int i = 0; i < 3; i++)
            loom_sampler_accept(s, gen[i], 1);
        loom_sample_result r;
        loom_sampler_sample(s, l, 10, &r);
        ck_assert_msg(r.token == cases[c].want, "last_n %d: token %d",
                      cases[c].last_n, r.token);
        loom_sampler_free(s);
    }
    /* the repetition penalty counts prompt tokens */
    loom_sample_params sp;
    loom_sample_params_default(&sp);
    sp.temperature = 0;
    sp.repeat_penalty = 2.0f;
    loom_sampler *s = NULL;
    ck_assert_int_eq(loom_sampler_new(&sp, 3, 0, &s, NULL), LOOM_OK);
    static const float e[3] = {1.0f, 1.0f, 0.4f};
    loom_sample_result r;
    loom_sampler_sample(s, e, 0, &r);
    ck_assert_int_eq(r.token, 0);
    loom_sampler_accept(s, 0, 0);
    loom_sampler_sample(s, e, 1, &r);
    ck_assert_int_eq(r.token, 1);
    loom_sampler_free(s);
}
END_TEST

/* ---------------------------------------------------------------- sampler */

START_TEST(seeded_draws_repeat_in_any_order)
{
    enum { V = 50, N = 64 };
    static float logits[N][V];
    for (int p = 0; p < N; p++)
        for (int v = 0; v < V; v++)
            logits[p][v] = (float)sin(p * 0.7 + v * 1.3) * 2.0f;
    loom_sample_params sp;
    loom_sample_params_default(&sp);
    sp.temperature = 0.9f;
    sp.top_k = 30;
    sp.top_p = 0.95f;
    sp.min_p = 0.02f;
    sp.seed = 1234;
    sp.has_seed = 1;
    int32_t fwd[N], rev[N];
    loom_sampler *a = NULL, *b = NULL;
    ck_assert_int_eq(loom_sampler_new(&sp, V, 0, &a, NULL), LOOM_OK);
    ck_assert_int_eq(loom_sampler_new(&sp, V, 777, &b, NULL), LOOM_OK);
    ck_assert_uint_eq(loom_sampler_seed(b), 1234); /* the request's seed */
    loom_sample_result r;
    for (int p = 0; p < N; p++) {
        loom_sampler_sample(a, logits[p], p, &r);
        fwd[p] = r.token;
    }
    for (int p = N - 1; p >= 0; p--) {
        loom_sampler_sample(b, logits[p], p, &r);
        rev[p] = r.token;
    }
    int distinct = 0;
    for (int p = 0; p < N; p++) {
        ck_assert_int_eq(fwd[p], rev[p]);
        distinct += p > 0 && fwd[p] != fwd[p - 1];
    }
    ck_assert(distinct > 10); /* really sampling, not constant */
    loom_sampler_free(a);
    loom_sampler_free(b);

    /* unseeded: the random seed given is used and reported */
    sp.has_seed = 0;
    ck_assert_int_eq(loom_sampler_new(&sp, V, 0xabcdefull, &a, NULL), LOOM_OK);
    ck_assert_uint_eq(loom_sampler_seed(a), 0xabcdefull);
    loom_sampler_free(a);
}
END_TEST

START_TEST(logprobs_are_log_softmax_of_raw_logits)
{
    static const float l[4] = {1, 3, 3, 2};
    double lse = log(exp(1) + 2 * exp(3) + exp(2));
    loom_sample_params sp;
    loom_sample_params_default(&sp);
    sp.temperature = 0;
    sp.n_logprobs = 3;
    sp.repeat_penalty = 5.0f; /* must not show in the logprobs */
    loom_sampler *s = NULL;
    ck_assert_int_eq(loom_sampler_new(&sp, 4, 0, &s, NULL), LOOM_OK);
    loom_sampler_accept(s, 1, 0);
    loom_sample_result r;
    loom_sampler_sample(s, l, 1, &r);
    ck_assert_int_eq(r.token, 2); /* 1 is penalized to 0.6 */
    ck_assert_double_eq_tol(r.logprob, 3 - lse, 1e-5);
    ck_assert_int_eq(r.n_top, 3);
    ck_assert_int_eq(r.top[0].token, 1);
    ck_assert_int_eq(r.top[1].token, 2);
    ck_assert_int_eq(r.top[2].token, 3);
    ck_assert_double_eq_tol(r.top[0].logprob, 3 - lse, 1e-5);
    ck_assert_double_eq_tol(r.top[2].logprob, 2 - lse, 1e-5);
    loom_sampler_free(s);

    /* -1: none at all; 0: only the chosen one */
    sp.n_logprobs = 0;
    ck_assert_int_eq(loom_sampler_new(&sp, 4, 0, &s, NULL), LOOM_OK);
    loom_sampler_sample(s, l, 1, &r);
    ck_assert_int_eq(r.n_top, 0);
    ck_assert_double_eq_tol(r.logprob, 3 - lse, 1e-5);
    loom_sampler_free(s);
}
END_TEST

START_TEST(bad_parameters_are_refused_by_name)
{
    loom_sample_params sp;
    loom_err err;
#define REFUSE(stmt, word)                                                     \
    do {                                                                       \
        loom_sample_params_default(&sp);                                       \
        stmt;                                                                  \
        ck_assert_int_ne(loom_sample_params_check(&sp, 10, &err), LOOM_OK);    \
        ck_assert_msg(strstr(err.msg, word), "%s", err.msg);                   \
        loom_sampler *s = NULL;                                                \
        ck_assert_int_ne(loom_sampler_new(&sp, 10, 0, &s, &err), LOOM_OK);     \
        ck_assert_ptr_null(s);                                                 \
    } while (0)
    REFUSE(sp.temperature = -1, "temperature");
    REFUSE(sp.temperature = NAN, "temperature");
    REFUSE(sp.top_k = -1, "top_k");
    REFUSE(sp.top_p = 0, "top_p");
    REFUSE(sp.top_p = 1.5f, "top_p");
    REFUSE(sp.min_p = 2, "min_p");
    REFUSE(sp.repeat_penalty = 0, "repeat_penalty");
    REFUSE(sp.presence_penalty = INFINITY, "penalty");
    REFUSE(sp.penalty_last_n = -1, "penalty_last_n");
    REFUSE(sp.n_logprobs = 21, "logprobs");
    static const loom_logit_bias far[1] = {{10, 1.0f}};
    REFUSE((sp.bias = far, sp.n_bias = 1), "logit_bias token 10");
    REFUSE(sp.n_bias = 2, "logit_bias");
#undef REFUSE
    loom_sample_params_default(&sp);
    ck_assert_int_eq(loom_sample_params_check(&sp, 10, &err), LOOM_OK);
    loom_sampler *s = NULL;
    ck_assert_int_eq(loom_sampler_new(&sp, 0, 0, &s, &err), LOOM_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err.msg, "vocab"));
}
END_TEST

START_TEST(the_check_names_the_api_parameter_at_fault)
{
    loom_sample_params sp;
    loom_err err;
    const char *field = "unset";
#define NAMES(stmt, name)                                                      \
    do {                                                                       \
        loom_sample_params_default(&sp);                                       \
        stmt;                                                                  \
        ck_assert_int_ne(                                                      \
            loom_sample_params_check_field(&sp, 10, &field, &err), LOOM_OK);   \
        ck_assert_ptr_nonnull(field);                                          \
        ck_assert_str_eq(field, name);                                         \
    } while (0)
    NAMES(sp.temperature = -1, "temperature");
    NAMES(sp.top_k = -2, "top_k");
    NAMES(sp.top_p = 0, "top_p");
    NAMES(sp.min_p = -0.5f, "min_p");
    NAMES(sp.repeat_penalty = 0, "repetition_penalty");
    NAMES(sp.presence_penalty = NAN, "presence_penalty");
    NAMES(sp.frequency_penalty = INFINITY, "frequency_penalty");
    NAMES(sp.n_logprobs = -2, "logprobs");
    static const loom_logit_bias far[1] = {{10, 1.0f}};
    NAMES((sp.bias = far, sp.n_bias = 1), "logit_bias");
#undef NAMES
    loom_sample_params_default(&sp);
    ck_assert_int_eq(loom_sample_params_check_field(&sp, 10, &field, &err),
                     LOOM_OK);
    ck_assert_ptr_null(field);
    ck_assert_int_eq(loom_sample_params_check_field(&sp, 10, NULL, &err),
                     LOOM_OK);
    /* vocab 0: not known yet, so only negative bias ids are refused */
    static const loom_logit_bias big[1] = {{100000, 1.0f}};
    static const loom_logit_bias neg[1] = {{-1, 1.0f}};
    sp.bias = big;
    sp.n_bias = 1;
    ck_assert_int_eq(loom_sample_params_check(&sp, 0, &err), LOOM_OK);
    ck_assert_int_ne(loom_sample_params_check(&sp, 100000, &err), LOOM_OK);
    sp.bias = neg;
    ck_assert_int_ne(loom_sample_params_check(&sp, 0, &err), LOOM_OK);
    ck_assert_ptr_nonnull(strstr(err.msg, "logit_bias token -1"));
}
END_TEST

/* The sampler copies the bias: the caller's array may change after. */
START_TEST(sampler_keeps_its_own_copy_of_the_bias)
{
    loom_logit_bias bias[1] = {{2, 100.0f}};
    loom_sample_params sp;
    loom_sample_params_default(&sp);
    sp.temperature = 0;
    sp.bias = bias;
    sp.n_bias = 1;
    loom_sampler *s = NULL;
    ck_assert_int_eq(loom_sampler_new(&sp, 4, 0, &s, NULL), LOOM_OK);
    bias[0].token = 3;
    const float l[4] = {1, 0, 0, 0};
    loom_sample_result r;
    loom_sampler_sample(s, l, 1, &r);
    ck_assert_int_eq(r.token, 2);
    loom_sampler_free(s);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("sample");
    TCase *t = tcase_create("core");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, philox_known_answers);
    tcase_add_test(t, keyed_noise_is_a_pure_function_of_the_key);
    tcase_add_test(t, draws_follow_the_softmax);
    tcase_add_test(t, draw_equals_the_plain_gumbel_argmax);
    tcase_add_test(t, draw_never_picks_a_masked_token);
    tcase_add_test(t, argmax_takes_the_lower_id_on_ties);
    tcase_add_test(t, top_k_keeps_the_k_best_ties_to_lower_id);
    tcase_add_test(t, top_p_keeps_the_smallest_nucleus);
    tcase_add_test(t, top_p_on_a_large_vocabulary_matches_a_plain_reference);
    tcase_add_test(t, min_p_keeps_tokens_above_the_scaled_best);
    tcase_add_test(t, masks_apply_after_temperature_and_in_order);
    tcase_add_test(t, penalties_change_exactly_the_right_logits);
    tcase_add_test(t, penalty_window_counts_only_the_last_n);
    tcase_add_test(t, seeded_draws_repeat_in_any_order);
    tcase_add_test(t, logprobs_are_log_softmax_of_raw_logits);
    tcase_add_test(t, bad_parameters_are_refused_by_name);
    tcase_add_test(t, the_check_names_the_api_parameter_at_fault);
    tcase_add_test(t, sampler_keeps_its_own_copy_of_the_bias);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return run_suite(suite());
}
