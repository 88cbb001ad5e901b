/* The SDK's float32 CPU building blocks (loom/cpu_ops.h) against values
 * worked out by hand or in closed form. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <loom/cpu_ops.h>

#include "testutil.h"

#define NEAR(a, b, tol) ck_assert_double_le(fabs((double)(a) - (b)), (tol))

START_TEST(scalars)
{
    NEAR(loom_cpu_sigmoid(0.0f), 0.5, 1e-7);
    NEAR(loom_cpu_sigmoid(2.0f), 1.0 / (1.0 + exp(-2.0)), 1e-7);
    NEAR(loom_cpu_silu(1.0f), 1.0 / (1.0 + exp(-1.0)), 1e-7);
    NEAR(loom_cpu_silu(-3.0f), -3.0 / (1.0 + exp(3.0)), 1e-7);
    NEAR(loom_cpu_softplus(0.0f), log(2.0), 1e-7);
    NEAR(loom_cpu_softplus(-5.0f), log1p(exp(-5.0)), 1e-8);
    /* above torch's threshold softplus is the identity */
    ck_assert_float_eq(loom_cpu_softplus(30.0f), 30.0f);
}
END_TEST

START_TEST(vectors)
{
    float a[10], b[10];
    for (int i = 0; i < 10; i++)
        a[i] = b[i] = (float)(i + 1);
    ck_assert_float_eq(loom_cpu_dot(a, b, 10), 385.0f); /* sum of squares */
    loom_cpu_axpy(a, 2.0f, b, 10);                      /* a = 3 (i+1) */
    ck_assert_float_eq(a[9], 30.0f);
    loom_cpu_scale(a, 0.5f, 10);
    ck_assert_float_eq(a[3], 6.0f);
    loom_cpu_add(a, b, 10);
    ck_assert_float_eq(a[3], 10.0f);

    float g[3] = {0.0f, 1.0f, -2.0f}, u[3] = {5.0f, 2.0f, 3.0f};
    loom_cpu_swiglu(g, u, 3);
    ck_assert_float_eq(g[0], 0.0f);
    NEAR(g[1], 2.0 / (1.0 + exp(-1.0)), 1e-6);
    NEAR(g[2], 3.0 * -2.0 / (1.0 + exp(2.0)), 1e-6);

    float r[3] = {-1.0f, 0.5f, 3.0f};
    loom_cpu_relu2_inplace(r, 3);
    ck_assert_float_eq(r[0], 0.0f);
    ck_assert_float_eq(r[1], 0.25f);
    ck_assert_float_eq(r[2], 9.0f);

    float s[4] = {1.0f, 2.0f, 0.0f, -1.0f};
    loom_cpu_silu_inplace(s, 4);
    NEAR(s[1], 2.0 / (1.0 + exp(-2.0)), 1e-6);

    float m[5] = {1.0f, 7.0f, 3.0f, 7.0f, -2.0f};
    ck_assert_int_eq(loom_cpu_argmax(m, 5), 1); /* ties to the lower id */
}
END_TEST

START_TEST(norms)
{
    /* x = [3, 4]: mean(x²) = 12.5, so x / rms = [3, 4] / sqrt(12.5) */
    float x[2] = {3.0f, 4.0f}, out[2], w[2] = {2.0f, 0.5f};
    double r = sqrt(12.5);
    loom_cpu_rmsnorm(out, x, NULL, 2, 0.0f);
    NEAR(out[0], 3.0 / r, 1e-6);
    NEAR(out[1], 4.0 / r, 1e-6);
    loom_cpu_rmsnorm(out, x, w, 2, 0.0f);
    NEAR(out[0], 6.0 / r, 1e-6);
    NEAR(out[1], 2.0 / r, 1e-6);
    /* eps joins the mean: sqrt(12.5 + 1.5) */
    loom_cpu_rmsnorm(out, x, NULL, 2, 1.5f);
    NEAR(out[0], 3.0 / sqrt(14.0), 1e-6);
    /* (1 + w) */
    float z[2] = {0.0f, 1.0f};
    loom_cpu_rmsnorm_1p(out, x, z, 2, 0.0f);
    NEAR(out[0], 3.0 / r, 1e-6);
    NEAR(out[1], 8.0 / r, 1e-6);
    /* in place */
    float y[2] = {3.0f, 4.0f};
    loom_cpu_rmsnorm_1p(y, y, z, 2, 0.0f);
    NEAR(y[1], 8.0 / r, 1e-6);
    /* gated: norm, weight, then silu(gate) */
    float gate[2] = {0.0f, 2.0f};
    loom_cpu_rmsnorm_gated(out, x, gate, w, 2, 0.0f);
    ck_assert_float_eq(out[0], 0.0f);
    NEAR(out[1], 2.0 / r * 2.0 / (1.0 + exp(-2.0)), 1e-6);
    /* l2: [3, 4] / 5, eps on the sum */
    float l[2] = {3.0f, 4.0f};
    loom_cpu_l2norm(l, 2, 0.0f);
    NEAR(l[0], 0.6, 1e-7);
    NEAR(l[1], 0.8, 1e-7);
    float l2[2] = {3.0f, 4.0f};
    loom_cpu_l2norm(l2, 2, 11.0f);
    NEAR(l2[0], 3.0 / 6.0, 1e-7);
    /* softmax of log(1), log(2), log(3) is 1/6, 2/6, 3/6 */
    float sm[3] = {0.0f, logf(2.0f), logf(3.0f)};
    loom_cpu_softmax(sm, 3);
    NEAR(sm[0], 1.0 / 6.0, 1e-7);
    NEAR(sm[1], 2.0 / 6.0, 1e-7);
    NEAR(sm[2], 3.0 / 6.0, 1e-7);
    /* a large offset does not overflow */
    float big[2] = {1000.0f, 1000.0f};
    loom_cpu_softmax(big, 2);
    NEAR(big[0], 0.5, 1e-7);
}
END_TEST

START_TEST(rope)
{
    float f[2];
    loom_cpu_rope_inv_freq(f, 4, 10000.0);
    NEAR(f[0], 1.0, 1e-7);
    NEAR(f[1], 0.01, 1e-8); /* 10000^(-2/4) */

    /* NeoX: dim 0 pairs with dim 2 (rot_dim/2 apart); dim 4 is untouched.
     * Two heads of 5 dims. */
    float x[10] = {1, 0, 0, 0, 7, 0, 1, 0, 0, 9};
    loom_cpu_rope_neox(x, 2, 5, 4, f, 3);
    NEAR(x[0], cos(3.0), 1e-6);
    NEAR(x[2], sin(3.0), 1e-6);
    ck_assert_float_eq(x[4], 7.0f);
    NEAR(x[6], cos(0.03), 1e-6); /* head 1, dim 1 with frequency 0.01 */
    NEAR(x[8], sin(0.03), 1e-6);
    ck_assert_float_eq(x[9], 9.0f);
    /* position 0 is the identity */
    float y[4] = {1, 2, 3, 4};
    loom_cpu_rope_neox(y, 1, 4, 4, f, 0);
    ck_assert_float_eq(y[1], 2.0f);
    ck_assert_float_eq(y[3], 4.0f);

    /* GPT-J: dims 0 and 1 pair */
    float z[4] = {1, 0, 0, 1};
    loom_cpu_rope_interleaved(z, 1, 4, 4, f, 2);
    NEAR(z[0], cos(2.0), 1e-6);
    NEAR(z[1], sin(2.0), 1e-6);
    NEAR(z[2], -sin(0.02), 1e-6);
    NEAR(z[3], cos(0.02), 1e-6);
}
END_TEST

START_TEST(kv_store)
{
    loom_cpu_kv kv;
    loom_err err;
    loom_cpu_kv_init(&kv, 3);
    ck_assert_int_eq(kv.len, 0);
    ck_assert_int_eq(loom_cpu_kv_reserve(&kv, 2, &err), LOOM_OK);
    ck_assert_int_ge(kv.cap, 2);
    float k[3] = {1, 2, 3}, v[3] = {4, 5, 6};
    loom_cpu_kv_put(&kv, 0, k, v);
    ck_assert_int_eq(kv.len, 1);
    /* growing far past the first allocation keeps what was written */
    ck_assert_int_eq(loom_cpu_kv_reserve(&kv, 5000, &err), LOOM_OK);
    ck_assert_int_ge(kv.cap, 5000);
    ck_assert_float_eq(kv.k[2], 3.0f);
    ck_assert_float_eq(kv.v[0], 4.0f);
    loom_cpu_kv_put(&kv, 4999, v, k);
    ck_assert_int_eq(kv.len, 5000);
    ck_assert_float_eq(kv.k[4999 * 3 + 1], 5.0f);
    ck_assert_uint_eq(loom_cpu_kv_bytes(&kv),
                      2u * (uint64_t)kv.cap * 3u * sizeof(float));
    loom_cpu_kv_truncate(&kv, 1);
    ck_assert_int_eq(kv.len, 1);
    loom_cpu_kv_truncate(&kv, 10); /* never grows */
    ck_assert_int_eq(kv.len, 1);
    loom_cpu_kv_free(&kv);
    ck_assert_int_eq(kv.cap, 0);
    ck_assert_int_eq(kv.width, 3);
    /* an impossible size is refused with the store unchanged */
    loom_cpu_kv_init(&kv, (int64_t)1 << 40);
    ck_assert_int_eq(loom_cpu_kv_reserve(&kv, (int64_t)1 << 30, &err),
                     LOOM_ERR_NOMEM);
    ck_assert_ptr_null(kv.k);
    ck_assert_int_eq(kv.cap, 0);
    ck_assert_ptr_nonnull(strstr(err.msg, "KV cache"));
}
END_TEST

START_TEST(attention)
{
    /* one position: the output is its value */
    float q[2] = {1, 0}, k1[2] = {5, 5}, v1[2] = {3, -1}, out[2], sc[4];
    loom_cpu_attend_head(out, q, k1, v1, 1, 2, 2, 1.0f, sc);
    NEAR(out[0], 3.0, 1e-7);
    NEAR(out[1], -1.0, 1e-7);
    /* scores 0 and log 3: weights 1/4 and 3/4 */
    float k[4] = {0, 0, logf(3.0f), 0}, v[4] = {4, 0, 0, 8};
    loom_cpu_attend_head(out, q, k, v, 2, 2, 2, 1.0f, sc);
    NEAR(out[0], 1.0, 1e-6);
    NEAR(out[1], 6.0, 1e-6);
    loom_cpu_attend_head_blocked(out, q, k, v, 2, 2, 2, 1.0f);
    NEAR(out[0], 1.0, 1e-6);
    NEAR(out[1], 6.0, 1e-6);
    /* scale multiplies the scores: scale 0.5 on log 9 is log 3 again */
    float k9[4] = {0, 0, logf(9.0f), 0};
    loom_cpu_attend_head(out, q, k9, v, 2, 2, 2, 0.5f, sc);
    NEAR(out[1], 6.0, 1e-6);
}
END_TEST

START_TEST(attention_blocked_long)
{
    /* 1000 equal keys over several 256-blocks: the mean of v_p = p */
    enum { N = 1000 };
    float *k = calloc(N * 2, sizeof(float)), *v = calloc(N * 2, sizeof(float));
    float q[2] = {0.3f, -0.2f}, out[2];
    for (int p = 0; p < N; p++) {
        k[2 * p] = 1.0f;
        v[2 * p] = (float)p;
        v[2 * p + 1] = 1.0f;
    }
    loom_cpu_attend_head_blocked(out, q, k, v, N, 2, 2, 1.0f);
    NEAR(out[0], (N - 1) / 2.0, 1e-3);
    NEAR(out[1], 1.0, 1e-6);
    /* growing scores across blocks (the running max moves): weights
     * proportional to e^(p/100); compare with the two-pass version */
    for (int p = 0; p < N; p++)
        k[2 * p] = (float)p / 100.0f;
    float q1[2] = {1, 0}, ref[2], *sc = malloc(N * sizeof(float));
    loom_cpu_attend_head(ref, q1, k, v, N, 2, 2, 1.0f, sc);
    loom_cpu_attend_head_blocked(out, q1, k, v, N, 2, 2, 1.0f);
    NEAR(out[0], ref[0], 1e-3);
    double num = 0, den = 0;
    for (int p = 0; p < N; p++) {
        num += p * exp(p / 100.0);
        den += exp(p / 100.0);
    }
    NEAR(out[0], num / den, 1e-2);
    free(sc);
    free(k);
    free(v);
}
END_TEST

/* loom_cpu_attend_chunk (a prompt chunk's rows, four at a time) against
 * loom_cpu_attend_head_blocked row by row. Bound: its scores sum in
 * another order, each off by at most delta = 2 hd 2^-24 scale max_j
 * sum_i |q_i k_ji| (two float32 dot products of hd terms); weights
 * e^(s_j - m) / sum then move by a factor within e^(+-2 delta), the output
 * by expm1(2 delta) max|v|, plus the rounding of two float32 weighted sums
 * of n_ctx terms, 2 n_ctx 2^-24 max|v|. */
START_TEST(attention_chunk_bound)
{
    enum { N = 700, W = 260 };
    float *k = malloc((size_t)N * W * sizeof(float));
    float *v = malloc((size_t)N * W * sizeof(float));
    float *q = malloc((size_t)N * W * sizeof(float));
    float *out = malloc((size_t)N * W * sizeof(float)), ref[W];
    uint32_t x = 11;
    for (int i = 0; i < N * W; i++) {
        x = x * 1664525u + 1013904223u;
        k[i] = (float)((x >> 8) & 0xffff) / 65536.0f - 0.5f;
        x = x * 1664525u + 1013904223u;
        v[i] = (float)((x >> 8) & 0xffff) / 32768.0f - 1.0f;
        x = x * 1664525u + 1013904223u;
        q[i] = (float)((x >> 8) & 0xffff) / 8192.0f - 4.0f;
    }
    static const int64_t dims[] = {2, 7, 64, 129, 256};
    static const int64_t shapes[][2] = {{1, 0},    {3, 5},    {4, 0},
                                        {17, 300}, {40, 250}, {N - 300, 300}};
    float scale = 0.0625f;
    for (size_t di = 0; di < sizeof dims / sizeof *dims; di++)
        for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
            int64_t hd = dims[di], n = shapes[si][0], pos0 = shapes[si][1];
            loom_cpu_attend_chunk(out, W, q, W, n, pos0, k, v, W, hd, scale);
            for (int64_t r = 0; r < n; r++) {
                int64_t ctx = pos0 + r + 1;
                const float *qr = q + r * W;
                loom_cpu_attend_head_blocked(ref, qr, k, v, ctx, W, hd, scale);
                double most = 0, vmax = 0;
                for (int64_t j = 0; j < ctx; j++) {
                    double a = 0;
                    for (int64_t i = 0; i < hd; i++) {
                        a += fabs((double)qr[i] * k[j * W + i]);
                        vmax = fmax(vmax, fabs(v[j * W + i]));
                    }
                    most = fmax(most, a);
                }
                double delta = 2.0 * hd * ldexp(1.0, -24) * scale * most;
                double bound =
                    (expm1(2 * delta) + 2.0 * ctx * ldexp(1.0, -24)) * vmax;
                for (int64_t i = 0; i < hd; i++)
                    ck_assert_msg(fabs(out[r * W + i] - ref[i]) <= bound,
                                  "hd %lld, row %lld at %lld: %g vs %g "
                                  "(bound %g)",
                                  (long long)hd, (long long)r,
                                  (long long)(pos0 + r), out[r * W + i], ref[i],
                                  bound);
            }
        }
    free(k);
    free(v);
    free(q);
    free(out);
}
END_TEST

/* loom_cpu_chunk_item visits every (block, head) once, and with causal
 * costs (block b costs b + 1, (nb + 1) / 2 on average) each of the pool's
 * equal runs of items costs its length times the average within one
 * block's cost, where block-major order gives the last run the dearest
 * blocks (16 blocks of 8 heads on 16 threads: 8 against 128). */
START_TEST(chunk_items_balance)
{
    static const int64_t shapes[][3] = {{16, 8, 16}, {15, 8, 16}, {64, 2, 16},
                                        {7, 8, 16},  {5, 14, 16}, {1, 3, 2}};
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        int64_t nb = shapes[c][0], nh = shapes[c][1], parts = shapes[c][2];
        int64_t n = nb * nh;
        char seen[64 * 16] = {0};
        for (int64_t p = 0; p < parts; p++) {
            int64_t a = n * p / parts, z = n * (p + 1) / parts, cost = 0;
            for (int64_t i = a; i < z; i++) {
                int64_t b, h;
                loom_cpu_chunk_item(i, nb, &b, &h);
                ck_assert(b >= 0 && b < nb && h >= 0 && h < nh);
                ck_assert_int_eq(seen[b * nh + h], 0);
                seen[b * nh + h] = 1;
                cost += b + 1;
            }
            /* twice the distance from the average, in integers */
            int64_t d = 2 * cost - (z - a) * (nb + 1);
            ck_assert_msg(d <= 2 * nb && d >= -2 * nb,
                          "shape %zu, run %lld: cost %lld for %lld items", c,
                          (long long)p, (long long)cost, (long long)(z - a));
        }
        for (int64_t i = 0; i < n; i++)
            ck_assert_int_eq(seen[i], 1);
    }
}
END_TEST

START_TEST(attention_gqa)
{
    /* 4 query heads over 2 KV heads of dim 2: heads 0,1 read KV head 0 */
    loom_cpu_kv kv;
    loom_err err;
    loom_cpu_kv_init(&kv, 4);
    ck_assert_int_eq(loom_cpu_kv_reserve(&kv, 1, &err), LOOM_OK);
    float k[4] = {1, 0, 0, 1}, v[4] = {10, 11, 20, 21};
    loom_cpu_kv_put(&kv, 0, k, v);
    float q[8] = {1, 0, 0, 1, 1, 1, 2, 2}, out[8], sc[1];
    loom_cpu_attend_row(out, q, &kv, 1, 4, 2, 2, 1.0f, sc);
    float want[8] = {10, 11, 10, 11, 20, 21, 20, 21};
    for (int i = 0; i < 8; i++)
        NEAR(out[i], want[i], 1e-6);
    loom_cpu_kv_free(&kv);
}
END_TEST

START_TEST(conv)
{
    /* kernel 3, w = [1, 2, 3] on channel 0 and [0, 0, 1] on channel 1;
     * inputs x_t = t + 1: out_t = x_{t-2} + 2 x_{t-1} + 3 x_t, zeros before */
    float w[6] = {1, 2, 3, 0, 0, 1}, tail[4] = {0}, bias[2] = {0.5f, 0};
    float want[4] = {3, 8, 14, 20};
    for (int t = 0; t < 4; t++) {
        float x[2] = {(float)(t + 1), (float)(-t)}, out[2];
        loom_cpu_conv_step(out, x, tail, w, NULL, 2, 3);
        ck_assert_float_eq(out[0], want[t]);
        ck_assert_float_eq(out[1], (float)(-t));
    }
    /* the tail holds the last two inputs, oldest first */
    ck_assert_float_eq(tail[0], 3.0f);
    ck_assert_float_eq(tail[2], 4.0f);
    ck_assert_float_eq(tail[1], -2.0f);
    ck_assert_float_eq(tail[3], -3.0f);
    float x[2] = {5, 0}, out[2];
    loom_cpu_conv_step(out, x, tail, w, bias, 2, 3);
    ck_assert_float_eq(out[0], 3 + 8 + 15 + 0.5f);
    /* kernel 1: no tail at all */
    float w1[1] = {2}, x1[1] = {3}, o1[1];
    loom_cpu_conv_step(o1, x1, NULL, w1, NULL, 1, 1);
    ck_assert_float_eq(o1[0], 6.0f);
    /* channel 1 alone (the range form) gives what the full step gave */
    float tr[4] = {0}, o2[2] = {7, 7};
    for (int t = 0; t < 4; t++) {
        float xr[2] = {(float)(t + 1), (float)(-t)};
        loom_cpu_conv_step_range(o2, xr, tr, w, bias, 1, 1, 2, 3);
        ck_assert_float_eq(o2[1], (float)(-t));
    }
    ck_assert_float_eq(o2[0], 7.0f); /* channel 0 untouched */
    ck_assert_float_eq(tr[0], 0.0f);
    ck_assert_float_eq(tr[1], -2.0f);
    ck_assert_float_eq(tr[3], -3.0f);
}
END_TEST

/* Many rows at once: bit for bit the per-row steps (outputs and the tail
 * after), across the 64-channel blocks, with and without a bias, for
 * kernels up to the transposed buffer's 8 and past it. */
START_TEST(conv_rows_equal_steps)
{
    enum { CH = 80, C0 = 5, N = 70, LD = CH + 3, ROWS = 40 };
    static float x[ROWS * LD], w[CH * 9], bias[CH], o1[ROWS * LD],
        o2[ROWS * LD], t1[8 * CH], t2[8 * CH];
    uint32_t r = 12345;
#define RND()                                                                  \
    ((float)((r = r * 1103515245u + 12345u) >> 8) / 16777216.0f - 0.5f)
    for (int i = 0; i < ROWS * LD; i++)
        x[i] = RND();
    for (int i = 0; i < CH * 9; i++)
        w[i] = RND();
    for (int i = 0; i < CH; i++)
        bias[i] = RND();
    static const int kernels[] = {1, 2, 4, 5, 8, 9};
    static const int nrows[] = {1, 2, 3, 7, ROWS};
    for (size_t ki = 0; ki < sizeof kernels / sizeof *kernels; ki++)
        for (size_t ri = 0; ri < sizeof nrows / sizeof *nrows; ri++)
            for (int bi = 0; bi < 2; bi++) {
                int K = kernels[ki], R = nrows[ri];
                const float *bp = bi ? bias : NULL;
                for (int i = 0; i < (K - 1) * CH; i++)
                    t1[i] = t2[i] = RND();
                memset(o1, 0, sizeof o1);
                memset(o2, 0, sizeof o2);
                for (int t = 0; t < R; t++)
                    loom_cpu_conv_step_range(o1 + t * LD, x + t * LD, t1, w, bp,
                                             C0, N, CH, K);
                loom_cpu_conv_rows(o2, LD, x, LD, t2, w, bp, C0, N, CH, K, R);
                ck_assert_msg(memcmp(o1, o2, sizeof o1) == 0,
                              "kernel %d, %d rows, bias %d: outputs differ", K,
                              R, bi);
                ck_assert_msg(
                    memcmp(t1, t2, (size_t)(K - 1) * CH * sizeof(float)) == 0,
                    "kernel %d, %d rows, bias %d: tails differ", K, R, bi);
            }
#undef RND
}
END_TEST

START_TEST(tensors)
{
    uint16_t bf[3] = {loom_f32_to_bf16(1.5f), loom_f32_to_bf16(-2.0f),
                      loom_f32_to_bf16(0.25f)};
    loom_tensor t = {sizeof t, "x.weight", LOOM_DTYPE_BF16, 1,
                     {3},      bf,         sizeof bf};
    float out[3];
    loom_err err;
    ck_assert_int_eq(loom_cpu_tensor_f32(&t, out, 3, &err), LOOM_OK);
    ck_assert_float_eq(out[0], 1.5f);
    ck_assert_float_eq(out[1], -2.0f);
    ck_assert_float_eq(out[2], 0.25f);
    uint16_t h[1] = {loom_f32_to_f16(-0.5f)};
    ck_assert_float_eq(loom_cpu_load_f32(h, LOOM_DTYPE_F16, 0), -0.5f);
    float f[1] = {7.0f};
    ck_assert_float_eq(loom_cpu_load_f32(f, LOOM_DTYPE_F32, 0), 7.0f);
    /* wrong count and wrong dtype are named errors */
    ck_assert_int_eq(loom_cpu_tensor_f32(&t, out, 2, &err), LOOM_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "x.weight"));
    ck_assert_ptr_nonnull(strstr(err.msg, "3 elements"));
    t.dtype = LOOM_DTYPE_I32;
    ck_assert_int_eq(loom_cpu_tensor_f32(&t, out, 3, &err), LOOM_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "dtype"));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cpu_ops");
    TCase *tc = tcase_create("ops");
    tcase_add_test(tc, scalars);
    tcase_add_test(tc, vectors);
    tcase_add_test(tc, norms);
    tcase_add_test(tc, rope);
    tcase_add_test(tc, kv_store);
    tcase_add_test(tc, attention);
    tcase_add_test(tc, attention_blocked_long);
    tcase_add_test(tc, attention_gqa);
    tcase_add_test(tc, attention_chunk_bound);
    tcase_add_test(tc, chunk_items_balance);
    tcase_add_test(tc, conv);
    tcase_add_test(tc, conv_rows_equal_steps);
    tcase_add_test(tc, tensors);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
