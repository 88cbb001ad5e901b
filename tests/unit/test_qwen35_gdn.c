/* The chunkwise gated delta rule of the Qwen3.5 plugin (q35_gdn_chunk,
 * plugins/qwen35/gdn_chunk.c) against the row-by-row recurrence of
 * docs/specs/qwen35.md 2.6 worked out in float64 on the same inputs. The
 * plugin's files are compiled in (as llama2.c's test.c includes run.c):
 * their functions are internal to the plugin's module. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../plugins/qwen35/gdn.c"
#include "../../plugins/qwen35/gdn_chunk.c"

#include "testutil.h"

/* A fixed stream of uniforms in [0, 1) (xorshift64*): the same inputs on
 * every platform. */
static double uni(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return (double)((*s * 2685821657736338717ull) >> 11) * 0x1p-53;
}

/* n rows of one head as the forward lays them out: each row [q | k | v |
 * pad] (pad: not a dense layout, as conv_out's rows are not), q and k
 * l2-normalised and q scaled by dk^-0.5; log decays in [g_lo, 0]; keys
 * `share` of the way toward one common direction (share near 1: nearly
 * equal keys, the substitution's hardest case). */
typedef struct gdn_case {
    int64_t dk, dv, n, ld;
    float *rows, *decay, *beta, *S0;
} gdn_case;

static gdn_case make_case(int64_t dk, int64_t dv, int64_t n, double g_lo,
                          double share, uint64_t seed)
{
    gdn_case c = {dk, dv, n, 2 * dk + dv + 3, NULL, NULL, NULL, NULL};
    c.rows = calloc((size_t)(n * c.ld), sizeof(float));
    c.decay = malloc((size_t)n * sizeof(float));
    c.beta = malloc((size_t)n * sizeof(float));
    c.S0 = malloc((size_t)(dk * dv) * sizeof(float));
    ck_assert(c.rows && c.decay && c.beta && c.S0);
    uint64_t s = seed;
    double *common = malloc((size_t)dk * sizeof(double));
    for (int64_t e = 0; e < dk; e++)
        common[e] = uni(&s) - 0.5;
    for (int64_t t = 0; t < n; t++) {
        float *q = c.rows + t * c.ld, *k = q + dk, *v = k + dk;
        double sq = 0, sk = 0;
        for (int64_t e = 0; e < dk; e++) {
            double qe = uni(&s) - 0.5;
            double ke = share * common[e] + (1 - share) * (uni(&s) - 0.5);
            q[e] = (float)qe;
            k[e] = (float)ke;
            sq += qe * qe;
            sk += ke * ke;
        }
        for (int64_t e = 0; e < dk; e++) {
            q[e] = (float)(q[e] / sqrt(sq) / sqrt((double)dk));
            k[e] = (float)(k[e] / sqrt(sk));
        }
        for (int64_t j = 0; j < dv; j++)
            v[j] = (float)(2 * uni(&s) - 1);
        c.decay[t] = (float)exp(g_lo * uni(&s));
        c.beta[t] = (float)uni(&s);
    }
    for (int64_t i = 0; i < dk * dv; i++)
        c.S0[i] = (float)(uni(&s) - 0.5);
    free(common);
    return c;
}

static void free_case(gdn_case *c)
{
    free(c->rows);
    free(c->decay);
    free(c->beta);
    free(c->S0);
}

/* The recurrence row by row in double: S = decay S; d = (v - S^T k) beta;
 * S += k d^T; o = S^T q. */
static void reference(const gdn_case *c, double *S, double *o)
{
    int64_t dk = c->dk, dv = c->dv;
    double *d = malloc((size_t)dv * sizeof(double));
    for (int64_t i = 0; i < dk * dv; i++)
        S[i] = c->S0[i];
    for (int64_t t = 0; t < c->n; t++) {
        const float *q = c->rows + t * c->ld, *k = q + dk, *v = k + dk;
        for (int64_t i = 0; i < dk * dv; i++)
            S[i] *= c->decay[t];
        for (int64_t j = 0; j < dv; j++) {
            double kv = 0;
            for (int64_t e = 0; e < dk; e++)
                kv += S[e * dv + j] * k[e];
            d[j] = (v[j] - kv) * c->beta[t];
        }
        for (int64_t e = 0; e < dk; e++)
            for (int64_t j = 0; j < dv; j++)
                S[e * dv + j] += k[e] * d[j];
        for (int64_t j = 0; j < dv; j++) {
            double oj = 0;
            for (int64_t e = 0; e < dk; e++)
                oj += S[e * dv + j] * q[e];
            o[t * dv + j] = oj;
        }
    }
    free(d);
}

/* max |got - want| / max |want| over n values, got ld apart in rows of w */
static double err_of(const float *got, int64_t ld, const double *want,
                     int64_t rows, int64_t w)
{
    double e = 0, m = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < w; j++) {
            e = fmax(e, fabs(got[r * ld + j] - want[r * w + j]));
            m = fmax(m, fabs(want[r * w + j]));
        }
    return e / m;
}

/* The outputs and the final state within TOL of the largest reference
 * value. Each output of a block is, in float32, a sum of dk products
 * (S^T q) and up to Q35_GDN_CHUNK more (M d), each delta one of as many
 * (the substitution), the state one of Q35_GDN_CHUNK per block: at most
 * dk + Q35_GDN_CHUNK = 160 terms, whose worst-case rounding bound is
 * 160 * 2^-24 = 9.5e-6 relative to the sum of the terms' magnitudes. On
 * these cases the row form (q35_gdn_step, printed alongside) comes to
 * 0.6e-7 .. 5.4e-7 and the chunked form to 0.6e-7 .. 6.1e-7. TOL = 2e-5
 * keeps the worst case with room for the few blocks of carried state, and
 * still catches a decay off by one row (3e-3 where decays are near 1,
 * 1e-1 elsewhere). */
#define TOL 2e-5

static void check(int64_t dk, int64_t dv, int64_t n, double g_lo, double share,
                  uint64_t seed)
{
    gdn_case c = make_case(dk, dv, n, g_lo, share, seed);
    double *S_ref = malloc((size_t)(dk * dv) * sizeof(double));
    double *o_ref = malloc((size_t)(n * dv) * sizeof(double));
    reference(&c, S_ref, o_ref);

    /* the chunked form, outputs ld_o > dv apart (as the forward's rows) */
    int64_t ld_o = dv + 5;
    float *S = malloc((size_t)(dk * dv) * sizeof(float));
    float *o = malloc((size_t)(n * ld_o) * sizeof(float));
    float *work = malloc((size_t)q35_gdn_chunk_floats(dk, dv) * sizeof(float));
    ck_assert(S && o && work && S_ref && o_ref);
    memcpy(S, c.S0, (size_t)(dk * dv) * sizeof(float));
    q35_gdn_rows x = {.n = n,
                      .q = c.rows,
                      .k = c.rows + dk,
                      .v = c.rows + 2 * dk,
                      .ld_qkv = c.ld,
                      .decay = c.decay,
                      .beta = c.beta,
                      .ld_db = 1,
                      .o = o,
                      .ld_o = ld_o};
    q35_gdn_chunk(S, &x, dk, dv, work);
    double eo = err_of(o, ld_o, o_ref, n, dv);
    double es = err_of(S, dv, S_ref, dk, dv);

    /* the row form, for scale */
    float *S1 = malloc((size_t)(dk * dv) * sizeof(float));
    float *o1 = malloc((size_t)(n * dv) * sizeof(float));
    float *tmp = malloc((size_t)dv * sizeof(float));
    ck_assert(S1 && o1 && tmp);
    memcpy(S1, c.S0, (size_t)(dk * dv) * sizeof(float));
    for (int64_t t = 0; t < n; t++) {
        const float *q = c.rows + t * c.ld;
        q35_gdn_step(S1, q, q + dk, q + 2 * dk, c.decay[t], c.beta[t],
                     o1 + t * dv, dk, dv, tmp);
    }
    fprintf(stderr,
            "dk %lld dv %lld n %lld g >= %g share %g: chunk o %.2e S %.2e, "
            "rows o %.2e S %.2e\n",
            (long long)dk, (long long)dv, (long long)n, g_lo, share, eo, es,
            err_of(o1, dv, o_ref, n, dv), err_of(S1, dv, S_ref, dk, dv));
    ck_assert_msg(eo <= TOL && es <= TOL,
                  "dk %lld dv %lld n %lld: output off by %g, state by %g",
                  (long long)dk, (long long)dv, (long long)n, eo, es);
    free(S1);
    free(o1);
    free(tmp);
    free(S);
    free(o);
    free(work);
    free(S_ref);
    free(o_ref);
    free_case(&c);
}

/* Lengths around the block size: one row, under a block, just past one,
 * several with a short last block, and a whole number of blocks. */
static const int64_t lengths[] = {1,
                                  7,
                                  Q35_GDN_CHUNK - 1,
                                  Q35_GDN_CHUNK + 1,
                                  3 * Q35_GDN_CHUNK + 5,
                                  2 * Q35_GDN_CHUNK};
enum { N_LENGTHS = sizeof lengths / sizeof lengths[0] };

/* The fixtures' head shapes (tests/fixtures/models/qwen35-*: dk 16, dv 16,
 * 24 and 32) and the released models' 128 x 128. */
START_TEST(chunk_fixture_heads)
{
    for (int i = 0; i < N_LENGTHS; i++) {
        check(16, 16, lengths[i], -2.0, 0.0, 1 + (uint64_t)i);
        check(16, 24, lengths[i], -2.0, 0.0, 11 + (uint64_t)i);
        check(16, 32, lengths[i], -2.0, 0.0, 21 + (uint64_t)i);
    }
}
END_TEST

START_TEST(chunk_model_heads)
{
    for (int i = 0; i < N_LENGTHS; i++)
        check(128, 128, lengths[i], -2.0, 0.0, 31 + (uint64_t)i);
}
END_TEST

/* Decays near 1 (g >= -0.01, the state keeps everything), strong ones
 * (g down to -20, e^(G_i - G_j) underflowing to 0 within a block), and
 * nearly equal keys (each k_i.k_j near 1). */
START_TEST(chunk_hard_inputs)
{
    int64_t n = 2 * Q35_GDN_CHUNK + 9;
    check(128, 128, n, -0.01, 0.0, 41);
    check(128, 128, n, -20.0, 0.0, 42);
    check(128, 128, n, -0.5, 0.9, 43);
    check(16, 24, n, -0.01, 0.9, 44);
}
END_TEST

/* Each width of the product kernel (gdn_chunk_mm.h) the CPU can run,
 * against a double sum, on shapes that leave every kind of tail: rows short
 * of a tile, a lone last vector, columns past the last vector; with keep 0
 * (out only written: NaN there must not leak in) and keep 0.5. Every width
 * sums each element in the same order (a lane per column, e ascending, no
 * fused multiply-add in ISO C), so they agree bit for bit: a machine's
 * prompt results do not depend on its vector width. */
typedef void (*mm_fn)(float *, int64_t, float, const float *, int64_t,
                      const float *, int64_t, int64_t, int64_t, int64_t);
enum { MM_ROWS = 13, MM_INNER = 37, MM_COLS = 45 };
enum { MM_LDA = 40, MM_LDB = 47, MM_LDO = 50 };

static void run_mm(mm_fn mm, float keep, float *out)
{
    static float a[MM_ROWS * MM_LDA], b[MM_INNER * MM_LDB];
    uint64_t s = 7;
    for (int i = 0; i < MM_ROWS * MM_LDA; i++)
        a[i] = (float)(uni(&s) - 0.5);
    for (int i = 0; i < MM_INNER * MM_LDB; i++)
        b[i] = (float)(uni(&s) - 0.5);
    for (int i = 0; i < MM_ROWS * MM_LDO; i++)
        out[i] = keep == 0.0f ? NAN : (float)(uni(&s) - 0.5);
    double want[MM_ROWS * MM_COLS];
    for (int r = 0; r < MM_ROWS; r++)
        for (int j = 0; j < MM_COLS; j++) {
            double sum = keep * (keep == 0.0f ? 0.0 : out[r * MM_LDO + j]);
            for (int e = 0; e < MM_INNER; e++)
                sum += (double)a[r * MM_LDA + e] * b[e * MM_LDB + j];
            want[r * MM_COLS + j] = sum;
        }
    mm(out, MM_LDO, keep, a, MM_LDA, b, MM_LDB, MM_ROWS, MM_INNER, MM_COLS);
    /* 37 products of magnitude <= 1/4, and the kept term: within
     * 38 2^-24 (37 / 4 + 1/4) */
    for (int r = 0; r < MM_ROWS; r++) {
        for (int j = 0; j < MM_COLS; j++)
            ck_assert_msg(fabs(out[r * MM_LDO + j] - want[r * MM_COLS + j]) <=
                              2.2e-5,
                          "keep %g: (%d, %d) is %g, not %g", (double)keep, r, j,
                          (double)out[r * MM_LDO + j], want[r * MM_COLS + j]);
        /* the columns past cols are left alone */
        for (int j = MM_COLS; j < MM_LDO; j++)
            ck_assert(keep == 0.0f ? isnan(out[r * MM_LDO + j])
                                   : fabs(out[r * MM_LDO + j]) <= 0.5);
    }
}

START_TEST(mm_every_width)
{
    static float base[MM_ROWS * MM_LDO], out[MM_ROWS * MM_LDO];
    mm_fn wider[2] = {NULL, NULL};
#ifdef Q35_CHUNK_X86
    if (__builtin_cpu_supports("avx512f"))
        wider[0] = q35_mm16;
    if (__builtin_cpu_supports("avx2"))
        wider[1] = q35_mm8;
#endif
    for (int pass = 0; pass < 2; pass++) {
        float keep = pass == 0 ? 0.0f : 0.5f;
        run_mm(q35_mm4, keep, base);
        for (int w = 0; w < 2; w++) {
            if (!wider[w])
                continue;
            run_mm(wider[w], keep, out);
            for (int i = 0; i < MM_ROWS * MM_LDO; i++)
                ck_assert_msg(memcmp(&out[i], &base[i], sizeof(float)) == 0,
                              "width %d differs from q35_mm4 at %d", w, i);
        }
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("qwen35_gdn");
    TCase *tc = tcase_create("chunk");
    tcase_add_test(tc, chunk_fixture_heads);
    tcase_add_test(tc, chunk_model_heads);
    tcase_add_test(tc, chunk_hard_inputs);
    tcase_add_test(tc, mm_every_width);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
