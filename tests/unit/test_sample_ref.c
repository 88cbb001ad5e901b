/* The SDK's sampler reference pieces (loom/sample_ref.h) against fixed
 * vectors: Philox-4x32-10 against Random123's published known answers, the
 * keyed bits and Gumbel noise against values computed from those answers,
 * the draw against its definition (argmax of logit + noise), and the masks
 * on small logits whose results are computed by hand. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <loom/sample_ref.h>

#include "testutil.h"

/* The "philox4x32 10" lines of Random123's tests/kat_vectors
 * (https://github.com/DEShawResearch/random123, tests/kat_vectors): counter
 * all zeros / all ones / pi's hex digits, key likewise. */
START_TEST(philox_matches_random123_known_answers)
{
    static const struct {
        uint32_t ctr[4], key[2], want[4];
    } kat[3] = {
        {{0, 0, 0, 0},
         {0, 0},
         {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
         {0xffffffff, 0xffffffff},
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
         {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (int i = 0; i < 3; i++) {
        uint32_t out[4];
        loom_philox4x32(kat[i].ctr, kat[i].key, out);
        for (int j = 0; j < 4; j++)
            ck_assert_msg(out[j] == kat[i].want[j], "vector %d word %d: %08x",
                          i, j, out[j]);
    }
}
END_TEST

/* seed 0, position 0, token 0 is the all-zeros vector: the bits are its
 * first two words, the noise -log(-log(u)) of their top 53 bits. */
START_TEST(keyed_bits_and_noise_come_from_the_block)
{
    ck_assert_uint_eq(loom_sample_bits(0, 0, 0), 0x6627e8d5e169c58dull);
    double u =
        ((double)(0x6627e8d5e169c58dull >> 11) + 0.5) / 9007199254740992.0;
    ck_assert_double_eq_tol(loom_sample_gumbel(0, 0, 0), -log(-log(u)), 1e-15);
    /* key = (seed low, seed high), counter = (position, token, 0, 0) */
    uint32_t out[4];
    const uint32_t ctr[4] = {0x243f6a88, 0x85a308d3, 0, 0};
    const uint32_t key[2] = {0xa4093822, 0x299f31d0};
    loom_philox4x32(ctr, key, out);
    ck_assert_uint_eq(loom_sample_bits(0x299f31d0a4093822ull,
                                       (int32_t)0x243f6a88,
                                       (int32_t)0x85a308d3),
                      ((uint64_t)out[0] << 32) | out[1]);
}
END_TEST

/* The draw is argmax_t (logit_t + gumbel(seed, position, t)), masked tokens
 * never drawn: checked by brute force over logits spread wide enough that
 * the draw's pruning is exercised. */
START_TEST(draw_is_the_argmax_of_logit_plus_noise)
{
    enum { V = 7 };
    static const float base[V] = {0.0f,  -0.3f,  -1.2f, -2.5f,
                                  -6.0f, -13.0f, 2.0f};
    for (int32_t pos = 0; pos < 2000; pos++) {
        float lg[V];
        for (int t = 0; t < V; t++)
            lg[t] = base[t] * (float)(1 + pos % 5);
        if (pos % 3 == 0)
            lg[6] = -INFINITY; /* masked */
        uint64_t seed = 0x9e3779b97f4a7c15ull * (uint64_t)(pos % 11 + 1);
        int want = -1;
        double best = -INFINITY;
        for (int t = 0; t < V; t++) {
            if (lg[t] == -INFINITY)
                continue;
            double v = (double)lg[t] + loom_sample_gumbel(seed, pos, t);
            if (v > best) {
                best = v;
                want = t;
            }
        }
        ck_assert_int_eq(loom_sample_draw(lg, V, seed, pos), want);
    }
    /* one finite token: always that one; all masked: the argmax */
    float one[4] = {-INFINITY, -INFINITY, -5.0f, -INFINITY};
    for (int32_t pos = 0; pos < 50; pos++)
        ck_assert_int_eq(loom_sample_draw(one, 4, 7, pos), 2);
    float none[3] = {-INFINITY, -INFINITY, -INFINITY};
    ck_assert_int_eq(loom_sample_draw(none, 3, 7, 0), 0);
    float tie[3] = {1.0f, 3.0f, 3.0f};
    ck_assert_int_eq(loom_sample_argmax(tie, 3), 1);
}
END_TEST

/* Which tokens a mask kept: 1 for finite. */
static void kept(const float *lg, int n, int *out)
{
    for (int i = 0; i < n; i++)
        out[i] = lg[i] > -INFINITY;
}

static void assert_kept(const float *lg, int n, const int *want)
{
    int got[16];
    kept(lg, n, got);
    for (int i = 0; i < n; i++)
        ck_assert_msg(got[i] == want[i], "token %d: kept %d, want %d", i,
                      got[i], want[i]);
}

START_TEST(top_k_keeps_the_k_best_ties_to_the_lower_id)
{
    float a[5] = {1, 3, 2, 3, 0};
    ck_assert_int_eq(loom_sample_mask_top_k(a, 5, 2, NULL), LOOM_OK);
    assert_kept(a, 5, (const int[]){0, 1, 0, 1, 0});
    float b[4] = {3, 3, 3, 1};
    ck_assert_int_eq(loom_sample_mask_top_k(b, 4, 2, NULL), LOOM_OK);
    assert_kept(b, 4, (const int[]){1, 1, 0, 0});
    /* k = 3 with a masked token and the caller's scratch */
    void *scratch = malloc(loom_sample_mask_scratch_size(5));
    float c[5] = {-INFINITY, 0.5f, -1, 4, 0.25f};
    ck_assert_int_eq(loom_sample_mask_top_k(c, 5, 3, scratch), LOOM_OK);
    assert_kept(c, 5, (const int[]){0, 1, 0, 1, 1});
    free(scratch);
    /* off: k = 0 or >= vocab */
    float d[3] = {1, 2, 3};
    loom_sample_mask_top_k(d, 3, 0, NULL);
    loom_sample_mask_top_k(d, 3, 3, NULL);
    assert_kept(d, 3, (const int[]){1, 1, 1});
}
END_TEST

/* probabilities 0.5, 0.3, 0.15, 0.05 as logits (any shift) */
static void probs(float *lg)
{
    static const double p[4] = {0.5, 0.3, 0.15, 0.05};
    for (int i = 0; i < 4; i++)
        lg[i] = (float)(log(p[i]) + 2.0);
}

START_TEST(top_p_keeps_the_smallest_prefix_reaching_p)
{
    float lg[4];
    probs(lg);
    ck_assert_int_eq(loom_sample_mask_top_p(lg, 4, 0.4f, NULL), LOOM_OK);
    assert_kept(lg, 4, (const int[]){1, 0, 0, 0});
    probs(lg);
    loom_sample_mask_top_p(lg, 4, 0.75f, NULL);
    assert_kept(lg, 4, (const int[]){1, 1, 0, 0});
    probs(lg);
    loom_sample_mask_top_p(lg, 4, 0.9f, NULL);
    assert_kept(lg, 4, (const int[]){1, 1, 1, 0});
    probs(lg);
    loom_sample_mask_top_p(lg, 4, 1.0f, NULL);
    assert_kept(lg, 4, (const int[]){1, 1, 1, 1});
    /* the mass is of the finite logits: with 0.5 masked, 0.3 of 0.5 is 0.6 */
    probs(lg);
    lg[0] = -INFINITY;
    loom_sample_mask_top_p(lg, 4, 0.55f, NULL);
    assert_kept(lg, 4, (const int[]){0, 1, 0, 0});
    probs(lg);
    lg[0] = -INFINITY;
    loom_sample_mask_top_p(lg, 4, 0.65f, NULL);
    assert_kept(lg, 4, (const int[]){0, 1, 1, 0});
}
END_TEST

START_TEST(min_p_keeps_tokens_near_the_best)
{
    float lg[4];
    probs(lg);
    /* 0.2 * 0.5 = 0.1: 0.05 goes */
    loom_sample_mask_min_p(lg, 4, 0.2f);
    assert_kept(lg, 4, (const int[]){1, 1, 1, 0});
    probs(lg);
    /* 0.5 * 0.5 = 0.25: 0.3 stays */
    loom_sample_mask_min_p(lg, 4, 0.5f);
    assert_kept(lg, 4, (const int[]){1, 1, 0, 0});
    probs(lg);
    loom_sample_mask_min_p(lg, 4, 1.0f);
    assert_kept(lg, 4, (const int[]){1, 0, 0, 0});
    probs(lg);
    loom_sample_mask_min_p(lg, 4, 0.0f);
    assert_kept(lg, 4, (const int[]){1, 1, 1, 1});
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sample_ref");
    TCase *tc = tcase_create("sample_ref");
    tcase_add_test(tc, philox_matches_random123_known_answers);
    tcase_add_test(tc, keyed_bits_and_noise_come_from_the_block);
    tcase_add_test(tc, draw_is_the_argmax_of_logit_plus_noise);
    tcase_add_test(tc, top_k_keeps_the_k_best_ties_to_the_lower_id);
    tcase_add_test(tc, top_p_keeps_the_smallest_prefix_reaching_p);
    tcase_add_test(tc, min_p_keeps_tokens_near_the_best);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
